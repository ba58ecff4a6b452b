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
//! The queue they share is also kept short while the endpoint cannot read as fast as data
//! arrive. The datagrams then wait in the socket (its kernel receive timestamps tell how
//! long), and whatever waits beyond a few milliseconds only makes every read slower: 30
//! streams over loopback kept 40-70 MB queued (18 ms), so the kernel copied each datagram
//! out of memory rather than cache (25 Gbit/s in all with 10 streams, 17-18 with 30). While the
//! shortest wait over an interval of [`BUDGET_INTERVAL`] stays above [`QUEUE_TARGET`], the
//! bytes the windows add up to (the budget) are cut to what the endpoint read in [`CUT_TO`]
//! (at least [`MIN_BUDGET`]); an interval in which a datagram waited less grows them by
//! [`GROWTH`], up to the whole queue. An endpoint that keeps up (on a long path the data wait
//! in the network, not in the socket) keeps the whole queue, and so does one whose datapath
//! gives no receive timestamps (every wait is 0).
//!
//! Calling protocol: [`RxShare::on_data`] for every data packet a connection receives, with
//! how long it waited to be read; it returns the window, in packets, to advertise at most.

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
/// A wait in the socket's queue that every datagram of a budget interval exceeds means a
/// standing queue (reading in batches of up to a few megabytes takes about a millisecond
/// over loopback).
pub const QUEUE_TARGET: Duration = Duration::from_millis(2);
/// How often the budget is reconsidered.
pub const BUDGET_INTERVAL: Duration = Duration::from_millis(50);
/// A standing queue cuts the budget to what the endpoint reads in this long: one ACK interval.
/// Windows are advertised with full ACKs, one per connection every 10 ms, so less than that
/// in flight would leave the reader idle between them (over loopback, 2 and 5 ms measured
/// the same within noise).
pub const CUT_TO: Duration = Duration::from_millis(10);
/// A budget interval without a standing queue grows the budget by this fraction. Slowly:
/// after a cut the queue drains, and BBR's flows build it up again only once the budget has
/// grown well past the cut. With an eighth the budget was back at the whole queue within a
/// second and the queue stood again (30 streams over loopback, one run each: 19.3 Gbit/s,
/// against 20.8 with 1/32, with which the budget takes five seconds from 4 MB to 128 MB).
pub const GROWTH: f64 = 1.0 / 32.0;
/// The budget never shrinks below this, bytes.
pub const MIN_BUDGET: usize = 4 << 20;
/// The windows add up to this share of the budget. The rest is headroom for what the
/// windows do not count: retransmissions and probes, control packets, and the packets
/// already sent under a larger share when more connections start receiving. Windows that
/// added up to the whole queue (1,000 streams over loopback, two 64 KiB packets each in a
/// 128 MiB queue) had the kernel drop about 3,000 datagrams a second, a tenth of them
/// (2,054-14,075 a run of 4 s); repaired round trips later, the drops left connections with
/// few, stale samples, and some of them starved (Jain 0.62-0.87 in six runs of ten). With a
/// quarter kept free: no drops once the connections are going, Jain 0.999-1.0.
pub const SHARE_OF_BUDGET: f64 = 0.75;
/// The smallest share, packets. Two keep a connection's packets flowing while one is
/// acknowledged, but where the queue cannot hold two for every receiver, each gets one:
/// windows of two that the queue cannot hold only turn into drops, and one connection
/// waiting for its acknowledgement leaves the reader the others' packets.
pub const MIN_SHARE_PKTS: u32 = 1;

/// The receiving connections of an endpoint and the socket queue they share.
#[derive(Debug, Clone)]
pub struct RxShare {
    /// The socket's receive queue, bytes (`None`: unknown, no sharing).
    queue: Option<usize>,
    epoch: u32,
    epoch_start: Option<Instant>,
    active: usize,
    active_before: usize,
    /// What the shares add up to, bytes: the queue, less while it stands.
    budget: usize,
    /// The start of the current budget interval, and the shortest wait seen in it.
    interval_start: Option<Instant>,
    min_wait: Option<Duration>,
    /// Bytes read in the current interval (packets counted at their slot size).
    read_bytes: usize,
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
            budget: queue.unwrap_or(0),
            interval_start: None,
            min_wait: None,
            read_bytes: 0,
        }
    }

    /// A data packet of `slot` bytes at most, read at `now` after waiting `wait` in the
    /// socket, for a connection whose `seen` epoch this updates. Returns the most packets it
    /// should advertise.
    pub fn on_data(&mut self, now: Instant, wait: Duration, seen: &mut u32, slot: usize) -> u32 {
        let Some(queue) = self.queue else {
            return u32::MAX;
        };
        match self.interval_start {
            None => self.interval_start = Some(now),
            Some(t) if now.saturating_duration_since(t) >= BUDGET_INTERVAL => {
                self.reconsider_budget(queue, now.saturating_duration_since(t));
                self.interval_start = Some(now);
            }
            Some(_) => {}
        }
        self.min_wait = Some(self.min_wait.map_or(wait, |w| w.min(wait)));
        self.read_bytes = self.read_bytes.saturating_add(slot + DATAGRAM_OVERHEAD);
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
        self.share(slot, self.active.max(self.active_before))
    }

    /// One of `receivers` connections' share of the budget, packets of `slot` bytes.
    fn share(&self, slot: usize, receivers: usize) -> u32 {
        let shared = (self.budget as f64 * SHARE_OF_BUDGET) as usize;
        let pkts = shared / (slot + DATAGRAM_OVERHEAD) / receivers.max(1);
        (pkts.min(u32::MAX as usize) as u32).max(MIN_SHARE_PKTS)
    }

    /// The end of a budget interval of `elapsed`: cut the budget to what the endpoint read in
    /// [`CUT_TO`] if every datagram waited longer than [`QUEUE_TARGET`], grow it by
    /// [`GROWTH`] otherwise; leave it if a pause stretched the interval.
    fn reconsider_budget(&mut self, queue: usize, elapsed: Duration) {
        let floor = MIN_BUDGET.min(queue);
        // An interval that a pause in the data stretched tells nothing of the reading rate
        // (a burst, then ten quiet seconds, would read as a trickle and cut to the floor).
        let stale = elapsed > 2 * BUDGET_INTERVAL;
        let next = if stale {
            self.budget
        } else if self.min_wait.is_some_and(|w| w > QUEUE_TARGET) {
            let rate = self.read_bytes as f64 / elapsed.as_secs_f64().max(1e-6);
            ((rate * CUT_TO.as_secs_f64()) as usize).min(self.budget)
        } else {
            self.budget
                .saturating_add((self.budget as f64 * GROWTH) as usize)
        };
        self.budget = next.clamp(floor, queue);
        self.read_bytes = 0;
        self.min_wait = None;
    }

    /// The window for a connection that has received nothing yet, one of `conns` that may
    /// start to at any moment: its share were they all receiving. A thousand connections
    /// opened, then all sending at once, each with the window of its handshake (the whole
    /// receive buffer) and a first flight of 16 packets, poured 1 GB at a 128 MiB queue.
    pub fn idle_window(&self, slot: usize, conns: usize) -> u32 {
        if self.queue.is_none() {
            return u32::MAX;
        }
        self.share(slot, conns)
    }

    /// What the shares add up to now, bytes (`None`: no sharing).
    pub fn budget(&self) -> Option<usize> {
        self.queue.map(|_| self.budget)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_divide_the_queue_among_recent_receivers() {
        let t0 = Instant::now();
        // A queue whose shared part holds 100 packets of 1,000 bytes.
        let queue = (100.0 * (1000 + DATAGRAM_OVERHEAD) as f64 / SHARE_OF_BUDGET) as usize + 4;
        let mut s = RxShare::new(Some(queue));
        let mut seen = [0u32; 4];
        assert_eq!(s.on_data(t0, Duration::ZERO, &mut seen[0], 1000), 100);
        assert_eq!(s.on_data(t0, Duration::ZERO, &mut seen[1], 1000), 50);
        assert_eq!(s.on_data(t0, Duration::ZERO, &mut seen[0], 1000), 50);
        // A window later both still count (the last window's), and a third joins.
        let t1 = t0 + ACTIVE_WINDOW;
        assert_eq!(s.on_data(t1, Duration::ZERO, &mut seen[2], 1000), 50);
        assert_eq!(s.on_data(t1, Duration::ZERO, &mut seen[3], 1000), 50);
        assert_eq!(s.on_data(t1, Duration::ZERO, &mut seen[0], 1000), 33);
        // Two windows on, only the one that kept receiving counts.
        let t2 = t1 + ACTIVE_WINDOW;
        let t3 = t2 + ACTIVE_WINDOW;
        s.on_data(t2, Duration::ZERO, &mut seen[0], 1000);
        assert_eq!(s.on_data(t3, Duration::ZERO, &mut seen[0], 1000), 100);
        // Never below one packet; unknown queue, no bound.
        let mut tiny = RxShare::new(Some(1));
        assert_eq!(
            tiny.on_data(t0, Duration::ZERO, &mut seen[0], 1000),
            MIN_SHARE_PKTS
        );
        let mut none = RxShare::new(None);
        assert_eq!(
            none.on_data(t0, Duration::ZERO, &mut seen[0], 1000),
            u32::MAX
        );
    }

    /// A thousand streams of 64 KiB datagrams in a 128 MiB queue (the kernel's count for the
    /// 64 MiB asked): their windows leave the kernel a quarter of it, with one packet each
    /// where two do not fit; and where the queue holds less than one each, one each.
    #[test]
    fn windows_leave_the_queue_headroom() {
        let (queue, slot) = (128 << 20, 65_000);
        for n in [10usize, 100, 1000, 1500] {
            let mut s = RxShare::new(Some(queue));
            let t0 = Instant::now();
            let mut seen = vec![0u32; n];
            for e in &mut seen {
                s.on_data(t0, Duration::ZERO, e, slot);
            }
            let w = s.on_data(t0, Duration::ZERO, &mut seen[0], slot) as usize;
            let held = n * w * (slot + DATAGRAM_OVERHEAD);
            assert!(w >= 1, "{n} receivers: window {w}");
            if n * (slot + DATAGRAM_OVERHEAD) <= queue * 3 / 4 {
                assert!(
                    held * 4 <= queue * 3,
                    "{n} receivers: {w} packets each, {held} B"
                );
            } else {
                assert_eq!(w, 1, "{n} receivers");
            }
        }
    }

    /// Feeds `pkts` packets of `slot` bytes to one connection, evenly over one budget interval
    /// from `t`, each having waited `wait`; returns the last share and the next interval's
    /// start. An interval is judged when the first packet of the next arrives.
    fn interval(
        s: &mut RxShare,
        t: Instant,
        wait: Duration,
        pkts: u32,
        slot: usize,
    ) -> (u32, Instant) {
        // One connection throughout: its epoch is the current one.
        let mut seen = s.epoch;
        let step = BUDGET_INTERVAL / pkts;
        let mut share = 0;
        for k in 0..pkts {
            share = s.on_data(t + step * k, wait, &mut seen, slot);
        }
        (share, t + BUDGET_INTERVAL)
    }

    #[test]
    fn a_standing_queue_cuts_the_budget_and_a_drained_one_grows_it_back() {
        let queue = 128 << 20;
        let slot = 64 * 1024 - DATAGRAM_OVERHEAD;
        // The window of one receiver sharing `bytes`.
        let pkts =
            |bytes: usize| (bytes as f64 * SHARE_OF_BUDGET) as usize / (slot + DATAGRAM_OVERHEAD);
        let ms = Duration::from_millis;
        let mut s = RxShare::new(Some(queue));
        let t = Instant::now();
        // Reading 2,000 packets of 64 KiB a second (130 MB/s), each having waited 1 ms: no
        // standing queue, the whole queue is shared.
        let (share, t) = interval(&mut s, t, ms(1), 100, slot);
        assert_eq!(share as usize, pkts(queue));
        let (share, t) = interval(&mut s, t, ms(1), 100, slot);
        assert_eq!((share as usize, s.budget()), (pkts(queue), Some(queue)));
        // Every packet of an interval waited 5 ms: a cut to 10 ms of reading (20 packets,
        // 1.3 MB), but not below MIN_BUDGET (64 packets).
        let (_, t) = interval(&mut s, t, ms(5), 100, slot);
        let (share, t) = interval(&mut s, t, ms(5), 1000, slot);
        assert_eq!(s.budget(), Some(MIN_BUDGET));
        assert_eq!(share as usize, pkts(MIN_BUDGET));
        // Reading 20,000 a second (1.3 GB/s) at a standing queue: 10 ms of it is 200 packets,
        // but a cut never raises the budget.
        let (_, t) = interval(&mut s, t, ms(5), 1, slot);
        assert_eq!(s.budget(), Some(MIN_BUDGET));
        // An interval whose packets waited 1 ms: no standing queue, grow by 1/32.
        let (_, t) = interval(&mut s, t, ms(1), 100, slot);
        let (_, mut t) = interval(&mut s, t, ms(5), 100, slot);
        assert_eq!(s.budget(), Some(MIN_BUDGET + MIN_BUDGET / 32));
        for _ in 0..200 {
            (_, t) = interval(&mut s, t, Duration::ZERO, 10, slot);
        }
        assert_eq!(
            s.budget(),
            Some(queue),
            "grows back to the whole queue, no further"
        );
        // The cut of a standing queue at 1.3 GB/s is 10 ms of it, 13 MB.
        let (_, t) = interval(&mut s, t, ms(5), 1000, slot);
        let (share, t) = interval(&mut s, t, ms(5), 1000, slot);
        assert_eq!(
            share as usize,
            pkts(1000 * 20 * (slot + DATAGRAM_OVERHEAD) / 100)
        );
        // A standing queue, then a pause of ten seconds: the stretched interval is not
        // judged (read as a trickle, it would have cut to the floor).
        let (_, t) = interval(&mut s, t, ms(5), 1000, slot);
        let (share, t) = interval(&mut s, t + Duration::from_secs(10), ms(5), 1000, slot);
        assert_eq!(
            share as usize,
            pkts(1000 * 20 * (slot + DATAGRAM_OVERHEAD) / 100)
        );
        // A queue smaller than MIN_BUDGET is its own floor.
        let mut small = RxShare::new(Some(1 << 20));
        let (_, t) = interval(&mut small, t, ms(5), 10, slot);
        interval(&mut small, t, ms(5), 10, slot);
        assert_eq!(small.budget(), Some(1 << 20));
    }
}
