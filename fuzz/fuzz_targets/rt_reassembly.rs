//! Real-time datagrams from arbitrary bytes into a small reassembler: each datagram is a
//! length byte, a source byte, a time step byte and that many bytes, split into its units
//! (bundled messages). Nothing may panic, the units cover the datagram exactly, memory stays
//! what construction took, a header that parses emits back to the same bytes, and every unit
//! ends counted exactly once.

#![no_main]

use libfuzzer_sys::fuzz_target;
use slipstream_proto::rt::header::{units, RtHeader, RT_HEADER_LEN};
use slipstream_proto::rt::reassembly::{Outcome, Reassembler, ReassemblyConfig};
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let mut r = Reassembler::new(ReassemblyConfig {
        slots: 4,
        max_msg_len: 4096,
        min_frag_len: 64,
        timeout: Duration::from_millis(5),
        max_timeout: Duration::from_millis(20),
    });
    let memory = r.memory();
    let mut now = Instant::now();
    let mut rest = data;
    let mut units_seen = 0u64;
    let mut out = [0u8; RT_HEADER_LEN];
    while let [len, src, step, tail @ ..] = rest {
        let len = usize::from(*len).min(tail.len());
        let (d, next) = tail.split_at(len);
        rest = next;
        now += Duration::from_micros(u64::from(*step) * 100);
        let mut covered = 0;
        for u in units(d) {
            covered += u.len();
            if let Ok((h, _)) = RtHeader::parse(u) {
                h.emit(&mut out).expect("room for a header");
                assert_eq!(&out[..], &u[..RT_HEADER_LEN]);
            }
            units_seen += 1;
            if let Ok(Outcome::Complete(slot)) = r.insert(now, u64::from(*src % 3), u) {
                let (h, _, bytes) = r.message(slot).expect("a complete slot");
                assert_eq!(bytes.len(), h.msg_len as usize);
                r.release(slot);
            }
            assert_eq!(r.memory(), memory);
            // Counted and scanned agree (a debug assertion in `pending`); nothing is
            // being filled without a time to expire.
            assert_eq!(r.pending() == 0, r.next_expiry().is_none());
        }
        assert_eq!(covered, d.len());
    }
    let st = r.stats();
    assert_eq!(st.whole + st.accepted + st.refused(), units_seen);
});
