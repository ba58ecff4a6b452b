//! `slipstream bench small`: small real-time messages against Aeron on the same machine in
//! the same run. Both sides are one process with a sender and a receiver over UDP on
//! loopback (Aeron: an embedded media driver, as its samples use).
//!
//! - rate: `--count` messages of `--size` bytes sent as fast as the sender may, counted at
//!   the receiver (slipstream: messages delivered; a message the kernel dropped is counted
//!   lost, since real-time messages are not retransmitted). Slipstream runs twice: each
//!   message in a datagram of its own, and corked in bursts of `--burst` (`RtSocket::cork`:
//!   a burst leaves bundled, several messages to a datagram, as Aeron's term buffer packs
//!   them);
//! - latency: `--rates` messages a second for `--seconds`, after a second not recorded; each
//!   carries the moment it was meant to be sent, and latency is its arrival minus that moment
//!   (so that a stall of the sender is not hidden): p50, p99, p99.9 and max;
//! - round trip: `--pings` ping-pongs of one message (slipstream, plain blocking UDP sockets
//!   as the kernel's floor, and Aeron): p50, p99, p99.9 and max of the round trip;
//! - Aeron's own `EmbeddedThroughput` and `EmbeddedPingPong` samples as shipped (their
//!   driver set-up: dedicated threads, busy-spinning), for reference.
//!
//! Every measurement is repeated `--repeat` times, alternating the sides, and the median
//! reported.

mod aeron;
mod ours;

use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

/// Options of `bench small`.
#[derive(Debug, Args)]
pub struct SmallArgs {
    /// Message size, bytes (at least 16 for the latency runs).
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// Messages sent in each rate run.
    #[arg(long, default_value_t = 2_000_000)]
    pub count: u64,
    /// Paced rates of the latency runs, messages a second (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    pub rates: Vec<u64>,
    /// Messages per corked burst in slipstream's second rate run.
    #[arg(long, default_value_t = 64)]
    pub burst: u64,
    /// Recorded seconds of each latency run.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Round trips of each ping-pong run.
    #[arg(long, default_value_t = 20_000)]
    pub pings: u64,
    /// Runs of each measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Aeron media-driver set-ups of the harness, THREADING:IDLE (SHARED or DEDICATED;
    /// backoff or spin), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "SHARED:backoff")]
    pub aeron_setups: Vec<String>,
    /// Leave Aeron out (slipstream's side only).
    #[arg(long)]
    pub no_aeron: bool,
    /// Leave out Aeron's shipped samples (the harness still runs).
    #[arg(long)]
    pub no_samples: bool,
    /// The aeron-all jar (default: Maven's local repository, fetched with mvn if missing).
    #[arg(long)]
    pub aeron_jar: Option<PathBuf>,
    /// The aeron-all version to fetch.
    #[arg(long, default_value = "1.51.0")]
    pub aeron_version: String,
    /// Print a JSON summary as the last line.
    #[arg(long)]
    pub json: bool,
}

/// One rate run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rate {
    pub sent: u64,
    pub received: u64,
    pub seconds: f64,
    pub msgs_per_sec: f64,
}

/// One paced latency run, µs from the intended send time.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Paced {
    pub rate: u64,
    pub sent: u64,
    pub received: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

/// The `q` quantile of sorted nanoseconds, in µs.
pub fn pct(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1e3
}

/// The median run of one side and one measurement, with every run's figure.
#[derive(Debug, Clone, Serialize)]
pub struct Median<T> {
    pub side: String,
    pub median: T,
    pub runs: Vec<f64>,
}

/// The report.
#[derive(Debug, Serialize)]
pub struct Report {
    pub size: usize,
    pub repeat: usize,
    pub rate: Vec<Median<Rate>>,
    pub paced: Vec<Median<Paced>>,
    /// Round trips, µs (`rate` 0), median run by p99.
    pub pingpong: Vec<Median<Paced>>,
    /// Aeron's EmbeddedThroughput, median over runs of its median once-a-second rate.
    pub sample_throughput_msgs_per_sec: Option<f64>,
    /// Aeron's EmbeddedPingPong round trip, µs: p50, p99, p99.9, max (median run by p99).
    pub sample_pingpong_rtt_us: Option<[f64; 4]>,
    /// slipstream's rate over the best Aeron harness set-up's: one datagram a message, and
    /// corked bursts.
    pub rate_ratio: Option<f64>,
    pub rate_ratio_corked: Option<f64>,
    /// Per paced rate: slipstream's p99 over the best Aeron set-up's.
    pub p99_ratio: Vec<(u64, f64)>,
    pub aeron_jar: Option<String>,
}

/// Runs `bench small`.
pub fn run(a: &SmallArgs) -> Result<(), String> {
    if a.size == 0 || a.size > 1400 {
        return Err("--size: 1 to 1400 bytes (one datagram)".into());
    }
    if a.rates.iter().any(|&r| r == 0 || r > 1_000_000) {
        return Err("--rates: 1 to 1,000,000 messages a second".into());
    }
    if a.repeat == 0
        || a.count == 0
        || a.burst == 0
        || a.pings == 0
        || a.seconds.is_nan()
        || a.seconds <= 0.0
    {
        return Err("--repeat, --count, --burst, --pings and --seconds must be positive".into());
    }
    let mut setups = Vec::new();
    for s in &a.aeron_setups {
        match s.split_once(':') {
            Some((t @ ("SHARED" | "DEDICATED"), i @ ("backoff" | "spin"))) => {
                setups.push((t.to_string(), i.to_string()))
            }
            _ => {
                return Err(format!(
                    "--aeron-setups: {s} is not THREADING:IDLE (SHARED|DEDICATED:backoff|spin)"
                ))
            }
        }
    }
    let aeron = if a.no_aeron {
        None
    } else {
        Some(aeron::prepare(a.aeron_jar.as_deref(), &a.aeron_version)?)
    };
    let aeron_sides: Vec<String> = aeron
        .iter()
        .flat_map(|_| setups.iter().map(|(t, i)| format!("aeron {t}:{i}")))
        .collect();
    // Rate: slipstream one datagram a message, slipstream corked, then Aeron's set-ups.
    let rate_sides: Vec<String> = [
        "slipstream".to_string(),
        format!("slipstream corked {}", a.burst),
    ]
    .into_iter()
    .chain(aeron_sides.iter().cloned())
    .collect();
    let sides: Vec<String> = std::iter::once("slipstream".to_string())
        .chain(aeron_sides.iter().cloned())
        .collect();
    let mut rates: Vec<Vec<Rate>> = vec![Vec::new(); rate_sides.len()];
    // Ping-pong: slipstream, plain UDP, then Aeron's set-ups.
    let pp_sides: Vec<String> = ["slipstream".to_string(), "plain UDP".to_string()]
        .into_iter()
        .chain(aeron_sides.iter().cloned())
        .collect();
    let mut pps: Vec<Vec<Paced>> = vec![Vec::new(); pp_sides.len()];
    let mut paced: Vec<Vec<Vec<Paced>>> = vec![vec![Vec::new(); sides.len()]; a.rates.len()];
    let mut sample_tp = Vec::new();
    let mut sample_pp = Vec::new();
    for r in 0..a.repeat {
        eprintln!("small: run {} of {}", r + 1, a.repeat);
        for (k, side) in rate_sides.iter().enumerate() {
            let got = match k {
                0 => ours::rate(a.size, a.count, None)?,
                1 => ours::rate(a.size, a.count, Some(a.burst))?,
                _ => {
                    let (t, i) = &setups[k - 2];
                    let ae = aeron.as_ref().expect("aeron side");
                    ae.rate(a.size, a.count, t, i)?
                }
            };
            eprintln!(
                "small:   rate {side}: {:.0} msgs/s ({} of {} received)",
                got.msgs_per_sec, got.received, got.sent
            );
            rates[k].push(got);
        }
        for (j, &rate) in a.rates.iter().enumerate() {
            for (k, side) in sides.iter().enumerate() {
                let got = match k {
                    0 => ours::paced(a.size, rate, a.seconds)?,
                    _ => {
                        let (t, i) = &setups[k - 1];
                        let ae = aeron.as_ref().expect("aeron side");
                        ae.paced(a.size, rate, a.seconds, t, i)?
                    }
                };
                eprintln!(
                    "small:   {rate}/s {side}: p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} us ({} of {})",
                    got.p50_us, got.p99_us, got.p999_us, got.max_us, got.received, got.sent
                );
                paced[j][k].push(got);
            }
        }
        for (k, side) in pp_sides.iter().enumerate() {
            let got = match k {
                0 => ours::pingpong(a.size, a.pings)?,
                1 => ours::plain_pingpong(a.size, a.pings)?,
                _ => {
                    let (t, i) = &setups[k - 2];
                    let ae = aeron.as_ref().expect("aeron side");
                    ae.pingpong(a.size, a.pings, t, i)?
                }
            };
            eprintln!(
                "small:   round trip {side}: p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} us",
                got.p50_us, got.p99_us, got.p999_us, got.max_us
            );
            pps[k].push(got);
        }
        if let (Some(ae), false) = (&aeron, a.no_samples) {
            let tp = ae.sample_throughput(a.size, 8)?;
            eprintln!("small:   Aeron EmbeddedThroughput: {tp:.0} msgs/s");
            sample_tp.push(tp);
            let pp = ae.sample_pingpong(a.size, 2_000)?;
            eprintln!(
                "small:   Aeron EmbeddedPingPong RTT: p50 {:.1} p99 {:.1} p99.9 {:.1} max {:.1} us",
                pp[0], pp[1], pp[2], pp[3]
            );
            sample_pp.push(pp);
        }
    }
    let rate_medians: Vec<Median<Rate>> = rate_sides
        .iter()
        .zip(&rates)
        .map(|(s, v)| median(s, v, |x| x.msgs_per_sec))
        .collect();
    let mut paced_medians = Vec::new();
    let mut p99_ratio = Vec::new();
    for (j, &rate) in a.rates.iter().enumerate() {
        let ms: Vec<Median<Paced>> = sides
            .iter()
            .zip(&paced[j])
            .map(|(s, v)| median(s, v, |x| x.p99_us))
            .collect();
        let best = ms[1..]
            .iter()
            .map(|m| m.median.p99_us)
            .min_by(f64::total_cmp);
        if let Some(b) = best {
            p99_ratio.push((rate, ms[0].median.p99_us / b));
        }
        paced_medians.extend(ms);
    }
    let best_rate = rate_medians[2..]
        .iter()
        .map(|m| m.median.msgs_per_sec)
        .max_by(f64::total_cmp);
    sample_tp.sort_by(f64::total_cmp);
    sample_pp.sort_by(|x, y| x[1].total_cmp(&y[1]));
    let report = Report {
        size: a.size,
        repeat: a.repeat,
        rate_ratio: best_rate.map(|b| rate_medians[0].median.msgs_per_sec / b),
        rate_ratio_corked: best_rate.map(|b| rate_medians[1].median.msgs_per_sec / b),
        rate: rate_medians,
        paced: paced_medians,
        sample_throughput_msgs_per_sec: sample_tp.get(sample_tp.len() / 2).copied(),
        sample_pingpong_rtt_us: sample_pp.get(sample_pp.len() / 2).copied(),
        p99_ratio,
        pingpong: pp_sides
            .iter()
            .zip(&pps)
            .map(|(s, v)| median(s, v, |x| x.p99_us))
            .collect(),
        aeron_jar: aeron.as_ref().map(|x| x.jar().display().to_string()),
    };
    print_report(&report);
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    }
    Ok(())
}

fn median<T: Copy>(side: &str, runs: &[T], key: impl Fn(&T) -> f64) -> Median<T> {
    let mut v: Vec<T> = runs.to_vec();
    v.sort_by(|x, y| key(x).total_cmp(&key(y)));
    Median {
        side: side.to_string(),
        median: v[v.len() / 2],
        runs: runs.iter().map(key).collect(),
    }
}

fn print_report(r: &Report) {
    println!(
        "{}-byte messages, median of {} runs\n\n| side | msgs/s | received of sent |\n|---|---:|---:|",
        r.size, r.repeat
    );
    for m in &r.rate {
        println!(
            "| {} | {:.0} | {} of {} |",
            m.side, m.median.msgs_per_sec, m.median.received, m.median.sent
        );
    }
    if let Some(tp) = r.sample_throughput_msgs_per_sec {
        println!("| Aeron EmbeddedThroughput (as shipped) | {tp:.0} | |");
    }
    println!(
        "\n| rate/s | side | p50 us | p99 us | p99.9 us | max us | received of sent |\n|---:|---|---:|---:|---:|---:|---:|"
    );
    for m in &r.paced {
        let p = &m.median;
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} of {} |",
            p.rate, m.side, p.p50_us, p.p99_us, p.p999_us, p.max_us, p.received, p.sent
        );
    }
    println!("\n| round trip | p50 us | p99 us | p99.9 us | max us |\n|---|---:|---:|---:|---:|");
    for m in &r.pingpong {
        let p = &m.median;
        println!(
            "| {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            m.side, p.p50_us, p.p99_us, p.p999_us, p.max_us
        );
    }
    if let Some(pp) = r.sample_pingpong_rtt_us {
        println!(
            "\nAeron EmbeddedPingPong (as shipped), round trip: p50 {:.1}, p99 {:.1}, p99.9 {:.1}, max {:.1} us",
            pp[0], pp[1], pp[2], pp[3]
        );
    }
    if let (Some(x), Some(y)) = (r.rate_ratio, r.rate_ratio_corked) {
        println!("\nrate: slipstream / best Aeron set-up = {x:.2} (one datagram a message), {y:.2} (corked)");
    }
    for (rate, x) in &r.p99_ratio {
        println!("p99 at {rate}/s: slipstream / best Aeron set-up = {x:.2}");
    }
}
