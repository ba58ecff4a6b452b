//! Loss reports from arbitrary bytes: nothing panics, a report that parses emits back to the
//! same bytes and never parses as a fragment, and comparing any two never panics.

#![no_main]

use libfuzzer_sys::fuzz_target;
use slipstream_proto::rt::header::RtHeader;
use slipstream_proto::rt::report::{Report, REPORT_LEN};

fuzz_target!(|data: &[u8]| {
    let (a, b) = data.split_at(data.len().min(REPORT_LEN));
    let mut parsed = Vec::new();
    for d in [a, b] {
        if let Ok(r) = Report::parse(d) {
            let mut out = [0u8; REPORT_LEN];
            r.emit(&mut out);
            assert_eq!(&out[..], d);
            assert!(RtHeader::parse(d).is_err());
            parsed.push(r);
        }
    }
    if let [x, y] = parsed[..] {
        let _ = x.since(&y);
        let _ = y.since(&x);
    }
});
