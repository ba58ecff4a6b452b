//! Datagram I/O behind one trait, so the runtime does not care which kernel interface moves
//! its packets.
//!
//! This module owns the [`Datapath`] trait (batched send and receive, a cross-thread waker and
//! an optional internal deadline), the portable backend on `std::net::UdpSocket`
//! ([`StdUdp`]) and the loss-injecting wrapper ([`Impaired`]) that passes outgoing datagrams
//! through a simulated link. Faster Linux backends (sendmmsg/GSO, io_uring) implement the same
//! trait.

mod impair;
mod select;
mod std_udp;

pub use impair::rate as parse_rate;
pub use impair::{Impaired, Impairment};
pub use select::{open, probe, Caps, AUTO_ORDER, NAMES};
pub use std_udp::StdUdp;

/// Socket buffer size asked for, each direction.
const SOCKET_BUFFER: usize = 64 << 20;

/// A non-blocking UDP socket bound to `addr`, with large buffers: `SO_RCVBUFFORCE` /
/// `SO_SNDBUFFORCE` where the process may (CAP_NET_ADMIN), else as much as `rmem_max` and
/// `wmem_max` allow. A receive buffer of a few megabytes holds only milliseconds of a fast
/// flow of 64 KiB datagrams; every overflow costs a retransmission. A wildcard IPv6 socket
/// also accepts IPv4-mapped peers, as most servers do.
pub(crate) fn bind_udp(addr: SocketAddr) -> io::Result<UdpSocket> {
    let sock = udp_socket(addr, SOCKET_BUFFER, SOCKET_BUFFER)?;
    sock.set_nonblocking(true)?;
    Ok(sock)
}

thread_local! {
    /// While set (see [`in_reuseport_group`]), sockets opened on this thread join a
    /// `SO_REUSEPORT` group of this many shards, steered by SRT socket id.
    static GROUP: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` (which opens a datapath) so that its socket joins the `SO_REUSEPORT` group of
/// `shards` sockets bound to the same address, datagrams steered among them by SRT socket
/// id (see [`crate::sys::reuseport`]).
#[cfg(target_os = "linux")]
pub(crate) fn in_reuseport_group<T>(shards: u32, f: impl FnOnce() -> T) -> T {
    GROUP.with(|g| g.set(Some(shards)));
    let out = f();
    GROUP.with(|g| g.set(None));
    out
}

/// The receive buffer of `sock` as the kernel accounts it (Linux reports twice what was
/// asked: the bookkeeping of each datagram counts too).
pub(crate) fn receive_queue_of(sock: &UdpSocket) -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        rustix::net::sockopt::socket_recv_buffer_size(sock).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = sock;
        None
    }
}

/// A blocking UDP socket bound to `addr` with send and receive buffers of about `sndbuf` and
/// `rcvbuf` bytes (forced past the system limits where permitted).
pub(crate) fn udp_socket(addr: SocketAddr, sndbuf: usize, rcvbuf: usize) -> io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        let _ = sock.set_only_v6(false);
    }
    #[cfg(target_os = "linux")]
    {
        use rustix::net::sockopt;
        if sockopt::set_socket_recv_buffer_size_force(&sock, rcvbuf).is_err() {
            let _ = sock.set_recv_buffer_size(rcvbuf);
        }
        if sockopt::set_socket_send_buffer_size_force(&sock, sndbuf).is_err() {
            let _ = sock.set_send_buffer_size(sndbuf);
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = sock.set_recv_buffer_size(rcvbuf);
        let _ = sock.set_send_buffer_size(sndbuf);
    }
    #[cfg(target_os = "linux")]
    let group = GROUP.with(|g| g.get());
    #[cfg(target_os = "linux")]
    if group.is_some() {
        crate::sys::reuseport::set_reuseport(&sock)?;
    }
    sock.bind(&addr.into())?;
    #[cfg(target_os = "linux")]
    if let Some(n) = group {
        crate::sys::reuseport::steer_by_socket_id(&sock, n)?;
    }
    Ok(sock.into())
}

/// The path MTU the kernel knows for `dst` (IP_MTU / IPV6_MTU on a connected probe socket), or
/// `None` where the platform does not say. No packet is sent: connecting a UDP socket only
/// looks up the route.
#[cfg(target_os = "linux")]
pub fn path_mtu(dst: SocketAddr) -> Option<u32> {
    let any: SocketAddr = if dst.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }
        .parse()
        .ok()?;
    let probe = std::net::UdpSocket::bind(any).ok()?;
    probe.connect(dst).ok()?;
    if dst.is_ipv4() {
        rustix::net::sockopt::ip_mtu(&probe).ok()
    } else {
        rustix::net::sockopt::ipv6_mtu(&probe).ok()
    }
}

/// The path MTU the kernel knows for `dst`: not available on this platform.
#[cfg(not(target_os = "linux"))]
pub fn path_mtu(_dst: SocketAddr) -> Option<u32> {
    None
}

use serde::Serialize;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest UDP payload over IPv4 (65,535 minus the IP and UDP headers): the bound on one
/// datagram and on one segmentation-offload send.
pub const MAX_UDP_PAYLOAD: usize = 65_507;

/// One send operation: bytes `buf[offset .. offset + len]` to `dst`, cut into datagrams of
/// `segment_size` bytes each (the last may be shorter). A single datagram has
/// `segment_size == len`. Backends with segmentation offload hand a whole run to the kernel
/// at once (UDP GSO); the others send the datagrams one by one from the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tx {
    /// Destination.
    pub dst: SocketAddr,
    /// Where the run starts in the batch buffer.
    pub offset: usize,
    /// Total bytes of the run.
    pub len: usize,
    /// Bytes per datagram; every datagram but the last is exactly this long.
    pub segment_size: usize,
}

impl Tx {
    /// One datagram of `len` bytes at `offset`.
    pub fn single(dst: SocketAddr, offset: usize, len: usize) -> Self {
        Tx {
            dst,
            offset,
            len,
            segment_size: len,
        }
    }

    /// How many datagrams the run holds (a zero-length datagram counts as one).
    pub fn datagrams(&self) -> usize {
        if self.len == 0 || self.segment_size == 0 {
            1
        } else {
            self.len.div_ceil(self.segment_size)
        }
    }

    /// The byte ranges of the run's datagrams in the batch buffer.
    pub fn segments(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        let seg = self.segment_size.max(1);
        let end = self.offset + self.len;
        (0..self.datagrams()).map(move |i| {
            let a = self.offset + i * seg;
            a..(a + seg).min(end)
        })
    }
}

/// Where one received datagram came from and where its bytes are in the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxMeta {
    /// Source address.
    pub src: SocketAddr,
    /// Which of the batch's buffers holds it (always 0 for a single-buffer batch).
    pub part: usize,
    /// Where the datagram starts in that buffer.
    pub offset: usize,
    /// Its length.
    pub len: usize,
    /// When the kernel received it (a software receive timestamp), where the datapath
    /// asks for one; `None` otherwise.
    pub at: Option<Instant>,
    /// The IP TOS / traffic class byte it arrived with, where the datapath asks for it; 0
    /// otherwise.
    pub tos: u8,
}

impl Default for RxMeta {
    fn default() -> Self {
        RxMeta {
            src: SocketAddr::from(([0, 0, 0, 0], 0)),
            part: 0,
            offset: 0,
            len: 0,
            at: None,
            tos: 0,
        }
    }
}

/// Bytes a split receive puts apart at the start of each datagram ([`Datapath::recv_split`]):
/// an SRT packet header.
pub const SPLIT_HEAD: usize = 16;

/// One message of a [`Datapath::recv_split`]: its first [`SPLIT_HEAD`] bytes are in the
/// caller's `heads[index]`, the rest at the start of `bufs[index]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxSplit {
    /// Which header and buffer hold it.
    pub index: usize,
    /// Source address.
    pub src: SocketAddr,
    /// Its length, both parts together (a datagram shorter than [`SPLIT_HEAD`] is all in
    /// the header).
    pub len: usize,
    /// Set when the message holds several datagrams of this many bytes each (a GRO batch;
    /// the last may be shorter), back to back across the two parts.
    pub segment: Option<usize>,
    /// When the kernel received it, as in [`RxMeta::at`].
    pub at: Option<Instant>,
}

/// The datagrams of a [`Datapath::send_gather`]: each one's destination, header and payload,
/// borrowed for the call.
pub trait TxGather {
    /// How many datagrams.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Datagram `i` (`i < len()`): destination, header, payload (either may be empty).
    fn get(&self, i: usize) -> (SocketAddr, &[u8], &[u8]);
}

/// Buffers a batch's datagrams live in when they are not one contiguous region (io_uring's
/// provided buffers: one slot per completion, each owned by the datapath until its next
/// receive).
pub trait RxParts: Sync {
    /// Buffer `i`, or `None` if there is no such buffer.
    fn part(&self, i: usize) -> Option<&[u8]>;
}

#[derive(Clone, Copy)]
enum Parts<'a> {
    One(&'a [u8]),
    Many(&'a dyn RxParts),
}

impl std::fmt::Debug for Parts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Parts::One(b) => write!(f, "One({} bytes)", b.len()),
            Parts::Many(_) => f.write_str("Many"),
        }
    }
}

/// Datagrams received by one [`Datapath::recv`] call, borrowed from the datapath's own
/// buffers (the kernel wrote them there; nothing is copied) until its next call.
#[derive(Debug, Clone, Copy)]
pub struct RxBatch<'a> {
    parts: Parts<'a>,
    metas: &'a [RxMeta],
}

impl<'a> RxBatch<'a> {
    /// A batch of `metas` pointing into `buf`. Metas outside `buf` are skipped by
    /// [`RxBatch::iter`].
    pub fn new(buf: &'a [u8], metas: &'a [RxMeta]) -> Self {
        RxBatch {
            parts: Parts::One(buf),
            metas,
        }
    }

    /// A batch of `metas` pointing into the buffers of `parts` (by [`RxMeta::part`]).
    pub fn with_parts(parts: &'a dyn RxParts, metas: &'a [RxMeta]) -> Self {
        RxBatch {
            parts: Parts::Many(parts),
            metas,
        }
    }

    /// No datagrams (timeout or wake-up).
    pub fn empty() -> Self {
        RxBatch::new(&[], &[])
    }

    /// Number of datagrams.
    pub fn len(&self) -> usize {
        self.metas.len()
    }

    /// Whether the batch holds no datagram.
    pub fn is_empty(&self) -> bool {
        self.metas.is_empty()
    }

    /// The datagrams, in arrival order: source and bytes.
    pub fn iter(&self) -> impl Iterator<Item = (SocketAddr, &'a [u8])> + 'a {
        self.iter_timed().map(|(src, data, _)| (src, data))
    }

    /// The datagrams, in arrival order: source, bytes, the kernel's receive time if known and
    /// the TOS byte ([`RxMeta::tos`]).
    pub fn iter_marked(
        &self,
    ) -> impl Iterator<Item = (SocketAddr, &'a [u8], Option<Instant>, u8)> + 'a {
        let parts = self.parts;
        self.metas.iter().filter_map(move |m| {
            let buf = match parts {
                Parts::One(b) if m.part == 0 => b,
                Parts::One(_) => return None,
                Parts::Many(p) => p.part(m.part)?,
            };
            Some((
                m.src,
                buf.get(m.offset..m.offset.checked_add(m.len)?)?,
                m.at,
                m.tos,
            ))
        })
    }

    /// The datagrams, in arrival order: source, bytes and the kernel's receive time if known.
    pub fn iter_timed(&self) -> impl Iterator<Item = (SocketAddr, &'a [u8], Option<Instant>)> + 'a {
        self.iter_marked().map(|(src, data, at, _)| (src, data, at))
    }
}

/// Counters of a datapath. Send-side drops are ordinary packet loss to the protocol above.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DatapathStats {
    /// Datagrams handed to the kernel.
    pub sent: u64,
    /// Datagrams received (the io_uring waker's datagrams excluded).
    pub received: u64,
    /// System calls made for sending and receiving (waits included).
    pub syscalls: u64,
    /// Sends that carried more than one datagram with segmentation offload (GSO).
    pub gso_sends: u64,
    /// Receives that returned more than one coalesced datagram (GRO).
    pub gro_batches: u64,
    /// Times a send found the socket buffer (or submission ring) full and had to wait.
    pub send_would_block: u64,
    /// Datagrams dropped because the kernel had no buffer (ENOBUFS).
    pub send_nobufs: u64,
    /// Datagrams dropped on other send errors (unreachable destination, too large, ...).
    pub send_errors: u64,
    /// Receive errors ignored (ICMP errors reported on the socket, ...).
    pub recv_errors: u64,
    /// Zero-copy sends completed.
    pub zerocopy_completed: u64,
    /// Of those, the ones the kernel reports it copied after all.
    pub zerocopy_copied: u64,
    /// Times the datapath gave up a kernel feature at run time (GSO refused, ...) and fell
    /// back to a slower way.
    pub degraded: u64,
    /// Datagrams the simulated link dropped (loss, queue overflow, MTU), when impaired.
    pub impaired_lost: u64,
    /// Datagrams the simulated link delivered (duplicates included).
    pub impaired_delivered: u64,
}

impl DatapathStats {
    /// Adds `o`'s counts (the sockets of a sharded endpoint).
    pub fn merge(&mut self, o: &DatapathStats) {
        self.sent += o.sent;
        self.received += o.received;
        self.syscalls += o.syscalls;
        self.gso_sends += o.gso_sends;
        self.gro_batches += o.gro_batches;
        self.send_would_block += o.send_would_block;
        self.send_nobufs += o.send_nobufs;
        self.send_errors += o.send_errors;
        self.recv_errors += o.recv_errors;
        self.zerocopy_completed += o.zerocopy_completed;
        self.zerocopy_copied += o.zerocopy_copied;
        self.degraded += o.degraded;
        self.impaired_lost += o.impaired_lost;
        self.impaired_delivered += o.impaired_delivered;
    }
}

/// Datagram I/O for one UDP socket, in batches.
///
/// The calling protocol: the owner calls [`Datapath::recv`] (waiting at most a timeout) and
/// consumes the returned batch before calling anything else; it writes outgoing datagrams
/// into a buffer of its own and passes runs of them to [`Datapath::send`]; it calls
/// [`Datapath::service`] when [`Datapath::next_deadline`] passes. Neither call allocates.
pub trait Datapath: Send + std::fmt::Debug {
    /// A short name for logs and statistics ("std", "mmsg+gso", "uring", ...).
    fn name(&self) -> &'static str;

    /// The bound local address.
    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// How many bytes the kernel queues for the socket before it drops what arrives (its
    /// receive buffer, as the kernel accounts it), if known.
    fn receive_queue_bytes(&self) -> Option<usize> {
        None
    }

    /// The most datagrams one [`Tx`] may carry: 1 without segmentation offload. Runs are
    /// also bounded by [`MAX_UDP_PAYLOAD`] bytes.
    fn max_segments(&self) -> usize {
        1
    }

    /// Sends the runs `txs`, whose bytes are in `buf`. Returns how many runs were dealt
    /// with; it stops early only when the kernel has no buffer (ENOBUFS, counted); the caller
    /// treats the rest as lost. A full socket buffer is waited out (back-pressure).
    fn send(&mut self, buf: &[u8], txs: &[Tx]) -> io::Result<usize>;

    /// Whether [`Datapath::send_gather`] sends without copying (the caller then keeps its
    /// payloads where they are instead of copying them into its own buffer).
    fn gathers(&self) -> bool {
        false
    }

    /// Sends `dgrams`, each a header and a payload from anywhere (the kernel gathers the two
    /// parts; consecutive datagrams of one size to one destination go out as one
    /// segmentation-offload send where [`Datapath::max_segments`] allows). Same result and
    /// back-pressure as [`Datapath::send`], counted in datagrams. Backends that do not gather
    /// ([`Datapath::gathers`] false) refuse with `Unsupported`.
    fn send_gather(&mut self, dgrams: &dyn TxGather) -> io::Result<usize> {
        let _ = dgrams;
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this datapath does not gather",
        ))
    }

    /// Waits up to `timeout` (`None` = forever, zero = do not wait) for at least one datagram,
    /// then takes whatever else is ready without blocking. An empty batch means timeout or
    /// wake-up.
    fn recv(&mut self, timeout: Option<Duration>) -> io::Result<RxBatch<'_>>;

    /// Whether [`Datapath::recv_split`] works.
    fn splits(&self) -> bool {
        false
    }

    /// Says, before the caller's next sends, whether its receives will be split from now on.
    /// A splitting backend turns receive coalescing (GRO) off here rather than at the next
    /// receive: a batch the kernel coalesced while it was on stays whole in the socket's
    /// queue, and read split it cannot be told from one datagram. So the caller announces
    /// the switch before it tells a peer to send (a handshake response). Backends that do
    /// not split ignore it.
    fn set_split(&mut self, split: bool) {
        let _ = split;
    }

    /// Receives as [`Datapath::recv`] does, but into the caller's buffers, each datagram in
    /// two parts: its first [`SPLIT_HEAD`] bytes into `heads[i]`, the rest into `bufs[i]`
    /// (up to that buffer's length; a longer datagram is dropped and counted). `out` is
    /// cleared, then lists the messages received. The caller can then keep a payload
    /// where it landed. Backends that do not split ([`Datapath::splits`] false) refuse with
    /// `Unsupported`.
    fn recv_split(
        &mut self,
        timeout: Option<Duration>,
        heads: &mut [[u8; SPLIT_HEAD]],
        bufs: &mut [Vec<u8>],
        out: &mut Vec<RxSplit>,
    ) -> io::Result<()> {
        let _ = (timeout, heads, bufs, out);
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this datapath does not split receives",
        ))
    }

    /// A handle other threads use to interrupt a blocked [`Datapath::recv`].
    fn waker(&self) -> io::Result<Waker>;

    /// Earliest time something internal (an impairment delay line) needs [`Datapath::service`].
    fn next_deadline(&self) -> Option<Instant> {
        None
    }

    /// Does internal work that is due (sends delayed datagrams).
    fn service(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Counters.
    fn stats(&self) -> DatapathStats;
}

/// Interrupts a datapath's blocked `recv` from another thread.
///
/// Datapaths that wait with `poll(2)` wait on an eventfd beside their socket
/// (`EventWake`): a wake is one 8-byte `write(2)`. The io_uring datapath, which waits on
/// its ring, is woken by a 0-byte datagram sent to its socket from a separate one, which it
/// drops; that costs a trip through the UDP stack (route lookup, socket buffer, softirq),
/// about ten times the eventfd's write, on the path of every message a live sender queues.
#[derive(Debug, Clone)]
pub struct Waker(WakeBy);

#[derive(Debug, Clone)]
enum WakeBy {
    Event(Arc<OwnedFd>),
    Datagram {
        sock: Arc<UdpSocket>,
        target: SocketAddr,
    },
}

impl Waker {
    /// The separate socket a datapath bound to `local` is woken from, and its address: on
    /// loopback when `local` is a wildcard address, else on `local`'s address.
    pub(crate) fn socket_for(local: SocketAddr) -> io::Result<(Arc<UdpSocket>, SocketAddr)> {
        use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let ip = match local.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let sock = UdpSocket::bind(SocketAddr::new(ip, 0))?;
        let addr = sock.local_addr()?;
        Ok((Arc::new(sock), addr))
    }

    /// A waker that sends a 0-byte datagram from `sock` to `target`.
    pub(crate) fn datagram(sock: Arc<UdpSocket>, target: SocketAddr) -> Self {
        Waker(WakeBy::Datagram { sock, target })
    }

    /// Wakes the datapath's receiver. Errors are ignored: at worst the receiver wakes at its
    /// next timeout.
    pub fn wake(&self) {
        match &self.0 {
            WakeBy::Event(fd) => {
                let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
            }
            WakeBy::Datagram { sock, target } => {
                let _ = sock.send_to(&[], *target);
            }
        }
    }
}

/// The eventfd a `poll(2)`-based datapath waits on beside its socket (see [`Waker`]).
#[derive(Debug)]
pub(crate) struct EventWake(Arc<OwnedFd>);

impl EventWake {
    pub(crate) fn new() -> io::Result<Self> {
        use rustix::event::{eventfd, EventfdFlags};
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(EventWake(Arc::new(fd)))
    }

    /// A waker for this eventfd.
    pub(crate) fn waker(&self) -> Waker {
        Waker(WakeBy::Event(self.0.clone()))
    }

    /// The descriptor to poll for readability.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// Consumes the wakes so far (the next poll blocks again).
    pub(crate) fn clear(&self) {
        let mut n = [0u8; 8];
        let _ = rustix::io::read(&*self.0, &mut n);
    }
}

impl<D: Datapath + ?Sized> Datapath for Box<D> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        (**self).local_addr()
    }
    fn receive_queue_bytes(&self) -> Option<usize> {
        (**self).receive_queue_bytes()
    }
    fn max_segments(&self) -> usize {
        (**self).max_segments()
    }
    fn send(&mut self, buf: &[u8], txs: &[Tx]) -> io::Result<usize> {
        (**self).send(buf, txs)
    }
    fn gathers(&self) -> bool {
        (**self).gathers()
    }
    fn send_gather(&mut self, dgrams: &dyn TxGather) -> io::Result<usize> {
        (**self).send_gather(dgrams)
    }
    fn recv(&mut self, timeout: Option<Duration>) -> io::Result<RxBatch<'_>> {
        (**self).recv(timeout)
    }
    fn splits(&self) -> bool {
        (**self).splits()
    }
    fn set_split(&mut self, split: bool) {
        (**self).set_split(split)
    }
    fn recv_split(
        &mut self,
        timeout: Option<Duration>,
        heads: &mut [[u8; SPLIT_HEAD]],
        bufs: &mut [Vec<u8>],
        out: &mut Vec<RxSplit>,
    ) -> io::Result<()> {
        (**self).recv_split(timeout, heads, bufs, out)
    }
    fn waker(&self) -> io::Result<Waker> {
        (**self).waker()
    }
    fn next_deadline(&self) -> Option<Instant> {
        (**self).next_deadline()
    }
    fn service(&mut self) -> io::Result<()> {
        (**self).service()
    }
    fn stats(&self) -> DatapathStats {
        (**self).stats()
    }
}
