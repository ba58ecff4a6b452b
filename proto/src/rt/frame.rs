//! Ethernet, IPv4 and UDP headers of a real-time datagram, for a datapath that hands whole
//! frames to the network device itself (AF_XDP) instead of the kernel's UDP stack: checked
//! parsing of a received frame (bytes from the network: nothing is trusted) and emission of
//! a frame's headers, with the checksums the kernel would have computed.
//!
//! Only what such a datapath needs: untagged Ethernet II, IPv4 without options, not
//! fragmented, UDP. Anything else is refused with its reason, for the caller to count.

use std::net::{Ipv4Addr, SocketAddrV4};

/// Ethernet header bytes (no VLAN tag).
pub const ETH_LEN: usize = 14;
/// IPv4 header bytes (no options).
pub const IP_LEN: usize = 20;
/// UDP header bytes.
pub const UDP_LEN: usize = 8;
/// Bytes before the UDP payload.
pub const HEADERS_LEN: usize = ETH_LEN + IP_LEN + UDP_LEN;
/// Time to live of frames sent.
const TTL: u8 = 64;

/// Why a frame is not one this datapath takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Shorter than its headers, or than its IP or UDP length says.
    Short,
    /// Not IPv4 without options carrying UDP.
    NotUdp4,
    /// An IP fragment.
    Fragment,
    /// IP and UDP lengths that do not agree.
    Length,
    /// The IP header's checksum is wrong.
    IpChecksum,
    /// The UDP checksum is wrong.
    UdpChecksum,
}

/// A frame's addresses and where its payload lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The sender's and the receiver's hardware addresses.
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    /// The sender's and the receiver's IP address and port.
    pub src: SocketAddrV4,
    pub dst: SocketAddrV4,
    /// The IP TOS byte.
    pub tos: u8,
    /// Payload bytes from [`HEADERS_LEN`].
    pub payload_len: usize,
    /// The UDP checksum was not filled in: 0 (none sent) or the partial sum a sender whose
    /// device computes checksums leaves (a virtual device never does): the payload is not
    /// checked.
    pub unchecked: bool,
}

/// One's complement sum of 16-bit big-endian words (an odd last byte padded with a zero),
/// folded to 16 bits.
///
/// Four bytes at a time in the machine's byte order, folded and turned big-endian at the
/// end (RFC 1071 §2: the one's complement sum does not depend on byte order, and 2^16 is 1
/// modulo 2^16 − 1): half the time of a loop over big-endian 16-bit words. The result is
/// folded to 16 bits, which changes no sum it is added to modulo 2^16 − 1.
fn sum(bytes: &[u8]) -> u32 {
    let mut words = bytes.chunks_exact(4);
    let mut s: u64 = 0;
    for w in &mut words {
        s += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
    }
    // The rest (0-3 bytes) starts at a multiple of 4: padded with zeros it keeps each
    // byte's place in its 16-bit word.
    let mut last = [0u8; 4];
    let rest = words.remainder();
    last[..rest.len()].copy_from_slice(rest);
    s += u64::from(u32::from_ne_bytes(last));
    u32::from(u16::from_be(fold(s)))
}

/// Folds carries: the one's complement sum.
fn fold(mut s: u64) -> u16 {
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

/// The pseudo-header's sum for UDP of `udp_len` bytes.
fn pseudo(src: Ipv4Addr, dst: Ipv4Addr, udp_len: u16) -> u64 {
    u64::from(sum(&src.octets())) + u64::from(sum(&dst.octets())) + 17 + u64::from(udp_len)
}

/// The UDP checksum of a datagram whose header (checksum field zero) is `head` and whose
/// payload is `pieces`, in order.
fn udp_checksum(src: Ipv4Addr, dst: Ipv4Addr, head: &[u8], pieces: &[&[u8]]) -> u16 {
    let len = head.len() + pieces.iter().map(|p| p.len()).sum::<usize>();
    let mut s = pseudo(src, dst, len as u16);
    let mut odd: Option<u8> = None;
    for p in std::iter::once(head).chain(pieces.iter().copied()) {
        let mut p: &[u8] = p;
        if let (Some(hi), Some((&lo, rest))) = (odd, p.split_first()) {
            s += u64::from(u16::from_be_bytes([hi, lo]));
            odd = None;
            p = rest;
        }
        let even = p.len() & !1;
        s += u64::from(sum(&p[..even]));
        if even < p.len() {
            odd = Some(p[even]);
        }
    }
    if let Some(hi) = odd {
        s += u64::from(hi) << 8;
    }
    match !fold(s) {
        0 => 0xffff,
        c => c,
    }
}

impl Frame {
    /// Parses a received frame. The payload is `frame[HEADERS_LEN..][..payload_len]`
    /// (trailing bytes past the IP length, Ethernet padding, are not part of it).
    pub fn parse(frame: &[u8]) -> Result<Frame, FrameError> {
        let h = frame.get(..HEADERS_LEN).ok_or(FrameError::Short)?;
        if h[12..14] != [0x08, 0x00] || h[14] != 0x45 || h[23] != 17 {
            return Err(FrameError::NotUdp4);
        }
        if u16::from_be_bytes([h[20], h[21]]) & 0x3fff != 0 {
            return Err(FrameError::Fragment);
        }
        let ip = &h[ETH_LEN..ETH_LEN + IP_LEN];
        if fold(u64::from(sum(ip))) != 0xffff {
            return Err(FrameError::IpChecksum);
        }
        let ip_len = usize::from(u16::from_be_bytes([h[16], h[17]]));
        let udp_len = usize::from(u16::from_be_bytes([h[38], h[39]]));
        if ip_len != IP_LEN + udp_len || udp_len < UDP_LEN {
            return Err(FrameError::Length);
        }
        let udp = frame
            .get(ETH_LEN + IP_LEN..ETH_LEN + ip_len)
            .ok_or(FrameError::Short)?;
        let src_ip = Ipv4Addr::new(h[26], h[27], h[28], h[29]);
        let dst_ip = Ipv4Addr::new(h[30], h[31], h[32], h[33]);
        let check = u16::from_be_bytes([h[40], h[41]]);
        // A sender that leaves the checksum to its device writes the pseudo-header's sum.
        let partial = fold(pseudo(src_ip, dst_ip, udp_len as u16)) == check;
        let unchecked = check == 0 || partial;
        if !unchecked {
            // The sum over a datagram with its checksum in place is all ones.
            let s = pseudo(src_ip, dst_ip, udp_len as u16) + u64::from(sum(udp));
            if fold(s) != 0xffff {
                return Err(FrameError::UdpChecksum);
            }
        }
        let mac = |i: usize| {
            let mut m = [0u8; 6];
            m.copy_from_slice(&h[i..i + 6]);
            m
        };
        Ok(Frame {
            dst_mac: mac(0),
            src_mac: mac(6),
            src: SocketAddrV4::new(src_ip, u16::from_be_bytes([h[34], h[35]])),
            dst: SocketAddrV4::new(dst_ip, u16::from_be_bytes([h[36], h[37]])),
            tos: h[15],
            payload_len: udp_len - UDP_LEN,
            unchecked,
        })
    }

    /// Writes the headers of a frame carrying `pieces` (the payload, in order) into
    /// `out[..HEADERS_LEN]`, checksums included. Returns the frame's length, or `None` if
    /// `out` is shorter than the headers or the payload does not fit a UDP datagram.
    pub fn emit(&self, out: &mut [u8], pieces: &[&[u8]]) -> Option<usize> {
        let payload: usize = pieces.iter().map(|p| p.len()).sum();
        let udp_len = u16::try_from(UDP_LEN + payload).ok()?;
        let ip_len = u16::try_from(IP_LEN + UDP_LEN + payload).ok()?;
        let h = out.get_mut(..HEADERS_LEN)?;
        h[0..6].copy_from_slice(&self.dst_mac);
        h[6..12].copy_from_slice(&self.src_mac);
        h[12..14].copy_from_slice(&[0x08, 0x00]);
        h[14] = 0x45;
        h[15] = self.tos;
        h[16..18].copy_from_slice(&ip_len.to_be_bytes());
        // Identification 0, don't fragment.
        h[18..22].copy_from_slice(&[0, 0, 0x40, 0]);
        h[22] = TTL;
        h[23] = 17;
        h[24..26].copy_from_slice(&[0, 0]);
        h[26..30].copy_from_slice(&self.src.ip().octets());
        h[30..34].copy_from_slice(&self.dst.ip().octets());
        let ip_sum = !fold(u64::from(sum(&h[ETH_LEN..ETH_LEN + IP_LEN])));
        h[24..26].copy_from_slice(&ip_sum.to_be_bytes());
        h[34..36].copy_from_slice(&self.src.port().to_be_bytes());
        h[36..38].copy_from_slice(&self.dst.port().to_be_bytes());
        h[38..40].copy_from_slice(&udp_len.to_be_bytes());
        h[40..42].copy_from_slice(&[0, 0]);
        let c = udp_checksum(
            *self.src.ip(),
            *self.dst.ip(),
            &h[ETH_LEN + IP_LEN..],
            pieces,
        );
        h[40..42].copy_from_slice(&c.to_be_bytes());
        Some(HEADERS_LEN + payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame() -> Frame {
        Frame {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: "10.0.0.1:4000".parse().unwrap(),
            dst: "10.0.0.2:5000".parse().unwrap(),
            tos: 0xb8,
            payload_len: 0,
            unchecked: false,
        }
    }

    #[test]
    fn a_frame_emitted_parses_back_for_every_payload_shape() {
        for len in [0usize, 1, 2, 3, 64, 1001, 1458] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            for cut in [0, len / 3, len] {
                let (a, b) = payload.split_at(cut);
                let mut out = vec![0u8; HEADERS_LEN + len];
                let n = frame().emit(&mut out, &[a, b]).unwrap();
                assert_eq!(n, HEADERS_LEN + len);
                out[HEADERS_LEN..].copy_from_slice(&payload);
                let f = Frame::parse(&out).unwrap();
                assert_eq!(
                    f,
                    Frame {
                        payload_len: len,
                        ..frame()
                    }
                );
                // Ethernet padding after the IP length is not payload.
                out.extend_from_slice(&[0; 6]);
                assert_eq!(Frame::parse(&out).unwrap().payload_len, len);
            }
        }
    }

    #[test]
    fn checksums_match_the_kernel_s() {
        // 10.98.0.1:40000 -> 10.98.0.2:9001, TOS 0, payload "hello": both checksums
        // summed by hand, as RFC 791 and RFC 768 define them.
        let mut f = frame();
        f.src = "10.98.0.1:40000".parse().unwrap();
        f.dst = "10.98.0.2:9001".parse().unwrap();
        f.tos = 0;
        let mut out = [0u8; HEADERS_LEN + 5];
        f.emit(&mut out, &[b"hello"]).unwrap();
        out[HEADERS_LEN..].copy_from_slice(b"hello");
        // IP checksum by hand: 4500 0021 0000 4000 4011 0000 0a62 0001 0a62 0002.
        let ip: u32 = 0x4500 + 0x0021 + 0x4000 + 0x4011 + 0x0a62 + 0x0001 + 0x0a62 + 0x0002;
        let ip = !(((ip & 0xffff) + (ip >> 16)) as u16);
        assert_eq!(u16::from_be_bytes([out[24], out[25]]), ip);
        // UDP: pseudo header, header, payload ("hello" padded with a zero byte).
        let u: u32 = 0x0a62
            + 0x0001
            + 0x0a62
            + 0x0002
            + 17
            + 13
            + 40000
            + 9001
            + 13
            + 0x6865
            + 0x6c6c
            + 0x6f00;
        let u = !(((u & 0xffff) + (u >> 16)) as u16);
        assert_eq!(u16::from_be_bytes([out[40], out[41]]), u);
    }

    #[test]
    fn damaged_or_foreign_frames_are_refused_with_their_reason() {
        let mut good = vec![0u8; HEADERS_LEN + 10];
        frame().emit(&mut good, &[&[9u8; 10]]).unwrap();
        good[HEADERS_LEN..].copy_from_slice(&[9u8; 10]);
        assert!(Frame::parse(&good).is_ok());
        let bad = |i: usize, v: u8| {
            let mut b = good.clone();
            b[i] = v;
            Frame::parse(&b)
        };
        assert_eq!(
            Frame::parse(&good[..HEADERS_LEN - 1]),
            Err(FrameError::Short)
        );
        assert_eq!(
            Frame::parse(&good[..HEADERS_LEN + 9]),
            Err(FrameError::Short)
        );
        assert_eq!(bad(12, 0x86), Err(FrameError::NotUdp4));
        assert_eq!(bad(14, 0x46), Err(FrameError::NotUdp4));
        assert_eq!(bad(23, 6), Err(FrameError::NotUdp4));
        assert_eq!(bad(20, 0x20), Err(FrameError::Fragment));
        assert_eq!(bad(22, 1), Err(FrameError::IpChecksum));
        assert_eq!(bad(39, 7), Err(FrameError::Length));
        assert_eq!(bad(HEADERS_LEN + 3, 8), Err(FrameError::UdpChecksum));
        // No checksum, and the partial sum of an offloading sender: taken, unchecked.
        let mut none = good.clone();
        none[40..42].copy_from_slice(&[0, 0]);
        none[HEADERS_LEN] = 1;
        assert!(Frame::parse(&none).unwrap().unchecked);
        let f = frame();
        let p = fold(pseudo(*f.src.ip(), *f.dst.ip(), 18));
        let mut partial = good.clone();
        partial[40..42].copy_from_slice(&p.to_be_bytes());
        assert!(Frame::parse(&partial).unwrap().unchecked);
    }

    /// RFC 1071's sum as written: big-endian 16-bit words, an odd last byte the high half
    /// of a word, carries added back.
    fn reference_sum(bytes: &[u8]) -> u16 {
        let mut s: u64 = 0;
        for (i, b) in bytes.iter().enumerate() {
            s += u64::from(*b) << if i % 2 == 0 { 8 } else { 0 };
        }
        fold(s)
    }

    proptest::proptest! {
        #[test]
        fn the_sum_is_rfc_1071_s(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..5000)) {
            // Folded, both stand for the same value modulo 2^16 - 1; they differ only
            // where one writes 0 and the other all ones, which only all-zero bytes give.
            let (ours, want) = (sum(&bytes) as u16, reference_sum(&bytes));
            proptest::prop_assert!(
                ours == want || (bytes.iter().all(|b| *b == 0) && ours.max(want) == 0xffff && ours.min(want) == 0),
                "{ours:#x} against {want:#x}"
            );
        }
    }
}
