//! Live mode in virtual time: every packet's fate is counted at both ends, latencies are
//! negotiated per direction as libsrt does, and too-late drop can be turned off.

mod common;
use common::*;
use slipstream_proto::conn::{ConnConfig, ConnStats, Mode};
use slipstream_proto::seq::SeqNo;
use slipstream_proto::sim::Pair;
use slipstream_proto::wire::{Control, ControlBody};
use std::time::Duration;

fn live(latency_ms: u64) -> ConnConfig {
    let mut c = ConnConfig::new(Mode::Live);
    c.set_latency(Duration::from_millis(latency_ms));
    c
}

/// The sender's packets: acknowledged, dropped by it, or still held.
fn sender_adds_up(s: &ConnStats) {
    assert_eq!(
        s.pkts_queued,
        s.pkts_acked + s.pkts_snd_dropped + u64::from(s.snd_buf_pkts),
        "sender: queued {} != acked {} + dropped {} + held {}",
        s.pkts_queued,
        s.pkts_acked,
        s.pkts_snd_dropped,
        s.snd_buf_pkts
    );
}

/// Each direction plays out at the larger of its receiver's latency and what its sender asks
/// of it (SRTO_RCVLATENCY / SRTO_PEERLATENCY), on both ends of the handshake.
#[test]
fn latency_is_negotiated_per_direction() {
    let s = seed(40);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(5, 0.0, None), path(5, 0.0, None));
    // Caller receives with 300 ms and asks 50 of the listener; the listener receives with
    // 80 and asks 200 of the caller.
    let mut a = live(300);
    a.set_peer_latency(Some(Duration::from_millis(50)));
    let mut b = live(80);
    b.set_peer_latency(Some(Duration::from_millis(200)));
    let (ca, cb) = connect_with(&mut p, a, b);
    let (ca, cb) = (p.a.conn(ca).unwrap(), p.b.conn(cb).unwrap());
    // listener -> caller: max(caller's 300, listener's 200); caller -> listener: max(80, 50).
    assert_eq!(ca.latency(), Duration::from_millis(300));
    assert_eq!(cb.peer_latency(), Duration::from_millis(300));
    assert_eq!(cb.latency(), Duration::from_millis(80));
    assert_eq!(ca.peer_latency(), Duration::from_millis(80));
}

/// A source faster than a lossy bottleneck with a short latency: packets are dropped at both
/// ends, and every one is accounted for. The sender's are acknowledged, dropped by it or held;
/// the receiver's are delivered, given up, or dropped by the sender; and what the receiver
/// delivered is exactly what the application reads, in order.
#[test]
fn every_live_packet_is_accounted_for() {
    for seed_ in 41..61 {
        let s = seed(seed_);
        let _g = SeedGuard(s);
        // 8 Mbit/s bottleneck with a 200 KB queue, 5 % loss, 30 ms each way; the source
        // sends 1316-byte messages at 12 Mbit/s for 4 s.
        let mut p = Pair::new(
            s,
            bottleneck(30, 0.05, 8_000_000, 200_000),
            path(30, 0.05, None),
        );
        let (ca, cb) = connect_with(&mut p, live(80), live(80));
        let start = p.now;
        let end = start + Duration::from_secs(4);
        let gap = Duration::from_micros(1316 * 8 * 1_000_000 / 12_000_000);
        let (mut next, mut sent, mut got, mut last) = (start, 0u32, 0u64, None::<u32>);
        let mut buf = vec![0u8; 2000];
        p.run_until(Duration::from_secs(12), |p| {
            let now = p.now;
            while now < end && now >= next {
                let mut m = vec![7u8; 1316];
                m[..4].copy_from_slice(&sent.to_be_bytes());
                // A full buffer holds the source back (not a drop): it retries next step.
                if p.a.conn(ca).unwrap().send_message(now, &m).is_err() {
                    break;
                }
                sent += 1;
                next += gap;
            }
            while let Ok(n) = p.b.conn(cb).unwrap().recv_message(now, &mut buf) {
                assert_eq!(n, 1316);
                let i = u32::from_be_bytes(buf[..4].try_into().unwrap());
                assert!(last.is_none_or(|l| i > l), "{i} after {last:?}");
                last = Some(i);
                got += 1;
            }
            false
        });
        let a = p.a.conn(ca).unwrap().stats(p.now);
        let b = p.b.conn(cb).unwrap().stats(p.now);
        sender_adds_up(&a);
        assert_eq!(a.pkts_queued, u64::from(sent));
        assert!(a.pkts_snd_dropped > 0, "the sender dropped nothing: {a:?}");
        assert!(
            b.pkts_rcv_dropped > 0,
            "the receiver gave up nothing: {b:?}"
        );
        assert_eq!(b.pkts_delivered, got, "delivered count vs reads");
        // Everything was passed (the run ended long after the last play time): each of the
        // sender's packets was delivered, given up or dropped by the sender, once.
        assert_eq!(b.rcv_buf_pkts, 0, "{b:?}");
        let passed = b.pkts_delivered + b.pkts_rcv_dropped + b.pkts_rcv_snd_dropped;
        assert_eq!(
            passed,
            a.pkts_queued - u64::from(a.snd_buf_pkts),
            "receiver {b:?}\nsender {a:?}"
        );
        // The sender's drops that reached the receiver as drop requests are not counted as
        // losses there.
        assert!(b.pkts_rcv_snd_dropped <= a.pkts_snd_dropped);
    }
}

/// With too-late drop off (SRTO_TLPKTDROP=0), nothing is dropped at either end: every message
/// arrives, in order, however late, over a path whose repairs take longer than the latency.
#[test]
fn without_too_late_drop_everything_arrives() {
    let s = seed(44);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(40, 0.05, None), path(40, 0.05, None));
    let mut cfg = live(20);
    cfg.set_too_late_drop(false);
    let (ca, cb) = connect_with(&mut p, cfg.clone(), cfg);
    let total = 2000u32;
    let (mut sent, mut got) = (0u32, Vec::new());
    let mut next = p.now;
    let mut buf = vec![0u8; 2000];
    let ok = p.run_until(Duration::from_secs(60), |p| {
        let now = p.now;
        if sent < total && now >= next {
            p.a.conn(ca)
                .unwrap()
                .send_message(now, &sent.to_be_bytes())
                .unwrap();
            sent += 1;
            next += Duration::from_millis(2);
        }
        while let Ok(n) = p.b.conn(cb).unwrap().recv_message(now, &mut buf) {
            assert_eq!(n, 4);
            got.push(u32::from_be_bytes(buf[..4].try_into().unwrap()));
        }
        got.len() == total as usize
    });
    let a = p.a.conn(ca).unwrap().stats(p.now);
    let b = p.b.conn(cb).unwrap().stats(p.now);
    assert!(ok, "got {} of {total}: {b:?}", got.len());
    assert_eq!(got, (0..total).collect::<Vec<_>>());
    assert_eq!(a.pkts_snd_dropped + b.pkts_rcv_dropped, 0);
    assert!(b.pkts_recv_retrans > 0, "the link lost nothing?");
}

/// A drop request may name packets the receiver never saw (a lost tail: nothing after it
/// revealed the hole): it counts them as the sender's drops. One reaching past its buffer is
/// a forgery, ignored and counted.
#[test]
fn a_drop_request_for_an_unseen_tail_is_counted_and_one_past_the_buffer_ignored() {
    let s = seed(45);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(5, 0.0, None), path(5, 0.0, None));
    let isn = SeqNo::new(5_000);
    let mut cfg = live(80);
    cfg.set_initial_seq(Some(isn));
    let (_ca, cb) = connect_with(&mut p, cfg.clone(), cfg);
    let a_addr = p.a_addr;
    let inject = |p: &mut Pair, first: u32, last: u32| {
        let mut buf = vec![0u8; 64];
        let n = Control {
            timestamp: 0,
            dst_socket: cb.0,
            body: ControlBody::DropReq {
                msg_no: 1,
                first: isn.add(first),
                last: isn.add(last),
            },
        }
        .emit(&mut buf)
        .unwrap();
        p.inject_b(a_addr, &buf[..n]);
    };
    let cap = p.b.conn(cb).unwrap().stats(p.now).rcv_buf_cap_pkts;
    inject(&mut p, 0, cap + 10);
    p.run_until(Duration::from_millis(50), |_| false);
    let st = p.b.conn(cb).unwrap().stats(p.now);
    assert_eq!(st.ctrl_ignored, 1, "{st:?}");
    inject(&mut p, 0, 4);
    let mut buf = [0u8; 1500];
    p.run_until(Duration::from_millis(50), |p| {
        let now = p.now;
        let _ = p.b.conn(cb).unwrap().recv_message(now, &mut buf);
        false
    });
    let st = p.b.conn(cb).unwrap().stats(p.now);
    assert_eq!(st.ctrl_ignored, 1, "{st:?}");
    assert_eq!(st.pkts_rcv_snd_dropped, 5, "{st:?}");
    assert_eq!(st.pkts_rcv_dropped, 0, "{st:?}");
}
