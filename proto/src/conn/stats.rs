//! Connection statistics, at least as rich as UDT's `perfmon` / libsrt's `SRT_TRACEBSTATS`.

use serde::Serialize;

/// A snapshot of one connection's counters and state. Totals are since the connection started;
/// rates are computed by the caller from two snapshots (or read from the `*_rate` estimates).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ConnStats {
    /// Microseconds since the connection was created.
    pub elapsed_us: u64,
    /// Data packets sent, retransmissions included.
    pub pkts_sent: u64,
    /// Data packets sent for the first time.
    pub pkts_sent_unique: u64,
    /// Data packets retransmitted.
    pub pkts_retransmitted: u64,
    /// Packets the peer reported lost (sum over NAKs, without double counting).
    pub pkts_snd_loss: u64,
    /// Packets the sender dropped as too late (live mode) or on a drop request.
    pub pkts_snd_dropped: u64,
    /// Message and live mode: packets the application handed over (a message takes as many
    /// as its length needs). Each ends acknowledged ([`pkts_acked`](Self::pkts_acked)),
    /// dropped by the sender ([`pkts_snd_dropped`](Self::pkts_snd_dropped)) or still in the
    /// send buffer ([`snd_buf_pkts`](Self::snd_buf_pkts)): the three add up to this.
    pub pkts_queued: u64,
    /// Data packets the peer acknowledged.
    pub pkts_acked: u64,
    /// Data packets received, duplicates included.
    pub pkts_recv: u64,
    /// Data packets received for the first time.
    pub pkts_recv_unique: u64,
    /// Packets the receiver detected missing (gaps in sequence).
    pub pkts_rcv_loss: u64,
    /// Packets the receiver gave up (live mode, too late to play): missing when their play
    /// time came, or received but part of a message that was not complete in time. Packets
    /// the sender dropped are counted apart ([`pkts_rcv_snd_dropped`](Self::pkts_rcv_snd_dropped)).
    pub pkts_rcv_dropped: u64,
    /// Packets that never arrived because the sender dropped them (its drop requests).
    pub pkts_rcv_snd_dropped: u64,
    /// Message and live mode: packets delivered to the application. Every sequence number
    /// the receiver has passed is delivered, dropped by the receiver or dropped by the
    /// sender: `pkts_delivered + pkts_rcv_dropped + pkts_rcv_snd_dropped` is the number of
    /// packets before the read point.
    pub pkts_delivered: u64,
    /// Data packets that arrived beyond the receive window and were not stored (the sender
    /// sends them again); an event count, not a fate.
    pub pkts_recv_beyond_window: u64,
    /// Data packets dropped on arrival because storing them would have taken memory
    /// beyond the endpoint's budget; the sender retransmits them.
    pub pkts_recv_no_memory: u64,
    /// Duplicate data packets received (retransmissions that were not needed).
    pub pkts_recv_dup: u64,
    /// Retransmitted packets received.
    pub pkts_recv_retrans: u64,
    /// Payload bytes sent, retransmissions included.
    pub bytes_sent: u64,
    /// Payload bytes sent for the first time.
    pub bytes_sent_unique: u64,
    /// Payload bytes received for the first time.
    pub bytes_recv_unique: u64,
    /// Payload bytes acknowledged by the peer.
    pub bytes_acked: u64,
    /// Data packets whose payload the receive buffer took where the runtime received it,
    /// without a copy (large payloads, see `Endpoint::handle_data_owned`).
    pub pkts_recv_in_place: u64,
    /// Data packets longer than a receive slot (the size agreed in the handshake): dropped,
    /// never truncated. A datagram that held several packets (a receive batch the kernel
    /// coalesced, read where it could not be told apart) also counts here.
    pub pkts_recv_oversized: u64,
    /// Payload bytes delivered to the application.
    pub bytes_delivered: u64,
    /// Of those, bytes handed out as whole pages of the receive buffer (no copy, see
    /// `Connection::recv_page`).
    pub bytes_delivered_in_pages: u64,
    /// Full ACKs sent / received.
    pub acks_sent: u64,
    /// Full ACKs received.
    pub acks_recv: u64,
    /// Light ACKs sent.
    pub light_acks_sent: u64,
    /// NAK packets sent.
    pub naks_sent: u64,
    /// NAK packets received.
    pub naks_recv: u64,
    /// ACKACKs sent.
    pub ackacks_sent: u64,
    /// Retransmission timeouts (EXP timer expirations with data outstanding).
    pub timeouts: u64,
    /// Tail-loss probes: the last packet sent again when nothing else was left to send and
    /// no acknowledgement came for two round trips.
    pub tail_probes: u64,
    /// Live mode: packets sent past a flow window that stayed closed for a round trip
    /// without an announcement from the peer (window probes).
    pub window_probes: u64,
    /// Control packets received that were malformed or unexpected.
    pub ctrl_ignored: u64,
    /// Time, µs, since its first data packet that the sender was due to send new data and
    /// did not: it had nothing to send (the application wrote slower than the path carried,
    /// or everything was sent) or it was kept from running past its pacing credit. A large
    /// share of a transfer's time means the sender, not the path, set the rate.
    pub send_lag_us: u64,
    /// Smoothed round-trip time, milliseconds.
    pub rtt_ms: f64,
    /// Round-trip time variance, milliseconds.
    pub rtt_var_ms: f64,
    /// Current inter-packet sending period, microseconds.
    pub send_period_us: f64,
    /// Current congestion window, packets.
    pub cwnd_pkts: f64,
    /// Peer's flow window (free receive buffer), packets.
    pub flow_window_pkts: u32,
    /// Packets sent and not yet acknowledged.
    pub pkts_in_flight: u32,
    /// Send buffer: packets held (unsent + unacknowledged).
    pub snd_buf_pkts: u32,
    /// Send buffer: bytes held.
    pub snd_buf_bytes: u64,
    /// Send buffer capacity, packets (grows with the bandwidth-delay product).
    pub snd_buf_cap_pkts: u32,
    /// Receive buffer: packets held (received, not yet read).
    pub rcv_buf_pkts: u32,
    /// Receive buffer: bytes held.
    pub rcv_buf_bytes: u64,
    /// Receive buffer capacity, packets (grows with the bandwidth-delay product).
    pub rcv_buf_cap_pkts: u32,
    /// Memory both buffers hold now, bytes: pages and rings allocated as data flows, given
    /// back after a second without traffic (the capacities above are what they may grow to).
    pub buf_mem_bytes: u64,
    /// Receive buffer pages allocated (and zeroed) since the start rather than reused: pages
    /// a reader takes out and gives back, and pages the read point leaves, are reused, so
    /// this grows while the buffer grows, not with the bytes received.
    pub rcv_pages_allocated: u64,
    /// Link capacity estimated from packet pairs, packets per second.
    pub est_link_capacity_pps: u32,
    /// Receive rate reported by (sender) or measured at (receiver) the receiver, packets/s.
    pub recv_rate_pps: u32,
    /// Receive rate, bytes/s.
    pub recv_rate_bps: u64,
    /// Sender's loss list: packets waiting for retransmission.
    pub snd_loss_pkts: u64,
    /// Sender's loss list: ranges stored (its memory is proportional to this).
    pub snd_loss_ranges: u32,
    /// Receiver's loss list: packets missing.
    pub rcv_loss_pkts: u64,
    /// Receiver's loss list: ranges stored.
    pub rcv_loss_ranges: u32,
    /// Negotiated maximum segment size.
    pub mss: u32,
    /// Negotiated TSBPD latency, milliseconds (live mode).
    pub latency_ms: u32,
    /// Live mode, receiver: how long before its play time a packet arrives, milliseconds,
    /// smoothed over arrivals (retransmissions included). Near zero or below, packets are
    /// (about to be) too late: the latency is too short for this path.
    pub latency_margin_ms: f64,
    /// Live mode, receiver: the least such margin of any packet since the start.
    pub latency_margin_min_ms: f64,
}
