//! Reliable stream transfers over the simulated network, in virtual time.

mod common;
use common::*;
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
