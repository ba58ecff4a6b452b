//! One SRT connection, sans-IO: the sender and receiver halves, timers, handshake (caller side)
//! and the application-facing operations.
//!
//! # Calling protocol
//!
//! A `Connection` lives inside an [`Endpoint`](crate::endpoint::Endpoint), which owns the
//! socket-id demultiplexing and the listener. The endpoint feeds it and drains it; the
//! application only calls the *application operations*.
//!
//! - Input (endpoint): `handle_packet(now, packet)` for every datagram addressed to it;
//!   `handle_timeout(now)` when `poll_timeout()` has passed.
//! - Output (endpoint): `poll_transmit(now, buf)` until `None` after any input or timeout;
//!   `poll_timeout()` for the next deadline; `poll_event()` for state changes.
//! - Application operations: `send` / `send_message`, `recv` / `recv_message`, `close`,
//!   `abort`; getters `stats`, `state`, `is_readable`, `is_writable`, `peer_stream_id`, …
//!   After an application operation, the endpoint's owner must call `poll_transmit` again.
//!
//! Time is always an argument (`now: Instant`); the connection never reads a clock. All
//! internal times are microseconds since the connection was created.

mod config;
mod event;
pub(crate) mod handshake;
mod pressure;
mod receiver;
mod recv_buf;
mod send_buf;
mod sender;
mod stats;

pub use config::{ConnConfig, MaxBw, Mode};
pub use event::{CloseReason, Event};
pub use recv_buf::{Payload, OWNED_PAYLOAD_MIN};
pub use send_buf::{SharedBytes, MAX_CHUNK};
pub use stats::ConnStats;

use crate::cc::{CcContext, CcControl, CongestionControl};
use crate::loss::LossList;
use crate::rate::{AckRateTracker, RateEstimator};
use crate::seq::SeqNo;
use crate::wire::{
    Control, ControlBody, DataHeader, Handshake, Packet, HEADER_LEN, UDP_IPV4_OVERHEAD,
};
pub(crate) use pressure::Pressure;
use recv_buf::RecvBuffer;
use send_buf::SendBuffer;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

/// The chunk length [`Connection::chunk_len`] aims at, bytes.
pub const CHUNK_BYTES: usize = 1 << 20;

/// SRT's SYN interval: full ACKs and rate-control decisions every 10 ms.
pub const SYN_INTERVAL_US: u64 = 10_000;
/// How long a least round-trip sample stands before a larger one replaces it (a path that
/// got longer is noticed within this time).
const MIN_RTT_WINDOW_US: u64 = 10_000_000;
/// Light ACK after this many packets.
pub(super) const LIGHT_ACK_PKTS: u32 = 64;
/// The RTT assumed until the first sample (SRT's default too, so a peer that has no sample
/// yet reports exactly this in its ACKs).
pub(crate) const INITIAL_RTT_US: u64 = 100_000;
/// ... and its variance (libsrt's too).
pub(crate) const INITIAL_RTTVAR_US: u64 = 50_000;
/// Keep-alive after this much silence from our side.
const KEEPALIVE_US: u64 = 1_000_000;
/// The grid keepalives and idle timeouts fall due on, µs: they may be this much late.
const TIMER_GRID_US: u64 = 20_000;
/// Handshake retransmission interval.
pub(super) const HS_RETRY_US: u64 = 250_000;
/// Minimum retransmission timeout (UDT/SRT `m_uMinExpInterval`).
const MIN_EXP_US: u64 = 300_000;

/// Where the connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Caller: handshake in progress.
    Connecting,
    /// Data can flow.
    Connected,
    /// close() was called; unacknowledged data is still being delivered.
    Closing,
    /// Ended; buffered received data can still be read.
    Closed(CloseReason),
}

/// Which side of the handshake we were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// We connected.
    Caller,
    /// We accepted.
    Listener,
}

/// Why `send` / `send_message` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendError {
    /// The send buffer is full; wait until `is_writable()`.
    WouldBlock,
    /// The message is larger than the send buffer can ever hold.
    TooLarge,
    /// Wrong call for this mode (stream `send` on a message connection, or the reverse).
    WrongMode,
    /// Not connected yet.
    NotConnected,
    /// The connection is closing or closed.
    Closed(Option<CloseReason>),
}

/// Why `recv` / `recv_message` failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecvError {
    /// Nothing to read yet.
    WouldBlock,
    /// The next message is larger than the buffer given; it needs this many bytes.
    BufferTooSmall(usize),
    /// Wrong call for this mode.
    WrongMode,
    /// The connection ended abnormally and no buffered data is left.
    Closed(CloseReason),
}

/// Sees a stream's bytes as the connection first sends them: each byte once, in order, just
/// before its packet goes out (retransmissions are not shown again). See
/// [`Connection::set_send_tap`]: a file sender computes its end-to-end digest here, over
/// bytes the datagram copy is about to read anyway, so that they cross the memory bus once.
pub trait SendTap: Send + std::fmt::Debug {
    /// The stream's next bytes.
    fn sent(&mut self, bytes: &[u8]);
}

/// What a paged stream read ([`Connection::recv_page`]) gave.
#[derive(Debug, PartialEq, Eq)]
pub enum StreamRead {
    /// Copied this many bytes into the buffer given; 0 is the end of the stream.
    Copied(usize),
    /// The next bytes of the stream: the first `.1` bytes of a page of the receive buffer,
    /// taken out of it without a copy. Hand the page back with the next call.
    Page(Vec<u8>, usize),
}

/// Control packets waiting to be sent. Bounded: each kind is a flag or a small fixed array.
#[derive(Debug, Default)]
struct Pending {
    handshake: bool,
    full_ack: bool,
    light_ack: bool,
    ackacks: [u32; 8],
    ackack_len: usize,
    nak: [(SeqNo, SeqNo); 8],
    nak_len: usize,
    /// A sweep over the receiver's loss list is under way from this number on: set by the
    /// periodic NAK timer (from the oldest loss) and when more new gaps appear between two
    /// transmissions than `nak` holds (from the oldest of them).
    nak_sweep: Option<SeqNo>,
    /// NAK packets the current sweep may still send.
    nak_sweep_pkts: u32,
    keepalive: bool,
    shutdown: u8,
    dropreq: Option<(u32, SeqNo, SeqNo)>,
}

/// One SRT connection. See the module docs for the calling protocol.
#[derive(Debug)]
pub struct Connection {
    // Identity.
    local_id: u32,
    peer_id: u32,
    peer_addr: SocketAddr,
    role: Role,
    cfg: ConnConfig,
    state: State,
    start: Instant,
    events: VecDeque<Event>,

    // Negotiated.
    mss: u32,
    payload_size: usize,
    /// Receiving TSBPD latency (live mode): how long after its send time a packet plays.
    latency_us: u64,
    /// The peer's receiving latency (live mode): what the sender's too-late drop allows.
    snd_latency_us: u64,
    peer_stream_id: Option<Vec<u8>>,
    /// Agreed [`SlipstreamExt`](crate::wire::SlipstreamExt) file flags.
    file_ext: u32,
    hs: handshake::HsState,

    // Sender.
    isn: SeqNo,
    sbuf: SendBuffer,
    snd_loss: LossList,
    cc: Box<dyn CongestionControl>,
    ctl: CcControl,
    next_send_us: f64,
    /// Time the sender was due to send and did not, µs ([`CcContext::send_lag_us`]).
    send_lag_us: u64,
    max_loss_seen: SeqNo,
    /// The furthest point the peer has acknowledged.
    peer_ack: SeqNo,
    /// Most packets to advertise as the flow window: this connection's share of the
    /// endpoint's socket queue ([`crate::share`]).
    window_share: u32,
    /// Live mode: the message number and end of the last messages this end dropped, while
    /// the peer has not acknowledged past them (their drop request may have been lost).
    dropped_to: Option<(u32, SeqNo)>,
    /// When the last drop request was queued, µs.
    dropreq_at_us: u64,
    peer_window: u32,
    /// The first sequence number beyond the receiver's buffer as its last full ACK advertised
    /// it (that ACK's point plus its free packets); `None` before the first.
    peer_edge: Option<SeqNo>,
    peer_recv_rate_pps: u32,
    peer_recv_rate_bps: u64,
    peer_recv_rate_last_pps: u32,
    /// Packets and payload bytes acknowledged since the last full ACK with rates, light
    /// ACKs included: the packets that ACK's byte rate counted, near enough.
    acked_for_rate: (u64, u64),
    /// Mean payload of those packets at the last full ACK that acknowledged any, bytes (0
    /// before the first): what turns the peer's byte rate into packets.
    acked_payload: u64,
    peer_bandwidth_pps: u32,
    last_cc_ack_us: u64,
    /// When the peer last announced its window (full ACK) or a window probe went out.
    last_window_us: u64,
    /// A window probe may go out (see `window_probe_deadline_us`).
    window_probe: bool,
    acked_since_cc: u32,
    losses_scratch: Vec<(SeqNo, SeqNo)>,
    input_rate: InputRate,

    // Receiver.
    rbuf: RecvBuffer,
    rcv_loss: LossList,
    rcv_ack: SeqNo,
    rcv_max: SeqNo,
    drop_upto: SeqNo,
    /// The end of the ranges the sender asked to drop (its drop requests): empty slots
    /// before it are the sender's drops, not losses.
    snd_drop_upto: SeqNo,
    last_acked_seq: SeqNo,
    last_full_ack_us: u64,
    /// `stats.pkts_recv` when the last full ACK was sent.
    pkts_recv_at_full_ack: u64,
    /// `stats.pkts_recv_unique` when the last full ACK was sent.
    unique_at_full_ack: u64,
    /// A full ACK with a nonzero receive speed has been sent.
    speed_reported: bool,
    ack_no: u32,
    ack_hist: [(u32, u64, SeqNo); 64],
    last_ackacked_seq: SeqNo,
    last_adv_window: u32,
    /// The right edge of the window the last full ACK advertised (its ACK point plus the
    /// free packets it announced): the sender sends nothing past it until the next one.
    adv_edge: SeqNo,
    pkts_since_ack: u32,
    rate: RateEstimator,
    ack_rates: AckRateTracker,
    tsbpd_offset_us: i64,
    last_ts_unwrapped: u64,
    /// Live mode: smoothed and least margin of arrivals before their play time, µs.
    live_margin_us: Option<(i64, i64)>,

    // Round-trip time (both halves use one estimate).
    srtt_us: u64,
    rttvar_us: u64,
    rtt_sampled: bool,
    /// The peer's own estimate as its last full ACK reported it, `srtt + 4 rttvar`, µs (0
    /// before one): how long a loss it reports again may still be answered by a
    /// retransmission on its way. [`Self::srtt_us`] smooths the peer's already smoothed
    /// figure a second time and trails it by a dozen ACKs when a queue builds.
    peer_rtt_bound_us: u64,
    /// When the last ACKACK was queued (µs), the ACK number it confirmed, and the packets
    /// acknowledged by then (`pkts_acked`).
    last_ackack: Option<(u64, u32, u64)>,
    /// The least of this end's own round-trip samples (handshake, ACK to ACKACK) over the
    /// last [`MIN_RTT_WINDOW_US`], and when it was taken: the path's round trip without the
    /// queues along it, which sizes the receive buffer.
    min_rtt: Option<(u64, u64)>,

    /// The endpoint's memory pressure flag, shared with the buffers.
    pressure: Pressure,
    /// This connection's start, µs after its endpoint's (the timer grid's epoch).
    epoch_offset_us: u64,

    // Timers, µs since start.
    next_ack_tick: u64,
    /// The ACK tick sleeps: nothing has arrived since the last ACK, which the sender has
    /// confirmed ([`Connection::ack_settled`]); the next data packet wakes it. An idle
    /// connection then wakes for its keepalive only, not every SYN interval.
    ack_tick_asleep: bool,
    next_nak_tick: u64,
    last_rsp_us: u64,
    last_send_us: u64,
    exp_count: u32,
    rto_base_us: u64,
    /// A tail-loss probe went out since the acknowledgements last made progress.
    tail_probed: bool,
    /// When the last data packet went out.
    last_data_us: u64,
    last_timer_us: u64,
    linger_deadline: Option<u64>,
    peer_shutdown: bool,

    /// The send tap and the bytes it may still see; bytes it has seen.
    send_tap: Option<(Box<dyn SendTap>, u64)>,
    tapped: u64,

    pending: Pending,
    stats: ConnStats,
}

/// Application input rate, measured over 500 ms windows (feeds the live controller).
#[derive(Debug, Default, Clone, Copy)]
struct InputRate {
    window_start_us: u64,
    bytes: u64,
    rate_bps: u64,
}

impl InputRate {
    fn add(&mut self, now_us: u64, bytes: usize) {
        self.bytes += bytes as u64;
        let span = now_us.saturating_sub(self.window_start_us);
        if span >= 500_000 {
            self.rate_bps = self.bytes * 1_000_000 / span;
            self.window_start_us = now_us;
            self.bytes = 0;
        }
    }
}

/// Negotiated parameters for a connection the listener accepts.
#[derive(Debug, Clone)]
pub(crate) struct Accepted {
    pub peer_id: u32,
    pub isn: SeqNo,
    pub mss: u32,
    pub peer_window: u32,
    pub latency_us: u64,
    pub snd_latency_us: u64,
    pub peer_stream_id: Option<Vec<u8>>,
    /// Agreed [`SlipstreamExt`](crate::wire::SlipstreamExt) file flags.
    pub file_ext: u32,
    pub peer_ts: u32,
    pub response: Handshake,
}

impl Connection {
    #[allow(clippy::too_many_arguments)]
    fn new(
        now: Instant,
        local_id: u32,
        peer_addr: SocketAddr,
        role: Role,
        cfg: ConnConfig,
        cc: Box<dyn CongestionControl>,
        isn: SeqNo,
        hs: handshake::HsState,
    ) -> Self {
        let mss = cfg.mss;
        let payload_size = payload_size(mss, peer_addr);
        let (snd_init, snd_max) = cfg.send_buffer_pkts(payload_size);
        let (rcv_init, rcv_max) = cfg.recv_buffer_pkts(payload_size);
        Connection {
            local_id,
            peer_id: 0,
            peer_addr,
            role,
            state: State::Connecting,
            start: now,
            events: VecDeque::with_capacity(4),
            mss,
            payload_size,
            latency_us: cfg.latency.as_micros() as u64,
            snd_latency_us: cfg.peer_latency().as_micros() as u64,
            peer_stream_id: None,
            file_ext: 0,
            hs,
            isn,
            // Buffers are sized for the configured MSS and re-created if negotiation lowers it.
            sbuf: SendBuffer::new(payload_size, snd_init, snd_max, isn),
            snd_loss: LossList::new(),
            cc,
            ctl: CcControl::default(),
            next_send_us: 0.0,
            send_lag_us: 0,
            max_loss_seen: isn,
            peer_ack: isn,
            window_share: u32::MAX,
            dropped_to: None,
            dropreq_at_us: 0,
            peer_window: 8192,
            peer_edge: None,
            peer_recv_rate_pps: 0,
            peer_recv_rate_bps: 0,
            peer_recv_rate_last_pps: 0,
            acked_for_rate: (0, 0),
            acked_payload: 0,
            peer_bandwidth_pps: 0,
            last_cc_ack_us: 0,
            last_window_us: 0,
            window_probe: false,
            acked_since_cc: 0,
            losses_scratch: Vec::with_capacity(64),
            input_rate: InputRate::default(),
            rbuf: RecvBuffer::new(recv_slot_size(mss), rcv_init, rcv_max, isn),
            rcv_loss: LossList::new(),
            rcv_ack: isn,
            rcv_max: isn,
            drop_upto: isn,
            snd_drop_upto: isn,
            last_acked_seq: isn,
            last_full_ack_us: 0,
            pkts_recv_at_full_ack: 0,
            unique_at_full_ack: 0,
            speed_reported: false,
            ack_no: 0,
            ack_hist: [(0, 0, isn); 64],
            last_ackacked_seq: isn.sub(1),
            last_adv_window: 0,
            // The handshake advertises the whole buffer.
            adv_edge: isn.add(rcv_init as u32),
            pkts_since_ack: 0,
            rate: RateEstimator::new(),
            ack_rates: AckRateTracker::default(),
            tsbpd_offset_us: 0,
            last_ts_unwrapped: 0,
            live_margin_us: None,
            // libsrt's initial estimates before the first sample.
            srtt_us: INITIAL_RTT_US,
            rttvar_us: INITIAL_RTTVAR_US,
            rtt_sampled: false,
            peer_rtt_bound_us: 0,
            last_ackack: None,
            min_rtt: None,
            next_ack_tick: SYN_INTERVAL_US,
            ack_tick_asleep: false,
            next_nak_tick: 0,
            last_rsp_us: 0,
            last_send_us: 0,
            exp_count: 1,
            rto_base_us: 0,
            tail_probed: false,
            last_data_us: 0,
            last_timer_us: 0,
            linger_deadline: None,
            peer_shutdown: false,
            send_tap: None,
            tapped: 0,
            pending: Pending::default(),
            stats: ConnStats::default(),
            pressure: Pressure::default(),
            epoch_offset_us: 0,
            cfg,
        }
    }

    /// Shares the endpoint's memory pressure flag (see [`Pressure`]).
    pub(crate) fn set_pressure(&mut self, p: Pressure) {
        self.rbuf.set_pressure(p.clone());
        self.sbuf.set_pressure(p.clone());
        self.pressure = p;
    }

    /// Aligns this connection's coarse timers (keepalive, idle timeout) with those of the
    /// other connections of an endpoint created at `epoch` (see [`TIMER_GRID_US`]).
    pub(crate) fn set_timer_epoch(&mut self, epoch: Instant) {
        self.epoch_offset_us = self.start.saturating_duration_since(epoch).as_micros() as u64;
    }

    /// `us` rounded up to the next multiple of [`TIMER_GRID_US`] since the epoch.
    fn on_timer_grid(&self, us: u64) -> u64 {
        let abs = us + self.epoch_offset_us;
        (abs.div_ceil(TIMER_GRID_US) * TIMER_GRID_US).saturating_sub(self.epoch_offset_us)
    }

    /// Bounds the flow window this end advertises to `pkts` (its endpoint's share of the
    /// socket's receive queue); its own free buffer bounds it too.
    pub fn set_window_share(&mut self, pkts: u32) {
        self.window_share = pkts;
    }

    /// Memory the send and receive buffers hold now, bytes (what
    /// [`ConnStats::buf_mem_bytes`] reports).
    pub fn buffer_memory(&self) -> usize {
        self.rbuf.held_bytes() + self.sbuf.held_bytes()
    }

    /// Microseconds since creation.
    fn us(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_micros() as u64
    }
    fn at(&self, us: u64) -> Instant {
        self.start + Duration::from_micros(us)
    }

    /// Re-creates the (still empty) buffers for the negotiated MSS and initial sequence numbers.
    fn reset_buffers(&mut self, snd_isn: SeqNo, rcv_isn: SeqNo) {
        self.payload_size = payload_size(self.mss, self.peer_addr);
        let (snd_init, snd_max) = self.cfg.send_buffer_pkts(self.payload_size);
        let (rcv_init, rcv_max) = self.cfg.recv_buffer_pkts(self.payload_size);
        self.isn = snd_isn;
        self.sbuf = SendBuffer::new(self.payload_size, snd_init, snd_max, snd_isn);
        self.rbuf = RecvBuffer::new(recv_slot_size(self.mss), rcv_init, rcv_max, rcv_isn);
        self.set_pressure(self.pressure.clone());
        self.peer_ack = snd_isn;
        self.rcv_ack = rcv_isn;
        self.rcv_max = rcv_isn;
        self.drop_upto = rcv_isn;
        self.snd_drop_upto = rcv_isn;
        self.last_acked_seq = rcv_isn;
        self.last_ackacked_seq = rcv_isn.sub(1);
        self.adv_edge = rcv_isn.add(self.rbuf.cap() as u32);
    }

    /// Moves to Connected and starts the controller.
    fn establish(&mut self, now_us: u64, ev: Event) {
        self.state = State::Connected;
        self.last_rsp_us = now_us;
        self.next_ack_tick = now_us + SYN_INTERVAL_US;
        self.next_send_us = now_us as f64;
        self.input_rate.window_start_us = now_us;
        let ctx = self.cc_ctx(now_us);
        self.cc.init(&ctx, &mut self.ctl);
        self.events.push_back(ev);
    }

    fn cc_ctx(&mut self, now_us: u64) -> CcContext {
        self.settle_lag(now_us);
        CcContext {
            now_us,
            rtt: Duration::from_micros(self.srtt_us),
            rtt_var: Duration::from_micros(self.rttvar_us),
            bandwidth_pps: self.peer_bandwidth_pps,
            recv_rate_pps: self.peer_recv_rate_pps,
            recv_rate_bps: self.peer_recv_rate_bps,
            recv_rate_last_pps: self.peer_recv_rate_last_pps,
            mss: self.mss,
            payload_size: self.payload_size as u32,
            flow_window: self.peer_window,
            last_sent_seq: self.sbuf.next_unsent().sub(1),
            syn_interval: Duration::from_micros(SYN_INTERVAL_US),
            pkts_in_network: u32::try_from(self.in_network()).unwrap_or(u32::MAX),
            pkts_sent: self.stats.pkts_sent,
            pkts_lost: self.stats.pkts_snd_loss,
            max_bw_bps: self.max_bw_now(),
            input_rate_bps: self.input_rate.rate_bps,
            send_lag_us: self.send_lag_us,
            app_limited: self.sbuf.unsent() == 0,
            avg_payload: u32::try_from(self.acked_payload).unwrap_or(u32::MAX),
        }
    }

    /// The live sending limit for the controller, bytes/s (0: its own default rule).
    fn max_bw_now(&self) -> u64 {
        match self.cfg.max_bw {
            config::MaxBw::Default => 0,
            config::MaxBw::Absolute(b) => b,
            config::MaxBw::Relative {
                input_bps,
                overhead_pct,
            } => {
                let input = if input_bps > 0 {
                    input_bps
                } else {
                    self.input_rate.rate_bps
                };
                input.saturating_mul(100 + u64::from(overhead_pct)) / 100
            }
        }
    }

    fn close_with(&mut self, reason: CloseReason) {
        if matches!(self.state, State::Closed(_)) {
            return;
        }
        self.state = State::Closed(reason);
        self.linger_deadline = None;
        self.events.push_back(Event::Closed(reason));
    }

    // ---- endpoint-facing ----

    /// Our SRT socket id.
    pub fn local_id(&self) -> u32 {
        self.local_id
    }
    /// The peer's SRT socket id (0 until the handshake completes).
    pub fn peer_id(&self) -> u32 {
        self.peer_id
    }
    /// The peer's UDP address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }
    /// Caller or listener.
    pub fn role(&self) -> Role {
        self.role
    }
    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }
    /// The configuration this connection runs with.
    pub fn config(&self) -> &ConnConfig {
        &self.cfg
    }
    /// Caps the sending rate from now on, bytes per second (0: no cap), as
    /// [`ConnConfig::set_max_bw`] does at the start: the controller sees it in the next
    /// context it is given.
    pub fn set_max_bw(&mut self, bytes_per_s: u64) {
        self.cfg.set_max_bw(bytes_per_s);
    }
    /// The stream id the caller sent (on a listener), or the one we sent (on a caller).
    pub fn stream_id(&self) -> Option<&[u8]> {
        match self.role {
            Role::Listener => self.peer_stream_id.as_deref(),
            Role::Caller => self.cfg.stream_id.as_deref(),
        }
    }
    /// Both ends are slipstream and agreed on the end-to-end file digest trailer.
    pub fn digest_agreed(&self) -> bool {
        self.file_ext & crate::wire::SlipstreamExt::FILE_DIGEST != 0
    }
    /// Both ends agreed that a file's stream starts with its length and that the receiver
    /// answers with its verdict (see [`SlipstreamExt::FILE_VERDICT`](crate::wire::SlipstreamExt::FILE_VERDICT)).
    pub fn verdict_agreed(&self) -> bool {
        self.file_ext & crate::wire::SlipstreamExt::FILE_VERDICT != 0
    }
    /// Negotiated TSBPD latency of this end's receiving direction.
    pub fn latency(&self) -> Duration {
        Duration::from_micros(self.latency_us)
    }
    /// Negotiated TSBPD latency of the peer's receiving direction (what this end's sender
    /// allows before it drops a packet as too late).
    pub fn peer_latency(&self) -> Duration {
        Duration::from_micros(self.snd_latency_us)
    }
    /// Payload bytes per full data packet.
    pub fn payload_size(&self) -> usize {
        self.payload_size
    }
    /// Bytes a receive slot holds: the largest payload the peer may send (at least
    /// [`Connection::payload_size`]; more where the path is IPv6, whose larger header a peer
    /// may not count).
    pub fn recv_slot_size(&self) -> usize {
        self.rbuf.slot_size()
    }

    /// Next time `handle_timeout` must be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline(true)
    }

    /// Like [`Connection::poll_timeout`], without the time the next packet may go: for a
    /// connection whose endpoint polls it for packets in its turn anyway. An endpoint that
    /// kept that deadline too re-armed the timer of every backlogged connection whose turn
    /// had not come yet, each time it sent a batch: with a thousand of them, most of its
    /// time went to timers.
    pub fn poll_timeout_queued(&self) -> Option<Instant> {
        self.deadline(false)
    }

    fn deadline(&self, pacing: bool) -> Option<Instant> {
        let us = match self.state {
            State::Closed(_) => return None,
            State::Connecting => self.hs.next_retry_us.min(self.hs.deadline_us),
            State::Connected | State::Closing => {
                // The keepalive and the idle timeout need no precision: they fall due on a
                // grid shared by the endpoint's connections, so that an endpoint with many
                // idle ones wakes for a batch of them at a time, not once for each.
                let lazy = self
                    .idle_deadline_us()
                    .min(self.last_send_us + KEEPALIVE_US);
                let mut t = self.on_timer_grid(lazy);
                if !self.ack_tick_asleep {
                    t = t.min(self.next_ack_tick);
                }
                if let Some(d) = self.rto_deadline_us() {
                    t = t.min(d);
                }
                if let Some(d) = self.tail_probe_deadline_us() {
                    t = t.min(d);
                }
                if let Some(d) = self.window_probe_deadline_us() {
                    t = t.min(d);
                }
                if let Some(d) = self.dropreq_retry_deadline_us() {
                    t = t.min(d);
                }
                if !self.rcv_loss.is_empty() && self.cfg.nak_report {
                    t = t.min(self.next_nak_tick);
                }
                if let Some(d) = self.linger_deadline {
                    t = t.min(d);
                }
                if self.cfg.mode == Mode::Live {
                    if let Some(d) = self.live_next_event_us() {
                        t = t.min(d);
                    }
                }
                if pacing && self.has_data_to_send() {
                    let due = self.next_send_us - sender::PACING_QUANTUM_US;
                    t = t.min(due.max(0.0).ceil() as u64);
                }
                t
            }
        };
        Some(self.at(us))
    }

    /// Processes expired timers.
    pub fn handle_timeout(&mut self, now: Instant) {
        let now_us = self.us(now);
        match self.state {
            State::Closed(_) => {}
            State::Connecting => self.hs_timeout(now_us),
            State::Connected | State::Closing => {
                if !self.ack_tick_asleep && now_us >= self.next_ack_tick {
                    self.on_ack_tick(now_us);
                    self.ack_tick_asleep = self.ack_settled();
                }
                if !self.rcv_loss.is_empty() && self.cfg.nak_report && now_us >= self.next_nak_tick
                {
                    self.start_nak_sweep(self.rcv_loss.first());
                    self.next_nak_tick = now_us + self.nak_interval_us();
                }
                if now_us >= self.idle_deadline_us() {
                    self.close_with(CloseReason::PeerIdle);
                    return;
                }
                if self.rto_deadline_us().is_some_and(|d| now_us >= d) {
                    self.on_rto(now_us);
                }
                if self.tail_probe_deadline_us().is_some_and(|d| now_us >= d) {
                    self.on_tail_probe();
                }
                if self.window_probe_deadline_us().is_some_and(|d| now_us >= d) {
                    self.window_probe = true;
                }
                if self
                    .dropreq_retry_deadline_us()
                    .is_some_and(|d| now_us >= d)
                {
                    self.retry_dropreq(now_us);
                }
                if now_us >= self.last_send_us + KEEPALIVE_US {
                    self.pending.keepalive = true;
                    // Quiet for a second: buffers with nothing in them give their memory back.
                    self.rbuf.release_idle();
                    self.sbuf.release_idle();
                }
                if self.cfg.mode == Mode::Live {
                    self.live_timers(now_us);
                }
                if let Some(d) = self.linger_deadline {
                    if now_us >= d {
                        self.pending.shutdown = 3;
                        self.close_with(CloseReason::LingerTimeout);
                    }
                }
            }
        }
    }

    /// Processes one datagram addressed to this connection.
    pub fn handle_packet(&mut self, now: Instant, pkt: &Packet<'_>) {
        self.handle_packet_at(now, now, pkt);
    }

    /// [`handle_packet`](Self::handle_packet) for a datagram received at `received` (at most
    /// `now`; see [`Endpoint::handle_at`](crate::endpoint::Endpoint::handle_at)).
    pub fn handle_packet_at(&mut self, now: Instant, received: Instant, pkt: &Packet<'_>) {
        let now_us = self.us(now);
        if let State::Closed(_) = self.state {
            return;
        }
        self.last_rsp_us = now_us;
        if !matches!(
            pkt,
            Packet::Control(Control {
                body: ControlBody::Handshake(_),
                ..
            })
        ) {
            self.listener_rtt_sample(now_us);
        }
        match pkt {
            Packet::Data(h, payload) => {
                if matches!(self.state, State::Connected | State::Closing) {
                    self.on_data(now_us, self.us(received), h, Payload::Slice(payload));
                }
            }
            Packet::Control(c) => self.on_control(now_us, c),
        }
    }

    /// A data packet whose payload is in a buffer the caller owns (see
    /// `Endpoint::handle_data_owned`): as [`Connection::handle_packet_at`], but the receive
    /// buffer may take `payload` whole and leave another buffer of the same length (stale
    /// contents) in its place.
    pub fn handle_data_owned(
        &mut self,
        now: Instant,
        received: Instant,
        h: &DataHeader,
        payload: &mut Vec<u8>,
        len: usize,
        offer: &mut Option<Vec<u8>>,
    ) {
        let now_us = self.us(now);
        if let State::Closed(_) = self.state {
            return;
        }
        self.last_rsp_us = now_us;
        self.listener_rtt_sample(now_us);
        if matches!(self.state, State::Connected | State::Closing) {
            self.rbuf.offer(offer.take());
            self.on_data(now_us, self.us(received), h, Payload::Owned(payload, len));
            *offer = self.rbuf.take_offer();
        }
    }

    fn on_control(&mut self, now_us: u64, c: &Control<'_>) {
        if let ControlBody::Handshake(hs) = &c.body {
            self.on_handshake(now_us, c.timestamp, hs);
            return;
        }
        if !matches!(self.state, State::Connected | State::Closing) {
            self.stats.ctrl_ignored += 1;
            return;
        }
        match &c.body {
            ControlBody::Ack(a) => self.on_ack(now_us, a),
            ControlBody::Nak(r) => self.on_nak(now_us, r),
            ControlBody::AckAck { ack_no } => self.on_ackack(now_us, *ack_no),
            ControlBody::KeepAlive => {}
            ControlBody::Shutdown => {
                self.peer_shutdown = true;
                self.close_with(CloseReason::PeerShutdown);
            }
            ControlBody::DropReq { first, last, .. } => self.on_dropreq(now_us, *first, *last),
            ControlBody::User { subtype, body, .. } => {
                let ctx = self.cc_ctx(now_us);
                self.cc
                    .on_custom_message(&ctx, &mut self.ctl, *subtype, body);
            }
            _ => self.stats.ctrl_ignored += 1,
        }
    }

    /// Drains one event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Writes the next datagram to send into `buf` (at least the MSS long). Returns its length.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        self.poll_transmit_inner(now, buf, false).map(|(n, _)| n)
    }

    /// Like [`Connection::poll_transmit`], but control packets only (handshakes,
    /// acknowledgements, loss reports, keepalives, shutdowns): what a sender holding its data
    /// back (a traffic smoother without credit) still sends, so that its peer keeps hearing
    /// from it and the connection lives until credit returns.
    pub fn poll_transmit_control(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let now_us = self.us(now);
        let n = self.poll_control(now_us, buf)?;
        self.last_send_us = now_us;
        Some(n)
    }

    /// Like [`Connection::poll_transmit`], but a data packet's payload is not copied: only
    /// its header goes into `buf` (which must hold at least a control packet), and the
    /// sequence number returned (with the payload's length) names the payload, to be read with
    /// [`Connection::payload`] and sent right behind the header (a gather send). Read it
    /// before anything else changes the connection: until then it is exactly what was
    /// accounted as sent.
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(usize, Option<(SeqNo, usize)>)> {
        self.poll_transmit_inner(now, buf, true)
    }

    fn poll_transmit_inner(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        gather: bool,
    ) -> Option<(usize, Option<(SeqNo, usize)>)> {
        let now_us = self.us(now);
        let out = match self.poll_control(now_us, buf) {
            Some(n) => (n, None),
            None => {
                let (n, seq, payload_len) = self.poll_data(now_us, buf, gather)?;
                self.last_data_us = now_us;
                (n, gather.then_some((seq, payload_len)))
            }
        };
        self.last_send_us = now_us;
        Some(out)
    }

    /// The payload of data packet `seq` while the send buffer holds it (see
    /// [`Connection::poll_transmit_gather`]).
    pub fn payload(&self, seq: SeqNo) -> Option<&[u8]> {
        self.sbuf.get(seq).map(|(_, p)| p)
    }

    // ---- application operations ----

    /// Stream mode: queues bytes; returns how many were taken (0 when the buffer is full).
    pub fn send(&mut self, now: Instant, data: &[u8]) -> Result<usize, SendError> {
        self.check_send(Mode::File)?;
        let now_us = self.us(now);
        let n = self.sbuf.push_stream(data, now_us);
        if n == 0 && !data.is_empty() {
            return Err(SendError::WouldBlock);
        }
        self.input_rate.add(now_us, n);
        Ok(n)
    }

    /// Stream mode: the best length for [`Connection::send_chunk`]'s chunks: a whole number of
    /// packets, about [`CHUNK_BYTES`], at most an eighth of the initial send buffer (so that
    /// one always fits once that much is free). Fixed once the connection is established.
    pub fn chunk_len(&self) -> usize {
        let p = self.payload_size.max(1);
        let initial = self.cfg.send_buffer_pkts(p).0;
        p * (CHUNK_BYTES / p).clamp(1, (initial / 8).max(1))
    }

    /// Stream mode: queues the first `len` bytes of `chunk` without copying them (a chunk
    /// the application filled itself, e.g. by reading a file into it): the packets go out
    /// from the chunk where it is, and once all of them are acknowledged it is kept for
    /// [`Connection::take_chunk`]. On failure the chunk comes back: `WouldBlock` when the
    /// send buffer has no room for its packets now, `TooLarge` when it never will (longer
    /// than the whole buffer or [`MAX_CHUNK`]; `len` 0 or beyond the chunk also counts).
    pub fn send_chunk(
        &mut self,
        now: Instant,
        chunk: Vec<u8>,
        len: usize,
    ) -> Result<(), (SendError, Vec<u8>)> {
        if let Err(e) = self.check_send(Mode::File) {
            return Err((e, chunk));
        }
        let pkts = len.div_ceil(self.sbuf.slot_size().max(1));
        if len == 0
            || len > chunk.len()
            || len > MAX_CHUNK
            || pkts > self.cfg.send_buffer_pkts(self.payload_size).1
        {
            return Err((SendError::TooLarge, chunk));
        }
        // A chunk longer than the buffer is now grows it (within its cap) rather than wait
        // for a growth the window may never ask for.
        while self.sbuf.cap() < pkts && self.sbuf.grow() {}
        let now_us = self.us(now);
        match self.sbuf.push_chunk(chunk, len, now_us) {
            Ok(()) => {
                self.input_rate.add(now_us, len);
                Ok(())
            }
            Err(chunk) => Err((SendError::WouldBlock, chunk)),
        }
    }

    /// Stream mode: queues `data[range]` without copying it, as [`Connection::send_chunk`]
    /// does, from bytes the application shares read-only (a mapped file, say): the packets
    /// go out from `data` where it lies and hold a reference to it until acknowledged; it is
    /// never given back for [`Connection::take_chunk`]. `WouldBlock` when the send buffer
    /// has no room for the range's packets now, `TooLarge` when it never will (the range
    /// empty, beyond `data`, or longer than the whole buffer or [`MAX_CHUNK`]).
    pub fn send_shared(
        &mut self,
        now: Instant,
        data: &SharedBytes,
        range: Range<usize>,
    ) -> Result<(), SendError> {
        self.check_send(Mode::File)?;
        let len = range.len();
        let pkts = len.div_ceil(self.sbuf.slot_size().max(1));
        if len == 0
            || range.end > (**data).as_ref().len()
            || len > MAX_CHUNK
            || pkts > self.cfg.send_buffer_pkts(self.payload_size).1
        {
            return Err(SendError::TooLarge);
        }
        while self.sbuf.cap() < pkts && self.sbuf.grow() {}
        let now_us = self.us(now);
        if !self.sbuf.push_shared(data, range, now_us) {
            return Err(SendError::WouldBlock);
        }
        self.input_rate.add(now_us, len);
        Ok(())
    }

    /// Stream mode: shows `tap` the next `limit` bytes of the stream as they are first sent
    /// (those queued from now on, if nothing is queued and unsent yet), and counts them
    /// ([`Connection::send_tapped`]). Replaces a tap set before.
    pub fn set_send_tap(&mut self, tap: Box<dyn SendTap>, limit: u64) {
        self.send_tap = Some((tap, limit));
        self.tapped = 0;
    }

    /// Bytes the send tap has seen (see [`Connection::set_send_tap`]).
    pub fn send_tapped(&self) -> u64 {
        self.tapped
    }

    /// A chunk handed over by [`Connection::send_chunk`] whose packets were all
    /// acknowledged, to fill again (its contents are stale); `None` if there is none yet.
    pub fn take_chunk(&mut self) -> Option<Vec<u8>> {
        self.sbuf.take_chunk()
    }

    /// Message or live mode: queues one whole message.
    pub fn send_message(&mut self, now: Instant, msg: &[u8]) -> Result<(), SendError> {
        if self.cfg.mode == Mode::File {
            return Err(SendError::WrongMode);
        }
        self.check_send(self.cfg.mode)?;
        let now_us = self.us(now);
        // Live mode: what is too late to play goes first (libsrt does this at every send),
        // so that a full buffer holds only data that can still be delivered.
        self.sender_drop_too_late(now_us);
        match self.sbuf.push_message(msg, now_us) {
            Ok(()) => {
                self.stats.pkts_queued += msg.len().div_ceil(self.sbuf.slot_size()).max(1) as u64;
                self.input_rate.add(now_us, msg.len());
                Ok(())
            }
            // A full buffer waits for room in every mode, as libsrt's blocking send does in
            // live mode too: data that can still play is never dropped to make room, and a
            // source that outruns the link is held back (or, non-blocking, told so).
            Err(send_buf::PushError::Full) => Err(SendError::WouldBlock),
            Err(send_buf::PushError::TooLarge) => Err(SendError::TooLarge),
        }
    }

    fn check_send(&self, mode: Mode) -> Result<(), SendError> {
        if (mode == Mode::File) != (self.cfg.mode == Mode::File) {
            return Err(SendError::WrongMode);
        }
        match self.state {
            State::Connecting => Err(SendError::NotConnected),
            State::Connected => Ok(()),
            State::Closing => Err(SendError::Closed(None)),
            State::Closed(r) => Err(SendError::Closed(Some(r))),
        }
    }

    /// True when `send`/`send_message` can take data now.
    pub fn is_writable(&self) -> bool {
        self.state == State::Connected && self.sbuf.free_slots() > 0
    }

    /// True when at least a quarter of the send buffer's usable room is free: a writer
    /// waiting for room is worth waking (for a slot or two it would write a sliver and wait
    /// again). Under memory pressure the usable room is what the buffer holds, not its
    /// capacity, so this still comes true.
    pub fn has_room(&self) -> bool {
        let free = self.sbuf.free_slots();
        free > 0 && free * 4 >= free + self.sbuf.len()
    }

    /// Free space in the send buffer, bytes.
    pub fn send_buffer_free(&self) -> usize {
        self.sbuf.free_slots() * self.payload_size
    }

    /// Capacity of the send buffer, bytes (it grows with the bandwidth-delay product).
    pub fn send_buffer_capacity(&self) -> usize {
        self.sbuf.cap() * self.payload_size
    }

    /// Bytes queued but not yet acknowledged.
    pub fn send_buffer_len(&self) -> u64 {
        self.sbuf.bytes()
    }

    /// Stream mode: reads bytes. `Ok(0)` is the end of the stream: the peer closed cleanly and
    /// everything was read.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, RecvError> {
        if self.cfg.mode != Mode::File {
            return Err(RecvError::WrongMode);
        }
        let n = self.rbuf.read_stream(self.rcv_ack, buf, false);
        if n > 0 {
            self.stats.bytes_delivered += n as u64;
            self.on_app_read();
            return Ok(n);
        }
        self.recv_end()
    }

    /// Stream mode: reads bytes as [`Connection::recv`] does, but when the next bytes fill a
    /// whole page of the receive buffer (its [`Connection::recv_page_len`] bytes of full-size
    /// packets, all in order; where payloads are large, a page is one packet of any size)
    /// takes that page out instead of copying it: the application writes it out from where
    /// the packets landed. Otherwise copies into `buf`, up to the end of the current page (so
    /// that the next call may take the next one).
    /// `spare` is a page from an earlier call, given back for reuse when a page is taken
    /// (one for one: a reader polling an empty buffer keeps its spares, which the buffer
    /// would have freed beyond its few). `Copied(0)` is the end of the stream.
    pub fn recv_page(
        &mut self,
        buf: &mut [u8],
        spare: &mut Option<Vec<u8>>,
    ) -> Result<StreamRead, RecvError> {
        if self.cfg.mode != Mode::File {
            return Err(RecvError::WrongMode);
        }
        if let Some((p, len)) = self.rbuf.take_page(self.rcv_ack) {
            if let Some(s) = spare.take() {
                self.rbuf.give_page(s);
            }
            self.stats.bytes_delivered += len as u64;
            self.stats.bytes_delivered_in_pages += len as u64;
            self.on_app_read();
            return Ok(StreamRead::Page(p, len));
        }
        let n = self.rbuf.read_stream(self.rcv_ack, buf, true);
        if n > 0 {
            self.stats.bytes_delivered += n as u64;
            self.on_app_read();
            return Ok(StreamRead::Copied(n));
        }
        self.recv_end().map(StreamRead::Copied)
    }

    /// Stream mode: takes the next page out as [`Connection::recv_page`] does when it is
    /// whole, and only then (`None` otherwise: nothing is copied). `spare` is given back
    /// when a page is taken, as there. For taking several pages in a row once a first read
    /// found one.
    pub fn recv_whole_page(&mut self, spare: &mut Option<Vec<u8>>) -> Option<(Vec<u8>, usize)> {
        if self.cfg.mode != Mode::File {
            return None;
        }
        let (p, len) = self.rbuf.take_page(self.rcv_ack)?;
        if let Some(s) = spare.take() {
            self.rbuf.give_page(s);
        }
        self.stats.bytes_delivered += len as u64;
        self.stats.bytes_delivered_in_pages += len as u64;
        self.on_app_read();
        Some((p, len))
    }

    /// Gives back a page [`Connection::recv_page`] took out, for the next packets copied
    /// into the buffer (kept as a spare up to as many as the ring has pages).
    pub fn give_page(&mut self, page: Vec<u8>) {
        self.rbuf.give_page(page);
    }

    /// Bytes of a page [`Connection::recv_page`] hands out (set when the connection is
    /// established, by the negotiated packet size).
    pub fn recv_page_len(&self) -> usize {
        self.rbuf.page_slots() * self.rbuf.slot_size()
    }

    fn recv_end<T: Default>(&self) -> Result<T, RecvError> {
        match self.state {
            State::Closed(CloseReason::PeerShutdown) | State::Closed(CloseReason::Local) => {
                Ok(T::default())
            }
            State::Closed(r) => Err(RecvError::Closed(r)),
            _ => Err(RecvError::WouldBlock),
        }
    }

    /// Message or live mode: reads one whole message into `buf`. `Ok(0)` means the peer closed
    /// cleanly and nothing is left (empty messages are not delivered).
    pub fn recv_message(&mut self, now: Instant, buf: &mut [u8]) -> Result<usize, RecvError> {
        if self.cfg.mode == Mode::File {
            return Err(RecvError::WrongMode);
        }
        let now_us = self.us(now);
        match self.read_message(now_us, buf) {
            recv_buf::MsgRead::Done(n) => {
                self.stats.bytes_delivered += n as u64;
                self.on_app_read();
                Ok(n)
            }
            recv_buf::MsgRead::TooSmall(n) => Err(RecvError::BufferTooSmall(n)),
            recv_buf::MsgRead::None => self.recv_end(),
        }
    }

    /// True when a control packet waits to go out: after a read, the window update that
    /// tells the sender the buffer has room again (the I/O side should send it now, not at
    /// its next timer).
    pub fn ack_pending(&self) -> bool {
        self.pending.full_ack
    }

    /// True when a `recv` would return data or the end of the stream.
    pub fn is_readable(&self, now: Instant) -> bool {
        if matches!(self.state, State::Closed(_)) {
            return true;
        }
        match self.cfg.mode {
            Mode::File => self.rbuf.read_seq().lt(self.rcv_ack) && self.rbuf.head().is_some(),
            Mode::Message => self.rbuf.head_message(self.rcv_ack).is_some(),
            Mode::Live => self.live_deliverable(self.us(now)),
        }
    }

    /// Live mode: when the next complete message is due for delivery (already past when it
    /// waits for the reader); `None` when no complete message is held. A reader can sleep
    /// until then, or until the connection changes.
    pub fn next_delivery(&self) -> Option<Instant> {
        if self.cfg.mode != Mode::Live {
            return None;
        }
        self.live_head_play_us().map(|us| self.at(us))
    }

    /// Graceful close: unacknowledged data is still delivered (up to the linger time), then a
    /// shutdown is sent and the state becomes `Closed(Local)`.
    pub fn close(&mut self, now: Instant) {
        let now_us = self.us(now);
        match self.state {
            State::Connecting => self.close_with(CloseReason::Aborted),
            State::Connected => {
                if self.sbuf.len() == 0 || self.cfg.mode == Mode::Live {
                    self.pending.shutdown = 3;
                    self.close_with(CloseReason::Local);
                } else {
                    self.state = State::Closing;
                    self.linger_deadline = Some(now_us + self.cfg.linger.as_micros() as u64);
                }
            }
            _ => {}
        }
    }

    /// Immediate close: sends a shutdown and discards buffered data.
    pub fn abort(&mut self) {
        if matches!(self.state, State::Connected | State::Closing) {
            self.pending.shutdown = 3;
        }
        self.close_with(CloseReason::Aborted);
    }

    /// A snapshot of the statistics.
    pub fn stats(&self, now: Instant) -> ConnStats {
        let mut s = self.stats;
        s.elapsed_us = self.us(now);
        s.rtt_ms = self.srtt_us as f64 / 1000.0;
        s.rtt_var_ms = self.rttvar_us as f64 / 1000.0;
        s.send_period_us = self.ctl.send_period_us;
        s.cwnd_pkts = self.ctl.cwnd_pkts;
        s.flow_window_pkts = self.peer_window;
        s.pkts_in_flight = self.sbuf.in_flight() as u32;
        s.snd_buf_pkts = self.sbuf.len() as u32;
        s.snd_buf_bytes = self.sbuf.bytes();
        s.snd_buf_cap_pkts = self.sbuf.cap() as u32;
        s.rcv_buf_pkts = self.rbuf.count() as u32;
        s.pkts_recv_in_place = self.rbuf.kept();
        s.rcv_buf_bytes = self.rbuf.bytes();
        s.rcv_buf_cap_pkts = self.rbuf.cap() as u32;
        s.buf_mem_bytes = self.buffer_memory() as u64;
        s.rcv_pages_allocated = self.rbuf.pages_new();
        let (pps, bps) = self.rate.recv_rate();
        if self.stats.pkts_recv > 0 {
            s.est_link_capacity_pps = self.rate.bandwidth();
            s.recv_rate_pps = pps;
            s.recv_rate_bps = bps;
        } else {
            s.est_link_capacity_pps = self.peer_bandwidth_pps;
            s.recv_rate_pps = self.peer_recv_rate_pps;
            s.recv_rate_bps = self.peer_recv_rate_bps;
        }
        s.snd_loss_pkts = self.snd_loss.len();
        s.snd_loss_ranges = self.snd_loss.range_count() as u32;
        s.rcv_loss_pkts = self.rcv_loss.len();
        s.rcv_loss_ranges = self.rcv_loss.range_count() as u32;
        s.mss = self.mss;
        s.latency_ms = (self.latency_us / 1000) as u32;
        if let Some((avg, min)) = self.live_margin_us {
            s.latency_margin_ms = avg as f64 / 1000.0;
            s.latency_margin_min_ms = min as f64 / 1000.0;
        }
        s.send_lag_us = self.send_lag_us;
        s
    }

    // ---- shared helpers ----

    /// A round-trip sample this end measured itself (not the peer's estimate): also feeds
    /// the least round trip.
    fn own_rtt_sample(&mut self, now_us: u64, sample_us: u64) {
        let sample_us = sample_us.max(1);
        match self.min_rtt {
            Some((min, at)) if sample_us > min && now_us.saturating_sub(at) < MIN_RTT_WINDOW_US => {
            }
            _ => self.min_rtt = Some((sample_us, now_us)),
        }
        self.update_rtt(sample_us);
    }

    fn update_rtt(&mut self, sample_us: u64) {
        let sample_us = sample_us.max(1);
        if !self.rtt_sampled {
            self.srtt_us = sample_us;
            self.rttvar_us = sample_us / 2;
            self.rtt_sampled = true;
        } else {
            let diff = self.srtt_us.abs_diff(sample_us);
            self.rttvar_us = (3 * self.rttvar_us + diff) / 4;
            self.srtt_us = (7 * self.srtt_us + sample_us) / 8;
        }
    }

    /// Retransmission timeout (UDT's EXP period): RTT-based, backed off by `exp_count`.
    fn rto_us(&self) -> u64 {
        let base = self.srtt_us + 4 * self.rttvar_us + SYN_INTERVAL_US;
        // Until a real RTT sample exists, be as patient as TCP's initial RTO (RFC 6298: 1 s).
        let floor = if self.rtt_sampled {
            MIN_EXP_US
        } else {
            1_000_000
        };
        let rto = self.ctl.rto.map(|d| d.as_micros() as u64).unwrap_or(0);
        u64::from(self.exp_count) * base.max(floor).max(rto)
    }

    /// When unacknowledged data is presumed lost: an RTO after the acknowledgements last made
    /// progress (not after any packet: a receiver that repeats the same ACK while the last
    /// packet of a transfer is lost must not keep the timer from firing).
    fn rto_deadline_us(&self) -> Option<u64> {
        (self.sbuf.in_flight() > 0 && self.cfg.mode != Mode::Live)
            .then(|| self.rto_base_us + self.rto_us())
    }

    /// When the last packet is sent again, once, if nothing was acknowledged for two round
    /// trips and a SYN interval (the receiver's ACK period) after the last packet sent, with
    /// nothing else that may be sent (a tail-loss probe, as TCP's): no new data, or the
    /// receiver's window full. A lost tail leaves the receiver no later packet to find the hole by, so only
    /// the RTO repaired it, 300 ms at least: a third of a second at the end of a 10 ms
    /// transfer, and twice that when the retransmission was lost too. A connection whose
    /// window is a packet or two (its share of a receive queue that a thousand connections
    /// share) is in that state whenever the kernel drops what it has in flight, and with
    /// backed-off RTOs moved a few packets in five seconds while the others moved hundreds.
    /// The probe, or the hole it reveals, is repaired in a round trip. Only with a measured
    /// RTT, and not in live mode (whose losses are too late to repair by then).
    fn tail_probe_deadline_us(&self) -> Option<u64> {
        (!self.tail_probed
            && self.rtt_sampled
            && self.cfg.mode != Mode::Live
            && self.sbuf.in_flight() > 0
            && (self.sbuf.unsent() == 0 || !self.peer_window_open())
            && self.snd_loss.is_empty())
        .then(|| self.rto_base_us.max(self.last_data_us) + 2 * self.srtt_us + SYN_INTERVAL_US)
    }

    fn on_tail_probe(&mut self) {
        let last = self.sbuf.next_unsent().sub(1);
        self.snd_loss.insert(last, last);
        self.tail_probed = true;
        self.stats.tail_probes += 1;
    }

    /// When the peer is declared dead: the idle timeout after the last packet of any kind.
    fn idle_deadline_us(&self) -> u64 {
        self.last_rsp_us + self.cfg.peer_idle_timeout.as_micros() as u64
    }

    fn nak_interval_us(&self) -> u64 {
        ((self.srtt_us + 4 * self.rttvar_us) / 2).max(20_000)
    }

    fn on_rto(&mut self, now_us: u64) {
        // Nothing acknowledged for a whole RTO with data outstanding: everything unacknowledged
        // is presumed lost (UDT's EXP), and the controller is told. Backs off until an ACK
        // makes progress again.
        if self.snd_loss.is_empty() {
            let first = self.sbuf.base();
            let last = self.sbuf.next_unsent().sub(1);
            self.snd_loss.insert(first, last);
        }
        self.stats.timeouts += 1;
        let ctx = self.cc_ctx(now_us);
        self.cc.on_timeout(&ctx, &mut self.ctl);
        self.exp_count = (self.exp_count + 1).min(16);
        self.rto_base_us = now_us;
    }

    fn emit_ctrl(&self, now_us: u64, body: ControlBody<'_>, buf: &mut [u8]) -> Option<usize> {
        Control {
            timestamp: now_us as u32,
            dst_socket: self.peer_id,
            body,
        }
        .emit(buf)
    }

    fn poll_control(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize> {
        if self.pending.handshake {
            self.pending.handshake = false;
            if let Some(n) = self.emit_handshake(now_us, buf) {
                return Some(n);
            }
        }
        if self.state == State::Connecting {
            return None;
        }
        if self.pending.ackack_len > 0 {
            self.pending.ackack_len -= 1;
            let ack_no = self.pending.ackacks[self.pending.ackack_len];
            self.stats.ackacks_sent += 1;
            return self.emit_ctrl(now_us, ControlBody::AckAck { ack_no }, buf);
        }
        if self.pending.full_ack {
            self.pending.full_ack = false;
            self.pending.light_ack = false;
            return self.emit_full_ack(now_us, buf);
        }
        if self.pending.light_ack {
            self.pending.light_ack = false;
            // Nothing new to acknowledge (the ACK point is stuck behind a hole) sends nothing:
            // go on to the NAKs. Returning here starved them for as long as the hole lasted,
            // since every batch of arrivals asked for another light ACK.
            if let Some(n) = self.emit_light_ack(now_us, buf) {
                return Some(n);
            }
        }
        if self.pending.nak_len > 0 || self.pending.nak_sweep.is_some() {
            if let Some(n) = self.emit_nak(now_us, buf) {
                return Some(n);
            }
        }
        if let Some((msg_no, first, last)) = self.pending.dropreq.take() {
            self.dropreq_at_us = now_us;
            return self.emit_ctrl(
                now_us,
                ControlBody::DropReq {
                    msg_no,
                    first,
                    last,
                },
                buf,
            );
        }
        if self.pending.shutdown > 0 {
            self.pending.shutdown -= 1;
            return self.emit_ctrl(now_us, ControlBody::Shutdown, buf);
        }
        if self.pending.keepalive {
            self.pending.keepalive = false;
            return self.emit_ctrl(now_us, ControlBody::KeepAlive, buf);
        }
        None
    }
}

/// Payload bytes per packet for an MSS: the MSS minus IP, UDP and SRT headers (an IPv4 peer
/// reached through an IPv6 socket, as an IPv4-mapped address, is IPv4 on the wire).
pub(crate) fn payload_size(mss: u32, peer: SocketAddr) -> usize {
    let ip = if peer.ip().to_canonical().is_ipv6() {
        UDP_IPV4_OVERHEAD + 20
    } else {
        UDP_IPV4_OVERHEAD
    };
    (mss as usize).saturating_sub(ip + HEADER_LEN).max(16)
}

/// Bytes a receive slot holds for an MSS: the largest payload a peer may send, which is what
/// IPv4 leaves (a peer that counts IPv6's larger header sends less; libsrt 1.5 counts IPv4's
/// on either).
pub(crate) fn recv_slot_size(mss: u32) -> usize {
    (mss as usize)
        .saturating_sub(UDP_IPV4_OVERHEAD + HEADER_LEN)
        .max(16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_peer_behind_an_ipv6_socket_counts_as_ipv4() {
        let v4: SocketAddr = "10.0.0.1:9".parse().expect("literal");
        let mapped: SocketAddr = "[::ffff:10.0.0.1]:9".parse().expect("literal");
        let v6: SocketAddr = "[2001:db8::1]:9".parse().expect("literal");
        assert_eq!(payload_size(1500, v4), 1456);
        assert_eq!(payload_size(1500, mapped), 1456);
        assert_eq!(payload_size(1500, v6), 1436);
        // A receive slot holds what any peer may send for the MSS, IPv4's payload.
        assert_eq!(recv_slot_size(1500), 1456);
    }
}
