//! slipstream's framing for a directory tree sent over one stream-mode connection, used
//! when both ends agreed on [`SlipstreamExt::FILE_VERDICT`](super::SlipstreamExt::FILE_VERDICT)
//! and the sender sends a directory. After the receiver's [`Offer`](super::file::Offer)
//! (whose chunks are for a single file and do not apply here):
//!
//! 1. the sender sends a tree header (`b"SLPTREE1"`, the manifest's length, u64
//!    big-endian, at most [`MAX_MANIFEST`]) and the manifest: one [`Entry`] after another,
//!    each `kind` (u8: 0 directory, 1 file), the path's length (u16) and the path (bytes,
//!    components joined by `/`, relative, checked by [`check_path`]), `mode` (u32, the
//!    permission bits), the modification time (i64 seconds, u32 nanoseconds) and, for a
//!    file, its size (u64); directories come before what they hold;
//! 2. the receiver answers with a [`Plan`]: `b"SLPPLAN1"`, the number of files (u32) and
//!    the plan's length (u32, at most [`MAX_PLAN`]), then per file in manifest order what
//!    it holds: nothing (0); a part file from an interrupted transfer (1: the count, u32,
//!    and the XXH3-128 digests of its whole chunks, the chunk size being the offer's); or
//!    the file itself (2: its length, u64, and its XXH3-128 digest) — or its
//!    [`Verdict`](super::file::Verdict) in place of the plan if it takes nothing;
//! 3. the sender sends each file it does not skip (a file the receiver holds whole and
//!    identical is skipped), in manifest order: a [`FileStart`] (`b"SLPFILE1"`, the file's
//!    index among the manifest's files, u32, and the offset it sends from, u64), the bytes
//!    from there to the size the manifest gave, and the XXH3-128 of the whole file (16
//!    bytes); then `b"SLPTEND1"` and the number of files sent (u64);
//! 4. the receiver answers with its verdict on the whole tree.
//!
//! Parsing never panics and bounds what it allocates by what it was given.

use super::file::MAX_OFFER_CHUNKS;

/// First bytes of the tree header.
pub const TREE_MAGIC: &[u8; 8] = b"SLPTREE1";
/// Tree header length: magic and manifest length (the same as a file header's).
pub const TREE_HEADER_LEN: usize = 16;
/// Longest manifest accepted (about three million entries of average length).
pub const MAX_MANIFEST: u64 = 256 << 20;
/// Longest path in a manifest, bytes.
pub const MAX_PATH: usize = 4096;
/// Longest path component, bytes.
pub const MAX_NAME: usize = 255;
/// First bytes of the plan.
pub const PLAN_MAGIC: &[u8; 8] = b"SLPPLAN1";
/// Plan length before its body: magic, file count, body length.
pub const PLAN_HEAD_LEN: usize = 16;
/// Longest plan body accepted: as long as the longest manifest, whose entries (at least 28
/// bytes a file) are longer than a plan's (at most 25 but for a part's digests).
pub const MAX_PLAN: u32 = MAX_MANIFEST as u32;
/// First bytes of a file's start.
pub const FILE_START_MAGIC: &[u8; 8] = b"SLPFILE1";
/// File start length: magic, index, offset.
pub const FILE_START_LEN: usize = 20;
/// First bytes of the tree's end.
pub const TREE_END_MAGIC: &[u8; 8] = b"SLPTEND1";
/// Tree end length: magic and files sent.
pub const TREE_END_LEN: usize = 16;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory (created even when empty).
    Dir,
    /// A regular file of this many bytes.
    File(u64),
}

/// One entry of the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Directory or file.
    pub kind: Kind,
    /// Relative path, components joined by `/` ([`check_path`]).
    pub path: Vec<u8>,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_s: i64,
    /// Modification time, nanoseconds.
    pub mtime_ns: u32,
}

/// Why a path is refused: it is empty, absolute, too long, or has an empty, `.` or `..`
/// component or a NUL byte. A receiver that keeps to such checked paths, and follows no
/// symbolic link it finds on the way, writes nothing outside its directory.
pub fn check_path(p: &[u8]) -> Result<(), &'static str> {
    if p.is_empty() {
        return Err("an empty path");
    }
    if p.len() > MAX_PATH {
        return Err("a path longer than 4096 bytes");
    }
    if p[0] == b'/' {
        return Err("an absolute path");
    }
    if p.contains(&0) {
        return Err("a path with a NUL byte");
    }
    for c in p.split(|&b| b == b'/') {
        match c {
            b"" => return Err("a path with an empty component"),
            b"." | b".." => return Err("a path with a '.' or '..' component"),
            c if c.len() > MAX_NAME => return Err("a path component longer than 255 bytes"),
            _ => {}
        }
    }
    Ok(())
}

impl Entry {
    /// Appends the entry's bytes to `b`.
    pub fn encode(&self, b: &mut Vec<u8>) {
        b.push(match self.kind {
            Kind::Dir => 0,
            Kind::File(_) => 1,
        });
        b.extend_from_slice(&(self.path.len() as u16).to_be_bytes());
        b.extend_from_slice(&self.path);
        b.extend_from_slice(&self.mode.to_be_bytes());
        b.extend_from_slice(&self.mtime_s.to_be_bytes());
        b.extend_from_slice(&self.mtime_ns.to_be_bytes());
        if let Kind::File(size) = self.kind {
            b.extend_from_slice(&size.to_be_bytes());
        }
    }
}

/// A little cursor over bytes that fails instead of panicking.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn arr<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.arr::<1>()?[0])
    }
    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_be_bytes(self.arr()?))
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.arr()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.arr()?))
    }
}

/// Parses a whole manifest. Every path is checked ([`check_path`]); the error names the
/// first entry refused and why (a path shown with anything unprintable escaped).
pub fn parse_manifest(b: &[u8]) -> Result<Vec<Entry>, String> {
    let mut c = Cursor(b);
    let mut out = Vec::new();
    while !c.0.is_empty() {
        let n = out.len();
        let cut = || format!("the manifest is cut inside entry {n}");
        let kind = c.u8().ok_or_else(cut)?;
        let len = usize::from(c.u16().ok_or_else(cut)?);
        let path = c.take(len).ok_or_else(cut)?.to_vec();
        check_path(&path).map_err(|why| format!("entry {n} ({}) is {why}", path.escape_ascii()))?;
        let mode = c.u32().ok_or_else(cut)? & 0o7777;
        let mtime_s = i64::from_be_bytes(c.arr().ok_or_else(cut)?);
        let mtime_ns = c.u32().ok_or_else(cut)?.min(999_999_999);
        let kind = match kind {
            0 => Kind::Dir,
            1 => Kind::File(c.u64().ok_or_else(cut)?),
            k => {
                return Err(format!(
                    "entry {n} ({}) is of an unknown kind {k} (only directories and regular \
                     files are sent)",
                    path.escape_ascii()
                ))
            }
        };
        out.push(Entry {
            kind,
            path,
            mode,
            mtime_s,
            mtime_ns,
        });
    }
    Ok(out)
}

/// What a receiver holds of one file of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Held {
    /// Nothing.
    Nothing,
    /// A part file from an interrupted transfer: the digests of its whole chunks.
    Part(Vec<[u8; 16]>),
    /// The file itself, this long, with this XXH3-128 digest.
    Whole(u64, [u8; 16]),
}

/// The receiver's plan: per file of the manifest, what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan(pub Vec<Held>);

/// What [`Plan::parse`] found in the bytes so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanParse {
    /// A whole plan, and the bytes it took.
    Done(Plan, usize),
    /// At least this many bytes in all are needed.
    Need(usize),
    /// Not a plan.
    Malformed(&'static str),
}

impl Plan {
    /// The plan's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        for h in &self.0 {
            match h {
                Held::Nothing => body.push(0),
                Held::Part(chunks) => {
                    body.push(1);
                    let n = chunks.len().min(MAX_OFFER_CHUNKS as usize);
                    body.extend_from_slice(&(n as u32).to_be_bytes());
                    for d in &chunks[..n] {
                        body.extend_from_slice(d);
                    }
                }
                Held::Whole(len, d) => {
                    body.push(2);
                    body.extend_from_slice(&len.to_be_bytes());
                    body.extend_from_slice(d);
                }
            }
        }
        let mut b = Vec::with_capacity(PLAN_HEAD_LEN + body.len());
        b.extend_from_slice(PLAN_MAGIC);
        b.extend_from_slice(&(self.0.len() as u32).to_be_bytes());
        b.extend_from_slice(&(body.len() as u32).to_be_bytes());
        b.extend_from_slice(&body);
        b
    }

    /// Parses a plan from the bytes received so far.
    pub fn parse(b: &[u8]) -> PlanParse {
        Self::parse_for(b, None)
    }

    /// [`Plan::parse`] for a sender that knows how many files its manifest has: a plan for
    /// another count is refused from its header, before its body is read or anything is
    /// allocated for it (a plan's entries take more memory than its bytes).
    pub fn parse_for(b: &[u8], expect_files: Option<u32>) -> PlanParse {
        let magic = &b[..b.len().min(8)];
        if magic != &PLAN_MAGIC[..magic.len()] {
            return PlanParse::Malformed("not a plan (wrong magic)");
        }
        let Some(head) = b.get(..PLAN_HEAD_LEN) else {
            return PlanParse::Need(PLAN_HEAD_LEN);
        };
        let mut c = Cursor(&head[8..]);
        let (Some(files), Some(len)) = (c.u32(), c.u32()) else {
            return PlanParse::Malformed("plan header");
        };
        if len > MAX_PLAN {
            return PlanParse::Malformed("the plan is too long");
        }
        if expect_files.is_some_and(|n| n != files) {
            return PlanParse::Malformed("the plan is for another number of files");
        }
        let total = PLAN_HEAD_LEN + len as usize;
        let Some(body) = b.get(PLAN_HEAD_LEN..total) else {
            return PlanParse::Need(total);
        };
        let mut c = Cursor(body);
        // Each file takes at least a byte: the count is bounded by the body's length.
        if files as usize > body.len() {
            return PlanParse::Malformed("the plan holds fewer files than it says");
        }
        let mut held = Vec::with_capacity((files as usize).min(1 << 16));
        for _ in 0..files {
            let h = match c.u8() {
                Some(0) => Held::Nothing,
                Some(1) => {
                    let Some(n) = c.u32().filter(|&n| n <= MAX_OFFER_CHUNKS) else {
                        return PlanParse::Malformed("a part's chunk count");
                    };
                    let Some(d) = c.take(16 * n as usize) else {
                        return PlanParse::Malformed("a part's digests are cut");
                    };
                    Held::Part(
                        d.chunks_exact(16)
                            .map(|d| d.try_into().unwrap_or_default())
                            .collect(),
                    )
                }
                Some(2) => match (c.u64(), c.arr::<16>()) {
                    (Some(len), Some(d)) => Held::Whole(len, d),
                    _ => return PlanParse::Malformed("a whole file's digest is cut"),
                },
                _ => return PlanParse::Malformed("an unknown or missing holding"),
            };
            held.push(h);
        }
        if !c.0.is_empty() {
            return PlanParse::Malformed("bytes after the plan's last file");
        }
        PlanParse::Done(Plan(held), total)
    }
}

/// The start of one file's content in the tree's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStart {
    /// Index of the file among the manifest's files (directories not counted).
    pub index: u32,
    /// First byte sent.
    pub offset: u64,
}

impl FileStart {
    /// The start's bytes.
    pub fn encode(&self) -> [u8; FILE_START_LEN] {
        let mut b = [0u8; FILE_START_LEN];
        b[..8].copy_from_slice(FILE_START_MAGIC);
        b[8..12].copy_from_slice(&self.index.to_be_bytes());
        b[12..].copy_from_slice(&self.offset.to_be_bytes());
        b
    }
}

/// What follows in the tree's stream where a file may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Another file.
    File(FileStart),
    /// The end, after this many files.
    End(u64),
}

impl Next {
    /// Parses the 20 bytes at a file's start, or the 16 of the end (`b` may hold more).
    /// `None` when they are neither.
    pub fn parse(b: &[u8]) -> Option<(Next, usize)> {
        let mut c = Cursor(b);
        match &c.arr::<8>()? {
            m if m == FILE_START_MAGIC => {
                let index = c.u32()?;
                let offset = c.u64()?;
                Some((Next::File(FileStart { index, offset }), FILE_START_LEN))
            }
            m if m == TREE_END_MAGIC => Some((Next::End(c.u64()?), TREE_END_LEN)),
            _ => None,
        }
    }

    /// The end's bytes.
    pub fn end(files: u64) -> [u8; TREE_END_LEN] {
        let mut b = [0u8; TREE_END_LEN];
        b[..8].copy_from_slice(TREE_END_MAGIC);
        b[8..].copy_from_slice(&files.to_be_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: Kind, path: &str) -> Entry {
        Entry {
            kind,
            path: path.as_bytes().to_vec(),
            mode: 0o640,
            mtime_s: 1_700_000_000,
            mtime_ns: 123,
        }
    }

    #[test]
    fn manifests_round_trip() {
        let es = vec![
            entry(Kind::Dir, "a"),
            entry(Kind::Dir, "a/empty dir"),
            entry(Kind::File(5), "a/ünïcødé name.txt"),
            entry(Kind::File(0), "b"),
        ];
        let (mut b, mut ends) = (Vec::new(), Vec::new());
        for e in &es {
            e.encode(&mut b);
            ends.push(b.len());
        }
        assert_eq!(parse_manifest(&b).unwrap(), es);
        // Cut at an entry's end, the entries before; anywhere else, an error.
        for n in 1..b.len() {
            match ends.iter().position(|&e| e == n) {
                Some(k) => assert_eq!(parse_manifest(&b[..n]).unwrap(), es[..=k]),
                None => assert!(parse_manifest(&b[..n]).is_err(), "{n}"),
            }
        }
    }

    #[test]
    fn hostile_paths_are_refused() {
        for p in [
            "../x",
            "/etc/x",
            "a/../../x",
            "a/./b",
            "a//b",
            "a/",
            "",
            "..",
            "a/\0b",
        ] {
            let mut b = Vec::new();
            entry(Kind::File(1), p).encode(&mut b);
            let e = parse_manifest(&b).unwrap_err();
            assert!(e.contains("entry 0"), "{p}: {e}");
        }
        assert!(check_path(&[b'a'; 256]).is_err());
        assert!(check_path(&[b'a'; 255]).is_ok());
        let mut b = Vec::new();
        entry(Kind::File(1), "x").encode(&mut b);
        b[0] = 2; // a symbolic link, say
        assert!(parse_manifest(&b).unwrap_err().contains("unknown kind"));
    }

    #[test]
    fn plans_parse_from_any_prefix_and_bound_themselves() {
        let p = Plan(vec![
            Held::Nothing,
            Held::Part(vec![[1; 16], [2; 16]]),
            Held::Whole(77, [3; 16]),
        ]);
        let b = p.encode();
        for n in 0..b.len() {
            assert!(
                matches!(Plan::parse(&b[..n]), PlanParse::Need(k) if k > n),
                "{n}"
            );
        }
        assert_eq!(Plan::parse(&b), PlanParse::Done(p, b.len()));
        let mut lie = b.clone();
        lie[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(Plan::parse(&lie), PlanParse::Malformed(_)));
        let mut long = b.clone();
        long[12..16].copy_from_slice(&(MAX_PLAN + 1).to_be_bytes());
        assert!(matches!(Plan::parse(&long), PlanParse::Malformed(_)));
        // A sender expecting another count refuses it from the header alone.
        assert!(matches!(
            Plan::parse_for(&b[..PLAN_HEAD_LEN], Some(2)),
            PlanParse::Malformed(_)
        ));
        assert!(matches!(
            Plan::parse_for(&b[..PLAN_HEAD_LEN], Some(3)),
            PlanParse::Need(_)
        ));
    }

    #[test]
    fn starts_and_ends() {
        let s = FileStart {
            index: 7,
            offset: 8 << 20,
        };
        assert_eq!(
            Next::parse(&s.encode()),
            Some((Next::File(s), FILE_START_LEN))
        );
        assert_eq!(
            Next::parse(&Next::end(3)),
            Some((Next::End(3), TREE_END_LEN))
        );
        assert_eq!(Next::parse(b"SLPFILE1\0\0"), None);
        assert_eq!(Next::parse(b"junkjunkjunkjunkjunk"), None);
    }
}
