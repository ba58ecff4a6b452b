//! The portable datapath: one `std::net::UdpSocket`, one system call per datagram.
//!
//! The socket is non-blocking; waiting uses `ppoll(2)`, whose high-resolution timeout keeps
//! the engine's pacing deadlines (`SO_RCVTIMEO` would round them up to scheduler ticks, which
//! throttled a paced sender to a fraction of its rate).

use super::{Datapath, DatapathStats, EventWake, RxBatch, RxMeta, Tx, Waker, MAX_UDP_PAYLOAD};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::io;
use std::net::{SocketAddr, UdpSocket};
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
    wake: EventWake,
    stats: DatapathStats,
    rx_buf: Vec<u8>,
    rx_metas: Vec<RxMeta>,
}

impl StdUdp {
    /// Binds `addr` with large socket buffers (silently smaller if the kernel refuses).
    pub fn bind(addr: SocketAddr) -> io::Result<Self> {
        let sock = super::bind_udp(addr)?;
        Ok(StdUdp {
            sock,
            wake: EventWake::new()?,
            stats: DatapathStats::default(),
            rx_buf: vec![0; RX_BUF],
            rx_metas: Vec::with_capacity(RX_BATCH),
        })
    }

    /// Waits until the socket is writable, or (without `out`) readable or woken, at most
    /// `timeout`. Returns what happened.
    fn wait(&mut self, out: bool, timeout: Option<Duration>) -> io::Result<Ready> {
        let flags = if out { PollFlags::OUT } else { PollFlags::IN };
        let ts = timeout.map(|t| Timespec {
            tv_sec: t.as_secs() as _,
            tv_nsec: t.subsec_nanos() as _,
        });
        let mut fds = [
            PollFd::new(&self.sock, flags),
            PollFd::from_borrowed_fd(self.wake.fd(), PollFlags::IN),
        ];
        let n = if out { 1 } else { 2 };
        self.stats.syscalls += 1;
        match poll(&mut fds[..n], ts.as_ref()) {
            Ok(0) => Ok(Ready::TimedOut),
            Ok(_) if n == 2 && !fds[1].revents().is_empty() => {
                self.wake.clear();
                Ok(Ready::Woken)
            }
            // Ready (or an error to collect by the next call).
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(Ready::Socket),
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

/// What a wait ended with.
enum Ready {
    Socket,
    TimedOut,
    Woken,
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
    fn receive_queue_bytes(&self) -> Option<usize> {
        super::receive_queue_of(&self.sock)
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
        // First datagram: try without waiting, then wait if allowed. A wake ends the call:
        // the caller has new work.
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
            match self.wait(false, wait)? {
                Ready::Socket => {}
                Ready::TimedOut => break Rx::Empty,
                Ready::Woken => break Rx::Woken,
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
            tos: 0,
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
                        tos: 0,
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
        Ok(self.wake.waker())
    }

    fn stats(&self) -> DatapathStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, UdpSocket};

    #[test]
    fn a_wake_ends_a_blocked_receive_once() {
        let mut a = StdUdp::bind((Ipv4Addr::LOCALHOST, 0).into()).unwrap();
        let w = a.waker().unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w.wake();
        });
        let start = Instant::now();
        assert!(a.recv(Some(Duration::from_secs(10))).unwrap().is_empty());
        assert!(start.elapsed() < Duration::from_secs(2));
        t.join().unwrap();
        let start = Instant::now();
        assert!(a.recv(Some(Duration::from_millis(30))).unwrap().is_empty());
        assert!(start.elapsed() >= Duration::from_millis(30));
        // Datagrams, 0-byte ones included, are data whoever sends them.
        let peer = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let to = a.local_addr().unwrap();
        peer.send_to(b"x", to).unwrap();
        peer.send_to(&[], to).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let b = a.recv(Some(Duration::from_secs(1))).unwrap();
        assert_eq!(b.len(), 2);
    }
}
