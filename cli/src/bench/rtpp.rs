//! `slipstream bench rtpp`: the SS-RTUDP paper's Figs. 7 and 8, NetPIPE-style. For each
//! message size, the real-time path (`slipstream::rt`: application fragments as GSO runs,
//! pool buffers) and plain blocking `sendto`/`recvfrom` (the kernel cuts datagrams above the
//! MTU into IP fragments) are measured in the same run between two network namespaces:
//!
//! - latency: ping-pong of one message, half the round trip, p50 and p99;
//! - bandwidth: a stream of messages, counted by the receiver, in Mbit/s of payload.
//!
//! Paths: a veth pair (no rate limit: host costs), or the link emulator at 100 Mbit/s or
//! 1 Gbit/s (`netem100`, `netem1g`).
//!
//! `--xdp` gives the client's real-time socket and the echo server's an AF_XDP path on
//! their veth ends (`RtConfig::xdp_interface`).

use clap::Args;
use serde::Serialize;
use slipstream::datapath::Impairment;
use slipstream::netem::{self, netns};
use slipstream::rt::{Class, RtConfig, RtSocket};
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `bench rtpp`.
#[derive(Debug, Args)]
pub struct RtppArgs {
    /// Paths: veth, netem100, netem1g (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "veth")]
    pub paths: Vec<String>,
    /// Message sizes, bytes (default: powers of two from 1 to 32 KiB, and 65,000).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<usize>>,
    /// Where the threads run: `same` (client and servers on CPU 0: each ping-pong measures
    /// the software path, not a sleeping vCPU's wake-up), `apart` (client on CPU 0, servers
    /// on CPU 1), `none` (the scheduler decides).
    #[arg(long, default_value = "same", value_parser = ["same", "apart", "none"])]
    pub pin: String,
    /// NetPIPE's perturbation: each size also measured 3 bytes below and above (sizes that
    /// would fall outside 1..=65,000, or on 3, are left out).
    #[arg(long)]
    pub perturb: bool,
    /// Both paths look for datagrams without waiting for this many microseconds before
    /// they sleep (the real-time sockets with `RtConfig::spin`, the plain ones with
    /// `recvfrom(MSG_DONTWAIT)` in a loop; 0: none). For `--pin apart`, where each side has a
    /// CPU of its own.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub spin: u64,
    /// The real-time echo server and the client's real-time socket send and receive past
    /// the kernel's IP and UDP stack (AF_XDP, copy mode, on their veth end; path veth only;
    /// the sink stays on the kernel's stack: one AF_XDP socket an interface).
    #[arg(long)]
    pub xdp: bool,
    /// Ping-pongs per size.
    #[arg(long, default_value_t = 500)]
    pub iters: usize,
    /// Payload bytes streamed per size for the bandwidth.
    #[arg(long, default_value = "8388608")]
    pub stream_bytes: usize,
    /// Print a JSON summary as the last line.
    #[arg(long)]
    pub json: bool,
}

/// Ports of the servers in namespace b: RT echo, plain echo, RT sink, plain sink.
const PORTS: [u16; 4] = [7901, 7902, 7903, 7904];
/// What ends a stream (no measured size is 3 bytes).
const END: &[u8] = b"END";
/// Largest message.
const MAX: usize = 65_000;

/// One size on one path.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub path: String,
    pub size: usize,
    /// Half the round trip, µs: p50 and p99, real-time path then plain.
    pub rt_p50_us: f64,
    pub rt_p99_us: f64,
    pub plain_p50_us: f64,
    pub plain_p99_us: f64,
    /// Payload delivered, Mbit/s.
    pub rt_mbps: f64,
    pub plain_mbps: f64,
    /// Pings that got no answer within 1 s (not in the latencies).
    pub rt_lost: usize,
    pub plain_lost: usize,
}

/// Runs `bench rtpp`.
pub fn run(a: &RtppArgs) -> Result<(), String> {
    if !netns::is_root() {
        return Err("bench rtpp needs root: it runs between network namespaces".into());
    }
    let sizes = a.sizes.clone().unwrap_or_else(|| {
        let mut v: Vec<usize> = (0..=15).map(|i| 1 << i).collect();
        v.push(MAX);
        v
    });
    let sizes: Vec<usize> = if a.perturb {
        let mut v: Vec<usize> = sizes
            .iter()
            .flat_map(|&s| [s.wrapping_sub(3), s, s + 3])
            .filter(|&s| (1..=MAX).contains(&s) && s != END.len())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    } else {
        sizes
    };
    if let Some(&s) = sizes.iter().find(|&&s| s == 0 || s == END.len() || s > MAX) {
        return Err(format!("--sizes: {s} is not measured (1 to {MAX}, not 3)"));
    }
    if a.xdp && a.paths.iter().any(|p| p != "veth") {
        return Err("--xdp: path veth only (the emulator's ends are TUN devices)".into());
    }
    let mut rows = Vec::new();
    for path in &a.paths {
        let (ns, addrs, guard) = setup(path)?;
        let devs = match (&guard, a.xdp) {
            (Guard::Veth(p), true) => (Some(p.dev_a.clone()), Some(p.dev_b.clone())),
            _ => (None, None),
        };
        eprintln!("rtpp: {path}");
        let stop = Arc::new(AtomicBool::new(false));
        let (client_cpu, server_cpu) = match a.pin.as_str() {
            "same" => (Some(0), Some(0)),
            "apart" => (Some(0), Some(1)),
            _ => (None, None),
        };
        let servers = serve(&ns.1, addrs.1, stop.clone(), server_cpu, a.spin, devs.1)?;
        let r = measure(
            a,
            path,
            &sizes,
            (&ns.0, devs.0),
            addrs,
            client_cpu,
            &mut rows,
        );
        stop.store(true, Ordering::Relaxed);
        for s in servers {
            let _ = s.join();
        }
        r?;
    }
    println!(
        "| path | size B | RT p50/p99 us | plain p50/p99 us | RT Mbit/s | plain Mbit/s |\n|---|---:|---|---|---:|---:|"
    );
    for r in &rows {
        println!(
            "| {} | {} | {:.1} / {:.1} | {:.1} / {:.1} | {:.1} | {:.1} |",
            r.path,
            r.size,
            r.rt_p50_us,
            r.rt_p99_us,
            r.plain_p50_us,
            r.plain_p99_us,
            r.rt_mbps,
            r.plain_mbps
        );
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&rows).map_err(|e| e.to_string())?
        );
    }
    Ok(())
}

/// Whatever keeps a path up until dropped (the emulator: taken down).
pub(crate) enum Guard {
    Veth(netns::VethPair),
    Netem(String),
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Guard::Netem(name) = self {
            if let Err(e) = netem::down(name) {
                eprintln!("warning: removing emulator {name}: {e}");
            }
        }
    }
}

type Path2 = ((String, String), (Ipv4Addr, Ipv4Addr), Guard);

fn setup(path: &str) -> Result<Path2, String> {
    let rate = match path {
        "veth" => {
            let p = netns::VethPair::create(1500)?;
            return Ok((
                (p.ns_a.clone(), p.ns_b.clone()),
                (p.addr_a, p.addr_b),
                Guard::Veth(p),
            ));
        }
        "netem100" => "rate=100mbit",
        "netem1g" => "rate=1gbit",
        _ => {
            return Err(format!(
                "--paths: unknown path {path} (veth, netem100, netem1g)"
            ))
        }
    };
    let name = format!("rtpp{}", std::process::id());
    let imp = Impairment::parse(&format!("{rate},queue=4m"))?;
    let spec = netem::Spec {
        ab: imp.clone(),
        ba: imp,
        mtu: 1500,
    };
    let exe = std::env::current_exe().map_err(|e| format!("finding slipstream: {e}"))?;
    let info = netem::up(&name, &spec, &exe)?;
    Ok((
        (info.a.netns.clone(), info.b.netns.clone()),
        (info.a.addr, info.b.addr),
        Guard::Netem(name),
    ))
}

/// The real-time sockets' configuration; `spin`: [`RtConfig::spin`], µs; `xdp`: the
/// interface for [`RtConfig::xdp_interface`] (looked up in the calling thread's namespace).
fn rt_config(spin: u64, xdp: Option<&str>) -> Result<RtConfig, String> {
    let xdp_interface = match xdp {
        Some(dev) => Some(slipstream::rt::interface_index(dev).map_err(|e| e.to_string())?),
        None => None,
    };
    Ok(RtConfig {
        xdp_interface,
        max_message: MAX,
        buffers: 256,
        rt_queue: 256,
        reassembly_slots: 32,
        smoother: None,
        spin: Duration::from_micros(spin),
        ..RtConfig::default()
    })
}

/// Keeps the calling thread on `cpu` (if any).
fn pin(cpu: Option<usize>) -> Result<(), String> {
    let Some(cpu) = cpu else { return Ok(()) };
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(|e| format!("pinning to CPU {cpu}: {e}"))
}

/// The four servers in namespace `ns` (on `cpu`, if any), until `stop`.
fn serve(
    ns: &str,
    addr: Ipv4Addr,
    stop: Arc<AtomicBool>,
    cpu: Option<usize>,
    spin: u64,
    xdp: Option<String>,
) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
    let mut out = Vec::new();
    for (k, port) in PORTS.into_iter().enumerate() {
        let (ns, stop) = (ns.to_string(), stop.clone());
        // The echo server only: one AF_XDP socket an interface.
        let xdp = xdp.clone().filter(|_| k == 0);
        let at = SocketAddr::from((addr, port));
        let (tx, rx) = std::sync::mpsc::channel();
        out.push(std::thread::spawn(move || {
            if let Err(e) = netns::enter(&ns) {
                let _ = tx.send(Err(e.to_string()));
                return;
            }
            if let Err(e) = pin(cpu) {
                let _ = tx.send(Err(e));
                return;
            }
            if k % 2 == 0 {
                let opened = rt_config(spin, xdp.as_deref())
                    .and_then(|c| RtSocket::open(at, c).map_err(|e| e.to_string()));
                let mut sock = match opened {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = tx.send(Ok(()));
                rt_server(&mut sock, k == 2, &stop);
            } else {
                let sock = match UdpSocket::bind(at) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = socket2::SockRef::from(&sock).set_recv_buffer_size(8 << 20);
                let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
                let _ = tx.send(Ok(()));
                plain_server(&sock, k == 3, &stop, Duration::from_micros(spin));
            }
        }));
        rx.recv().map_err(|e| e.to_string())??;
    }
    Ok(out)
}

/// Echoes every message (or, as a sink, counts them and answers END with the counts). An
/// echo is copied once, from where the message was delivered into a pool buffer claimed
/// before the poll, as the plain server's is read into its buffer and sent from there.
fn rt_server(sock: &mut RtSocket, sink: bool, stop: &AtomicBool) {
    const SPARE: usize = 8;
    let mut spare: Vec<slipstream::rt::Buf> = Vec::with_capacity(SPARE);
    let mut replies: Vec<(SocketAddr, slipstream::rt::Buf, usize)> = Vec::with_capacity(64);
    let mut count = Count::default();
    while !stop.load(Ordering::Relaxed) {
        while spare.len() < SPARE {
            let Some(b) = sock.claim() else { break };
            spare.push(b);
        }
        let _ = sock.poll(Duration::from_millis(20), |m| {
            let counts;
            let data: &[u8] = if sink && m.data != END {
                count.add(m.data.len());
                return;
            } else if sink {
                counts = count.take();
                &counts
            } else {
                m.data
            };
            // More messages in one poll than buffers spare: the rest are not answered (the
            // client counts an unanswered ping lost).
            if let Some(mut buf) = spare.pop() {
                buf.as_mut()[..data.len()].copy_from_slice(data);
                replies.push((m.src, buf, data.len()));
            }
        });
        for (dst, buf, len) in replies.drain(..) {
            let _ = sock.send(buf, len, dst, Class::Rt, None);
        }
    }
}

/// Receives on a plain (blocking) socket as a real-time one with [`RtConfig::spin`] does:
/// looks without waiting (`recvfrom` with MSG_DONTWAIT) for up to `spin`, then waits as
/// long as the socket's read timeout allows.
fn plain_recv(
    sock: &UdpSocket,
    buf: &mut [u8],
    spin: Duration,
) -> std::io::Result<(usize, SocketAddr)> {
    if !spin.is_zero() {
        let stop = Instant::now() + spin;
        loop {
            match rustix::net::recvfrom(sock, &mut *buf, rustix::net::RecvFlags::DONTWAIT) {
                Ok((n, _, Some(from))) => {
                    if let Ok(from) = SocketAddr::try_from(from) {
                        return Ok((n, from));
                    }
                }
                Ok(_) | Err(rustix::io::Errno::AGAIN) => {}
                Err(e) => return Err(e.into()),
            }
            if Instant::now() >= stop {
                break;
            }
            std::hint::spin_loop();
        }
    }
    sock.recv_from(buf)
}

fn plain_server(sock: &UdpSocket, sink: bool, stop: &AtomicBool, spin: Duration) {
    let mut buf = vec![0u8; 65_536];
    let mut count = Count::default();
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, src)) = plain_recv(sock, &mut buf, spin) else {
            continue;
        };
        if !sink {
            let _ = sock.send_to(&buf[..n], src);
        } else if &buf[..n] != END {
            count.add(n);
        } else {
            let _ = sock.send_to(&count.take(), src);
        }
    }
}

/// What a sink received of a stream: bytes, and when the first and last message came.
#[derive(Default)]
struct Count {
    bytes: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl Count {
    fn add(&mut self, n: usize) {
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
        self.bytes += n as u64;
    }

    /// The answer to END (bytes, then ns from the first message to the last), and a fresh
    /// count.
    fn take(&mut self) -> Vec<u8> {
        let ns = match (self.first, self.last) {
            (Some(a), Some(b)) => (b - a).as_nanos() as u64,
            _ => 0,
        };
        let mut r = self.bytes.to_le_bytes().to_vec();
        r.extend_from_slice(&ns.to_le_bytes());
        *self = Count::default();
        r
    }
}

fn quantile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(f64::NAN)
}

/// Measures every size from namespace `ns` (a client thread there; its real-time socket
/// with AF_XDP on interface `xdp`, if given).
fn measure(
    a: &RtppArgs,
    path: &str,
    sizes: &[usize],
    (ns, xdp): (&str, Option<String>),
    addrs: (Ipv4Addr, Ipv4Addr),
    cpu: Option<usize>,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
    let (ns, sizes, iters, stream) = (ns.to_string(), sizes.to_vec(), a.iters, a.stream_bytes);
    let spin = a.spin;
    let path = path.to_string();
    let got = std::thread::spawn(move || -> Result<Vec<Row>, String> {
        netns::enter(&ns).map_err(|e| e.to_string())?;
        pin(cpu)?;
        let mut rt = RtSocket::open(
            SocketAddr::from((addrs.0, 0)),
            rt_config(spin, xdp.as_deref())?,
        )
        .map_err(|e| e.to_string())?;
        let plain = UdpSocket::bind(SocketAddr::from((addrs.0, 0))).map_err(|e| e.to_string())?;
        plain
            .set_read_timeout(Some(Duration::from_secs(1)))
            .map_err(|e| e.to_string())?;
        let spin = Duration::from_micros(spin);
        let dst = |k: usize| SocketAddr::from((addrs.1, PORTS[k]));
        let mut out = Vec::new();
        for &size in &sizes {
            // In blocks of 50, the paths taking turns: both see the same machine.
            let (mut rt_half, mut pl_half) = (Vec::new(), Vec::new());
            let (mut rt_lost, mut plain_lost) = (0, 0);
            let mut left = iters;
            while left > 0 {
                let n = left.min(50);
                rt_pingpong(&mut rt, dst(0), size, n, &mut rt_half, &mut rt_lost)?;
                plain_pingpong(&plain, dst(1), size, n, spin, &mut pl_half, &mut plain_lost)?;
                left -= n;
            }
            if rt_half.is_empty() || pl_half.is_empty() {
                return Err(format!("{path} {size} B: no ping-pong came back"));
            }
            let (rt_p50, rt_p99) = (quantile(&mut rt_half, 0.5), quantile(&mut rt_half, 0.99));
            let (pl_p50, pl_p99) = (quantile(&mut pl_half, 0.5), quantile(&mut pl_half, 0.99));
            let count = (stream / size).clamp(100, 50_000);
            let rt_mbps = rt_stream(&mut rt, dst(2), size, count)?;
            let plain_mbps = plain_stream(&plain, dst(3), size, count, spin)?;
            eprintln!(
                "rtpp: {path} {size} B: RT {rt_p50:.1}/{rt_p99:.1} us {rt_mbps:.1} Mbit/s, \
                 plain {pl_p50:.1}/{pl_p99:.1} us {plain_mbps:.1} Mbit/s \
                 (pings lost: RT {rt_lost}, plain {plain_lost})"
            );
            out.push(Row {
                path: path.clone(),
                size,
                rt_p50_us: rt_p50,
                rt_p99_us: rt_p99,
                plain_p50_us: pl_p50,
                plain_p99_us: pl_p99,
                rt_mbps,
                plain_mbps,
                rt_lost,
                plain_lost,
            });
        }
        if let Some(x) = rt.stats().xdp {
            eprintln!(
                "rtpp: {path}: the client's AF_XDP path sent {} frames and received {} \
                 ({} datagrams through the kernel, {} frames dropped malformed)",
                x.frames_sent, x.frames_received, x.kernel_sends, x.malformed
            );
        }
        Ok(out)
    })
    .join()
    .map_err(|_| "the client panicked".to_string())??;
    rows.extend(got);
    Ok(())
}

/// Sends a message of `size` bytes on the real-time path, waiting for room if need be.
fn rt_send(
    sock: &mut RtSocket,
    dst: SocketAddr,
    data: Option<&[u8]>,
    size: usize,
) -> Result<(), String> {
    let mut buf = loop {
        if let Some(b) = sock.claim() {
            break b;
        }
        sock.poll(Duration::from_millis(1), |_| {})
            .map_err(|e| e.to_string())?;
    };
    if let Some(d) = data {
        buf.as_mut()[..d.len()].copy_from_slice(d);
    }
    let mut pending = Some(buf);
    while let Some(b) = pending.take() {
        if let Err(e) = sock.send(b, size, dst, Class::Rt, None) {
            pending = Some(e.buf);
            sock.poll(Duration::from_micros(200), |_| {})
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// `iters` real-time ping-pongs after 10 not recorded; half round trips, µs, added to `half`.
fn rt_pingpong(
    sock: &mut RtSocket,
    dst: SocketAddr,
    size: usize,
    iters: usize,
    half: &mut Vec<f64>,
    lost: &mut usize,
) -> Result<(), String> {
    for i in 0..iters + 10 {
        // A tag (from 4 bytes on), so that a late answer to a lost ping is not taken for
        // this one's.
        let tag = next_tag();
        let t = Instant::now();
        rt_send(sock, dst, Some(&tag[..size.min(4)]), size)?;
        let mut back = false;
        while !back {
            if t.elapsed() > Duration::from_secs(1) {
                break;
            }
            sock.poll(Duration::from_millis(100), |m| {
                back |= m.data.len() == size && m.data[..size.min(4)] == tag[..size.min(4)]
            })
            .map_err(|e| e.to_string())?;
        }
        record(back, i, t, half, lost);
    }
    Ok(())
}

/// The same over plain sockets (a read timeout of 1 s, after `spin`).
fn plain_pingpong(
    sock: &UdpSocket,
    dst: SocketAddr,
    size: usize,
    iters: usize,
    spin: Duration,
    half: &mut Vec<f64>,
    lost: &mut usize,
) -> Result<(), String> {
    let mut msg = vec![0x5au8; size];
    let mut buf = vec![0u8; 65_536];
    for i in 0..iters + 10 {
        let tag = next_tag();
        let k = size.min(4);
        msg[..k].copy_from_slice(&tag[..k]);
        let t = Instant::now();
        sock.send_to(&msg, dst).map_err(|e| e.to_string())?;
        let back = loop {
            match plain_recv(sock, &mut buf, spin) {
                Ok((n, _)) if n == size && buf[..k] == tag[..k] => break true,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    break false
                }
                Err(e) => return Err(format!("plain ping of {size} B: {e}")),
            }
        };
        record(back, i, t, half, lost);
    }
    Ok(())
}

/// One ping's outcome: lost, or (past the first 10) half its round trip, µs.
fn record(back: bool, i: usize, sent: Instant, half: &mut Vec<f64>, lost: &mut usize) {
    if !back {
        *lost += 1;
    } else if i >= 10 {
        half.push(sent.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
}

/// A fresh ping tag.
fn next_tag() -> [u8; 4] {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed).to_le_bytes()
}

/// Payload the sink counted over its time from the first message to the last, Mbit/s.
fn mbps(reply: &[u8]) -> f64 {
    let at = |i: usize| {
        reply
            .get(i..i + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    let (bytes, ns) = (at(0), at(8));
    if ns == 0 {
        0.0
    } else {
        bytes as f64 * 8.0 / (ns as f64 * 1e-9) / 1e6
    }
}

fn rt_stream(
    sock: &mut RtSocket,
    dst: SocketAddr,
    size: usize,
    count: usize,
) -> Result<f64, String> {
    for _ in 0..count {
        rt_send(sock, dst, None, size)?;
    }
    // Drain what waits, then end the stream.
    while sock.queued() != (0, 0) {
        sock.poll(Duration::from_micros(200), |_| {})
            .map_err(|e| e.to_string())?;
    }
    std::thread::sleep(Duration::from_millis(20));
    rt_send(sock, dst, Some(END), END.len())?;
    let mut reply = None;
    let end = Instant::now() + Duration::from_secs(2);
    while reply.is_none() && Instant::now() < end {
        sock.poll(Duration::from_millis(10), |m| {
            if m.data.len() == 16 {
                reply = Some(m.data.to_vec());
            }
        })
        .map_err(|e| e.to_string())?;
    }
    let reply = reply.ok_or("the real-time sink did not answer")?;
    Ok(mbps(&reply))
}

fn plain_stream(
    sock: &UdpSocket,
    dst: SocketAddr,
    size: usize,
    count: usize,
    spin: Duration,
) -> Result<f64, String> {
    let msg = vec![0x5au8; size];
    for _ in 0..count {
        // A full socket buffer blocks; ENOBUFS drops: either way the sink counts.
        let _ = sock.send_to(&msg, dst);
    }
    std::thread::sleep(Duration::from_millis(20));
    sock.send_to(END, dst).map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    loop {
        let (n, _) = plain_recv(sock, &mut buf, spin)
            .map_err(|e| format!("the plain sink did not answer: {e}"))?;
        if n == 16 {
            return Ok(mbps(&buf[..16]));
        }
    }
}
