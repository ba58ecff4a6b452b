//! The receiving side of an [`super::RtSocket`]: reassembly, delivery with one-way delay and
//! deadline, and what each source is told in its loss reports.

use super::{RtConfig, RtMessage, RtStats};
use crate::datapath::TxGather;
use crate::sys::mmsg::Mark;
use slipstream_proto::rt::header::{Class, RtHeader};
use slipstream_proto::rt::reassembly::{Outcome, Reassembler, ReassemblyConfig, ReassemblyStats};
use slipstream_proto::rt::report::{Report, REPORT_LEN};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// How far a source's numbering may jump ahead and still be counted as loss; further (or
/// further back than [`REORDER`]) it is taken for a restarted sender.
const MAX_GAP: u32 = 1 << 16;
/// How far back a message may arrive and be taken as reordered.
const REORDER: u32 = 1 << 10;

/// A source: what it has been told, and whether there is news since.
#[derive(Debug, Clone, Copy)]
struct Source {
    addr: SocketAddr,
    key: u64,
    used: Instant,
    /// The next id expected, by class (real-time, non-real-time).
    next_id: [Option<u32>; 2],
    report: Report,
    news: bool,
}

/// The reports of one round, as the kernel gathers them.
struct Reports<'a>(&'a [([u8; REPORT_LEN], SocketAddr)]);

impl TxGather for Reports<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn get(&self, i: usize) -> (SocketAddr, &[u8], &[u8]) {
        (self.0[i].1, &self.0[i].0, &[])
    }
}

#[derive(Debug)]
pub(super) struct Receiver {
    reasm: Reassembler,
    sources: Vec<Source>,
    cap: usize,
    interval: Duration,
    next_report: Instant,
    out: Vec<([u8; REPORT_LEN], SocketAddr)>,
    /// Losses seen from all sources (missing, expired, late real-time), cumulative: every
    /// report carries it, so a source hears of losses in between at its next report.
    losses: u32,
    /// `losses` when reports last went out: losses since are news to be told on time.
    told: u32,
    /// Some source has news for its next report.
    news: bool,
}

/// What a report counts as lost: missing, expired and late real-time messages.
fn lost(r: &Report) -> u32 {
    r.missing.wrapping_add(r.expired).wrapping_add(r.late_rt)
}

/// A source address as the reassembler's key: exact for IPv4, a mix of the bytes for IPv6
/// (bit 63 set); bit 62 is left for the class.
fn key(addr: SocketAddr) -> u64 {
    match addr {
        SocketAddr::V4(a) => (u64::from(u32::from(*a.ip())) << 16) | u64::from(a.port()),
        SocketAddr::V6(a) => {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in a.ip().octets().into_iter().chain(a.port().to_be_bytes()) {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
            (h | 1 << 63) & !(1 << 62)
        }
    }
}

impl Receiver {
    pub(super) fn new(cfg: &RtConfig, reasm: ReassemblyConfig, now: Instant) -> Receiver {
        Receiver {
            reasm: Reassembler::new(reasm),
            sources: Vec::with_capacity(cfg.peers),
            cap: cfg.peers,
            interval: cfg.report_interval.max(Duration::from_micros(100)),
            next_report: now + cfg.report_interval,
            out: Vec::with_capacity(cfg.peers),
            losses: 0,
            told: 0,
            news: false,
        }
    }

    pub(super) fn memory(&self) -> usize {
        self.reasm.memory()
            + self.sources.capacity() * std::mem::size_of::<Source>()
            + self.out.capacity() * std::mem::size_of::<([u8; REPORT_LEN], SocketAddr)>()
    }

    pub(super) fn reassembly_stats(&self) -> ReassemblyStats {
        self.reasm.stats()
    }

    /// When [`Self::expire`] or [`Self::send_reports`] must run next, if at all: first,
    /// what is due on time (an incomplete message's deadline; a report telling of losses,
    /// which a sender's smoother waits for); second, a report that only tells of messages
    /// delivered, which may leave a little late (one kernel tick: see
    /// [`super::RtSocket::poll`]).
    pub(super) fn next_timers(&self) -> (Option<Instant>, Option<Instant>) {
        let report = self.news.then_some(self.next_report);
        let urgent = report.filter(|_| self.losses != self.told);
        let precise = match (self.reasm.next_expiry(), urgent) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (precise, report)
    }

    /// A unit of a datagram (not a report: a fragment, or one message of a bundle) arrived
    /// from `src` at `at` (wall clock `at_us`). Returns 1 if it completed a message, which
    /// `on_message` got.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_datagram(
        &mut self,
        src: SocketAddr,
        d: &[u8],
        at: Instant,
        at_us: u64,
        marked: bool,
        stats: &mut RtStats,
        on_message: &mut impl FnMut(RtMessage<'_>),
    ) -> usize {
        let k = key(src);
        // The classes number their messages apart: they are apart in reassembly too.
        let class_bit = u64::from(d.get(3).copied().unwrap_or(0) & 1) << 62;
        let (hdr, data, slot) = match self.reasm.insert(at, k | class_bit, d) {
            Ok(Outcome::Whole(h, payload)) => (h, payload, None),
            Ok(Outcome::Complete(slot)) => match self.reasm.message(slot) {
                Some((h, _, bytes)) => (*h, bytes, Some(slot)),
                None => return 0,
            },
            Ok(Outcome::Partial) => {
                // Known from its first fragment on, so that a message of it that never
                // completes is reported even if none ever did.
                source(&mut self.sources, self.cap, src, k, at);
                self.take_expired(stats);
                return 0;
            }
            Err(_) => {
                self.take_expired(stats);
                return 0;
            }
        };
        let one_way_us = at_us.saturating_sub(hdr.sent_us);
        let late = hdr.deadline_us != 0 && one_way_us > u64::from(hdr.deadline_us);
        match (hdr.class, late) {
            (Class::Rt, false) => stats.rt_delivered += 1,
            (Class::Rt, true) => {
                stats.rt_delivered += 1;
                stats.rt_late += 1;
            }
            (Class::Nrt, false) => stats.nrt_delivered += 1,
            (Class::Nrt, true) => {
                stats.nrt_delivered += 1;
                stats.nrt_late += 1;
            }
        }
        let s = source(&mut self.sources, self.cap, src, k, at);
        let before = lost(&s.report);
        count(s, &hdr, late, stats);
        self.news = true;
        self.losses = self
            .losses
            .wrapping_add(lost(&s.report).wrapping_sub(before));
        on_message(RtMessage {
            src,
            class: hdr.class,
            id: hdr.msg_id,
            data,
            sent_us: hdr.sent_us,
            one_way: Duration::from_micros(one_way_us),
            deadline: (hdr.deadline_us != 0)
                .then(|| Duration::from_micros(u64::from(hdr.deadline_us))),
            late,
            marked,
        });
        if let Some(slot) = slot {
            self.reasm.release(slot);
        }
        self.take_expired(stats);
        1
    }

    /// Drops messages past their time and tells their sources.
    pub(super) fn expire(&mut self, now: Instant, stats: &mut RtStats) {
        self.reasm.expire(now);
        self.take_expired(stats);
    }

    fn take_expired(&mut self, _stats: &mut RtStats) {
        let sources = &mut self.sources;
        let losses = &mut self.losses;
        let news = &mut self.news;
        self.reasm.take_expired(|k, _id| {
            let k = k & !(1 << 62);
            if let Some(s) = sources.iter_mut().find(|s| s.key == k) {
                s.report.expired = s.report.expired.wrapping_add(1);
                s.news = true;
                *news = true;
                *losses = losses.wrapping_add(1);
            }
        });
    }

    /// Sends each source with news its report, if one is due.
    pub(super) fn send_reports(
        &mut self,
        now: Instant,
        dp: &mut super::path::Path,
        mark: Option<Mark>,
        stats: &mut RtStats,
    ) {
        if now < self.next_report {
            return;
        }
        self.next_report = now + self.interval;
        self.news = false;
        self.told = self.losses;
        self.out.clear();
        for s in self.sources.iter_mut().filter(|s| s.news) {
            s.news = false;
            s.report.seq = s.report.seq.wrapping_add(1);
            s.report.receiver_losses = self.losses;
            let mut b = [0; REPORT_LEN];
            s.report.emit(&mut b);
            self.out.push((b, s.addr));
        }
        if self.out.is_empty() {
            return;
        }
        dp.set_mark(mark);
        let _ = dp.send_gather(&Reports(&self.out));
        stats.reports_sent += self.out.len() as u64;
    }
}

/// The entry of `addr`, made (in place of the least recently active if the table is full)
/// if there is none.
fn source(
    sources: &mut Vec<Source>,
    cap: usize,
    addr: SocketAddr,
    key: u64,
    now: Instant,
) -> &mut Source {
    let fresh = Source {
        addr,
        key,
        used: now,
        next_id: [None; 2],
        report: Report::default(),
        news: false,
    };
    let i = match sources.iter().position(|s| s.addr == addr) {
        Some(i) => i,
        None if sources.len() < cap => {
            sources.push(fresh);
            sources.len() - 1
        }
        None => {
            // The table is full (and `open` refuses a table of none).
            let i = sources
                .iter()
                .enumerate()
                .min_by_key(|(_, s)| s.used)
                .map_or(0, |(i, _)| i);
            sources[i] = fresh;
            i
        }
    };
    let s = &mut sources[i];
    s.used = now;
    s
}

/// Counts a delivered message into its source's report: ids skipped are missing.
fn count(s: &mut Source, h: &RtHeader, late: bool, stats: &mut RtStats) {
    let r = &mut s.report;
    r.delivered = r.delivered.wrapping_add(1);
    match (late, h.class) {
        (true, Class::Rt) => r.late_rt = r.late_rt.wrapping_add(1),
        (true, Class::Nrt) => r.late_nrt = r.late_nrt.wrapping_add(1),
        (false, _) => {}
    }
    let c = match h.class {
        Class::Rt => 0,
        Class::Nrt => 1,
    };
    let next = &mut s.next_id[c];
    match *next {
        None => *next = Some(h.msg_id.wrapping_add(1)),
        Some(n) => {
            let ahead = h.msg_id.wrapping_sub(n);
            let behind = n.wrapping_sub(h.msg_id);
            if ahead < MAX_GAP {
                r.missing = r.missing.wrapping_add(ahead);
                *next = Some(h.msg_id.wrapping_add(1));
            } else if behind > REORDER {
                stats.resyncs += 1;
                *next = Some(h.msg_id.wrapping_add(1));
            }
        }
    }
    r.next_rt = s.next_id[0].unwrap_or(0);
    r.next_nrt = s.next_id[1].unwrap_or(0);
    s.news = true;
}
