//! `slipstream bench live`: a constant-bit-rate live stream relayed through SRT live mode by
//! slipstream or by libsrt's `srt-live-transmit`, measured end to end.
//!
//! One run per (tool, rate, path): a paced UDP generator (a thread of this process) sends
//! [`DATAGRAM`]-byte datagrams at the rate, each carrying its sequence number and its send time
//! (CLOCK_MONOTONIC, shared by all network namespaces) in its first 16 bytes ([`encode`]);
//!
//! ```text
//! generator → UDP → sender (udp://:IN → srt://RX:PORT) → SRT live → receiver
//!     (srt://:PORT → udp://127.0.0.1:OUT) → UDP → sink
//! ```
//!
//! The sink (another thread) records each sequence number's first arrival: delivered share,
//! duplicates, reordering and end-to-end latency (arrival − send time). The sender and the
//! receiver are child processes (this very binary's `live`, or `srt-live-transmit`); their CPU
//! time is read from `/proc/PID/stat` once they have exited, before they are reaped
//! ([`measure::Peer`]).
//!
//! Paths: `loopback` (everything on 127.0.0.1 in this namespace), and `emulated`: the link
//! emulator of `bench transfer` ([`NetPath`], `slipstream netem up`, 1 Gbit/s each way,
//! `--delay` one-way each way, `--loss` random loss each way, a drop-tail queue of one
//! bandwidth-delay product). The generator and the sender are in namespace a, the receiver and
//! the sink in namespace b; the generator's and the sink's sockets are opened by short-lived
//! threads that enter those namespaces, so the measuring threads need none.
//!
//! Once both ends listen, the generator sends a fixed number of probe datagrams (sequence
//! [`PROBE`], every 10 ms for the latency plus the round trip plus 300 ms: [`probe_count`]),
//! more only if none has reached the sink yet; the measured stream starts once one has, so
//! connection set-up is not counted against a tool. After the last datagram the sink keeps
//! listening for the latency plus the path's round trip plus a second ([`drain_time`]); what
//! arrives later is not delivered.
//!
//! Ending, the same for both tools: after the drain the sender gets SIGTERM (both close their
//! connection in order and write their statistics), then the receiver (a listener of either
//! tool waits for the next caller) gets [`RX_GRACE`], then SIGTERM; SIGKILL follows any that
//! is still there [`STOP_GRACE`] after its SIGTERM. Every stage is bounded; every child is killed and reaped
//! on every exit path; the emulator is removed when its guard drops, and, if this process is
//! killed, by the guardian of `bench transfer` ([`Guardian`]), whose process group the
//! children join.
//!
//! CPU is charged over the same window for both tools: from just before the first probe to
//! the end of the drain (or the process's exit, if earlier), from `/proc/PID/stat`.

use super::netns;
use super::table::fmt_num;
use super::transfer::guard::Guardian;
use super::transfer::measure::{self, Peer};
use super::transfer::path::{self, NetPath, Scenario};
use clap::Args;
use serde::Serialize;
use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::num::NonZeroU64;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Bytes of UDP payload per datagram: seven 188-byte MPEG-TS packets.
pub const DATAGRAM: usize = 1316;
/// Bytes of the header ([`encode`]): sequence number and send time, little-endian u64s.
pub const HEADER: usize = 16;
/// The sequence number of probe datagrams (not part of the measured stream).
pub const PROBE: u64 = u64::MAX;
/// libsrt's (and slipstream's) default receiver latency, used when --latency is not given.
pub const DEFAULT_LATENCY_MS: u32 = 120;
/// Interval of the probes.
const PROBE_EVERY: Duration = Duration::from_millis(10);
/// Longest wait for the first probe to reach the sink.
const CHAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a peer to bind its port.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a peer gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// How long a receiver gets to exit by itself (and write its statistics) after its sender
/// has ended, before SIGTERM.
const RX_GRACE: Duration = Duration::from_secs(1);
/// The pacer sleeps until this close to a datagram's due time, then spins (yielding). On the
/// 2-vCPU VM this was written on, sleeping alone sent 0.4-10 ms late (p99); spinning the last
/// 30 µs, 50-80 µs; the last 80 µs, 14-38 µs, at twice the CPU.
const SPIN_NS: u64 = 50_000;
/// Most the generator catches up after a stall (ns): a burst of at most this much of the
/// stream; later than this, the schedule resumes from the present.
const MAX_CATCH_UP_NS: u64 = 1_000_000;
/// Extra time the generator may take beyond --duration (when starved of CPU) before it stops.
const GEN_OVERRUN: Duration = Duration::from_secs(2);
/// Receive buffer of the sink (forced when root), bytes.
const SINK_RCVBUF: usize = 32 << 20;
/// Most datagrams one run may send (memory of the sink's per-sequence records).
const MAX_DATAGRAMS: u64 = 20_000_000;
/// Prefix of the per-invocation log directory in the temporary directory.
const WORK_PREFIX: &str = "slipstream-live-";

/// Options of `bench live`.
#[derive(Debug, Args)]
pub struct LiveArgs {
    /// Stream rates, Mbit/s of UDP payload (1316-byte datagrams), comma-separated.
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "20,50,200"
    )]
    rates: Vec<f64>,
    /// Paths, comma-separated: loopback, emulated (emulated needs root).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "loopback,emulated"
    )]
    paths: Vec<String>,
    /// Tools, comma-separated: slipstream (`slipstream live`), libsrt (`srt-live-transmit`).
    #[arg(
        long,
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "slipstream,libsrt"
    )]
    tools: Vec<String>,
    /// Length of the measured stream of each run, seconds.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    duration: f64,
    /// Runs per cell; each metric is reported as its median over the runs.
    #[arg(long, value_name = "N", default_value_t = 1)]
    repeat: usize,
    /// SRT latency, ms, passed as `latency=MS` in both URIs [default: none passed, the
    /// tools' default of 120 ms].
    #[arg(long, value_name = "MS")]
    latency: Option<u32>,
    /// One-way delay of each direction of the emulated path, ms (RTT is twice this).
    #[arg(long, value_name = "MS", default_value_t = 25)]
    delay: u32,
    /// Random loss of each direction of the emulated path, percent.
    #[arg(long, value_name = "PCT", default_value_t = 1.0)]
    loss: f64,
    /// Print one JSON object with every cell as the last stdout line.
    #[arg(long)]
    json: bool,
    /// Write DIR/live.md (markdown table) and DIR/live.jsonl (one JSON object per run).
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
}

/// The relay compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveTool {
    /// `slipstream live` (this binary).
    Slipstream,
    /// libsrt's `srt-live-transmit`.
    Libsrt,
}

impl LiveTool {
    const ALL: [LiveTool; 2] = [LiveTool::Slipstream, LiveTool::Libsrt];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            LiveTool::Slipstream => "slipstream",
            LiveTool::Libsrt => "libsrt",
        }
    }

    fn parse(s: &str) -> Result<LiveTool, String> {
        LiveTool::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("--tools: unknown tool '{s}' (valid: slipstream, libsrt)"))
    }
}

/// Where a run goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// 127.0.0.1 in this namespace.
    Loopback,
    /// The link emulator between two namespaces.
    Emulated,
}

impl PathKind {
    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Loopback => "loopback",
            PathKind::Emulated => "emulated",
        }
    }

    fn parse(s: &str) -> Result<PathKind, String> {
        match s {
            "loopback" => Ok(PathKind::Loopback),
            "emulated" => Ok(PathKind::Emulated),
            _ => Err(format!(
                "--paths: unknown path '{s}' (valid: loopback, emulated)"
            )),
        }
    }
}

/// The options, checked.
#[derive(Debug, Clone)]
struct Config {
    rates: Vec<f64>,
    paths: Vec<PathKind>,
    tools: Vec<LiveTool>,
    duration: f64,
    repeat: usize,
    latency: Option<u32>,
    delay_ms: u32,
    loss_pct: f64,
    json: bool,
    out_dir: Option<PathBuf>,
}

/// Removes duplicates, keeping the first of each.
fn dedup<T: PartialEq>(v: Vec<T>) -> Vec<T> {
    let mut out = Vec::with_capacity(v.len());
    for x in v {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

impl Config {
    fn from_args(a: &LiveArgs) -> Result<Config, String> {
        let rates = dedup(a.rates.clone());
        for &r in &rates {
            if !(r.is_finite() && r > 0.0 && r <= 10_000.0) {
                return Err(format!("--rates: {r} must be within (0, 10000] Mbit/s"));
            }
        }
        let tools = dedup(
            a.tools
                .iter()
                .map(|s| LiveTool::parse(s.trim()))
                .collect::<Result<Vec<_>, _>>()?,
        );
        let paths = dedup(
            a.paths
                .iter()
                .map(|s| PathKind::parse(s.trim()))
                .collect::<Result<Vec<_>, _>>()?,
        );
        if rates.is_empty() || tools.is_empty() || paths.is_empty() {
            return Err("--rates, --tools and --paths must not be empty".into());
        }
        if !(a.duration.is_finite() && (0.5..=3600.0).contains(&a.duration)) {
            return Err(format!(
                "--duration {}: must be within 0.5..=3600 s",
                a.duration
            ));
        }
        if !(1..=99).contains(&a.repeat) {
            return Err(format!("--repeat {}: must be within 1..=99", a.repeat));
        }
        if let Some(l) = a.latency {
            if !(10..=10_000).contains(&l) {
                return Err(format!("--latency {l}: must be within 10..=10000 ms"));
            }
        }
        if !(1..=1000).contains(&a.delay) {
            return Err(format!("--delay {}: must be within 1..=1000 ms", a.delay));
        }
        if !(a.loss.is_finite() && (0.0..=50.0).contains(&a.loss)) {
            return Err(format!("--loss {}: must be within 0..=50 %", a.loss));
        }
        for &r in &rates {
            let n = datagram_count(r, a.duration);
            if n > MAX_DATAGRAMS {
                return Err(format!(
                    "{r} Mbit/s for {} s is {n} datagrams, more than {MAX_DATAGRAMS}: \
                     shorten --duration",
                    a.duration
                ));
            }
        }
        Ok(Config {
            rates,
            paths,
            tools,
            duration: a.duration,
            repeat: a.repeat,
            latency: a.latency,
            delay_ms: a.delay,
            loss_pct: a.loss,
            json: a.json,
            out_dir: a.out_dir.clone(),
        })
    }

    /// The latency in effect (the tools' default when none is passed).
    fn latency_ms(&self) -> u32 {
        self.latency.unwrap_or(DEFAULT_LATENCY_MS)
    }

    /// The emulated scenario (RTT twice the one-way delay).
    fn scenario(&self) -> Scenario {
        Scenario::Emulated {
            rtt_ms: 2 * self.delay_ms,
            loss_pct: self.loss_pct,
        }
    }

    /// A description of a path for the report, saying what the delay means.
    fn path_text(&self, p: PathKind) -> String {
        match p {
            PathKind::Loopback => "loopback: 127.0.0.1, one namespace, no emulation".into(),
            PathKind::Emulated => format!(
                "emulated: `slipstream netem`, 1 Gbit/s each way, {} ms one-way delay each \
                 way (RTT {} ms), {} % random loss each way (data and control packets alike), \
                 drop-tail queue of one bandwidth-delay product; generator and sender in \
                 namespace a, receiver and sink in namespace b",
                self.delay_ms,
                2 * self.delay_ms,
                self.loss_pct
            ),
        }
    }
}

/// Datagrams of a `rate_mbit` stream lasting `secs` (at least one).
pub fn datagram_count(rate_mbit: f64, secs: f64) -> u64 {
    ((rate_mbit * 1e6 * secs / (DATAGRAM as f64 * 8.0)).round() as u64).max(1)
}

/// Nanoseconds between datagrams at `rate_mbit`.
pub fn interval_ns(rate_mbit: f64) -> f64 {
    DATAGRAM as f64 * 8.0 * 1e9 / (rate_mbit * 1e6)
}

/// Writes the header of a datagram: sequence number and send time (ns), little-endian.
pub fn encode(buf: &mut [u8], seq: u64, sent_ns: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    buf[8..HEADER].copy_from_slice(&sent_ns.to_le_bytes());
}

/// The sequence number and send time of a datagram, if it is long enough to hold them.
pub fn decode(buf: &[u8]) -> Option<(u64, u64)> {
    let seq = u64::from_le_bytes(buf.get(..8)?.try_into().ok()?);
    let sent = u64::from_le_bytes(buf.get(8..HEADER)?.try_into().ok()?);
    Some((seq, sent))
}

/// The nearest-rank `p`-th percentile (0..=100) of sorted values.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// The median of the finite values (mean of the middle two for an even count).
pub fn median(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.into_iter().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// CLOCK_MONOTONIC, nanoseconds.
fn mono_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// CPU seconds of the calling thread.
fn thread_cpu_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// Waits until CLOCK_MONOTONIC reaches `due`: sleeps (absolute) until [`SPIN_NS`] before it,
/// then yields until it.
fn wait_until(due: u64) {
    loop {
        let now = mono_ns();
        if now >= due {
            return;
        }
        if due - now > SPIN_NS {
            let at = due - SPIN_NS;
            let ts = rustix::time::Timespec {
                tv_sec: (at / 1_000_000_000) as i64,
                tv_nsec: (at % 1_000_000_000) as _,
            };
            let _ =
                rustix::thread::clock_nanosleep_absolute(rustix::thread::ClockId::Monotonic, &ts);
        } else {
            std::thread::yield_now();
        }
    }
}

/// Runs `f` on a thread inside network namespace `ns` (or here, for `None`); sockets it opens
/// stay in that namespace whichever thread uses them later.
fn in_ns<T: Send>(
    ns: Option<&str>,
    f: impl FnOnce() -> Result<T, String> + Send,
) -> Result<T, String> {
    match ns {
        None => f(),
        Some(ns) => std::thread::scope(|s| {
            s.spawn(|| {
                netns::enter(ns).map_err(|e| e.to_string())?;
                f()
            })
            .join()
            .map_err(|_| format!("a thread in namespace {ns} panicked"))?
        }),
    }
}

/// A UDP port free now (the kernel's pick, released at once), in the calling namespace.
fn free_udp_port() -> Result<u16, String> {
    let s = UdpSocket::bind("0.0.0.0:0").map_err(|e| format!("binding a UDP port: {e}"))?;
    s.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("local address: {e}"))
}

/// Kernel drops counted on the UDP sockets bound to local `port`, from the socket tables of
/// process `pid`'s network namespace (`/proc/PID/net/udp{,6}`, last column).
fn udp_drops(pid: u32, port: u16) -> Option<u64> {
    let want = format!(":{port:04X}");
    let mut found = None;
    for f in ["udp", "udp6"] {
        let Ok(t) = std::fs::read_to_string(format!("/proc/{pid}/net/{f}")) else {
            continue;
        };
        for l in t.lines().skip(1) {
            let fields: Vec<&str> = l.split_whitespace().collect();
            if fields.get(1).is_some_and(|a| a.ends_with(&want)) {
                let d: u64 = fields.last()?.parse().ok()?;
                found = Some(found.unwrap_or(0) + d);
            }
        }
    }
    found
}

/// What the generator did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GenStats {
    /// Datagrams of the stream sent (sequence numbers 0..sent).
    pub sent: u64,
    /// Probes sent before the stream.
    pub probes: u64,
    /// Probes planned ([`probe_count`]); more are sent only while none has arrived.
    pub probes_planned: u64,
    /// From the first probe's send to the first probe's arrival at the sink, ms.
    pub chain_up_ms: Option<f64>,
    /// Rate achieved: bits sent over the time from the first to the last send, Mbit/s.
    pub achieved_mbit_s: f64,
    /// 99th percentile of how late a send was against its schedule, µs.
    pub late_p99_us: f64,
    /// Most a send was late, µs.
    pub late_max_us: f64,
    /// Times the generator was more than 1 ms late and resumed its schedule from then
    /// (instead of sending the missed datagrams in a burst).
    pub stalls: u64,
    /// Time lost to those stalls, ms (the stream took that much longer).
    pub stalled_ms: f64,
    /// Sends that failed (e.g. ECONNREFUSED after the sender died).
    pub send_errors: u64,
    /// Whether it stopped before sending everything (ran over the duration, or was stopped).
    pub cut_short: bool,
    /// CPU seconds of the generator thread.
    pub cpu_s: f64,
    /// When the last datagram was sent (CLOCK_MONOTONIC ns); not reported.
    #[serde(skip)]
    pub end_ns: u64,
    /// When the first probe was sent (CLOCK_MONOTONIC ns); not reported.
    #[serde(skip)]
    pub first_probe_ns: u64,
}

/// Sends `probes` probes (more until `up`), then `n` paced datagrams. With an error: the
/// chain never came up (or the run was stopped first).
fn generate(
    sock: &UdpSocket,
    n: u64,
    interval: f64,
    duration: Duration,
    probes: u64,
    stop: &AtomicBool,
    up: &AtomicBool,
) -> (GenStats, Option<String>) {
    let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1));
    let mut g = GenStats::default();
    let mut buf = vec![0u8; DATAGRAM];
    for (i, b) in buf.iter_mut().enumerate().skip(HEADER) {
        *b = i as u8;
    }
    let t_probe = Instant::now();
    g.probes_planned = probes;
    while g.probes < probes || !up.load(Ordering::Acquire) {
        if stop.load(Ordering::Relaxed) {
            g.cpu_s = thread_cpu_s();
            return (g, Some("stopped before the chain was up".into()));
        }
        if t_probe.elapsed() > CHAIN_TIMEOUT {
            g.cpu_s = thread_cpu_s();
            let e = format!(
                "no probe reached the sink in {CHAIN_TIMEOUT:?} ({} sent): the relay chain did \
                 not come up",
                g.probes
            );
            return (g, Some(e));
        }
        let now = mono_ns();
        if g.probes == 0 {
            g.first_probe_ns = now;
        }
        encode(&mut buf, PROBE, now);
        if sock.send(&buf).is_err() {
            g.send_errors += 1;
        }
        g.probes += 1;
        std::thread::sleep(PROBE_EVERY);
    }
    let mut late: Vec<u32> = Vec::with_capacity(n as usize);
    let t0 = mono_ns() + 1_000_000;
    let give_up = t0 + (duration + GEN_OVERRUN).as_nanos() as u64;
    let mut first = 0;
    // Time the schedule has been pushed back by stalls.
    let mut shift = 0;
    for seq in 0..n {
        let due = t0 + shift + (seq as f64 * interval) as u64;
        wait_until(due);
        let now = mono_ns();
        if now > give_up || stop.load(Ordering::Relaxed) {
            g.cut_short = true;
            break;
        }
        if now - due > MAX_CATCH_UP_NS {
            // Stalled (descheduled): resume the schedule from now rather than burst.
            shift += now - due;
            g.stalls += 1;
            g.stalled_ms += (now - due) as f64 / 1e6;
        }
        encode(&mut buf, seq, now);
        if sock.send(&buf).is_err() {
            g.send_errors += 1;
        }
        if seq == 0 {
            first = now;
        }
        g.end_ns = now;
        g.sent = seq + 1;
        late.push(((now - due) / 1000).min(u64::from(u32::MAX)) as u32);
    }
    late.sort_unstable();
    let late: Vec<u64> = late.into_iter().map(u64::from).collect();
    g.late_p99_us = percentile(&late, 99.0).unwrap_or(0) as f64;
    g.late_max_us = late.last().copied().unwrap_or(0) as f64;
    let span = g.end_ns.saturating_sub(first) as f64 / 1e9;
    if g.sent > 1 && span > 0.0 {
        // n datagrams span n − 1 intervals.
        g.achieved_mbit_s = (g.sent - 1) as f64 * DATAGRAM as f64 * 8.0 / span / 1e6;
    }
    g.cpu_s = thread_cpu_s();
    (g, None)
}

/// What the sink saw.
#[derive(Debug, Clone, Default)]
struct SinkStats {
    /// Distinct sequence numbers of the stream received.
    received: u64,
    /// Datagrams of a sequence number already received.
    duplicates: u64,
    /// First arrivals of a sequence number below the highest seen so far.
    reordered: u64,
    /// Probes received.
    probes: u64,
    /// When the first probe arrived (CLOCK_MONOTONIC ns).
    first_probe_ns: Option<u64>,
    /// Datagrams of the wrong size or with a sequence number out of range.
    malformed: u64,
    /// End-to-end latency of each first arrival, ns, sorted.
    latency_ns: Vec<u64>,
    /// CPU seconds of the sink thread.
    cpu_s: f64,
}

/// Receives until `stop`, recording first arrivals of sequence numbers below `n`; sets `up`
/// at the first datagram (probe or not).
fn sink(sock: &UdpSocket, n: u64, stop: &AtomicBool, up: &AtomicBool) -> SinkStats {
    let mut s = SinkStats::default();
    let mut seen = vec![false; n as usize];
    let mut highest: Option<u64> = None;
    let mut buf = vec![0u8; 65_536];
    s.latency_ns.reserve(n as usize);
    while !stop.load(Ordering::Relaxed) {
        let len = match sock.recv(&mut buf) {
            Ok(len) => len,
            Err(_) => continue, // the read timeout: look at `stop` again
        };
        let now = mono_ns();
        let Some((seq, sent)) = decode(&buf[..len]) else {
            s.malformed += 1;
            continue;
        };
        if seq == PROBE {
            s.probes += 1;
            s.first_probe_ns.get_or_insert(now);
            up.store(true, Ordering::Release);
            continue;
        }
        if len != DATAGRAM || seq >= n {
            s.malformed += 1;
            continue;
        }
        up.store(true, Ordering::Release);
        if std::mem::replace(&mut seen[seq as usize], true) {
            s.duplicates += 1;
            continue;
        }
        s.received += 1;
        if highest.is_some_and(|h| seq < h) {
            s.reordered += 1;
        }
        highest = highest.max(Some(seq));
        s.latency_ns.push(now.saturating_sub(sent));
    }
    s.latency_ns.sort_unstable();
    s.cpu_s = thread_cpu_s();
    s
}

/// Sets a flag when dropped: the threads of a run stop on every way out of it.
struct RaiseOnDrop<'a>(&'a AtomicBool);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The receiving tool's own count of the run.
#[derive(Debug, Clone, Serialize)]
pub struct RxReport {
    /// Distinct data packets received (probes included).
    pub packets: u64,
    /// Packets it found missing (loss reports).
    pub lost: u64,
    /// Packets it dropped (too late to play, or never recovered).
    pub dropped: u64,
    /// Retransmitted packets received.
    pub retransmitted: u64,
}

impl RxReport {
    fn text(&self) -> String {
        format!(
            "{} pkts, {} lost, {} dropped, {} retx",
            self.packets, self.lost, self.dropped, self.retransmitted
        )
    }
}

/// The sending tool's own count of the run.
#[derive(Debug, Clone, Serialize)]
pub struct TxReport {
    /// Data packets sent, retransmissions included.
    pub sent: u64,
    /// Packets it dropped unsent or unacknowledged (too late to play).
    pub dropped: u64,
    /// Packets retransmitted.
    pub retransmitted: u64,
}

impl TxReport {
    fn text(&self) -> String {
        format!(
            "{} sent, {} dropped, {} retx",
            self.sent, self.dropped, self.retransmitted
        )
    }
}

/// One run.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// Tool name.
    pub tool: &'static str,
    /// Path name.
    pub path: &'static str,
    /// Stream rate, Mbit/s of UDP payload.
    pub rate_mbit_s: f64,
    /// Which repetition (0-based).
    pub repeat: usize,
    /// Configured length of the stream, s.
    pub duration_s: f64,
    /// SRT latency in effect, ms.
    pub latency_ms: u32,
    /// Datagrams the stream was to have.
    pub planned: u64,
    /// Distinct datagrams that reached the sink in time.
    pub received: u64,
    /// received / sent, percent.
    pub delivered_pct: f64,
    /// Duplicate arrivals.
    pub duplicates: u64,
    /// First arrivals below the highest sequence number seen.
    pub reordered: u64,
    /// Datagrams of the wrong size or sequence number.
    pub malformed: u64,
    /// Probes that reached the sink.
    pub probes_received: u64,
    /// End-to-end latency percentiles, ms.
    pub latency_p50_ms: Option<f64>,
    /// 99th percentile.
    pub latency_p99_ms: Option<f64>,
    /// Maximum.
    pub latency_max_ms: Option<f64>,
    /// CPU seconds of the sender process, from just before the first probe to the end of the
    /// drain (or its exit).
    pub cpu_sender_s: Option<f64>,
    /// CPU seconds of the receiver process, over the same window.
    pub cpu_receiver_s: Option<f64>,
    /// Both.
    pub cpu_s: Option<f64>,
    /// cpu_s × 1000 / (duration × rate): CPU ms per Mbit of the stream.
    pub cpu_ms_per_mbit: Option<f64>,
    /// cpu_ms_per_mbit / delivered share: CPU ms per Mbit that reached the sink (a tool that
    /// loses part of the stream before doing any work on it spends less per offered Mbit).
    pub cpu_ms_per_delivered_mbit: Option<f64>,
    /// The generator.
    pub generator: GenStats,
    /// CPU seconds of the sink thread.
    pub sink_cpu_s: f64,
    /// Kernel drops at the sender's UDP input socket (its input queue overflowed).
    pub sender_input_drops: Option<u64>,
    /// Kernel drops at the sink's socket (harness; should be 0).
    pub sink_drops: Option<u64>,
    /// The receiving tool's own count.
    pub rx_report: Option<RxReport>,
    /// Why it is missing.
    pub rx_report_missing: Option<String>,
    /// The sending tool's own count.
    pub tx_report: Option<TxReport>,
    /// Why it is missing.
    pub tx_report_missing: Option<String>,
    /// Exit status of the sender.
    pub sender_exit: String,
    /// Exit status of the receiver.
    pub receiver_exit: String,
    /// Emulator counters over the run (emulated path).
    pub emulator: Option<serde_json::Value>,
    /// Why the run failed (no result), if it did.
    pub error: Option<String>,
}

impl RunRecord {
    fn empty(tool: LiveTool, path: PathKind, rate: f64, repeat: usize, cfg: &Config) -> Self {
        RunRecord {
            tool: tool.name(),
            path: path.name(),
            rate_mbit_s: rate,
            repeat,
            duration_s: cfg.duration,
            latency_ms: cfg.latency_ms(),
            planned: datagram_count(rate, cfg.duration),
            received: 0,
            delivered_pct: 0.0,
            duplicates: 0,
            reordered: 0,
            malformed: 0,
            probes_received: 0,
            latency_p50_ms: None,
            latency_p99_ms: None,
            latency_max_ms: None,
            cpu_sender_s: None,
            cpu_receiver_s: None,
            cpu_s: None,
            cpu_ms_per_mbit: None,
            cpu_ms_per_delivered_mbit: None,
            generator: GenStats::default(),
            sink_cpu_s: 0.0,
            sender_input_drops: None,
            sink_drops: None,
            rx_report: None,
            rx_report_missing: None,
            tx_report: None,
            tx_report_missing: None,
            sender_exit: "not started".into(),
            receiver_exit: "not started".into(),
            emulator: None,
            error: None,
        }
    }

    fn progress(&self) -> String {
        if let Some(e) = &self.error {
            return format!("FAILED: {e}");
        }
        let ms = |v: Option<f64>| v.map_or("–".into(), fmt_num);
        format!(
            "chain up in {} ms; delivered {:.2} % of {}, latency p50/p99/max {}/{}/{} ms, CPU {} s ({} ms/Mbit), \
             sender input drops {}, generator {:.1} Mbit/s (late p99 {:.0} µs, {} stalls), sender: {}, receiver: {}",
            ms(self.generator.chain_up_ms),
            self.delivered_pct,
            self.generator.sent,
            ms(self.latency_p50_ms),
            ms(self.latency_p99_ms),
            ms(self.latency_max_ms),
            ms(self.cpu_s),
            ms(self.cpu_ms_per_mbit),
            self.sender_input_drops
                .map_or("?".into(), |d| d.to_string()),
            self.generator.achieved_mbit_s,
            self.generator.late_p99_us,
            self.generator.stalls,
            self.tx_report.as_ref().map_or_else(
                || self.tx_report_missing.clone().unwrap_or_default(),
                TxReport::text
            ),
            self.rx_report.as_ref().map_or_else(
                || self.rx_report_missing.clone().unwrap_or_default(),
                RxReport::text
            ),
        )
    }
}

/// The per-invocation log directory, removed on drop.
#[derive(Debug)]
struct WorkDir {
    dir: PathBuf,
}

impl WorkDir {
    fn create() -> Result<WorkDir, String> {
        let tmp = std::env::temp_dir();
        if let Ok(rd) = std::fs::read_dir(&tmp) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let pid = name
                    .strip_prefix(WORK_PREFIX)
                    .and_then(|p| p.parse::<u32>().ok());
                if pid.is_some_and(|p| !netns::alive(p)) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let dir = tmp.join(format!("{WORK_PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(WorkDir { dir })
    }

    /// An empty subdirectory for one run.
    fn fresh(&self, name: &str) -> Result<PathBuf, String> {
        let d = self.dir.join(name);
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
        Ok(d)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A command running `program` in namespace `ns` (`ip netns exec` execs it, so the process
/// is the tool itself), or here.
fn command_in(ns: Option<&str>, program: &Path) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// The SRT URI `srt://HOSTPORT` with `latency=MS` when one is set.
fn srt_uri(hostport: &str, latency: Option<u32>) -> String {
    match latency {
        Some(ms) => format!("srt://{hostport}?latency={ms}"),
        None => format!("srt://{hostport}"),
    }
}

/// Ports and addresses of one run.
#[derive(Debug, Clone)]
struct Wiring {
    /// The sender's UDP input port (namespace a).
    input: u16,
    /// The receiver's SRT port (namespace b).
    srt: u16,
    /// The sink's port (namespace b, 127.0.0.1).
    output: u16,
    /// The receiver's address as the sender reaches it.
    rx_addr: std::net::IpAddr,
    /// Packets between the libsrt receiver's statistics lines.
    stats_every: u64,
}

/// The receiver's and the sender's command lines.
fn commands(
    tool: LiveTool,
    exe: &Path,
    w: &Wiring,
    latency: Option<u32>,
    net: (Option<&str>, Option<&str>),
    dir: &Path,
) -> (Command, Command) {
    let (tx_ns, rx_ns) = net;
    let listen = srt_uri(&format!(":{}", w.srt), latency);
    let call = srt_uri(&SocketAddr::new(w.rx_addr, w.srt).to_string(), latency);
    let out = format!("udp://127.0.0.1:{}", w.output);
    let input = format!("udp://:{}", w.input);
    let (mut rx, mut tx) = match tool {
        LiveTool::Slipstream => {
            let mut rx = command_in(rx_ns, exe);
            rx.args(["live", &listen, &out, "-q", "--stats-json"])
                .arg(dir.join("rx.json"));
            let mut tx = command_in(tx_ns, exe);
            tx.args(["live", &input, &call, "-q", "--stats-json"])
                .arg(dir.join("tx.json"));
            (rx, tx)
        }
        LiveTool::Libsrt => {
            let prog = Path::new("srt-live-transmit");
            let mut rx = command_in(rx_ns, prog);
            rx.args(["-q", &format!("-s:{}", w.stats_every), "-pf:json", "-f"])
                .arg(format!("-statsout:{}", dir.join("rx-stats.json").display()))
                .args([&listen, &out]);
            let mut tx = command_in(tx_ns, prog);
            tx.args(["-q", &format!("-s:{}", w.stats_every), "-pf:json", "-f"])
                .arg(format!("-statsout:{}", dir.join("tx-stats.json").display()))
                .args([&input, &call]);
            (rx, tx)
        }
    };
    for c in [&mut rx, &mut tx] {
        c.stdin(Stdio::null());
    }
    (rx, tx)
}

/// Points stdout and stderr of `c` to DIR/NAME.out and .err.
fn logs_to(c: &mut Command, dir: &Path, name: &str) -> Result<(), String> {
    let f = |ext: &str| -> Result<Stdio, String> {
        let p = dir.join(format!("{name}.{ext}"));
        std::fs::File::create(&p)
            .map(Stdio::from)
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    c.stdout(f("out")?).stderr(f("err")?);
    Ok(())
}

/// The last non-empty line of a log file, shortened.
fn last_line(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(nothing)")
        .trim()
        .chars()
        .take(200)
        .collect()
}

/// The sending tool's report, read from its statistics file.
fn tx_report(tool: LiveTool, dir: &Path) -> Result<TxReport, String> {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    match tool {
        LiveTool::Slipstream => {
            let p = dir.join("tx.json");
            let text = std::fs::read_to_string(&p)
                .map_err(|_| "no statistics (the sender did not stop in order)".to_string())?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?;
            let c = &v["connection"];
            if c.is_null() {
                return Err("its statistics have no connection counters".into());
            }
            Ok(TxReport {
                sent: n(&c["pkts_sent"]),
                dropped: n(&c["pkts_snd_dropped"]),
                retransmitted: n(&c["pkts_retransmitted"]),
            })
        }
        LiveTool::Libsrt => {
            let text = std::fs::read_to_string(dir.join("tx-stats.json"))
                .map_err(|_| "no statistics file".to_string())?;
            let v = text
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .max_by_key(|v| n(&v["send"]["packets"]))
                .ok_or("no statistics line")?;
            let s = &v["send"];
            Ok(TxReport {
                sent: n(&s["packets"]),
                dropped: n(&s["packetsDropped"]),
                retransmitted: n(&s["packetsRetransmitted"]),
            })
        }
    }
}

/// The receiving tool's report, read from its statistics file.
fn rx_report(tool: LiveTool, dir: &Path) -> Result<RxReport, String> {
    let n = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    match tool {
        LiveTool::Slipstream => {
            let p = dir.join("rx.json");
            let text = std::fs::read_to_string(&p)
                .map_err(|_| "no statistics (the receiver did not stop in order)".to_string())?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))?;
            let c = &v["connection"];
            if c.is_null() {
                return Err("its statistics have no connection counters".into());
            }
            Ok(RxReport {
                packets: n(&c["pkts_recv_unique"]),
                lost: n(&c["pkts_rcv_loss"]),
                dropped: n(&c["pkts_rcv_dropped"]),
                retransmitted: n(&c["pkts_recv_retrans"]),
            })
        }
        LiveTool::Libsrt => {
            let text = std::fs::read_to_string(dir.join("rx-stats.json"))
                .map_err(|_| "no statistics file".to_string())?;
            // Totals (-f) grow line by line: the line with the most packets is the last word.
            let v = text
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .max_by_key(|v| n(&v["recv"]["packets"]))
                .ok_or("no statistics line (fewer packets than one report interval)")?;
            let r = &v["recv"];
            Ok(RxReport {
                packets: n(&r["packetsUnique"]),
                lost: n(&r["packetsLost"]),
                dropped: n(&r["packetsDropped"]),
                retransmitted: n(&r["packetsRetransmitted"]),
            })
        }
    }
}

/// User + system CPU seconds of process `pid` so far (all its threads, and its reaped
/// children), from `/proc/PID/stat` (a zombie keeps its final figures).
fn proc_cpu_s(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_cpu_s(&stat)
}

/// Fields 14-17 (utime, stime, cutime, cstime) of a `/proc/PID/stat` line, in seconds
/// (USER_HZ is 100 on Linux).
fn stat_cpu_s(stat: &str) -> Option<f64> {
    // The command name (field 2) is parenthesised and may hold spaces: count after its end.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: Option<Vec<u64>> = f.get(11..15)?.iter().map(|s| s.parse().ok()).collect();
    Some(ticks?.iter().sum::<u64>() as f64 / 100.0)
}

/// CPU seconds of a peer so far: its final figure once it has been collected, else now.
fn cpu_so_far(p: &Peer) -> Option<f64> {
    match p.outcome {
        Some(o) => Some(o.cpu_s).filter(|c| c.is_finite()),
        None => proc_cpu_s(p.pid()),
    }
}

/// SIGTERM to a peer (not SIGINT: a shell's background jobs ignore it, and so would their
/// children), SIGKILL after `grace` if it is still there; collects it.
fn stop_peer(p: &mut Peer, grace: Duration) -> Result<(), String> {
    if p.running() {
        if let Some(pid) = rustix::process::Pid::from_raw(p.pid() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        measure::wait_peers(&mut [&mut *p], Instant::now() + grace, |_| false)?;
    }
    p.kill()
}

/// Probes sent before the stream: one per 10 ms for the latency plus the round trip plus
/// 300 ms, so that the first has crossed the chain before the last is sent.
pub fn probe_count(latency_ms: u32, rtt_ms: u32) -> u64 {
    (u64::from(latency_ms) + u64::from(rtt_ms) + 300).div_ceil(PROBE_EVERY.as_millis() as u64)
}

/// How long the sink keeps listening after the last datagram: the latency, the path's round
/// trip (a retransmission's worth), and a second.
fn drain_time(latency_ms: u32, rtt_ms: u32) -> Duration {
    Duration::from_millis(u64::from(latency_ms) + u64::from(rtt_ms) + 1000)
}

/// Everything the runs of one invocation share.
struct Bench<'a> {
    cfg: &'a Config,
    exe: PathBuf,
    guardian: Guardian,
    work: WorkDir,
}

impl Bench<'_> {
    /// One run; harness failures are errors, the tools' failures are in the record.
    fn run_once(
        &self,
        tool: LiveTool,
        kind: PathKind,
        net: &NetPath,
        rate: f64,
        repeat: usize,
    ) -> Result<RunRecord, String> {
        let cfg = self.cfg;
        let mut rec = RunRecord::empty(tool, kind, rate, repeat, cfg);
        let n = rec.planned;
        let rtt_ms = net.scenario.rtt_ms().unwrap_or(0);
        let probes = probe_count(cfg.latency_ms(), rtt_ms);
        let (tx_ns, rx_ns) = (net.tx_ns.as_deref(), net.rx_ns.as_deref());
        let sink_sock = in_ns(rx_ns, || {
            let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("sink socket: {e}"))?;
            if rustix::net::sockopt::set_socket_recv_buffer_size_force(&s, SINK_RCVBUF).is_err() {
                let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&s, SINK_RCVBUF);
            }
            s.set_read_timeout(Some(Duration::from_millis(20)))
                .map_err(|e| format!("sink socket: {e}"))?;
            Ok(s)
        })?;
        let w = Wiring {
            input: in_ns(tx_ns, free_udp_port)?,
            srt: in_ns(rx_ns, free_udp_port)?,
            output: sink_sock
                .local_addr()
                .map_err(|e| format!("sink socket: {e}"))?
                .port(),
            rx_addr: net.rx_addr,
            stats_every: (1e6 * rate / (DATAGRAM as f64 * 8.0) / 4.0).max(50.0) as u64,
        };
        let gen_sock = in_ns(tx_ns, || {
            let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("generator: {e}"))?;
            s.connect(("127.0.0.1", w.input))
                .map_err(|e| format!("generator: {e}"))?;
            let _ = rustix::net::sockopt::set_socket_send_buffer_size(&s, 4 << 20);
            Ok(s)
        })?;
        let dir = self.work.fresh(&format!(
            "{}-{}-{}-{repeat}",
            tool.name(),
            kind.name(),
            rate
        ))?;
        let (mut rx_cmd, mut tx_cmd) =
            commands(tool, &self.exe, &w, cfg.latency, (tx_ns, rx_ns), &dir);
        logs_to(&mut rx_cmd, &dir, "rx")?;
        logs_to(&mut tx_cmd, &dir, "tx")?;
        let pgid = self.guardian.process_group();
        let mut rx = Peer::spawn("receiver", rx_cmd.process_group(pgid))?;
        if let Err(e) = measure::wait_listening(&mut rx, w.srt, false, LISTEN_TIMEOUT) {
            rx.kill()?;
            rec.receiver_exit = rx.outcome.map_or("?".into(), |o| o.status.to_string());
            rec.error = Some(format!("{e}; it said: {}", last_line(&dir.join("rx.err"))));
            return Ok(rec);
        }
        let mut tx = Peer::spawn("sender", tx_cmd.process_group(pgid))?;
        let emu_before = net.emulator_stats();
        let mut failure = None;
        if let Err(e) = measure::wait_listening(&mut tx, w.input, false, LISTEN_TIMEOUT) {
            failure = Some(format!("{e}; it said: {}", last_line(&dir.join("tx.err"))));
        }
        let stop = AtomicBool::new(false);
        let up = AtomicBool::new(false);
        let interval = interval_ns(rate);
        let duration = Duration::from_secs_f64(cfg.duration);
        let drain = drain_time(cfg.latency_ms(), rtt_ms);
        let mut drops = (None, None);
        let (mut cpu0, mut cpu1) = ((None, None), (None, None));
        let (gen, sunk) = std::thread::scope(|s| {
            let raise = RaiseOnDrop(&stop);
            let sink_h = s.spawn(|| sink(&sink_sock, n, &stop, &up));
            let gen = if failure.is_none() {
                cpu0 = (cpu_so_far(&tx), cpu_so_far(&rx));
                let gen_h =
                    s.spawn(|| generate(&gen_sock, n, interval, duration, probes, &stop, &up));
                let gen = gen_h
                    .join()
                    .unwrap_or_else(|_| (GenStats::default(), Some("generator panicked".into())));
                // Input drops happen as datagrams arrive: all have by now, and the sender
                // (which may end by itself during the drain) is still there.
                drops.0 = udp_drops(tx.pid(), w.input);
                // Drain: the sink listens on; the peers may only be seen to exit meanwhile.
                let _ =
                    measure::wait_peers(&mut [&mut tx, &mut rx], Instant::now() + drain, |_| false);
                cpu1 = (cpu_so_far(&tx), cpu_so_far(&rx));
                Some(gen)
            } else {
                None
            };
            drops.1 = udp_drops(rx.pid(), w.output);
            drop(raise);
            let sunk = sink_h.join().unwrap_or_default();
            (gen, sunk)
        });
        // The sender first (srt-live-transmit closes its connection on SIGTERM), then the
        // receiver, given time to notice and write its statistics.
        stop_peer(&mut tx, STOP_GRACE)?;
        measure::wait_peers(&mut [&mut rx], Instant::now() + RX_GRACE, |_| false)?;
        stop_peer(&mut rx, STOP_GRACE)?;
        let emu_after = net.emulator_stats();
        rec.emulator = match (&emu_before, &emu_after) {
            (Some(b), Some(a)) => path::emulator_delta(b, a),
            _ => None,
        };
        let (tx_o, rx_o) = (tx.outcome, rx.outcome);
        rec.sender_exit = tx_o.map_or("?".into(), |o| o.status.to_string());
        rec.receiver_exit = rx_o.map_or("?".into(), |o| o.status.to_string());
        let used = |a: Option<f64>, b: Option<f64>| Some(b? - a?).filter(|c| *c >= 0.0);
        rec.cpu_sender_s = used(cpu0.0, cpu1.0);
        rec.cpu_receiver_s = used(cpu0.1, cpu1.1);
        if let (Some(a), Some(b)) = (rec.cpu_sender_s, rec.cpu_receiver_s) {
            rec.cpu_s = Some(a + b);
            rec.cpu_ms_per_mbit = Some((a + b) * 1e3 / (cfg.duration * rate));
        }
        (rec.sender_input_drops, rec.sink_drops) = drops;
        match rx_report(tool, &dir) {
            Ok(r) => rec.rx_report = Some(r),
            Err(e) => rec.rx_report_missing = Some(e),
        }
        match tx_report(tool, &dir) {
            Ok(r) => rec.tx_report = Some(r),
            Err(e) => rec.tx_report_missing = Some(e),
        }
        match gen {
            None => rec.error = failure,
            Some((g, Some(e))) => {
                rec.generator = g;
                rec.error = Some(format!(
                    "{e}; sender said: {}; receiver said: {}",
                    last_line(&dir.join("tx.err")),
                    last_line(&dir.join("rx.err"))
                ));
            }
            Some((g, None)) => rec.generator = g,
        }
        rec.sink_cpu_s = sunk.cpu_s;
        rec.received = sunk.received;
        rec.duplicates = sunk.duplicates;
        rec.reordered = sunk.reordered;
        rec.malformed = sunk.malformed;
        rec.probes_received = sunk.probes;
        rec.generator.chain_up_ms = sunk
            .first_probe_ns
            .map(|t| t.saturating_sub(rec.generator.first_probe_ns) as f64 / 1e6);
        if rec.generator.sent > 0 {
            rec.delivered_pct = sunk.received as f64 * 100.0 / rec.generator.sent as f64;
        }
        rec.cpu_ms_per_delivered_mbit = rec
            .cpu_ms_per_mbit
            .filter(|_| rec.delivered_pct > 0.0)
            .map(|c| c * 100.0 / rec.delivered_pct);
        let ms = |p: f64| percentile(&sunk.latency_ns, p).map(|v| v as f64 / 1e6);
        rec.latency_p50_ms = ms(50.0);
        rec.latency_p99_ms = ms(99.0);
        rec.latency_max_ms = ms(100.0);
        Ok(rec)
    }
}

/// The runs of one (tool, path, rate), summarised: each metric's median over the runs.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// Tool name.
    pub tool: &'static str,
    /// Path name.
    pub path: &'static str,
    /// Stream rate, Mbit/s.
    pub rate_mbit_s: f64,
    /// Runs.
    pub runs: usize,
    /// Runs that failed (no result).
    pub failed_runs: usize,
    /// Median delivered share, percent.
    pub delivered_pct: Option<f64>,
    /// Median of the runs' latency medians, ms.
    pub latency_p50_ms: Option<f64>,
    /// Median of the runs' 99th percentiles, ms.
    pub latency_p99_ms: Option<f64>,
    /// Median of the runs' maxima, ms.
    pub latency_max_ms: Option<f64>,
    /// Median duplicates.
    pub duplicates: Option<f64>,
    /// Median reordered.
    pub reordered: Option<f64>,
    /// Median CPU seconds, sender + receiver.
    pub cpu_s: Option<f64>,
    /// Median CPU ms per Mbit.
    pub cpu_ms_per_mbit: Option<f64>,
    /// Median CPU ms per delivered Mbit.
    pub cpu_ms_per_delivered_mbit: Option<f64>,
    /// Median kernel drops at the sender's input socket.
    pub sender_input_drops: Option<f64>,
    /// Median generator rate, Mbit/s.
    pub generator_mbit_s: Option<f64>,
    /// The receiving tool's report of the run with the median delivered share.
    pub rx_report: Option<String>,
    /// The sending tool's report of that run.
    pub tx_report: Option<String>,
    /// Errors of failed runs.
    pub errors: Vec<String>,
}

/// Groups runs into cells in configuration order.
fn cells(runs: &[RunRecord], cfg: &Config) -> Vec<Cell> {
    let mut out = Vec::new();
    for &p in &cfg.paths {
        for &rate in &cfg.rates {
            for &t in &cfg.tools {
                let all: Vec<&RunRecord> = runs
                    .iter()
                    .filter(|r| r.tool == t.name() && r.path == p.name() && r.rate_mbit_s == rate)
                    .collect();
                if all.is_empty() {
                    continue;
                }
                let ok: Vec<&RunRecord> =
                    all.iter().copied().filter(|r| r.error.is_none()).collect();
                let med =
                    |f: &dyn Fn(&RunRecord) -> Option<f64>| median(ok.iter().filter_map(|r| f(r)));
                let delivered = med(&|r| Some(r.delivered_pct));
                let mid = delivered.and_then(|d| {
                    ok.iter()
                        .min_by(|a, b| {
                            (a.delivered_pct - d)
                                .abs()
                                .total_cmp(&(b.delivered_pct - d).abs())
                        })
                        .copied()
                });
                out.push(Cell {
                    tool: t.name(),
                    path: p.name(),
                    rate_mbit_s: rate,
                    runs: all.len(),
                    failed_runs: all.len() - ok.len(),
                    delivered_pct: delivered,
                    latency_p50_ms: med(&|r| r.latency_p50_ms),
                    latency_p99_ms: med(&|r| r.latency_p99_ms),
                    latency_max_ms: med(&|r| r.latency_max_ms),
                    duplicates: med(&|r| Some(r.duplicates as f64)),
                    reordered: med(&|r| Some(r.reordered as f64)),
                    cpu_s: med(&|r| r.cpu_s),
                    cpu_ms_per_mbit: med(&|r| r.cpu_ms_per_mbit),
                    cpu_ms_per_delivered_mbit: med(&|r| r.cpu_ms_per_delivered_mbit),
                    sender_input_drops: med(&|r| r.sender_input_drops.map(|d| d as f64)),
                    generator_mbit_s: med(&|r| Some(r.generator.achieved_mbit_s)),
                    rx_report: mid.map(|r| {
                        r.rx_report.as_ref().map_or_else(
                            || format!("({})", r.rx_report_missing.as_deref().unwrap_or("none")),
                            RxReport::text,
                        )
                    }),
                    tx_report: mid.map(|r| {
                        r.tx_report.as_ref().map_or_else(
                            || format!("({})", r.tx_report_missing.as_deref().unwrap_or("none")),
                            TxReport::text,
                        )
                    }),
                    errors: all.iter().filter_map(|r| r.error.clone()).collect(),
                });
            }
        }
    }
    out
}

/// The markdown report.
fn markdown(cfg: &Config, versions: &[String], cells: &[Cell], wall: Instant) -> String {
    let cmd: Vec<String> = std::env::args().collect();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut s = format!(
        "# Live streaming: slipstream vs libsrt\n\nCommand: `{}`  \nLinux {}, {} CPU(s); took \
         {:.0} s.  \nTools: {}.\n\n",
        cmd.join(" "),
        kernel.trim(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        wall.elapsed().as_secs_f64(),
        versions.join("; "),
    );
    s.push_str("| tool | path | rate Mbit/s | delivered % | latency p50 / p99 / max ms | dup | reord | CPU s (tx+rx) | CPU ms/Mbit | CPU ms/delivered Mbit | sender input drops | generator Mbit/s | sender's own report | receiver's own report | runs |\n");
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|\n");
    let f = |v: Option<f64>| v.map_or("–".into(), fmt_num);
    let count = |v: Option<f64>| v.map_or("–".into(), |v| format!("{v:.0}"));
    for c in cells {
        let runs = if c.failed_runs > 0 {
            format!("{} ({} failed)", c.runs, c.failed_runs)
        } else {
            c.runs.to_string()
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} / {} / {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            c.tool,
            c.path,
            fmt_num(c.rate_mbit_s),
            c.delivered_pct.map_or("–".into(), |d| format!("{d:.2}")),
            f(c.latency_p50_ms),
            f(c.latency_p99_ms),
            f(c.latency_max_ms),
            count(c.duplicates),
            count(c.reordered),
            f(c.cpu_s),
            f(c.cpu_ms_per_mbit),
            f(c.cpu_ms_per_delivered_mbit),
            count(c.sender_input_drops),
            f(c.generator_mbit_s),
            c.tx_report.as_deref().unwrap_or("–"),
            c.rx_report.as_deref().unwrap_or("–"),
            runs,
        ));
    }
    s.push_str("\nPaths:\n\n");
    for &p in &cfg.paths {
        s.push_str(&format!("- {}\n", cfg.path_text(p)));
    }
    s.push_str(&format!(
        "\nMethod: a paced generator sends {DATAGRAM}-byte UDP datagrams at the rate for {} s \
         (sequence number and CLOCK_MONOTONIC send time in the first 16 bytes) to the sender \
         (`slipstream live udp://:IN srt://RX:PORT` or `srt-live-transmit udp://:IN \
         srt://RX:PORT`), which relays them in SRT live mode to the receiver (`... srt://:PORT \
         udp://127.0.0.1:OUT`), which hands them to a sink. SRT latency {} ms ({}). The \
         measured stream starts once a probe datagram has crossed the whole chain. Delivered: \
         distinct sequence numbers at the sink within the stream plus {} ms (latency + RTT + \
         1 s) / datagrams sent. Latency: sink arrival − send time, per first arrival; p50, p99 \
         and max. CPU: user + system time of the sender and receiver processes from just \
         before the first probe to the end of the drain (or their exit, if earlier), from \
         /proc/PID/stat; CPU ms/Mbit = CPU s × 1000 / (duration × rate), and per delivered \
         Mbit divided by the delivered share. Sender input drops: datagrams the kernel \
         dropped at the sender's UDP input socket (it did not read fast enough). Generator \
         Mbit/s: the rate actually sent (after a stall of more than 1 ms the generator resumes \
         its schedule rather than burst; stalls are in live.jsonl). Own reports: the sending and receiving tools' counters, \
         probes included (slipstream: --stats-json of each end, written as it stops on \
         SIGTERM; srt-live-transmit: -statsout JSON with -f, its last periodic line, about \
         every quarter second of packets, so its counts can trail). After the drain both \
         tools' senders, then receivers, get SIGTERM. Each cell shows the median of each metric \
         over {} run(s); the generator and the sink are threads of this process and share the \
         {} CPUs with the tools (and the emulator).\n",
        cfg.duration,
        cfg.latency_ms(),
        if cfg.latency.is_some() {
            "`latency=MS` in both URIs"
        } else {
            "the tools' default; none passed"
        },
        cfg.latency_ms() + 1000,
        cfg.repeat,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    ));
    let errors: Vec<String> = cells
        .iter()
        .flat_map(|c| {
            c.errors
                .iter()
                .map(move |e| format!("- {} {} {} Mbit/s: {e}", c.tool, c.path, c.rate_mbit_s))
        })
        .collect();
    if !errors.is_empty() {
        s.push_str("\nFailed runs:\n\n");
        s.push_str(&errors.join("\n"));
        s.push('\n');
    }
    s
}

/// Version of srt-live-transmit, or why it cannot run.
fn probe_libsrt() -> Result<String, String> {
    let out = Command::new("srt-live-transmit")
        .arg("-version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "tool libsrt needs srt-live-transmit, which cannot be run ({e}); install \
                 srt-tools or pass --tools slipstream"
            )
        })?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let version = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("SRT Library version:"))
        .and_then(|v| v.split(',').next())
        .map_or("version unknown", str::trim);
    Ok(format!("srt-live-transmit (libsrt {version})"))
}

/// Runs `bench live`.
pub fn run(a: &LiveArgs) -> Result<(), String> {
    let cfg = Config::from_args(a)?;
    let wall = Instant::now();
    let exe = std::env::current_exe().map_err(|e| format!("finding this binary: {e}"))?;
    let mut versions = Vec::new();
    for &t in &cfg.tools {
        versions.push(match t {
            LiveTool::Slipstream => format!("slipstream {}", env!("CARGO_PKG_VERSION")),
            LiveTool::Libsrt => probe_libsrt()?,
        });
    }
    if cfg.paths.contains(&PathKind::Emulated) && !netns::is_root() {
        return Err(
            "the emulated path needs root (network namespaces and the link emulator); \
             run as root or pass --paths loopback"
                .into(),
        );
    }
    let mut jsonl = match &cfg.out_dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
            let p = d.join("live.jsonl");
            Some((
                std::fs::File::create(&p).map_err(|e| format!("{}: {e}", p.display()))?,
                p,
            ))
        }
        None => None,
    };
    let bench = Bench {
        cfg: &cfg,
        guardian: Guardian::spawn(&exe)?,
        exe,
        work: WorkDir::create()?,
    };
    let total = cfg.paths.len() * cfg.rates.len() * cfg.tools.len() * cfg.repeat;
    let mut done = 0;
    let mut runs: Vec<RunRecord> = Vec::new();
    let mut harness_error = None;
    for &kind in &cfg.paths {
        let net = match kind {
            PathKind::Loopback => NetPath::loopback(),
            PathKind::Emulated => {
                eprintln!("bringing up the {}", cfg.path_text(kind));
                match NetPath::create(cfg.scenario(), &bench.exe) {
                    Ok(n) => n,
                    Err(e) => {
                        eprintln!("error: emulated path: {e}");
                        harness_error.get_or_insert(format!("emulated path: {e}"));
                        done += cfg.rates.len() * cfg.tools.len() * cfg.repeat;
                        continue;
                    }
                }
            }
        };
        for &rate in &cfg.rates {
            for k in 0..cfg.repeat {
                for &tool in &cfg.tools {
                    done += 1;
                    eprintln!(
                        "[{done}/{total}] {} {} {} Mbit/s run {}/{}: streaming {} s",
                        tool.name(),
                        kind.name(),
                        rate,
                        k + 1,
                        cfg.repeat,
                        cfg.duration
                    );
                    let rec = match bench.run_once(tool, kind, &net, rate, k) {
                        Ok(r) => r,
                        Err(e) => {
                            harness_error.get_or_insert(format!(
                                "{} {} {rate} Mbit/s: {e}",
                                tool.name(),
                                kind.name()
                            ));
                            let mut r = RunRecord::empty(tool, kind, rate, k, &cfg);
                            r.error = Some(format!("harness: {e}"));
                            r
                        }
                    };
                    eprintln!("    {}", rec.progress());
                    if let Some((f, p)) = &mut jsonl {
                        let line = serde_json::to_string(&rec).map_err(|e| e.to_string())?;
                        writeln!(f, "{line}").map_err(|e| format!("{}: {e}", p.display()))?;
                    }
                    runs.push(rec);
                }
            }
        }
        drop(net);
    }
    drop(bench);
    let cells = cells(&runs, &cfg);
    let md = markdown(&cfg, &versions, &cells, wall);
    println!("{md}");
    let mut files = Vec::new();
    if let Some(d) = &cfg.out_dir {
        let p = d.join("live.md");
        std::fs::write(&p, &md).map_err(|e| format!("{}: {e}", p.display()))?;
        files.push(p.display().to_string());
        files.push(d.join("live.jsonl").display().to_string());
        eprintln!("wrote {}", files.join(", "));
    }
    if cfg.json {
        let v = serde_json::json!({
            "live": {
                "wall_seconds": wall.elapsed().as_secs_f64(),
                "duration_s": cfg.duration,
                "latency_ms": cfg.latency_ms(),
                "paths": cfg.paths.iter().map(|&p| serde_json::json!({
                    "name": p.name(), "description": cfg.path_text(p),
                })).collect::<Vec<_>>(),
                "emulated_one_way_delay_ms": cfg.delay_ms,
                "emulated_rtt_ms": 2 * cfg.delay_ms,
                "emulated_loss_pct_each_way": cfg.loss_pct,
                "tools": versions,
                "files": files,
                "cells": cells,
            }
        });
        println!("{v}");
    }
    harness_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: LiveArgs,
    }

    fn cfg(args: &[&str]) -> Result<Config, String> {
        let mut v = vec!["t"];
        v.extend_from_slice(args);
        Config::from_args(&T::try_parse_from(v).map_err(|e| e.to_string())?.a)
    }

    #[test]
    fn packets_round_trip() {
        let mut buf = vec![0xAAu8; DATAGRAM];
        encode(&mut buf, 0x0102_0304_0506_0708, u64::MAX - 1);
        assert_eq!(decode(&buf), Some((0x0102_0304_0506_0708, u64::MAX - 1)));
        assert_eq!(buf[0], 0x08, "little-endian");
        assert_eq!(buf[HEADER], 0xAA, "filler untouched");
        encode(&mut buf, PROBE, 7);
        assert_eq!(decode(&buf[..HEADER]), Some((PROBE, 7)));
        assert_eq!(decode(&buf[..HEADER - 1]), None);
        assert_eq!(decode(&[]), None);
    }

    #[test]
    fn percentiles_and_medians() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[1, 2, 3], 50.0), Some(2));
        assert_eq!(median([3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median([f64::NAN, 5.0]), Some(5.0));
        assert_eq!(median(Vec::<f64>::new()), None);
    }

    #[test]
    fn rates_and_counts() {
        // 200 Mbit/s of 1316-byte datagrams is about 19 000 per second.
        assert_eq!(datagram_count(200.0, 1.0), 18_997);
        assert!((interval_ns(200.0) - 52_640.0).abs() < 1e-6);
        assert_eq!(datagram_count(0.001, 0.5), 1);
        assert_eq!(probe_count(120, 0), 42);
        assert_eq!(probe_count(120, 50), 47);
        let stat = "9 (a (b) c) S 1 9 9 0 -1 0 0 0 0 0 250 75 3 2 20 0 1 0 100";
        assert_eq!(stat_cpu_s(stat), Some(3.3));
        assert_eq!(stat_cpu_s("9 (x) S 1"), None);
        assert!(proc_cpu_s(std::process::id()).is_some());
        assert_eq!(
            drain_time(120, 50),
            Duration::from_millis(1170),
            "latency + RTT + 1 s"
        );
    }

    #[test]
    fn options() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.rates, vec![20.0, 50.0, 200.0]);
        assert_eq!(c.paths, vec![PathKind::Loopback, PathKind::Emulated]);
        assert_eq!(c.tools, vec![LiveTool::Slipstream, LiveTool::Libsrt]);
        assert_eq!(c.latency_ms(), 120);
        assert_eq!(
            c.scenario(),
            Scenario::Emulated {
                rtt_ms: 50,
                loss_pct: 1.0
            }
        );
        assert!(c.path_text(PathKind::Emulated).contains("25 ms one-way"));
        let c = cfg(&["--rates", "5,5,1", "--tools", "libsrt", "--latency", "300"]).unwrap();
        assert_eq!(c.rates, vec![5.0, 1.0]);
        assert_eq!(c.tools, vec![LiveTool::Libsrt]);
        assert_eq!(c.latency_ms(), 300);
        for (args, needle) in [
            (&["--tools", "ffmpeg"][..], "unknown tool 'ffmpeg'"),
            (&["--paths", "wan"][..], "unknown path 'wan'"),
            (&["--rates", "0"][..], "--rates"),
            (&["--repeat", "0"][..], "--repeat"),
            (&["--duration", "0"][..], "--duration"),
            (&["--rates", "10000", "--duration", "3600"][..], "datagrams"),
        ] {
            let e = cfg(args).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }

    #[test]
    fn command_lines() {
        let w = Wiring {
            input: 4000,
            srt: 4001,
            output: 4002,
            rx_addr: "10.77.0.2".parse().unwrap(),
            stats_every: 100,
        };
        let args = |c: &Command| -> String {
            std::iter::once(c.get_program())
                .chain(c.get_args())
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let d = Path::new("/w");
        let (rx, tx) = commands(
            LiveTool::Libsrt,
            Path::new("/bin/slipstream"),
            &w,
            Some(200),
            (Some("n-a"), Some("n-b")),
            d,
        );
        assert_eq!(
            args(&rx),
            "ip netns exec n-b srt-live-transmit -q -s:100 -pf:json -f \
             -statsout:/w/rx-stats.json srt://:4001?latency=200 udp://127.0.0.1:4002"
        );
        assert_eq!(
            args(&tx),
            "ip netns exec n-a srt-live-transmit -q -s:100 -pf:json -f -statsout:/w/tx-stats.json \
             udp://:4000 srt://10.77.0.2:4001?latency=200"
        );
        let (rx, tx) = commands(
            LiveTool::Slipstream,
            Path::new("/bin/slipstream"),
            &w,
            None,
            (None, None),
            d,
        );
        assert_eq!(
            args(&rx),
            "/bin/slipstream live srt://:4001 udp://127.0.0.1:4002 -q --stats-json /w/rx.json"
        );
        assert_eq!(
            args(&tx),
            "/bin/slipstream live udp://:4000 srt://10.77.0.2:4001 -q --stats-json /w/tx.json"
        );
    }

    #[test]
    fn generator_feeds_sink_over_loopback() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let (stop, up) = (AtomicBool::new(false), AtomicBool::new(false));
        let n = datagram_count(10.0, 0.2);
        let (g, s) = std::thread::scope(|sc| {
            let h = sc.spawn(|| sink(&rx, n, &stop, &up));
            let g = generate(
                &tx,
                n,
                interval_ns(10.0),
                Duration::from_secs(5),
                3,
                &stop,
                &up,
            );
            std::thread::sleep(Duration::from_millis(50));
            stop.store(true, Ordering::Relaxed);
            (g, h.join().unwrap())
        });
        let (g, e) = g;
        assert_eq!(e, None);
        assert_eq!(g.sent, n);
        assert!(g.probes >= 3 && s.probes >= 3);
        assert!(s.first_probe_ns.is_some_and(|t| t >= g.first_probe_ns));
        assert_eq!(s.received, n);
        assert_eq!(s.duplicates + s.malformed, 0);
        assert_eq!(s.latency_ns.len() as u64, n);
        // Paced, not a burst: never faster than asked. (Slower happens when the test
        // threads are starved for CPU; the benchmark reports the achieved rate.)
        assert!(
            g.achieved_mbit_s > 1.0 && g.achieved_mbit_s < 11.0,
            "{}",
            g.achieved_mbit_s
        );
    }
}
