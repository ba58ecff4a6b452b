//! Reliable stream transfers over the simulated network, in virtual time.

mod common;
use common::*;
use slipstream_proto::conn::{Connection, StreamRead};
use slipstream_proto::endpoint::{ConnId, PAGE_POOL};
use slipstream_proto::seq::SeqNo;
use slipstream_proto::sim::Pair;
use std::time::Duration;

#[test]
fn clean_path_transfers_byte_exact() {
    let s = seed(1);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(5, 0.0, None), path(5, 0.0, None));
    let mut cfg = file_cfg();
    cfg.set_stream_id(Some(b"hello.bin".to_vec()));
    let (ca, cb) = connect(&mut p, cfg);
    assert_eq!(p.b.conn(cb).unwrap().stream_id(), Some(&b"hello.bin"[..]));
    let data = content(2_000_000, s);
    let got = stream(&mut p, ca, cb, &data, Duration::from_secs(30));
    assert!(got == data, "content differs");
}

#[test]
fn lossy_path_transfers_byte_exact() {
    let s = seed(2);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(20, 0.05, Some(100_000_000)), path(20, 0.05, None));
    let (ca, cb) = connect(&mut p, file_cfg());
    let data = content(5_000_000, s);
    let got = stream(&mut p, ca, cb, &data, Duration::from_secs(60));
    assert!(got == data, "content differs");
    let st = p.a.conn(ca).unwrap().stats(p.now);
    assert!(st.pkts_retransmitted > 0);
}

#[test]
fn sequence_numbers_wrap() {
    let s = seed(3);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(1, 0.02, None), path(1, 0.02, None));
    let mut cfg = file_cfg();
    cfg.set_initial_seq(Some(SeqNo::new(SeqNo::MAX - 500)));
    let (ca, cb) = connect(&mut p, cfg);
    let data = content(3_000_000, s);
    let got = stream(&mut p, ca, cb, &data, Duration::from_secs(60));
    assert!(got == data, "content differs across the wrap");
}

/// The yardstick: 50 MB byte-exact through 5% random loss (both directions) at 100 ms
/// RTT on a 100 Mbit/s path, within a bounded virtual time.
#[test]
fn fifty_megabytes_through_5pct_loss_at_100ms_rtt() {
    let s = seed(4);
    let _g = SeedGuard(s);
    let cc = std::env::var("SLIPSTREAM_CC").unwrap_or_else(|_| "bbr".into());
    let mut p = Pair::new(s, path(50, 0.05, Some(100_000_000)), path(50, 0.05, None));
    let mut cfg = file_cfg();
    cfg.set_cc(&cc);
    let (ca, cb) = connect(&mut p, cfg);
    let data = content(50_000_000, s);
    let t0 = p.now;
    let got = stream(&mut p, ca, cb, &data, Duration::from_secs(600));
    let secs = (p.now - t0).as_secs_f64();
    assert!(got == data, "content differs");
    eprintln!(
        "{cc}: 50 MB in {secs:.1} s of virtual time = {:.1} Mbit/s",
        400.0 / secs
    );
}

/// Two flows sharing one bottleneck get a fair share: Jain's index over their goodput.
#[test]
fn two_flows_share_a_bottleneck_fairly() {
    let s = seed(5);
    let _g = SeedGuard(s);
    let cc = std::env::var("SLIPSTREAM_CC").unwrap_or_else(|_| "bbr".into());
    let link = bottleneck(10, 0.0, 50_000_000, 200_000);
    let mut p = Pair::new(s, link, path(10, 0.0, None));
    let mut cfg = file_cfg();
    cfg.set_cc(&cc);
    let (a1, b1) = connect(&mut p, cfg.clone());
    let (a2, b2) = connect(&mut p, cfg);
    let chunk = content(1 << 20, s);
    let mut got = [0u64; 2];
    let mut base = [0u64; 2];
    let mut buf = vec![0u8; 1 << 20];
    let warmup = p.now + Duration::from_secs(5);
    let mut measuring = false;
    p.run_until(Duration::from_secs(25), |p| {
        let now = p.now;
        for (i, (a, b)) in [(a1, b1), (a2, b2)].into_iter().enumerate() {
            let c = p.a.conn(a).unwrap();
            while c.send(now, &chunk).is_ok_and(|n| n > 0) {}
            let c = p.b.conn(b).unwrap();
            while let Ok(n) = c.recv(&mut buf) {
                if n == 0 {
                    break;
                }
                got[i] += n as u64;
            }
        }
        if !measuring && now >= warmup {
            measuring = true;
            base = got;
        }
        false
    });
    let x = [(got[0] - base[0]) as f64, (got[1] - base[1]) as f64];
    let jain = (x[0] + x[1]).powi(2) / (2.0 * (x[0] * x[0] + x[1] * x[1]));
    let util = (x[0] + x[1]) * 8.0 / 20.0 / 50e6;
    eprintln!(
        "{cc}: flows {:.1} / {:.1} Mbit/s, Jain {jain:.3}, utilisation {util:.2}",
        x[0] * 8.0 / 20e6,
        x[1] * 8.0 / 20e6
    );
    assert!(jain >= 0.9, "unfair: {x:?} (Jain {jain:.3})");
    assert!(util > 0.7, "bottleneck underused: {util:.2}");
}

/// Defaults need no tuning: on a path whose bandwidth-delay product (1 Gbit/s x 200 ms RTT =
/// 25 MB, ~17,000 packets) exceeds the initial 8,192-packet window, the buffers grow by
/// themselves and the transfer reaches most of the link rate.
#[test]
fn buffers_grow_to_the_bandwidth_delay_product() {
    let s = seed(6);
    let _g = SeedGuard(s);
    let link = bottleneck(100, 0.0, 1_000_000_000, 32 << 20);
    let mut p = Pair::new(s, link, path(100, 0.0, None));
    let (ca, cb) = connect(&mut p, file_cfg());
    let data = content(300_000_000, s);
    let t0 = p.now;
    let got = stream(&mut p, ca, cb, &data, Duration::from_secs(60));
    let secs = (p.now - t0).as_secs_f64();
    assert!(got == data, "content differs");
    let sa = p.a.conn(ca).map(|c| c.stats(p.now));
    let sb = p.b.conn(cb).unwrap().stats(p.now);
    let gbit = 2.4 / secs;
    eprintln!(
        "300 MB in {secs:.2} s = {gbit:.2} Gbit/s; receive buffer {} packets",
        sb.rcv_buf_cap_pkts
    );
    assert!(
        sb.rcv_buf_cap_pkts > 17_000,
        "receive buffer did not grow: {sb:?}"
    );
    if let Some(sa) = sa {
        assert!(
            sa.snd_buf_cap_pkts > 17_000,
            "send buffer did not grow: {sa:?}"
        );
    }
    // Slow start alone takes ~12 round trips (2.4 s) to reach the window; the whole transfer
    // must still average over half the link.
    assert!(gbit > 0.5, "only {gbit:.2} Gbit/s");
}

/// At 10 ms and 5 % loss each way the ACK point waits behind a hole most of the time (a
/// round trip carries about 800 packets; a retransmission lost again holds it for a NAK
/// interval more). The sender's rate samples come with full ACKs, so the receiver still
/// sends one every SYN interval while new data arrive: without them the sender's controller
/// went up to 100 ms without a sample, each probe or drain phase lasting that long, and its
/// estimate could settle far under the link.
#[test]
fn full_acks_go_on_after_the_ackack_while_new_data_arrive() {
    let s = seed(41);
    let _g = SeedGuard(s);
    let link = bottleneck(5, 0.05, 1_000_000_000, 1_250_000);
    let mut p = Pair::new(s, link, path(5, 0.05, None));
    let (ca, cb) = connect(&mut p, file_cfg());
    let data = content(100_000_000, s);
    let t0 = p.now;
    let acks0 = p.b.conn(cb).unwrap().stats(p.now).acks_sent;
    let (mut last, mut last_at, mut max_gap, mut long_gaps) = (acks0, t0, Duration::ZERO, 0);
    let got = stream_with(&mut p, ca, cb, &data, Duration::from_secs(30), |p| {
        let Some(c) = p.b.conn(cb) else { return };
        let st = c.stats(p.now);
        // Until the last new data: then only retransmissions come, and ACKs wait for them.
        if st.bytes_recv_unique > 95_000_000 {
            return;
        }
        let n = st.acks_sent;
        if n != last {
            max_gap = max_gap.max(p.now - last_at);
            long_gaps += usize::from(p.now - last_at > Duration::from_millis(15));
            (last, last_at) = (n, p.now);
        }
    });
    let secs = (p.now - t0).as_secs_f64();
    assert!(got == data, "content differs");
    eprintln!(
        "100 MB in {secs:.2} s = {:.2} Gbit/s; {} full ACKs, longest gap {max_gap:?}, {long_gaps} over 15 ms",
        0.8 / secs,
        last - acks0
    );
    assert!(
        max_gap < Duration::from_millis(25),
        "{max_gap:?} without a full ACK"
    );
    assert!(long_gaps <= 3, "{long_gaps} gaps over 15 ms");
}

/// The last packets of a transfer lost, with nothing after them to reveal the hole: a
/// tail-loss probe repairs them within a few round trips, where the RTO took 300 ms at least.
#[test]
fn a_lost_tail_is_repaired_within_a_few_round_trips() {
    let s = seed(43);
    let _g = SeedGuard(s);
    let clean = path(5, 0.0, Some(100_000_000));
    let mut p = Pair::new(s, clean.clone(), clean.clone());
    let (ca, cb) = connect(&mut p, file_cfg());
    let data = content(2_000_000, s);
    let payload = p.a.conn(ca).unwrap().payload_size();
    let total = data.len().div_ceil(payload) as u64;
    let (mut cut, mut probes) = (None, 0);
    stream_with(&mut p, ca, cb, &data, Duration::from_secs(10), |p| {
        let Some(st) = p.a.conn(ca).map(|c| c.stats(p.now)) else {
            return;
        };
        probes = st.tail_probes;
        match cut {
            // The last three packets (and anything else sent in the next 5 ms) are lost.
            None if st.pkts_sent_unique + 3 >= total => {
                let mut lossy = clean.clone();
                lossy.loss = 1.0;
                p.ab.set_config(lossy);
                cut = Some(p.now);
            }
            Some(t) if p.now >= t + Duration::from_millis(5) && p.ab.config().loss > 0.0 => {
                p.ab.set_config(clean.clone());
            }
            _ => {}
        }
    });
    let tail = p.now - cut.expect("the tail was cut");
    eprintln!("tail repaired and the connection closed {tail:?} after the cut; {probes} probe(s)");
    assert!(probes >= 1, "no tail-loss probe");
    assert!(
        tail < Duration::from_millis(150),
        "{tail:?} to repair the tail"
    );
}

/// A connection whose window is two packets (its share of a socket receive queue shared
/// with many others) loses both: with the window full, nothing new may go out to reveal
/// the hole, so before the tail-loss probe covered a full window only the RTO (300 ms,
/// doubling when the retransmission was lost too) repaired it. Among 1,000 streams over
/// loopback that left a few dozen connections moving a handful of packets in five seconds.
#[test]
fn a_full_window_lost_whole_is_repaired_within_a_few_round_trips() {
    use slipstream_proto::endpoint::{Endpoint, EndpointConfig};
    use slipstream_proto::share::{DATAGRAM_OVERHEAD, SHARE_OF_BUDGET};
    let s = seed(47);
    let _g = SeedGuard(s);
    let clean = path(5, 0.0, Some(100_000_000));
    let mut p = Pair::new(s, clean.clone(), clean.clone());
    // A receive queue whose shared part holds two full-size datagrams: the receiver
    // advertises two packets.
    let queue = (2.0 * (1500 + DATAGRAM_OVERHEAD) as f64 / SHARE_OF_BUDGET) as usize + 1;
    let mut cfg = EndpointConfig::default();
    cfg.set_seed(s ^ 0x5a5a).set_receive_queue(Some(queue));
    p.b = Endpoint::new(cfg, p.now);
    let (ca, cb) = connect(&mut p, file_cfg());
    let data = content(300_000, s);
    let (mut cut, mut probes, mut window) = (None, 0, 0);
    // The longest time the acknowledged count stood still after the cut.
    let (mut acked, mut since, mut stall) = (0, p.now, Duration::ZERO);
    let got = stream_with(&mut p, ca, cb, &data, Duration::from_secs(30), |p| {
        let Some(st) = p.a.conn(ca).map(|c| c.stats(p.now)) else {
            return;
        };
        probes = st.tail_probes;
        if st.bytes_acked != acked {
            if cut.is_some() {
                stall = stall.max(p.now - since);
            }
            (acked, since) = (st.bytes_acked, p.now);
        }
        match cut {
            // Halfway, everything sent for the next 12 ms is lost: the next two packets,
            // which fill the window (ACKs come every 10 ms and free it whole).
            None if st.bytes_acked > 100_000 && st.pkts_in_flight == 2 => {
                let mut lossy = clean.clone();
                lossy.loss = 1.0;
                p.ab.set_config(lossy);
                cut = Some(p.now);
                window = st.flow_window_pkts;
            }
            Some(t) if p.now >= t + Duration::from_millis(12) && p.ab.config().loss > 0.0 => {
                p.ab.set_config(clean.clone());
            }
            _ => {}
        }
    });
    assert!(got == data, "content differs");
    assert!(cut.is_some(), "the window was never cut");
    eprintln!("window {window} packets; {probes} probe(s); acknowledgements stood still {stall:?} at most after the cut");
    assert!(window <= 2, "the receiver advertised {window} packets");
    assert!(probes >= 1, "no probe");
    assert!(
        stall < Duration::from_millis(150),
        "nothing acknowledged for {stall:?}"
    );
}

/// The receive buffer holds what waits behind holes, and no more: at 1 % loss on a 1 Gbit/s,
/// 50 ms path (a BDP of about 4,300 packets) a hole stays open a round trip or more, so the
/// sender's window spans several BDP past the ACK point and the buffer must grow past twice
/// the BDP; but not to its 256 MiB cap (184,000 packets), where it once went.
#[test]
fn the_receive_buffer_grows_for_holes_but_stays_bounded() {
    let s = seed(12);
    let _g = SeedGuard(s);
    let link = bottleneck(25, 0.01, 1_000_000_000, 6_250_000);
    let mut p = Pair::new(s, link, path(25, 0.01, None));
    let (ca, cb) = connect(&mut p, file_cfg());
    let data = content(200_000_000, s);
    let t0 = p.now;
    let got = stream(&mut p, ca, cb, &data, Duration::from_secs(30));
    let secs = (p.now - t0).as_secs_f64();
    assert!(got == data, "content differs");
    let sb = p.b.conn(cb).unwrap().stats(p.now);
    let gbit = 1.6 / secs;
    eprintln!(
        "200 MB in {secs:.2} s = {gbit:.2} Gbit/s; receive buffer {} packets",
        sb.rcv_buf_cap_pkts
    );
    // Twice the BDP alone makes 16,384 packets (8,192 doubled once).
    assert!(
        (16_385..=65_536).contains(&sb.rcv_buf_cap_pkts),
        "receive buffer of {} packets",
        sb.rcv_buf_cap_pkts
    );
    assert!(gbit > 0.8, "only {gbit:.2} Gbit/s");
}

/// A burst of scattered losses (every other packet for 400 ms at 400 Mbit/s: well over a
/// thousand holes, more than one NAK packet can name) is repaired within a few round trips:
/// the receiver reports its whole loss list, not just the oldest ranges that fit one packet.
#[test]
fn a_burst_of_scattered_losses_is_repaired_in_a_few_round_trips() {
    let s = seed(31);
    let _g = SeedGuard(s);
    let clean = path(50, 0.0, Some(400_000_000));
    let mut p = Pair::new(s, clean.clone(), clean.clone());
    let (ca, cb) = connect(&mut p, file_cfg());
    let data = content(250_000_000, s);
    let t0 = p.now;
    let burst = (Duration::from_millis(3000), Duration::from_millis(3400));
    let (mut max_ranges, mut last_hole) = (0u32, Duration::ZERO);
    let got = stream_with(&mut p, ca, cb, &data, Duration::from_secs(60), |p| {
        let t = p.now - t0;
        let lossy = t >= burst.0 && t < burst.1;
        if lossy != (p.ab.config().loss > 0.0) {
            let mut c = clean.clone();
            c.loss = if lossy { 0.5 } else { 0.0 };
            p.ab.set_config(c);
        }
        let st = p.b.conn(cb).expect("receiver").stats(p.now);
        max_ranges = max_ranges.max(st.rcv_loss_ranges);
        if st.rcv_loss_pkts > 0 {
            last_hole = t;
        }
    });
    assert!(got == data, "content differs");
    let repaired = last_hole.saturating_sub(burst.1);
    eprintln!("{max_ranges} loss ranges at most, repaired {repaired:?} after the burst");
    assert!(max_ranges > 1000, "only {max_ranges} holes: proves nothing");
    // The last holes reach the receiver half a round trip after the burst; then a round trip
    // to report and retransmit them, another for retransmissions the burst itself dropped.
    assert!(
        repaired <= Duration::from_millis(350),
        "holes repaired only {repaired:?} after the burst (RTT 100 ms)"
    );
}

/// Streams `data` from `ca` to `cb` without closing; returns once everything is acknowledged.
fn stream_with_open(p: &mut Pair, ca: ConnId, cb: ConnId, data: &[u8]) -> usize {
    let (mut sent, mut got) = (0, 0);
    let mut buf = vec![0u8; 1 << 16];
    let ok = p.run_until(Duration::from_secs(30), |p| {
        let now = p.now;
        let c = p.a.conn(ca).expect("sender");
        offer(c, now, data, &mut sent);
        let acked = c.stats(now).pkts_in_flight == 0 && c.send_buffer_len() == 0;
        while let Ok(n) = p.b.conn(cb).expect("receiver").recv(&mut buf) {
            if n == 0 {
                break;
            }
            got += n;
        }
        sent == data.len() && got == data.len() && acked
    });
    assert!(ok, "warm-up did not finish");
    got
}

/// While the ACK point is stuck behind a hole, arrivals keep asking for a light ACK that has
/// nothing to say; the NAKs due must still go out. (They once waited behind it for as long as
/// the hole lasted, since every batch of arrivals renewed the request: with its first NAK
/// lost, a hole stayed open for hundreds of milliseconds on a 1 % loss path.) Driven by hand,
/// so that arrivals and the NAK timer fall into the same wake-up as in a real event loop.
#[test]
fn naks_are_not_held_back_by_a_light_ack_with_nothing_to_say() {
    let s = seed(32);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(10, 0.0, None), path(10, 0.0, None));
    let (ca, cb) = connect(&mut p, file_cfg());
    // Warm up (the window opens), then let the path drain.
    let warm = content(5_000_000, s);
    let _ = stream_with_open(&mut p, ca, cb, &warm);
    let mut now = p.now;
    let data = content(600 * 1456, s);
    let c = p.a.conn(ca).expect("sender");
    let mut sent = 0;
    while sent < data.len() {
        sent += c.send(now, &data[sent..]).expect("send");
    }
    // Collect the sender's first 600 data packets (pacing spreads them over some ms).
    let mut pkts: Vec<Vec<u8>> = Vec::new();
    let mut buf = vec![0u8; 2048];
    while pkts.len() < 600 {
        match p.a.poll_transmit(now, &mut buf) {
            Some(t) => pkts.push(buf[..t.len].to_vec()),
            None => {
                now += Duration::from_micros(100);
                // The pacing deadline passes: the endpoint's calling protocol.
                p.a.handle_timeout(now);
                assert!(now - p.now < Duration::from_secs(1), "the sender stalled");
            }
        }
    }
    let (a_addr, b_addr) = (p.a_addr, p.b_addr);
    let is_nak = |d: &[u8]| {
        matches!(
            slipstream_proto::wire::Packet::parse(d),
            Ok(slipstream_proto::wire::Packet::Control(
                slipstream_proto::wire::Control {
                    body: slipstream_proto::wire::ControlBody::Nak(_),
                    ..
                }
            ))
        )
    };
    // Packet 1 is lost. The receiver's NAKs are counted and dropped (as if the return path
    // lost them, so the hole stays open); its ACKs reach the sender, whose ACKACKs come back
    // (its data, retransmissions included, is dropped).
    let mut naks = 0u32;
    let mut exchange = |p: &mut Pair, now, naks: &mut u32| {
        while let Some(t) = p.b.poll_transmit(now, &mut buf) {
            if is_nak(&buf[..t.len]) {
                *naks += 1;
            } else {
                p.a.handle(now, b_addr, &buf[..t.len]);
            }
        }
        while let Some(t) = p.a.poll_transmit(now, &mut buf) {
            if !matches!(
                slipstream_proto::wire::Packet::parse(&buf[..t.len]),
                Ok(slipstream_proto::wire::Packet::Data(..))
            ) {
                p.b.handle(now, a_addr, &buf[..t.len]);
            }
        }
    };
    p.b.handle(now, a_addr, &pkts[0]);
    for d in &pkts[2..100] {
        p.b.handle(now, a_addr, d);
        exchange(&mut p, now, &mut naks);
    }
    assert_eq!(naks, 1, "the gap is reported at once");
    // 200 ms of wake-ups, each with two new arrivals behind the hole, then the timers.
    let mut next = 100;
    for _ in 0..200 {
        now += Duration::from_millis(1);
        for _ in 0..2 {
            p.b.handle(now, a_addr, &pkts[next]);
            next += 1;
        }
        p.a.handle_timeout(now);
        p.b.handle_timeout(now);
        exchange(&mut p, now, &mut naks);
    }
    assert!(
        p.b.conn(cb).expect("receiver").stats(now).rcv_loss_pkts == 1,
        "the hole is still there"
    );
    // The periodic NAK comes every max((RTT + 4 RTTVar) / 2, 20 ms): several in 200 ms.
    assert!(naks >= 5, "only {naks} NAKs in 200 ms with a hole open");
}

/// The conclusion exchange gives each side its first RTT sample, but only when it was sent
/// once (Karn). With the listener's response lost, the caller repeats its conclusion after the
/// 250 ms retry interval, and timing from the first copy made that the listener's RTT on a
/// 10 ms path: its periodic NAK, paced by the RTT, then came every 400 ms, and each lost
/// retransmission stalled the transfer for as long.
#[test]
fn a_lost_handshake_response_does_not_skew_the_rtt() {
    use slipstream_proto::conn::Event;
    let s = seed(41);
    let _g = SeedGuard(s);
    let clean = path(5, 0.0, Some(100_000_000));
    let mut p = Pair::new(s, clean.clone(), path(5, 0.0, None));
    let cfg = file_cfg();
    p.b.listen(Some(cfg.clone()));
    let ca = p.a.connect(p.now, p.b_addr, cfg).expect("connect");
    let (mut cb, mut connected, mut cut_at) = (None, false, None);
    let ok = p.run_until(Duration::from_secs(5), |p| {
        while let Some((_, ev)) = p.a.poll_event() {
            connected |= ev == Event::Connected;
        }
        while let Some((id, ev)) = p.b.poll_event() {
            if ev == Event::Accepted {
                // The response to this conclusion goes out at the next step: lose it.
                cb = Some(id);
                let mut lossy = path(5, 0.0, None);
                lossy.loss = 1.0;
                p.ba.set_config(lossy);
                cut_at = Some(p.now);
            }
        }
        if cut_at.is_some_and(|t| p.now - t >= Duration::from_millis(20)) {
            p.ba.set_config(path(5, 0.0, None));
            cut_at = None;
        }
        connected && cb.is_some()
    });
    assert!(ok, "handshake did not complete");
    assert!(
        p.ba.stats().lost >= 1,
        "the conclusion response was not lost"
    );
    let cb = cb.unwrap();
    // A tenth of a second of data: a dozen ACK round trips.
    let data = content(1_000_000, s);
    let (t0, mut off) = (p.now, 0);
    let mut buf = vec![0u8; 1 << 16];
    p.run_until(Duration::from_millis(100), |p| {
        if off < data.len() {
            off += p.a.conn(ca).unwrap().send(p.now, &data[off..]).unwrap_or(0);
        }
        while p.b.conn(cb).unwrap().recv(&mut buf).unwrap_or(0) > 0 {}
        false
    });
    let (ra, rb) = (
        p.a.conn(ca).unwrap().stats(p.now).rtt_ms,
        p.b.conn(cb).unwrap().stats(p.now).rtt_ms,
    );
    eprintln!(
        "after {:?} of data: RTT {ra:.1} ms (caller), {rb:.1} ms (listener)",
        p.now - t0
    );
    // Timed from the first copy it was the 250 ms retry interval. Under load the samples
    // include the queue this flow builds (Startup's, and a BBR window of twice the BDP): up
    // to a round trip or two on top of the path's 10 ms.
    assert!(rb < 40.0, "listener RTT {rb:.1} ms on a 10 ms path");
    assert!(ra < 40.0, "caller RTT {ra:.1} ms on a 10 ms path");
}

/// Streams 40 MB over a 100 Mbit/s bottleneck with a one-way delay of `delay_ms` and a queue
/// of `queue` bytes, the sender off the CPU for `pause` in every `every`; returns the goodput
/// as a fraction of the link.
fn paused_sender_goodput(
    s: u64,
    delay_ms: u64,
    queue: usize,
    pause: Duration,
    every: Duration,
) -> f64 {
    let rate = 100_000_000;
    let mut p = Pair::new(
        s,
        bottleneck(delay_ms, 0.0, rate, queue),
        path(delay_ms, 0.0, None),
    );
    let mut cfg = file_cfg();
    cfg.set_cc("bbr");
    let (ca, cb) = connect(&mut p, cfg);
    let data = content(40_000_000, s);
    let start = p.now;
    let mut next_pause = start;
    stream_with(&mut p, ca, cb, &data, Duration::from_secs(20), |p| {
        if p.now >= next_pause {
            p.a_paused_until = p.now + pause;
            next_pause = p.now + every;
        }
    });
    let secs = (p.now - start).as_secs_f64();
    let goodput = data.len() as f64 * 8.0 / secs / rate as f64;
    let st = p.a.conn(ca).unwrap().stats(p.now);
    eprintln!(
        "RTT {} ms, off the CPU {pause:?} in every {every:?}: {:.1} % of the link, {} packets retransmitted",
        2 * delay_ms,
        goodput * 100.0,
        st.pkts_retransmitted
    );
    goodput
}

/// Streams `total` bytes over a 100 Mbit/s path with a 20 ms round trip, the application
/// writing `chunk` bytes every 10 ms; returns the share of the transfer's time the sender
/// had nothing to send or was late ([`ConnStats::send_lag_us`]).
///
/// [`ConnStats::send_lag_us`]: slipstream_proto::conn::ConnStats::send_lag_us
fn send_lag_share(s: u64, total: usize, chunk: usize) -> f64 {
    let mut p = Pair::new(
        s,
        bottleneck(10, 0.0, 100_000_000, 250_000),
        path(10, 0.0, None),
    );
    let mut cfg = file_cfg();
    cfg.set_cc("bbr");
    let (ca, cb) = connect(&mut p, cfg);
    let data = content(total, s);
    let (mut allowed, mut sent, mut got) = (0, 0, 0);
    let mut next_write = p.now;
    let mut buf = vec![0u8; 1 << 16];
    let start = p.now;
    let done = p.run_until(Duration::from_secs(30), |p| {
        let now = p.now;
        if now >= next_write {
            allowed = (allowed + chunk).min(total);
            next_write = now + Duration::from_millis(10);
        }
        let c = p.a.conn(ca).unwrap();
        while sent < allowed {
            match c.send(now, &data[sent..allowed]) {
                Ok(n) if n > 0 => sent += n,
                _ => break,
            }
        }
        let r = p.b.conn(cb).unwrap();
        loop {
            match r.recv(&mut buf) {
                Ok(n) if n > 0 => got += n,
                _ => break,
            }
        }
        got == total
    });
    assert!(done, "{got} of {total} bytes arrived");
    let lag = p.a.conn(ca).unwrap().stats(p.now).send_lag_us;
    let share = lag as f64 / (p.now - start).as_micros() as f64;
    eprintln!(
        "{} kB every 10 ms: sender lag {:.1} ms of {:.1} ms ({:.1} %)",
        chunk / 1000,
        lag as f64 / 1000.0,
        (p.now - start).as_secs_f64() * 1000.0,
        share * 100.0
    );
    share
}

/// The statistics say when the application, not the path, set the rate: a sender fed at
/// 40 Mbit/s on a 100 Mbit/s path spends most of its time with nothing to send; one given
/// everything at once, almost none.
#[test]
fn stats_tell_an_application_limited_sender() {
    let s = seed(48);
    let _g = SeedGuard(s);
    let slow = send_lag_share(s, 5_000_000, 50_000);
    let fast = send_lag_share(s, 5_000_000, 5_000_000);
    assert!(slow > 0.4, "application-limited: {:.1} %", slow * 100.0);
    assert!(fast < 0.1, "saturating: {:.1} %", fast * 100.0);
}

/// A user-space sender is not always running: on a busy machine it misses its pacing times
/// by milliseconds. Pacing credit lets it catch up with a burst instead of losing the time:
/// with a millisecond of credit, a sender off the CPU 2 ms in every 10 ms on a 20 ms path lost
/// a tenth of the link (88.6 %), and on a 2 ms path a quarter round trip alone lost 1 ms in
/// every 2 ms (86.0 %; now 97.2 % and 96.6 %). On loopback the round trip is a fraction of a
/// millisecond and the receiver's socket buffer holds megabytes, but a thread woken behind
/// two busy ones still waits milliseconds. Off 3 ms in every 8 ms with the old credit (a
/// quarter round trip, at least 1 ms), the sender sent less than it was paced for, the rate
/// reports followed, and the bandwidth estimate with them: 32.6 of the 40 MB arrived in 20 s.
/// With 4 ms of credit: 98.5 % of the link.
#[test]
fn a_sender_that_misses_its_pacing_times_catches_up() {
    let s = seed(47);
    let _g = SeedGuard(s);
    let ms = Duration::from_millis;
    // One BDP of queue on the two paths.
    let long = paused_sender_goodput(s, 10, 250_000, ms(2), ms(10));
    let short = paused_sender_goodput(s, 1, 25_000, ms(1), ms(2));
    let local = paused_sender_goodput(s, 0, 4 << 20, ms(3), ms(8));
    assert!(long > 0.9, "{:.1} % of the link at 20 ms", long * 100.0);
    assert!(short > 0.9, "{:.1} % of the link at 2 ms", short * 100.0);
    assert!(local > 0.9, "{:.1} % of the link at 0 ms", local * 100.0);
    // Off longer than the credit, the time beyond it is lost (at most 75 % here), but the
    // reports on those packets measure the sender, and the bandwidth estimate must not
    // follow them down (when it did: 42.4 %, and the loss compounded every filter window).
    let long_pauses = paused_sender_goodput(s, 0, 4 << 20, ms(8), ms(16));
    assert!(
        long_pauses > 0.6,
        "{:.1} % of the link, off 8 ms in 16",
        long_pauses * 100.0
    );
}

/// A gathering I/O loop polls every header first and reads the payloads afterwards: over a
/// lossy path (retransmissions, control packets between data) the datagrams are exactly
/// those of a copying loop, so the transfer is the same to the last packet and microsecond.
#[test]
fn gathered_sends_are_the_copied_sends() {
    let s = seed(33);
    let _g = SeedGuard(s);
    let run = |gather: bool| {
        let mut p = Pair::new(s, path(10, 0.03, Some(50_000_000)), path(10, 0.03, None));
        p.a_gathers = gather;
        let mut cfg = file_cfg();
        cfg.set_initial_seq(Some(SeqNo::new(SeqNo::MAX - 300)));
        let (ca, cb) = connect(&mut p, cfg);
        let data = content(3_000_000, s);
        let got = stream(&mut p, ca, cb, &data, Duration::from_secs(60));
        assert!(got == data, "content differs (gather: {gather})");
        let st = p.a.conn(ca).map(|c| c.stats(p.now));
        (
            p.elapsed(),
            st.map(|st| (st.pkts_sent, st.pkts_retransmitted, st.bytes_sent)),
        )
    };
    let copied = run(false);
    let gathered = run(true);
    assert!(
        copied.1.is_some_and(|(_, rexmit, _)| rexmit > 0),
        "no loss to recover"
    );
    assert_eq!(gathered, copied);
}

/// Chunks handed over whole (the application's buffers, sent from where they are) cross a
/// lossy path byte-exact, interleaved with copied writes; acknowledged chunks come back for
/// reuse.
#[test]
fn chunks_cross_a_lossy_path_byte_exact_and_are_reused() {
    let s = seed(34);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(10, 0.03, Some(50_000_000)), path(10, 0.03, None));
    let mut cfg = file_cfg();
    // Buffers of 1024 packets (1.5 MB): chunks of 128 packets, reused many times over.
    cfg.set_initial_window(1024).set_buffer_cap(1024 * 1456);
    let (ca, cb) = connect(&mut p, cfg);
    let data = content(8_000_000, s);
    let chunk_len = p.a.conn(ca).expect("sender").chunk_len();
    assert_eq!(chunk_len, 128 * 1456);
    let (mut pieces, mut reused) = (0usize, 0);
    let push = |c: &mut Connection, now, rest: &[u8]| {
        pieces += 1;
        // Every third piece is a copied write of an odd size; the rest are chunks.
        if pieces % 3 == 0 {
            return c.send(now, &rest[..rest.len().min(7_777)]).ok();
        }
        let mut chunk = match c.take_chunk() {
            Some(v) => {
                reused += 1;
                v
            }
            None => vec![0; chunk_len],
        };
        let n = chunk.len().min(rest.len());
        chunk[..n].copy_from_slice(&rest[..n]);
        c.send_chunk(now, chunk, n).ok().map(|()| n)
    };
    let limit = Duration::from_secs(60);
    let got = stream_by(&mut p, ca, cb, &data, limit, |_| {}, push);
    assert!(got == data, "content differs");
    assert!(reused > 0, "no chunk came back for reuse");
    let st = p.a.conn(ca).map(|c| c.stats(p.now));
    assert!(
        st.is_some_and(|st| st.pkts_retransmitted > 0),
        "no loss to recover"
    );
}

/// Flow control bounds the sender by the receiver's buffer as advertised in its last full
/// ACK: the edge is that ACK's point plus its free space. Light ACKs move the ACK point
/// without saying how much room is left, so while the application does not read, a sender
/// that counted its window from them overran the receiver's buffer (over loopback with a
/// starved receiver: 1-7 % of the packets dropped by the receiver and sent again). Here the
/// receiving application reads nothing for a second: nothing is dropped, and then it all
/// arrives.
#[test]
fn a_receiver_that_does_not_read_is_never_overrun() {
    let s = seed(35);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(1, 0.0, None), path(1, 0.0, None));
    let mut cfg = file_cfg();
    cfg.set_initial_window(512).set_buffer_cap(512 * 1456);
    let (ca, cb) = connect(&mut p, cfg);
    let data = content(3_000_000, s);
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    let start = p.now;
    let done = p.run_until(Duration::from_secs(30), |p| {
        let now = p.now;
        let c = p.a.conn(ca).expect("sender");
        offer(c, now, &data, &mut sent);
        let c = p.b.conn(cb).expect("receiver");
        assert_eq!(
            c.stats(now).pkts_rcv_dropped,
            0,
            "the receiver's buffer overflowed"
        );
        if now - start > Duration::from_secs(1) {
            while let Ok(n) = c.recv(&mut buf) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
        }
        got.len() == data.len()
    });
    assert!(done, "got {} of {}", got.len(), data.len());
    assert!(got == data, "content differs");
    let b = p.b.conn(cb).expect("receiver").stats(p.now);
    assert!(b.light_acks_sent > 0, "no light ACK was exercised: {b:?}");
}

/// Large payloads received apart from their headers enter the receive buffer without a copy
/// (the connection keeps the buffer handed to it and gives another back), and a receiver
/// reading whole pages, and copies where a page is not whole, gets the stream byte-exact
/// across loss and reordering of retransmissions.
#[test]
fn owned_payloads_cross_a_lossy_path_byte_exact() {
    let s = seed(36);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(10, 0.03, Some(400_000_000)), path(10, 0.03, None));
    p.b_owned = true;
    let mut cfg = file_cfg();
    cfg.set_mss(65_535);
    let (ca, cb) = connect(&mut p, cfg);
    let payload = p.b.conn(cb).expect("receiver").payload_size();
    assert_eq!(p.b.owned_payload_len(), Some(payload));
    let data = content(40_000_000, s);
    let (mut sent, mut closed, mut eof) = (0, false, false);
    let (mut got, mut buf) = (Vec::new(), vec![0u8; 10_000]);
    let (mut pages, mut spare) = (0, None);
    let ok = p.run_until(Duration::from_secs(60), |p| {
        let now = p.now;
        if let Some(c) = p.a.conn(ca) {
            offer(c, now, &data, &mut sent);
            if sent == data.len() && !closed {
                c.close(now);
                closed = true;
            }
        }
        let c = p.b.conn(cb).expect("receiver");
        loop {
            match c.recv_page(&mut buf, &mut spare) {
                Ok(StreamRead::Copied(0)) => {
                    eof = true;
                    break;
                }
                Ok(StreamRead::Copied(n)) => got.extend_from_slice(&buf[..n]),
                Ok(StreamRead::Page(page, len)) => {
                    assert_eq!(page.len(), payload, "a page is one packet");
                    got.extend_from_slice(&page[..len]);
                    pages += 1;
                    spare = Some(page);
                }
                Err(_) => break,
            }
        }
        eof
    });
    assert!(ok, "transfer did not finish (seed {s})");
    assert!(got == data, "content differs (seed {s})");
    let st = p.a.conn(ca).map(|c| c.stats(p.now));
    assert!(
        st.is_some_and(|st| st.pkts_retransmitted > 0),
        "no loss to recover"
    );
    // Most packets went in without a copy and out as pages.
    let packets = (data.len() / payload) as u64;
    assert!(
        p.b_kept > packets / 2,
        "{} of {packets} payloads kept",
        p.b_kept
    );
    assert!(
        pages > packets / 2,
        "{pages} of {packets} packets read as pages"
    );
}

/// A pair over a clean 2 Gbit/s path with 1 ms each way, packets of 64 KiB (a page each),
/// the receiving side's payloads received apart from their headers; connected.
fn paged_pair(s: u64) -> (Pair, ConnId, ConnId) {
    let mut p = Pair::new(s, path(1, 0.0, Some(2_000_000_000)), path(1, 0.0, None));
    p.b_owned = true;
    let mut cfg = file_cfg();
    cfg.set_mss(65_535);
    let (ca, cb) = connect(&mut p, cfg);
    (p, ca, cb)
}

/// The sending application: offers `data` to `ca`, and closes once all of it is queued.
fn feed(p: &mut Pair, ca: ConnId, data: &[u8], sent: &mut usize, closed: &mut bool) {
    let now = p.now;
    if let Some(c) = p.a.conn(ca) {
        offer(c, now, data, sent);
        if *sent == data.len() && !*closed {
            c.close(now);
            *closed = true;
        }
    }
}

/// The receiving application: reads until `held` has `batch` pages or nothing is left,
/// giving the connection a spare from `stash` for each page it takes (with a stash).
/// Returns the bytes read and whether the stream ended.
fn take_pages(
    c: &mut Connection,
    buf: &mut [u8],
    mut stash: Option<&mut Vec<Vec<u8>>>,
    held: &mut Vec<Vec<u8>>,
    batch: usize,
) -> (usize, bool) {
    let mut got = 0;
    while held.len() < batch {
        let mut spare = stash.as_deref_mut().and_then(Vec::pop);
        let r = c.recv_page(buf, &mut spare);
        if let Some(st) = stash.as_deref_mut() {
            st.extend(spare);
        }
        match r {
            Ok(StreamRead::Copied(0)) => return (got, true),
            Ok(StreamRead::Copied(n)) => got += n,
            Ok(StreamRead::Page(page, len)) => {
                got += len;
                held.push(page);
            }
            Err(_) => break,
        }
    }
    (got, false)
}

/// A reader that takes whole pages out in batches and gives one back for each it takes
/// (from a stash of earlier ones, as `recv_pages` does), polling the buffer often and
/// finding it empty, reuses the buffer's pages: once the transfer runs, no page is
/// allocated, whatever the bytes received. Pages given back on empty polls, or while the
/// reader had just emptied the ring, were freed beyond a few spares, and the receiving
/// side allocated and zeroed fresh ones: 12-16 % of a loopback listener's time.
#[test]
fn pages_taken_and_given_back_circulate_without_new_allocation() {
    const BATCH: usize = 16;
    let s = seed(38);
    let _g = SeedGuard(s);
    let (mut p, ca, cb) = paged_pair(s);
    let data = content(200_000_000, s);
    let (mut sent, mut closed, mut eof) = (0, false, false);
    let (mut got, mut buf) = (0usize, vec![0u8; 10_000]);
    let (mut stash, mut held) = (Vec::new(), Vec::new());
    // Pages allocated and bytes received when a quarter of the data had arrived.
    let mut warm: Option<(u64, usize)> = None;
    // The reader wakes every 2 ms (8 packets at 2 Gbit/s) and takes what is there.
    let mut woke = p.now;
    let ok = p.run_until(Duration::from_secs(60), |p| {
        let now = p.now;
        feed(p, ca, &data, &mut sent, &mut closed);
        let c = p.b.conn(cb).expect("receiver");
        if now < woke + Duration::from_millis(2) {
            return eof;
        }
        woke = now;
        let (n, end) = take_pages(c, &mut buf, Some(&mut stash), &mut held, BATCH);
        (got, eof) = (got + n, eof || end);
        stash.append(&mut held);
        if warm.is_none() && got >= data.len() / 4 {
            warm = Some((c.stats(now).rcv_pages_allocated, got));
        }
        eof
    });
    assert!(ok, "transfer did not finish (seed {s})");
    assert_eq!(got, data.len(), "seed {s}");
    let (before, at) = warm.expect("a quarter arrived");
    let after = p.b.conn(cb).map(|c| c.stats(p.now).rcv_pages_allocated);
    let packets = (data.len() - at) / 65_000;
    assert!(
        after.is_some_and(|a| a - before <= 2),
        "{after:?} pages allocated in all, {before} when a quarter had arrived; {packets} \
         packets since (seed {s})"
    );
}

/// A reader that gives its pages back to the endpoint (as `recv_pages` does) has them written
/// by the next receives: the page given back last is the one the next payload kept leaves
/// in the receiving side's hands (a page just read is in cache; 1,000 streams over loopback
/// wrote into pages given back tens of milliseconds before, and moved a sixth less). No
/// connection allocates pages once the transfer runs, and the endpoint keeps at most
/// `PAGE_POOL` of them, freed a second after the transfer.
#[test]
fn pages_given_back_to_the_endpoint_are_written_next() {
    const BATCH: usize = 16;
    let s = seed(39);
    let _g = SeedGuard(s);
    let (mut p, ca, cb) = paged_pair(s);
    let payload = p.b.conn(cb).expect("receiver").payload_size();
    let data = content(100_000_000, s);
    let (mut sent, mut closed, mut eof) = (0, false, false);
    let (mut got, mut buf, mut held) = (0usize, vec![0u8; 10_000], Vec::new());
    let mut warm: Option<u64> = None;
    // The page given back last and the payloads kept by then; the checks that followed.
    let (mut last, mut hits, mut most) = (None, 0u32, 0usize);
    let mut woke = p.now;
    let ok = p.run_until(Duration::from_secs(60), |p| {
        let now = p.now;
        if let Some((ptr, kept)) = last {
            if p.b_kept == kept + 1 {
                assert_eq!(
                    p.b_payload_ptr(),
                    ptr,
                    "not the page given back last (seed {s})"
                );
                hits += 1;
                last = None;
            } else if p.b_kept > kept + 1 {
                last = None;
            }
        }
        feed(p, ca, &data, &mut sent, &mut closed);
        if now < woke + Duration::from_millis(2) {
            return eof;
        }
        woke = now;
        let c = p.b.conn(cb).expect("receiver");
        let (n, end) = take_pages(c, &mut buf, None, &mut held, BATCH);
        (got, eof) = (got + n, eof || end);
        if warm.is_none() && got >= data.len() / 4 {
            warm = Some(c.stats(now).rcv_pages_allocated);
        }
        let given = held.last().map(|p: &Vec<u8>| p.as_ptr());
        for page in held.drain(..) {
            p.b.give_page(now, cb, page);
        }
        if let Some(ptr) = given {
            last = Some((ptr, p.b_kept));
        }
        most = most.max(p.b.pages_held());
        eof
    });
    assert!(ok, "transfer did not finish (seed {s})");
    assert_eq!(got, data.len(), "seed {s}");
    assert!(
        hits > 100,
        "{hits} pages given back last were checked (seed {s})"
    );
    let before = warm.expect("a quarter arrived");
    let after = p.b.conn(cb).map(|c| c.stats(p.now).rcv_pages_allocated);
    assert!(
        after.is_some_and(|a| a - before <= 2),
        "{after:?} pages allocated in all, {before} when a quarter had arrived (seed {s})"
    );
    assert!(
        most > 0 && most <= PAGE_POOL * payload,
        "{most} bytes of pages held"
    );
    p.run_until(Duration::from_secs(2), |_| false);
    assert_eq!(p.b.pages_held(), 0, "pages kept after a second without use");
}

/// With packets of 1,500 bytes payloads are copied into pages of 32 packets, not kept whole:
/// pages given back to the endpoint then go to the connection's own spares, and none is
/// allocated once the transfer runs. (Given to the endpoint's pages, which only payloads
/// kept whole take, they were freed: about 18,000 fresh 64 KiB pages a connection in a run
/// of 10 streams over loopback.)
#[test]
fn pages_of_copied_payloads_given_back_to_the_endpoint_are_reused() {
    let s = seed(40);
    let _g = SeedGuard(s);
    let mut p = Pair::new(s, path(1, 0.0, Some(500_000_000)), path(1, 0.0, None));
    let mut cfg = file_cfg();
    cfg.set_mss(1500);
    let (ca, cb) = connect(&mut p, cfg);
    let data = content(40_000_000, s);
    let (mut sent, mut closed, mut eof) = (0, false, false);
    let (mut got, mut buf, mut held) = (0usize, vec![0u8; 10_000], Vec::new());
    let mut warm: Option<u64> = None;
    // The reader wakes every 2 ms (85 packets at 500 Mbit/s): whole pages wait for it.
    let (mut woke, mut taken) = (p.now, 0usize);
    let ok = p.run_until(Duration::from_secs(60), |p| {
        let now = p.now;
        feed(p, ca, &data, &mut sent, &mut closed);
        if now < woke + Duration::from_millis(2) {
            return eof;
        }
        woke = now;
        let c = p.b.conn(cb).expect("receiver");
        let (n, end) = take_pages(c, &mut buf, None, &mut held, 16);
        taken += held.len();
        (got, eof) = (got + n, eof || end);
        if warm.is_none() && got >= data.len() / 4 {
            warm = Some(c.stats(now).rcv_pages_allocated);
        }
        for page in held.drain(..) {
            p.b.give_page(now, cb, page);
        }
        eof
    });
    assert!(ok, "transfer did not finish (seed {s})");
    assert_eq!(got, data.len(), "seed {s}");
    assert!(taken > 100, "{taken} whole pages taken (seed {s})");
    let before = warm.expect("a quarter arrived");
    let after = p.b.conn(cb).map(|c| c.stats(p.now).rcv_pages_allocated);
    assert!(
        after.is_some_and(|a| a - before <= 2),
        "{after:?} pages allocated in all, {before} when a quarter had arrived (seed {s})"
    );
}

/// Where the receiving application is what holds the transfer back, the sender waits for
/// the window its reads reopen. A read that frees a quarter of the buffer is announced at
/// once (a full ACK), not at the next ACK tick: with a buffer of 64 packets (93 kB) the
/// ticks alone would let through 64 packets per 10 ms, 9.3 MB/s, against a reader of
/// 50 MB/s on a path with a 0.4 ms round trip.
#[test]
fn reads_that_reopen_the_window_are_announced_at_once() {
    let s = seed(37);
    let _g = SeedGuard(s);
    let hop = slipstream_proto::sim::LinkConfig {
        delay: Duration::from_micros(200),
        ..path(0, 0.0, None)
    };
    let mut p = Pair::new(s, hop.clone(), hop);
    let mut cfg = file_cfg();
    cfg.set_initial_window(64).set_buffer_cap(64 * 1456);
    let (ca, cb) = connect(&mut p, cfg);
    const READ_BPS: f64 = 50e6;
    let data = content(5_000_000, s);
    let (mut sent, mut got, mut buf) = (0, Vec::new(), vec![0u8; 1456]);
    let start = p.now;
    let done = p.run_until(Duration::from_secs(10), |p| {
        let now = p.now;
        let c = p.a.conn(ca).expect("sender");
        offer(c, now, &data, &mut sent);
        // The application reads at READ_BPS at most, a packet's worth at a time.
        let allowed = ((now - start).as_secs_f64() * READ_BPS) as usize;
        let c = p.b.conn(cb).expect("receiver");
        while got.len() < allowed.min(data.len()) {
            let want = (allowed - got.len()).min(buf.len());
            match c.recv(&mut buf[..want]) {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        got.len() == data.len()
    });
    let secs = (p.now - start).as_secs_f64();
    let rate = data.len() as f64 / secs;
    let b = p.b.conn(cb).expect("receiver").stats(p.now);
    assert!(done, "got {} of {} in {secs:.2} s", got.len(), data.len());
    assert!(got == data, "content differs");
    assert_eq!(
        b.pkts_recv_beyond_window, 0,
        "the receiver's buffer overflowed"
    );
    assert!(
        rate > 0.8 * READ_BPS,
        "{:.1} MB/s against a reader of {:.1}: {b:?}",
        rate / 1e6,
        READ_BPS / 1e6
    );
}

/// The receive buffer is sized from the path's round trip, not from one that counts the
/// queues along it. A controller that fills the bottleneck's queue (UDT's) on a 2 ms path
/// at 1 Gbit/s with 32 MB of queue reads a smoothed RTT of tens of milliseconds; sized from
/// that, the buffer grew, the window with it, the queue further, and so on up to the cap.
/// The least round trip keeps it at its initial size, and the link stays full.
#[test]
fn queueing_delay_does_not_grow_the_receive_buffer() {
    let s = seed(38);
    let _g = SeedGuard(s);
    let link = bottleneck(1, 0.0, 1_000_000_000, 32 << 20);
    let mut p = Pair::new(s, link, path(1, 0.0, None));
    let mut cfg = file_cfg();
    cfg.set_cc("file");
    let (ca, cb) = connect(&mut p, cfg);
    let data = content(200_000_000, s);
    let t0 = p.now;
    let got = stream(&mut p, ca, cb, &data, Duration::from_secs(30));
    let secs = (p.now - t0).as_secs_f64();
    assert!(got == data, "content differs");
    let b = p.b.conn(cb).expect("receiver").stats(p.now);
    eprintln!(
        "200 MB in {secs:.2} s; receive buffer {} packets, RTT {} ms",
        b.rcv_buf_cap_pkts, b.rtt_ms
    );
    assert!(b.rtt_ms > 10.0, "the queue never filled: {b:?}");
    assert!(
        b.rcv_buf_cap_pkts <= 8192,
        "the receive buffer grew with the queue: {b:?}"
    );
    assert!(secs < 2.5, "{:.2} Gbit/s", 1.6 / secs);
}

/// A send tap sees the stream's bytes once each, in order, as they are first sent:
/// retransmissions across a lossy path are not shown again, and bytes past its limit not
/// at all.
#[test]
fn a_send_tap_sees_each_byte_once_in_order() {
    use slipstream_proto::conn::SendTap;
    use std::sync::{Arc, Mutex};
    #[derive(Debug)]
    struct Collect(Arc<Mutex<Vec<u8>>>);
    impl SendTap for Collect {
        fn sent(&mut self, bytes: &[u8]) {
            self.0.lock().unwrap().extend_from_slice(bytes);
        }
    }
    let s = seed(39);
    let _g = SeedGuard(s);
    // A bottleneck, so that retransmissions go out between first transmissions.
    let mut p = Pair::new(s, path(5, 0.05, Some(20_000_000)), path(5, 0.05, None));
    let (ca, cb) = connect(&mut p, file_cfg());
    let data = content(2_000_000, s);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let limit = data.len() - 1000;
    p.a.conn(ca)
        .expect("sender")
        .set_send_tap(Box::new(Collect(seen.clone())), limit as u64);
    let mut last = None;
    let got = stream_with(&mut p, ca, cb, &data, Duration::from_secs(60), |p| {
        if let Some(c) = p.a.conn(ca) {
            last = Some((c.stats(p.now).pkts_retransmitted, c.send_tapped()));
        }
    });
    assert!(got == data, "content differs");
    let (retransmitted, tapped) = last.expect("the sender ran");
    assert!(retransmitted > 0, "no loss to recover");
    assert_eq!(tapped, limit as u64);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), limit, "the tap saw {} bytes", seen.len());
    assert!(seen[..] == data[..limit], "the tap saw other bytes");
}
