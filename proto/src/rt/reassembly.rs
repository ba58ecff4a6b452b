//! Reassembly of fragmented real-time messages in memory fixed at construction.
//!
//! Calling protocol: build a [`Reassembler`] once (it allocates everything it will use:
//! `slots` message buffers of `max_msg_len` bytes and their fragment bitmaps). Hand it every
//! datagram that arrives with [`Reassembler::insert`]. A message of one fragment comes back
//! at once as [`Outcome::Whole`], its payload still in the caller's datagram; a fragment of a
//! longer one is copied into its message's slot, and the one that completes it returns
//! [`Outcome::Complete`] with the slot, to be read with [`Reassembler::message`] and given
//! back with [`Reassembler::release`]. Call [`Reassembler::expire`] from time to time (every
//! insert does): a message not complete by its deadline (the header's, counted from its first
//! fragment's arrival, or the configured timeout) is dropped whole and counted. Nothing
//! partial is ever delivered, and every refused fragment is counted by its reason.

use super::header::{HeaderError, RtHeader};
use std::time::{Duration, Instant};

/// Sizes of a [`Reassembler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReassemblyConfig {
    /// Messages being reassembled at once (and complete ones not yet released).
    pub slots: usize,
    /// Longest message accepted, bytes.
    pub max_msg_len: usize,
    /// Shortest nominal fragment of a message of more than one (bounds the fragments a
    /// message may claim: `max_msg_len / min_frag_len`).
    pub min_frag_len: u16,
    /// How long a message without a deadline may take to complete.
    pub timeout: Duration,
    /// The longest any message may take, its deadline notwithstanding.
    pub max_timeout: Duration,
}

impl Default for ReassemblyConfig {
    fn default() -> Self {
        ReassemblyConfig {
            slots: 64,
            max_msg_len: 1 << 20,
            min_frag_len: 512,
            timeout: Duration::from_millis(100),
            max_timeout: Duration::from_secs(1),
        }
    }
}

/// Counters of a [`Reassembler`]: every datagram handed in ends in exactly one of
/// `whole`, `accepted` or one of the refusals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReassemblyStats {
    /// One-fragment messages handed back at once.
    pub whole: u64,
    /// Fragments stored in a slot.
    pub accepted: u64,
    /// Messages completed in a slot.
    pub completed: u64,
    /// Messages dropped incomplete at their deadline.
    pub expired: u64,
    /// Fragments the expired and evicted messages held.
    pub expired_fragments: u64,
    /// Refused: not a valid fragment header.
    pub malformed: u64,
    /// Refused: a message longer than `max_msg_len`.
    pub too_long: u64,
    /// Refused: more fragments than `min_frag_len` allows.
    pub too_many_fragments: u64,
    /// Refused: a fragment whose header disagrees with its message's first one.
    pub inconsistent: u64,
    /// Refused: a fragment already held, or of a message completed lately.
    pub duplicates: u64,
    /// Refused: the first fragment of a message with every slot holding a complete message
    /// not yet released.
    pub no_slot: u64,
    /// Messages dropped incomplete to make room for a new one (the oldest goes first).
    pub evicted: u64,
}

impl ReassemblyStats {
    /// Datagrams refused, every reason together.
    pub fn refused(&self) -> u64 {
        self.malformed
            + self.too_long
            + self.too_many_fragments
            + self.inconsistent
            + self.duplicates
            + self.no_slot
    }
}

/// Why [`Reassembler::insert`] did not take a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not a valid fragment.
    Malformed(HeaderError),
    /// Longer than the configured maximum message.
    TooLong,
    /// Claims more fragments than allowed.
    TooManyFragments,
    /// Disagrees with its message's first fragment.
    Inconsistent,
    /// Already held, or its message was completed.
    Duplicate,
    /// No slot free for a new message.
    NoSlot,
}

/// A slot holding a message, valid until released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotId(usize);

/// What became of a datagram [`Reassembler::insert`] took.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// A message of one fragment: its payload, in the datagram.
    Whole(RtHeader, &'a [u8]),
    /// Stored; its message is not complete yet.
    Partial,
    /// Its message is complete, in this slot.
    Complete(SlotId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Filling,
    Done,
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    state: State,
    src: u64,
    hdr: RtHeader,
    /// The arrival of its first fragment.
    first_at: Option<Instant>,
    expires: Option<Instant>,
    have: u32,
    need: u32,
}

/// Messages delivered lately, remembered so that a late duplicate of one of their fragments
/// is neither delivered again nor taken for the start of a new message.
const RECENT: usize = 64;

/// Fragmented messages being put together; see the module's calling protocol.
#[derive(Debug)]
pub struct Reassembler {
    cfg: ReassemblyConfig,
    arena: Vec<u8>,
    bits: Vec<u64>,
    words: usize,
    slots: Vec<Slot>,
    recent: [(u64, u32); RECENT],
    recent_len: usize,
    recent_at: usize,
    /// Messages expired since the caller last took them: source and id (at most `slots`;
    /// more are counted in the stats only).
    expired_log: Vec<(u64, u32)>,
    /// Slots being filled (messages of one fragment never take one: with none, nothing can
    /// expire and no slot needs a look).
    filling: usize,
    stats: ReassemblyStats,
}

impl Reassembler {
    /// Allocates everything the reassembler will use (`slots × max_msg_len` bytes, and a bit
    /// for each possible fragment of each slot).
    pub fn new(cfg: ReassemblyConfig) -> Self {
        let cfg = ReassemblyConfig {
            slots: cfg.slots.max(1),
            min_frag_len: cfg.min_frag_len.max(1),
            ..cfg
        };
        let max_frags = cfg
            .max_msg_len
            .div_ceil(usize::from(cfg.min_frag_len))
            .max(1);
        let words = max_frags.div_ceil(64);
        let empty = Slot {
            state: State::Free,
            src: 0,
            hdr: RtHeader {
                class: super::header::Class::Nrt,
                msg_id: 0,
                msg_len: 0,
                offset: 0,
                frag_len: 0,
                sent_us: 0,
                deadline_us: 0,
                more: false,
            },
            first_at: None,
            expires: None,
            have: 0,
            need: 0,
        };
        Reassembler {
            arena: vec![0; cfg.slots * cfg.max_msg_len],
            bits: vec![0; cfg.slots * words],
            words,
            slots: vec![empty; cfg.slots],
            recent: [(0, 0); RECENT],
            recent_len: 0,
            recent_at: 0,
            expired_log: Vec::with_capacity(cfg.slots),
            filling: 0,
            stats: ReassemblyStats::default(),
            cfg,
        }
    }

    /// Bytes allocated at construction, all there will be.
    pub fn memory(&self) -> usize {
        self.arena.len()
            + self.bits.len() * 8
            + self.slots.len() * std::mem::size_of::<Slot>()
            + self.expired_log.capacity() * std::mem::size_of::<(u64, u32)>()
    }

    /// The counters.
    pub fn stats(&self) -> ReassemblyStats {
        self.stats
    }

    /// A datagram from source `src` (the caller's key for its sender: messages of different
    /// sources never mix) arrived at `now`.
    pub fn insert<'a>(
        &mut self,
        now: Instant,
        src: u64,
        datagram: &'a [u8],
    ) -> Result<Outcome<'a>, Refused> {
        self.expire(now);
        let (h, payload) = RtHeader::parse(datagram).map_err(|e| {
            self.stats.malformed += 1;
            Refused::Malformed(e)
        })?;
        if h.msg_len as usize > self.cfg.max_msg_len {
            self.stats.too_long += 1;
            return Err(Refused::TooLong);
        }
        let need = RtHeader::fragments(h.msg_len, h.frag_len);
        if need > 1 && h.frag_len < self.cfg.min_frag_len {
            self.stats.too_many_fragments += 1;
            return Err(Refused::TooManyFragments);
        }
        if self.recent[..self.recent_len].contains(&(src, h.msg_id)) {
            self.stats.duplicates += 1;
            return Err(Refused::Duplicate);
        }
        if need == 1 {
            self.stats.whole += 1;
            self.remember(src, h.msg_id);
            return Ok(Outcome::Whole(h, payload));
        }
        let found = self
            .slots
            .iter()
            .position(|s| s.state != State::Free && s.src == src && s.hdr.msg_id == h.msg_id);
        let i = match found {
            Some(i) => {
                let s = &self.slots[i];
                if s.state == State::Done {
                    self.stats.duplicates += 1;
                    return Err(Refused::Duplicate);
                }
                let same = (s.hdr.msg_len, s.hdr.frag_len, s.hdr.class)
                    == (h.msg_len, h.frag_len, h.class);
                if !same {
                    self.stats.inconsistent += 1;
                    return Err(Refused::Inconsistent);
                }
                i
            }
            None => {
                let Some(i) = self.free_slot() else {
                    self.stats.no_slot += 1;
                    return Err(Refused::NoSlot);
                };
                let wait = if h.deadline_us > 0 {
                    Duration::from_micros(u64::from(h.deadline_us))
                } else {
                    self.cfg.timeout
                };
                self.filling += 1;
                self.slots[i] = Slot {
                    state: State::Filling,
                    src,
                    hdr: h,
                    first_at: Some(now),
                    expires: now.checked_add(wait.min(self.cfg.max_timeout)),
                    have: 0,
                    need,
                };
                self.bits[i * self.words..(i + 1) * self.words].fill(0);
                i
            }
        };
        let k = h.index() as usize;
        let (word, bit) = (i * self.words + k / 64, 1u64 << (k % 64));
        if self.bits[word] & bit != 0 {
            self.stats.duplicates += 1;
            return Err(Refused::Duplicate);
        }
        self.bits[word] |= bit;
        let at = i * self.cfg.max_msg_len + h.offset as usize;
        self.arena[at..at + payload.len()].copy_from_slice(payload);
        self.stats.accepted += 1;
        let s = &mut self.slots[i];
        s.have += 1;
        if s.have < s.need {
            return Ok(Outcome::Partial);
        }
        s.state = State::Done;
        self.filling -= 1;
        self.stats.completed += 1;
        self.remember(src, h.msg_id);
        Ok(Outcome::Complete(SlotId(i)))
    }

    fn remember(&mut self, src: u64, msg_id: u32) {
        self.recent[self.recent_at] = (src, msg_id);
        self.recent_at = (self.recent_at + 1) % RECENT;
        self.recent_len = (self.recent_len + 1).min(RECENT);
    }

    /// The complete message in `slot`: the header of its first fragment to arrive, when that
    /// arrived, and its bytes. `None` for a slot not holding a complete message.
    pub fn message(&self, slot: SlotId) -> Option<(&RtHeader, Instant, &[u8])> {
        let s = self.slots.get(slot.0)?;
        if s.state != State::Done {
            return None;
        }
        let at = slot.0 * self.cfg.max_msg_len;
        let bytes = &self.arena[at..at + s.hdr.msg_len as usize];
        Some((&s.hdr, s.first_at?, bytes))
    }

    /// Gives a complete message's slot back.
    pub fn release(&mut self, slot: SlotId) {
        if let Some(s) = self.slots.get_mut(slot.0) {
            if s.state == State::Done {
                s.state = State::Free;
            }
        }
    }

    /// A free slot, made by dropping the oldest incomplete message if there is none. `None`
    /// when every slot holds a complete message not yet released.
    fn free_slot(&mut self) -> Option<usize> {
        if let Some(i) = self.slots.iter().position(|s| s.state == State::Free) {
            return Some(i);
        }
        let (i, _) = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state == State::Filling)
            .min_by_key(|(_, s)| s.first_at)?;
        let s = &mut self.slots[i];
        s.state = State::Free;
        self.filling -= 1;
        self.stats.evicted += 1;
        self.stats.expired_fragments += u64::from(s.have);
        if self.expired_log.len() < self.expired_log.capacity() {
            self.expired_log.push((s.src, s.hdr.msg_id));
        }
        Some(i)
    }

    /// Drops, and counts, every message not complete by its deadline.
    pub fn expire(&mut self, now: Instant) {
        if self.filling == 0 {
            return;
        }
        for s in &mut self.slots {
            if s.state == State::Filling && s.expires.is_none_or(|t| now >= t) {
                s.state = State::Free;
                self.filling -= 1;
                self.stats.expired += 1;
                self.stats.expired_fragments += u64::from(s.have);
                if self.expired_log.len() < self.expired_log.capacity() {
                    self.expired_log.push((s.src, s.hdr.msg_id));
                }
            }
        }
    }

    /// Hands `f` the source and id of each message expired or evicted since the last call
    /// (up to `slots` of them; [`ReassemblyStats::expired`] and
    /// [`ReassemblyStats::evicted`] count all).
    pub fn take_expired(&mut self, mut f: impl FnMut(u64, u32)) {
        for (src, id) in self.expired_log.drain(..) {
            f(src, id);
        }
    }

    /// When [`Self::expire`] next drops a message (`None`: none is being filled).
    pub fn next_expiry(&self) -> Option<Instant> {
        if self.filling == 0 {
            return None;
        }
        self.slots
            .iter()
            .filter(|s| s.state == State::Filling)
            .filter_map(|s| s.expires.or(s.first_at))
            .min()
    }

    /// Messages being filled.
    pub fn pending(&self) -> usize {
        debug_assert_eq!(
            self.filling,
            self.slots
                .iter()
                .filter(|s| s.state == State::Filling)
                .count()
        );
        self.filling
    }
}

#[cfg(test)]
mod tests {
    use super::super::header::{Class, RT_HEADER_LEN};
    use super::*;
    use proptest::prelude::*;

    fn fragments(id: u32, msg: &[u8], frag_len: u16, deadline_us: u32) -> Vec<Vec<u8>> {
        let n = RtHeader::fragments(msg.len() as u32, frag_len);
        (0..n)
            .map(|k| {
                let offset = k * u32::from(frag_len);
                let len = RtHeader::payload_len_at(msg.len() as u32, frag_len, offset) as usize;
                let h = RtHeader {
                    class: Class::Rt,
                    msg_id: id,
                    msg_len: msg.len() as u32,
                    offset,
                    frag_len,
                    sent_us: 5,
                    deadline_us,
                    more: false,
                };
                let mut d = vec![0; RT_HEADER_LEN + len];
                h.emit(&mut d).unwrap();
                d[RT_HEADER_LEN..].copy_from_slice(&msg[offset as usize..offset as usize + len]);
                d
            })
            .collect()
    }

    fn small() -> ReassemblyConfig {
        ReassemblyConfig {
            slots: 4,
            max_msg_len: 64 << 10,
            min_frag_len: 1000,
            timeout: Duration::from_millis(10),
            max_timeout: Duration::from_millis(50),
        }
    }

    fn message(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    #[test]
    fn a_message_arrives_whole_in_any_order() {
        let mut r = Reassembler::new(small());
        let t = Instant::now();
        let msg = message(10_500, 1);
        let mut frags = fragments(9, &msg, 1400, 0);
        frags.reverse();
        let n = frags.len();
        for (k, d) in frags.iter().enumerate() {
            let out = r.insert(t, 1, d).unwrap();
            if k + 1 < n {
                assert_eq!(out, Outcome::Partial);
            } else {
                let Outcome::Complete(slot) = out else {
                    panic!("{out:?}")
                };
                let (h, _, bytes) = r.message(slot).unwrap();
                assert_eq!(h.msg_id, 9);
                assert!(bytes == msg.as_slice());
                r.release(slot);
            }
        }
        // A late copy of a fragment does not start the message again.
        assert_eq!(r.insert(t, 1, &frags[0]), Err(Refused::Duplicate));
        // One fragment: handed back in place.
        let one = fragments(10, &msg[..100], 1400, 0);
        assert!(matches!(r.insert(t, 1, &one[0]), Ok(Outcome::Whole(_, p)) if p == &msg[..100]));
        let st = r.stats();
        assert_eq!(
            (st.accepted, st.completed, st.whole, st.duplicates),
            (8, 1, 1, 1)
        );
    }

    #[test]
    fn a_message_missing_a_fragment_is_dropped_whole_at_its_deadline() {
        let mut r = Reassembler::new(small());
        let t = Instant::now();
        let msg = message(5000, 2);
        let frags = fragments(3, &msg, 1000, 2000);
        assert_eq!(r.next_expiry(), None);
        for d in &frags[1..] {
            assert_eq!(r.insert(t, 1, d), Ok(Outcome::Partial));
        }
        assert_eq!(r.next_expiry(), Some(t + Duration::from_micros(2000)));
        r.expire(t + Duration::from_micros(1999));
        assert_eq!(r.pending(), 1);
        r.expire(t + Duration::from_micros(2000));
        assert_eq!(r.pending(), 0);
        assert_eq!(r.next_expiry(), None);
        let st = r.stats();
        assert_eq!((st.expired, st.expired_fragments, st.completed), (1, 4, 0));
        // The missing fragment, late: a new message that never completes either.
        assert_eq!(
            r.insert(t + Duration::from_millis(3), 1, &frags[0]),
            Ok(Outcome::Partial)
        );
        r.expire(t + Duration::from_millis(100));
        assert_eq!(r.stats().expired, 2);
    }

    #[test]
    fn hostile_fragments_are_refused_and_counted() {
        let mut r = Reassembler::new(small());
        let t = Instant::now();
        let msg = message(4000, 3);
        let frags = fragments(1, &msg, 1000, 0);
        assert_eq!(r.insert(t, 1, &frags[0]), Ok(Outcome::Partial));
        // The same message id with another length, another fragment size, another class.
        let other = fragments(1, &message(5000, 3), 1000, 0);
        assert_eq!(r.insert(t, 1, &other[1]), Err(Refused::Inconsistent));
        let other = fragments(1, &msg, 2000, 0);
        assert_eq!(r.insert(t, 1, &other[1]), Err(Refused::Inconsistent));
        // Twice the same fragment.
        assert_eq!(r.insert(t, 1, &frags[0]), Err(Refused::Duplicate));
        // A message longer than allowed, or of more fragments than allowed.
        let long = fragments(2, &message(70_000, 0), 1400, 0);
        assert_eq!(r.insert(t, 1, &long[0]), Err(Refused::TooLong));
        let tiny = fragments(3, &msg, 10, 0);
        assert_eq!(r.insert(t, 1, &tiny[0]), Err(Refused::TooManyFragments));
        // Every slot taken by messages that never complete: the next takes the place of
        // the oldest, dropped and counted.
        for id in 10..13 {
            let f = fragments(id, &msg, 1000, 0);
            assert_eq!(r.insert(t, 2, &f[0]), Ok(Outcome::Partial));
        }
        let f = fragments(20, &msg, 1000, 0);
        assert_eq!(r.insert(t, 2, &f[0]), Ok(Outcome::Partial));
        let mut evicted = Vec::new();
        r.take_expired(|src, id| evicted.push((src, id)));
        assert_eq!(evicted, [(1, 1)]);
        // Every slot holding a complete message the caller has not released: no room.
        let later = t + Duration::from_millis(10);
        for id in 30..34 {
            let f = fragments(id, &msg, 1000, 0);
            for d in &f[..3] {
                assert_eq!(r.insert(later, 3, d), Ok(Outcome::Partial));
            }
            assert!(matches!(
                r.insert(later, 3, &f[3]),
                Ok(Outcome::Complete(_))
            ));
        }
        let f = fragments(40, &msg, 1000, 0);
        assert_eq!(r.insert(later, 3, &f[0]), Err(Refused::NoSlot));
        assert_eq!(
            r.insert(later, 1, &[0u8; 7]),
            Err(Refused::Malformed(HeaderError::Short))
        );
        let st = r.stats();
        assert_eq!(
            (
                st.inconsistent,
                st.duplicates,
                st.too_long,
                st.too_many_fragments,
                st.no_slot
            ),
            (2, 1, 1, 1, 1)
        );
        assert_eq!((st.expired, st.evicted, st.malformed), (4, 1, 1));
    }

    #[test]
    fn the_longest_wait_bounds_a_long_deadline() {
        let mut r = Reassembler::new(small());
        let t = Instant::now();
        let frags = fragments(1, &message(3000, 0), 1000, u32::MAX);
        assert_eq!(r.insert(t, 1, &frags[0]), Ok(Outcome::Partial));
        r.expire(t + Duration::from_millis(50));
        assert_eq!(r.stats().expired, 1);
    }

    proptest! {
        /// Valid fragments with bytes flipped, from three sources over a few milliseconds:
        /// nothing panics, memory stays what construction took, every datagram is counted
        /// once, and what completes has the length its header says.
        #[test]
        fn damaged_fragments_are_counted_never_delivered_wrong(
            lens in proptest::collection::vec(1usize..5000, 1..6),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..40),
            steps in proptest::collection::vec(0u64..3000, 1..64),
        ) {
            let mut r = Reassembler::new(small());
            let memory = r.memory();
            let mut all: Vec<Vec<u8>> = Vec::new();
            for (k, &len) in lens.iter().enumerate() {
                all.extend(fragments(k as u32 % 3, &message(len, 0), 1000, 0));
            }
            for (i, &(at, x)) in flips.iter().enumerate() {
                let n = all.len();
                let d = &mut all[i % n];
                let m = d.len();
                d[at % m] ^= x;
            }
            let mut t = Instant::now();
            for (i, d) in all.iter().enumerate() {
                t += Duration::from_micros(steps[i % steps.len()]);
                if let Ok(Outcome::Complete(slot)) = r.insert(t, i as u64 % 3, d) {
                    let (h, _, bytes) = r.message(slot).unwrap();
                    prop_assert_eq!(bytes.len(), h.msg_len as usize);
                    r.release(slot);
                }
                prop_assert_eq!(r.memory(), memory);
            }
            let st = r.stats();
            prop_assert_eq!(st.whole + st.accepted + st.refused(), all.len() as u64);
        }

        /// Messages of 1 B to 64 KiB from two sources, their fragments shuffled, some
        /// duplicated, one message missing a fragment: every complete one arrives byte-exact,
        /// the broken one never, and the counts add up.
        #[test]
        fn shuffled_fragments_make_exact_messages(
            lens in proptest::collection::vec(1usize..65_536, 1..4),
            frag_len in 1000u16..9000,
            order in any::<u64>(),
            dup in 0usize..8,
        ) {
            let mut r = Reassembler::new(ReassemblyConfig { slots: 8, ..small() });
            let t = Instant::now();
            let mut all: Vec<(u64, u32, Vec<u8>)> = Vec::new();
            let mut msgs = Vec::new();
            for (k, &len) in lens.iter().enumerate() {
                for src in [1u64, 2] {
                    let m = message(len, k as u8 ^ src as u8);
                    for d in fragments(k as u32, &m, frag_len, 0) {
                        all.push((src, k as u32, d));
                    }
                    msgs.push(((src, k as u32), m));
                }
            }
            // Drop the first fragment of the last message if it has more than one.
            let broken = msgs.last().map(|(key, m)| (*key, m.len() > usize::from(frag_len)));
            if let Some((key, true)) = broken {
                let at = all.iter().position(|(s, id, _)| (*s, *id) == key).unwrap();
                all.remove(at);
            }
            let n = all.len();
            for i in 0..dup.min(n) {
                let copy = all[i * 7 % n].clone();
                all.push(copy);
            }
            let mut x = order | 1;
            for i in (1..all.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                all.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let mut got = Vec::new();
            for (src, _, d) in &all {
                match r.insert(t, *src, d) {
                    Ok(Outcome::Whole(h, p)) => got.push(((*src, h.msg_id), p.to_vec())),
                    Ok(Outcome::Complete(slot)) => {
                        let (h, _, p) = r.message(slot).unwrap();
                        got.push(((*src, h.msg_id), p.to_vec()));
                        r.release(slot);
                    }
                    Ok(Outcome::Partial) | Err(Refused::Duplicate) => {}
                    Err(e) => prop_assert!(false, "refused: {e:?}"),
                }
            }
            for (key, m) in &msgs {
                let n_got = got.iter().filter(|(k, _)| k == key).count();
                if broken == Some((*key, true)) {
                    prop_assert_eq!(n_got, 0);
                } else {
                    prop_assert_eq!(n_got, 1);
                    prop_assert!(got.iter().any(|(k, p)| k == key && p == m));
                }
            }
            let st = r.stats();
            prop_assert_eq!(st.whole + st.accepted + st.duplicates, all.len() as u64);
        }
    }
}
