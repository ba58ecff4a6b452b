//! Control packets (draft-sharabayko-srt §3.2): header, ACK, NAK loss lists, ACKACK, drop
//! request, keep-alive, shutdown, user-defined; handshakes are in `handshake.rs`.

use super::{Control, ControlBody, WireError};
use crate::seq::SeqNo;

/// Extra fields of a full (or small) ACK, after the acknowledged sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AckInfo {
    /// RTT in microseconds, as smoothed by the receiver.
    pub rtt_us: u32,
    /// RTT variance in microseconds.
    pub rtt_var_us: u32,
    /// Free space in the receiver's buffer, in packets (the flow window).
    pub avail_buf_pkts: u32,
    /// Packets per second the receiver is receiving (0 in a small ACK).
    pub pkt_recv_rate: u32,
    /// Estimated link capacity in packets per second (0 in a small ACK).
    pub link_capacity: u32,
    /// Bytes per second the receiver is receiving (0 when absent).
    pub recv_rate_bytes: u32,
}

/// An acknowledgement. A light ACK has `ack_no == 0` and no `info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// ACK number, echoed by the ACKACK (type-specific field); 0 for light ACKs.
    pub ack_no: u32,
    /// The first sequence number not yet received in order.
    pub ack_seq: SeqNo,
    /// Present in full and small ACKs.
    pub info: Option<AckInfo>,
}

/// A validated NAK loss list borrowed from a datagram.
///
/// Each entry is either a single sequence number (top bit clear) or a range: a start with the
/// top bit set followed by an end (top bit clear, end ≥ start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LossRanges<'a> {
    raw: &'a [u8],
}

impl<'a> LossRanges<'a> {
    /// Validates `raw` as a loss list (length a multiple of 4, ranges complete and ordered).
    pub fn new(raw: &'a [u8]) -> Result<Self, WireError> {
        let _ = raw;
        todo!("validate")
    }
    /// Iterates the inclusive ranges `(first, last)`.
    pub fn iter(&self) -> impl Iterator<Item = (SeqNo, SeqNo)> + 'a {
        let _ = self.raw;
        core::iter::empty()
    }
}

/// Writes a NAK control packet with the given inclusive ranges into `buf`, stopping before the
/// buffer would overflow. Returns the length written and how many ranges fit.
pub fn emit_nak(
    timestamp: u32,
    dst_socket: u32,
    ranges: impl Iterator<Item = (SeqNo, SeqNo)>,
    buf: &mut [u8],
) -> (usize, usize) {
    let _ = (timestamp, dst_socket, ranges, buf);
    todo!()
}

pub(super) fn parse(buf: &[u8]) -> Result<Control<'_>, WireError> {
    let _ = buf;
    let _ = ControlBody::KeepAlive;
    todo!()
}

pub(super) fn emit(c: &Control<'_>, buf: &mut [u8]) -> Option<usize> {
    let _ = (c, buf);
    todo!()
}
