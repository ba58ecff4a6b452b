//! Directory trees over one connection: `slipstream send DIR` and a receiver given a
//! directory. The framing is [`slipstream_proto::wire::tree`]'s; both ends must be slipstream
//! and have agreed on the verdict ([`Connection::verdict_agreed`]).
//!
//! **Sender.** [`scan_tree`] walks the tree before anything connects (an unreadable
//! directory fails there): directories and regular files are sent with their permission
//! bits and modification times, empty directories included; symbolic links are neither
//! followed nor sent, and neither are devices, FIFOs or sockets: each is listed in the
//! report. [`send_tree`] sends the manifest, takes the receiver's plan and sends every file
//! the receiver does not hold, packed into the connection's chunks one after another (no
//! handshake, no round trip per file), each from where the receiver's part file ends if its
//! chunks match, then waits for the verdict.
//!
//! **Receiver.** `recv_tree` (through [`crate::transfer::recv_into`]) keeps every path
//! inside its directory whatever the sender sends: paths are checked when the manifest is
//! parsed (nothing absolute, no `..`, no empty component), every directory on a path is
//! opened relative to its parent without following a symbolic link, and files are created
//! the same way; a hostile manifest is refused whole, with nothing written. Each file is
//! written to `NAME.part`, checked against its digest, given its mode (the permission bits
//! only: [`KEPT_MODE`]) and time and renamed;
//! the file system is synced once at the end, before the verdict. A file that fails (no
//! space, exists without `--force`, digest mismatch) is reported and the others go on; the
//! verdict fails if any failed. A file that exists and is identical to the sender's is not
//! sent again, and a part file resumes as a single file's does: running the same command
//! again after an interruption sends only what is missing.

use crate::api::Connection;
use crate::transfer::{self, read_at, resume_point, Digest, Hasher, READ_PIECE, RESUME_CHUNK_LOG2};
use crate::verdict;
use rustix::fs::{self as rfs, AtFlags, Mode, OFlags, Timespec, Timestamps, CWD, UTIME_OMIT};
use slipstream_proto::wire::file::Offer;
use slipstream_proto::wire::tree::{
    check_path, parse_manifest, Entry, FileStart, Held, Kind, Next, Plan, PlanParse,
    FILE_START_LEN, MAX_MANIFEST, MAX_PLAN, TREE_END_LEN, TREE_MAGIC,
};
use std::fs::{self, File};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The permission bits a receiver applies: read, write and execute for owner, group and
/// others. Set-user-ID, set-group-ID and sticky bits are dropped: a sender must not be able
/// to leave a set-user-ID program behind (owned by whoever receives, root included).
pub const KEPT_MODE: u32 = 0o777;

/// What a tree transfer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeReport {
    /// Directories in the tree.
    pub dirs: u64,
    /// Regular files in the tree.
    pub files: u64,
    /// Bytes of all the files.
    pub bytes: u64,
    /// Content bytes this run carried (files not held, or the rest of a part).
    pub bytes_sent: u64,
    /// Files the receiver held whole and identical: not sent again.
    pub identical: u64,
    /// Files resumed from a part file, and the bytes they did not need to carry.
    pub resumed: u64,
    /// Bytes of those part files kept.
    pub resumed_bytes: u64,
    /// Sender: entries not sent, and why (symbolic links, devices, FIFOs, sockets).
    pub not_sent: Vec<(String, String)>,
    /// Receiver: files (or directories) that failed, and why.
    pub failed: Vec<(String, String)>,
}

impl TreeReport {
    /// The verdict's reason when any file failed: how many, and the first few.
    pub fn failure(&self) -> Option<String> {
        if self.failed.is_empty() {
            return None;
        }
        let first: Vec<String> = self
            .failed
            .iter()
            .take(5)
            .map(|(p, why)| format!("{p}: {why}"))
            .collect();
        Some(format!(
            "{} of {} entries failed: {}{}",
            self.failed.len(),
            self.files + self.dirs,
            first.join("; "),
            if self.failed.len() > 5 { "; ..." } else { "" }
        ))
    }
}

/// A tree ready to send: its manifest and where each file's bytes come from.
#[derive(Debug)]
pub struct Tree {
    entries: Vec<Entry>,
    /// Per file, in manifest order: its path on disk and size.
    files: Vec<(PathBuf, u64)>,
    report: TreeReport,
}

impl Tree {
    /// What the walk found (files, directories, bytes, entries not sent).
    pub fn report(&self) -> &TreeReport {
        &self.report
    }
}

fn rel_name(rel: &[u8]) -> String {
    String::from_utf8_lossy(rel).into_owned()
}

/// Walks the tree at `root` (following `root` itself if it is a link to a directory,
/// nothing inside it), in name order, directories before what they hold.
pub fn scan_tree(root: &Path) -> io::Result<Tree> {
    let ctx = |p: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", p.display()));
    let m = fs::metadata(root).map_err(|e| ctx(root, e))?;
    if !m.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory", root.display()),
        ));
    }
    let mut t = Tree {
        entries: Vec::new(),
        files: Vec::new(),
        report: TreeReport::default(),
    };
    let mut stack = vec![(root.to_path_buf(), Vec::new())];
    while let Some((dir, rel)) = stack.pop() {
        let mut names = Vec::new();
        for e in fs::read_dir(&dir).map_err(|e| ctx(&dir, e))? {
            names.push(e.map_err(|e| ctx(&dir, e))?.file_name());
        }
        names.sort();
        let mut subdirs = Vec::new();
        for name in names {
            let path = dir.join(&name);
            let mut r = rel.clone();
            if !r.is_empty() {
                r.push(b'/');
            }
            r.extend_from_slice(name.as_bytes());
            let m = fs::symlink_metadata(&path).map_err(|e| ctx(&path, e))?;
            let ft = m.file_type();
            let why = if ft.is_symlink() {
                Some("a symbolic link: not followed, not sent")
            } else if !ft.is_dir() && !ft.is_file() {
                Some("not a regular file or directory: not sent")
            } else {
                check_path(&r).err()
            };
            if let Some(why) = why {
                t.report.not_sent.push((rel_name(&r), why.to_string()));
                continue;
            }
            let (mtime_s, mtime_ns) = (m.mtime(), m.mtime_nsec().clamp(0, 999_999_999) as u32);
            let mode = m.mode() & 0o7777;
            if ft.is_dir() {
                t.entries.push(Entry {
                    kind: Kind::Dir,
                    path: r.clone(),
                    mode,
                    mtime_s,
                    mtime_ns,
                });
                t.report.dirs += 1;
                subdirs.push((path, r));
            } else {
                t.entries.push(Entry {
                    kind: Kind::File(m.len()),
                    path: r,
                    mode,
                    mtime_s,
                    mtime_ns,
                });
                t.files.push((path, m.len()));
                t.report.files += 1;
                t.report.bytes += m.len();
            }
        }
        // Depth first, in name order: the stack takes the last pushed first.
        stack.extend(subdirs.into_iter().rev());
    }
    Ok(t)
}

/// Fills the connection's chunks with whatever is written, handing each over when full.
struct ChunkWriter<'a> {
    conn: &'a Connection,
    chunk: Vec<u8>,
    len: usize,
}

impl<'a> ChunkWriter<'a> {
    fn new(conn: &'a Connection) -> io::Result<Self> {
        Ok(ChunkWriter {
            conn,
            chunk: conn.take_chunk()?,
            len: 0,
        })
    }
    fn push(&mut self) -> io::Result<()> {
        let full = std::mem::replace(&mut self.chunk, self.conn.take_chunk()?);
        self.conn.send_chunk(full, std::mem::take(&mut self.len))
    }
    fn room(&mut self) -> io::Result<usize> {
        if self.len == self.chunk.len() {
            self.push()?;
        }
        Ok(self.chunk.len() - self.len)
    }
    fn write(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let n = self.room()?.min(data.len());
            self.chunk[self.len..self.len + n].copy_from_slice(&data[..n]);
            self.len += n;
            data = &data[n..];
        }
        Ok(())
    }
    /// Reads `n` bytes of `f` from `at` straight into the chunks, hashing them.
    fn copy_file(&mut self, f: &File, mut at: u64, mut n: u64, h: &mut Hasher) -> io::Result<()> {
        while n > 0 {
            let room = self.room()?.min(READ_PIECE) as u64;
            let want = room.min(n) as usize;
            let piece = &mut self.chunk[self.len..self.len + want];
            let k = read_at(f, at, piece)?;
            if k == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file shrank while being sent",
                ));
            }
            h.update(&piece[..k]);
            self.len += k;
            at += k as u64;
            n -= k as u64;
        }
        Ok(())
    }
    fn flush(self) -> io::Result<()> {
        if self.len > 0 {
            self.conn.send_chunk(self.chunk, self.len)?;
        }
        Ok(())
    }
}

/// The digest of a whole file.
fn file_digest(f: &File) -> io::Result<Digest> {
    let mut h = Hasher::new();
    let mut buf = vec![0u8; READ_PIECE];
    let mut at = 0;
    loop {
        match read_at(f, at, &mut buf)? {
            0 => return Ok(h.finalize()),
            k => {
                h.update(&buf[..k]);
                at += k as u64;
            }
        }
    }
}

/// Sends `tree` (from [`scan_tree`]) and waits for the receiver's verdict on it. `progress`
/// gets the content bytes sent so far. Fails with the receiver's reason if any file failed
/// there, and aborts the connection if a file changed size while it was sent.
pub fn send_tree(
    conn: &Connection,
    tree: &Tree,
    mut progress: impl FnMut(u64),
) -> io::Result<TreeReport> {
    if !conn.verdict_agreed() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "sending a directory needs a slipstream receiver (this peer does not take one)",
        ));
    }
    let mut manifest = Vec::new();
    for e in &tree.entries {
        e.encode(&mut manifest);
    }
    if manifest.len() as u64 > MAX_MANIFEST {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the tree's manifest takes {} bytes, more than the {MAX_MANIFEST} a receiver takes",
                manifest.len()
            ),
        ));
    }
    let mut report = tree.report.clone();
    let mut out = ChunkWriter::new(conn)?;
    out.write(TREE_MAGIC)?;
    out.write(&(manifest.len() as u64).to_be_bytes())?;
    out.write(&manifest)?;
    drop(manifest);
    // The manifest must reach the receiver before its plan can come back.
    std::mem::replace(&mut out, ChunkWriter::new(conn)?).flush()?;
    let failed = |why: String| {
        conn.abort();
        io::Error::other(why)
    };
    let offer = verdict::read_offer(conn).map_err(failed)?;
    let ours = conn.max_rate()?;
    if offer.max_rate > 0 && (ours == 0 || offer.max_rate < ours) {
        conn.set_max_rate(offer.max_rate)?;
    }
    let files = u32::try_from(tree.files.len()).ok();
    let plan = verdict::read_answer(conn, "plan", |b| match Plan::parse_for(b, files) {
        PlanParse::Done(p, _) => Ok(Ok(p)),
        PlanParse::Need(n) => Ok(Err(n)),
        PlanParse::Malformed(why) => Err(why),
    })
    .map_err(failed)?;
    if plan.0.len() != tree.files.len() {
        return Err(failed(format!(
            "the receiver's plan covers {} files, the tree has {}",
            plan.0.len(),
            tree.files.len()
        )));
    }
    let mut sent_files = 0u64;
    for (i, ((path, size), held)) in tree.files.iter().zip(&plan.0).enumerate() {
        let size = *size;
        let f = match File::open(path) {
            Ok(f) => f,
            Err(e) => {
                // Gone or unreadable since the walk: not sent; the receiver reports it.
                report
                    .not_sent
                    .push((path.display().to_string(), format!("cannot be read: {e}")));
                continue;
            }
        };
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        let (start, mut hasher) = match held {
            Held::Whole(len, d) if *len == size && file_digest(&f).map_err(ctx)? == *d => {
                report.identical += 1;
                continue;
            }
            Held::Part(chunks) => {
                let offer = Offer {
                    max_rate: 0,
                    chunk_log2: offer.chunk_log2,
                    chunks: chunks.clone(),
                };
                resume_point(&offer, size, |at, buf| read_at(&f, at, buf)).map_err(ctx)?
            }
            _ => (0, Hasher::new()),
        };
        if start > 0 {
            report.resumed += 1;
            report.resumed_bytes += start;
        }
        out.write(
            &FileStart {
                index: i as u32,
                offset: start,
            }
            .encode(),
        )?;
        if let Err(e) = out.copy_file(&f, start, size - start, &mut hasher) {
            conn.abort();
            return Err(ctx(e));
        }
        out.write(&hasher.finalize())?;
        sent_files += 1;
        report.bytes_sent += size - start;
        progress(report.bytes_sent);
    }
    out.write(&Next::end(sent_files))?;
    out.flush()?;
    transfer::settle(conn, true, || Ok(()))?;
    Ok(report)
}

/// Opens directories below the receiver's root without following a symbolic link on the
/// way, keeping the last one open (a tree's files come directory by directory).
struct Dirs {
    root: OwnedFd,
    last: Option<(Vec<u8>, OwnedFd)>,
    /// Directories this receive created: nothing was in them before it, so nothing in
    /// them needs looking up (a fresh receive of many small files saves three lookups a
    /// file).
    fresh: std::collections::HashSet<Vec<u8>>,
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

impl Dirs {
    /// The directory at `rel` (components joined by `/`, checked; empty: the root),
    /// created where missing when `create` (mode 0700 until its own is set at the end).
    /// `None` if missing and not created.
    fn open(&mut self, rel: &[u8], create: bool) -> io::Result<Option<&OwnedFd>> {
        if rel.is_empty() {
            return Ok(Some(&self.root));
        }
        if self.last.as_ref().is_some_and(|(p, _)| p == rel) {
            return Ok(self.last.as_ref().map(|(_, fd)| fd));
        }
        let mut cur: Option<OwnedFd> = None;
        let mut at = 0;
        for comp in rel.split(|&b| b == b'/') {
            at += comp.len();
            let comp = std::ffi::OsStr::from_bytes(comp);
            let parent = cur.as_ref().unwrap_or(&self.root);
            let next = match rfs::openat(parent, comp, dir_flags(), Mode::empty()) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::NOENT) if create => {
                    match rfs::mkdirat(parent, comp, Mode::from_raw_mode(0o700)) {
                        Ok(()) => {
                            self.fresh.insert(rel[..at].to_vec());
                        }
                        Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(e.into()),
                    }
                    rfs::openat(parent, comp, dir_flags(), Mode::empty()).map_err(no_follow)?
                }
                Err(rustix::io::Errno::NOENT) => return Ok(None),
                Err(e) => return Err(no_follow(e)),
            };
            cur = Some(next);
            at += 1;
        }
        self.last = cur.map(|fd| (rel.to_vec(), fd));
        Ok(self.last.as_ref().map(|(_, fd)| fd))
    }
}

/// An error on the way to a directory, with a symbolic link named as such.
fn no_follow(e: rustix::io::Errno) -> io::Error {
    match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => io::Error::new(
            io::ErrorKind::InvalidInput,
            "a symbolic link or a file is in the way (not followed)",
        ),
        e => e.into(),
    }
}

/// Splits a checked path into its directory and its name.
fn split(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[][..], path),
    }
}

fn part_name(name: &[u8]) -> Vec<u8> {
    let mut p = name.to_vec();
    p.extend_from_slice(b".part");
    p
}

fn os(b: &[u8]) -> &std::ffi::OsStr {
    std::ffi::OsStr::from_bytes(b)
}

/// Whether `name` in `dir` is a regular file (not following a link), and its size.
fn regular(dir: &OwnedFd, name: &[u8]) -> Option<u64> {
    rfs::statat(dir, os(name), AtFlags::SYMLINK_NOFOLLOW)
        .ok()
        .filter(|st| rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::RegularFile)
        .map(|st| st.st_size as u64)
}

/// How [`open_file`] opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Read,
    /// Read and write, created if missing.
    Write,
    /// As `Write`, emptied.
    Truncate,
}

fn open_file(dir: &OwnedFd, name: &[u8], how: Open) -> io::Result<File> {
    let flags = match how {
        Open::Read => OFlags::RDONLY,
        Open::Write => OFlags::RDWR | OFlags::CREATE,
        Open::Truncate => OFlags::RDWR | OFlags::CREATE | OFlags::TRUNC,
    } | OFlags::NOFOLLOW
        | OFlags::CLOEXEC;
    let fd = rfs::openat(dir, os(name), flags, Mode::from_raw_mode(0o600)).map_err(no_follow)?;
    Ok(File::from(fd))
}

/// What the receiver holds of one file: the file itself, or a part of it.
fn holding(dirs: &mut Dirs, path: &[u8]) -> (Held, Option<transfer::Held>) {
    let (dir, name) = split(path);
    if dirs.fresh.contains(dir) {
        return (Held::Nothing, None);
    }
    let Ok(Some(dir)) = dirs.open(dir, false) else {
        return (Held::Nothing, None);
    };
    if let Some(len) = regular(dir, name) {
        if let Ok(d) = open_file(dir, name, Open::Read).and_then(|f| file_digest(&f)) {
            return (Held::Whole(len, d), None);
        }
    }
    let part = part_name(name);
    if regular(dir, &part).is_some() {
        if let Ok(h) = open_file(dir, &part, Open::Read).and_then(|f| transfer::Held::scan(&f)) {
            return (Held::Part(h.chunks.clone()), Some(h));
        }
    }
    (Held::Nothing, None)
}

/// A buffered reader over the connection's stream.
struct Reader<'a> {
    conn: &'a Connection,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
}

impl Reader<'_> {
    fn fill(&mut self) -> io::Result<&[u8]> {
        if self.pos == self.end {
            let n = self.conn.recv(&mut self.buf)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the sender closed the connection inside the tree",
                ));
            }
            (self.pos, self.end) = (0, n);
        }
        Ok(&self.buf[self.pos..self.end])
    }
    fn read_exact(&mut self, out: &mut [u8]) -> io::Result<()> {
        let mut got = 0;
        while got < out.len() {
            let b = self.fill()?;
            let n = b.len().min(out.len() - got);
            out[got..got + n].copy_from_slice(&b[..n]);
            self.pos += n;
            got += n;
        }
        Ok(())
    }
}

/// Receives a tree whose manifest (`manifest_len` bytes) comes next on `conn`, into `root`
/// (created if missing; its parent must exist). Returns the report; a file that failed is
/// in it (the verdict then fails), while a stream that breaks or a sender that breaks the
/// framing fails the whole receive. The caller sends the verdict.
pub(crate) fn recv_tree(
    conn: &Connection,
    root: &Path,
    force: bool,
    manifest_len: u64,
    mut progress: impl FnMut(u64),
) -> io::Result<TreeReport> {
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    if manifest_len > MAX_MANIFEST {
        return Err(bad(format!(
            "the sender's manifest is {manifest_len} bytes, more than {MAX_MANIFEST}"
        )));
    }
    // Read as it comes: a length is only a claim.
    let mut m = Vec::new();
    while (m.len() as u64) < manifest_len {
        let old = m.len();
        let k = (manifest_len - old as u64).min(1 << 20) as usize;
        m.resize(old + k, 0);
        verdict::read_exact(conn, &mut m[old..], "manifest")?;
    }
    let entries = parse_manifest(&m).map_err(|why| bad(format!("the sender's manifest: {why}")))?;
    drop(m);
    let ctx = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", root.display()));
    let created = match fs::symlink_metadata(root) {
        Ok(m) if m.is_dir() => false,
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a directory", root.display()),
            ))
        }
        Err(_) => {
            fs::create_dir(root).map_err(ctx)?;
            true
        }
    };
    let root_fd = rfs::openat(CWD, root, dir_flags(), Mode::empty())
        .map_err(no_follow)
        .map_err(ctx)?;
    let mut dirs = Dirs {
        root: root_fd,
        last: None,
        fresh: Default::default(),
    };
    if created {
        dirs.fresh.insert(Vec::new());
    }
    let mut report = TreeReport::default();
    let mut files: Vec<(&Entry, u64)> = Vec::new();
    for e in &entries {
        match e.kind {
            Kind::Dir => {
                report.dirs += 1;
                if let Err(err) = dirs.open(&e.path, true) {
                    report.failed.push((rel_name(&e.path), err.to_string()));
                }
            }
            Kind::File(size) => {
                report.files += 1;
                report.bytes += size;
                files.push((e, size));
            }
        }
    }
    // What is here already, file by file; part files beyond what a plan can carry are
    // offered as nothing (sent again whole). A file's manifest entry is longer than its
    // plan entry but for a part's digests, so the rest always fits.
    let mut room = (MAX_PLAN as usize).saturating_sub(25 * files.len());
    let (plan, parts): (Vec<Held>, Vec<Option<transfer::Held>>) = files
        .iter()
        .map(|(e, _)| match holding(&mut dirs, &e.path) {
            (Held::Part(c), _) if 16 * c.len() + 4 > room => (Held::Nothing, None),
            (Held::Part(c), h) => {
                room -= 16 * c.len() + 4;
                (Held::Part(c), h)
            }
            other => other,
        })
        .unzip();
    verdict::send_plan(conn, &Plan(plan.clone()).encode())?;
    let chunk = 1u64 << RESUME_CHUNK_LOG2;
    let mut reader = Reader {
        conn,
        buf: vec![0u8; 1 << 20],
        pos: 0,
        end: 0,
    };
    let mut sent = vec![false; files.len()];
    let mut next_index = 0usize;
    let mut count = 0u64;
    loop {
        let mut b = [0u8; FILE_START_LEN];
        reader.read_exact(&mut b[..TREE_END_LEN])?;
        if b.starts_with(slipstream_proto::wire::tree::FILE_START_MAGIC) {
            reader.read_exact(&mut b[TREE_END_LEN..])?;
        }
        let start = match Next::parse(&b) {
            Some((Next::End(n), _)) if n == count => break,
            Some((Next::End(n), _)) => {
                return Err(bad(format!(
                    "the sender says it sent {n} files, {count} came"
                )))
            }
            Some((Next::File(s), _)) => s,
            None => return Err(bad("the sender broke the tree's framing".into())),
        };
        let i = start.index as usize;
        if i < next_index || i >= files.len() {
            return Err(bad(format!(
                "the sender sent file {i} out of order or beyond the manifest's {}",
                files.len()
            )));
        }
        let (e, size) = files[i];
        let held_len = match &plan[i] {
            Held::Part(c) => c.len() as u64 * chunk,
            _ => 0,
        };
        if start.offset % chunk != 0 || start.offset > held_len || start.offset > size {
            return Err(bad(format!(
                "the sender starts {} at byte {}, not at the end of a chunk offered",
                rel_name(&e.path),
                start.offset
            )));
        }
        next_index = i + 1;
        count += 1;
        sent[i] = true;
        let r = recv_one(
            &mut reader,
            &mut dirs,
            e,
            size,
            start.offset,
            parts[i].as_ref(),
            force,
        )?;
        match r {
            Ok(()) => {
                report.bytes_sent += size - start.offset;
                if start.offset > 0 {
                    report.resumed += 1;
                    report.resumed_bytes += start.offset;
                }
            }
            Err(why) => report.failed.push((rel_name(&e.path), why)),
        }
        progress(report.bytes_sent);
    }
    for (i, (e, _)) in files.iter().enumerate() {
        if sent[i] {
            continue;
        }
        match plan[i] {
            // The sender skips a file held whole only when its digest matches.
            Held::Whole(..) => report.identical += 1,
            _ => report.failed.push((
                rel_name(&e.path),
                "the sender did not send it (it could not read it)".into(),
            )),
        }
    }
    // Directories get their own mode and time last, deepest first (writing into them
    // changed their times).
    for e in entries.iter().rev().filter(|e| e.kind == Kind::Dir) {
        if let Ok(Some(fd)) = dirs.open(&e.path, false) {
            let _ = rfs::fchmod(fd, Mode::from_raw_mode(e.mode & KEPT_MODE));
            let _ = rfs::futimens(fd, &times(e));
        }
    }
    // Everything written is durable before the verdict says so.
    rfs::syncfs(&dirs.root).map_err(|e| ctx(e.into()))?;
    Ok(report)
}

fn times(e: &Entry) -> Timestamps {
    Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: e.mtime_s,
            tv_nsec: e.mtime_ns.into(),
        },
    }
}

/// Receives one file's bytes (from `offset` to `size`) and digest. `Ok(Err(why))` when this
/// file failed (its bytes were read all the same, the stream stays in step); `Err` when the
/// stream did.
fn recv_one(
    reader: &mut Reader<'_>,
    dirs: &mut Dirs,
    e: &Entry,
    size: u64,
    offset: u64,
    part: Option<&transfer::Held>,
    force: bool,
) -> io::Result<Result<(), String>> {
    let (dir, name) = split(&e.path);
    let pname = part_name(name);
    // Where it goes, unless that fails (the bytes are read and dropped then).
    let mut target = (|| -> Result<(File, Hasher), String> {
        let fresh = dirs.fresh.contains(dir);
        let dfd = dirs
            .open(dir, true)
            .map_err(|e| e.to_string())?
            .ok_or("its directory is missing")?;
        match rfs::statat(dfd, os(name), AtFlags::SYMLINK_NOFOLLOW) {
            _ if fresh => {}
            Ok(st) if rfs::FileType::from_raw_mode(st.st_mode) == rfs::FileType::Directory => {
                return Err("a directory is in the way".into())
            }
            Ok(_) if !force => return Err("exists and differs (use --force to replace it)".into()),
            _ => {}
        }
        if offset == 0 {
            let f = open_file(dfd, &pname, Open::Truncate).map_err(|e| e.to_string())?;
            return Ok((f, Hasher::new()));
        }
        let f = open_file(dfd, &pname, Open::Write).map_err(|e| e.to_string())?;
        let hasher = match part {
            Some(h) => h.prefix(&f, offset).map_err(|e| e.to_string())?,
            None => return Err("resumed without a part".into()),
        };
        f.set_len(offset).map_err(|e| e.to_string())?;
        Ok((f, hasher))
    })();
    let mut at = offset;
    let mut left = size - offset;
    while left > 0 {
        let b = reader.fill()?;
        let n = b.len().min(left as usize);
        if let Ok((f, h)) = &mut target {
            h.update(&b[..n]);
            if let Err(err) = write_all_at(f, &b[..n], at) {
                target = Err(err.to_string());
            }
        }
        reader.pos += n;
        at += n as u64;
        left -= n as u64;
    }
    let mut d = [0u8; 16];
    reader.read_exact(&mut d)?;
    let (f, h) = match target {
        Ok(t) => t,
        Err(why) => return Ok(Err(why)),
    };
    let dfd = match dirs.open(dir, false) {
        Ok(Some(fd)) => fd,
        _ => return Ok(Err("its directory went away".into())),
    };
    if h.finalize() != d {
        let _ = rfs::unlinkat(dfd, os(&pname), AtFlags::empty());
        return Ok(Err(
            "digest mismatch (XXH3-128): the received data is corrupt".into(),
        ));
    }
    let done = rfs::fchmod(&f, Mode::from_raw_mode(e.mode & KEPT_MODE))
        .and_then(|()| rfs::futimens(&f, &times(e)))
        .and_then(|()| rfs::renameat(dfd, os(&pname), dfd, os(name)));
    Ok(done.map_err(|e| io::Error::from(e).to_string()))
}

fn write_all_at(f: &File, mut b: &[u8], mut at: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    while !b.is_empty() {
        match f.write_at(b, at) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                b = &b[n..];
                at += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
