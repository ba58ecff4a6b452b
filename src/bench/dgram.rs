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
use crate::datapath::{self, Datapath, DatapathStats, Tx, MAX_UDP_PAYLOAD};
use serde::Serialize;
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
    let phase = &AtomicU8::new(WARMUP);
    std::thread::scope(|s| {
        let (rx_ready, rx_ready_wait) = mpsc::channel();
        let receiver = s.spawn(move || {
            let side = open_side(&cfg.datapath, path.rx_ns.as_deref(), path.rx_ip);
            let dp = match side {
                Ok(dp) => {
                    let _ = rx_ready.send(dp.local_addr());
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
            let dp = match open_side(&cfg.datapath, path.tx_ns.as_deref(), path.tx_ip) {
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

/// The asynchronous datagram API (`crate::dgram`), measured like the other datapaths.
///
/// INTEGRATION POINT: not wired yet. Fill this in once `crate::dgram` exists: open one
/// asynchronous socket per side (entering `path.tx_ns` / `path.rx_ns` with
/// [`netns::enter`] first), flood and count like [`run_cell`], and build the [`CellResult`]
/// (the helpers `process_cpu` and `combine` may be reused).
pub fn run_async_cell(_cfg: &CellConfig, _path: &PathEnv) -> io::Result<CellResult> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "async datapath not available in this build",
    ))
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

/// Enters `ns` (if any), then opens datapath `name` on `ip`, port chosen by the kernel.
fn open_side(name: &str, ns: Option<&str>, ip: IpAddr) -> io::Result<Box<dyn Datapath>> {
    if let Some(ns) = ns {
        netns::enter(ns)?;
    }
    open_datapath(name, SocketAddr::new(ip, 0))
}

/// `datapath::open`, except that "plain" falls back to "std" (the same sendto/recvfrom
/// backend) while `open` does not know the name yet.
pub fn open_datapath(name: &str, addr: SocketAddr) -> io::Result<Box<dyn Datapath>> {
    match datapath::open(name, addr) {
        Err(e) if name == "plain" && e.kind() == io::ErrorKind::InvalidInput => {
            datapath::open("std", addr)
        }
        r => r,
    }
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
    fn unknown_and_async_datapaths_fail_cleanly() {
        let mut c = cfg(64);
        c.datapath = "no-such".into();
        let e = run_cell(&c, &PathEnv::loopback()).unwrap_err();
        assert!(e.to_string().contains("no-such"), "{e}");
        c.datapath = "async".into();
        let e = run_cell(&c, &PathEnv::loopback()).unwrap_err();
        assert!(e.to_string().contains("not available"), "{e}");
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
