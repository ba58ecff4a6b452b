//! The sender's buffer: packets not yet acknowledged, in sequence order, their metadata in
//! one ring. Its capacity (how many packets the application may queue) grows, doubling up to
//! a memory cap, when the connection is limited by it. The ring itself is allocated with the
//! first packet, starts small and doubles only when what is held outgrows it, and is given
//! back once the buffer has been empty a while ([`SendBuffer::release_idle`]), with the
//! payload pages: a live stream of a few hundred packets in flight then keeps cycling through
//! the same warm memory instead of touching megabytes of fresh pages (a page fault each
//! 4 KiB), and an idle connection holds little. Between growths, writing, sending and
//! acknowledging allocate nothing.
//!
//! Every packet's payload lies in a chunk, in order. Bytes the application writes
//! ([`SendBuffer::push_stream`], [`SendBuffer::push_message`]) are copied into log pages,
//! packed one after the other whatever their size: 64-byte messages take 64 bytes of memory
//! and of cache, not a packet-sized slot each. Other chunks are a buffer the application
//! filled on its own and handed over whole ([`SendBuffer::push_chunk`]), or a range of bytes
//! it shares read-only, such as a mapped file ([`SendBuffer::push_shared`]), cut into packets
//! where it lies. Chunks leave in order as their packets are acknowledged: log pages are kept
//! for the next writes, the application's buffers wait in a pool (both bounded by the
//! buffer's free room) for it to take them back ([`SendBuffer::take_chunk`]) and fill them
//! again, shared bytes are let go.

use super::Pressure;
use crate::seq::{MsgNo, SeqNo};
use crate::wire::PacketPosition;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

/// Read-only bytes the application shares with a connection, for it to send from where they
/// lie (for example a mapped file): see [`crate::conn::Connection::send_shared`]. `as_ref()`
/// must return the same bytes (at least as many) for as long as the connection holds them:
/// packets beyond a shrunk end cannot be sent, and the connection stalls.
pub type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Where a chunk's packets lie.
enum Held {
    /// A log page: payloads copied in, one after the other (its capacity is the buffer's
    /// `log_page`; nothing is written beyond it).
    Log(Vec<u8>),
    /// A buffer of the application's, pooled once acknowledged.
    Buf(Vec<u8>),
    /// Shared bytes from this offset on.
    Shared(SharedBytes, usize),
}

impl Held {
    fn bytes(&self) -> &[u8] {
        match self {
            Held::Log(b) | Held::Buf(b) => b,
            Held::Shared(s, start) => {
                let bytes = (**s).as_ref().get(*start..);
                debug_assert!(bytes.is_some(), "shared bytes shrank under the connection");
                bytes.unwrap_or_default()
            }
        }
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Held::Log(b) => write!(f, "Log({} bytes)", b.len()),
            Held::Buf(b) => write!(f, "Buf({} bytes)", b.len()),
            Held::Shared(_, start) => write!(f, "Shared(from {start})"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct SlotMeta {
    pub len: u32,
    pub msg_no: MsgNo,
    pub pos: PacketPosition,
    pub in_order: bool,
    /// When the application handed the data over, µs since connection start.
    pub origin_us: u64,
    /// When it was last sent (0 = never), µs since connection start.
    pub last_sent_us: u64,
    /// Sent more than once.
    pub retransmitted: bool,
    /// The number of the chunk that holds the payload, at byte `off`.
    chunk: u64,
    off: u32,
}

/// The longest chunk: packets are found in one by a 32-bit offset.
pub const MAX_CHUNK: usize = u32::MAX as usize;
/// Chunks the pool keeps for reuse even when the buffer has no free room for them (and as
/// many log pages).
const CHUNK_POOL: usize = 4;
/// Full packets' worth of bytes the ring starts with once a packet is queued (128 slots
/// for 1456-byte payloads, 2 for 64 KiB ones), at least [`MIN_RING`] slots and at most the
/// capacity.
const INITIAL_RING_BYTES: usize = 128 * 1456;
/// Fewest slots the ring starts with.
const MIN_RING: usize = 2;
/// About how many bytes a log page holds: whole full-size packets, at least
/// [`LOG_PAGE_PACKETS`].
const LOG_PAGE_BYTES: usize = 64 << 10;
const LOG_PAGE_PACKETS: usize = 4;

const EMPTY: SlotMeta = SlotMeta {
    chunk: 0,
    off: 0,
    len: 0,
    msg_no: MsgNo::new(0),
    pos: PacketPosition::Solo,
    in_order: true,
    origin_us: 0,
    last_sent_us: 0,
    retransmitted: false,
};

#[derive(Debug)]
pub(crate) struct SendBuffer {
    slot_size: usize,
    /// Packets the buffer may hold now (it grows up to `max_cap`).
    cap: usize,
    max_cap: usize,
    /// Slots of `meta` allocated. At most `cap`; doubled by [`SendBuffer::reserve`] when
    /// what is held outgrows it.
    ring: usize,
    meta: Vec<SlotMeta>,
    /// Bytes a log page holds.
    log_page: usize,
    /// Log pages whose packets were all acknowledged, for the next writes: at most
    /// [`CHUNK_POOL`], or as many as the free room would fill.
    log_spare: Vec<Vec<u8>>,
    /// Bytes of the log pages allocated, in chunks and spare.
    log_bytes: usize,
    /// Sequence number of the oldest packet held.
    base: SeqNo,
    head: usize,
    len: usize,
    /// How many of the held packets have been sent at least once (they come first).
    sent: usize,
    /// How many of the held packets have been retransmitted at least once.
    retransmitted: usize,
    bytes: u64,
    next_msg: MsgNo,
    /// Chunks still holding packets, oldest first: log pages and what the application
    /// handed over, and how many of their packets are held. The front one is number
    /// `chunk_base`; the last one, if a log page, takes the next bytes written while it has
    /// room.
    chunks: VecDeque<(Held, usize)>,
    chunk_base: u64,
    /// Chunks whose packets were all acknowledged, for reuse, and their bytes: at most
    /// [`CHUNK_POOL`] chunks, or as many as the buffer's free room would hold (memory its cap
    /// allows anyway, and what the application fills next). One acknowledgement may free
    /// many chunks at once; dropping all but a few would make the application allocate
    /// (and zero) most of the stream anew.
    pool: Vec<Vec<u8>>,
    pool_bytes: usize,
    /// Set while the endpoint's buffers are over its memory budget: the ring does not grow
    /// then, and the room left is what the ring has ([`SendBuffer::limit`]).
    pressure: Pressure,
}

/// Why a message could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PushError {
    /// Not enough free space now.
    Full,
    /// Larger than the buffer can ever hold.
    TooLarge,
}

impl SendBuffer {
    pub fn new(slot_size: usize, cap: usize, max_cap: usize, isn: SeqNo) -> Self {
        let cap = cap.min(max_cap).max(2);
        let slot = slot_size.max(1);
        SendBuffer {
            slot_size,
            cap,
            max_cap: max_cap.max(cap),
            ring: 0,
            meta: Vec::new(),
            log_page: slot * (LOG_PAGE_BYTES / slot).max(LOG_PAGE_PACKETS),
            log_spare: Vec::new(),
            log_bytes: 0,
            base: isn,
            head: 0,
            len: 0,
            sent: 0,
            retransmitted: 0,
            bytes: 0,
            next_msg: MsgNo::new(1),
            chunks: VecDeque::new(),
            chunk_base: 0,
            pool: Vec::new(),
            pool_bytes: 0,
            pressure: Pressure::default(),
        }
    }

    /// The endpoint's memory pressure flag, shared with its other connections.
    pub fn set_pressure(&mut self, p: Pressure) {
        self.pressure = p;
    }

    /// Packets the buffer may hold now: its capacity, or under memory pressure what its
    /// ring already holds (at least a first small ring, so that every connection can make
    /// progress).
    fn limit(&self) -> usize {
        if self.pressure.on() {
            self.cap.min(self.ring.max(self.first_ring()))
        } else {
            self.cap
        }
    }

    /// Slots of the ring first allocated (a power of two, so that doubling reaches whole
    /// pages).
    fn first_ring(&self) -> usize {
        (INITIAL_RING_BYTES / self.slot_size.max(1))
            .max(MIN_RING)
            .next_power_of_two()
    }

    /// Copies `bytes` (at most a packet's) into the log, as one more packet of its page:
    /// into the last chunk if it is a log page with room, else into a fresh page. Returns
    /// the chunk's number and the offset of the bytes in it.
    fn log_append(&mut self, bytes: &[u8]) -> (u64, u32) {
        let (mut page, pkts) = match self.chunks.pop_back() {
            Some((Held::Log(p), n)) if p.len() + bytes.len() <= self.log_page => (p, n),
            other => {
                self.chunks.extend(other);
                let page = self.log_spare.pop().unwrap_or_else(|| {
                    self.log_bytes += self.log_page;
                    Vec::with_capacity(self.log_page)
                });
                (page, 0)
            }
        };
        let off = page.len() as u32;
        page.extend_from_slice(bytes);
        self.chunks.push_back((Held::Log(page), pkts + 1));
        (self.chunk_base + self.chunks.len() as u64 - 1, off)
    }

    /// Payload bytes a packet carries at most.
    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    pub fn cap(&self) -> usize {
        self.cap
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
    pub fn free_slots(&self) -> usize {
        self.limit().saturating_sub(self.len)
    }
    /// Oldest unacknowledged sequence number.
    pub fn base(&self) -> SeqNo {
        self.base
    }
    /// The next sequence number never sent.
    pub fn next_unsent(&self) -> SeqNo {
        self.base.add(self.sent as u32)
    }
    /// Packets queued but never sent.
    pub fn unsent(&self) -> usize {
        self.len - self.sent
    }
    /// Packets sent and not acknowledged.
    pub fn in_flight(&self) -> usize {
        self.sent
    }

    /// Packets held that have been retransmitted at least once.
    pub fn retransmitted(&self) -> usize {
        self.retransmitted
    }

    /// Forgets the first `n` held packets (n <= len); returns their bytes.
    fn release(&mut self, n: usize) -> u64 {
        let mut bytes = 0u64;
        let room = (self.cap - self.len + n) * self.slot_size;
        for k in 0..n {
            let m = self.meta[self.idx(k)];
            bytes += u64::from(m.len);
            self.retransmitted = self
                .retransmitted
                .saturating_sub(usize::from(m.retransmitted));
            self.release_chunk_packet(m.chunk, room);
        }
        self.head = self.idx(n);
        self.len -= n;
        self.sent = self.sent.saturating_sub(n);
        self.bytes -= bytes;
        self.base = self.base.add(n as u32);
        bytes
    }

    /// One packet of chunk `id` is no longer held; buffers and log pages with none left go
    /// to their pools while these hold fewer than [`CHUNK_POOL`] or at most `room` bytes,
    /// shared bytes are let go.
    fn release_chunk_packet(&mut self, id: u64, room: usize) {
        let Some(i) = id
            .checked_sub(self.chunk_base)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return;
        };
        if let Some(c) = self.chunks.get_mut(i) {
            c.1 = c.1.saturating_sub(1);
        }
        while self.chunks.front().is_some_and(|c| c.1 == 0) {
            let spare = self.log_spare.len() * self.log_page;
            match self.chunks.pop_front() {
                Some((Held::Buf(buf), _))
                    if self.pool.len() < CHUNK_POOL || self.pool_bytes + buf.len() <= room =>
                {
                    self.pool_bytes += buf.len();
                    self.pool.push(buf);
                }
                Some((Held::Log(mut page), _))
                    if self.log_spare.len() < CHUNK_POOL || spare + self.log_page <= room =>
                {
                    page.clear();
                    self.log_spare.push(page);
                }
                Some((Held::Log(_), _)) => self.log_bytes -= self.log_page,
                _ => {}
            }
            self.chunk_base += 1;
        }
    }

    /// Queues the first `len` bytes of `chunk` as stream data without copying them: cut into
    /// packets of [`SendBuffer::slot_size`] bytes (the last may be shorter) that stay in the
    /// chunk until acknowledged. Gives the chunk back if there are not enough free packets
    /// (or `len` is 0 or beyond the chunk).
    pub fn push_chunk(&mut self, chunk: Vec<u8>, len: usize, now_us: u64) -> Result<(), Vec<u8>> {
        if !self.fits_chunk(len, chunk.len()) {
            return Err(chunk);
        }
        self.push_held(Held::Buf(chunk), len, now_us);
        Ok(())
    }

    /// Queues `data[range]` as stream data without copying it, as [`SendBuffer::push_chunk`]
    /// does; the packets hold a reference to `data` until acknowledged. Returns false (and
    /// queues nothing) if there are not enough free packets, or the range is empty, beyond
    /// `data` or longer than [`MAX_CHUNK`].
    pub fn push_shared(&mut self, data: &SharedBytes, range: Range<usize>, now_us: u64) -> bool {
        let avail = (**data).as_ref().len();
        if range.start > range.end
            || range.end > avail
            || !self.fits_chunk(range.len(), range.len())
        {
            return false;
        }
        self.push_held(Held::Shared(data.clone(), range.start), range.len(), now_us);
        true
    }

    /// Whether `len` bytes of a chunk of `avail` can be queued now.
    fn fits_chunk(&self, len: usize, avail: usize) -> bool {
        let pkts = len.div_ceil(self.slot_size.max(1));
        len > 0 && len <= avail && len <= MAX_CHUNK && pkts <= self.free_slots()
    }

    /// Queues the first `len` bytes of `held` (checked by [`SendBuffer::fits_chunk`]).
    fn push_held(&mut self, held: Held, len: usize, now_us: u64) {
        let pkts = len.div_ceil(self.slot_size.max(1));
        self.reserve(self.len + pkts);
        let id = self.chunk_base + self.chunks.len() as u64;
        for k in 0..pkts {
            let off = k * self.slot_size;
            let n = self.slot_size.min(len - off);
            self.append_stream_packet(n, id, off as u32, now_us);
        }
        self.chunks.push_back((held, pkts));
    }

    /// Appends the metadata of a stream packet of `len` bytes held at `chunk`/`off`. The
    /// caller checked there is a free slot.
    fn append_stream_packet(&mut self, len: usize, chunk: u64, off: u32, now_us: u64) {
        let i = self.idx(self.len);
        let msg_no = self.next_msg;
        self.next_msg = self.next_msg.next();
        self.meta[i] = SlotMeta {
            len: len as u32,
            msg_no,
            pos: PacketPosition::Solo,
            in_order: false,
            origin_us: now_us,
            last_sent_us: 0,
            retransmitted: false,
            chunk,
            off,
        };
        self.len += 1;
        self.bytes += len as u64;
    }

    /// A chunk whose packets were all acknowledged, to fill again.
    pub fn take_chunk(&mut self) -> Option<Vec<u8>> {
        let c = self.pool.pop()?;
        self.pool_bytes -= c.len();
        Some(c)
    }

    fn idx(&self, i: usize) -> usize {
        let j = self.head + i;
        if j >= self.ring {
            j - self.ring
        } else {
            j
        }
    }

    /// Appends stream bytes: fills the last unsent packet, then new ones. Returns bytes taken.
    pub fn push_stream(&mut self, mut data: &[u8], now_us: u64) -> usize {
        let total = data.len();
        // Top up the last packet if it has not been sent yet and ends its log page (it is
        // the last bytes written there).
        if self.len > self.sent && !data.is_empty() {
            let i = self.idx(self.len - 1);
            let used = self.meta[i].len as usize;
            if let Some((Held::Log(page), held)) = self.chunks.back_mut() {
                debug_assert_eq!(page.len(), self.meta[i].off as usize + used);
                debug_assert!(*held > 0);
                let n = (self.slot_size - used)
                    .min(self.log_page - page.len())
                    .min(data.len());
                page.extend_from_slice(&data[..n]);
                self.meta[i].len += n as u32;
                self.bytes += n as u64;
                data = &data[n..];
            }
        }
        let want = self.len + data.len().div_ceil(self.slot_size.max(1));
        let limit = self.limit();
        self.reserve(want.min(limit));
        while !data.is_empty() && self.len < limit {
            let n = self.slot_size.min(data.len());
            let (chunk, off) = self.log_append(&data[..n]);
            self.append_stream_packet(n, chunk, off, now_us);
            data = &data[n..];
        }
        total - data.len()
    }

    /// Queues a whole message, split into packets with First/Middle/Last positions.
    pub fn push_message(&mut self, msg: &[u8], now_us: u64) -> Result<(), PushError> {
        let pkts = msg.len().div_ceil(self.slot_size).max(1);
        if pkts > self.max_cap {
            return Err(PushError::TooLarge);
        }
        if pkts > self.free_slots() {
            return Err(PushError::Full);
        }
        self.reserve(self.len + pkts);
        let msg_no = self.next_msg;
        self.next_msg = self.next_msg.next();
        for k in 0..pkts {
            let part = &msg
                [(k * self.slot_size).min(msg.len())..((k + 1) * self.slot_size).min(msg.len())];
            let (chunk, off) = self.log_append(part);
            let i = self.idx(self.len);
            let pos = match (k == 0, k + 1 == pkts) {
                (true, true) => PacketPosition::Solo,
                (true, false) => PacketPosition::First,
                (false, true) => PacketPosition::Last,
                (false, false) => PacketPosition::Middle,
            };
            self.meta[i] = SlotMeta {
                len: part.len() as u32,
                msg_no,
                pos,
                in_order: true,
                origin_us: now_us,
                last_sent_us: 0,
                retransmitted: false,
                chunk,
                off,
            };
            self.len += 1;
            self.bytes += part.len() as u64;
        }
        Ok(())
    }

    /// The packet with sequence number `seq`, if held.
    pub fn get(&self, seq: SeqNo) -> Option<(&SlotMeta, &[u8])> {
        let off = seq.diff(self.base);
        if off < 0 || off as usize >= self.len {
            return None;
        }
        let i = self.idx(off as usize);
        let m = &self.meta[i];
        let len = m.len as usize;
        let c = usize::try_from(m.chunk.checked_sub(self.chunk_base)?).ok()?;
        let start = m.off as usize;
        Some((m, self.chunks.get(c)?.0.bytes().get(start..start + len)?))
    }

    /// Marks `seq` sent at `now_us`; a first send moves the unsent boundary.
    pub fn mark_sent(&mut self, seq: SeqNo, now_us: u64, rexmit: bool) {
        let off = seq.diff(self.base);
        if off < 0 || off as usize >= self.len {
            return;
        }
        let i = self.idx(off as usize);
        self.meta[i].last_sent_us = now_us.max(1);
        if rexmit && !self.meta[i].retransmitted {
            self.meta[i].retransmitted = true;
            self.retransmitted += 1;
        }
        if off as usize == self.sent {
            self.sent += 1;
        }
    }

    /// Frees every packet before `upto`. Returns (packets, bytes) freed.
    pub fn ack(&mut self, upto: SeqNo) -> (u32, u64) {
        let n = upto.diff(self.base);
        if n <= 0 {
            return (0, 0);
        }
        let n = (n as usize).min(self.sent);
        let bytes = self.release(n);
        (n as u32, bytes)
    }

    /// Origin time of the oldest packet, if any.
    pub fn oldest_origin_us(&self) -> Option<u64> {
        (self.len > 0).then(|| self.meta[self.head].origin_us)
    }

    /// Drops the whole message that starts at the base (live mode, too old to be useful).
    /// Returns (first, last, msg_no, packets).
    pub fn drop_oldest_message(&mut self) -> Option<(SeqNo, SeqNo, MsgNo, u32)> {
        if self.len == 0 {
            return None;
        }
        let msg = self.meta[self.head].msg_no;
        let mut n = 0;
        while n < self.len && self.meta[self.idx(n)].msg_no == msg {
            n += 1;
        }
        let first = self.base;
        self.release(n);
        Some((first, self.base.sub(1), msg, n as u32))
    }

    /// Gives back the ring's memory and the pooled chunks when nothing is held (the
    /// connection has stopped sending for a while): the next packet allocates a small ring
    /// again. Returns whether it released anything.
    pub fn release_idle(&mut self) -> bool {
        if self.len > 0 || !self.chunks.is_empty() {
            return false;
        }
        let held = self.ring > 0 || !self.pool.is_empty() || !self.log_spare.is_empty();
        self.log_spare = Vec::new();
        self.log_bytes = 0;
        self.meta = Vec::new();
        self.ring = 0;
        self.head = 0;
        self.pool = Vec::new();
        self.pool_bytes = 0;
        held
    }

    /// Bytes of memory the buffer holds now (its ring, log pages and pooled chunks; not the
    /// chunks that hold packets, which are the application's).
    pub fn held_bytes(&self) -> usize {
        self.log_bytes + self.meta.capacity() * std::mem::size_of::<SlotMeta>() + self.pool_bytes
    }

    /// Doubles the capacity (up to the cap). Returns whether it grew. The ring follows only
    /// when what is held outgrows it ([`SendBuffer::reserve`]).
    pub fn grow(&mut self) -> bool {
        if self.cap >= self.max_cap || self.pressure.on() {
            return false;
        }
        self.cap = (self.cap * 2).min(self.max_cap);
        true
    }

    /// Makes the ring hold at least `pkts` packets (at most the capacity), doubling it. The
    /// packets keep their slots but for those wrapped to the ring's start: they move to the
    /// new part when it has room for them, else the whole ring is rotated to start at slot 0.
    /// Only metadata moves; payloads stay where they lie.
    fn reserve(&mut self, pkts: usize) {
        let pkts = pkts.min(self.cap);
        if pkts <= self.ring {
            return;
        }
        let mut ring = self.ring.max(self.first_ring());
        while ring < pkts {
            ring *= 2;
        }
        let ring = ring.min(self.cap);
        let old = self.ring;
        let wrapped = (self.head + self.len).saturating_sub(old);
        if wrapped > 0 && old + wrapped > ring {
            self.meta.rotate_left(self.head);
            self.head = 0;
        }
        self.meta.resize(ring, EMPTY);
        if self.head > 0 && wrapped > 0 {
            self.meta.copy_within(0..wrapped, old);
        }
        self.ring = ring;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_fills_packets_and_acks_free_them() {
        let mut b = SendBuffer::new(10, 4, 8, SeqNo::new(SeqNo::MAX - 1));
        assert_eq!(b.push_stream(b"hello", 0), 5);
        assert_eq!(b.push_stream(b"world!!", 0), 7); // tops up the unsent packet
        assert_eq!(b.len(), 2);
        assert_eq!(b.get(SeqNo::new(SeqNo::MAX - 1)).unwrap().1, b"helloworld");
        assert_eq!(b.get(SeqNo::new(SeqNo::MAX)).unwrap().1, b"!!");
        b.mark_sent(SeqNo::new(SeqNo::MAX - 1), 5, false);
        b.mark_sent(SeqNo::new(SeqNo::MAX), 5, false);
        assert_eq!(b.push_stream(&[1u8; 100], 0), 20);
        assert_eq!(b.ack(SeqNo::new(0)), (2, 12));
        assert_eq!(b.base(), SeqNo::new(0));
        assert!(b.grow());
        assert_eq!(b.get(SeqNo::new(0)).unwrap().1, &[1u8; 10]);
    }

    #[test]
    fn retransmitted_packets_are_counted_until_released() {
        let mut b = SendBuffer::new(10, 8, 16, SeqNo::new(SeqNo::MAX - 1));
        for _ in 0..6 {
            b.push_message(b"x", 0).unwrap();
        }
        for s in 0..6u32 {
            b.mark_sent(SeqNo::new(SeqNo::MAX - 1).add(s), 1, false);
        }
        assert_eq!(b.retransmitted(), 0);
        let seq = |s: u32| SeqNo::new(SeqNo::MAX - 1).add(s);
        b.mark_sent(seq(1), 2, true);
        b.mark_sent(seq(1), 3, true); // a second retransmission is the same packet
        b.mark_sent(seq(4), 2, true);
        assert_eq!(b.retransmitted(), 2);
        assert!(b.grow());
        assert_eq!(b.retransmitted(), 2);
        assert_eq!(b.ack(seq(2)), (2, 2));
        assert_eq!(b.retransmitted(), 1);
        // Live mode's drop releases packets too (one message a packet here).
        for _ in 0..3 {
            b.drop_oldest_message().unwrap();
        }
        assert_eq!(b.retransmitted(), 0);
        // A recycled slot starts clean.
        for _ in 0..10 {
            b.push_message(b"y", 0).unwrap();
        }
        assert_eq!(b.retransmitted(), 0);
    }

    /// Payloads of every held packet, in order.
    fn held(b: &SendBuffer) -> Vec<u8> {
        (0..b.len())
            .flat_map(|k| b.get(b.base().add(k as u32)).unwrap().1.to_vec())
            .collect()
    }

    #[test]
    fn chunks_are_cut_into_packets_in_place_and_come_back_when_acknowledged() {
        let isn = SeqNo::new(SeqNo::MAX - 2);
        let mut b = SendBuffer::new(4, 8, 64, isn);
        assert_eq!(b.push_stream(b"ab", 0), 2);
        // 10 bytes of a 12-byte chunk: packets of 4, 4 and 2, after the ring packet.
        let chunk: Vec<u8> = (b'c'..=b'n').collect();
        b.push_chunk(chunk, 10, 0).unwrap();
        assert_eq!(b.len(), 4);
        assert_eq!(b.bytes(), 12);
        // A chunk's last packet is not topped up: stream bytes start a ring packet.
        assert_eq!(b.push_stream(b"xy", 0), 2);
        assert_eq!(b.len(), 5);
        assert_eq!(held(&b), b"abcdefghijklxy");
        assert_eq!(b.get(isn.add(3)).unwrap().1, b"kl");
        // Not enough free packets: the chunk comes back untouched.
        let big = vec![7u8; 16];
        let back = b.push_chunk(big, 16, 0).unwrap_err();
        assert_eq!(back, vec![7u8; 16]);
        assert!(b.push_chunk(vec![1], 0, 0).is_err(), "empty");
        assert!(b.push_chunk(vec![1], 2, 0).is_err(), "beyond the chunk");
        for k in 0..5 {
            b.mark_sent(isn.add(k), 1, false);
        }
        // Growing moves the ring packets and keeps the chunk's where they are.
        assert!(b.grow());
        assert_eq!(held(&b), b"abcdefghijklxy");
        assert!(b.take_chunk().is_none());
        // Acknowledging part of the chunk keeps it; the rest returns it to the pool.
        assert_eq!(b.ack(isn.add(3)), (3, 10));
        assert!(b.take_chunk().is_none());
        assert_eq!(b.ack(isn.add(4)), (1, 2));
        let again = b.take_chunk().expect("the chunk is back");
        assert_eq!(again.len(), 12);
        assert_eq!(held(&b), b"xy");
    }

    #[test]
    fn the_chunk_pool_holds_what_the_free_room_would() {
        // 16 packets of 4 bytes; ten one-packet chunks and six copied packets still held.
        let fill = |chunk_bytes: usize| {
            let mut b = SendBuffer::new(4, 16, 16, SeqNo::new(0));
            for k in 0..10u32 {
                b.push_chunk(vec![k as u8; chunk_bytes], 4, 0).unwrap();
            }
            assert_eq!(b.push_stream(&[7; 24], 0), 24);
            for k in 0..16 {
                b.mark_sent(SeqNo::new(k), 1, false);
            }
            // One acknowledgement frees all ten chunks at once: 10 packets (40 bytes) of room.
            b.ack(SeqNo::new(10));
            std::iter::from_fn(|| b.take_chunk()).count()
        };
        // Chunks of 4 bytes: all ten fit the room and are kept.
        assert_eq!(fill(4), 10);
        // Chunks of 16 bytes: two fit; the pool keeps its minimum of four.
        assert_eq!(fill(16), CHUNK_POOL);
    }

    #[test]
    fn shared_bytes_are_sent_in_place_and_let_go_once_acknowledged() {
        let isn = SeqNo::new(7);
        let mut b = SendBuffer::new(4, 8, 8, isn);
        let data: SharedBytes = Arc::new(b"0123456789abcdef".to_vec());
        // Empty, reversed and out-of-bounds ranges, and more packets than the buffer holds.
        assert!(!b.push_shared(&data, 3..3, 0));
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = 5..3;
        assert!(!b.push_shared(&data, reversed, 0));
        assert!(!b.push_shared(&data, 10..17, 0));
        let big: SharedBytes = Arc::new(vec![0u8; 40]);
        assert!(!b.push_shared(&big, 0..40, 0));
        assert_eq!(Arc::strong_count(&data), 1);
        // Bytes 2..13 in three packets, from where they lie.
        assert!(b.push_shared(&data, 2..13, 0));
        assert_eq!(Arc::strong_count(&data), 2);
        assert_eq!(held(&b), b"23456789abc");
        assert_eq!(b.get(isn.add(2)).unwrap().1, b"abc");
        for k in 0..3 {
            b.mark_sent(isn.add(k), 1, false);
        }
        assert_eq!(b.ack(isn.add(2)), (2, 8));
        assert_eq!(
            Arc::strong_count(&data),
            2,
            "held until its last packet is acknowledged"
        );
        assert_eq!(b.ack(isn.add(3)), (1, 3));
        assert_eq!(Arc::strong_count(&data), 1, "let go");
        assert!(
            b.take_chunk().is_none(),
            "shared bytes never go to the pool"
        );
    }

    proptest::proptest! {
        /// Any mix of copied writes, chunks, shared bytes, sends, acknowledgements and growth holds exactly
        /// the bytes written and not yet acknowledged, in order, and gives its memory back
        /// once idle.
        #[test]
        fn ring_and_chunk_packets_hold_the_stream(
            ops in proptest::collection::vec((0u8..4, 1usize..40), 1..60),
            small_pages in proptest::bool::ANY,
            cap in 2usize..6,
            max_cap in 8usize..70,
        ) {
            let isn = SeqNo::new(SeqNo::MAX - 20);
            // Capacities that are not powers of two make the last growth rotate the ring.
            let mut b = SendBuffer::new(5, cap, max_cap, isn);
            if small_pages {
                // Log pages of two packets.
                b.log_page = 10;
            }
            let mut stream: Vec<u8> = Vec::new();
            let mut acked = 0usize;
            let mut next = 0u8;
            let mut bytes_of = |n: usize| -> Vec<u8> {
                (0..n).map(|_| { next = next.wrapping_add(1); next }).collect()
            };
            for (op, n) in ops {
                match op {
                    3 if n % 3 == 0 => {
                        // Shared bytes, from an offset into them.
                        let d = bytes_of(n + 7);
                        let shared: SharedBytes = Arc::new(d.clone());
                        if b.push_shared(&shared, 7..n + 7, 0) {
                            stream.extend_from_slice(&d[7..]);
                        }
                    }
                    0 => {
                        let d = bytes_of(n);
                        let k = b.push_stream(&d, 0);
                        stream.extend_from_slice(&d[..k]);
                    }
                    1 => {
                        let mut c = b.take_chunk().unwrap_or_default();
                        c.clear();
                        c.extend(bytes_of(n));
                        c.extend([0xEE; 3]);
                        let want = c[..n].to_vec();
                        if b.push_chunk(c, n, 0).is_ok() {
                            stream.extend_from_slice(&want);
                        }
                    }
                    2 => {
                        for _ in 0..n.min(b.unsent()) {
                            let s = b.next_unsent();
                            b.mark_sent(s, 1, false);
                        }
                        let upto = b.base().add((n / 2).min(b.in_flight()) as u32);
                        let (_, freed) = b.ack(upto);
                        acked += freed as usize;
                    }
                    _ => {
                        b.grow();
                    }
                }
                proptest::prop_assert_eq!(held(&b), stream[acked..].to_vec());
                proptest::prop_assert_eq!(b.bytes() as usize, stream.len() - acked);
            }
            while b.unsent() > 0 {
                let s = b.next_unsent();
                b.mark_sent(s, 1, false);
            }
            b.ack(b.base().add(b.len() as u32));
            b.release_idle();
            proptest::prop_assert_eq!(b.held_bytes(), 0);
        }
    }

    #[test]
    fn a_steady_flow_cycles_through_a_small_ring_and_a_backlog_grows_it() {
        let isn = SeqNo::new(SeqNo::MAX - 3);
        let mut b = SendBuffer::new(1456, 8192, 8192, isn);
        // Nothing is allocated before the first packet.
        assert_eq!((b.ring, b.held_bytes()), (0, 0));
        // 10,000 messages, 20 in flight at a time: the ring never grows.
        for k in 0..10_000u32 {
            b.push_message(&k.to_be_bytes(), 0).unwrap();
            let s = b.next_unsent();
            b.mark_sent(s, 1, false);
            if b.in_flight() > 20 {
                b.ack(b.base().add(1));
            }
        }
        assert_eq!(b.ring, 128);
        let first = 10_000 - b.len() as u32;
        // A backlog of 1,100 more (the receiver stalls): the ring doubles to hold it, the
        // packets held stay in order, and the capacity is what it was.
        for k in 10_000..11_100u32 {
            b.push_message(&k.to_be_bytes(), 0).unwrap();
        }
        assert_eq!(b.ring, 2048);
        assert_eq!(b.cap(), 8192);
        for (i, k) in (first..11_100).enumerate() {
            let (_, p) = b.get(b.base().add(i as u32)).unwrap();
            assert_eq!(p, k.to_be_bytes());
        }
        // Idle with packets held: nothing is released. Once all are acknowledged, the ring
        // goes, and the next message allocates a small one again.
        assert!(!b.release_idle());
        while b.unsent() > 0 {
            let s = b.next_unsent();
            b.mark_sent(s, 2, false);
        }
        b.ack(b.base().add(b.len() as u32));
        assert!(b.release_idle());
        assert_eq!((b.ring, b.held_bytes()), (0, 0));
        b.push_message(b"again", 3).unwrap();
        assert_eq!(b.ring, 128);
        assert_eq!(b.get(b.base()).unwrap().1, b"again");
    }

    #[test]
    fn small_messages_are_packed_one_after_another() {
        let mut b = SendBuffer::new(1456, 1 << 14, 1 << 14, SeqNo::new(0));
        for k in 0..10_000u32 {
            let mut m = [0u8; 64];
            m[..4].copy_from_slice(&k.to_be_bytes());
            b.push_message(&m, 0).unwrap();
        }
        // 640,000 bytes of payload in 64 KiB pages, where a slot each would take 14.6 MB.
        let pages = 640_000usize.div_ceil(b.log_page - b.log_page % 64);
        let meta = b.ring * std::mem::size_of::<SlotMeta>();
        assert_eq!(b.held_bytes(), pages * b.log_page + meta);
        assert!(b.held_bytes() < 2 << 20, "{}", b.held_bytes());
        for k in 0..10_000u32 {
            let (m, p) = b.get(SeqNo::new(k)).unwrap();
            assert_eq!((m.pos, p.len()), (PacketPosition::Solo, 64));
            assert_eq!(p[..4], k.to_be_bytes());
        }
        // A message longer than a packet is cut into full packets across pages.
        b.push_message(&[9u8; 3000], 0).unwrap();
        let lens: Vec<_> = (10_000..10_003)
            .map(|s| b.get(SeqNo::new(s)).unwrap().1.len())
            .collect();
        assert_eq!(lens, [1456, 1456, 88]);
    }

    #[test]
    fn messages_are_split_with_positions() {
        let mut b = SendBuffer::new(4, 8, 8, SeqNo::new(0));
        b.push_message(b"abcdefghij", 0).unwrap();
        let p: Vec<_> = (0..3)
            .map(|s| b.get(SeqNo::new(s)).unwrap().0.pos)
            .collect();
        assert_eq!(
            p,
            [
                PacketPosition::First,
                PacketPosition::Middle,
                PacketPosition::Last
            ]
        );
        assert_eq!(b.push_message(&[0; 40], 0), Err(PushError::TooLarge));
        assert_eq!(b.push_message(&[0; 24], 0), Err(PushError::Full));
        assert_eq!(b.drop_oldest_message().unwrap().3, 3);
    }
}
