//! One traffic smoother for a whole process: shared by its real-time sockets and its SRT
//! endpoints, so that bulk transfers running beside real-time messages wait for credit as
//! non-real-time packets do, and loss reported by real-time receivers slows them too.
//!
//! Real-time sockets opened with `rt::RtSocket::open_with_smoother` take credit for
//! every real-time datagram and drive the period from their receivers' reports; an
//! [`crate::api::Endpoint`] given the same handle
//! ([`crate::api::EndpointOptions::set_smoother`]) hands the kernel one datagram of any of
//! its connections (data or control) per credit, and waits for the next refresh when there
//! is none.

use slipstream_proto::rt::smoother::{Smoother, SmootherConfig, SmootherStats};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// A handle on a process's smoother; clones share it.
#[derive(Debug, Clone)]
pub struct HostSmoother(Arc<Mutex<Smoother>>);

impl HostSmoother {
    /// A smoother with `cfg` (see [`SmootherConfig`]; scale it to the host's link).
    pub fn new(cfg: SmootherConfig) -> HostSmoother {
        HostSmoother(Arc::new(Mutex::new(Smoother::new(cfg, Instant::now()))))
    }

    /// The smoother, refreshed to `now` (a holder that panicked left it consistent: every
    /// change is one call).
    pub(crate) fn lock(&self, now: Instant) -> MutexGuard<'_, Smoother> {
        let mut g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        g.handle_timeout(now);
        g
    }

    /// Whether a non-real-time packet may go now; if so it takes its credit.
    pub fn try_nrt(&self, now: Instant) -> bool {
        self.lock(now).try_nrt()
    }

    /// A non-real-time packet left after [`Self::nrt_ready`] said yes: it takes its credit
    /// (even if another sender took the last one in between).
    pub fn take_nrt(&self, now: Instant) {
        self.lock(now).take_nrt()
    }

    /// Whether a non-real-time packet would find credit now (takes none).
    pub fn nrt_ready(&self, now: Instant) -> bool {
        self.lock(now).nrt_ready()
    }

    /// [`Self::nrt_ready`] for a sender that will keep its packet waiting if not: a refusal
    /// is counted ([`SmootherStats::nrt_held`]).
    pub fn nrt_ready_or_hold(&self, now: Instant) -> bool {
        let mut g = self.lock(now);
        let ok = g.nrt_ready();
        if !ok {
            g.note_held();
        }
        ok
    }

    /// When credit is next refreshed.
    pub fn next_refresh(&self) -> Instant {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .next_refresh()
    }

    /// The counters, the refresh period and the credits now.
    pub fn stats(&self) -> (SmootherStats, Duration, i64) {
        let g = self.lock(Instant::now());
        (g.stats(), g.period(), g.credits())
    }
}
