//! Sequence and message numbers: SRT's 31-bit packet sequence space and 26-bit message space,
//! with wrap-around arithmetic (draft-sharabayko-srt §3.1; UDT's `CSeqNo`).
//!
//! Comparisons are only meaningful between numbers less than half the space apart, which the
//! flow window guarantees.

use core::fmt;

/// A 31-bit packet sequence number.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNo(u32);

impl SeqNo {
    /// Largest value; the next one is 0.
    pub const MAX: u32 = 0x7FFF_FFFF;
    const HALF: u32 = 0x4000_0000;

    /// Builds a sequence number from the low 31 bits of `v`.
    pub const fn new(v: u32) -> Self {
        SeqNo(v & Self::MAX)
    }
    /// The raw 31-bit value.
    pub const fn get(self) -> u32 {
        self.0
    }
    /// `self + n`, wrapping within 31 bits.
    #[allow(clippy::should_implement_trait)]
    pub const fn add(self, n: u32) -> Self {
        SeqNo(self.0.wrapping_add(n) & Self::MAX)
    }
    /// `self - n`, wrapping within 31 bits.
    #[allow(clippy::should_implement_trait)]
    pub const fn sub(self, n: u32) -> Self {
        SeqNo(self.0.wrapping_sub(n) & Self::MAX)
    }
    /// The next sequence number.
    pub const fn next(self) -> Self {
        self.add(1)
    }
    /// Signed distance `self - other` (positive when `self` is later).
    pub const fn diff(self, other: SeqNo) -> i32 {
        let d = self.0.wrapping_sub(other.0) & Self::MAX;
        if d >= Self::HALF {
            (d as i32).wrapping_sub(Self::MAX as i32).wrapping_sub(1)
        } else {
            d as i32
        }
    }
    /// True when `self` comes strictly before `other`.
    pub const fn lt(self, other: SeqNo) -> bool {
        self.diff(other) < 0
    }
    /// True when `self` comes before or equals `other`.
    pub const fn le(self, other: SeqNo) -> bool {
        self.diff(other) <= 0
    }
    /// The later of the two.
    pub const fn max(self, other: SeqNo) -> SeqNo {
        if self.lt(other) {
            other
        } else {
            self
        }
    }
    /// The earlier of the two.
    pub const fn min(self, other: SeqNo) -> SeqNo {
        if self.lt(other) {
            self
        } else {
            other
        }
    }
}

impl fmt::Debug for SeqNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}
impl fmt::Display for SeqNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A 26-bit message number (with the retransmission flag in use, as slipstream always negotiates).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MsgNo(u32);

impl MsgNo {
    /// Largest value; message numbers wrap to 1 (0 is reserved by libsrt for "none").
    pub const MAX: u32 = 0x03FF_FFFF;
    /// Builds a message number from the low 26 bits of `v`.
    pub const fn new(v: u32) -> Self {
        MsgNo(v & Self::MAX)
    }
    /// The raw value.
    pub const fn get(self) -> u32 {
        self.0
    }
    /// The next message number, skipping 0.
    pub const fn next(self) -> Self {
        let n = (self.0 + 1) & Self::MAX;
        MsgNo(if n == 0 { 1 } else { n })
    }
}

impl fmt::Debug for MsgNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "m{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps_and_compares_across_the_edge() {
        let top = SeqNo::new(SeqNo::MAX);
        assert_eq!(top.next(), SeqNo::new(0));
        assert!(top.lt(SeqNo::new(5)));
        assert_eq!(SeqNo::new(5).diff(top), 6);
        assert_eq!(top.diff(SeqNo::new(5)), -6);
        assert_eq!(SeqNo::new(3).sub(5), SeqNo::new(SeqNo::MAX - 1));
        assert_eq!(SeqNo::new(10).max(top), SeqNo::new(10));
    }

    #[test]
    fn msgno_skips_zero() {
        assert_eq!(MsgNo::new(MsgNo::MAX).next(), MsgNo::new(1));
    }
}
