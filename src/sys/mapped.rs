//! A file mapped read-only, for a sender to hash and send straight from the page cache.
//!
//! Reading a file into a buffer is a copy that sending it (the kernel copies each datagram
//! anyway) does not need: mapped, the sender's digest reads the page cache where it is and
//! the datagrams are copied from there. [`MappedFile`] is shared with the connection as
//! [`SharedBytes`](slipstream_proto::conn::SharedBytes), which holds it until the last of
//! its packets is acknowledged.
//!
//! A mapped file that shrinks while mapped (another process truncates it) makes a read of
//! the lost pages raise SIGBUS, which kills the process. A program that maps files it does
//! not control installs [`exit_on_sigbus_in_mappings`] once: a SIGBUS inside a live mapping
//! then ends the process with a message and exit status 1 (the transfer is incomplete, and
//! its receiver fails it: no digest trailer arrives); any other SIGBUS keeps its default
//! action. Where the kernel itself reads the lost pages (copying a datagram), the send fails
//! with EFAULT and the packet counts as a send error: the transfer then stalls and fails on
//! its acknowledgement timeout, unless the sender's size check after the last read
//! ([`MappedFile::len_now`]) ends it first.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

/// How many live mappings the SIGBUS handler knows at once (more are mapped all the same,
/// unknown to it: a SIGBUS in them takes the default action).
const KNOWN: usize = 8;

/// Start and end addresses of the live mappings; 0..0 is a free entry.
static RANGES: [(AtomicUsize, AtomicUsize); KNOWN] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; KNOWN];

/// A regular file's bytes at the time it was mapped, read-only.
#[derive(Debug)]
pub struct MappedFile {
    map: memmap2::Mmap,
    file: File,
    /// Entry in [`RANGES`], if one was free.
    known: Option<usize>,
}

impl MappedFile {
    /// Maps `file` (opened for reading) whole. `Ok(None)` where mapping does not apply: not
    /// a regular file (a pipe, a device), or empty.
    pub fn new(file: File) -> io::Result<Option<MappedFile>> {
        let meta = file.metadata()?;
        if !meta.is_file() || meta.len() == 0 {
            return Ok(None);
        }
        let len = usize::try_from(meta.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
        // SAFETY: the mapping is read-only and private to this object; the bytes it shows
        // may change if another process writes the file meanwhile (they are only hashed and
        // sent: the receiver's digest check then fails the transfer), and pages a truncation
        // removes raise SIGBUS, which the module's documentation deals with.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map(&file)? };
        // Read ahead of the sender on files that are not in memory yet.
        let _ = map.advise(memmap2::Advice::Sequential);
        let (start, end) = (map.as_ptr() as usize, map.as_ptr() as usize + map.len());
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

    /// Maps the pages of `range` in one go (`MADV_POPULATE_READ`, Linux 5.14; a no-op where
    /// the kernel lacks it) rather than a page fault every few pages on first read. Fails
    /// where the file no longer has those bytes (truncated since it was mapped) instead of
    /// raising SIGBUS.
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
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(()),
            r => r,
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
    // the faulting address.
    let addr = unsafe { (*info).si_addr() } as usize;
    if in_mapping(addr) {
        const MSG: &[u8] = b"slipstream: the input file shrank while it was being sent \
            (SIGBUS reading its mapping); the transfer is incomplete\n";
        // SAFETY: write(2) and _exit(2) are async-signal-safe; MSG is a valid static buffer.
        unsafe {
            libc::write(2, MSG.as_ptr().cast(), MSG.len());
            libc::_exit(1);
        }
    }
    // Not a mapped file's: restore the default action, which the faulting instruction meets
    // again when this handler returns.
    // SAFETY: sigaction(2) is async-signal-safe; a zeroed sigaction with SIG_DFL is valid.
    unsafe {
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
    }
}

/// Installs the process's SIGBUS handler described in the module documentation. Call it
/// once, early, from a program (not a library) that maps files it does not control.
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn maps_regular_files_and_knows_their_range_while_live() {
        let dir = std::env::temp_dir().join(format!("slipstream-mapped-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(b"hello, mapped world")
            .unwrap();
        let m = MappedFile::new(File::open(&path).unwrap())
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
        assert!(MappedFile::new(File::open(dir.join("empty")).unwrap())
            .unwrap()
            .is_none());
        assert!(MappedFile::new(File::open(&dir).unwrap())
            .unwrap()
            .is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
