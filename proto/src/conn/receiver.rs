//! The receiving half: storing data packets, loss detection (immediate and periodic NAKs),
//! full ACKs on the SYN timer and light ACKs by packet count, RTT from ACKACKs, receive-buffer
//! growth, and live-mode TSBPD delivery with too-late drop.

use super::recv_buf::{Insert, MsgRead, Payload};
use super::{Connection, Mode, State, SYN_INTERVAL_US};
use crate::seq::SeqNo;
use crate::wire::{emit_nak, Ack, AckInfo, ControlBody, DataHeader, UDP_IPV4_OVERHEAD};

/// Default light-ACK spacing in packets (UDT / SRT).
const LIGHT_ACK_PKTS: u32 = super::LIGHT_ACK_PKTS;
/// Most NAK packets one sweep of the loss list sends (about 180 ranges each): bounds the
/// reverse traffic per NAK interval (at least 20 ms) to 48 KB.
pub(super) const NAK_SWEEP_MAX_PKTS: u32 = 32;

impl Connection {
    /// A data packet that arrived at `received_us` (at most `now_us`; see
    /// `Endpoint::handle_at`), handled at `now_us`.
    pub(super) fn on_data(
        &mut self,
        now_us: u64,
        received_us: u64,
        h: &DataHeader,
        payload: Payload<'_>,
    ) {
        let len = payload.len();
        if len > self.rbuf.slot_size() {
            // Storing it cut to size would deliver wrong bytes.
            self.stats.pkts_recv_oversized += 1;
            return;
        }
        self.stats.pkts_recv += 1;
        if h.retransmitted {
            self.stats.pkts_recv_retrans += 1;
        }
        if self.ack_tick_asleep {
            self.ack_tick_asleep = false;
            self.next_ack_tick = now_us + SYN_INTERVAL_US;
        }
        // The arrival speed and packet pairs are timed when the packet is handled: they look
        // at gaps of microseconds, where a kernel timestamp shows how a forwarder ahead of us
        // released packets in bursts, not the path's rate. The ACK interval's average is
        // timed by arrival: over milliseconds, the time of handling adds however long this
        // thread waited to run, and a late read reads as a burst.
        let now = self.at(now_us);
        self.rate.on_arrival(now, len);
        self.ack_rates.on_arrival(received_us.min(now_us), len);
        if !h.retransmitted {
            match h.seq.get() % 16 {
                0 => self.rate.on_probe1(now),
                1 => self.rate.on_probe2(now),
                _ => {}
            }
        }
        let seq = h.seq;
        let ts = self.unwrap_ts(h.timestamp);
        if self.cfg.mode == Mode::Live {
            let margin = self.play_time_us(ts) as i64 - received_us as i64;
            self.live_margin_us = Some(match self.live_margin_us {
                Some((avg, min)) => (avg + (margin - avg) / 16, min.min(margin)),
                None => (margin, margin),
            });
        }
        match self.rbuf.insert(seq, h.position, h.msg_no, ts, payload) {
            Insert::Stored => {
                self.stats.pkts_recv_unique += 1;
                self.stats.bytes_recv_unique += len as u64;
                if self.rcv_max.le(seq) {
                    if self.rcv_max.lt(seq) {
                        let (first, last) = (self.rcv_max, seq.sub(1));
                        let timer_running = !self.rcv_loss.is_empty();
                        self.stats.pkts_rcv_loss += u64::from(self.rcv_loss.insert(first, last));
                        self.queue_nak(first, last);
                        if !self.speed_reported {
                            // A loss report before any ACK with a receive speed: libsrt's file
                            // sender leaves slow start on it and paces at the speed it has read,
                            // still its initial 16 packets/s; from there it climbs about 10 % a
                            // second. The ACK goes first (poll_transmit's order).
                            self.pending.full_ack = true;
                        }
                        if !timer_running {
                            self.next_nak_tick = now_us + self.nak_interval_us();
                        }
                    }
                    self.rcv_max = seq.next();
                } else {
                    self.rcv_loss.remove(seq);
                }
                self.advance_ack();
                self.pkts_since_ack += 1;
                match self.ctl.ack_interval_pkts {
                    Some(n) if self.pkts_since_ack >= n.max(1) => self.pending.full_ack = true,
                    None if self.pkts_since_ack >= LIGHT_ACK_PKTS => self.pending.light_ack = true,
                    _ => {}
                }
            }
            Insert::Duplicate | Insert::Old => self.stats.pkts_recv_dup += 1,
            Insert::Overflow => self.stats.pkts_recv_beyond_window += 1,
            Insert::NoMemory => self.stats.pkts_recv_no_memory += 1,
        }
        let ctx = self.cc_ctx(now_us);
        self.cc.on_packet_received(&ctx, &mut self.ctl, seq, len);
    }

    /// Moves the ACK point over every packet received (or resolved by a drop) in order.
    pub(super) fn advance_ack(&mut self) {
        while self.rcv_ack.lt(self.rcv_max)
            && (self.rcv_ack.lt(self.drop_upto) || self.rbuf.is_present(self.rcv_ack))
        {
            self.rcv_ack = self.rcv_ack.next();
        }
    }

    fn queue_nak(&mut self, first: SeqNo, last: SeqNo) {
        let p = &mut self.pending;
        if p.nak_len < p.nak.len() {
            p.nak[p.nak_len] = (first, last);
            p.nak_len += 1;
        } else {
            // More new gaps than one report holds: report the loss list from the oldest of
            // them on (everything after it is new too), unless a sweep already under way
            // will get there. Its budget is not renewed: a peer that keeps opening gaps gets
            // at most one NAK per gap back.
            let from = p.nak[0].0;
            p.nak_len = 0;
            if p.nak_sweep.is_none() {
                p.nak_sweep = Some(from);
                p.nak_sweep_pkts = NAK_SWEEP_MAX_PKTS;
            }
        }
    }

    /// Starts a sweep that reports the loss list from `from` on (the periodic NAK: from the
    /// oldest loss), in as many NAK packets as it takes, at most [`NAK_SWEEP_MAX_PKTS`]. One
    /// packet holds about 180 ranges: a burst of scattered losses (a queue overflowing under a
    /// sender that is too fast leaves every other packet missing) has thousands, and reporting
    /// only the oldest ones each NAK interval repaired them at a few hundred per round trip.
    pub(super) fn start_nak_sweep(&mut self, from: Option<SeqNo>) {
        let Some(from) = from else { return };
        self.pending.nak_sweep = Some(from);
        self.pending.nak_sweep_pkts = NAK_SWEEP_MAX_PKTS;
    }

    /// Unwraps a 32-bit sender timestamp to 64 bits, nearest to the last one seen.
    fn unwrap_ts(&mut self, raw: u32) -> u64 {
        const WRAP: u64 = 1 << 32;
        let last = self.last_ts_unwrapped;
        let mut v = (last & !(WRAP - 1)) | u64::from(raw);
        if v + WRAP / 2 < last {
            v += WRAP;
        } else if v > last + WRAP / 2 && v >= WRAP {
            v -= WRAP;
        }
        if v > last {
            self.last_ts_unwrapped = v;
        }
        v
    }

    pub(super) fn on_ack_tick(&mut self, now_us: u64) {
        self.next_ack_tick = now_us + SYN_INTERVAL_US;
        let free = self.rbuf.free_after(self.rcv_ack) as u32;
        // A full ACK when the ACK point moved, or again every SYN interval while new data
        // arrive (libsrt repeats it only until the sender confirms it with an ACKACK, and
        // while any data arrive): under loss the ACK point waits behind holes for round
        // trips, and the sender's rate samples (and a libsrt sender's speed estimate) come
        // with full ACKs only. At 10 ms and 5 % loss, stopping at the ACKACK left the sender
        // up to 100-300 ms without a sample; its controller held a probe or a drain phase
        // that long, and its estimate settled as low as 60 % of the link. New data, not just
        // any: retransmissions of what already arrived must not keep a stuck ACK going.
        if self.rcv_ack != self.last_acked_seq
            || self.stats.pkts_recv_unique > self.unique_at_full_ack
            || (self.rcv_ack != self.last_ackacked_seq
                && self.stats.pkts_recv > self.pkts_recv_at_full_ack)
        {
            self.pending.full_ack = true;
        } else if self.stats.pkts_recv > 0
            && now_us.saturating_sub(self.last_full_ack_us) >= self.srtt_us + 4 * self.rttvar_us
            && (self.rcv_ack != self.last_ackacked_seq
                || free > self.last_adv_window.saturating_mul(2))
        {
            // Nothing new: repeat the ACK only while the sender has not confirmed it (ACKACK),
            // or to announce a window that reopened. Repeating a confirmed ACK would keep
            // refreshing the sender's retransmission timer (libsrt's runs from the last ACK)
            // and deadlock a transfer whose last packets were lost.
            self.pending.full_ack = true;
        }
        self.maybe_grow_rbuf();
    }

    /// Whether the ACK tick has nothing left to do until data arrive: the last full ACK
    /// covers everything received and the sender has confirmed it, and no reopened window
    /// waits to be announced (see [`Connection::on_ack_tick`]). Live mode keeps ticking.
    pub(super) fn ack_settled(&self) -> bool {
        let free = self.rbuf.free_after(self.rcv_ack) as u32;
        self.cfg.mode != Mode::Live
            && !self.pending.full_ack
            && self.rcv_ack == self.last_acked_seq
            && self.stats.pkts_recv_unique <= self.unique_at_full_ack
            && self.stats.pkts_recv <= self.pkts_recv_at_full_ack
            && (self.stats.pkts_recv == 0
                || (self.rcv_ack == self.last_ackacked_seq
                    && free <= self.last_adv_window.saturating_mul(2)))
    }

    /// Grows the receive buffer to twice the measured bandwidth-delay product, or while the
    /// packets held behind holes fill half of it (up to the memory cap), unless the
    /// application is what holds data back.
    fn maybe_grow_rbuf(&mut self) {
        // The ACK-interval average (see `AckRateTracker`), not the arrival speed: a backlog
        // read in one batch measures many times the path's rate, and sized from that the
        // buffer grew to its 256 MiB cap at 1 Gbit/s, 50 ms, each doubling a pause of the
        // receiver (the last, copying 190 MB into fresh memory, 96 ms).
        let pps = self.ack_rates.avg_pps();
        // The path's round trip, not the smoothed one: the smoothed one counts the queues on
        // the way, the receiver's own among them (over loopback, the socket's backlog ahead
        // of an ACKACK read as 10 ms against 0.1), and a buffer sized from it fills that
        // queue further: it grew eightfold, to 91 MiB, whose pages were cold by the time the
        // application read them. No ACK interval on top: reads that reopen the window are
        // announced at once (`on_app_read`), not at the next ACK tick.
        let rtt = self.min_rtt.map_or(self.srtt_us, |(min, _)| min);
        let bdp = u64::from(pps) * rtt / 1_000_000;
        let cap = self.rbuf.cap();
        if self.cfg.mode == Mode::Live {
            // Live data waits here for its play time: the buffer holds the latency's worth at
            // the arrival rate, plus the round trips its repairs take, and half again for
            // bursts. (What is unread is expected, not an application holding data back.)
            let hold_us = self.latency_us + 2 * rtt + SYN_INTERVAL_US;
            let need = u64::from(pps) * hold_us / 1_000_000;
            if (cap as u64) < need + need / 2 + 64 {
                self.rbuf.grow();
            }
            return;
        }
        let unread = self.rcv_ack.diff(self.rbuf.read_seq()).max(0) as usize;
        // The window the sender sees starts at the ACK point: under loss, the packets after
        // a hole span a round trip or more of the path, and when the retransmission is lost
        // too, three or more. Once they fill half the buffer, it is what bounds the sender.
        // Counted, not spanned: one packet far ahead of a hole must not double the buffer.
        let behind_holes = self.rbuf.count().saturating_sub(unread);
        if ((cap as u64) < 2 * bdp + 64 || behind_holes > cap / 2) && unread < cap / 2 {
            self.rbuf.grow();
        }
    }

    /// After the application read from the receive buffer: once the window's right edge
    /// (the ACK point plus the window a full ACK would advertise now) could move a quarter of
    /// the window past the one the last full ACK advertised, a full ACK announces it now
    /// instead of at the next ACK tick. Where the application is what holds data back, the
    /// sender waits for exactly this, and with an ACK tick's worth of data the buffer would
    /// have to hold 10 ms of the path: 25 MB over loopback. The window is the buffer, or the
    /// endpoint's share of its socket queue where that is smaller: measured against the
    /// buffer, a share of 8 packets out of 183 moved the edge "a quarter" at every read, and
    /// every packet cost a full ACK and its ACKACK.
    pub(super) fn on_app_read(&mut self) {
        if !matches!(self.state, State::Connected | State::Closing) {
            return;
        }
        let window = (self.rbuf.cap() as u32).min(self.window_share);
        let edge = self
            .rcv_ack
            .add((self.rbuf.free_after(self.rcv_ack) as u32).min(self.window_share));
        if edge.diff(self.adv_edge) >= (window / 4).max(1) as i32 {
            self.pending.full_ack = true;
        }
    }

    pub(super) fn emit_full_ack(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize> {
        self.ack_no = self.ack_no.wrapping_add(1).max(1);
        let rates = self
            .ack_rates
            .on_ack(now_us, SYN_INTERVAL_US / 2, &self.rate);
        let info = AckInfo {
            rtt_us: self.srtt_us as u32,
            rtt_var_us: self.rttvar_us as u32,
            avail_buf_pkts: (self.rbuf.free_after(self.rcv_ack) as u32).min(self.window_share),
            pkt_recv_rate: rates.speed_pps,
            link_capacity: rates.capacity_pps,
            recv_rate_bytes: rates.avg_bps.min(u64::from(u32::MAX)) as u32,
        };
        self.ack_hist[(self.ack_no % 64) as usize] = (self.ack_no, now_us, self.rcv_ack);
        self.last_adv_window = info.avail_buf_pkts;
        self.adv_edge = self.rcv_ack.add(info.avail_buf_pkts);
        self.last_acked_seq = self.rcv_ack;
        self.last_full_ack_us = now_us;
        self.pkts_recv_at_full_ack = self.stats.pkts_recv;
        self.unique_at_full_ack = self.stats.pkts_recv_unique;
        self.speed_reported |= rates.speed_pps > 0;
        self.pkts_since_ack = 0;
        self.stats.acks_sent += 1;
        let ack = Ack {
            ack_no: self.ack_no,
            ack_seq: self.rcv_ack,
            info: Some(info),
        };
        self.emit_ctrl(now_us, ControlBody::Ack(ack), buf)
    }

    pub(super) fn emit_light_ack(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize> {
        if self.rcv_ack == self.last_acked_seq {
            return None;
        }
        self.last_acked_seq = self.rcv_ack;
        self.pkts_since_ack = 0;
        self.stats.light_acks_sent += 1;
        let ack = Ack {
            ack_no: 0,
            ack_seq: self.rcv_ack,
            info: None,
        };
        self.emit_ctrl(now_us, ControlBody::Ack(ack), buf)
    }

    pub(super) fn on_ackack(&mut self, now_us: u64, ack_no: u32) {
        let (no, sent_us, seq) = self.ack_hist[(ack_no % 64) as usize];
        if no == ack_no && no != 0 && now_us >= sent_us {
            self.own_rtt_sample(now_us, now_us - sent_us);
            self.last_ackacked_seq = seq;
            self.ack_hist[(ack_no % 64) as usize] = (0, 0, seq);
        } else {
            self.stats.ctrl_ignored += 1;
        }
    }

    pub(super) fn emit_nak(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize> {
        let limit = (self.mss as usize)
            .saturating_sub(UDP_IPV4_OVERHEAD)
            .min(buf.len());
        let ts = now_us as u32;
        let (n, _) = if self.pending.nak_len == 0 {
            let from = self.pending.nak_sweep.take()?;
            let (n, count) = emit_nak(
                ts,
                self.peer_id,
                self.rcv_loss.iter_from(from),
                &mut buf[..limit],
            );
            if count == 0 {
                return None;
            }
            // Continue after what fitted, while the budget lasts.
            self.pending.nak_sweep_pkts = self.pending.nak_sweep_pkts.saturating_sub(1);
            if self.pending.nak_sweep_pkts > 0 {
                self.pending.nak_sweep = self.rcv_loss.iter_from(from).nth(count).map(|r| r.0);
            }
            (n, count)
        } else {
            let k = std::mem::take(&mut self.pending.nak_len);
            emit_nak(
                ts,
                self.peer_id,
                self.pending.nak[..k].iter().copied(),
                &mut buf[..limit],
            )
        };
        self.stats.naks_sent += 1;
        Some(n)
    }

    pub(super) fn on_dropreq(&mut self, _now_us: u64, first: SeqNo, last: SeqNo) {
        // A byte stream cannot skip data; only message and live mode honour drop requests.
        // A request may run past the last packet received (the sender gave up a tail that
        // never arrived: nothing after it told this end it existed), never past the buffer.
        let end = last.next();
        let edge = self.rbuf.read_seq().add(self.rbuf.cap() as u32);
        if self.cfg.mode == Mode::File || last.lt(first) || self.rcv_max.lt(first) || edge.lt(end) {
            self.stats.ctrl_ignored += 1;
            return;
        }
        self.rcv_loss.remove_range(first, last);
        if self.rcv_max.lt(end) {
            self.rcv_max = end;
        }
        if self.drop_upto.lt(end) {
            self.drop_upto = end;
        }
        if self.snd_drop_upto.lt(end) {
            self.snd_drop_upto = end;
        }
        let before = self.rcv_ack;
        self.advance_ack();
        if before != self.rcv_ack {
            // The sender repeats its request until an acknowledgement passes it.
            self.pending.full_ack = true;
        }
    }

    // ---- message and live delivery ----

    fn play_time_us(&self, ts_us: u64) -> u64 {
        (self.tsbpd_offset_us + ts_us as i64).max(0) as u64 + self.latency_us
    }

    /// Live mode: when the complete message at the head of the buffer plays, µs (`None`
    /// when there is none: the next arrival or timer changes that).
    pub(super) fn live_head_play_us(&self) -> Option<u64> {
        let m = self.rbuf.head()?;
        self.rbuf.head_message(self.rcv_ack)?;
        Some(self.play_time_us(m.ts_us))
    }

    pub(super) fn live_deliverable(&self, now_us: u64) -> bool {
        match self.rbuf.head() {
            Some(m) => {
                self.play_time_us(m.ts_us) <= now_us
                    && self.rbuf.head_message(self.rcv_ack).is_some()
            }
            None => false,
        }
    }

    /// Live mode: the next time something becomes deliverable or too late. A time already
    /// handled is not reported again (a due message waits for the reader, not for a timer).
    pub(super) fn live_next_event_us(&self) -> Option<u64> {
        let complete = self.rbuf.head().is_some() && self.rbuf.head_message(self.rcv_max).is_some();
        let next = if complete {
            self.rbuf.head().copied().map(|m| (self.rbuf.read_seq(), m))
        } else if self.rbuf.head().is_none() {
            self.rbuf.first_present(self.rcv_max)
        } else {
            self.rbuf.first_present_after_hole(self.rcv_max)
        };
        next.map(|(_, m)| self.play_time_us(m.ts_us))
            .filter(|&t| t > self.last_timer_us)
    }

    pub(super) fn live_timers(&mut self, now_us: u64) {
        self.last_timer_us = now_us;
        self.sender_drop_too_late(now_us);
        if self.cfg.too_late_drop {
            self.skip_unfillable(Some(now_us));
        }
    }

    /// Live mode: gives up holes at the head of the line (a missing packet alone, or inside the
    /// head message) when a packet after the hole is due to play by `now_us` — or, with `None`,
    /// unconditionally (the peer has closed, nothing will fill them). Too-late packet drop.
    fn skip_unfillable(&mut self, now_us: Option<u64>) {
        loop {
            let complete =
                self.rbuf.head().is_some() && self.rbuf.head_message(self.rcv_max).is_some();
            if complete {
                break;
            }
            let next = if self.rbuf.head().is_none() {
                self.rbuf.first_present(self.rcv_max)
            } else {
                self.rbuf.first_present_after_hole(self.rcv_max)
            };
            let Some((seq, m)) = next else { break };
            if now_us.is_some_and(|now| self.play_time_us(m.ts_us) > now) {
                break;
            }
            self.drop_head_before(seq);
            self.rcv_loss.remove_before(seq);
            if self.drop_upto.lt(seq) {
                self.drop_upto = seq;
            }
            self.advance_ack();
        }
    }

    /// Passes the read point over everything before `seq`, counting what it gives up: slots
    /// the sender asked to drop, slots given up missing, and packets received but not
    /// deliverable (their message incomplete).
    fn drop_head_before(&mut self, seq: SeqNo) {
        let (sender, missing, present) = self.rbuf.drop_before_counted(seq, self.snd_drop_upto);
        self.stats.pkts_rcv_snd_dropped += sender as u64;
        self.stats.pkts_rcv_dropped += (missing + present) as u64;
    }

    pub(super) fn read_message(&mut self, now_us: u64, buf: &mut [u8]) -> MsgRead {
        loop {
            // Skip slots resolved without data (dropped) and fragments whose start was dropped.
            let head_seq = self.rbuf.read_seq();
            if head_seq.lt(self.rcv_ack) && self.rbuf.head().is_none() {
                self.drop_head_before(head_seq.next());
                continue;
            }
            if head_seq.lt(self.rcv_ack) && self.rbuf.skip_orphan_head() {
                self.stats.pkts_rcv_dropped += 1;
                continue;
            }
            break;
        }
        // Once the peer has closed, whatever is complete is delivered at once (no more data is
        // coming to be paced against), and holes that nothing will fill are given up.
        let closed = matches!(self.state, super::State::Closed(_));
        if closed && self.cfg.mode == Mode::Live {
            self.skip_unfillable(None);
        }
        if self.cfg.mode == Mode::Live
            && !closed
            && self.rbuf.head().is_some()
            && !self.live_deliverable(now_us)
        {
            return MsgRead::None;
        }
        let r = self.rbuf.read_message(self.rcv_ack, buf);
        if let MsgRead::Done(_) = r {
            self.stats.pkts_delivered += self.rbuf.last_read_pkts() as u64;
        }
        r
    }
}
