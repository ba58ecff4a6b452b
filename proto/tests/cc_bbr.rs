//! The "bbr" controller over the simulated network, in virtual time: goodput on long lossy
//! paths, queue behaviour on a clean path, and fairness between two flows.
//!
//! Every scenario runs in a second or two of real time, debug builds included. `compare_with_udt`
//! (ignored: it only prints) runs the same scenarios for "bbr" and "file" side by side:
//! `cargo test -p slipstream-proto --release --test cc_bbr -- --ignored --nocapture`.

mod common;
use common::*;
use slipstream_proto::endpoint::ConnId;
use slipstream_proto::sim::{LinkConfig, LinkStats, Pair};
use std::time::Duration;

/// Bottleneck rate of every scenario.
const RATE_BPS: u64 = 100_000_000;
/// One-way delay of every scenario.
const DELAY_MS: u64 = 20;
/// One bandwidth-delay product of the 100 Mbit/s, 40 ms RTT path, bytes.
const BDP_BYTES: usize = (RATE_BPS / 8 * 2 * DELAY_MS / 1000) as usize;

/// What one transfer achieved.
#[derive(Debug, Clone, Copy)]
struct Outcome {
    /// Payload bytes delivered to the application.
    bytes: u64,
    /// Virtual time from the first send to the last byte (or the limit).
    secs: f64,
    /// Whether everything arrived.
    done: bool,
    /// The forward link's counters.
    link: LinkStats,
    /// The forward link's counters one second into the transfer (after Startup).
    link_at_1s: LinkStats,
}

impl Outcome {
    /// Goodput as a fraction of the bottleneck rate.
    fn fraction(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs.max(1e-9) / RATE_BPS as f64
    }
}

fn cfg(cc: &str) -> slipstream_proto::conn::ConnConfig {
    let mut c = file_cfg();
    c.set_cc(cc);
    c
}

/// Streams `len` bytes with controller `cc` over the bottleneck with a one-way delay of
/// `delay_ms` (the return path has the same delay and loss, no rate limit); gives up after
/// `limit` of virtual time.
fn transfer(
    delay_ms: u64,
    cc: &str,
    seed: u64,
    loss: f64,
    queue_bytes: usize,
    len: usize,
    limit: Duration,
) -> Outcome {
    let mut p = Pair::new(
        seed,
        bottleneck(delay_ms, loss, RATE_BPS, queue_bytes),
        path(delay_ms, loss, None),
    );
    let (ca, cb) = connect(&mut p, cfg(cc));
    p.ab.reset_stats();
    // Keep streaming past `len`, so that the measurement is not about how the very last
    // packets are recovered: the engine currently leaves a lost final packet unrecovered while
    // the receiver keeps sending (unchanged) ACKs, which keep resetting the EXP timer.
    let data = content(len + len / 4, seed);
    let start = p.now;
    let mut sent = 0;
    let mut got = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    let mut end = None;
    let mut link_at_1s = None;
    let done = p.run_until(limit, |p| {
        let now = p.now;
        if link_at_1s.is_none() && now - start >= Duration::from_secs(1) {
            link_at_1s = Some(p.ab.stats());
        }
        pump(p, (ca, cb), &data, (&mut sent, &mut got), &mut buf);
        if got >= len as u64 && end.is_none() {
            end = Some(p.now);
        }
        end.is_some()
    });

    let end = end.unwrap_or(p.now);
    Outcome {
        bytes: got.min(len as u64),
        secs: (end - start).as_secs_f64(),
        done,
        link: p.ab.stats(),
        link_at_1s: link_at_1s.unwrap_or_default(),
    }
}

/// Offers the sender of `conns` the rest of `data` and reads what its receiver has, checking
/// it against `data`; advances `sent` and `got`.
fn pump(
    p: &mut Pair,
    (ca, cb): (ConnId, ConnId),
    data: &[u8],
    (sent, got): (&mut usize, &mut u64),
    buf: &mut [u8],
) {
    let now = p.now;
    if let Some(c) = p.a.conn(ca) {
        while *sent < data.len() {
            match c.send(now, &data[*sent..]) {
                Ok(n) => *sent += n,
                Err(_) => break,
            }
        }
    }
    let c = p.b.conn(cb).expect("receiver");
    while let Ok(n) = c.recv(buf) {
        if n == 0 {
            break;
        }
        let at = *got as usize;
        assert!(buf[..n] == data[at..at + n], "content");
        *got += n as u64;
    }
}

/// Two flows from `a` to `b` through the bottleneck; the second starts `stagger` later. Returns
/// the bytes each delivered between `measure_from` and `until` (virtual time after the first
/// flow starts) and the link counters.
fn two_flows(
    cc: &str,
    seed: u64,
    queue_bytes: usize,
    stagger: Duration,
    measure_from: Duration,
    until: Duration,
) -> ([u64; 2], LinkStats) {
    let mut p = Pair::new(
        seed,
        bottleneck(DELAY_MS, 0.0, RATE_BPS, queue_bytes),
        path(DELAY_MS, 0.0, None),
    );
    let (a1, b1) = connect(&mut p, cfg(cc));
    let t0 = p.now;
    let chunk = content(1 << 20, seed);
    let mut a2: Option<ConnId> = None;
    let mut b2: Option<ConnId> = None;
    let mut total = [0u64; 2];
    let mut at_start: Option<[u64; 2]> = None;
    let mut buf = vec![0u8; 1 << 16];
    let mut offsets = [0usize; 2];
    while p.now - t0 < until {
        if a2.is_none() && p.now - t0 >= stagger {
            // Open the second flow in place (its handshake runs while flow 1 streams).
            let now = p.now;
            let b_addr = p.b_addr;
            a2 = Some(p.a.connect(now, b_addr, cfg(cc)).expect("connect"));
        }
        // Accept the second flow when it arrives.
        while let Some((id, ev)) = p.b.poll_event() {
            if ev == slipstream_proto::conn::Event::Accepted && id != b1 {
                b2 = Some(id);
            }
        }
        while p.a.poll_event().is_some() {}
        let now = p.now;
        let flows = [Some((a1, b1)), a2.zip(b2)];
        for (i, f) in flows.iter().enumerate() {
            let Some((ca, cb)) = *f else { continue };
            if let Some(c) = p.a.conn(ca) {
                loop {
                    let off = offsets[i] % chunk.len();
                    match c.send(now, &chunk[off..]) {
                        Ok(n) if n > 0 => offsets[i] += n,
                        _ => break,
                    }
                }
            }
            if let Some(c) = p.b.conn(cb) {
                while let Ok(n) = c.recv(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    total[i] += n as u64;
                }
            }
        }
        if at_start.is_none() && p.now - t0 >= measure_from {
            at_start = Some(total);
        }
        p.step(Duration::from_millis(5));
    }
    let s = at_start.unwrap_or([0, 0]);
    ([total[0] - s[0], total[1] - s[1]], p.ab.stats())
}

/// Jain's fairness index of the shares.
fn jain(x: &[u64]) -> f64 {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let sq: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    if sq == 0.0 {
        0.0
    } else {
        sum * sum / (x.len() as f64 * sq)
    }
}

fn report(name: &str, cc: &str, o: &Outcome) {
    eprintln!(
        "{name} [{cc}]: {:.1} % of link ({} bytes in {:.2} s, done {}), link {:?}",
        o.fraction() * 100.0,
        o.bytes,
        o.secs,
        o.done,
        o.link
    );
}

/// Size of the large transfers: 40 MB (about 3.3 s at 100 Mbit/s).
const BIG: usize = 40_000_000;

#[test]
fn one_percent_loss_keeps_85_percent() {
    let s = seed(11);
    let _g = SeedGuard(s);
    let o = transfer(
        DELAY_MS,
        "bbr",
        s,
        0.01,
        2 * BDP_BYTES,
        BIG,
        Duration::from_secs(30),
    );
    report("1% loss", "bbr", &o);
    assert!(o.done);
    assert!(o.fraction() >= 0.85, "goodput {:.3}", o.fraction());
}

#[test]
fn five_percent_loss_keeps_70_percent() {
    let s = seed(12);
    let _g = SeedGuard(s);
    let o = transfer(
        DELAY_MS,
        "bbr",
        s,
        0.05,
        2 * BDP_BYTES,
        BIG,
        Duration::from_secs(30),
    );
    report("5% loss", "bbr", &o);
    assert!(o.done);
    assert!(o.fraction() >= 0.70, "goodput {:.3}", o.fraction());
}

#[test]
fn clean_path_fills_the_link_without_overflowing_the_queue() {
    let s = seed(13);
    let _g = SeedGuard(s);
    let o = transfer(
        DELAY_MS,
        "bbr",
        s,
        0.0,
        BDP_BYTES,
        BIG,
        Duration::from_secs(30),
    );
    report("no loss", "bbr", &o);
    assert!(o.done);
    assert!(o.fraction() >= 0.90, "goodput {:.3}", o.fraction());
    // Startup overshoots a one-BDP queue once (BBR's 2.89 gain): a few percent at most...
    assert!(
        o.link.queue_drops * 20 < o.link.offered,
        "queue drops {} of {}",
        o.link.queue_drops,
        o.link.offered
    );
    // ...and after Startup the queue hardly ever overflows.
    assert_few_drops_after_1s(&o);
}

/// After the first second (Startup) fewer than 0.5 % of the packets offered overflow the queue.
fn assert_few_drops_after_1s(o: &Outcome) {
    let drops = o.link.queue_drops - o.link_at_1s.queue_drops;
    let offered = o.link.offered - o.link_at_1s.offered;
    eprintln!("after 1 s: {drops} queue drops of {offered} packets");
    assert!(drops * 200 < offered, "queue drops {drops} of {offered}");
}

/// At 10 ms RTT a 1.25 probe that lasted longer than about a round would overflow a one-BDP
/// queue every cycle (it adds a quarter BDP per round it lasts).
#[test]
fn short_rtt_probes_fit_a_one_bdp_queue() {
    let s = seed(15);
    let _g = SeedGuard(s);
    let bdp = (RATE_BPS / 8 * 10 / 1000) as usize;
    let o = transfer(5, "bbr", s, 0.0, bdp, BIG, Duration::from_secs(30));
    report("no loss, 10 ms RTT", "bbr", &o);
    assert!(o.done);
    assert!(o.fraction() >= 0.90, "goodput {:.3}", o.fraction());
    assert_few_drops_after_1s(&o);
}

/// At 200 ms RTT and 1 % loss a hole's retransmission is itself lost now and then, and the
/// cumulative ACK then waits several round trips: the window must not close on the packets
/// delivered behind the hole meanwhile. (Counting every unacknowledged packet, and without
/// bbr's loss allowance, this path gave 75 %.)
#[test]
fn long_lossy_path_keeps_the_link_busy() {
    let s = seed(16);
    let _g = SeedGuard(s);
    let bdp = (RATE_BPS / 8 * 200 / 1000) as usize;
    let o = transfer(
        100,
        "bbr",
        s,
        0.01,
        2 * bdp,
        3 * BIG,
        Duration::from_secs(60),
    );
    report("1% loss, 200 ms RTT", "bbr", &o);
    assert!(o.done);
    assert!(o.fraction() >= 0.85, "goodput {:.3}", o.fraction());
}

/// The receiver's periodic NAKs repeat every loss until its retransmission arrives, which a
/// queue holds up by a delay that moves with the controller's probes and the sender's
/// bursts. The sender must take the repeats for what they are. With its own twice-smoothed
/// round trip as the measure of "still on its way" (its variance a few milliseconds), it
/// re-sent packets still queued: on 1 Gbit/s paths through `slipstream netem`, about 1,700
/// arrived twice in every 256 MiB run at 50 ms and 1 % loss, and 2,500-8,700 in six runs
/// of fourteen at 200 ms and 0.1 % (3 and 0-445 with the peer's bound). Here 8 ms of jitter
/// on the return path stands in for a real path's uneven timing: 14-26 received twice
/// before (seeds 30-32), none after.
#[test]
fn repeated_loss_reports_do_not_resend_packets_still_queued() {
    let rate = 1_000_000_000;
    let bdp = (rate / 8 * 50 / 1000) as usize;
    for i in 0..3 {
        let s = seed(30 + i);
        let _g = SeedGuard(s);
        let back = LinkConfig {
            jitter: Duration::from_millis(8),
            ..path(25, 0.01, None)
        };
        let mut p = Pair::new(s, bottleneck(25, 0.01, rate, bdp), back);
        let (ca, cb) = connect(&mut p, cfg("bbr"));
        p.ab.reset_stats();
        let data = content(48 << 20, s);
        let (mut sent, mut got) = (0, 0u64);
        let mut buf = vec![0u8; 1 << 16];
        let done = p.run_until(Duration::from_secs(30), |p| {
            pump(p, (ca, cb), &data, (&mut sent, &mut got), &mut buf);
            got == data.len() as u64
        });
        let now = p.now;
        let rexmit = p.a.conn(ca).map_or(0, |c| c.stats(now).pkts_retransmitted);
        let dup = p.b.conn(cb).map_or(0, |c| c.stats(now).pkts_recv_dup);
        let l = p.ab.stats();
        eprintln!("seed {s}: retransmitted {rexmit}, received twice {dup}, link {l:?}");
        assert!(done, "{got} of {} bytes", data.len());
        let lost = l.lost + l.queue_drops;
        assert!(
            dup * 1000 <= lost,
            "{dup} packets received twice, against {lost} lost"
        );
    }
}

/// A small transfer that also runs in debug builds.
#[test]
fn lossy_transfer_completes_fast() {
    let s = seed(14);
    let _g = SeedGuard(s);
    let o = transfer(
        DELAY_MS,
        "bbr",
        s,
        0.02,
        2 * BDP_BYTES,
        3_000_000,
        Duration::from_secs(10),
    );
    report("2% loss, 3 MB", "bbr", &o);
    assert!(o.done);
    // Startup is a large part of so short a transfer; 50 % is still far above UDT's rate.
    assert!(o.fraction() >= 0.5, "goodput {:.3}", o.fraction());
}

#[test]
fn two_flows_share_fairly() {
    let s = seed(15);
    let _g = SeedGuard(s);
    let (shares, link) = two_flows(
        "bbr",
        s,
        2 * BDP_BYTES,
        Duration::from_millis(500),
        Duration::from_secs(3),
        Duration::from_secs(8),
    );
    let j = jain(&shares);
    let total = (shares[0] + shares[1]) as f64 * 8.0 / 5.0 / RATE_BPS as f64;
    eprintln!(
        "two flows [bbr]: shares {shares:?}, Jain {j:.3}, total {:.1} % of link, link {link:?}",
        total * 100.0
    );
    assert!(j >= 0.9, "Jain index {j:.3}, shares {shares:?}");
    assert!(total >= 0.85, "total {total:.3}");
}

/// Prints every scenario for "bbr" and "file" (UDT), the table in docs/benchmarks.md, and
/// checks its conclusion: under random loss the default controller is far ahead of UDT's.
/// Heavy (six 40 MB transfers): CI runs it optimized with --ignored.
#[test]
#[ignore = "benchmark table: CI runs it optimized with --ignored"]
fn compare_with_udt() {
    let s = seed(11);
    let mut lossy = std::collections::HashMap::new();
    for cc in ["bbr", "file"] {
        for (name, loss, queue) in [
            ("no loss, 1 BDP queue", 0.0, BDP_BYTES),
            ("1% loss, 2 BDP queue", 0.01, 2 * BDP_BYTES),
            ("5% loss, 2 BDP queue", 0.05, 2 * BDP_BYTES),
        ] {
            let o = transfer(DELAY_MS, cc, s, loss, queue, BIG, Duration::from_secs(20));
            report(name, cc, &o);
            if loss > 0.0 {
                lossy.insert((cc, name), o.fraction());
            }
        }
        let (shares, _) = two_flows(
            cc,
            s,
            2 * BDP_BYTES,
            Duration::from_millis(500),
            Duration::from_secs(3),
            Duration::from_secs(8),
        );
        let total = (shares[0] + shares[1]) as f64 * 8.0 / 5.0 / RATE_BPS as f64;
        eprintln!(
            "two flows [{cc}]: shares {shares:?}, Jain {:.3}, total {:.1} %",
            jain(&shares),
            total * 100.0
        );
    }
    for name in ["1% loss, 2 BDP queue", "5% loss, 2 BDP queue"] {
        let (b, f) = (lossy[&("bbr", name)], lossy[&("file", name)]);
        assert!(
            b > 0.8 && b > 5.0 * f,
            "{name}: bbr {b:.3} of the link, file {f:.3}"
        );
    }
}

/// Startup at 2.89 times the bottleneck rate overflows any queue it does not leave in time.
/// It ends one round after the sender has sent twice as fast as packets arrive: the bandwidth
/// plateau alone took a round more, and at 1 Gbit/s and 10 ms with a one-BDP queue the
/// first 300 ms dropped 5,401 packets; now 3,906.
#[test]
fn startup_ends_a_round_after_the_queue_starts_to_grow() {
    let s = seed(17);
    let _g = SeedGuard(s);
    let rate = 1_000_000_000;
    let bdp = (rate / 8 * 10 / 1000) as usize;
    let mut p = Pair::new(s, bottleneck(5, 0.0, rate, bdp), path(5, 0.0, None));
    let (ca, cb) = connect(&mut p, cfg("bbr"));
    p.ab.reset_stats();
    let data = content(100_000_000, s);
    let (mut off, mut got) = (0, 0);
    let mut buf = vec![0u8; 1 << 16];
    p.run_until(Duration::from_millis(300), |p| {
        off += p.a.conn(ca).unwrap().send(p.now, &data[off..]).unwrap_or(0);
        while let Ok(n @ 1..) = p.b.conn(cb).unwrap().recv(&mut buf) {
            got += n;
        }
        false
    });
    let link = p.ab.stats();
    let share = got as f64 * 8.0 / 0.3 / rate as f64;
    eprintln!(
        "first 300 ms: {} queue drops, {:.1} % of the link delivered",
        link.queue_drops,
        share * 100.0
    );
    assert!(link.queue_drops < 4_500, "{} queue drops", link.queue_drops);
    // Not by leaving Startup before the link is full.
    assert!(share > 0.75, "{:.1} % of the link", share * 100.0);
}

/// Bytes delivered in the `window` after the bottleneck steps up from a quarter of
/// [`RATE_BPS`] to all of it (a competing flow leaving), `at` into a transfer.
fn after_step_up(seed: u64, at: Duration, window: Duration) -> u64 {
    let delay_ms = DELAY_MS;
    let mut p = Pair::new(
        seed,
        bottleneck(delay_ms, 0.0, RATE_BPS / 4, BDP_BYTES),
        path(delay_ms, 0.0, None),
    );
    let (ca, cb) = connect(&mut p, cfg("bbr"));
    let data = content(BIG, seed);
    let start = p.now;
    let (mut sent, mut got, mut at_step) = (0, 0u64, None);
    let mut buf = vec![0u8; 1 << 16];
    p.run_until(at + window, |p| {
        let now = p.now;
        if at_step.is_none() && now - start >= at {
            p.ab.set_config(bottleneck(delay_ms, 0.0, RATE_BPS, BDP_BYTES));
            at_step = Some(got);
        }
        pump(p, (ca, cb), &data, (&mut sent, &mut got), &mut buf);
        false
    });
    got - at_step.expect("the step came")
}

/// When the path gains room (a competing flow leaves), a probe that found bandwidth is
/// followed by another after three phases, not eight. The link steps from 25 to 100 Mbit/s
/// at 40 ms RTT: in the 1.5 s after the step the flow moved 59-69 % of what the link could
/// carry (seeds 21-26), against 37-42 % when every probe waited out the whole cycle.
#[test]
fn bandwidth_that_appears_is_found_within_a_second() {
    let s = seed(21);
    let _g = SeedGuard(s);
    let window = Duration::from_millis(1500);
    let got = after_step_up(s, Duration::from_secs(4), window);
    let full = RATE_BPS / 8 * window.as_millis() as u64 / 1000;
    let share = got as f64 / full as f64;
    eprintln!(
        "after the step: {got} bytes in {window:?}, {:.1} % of the link",
        share * 100.0
    );
    assert!(share >= 0.55, "{:.1} % of the link", share * 100.0);
}

/// A transfer that opens with a few bytes and then pauses (a file sender hashing what the
/// receiver already holds before it resumes: 0.4 s for half a gigabyte; a tree's sender
/// waiting for the receiver's plan) finds the link within a few rounds. The report on the
/// opening's lone packet used to start Startup from one packet per round trip and end it
/// there: through the emulator at 1 Gbit/s and 10 ms, 5 of 21 resumes started near a tenth
/// of the link and took 4.5 s to reach it; here, 0.2 % of it for a second.
#[test]
fn a_pause_after_the_first_bytes_does_not_end_startup_low() {
    let s = seed(31);
    let _g = SeedGuard(s);
    let rate = 1_000_000_000;
    let bdp = (rate / 8 * 10 / 1000) as usize;
    let mut shares = Vec::new();
    for pause_ms in [20u64, 100, 400] {
        let mut p = Pair::new(s, bottleneck(5, 0.0, rate, bdp), path(5, 0.0, None));
        let (ca, cb) = connect(&mut p, cfg("bbr"));
        let data = content(100_000_000, s);
        let mut buf = vec![0u8; 1 << 16];
        // The opening: 32 bytes, read by the receiver; then the pause.
        let opening = 32;
        let mut off = p.a.conn(ca).unwrap().send(p.now, &data[..opening]).unwrap();
        let mut got = 0;
        p.run_until(Duration::from_millis(pause_ms), |p| {
            while let Ok(n @ 1..) = p.b.conn(cb).unwrap().recv(&mut buf) {
                got += n;
            }
            false
        });
        assert_eq!(got, opening);
        p.ab.reset_stats();
        let start_got = got;
        let mut marks = Vec::new();
        for _ in 0..10 {
            p.run_until(Duration::from_millis(100), |p| {
                off += p.a.conn(ca).unwrap().send(p.now, &data[off..]).unwrap_or(0);
                while let Ok(n @ 1..) = p.b.conn(cb).unwrap().recv(&mut buf) {
                    got += n;
                }
                false
            });
            marks.push(got);
        }
        eprintln!("pause {pause_ms} ms, bytes every 100 ms after it: {marks:?}");
        let got = marks[2];
        let share = (got - start_got) as f64 * 8.0 / 0.3 / rate as f64;
        eprintln!(
            "pause {pause_ms} ms: {:.1} % of the link in the 300 ms after it",
            share * 100.0
        );
        shares.push((pause_ms, share));
    }
    // Startup after a pause takes a round or two longer to find the link than at once
    // (68 % of it in 300 ms); before the fix, 0.2 % for a second.
    for (pause_ms, share) in shares {
        assert!(
            share > 0.45,
            "pause {pause_ms} ms: {:.1} % of the link",
            share * 100.0
        );
    }
}
