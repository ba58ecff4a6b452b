//! One traffic smoother for a process: an SRT endpoint that answers to it sends no faster
//! than its credit, still moves a file byte-exact, and shares the credit with a real-time
//! socket whose receiver's loss reports slow them both.

use slipstream::datapath::Impairment;
use slipstream::rt::{Class, HostSmoother, RtConfig, RtSocket, SmootherConfig};
use slipstream::transfer::{self, Verdict};
use slipstream::{ConnConfig, Endpoint, EndpointOptions, Mode};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

fn lo() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// A smoother of `depth` credits every `rp`, the period fixed unless `adapt`.
fn smoother(depth: u32, rp: Duration, adapt: bool) -> HostSmoother {
    HostSmoother::new(SmootherConfig {
        depth,
        rp0: rp,
        rp_min: rp,
        rp_max: if adapt { rp * 64 } else { rp },
        ..SmootherConfig::default()
    })
}

/// Moves `len` bytes from an endpoint with `opts` to one without a smoother; the time taken
/// and the datagrams the sender's simulated link lost.
fn transfer_with(opts: EndpointOptions, len: usize) -> (Duration, u64) {
    let server_ep = Endpoint::bind(lo(), EndpointOptions::default()).unwrap();
    let mut c = ConnConfig::new(Mode::File);
    c.set_file_digest(true);
    server_ep.listen(c.clone()).unwrap();
    let client_ep = Endpoint::bind(lo(), opts).unwrap();
    let client = client_ep.connect(server_ep.local_addr(), c).unwrap();
    let server = server_ep.accept_timeout(Duration::from_secs(5)).unwrap();
    let payload: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let mut got = Vec::new();
            let v = transfer::recv_stream(&server, &mut got, |_| {}).unwrap();
            (v, got)
        });
        transfer::send_stream(&client, &payload[..], |_| {}).unwrap();
        let (v, got) = rx.join().unwrap();
        assert!(got == payload, "received bytes differ");
        assert!(matches!(v, Verdict::Verified { .. }), "{v:?}");
    });
    (start.elapsed(), client_ep.datapath_stats().impaired_lost)
}

#[test]
fn an_endpoint_answering_to_the_host_smoother_sends_no_faster_than_its_credit() {
    // 4 credits every 20 ms: 200 datagrams a second. 4 MiB over loopback is about 70
    // datagrams of 64 KiB with the control packets: at least a third of a second.
    let host = smoother(4, Duration::from_millis(20), false);
    let mut opts = EndpointOptions::default();
    opts.set_smoother(Some(host.clone()));
    let (took, _) = transfer_with(opts, 4 << 20);
    let (st, _, _) = host.stats();
    assert!(st.nrt >= 64, "{st:?}");
    assert!(st.nrt_held > 0, "never held: {st:?}");
    let floor = Duration::from_millis(20) * ((st.nrt as u32 - 4) / 4);
    assert!(
        took >= floor.mul_f64(0.9),
        "{} datagrams in {took:?}: faster than the credit allows ({floor:?})",
        st.nrt
    );
    // The same without the smoother is far quicker (the comparison shows the gate is what
    // took the time).
    let (free, _) = transfer_with(EndpointOptions::default(), 4 << 20);
    assert!(free < took, "without {free:?}, with {took:?}");
}

#[test]
fn real_time_datagrams_take_the_shared_credit_and_their_losses_lengthen_its_period() {
    let rp = Duration::from_millis(10);
    let host = smoother(8, rp, true);
    let mut tx = RtSocket::open_with_smoother(lo(), RtConfig::default(), &host).unwrap();
    let mut rx = RtSocket::open(lo(), RtConfig::default()).unwrap();
    let dst = rx.local_addr().unwrap();
    // Messages meant to leave a millisecond ago with a deadline of 100 µs: each arrives
    // late, which the receiver reports and which counts as loss (`RtConfig::late_is_loss`).
    for _ in 0..20 {
        let buf = tx.claim().unwrap();
        let intended = Instant::now() - Duration::from_millis(1);
        let deadline = Some(Duration::from_micros(100));
        tx.send_at(buf, 100, dst, Class::Rt, deadline, intended)
            .unwrap();
    }
    // Real-time datagrams never wait, and took their credit from the shared bucket, so
    // anything else answering to it (an SRT endpoint) is held until refreshes repay it.
    let (st, period, credits) = host.stats();
    assert_eq!(st.rt, 20, "{st:?}");
    assert!(credits < 0, "credits {credits}");
    assert_eq!(period, rp);
    assert!(!host.nrt_ready(Instant::now()));
    let end = Instant::now() + Duration::from_secs(3);
    let mut got = 0;
    while (got < 20 || tx.stats().reports_taken == 0 || host.stats().1 == rp)
        && Instant::now() < end
    {
        got += rx
            .poll(Duration::from_millis(2), |m| assert!(m.late))
            .unwrap();
        tx.poll(Duration::from_millis(2), |_| {}).unwrap();
    }
    assert_eq!(got, 20);
    assert!(tx.stats().reported_late > 0, "{:?}", tx.stats());
    // The receiver's report of loss lengthened the period of the process's smoother.
    assert!(host.stats().1 > rp, "period {:?}", host.stats().1);
}

#[test]
fn with_the_links_rate_an_endpoint_hands_the_kernel_no_more_than_the_link_drains() {
    // Credit is plentiful (10,000 a millisecond); the link below, 200 Mbit/s with at most
    // two full datagrams waiting, is what holds the endpoint back. 4 MiB then needs at least
    // 4 MiB × 8 / 200 Mbit/s = 168 ms whatever the loopback's own speed.
    let cfg = SmootherConfig {
        depth: 10_000,
        rp0: Duration::from_millis(1),
        rp_min: Duration::from_millis(1),
        rp_max: Duration::from_millis(1),
        ..SmootherConfig::default()
    };
    let rate = 200_000_000;
    let host = HostSmoother::with_link(cfg, rate, 2);
    let mut opts = EndpointOptions::default();
    opts.set_smoother(Some(host.clone()));
    let len = 4 << 20;
    let (took, _) = transfer_with(opts, len);
    let floor = Duration::from_secs_f64(len as f64 * 8.0 / rate as f64);
    assert!(
        took >= floor,
        "{len} bytes in {took:?}, under the link's {floor:?}"
    );
    let (st, _, _) = host.stats();
    assert!(st.nrt_held > 0, "{st:?}");
}

#[test]
fn a_held_endpoint_still_recovers_losses_and_finishes_verified() {
    // 5 % loss on the sender's side (16 MiB is about 260 datagrams over loopback: some are
    // lost in all but one run in 10^5), and a smoother that holds it to 400 datagrams a
    // second: data and retransmissions wait for credit (control packets take theirs into
    // debt), and the transfer still ends byte-exact and verified (the receiver has no
    // smoother).
    let host = smoother(8, Duration::from_millis(20), false);
    let mut opts = EndpointOptions::default();
    opts.set_smoother(Some(host.clone()))
        .set_impairment(Some(Impairment::new(0.05, Duration::from_millis(5))));
    let (_, lost) = transfer_with(opts, 16 << 20);
    assert!(lost > 0, "the link lost nothing");
    let (st, _, _) = host.stats();
    assert!(st.nrt_held > 0 && st.nrt >= 256, "{st:?}");
}

#[test]
fn a_connection_closed_while_held_still_tells_its_peer() {
    // One credit every 300 ms, spent by the handshake and the first data: the shutdown
    // packet of a close waits for credit, and must still go before the connection is
    // forgotten, so the peer learns of the close, not of silence (its idle timeout is 5 s).
    let host = smoother(1, Duration::from_millis(300), false);
    let server_ep = Endpoint::bind(lo(), EndpointOptions::default()).unwrap();
    server_ep.listen(ConnConfig::new(Mode::Message)).unwrap();
    let mut opts = EndpointOptions::default();
    opts.set_smoother(Some(host.clone()));
    let client_ep = Endpoint::bind(lo(), opts).unwrap();
    let client = client_ep
        .connect(server_ep.local_addr(), ConnConfig::new(Mode::Message))
        .unwrap();
    let server = server_ep.accept_timeout(Duration::from_secs(10)).unwrap();
    client.send_message(b"last words").unwrap();
    let mut buf = [0u8; 64];
    let n = server
        .recv_message_timeout(&mut buf, Duration::from_secs(10))
        .unwrap();
    assert_eq!(&buf[..n], b"last words");
    let start = Instant::now();
    client.close().unwrap();
    drop(client);
    // The peer sees the shutdown (the end of its messages, or an error other than its idle
    // timeout), well before its idle timeout of 5 s.
    let r = server.recv_message_timeout(&mut buf, Duration::from_secs(8));
    let took = start.elapsed();
    let closed = match &r {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::TimedOut,
    };
    assert!(
        closed && took < Duration::from_secs(4),
        "the peer learnt of the close as {r:?} after {took:?}"
    );
}

#[test]
fn an_endpoint_without_credit_still_connects_and_keeps_its_connection_alive() {
    // A bucket that starts empty and never refills: no data may go, ever. The handshake,
    // acknowledgements and keepalives are control packets, which go without credit (into
    // debt), so the connection is made and lives on past both ends' idle timeout of 2 s;
    // without that the handshake itself could not leave.
    let hour = Duration::from_secs(3600);
    let host = HostSmoother::new(SmootherConfig {
        depth: 4,
        rp0: hour,
        rp_min: hour,
        rp_max: hour,
        cautious_start: true,
        ..SmootherConfig::default()
    });
    let mut cfg = ConnConfig::new(Mode::Message);
    cfg.set_peer_idle_timeout(Duration::from_secs(2));
    let server_ep = Endpoint::bind(lo(), EndpointOptions::default()).unwrap();
    server_ep.listen(cfg.clone()).unwrap();
    let mut opts = EndpointOptions::default();
    opts.set_smoother(Some(host.clone()));
    let client_ep = Endpoint::bind(lo(), opts).unwrap();
    let client = client_ep.connect(server_ep.local_addr(), cfg).unwrap();
    let server = server_ep.accept_timeout(Duration::from_secs(5)).unwrap();
    client.send_message(b"held").unwrap();
    let mut buf = [0u8; 16];
    let r = server.recv_message_timeout(&mut buf, Duration::from_secs(5));
    assert!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::TimedOut),
        "a message went without credit: {r:?}"
    );
    for c in [&client, &server] {
        assert_eq!(
            c.state().unwrap(),
            slipstream::proto::conn::State::Connected
        );
    }
    let (st, _, credits) = host.stats();
    assert!(st.nrt >= 4 && st.nrt_held > 0, "{st:?}");
    assert!(credits < 0, "control packets took their credit: {credits}");
    assert_eq!(client.stats().unwrap().pkts_sent, 0, "no data packet left");
}
