//! Rough loopback throughput: the asynchronous API against a plain sendto/recvfrom loop.
//! `cargo test --release --test dgram_throughput -- --ignored --nocapture`

use slipstream::dgram::{AsyncOptions, AsyncSocket, Engine};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const SECS: f64 = 1.0;

fn plain(len: usize) -> (f64, f64) {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dst = rx.local_addr().unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let _ = socket2::SockRef::from(&rx).set_recv_buffer_size(8 << 20);
    let r = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let (mut n, mut first) = (0u64, None);
        while rx.recv_from(&mut buf).is_ok() {
            first.get_or_insert_with(Instant::now);
            n += 1;
        }
        (n, first.map(|f| f.elapsed()).unwrap_or_default())
    });
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    let buf = vec![7u8; len];
    let end = Instant::now() + Duration::from_secs_f64(SECS);
    let mut sent = 0u64;
    while Instant::now() < end {
        for _ in 0..64 {
            let _ = tx.send_to(&buf, dst);
        }
        sent += 64;
    }
    let (n, t) = r.join().unwrap();
    let t = t.as_secs_f64() - 0.2;
    (n as f64 / t, sent as f64 / SECS)
}

fn asynchronous(len: usize, gro: bool) -> (f64, f64, u64) {
    let mut ro = AsyncOptions {
        engine: Engine::Uring,
        buffers: 1024,
        reserve: 256,
        ..AsyncOptions::default()
    };
    if gro {
        ro.buffers = 128;
        ro.reserve = 64;
        ro.buf_size = 65_536;
        ro.gro = true;
    }
    let mut rx = AsyncSocket::bind("127.0.0.1:0".parse().unwrap(), ro).unwrap();
    let dst: SocketAddr = rx.local_addr().unwrap();
    let r = std::thread::spawn(move || {
        let start = Instant::now();
        let n = rx
            .recv_count(
                ro.buffers,
                Duration::from_millis(200),
                Duration::from_secs(10),
            )
            .unwrap();
        (n, start.elapsed())
    });
    std::thread::sleep(Duration::from_millis(50));
    let mut tx =
        AsyncSocket::bind("127.0.0.1:0".parse().unwrap(), AsyncOptions::default()).unwrap();
    let start = Instant::now();
    let mut sent = 0u64;
    while start.elapsed().as_secs_f64() < SECS {
        sent += tx.send_many(dst, len, 4096).unwrap();
    }
    let st = start.elapsed().as_secs_f64();
    let (n, rt) = r.join().unwrap();
    let rt = rt.as_secs_f64() - 0.25;
    (
        n.datagrams as f64 / rt,
        sent as f64 / st,
        tx.stats().syscalls,
    )
}

#[test]
#[ignore]
fn throughput_loopback() {
    for len in [1472usize, 64] {
        let (pr, ps) = plain(len);
        let (ar, as_, sc) = asynchronous(len, false);
        let (gr, gs, _) = asynchronous(len, true);
        let g = |pps: f64| pps * len as f64 * 8.0 / 1e9;
        println!(
            "{len} B: plain recv {:.2} Mpps ({:.2} Gbit/s, send {:.2} Mpps) | async recv {:.2} Mpps ({:.2} Gbit/s, send {:.2} Mpps, {sc} syscalls) | async+GRO recv {:.2} Mpps ({:.2} Gbit/s, send {:.2} Mpps)",
            pr / 1e6, g(pr), ps / 1e6, ar / 1e6, g(ar), as_ / 1e6, gr / 1e6, g(gr), gs / 1e6
        );
    }
}
