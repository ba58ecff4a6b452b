//! One direction of a simulated path.

use std::time::{Duration, Instant};

/// Gilbert–Elliott two-state loss: a good and a bad state with their own loss ratios.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GilbertElliott {
    /// Probability per packet of moving from good to bad.
    pub p_good_to_bad: f64,
    /// Probability per packet of moving from bad to good.
    pub p_bad_to_good: f64,
    /// Loss ratio in the good state.
    pub loss_good: f64,
    /// Loss ratio in the bad state.
    pub loss_bad: f64,
}

/// How one direction of the path behaves. `Default` is a perfect link: no delay, no loss, no limit.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Uniform jitter added to the delay, `0..=jitter`. Jitter alone never reorders packets
    /// unless `reorder` is set (a link keeps order; reordering is its own knob).
    pub jitter: Duration,
    /// Random loss ratio, 0.0..=1.0.
    pub loss: f64,
    /// Bursty loss; when set it replaces `loss`.
    pub burst: Option<GilbertElliott>,
    /// Probability that a packet is held back and delivered after later ones.
    pub reorder: f64,
    /// Probability that a packet is delivered twice.
    pub dup: f64,
    /// Bottleneck rate in bits per second (None = unlimited).
    pub rate_bps: Option<u64>,
    /// Drop-tail queue in bytes in front of the bottleneck.
    pub queue_bytes: usize,
    /// Datagrams larger than this are dropped.
    pub mtu: usize,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            loss: 0.0,
            burst: None,
            reorder: 0.0,
            dup: 0.0,
            rate_bps: None,
            queue_bytes: 4 << 20,
            mtu: 65_535,
        }
    }
}

/// Counters of what the link did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams offered.
    pub offered: u64,
    /// Datagrams delivered (duplicates included).
    pub delivered: u64,
    /// Bytes delivered.
    pub delivered_bytes: u64,
    /// Dropped by random or bursty loss.
    pub lost: u64,
    /// Dropped because the queue was full.
    pub queue_drops: u64,
    /// Dropped because larger than the MTU.
    pub mtu_drops: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Packets delivered out of order.
    pub reordered: u64,
}

/// One direction of a simulated path. Steady state allocates nothing: buffers are recycled.
#[derive(Debug)]
pub struct Link {
    _todo: (),
}

impl Link {
    /// A link with the given behaviour; every random choice comes from `seed`.
    pub fn new(config: LinkConfig, seed: u64) -> Self {
        let _ = (config, seed);
        todo!()
    }
    /// Offers a datagram at time `now`; it may be dropped, delayed, duplicated or reordered.
    pub fn send(&mut self, now: Instant, datagram: &[u8]) {
        let _ = (now, datagram);
        todo!()
    }
    /// Delivers the next datagram due at or before `now` into `out`; returns its length.
    /// A datagram longer than `out` is truncated to fit (as a UDP socket would).
    pub fn poll_deliver(&mut self, now: Instant, out: &mut [u8]) -> Option<usize> {
        let _ = (now, out);
        todo!()
    }
    /// When the next datagram becomes deliverable.
    pub fn next_delivery(&self) -> Option<Instant> {
        todo!()
    }
    /// Datagrams queued or in flight.
    pub fn in_flight(&self) -> usize {
        todo!()
    }
    /// Counters so far.
    pub fn stats(&self) -> LinkStats {
        todo!()
    }
    /// The configuration.
    pub fn config(&self) -> &LinkConfig {
        todo!()
    }
}
