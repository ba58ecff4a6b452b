//! The header of a real-time datagram: one fragment of a message.
//!
//! A message longer than a datagram's payload is cut into fragments of one nominal length
//! (`frag_len`; the last may be shorter), each sent as a UDP datagram of its own: never an
//! IP fragment. Each fragment names its message, the message's length and its own offset,
//! so that the receiver places it without trusting anything else, and carries the sender's
//! clock at send time and the message's deadline.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! |         Magic 0x5254          |    Version    |     Class     |
//! |                          Message id                           |
//! |                        Message length                         |
//! |                            Offset                             |
//! |     Nominal fragment length   |   Reserved (0)              |M|
//! |                     Send time, µs (high)                      |
//! |                     Send time, µs (low)                       |
//! |                        Deadline, µs                           |
//! ```
//!
//! M (more): this datagram is a bundle, and another message follows this one. A bundle
//! carries several whole small messages (each one fragment: offset 0, length at most the
//! nominal fragment length) back to back, header and payload each; every header but the
//! last has M set, and its payload is exactly the message's length. [`units`] splits one.
//!
//! All fields are big-endian. The magic only tells a stray datagram apart; it does not make
//! the format distinguishable from SRT (an SRT data packet may begin with the same bytes), so
//! real-time sockets have ports of their own.

/// Bytes of the header.
pub const RT_HEADER_LEN: usize = 32;
/// The first two bytes.
pub const RT_MAGIC: u16 = 0x5254;
/// The version this code writes and reads.
pub const RT_VERSION: u8 = 1;

/// Traffic class of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Real-time: leaves at once, marked for priority in the network.
    Rt,
    /// Not real-time: waits for the smoother's credit.
    Nrt,
}

impl Class {
    fn bits(self) -> u8 {
        match self {
            Class::Rt => 0,
            Class::Nrt => 1,
        }
    }

    fn from_bits(b: u8) -> Option<Class> {
        match b {
            0 => Some(Class::Rt),
            1 => Some(Class::Nrt),
            _ => None,
        }
    }
}

/// Why a datagram is not a valid fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// Shorter than the header.
    Short,
    /// Not this protocol, or another version of it.
    Magic,
    /// An unknown traffic class.
    Class,
    /// Reserved bits set.
    Reserved,
    /// A bundled message (M set) that is not a whole message of one fragment.
    Bundle,
    /// A nominal fragment length of 0 for a message that is not empty.
    FragLen,
    /// The payload does not sit where the header says: not on a fragment boundary, past
    /// the message's end, or not the length a fragment at that offset has.
    Placement,
}

/// A fragment's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtHeader {
    /// Traffic class of the message.
    pub class: Class,
    /// The sender's number for the message.
    pub msg_id: u32,
    /// Bytes of the whole message.
    pub msg_len: u32,
    /// Where this fragment's payload starts in the message.
    pub offset: u32,
    /// Payload bytes of every fragment but the last.
    pub frag_len: u16,
    /// The sender's clock when it sent the fragment, µs.
    pub sent_us: u64,
    /// How long after `sent_us` the message is of use, µs (0: no deadline).
    pub deadline_us: u32,
    /// Another bundled message follows this one in the datagram.
    pub more: bool,
}

/// The flag bit of `more` in the reserved half-word.
const MORE: u16 = 1;

/// The units of a datagram: each message of a bundle, header and payload, for
/// [`RtHeader::parse`] (a datagram that is no bundle is one unit). Splitting reads only the
/// flag and the length of each header; a unit that claims more than is left is handed out
/// whole, for the parser to refuse. Each unit is at least a header long, so a datagram has
/// at most `len / 32 + 1` of them.
pub fn units(datagram: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(datagram);
    std::iter::from_fn(move || {
        let d = rest.take()?;
        let bundled = d.len() >= RT_HEADER_LEN
            && u16::from_be_bytes([d[18], d[19]]) & MORE != 0
            && u16::from_be_bytes([d[0], d[1]]) == RT_MAGIC;
        if bundled {
            let len = u32::from_be_bytes([d[8], d[9], d[10], d[11]]) as usize;
            let end = RT_HEADER_LEN.saturating_add(len);
            if end < d.len() {
                rest = Some(&d[end..]);
                return Some(&d[..end]);
            }
        }
        Some(d)
    })
}

impl RtHeader {
    /// Fragments of a message of `msg_len` bytes cut at `frag_len` (one for an empty one).
    pub fn fragments(msg_len: u32, frag_len: u16) -> u32 {
        if msg_len == 0 || frag_len == 0 {
            1
        } else {
            msg_len.div_ceil(u32::from(frag_len))
        }
    }

    /// Payload bytes of the fragment at `offset`.
    pub fn payload_len_at(msg_len: u32, frag_len: u16, offset: u32) -> u32 {
        msg_len.saturating_sub(offset).min(u32::from(frag_len))
    }

    /// This fragment's index in its message.
    pub fn index(&self) -> u32 {
        if self.frag_len == 0 {
            0
        } else {
            self.offset / u32::from(self.frag_len)
        }
    }

    /// Reads the header of `datagram` and checks that its payload (the rest) sits where the
    /// header says; returns the header and the payload.
    pub fn parse(datagram: &[u8]) -> Result<(RtHeader, &[u8]), HeaderError> {
        let (h, payload) = datagram
            .split_first_chunk::<RT_HEADER_LEN>()
            .ok_or(HeaderError::Short)?;
        let u16_at = |i: usize| u16::from_be_bytes([h[i], h[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        if u16_at(0) != RT_MAGIC || h[2] != RT_VERSION {
            return Err(HeaderError::Magic);
        }
        let class = Class::from_bits(h[3]).ok_or(HeaderError::Class)?;
        if u16_at(18) & !MORE != 0 {
            return Err(HeaderError::Reserved);
        }
        let hdr = RtHeader {
            class,
            msg_id: u32_at(4),
            msg_len: u32_at(8),
            offset: u32_at(12),
            frag_len: u16_at(16),
            sent_us: (u64::from(u32_at(20)) << 32) | u64::from(u32_at(24)),
            deadline_us: u32_at(28),
            more: u16_at(18) & MORE != 0,
        };
        let whole = hdr.offset == 0 && hdr.msg_len <= u32::from(hdr.frag_len);
        if hdr.more && !whole {
            return Err(HeaderError::Bundle);
        }
        if hdr.frag_len == 0 && hdr.msg_len != 0 {
            return Err(HeaderError::FragLen);
        }
        let on_boundary = hdr.offset.is_multiple_of(u32::from(hdr.frag_len));
        let inside = hdr.offset < hdr.msg_len || (hdr.msg_len == 0 && hdr.offset == 0);
        let len_ok = payload.len() as u64
            == u64::from(Self::payload_len_at(hdr.msg_len, hdr.frag_len, hdr.offset));
        if !(on_boundary && inside && len_ok) {
            return Err(HeaderError::Placement);
        }
        Ok((hdr, payload))
    }

    /// Writes the header into the first [`RT_HEADER_LEN`] bytes of `buf`; `None` if it is
    /// shorter.
    pub fn emit(&self, buf: &mut [u8]) -> Option<usize> {
        let h = buf.get_mut(..RT_HEADER_LEN)?;
        h[0..2].copy_from_slice(&RT_MAGIC.to_be_bytes());
        h[2] = RT_VERSION;
        h[3] = self.class.bits();
        h[4..8].copy_from_slice(&self.msg_id.to_be_bytes());
        h[8..12].copy_from_slice(&self.msg_len.to_be_bytes());
        h[12..16].copy_from_slice(&self.offset.to_be_bytes());
        h[16..18].copy_from_slice(&self.frag_len.to_be_bytes());
        h[18..20].copy_from_slice(&(if self.more { MORE } else { 0 }).to_be_bytes());
        h[20..28].copy_from_slice(&self.sent_us.to_be_bytes());
        h[28..32].copy_from_slice(&self.deadline_us.to_be_bytes());
        Some(RT_HEADER_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(h: &RtHeader, payload_len: usize) -> Vec<u8> {
        let mut d = vec![0xab; RT_HEADER_LEN + payload_len];
        h.emit(&mut d).unwrap();
        d
    }

    fn hdr(msg_len: u32, frag_len: u16, offset: u32) -> RtHeader {
        RtHeader {
            class: Class::Nrt,
            msg_id: 7,
            msg_len,
            offset,
            frag_len,
            sent_us: 0x0102_0304_0506_0708,
            deadline_us: 1500,
            more: false,
        }
    }

    #[test]
    fn a_header_reads_back_as_written() {
        let h = hdr(3000, 1400, 1400);
        let d = datagram(&h, 1400);
        let (back, payload) = RtHeader::parse(&d).unwrap();
        assert_eq!(back, h);
        assert_eq!(payload.len(), 1400);
        assert_eq!(back.index(), 1);
        assert_eq!(RtHeader::fragments(3000, 1400), 3);
        // The last fragment is shorter; an empty message is one empty fragment.
        let last = hdr(3000, 1400, 2800);
        assert!(RtHeader::parse(&datagram(&last, 200)).is_ok());
        let empty = hdr(0, 0, 0);
        assert!(RtHeader::parse(&datagram(&empty, 0)).is_ok());
        assert_eq!(RtHeader::fragments(0, 0), 1);
    }

    #[test]
    fn misplaced_or_malformed_fragments_are_refused() {
        let cases = [
            (
                datagram(&hdr(3000, 1400, 1400), 1399),
                HeaderError::Placement,
            ),
            (
                datagram(&hdr(3000, 1400, 700), 1400),
                HeaderError::Placement,
            ),
            (datagram(&hdr(3000, 1400, 4200), 0), HeaderError::Placement),
            (
                datagram(&hdr(3000, 1400, 2800), 1400),
                HeaderError::Placement,
            ),
            (datagram(&hdr(3000, 0, 0), 0), HeaderError::FragLen),
            (vec![0x52; RT_HEADER_LEN - 1], HeaderError::Short),
        ];
        for (d, want) in cases {
            assert_eq!(RtHeader::parse(&d).map(|(h, _)| h), Err(want));
        }
        let mut d = datagram(&hdr(10, 10, 0), 10);
        d[3] = 9;
        assert_eq!(RtHeader::parse(&d).map(|_| ()), Err(HeaderError::Class));
        d[3] = 0;
        d[19] = 2;
        assert_eq!(RtHeader::parse(&d).map(|_| ()), Err(HeaderError::Reserved));
        d[19] = 0;
        d[2] = 2;
        assert_eq!(RtHeader::parse(&d).map(|_| ()), Err(HeaderError::Magic));
    }

    #[test]
    fn a_bundle_splits_into_its_messages() {
        let mut d = Vec::new();
        for (i, len) in [64usize, 0, 100].into_iter().enumerate() {
            let mut h = hdr(len as u32, 1400, 0);
            h.msg_id = i as u32;
            h.more = i < 2;
            d.extend_from_slice(&datagram(&h, len));
        }
        let got: Vec<(u32, usize, bool)> = units(&d)
            .map(|u| {
                RtHeader::parse(u)
                    .map(|(h, p)| (h.msg_id, p.len(), h.more))
                    .unwrap()
            })
            .collect();
        assert_eq!(got, [(0, 64, true), (1, 0, true), (2, 100, false)]);
        // Not a bundle: one unit, the whole datagram.
        let plain = datagram(&hdr(3000, 1400, 1400), 1400);
        assert_eq!(units(&plain).collect::<Vec<_>>(), [&plain[..]]);
    }

    #[test]
    fn bundles_that_lie_are_refused() {
        // M set on a fragment of a longer message.
        let mut h = hdr(3000, 1400, 0);
        h.more = true;
        let d = datagram(&h, 1400);
        assert_eq!(
            RtHeader::parse(units(&d).next().unwrap()).map(|_| ()),
            Err(HeaderError::Bundle)
        );
        // A bundled length past the datagram's end: the rest is one unit, refused.
        let mut h = hdr(1000, 1400, 0);
        h.more = true;
        let d = datagram(&h, 10);
        let u: Vec<&[u8]> = units(&d).collect();
        assert_eq!(u.len(), 1);
        assert_eq!(
            RtHeader::parse(u[0]).map(|_| ()),
            Err(HeaderError::Placement)
        );
        // M set on the last unit with nothing after it: parsed as the last message.
        let mut h = hdr(10, 1400, 0);
        h.more = true;
        let d = datagram(&h, 10);
        assert!(RtHeader::parse(units(&d).next().unwrap()).is_ok());
        // Garbage after headers of empty messages: bounded by the datagram.
        let mut h = hdr(0, 1400, 0);
        h.more = true;
        let d: Vec<u8> = (0..100).flat_map(|_| datagram(&h, 0)).collect();
        assert_eq!(units(&d).count(), 100);
    }
}
