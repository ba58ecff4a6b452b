//! The "bbr" controller with a trace: one line on standard error per full ACK, with what the
//! controller saw and decided. Registered as "bbr-trace" and run from the full command line:
//!
//! ```sh
//! cargo run --release --example bbr_trace -- send FILE srt://HOST:PORT --cc bbr-trace 2>trace.txt
//! ```
//!
//! Fields: `t` µs since the connection started, `acked` packets the ACK newly covers, `rate`
//! and `rate_last` the receiver's smoothed and latest reported arrival rates (packets/s),
//! `in_net` packets in the network, `lag` the sender's accumulated lag (µs), `period` the
//! sending period (µs), `cwnd` (packets), the controller's state and pacing gain, `bw` its
//! bottleneck estimate (packets/s), `min_rtt` (µs), and the engine's smoothed `rtt` (µs).
//! `SLIPSTREAM_HUGEPAGES=1` works as for the `slipstream` binary.

use slipstream_proto::cc::bbr::Bbr;
use slipstream_proto::cc::{CcContext, CcControl, CcRegistry, CongestionControl};
use slipstream_proto::seq::SeqNo;
use std::process::ExitCode;

#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOC: slipstream::HugePageAlloc = slipstream::HugePageAlloc;

/// [`Bbr`], printing its state after every full ACK.
#[derive(Debug, Default)]
struct Traced(Bbr);

impl CongestionControl for Traced {
    fn name(&self) -> &str {
        "bbr-trace"
    }
    fn init(&mut self, ctx: &CcContext, ctl: &mut CcControl) {
        self.0.init(ctx, ctl)
    }
    fn on_ack(&mut self, ctx: &CcContext, ctl: &mut CcControl, ack: SeqNo, newly: u32) {
        self.0.on_ack(ctx, ctl, ack, newly);
        eprintln!(
            "t={} acked={newly} rate={} rate_last={} in_net={} lag={} period={:.1} cwnd={:.0} \
             state={:?} gain={:.3} bw={:.0} min_rtt={:.0} rtt={}",
            ctx.now_us,
            ctx.recv_rate_pps,
            ctx.recv_rate_last_pps,
            ctx.pkts_in_network,
            ctx.send_lag_us,
            ctl.send_period_us,
            ctl.cwnd_pkts,
            self.0.state(),
            self.0.pacing_gain(),
            self.0.btl_bw_pps(),
            self.0.min_rtt_us(),
            ctx.rtt.as_micros()
        );
    }
    fn on_loss(&mut self, ctx: &CcContext, ctl: &mut CcControl, losses: &[(SeqNo, SeqNo)]) {
        self.0.on_loss(ctx, ctl, losses)
    }
    fn on_timeout(&mut self, ctx: &CcContext, ctl: &mut CcControl) {
        eprintln!("t={} timeout", ctx.now_us);
        self.0.on_timeout(ctx, ctl)
    }
    fn on_packet_sent(
        &mut self,
        ctx: &CcContext,
        ctl: &mut CcControl,
        seq: SeqNo,
        bytes: usize,
        retransmit: bool,
    ) {
        self.0.on_packet_sent(ctx, ctl, seq, bytes, retransmit)
    }
}

fn main() -> ExitCode {
    #[cfg(target_os = "linux")]
    if std::env::var_os("SLIPSTREAM_HUGEPAGES").is_some_and(|v| v == "1") {
        slipstream::HugePageAlloc::enable();
    }
    let mut registry = CcRegistry::default();
    registry.register("bbr-trace", || Box::new(Traced::default()));
    slipstream_cli::cli::run_with(registry)
}
