//! The receiver's buffer: a ring indexed by sequence number from the next packet the application
//! will read. Out-of-order packets wait in place; the application reads bytes (stream) or whole
//! messages. Capacity grows by doubling up to a memory cap.
//!
//! The ring's memory is a run of pages of [`RecvBuffer::page_slots`] slots each (the last
//! may be shorter). Capacity is a promise, not memory: a page is allocated when a packet
//! first lands in it and goes back to a small pool of spares once the read point has passed
//! it, and so is the slots' metadata, in chunks of 64 slots ([`META_SHIFT`]). A connection that
//! receives nothing holds no pages; one receiving a trickle holds the page or two its
//! packets span and their metadata, whatever its capacity; [`RecvBuffer::release_idle`]
//! gives everything back once the buffer is empty. In stream
//! mode the application may take a whole page of in-order, full packets out of the ring
//! instead of copying it ([`RecvBuffer::take_page`]): a spare page takes its place, and the
//! application hands the page back when done with it ([`RecvBuffer::give_page`]).

use super::Pressure;
use crate::seq::{MsgNo, SeqNo};
use crate::wire::PacketPosition;

#[derive(Debug, Clone, Copy)]
pub(crate) struct RSlot {
    pub present: bool,
    pub len: u32,
    pub pos: PacketPosition,
    pub msg_no: MsgNo,
    /// Sender timestamp unwrapped to 64 bits, µs.
    pub ts_us: u64,
}

/// About how many bytes a page holds: slots of 1456 bytes make pages of 32 (46.6 KiB), what
/// a connection receiving a trickle holds at least. Pages of 512 (728 KiB) made 100
/// connections receiving 64-byte messages over loopback hold 3.1 MB each, three pages and
/// their spares; a file receiver writes pages out in batches, whatever their size.
const PAGE_BYTES: usize = 64 << 10;
/// log2 of the slots whose metadata is allocated together. Metadata for the whole
/// capacity (8,192 slots of 24 bytes for 1456-byte packets) was 192 KiB a receiving
/// connection.
const META_SHIFT: u32 = 6;
/// Spare metadata chunks kept.
const META_POOL: usize = 4;
/// Slots at least this large are pages of their own, so that a payload received into a
/// buffer of its own can be swapped in whole ([`Payload::Owned`]) rather than copied.
pub const OWNED_PAYLOAD_MIN: usize = 16 << 10;

/// A data packet's payload as the connection receives it.
#[derive(Debug)]
pub enum Payload<'a> {
    /// Bytes to copy.
    Slice(&'a [u8]),
    /// The first `len` bytes of a buffer the caller owns. When the buffer is exactly a slot
    /// of the receive buffer (a page of its own, see [`OWNED_PAYLOAD_MIN`]), the receive
    /// buffer takes it and leaves its previous page, of the same length and stale contents,
    /// in its place: no copy. Otherwise the bytes are copied and the buffer is left as it was.
    Owned(&'a mut Vec<u8>, usize),
}

impl Payload<'_> {
    /// Payload bytes.
    pub fn len(&self) -> usize {
        match self {
            Payload::Slice(s) => s.len(),
            Payload::Owned(b, n) => (*n).min(b.len()),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The payload bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            Payload::Slice(s) => s,
            Payload::Owned(b, n) => &b[..(*n).min(b.len())],
        }
    }
}
/// Spare pages kept: at least this many...
const PAGE_POOL: usize = 2;
/// ...and, of the pages retired as the read point leaves them, up to as many as the ring
/// holds, within this many bytes: retired pages kept up to the bytes (45 pages of
/// 1456-byte packets) left connections receiving 64-byte messages holding 400 KiB each of
/// pages with nothing in them. Pages a reader gives back for those it took out are kept up
/// to the ring's size instead (see [`RecvBuffer::give_page`]).
const PAGE_POOL_BYTES: usize = 2 << 20;

const EMPTY: RSlot = RSlot {
    present: false,
    len: 0,
    pos: PacketPosition::Solo,
    msg_no: MsgNo::new(0),
    ts_us: 0,
};

/// What happened to an arriving packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Insert {
    Stored,
    Duplicate,
    /// Before the read point (already delivered or dropped).
    Old,
    /// Beyond the buffer's capacity: dropped, the sender will retransmit.
    Overflow,
    /// Its page would need memory the endpoint's budget does not allow now: dropped, the
    /// sender will retransmit.
    NoMemory,
}

/// A message-level read result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MsgRead {
    /// Copied a message of this many bytes.
    Done(usize),
    /// The next message is this long, larger than the buffer given.
    TooSmall(usize),
    /// Nothing complete yet.
    None,
}

#[derive(Debug)]
pub(crate) struct RecvBuffer {
    slot_size: usize,
    cap: usize,
    max_cap: usize,
    /// The ring's bytes: pages of `page_slots * slot_size` bytes, the last one shorter if
    /// `cap` is not a whole number of pages; an empty page is one not allocated (no packet
    /// of its slots is held).
    pages: Vec<Vec<u8>>,
    /// log2 of the slots per page.
    page_shift: u32,
    /// Spare (whole) pages for [`RecvBuffer::take_page`].
    spare: Vec<Vec<u8>>,
    /// The slots' metadata in chunks of `1 << meta_shift` slots, a chunk allocated while
    /// its slots may hold packets (an empty chunk, or an empty table before the first
    /// packet, reads as [`EMPTY`]).
    meta: Vec<Vec<RSlot>>,
    /// log2 of the slots a metadata chunk covers ([`META_SHIFT`]).
    meta_shift: u32,
    /// Chunks of `meta` allocated, and spare ones (all [`EMPTY`]).
    meta_held: usize,
    meta_spare: Vec<Vec<RSlot>>,
    /// Pages of `pages` allocated.
    allocated: usize,
    /// Pages allocated fresh (zeroed) rather than taken from the spares, since the start.
    pages_new: u64,
    /// A buffer offered for the next owned payload's place (see [`RecvBuffer::offer`]).
    offered: Option<Vec<u8>>,
    /// Set while the endpoint's buffers are over its memory budget: no new memory then.
    pressure: Pressure,
    /// Sequence number of the head slot: the next packet to deliver.
    read_seq: SeqNo,
    head: usize,
    /// Bytes of the head packet already read (stream mode).
    read_off: usize,
    count: usize,
    bytes: u64,
    /// Packets the last message read took.
    last_read_pkts: usize,
    /// Payloads stored by taking the caller's buffer ([`Payload::Owned`]), not copied.
    kept: u64,
}

impl RecvBuffer {
    pub fn new(slot_size: usize, cap: usize, max_cap: usize, isn: SeqNo) -> Self {
        Self::with_shifts(
            slot_size,
            cap,
            max_cap,
            isn,
            Self::page_shift_for(slot_size),
            META_SHIFT,
        )
    }

    #[cfg(test)]
    fn with_page_shift(
        slot_size: usize,
        cap: usize,
        max_cap: usize,
        isn: SeqNo,
        page_shift: u32,
    ) -> Self {
        Self::with_shifts(slot_size, cap, max_cap, isn, page_shift, META_SHIFT)
    }

    fn with_shifts(
        slot_size: usize,
        cap: usize,
        max_cap: usize,
        isn: SeqNo,
        page_shift: u32,
        meta_shift: u32,
    ) -> Self {
        let cap = cap.min(max_cap).max(2);
        RecvBuffer {
            slot_size,
            cap,
            max_cap: max_cap.max(cap),
            pages: Self::no_pages(cap, page_shift),
            page_shift,
            spare: Vec::new(),
            meta: Vec::new(),
            meta_shift,
            meta_held: 0,
            meta_spare: Vec::new(),
            allocated: 0,
            pages_new: 0,
            offered: None,
            pressure: Pressure::default(),
            read_seq: isn,
            head: 0,
            read_off: 0,
            count: 0,
            last_read_pkts: 0,
            bytes: 0,
            kept: 0,
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }
    pub fn count(&self) -> usize {
        self.count
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    /// Payloads stored without a copy so far.
    pub fn kept(&self) -> u64 {
        self.kept
    }
    pub fn read_seq(&self) -> SeqNo {
        self.read_seq
    }

    /// Slots per page: one for slots of [`OWNED_PAYLOAD_MIN`] bytes or more, else the largest
    /// power of two whose page is at most [`PAGE_BYTES`].
    fn page_shift_for(slot_size: usize) -> u32 {
        if slot_size >= OWNED_PAYLOAD_MIN {
            return 0;
        }
        (PAGE_BYTES / slot_size.max(1)).max(1).ilog2()
    }

    /// The page table of a ring of `cap` slots, no page allocated.
    fn no_pages(cap: usize, page_shift: u32) -> Vec<Vec<u8>> {
        let per_page = 1 << page_shift;
        let mut pages = Vec::new();
        pages.resize_with(cap.div_ceil(per_page), Vec::new);
        pages
    }

    /// Bytes of page `p` (the last one may be shorter).
    fn page_len(&self, p: usize) -> usize {
        let per_page = 1 << self.page_shift;
        self.slot_size * per_page.min(self.cap - p * per_page)
    }

    /// The endpoint's memory pressure flag, shared with its other connections.
    pub fn set_pressure(&mut self, p: Pressure) {
        self.pressure = p;
    }

    /// Page `p`, allocated (from the spares when it is of their size) if it was not; `None`
    /// when that would take new memory under pressure.
    fn page_mut(&mut self, p: usize) -> Option<&mut Vec<u8>> {
        self.page_alloc(p, self.pressure.on())
    }

    /// [`RecvBuffer::page_mut`], refusing new memory only if `refuse` (growth, which was
    /// admitted, moves the packets it holds whatever the pressure now).
    fn page_alloc(&mut self, p: usize, refuse: bool) -> Option<&mut Vec<u8>> {
        if self.pages[p].is_empty() {
            let len = self.page_len(p);
            self.pages[p] = match self.spare.pop() {
                Some(page) if page.len() == len => page,
                other => {
                    self.spare.extend(other);
                    if refuse {
                        return None;
                    }
                    self.pages_new += 1;
                    vec![0; len]
                }
            };
            self.allocated += 1;
        }
        Some(&mut self.pages[p])
    }

    /// The metadata of slot `i`.
    fn m(&self, i: usize) -> &RSlot {
        let mask = (1 << self.meta_shift) - 1;
        self.meta
            .get(i >> self.meta_shift)
            .and_then(|c| c.get(i & mask))
            .unwrap_or(&EMPTY)
    }

    /// The metadata of slot `i` to write, its chunk (and the chunks' table) allocated if it
    /// was not; `None` when that would take new memory under pressure.
    fn m_mut(&mut self, i: usize) -> Option<&mut RSlot> {
        self.m_alloc(i, self.pressure.on())
    }

    /// [`RecvBuffer::m_mut`], refusing new memory only if `refuse`.
    fn m_alloc(&mut self, i: usize, refuse: bool) -> Option<&mut RSlot> {
        let (c, k) = (i >> self.meta_shift, i & ((1 << self.meta_shift) - 1));
        if self.meta.is_empty() {
            if refuse {
                return None;
            }
            self.meta = Self::no_meta(self.cap, self.meta_shift);
        }
        if self.meta.get(c)?.is_empty() {
            let chunk = match self.meta_spare.pop() {
                Some(chunk) => chunk,
                None if refuse => return None,
                None => vec![EMPTY; 1 << self.meta_shift],
            };
            self.meta[c] = chunk;
            self.meta_held += 1;
        }
        self.meta.get_mut(c)?.get_mut(k)
    }

    /// The chunks' table of a ring of `cap` slots, no chunk allocated.
    fn no_meta(cap: usize, meta_shift: u32) -> Vec<Vec<RSlot>> {
        let mut t = Vec::new();
        t.resize_with(cap.div_ceil(1 << meta_shift), Vec::new);
        t
    }

    /// Takes metadata chunk `c` out of the table into the spares (or frees it) unless one of
    /// its slots holds a packet.
    fn retire_meta(&mut self, c: usize) {
        let Some(chunk) = self.meta.get_mut(c) else {
            return;
        };
        if chunk.is_empty() || chunk.iter().any(|m| m.present) {
            return;
        }
        let mut chunk = std::mem::take(chunk);
        self.meta_held -= 1;
        if self.meta_spare.len() < META_POOL {
            chunk.fill(EMPTY);
            self.meta_spare.push(chunk);
        }
    }

    /// Gives back every page and the metadata when nothing is held: a connection that has
    /// stopped receiving costs its page table only. Returns whether it released anything.
    pub fn release_idle(&mut self) -> bool {
        if self.count > 0 || self.read_off > 0 {
            return false;
        }
        let held = !self.meta.is_empty()
            || !self.meta_spare.is_empty()
            || !self.spare.is_empty()
            || self.allocated > 0;
        if !held {
            return false;
        }
        self.meta = Vec::new();
        self.meta_held = 0;
        self.meta_spare = Vec::new();
        self.spare = Vec::new();
        self.pages.iter_mut().for_each(|p| *p = Vec::new());
        self.allocated = 0;
        held
    }

    /// Bytes of memory the buffer holds now (pages, spares, metadata and its table),
    /// counting a short last page as a whole one.
    pub fn held_bytes(&self) -> usize {
        (self.allocated + self.spare.len()) * self.page_bytes()
            + (self.meta_held + self.meta_spare.len())
                * (std::mem::size_of::<RSlot>() << self.meta_shift)
            + self.meta.capacity() * std::mem::size_of::<Vec<RSlot>>()
    }

    /// Offers a buffer to take the place of the next owned payload kept (before the
    /// buffer's own spares); [`RecvBuffer::take_offer`] gives it back if unused.
    pub fn offer(&mut self, b: Option<Vec<u8>>) {
        self.offered = b;
    }

    /// The buffer offered and not used.
    pub fn take_offer(&mut self) -> Option<Vec<u8>> {
        self.offered.take()
    }

    /// Pages allocated fresh (zeroed) rather than reused from the spares, since the start.
    pub fn pages_new(&self) -> u64 {
        self.pages_new
    }

    /// Slots per page: [`RecvBuffer::take_page`] hands out this many packets at a time.
    pub fn page_slots(&self) -> usize {
        1 << self.page_shift
    }

    /// Bytes a slot holds.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    fn page_bytes(&self) -> usize {
        self.slot_size << self.page_shift
    }

    /// Bytes of ring slot `i`: (page, start within the page).
    fn at(&self, i: usize) -> (usize, usize) {
        let mask = (1 << self.page_shift) - 1;
        (i >> self.page_shift, (i & mask) * self.slot_size)
    }

    fn slot(&self, i: usize, len: usize) -> &[u8] {
        let (p, o) = self.at(i);
        &self.pages[p][o..o + len]
    }

    fn idx(&self, off: usize) -> usize {
        let j = self.head + off;
        if j >= self.cap {
            j - self.cap
        } else {
            j
        }
    }

    /// Free slots from the highest `upto` (exclusive) to the end of the window.
    pub fn free_after(&self, upto: SeqNo) -> usize {
        let used = upto.diff(self.read_seq).max(0) as usize;
        self.cap.saturating_sub(used)
    }

    pub fn insert(
        &mut self,
        seq: SeqNo,
        pos: PacketPosition,
        msg_no: MsgNo,
        ts_us: u64,
        payload: Payload<'_>,
    ) -> Insert {
        let off = seq.diff(self.read_seq);
        if off < 0 {
            return Insert::Old;
        }
        if off as usize >= self.cap {
            return Insert::Overflow;
        }
        let i = self.idx(off as usize);
        if self.m(i).present {
            return Insert::Duplicate;
        }
        if self.m_mut(i).is_none() {
            return Insert::NoMemory;
        }
        let n = payload.len().min(self.slot_size);
        let (p, o) = self.at(i);
        match payload {
            Payload::Owned(buf, _) if self.page_shift == 0 && buf.len() == self.slot_size => {
                if self.pages[p].is_empty() {
                    // The caller's buffer becomes the page; it gets a spare (or a new
                    // buffer of the same length) back.
                    let offered = self.offered.take().filter(|b| b.len() == self.slot_size);
                    let back = match offered.or_else(|| self.spare.pop()) {
                        Some(page) => page,
                        None if self.pressure.on() => return Insert::NoMemory,
                        None => {
                            self.pages_new += 1;
                            vec![0; self.slot_size]
                        }
                    };
                    self.pages[p] = std::mem::replace(buf, back);
                    self.allocated += 1;
                } else {
                    std::mem::swap(&mut self.pages[p], buf);
                }
                self.kept += 1;
            }
            payload => {
                let Some(page) = self.page_mut(p) else {
                    return Insert::NoMemory;
                };
                page[o..o + n].copy_from_slice(&payload.bytes()[..n]);
            }
        }
        let Some(m) = self.m_mut(i) else {
            return Insert::NoMemory;
        };
        *m = RSlot {
            present: true,
            len: n as u32,
            pos,
            msg_no,
            ts_us,
        };
        self.count += 1;
        self.bytes += n as u64;
        Insert::Stored
    }

    pub fn is_present(&self, seq: SeqNo) -> bool {
        let off = seq.diff(self.read_seq);
        off >= 0 && (off as usize) < self.cap && self.m(self.idx(off as usize)).present
    }

    /// The head packet's metadata, if present.
    pub fn head(&self) -> Option<&RSlot> {
        let m = self.m(self.head);
        m.present.then_some(m)
    }

    fn advance(&mut self, n: usize) {
        let mask = self.page_slots() - 1;
        let meta_mask = (1 << self.meta_shift) - 1;
        for k in 0..n {
            let i = self.idx(k);
            let c = i >> self.meta_shift;
            if let Some(m) = self.meta.get_mut(c).and_then(|c| c.get_mut(i & meta_mask)) {
                if m.present {
                    m.present = false;
                    self.count -= 1;
                    self.bytes -= u64::from(m.len);
                }
            }
            if i & mask == mask || i + 1 == self.cap {
                // The read point leaves page `i`'s.
                self.retire_page(i >> self.page_shift);
            }
            if i & meta_mask == meta_mask || i + 1 == self.cap {
                self.retire_meta(c);
            }
        }
        self.head = self.idx(n);
        self.read_seq = self.read_seq.add(n as u32);
        self.read_off = 0;
    }

    /// Takes page `p` out of the ring into the spares (or frees it) once the read point has
    /// left it, unless it holds packets: those at the far end of a full window land in the
    /// slots just behind the read point.
    fn retire_page(&mut self, p: usize) {
        if self.pages[p].is_empty() {
            return;
        }
        let first = p << self.page_shift;
        let last = (first + self.page_slots()).min(self.cap);
        if (first..last).any(|i| self.m(i).present) {
            return;
        }
        let page = std::mem::take(&mut self.pages[p]);
        self.allocated -= 1;
        self.keep_spare(page);
    }

    /// Stream read: copies contiguous bytes of packets before `limit` into `out`. With
    /// `to_page`, stops at the end of the head's page (so that the next read may take a
    /// whole page, see [`RecvBuffer::take_page`]).
    pub fn read_stream(&mut self, limit: SeqNo, out: &mut [u8], to_page: bool) -> usize {
        let mut done = 0;
        let mask = self.page_slots() - 1;
        while done < out.len() && self.read_seq.lt(limit) {
            if to_page && done > 0 && self.read_off == 0 && self.head & mask == 0 {
                break;
            }
            let m = *self.m(self.head);
            if !m.present {
                break;
            }
            let avail = m.len as usize - self.read_off;
            let n = avail.min(out.len() - done);
            let from = &self.slot(self.head, m.len as usize)[self.read_off..];
            out[done..done + n].copy_from_slice(&from[..n]);
            done += n;
            if n == avail {
                // advance() subtracts the whole packet; undo the partial reads counted so far.
                self.bytes += self.read_off as u64;
                self.advance(1);
            } else {
                self.read_off += n;
                self.bytes -= n as u64;
            }
        }
        done
    }

    /// Stream read without a copy: when the head starts a (whole) page and that page holds
    /// [`RecvBuffer::page_slots`] full-size packets (for pages of one slot: one packet of any
    /// size), all before `limit`, takes the page out of the ring (a spare, or a new page,
    /// takes its place) and returns it with how many of its bytes are the stream's next ones.
    /// `None` otherwise.
    pub fn take_page(&mut self, limit: SeqNo) -> Option<(Vec<u8>, usize)> {
        let n = self.page_slots();
        let aligned = self.head & (n - 1) == 0 && self.read_off == 0;
        if !aligned || self.head + n > self.cap || limit.diff(self.read_seq) < n as i32 {
            return None;
        }
        let head = *self.m(self.head);
        let len = if n == 1 && head.present {
            head.len as usize
        } else if (self.head..self.head + n).all(|i| {
            let m = self.m(i);
            m.present && m.len as usize == self.slot_size
        }) {
            self.page_bytes()
        } else {
            return None;
        };
        // An unallocated page takes its place: the next packet to land in it allocates (or
        // takes a spare).
        let page = std::mem::take(&mut self.pages[self.head >> self.page_shift]);
        self.allocated -= 1;
        self.advance(n);
        Some((page, len))
    }

    /// Gives back a page from [`RecvBuffer::take_page`] for reuse, one for each page taken:
    /// kept (if it is of the page size) up to as many as the ring has pages, or
    /// [`PAGE_POOL`] under memory pressure. The packets that land while the reader holds
    /// its pages need as many: with the bound of retired pages, pages given back while the
    /// reader emptied the ring found it nearly empty and were freed, and the receiving
    /// thread zeroed fresh ones, 12-16 % of a loopback listener's time with one stream.
    /// An idle buffer frees them ([`RecvBuffer::release_idle`]).
    pub fn give_page(&mut self, page: Vec<u8>) {
        let keep = if self.pressure.on() {
            PAGE_POOL
        } else {
            PAGE_POOL.max(self.pages.len())
        };
        if page.len() == self.page_bytes() && self.spare.len() < keep {
            self.spare.push(page);
        }
    }

    /// Keeps a retired page as a spare if it is of the page size and fewer than
    /// [`PAGE_POOL`], or than the ring holds within [`PAGE_POOL_BYTES`], are spare; frees
    /// it otherwise.
    fn keep_spare(&mut self, page: Vec<u8>) {
        let batch = (PAGE_POOL_BYTES / self.page_bytes().max(1)).min(self.allocated);
        let keep = PAGE_POOL.max(batch);
        if page.len() == self.page_bytes() && self.spare.len() < keep {
            self.spare.push(page);
        }
    }

    /// Length in packets and bytes of the complete message at the head, if complete and all of
    /// it lies before `limit`.
    pub fn head_message(&self, limit: SeqNo) -> Option<(usize, usize)> {
        let first = *self.m(self.head);
        if !first.present {
            return None;
        }
        let avail = limit.diff(self.read_seq).max(0) as usize;
        let mut bytes = 0usize;
        for k in 0..avail.min(self.cap) {
            let m = self.m(self.idx(k));
            if !m.present || (k > 0 && (m.pos.is_first() || m.msg_no != first.msg_no)) {
                return None;
            }
            bytes += m.len as usize;
            if m.pos.is_last() {
                return Some((k + 1, bytes));
            }
        }
        None
    }

    /// Message read: copies the complete message at the head into `out`.
    pub fn read_message(&mut self, limit: SeqNo, out: &mut [u8]) -> MsgRead {
        let Some((pkts, bytes)) = self.head_message(limit) else {
            return MsgRead::None;
        };
        if bytes > out.len() {
            return MsgRead::TooSmall(bytes);
        }
        let mut done = 0;
        for k in 0..pkts {
            let i = self.idx(k);
            let len = self.m(i).len as usize;
            out[done..done + len].copy_from_slice(self.slot(i, len));
            done += len;
        }
        self.advance(pkts);
        self.last_read_pkts = pkts;
        MsgRead::Done(done)
    }

    /// Skips the head slot if it holds a packet that does not start a message (a fragment whose
    /// beginning was dropped). Returns whether it skipped.
    pub fn skip_orphan_head(&mut self) -> bool {
        let m = *self.m(self.head);
        if m.present && !m.pos.is_first() {
            self.advance(1);
            return true;
        }
        false
    }

    /// Drops everything before `seq` as [`drop_before`](Self::drop_before) does, and sorts
    /// what it drops: empty slots before `sender_upto` (the sender dropped them), other
    /// empty slots, and slots that held packets.
    pub fn drop_before_counted(&mut self, seq: SeqNo, sender_upto: SeqNo) -> (usize, usize, usize) {
        let n = (seq.diff(self.read_seq).max(0) as usize).min(self.cap);
        let by_sender = (sender_upto.diff(self.read_seq).max(0) as usize).min(n);
        let mut sender = 0;
        for k in 0..by_sender {
            if !self.m(self.idx(k)).present {
                sender += 1;
            }
        }
        let (slots, present) = self.drop_before(seq);
        (sender, slots - present - sender, present)
    }

    /// Packets the last [`read_message`](Self::read_message) delivered.
    pub fn last_read_pkts(&self) -> usize {
        self.last_read_pkts
    }

    /// Drops everything before `seq` (too late, or the sender dropped it). Returns how many
    /// slots were skipped and how many of them held packets.
    pub fn drop_before(&mut self, seq: SeqNo) -> (usize, usize) {
        let n = seq.diff(self.read_seq);
        if n <= 0 {
            return (0, 0);
        }
        let n = (n as usize).min(self.cap);
        let before = self.count;
        self.bytes += self.read_off as u64;
        self.advance(n);
        (n, before - self.count)
    }

    /// The first present packet at or after the head, scanning at most up to `limit`.
    pub fn first_present(&self, limit: SeqNo) -> Option<(SeqNo, RSlot)> {
        let avail = limit.diff(self.read_seq).max(0) as usize;
        (0..avail.min(self.cap)).find_map(|k| {
            let m = *self.m(self.idx(k));
            m.present.then(|| (self.read_seq.add(k as u32), m))
        })
    }

    /// The first present packet after the first hole at or after the head (scanning up to
    /// `limit`): where delivery can resume if the hole is given up.
    pub fn first_present_after_hole(&self, limit: SeqNo) -> Option<(SeqNo, RSlot)> {
        let avail = (limit.diff(self.read_seq).max(0) as usize).min(self.cap);
        let hole = (0..avail).find(|&k| !self.m(self.idx(k)).present)?;
        (hole + 1..avail).find_map(|k| {
            let m = *self.m(self.idx(k));
            m.present.then(|| (self.read_seq.add(k as u32), m))
        })
    }

    /// Doubles the capacity up to the cap. Returns whether it grew.
    ///
    /// The packets held keep their slots, except those the ring had wrapped to its start,
    /// which move to the new half: whole pages by pointer, and of the page the read point is
    /// in, the slots before it by copy. So growing copies at most one page (and the slots'
    /// metadata), not the buffer, whatever its size. Rings that are not a whole number of
    /// pages, or do not quite double (the last step to the cap), are laid out again by copy.
    pub fn grow(&mut self) -> bool {
        if self.cap >= self.max_cap || self.pressure.on() {
            return false;
        }
        let new_cap = (self.cap * 2).min(self.max_cap);
        let per = self.page_slots();
        if new_cap == 2 * self.cap && self.cap.is_multiple_of(per) {
            self.grow_in_place(new_cap);
            return true;
        }
        self.grow_by_copy(new_cap);
        true
    }

    /// [`RecvBuffer::grow`] to twice a whole number of pages: see there.
    fn grow_in_place(&mut self, new_cap: usize) {
        let (old_cap, per) = (self.cap, self.page_slots());
        let old_pages = old_cap / per;
        self.pages.resize_with(new_cap / per, Vec::new);
        self.cap = new_cap;
        if self.meta.is_empty() {
            return;
        }
        self.meta
            .resize_with(new_cap.div_ceil(1 << self.meta_shift), Vec::new);
        let head_page = self.head / per;
        for p in 0..head_page {
            self.pages.swap(p, p + old_pages);
        }
        // The slots before the read point move to the new half: their metadata one by one,
        // and the bytes of those in the read point's page by copy.
        let meta_mask = (1 << self.meta_shift) - 1;
        for j in 0..self.head {
            let Some(m) = self
                .meta
                .get_mut(j >> self.meta_shift)
                .and_then(|c| c.get_mut(j & meta_mask))
                .map(|m| std::mem::replace(m, EMPTY))
            else {
                continue;
            };
            if !m.present {
                continue;
            }
            if j >= head_page * per {
                let len = m.len as usize;
                let (p, o) = self.at(j);
                let (q, _) = self.at(j + old_cap);
                // Growth was admitted: the page is allocated whatever the pressure now.
                if self.page_alloc(q, false).is_some() {
                    let (from, to) = if p < q {
                        let (a, b) = self.pages.split_at_mut(q);
                        (&a[p], &mut b[0])
                    } else {
                        let (a, b) = self.pages.split_at_mut(p);
                        (&b[0], &mut a[q])
                    };
                    to[o..o + len].copy_from_slice(&from[o..o + len]);
                }
            }
            self.put_meta(j + old_cap, m);
        }
        for c in 0..self.head.div_ceil(1 << self.meta_shift) {
            self.retire_meta(c);
        }
        self.allocated = self.pages.iter().filter(|p| !p.is_empty()).count();
    }

    /// Stores the metadata of a packet that moved to slot `i` while growing: growth was
    /// admitted (it is refused under pressure), so its chunk is allocated whatever the
    /// pressure now, and a packet already acknowledged is never lost. (Only a slot past the
    /// ring, which growth never makes, could fail; that packet would go uncounted.)
    fn put_meta(&mut self, i: usize, m: RSlot) {
        match self.m_alloc(i, false) {
            Some(to) => *to = m,
            None => {
                debug_assert!(false, "slot {i} past a ring of {}", self.cap);
                self.count -= 1;
                self.bytes -= u64::from(m.len);
            }
        }
    }

    /// [`RecvBuffer::grow`] by laying the ring out again from the read point.
    fn grow_by_copy(&mut self, new_cap: usize) {
        let old_cap = self.cap;
        let old_head = self.head;
        let idx = |k: usize| (old_head + k) % old_cap;
        let mut old_pages =
            std::mem::replace(&mut self.pages, Self::no_pages(new_cap, self.page_shift));
        let old_meta = std::mem::take(&mut self.meta);
        self.meta_held = 0;
        self.cap = new_cap;
        self.head = 0;
        if old_meta.is_empty() {
            self.spare
                .extend(old_pages.into_iter().filter(|p| !p.is_empty()));
            let page_bytes = self.page_bytes();
            self.spare.retain(|p| p.len() == page_bytes);
            self.allocated = 0;
            return;
        }
        let (meta_shift, meta_mask) = (self.meta_shift, (1 << self.meta_shift) - 1);
        let old_m = |i: usize| {
            old_meta
                .get(i >> meta_shift)
                .and_then(|c| c.get(i & meta_mask))
                .copied()
                .unwrap_or(EMPTY)
        };
        if self.page_shift == 0 {
            // A page per slot: the pages move, in ring order.
            for k in 0..old_cap {
                let i = idx(k);
                self.pages[k] = std::mem::take(&mut old_pages[i]);
                let m = old_m(i);
                if m.present {
                    self.put_meta(k, m);
                }
            }
        } else {
            let mask = (1 << self.page_shift) - 1;
            for k in 0..old_cap {
                let i = idx(k);
                let m = old_m(i);
                if m.present {
                    let len = m.len as usize;
                    let (p, o) = (i >> self.page_shift, (i & mask) * self.slot_size);
                    let from = &old_pages[p][o..o + len];
                    let o = (k & mask) * self.slot_size;
                    // Growth was admitted: the page is allocated whatever the pressure now.
                    if let Some(page) = self.page_alloc(k >> self.page_shift, false) {
                        page[o..o + len].copy_from_slice(from);
                    }
                    self.put_meta(k, m);
                }
            }
            for page in old_pages {
                if !page.is_empty() {
                    self.keep_spare(page);
                }
            }
        }
        for mut chunk in old_meta {
            if !chunk.is_empty() && self.meta_spare.len() < META_POOL {
                chunk.fill(EMPTY);
                self.meta_spare.push(chunk);
            }
        }
        self.allocated = self.pages.iter().filter(|p| !p.is_empty()).count();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: u32) -> SeqNo {
        SeqNo::new(v)
    }

    #[test]
    fn stream_reads_contiguous_bytes_only() {
        let mut b = RecvBuffer::new(4, 8, 16, s(SeqNo::MAX));
        assert_eq!(
            b.insert(
                s(0),
                PacketPosition::Solo,
                MsgNo::new(1),
                0,
                Payload::Slice(b"efgh")
            ),
            Insert::Stored
        );
        let mut out = [0u8; 16];
        assert_eq!(b.read_stream(s(1), &mut out, false), 0, "head missing");
        b.insert(
            s(SeqNo::MAX),
            PacketPosition::Solo,
            MsgNo::new(1),
            0,
            Payload::Slice(b"abcd"),
        );
        assert_eq!(
            b.insert(
                s(SeqNo::MAX),
                PacketPosition::Solo,
                MsgNo::new(1),
                0,
                Payload::Slice(b"abcd")
            ),
            Insert::Duplicate
        );
        assert_eq!(b.read_stream(s(1), &mut out[..3], false), 3);
        assert_eq!(b.read_stream(s(1), &mut out[3..], false), 5);
        assert_eq!(&out[..8], b"abcdefgh");
        assert_eq!(b.bytes(), 0);
        assert_eq!(b.count(), 0);
        assert_eq!(
            b.insert(
                s(0),
                PacketPosition::Solo,
                MsgNo::new(1),
                0,
                Payload::Slice(b"x")
            ),
            Insert::Old
        );
        assert_eq!(
            b.insert(
                s(9),
                PacketPosition::Solo,
                MsgNo::new(1),
                0,
                Payload::Slice(b"x")
            ),
            Insert::Overflow
        );
    }

    fn put(b: &mut RecvBuffer, seq: u32, data: &[u8]) -> Insert {
        b.insert(
            s(seq),
            PacketPosition::Solo,
            MsgNo::new(1),
            0,
            Payload::Slice(data),
        )
    }

    #[test]
    fn pages_are_held_only_while_packets_span_them() {
        // 1456-byte slots, 8192 of them (12 MB of capacity): pages of 32 slots.
        let mut b = RecvBuffer::new(1456, 8192, 8192, s(0));
        assert_eq!(b.held_bytes(), 0, "nothing before the first packet");
        assert_eq!(b.page_slots(), 32);
        let page = 32 * 1456;
        // The chunks' table, and a chunk of metadata.
        let table = 8192 / 64 * std::mem::size_of::<Vec<RSlot>>();
        let chunk = 64 * std::mem::size_of::<RSlot>();
        let mut out = [0u8; 64];
        // A trickle of 64-byte messages read as they come, around the ring three times:
        // the pages and metadata the read point has left go back to a few spares, and the
        // buffer holds what a trickle needs, not what its capacity could.
        for k in 0..3 * 8192u32 {
            assert_eq!(put(&mut b, k, &[k as u8; 64]), Insert::Stored);
            assert_eq!(b.read_message(s(k + 1), &mut out), MsgRead::Done(64));
            let pages = b.pages.iter().filter(|p| !p.is_empty()).count();
            assert!(pages <= 1, "{pages} pages held at {k}");
            assert!(b.meta_held <= 1, "{} chunks held at {k}", b.meta_held);
            let most = (1 + PAGE_POOL) * page + (1 + META_POOL) * chunk + table;
            assert!(b.held_bytes() <= most, "at {k}");
            assert!(b.held_bytes() < 256 << 10, "at {k}");
        }
        // Out of order, a whole window ahead: the slots behind the read point hold the far
        // end of the window, and the page they lie on is kept until they are read.
        let base = 3 * 8192u32;
        for k in (base + 1..base + 8192).rev() {
            assert_eq!(put(&mut b, k, &[k as u8; 64]), Insert::Stored);
        }
        assert_eq!(put(&mut b, base, &[base as u8; 64]), Insert::Stored);
        for k in base..base + 8192 {
            assert_eq!(
                b.read_message(s(k + 1), &mut out),
                MsgRead::Done(64),
                "at {k}"
            );
            assert_eq!(out[0], k as u8);
        }
        // Empty again: everything goes back.
        assert!(b.release_idle());
        assert_eq!(b.held_bytes(), 0);
        assert_eq!(put(&mut b, base + 8192, b"x"), Insert::Stored);
        assert_eq!(b.read_message(s(base + 8193), &mut out), MsgRead::Done(1));
    }

    #[test]
    fn whole_pages_of_full_packets_are_taken_not_copied() {
        // Slots of 2 bytes, 20 of them: pages of 8 slots, the last one of 4.
        let mut b = RecvBuffer::with_page_shift(2, 20, 64, s(0), 3);
        assert_eq!(b.page_slots(), 8);
        for k in 0..8u32 {
            if k != 3 {
                put(&mut b, k, &[k as u8; 2]);
            }
        }
        assert_eq!(b.take_page(s(8)), None, "a hole");
        put(&mut b, 3, &[3; 2]);
        assert_eq!(b.take_page(s(7)), None, "not all acknowledged");
        let (page, len) = b.take_page(s(8)).expect("a whole page");
        assert_eq!(len, 16);
        assert_eq!(page, [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]);
        let first = page.as_ptr();
        assert_eq!((b.read_seq(), b.count(), b.bytes()), (s(8), 0, 0));
        // A short packet is copied, and the copy stops at the page's end.
        b.give_page(page);
        for k in 8..28u32 {
            let d = [k as u8; 2];
            assert_eq!(
                put(&mut b, k, if k == 9 { &d[..1] } else { &d }),
                Insert::Stored
            );
        }
        assert_eq!(b.take_page(s(28)), None, "a short packet");
        let mut out = [0u8; 64];
        assert_eq!(b.read_stream(s(28), &mut out, true), 15);
        assert_eq!(b.read_seq(), s(16));
        // The short last page is never taken; its copy stops where the ring wraps.
        assert_eq!(b.take_page(s(28)), None, "the short last page");
        assert_eq!(b.read_stream(s(28), &mut out[..5], true), 5);
        assert_eq!(b.read_stream(s(28), &mut out, true), 3);
        assert_eq!(b.read_seq(), s(20));
        let (page, _) = b.take_page(s(28)).expect("the first page again");
        assert_eq!(page[..4], [20, 20, 21, 21]);
        // The page given back held packets 8-15 and went back to the spares when the read
        // point left it; the pages the read point left are not held by the ring.
        assert_eq!(b.spare.len(), 1);
        assert_eq!(b.spare[0].as_ptr(), first);
        assert!(b.pages.iter().all(Vec::is_empty));
        // Without `to_page`, a copy runs past the end of a page.
        for k in 28..38u32 {
            put(&mut b, k, &[k as u8; 2]);
        }
        assert_eq!(b.read_stream(s(38), &mut out[..3], false), 3);
        assert_eq!(b.read_stream(s(38), &mut out, false), 17);
        assert_eq!(b.read_seq(), s(38));
    }

    proptest::proptest! {
        /// Reading by pages and copies, with packets arriving in any order and the buffer
        /// growing on the way, yields the stream exactly.
        #[test]
        fn paged_reads_yield_the_stream(
            order in proptest::collection::vec(0usize..6, 1..200),
            shorts in proptest::collection::vec(proptest::bool::weighted(0.05), 200),
            grow_at in proptest::collection::vec(0usize..200, 0..3),
            isn in proptest::prelude::any::<u32>(),
            one_slot_pages in proptest::bool::ANY,
            whole_pages in proptest::bool::ANY,
            owned in proptest::collection::vec(proptest::bool::ANY, 200),
            meta_shift in proptest::sample::select(vec![0u32, 1, 2, 3, META_SHIFT]),
        ) {
            let isn = SeqNo::new(isn & SeqNo::MAX);
            // Pages of 4 slots or of one, where owned payloads are swapped in. A capacity of
            // 8 (16, 32, 64) is a whole number of pages and grows in place; one of 5 (10,
            // 20, 40) is not and is laid out again.
            let shift = if one_slot_pages { 0 } else { 2 };
            let (cap, max) = if whole_pages { (8, 64) } else { (5, 40) };
            // Metadata in chunks of 1 to 8 slots (crossing pages, within them, wrapping
            // with the ring and moving with growth) or of the default 64.
            let mut b = RecvBuffer::with_shifts(3, cap, max, isn, shift, meta_shift);
            let mut pool = vec![0u8; 3];
            let total = order.len() as u32;
            let payload = |k: u32| -> Vec<u8> {
                let n = if shorts[k as usize] { 1 } else { 3 };
                (0..n).map(|j| (k as u8).wrapping_mul(3).wrapping_add(j)).collect()
            };
            let expected: Vec<u8> = (0..total).flat_map(payload).collect();
            // Arrival: each packet is delayed by up to `order[k]` places.
            let mut arrivals: Vec<(usize, u32)> =
                (0..total).map(|k| (k as usize + order[k as usize], k)).collect();
            arrivals.sort();
            let mut got = Vec::new();
            let mut spare = None;
            let mut pending: Vec<u32> = arrivals.iter().map(|a| a.1).collect();
            let mut step = 0usize;
            let mut contiguous = 0u32;
            while (got.len() < expected.len()) && step < 10_000 {
                step += 1;
                if grow_at.contains(&step) {
                    b.grow();
                }
                // Deliver what fits (the rest is dropped, to come again later), then read.
                pending.retain(|&k| {
                    let p = payload(k);
                    let stored = if owned[k as usize] {
                        pool[..p.len()].copy_from_slice(&p);
                        let r = b.insert(isn.add(k), PacketPosition::Solo, MsgNo::new(1), 0, Payload::Owned(&mut pool, p.len()));
                        assert_eq!(pool.len(), 3);
                        r
                    } else {
                        b.insert(isn.add(k), PacketPosition::Solo, MsgNo::new(1), 0, Payload::Slice(&p))
                    };
                    stored == Insert::Overflow
                });
                while b.is_present(isn.add(contiguous)) || isn.add(contiguous).lt(b.read_seq()) {
                    contiguous += 1;
                }
                let limit = isn.add(contiguous);
                if let Some(p) = spare.take() {
                    b.give_page(p);
                }
                if let Some((page, len)) = b.take_page(limit) {
                    got.extend_from_slice(&page[..len]);
                    spare = Some(page);
                } else {
                    let mut out = [0u8; 7];
                    let n = b.read_stream(limit, &mut out, true);
                    got.extend_from_slice(&out[..n]);
                }
            }
            proptest::prop_assert_eq!(got, expected);
            let any_owned = owned[..total as usize].iter().any(|&o| o);
            proptest::prop_assert_eq!(b.kept() > 0, one_slot_pages && any_owned);
            proptest::prop_assert_eq!(b.count(), 0);
            proptest::prop_assert_eq!(b.bytes(), 0);
            // Read to the end, the buffer holds the read point's chunk of metadata at most.
            proptest::prop_assert!(b.meta_held <= 1, "{} chunks", b.meta_held);
        }
    }

    #[test]
    fn owned_payloads_of_a_whole_slot_are_swapped_in_not_copied() {
        let mut b = RecvBuffer::with_page_shift(4, 4, 8, s(0), 0);
        let mut buf = b"abcd".to_vec();
        let given = buf.as_ptr();
        let pos = PacketPosition::Solo;
        assert_eq!(
            b.insert(s(0), pos, MsgNo::new(1), 0, Payload::Owned(&mut buf, 4)),
            Insert::Stored
        );
        // The caller got the slot's previous page back, of the same length.
        assert_ne!(buf.as_ptr(), given);
        assert_eq!(buf.len(), 4);
        // A short payload in a whole-slot buffer is swapped in too; its length is the packet's.
        buf.copy_from_slice(b"ef??");
        assert_eq!(
            b.insert(s(1), pos, MsgNo::new(1), 0, Payload::Owned(&mut buf, 2)),
            Insert::Stored
        );
        // A buffer of another length is copied from and left with the caller.
        let mut odd = b"ghijk".to_vec();
        let odd_at = odd.as_ptr();
        assert_eq!(
            b.insert(s(2), pos, MsgNo::new(1), 0, Payload::Owned(&mut odd, 4)),
            Insert::Stored
        );
        assert_eq!(odd.as_ptr(), odd_at);
        // A duplicate is neither stored nor swapped.
        let mut dup = b"zzzz".to_vec();
        let dup_at = dup.as_ptr();
        assert_eq!(
            b.insert(s(0), pos, MsgNo::new(1), 0, Payload::Owned(&mut dup, 4)),
            Insert::Duplicate
        );
        assert_eq!(dup.as_ptr(), dup_at);
        assert_eq!(b.kept(), 2);
        let (page, len) = b.take_page(s(3)).expect("a whole slot");
        assert_eq!((page.as_ptr(), &page[..len]), (given, &b"abcd"[..]));
        // With pages of one slot, a short packet is a page too.
        let (page, len) = b.take_page(s(3)).expect("a short slot");
        assert_eq!(&page[..len], b"ef");
        assert_eq!(page.len(), 4);
        let mut out = [0u8; 8];
        assert_eq!(b.read_stream(s(3), &mut out, true), 4);
        assert_eq!(&out[..4], b"ghij");
    }

    #[test]
    fn messages_complete_before_delivery_and_survive_growth() {
        let mut b = RecvBuffer::new(2, 4, 8, s(0));
        b.insert(
            s(0),
            PacketPosition::First,
            MsgNo::new(7),
            0,
            Payload::Slice(b"ab"),
        );
        b.insert(
            s(2),
            PacketPosition::Last,
            MsgNo::new(7),
            0,
            Payload::Slice(b"e"),
        );
        let mut out = [0u8; 8];
        assert_eq!(b.read_message(s(3), &mut out), MsgRead::None);
        assert!(b.grow());
        b.insert(
            s(1),
            PacketPosition::Middle,
            MsgNo::new(7),
            0,
            Payload::Slice(b"cd"),
        );
        assert_eq!(b.read_message(s(3), &mut out[..2]), MsgRead::TooSmall(5));
        assert_eq!(b.read_message(s(3), &mut out), MsgRead::Done(5));
        assert_eq!(&out[..5], b"abcde");
    }
}
