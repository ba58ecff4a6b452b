//! `slipstream bench rtmix`: real-time messages beside a bulk SRT transfer from the same
//! process, through one emulated link, without and with the process's smoother
//! ([`HostSmoother`]): the real-time messages' one-way delay and deadline misses, and what
//! the bulk transfer moved. Without the smoother the bulk transfer fills the link's queue and
//! every real-time message waits behind it; with it (credit and the link's rate known) the
//! transfer hands the kernel only what the link drains.
//!
//! With `--senders N` (2 or more) the same runs on `N` hosts of an emulated switch, each
//! host a process of its own (its own smoother, real-time sender and SRT transfer), all
//! sending to one receiving host whose switch port is the bottleneck: Table 4's topology
//! with SRT bulk transfers as the non-real-time load.

use clap::Args;
use serde::Serialize;
use slipstream::datapath::Impairment;
use slipstream::netem::{self, netns};
use slipstream::rt::{Class, HostSmoother, RtConfig, RtSocket, SmootherConfig};
use slipstream::{ConnConfig, Endpoint, EndpointOptions, Mode};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `bench rtmix`.
#[derive(Debug, Args)]
pub struct RtmixArgs {
    /// The link's rate, Mbit/s.
    #[arg(long, default_value_t = 100)]
    pub mbit: u64,
    /// The link's queue, bytes (drop-tail).
    #[arg(long, default_value = "1m")]
    pub queue: String,
    /// Seconds of traffic per run.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Real-time messages a second (256 bytes each).
    #[arg(long, default_value_t = 1000)]
    pub rt_rate: u64,
    /// Real-time deadline, ms.
    #[arg(long, default_value_t = 5.0)]
    pub deadline_ms: f64,
    /// Sending hosts: 1 (one link) or 2 to 8 (hosts of an emulated switch sharing the
    /// receiver's port, whose queue is `--queue`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub senders: u32,
    /// Start each smoother with an empty bucket at the longest period (the paper starts full,
    /// at RP0).
    #[arg(long)]
    pub cautious: bool,
    /// Spread each refresh's credits evenly over the period (the alternative to Fig. 5's
    /// all-at-once).
    #[arg(long)]
    pub spread: bool,
    /// Adapt each smoother's period every MS instead of once per refresh.
    #[arg(long, value_name = "MS")]
    pub adapt_every: Option<f64>,
    /// Print a JSON summary as the last line.
    #[arg(long)]
    pub json: bool,
}

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub smoother: bool,
    pub rt_sent: u64,
    pub rt_received: u64,
    pub rt_late: u64,
    pub rt_p50_us: f64,
    pub rt_p99_us: f64,
    pub rt_max_us: f64,
    pub bulk_mbps: f64,
    /// Each sender's bulk transfer, Mbit/s (in the order their transfers finished).
    pub bulk_mbps_each: Vec<f64>,
    /// Jain's fairness index of those.
    pub bulk_jain: f64,
    /// Late real-time messages of each sender.
    pub rt_late_each: Vec<u64>,
    /// Times the smoother found no credit or room for the bulk transfer (with it).
    pub held: u64,
    /// Late real-time messages by second of the run.
    pub late_by_second: Vec<u64>,
    /// How far behind its schedule the real-time sender ran at most, µs, and how many of
    /// its messages it sent 1 ms or more late (their lateness is the sender's, not the
    /// network's).
    pub sender_lag_max_us: u64,
    pub sender_lagged_1ms: u64,
}

const RT_PORT: u16 = 7951;
const SRT_PORT: u16 = 7952;
const RT_SIZE: usize = 256;

/// Runs `bench rtmix`.
pub fn run(a: &RtmixArgs) -> Result<(), String> {
    if !netns::is_root() {
        return Err("bench rtmix needs root: it runs over the link emulator".into());
    }
    if a.mbit == 0 || a.rt_rate == 0 || a.seconds <= 0.0 || a.deadline_ms <= 0.0 {
        return Err("--mbit, --rt-rate, --seconds and --deadline-ms must be positive".into());
    }
    let name = format!("rtmix{}", std::process::id());
    let imp = Impairment::parse(&format!("rate={}mbit,queue={}", a.mbit, a.queue))?;
    let exe = std::env::current_exe().map_err(|e| format!("finding slipstream: {e}"))?;
    let n = a.senders as usize;
    let (guard, hosts) = if n == 1 {
        let spec = netem::Spec {
            ab: imp.clone(),
            ba: imp,
            mtu: 1500,
        };
        let info = netem::up(&name, &spec, &exe)?;
        let hosts = Hosts {
            senders: vec![(info.a.netns.clone(), info.a.addr)],
            receiver: (info.b.netns.clone(), info.b.addr),
        };
        (super::rtpp::Guard::Netem(name), hosts)
    } else {
        // Access links at the port's rate: the port toward the receiver is the bottleneck.
        let spec = netem::SwitchSpec {
            hosts: n + 1,
            access: Impairment::parse(&format!("rate={}mbit,queue=256k", a.mbit))?,
            port: imp,
            mtu: 1500,
        };
        let info = netem::switch_up(&name, &spec, &exe)?;
        let hosts = Hosts {
            senders: info.hosts[..n]
                .iter()
                .map(|h| (h.netns.clone(), h.addr))
                .collect(),
            receiver: (info.hosts[n].netns.clone(), info.hosts[n].addr),
        };
        (super::rtpp::Guard::Netem(name), hosts)
    };
    let mut runs = Vec::new();
    for with in [false, true] {
        eprintln!(
            "rtmix: {} the smoother, {} s, {n} sender{} over {} Mbit/s",
            if with { "with" } else { "without" },
            a.seconds,
            if n == 1 { "" } else { "s" },
            a.mbit
        );
        let r = one(a, &hosts, with)?;
        eprintln!(
            "rtmix:   RT {} of {} received, {} late {:?}; one-way p50 {:.0} p99 {:.0} max {:.0} us; \
             bulk {:.1} Mbit/s {:.1?} (Jain {:.3}); held {}",
            r.rt_received,
            r.rt_sent,
            r.rt_late,
            r.rt_late_each,
            r.rt_p50_us,
            r.rt_p99_us,
            r.rt_max_us,
            r.bulk_mbps,
            r.bulk_mbps_each,
            r.bulk_jain,
            r.held
        );
        runs.push(r);
    }
    drop(guard);
    println!("| smoother | RT received of sent | RT late | one-way p50 / p99 / max us | bulk Mbit/s |\n|---|---:|---:|---|---:|");
    for r in &runs {
        println!(
            "| {} | {} of {} | {} | {:.0} / {:.0} / {:.0} | {:.1} |",
            if r.smoother { "on" } else { "off" },
            r.rt_received,
            r.rt_sent,
            r.rt_late,
            r.rt_p50_us,
            r.rt_p99_us,
            r.rt_max_us,
            r.bulk_mbps
        );
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&runs).map_err(|e| e.to_string())?
        );
    }
    Ok(())
}

/// Where a run's hosts are: each sender's namespace and address, and the receiver's.
struct Hosts {
    senders: Vec<(String, Ipv4Addr)>,
    receiver: (String, Ipv4Addr),
}

/// What the real-time sink saw: one-way delays (µs), late messages by sender address and
/// by second of the run.
type Sink = (Vec<u64>, Vec<(Ipv4Addr, u64)>, Vec<u64>);

/// One run: every sender host sends real-time messages and a bulk SRT transfer to the
/// receiving host, each host with its own smoother when `with`.
fn one(a: &RtmixArgs, hosts: &Hosts, with: bool) -> Result<Run, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let secs = a.seconds;
    let n = hosts.senders.len();
    let b = hosts.receiver.1;
    // Receivers on the receiving host: the real-time sink and the SRT listener.
    let (nsb, stop_b) = (hosts.receiver.0.clone(), stop.clone());
    let per_sec = a.rt_rate;
    let rt_rx = std::thread::spawn(move || -> Result<Sink, String> {
        netns::enter(&nsb).map_err(|e| e.to_string())?;
        let mut s = RtSocket::open(SocketAddr::from((b, RT_PORT)), RtConfig::default())
            .map_err(|e| e.to_string())?;
        let mut lat = Vec::new();
        let mut late: Vec<(Ipv4Addr, u64)> = Vec::new();
        // Late messages by second of the run (message numbers count from 0 at its start).
        let mut by_sec = vec![0u64; secs.ceil() as usize + 1];
        let end = Instant::now() + Duration::from_secs_f64(secs + 10.0);
        while !stop_b.load(Ordering::Relaxed) && Instant::now() < end {
            s.poll(Duration::from_millis(5), |m| {
                lat.push(m.one_way.as_micros() as u64);
                if m.late {
                    let ip = match m.src.ip() {
                        std::net::IpAddr::V4(v) => v,
                        std::net::IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
                    };
                    match late.iter().position(|(a, _)| *a == ip) {
                        Some(i) => late[i].1 += 1,
                        None if late.len() < 64 => late.push((ip, 1)),
                        None => {}
                    }
                    let k = ((u64::from(m.id) / per_sec) as usize).min(by_sec.len() - 1);
                    by_sec[k] += 1;
                }
            })
            .map_err(|e| e.to_string())?;
        }
        Ok((lat, late, by_sec))
    });
    let nsb = hosts.receiver.0.clone();
    let srt_rx = std::thread::spawn(move || -> Result<Vec<f64>, String> {
        netns::enter(&nsb).map_err(|e| e.to_string())?;
        let ep = Endpoint::bind(SocketAddr::from((b, SRT_PORT)), EndpointOptions::default())
            .map_err(|e| e.to_string())?;
        ep.listen(ConnConfig::new(Mode::File))
            .map_err(|e| e.to_string())?;
        let mut drains = Vec::new();
        for _ in 0..n {
            let c = ep
                .accept_timeout(Duration::from_secs(10))
                .map_err(|e| e.to_string())?;
            drains.push(std::thread::spawn(move || {
                let mut buf = vec![0u8; 1 << 20];
                let mut got = 0u64;
                let start = Instant::now();
                while let Ok(k) = c.recv(&mut buf) {
                    if k == 0 {
                        break;
                    }
                    got += k as u64;
                }
                got as f64 * 8.0 / start.elapsed().as_secs_f64().max(1e-9) / 1e6
            }));
        }
        drains
            .into_iter()
            .map(|d| d.join().map_err(|_| "an SRT receiver panicked".to_string()))
            .collect()
    });
    std::thread::sleep(Duration::from_millis(300));
    let rate = a.mbit * 1_000_000;
    let mut senders = Vec::new();
    let mut smoothers = Vec::new();
    for (ns, _) in &hosts.senders {
        // Each host its own process: its own smoother, with credit for its link's rate in
        // full datagrams per refresh and the paper's period.
        let host = with.then(|| {
            let rp = Duration::from_millis(10);
            let depth = ((rate as f64 * rp.as_secs_f64()) / (1500.0 * 8.0)).ceil() as u32;
            let cfg = SmootherConfig {
                depth: depth.max(1),
                cautious_start: a.cautious,
                spread: a.spread,
                adapt_every: a
                    .adapt_every
                    .map(|v| Duration::from_secs_f64(v.clamp(0.01, 60_000.0) / 1e3)),
                ..SmootherConfig::default()
            };
            HostSmoother::with_link(cfg, rate, 2)
        });
        smoothers.push(host.clone());
        senders.push(send_from(a, ns.clone(), b, host));
    }
    let mut rt_sent = 0;
    let (mut lag_max_us, mut lagged) = (0, 0);
    for (rt_tx, srt_tx) in senders {
        let (sent, lag, late) = rt_tx.join().map_err(|_| "real-time sender panicked")??;
        rt_sent += sent;
        lag_max_us = lag_max_us.max(lag);
        lagged += late;
        srt_tx.join().map_err(|_| "SRT sender panicked")??;
    }
    let bulk_each = srt_rx.join().map_err(|_| "SRT receiver panicked")??;
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (mut lat, late_by_src, late_by_second) =
        rt_rx.join().map_err(|_| "real-time receiver panicked")??;
    lat.sort_unstable();
    let q = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p).round() as usize)
            .map_or(0.0, |&v| v as f64)
    };
    let rt_late_each: Vec<u64> = hosts
        .senders
        .iter()
        .map(|(_, ip)| late_by_src.iter().find(|(a, _)| a == ip).map_or(0, |x| x.1))
        .collect();
    let bulk: f64 = bulk_each.iter().sum();
    let squares: f64 = bulk_each.iter().map(|x| x * x).sum();
    Ok(Run {
        smoother: with,
        rt_sent,
        rt_received: lat.len() as u64,
        rt_late: late_by_src.iter().map(|x| x.1).sum(),
        rt_p50_us: q(0.5),
        rt_p99_us: q(0.99),
        rt_max_us: lat.last().map_or(0.0, |&v| v as f64),
        bulk_mbps: bulk,
        bulk_jain: if squares > 0.0 {
            bulk * bulk / (bulk_each.len() as f64 * squares)
        } else {
            0.0
        },
        bulk_mbps_each: bulk_each,
        rt_late_each,
        held: smoothers
            .iter()
            .flatten()
            .map(|h| h.stats().0.nrt_held)
            .sum(),
        late_by_second,
        sender_lag_max_us: lag_max_us,
        sender_lagged_1ms: lagged,
    })
}

/// A sender: what the real-time thread sent (messages, the most it ran behind its schedule
/// in µs, messages sent 1 ms or more late), and the bulk transfer's outcome.
type Sender = (
    std::thread::JoinHandle<Result<(u64, u64, u64), String>>,
    std::thread::JoinHandle<Result<(), String>>,
);

/// Starts one sending host in namespace `ns`: its real-time messages and its bulk SRT
/// transfer to `b`, both under `host` if given.
fn send_from(a: &RtmixArgs, ns: String, b: Ipv4Addr, host: Option<HostSmoother>) -> Sender {
    let secs = a.seconds;
    let (nsa, h2) = (ns.clone(), host.clone());
    let rt_count = (a.rt_rate as f64 * secs) as u64;
    let (rt_rate, deadline) = (a.rt_rate, Duration::from_secs_f64(a.deadline_ms / 1e3));
    let rt_tx = std::thread::spawn(move || -> Result<(u64, u64, u64), String> {
        netns::enter(&nsa).map_err(|e| e.to_string())?;
        let any = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
        let mut s = match &h2 {
            Some(h) => RtSocket::open_with_smoother(any, RtConfig::default(), h),
            None => RtSocket::open(any, RtConfig::default()),
        }
        .map_err(|e| e.to_string())?;
        let dst = SocketAddr::from((b, RT_PORT));
        let t0 = Instant::now() + Duration::from_millis(200);
        let mut sent = 0;
        // How far behind its schedule the sender ran: the most, and sends 1 ms or more late.
        let (mut lag_max, mut lagged) = (Duration::ZERO, 0u64);
        for i in 0..rt_count {
            let at = t0 + Duration::from_secs_f64(i as f64 / rt_rate as f64);
            while Instant::now() < at {
                let wait = at.saturating_duration_since(Instant::now());
                s.poll(wait, |_| {}).map_err(|e| e.to_string())?;
            }
            let Some(buf) = s.claim() else { continue };
            let lag = Instant::now().saturating_duration_since(at);
            lag_max = lag_max.max(lag);
            lagged += u64::from(lag >= Duration::from_millis(1));
            if s.send_at(buf, RT_SIZE, dst, Class::Rt, Some(deadline), at)
                .is_ok()
            {
                sent += 1;
            }
        }
        Ok((sent, lag_max.as_micros() as u64, lagged))
    });
    let srt_tx = std::thread::spawn(move || -> Result<(), String> {
        netns::enter(&ns).map_err(|e| e.to_string())?;
        let mut opts = EndpointOptions::default();
        opts.set_smoother(host);
        let ep = Endpoint::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)), opts)
            .map_err(|e| e.to_string())?;
        let c = ep
            .connect(SocketAddr::from((b, SRT_PORT)), ConnConfig::new(Mode::File))
            .map_err(|e| e.to_string())?;
        let chunk = vec![0x42u8; 1 << 16];
        let end = Instant::now() + Duration::from_secs_f64(secs + 0.2);
        while Instant::now() < end {
            c.send(&chunk).map_err(|e| e.to_string())?;
        }
        c.close().map_err(|e| e.to_string())?;
        Ok(())
    });
    (rt_tx, srt_tx)
}
