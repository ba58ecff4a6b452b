//! End-to-end tests of the blocking API over loopback.

use slipstream::datapath::Impairment;
use slipstream::transfer::{self, Verdict};
use slipstream::{
    ConnConfig, Connection, Endpoint, EndpointOptions, Mode, SharedBytes, StreamRead,
};
use slipstream_proto::wire::file::{FileHeader, Start, FILE_HEADER_LEN, START_LEN};
use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Deterministic test data.
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn cfg(mode: Mode) -> ConnConfig {
    let mut c = ConnConfig::new(mode);
    c.set_file_digest(true);
    c
}

/// A listener and a connected caller pair.
struct Pair {
    // Connections drop before their endpoints.
    client: Connection,
    server: Connection,
    client_ep: Endpoint,
    server_ep: Endpoint,
}

fn pair(mode: Mode, opts: EndpointOptions) -> Pair {
    pair_with(mode, opts, |_| {})
}

/// [`pair`] with both ends' configuration adjusted by `adjust`.
fn pair_with(mode: Mode, opts: EndpointOptions, adjust: impl Fn(&mut ConnConfig)) -> Pair {
    let server_ep = Endpoint::bind(loopback(), opts.clone()).unwrap();
    let mut s = cfg(mode);
    adjust(&mut s);
    server_ep.listen(s).unwrap();
    let client_ep = Endpoint::bind(loopback(), opts).unwrap();
    let mut c = cfg(mode);
    adjust(&mut c);
    c.set_stream_id(Some(b"test-stream".to_vec()));
    let client = client_ep.connect(server_ep.local_addr(), c).unwrap();
    let server = server_ep.accept_timeout(Duration::from_secs(5)).unwrap();
    Pair {
        client,
        server,
        client_ep,
        server_ep,
    }
}

/// Sends `payload` through the pair with the digest trailer and checks the verdict.
fn transfer_verified(p: &Pair, payload: &[u8]) {
    assert!(p.client.digest_agreed() && p.server.digest_agreed());
    assert_eq!(p.server.stream_id(), Some(&b"test-stream"[..]));
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let mut got = Vec::new();
            let v = transfer::recv_stream(&p.server, &mut got, |_| {}).unwrap();
            (v, got)
        });
        let sent = transfer::send_stream(&p.client, payload, |_| {}).unwrap();
        assert!(sent.digest_sent);
        let (v, got) = rx.join().unwrap();
        assert_eq!(got.len(), payload.len());
        assert!(got == payload, "received bytes differ");
        assert_eq!(
            v,
            Verdict::Verified {
                bytes: payload.len() as u64,
                digest: transfer::digest(payload),
                resumed_from: 0,
            }
        );
    });
}

#[test]
fn file_mode_transfer_is_verified() {
    let p = pair(Mode::File, EndpointOptions::default());
    let payload = data(4 << 20, 1);
    transfer_verified(&p, &payload);
    let s = p.client.stats().unwrap();
    assert_eq!(
        s.bytes_acked,
        // The file header (an unknown length: send_stream reads to the end), the start and
        // the trailer.
        payload.len() as u64 + (FILE_HEADER_LEN + START_LEN + transfer::TRAILER_LEN) as u64
    );
}

#[test]
fn transfer_through_two_percent_loss() {
    let mut opts = EndpointOptions::default();
    opts.set_impairment(Some(Impairment::new(0.02, Duration::from_millis(5))));
    let p = pair(Mode::File, opts);
    // Loopback's path MTU gives 64 KiB datagrams: 8 MiB is ~130 of them, enough for 2% loss
    // to hit several.
    let payload = data(8 << 20, 2);
    transfer_verified(&p, &payload);
    let s = p.client.stats().unwrap();
    let dp = p.client_ep.datapath_stats();
    assert!(dp.impaired_lost > 0, "the link dropped nothing: {dp:?}");
    assert!(s.pkts_retransmitted > 0, "{s:?}");
}

#[test]
fn message_mode_round_trip() {
    let p = pair(Mode::Message, EndpointOptions::default());
    let sizes = [1usize, 1456, 100_000, 1 << 20, 1];
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let mut buf = vec![0u8; 2 << 20];
            let mut got = Vec::new();
            loop {
                let n = p.server.recv_message(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                got.push(buf[..n].to_vec());
            }
            got
        });
        for (i, &n) in sizes.iter().enumerate() {
            p.client.send_message(&data(n, i as u64 + 10)).unwrap();
        }
        p.client.close().unwrap();
        let got = rx.join().unwrap();
        assert_eq!(got.len(), sizes.len());
        for (i, (m, &n)) in got.iter().zip(&sizes).enumerate() {
            assert!(
                *m == data(n, i as u64 + 10),
                "message {i} of {n} bytes differs"
            );
        }
    });
    // A too-small buffer is an error that names the size needed, not a truncation.
    let q = pair(Mode::Message, EndpointOptions::default());
    q.client.send_message(&data(3000, 5)).unwrap();
    let mut small = [0u8; 100];
    let e = q.server.recv_message(&mut small).unwrap_err();
    assert!(e.to_string().contains("3000"), "{e}");
}

#[test]
fn live_mode_delivers_in_order() {
    let p = pair(Mode::Live, EndpointOptions::default());
    let count = 200u32;
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let mut buf = [0u8; 1500];
            let mut got = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(8);
            while got.len() < count as usize && Instant::now() < deadline {
                match p
                    .server
                    .recv_message_timeout(&mut buf, Duration::from_millis(500))
                {
                    Ok(0) => break,
                    Ok(n) => {
                        assert_eq!(n, 1316);
                        let i = u32::from_be_bytes(buf[..4].try_into().unwrap());
                        assert!(buf[4..n].iter().all(|&b| b == i as u8));
                        got.push(i);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                    Err(e) => panic!("{e}"),
                }
            }
            got
        });
        let mut msg = [0u8; 1316];
        for i in 0..count {
            msg[..4].copy_from_slice(&i.to_be_bytes());
            msg[4..].fill(i as u8);
            p.client.send_message(&msg).unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
        let got = rx.join().unwrap();
        assert!(got.windows(2).all(|w| w[0] < w[1]), "out of order");
        assert!(
            got.len() >= count as usize * 95 / 100,
            "only {} of {count} live messages arrived: {:?}",
            got.len(),
            p.server.stats()
        );
    });
}

#[test]
fn aborted_sender_is_not_a_complete_file() {
    let p = pair(Mode::File, EndpointOptions::default());
    let dir = std::env::temp_dir().join(format!("slipstream-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("out.bin");
    std::thread::scope(|s| {
        let rx = s.spawn(|| transfer::recv_file(&p.server, &out, false, |_| {}));
        let payload = data(1 << 20, 3);
        let mut off = 0;
        while off < payload.len() / 2 {
            off += p.client.send(&payload[off..payload.len() / 2]).unwrap();
        }
        std::thread::sleep(Duration::from_millis(200));
        p.client.abort();
        let r = rx.join().unwrap();
        assert!(r.is_err(), "truncated stream accepted: {r:?}");
    });
    assert!(!out.exists(), "a truncated file was left as the output");
    assert!(!transfer::part_path(&out).exists(), ".part left behind");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A sender that starts anywhere but at the end of a chunk the receiver offered is refused,
/// and the part file the receiver held is left as it was.
#[test]
fn a_start_the_receiver_did_not_offer_is_refused() {
    let dir = std::env::temp_dir().join(format!("slipstream-start-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("out.bin");
    let held = data(100_000, 9);
    std::fs::write(transfer::part_path(&out), &held).unwrap();
    for offset in [8 << 20, 1, 50_000] {
        let p = pair(Mode::File, EndpointOptions::default());
        std::thread::scope(|s| {
            let rx = s.spawn(|| transfer::recv_file(&p.server, &out, false, |_| {}));
            let mut stream = FileHeader { len: 16 << 20 }.encode().to_vec();
            stream.extend_from_slice(&Start { offset }.encode());
            stream.extend_from_slice(&data(70_000, 10));
            let mut sent = 0;
            while sent < stream.len() {
                sent += p.client.send(&stream[sent..]).unwrap();
            }
            let e = rx.join().unwrap().unwrap_err();
            assert!(e.to_string().contains("offered"), "{e}");
        });
        assert!(!out.exists());
        assert_eq!(std::fs::read(transfer::part_path(&out)).unwrap(), held);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn garbage_datagrams_do_not_disturb_a_transfer() {
    let p = pair(Mode::File, EndpointOptions::default());
    let target = p.server_ep.local_addr();
    let payload = data(2 << 20, 4);
    std::thread::scope(|s| {
        let blaster = s.spawn(|| {
            let sock = UdpSocket::bind(loopback()).unwrap();
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let mut buf = [0u8; 2000];
            for i in 0..20_000u32 {
                let len = (next() % 2000) as usize;
                for b in buf[..len].iter_mut() {
                    *b = next() as u8;
                }
                if i % 3 == 0 && len >= 16 {
                    // A plausible SRT header (data or control) to a random socket id.
                    let first: u32 = if i % 2 == 0 { 0x8002_0000 } else { i };
                    buf[..4].copy_from_slice(&first.to_be_bytes());
                    buf[12..16].copy_from_slice(&(next() as u32 | 1).to_be_bytes());
                }
                let _ = sock.send_to(&buf[..len], target);
                if i % 256 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        transfer_verified(&p, &payload);
        blaster.join().unwrap();
    });
    let st = p.server_ep.stats();
    assert!(st.malformed > 0, "{st:?}");
    assert!(st.unknown_socket > 0, "{st:?}");
}

#[test]
fn connect_errors_are_precise() {
    // Nobody listens: a timeout, reported as such.
    let silent = UdpSocket::bind(loopback()).unwrap();
    let ep = Endpoint::bind(loopback(), EndpointOptions::default()).unwrap();
    let mut c = ConnConfig::new(Mode::File);
    c.set_connect_timeout(Duration::from_millis(600));
    let e = ep.connect(silent.local_addr().unwrap(), c).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");

    // Mode mismatch: rejected with the listener's reason.
    let server = Endpoint::bind(loopback(), EndpointOptions::default()).unwrap();
    server.listen(ConnConfig::new(Mode::Live)).unwrap();
    let e = ep
        .connect(server.local_addr(), ConnConfig::new(Mode::File))
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    assert!(e.to_string().contains("rejected"), "{e}");

    // Unknown congestion control names the available ones.
    let mut c = ConnConfig::new(Mode::File);
    c.set_cc("nope");
    let e = ep.connect(server.local_addr(), c).unwrap_err();
    assert!(e.to_string().contains("file"), "{e}");
}

#[test]
fn read_impl_sees_clean_end() {
    let p = pair(Mode::File, EndpointOptions::default());
    let payload = data(100_000, 6);
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let mut server = &p.server;
            let mut got = Vec::new();
            std::io::copy(&mut ReadRef(&mut server), &mut got).unwrap();
            got
        });
        let mut off = 0;
        while off < payload.len() {
            off += p.client.send(&payload[off..]).unwrap();
        }
        p.client.close().unwrap();
        assert!(rx.join().unwrap() == payload);
    });
}

/// `Read` through a shared reference (the API's `recv` takes `&self`).
struct ReadRef<'a, 'b>(&'a mut &'b Connection);
impl Read for ReadRef<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.recv(buf)
    }
}

/// Chunks: handed over without a copy, refused clearly when they cannot be queued, and
/// recycled once acknowledged (a 6 MiB stream of 1 MiB chunks, the last third sent after
/// the first two were acknowledged, gets back chunks that still hold what they carried).
#[test]
fn chunks_are_sent_in_place_and_recycled() {
    let p = pair(Mode::File, EndpointOptions::default());
    let empty = p.client.take_chunk().unwrap();
    assert!(!empty.is_empty());
    let e = p.client.send_chunk(empty, 0).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    let e = p.client.send_chunk(vec![0; 10], 11).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    let payload = data(6 << 20, 7);
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            // Raw bytes (no trailer is sent here).
            let (mut got, mut buf) = (Vec::new(), vec![0u8; 1 << 16]);
            loop {
                match p.server.recv(&mut buf).unwrap() {
                    0 => return got,
                    n => got.extend_from_slice(&buf[..n]),
                }
            }
        });
        let (mut sent, mut reused) = (0, 0);
        while sent < payload.len() {
            let mut c = p.client.take_chunk().unwrap();
            // A new chunk is zeroed; a recycled one still holds what it carried.
            reused += usize::from(c.iter().any(|&b| b != 0));
            let n = c.len().min(payload.len() - sent);
            c[..n].copy_from_slice(&payload[sent..sent + n]);
            p.client.send_chunk(c, n).unwrap();
            sent += n;
            if sent >= 2 * payload.len() / 3 {
                // Let the first chunks be acknowledged before the last third.
                p.client.wait_acknowledged(Duration::from_secs(5)).unwrap();
            }
        }
        p.client.close().unwrap();
        let got = rx.join().unwrap();
        assert!(got == payload, "received bytes differ");
        assert!(reused > 0, "no chunk was reused");
    });
}

fn scratch_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("slipstream-api-{name}-{}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A regular file goes out mapped, from the page cache where it lies, and arrives verified;
/// shared ranges the connection cannot take are refused.
#[test]
fn mapped_files_are_sent_from_where_they_lie() {
    let p = pair(Mode::File, EndpointOptions::default());
    let shared: SharedBytes = std::sync::Arc::new(vec![1u8; 100]);
    for bad in [0..0, 50..101] {
        let e = p.client.send_shared(&shared, bad).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
    }
    // Files are mapped once the SIGBUS handler is installed (read before).
    slipstream::exit_on_sigbus_in_mappings().unwrap();
    // Not a whole number of chunks or packets.
    let payload = data((5 << 20) + 12345, 11);
    let path = scratch_file("mapped", &payload);
    std::thread::scope(|s| {
        let rx = s.spawn(|| {
            let mut got = Vec::new();
            let v = transfer::recv_stream(&p.server, &mut got, |_| {}).unwrap();
            (v, got)
        });
        let mut seen = 0;
        let sent = transfer::send_file(&p.client, &path, |n| seen = n).unwrap();
        assert_eq!(
            (sent.bytes, seen),
            (payload.len() as u64, payload.len() as u64)
        );
        assert!(sent.mapped, "the file was read, not mapped");
        assert!(sent.committed, "no verdict from the receiver");
        let (v, got) = rx.join().unwrap();
        assert!(got == payload, "received bytes differ");
        assert!(v.is_verified(), "{v:?}");
    });
    let _ = std::fs::remove_file(&path);
}

/// A file that changes size while it is sent mapped fails the transfer at both ends.
#[test]
fn a_mapped_file_that_changes_size_fails_both_ends() {
    use std::io::Write;
    let p = pair(Mode::File, EndpointOptions::default());
    let payload = data(3 << 20, 12);
    let path = scratch_file("grows", &payload);
    slipstream::exit_on_sigbus_in_mappings().unwrap();
    let map = slipstream::MappedFile::open(&std::fs::File::open(&path).unwrap())
        .unwrap()
        .expect("a regular file maps");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"more")
        .unwrap();
    std::thread::scope(|s| {
        let rx = s.spawn(|| transfer::recv_stream(&p.server, std::io::sink(), |_| {}));
        let e = transfer::send_mapped(&p.client, map, |_| {}).unwrap_err();
        assert!(e.to_string().contains("changed size"), "{e}");
        let r = rx.join().unwrap();
        assert!(
            r.is_err(),
            "the receiver accepted a transfer whose sender failed: {r:?}"
        );
    });
    let _ = std::fs::remove_file(&path);
}

/// Paged reads: whole pages of the receive buffer are handed out without a copy, the rest is
/// copied, and the two together are the stream.
#[test]
fn pages_of_the_receive_buffer_are_handed_out_whole() {
    let p = pair(Mode::File, EndpointOptions::default());
    let page_len = p.server.recv_page_len().unwrap();
    let payload = data(5 * page_len + 1000, 8);
    // All of it sent (and buffered by the receiver) before it reads, so whole pages wait.
    let mut sent = 0;
    while sent < payload.len() {
        sent += p.client.send(&payload[sent..]).unwrap();
    }
    p.client.close().unwrap();
    // A plain read first: then paged reads copy to the end of the first page and take the
    // next four whole; the last 1000 bytes are a page too where a page is one packet (as
    // over loopback), else a copy.
    let mss = p.server.stats().unwrap().mss as usize;
    let one_packet = mss - 44 >= slipstream::proto::conn::OWNED_PAYLOAD_MIN;
    let mut buf = vec![0u8; 1000];
    let n = p.server.recv(&mut buf).unwrap();
    let mut got = buf[..n].to_vec();
    let (mut pages, mut spare) = (0, None);
    loop {
        match p.server.recv_page(&mut buf, spare.take()).unwrap() {
            StreamRead::Copied(0) => break,
            StreamRead::Copied(n) => got.extend_from_slice(&buf[..n]),
            StreamRead::Page(page, len) => {
                assert_eq!(page.len(), page_len);
                got.extend_from_slice(&page[..len]);
                pages += 1;
                spare = Some(page);
            }
        }
    }
    assert!(got == payload, "received bytes differ");
    let last = usize::from(one_packet);
    assert_eq!(pages, 4 + last, "pages 2 to 5 are handed out whole");
    let s = p.server.stats().unwrap();
    assert_eq!(s.bytes_delivered, payload.len() as u64);
    assert_eq!(
        s.bytes_delivered_in_pages,
        (4 * page_len + 1000 * last) as u64
    );
    // Loopback's 64 KiB payloads were received in place where the datapath splits receives.
    if matches!(p.server_ep.datapath_name(), "gso" | "mmsg") {
        assert!(s.pkts_recv_in_place > 0, "{s:?}");
    }
}

/// `recv_pages` gives back one spare for each page it takes (to the endpoint, whose next
/// receives write into them) and leaves the rest with the caller, also when `pages` already
/// holds pages from an earlier call.
#[test]
fn recv_pages_gives_back_one_spare_for_each_page_taken() {
    let p = pair(Mode::File, EndpointOptions::default());
    let page_len = p.server.recv_page_len().unwrap();
    let payload = data(6 * page_len, 9);
    let mut sent = 0;
    while sent < payload.len() {
        sent += p.client.send(&payload[sent..]).unwrap();
    }
    p.client.close().unwrap();
    let mut buf = vec![0u8; 1000];
    // Two pages from before, still held, and ten spares.
    let mut pages: Vec<(Vec<u8>, usize)> = vec![(vec![0; page_len], 0), (vec![0; page_len], 0)];
    let mut spares: Vec<Vec<u8>> = (0..10).map(|_| vec![0; page_len]).collect();
    let mut got = Vec::new();
    while got.len() < payload.len() {
        let before = (pages.len(), spares.len());
        let n = p
            .server
            .recv_pages(&mut buf, &mut spares, &mut pages, 4)
            .unwrap();
        got.extend_from_slice(&buf[..n]);
        let taken = pages.len() - before.0;
        assert_eq!(
            spares.len(),
            before.1 - taken.min(before.1),
            "{taken} pages taken, {} spares of {} left",
            spares.len(),
            before.1
        );
        for (page, len) in pages.drain(2..) {
            got.extend_from_slice(&page[..len]);
        }
    }
    assert!(got == payload, "received bytes differ");
}

/// The digest trailer is found wherever the stream's end falls against the pages: at a
/// page's end, inside a page, split between a page and a copy.
#[test]
fn the_trailer_is_found_across_page_ends() {
    let page_len = pair(Mode::File, EndpointOptions::default())
        .server
        .recv_page_len()
        .unwrap();
    let trailer = transfer::TRAILER_LEN;
    for (k, end) in [0, 10, trailer, trailer + 1, page_len - 5]
        .into_iter()
        .enumerate()
    {
        let p = pair(Mode::File, EndpointOptions::default());
        // Header, start, content and trailer end `end` bytes past the second page, in full packets
        // (a plain write, where `send_stream` would send the trailer in a packet of its
        // own), all sent before the receiver reads, so that whole pages wait for it.
        let payload = data(
            2 * page_len + end - trailer - FILE_HEADER_LEN - START_LEN,
            20 + k as u64,
        );
        let mut stream = FileHeader {
            len: payload.len() as u64,
        }
        .encode()
        .to_vec();
        stream.extend_from_slice(&Start { offset: 0 }.encode());
        stream.extend_from_slice(&payload);
        stream.extend_from_slice(&transfer::trailer(
            payload.len() as u64,
            &transfer::digest(&payload),
        ));
        let mut sent = 0;
        while sent < stream.len() {
            sent += p.client.send(&stream[sent..]).unwrap();
        }
        p.client.close().unwrap();
        let mut got = Vec::new();
        let v = transfer::recv_stream(&p.server, &mut got, |_| {}).unwrap();
        assert!(got == payload, "received bytes differ (end {end})");
        assert!(matches!(v, Verdict::Verified { bytes, .. } if bytes == payload.len() as u64));
        let s = p.server.stats().unwrap();
        assert!(s.bytes_delivered_in_pages > 0, "no page was taken: {s:?}");
    }
}

/// Payloads of 16 to 32 KiB: GSO sends several in one run, which GRO would hand over as one
/// batch too long for the receiver's split buffers; the receiver turns GRO off while it splits,
/// receives each in place, and the transfer is verified.
#[test]
fn mid_sized_payloads_are_received_in_place() {
    // Batches dropped whole stall the transfer rather than fail it: bound it in time.
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let p = pair_with(Mode::File, EndpointOptions::default(), |c| {
            c.set_mss(20_000);
        });
        assert_eq!(p.server.stats().unwrap().mss, 20_000);
        transfer_verified(&p, &data(8 << 20, 9));
        let s = p.server.stats().unwrap();
        if matches!(p.server_ep.datapath_name(), "gso" | "mmsg") {
            assert!(s.pkts_recv_in_place > 0, "{s:?}");
            let dp = p.server_ep.datapath_stats();
            assert_eq!(dp.recv_errors, 0, "datagrams cut short: {dp:?}");
        }
        let _ = done.send(());
    });
    finished
        .recv_timeout(Duration::from_secs(60))
        .expect("8 MiB of 20 KiB packets did not cross loopback in 60 s (or the check failed)");
}

/// A stream read with a timeout gives up with `TimedOut` when nothing comes, and returns
/// what comes before it.
#[test]
fn stream_reads_time_out() {
    let p = pair(Mode::File, EndpointOptions::default());
    let mut buf = [0u8; 16];
    let t0 = Instant::now();
    let e = p
        .server
        .recv_timeout(&mut buf, Duration::from_millis(150))
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(t0.elapsed() >= Duration::from_millis(150));
    assert!(t0.elapsed() < Duration::from_secs(2));
    p.client.send(b"hello").unwrap();
    let n = p
        .server
        .recv_timeout(&mut buf, Duration::from_secs(5))
        .unwrap();
    assert_eq!(&buf[..n], b"hello");
}

/// Two I/O threads on each side: sixteen connections spread over both sockets of each
/// endpoint (one port), all moving their data byte-exact both ways.
#[test]
fn two_io_threads_share_the_connections_of_one_address() {
    let mut opts = EndpointOptions::default();
    opts.set_threads(2);
    let server_ep = Endpoint::bind(loopback(), opts.clone()).unwrap();
    assert_eq!(server_ep.threads(), 2);
    server_ep.listen(cfg(Mode::File)).unwrap();
    let client_ep = Endpoint::bind(loopback(), opts).unwrap();
    let addr = server_ep.local_addr();
    const N: usize = 16;
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            let conns: Vec<Connection> = (0..N)
                .map(|_| server_ep.accept_timeout(Duration::from_secs(10)).unwrap())
                .collect();
            let mut handles = Vec::new();
            for mut c in conns {
                handles.push(std::thread::spawn(move || {
                    let mut got = Vec::new();
                    c.read_to_end(&mut got).unwrap();
                    got
                }));
            }
            let mut all: Vec<Vec<u8>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            all.sort();
            all
        });
        let mut sent = Vec::new();
        let mut senders = Vec::new();
        for k in 0..N {
            let mut c = client_ep.connect(addr, cfg(Mode::File)).unwrap();
            let payload = data(300_000 + k * 1000, k as u64 + 1);
            sent.push(payload.clone());
            senders.push(std::thread::spawn(move || {
                std::io::Write::write_all(&mut c, &payload).unwrap();
                c.close().unwrap();
            }));
        }
        senders.into_iter().for_each(|h| h.join().unwrap());
        let mut got = server.join().unwrap();
        sent.sort();
        got.sort();
        assert!(got == sent, "a stream arrived damaged or not at all");
    });
    for (name, ep) in [("server", &server_ep), ("client", &client_ep)] {
        let per: Vec<u64> = ep
            .stats_per_thread()
            .iter()
            .map(|s| s.datagrams_in)
            .collect();
        assert!(per.iter().all(|&d| d > 0), "{name}: a thread idle: {per:?}");
        let st = ep.stats();
        assert_eq!(
            st.unknown_socket, 0,
            "{name}: datagrams reached the wrong thread"
        );
    }
    assert_eq!(server_ep.stats().accepted, N as u64);
}

/// Past the connection limit a caller is refused at once with SRT's RESOURCE rejection and
/// its reason; the connections already there carry on.
#[test]
fn a_caller_over_the_connection_limit_is_refused_and_the_others_carry_on() {
    let mut opts = EndpointOptions::default();
    opts.set_max_connections(3);
    let server_ep = Endpoint::bind(loopback(), opts).unwrap();
    server_ep.listen(cfg(Mode::Message)).unwrap();
    let client_ep = Endpoint::bind(loopback(), EndpointOptions::default()).unwrap();
    let addr = server_ep.local_addr();
    let mut pairs = Vec::new();
    for _ in 0..3 {
        let c = client_ep.connect(addr, cfg(Mode::Message)).unwrap();
        let s = server_ep.accept_timeout(Duration::from_secs(5)).unwrap();
        pairs.push((c, s));
    }
    let t = Instant::now();
    let err = client_ep.connect(addr, cfg(Mode::Message)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    assert!(err.to_string().contains("resource"), "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "refused only after {:?}",
        t.elapsed()
    );
    assert_eq!(server_ep.stats().rejected_limit, 1);
    let mut buf = [0u8; 64];
    for (k, (c, s)) in pairs.iter().enumerate() {
        c.send_message(&[k as u8; 10]).unwrap();
        let n = s
            .recv_message_timeout(&mut buf, Duration::from_secs(5))
            .unwrap();
        assert_eq!(&buf[..n], &[k as u8; 10]);
    }
}

/// A batch of messages queued under one lock arrives whole and in order; a batch larger than
/// the send buffer's room is queued in part and the rest on the next calls.
#[test]
fn send_messages_queues_a_batch_in_order() {
    let p = pair(Mode::Message, EndpointOptions::default());
    let msgs: Vec<Vec<u8>> = (0..20_000u32)
        .map(|k| k.to_be_bytes().repeat(1 + (k % 16) as usize))
        .collect();
    let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
    let reader = std::thread::scope(|s| {
        let r = s.spawn(|| {
            let mut buf = [0u8; 128];
            (0..msgs.len())
                .map(|_| {
                    let n = p
                        .server
                        .recv_message_timeout(&mut buf, Duration::from_secs(10))
                        .unwrap();
                    buf[..n].to_vec()
                })
                .collect::<Vec<_>>()
        });
        let mut at = 0;
        while at < refs.len() {
            let k = p
                .client
                .send_messages(&refs[at..(at + 3000).min(refs.len())])
                .unwrap();
            assert!(k > 0);
            at += k;
        }
        r.join().unwrap()
    });
    assert!(reader == msgs, "messages arrived damaged or out of order");
    assert_eq!(p.client.send_messages(&[]).unwrap(), 0);
}

/// Messages read a batch at a time arrive whole and in order, however the batches fall;
/// the end reads as 0, and live mode is refused.
#[test]
fn recv_messages_reads_batches_in_order() {
    let p = pair(Mode::Message, EndpointOptions::default());
    let msgs: Vec<Vec<u8>> = (0..20_000u32)
        .map(|k| k.to_be_bytes().repeat(1 + (k % 16) as usize))
        .collect();
    let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
    let (got, batches) = std::thread::scope(|s| {
        let r = s.spawn(|| {
            // Room for a few of the longest (64 bytes): batches are cut by the buffer.
            let mut buf = [0u8; 200];
            let (mut lens, mut got, mut batches) = (Vec::new(), Vec::new(), 0);
            loop {
                let k = p.server.recv_messages(&mut buf, &mut lens).unwrap();
                if k == 0 {
                    return (got, batches);
                }
                assert_eq!(k, lens.len());
                batches += 1;
                let mut at = 0;
                for &n in &lens {
                    got.push(buf[at..at + n].to_vec());
                    at += n;
                }
            }
        });
        let mut at = 0;
        while at < refs.len() {
            at += p.client.send_messages(&refs[at..]).unwrap();
        }
        p.client.close().unwrap();
        r.join().unwrap()
    });
    assert!(
        got == msgs,
        "messages arrived damaged, out of order or not at all"
    );
    assert!(batches < msgs.len(), "every read took one message");
    let live = pair(Mode::Live, EndpointOptions::default());
    let err = live
        .server
        .recv_messages(&mut [0u8; 64], &mut Vec::new())
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

/// One thread on each side serves 64 streams through a poller, over two I/O threads: every
/// stream arrives byte-exact, no operation of a polled connection blocks, and the end of
/// each is reported.
#[test]
fn a_poller_serves_many_streams_from_one_thread() {
    use slipstream::{Interest, Poller};
    let mut opts = EndpointOptions::default();
    opts.set_threads(2);
    let server_ep = Endpoint::bind(loopback(), opts.clone()).unwrap();
    server_ep.listen(cfg(Mode::File)).unwrap();
    let client_ep = Endpoint::bind(loopback(), opts).unwrap();
    let addr = server_ep.local_addr();
    const N: usize = 64;
    let payloads: Vec<Vec<u8>> = (0..N)
        .map(|k| data(100_000 + k * 997, k as u64 + 7))
        .collect();
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            let conns: Vec<Connection> = (0..N)
                .map(|_| server_ep.accept_timeout(Duration::from_secs(10)).unwrap())
                .collect();
            let poller = Poller::new();
            for (k, c) in conns.iter().enumerate() {
                poller.add(c, k as u64, Interest::READ).unwrap();
            }
            let mut got = vec![Vec::new(); N];
            let mut ended = [false; N];
            let (mut open, mut ready, mut buf) = (N, Vec::new(), vec![0u8; 8192]);
            let end = Instant::now() + Duration::from_secs(60);
            while open > 0 {
                assert!(Instant::now() < end, "{open} streams never ended");
                ready.clear();
                poller.wait(&mut ready, Duration::from_millis(100));
                for &t in &ready {
                    let k = t as usize;
                    // A report made before the removal may still come.
                    while !ended[k] {
                        match conns[k].recv(&mut buf) {
                            Ok(0) => {
                                poller.remove(&conns[k]);
                                ended[k] = true;
                                open -= 1;
                            }
                            Ok(n) => got[k].extend_from_slice(&buf[..n]),
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                            Err(e) => panic!("stream {k}: {e}"),
                        }
                    }
                }
            }
            let mut got: Vec<Vec<u8>> = got;
            got.sort();
            got
        });
        let conns: Vec<Connection> = (0..N)
            .map(|_| client_ep.connect(addr, cfg(Mode::File)).unwrap())
            .collect();
        let poller = Poller::new();
        for (k, c) in conns.iter().enumerate() {
            poller.add(c, k as u64, Interest::WRITE).unwrap();
        }
        let (mut at, mut left, mut ready) = (vec![0usize; N], N, Vec::new());
        let (mut would_block, start) = (0u64, Instant::now());
        while left > 0 {
            assert!(start.elapsed() < Duration::from_secs(60), "senders stalled");
            ready.clear();
            poller.wait(&mut ready, Duration::from_millis(100));
            for &t in &ready {
                let k = t as usize;
                while at[k] < payloads[k].len() {
                    let t0 = Instant::now();
                    match conns[k].send(&payloads[k][at[k]..]) {
                        Ok(n) => at[k] += n,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            assert!(t0.elapsed() < Duration::from_millis(50), "a send blocked");
                            would_block += 1;
                            break;
                        }
                        Err(e) => panic!("stream {k}: {e}"),
                    }
                }
                if at[k] == payloads[k].len() && at[k] != usize::MAX {
                    poller.remove(&conns[k]);
                    at[k] = usize::MAX;
                    left -= 1;
                }
            }
        }
        for c in &conns {
            c.close().unwrap();
        }
        let got = server.join().unwrap();
        let mut sent = payloads.clone();
        sent.sort();
        assert!(got == sent, "a stream arrived damaged or not at all");
        eprintln!("{would_block} sends would have blocked");
    });
}
