//! `slipstream bench netem`: how faithfully the link emulator ([`slipstream::netem`]) does what it
//! is told. Three probes, each on a fresh emulator, with a UDP sender in namespace a and a
//! receiver in namespace b:
//!
//! - **delay**: UDP ping-pong at light load (one 64-byte datagram in flight); the added
//!   one-way delay is half the median round trip, compared with the configured delay.
//! - **rate**: a paced UDP flood at 110% of the configured rate; the rate delivered in IP
//!   bytes (payload + 28 bytes of headers) over the window, compared with the configured rate.
//!   The emulator's own CPU time over the window is read from its statistics.
//! - **loss**: numbered datagrams at a moderate rate; the measured loss ratio compared with
//!   the configured one, within three standard errors of a binomial draw. Bursty
//!   (Gilbert–Elliott) loss also reports the mean burst length.

use serde::Serialize;
use slipstream::datapath::Impairment;
use slipstream::netem::netns;
use slipstream::netem::{self, Spec};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

/// IP and UDP header bytes of an IPv4 datagram.
const HEADERS: usize = 28;
/// Payload of the rate and loss probes: a full 1500-byte IP packet.
const PAYLOAD: usize = 1472;
/// Port of the receivers in namespace b.
const PORT: u16 = 7700;

/// What to measure.
#[derive(Debug, Clone)]
pub struct Config {
    /// Configured one-way delays for the delay probe.
    pub delays: Vec<Duration>,
    /// Ping-pong round trips per delay.
    pub pings: usize,
    /// Configured rates (bit/s) for the rate probe.
    pub rates: Vec<u64>,
    /// Length of each rate probe.
    pub seconds: f64,
    /// Loss models for the loss probe, as `--netem` specs (`loss=1%`, `burst=1%/30%`).
    pub losses: Vec<String>,
    /// Datagrams per loss probe.
    pub datagrams: u64,
}

/// One delay measurement.
#[derive(Debug, Clone, Serialize)]
pub struct DelayResult {
    /// Configured one-way delay, ms.
    pub configured_ms: f64,
    /// Half the median round trip, ms.
    pub measured_ms: f64,
    /// Half the 99th-percentile round trip, ms.
    pub p99_ms: f64,
    /// measured − configured, ms.
    pub error_ms: f64,
    /// |error| ≤ 0.5 ms.
    pub ok: bool,
}

/// One rate measurement.
#[derive(Debug, Clone, Serialize)]
pub struct RateResult {
    /// Configured rate, Mbit/s.
    pub configured_mbps: f64,
    /// Offered by the sender (IP bytes), Mbit/s.
    pub offered_mbps: f64,
    /// Delivered (IP bytes), Mbit/s.
    pub delivered_mbps: f64,
    /// delivered / configured − 1, percent.
    pub error_pct: f64,
    /// |error| ≤ 2%.
    pub ok: bool,
    /// Emulator CPU over the window, percent of one core.
    pub emulator_cpu_pct: f64,
    /// Emulator CPU seconds per GB delivered.
    pub emulator_cpu_s_per_gb: f64,
}

/// One loss measurement.
#[derive(Debug, Clone, Serialize)]
pub struct LossResult {
    /// The loss model.
    pub model: String,
    /// Its long-run loss ratio, percent.
    pub configured_pct: f64,
    /// Measured, percent.
    pub measured_pct: f64,
    /// One standard error of a binomial draw of this size, percent.
    pub std_err_pct: f64,
    /// Mean length of runs of consecutive losses.
    pub mean_burst: f64,
    /// Datagrams sent.
    pub datagrams: u64,
    /// Within three standard errors.
    pub ok: bool,
}

/// Everything measured.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Report {
    /// Delay probes.
    pub delay: Vec<DelayResult>,
    /// Rate probes.
    pub rate: Vec<RateResult>,
    /// Loss probes.
    pub loss: Vec<LossResult>,
}

impl Report {
    /// Whether every probe is within its bound.
    pub fn ok(&self) -> bool {
        self.delay.iter().all(|d| d.ok)
            && self.rate.iter().all(|r| r.ok)
            && self.loss.iter().all(|l| l.ok)
    }

    /// The report as markdown tables.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        s += "| configured one-way delay | measured (RTT/2, median) | RTT/2 p99 | error | within 0.5 ms |\n";
        s += "|---:|---:|---:|---:|:---:|\n";
        for d in &self.delay {
            s += &format!(
                "| {:.3} ms | {:.3} ms | {:.3} ms | {:+.3} ms | {} |\n",
                d.configured_ms,
                d.measured_ms,
                d.p99_ms,
                d.error_ms,
                yes(d.ok)
            );
        }
        s += "\n| configured rate | offered | delivered (IP bytes) | error | within 2% | emulator CPU | emulator CPU s/GB |\n";
        s += "|---:|---:|---:|---:|:---:|---:|---:|\n";
        for r in &self.rate {
            s += &format!(
                "| {:.0} Mbit/s | {:.1} Mbit/s | {:.1} Mbit/s | {:+.2}% | {} | {:.0}% of a core | {:.2} |\n",
                r.configured_mbps,
                r.offered_mbps,
                r.delivered_mbps,
                r.error_pct,
                yes(r.ok),
                r.emulator_cpu_pct,
                r.emulator_cpu_s_per_gb
            );
        }
        s += "\n| loss model | configured | measured | standard error | mean burst | datagrams | within 3 s.e. |\n";
        s += "|---|---:|---:|---:|---:|---:|:---:|\n";
        for l in &self.loss {
            s += &format!(
                "| {} | {:.3}% | {:.3}% | {:.3}% | {:.2} | {} | {} |\n",
                l.model,
                l.configured_pct,
                l.measured_pct,
                l.std_err_pct,
                l.mean_burst,
                l.datagrams,
                yes(l.ok)
            );
        }
        s
    }
}

fn yes(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "**no**"
    }
}

/// A running emulator, taken down on drop.
struct Emulator {
    name: String,
    info: netem::Info,
}

impl Emulator {
    fn up(imp: Impairment) -> Result<Self, String> {
        let name = format!("ssacc{}", std::process::id());
        let exe = std::env::current_exe().map_err(|e| format!("finding slipstream: {e}"))?;
        let mut ba = imp.clone();
        ba.seed = imp.seed.wrapping_add(1);
        let spec = Spec {
            ab: imp,
            ba,
            mtu: 1500,
        };
        let info = netem::up(&name, &spec, &exe)?;
        Ok(Emulator { name, info })
    }

    fn b_addr(&self) -> SocketAddr {
        SocketAddr::from((self.info.b.addr, PORT))
    }

    /// The emulator's CPU seconds so far.
    fn cpu(&self) -> f64 {
        netem::stats(&self.name)
            .ok()
            .and_then(|v| v["cpu_seconds"].as_f64())
            .unwrap_or(f64::NAN)
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Err(e) = netem::down(&self.name) {
            eprintln!("warning: removing emulator {}: {e}", self.name);
        }
    }
}

/// Runs `f` on a thread inside namespace `ns`.
fn in_ns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> std::thread::JoinHandle<Result<T, String>> {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        netns::enter(&ns).map_err(|e| e.to_string())?;
        f()
    })
}

fn join<T>(h: std::thread::JoinHandle<Result<T, String>>) -> Result<T, String> {
    h.join()
        .map_err(|_| "a probe thread panicked".to_string())?
}

fn bind_b(timeout: Duration) -> Result<UdpSocket, String> {
    let s = UdpSocket::bind(("0.0.0.0", PORT)).map_err(|e| format!("bind: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    Ok(s)
}

/// Runs every probe of `cfg`, printing progress on stderr.
pub fn run(cfg: &Config) -> Result<Report, String> {
    if !netns::is_root() {
        return Err("bench netem needs root (it starts emulators)".into());
    }
    let mut report = Report::default();
    for &d in &cfg.delays {
        let r = delay_probe(d, cfg.pings)?;
        eprintln!(
            "delay {:?}: measured {:.3} ms (error {:+.3} ms)",
            d, r.measured_ms, r.error_ms
        );
        report.delay.push(r);
    }
    for &rate in &cfg.rates {
        let r = rate_probe(rate, cfg.seconds)?;
        eprintln!(
            "rate {} Mbit/s: delivered {:.1} Mbit/s ({:+.2}%), emulator CPU {:.0}%",
            r.configured_mbps, r.delivered_mbps, r.error_pct, r.emulator_cpu_pct
        );
        report.rate.push(r);
    }
    for model in &cfg.losses {
        let r = loss_probe(model, cfg.datagrams)?;
        eprintln!(
            "loss {model}: measured {:.3}% (configured {:.3}%, s.e. {:.3}%)",
            r.measured_pct, r.configured_pct, r.std_err_pct
        );
        report.loss.push(r);
    }
    Ok(report)
}

fn delay_probe(delay: Duration, pings: usize) -> Result<DelayResult, String> {
    let imp = Impairment::parse(&format!("delay={}us,rate=1gbit", delay.as_micros()))?;
    let emu = Emulator::up(imp)?;
    let dst = emu.b_addr();
    let timeout = delay * 4 + Duration::from_secs(1);
    let echo = in_ns(&emu.info.b.netns, move || {
        let s = bind_b(timeout)?;
        let mut buf = [0u8; 64];
        loop {
            match s.recv_from(&mut buf) {
                Ok((n, from)) => {
                    if n == 1 {
                        return Ok(());
                    }
                    s.send_to(&buf[..n], from).map_err(|e| e.to_string())?;
                }
                Err(e) => return Err(format!("echo: {e}")),
            }
        }
    });
    let pinger = in_ns(&emu.info.a.netns, move || {
        let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        let mut rtts = Vec::with_capacity(pings);
        let mut buf = [0u8; 64];
        // The echo server may still be binding: the first probes are retried.
        let mut warm = 0;
        while rtts.len() < pings {
            let t = Instant::now();
            s.send_to(&[7u8; 64], dst).map_err(|e| e.to_string())?;
            match s.recv_from(&mut buf) {
                Ok(_) => rtts.push(t.elapsed().as_secs_f64() * 1e3),
                Err(e) if warm < 5 => {
                    warm += 1;
                    let _ = e;
                }
                Err(e) => return Err(format!("ping: {e}")),
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        s.send_to(&[0u8], dst).map_err(|e| e.to_string())?;
        Ok(rtts)
    });
    let mut rtts = join(pinger)?;
    join(echo)?;
    drop(emu);
    rtts.sort_by(f64::total_cmp);
    let pct = |q: f64| rtts[((rtts.len() - 1) as f64 * q).round() as usize] / 2.0;
    let configured = delay.as_secs_f64() * 1e3;
    let measured = pct(0.5);
    let error = measured - configured;
    Ok(DelayResult {
        configured_ms: configured,
        measured_ms: measured,
        p99_ms: pct(0.99),
        error_ms: error,
        ok: error.abs() <= 0.5,
    })
}

/// Sends PAYLOAD-byte datagrams numbered from 0 to `dst` at `bps` (IP bytes) for `secs`
/// (or `count` datagrams); returns (datagrams sent, seconds).
fn paced_sender(dst: SocketAddr, bps: f64, secs: f64, count: u64) -> Result<(u64, f64), String> {
    let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| e.to_string())?;
    let mut buf = [0u8; PAYLOAD];
    let per = ((PAYLOAD + HEADERS) * 8) as f64 / bps;
    let t0 = Instant::now();
    let mut sent = 0u64;
    while sent < count && t0.elapsed().as_secs_f64() < secs {
        let due = t0 + Duration::from_secs_f64(per * sent as f64);
        let now = Instant::now();
        if due > now + Duration::from_micros(200) {
            std::thread::sleep(due - now);
        }
        buf[..8].copy_from_slice(&sent.to_be_bytes());
        match s.send_to(&buf, dst) {
            Ok(_) => sent += 1,
            // A full local queue: try again (the emulator reads it soon).
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
            Err(e) => return Err(format!("send: {e}")),
        }
    }
    Ok((sent, t0.elapsed().as_secs_f64()))
}

fn rate_probe(rate: u64, seconds: f64) -> Result<RateResult, String> {
    let imp = Impairment::parse(&format!("rate={rate}bit,queue=256k"))?;
    let emu = Emulator::up(imp)?;
    let dst = emu.b_addr();
    let warm = 0.5_f64.min(seconds / 4.0);
    let total = seconds + warm;
    // Counts bytes between the first datagram + `warm` and the end of the flood.
    let recv = in_ns(&emu.info.b.netns, move || {
        let s = bind_b(Duration::from_millis(500))?;
        let mut buf = [0u8; 2048];
        let mut start: Option<Instant> = None;
        let (mut bytes, mut last) = (0u64, None);
        while let Ok((n, _)) = s.recv_from(&mut buf) {
            let now = Instant::now();
            let t0 = *start.get_or_insert(now);
            if now - t0 >= Duration::from_secs_f64(warm) {
                bytes += (n + HEADERS) as u64;
                last = Some(now);
            }
        }
        let t0 = start.ok_or("no datagram arrived")?;
        let window = last.map_or(0.0, |l| (l - t0).as_secs_f64() - warm);
        Ok((bytes, window))
    });
    std::thread::sleep(Duration::from_millis(100));
    let cpu0 = emu.cpu();
    let sender = in_ns(&emu.info.a.netns, move || {
        paced_sender(dst, rate as f64 * 1.1, total, u64::MAX)
    });
    let (sent, secs) = join(sender)?;
    let cpu = emu.cpu() - cpu0;
    let (bytes, window) = join(recv)?;
    drop(emu);
    let delivered = if window > 0.0 {
        bytes as f64 * 8.0 / window
    } else {
        0.0
    };
    let error = (delivered / rate as f64 - 1.0) * 100.0;
    let gb = bytes as f64 / 1e9 * (secs / window.max(1e-9));
    Ok(RateResult {
        configured_mbps: rate as f64 / 1e6,
        offered_mbps: (sent * (PAYLOAD + HEADERS) as u64) as f64 * 8.0 / secs / 1e6,
        delivered_mbps: delivered / 1e6,
        error_pct: error,
        ok: error.abs() <= 2.0,
        emulator_cpu_pct: cpu / secs * 100.0,
        emulator_cpu_s_per_gb: cpu / gb.max(1e-9),
    })
}

fn loss_probe(model: &str, datagrams: u64) -> Result<LossResult, String> {
    let imp = Impairment::parse(&format!("{model},rate=1gbit"))?;
    let p = imp.mean_loss();
    // Bursty loss is correlated: the variance of its mean exceeds a binomial draw's by about
    // (1 + ρ)/(1 − ρ), with ρ = 1 − P − R the chain's lag-one correlation.
    let inflation = imp.link.burst.map_or(1.0, |ge| {
        let rho = 1.0 - ge.p_good_to_bad - ge.p_bad_to_good;
        ((1.0 + rho) / (1.0 - rho)).sqrt()
    });
    let emu = Emulator::up(imp)?;
    let dst = emu.b_addr();
    let n = datagrams;
    let recv = in_ns(&emu.info.b.netns, move || {
        let s = bind_b(Duration::from_millis(500))?;
        // A receive buffer for a second of the probe: a receiver that loses the CPU for a
        // few milliseconds (the machine is shared) must not add losses of its own.
        let _ = socket2::SockRef::from(&s).set_recv_buffer_size(32 << 20);
        let mut seen = vec![false; usize::try_from(n).map_err(|e| e.to_string())?];
        let mut buf = [0u8; 2048];
        while let Ok((len, _)) = s.recv_from(&mut buf) {
            if len >= 8 {
                let i = u64::from_be_bytes(buf[..8].try_into().unwrap_or_default());
                if let Some(slot) = usize::try_from(i).ok().and_then(|i| seen.get_mut(i)) {
                    *slot = true;
                }
            }
        }
        // Those it dropped all the same are not the model's.
        let drops = crate::cli::live::udp_kernel_drops_in("/proc/thread-self/net", PORT);
        Ok((seen, drops.unwrap_or(0)))
    });
    std::thread::sleep(Duration::from_millis(100));
    // 200 Mbit/s: well below every limit, so every loss is the model's.
    let sender = in_ns(&emu.info.a.netns, move || {
        paced_sender(dst, 200e6, f64::INFINITY, n)
    });
    let (sent, _) = join(sender)?;
    let (seen, kernel_drops) = join(recv)?;
    drop(emu);
    let lost = seen.iter().filter(|&&s| !s).count() as f64 - kernel_drops as f64;
    let bursts = seen.windows(2).filter(|w| w[0] && !w[1]).count()
        + usize::from(seen.first() == Some(&false));
    let measured = lost / sent as f64;
    let se = (p * (1.0 - p) / sent as f64).sqrt();
    Ok(LossResult {
        model: model.to_string(),
        configured_pct: p * 100.0,
        measured_pct: measured * 100.0,
        std_err_pct: se * inflation * 100.0,
        mean_burst: if bursts > 0 {
            lost / bursts as f64
        } else {
            0.0
        },
        datagrams: sent,
        ok: (measured - p).abs() <= 3.0 * se * inflation,
    })
}

/// Writes the report as `DIR/netem-accuracy.md` and `.json`.
pub fn write(report: &Report, dir: &Path, command: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let md = format!(
        "# Link emulator accuracy\n\nCommand: `{command}`\n\n{}",
        report.markdown()
    );
    let p = dir.join("netem-accuracy.md");
    std::fs::write(&p, md).map_err(|e| format!("{}: {e}", p.display()))?;
    let p = dir.join("netem-accuracy.json");
    let json = serde_json::to_string_pretty(report).map_err(|e| e.to_string())?;
    std::fs::write(&p, json + "\n").map_err(|e| format!("{}: {e}", p.display()))
}
