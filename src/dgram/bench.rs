//! ttcp-style loops on an [`AsyncSocket`]: a sender of N same-size datagrams and a receiver
//! that counts. Both keep the pool busy and allocate nothing per datagram.

use super::{AsyncSocket, OpKind};
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// What a receive loop got.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecvCount {
    /// Datagrams (GRO segments counted one by one).
    pub datagrams: u64,
    /// Payload bytes.
    pub bytes: u64,
}

impl AsyncSocket {
    /// Sends `count` datagrams of `len` bytes to `dst` (each starts with its sequence number,
    /// little-endian u64, when `len >= 8`), reusing pool buffers as their sends complete, and
    /// waits until all are done. Returns how many were sent without error.
    pub fn send_many(&mut self, dst: SocketAddr, len: usize, count: u64) -> io::Result<u64> {
        let before = self.stats.sent_datagrams;
        let mut seq = 0u64;
        while seq < count {
            match self.claim() {
                Some(mut buf) => {
                    if len >= 8 {
                        buf.as_mut()[..8].copy_from_slice(&seq.to_le_bytes());
                    }
                    self.commit(buf, len, dst);
                    seq += 1;
                }
                None => {
                    // Completions drop their buffers back into the pool.
                    if self.poll_completions(drop)? == 0 {
                        self.wait_completions(Duration::from_millis(100), drop)?;
                    }
                }
            }
        }
        self.drain_sends(Duration::from_secs(10))?;
        Ok(self.stats.sent_datagrams - before)
    }

    /// Waits until every posted send has completed (or `timeout`), dropping the
    /// completions' buffers back into the pool; receive completions are dropped too.
    pub fn drain_sends(&mut self, timeout: Duration) -> io::Result<()> {
        let end = Instant::now() + timeout;
        self.flush()?;
        while self.stats.completed_sends + self.pending_send_completions() < self.stats.posted_sends
        {
            if Instant::now() >= end {
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.wait_completions(Duration::from_millis(50), drop)?;
        }
        self.poll_completions(drop)?;
        Ok(())
    }

    fn pending_send_completions(&self) -> u64 {
        self.completions
            .iter()
            .filter(|c| c.kind == OpKind::Send)
            .count() as u64
    }

    /// Keeps `depth` receives posted and counts what arrives, until `idle` passes with
    /// nothing new (after the first datagram) or `limit` passes in total.
    pub fn recv_count(
        &mut self,
        depth: usize,
        idle: Duration,
        limit: Duration,
    ) -> io::Result<RecvCount> {
        let start = Instant::now();
        let mut n = RecvCount::default();
        for _ in 0..depth {
            match self.claim() {
                Some(b) => {
                    self.post_recv(b);
                }
                None => break,
            }
        }
        let mut last = Instant::now();
        let mut repost = 0usize;
        loop {
            let got = self.wait_completions(Duration::from_millis(20), |c| {
                if c.kind == OpKind::Recv {
                    n.datagrams += c.segments as u64;
                    n.bytes += c.len as u64;
                    repost += 1;
                }
            })?;
            for _ in 0..repost {
                if let Some(b) = self.claim() {
                    self.post_recv(b);
                }
            }
            repost = 0;
            let now = Instant::now();
            if got > 0 {
                last = now;
            }
            if now - start >= limit || (n.datagrams > 0 && now - last >= idle) {
                return Ok(n);
            }
        }
    }
}
