//! Slipstream's side of `bench small`: two [`RtSocket`]s on loopback, a sender thread and a
//! receiver thread in this process (as Aeron's embedded samples are one process).

use super::{pct, Paced, Rate};
use slipstream::rt::{Class, RtConfig, RtSocket, WouldBlock};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn config(size: usize) -> RtConfig {
    RtConfig {
        max_message: size.max(16),
        buffers: 512,
        rt_queue: 256,
        // The measured path is the real-time class, which leaves at once with or without a
        // smoother; no smoother keeps the comparison to the bare path Aeron's samples take.
        smoother: None,
        ..RtConfig::default()
    }
}

fn pair(size: usize) -> Result<(RtSocket, RtSocket, SocketAddr), String> {
    let any: SocketAddr = "127.0.0.1:0".parse().expect("literal");
    let rx = RtSocket::open(any, config(size)).map_err(|e| format!("opening receiver: {e}"))?;
    let tx = RtSocket::open(any, config(size)).map_err(|e| format!("opening sender: {e}"))?;
    let to = rx.local_addr().map_err(|e| e.to_string())?;
    Ok((tx, rx, to))
}

/// Sends one message, waiting (polling the socket) while the real-time queue is full.
/// `write` fills the claimed buffer.
fn send_one(
    tx: &mut RtSocket,
    size: usize,
    to: SocketAddr,
    intended: Instant,
    write: impl Fn(&mut [u8]),
) -> Result<(), String> {
    let mut buf = loop {
        if let Some(b) = tx.claim() {
            break b;
        }
        tx.poll(Duration::ZERO, |_| {}).map_err(|e| e.to_string())?;
    };
    write(&mut buf.as_mut()[..size]);
    loop {
        match tx.send_at(buf, size, to, Class::Rt, None, intended) {
            Ok(()) => return Ok(()),
            Err(e) if e.reason == WouldBlock::RtQueueFull => {
                buf = e.buf;
                tx.poll(Duration::ZERO, |_| {}).map_err(|e| e.to_string())?;
            }
            Err(e) => return Err(format!("send refused: {:?}", e.reason)),
        }
    }
}

/// `count` messages sent as fast as the socket takes them (each in a datagram of its own, or
/// with `burst`, corked in bursts of that many, which leave bundled); counted at the receiver
/// from the first send to the last message received (or to when nothing more came for
/// 200 ms).
pub fn rate(size: usize, count: u64, burst: Option<u64>) -> Result<Rate, String> {
    let (mut tx, mut rx, to) = pair(size)?;
    let received = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let (r2, d2) = (received.clone(), done.clone());
    let receiver = std::thread::spawn(move || -> Result<Instant, String> {
        let mut n = 0u64;
        let mut last = Instant::now();
        while n < count {
            let got = rx
                .poll(Duration::from_millis(5), |_| {})
                .map_err(|e| e.to_string())?;
            if got > 0 {
                n += got as u64;
                last = Instant::now();
                r2.store(n, Ordering::Relaxed);
            } else if d2.load(Ordering::Relaxed) && last.elapsed() > Duration::from_millis(200) {
                break;
            }
        }
        Ok(last)
    });
    let start = Instant::now();
    let burst = burst.unwrap_or(1).max(1);
    for i in 0..count {
        if burst > 1 && i % burst == 0 {
            tx.cork();
        }
        send_one(&mut tx, size, to, Instant::now(), |_| {})?;
        if burst > 1 && (i % burst == burst - 1 || i == count - 1) {
            tx.uncork();
        }
    }
    done.store(true, Ordering::Relaxed);
    let last = receiver.join().map_err(|_| "receiver panicked")??;
    let n = received.load(Ordering::Relaxed);
    let secs = last
        .saturating_duration_since(start)
        .as_secs_f64()
        .max(1e-9);
    Ok(Rate {
        sent: count,
        received: n,
        seconds: secs,
        msgs_per_sec: n as f64 / secs,
    })
}

/// `rate` messages a second for `seconds` after one second of the same not recorded; each
/// carries the moment it was meant to leave and its number, and the receiver records its
/// arrival minus that moment.
pub fn paced(size: usize, rate: u64, seconds: f64) -> Result<Paced, String> {
    if size < 16 {
        return Err("--size: paced latency needs at least 16 bytes (a time and a number)".into());
    }
    let (mut tx, mut rx, to) = pair(size)?;
    let warm = rate;
    let count = (rate as f64 * seconds) as u64;
    let total = warm + count;
    let origin = Instant::now();
    let receiver = std::thread::spawn(move || -> Result<Vec<u64>, String> {
        let mut lat = Vec::with_capacity(count as usize);
        let mut seen = 0u64;
        let end = origin + Duration::from_secs_f64(seconds + 1.0) + Duration::from_secs(2);
        while seen < total && Instant::now() < end {
            rx.poll(Duration::from_millis(5), |m| {
                let now = origin.elapsed().as_nanos() as u64;
                // Anything else that reaches the port (shorter than a stamp) is not ours.
                let (Some(at), Some(i)) = (m.data.get(..8), m.data.get(8..16)) else {
                    return;
                };
                seen += 1;
                let at = u64::from_le_bytes(at.try_into().unwrap_or([0; 8]));
                let i = u64::from_le_bytes(i.try_into().unwrap_or([0; 8]));
                if i >= warm && lat.len() < lat.capacity() {
                    lat.push(now.saturating_sub(at));
                }
            })
            .map_err(|e| e.to_string())?;
        }
        Ok(lat)
    });
    let period = 1e9 / rate as f64;
    let t0 = origin.elapsed().as_nanos() as u64 + 1_000_000;
    for i in 0..total {
        let at = t0 + (i as f64 * period) as u64;
        let intended = origin + Duration::from_nanos(at);
        wait_until(intended);
        send_one(&mut tx, size, to, intended, |b| {
            b[..8].copy_from_slice(&at.to_le_bytes());
            b[8..16].copy_from_slice(&i.to_le_bytes());
        })?;
    }
    let lat = receiver.join().map_err(|_| "receiver panicked")??;
    Ok(Paced {
        rate,
        ..summary(lat, count)
    })
}

/// Sleeps until 50 µs before `at`, then spins (the Aeron side does the same).
fn wait_until(at: Instant) {
    let left = at.saturating_duration_since(Instant::now());
    if left > Duration::from_micros(50) {
        std::thread::sleep(left - Duration::from_micros(50));
    }
    while Instant::now() < at {
        std::hint::spin_loop();
    }
}

/// `count` round trips of one message after `count / 10` not recorded, over two
/// [`RtSocket`]s (a ponger thread sends each message back); round-trip times in `Paced`'s
/// fields (`rate` 0).
pub fn pingpong(size: usize, count: u64) -> Result<Paced, String> {
    let (mut ping, mut pong, to) = pair(size)?;
    let back = ping.local_addr().map_err(|e| e.to_string())?;
    let warm = (count / 10).max(1);
    let total = warm + count;
    let ponger = std::thread::spawn(move || -> Result<(), String> {
        let mut n = 0;
        let mut msg = vec![0u8; size];
        let end = Instant::now() + Duration::from_secs(120);
        while n < total && Instant::now() < end {
            let mut got = false;
            pong.poll(Duration::from_millis(5), |m| {
                let k = m.data.len().min(size);
                msg[..k].copy_from_slice(&m.data[..k]);
                got = true;
            })
            .map_err(|e| e.to_string())?;
            if got {
                send_one(&mut pong, size, back, Instant::now(), |b| {
                    b.copy_from_slice(&msg)
                })?;
                n += 1;
            }
        }
        Ok(())
    });
    let mut rtt = Vec::with_capacity(count as usize);
    for i in 0..total {
        let t = Instant::now();
        send_one(&mut ping, size, to, t, |_| {})?;
        let mut got = false;
        while !got {
            if t.elapsed() > Duration::from_secs(1) {
                return Err(format!("ping {i} got no answer"));
            }
            ping.poll(Duration::from_millis(5), |_| got = true)
                .map_err(|e| e.to_string())?;
        }
        if i >= warm {
            rtt.push(t.elapsed().as_nanos() as u64);
        }
    }
    ponger.join().map_err(|_| "ponger panicked")??;
    Ok(summary(rtt, count))
}

/// The same round trips over plain blocking `send_to`/`recv_from` (the kernel's floor).
pub fn plain_pingpong(size: usize, count: u64) -> Result<Paced, String> {
    let bind = || std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string());
    let (ping, pong) = (bind()?, bind()?);
    let to = pong.local_addr().map_err(|e| e.to_string())?;
    for s in [&ping, &pong] {
        s.set_read_timeout(Some(Duration::from_secs(1)))
            .map_err(|e| e.to_string())?;
    }
    let warm = (count / 10).max(1);
    let total = warm + count;
    let ponger = std::thread::spawn(move || {
        let mut buf = vec![0u8; 2048];
        for _ in 0..total {
            let Ok((n, src)) = pong.recv_from(&mut buf) else {
                return;
            };
            let _ = pong.send_to(&buf[..n], src);
        }
    });
    let msg = vec![0x5a; size];
    let mut buf = vec![0u8; 2048];
    let mut rtt = Vec::with_capacity(count as usize);
    for i in 0..total {
        let t = Instant::now();
        ping.send_to(&msg, to).map_err(|e| e.to_string())?;
        ping.recv_from(&mut buf)
            .map_err(|e| format!("plain ping {i}: {e}"))?;
        if i >= warm {
            rtt.push(t.elapsed().as_nanos() as u64);
        }
    }
    let _ = ponger.join();
    Ok(summary(rtt, count))
}

fn summary(mut ns: Vec<u64>, sent: u64) -> Paced {
    ns.sort_unstable();
    Paced {
        rate: 0,
        sent,
        received: ns.len() as u64,
        p50_us: pct(&ns, 0.5),
        p99_us: pct(&ns, 0.99),
        p999_us: pct(&ns, 0.999),
        max_us: ns.last().map_or(0.0, |&v| v as f64 / 1e3),
    }
}
