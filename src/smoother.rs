//! One traffic smoother for a whole process: shared by its real-time sockets and its SRT
//! endpoints, so that bulk transfers running beside real-time messages wait for credit as
//! non-real-time packets do, loss reported by real-time receivers slows them too, and (with
//! the link's rate known) the queue below them all stays a few packets deep.
//!
//! Real-time sockets opened with `rt::RtSocket::open_with_smoother` take credit for every
//! real-time datagram and drive the period from their receivers' reports; an
//! [`crate::api::Endpoint`] given the same handle
//! ([`crate::api::EndpointOptions::set_smoother`]) hands the kernel one data packet of any of
//! its connections per credit, and only while the link below has room; otherwise it leaves
//! them in the protocol engine and comes back at [`HostSmoother::next_wake`]. Its control
//! packets (handshakes, acknowledgements, keepalives, shutdowns) go all the same, taking
//! their credit into debt as real-time packets do, so that held connections stay alive.

use slipstream_proto::rt::smoother::{Smoother, SmootherConfig, SmootherStats};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A smoother started at `now` whose first refresh comes a random share of its first period
/// later: smoothers started together (hosts of one job, sockets opened at once) would
/// otherwise refresh, and send their credits, in step for as long as their periods agree.
pub(crate) fn dephased(cfg: SmootherConfig, now: Instant) -> Smoother {
    use std::hash::{BuildHasher, Hasher};
    let mut s = Smoother::new(cfg, now);
    // Each RandomState is seeded afresh: a random 64-bit draw without a dependency.
    let draw = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    let share = (draw >> 11) as f64 / (1u64 << 53) as f64;
    s.delay_refresh(s.period().mul_f64(share));
    s
}

/// The link below a sender, modelled from its rate: when it will have sent everything handed
/// to it, so that non-real-time datagrams are handed over only while few wait there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkModel {
    rate: u64,
    packets: u32,
    free_at: Instant,
    /// Time of one full datagram on the link.
    full: Duration,
}

impl LinkModel {
    /// A link of `rate` bits per second of IP packets, on which at most `packets` (at least
    /// 1) full datagrams of `full_bytes` may wait.
    pub(crate) fn new(rate: u64, packets: u32, full_bytes: usize, now: Instant) -> LinkModel {
        let mut m = LinkModel {
            rate: rate.max(1),
            packets: packets.max(1),
            free_at: now,
            full: Duration::ZERO,
        };
        m.full = m.time(full_bytes);
        m
    }

    fn time(&self, ip_bytes: usize) -> Duration {
        Duration::from_nanos((ip_bytes as u64).saturating_mul(8_000_000_000) / self.rate)
    }

    /// Full datagrams still queued below at `now`.
    fn queued(&self, now: Instant) -> u32 {
        let backlog = self.free_at.saturating_duration_since(now);
        backlog.as_nanos().div_ceil(self.full.as_nanos().max(1)) as u32
    }

    /// Non-real-time datagrams that may go now.
    pub(crate) fn room(&self, now: Instant) -> u32 {
        self.packets.saturating_sub(self.queued(now))
    }

    /// When one more non-real-time datagram may go.
    pub(crate) fn room_at(&self) -> Instant {
        self.free_at - self.full * self.packets.saturating_sub(1)
    }

    /// A datagram of `ip_bytes` went to the link at `now`.
    pub(crate) fn account(&mut self, now: Instant, ip_bytes: usize) {
        self.free_at = self.free_at.max(now) + self.time(ip_bytes);
    }
}

#[derive(Debug)]
struct State {
    smoother: Smoother,
    link: Option<LinkModel>,
}

/// A handle on a process's smoother; clones share it.
#[derive(Debug, Clone)]
pub struct HostSmoother(Arc<Mutex<State>>);

impl HostSmoother {
    /// A smoother with `cfg` (see [`SmootherConfig`]; scale it to the host's link), credit
    /// alone deciding.
    pub fn new(cfg: SmootherConfig) -> HostSmoother {
        Self::build(cfg, None)
    }

    /// A smoother whose non-real-time packets also wait while `below_packets` full datagrams
    /// (1,500 bytes) of the process are still queued on its link of `link_rate` bits per
    /// second (every datagram counted, real-time ones too), so that a real-time packet never
    /// finds more than that ahead of it in the kernel's or the NIC's queue.
    pub fn with_link(cfg: SmootherConfig, link_rate: u64, below_packets: u32) -> HostSmoother {
        let link = LinkModel::new(link_rate, below_packets, 1500, Instant::now());
        Self::build(cfg, Some(link))
    }

    fn build(cfg: SmootherConfig, link: Option<LinkModel>) -> HostSmoother {
        HostSmoother(Arc::new(Mutex::new(State {
            smoother: dephased(cfg, Instant::now()),
            link,
        })))
    }

    /// The state, the smoother refreshed to `now` (a holder that panicked left it
    /// consistent: every change is one call).
    fn state(&self, now: Instant) -> MutexGuard<'_, State> {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        g.smoother.handle_timeout(now);
        g
    }

    /// The smoother, refreshed to `now`.
    pub(crate) fn lock(&self, now: Instant) -> impl std::ops::DerefMut<Target = Smoother> + '_ {
        SmootherGuard(self.state(now))
    }

    /// Whether a non-real-time packet would find credit and room below now (takes none).
    pub fn nrt_ready(&self, now: Instant) -> bool {
        let g = self.state(now);
        g.smoother.nrt_ready() && g.link.is_none_or(|l| l.room(now) > 0)
    }

    /// [`Self::nrt_ready`] for a sender that will keep its packet waiting if not: a refusal
    /// is counted ([`SmootherStats::nrt_held`]).
    pub fn nrt_ready_or_hold(&self, now: Instant) -> bool {
        let mut g = self.state(now);
        let ok = g.smoother.nrt_ready() && g.link.is_none_or(|l| l.room(now) > 0);
        if !ok {
            g.smoother.note_held();
        }
        ok
    }

    /// A non-real-time datagram of `ip_bytes` left after [`Self::nrt_ready`] said yes: it
    /// takes its credit (even if another sender took the last one in between) and its time
    /// on the link.
    pub fn take_nrt(&self, now: Instant, ip_bytes: usize) {
        let mut g = self.state(now);
        g.smoother.take_nrt(ip_bytes);
        if let Some(l) = &mut g.link {
            l.account(now, ip_bytes);
        }
    }

    /// Non-real-time datagrams the link below may take now (unbounded without a link).
    pub(crate) fn room(&self, now: Instant) -> u32 {
        self.state(now).link.map_or(u32::MAX, |l| l.room(now))
    }

    /// When the link below has room again, if it is modelled.
    pub(crate) fn room_at(&self) -> Option<Instant> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .link
            .map(|l| l.room_at())
    }

    /// A datagram of `ip_bytes` (of any class) went to the link below.
    pub(crate) fn account(&self, now: Instant, ip_bytes: usize) {
        if let Some(l) = &mut self.state(now).link {
            l.account(now, ip_bytes);
        }
    }

    /// When a sender held by [`Self::nrt_ready`] should ask again: the next refresh, or
    /// sooner if credit is there and only the link below was full.
    pub fn next_wake(&self) -> Instant {
        let now = Instant::now();
        let g = self.state(now);
        let refresh = g.smoother.next_refresh();
        match g.link {
            Some(l) if g.smoother.nrt_ready() => l.room_at().max(now).min(refresh),
            _ => refresh,
        }
    }

    /// When credit is next refreshed.
    pub fn next_refresh(&self) -> Instant {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .smoother
            .next_refresh()
    }

    /// The counters, the refresh period and the credits now.
    pub fn stats(&self) -> (SmootherStats, Duration, i64) {
        let g = self.state(Instant::now());
        (
            g.smoother.stats(),
            g.smoother.period(),
            g.smoother.credits(),
        )
    }
}

/// The smoother inside a locked state.
struct SmootherGuard<'a>(MutexGuard<'a, State>);

impl std::ops::Deref for SmootherGuard<'_> {
    type Target = Smoother;
    fn deref(&self) -> &Smoother {
        &self.0.smoother
    }
}

impl std::ops::DerefMut for SmootherGuard<'_> {
    fn deref_mut(&mut self) -> &mut Smoother {
        &mut self.0.smoother
    }
}
