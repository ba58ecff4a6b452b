//! The io_uring engine under both the [`super::Uring`] datapath and the asynchronous datagram
//! socket: one UDP socket, one ring, one buffer pool.
//!
//! What it owns:
//! - the pool ([`PoolMem`]), registered as one fixed buffer (used by SEND_ZC);
//! - a provided-buffer ring fed with pool slots, from which one multishot RECVMSG takes a
//!   slot per datagram (or per GRO super-datagram); re-armed whenever it ends;
//! - a fixed table of send operations (the bounded in-flight level) and an overflow queue
//!   behind it (E-UDP's two-level queue): posted sends that find every operation busy wait
//!   there, in order, and move up as operations complete.
//!
//! Calling protocol: post sends with [`Engine::post_send`] (consecutive sends of the same
//! length to the same destination share one GSO SENDMSG, up to [`MAX_SEGS`] buffers), then
//! [`Engine::flush`] to submit; give receive buffers with [`Engine::provide`]; call
//! [`Engine::reap`] (or [`Engine::wait`] then `reap`) and take results from
//! [`Engine::send_done`] and [`Engine::recv_done`]. Nothing here allocates after
//! construction: every queue has its capacity reserved for the pool's slot count, which bounds
//! how many entries can exist at once.

use super::pool::{Buf, PoolMem, HEADROOM};
use crate::datapath::MAX_UDP_PAYLOAD;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use socket2::SockAddr;
use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most datagrams in one GSO send (the kernel's UDP_MAX_SEGMENTS).
pub(crate) const MAX_SEGS: usize = 64;

const RECV_UD: u64 = u64::MAX;
const CANCEL_UD: u64 = u64::MAX - 1;
/// Source-address field of a multishot receive buffer.
const NAME_LEN: u32 = 32;
/// Control-message field; 16 + NAME_LEN + CONTROL_LEN == HEADROOM.
const CONTROL_LEN: u32 = 80;
const _: () = assert!(16 + NAME_LEN as usize + CONTROL_LEN as usize == HEADROOM);
/// `IORING_NOTIF_USAGE_ZC_COPIED`, in a notification's result.
const NOTIF_COPIED: u32 = 1 << 31;
/// `IORING_SEND_ZC_REPORT_USAGE`.
const ZC_REPORT_USAGE: u16 = 1 << 3;
const SOL_UDP: i32 = 17;
const UDP_SEGMENT: i32 = 103;
const UDP_GRO: i32 = 104;
const SO_RXQ_OVFL: i32 = 40;
const BGID: u16 = 7;

/// How the engine is built.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EngineConfig {
    /// Slots on the pool's free list (for the application).
    pub bufs: usize,
    /// Slots given to the kernel's receive ring from the start.
    pub reserve: usize,
    /// Payload bytes per slot.
    pub payload: usize,
    /// Send operations in flight at most.
    pub ops: usize,
    /// SEND_ZC / SENDMSG_ZC instead of SENDMSG.
    pub zerocopy: bool,
    /// Coalesce same-size runs into GSO sends.
    pub gso: bool,
    /// UDP_GRO on the socket (needs slots of 64 KiB).
    pub gro: bool,
    /// SO_SNDBUF / SO_RCVBUF asked for.
    pub sndbuf: usize,
    pub rcvbuf: usize,
}

/// A finished send of one pool buffer.
#[derive(Debug)]
pub(crate) struct SendDone {
    pub tag: u64,
    pub buf: Buf,
    pub dst: SocketAddr,
    /// errno when the datagram was not sent.
    pub error: Option<i32>,
    /// Sent with SEND_ZC / SENDMSG_ZC.
    pub zerocopy: bool,
    /// The kernel reported it copied the bytes after all.
    pub copied: bool,
}

/// A received datagram (or GRO super-datagram) in a pool buffer (`buf.len()` bytes).
#[derive(Debug)]
pub(crate) struct RecvDone {
    pub buf: Buf,
    pub src: SocketAddr,
    /// GRO segment size, when the buffer holds several datagrams; 0 otherwise.
    pub segment_size: u16,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EngineStats {
    pub enters: u64,
    pub sent: u64,
    pub send_ops: u64,
    pub gso_sends: u64,
    pub send_would_block: u64,
    pub send_nobufs: u64,
    pub send_errors: u64,
    pub zc_completed: u64,
    pub zc_copied: u64,
    pub degraded: u64,
    pub received: u64,
    pub gro_batches: u64,
    pub recv_nobufs: u64,
    pub recv_arms: u64,
    pub recv_errors: u64,
    pub recv_truncated: u64,
    pub kernel_drops: u64,
    pub overflow_queued: u64,
    pub inflight_high_water: u64,
    pub cq_overflows: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    /// Being filled by posts (the open batch).
    Filling,
    InFlight,
    /// A borrowed send that finished; the caller collects it.
    Done,
}

/// One send operation. Its kernel-visible parts (`msg`, `iov`, `addr`, `cmsg`) stay at the
/// same address from submission to the last CQE: ops live in a boxed slice that is never
/// reallocated.
struct Op {
    msg: libc::msghdr,
    iov: [libc::iovec; MAX_SEGS],
    addr: SockAddr,
    cmsg: [u64; 4],
    state: State,
    /// Datagrams in the op.
    n: usize,
    /// iovecs in the op (n for pool buffers, 1 for a borrowed run).
    niov: usize,
    seg: usize,
    dst: SocketAddr,
    /// Pool buffers being sent, with their tags.
    bufs: [Option<(u64, Buf)>; MAX_SEGS],
    /// Bytes are the caller's (borrowed send); `tag` is then the run index.
    borrowed: bool,
    tag: u64,
    result: Option<i32>,
    awaiting_notif: bool,
    zc: bool,
    copied: bool,
}

impl Op {
    fn new() -> Self {
        // SAFETY: msghdr and iovec are plain C structs for which all-zero is valid.
        let (msg, iov) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        Op {
            msg,
            iov,
            addr: SockAddr::from(SocketAddr::from(([0, 0, 0, 0], 0))),
            cmsg: [0; 4],
            state: State::Free,
            n: 0,
            niov: 0,
            seg: 0,
            dst: SocketAddr::from(([0, 0, 0, 0], 0)),
            bufs: std::array::from_fn(|_| None),
            borrowed: false,
            tag: 0,
            result: None,
            awaiting_notif: false,
            zc: false,
            copied: false,
        }
    }
}

/// A send waiting in the overflow queue.
#[derive(Debug)]
struct Pending {
    tag: u64,
    buf: Buf,
    dst: SocketAddr,
}

/// The provided-buffer ring: entries the kernel takes receive buffers from, in order.
struct BufRing {
    base: *mut types::BufRingEntry,
    layout: std::alloc::Layout,
    mask: u16,
    tail: u16,
}

impl BufRing {
    fn new(entries: u16) -> io::Result<Self> {
        let size = entries as usize * std::mem::size_of::<types::BufRingEntry>();
        let layout =
            std::alloc::Layout::from_size_align(size.max(4096), 4096).map_err(io::Error::other)?;
        // SAFETY: non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<types::BufRingEntry>();
        if base.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        Ok(BufRing {
            base,
            layout,
            mask: entries - 1,
            tail: 0,
        })
    }

    /// Appends a buffer and publishes it to the kernel.
    fn push(&mut self, addr: *mut u8, len: u32, bid: u16) {
        // SAFETY: the index is masked into the ring; the kernel only reads entries between its
        // head and our published tail, and this one is past the tail until the store below.
        let entry = unsafe { &mut *self.base.add((self.tail & self.mask) as usize) };
        entry.set_addr(addr as u64);
        entry.set_len(len);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail field is the `resv` u16 of entry 0, inside the ring; the kernel
        // reads it concurrently, so it is written atomically (release: entry first).
        let tail = unsafe { &*(types::BufRingEntry::tail(self.base) as *const AtomicU16) };
        tail.store(self.tail, Ordering::Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the ring was closed first (field order
        // in Engine).
        unsafe { std::alloc::dealloc(self.base.cast(), self.layout) }
    }
}

/// The engine. See the module documentation for the calling protocol.
pub(crate) struct Engine {
    // Field order matters for Drop: the ring (kernel) goes before the memory it uses.
    ring: IoUring,
    bufring: BufRing,
    recv_msg: Box<libc::msghdr>,
    ops: Box<[Op]>,
    pool: Arc<PoolMem>,
    sock: UdpSocket,
    in_ring: usize,
    recv_armed: bool,
    free_ops: Vec<u16>,
    open: Option<usize>,
    overflow: VecDeque<Pending>,
    inflight_dgrams: usize,
    unsubmitted: usize,
    gso: bool,
    zerocopy: bool,
    fixed: bool,
    /// Datagrams of 0 bytes from here are wake-ups, not data.
    pub(crate) waker_addr: Option<SocketAddr>,
    pub(crate) woken: bool,
    pub(crate) send_done: VecDeque<SendDone>,
    pub(crate) recv_done: VecDeque<RecvDone>,
    pub(crate) stats: EngineStats,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("pool", &self.pool)
            .field("in_ring", &self.in_ring)
            .field("gso", &self.gso)
            .field("zerocopy", &self.zerocopy)
            .field("stats", &self.stats)
            .finish()
    }
}

// SAFETY: the raw pointers inside (msghdr, iovec, buffer ring) point into memory the engine
// owns; nothing is shared with another thread, so moving the whole engine is fine.
unsafe impl Send for Engine {}

fn setsockopt_int(sock: &UdpSocket, level: i32, name: i32, val: i32) -> io::Result<()> {
    // SAFETY: passes a valid pointer to an int and its size for the call's duration.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&val as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Opens a blocking UDP socket bound to `addr` (io_uring waits for room itself; a
/// non-blocking socket would make it return EAGAIN).
pub(crate) fn udp_socket(addr: SocketAddr, sndbuf: usize, rcvbuf: usize) -> io::Result<UdpSocket> {
    crate::datapath::udp_socket(addr, sndbuf, rcvbuf)
}

/// Parses a `sockaddr_in` / `sockaddr_in6` written by the kernel.
fn parse_name(b: &[u8]) -> SocketAddr {
    let fam = b.get(..2).map(|f| u16::from_ne_bytes([f[0], f[1]]));
    match fam {
        Some(f) if f == libc::AF_INET as u16 && b.len() >= 8 => SocketAddr::V4(SocketAddrV4::new(
            Ipv4Addr::new(b[4], b[5], b[6], b[7]),
            u16::from_be_bytes([b[2], b[3]]),
        )),
        Some(f) if f == libc::AF_INET6 as u16 && b.len() >= 28 => {
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&b[8..24]);
            SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                u16::from_be_bytes([b[2], b[3]]),
                u32::from_ne_bytes([b[4], b[5], b[6], b[7]]),
                u32::from_ne_bytes([b[24], b[25], b[26], b[27]]),
            ))
        }
        _ => SocketAddr::from(([0, 0, 0, 0], 0)),
    }
}

/// Walks control messages: (level, type, data).
fn cmsgs(mut b: &[u8]) -> impl Iterator<Item = (i32, i32, &[u8])> {
    const HDR: usize = std::mem::size_of::<libc::cmsghdr>();
    std::iter::from_fn(move || {
        if b.len() < HDR {
            return None;
        }
        let len = usize::from_ne_bytes(b[..8].try_into().ok()?);
        let level = i32::from_ne_bytes(b[8..12].try_into().ok()?);
        let ty = i32::from_ne_bytes(b[12..16].try_into().ok()?);
        if len < HDR || len > b.len() {
            return None;
        }
        let data = &b[HDR..len];
        b = &b[len.next_multiple_of(8).min(b.len())..];
        Some((level, ty, data))
    })
}

fn int_of(d: &[u8]) -> u32 {
    d.get(..4)
        .map(|x| u32::from_ne_bytes([x[0], x[1], x[2], x[3]]))
        .unwrap_or(0)
}

/// Most buffers one GSO send may carry at `len` bytes each.
pub(crate) fn max_segs_for(len: usize) -> usize {
    MAX_UDP_PAYLOAD
        .checked_div(len)
        .map_or(1, |n| n.clamp(1, MAX_SEGS))
}

impl Engine {
    /// Builds the socket, ring, pool and receive ring, and arms the receive.
    pub(crate) fn new(addr: SocketAddr, cfg: EngineConfig) -> io::Result<Self> {
        let nslots = cfg.bufs + cfg.reserve;
        if nslots == 0 || nslots > 32768 || cfg.reserve == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "buffer counts out of range (1..=32768 slots, reserve >= 1)",
            ));
        }
        let ops = cfg.ops.clamp(1, 4096);
        let pool = PoolMem::new(nslots, cfg.payload, cfg.bufs)?;
        let sock = udp_socket(addr, cfg.sndbuf, cfg.rcvbuf)?;
        let _ = setsockopt_int(&sock, libc::SOL_SOCKET, SO_RXQ_OVFL, 1);
        if cfg.gro {
            setsockopt_int(&sock, SOL_UDP, UDP_GRO, 1)?;
        }
        let ring_entries = (nslots as u32).next_power_of_two().max(8);
        let sq = (ops as u32 + 8).next_power_of_two();
        // Every CQE has an owner that is bounded: one per ring buffer, two per op, a few more.
        let cq = (ring_entries + 2 * sq + 8).next_power_of_two();
        let ring: IoUring = IoUring::builder().setup_cqsize(cq).build(sq)?;
        let bufring = BufRing::new(ring_entries as u16)?;
        // SAFETY: the ring memory stays allocated until after the io_uring is closed (field
        // order of Engine; the uring is dropped first).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(
                bufring.base as u64,
                ring_entries as u16,
                BGID,
                0,
            )?;
        }
        let iov = libc::iovec {
            iov_base: pool.base().cast(),
            iov_len: pool.region_len(),
        };
        // SAFETY: the region outlives the ring (the engine holds the pool Arc and drops the
        // ring first).
        let fixed = unsafe { ring.submitter().register_buffers(&[iov]) }.is_ok();
        // SAFETY: all-zero is a valid msghdr.
        let mut recv_msg: Box<libc::msghdr> = Box::new(unsafe { std::mem::zeroed() });
        recv_msg.msg_namelen = NAME_LEN;
        recv_msg.msg_controllen = CONTROL_LEN as _;
        let mut eng = Engine {
            ring,
            bufring,
            recv_msg,
            ops: (0..ops).map(|_| Op::new()).collect(),
            pool: pool.clone(),
            sock,
            in_ring: 0,
            recv_armed: false,
            free_ops: (0..ops as u16).rev().collect(),
            open: None,
            overflow: VecDeque::with_capacity(nslots),
            inflight_dgrams: 0,
            unsubmitted: 0,
            gso: cfg.gso,
            zerocopy: cfg.zerocopy,
            fixed,
            waker_addr: None,
            woken: false,
            send_done: VecDeque::with_capacity(nslots),
            recv_done: VecDeque::with_capacity(nslots),
            stats: EngineStats::default(),
        };
        for slot in cfg.bufs..nslots {
            let b = pool.take(slot as u32, 0);
            eng.provide(b);
        }
        eng.arm_recv();
        eng.submit()?;
        Ok(eng)
    }

    /// The UDP socket.
    pub(crate) fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// The buffer pool.
    pub(crate) fn pool(&self) -> &Arc<PoolMem> {
        &self.pool
    }

    /// Whether same-size runs are still sent with GSO (false after the kernel refused it).
    pub(crate) fn gso(&self) -> bool {
        self.gso
    }

    /// Gives a buffer to the kernel's receive ring; a later datagram lands in it.
    pub(crate) fn provide(&mut self, buf: Buf) {
        debug_assert!(Arc::ptr_eq(buf.pool(), &self.pool));
        let slot = buf.into_slot();
        let ptr = self.pool.slot_ptr(slot);
        self.bufring
            .push(ptr, self.pool.slot_size() as u32, slot as u16);
        self.in_ring += 1;
    }

    /// SQEs queued but not yet submitted.
    pub(crate) fn unsubmitted(&self) -> usize {
        self.unsubmitted
    }

    fn push_sqe(&mut self, e: &squeue::Entry) {
        loop {
            // SAFETY: every entry built here points at memory that stays valid until its
            // last CQE (ops table, receive msghdr, pool), see the callers.
            if unsafe { self.ring.submission().push(e) }.is_ok() {
                self.unsubmitted += 1;
                return;
            }
            // The SQ is sized for every op plus spares, so this only happens if the kernel
            // has not consumed earlier entries: submit them.
            let _ = self.submit();
        }
    }

    fn arm_recv(&mut self) {
        if self.recv_armed || self.in_ring == 0 {
            return;
        }
        let e = opcode::RecvMsgMulti::new(
            types::Fd(self.sock.as_raw_fd()),
            &*self.recv_msg as *const libc::msghdr,
            BGID,
        )
        .build()
        .user_data(RECV_UD);
        self.push_sqe(&e);
        self.recv_armed = true;
        self.stats.recv_arms += 1;
    }

    /// One io_uring_enter for whatever is queued (also flushes CQ overflow).
    pub(crate) fn submit(&mut self) -> io::Result<()> {
        loop {
            self.stats.enters += 1;
            match self.ring.submit() {
                Ok(_) => {
                    self.unsubmitted = 0;
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    // Completions overflowed: take them, then try again.
                    self.reap_cq();
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Submits and waits up to `timeout` (None: forever) for at least one completion.
    pub(crate) fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.stats.enters += 1;
        let r = match timeout {
            None => self.ring.submit_and_wait(1),
            Some(t) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match r {
            Ok(_) => {
                self.unsubmitted = 0;
                Ok(())
            }
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Closes the open batch and submits everything queued, in one io_uring_enter.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.close_open();
        self.arm_recv();
        if self.unsubmitted > 0 || self.ring.submission().cq_overflow() {
            self.submit()?;
        }
        Ok(())
    }

    /// Posts one pool buffer (`buf.len()` bytes) for sending to `dst`. It joins the open
    /// batch when that has the same destination and length (GSO), otherwise starts a new one;
    /// when every op is in flight it waits in the overflow queue.
    pub(crate) fn post_send(&mut self, tag: u64, buf: Buf, dst: SocketAddr) {
        let p = Pending { tag, buf, dst };
        if !self.overflow.is_empty() {
            self.stats.overflow_queued += 1;
            self.overflow.push_back(p);
            return;
        }
        if let Err(p) = self.add(p) {
            self.stats.overflow_queued += 1;
            self.overflow.push_back(p);
        }
    }

    fn add(&mut self, p: Pending) -> Result<(), Pending> {
        let len = p.buf.len();
        if let Some(i) = self.open {
            let op = &self.ops[i];
            if self.gso && op.dst == p.dst && op.seg == len && op.n < max_segs_for(len) {
                let op = &mut self.ops[i];
                op.iov[op.n] = libc::iovec {
                    iov_base: p.buf.payload_ptr().cast(),
                    iov_len: len,
                };
                op.bufs[op.n] = Some((p.tag, p.buf));
                op.n += 1;
                op.niov = op.n;
                if op.n == max_segs_for(len) {
                    self.close_open();
                }
                return Ok(());
            }
            self.close_open();
        }
        let Some(i) = self.free_ops.pop() else {
            return Err(p);
        };
        let i = i as usize;
        let op = &mut self.ops[i];
        op.state = State::Filling;
        op.borrowed = false;
        op.n = 1;
        op.niov = 1;
        op.seg = len;
        if op.dst != p.dst {
            op.dst = p.dst;
            op.addr = SockAddr::from(p.dst);
        }
        op.iov[0] = libc::iovec {
            iov_base: p.buf.payload_ptr().cast(),
            iov_len: len,
        };
        op.tag = p.tag;
        op.bufs[0] = Some((p.tag, p.buf));
        self.open = Some(i);
        if !self.gso || max_segs_for(len) == 1 {
            self.close_open();
        }
        Ok(())
    }

    fn close_open(&mut self) {
        if let Some(i) = self.open.take() {
            self.start(i);
        }
    }

    /// Fills op `i`'s msghdr and pushes its SQE.
    fn start(&mut self, i: usize) {
        let zerocopy = self.zerocopy;
        let fixed = self.fixed;
        let op = &mut self.ops[i];
        op.state = State::InFlight;
        op.result = None;
        op.awaiting_notif = false;
        op.copied = false;
        op.zc = zerocopy;
        op.msg.msg_name = op.addr.as_ptr() as *mut libc::c_void;
        op.msg.msg_namelen = op.addr.len();
        op.msg.msg_iov = op.iov.as_mut_ptr();
        op.msg.msg_iovlen = op.niov as _;
        if op.n > 1 {
            // One UDP_SEGMENT control message: cmsghdr (len, level, type) then a u16.
            let hdr = std::mem::size_of::<libc::cmsghdr>();
            let mut bytes = [0u8; 32];
            bytes[..8].copy_from_slice(&((hdr + 2) as u64).to_ne_bytes());
            bytes[8..12].copy_from_slice(&SOL_UDP.to_ne_bytes());
            bytes[12..16].copy_from_slice(&UDP_SEGMENT.to_ne_bytes());
            bytes[16..18].copy_from_slice(&(op.seg as u16).to_ne_bytes());
            for (k, w) in op.cmsg.iter_mut().enumerate() {
                *w = u64::from_ne_bytes(bytes[k * 8..k * 8 + 8].try_into().unwrap_or([0; 8]));
            }
            op.msg.msg_control = op.cmsg.as_mut_ptr().cast();
            op.msg.msg_controllen = hdr + 8;
        } else {
            op.msg.msg_control = std::ptr::null_mut();
            op.msg.msg_controllen = 0;
        }
        let fd = types::Fd(self.sock.as_raw_fd());
        let e = if !zerocopy {
            opcode::SendMsg::new(fd, &op.msg).build()
        } else if op.n == 1 && !op.borrowed && fixed {
            // One pool buffer: SEND_ZC from the registered region (fixed buffer 0).
            opcode::SendZc::new(fd, op.iov[0].iov_base as *const u8, op.seg as u32)
                .buf_index(Some(0))
                .dest_addr(op.addr.as_ptr().cast())
                .dest_addr_len(op.addr.len())
                .zc_flags(ZC_REPORT_USAGE)
                .build()
        } else {
            opcode::SendMsgZc::new(fd, &op.msg)
                .ioprio(ZC_REPORT_USAGE)
                .build()
        };
        let n = op.n;
        self.inflight_dgrams += n;
        self.stats.inflight_high_water = self
            .stats
            .inflight_high_water
            .max(self.inflight_dgrams as u64);
        self.push_sqe(&e.user_data(i as u64));
    }

    /// Takes every completion available (no waiting) and processes it; flushes the kernel's
    /// CQ overflow list too. Re-arms the receive and moves overflow-queued sends up as ops
    /// free.
    pub(crate) fn reap(&mut self) -> io::Result<()> {
        self.reap_cq();
        if self.ring.submission().cq_overflow() {
            self.stats.cq_overflows += 1;
            self.submit()?;
            self.reap_cq();
        }
        self.refill();
        Ok(())
    }

    /// Moves overflow-queued sends into free ops and re-arms the receive.
    fn refill(&mut self) {
        while let Some(p) = self.overflow.pop_front() {
            if let Err(p) = self.add(p) {
                self.overflow.push_front(p);
                break;
            }
        }
        self.arm_recv();
    }

    fn reap_cq(&mut self) {
        loop {
            let e = self.ring.completion().next();
            let Some(e) = e else { break };
            self.handle(e.user_data(), e.result(), e.flags());
        }
    }

    fn handle(&mut self, ud: u64, res: i32, flags: u32) {
        if ud == RECV_UD {
            return self.handle_recv(res, flags);
        }
        if ud == CANCEL_UD {
            return;
        }
        let i = ud as usize;
        let Some(op) = self.ops.get_mut(i) else {
            return;
        };
        if cqueue::notif(flags) {
            op.copied = res as u32 & NOTIF_COPIED != 0;
            op.awaiting_notif = false;
            if op.result.is_some() {
                self.finish(i);
            }
            return;
        }
        op.result = Some(res);
        op.awaiting_notif = op.zc && cqueue::more(flags);
        if !op.awaiting_notif {
            self.finish(i);
        }
    }

    fn finish(&mut self, i: usize) {
        let res = self.ops[i].result.unwrap_or(0);
        let n = self.ops[i].n;
        if res == -libc::EAGAIN || res == -libc::EINTR {
            // Back-pressure: resubmit the same op.
            self.stats.send_would_block += 1;
            self.inflight_dgrams -= n;
            self.start(i);
            return;
        }
        self.inflight_dgrams -= n;
        self.stats.send_ops += 1;
        let op = &mut self.ops[i];
        if op.zc && res >= 0 {
            self.stats.zc_completed += 1;
            if op.copied {
                self.stats.zc_copied += 1;
            }
        }
        if op.borrowed {
            op.state = State::Done;
            return;
        }
        if (res == -libc::EIO || res == -libc::EINVAL || res == -libc::EMSGSIZE) && n > 1 {
            // The kernel refused GSO: send these one by one, first.
            self.gso = false;
            self.stats.degraded += 1;
            for k in (0..n).rev() {
                if let Some((tag, buf)) = op.bufs[k].take() {
                    self.overflow.push_front(Pending {
                        tag,
                        buf,
                        dst: op.dst,
                    });
                }
            }
        } else {
            let error = (res < 0).then_some(-res);
            match error {
                None => {
                    self.stats.sent += n as u64;
                    if n > 1 {
                        self.stats.gso_sends += 1;
                    }
                }
                Some(libc::ENOBUFS) => self.stats.send_nobufs += n as u64,
                Some(_) => self.stats.send_errors += n as u64,
            }
            for k in 0..n {
                if let Some((tag, buf)) = op.bufs[k].take() {
                    self.send_done.push_back(SendDone {
                        tag,
                        buf,
                        dst: op.dst,
                        error,
                        zerocopy: op.zc,
                        copied: op.copied,
                    });
                }
            }
        }
        op.state = State::Free;
        self.free_ops.push(i as u16);
    }

    fn handle_recv(&mut self, res: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.recv_armed = false;
        }
        if res < 0 {
            match -res {
                libc::ENOBUFS => self.stats.recv_nobufs += 1,
                libc::ECANCELED => {}
                _ => self.stats.recv_errors += 1,
            }
            return;
        }
        let Some(bid) = cqueue::buffer_select(flags) else {
            return;
        };
        self.in_ring = self.in_ring.saturating_sub(1);
        let slot = bid as u32;
        let len = (res as usize).min(self.pool.slot_size());
        // SAFETY: the kernel wrote this slot and returned it with this CQE; it no longer
        // touches it, and nothing else refers to it until we hand out a Buf below.
        let bytes = unsafe { std::slice::from_raw_parts(self.pool.slot_ptr(slot), len) };
        let Ok(out) = types::RecvMsgOut::parse(bytes, &self.recv_msg) else {
            self.stats.recv_errors += 1;
            let b = self.pool.take(slot, 0);
            self.provide(b);
            return;
        };
        let src = parse_name(out.name_data());
        let mut segment_size = 0u16;
        for (level, ty, data) in cmsgs(out.control_data()) {
            if level == SOL_UDP && ty == UDP_GRO {
                segment_size = int_of(data) as u16;
            } else if level == libc::SOL_SOCKET && ty == SO_RXQ_OVFL {
                self.stats.kernel_drops = int_of(data) as u64;
            }
        }
        if out.is_payload_truncated() {
            self.stats.recv_truncated += 1;
        }
        let plen = out.payload_data().len();
        if plen == 0 && Some(src) == self.waker_addr {
            self.woken = true;
            let b = self.pool.take(slot, 0);
            self.provide(b);
            return;
        }
        if segment_size as usize >= plen {
            segment_size = 0;
        }
        if segment_size > 0 {
            self.stats.gro_batches += 1;
            self.stats.received += plen.div_ceil(segment_size as usize) as u64;
        } else {
            self.stats.received += 1;
        }
        let buf = self.pool.take(slot, plen);
        self.recv_done.push_back(RecvDone {
            buf,
            src,
            segment_size,
        });
    }

    /// Sends runs of datagrams from the caller's bytes and waits until the kernel is done
    /// with all of them (zero-copy notifications included), so `buf` is free again on return.
    /// Returns how many runs were dealt with: it stops at the first run the kernel had no
    /// buffer for (ENOBUFS). A refused GSO run disables GSO and is resent datagram by
    /// datagram.
    pub(crate) fn send_borrowed(
        &mut self,
        buf: &[u8],
        txs: &[crate::datapath::Tx],
    ) -> io::Result<usize> {
        self.close_open();
        let mut first_nobufs = txs.len();
        let mut redo: Vec<usize> = Vec::new();
        for (t, tx) in txs.iter().enumerate() {
            if tx.offset + tx.len > buf.len() {
                self.stats.send_errors += tx.datagrams() as u64;
                continue;
            }
            if self.gso || tx.datagrams() == 1 {
                self.send_borrowed_one(buf, t, tx.dst, tx.offset, tx.len, tx.segment_size);
                self.collect_borrowed(txs, &mut first_nobufs, &mut redo);
            } else {
                redo.push(t);
            }
        }
        // Wait for all of them: the caller's buffer must be free when we return.
        self.drain_borrowed(txs, &mut first_nobufs, &mut redo);
        while let Some(t) = redo.pop() {
            let tx = txs[t];
            for seg in tx.segments() {
                self.send_borrowed_one(buf, t, tx.dst, seg.start, seg.len(), seg.len());
                self.collect_borrowed(txs, &mut first_nobufs, &mut redo);
            }
            self.drain_borrowed(txs, &mut first_nobufs, &mut redo);
        }
        Ok(first_nobufs)
    }

    /// Starts one borrowed op (waiting for a free op first).
    fn send_borrowed_one(
        &mut self,
        buf: &[u8],
        t: usize,
        dst: SocketAddr,
        offset: usize,
        len: usize,
        seg: usize,
    ) {
        while self.free_ops.is_empty() {
            self.stats.send_would_block += 1;
            self.wait_any();
            let _ = self.reap();
        }
        let Some(i) = self.free_ops.pop() else { return };
        let i = i as usize;
        let op = &mut self.ops[i];
        op.state = State::Filling;
        op.borrowed = true;
        op.tag = t as u64;
        op.n = if len == 0 || seg == 0 {
            1
        } else {
            len.div_ceil(seg)
        };
        op.seg = seg;
        if op.dst != dst {
            op.dst = dst;
            op.addr = SockAddr::from(dst);
        }
        // The kernel only reads through this pointer; `send_borrowed` does not return before
        // the op's last CQE.
        op.iov[0] = libc::iovec {
            iov_base: buf[offset..offset + len].as_ptr() as *mut libc::c_void,
            iov_len: len,
        };
        op.niov = 1;
        self.start(i);
        if self.unsubmitted >= self.ops.len() / 2 {
            let _ = self.submit();
        }
    }

    /// Collects finished borrowed ops.
    fn collect_borrowed(
        &mut self,
        txs: &[crate::datapath::Tx],
        first_nobufs: &mut usize,
        redo: &mut Vec<usize>,
    ) {
        for i in 0..self.ops.len() {
            let op = &mut self.ops[i];
            if op.state != State::Done || !op.borrowed {
                continue;
            }
            let res = op.result.unwrap_or(0);
            let t = op.tag as usize;
            let n = op.n as u64;
            if res >= 0 {
                self.stats.sent += n;
                if n > 1 {
                    self.stats.gso_sends += 1;
                }
            } else if -res == libc::ENOBUFS {
                self.stats.send_nobufs += n;
                *first_nobufs = (*first_nobufs).min(t);
            } else if (-res == libc::EIO || -res == libc::EINVAL || -res == libc::EMSGSIZE) && n > 1
            {
                self.gso = false;
                self.stats.degraded += 1;
                redo.push(t);
            } else {
                self.stats.send_errors += n;
            }
            let _ = txs;
            op.state = State::Free;
            self.free_ops.push(i as u16);
        }
    }

    fn borrowed_in_flight(&self) -> bool {
        self.ops
            .iter()
            .any(|o| o.borrowed && matches!(o.state, State::InFlight | State::Done))
    }

    fn drain_borrowed(
        &mut self,
        txs: &[crate::datapath::Tx],
        first_nobufs: &mut usize,
        redo: &mut Vec<usize>,
    ) {
        let _ = self.submit();
        let _ = self.reap();
        self.collect_borrowed(txs, first_nobufs, redo);
        while self.borrowed_in_flight() {
            self.wait_any();
            let _ = self.reap();
            self.collect_borrowed(txs, first_nobufs, redo);
        }
    }

    /// Waits for a completion; retries on errors instead of returning, since callers must
    /// not give back memory the kernel may still read.
    fn wait_any(&mut self) {
        if self.wait(None).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // Stop the kernel from using our memory before it is freed: cancel the receive and
        // wait (bounded) for every op's last CQE.
        self.close_open();
        let cancel = opcode::AsyncCancel::new(RECV_UD)
            .build()
            .user_data(CANCEL_UD);
        self.push_sqe(&cancel);
        let end = Instant::now() + Duration::from_secs(2);
        let _ = self.submit();
        loop {
            self.reap_cq();
            let busy = self.ops.iter().any(|o| matches!(o.state, State::InFlight));
            if (!busy && !self.recv_armed) || Instant::now() >= end {
                break;
            }
            let _ = self.wait(Some(Duration::from_millis(50)));
        }
    }
}
