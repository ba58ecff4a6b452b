//! A user-defined congestion controller: the simplified TCP of Gu & Grossman, "Composable UDT"
//! (§3, Fig. 5), written against slipstream's `CongestionControl` trait and registered as "tcp".
//!
//! Like Fig. 5 it turns rate control off (period 0), starts with a window of two packets, asks
//! for an ACK every second packet, grows the window by 1/cwnd per acknowledged packet and
//! halves it on loss. It adds what Fig. 5 leaves out: slow start below `ssthresh`, one halving
//! per window of data (losses of packets sent before the last halving are old news), and a
//! timeout reaction.
//!
//! Run with `cargo run --example tcp_cc -- send FILE srt://HOST:PORT --cc tcp` (the full
//! slipstream command line, with "tcp" registered); `cargo test --example tcp_cc` runs the
//! controller's self-check.

use slipstream_proto::cc::{CcContext, CcControl, CcRegistry, CongestionControl};
use slipstream_proto::seq::SeqNo;
use std::process::ExitCode;

/// TCP-like window control (Composable UDT, Fig. 5, plus slow start).
#[derive(Debug, Default)]
struct SimpleTcp {
    ssthresh: f64,
    recover: SeqNo,
}

impl CongestionControl for SimpleTcp {
    fn name(&self) -> &str {
        "tcp"
    }

    fn init(&mut self, ctx: &CcContext, ctl: &mut CcControl) {
        ctl.send_period_us = 0.0; // no rate control: the window alone limits sending
        ctl.cwnd_pkts = 2.0;
        ctl.ack_interval_pkts = Some(2); // acknowledge every second packet
        self.ssthresh = f64::INFINITY;
        self.recover = ctx.last_sent_seq;
    }

    fn on_ack(&mut self, _ctx: &CcContext, ctl: &mut CcControl, _ack: SeqNo, newly_acked: u32) {
        for _ in 0..newly_acked {
            if ctl.cwnd_pkts < self.ssthresh {
                ctl.cwnd_pkts += 1.0; // slow start: doubles every round trip
            } else {
                ctl.cwnd_pkts += 1.0 / ctl.cwnd_pkts; // congestion avoidance: +1 per round trip
            }
        }
    }

    fn on_loss(&mut self, ctx: &CcContext, ctl: &mut CcControl, losses: &[(SeqNo, SeqNo)]) {
        if losses.iter().any(|&(first, _)| self.recover.lt(first)) {
            ctl.cwnd_pkts = (ctl.cwnd_pkts * 0.5).max(2.0);
            self.ssthresh = ctl.cwnd_pkts;
            self.recover = ctx.last_sent_seq;
        }
    }

    fn on_timeout(&mut self, ctx: &CcContext, ctl: &mut CcControl) {
        self.ssthresh = (ctl.cwnd_pkts * 0.5).max(2.0);
        ctl.cwnd_pkts = 2.0; // two, not one: the receiver acknowledges every second packet
        self.recover = ctx.last_sent_seq;
    }
}

/// The slipstream command line with "tcp" available: `--cc tcp`.
fn registry() -> CcRegistry {
    let mut registry = CcRegistry::default();
    registry.register("tcp", || Box::new(SimpleTcp::default()));
    registry
}

fn main() -> ExitCode {
    slipstream_cli::cli::run_with(registry())
}

#[test]
fn tcp_controller_self_check() {
    self_check(&registry());
}

#[cfg(test)]
/// Drives the registered "tcp" controller through a few events and checks its reactions.
fn self_check(registry: &CcRegistry) {
    let ctx = |last_sent: u32| CcContext {
        now_us: 0,
        rtt: std::time::Duration::from_millis(10),
        rtt_var: std::time::Duration::from_millis(1),
        bandwidth_pps: 0,
        recv_rate_pps: 0,
        recv_rate_bps: 0,
        mss: 1500,
        payload_size: 1456,
        flow_window: 8192,
        last_sent_seq: SeqNo::new(last_sent),
        syn_interval: std::time::Duration::from_millis(10),
        pkts_sent: 0,
        pkts_lost: 0,
        max_bw_bps: 0,
        input_rate_bps: 0,
    };
    let mut cc = registry.build("tcp").expect("\"tcp\" is registered");
    let mut ctl = CcControl::default();
    cc.init(&ctx(0), &mut ctl);
    assert_eq!(
        (ctl.send_period_us, ctl.cwnd_pkts, ctl.ack_interval_pkts),
        (0.0, 2.0, Some(2))
    );

    // Slow start: each round trip acknowledges a full window and doubles it.
    let mut sent = 0;
    for _ in 0..4 {
        let window = ctl.cwnd_pkts as u32;
        sent += window;
        cc.on_ack(&ctx(sent), &mut ctl, SeqNo::new(sent), window);
    }
    assert_eq!(ctl.cwnd_pkts, 32.0);
    println!(
        "after 4 round trips of slow start: cwnd = {}",
        ctl.cwnd_pkts
    );

    // A loss halves the window once; more losses from the same window do not.
    cc.on_loss(
        &ctx(sent + 32),
        &mut ctl,
        &[(SeqNo::new(sent + 5), SeqNo::new(sent + 5))],
    );
    cc.on_loss(
        &ctx(sent + 33),
        &mut ctl,
        &[(SeqNo::new(sent + 9), SeqNo::new(sent + 9))],
    );
    assert_eq!(ctl.cwnd_pkts, 16.0);
    println!("after losses in one window: cwnd = {}", ctl.cwnd_pkts);

    // Congestion avoidance: one more packet per round trip.
    sent += 33;
    cc.on_ack(&ctx(sent), &mut ctl, SeqNo::new(sent), 16);
    assert!((ctl.cwnd_pkts - 17.0).abs() < 0.05);
    println!(
        "after one round trip of congestion avoidance: cwnd = {:.2}",
        ctl.cwnd_pkts
    );

    cc.on_timeout(&ctx(sent), &mut ctl);
    assert_eq!(ctl.cwnd_pkts, 2.0);
    println!("after a timeout: cwnd = {}", ctl.cwnd_pkts);
    println!("self-check passed");
}
