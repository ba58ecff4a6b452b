//! The real-time socket on loopback: whole messages of every size, the smoother holding
//! non-real-time traffic, refusals, reports both ways, marking and hostile fragments.

use super::*;
use slipstream_proto::rt::header::{RtHeader, RT_HEADER_LEN};
use slipstream_proto::rt::report::{Report, REPORT_LEN};
use std::net::UdpSocket;

fn lo() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A smoother with a bucket of `depth` that does not refresh within a test.
fn held(depth: u32) -> Option<SmootherConfig> {
    let hour = Duration::from_secs(3600);
    Some(SmootherConfig {
        depth,
        rp0: hour,
        rp_min: hour,
        rp_max: hour,
        ..SmootherConfig::default()
    })
}

fn pattern(len: usize, seed: u8) -> impl Iterator<Item = u8> {
    (0..len).map(move |i| (i as u8).wrapping_mul(31).wrapping_add(seed))
}

/// Polls `a` and `b` until `b` has received `want` messages or 5 s pass.
fn receive_all(b: &mut RtSocket, a: &mut RtSocket, want: usize) -> Vec<(Class, Vec<u8>, bool)> {
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while got.len() < want && Instant::now() < end {
        a.poll(Duration::ZERO, |_| {}).unwrap();
        b.poll(Duration::from_millis(5), |m| {
            got.push((m.class, m.data.to_vec(), m.late))
        })
        .unwrap();
    }
    got
}

fn send(a: &mut RtSocket, dst: SocketAddr, len: usize, seed: u8, class: Class) {
    let mut buf = a.claim().expect("a free buffer");
    for (d, s) in buf.as_mut().iter_mut().zip(pattern(len, seed)) {
        *d = s;
    }
    a.send(buf, len, dst, class, Some(Duration::from_secs(2)))
        .expect("queued")
}

#[test]
fn messages_of_every_size_arrive_whole_and_exact() {
    let cfg = RtConfig {
        max_message: 1 << 20,
        buffers: 8,
        reassembly_slots: 4,
        smoother: None,
        ..RtConfig::default()
    };
    let mut a = RtSocket::open(lo(), cfg).unwrap();
    let mut b = RtSocket::open(lo(), cfg).unwrap();
    let dst = b.local_addr().unwrap();
    let f = a.fragment_len();
    assert_eq!(f, 1500 - 28 - 32);
    for (i, &len) in [0, 1, f - 1, f, f + 1, 64 << 10, 1 << 20]
        .iter()
        .enumerate()
    {
        let class = if i % 2 == 0 { Class::Rt } else { Class::Nrt };
        send(&mut a, dst, len, i as u8, class);
        let got = receive_all(&mut b, &mut a, 1);
        assert_eq!(got.len(), 1, "message of {len} bytes did not arrive");
        let (c, data, late) = &got[0];
        assert_eq!(*c, class);
        assert!(!late);
        assert!(
            data.iter().copied().eq(pattern(len, i as u8)),
            "{len} bytes differ"
        );
    }
    let s = a.stats();
    assert_eq!(s.rt_sent + s.nrt_sent, 7);
    assert!(
        s.datapath.gso_sends > 0,
        "large messages go as GSO runs: {s:?}"
    );
    assert_eq!(
        b.stats().reassembly.completed,
        3,
        "64 KiB, 1 MiB and f+1 bytes"
    );
}

#[test]
fn the_smoother_holds_non_real_time_packets_and_never_real_time_ones() {
    let cfg = RtConfig {
        smoother: held(4),
        ..RtConfig::default()
    };
    let mut a = RtSocket::open(lo(), cfg).unwrap();
    let b = UdpSocket::bind(lo()).unwrap();
    let dst = b.local_addr().unwrap();
    for i in 0..10 {
        send(&mut a, dst, 100, i, Class::Nrt);
    }
    // At least one credit each (the default rule): a bucket of 4 lets 4 go.
    assert_eq!(a.stats().nrt_fragments, 4);
    assert_eq!(a.queued(), (0, 6));
    for i in 0..5 {
        send(&mut a, dst, 3000, i, Class::Rt);
    }
    let s = a.stats();
    assert_eq!(s.rt_fragments, 5 * 3, "real-time leaves at once, in debt");
    assert_eq!(s.credits, -15);
    assert_eq!(s.nrt_fragments, 4);
}

/// With byte credits each fragment takes its own IP size: small messages take a share of
/// a credit, and the short last fragment of a message goes where a full one would wait.
#[test]
fn byte_credits_charge_each_fragment_its_size() {
    let cfg = RtConfig {
        smoother: held(4).map(|c| SmootherConfig {
            unit: CreditUnit::Byte,
            ..c
        }),
        ..RtConfig::default()
    };
    let mut a = RtSocket::open(lo(), cfg).unwrap();
    let b = UdpSocket::bind(lo()).unwrap();
    let dst = b.local_addr().unwrap();
    let f = a.fragment_len();
    // 4 credits are 6,000 bytes; ten datagrams of 100 + 32 + 28 bytes take 1,600.
    for i in 0..10 {
        send(&mut a, dst, 100, i, Class::Nrt);
    }
    assert_eq!((a.stats().nrt_fragments, a.queued()), (10, (0, 0)));
    // Fragments of 1,500, 1,500 and 180 bytes: 4,400 left, all three go.
    send(&mut a, dst, 2 * f + 120, 10, Class::Nrt);
    assert_eq!((a.stats().nrt_fragments, a.queued()), (13, (0, 0)));
    // 1,220 bytes left: a full fragment waits; a real-time datagram of 160 bytes does not.
    send(&mut a, dst, f, 11, Class::Nrt);
    send(&mut a, dst, 100, 12, Class::Rt);
    let s = a.stats();
    assert_eq!((s.nrt_fragments, s.rt_fragments), (13, 1));
    assert_eq!(a.queued(), (0, 1));
    assert_eq!(s.credits, 0, "1,060 bytes: no whole credit");
}

#[test]
fn settings_out_of_range_are_refused_and_a_deadline_out_of_reach_is_none() {
    let hour = Duration::from_secs(3600);
    let too_long = [
        RtConfig {
            spin: Duration::from_secs(2),
            ..RtConfig::default()
        },
        RtConfig {
            report_interval: Duration::MAX,
            ..RtConfig::default()
        },
        RtConfig {
            reassembly_timeout: hour * 2,
            ..RtConfig::default()
        },
        RtConfig {
            smoother: Some(SmootherConfig {
                rp_max: Duration::MAX,
                ..SmootherConfig::default()
            }),
            ..RtConfig::default()
        },
    ];
    for cfg in too_long {
        let e = RtSocket::open(lo(), cfg).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{cfg:?}");
    }
    // A deadline no instant can hold: the message goes as one without a deadline.
    let cfg = RtConfig {
        smoother: None,
        ..RtConfig::default()
    };
    let (mut a, mut b) = (
        RtSocket::open(lo(), cfg).unwrap(),
        RtSocket::open(lo(), cfg).unwrap(),
    );
    let dst = b.local_addr().unwrap();
    for class in [Class::Rt, Class::Nrt] {
        let buf = a.claim().unwrap();
        a.send(buf, 100, dst, class, Some(Duration::MAX)).unwrap();
    }
    assert_eq!(receive_all(&mut b, &mut a, 2).len(), 2);
}

#[test]
fn a_full_queue_refuses_with_the_reason_and_gives_the_buffer_back() {
    let cfg = RtConfig {
        nrt_queue: 2,
        smoother: held(1),
        ..RtConfig::default()
    };
    let mut a = RtSocket::open(lo(), cfg).unwrap();
    let dst = UdpSocket::bind(lo()).unwrap().local_addr().unwrap();
    for i in 0..3 {
        send(&mut a, dst, 10, i, Class::Nrt);
    }
    let free = a.free_buffers();
    let buf = a.claim().unwrap();
    let e = a.send(buf, 10, dst, Class::Nrt, None).unwrap_err();
    assert_eq!(e.reason, WouldBlock::NrtQueueFull);
    assert!(e.to_string().contains("smoother"));
    drop(e);
    assert_eq!(
        a.free_buffers(),
        free,
        "the refused buffer is back in the pool"
    );
    let buf = a.claim().unwrap();
    let e = a
        .send(buf, (64 << 10) + 1, dst, Class::Rt, None)
        .unwrap_err();
    assert_eq!(e.reason, WouldBlock::TooLong);
    let s = a.stats();
    assert_eq!((s.nrt_refused, s.too_long), (1, 1));
}

#[test]
fn a_waiting_non_real_time_message_past_its_deadline_is_dropped_and_counted() {
    let cfg = RtConfig {
        smoother: held(1),
        ..RtConfig::default()
    };
    let mut a = RtSocket::open(lo(), cfg).unwrap();
    let dst = UdpSocket::bind(lo()).unwrap().local_addr().unwrap();
    for _ in 0..3 {
        let buf = a.claim().unwrap();
        a.send(buf, 10, dst, Class::Nrt, Some(Duration::from_millis(20)))
            .unwrap();
    }
    assert_eq!(a.queued(), (0, 2));
    std::thread::sleep(Duration::from_millis(30));
    a.poll(Duration::ZERO, |_| {}).unwrap();
    assert_eq!(a.queued(), (0, 0));
    assert_eq!(a.stats().nrt_expired, 2);
    assert_eq!(a.free_buffers(), a.config().buffers);
}

/// Polls `b` while reading the reports it sends to `raw`, for at most 3 s: the first that
/// `done` accepts, else the last (`None` if none came). Nothing may arrive whole at `b`.
fn report_until(
    b: &mut RtSocket,
    raw: &UdpSocket,
    done: impl Fn(&Report) -> bool,
) -> Option<Report> {
    let mut last = None;
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        b.poll(Duration::from_millis(2), |m| {
            assert!(m.data.len() == 10, "only the 10-byte messages are whole")
        })
        .unwrap();
        let mut r = [0; 64];
        if let Ok((n, _)) = raw.recv_from(&mut r) {
            let rep = Report::parse(&r[..n]).expect("a report");
            last = Some(rep);
            if done(&rep) {
                break;
            }
        }
    }
    last
}

fn fragment(id: u32, msg_len: u32, offset: u32, frag_len: u16, payload: usize) -> Vec<u8> {
    let mut d = vec![7; RT_HEADER_LEN + payload];
    RtHeader {
        class: Class::Rt,
        msg_id: id,
        msg_len,
        offset,
        frag_len,
        sent_us: 0,
        deadline_us: 0,
        more: false,
    }
    .emit(&mut d)
    .unwrap();
    d
}

/// A receiver that reports every 2 ms and gives up on incomplete messages after 10 ms, its
/// address, and a raw socket to play its source.
fn reporting_receiver() -> (RtSocket, SocketAddr, UdpSocket) {
    let cfg = RtConfig {
        report_interval: Duration::from_millis(2),
        reassembly_timeout: Duration::from_millis(10),
        ..RtConfig::default()
    };
    let b = RtSocket::open(lo(), cfg).unwrap();
    let dst = b.local_addr().unwrap();
    let raw = UdpSocket::bind(lo()).unwrap();
    raw.set_read_timeout(Some(Duration::from_millis(10)))
        .unwrap();
    (b, dst, raw)
}

#[test]
fn a_receiver_reports_missing_messages_and_incomplete_ones_to_their_sender() {
    let (mut b, dst, raw) = reporting_receiver();
    // Messages 0 and 3 whole, 1 and 2 never: 2 missing; message 4 half, never finished.
    raw.send_to(&fragment(0, 10, 0, 10, 10), dst).unwrap();
    raw.send_to(&fragment(3, 10, 0, 10, 10), dst).unwrap();
    raw.send_to(&fragment(4, 1200, 0, 600, 600), dst).unwrap();
    let rep = report_until(&mut b, &raw, |r| r.expired == 1).expect("reports came");
    assert_eq!(
        (rep.delivered, rep.missing, rep.expired, rep.next_rt),
        (2, 2, 1, 4)
    );
    assert_eq!(b.stats().reassembly.expired, 1);
}

#[test]
fn a_loss_report_lengthens_the_senders_refresh_period() {
    let cfg = RtConfig {
        smoother: Some(SmootherConfig {
            rp0: Duration::from_millis(10),
            ..SmootherConfig::default()
        }),
        ..RtConfig::default()
    };
    let mut a = RtSocket::open(lo(), cfg).unwrap();
    let raw = UdpSocket::bind(lo()).unwrap();
    let src = a.local_addr().unwrap();
    // A report from a peer never sent to is ignored.
    let mut r = [0; REPORT_LEN];
    Report {
        missing: 5,
        seq: 1,
        ..Report::default()
    }
    .emit(&mut r);
    raw.send_to(&r, src).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    a.poll(Duration::from_millis(1), |_| {}).unwrap();
    assert_eq!(a.stats().reports_ignored, 1);
    send(&mut a, raw.local_addr().unwrap(), 10, 0, Class::Rt);
    raw.send_to(&r, src).unwrap();
    let end = Instant::now() + Duration::from_secs(2);
    while a.stats().smoother.lossy_refreshes == 0 && Instant::now() < end {
        a.poll(Duration::from_millis(2), |_| {}).unwrap();
    }
    let s = a.stats();
    assert_eq!((s.reports_taken, s.reported_missing), (1, 5));
    assert_eq!(s.smoother.lossy_refreshes, 1);
    assert!(
        s.period_us >= 16_000,
        "doubled from about 10 ms: {}",
        s.period_us
    );
    // The same report again is old news.
    raw.send_to(&r, src).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    a.poll(Duration::from_millis(1), |_| {}).unwrap();
    assert_eq!(a.stats().reports_ignored, 2);
}

/// Losses at a receiver from another sender slow a sender down with
/// [`LossSignal::Receiver`] and not with [`LossSignal::Own`]; the first report only sets the
/// count it starts from.
#[test]
fn losses_at_the_receiver_slow_every_sender_with_the_receiver_signal() {
    for signal in [LossSignal::Receiver, LossSignal::Own] {
        let cfg = RtConfig {
            smoother: Some(SmootherConfig {
                rp0: Duration::from_millis(10),
                ..SmootherConfig::default()
            }),
            loss_signal: signal,
            ..RtConfig::default()
        };
        let mut a = RtSocket::open(lo(), cfg).unwrap();
        let raw = UdpSocket::bind(lo()).unwrap();
        let src = a.local_addr().unwrap();
        send(&mut a, raw.local_addr().unwrap(), 10, 0, Class::Rt);
        let report = |seq, receiver_losses| {
            let mut r = [0; REPORT_LEN];
            Report {
                delivered: seq,
                seq,
                receiver_losses,
                ..Report::default()
            }
            .emit(&mut r);
            r
        };
        // 40 losses before this sender's first report: no news to it.
        raw.send_to(&report(1, 40), src).unwrap();
        let settle = |a: &mut RtSocket, ms| {
            let end = Instant::now() + Duration::from_millis(ms);
            while Instant::now() < end {
                a.poll(Duration::from_millis(2), |_| {}).unwrap();
            }
        };
        settle(&mut a, 40);
        assert_eq!(a.stats().reports_taken, 1);
        assert_eq!(a.stats().smoother.lossy_refreshes, 0, "{signal:?}");
        // Three more at the receiver, none of them this sender's.
        raw.send_to(&report(2, 43), src).unwrap();
        settle(&mut a, 40);
        let s = a.stats();
        assert_eq!((s.reports_taken, s.reported_missing), (2, 0));
        let want = u64::from(signal == LossSignal::Receiver);
        assert_eq!(s.smoother.lossy_refreshes, want, "{signal:?}");
    }
}

#[test]
fn a_receiver_counts_every_sources_losses_in_each_report() {
    let (mut b, dst, raw) = reporting_receiver();
    let other = UdpSocket::bind(lo()).unwrap();
    // The other source loses messages 1 and 2; `raw` loses nothing.
    other.send_to(&fragment(0, 10, 0, 10, 10), dst).unwrap();
    other.send_to(&fragment(3, 10, 0, 10, 10), dst).unwrap();
    raw.send_to(&fragment(0, 10, 0, 10, 10), dst).unwrap();
    raw.send_to(&fragment(1, 10, 0, 10, 10), dst).unwrap();
    let rep = report_until(&mut b, &raw, |r| r.delivered == 2).expect("reports came");
    assert_eq!((rep.delivered, rep.missing, rep.receiver_losses), (2, 0, 2));
}

#[test]
fn real_time_datagrams_arrive_marked_ef_and_others_unmarked() {
    let mut a = RtSocket::open(lo(), RtConfig::default()).unwrap();
    let mut b = RtSocket::open(lo(), RtConfig::default()).unwrap();
    let (marks, _) = a.marking();
    if !marks {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "the kernel does not take IP_TOS per message"
        );
        eprintln!("skipping: the kernel does not take IP_TOS per message");
        return;
    }
    let dst = b.local_addr().unwrap();
    send(&mut a, dst, 3000, 1, Class::Rt);
    send(&mut a, dst, 3000, 2, Class::Nrt);
    let mut marked = Vec::new();
    let end = Instant::now() + Duration::from_secs(3);
    while marked.len() < 2 && Instant::now() < end {
        b.poll(Duration::from_millis(5), |m| {
            marked.push((m.class, m.marked))
        })
        .unwrap();
    }
    marked.sort_by_key(|&(c, _)| c == Class::Nrt);
    assert_eq!(marked, [(Class::Rt, true), (Class::Nrt, false)]);
    assert_eq!(
        b.stats().marked_received,
        3,
        "3 fragments of the real-time message"
    );
}

#[test]
fn hostile_fragments_are_counted_and_memory_stays_fixed() {
    let cfg = RtConfig {
        reassembly_slots: 2,
        reassembly_timeout: Duration::from_millis(5),
        ..RtConfig::default()
    };
    let mut b = RtSocket::open(lo(), cfg).unwrap();
    let memory = b.memory();
    let dst = b.local_addr().unwrap();
    let raw = UdpSocket::bind(lo()).unwrap();
    let mut sent = 0;
    for id in 0..200u32 {
        for d in [
            fragment(id, 1 << 30, 0, 600, 600), // longer than any buffer
            fragment(id, 60_000, 0, 1, 1),      // claims 60,000 fragments
            fragment(id, 1200, 600, 600, 10),   // not where it says
            fragment(id, 1200, 1800, 600, 600), // past the end
            fragment(id, 4000, 0, 1000, 1000),  // never completes
            b"RT garbage".to_vec(),
        ] {
            raw.send_to(&d, dst).unwrap();
            sent += 1;
        }
    }
    let end = Instant::now() + Duration::from_secs(3);
    while b.stats().reassembly.refused() + b.stats().reassembly.accepted < sent
        && Instant::now() < end
    {
        b.poll(Duration::from_millis(5), |_| panic!("nothing is whole"))
            .unwrap();
    }
    let s = b.stats().reassembly;
    assert_eq!(
        s.refused() + s.accepted,
        sent,
        "every datagram counted: {s:?}"
    );
    assert_eq!(b.memory(), memory);
}

#[test]
fn a_full_kernel_buffer_keeps_real_time_messages_queued_then_sends_them_whole() {
    let cfg = RtConfig {
        rt_queue: 2,
        smoother: None,
        ..RtConfig::default()
    };
    let mut a = RtSocket::open(lo(), cfg).unwrap();
    let mut b = RtSocket::open(lo(), cfg).unwrap();
    let dst = b.local_addr().unwrap();
    // A first message, so that the receiver knows where the numbering stands.
    send(&mut a, dst, 10, 0, Class::Rt);
    assert_eq!(receive_all(&mut b, &mut a, 1).len(), 1);
    // The next send finds the socket buffer full: nothing waits, the message stays queued.
    a.dp.udp.fail_send(0, libc::EAGAIN);
    send(&mut a, dst, 5000, 1, Class::Rt);
    assert_eq!(a.queued(), (1, 0));
    assert_eq!(a.stats().datapath.send_would_block, 1);
    assert!(a.next_timer() <= Instant::now() + Duration::from_millis(1));
    // Queued behind it: one more fits, the third is refused with the reason.
    a.dp.udp.fail_send(0, libc::EAGAIN);
    send(&mut a, dst, 100, 2, Class::Rt);
    let buf = a.claim().unwrap();
    let e = a.send(buf, 100, dst, Class::Rt, None).unwrap_err();
    assert_eq!(e.reason, WouldBlock::RtQueueFull);
    drop(e);
    // The kernel takes datagrams again: both arrive whole, in order.
    let got = receive_all(&mut b, &mut a, 2);
    assert_eq!(got.len(), 2);
    assert!(got[0].1.iter().copied().eq(pattern(5000, 1)));
    assert!(got[1].1.iter().copied().eq(pattern(100, 2)));
    assert_eq!(a.queued(), (0, 0));
    assert_eq!(a.stats().rt_refused, 1);
    // Numbered once each, whatever the retries: no gap for the receiver to report.
    assert_eq!(b.stats().resyncs, 0);
    let end = Instant::now() + Duration::from_millis(50);
    while Instant::now() < end {
        b.poll(Duration::from_millis(5), |_| {}).unwrap();
        a.poll(Duration::ZERO, |_| {}).unwrap();
    }
    assert_eq!(a.stats().reported_missing, 0, "{:?}", a.stats());
}

#[test]
fn a_source_whose_only_message_never_completes_hears_of_it() {
    let (mut b, dst, raw) = reporting_receiver();
    raw.send_to(&fragment(0, 1200, 0, 600, 600), dst).unwrap();
    let rep = report_until(&mut b, &raw, |_| true).expect("a report");
    assert_eq!((rep.delivered, rep.expired), (0, 1));
}

/// Polls `b` with `timeout` while another thread reads from `raw` the reports it sends,
/// until one that `done` accepts (at most 5 s): that report, and how long after the call it
/// arrived.
fn poll_for_report(
    b: &mut RtSocket,
    raw: &UdpSocket,
    timeout: Duration,
    done: impl Fn(&Report) -> bool + Send + 'static,
) -> (Report, Duration) {
    let t = Instant::now();
    let reader = raw.try_clone().unwrap();
    reader.set_nonblocking(false).unwrap();
    reader
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let got = std::thread::spawn(move || {
        let mut r = [0; 64];
        while let Ok((n, _)) = reader.recv_from(&mut r) {
            let rep = Report::parse(&r[..n]).expect("a report");
            if done(&rep) {
                return Some((rep, t.elapsed()));
            }
        }
        None
    });
    while !got.is_finished() && t.elapsed() < Duration::from_secs(6) {
        b.poll(timeout, |_| {}).unwrap();
    }
    got.join().unwrap().expect("such a report within 5 s")
}

#[test]
fn a_long_poll_waits_in_the_kernel_yet_keeps_deadlines_and_reports() {
    // Without a smoother and with nothing queued, no sending timer runs: a long poll waits
    // in blocking receives, a slice at a time.
    let cfg = RtConfig {
        smoother: None,
        report_interval: Duration::from_millis(2),
        reassembly_timeout: Duration::from_millis(30),
        ..RtConfig::default()
    };
    let mut b = RtSocket::open(lo(), cfg).unwrap();
    let dst = b.local_addr().unwrap();
    let raw = UdpSocket::bind(lo()).unwrap();
    // Nothing arrives: the poll lasts its timeout, no less and not much more.
    let (t, calls) = (Instant::now(), b.stats().datapath.syscalls);
    assert_eq!(b.poll(Duration::from_millis(60), |_| {}).unwrap(), 0);
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(60) && waited < Duration::from_millis(500),
        "{waited:?}"
    );
    // In slices of 4 ms and a kernel tick (at most 10 ms), then `ppoll` for the last
    // 14 ms: one `ppoll` and one `recvmmsg` would mean it never waited in the kernel's
    // receive.
    let calls = b.stats().datapath.syscalls - calls;
    assert!(calls >= 3, "{calls} system calls in a 60 ms poll");
    // Messages sent while it waits end the wait. The first is reported at once (no report
    // was due before it); the second within the report interval after the first.
    let sender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        raw.send_to(&fragment(0, 10, 0, 10, 10), dst).unwrap();
        std::thread::sleep(Duration::from_micros(500));
        raw.send_to(&fragment(1, 10, 0, 10, 10), dst).unwrap();
        raw
    });
    let t = Instant::now();
    let mut got = 0;
    while got < 2 && t.elapsed() < Duration::from_secs(5) {
        got += b
            .poll(Duration::from_secs(2), |m| assert_eq!(m.data.len(), 10))
            .unwrap();
    }
    assert_eq!(got, 2);
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
    let raw = sender.join().unwrap();
    // The second's report, which tells of nothing lost, may leave up to a slice (and a
    // kernel tick) late, not at the end of the poll.
    let (rep, took) = poll_for_report(&mut b, &raw, Duration::from_secs(1), |r| r.delivered == 2);
    assert_eq!(rep.expired, 0);
    assert!(took < Duration::from_millis(600), "{took:?}");
    // An incomplete message is dropped at its deadline and its source told, on time,
    // though the poll would wait longer.
    raw.send_to(&fragment(2, 1200, 0, 600, 600), dst).unwrap();
    let (rep, took) = poll_for_report(&mut b, &raw, Duration::from_secs(1), |r| r.expired > 0);
    assert_eq!((rep.delivered, rep.expired), (2, 1));
    assert!(
        took >= Duration::from_millis(29) && took < Duration::from_millis(600),
        "{took:?}"
    );
    assert_eq!(b.stats().reassembly.expired, 1);
}

#[test]
fn a_spinning_poll_takes_what_comes_and_still_keeps_its_timeout() {
    let cfg = RtConfig {
        smoother: None,
        spin: Duration::from_millis(5),
        ..RtConfig::default()
    };
    let mut b = RtSocket::open(lo(), cfg).unwrap();
    let dst = b.local_addr().unwrap();
    // Nothing comes: it spins, then waits out the rest of its timeout.
    let (t, calls) = (Instant::now(), b.stats().datapath.syscalls);
    assert_eq!(b.poll(Duration::from_millis(30), |_| {}).unwrap(), 0);
    assert!(
        t.elapsed() >= Duration::from_millis(30),
        "{:?}",
        t.elapsed()
    );
    // It looked without waiting, many times, before it slept.
    let calls = b.stats().datapath.syscalls - calls;
    assert!(
        calls >= 10,
        "{calls} system calls in a poll that spins 5 ms"
    );
    // A message sent while it spins, and one sent after the spin, while it sleeps.
    for delay in [Duration::from_millis(1), Duration::from_millis(20)] {
        let raw = UdpSocket::bind(lo()).unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(delay);
            raw.send_to(&fragment(0, 10, 0, 10, 10), dst).unwrap();
        });
        let t = Instant::now();
        let mut got = 0;
        while got == 0 && t.elapsed() < Duration::from_secs(5) {
            got = b
                .poll(Duration::from_secs(2), |m| assert_eq!(m.data.len(), 10))
                .unwrap();
        }
        assert_eq!(got, 1, "sent after {delay:?}");
        assert!(
            t.elapsed() < Duration::from_millis(1500),
            "{:?}",
            t.elapsed()
        );
        sender.join().unwrap();
    }
}

#[test]
fn a_corked_burst_leaves_bundled_and_arrives_whole_in_order() {
    let cfg = RtConfig {
        buffers: 600,
        rt_queue: 600,
        smoother: None,
        ..RtConfig::default()
    };
    let mut a = RtSocket::open(lo(), cfg).unwrap();
    let mut b = RtSocket::open(lo(), cfg).unwrap();
    let mut c = RtSocket::open(lo(), cfg).unwrap();
    let (to_b, to_c) = (b.local_addr().unwrap(), c.local_addr().unwrap());
    let f = a.fragment_len();
    // Every small size, an empty message, one as long as a fragment, one longer (which
    // cannot be bundled and splits the burst), to two destinations in runs.
    let mut plan = Vec::new();
    for i in 0..500usize {
        let len = match i {
            7 => 0,
            100 => f,
            250 => 3 * f + 5,
            _ => (i * 37) % 200,
        };
        let dst = if (i / 50) % 2 == 0 { to_b } else { to_c };
        plan.push((len, dst));
    }
    let sent_before = a.stats().datapath.sent;
    a.cork();
    for (i, &(len, dst)) in plan.iter().enumerate() {
        send(&mut a, dst, len, i as u8, Class::Rt);
    }
    // Held: nothing leaves on a poll while corked.
    a.poll(Duration::ZERO, |_| {}).unwrap();
    assert_eq!(a.stats().datapath.sent, sent_before);
    assert_eq!(a.queued().0, plan.len());
    a.uncork();
    assert_eq!(a.queued().0, 0);
    let datagrams = a.stats().datapath.sent - sent_before;
    assert!(
        datagrams < plan.len() as u64 / 5,
        "{datagrams} datagrams for {} small messages",
        plan.len()
    );
    assert!(a.stats().rt_bundles > 0);
    for (rx, dst) in [(&mut b, to_b), (&mut c, to_c)] {
        let want: Vec<(usize, usize)> = plan
            .iter()
            .enumerate()
            .filter(|(_, p)| p.1 == dst)
            .map(|(i, p)| (i, p.0))
            .collect();
        let mut got = Vec::new();
        let end = Instant::now() + Duration::from_secs(5);
        while got.len() < want.len() && Instant::now() < end {
            rx.poll(Duration::from_millis(5), |m| {
                got.push((m.id, m.data.to_vec()))
            })
            .unwrap();
        }
        assert_eq!(got.len(), want.len(), "messages to {dst}");
        for (k, ((id, data), &(i, len))) in got.iter().zip(&want).enumerate() {
            assert_eq!(*id, k as u32, "numbered in order");
            assert!(
                data.iter().copied().eq(pattern(len, i as u8)),
                "message {i}"
            );
        }
        assert_eq!(rx.stats().reassembly.refused(), 0);
    }
}

#[test]
fn a_corked_queue_that_fills_is_sent_not_refused() {
    let cfg = RtConfig {
        buffers: 64,
        rt_queue: 16,
        smoother: None,
        ..RtConfig::default()
    };
    let mut a = RtSocket::open(lo(), cfg).unwrap();
    let mut b = RtSocket::open(lo(), cfg).unwrap();
    let dst = b.local_addr().unwrap();
    a.cork();
    for i in 0..40 {
        send(&mut a, dst, 64, i, Class::Rt);
    }
    assert!(a.queued().0 < 16);
    assert_eq!(a.stats().rt_refused, 0);
    a.uncork();
    let got = receive_all(&mut b, &mut a, 40);
    assert_eq!(got.len(), 40);
}

#[test]
fn bundles_that_lie_are_counted_and_the_honest_part_delivered() {
    let mut b = RtSocket::open(lo(), RtConfig::default()).unwrap();
    let memory = b.memory();
    let dst = b.local_addr().unwrap();
    let raw = UdpSocket::bind(lo()).unwrap();
    let unit = |id: u32, msg_len: u32, payload: usize, more: bool| {
        let mut d = vec![9; RT_HEADER_LEN + payload];
        RtHeader {
            class: Class::Rt,
            msg_id: id,
            msg_len,
            offset: 0,
            frag_len: 1400,
            sent_us: 0,
            deadline_us: 0,
            more,
        }
        .emit(&mut d)
        .unwrap();
        d
    };
    // One honest message, then one that claims more than the datagram holds (the rest of a
    // datagram is refused as one piece once a length in it lies).
    let mut d = unit(0, 10, 10, true);
    d.extend(unit(1, 5000, 20, true));
    raw.send_to(&d, dst).unwrap();
    // A bundled message longer than a fragment (refused), then an honest one.
    let mut e = unit(2, 1500, 1500, true);
    e.extend(unit(3, 10, 10, false));
    raw.send_to(&e, dst).unwrap();
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(3);
    while b.stats().reassembly.refused() < 2 && Instant::now() < end {
        b.poll(Duration::from_millis(5), |m| got.push(m.id))
            .unwrap();
    }
    assert_eq!(got, [0, 3]);
    assert_eq!(b.stats().reassembly.refused(), 2);
    assert_eq!(b.memory(), memory);
}
