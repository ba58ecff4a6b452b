//! A simulated network path in virtual time: seeded random and bursty (Gilbert–Elliott) loss,
//! delay, jitter, reordering, duplication, a rate limit with a drop-tail queue, and an MTU.
//!
//! [`Link`] is one direction. It is sans-IO like the engines: time is an argument. The same model
//! drives the deterministic tests (virtual time) and the runtime's loss-injecting interceptor that
//! `slipstream demo` uses (real time), so what the tests prove is what the demo shows.

mod link;

pub use link::{GilbertElliott, Link, LinkConfig, LinkStats};
mod pair;
pub use pair::Pair;
