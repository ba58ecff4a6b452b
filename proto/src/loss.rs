//! Loss lists kept as ranges of sequence numbers (UDT's `CSndLossList` / `CRcvLossList`):
//! memory grows with the number of loss events, not with the number of lost packets.
//!
//! The list holds disjoint, non-adjacent inclusive ranges in sequence order. All numbers in one
//! list must lie within half the sequence space of each other (the flow window guarantees it),
//! so wrap-around comparisons are consistent.

use std::collections::VecDeque;

use crate::seq::SeqNo;

/// A set of sequence numbers stored as sorted, merged inclusive ranges.
///
/// Ranges are kept in a ring buffer in sequence order. Lookups binary-search on each range's
/// wrap-around distance from the first stored number; appending past the end (a receiver
/// detecting a gap) and taking from the front (a sender retransmitting, an ACK arriving) are
/// O(1) amortised.
#[derive(Debug, Clone, Default)]
pub struct LossList {
    /// `(first, last)` inclusive, sorted, with at least one missing number between neighbours.
    ranges: VecDeque<(SeqNo, SeqNo)>,
    /// Total count of numbers held.
    count: u64,
}

/// Number of sequence numbers in `first..=last` (requires `first <= last`).
fn span(first: SeqNo, last: SeqNo) -> u64 {
    debug_assert!(first.le(last), "inverted range {first:?}..={last:?}");
    last.diff(first) as u64 + 1
}

impl LossList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Offset of `seq` from the first stored number (negative when before it).
    /// Only called on a non-empty list.
    fn off(&self, seq: SeqNo) -> i64 {
        i64::from(seq.diff(self.ranges[0].0))
    }

    /// Index of the first range whose end is at or after offset `o`.
    fn first_ending_at_or_after(&self, o: i64) -> usize {
        let base = self.ranges[0].0;
        self.ranges
            .partition_point(|&(_, e)| i64::from(e.diff(base)) < o)
    }

    /// Index of the first range whose start is strictly after offset `o`.
    fn first_starting_after(&self, o: i64) -> usize {
        let base = self.ranges[0].0;
        self.ranges
            .partition_point(|&(s, _)| i64::from(s.diff(base)) <= o)
    }

    /// Adds `first..=last` (requires `first <= last`), merging with overlapping or adjacent ranges.
    /// Returns how many sequence numbers were newly added.
    pub fn insert(&mut self, first: SeqNo, last: SeqNo) -> u32 {
        let n = span(first, last);
        let Some(&(bs, be)) = self.ranges.back() else {
            self.ranges.push_back((first, last));
            self.count = n;
            return n as u32;
        };
        // Fast paths: strictly after the last range, or extending it.
        let gap = first.diff(be);
        if gap > 1 {
            self.ranges.push_back((first, last));
            self.count += n;
            return n as u32;
        }
        if gap >= 0 || (bs.le(first) && be.lt(last)) {
            // `first` lies within or right after the last range: only that one can change.
            let new_end = be.max(last);
            let added = new_end.diff(be) as u64;
            if let Some(b) = self.ranges.back_mut() {
                b.1 = new_end;
            }
            self.count += added;
            return added as u32;
        }

        let (f, l) = (self.off(first), self.off(last));
        // Ranges i..j touch or overlap the new one (end + 1 >= f and start - 1 <= l).
        let i = self.first_ending_at_or_after(f - 1);
        let j = self.first_starting_after(l + 1);
        if i == j {
            self.ranges.insert(i, (first, last));
            self.count += n;
            return n as u32;
        }
        let start = self.ranges[i].0.min(first);
        let end = self.ranges[j - 1].1.max(last);
        let covered: u64 = self.ranges.range(i..j).map(|&(s, e)| span(s, e)).sum();
        self.ranges[i] = (start, end);
        self.ranges.drain(i + 1..j);
        let added = span(start, end) - covered;
        self.count += added;
        added as u32
    }

    /// Removes one number, splitting its range if needed. Returns whether it was present.
    pub fn remove(&mut self, seq: SeqNo) -> bool {
        self.remove_range(seq, seq) == 1
    }

    /// Removes every number strictly before `seq` (an ACK up to `seq`). Returns how many.
    pub fn remove_before(&mut self, seq: SeqNo) -> u32 {
        let mut removed = 0u64;
        while let Some(&(s, e)) = self.ranges.front() {
            if e.lt(seq) {
                removed += span(s, e);
                self.ranges.pop_front();
            } else {
                if s.lt(seq) {
                    removed += seq.diff(s) as u64;
                    self.ranges[0].0 = seq;
                }
                break;
            }
        }
        self.count -= removed;
        removed as u32
    }

    /// Removes every number in `first..=last`. Returns how many were present.
    pub fn remove_range(&mut self, first: SeqNo, last: SeqNo) -> u32 {
        debug_assert!(first.le(last), "inverted range {first:?}..={last:?}");
        if self.ranges.is_empty() {
            return 0;
        }
        let (f, l) = (self.off(first), self.off(last));
        let i = self.first_ending_at_or_after(f);
        let j = self.first_starting_after(l);
        if i >= j {
            return 0;
        }
        let (si, _) = self.ranges[i];
        let (_, ej) = self.ranges[j - 1];
        let covered: u64 = self.ranges.range(i..j).map(|&(s, e)| span(s, e)).sum();
        let left = si.lt(first).then(|| (si, first.sub(1)));
        let right = last.lt(ej).then(|| (last.next(), ej));
        let kept = left.map_or(0, |(s, e)| span(s, e)) + right.map_or(0, |(s, e)| span(s, e));
        // Reuse slots in place so the common single-range cases never shift the buffer twice.
        let mut k = i;
        for piece in [left, right].into_iter().flatten() {
            if k < j {
                self.ranges[k] = piece;
            } else {
                self.ranges.insert(k, piece);
            }
            k += 1;
        }
        if k < j {
            self.ranges.drain(k..j);
        }
        let removed = covered - kept;
        self.count -= removed;
        removed as u32
    }

    /// Removes and returns the earliest number.
    pub fn pop_first(&mut self) -> Option<SeqNo> {
        let (s, e) = *self.ranges.front()?;
        if s == e {
            self.ranges.pop_front();
        } else {
            self.ranges[0].0 = s.next();
        }
        self.count -= 1;
        Some(s)
    }

    /// The earliest number, if any.
    pub fn first(&self) -> Option<SeqNo> {
        self.ranges.front().map(|r| r.0)
    }

    /// The latest number, if any.
    pub fn last(&self) -> Option<SeqNo> {
        self.ranges.back().map(|r| r.1)
    }

    /// Whether `seq` is in the list.
    pub fn contains(&self, seq: SeqNo) -> bool {
        if self.ranges.is_empty() {
            return false;
        }
        let i = self.first_ending_at_or_after(self.off(seq));
        self.ranges.get(i).is_some_and(|&(s, _)| s.le(seq))
    }

    /// How many sequence numbers the list holds.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// How many ranges are stored (the memory it uses is proportional to this).
    pub fn range_count(&self) -> usize {
        self.ranges.len()
    }

    /// Iterates the inclusive ranges in order.
    pub fn iter(&self) -> impl Iterator<Item = (SeqNo, SeqNo)> + '_ {
        self.ranges.iter().copied()
    }

    /// Iterates, in order, the numbers from `seq` on: the ranges that end at or after it, the
    /// first clipped to start no earlier than `seq`.
    pub fn iter_from(&self, seq: SeqNo) -> impl Iterator<Item = (SeqNo, SeqNo)> + '_ {
        let i = if self.ranges.is_empty() {
            0
        } else {
            self.first_ending_at_or_after(self.off(seq))
        };
        self.ranges
            .range(i..)
            .map(move |&(s, e)| (if s.lt(seq) { seq } else { s }, e))
    }

    /// Removes everything.
    pub fn clear(&mut self) {
        self.ranges.clear();
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::time::Instant;

    fn s(v: u32) -> SeqNo {
        SeqNo::new(v)
    }

    fn ranges(l: &LossList) -> Vec<(u32, u32)> {
        l.iter().map(|(a, b)| (a.get(), b.get())).collect()
    }

    #[test]
    fn iter_from_clips_the_first_range_and_skips_earlier_ones() {
        let mut l = LossList::new();
        let from = |l: &LossList, v: u32| -> Vec<(u32, u32)> {
            l.iter_from(s(v)).map(|(a, b)| (a.get(), b.get())).collect()
        };
        assert!(from(&l, 5).is_empty());
        // Across the wrap-around point.
        let top = SeqNo::MAX;
        l.insert(s(top - 9), s(top - 5));
        l.insert(s(3), s(3));
        l.insert(s(10), s(20));
        assert_eq!(from(&l, top - 20), ranges(&l));
        assert_eq!(
            from(&l, top - 7),
            vec![(top - 7, top - 5), (3, 3), (10, 20)]
        );
        assert_eq!(from(&l, top - 4), vec![(3, 3), (10, 20)]);
        assert_eq!(from(&l, 15), vec![(15, 20)]);
        assert_eq!(from(&l, 20), vec![(20, 20)]);
        assert!(from(&l, 21).is_empty());
    }

    /// Ranges are well-formed, sorted, disjoint and non-adjacent, and `len` matches them.
    fn check_invariants(l: &LossList) {
        let rs: Vec<_> = l.iter().collect();
        let mut total = 0u64;
        for (k, &(a, b)) in rs.iter().enumerate() {
            assert!(a.le(b), "inverted range {a:?}..={b:?} in {rs:?}");
            total += span(a, b);
            if k > 0 {
                assert!(a.diff(rs[k - 1].1) >= 2, "unsorted or unmerged: {rs:?}");
            }
        }
        assert_eq!(total, l.len());
        assert_eq!(l.range_count(), rs.len());
        assert_eq!(l.is_empty(), rs.is_empty());
        assert_eq!(l.first(), rs.first().map(|r| r.0));
        assert_eq!(l.last(), rs.last().map(|r| r.1));
    }

    #[test]
    fn empty_list() {
        let mut l = LossList::new();
        assert!(l.is_empty());
        assert_eq!(l.len(), 0);
        assert_eq!(l.first(), None);
        assert_eq!(l.last(), None);
        assert_eq!(l.pop_first(), None);
        assert!(!l.contains(s(0)));
        assert!(!l.remove(s(7)));
        assert_eq!(l.remove_before(s(100)), 0);
        assert_eq!(l.remove_range(s(1), s(9)), 0);
        check_invariants(&l);
    }

    #[test]
    fn adjacent_ranges_merge() {
        let mut l = LossList::new();
        assert_eq!(l.insert(s(10), s(12)), 3);
        assert_eq!(l.insert(s(13), s(15)), 3); // adjacent after
        assert_eq!(ranges(&l), [(10, 15)]);
        assert_eq!(l.insert(s(7), s(9)), 3); // adjacent before
        assert_eq!(ranges(&l), [(7, 15)]);
        assert_eq!(l.insert(s(20), s(20)), 1);
        assert_eq!(l.insert(s(17), s(18)), 2);
        assert_eq!(ranges(&l), [(7, 15), (17, 18), (20, 20)]);
        // Filling the single-number holes joins everything.
        assert_eq!(l.insert(s(19), s(19)), 1);
        assert_eq!(l.insert(s(16), s(16)), 1);
        assert_eq!(ranges(&l), [(7, 20)]);
        assert_eq!(l.len(), 14);
        // Overlapping inserts only count what is new.
        assert_eq!(l.insert(s(5), s(25)), 7);
        assert_eq!(l.insert(s(6), s(24)), 0);
        assert_eq!(ranges(&l), [(5, 25)]);
        check_invariants(&l);
    }

    #[test]
    fn insert_spanning_several_ranges() {
        let mut l = LossList::new();
        for k in 0..5 {
            l.insert(s(k * 10), s(k * 10 + 2));
        }
        assert_eq!(l.range_count(), 5);
        assert_eq!(l.insert(s(11), s(31)), 21 - 7);
        assert_eq!(ranges(&l), [(0, 2), (10, 32), (40, 42)]);
        check_invariants(&l);
    }

    #[test]
    fn remove_splits_a_range() {
        let mut l = LossList::new();
        l.insert(s(100), s(109));
        assert!(l.remove(s(104)));
        assert!(!l.remove(s(104)));
        assert_eq!(ranges(&l), [(100, 103), (105, 109)]);
        assert!(l.remove(s(100)));
        assert!(l.remove(s(109)));
        assert_eq!(ranges(&l), [(101, 103), (105, 108)]);
        assert_eq!(l.len(), 7);
        assert_eq!(l.remove_range(s(102), s(106)), 4);
        assert_eq!(ranges(&l), [(101, 101), (107, 108)]);
        assert!(l.remove(s(101)));
        assert_eq!(ranges(&l), [(107, 108)]);
        assert_eq!(l.remove_range(s(0), s(1000)), 2);
        assert!(l.is_empty());
        check_invariants(&l);
    }

    #[test]
    fn remove_range_inside_one_range() {
        let mut l = LossList::new();
        l.insert(s(0), s(99));
        l.insert(s(200), s(299));
        assert_eq!(l.remove_range(s(40), s(59)), 20);
        assert_eq!(ranges(&l), [(0, 39), (60, 99), (200, 299)]);
        assert_eq!(l.remove_range(s(100), s(199)), 0);
        assert_eq!(l.remove_range(s(90), s(210)), 21);
        assert_eq!(ranges(&l), [(0, 39), (60, 89), (211, 299)]);
        check_invariants(&l);
    }

    #[test]
    fn remove_before_across_the_wrap() {
        let top = SeqNo::MAX;
        let mut l = LossList::new();
        l.insert(s(top - 9), s(top - 5));
        l.insert(s(top - 2), s(3)); // crosses the wrap
        l.insert(s(10), s(12));
        assert_eq!(ranges(&l), [(top - 9, top - 5), (top - 2, 3), (10, 12)]);
        assert_eq!(l.len(), 5 + 7 + 3);
        // ACK lands inside the wrapping range, after the edge.
        assert_eq!(l.remove_before(s(1)), 5 + 4);
        assert_eq!(ranges(&l), [(1, 3), (10, 12)]);
        assert_eq!(l.first(), Some(s(1)));
        // An ACK behind the list removes nothing.
        assert_eq!(l.remove_before(s(top)), 0);
        assert_eq!(l.remove_before(s(11)), 4);
        assert_eq!(ranges(&l), [(11, 12)]);
        assert_eq!(l.remove_before(s(13)), 2);
        assert!(l.is_empty());
        check_invariants(&l);
    }

    #[test]
    fn merges_and_pops_across_the_wrap() {
        let top = SeqNo::MAX;
        let mut l = LossList::new();
        l.insert(s(0), s(4));
        l.insert(s(top - 4), s(top)); // adjacent to 0 via the wrap
        assert_eq!(ranges(&l), [(top - 4, 4)]);
        assert!(l.contains(s(top)) && l.contains(s(0)) && !l.contains(s(5)));
        assert!(l.remove(s(0)));
        assert_eq!(ranges(&l), [(top - 4, top), (1, 4)]);
        let popped: Vec<u32> = std::iter::from_fn(|| l.pop_first())
            .map(|x| x.get())
            .collect();
        assert_eq!(
            popped,
            [top - 4, top - 3, top - 2, top - 1, top, 1, 2, 3, 4]
        );
        check_invariants(&l);
    }

    #[test]
    fn receiver_gap_appends_extend_the_tail() {
        let mut l = LossList::new();
        l.insert(s(5), s(6));
        l.insert(s(7), s(9)); // tail extension
        l.insert(s(8), s(12)); // overlapping tail extension
        l.insert(s(20), s(21)); // new tail
        assert_eq!(ranges(&l), [(5, 12), (20, 21)]);
        assert_eq!(l.len(), 10);
        check_invariants(&l);
    }

    /// 200,000 packets in flight, 10% lost in bursts of 3: the list holds one range per loss
    /// event, and every operation stays cheap at that scale.
    #[test]
    fn scales_with_loss_events_not_packets() {
        const SENT: u32 = 200_000;
        const BURST: u32 = 3;
        const PERIOD: u32 = 30;
        let events = SENT / PERIOD;
        let base = SeqNo::new(SeqNo::MAX - 50_000); // crosses the wrap on the way
        let t0 = Instant::now();

        // Receiver: gaps detected as later packets arrive, appended at the end.
        let mut rcv = LossList::new();
        for e in 0..events {
            let first = base.add(e * PERIOD);
            rcv.insert(first, first.add(BURST - 1));
        }
        assert_eq!(rcv.range_count(), events as usize);
        assert_eq!(rcv.len(), u64::from(events * BURST));
        // Retransmissions of the middle packet of each burst arrive: each range splits in two.
        for e in 0..events {
            assert!(rcv.remove(base.add(e * PERIOD + 1)));
        }
        assert_eq!(rcv.range_count(), 2 * events as usize);
        assert_eq!(rcv.len(), u64::from(events * (BURST - 1)));
        // The rest of the first half is recovered and acknowledged.
        assert_eq!(
            rcv.remove_before(base.add(SENT / 2)),
            (events / 2 + 1) * (BURST - 1)
        );
        assert!(rcv.range_count() <= events as usize);
        check_invariants(&rcv);

        // Sender: NAK ranges arrive in arbitrary order (reverse here), then retransmission.
        let mut snd = LossList::new();
        for e in (0..events).rev() {
            let first = base.add(e * PERIOD);
            snd.insert(first, first.add(BURST - 1));
        }
        assert_eq!(snd.range_count(), events as usize);
        // Duplicate NAKs add nothing.
        for e in 0..events {
            let first = base.add(e * PERIOD);
            assert_eq!(snd.insert(first, first.add(BURST - 1)), 0);
        }
        // A drop request covering a stretch in the middle.
        let dropped = snd.remove_range(base.add(SENT / 4), base.add(SENT / 4 + 10 * PERIOD - 1));
        assert_eq!(dropped, 10 * BURST);
        let mut popped = 0u64;
        let mut prev: Option<SeqNo> = None;
        while let Some(x) = snd.pop_first() {
            if let Some(p) = prev {
                assert!(p.lt(x));
            }
            prev = Some(x);
            popped += 1;
        }
        assert_eq!(popped, u64::from((events - 10) * BURST));
        assert!(snd.is_empty());

        // Generous bound: a per-packet or quadratic structure would blow far past this.
        assert!(t0.elapsed().as_secs() < 5, "took {:?}", t0.elapsed());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32, u32),
        Append(u32, u32),
        Remove(u32),
        RemoveBefore(u32),
        RemoveRange(u32, u32),
        PopFirst,
        Clear,
    }

    const SPAN: u32 = 400;

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..SPAN, 0u32..12).prop_map(|(a, n)| Op::Insert(a, n)),
            3 => (0u32..6, 0u32..6).prop_map(|(g, n)| Op::Append(g, n)),
            6 => (0..SPAN).prop_map(Op::Remove),
            2 => (0..SPAN).prop_map(Op::RemoveBefore),
            3 => (0..SPAN, 0u32..40).prop_map(|(a, n)| Op::RemoveRange(a, n)),
            3 => Just(Op::PopFirst),
            1 => Just(Op::Clear),
        ]
    }

    fn base() -> impl Strategy<Value = u32> {
        prop_oneof![
            Just(0),
            (0..SPAN + 20).prop_map(|k| SeqNo::MAX - k), // crosses the wrap
            Just(SeqNo::MAX / 2),
            any::<u32>().prop_map(|v| v & SeqNo::MAX),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn matches_naive_model(base in base(), ops in proptest::collection::vec(op(), 1..120)) {
            let b = SeqNo::new(base);
            let at = |o: u64| b.add(o as u32);
            let mut l = LossList::new();
            let mut m: BTreeSet<u64> = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Insert(a, n) => {
                        let (a, z) = (u64::from(a), u64::from(a + n));
                        let new = (a..=z).filter(|x| m.insert(*x)).count() as u32;
                        prop_assert_eq!(l.insert(at(a), at(z)), new);
                    }
                    Op::Append(g, n) => {
                        let a = m.last().map_or(0, |x| x + 1) + u64::from(g);
                        let z = a + u64::from(n);
                        let new = (a..=z).filter(|x| m.insert(*x)).count() as u32;
                        prop_assert_eq!(l.insert(at(a), at(z)), new);
                    }
                    Op::Remove(a) => {
                        let a = u64::from(a);
                        prop_assert_eq!(l.remove(at(a)), m.remove(&a));
                    }
                    Op::RemoveBefore(a) => {
                        let a = u64::from(a);
                        let gone: Vec<u64> = m.range(..a).copied().collect();
                        for x in &gone {
                            m.remove(x);
                        }
                        prop_assert_eq!(l.remove_before(at(a)), gone.len() as u32);
                    }
                    Op::RemoveRange(a, n) => {
                        let (a, z) = (u64::from(a), u64::from(a + n));
                        let gone: Vec<u64> = m.range(a..=z).copied().collect();
                        for x in &gone {
                            m.remove(x);
                        }
                        prop_assert_eq!(l.remove_range(at(a), at(z)), gone.len() as u32);
                    }
                    Op::PopFirst => {
                        let want = m.pop_first().map(at);
                        prop_assert_eq!(l.pop_first(), want);
                    }
                    Op::Clear => {
                        l.clear();
                        m.clear();
                    }
                }
                check_invariants(&l);
                prop_assert_eq!(l.len(), m.len() as u64);
                prop_assert_eq!(l.first(), m.first().copied().map(at));
                let expanded: Vec<u64> = l
                    .iter()
                    .flat_map(|(x, y)| {
                        let (x, y) = (x.diff(b) as u64, y.diff(b) as u64);
                        x..=y
                    })
                    .collect();
                let want: Vec<u64> = m.iter().copied().collect();
                prop_assert_eq!(&expanded, &want);
                // Model's run count equals the number of stored ranges.
                let runs = want.windows(2).filter(|w| w[1] != w[0] + 1).count()
                    + usize::from(!want.is_empty());
                prop_assert_eq!(l.range_count(), runs);
                for probe in [0u64, 1, 5, 50, 200, 399, 450] {
                    prop_assert_eq!(l.contains(at(probe)), m.contains(&probe));
                }
            }
        }
    }
}
