//! Loss lists kept as ranges of sequence numbers (UDT's `CSndLossList` / `CRcvLossList`):
//! memory grows with the number of loss events, not with the number of lost packets.
//!
//! The list holds disjoint, non-adjacent inclusive ranges in sequence order. All numbers in one
//! list must lie within half the sequence space of each other (the flow window guarantees it),
//! so wrap-around comparisons are consistent.

use crate::seq::SeqNo;

/// A set of sequence numbers stored as sorted, merged inclusive ranges.
#[derive(Debug, Clone, Default)]
pub struct LossList {
    _todo: (),
}

impl LossList {
    /// An empty list.
    pub fn new() -> Self {
        todo!()
    }
    /// Adds `first..=last` (requires `first <= last`), merging with overlapping or adjacent ranges.
    /// Returns how many sequence numbers were newly added.
    pub fn insert(&mut self, first: SeqNo, last: SeqNo) -> u32 {
        let _ = (first, last);
        todo!()
    }
    /// Removes one number, splitting its range if needed. Returns whether it was present.
    pub fn remove(&mut self, seq: SeqNo) -> bool {
        let _ = seq;
        todo!()
    }
    /// Removes every number strictly before `seq` (an ACK up to `seq`). Returns how many.
    pub fn remove_before(&mut self, seq: SeqNo) -> u32 {
        let _ = seq;
        todo!()
    }
    /// Removes every number in `first..=last`. Returns how many were present.
    pub fn remove_range(&mut self, first: SeqNo, last: SeqNo) -> u32 {
        let _ = (first, last);
        todo!()
    }
    /// Removes and returns the earliest number.
    pub fn pop_first(&mut self) -> Option<SeqNo> {
        todo!()
    }
    /// The earliest number, if any.
    pub fn first(&self) -> Option<SeqNo> {
        todo!()
    }
    /// Whether `seq` is in the list.
    pub fn contains(&self, seq: SeqNo) -> bool {
        let _ = seq;
        todo!()
    }
    /// How many sequence numbers the list holds.
    pub fn len(&self) -> u64 {
        todo!()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        todo!()
    }
    /// How many ranges are stored (the memory it uses is proportional to this).
    pub fn range_count(&self) -> usize {
        todo!()
    }
    /// Iterates the inclusive ranges in order.
    pub fn iter(&self) -> impl Iterator<Item = (SeqNo, SeqNo)> + '_ {
        core::iter::empty()
    }
    /// Removes everything.
    pub fn clear(&mut self) {
        todo!()
    }
}
