//! `slipstream bench transfer`: the same file transfer with slipstream, kernel TCP (CUBIC and
//! BBR), libsrt's `srt-file-transmit` and UDT4, one after another over the same path, reported
//! side by side.
//!
//! Paths ([`path`]): loopback, and an emulated 1 Gbit/s link between two network namespaces
//! (`slipstream netem`) at several round-trip times and loss rates. Tools ([`tools`]): how each
//! is started and where its retransmission count comes from; kernel TCP runs through this
//! binary's own minimal peer ([`tcp`]). Each run ([`run_once`]): one random input in /dev/shm,
//! receiver started and seen listening, sender started, both watched until the receiver exits
//! or the time cap; the output is compared with the input (size and BLAKE3); CPU, retransmitted
//! share and emulator CPU are recorded ([`measure`]). Results ([`report`]): JSON lines per run,
//! markdown tables of the median run per cell, and SVG charts. Emulators, the /dev/shm
//! workspace and the peer processes are removed on every exit path, an interrupted one
//! included ([`guard`]).

pub mod guard;
pub mod measure;
pub mod path;
pub mod report;
pub mod tcp;
pub mod tools;

use clap::Args;
use measure::{Peer, Sampler, TcpCounters};
use path::{NetPath, Scenario};
use report::RunRecord;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};
use tools::{Plan, Tool, Toolbox};

/// Options of `bench transfer`.
#[derive(Debug, Args)]
pub struct TransferArgs {
    /// Tools, comma-separated: slipstream, tcp-cubic, tcp-bbr, srt, udt [default: all].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    tools: Option<Vec<String>>,
    /// Scenarios, comma-separated: loopback, rtt{10,50,200}-loss{0,0.1,1,5} (any rttMS-lossPCT
    /// works) [default: all 13; with --quick: loopback, rtt50-loss0, rtt50-loss1,
    /// rtt200-loss1]. Emulated scenarios need root; by default they are skipped with a note
    /// when not root.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    scenarios: Option<Vec<String>>,
    /// Size of the file, MiB [default: 1024 on loopback, 256 emulated; --quick: 256 and 64].
    #[arg(long, value_name = "MIB")]
    size: Option<u64>,
    /// Longest a run may take, seconds; then both ends are killed and the run is reported
    /// incomplete [default: 60; --quick: 15].
    #[arg(long, value_name = "SECS")]
    time_cap: Option<f64>,
    /// Runs per cell; the median by goodput is reported.
    #[arg(long, value_name = "K", default_value_t = 1)]
    repeat: usize,
    /// Scenario whose goodput over time is sampled and plotted ("none": no timeline).
    #[arg(long, value_name = "SCENARIO", default_value = "rtt50-loss1")]
    timeline: String,
    /// A subset that finishes in a few minutes (see --scenarios, --size, --time-cap).
    #[arg(long)]
    quick: bool,
    /// Output directory for transfer.md, transfer.jsonl and the SVG charts.
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    out_dir: PathBuf,
    /// Also print one JSON object per run to stdout, and a summary object as the last line.
    #[arg(long)]
    json: bool,
    /// Fail instead of skipping a tool that is missing or a scenario that needs root.
    #[arg(long)]
    require_all: bool,
    /// Sources of the UDT peer (build.sh, udtperf.cpp), built on first use next to this
    /// binary [default: tools/udt of this source tree].
    #[arg(long, value_name = "DIR")]
    udt_dir: Option<PathBuf>,
    /// Internal: run as one end of a kernel-TCP transfer (`recv PORT FILE` or
    /// `send HOST:PORT FILE CC`).
    #[arg(long, hide = true, num_args = 3..=4, value_name = "ARG")]
    tcp_peer: Option<Vec<String>>,
    /// Internal: clean up after benchmark process PID if it is interrupted.
    #[arg(long, hide = true, value_name = "PID")]
    guard: Option<String>,
}

/// Scenarios of `--quick`.
const QUICK_SCENARIOS: [&str; 4] = ["loopback", "rtt50-loss0", "rtt50-loss1", "rtt200-loss1"];
/// Longest wait for a receiver to listen.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one end may outlive the other: the receiver after a failed sender, the sender
/// after the receiver is done.
const GRACE: Duration = Duration::from_secs(5);
/// Interval of the output-size samples.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// What one invocation covers, after parsing and defaults.
#[derive(Debug, Clone)]
pub struct TransferConfig {
    /// Tools, in report order.
    pub tools: Vec<Tool>,
    /// Scenarios, in run order.
    pub scenarios: Vec<Scenario>,
    /// Whether the scenarios were asked for (else emulated ones are skipped when not root).
    pub scenarios_explicit: bool,
    /// File size override, bytes.
    pub size: Option<u64>,
    /// Whether --quick (smaller default sizes).
    pub quick: bool,
    /// Time cap per run.
    pub time_cap: Duration,
    /// Runs per cell.
    pub repeat: usize,
    /// The scenario whose timeline is plotted.
    pub timeline: Option<Scenario>,
    /// Output directory.
    pub out_dir: PathBuf,
    /// JSON lines on stdout.
    pub json: bool,
    /// Missing tools and root are errors.
    pub require_all: bool,
    /// UDT peer sources.
    pub udt_dir: PathBuf,
}

impl TransferConfig {
    /// Checks and completes the options (no side effects, no root needed).
    pub fn from_args(a: &TransferArgs) -> Result<TransferConfig, String> {
        let tools = match &a.tools {
            None => Tool::ALL.to_vec(),
            Some(names) => {
                let mut v = Vec::new();
                for n in names {
                    let t = Tool::parse(n.trim()).map_err(|e| format!("--tools: {e}"))?;
                    if !v.contains(&t) {
                        v.push(t);
                    }
                }
                v.sort();
                v
            }
        };
        let names: Vec<String> = match &a.scenarios {
            Some(v) => v.clone(),
            None if a.quick => QUICK_SCENARIOS.iter().map(|s| s.to_string()).collect(),
            None => Scenario::all().iter().map(Scenario::name).collect(),
        };
        let mut scenarios: Vec<Scenario> = Vec::new();
        for n in &names {
            let s = Scenario::parse(n.trim()).map_err(|e| format!("--scenarios: {e}"))?;
            if !scenarios.contains(&s) {
                scenarios.push(s);
            }
        }
        if tools.is_empty() || scenarios.is_empty() {
            return Err("--tools and --scenarios must not be empty".into());
        }
        let timeline = match a.timeline.as_str() {
            "none" => None,
            s => Some(Scenario::parse(s).map_err(|e| format!("--timeline: {e}"))?),
        };
        let cap = a.time_cap.unwrap_or(if a.quick { 15.0 } else { 60.0 });
        if !(cap.is_finite() && (1.0..=3600.0).contains(&cap)) {
            return Err(format!("--time-cap {cap}: must be within 1..=3600 seconds"));
        }
        if !(1..=99).contains(&a.repeat) {
            return Err(format!("--repeat {}: must be within 1..=99", a.repeat));
        }
        if let Some(s) = a.size {
            if !(1..=16384).contains(&s) {
                return Err(format!("--size {s}: must be within 1..=16384 MiB"));
            }
        }
        Ok(TransferConfig {
            tools,
            scenarios,
            scenarios_explicit: a.scenarios.is_some(),
            size: a.size.map(|s| s << 20),
            quick: a.quick,
            time_cap: Duration::from_secs_f64(cap),
            repeat: a.repeat,
            timeline,
            out_dir: a.out_dir.clone(),
            json: a.json,
            require_all: a.require_all,
            udt_dir: a
                .udt_dir
                .clone()
                .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/udt")),
        })
    }

    /// The file size for `scenario`: a few seconds at line rate.
    pub fn size_for(&self, scenario: &Scenario) -> u64 {
        self.size
            .unwrap_or(match (scenario.is_emulated(), self.quick) {
                (false, false) => 1024 << 20,
                (false, true) => 256 << 20,
                (true, false) => 256 << 20,
                (true, true) => 64 << 20,
            })
    }
}

/// Runs `bench transfer` (or, with `--tcp-peer`, one end of a kernel-TCP transfer).
pub fn run(a: &TransferArgs) -> Result<(), String> {
    if let Some(peer) = &a.tcp_peer {
        return tcp::run_peer(peer);
    }
    if let Some(pid) = &a.guard {
        return guard::watch(pid);
    }
    let cfg = TransferConfig::from_args(a)?;
    run_matrix(&cfg)
}

/// The working directory of one invocation in /dev/shm (inputs, outputs, logs), removed on
/// drop; one left by a killed invocation is removed by the next.
#[derive(Debug)]
struct Workspace {
    dir: PathBuf,
}

/// Prefix of the workspace directories: `/dev/shm/slipstream-bt-<pid>`.
const WORKSPACE_PREFIX: &str = "slipstream-bt-";

impl Workspace {
    fn create() -> Result<Workspace, String> {
        Workspace::remove_stale();
        let dir = Path::new("/dev/shm").join(format!("{WORKSPACE_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Workspace { dir })
    }

    /// Removes the workspaces of invocations whose process is gone.
    fn remove_stale() {
        let Ok(rd) = std::fs::read_dir("/dev/shm") else {
            return;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix(WORKSPACE_PREFIX)
                .and_then(|p| p.parse::<u32>().ok());
            if pid.is_some_and(|pid| !super::netns::alive(pid)) {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }

    /// An empty subdirectory `name` (emptied if it existed).
    fn fresh(&self, name: &str) -> Result<PathBuf, String> {
        let d = self.dir.join(name);
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        Ok(d)
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("warning: could not remove {}: {e}", self.dir.display());
        }
    }
}

/// A random input file and its digest.
#[derive(Debug)]
struct Input {
    path: PathBuf,
    size: u64,
    blake3: blake3::Hash,
}

impl Input {
    /// Writes `size` pseudo-random bytes (BLAKE3 in XOF mode, seeded from the clock and pid:
    /// incompressible, and new every invocation) to `dir/input.bin`.
    fn create(dir: &Path, size: u64) -> Result<Input, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join("input.bin");
        let seed = format!("{:?} {}", std::time::SystemTime::now(), std::process::id());
        let mut xof = blake3::Hasher::new().update(seed.as_bytes()).finalize_xof();
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?,
        );
        let mut h = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut left = size;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            xof.fill(&mut buf[..n]);
            h.update(&buf[..n]);
            f.write_all(&buf[..n])
                .map_err(|e| format!("{}: {e}", path.display()))?;
            left -= n as u64;
        }
        f.flush().map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Input {
            path,
            size,
            blake3: h.finalize(),
        })
    }
}

/// How many times the input's size [`warm_memory`] writes: once was not enough (the first
/// runs' receivers still took 0.4 to 0.7 s more CPU than the second runs').
const WARM_TIMES: u64 = 3;

/// Writes up to `size` bytes to a scratch file in `dir` and deletes it, so that the first
/// runs' outputs land in memory that has been written before. On a virtual machine, memory
/// the guest writes for the first time can cost far more than memory it reuses (on this one,
/// 2.6 s of system time per GiB against 0.3: the host backs guest pages on first touch, see
/// docs/benchmarks.md); that cost fell on whichever tool ran first. Best effort: it leaves
/// room for `keep` more bytes in `dir`'s file system, and a failure only warns.
fn warm_memory(dir: &Path, size: u64, keep: u64) {
    let free = rustix::fs::statvfs(dir)
        .map(|v| v.f_bavail.saturating_mul(v.f_frsize))
        .unwrap_or(0);
    let size = size.min(free.saturating_sub(keep));
    let path = dir.join("warm.bin");
    let written = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&path)?;
        let buf = vec![0u8; 1 << 20];
        let mut left = size;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            f.write_all(&buf[..n])?;
            left -= n as u64;
        }
        Ok(())
    })();
    let removed = std::fs::remove_file(&path);
    if let Err(e) = written.and(removed) {
        eprintln!("warning: warming memory with {}: {e}", path.display());
    }
}

static NEXT_PORT: AtomicU16 = AtomicU16::new(0);

/// A port for the next run: a new one each time (no TIME_WAIT or lingering socket of an
/// earlier run in the way), skipping ports in use in this namespace.
fn next_port() -> u16 {
    let base = 20_000 + (std::process::id() % 1000) as u16 * 40;
    for _ in 0..1000 {
        let p = base + NEXT_PORT.fetch_add(1, Ordering::Relaxed) % 4000;
        if !port_in_use(p) {
            return p;
        }
    }
    base
}

fn port_in_use(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["tcp", "tcp6", "udp", "udp6"]
        .iter()
        .any(|f| std::fs::read_to_string(format!("/proc/net/{f}")).is_ok_and(|t| t.contains(&want)))
}

/// Everything the runs of one invocation share.
struct Bench<'a> {
    cfg: &'a TransferConfig,
    toolbox: Toolbox,
    /// Cleans up if this process is interrupted; the peers join its process group.
    guardian: guard::Guardian,
    ws: Workspace,
    jsonl: std::fs::File,
    runs: Vec<RunRecord>,
    done: usize,
    total: usize,
}

/// The tools that can run here, after probing (and building udtperf).
#[derive(Debug)]
struct Available {
    /// Those that run, in report order.
    tools: Vec<Tool>,
    /// Their version text.
    versions: BTreeMap<Tool, String>,
    /// Those skipped, with the reason.
    skipped: BTreeMap<Tool, String>,
    /// The built UDT peer.
    udtperf: Option<PathBuf>,
}

/// Probes every tool; one that cannot run here is skipped with a note, or fails the
/// invocation with --require-all.
fn available_tools(cfg: &TransferConfig, exe: &Path) -> Result<Available, String> {
    let mut av = Available {
        tools: Vec::new(),
        versions: BTreeMap::new(),
        skipped: BTreeMap::new(),
        udtperf: None,
    };
    for &t in &cfg.tools {
        let mut probe = tools::probe(t);
        if t == Tool::Udt && probe.is_ok() {
            match tools::build_udtperf(&cfg.udt_dir, &exe.with_file_name("udtperf")) {
                Ok(p) => av.udtperf = Some(p),
                Err(e) => probe = Err(e),
            }
        }
        match probe {
            Ok(v) => {
                av.tools.push(t);
                av.versions.insert(t, v);
            }
            Err(why) if cfg.require_all => {
                return Err(format!("tool {} is not available: {why}", t.name()));
            }
            Err(why) => {
                eprintln!("note: skipping {}: {why}", t.name());
                av.skipped.insert(t, why);
            }
        }
    }
    if av.tools.is_empty() {
        return Err("no tool can run here".into());
    }
    Ok(av)
}

/// The scenarios that can run: emulated ones need root (without it they are skipped with a
/// note, unless asked for explicitly or with --require-all).
fn runnable_scenarios(
    cfg: &TransferConfig,
    notes: &mut Vec<String>,
) -> Result<Vec<Scenario>, String> {
    let mut scenarios = cfg.scenarios.clone();
    if scenarios.iter().any(Scenario::is_emulated) && !super::netns::is_root() {
        if cfg.require_all || cfg.scenarios_explicit {
            return Err(
                "emulated scenarios need root (network namespaces and the link emulator)".into(),
            );
        }
        eprintln!("note: skipping the emulated scenarios (they need root)");
        notes.push("Emulated scenarios skipped: not run as root.".into());
        scenarios.retain(|s| !s.is_emulated());
    }
    Ok(scenarios)
}

/// Runs the whole matrix and writes the reports.
pub fn run_matrix(cfg: &TransferConfig) -> Result<(), String> {
    let wall = Instant::now();
    let exe = std::env::current_exe().map_err(|e| format!("finding this binary: {e}"))?;
    let mut notes: Vec<String> = Vec::new();
    let scenarios = runnable_scenarios(cfg, &mut notes)?;
    let av = available_tools(cfg, &exe)?;
    std::fs::create_dir_all(&cfg.out_dir).map_err(|e| format!("{}: {e}", cfg.out_dir.display()))?;
    let jsonl_path = cfg.out_dir.join("transfer.jsonl");
    let jsonl =
        std::fs::File::create(&jsonl_path).map_err(|e| format!("{}: {e}", jsonl_path.display()))?;
    let mut bench = Bench {
        cfg,
        guardian: guard::Guardian::spawn(&exe)?,
        toolbox: Toolbox {
            exe,
            udtperf: av.udtperf.clone(),
        },
        ws: Workspace::create()?,
        jsonl,
        runs: Vec::new(),
        done: 0,
        total: scenarios.len() * av.tools.len() * cfg.repeat,
    };
    let mut inputs: BTreeMap<u64, Input> = BTreeMap::new();
    let mut failure = None;
    for s in &scenarios {
        if let Err(e) = bench.scenario(s, &av.tools, &mut inputs) {
            eprintln!("error: scenario {}: {e}", s.name());
            notes.push(format!("Scenario {} failed: {e}", s.name()));
            failure.get_or_insert(format!("scenario {}: {e}", s.name()));
        }
    }
    drop(inputs);
    drop(bench.ws);
    for (t, why) in &av.skipped {
        notes.push(format!("{} skipped: {why}", t.name()));
    }
    notes.extend(method_notes(&bench.runs));
    let cells = report::cells(&bench.runs, &scenarios, &av.tools);
    let header = header(cfg, &av.versions, wall);
    let md = report::markdown(&header, &cells, &notes);
    let mut files = vec![jsonl_path];
    files.extend(write_reports(cfg, &md, &cells, &av.tools)?);
    println!("{md}");
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    eprintln!(
        "wrote {} in {:.0} s",
        names.join(", "),
        wall.elapsed().as_secs_f64()
    );
    if cfg.json {
        println!("{}", summary(wall, cfg, &names, &av.skipped, &cells));
    }
    failure.map_or(Ok(()), Err)
}

/// Writes transfer.md and the charts into the output directory; returns the files written.
fn write_reports(
    cfg: &TransferConfig,
    md: &str,
    cells: &[report::Cell],
    tools: &[Tool],
) -> Result<Vec<PathBuf>, String> {
    let md_path = cfg.out_dir.join("transfer.md");
    std::fs::write(&md_path, md).map_err(|e| format!("{}: {e}", md_path.display()))?;
    let mut files = vec![md_path];
    files.extend(report::write_loss_charts(&cfg.out_dir, cells, tools).map_err(|e| e.to_string())?);
    if let Some(t) = &cfg.timeline {
        let p = cfg.out_dir.join("transfer-timeline.svg");
        if report::write_timeline(&p, &t.name(), cells).map_err(|e| e.to_string())? {
            files.push(p);
        }
    }
    Ok(files)
}

/// The `--json` summary object (the last stdout line).
fn summary(
    wall: Instant,
    cfg: &TransferConfig,
    files: &[String],
    skipped: &BTreeMap<Tool, String>,
    cells: &[report::Cell],
) -> serde_json::Value {
    let cells: Vec<serde_json::Value> = cells
        .iter()
        .map(|c| {
            let r = &c.median;
            serde_json::json!({
                "scenario": r.scenario,
                "tool": r.tool,
                "runs": c.runs,
                "complete_runs": c.complete_runs,
                "goodput_mbit_s": r.goodput_mbit_s,
                "utilisation": r.utilisation,
                "cpu_s_per_gb": r.cpu_s_per_gb,
                "retrans_fraction": r.retrans_fraction,
                "complete": r.complete,
            })
        })
        .collect();
    let skipped: BTreeMap<&str, &String> = skipped.iter().map(|(t, w)| (t.name(), w)).collect();
    serde_json::json!({
        "summary": {
            "wall_seconds": wall.elapsed().as_secs_f64(),
            "out_dir": cfg.out_dir,
            "files": files,
            "skipped": skipped,
            "cells": cells,
        }
    })
}

impl Bench<'_> {
    /// All runs of one scenario: its path is up for all of them; repetitions are the outer
    /// loop, so the tools alternate and share whatever the machine is doing at the time.
    fn scenario(
        &mut self,
        s: &Scenario,
        tools: &[Tool],
        inputs: &mut BTreeMap<u64, Input>,
    ) -> Result<(), String> {
        let size = self.cfg.size_for(s);
        let input = match inputs.entry(size) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                eprintln!("writing a {} MiB random input", size >> 20);
                let dir = self.ws.dir.join(format!("in-{size}"));
                let input = Input::create(&dir, size)?;
                // Room for an output and a spare input's worth is left.
                warm_memory(&self.ws.dir, WARM_TIMES * size, 2 * size);
                e.insert(input)
            }
        };
        let net = NetPath::create(*s, &self.toolbox.exe)?;
        for k in 0..self.cfg.repeat {
            for &t in tools {
                self.done += 1;
                let r = self.run_once(t, &net, input, k)?;
                eprintln!(
                    "[{}/{}] {} {} run {}/{}: {}",
                    self.done,
                    self.total,
                    r.scenario,
                    r.tool,
                    k + 1,
                    self.cfg.repeat,
                    progress(&r)
                );
                let line = serde_json::to_string(&r).map_err(|e| e.to_string())?;
                writeln!(self.jsonl, "{line}").map_err(|e| format!("transfer.jsonl: {e}"))?;
                if self.cfg.json {
                    println!("{line}");
                }
                self.runs.push(r);
            }
        }
        Ok(())
    }

    /// Starts the receiver, waits until it listens, starts the sender and watches both
    /// ([`watch`]), sampling the output as it grows.
    fn run_peers(&self, tool: Tool, plan: &Plan<'_>) -> Result<Ended, String> {
        let pgid = self.guardian.process_group();
        let mut rx_cmd = self.toolbox.receiver(tool, plan)?;
        let mut rx = Peer::spawn("receiver", rx_cmd.process_group(pgid))?;
        let spawned = Instant::now();
        if let Err(e) = measure::wait_listening(&mut rx, plan.port, tool.is_tcp(), LISTEN_TIMEOUT) {
            rx.kill()?;
            return Ok(Ended {
                rx: rx.outcome.ok_or("receiver outcome missing")?,
                tx: None,
                t0: spawned,
                samples: Vec::new(),
                error: Some(e),
            });
        }
        let t0 = Instant::now();
        let sampler = Sampler::start(plan.out_dir.to_path_buf(), t0, SAMPLE_EVERY);
        let mut tx_cmd = self.toolbox.sender(tool, plan)?;
        let mut tx = Peer::spawn("sender", tx_cmd.process_group(pgid))?;
        watch(&mut rx, &mut tx, t0 + self.cfg.time_cap)?;
        Ok(Ended {
            rx: rx.outcome.ok_or("receiver outcome missing")?,
            tx: tx.outcome,
            t0,
            samples: sampler.finish(),
            error: None,
        })
    }

    /// One transfer of `input` with `tool` over `net`. Failures of the tool are results
    /// (an incomplete run); failures of the harness are errors.
    fn run_once(
        &self,
        tool: Tool,
        net: &NetPath,
        input: &Input,
        repeat: usize,
    ) -> Result<RunRecord, String> {
        let out_dir = self.ws.fresh("out")?;
        let work = self.ws.fresh("run")?;
        let plan = Plan {
            input: &input.path,
            out_dir: &out_dir,
            work: &work,
            port: next_port(),
            rx_addr: net.rx_addr,
            tx_ns: net.tx_ns.as_deref(),
            rx_ns: net.rx_ns.as_deref(),
        };
        let tcp_before = if tool.is_tcp() {
            Some(TcpCounters::read(plan.tx_ns)?)
        } else {
            None
        };
        let emu_before = net.emulator_stats();
        let ended = self.run_peers(tool, &plan)?;
        let (rx_out, tx_out, t0) = (ended.rx, ended.tx, ended.t0);
        let mut error = ended.error;
        let samples = ended.samples;
        let tcp_after = if tool.is_tcp() {
            Some(TcpCounters::read(plan.tx_ns)?)
        } else {
            None
        };
        let seconds = rx_out.at.duration_since(t0).as_secs_f64();
        let capped = rx_out.killed && seconds >= self.cfg.time_cap.as_secs_f64() - 0.05;
        // Bytes written: what is there now, or (a receiver that removes a partial file on
        // failure) the most the samples saw.
        let now = measure::dir_bytes(&out_dir);
        let bytes = now.max(samples.iter().map(|s| s.1).max().unwrap_or(0));
        let output = plan.output();
        let complete = rx_out.status.success()
            && std::fs::metadata(&output).is_ok_and(|m| m.len() == input.size)
            && measure::file_blake3(&output)? == input.blake3;
        if error.is_none() && !complete {
            error = Some(failure_reason(&work, rx_out, tx_out, capped));
        }
        let retrans = self
            .toolbox
            .retrans_fraction(tool, &plan, tcp_before.zip(tcp_after));
        let emulator = match (&emu_before, net.emulator_stats()) {
            (Some(b), Some(a)) => path::emulator_delta(b, &a),
            _ => None,
        };
        let goodput = if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds / 1e6
        } else {
            0.0
        };
        let cpu_tx = tx_out.map_or(0.0, |o| o.cpu_s);
        let cpu = cpu_tx + rx_out.cpu_s;
        let timeline = (self.cfg.timeline == Some(net.scenario)).then_some(samples);
        Ok(RunRecord {
            scenario: net.scenario.name(),
            tool: tool.name().into(),
            repeat,
            rtt_ms: net.scenario.rtt_ms(),
            loss_pct: net.scenario.loss_pct(),
            size_bytes: input.size,
            bytes_received: bytes,
            seconds,
            goodput_mbit_s: goodput,
            utilisation: net.scenario.rate_bps().map(|r| goodput * 1e6 / r),
            complete,
            capped,
            receiver_exit: rx_out.status.to_string(),
            sender_exit: tx_out.map_or("not started".into(), |o| o.status.to_string()),
            cpu_sender_s: cpu_tx,
            cpu_receiver_s: rx_out.cpu_s,
            cpu_s_per_gb: (bytes > 0 && cpu.is_finite()).then(|| cpu / (bytes as f64 / 1e9)),
            retrans_fraction: retrans.as_ref().ok().copied(),
            retrans_missing: retrans.err(),
            emulator_cpu_s: emulator.as_ref().and_then(|e| e["cpu_seconds"].as_f64()),
            emulator,
            error,
            timeline,
        })
    }
}

/// How the peers of a run ended.
#[derive(Debug)]
struct Ended {
    /// The receiver.
    rx: measure::Outcome,
    /// The sender, if it was started.
    tx: Option<measure::Outcome>,
    /// When the sender was started (or the receiver, if the sender never was).
    t0: Instant,
    /// The output's size over time.
    samples: Vec<(f64, u64)>,
    /// Why the sender was never started.
    error: Option<String>,
}

/// Waits for a run to end: until the receiver exits (then the sender gets [`GRACE`] to
/// finish), or the sender fails (then the receiver gets [`GRACE`]), or `cap`; whoever is
/// still running then is killed.
fn watch(rx: &mut Peer, tx: &mut Peer, cap: Instant) -> Result<(), String> {
    measure::wait_peers(&mut [&mut *rx, &mut *tx], cap, |p| {
        !p[0].running() || p[1].outcome.is_some_and(|o| !o.status.success())
    })?;
    if rx.running() && !tx.running() {
        measure::wait_peers(&mut [&mut *rx], cap.min(Instant::now() + GRACE), |_| false)?;
    }
    rx.kill()?;
    if tx.running() {
        measure::wait_peers(&mut [&mut *tx], Instant::now() + GRACE, |_| false)?;
    }
    tx.kill()
}

/// Why a run is incomplete, for the record: the cap or the failing peer, with the last line
/// each peer wrote to stderr.
fn failure_reason(
    work: &Path,
    rx: measure::Outcome,
    tx: Option<measure::Outcome>,
    capped: bool,
) -> String {
    let last_line = |f: &str| -> String {
        std::fs::read_to_string(work.join(f))
            .unwrap_or_default()
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("(nothing)")
            .trim()
            .chars()
            .take(160)
            .collect()
    };
    let what = if capped {
        "time cap reached".to_string()
    } else if !rx.status.success() {
        format!("receiver {}", rx.status)
    } else if let Some(tx) = tx.filter(|o| !o.status.success()) {
        format!("sender {}", tx.status)
    } else {
        "output differs from the input".into()
    };
    format!(
        "{what}; receiver said: {}; sender said: {}",
        last_line("rx.err"),
        last_line("tx.err")
    )
}

/// One progress line.
fn progress(r: &RunRecord) -> String {
    let state = if r.complete {
        "complete".to_string()
    } else {
        format!(
            "INCOMPLETE ({})",
            r.error.as_deref().unwrap_or("no reason recorded")
        )
    };
    format!(
        "{:.1} Mbit/s, {} of {} MiB in {:.2} s, {}, {} CPU s/GB, retransmitted {}",
        r.goodput_mbit_s,
        r.bytes_received >> 20,
        r.size_bytes >> 20,
        r.seconds,
        state,
        r.cpu_s_per_gb.map_or("–".into(), super::table::fmt_num),
        r.retrans_fraction
            .map_or("–".into(), |f| format!("{:.3} %", f * 100.0)),
    )
}

/// The report's header: command, date, versions, machine and method.
fn header(cfg: &TransferConfig, versions: &BTreeMap<Tool, String>, wall: Instant) -> String {
    let cmd: Vec<String> = std::env::args().collect();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let v: Vec<&str> = versions.values().map(String::as_str).collect();
    let rmem = std::fs::read_to_string("/proc/sys/net/core/rmem_max").unwrap_or_default();
    format!(
        "Command: `{}`  \nDate: {} (UTC), took {:.0} s. Linux {}, {} CPU(s).  \nTools: {}.\n\n\
         Each row is the median (by goodput) of {} run(s). Goodput: bytes the receiver wrote \
         divided by the time from the sender's start to the receiver's exit (or to the time cap \
         of {} s, when both ends are killed). Complete: the receiver exited 0 and its output \
         equals the input (size and BLAKE3); goodput and CPU marked * are of an incomplete run \
         (partial bytes). CPU: user + system time of the sender and receiver processes per GB \
         delivered. Input and output files are in /dev/shm. Emulated paths (`slipstream \
         netem`): 1 Gbit/s each way, one-way delay RTT/2 each way, random loss each way, \
         drop-tail queue of one bandwidth-delay product; sender and receiver in two network \
         namespaces, with `{}` in each. net.core.rmem_max is {} (global; not changed).",
        cmd.join(" "),
        utc_now(),
        wall.elapsed().as_secs_f64(),
        kernel.trim(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        v.join("; "),
        cfg.repeat,
        cfg.time_cap.as_secs_f64(),
        path::TCP_SYSCTLS
            .iter()
            .map(|(k, v)| format!("{}={v}", k.replace('/', ".")))
            .collect::<Vec<_>>()
            .join(", "),
        rmem.trim(),
    )
}

/// The footnotes on how each tool was run and measured (for the tools that ran).
fn method_notes(runs: &[RunRecord]) -> Vec<String> {
    let ran = |t: Tool| runs.iter().any(|r| r.tool == t.name());
    let mut n = Vec::new();
    if ran(Tool::Slipstream) {
        n.push(
            "slipstream: `slipstream recv srt://:PORT OUT --force` and `slipstream send IN \
             srt://ADDR:PORT`, defaults (BBR-style congestion control, datapath chosen by \
             probing, end-to-end XXH3-128 digest verified by the receiver). Retransmitted: the sender's \
             pkts_retransmitted / pkts_sent."
                .into(),
        );
    }
    if ran(Tool::TcpCubic) || ran(Tool::TcpBbr) {
        n.push(
            "tcp-cubic, tcp-bbr: one kernel TCP connection, file to file, through this \
             binary's minimal peer (`bench transfer --tcp-peer`: sendfile on the sender, 1 MiB \
             reads on the receiver, TCP_CONGESTION set per socket, buffers autotuned). iperf3 \
             -F is not used: its server stops reading when the client reports the end of the \
             test, so its output file comes out short. Retransmitted: RetransSegs / OutSegs \
             of the sender's network namespace (/proc/net/snmp); on loopback that is the \
             host's, whose counters include other traffic and the receiver's ACKs."
                .into(),
        );
    }
    if ran(Tool::Srt) {
        n.push(format!(
            "srt: srt-file-transmit (file mode) on both ends with `{}` (buffers and flow \
             window for 1 Gbit/s × 200 ms with a full queue); its UDP socket buffers are capped \
             by net.core.rmem_max/wmem_max. Retransmitted: from the receiver's -statsout, \
             retransmitted packets received / packets received (its sender stops reporting \
             once the whole file is in its send buffer).",
            tools::SRT_OPTIONS
        ));
    }
    if ran(Tool::Udt) {
        n.push(
            "udt: udtperf over libudt (UDT4, native congestion control), 64 MiB buffers and \
             flow window, forced UDP socket buffers. Retransmitted: the sender's \
             pktRetransTotal / pktSentTotal."
                .into(),
        );
    }
    if runs.iter().any(|r| r.emulator_cpu_s.is_some()) {
        n.push(
            "Emulator CPU s: CPU time of the user-space link emulator during the run; it shares \
             the machine's CPUs with both ends. Its writes into each namespace's TUN device run \
             the kernel's receive path there, so kernel protocol work on arriving packets is \
             charged to the emulator, not to the tools: on emulated paths this leaves kernel \
             TCP (whose sender also transmits from ACK processing) with a CPU column far below \
             its real cost. Compare CPU on loopback."
                .into(),
        );
    }
    n
}

/// The current UTC time as `YYYY-MM-DD HH:MM`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// Year, month, day of a count of days since 1970-01-01 (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: TransferArgs,
    }

    fn cfg(args: &[&str]) -> Result<TransferConfig, String> {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        TransferConfig::from_args(&T::try_parse_from(v).map_err(|e| e.to_string())?.a)
    }

    #[test]
    fn defaults_and_quick() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.tools, Tool::ALL.to_vec());
        assert_eq!(c.scenarios.len(), 13);
        assert_eq!(c.time_cap, Duration::from_secs(60));
        assert_eq!(c.size_for(&Scenario::Loopback), 1 << 30);
        assert_eq!(c.timeline, Scenario::parse("rtt50-loss1").ok());
        let q = cfg(&["--quick"]).unwrap();
        let names: Vec<String> = q.scenarios.iter().map(Scenario::name).collect();
        assert_eq!(names, QUICK_SCENARIOS);
        assert_eq!(q.size_for(&q.scenarios[1]), 64 << 20);
        let s = cfg(&[
            "--size",
            "8",
            "--tools",
            "udt,slipstream,udt",
            "--timeline",
            "none",
        ])
        .unwrap();
        assert_eq!(s.size_for(&Scenario::Loopback), 8 << 20);
        assert_eq!(s.tools, vec![Tool::Slipstream, Tool::Udt]);
        assert_eq!(s.timeline, None);
    }

    #[test]
    fn bad_options_are_named() {
        for (args, needle) in [
            (&["--tools", "ftp"][..], "unknown tool 'ftp'"),
            (&["--scenarios", "wan"][..], "unknown scenario 'wan'"),
            (&["--timeline", "x"][..], "--timeline"),
            (&["--repeat", "0"][..], "--repeat"),
            (&["--time-cap", "0"][..], "--time-cap"),
            (&["--size", "0"][..], "--size"),
        ] {
            let e = cfg(args).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(utc_now().len(), 16);
    }
}
