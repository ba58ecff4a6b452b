//! Linux system interfaces the portable standard library does not reach: batched and
//! segmentation-offloaded UDP (`sendmmsg`/`recvmmsg`, UDP_SEGMENT/UDP_GRO), MSG_ZEROCOPY
//! completions from the socket error queue, io_uring, TUN devices, AF_XDP sockets with their
//! XDP program, and mapped files.
//!
//! This is the only place in the crate allowed `unsafe`; every block states why it is sound
//! in a `// SAFETY:` comment. Everything above it sees safe types.
#![allow(unsafe_code)]

pub mod cache;
#[cfg(target_os = "linux")]
pub mod hugepage;
#[cfg(target_os = "linux")]
pub mod mapped;
#[cfg(target_os = "linux")]
pub(crate) mod mmsg;
#[cfg(target_os = "linux")]
pub(crate) mod reuseport;
#[cfg(unix)]
pub mod signal;
#[cfg(target_os = "linux")]
pub(crate) mod tun;
#[cfg(target_os = "linux")]
pub(crate) mod uring;
#[cfg(target_os = "linux")]
pub(crate) mod xdp;
#[cfg(target_os = "linux")]
pub(crate) mod zerocopy;
