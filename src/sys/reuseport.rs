//! Steering datagrams among the sockets of a `SO_REUSEPORT` group by SRT destination
//! socket id, so that an endpoint can run one I/O thread per socket (see
//! [`crate::api::EndpointOptions::set_threads`]).
//!
//! Shard `k` of `n` hands out socket ids `id % n == k`. A classic BPF program attached to
//! the group reads the destination socket id of every datagram (bytes 12-15 of the SRT
//! header) and picks socket `id % n`; a handshake to the listener (destination 0) goes by
//! the caller's socket id in its handshake body instead, so that the induction and the
//! conclusion of one caller reach the same shard, which then names the connection with an
//! id of its own. A datagram too short to read falls back to the kernel's hash.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Offset of the destination socket id in an SRT packet (UDP payload).
const DST_SOCKET: u32 = 12;
/// Offset of the socket id in a handshake's body: header (16) + version, type, ISN, MSS and
/// flow window (20) + handshake type (4).
const HS_SOCKET: u32 = 16 + 24;

/// Sets `SO_REUSEPORT` on `sock` (before it is bound).
pub(crate) fn set_reuseport(sock: &impl AsFd) -> io::Result<()> {
    rustix::net::sockopt::set_socket_reuseport(sock, true).map_err(io::Error::from)
}

/// Attaches the steering program for `n` shards to the group `sock` belongs to.
pub(crate) fn steer_by_socket_id(sock: &impl AsFd, n: u32) -> io::Result<()> {
    let n = n.max(1);
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let prog = [
        // A = destination socket id (loads are big-endian, as the wire is).
        op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, DST_SOCKET),
        // A listener handshake (0): steer by the caller's id instead; otherwise skip that.
        op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0, 1, 0),
        op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, HS_SOCKET),
        op(libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K, 0, 0, n),
        op(libc::BPF_RET | libc::BPF_A, 0, 0, 0),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `fprog` points at `prog`, which outlives the call; the kernel copies the
    // program during setsockopt and validates it; the length passed is the struct's size.
    let r = unsafe {
        libc::setsockopt(
            sock.as_fd().as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
