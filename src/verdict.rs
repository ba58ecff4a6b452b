//! The receiver's verdict, sent back to the sender on the file transfer's connection (when
//! both ends agreed on it, [`Connection::verdict_agreed`]): the sender of a file succeeds
//! only when the receiver says it verified the length and digest and committed the file
//! under its final name, and fails with the receiver's reason otherwise. The framing (a
//! header giving the content length, the verdict's bytes) is
//! [`slipstream_proto::wire::file`]'s.
//!
//! Calling protocol: the receiver sends its [`send_offer`] first (or, when it cannot take
//! the file at all, its [`send_verdict`] in place of it); the sender writes [`send_header`],
//! reads the offer with [`read_offer`], sends [`send_start`] and the content from there and,
//! after the trailer is acknowledged, waits in [`read_verdict`]. The receiver reads
//! [`read_header`] and [`read_start`] after its offer and ends with [`send_verdict`],
//! whatever happened.

use crate::api::Connection;
use crate::proto::conn::State as ConnState;
use slipstream_proto::wire::file::{
    FileHeader, Offer, OfferParse, Start, Verdict, VerdictParse, FILE_HEADER_LEN, MAX_REASON,
    START_LEN, VERDICT_HEAD_LEN, VERDICT_MAGIC,
};
use slipstream_proto::wire::tree::TREE_MAGIC;
use std::io;
use std::time::{Duration, Instant};

/// Content length in a header that stands for "unknown": the stream then ends with the
/// sender's SHUTDOWN, as without a verdict, and no verdict is sent.
pub const UNKNOWN_LEN: u64 = u64::MAX;

/// How long a receiver waits for its verdict to be acknowledged before it closes anyway.
const VERDICT_ACK: Duration = Duration::from_secs(10);
/// How long a sender waits for the verdict once everything is acknowledged: the receiver's
/// commit is a sync of what it wrote (seconds on a slow disk), and a receiver that is alive
/// but never answers (stuck, or hostile) must not hold the sender forever.
pub const VERDICT_WAIT: Duration = Duration::from_secs(120);

/// Sends the header for `len` content bytes ([`UNKNOWN_LEN`] if not known).
pub fn send_header(conn: &Connection, len: u64) -> io::Result<()> {
    send_all(conn, &FileHeader { len }.encode())
}

/// Reads exactly `b.len()` bytes; `what` names them in the error if the stream ends first.
pub fn read_exact(conn: &Connection, b: &mut [u8], what: &str) -> io::Result<()> {
    let mut got = 0;
    while got < b.len() {
        match conn.recv(&mut b[got..])? {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the stream ended inside the {what}"),
                ))
            }
            n => got += n,
        }
    }
    Ok(())
}

/// What the sender's stream starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A file of this many bytes, or [`UNKNOWN_LEN`].
    File(u64),
    /// A directory tree, whose manifest is this long ([`slipstream_proto::wire::tree`]).
    Tree(u64),
}

/// Reads the header: a file's content length (or [`UNKNOWN_LEN`]), or a tree's manifest
/// length.
pub fn read_header(conn: &Connection) -> io::Result<Header> {
    let mut b = [0u8; FILE_HEADER_LEN];
    read_exact(conn, &mut b, "file header")?;
    if let Some(len) = b.strip_prefix(&TREE_MAGIC[..]) {
        return Ok(Header::Tree(u64::from_be_bytes(
            len.try_into().unwrap_or_default(),
        )));
    }
    FileHeader::parse(&b)
        .map(|h| Header::File(h.len))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "the stream does not start with slipstream's file header",
            )
        })
}

/// Sends the receiver's offer (what it holds of the file, and the highest rate it allows).
pub fn send_offer(conn: &Connection, offer: &Offer) -> io::Result<()> {
    send_all(conn, &offer.encode())
}

/// Reads the receiver's offer. `Err` with the receiver's reason when it sent its verdict
/// instead (it cannot take the file), or with why no offer came.
pub fn read_offer(conn: &Connection) -> Result<Offer, String> {
    read_answer(conn, "offer", |b| match Offer::parse(b) {
        OfferParse::Done(o, _) => Ok(Ok(o)),
        OfferParse::Need(n) => Ok(Err(n)),
        OfferParse::Malformed(what) => Err(what),
    })
}

/// Reads a message of the receiver's, which `parse` recognises in the bytes so far
/// (`Ok(Ok(m))`: whole; `Ok(Err(n))`: n bytes in all needed; `Err`: malformed), or its
/// verdict sent in its place. `what` names the message in errors.
pub fn read_answer<T>(
    conn: &Connection,
    what: &str,
    parse: impl Fn(&[u8]) -> Result<Result<T, usize>, &'static str>,
) -> Result<T, String> {
    let mut b = Vec::with_capacity(64);
    let mut piece = vec![0u8; 64 << 10];
    let deadline = Instant::now() + VERDICT_WAIT;
    loop {
        if b.len() >= VERDICT_MAGIC.len() && b.starts_with(VERDICT_MAGIC) {
            // The receiver refused before the transfer started.
            return match read_verdict_from(conn, b) {
                Ok(()) => Err("the receiver answered before the transfer started".into()),
                Err(why) => Err(why),
            };
        }
        let want = match parse(&b) {
            Ok(Ok(m)) => return Ok(m),
            Err(why) => return Err(format!("the receiver's {what} is malformed: {why}")),
            Ok(Err(n)) => (n - b.len()).min(piece.len()),
        };
        let left = deadline.saturating_duration_since(Instant::now());
        match conn.recv_timeout(&mut piece[..want], left) {
            Ok(0) => return Err("the receiver closed the connection before it started".into()),
            Ok(k) => b.extend_from_slice(&piece[..k]),
            // As in `read_verdict_from`: only the wait running out is the wait's fault.
            Err(e) if e.kind() == io::ErrorKind::TimedOut && Instant::now() >= deadline => {
                return Err(format!(
                    "the receiver sent no {what} for {} s",
                    VERDICT_WAIT.as_secs()
                ))
            }
            Err(e) => return Err(format!("no {what} from the receiver: {e}")),
        }
    }
}

/// Sends a tree's plan (its encoded bytes), the receiver's answer to the manifest.
pub fn send_plan(conn: &Connection, plan: &[u8]) -> io::Result<()> {
    send_all(conn, plan)
}

/// Sends where the content starts (after the header, once the offer is read).
pub fn send_start(conn: &Connection, offset: u64) -> io::Result<()> {
    send_all(conn, &Start { offset }.encode())
}

/// Reads where the content starts.
pub fn read_start(conn: &Connection) -> io::Result<u64> {
    let mut b = [0u8; START_LEN];
    read_exact(conn, &mut b, "sender's start")?;
    Start::parse(&b).map(|s| s.offset).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "the sender's start is malformed (wrong magic)",
        )
    })
}

/// Sends the receiver's verdict on `outcome` (its error's text as the reason) and closes
/// once the sender has it, or after `VERDICT_ACK` (10 s). Does nothing without an agreed verdict
/// or on a connection already closed (the sender then reports the connection's end).
pub fn send_verdict(conn: &Connection, outcome: Result<(), &str>) {
    if !conn.verdict_agreed() || !matches!(conn.state(), Ok(ConnState::Connected)) {
        return;
    }
    let v = match outcome {
        Ok(()) => Verdict::Committed,
        Err(why) => Verdict::Failed(why.to_string()),
    };
    if send_all(conn, &v.encode()).is_ok() {
        let _ = conn.wait_acknowledged(VERDICT_ACK);
    }
    let _ = conn.close();
}

/// Waits for the receiver's verdict, at most [`VERDICT_WAIT`]. `Ok(())` when it committed
/// the file; its reason, or why no verdict came (the connection ended first, or the wait),
/// otherwise.
pub fn read_verdict(conn: &Connection) -> Result<(), String> {
    read_verdict_from(conn, Vec::with_capacity(VERDICT_HEAD_LEN + MAX_REASON))
}

/// [`read_verdict`] after its first bytes, `b`.
fn read_verdict_from(conn: &Connection, mut b: Vec<u8>) -> Result<(), String> {
    let mut piece = [0u8; 256];
    let deadline = Instant::now() + VERDICT_WAIT;
    loop {
        match Verdict::parse(&b) {
            VerdictParse::Done(Verdict::Committed, _) => return Ok(()),
            VerdictParse::Done(Verdict::Failed(why), _) => return Err(format!("receiver: {why}")),
            VerdictParse::Malformed(what) => {
                return Err(format!("the receiver's answer is malformed: {what}"))
            }
            VerdictParse::Need(n) => {
                let want = (n - b.len()).min(piece.len());
                let left = deadline.saturating_duration_since(Instant::now());
                match conn.recv_timeout(&mut piece[..want], left) {
                    Ok(0) => {
                        return Err(format!(
                            "the receiver closed the connection without a verdict{}",
                            if b.is_empty() {
                                ""
                            } else {
                                " (it sent part of one)"
                            }
                        ))
                    }
                    Ok(k) => b.extend_from_slice(&piece[..k]),
                    // The wait ran out (a receiver still connected but silent). A connection
                    // that ended meanwhile (the receiver stopped answering: an idle timeout
                    // is a `TimedOut` too) says why below.
                    Err(e) if e.kind() == io::ErrorKind::TimedOut && Instant::now() >= deadline => {
                        return Err(format!(
                            "no verdict from the receiver {} s after it acknowledged \
                             everything (it did not say whether it kept the file)",
                            VERDICT_WAIT.as_secs()
                        ))
                    }
                    Err(e) => return Err(format!("no verdict from the receiver: {e}")),
                }
            }
        }
    }
}

/// After a send failed: the receiver's reason, if it closed the connection after saying
/// why (a failure at the receiver ends the transfer from there).
pub fn reason_after_failure(conn: &Connection) -> Option<String> {
    if !conn.verdict_agreed() || !matches!(conn.state(), Ok(ConnState::Closed(_))) {
        return None;
    }
    read_verdict(conn)
        .err()
        .filter(|r| r.starts_with("receiver: "))
}

fn send_all(conn: &Connection, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let n = conn.send(data)?;
        data = &data[n..];
    }
    Ok(())
}
