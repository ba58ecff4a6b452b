mod common;
use common::*;
use slipstream_proto::sim::Pair;
use std::time::Duration;

#[test]
#[ignore]
fn trace() {
    let s = seed(2);
    let env = |k: &str, d: f64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (delay, loss, rate, secs, win) = (
        env("D", 20.0) as u64,
        env("L", 0.05),
        env("R", 100e6) as u64,
        env("S", 3.0),
        env("W", 8192.0) as u32,
    );
    let rate = if rate == 0 { None } else { Some(rate) };
    let mut p = Pair::new(s, path(delay, loss, rate), path(delay, loss, None));
    let mut cfg = file_cfg();
    cfg.set_initial_window(win);
    if let Ok(cc) = std::env::var("CC") {
        cfg.set_cc(&cc);
    }
    let (ca, cb) = connect(&mut p, cfg);
    let data = content(50_000_000, s);
    let mut sent = 0;
    let mut buf = vec![0u8; 1 << 20];
    let mut next = p.now;
    let every = Duration::from_millis(env("E", 100.0) as u64);
    p.run_until(Duration::from_secs_f64(secs), |p| {
        let now = p.now;
        let c = p.a.conn(ca).unwrap();
        if sent >= data.len() { sent = 0; }
        while sent < data.len() { match c.send(now, &data[sent..]) { Ok(n) => sent += n, Err(_) => break } }
        if now >= next {
            let st = c.stats(now);
            eprintln!("t={:?} sent={} retx={} loss={} tmo={} period={:.1} cwnd={:.1} rtt={:.1} inflight={} sbuf={}/{} recvrate={} bw={} win={} acked={}MB", p.elapsed(), st.pkts_sent, st.pkts_retransmitted, st.pkts_snd_loss, st.timeouts, st.send_period_us, st.cwnd_pkts, st.rtt_ms, st.pkts_in_flight, st.snd_buf_pkts, st.snd_buf_cap_pkts, st.recv_rate_pps, st.est_link_capacity_pps, st.flow_window_pkts, st.bytes_acked >> 20);
            next = now + every;
        }
        let c = p.b.conn(cb).unwrap();
        while let Ok(n) = c.recv(&mut buf) { if n == 0 { break } }
        false
    });
}
