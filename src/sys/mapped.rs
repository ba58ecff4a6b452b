//! A file mapped read-only, for a sender to hash and send straight from the page cache.
//!
//! Reading a file into a buffer is a copy that sending it (the kernel copies each datagram
//! anyway) does not need: mapped, the sender's digest reads the page cache where it is and
//! the datagrams are copied from there. [`MappedFile`] is shared with the connection as
//! [`SharedBytes`](slipstream_proto::conn::SharedBytes), which holds it until the last of
//! its packets is acknowledged.
//!
//! A mapped file that shrinks while mapped (another process truncates it) makes a read of
//! the lost pages raise SIGBUS, which kills the process. So files are mapped only once the
//! program has installed [`exit_on_sigbus_in_mappings`] (the `slipstream` binary does, for
//! `send`); until then [`MappedFile::open`] declines and callers read the file instead. With
//! the handler, a SIGBUS for an address inside a live mapping ends the process with a
//! message and exit status 1; its receiver then fails the transfer on its peer-idle timeout
//! (a slipstream receiver, or any that checks completeness: a plain SRT peer has no way to
//! tell). Any other SIGBUS keeps its default action. Where the kernel reads the lost pages
//! (a gathering datapath copying a datagram), the send fails with EFAULT instead and counts
//! as a send error; the sender's size checks ([`MappedFile::len_now`], before the trailer
//! and whenever acknowledgements stall) then end the transfer.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How many live mappings the SIGBUS handler knows at once (more are mapped all the same,
/// unknown to it: a SIGBUS in them takes the default action).
const KNOWN: usize = 8;

/// Start and end addresses of the live mappings; 0..0 is a free entry.
static RANGES: [(AtomicUsize, AtomicUsize); KNOWN] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; KNOWN];

/// Whether [`exit_on_sigbus_in_mappings`] installed the handler.
static HANDLER: AtomicBool = AtomicBool::new(false);

/// A regular file's bytes, mapped read-only (shared with the page cache).
#[derive(Debug)]
pub struct MappedFile {
    map: memmap2::Mmap,
    file: File,
    /// Entry in [`RANGES`], if one was free.
    known: Option<usize>,
}

impl MappedFile {
    /// Maps `file` (open for reading) whole, as long as it is now. `Ok(None)` where mapping
    /// does not apply, for the caller to read the file instead: the SIGBUS handler is not
    /// installed ([`exit_on_sigbus_in_mappings`]), the file is not a regular one (a pipe, a
    /// device) or is empty, or the kernel would not map it (a file system without mmap, a
    /// file larger than the address space). Fails only where the file's metadata cannot be
    /// read.
    pub fn open(file: &File) -> io::Result<Option<MappedFile>> {
        let meta = file.metadata()?;
        if !HANDLER.load(Ordering::Acquire) || !meta.is_file() || meta.len() == 0 {
            return Ok(None);
        }
        let Ok(len) = usize::try_from(meta.len()) else {
            return Ok(None);
        };
        let Ok(file) = file.try_clone() else {
            return Ok(None);
        };
        // SAFETY: the mapping is read-only and owned by this object; nothing here writes
        // through it. memmap2 asks that the file not change while mapped, which another
        // process may still do: we waive that knowingly, because the bytes are only ever
        // read (hashed, and copied into datagrams by the kernel or the I/O thread), so a
        // change reaches the wire as different bytes, which the receiver's digest check
        // rejects; and a truncation raises SIGBUS, which the installed handler turns into
        // a clean exit (see the module documentation).
        let Ok(map) = (unsafe { memmap2::MmapOptions::new().len(len).map(&file) }) else {
            return Ok(None);
        };
        // Read ahead of the sender on files that are not in memory yet.
        let _ = map.advise(memmap2::Advice::Sequential);
        let start = map.as_ptr() as usize;
        let end = start.saturating_add(map.len());
        let known = RANGES.iter().position(|(s, e)| {
            if s.compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                e.store(end, Ordering::Release);
                true
            } else {
                false
            }
        });
        Ok(Some(MappedFile { map, file, known }))
    }

    /// Length mapped, bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is mapped (never: empty files are not mapped).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Maps the pages of `range` in one go (`MADV_POPULATE_READ`, Linux 5.14) rather than a
    /// page fault every few pages on first read. Fails where the file no longer has those
    /// bytes (truncated since it was mapped) instead of raising SIGBUS; any other refusal
    /// (an older kernel, memory pressure) is only a lost hint.
    pub fn populate(&self, range: std::ops::Range<usize>) -> io::Result<()> {
        if range.is_empty() {
            return Ok(());
        }
        match self
            .map
            .advise_range(memmap2::Advice::PopulateRead, range.start, range.len())
        {
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank while being sent (its mapping lost pages)",
            )),
            _ => Ok(()),
        }
    }

    /// The file's length now, which differs from [`MappedFile::len`] if it changed size.
    pub fn len_now(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
}

impl AsRef<[u8]> for MappedFile {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for MappedFile {
    fn drop(&mut self) {
        // Forgotten before the mapping goes (the field is dropped after this).
        if let Some(i) = self.known {
            RANGES[i].1.store(0, Ordering::Release);
            RANGES[i].0.store(0, Ordering::Release);
        }
    }
}

/// Whether `addr` lies in a live mapping the handler knows.
fn in_mapping(addr: usize) -> bool {
    RANGES.iter().any(|(s, e)| {
        let (s, e) = (s.load(Ordering::Acquire), e.load(Ordering::Acquire));
        s != 0 && (s..e).contains(&addr)
    })
}

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t; for SIGBUS its si_addr is
    // the faulting address (meaningless, and then not in a mapping, for a sent signal).
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    if code == libc::BUS_ADRERR && in_mapping(addr) {
        const MSG: &[u8] = b"slipstream: the input file shrank while it was being sent \
            (SIGBUS reading its mapping); the transfer is incomplete\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe; MSG is a valid static buffer.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(1);
        }
    }
    // Not a mapped file's (a hardware memory error, a bug, a signal sent): restore the
    // default action and raise it again; it is delivered, and kills, once this returns.
    // SAFETY: sigaction(2) and raise(3) are async-signal-safe; a zeroed sigaction with
    // SIG_DFL is valid.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
        libc::raise(libc::SIGBUS);
    }
}

/// Installs the process's SIGBUS handler described in the module documentation, replacing
/// any other, and lets [`MappedFile::open`] map files. Call it once, early, from a program
/// (not a library) that sends files it does not control.
pub fn exit_on_sigbus_in_mappings() -> io::Result<()> {
    // SAFETY: sa is fully initialised (zeroed, then the handler, SA_SIGINFO and an empty
    // mask); the handler only calls async-signal-safe functions and reads atomics.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    HANDLER.store(true, Ordering::Release);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn maps_regular_files_and_knows_their_range_while_live() {
        exit_on_sigbus_in_mappings().unwrap();
        let dir = std::env::temp_dir().join(format!("slipstream-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(b"hello, mapped world")
            .unwrap();
        let m = MappedFile::open(&File::open(&path).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(m.as_ref(), b"hello, mapped world");
        assert_eq!(m.len_now().unwrap(), 19);
        let (start, end) = (
            m.as_ref().as_ptr() as usize,
            m.as_ref().as_ptr() as usize + 19,
        );
        assert!(m.known.is_none() || in_mapping(start + 5));
        assert!(!in_mapping(end + 4096), "beyond the mapping");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"!")
            .unwrap();
        assert_eq!(m.len_now().unwrap(), 20, "a size change is seen");
        drop(m);
        let ours = |(s, e): &(AtomicUsize, AtomicUsize)| {
            s.load(Ordering::Acquire) == start && e.load(Ordering::Acquire) == end
        };
        assert!(!RANGES.iter().any(ours), "forgotten once unmapped");
        // Empty files and non-files are not mapped.
        std::fs::File::create(dir.join("empty")).unwrap();
        assert!(MappedFile::open(&File::open(dir.join("empty")).unwrap())
            .unwrap()
            .is_none());
        assert!(MappedFile::open(&File::open(&dir).unwrap())
            .unwrap()
            .is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
