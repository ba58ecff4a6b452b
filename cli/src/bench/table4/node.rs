//! The hosts of the Table 4 experiment: three senders following the trace and one receiver,
//! each a thread whose socket lives in its host's namespace.

use super::trace::Event;
use slipstream::netem::netns;
use slipstream::rt::{Class, RtConfig, RtSocket, RtStats};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Index of a class in per-class arrays.
pub fn ix(c: Class) -> usize {
    match c {
        Class::Rt => 0,
        Class::Nrt => 1,
    }
}

/// Opens a socket bound to `addr` inside namespace `ns` (the calling thread moves there).
pub fn open_in(ns: &str, addr: SocketAddr, cfg: RtConfig) -> Result<RtSocket, String> {
    netns::enter(ns).map_err(|e| e.to_string())?;
    RtSocket::open(addr, cfg).map_err(|e| format!("opening {addr} in {ns}: {e}"))
}

/// What a sender did.
#[derive(Debug, Clone, Default)]
pub struct Sent {
    /// Messages of each class the trace asked for.
    pub asked: [u64; 2],
    /// Refused by the socket (queue full, no buffer), by class.
    pub refused: [u64; 2],
    /// How late each send was against the trace, µs (the sender's own scheduling).
    pub behind_us: Vec<u32>,
    /// The socket's counters at the end.
    pub stats: RtStats,
}

/// Sends event `ev` (meant for `due`) from `sock`, counting it into `out`; the message
/// carries its trace time in its first 8 bytes.
fn send_one(
    sock: &mut RtSocket,
    out: &mut Sent,
    ev: &Event,
    dst: SocketAddr,
    deadlines: [Duration; 2],
    due: Instant,
) {
    let c = ix(ev.class);
    out.asked[c] += 1;
    out.behind_us
        .push(due.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
    let Some(mut buf) = sock.claim() else {
        out.refused[c] += 1;
        return;
    };
    buf.as_mut()[..8].copy_from_slice(&ev.at_us.to_le_bytes());
    if sock
        .send_at(buf, ev.len, dst, ev.class, Some(deadlines[c]), due)
        .is_err()
    {
        out.refused[c] += 1;
    }
}

/// Sends `events` from `sock` to `dst`, each at `t0` plus its time; then waits until the
/// queues are empty (at most `drain`).
pub fn send(
    mut sock: RtSocket,
    dst: SocketAddr,
    events: &[Event],
    t0: Instant,
    deadlines: [Duration; 2],
    drain: Duration,
) -> Result<Sent, String> {
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
    let mut out = Sent::default();
    let io = |e: std::io::Error| e.to_string();
    for ev in events {
        let due = t0 + Duration::from_micros(ev.at_us);
        loop {
            let now = Instant::now();
            if now >= due {
                break;
            }
            sock.poll((due - now).min(Duration::from_millis(2)), |_| {})
                .map_err(io)?;
        }
        send_one(&mut sock, &mut out, ev, dst, deadlines, due);
    }
    let end = Instant::now() + drain;
    while sock.queued() != (0, 0) && Instant::now() < end {
        sock.poll(Duration::from_millis(1), |_| {}).map_err(io)?;
    }
    out.stats = sock.stats();
    Ok(out)
}

/// Sends every node's events from its own socket, all on the calling thread: on a small
/// machine each runnable thread adds to the others' scheduling delay, which the deadlines
/// count. Between events it polls every socket and sleeps until the next event or timer.
pub fn send_all(
    mut socks: Vec<RtSocket>,
    dst: SocketAddr,
    nodes: &[Vec<Event>],
    t0: Instant,
    deadlines: [Duration; 2],
    drain: Duration,
) -> Result<Vec<Sent>, String> {
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
    let io = |e: std::io::Error| e.to_string();
    let mut outs = vec![Sent::default(); socks.len()];
    let mut next = vec![0usize; socks.len()];
    let poll_all = |socks: &mut Vec<RtSocket>| -> Result<Instant, String> {
        for s in socks.iter_mut() {
            s.poll(Duration::ZERO, |_| {}).map_err(io)?;
        }
        Ok(socks
            .iter()
            .map(RtSocket::next_timer)
            .min()
            .unwrap_or_else(Instant::now))
    };
    loop {
        let pick = (0..socks.len())
            .filter(|&i| next[i] < nodes[i].len())
            .min_by_key(|&i| nodes[i][next[i]].at_us);
        let Some(i) = pick else { break };
        let ev = nodes[i][next[i]];
        next[i] += 1;
        let due = t0 + Duration::from_micros(ev.at_us);
        loop {
            let timer = poll_all(&mut socks)?;
            let now = Instant::now();
            if now >= due {
                break;
            }
            let wake = timer.min(due).min(now + Duration::from_millis(2));
            std::thread::sleep(wake.saturating_duration_since(now));
        }
        send_one(&mut socks[i], &mut outs[i], &ev, dst, deadlines, due);
    }
    let end = Instant::now() + drain;
    while socks.iter().any(|s| s.queued() != (0, 0)) && Instant::now() < end {
        poll_all(&mut socks)?;
        std::thread::sleep(Duration::from_micros(200));
    }
    for (out, s) in outs.iter_mut().zip(&socks) {
        out.stats = s.stats();
    }
    Ok(outs)
}

/// What the receiver got.
#[derive(Debug, Clone, Default)]
pub struct Received {
    /// Messages delivered, and of those late, by class.
    pub delivered: [u64; 2],
    pub late: [u64; 2],
    /// Delivered on time, by class, per second of intended send time.
    pub on_time_per_second: Vec<[u64; 2]>,
    /// One-way delays of real-time messages, µs.
    pub rt_delays_us: Vec<u32>,
    /// The socket's counters at the end.
    pub stats: RtStats,
}

/// Receives on `sock` until `stop`, then for `linger` more.
pub fn receive(
    mut sock: RtSocket,
    stop: Arc<AtomicBool>,
    linger: Duration,
    seconds: usize,
) -> Result<Received, String> {
    let _ = rustix::thread::set_current_timer_slack(std::num::NonZeroU64::new(1));
    let mut r = Received {
        on_time_per_second: vec![[0; 2]; seconds + 1],
        ..Received::default()
    };
    let mut until: Option<Instant> = None;
    loop {
        if until.is_none() && stop.load(Ordering::Relaxed) {
            until = Some(Instant::now() + linger);
        }
        if until.is_some_and(|u| Instant::now() >= u) {
            break;
        }
        sock.poll(Duration::from_millis(5), |m| {
            let c = ix(m.class);
            r.delivered[c] += 1;
            if m.late {
                r.late[c] += 1;
            } else if let Some(head) = m.data.first_chunk::<8>() {
                let s = (u64::from_le_bytes(*head) / 1_000_000) as usize;
                if let Some(slot) = r.on_time_per_second.get_mut(s) {
                    slot[c] += 1;
                }
            }
            if m.class == Class::Rt {
                r.rt_delays_us
                    .push(m.one_way.as_micros().min(u128::from(u32::MAX)) as u32);
            }
        })
        .map_err(|e| e.to_string())?;
    }
    r.stats = sock.stats();
    Ok(r)
}
