//! The sending half: pacing, retransmission before new data, ACK and NAK processing, the
//! congestion controller's events, send-buffer growth and live-mode too-late drop.

use super::{CloseReason, Connection, Mode, State, SYN_INTERVAL_US};
use crate::seq::SeqNo;
use crate::wire::{Ack, DataHeader, EncryptionKey, LossRanges, HEADER_LEN};

/// Pacing releases, as one micro-burst, every packet due within this much of now. Sleeping for
/// a few microseconds between packets costs a user-space sender far more (a context switch
/// each) than a 100 µs burst costs the network; the kernel's fq qdisc paces with a quantum too.
pub(super) const PACING_QUANTUM_US: f64 = 100.0;
/// Most pacing credit the sender may bank when it falls behind, µs: a user-space sender kept
/// off the CPU for a few milliseconds (two cores shared by both ends and an emulator, or by
/// its own application threads) then sends what fell due meanwhile as one burst. Only time
/// the sender was kept from sending earns credit (time with nothing to send does not, see
/// `poll_data`), so a burst is at most what the path would have carried meanwhile, while the
/// bottleneck's queue drained. A queue shorter than the burst drops its excess, which costs
/// retransmissions where less credit costs the time itself. The credit does not shrink with
/// the round trip: a thread woken behind two busy ones waits milliseconds whatever the path.
/// On loopback (RTT 0.3 ms) a credit of a quarter round trip, floored at 1 ms, held 1 GiB
/// transfers to a median of 5.4 Gbit/s against 7.4 with 4 ms (six alternating runs each); at
/// 1 Gbit/s, 10 ms with 5 % loss, 1 ms of credit cost about 5 % (0.87 against 0.91 Gbit/s
/// through `slipstream netem`).
const MAX_BURST_US: f64 = 4000.0;
/// Largest receive window taken from a peer, packets (a hostile one must not move the
/// flow-control edge around the sequence space).
const MAX_PEER_WINDOW: u32 = 1 << 26;
/// Most of the peer's reported `srtt + 4 rttvar` that holds back a repeated retransmission
/// (see `Connection::rexmit_guard_us`): a peer reporting nonsense must not hold a loss
/// unrepaired for longer.
const MAX_PEER_RTT_BOUND_US: u64 = 3_000_000;
/// ... and at most this many packets of it: 3 ms at 1 Gbit/s with 1500-byte packets.
const MAX_BURST_PKTS: f64 = 256.0;
/// File and message mode: a full ACK that acknowledges fewer than this many packets since
/// the last ACKACK gets none unless [`ACKACK_INTERVAL_US`] passed (see `on_ack`).
pub const ACKACK_EVERY_PKTS: u64 = 16;
/// File and message mode: the longest an ACKACK waits for [`ACKACK_EVERY_PKTS`] packets.
pub const ACKACK_INTERVAL_US: u64 = 100_000;

/// Whole microseconds of a lag, 0 for anything negative or not finite.
fn lag_us(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 {
        x as u64
    } else {
        0
    }
}

impl Connection {
    pub(super) fn window(&self) -> usize {
        let cwnd = if self.ctl.cwnd_pkts.is_finite() {
            self.ctl.cwnd_pkts.max(2.0)
        } else {
            2.0
        };
        (cwnd as usize).min(self.peer_window as usize)
    }

    /// The sending period and the pacing credit, µs.
    fn pacing(&self) -> (f64, f64) {
        let period = if self.ctl.send_period_us.is_finite() {
            self.ctl.send_period_us.max(0.0)
        } else {
            0.0
        };
        (period, MAX_BURST_US.min(MAX_BURST_PKTS * period))
    }

    /// Records the lag under way at `now_us` ([`CcContext::send_lag_us`]): due with nothing
    /// to send, or late past the pacing credit. The sender would record it when it next polls
    /// or sends, with the same effect on its pacing; the controller must see it now.
    ///
    /// [`CcContext::send_lag_us`]: crate::cc::CcContext::send_lag_us
    pub(super) fn settle_lag(&mut self, now_us: u64) {
        // Nothing counts before the first data packet (see `add_lag`); a connection that only
        // receives calls this for every packet it gets and has nothing to settle.
        if self.stats.pkts_sent == 0
            || !matches!(self.state, State::Connected | State::Closing)
            || !self.window_open()
        {
            return;
        }
        let now = now_us as f64;
        let floor = if self.sbuf.unsent() == 0 && self.snd_loss.is_empty() {
            now
        } else {
            now - self.pacing().1
        };
        if self.next_send_us < floor {
            self.add_lag(floor - self.next_send_us);
            self.next_send_us = floor;
        }
    }

    /// Adds `us` to the sender's lag once it has sent data: before its first packet a
    /// connection waits for its application (or only receives), which is no lag of a sender.
    fn add_lag(&mut self, us: f64) {
        if self.stats.pkts_sent > 0 {
            self.send_lag_us = self.send_lag_us.saturating_add(lag_us(us));
        }
    }

    /// Whether the windows let another new packet go: the congestion window bounds the
    /// packets in the network, the flow window every unacknowledged one (the receiver keeps
    /// those delivered behind a hole in its buffer until the hole fills).
    /// Whether a new packet may go out: the congestion window has room, and the packet lies
    /// within the receiver's buffer as its last full ACK advertised it. Light ACKs move the
    /// acknowledgement point without a window, and the packets they acknowledge may still
    /// wait for the receiving application: counting the advertised room from them overran a
    /// receiver whose application fell behind.
    fn window_open(&self) -> bool {
        self.in_network() < self.window() && self.peer_window_open()
    }

    /// Whether a new packet lies within the receiver's advertised window (see
    /// [`Connection::window_open`], which adds the congestion window).
    pub(super) fn peer_window_open(&self) -> bool {
        self.sbuf.in_flight() < self.peer_window as usize
            && self
                .peer_edge
                .is_none_or(|edge| self.sbuf.next_unsent().lt(edge))
    }

    pub(super) fn has_data_to_send(&self) -> bool {
        matches!(self.state, State::Connected | State::Closing)
            && (!self.snd_loss.is_empty()
                || (self.sbuf.unsent() > 0 && (self.window_open() || self.window_probe)))
    }

    /// Live mode: when one packet goes out past a closed flow window (a window probe). A
    /// libsrt receiver announces the room its reads make only with its next ACK, and sends
    /// none while nothing new arrives once the sender has confirmed the last: a sender that
    /// filled its window then waits for an announcement that never comes, and live mode has
    /// no retransmission timeout to break the silence. Data too late to play would be
    /// dropped a second later. The probe is due a round trip (with its variance, at least
    /// two ACK periods) after the last full ACK or probe; the peer stores it if it has room
    /// and acknowledges it, announcing its window.
    pub(super) fn window_probe_deadline_us(&self) -> Option<u64> {
        (self.cfg.mode == Mode::Live
            && !self.window_probe
            && self.sbuf.unsent() > 0
            && self.peer_edge.is_some()
            && !self.window_open())
        .then(|| {
            let wait = (self.srtt_us + 4 * self.rttvar_us).max(2 * SYN_INTERVAL_US);
            self.last_window_us + wait
        })
    }

    /// How long after a retransmission a repeated report of the same loss is taken for the
    /// peer not having seen it yet: this end's `srtt + 4 rttvar`, or the peer's own (from its
    /// last full ACK) where that is longer, at most [`MAX_PEER_RTT_BOUND_US`]. This end's
    /// figure smooths the peer's smoothed round trip a second time, so its variance reads a
    /// few milliseconds while the queue's delay moves by tens: on a 1 Gbit/s, 50 ms path with
    /// 1 % loss it held 53-84 ms while repeats of losses still being repaired came 54-129 ms
    /// after the retransmission, and about 1,700 packets a run arrived twice.
    fn rexmit_guard_us(&self) -> u64 {
        let own = self.srtt_us + 4 * self.rttvar_us;
        own.max(self.peer_rtt_bound_us.min(MAX_PEER_RTT_BOUND_US))
    }

    /// Packets presumed in the network, which the window bounds. SRT has no selective ACK, and
    /// the cumulative ACK stalls behind every hole for a round trip or more, so counting every
    /// unacknowledged packet would count the packets delivered behind the holes too: under 1 %
    /// loss several BDP of them, enough to close any sane window. The stand-in: the receiver has
    /// the packet after its highest reported loss (it found the gap when that one arrived), so
    /// the packets in the network are those sent after it, plus the retransmissions not yet
    /// acknowledged. Lost packets waiting for their retransmission are not in the network.
    pub(super) fn in_network(&self) -> usize {
        let sent = self.sbuf.in_flight();
        // The known-received packet, as an offset into the sent packets; anything outside
        // them (no loss yet, or only before the ACK point) leaves every packet counted.
        let known = self.max_loss_seen.next().diff(self.sbuf.base());
        let beyond = match usize::try_from(known) {
            Ok(k) if k < sent => sent - 1 - k,
            _ => sent,
        };
        (beyond + self.sbuf.retransmitted()).min(sent)
    }

    /// The next data packet due: its header, and its payload too unless `gather` (then only
    /// the header is written; the payload stays in the send buffer under its sequence
    /// number). Returns the bytes written, the sequence number and the payload's length.
    pub(super) fn poll_data(
        &mut self,
        now_us: u64,
        buf: &mut [u8],
        gather: bool,
    ) -> Option<(usize, SeqNo, usize)> {
        if !matches!(self.state, State::Connected | State::Closing)
            || (now_us as f64) + PACING_QUANTUM_US < self.next_send_us
        {
            return None;
        }
        // Retransmissions first (UDT: the loss list has priority over new data).
        while let Some(seq) = self.snd_loss.pop_first() {
            let Some((meta, _)) = self.sbuf.get(seq) else {
                continue;
            };
            // A first report is acted on at once. A packet already retransmitted is probably
            // still on its way if that was less than an RTT (with its variance) ago: periodic
            // NAKs repeat losses, and answering each one would flood a queue.
            if meta.last_sent_us == 0
                || (meta.retransmitted
                    && now_us.saturating_sub(meta.last_sent_us) < self.rexmit_guard_us())
            {
                continue;
            }
            return self.emit_data(now_us, seq, true, buf, gather);
        }
        if self.sbuf.unsent() > 0 && (self.window_open() || self.window_probe) {
            if !self.window_open() {
                self.stats.window_probes += 1;
                self.last_window_us = now_us;
            }
            self.window_probe = false;
            let seq = self.sbuf.next_unsent();
            return self.emit_data(now_us, seq, false, buf, gather);
        }
        // Due to send and nothing to send (no data, or the window is full): the time waited
        // here earns no credit. Only time the sender was kept from sending (not running) does.
        // Time without data is lag; a full window is the controller's own limit.
        let now = now_us as f64;
        if self.next_send_us < now {
            if self.sbuf.unsent() == 0 && self.window_open() {
                self.add_lag(now - self.next_send_us);
            }
            self.next_send_us = now;
        }
        None
    }

    fn emit_data(
        &mut self,
        now_us: u64,
        seq: SeqNo,
        rexmit: bool,
        buf: &mut [u8],
        gather: bool,
    ) -> Option<(usize, SeqNo, usize)> {
        let (meta, payload) = self.sbuf.get(seq)?;
        let len = if gather {
            HEADER_LEN
        } else {
            HEADER_LEN + payload.len()
        };
        let hdr = DataHeader {
            seq,
            position: meta.pos,
            in_order: meta.in_order,
            key: EncryptionKey::None,
            retransmitted: rexmit,
            msg_no: meta.msg_no,
            timestamp: meta.origin_us as u32,
            dst_socket: self.peer_id,
        };
        let (head, rest) = buf.get_mut(..len)?.split_at_mut(HEADER_LEN);
        hdr.emit(head.try_into().ok()?);
        if !gather {
            rest.copy_from_slice(payload);
        }
        if !rexmit {
            if let Some((tap, left)) = self.send_tap.as_mut() {
                let n = payload
                    .len()
                    .min(usize::try_from(*left).unwrap_or(usize::MAX));
                if n > 0 {
                    tap.sent(&payload[..n]);
                    *left -= n as u64;
                    self.tapped += n as u64;
                }
            }
        }
        let bytes = payload.len();
        if self.sbuf.in_flight() == 0 {
            // The retransmission timer runs from the moment something is outstanding.
            self.rto_base_us = now_us;
        }
        self.sbuf.mark_sent(seq, now_us, rexmit);
        // Pacing. The first packet of each probe pair (sequence % 16 == 0) is followed at once
        // by the next, so the receiver can estimate the link capacity from their spacing.
        if rexmit || !seq.get().is_multiple_of(16) {
            let (period, credit) = self.pacing();
            let floor = now_us as f64 - credit;
            if self.next_send_us < floor {
                // Time beyond the credit is lost: this packet goes out that late.
                self.add_lag(floor - self.next_send_us);
                self.next_send_us = floor;
            }
            self.next_send_us += period;
        }
        self.stats.pkts_sent += 1;
        self.stats.bytes_sent += bytes as u64;
        if rexmit {
            self.stats.pkts_retransmitted += 1;
        } else {
            self.stats.pkts_sent_unique += 1;
            self.stats.bytes_sent_unique += bytes as u64;
        }
        let ctx = self.cc_ctx(now_us);
        self.cc
            .on_packet_sent(&ctx, &mut self.ctl, seq, bytes, rexmit);
        Some((len, seq, bytes))
    }

    pub(super) fn on_ack(&mut self, now_us: u64, a: &Ack) {
        // Never accept an acknowledgement for data not sent yet: a hostile or confused peer
        // must not make us drop unsent data.
        if self.sbuf.next_unsent().lt(a.ack_seq) {
            self.stats.ctrl_ignored += 1;
            return;
        }
        if self.peer_ack.lt(a.ack_seq) {
            self.peer_ack = a.ack_seq;
        }
        if self
            .dropped_to
            .is_some_and(|(_, end)| !self.peer_ack.lt(end))
        {
            self.dropped_to = None;
        }
        let (pkts, bytes) = self.sbuf.ack(a.ack_seq);
        self.acked_for_rate.0 += u64::from(pkts);
        self.acked_for_rate.1 += bytes;
        if let Some(info) = a.info {
            self.stats.acks_recv += 1;
            // An ACKACK at most once per SYN interval (as libsrt sends them), or again for an
            // ACK repeated: the receiver takes one RTT sample from it. A receiver whose
            // application reads as data arrive sends a full ACK for every packet or two that
            // reopens its window, and answering each doubled the control datagrams (100
            // streams over loopback: two control datagrams for every data packet). In file
            // and message mode, also no more than one per ACKACK_EVERY_PKTS packets
            // acknowledged, or per ACKACK_INTERVAL_US: 1,000 streams over loopback, each with
            // windows of a packet or two, got a full ACK for about every data packet even so,
            // and at one ACKACK per SYN interval the control datagrams were twice the data
            // packets (13.8 Gbit/s in all against 16.0 with one per 100 ms, median of four
            // alternated runs). A flow of more than 1,600 packets a second keeps one per SYN
            // interval, and the receiver gets ten samples a second at least.
            let acked = self.stats.pkts_acked + u64::from(pkts);
            let live = self.cfg.mode == Mode::Live;
            let due = self.last_ackack.is_none_or(|(at, no, acked_then)| {
                let since = now_us.saturating_sub(at);
                no == a.ack_no
                    || (since >= SYN_INTERVAL_US
                        && (live
                            || acked.saturating_sub(acked_then) >= ACKACK_EVERY_PKTS
                            || since >= ACKACK_INTERVAL_US))
            });
            if due && self.pending.ackack_len < self.pending.ackacks.len() {
                self.pending.ackacks[self.pending.ackack_len] = a.ack_no;
                self.pending.ackack_len += 1;
                self.last_ackack = Some((now_us, a.ack_no, acked));
            }
            // The receiver's estimate; before our first sample, not its placeholder (the
            // initial 100 ms it reports until its own first ACKACK), which would then take
            // dozens of ACKs to smooth away.
            let placeholder = !self.rtt_sampled && u64::from(info.rtt_us) == super::INITIAL_RTT_US;
            if info.rtt_us > 0 && !placeholder {
                self.update_rtt(u64::from(info.rtt_us));
            }
            // The peer's bound once it has measured (its initial 100 + 4 x 50 ms would hold
            // a twice-lost packet for 300 ms on a 10 ms path).
            let (rtt, var) = (u64::from(info.rtt_us), u64::from(info.rtt_var_us));
            if rtt > 0 && (rtt, var) != (super::INITIAL_RTT_US, super::INITIAL_RTTVAR_US) {
                self.peer_rtt_bound_us = rtt.saturating_add(4 * var);
            }
            self.peer_window = info.avail_buf_pkts;
            // Far fewer than half the sequence space, so that the edge compares correctly.
            self.peer_edge = Some(a.ack_seq.add(info.avail_buf_pkts.min(MAX_PEER_WINDOW)));
            let (n, b) = std::mem::take(&mut self.acked_for_rate);
            if let Some(mean) = b.checked_div(n) {
                self.acked_payload = mean.max(1);
            }
            if info.pkt_recv_rate > 0 {
                // The delivery sample: the byte rate in packets where it is lower (a slipstream
                // receiver's average, against its arrival speed in the packet field); libsrt
                // reports the same speed in both, its byte field with headers, so the packet
                // field stands. The first sample is the speed: the average then covers only
                // the initial window, a few packets a round trip, while the speed at which that
                // window arrived is the first measure of the bottleneck.
                // The bytes are the payloads that arrived, so they are divided by the mean
                // payload of the packets this ACK acknowledged, not by a full packet's: 64-byte
                // messages read as a 23rd of their packet rate, "bbr" paced at that, the next
                // report followed it down, and the rate sank to one packet a second.
                let per_pkt = match self.acked_payload {
                    0 => self.payload_size as u64,
                    p => p,
                };
                let avg = u64::from(info.recv_rate_bytes) / per_pkt.max(1);
                self.peer_recv_rate_last_pps = match u32::try_from(avg) {
                    Ok(avg) if avg > 0 && self.peer_recv_rate_last_pps > 0 => {
                        avg.min(info.pkt_recv_rate)
                    }
                    _ => info.pkt_recv_rate,
                };
                self.peer_recv_rate_pps =
                    ewma(self.peer_recv_rate_pps as u64, info.pkt_recv_rate as u64) as u32;
            }
            if info.recv_rate_bytes > 0 {
                self.peer_recv_rate_bps =
                    ewma(self.peer_recv_rate_bps, u64::from(info.recv_rate_bytes));
            }
            if info.link_capacity > 0 {
                self.peer_bandwidth_pps =
                    ewma(self.peer_bandwidth_pps as u64, info.link_capacity as u64) as u32;
            }
        }
        self.stats.pkts_acked += u64::from(pkts);
        if pkts > 0 {
            self.rto_base_us = now_us;
            self.exp_count = 1;
            self.tail_probed = false;
            if let Some(d) = self.linger_deadline.as_mut() {
                // Linger measures silence, not the length of the transfer: progress extends it.
                *d = now_us + self.cfg.linger.as_micros() as u64;
            }
            self.stats.bytes_acked += bytes;
            self.snd_loss.remove_before(self.sbuf.base());
            // Keep the highest reported loss within reach of the ACK point: sequence numbers
            // compare modulo 2^31, and one that fell a billion packets behind would compare
            // as ahead. (Reports below the ACK point are ignored anyway.)
            if self.max_loss_seen.lt(self.sbuf.base().sub(1)) {
                self.max_loss_seen = self.sbuf.base().sub(1);
            }
            self.acked_since_cc += pkts;
        }
        if a.info.is_some() {
            // The controller hears full ACKs only, with everything freed since the last one
            // (light ACKs included).
            let newly = std::mem::take(&mut self.acked_since_cc);
            let ctx = self.cc_ctx(now_us);
            self.cc.on_ack(&ctx, &mut self.ctl, a.ack_seq, newly);
            self.last_cc_ack_us = now_us;
            self.last_window_us = now_us;
            // The send buffer must hold the whole window in flight, plus room to queue.
            let want = self.window() + self.window() / 2 + 64;
            while self.sbuf.cap() < want && self.sbuf.grow() {}
        }
        if self.state == State::Closing && self.sbuf.len() == 0 {
            self.pending.shutdown = 3;
            self.close_with(CloseReason::Local);
        }
    }

    pub(super) fn on_nak(&mut self, now_us: u64, r: &LossRanges<'_>) {
        self.stats.naks_recv += 1;
        if self.sbuf.in_flight() == 0 {
            return;
        }
        let base = self.sbuf.base();
        let top = self.sbuf.next_unsent().sub(1);
        let mut fresh = std::mem::take(&mut self.losses_scratch);
        fresh.clear();
        for (a, b) in r.iter() {
            let (a, b) = (a.max(base), b.min(top));
            if b.lt(a) {
                continue;
            }
            // The receiver is alive and names what it lacks: recovery is under way, so the
            // retransmission timer (which presumes everything unacknowledged lost) restarts.
            // On a long path the cumulative ACK stalls behind a hole for a round trip or more,
            // longer than the timeout; without this, every hole became a full-window resend.
            // A lost tail leaves no hole and draws no NAK: the timer still covers it.
            self.rto_base_us = now_us;
            self.snd_loss.insert(a, b);
            // Periodic NAKs repeat old losses: only what was never reported is news for the
            // controller and the loss counter.
            if self.max_loss_seen.lt(b) {
                let na = a.max(self.max_loss_seen.next());
                self.stats.pkts_snd_loss += (b.diff(na) + 1) as u64;
                self.max_loss_seen = b;
                if fresh.len() < 4096 {
                    fresh.push((na, b));
                }
            }
        }
        if !fresh.is_empty() {
            let ctx = self.cc_ctx(now_us);
            self.cc.on_loss(&ctx, &mut self.ctl, &fresh);
        }
        self.losses_scratch = fresh;
    }

    /// Live mode, sender: drops the oldest message and tells the receiver. Returns false when
    /// the buffer is empty.
    pub(super) fn sender_drop_oldest(&mut self) -> bool {
        let Some((first, last, msg, n)) = self.sbuf.drop_oldest_message() else {
            return false;
        };
        self.stats.pkts_snd_dropped += u64::from(n);
        self.snd_loss.remove_before(self.sbuf.base());
        self.pending.dropreq = Some(match self.pending.dropreq {
            Some((_, f, _)) => (msg.get(), f, last),
            None => (msg.get(), first, last),
        });
        self.dropped_to = Some((msg.get(), last.next()));
        true
    }

    /// Live mode: when to ask again for the drop of what this end gave up, a round trip
    /// (with its variance, at least two ACK periods) after the last request, while the peer
    /// has not acknowledged past it. A lost request for a tail that never arrived leaves the
    /// receiver nothing to find the hole by: it would never count those packets.
    pub(super) fn dropreq_retry_deadline_us(&self) -> Option<u64> {
        let (_, end) = self.dropped_to?;
        (self.pending.dropreq.is_none() && self.peer_ack.lt(end)).then(|| {
            let wait = (self.srtt_us + 4 * self.rttvar_us).max(2 * SYN_INTERVAL_US);
            self.dropreq_at_us + wait
        })
    }

    /// Live mode: asks again for the drop of everything from the peer's acknowledgement to
    /// the end of what this end dropped.
    pub(super) fn retry_dropreq(&mut self, now_us: u64) {
        if let Some((msg, end)) = self.dropped_to {
            self.pending.dropreq = Some((msg, self.peer_ack, end.sub(1)));
            self.dropreq_at_us = now_us;
        }
    }

    /// Live mode, sender: packets older than the latency allows are useless to the receiver.
    /// The threshold is libsrt's (`sndDropTooLate`): the peer's latency, at least a second,
    /// plus two SYN intervals, so that a retransmission late by a few ACK periods still goes.
    pub(super) fn sender_drop_too_late(&mut self, now_us: u64) {
        if self.cfg.mode != Mode::Live || !self.cfg.too_late_drop {
            return;
        }
        let threshold = self.snd_latency_us.max(1_000_000) + 2 * SYN_INTERVAL_US;
        while let Some(o) = self.sbuf.oldest_origin_us() {
            if now_us.saturating_sub(o) <= threshold || !self.sender_drop_oldest() {
                break;
            }
        }
    }
}

fn ewma(old: u64, new: u64) -> u64 {
    if old == 0 {
        new
    } else {
        (old * 7 + new) / 8
    }
}
