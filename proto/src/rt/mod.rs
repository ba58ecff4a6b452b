//! Real-time datagrams (SS-RTUDP): messages of any size sent as fragments that each fit a
//! datagram (never IP fragments), with a traffic class, a send time and a deadline.
//!
//! - [`frame`]: Ethernet, IPv4 and UDP headers, for a datapath that sends whole frames.
//! - [`header`]: the fragment header, checked parsing and emission.
//! - [`reassembly`]: fragments back into messages, in memory fixed at construction.
//! - [`smoother`]: the traffic smoother's credit bucket and refresh period (Fig. 5).
//! - [`report`]: a receiver's loss report, which drives a sender's smoother.
//!
//! The socket that sends and receives them is `slipstream::rt`.

pub mod frame;
pub mod header;
pub mod reassembly;
pub mod report;
pub mod smoother;
