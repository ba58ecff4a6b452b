//! The file transfer framing a peer sends inside the byte stream: the header a receiver
//! reads first and the verdict a sender reads last. Neither may panic, and a verdict never
//! claims more bytes than it was given nor a reason longer than the bound.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipstream_proto::wire::file::{
    FileHeader, Verdict, VerdictParse, FILE_HEADER_LEN, MAX_REASON, VERDICT_HEAD_LEN,
};

fuzz_target!(|data: &[u8]| {
    if let Some(h) = data.get(..FILE_HEADER_LEN) {
        let h: &[u8; FILE_HEADER_LEN] = h.try_into().unwrap();
        if let Some(p) = FileHeader::parse(h) {
            assert_eq!(&p.encode(), h);
        }
    }
    match Verdict::parse(data) {
        VerdictParse::Done(v, n) => {
            assert!(n <= data.len() && n <= VERDICT_HEAD_LEN + MAX_REASON);
            if let Verdict::Failed(r) = v {
                assert!(!r.chars().any(char::is_control));
            }
        }
        VerdictParse::Need(n) => assert!(n > data.len()),
        VerdictParse::Malformed(_) => {}
    }
});
