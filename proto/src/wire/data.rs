//! Data packet header (draft-sharabayko-srt §3.1).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! |0|                    Packet Sequence Number                   |
//! |P P|O|K K|R|                   Message Number                  |
//! |                           Timestamp                           |
//! |                     Destination Socket ID                     |
//! ```

use super::{WireError, HEADER_LEN};
use crate::seq::{MsgNo, SeqNo};

/// Where a packet sits inside its message (the PP bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PacketPosition {
    /// `00`: neither first nor last.
    Middle,
    /// `01`: last packet of a message.
    Last,
    /// `10`: first packet of a message.
    First,
    /// `11`: the whole message in one packet.
    Solo,
}

impl PacketPosition {
    /// From the two PP bits.
    pub const fn from_bits(b: u8) -> Self {
        match b & 3 {
            0 => PacketPosition::Middle,
            1 => PacketPosition::Last,
            2 => PacketPosition::First,
            _ => PacketPosition::Solo,
        }
    }
    /// The two PP bits.
    pub const fn bits(self) -> u8 {
        match self {
            PacketPosition::Middle => 0,
            PacketPosition::Last => 1,
            PacketPosition::First => 2,
            PacketPosition::Solo => 3,
        }
    }
    /// True for `First` and `Solo`.
    pub const fn is_first(self) -> bool {
        matches!(self, PacketPosition::First | PacketPosition::Solo)
    }
    /// True for `Last` and `Solo`.
    pub const fn is_last(self) -> bool {
        matches!(self, PacketPosition::Last | PacketPosition::Solo)
    }
}

/// Which key encrypted the payload (the KK bits); slipstream sends `None` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncryptionKey {
    /// Not encrypted.
    None,
    /// Even key.
    Even,
    /// Odd key.
    Odd,
    /// Both (only in key-material messages).
    Both,
}

impl EncryptionKey {
    const fn from_bits(b: u8) -> Self {
        match b & 3 {
            0 => EncryptionKey::None,
            1 => EncryptionKey::Even,
            2 => EncryptionKey::Odd,
            _ => EncryptionKey::Both,
        }
    }
    const fn bits(self) -> u8 {
        match self {
            EncryptionKey::None => 0,
            EncryptionKey::Even => 1,
            EncryptionKey::Odd => 2,
            EncryptionKey::Both => 3,
        }
    }
}

/// The header fields of a data packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// Packet sequence number.
    pub seq: SeqNo,
    /// Position within the message.
    pub position: PacketPosition,
    /// In-order delivery flag.
    pub in_order: bool,
    /// Encryption key flags.
    pub key: EncryptionKey,
    /// Set on retransmissions.
    pub retransmitted: bool,
    /// Message number (26 bits).
    pub msg_no: MsgNo,
    /// Microseconds since the sender's connection start (wrapping).
    pub timestamp: u32,
    /// Destination SRT socket id.
    pub dst_socket: u32,
}

impl DataHeader {
    /// Parses the 16-byte header; the caller checked bit 0 is clear.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let h: &[u8; HEADER_LEN] = buf
            .get(..HEADER_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or(WireError::Truncated)?;
        let w = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        let w1 = w(4);
        Ok(DataHeader {
            seq: SeqNo::new(w(0)),
            position: PacketPosition::from_bits((w1 >> 30) as u8),
            in_order: w1 & (1 << 29) != 0,
            key: EncryptionKey::from_bits((w1 >> 27) as u8),
            retransmitted: w1 & (1 << 26) != 0,
            msg_no: MsgNo::new(w1),
            timestamp: w(8),
            dst_socket: w(12),
        })
    }

    /// Writes the 16-byte header.
    pub fn emit(&self, out: &mut [u8; HEADER_LEN]) {
        let w1 = (u32::from(self.position.bits()) << 30)
            | (u32::from(self.in_order) << 29)
            | (u32::from(self.key.bits()) << 27)
            | (u32::from(self.retransmitted) << 26)
            | self.msg_no.get();
        out[0..4].copy_from_slice(&self.seq.get().to_be_bytes());
        out[4..8].copy_from_slice(&w1.to_be_bytes());
        out[8..12].copy_from_slice(&self.timestamp.to_be_bytes());
        out[12..16].copy_from_slice(&self.dst_socket.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_flag() {
        for pos in 0..4u8 {
            for flags in 0..16u8 {
                let h = DataHeader {
                    seq: SeqNo::new(0x7FFF_FFF0 + u32::from(flags)),
                    position: PacketPosition::from_bits(pos),
                    in_order: flags & 1 != 0,
                    key: EncryptionKey::from_bits(flags >> 1),
                    retransmitted: flags & 8 != 0,
                    msg_no: MsgNo::new(0x03FF_FFFF - u32::from(flags)),
                    timestamp: 0xDEAD_BEEF,
                    dst_socket: 0x1234_5678,
                };
                let mut b = [0u8; HEADER_LEN];
                h.emit(&mut b);
                assert_eq!(b[0] & 0x80, 0);
                assert_eq!(DataHeader::parse(&b).unwrap(), h);
            }
        }
    }
}
