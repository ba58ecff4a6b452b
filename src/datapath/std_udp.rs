//! The portable datapath: one `std::net::UdpSocket`, one system call per datagram.
//!
//! The socket is non-blocking; waiting uses `ppoll(2)`, whose high-resolution timeout keeps
//! the engine's pacing deadlines (`SO_RCVTIMEO` would round them up to scheduler ticks, which
//! throttled a paced sender to a fraction of its rate).

use super::{Datapath, DatapathStats, RxBatch, RxMeta, Tx, Waker, MAX_UDP_PAYLOAD};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Linux `ENOBUFS`.
const ENOBUFS: i32 = 105;
/// Datagrams per receive batch.
const RX_BATCH: usize = 64;
/// Receive buffer: datagrams are packed one after another while a largest one still fits.
const RX_BUF: usize = 1 << 20;

/// Datapath on a standard UDP socket.
#[derive(Debug)]
pub struct StdUdp {
    sock: UdpSocket,
    waker_sock: Arc<UdpSocket>,
    waker_addr: SocketAddr,
    stats: DatapathStats,
    rx_buf: Vec<u8>,
    rx_metas: Vec<RxMeta>,
}

impl StdUdp {
    /// Binds `addr` with large socket buffers (silently smaller if the kernel refuses).
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let sock = super::bind_udp(addr)?;
        let local = sock.local_addr()?;
        let (waker_sock, waker_addr) = Waker::socket_for(local)?;
        Ok(StdUdp {
            sock,
            waker_sock,
            waker_addr,
            stats: DatapathStats::default(),
            rx_buf: vec![0; RX_BUF],
            rx_metas: Vec::with_capacity(RX_BATCH),
        })
    }

    /// Waits until the socket is readable (or writable with `out`), at most `timeout`.
    /// Returns false on timeout.
    fn wait(&mut self, out: bool, timeout: Option<Duration>) -> io::Result<bool> {
        let flags = if out { PollFlags::OUT } else { PollFlags::IN };
        let ts = timeout.map(|t| Timespec {
            tv_sec: t.as_secs() as _,
            tv_nsec: t.subsec_nanos() as _,
        });
        let mut fds = [PollFd::new(&self.sock, flags)];
        self.stats.syscalls += 1;
        match poll(&mut fds, ts.as_ref()) {
            Ok(n) => Ok(n > 0),
            Err(rustix::io::Errno::INTR) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// One non-blocking receive into the receive buffer at `at`.
    fn recv_one(&mut self, at: usize) -> io::Result<Rx> {
        loop {
            self.stats.syscalls += 1;
            match self
                .sock
                .recv_from(&mut self.rx_buf[at..at + MAX_UDP_PAYLOAD])
            {
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

    fn send(&mut self, buf: &[u8], txs: &[Tx]) -> io::Result<usize> {
        for (i, tx) in txs.iter().enumerate() {
            for seg in tx.segments() {
                loop {
                    self.stats.syscalls += 1;
                    match self.sock.send_to(&buf[seg.clone()], tx.dst) {
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
                            let rest: usize = txs[i..].iter().map(Tx::datagrams).sum();
                            self.stats.send_nobufs += rest as u64;
                            return Ok(i);
                        }
                        Err(_) => {
                            self.stats.send_errors += 1;
                            break;
                        }
                    }
                }
            }
        }
        Ok(txs.len())
    }

    fn recv(&mut self, timeout: Option<Duration>) -> io::Result<RxBatch<'_>> {
        self.rx_metas.clear();
        // First datagram: try without waiting, then wait if allowed. A waker datagram ends
        // the call: the caller has new work.
        let deadline = timeout.map(|t| Instant::now() + t);
        let first = loop {
            match self.recv_one(0)? {
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
            return Ok(RxBatch::empty());
        };
        self.rx_metas.push(RxMeta {
            src,
            part: 0,
            offset: 0,
            len,
            at: None,
        });
        let mut at = len;
        while self.rx_metas.len() < RX_BATCH && at + MAX_UDP_PAYLOAD <= self.rx_buf.len() {
            match self.recv_one(at)? {
                Rx::Got(len, src) => {
                    self.rx_metas.push(RxMeta {
                        src,
                        part: 0,
                        offset: at,
                        len,
                        at: None,
                    });
                    at += len;
                }
                Rx::Woken => {}
                Rx::Empty => break,
            }
        }
        Ok(RxBatch::new(&self.rx_buf, &self.rx_metas))
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
