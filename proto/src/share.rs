//! Shares of a socket's receive queue: the flow windows an endpoint advertises to its
//! connections stay, together, within what the kernel queues for its socket.
//!
//! Each connection's window is bounded by its own buffer, which is sized for one
//! connection's bandwidth-delay product. A thousand connections each allowed that much (a
//! few 64 KiB datagrams over loopback each) overran the socket's queue: the kernel dropped a
//! third of the datagrams, and their repair and the loss signals cost three quarters of the
//! throughput. The endpoint counts the connections that received data lately and tells
//! each its share, which it advertises when that is less than its free buffer.
//!
//! Calling protocol: [`RxShare::on_data`] for every data packet a connection receives; it
//! returns the window, in packets, to advertise at most.

use std::time::{Duration, Instant};

/// How long a connection counts as receiving after its last data packet (two windows of
/// this length are counted, the current one and the last). Longer than a retransmission
/// timeout (300 ms): with 100 ms, a connection whose packets the kernel dropped stopped
/// counting while it waited for its timeout, the others' shares grew (1,000 connections over
/// loopback: windows of 3 packets where the queue holds 2 each), the queue overflowed more,
/// and more connections waited on timeouts, a few dozen of them starved (Jain 0.88-0.93).
/// With 500 ms: Jain 0.992-0.996, timeouts in 0-9 connections a run.
pub const ACTIVE_WINDOW: Duration = Duration::from_millis(500);
/// The kernel's bookkeeping per queued datagram, bytes (its `sk_buff`, about), added to the
/// payload when turning the queue's bytes into packets.
pub const DATAGRAM_OVERHEAD: usize = 1024;
/// The smallest share, packets: a connection needs two to keep one in flight while the
/// other is acknowledged.
pub const MIN_SHARE_PKTS: u32 = 2;

/// The receiving connections of an endpoint and the socket queue they share.
#[derive(Debug, Clone)]
pub struct RxShare {
    /// The socket's receive queue, bytes (`None`: unknown, no sharing).
    queue: Option<usize>,
    epoch: u32,
    epoch_start: Option<Instant>,
    active: usize,
    active_before: usize,
}

impl RxShare {
    /// Shares of a queue of `queue` bytes.
    pub fn new(queue: Option<usize>) -> Self {
        RxShare {
            queue,
            epoch: 1,
            epoch_start: None,
            active: 0,
            active_before: 0,
        }
    }

    /// A data packet of `slot` bytes at most arrived at `now` for a connection whose
    /// `seen` epoch this updates. Returns the most packets it should advertise.
    pub fn on_data(&mut self, now: Instant, seen: &mut u32, slot: usize) -> u32 {
        let Some(queue) = self.queue else {
            return u32::MAX;
        };
        if self
            .epoch_start
            .is_none_or(|t| now.saturating_duration_since(t) >= ACTIVE_WINDOW)
        {
            self.active_before = self.active;
            self.active = 0;
            self.epoch = self.epoch.wrapping_add(1).max(1);
            self.epoch_start = Some(now);
        }
        if *seen != self.epoch {
            *seen = self.epoch;
            self.active += 1;
        }
        let receivers = self.active.max(self.active_before).max(1);
        let pkts = queue / (slot + DATAGRAM_OVERHEAD) / receivers;
        (pkts.min(u32::MAX as usize) as u32).max(MIN_SHARE_PKTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_divide_the_queue_among_recent_receivers() {
        let t0 = Instant::now();
        let mut s = RxShare::new(Some(100 * (1000 + DATAGRAM_OVERHEAD)));
        let mut seen = [0u32; 4];
        assert_eq!(s.on_data(t0, &mut seen[0], 1000), 100);
        assert_eq!(s.on_data(t0, &mut seen[1], 1000), 50);
        assert_eq!(s.on_data(t0, &mut seen[0], 1000), 50);
        // A window later both still count (the last window's), and a third joins.
        let t1 = t0 + ACTIVE_WINDOW;
        assert_eq!(s.on_data(t1, &mut seen[2], 1000), 50);
        assert_eq!(s.on_data(t1, &mut seen[3], 1000), 50);
        assert_eq!(s.on_data(t1, &mut seen[0], 1000), 33);
        // Two windows on, only the one that kept receiving counts.
        let t2 = t1 + ACTIVE_WINDOW;
        let t3 = t2 + ACTIVE_WINDOW;
        s.on_data(t2, &mut seen[0], 1000);
        assert_eq!(s.on_data(t3, &mut seen[0], 1000), 100);
        // Never below two packets; unknown queue, no bound.
        let mut tiny = RxShare::new(Some(1));
        assert_eq!(tiny.on_data(t0, &mut seen[0], 1000), MIN_SHARE_PKTS);
        let mut none = RxShare::new(None);
        assert_eq!(none.on_data(t0, &mut seen[0], 1000), u32::MAX);
    }
}
