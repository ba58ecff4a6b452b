//! A receiver's loss report: what one receiver saw of one sender's real-time traffic, sent
//! back to that sender at least every refresh period so its smoother can react to loss.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! |         Magic 0x5254          |    Version    |  Kind 0xFF    |
//! |                      Report number                            |
//! |                     Messages delivered                        |
//! |                Messages missing (never whole)                 |
//! |              Messages dropped incomplete (expired)            |
//! |         Real-time messages delivered past their deadline      |
//! |       Non-real-time messages delivered past their deadline    |
//! |           Next expected message id, real-time class           |
//! |         Next expected message id, non-real-time class         |
//! |        Losses at this receiver, from every sender               |
//! ```
//!
//! Each class numbers its messages on its own (real-time messages overtake queued
//! non-real-time ones by design); a message gets its number when its first fragment leaves,
//! so one the sender dropped unsent leaves no gap. Lateness is counted by class: a
//! non-real-time message may be late for having waited at the sender's smoother, which says
//! nothing of the network. Every count is cumulative since the receiver first heard from the
//! sender, modulo 2³²: a lost or reordered report costs nothing, the sender compares each
//! with the last it took (the report number tells an old one from a new one). The kind byte
//! sits where a fragment's class does, with a value no class has, so a report never parses
//! as a fragment and a fragment never as a report.
//!
//! The last word counts what the receiver lost from all its senders together (messages
//! missing or expired, real-time messages late): congestion at a receiver's port is shared by
//! everyone sending into it, so a sender may back off for it even when its own messages
//! happened to get through.

use super::header::{RT_MAGIC, RT_VERSION};

/// Bytes of a report.
pub const REPORT_LEN: usize = 40;
/// The kind byte of a report.
pub const REPORT_KIND: u8 = 0xFF;

/// What a receiver has seen of one sender, cumulative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    /// Messages delivered whole.
    pub delivered: u32,
    /// Messages never delivered: ids skipped over by a later message.
    pub missing: u32,
    /// Messages dropped incomplete at their deadline (also counted in `missing` once a later
    /// message arrives).
    pub expired: u32,
    /// Real-time messages delivered after their deadline.
    pub late_rt: u32,
    /// Non-real-time messages delivered after their deadline.
    pub late_nrt: u32,
    /// The id the receiver expects next, in the real-time class.
    pub next_rt: u32,
    /// This report's number (one more than the previous report to the same sender).
    pub seq: u32,
    /// The id the receiver expects next, in the non-real-time class.
    pub next_nrt: u32,
    /// Losses the receiver saw from all its senders: messages missing or expired, and
    /// real-time messages late.
    pub receiver_losses: u32,
}

/// Why a datagram is not a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportError {
    /// Not [`REPORT_LEN`] bytes.
    Length,
    /// Another protocol, version or kind.
    Kind,
}

impl Report {
    /// Whether `datagram` claims to be a report (magic, version and kind), before checking
    /// the rest.
    pub fn is_report(datagram: &[u8]) -> bool {
        datagram.len() >= 4
            && datagram[..2] == RT_MAGIC.to_be_bytes()
            && datagram[2] == RT_VERSION
            && datagram[3] == REPORT_KIND
    }

    /// Reads a report.
    pub fn parse(datagram: &[u8]) -> Result<Report, ReportError> {
        let d: &[u8; REPORT_LEN] = datagram.try_into().map_err(|_| ReportError::Length)?;
        if !Self::is_report(d) {
            return Err(ReportError::Kind);
        }
        let u32_at = |i: usize| u32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
        Ok(Report {
            seq: u32_at(4),
            delivered: u32_at(8),
            missing: u32_at(12),
            expired: u32_at(16),
            late_rt: u32_at(20),
            late_nrt: u32_at(24),
            next_rt: u32_at(28),
            next_nrt: u32_at(32),
            receiver_losses: u32_at(36),
        })
    }

    /// Writes the report into `buf`.
    pub fn emit(&self, buf: &mut [u8; REPORT_LEN]) {
        buf[0..2].copy_from_slice(&RT_MAGIC.to_be_bytes());
        buf[2] = RT_VERSION;
        buf[3] = REPORT_KIND;
        for (i, v) in [
            self.seq,
            self.delivered,
            self.missing,
            self.expired,
            self.late_rt,
            self.late_nrt,
            self.next_rt,
            self.next_nrt,
            self.receiver_losses,
        ]
        .into_iter()
        .enumerate()
        {
            buf[4 + 4 * i..8 + 4 * i].copy_from_slice(&v.to_be_bytes());
        }
    }

    /// What changed since `prev` (the last report taken from the same receiver): messages
    /// newly missing, late or expired. `None` if this report is not newer than `prev`.
    pub fn since(&self, prev: &Report) -> Option<Losses> {
        let newer = self.seq.wrapping_sub(prev.seq);
        if newer == 0 || newer >= 1 << 31 {
            return None;
        }
        Some(Losses {
            delivered: self.delivered.wrapping_sub(prev.delivered),
            missing: self.missing.wrapping_sub(prev.missing),
            expired: self.expired.wrapping_sub(prev.expired),
            late_rt: self.late_rt.wrapping_sub(prev.late_rt),
            late_nrt: self.late_nrt.wrapping_sub(prev.late_nrt),
            receiver_losses: self.receiver_losses.wrapping_sub(prev.receiver_losses),
        })
    }
}

/// Changes between two reports of one receiver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Losses {
    /// Messages delivered in between.
    pub delivered: u32,
    /// Messages newly missing.
    pub missing: u32,
    /// Messages newly dropped incomplete.
    pub expired: u32,
    /// Real-time messages newly late.
    pub late_rt: u32,
    /// Non-real-time messages newly late.
    pub late_nrt: u32,
    /// New losses at the receiver, from all its senders.
    pub receiver_losses: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rt::header::RtHeader;

    fn report() -> Report {
        Report {
            delivered: 10,
            missing: 2,
            expired: 1,
            late_rt: 1,
            late_nrt: 3,
            next_rt: 13,
            seq: 4,
            next_nrt: 2,
            receiver_losses: 9,
        }
    }

    #[test]
    fn a_report_reads_back_as_written_and_is_never_a_fragment() {
        let mut b = [0; REPORT_LEN];
        report().emit(&mut b);
        assert_eq!(Report::parse(&b), Ok(report()));
        assert!(RtHeader::parse(&b).is_err());
        assert_eq!(Report::parse(&b[..39]), Err(ReportError::Length));
        let mut c = b;
        c[3] = 0;
        assert_eq!(Report::parse(&c), Err(ReportError::Kind));
    }

    #[test]
    fn changes_are_counted_across_wrap_and_old_reports_ignored() {
        let prev = Report {
            missing: u32::MAX,
            seq: u32::MAX,
            ..report()
        };
        let next = Report {
            missing: 1,
            seq: 0,
            ..report()
        };
        let l = next.since(&prev).unwrap();
        assert_eq!(l.missing, 2);
        assert_eq!(l.late_rt, 0);
        assert_eq!(prev.since(&next), None, "an older report");
        assert_eq!(next.since(&next), None, "the same report");
    }
}
