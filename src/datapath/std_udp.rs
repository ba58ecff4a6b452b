//! The portable datapath: one `std::net::UdpSocket`, one system call per datagram.
//!
//! The socket is non-blocking; waiting uses `ppoll(2)`, whose high-resolution timeout keeps
//! the engine's pacing deadlines (`SO_RCVTIMEO` would round them up to scheduler ticks, which
//! throttled a paced sender to a fraction of its rate).

use super::{Datapath, DatapathStats, RxMeta, Transmit, Waker};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Socket buffer size asked for, each direction. The kernel may grant less (`rmem_max`).
const SOCKET_BUFFER: usize = 8 << 20;
/// Linux `ENOBUFS`.
const ENOBUFS: i32 = 105;

/// Datapath on a standard UDP socket.
#[derive(Debug)]
pub struct StdUdp {
    sock: UdpSocket,
    waker_sock: Arc<UdpSocket>,
    waker_addr: SocketAddr,
    stats: DatapathStats,
}

impl StdUdp {
    /// Binds `addr` with large socket buffers (silently smaller if the kernel refuses).
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if addr.is_ipv6() {
            // Accept IPv4-mapped peers on a wildcard IPv6 socket, as most servers do.
            let _ = sock.set_only_v6(false);
        }
        let _ = sock.set_send_buffer_size(SOCKET_BUFFER);
        let _ = sock.set_recv_buffer_size(SOCKET_BUFFER);
        sock.bind(&addr.into())?;
        let sock: UdpSocket = sock.into();
        sock.set_nonblocking(true)?;
        let local = sock.local_addr()?;
        let loopback = match local.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let waker_sock = UdpSocket::bind(SocketAddr::new(loopback, 0))?;
        let waker_addr = waker_sock.local_addr()?;
        Ok(StdUdp {
            sock,
            waker_sock: Arc::new(waker_sock),
            waker_addr,
            stats: DatapathStats::default(),
        })
    }

    /// Waits until the socket is readable (or writable with `out`), at most `timeout`.
    /// Returns false on timeout.
    fn wait(&self, out: bool, timeout: Option<Duration>) -> io::Result<bool> {
        let flags = if out { PollFlags::OUT } else { PollFlags::IN };
        let ts = timeout.map(|t| Timespec {
            tv_sec: t.as_secs() as _,
            tv_nsec: t.subsec_nanos() as _,
        });
        let mut fds = [PollFd::new(&self.sock, flags)];
        match poll(&mut fds, ts.as_ref()) {
            Ok(n) => Ok(n > 0),
            Err(rustix::io::Errno::INTR) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// One non-blocking receive into `slot`.
    fn recv_one(&mut self, slot: &mut [u8]) -> io::Result<Rx> {
        loop {
            match self.sock.recv_from(slot) {
                Ok((0, src)) if src == self.waker_addr => return Ok(Rx::Woken),
                Ok((len, src)) => {
                    self.stats.received += 1;
                    return Ok(Rx::Got(len, src));
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => return Ok(Rx::Empty),
                    io::ErrorKind::Interrupted => continue,
                    // ICMP errors surface on a later call; they concern some earlier send.
                    io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset => {
                        self.stats.recv_errors += 1;
                        continue;
                    }
                    _ => return Err(e),
                },
            }
        }
    }
}

/// Outcome of one receive call.
enum Rx {
    Got(usize, SocketAddr),
    Empty,
    Woken,
}

impl Datapath for StdUdp {
    fn name(&self) -> &'static str {
        "std"
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    fn send(&mut self, bufs: &[u8], stride: usize, txs: &[Transmit]) -> io::Result<usize> {
        for (i, tx) in txs.iter().enumerate() {
            let data = &bufs[i * stride..i * stride + tx.len];
            loop {
                match self.sock.send_to(data, tx.dst) {
                    Ok(_) => {
                        self.stats.sent += 1;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        // A full socket buffer is back-pressure: wait for room.
                        self.stats.send_would_block += 1;
                        self.wait(true, None)?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) if e.raw_os_error() == Some(ENOBUFS) => {
                        self.stats.send_nobufs += (txs.len() - i) as u64;
                        return Ok(i);
                    }
                    Err(_) => {
                        self.stats.send_errors += 1;
                        break;
                    }
                }
            }
        }
        Ok(txs.len())
    }

    fn recv(
        &mut self,
        bufs: &mut [u8],
        stride: usize,
        metas: &mut [RxMeta],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let max = metas.len().min(bufs.len() / stride.max(1));
        if max == 0 {
            return Ok(0);
        }
        // First datagram: try without waiting, then wait if allowed. A waker datagram ends
        // the call: the caller has new work.
        let deadline = timeout.map(|t| Instant::now() + t);
        let first = loop {
            match self.recv_one(&mut bufs[..stride])? {
                Rx::Empty => {}
                other => break other,
            }
            let wait = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(w) if !w.is_zero() => Some(w),
                    _ => break Rx::Empty,
                },
                None => None,
            };
            if !self.wait(false, wait)? {
                break Rx::Empty;
            }
        };
        let Rx::Got(len, src) = first else {
            return Ok(0);
        };
        metas[0] = RxMeta { src, len };
        let mut n = 1;
        while n < max {
            match self.recv_one(&mut bufs[n * stride..(n + 1) * stride])? {
                Rx::Got(len, src) => {
                    metas[n] = RxMeta { src, len };
                    n += 1;
                }
                Rx::Woken => {}
                Rx::Empty => break,
            }
        }
        Ok(n)
    }

    fn waker(&self) -> io::Result<Waker> {
        let local = self.sock.local_addr()?;
        let target = SocketAddr::new(self.waker_addr.ip(), local.port());
        Ok(Waker::new(self.waker_sock.clone(), target))
    }

    fn stats(&self) -> DatapathStats {
        self.stats
    }
}
