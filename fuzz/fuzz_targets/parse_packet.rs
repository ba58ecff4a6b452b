//! Parses arbitrary bytes as an SRT datagram; control packets are emitted again and re-parsed.
//! Nothing may panic, and a handshake must survive emit + parse unchanged.

#![no_main]

use libfuzzer_sys::fuzz_target;
use slipstream_proto::wire::{ControlBody, Packet};

fuzz_target!(|data: &[u8]| {
    let Ok(Packet::Control(c)) = Packet::parse(data) else {
        return;
    };
    let mut out = vec![0u8; data.len() + 64];
    let Some(n) = c.emit(&mut out) else {
        return;
    };
    let again = Packet::parse(&out[..n]).expect("an emitted control packet parses");
    if let (ControlBody::Handshake(a), Packet::Control(c2)) = (&c.body, &again) {
        let ControlBody::Handshake(b) = &c2.body else {
            panic!("handshake re-parsed as {:?}", c2.body);
        };
        // Parse-only extensions (KMREQ/KMRSP, filter, group, unknown) are not re-emitted.
        let mut expect = a.clone();
        expect.ext.kmreq = false;
        expect.ext.kmrsp = false;
        expect.ext.filter = false;
        expect.ext.group = false;
        expect.ext.unknown = 0;
        assert_eq!(&expect, b);
        assert_eq!((c.timestamp, c.dst_socket), (c2.timestamp, c2.dst_socket));
    }
});
