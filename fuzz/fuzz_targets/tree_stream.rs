//! The directory tree framing a peer sends inside the byte stream: the manifest a receiver
//! parses, the plan a sender parses, the file starts and the end. None may panic; every path
//! a manifest yields passes the path check (nothing absolute, no `..`); a plan never claims
//! more bytes than it was given and re-encodes to exactly them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipstream_proto::wire::tree::{check_path, parse_manifest, Next, Plan, PlanParse};

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = parse_manifest(data) {
        let mut again = Vec::new();
        for e in &entries {
            assert!(check_path(&e.path).is_ok());
            e.encode(&mut again);
        }
        assert!(again.len() <= data.len());
    }
    match Plan::parse(data) {
        PlanParse::Done(p, n) => {
            assert!(n <= data.len());
            assert_eq!(p.encode(), &data[..n]);
        }
        PlanParse::Need(n) => assert!(n > data.len()),
        PlanParse::Malformed(_) => {}
    }
    if let Some((_, n)) = Next::parse(data) {
        assert!(n <= data.len());
    }
});
