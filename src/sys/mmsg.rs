//! Batched UDP on Linux: `sendmmsg(2)`/`recvmmsg(2)` with segmentation offload (UDP_SEGMENT
//! on send, UDP_GRO on receive), and a MSG_ZEROCOPY variant.
//!
//! [`Mmsg`] and [`MsgZerocopy`] implement [`Datapath`] with the conventions of the portable
//! backend: a non-blocking socket, waits with `ppoll(2)` (precise timeouts) on the socket and
//! an eventfd the waker writes, and every system call counted.
//!
//! Calling protocol, as for every datapath:
//! - `send(buf, txs)`: each [`Tx`] run becomes one message (GSO: the whole run with a
//!   `UDP_SEGMENT` control message when it holds more than one datagram) or one message per
//!   datagram (no GSO), the iovecs pointing into `buf` (no copy); up to [`TX_MSGS`] messages
//!   per `sendmmsg`. A full socket buffer (EAGAIN) is waited out on POLLOUT; ENOBUFS ends
//!   the call early (the rest is counted lost); other errors skip one message. If the kernel
//!   refuses GSO (EIO, EINVAL) the datapath counts `degraded`, stops using GSO and resends
//!   that run datagram by datagram.
//! - `send_gather(dgrams)` (not the zero-copy variant): the datagrams are grouped into runs
//!   as the caller of `send` groups them (one destination, one size, the last may be
//!   shorter), and each message's iovecs point at the headers and payloads where they are,
//!   two per datagram; otherwise as `send`.
//! - `recv(timeout)`: one `recvmmsg` into [`RX_SLOTS`] slots of [`RX_SLOT`] bytes; a
//!   coalesced (GRO) datagram is split at its `gso_size` into separate entries of the batch,
//!   which borrows the slots until the next call.
//! - [`MsgZerocopy::send`] additionally passes MSG_ZEROCOPY and does not return before the
//!   kernel has reported every buffer of the call released (error-queue completions), so the
//!   borrowed `buf` is never read by the kernel after the call.
//!
//! All message headers, iovecs, addresses and control buffers are allocated at bind; the
//! calls themselves do not allocate.
// The datapath registry (`datapath::open`) wires these in; until then only tests use them.

use super::zerocopy::{Completions, SO_ZEROCOPY};
use crate::datapath::{
    Datapath, DatapathStats, EventWake, RxBatch, RxMeta, RxSplit, Tx, TxGather, Waker,
    MAX_UDP_PAYLOAD, SPLIT_HEAD,
};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use serde::Serialize;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bytes of control messages per message: on send a segment size, a TOS and a priority;
/// on receive a GRO segment size, a timestamp and a TOS.
const CTRL_LEN: usize = 128;

/// How sent datagrams are marked for the network: the IP TOS (IPv6 traffic class) byte and,
/// where the kernel takes it per message, the socket priority (the qdisc band).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    pub tos: u8,
    pub priority: Option<u32>,
}

/// Messages per `sendmmsg` call.
pub(crate) const TX_MSGS: usize = 64;
/// Messages per `recvmmsg` call.
pub(crate) const RX_SLOTS: usize = 64;
/// Bytes per receive slot: a largest datagram or GRO batch fits.
pub(crate) const RX_SLOT: usize = 1 << 16;
/// Datagrams per GSO send offered to the caller (the kernel takes up to 64 or 128).
pub(crate) const GSO_MAX_SEGMENTS: usize = 64;
/// Iovecs per gathered message: a header and a payload per datagram.
const GATHER_IOVS: usize = 2 * GSO_MAX_SEGMENTS;
/// How long a zero-copy send waits for the kernel to release its buffers before giving up
/// (the pages stay pinned by the kernel, so memory stays sound; only the bytes on the wire
/// could change if the caller reuses the buffer).
const ZC_WAIT: Duration = Duration::from_secs(1);

/// What the kernel offers for batched UDP on this machine, found by trying on loopback.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct MmsgCaps {
    /// `sendmmsg(2)` works.
    pub sendmmsg: bool,
    /// A 2-segment UDP_SEGMENT send arrived as 2 datagrams (or one GRO batch).
    pub gso: bool,
    /// UDP_GRO can be enabled on a socket.
    pub gro: bool,
    /// SO_ZEROCOPY can be enabled on a socket.
    pub msg_zerocopy: bool,
    /// Datagrams per GSO send the datapath will use (1 without GSO).
    pub gso_max_segments: usize,
}

/// Finds out what the kernel offers, by trying on loopback sockets. Never panics: anything
/// that fails reads as "not available".
pub(crate) fn probe() -> MmsgCaps {
    let lo = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let gro = UdpSocket::bind(lo)
        .and_then(|s| setsockopt_int(&s, libc::SOL_UDP, libc::UDP_GRO, 1))
        .is_ok();
    let msg_zerocopy = UdpSocket::bind(lo)
        .and_then(|s| setsockopt_int(&s, libc::SOL_SOCKET, SO_ZEROCOPY, 1))
        .is_ok();
    let (sendmmsg, gso) = probe_send(lo).unwrap_or((false, false));
    MmsgCaps {
        sendmmsg,
        gso,
        gro,
        msg_zerocopy,
        gso_max_segments: if gso { GSO_MAX_SEGMENTS } else { 1 },
    }
}

/// Sends one datagram with `sendmmsg`, then a 2-segment GSO run, between two loopback
/// datapaths; returns whether each arrived intact.
fn probe_send(lo: SocketAddr) -> io::Result<(bool, bool)> {
    let mut a = Mmsg::bind(lo, true)?;
    let mut b = Mmsg::bind(lo, true)?;
    let dst = b.local_addr()?;
    let buf: Vec<u8> = (0..300u16).map(|i| i as u8).collect();
    let expect_one = |b: &mut Mmsg, want: &[&[u8]]| -> io::Result<bool> {
        let mut got = 0;
        let deadline = Instant::now() + Duration::from_millis(500);
        while got < want.len() {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return Ok(false);
            };
            for (_, d) in b.recv(Some(left))?.iter() {
                if want.get(got) != Some(&d) {
                    return Ok(false);
                }
                got += 1;
            }
        }
        Ok(true)
    };
    a.send(&buf, &[Tx::single(dst, 0, 100)])?;
    let sendmmsg = a.stats().sent == 1 && expect_one(&mut b, &[&buf[..100]])?;
    let run = Tx {
        dst,
        offset: 100,
        len: 200,
        segment_size: 100,
    };
    a.send(&buf, &[run])?;
    let s = a.stats();
    let gso = sendmmsg
        && s.gso_sends == 1
        && s.degraded == 0
        && expect_one(&mut b, &[&buf[100..200], &buf[200..300]])?;
    Ok((sendmmsg, gso))
}

/// Datapath on `sendmmsg`/`recvmmsg`, with UDP GSO/GRO when asked for.
#[derive(Debug)]
pub(crate) struct Mmsg {
    core: Core,
}

impl Mmsg {
    /// Binds `addr`. With `gso`, runs are sent with UDP_SEGMENT and UDP_GRO is enabled on
    /// receive (silently not, if the kernel refuses it).
    pub(crate) fn bind(addr: SocketAddr, gso: bool) -> io::Result<Mmsg> {
        Ok(Mmsg {
            core: Core::bind(addr, gso, false)?,
        })
    }

    /// The socket, to wait on beside others.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.core.sock.as_fd()
    }

    /// Marks every datagram sent from now on with `mark` (`None`: unmarked). Costs no
    /// system call: the mark travels as control messages of each send.
    pub(crate) fn set_mark(&mut self, mark: Option<Mark>) {
        self.core.mark = mark;
    }

    /// Makes `mark` the socket's own (IP_TOS or IPV6_TCLASS, and SO_PRIORITY if it has
    /// one): datagrams sent with that mark then carry no control message for it (cheaper
    /// for the kernel), and the others carry the unmarked values (TOS 0, priority 0) in
    /// theirs. Only for a mark whose fields the kernel also takes per message.
    pub(crate) fn set_default_mark(&mut self, mark: Mark) -> io::Result<()> {
        let c = &mut self.core;
        let (level, ty) = if c.v6 {
            (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
        } else {
            (libc::IPPROTO_IP, libc::IP_TOS)
        };
        setsockopt_int(&c.sock, level, ty, libc::c_int::from(mark.tos))?;
        if let Some(p) = mark.priority {
            if let Err(e) = setsockopt_int(&c.sock, libc::SOL_SOCKET, libc::SO_PRIORITY, p as _) {
                let _ = setsockopt_int(&c.sock, level, ty, 0);
                return Err(e);
            }
        }
        c.default_mark = Some(mark);
        Ok(())
    }

    /// With `nowait`, a send that finds the socket buffer full returns at once, telling how
    /// many datagrams went (whole runs: the rest of a run cut short is not counted as sent),
    /// instead of waiting for room.
    pub(crate) fn set_send_nowait(&mut self, nowait: bool) {
        self.core.send_nowait = nowait;
    }

    /// Lets [`Self::recv_slice`] wait in the kernel's receive itself, up to `slice` at a
    /// time: the socket is made blocking with that receive timeout (every other call passes
    /// MSG_DONTWAIT). A blocking receive costs one system call where a wait costs two
    /// (`ppoll`, then `recvmmsg`) and no high-resolution timer, but its timeout counts in
    /// the kernel's ticks: it may end up to one tick (at most 10 ms) late.
    pub(crate) fn enable_slices(&mut self, slice: Duration) -> io::Result<()> {
        self.core
            .sock
            .set_read_timeout(Some(slice.max(Duration::from_micros(1))))?;
        self.core.sock.set_nonblocking(false)?;
        self.core.slice = Some(slice);
        Ok(())
    }

    /// The slice [`Self::recv_slice`] waits at most (plus a kernel tick), when it can be
    /// used: slices enabled and no waker handed out (a blocking receive does not see one).
    pub(crate) fn slice(&self) -> Option<Duration> {
        self.core
            .slice
            .filter(|_| !self.core.wake_shared.load(Ordering::Relaxed))
    }

    /// One blocking `recvmmsg` (MSG_WAITFORONE), called at `before`: returns what arrived,
    /// or an empty batch when the slice ran out first (or a signal or an ICMP error ended
    /// the wait). Without slices enabled it does not wait.
    ///
    /// It asks for as many messages as the last call suggests: each header offered costs
    /// the kernel a copy and a look at the queue even when nothing is there, which for one
    /// small message at a time is a tenth of the receive. One message that arrived after
    /// the call began (by its kernel timestamp) woke a wait on an empty queue: ask for one
    /// next time. A full batch doubles the next; a short one (the queue drained) sets it.
    pub(crate) fn recv_slice(&mut self, before: Instant) -> io::Result<RxBatch<'_>> {
        let c = &mut self.core;
        c.rx_metas.clear();
        c.set_gro(true);
        let flags = if c.slice.is_some() {
            libc::MSG_WAITFORONE
        } else {
            libc::MSG_DONTWAIT
        };
        let asked = c.slice_ask.clamp(1, RX_SLOTS);
        match c.recvmmsg_n(asked, false, flags) {
            Ok(n) => {
                let clocks = c.clocks();
                c.unpack(n, clocks);
                let woke = n == 1
                    && c.rx_metas.len() == 1
                    && c.rx_metas[0].at.is_some_and(|at| at >= before);
                c.slice_ask = if n < asked || woke {
                    n.max(1)
                } else {
                    asked * 2
                };
            }
            Err(libc::EAGAIN | libc::EINTR) => {}
            Err(libc::ECONNREFUSED | libc::ECONNRESET | libc::EHOSTUNREACH | libc::ENETUNREACH) => {
                c.stats.recv_errors += 1
            }
            Err(e) => return Err(io::Error::from_raw_os_error(e)),
        }
        Ok(RxBatch::new(&c.rx.buf, &c.rx_metas))
    }

    /// Bytes of the message arrays and the receive buffer, allocated at bind.
    pub(crate) fn memory(&self) -> usize {
        let t = &self.core.tx;
        let r = &self.core.rx;
        t.hdrs.len() * std::mem::size_of::<libc::mmsghdr>()
            + (t.iovs.len() + t.giovs.len()) * std::mem::size_of::<libc::iovec>()
            + t.gruns.capacity() * std::mem::size_of::<Tx>()
            + (t.addrs.len() + r.addrs.len()) * std::mem::size_of::<RawAddr>()
            + (t.ctrls.len() + r.ctrls.len()) * CTRL_LEN
            + r.hdrs.len() * std::mem::size_of::<libc::mmsghdr>()
            + (r.iovs.len() + r.siovs.len()) * std::mem::size_of::<libc::iovec>()
            + r.buf.len()
            + self.core.rx_metas.capacity() * std::mem::size_of::<RxMeta>()
    }

    /// Asks the kernel for each received datagram's TOS / traffic class ([`RxMeta::tos`]).
    pub(crate) fn recv_tos(&mut self) -> io::Result<()> {
        if self.core.v6 {
            setsockopt_int(
                &self.core.sock,
                libc::IPPROTO_IPV6,
                libc::IPV6_RECVTCLASS,
                1,
            )?;
        }
        let v4 = setsockopt_int(&self.core.sock, libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
        if self.core.v6 {
            Ok(())
        } else {
            v4
        }
    }

    /// Makes the next GSO send fail as if the kernel had answered EIO.
    #[cfg(test)]
    pub(crate) fn fail_next_gso(&mut self) {
        self.core.fail_next_gso = true;
    }

    /// Makes the `sendmmsg` after the next `calls` ones fail with `errno`.
    #[cfg(test)]
    pub(crate) fn fail_send(&mut self, calls: usize, errno: libc::c_int) {
        self.core.fail_send = Some((calls, errno));
    }
}

/// Datapath sending with MSG_ZEROCOPY (and GSO), receiving like [`Mmsg`].
#[derive(Debug)]
pub(crate) struct MsgZerocopy {
    core: Core,
}

impl MsgZerocopy {
    /// Binds `addr` with SO_ZEROCOPY; fails if the kernel does not support it.
    pub(crate) fn bind(addr: SocketAddr) -> io::Result<MsgZerocopy> {
        Ok(MsgZerocopy {
            core: Core::bind(addr, true, true)?,
        })
    }
}

macro_rules! forward_datapath {
    ($ty:ty, $name:expr) => {
        impl Datapath for $ty {
            fn name(&self) -> &'static str {
                $name(&self.core)
            }
            fn local_addr(&self) -> io::Result<SocketAddr> {
                self.core.sock.local_addr()
            }
            fn receive_queue_bytes(&self) -> Option<usize> {
                crate::datapath::receive_queue_of(&self.core.sock)
            }
            fn max_segments(&self) -> usize {
                if self.core.gso {
                    GSO_MAX_SEGMENTS
                } else {
                    1
                }
            }
            fn send(&mut self, buf: &[u8], txs: &[Tx]) -> io::Result<usize> {
                self.core.send(buf, txs)
            }
            fn gathers(&self) -> bool {
                // A zero-copy send may leave the kernel reading after the call returns (see
                // ZC_WAIT): only copying sends may point into someone else's memory.
                self.core.zc.is_none()
            }
            fn send_gather(&mut self, dgrams: &dyn TxGather) -> io::Result<usize> {
                if self.core.zc.is_some() {
                    return Err(io::Error::new(
                        io::ErrorKind::Unsupported,
                        "zero-copy sends do not gather",
                    ));
                }
                self.core.send_gather(dgrams)
            }
            fn recv(&mut self, timeout: Option<Duration>) -> io::Result<RxBatch<'_>> {
                self.core.recv(timeout)
            }
            fn splits(&self) -> bool {
                true
            }
            fn set_split(&mut self, split: bool) {
                self.core.set_gro(!split);
            }
            fn recv_split(
                &mut self,
                timeout: Option<Duration>,
                heads: &mut [[u8; SPLIT_HEAD]],
                bufs: &mut [Vec<u8>],
                out: &mut Vec<RxSplit>,
            ) -> io::Result<()> {
                self.core.recv_split(timeout, heads, bufs, out)
            }
            fn waker(&self) -> io::Result<Waker> {
                self.core.waker()
            }
            fn stats(&self) -> DatapathStats {
                self.core.stats
            }
        }
    };
}

forward_datapath!(Mmsg, |c: &Core| if c.gso { "gso" } else { "mmsg" });
forward_datapath!(MsgZerocopy, |_: &Core| "msg-zc");

/// The socket, its waker, the pre-allocated message arrays and the counters.
#[derive(Debug)]
struct Core {
    sock: UdpSocket,
    v6: bool,
    wake: EventWake,
    /// Runs go out as one UDP_SEGMENT message (until the kernel refuses).
    gso: bool,
    /// UDP_GRO was enabled at bind, and whether it is on now (split receives turn it off:
    /// a coalesced batch would not fit the caller's payload buffers).
    gro: bool,
    gro_on: bool,
    /// Zero-copy accounting, for MSG_ZEROCOPY sends.
    zc: Option<Completions>,
    /// The mark of the datagrams sent from now on, if any.
    mark: Option<Mark>,
    /// The socket's own mark, if it has one ([`Mmsg::set_default_mark`]).
    default_mark: Option<Mark>,
    /// A full socket buffer ends a send early instead of being waited out.
    send_nowait: bool,
    /// The socket blocks (every call but [`Mmsg::recv_slice`] passes MSG_DONTWAIT) and a
    /// blocking receive gives up after this long (SO_RCVTIMEO).
    slice: Option<Duration>,
    /// Messages the next [`Mmsg::recv_slice`] asks for.
    slice_ask: usize,
    /// The wall clock read at a moment of the monotonic one: receive timestamps (wall
    /// clock) are turned into instants against it ([`Core::clocks`]).
    wall: (Instant, SystemTime),
    /// A waker was handed out: waits must watch its eventfd too.
    wake_shared: AtomicBool,
    stats: DatapathStats,
    tx: TxArrays,
    rx: RxArrays,
    rx_metas: Vec<RxMeta>,
    #[cfg(test)]
    fail_next_gso: bool,
    /// Makes a later `sendmmsg` fail: after this many calls, with this errno.
    #[cfg(test)]
    fail_send: Option<(usize, libc::c_int)>,
}

/// Where a send is in its runs: run `tx`, datagram `seg` of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cursor {
    tx: usize,
    seg: usize,
}

/// Where the bytes of a send are: one buffer the runs index, or datagrams the runs number.
#[derive(Clone, Copy)]
enum Src<'a> {
    Buf(&'a [u8]),
    Gather(&'a dyn TxGather),
}

/// What one prepared message carries.
#[derive(Debug, Clone, Copy)]
struct Msg {
    /// Position of its first datagram.
    at: Cursor,
    /// Position after it.
    next: Cursor,
    /// Datagrams in it.
    datagrams: usize,
}

/// A control-message buffer, aligned for `cmsghdr`.
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct Ctrl([u8; CTRL_LEN]);

/// A socket address in kernel layout (`sockaddr_in` or `sockaddr_in6`).
#[derive(Clone, Copy)]
#[repr(C, align(8))]
struct RawAddr([u8; 28]);

/// Send-side arrays: header `i` points at `iovs[i]` (a gather send: at the
/// `2 * GSO_MAX_SEGMENTS` iovecs from `giovs[i * 2 * GSO_MAX_SEGMENTS]`), `addrs[i]` and
/// `ctrls[i]`.
struct TxArrays {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    giovs: Vec<libc::iovec>,
    /// The runs of the current gather send (`offset` is a datagram index there).
    gruns: Vec<Tx>,
    addrs: Vec<RawAddr>,
    ctrls: Vec<Ctrl>,
    msgs: Vec<Msg>,
}

/// Receive-side arrays: header `i` receives into `buf[i * RX_SLOT..]` (a split receive: into
/// the two iovecs at `siovs[2 * i]`, the caller's header and payload buffers).
struct RxArrays {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    siovs: Vec<libc::iovec>,
    addrs: Vec<RawAddr>,
    ctrls: Vec<Ctrl>,
    buf: Vec<u8>,
    /// The headers point at their iovecs, addresses and control buffers: `Some(split)` for
    /// the split receive's iovecs or (false) the slots'. `None`: not yet.
    prepped: Option<bool>,
    /// Headers the kernel may have written since they were last reset (their lengths and
    /// flags): only these are reset before the next call.
    dirty: usize,
}

// SAFETY: the raw pointers in the headers and iovecs point only into buffers owned by the
// same struct (heap allocations that move with it, never reallocated) or, during one
// `send`, `send_gather` or `recv_split` call, into the caller's buffers (rewritten before
// each such call); they are never dereferenced by this code, so moving the arrays to
// another thread is sound.
unsafe impl Send for TxArrays {}
// SAFETY: as for `TxArrays`: the pointers target the struct's own heap buffers only.
unsafe impl Send for RxArrays {}

impl std::fmt::Debug for TxArrays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TxArrays({} messages)", self.hdrs.len())
    }
}

impl std::fmt::Debug for RxArrays {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RxArrays({} x {} bytes)", self.hdrs.len(), RX_SLOT)
    }
}

fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: mmsghdr is a plain C struct; all-zero (null pointers, zero lengths) is valid.
    unsafe { std::mem::zeroed() }
}

fn empty_iovec() -> libc::iovec {
    libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }
}

/// Sets an integer socket option.
fn setsockopt_int(
    sock: &impl AsFd,
    level: libc::c_int,
    name: libc::c_int,
    val: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `val` is a live c_int and its size is passed; the fd is open (borrowed).
    let r = unsafe {
        libc::setsockopt(
            sock.as_fd().as_raw_fd(),
            level,
            name,
            (&val as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Core {
    fn bind(addr: SocketAddr, gso: bool, zerocopy: bool) -> io::Result<Core> {
        let sock = crate::datapath::bind_udp(addr)?;
        // Without GRO the kernel splits incoming GSO batches itself: slower, still correct.
        let gro = gso && setsockopt_int(&sock, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        // Receive timestamps time arrivals for the protocol's rate estimates: the time a batch
        // is read includes however long this thread was not scheduled. Without them, the
        // batch's read time stands in.
        let _ = setsockopt_int(&sock, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
        let zc = if zerocopy {
            setsockopt_int(&sock, libc::SOL_SOCKET, SO_ZEROCOPY, 1)?;
            Some(Completions::default())
        } else {
            None
        };
        let local = sock.local_addr()?;
        Ok(Core {
            sock,
            v6: local.is_ipv6(),
            wake: EventWake::new()?,
            gso,
            gro,
            gro_on: gro,
            zc,
            mark: None,
            default_mark: None,
            send_nowait: false,
            slice: None,
            slice_ask: RX_SLOTS,
            wall: (Instant::now(), SystemTime::now()),
            wake_shared: AtomicBool::new(false),
            stats: DatapathStats::default(),
            tx: TxArrays {
                hdrs: vec![zeroed_mmsghdr(); TX_MSGS],
                iovs: vec![empty_iovec(); TX_MSGS],
                giovs: vec![empty_iovec(); TX_MSGS * GATHER_IOVS],
                gruns: Vec::with_capacity(TX_MSGS * GSO_MAX_SEGMENTS),
                addrs: vec![RawAddr([0; 28]); TX_MSGS],
                ctrls: vec![Ctrl([0; CTRL_LEN]); TX_MSGS],
                msgs: Vec::with_capacity(TX_MSGS),
            },
            rx: RxArrays {
                hdrs: vec![zeroed_mmsghdr(); RX_SLOTS],
                iovs: vec![empty_iovec(); RX_SLOTS],
                siovs: vec![empty_iovec(); 2 * RX_SLOTS],
                addrs: vec![RawAddr([0; 28]); RX_SLOTS],
                ctrls: vec![Ctrl([0; CTRL_LEN]); RX_SLOTS],
                buf: vec![0; RX_SLOTS * RX_SLOT],
                prepped: None,
                dirty: 0,
            },
            // A GRO batch of RX_SLOT bytes splits into at most RX_SLOT datagrams of 1 byte;
            // more than a few per slot is rare, so start with room for 64 per slot.
            rx_metas: Vec::with_capacity(RX_SLOTS * 64),
            #[cfg(test)]
            fail_next_gso: false,
            #[cfg(test)]
            fail_send: None,
        })
    }

    fn waker(&self) -> io::Result<Waker> {
        self.wake_shared.store(true, Ordering::Relaxed);
        Ok(self.wake.waker())
    }

    /// Waits for `flags` on the socket, at most `timeout`. Returns the events (empty on
    /// timeout; POLLERR is reported whatever `flags` says). A wait for input also ends when
    /// the waker is woken: `None` then.
    fn wait(
        &mut self,
        flags: PollFlags,
        timeout: Option<Duration>,
    ) -> io::Result<Option<PollFlags>> {
        let ts = timeout.map(|t| Timespec {
            tv_sec: t.as_secs() as _,
            tv_nsec: t.subsec_nanos() as _,
        });
        let mut fds = [
            PollFd::new(&self.sock, flags),
            PollFd::from_borrowed_fd(self.wake.fd(), PollFlags::IN),
        ];
        // Nobody can wake a waker never handed out: one descriptor is cheaper to poll.
        let woken_too = self.wake_shared.load(Ordering::Relaxed);
        let n = if flags.contains(PollFlags::IN) && woken_too {
            2
        } else {
            1
        };
        self.stats.syscalls += 1;
        match poll(&mut fds[..n], ts.as_ref()) {
            Ok(0) => Ok(Some(PollFlags::empty())),
            Ok(_) if n == 2 && !fds[1].revents().is_empty() => {
                self.wake.clear();
                Ok(None)
            }
            Ok(_) => Ok(Some(fds[0].revents())),
            Err(rustix::io::Errno::INTR) => Ok(Some(flags)),
            Err(e) => Err(e.into()),
        }
    }

    // ---- send ----

    fn send(&mut self, buf: &[u8], txs: &[Tx]) -> io::Result<usize> {
        // The kernel reads these bytes through raw pointers: check every run lies in `buf`.
        if txs.iter().any(|t| {
            t.offset
                .checked_add(t.len)
                .is_none_or(|end| end > buf.len())
        }) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "transmit run outside the buffer",
            ));
        }
        self.send_runs(Src::Buf(buf), txs)
    }

    /// Groups `dgrams` into runs as [`Datapath::send`]'s callers do (one destination, one
    /// size, the last datagram may be shorter, within the GSO and UDP limits; without GSO,
    /// one datagram a run) and sends them, two iovecs a datagram. Returns datagrams dealt
    /// with (all, unless ENOBUFS ended the send early).
    fn send_gather(&mut self, dgrams: &dyn TxGather) -> io::Result<usize> {
        let mut runs = std::mem::take(&mut self.tx.gruns);
        runs.clear();
        let max_segments = if self.gso { GSO_MAX_SEGMENTS } else { 1 };
        for i in 0..dgrams.len() {
            let (dst, head, tail) = dgrams.get(i);
            let len = head.len() + tail.len();
            let extends = runs.last().is_some_and(|run: &Tx| {
                run.dst == dst
                    && run.datagrams() * run.segment_size == run.len
                    && len <= run.segment_size
                    && len > 0
                    && run.datagrams() < max_segments
                    && run.len + len <= MAX_UDP_PAYLOAD
            });
            match runs.last_mut() {
                Some(run) if extends => run.len += len,
                _ => runs.push(Tx::single(dst, i, len)),
            }
        }
        let r = self.send_runs(Src::Gather(dgrams), &runs);
        let done = match &r {
            Ok(k) => runs[..*k].iter().map(Tx::datagrams).sum(),
            Err(_) => 0,
        };
        self.tx.gruns = runs;
        r.map(|_| done)
    }

    fn send_runs(&mut self, src: Src<'_>, txs: &[Tx]) -> io::Result<usize> {
        // MSG_DONTWAIT: the socket itself blocks when receives may wait in the kernel.
        let flags = if self.zc.is_some() {
            libc::MSG_ZEROCOPY | libc::MSG_DONTWAIT
        } else {
            libc::MSG_DONTWAIT
        };
        let mut cur = Cursor { tx: 0, seg: 0 };
        let mut retried_at = None;
        while cur.tx < txs.len() {
            let n = self.prepare(src, txs, cur);
            match self.sendmmsg(n, flags) {
                Ok(k) => {
                    for m in &self.tx.msgs[..k] {
                        self.stats.sent += m.datagrams as u64;
                        if m.datagrams > 1 {
                            self.stats.gso_sends += 1;
                        }
                    }
                    if let Some(zc) = &mut self.zc {
                        // Every message takes a notification id, even an empty one.
                        zc.issue(k as u64);
                    }
                    cur = self.tx.msgs[k - 1].next;
                }
                Err(e) => {
                    let first = self.tx.msgs[0];
                    match e {
                        libc::EINTR => {}
                        libc::EAGAIN if self.send_nowait => {
                            // The caller keeps what did not go: say how far the send got (a
                            // run cut short counts as not sent).
                            self.stats.send_would_block += 1;
                            self.settle()?;
                            return Ok(first.at.tx);
                        }
                        libc::EAGAIN => {
                            // A full socket buffer is back-pressure: wait for room.
                            self.stats.send_would_block += 1;
                            self.wait(PollFlags::OUT, None)?;
                        }
                        libc::ENOBUFS
                            if retried_at != Some(first.at)
                                && self.zc.as_ref().is_some_and(|z| z.pending() > 0) =>
                        {
                            // Likely the optmem or locked-memory limit of zero-copy sends:
                            // let completions return it, then retry (once per position).
                            retried_at = Some(first.at);
                            self.settle()?;
                        }
                        libc::ENOBUFS => {
                            let rest = datagrams_from(txs, first.at);
                            self.stats.send_nobufs += rest as u64;
                            self.settle()?;
                            return Ok(first.at.tx);
                        }
                        libc::EIO | libc::EINVAL | libc::EMSGSIZE if first.datagrams > 1 => {
                            // The kernel refuses segmentation offload (no checksum offload
                            // on the route, segments larger than the route's MTU, ...) or
                            // the destination itself: the first datagram alone tells which.
                            cur = self.retry_without_gso(src, txs, first);
                        }
                        _ => {
                            self.stats.send_errors += first.datagrams as u64;
                            cur = first.next;
                        }
                    }
                }
            }
        }
        self.settle()?;
        Ok(txs.len())
    }

    /// After a GSO send of `failed` was refused with EIO or EINVAL: sends its first datagram
    /// alone. If that goes, GSO was the problem: it is given up for good (counted in
    /// `degraded`) and the send continues datagram by datagram. If not, the run itself is
    /// bad: it is counted in `send_errors` and skipped, and GSO stays. Returns where to go on.
    fn retry_without_gso(&mut self, src: Src<'_>, txs: &[Tx], failed: Msg) -> Cursor {
        self.gso = false;
        self.prepare(src, txs, failed.at);
        let flags = if self.zc.is_some() {
            libc::MSG_ZEROCOPY
        } else {
            0
        };
        loop {
            match self.sendmmsg(1, flags) {
                Ok(_) => {
                    let m = self.tx.msgs[0];
                    self.stats.sent += 1;
                    if let Some(zc) = &mut self.zc {
                        zc.issue(1);
                    }
                    self.stats.degraded += 1;
                    return m.next;
                }
                Err(libc::EINTR) => {}
                Err(_) => {
                    self.gso = true;
                    self.stats.send_errors += failed.datagrams as u64;
                    return failed.next;
                }
            }
        }
    }

    /// Fills the send headers from `cur` on; returns how many.
    fn prepare(&mut self, src: Src<'_>, txs: &[Tx], mut cur: Cursor) -> usize {
        let t = &mut self.tx;
        t.msgs.clear();
        while t.msgs.len() < TX_MSGS && cur.tx < txs.len() {
            let tx = &txs[cur.tx];
            let seg = tx.segment_size.max(1);
            let total = tx.datagrams();
            let count = if self.gso {
                (total - cur.seg)
                    .min(GSO_MAX_SEGMENTS)
                    .min((MAX_UDP_PAYLOAD / seg).max(1))
            } else {
                1
            };
            let next = if cur.seg + count >= total {
                Cursor {
                    tx: cur.tx + 1,
                    seg: 0,
                }
            } else {
                Cursor {
                    tx: cur.tx,
                    seg: cur.seg + count,
                }
            };
            let i = t.msgs.len();
            // The kernel only reads through these pointers (sendmsg never writes the
            // payload); a buffer's range was checked to lie in it.
            let (iov, iovlen): (*mut libc::iovec, usize) = match src {
                Src::Buf(buf) => {
                    let start = tx.offset + (cur.seg * seg).min(tx.len);
                    let end = (start + count * seg).min(tx.offset + tx.len);
                    t.iovs[i] = libc::iovec {
                        iov_base: buf[start..end].as_ptr() as *mut libc::c_void,
                        iov_len: end - start,
                    };
                    (&mut t.iovs[i], 1)
                }
                Src::Gather(g) => {
                    let base = i * GATHER_IOVS;
                    let mut k = 0;
                    for d in 0..count {
                        let (_, head, tail) = g.get(tx.offset + cur.seg + d);
                        for part in [head, tail] {
                            if !part.is_empty() && k < GATHER_IOVS {
                                t.giovs[base + k] = libc::iovec {
                                    iov_base: part.as_ptr() as *mut libc::c_void,
                                    iov_len: part.len(),
                                };
                                k += 1;
                            }
                        }
                    }
                    (&mut t.giovs[base], k)
                }
            };
            let namelen = encode_addr(tx.dst, self.v6, &mut t.addrs[i]);
            let h = &mut t.hdrs[i];
            h.msg_len = 0;
            h.msg_hdr.msg_name = t.addrs[i].0.as_mut_ptr().cast();
            h.msg_hdr.msg_namelen = namelen;
            h.msg_hdr.msg_iov = iov;
            h.msg_hdr.msg_iovlen = iovlen as _;
            h.msg_hdr.msg_flags = 0;
            let ctrl = &mut t.ctrls[i].0;
            let mut len = 0;
            if count > 1 {
                len += write_cmsg(
                    &mut ctrl[len..],
                    libc::SOL_UDP,
                    libc::UDP_SEGMENT,
                    &(seg as u16).to_ne_bytes(),
                );
            }
            // The mark as control data, unless it is the socket's own; without one, the
            // socket's own undone.
            let mark = match self.default_mark {
                None => self.mark,
                Some(own) if self.mark == Some(own) => None,
                Some(own) => Some(self.mark.unwrap_or(Mark {
                    tos: 0,
                    priority: own.priority.map(|_| 0),
                })),
            };
            if let Some(m) = mark {
                let (level, ty) = if self.v6 {
                    (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
                } else {
                    (libc::IPPROTO_IP, libc::IP_TOS)
                };
                len += write_cmsg(&mut ctrl[len..], level, ty, &i32::from(m.tos).to_ne_bytes());
                if let Some(p) = m.priority {
                    len += write_cmsg(
                        &mut ctrl[len..],
                        libc::SOL_SOCKET,
                        libc::SO_PRIORITY,
                        &p.to_ne_bytes(),
                    );
                }
            }
            if len > 0 {
                h.msg_hdr.msg_control = ctrl.as_mut_ptr().cast();
                h.msg_hdr.msg_controllen = len as _;
            } else {
                h.msg_hdr.msg_control = std::ptr::null_mut();
                h.msg_hdr.msg_controllen = 0;
            }
            t.msgs.push(Msg {
                at: cur,
                next,
                datagrams: count,
            });
            cur = next;
        }
        t.msgs.len()
    }

    /// One `sendmmsg` of the first `n` prepared headers: how many went, or the errno of the
    /// first one (the kernel reports later errors by stopping before them).
    fn sendmmsg(&mut self, n: usize, flags: libc::c_int) -> Result<usize, libc::c_int> {
        #[allow(unused_mut)]
        let mut n = n;
        #[cfg(test)]
        if self.fail_next_gso {
            match self.tx.msgs[..n].iter().position(|m| m.datagrams > 1) {
                Some(0) => {
                    self.fail_next_gso = false;
                    return Err(libc::EIO);
                }
                Some(j) => n = j,
                None => {}
            }
        }
        #[cfg(test)]
        match &mut self.fail_send {
            Some((0, e)) => {
                let e = *e;
                self.fail_send = None;
                return Err(e);
            }
            Some((calls, _)) => *calls -= 1,
            None => {}
        }
        self.stats.syscalls += 1;
        // SAFETY: the first `n` headers were filled by `prepare` for this call: names point at
        // `self.tx.addrs`, iovecs at `self.tx.iovs` or `self.tx.giovs` (which point into the
        // caller's buffers, borrowed for the whole `send` or `send_gather`), control at
        // `self.tx.ctrls`, all with their lengths.
        let r = unsafe {
            libc::sendmmsg(
                self.sock.as_raw_fd(),
                self.tx.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                flags,
            )
        };
        if r > 0 {
            Ok(r as usize)
        } else if r == 0 {
            // Not expected for n > 0; treat like a transient failure of the first message.
            Err(libc::EAGAIN)
        } else {
            Err(io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO))
        }
    }

    /// For zero-copy sends: waits until the kernel has released every buffer it was given
    /// (bounded by [`ZC_WAIT`]). Does nothing otherwise.
    fn settle(&mut self) -> io::Result<()> {
        let Some(mut zc) = self.zc.take() else {
            return Ok(());
        };
        let deadline = Instant::now() + ZC_WAIT;
        let r = loop {
            if let Err(e) = zc.drain(self.sock.as_fd(), &mut self.stats) {
                break Err(e);
            }
            if zc.pending() == 0 {
                break Ok(());
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                // The kernel holds the pages pinned; later calls keep waiting for them.
                break Ok(());
            };
            if let Err(e) = self.wait(PollFlags::empty(), Some(left)) {
                break Err(e);
            }
        };
        self.zc = Some(zc);
        r
    }

    // ---- receive ----

    /// Now on both clocks, for [`received_at`]. The wall clock is read again once
    /// [`WALL_REREAD`] has passed since it was last read, and carried forward on the
    /// monotonic clock in between (both are slewed alike): a receive then reads one clock,
    /// not two. A step of the wall clock is seen up to [`WALL_REREAD`] late: a step forward
    /// makes the stamps after it look as if from the future, and their datagrams are timed
    /// when read (as without a stamp); a step back of less than [`MAX_RX_AGE`] makes them
    /// look older by the step for that long.
    fn clocks(&mut self) -> (Instant, SystemTime) {
        let now = Instant::now();
        let since = now.saturating_duration_since(self.wall.0);
        if since >= WALL_REREAD {
            self.wall = (now, SystemTime::now());
            return self.wall;
        }
        (now, self.wall.1 + since)
    }

    fn recv(&mut self, timeout: Option<Duration>) -> io::Result<RxBatch<'_>> {
        self.rx_metas.clear();
        self.set_gro(true);
        self.recv_with(timeout, |c| {
            let n = c.recvmmsg()?;
            let clocks = c.clocks();
            c.unpack(n, clocks);
            Ok(!c.rx_metas.is_empty())
        })?;
        Ok(RxBatch::new(&self.rx.buf, &self.rx_metas))
    }

    /// [`Datapath::recv_split`].
    fn recv_split(
        &mut self,
        timeout: Option<Duration>,
        heads: &mut [[u8; SPLIT_HEAD]],
        bufs: &mut [Vec<u8>],
        out: &mut Vec<RxSplit>,
    ) -> io::Result<()> {
        out.clear();
        let n = heads.len().min(bufs.len()).min(RX_SLOTS);
        if n == 0 {
            return Ok(());
        }
        self.set_gro(false);
        self.recv_with(timeout, |c| {
            let got = c.recvmmsg_split(&mut heads[..n], &mut bufs[..n])?;
            let clocks = c.clocks();
            for i in 0..got {
                match c.decode(i, clocks) {
                    Decoded::Skip => {}
                    Decoded::Datagram {
                        src, len, gro, at, ..
                    } => {
                        c.stats.received += gro.map_or(1, |g| len.div_ceil(g)) as u64;
                        c.stats.gro_batches += u64::from(gro.is_some());
                        out.push(RxSplit {
                            index: i,
                            src,
                            len,
                            segment: gro,
                            at,
                        });
                    }
                }
            }
            Ok(!out.is_empty())
        })
    }

    /// Turns GRO on or off where it was enabled at bind (a failure leaves it as it was: a
    /// batch that does not fit a split receive's buffers is dropped and counted).
    fn set_gro(&mut self, on: bool) {
        if self.gro && self.gro_on != on {
            let v = libc::c_int::from(on);
            if setsockopt_int(&self.sock, libc::SOL_UDP, libc::UDP_GRO, v).is_ok() {
                self.gro_on = on;
            }
        }
    }

    /// Receives with `once` (one non-blocking attempt: `Ok(true)` when it got something,
    /// `Ok(false)` to look again at once, or the errno), waiting for the socket up to
    /// `timeout` while it would block; a wake ends the wait. A call that may wait polls
    /// first: the I/O thread comes here to sleep, mostly with nothing queued, and a
    /// `recvmmsg` that finds nothing would be a system call per wake-up for nothing.
    fn recv_with(
        &mut self,
        timeout: Option<Duration>,
        mut once: impl FnMut(&mut Core) -> Result<bool, libc::c_int>,
    ) -> io::Result<()> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut look = timeout.is_some_and(|t| t.is_zero());
        let mut woken = false;
        loop {
            if look {
                match once(self) {
                    Ok(true) => break,
                    // Only truncated or ignored messages: look again.
                    Ok(false) => continue,
                    Err(libc::EAGAIN) => {}
                    Err(libc::EINTR) => continue,
                    // ICMP errors surface on a later call; they concern some earlier send.
                    Err(
                        libc::ECONNREFUSED
                        | libc::ECONNRESET
                        | libc::EHOSTUNREACH
                        | libc::ENETUNREACH,
                    ) => {
                        self.stats.recv_errors += 1;
                        continue;
                    }
                    Err(e) => return Err(io::Error::from_raw_os_error(e)),
                }
                if woken {
                    break;
                }
            }
            look = true;
            let wait = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(w) if !w.is_zero() => Some(w),
                    _ => break,
                },
                None => None,
            };
            let Some(ev) = self.wait(PollFlags::IN, wait)? else {
                // Woken: the caller has new work. Take what has arrived too, then return.
                woken = true;
                continue;
            };
            if ev.is_empty() {
                break;
            }
            if ev.contains(PollFlags::ERR) && !ev.contains(PollFlags::IN) {
                // Late zero-copy completions (or other error-queue entries): consume them.
                match &mut self.zc {
                    Some(zc) => zc.drain(self.sock.as_fd(), &mut self.stats)?,
                    None => Completions::default().drain(self.sock.as_fd(), &mut self.stats)?,
                }
            }
        }
        Ok(())
    }

    /// One non-blocking `recvmmsg` of up to `heads.len()` messages, message `i` split
    /// between `heads[i]` and `bufs[i]`: how many messages, or the errno.
    fn recvmmsg_split(
        &mut self,
        heads: &mut [[u8; SPLIT_HEAD]],
        bufs: &mut [Vec<u8>],
    ) -> Result<usize, libc::c_int> {
        let r = &mut self.rx;
        let n = heads.len().min(bufs.len()).min(RX_SLOTS);
        for i in 0..n {
            r.siovs[2 * i] = libc::iovec {
                iov_base: heads[i].as_mut_ptr().cast(),
                iov_len: SPLIT_HEAD,
            };
            r.siovs[2 * i + 1] = libc::iovec {
                iov_base: bufs[i].as_mut_ptr().cast(),
                iov_len: bufs[i].len(),
            };
        }
        self.recvmmsg_n(n, true, libc::MSG_DONTWAIT)
    }

    /// One non-blocking `recvmmsg` into all slots: how many messages, or the errno.
    fn recvmmsg(&mut self) -> Result<usize, libc::c_int> {
        self.recvmmsg_n(RX_SLOTS, false, libc::MSG_DONTWAIT)
    }

    /// Points headers `0..n` at their iovecs (`iovs[i]`, pointing at slot `i` of the
    /// receive buffer, or with `split` the two at `siovs[2 * i]`, written by the caller) and
    /// at their own address and control buffers, then makes one `recvmmsg` with `flags`:
    /// how many messages, or the errno. The pointers are written when the kind of receive
    /// changes; otherwise only the fields the kernel wrote are reset, in the headers it used.
    fn recvmmsg_n(
        &mut self,
        n: usize,
        split: bool,
        flags: libc::c_int,
    ) -> Result<usize, libc::c_int> {
        let r = &mut self.rx;
        let n = n.min(RX_SLOTS);
        let reset = if r.prepped == Some(split) {
            r.dirty.min(RX_SLOTS)
        } else {
            if !split {
                for i in 0..RX_SLOTS {
                    r.iovs[i] = libc::iovec {
                        iov_base: r.buf[i * RX_SLOT..].as_mut_ptr().cast(),
                        iov_len: RX_SLOT,
                    };
                }
            }
            // The iovec pointers are taken after the arrays are written, from one pointer
            // each.
            let (iovs, per) = if split {
                (r.siovs.as_mut_ptr(), 2)
            } else {
                (r.iovs.as_mut_ptr(), 1)
            };
            for i in 0..RX_SLOTS {
                let h = &mut r.hdrs[i].msg_hdr;
                h.msg_name = r.addrs[i].0.as_mut_ptr().cast();
                // SAFETY: per * i + per - 1 < per * RX_SLOTS, the length of the array: in
                // bounds.
                h.msg_iov = unsafe { iovs.add(per * i) };
                h.msg_iovlen = per as _;
                h.msg_control = r.ctrls[i].0.as_mut_ptr().cast();
            }
            r.prepped = Some(split);
            RX_SLOTS
        };
        for i in 0..reset {
            let h = &mut r.hdrs[i];
            h.msg_len = 0;
            h.msg_hdr.msg_namelen = r.addrs[i].0.len() as libc::socklen_t;
            h.msg_hdr.msg_controllen = r.ctrls[i].0.len() as _;
            h.msg_hdr.msg_flags = 0;
        }
        self.stats.syscalls += 1;
        // SAFETY: every header points at its iovecs (the slots' own, written above once and
        // never changed, each a slot of `self.rx.buf` of RX_SLOT bytes; or the split ones,
        // which `recvmmsg_split` wrote just before this call to point at `heads[i]` and
        // `bufs[i]`, exclusively borrowed for the call) and at its own address and control
        // buffers in `self.rx`, with their true lengths (reset above wherever the kernel
        // wrote them). The kernel writes at most those lengths, into the first `n` headers.
        let got = unsafe {
            libc::recvmmsg(
                self.sock.as_raw_fd(),
                r.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                flags,
                std::ptr::null_mut(),
            )
        };
        // The kernel wrote back the headers of the messages it returned (none on an error).
        r.dirty = (got.max(0) as usize + 1).min(n);
        if got >= 0 {
            Ok(got as usize)
        } else {
            Err(io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO))
        }
    }

    /// What received message `i` is: a datagram (or a GRO batch of several) or something
    /// to skip (counted). `clocks` are the monotonic and the wall clock read together after
    /// the receive: kernel timestamps are wall-clock times.
    fn decode(&mut self, i: usize, clocks: (Instant, SystemTime)) -> Decoded {
        let h = &self.rx.hdrs[i];
        let len = h.msg_len as usize;
        let Some(src) =
            decode_addr(&self.rx.addrs[i].0[..(h.msg_hdr.msg_namelen as usize).min(28)])
        else {
            self.stats.recv_errors += 1;
            return Decoded::Skip;
        };
        if h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            self.stats.recv_errors += 1;
            return Decoded::Skip;
        }
        let ctrl_len = controllen(&h.msg_hdr).min(CTRL_LEN);
        let ctrl = &self.rx.ctrls[i].0[..ctrl_len];
        let gro = cmsgs(ctrl)
            .find(|&(level, ty, _)| level == libc::SOL_UDP && ty == libc::UDP_GRO)
            .and_then(|(_, _, d)| Some(i32::from_ne_bytes(d.get(..4)?.try_into().ok()?)))
            .filter(|&g| g > 0)
            .map(|g| g as usize)
            .filter(|&g| len > g);
        let at = cmsgs(ctrl)
            .find(|&(level, ty, _)| level == libc::SOL_SOCKET && ty == libc::SCM_TIMESTAMPNS)
            .and_then(|(_, _, d)| received_at(d, clocks));
        let tos = cmsgs(ctrl)
            .find(|&(level, ty, _)| {
                (level == libc::IPPROTO_IP && ty == libc::IP_TOS)
                    || (level == libc::IPPROTO_IPV6 && ty == libc::IPV6_TCLASS)
            })
            .and_then(|(_, _, d)| match d.len() {
                1 => Some(d[0]),
                4.. => Some(i32::from_ne_bytes(d[..4].try_into().ok()?) as u8),
                _ => None,
            })
            .unwrap_or(0);
        Decoded::Datagram {
            src,
            len,
            gro,
            at,
            tos,
        }
    }

    /// Turns `n` received messages into batch entries, splitting GRO batches.
    fn unpack(&mut self, n: usize, clocks: (Instant, SystemTime)) {
        for i in 0..n {
            let Decoded::Datagram {
                src,
                len,
                gro,
                at,
                tos,
            } = self.decode(i, clocks)
            else {
                continue;
            };
            let base = i * RX_SLOT;
            let seg = gro.unwrap_or(len).max(1);
            self.stats.gro_batches += u64::from(gro.is_some());
            let mut off = 0;
            loop {
                let l = seg.min(len - off);
                self.rx_metas.push(RxMeta {
                    src,
                    part: 0,
                    offset: base + off,
                    len: l,
                    at,
                    tos,
                });
                self.stats.received += 1;
                off += l;
                if off >= len {
                    break;
                }
            }
        }
    }
}

/// One received message, as [`Core::decode`] reads it.
enum Decoded {
    Skip,
    Datagram {
        src: SocketAddr,
        len: usize,
        /// Segment size of a GRO batch of several datagrams.
        gro: Option<usize>,
        at: Option<Instant>,
        /// The TOS / traffic class byte (0 unless asked for with [`Mmsg::recv_tos`]).
        tos: u8,
    },
}

/// How long the wall clock is carried forward on the monotonic one before it is read
/// again ([`Core::clocks`]).
const WALL_REREAD: Duration = Duration::from_millis(1);

/// The oldest receive timestamp taken as such: older, the wall clock has stepped.
const MAX_RX_AGE: Duration = Duration::from_secs(1);

/// An `SCM_TIMESTAMPNS` payload (a `timespec`: seconds and nanoseconds since the epoch, wall
/// clock) as a monotonic instant: `clocks.0` minus the packet's age at `clocks.1`. `None` when
/// it is malformed or not within [`MAX_RX_AGE`] before the wall-clock reading.
fn received_at(data: &[u8], clocks: (Instant, SystemTime)) -> Option<Instant> {
    const HALF: usize = std::mem::size_of::<libc::time_t>();
    let secs = libc::time_t::from_ne_bytes(data.get(..HALF)?.try_into().ok()?);
    let nanos = libc::c_long::from_ne_bytes(data.get(HALF..2 * HALF)?.try_into().ok()?);
    let stamp = UNIX_EPOCH.checked_add(Duration::new(
        u64::try_from(secs).ok()?,
        u32::try_from(nanos).ok().filter(|&n| n < 1_000_000_000)?,
    ))?;
    let age = clocks.1.duration_since(stamp).ok()?;
    (age <= MAX_RX_AGE)
        .then(|| clocks.0.checked_sub(age))
        .flatten()
}

/// The control bytes the kernel returned (`msg_controllen` is a `size_t` on glibc, a
/// `socklen_t` on musl).
#[allow(clippy::unnecessary_cast)]
pub(super) fn controllen(h: &libc::msghdr) -> usize {
    h.msg_controllen as usize
}

/// Datagrams of `txs` from `at` on.
fn datagrams_from(txs: &[Tx], at: Cursor) -> usize {
    txs.get(at.tx)
        .map_or(0, |t| t.datagrams().saturating_sub(at.seg))
        + txs.iter().skip(at.tx + 1).map(Tx::datagrams).sum::<usize>()
}

/// The kernel's `cmsghdr`: `cmsg_len` (a `size_t`), `cmsg_level`, `cmsg_type`; fields are
/// aligned to `size_t` (`CMSG_ALIGN`).
const CMSG_LEN_FIELD: usize = std::mem::size_of::<usize>();
const CMSG_HDR: usize = CMSG_LEN_FIELD + 8;
const CMSG_ALIGN: usize = std::mem::size_of::<usize>();

fn cmsg_align(n: usize) -> usize {
    n.div_ceil(CMSG_ALIGN) * CMSG_ALIGN
}

/// Writes one control message at the start of `buf`; returns its space (`CMSG_SPACE`).
fn write_cmsg(buf: &mut [u8], level: libc::c_int, ty: libc::c_int, data: &[u8]) -> usize {
    let len = CMSG_HDR + data.len();
    let space = CMSG_HDR + cmsg_align(data.len());
    buf[..space].fill(0);
    buf[..CMSG_LEN_FIELD].copy_from_slice(&len.to_ne_bytes());
    buf[CMSG_LEN_FIELD..CMSG_LEN_FIELD + 4].copy_from_slice(&level.to_ne_bytes());
    buf[CMSG_LEN_FIELD + 4..CMSG_HDR].copy_from_slice(&ty.to_ne_bytes());
    buf[CMSG_HDR..len].copy_from_slice(data);
    space
}

/// The control messages in `buf` (as returned in `msg_control`): level, type and data.
pub(super) fn cmsgs(buf: &[u8]) -> impl Iterator<Item = (i32, i32, &[u8])> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        let h = buf.get(at..at.checked_add(CMSG_HDR)?)?;
        let len = usize::from_ne_bytes(h[..CMSG_LEN_FIELD].try_into().ok()?);
        if len < CMSG_HDR || len > buf.len() - at {
            return None;
        }
        let level = i32::from_ne_bytes(h[CMSG_LEN_FIELD..CMSG_LEN_FIELD + 4].try_into().ok()?);
        let ty = i32::from_ne_bytes(h[CMSG_LEN_FIELD + 4..CMSG_HDR].try_into().ok()?);
        let data = &buf[at + CMSG_HDR..at + len];
        at += cmsg_align(len);
        Some((level, ty, data))
    })
}

/// Writes `addr` as a `sockaddr_in` (or `sockaddr_in6`, IPv4 mapped, on an IPv6 socket) into
/// `out`; returns its length.
fn encode_addr(addr: SocketAddr, v6_socket: bool, out: &mut RawAddr) -> libc::socklen_t {
    let b = &mut out.0;
    b.fill(0);
    let v6 = match addr {
        SocketAddr::V4(a) if !v6_socket => {
            b[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            b[2..4].copy_from_slice(&a.port().to_be_bytes());
            b[4..8].copy_from_slice(&a.ip().octets());
            return 16;
        }
        SocketAddr::V4(a) => SocketAddrV6::new(a.ip().to_ipv6_mapped(), a.port(), 0, 0),
        SocketAddr::V6(a) => a,
    };
    b[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
    b[2..4].copy_from_slice(&v6.port().to_be_bytes());
    b[4..8].copy_from_slice(&v6.flowinfo().to_be_bytes());
    b[8..24].copy_from_slice(&v6.ip().octets());
    b[24..28].copy_from_slice(&v6.scope_id().to_ne_bytes());
    28
}

/// Reads a `sockaddr_in` or `sockaddr_in6`.
fn decode_addr(b: &[u8]) -> Option<SocketAddr> {
    let family = u16::from_ne_bytes(b.get(..2)?.try_into().ok()?);
    let port = u16::from_be_bytes(b.get(2..4)?.try_into().ok()?);
    if family == libc::AF_INET as u16 {
        let ip: [u8; 4] = b.get(4..8)?.try_into().ok()?;
        Some(SocketAddrV4::new(ip.into(), port).into())
    } else if family == libc::AF_INET6 as u16 {
        let flow = u32::from_be_bytes(b.get(4..8)?.try_into().ok()?);
        let ip: [u8; 16] = b.get(8..24)?.try_into().ok()?;
        let scope = u32::from_ne_bytes(b.get(24..28)?.try_into().ok()?);
        Some(SocketAddrV6::new(ip.into(), port, flow, scope).into())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lo() -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
    }

    /// A buffer whose every byte differs from its neighbours' pattern, so a misplaced
    /// boundary shows.
    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// Receives until `n` datagrams arrived or 1 s passed.
    fn collect(rx: &mut impl Datapath, n: usize) -> Vec<(SocketAddr, Vec<u8>)> {
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(1);
        while out.len() < n {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            let batch = rx.recv(Some(left)).expect("recv");
            out.extend(batch.iter().map(|(s, d)| (s, d.to_vec())));
        }
        out
    }

    /// Runs of several shapes: a single datagram, full runs, a run with a short last
    /// datagram, 1-byte datagrams, a largest GSO run of 1472-byte datagrams.
    fn runs(dst: SocketAddr) -> (Vec<u8>, Vec<Tx>) {
        let shapes = [
            (1000, 1000),
            (1472 * 3, 1472),
            (1200 * 4 + 17, 1200),
            (5, 1),
            (1472 * 44, 1472),
            (300, 300),
        ];
        let total = shapes.iter().map(|s| s.0).sum();
        let mut txs = Vec::new();
        let mut at = 0;
        for (len, seg) in shapes {
            txs.push(Tx {
                dst,
                offset: at,
                len,
                segment_size: seg,
            });
            at += len;
        }
        (pattern(total), txs)
    }

    fn expected(buf: &[u8], txs: &[Tx]) -> Vec<Vec<u8>> {
        txs.iter()
            .flat_map(|t| t.segments())
            .map(|r| buf[r].to_vec())
            .collect()
    }

    fn round_trip(gso: bool) {
        let mut a = Mmsg::bind(lo(), gso).unwrap();
        let mut b = Mmsg::bind(lo(), gso).unwrap();
        let (buf, txs) = runs(b.local_addr().unwrap());
        assert_eq!(a.send(&buf, &txs).unwrap(), txs.len());
        let want = expected(&buf, &txs);
        let got = collect(&mut b, want.len());
        let from = a.local_addr().unwrap();
        assert!(got.iter().all(|(s, _)| *s == from));
        let got: Vec<Vec<u8>> = got.into_iter().map(|(_, d)| d).collect();
        assert_eq!(got, want);
        let (sa, sb) = (a.stats(), b.stats());
        assert_eq!(sa.sent, want.len() as u64);
        assert_eq!(sb.received, want.len() as u64);
        assert_eq!(sa.send_errors + sa.send_nobufs + sa.degraded, 0);
        if gso {
            assert_eq!(a.name(), "gso");
            assert_eq!(a.max_segments(), GSO_MAX_SEGMENTS);
            assert_eq!(sa.gso_sends, 4);
            assert_eq!(sa.syscalls, 1, "one sendmmsg for the whole batch");
            // Loopback hands GSO batches to a GRO socket unsplit: the datapath splits them.
            assert!(sb.gro_batches >= 1, "{sb:?}");
        } else {
            assert_eq!(a.name(), "mmsg");
            assert_eq!(a.max_segments(), 1);
            assert_eq!(sa.gso_sends, 0);
            assert_eq!(sb.gro_batches, 0);
            // 1 + 3 + 5 + 5 + 44 + 1 = 59 datagrams: one sendmmsg.
            assert_eq!(sa.syscalls, 1);
        }
    }

    #[test]
    fn round_trip_with_gso() {
        round_trip(true);
    }

    /// Datagrams as a gathering caller hands them over: a header and a payload apart.
    struct Parts(Vec<(SocketAddr, Vec<u8>, Vec<u8>)>);

    impl TxGather for Parts {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn get(&self, i: usize) -> (SocketAddr, &[u8], &[u8]) {
            let (dst, head, tail) = &self.0[i];
            (*dst, head, tail)
        }
    }

    /// The datagrams of [`runs`], each cut into a 16-byte header and its payload (shorter
    /// ones are all header), and one to a second receiver in the middle of a run of equal
    /// sizes: every datagram arrives whole, at its destination, in order.
    fn gather_round_trip(gso: bool) {
        let mut a = Mmsg::bind(lo(), gso).unwrap();
        let mut b = Mmsg::bind(lo(), gso).unwrap();
        let mut c = Mmsg::bind(lo(), gso).unwrap();
        let (bd, cd) = (b.local_addr().unwrap(), c.local_addr().unwrap());
        let (buf, txs) = runs(bd);
        let mut parts: Vec<_> = expected(&buf, &txs)
            .into_iter()
            .map(|d| {
                let cut = d.len().min(16);
                (bd, d[..cut].to_vec(), d[cut..].to_vec())
            })
            .collect();
        let odd = parts[3].clone();
        parts.insert(3, (cd, odd.1, odd.2));
        let parts = Parts(parts);
        assert!(a.gathers());
        assert_eq!(a.send_gather(&parts).unwrap(), parts.len());
        let want = |dst| -> Vec<Vec<u8>> {
            parts
                .0
                .iter()
                .filter(|p| p.0 == dst)
                .map(|p| [&p.1[..], &p.2[..]].concat())
                .collect()
        };
        let (want_b, want_c) = (want(bd), want(cd));
        let got_b: Vec<_> = collect(&mut b, want_b.len())
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        let got_c: Vec<_> = collect(&mut c, want_c.len())
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        assert_eq!(got_b, want_b);
        assert_eq!(got_c, want_c);
        let sa = a.stats();
        assert_eq!(sa.sent, parts.len() as u64);
        assert_eq!(sa.send_errors + sa.send_nobufs + sa.degraded, 0);
        assert_eq!(sa.syscalls, 1, "one sendmmsg for the whole batch");
        assert_eq!(sa.gso_sends > 0, gso, "{sa:?}");
    }

    #[test]
    fn gather_round_trip_with_gso() {
        gather_round_trip(true);
    }

    #[test]
    fn gather_round_trip_without_gso() {
        gather_round_trip(false);
    }

    /// Receives `n` datagrams with `recv_split` into buffers of `buf_len` bytes, joining the
    /// two parts (and cutting GRO batches) back into datagrams.
    fn collect_split(rx: &mut Mmsg, n: usize, buf_len: usize) -> Vec<Vec<u8>> {
        let mut heads = vec![[0u8; SPLIT_HEAD]; RX_SLOTS];
        let mut bufs = vec![vec![0u8; buf_len]; RX_SLOTS];
        let mut splits = Vec::new();
        let mut out = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(1);
        while out.len() < n {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            rx.recv_split(Some(left), &mut heads, &mut bufs, &mut splits)
                .expect("recv_split");
            for m in &splits {
                let head = m.len.min(SPLIT_HEAD);
                let whole = [&heads[m.index][..head], &bufs[m.index][..m.len - head]].concat();
                let seg = m.segment.unwrap_or(m.len).max(1);
                out.extend(whole.chunks(seg).map(<[u8]>::to_vec));
                if m.len == 0 {
                    out.push(Vec::new());
                }
            }
        }
        out
    }

    /// GSO runs from `a` reach a split receiver datagram by datagram (GRO is off while it
    /// splits), and a batch receive afterwards has GRO back.
    fn split_round_trip(gso: bool) {
        let mut a = Mmsg::bind(lo(), gso).unwrap();
        let mut b = Mmsg::bind(lo(), gso).unwrap();
        assert!(b.splits());
        // GRO goes off with the first split receive (which finds nothing yet).
        let (mut heads, mut bufs, mut out) =
            (vec![[0; SPLIT_HEAD]; 1], vec![vec![0; 8]; 1], Vec::new());
        b.recv_split(Some(Duration::ZERO), &mut heads, &mut bufs, &mut out)
            .unwrap();
        let (buf, txs) = runs(b.local_addr().unwrap());
        assert_eq!(a.send(&buf, &txs).unwrap(), txs.len());
        let want = expected(&buf, &txs);
        // Buffers of 1472 - 16 bytes: enough for one datagram, not for a batch.
        let got = collect_split(&mut b, want.len(), 1456);
        assert_eq!(got, want);
        let sb = b.stats();
        assert_eq!(sb.received, want.len() as u64);
        assert_eq!(sb.gro_batches + sb.recv_errors, 0, "{sb:?}");
        // A batch receive turns GRO back on (for what arrives from then on).
        assert!(b.recv(Some(Duration::ZERO)).unwrap().is_empty());
        assert_eq!(a.send(&buf, &txs).unwrap(), txs.len());
        assert_eq!(collect(&mut b, want.len()).len(), want.len());
        assert_eq!(b.stats().gro_batches > 0, gso, "{:?}", b.stats());
    }

    #[test]
    fn split_round_trip_from_a_gso_sender() {
        split_round_trip(true);
    }

    #[test]
    fn split_round_trip_from_a_plain_sender() {
        split_round_trip(false);
    }

    #[test]
    fn split_receives_drop_what_does_not_fit_and_wake() {
        let mut a = Mmsg::bind(lo(), false).unwrap();
        let mut b = Mmsg::bind(lo(), false).unwrap();
        let dst = b.local_addr().unwrap();
        // 16 + 100 bytes fit; 16 + 101 do not.
        let buf = pattern(116 + 117 + 3);
        let txs = [
            Tx::single(dst, 0, 116),
            Tx::single(dst, 116, 117),
            Tx::single(dst, 233, 3),
        ];
        assert_eq!(a.send(&buf, &txs).unwrap(), 3);
        let got = collect_split(&mut b, 2, 100);
        assert_eq!(got, vec![buf[..116].to_vec(), buf[233..].to_vec()]);
        assert_eq!(b.stats().recv_errors, 1, "the long one is counted");
        // A wake-up ends a blocked split receive with nothing.
        b.waker().unwrap().wake();
        let (mut heads, mut bufs, mut out) =
            (vec![[0; SPLIT_HEAD]; 4], vec![vec![0; 100]; 4], Vec::new());
        let t = Instant::now();
        b.recv_split(
            Some(Duration::from_secs(5)),
            &mut heads,
            &mut bufs,
            &mut out,
        )
        .unwrap();
        assert!(out.is_empty() && t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn zero_copy_sends_do_not_gather() {
        let mut z = match MsgZerocopy::bind(lo()) {
            Ok(z) => z,
            Err(e) => panic!("MSG_ZEROCOPY not available: {e}"),
        };
        assert!(!z.gathers());
        let parts = Parts(vec![(lo(), vec![1], vec![2])]);
        assert_eq!(
            z.send_gather(&parts).unwrap_err().kind(),
            io::ErrorKind::Unsupported
        );
    }

    #[test]
    fn round_trip_without_gso() {
        round_trip(false);
    }

    #[test]
    fn gso_sender_plain_receiver() {
        // The kernel segments the batch for a socket without GRO.
        let mut a = Mmsg::bind(lo(), true).unwrap();
        let mut b = Mmsg::bind(lo(), false).unwrap();
        let (buf, txs) = runs(b.local_addr().unwrap());
        a.send(&buf, &txs).unwrap();
        let want = expected(&buf, &txs);
        let got: Vec<Vec<u8>> = collect(&mut b, want.len())
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        assert_eq!(got, want);
        assert_eq!(b.stats().gro_batches, 0);
    }

    #[test]
    fn big_batch_is_few_syscalls() {
        // 64 runs of 44 x 1472 B: 2,816 datagrams in 64 GSO sends, one sendmmsg.
        let mut a = Mmsg::bind(lo(), true).unwrap();
        let b = Mmsg::bind(lo(), true).unwrap();
        let dst = b.local_addr().unwrap();
        let run = 1472 * 44;
        let buf = pattern(run * 64);
        let txs: Vec<Tx> = (0..64)
            .map(|i| Tx {
                dst,
                offset: i * run,
                len: run,
                segment_size: 1472,
            })
            .collect();
        assert_eq!(a.send(&buf, &txs).unwrap(), 64);
        let s = a.stats();
        assert_eq!(s.gso_sends, 64);
        assert_eq!(s.sent, 64 * 44);
        assert!(s.syscalls <= 1 + s.send_would_block * 2, "{s:?}");
    }

    #[test]
    fn more_runs_than_headers_are_chunked() {
        let mut a = Mmsg::bind(lo(), false).unwrap();
        let mut b = Mmsg::bind(lo(), false).unwrap();
        let dst = b.local_addr().unwrap();
        let buf = pattern(200 * 100);
        let txs: Vec<Tx> = (0..200).map(|i| Tx::single(dst, i * 100, 100)).collect();
        assert_eq!(a.send(&buf, &txs).unwrap(), 200);
        assert_eq!(a.stats().syscalls, 200usize.div_ceil(TX_MSGS) as u64);
        let got = collect(&mut b, 200);
        assert_eq!(got.len(), 200);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, (_, d))| d[..] == buf[i * 100..][..100]));
    }

    #[test]
    fn refused_gso_falls_back_to_single_datagrams() {
        let mut a = Mmsg::bind(lo(), true).unwrap();
        let mut b = Mmsg::bind(lo(), true).unwrap();
        let (buf, txs) = runs(b.local_addr().unwrap());
        a.fail_next_gso();
        assert_eq!(a.send(&buf, &txs).unwrap(), txs.len());
        let want = expected(&buf, &txs);
        let got: Vec<Vec<u8>> = collect(&mut b, want.len())
            .into_iter()
            .map(|(_, d)| d)
            .collect();
        assert_eq!(got, want, "nothing lost in the fallback");
        let s = a.stats();
        assert_eq!(s.degraded, 1);
        assert_eq!(s.sent, want.len() as u64);
        assert_eq!(
            s.gso_sends, 0,
            "the first run (a single) went before the refusal"
        );
        assert_eq!(a.max_segments(), 1);
        assert_eq!(a.name(), "mmsg");
        assert_eq!(b.stats().gro_batches, 0);
    }

    #[test]
    fn a_bad_destination_is_skipped_not_blamed_on_gso() {
        // Port 0 is refused (EINVAL) whatever the segmentation: counted, skipped, GSO kept.
        let mut a = Mmsg::bind(lo(), true).unwrap();
        let mut b = Mmsg::bind(lo(), true).unwrap();
        let dst = b.local_addr().unwrap();
        let bad = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let buf = pattern(3000);
        let txs = [
            Tx::single(dst, 0, 500),
            Tx {
                dst: bad,
                offset: 500,
                len: 1000,
                segment_size: 500,
            },
            Tx::single(bad, 1500, 500),
            Tx {
                dst,
                offset: 2000,
                len: 1000,
                segment_size: 500,
            },
        ];
        assert_eq!(a.send(&buf, &txs).unwrap(), 4);
        let got: Vec<Vec<u8>> = collect(&mut b, 3).into_iter().map(|(_, d)| d).collect();
        assert_eq!(got, [&buf[..500], &buf[2000..2500], &buf[2500..3000]]);
        let s = a.stats();
        assert_eq!((s.send_errors, s.degraded, s.gso_sends), (3, 0, 1), "{s:?}");
        assert_eq!(a.max_segments(), GSO_MAX_SEGMENTS);
    }

    #[test]
    fn zero_length_datagrams() {
        for gso in [false, true] {
            let mut a = Mmsg::bind(lo(), gso).unwrap();
            let mut b = Mmsg::bind(lo(), gso).unwrap();
            let dst = b.local_addr().unwrap();
            let buf = pattern(10);
            let txs = [
                Tx::single(dst, 0, 0),
                Tx::single(dst, 0, 10),
                Tx::single(dst, 10, 0),
            ];
            assert_eq!(a.send(&buf, &txs).unwrap(), 3);
            let got = collect(&mut b, 3);
            let lens: Vec<usize> = got.iter().map(|(_, d)| d.len()).collect();
            assert_eq!(lens, [0, 10, 0], "gso={gso}");
            assert_eq!(got[0].0, a.local_addr().unwrap());
        }
    }

    #[test]
    fn datagrams_carry_their_kernel_receive_time() {
        let mut a = Mmsg::bind(lo(), true).unwrap();
        let mut b = Mmsg::bind(lo(), true).unwrap();
        let dst = b.local_addr().unwrap();
        let before = Instant::now();
        a.send(&pattern(100), &[Tx::single(dst, 0, 100)]).unwrap();
        // Read it late: the timestamp is the arrival, not the read.
        std::thread::sleep(Duration::from_millis(30));
        let batch = b.recv(Some(Duration::from_secs(1))).unwrap();
        let read = Instant::now();
        let (_, data, at) = batch.iter_timed().next().expect("a datagram");
        assert_eq!(data.len(), 100);
        let at = at.expect("a receive timestamp");
        // The conversion between clocks rounds by a few microseconds.
        assert!(
            at + Duration::from_millis(1) >= before,
            "{at:?} before {before:?}"
        );
        assert!(
            read.duration_since(at) >= Duration::from_millis(25),
            "{at:?} {read:?}"
        );
    }

    #[test]
    fn every_receive_keeps_its_addresses_and_control_data() {
        // Headers are reset only where the kernel wrote them: batches of changing sizes,
        // through both receives and a split one in between, each datagram with its source,
        // its bytes and its timestamp.
        let mut a = Mmsg::bind(lo(), true).unwrap();
        let mut b = Mmsg::bind(lo(), false).unwrap();
        b.enable_slices(Duration::from_millis(5)).unwrap();
        let (src, dst) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        let buf = pattern(64 * 100);
        for (round, n) in [5usize, 1, 64, 3, 64, 2, 1, 7].into_iter().enumerate() {
            let txs: Vec<Tx> = (0..n).map(|i| Tx::single(dst, i * 100, 100)).collect();
            assert_eq!(a.send(&buf, &txs).unwrap(), n);
            std::thread::sleep(Duration::from_millis(5));
            let mut got = Vec::new();
            let end = Instant::now() + Duration::from_secs(2);
            while got.len() < n && Instant::now() < end {
                if round == 3 {
                    let mut heads = vec![[0u8; SPLIT_HEAD]; 8];
                    let mut bufs = vec![vec![0u8; 100]; 8];
                    let mut out = Vec::new();
                    b.recv_split(
                        Some(Duration::from_millis(100)),
                        &mut heads,
                        &mut bufs,
                        &mut out,
                    )
                    .unwrap();
                    for r in &out {
                        let mut d = heads[r.index][..SPLIT_HEAD.min(r.len)].to_vec();
                        d.extend_from_slice(&bufs[r.index][..r.len.saturating_sub(SPLIT_HEAD)]);
                        got.push((r.src, d, r.at.is_some()));
                    }
                    continue;
                }
                let batch = if round % 2 == 0 {
                    b.recv(Some(Duration::from_millis(100))).unwrap()
                } else {
                    b.recv_slice(Instant::now()).unwrap()
                };
                got.extend(
                    batch
                        .iter_timed()
                        .zip(batch.iter())
                        .map(|((_, d, at), (s, _))| (s, d.to_vec(), at.is_some())),
                );
            }
            assert_eq!(got.len(), n, "round {round}");
            for (i, (s, d, timed)) in got.iter().enumerate() {
                assert_eq!(*s, src, "round {round}");
                assert_eq!(
                    &d[..],
                    &buf[i * 100..i * 100 + 100],
                    "round {round}, datagram {i}"
                );
                assert!(timed, "round {round}, datagram {i}: no timestamp");
            }
        }
    }

    #[test]
    fn the_wall_clock_is_carried_forward_for_a_millisecond_then_read_again() {
        let mut m = Mmsg::bind(SocketAddr::from(([127, 0, 0, 1], 0)), false).unwrap();
        // A reading a second behind the wall clock (as if it had stepped since), taken
        // less than WALL_REREAD ago on the monotonic clock (here: not yet, so that a
        // stalled test thread cannot make it older): carried forward, not read again.
        let behind = SystemTime::now() - Duration::from_secs(1);
        m.core.wall = (Instant::now() + Duration::from_secs(60), behind);
        let (_, wall) = m.core.clocks();
        assert_eq!(wall, behind);
        // The same reading taken longer ago than WALL_REREAD: read again.
        m.core.wall = (Instant::now() - WALL_REREAD * 2, behind);
        let (_, wall) = m.core.clocks();
        let lag = SystemTime::now().duration_since(wall).unwrap();
        assert!(lag < Duration::from_millis(500), "{lag:?}");
    }

    #[test]
    fn receive_timestamps_out_of_reason_are_ignored() {
        let now = (Instant::now(), SystemTime::now());
        let stamp = |age: Duration| {
            let t = now
                .1
                .checked_sub(age)
                .unwrap()
                .duration_since(UNIX_EPOCH)
                .unwrap();
            let mut b = (t.as_secs() as libc::time_t).to_ne_bytes().to_vec();
            b.extend((libc::c_long::from(t.subsec_nanos() as i32)).to_ne_bytes());
            b
        };
        let ok = received_at(&stamp(Duration::from_millis(5)), now).unwrap();
        assert_eq!(now.0.duration_since(ok), Duration::from_millis(5));
        // Older than a second (the wall clock stepped), from the future, cut short, or
        // with nanoseconds out of range: none.
        assert!(received_at(&stamp(Duration::from_secs(2)), now).is_none());
        let future = now.1 + Duration::from_secs(5);
        let mut b = (future.duration_since(UNIX_EPOCH).unwrap().as_secs() as libc::time_t)
            .to_ne_bytes()
            .to_vec();
        b.extend((0 as libc::c_long).to_ne_bytes());
        assert!(received_at(&b, now).is_none());
        let good = stamp(Duration::from_millis(5));
        assert!(received_at(&good[..good.len() - 1], now).is_none());
        assert!(received_at(&[], now).is_none());
        let mut bad = good.clone();
        let half = std::mem::size_of::<libc::time_t>();
        bad[half..].copy_from_slice(&(2_000_000_000 as libc::c_long).to_ne_bytes());
        assert!(received_at(&bad, now).is_none());
        let mut neg = good;
        neg[..half].copy_from_slice(&(-1 as libc::time_t).to_ne_bytes());
        assert!(received_at(&neg, now).is_none());
    }

    #[test]
    fn waker_interrupts_a_blocked_recv() {
        let mut a = Mmsg::bind(lo(), true).unwrap();
        let w = a.waker().unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w.wake();
        });
        let start = Instant::now();
        let batch = a.recv(Some(Duration::from_secs(10))).unwrap();
        assert!(batch.is_empty());
        assert!(start.elapsed() < Duration::from_secs(2));
        t.join().unwrap();
        assert_eq!(a.stats().received, 0);
        // The wake was used up: the next receive waits its whole timeout again.
        let start = Instant::now();
        assert!(a.recv(Some(Duration::from_millis(30))).unwrap().is_empty());
        assert!(start.elapsed() >= Duration::from_millis(30));
    }

    #[test]
    fn recv_times_out() {
        let mut a = Mmsg::bind(lo(), false).unwrap();
        let start = Instant::now();
        assert!(a.recv(Some(Duration::from_millis(20))).unwrap().is_empty());
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(a.recv(Some(Duration::ZERO)).unwrap().is_empty());
    }

    #[test]
    fn sliced_receives_block_in_the_kernel_and_ask_for_what_comes() {
        let mut a = Mmsg::bind(lo(), true).unwrap();
        a.enable_slices(Duration::from_millis(5)).unwrap();
        assert_eq!(a.slice(), Some(Duration::from_millis(5)));
        let mut b = Mmsg::bind(lo(), false).unwrap();
        let dst = a.local_addr().unwrap();
        // Nothing comes: the slice runs out (a kernel tick or two later at most).
        let start = Instant::now();
        assert!(a.recv_slice(start).unwrap().is_empty());
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_millis(4) && waited < Duration::from_secs(1),
            "{waited:?}"
        );
        // Three datagrams queued: one call takes them all, and the next asks for three.
        let buf = pattern(300);
        let txs: Vec<Tx> = (0..3).map(|i| Tx::single(dst, i * 100, 100)).collect();
        assert_eq!(b.send(&buf, &txs).unwrap(), 3);
        std::thread::sleep(Duration::from_millis(20));
        let start = Instant::now();
        let got: Vec<Vec<u8>> = a
            .recv_slice(start)
            .unwrap()
            .iter()
            .map(|(_, d)| d.to_vec())
            .collect();
        assert_eq!(got, [&buf[..100], &buf[100..200], &buf[200..]]);
        assert_eq!(a.core.slice_ask, 3);
        // One datagram that arrives during the wait: the next asks for one.
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(2));
            b.send(&[7; 10], &[Tx::single(dst, 0, 10)]).unwrap();
            b
        });
        let start = Instant::now();
        let mut n = 0;
        while n == 0 && start.elapsed() < Duration::from_secs(2) {
            n = a.recv_slice(start).unwrap().len();
        }
        assert_eq!(n, 1);
        assert_eq!(a.core.slice_ask, 1);
        t.join().unwrap();
        // A waker handed out: a blocking receive would not see it, so no slices.
        let _w = a.waker().unwrap();
        assert_eq!(a.slice(), None);
        // The ordinary receive still works on the blocking socket, and still times out.
        let start = Instant::now();
        assert!(a.recv(Some(Duration::from_millis(20))).unwrap().is_empty());
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn run_outside_the_buffer_is_refused() {
        let mut a = Mmsg::bind(lo(), true).unwrap();
        let dst = a.local_addr().unwrap();
        let err = a.send(&[0; 10], &[Tx::single(dst, 5, 6)]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(a.stats().syscalls, 0);
    }

    #[test]
    fn unread_receiver_does_not_block_the_sender() {
        unread_receiver_does_not_block(false);
    }

    #[test]
    fn unread_receiver_does_not_block_a_sender_whose_socket_blocks() {
        unread_receiver_does_not_block(true);
    }

    /// A receiver that never reads: its queue overflows and the kernel drops; the sender
    /// (with `sliced`, on a socket made blocking for its receives) neither blocks for good
    /// nor loses count (EAGAIN, if any, is waited out).
    fn unread_receiver_does_not_block(sliced: bool) {
        let mut a = Mmsg::bind(lo(), true).unwrap();
        if sliced {
            a.enable_slices(Duration::from_millis(5)).unwrap();
        }
        let b = Mmsg::bind(lo(), true).unwrap();
        let dst = b.local_addr().unwrap();
        let run = 1472 * 44;
        let buf = pattern(run * 16);
        let txs: Vec<Tx> = (0..16)
            .map(|i| Tx {
                dst,
                offset: i * run,
                len: run,
                segment_size: 1472,
            })
            .collect();
        let start = Instant::now();
        for _ in 0..40 {
            assert_eq!(a.send(&buf, &txs).unwrap(), 16);
        }
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(a.stats().sent, 40 * 16 * 44);
    }

    #[test]
    fn ipv6_round_trip() {
        let Ok(mut a) = Mmsg::bind("[::1]:0".parse().unwrap(), true) else {
            eprintln!("no IPv6 loopback: skipped");
            return;
        };
        let mut b = Mmsg::bind("[::1]:0".parse().unwrap(), true).unwrap();
        let (buf, txs) = runs(b.local_addr().unwrap());
        a.send(&buf, &txs).unwrap();
        let want = expected(&buf, &txs);
        let got = collect(&mut b, want.len());
        assert!(got.iter().all(|(s, _)| *s == a.local_addr().unwrap()));
        let got: Vec<Vec<u8>> = got.into_iter().map(|(_, d)| d).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn zerocopy_round_trip_counts_completions() {
        let mut a = match MsgZerocopy::bind(lo()) {
            Ok(a) => a,
            Err(e) => panic!("MSG_ZEROCOPY not available: {e}"),
        };
        assert_eq!(a.name(), "msg-zc");
        let mut b = Mmsg::bind(lo(), true).unwrap();
        let (buf, mut txs) = runs(b.local_addr().unwrap());
        txs.push(Tx::single(b.local_addr().unwrap(), 0, 0));
        for _ in 0..3 {
            assert_eq!(a.send(&buf, &txs).unwrap(), txs.len());
            let want = expected(&buf, &txs);
            let got: Vec<Vec<u8>> = collect(&mut b, want.len())
                .into_iter()
                .map(|(_, d)| d)
                .collect();
            assert_eq!(got, want);
        }
        let s = a.stats();
        assert!(s.zerocopy_completed > 0, "{s:?}");
        assert_eq!(s.zerocopy_completed, 3 * txs.len() as u64, "{s:?}");
        // Loopback cannot keep user pages: the kernel reports copies.
        assert!(s.zerocopy_copied > 0, "{s:?}");
        assert_eq!(s.gso_sends, 3 * 4);
        assert_eq!(a.core.zc.as_ref().map(|z| z.pending()), Some(0));
    }

    #[test]
    fn zerocopy_many_sends_respect_the_kernel_limits() {
        // More outstanding zero-copy sends than optmem allows by default: ENOBUFS is met by
        // draining completions and retrying, so everything is sent.
        let mut a = MsgZerocopy::bind(lo()).unwrap();
        let b = Mmsg::bind(lo(), false).unwrap();
        let dst = b.local_addr().unwrap();
        let buf = pattern(1000 * 1000);
        let txs: Vec<Tx> = (0..1000).map(|i| Tx::single(dst, i * 1000, 1000)).collect();
        assert_eq!(a.send(&buf, &txs).unwrap(), 1000);
        let s = a.stats();
        assert_eq!(s.sent, 1000);
        assert_eq!(s.send_nobufs, 0);
        assert_eq!(a.core.zc.as_ref().map(|z| z.pending()), Some(0), "{s:?}");
    }

    #[test]
    fn probe_finds_this_kernel_capable() {
        let caps = probe();
        eprintln!("{caps:?}");
        assert!(caps.sendmmsg);
        // The measured kernel (6.18) has all of them; say which one is missing otherwise.
        assert!(caps.gso, "UDP GSO missing: {caps:?}");
        assert!(caps.gro, "UDP GRO missing: {caps:?}");
        assert!(caps.msg_zerocopy, "MSG_ZEROCOPY missing: {caps:?}");
        assert_eq!(caps.gso_max_segments, GSO_MAX_SEGMENTS);
    }

    #[test]
    fn cmsg_encoding_round_trips() {
        let mut c = Ctrl([0; CTRL_LEN]);
        let space = write_cmsg(
            &mut c.0,
            libc::SOL_UDP,
            libc::UDP_SEGMENT,
            &1472u16.to_ne_bytes(),
        );
        assert_eq!(space, CMSG_HDR + CMSG_ALIGN);
        let all: Vec<_> = cmsgs(&c.0[..space]).collect();
        assert_eq!(
            all,
            [(libc::SOL_UDP, libc::UDP_SEGMENT, &1472u16.to_ne_bytes()[..])]
        );
        assert_eq!(cmsgs(&[0xff; 7]).count(), 0);
        let mut garbage = [0u8; 64];
        garbage[0] = 200; // length beyond the buffer
        assert_eq!(cmsgs(&garbage).count(), 0);
    }

    #[test]
    fn addresses_round_trip() {
        let mut raw = RawAddr([0; 28]);
        for a in ["1.2.3.4:5678", "[::1]:9", "[fe80::1%3]:443"] {
            let a: SocketAddr = a.parse().unwrap();
            let n = encode_addr(a, a.is_ipv6(), &mut raw) as usize;
            assert_eq!(decode_addr(&raw.0[..n]), Some(a));
        }
        let v4: SocketAddr = "1.2.3.4:5".parse().unwrap();
        let n = encode_addr(v4, true, &mut raw) as usize;
        assert_eq!(n, 28);
        assert_eq!(
            decode_addr(&raw.0[..n]),
            Some(SocketAddr::new(
                Ipv4Addr::new(1, 2, 3, 4).to_ipv6_mapped().into(),
                5
            ))
        );
    }

    fn singles(n: usize) -> (Mmsg, Mmsg, Vec<u8>, Vec<Tx>) {
        let a = Mmsg::bind(lo(), false).unwrap();
        let b = Mmsg::bind(lo(), false).unwrap();
        let dst = b.local_addr().unwrap();
        let txs = (0..n).map(|i| Tx::single(dst, i * 100, 100)).collect();
        (a, b, pattern(n * 100), txs)
    }

    #[test]
    fn eagain_is_waited_out() {
        let (mut a, mut b, buf, txs) = singles(100);
        a.fail_send(1, libc::EAGAIN);
        assert_eq!(a.send(&buf, &txs).unwrap(), 100);
        let s = a.stats();
        assert_eq!((s.sent, s.send_would_block), (100, 1));
        assert_eq!(collect(&mut b, 100).len(), 100);
    }

    #[test]
    fn enobufs_ends_the_call_early() {
        let (mut a, mut b, buf, txs) = singles(200);
        a.fail_send(1, libc::ENOBUFS);
        assert_eq!(a.send(&buf, &txs).unwrap(), TX_MSGS);
        let s = a.stats();
        assert_eq!(s.sent, TX_MSGS as u64);
        assert_eq!(s.send_nobufs, (200 - TX_MSGS) as u64);
        assert_eq!(collect(&mut b, TX_MSGS).len(), TX_MSGS);
        assert!(b.recv(Some(Duration::from_millis(20))).unwrap().is_empty());
    }

    #[test]
    fn enobufs_mid_run_counts_only_the_rest() {
        let mut a = Mmsg::bind(lo(), false).unwrap();
        let dst = a.local_addr().unwrap();
        let buf = pattern(100 * 100);
        let txs = [Tx {
            dst,
            offset: 0,
            len: 100 * 100,
            segment_size: 100,
        }];
        a.fail_send(1, libc::ENOBUFS);
        assert_eq!(a.send(&buf, &txs).unwrap(), 0);
        let s = a.stats();
        assert_eq!((s.sent, s.send_nobufs), (64, 36));
    }

    #[test]
    fn zerocopy_enobufs_drains_completions_and_retries() {
        let mut a = MsgZerocopy::bind(lo()).unwrap();
        let mut b = Mmsg::bind(lo(), false).unwrap();
        let dst = b.local_addr().unwrap();
        let buf = pattern(200 * 100);
        let txs: Vec<Tx> = (0..200).map(|i| Tx::single(dst, i * 100, 100)).collect();
        a.core.fail_send = Some((1, libc::ENOBUFS));
        assert_eq!(a.send(&buf, &txs).unwrap(), 200);
        let s = a.stats();
        assert_eq!(
            (s.sent, s.send_nobufs, s.zerocopy_completed),
            (200, 0, 200),
            "{s:?}"
        );
        assert_eq!(collect(&mut b, 200).len(), 200);
    }
}
