//! The seeded traffic of the Table 4 experiment, generated before either run so that both
//! conditions send exactly the same messages at the same times.
//!
//! Per sender node (three of them), at time scale 1 (a 100 Mbit/s bottleneck):
//! - real-time: one message of `rt_size` bytes every 2.47 ms (405 a second), at a random
//!   phase per node;
//! - non-real-time: messages of one full datagram (1,440 bytes: 1,500-byte IP packets) in
//!   bursts; bursts start as a Poisson process and hold a geometric number of messages
//!   (mean [`MEAN_BURST`]) sent at the same instant; the burst rate makes the offered load of
//!   all three nodes, real-time and non-real-time together, `load` times the bottleneck's
//!   rate in IP bytes (1.055 in the paper's run).
//!
//! The validity run's traffic is smooth instead: each node's non-real-time messages evenly
//! spaced, the nodes a third of a period apart, so that the bottleneck never queues more than
//! a packet or two and any deadline miss is the machine's (scheduling, emulator timing).
//!
//! At time scale k every time is k times longer and every rate k times lower.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slipstream::rt::Class;

/// Sender nodes.
pub const NODES: usize = 3;
/// Real-time period per node at scale 1, µs.
pub const RT_PERIOD_US: f64 = 2_470.0;
/// Payload of a non-real-time message: one full datagram.
pub const NRT_SIZE: usize = 1_440;
/// Bytes a message of one datagram adds on the wire: the fragment header, UDP and IPv4.
pub const OVERHEAD: usize = 32 + 8 + 20;
/// Mean non-real-time burst, messages.
pub const MEAN_BURST: f64 = 8.0;

/// One message to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// When, µs after the start.
    pub at_us: u64,
    pub class: Class,
    pub len: usize,
}

/// The experiment's traffic.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Each node's messages, in time order.
    pub nodes: Vec<Vec<Event>>,
}

impl Trace {
    /// `seconds` of traffic (real time, after scaling) at `load` times a bottleneck of
    /// `100 Mbit/s / scale`.
    /// With `smooth`, non-real-time messages are evenly spaced instead of bursty.
    pub fn generate(
        seed: u64,
        seconds: f64,
        scale: f64,
        load: f64,
        rt_size: usize,
        smooth: bool,
    ) -> Trace {
        let mut rng = SmallRng::seed_from_u64(seed);
        let bottleneck = 100e6 / scale;
        let period = RT_PERIOD_US * scale;
        let rt_bps = NODES as f64 * 8.0 * (rt_size + OVERHEAD) as f64 * 1e6 / period;
        let nrt_bps = (load * bottleneck - rt_bps).max(0.0);
        let nrt_per_node = nrt_bps / 8.0 / (NRT_SIZE + OVERHEAD) as f64 / NODES as f64;
        let burst_rate = nrt_per_node / MEAN_BURST;
        let end_us = (seconds * 1e6) as u64;
        let nodes = (0..NODES)
            .map(|node| {
                let mut ev = Vec::new();
                let mut t = rng.gen::<f64>() * period;
                while (t as u64) < end_us {
                    ev.push(Event {
                        at_us: t as u64,
                        class: Class::Rt,
                        len: rt_size,
                    });
                    t += period;
                }
                if smooth {
                    let gap = 1e6 / nrt_per_node;
                    let mut t = gap * node as f64 / NODES as f64;
                    while (t as u64) < end_us {
                        ev.push(Event {
                            at_us: t as u64,
                            class: Class::Nrt,
                            len: NRT_SIZE,
                        });
                        t += gap;
                    }
                    ev.sort_by_key(|e| e.at_us);
                    return ev;
                }
                let mut t = 0.0;
                loop {
                    t += -(1.0 - rng.gen::<f64>()).ln() / burst_rate * 1e6;
                    if t as u64 >= end_us {
                        break;
                    }
                    // Geometric, mean MEAN_BURST, at least one.
                    let mut n = 1;
                    while rng.gen::<f64>() > 1.0 / MEAN_BURST {
                        n += 1;
                    }
                    for _ in 0..n {
                        ev.push(Event {
                            at_us: t as u64,
                            class: Class::Nrt,
                            len: NRT_SIZE,
                        });
                    }
                }
                ev.sort_by_key(|e| e.at_us);
                ev
            })
            .collect();
        Trace { nodes }
    }

    /// Messages of `class`, all nodes.
    #[cfg(test)]
    pub fn count(&self, class: Class) -> u64 {
        self.nodes
            .iter()
            .flatten()
            .filter(|e| e.class == class)
            .count() as u64
    }

    /// Offered load in IP bits per second over `seconds`.
    pub fn offered_bps(&self, seconds: f64) -> f64 {
        let bytes: usize = self.nodes.iter().flatten().map(|e| e.len + OVERHEAD).sum();
        bytes as f64 * 8.0 / seconds
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_offers_the_load_asked_for_and_repeats_with_its_seed() {
        let t = Trace::generate(7, 20.0, 1.0, 1.055, 256, false);
        let offered = t.offered_bps(20.0);
        assert!((offered / 105.5e6 - 1.0).abs() < 0.03, "{offered}");
        let rt = t.count(Class::Rt);
        assert!((rt as f64 - 3.0 * 20.0 / 2.47e-3).abs() < 4.0, "{rt}");
        let again = Trace::generate(7, 20.0, 1.0, 1.055, 256, false);
        assert_eq!(t.nodes, again.nodes);
        let slow = Trace::generate(7, 20.0, 10.0, 1.055, 256, false);
        assert!((slow.offered_bps(20.0) / 10.55e6 - 1.0).abs() < 0.05);
        let smooth = Trace::generate(7, 20.0, 1.0, 0.8, 256, true);
        assert!((smooth.offered_bps(20.0) / 80e6 - 1.0).abs() < 0.02);
    }
}
