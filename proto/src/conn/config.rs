//! Per-connection configuration: transfer mode, latency, buffers, timeouts.

use std::time::Duration;

/// The payload of a packet on a 1500-byte MTU path over IPv4, bytes: the unit in which the
/// initial buffers are sized.
const STANDARD_PAYLOAD: usize = 1456;
/// Fewest packets a buffer holds.
const MIN_BUFFER_PKTS: usize = 64;

/// How fast live mode may send (libsrt's SRTO_MAXBW, SRTO_INPUTBW and SRTO_OHEADBW).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MaxBw {
    /// The live controller's own rule (`maxbw=-1`): 1 Gbit/s, or the measured input rate
    /// plus 25 % where that is more.
    Default,
    /// At most this many bytes per second (`maxbw=N`).
    Absolute(u64),
    /// The input rate plus `overhead_pct` percent (`maxbw=0`): the rate given
    /// (`inputbw=N`, bytes/s), or if none, the measured one.
    Relative {
        /// Input rate in bytes per second; 0 = measure it.
        input_bps: u64,
        /// Overhead for retransmissions, percent (5 to 100, default 25).
        overhead_pct: u32,
    },
}

/// How the connection carries data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A reliable byte stream (SRT file mode with the stream API, as `srt-file-transmit`).
    File,
    /// Reliable whole messages of any size, delivered in order (SRT file mode, message API).
    Message,
    /// Live: messages paced at a maximum bandwidth, delivered at their play time
    /// (TSBPD) and dropped when too late (SRT live mode).
    Live,
}

/// Configuration of one connection. Private fields, chainable setters; every default is chosen
/// so that reaching the link rate needs no tuning.
#[derive(Debug, Clone)]
pub struct ConnConfig {
    pub(crate) mode: Mode,
    pub(crate) mss: u32,
    pub(crate) mss_explicit: bool,
    pub(crate) latency: Duration,
    pub(crate) peer_latency: Option<Duration>,
    pub(crate) too_late_drop: bool,
    pub(crate) nak_report: bool,
    pub(crate) stream_id: Option<Vec<u8>>,
    pub(crate) cc: String,
    pub(crate) max_bw_bps: u64,
    pub(crate) buffer_cap_bytes: usize,
    pub(crate) snd_cap_bytes: Option<usize>,
    pub(crate) rcv_cap_bytes: Option<usize>,
    pub(crate) max_bw: MaxBw,
    pub(crate) initial_window_pkts: u32,
    pub(crate) peer_idle_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) linger: Duration,
    pub(crate) file_digest: bool,
    pub(crate) initial_seq: Option<crate::seq::SeqNo>,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            mode: Mode::File,
            // Ethernet MTU, as libsrt's SRTO_MSS default.
            mss: 1500,
            mss_explicit: false,
            // libsrt's default SRTO_LATENCY (120 ms) for live mode.
            latency: Duration::from_millis(120),
            peer_latency: None,
            // libsrt's SRTO_TLPKTDROP and SRTO_NAKREPORT defaults in live mode.
            too_late_drop: true,
            nak_report: true,
            stream_id: None,
            cc: String::new(),
            max_bw_bps: 0,
            // Upper bound per direction; the buffers start small and grow to 2x the measured
            // bandwidth-delay product, never past this. 256 MiB covers 10 Gbit/s at 100 ms RTT.
            buffer_cap_bytes: 256 << 20,
            snd_cap_bytes: None,
            rcv_cap_bytes: None,
            max_bw: MaxBw::Default,
            // 8192 packets (~12 MB): enough for 1 Gbit/s at 100 ms before any growth.
            initial_window_pkts: 8192,
            // libsrt's SRTO_PEERIDLETIMEO default.
            peer_idle_timeout: Duration::from_secs(5),
            // libsrt's SRTO_CONNTIMEO default.
            connect_timeout: Duration::from_secs(3),
            // How long close() waits without any acknowledgement progress before giving up on
            // unacknowledged data (libsrt's SRTO_LINGER is 180 s in file mode; a transfer that
            // makes no progress for a minute is dead).
            linger: Duration::from_secs(60),
            file_digest: false,
            initial_seq: None,
        }
    }
}

impl ConnConfig {
    /// A configuration for `mode` with its defaults.
    pub fn new(mode: Mode) -> Self {
        ConnConfig {
            mode,
            ..Default::default()
        }
    }
    /// The transfer mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// Maximum segment size (IP packet size), bytes; the smaller of both ends wins. Default:
    /// 1500, which the runtime raises to the path MTU the kernel reports for the peer (64 KiB
    /// on loopback, 9000 on jumbo-frame links), and a listener accepts what the caller
    /// proposes. Setting it explicitly turns both off.
    pub fn set_mss(&mut self, mss: u32) -> &mut Self {
        self.mss = mss.clamp(76, 65_535);
        self.mss_explicit = true;
        self
    }
    /// Sets the MSS from a measured path MTU without marking it explicit. Live and message
    /// modes keep their 1500: live peers expect packets of at most 1456 payload bytes, and
    /// every message takes a packet (a slot of the buffers) of its own, so buffers counted
    /// in 64 KiB loopback packets would hold a few hundred messages: 64-byte messages
    /// moved at 99,000 a second over loopback, the window full, the CPU half idle.
    pub fn set_mss_from_path(&mut self, path_mtu: u32) -> &mut Self {
        if !self.mss_explicit && self.mode == Mode::File {
            self.mss = path_mtu.clamp(576, 65_535);
        }
        self
    }
    /// The MSS in effect.
    pub fn mss(&self) -> u32 {
        self.mss
    }
    /// Whether the MSS was set explicitly.
    pub fn mss_is_explicit(&self) -> bool {
        self.mss_explicit
    }
    /// TSBPD latency for live mode, as libsrt's SRTO_LATENCY: the receiving latency this end
    /// asks for, and unless [`set_peer_latency`](Self::set_peer_latency) says otherwise, the
    /// one it asks its peer to receive with. Default 120 ms. Each direction plays out at the
    /// larger of what its receiver asks for and what its sender asks of it.
    pub fn set_latency(&mut self, latency: Duration) -> &mut Self {
        self.latency = latency;
        self
    }
    /// The receiving latency this end asks for (SRTO_RCVLATENCY).
    pub fn latency(&self) -> Duration {
        self.latency
    }
    /// The latency asked of the peer's receiver (SRTO_PEERLATENCY). Default: as
    /// [`set_latency`](Self::set_latency).
    pub fn set_peer_latency(&mut self, latency: Option<Duration>) -> &mut Self {
        self.peer_latency = latency;
        self
    }
    /// The latency asked of the peer's receiver.
    pub fn peer_latency(&self) -> Duration {
        self.peer_latency.unwrap_or(self.latency)
    }
    /// Live mode: drop packets too late to play (SRTO_TLPKTDROP). Default on. Off, the
    /// receiver waits for every missing packet however late (delivery stalls behind it) and
    /// the sender keeps everything until it is acknowledged.
    pub fn set_too_late_drop(&mut self, on: bool) -> &mut Self {
        self.too_late_drop = on;
        self
    }
    /// Whether too-late packet drop is on.
    pub fn too_late_drop(&self) -> bool {
        self.too_late_drop
    }
    /// Periodic loss reports (SRTO_NAKREPORT): the receiver repeats its loss list every
    /// NAK interval. Default on. Off, each loss is reported once when it is found, and the
    /// sender's timeout repairs the rest (never in live mode, where the timeout is off).
    pub fn set_nak_report(&mut self, on: bool) -> &mut Self {
        self.nak_report = on;
        self
    }
    /// Stream id sent by a caller (at most 512 bytes). Default none.
    pub fn set_stream_id(&mut self, sid: Option<Vec<u8>>) -> &mut Self {
        self.stream_id = sid.map(|mut s| {
            s.truncate(512);
            s
        });
        self
    }
    /// The stream id.
    pub fn stream_id(&self) -> Option<&[u8]> {
        self.stream_id.as_deref()
    }
    /// Congestion controller name from the endpoint's registry. Default: "bbr" (model-based,
    /// loss-tolerant) for file and message mode, "live" for live mode. "file"/"udt" select
    /// UDT's native control, as libsrt's file mode uses.
    pub fn set_cc(&mut self, name: &str) -> &mut Self {
        self.cc = name.to_string();
        self
    }
    /// The congestion controller name in effect.
    pub fn cc(&self) -> &str {
        if !self.cc.is_empty() {
            &self.cc
        } else if self.mode == Mode::Live {
            "live"
        } else {
            "bbr"
        }
    }
    /// Maximum sending bandwidth in bytes per second (0 = no cap; live mode then uses
    /// 1.25 x the input rate or 1 Gbit/s).
    pub fn set_max_bw(&mut self, bytes_per_s: u64) -> &mut Self {
        self.max_bw_bps = bytes_per_s;
        self.max_bw = if bytes_per_s > 0 {
            MaxBw::Absolute(bytes_per_s)
        } else {
            MaxBw::Default
        };
        self
    }
    /// Memory cap of each of the send and receive buffers, bytes. Default 256 MiB.
    pub fn set_buffer_cap(&mut self, bytes: usize) -> &mut Self {
        self.buffer_cap_bytes = bytes.max(64 << 10);
        self
    }
    /// Memory cap of the send buffer alone (SRTO_SNDBUF), bytes; at least 64 packets.
    /// Default: as [`set_buffer_cap`](Self::set_buffer_cap).
    pub fn set_send_buffer_cap(&mut self, bytes: Option<usize>) -> &mut Self {
        self.snd_cap_bytes = bytes;
        self
    }
    /// Memory cap of the receive buffer alone (SRTO_RCVBUF), bytes; at least 64 packets.
    /// It bounds the window the peer may send into. Default: as
    /// [`set_buffer_cap`](Self::set_buffer_cap).
    pub fn set_recv_buffer_cap(&mut self, bytes: Option<usize>) -> &mut Self {
        self.rcv_cap_bytes = bytes;
        self
    }
    /// Live mode's sending rate limit. Default [`MaxBw::Default`];
    /// [`set_max_bw`](Self::set_max_bw) sets an absolute one.
    pub fn set_max_bw_rule(&mut self, rule: MaxBw) -> &mut Self {
        self.max_bw = rule;
        self.max_bw_bps = match rule {
            MaxBw::Absolute(b) => b,
            _ => 0,
        };
        self
    }
    /// The sending rate limit in effect.
    pub fn max_bw_rule(&self) -> MaxBw {
        self.max_bw
    }
    /// Initial receive window in packets before it sizes itself. Default 8192. The send and
    /// receive buffers start with room for this many packets, but for no more bytes than
    /// this many 1456-byte packets: with loopback's 64 KiB datagrams, 8192 packets are half
    /// a gigabyte, where a few megabytes carry the path.
    pub fn set_initial_window(&mut self, pkts: u32) -> &mut Self {
        self.initial_window_pkts = pkts.clamp(32, 1 << 24);
        self
    }
    /// Packets the send buffer starts with and may grow to, for `payload_size` bytes.
    pub(crate) fn send_buffer_pkts(&self, payload_size: usize) -> (usize, usize) {
        let max = self.capped_pkts(payload_size, self.snd_cap_bytes);
        (self.initial_buffer_pkts(payload_size).min(max), max)
    }
    /// Packets the receive buffer starts with and may grow to, for `payload_size` bytes.
    pub(crate) fn recv_buffer_pkts(&self, payload_size: usize) -> (usize, usize) {
        let max = self.capped_pkts(payload_size, self.rcv_cap_bytes);
        (self.initial_buffer_pkts(payload_size).min(max), max)
    }
    fn capped_pkts(&self, payload_size: usize, cap: Option<usize>) -> usize {
        let all = self.buffer_max_pkts(payload_size);
        match cap {
            Some(b) => all.min((b / payload_size.max(1)).max(MIN_BUFFER_PKTS)),
            None => all,
        }
    }

    /// Packets the buffers start with for payloads of `payload_size` bytes (see
    /// [`set_initial_window`](Self::set_initial_window)), within the memory cap.
    pub(crate) fn initial_buffer_pkts(&self, payload_size: usize) -> usize {
        let max_pkts = self.buffer_max_pkts(payload_size);
        let by_bytes = self.initial_window_pkts as usize * STANDARD_PAYLOAD / payload_size.max(1);
        (self.initial_window_pkts as usize)
            .min(by_bytes.max(MIN_BUFFER_PKTS))
            .min(max_pkts)
    }

    /// Most packets the buffers may grow to for payloads of `payload_size` bytes.
    pub(crate) fn buffer_max_pkts(&self, payload_size: usize) -> usize {
        (self.buffer_cap_bytes / payload_size.max(1)).max(MIN_BUFFER_PKTS)
    }

    /// Silence after which the peer is declared dead. Default 5 s.
    pub fn set_peer_idle_timeout(&mut self, t: Duration) -> &mut Self {
        self.peer_idle_timeout = t;
        self
    }
    /// How long a caller tries to connect. Default 3 s.
    pub fn set_connect_timeout(&mut self, t: Duration) -> &mut Self {
        self.connect_timeout = t;
        self
    }
    /// How long close() waits without acknowledgement progress before giving up on
    /// unacknowledged data. Default 60 s.
    pub fn set_linger(&mut self, t: Duration) -> &mut Self {
        self.linger = t;
        self
    }
    /// Offer (caller) or accept (listener) the end-to-end file digest trailer with slipstream
    /// peers. Default off; the file transfer API turns it on.
    pub fn set_file_digest(&mut self, on: bool) -> &mut Self {
        self.file_digest = on;
        self
    }
    /// Initial sequence number of a caller (default: random, as the protocol intends). Fixing
    /// it is for tests, e.g. of sequence-number wrap-around.
    pub fn set_initial_seq(&mut self, isn: Option<crate::seq::SeqNo>) -> &mut Self {
        self.initial_seq = isn;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_mode_keeps_1500_byte_packets_whatever_the_path() {
        let mut live = ConnConfig::new(Mode::Live);
        live.set_mss_from_path(65_536);
        assert_eq!(live.mss(), 1500);
        let mut file = ConnConfig::new(Mode::File);
        file.set_mss_from_path(65_536);
        assert_eq!(file.mss(), 65_535);
        // An explicit MSS is kept in live mode too.
        live.set_mss(9000).set_mss_from_path(65_536);
        assert_eq!(live.mss(), 9000);
    }

    #[test]
    fn send_and_receive_buffer_caps_are_separate() {
        let mut c = ConnConfig::new(Mode::Live);
        c.set_recv_buffer_cap(Some(1456 * 100))
            .set_send_buffer_cap(Some(1456 * 1000));
        assert_eq!(c.recv_buffer_pkts(1456), (100, 100));
        assert_eq!(c.send_buffer_pkts(1456), (1000, 1000));
        // Never below 64 packets.
        c.set_recv_buffer_cap(Some(1));
        assert_eq!(c.recv_buffer_pkts(1456).1, 64);
    }

    #[test]
    fn initial_buffers_are_sized_in_bytes_as_well_as_packets() {
        let mut cfg = ConnConfig::default();
        // A 1500-byte path: the initial window as it is.
        assert_eq!(cfg.initial_buffer_pkts(1456), 8192);
        // Loopback's 64 KiB datagrams: the same 11.9 MB, not 8192 of them (512 MiB).
        assert_eq!(cfg.initial_buffer_pkts(65_483), 182);
        // Small payloads: never more packets than the window.
        assert_eq!(cfg.initial_buffer_pkts(100), 8192);
        // The memory cap bounds both, and a buffer holds at least 64 packets.
        cfg.set_buffer_cap(1 << 20);
        assert_eq!(cfg.initial_buffer_pkts(1456), 720);
        assert_eq!(cfg.buffer_max_pkts(1456), 720);
        assert_eq!(cfg.initial_buffer_pkts(65_483), 64);
        assert_eq!(cfg.buffer_max_pkts(65_483), 64);
    }
}
