//! Two endpoints joined by a simulated path, driven in virtual time: the test bench for every
//! protocol behaviour. Deterministic for a given seed; nothing here reads a clock.

use super::{Link, LinkConfig};
use crate::endpoint::{Endpoint, EndpointConfig};
use crate::wire::HEADER_LEN;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Endpoint `a` and endpoint `b` with a link in each direction.
#[derive(Debug)]
pub struct Pair {
    /// Current virtual time.
    pub now: Instant,
    /// Virtual time at creation.
    pub start: Instant,
    /// The first endpoint (usually the caller).
    pub a: Endpoint,
    /// The second endpoint (usually the listener).
    pub b: Endpoint,
    /// Address of `a`.
    pub a_addr: SocketAddr,
    /// Address of `b`.
    pub b_addr: SocketAddr,
    /// Path from `a` to `b`.
    pub ab: Link,
    /// Path from `b` to `a`.
    pub ba: Link,
    /// Datagrams injected from elsewhere (hostile traffic) are sent from this address.
    pub intruder: SocketAddr,
    buf: Vec<u8>,
    /// The seed everything random was derived from.
    pub seed: u64,
    /// Endpoint `a` does nothing before this time: it neither sends, nor reads, nor runs its
    /// timers, as a process that is not scheduled. What arrives meanwhile waits for it.
    pub a_paused_until: Instant,
    /// Endpoint `a` is polled as a gathering I/O loop polls it
    /// ([`Endpoint::poll_transmit_gather`]): every pending datagram first, headers only,
    /// then each payload read from the send buffer and put behind its header.
    pub a_gathers: bool,
    /// Endpoint `b` receives as a splitting I/O loop does once its connections' payloads
    /// are large ([`Endpoint::owned_payload_len`]): each datagram's header apart and its
    /// payload in a buffer of its own, handed over with [`Endpoint::handle_data_owned`]
    /// (which may keep it and give another back).
    pub b_owned: bool,
    /// Payload buffers `b` kept (and gave another back for) with `b_owned`.
    pub b_kept: u64,
    b_payload: Vec<u8>,
}

impl Pair {
    /// Two endpoints and a path; `seed` drives both links and both endpoints.
    pub fn new(seed: u64, ab: LinkConfig, ba: LinkConfig) -> Self {
        // Any fixed Instant works as the origin: only differences are ever used.
        let start = Instant::now();
        let mut ca = EndpointConfig::default();
        ca.set_seed(seed ^ 0xA);
        let mut cb = EndpointConfig::default();
        cb.set_seed(seed ^ 0xB);
        Pair {
            now: start,
            start,
            a: Endpoint::new(ca, start),
            b: Endpoint::new(cb, start),
            a_addr: "10.0.0.1:4000".parse().expect("literal"),
            b_addr: "10.0.0.2:5000".parse().expect("literal"),
            ab: Link::new(ab, seed.wrapping_mul(3)),
            ba: Link::new(ba, seed.wrapping_mul(5)),
            intruder: "10.6.6.6:666".parse().expect("literal"),
            buf: vec![0; 65_536],
            seed,
            a_paused_until: start,
            a_gathers: false,
            b_owned: false,
            b_kept: 0,
            b_payload: Vec::new(),
        }
    }

    /// Virtual time elapsed.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Moves every pending transmit of both endpoints onto the links.
    pub fn flush(&mut self) {
        if self.a_gathers {
            self.flush_a_gathered();
            return self.flush_b();
        }
        while let Some(t) = self.a.poll_transmit(self.now, &mut self.buf) {
            if t.dst == self.b_addr {
                self.ab.send(self.now, &self.buf[..t.len]);
            }
        }
        self.flush_b();
    }

    fn flush_a_gathered(&mut self) {
        let mut heads = Vec::new();
        let mut batch = Vec::new();
        let mut at = 0;
        loop {
            heads.resize(at + self.buf.len(), 0);
            let Some((t, payload)) = self.a.poll_transmit_gather(self.now, &mut heads[at..]) else {
                break;
            };
            batch.push((t.dst, at, t.len, payload));
            at += t.len;
        }
        for (dst, at, len, payload) in batch {
            let mut datagram = heads[at..at + len].to_vec();
            if let Some(p) = payload {
                let bytes = self
                    .a
                    .payload(p)
                    .expect("a polled payload is held until sent");
                assert_eq!(
                    bytes.len(),
                    p.len(),
                    "the payload changed after it was polled"
                );
                datagram.extend_from_slice(bytes);
            }
            if dst == self.b_addr {
                self.ab.send(self.now, &datagram);
            }
        }
    }

    fn flush_b(&mut self) {
        while let Some(t) = self.b.poll_transmit(self.now, &mut self.buf) {
            if t.dst == self.a_addr {
                self.ba.send(self.now, &self.buf[..t.len]);
            }
        }
    }

    /// Hands `b` the datagram in `buf[..n]` from `a`, split if `b_owned` says so.
    fn deliver_b(&mut self, n: usize) {
        let datagram = std::mem::take(&mut self.buf);
        self.deliver_b_from(self.a_addr, &datagram[..n]);
        self.buf = datagram;
    }

    fn deliver_b_from(&mut self, from: SocketAddr, datagram: &[u8]) {
        let owned = self.b_owned.then(|| self.b.owned_payload_len()).flatten();
        let n = datagram.len();
        let head = n.min(HEADER_LEN);
        match owned {
            // A datagram larger than the buffer would be cut short (and dropped) by the
            // kernel; the sim hands it over whole instead.
            Some(len) if n - head <= len => {
                if self.b_payload.len() != len {
                    self.b_payload = vec![0; len];
                }
                self.b_payload[..n - head].copy_from_slice(&datagram[head..]);
                let given = self.b_payload.as_ptr();
                self.b.handle_data_owned(
                    self.now,
                    self.now,
                    from,
                    &datagram[..head],
                    &mut self.b_payload,
                    n - head,
                );
                assert_eq!(
                    self.b_payload.len(),
                    len,
                    "a buffer of another length came back"
                );
                self.b_kept += u64::from(self.b_payload.as_ptr() != given);
            }
            _ => self.b.handle(self.now, from, datagram),
        }
    }

    /// Where the payload buffer `b`'s next split receive writes into starts (with `b_owned`).
    pub fn b_payload_ptr(&self) -> *const u8 {
        self.b_payload.as_ptr()
    }

    /// Delivers a datagram to `b` as if it came from `from` (for hostile-input tests); split
    /// as any other if `b_owned` says so.
    pub fn inject_b(&mut self, from: SocketAddr, datagram: &[u8]) {
        self.deliver_b_from(from, datagram);
    }

    /// One step: flush, jump to the next event (at most `max_step` ahead), deliver what is due,
    /// fire timers. Returns false when nothing is scheduled at all.
    pub fn step(&mut self, max_step: Duration) -> bool {
        let a_runs = self.now >= self.a_paused_until;
        if a_runs {
            self.flush();
        } else {
            self.flush_b();
        }
        let (a_timeout, to_a) = if a_runs {
            (self.a.poll_timeout(), self.ba.next_delivery())
        } else {
            (Some(self.a_paused_until), None)
        };
        let next = [
            a_timeout,
            self.b.poll_timeout(),
            self.ab.next_delivery(),
            to_a,
        ]
        .into_iter()
        .flatten()
        .min();
        let limit = self.now + max_step;
        let Some(next) = next else {
            self.now = limit;
            return false;
        };
        self.now = self.now.max(next.min(limit));
        while let Some(n) = self.ab.poll_deliver(self.now, &mut self.buf) {
            self.deliver_b(n);
        }
        if self.now >= self.a_paused_until {
            while let Some(n) = self.ba.poll_deliver(self.now, &mut self.buf) {
                self.a.handle(self.now, self.b_addr, &self.buf[..n]);
            }
            self.a.handle_timeout(self.now);
        }
        self.b.handle_timeout(self.now);
        true
    }

    /// Steps until `done(self)` is true or `limit` of virtual time has passed. Between steps
    /// `done` may also act as the application (send, receive). Returns whether `done` held.
    pub fn run_until(&mut self, limit: Duration, mut done: impl FnMut(&mut Pair) -> bool) -> bool {
        let end = self.now + limit;
        let mut stuck = 0u32;
        while self.now < end {
            if done(self) {
                return true;
            }
            let before = self.now;
            self.step(Duration::from_millis(5));
            // A deadline that is reported but never consumed would spin a real event loop;
            // here it is a failure, not a hang.
            stuck = if self.now == before { stuck + 1 } else { 0 };
            assert!(
                stuck < 100_000,
                "virtual time stuck at {:?} (seed {})",
                self.elapsed(),
                self.seed
            );
        }
        done(self)
    }
}
