//! Receiver-side rate estimation (UDT's packet time window, `CPktTimeWindow`): the packet
//! arrival rate reported in full ACKs, and the link capacity estimated from packet pairs
//! (draft-sharabayko-srt §4.8.1, "Packet Pair Probing").
//!
//! Both estimates keep a fixed ring of recent intervals and use a median filter: intervals
//! further than a factor of 8 from the median (idle gaps, bursts after a stall, cross traffic
//! squeezing between a probe pair) are discarded, and the rate is the reciprocal of the mean of
//! what remains. Nothing here reads a clock or allocates after construction.

use std::time::Instant;

/// Number of arrival intervals kept for the receiving rate.
const ARRIVAL_WINDOW: usize = 16;
/// Number of probe-pair intervals kept for the capacity estimate.
const PROBE_WINDOW: usize = 64;
/// Samples further than this factor from the median are ignored.
const FILTER_FACTOR: u64 = 8;
const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Receiving-rate and link-capacity estimator for one connection's receiver.
///
/// Feed it with [`on_arrival`](Self::on_arrival) for every data packet, and additionally with
/// [`on_probe1`](Self::on_probe1) / [`on_probe2`](Self::on_probe2) for the packets of each probe
/// pair.
#[derive(Debug, Clone)]
pub struct RateEstimator {
    /// Nanoseconds between consecutive arrivals (ring, saturated at `u32::MAX` ≈ 4.3 s).
    arrival_ns: [u32; ARRIVAL_WINDOW],
    /// Size of the packet that ended the matching interval.
    arrival_bytes: [u32; ARRIVAL_WINDOW],
    /// Next slot to overwrite in the arrival ring.
    arrival_next: usize,
    /// Number of valid slots in the arrival ring.
    arrival_filled: usize,
    /// Time of the previous arrival.
    last_arrival: Option<Instant>,
    /// Nanoseconds between the two packets of each probe pair (ring).
    probe_ns: [u32; PROBE_WINDOW],
    /// Next slot to overwrite in the probe ring.
    probe_next: usize,
    /// Number of valid slots in the probe ring.
    probe_filled: usize,
    /// Arrival time of the first packet of the pending probe pair.
    probe_start: Option<Instant>,
}

impl Default for RateEstimator {
    fn default() -> Self {
        Self::new()
    }
}

/// `later - earlier` in nanoseconds, saturating at zero and at `u32::MAX`.
fn interval_ns(later: Instant, earlier: Instant) -> u32 {
    u32::try_from(later.saturating_duration_since(earlier).as_nanos()).unwrap_or(u32::MAX)
}

/// Median (the upper one for an even count) of a non-empty window of at most 64 samples,
/// without disturbing the window's order.
fn median(samples: &[u32]) -> u64 {
    let mut scratch = [0u32; PROBE_WINDOW];
    let scratch = &mut scratch[..samples.len()];
    scratch.copy_from_slice(samples);
    let mid = samples.len() / 2;
    let (_, m, _) = scratch.select_nth_unstable(mid);
    u64::from(*m)
}

/// Whether `x` lies strictly within a factor of [`FILTER_FACTOR`] of the median `m`.
fn is_inlier(x: u32, m: u64) -> bool {
    let x = u64::from(x);
    x > m / FILTER_FACTOR && x < m * FILTER_FACTOR
}

/// `ceil(amount per total_ns)` expressed per second.
fn per_second(amount: u64, total_ns: u64) -> u128 {
    (u128::from(amount) * NANOS_PER_SEC).div_ceil(u128::from(total_ns))
}

impl RateEstimator {
    /// A fresh estimator with no samples: both rates read 0.
    pub fn new() -> Self {
        RateEstimator {
            arrival_ns: [0; ARRIVAL_WINDOW],
            arrival_bytes: [0; ARRIVAL_WINDOW],
            arrival_next: 0,
            arrival_filled: 0,
            last_arrival: None,
            probe_ns: [0; PROBE_WINDOW],
            probe_next: 0,
            probe_filled: 0,
            probe_start: None,
        }
    }

    /// Every data packet arrival (time is an argument; this module never reads a clock).
    ///
    /// `bytes` is whatever size the caller wants the byte rate to count (payload alone, or
    /// including headers). The first arrival only starts the clock; each later one records the
    /// interval since the previous arrival. O(1).
    pub fn on_arrival(&mut self, now: Instant, bytes: usize) {
        if let Some(prev) = self.last_arrival {
            let slot = self.arrival_next;
            self.arrival_ns[slot] = interval_ns(now, prev);
            self.arrival_bytes[slot] = u32::try_from(bytes).unwrap_or(u32::MAX);
            self.arrival_next = (slot + 1) % ARRIVAL_WINDOW;
            self.arrival_filled = (self.arrival_filled + 1).min(ARRIVAL_WINDOW);
        }
        self.last_arrival = Some(now);
    }

    /// The first packet of a probe pair (sequence number % 16 == 0) has arrived.
    ///
    /// Call it and [`on_probe2`](Self::on_probe2) only for packets arriving in order and not
    /// retransmitted; the next `on_probe2` completes the pair.
    pub fn on_probe1(&mut self, now: Instant) {
        self.probe_start = Some(now);
    }

    /// The second packet of a probe pair (sequence number % 16 == 1), right after the first.
    ///
    /// Records the interval since the matching [`on_probe1`](Self::on_probe1); ignored when the
    /// first packet of the pair was not seen (lost, or already used by a previous pair).
    pub fn on_probe2(&mut self, now: Instant) {
        let Some(start) = self.probe_start.take() else {
            return;
        };
        let gap = interval_ns(now, start);
        if gap == 0 {
            // Both packets stamped at once (a receive batch read with one clock reading): the
            // gap says nothing about the link, and a zero would drag the median to 0.
            return;
        }
        let slot = self.probe_next;
        self.probe_ns[slot] = gap;
        self.probe_next = (slot + 1) % PROBE_WINDOW;
        self.probe_filled = (self.probe_filled + 1).min(PROBE_WINDOW);
    }

    /// Packets/s and bytes/s received, median-filtered over the last 16 arrival intervals (0 until enough samples).
    ///
    /// "Enough" means more than half the window (9 intervals) lies within a factor of 8 of the
    /// median interval; otherwise the arrivals are too irregular to report and both are 0.
    pub fn recv_rate(&self) -> (u32, u64) {
        let n = self.arrival_filled;
        if n == 0 {
            return (0, 0);
        }
        let intervals = &self.arrival_ns[..n];
        let m = median(intervals);
        let (mut count, mut total_ns, mut bytes) = (0u64, 0u64, 0u64);
        for (&ns, &b) in intervals.iter().zip(&self.arrival_bytes[..n]) {
            if is_inlier(ns, m) {
                count += 1;
                total_ns += u64::from(ns);
                bytes += u64::from(b);
            }
        }
        if count <= (ARRIVAL_WINDOW / 2) as u64 || total_ns == 0 {
            return (0, 0);
        }
        let pkts = u32::try_from(per_second(count, total_ns)).unwrap_or(u32::MAX);
        let bps = u64::try_from(per_second(bytes, total_ns)).unwrap_or(u64::MAX);
        (pkts, bps)
    }

    /// Link capacity estimate in packets/s from probe-pair intervals, median-filtered over the last 64 (0 until known).
    pub fn bandwidth(&self) -> u32 {
        let n = self.probe_filled;
        if n == 0 {
            return 0;
        }
        let intervals = &self.probe_ns[..n];
        let m = median(intervals);
        let (mut count, mut total_ns) = (0u64, 0u64);
        for &ns in intervals {
            if is_inlier(ns, m) {
                count += 1;
                total_ns += u64::from(ns);
            }
        }
        if count == 0 || total_ns == 0 {
            return 0;
        }
        u32::try_from(per_second(count, total_ns)).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// Feeds arrivals separated by the given gaps, all of `bytes` bytes; returns the last time.
    fn arrive(r: &mut RateEstimator, mut t: Instant, gaps: &[Duration], bytes: usize) -> Instant {
        for &g in gaps {
            t += g;
            r.on_arrival(t, bytes);
        }
        t
    }

    #[test]
    fn starts_at_zero() {
        let r = RateEstimator::new();
        assert_eq!(r.recv_rate(), (0, 0));
        assert_eq!(r.bandwidth(), 0);
        assert_eq!(RateEstimator::default().recv_rate(), (0, 0));
    }

    #[test]
    fn uniform_arrivals_give_the_rate() {
        let mut r = RateEstimator::new();
        let t0 = Instant::now();
        r.on_arrival(t0, 1000);
        // Eight intervals are not enough to report anything.
        let t = arrive(&mut r, t0, &[us(1000); 8], 1000);
        assert_eq!(r.recv_rate(), (0, 0));
        // The ninth makes a majority of the window.
        let t = arrive(&mut r, t, &[us(1000)], 1000);
        assert_eq!(r.recv_rate(), (1000, 1_000_000));
        // A full, wrapped window at 125 µs and 1316-byte packets.
        arrive(&mut r, t, &[us(125); 40], 1316);
        assert_eq!(r.recv_rate(), (8000, 8000 * 1316));
    }

    #[test]
    fn sub_microsecond_intervals_keep_precision() {
        let mut r = RateEstimator::new();
        let t0 = Instant::now();
        r.on_arrival(t0, 1500);
        // 10 Gb/s of 1500-byte packets: one every 1.2 µs.
        arrive(&mut r, t0, &[Duration::from_nanos(1200); 16], 1500);
        let (pps, bps) = r.recv_rate();
        assert_eq!(pps, 833_334); // ceil(1e9 / 1200)
        assert_eq!(bps, 1_250_000_000);
    }

    #[test]
    fn median_filter_drops_outliers() {
        let mut r = RateEstimator::new();
        let t0 = Instant::now();
        r.on_arrival(t0, 1000);
        // 16 intervals: mostly 100 µs, with idle gaps and a burst mixed in.
        let mut gaps = [us(100); 16];
        gaps[2] = Duration::from_millis(50); // sender went idle
        gaps[7] = Duration::from_secs(3);
        gaps[11] = Duration::from_nanos(500); // back-to-back burst
        gaps[12] = us(10);
        arrive(&mut r, t0, &gaps, 1000);
        assert_eq!(r.recv_rate(), (10_000, 10_000_000));
    }

    #[test]
    fn too_irregular_reports_nothing() {
        let mut r = RateEstimator::new();
        let t0 = Instant::now();
        r.on_arrival(t0, 100);
        // Half the intervals are 100 µs, half 10 ms: no majority near the median.
        let gaps: Vec<Duration> = (0..16)
            .map(|i| if i % 2 == 0 { us(100) } else { us(10_000) })
            .collect();
        arrive(&mut r, t0, &gaps, 100);
        assert_eq!(r.recv_rate(), (0, 0));
    }

    #[test]
    fn window_forgets_old_rate() {
        let mut r = RateEstimator::new();
        let t0 = Instant::now();
        r.on_arrival(t0, 1000);
        let t = arrive(&mut r, t0, &[us(1000); 16], 1000);
        assert_eq!(r.recv_rate().0, 1000);
        // Twice as fast: after 16 new intervals only the new rate is left.
        arrive(&mut r, t, &[us(500); 16], 1000);
        assert_eq!(r.recv_rate(), (2000, 2_000_000));
    }

    #[test]
    fn probe_pairs_give_capacity() {
        let mut r = RateEstimator::new();
        let mut t = Instant::now();
        // A 100 Mb/s bottleneck spaces 1250-byte packets 100 µs apart.
        for _ in 0..10 {
            r.on_probe1(t);
            r.on_probe2(t + us(100));
            t += Duration::from_millis(2);
        }
        assert_eq!(r.bandwidth(), 10_000);
        // Cross traffic occasionally squeezes in; the median filter drops those pairs.
        for k in 0..100 {
            let gap = if k % 5 == 0 { us(5000) } else { us(100) };
            r.on_probe1(t);
            r.on_probe2(t + gap);
            t += Duration::from_millis(2);
        }
        assert_eq!(r.bandwidth(), 10_000);
        // A single sample is already an estimate.
        let mut one = RateEstimator::new();
        one.on_probe1(t);
        one.on_probe2(t + us(40));
        assert_eq!(one.bandwidth(), 25_000);
    }

    #[test]
    fn unmatched_probe2_is_ignored() {
        let mut r = RateEstimator::new();
        let t = Instant::now();
        r.on_probe2(t); // first of the pair lost
        assert_eq!(r.bandwidth(), 0);
        r.on_probe1(t);
        r.on_probe2(t + us(200));
        r.on_probe2(t + us(900)); // duplicate second packet: pair already used
        assert_eq!(r.bandwidth(), 5000);
    }

    #[test]
    fn zero_and_backwards_intervals_do_not_panic() {
        let mut r = RateEstimator::new();
        let t = Instant::now();
        for _ in 0..40 {
            r.on_arrival(t, 1000);
            r.on_probe1(t);
            r.on_probe2(t);
        }
        assert_eq!(r.recv_rate(), (0, 0));
        assert_eq!(r.bandwidth(), 0);
        // A timestamp earlier than the previous one counts as a zero interval.
        let later = t + us(10);
        r.on_arrival(later, 1);
        r.on_arrival(t, 1);
        r.on_probe1(later);
        r.on_probe2(t);
        assert_eq!(r.recv_rate(), (0, 0));
        assert_eq!(r.bandwidth(), 0);
        // Zero-byte packets at a regular pace: a packet rate with no bytes.
        let mut z = RateEstimator::new();
        z.on_arrival(t, 0);
        arrive(&mut z, t, &[us(10); 16], 0);
        assert_eq!(z.recv_rate(), (100_000, 0));
    }

    #[test]
    fn huge_intervals_saturate() {
        let mut r = RateEstimator::new();
        let t = Instant::now();
        r.on_arrival(t, usize::MAX);
        arrive(&mut r, t, &[Duration::from_secs(100); 16], usize::MAX);
        // Every interval saturates at ~4.29 s; the rate stays finite and non-zero.
        let (pps, bps) = r.recv_rate();
        assert_eq!(pps, 1);
        assert!(bps > 0);
    }
}
