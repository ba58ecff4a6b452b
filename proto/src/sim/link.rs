//! One direction of a simulated path.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Gilbert–Elliott two-state loss: a good and a bad state with their own loss ratios.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    /// Probability per packet of moving from good to bad.
    pub p_good_to_bad: f64,
    /// Probability per packet of moving from bad to good.
    pub p_bad_to_good: f64,
    /// Loss ratio in the good state.
    pub loss_good: f64,
    /// Loss ratio in the bad state.
    pub loss_bad: f64,
}

/// How one direction of the path behaves. `Default` is a perfect link: no delay, no loss, no limit.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Uniform jitter added to the delay, `0..=jitter`. Jitter alone never reorders packets
    /// unless `reorder` is set (a link keeps order; reordering is its own knob).
    pub jitter: Duration,
    /// Random loss ratio, 0.0..=1.0.
    pub loss: f64,
    /// Bursty loss; when set it replaces `loss`.
    pub burst: Option<GilbertElliott>,
    /// Probability that a packet is held back and delivered after later ones.
    pub reorder: f64,
    /// Probability that a packet is delivered twice.
    pub dup: f64,
    /// Bottleneck rate in bits per second (None = unlimited).
    pub rate_bps: Option<u64>,
    /// Drop-tail queue in bytes in front of the bottleneck.
    pub queue_bytes: usize,
    /// Datagrams larger than this are dropped.
    pub mtu: usize,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            burst: None,
            reorder: 0.0,
            dup: 0.0,
            rate_bps: None,
            queue_bytes: 4 << 20,
            mtu: 65_535,
        }
    }
}

/// Counters of what the link did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams offered.
    pub offered: u64,
    /// Datagrams delivered (duplicates included).
    pub delivered: u64,
    /// Bytes delivered.
    pub delivered_bytes: u64,
    /// Dropped by random or bursty loss.
    pub lost: u64,
    /// Dropped because the queue was full.
    pub queue_drops: u64,
    /// Dropped because larger than the MTU.
    pub mtu_drops: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Packets delivered out of order.
    pub reordered: u64,
}

/// Hard floor of the in-flight byte bound; the bound is `max(4 * queue_bytes, this)`.
const MIN_IN_FLIGHT_CAP: usize = 64 << 20;
/// Smallest capacity given to a fresh datagram buffer, so a recycled buffer rarely has to grow.
const MIN_BUFFER: usize = 1500;
/// Extra hold-back of a reordered packet on top of `delay / 2`.
const REORDER_EXTRA: Duration = Duration::from_millis(1);

/// A datagram waiting for its delivery time.
#[derive(Debug)]
struct Pending {
    /// When it becomes deliverable.
    at: Instant,
    /// Insertion counter: breaks ties in send order, and orders originals by send order.
    seq: u64,
    /// An extra copy made by duplication (never counted as reordered).
    dup: bool,
    /// The payload; returned to the free list once delivered.
    buf: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// One direction of a simulated path. Steady state allocates nothing: buffers are recycled.
///
/// Per offered datagram, in this order:
/// 1. it is counted in `offered`, and dropped (`mtu_drops`) if longer than `mtu`;
/// 2. the loss decision is drawn: with `burst` set, the Gilbert–Elliott chain first makes its
///    state transition, then the packet is lost with that state's ratio; otherwise it is lost
///    with probability `loss` (`lost`). Lost packets use no bottleneck capacity;
/// 3. with `rate_bps` set, it joins a drop-tail queue in front of a serializing bottleneck:
///    if the link is busy and the bytes accepted but not fully serialized at `now` plus this
///    datagram exceed `queue_bytes`, it is dropped (`queue_drops`). An idle link always takes
///    the datagram. Serialization starts at `max(now, busy_until)` and lasts `len * 8 / rate`
///    seconds, computed in integer nanoseconds with the remainder carried to the next packet,
///    so a saturated link delivers exactly `rate` over time;
/// 4. independently of the rate, the bytes in flight are bounded by
///    `max(4 * queue_bytes, 64 MiB)`; overflow counts as `queue_drops`;
/// 5. delivery time = serialization end (or `now`) + `delay` + uniform `0..=jitter`, raised to
///    at least the previous in-order delivery time so jitter alone never reorders;
/// 6. with probability `reorder` the datagram is held back an extra `delay / 2 + 1 ms` and does
///    not raise the in-order floor, so later datagrams may overtake it. It is counted in
///    `reordered` only if it is actually delivered after a later-sent datagram;
/// 7. with probability `dup` a copy is delivered right after the original, at the original's
///    time plus uniform `0..=jitter` (counted in `duplicated` when delivered).
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    rng: SmallRng,
    stats: LinkStats,
    /// Gilbert–Elliott chain currently in the bad state.
    ge_bad: bool,
    /// When the bottleneck finishes serializing the last accepted datagram.
    busy_until: Option<Instant>,
    /// Remainder (bit·ns numerator modulo the rate) carried between serializations.
    ser_carry: u128,
    /// Accepted datagrams not yet fully serialized: (serialization end, length).
    queue: VecDeque<(Instant, usize)>,
    /// Sum of the lengths in `queue`.
    queued_bytes: usize,
    /// Datagrams waiting for delivery, earliest first.
    pending: BinaryHeap<Reverse<Pending>>,
    /// Bytes in `pending`.
    in_flight_bytes: usize,
    /// The latest delivery time given to an in-order datagram.
    last_delivery: Option<Instant>,
    /// Highest insertion counter of an original datagram delivered so far.
    max_delivered_seq: Option<u64>,
    /// Next insertion counter.
    next_seq: u64,
    /// Recycled buffers.
    free: Vec<Vec<u8>>,
    /// Buffers owned by the link (free or in flight).
    pool: usize,
    /// Times the link allocated or grew storage.
    allocations: u64,
}

impl Link {
    /// A link with the given behaviour; every random choice comes from `seed`.
    pub fn new(config: LinkConfig, seed: u64) -> Self {
        Link {
            config,
            rng: SmallRng::seed_from_u64(seed),
            stats: LinkStats::default(),
            ge_bad: false,
            busy_until: None,
            ser_carry: 0,
            queue: VecDeque::new(),
            queued_bytes: 0,
            pending: BinaryHeap::new(),
            in_flight_bytes: 0,
            last_delivery: None,
            max_delivered_seq: None,
            next_seq: 0,
            free: Vec::new(),
            pool: 0,
            allocations: 0,
        }
    }

    /// Offers a datagram at time `now`; it may be dropped, delayed, duplicated or reordered.
    pub fn send(&mut self, now: Instant, datagram: &[u8]) {
        self.stats.offered += 1;
        let len = datagram.len();
        if len > self.config.mtu {
            self.stats.mtu_drops += 1;
            return;
        }
        if self.draw_loss() {
            self.stats.lost += 1;
            return;
        }
        if self.in_flight_bytes.saturating_add(len) > self.in_flight_cap() {
            self.stats.queue_drops += 1;
            return;
        }
        let departs = match self.config.rate_bps {
            None => now,
            Some(rate) => match self.serialize(now, len, rate) {
                Some(end) => end,
                None => {
                    self.stats.queue_drops += 1;
                    return;
                }
            },
        };

        let mut at = departs + self.config.delay + self.draw_jitter();
        if let Some(last) = self.last_delivery {
            at = at.max(last);
        }
        if self.chance(self.config.reorder) {
            at += self.config.delay / 2 + REORDER_EXTRA;
        } else {
            self.last_delivery = Some(at);
        }
        self.push(at, false, datagram);

        if self.chance(self.config.dup) {
            let copy_at = at + self.draw_jitter();
            if self.in_flight_bytes.saturating_add(len) <= self.in_flight_cap() {
                self.push(copy_at, true, datagram);
            }
        }
    }

    /// Delivers the next datagram due at or before `now` into `out`; returns its length.
    /// A datagram longer than `out` is truncated to fit (as a UDP socket would).
    pub fn poll_deliver(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        if self.pending.peek()?.0.at > now {
            return None;
        }
        let Reverse(p) = self.pending.pop()?;
        self.in_flight_bytes -= p.buf.len();
        let n = p.buf.len().min(out.len());
        out[..n].copy_from_slice(&p.buf[..n]);
        self.stats.delivered += 1;
        self.stats.delivered_bytes += n as u64;
        if p.dup {
            self.stats.duplicated += 1;
        } else {
            match self.max_delivered_seq {
                Some(max) if p.seq < max => self.stats.reordered += 1,
                _ => self.max_delivered_seq = Some(p.seq),
            }
        }
        // Never grows: its capacity follows the pool (see `push`).
        self.free.push(p.buf);
        Some(n)
    }

    /// When the next datagram becomes deliverable.
    pub fn next_delivery(&self) -> Option<Instant> {
        self.pending.peek().map(|p| p.0.at)
    }

    /// Datagrams queued or in flight.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Counters so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// Sets the counters back to zero (the link's state, queue and RNG are kept).
    pub fn reset_stats(&mut self) {
        self.stats = LinkStats::default();
    }

    /// The configuration.
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Changes the behaviour from now on; datagrams already in flight keep their schedule.
    pub fn set_config(&mut self, config: LinkConfig) {
        if config.burst.is_none() {
            self.ge_bad = false;
        }
        self.config = config;
    }

    /// Datagram buffers the link owns (recycled or in flight). Stops growing once the link
    /// has seen its peak number of datagrams in flight.
    pub fn pool_len(&self) -> usize {
        self.pool
    }

    /// How many times the link allocated or grew storage (buffers, free list, queues).
    /// Constant in steady state.
    pub fn allocations(&self) -> u64 {
        self.allocations
    }

    fn in_flight_cap(&self) -> usize {
        self.config
            .queue_bytes
            .saturating_mul(4)
            .max(MIN_IN_FLIGHT_CAP)
    }

    /// A uniform draw in `[0, 1)` compared with `p`; no draw when `p <= 0`.
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen::<f64>() < p
    }

    fn draw_loss(&mut self) -> bool {
        match self.config.burst {
            Some(ge) => {
                let flip = if self.ge_bad {
                    ge.p_bad_to_good
                } else {
                    ge.p_good_to_bad
                };
                if self.chance(flip) {
                    self.ge_bad = !self.ge_bad;
                }
                let ratio = if self.ge_bad {
                    ge.loss_bad
                } else {
                    ge.loss_good
                };
                self.chance(ratio)
            }
            None => self.chance(self.config.loss),
        }
    }

    fn draw_jitter(&mut self) -> Duration {
        let max = u64::try_from(self.config.jitter.as_nanos()).unwrap_or(u64::MAX);
        if max == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.rng.gen_range(0..=max))
        }
    }

    /// Queues `len` bytes on the bottleneck; returns when their serialization ends, or `None`
    /// if the drop-tail queue is full.
    fn serialize(&mut self, now: Instant, len: usize, rate_bps: u64) -> Option<Instant> {
        while let Some(&(end, l)) = self.queue.front() {
            if end > now {
                break;
            }
            self.queue.pop_front();
            self.queued_bytes -= l;
        }
        if self.queued_bytes > 0 && self.queued_bytes + len > self.config.queue_bytes {
            return None;
        }
        let start = match self.busy_until {
            Some(busy) if busy >= now => busy,
            _ => {
                // Idle link: a fresh start owes nothing to earlier packets.
                self.ser_carry = 0;
                now
            }
        };
        let rate = u128::from(rate_bps.max(1));
        let num = len as u128 * 8 * 1_000_000_000 + self.ser_carry;
        let ns = u64::try_from(num / rate).unwrap_or(u64::MAX);
        self.ser_carry = num % rate;
        let end = start + Duration::from_nanos(ns);
        self.busy_until = Some(end);
        let cap = self.queue.capacity();
        self.queue.push_back((end, len));
        if self.queue.capacity() != cap {
            self.allocations += 1;
        }
        self.queued_bytes += len;
        Some(end)
    }

    fn push(&mut self, at: Instant, dup: bool, datagram: &[u8]) {
        let mut buf = match self.free.pop() {
            Some(b) => b,
            None => {
                self.pool += 1;
                self.allocations += 1;
                // The free list never holds more than the pool: size it now, not on delivery.
                if self.free.capacity() < self.pool {
                    self.free.reserve(self.pool);
                }
                // Queued datagrams are a subset of those in flight, plus the one being sent.
                if self.config.rate_bps.is_some() && self.queue.capacity() <= self.pool {
                    self.queue.reserve(self.pool + 1 - self.queue.len());
                }
                Vec::with_capacity(datagram.len().max(MIN_BUFFER))
            }
        };
        buf.clear();
        if buf.capacity() < datagram.len() {
            self.allocations += 1;
        }
        buf.extend_from_slice(datagram);
        self.in_flight_bytes += datagram.len();
        let seq = self.next_seq;
        self.next_seq += 1;
        let cap = self.pending.capacity();
        self.pending.push(Reverse(Pending { at, seq, dup, buf }));
        if self.pending.capacity() != cap {
            self.allocations += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A delivered datagram: when it was handed out and what it carried.
    type Delivery = (Instant, Vec<u8>);

    fn payload(i: u32, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len.max(4)];
        v[..4].copy_from_slice(&i.to_be_bytes());
        v
    }

    fn id(d: &[u8]) -> u32 {
        u32::from_be_bytes([d[0], d[1], d[2], d[3]])
    }

    /// Delivers everything due at or before `until`, polling at each exact delivery time.
    fn drain(link: &mut Link, until: Instant, out: &mut Vec<Delivery>) {
        let mut buf = [0u8; 2048];
        while let Some(at) = link.next_delivery() {
            if at > until {
                break;
            }
            let n = link.poll_deliver(at, &mut buf).expect("due datagram");
            out.push((at, buf[..n].to_vec()));
        }
    }

    /// Sends `count` datagrams of `len` bytes every `interval`, then delivers everything.
    fn run(
        link: &mut Link,
        t0: Instant,
        count: u32,
        interval: Duration,
        len: usize,
    ) -> Vec<Delivery> {
        let mut out = Vec::new();
        for i in 0..count {
            let now = t0 + interval * i;
            drain(link, now, &mut out);
            link.send(now, &payload(i, len));
        }
        drain(link, t0 + Duration::from_secs(3600 * 24), &mut out);
        out
    }

    fn lossy(loss: f64) -> LinkConfig {
        LinkConfig {
            loss,
            ..LinkConfig::default()
        }
    }

    /// Asserts `x` is within `k` standard deviations of a binomial(n, p) mean.
    fn assert_binomial(x: u64, n: u64, p: f64, k: f64) {
        let mean = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (x as f64 - mean).abs() <= k * sd,
            "{x} not within {k} sd of {mean} (sd {sd})"
        );
    }

    #[test]
    fn perfect_link_delivers_everything_immediately_in_order() {
        let t0 = Instant::now();
        let mut link = Link::new(LinkConfig::default(), 1);
        let out = run(&mut link, t0, 1000, MS, 100);
        assert_eq!(out.len(), 1000);
        for (i, (at, d)) in out.iter().enumerate() {
            assert_eq!(id(d), i as u32);
            assert_eq!(*at, t0 + MS * i as u32);
        }
        let s = link.stats();
        assert_eq!(
            (s.offered, s.delivered, s.delivered_bytes),
            (1000, 1000, 100_000)
        );
        assert_eq!(link.in_flight(), 0);
        assert_eq!(link.next_delivery(), None);
    }

    fn messy() -> LinkConfig {
        LinkConfig {
            delay: 30 * MS,
            jitter: 10 * MS,
            loss: 0.05,
            reorder: 0.05,
            dup: 0.05,
            rate_bps: Some(20_000_000),
            queue_bytes: 30_000,
            ..LinkConfig::default()
        }
    }

    #[test]
    fn same_seed_same_deliveries_different_seed_different() {
        let t0 = Instant::now();
        let go = |seed| {
            let mut link = Link::new(messy(), seed);
            let out = run(&mut link, t0, 20_000, Duration::from_micros(300), 1000);
            (out, link.stats())
        };
        let (a, sa) = go(7);
        let (b, sb) = go(7);
        let (c, sc) = go(8);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        assert_ne!(a, c);
        assert_ne!(sa, sc);
        assert!(sa.lost > 0 && sa.queue_drops > 0 && sa.reordered > 0 && sa.duplicated > 0);
    }

    #[test]
    fn bernoulli_loss_within_statistical_bounds() {
        let t0 = Instant::now();
        for (p, seed) in [(0.01, 11), (0.05, 12), (0.2, 13)] {
            let mut link = Link::new(lossy(p), seed);
            let n = 100_000;
            let out = run(&mut link, t0, n, Duration::from_micros(10), 64);
            let s = link.stats();
            assert_eq!(s.offered, u64::from(n));
            assert_eq!(s.lost + s.delivered, s.offered);
            assert_eq!(out.len() as u64, s.delivered);
            assert_binomial(s.lost, u64::from(n), p, 4.0);
        }
    }

    #[test]
    fn loss_extremes() {
        let t0 = Instant::now();
        let mut all = Link::new(lossy(1.0), 3);
        assert!(run(&mut all, t0, 1000, MS, 10).is_empty());
        assert_eq!(all.stats().lost, 1000);
        let mut none = Link::new(lossy(0.0), 3);
        assert_eq!(run(&mut none, t0, 1000, MS, 10).len(), 1000);
    }

    /// Mean length of runs of consecutive lost ids among `0..n`.
    fn mean_burst(out: &[Delivery], n: u32) -> f64 {
        let mut got = vec![false; n as usize];
        for (_, d) in out {
            got[id(d) as usize] = true;
        }
        let (mut bursts, mut lost, mut prev_lost) = (0u64, 0u64, false);
        for g in got {
            if !g {
                lost += 1;
                if !prev_lost {
                    bursts += 1;
                }
            }
            prev_lost = !g;
        }
        lost as f64 / bursts as f64
    }

    #[test]
    fn gilbert_elliott_matches_stationary_loss_and_is_bursty() {
        let ge = GilbertElliott {
            p_good_to_bad: 0.01,
            p_bad_to_good: 0.1,
            loss_good: 0.001,
            loss_bad: 0.8,
        };
        let pi_bad = ge.p_good_to_bad / (ge.p_good_to_bad + ge.p_bad_to_good);
        let expected = (1.0 - pi_bad) * ge.loss_good + pi_bad * ge.loss_bad;
        let n = 300_000u32;
        let t0 = Instant::now();
        let cfg = LinkConfig {
            burst: Some(ge),
            loss: 0.9, // ignored when `burst` is set
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 21);
        let out = run(&mut link, t0, n, Duration::from_micros(10), 16);
        let ratio = link.stats().lost as f64 / f64::from(n);
        assert!(
            (ratio - expected).abs() < 0.1 * expected,
            "GE loss {ratio} vs stationary {expected}"
        );
        let ge_burst = mean_burst(&out, n);

        let mut bern = Link::new(lossy(expected), 21);
        let out = run(&mut bern, t0, n, Duration::from_micros(10), 16);
        let bern_burst = mean_burst(&out, n);
        assert!(
            ge_burst > 2.0 && ge_burst > 1.5 * bern_burst,
            "GE mean burst {ge_burst} vs Bernoulli {bern_burst}"
        );
    }

    #[test]
    fn delay_is_exact_without_jitter() {
        let t0 = Instant::now();
        let cfg = LinkConfig {
            delay: Duration::from_millis(50),
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 5);
        let mut buf = [0u8; 64];
        for i in 0..100u32 {
            link.send(t0 + MS * i, &payload(i, 20));
        }
        assert_eq!(link.in_flight(), 100);
        for i in 0..100u32 {
            let due = t0 + MS * i + Duration::from_millis(50);
            assert_eq!(link.next_delivery(), Some(due));
            assert_eq!(
                link.poll_deliver(due - Duration::from_nanos(1), &mut buf),
                None
            );
            assert_eq!(link.poll_deliver(due, &mut buf), Some(20));
            assert_eq!(id(&buf), i);
        }
        assert_eq!(link.in_flight(), 0);
    }

    #[test]
    fn jitter_within_bounds_and_never_reorders() {
        let t0 = Instant::now();
        let cfg = LinkConfig {
            delay: 20 * MS,
            jitter: 10 * MS,
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 9);
        let n = 10_000u32;
        let out = run(&mut link, t0, n, MS, 32);
        assert_eq!(out.len(), n as usize);
        let mut distinct = std::collections::HashSet::new();
        for (i, (at, d)) in out.iter().enumerate() {
            assert_eq!(id(d), i as u32, "order kept");
            let lat = *at - (t0 + MS * i as u32);
            assert!(lat >= 20 * MS && lat <= 30 * MS, "latency {lat:?}");
            distinct.insert(lat);
        }
        assert!(distinct.len() > n as usize / 2, "jitter varies");
        assert_eq!(link.stats().reordered, 0);
    }

    #[test]
    fn reorder_counts_packets_overtaken() {
        let t0 = Instant::now();
        let cfg = LinkConfig {
            delay: 10 * MS,
            jitter: 2 * MS,
            reorder: 0.1,
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 17);
        let n = 20_000u32;
        let out = run(&mut link, t0, n, MS, 32);
        assert_eq!(out.len(), n as usize, "nothing lost or duplicated");
        let mut seen = vec![false; n as usize];
        let (mut max, mut late) = (None, 0u64);
        for (_, d) in &out {
            let i = id(d);
            assert!(!seen[i as usize]);
            seen[i as usize] = true;
            match max {
                Some(m) if i < m => late += 1,
                _ => max = Some(i),
            }
        }
        let s = link.stats();
        assert_eq!(s.reordered, late);
        // A held-back packet (6 ms extra at 1 ms spacing) is overtaken nearly always.
        assert!(
            (0.08..0.12).contains(&(late as f64 / f64::from(n))),
            "{late}"
        );
        assert_eq!(s.duplicated, 0);
    }

    #[test]
    fn duplicates_are_counted_and_follow_the_original() {
        let t0 = Instant::now();
        let cfg = LinkConfig {
            delay: 5 * MS,
            dup: 0.05,
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 23);
        let n = 100_000u32;
        let out = run(&mut link, t0, n, Duration::from_micros(100), 32);
        let s = link.stats();
        assert_binomial(s.duplicated, u64::from(n), 0.05, 4.0);
        assert_eq!(s.delivered, u64::from(n) + s.duplicated);
        assert_eq!(out.len() as u64, s.delivered);
        assert_eq!(s.reordered, 0, "a copy is not a reordering");
        // Without jitter the copy comes right after its original.
        let mut prev = None;
        let mut copies = 0;
        for (_, d) in &out {
            let i = id(d);
            if Some(i) == prev {
                copies += 1;
            } else {
                assert_eq!(i, prev.map_or(0, |p| p + 1));
            }
            prev = Some(i);
        }
        assert_eq!(copies, s.duplicated);
    }

    #[test]
    fn rate_limit_delivers_configured_rate_and_drops_overload() {
        let t0 = Instant::now();
        let rate = 10_000_000u64;
        let cfg = LinkConfig {
            delay: 20 * MS,
            rate_bps: Some(rate),
            queue_bytes: 50_000,
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 31);
        // 1250-byte datagrams every 0.5 ms: 20 Mb/s offered into 10 Mb/s, for 1 s.
        let out = run(&mut link, t0, 2000, Duration::from_micros(500), 1250);
        let first = out[0].0;
        let window: u64 = out
            .iter()
            .filter(|(at, _)| *at < first + Duration::from_secs(1))
            .map(|(_, d)| d.len() as u64)
            .sum();
        let want = rate / 8;
        assert!(
            window.abs_diff(want) * 100 <= want,
            "{window} bytes in 1 s vs {want}"
        );
        let s = link.stats();
        assert!(s.queue_drops > 500, "{s:?}");
        assert_eq!(s.offered, s.delivered + s.queue_drops);
        // First packet: 1 ms of serialization plus 20 ms of propagation.
        assert_eq!(first, t0 + 21 * MS);
    }

    #[test]
    fn rate_limit_has_no_rounding_drift() {
        let t0 = Instant::now();
        let rate = 7_777_777u64;
        let cfg = LinkConfig {
            rate_bps: Some(rate),
            queue_bytes: 1 << 20,
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 1);
        // Back-to-back burst of awkward sizes; the last one ends exactly at total bits / rate.
        let mut bits = 0u128;
        for i in 0..500u32 {
            let len = 1317;
            link.send(t0, &payload(i, len));
            bits += len as u128 * 8;
        }
        let mut out = Vec::new();
        drain(&mut link, t0 + Duration::from_secs(10), &mut out);
        assert_eq!(out.len(), 500);
        let exact_ns = bits * 1_000_000_000 / u128::from(rate);
        assert_eq!((out[499].0 - t0).as_nanos(), exact_ns);
        assert_eq!(link.stats().queue_drops, 0);
    }

    #[test]
    fn queue_drops_when_burst_exceeds_queue() {
        let t0 = Instant::now();
        let cfg = LinkConfig {
            rate_bps: Some(1_000_000),
            queue_bytes: 10_000,
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 1);
        for i in 0..20u32 {
            link.send(t0, &payload(i, 1000));
        }
        let s = link.stats();
        assert_eq!((s.queue_drops, link.in_flight()), (10, 10));
        // Once the first datagram is serialized (8 ms) there is room for exactly one more.
        link.send(t0 + 8 * MS, &payload(20, 1000));
        link.send(t0 + 8 * MS, &payload(21, 1000));
        assert_eq!(link.stats().queue_drops, 11);
    }

    #[test]
    fn mtu_drops_and_truncation() {
        let t0 = Instant::now();
        let cfg = LinkConfig {
            mtu: 1000,
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 1);
        link.send(t0, &payload(0, 1001));
        link.send(t0, &payload(1, 1000));
        assert_eq!(link.stats().mtu_drops, 1);
        let mut small = [0u8; 100];
        assert_eq!(link.poll_deliver(t0, &mut small), Some(100));
        assert_eq!(id(&small), 1);
        assert_eq!(link.poll_deliver(t0, &mut small), None);
        let s = link.stats();
        assert_eq!((s.offered, s.delivered, s.delivered_bytes), (2, 1, 100));
    }

    #[test]
    fn unlimited_link_bounds_bytes_in_flight() {
        let t0 = Instant::now();
        let cfg = LinkConfig {
            delay: Duration::from_secs(10),
            queue_bytes: 1 << 20,
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 1);
        let big = vec![0u8; 60_000];
        for _ in 0..2000 {
            link.send(t0, &big);
        }
        let s = link.stats();
        let cap = MIN_IN_FLIGHT_CAP / big.len();
        assert_eq!(link.in_flight(), cap);
        assert_eq!(s.queue_drops, 2000 - cap as u64);
    }

    /// One send/poll cycle per 200 µs with varying datagram sizes.
    fn cycle(link: &mut Link, t0: Instant, i: u32) {
        let mut buf = [0u8; 2048];
        let mut data = [0u8; 1400];
        let now = t0 + Duration::from_micros(200) * i;
        while link.poll_deliver(now, &mut buf).is_some() {}
        let len = 100 + (i as usize * 37) % 1300;
        data[..4].copy_from_slice(&i.to_be_bytes());
        link.send(now, &data[..len]);
    }

    #[test]
    fn steady_state_does_not_allocate() {
        let t0 = Instant::now();
        let cfg = LinkConfig {
            delay: 25 * MS,
            rate_bps: Some(50_000_000),
            queue_bytes: 64_000,
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 99);
        for i in 0..10_000 {
            cycle(&mut link, t0, i);
        }
        let (pool, allocs) = (link.pool_len(), link.allocations());
        assert!(pool > 100 && pool < 200, "pool {pool}");
        for i in 10_000..200_000 {
            cycle(&mut link, t0, i);
        }
        assert_eq!(link.pool_len(), pool);
        assert_eq!(link.allocations(), allocs);
        assert_eq!(link.stats().delivered, 200_000 - link.in_flight() as u64);
    }

    #[test]
    fn pool_grows_only_to_the_peak_in_flight() {
        let t0 = Instant::now();
        let cfg = LinkConfig {
            delay: 25 * MS,
            jitter: 5 * MS,
            loss: 0.02,
            reorder: 0.02,
            dup: 0.02,
            rate_bps: Some(50_000_000),
            queue_bytes: 64_000,
            ..LinkConfig::default()
        };
        let mut link = Link::new(cfg, 99);
        let mut peak = 0;
        for i in 0..200_000 {
            let allocs = link.allocations();
            cycle(&mut link, t0, i);
            let grew = link.in_flight() > peak;
            peak = peak.max(link.in_flight());
            if i >= 10_000 {
                assert!(grew || link.allocations() == allocs, "allocated at {i}");
            }
        }
        assert_eq!(link.pool_len(), peak);
    }

    #[test]
    fn set_config_and_reset_stats() {
        let t0 = Instant::now();
        let mut link = Link::new(lossy(1.0), 1);
        link.send(t0, b"gone");
        assert_eq!(link.stats().lost, 1);
        link.reset_stats();
        assert_eq!(link.stats(), LinkStats::default());
        link.set_config(LinkConfig::default());
        assert_eq!(link.config(), &LinkConfig::default());
        link.send(t0, b"kept");
        let mut buf = [0u8; 8];
        assert_eq!(link.poll_deliver(t0, &mut buf), Some(4));
        assert_eq!(&buf[..4], b"kept");
    }
}
