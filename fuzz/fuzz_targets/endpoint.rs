//! Sequences of hostile datagrams and timer advances against a listening endpoint that also
//! carries an established connection with data in flight. Nothing may panic, and the endpoint
//! must never hold more than the one legitimate connection (no state for unauthenticated peers).
//! Half the runs use large payloads, which the listener side receives split (header apart,
//! payload in a buffer it may keep: `Endpoint::handle_data_owned`). Records may also have the
//! listener's reader take whole pages out and give them back to the endpoint, or give it a
//! page of any length (`Endpoint::give_page`), for the next payloads to be written into, or
//! have the listener send only its control packets, as one held by a smoother does
//! (`Endpoint::poll_transmit_control`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipstream_proto::conn::{ConnConfig, Mode, StreamRead};
use slipstream_proto::sim::{LinkConfig, Pair};
use std::time::Duration;

fuzz_target!(|input: &[u8]| {
    let mut p = Pair::new(7, LinkConfig::default(), LinkConfig::default());
    let mode = match input.first().copied().unwrap_or(0) % 3 {
        0 => Mode::File,
        1 => Mode::Message,
        _ => Mode::Live,
    };
    let mut cfg = ConnConfig::new(mode);
    // Small buffers keep each run cheap; the logic is the same at any size.
    cfg.set_initial_window(32).set_buffer_cap(64 << 10);
    // Large payloads: the listener side receives them split, its buffers swapped in whole.
    if input.first().is_some_and(|b| b & 4 != 0) {
        cfg.set_mss(20_000);
        p.b_owned = true;
    }
    p.b.listen(Some(cfg.clone()));
    let (now, b) = (p.now, p.b_addr);
    let ca = p.a.connect(now, b, cfg).expect("connect");
    p.run_until(Duration::from_millis(50), |_| false);
    if let Some(c) = p.a.conn(ca) {
        let _ = match mode {
            Mode::File => c.send(p.now, &[7u8; 20_000]).map(|_| ()),
            _ => c.send_message(p.now, &[7u8; 5_000]),
        };
    }
    // The rest: records of [kind, len, bytes...]. Kind picks the source address and whether to
    // advance time; datagrams go to the listener side, which holds the accepted connection.
    let (a_addr, intruder) = (p.a_addr, p.intruder);
    let mut rest = input.get(1..).unwrap_or(&[]);
    while rest.len() >= 2 {
        let (kind, len) = (rest[0], rest[1] as usize * 8);
        let body = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[(2 + len).min(rest.len())..];
        let from = if kind & 1 == 0 { a_addr } else { intruder };
        p.inject_b(from, body);
        if kind & 2 != 0 {
            p.step(Duration::from_millis(u64::from(kind >> 2)));
        }
        // A reader: pages taken out and given back to the endpoint, and a page of a length
        // of the input's choosing.
        if kind & 0x40 != 0 {
            let now = p.now;
            let mut pages = Vec::new();
            let ids: Vec<_> = p.b.ids().collect();
            for &id in &ids {
                if let Some(c) = p.b.conn(id) {
                    let mut buf = [0u8; 512];
                    while let Ok(StreamRead::Page(page, _)) = c.recv_page(&mut buf, &mut None) {
                        pages.push((id, page));
                    }
                }
            }
            if let Some(&id) = ids.first() {
                pages.push((id, vec![0u8; body.len() * 97]));
            }
            for (id, page) in pages {
                p.b.give_page(now, id, page);
            }
        }
        // A sender held by a smoother: only control packets leave (and are lost here).
        if kind & 0x80 != 0 {
            let now = p.now;
            let mut buf = [0u8; 1500];
            for _ in 0..64 {
                if p.b.poll_transmit_control(now, &mut buf).is_none() {
                    break;
                }
            }
        }
    }
    p.run_until(Duration::from_millis(100), |_| false);
    assert!(p.b.len() <= 1, "listener holds {} connections", p.b.len());
});
