//! slipstream: a user-space transport stack over UDP that speaks SRT.
//!
//! - [`api`]: the blocking API, [`Endpoint`] and [`Connection`].
//! - `runtime`: the per-endpoint I/O thread driving the sans-IO engine
//!   ([`slipstream_proto`]).
//! - [`datapath`]: batched datagram I/O backends and the loss-injecting [`datapath::Impaired`].
//! - [`dgram`]: asynchronous UDP datagrams (post/complete, registered buffer pool; Linux).
//! - [`transfer`]: file transfer with an end-to-end XXH3-128 digest trailer, the receiver's
//!   verdict and resume; [`tree`]: directory trees over one connection; [`verdict`]: the
//!   messages the two ends exchange around the data.
//! - [`netem`]: the link emulator between two network namespaces (`slipstream netem`).
//! - [`signal`]: SIGINT/SIGTERM as a request to stop.
//!
//! The `slipstream` command line, its benchmarks and plots live in the `slipstream-cli`
//! crate (`cli/` in the workspace), so that an application embedding this library compiles
//! no argument parser, progress bar or plotting. `examples/send_recv_file.rs` sends and
//! receives a file from Rust: `cargo run --example send_recv_file -- FILE`.

pub mod api;
pub mod datapath;
#[cfg(target_os = "linux")]
pub mod dgram;
#[cfg(target_os = "linux")]
pub mod netem;
pub mod poll;
#[cfg(target_os = "linux")]
pub mod rt;
mod runtime;
pub mod smoother;
mod sys;
#[cfg(target_os = "linux")]
pub use sys::hugepage::HugePageAlloc;
#[cfg(target_os = "linux")]
pub use sys::mapped::{exit_on_sigbus_in_mappings, MappedFile};
#[cfg(unix)]
pub use sys::signal;
pub mod transfer;
pub mod tree;
pub mod verdict;

pub use api::{Connection, Endpoint, EndpointOptions};
pub use poll::{Interest, Poller};
pub use slipstream_proto as proto;
pub use slipstream_proto::conn::{
    CloseReason, ConnConfig, ConnStats, Mode, SendTap, SharedBytes, StreamRead,
};
pub use slipstream_proto::endpoint::EndpointStats;
