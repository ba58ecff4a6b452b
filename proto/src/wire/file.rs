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
//! Parsing never panics and takes bytes as they come: [`Verdict::parse`] says how many more
//! it needs.

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
