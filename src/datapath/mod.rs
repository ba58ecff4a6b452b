//! Datagram I/O behind one trait, so the runtime does not care which kernel interface moves
//! its packets.
//!
//! This module owns the [`Datapath`] trait (batched send and receive, a cross-thread waker and
//! an optional internal deadline), the portable backend on `std::net::UdpSocket`
//! ([`StdUdp`]) and the loss-injecting wrapper ([`Impaired`]) that passes outgoing datagrams
//! through a simulated link. Faster Linux backends (sendmmsg/GSO, io_uring) implement the same
//! trait.

mod impair;
mod std_udp;

pub use impair::{Impaired, Impairment};
pub use slipstream_proto::endpoint::Transmit;
pub use std_udp::StdUdp;

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
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where one received datagram came from and how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxMeta {
    /// Source address.
    pub src: SocketAddr,
    /// Bytes written at the start of this datagram's slot.
    pub len: usize,
}

impl Default for RxMeta {
    fn default() -> Self {
        RxMeta {
            src: SocketAddr::from(([0, 0, 0, 0], 0)),
            len: 0,
        }
    }
}

/// Counters of a datapath. Send-side drops are ordinary packet loss to the protocol above.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DatapathStats {
    /// Datagrams handed to the kernel.
    pub sent: u64,
    /// Datagrams received (waker datagrams excluded).
    pub received: u64,
    /// Times a send found the socket buffer full and had to wait.
    pub send_would_block: u64,
    /// Datagrams dropped because the kernel had no buffer (ENOBUFS).
    pub send_nobufs: u64,
    /// Datagrams dropped on other send errors (unreachable destination, too large, ...).
    pub send_errors: u64,
    /// Receive errors ignored (ICMP errors reported on the socket, ...).
    pub recv_errors: u64,
    /// Datagrams the simulated link dropped (loss, queue overflow, MTU), when impaired.
    pub impaired_lost: u64,
    /// Datagrams the simulated link delivered (duplicates included).
    pub impaired_delivered: u64,
}

/// Batched datagram I/O for one UDP socket.
///
/// Buffers are laid out in fixed-size slots: datagram `i` lives at
/// `bufs[i * stride .. i * stride + len]`. Neither call allocates.
pub trait Datapath: Send + std::fmt::Debug {
    /// A short name for logs and statistics ("std", "impaired(std)", ...).
    fn name(&self) -> &'static str;

    /// The bound local address.
    fn local_addr(&self) -> io::Result<SocketAddr>;

    /// Sends datagrams `i in 0..txs.len()`: bytes `bufs[i*stride .. i*stride + txs[i].len]` to
    /// `txs[i].dst`. Returns how many were dealt with; it stops early only when the kernel has
    /// no buffer (ENOBUFS, counted); the caller treats the rest as lost.
    fn send(&mut self, bufs: &[u8], stride: usize, txs: &[Transmit]) -> io::Result<usize>;

    /// Waits up to `timeout` (`None` = forever, zero = do not wait) for at least one datagram,
    /// then takes whatever else is ready without blocking, up to `metas.len()`. Returns how
    /// many slots were filled (0 on timeout or when woken).
    fn recv(
        &mut self,
        bufs: &mut [u8],
        stride: usize,
        metas: &mut [RxMeta],
        timeout: Option<Duration>,
    ) -> io::Result<usize>;

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

/// Interrupts a blocked `recv` by sending a 0-byte datagram to the datapath's own address from
/// a separate socket; the datapath drops 0-byte datagrams from that socket.
#[derive(Debug, Clone)]
pub struct Waker {
    sock: Arc<UdpSocket>,
    target: SocketAddr,
}

impl Waker {
    pub(crate) fn new(sock: Arc<UdpSocket>, target: SocketAddr) -> Self {
        Waker { sock, target }
    }

    /// Wakes the datapath's receiver. Errors are ignored: at worst the receiver wakes at its
    /// next timeout.
    pub fn wake(&self) {
        let _ = self.sock.send_to(&[], self.target);
    }
}

/// Opens the datapath named `name` ("std" is the only one so far) bound to `addr`.
pub fn open(name: &str, addr: SocketAddr) -> io::Result<Box<dyn Datapath>> {
    match name {
        "std" | "" => Ok(Box::new(StdUdp::bind(addr)?)),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unknown datapath '{other}' (available: std)"),
        )),
    }
}

impl<D: Datapath + ?Sized> Datapath for Box<D> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn local_addr(&self) -> io::Result<SocketAddr> {
        (**self).local_addr()
    }
    fn send(&mut self, bufs: &[u8], stride: usize, txs: &[Transmit]) -> io::Result<usize> {
        (**self).send(bufs, stride, txs)
    }
    fn recv(
        &mut self,
        bufs: &mut [u8],
        stride: usize,
        metas: &mut [RxMeta],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        (**self).recv(bufs, stride, metas, timeout)
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
