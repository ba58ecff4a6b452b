//! slipstream's file transfer framing inside an SRT byte stream, used when both ends agreed
//! on [`SlipstreamExt::FILE_VERDICT`](super::SlipstreamExt::FILE_VERDICT):
//!
//! - the sender's stream starts with a [`FileHeader`]: `b"SLPHEAD1"` and the content length
//!   (u64 big-endian), so that the receiver knows where the content ends without waiting
//!   for a SHUTDOWN that may be lost; the content and the 32-byte digest trailer follow;
//! - the receiver answers, in the other direction of the same connection, with a
//!   [`Verdict`]: `b"SLPVRDT1"`, a status byte (0: verified and committed under its final
//!   name; 1: failed), the reason's length (u16 big-endian, at most [`MAX_REASON`]) and the
//!   reason (UTF-8, shown to the sender's user).
//!
//! - before anything else, the receiver sends an [`Offer`]: `b"SLPOFFR1"`, the highest rate
//!   it lets the sender send at (bytes per second, u64 big-endian; 0 for no cap), the log2
//!   of its chunk size (u8), and the XXH3-128 digest of each whole chunk of the part of the
//!   file it already holds (a count, u32 big-endian, at most [`MAX_OFFER_CHUNKS`], then the
//!   digests), from an earlier, interrupted transfer;
//! - the sender answers with a [`Start`] after its header: `b"SLPSTRT1"` and the offset it
//!   sends from (u64 big-endian): the end of the longest run of offered chunks that match its
//!   file, or 0. The content after it is the file from that offset on; the trailer's length
//!   and digest still cover the whole file.
//!
//! A receiver that fails before the transfer starts (its file exists, say) sends its
//! [`Verdict`] in place of the offer; the magic tells them apart.
//!
//! Parsing never panics and takes bytes as they come: [`Verdict::parse`] and
//! [`Offer::parse`] say how many more they need.

/// First bytes of the header.
pub const FILE_HEADER_MAGIC: &[u8; 8] = b"SLPHEAD1";
/// Header length: magic and content length.
pub const FILE_HEADER_LEN: usize = 16;
/// First bytes of the verdict.
pub const VERDICT_MAGIC: &[u8; 8] = b"SLPVRDT1";
/// Verdict length before its reason: magic, status, reason length.
pub const VERDICT_HEAD_LEN: usize = 11;
/// Longest reason a verdict carries (longer ones are cut, on a character boundary).
pub const MAX_REASON: usize = 1024;

/// First bytes of the receiver's offer.
pub const OFFER_MAGIC: &[u8; 8] = b"SLPOFFR1";
/// Offer length before its digests: magic, rate, chunk size, count.
pub const OFFER_HEAD_LEN: usize = 21;
/// Most chunk digests an offer carries (16 MiB of them; 8 TiB of file in 8 MiB chunks).
pub const MAX_OFFER_CHUNKS: u32 = 1 << 20;
/// Smallest and largest chunk sizes an offer may give, as log2 (64 KiB to 1 TiB).
pub const CHUNK_LOG2_RANGE: std::ops::RangeInclusive<u8> = 16..=40;
/// First bytes of the sender's start.
pub const START_MAGIC: &[u8; 8] = b"SLPSTRT1";
/// Start length: magic and offset.
pub const START_LEN: usize = 16;

/// What the receiver holds and allows, sent before the transfer starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// Highest sending rate the receiver allows, bytes per second (0: no cap).
    pub max_rate: u64,
    /// log2 of the chunk size the digests cover.
    pub chunk_log2: u8,
    /// XXH3-128 (big-endian) of each whole chunk held, from the file's start.
    pub chunks: Vec<[u8; 16]>,
}

/// What [`Offer::parse`] found in the bytes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OfferParse {
    /// A whole offer, and the bytes it took.
    Done(Offer, usize),
    /// At least this many bytes in all are needed.
    Need(usize),
    /// Not an offer.
    Malformed(&'static str),
}

impl Offer {
    /// The chunk size in bytes.
    pub fn chunk_len(&self) -> u64 {
        1u64 << self.chunk_log2
    }

    /// The offer's bytes (digests beyond [`MAX_OFFER_CHUNKS`] are left out).
    pub fn encode(&self) -> Vec<u8> {
        let n = self.chunks.len().min(MAX_OFFER_CHUNKS as usize);
        let mut b = Vec::with_capacity(OFFER_HEAD_LEN + 16 * n);
        b.extend_from_slice(OFFER_MAGIC);
        b.extend_from_slice(&self.max_rate.to_be_bytes());
        b.push(self.chunk_log2);
        b.extend_from_slice(&(n as u32).to_be_bytes());
        for d in &self.chunks[..n] {
            b.extend_from_slice(d);
        }
        b
    }

    /// Parses an offer from the bytes received so far.
    pub fn parse(b: &[u8]) -> OfferParse {
        let magic = &b[..b.len().min(8)];
        if magic != &OFFER_MAGIC[..magic.len()] {
            return OfferParse::Malformed("not an offer (wrong magic)");
        }
        if b.len() < OFFER_HEAD_LEN {
            return OfferParse::Need(OFFER_HEAD_LEN);
        }
        let max_rate = u64::from_be_bytes(b[8..16].try_into().unwrap_or_default());
        let chunk_log2 = b[16];
        let n = u32::from_be_bytes(b[17..21].try_into().unwrap_or_default());
        if !CHUNK_LOG2_RANGE.contains(&chunk_log2) {
            return OfferParse::Malformed("offer chunk size out of range");
        }
        if n > MAX_OFFER_CHUNKS {
            return OfferParse::Malformed("offer holds too many chunks");
        }
        let total = OFFER_HEAD_LEN + 16 * n as usize;
        let Some(digests) = b.get(OFFER_HEAD_LEN..total) else {
            return OfferParse::Need(total);
        };
        let chunks = digests
            .chunks_exact(16)
            .map(|d| d.try_into().unwrap_or_default())
            .collect();
        OfferParse::Done(
            Offer {
                max_rate,
                chunk_log2,
                chunks,
            },
            total,
        )
    }
}

/// Where the sender starts: the content that follows is the file from `offset` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Start {
    /// First content byte sent.
    pub offset: u64,
}

impl Start {
    /// The start's bytes.
    pub fn encode(&self) -> [u8; START_LEN] {
        let mut b = [0u8; START_LEN];
        b[..8].copy_from_slice(START_MAGIC);
        b[8..].copy_from_slice(&self.offset.to_be_bytes());
        b
    }

    /// Parses a start; `None` if the magic is wrong.
    pub fn parse(b: &[u8; START_LEN]) -> Option<Self> {
        let (magic, off) = b.split_at(8);
        if magic != START_MAGIC {
            return None;
        }
        Some(Start {
            offset: u64::from_be_bytes(off.try_into().ok()?),
        })
    }
}

/// The start of a file's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// Content bytes that follow (the trailer after them).
    pub len: u64,
}

impl FileHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; FILE_HEADER_LEN] {
        let mut b = [0u8; FILE_HEADER_LEN];
        b[..8].copy_from_slice(FILE_HEADER_MAGIC);
        b[8..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Parses a header; `None` if the magic is wrong.
    pub fn parse(b: &[u8; FILE_HEADER_LEN]) -> Option<Self> {
        let (magic, len) = b.split_at(8);
        if magic != FILE_HEADER_MAGIC {
            return None;
        }
        let len = u64::from_be_bytes(len.try_into().ok()?);
        Some(FileHeader { len })
    }
}

/// The receiver's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Length and digest verified, the file synced and renamed to its final name.
    Committed,
    /// The transfer failed at the receiver, and why.
    Failed(String),
}

/// What [`Verdict::parse`] found in the bytes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerdictParse {
    /// A whole verdict, and the bytes it took.
    Done(Verdict, usize),
    /// At least this many bytes in all are needed.
    Need(usize),
    /// Not a verdict.
    Malformed(&'static str),
}

impl Verdict {
    /// The verdict's bytes (a reason longer than [`MAX_REASON`] is cut).
    pub fn encode(&self) -> Vec<u8> {
        let (status, reason) = match self {
            Verdict::Committed => (0u8, ""),
            Verdict::Failed(r) => (1u8, r.as_str()),
        };
        let mut end = reason.len().min(MAX_REASON);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        let reason = &reason.as_bytes()[..end];
        let mut b = Vec::with_capacity(VERDICT_HEAD_LEN + reason.len());
        b.extend_from_slice(VERDICT_MAGIC);
        b.push(status);
        b.extend_from_slice(&(reason.len() as u16).to_be_bytes());
        b.extend_from_slice(reason);
        b
    }

    /// Parses a verdict from the bytes received so far.
    pub fn parse(b: &[u8]) -> VerdictParse {
        let magic = &b[..b.len().min(8)];
        if magic != &VERDICT_MAGIC[..magic.len()] {
            return VerdictParse::Malformed("not a verdict (wrong magic)");
        }
        if b.len() < VERDICT_HEAD_LEN {
            return VerdictParse::Need(VERDICT_HEAD_LEN);
        }
        let status = b[8];
        let len = usize::from(u16::from_be_bytes([b[9], b[10]]));
        if len > MAX_REASON {
            return VerdictParse::Malformed("verdict reason too long");
        }
        let total = VERDICT_HEAD_LEN + len;
        let Some(reason) = b.get(VERDICT_HEAD_LEN..total) else {
            return VerdictParse::Need(total);
        };
        let reason = String::from_utf8_lossy(reason);
        let reason: String = reason
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        match status {
            0 => VerdictParse::Done(Verdict::Committed, total),
            1 => VerdictParse::Done(Verdict::Failed(reason), total),
            _ => VerdictParse::Malformed("unknown verdict status"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_is_agreed_only_with_the_digest_and_by_both() {
        use crate::wire::SlipstreamExt as X;
        assert_eq!(X::agreed(X::FILE_FLAGS, X::FILE_FLAGS), X::FILE_FLAGS);
        // An earlier slipstream offers the digest only: no header, no verdict.
        assert_eq!(X::agreed(X::FILE_FLAGS, X::FILE_DIGEST), X::FILE_DIGEST);
        assert_eq!(X::agreed(X::FILE_FLAGS, X::FILE_VERDICT), 0);
        // The retired BLAKE3 bit and unknown bits agree on nothing.
        assert_eq!(X::agreed(X::FILE_FLAGS, 0x1 | 0x100), 0);
    }

    #[test]
    fn header_round_trip_and_wrong_magic() {
        let h = FileHeader { len: 1 << 40 };
        assert_eq!(FileHeader::parse(&h.encode()), Some(h));
        let mut b = h.encode();
        b[0] = b'X';
        assert_eq!(FileHeader::parse(&b), None);
    }

    #[test]
    fn verdicts_parse_from_any_prefix() {
        for v in [
            Verdict::Committed,
            Verdict::Failed("No space left on device".into()),
        ] {
            let b = v.encode();
            for n in 0..b.len() {
                assert!(
                    matches!(Verdict::parse(&b[..n]), VerdictParse::Need(k) if k > n),
                    "{n}"
                );
            }
            let mut more = b.clone();
            more.extend_from_slice(b"junk");
            assert_eq!(Verdict::parse(&more), VerdictParse::Done(v, b.len()));
        }
    }

    #[test]
    fn offers_parse_from_any_prefix_and_bound_their_size() {
        let o = Offer {
            max_rate: 37_500_000,
            chunk_log2: 23,
            chunks: vec![[7u8; 16], [9u8; 16]],
        };
        let b = o.encode();
        assert_eq!(b.len(), OFFER_HEAD_LEN + 32);
        for n in 0..b.len() {
            assert!(
                matches!(Offer::parse(&b[..n]), OfferParse::Need(k) if k > n),
                "{n}"
            );
        }
        let mut more = b.clone();
        more.extend_from_slice(b"SLPSTRT1");
        assert_eq!(Offer::parse(&more), OfferParse::Done(o, b.len()));
        // A count beyond the bound, a chunk size out of range, another message.
        let mut big = b.clone();
        big[17..21].copy_from_slice(&(MAX_OFFER_CHUNKS + 1).to_be_bytes());
        assert!(matches!(Offer::parse(&big), OfferParse::Malformed(_)));
        let mut odd = b.clone();
        odd[16] = 3;
        assert!(matches!(Offer::parse(&odd), OfferParse::Malformed(_)));
        let v = Verdict::Failed("exists".into()).encode();
        assert!(matches!(Offer::parse(&v), OfferParse::Malformed(_)));
        assert!(matches!(Verdict::parse(&b), VerdictParse::Malformed(_)));
    }

    #[test]
    fn start_round_trip_and_wrong_magic() {
        let s = Start { offset: 8 << 20 };
        assert_eq!(Start::parse(&s.encode()), Some(s));
        let mut b = s.encode();
        b[7] = b'2';
        assert_eq!(Start::parse(&b), None);
    }

    #[test]
    fn long_and_hostile_reasons_are_bounded() {
        let long = "é".repeat(MAX_REASON);
        let b = Verdict::Failed(long).encode();
        assert!(b.len() <= VERDICT_HEAD_LEN + MAX_REASON);
        assert!(matches!(
            Verdict::parse(&b),
            VerdictParse::Done(Verdict::Failed(r), _) if r.chars().all(|c| c == 'é')
        ));
        let mut b = Verdict::Failed("x".into()).encode();
        b[9..11].copy_from_slice(&u16::MAX.to_be_bytes());
        assert!(matches!(Verdict::parse(&b), VerdictParse::Malformed(_)));
        let mut b = Verdict::Failed("a\u{1b}[2Jb".into()).encode();
        assert_eq!(
            Verdict::parse(&b),
            VerdictParse::Done(Verdict::Failed("a [2Jb".into()), b.len())
        );
        b[8] = 7;
        assert!(matches!(Verdict::parse(&b), VerdictParse::Malformed(_)));
        assert!(matches!(
            Verdict::parse(b"SLPX"),
            VerdictParse::Malformed(_)
        ));
    }
}
