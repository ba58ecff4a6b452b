mod common;
use common::*;
use slipstream_proto::sim::Pair;
use std::time::Duration;

#[test]
#[ignore]
fn trace() {
    let s = seed(2);
    let mut p = Pair::new(s, path(20, 0.05, Some(100_000_000)), path(20, 0.05, None));
    let (ca, cb) = connect(&mut p, file_cfg());
    let data = content(5_000_000, s);
    let mut sent = 0;
    let mut buf = vec![0u8; 65536];
    let mut next = p.now;
    p.run_until(Duration::from_secs(3), |p| {
        let now = p.now;
        let c = p.a.conn(ca).unwrap();
        while sent < data.len() { match c.send(now, &data[sent..]) { Ok(n) => sent += n, Err(_) => break } }
        if now >= next {
            let st = c.stats(now);
            eprintln!("t={:?} sent={} retx={} loss={} period={:.1} cwnd={:.1} rtt={:.1} inflight={} recvrate={} bw={} win={}", p.elapsed(), st.pkts_sent, st.pkts_retransmitted, st.pkts_snd_loss, st.send_period_us, st.cwnd_pkts, st.rtt_ms, st.pkts_in_flight, st.recv_rate_pps, st.est_link_capacity_pps, st.flow_window_pkts);
            next = now + Duration::from_millis(100);
        }
        let c = p.b.conn(cb).unwrap();
        while let Ok(n) = c.recv(&mut buf) { if n == 0 { break } }
        false
    });
}
