//! Control packets (draft-sharabayko-srt §3.2): header, ACK, NAK loss lists, ACKACK, drop
//! request, keep-alive, shutdown, user-defined; handshakes are in `handshake.rs`.

use super::{ctrl_type, Control, ControlBody, Handshake, WireError, HEADER_LEN, MAX_DATAGRAM};
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
    ///
    /// A range start (top bit set) must be followed by an end word with the top bit clear that
    /// is not earlier than the start in wrap-around terms; this also bounds a range to less than
    /// 2^30 sequence numbers.
    pub fn new(raw: &'a [u8]) -> Result<Self, WireError> {
        if raw.len() & 3 != 0 {
            return Err(WireError::Malformed);
        }
        let mut words = raw.chunks_exact(4).map(word);
        while let Some(w) = words.next() {
            if w & LOSS_RANGE_BIT == 0 {
                continue;
            }
            let end = words.next().ok_or(WireError::Malformed)?;
            if end & LOSS_RANGE_BIT != 0 {
                return Err(WireError::Malformed);
            }
            // `diff` lies in [-2^30, 2^30), so a non-negative span is also a bounded one.
            if SeqNo::new(end).diff(SeqNo::new(w)) < 0 {
                return Err(WireError::Malformed);
            }
        }
        Ok(LossRanges { raw })
    }

    /// The raw loss list as it appears on the wire.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.raw
    }

    /// True when the list holds no entry.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// Iterates the inclusive ranges `(first, last)`.
    pub fn iter(&self) -> impl Iterator<Item = (SeqNo, SeqNo)> + 'a {
        LossIter { raw: self.raw }
    }
}

/// Top bit of a loss-list word: this word starts a range.
const LOSS_RANGE_BIT: u32 = 0x8000_0000;

/// Iterator over a validated loss list.
struct LossIter<'a> {
    raw: &'a [u8],
}

impl Iterator for LossIter<'_> {
    type Item = (SeqNo, SeqNo);

    fn next(&mut self) -> Option<(SeqNo, SeqNo)> {
        let first = word(self.raw.get(..4)?);
        if first & LOSS_RANGE_BIT == 0 {
            self.raw = self.raw.get(4..)?;
            let s = SeqNo::new(first);
            return Some((s, s));
        }
        let last = word(self.raw.get(4..8)?);
        self.raw = self.raw.get(8..)?;
        Some((SeqNo::new(first), SeqNo::new(last)))
    }
}

/// Reads a big-endian word from the first four bytes of `b` (0 when shorter; callers check).
fn word(b: &[u8]) -> u32 {
    match b.get(..4) {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
        _ => 0,
    }
}

/// Reads the big-endian word at byte offset `at`.
fn word_at(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(word(b))
}

/// Writes `v` big-endian at byte offset `at`; `None` when it does not fit.
fn put_at(buf: &mut [u8], at: usize, v: u32) -> Option<()> {
    buf.get_mut(at..at.checked_add(4)?)?
        .copy_from_slice(&v.to_be_bytes());
    Some(())
}

/// Writes the 16-byte control header.
fn put_header(
    buf: &mut [u8],
    ctype: u16,
    subtype: u16,
    info: u32,
    timestamp: u32,
    dst_socket: u32,
) -> Option<()> {
    let w0 = 0x8000_0000 | (u32::from(ctype & 0x7FFF) << 16) | u32::from(subtype);
    put_at(buf, 0, w0)?;
    put_at(buf, 4, info)?;
    put_at(buf, 8, timestamp)?;
    put_at(buf, 12, dst_socket)
}

/// Writes a NAK control packet with the given inclusive ranges into `buf`, stopping before the
/// buffer would overflow. Returns the length written and how many ranges fit.
///
/// A range with `first == last` is written as a single sequence number, any other as a pair.
/// Emission also stops at a range whose `last` precedes `first` (a caller bug), so the count
/// always describes a valid prefix. A `buf` shorter than the header yields `(0, 0)`.
pub fn emit_nak(
    timestamp: u32,
    dst_socket: u32,
    ranges: impl Iterator<Item = (SeqNo, SeqNo)>,
    buf: &mut [u8],
) -> (usize, usize) {
    if put_header(buf, ctrl_type::NAK, 0, 0, timestamp, dst_socket).is_none() {
        return (0, 0);
    }
    let mut len = HEADER_LEN;
    let mut count = 0;
    for (first, last) in ranges {
        let span = last.diff(first);
        if span < 0 {
            break;
        }
        if span == 0 {
            if put_at(buf, len, first.get()).is_none() {
                break;
            }
            len += 4;
        } else {
            if buf.len() < len + 8 {
                break;
            }
            // Both writes fit: checked just above.
            let _ = put_at(buf, len, first.get() | LOSS_RANGE_BIT);
            let _ = put_at(buf, len + 4, last.get());
            len += 8;
        }
        count += 1;
    }
    (len, count)
}

/// Parses an ACK: `info` is the type-specific field, `cif` the control information field.
///
/// A CIF of 4..16 bytes is a light ACK; 16 or more bytes carry RTT, RTT variance and buffer
/// space (small ACK); from 24 bytes the packet receive rate and link capacity; from 28 the
/// receive rate in bytes. Words beyond 28 bytes are ignored.
fn parse_ack(info: u32, cif: &[u8]) -> Result<Ack, WireError> {
    let ack_seq = SeqNo::new(word_at(cif, 0).ok_or(WireError::Truncated)?);
    let extra = if cif.len() < ACK_SMALL_CIF {
        None
    } else {
        let w = |i: usize| word_at(cif, i * 4).unwrap_or(0);
        Some(AckInfo {
            rtt_us: w(1),
            rtt_var_us: w(2),
            avail_buf_pkts: w(3),
            pkt_recv_rate: w(4),
            link_capacity: w(5),
            recv_rate_bytes: w(6),
        })
    };
    Ok(Ack {
        ack_no: info,
        ack_seq,
        info: extra,
    })
}

/// CIF length of a light ACK.
const ACK_LIGHT_CIF: usize = 4;
/// CIF length of a small ACK.
const ACK_SMALL_CIF: usize = 16;
/// CIF length of a full ACK.
const ACK_FULL_CIF: usize = 28;

pub(super) fn parse(buf: &[u8]) -> Result<Control<'_>, WireError> {
    if buf.len() > MAX_DATAGRAM {
        return Err(WireError::Oversized);
    }
    let w0 = word_at(buf, 0).ok_or(WireError::Truncated)?;
    let info = word_at(buf, 4).ok_or(WireError::Truncated)?;
    let timestamp = word_at(buf, 8).ok_or(WireError::Truncated)?;
    let dst_socket = word_at(buf, 12).ok_or(WireError::Truncated)?;
    let cif = buf.get(HEADER_LEN..).ok_or(WireError::Truncated)?;
    let ctype = ((w0 >> 16) & 0x7FFF) as u16;
    let subtype = (w0 & 0xFFFF) as u16;
    let body = match ctype {
        ctrl_type::HANDSHAKE => ControlBody::Handshake(Handshake::parse(cif)?),
        ctrl_type::KEEPALIVE => ControlBody::KeepAlive,
        ctrl_type::ACK => ControlBody::Ack(parse_ack(info, cif)?),
        ctrl_type::NAK => ControlBody::Nak(LossRanges::new(cif)?),
        ctrl_type::CONGESTION => ControlBody::CongestionWarning,
        ctrl_type::SHUTDOWN => ControlBody::Shutdown,
        ctrl_type::ACKACK => ControlBody::AckAck { ack_no: info },
        ctrl_type::DROPREQ => {
            let first = word_at(cif, 0).ok_or(WireError::Truncated)?;
            let last = word_at(cif, 4).ok_or(WireError::Truncated)?;
            ControlBody::DropReq {
                msg_no: info,
                first: SeqNo::new(first),
                last: SeqNo::new(last),
            }
        }
        ctrl_type::PEERERROR => ControlBody::PeerError { code: info },
        ctrl_type::USER => ControlBody::User {
            subtype,
            info,
            body: cif,
        },
        _ => ControlBody::Unknown { ctype },
    };
    Ok(Control {
        timestamp,
        dst_socket,
        body,
    })
}

pub(super) fn emit(c: &Control<'_>, buf: &mut [u8]) -> Option<usize> {
    let (ts, dst) = (c.timestamp, c.dst_socket);
    // Bodies without a meaningful CIF carry one zero word, as libsrt sends them.
    let zero_cif = |buf: &mut [u8], ctype: u16, info: u32| -> Option<usize> {
        put_header(buf, ctype, 0, info, ts, dst)?;
        put_at(buf, HEADER_LEN, 0)?;
        Some(HEADER_LEN + 4)
    };
    match &c.body {
        ControlBody::Handshake(hs) => {
            put_header(buf, ctrl_type::HANDSHAKE, 0, 0, ts, dst)?;
            let n = hs.emit(buf.get_mut(HEADER_LEN..)?)?;
            Some(HEADER_LEN + n)
        }
        ControlBody::KeepAlive => zero_cif(buf, ctrl_type::KEEPALIVE, 0),
        ControlBody::Ack(ack) => {
            let cif_len = if ack.info.is_some() {
                ACK_FULL_CIF
            } else {
                ACK_LIGHT_CIF
            };
            let len = HEADER_LEN + cif_len;
            let out = buf.get_mut(..len)?;
            put_header(out, ctrl_type::ACK, 0, ack.ack_no, ts, dst)?;
            put_at(out, HEADER_LEN, ack.ack_seq.get())?;
            if let Some(i) = &ack.info {
                let words = [
                    i.rtt_us,
                    i.rtt_var_us,
                    i.avail_buf_pkts,
                    i.pkt_recv_rate,
                    i.link_capacity,
                    i.recv_rate_bytes,
                ];
                for (k, w) in words.iter().enumerate() {
                    put_at(out, HEADER_LEN + 4 + 4 * k, *w)?;
                }
            }
            Some(len)
        }
        ControlBody::Nak(ranges) => {
            let raw = ranges.as_bytes();
            let len = HEADER_LEN.checked_add(raw.len())?;
            let out = buf.get_mut(..len)?;
            put_header(out, ctrl_type::NAK, 0, 0, ts, dst)?;
            out.get_mut(HEADER_LEN..)?.copy_from_slice(raw);
            Some(len)
        }
        ControlBody::CongestionWarning => zero_cif(buf, ctrl_type::CONGESTION, 0),
        ControlBody::Shutdown => zero_cif(buf, ctrl_type::SHUTDOWN, 0),
        ControlBody::AckAck { ack_no } => zero_cif(buf, ctrl_type::ACKACK, *ack_no),
        ControlBody::DropReq {
            msg_no,
            first,
            last,
        } => {
            let out = buf.get_mut(..HEADER_LEN + 8)?;
            put_header(out, ctrl_type::DROPREQ, 0, *msg_no, ts, dst)?;
            put_at(out, HEADER_LEN, first.get())?;
            put_at(out, HEADER_LEN + 4, last.get())?;
            Some(HEADER_LEN + 8)
        }
        ControlBody::PeerError { code } => zero_cif(buf, ctrl_type::PEERERROR, *code),
        ControlBody::User {
            subtype,
            info,
            body,
        } => {
            let len = HEADER_LEN.checked_add(body.len())?;
            let out = buf.get_mut(..len)?;
            put_header(out, ctrl_type::USER, *subtype, *info, ts, dst)?;
            out.get_mut(HEADER_LEN..)?.copy_from_slice(body);
            Some(len)
        }
        ControlBody::Unknown { ctype } => zero_cif(buf, *ctype, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Packet;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn ctrl(buf: &[u8]) -> Control<'_> {
        match Packet::parse(buf).unwrap() {
            Packet::Control(c) => c,
            p => panic!("not control: {p:?}"),
        }
    }

    fn reemit(c: &Control<'_>) -> Vec<u8> {
        let mut out = vec![0u8; 2048];
        let n = c.emit(&mut out).unwrap();
        out.truncate(n);
        out
    }

    #[test]
    fn full_ack_from_libsrt() {
        // Live capture: full ACK #1.
        let b = hex("80020000000000010010fbca384306884d9373d4000186a00000c35000001ffe00000001000003e8000005c9");
        let c = ctrl(&b);
        assert_eq!(c.timestamp, 0x0010_fbca);
        assert_eq!(c.dst_socket, 0x3843_0688);
        let ControlBody::Ack(a) = c.body else {
            panic!()
        };
        assert_eq!(a.ack_no, 1);
        assert_eq!(a.ack_seq, SeqNo::new(0x4d93_73d4));
        let i = a.info.unwrap();
        assert_eq!(
            (i.rtt_us, i.rtt_var_us, i.avail_buf_pkts),
            (100_000, 50_000, 8190)
        );
        assert_eq!(
            (i.pkt_recv_rate, i.link_capacity, i.recv_rate_bytes),
            (1, 1000, 1481)
        );
        assert_eq!(reemit(&c), b);
    }

    #[test]
    fn light_small_and_long_acks() {
        let light = hex("80020000000000000000ff292a3c25e5087dc01e");
        let c = ctrl(&light);
        assert_eq!(
            c.body,
            ControlBody::Ack(Ack {
                ack_no: 0,
                ack_seq: SeqNo::new(0x087d_c01e),
                info: None
            })
        );
        assert_eq!(reemit(&c), light);

        // Small ACK (16-byte CIF): rates absent, read as zero; re-emitted as a full ACK.
        let mut small = hex("80020000000000050000000100000002");
        for w in [7u32, 100, 50, 8000] {
            small.extend_from_slice(&w.to_be_bytes());
        }
        let c = ctrl(&small);
        let ControlBody::Ack(a) = c.body else {
            panic!()
        };
        assert_eq!(a.ack_no, 5);
        assert_eq!(
            a.info,
            Some(AckInfo {
                rtt_us: 100,
                rtt_var_us: 50,
                avail_buf_pkts: 8000,
                ..Default::default()
            })
        );
        let out = reemit(&c);
        assert_eq!(out.len(), HEADER_LEN + ACK_FULL_CIF);
        assert_eq!(ctrl(&out), c);

        // Longer CIF: extra words ignored.
        let mut long = small.clone();
        for w in [1u32, 2, 3, 4, 5] {
            long.extend_from_slice(&w.to_be_bytes());
        }
        let ControlBody::Ack(a) = ctrl(&long).body else {
            panic!()
        };
        assert_eq!(a.info.unwrap().recv_rate_bytes, 3);

        // No CIF at all.
        assert_eq!(Packet::parse(&small[..16]), Err(WireError::Truncated));
    }

    #[test]
    fn nak_singles_and_ranges() {
        let b = hex("8003000000000000000146e92a3c25e5887dc14c087dc154");
        let c = ctrl(&b);
        let ControlBody::Nak(r) = c.body else {
            panic!()
        };
        let v: Vec<_> = r.iter().collect();
        assert_eq!(v, vec![(SeqNo::new(0x087d_c14c), SeqNo::new(0x087d_c154))]);
        assert_eq!(reemit(&c), b);

        let mut buf = [0u8; 64];
        let ranges = [
            (SeqNo::new(5), SeqNo::new(5)),
            (SeqNo::new(SeqNo::MAX - 1), SeqNo::new(3)),
            (SeqNo::new(9), SeqNo::new(9)),
        ];
        let (n, k) = emit_nak(7, 9, ranges.iter().copied(), &mut buf);
        assert_eq!((n, k), (16 + 16, 3));
        let c = ctrl(&buf[..n]);
        let ControlBody::Nak(r) = c.body else {
            panic!()
        };
        assert_eq!(r.iter().collect::<Vec<_>>(), ranges.to_vec());

        // Stops before overflowing: room for the single and half a range.
        let (n, k) = emit_nak(7, 9, ranges.iter().copied(), &mut buf[..16 + 4 + 4]);
        assert_eq!((n, k), (20, 1));
        assert_eq!(
            emit_nak(0, 0, ranges.iter().copied(), &mut buf[..8]),
            (0, 0)
        );
        // A backwards range ends emission.
        let bad = [(SeqNo::new(5), SeqNo::new(4))];
        assert_eq!(emit_nak(0, 0, bad.iter().copied(), &mut buf), (16, 0));
    }

    #[test]
    fn loss_list_validation() {
        let w = |v: &[u32]| v.iter().flat_map(|x| x.to_be_bytes()).collect::<Vec<u8>>();
        assert!(LossRanges::new(&w(&[1, 0x8000_0002, 4, 9])).is_ok());
        assert!(LossRanges::new(&w(&[0x8000_0002, 2])).is_ok());
        // Across the wrap.
        assert!(LossRanges::new(&w(&[0x8000_0000 | SeqNo::MAX, 1])).is_ok());
        assert_eq!(LossRanges::new(&[0, 0, 1]), Err(WireError::Malformed));
        // Range start without end, end with the top bit, backwards, too wide.
        assert_eq!(
            LossRanges::new(&w(&[0x8000_0002])),
            Err(WireError::Malformed)
        );
        assert_eq!(
            LossRanges::new(&w(&[0x8000_0002, 0x8000_0003])),
            Err(WireError::Malformed)
        );
        assert_eq!(
            LossRanges::new(&w(&[0x8000_0005, 4])),
            Err(WireError::Malformed)
        );
        assert_eq!(
            LossRanges::new(&w(&[0x8000_0000, 0x4000_0000])),
            Err(WireError::Malformed)
        );
        assert!(LossRanges::new(&w(&[0x8000_0000, 0x3FFF_FFFF])).is_ok());
    }

    #[test]
    fn small_bodies_round_trip() {
        for (hexs, body) in [
            (
                "800100000000000000314c8a2824e01400000000",
                ControlBody::KeepAlive,
            ),
            (
                "800500000000000000531d4b2824e01400000000",
                ControlBody::Shutdown,
            ),
            (
                "80060000000000010010fe4a2824e01400000000",
                ControlBody::AckAck { ack_no: 1 },
            ),
        ] {
            let b = hex(hexs);
            let c = ctrl(&b);
            assert_eq!(c.body, body);
            assert_eq!(reemit(&c), b);
        }
        let others = [
            ControlBody::CongestionWarning,
            ControlBody::DropReq {
                msg_no: 77,
                first: SeqNo::new(10),
                last: SeqNo::new(12),
            },
            ControlBody::PeerError { code: 4000 },
            ControlBody::User {
                subtype: 3,
                info: 0xABCD,
                body: &[1, 2, 3, 4, 5],
            },
            ControlBody::Unknown { ctype: 0x1234 },
        ];
        for body in others {
            let c = Control {
                timestamp: 1,
                dst_socket: 2,
                body,
            };
            assert_eq!(ctrl(&reemit(&c)), c);
        }
        // Drop request needs its two sequence numbers.
        assert_eq!(
            Packet::parse(&hex("80070000000000010000000000000002000000aa")),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn emit_into_short_buffers_fails_cleanly() {
        let c = Control {
            timestamp: 1,
            dst_socket: 2,
            body: ControlBody::Ack(Ack {
                ack_no: 3,
                ack_seq: SeqNo::new(4),
                info: Some(AckInfo::default()),
            }),
        };
        let mut buf = [0u8; 64];
        for n in 0..HEADER_LEN + ACK_FULL_CIF {
            assert_eq!(c.emit(&mut buf[..n]), None);
        }
        assert_eq!(c.emit(&mut buf), Some(HEADER_LEN + ACK_FULL_CIF));
    }

    fn seq() -> impl Strategy<Value = SeqNo> {
        (0..=SeqNo::MAX).prop_map(SeqNo::new)
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600),
                                    ctl in any::<bool>()) {
            let mut bytes = bytes;
            if ctl {
                if let Some(b) = bytes.first_mut() { *b |= 0x80; }
            }
            if let Ok(Packet::Control(c)) = Packet::parse(&bytes) {
                let mut out = vec![0u8; 1024];
                if let Some(n) = c.emit(&mut out) {
                    let again = Packet::parse(&out[..n]);
                    prop_assert!(again.is_ok());
                }
            }
        }

        #[test]
        fn ack_round_trips(ack_no in any::<u32>(), s in seq(), full in any::<bool>(),
                           w in proptest::array::uniform6(any::<u32>()), ts in any::<u32>(),
                           dst in any::<u32>()) {
            let info = full.then_some(AckInfo {
                rtt_us: w[0], rtt_var_us: w[1], avail_buf_pkts: w[2],
                pkt_recv_rate: w[3], link_capacity: w[4], recv_rate_bytes: w[5],
            });
            let c = Control { timestamp: ts, dst_socket: dst,
                              body: ControlBody::Ack(Ack { ack_no, ack_seq: s, info }) };
            let mut out = [0u8; 64];
            let n = c.emit(&mut out).unwrap();
            prop_assert_eq!(n, HEADER_LEN + if full { ACK_FULL_CIF } else { ACK_LIGHT_CIF });
            prop_assert_eq!(ctrl(&out[..n]), c);
        }

        #[test]
        fn nak_ranges_round_trip(starts in proptest::collection::vec((seq(), 0u32..1000), 0..40),
                                 cap in 16usize..400) {
            let ranges: Vec<_> = starts.iter().map(|&(s, len)| (s, s.add(len))).collect();
            let mut buf = vec![0u8; cap];
            let (n, k) = emit_nak(1, 2, ranges.iter().copied(), &mut buf);
            prop_assert!(n <= cap);
            let c = ctrl(&buf[..n]);
            let ControlBody::Nak(r) = c.body else { panic!() };
            prop_assert_eq!(r.iter().collect::<Vec<_>>(), ranges[..k].to_vec());
            if k < ranges.len() {
                let need = if ranges[k].0 == ranges[k].1 { 4 } else { 8 };
                prop_assert!(n + need > cap);
            }
        }
    }
}
