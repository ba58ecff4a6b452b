//! The receiver's buffer: a ring indexed by sequence number from the next packet the application
//! will read. Out-of-order packets wait in place; the application reads bytes (stream) or whole
//! messages. Capacity grows by doubling up to a memory cap; otherwise nothing allocates.
//!
//! The ring's memory is a run of pages of [`RecvBuffer::page_slots`] slots each (the last
//! may be shorter). In stream
//! mode the application may take a whole page of in-order, full packets out of the ring
//! instead of copying it ([`RecvBuffer::take_page`]): a spare page takes its place, and the
//! application hands the page back when done with it ([`RecvBuffer::give_page`]).

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

/// About how many bytes a page holds: slots of 1456 bytes make pages of 512 (728 KiB). Small
/// enough to stay in cache while the application writes it out and hashes it.
const PAGE_BYTES: usize = 1 << 20;
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
const PAGE_POOL: usize = 4;
/// ...and as many as this many bytes make: a reader that takes a batch of small pages
/// (a megabyte of 64 KiB ones) hands them all back.
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
    /// `cap` is not a whole number of pages.
    pages: Vec<Vec<u8>>,
    /// log2 of the slots per page.
    page_shift: u32,
    /// Spare (whole) pages for [`RecvBuffer::take_page`].
    spare: Vec<Vec<u8>>,
    meta: Vec<RSlot>,
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
        Self::with_page_shift(
            slot_size,
            cap,
            max_cap,
            isn,
            Self::page_shift_for(slot_size),
        )
    }

    fn with_page_shift(
        slot_size: usize,
        cap: usize,
        max_cap: usize,
        isn: SeqNo,
        page_shift: u32,
    ) -> Self {
        let cap = cap.min(max_cap).max(2);
        RecvBuffer {
            slot_size,
            cap,
            max_cap: max_cap.max(cap),
            pages: Self::alloc_pages(cap, page_shift, slot_size),
            page_shift,
            spare: Vec::new(),
            meta: vec![EMPTY; cap],
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

    fn alloc_pages(cap: usize, page_shift: u32, slot_size: usize) -> Vec<Vec<u8>> {
        let per_page = 1 << page_shift;
        (0..cap.div_ceil(per_page))
            .map(|p| vec![0; slot_size * per_page.min(cap - p * per_page)])
            .collect()
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
        if self.meta[i].present {
            return Insert::Duplicate;
        }
        let n = payload.len().min(self.slot_size);
        let (p, o) = self.at(i);
        match payload {
            Payload::Owned(buf, _) if self.page_shift == 0 && buf.len() == self.slot_size => {
                std::mem::swap(&mut self.pages[p], buf);
                self.kept += 1;
            }
            payload => self.pages[p][o..o + n].copy_from_slice(&payload.bytes()[..n]),
        }
        self.meta[i] = RSlot {
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
        off >= 0 && (off as usize) < self.cap && self.meta[self.idx(off as usize)].present
    }

    /// The head packet's metadata, if present.
    pub fn head(&self) -> Option<&RSlot> {
        let m = &self.meta[self.head];
        m.present.then_some(m)
    }

    fn advance(&mut self, n: usize) {
        for k in 0..n {
            let i = self.idx(k);
            if self.meta[i].present {
                self.count -= 1;
                self.bytes -= u64::from(self.meta[i].len);
                self.meta[i].present = false;
            }
        }
        self.head = self.idx(n);
        self.read_seq = self.read_seq.add(n as u32);
        self.read_off = 0;
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
            let m = self.meta[self.head];
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
        let slots = &self.meta[self.head..self.head + n];
        let len = match slots {
            [m] if m.present => m.len as usize,
            _ if slots
                .iter()
                .all(|m| m.present && m.len as usize == self.slot_size) =>
            {
                self.page_bytes()
            }
            _ => return None,
        };
        let fresh = match self.spare.pop() {
            Some(p) => p,
            None => vec![0; self.page_bytes()],
        };
        let page = std::mem::replace(&mut self.pages[self.head >> self.page_shift], fresh);
        self.advance(n);
        Some((page, len))
    }

    /// Gives back a page from [`RecvBuffer::take_page`] for reuse (kept if it is of the
    /// page size and fewer than a few are spare).
    pub fn give_page(&mut self, page: Vec<u8>) {
        let keep = PAGE_POOL.max(PAGE_POOL_BYTES / self.page_bytes().max(1));
        if page.len() == self.page_bytes() && self.spare.len() < keep {
            self.spare.push(page);
        }
    }

    /// Length in packets and bytes of the complete message at the head, if complete and all of
    /// it lies before `limit`.
    pub fn head_message(&self, limit: SeqNo) -> Option<(usize, usize)> {
        let first = self.meta[self.head];
        if !first.present {
            return None;
        }
        let avail = limit.diff(self.read_seq).max(0) as usize;
        let mut bytes = 0usize;
        for k in 0..avail.min(self.cap) {
            let m = &self.meta[self.idx(k)];
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
            let len = self.meta[i].len as usize;
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
        let m = self.meta[self.head];
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
            if !self.meta[self.idx(k)].present {
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
            let m = self.meta[self.idx(k)];
            m.present.then(|| (self.read_seq.add(k as u32), m))
        })
    }

    /// The first present packet after the first hole at or after the head (scanning up to
    /// `limit`): where delivery can resume if the hole is given up.
    pub fn first_present_after_hole(&self, limit: SeqNo) -> Option<(SeqNo, RSlot)> {
        let avail = (limit.diff(self.read_seq).max(0) as usize).min(self.cap);
        let hole = (0..avail).find(|&k| !self.meta[self.idx(k)].present)?;
        (hole + 1..avail).find_map(|k| {
            let m = self.meta[self.idx(k)];
            m.present.then(|| (self.read_seq.add(k as u32), m))
        })
    }

    /// Doubles the capacity up to the cap. Returns whether it grew.
    pub fn grow(&mut self) -> bool {
        if self.cap >= self.max_cap {
            return false;
        }
        let new_cap = (self.cap * 2).min(self.max_cap);
        let page_shift = self.page_shift;
        let mut meta = vec![EMPTY; new_cap];
        let pages = if page_shift == 0 {
            // A page per slot: the pages move, in ring order; only the new slots allocate.
            let mut pages = Vec::with_capacity(new_cap);
            for (k, m) in meta.iter_mut().enumerate().take(self.cap) {
                let i = self.idx(k);
                pages.push(std::mem::take(&mut self.pages[i]));
                *m = self.meta[i];
            }
            pages.resize_with(new_cap, || vec![0; self.slot_size]);
            pages
        } else {
            let mut pages = Self::alloc_pages(new_cap, page_shift, self.slot_size);
            let mask = (1 << page_shift) - 1;
            for k in 0..self.cap {
                let i = self.idx(k);
                if self.meta[i].present {
                    let len = self.meta[i].len as usize;
                    let o = (k & mask) * self.slot_size;
                    pages[k >> page_shift][o..o + len].copy_from_slice(self.slot(i, len));
                }
                meta[k] = self.meta[i];
            }
            pages
        };
        self.pages = pages;
        self.meta = meta;
        self.cap = new_cap;
        self.head = 0;
        true
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
        // The page given back took its place in the ring.
        assert_eq!(b.pages[0].as_ptr(), first);
        assert!(b.spare.is_empty());
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
            owned in proptest::collection::vec(proptest::bool::ANY, 200),
        ) {
            let isn = SeqNo::new(isn & SeqNo::MAX);
            // Pages of 4 slots (the capacity, 5, 10, 20, is not a whole number of them) or
            // of one, where owned payloads are swapped in.
            let shift = if one_slot_pages { 0 } else { 2 };
            let mut b = RecvBuffer::with_page_shift(3, 5, 40, isn, shift);
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
