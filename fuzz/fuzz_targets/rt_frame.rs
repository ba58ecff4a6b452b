//! Received frames from arbitrary bytes: nothing panics, a frame that parses has its payload
//! inside the bytes, and its headers written again carry the same addresses, class and
//! length and parse back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use slipstream_proto::rt::frame::{Frame, HEADERS_LEN};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = Frame::parse(data) else { return };
    let payload = &data[HEADERS_LEN..HEADERS_LEN + f.payload_len];
    let mut out = vec![0u8; HEADERS_LEN + payload.len()];
    let n = f.emit(&mut out, &[payload]).expect("a parsed frame fits");
    assert_eq!(n, out.len());
    out[HEADERS_LEN..].copy_from_slice(payload);
    let g = Frame::parse(&out).expect("written headers parse");
    assert_eq!((g.src, g.dst, g.src_mac, g.dst_mac, g.tos), (f.src, f.dst, f.src_mac, f.dst_mac, f.tos));
    assert_eq!(g.payload_len, f.payload_len);
});
