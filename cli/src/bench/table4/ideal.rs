//! The Table 4 traffic through the emulated switch on an ideal host: the same trace through
//! the same link models (`slipstream_proto::sim::Link`, as the switch's forwarder runs them:
//! one access link per sender, store and forward into the receiver's port) in virtual time,
//! with senders that are never late and a forwarder and receiver that take no time. What it
//! misses is the physics of the experiment's assumptions (sizes, arrivals, two FIFO hops);
//! what a run misses beyond it is the machine's.

use super::ix;
use super::trace::{Trace, OVERHEAD};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use slipstream::netem::SwitchSpec;
use slipstream::rt::{Class, LossSignal, RtConfig};
use slipstream_proto::rt::smoother::Smoother;
use slipstream_proto::sim::Link;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What the ideal host would see.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Ideal {
    /// Dropped at the sender (its queue full, or waiting past the deadline), by class
    /// (real-time, non-real-time).
    pub smoother_drops: [u64; 2],
    /// Dropped by the switch's queues, by class.
    pub dropped: [u64; 2],
    /// Delivered after the deadline, by class.
    pub late: [u64; 2],
    /// Dropped or late over sent, by class, %.
    pub miss_pct: [f64; 2],
    /// Real-time one-way delay: p50, p99 and max, µs.
    pub rt_p50_us: u64,
    pub rt_p99_us: u64,
    pub rt_max_us: u64,
    /// The smoothers' refresh periods at the end, ms.
    pub final_period_ms: Vec<f64>,
}

/// A sender host of the ideal run: its smoother, if any, and its queue of non-real-time
/// messages waiting for credit or for room on its access link (as the real sender's model of
/// the link below allows: `below` packets in it at most).
struct Host {
    smoother: Option<Smoother>,
    waiting: VecDeque<usize>,
    /// Loss the receiver saw from this host since its last report (gaps, late real-time).
    lost: bool,
    next_report: Instant,
}

/// The switch and its hosts in virtual time.
struct Sim<'a> {
    t0: Instant,
    /// Every message: trace time (µs), host, class, payload bytes; in time order.
    events: &'a [(u64, usize, Class, usize)],
    deadlines: [Duration; 2],
    access: Vec<Link>,
    port: Link,
    hosts: Vec<Host>,
    /// With a smoother: the sender's settings (queue, room below, reports).
    cfg: Option<RtConfig>,
    buf: Vec<u8>,
    pkt: Vec<u8>,
    delivered: Vec<bool>,
    rt_delays: Vec<u64>,
    out: Ideal,
}

impl Sim<'_> {
    fn at(&self, us: u64) -> Instant {
        self.t0 + Duration::from_micros(us)
    }

    /// Hands message `id` to its host's access link at `now`.
    fn send(&mut self, id: usize, now: Instant) {
        let (_, host, _, len) = self.events[id];
        let size = (len + OVERHEAD).min(self.pkt.len());
        self.pkt[..8].copy_from_slice(&(id as u64).to_le_bytes());
        self.access[host].send(now, &self.pkt[..size]);
    }

    /// Sends what host `h`'s smoother and the room below allow; drops what waited past
    /// its deadline.
    fn pump(&mut self, h: usize, now: Instant) {
        let Some(below) = self.cfg.as_ref().map(|c| c.below_packets.max(1) as usize) else {
            return;
        };
        while let Some(&id) = self.hosts[h].waiting.front() {
            let due = self.at(self.events[id].0) + self.deadlines[1];
            if due <= now {
                self.hosts[h].waiting.pop_front();
                self.out.smoother_drops[1] += 1;
                continue;
            }
            if self.access[h].in_flight() >= below {
                return;
            }
            let bytes = self.events[id].3 + OVERHEAD;
            if !self.hosts[h]
                .smoother
                .as_mut()
                .is_some_and(|s| s.try_nrt(bytes))
            {
                return;
            }
            self.hosts[h].waiting.pop_front();
            self.send(id, now);
        }
    }

    /// A trace event at its time.
    fn offer(&mut self, id: usize) {
        let (at_us, h, class, _) = self.events[id];
        let now = self.at(at_us);
        match (class, self.cfg.as_ref().map(|c| c.nrt_queue)) {
            (Class::Rt, _) | (Class::Nrt, None) => {
                let bytes = self.events[id].3 + OVERHEAD;
                if let Some(s) = &mut self.hosts[h].smoother {
                    s.take_rt(bytes);
                }
                self.send(id, now);
            }
            (Class::Nrt, Some(cap)) => {
                if self.hosts[h].waiting.len() >= cap {
                    self.out.smoother_drops[1] += 1;
                } else {
                    self.hosts[h].waiting.push_back(id);
                }
                self.pump(h, now);
            }
        }
    }

    /// The earliest thing that happens next, before `until`: a hop, a delivery, a refresh
    /// or a report.
    fn step(&mut self, until: Instant) -> bool {
        let hop = self
            .access
            .iter()
            .enumerate()
            .filter_map(|(i, l)| Some((l.next_delivery()?, i)))
            .min();
        let exit = self.port.next_delivery();
        let refresh = self
            .hosts
            .iter()
            .enumerate()
            .filter_map(|(i, h)| Some((h.smoother.as_ref()?.next_refresh(), i)))
            .min();
        let report = self
            .hosts
            .iter()
            .enumerate()
            .filter(|_| self.cfg.is_some())
            .map(|(i, h)| (h.next_report, i))
            .min();
        let first = [
            hop.map(|(t, _)| (t, 0)),
            exit.map(|t| (t, 1)),
            refresh.map(|(t, _)| (t, 2)),
            report.map(|(t, _)| (t, 3)),
        ]
        .into_iter()
        .flatten()
        .filter(|&(t, _)| t <= until)
        .min();
        match first {
            Some((at, 0)) => {
                let i = hop.map_or(0, |(_, i)| i);
                if let Some(n) = self.access[i].poll_deliver(at, &mut self.buf) {
                    let drops = self.port.stats().queue_drops;
                    self.port.send(at, &self.buf[..n]);
                    if self.port.stats().queue_drops > drops {
                        self.lose(i);
                    }
                }
                self.pump(i, at);
            }
            Some((at, 1)) => {
                if let Some(n) = self.port.poll_deliver(at, &mut self.buf) {
                    self.arrive(at, n);
                }
            }
            Some((at, 2)) => {
                let i = refresh.map_or(0, |(_, i)| i);
                if let Some(s) = &mut self.hosts[i].smoother {
                    s.handle_timeout(at);
                }
                self.pump(i, at);
            }
            Some((_, _)) => {
                let i = report.map_or(0, |(_, i)| i);
                let interval = self
                    .cfg
                    .as_ref()
                    .map_or(Duration::MAX, |c| c.report_interval);
                let h = &mut self.hosts[i];
                if let Some(s) = &mut h.smoother {
                    s.on_report(h.lost);
                }
                h.lost = false;
                h.next_report += interval;
            }
            None => return false,
        }
        true
    }

    /// The receiver saw a loss from host `h`: its next report tells it, and with
    /// [`LossSignal::Receiver`] every host's next report.
    fn lose(&mut self, h: usize) {
        match self.cfg.as_ref().map(|c| c.loss_signal) {
            Some(LossSignal::Receiver) => self.hosts.iter_mut().for_each(|x| x.lost = true),
            _ => self.hosts[h].lost = true,
        }
    }

    /// The receiver gets the first `n` bytes of `buf` at `at`.
    fn arrive(&mut self, at: Instant, n: usize) {
        let Some(id) = self.buf[..n].first_chunk::<8>() else {
            return;
        };
        let id = u64::from_le_bytes(*id) as usize;
        let Some(&(sent_us, h, class, _)) = self.events.get(id) else {
            return;
        };
        self.delivered[id] = true;
        let delay = at.duration_since(self.t0) - Duration::from_micros(sent_us);
        if delay > self.deadlines[ix(class)] {
            self.out.late[ix(class)] += 1;
            let late_is_loss = self.cfg.as_ref().is_some_and(|c| c.late_is_loss);
            if class == Class::Rt && late_is_loss {
                self.lose(h);
            }
        }
        if class == Class::Rt {
            self.rt_delays.push(delay.as_micros() as u64);
        }
    }
}

/// Runs `trace` through `spec`'s links (hosts `0..nodes` send to the last) with `deadlines`
/// (real-time, non-real-time) counted from each message's trace time; with `smoothed`, each
/// sender host runs the smoother and queues of that configuration (its `smoother`,
/// `below_packets`, `nrt_queue`, `report_interval`, `late_is_loss` and `loss_signal`), the
/// receiver's reports reaching it at once; `seed` sets the smoothers' phases.
pub fn run(
    trace: &Trace,
    spec: &SwitchSpec,
    deadlines: [Duration; 2],
    smoothed: Option<&RtConfig>,
    seed: u64,
) -> Ideal {
    let mut events: Vec<(u64, usize, Class, usize)> = trace
        .nodes
        .iter()
        .enumerate()
        .flat_map(|(n, evs)| evs.iter().map(move |e| (e.at_us, n, e.class, e.len)))
        .collect();
    events.sort_by_key(|e| (e.0, e.1));
    let t0 = Instant::now();
    let mut rng = SmallRng::seed_from_u64(seed);
    let cfg = smoothed.filter(|c| c.smoother.is_some()).cloned();
    let hosts = (0..trace.nodes.len())
        .map(|_| Host {
            smoother: cfg.as_ref().and_then(|c| c.smoother).map(|s| {
                // As the real socket does, the first refresh comes a random share of
                // the first period late; here the share comes from the trace's seed.
                let mut sm = Smoother::new(s, t0);
                sm.delay_refresh(sm.period().mul_f64(rng.gen::<f64>()));
                sm
            }),
            waiting: VecDeque::new(),
            lost: false,
            next_report: t0 + cfg.as_ref().map_or(Duration::ZERO, |c| c.report_interval),
        })
        .collect();
    let mut sim = Sim {
        t0,
        events: &events,
        deadlines,
        access: (0..trace.nodes.len())
            .map(|i| Link::new(spec.access.link.clone(), spec.access.seed + i as u64))
            .collect(),
        port: Link::new(spec.port.link.clone(), spec.port.seed),
        hosts,
        cfg,
        buf: vec![0; 2048],
        pkt: vec![0; 2048],
        delivered: vec![false; events.len()],
        rt_delays: Vec::new(),
        out: Ideal::default(),
    };
    for (id, e) in events.iter().enumerate() {
        let at = sim.at(e.0);
        while sim.step(at) {}
        sim.offer(id);
    }
    // Drain: what still waits expires, what is in the links arrives.
    let end = sim.at(events.last().map_or(0, |e| e.0)) + deadlines[1] * 2 + Duration::from_secs(2);
    while sim.step(end) {}
    for h in 0..sim.hosts.len() {
        sim.pump(h, end);
        sim.out.smoother_drops[1] += sim.hosts[h].waiting.len() as u64;
    }
    let Sim {
        mut out,
        mut rt_delays,
        delivered,
        hosts,
        ..
    } = sim;
    out.final_period_ms = hosts
        .iter()
        .filter_map(|h| h.smoother.as_ref())
        .map(|s| s.period().as_secs_f64() * 1e3)
        .collect();
    let mut sent = [0u64; 2];
    let mut missing = [0u64; 2];
    for (&(_, _, class, _), got) in events.iter().zip(&delivered) {
        sent[ix(class)] += 1;
        missing[ix(class)] += u64::from(!got);
    }
    out.dropped = std::array::from_fn(|c| missing[c] - out.smoother_drops[c]);
    let Ideal {
        smoother_drops,
        dropped,
        late,
        ..
    } = out;
    out.miss_pct = std::array::from_fn(|c| {
        if sent[c] == 0 {
            0.0
        } else {
            (smoother_drops[c] + dropped[c] + late[c]) as f64 * 100.0 / sent[c] as f64
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
        run(&trace, &spec, super::super::deadlines(1), None, 1)
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
    fn the_smoother_cuts_real_time_loss_on_an_ideal_host() {
        let trace = Trace::generate(1, 10.0, 1.0, 1.055, 256, false);
        let spec = super::super::switch_spec(1, 64 << 10).unwrap();
        let cfg = RtConfig {
            smoother: Some(slipstream::rt::SmootherConfig::default()),
            link_rate: Some(100_000_000),
            below_packets: 1,
            nrt_queue: 256,
            report_interval: Duration::from_millis(5),
            ..RtConfig::default()
        };
        let deadlines = super::super::deadlines(1);
        let without = run(&trace, &spec, deadlines, None, 1);
        let with = run(&trace, &spec, deadlines, Some(&cfg), 1);
        assert!(without.miss_pct[0] > 50.0, "{without:?}");
        assert!(with.miss_pct[0] < 2.0, "{with:?}");
        // It held non-real-time messages back past their deadline instead.
        assert!(with.smoother_drops[1] > 0, "{with:?}");
        assert_eq!(with.final_period_ms.len(), 3);
    }

    #[test]
    fn the_overloaded_trace_fills_the_port() {
        let t = Trace::generate(1, 5.0, 1.0, 1.055, 256, false);
        let ideal = at_us(t);
        assert!(ideal.dropped[1] > 0, "{ideal:?}");
        assert!(ideal.miss_pct[0] > 5.0, "{ideal:?}");
    }
}
