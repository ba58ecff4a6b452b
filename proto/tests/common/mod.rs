//! Shared helpers for the virtual-time tests.
#![allow(dead_code)]

use slipstream_proto::conn::{ConnConfig, Connection, Event, Mode, State};
use slipstream_proto::endpoint::ConnId;
use slipstream_proto::sim::{LinkConfig, Pair};
use std::time::{Duration, Instant};

/// Prints the seed when a test panics, so the failure can be replayed.
pub struct SeedGuard(pub u64);
impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "failing seed: {} (replay with SLIPSTREAM_SEED={})",
                self.0, self.0
            );
        }
    }
}

/// The seed for this run: SLIPSTREAM_SEED if set, else `default`.
pub fn seed(default: u64) -> u64 {
    std::env::var("SLIPSTREAM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Deterministic pseudo-random content.
pub fn content(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A symmetric path: one-way delay, loss, optional rate.
pub fn path(delay_ms: u64, loss: f64, rate_bps: Option<u64>) -> LinkConfig {
    LinkConfig {
        delay: Duration::from_millis(delay_ms),
        loss,
        rate_bps,
        queue_bytes: 4 << 20,
        ..LinkConfig::default()
    }
}

/// A bottleneck: one-way delay, loss, a rate and a drop-tail queue of `queue_bytes`.
pub fn bottleneck(delay_ms: u64, loss: f64, rate_bps: u64, queue_bytes: usize) -> LinkConfig {
    LinkConfig {
        queue_bytes,
        ..path(delay_ms, loss, Some(rate_bps))
    }
}

/// Connects a caller on `a` to a listener on `b`; returns (caller id, accepted id).
pub fn connect(p: &mut Pair, cfg: ConnConfig) -> (ConnId, ConnId) {
    connect_with(p, cfg.clone(), cfg)
}

/// [`connect`] with a configuration for each end: the caller's and the listener's.
pub fn connect_with(p: &mut Pair, caller: ConnConfig, listener: ConnConfig) -> (ConnId, ConnId) {
    p.b.listen(Some(listener));
    let now = p.now;
    let b_addr = p.b_addr;
    let ca = p.a.connect(now, b_addr, caller).expect("connect");
    let mut cb = None;
    let mut connected = false;
    let ok = p.run_until(Duration::from_secs(10), |p| {
        while let Some((id, ev)) = p.a.poll_event() {
            assert_eq!(id, ca);
            match ev {
                Event::Connected => connected = true,
                other => panic!("caller event {other:?}"),
            }
        }
        while let Some((id, ev)) = p.b.poll_event() {
            if ev == Event::Accepted {
                cb = Some(id);
            }
        }
        connected && cb.is_some()
    });
    assert!(ok, "handshake did not complete");
    (ca, cb.expect("accepted"))
}

/// Streams `data` from a's `ca` to b's `cb` (file mode), closing gracefully at the end.
/// Returns what b received.
pub fn stream(p: &mut Pair, ca: ConnId, cb: ConnId, data: &[u8], limit: Duration) -> Vec<u8> {
    stream_with(p, ca, cb, data, limit, |_| {})
}

/// Like [`stream`], calling `each_step` after the application's work at every step (to inject
/// traffic, change the path, or watch statistics).
pub fn stream_with(
    p: &mut Pair,
    ca: ConnId,
    cb: ConnId,
    data: &[u8],
    limit: Duration,
    each_step: impl FnMut(&mut Pair),
) -> Vec<u8> {
    stream_by(p, ca, cb, data, limit, each_step, |c, now, rest| {
        c.send(now, rest).ok()
    })
}

/// Like [`stream_with`], the sending application queueing with `push` (given the rest of
/// the data, it returns how much it queued, or `None` when the connection takes no more now).
pub fn stream_by(
    p: &mut Pair,
    ca: ConnId,
    cb: ConnId,
    data: &[u8],
    limit: Duration,
    mut each_step: impl FnMut(&mut Pair),
    mut push: impl FnMut(&mut Connection, Instant, &[u8]) -> Option<usize>,
) -> Vec<u8> {
    let mut sent = 0;
    let mut closed = false;
    let mut got = Vec::with_capacity(data.len());
    let mut buf = vec![0u8; 1 << 16];
    let mut eof = false;
    let ok = p.run_until(limit, |p| {
        let now = p.now;
        if let Some(c) = p.a.conn(ca) {
            while sent < data.len() {
                match push(c, now, &data[sent..]) {
                    Some(n) => sent += n,
                    None => break,
                }
            }
            if sent == data.len() && !closed {
                c.close(now);
                closed = true;
            }
        }
        let c = p.b.conn(cb).expect("receiver");
        loop {
            match c.recv(&mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(_) => break,
            }
        }
        each_step(p);
        eof
    });
    let sa = p.a.conn(ca).map(|c| c.stats(p.now));
    let sb = p.b.conn(cb).map(|c| c.stats(p.now));
    assert!(
        ok,
        "transfer did not finish in {limit:?}: sent {sent}/{}, got {}, a state {:?}\n a: {sa:?}\n b: {sb:?}",
        data.len(),
        got.len(),
        p.a.conn(ca).map(|c| c.state())
    );
    assert!(matches!(
        p.a.conn(ca).map(|c| c.state()),
        Some(State::Closed(_)) | None
    ));
    got
}

/// Queues as much of the rest of `data` (from `*sent` on) as the connection takes now.
pub fn offer(c: &mut Connection, now: Instant, data: &[u8], sent: &mut usize) {
    while *sent < data.len() {
        match c.send(now, &data[*sent..]) {
            Ok(n) => *sent += n,
            Err(_) => break,
        }
    }
}

/// File-mode config.
pub fn file_cfg() -> ConnConfig {
    ConnConfig::new(Mode::File)
}

/// Connects `n` callers on `a` to the listener on `b`, all at once; returns the callers and
/// the accepted connections (not paired: the tests count where data arrives).
pub fn connect_many(p: &mut Pair, n: usize, cfg: ConnConfig) -> (Vec<ConnId>, Vec<ConnId>) {
    p.b.listen(Some(cfg.clone()));
    let (now, b_addr) = (p.now, p.b_addr);
    let callers: Vec<ConnId> = (0..n)
        .map(|_| p.a.connect(now, b_addr, cfg.clone()).expect("connect"))
        .collect();
    let (mut connected, mut accepted) = (0, Vec::new());
    let ok = p.run_until(Duration::from_secs(20), |p| {
        while let Some((_, ev)) = p.a.poll_event() {
            match ev {
                Event::Connected => connected += 1,
                Event::Closed(r) => panic!("a caller closed while connecting: {r:?}"),
                _ => {}
            }
        }
        while let Some((id, ev)) = p.b.poll_event() {
            if ev == Event::Accepted {
                accepted.push(id);
            }
        }
        connected == n && accepted.len() == n
    });
    assert!(
        ok,
        "{connected} connected, {} accepted of {n}",
        accepted.len()
    );
    (callers, accepted)
}

/// Jain's fairness index of `x`: 1 when all are equal, 1/n when one has everything.
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    sum * sum / (x.len() as f64 * sq).max(f64::MIN_POSITIVE)
}
