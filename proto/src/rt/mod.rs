//! Real-time datagrams (SS-RTUDP): messages of any size sent as fragments that each fit a
//! datagram (never IP fragments), with a traffic class, a send time and a deadline.
//!
//! - [`header`]: the fragment header, checked parsing and emission.
//! - [`reassembly`]: fragments back into messages, in memory fixed at construction.
//!
//! The socket that sends and receives them, the traffic smoother and the emulated switch
//! are not built yet.

pub mod header;
pub mod reassembly;
