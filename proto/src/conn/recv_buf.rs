//! The receiver's buffer: a ring indexed by sequence number from the next packet the application
//! will read. Out-of-order packets wait in place; the application reads bytes (stream) or whole
//! messages. Capacity grows by doubling up to a memory cap; otherwise nothing allocates.

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
    data: Vec<u8>,
    meta: Vec<RSlot>,
    /// Sequence number of the head slot: the next packet to deliver.
    read_seq: SeqNo,
    head: usize,
    /// Bytes of the head packet already read (stream mode).
    read_off: usize,
    count: usize,
    bytes: u64,
}

impl RecvBuffer {
    pub fn new(slot_size: usize, cap: usize, max_cap: usize, isn: SeqNo) -> Self {
        let cap = cap.min(max_cap).max(2);
        RecvBuffer {
            slot_size,
            cap,
            max_cap: max_cap.max(cap),
            data: vec![0; cap * slot_size],
            meta: vec![EMPTY; cap],
            read_seq: isn,
            head: 0,
            read_off: 0,
            count: 0,
            bytes: 0,
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
    pub fn read_seq(&self) -> SeqNo {
        self.read_seq
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
        payload: &[u8],
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
        self.data[i * self.slot_size..i * self.slot_size + n].copy_from_slice(&payload[..n]);
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

    /// Stream read: copies contiguous bytes of packets before `limit` into `out`.
    pub fn read_stream(&mut self, limit: SeqNo, out: &mut [u8]) -> usize {
        let mut done = 0;
        while done < out.len() && self.read_seq.lt(limit) {
            let m = self.meta[self.head];
            if !m.present {
                break;
            }
            let start = self.head * self.slot_size + self.read_off;
            let avail = m.len as usize - self.read_off;
            let n = avail.min(out.len() - done);
            out[done..done + n].copy_from_slice(&self.data[start..start + n]);
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
            out[done..done + len]
                .copy_from_slice(&self.data[i * self.slot_size..i * self.slot_size + len]);
            done += len;
        }
        self.advance(pkts);
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
        let mut data = vec![0u8; new_cap * self.slot_size];
        let mut meta = vec![EMPTY; new_cap];
        for k in 0..self.cap {
            let i = self.idx(k);
            if self.meta[i].present {
                let len = self.meta[i].len as usize;
                data[k * self.slot_size..k * self.slot_size + len]
                    .copy_from_slice(&self.data[i * self.slot_size..i * self.slot_size + len]);
            }
            meta[k] = self.meta[i];
        }
        self.data = data;
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
            b.insert(s(0), PacketPosition::Solo, MsgNo::new(1), 0, b"efgh"),
            Insert::Stored
        );
        let mut out = [0u8; 16];
        assert_eq!(b.read_stream(s(1), &mut out), 0, "head missing");
        b.insert(
            s(SeqNo::MAX),
            PacketPosition::Solo,
            MsgNo::new(1),
            0,
            b"abcd",
        );
        assert_eq!(
            b.insert(
                s(SeqNo::MAX),
                PacketPosition::Solo,
                MsgNo::new(1),
                0,
                b"abcd"
            ),
            Insert::Duplicate
        );
        assert_eq!(b.read_stream(s(1), &mut out[..3]), 3);
        assert_eq!(b.read_stream(s(1), &mut out[3..]), 5);
        assert_eq!(&out[..8], b"abcdefgh");
        assert_eq!(b.bytes(), 0);
        assert_eq!(b.count(), 0);
        assert_eq!(
            b.insert(s(0), PacketPosition::Solo, MsgNo::new(1), 0, b"x"),
            Insert::Old
        );
        assert_eq!(
            b.insert(s(9), PacketPosition::Solo, MsgNo::new(1), 0, b"x"),
            Insert::Overflow
        );
    }

    #[test]
    fn messages_complete_before_delivery_and_survive_growth() {
        let mut b = RecvBuffer::new(2, 4, 8, s(0));
        b.insert(s(0), PacketPosition::First, MsgNo::new(7), 0, b"ab");
        b.insert(s(2), PacketPosition::Last, MsgNo::new(7), 0, b"e");
        let mut out = [0u8; 8];
        assert_eq!(b.read_message(s(3), &mut out), MsgRead::None);
        assert!(b.grow());
        b.insert(s(1), PacketPosition::Middle, MsgNo::new(7), 0, b"cd");
        assert_eq!(b.read_message(s(3), &mut out[..2]), MsgRead::TooSmall(5));
        assert_eq!(b.read_message(s(3), &mut out), MsgRead::Done(5));
        assert_eq!(&out[..5], b"abcde");
    }
}
