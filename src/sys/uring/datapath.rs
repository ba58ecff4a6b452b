//! [`Uring`]: the [`Datapath`] on the io_uring engine.
//!
//! Sends go straight from the caller's buffer (SENDMSG, or SENDMSG_ZC for "uring-zc", with a
//! UDP_SEGMENT control message for runs), all runs of a call submitted together; the call
//! returns once the kernel is done with every byte (zero-copy notifications included),
//! because the trait lends the buffer only for the call. Receives come from one multishot
//! RECVMSG over a provided-buffer ring of 64 KiB pool slots with UDP_GRO on; GRO
//! super-datagrams are split into one [`RxMeta`] per datagram. A batch's slots go back to the
//! kernel at the start of the next `recv`.

use super::engine::{Engine, EngineConfig, MAX_SEGS};
use super::pool::Buf;
use crate::datapath::{
    Datapath, DatapathStats, RxBatch, RxMeta, RxParts, Tx, Waker, MAX_UDP_PAYLOAD,
};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

/// Receive slots (64 KiB each, for GRO super-datagrams).
const RX_SLOTS: usize = 128;
/// Send operations in flight at most.
const OPS: usize = 64;
/// Most datagrams in one receive batch.
const RX_BATCH: usize = 1024;
const SOCKET_BUFFER: usize = 64 << 20;

/// Receive slots the kernel filled and handed back, held until the next `recv`; a batch
/// reads each datagram through its slot's buffer handle.
#[derive(Debug)]
struct Held(Vec<Buf>);

impl RxParts for Held {
    fn part(&self, i: usize) -> Option<&[u8]> {
        self.0.get(i).map(|b| &b.as_ref()[..b.len()])
    }
}

/// The io_uring datapath.
#[derive(Debug)]
pub(crate) struct Uring {
    eng: Engine,
    held: Held,
    metas: Vec<RxMeta>,
    waker_sock: Arc<UdpSocket>,
    waker_addr: SocketAddr,
    zerocopy: bool,
}

impl Uring {
    /// Binds `addr`; `zerocopy` sends with SENDMSG_ZC.
    pub(crate) fn bind(addr: SocketAddr, zerocopy: bool) -> io::Result<Self> {
        let cfg = EngineConfig {
            bufs: 0,
            reserve: RX_SLOTS,
            payload: 65_536,
            ops: OPS,
            zerocopy,
            gso: true,
            gro: true,
            sndbuf: SOCKET_BUFFER,
            rcvbuf: SOCKET_BUFFER,
        };
        let mut eng = Engine::new(addr, cfg)?;
        let local = eng.socket().local_addr()?;
        let (waker_sock, waker_addr) = Waker::socket_for(local)?;
        eng.waker_addr = Some(waker_addr);
        Ok(Uring {
            eng,
            held: Held(Vec::with_capacity(RX_SLOTS)),
            metas: Vec::with_capacity(RX_BATCH),
            waker_sock,
            waker_addr,
            zerocopy,
        })
    }
}

impl Datapath for Uring {
    fn name(&self) -> &'static str {
        if self.zerocopy {
            "uring-zc"
        } else {
            "uring"
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.eng.socket().local_addr()
    }
    fn receive_queue_bytes(&self) -> Option<usize> {
        crate::datapath::receive_queue_of(self.eng.socket())
    }

    fn max_segments(&self) -> usize {
        if self.eng.gso() {
            MAX_SEGS
        } else {
            1
        }
    }

    fn send(&mut self, buf: &[u8], txs: &[Tx]) -> io::Result<usize> {
        self.eng.send_borrowed(buf, txs)
    }

    fn recv(&mut self, timeout: Option<Duration>) -> io::Result<RxBatch<'_>> {
        // The previous batch has been consumed: its slots go back to the kernel.
        for b in self.held.0.drain(..) {
            self.eng.provide(b);
        }
        self.metas.clear();
        self.eng.flush()?;
        self.eng.reap()?;
        if self.eng.recv_done.is_empty() && !self.eng.woken && timeout != Some(Duration::ZERO) {
            self.eng.wait(timeout)?;
            self.eng.reap()?;
        }
        self.eng.woken = false;
        while let Some(r) = self.eng.recv_done.front() {
            let len = r.buf.len();
            let seg = if r.segment_size > 0 {
                r.segment_size as usize
            } else {
                len.max(1)
            };
            let count = len.div_ceil(seg).max(1);
            if !self.metas.is_empty() && self.metas.len() + count > RX_BATCH {
                break;
            }
            let Some(r) = self.eng.recv_done.pop_front() else {
                break;
            };
            let part = self.held.0.len();
            for k in 0..count {
                let off = k * seg;
                self.metas.push(RxMeta {
                    src: r.src,
                    part,
                    offset: off,
                    len: seg.min(len - off.min(len)).min(MAX_UDP_PAYLOAD),
                    at: None,
                    tos: 0,
                });
            }
            self.held.0.push(r.buf);
        }
        // Each datagram is read through the buffer handle of its own slot: the kernel gave
        // those back and gets them again only at the next `recv`, after the batch is gone.
        Ok(RxBatch::with_parts(&self.held, &self.metas))
    }

    fn waker(&self) -> io::Result<Waker> {
        let local = self.eng.socket().local_addr()?;
        let target = SocketAddr::new(self.waker_addr.ip(), local.port());
        Ok(Waker::datagram(self.waker_sock.clone(), target))
    }

    fn stats(&self) -> DatapathStats {
        let s = &self.eng.stats;
        DatapathStats {
            sent: s.sent,
            received: s.received,
            syscalls: s.enters,
            gso_sends: s.gso_sends,
            gro_batches: s.gro_batches,
            send_would_block: s.send_would_block,
            send_nobufs: s.send_nobufs,
            send_errors: s.send_errors,
            recv_errors: s.recv_errors + s.recv_nobufs,
            zerocopy_completed: s.zc_completed,
            zerocopy_copied: s.zc_copied,
            degraded: s.degraded,
            ..DatapathStats::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether io_uring runs here; in CI (CI=true) it must.
    fn usable() -> bool {
        let c = super::super::probe();
        let ok = c.available && c.recvmsg_multishot && c.buf_ring;
        if !ok {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "io_uring unavailable in CI: {c:?}"
            );
            eprintln!("skipping an io_uring test: not available here ({c:?})");
        }
        ok
    }

    fn recv_n(rx: &mut Uring, n: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let end = std::time::Instant::now() + Duration::from_secs(2);
        while got.len() < n && std::time::Instant::now() < end {
            let b = rx.recv(Some(Duration::from_millis(50))).unwrap();
            got.extend(b.iter().map(|(_, d)| d.to_vec()));
        }
        got
    }

    #[test]
    fn gso_runs_round_trip_and_gro_split() {
        if !usable() {
            return;
        }
        for zc in [false, true] {
            let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
            let mut rx = Uring::bind(lo, false).unwrap();
            let mut tx = Uring::bind(lo, zc).unwrap();
            assert_eq!(tx.name(), if zc { "uring-zc" } else { "uring" });
            assert_eq!(tx.max_segments(), 64);
            let dst = rx.local_addr().unwrap();
            let buf: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
            let txs = [
                Tx {
                    dst,
                    offset: 0,
                    len: 10_000,
                    segment_size: 1000,
                },
                Tx::single(dst, 10_000, 500),
                Tx {
                    dst,
                    offset: 10_500,
                    len: 2500,
                    segment_size: 1000,
                },
            ];
            assert_eq!(tx.send(&buf, &txs).unwrap(), 3);
            let got = recv_n(&mut rx, 14);
            let want: Vec<Vec<u8>> = txs
                .iter()
                .flat_map(|t| t.segments().map(|r| buf[r].to_vec()).collect::<Vec<_>>())
                .collect();
            assert_eq!(got, want);
            let (s, r) = (tx.stats(), rx.stats());
            assert_eq!(s.sent, 14);
            assert_eq!(s.gso_sends, 2);
            assert!(r.gro_batches >= 1, "{r:?}");
            if zc {
                assert_eq!(s.zerocopy_completed, 3);
            }
        }
    }

    #[test]
    fn waker_interrupts_recv() {
        if !usable() {
            return;
        }
        let mut rx = Uring::bind("127.0.0.1:0".parse().unwrap(), false).unwrap();
        let w = rx.waker().unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            w.wake();
        });
        let start = std::time::Instant::now();
        let b = rx.recv(Some(Duration::from_secs(2))).unwrap();
        assert!(b.is_empty());
        assert!(start.elapsed() < Duration::from_secs(1));
        t.join().unwrap();
        assert_eq!(rx.stats().received, 0);
    }
}
