//! slipstream-proto: the sans-IO core of slipstream.
//!
//! Everything here is driven by the caller: it never reads a clock, touches a socket or spawns a
//! thread. Time arrives as an argument, datagrams go in and come out as byte slices. That makes
//! every behaviour testable deterministically in virtual time over [`sim`], a simulated lossy
//! network.
//!
//! - [`wire`]: the SRT packet formats, checked parsing and emission.
//! - [`seq`]: 31-bit sequence and 26-bit message numbers with wrap-around.
//! - [`loss`]: loss lists kept as ranges.
//! - [`rate`]: receiver-side arrival-rate and link-capacity estimation.
//! - [`cc`]: composable congestion control (UDT's event handlers).
//! - [`sim`]: a simulated path with loss, delay, jitter, reordering, duplication and a rate limit.
//! - [`rt`]: real-time datagrams: the fragment header, reassembly and the traffic smoother.

pub mod cc;
pub mod conn;
pub mod endpoint;
pub mod loss;
pub mod rate;
pub mod rt;
pub mod seq;
pub mod share;
pub mod sim;
pub mod wire;
