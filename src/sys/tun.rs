//! TUN devices: layer-3 network interfaces whose packets a process reads and writes through a
//! file descriptor (`/dev/net/tun`), as the link emulator's two ends.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

/// Creates the TUN interface `name` (IP packets, no packet-information prefix) in the calling
/// thread's network namespace and returns its non-blocking file descriptor. Reads return one
/// IP packet each; writes inject one. The interface disappears when the file is closed.
pub(crate) fn open(name: &str) -> io::Result<File> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.bytes().any(|b| b == 0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad interface name '{name}' (1 to 15 bytes)"),
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/net/tun")
        .map_err(|e| io::Error::new(e.kind(), format!("/dev/net/tun: {e}")))?;
    // SAFETY: `ifreq` is a plain C struct of integers, arrays and unions of them; all-zero
    // bytes are a valid value of it.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    req.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes exactly one `struct ifreq`; `req` is one, valid and
    // exclusively borrowed for the duration of the call, and `file` is an open descriptor.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("creating TUN {name}: {e}"),
        ));
    }
    Ok(file)
}
