//! Real-time datagrams (SS-RTUDP in today's Linux): messages of any size up to a limit set at
//! open, sent as fragments that each fit the path MTU (never IP fragments), in two traffic
//! classes, with a deadline; a traffic smoother holds back non-real-time packets so that
//! real-time ones find the network's queues short.
//!
//! The paper's calls map onto [`RtSocket`] as follows: `rt_socket` is [`RtSocket::open`]
//! (everything the socket will use is allocated here), `rt_mmap` is [`RtSocket::claim`] (a
//! buffer of the socket's pool, written in place), `rt_sendto` is [`RtSocket::send`],
//! `rt_recvfrom` is [`RtSocket::poll`] (messages are handed to a closure, in the socket's
//! memory) and `rt_socket_close` is dropping the socket.
//!
//! # Calling protocol
//!
//! - [`RtSocket::claim`] a buffer (`None` when every buffer is queued or held: the pool's
//!   size is [`RtConfig::buffers`]), write the message into `buf.as_mut()`, and
//!   [`RtSocket::send`] its first `len` bytes with a [`Class`] and a deadline. A send never
//!   blocks and never drops silently: it is queued, or refused with a [`SendError`] that
//!   says why ([`WouldBlock`]) and gives the buffer back.
//! - Real-time messages leave at once (all their fragments, as GSO runs); if the kernel's
//!   socket buffer is full they wait, first in line, and are tried again within 200 µs
//!   (the real-time queue then fills and refuses). Small ones waiting together leave
//!   bundled, several to a datagram; [`RtSocket::cork`] holds them on purpose, so that a
//!   burst of small messages costs a few datagrams and one system call. Non-real-time
//!   fragments leave as the smoother's credit allows and, when [`RtConfig::link_rate`] is
//!   known, only while fewer than [`RtConfig::below_packets`] of them wait in the queues
//!   below (the kernel's and the link's), so that a real-time packet never waits behind a
//!   burst of them. A non-real-time message still queued, not started, at its deadline is
//!   dropped by the smoother and counted ([`RtStats::nrt_expired`]).
//! - Call [`RtSocket::poll`] at least by [`RtSocket::next_timer`] (it waits no longer than
//!   that itself): it refreshes the smoother, sends what may go, reads what arrived,
//!   delivers whole messages to the closure, and sends each sender a loss report every
//!   [`RtConfig::report_interval`]; reports coming back drive the smoother.
//! - Received messages are whole or not at all; each comes with its one-way delay (sender's
//!   clock at [`RtSocket::send`] to the kernel's receive time: hosts must share a clock, as
//!   namespaces of one machine do, or be synchronised) and whether it missed its deadline.
//!
//! Nothing allocates after [`RtSocket::open`]: the send pool, queues, fragment headers,
//! reassembly slots, peer tables and the kernel message arrays are all sized there
//! ([`RtSocket::memory`] says how much).
//!
//! With [`RtConfig::xdp_interface`] the socket also has an AF_XDP path on that interface
//! (module `path`): datagrams for its port arriving on the interface's queue 0 come as
//! frames past the kernel's IP and UDP stack, and a datagram sent alone to a peer heard
//! from that way leaves as a frame; the kernel socket carries the rest. The calling
//! protocol is the same. [`RtStats::xdp`] counts frames, malformed ones among them.

mod path;
mod recv;
mod send;

pub use crate::smoother::HostSmoother;

pub use crate::sys::uring::pool::Buf;
pub use slipstream_proto::rt::header::Class;
pub use slipstream_proto::rt::reassembly::ReassemblyStats;
pub use slipstream_proto::rt::smoother::{
    CreditUnit, NrtRule, SmootherConfig, SmootherStats, FULL_DATAGRAM,
};

use crate::datapath::{Datapath, DatapathStats};
use crate::sys::mmsg::{Mark, Mmsg};
use crate::sys::uring::pool::PoolMem;
use path::Path;
pub use path::XdpStats;
use slipstream_proto::rt::header::RT_HEADER_LEN;
use slipstream_proto::rt::reassembly::ReassemblyConfig;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The largest MTU an AF_XDP frame holds (a frame less its Ethernet header).
const FRAME_MTU: usize = crate::sys::xdp::FRAME - 14;

/// The longest a blocking receive of [`RtSocket::poll`] waits before it looks at the
/// reports due (the socket's SO_RCVTIMEO; with AF_XDP, the `epoll_pwait2` timeout).
pub const WAIT_SLICE: Duration = Duration::from_millis(4);
/// The longest kernel tick (HZ = 100): how late a blocking receive's timeout may end.
const KERNEL_TICK_MAX: Duration = Duration::from_millis(10);

/// DSCP EF (46) in the TOS byte.
pub const TOS_EF: u8 = 46 << 2;
/// The socket priority real-time datagrams take (TC_PRIO_INTERACTIVE: pfifo_fast's first
/// band; the highest an unprivileged socket may set).
pub const PRIORITY_RT: u32 = 6;

/// Sizes and policies of an [`RtSocket`]; the defaults suit messages up to 64 KiB on a
/// 1500-byte path.
#[derive(Debug, Clone, Copy)]
pub struct RtConfig {
    /// Longest message, bytes (at most 16 MiB). Each pool buffer and reassembly slot holds one.
    pub max_message: usize,
    /// Send buffers in the pool: messages claimed, queued or being sent at once.
    pub buffers: usize,
    /// Real-time messages waiting for the kernel at once (they wait only when a send is cut
    /// short).
    pub rt_queue: usize,
    /// Non-real-time messages waiting for the smoother at once.
    pub nrt_queue: usize,
    /// Messages being reassembled at once.
    pub reassembly_slots: usize,
    /// How long an incomplete message without a deadline may wait for its fragments.
    pub reassembly_timeout: Duration,
    /// The path MTU, bytes: every datagram fits it with its IP and UDP headers.
    pub mtu: usize,
    /// The smoother (`None`: none, every packet leaves at once).
    pub smoother: Option<SmootherConfig>,
    /// The rate of the link below, bits per second of IP packets: with it, non-real-time
    /// packets are handed to the kernel only while the link's queue is short.
    pub link_rate: Option<u64>,
    /// Non-real-time packets allowed to wait in the queues below at once.
    pub below_packets: u32,
    /// How often a receiver reports to each sender it hears from.
    pub report_interval: Duration,
    /// Whether a late real-time message counts as loss for the smoother (the paper's
    /// deadlines imply so). A late non-real-time message never does: it may have waited at
    /// the smoother itself.
    pub late_is_loss: bool,
    /// Whose losses slow this sender's smoother down.
    pub loss_signal: LossSignal,
    /// Mark real-time datagrams DSCP EF and socket priority [`PRIORITY_RT`].
    pub mark: bool,
    /// Peers tracked on each side (destinations' message numbering and reports; sources'
    /// loss counts). The least recently active is forgotten when a new one comes.
    pub peers: usize,
    /// Before [`RtSocket::poll`] waits, it looks for datagrams without waiting for up to this
    /// long, a busy wait that holds the CPU: a message arriving meanwhile is handed over
    /// without a sleeping thread's wake-up (tens of microseconds on a VM whose idle vCPU
    /// halts). For a socket with a CPU of its own; on a CPU it shares with its peer it only
    /// delays the peer. Zero (the default): no spinning.
    pub spin: Duration,
    /// Receive and send past the kernel's IP and UDP stack with an AF_XDP socket (copy mode)
    /// on this interface (its index: [`interface_index`]), beside the kernel socket: see
    /// docs/rt.md. IPv4, as root (CAP_NET_ADMIN and CAP_BPF), one such socket an interface,
    /// an MTU of at most 4,082 bytes. `None` (the default): the kernel's UDP socket alone.
    pub xdp_interface: Option<u32>,
}

/// The index of network interface `name`, for [`RtConfig::xdp_interface`].
pub fn interface_index(name: &str) -> io::Result<u32> {
    crate::sys::xdp::ifindex(name)
}

impl Default for RtConfig {
    fn default() -> Self {
        RtConfig {
            max_message: 64 << 10,
            buffers: 64,
            rt_queue: 64,
            nrt_queue: 64,
            reassembly_slots: 16,
            reassembly_timeout: Duration::from_millis(100),
            mtu: 1500,
            smoother: Some(SmootherConfig::default()),
            link_rate: None,
            below_packets: 2,
            report_interval: Duration::from_millis(5),
            late_is_loss: true,
            loss_signal: LossSignal::Receiver,
            mark: true,
            peers: 64,
            spin: Duration::ZERO,
            xdp_interface: None,
        }
    }
}

/// Which losses a receiver reports slow a sender's smoother down (the paper does not say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossSignal {
    /// Only the sender's own messages lost or late.
    Own,
    /// Any loss at the receiver, from any of its senders: congestion at a receiver's port
    /// is shared by everyone sending into it, and a sender whose own messages happened to
    /// get through would otherwise keep its pace while the others back off.
    Receiver,
}

/// Why a send was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WouldBlock {
    /// The real-time queue is full: the kernel is not taking datagrams as fast as they come.
    RtQueueFull,
    /// The non-real-time queue is full: the smoother holds that many messages back.
    NrtQueueFull,
    /// Longer than [`RtConfig::max_message`] or than the buffer.
    TooLong,
}

impl std::fmt::Display for WouldBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WouldBlock::RtQueueFull => "the real-time queue is full (the kernel is behind)",
            WouldBlock::NrtQueueFull => {
                "the non-real-time queue is full (the smoother is holding traffic back)"
            }
            WouldBlock::TooLong => "the message is longer than the socket's largest",
        })
    }
}

/// A refused send: why, and the buffer back.
#[derive(Debug)]
pub struct SendError {
    /// Why.
    pub reason: WouldBlock,
    /// The buffer, untouched.
    pub buf: Buf,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.reason.fmt(f)
    }
}

impl std::error::Error for SendError {}

/// A message received whole.
#[derive(Debug)]
pub struct RtMessage<'a> {
    /// Who sent it.
    pub src: SocketAddr,
    /// Its class.
    pub class: Class,
    /// The sender's number for it (consecutive per destination and class).
    pub id: u32,
    /// Its bytes (in the socket's memory, valid during the call).
    pub data: &'a [u8],
    /// Sender's wall clock when it was sent, µs since the epoch.
    pub sent_us: u64,
    /// From its send to the kernel's receipt of its last fragment.
    pub one_way: Duration,
    /// Its deadline, counted from its send (`None`: none).
    pub deadline: Option<Duration>,
    /// It arrived after its deadline.
    pub late: bool,
    /// Its last fragment arrived marked DSCP EF.
    pub marked: bool,
}

/// Counters of an [`RtSocket`]. Every message sent ends up counted at the receiver as
/// delivered (maybe late) or missing; every message refused or dropped on this side is
/// counted here by reason.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct RtStats {
    /// Messages accepted by [`RtSocket::send`], by class.
    pub rt_sent: u64,
    pub nrt_sent: u64,
    /// Fragments handed to the kernel, by class.
    pub rt_fragments: u64,
    pub nrt_fragments: u64,
    /// Datagrams that carried a bundle of small real-time messages (see [`RtSocket::cork`]).
    pub rt_bundles: u64,
    /// Sends refused: queue full (by class) or too long.
    pub rt_refused: u64,
    pub nrt_refused: u64,
    pub too_long: u64,
    /// Non-real-time messages the smoother dropped: still waiting, not started, at their
    /// deadline.
    pub nrt_expired: u64,
    /// Messages delivered, by class, and of those the ones past their deadline.
    pub rt_delivered: u64,
    pub nrt_delivered: u64,
    pub rt_late: u64,
    pub nrt_late: u64,
    /// Datagrams received marked DSCP EF.
    pub marked_received: u64,
    /// Reports sent to senders, taken from receivers, and ignored (malformed, from a peer
    /// not sent to, or older than one already taken).
    pub reports_sent: u64,
    pub reports_taken: u64,
    pub reports_ignored: u64,
    /// Losses receivers reported: messages missing, late (both classes), dropped incomplete.
    pub reported_missing: u64,
    pub reported_late: u64,
    pub reported_expired: u64,
    /// Times a source's numbering jumped too far to be loss (a restarted sender): taken as a
    /// new start, not counted as missing.
    pub resyncs: u64,
    /// Fragments and messages at the reassembler.
    #[serde(skip)]
    pub reassembly: ReassemblyStats,
    /// The smoother's counters, its period and credits now.
    #[serde(skip)]
    pub smoother: SmootherStats,
    pub period_us: u64,
    pub credits: i64,
    /// The kernel side: datagrams sent, dropped on ENOBUFS, system calls, ...
    pub datapath: DatapathStats,
    /// The AF_XDP path's counters, if the socket has one ([`RtConfig::xdp_interface`]).
    pub xdp: Option<XdpStats>,
}

/// A real-time datagram socket; see the module's calling protocol.
pub struct RtSocket {
    dp: Path,
    cfg: RtConfig,
    pool: Arc<PoolMem>,
    clock: Clock,
    tx: send::Sender,
    rx: recv::Receiver,
    stats: RtStats,
    rt_mark: Option<Mark>,
}

impl std::fmt::Debug for RtSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RtSocket")
            .field("cfg", &self.cfg)
            .field("stats", &self.stats())
            .finish()
    }
}

/// The wall clock, read once, carried forward on the monotonic clock.
#[derive(Debug, Clone, Copy)]
struct Clock {
    at: Instant,
    wall_us: u64,
}

impl Clock {
    fn new() -> Clock {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Clock {
            at: Instant::now(),
            wall_us: wall.as_micros() as u64,
        }
    }

    /// Wall-clock µs at `t`.
    fn wall_us(&self, t: Instant) -> u64 {
        match t.checked_duration_since(self.at) {
            Some(d) => self.wall_us + d.as_micros() as u64,
            None => self
                .wall_us
                .saturating_sub(self.at.duration_since(t).as_micros() as u64),
        }
    }
}

impl RtSocket {
    /// Opens a socket bound to `addr`, allocating everything it will use. Settings out of
    /// range are refused (`InvalidInput`, saying which): no message size or pool, an MTU
    /// that leaves fewer than 64 payload bytes, `spin` over a second, periods or timeouts
    /// over an hour.
    pub fn open(addr: SocketAddr, cfg: RtConfig) -> io::Result<RtSocket> {
        Self::open_inner(addr, cfg, None)
    }

    /// [`Self::open`] with the process's smoother in place of one of its own
    /// ([`RtConfig::smoother`] is then not used): its real-time datagrams take credit from
    /// it, its receivers' reports set its period, and everything else that answers to it
    /// (other sockets, SRT endpoints) waits for credit.
    pub fn open_with_smoother(
        addr: SocketAddr,
        cfg: RtConfig,
        host: &HostSmoother,
    ) -> io::Result<RtSocket> {
        Self::open_inner(addr, cfg, Some(host.clone()))
    }

    fn open_inner(
        addr: SocketAddr,
        cfg: RtConfig,
        host: Option<HostSmoother>,
    ) -> io::Result<RtSocket> {
        let invalid = |m: &str| io::Error::new(io::ErrorKind::InvalidInput, m.to_string());
        if cfg.max_message == 0 || cfg.max_message > 16 << 20 {
            return Err(invalid("max_message must be 1 byte to 16 MiB"));
        }
        let ip_udp = if addr.is_ipv6() { 48 } else { 28 };
        if cfg.mtu < ip_udp + RT_HEADER_LEN + 64 || cfg.mtu > 65_535 {
            return Err(invalid(
                "mtu must leave at least 64 payload bytes a datagram",
            ));
        }
        if cfg.buffers == 0 || cfg.rt_queue == 0 || cfg.nrt_queue == 0 || cfg.peers == 0 {
            return Err(invalid("buffers, queues and peers must be at least 1"));
        }
        let hour = Duration::from_secs(3600);
        let periods = cfg.smoother.iter().flat_map(|s| {
            [s.rp0, s.rp_min, s.rp_max, s.rp_step]
                .into_iter()
                .chain(s.adapt_every)
        });
        if cfg.spin > Duration::from_secs(1)
            || cfg.report_interval > hour
            || cfg.reassembly_timeout > hour
            || periods.into_iter().any(|d| d > hour)
        {
            return Err(invalid(
                "spin must be at most 1 s; the report interval, the reassembly timeout and \
                 the smoother's periods at most an hour",
            ));
        }
        let frag_len = (cfg.mtu - ip_udp - RT_HEADER_LEN).min(u16::MAX as usize) as u16;
        if cfg.xdp_interface.is_some() && (addr.is_ipv6() || cfg.mtu > FRAME_MTU) {
            return Err(invalid(
                "AF_XDP takes IPv4 addresses and an MTU of at most 4,082 bytes",
            ));
        }
        let mut dp = Mmsg::bind(addr, true)?;
        dp.set_send_nowait(true);
        // Without slices every wait is a ppoll: slower, still correct. With AF_XDP every
        // wait is an epoll_pwait2 on both sockets, cut in slices the same way.
        if cfg.xdp_interface.is_none() {
            let _ = dp.enable_slices(WAIT_SLICE);
        }
        let _ = dp.recv_tos();
        let rt_mark = if cfg.mark { mark_supported() } else { None };
        if let Some(m) = rt_mark {
            // Real-time datagrams, the latency-bound ones, then carry no control data for
            // their mark; the others take the unmarked values per message. If the socket
            // refuses, every datagram carries its mark as before.
            let _ = dp.set_default_mark(m);
        }
        let dp = match cfg.xdp_interface {
            Some(ifindex) => Path::with_xdp(dp, ifindex, cfg.peers, WAIT_SLICE)?,
            None => Path::udp(dp),
        };
        let pool = PoolMem::new(cfg.buffers, cfg.max_message, cfg.buffers)?;
        let now = Instant::now();
        let reasm = ReassemblyConfig {
            slots: cfg.reassembly_slots.max(1),
            max_msg_len: cfg.max_message,
            min_frag_len: frag_len.min(512),
            timeout: cfg.reassembly_timeout,
            max_timeout: cfg.reassembly_timeout.max(Duration::from_secs(1)),
        };
        Ok(RtSocket {
            tx: send::Sender::new(&cfg, host, frag_len, ip_udp, now),
            rx: recv::Receiver::new(&cfg, reasm, now),
            dp,
            cfg,
            pool,
            clock: Clock::new(),
            stats: RtStats::default(),
            rt_mark,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.dp.udp.local_addr()
    }

    /// The configuration it was opened with.
    pub fn config(&self) -> &RtConfig {
        &self.cfg
    }

    /// Payload bytes of each fragment.
    pub fn fragment_len(&self) -> usize {
        usize::from(self.tx.frag_len())
    }

    /// Whether real-time datagrams leave marked (DSCP EF), and with the socket priority too.
    pub fn marking(&self) -> (bool, bool) {
        (
            self.rt_mark.is_some(),
            self.rt_mark.is_some_and(|m| m.priority.is_some()),
        )
    }

    /// Bytes allocated at open: the pool, reassembly, queues, headers, peer tables and the
    /// kernel message arrays.
    pub fn memory(&self) -> usize {
        self.pool.region_len() + self.tx.memory() + self.rx.memory() + self.dp.memory()
    }

    /// A free buffer of the pool (capacity [`RtConfig::max_message`]), if any.
    pub fn claim(&mut self) -> Option<Buf> {
        self.pool.claim()
    }

    /// Free buffers in the pool.
    pub fn free_buffers(&self) -> usize {
        self.pool.free_count()
    }

    /// Sends the first `len` bytes of `buf` to `dst` as one message of `class`, of use for
    /// `deadline` after now (`None`: no deadline). The message gets its number (consecutive
    /// per destination and class, [`RtMessage::id`]) when its first fragment leaves. See the
    /// module's calling protocol.
    pub fn send(
        &mut self,
        buf: Buf,
        len: usize,
        dst: SocketAddr,
        class: Class,
        deadline: Option<Duration>,
    ) -> Result<(), SendError> {
        let now = Instant::now();
        self.send_from(buf, len, dst, class, deadline, now, now)
    }

    /// [`Self::send`] for a message meant to leave at `intended` (a moment already past, for
    /// an application that fell behind its schedule): its one-way delay and its deadline
    /// count from then, so that the sender's own stalls are not hidden.
    pub fn send_at(
        &mut self,
        buf: Buf,
        len: usize,
        dst: SocketAddr,
        class: Class,
        deadline: Option<Duration>,
        intended: Instant,
    ) -> Result<(), SendError> {
        let now = Instant::now();
        self.send_from(buf, len, dst, class, deadline, intended.min(now), now)
    }

    /// [`Self::send_at`] at `now`, for a message meant to leave at `intended` (not later).
    #[allow(clippy::too_many_arguments)]
    fn send_from(
        &mut self,
        buf: Buf,
        len: usize,
        dst: SocketAddr,
        class: Class,
        deadline: Option<Duration>,
        intended: Instant,
        now: Instant,
    ) -> Result<(), SendError> {
        let sent_us = self.clock.wall_us(intended);
        // A deadline too far to be an instant is none at all.
        let deadline_at = deadline.and_then(|d| intended.checked_add(d));
        self.tx.enqueue(
            buf,
            len,
            dst,
            class,
            deadline,
            deadline_at,
            sent_us,
            &mut self.stats,
        )?;
        self.pump(now);
        Ok(())
    }

    /// Holds real-time messages from now on instead of sending each at once, so that a burst
    /// of small ones leaves bundled: several whole messages (each at most
    /// [`Self::fragment_len`] bytes) to a datagram, as few datagrams as fit, one system call.
    /// They go at [`Self::uncork`], or as soon as the real-time queue is full (a corked send
    /// is never refused for the cork). [`Self::poll`] does not send them. Deadlines and
    /// one-way delays still count from each message's own send.
    pub fn cork(&mut self) {
        self.tx.set_cork(true);
    }

    /// Sends the real-time messages held since [`Self::cork`], bundled, and sends each at
    /// once again from now on.
    pub fn uncork(&mut self) {
        self.tx.set_cork(false);
        self.pump(Instant::now());
    }

    /// When [`RtSocket::poll`] must be called next at the latest.
    pub fn next_timer(&self) -> Instant {
        let (precise, coarse) = self.rx.next_timers();
        let t = self.tx.next_timer(Instant::now());
        t.min(precise.unwrap_or(t)).min(coarse.unwrap_or(t))
    }

    /// Sends what may go, then waits up to `timeout` for datagrams and hands every message
    /// completed to `on_message`; sends reports that are due and drops messages past their
    /// deadline. Returns the messages delivered (0 when the timeout passed, or when what
    /// arrived completed nothing).
    ///
    /// Timers that must be on time (the smoother, queued sends, incomplete messages, a
    /// report telling of losses) end the wait to the microsecond. When none is due within
    /// [`WAIT_SLICE`] plus a kernel tick, it waits in the kernel's receive itself instead
    /// of `ppoll(2)` (one system call a wake-up instead of two, no high-resolution timer:
    /// half a round trip of small messages as fast as plain `recvfrom`), a slice at a time,
    /// and a report that only tells of messages delivered may leave up to a slice late.
    /// With AF_XDP it waits in `epoll_pwait2` on both sockets, a slice at a time too.
    pub fn poll(
        &mut self,
        timeout: Duration,
        mut on_message: impl FnMut(RtMessage<'_>),
    ) -> io::Result<usize> {
        let start = Instant::now();
        let end = start.checked_add(timeout);
        self.pump(start);
        self.rx
            .send_reports(start, &mut self.dp, self.rt_mark, &mut self.stats);
        let mut now = start;
        loop {
            let (precise, coarse) = self.rx.next_timers();
            let until = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(now));
            let exact = [
                until(end),
                until(precise),
                Some(self.tx.next_timer(now).saturating_duration_since(now)),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(Duration::MAX);
            let sliced = self
                .dp
                .slice()
                .is_some_and(|s| exact >= s.saturating_add(KERNEL_TICK_MAX));
            let delivered = match self.spin(now, exact, &mut on_message)? {
                Some(d) => Some(d),
                // `now` stands for the moment the receive begins, to tell whether a message
                // stamped after it woke the wait (then one is asked for next time, not
                // more). It may be a little earlier (sends in between): a message queued
                // meanwhile is taken for a waker, which only keeps the next ask at one.
                None => self.receive(
                    sliced.then_some(now),
                    exact.min(until(coarse).unwrap_or(exact)),
                    &mut on_message,
                )?,
            };
            now = Instant::now();
            self.rx.expire(now, &mut self.stats);
            self.pump(now);
            self.rx
                .send_reports(now, &mut self.dp, self.rt_mark, &mut self.stats);
            match delivered {
                // A slice ran out with nothing: the reports and deadlines are seen to
                // above; wait on until the caller's timeout.
                None if sliced && end.is_none_or(|e| now < e) => {}
                d => return Ok(d.unwrap_or(0)),
            }
        }
    }

    /// Looks for datagrams without waiting, from `now` for [`RtConfig::spin`] (at most
    /// `limit`), until some arrive: what [`Self::receive`] says of them, `None` if none did.
    fn spin(
        &mut self,
        now: Instant,
        limit: Duration,
        on_message: &mut impl FnMut(RtMessage<'_>),
    ) -> io::Result<Option<usize>> {
        if self.cfg.spin.is_zero() {
            return Ok(None);
        }
        let stop = now + self.cfg.spin.min(limit);
        loop {
            if let Some(d) = self.receive(None, Duration::ZERO, on_message)? {
                return Ok(Some(d));
            }
            if Instant::now() >= stop {
                return Ok(None);
            }
            std::hint::spin_loop();
        }
    }

    /// One receive (a blocking one begun at `sliced`, if given, else waiting up to `wait`)
    /// and what arrived handled. Returns the messages delivered, `None` if nothing arrived.
    fn receive(
        &mut self,
        sliced: Option<Instant>,
        wait: Duration,
        on_message: &mut impl FnMut(RtMessage<'_>),
    ) -> io::Result<Option<usize>> {
        let batch = self.dp.recv(sliced, wait)?;
        if batch.is_empty() {
            return Ok(None);
        }
        // When the kernel gave no receive timestamp: the time the batch was handled.
        let mut read_at = None;
        let clock = self.clock;
        let mut delivered = 0;
        for (src, d, at, tos) in batch.iter_marked() {
            if slipstream_proto::rt::report::Report::is_report(d) {
                self.tx.on_report(src, d, &self.cfg, &mut self.stats);
                continue;
            }
            let arrived = at.unwrap_or_else(|| *read_at.get_or_insert_with(Instant::now));
            let marked = tos == TOS_EF;
            self.stats.marked_received += u64::from(marked);
            for unit in slipstream_proto::rt::header::units(d) {
                delivered += self.rx.on_datagram(
                    src,
                    unit,
                    arrived,
                    clock.wall_us(arrived),
                    marked,
                    &mut self.stats,
                    on_message,
                );
            }
        }
        Ok(Some(delivered))
    }

    /// Sends what the smoother and the queue below allow now.
    fn pump(&mut self, now: Instant) {
        self.tx
            .pump(now, &mut self.dp, self.rt_mark, &mut self.stats);
    }

    /// Messages waiting to be sent: real-time, non-real-time.
    pub fn queued(&self) -> (usize, usize) {
        self.tx.queued()
    }

    /// Counters.
    pub fn stats(&self) -> RtStats {
        let mut s = self.stats;
        s.reassembly = self.rx.reassembly_stats();
        if let Some(g) = self.tx.smoother() {
            let (st, period, credits) = g.stats();
            s.smoother = st;
            s.period_us = period.as_micros() as u64;
            s.credits = credits;
        }
        s.datapath = self.dp.udp.stats();
        s.xdp = self.dp.xdp_stats();
        s
    }
}

/// Whether the kernel takes the real-time mark as per-message control data: the TOS, and
/// the priority too (recent kernels only). Found once per process by sending to loopback.
fn mark_supported() -> Option<Mark> {
    static MARK: std::sync::OnceLock<Option<Mark>> = std::sync::OnceLock::new();
    *MARK.get_or_init(|| {
        [Some(PRIORITY_RT), None].into_iter().find_map(|priority| {
            let mark = Mark {
                tos: TOS_EF,
                priority,
            };
            probe_mark(mark).ok().filter(|&ok| ok).map(|_| mark)
        })
    })
}

/// Sends one marked datagram between two loopback sockets: whether it arrived marked.
fn probe_mark(mark: Mark) -> io::Result<bool> {
    let lo = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut a = Mmsg::bind(lo, false)?;
    let mut b = Mmsg::bind(lo, false)?;
    b.recv_tos()?;
    a.set_mark(Some(mark));
    a.send(
        &[0x5a; 8],
        &[crate::datapath::Tx::single(b.local_addr()?, 0, 8)],
    )?;
    if a.stats().send_errors > 0 {
        return Ok(false);
    }
    let deadline = Instant::now() + Duration::from_millis(200);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let batch = b.recv(Some(left))?;
        if let Some((_, _, _, tos)) = batch.iter_marked().next() {
            return Ok(tos == mark.tos);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests;
