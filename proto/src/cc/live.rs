//! Live pacing, as SRT's LiveCC (draft-sharabayko-srt §5.2 "Live congestion control"; libsrt
//! `srtcore/congctl.cpp`).
//!
//! Live streams must not be throttled below their input rate, and late packets are dropped by
//! the receiver's TSBPD rather than retransmitted forever, so this controller has no window and
//! ignores loss and timeouts. It only paces: the period is the time one packet takes at the
//! maximum bandwidth,
//!
//! `send_period_us = avg_payload_bytes * 1e6 / max_bw_bps`
//!
//! where `max_bw_bps` is the configured maximum bandwidth ([`CcContext::max_bw_bps`],
//! SRTO_MAXBW) when set; otherwise the larger of the measured input rate plus 25 % overhead
//! ([`CcContext::input_rate_bps`] × 1.25) and 1 Gbit/s (125 000 000 B/s, libsrt's
//! `BW_INFINITE`). Pacing below the input rate would queue a live source without bound, and a
//! rate estimated from a slow or bursty start (small messages, silence) is easily far too low,
//! so an estimate never lowers the rate below the 1 Gbit/s default. The period is recomputed on
//! connection, on every ACK and on every timeout, so bandwidth changes are picked up.
//!
//! `avg_payload_bytes` starts at [`CcContext::payload_size`] and follows the sent packets with
//! libsrt's moving average (weight 1/128), because live packets are usually smaller than the
//! maximum payload (7 × 188 = 1316 bytes of MPEG-TS). With full packets the formula is
//! `payload_size * 1e6 / max_bw_bps`. Unlike libsrt, the header bytes are not counted.

use super::{CcContext, CcControl, CongestionControl};
use crate::seq::SeqNo;

/// Default maximum bandwidth when nothing is configured or measured: 1 Gbit/s in bytes/s.
pub const DEFAULT_MAX_BW_BPS: u64 = 125_000_000;
/// Overhead added to a measured input rate (SRT's default SRTO_OHEADBW, 25 %).
pub const INPUT_OVERHEAD: f64 = 1.25;
/// Congestion window: no window limit in live mode.
pub const LIVE_CWND: f64 = 1e9;
/// Payload size assumed when the context gives none (SRT's live payload, 7 × 188).
const DEFAULT_PAYLOAD: f64 = 1316.0;
/// Largest period in µs (one packet per second).
const MAX_PERIOD_US: f64 = 1_000_000.0;
/// Weight of a new sample in the average payload size.
const AVG_WEIGHT: f64 = 1.0 / 128.0;

/// Live pacing controller. See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct LiveCc {
    /// Moving average of the payload bytes per sent packet; `None` until known.
    avg_payload: Option<f64>,
}

impl LiveCc {
    /// The bandwidth pacing aims at, bytes per second.
    pub fn max_bw_bps(ctx: &CcContext) -> f64 {
        if ctx.max_bw_bps > 0 {
            ctx.max_bw_bps as f64
        } else {
            (ctx.input_rate_bps as f64 * INPUT_OVERHEAD).max(DEFAULT_MAX_BW_BPS as f64)
        }
    }

    fn payload(&self, ctx: &CcContext) -> f64 {
        match self.avg_payload {
            Some(p) => p,
            None if ctx.payload_size > 0 => f64::from(ctx.payload_size),
            None => DEFAULT_PAYLOAD,
        }
    }

    fn update(&self, ctx: &CcContext, ctl: &mut CcControl) {
        let period = self.payload(ctx) * 1e6 / Self::max_bw_bps(ctx);
        ctl.send_period_us = if period.is_finite() {
            period.clamp(0.0, MAX_PERIOD_US)
        } else {
            0.0
        };
        ctl.cwnd_pkts = LIVE_CWND;
    }
}

impl CongestionControl for LiveCc {
    fn name(&self) -> &str {
        "live"
    }

    fn init(&mut self, ctx: &CcContext, ctl: &mut CcControl) {
        self.avg_payload = None;
        self.update(ctx, ctl);
    }

    fn on_ack(&mut self, ctx: &CcContext, ctl: &mut CcControl, _ack_seq: SeqNo, _newly_acked: u32) {
        self.update(ctx, ctl);
    }

    fn on_timeout(&mut self, ctx: &CcContext, ctl: &mut CcControl) {
        self.update(ctx, ctl);
    }

    /// Tracks the average payload; `bytes` is the packet's payload length.
    fn on_packet_sent(
        &mut self,
        ctx: &CcContext,
        _ctl: &mut CcControl,
        _seq: SeqNo,
        bytes: usize,
        _retransmit: bool,
    ) {
        let limit = if ctx.payload_size > 0 {
            f64::from(ctx.payload_size)
        } else {
            DEFAULT_PAYLOAD
        };
        let sample = (bytes as f64).clamp(1.0, limit);
        let avg = self.payload(ctx);
        self.avg_payload = Some(avg + (sample - avg) * AVG_WEIGHT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> CcContext {
        super::super::test_context(20, 2, 0)
    }

    fn started(c: &CcContext) -> (LiveCc, CcControl) {
        let mut cc = LiveCc::default();
        let mut ctl = CcControl::default();
        cc.init(c, &mut ctl);
        (cc, ctl)
    }

    #[test]
    fn default_is_one_gigabit() {
        let (_, ctl) = started(&ctx());
        assert!((ctl.send_period_us - 1456.0 * 1e6 / 125e6).abs() < 1e-9);
        assert_eq!(ctl.cwnd_pkts, LIVE_CWND);
    }

    #[test]
    fn max_bw_wins_over_input_rate() {
        let mut c = ctx();
        c.max_bw_bps = 1_456_000;
        c.input_rate_bps = 10_000;
        let (_, ctl) = started(&c);
        assert!((ctl.send_period_us - 1_000.0).abs() < 1e-9);
    }

    #[test]
    fn input_rate_gets_overhead() {
        let mut c = ctx();
        c.input_rate_bps = 1_000_000;
        let (_, ctl) = started(&c);
        // A low estimate never paces below the 1 Gbit/s default...
        assert!((ctl.send_period_us - 1456.0 * 1e6 / 125_000_000.0).abs() < 1e-9);
        // ...a high one gets its 25 % overhead.
        c.input_rate_bps = 200_000_000;
        let (_, ctl) = started(&c);
        assert!((ctl.send_period_us - 1456.0 * 1e6 / 250_000_000.0).abs() < 1e-9);
    }

    #[test]
    fn reevaluated_on_ack_and_deaf_to_loss() {
        let mut c = ctx();
        let (mut cc, mut ctl) = started(&c);
        c.max_bw_bps = 1_456_000;
        cc.on_ack(&c, &mut ctl, SeqNo::new(10), 10);
        assert!((ctl.send_period_us - 1_000.0).abs() < 1e-9);
        let before = ctl;
        cc.on_loss(&c, &mut ctl, &[(SeqNo::new(3), SeqNo::new(7))]);
        assert_eq!(ctl, before);
        cc.on_timeout(&c, &mut ctl);
        assert_eq!(ctl, before);
    }

    #[test]
    fn follows_the_average_payload() {
        let mut c = ctx();
        c.max_bw_bps = 1_316_000;
        let (mut cc, mut ctl) = started(&c);
        for i in 0..2_000 {
            cc.on_packet_sent(&c, &mut ctl, SeqNo::new(i), 1316, false);
        }
        cc.on_ack(&c, &mut ctl, SeqNo::new(2_000), 2_000);
        assert!(
            (ctl.send_period_us - 1_000.0).abs() < 0.01,
            "{}",
            ctl.send_period_us
        );
    }

    #[test]
    fn degenerate_inputs_stay_finite() {
        let mut c = ctx();
        c.payload_size = 0;
        c.max_bw_bps = 1;
        let (mut cc, mut ctl) = started(&c);
        assert_eq!(ctl.send_period_us, MAX_PERIOD_US);
        cc.on_packet_sent(&c, &mut ctl, SeqNo::new(0), 0, false);
        c.max_bw_bps = u64::MAX;
        cc.on_ack(&c, &mut ctl, SeqNo::new(1), 1);
        assert!(ctl.send_period_us.is_finite() && ctl.send_period_us >= 0.0);
    }
}
