//! The real-time socket as an application uses it: a sender and a receiver through a relay
//! that loses datagrams, with nothing allocated after open on either side, and every
//! message accounted for (delivered, or reported missing to the sender).
// The counting allocator (tests/support/counting.rs) needs `unsafe`; nothing else here does.
#![allow(unsafe_code)]

use slipstream::rt::{Class, RtConfig, RtSocket, SmootherConfig};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/counting.rs"]
mod counting;

#[global_allocator]
static A: counting::Counting = counting::Counting;

fn lo() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A relay between two sockets that drops every `drop_every`-th datagram going forward
/// (0: none) and forwards reports back; runs on its own thread until `stop`.
struct Relay {
    front: SocketAddr,
    stop: Arc<AtomicBool>,
    dropped: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Relay {
    fn start(to: SocketAddr, drop_every: u64) -> Relay {
        let front = UdpSocket::bind(lo()).unwrap();
        let back = UdpSocket::bind(lo()).unwrap();
        for s in [&front, &back] {
            s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
            // Room for whole GSO runs: the relay itself must not lose datagrams.
            socket2::SockRef::from(s)
                .set_recv_buffer_size(8 << 20)
                .unwrap();
        }
        let addr = front.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let dropped = Arc::new(AtomicU64::new(0));
        let (st, dr) = (stop.clone(), dropped.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0; 65_536];
            let mut sender = None;
            let mut n = 0u64;
            while !st.load(Ordering::Relaxed) {
                while let Ok((len, from)) = front.recv_from(&mut buf) {
                    sender = Some(from);
                    n += 1;
                    if drop_every > 0 && n.is_multiple_of(drop_every) {
                        dr.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let _ = back.send_to(&buf[..len], to);
                }
                while let Ok((len, _)) = back.recv_from(&mut buf) {
                    if let Some(s) = sender {
                        let _ = front.send_to(&buf[..len], s);
                    }
                }
            }
        });
        Relay {
            front: addr,
            stop,
            dropped,
            thread: Some(thread),
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Message sizes the run cycles through: one datagram, a few, a GSO run and more.
// Real-time messages (every third) take the sizes at 0 and 3: both fit one fragment, so a
// corked burst bundles them.
const SIZES: [usize; 6] = [64, 5000, 30_000, 1000, 1441, 64 << 10];

fn run(drop_every: u64, count_allocs: bool) {
    let cfg = RtConfig {
        buffers: 32,
        reassembly_slots: 16,
        reassembly_timeout: Duration::from_millis(50),
        report_interval: Duration::from_millis(2),
        // Steady loss keeps the period at its longest: short enough here that queued
        // messages do not wait past their deadline.
        smoother: Some(SmootherConfig {
            rp_max: Duration::from_millis(10),
            ..SmootherConfig::default()
        }),
        ..RtConfig::default()
    };
    let mut rx = RtSocket::open(lo(), cfg).unwrap();
    let relay = Relay::start(rx.local_addr().unwrap(), drop_every);
    let mut tx = RtSocket::open(lo(), cfg).unwrap();
    let dst = relay.front;
    let mut delivered = 0u64;
    let mut bad = 0u64;
    let step = |tx: &mut RtSocket, rx: &mut RtSocket, delivered: &mut u64, bad: &mut u64| {
        tx.poll(Duration::ZERO, |_| {}).unwrap();
        rx.poll(Duration::from_micros(200), |m| {
            *delivered += 1;
            let Some((head, rest)) = m.data.split_first_chunk::<4>() else {
                *bad += 1;
                return;
            };
            let n = u32::from_le_bytes(*head);
            let len = SIZES[(n as usize) % SIZES.len()];
            if m.data.len() != len || rest.iter().any(|&b| b != n as u8) {
                *bad += 1;
            }
        })
        .unwrap();
    };
    // Warm up (first sends, probes), then count.
    let total = 600u32;
    let warm = 60u32;
    for id in 0..total {
        if id == warm {
            counting::start(count_allocs);
        }
        let len = SIZES[(id as usize) % SIZES.len()];
        let class = if id % 3 == 0 { Class::Rt } else { Class::Nrt };
        // Without loss, bursts of 12 are corked: their small real-time messages leave
        // bundled (with loss, one lost bundle would lose several messages, which the
        // accounting below does not expect).
        let cork = drop_every == 0;
        if cork && id % 12 == 0 {
            tx.cork();
        }
        let mut buf = loop {
            if let Some(b) = tx.claim() {
                break b;
            }
            step(&mut tx, &mut rx, &mut delivered, &mut bad);
        };
        buf.as_mut()[..len].fill(id as u8);
        buf.as_mut()[..4].copy_from_slice(&id.to_le_bytes());
        let mut pending = Some(buf);
        while let Some(b) = pending.take() {
            match tx.send(b, len, dst, class, Some(Duration::from_secs(1))) {
                Ok(_) => {}
                Err(e) => {
                    pending = Some(e.buf);
                    step(&mut tx, &mut rx, &mut delivered, &mut bad);
                }
            }
        }
        if cork && id % 12 == 11 {
            tx.uncork();
        }
        step(&mut tx, &mut rx, &mut delivered, &mut bad);
    }
    tx.uncork();
    let end = Instant::now() + Duration::from_secs(5);
    while tx.queued() != (0, 0) && Instant::now() < end {
        step(&mut tx, &mut rx, &mut delivered, &mut bad);
    }
    let quiet = Instant::now() + Duration::from_millis(300);
    while Instant::now() < quiet {
        step(&mut tx, &mut rx, &mut delivered, &mut bad);
    }
    counting::stop();
    let (t, r) = (tx.stats(), rx.stats());
    let dropped = relay.dropped.load(Ordering::Relaxed);
    drop(relay);
    assert_eq!(bad, 0, "every delivered message is byte-exact");
    assert_eq!(delivered, r.rt_delivered + r.nrt_delivered);
    assert_eq!(t.rt_sent + t.nrt_sent, u64::from(total));
    assert_eq!(t.nrt_expired, 0, "nothing waited a second: {t:?}");
    let lost = u64::from(total) - delivered;
    if drop_every == 0 {
        assert_eq!(lost, 0, "no loss, everything arrives: {r:?}");
        assert!(t.rt_bundles > 0, "corked bursts left bundled: {t:?}");
    } else {
        assert!(dropped > 0 && lost > 0, "the relay dropped {dropped}");
        // Real-time messages that waited together for a full kernel buffer leave bundled:
        // then one lost datagram may carry several (at most 22 of these sizes).
        let per = if t.rt_bundles > 0 { 22 } else { 1 };
        assert!(
            lost <= dropped * per,
            "one lost datagram loses one message at most: {lost} lost, {dropped} dropped, {t:?} {r:?}"
        );
        // What the sender heard: every message not delivered was reported missing, except
        // those after the last delivered one (nothing later reveals them).
        assert!(
            t.reported_missing <= lost && t.reported_missing + 2 >= lost,
            "missing reported {} of {lost} lost",
            t.reported_missing
        );
        assert!(t.smoother.lossy_refreshes > 0, "loss lengthened the period");
    }
    if count_allocs {
        assert_eq!(counting::allocations(), 0, "allocations after open");
    }
}

#[test]
fn nothing_allocates_after_open_without_loss() {
    run(0, true);
}

#[test]
fn nothing_allocates_after_open_with_loss_and_losses_are_reported() {
    run(37, true);
}
