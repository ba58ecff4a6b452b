//! The Table 4 traffic through the emulated switch on an ideal host: the same trace through
//! the same link models (`slipstream_proto::sim::Link`, as the switch's forwarder runs them:
//! one access link per sender, store and forward into the receiver's port) in virtual time,
//! with senders that are never late and a forwarder and receiver that take no time. What it
//! misses is the physics of the experiment's assumptions (sizes, arrivals, two FIFO hops);
//! what a run misses beyond it is the machine's.

use super::ix;
use super::trace::{Trace, OVERHEAD};
use serde::Serialize;
use slipstream::netem::SwitchSpec;
use slipstream::rt::Class;
use slipstream_proto::sim::Link;
use std::time::{Duration, Instant};

/// What the ideal host would see, without a smoother.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ideal {
    /// Dropped by a queue, by class (real-time, non-real-time).
    pub dropped: [u64; 2],
    /// Delivered after the deadline, by class.
    pub late: [u64; 2],
    /// Dropped or late over sent, by class, %.
    pub miss_pct: [f64; 2],
    /// Real-time one-way delay: p50, p99 and max, µs.
    pub rt_p50_us: u64,
    pub rt_p99_us: u64,
    pub rt_max_us: u64,
}

/// The switch in virtual time.
struct Sim<'a> {
    t0: Instant,
    /// Every message: trace time (µs), class.
    events: &'a [(u64, Class)],
    deadlines: [Duration; 2],
    access: Vec<Link>,
    port: Link,
    buf: Vec<u8>,
    delivered: Vec<bool>,
    rt_delays: Vec<u64>,
    out: Ideal,
}

impl Sim<'_> {
    /// Moves everything due by `until` through the switch, earliest first (an access link's
    /// delivery before the port's at the same instant, as the forwarder does).
    fn advance(&mut self, until: Instant) {
        loop {
            let hop = self
                .access
                .iter()
                .enumerate()
                .filter_map(|(i, l)| Some((l.next_delivery()?, i)))
                .min();
            let exit = self.port.next_delivery();
            match (hop, exit) {
                (Some((at, i)), e) if at <= until && e.is_none_or(|e| at <= e) => {
                    if let Some(n) = self.access[i].poll_deliver(at, &mut self.buf) {
                        self.port.send(at, &self.buf[..n]);
                    }
                }
                (_, Some(at)) if at <= until => {
                    if let Some(n) = self.port.poll_deliver(at, &mut self.buf) {
                        self.arrive(at, n);
                    }
                }
                _ => return,
            }
        }
    }

    /// The receiver gets the first `n` bytes of `buf` at `at`.
    fn arrive(&mut self, at: Instant, n: usize) {
        let Some(id) = self.buf[..n].first_chunk::<8>() else {
            return;
        };
        let id = u64::from_le_bytes(*id) as usize;
        let Some(&(sent_us, class)) = self.events.get(id) else {
            return;
        };
        self.delivered[id] = true;
        let delay = at.duration_since(self.t0) - Duration::from_micros(sent_us);
        if delay > self.deadlines[ix(class)] {
            self.out.late[ix(class)] += 1;
        }
        if class == Class::Rt {
            self.rt_delays.push(delay.as_micros() as u64);
        }
    }
}

/// Runs `trace` through `spec`'s links (hosts `0..nodes` send to the last) with `deadlines`
/// (real-time, non-real-time) counted from each message's trace time.
pub fn run(trace: &Trace, spec: &SwitchSpec, deadlines: [Duration; 2]) -> Ideal {
    let mut all: Vec<(u64, usize, Class, usize)> = trace
        .nodes
        .iter()
        .enumerate()
        .flat_map(|(n, evs)| evs.iter().map(move |e| (e.at_us, n, e.class, e.len)))
        .collect();
    all.sort_by_key(|e| (e.0, e.1));
    let events: Vec<(u64, Class)> = all.iter().map(|e| (e.0, e.2)).collect();
    let mut sim = Sim {
        t0: Instant::now(),
        events: &events,
        deadlines,
        access: (0..trace.nodes.len())
            .map(|i| Link::new(spec.access.link.clone(), spec.access.seed + i as u64))
            .collect(),
        port: Link::new(spec.port.link.clone(), spec.port.seed),
        buf: vec![0; 2048],
        delivered: vec![false; events.len()],
        rt_delays: Vec::new(),
        out: Ideal::default(),
    };
    let mut pkt = [0u8; 2048];
    for (id, &(at_us, node, _, len)) in all.iter().enumerate() {
        let at = sim.t0 + Duration::from_micros(at_us);
        sim.advance(at);
        let size = (len + OVERHEAD).min(pkt.len());
        pkt[..8].copy_from_slice(&(id as u64).to_le_bytes());
        sim.access[node].send(at, &pkt[..size]);
    }
    sim.advance(sim.t0 + Duration::from_secs(24 * 3600));
    let Sim {
        mut out,
        mut rt_delays,
        delivered,
        ..
    } = sim;
    let mut sent = [0u64; 2];
    for (&(_, class), got) in events.iter().zip(&delivered) {
        sent[ix(class)] += 1;
        out.dropped[ix(class)] += u64::from(!got);
    }
    let Ideal { dropped, late, .. } = out;
    out.miss_pct = std::array::from_fn(|c| {
        if sent[c] == 0 {
            0.0
        } else {
            (dropped[c] + late[c]) as f64 * 100.0 / sent[c] as f64
        }
    });
    rt_delays.sort_unstable();
    let q = |p: f64| {
        rt_delays
            .get(((rt_delays.len() as f64 - 1.0) * p).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    (out.rt_p50_us, out.rt_p99_us, out.rt_max_us) = (q(0.5), q(0.99), q(1.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::table4::trace::{Event, NRT_SIZE};

    fn at_us(trace: Trace) -> Ideal {
        let spec = super::super::switch_spec(1, 64 << 10).unwrap();
        run(&trace, &spec, super::super::deadlines(1))
    }

    #[test]
    fn a_message_is_stored_and_forwarded_at_each_hop() {
        let rt = |at_us| Event {
            at_us,
            class: Class::Rt,
            len: 256,
        };
        let nrt = |at_us| Event {
            at_us,
            class: Class::Nrt,
            len: NRT_SIZE,
        };
        // Alone: two serialisations of 316 bytes at 100 Mbit/s, 25.3 µs each.
        let alone = at_us(Trace {
            nodes: vec![vec![rt(0)], vec![], vec![]],
        });
        assert!((50..=51).contains(&alone.rt_max_us), "{alone:?}");
        // Behind its own host's full packet, sent 1 µs before it: that packet's 120 µs on the
        // access link, then the rest of it at the port (it left the access link 25 µs
        // earlier), then its own 25 µs: 264 µs, within the 300 µs deadline.
        let behind = at_us(Trace {
            nodes: vec![vec![nrt(0), rt(1)], vec![], vec![]],
        });
        assert!((263..=265).contains(&behind.rt_max_us), "{behind:?}");
        assert_eq!(behind.miss_pct, [0.0, 0.0]);
        // Another host's full packet queued at the port before it adds its 120 µs: late.
        let crowded = at_us(Trace {
            nodes: vec![vec![nrt(0), rt(1)], vec![nrt(10)], vec![]],
        });
        assert_eq!(crowded.late, [1, 0], "{crowded:?}");
    }

    #[test]
    fn the_overloaded_trace_fills_the_port() {
        let t = Trace::generate(1, 5.0, 1.0, 1.055, 256, false);
        let ideal = at_us(t);
        assert!(ideal.dropped[1] > 0, "{ideal:?}");
        assert!(ideal.miss_pct[0] > 5.0, "{ideal:?}");
    }
}
