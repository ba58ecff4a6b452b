//! `slipstream bench table4`: the SS-RTUDP paper's Table 4 on an emulated switch. Three
//! senders (hosts 1-3) send real-time and non-real-time messages to host 4 through a
//! switch whose port toward host 4 is the bottleneck, offered 105.5 % of its rate; the same
//! seeded trace runs without and with the traffic smoother. A message is lost when the
//! smoother drops it (queue full, or still waiting at its deadline), when the network drops
//! it (the bottleneck's queue, counted by the switch), or when it arrives after its
//! deadline; each is reported apart.
//!
//! Before the experiment a validity run (80 % load of smooth traffic, no smoother) checks that this machine
//! can judge the deadlines: real-time misses at most 0.01 %. If not at time scale 1 (a
//! 100 Mbit/s switch, deadlines 300 µs and 1,500 µs), the whole experiment is slowed 10×
//! (10 Mbit/s, 3 ms and 15 ms, every smoother period 10× longer) and says so.

mod ideal;
mod node;
pub mod trace;

use clap::Args;
use node::ix;
use serde::Serialize;
use slipstream::datapath::Impairment;
use slipstream::netem::{self, netns};
use slipstream::rt::{Class, CreditUnit, LossSignal, NrtRule, RtConfig, SmootherConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use trace::Trace;

/// Options of `bench table4`.
#[derive(Debug, Args)]
pub struct Table4Args {
    /// Which runs: on, off or both.
    #[arg(long, default_value = "both", value_parser = ["on", "off", "both"])]
    pub smoother: String,
    /// Seconds of traffic per run (the paper's counts take 297).
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// Time scale (1: 100 Mbit/s and the paper's deadlines; 10: ten times slower). Default:
    /// the smallest of 1 and 10 whose validity run passes.
    #[arg(long)]
    pub scale: Option<u32>,
    /// Seed of the traffic trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Drop-tail queue of the bottleneck port, bytes (e.g. 64k).
    #[arg(long, default_value = "64k")]
    pub queue: String,
    /// Payload of a real-time message, bytes (8 to 1440).
    #[arg(long, default_value_t = 256)]
    pub rt_size: usize,
    /// Non-real-time packets the smoother lets wait in the access link's queue.
    #[arg(long, default_value_t = 1)]
    pub below: u32,
    /// Late messages do not count as loss for the smoother (the alternative to the default).
    #[arg(long)]
    pub late_not_loss: bool,
    /// Whose losses slow a sender's smoother: `receiver` (any loss at the receiver, the
    /// default) or `own` (its own messages' only).
    #[arg(long, default_value = "receiver", value_parser = ["receiver", "own"])]
    pub loss_signal: String,
    /// Start each smoother with an empty bucket at the longest period (the paper starts full,
    /// at RP0).
    #[arg(long)]
    pub cautious: bool,
    /// Spread each refresh's credits evenly over the period (the alternative to Fig. 5's
    /// all-at-once).
    #[arg(long)]
    pub spread: bool,
    /// What a smoother credit buys: a `packet` of any size (the paper's) or `byte`s (a full
    /// datagram's worth; a datagram takes its own size).
    #[arg(long, default_value = "packet", value_parser = ["packet", "byte"])]
    pub credit: String,
    /// When a non-real-time packet may leave: with `one` credit left (the paper's prose) or
    /// while the credits are `nonneg`ative (its Fig. 5).
    #[arg(long, default_value = "one", value_parser = ["one", "nonneg"])]
    pub nrt_rule: String,
    /// Credit bucket depth (CBD), packets (Table 3: 40).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u32).range(1..))]
    pub depth: u32,
    /// Shortest and longest refresh period, ms at time scale 1 (Table 3: 5 and 100; the
    /// same twice holds the period fixed).
    #[arg(long, value_name = "MIN,MAX", value_delimiter = ',', default_values_t = [5.0, 100.0])]
    pub rp_range: Vec<f64>,
    /// Adapt each smoother's period every MS (at time scale 1) instead of once per refresh.
    #[arg(long, value_name = "MS")]
    pub adapt_every: Option<f64>,
    /// Non-real-time messages a sender's smoother queue holds (a full queue refuses more).
    #[arg(long, default_value_t = 256)]
    pub nrt_queue: usize,
    /// Send from one thread per sender host (3) or from one thread for all (1).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=3))]
    pub sender_threads: u32,
    /// Only the ideal host's figures (the traces through the switch's link models in
    /// virtual time: no root, no switch, no waiting), at `--scale` (default 1).
    #[arg(long)]
    pub ideal: bool,
    /// Seconds of the validity run at 80 % load (default: long enough for
    /// 10,000 real-time messages, 10 s at time scale 1 and 84 s at 10; 5 with `--quick`). A
    /// run of fewer messages cannot show misses ≤ 0.01 % and is not taken as valid.
    #[arg(long)]
    pub validity_seconds: Option<f64>,
    /// Short runs (10 s, validity 5 s, too short to be valid: without `--scale` the
    /// validity run is tried at scale 1, then 10): a smoke test.
    #[arg(long)]
    pub quick: bool,
    /// Also write DIR/table4.md, .json and .svg.
    #[arg(long)]
    pub out_dir: Option<PathBuf>,
    /// Print a JSON summary as the last line.
    #[arg(long)]
    pub json: bool,
}

/// Port of every socket.
const PORT: u16 = 7800;
/// How long the receiver keeps listening after the last send.
const LINGER: Duration = Duration::from_millis(500);

/// One class in one run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClassResult {
    pub sent: u64,
    /// Dropped by the sender: refused (queue full, no buffer) or still waiting at the
    /// deadline.
    pub smoother_drops: u64,
    /// Never arrived: dropped in the network (the switch's queues).
    pub network_lost: u64,
    /// Arrived after the deadline.
    pub late: u64,
    /// Arrived in time.
    pub on_time: u64,
    pub loss_pct: f64,
    /// Payload delivered in time, Mbit/s.
    pub goodput_mbps: f64,
}

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub smoother: bool,
    pub rt: ClassResult,
    pub nrt: ClassResult,
    /// Packets the bottleneck port dropped, and the access links.
    pub port_drops: u64,
    pub access_drops: u64,
    /// Real-time one-way delay percentiles, µs.
    pub rt_p50_us: u64,
    pub rt_p99_us: u64,
    pub rt_max_us: u64,
    /// How far behind the trace the senders sent, µs: p99 and max.
    pub behind_p99_us: u64,
    pub behind_max_us: u64,
    /// The smoothers' refresh periods at the end, ms (one per sender).
    pub final_period_ms: Vec<f64>,
    /// Lossy refreshes and reports taken, all senders.
    pub lossy_refreshes: u64,
    pub reports_taken: u64,
    /// Real-time datagrams that arrived marked DSCP EF.
    pub marked_received: u64,
    /// On-time share per second of send time, by class, % (null: nothing sent that second).
    pub per_second: Vec<[f64; 2]>,
}

/// The whole experiment.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub time_scale: u32,
    pub bottleneck_mbps: f64,
    pub deadlines_us: [u64; 2],
    pub offered_mbps: f64,
    pub queue_bytes: usize,
    pub rt_size: usize,
    pub seconds: f64,
    pub seed: u64,
    pub validity_rt_miss_pct: f64,
    pub validity_ok: bool,
    /// The last validity run.
    pub validity: Option<RunResult>,
    /// The validity trace on an ideal host (see `ideal`): what the assumptions alone miss.
    pub ideal_validity: Option<ideal::Ideal>,
    /// The experiment's trace on an ideal host, without and with the smoother.
    pub ideal_without: ideal::Ideal,
    pub ideal_with: ideal::Ideal,
    pub runs: Vec<RunResult>,
}

/// Runs `bench table4`.
pub fn run(a: &Table4Args) -> Result<(), String> {
    match a.rp_range[..] {
        [lo, hi] if lo > 0.0 && lo <= hi && hi <= 60_000.0 => {}
        _ => {
            return Err(format!(
                "--rp-range {:?}: two periods in ms, 0 < MIN <= MAX <= 60000",
                a.rp_range
            ))
        }
    }
    if a.ideal {
        return ideal_only(a);
    }
    if !netns::is_root() {
        return Err("bench table4 needs root: it builds an emulated switch of namespaces".into());
    }
    if !(8..=trace::NRT_SIZE).contains(&a.rt_size) {
        return Err(format!("--rt-size {}: must be 8 to 1440", a.rt_size));
    }
    let queue = Impairment::parse(&format!("queue={}", a.queue))
        .map_err(|e| format!("--queue: {e}"))?
        .link
        .queue_bytes;
    let seconds = if a.quick { 10.0 } else { a.seconds };
    let exe = std::env::current_exe().map_err(|e| format!("finding slipstream: {e}"))?;
    let mut validity = (f64::NAN, false);
    let mut validity_run = None;
    let mut ideal_validity = None;
    let mut scale = 1;
    let candidates: Vec<u32> = match a.scale {
        Some(k) => vec![k.max(1)],
        None => vec![1, 10],
    };
    for &k in &candidates {
        scale = k;
        let check_secs = a
            .validity_seconds
            .unwrap_or(if a.quick {
                5.0
            } else {
                validity_seconds_for(VALIDITY_MIN_RT, k)
            })
            .max(1.0);
        eprintln!(
            "table4: validity run at time scale {k} (80 % load, smooth, no smoother, {check_secs} s)"
        );
        let trace = Trace::generate(a.seed, check_secs, f64::from(k), 0.8, a.rt_size, true);
        let ideal = ideal::run(&trace, &switch_spec(k, queue)?, deadlines(k), None, a.seed);
        eprintln!(
            "table4:   on an ideal host: real-time misses {:.4} % (one-way p50 {} us, p99 {} us, \
             max {} us)",
            ideal.miss_pct[0], ideal.rt_p50_us, ideal.rt_p99_us, ideal.rt_max_us
        );
        ideal_validity = Some(ideal);
        let r = condition(a, &exe, k, queue, &trace, check_secs, false)?;
        let miss = 100.0 - pct(r.rt.on_time, r.rt.sent);
        let enough = r.rt.sent >= VALIDITY_MIN_RT;
        validity = (miss, miss <= 0.01 && enough);
        eprintln!(
            "table4:   real-time misses {miss:.4} % ({} late, {} lost of {}; one-way p50 {} us, \
             p99 {} us, max {} us): {}",
            r.rt.late,
            r.rt.network_lost + r.rt.smoother_drops,
            r.rt.sent,
            r.rt_p50_us,
            r.rt_p99_us,
            r.rt_max_us,
            match (validity.1, enough, miss <= 0.01) {
                (true, _, _) => "valid".to_string(),
                (false, true, _) => "too many".to_string(),
                (false, false, few) => format!(
                    "{}not valid: fewer than {VALIDITY_MIN_RT} messages cannot show 0.01 %",
                    if few { "" } else { "too many, and " }
                ),
            }
        );
        validity_run = Some(r);
        if validity.1 {
            break;
        }
    }
    let trace = Trace::generate(a.seed, seconds, f64::from(scale), 1.055, a.rt_size, false);
    let spec = switch_spec(scale, queue)?;
    let ideal_without = ideal::run(&trace, &spec, deadlines(scale), None, a.seed);
    let ideal_with = ideal::run(
        &trace,
        &spec,
        deadlines(scale),
        Some(&config(a, scale, true)),
        a.seed,
    );
    for (name, i) in [("without", &ideal_without), ("with", &ideal_with)] {
        eprintln!(
            "table4: the trace {name} the smoother on an ideal host: RT loss {:.3} % ({} dropped, \
             {} late), NRT loss {:.2} %",
            i.miss_pct[0], i.dropped[0], i.late[0], i.miss_pct[1]
        );
    }
    let mut runs = Vec::new();
    for on in [false, true] {
        let wanted = match a.smoother.as_str() {
            "on" => on,
            "off" => !on,
            _ => true,
        };
        if !wanted {
            continue;
        }
        eprintln!(
            "table4: {} the smoother, {seconds} s at time scale {scale}, {:.1} Mbit/s offered",
            if on { "with" } else { "without" },
            trace.offered_bps(seconds) / 1e6
        );
        let r = condition(a, &exe, scale, queue, &trace, seconds, on)?;
        eprintln!(
            "table4:   RT loss {:.3} % (smoother {}, network {}, late {}), NRT loss {:.2} %",
            r.rt.loss_pct, r.rt.smoother_drops, r.rt.network_lost, r.rt.late, r.nrt.loss_pct
        );
        runs.push(r);
    }
    let k = f64::from(scale);
    let report = Report {
        time_scale: scale,
        bottleneck_mbps: 100.0 / k,
        deadlines_us: [(300.0 * k) as u64, (1500.0 * k) as u64],
        offered_mbps: trace.offered_bps(seconds) / 1e6,
        queue_bytes: queue,
        rt_size: a.rt_size,
        seconds,
        seed: a.seed,
        validity_rt_miss_pct: validity.0,
        validity_ok: validity.1,
        validity: validity_run,
        ideal_validity,
        ideal_without,
        ideal_with,
        runs,
    };
    let md = markdown(&report);
    println!("{md}");
    if let Some(dir) = &a.out_dir {
        write(&report, &md, dir)?;
    }
    if a.json {
        println!("{}", summary(&report));
    }
    Ok(())
}

/// `--ideal`: both traces on an ideal host, printed as JSON.
fn ideal_only(a: &Table4Args) -> Result<(), String> {
    let k = a.scale.unwrap_or(1).max(1);
    let queue = Impairment::parse(&format!("queue={}", a.queue))
        .map_err(|e| format!("--queue: {e}"))?
        .link
        .queue_bytes;
    let spec = switch_spec(k, queue)?;
    let validity = Trace::generate(a.seed, 10.0, f64::from(k), 0.8, a.rt_size, true);
    let trace = Trace::generate(a.seed, a.seconds, f64::from(k), 1.055, a.rt_size, false);
    let out = serde_json::json!({
        "time_scale": k,
        "seconds": a.seconds,
        "seed": a.seed,
        "ideal_validity": ideal::run(&validity, &spec, deadlines(k), None, a.seed),
        "ideal_without": ideal::run(&trace, &spec, deadlines(k), None, a.seed),
        "ideal_with": ideal::run(&trace, &spec, deadlines(k), Some(&config(a, k, true)), a.seed),
    });
    println!("{out}");
    Ok(())
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// Real-time messages a validity run needs at least: fewer cannot show misses ≤ 0.01 %.
const VALIDITY_MIN_RT: u64 = 10_000;

/// Seconds of the validity trace that hold `n` real-time messages at time scale `k` (every
/// node sends one each [`trace::RT_PERIOD_US`] × `k`), rounded up, plus a second for the
/// nodes' random phases (without it, 9,999 at scale 30).
fn validity_seconds_for(n: u64, k: u32) -> f64 {
    let per_second = trace::NODES as f64 * 1e6 / (trace::RT_PERIOD_US * f64::from(k));
    (n as f64 / per_second).ceil() + 1.0
}

/// The socket configuration of a run at time scale `k`.
fn config(a: &Table4Args, k: u32, smoother: bool) -> RtConfig {
    let k = k.max(1);
    let ms = |m: u64| Duration::from_millis(m) * k;
    // Checked in `run`: two periods, within 60 s.
    let range = |i: usize| Duration::from_secs_f64(a.rp_range[i] / 1e3) * k;
    RtConfig {
        max_message: trace::NRT_SIZE,
        buffers: 512.max(a.nrt_queue + 256),
        nrt_queue: a.nrt_queue.max(1),
        rt_queue: 64,
        smoother: smoother.then(|| SmootherConfig {
            rp0: ms(10),
            rp_min: range(0),
            rp_max: range(1),
            depth: a.depth.max(1),
            rp_step: ms(2),
            spread: a.spread,
            cautious_start: a.cautious,
            unit: if a.credit == "byte" {
                CreditUnit::Byte
            } else {
                CreditUnit::Packet
            },
            adapt_every: a
                .adapt_every
                .map(|v| Duration::from_secs_f64(v.clamp(0.01, 60_000.0) / 1e3) * k),
            nrt_rule: if a.nrt_rule == "nonneg" {
                NrtRule::NonNegative
            } else {
                NrtRule::OneCredit
            },
        }),
        link_rate: smoother.then_some(100_000_000 / u64::from(k)),
        below_packets: a.below,
        report_interval: ms(5),
        late_is_loss: !a.late_not_loss,
        loss_signal: if a.loss_signal == "own" {
            LossSignal::Own
        } else {
            LossSignal::Receiver
        },
        ..RtConfig::default()
    }
}

/// The emulated switch at time scale `k` with a bottleneck queue of `queue` bytes.
fn switch_spec(k: u32, queue: usize) -> Result<netem::SwitchSpec, String> {
    let rate = format!("rate={}bit", 100_000_000 / u64::from(k.max(1)));
    Ok(netem::SwitchSpec {
        hosts: trace::NODES + 1,
        access: Impairment::parse(&format!("{rate},queue=256k"))?,
        port: Impairment::parse(&format!("{rate},queue={queue}"))?,
        mtu: 1500,
    })
}

/// The deadlines (real-time, non-real-time) at time scale `k`.
fn deadlines(k: u32) -> [Duration; 2] {
    let k = k.max(1);
    [
        Duration::from_micros(300) * k,
        Duration::from_micros(1500) * k,
    ]
}

/// One run on a fresh switch.
fn condition(
    a: &Table4Args,
    exe: &std::path::Path,
    k: u32,
    queue: usize,
    trace: &Trace,
    seconds: f64,
    smoother: bool,
) -> Result<RunResult, String> {
    let name = format!("t4x{}", std::process::id());
    let spec = switch_spec(k, queue)?;
    let info = netem::switch_up(&name, &spec, exe)?;
    let _down = Down(name.clone());
    let r = run_hosts(a, k, trace, seconds, smoother, &info);
    // Let the forwarder write its counters once more.
    std::thread::sleep(Duration::from_millis(250));
    let stats = netem::stats(&name)?;
    let mut r = r?;
    let hosts = stats["hosts"].as_array().cloned().unwrap_or_default();
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    r.port_drops = hosts
        .get(trace::NODES)
        .map_or(0, |h| n(&h["port"]["queue_drops"]));
    r.access_drops = hosts.iter().map(|h| n(&h["access"]["queue_drops"])).sum();
    Ok(r)
}

/// Takes the switch down on drop.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        if let Err(e) = netem::down(&self.0) {
            eprintln!("warning: removing switch {}: {e}", self.0);
        }
    }
}

fn run_hosts(
    a: &Table4Args,
    k: u32,
    trace: &Trace,
    seconds: f64,
    smoother: bool,
    info: &netem::SwitchInfo,
) -> Result<RunResult, String> {
    let cfg = config(a, k, smoother);
    let deadlines = deadlines(k);
    let dst = SocketAddr::from((info.hosts[trace::NODES].addr, PORT));
    let stop = Arc::new(AtomicBool::new(false));
    let rx_ns = info.hosts[trace::NODES].netns.clone();
    let secs = seconds.ceil() as usize;
    let stop2 = stop.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let receiver = std::thread::spawn(move || {
        let sock = node::open_in(&rx_ns, dst, cfg);
        let ok = sock.is_ok();
        let _ = ready_tx.send(sock.as_ref().err().cloned());
        if !ok {
            return Err("receiver did not open".to_string());
        }
        node::receive(sock?, stop2, LINGER, secs)
    });
    if let Ok(Some(e)) = ready_rx.recv() {
        return Err(e);
    }
    // Open every sender before the clock starts.
    let mut socks = Vec::new();
    for (i, h) in info.hosts[..trace::NODES].iter().enumerate() {
        let ns = h.netns.clone();
        let addr = SocketAddr::from((h.addr, PORT));
        let sock = std::thread::spawn(move || node::open_in(&ns, addr, cfg))
            .join()
            .map_err(|_| format!("opening sender {}", i + 1))??;
        socks.push(sock);
    }
    let t0 = Instant::now() + Duration::from_millis(100);
    let drain = Duration::from_secs(2);
    let mut sent = Vec::new();
    if a.sender_threads == 1 {
        sent = node::send_all(socks, dst, &trace.nodes, t0, deadlines, drain)?;
    } else {
        let senders: Vec<_> = socks
            .into_iter()
            .zip(trace.nodes.clone())
            .map(|(sock, events)| {
                std::thread::spawn(move || node::send(sock, dst, &events, t0, deadlines, drain))
            })
            .collect();
        for s in senders {
            sent.push(s.join().map_err(|_| "a sender panicked".to_string())??);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let got = receiver
        .join()
        .map_err(|_| "the receiver panicked".to_string())??;
    let class = |c: Class| {
        let i = ix(c);
        let sent_n: u64 = sent.iter().map(|s| s.asked[i]).sum();
        let refused: u64 = sent.iter().map(|s| s.refused[i]).sum();
        let expired: u64 = if c == Class::Nrt {
            sent.iter().map(|s| s.stats.nrt_expired).sum()
        } else {
            0
        };
        let smoother_drops = refused + expired;
        let delivered = got.delivered[i];
        let late = got.late[i];
        let on_time = delivered - late;
        let size = match c {
            Class::Rt => a.rt_size,
            Class::Nrt => trace::NRT_SIZE,
        };
        ClassResult {
            sent: sent_n,
            smoother_drops,
            network_lost: sent_n.saturating_sub(smoother_drops + delivered),
            late,
            on_time,
            loss_pct: 100.0 - pct(on_time, sent_n),
            goodput_mbps: on_time as f64 * size as f64 * 8.0 / seconds / 1e6,
        }
    };
    let quantile = |v: &mut Vec<u32>, p: f64| {
        v.sort_unstable();
        v.get(((v.len() as f64 - 1.0) * p).round() as usize)
            .map_or(0, |&d| u64::from(d))
    };
    let mut delays = got.rt_delays_us.clone();
    let mut q = |p: f64| quantile(&mut delays, p);
    let (rt_p50_us, rt_p99_us, rt_max_us) = (q(0.5), q(0.99), q(1.0));
    let mut behind: Vec<u32> = sent
        .iter()
        .flat_map(|s| s.behind_us.iter().copied())
        .collect();
    let behind_p99_us = quantile(&mut behind, 0.99);
    let behind_max_us = quantile(&mut behind, 1.0);
    // Per second: on-time share of what the trace sent that second.
    let mut asked = vec![[0u64; 2]; secs + 1];
    for e in trace.nodes.iter().flatten() {
        if let Some(s) = asked.get_mut((e.at_us / 1_000_000) as usize) {
            s[ix(e.class)] += 1;
        }
    }
    let per_second = asked
        .iter()
        .zip(&got.on_time_per_second)
        .map(|(a, g)| {
            let share = |i: usize| {
                if a[i] == 0 {
                    f64::NAN
                } else {
                    pct(g[i], a[i])
                }
            };
            [share(0), share(1)]
        })
        .collect();
    Ok(RunResult {
        smoother,
        rt: class(Class::Rt),
        nrt: class(Class::Nrt),
        port_drops: 0,
        access_drops: 0,
        rt_p50_us,
        rt_p99_us,
        rt_max_us,
        behind_p99_us,
        behind_max_us,
        final_period_ms: sent
            .iter()
            .map(|s| s.stats.period_us as f64 / 1000.0)
            .collect(),
        lossy_refreshes: sent.iter().map(|s| s.stats.smoother.lossy_refreshes).sum(),
        reports_taken: sent.iter().map(|s| s.stats.reports_taken).sum(),
        marked_received: got.stats.marked_received,
        per_second,
    })
}

fn markdown(r: &Report) -> String {
    let mut s = format!(
        "Table 4 on an emulated switch: 3 senders -> 1 receiver, bottleneck {} Mbit/s \
         (queue {} B), {:.1} Mbit/s offered, deadlines {} us (RT) and {} us (NRT), time \
         scale {}, {} s per run, seed {}; validity (80 % load, no smoother): RT misses \
         {:.4} % ({}; on an ideal host {:.4} %); on an ideal host the trace loses RT {:.3} %, \
         NRT {:.2} % without the smoother and RT {:.3} %, NRT {:.2} % with it\n\n",
        r.bottleneck_mbps,
        r.queue_bytes,
        r.offered_mbps,
        r.deadlines_us[0],
        r.deadlines_us[1],
        r.time_scale,
        r.seconds,
        r.seed,
        r.validity_rt_miss_pct,
        if r.validity_ok { "valid" } else { "NOT valid" },
        r.ideal_validity
            .as_ref()
            .map_or(f64::NAN, |i| i.miss_pct[0]),
        r.ideal_without.miss_pct[0],
        r.ideal_without.miss_pct[1],
        r.ideal_with.miss_pct[0],
        r.ideal_with.miss_pct[1],
    );
    s.push_str(
        "| condition | type | sent | smoother drops | network lost | late | loss | goodput Mbit/s | RT p50/p99/max us | port drops |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---|---:|\n",
    );
    for run in &r.runs {
        let cond = if run.smoother {
            "with smoother"
        } else {
            "without smoother"
        };
        for (name, c) in [("RT", &run.rt), ("NRT", &run.nrt)] {
            let delays = if name == "RT" {
                format!("{}/{}/{}", run.rt_p50_us, run.rt_p99_us, run.rt_max_us)
            } else {
                String::new()
            };
            s.push_str(&format!(
                "| {cond} | {name} | {} | {} | {} | {} | {:.3} % | {:.2} | {delays} | {} |\n",
                c.sent,
                c.smoother_drops,
                c.network_lost,
                c.late,
                c.loss_pct,
                c.goodput_mbps,
                run.port_drops
            ));
        }
    }
    s
}

/// The last line of `--json`.
fn summary(r: &Report) -> serde_json::Value {
    let find = |on: bool| r.runs.iter().find(|x| x.smoother == on);
    let (off, on) = (find(false), find(true));
    let ratio = match (off, on) {
        (Some(a), Some(b)) if b.rt.loss_pct > 0.0 => a.rt.loss_pct / b.rt.loss_pct,
        (Some(_), Some(_)) => f64::INFINITY,
        _ => f64::NAN,
    };
    let goal = match (off, on) {
        (Some(a), Some(b)) => {
            a.rt.loss_pct >= 5.0 && b.rt.loss_pct <= 0.15 && (ratio >= 50.0 || ratio.is_infinite())
        }
        _ => false,
    };
    serde_json::json!({
        "rt_loss_pct_without": off.map(|x| x.rt.loss_pct),
        "rt_loss_pct_with": on.map(|x| x.rt.loss_pct),
        "nrt_loss_pct_without": off.map(|x| x.nrt.loss_pct),
        "nrt_loss_pct_with": on.map(|x| x.nrt.loss_pct),
        "rt_late_pct_with": on.map(|x| pct(x.rt.late, x.rt.sent)),
        "rt_loss_ratio": if ratio.is_finite() { Some(ratio) } else { None },
        "time_scale": r.time_scale,
        "validity_ok": r.validity_ok,
        "validity_rt_miss_pct": r.validity_rt_miss_pct,
        "validity_rt_sent": r.validity.as_ref().map(|v| v.rt.sent),
        "ideal_validity_rt_miss_pct": r.ideal_validity.as_ref().map(|i| i.miss_pct[0]),
        "ideal_rt_loss_pct_without": r.ideal_without.miss_pct[0],
        "ideal_rt_loss_pct_with": r.ideal_with.miss_pct[0],
        "goal_met": goal,
        "report": r,
    })
}

fn write(r: &Report, md: &str, dir: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let cmd: Vec<String> = std::env::args().collect();
    let text = format!("{md}\nCommand: `{}`\n", cmd.join(" "));
    let p = dir.join("table4.md");
    std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
    let p = dir.join("table4.json");
    std::fs::write(&p, summary(r).to_string()).map_err(|e| format!("{}: {e}", p.display()))?;
    let mut series = Vec::new();
    for run in &r.runs {
        let cond = if run.smoother { "with" } else { "without" };
        for (c, name) in [(0, "RT"), (1, "NRT")] {
            series.push((
                format!("{name} {cond} smoother"),
                run.per_second
                    .iter()
                    .enumerate()
                    .map(|(s, v)| (s as f64, 100.0 - v[c]))
                    .collect(),
            ));
        }
    }
    let p = dir.join("table4.svg");
    crate::plot::line_chart(
        &p,
        "Loss per second of sending (dropped, lost or late), 3 senders -> 1 port",
        "second",
        "loss %",
        false,
        &series,
    )
    .map_err(|e| format!("{}: {e}", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_validity_run_holds_enough_messages_to_show_a_hundredth_of_a_percent() {
        for (k, secs) in [(1, 10.0), (10, 84.0), (30, 248.0)] {
            let s = validity_seconds_for(VALIDITY_MIN_RT, k);
            assert_eq!(s, secs, "scale {k}");
            let t = Trace::generate(3, s, f64::from(k), 0.8, 256, true);
            let rt = t.count(Class::Rt);
            assert!(
                (VALIDITY_MIN_RT..VALIDITY_MIN_RT * 5 / 4).contains(&rt),
                "scale {k}: {rt}"
            );
        }
    }
}
