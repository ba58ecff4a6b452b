//! Receiver-side rate estimation (UDT's packet time window, `CPktTimeWindow`): the packet
//! arrival rate reported in full ACKs, and the link capacity estimated from packet pairs
//! (draft-sharabayko-srt §4.8.1, "Packet Pair Probing").
//!
//! Both estimates keep a fixed ring of recent intervals and use a median filter: intervals
//! further than a factor of 8 from the median (idle gaps, bursts after a stall, cross traffic
//! squeezing between a probe pair) are discarded, and the rate is the reciprocal of the mean of
//! what remains. Nothing here reads a clock or allocates after construction.
//!
//! **Receive batches.** A runtime that reads datagrams in batches stamps a batch with one time:
//! when it was read, not when each packet arrived. Arrivals with the same time form a *group*,
//! and the group's packets share the time since the previous group evenly: `k` packets read
//! `d` after the previous read arrived at about one per `d / k`. That is what the link
//! delivered, whatever the batch size, the wake-up latency or a stall of the reader (a late
//! reader gets a bigger batch over a longer gap). Timing each packet as it is processed instead
//! measures the CPU: intervals of a microsecond or less, many times the link's rate. A runtime
//! with one timestamp per packet (the simulator, kernel receive timestamps) makes every group a
//! single packet, which is UDT's estimator unchanged. A read less than 50 µs after a batch
//! continues its group (up to 1 ms): a reader behind by a backlog reads full batches microseconds
//! apart, and sharing those microseconds among a batch's packets would read as tens of
//! millions of packets per second; joined, the backlog's packets share the time since the
//! read before it. Uniform arrivals give the same per-packet interval either way.

use std::time::{Duration, Instant};

/// Number of arrival intervals kept for the receiving rate.
const ARRIVAL_WINDOW: usize = 16;
/// Number of probe-pair intervals kept for the capacity estimate.
const PROBE_WINDOW: usize = 64;
/// Reads closer together than this continue one group (a backlog read in full batches)...
const CHAIN_GAP: Duration = Duration::from_micros(50);
/// ...until the group spans this much.
const MAX_GROUP_SPAN: Duration = Duration::from_millis(1);
/// Fewest arrival intervals that give a receiving rate.
const MIN_ARRIVAL_SAMPLES: u64 = 4;
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
    /// Nanoseconds per packet of the closed groups (ring, saturated at `u32::MAX` ≈ 4.3 s).
    arrival_ns: [u32; ARRIVAL_WINDOW],
    /// Bytes per packet of the matching sample.
    arrival_bytes: [u32; ARRIVAL_WINDOW],
    /// Next slot to overwrite in the arrival ring.
    arrival_next: usize,
    /// Number of valid slots in the arrival ring.
    arrival_filled: usize,
    /// Time of the group before the open one (the previous read).
    prev_group: Option<Instant>,
    /// Time of the open group (its latest read).
    group_time: Option<Instant>,
    /// Time of the open group's first read.
    group_start: Option<Instant>,
    /// Packets in the open group.
    group_pkts: u32,
    /// Bytes in the open group.
    group_bytes: u64,
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
            prev_group: None,
            group_time: None,
            group_start: None,
            group_pkts: 0,
            group_bytes: 0,
            probe_ns: [0; PROBE_WINDOW],
            probe_next: 0,
            probe_filled: 0,
            probe_start: None,
        }
    }

    /// Every data packet arrival (time is an argument; this module never reads a clock).
    ///
    /// `bytes` is whatever size the caller wants the byte rate to count (payload alone, or
    /// including headers). Arrivals stamped with the same time (or, should a clock step back,
    /// an earlier one) join the open group; a later time closes it (see the module notes). The
    /// first group only starts the clock. O(1) per arrival, at most 16 ring writes per group.
    pub fn on_arrival(&mut self, now: Instant, bytes: usize) {
        if let Some(t) = self.group_time {
            let chained = self.group_pkts > 1
                && now.saturating_duration_since(t) < CHAIN_GAP
                && self
                    .group_start
                    .is_some_and(|s| t.saturating_duration_since(s) < MAX_GROUP_SPAN);
            if now <= t || chained {
                // The same read, or one right after it: a reader working through a backlog
                // reads full batches microseconds apart, and those packets arrived over the
                // whole time since the previous group, not in between reads.
                self.group_time = Some(now.max(t));
                self.group_pkts = self.group_pkts.saturating_add(1);
                self.group_bytes = self.group_bytes.saturating_add(bytes as u64);
                return;
            }
            self.close_group(t);
        }
        self.group_time = Some(now);
        self.group_start = Some(now);
        self.group_pkts = 1;
        self.group_bytes = bytes as u64;
    }

    /// Per-packet interval and size of the open group, if it has a predecessor.
    fn open_sample(&self) -> Option<(u32, u32, u32)> {
        let (t, prev) = (self.group_time?, self.prev_group?);
        let n = self.group_pkts.max(1);
        let ns = (interval_ns(t, prev) / n).max(1);
        let bytes = u32::try_from(self.group_bytes / u64::from(n)).unwrap_or(u32::MAX);
        Some((ns, bytes, n))
    }

    /// Moves the open group (read at `t`) into the ring: one sample per packet, at most a
    /// window's worth.
    fn close_group(&mut self, t: Instant) {
        if let Some((ns, bytes, n)) = self.open_sample() {
            for _ in 0..(n as usize).min(ARRIVAL_WINDOW) {
                let slot = self.arrival_next;
                self.arrival_ns[slot] = ns;
                self.arrival_bytes[slot] = bytes;
                self.arrival_next = (slot + 1) % ARRIVAL_WINDOW;
                self.arrival_filled = (self.arrival_filled + 1).min(ARRIVAL_WINDOW);
            }
        }
        self.prev_group = Some(t);
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

    /// Packets/s and bytes/s received, median-filtered over the last 16 per-packet intervals,
    /// the open group's included (0 until enough samples).
    ///
    /// "Enough" means at least `MIN_ARRIVAL_SAMPLES` intervals, more than half of them within
    /// a factor of 8 of the median; otherwise the arrivals are too few or too irregular to
    /// report and both are 0. (UDT waits for 9 of a full window of 16; a sender's first window
    /// of 16 packets, read in a few batches, yields fewer, and the first ACK is the one that
    /// counts most for a libsrt sender, see [`AckRateTracker`].)
    pub fn recv_rate(&self) -> (u32, u64) {
        // The newest samples first: the open group's, then the ring's from the newest back.
        let (mut ns_win, mut bytes_win) = ([0u32; ARRIVAL_WINDOW], [0u32; ARRIVAL_WINDOW]);
        let mut n = 0;
        if let Some((ns, bytes, k)) = self.open_sample() {
            n = (k as usize).min(ARRIVAL_WINDOW);
            ns_win[..n].fill(ns);
            bytes_win[..n].fill(bytes);
        }
        for back in 1..=self.arrival_filled.min(ARRIVAL_WINDOW - n) {
            let slot = (self.arrival_next + ARRIVAL_WINDOW - back) % ARRIVAL_WINDOW;
            ns_win[n] = self.arrival_ns[slot];
            bytes_win[n] = self.arrival_bytes[slot];
            n += 1;
        }
        if n == 0 {
            return (0, 0);
        }
        let intervals = &ns_win[..n];
        let m = median(intervals);
        let (mut count, mut total_ns, mut bytes) = (0u64, 0u64, 0u64);
        for (&ns, &b) in intervals.iter().zip(&bytes_win[..n]) {
            if is_inlier(ns, m) {
                count += 1;
                total_ns += u64::from(ns);
                bytes += u64::from(b);
            }
        }
        if count < MIN_ARRIVAL_SAMPLES || count * 2 <= n as u64 || total_ns == 0 {
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

/// How long the peak arrival speed is remembered as a capacity floor, µs.
const PEAK_HOLD_US: u64 = 1_000_000;
/// Shortest span an early speed is taken over, µs: arrivals stamped together (one read)
/// span nothing.
const MIN_EARLY_SPAN_US: u64 = 100;

/// The three rates a receiver's full ACK carries (draft-sharabayko-srt §3.2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckRates {
    /// Arrival speed, packets/s (the ACK's "packets receiving rate").
    pub speed_pps: u32,
    /// Link capacity estimate, packets/s (the ACK's "estimated link capacity").
    pub capacity_pps: u32,
    /// Average over the last ACK interval, bytes/s (the ACK's "receiving rate").
    pub avg_bps: u64,
}

/// What a receiver reports about its arrivals in full ACKs, as libsrt senders read it:
///
/// - *speed*: the highest arrival speed of the last second. An arrival speed is UDT's
///   median-filtered rate within bursts ([`RateEstimator::recv_rate`]), at least the average,
///   and held at its last value while arrivals are too irregular to measure; before the
///   estimator has measured anything, the pace of the arrivals so far (first to last, by
///   arrival time). libsrt's file
///   controller smooths this field (weight 1/8 per ACK), paces at it when it leaves slow
///   start (at its first loss, a few ACKs in) and sizes its window from it. At 1% loss it then
///   hardly climbs: a loss in nearly every 10 ms skips the increase. What it reads in its first
///   ACKs therefore sets its rate for the transfer, and the peak is the best early measure of
///   what the path carries; the average over a window-limited start (a few packets a round
///   trip) held it at that for minutes.
/// - *capacity*: the packet-pair estimate, but at least the speed. Pairs read in one receive
///   batch cannot be timed, and libsrt bounds its rate increases by this value, so an
///   estimate below what the link has shown would cap the sender.
/// - *average*: what arrived over the last ACK interval (at least half a SYN interval), which
///   libsrt only displays. slipstream's sender takes its bandwidth samples from it, and its
///   receiver sizes its buffer by it: a count over 10 ms is immune to how the receiver reads
///   its arrivals (not to a path that pauses across an ACK and then delivers what fell due,
///   which the sender's median of three reports filters). The packets an ACK counts are
///   those read since the last, and their time is that of their arrivals (by the kernel's
///   receive timestamp, where the runtime has them): from the last arrival the previous
///   report counted to the last this one counts (the first report: from its first arrival
///   to the ACK). A receiver thread that waited a few milliseconds to run reads packets that
///   arrived before the last ACK; counted over the ACK interval alone, that backlog read as
///   up to twice the path's rate. Counted from the earliest of them to the ACK, every
///   report read low by the time packets wait in the socket: 10-20 % over loopback, where
///   datagrams wait a millisecond or two, and only in the reports of senders on time
///   (BBR keeps its estimate against low reports on a sender that runs late), so that of
///   ten streams from one sender the slower ones stayed slow.
///
/// Times are microseconds on the connection's clock; nothing here reads a clock.
#[derive(Debug, Clone, Default)]
pub struct AckRateTracker {
    /// (start, packets, bytes) of the open averaging window: the last arrival the previous
    /// report counted, or for the first, the first arrival.
    window: Option<(u64, u64, u64)>,
    /// The latest arrival in the open window.
    last: u64,
    /// A report was made: the open window starts at the last arrival it counted.
    reported: bool,
    /// Average (packets/s, bytes/s) of the last closed window.
    avg: (u32, u64),
    /// Last speed reported.
    speed: u32,
    /// Highest speed reported within [`PEAK_HOLD_US`], and when it was reported.
    peak: (u32, u64),
    /// (first, last, packets) of the arrivals so far, until the estimator has measured a
    /// speed: the early speed is theirs.
    early: Option<(u64, u64, u64)>,
    /// The estimator has measured a speed.
    measured: bool,
}

impl AckRateTracker {
    /// Every data packet arrival (retransmissions and duplicates count: they used the link),
    /// at `at_us`: when it arrived, if known, else when it is handled.
    pub fn on_arrival(&mut self, at_us: u64, bytes: usize) {
        let w = self.window.get_or_insert((at_us, 0, 0));
        if !self.reported {
            w.0 = w.0.min(at_us);
        }
        w.1 += 1;
        w.2 += bytes as u64;
        self.last = self.last.max(at_us);
        if !self.measured {
            let e = self.early.get_or_insert((at_us, at_us, 0));
            e.0 = e.0.min(at_us);
            e.1 = e.1.max(at_us);
            e.2 += 1;
        }
    }

    /// Average packets/s over the last closed window (0 before the first).
    pub fn avg_pps(&self) -> u32 {
        self.avg.0
    }

    /// Packets/s of the arrivals so far over the time between the first and the last of
    /// them (at least [`MIN_EARLY_SPAN_US`]); 0 before two packets. A first window arrives as
    /// a burst at the bottleneck's pace; over the time to the first ACK it would read as a
    /// fraction of that.
    fn early_pps(&self) -> u32 {
        match self.early {
            Some((first, last, pkts)) if pkts >= 2 => {
                let span = last.saturating_sub(first).max(MIN_EARLY_SPAN_US);
                u32::try_from((pkts - 1) * 1_000_000 / span).unwrap_or(u32::MAX)
            }
            _ => 0,
        }
    }

    /// The rates for a full ACK sent at `now_us`; closes the averaging window if it spans at
    /// least `min_span_us`.
    pub fn on_ack(&mut self, now_us: u64, min_span_us: u64, est: &RateEstimator) -> AckRates {
        if let Some((start, pkts, bytes)) = self.window {
            if now_us.saturating_sub(start) >= min_span_us.max(1) {
                // To the last arrival counted, once a report was made (the time after it is
                // the next report's); the first report, and one with nothing new, to now.
                let end = if self.reported && pkts > 0 && self.last > start {
                    self.last
                } else {
                    now_us
                };
                let span = end.saturating_sub(start).max(1);
                let pps = u32::try_from(pkts * 1_000_000 / span).unwrap_or(u32::MAX);
                self.avg = (pps, bytes.saturating_mul(1_000_000) / span);
                let next = if pkts > 0 {
                    self.last.min(now_us)
                } else {
                    start
                };
                self.window = Some((next, 0, 0));
                self.reported = true;
            }
        }
        let measured = est.recv_rate().0;
        self.measured |= measured > 0;
        let speed = if measured > 0 {
            measured
        } else if self.measured {
            self.speed
        } else {
            // Too few arrivals to measure (a first window, read in a batch or two): their
            // own pace. A libsrt file sender leaves slow start at its first loss report
            // pacing at 1/8 of the first speed it read (plus 14 packets/s), and climbs from
            // there by a fraction of a percent per 10 ms.
            self.early_pps()
        }
        .max(self.avg.0);
        self.speed = speed;
        if speed >= self.peak.0 || now_us.saturating_sub(self.peak.1) > PEAK_HOLD_US {
            self.peak = (speed, now_us);
        }
        AckRates {
            speed_pps: self.peak.0,
            capacity_pps: est.bandwidth().max(self.peak.0),
            avg_bps: self.avg.1,
        }
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
        // Three intervals are not enough to report anything.
        let t = arrive(&mut r, t0, &[us(1000); 3], 1000);
        assert_eq!(r.recv_rate(), (0, 0));
        // The fourth is.
        let t = arrive(&mut r, t, &[us(1000)], 1000);
        assert_eq!(r.recv_rate(), (1000, 1_000_000));
        // Beyond that a majority must agree: four of eight is not one.
        let mut odd = RateEstimator::new();
        odd.on_arrival(t0, 1000);
        let split = [us(1000), us(50_000)].repeat(4);
        let t1 = arrive(&mut odd, t0, &split, 1000);
        assert_eq!(odd.recv_rate(), (0, 0));
        arrive(&mut odd, t1, &[us(50_000)], 1000);
        assert_eq!(odd.recv_rate(), (20, 20_000));
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

    /// Packets arriving one per `spacing`, read in batches of the given sizes (each batch
    /// stamped with the time it was read, just after its last packet arrived).
    fn read_in_batches(r: &mut RateEstimator, t0: Instant, spacing: Duration, batches: &[u32]) {
        let mut arrived = 0u32;
        for &b in batches {
            arrived += b;
            let read_at = t0 + spacing * arrived;
            for _ in 0..b {
                r.on_arrival(read_at, 1000);
            }
        }
    }

    #[test]
    fn batched_reads_give_the_link_rate_not_the_reader_speed() {
        // 12 µs per packet (about 1 Gb/s of 1500-byte packets), read in batches of all sizes.
        let batches = [3, 1, 7, 2, 31, 4, 1, 1, 9, 64, 5, 2, 8, 1, 17, 3];
        let mut r = RateEstimator::new();
        read_in_batches(&mut r, Instant::now(), us(12), &batches);
        let (pps, _) = r.recv_rate();
        assert!((83_000..=84_000).contains(&pps), "{pps} packets/s");
        // A reader stalled for 5 ms reads 400 packets at once: still the link's rate.
        let mut r = RateEstimator::new();
        read_in_batches(&mut r, Instant::now(), us(12), &[4, 4, 4, 400, 2]);
        let (pps, _) = r.recv_rate();
        assert!((83_000..=84_000).contains(&pps), "{pps} packets/s");
        // ...or works through the backlog in full batches of 64, 2 µs apart, then catches up.
        let mut r = RateEstimator::new();
        let t0 = Instant::now();
        read_in_batches(&mut r, t0, us(12), &[8, 8, 8, 8, 8, 8, 8, 8, 8, 8]);
        let stalled = t0 + us(12 * 80) + Duration::from_millis(5);
        // 5 ms at 12 µs: 416 packets waiting, read as 6 × 64 + 32.
        for b in 0..7u32 {
            for _ in 0..(if b < 6 { 64 } else { 32 }) {
                r.on_arrival(stalled + us(2) * b, 1000);
            }
        }
        // The next read closes the backlog's group: 416 packets over the 5 ms since the last
        // read before the stall.
        r.on_arrival(stalled + Duration::from_millis(1), 1000);
        let (pps, _) = r.recv_rate();
        assert!((80_000..=85_000).contains(&pps), "{pps} packets/s");
        // The open group counts at once: a window's worth of packets in one read after the
        // first is already an estimate.
        let mut r = RateEstimator::new();
        read_in_batches(&mut r, Instant::now(), us(100), &[1, 16]);
        assert_eq!(r.recv_rate(), (10_000, 10_000_000));
    }

    #[test]
    fn ack_rates_average_speed_peak_and_capacity() {
        let t0 = Instant::now();
        let at = |us_: u64| t0 + Duration::from_micros(us_);
        let (mut est, mut ack) = (RateEstimator::new(), AckRateTracker::default());
        // Nothing arrived yet: nothing to report.
        assert_eq!(ack.on_ack(10_000, 5_000, &est), AckRates::default());
        // 100 packets of 1000 bytes, one per 100 µs, from t = 10 ms.
        for i in 0..100u64 {
            let t = 10_000 + i * 100;
            est.on_arrival(at(t), 1000);
            ack.on_arrival(t, 1000);
        }
        // An ACK 10 ms after the first arrival: the average over that window, and the speed.
        let r = ack.on_ack(20_000, 5_000, &est);
        assert_eq!(r.avg_bps, 10_000_000);
        assert_eq!(r.speed_pps, 10_000);
        assert_eq!(ack.avg_pps(), 10_000);
        assert!(r.capacity_pps >= r.speed_pps);
        // A window shorter than the minimum span stays open: the last figures stand.
        ack.on_arrival(21_000, 1000);
        assert_eq!(ack.on_ack(22_000, 5_000, &est).avg_bps, 10_000_000);
        // Slower arrivals: the average follows at once, the reported speed keeps the peak
        // for a second, then follows too.
        let mut t = 22_000;
        for _ in 0..200 {
            t += 1_000;
            est.on_arrival(at(t), 1000);
            ack.on_arrival(t, 1000);
        }
        let r = ack.on_ack(t, 5_000, &est);
        assert!((990..=1_000).contains(&ack.avg_pps()), "{}", ack.avg_pps());
        assert_eq!(r.speed_pps, 10_000);
        for _ in 0..1_000 {
            t += 1_000;
            est.on_arrival(at(t), 1000);
            ack.on_arrival(t, 1000);
        }
        let r = ack.on_ack(t, 5_000, &est);
        ack.on_ack(t + 1, 5_000, &est);
        let r2 = ack.on_ack(t + 2, 5_000, &est);
        assert!(r.speed_pps <= 10_000);
        assert_eq!(r2.speed_pps, 1_000);
        assert_eq!(r2.avg_bps, 1_000_000);
    }

    #[test]
    fn a_first_window_reports_its_own_pace() {
        // A sender's first 16 packets arrive 24 µs apart (500 Mbit/s) from t = 10 ms and are
        // read in one batch: the estimator cannot measure them. The first ACK, at 20 ms,
        // reports their pace, not 16 packets over the 10 ms to the ACK.
        let est = RateEstimator::new();
        let mut ack = AckRateTracker::default();
        assert_eq!(ack.on_ack(5_000, 5_000, &est).speed_pps, 0);
        for i in 0..16u64 {
            ack.on_arrival(10_000 + i * 24, 1456);
        }
        let r = ack.on_ack(20_000, 5_000, &est);
        assert_eq!(r.speed_pps, 15 * 1_000_000 / (15 * 24));
        assert_eq!(ack.avg_pps(), 1_600);
        // Arrivals stamped at once span the minimum, not nothing.
        let mut one_read = AckRateTracker::default();
        for _ in 0..16 {
            one_read.on_arrival(10_000, 1456);
        }
        let speed = one_read.on_ack(20_000, 5_000, &est).speed_pps;
        assert_eq!(speed, (15 * 1_000_000 / MIN_EARLY_SPAN_US) as u32);
        // Once the estimator measures, its figure stands and the early pace is dropped.
        let mut est = RateEstimator::new();
        let t0 = Instant::now();
        est.on_arrival(t0, 1456);
        arrive(&mut est, t0, &[us(1000); 8], 1456);
        for i in 0..9u64 {
            ack.on_arrival(30_000 + i * 1000, 1456);
        }
        ack.on_ack(40_000, 5_000, &est);
        // The peak of the last second still holds the early figure; a second on, it is gone.
        let r = ack.on_ack(1_100_000, 5_000, &est);
        assert_eq!(r.speed_pps, 1_000);
    }

    #[test]
    fn a_late_read_does_not_read_as_a_burst() {
        // 10,000 packets/s, one every 100 µs. The receiving thread does not run from 6 ms to
        // 10 ms (the ACK goes out at 10 ms anyway, from what was read), then reads the
        // packets that arrived meanwhile.
        let est = RateEstimator::new();
        let mut ack = AckRateTracker::default();
        for i in 0..60u64 {
            ack.on_arrival(i * 100, 1000);
        }
        ack.on_ack(10_000, 5_000, &est);
        // What was read by then, over the interval: low, which a max filter ignores.
        assert_eq!(ack.avg_pps(), 6_000);
        // The backlog, then the next 10 ms, arriving on time.
        for i in 60..200u64 {
            ack.on_arrival(i * 100, 1000);
        }
        let r = ack.on_ack(20_000, 5_000, &est);
        // 140 packets, but 14 ms of arrivals: the path's rate, not 14,000 packets/s.
        assert_eq!(ack.avg_pps(), 10_000);
        assert_eq!(r.avg_bps, 10_000_000);
    }

    #[test]
    fn a_standing_wait_in_the_socket_does_not_lower_the_rate() {
        // 10,000 packets/s, each read 2 ms after it arrived (a standing queue in the socket),
        // an ACK every 10 ms: each report counts 100 packets that arrived over 10 ms. Counted
        // from the earliest arrival to the ACK, 12 ms: 8,333 packets/s.
        let est = RateEstimator::new();
        let mut ack = AckRateTracker::default();
        let (mut next, mut reports) = (0u64, Vec::new());
        for ack_at in (10_000..=200_000u64).step_by(10_000) {
            // Read by the ACK: the packets that arrived up to 2 ms before it.
            while next * 100 + 2_000 <= ack_at {
                ack.on_arrival(next * 100, 1000);
                next += 1;
            }
            ack.on_ack(ack_at, 5_000, &est);
            reports.push(ack.avg_pps());
        }
        assert!(
            reports[1..].iter().all(|&r| r == 10_000),
            "reports {reports:?}"
        );
    }

    #[test]
    fn a_burst_after_idle_reads_at_its_own_speed() {
        // A window-limited sender: 32 packets at 20 µs spacing every 50 ms, read in batches of
        // four. The first batch of each burst carries the idle gap and is filtered out.
        let mut r = RateEstimator::new();
        let mut t = Instant::now();
        for _ in 0..3 {
            t += Duration::from_millis(50);
            read_in_batches(&mut r, t, us(20), &[4; 8]);
        }
        assert_eq!(r.recv_rate().0, 50_000);
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
