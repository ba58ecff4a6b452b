//! Message and live mode, dead peers, graceful close, in virtual time.

mod common;
use common::*;
use slipstream_proto::conn::{CloseReason, ConnConfig, Event, Mode, RecvError, State};
use slipstream_proto::sim::{LinkConfig, Pair};
use std::time::Duration;

#[test]
fn messages_up_to_1mb_arrive_whole_and_in_order() {
    let s = seed(10);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(10, 0.03, Some(200_000_000)), path(10, 0.03, None));
    let (ca, cb) = connect(&mut p, ConnConfig::new(Mode::Message));
    let sizes = [1usize, 1456, 1457, 100_000, 1 << 20, 7, 1 << 20, 3000];
    let msgs: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| content(n, s + i as u64))
        .collect();
    let mut next = 0;
    let mut got: Vec<Vec<u8>> = Vec::new();
    let mut buf = vec![0u8; 2 << 20];
    let ok = p.run_until(Duration::from_secs(60), |p| {
        let now = p.now;
        let c = p.a.conn(ca).unwrap();
        while next < msgs.len() && c.send_message(now, &msgs[next]).is_ok() {
            next += 1;
        }
        let c = p.b.conn(cb).unwrap();
        while let Ok(n) = c.recv_message(now, &mut buf) {
            got.push(buf[..n].to_vec());
        }
        got.len() == msgs.len()
    });
    assert!(ok, "received {} of {} messages", got.len(), msgs.len());
    assert!(got == msgs, "messages differ");
    // A buffer too small for the next message is reported, not truncated.
    let c = p.a.conn(ca).unwrap();
    c.send_message(p.now, &[9u8; 5000]).unwrap();
    let mut small = [0u8; 100];
    let ok = p.run_until(Duration::from_secs(5), |p| {
        let now = p.now;
        matches!(
            p.b.conn(cb).unwrap().recv_message(now, &mut small),
            Err(RecvError::BufferTooSmall(5000))
        )
    });
    assert!(ok);
}

/// Live mode: every message is delivered no earlier than its send time plus the latency, and
/// with a latency well above the RTT, losses are repaired in time (nothing dropped).
#[test]
fn live_mode_delivers_at_play_time_and_repairs_loss() {
    let s = seed(11);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(10, 0.02, None), path(10, 0.02, None));
    let mut cfg = ConnConfig::new(Mode::Live);
    cfg.set_latency(Duration::from_millis(200));
    cfg.set_stream_id(Some(b"camera-7".to_vec()));
    let (ca, cb) = connect(&mut p, cfg);
    assert_eq!(p.b.conn(cb).unwrap().latency(), Duration::from_millis(200));
    let total = 1000;
    let mut sent_at = Vec::new();
    let mut got = Vec::new();
    let mut buf = vec![0u8; 2000];
    let mut next_send = p.now;
    let ok = p.run_until(Duration::from_secs(20), |p| {
        let now = p.now;
        if sent_at.len() < total && now >= next_send {
            let i = sent_at.len() as u32;
            let mut m = vec![0u8; 1316];
            m[..4].copy_from_slice(&i.to_be_bytes());
            p.a.conn(ca).unwrap().send_message(now, &m).unwrap();
            sent_at.push(now);
            next_send += Duration::from_millis(2);
        }
        while let Ok(n) = p.b.conn(cb).unwrap().recv_message(now, &mut buf) {
            assert_eq!(n, 1316);
            let i = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            let age = now - sent_at[i];
            assert!(
                age >= Duration::from_millis(195),
                "message {i} delivered early: {age:?}"
            );
            got.push(i);
        }
        got.len() == total
    });
    let st = p.b.conn(cb).unwrap().stats(p.now);
    assert!(ok, "got {} of {total}; {st:?}", got.len());
    assert_eq!(got, (0..total).collect::<Vec<_>>());
    assert_eq!(st.pkts_rcv_dropped, 0);
    assert!(st.pkts_recv_retrans > 0, "the link lost nothing?");
}

/// Live mode with a latency below the repair time: late packets are dropped, counted, and
/// delivery goes on without stalling.
#[test]
fn live_mode_drops_too_late_packets_without_stalling() {
    let s = seed(12);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(40, 0.05, None), path(40, 0.05, None));
    let mut cfg = ConnConfig::new(Mode::Live);
    cfg.set_latency(Duration::from_millis(20));
    let (ca, cb) = connect(&mut p, cfg);
    let mut sent = 0u32;
    let mut got = 0u32;
    let mut last = None;
    let mut next_send = p.now;
    let mut buf = vec![0u8; 2000];
    let end = p.now + Duration::from_secs(10);
    p.run_until(Duration::from_secs(12), |p| {
        let now = p.now;
        if now < end && now >= next_send {
            p.a.conn(ca)
                .unwrap()
                .send_message(now, &sent.to_be_bytes())
                .unwrap();
            sent += 1;
            next_send += Duration::from_millis(5);
        }
        while let Ok(n) = p.b.conn(cb).unwrap().recv_message(now, &mut buf) {
            assert_eq!(n, 4);
            let i = u32::from_be_bytes(buf[..4].try_into().unwrap());
            assert!(
                last.is_none_or(|l| i > l),
                "out of order: {i} after {last:?}"
            );
            last = Some(i);
            got += 1;
        }
        false
    });
    let st = p.b.conn(cb).unwrap().stats(p.now);
    assert!(st.pkts_rcv_dropped > 0, "expected too-late drops: {st:?}");
    assert!(
        got + st.pkts_rcv_dropped as u32 >= sent - 5,
        "got {got} + dropped {} of {sent}",
        st.pkts_rcv_dropped
    );
    assert!(
        last.unwrap() >= sent - 5,
        "delivery stalled at {last:?} of {sent}"
    );
}

#[test]
fn dead_peer_is_detected() {
    let s = seed(13);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(5, 0.0, None), path(5, 0.0, None));
    let (ca, _cb) = connect(&mut p, file_cfg());
    p.a.conn(ca)
        .unwrap()
        .send(p.now, &content(100_000, s))
        .unwrap();
    p.run_until(Duration::from_millis(200), |_| false);
    // The peer vanishes: nothing gets through any more in either direction.
    p.ab.set_config(LinkConfig {
        loss: 1.0,
        ..LinkConfig::default()
    });
    p.ba.set_config(LinkConfig {
        loss: 1.0,
        ..LinkConfig::default()
    });
    p.a.conn(ca)
        .unwrap()
        .send(p.now, &content(100_000, s + 1))
        .unwrap();
    let t0 = p.now;
    let mut reason = None;
    let ok = p.run_until(Duration::from_secs(30), |p| {
        while let Some((_, ev)) = p.a.poll_event() {
            if let Event::Closed(r) = ev {
                reason = Some(r);
            }
        }
        reason.is_some()
    });
    assert!(ok, "dead peer not detected");
    assert_eq!(reason, Some(CloseReason::PeerIdle));
    let took = p.now - t0;
    // The idle timeout (5 s) runs from the last packet heard, shortly before t0.
    assert!(
        took >= Duration::from_millis(4500) && took < Duration::from_secs(7),
        "took {took:?}"
    );
}

#[test]
fn idle_connection_stays_up_with_keepalives() {
    let s = seed(14);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(5, 0.0, None), path(5, 0.0, None));
    let (ca, cb) = connect(&mut p, file_cfg());
    p.run_until(Duration::from_secs(30), |_| false);
    assert_eq!(p.a.conn(ca).unwrap().state(), State::Connected);
    assert_eq!(p.b.conn(cb).unwrap().state(), State::Connected);
}

#[test]
fn connect_to_nobody_times_out() {
    let s = seed(15);
    let mut p = Pair::new(s, path(5, 0.0, None), path(5, 0.0, None));
    let b = p.b_addr;
    let now = p.now;
    let ca = p.a.connect(now, b, file_cfg()).unwrap();
    let mut reason = None;
    p.run_until(Duration::from_secs(10), |p| {
        if let Some((_, Event::Closed(r))) = p.a.poll_event() {
            reason = Some(r);
        }
        reason.is_some()
    });
    assert_eq!(reason, Some(CloseReason::ConnectTimeout));
    let _ = ca;
}

#[test]
fn mode_mismatch_is_rejected() {
    let s = seed(16);
    let mut p = Pair::new(s, path(5, 0.0, None), path(5, 0.0, None));
    p.b.listen(Some(ConnConfig::new(Mode::Live)));
    let (b, now) = (p.b_addr, p.now);
    p.a.connect(now, b, file_cfg()).unwrap();
    let mut reason = None;
    p.run_until(Duration::from_secs(5), |p| {
        if let Some((_, Event::Closed(r))) = p.a.poll_event() {
            reason = Some(r);
        }
        reason.is_some()
    });
    assert!(
        matches!(reason, Some(CloseReason::Rejected(_))),
        "{reason:?}"
    );
    assert!(p.b.is_empty(), "listener kept state for a rejected caller");
}

/// Live mode with multi-packet messages and a latency below the repair time: a message whose
/// tail is lost is dropped whole when later ones are due, and delivery never stalls.
#[test]
fn live_mode_drops_incomplete_messages_without_stalling() {
    let s = seed(17);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(40, 0.05, None), path(40, 0.05, None));
    let mut cfg = ConnConfig::new(Mode::Live);
    cfg.set_latency(Duration::from_millis(20));
    let (ca, cb) = connect(&mut p, cfg);
    let (mut sent, mut got) = (0u32, 0u32);
    let mut last = None;
    let mut next_send = p.now;
    let mut buf = vec![0u8; 10_000];
    let end = p.now + Duration::from_secs(10);
    p.run_until(Duration::from_secs(12), |p| {
        let now = p.now;
        if now < end && now >= next_send {
            let mut m = vec![(sent % 251) as u8; 4000]; // three packets each
            m[..4].copy_from_slice(&sent.to_be_bytes());
            p.a.conn(ca).unwrap().send_message(now, &m).unwrap();
            sent += 1;
            next_send += Duration::from_millis(10);
        }
        while let Ok(n) = p.b.conn(cb).unwrap().recv_message(now, &mut buf) {
            assert_eq!(n, 4000, "partial message delivered");
            let i = u32::from_be_bytes(buf[..4].try_into().unwrap());
            assert!(
                buf[4..n].iter().all(|&b| b == (i % 251) as u8),
                "message {i} corrupted"
            );
            assert!(
                last.is_none_or(|l| i > l),
                "out of order: {i} after {last:?}"
            );
            last = Some(i);
            got += 1;
        }
        false
    });
    let st = p.b.conn(cb).unwrap().stats(p.now);
    assert!(st.pkts_rcv_dropped > 0, "expected too-late drops: {st:?}");
    assert!(got > sent / 2, "delivered only {got} of {sent}");
    assert!(
        last.unwrap() >= sent - 5,
        "delivery stalled at {last:?} of {sent}"
    );
}
