//! Real-time sockets past the kernel's UDP stack (AF_XDP, `RtConfig::xdp_interface`), between
//! two network namespaces over a veth pair: messages of every size arrive whole with and
//! without AF_XDP on the far side, nothing allocates after open, and frames that are not
//! proper IPv4 UDP are counted and dropped. Needs root: skipped outside CI without it, a
//! failure in CI (CI=true).
// The counting allocator and the raw packet socket need `unsafe`; nothing else here does.
#![allow(unsafe_code)]

use slipstream::netem::netns::{self, VethPair};
use slipstream::rt::{interface_index, Class, RtConfig, RtSocket, RtStats};
use slipstream_proto::rt::frame::{Frame, HEADERS_LEN};
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[path = "support/counting.rs"]
mod counting;

#[global_allocator]
static A: counting::Counting = counting::Counting;

/// Whether the test can run: root, or a failure in CI.
fn may_run(test: &str) -> bool {
    if netns::is_root() {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(
        !ci,
        "{test}: CI must run as root (network namespaces, AF_XDP)"
    );
    eprintln!("skipping {test}: needs root (network namespaces, AF_XDP)");
    false
}

/// The MAC addresses `VethPair` gives its ends.
const MAC_A: [u8; 6] = [2, 0x53, 0x53, 0, 0, 1];
const MAC_B: [u8; 6] = [2, 0x53, 0x53, 0, 0, 2];

fn config(xdp_dev: Option<&str>) -> RtConfig {
    RtConfig {
        smoother: None,
        buffers: 64,
        max_message: 64 << 10,
        xdp_interface: xdp_dev.map(|d| interface_index(d).expect("interface")),
        ..RtConfig::default()
    }
}

/// An echo server in `ns` on `at` until `stop`; returns its stats.
fn echo(
    ns: String,
    at: SocketAddr,
    xdp_dev: Option<String>,
    stop: Arc<AtomicBool>,
) -> (
    std::thread::JoinHandle<RtStats>,
    std::sync::mpsc::Receiver<()>,
) {
    let (up_tx, up) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        netns::enter(&ns).unwrap();
        let mut sock = RtSocket::open(at, config(xdp_dev.as_deref())).unwrap();
        up_tx.send(()).unwrap();
        let mut replies = Vec::with_capacity(64);
        while !stop.load(Ordering::Relaxed) {
            sock.poll(Duration::from_millis(5), |m| {
                replies.push((m.src, m.data.to_vec()));
            })
            .unwrap();
            for (dst, data) in replies.drain(..) {
                let mut buf = loop {
                    if let Some(b) = sock.claim() {
                        break b;
                    }
                    sock.poll(Duration::from_millis(1), |_| {}).unwrap();
                };
                buf.as_mut()[..data.len()].copy_from_slice(&data);
                sock.send(buf, data.len(), dst, Class::Rt, None).unwrap();
            }
        }
        sock.stats()
    });
    (h, up)
}

/// Message `n` of `size` bytes: a pattern no two messages share.
fn fill(buf: &mut [u8], n: usize) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i.wrapping_mul(31) ^ n.wrapping_mul(7)) as u8;
    }
}

/// Sends message `n` of `size` bytes to `dst` and waits for its echo; panics on a wrong one.
fn round_trip(sock: &mut RtSocket, dst: SocketAddr, size: usize, n: usize, want: &mut [u8]) {
    let mut buf = sock.claim().expect("a free buffer");
    fill(&mut buf.as_mut()[..size], n);
    fill(&mut want[..size], n);
    sock.send(buf, size, dst, Class::Rt, None).unwrap();
    let end = Instant::now() + Duration::from_secs(3);
    let mut back = false;
    while !back {
        assert!(Instant::now() < end, "no echo of {size} bytes from {dst}");
        sock.poll(Duration::from_millis(50), |m| {
            assert_eq!(m.src, dst);
            assert!(m.data == &want[..size], "the echo of {size} bytes differs");
            back = true;
        })
        .unwrap();
    }
}

#[test]
fn messages_of_every_size_cross_with_and_without_af_xdp_on_the_far_side() {
    if !may_run("messages_of_every_size_cross_with_and_without_af_xdp_on_the_far_side") {
        return;
    }
    let pair = VethPair::create(1500).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let xdp_at = SocketAddr::from((pair.addr_b, 7300));
    let kernel_at = SocketAddr::from((pair.addr_b, 7301));
    let (xdp_server, up1) = echo(
        pair.ns_b.clone(),
        xdp_at,
        Some(pair.dev_b.clone()),
        stop.clone(),
    );
    let (kernel_server, up2) = echo(pair.ns_b.clone(), kernel_at, None, stop.clone());
    up1.recv().unwrap();
    up2.recv().unwrap();
    let (ns_a, dev_a, addr_a) = (pair.ns_a.clone(), pair.dev_a.clone(), pair.addr_a);
    let client = std::thread::spawn(move || {
        netns::enter(&ns_a).unwrap();
        let mut sock = RtSocket::open(SocketAddr::from((addr_a, 0)), config(Some(&dev_a))).unwrap();
        let mut want = vec![0u8; 64 << 10];
        let sizes = [1, 64, 1000, 1440, 1441, 4096, 20_000, 64 << 10];
        let mut n = 0;
        // The first round teaches each side where the other is; the second is counted.
        for count in [false, true] {
            if count {
                counting::start(true);
            }
            for dst in [xdp_at, kernel_at] {
                let before = sock.stats().xdp.expect("AF_XDP");
                for size in sizes {
                    for _ in 0..3 {
                        round_trip(&mut sock, dst, size, n, &mut want);
                        n += 1;
                    }
                    if size == 1 && dst == kernel_at && !count {
                        // Never heard from on this port, but its host was (the other
                        // server's frames): the first messages already left as frames.
                        let now = sock.stats().xdp.expect("AF_XDP");
                        assert_eq!(now.kernel_sends, before.kernel_sends, "{now:?}");
                        assert_eq!(now.frames_sent, before.frames_sent + 3, "{now:?}");
                    }
                }
            }
        }
        counting::stop();
        assert_eq!(counting::allocations(), 0, "allocations after open");
        (sock.stats(), n as u64)
    });
    let (stats, n) = client.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let xs = xdp_server.join().unwrap();
    let ks = kernel_server.join().unwrap();
    assert_eq!(stats.rt_delivered, n, "every echo arrived once");
    let x = stats.xdp.expect("the client has an AF_XDP path");
    eprintln!("client: {x:?}\nserver: {:?}", xs.xdp);
    // Messages of one datagram left as frames; the echoes of both servers arrived as frames.
    assert!(x.frames_sent >= n / 2, "{x:?}");
    assert!(x.frames_received >= n, "{x:?}");
    assert_eq!((x.malformed, x.foreign), (0, 0), "{x:?}");
    let sx = xs.xdp.expect("the server has an AF_XDP path");
    assert!(sx.frames_received > 0 && sx.frames_sent > 0, "{sx:?}");
    assert_eq!(sx.malformed, 0, "{sx:?}");
    assert!(ks.xdp.is_none());
    assert_eq!(xs.rt_delivered + ks.rt_delivered, n);
}

/// Sends `frame` out of interface `dev` (in the calling thread's namespace) as it is.
fn send_raw(dev: &str, frame: &[u8]) {
    let index = interface_index(dev).unwrap();
    // SAFETY: socket(2) with constant arguments; the descriptor is closed below.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    assert!(fd >= 0, "AF_PACKET: {}", std::io::Error::last_os_error());
    // SAFETY: all-zero bytes are a valid `sockaddr_ll`.
    let mut to: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    to.sll_family = libc::AF_PACKET as u16;
    to.sll_ifindex = index as i32;
    to.sll_halen = 6;
    to.sll_addr[..6].copy_from_slice(&frame[..6]);
    // SAFETY: `frame` and `to` are valid for the lengths passed.
    let n = unsafe {
        libc::sendto(
            fd,
            frame.as_ptr().cast(),
            frame.len(),
            0,
            (&raw const to).cast(),
            std::mem::size_of_val(&to) as u32,
        )
    };
    assert_eq!(
        n,
        frame.len() as isize,
        "{}",
        std::io::Error::last_os_error()
    );
    // SAFETY: our descriptor, closed once.
    unsafe { libc::close(fd) };
}

#[test]
fn frames_that_are_not_proper_udp_are_counted_and_dropped() {
    if !may_run("frames_that_are_not_proper_udp_are_counted_and_dropped") {
        return;
    }
    let pair = VethPair::create(1500).unwrap();
    let at = SocketAddr::from((pair.addr_b, 7310));
    let (ns_b, dev_b) = (pair.ns_b.clone(), pair.dev_b.clone());
    let (up_tx, up) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let st = stop.clone();
    let server = std::thread::spawn(move || {
        netns::enter(&ns_b).unwrap();
        let mut sock = RtSocket::open(at, config(Some(&dev_b))).unwrap();
        up_tx.send(()).unwrap();
        let mut got = Vec::new();
        while !st.load(Ordering::Relaxed) {
            sock.poll(Duration::from_millis(5), |m| got.push(m.data.to_vec()))
                .unwrap();
        }
        (got, sock.stats())
    });
    up.recv().unwrap();
    // One AF_XDP socket an interface: a second is refused, saying why; once the first is
    // closed, the interface takes another (the kernel frees the queue tens of
    // milliseconds later; the open waits for it).
    let reopen = |pair: &VethPair| {
        let (ns_b, dev_b, addr_b) = (pair.ns_b.clone(), pair.dev_b.clone(), pair.addr_b);
        std::thread::spawn(move || {
            netns::enter(&ns_b).unwrap();
            RtSocket::open(SocketAddr::from((addr_b, 7311)), config(Some(&dev_b)))
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .join()
        .unwrap()
    };
    let second = reopen(&pair);
    assert!(
        second
            .as_ref()
            .is_err_and(|e| e.contains("already has an AF_XDP socket")),
        "{second:?}"
    );
    // A proper real-time message, written by a plain socket's sender into a frame.
    let mut msg = vec![0u8; 32 + 5];
    {
        // Borrow the header writer through a real socket: send to a loopback sink and read
        // the datagram back.
        let sink = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = RtSocket::open("127.0.0.1:0".parse().unwrap(), config(None)).unwrap();
        let mut b = s.claim().unwrap();
        b.as_mut()[..5].copy_from_slice(b"hello");
        s.send(b, 5, sink.local_addr().unwrap(), Class::Rt, None)
            .unwrap();
        let (n, _) = sink.recv_from(&mut msg).unwrap();
        assert_eq!(n, msg.len());
    }
    let f = Frame {
        src_mac: MAC_A,
        dst_mac: MAC_B,
        src: SocketAddrV4::new(pair.addr_a, 5555),
        dst: SocketAddrV4::new(pair.addr_b, 7310),
        tos: 0,
        payload_len: 0,
        unchecked: false,
    };
    let mut good = vec![0u8; HEADERS_LEN + msg.len()];
    f.emit(&mut good, &[&msg]).unwrap();
    good[HEADERS_LEN..].copy_from_slice(&msg);
    let mut bad = Vec::new();
    let mut damaged = |i: usize, v: u8| {
        let mut b = good.clone();
        b[i] ^= v;
        bad.push(b);
    };
    damaged(HEADERS_LEN + 33, 1); // the payload: the UDP checksum fails
    damaged(22, 1); // the TTL: the IP checksum fails
    damaged(39, 4); // the UDP length disagrees with the IP length
    let mut short = good.clone();
    short[17] = short[17].wrapping_add(40); // an IP length past the frame's end
    bad.push(short);
    let (ns_a, dev_a) = (pair.ns_a.clone(), pair.dev_a.clone());
    std::thread::spawn(move || {
        netns::enter(&ns_a).unwrap();
        for b in &bad {
            send_raw(&dev_a, b);
        }
        send_raw(&dev_a, &good);
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let (got, stats) = server.join().unwrap();
    assert_eq!(reopen(&pair), Ok(()));
    assert_eq!(
        got,
        vec![b"hello".to_vec()],
        "only the proper frame is delivered"
    );
    let x = stats.xdp.unwrap();
    assert_eq!(x.malformed, 4, "{x:?}");
    assert_eq!(x.frames_received, 5, "{x:?}");
}

#[test]
fn a_short_wait_with_af_xdp_ends_on_time_not_on_a_millisecond() {
    if !may_run("a_short_wait_with_af_xdp_ends_on_time_not_on_a_millisecond") {
        return;
    }
    let pair = VethPair::create(1500).unwrap();
    let (ns_a, dev_a, addr_a) = (pair.ns_a.clone(), pair.dev_a.clone(), pair.addr_a);
    let took = std::thread::spawn(move || {
        netns::enter(&ns_a).unwrap();
        let mut sock = RtSocket::open(SocketAddr::from((addr_a, 0)), config(Some(&dev_a))).unwrap();
        // Polls of 100 µs with nothing arriving: each must end near its timeout. A wait
        // counted in milliseconds (epoll_pwait) ends after 1 ms at the least.
        let mut took: Vec<Duration> = (0..200)
            .map(|_| {
                let t = Instant::now();
                sock.poll(Duration::from_micros(100), |_| {}).unwrap();
                t.elapsed()
            })
            .collect();
        took.sort_unstable();
        took
    })
    .join()
    .unwrap();
    let median = took[took.len() / 2];
    eprintln!(
        "polls of 100 us took: median {median:?}, max {:?}",
        took[took.len() - 1]
    );
    assert!(median < Duration::from_micros(600), "median {median:?}");
}

#[test]
fn what_the_kernel_drops_for_a_stalled_socket_is_counted() {
    if !may_run("what_the_kernel_drops_for_a_stalled_socket_is_counted") {
        return;
    }
    const SENT: u64 = 3_000;
    let pair = VethPair::create(1500).unwrap();
    let at = SocketAddr::from((pair.addr_b, 7302));
    let (ns_b, dev_b) = (pair.ns_b.clone(), pair.dev_b.clone());
    let (up_tx, up) = std::sync::mpsc::channel();
    let (sent_tx, sent) = std::sync::mpsc::channel::<()>();
    let server = std::thread::spawn(move || {
        netns::enter(&ns_b).unwrap();
        let mut sock = RtSocket::open(at, config(Some(&dev_b))).unwrap();
        up_tx.send(()).unwrap();
        // Stalled: nothing is taken until the client has sent everything.
        sent.recv().unwrap();
        let mut got = 0u64;
        let mut idle = 0;
        while idle < 20 {
            let n = sock.poll(Duration::from_millis(5), |_| got += 1).unwrap();
            idle = if n == 0 { idle + 1 } else { 0 };
        }
        (got, sock.stats())
    });
    up.recv().unwrap();
    let ns_a = pair.ns_a.clone();
    let addr_a = pair.addr_a;
    std::thread::spawn(move || {
        netns::enter(&ns_a).unwrap();
        let mut sock = RtSocket::open(SocketAddr::from((addr_a, 0)), config(None)).unwrap();
        for _ in 0..SENT {
            let buf = loop {
                if let Some(b) = sock.claim() {
                    break b;
                }
                sock.poll(Duration::from_millis(1), |_| {}).unwrap();
            };
            sock.send(buf, 1, at, Class::Rt, None).unwrap();
        }
        assert_eq!(sock.stats().rt_sent, SENT);
    })
    .join()
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    sent_tx.send(()).unwrap();
    let (got, stats) = server.join().unwrap();
    let x = stats.xdp.expect("AF_XDP");
    eprintln!("delivered {got}; {x:?}");
    let dropped = x.kernel_dropped + x.kernel_ring_full;
    // More than the receive frames hold was sent: the rest was dropped by the kernel, and
    // every message is either delivered or counted so.
    assert!(dropped >= SENT - 256 - 64, "{x:?}");
    assert_eq!(got + dropped, SENT, "{x:?}");
}
