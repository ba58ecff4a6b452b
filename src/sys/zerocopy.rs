//! MSG_ZEROCOPY completions: the kernel tells, through the socket error queue, when it has
//! released the user pages of zero-copy sends.
//!
//! Every successful `sendmsg(MSG_ZEROCOPY)` that carried bytes takes the next 32-bit id of the
//! socket (starting at 0). A notification is a `sock_extended_err` with origin
//! `SO_EE_ORIGIN_ZEROCOPY` whose `ee_info..=ee_data` is a range of completed ids; the code
//! `SO_EE_CODE_ZEROCOPY_COPIED` says the kernel copied the bytes after all (loopback, devices
//! without scatter-gather). [`Completions`] counts issued and completed sends and reads the
//! error queue (see `Documentation/networking/msg_zerocopy.rst`).

use crate::datapath::DatapathStats;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `SO_ZEROCOPY` (asm-generic/socket.h; the same on every architecture Linux has for it
/// except a few old ones this crate does not target). Not in the libc crate.
pub(crate) const SO_ZEROCOPY: libc::c_int = 60;
/// `SO_EE_ORIGIN_ZEROCOPY` (linux/errqueue.h).
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED` (linux/errqueue.h).
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// Zero-copy sends issued and completed on one socket.
#[derive(Debug, Default)]
pub(crate) struct Completions {
    issued: u64,
    completed: u64,
}

/// Control buffer for one error-queue message: a cmsghdr, a `sock_extended_err` and the
/// offender address, with room to spare.
#[repr(C, align(8))]
struct ErrCtrl([u8; 128]);

impl Completions {
    /// Records `n` more zero-copy sends handed to the kernel.
    pub(crate) fn issue(&mut self, n: u64) {
        self.issued += n;
    }

    /// Sends whose buffers the kernel may still hold.
    pub(crate) fn pending(&self) -> u64 {
        self.issued.saturating_sub(self.completed)
    }

    /// Reads every notification queued on `fd` without blocking, counting completions (and
    /// copies) in `stats`. Other error-queue messages are counted as receive errors.
    pub(crate) fn drain(
        &mut self,
        fd: BorrowedFd<'_>,
        stats: &mut DatapathStats,
    ) -> io::Result<()> {
        let mut ctrl = ErrCtrl([0; 128]);
        loop {
            // SAFETY: an all-zero msghdr is valid (null pointers, zero lengths).
            let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
            hdr.msg_control = ctrl.0.as_mut_ptr().cast();
            hdr.msg_controllen = ctrl.0.len() as _;
            stats.syscalls += 1;
            // SAFETY: `hdr` points only at `ctrl`, which lives across the call and is
            // `msg_controllen` bytes long; no iovec, no name. The fd is open (borrowed).
            let n = unsafe {
                libc::recvmsg(
                    fd.as_raw_fd(),
                    &mut hdr,
                    libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(()),
                    Some(libc::EINTR) => continue,
                    _ => return Err(e),
                }
            }
            let len = super::mmsg::controllen(&hdr).min(ctrl.0.len());
            for (level, ty, data) in super::mmsg::cmsgs(&ctrl.0[..len]) {
                let is_err = (level == libc::SOL_IP && ty == libc::IP_RECVERR)
                    || (level == libc::SOL_IPV6 && ty == libc::IPV6_RECVERR);
                match parse_ee(data) {
                    Some((origin, code, lo, hi)) if is_err && origin == SO_EE_ORIGIN_ZEROCOPY => {
                        let n = u64::from(hi.wrapping_sub(lo)) + 1;
                        self.completed += n;
                        stats.zerocopy_completed += n;
                        if code & SO_EE_CODE_ZEROCOPY_COPIED != 0 {
                            stats.zerocopy_copied += n;
                        }
                    }
                    _ => stats.recv_errors += 1,
                }
            }
        }
    }
}

/// `sock_extended_err` fields: origin, code, info, data.
fn parse_ee(d: &[u8]) -> Option<(u8, u8, u32, u32)> {
    let u32_at = |i: usize| Some(u32::from_ne_bytes(d.get(i..i + 4)?.try_into().ok()?));
    // ee_errno u32, ee_origin u8, ee_type u8, ee_code u8, ee_pad u8, ee_info u32, ee_data u32
    Some((*d.get(4)?, *d.get(6)?, u32_at(8)?, u32_at(12)?))
}
