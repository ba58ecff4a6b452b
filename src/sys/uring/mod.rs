//! io_uring: the engine (ring, registered buffer pool, provided-buffer receive ring, bounded
//! send ops with an overflow queue), the [`Uring`] datapath on it, and [`probe`].

mod datapath;
pub(crate) mod engine;
pub(crate) mod pool;

pub(crate) use datapath::Uring;

use io_uring::{opcode, IoUring, Probe};
use serde::Serialize;

/// What this kernel (and its seccomp / sysctl policy) lets us use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct UringCaps {
    /// A ring can be created at all (false when `kernel.io_uring_disabled` or seccomp says
    /// no).
    pub available: bool,
    /// IORING_OP_SEND_ZC.
    pub send_zc: bool,
    /// IORING_OP_SENDMSG_ZC.
    pub sendmsg_zc: bool,
    /// Multishot RECVMSG (tried on a loopback socket).
    pub recvmsg_multishot: bool,
    /// Provided-buffer rings (IORING_REGISTER_PBUF_RING).
    pub buf_ring: bool,
    /// Registered (fixed) buffers.
    pub fixed_buffers: bool,
}

/// Finds out what io_uring offers here. Never panics; anything that fails reads as `false`.
pub(crate) fn probe() -> UringCaps {
    std::panic::catch_unwind(probe_inner).unwrap_or_default()
}

fn probe_inner() -> UringCaps {
    let mut caps = UringCaps::default();
    let Ok(ring) = IoUring::<io_uring::squeue::Entry, io_uring::cqueue::Entry>::new(8) else {
        return caps;
    };
    caps.available = true;
    let mut p = Probe::new();
    if ring.submitter().register_probe(&mut p).is_ok() {
        caps.send_zc = p.is_supported(opcode::SendZc::CODE);
        caps.sendmsg_zc = p.is_supported(opcode::SendMsgZc::CODE);
    }
    let mut page = vec![0u8; 4096];
    let iov = libc::iovec {
        iov_base: page.as_mut_ptr().cast(),
        iov_len: page.len(),
    };
    // SAFETY: `page` outlives the registration (unregistered below, and the ring is closed
    // before `page` is dropped).
    caps.fixed_buffers = unsafe { ring.submitter().register_buffers(&[iov]) }.is_ok();
    let _ = ring.submitter().unregister_buffers();
    drop(ring);
    drop(page);
    // Multishot receive with a provided-buffer ring, end to end: the engine's own path.
    let cfg = engine::EngineConfig {
        bufs: 0,
        reserve: 2,
        payload: 64,
        ops: 2,
        zerocopy: false,
        gso: false,
        gro: false,
        sndbuf: 1 << 16,
        rcvbuf: 1 << 16,
    };
    let Ok(mut eng) = engine::Engine::new("127.0.0.1:0".parse().expect("literal"), cfg) else {
        return caps;
    };
    caps.buf_ring = true;
    let Ok(to) = eng.socket().local_addr() else {
        return caps;
    };
    let Ok(tx) = std::net::UdpSocket::bind("127.0.0.1:0") else {
        return caps;
    };
    if tx.send_to(b"probe", to).is_ok() {
        let end = std::time::Instant::now() + std::time::Duration::from_millis(200);
        while eng.recv_done.is_empty() && std::time::Instant::now() < end {
            let _ = eng.wait(Some(std::time::Duration::from_millis(20)));
            let _ = eng.reap();
        }
        caps.recvmsg_multishot = eng
            .recv_done
            .front()
            .is_some_and(|r| r.buf.data() == b"probe");
    }
    caps
}
