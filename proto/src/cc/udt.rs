//! UDT's native congestion control, as in UDT4's `CUDTCC` and SRT's FileCC (Gu & Grossman,
//! "UDT: UDP-based data transfer for high-speed wide area networks", Computer Networks 2007,
//! §3.4 "Congestion control"; Gu, "The UDT Congestion Control Algorithm", 2009;
//! draft-sharabayko-srt §5.1 "File transfer congestion control").
//!
//! The controller works in two phases.
//!
//! **Slow start.** The sending period stays at 1 µs (effectively unpaced) and the window starts
//! at 16 packets. At most once per rate-control interval (the SYN interval, 10 ms) an ACK grows
//! the window by the number of packets acknowledged since the previous update, which doubles it
//! roughly once per RTT. Slow start ends, once and for all, when the window exceeds the peer's
//! flow window, on the first loss report or on a timeout. The period is then set from the
//! receive rate the peer reports, `1e6 / recv_rate_pps`, or, if that is not known yet, from
//! the window: `(rtt + syn) / cwnd` µs per packet.
//!
//! **Rate control (DAIMD).** At most once per SYN interval, on an ACK:
//!
//! - the window follows the receive rate: `cwnd = recv_rate_pps * (rtt + syn) + 16`;
//! - if no loss was reported since the previous update, the rate is increased by `inc` packets
//!   per SYN interval, `period = period * syn / (period * inc + syn)`, where, with `B` the
//!   spare capacity in packets per second,
//!   `inc = max(10^ceil(log10(B * MSS * 8)) * 1.5e-6 / MSS, 1 / MSS)` (or `1 / MSS` when
//!   `B <= 0`). `B = bw - 1e6 / period`, where `bw` is the packet-pair link capacity estimate,
//!   capped (as SRT does) at twice the rate at the last decrease, and `B` is limited to `bw / 9`
//!   while the rate is still below the rate at the last decrease.
//!
//! On a loss report whose first lost packet lies beyond the largest packet sent at the last
//! decrease, a new congestion epoch starts: `period *= 1.125` (rate × 8/9), the average number
//! of NAKs per epoch is updated (`avg = ceil(avg * 0.875 + naks * 0.125)`) and a threshold
//! `dec_random` in `1..=avg` is drawn. Within an epoch, every `dec_random`-th NAK decreases the
//! rate again, but only during the first five NAKs, so one epoch cannot reduce the rate to much
//! below half (0.875^5 ≈ 0.51). The random threshold desynchronises flows sharing a bottleneck;
//! like UDT (which calls `srand(last_dec_seq)`), it is derived deterministically from the
//! sequence number, so runs in virtual time are reproducible.
//!
//! A configured maximum bandwidth (`max_bw_bps`) bounds the period from below, as in SRT:
//! `period >= packet * 1e6 / max_bw_bps`, a packet being the MSS, or for smaller packets their
//! mean payload plus the headers ([`super::packet_bytes`]), times 16/15 for the probe pairs
//! the engine sends back to back (SRT's bound alone lets 6.7 % more through).
//!
//! Choices that differ from one of the references:
//!
//! - Decrease factor 1.125 and NAK averaging weight 0.125, as in UDT and its papers. SRT's FileCC
//!   now uses 1.03 and 0.03, together with a rule that ignores loss reports covering under 2 % of
//!   the packets in flight; those values compensate for SRT's periodic NAK reports re-announcing
//!   the same losses. slipstream's FileCC gets one loss event per new NAK, so UDT's values apply.
//! - Without a receive rate, UDT4 and SRT set the period to `cwnd / (rtt + syn)` on loss and
//!   timeout, which has the units inverted (packets per µs); we use `(rtt + syn) / cwnd` µs, as
//!   UDT4's own end-of-slow-start branch does.
//! - On the loss that ends slow start with a known receive rate, UDT4 only switches to the
//!   receive rate, while SRT also applies a decrease. We switch to the receive rate (already the
//!   rate the path delivered) and open a congestion epoch without decreasing, so the NAKs that
//!   follow for the same burst are treated as within that epoch.
//! - The period is kept in [1, 1e6] µs and the window in [2, 2 × flow window] packets, and
//!   every intermediate value is checked: zero RTT, rates or bandwidth never produce NaN or
//!   infinities.

use super::{finite_or, flow_window, mss, packet_bytes, syn_us, unit_from_seq, PROBE_PAIR_FACTOR};
use super::{CcContext, CcControl, CongestionControl};
use crate::seq::SeqNo;

/// Initial congestion window in packets (UDT, SRT FileCC).
pub const INITIAL_CWND: f64 = 16.0;
/// Smallest sending period in µs: 1 µs is UDT's initial, effectively unpaced, value.
pub const MIN_PERIOD_US: f64 = 1.0;
/// Largest sending period in µs (one packet per second).
pub const MAX_PERIOD_US: f64 = 1_000_000.0;
/// Smallest congestion window in packets (UDT's lower threshold, avoids deadlock).
pub const MIN_CWND: f64 = 2.0;
/// Multiplicative increase of the period on a decrease (rate × 8/9).
pub const DECREASE_FACTOR: f64 = 1.125;
/// Weight of the latest epoch in the average NAK count.
const NAK_AVG_WEIGHT: f64 = 0.125;
/// Decreases allowed within one congestion epoch, the first included.
const MAX_DECREASES_PER_EPOCH: u32 = 5;
/// Scale of the increase: 1.5e-6 (UDT's beta).
const INCREASE_BETA: f64 = 0.000_001_5;

/// UDT's native congestion control (SRT's "file" controller). See the module documentation.
#[derive(Debug, Clone)]
pub struct UdtCc {
    slow_start: bool,
    /// Time of the last rate-control update (µs); `None` until the first event.
    last_rc_us: Option<u64>,
    /// Packets acknowledged since the last slow-start window update.
    pending_acked: u64,
    /// A loss was reported since the last rate-control update.
    loss: bool,
    /// Largest sequence number sent when the rate was last decreased.
    last_dec_seq: Option<SeqNo>,
    /// Sending period just before the last epoch's first decrease.
    last_dec_period: f64,
    /// NAKs counted in the current epoch.
    nak_count: u32,
    /// Decrease attempts in the current epoch.
    dec_count: u32,
    /// Average number of NAKs per epoch.
    avg_nak: u32,
    /// Decrease on every `dec_random`-th NAK within an epoch.
    dec_random: u32,
}

impl Default for UdtCc {
    fn default() -> Self {
        UdtCc {
            slow_start: true,
            last_rc_us: None,
            pending_acked: 0,
            loss: false,
            last_dec_seq: None,
            last_dec_period: MIN_PERIOD_US,
            nak_count: 0,
            dec_count: 0,
            avg_nak: 0,
            dec_random: 1,
        }
    }
}

/// `(rtt + syn)` in µs, at least one SYN interval.
fn rtt_plus_syn_us(ctx: &CcContext) -> f64 {
    ctx.rtt.as_micros() as f64 + syn_us(ctx)
}

impl UdtCc {
    /// True while the controller is in slow start.
    pub fn in_slow_start(&self) -> bool {
        self.slow_start
    }

    /// Leaves slow start: the period follows the receive rate, or the window over `rtt + syn`.
    fn end_slow_start(&mut self, ctx: &CcContext, ctl: &mut CcControl) {
        self.slow_start = false;
        ctl.send_period_us = if ctx.recv_rate_pps > 0 {
            1e6 / f64::from(ctx.recv_rate_pps)
        } else {
            rtt_plus_syn_us(ctx) / ctl.cwnd_pkts.max(MIN_CWND)
        };
    }

    /// One rate increase step (UDT's DAIMD increase), applied to `ctl.send_period_us`.
    fn increase(&self, ctx: &CcContext, ctl: &mut CcControl) {
        let mss = mss(ctx);
        let syn = syn_us(ctx);
        let period = ctl.send_period_us.max(MIN_PERIOD_US);
        let last_dec = self.last_dec_period.max(MIN_PERIOD_US);
        // SRT: never trust the capacity estimate beyond twice the rate at the last decrease.
        let loss_bw = 2.0 * 1e6 / last_dec;
        let bw = f64::from(ctx.bandwidth_pps).min(loss_bw);
        let mut spare = (bw - 1e6 / period).trunc();
        if period > last_dec && bw / 9.0 < spare {
            spare = (bw / 9.0).trunc();
        }
        let min_inc = 1.0 / mss;
        let inc = if spare > 0.0 {
            let step = 10f64.powf((spare * mss * 8.0).log10().ceil()) * INCREASE_BETA / mss;
            finite_or(step, min_inc).max(min_inc)
        } else {
            min_inc
        };
        ctl.send_period_us = finite_or(period * syn / (period * inc + syn), period);
    }

    /// One loss report (UDT's `onLoss`), after slow start has been dealt with.
    fn decrease(&mut self, ctx: &CcContext, ctl: &mut CcControl, first_lost: SeqNo) {
        let new_epoch = match self.last_dec_seq {
            None => true,
            Some(dec) => dec.lt(first_lost),
        };
        if new_epoch {
            self.last_dec_period = ctl.send_period_us;
            ctl.send_period_us = (ctl.send_period_us * DECREASE_FACTOR).ceil();
            self.start_epoch(ctx);
        } else {
            let allowed = self.dec_count < MAX_DECREASES_PER_EPOCH;
            self.dec_count = self.dec_count.saturating_add(1);
            if allowed {
                self.nak_count = self.nak_count.saturating_add(1);
                if self.nak_count.checked_rem(self.dec_random) == Some(0) {
                    ctl.send_period_us = (ctl.send_period_us * DECREASE_FACTOR).ceil();
                    self.last_dec_seq = Some(ctx.last_sent_seq);
                }
            }
        }
    }

    /// Opens a congestion epoch at the packets sent so far and draws its decrease threshold.
    fn start_epoch(&mut self, ctx: &CcContext) {
        let avg = f64::from(self.avg_nak) * (1.0 - NAK_AVG_WEIGHT)
            + f64::from(self.nak_count) * NAK_AVG_WEIGHT;
        self.avg_nak = finite_or(avg.ceil(), 1.0).clamp(0.0, f64::from(u32::MAX)) as u32;
        self.nak_count = 1;
        self.dec_count = 1;
        self.last_dec_seq = Some(ctx.last_sent_seq);
        let r = (f64::from(self.avg_nak) * unit_from_seq(ctx.last_sent_seq)).ceil();
        self.dec_random = (r as u32).max(1);
    }

    /// Keeps the outputs finite and within bounds, honouring a configured maximum bandwidth.
    fn clamp(ctx: &CcContext, ctl: &mut CcControl) {
        let mut min_period = MIN_PERIOD_US;
        if ctx.max_bw_bps > 0 {
            // Probe pairs send 16 packets in 15 periods: at this period, exactly the cap (it
            // was 6.7 % over).
            min_period =
                min_period.max(packet_bytes(ctx) * 1e6 / ctx.max_bw_bps as f64 * PROBE_PAIR_FACTOR);
        }
        let min_period = min_period.min(MAX_PERIOD_US);
        ctl.send_period_us =
            finite_or(ctl.send_period_us, min_period).clamp(min_period, MAX_PERIOD_US);
        let max_cwnd = (2.0 * flow_window(ctx)).max(MIN_CWND);
        ctl.cwnd_pkts = finite_or(ctl.cwnd_pkts, INITIAL_CWND).clamp(MIN_CWND, max_cwnd);
    }
}

impl CongestionControl for UdtCc {
    fn name(&self) -> &str {
        "file"
    }

    fn init(&mut self, ctx: &CcContext, ctl: &mut CcControl) {
        *self = UdtCc {
            last_rc_us: Some(ctx.now_us),
            ..UdtCc::default()
        };
        ctl.send_period_us = MIN_PERIOD_US;
        ctl.cwnd_pkts = INITIAL_CWND;
        Self::clamp(ctx, ctl);
    }

    fn on_ack(&mut self, ctx: &CcContext, ctl: &mut CcControl, _ack_seq: SeqNo, newly_acked: u32) {
        self.pending_acked = self.pending_acked.saturating_add(u64::from(newly_acked));
        let last = *self.last_rc_us.get_or_insert(ctx.now_us);
        if (ctx.now_us.saturating_sub(last) as f64) < syn_us(ctx) {
            return;
        }
        self.last_rc_us = Some(ctx.now_us);

        if self.slow_start {
            // Slow start is bounded by the window alone, and by a maximum bandwidth: its
            // period is recomputed from the cap on every step, since the packet size it is
            // counted in (see `super::packet_bytes`) is known only once packets are
            // acknowledged (from init, 64-byte messages stayed at a period sized for full
            // packets, a 14th of the cap).
            ctl.send_period_us = MIN_PERIOD_US;
            ctl.cwnd_pkts += self.pending_acked as f64;
            self.pending_acked = 0;
            if ctl.cwnd_pkts > flow_window(ctx) {
                self.end_slow_start(ctx, ctl);
            }
        } else {
            self.pending_acked = 0;
            ctl.cwnd_pkts =
                f64::from(ctx.recv_rate_pps) / 1e6 * rtt_plus_syn_us(ctx) + INITIAL_CWND;
            if self.loss {
                self.loss = false;
            } else {
                self.increase(ctx, ctl);
            }
        }
        Self::clamp(ctx, ctl);
    }

    fn on_loss(&mut self, ctx: &CcContext, ctl: &mut CcControl, losses: &[(SeqNo, SeqNo)]) {
        let Some(&(first_lost, _)) = losses.first() else {
            return;
        };
        self.loss = true;
        if self.slow_start {
            self.end_slow_start(ctx, ctl);
            Self::clamp(ctx, ctl);
            if ctx.recv_rate_pps > 0 {
                // Already at the delivered rate: open the epoch without a further decrease.
                self.last_dec_period = ctl.send_period_us;
                self.start_epoch(ctx);
                return;
            }
        }
        self.decrease(ctx, ctl, first_lost);
        Self::clamp(ctx, ctl);
    }

    fn on_timeout(&mut self, ctx: &CcContext, ctl: &mut CcControl) {
        // After slow start UDT leaves the rate alone on a timeout (its decrease there is
        // commented out): the EXP timer's retransmissions do the work.
        if self.slow_start {
            self.end_slow_start(ctx, ctl);
        }
        Self::clamp(ctx, ctl);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn ctx(now_us: u64) -> CcContext {
        CcContext {
            now_us,
            ..super::super::test_context(50, 5, 10000)
        }
    }

    fn started(c: &CcContext) -> (UdtCc, CcControl) {
        let mut cc = UdtCc::default();
        let mut ctl = CcControl::default();
        cc.init(c, &mut ctl);
        (cc, ctl)
    }

    /// Leaves slow start through a loss with a known receive rate; returns the time reached.
    fn past_slow_start(cc: &mut UdtCc, ctl: &mut CcControl, recv_rate: u32) -> CcContext {
        let mut c = ctx(10_000);
        c.recv_rate_pps = recv_rate;
        c.last_sent_seq = SeqNo::new(100);
        cc.on_loss(&c, ctl, &[(SeqNo::new(50), SeqNo::new(50))]);
        c
    }

    #[test]
    fn slow_start_doubles_about_once_per_rtt() {
        let c0 = ctx(0);
        let (mut cc, mut ctl) = started(&c0);
        assert_eq!(ctl.cwnd_pkts, INITIAL_CWND);
        assert!(ctl.send_period_us <= 1.0);
        // The whole window is acknowledged once per RTT (50 ms), in 10 ms ACK slices.
        let mut now = 0;
        let mut acked = 0u32;
        for _rtt in 0..5 {
            let before = ctl.cwnd_pkts;
            let window = ctl.cwnd_pkts as u32;
            for slice in 0..5 {
                now += 10_000;
                let n = window / 5 + u32::from(slice < window % 5);
                acked += n;
                cc.on_ack(&ctx(now), &mut ctl, SeqNo::new(acked), n);
            }
            assert!(cc.in_slow_start());
            assert_eq!(ctl.cwnd_pkts, 2.0 * before);
            assert!(ctl.send_period_us <= 1.0, "unpaced in slow start");
        }
        assert_eq!(ctl.cwnd_pkts, 16.0 * 32.0);
    }

    #[test]
    fn acks_within_one_syn_interval_are_accumulated() {
        let (mut cc, mut ctl) = started(&ctx(0));
        for i in 1..=9 {
            cc.on_ack(&ctx(i * 1_000), &mut ctl, SeqNo::new(i as u32), 1);
        }
        assert_eq!(ctl.cwnd_pkts, INITIAL_CWND, "no update before 10 ms");
        cc.on_ack(&ctx(10_000), &mut ctl, SeqNo::new(10), 1);
        assert_eq!(ctl.cwnd_pkts, INITIAL_CWND + 10.0);
    }

    #[test]
    fn slow_start_ends_beyond_the_flow_window() {
        let (mut cc, mut ctl) = started(&ctx(0));
        let mut c = ctx(10_000);
        c.flow_window = 100;
        c.recv_rate_pps = 5_000;
        cc.on_ack(&c, &mut ctl, SeqNo::new(100), 100);
        assert!(!cc.in_slow_start());
        assert_eq!(ctl.send_period_us, 200.0);
        assert!(ctl.cwnd_pkts <= 200.0);
    }

    #[test]
    fn loss_ends_slow_start_and_slows_down() {
        let (mut cc, mut ctl) = started(&ctx(0));
        past_slow_start(&mut cc, &mut ctl, 4_000);
        assert!(!cc.in_slow_start());
        assert_eq!(ctl.send_period_us, 250.0);

        // Without a receive rate: (rtt + syn) / cwnd, then one decrease.
        let (mut cc, mut ctl) = started(&ctx(0));
        let mut c = ctx(5_000);
        c.last_sent_seq = SeqNo::new(16);
        cc.on_loss(&c, &mut ctl, &[(SeqNo::new(3), SeqNo::new(4))]);
        assert!(!cc.in_slow_start());
        let from_window = 60_000.0 / 16.0;
        assert_eq!(ctl.send_period_us, (from_window * DECREASE_FACTOR).ceil());
    }

    #[test]
    fn new_epoch_decreases_by_one_eighth() {
        let (mut cc, mut ctl) = started(&ctx(0));
        let mut c = past_slow_start(&mut cc, &mut ctl, 4_000);
        let p = ctl.send_period_us;
        c.last_sent_seq = SeqNo::new(300);
        cc.on_loss(&c, &mut ctl, &[(SeqNo::new(150), SeqNo::new(152))]);
        assert_eq!(ctl.send_period_us, (p * 1.125).ceil());
    }

    #[test]
    fn repeated_losses_in_one_epoch_are_bounded() {
        let (mut cc, mut ctl) = started(&ctx(0));
        let mut c = past_slow_start(&mut cc, &mut ctl, 4_000);
        c.last_sent_seq = SeqNo::new(1_000);
        cc.on_loss(&c, &mut ctl, &[(SeqNo::new(500), SeqNo::new(500))]);
        let epoch_start = ctl.send_period_us;
        // Many NAKs for packets sent before the epoch began.
        for i in 0..200u32 {
            c.last_sent_seq = SeqNo::new(1_000 + i);
            cc.on_loss(
                &c,
                &mut ctl,
                &[(SeqNo::new(600 + i % 300), SeqNo::new(600 + i % 300))],
            );
        }
        // At most four more decreases (each rounded up to a whole µs).
        let bound = (0..4).fold(epoch_start, |p, _| (p * 1.125).ceil());
        assert!(
            ctl.send_period_us <= bound,
            "{} > {}",
            ctl.send_period_us,
            bound
        );
        assert!(ctl.send_period_us < 2.1 * epoch_start);
    }

    #[test]
    fn decrease_threshold_is_deterministic_and_in_range() {
        for s in [0u32, 1, 7, 1_000_000, SeqNo::MAX] {
            let u = unit_from_seq(SeqNo::new(s));
            assert!((0.0..1.0).contains(&u));
            assert_eq!(u, unit_from_seq(SeqNo::new(s)));
        }
        let mut cc = UdtCc {
            avg_nak: 7,
            nak_count: 20,
            ..UdtCc::default()
        };
        let mut c = ctx(0);
        c.last_sent_seq = SeqNo::new(12_345);
        cc.start_epoch(&c);
        assert!((1..=cc.avg_nak).contains(&cc.dec_random));
    }

    #[test]
    fn rate_increases_without_loss() {
        let (mut cc, mut ctl) = started(&ctx(0));
        let mut c = past_slow_start(&mut cc, &mut ctl, 1_000);
        let start = ctl.send_period_us;
        let mut prev = start;
        let mut now = c.now_us;
        // The first update after a loss only clears the loss flag.
        for i in 0..100 {
            now += 10_000;
            c.now_us = now;
            cc.on_ack(&c, &mut ctl, SeqNo::new(200 + i), 10);
            assert!(ctl.send_period_us <= prev);
            prev = ctl.send_period_us;
        }
        // One second without loss: at least 20 % faster (1000 -> ~1250 pkt/s)...
        assert!(
            ctl.send_period_us < start / 1.2,
            "{start} -> {}",
            ctl.send_period_us
        );
        // ...but beyond twice the rate at the last decrease (SRT's cap on the estimate), only by
        // the minimum increase of 1/MSS packet per SYN interval: 100 s adds < 667 pkt/s.
        for _ in 0..10_000 {
            now += 10_000;
            c.now_us = now;
            cc.on_ack(&c, &mut ctl, SeqNo::new(300), 10);
        }
        let rate = 1e6 / ctl.send_period_us;
        assert!(
            rate > 2_000.0 && rate < 2_000.0 + 10_000.0 * 100.0 / 1500.0,
            "{rate}"
        );
        // Window tracks the receive rate: 1000 pkt/s * 60 ms + 16.
        assert_eq!(ctl.cwnd_pkts, 76.0);
    }

    #[test]
    fn increase_follows_the_formula() {
        let (mut cc, mut ctl) = started(&ctx(0));
        let mut c = past_slow_start(&mut cc, &mut ctl, 1_000);
        let last_dec = ctl.send_period_us;
        c.now_us += 10_000;
        cc.on_ack(&c, &mut ctl, SeqNo::new(60), 1); // clears the loss flag
        for _ in 0..3 {
            let p = ctl.send_period_us;
            c.now_us += 10_000;
            cc.on_ack(&c, &mut ctl, SeqNo::new(61), 1);
            // Capacity estimate capped at twice the rate at the last decrease.
            let bw = f64::min(10_000.0, 2e6 / last_dec);
            let mut b = (bw - 1e6 / p).trunc();
            if p > last_dec && bw / 9.0 < b {
                b = (bw / 9.0).trunc();
            }
            let inc = if b > 0.0 {
                (10f64.powf((b * 1500.0 * 8.0).log10().ceil()) * 1.5e-6 / 1500.0).max(1.0 / 1500.0)
            } else {
                1.0 / 1500.0
            };
            let expect = p * 10_000.0 / (p * inc + 10_000.0);
            assert!((ctl.send_period_us - expect).abs() < 1e-9);
            assert!(ctl.send_period_us < p);
        }
    }

    #[test]
    fn max_bandwidth_bounds_the_rate() {
        let (mut cc, mut ctl) = started(&ctx(0));
        let mut c = past_slow_start(&mut cc, &mut ctl, 9_000);
        c.max_bw_bps = 1_500_000; // 1000 packets of 1500 bytes per second
        for _ in 0..50 {
            c.now_us += 10_000;
            cc.on_ack(&c, &mut ctl, SeqNo::new(1), 1);
        }
        assert_eq!(ctl.send_period_us, 1_000.0 * PROBE_PAIR_FACTOR);
    }

    #[test]
    fn timeout_ends_slow_start_from_the_window() {
        let (mut cc, mut ctl) = started(&ctx(0));
        cc.on_timeout(&ctx(1_000), &mut ctl);
        assert!(!cc.in_slow_start());
        assert_eq!(ctl.send_period_us, 60_000.0 / 16.0);
        let p = ctl.send_period_us;
        cc.on_timeout(&ctx(2_000), &mut ctl);
        assert_eq!(ctl.send_period_us, p);
    }

    #[test]
    fn zero_inputs_stay_finite() {
        let mut c = ctx(0);
        c.rtt = Duration::ZERO;
        c.syn_interval = Duration::ZERO;
        c.bandwidth_pps = 0;
        c.mss = 0;
        c.flow_window = 0;
        let (mut cc, mut ctl) = started(&c);
        cc.on_loss(&c, &mut ctl, &[]);
        cc.on_loss(&c, &mut ctl, &[(SeqNo::new(0), SeqNo::new(0))]);
        for i in 0..10 {
            c.now_us += 20_000;
            cc.on_ack(&c, &mut ctl, SeqNo::new(i), 0);
            cc.on_timeout(&c, &mut ctl);
        }
        assert!(ctl.send_period_us.is_finite() && ctl.cwnd_pkts.is_finite());
        assert!(ctl.send_period_us >= MIN_PERIOD_US && ctl.cwnd_pkts >= MIN_CWND);
    }

    #[derive(Debug, Clone)]
    enum Ev {
        Ack { dt: u32, acked: u32 },
        Loss { back: u32, len: u32 },
        Timeout { dt: u32 },
        Sent { n: u32 },
    }

    fn ev() -> impl Strategy<Value = Ev> {
        prop_oneof![
            (0u32..50_000, 0u32..100_000).prop_map(|(dt, acked)| Ev::Ack { dt, acked }),
            (0u32..5_000, 0u32..100).prop_map(|(back, len)| Ev::Loss { back, len }),
            (0u32..2_000_000).prop_map(|dt| Ev::Timeout { dt }),
            (0u32..10_000).prop_map(|n| Ev::Sent { n }),
        ]
    }

    proptest! {
        #[test]
        fn outputs_stay_finite_and_bounded(
            rtt_us in prop_oneof![Just(0u64), 0u64..2_000_000],
            syn_us in prop_oneof![Just(0u64), Just(10_000u64), 0u64..100_000],
            bw in prop_oneof![Just(0u32), Just(u32::MAX), 0u32..10_000_000],
            rate in prop_oneof![Just(0u32), Just(u32::MAX), 0u32..10_000_000],
            mss in prop_oneof![Just(0u32), 1u32..10_000],
            fw in prop_oneof![Just(0u32), Just(u32::MAX), 1u32..100_000],
            max_bw in prop_oneof![Just(0u64), Just(1u64), 0u64..10_000_000_000],
            events in proptest::collection::vec(ev(), 0..200),
        ) {
            let mut c = ctx(0);
            c.rtt = Duration::from_micros(rtt_us);
            c.syn_interval = Duration::from_micros(syn_us);
            c.bandwidth_pps = bw;
            c.recv_rate_pps = rate;
            c.mss = mss;
            c.flow_window = fw;
            c.max_bw_bps = max_bw;
            let (mut cc, mut ctl) = started(&c);
            let mut sent = SeqNo::new(0);
            let max_cwnd = 2.0 * if fw > 0 { f64::from(fw) } else { 25_600.0 };
            for e in events {
                match e {
                    Ev::Ack { dt, acked } => {
                        c.now_us += u64::from(dt);
                        cc.on_ack(&c, &mut ctl, sent, acked);
                    }
                    Ev::Loss { back, len } => {
                        let first = sent.sub(back);
                        cc.on_loss(&c, &mut ctl, &[(first, first.add(len))]);
                    }
                    Ev::Timeout { dt } => {
                        c.now_us += u64::from(dt);
                        cc.on_timeout(&c, &mut ctl);
                    }
                    Ev::Sent { n } => {
                        sent = sent.add(n);
                        c.last_sent_seq = sent;
                    }
                }
                prop_assert!(ctl.send_period_us.is_finite());
                prop_assert!(ctl.cwnd_pkts.is_finite());
                prop_assert!((MIN_PERIOD_US..=MAX_PERIOD_US).contains(&ctl.send_period_us));
                prop_assert!(ctl.cwnd_pkts >= MIN_CWND && ctl.cwnd_pkts <= max_cwnd);
            }
        }
    }
}
