//! The asynchronous datagram API on loopback: contents, completions, overflow accounting,
//! back-pressure, the portable engine, GRO, and no allocation in steady state.
// The counting allocator (tests/support/counting.rs) needs `unsafe`; nothing else here does.
#![allow(unsafe_code)]

use slipstream::dgram::{AsyncOptions, AsyncSocket, Completion, Engine, OpKind};
use std::net::SocketAddr;
use std::time::Duration;

#[path = "support/counting.rs"]
mod counting;

#[global_allocator]
static A: counting::Counting = counting::Counting;

fn lo() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Whether the io_uring engine can run here. In CI (CI=true) it must: a kernel without it
/// fails the run instead of skipping the io_uring cases.
fn uring_ok() -> bool {
    let c = slipstream::dgram::probe();
    let ok = c.available && c.recvmsg_multishot && c.buf_ring;
    if !ok {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "io_uring unavailable in CI: {c:?}"
        );
        eprintln!("skipping the io_uring engine: not available here ({c:?})");
    }
    ok
}

fn engines() -> Vec<Engine> {
    if uring_ok() {
        vec![Engine::Uring, Engine::Portable]
    } else {
        vec![Engine::Portable]
    }
}

fn opts(engine: Engine) -> AsyncOptions {
    AsyncOptions {
        engine,
        buffers: 256,
        reserve: 32,
        ..AsyncOptions::default()
    }
}

/// Receives `n` datagrams on `rx`, keeping receives posted; returns their contents.
fn collect(rx: &mut AsyncSocket, n: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut idle = 0;
    let end = std::time::Instant::now() + Duration::from_secs(2);
    while got.len() < n && std::time::Instant::now() < end {
        while let Some(b) = rx.claim() {
            rx.post_recv(b);
            if rx.free_buffers() < 8 {
                break;
            }
        }
        let mut done: Vec<Completion> = Vec::new();
        rx.wait_completions(Duration::from_millis(20), |c| done.push(c))
            .unwrap();
        if done.is_empty() && !got.is_empty() {
            idle += 1;
            if idle == 5 {
                break; // 100 ms with nothing: the rest was dropped (and counted)
            }
        } else {
            idle = 0;
        }
        for c in done {
            if c.kind == OpKind::Recv {
                got.extend(c.datagrams().map(|d| d.to_vec()));
            }
        }
    }
    got
}

#[test]
fn round_trip_contents() {
    for e in engines() {
        let mut rx = AsyncSocket::bind(lo(), opts(e)).unwrap();
        let mut tx = AsyncSocket::bind(lo(), opts(e)).unwrap();
        assert_eq!(
            tx.stats().engine,
            if e == Engine::Uring {
                "uring"
            } else {
                "portable"
            }
        );
        let dst = rx.local_addr().unwrap();
        // Post receives first, then a mix of sizes (some GSO runs, some singles).
        for _ in 0..64 {
            let b = rx.claim().unwrap();
            rx.post_recv(b);
        }
        let mut sent = Vec::new();
        for i in 0..100u32 {
            let len = if i % 10 < 7 { 1000 } else { 100 + i as usize };
            let mut b = tx.claim().unwrap();
            for (k, x) in b.as_mut()[..len].iter_mut().enumerate() {
                *x = (i as usize * 7 + k) as u8;
            }
            sent.push(b.as_ref()[..len].to_vec());
            tx.commit(b, len, dst);
        }
        tx.drain_sends(Duration::from_secs(2)).unwrap();
        let got = collect(&mut rx, 100);
        assert_eq!(got, sent, "engine {e:?}");
        let s = tx.stats();
        assert_eq!(s.sent_datagrams, 100);
        if e == Engine::Uring {
            assert!(s.gso_sends > 0, "{s:?}");
            assert!(s.syscalls < 100, "{s:?}");
        }
    }
}

#[test]
fn zero_copy_flags() {
    if !uring_ok() {
        return;
    }
    let mut rx = AsyncSocket::bind(lo(), opts(Engine::Uring)).unwrap();
    let o = AsyncOptions {
        zerocopy: true,
        ..opts(Engine::Uring)
    };
    let mut tx = AsyncSocket::bind(lo(), o).unwrap();
    let dst = rx.local_addr().unwrap();
    let mut tokens = Vec::new();
    for i in 0..10usize {
        let mut b = tx.claim().unwrap();
        b.as_mut()[0] = i as u8;
        // Alternate sizes: singles (SEND_ZC, fixed buffer) and pairs (SENDMSG_ZC with GSO).
        let len = if i < 6 { 500 } else { 200 + i };
        tokens.push(tx.commit(b, len, dst));
    }
    for t in tokens {
        let c = tx.wait_timeout(t, Duration::from_secs(2)).unwrap().unwrap();
        assert_eq!(c.kind, OpKind::Send);
        assert!(c.error.is_none());
        assert!(c.zerocopy);
        // Loopback: the kernel always copies (IORING_NOTIF_USAGE_ZC_COPIED).
        assert!(c.copied);
    }
    let s = tx.stats();
    assert_eq!((s.zerocopy, s.copied), (10, 10));
    assert_eq!(collect(&mut rx, 10).len(), 10);
}

#[test]
fn flood_without_posts_is_counted() {
    if !uring_ok() {
        return;
    }
    let o = AsyncOptions {
        reserve: 8,
        buffers: 64,
        socket_buffer: 4096,
        ..opts(Engine::Uring)
    };
    let mut rx = AsyncSocket::bind(lo(), o).unwrap();
    let dst = rx.local_addr().unwrap();
    let tx = std::net::UdpSocket::bind(lo()).unwrap();
    let total = 500u64;
    for i in 0..total {
        tx.send_to(&i.to_le_bytes(), dst).unwrap();
    }
    std::thread::sleep(Duration::from_millis(20));
    rx.poll_completions(drop).unwrap();
    let s = rx.stats();
    assert_eq!(s.reserve_used, 8, "{s:?}");
    assert_eq!(s.reserve_high_water, 8);
    // Drain everything the kernel kept, then one more datagram carries the drop count.
    let mut got = collect(&mut rx, total as usize).len() as u64;
    tx.send_to(b"last", dst).unwrap();
    got += collect(&mut rx, 1).len() as u64;
    let s = rx.stats();
    assert!(s.kernel_drops > 0, "{s:?}");
    assert!(s.ring_empty > 0, "{s:?}");
    assert_eq!(got - 1 + s.kernel_drops, total, "{s:?}");
}

#[test]
fn ring_full_back_pressure() {
    for e in engines() {
        let o = AsyncOptions {
            max_inflight: 2,
            gso: false,
            ..opts(e)
        };
        let mut rx = AsyncSocket::bind(lo(), opts(e)).unwrap();
        let mut tx = AsyncSocket::bind(lo(), o).unwrap();
        let dst = rx.local_addr().unwrap();
        let free0 = tx.free_buffers();
        for _ in 0..100 {
            let b = rx.claim().unwrap();
            rx.post_recv(b);
        }
        for i in 0..100usize {
            let mut b = tx.claim().unwrap();
            b.as_mut()[..8].copy_from_slice(&i.to_le_bytes());
            tx.commit(b, 8, dst);
        }
        tx.drain_sends(Duration::from_secs(2)).unwrap();
        let s = tx.stats();
        assert_eq!(s.completed_sends, 100);
        assert_eq!(s.sent_datagrams, 100);
        if e == Engine::Uring {
            assert!(s.overflow_queued > 0, "{s:?}");
            assert!(s.inflight_high_water <= 2, "{s:?}");
        }
        assert_eq!(tx.free_buffers(), free0);
        let got = collect(&mut rx, 100);
        for (i, d) in got.iter().enumerate() {
            assert_eq!(d[..], i.to_le_bytes()[..]);
        }
    }
}

#[test]
fn portable_engine_explicit() {
    let mut rx = AsyncSocket::bind(lo(), opts(Engine::Portable)).unwrap();
    let mut tx = AsyncSocket::bind(lo(), opts(Engine::Portable)).unwrap();
    assert_eq!(rx.engine(), "portable");
    let dst = rx.local_addr().unwrap();
    let r = rx.claim().unwrap();
    let rt = rx.post_recv(r);
    let mut b = tx.claim().unwrap();
    b.as_mut()[..5].copy_from_slice(b"hello");
    let t = tx.post_send(b, 5, dst);
    let c = tx.wait_timeout(t, Duration::from_secs(1)).unwrap().unwrap();
    assert!(c.copied && !c.zerocopy && c.error.is_none());
    let c = rx
        .wait_timeout(rt, Duration::from_secs(1))
        .unwrap()
        .unwrap();
    assert_eq!(c.buf.data(), b"hello");
    assert_eq!(c.peer, tx.local_addr().unwrap());
}

#[test]
fn gro_split() {
    if !uring_ok() {
        return;
    }
    let o = AsyncOptions {
        buffers: 16,
        reserve: 4,
        buf_size: 65_536,
        gro: true,
        ..opts(Engine::Uring)
    };
    let mut rx = AsyncSocket::bind(lo(), o).unwrap();
    let mut tx = AsyncSocket::bind(lo(), opts(Engine::Uring)).unwrap();
    let dst = rx.local_addr().unwrap();
    let b = rx.claim().unwrap();
    let rt = rx.post_recv(b);
    for i in 0..10u8 {
        let mut b = tx.claim().unwrap();
        b.as_mut()[..1000].fill(i);
        tx.commit(b, 1000, dst);
    }
    tx.drain_sends(Duration::from_secs(1)).unwrap();
    assert_eq!(tx.stats().gso_sends, 1);
    let c = rx
        .wait_timeout(rt, Duration::from_secs(1))
        .unwrap()
        .unwrap();
    assert_eq!((c.segments, c.segment_size, c.len), (10, 1000, 10_000));
    for (i, d) in c.datagrams().enumerate() {
        assert!(d.iter().all(|&x| x == i as u8));
    }
    assert_eq!(rx.stats().gro_batches, 1);
}

#[test]
fn steady_state_allocates_nothing() {
    for e in engines() {
        let mut rx = AsyncSocket::bind(lo(), opts(e)).unwrap();
        let mut tx = AsyncSocket::bind(lo(), opts(e)).unwrap();
        let dst = rx.local_addr().unwrap();
        let mut round = |count: bool| {
            counting::start(count);
            for _ in 0..32 {
                let b = rx.claim().unwrap();
                rx.post_recv(b);
            }
            for i in 0..32usize {
                let mut b = tx.claim().unwrap();
                b.as_mut()[..8].copy_from_slice(&i.to_le_bytes());
                tx.commit(b, 64, dst);
            }
            let mut sent = 0;
            let mut got = 0;
            for _ in 0..200 {
                tx.poll_completions(|_| sent += 1).unwrap();
                rx.wait_completions(Duration::from_millis(5), |c| {
                    if c.kind == OpKind::Recv {
                        got += 1;
                    }
                })
                .unwrap();
                if sent == 32 && got == 32 {
                    break;
                }
            }
            counting::stop();
            assert_eq!((sent, got), (32, 32), "engine {e:?}");
        };
        round(false);
        round(false);
        counting::reset();
        round(true);
        assert_eq!(counting::allocations(), 0, "engine {e:?}");
    }
}
