//! slipstream: a user-space transport stack over UDP that speaks SRT.
//!
//! - [`api`]: the blocking API, [`Endpoint`] and [`Connection`].
//! - [`runtime`]: the per-endpoint I/O thread driving the sans-IO engine
//!   ([`slipstream_proto`]).
//! - [`datapath`]: batched datagram I/O backends and the loss-injecting [`datapath::Impaired`].
//! - [`dgram`]: asynchronous UDP datagrams (post/complete, registered buffer pool; Linux).
//! - [`transfer`]: file transfer with an end-to-end XXH3-128 digest trailer.
//! - [`cli`]: the `slipstream` command line.
//! - [`netem`]: the link emulator between two network namespaces (`slipstream netem`).
//! - [`plot`]: SVG line charts for benchmark reports.

pub mod api;
mod bench;
pub mod cli;
pub mod datapath;
#[cfg(target_os = "linux")]
pub mod dgram;
#[cfg(target_os = "linux")]
pub mod netem;
pub mod plot;
mod runtime;
mod sys;
#[cfg(target_os = "linux")]
pub use sys::hugepage::HugePageAlloc;
#[cfg(target_os = "linux")]
pub use sys::mapped::{exit_on_sigbus_in_mappings, MappedFile};
pub mod transfer;
pub mod tree;
pub mod verdict;

pub use api::{Connection, Endpoint, EndpointOptions};
pub use slipstream_proto as proto;
pub use slipstream_proto::conn::{
    CloseReason, ConnConfig, ConnStats, Mode, SendTap, SharedBytes, StreamRead,
};
pub use slipstream_proto::endpoint::EndpointStats;
