//! File transfer over a stream-mode connection, with an end-to-end integrity verdict.
//!
//! When both ends are slipstream and agreed on it in the handshake
//! ([`Connection::digest_agreed`]), the sender appends a 48-byte trailer after the content:
//! `b"SLPSTRM1"`, the content length (u64 big-endian) and the content's 32-byte BLAKE3 hash.
//! The receiver holds back the last 48 bytes of the stream and checks them at the end: a
//! transfer is [`Verdict::Verified`] only when length and hash match. With a plain SRT peer the
//! only evidence of completeness is the peer's clean shutdown: [`Verdict::Unverified`].
//!
//! This module owns the trailer format and the send/receive loops; files are written to
//! `OUT.part` and renamed only on success.

use crate::api::Connection;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// First bytes of the digest trailer.
pub const TRAILER_MAGIC: &[u8; 8] = b"SLPSTRM1";
/// Length of the digest trailer: magic, length, BLAKE3.
pub const TRAILER_LEN: usize = 48;
/// Read and write granularity: small enough that a piece read (or received) is still in
/// cache when it is hashed and written (or queued).
const CHUNK: usize = 1 << 20;
/// A sender gives up when nothing more is acknowledged for this long.
const ACK_IDLE: Duration = Duration::from_secs(60);

/// What the receiver can say about the data it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Length and BLAKE3 hash match the sender's trailer.
    Verified {
        /// Content bytes.
        bytes: u64,
        /// BLAKE3 of the content.
        blake3: [u8; 32],
    },
    /// The peer offers no end-to-end digest; the stream ended with a clean shutdown.
    Unverified {
        /// Content bytes.
        bytes: u64,
    },
}

impl Verdict {
    /// Content bytes received.
    pub fn bytes(&self) -> u64 {
        match *self {
            Verdict::Verified { bytes, .. } | Verdict::Unverified { bytes } => bytes,
        }
    }
    /// True when the digest was checked.
    pub fn is_verified(&self) -> bool {
        matches!(self, Verdict::Verified { .. })
    }
}

/// What the sender sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendReport {
    /// Content bytes (trailer excluded).
    pub bytes: u64,
    /// BLAKE3 of the content.
    pub blake3: [u8; 32],
    /// Whether the digest trailer was sent (the peer agreed to it).
    pub digest_sent: bool,
}

/// Builds the trailer for `len` bytes hashing to `hash`.
pub fn trailer(len: u64, hash: &[u8; 32]) -> [u8; TRAILER_LEN] {
    let mut t = [0u8; TRAILER_LEN];
    t[..8].copy_from_slice(TRAILER_MAGIC);
    t[8..16].copy_from_slice(&len.to_be_bytes());
    t[16..].copy_from_slice(hash);
    t
}

fn send_all(conn: &Connection, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let n = conn.send(data)?;
        data = &data[n..];
    }
    Ok(())
}

/// Sends everything `src` yields, then the trailer if agreed, then closes gracefully. Returns
/// only when the peer acknowledged everything (`close()` succeeded). `progress` gets the
/// content bytes queued so far.
pub fn send_stream<R: Read>(
    conn: &Connection,
    mut src: R,
    mut progress: impl FnMut(u64),
) -> io::Result<SendReport> {
    let mut buf = vec![0u8; CHUNK];
    let mut hasher = blake3::Hasher::new();
    let mut total = 0u64;
    loop {
        // Fill the chunk: large writes keep the lock traffic low.
        let mut n = 0;
        while n < buf.len() {
            match src.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        send_all(conn, &buf[..n])?;
        total += n as u64;
        progress(total);
    }
    let hash: [u8; 32] = hasher.finalize().into();
    let digest_sent = conn.digest_agreed();
    if digest_sent {
        send_all(conn, &trailer(total, &hash))?;
    }
    // The engine's linger bounds close() in absolute time; a slow but progressing transfer
    // must not fail on it, so wait for the acknowledgements first and judge by progress.
    conn.wait_acknowledged(ACK_IDLE)?;
    conn.close()?;
    Ok(SendReport {
        bytes: total,
        blake3: hash,
        digest_sent,
    })
}

/// Sends the file at `path`; see [`send_stream`].
pub fn send_file(
    conn: &Connection,
    path: &Path,
    progress: impl FnMut(u64),
) -> io::Result<SendReport> {
    let f = File::open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    send_stream(conn, f, progress)
}

/// Checks a held-back trailer against what was received.
fn check_trailer(t: &[u8], written: u64, hash: &[u8; 32]) -> Result<(), String> {
    if t.len() != TRAILER_LEN || &t[..8] != TRAILER_MAGIC {
        return Err("stream ended without the integrity trailer (truncated)".into());
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&t[8..16]);
    let len = u64::from_be_bytes(len);
    if len != written {
        return Err(format!(
            "length mismatch: sender sent {len} bytes, received {written}"
        ));
    }
    if &t[16..] != hash {
        return Err("BLAKE3 mismatch: the received data is corrupt".into());
    }
    Ok(())
}

/// Receives the whole stream into `dst` and judges it. Fails when the stream ends abnormally
/// (unless the digest proves it complete) or the digest does not match. `progress` gets the
/// content bytes written so far.
pub fn recv_stream<W: Write>(
    conn: &Connection,
    mut dst: W,
    mut progress: impl FnMut(u64),
) -> io::Result<Verdict> {
    let digest = conn.digest_agreed();
    let mut buf = vec![0u8; CHUNK + TRAILER_LEN];
    let mut held = 0usize;
    let mut written = 0u64;
    let mut hasher = blake3::Hasher::new();
    let end = loop {
        let n = match conn.recv(&mut buf[held..]) {
            Ok(0) => break Ok(()),
            Ok(n) => n,
            Err(e) => break Err(e),
        };
        held += n;
        // Hold back what could be the trailer; write the rest.
        let keep = if digest { held.min(TRAILER_LEN) } else { 0 };
        let w = held - keep;
        if w > 0 {
            dst.write_all(&buf[..w])?;
            hasher.update(&buf[..w]);
            written += w as u64;
            buf.copy_within(w..held, 0);
            held = keep;
            progress(written);
        }
    };
    dst.flush()?;
    if !digest {
        return match end {
            Ok(()) => Ok(Verdict::Unverified { bytes: written }),
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("transfer incomplete after {written} bytes: {e}"),
            )),
        };
    }
    let hash: [u8; 32] = hasher.finalize().into();
    match (check_trailer(&buf[..held], written, &hash), end) {
        // A valid trailer proves completeness even if the shutdown itself was lost.
        (Ok(()), _) => Ok(Verdict::Verified {
            bytes: written,
            blake3: hash,
        }),
        (Err(why), Ok(())) => Err(io::Error::new(io::ErrorKind::InvalidData, why)),
        (Err(_), Err(e)) => Err(io::Error::new(
            e.kind(),
            format!("transfer incomplete after {written} bytes: {e}"),
        )),
    }
}

/// The temporary name a file is received under.
pub fn part_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

/// Receives into `out`: writes `out.part`, syncs it and renames it on success; removes it on
/// failure. Refuses to replace an existing `out` unless `force`.
pub fn recv_file(
    conn: &Connection,
    out: &Path,
    force: bool,
    progress: impl FnMut(u64),
) -> io::Result<Verdict> {
    if !force && out.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists (use --force to replace it)", out.display()),
        ));
    }
    let part = part_path(out);
    let f = File::create(&part)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", part.display())))?;
    let result = recv_stream(conn, &f, progress).and_then(|v| {
        f.sync_all()?;
        fs::rename(&part, out)?;
        Ok(v)
    });
    if result.is_err() {
        let _ = fs::remove_file(&part);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailer_checks() {
        let h: [u8; 32] = blake3::hash(b"abc").into();
        let t = trailer(3, &h);
        assert!(check_trailer(&t, 3, &h).is_ok());
        assert!(check_trailer(&t, 4, &h).is_err());
        assert!(check_trailer(&t[..47], 3, &h).is_err());
        let other: [u8; 32] = blake3::hash(b"abd").into();
        assert!(check_trailer(&t, 3, &other).is_err());
        let mut bad = t;
        bad[0] = b'X';
        assert!(check_trailer(&bad, 3, &h).is_err());
    }
}
