//! SRT wire format (draft-sharabayko-srt §3): checked parsing of every packet type into plain
//! representations, and emission into caller-provided buffers.
//!
//! Parsing never panics and never allocates more than a bounded handshake needs: every length is
//! validated once in [`Packet::parse`]. Data packets borrow their payload from the input buffer.
//! Unknown control types and handshake extensions are kept as `Unknown`, not rejected.

mod control;
mod data;
pub mod file;
mod handshake;
pub mod tree;

pub use control::{emit_nak, Ack, AckInfo, LossRanges};
pub use data::{DataHeader, EncryptionKey, PacketPosition};
pub use handshake::{
    Handshake, HsExtensions, HsType, RejectReason, SlipstreamExt, SrtFlags, SrtHs, HS_VERSION_SRT5,
    HS_VERSION_UDT4, SRT_MAGIC,
};

/// Size of the common SRT header (data and control).
pub const HEADER_LEN: usize = 16;
/// IPv4 + UDP header overhead, subtracted from the MSS to get the SRT packet size.
pub const UDP_IPV4_OVERHEAD: usize = 28;
/// Largest datagram slipstream will ever parse or emit.
pub const MAX_DATAGRAM: usize = 65_507;

/// Why a datagram could not be parsed. Each is counted and the datagram dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WireError {
    /// Shorter than the 16-byte header or than its type requires.
    Truncated,
    /// A field holds a value the format forbids (bad NAK range, handshake extension overrunning).
    Malformed,
    /// Larger than [`MAX_DATAGRAM`] or than a bounded field allows (stream id over 512 bytes).
    Oversized,
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            WireError::Truncated => "truncated packet",
            WireError::Malformed => "malformed packet",
            WireError::Oversized => "oversized packet",
        })
    }
}
impl std::error::Error for WireError {}

/// Control packet type codes (draft §3.2, Table 1).
pub mod ctrl_type {
    /// Handshake.
    pub const HANDSHAKE: u16 = 0x0000;
    /// Keep-alive.
    pub const KEEPALIVE: u16 = 0x0001;
    /// Acknowledgement (full, light or small).
    pub const ACK: u16 = 0x0002;
    /// Negative acknowledgement (loss report).
    pub const NAK: u16 = 0x0003;
    /// Congestion warning (unused by SRT senders).
    pub const CONGESTION: u16 = 0x0004;
    /// Shutdown.
    pub const SHUTDOWN: u16 = 0x0005;
    /// Acknowledgement of an acknowledgement.
    pub const ACKACK: u16 = 0x0006;
    /// Message drop request.
    pub const DROPREQ: u16 = 0x0007;
    /// Peer error.
    pub const PEERERROR: u16 = 0x0008;
    /// User-defined; the subtype says what.
    pub const USER: u16 = 0x7FFF;
}

/// A parsed datagram.
#[derive(Debug, Clone, PartialEq)]
pub enum Packet<'a> {
    /// A data packet; the payload borrows the input.
    Data(DataHeader, &'a [u8]),
    /// A control packet.
    Control(Control<'a>),
}

/// A control packet: common header fields plus the typed body.
#[derive(Debug, Clone, PartialEq)]
pub struct Control<'a> {
    /// Microseconds since the sender's connection start (wrapping).
    pub timestamp: u32,
    /// Destination SRT socket id (0 for a handshake to a listener).
    pub dst_socket: u32,
    /// The typed body.
    pub body: ControlBody<'a>,
}

/// The typed body of a control packet.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ControlBody<'a> {
    /// Handshake (caller–listener v5 or the v4 induction request).
    Handshake(Handshake),
    /// Keep-alive.
    KeepAlive,
    /// Full, small or light ACK.
    Ack(Ack),
    /// Loss report; the ranges are validated, iterate them with [`LossRanges::iter`].
    Nak(LossRanges<'a>),
    /// Congestion warning.
    CongestionWarning,
    /// Shutdown.
    Shutdown,
    /// ACKACK echoing an ACK number.
    AckAck {
        /// The ACK number being acknowledged.
        ack_no: u32,
    },
    /// Drop request: the sender gave up on a message.
    DropReq {
        /// Message number (0 when unknown).
        msg_no: u32,
        /// First sequence number dropped.
        first: crate::seq::SeqNo,
        /// Last sequence number dropped (inclusive).
        last: crate::seq::SeqNo,
    },
    /// Peer error with its code.
    PeerError {
        /// Error code.
        code: u32,
    },
    /// User-defined control packet.
    User {
        /// Subtype.
        subtype: u16,
        /// Type-specific information word.
        info: u32,
        /// Control information field.
        body: &'a [u8],
    },
    /// A control type slipstream does not know; kept, counted and ignored.
    Unknown {
        /// The 15-bit control type.
        ctype: u16,
    },
}

impl<'a> Packet<'a> {
    /// Parses one datagram. Never panics; every error is a [`WireError`].
    pub fn parse(buf: &'a [u8]) -> Result<Packet<'a>, WireError> {
        if buf.len() > MAX_DATAGRAM {
            return Err(WireError::Oversized);
        }
        if buf.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if buf[0] & 0x80 == 0 {
            let hdr = DataHeader::parse(buf)?;
            Ok(Packet::Data(hdr, &buf[HEADER_LEN..]))
        } else {
            control::parse(buf).map(Packet::Control)
        }
    }

    /// Reads the destination socket id of any datagram at least 16 bytes long.
    pub fn peek_dst_socket(buf: &[u8]) -> Option<u32> {
        let b: [u8; 4] = buf.get(12..16)?.try_into().ok()?;
        Some(u32::from_be_bytes(b))
    }
}

impl Control<'_> {
    /// Writes this control packet into `buf`; returns the length, or `None` when `buf` is too small.
    pub fn emit(&self, buf: &mut [u8]) -> Option<usize> {
        control::emit(self, buf)
    }
}
