//! The endpoint's memory pressure flag, shared by its connections' buffers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Set by the endpoint while its connections' buffers hold more than its memory budget
/// ([`crate::endpoint::EndpointConfig::set_memory_budget`]): buffers then take no new
/// memory (they reuse what they hold, refuse to grow, and drop arrivals that would need a
/// new page; the sender retransmits those). A connection on its own has a flag of its own,
/// never set.
#[derive(Debug, Clone, Default)]
pub(crate) struct Pressure(Arc<AtomicBool>);

impl Pressure {
    /// Whether new memory is refused now.
    pub fn on(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets or clears the flag for every connection sharing it.
    pub fn set(&self, on: bool) {
        self.0.store(on, Ordering::Relaxed);
    }
}
