//! Composable congestion control (Gu & Grossman, "Composable UDT", §3 and Fig. 5): a controller
//! is a set of event handlers that set the sending period and/or the congestion window.
//!
//! The engine calls the handlers; a controller never sees sockets or clocks — the current time
//! arrives in [`CcContext::now_us`]. Built-in controllers: [`udt::UdtCc`] ("file", UDT's native
//! rate control, as SRT's FileCC), [`live::LiveCc`] ("live", pacing at a maximum bandwidth).
//! Users add their own through [`CcRegistry`].

pub mod bbr;
pub mod live;
pub mod udt;

use crate::seq::SeqNo;
use std::fmt;
use std::time::Duration;

/// What a controller may read when an event arrives. Filled by the engine.
#[derive(Debug, Clone, Copy)]
pub struct CcContext {
    /// Microseconds since the connection started (virtual or real time, as the engine was given).
    pub now_us: u64,
    /// Smoothed round-trip time.
    pub rtt: Duration,
    /// Round-trip time variance.
    pub rtt_var: Duration,
    /// Link capacity estimated by the receiver from packet pairs, packets per second (0 if unknown).
    pub bandwidth_pps: u32,
    /// The arrival speed the receiver reports (the ACK's packet-rate field, see
    /// [`recv_rate_last_pps`](Self::recv_rate_last_pps) for the average), packets/s, smoothed
    /// over full ACKs with weight 1/8 as UDT does (0 if unknown).
    pub recv_rate_pps: u32,
    /// The delivery rate of the latest full ACK that carried one, unsmoothed, packets/s (0 if
    /// none yet): what arrived over the receiver's last ACK interval from a slipstream receiver
    /// (its byte-rate field, divided by the mean payload of the packets acknowledged: small
    /// messages are small packets), the median-filtered arrival speed from libsrt.
    pub recv_rate_last_pps: u32,
    /// Bytes per second the receiver reports receiving (0 if unknown).
    pub recv_rate_bps: u64,
    /// Maximum segment size (IP packet size) in bytes.
    pub mss: u32,
    /// Payload bytes per full data packet.
    pub payload_size: u32,
    /// The peer's flow window (receiver buffer space) in packets.
    pub flow_window: u32,
    /// Largest sequence number sent so far.
    pub last_sent_seq: SeqNo,
    /// The SYN (rate control) interval, 10 ms in SRT.
    pub syn_interval: Duration,
    /// The packets the engine presumes in the network, the count its window bounds: those
    /// sent after the packet following the highest reported loss (the receiver has that one),
    /// plus unacknowledged retransmissions. Unlike `last_sent_seq` minus the ACK point it does
    /// not count the packets delivered behind a hole.
    pub pkts_in_network: u32,
    /// Total data packets sent, retransmissions included.
    pub pkts_sent: u64,
    /// Total packets reported lost by the receiver.
    pub pkts_lost: u64,
    /// Configured maximum bandwidth in bytes per second (0 = none).
    pub max_bw_bps: u64,
    /// Application input rate in bytes per second, as measured by the engine (0 if unknown).
    pub input_rate_bps: u64,
    /// Total time, µs, since its first data packet that the sender was due to send new data
    /// and did not: it had nothing to send, or it was kept from running for longer than its
    /// pacing credit (also in [`ConnStats::send_lag_us`](crate::conn::ConnStats::send_lag_us)). Packets sent over
    /// such time go out slower than the controller asked, and rate reports on them measure
    /// the sender, not the path (BBR's "application-limited" samples). Never decreases.
    pub send_lag_us: u64,
    /// Whether everything the application queued has been sent (nothing waits for its
    /// turn): what is in flight, and the reports on it, measure the application, not the
    /// path. A transfer that opens with a few bytes and then waits (for the peer's answer, or
    /// while it reads) is application-limited until its data follows.
    pub app_limited: bool,
    /// Mean payload of the packets lately acknowledged, bytes (0: none yet). Small messages
    /// travel in packets far below the MSS; a maximum bandwidth in bytes turns into packets
    /// by this, not by the MSS.
    pub avg_payload: u32,
}

/// What a controller sets. The engine reads it after every handler returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CcControl {
    /// Inter-packet sending period in microseconds (0 = unpaced).
    pub send_period_us: f64,
    /// Congestion window in packets (packets in flight allowed).
    pub cwnd_pkts: f64,
    /// Ask the receiver to acknowledge every N packets (None = protocol default, light ACK / 64).
    pub ack_interval_pkts: Option<u32>,
    /// Override the retransmission timeout (None = the engine's RTT-based EXP timer).
    pub rto: Option<Duration>,
}

impl Default for CcControl {
    fn default() -> Self {
        CcControl {
            send_period_us: 1.0,
            cwnd_pkts: 16.0,
            ack_interval_pkts: None,
            rto: None,
        }
    }
}

/// A congestion controller: UDT's event handlers. Every handler has a default that does nothing.
pub trait CongestionControl: fmt::Debug + Send {
    /// Short name, as selected with `--cc`.
    fn name(&self) -> &str;
    /// Called once when the connection is established.
    fn init(&mut self, ctx: &CcContext, ctl: &mut CcControl) {
        let _ = (ctx, ctl);
    }
    /// A full ACK acknowledged everything before `ack_seq`; `newly_acked` packets were freed.
    fn on_ack(&mut self, ctx: &CcContext, ctl: &mut CcControl, ack_seq: SeqNo, newly_acked: u32) {
        let _ = (ctx, ctl, ack_seq, newly_acked);
    }
    /// The receiver reported these inclusive ranges lost.
    fn on_loss(&mut self, ctx: &CcContext, ctl: &mut CcControl, losses: &[(SeqNo, SeqNo)]) {
        let _ = (ctx, ctl, losses);
    }
    /// The retransmission (EXP) timer fired with data outstanding.
    fn on_timeout(&mut self, ctx: &CcContext, ctl: &mut CcControl) {
        let _ = (ctx, ctl);
    }
    /// A data packet was sent (`retransmit` for retransmissions).
    fn on_packet_sent(
        &mut self,
        ctx: &CcContext,
        ctl: &mut CcControl,
        seq: SeqNo,
        bytes: usize,
        retransmit: bool,
    ) {
        let _ = (ctx, ctl, seq, bytes, retransmit);
    }
    /// A data packet arrived (receiver side).
    fn on_packet_received(
        &mut self,
        ctx: &CcContext,
        ctl: &mut CcControl,
        seq: SeqNo,
        bytes: usize,
    ) {
        let _ = (ctx, ctl, seq, bytes);
    }
    /// A user-defined control packet arrived from the peer.
    fn on_custom_message(
        &mut self,
        ctx: &CcContext,
        ctl: &mut CcControl,
        subtype: u16,
        body: &[u8],
    ) {
        let _ = (ctx, ctl, subtype, body);
    }
}

// ---- guards shared by the controllers: every input may be zero or absurd ----

/// SYN interval assumed when the context gives none (SRT's COMM_SYN_INTERVAL_US).
const DEFAULT_SYN_US: f64 = 10_000.0;
/// MSS assumed when the context gives none.
const DEFAULT_MSS: f64 = 1_500.0;
/// Flow window assumed when the peer's is not known (SRT's default SRTO_FC).
const DEFAULT_FLOW_WINDOW: f64 = 25_600.0;

/// Replaces a non-finite value.
pub(crate) fn finite_or(x: f64, fallback: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        fallback
    }
}

/// The SYN interval in µs, or SRT's 10 ms when the context has none.
pub(crate) fn syn_us(ctx: &CcContext) -> f64 {
    let s = ctx.syn_interval.as_micros() as f64;
    if s > 0.0 {
        s
    } else {
        DEFAULT_SYN_US
    }
}

/// The MSS, or 1500 when the context has none.
pub(crate) fn mss(ctx: &CcContext) -> f64 {
    if ctx.mss > 0 {
        f64::from(ctx.mss)
    } else {
        DEFAULT_MSS
    }
}

/// The engine sends 16 packets per 15 periods (the first of every SRT probe pair goes
/// back to back with the next): a period meant as a rate is scaled by this.
pub(crate) const PROBE_PAIR_FACTOR: f64 = 16.0 / 15.0;

/// Bytes a data packet takes on the wire, for turning a maximum bandwidth into packets: the
/// MSS for full packets; for smaller ones their mean payload plus the headers (the MSS less
/// the full payload). With the MSS alone, a 10 Mbit/s cap let 64-byte messages through at
/// 0.6 Mbit/s.
pub(crate) fn packet_bytes(ctx: &CcContext) -> f64 {
    let full = mss(ctx);
    if ctx.avg_payload == 0 || ctx.payload_size == 0 || ctx.mss < ctx.payload_size {
        return full;
    }
    let headers = f64::from(ctx.mss - ctx.payload_size);
    (f64::from(ctx.avg_payload) + headers).min(full)
}

/// The peer's flow window in packets, or SRT's default when unknown.
pub(crate) fn flow_window(ctx: &CcContext) -> f64 {
    if ctx.flow_window > 0 {
        f64::from(ctx.flow_window)
    } else {
        DEFAULT_FLOW_WINDOW
    }
}

/// A deterministic value in [0, 1) from a sequence number (SplitMix64 finaliser): random-looking
/// choices that replay exactly for the same packets, with no hidden generator state.
pub(crate) fn unit_from_seq(seq: SeqNo) -> f64 {
    let mut z = u64::from(seq.get()).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A context for controller unit tests: a 1500-byte MSS, an 8192-packet window, nothing
/// sent yet; the tests vary what they exercise.
#[cfg(test)]
pub(crate) fn test_context(rtt_ms: u64, rtt_var_ms: u64, bandwidth_pps: u32) -> CcContext {
    CcContext {
        now_us: 0,
        rtt: Duration::from_millis(rtt_ms),
        rtt_var: Duration::from_millis(rtt_var_ms),
        bandwidth_pps,
        recv_rate_pps: 0,
        recv_rate_bps: 0,
        recv_rate_last_pps: 0,
        mss: 1500,
        payload_size: 1456,
        flow_window: 8192,
        last_sent_seq: SeqNo::new(0),
        syn_interval: Duration::from_millis(10),
        pkts_in_network: 0,
        pkts_sent: 0,
        pkts_lost: 0,
        max_bw_bps: 0,
        input_rate_bps: 0,
        send_lag_us: 0,
        app_limited: false,
        avg_payload: 0,
    }
}

/// Builds a controller for a new connection.
pub type CcFactory = fn() -> Box<dyn CongestionControl>;

/// Named controller factories: the built-ins plus whatever the application registers.
#[derive(Clone)]
pub struct CcRegistry {
    entries: Vec<(String, CcFactory)>,
}

impl fmt::Debug for CcRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| &e.0))
            .finish()
    }
}

impl Default for CcRegistry {
    fn default() -> Self {
        let mut r = CcRegistry {
            entries: Vec::new(),
        };
        r.register("file", || Box::new(udt::UdtCc::default()));
        r.register("udt", || Box::new(udt::UdtCc::default()));
        r.register("live", || Box::new(live::LiveCc::default()));
        r.register("bbr", || Box::new(bbr::Bbr::default()));
        r
    }
}

impl CcRegistry {
    /// Adds or replaces a named controller.
    pub fn register(&mut self, name: &str, factory: CcFactory) {
        self.entries.retain(|e| e.0 != name);
        self.entries.push((name.to_string(), factory));
    }
    /// Builds the controller called `name`.
    pub fn build(&self, name: &str) -> Option<Box<dyn CongestionControl>> {
        self.entries.iter().find(|e| e.0 == name).map(|e| (e.1)())
    }
    /// Registered names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.0.as_str())
    }
}
