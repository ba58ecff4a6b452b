//! The sending side of an [`super::RtSocket`]: the queues of both classes, fragmenting into
//! GSO runs, the smoother, the model of the queue below, and the destinations' numbering and
//! reports.

use super::{Buf, Class, LossSignal, RtConfig, RtStats, SendError, WouldBlock};
use crate::datapath::TxGather;
use crate::smoother::{dephased, HostSmoother, LinkModel};
use crate::sys::mmsg::Mark;
use slipstream_proto::rt::header::{RtHeader, RT_HEADER_LEN};
use slipstream_proto::rt::report::Report;
use slipstream_proto::rt::smoother::{Smoother, SmootherStats};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Fragments handed to the kernel per call at most (their headers are built in place).
const HDRS: usize = 256;
/// Bundles of small real-time messages handed to the kernel per call at most.
const BUNDLES: usize = 64;

/// A message queued or being sent.
#[derive(Debug)]
struct Pending {
    buf: Buf,
    dst: SocketAddr,
    class: Class,
    /// Its number: given when its first fragment leaves, so that one dropped unsent leaves
    /// no gap in the numbering the receiver sees.
    id: u32,
    /// Whether `id` was given (a first send the kernel refused whole gives none).
    numbered: bool,
    sent_us: u64,
    deadline_us: u32,
    /// Its deadline, for dropping it unsent.
    expires: Option<Instant>,
    /// Fragments already sent, and in all.
    done: u32,
    total: u32,
}

/// A destination: its message numbering (by class: real-time, non-real-time) and the last
/// report taken from it.
#[derive(Debug, Clone, Copy)]
struct Peer {
    addr: SocketAddr,
    next_id: [u32; 2],
    used: Instant,
    report: Option<Report>,
}

/// The fragments `first..first + n` of a message, as the kernel gathers them.
struct Frags<'a> {
    dst: SocketAddr,
    hdrs: &'a [[u8; RT_HEADER_LEN]],
    payload: &'a [u8],
    frag_len: usize,
    first: usize,
}

impl TxGather for Frags<'_> {
    fn len(&self) -> usize {
        self.hdrs.len()
    }

    fn get(&self, i: usize) -> (SocketAddr, &[u8], &[u8]) {
        let start = ((self.first + i) * self.frag_len).min(self.payload.len());
        let end = (start + self.frag_len).min(self.payload.len());
        (self.dst, &self.hdrs[i], &self.payload[start..end])
    }
}

/// Bundles built in the staging area: destination and byte range each.
struct Bundles<'a> {
    spans: &'a [(SocketAddr, usize, usize)],
    area: &'a [u8],
}

impl TxGather for Bundles<'_> {
    fn len(&self) -> usize {
        self.spans.len()
    }

    fn get(&self, i: usize) -> (SocketAddr, &[u8], &[u8]) {
        let (dst, start, end) = self.spans[i];
        (dst, &self.area[start..end], &[])
    }
}

/// The smoother a sender answers to: its own, or its process's.
#[derive(Debug)]
pub(super) enum Gate {
    Own(Smoother),
    Host(HostSmoother),
}

impl Gate {
    /// `f` on the smoother, refreshed to `now`.
    fn with<R>(&mut self, now: Instant, f: impl FnOnce(&mut Smoother) -> R) -> R {
        match self {
            Gate::Own(s) => {
                s.handle_timeout(now);
                f(s)
            }
            Gate::Host(h) => f(&mut h.lock(now)),
        }
    }

    fn next_refresh(&self) -> Instant {
        match self {
            Gate::Own(s) => s.next_refresh(),
            Gate::Host(h) => h.next_refresh(),
        }
    }

    /// Whether credit is there (room below is asked apart: [`Sender::room`]).
    fn nrt_ready(&self) -> bool {
        match self {
            Gate::Own(s) => s.nrt_ready(),
            Gate::Host(h) => h.lock(Instant::now()).nrt_ready(),
        }
    }

    /// Counters, period and credits.
    pub(super) fn stats(&self) -> (SmootherStats, Duration, i64) {
        match self {
            Gate::Own(s) => (s.stats(), s.period(), s.credits()),
            Gate::Host(h) => h.stats(),
        }
    }
}

#[derive(Debug)]
pub(super) struct Sender {
    frag_len: u16,
    ip_udp: usize,
    max_message: usize,
    late_is_loss: bool,
    loss_signal: LossSignal,
    rt: VecDeque<Pending>,
    nrt: VecDeque<Pending>,
    rt_cap: usize,
    nrt_cap: usize,
    hdrs: Vec<[u8; RT_HEADER_LEN]>,
    smoother: Option<Gate>,
    /// The link below, modelled, if its rate is known (with the process's smoother, the
    /// process's model: see [`Sender::room`]).
    below: Option<LinkModel>,
    peers: Vec<Peer>,
    peers_cap: usize,
    /// When a send last found the kernel's buffer full (cleared by the next pump).
    kernel_full: Option<Instant>,
    /// Real-time messages are held (until uncorked, or until their queue is full).
    corked: bool,
    /// Where bundles are built (small messages are copied here once), and their spans.
    area: Vec<u8>,
    spans: Vec<(SocketAddr, usize, usize)>,
}

/// How long after the kernel's buffer was found full a send is tried again.
const RETRY: Duration = Duration::from_micros(200);

impl Sender {
    pub(super) fn new(
        cfg: &RtConfig,
        host: Option<HostSmoother>,
        frag_len: u16,
        ip_udp: usize,
        now: Instant,
    ) -> Sender {
        let full = usize::from(frag_len) + RT_HEADER_LEN + ip_udp;
        let below = match host {
            Some(_) => None,
            None => cfg
                .link_rate
                .map(|rate| LinkModel::new(rate, cfg.below_packets, full, now)),
        };
        Sender {
            frag_len,
            ip_udp,
            max_message: cfg.max_message,
            late_is_loss: cfg.late_is_loss,
            loss_signal: cfg.loss_signal,
            rt: VecDeque::with_capacity(cfg.rt_queue),
            nrt: VecDeque::with_capacity(cfg.nrt_queue),
            rt_cap: cfg.rt_queue,
            nrt_cap: cfg.nrt_queue,
            hdrs: vec![[0; RT_HEADER_LEN]; HDRS],
            smoother: match host {
                Some(h) => Some(Gate::Host(h)),
                None => cfg.smoother.map(|c| Gate::Own(dephased(c, now))),
            },
            below,
            peers: Vec::with_capacity(cfg.peers),
            peers_cap: cfg.peers,
            kernel_full: None,
            corked: false,
            area: vec![0; BUNDLES * (usize::from(frag_len) + RT_HEADER_LEN)],
            spans: Vec::with_capacity(BUNDLES),
        }
    }

    pub(super) fn set_cork(&mut self, corked: bool) {
        self.corked = corked;
    }

    pub(super) fn frag_len(&self) -> u16 {
        self.frag_len
    }

    pub(super) fn memory(&self) -> usize {
        (self.rt.capacity() + self.nrt.capacity()) * std::mem::size_of::<Pending>()
            + self.hdrs.len() * RT_HEADER_LEN
            + self.peers.capacity() * std::mem::size_of::<Peer>()
            + self.area.len()
            + self.spans.capacity() * std::mem::size_of::<(SocketAddr, usize, usize)>()
    }

    pub(super) fn smoother(&self) -> Option<&Gate> {
        self.smoother.as_ref()
    }

    pub(super) fn queued(&self) -> (usize, usize) {
        (self.rt.len(), self.nrt.len())
    }

    /// The entry of `dst`, made (in place of the least recently used one if the table is
    /// full) if there is none.
    fn peer(&mut self, dst: SocketAddr, now: Instant) -> &mut Peer {
        let i = match self.peers.iter().position(|p| p.addr == dst) {
            Some(i) => i,
            None => {
                let fresh = Peer {
                    addr: dst,
                    next_id: [0; 2],
                    used: now,
                    report: None,
                };
                if self.peers.len() < self.peers_cap {
                    self.peers.push(fresh);
                    self.peers.len() - 1
                } else {
                    // The table is full (and `open` refuses a table of none).
                    let i = self
                        .peers
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, p)| p.used)
                        .map_or(0, |(i, _)| i);
                    self.peers[i] = fresh;
                    i
                }
            }
        };
        let p = &mut self.peers[i];
        p.used = now;
        p
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn enqueue(
        &mut self,
        mut buf: Buf,
        len: usize,
        dst: SocketAddr,
        class: Class,
        deadline: Option<Duration>,
        deadline_at: Option<Instant>,
        sent_us: u64,
        stats: &mut RtStats,
    ) -> Result<(), SendError> {
        let refuse = |reason, buf| Err(SendError { reason, buf });
        if len > buf.capacity() || len > self.max_message {
            stats.too_long += 1;
            return refuse(WouldBlock::TooLong, buf);
        }
        let (queue_len, cap) = match class {
            Class::Rt => (self.rt.len(), self.rt_cap),
            Class::Nrt => (self.nrt.len(), self.nrt_cap),
        };
        if queue_len >= cap {
            match class {
                Class::Rt => stats.rt_refused += 1,
                Class::Nrt => stats.nrt_refused += 1,
            }
            let reason = match class {
                Class::Rt => WouldBlock::RtQueueFull,
                Class::Nrt => WouldBlock::NrtQueueFull,
            };
            return refuse(reason, buf);
        }
        buf.set_len(len);
        let p = Pending {
            buf,
            dst,
            class,
            id: 0,
            numbered: false,
            sent_us,
            deadline_us: deadline.map_or(0, |d| d.as_micros().clamp(1, u32::MAX as u128) as u32),
            expires: deadline_at,
            done: 0,
            total: RtHeader::fragments(len as u32, self.frag_len),
        };
        match class {
            Class::Rt => {
                stats.rt_sent += 1;
                self.rt.push_back(p)
            }
            Class::Nrt => {
                stats.nrt_sent += 1;
                self.nrt.push_back(p)
            }
        }
        Ok(())
    }

    /// When the sender needs time next: the smoother's refresh, room below for a waiting
    /// non-real-time packet (only if credit is not what it waits for), or a queued message's
    /// deadline.
    pub(super) fn next_timer(&self, now: Instant) -> Instant {
        let far = now + Duration::from_secs(3600);
        let refresh = self.smoother.as_ref().map_or(far, |g| g.next_refresh());
        if let Some(t) = self.kernel_full {
            return refresh.min(t + RETRY);
        }
        if self.nrt.is_empty() {
            return refresh;
        }
        let credit = self.smoother.as_ref().is_none_or(|g| g.nrt_ready());
        let room = match self.room_at() {
            Some(t) if credit => t,
            _ => far,
        };
        let expiry = self
            .nrt
            .iter()
            .filter(|p| p.done == 0)
            .filter_map(|p| p.expires)
            .min()
            .unwrap_or(far);
        refresh.min(room).min(expiry)
    }

    /// Sends whatever may go now.
    pub(super) fn pump(
        &mut self,
        now: Instant,
        dp: &mut super::path::Path,
        rt_mark: Option<Mark>,
        stats: &mut RtStats,
    ) {
        if let Some(g) = &mut self.smoother {
            g.with(now, |_| ());
        }
        self.kernel_full = None;
        let hold = self.corked && self.rt.len() < self.rt_cap;
        while !hold && !self.rt.is_empty() {
            if self.bundleable(0) && self.bundleable(1) {
                if !self.send_bundles(now, dp, rt_mark, stats) {
                    self.kernel_full = Some(now);
                    return;
                }
                continue;
            }
            let Some(mut p) = self.rt.pop_front() else {
                break;
            };
            while p.done < p.total {
                let n = (p.total - p.done).min(HDRS as u32);
                if !self.send_fragments(&mut p, n, now, dp, rt_mark, stats) {
                    // The kernel's buffer is full: this message goes on later, first.
                    self.rt.push_front(p);
                    self.kernel_full = Some(now);
                    return;
                }
            }
        }
        while let Some(i) = self
            .nrt
            .iter()
            .position(|p| p.done == 0 && p.expires.is_some_and(|e| e <= now))
        {
            self.nrt.remove(i);
            stats.nrt_expired += 1;
        }
        while let Some(mut p) = self.nrt.pop_front() {
            let room = self.room(now);
            let want = (p.total - p.done).min(room).min(HDRS as u32);
            let n = match &mut self.smoother {
                Some(g) => {
                    let (frag, ip_udp) = (u32::from(self.frag_len), self.ip_udp);
                    let len = p.buf.len() as u32;
                    g.with(now, |s| {
                        (0..want)
                            .take_while(|&j| {
                                let off = (p.done + j) * frag;
                                let payload = frag.min(len.saturating_sub(off)) as usize;
                                s.try_nrt(payload + RT_HEADER_LEN + ip_udp)
                            })
                            .count() as u32
                    })
                }
                None => want,
            };
            let went = n == 0 || self.send_fragments(&mut p, n, now, dp, None, stats);
            if p.done < p.total {
                self.nrt.push_front(p);
                if !went {
                    self.kernel_full = Some(now);
                }
                break;
            }
        }
    }

    /// Non-real-time datagrams that may go to the link below now (the process's model with
    /// the process's smoother, else this socket's; unbounded without one).
    fn room(&self, now: Instant) -> u32 {
        match (&self.smoother, &self.below) {
            (Some(Gate::Host(h)), _) => h.room(now),
            (_, Some(b)) => b.room(now),
            _ => u32::MAX,
        }
    }

    /// When the link below has room for one more non-real-time datagram, if it is modelled.
    fn room_at(&self) -> Option<Instant> {
        match (&self.smoother, &self.below) {
            (Some(Gate::Host(h)), _) => h.room_at(),
            (_, Some(b)) => Some(b.room_at()),
            _ => None,
        }
    }

    /// Whether the real-time message at `i` of the queue can go in a bundle: whole in one
    /// fragment and not started.
    fn bundleable(&self, i: usize) -> bool {
        self.rt.get(i).is_some_and(|p| {
            p.total == 1 && p.done == 0 && p.buf.len() <= usize::from(self.frag_len)
        })
    }

    /// Sends the bundleable real-time messages at the front of the queue, several to a
    /// datagram (consecutive ones to one destination, up to a fragment's size), at most
    /// [`BUNDLES`] datagrams; false if the kernel took fewer (its buffer is full). Messages
    /// not taken keep their place and their numbers.
    fn send_bundles(
        &mut self,
        now: Instant,
        dp: &mut super::path::Path,
        mark: Option<Mark>,
        stats: &mut RtStats,
    ) -> bool {
        let cap = usize::from(self.frag_len) + RT_HEADER_LEN;
        self.spans.clear();
        // Messages in each bundle, to take them off the queue once sent.
        let mut counts = [0u16; BUNDLES];
        let mut last_hdr = 0;
        let mut i = 0;
        while self.bundleable(i) {
            let (dst, len) = (self.rt[i].dst, self.rt[i].buf.len());
            let unit = RT_HEADER_LEN + len;
            let fits = self
                .spans
                .last()
                .is_some_and(|&(d, start, end)| d == dst && end - start + unit <= cap);
            if !fits {
                if self.spans.len() == BUNDLES {
                    break;
                }
                let at = match self.spans.last() {
                    Some(prev) => {
                        // The previous bundle is closed: its last message has no successor.
                        self.area[last_hdr + 19] &= !1;
                        prev.2
                    }
                    None => 0,
                };
                self.spans.push((dst, at, at));
            }
            if !self.rt[i].numbered {
                let class = usize::from(self.rt[i].class == Class::Nrt);
                let next = &mut self.peer(dst, now).next_id[class];
                let id = *next;
                *next = id.wrapping_add(1);
                let p = &mut self.rt[i];
                p.id = id;
                p.numbered = true;
            }
            let p = &self.rt[i];
            let k = self.spans.len() - 1;
            let start = self.spans[k].2;
            let hdr = RtHeader {
                class: p.class,
                msg_id: p.id,
                msg_len: len as u32,
                offset: 0,
                frag_len: self.frag_len,
                sent_us: p.sent_us,
                deadline_us: p.deadline_us,
                more: true,
            };
            hdr.emit(&mut self.area[start..]);
            self.area[start + RT_HEADER_LEN..start + unit].copy_from_slice(p.buf.data());
            last_hdr = start;
            self.spans[k].2 = start + unit;
            counts[k] += 1;
            i += 1;
        }
        if !self.spans.is_empty() {
            self.area[last_hdr + 19] &= !1;
        }
        dp.set_mark(mark);
        let bundles = Bundles {
            spans: &self.spans,
            area: &self.area,
        };
        let n = self.spans.len();
        let went = match dp.send_gather(&bundles) {
            Ok(k) => k.min(n),
            Err(_) => n,
        };
        for (&(_, start, end), &count) in self.spans[..went].iter().zip(&counts) {
            let bytes = end - start + self.ip_udp;
            account(&self.smoother, &mut self.below, now, bytes);
            if let Some(g) = &mut self.smoother {
                g.with(now, |s| s.take_rt(bytes));
            }
            for _ in 0..count {
                self.rt.pop_front();
                stats.rt_fragments += 1;
            }
        }
        stats.rt_bundles += went as u64;
        went == n
    }

    /// Sends the next `n` fragments of `p`; false if the kernel took fewer (its buffer is
    /// full).
    fn send_fragments(
        &mut self,
        p: &mut Pending,
        n: u32,
        now: Instant,
        dp: &mut super::path::Path,
        mark: Option<Mark>,
        stats: &mut RtStats,
    ) -> bool {
        let len = p.buf.len() as u32;
        let n = n.min(p.total - p.done) as usize;
        if !p.numbered {
            let next = &mut self.peer(p.dst, now).next_id[usize::from(p.class == Class::Nrt)];
            p.id = *next;
            *next = p.id.wrapping_add(1);
            p.numbered = true;
        }
        for (j, h) in self.hdrs[..n].iter_mut().enumerate() {
            let hdr = RtHeader {
                class: p.class,
                msg_id: p.id,
                msg_len: len,
                offset: (p.done + j as u32) * u32::from(self.frag_len),
                frag_len: self.frag_len,
                sent_us: p.sent_us,
                deadline_us: p.deadline_us,
                more: false,
            };
            hdr.emit(h);
        }
        let frags = Frags {
            dst: p.dst,
            hdrs: &self.hdrs[..n],
            payload: p.buf.data(),
            frag_len: usize::from(self.frag_len),
            first: p.done as usize,
        };
        dp.set_mark(mark);
        // What the kernel refuses for good (an unreachable destination, ...) is counted in
        // the datapath's counters and is loss to the receiver, as on the wire; a full buffer
        // (or ENOBUFS) ends the send early, and the rest is sent again later (a run cut short
        // may repeat datagrams, which the receiver counts as duplicates).
        let went = match dp.send_gather(&frags) {
            Ok(k) => k.min(n),
            Err(_) => n,
        };
        for i in 0..went {
            let (_, h, payload) = frags.get(i);
            let bytes = h.len() + payload.len() + self.ip_udp;
            account(&self.smoother, &mut self.below, now, bytes);
            match p.class {
                Class::Rt => {
                    if let Some(g) = &mut self.smoother {
                        g.with(now, |s| s.take_rt(bytes));
                    }
                    stats.rt_fragments += 1;
                }
                Class::Nrt => stats.nrt_fragments += 1,
            }
        }
        p.done += went as u32;
        went == n
    }

    /// A receiver's report arrived from `src`.
    pub(super) fn on_report(
        &mut self,
        src: SocketAddr,
        d: &[u8],
        _cfg: &RtConfig,
        stats: &mut RtStats,
    ) {
        let (Ok(r), Some(peer)) = (
            Report::parse(d),
            self.peers.iter_mut().find(|p| p.addr == src),
        ) else {
            stats.reports_ignored += 1;
            return;
        };
        // The first report from a receiver starts its shared count: losses it saw before
        // this sender came are no news to it.
        let prev = peer.report.unwrap_or(Report {
            seq: r.seq.wrapping_sub(1),
            receiver_losses: r.receiver_losses,
            ..Report::default()
        });
        let Some(l) = r.since(&prev) else {
            stats.reports_ignored += 1;
            return;
        };
        peer.report = Some(r);
        stats.reports_taken += 1;
        stats.reported_missing += u64::from(l.missing);
        stats.reported_late += u64::from(l.late_rt) + u64::from(l.late_nrt);
        stats.reported_expired += u64::from(l.expired);
        // Late non-real-time messages may have waited here, at the smoother: not a sign of
        // congestion.
        let own = l.missing > 0 || l.expired > 0 || (self.late_is_loss && l.late_rt > 0);
        let lost = own || (self.loss_signal == LossSignal::Receiver && l.receiver_losses > 0);
        if let Some(g) = &mut self.smoother {
            g.with(Instant::now(), |s| s.on_report(lost));
        }
    }
}

/// A datagram of `ip_bytes` went to the link below: the process's model with the process's
/// smoother, else the socket's.
fn account(smoother: &Option<Gate>, below: &mut Option<LinkModel>, now: Instant, ip_bytes: usize) {
    match (smoother, below) {
        (Some(Gate::Host(h)), _) => h.account(now, ip_bytes),
        (_, Some(b)) => b.account(now, ip_bytes),
        _ => {}
    }
}
