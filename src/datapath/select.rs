//! Which datagram backend an endpoint runs on: what this kernel supports (probed once, at
//! run time) and the order `auto` tries them in.
//!
//! `auto` takes the first backend of [`AUTO_ORDER`] the kernel supports and that opens; a
//! named backend is used as asked or fails with a message saying why. Backends also degrade
//! on their own at run time (GSO refused by a device: sent datagram by datagram), which their
//! stats count in `degraded`.

use super::{Datapath, StdUdp};
use serde::Serialize;
use std::io;
use std::net::SocketAddr;
use std::sync::OnceLock;

/// Backends `auto` tries, fastest first for the reliable engine (see docs/benchmarks.md).
pub const AUTO_ORDER: &[&str] = &["gso", "mmsg", "std"];

/// Every backend name `--datapath` accepts.
pub const NAMES: &[&str] = &[
    "auto", "gso", "mmsg", "uring", "uring-zc", "msg-zc", "std", "plain",
];

/// What this kernel supports, probed once per process.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct Caps {
    /// Kernel release (`uname -r`).
    pub kernel: String,
    /// sendmmsg(2)/recvmmsg(2).
    pub sendmmsg: bool,
    /// UDP segmentation offload (UDP_SEGMENT).
    pub gso: bool,
    /// Most segments one GSO send may carry.
    pub gso_max_segments: usize,
    /// UDP receive coalescing (UDP_GRO).
    pub gro: bool,
    /// MSG_ZEROCOPY with error-queue completions.
    pub msg_zerocopy: bool,
    /// io_uring can be set up (not disabled by sysctl or seccomp).
    pub io_uring: bool,
    /// IORING_OP_SEND_ZC.
    pub uring_send_zc: bool,
    /// IORING_OP_SENDMSG_ZC.
    pub uring_sendmsg_zc: bool,
    /// Multishot IORING_OP_RECVMSG.
    pub uring_recvmsg_multishot: bool,
    /// Provided-buffer rings.
    pub uring_buf_ring: bool,
    /// Registered (fixed) buffers.
    pub uring_fixed_buffers: bool,
}

impl Caps {
    /// Whether backend `name` can run here.
    pub fn supports(&self, name: &str) -> bool {
        match name {
            "std" | "plain" | "auto" => true,
            "mmsg" => self.sendmmsg,
            "gso" => self.sendmmsg && self.gso && self.gro,
            "uring" => self.io_uring && self.uring_recvmsg_multishot && self.uring_buf_ring,
            "uring-zc" => {
                self.io_uring
                    && self.uring_recvmsg_multishot
                    && self.uring_buf_ring
                    && self.uring_sendmsg_zc
            }
            "msg-zc" => self.sendmmsg && self.msg_zerocopy,
            _ => false,
        }
    }

    /// The backend `auto` picks.
    pub fn auto(&self) -> &'static str {
        AUTO_ORDER
            .iter()
            .copied()
            .find(|n| self.supports(n))
            .unwrap_or("std")
    }
}

/// What this kernel supports (probed on first call, then cached).
pub fn probe() -> &'static Caps {
    static CAPS: OnceLock<Caps> = OnceLock::new();
    CAPS.get_or_init(probe_now)
}

#[cfg(target_os = "linux")]
fn probe_now() -> Caps {
    let m = crate::sys::mmsg::probe();
    let u = crate::dgram::probe();
    Caps {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        sendmmsg: m.sendmmsg,
        gso: m.gso,
        gso_max_segments: m.gso_max_segments,
        gro: m.gro,
        msg_zerocopy: m.msg_zerocopy,
        io_uring: u.available,
        uring_send_zc: u.send_zc,
        uring_sendmsg_zc: u.sendmsg_zc,
        uring_recvmsg_multishot: u.recvmsg_multishot,
        uring_buf_ring: u.buf_ring,
        uring_fixed_buffers: u.fixed_buffers,
    }
}

#[cfg(not(target_os = "linux"))]
fn probe_now() -> Caps {
    Caps {
        kernel: String::new(),
        sendmmsg: false,
        gso: false,
        gso_max_segments: 1,
        gro: false,
        msg_zerocopy: false,
        io_uring: false,
        uring_send_zc: false,
        uring_sendmsg_zc: false,
        uring_recvmsg_multishot: false,
        uring_buf_ring: false,
        uring_fixed_buffers: false,
    }
}

/// Opens the datapath named `name` bound to `addr`: "auto" (the first of [`AUTO_ORDER`] that
/// this kernel supports and that opens), or one of [`NAMES`], which fails with the reason
/// when this kernel cannot run it.
pub fn open(name: &str, addr: SocketAddr) -> io::Result<Box<dyn Datapath>> {
    let caps = probe();
    if name == "auto" || name.is_empty() {
        let mut last = None;
        for n in AUTO_ORDER.iter().filter(|n| caps.supports(n)) {
            match open_named(n, addr) {
                Ok(dp) => return Ok(dp),
                // Binding failures are not the backend's fault: report them as they are.
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => return Err(e),
                Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        return Err(last.unwrap_or_else(|| io::Error::other("no datapath could be opened")));
    }
    if !NAMES.contains(&name) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "unknown datapath '{name}' (available: {})",
                NAMES.join(", ")
            ),
        ));
    }
    if !caps.supports(name) {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("datapath '{name}' is not supported by this kernel (see `slipstream caps`)"),
        ));
    }
    open_named(name, addr)
}

fn open_named(name: &str, addr: SocketAddr) -> io::Result<Box<dyn Datapath>> {
    Ok(match name {
        #[cfg(target_os = "linux")]
        "gso" => Box::new(crate::sys::mmsg::Mmsg::bind(addr, true)?),
        #[cfg(target_os = "linux")]
        "mmsg" => Box::new(crate::sys::mmsg::Mmsg::bind(addr, false)?),
        #[cfg(target_os = "linux")]
        "msg-zc" => Box::new(crate::sys::mmsg::MsgZerocopy::bind(addr)?),
        #[cfg(target_os = "linux")]
        "uring" => Box::new(crate::sys::uring::Uring::bind(addr, false)?),
        #[cfg(target_os = "linux")]
        "uring-zc" => Box::new(crate::sys::uring::Uring::bind(addr, true)?),
        _ => Box::new(StdUdp::bind(addr)?),
    })
}
