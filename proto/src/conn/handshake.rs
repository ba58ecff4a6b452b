//! The caller's side of the SRT v5 caller–listener handshake (draft-sharabayko-srt §4.3.1):
//! induction (v4 request, v5 response with the SYN cookie), then conclusion with HSREQ, stream id
//! and congestion extensions, answered by the listener's conclusion with HSRSP. The listener's
//! side is stateless until the cookie returns and lives in the endpoint.

use super::{Accepted, CloseReason, ConnConfig, Connection, Event, Mode, Role, State};
use crate::cc::CongestionControl;
use crate::seq::SeqNo;
use crate::wire::{
    Control, ControlBody, Handshake, HsExtensions, HsType, SlipstreamExt, SrtFlags, SrtHs,
    HS_VERSION_SRT5, HS_VERSION_UDT4,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The SRT version we announce in HSREQ/HSRSP (the protocol level of libsrt 1.5.x).
pub(crate) const SRT_VERSION: u32 = 0x0001_0500;
/// Extension-field flags of a v5 conclusion (draft §3.2.1.1).
pub(crate) const HS_EXT_HSREQ: u16 = 0x1;
pub(crate) const HS_EXT_CONFIG: u16 = 0x4;
/// The UDT socket type in a v4 induction request (SOCK_DGRAM).
const UDT_DGRAM: u16 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Induction,
    Conclusion,
    Done,
}

#[derive(Debug)]
pub(super) struct HsState {
    pub phase: Phase,
    pub cookie: u32,
    pub next_retry_us: u64,
    pub deadline_us: u64,
    /// When our conclusion (caller) or conclusion response (listener) was first sent; the
    /// answer to it is the connection's first RTT sample...
    pub conclusion_sent_us: Option<u64>,
    /// ...if it was sent only once (Karn): the answer to a repeated one may answer any copy.
    /// A lost first copy timed the retry interval too (250 ms on a 10 ms path): the periodic
    /// NAK, paced by `(srtt + 4 rttvar) / 2`, then came every 400 ms, and a lost
    /// retransmission stalled the transfer for as long.
    pub conclusion_sends: u32,
    /// Listener: our conclusion response, replayed when the caller repeats its conclusion.
    pub response: Option<Handshake>,
}

/// SRT flags for a mode.
pub(crate) fn srt_flags(mode: Mode) -> SrtFlags {
    // As libsrt 1.5.1 announces them (captures: file 0xe4, live 0xbf), without CRYPT and
    // FILTER, which slipstream does not implement. Receivers always send periodic NAKs.
    let mut f = SrtFlags::REXMITFLG;
    match mode {
        Mode::File => f |= SrtFlags::STREAM,
        Mode::Message => {}
        Mode::Live => {
            f |= SrtFlags::TSBPD_SND
                | SrtFlags::TSBPD_RCV
                | SrtFlags::TLPKTDROP
                | SrtFlags::NAKREPORT
        }
    }
    SrtFlags(f)
}

/// The peer IP field: IPv4 in the first word, each 32-bit word in host order as libsrt writes it.
pub(crate) fn peer_ip_field(addr: SocketAddr) -> [u8; 16] {
    let mut out = [0u8; 16];
    match addr {
        SocketAddr::V4(a) => {
            let o = a.ip().octets();
            out[..4].copy_from_slice(&[o[3], o[2], o[1], o[0]]);
        }
        SocketAddr::V6(a) => {
            let o = a.ip().octets();
            for w in 0..4 {
                for b in 0..4 {
                    out[w * 4 + b] = o[w * 4 + 3 - b];
                }
            }
        }
    }
    out
}

impl Connection {
    /// A caller connection; it starts sending induction requests at once.
    pub(crate) fn connect(
        now: Instant,
        local_id: u32,
        peer_addr: SocketAddr,
        cfg: ConnConfig,
        cc: Box<dyn CongestionControl>,
        isn: SeqNo,
    ) -> Self {
        let deadline_us = cfg.connect_timeout.as_micros() as u64;
        let hs = HsState {
            phase: Phase::Induction,
            cookie: 0,
            next_retry_us: 0,
            deadline_us,
            conclusion_sent_us: None,
            conclusion_sends: 0,
            response: None,
        };
        let mut c = Connection::new(now, local_id, peer_addr, Role::Caller, cfg, cc, isn, hs);
        c.max_loss_seen = isn.sub(1);
        c.pending.handshake = true;
        c
    }

    /// A connection the listener accepted after a valid conclusion; its response is queued.
    pub(crate) fn accept(
        now: Instant,
        local_id: u32,
        peer_addr: SocketAddr,
        cfg: ConnConfig,
        cc: Box<dyn CongestionControl>,
        acc: Accepted,
    ) -> Self {
        let hs = HsState {
            phase: Phase::Done,
            cookie: acc.response.cookie,
            next_retry_us: u64::MAX,
            deadline_us: u64::MAX,
            conclusion_sent_us: None,
            conclusion_sends: 0,
            response: Some(acc.response),
        };
        let mut c = Connection::new(
            now,
            local_id,
            peer_addr,
            Role::Listener,
            cfg,
            cc,
            acc.isn,
            hs,
        );
        c.peer_id = acc.peer_id;
        c.mss = acc.mss;
        c.reset_buffers(acc.isn, acc.isn);
        c.max_loss_seen = acc.isn.sub(1);
        c.peer_window = acc.peer_window;
        c.latency_us = acc.latency_us;
        c.snd_latency_us = acc.snd_latency_us;
        c.peer_stream_id = acc.peer_stream_id;
        c.file_ext = acc.file_ext;
        c.tsbpd_offset_us = -(i64::from(acc.peer_ts));
        c.pending.handshake = true;
        c.establish(0, Event::Accepted);
        c
    }

    /// Listener: the caller repeated its conclusion (our response was lost); answer again.
    pub(crate) fn resend_handshake(&mut self) {
        if self.hs.response.is_some() && self.state == State::Connected {
            self.pending.handshake = true;
        }
    }

    pub(super) fn hs_timeout(&mut self, now_us: u64) {
        if now_us >= self.hs.deadline_us {
            self.close_with(CloseReason::ConnectTimeout);
        } else if now_us >= self.hs.next_retry_us {
            self.pending.handshake = true;
        }
    }

    fn caller_handshake(&self) -> Handshake {
        let induction = self.hs.phase == Phase::Induction;
        let mut ext = HsExtensions::default();
        let mut ext_field = UDT_DGRAM;
        if !induction {
            // HSREQ: the latency this end receives with, and the one it asks of the peer.
            ext.hsreq = Some(SrtHs {
                version: SRT_VERSION,
                flags: srt_flags(self.cfg.mode),
                recv_tsbpd_delay_ms: ms16(self.cfg.latency),
                send_tsbpd_delay_ms: ms16(self.cfg.peer_latency()),
            });
            ext.stream_id = self.cfg.stream_id.clone();
            if self.cfg.mode != Mode::Live {
                ext.congestion = Some(b"file".to_vec());
            }
            if self.cfg.file_digest {
                ext.slipstream = Some(SlipstreamExt {
                    version: 1,
                    flags: SlipstreamExt::FILE_FLAGS,
                });
            }
            ext_field = HS_EXT_HSREQ;
            if ext.stream_id.is_some() || ext.congestion.is_some() || ext.slipstream.is_some() {
                ext_field |= HS_EXT_CONFIG;
            }
        }
        Handshake {
            version: if induction {
                HS_VERSION_UDT4
            } else {
                HS_VERSION_SRT5
            },
            encryption: 0,
            extension_field: ext_field,
            initial_seq: self.isn,
            mss: self.mss,
            flow_window: self.rbuf.cap() as u32,
            hs_type: if induction {
                HsType::Induction
            } else {
                HsType::Conclusion
            },
            socket_id: self.local_id,
            cookie: self.hs.cookie,
            peer_ip: peer_ip_field(self.peer_addr),
            ext,
        }
    }

    pub(super) fn emit_handshake(&mut self, now_us: u64, buf: &mut [u8]) -> Option<usize> {
        let (hs, dst) = match self.role {
            Role::Caller => {
                if self.hs.phase == Phase::Done {
                    return None;
                }
                self.hs.next_retry_us = now_us + super::HS_RETRY_US;
                if self.hs.phase == Phase::Conclusion {
                    self.hs.conclusion_sent_us.get_or_insert(now_us);
                    self.hs.conclusion_sends = self.hs.conclusion_sends.saturating_add(1);
                }
                (self.caller_handshake(), 0)
            }
            Role::Listener => {
                if !self.rtt_sampled {
                    self.hs.conclusion_sent_us.get_or_insert(now_us);
                    self.hs.conclusion_sends = self.hs.conclusion_sends.saturating_add(1);
                }
                (self.hs.response.clone()?, self.peer_id)
            }
        };
        Control {
            timestamp: now_us as u32,
            dst_socket: dst,
            body: ControlBody::Handshake(hs),
        }
        .emit(buf)
    }

    /// Listener: the first packet after our response closes the handshake's round trip.
    pub(super) fn listener_rtt_sample(&mut self, now_us: u64) {
        if self.role == Role::Listener && !self.rtt_sampled {
            if let Some(t) = self.hs.conclusion_sent_us.take() {
                if self.hs.conclusion_sends == 1 {
                    self.own_rtt_sample(now_us, now_us.saturating_sub(t));
                }
            }
        }
    }

    pub(super) fn on_handshake(&mut self, now_us: u64, ts: u32, hs: &Handshake) {
        if self.role != Role::Caller || self.hs.phase == Phase::Done {
            // A late duplicate: nothing to do once established.
            return;
        }
        if let HsType::Reject(r) = hs.hs_type {
            self.close_with(CloseReason::Rejected(r));
            return;
        }
        match (self.hs.phase, hs.hs_type) {
            (Phase::Induction, HsType::Induction) => {
                if hs.version != HS_VERSION_SRT5 {
                    self.close_with(CloseReason::Rejected(crate::wire::RejectReason::VERSION));
                    return;
                }
                self.hs.cookie = hs.cookie;
                self.hs.phase = Phase::Conclusion;
                self.pending.handshake = true;
            }
            (Phase::Conclusion, HsType::Conclusion) => {
                let Some(rsp) = hs.ext.hsrsp else {
                    self.stats.ctrl_ignored += 1;
                    return;
                };
                self.peer_id = hs.socket_id;
                self.mss = self.mss.min(hs.mss.max(76));
                self.reset_buffers(self.isn, hs.initial_seq);
                self.max_loss_seen = self.isn.sub(1);
                self.peer_window = hs.flow_window;
                if self.cfg.mode == Mode::Live {
                    // HSRSP: the listener's receiving latency, then its sending one (ours to
                    // receive with), each already the larger of what both ends asked.
                    let rcv = u64::from(rsp.send_tsbpd_delay_ms) * 1000;
                    let snd = u64::from(rsp.recv_tsbpd_delay_ms) * 1000;
                    self.latency_us = (self.cfg.latency.as_micros() as u64).max(rcv);
                    self.snd_latency_us = (self.cfg.peer_latency().as_micros() as u64).max(snd);
                }
                self.file_ext = match (&hs.ext.slipstream, self.cfg.file_digest) {
                    (Some(s), true) => SlipstreamExt::agreed(SlipstreamExt::FILE_FLAGS, s.flags),
                    _ => 0,
                };
                self.tsbpd_offset_us = now_us as i64 - i64::from(ts);
                // The conclusion exchange is a round trip: a first RTT sample before any data,
                // so the retransmission timer is sane on long paths from the start. Not when
                // the conclusion was repeated (see `conclusion_sends`): the defaults stand
                // until the first ACKACK or ACK then.
                if let (Some(t), 1) = (self.hs.conclusion_sent_us, self.hs.conclusion_sends) {
                    self.own_rtt_sample(now_us, now_us.saturating_sub(t));
                }
                self.hs.phase = Phase::Done;
                self.establish(now_us, Event::Connected);
            }
            _ => self.stats.ctrl_ignored += 1,
        }
    }
}

/// A latency in whole milliseconds, as the handshake's 16-bit fields carry it.
pub(crate) fn ms16(d: Duration) -> u16 {
    d.as_millis().min(u128::from(u16::MAX)) as u16
}
