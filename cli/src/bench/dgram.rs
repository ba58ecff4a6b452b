//! One ttcp-style datagram cell: a sender thread floods fixed-size UDP payloads to a receiver
//! thread through a named datapath for a fixed time, and the receiver counts what arrives.
//!
//! Timeline, driven by the calling thread: both sides open their datapath (inside their
//! network namespace when the path is a veth pair), the sender floods during a warm-up that is
//! not counted, then during the measured window, then stops; the receiver drains what is
//! still in flight so loss compares totals. Each side snapshots its counters and datapath
//! statistics when it sees the window open and close. CPU time is the process's (user + sys,
//! all threads) over the window, from `CLOCK_PROCESS_CPUTIME_ID` (the same sum getrusage
//! reports, at nanosecond resolution).

use super::netns;
use serde::Serialize;
use slipstream::datapath::{self, Datapath, DatapathStats, Tx, MAX_UDP_PAYLOAD};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bytes of IPv4 + UDP headers: a payload of more than MTU minus this is fragmented.
pub const UDP_IP_HEADERS: usize = 28;
/// Datagrams (or GSO runs) per send call.
const TX_BATCH: usize = 64;
/// Bytes per send call with GSO runs, at most (keeps phase checks frequent).
const TX_BATCH_BYTES: usize = 1 << 20;
/// Receive wait per call, so the receiver notices the end of the window when idle.
const RX_POLL: Duration = Duration::from_millis(20);
/// After the window, the receiver drains until the link is quiet this long.
const DRAIN_QUIET: Duration = Duration::from_millis(100);
/// ... but no longer than this.
const DRAIN_MAX: Duration = Duration::from_secs(2);

const WARMUP: u8 = 0;
const MEASURE: u8 = 1;
const STOP: u8 = 2;

/// What to measure.
#[derive(Debug, Clone)]
pub struct CellConfig {
    /// Datapath name, as `datapath::open` knows it, or "async".
    pub datapath: String,
    /// Payload bytes per datagram, 1..=65507.
    pub size: usize,
    /// Measured window, seconds.
    pub seconds: f64,
    /// Warm-up before the window, seconds.
    pub warmup: f64,
}

/// Where the two threads run.
#[derive(Debug, Clone)]
pub struct PathEnv {
    /// "loopback" or "veth".
    pub name: &'static str,
    /// Network namespace of the sender and of the receiver (`None`: the caller's).
    pub tx_ns: Option<String>,
    pub rx_ns: Option<String>,
    /// Addresses the sender and the receiver bind.
    pub tx_ip: IpAddr,
    pub rx_ip: IpAddr,
    /// Link MTU, when it is a real link.
    pub mtu: Option<u32>,
}

impl PathEnv {
    /// Both threads in this namespace, on 127.0.0.1.
    pub fn loopback() -> Self {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        PathEnv {
            name: "loopback",
            tx_ns: None,
            rx_ns: None,
            tx_ip: lo,
            rx_ip: lo,
            mtu: None,
        }
    }

    /// Sender in side a, receiver in side b of `pair`.
    pub fn veth(pair: &netns::VethPair) -> Self {
        PathEnv {
            name: "veth",
            tx_ns: Some(pair.ns_a.clone()),
            rx_ns: Some(pair.ns_b.clone()),
            tx_ip: IpAddr::V4(pair.addr_a),
            rx_ip: IpAddr::V4(pair.addr_b),
            mtu: Some(pair.mtu),
        }
    }

    /// Whether `size`-byte payloads are fragmented at the IP level on this path (when sent as
    /// plain datagrams).
    pub fn fragments(&self, size: usize) -> bool {
        self.mtu.is_some_and(|m| size + UDP_IP_HEADERS > m as usize)
    }
}

/// The outcome of one cell.
#[derive(Debug, Clone, Serialize)]
pub struct CellResult {
    /// Datapath name as asked for.
    pub datapath: String,
    /// What the datapath calls itself.
    pub backend: String,
    /// Payload bytes per datagram.
    pub size: usize,
    /// "loopback" or "veth".
    pub path: String,
    /// Link MTU (veth only).
    pub mtu: Option<u32>,
    /// Whether payloads are larger than the link MTU allows unfragmented.
    pub ip_fragmented: bool,
    /// Datagrams per send operation (GSO run), 1 without segmentation offload.
    pub segments_per_send: usize,
    /// Measured window at the receiver, seconds.
    pub seconds: f64,
    /// Payload throughput received, Gbit/s.
    pub gbit_per_s: f64,
    /// Datagrams received per second.
    pub packets_per_s: f64,
    /// Process CPU seconds (user + sys) in the window per 10^9 payload bytes received.
    pub cpu_s_per_gb: Option<f64>,
    /// Process CPU seconds in the window.
    pub cpu_s: f64,
    /// Sender and receiver system calls in the window per datagram received.
    pub syscalls_per_packet: Option<f64>,
    pub tx_syscalls_per_packet: Option<f64>,
    pub rx_syscalls_per_packet: Option<f64>,
    /// Datagrams the sender handed to the kernel in the window.
    pub sent: u64,
    /// Datagrams received in the window.
    pub received: u64,
    /// Payload bytes received in the window.
    pub received_bytes: u64,
    /// Fraction of all datagrams sent (warm-up included) that never arrived.
    pub loss: f64,
    /// Sender datapath statistics, whole run.
    pub tx_stats: DatapathStats,
    /// Receiver datapath statistics, whole run.
    pub rx_stats: DatapathStats,
}

impl CellResult {
    /// One human-readable line.
    pub fn summary(&self) -> String {
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        format!(
            "{} {} B over {}: {:.3} Gbit/s, {:.3} Mpps, {} CPU s/GB, {} syscalls/packet \
             (tx {}, rx {}), sent {}, received {}, loss {:.2}%, {:.2} s",
            self.datapath,
            self.size,
            self.path,
            self.gbit_per_s,
            self.packets_per_s / 1e6,
            opt(self.cpu_s_per_gb),
            opt(self.syscalls_per_packet),
            opt(self.tx_syscalls_per_packet),
            opt(self.rx_syscalls_per_packet),
            self.sent,
            self.received,
            self.loss * 100.0,
            self.seconds
        )
    }
}

/// Checks a cell's parameters.
pub fn validate(cfg: &CellConfig) -> Result<(), String> {
    if !(1..=MAX_UDP_PAYLOAD).contains(&cfg.size) {
        return Err(format!(
            "--size {}: must be within 1..={MAX_UDP_PAYLOAD} bytes",
            cfg.size
        ));
    }
    if !(cfg.seconds.is_finite() && cfg.seconds > 0.0 && cfg.seconds <= 3600.0) {
        return Err(format!(
            "--seconds {}: must be more than 0 and at most 3600",
            cfg.seconds
        ));
    }
    if !(cfg.warmup.is_finite() && (0.0..=60.0).contains(&cfg.warmup)) {
        return Err(format!("--warmup {}: must be within 0..=60", cfg.warmup));
    }
    if cfg.datapath.is_empty() {
        return Err("--datapath: empty name".into());
    }
    Ok(())
}

/// Runs one cell on `path`.
pub fn run_cell(cfg: &CellConfig, path: &PathEnv) -> io::Result<CellResult> {
    validate(cfg).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    if cfg.datapath == "async" {
        return run_async_cell(cfg, path);
    }
    let name = cfg.datapath.as_str();
    run_pair(
        cfg,
        path,
        |ip| {
            let dp = datapath::open(name, SocketAddr::new(ip, 0))?;
            let addr = dp.local_addr()?;
            Ok((dp, addr))
        },
        receive,
        |ip| datapath::open(name, SocketAddr::new(ip, 0)),
        flood,
    )
}

/// Runs a receiver and a sender, each in its own thread (and network namespace, over veth),
/// through warm-up, the measured window and the stop; returns the combined result.
fn run_pair<R, S>(
    cfg: &CellConfig,
    path: &PathEnv,
    open_rx: impl FnOnce(IpAddr) -> io::Result<(R, SocketAddr)> + Send,
    receive: impl FnOnce(R, &AtomicU8) -> io::Result<SideReport> + Send,
    open_tx: impl FnOnce(IpAddr) -> io::Result<S> + Send,
    flood: impl FnOnce(S, SocketAddr, usize, &AtomicU8) -> io::Result<SideReport> + Send,
) -> io::Result<CellResult> {
    let phase = &AtomicU8::new(WARMUP);
    std::thread::scope(|s| {
        let (rx_ready, rx_ready_wait) = mpsc::channel();
        let receiver = s.spawn(move || {
            let side = enter(path.rx_ns.as_deref()).and_then(|()| open_rx(path.rx_ip));
            let dp = match side {
                Ok((dp, addr)) => {
                    let _ = rx_ready.send(Ok(addr));
                    dp
                }
                Err(e) => {
                    let _ = rx_ready.send(Err(io::Error::new(e.kind(), e.to_string())));
                    return Err(e);
                }
            };
            receive(dp, phase)
        });
        let dst = match rx_ready_wait.recv() {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => {
                let _ = receiver.join();
                return Err(annotate(e, "receiver"));
            }
            Err(_) => {
                return Err(joined(receiver.join(), "receiver")
                    .err()
                    .unwrap_or_else(|| io::Error::other("receiver ended early")))
            }
        };
        let (tx_ready, tx_ready_wait) = mpsc::channel();
        let sender = s.spawn(move || {
            let dp = match enter(path.tx_ns.as_deref()).and_then(|()| open_tx(path.tx_ip)) {
                Ok(dp) => {
                    let _ = tx_ready.send(Ok(()));
                    dp
                }
                Err(e) => {
                    let _ = tx_ready.send(Err(io::Error::new(e.kind(), e.to_string())));
                    return Err(e);
                }
            };
            flood(dp, dst, cfg.size, phase)
        });
        let started = tx_ready_wait.recv();
        let window = match started {
            Ok(Ok(())) => {
                sleep_secs(cfg.warmup);
                let cpu0 = process_cpu();
                phase.store(MEASURE, Ordering::Release);
                sleep_secs(cfg.seconds);
                phase.store(STOP, Ordering::Release);
                Ok(process_cpu() - cpu0)
            }
            Ok(Err(e)) => Err(annotate(e, "sender")),
            Err(_) => Err(io::Error::other("sender thread ended early")),
        };
        phase.store(STOP, Ordering::Release);
        let tx = joined(sender.join(), "sender");
        let rx = joined(receiver.join(), "receiver");
        let cpu_s = window?;
        Ok(combine(cfg, path, tx?, rx?, cpu_s))
    })
}

/// The asynchronous datagram API ([`slipstream::dgram`]), measured like the other datapaths: the
/// sender claims pool buffers, writes each payload in place and commits it (same-size sends
/// to one destination leave as GSO batches); the receiver keeps every pool buffer posted
/// (GRO on, so one completion may hold many datagrams) and re-posts each as it completes.
pub fn run_async_cell(cfg: &CellConfig, path: &PathEnv) -> io::Result<CellResult> {
    use slipstream::dgram::{AsyncOptions, AsyncSocket};
    let rx_opts = AsyncOptions {
        buffers: 256,
        buf_size: 65_536,
        reserve: 64,
        gro: true,
        socket_buffer: 64 << 20,
        ..AsyncOptions::default()
    };
    let tx_opts = AsyncOptions {
        buf_size: cfg.size.max(1),
        socket_buffer: 64 << 20,
        ..AsyncOptions::default()
    };
    run_pair(
        cfg,
        path,
        |ip| {
            let s = AsyncSocket::bind(SocketAddr::new(ip, 0), rx_opts)?;
            let addr = s.local_addr()?;
            Ok((s, addr))
        },
        async_receive,
        |ip| AsyncSocket::bind(SocketAddr::new(ip, 0), tx_opts),
        async_flood,
    )
}

/// The datapath counters an asynchronous socket's statistics correspond to.
fn async_stats(s: &slipstream::dgram::AsyncStats) -> DatapathStats {
    let mut d = DatapathStats::default();
    d.sent = s.sent_datagrams;
    d.received = s.received_datagrams;
    d.syscalls = s.syscalls;
    d.gso_sends = s.gso_sends;
    d.gro_batches = s.gro_batches;
    d.zerocopy_completed = s.zerocopy;
    d.zerocopy_copied = s.copied;
    d.send_errors = s.send_errors;
    d.degraded = s.degraded;
    d
}

fn async_flood(
    mut sock: slipstream::dgram::AsyncSocket,
    dst: SocketAddr,
    size: usize,
    phase: &AtomicU8,
) -> io::Result<SideReport> {
    let snap = |sock: &slipstream::dgram::AsyncSocket| {
        let st = sock.stats();
        Snap {
            at: Instant::now(),
            datagrams: st.sent_datagrams,
            bytes: st.sent_datagrams * size as u64,
            stats: async_stats(&st),
        }
    };
    let mut start = None;
    let mut seq = 0u64;
    let end = loop {
        let p = phase.load(Ordering::Acquire);
        if p >= MEASURE && start.is_none() {
            start = Some(snap(&sock));
        }
        if p == STOP {
            break snap(&sock);
        }
        // Claim, write in place, commit: until the pool runs dry, then take completions
        // (their buffers drop back into the pool).
        for _ in 0..64 {
            let Some(mut buf) = sock.claim() else { break };
            let b = buf.as_mut();
            let n = b.len().min(8);
            b[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
            sock.commit(buf, size, dst);
            seq += 1;
        }
        if sock.poll_completions(drop)? == 0 && sock.free_buffers() == 0 {
            sock.wait_completions(RX_POLL, drop)?;
        }
    };
    let _ = sock.drain_sends(DRAIN_MAX);
    Ok(SideReport {
        backend: sock.engine(),
        segments: (MAX_UDP_PAYLOAD / size).clamp(1, 64),
        start: start.unwrap_or(end),
        end,
        total: snap(&sock),
    })
}

fn async_receive(
    mut sock: slipstream::dgram::AsyncSocket,
    phase: &AtomicU8,
) -> io::Result<SideReport> {
    use slipstream::dgram::OpKind;
    let (mut datagrams, mut bytes) = (0u64, 0u64);
    while let Some(b) = sock.claim() {
        sock.post_recv(b);
    }
    let mut repost = 0usize;
    let mut take =
        |sock: &mut slipstream::dgram::AsyncSocket, datagrams: &mut u64, bytes: &mut u64| {
            let got = sock.wait_completions(RX_POLL, |c| {
                if c.kind == OpKind::Recv && c.error.is_none() {
                    *datagrams += c.segments as u64;
                    *bytes += c.len as u64;
                }
                repost += 1;
            })?;
            for _ in 0..std::mem::take(&mut repost) {
                match sock.claim() {
                    Some(b) => {
                        sock.post_recv(b);
                    }
                    None => break,
                }
            }
            io::Result::Ok(got)
        };
    let snap = |sock: &slipstream::dgram::AsyncSocket, datagrams: u64, bytes: u64| Snap {
        at: Instant::now(),
        datagrams,
        bytes,
        stats: async_stats(&sock.stats()),
    };
    let mut start = None;
    let end = loop {
        take(&mut sock, &mut datagrams, &mut bytes)?;
        let p = phase.load(Ordering::Acquire);
        let now = snap(&sock, datagrams, bytes);
        if p >= MEASURE && start.is_none() {
            start = Some(now);
        }
        if p == STOP {
            break now;
        }
    };
    let t = Instant::now();
    let mut quiet = Instant::now();
    while quiet.elapsed() < DRAIN_QUIET && t.elapsed() < DRAIN_MAX {
        if take(&mut sock, &mut datagrams, &mut bytes)? > 0 {
            quiet = Instant::now();
        }
    }
    Ok(SideReport {
        backend: sock.engine(),
        segments: 1,
        start: start.unwrap_or(end),
        end,
        total: snap(&sock, datagrams, bytes),
    })
}

/// Counters one side keeps, and its datapath statistics, at one moment.
#[derive(Debug, Clone, Copy)]
struct Snap {
    at: Instant,
    datagrams: u64,
    bytes: u64,
    stats: DatapathStats,
}

/// One side's report: window start and end, whole-run totals.
#[derive(Debug)]
struct SideReport {
    backend: &'static str,
    segments: usize,
    start: Snap,
    end: Snap,
    total: Snap,
}

fn annotate(e: io::Error, side: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{side}: {e}"))
}

fn joined(r: std::thread::Result<io::Result<SideReport>>, side: &str) -> io::Result<SideReport> {
    match r {
        Ok(Ok(rep)) => Ok(rep),
        Ok(Err(e)) => Err(annotate(e, side)),
        Err(_) => Err(io::Error::other(format!("{side} thread panicked"))),
    }
}

fn sleep_secs(s: f64) {
    std::thread::sleep(Duration::from_secs_f64(s));
}

/// CPU time of the whole process (user + sys, all threads), seconds.
pub fn process_cpu() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Moves the calling thread into network namespace `ns`, if any.
fn enter(ns: Option<&str>) -> io::Result<()> {
    ns.map_or(Ok(()), netns::enter)
}

/// The sender: sends `size`-byte payloads to `dst` until told to stop.
fn flood(
    mut dp: Box<dyn Datapath>,
    dst: SocketAddr,
    size: usize,
    phase: &AtomicU8,
) -> io::Result<SideReport> {
    let segments = if dp.max_segments() > 1 {
        dp.max_segments().min(MAX_UDP_PAYLOAD / size).max(1)
    } else {
        1
    };
    let run = segments * size;
    let runs = if segments > 1 {
        (TX_BATCH_BYTES / run).clamp(1, TX_BATCH)
    } else {
        TX_BATCH
    };
    let buf: Vec<u8> = (0..run).map(|i| (i % 251) as u8).collect();
    // Every run reads the same bytes: the kernel copies them anyway.
    let txs = vec![
        Tx {
            dst,
            offset: 0,
            len: run,
            segment_size: size,
        };
        runs
    ];
    let snap = |dp: &dyn Datapath| {
        let stats = dp.stats();
        Snap {
            at: Instant::now(),
            datagrams: stats.sent,
            bytes: stats.sent * size as u64,
            stats,
        }
    };
    let mut start = None;
    let end = loop {
        let p = phase.load(Ordering::Acquire);
        if p >= MEASURE && start.is_none() {
            start = Some(snap(&*dp));
        }
        if p == STOP {
            break snap(&*dp);
        }
        dp.send(&buf, &txs)?;
    };
    Ok(SideReport {
        backend: dp.name(),
        segments,
        start: start.unwrap_or(end),
        end,
        total: end,
    })
}

/// The receiver: counts datagrams and bytes until told to stop, then drains.
fn receive(mut dp: Box<dyn Datapath>, phase: &AtomicU8) -> io::Result<SideReport> {
    let (mut datagrams, mut bytes) = (0u64, 0u64);
    let mut start = None;
    let end = loop {
        let batch = dp.recv(Some(RX_POLL))?;
        datagrams += batch.len() as u64;
        bytes += batch.iter().map(|(_, d)| d.len() as u64).sum::<u64>();
        let p = phase.load(Ordering::Acquire);
        let now = Snap {
            at: Instant::now(),
            datagrams,
            bytes,
            stats: dp.stats(),
        };
        if p >= MEASURE && start.is_none() {
            start = Some(now);
        }
        if p == STOP {
            break now;
        }
    };
    let t = Instant::now();
    let mut quiet = Instant::now();
    while quiet.elapsed() < DRAIN_QUIET && t.elapsed() < DRAIN_MAX {
        let batch = dp.recv(Some(RX_POLL))?;
        if !batch.is_empty() {
            datagrams += batch.len() as u64;
            bytes += batch.iter().map(|(_, d)| d.len() as u64).sum::<u64>();
            quiet = Instant::now();
        }
    }
    Ok(SideReport {
        backend: dp.name(),
        segments: 1,
        start: start.unwrap_or(end),
        end,
        total: Snap {
            at: Instant::now(),
            datagrams,
            bytes,
            stats: dp.stats(),
        },
    })
}

fn per(n: u64, d: u64) -> Option<f64> {
    (d > 0).then(|| n as f64 / d as f64)
}

/// Builds the result from both sides' reports and the window's CPU time.
fn combine(
    cfg: &CellConfig,
    path: &PathEnv,
    tx: SideReport,
    rx: SideReport,
    cpu_s: f64,
) -> CellResult {
    let secs = rx.end.at.duration_since(rx.start.at).as_secs_f64();
    let received = rx.end.datagrams - rx.start.datagrams;
    let received_bytes = rx.end.bytes - rx.start.bytes;
    let sent = tx.end.datagrams - tx.start.datagrams;
    let tx_sys = tx.end.stats.syscalls - tx.start.stats.syscalls;
    let rx_sys = rx.end.stats.syscalls - rx.start.stats.syscalls;
    let rate = |v: f64| if secs > 0.0 { v / secs } else { 0.0 };
    let loss = if tx.total.datagrams > 0 {
        (1.0 - rx.total.datagrams as f64 / tx.total.datagrams as f64).max(0.0)
    } else {
        0.0
    };
    CellResult {
        datapath: cfg.datapath.clone(),
        backend: tx.backend.to_string(),
        size: cfg.size,
        path: path.name.to_string(),
        mtu: path.mtu,
        ip_fragmented: path.fragments(cfg.size),
        segments_per_send: tx.segments,
        seconds: secs,
        gbit_per_s: rate(received_bytes as f64 * 8.0 / 1e9),
        packets_per_s: rate(received as f64),
        cpu_s_per_gb: (received_bytes > 0).then(|| cpu_s / (received_bytes as f64 / 1e9)),
        cpu_s,
        syscalls_per_packet: per(tx_sys + rx_sys, received),
        tx_syscalls_per_packet: per(tx_sys, received),
        rx_syscalls_per_packet: per(rx_sys, received),
        sent,
        received,
        received_bytes,
        loss,
        tx_stats: tx.total.stats,
        rx_stats: rx.total.stats,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(size: usize) -> CellConfig {
        CellConfig {
            datapath: "plain".into(),
            size,
            seconds: 0.1,
            warmup: 0.02,
        }
    }

    #[test]
    fn validation() {
        assert!(validate(&cfg(1)).is_ok());
        assert!(validate(&cfg(65507)).is_ok());
        assert!(validate(&cfg(0)).unwrap_err().contains("--size"));
        assert!(validate(&cfg(65508)).unwrap_err().contains("65507"));
        let mut c = cfg(64);
        c.seconds = 0.0;
        assert!(validate(&c).unwrap_err().contains("--seconds"));
        c.seconds = f64::NAN;
        assert!(validate(&c).is_err());
    }

    #[test]
    fn loopback_cell_counts() {
        let r = run_cell(&cfg(1000), &PathEnv::loopback()).unwrap();
        assert!(r.received > 0 && r.sent >= r.received / 2, "{r:?}");
        assert_eq!(r.received_bytes, r.received * 1000);
        assert!(r.gbit_per_s > 0.0 && r.syscalls_per_packet.unwrap() > 0.0);
        assert!(!r.ip_fragmented);
    }

    #[test]
    fn unknown_datapaths_fail_cleanly() {
        let mut c = cfg(64);
        c.datapath = "no-such".into();
        let e = run_cell(&c, &PathEnv::loopback()).unwrap_err();
        assert!(e.to_string().contains("no-such"), "{e}");
    }

    #[test]
    fn fragmentation_flag() {
        let p = PathEnv {
            mtu: Some(1500),
            ..PathEnv::loopback()
        };
        assert!(!p.fragments(1472));
        assert!(p.fragments(1473));
        assert!(!PathEnv::loopback().fragments(65507));
    }
}
