//! `slipstream live` end to end, against real peers: srt-live-transmit (libsrt 1.5.1) and
//! ffmpeg both ways over loopback, slipstream and libsrt over an emulated lossy path (as
//! root), a bursty file source, a caller that dies, orderly stops on SIGINT/SIGTERM and
//! `--fail-on-loss`.
//!
//! Every stream is made of 1316-byte messages numbered in their first 8 bytes and filled
//! with bytes derived from the number, so that a sink can tell a lost, repeated, reordered,
//! torn or corrupted message apart. Each test bounds every wait, kills its children when it
//! fails (and prints what every one of them wrote on stderr), and takes its ports from the
//! kernel. A missing tool skips the test with a message, or fails it in CI.

mod common;
use common::{ci, root_test, text};

use rustix::process::{kill_process, Pid, Signal};
use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_slipstream");
/// Size of every test message (seven MPEG-TS packets, as srt-live-transmit sends).
const MSG: usize = 1316;
/// Sequence number of the messages that prime a path before the numbered stream starts.
const PROBE: u64 = u64::MAX;
/// Sequence numbers of a second caller's stream (test of a listener serving a new peer).
const SECOND: u64 = 1_000_000;

/// Each test runs busy peers; on two cores they run one at a time so that a starved peer
/// does not pass for a protocol failure.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A UDP port the kernel picks (free now), rather than a fixed one among ephemeral ports.
fn port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port on loopback")
}

/// Whether `tool` runs; in CI its absence fails the test.
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("-version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(ok || !ci(), "{tool} is missing in CI");
    if !ok {
        eprintln!("skipping: {tool} is not installed (srt-tools, ffmpeg)");
    }
    ok
}

// ---------------------------------------------------------------------------------------
// Children

/// A child process whose stdout and stderr are collected while it runs (readable at any
/// time), signalled by pid, killed when dropped; when the test is failing, the drop prints
/// what it wrote on stderr.
struct Peer {
    name: String,
    child: Child,
    out: Arc<Mutex<Vec<u8>>>,
    err: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

fn collect(mut r: impl Read + Send + 'static, into: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            into.lock().unwrap().extend_from_slice(&buf[..n]);
        }
    })
}

/// `prog args…`, in network namespace `ns` if given, with stdin closed.
fn command(ns: Option<&str>, prog: &str, args: &[String]) -> Command {
    let mut c = match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, prog]);
            c
        }
        None => Command::new(prog),
    };
    c.args(args).stdin(Stdio::null());
    c
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

impl Peer {
    fn spawn(name: &str, mut cmd: Command) -> Peer {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let (out, err) = (Arc::default(), Arc::default());
        let readers = vec![
            collect(child.stdout.take().unwrap(), Arc::clone(&out)),
            collect(child.stderr.take().unwrap(), Arc::clone(&err)),
        ];
        Peer {
            name: name.to_string(),
            child,
            out,
            err,
            readers,
            status: None,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn signal(&mut self, sig: Signal) {
        if self.poll().is_none() {
            let pid = Pid::from_raw(self.pid() as i32).expect("a pid");
            let _ = kill_process(pid, sig);
        }
    }

    fn stderr(&self) -> String {
        text(&self.err.lock().unwrap())
    }

    fn stdout(&self) -> Vec<u8> {
        self.out.lock().unwrap().clone()
    }

    fn poll(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("wait");
        }
        self.status
    }

    /// Waits at most `limit` for the exit (the child keeps running if it does not), then
    /// for its last output.
    fn wait(&mut self, limit: Duration) -> Result<ExitStatus, String> {
        let end = Instant::now() + limit;
        let status = loop {
            if let Some(s) = self.poll() {
                break s;
            }
            if Instant::now() > end {
                return Err(format!("{} still running after {limit:?}", self.name));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let end = Instant::now() + Duration::from_secs(2);
        while self.readers.iter().any(|r| !r.is_finished()) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(status)
    }

    /// Waits until its stderr contains `needle` `times` times (case-insensitive).
    fn wait_stderr(&mut self, needle: &str, times: usize, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        loop {
            if self.stderr().to_lowercase().matches(needle).count() >= times {
                return true;
            }
            if Instant::now() > end || self.poll().is_some() {
                return self.stderr().to_lowercase().matches(needle).count() >= times;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until it has a UDP socket bound to `port` (in its own network namespace).
    fn wait_bound(&mut self, port: u16, limit: Duration) {
        let end = Instant::now() + limit;
        while !udp_bound(self.pid(), port) {
            if let Some(s) = self.poll() {
                panic!("{} exited ({s}) before binding port {port}", self.name);
            }
            assert!(
                Instant::now() < end,
                "{} did not bind UDP port {port} in {limit:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// CPU time it used so far (user + system), in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .unwrap_or_else(|e| panic!("{}: /proc stat: {e}", self.name));
        // Fields after the command name in parentheses start at field 3 (state); utime and
        // stime are fields 14 and 15.
        let rest = stat.rsplit_once(')').map(|x| x.1).unwrap_or_default();
        let f: Vec<u64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        f[11] + f[12]
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if self.poll().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            let err = self.stderr();
            let lines: Vec<&str> = err.lines().collect();
            let from = lines.len().saturating_sub(60);
            eprintln!(
                "---- {} (pid {}, {}) stderr{}:\n{}",
                self.name,
                self.pid(),
                self.status
                    .map_or("killed by the test".to_string(), |s| s.to_string()),
                if from > 0 { ", last 60 lines" } else { "" },
                lines[from..].join("\n")
            );
        }
    }
}

/// Whether process `pid` has a UDP socket bound to `port`, as its namespace's
/// /proc/net/udp{,6} lists.
fn udp_bound(pid: u32, port: u16) -> bool {
    let want = format!(":{port:04X}");
    ["udp", "udp6"].iter().any(|t| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{t}"))
            .unwrap_or_default()
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(1))
            .any(|local| local.ends_with(&want))
    })
}

fn clock_ticks_per_second() -> u64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| text(&o.stdout).trim().parse().ok())
        .unwrap_or(100)
}

/// A scratch directory, removed when the test passes (kept, and named, when it fails).
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("slipstream-live-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("scratch dir");
        Scratch(d)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("scratch files kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn file_uri(p: &Path) -> String {
    format!("file://{}", p.display())
}

// ---------------------------------------------------------------------------------------
// Messages, sources and sinks

/// Message `seq`: the number (big-endian) in the first 8 bytes, then bytes derived from it.
fn message(seq: u64) -> Vec<u8> {
    let mut m = vec![0u8; MSG];
    m[..8].copy_from_slice(&seq.to_be_bytes());
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for b in &mut m[8..] {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    m
}

fn seq_of(m: &[u8]) -> u64 {
    u64::from_be_bytes(m[..8].try_into().unwrap())
}

/// A UDP socket bound to `addr` in network namespace `ns` (the calling process's when
/// None): a thread enters the namespace, binds, and hands the socket back.
fn udp_socket(ns: Option<&str>, addr: &str) -> UdpSocket {
    let (ns, addr) = (ns.map(str::to_string), addr.to_string());
    std::thread::spawn(move || {
        if let Some(ns) = ns {
            let f = std::fs::File::open(format!("/run/netns/{ns}"))
                .unwrap_or_else(|e| panic!("netns {ns}: {e}"));
            rustix::thread::move_into_link_name_space(
                f.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .unwrap_or_else(|e| panic!("setns {ns}: {e}"));
        }
        let s = UdpSocket::bind(&addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        let _ = socket2::SockRef::from(&s).set_recv_buffer_size(8 << 20);
        s
    })
    .join()
    .expect("socket thread")
}

/// Numbered messages sent at a steady rate from a thread: message `base + i` is due at
/// `start + i * interval` on the monotonic clock; the thread sleeps until the next one is
/// due and sends whatever is due when it wakes (so the mean rate is exact and bursts are a
/// few messages at most).
struct Pacer {
    sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Pacer {
    /// `count` messages (None: until stopped) at `mbit` Mbit/s of payload.
    fn start(sock: UdpSocket, to: SocketAddr, mbit: f64, base: u64, count: Option<u64>) -> Pacer {
        let sent = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (Arc::clone(&sent), Arc::clone(&stop));
        let interval = MSG as f64 * 8.0 / (mbit * 1e6);
        let handle = std::thread::spawn(move || {
            let start = Instant::now();
            let mut i = 0u64;
            while !matches!(count, Some(n) if i >= n) && !st.load(Ordering::Relaxed) {
                let due = start + Duration::from_secs_f64(i as f64 * interval);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                    continue;
                }
                if let Err(e) = sock.send_to(&message(base + i), to) {
                    // A refused datagram (nobody bound yet) is lost like any other.
                    if e.kind() != std::io::ErrorKind::ConnectionRefused {
                        panic!("pacer: {e}");
                    }
                }
                i += 1;
                s.store(i, Ordering::Relaxed);
            }
        });
        Pacer {
            sent,
            stop,
            handle: Some(handle),
        }
    }

    fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops (or waits for the end of a counted stream) and returns how many were sent.
    fn finish(mut self, stop: bool) -> u64 {
        if stop {
            self.stop.store(true, Ordering::Relaxed);
        }
        if let Some(h) = self.handle.take() {
            h.join().expect("pacer thread");
        }
        self.sent()
    }
}

impl Drop for Pacer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Collects every datagram arriving at a UDP socket, from a thread.
struct Sink {
    port: u16,
    got: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Sink {
    fn start(sock: UdpSocket) -> Sink {
        let port = sock.local_addr().unwrap().port();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, st) = (Arc::clone(&got), Arc::clone(&stop));
        let handle = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            while !st.load(Ordering::Relaxed) {
                if let Ok(n) = sock.recv(&mut buf) {
                    g.lock().unwrap().push(buf[..n].to_vec());
                }
            }
        });
        Sink {
            port,
            got,
            stop,
            handle: Some(handle),
        }
    }

    fn len(&self) -> usize {
        self.got.lock().unwrap().len()
    }

    /// Waits until message `last` arrived, or nothing did for `quiet`, or `limit` passed.
    fn settle(&self, last: u64, quiet: Duration, limit: Duration) {
        let end = Instant::now() + limit;
        let (mut n, mut since) = (self.len(), Instant::now());
        while Instant::now() < end {
            let (k, done) = {
                let got = self.got.lock().unwrap();
                let done = got
                    .last()
                    .is_some_and(|m| m.len() >= 8 && seq_of(m) == last);
                (got.len(), done)
            };
            if done {
                return;
            }
            if k != n {
                (n, since) = (k, Instant::now());
            } else if since.elapsed() > quiet {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn finish(mut self) -> Vec<Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().expect("sink thread");
        }
        std::mem::take(&mut *self.got.lock().unwrap())
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Sends probe messages to `to` every 20 ms until one arrives at `sink` (the whole path is
/// up, both ends connected), at most `limit`; the peers must stay up meanwhile.
fn prime(src: &UdpSocket, to: SocketAddr, sink: &Sink, peers: &mut [&mut Peer], limit: Duration) {
    let end = Instant::now() + limit;
    while sink.len() == 0 {
        for p in peers.iter_mut() {
            if let Some(s) = p.poll() {
                panic!("{} exited ({s}) before the path was up", p.name);
            }
        }
        assert!(
            Instant::now() < end,
            "no probe crossed the path in {limit:?}"
        );
        let _ = src.send_to(&message(PROBE), to);
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Checks datagrams that crossed a path: leading probes aside, messages `base..base + sent`
/// in order, each at most once and byte-exact, with exactly `missing` of them absent.
fn check_stream(got: &[Vec<u8>], base: u64, sent: u64, missing: u64) -> Result<(), String> {
    let probes = got
        .iter()
        .take_while(|m| m.len() == MSG && seq_of(m) == PROBE)
        .count();
    let msgs = &got[probes..];
    // Numbers relative to `base` from here on.
    let mut prev: Option<u64> = None;
    let mut gaps = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        if m.len() != MSG {
            return Err(format!("datagram {i} has {} bytes, not {MSG}", m.len()));
        }
        let s = seq_of(m).wrapping_sub(base);
        if s == PROBE.wrapping_sub(base) {
            return Err(format!("a probe arrived after message {prev:?}"));
        }
        if s >= sent {
            return Err(format!(
                "message {} was never sent ({sent} from {base} were)",
                s.wrapping_add(base)
            ));
        }
        if prev.is_some_and(|p| s <= p) {
            return Err(format!(
                "message {s} arrived after {} (repeated or out of order)",
                prev.unwrap()
            ));
        }
        if *m != message(base + s) {
            return Err(format!("message {} is corrupted", base + s));
        }
        let expect = prev.map_or(0, |p| p + 1);
        if s != expect && gaps.len() < 10 {
            gaps.push(format!("{expect}..{s}"));
        }
        prev = Some(s);
    }
    let absent = sent - msgs.len() as u64;
    if absent != missing {
        return Err(format!(
            "{} of {sent} messages arrived: {absent} missing where {missing} were reported \
             dropped (first gaps: {gaps:?}, last received: {prev:?})",
            msgs.len()
        ));
    }
    Ok(())
}

/// Checks a byte stream (file or stdout) of messages `base, base+1, …`: whole messages only
/// (no torn one), in order, byte-exact. Returns how many.
fn check_prefix(bytes: &[u8], base: u64) -> Result<u64, String> {
    if !bytes.len().is_multiple_of(MSG) {
        return Err(format!(
            "{} bytes: not a whole number of {MSG}-byte messages (a torn message)",
            bytes.len()
        ));
    }
    for (i, m) in bytes.chunks(MSG).enumerate() {
        if *m != message(base + i as u64) {
            return Err(format!(
                "message {i} of the output is {} where {} was due (or corrupted)",
                seq_of(m),
                base + i as u64
            ));
        }
    }
    Ok((bytes.len() / MSG) as u64)
}

/// The final summary on stderr: from the first line starting with "relayed" to the end.
fn summary(stderr: &str) -> Option<String> {
    let at = stderr
        .lines()
        .position(|l| l.trim_start().starts_with("relayed"))?;
    Some(stderr.lines().skip(at).collect::<Vec<_>>().join("\n"))
}

/// Lines of `summary` that claim a nonzero count of dropped or lost messages ("5 lost",
/// "dropped: 3", "pkts_rcv_dropped": 2, …): a word naming drops or losses next to a
/// nonzero number.
fn drop_claims(summary: &str) -> Vec<String> {
    summary
        .lines()
        .filter(|line| {
            let lower = line.to_lowercase();
            let words: Vec<&str> = lower
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .collect();
            words.iter().enumerate().any(|(i, w)| {
                (w.contains("drop") || w.contains("lost") || w.contains("loss"))
                    && [i.wrapping_sub(1), i + 1]
                        .iter()
                        .filter_map(|&j| words.get(j))
                        .any(|n| n.parse::<u64>().is_ok_and(|n| n > 0))
            })
        })
        .map(str::to_string)
        .collect()
}

/// Asserts that `p` printed a summary, and that it names drops exactly when `drops`.
fn assert_summary(p: &Peer, drops: bool) {
    let err = p.stderr();
    let s =
        summary(&err).unwrap_or_else(|| panic!("{}: no summary line starting \"relayed\"", p.name));
    let claims = drop_claims(&s);
    if drops {
        assert!(
            !claims.is_empty(),
            "{}: its summary names no drops:\n{s}",
            p.name
        );
    } else {
        assert!(
            claims.is_empty(),
            "{}: nothing was dropped but its summary claims so: {claims:?}",
            p.name
        );
    }
}

/// Stops `p` with `sig` and asserts an orderly exit (status 0) within `limit`.
fn stop(p: &mut Peer, sig: Signal, limit: Duration) {
    p.signal(sig);
    match p.wait(limit) {
        Ok(s) => assert!(s.success(), "{} exited {s} after {sig:?}", p.name),
        Err(e) => panic!("{e} after {sig:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// Relays between slipstream and srt-live-transmit, over loopback or an emulated path

#[derive(Clone, Copy, PartialEq, Debug)]
enum Tool {
    Slipstream,
    SrtLiveTransmit,
}

/// An emulated link (`slipstream netem up`), taken down on drop even when the test fails.
struct Emu {
    name: String,
    /// Namespace and address of each side.
    a: (String, String),
    b: (String, String),
}

impl Emu {
    fn up(name: &str, opts: &[&str]) -> Emu {
        let out = Command::new(BIN)
            .args(["netem", "up", name])
            .args(opts)
            .output()
            .unwrap();
        assert!(out.status.success(), "netem up: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let v: serde_json::Value =
            serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
        let side = |s: &str| {
            (
                v[s]["netns"].as_str().unwrap().to_string(),
                v[s]["addr"].as_str().unwrap().to_string(),
            )
        };
        Emu {
            name: name.into(),
            a: side("a"),
            b: side("b"),
        }
    }

    fn lost_a_to_b(&self) -> u64 {
        let out = Command::new(BIN)
            .args(["netem", "stats", &self.name, "--json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["a_to_b"]["lost"].as_u64().unwrap_or(0)
    }
}

impl Drop for Emu {
    fn drop(&mut self) {
        let _ = Command::new(BIN)
            .args(["netem", "down", &self.name])
            .output();
    }
}

/// The drops a receiver reported: slipstream's `--stats-json` (written at exit), or the
/// last complete line of srt-live-transmit's cumulative JSON statistics.
fn reported_drops(tool: Tool, stats: &Path) -> Option<u64> {
    let s = std::fs::read_to_string(stats).ok()?;
    match tool {
        Tool::Slipstream => {
            let v: serde_json::Value = serde_json::from_str(&s).ok()?;
            v["connection"]["pkts_rcv_dropped"].as_u64()
        }
        Tool::SrtLiveTransmit => s
            .lines()
            .rev()
            .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .and_then(|v| v["recv"]["packetsDropped"].as_u64()),
    }
}

/// Checks the periodic statistics (`-s 250 --stats-format json`) a slipstream end wrote
/// during a relay at `mbit`: one JSON object a line, with "rtt_ms", "pkts_lost" and `rate`
/// ("send_mbit_s" or "recv_mbit_s"), whose peak is the paced rate (headers allowed for); and
/// where a report says when it was made ("time_s"), none is more than 1 s after the last.
fn check_periodic_stats(path: &Path, rate: &str, mbit: f64, label: &str) {
    let s = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{label}: periodic statistics {}: {e}", path.display()));
    let lines: Vec<serde_json::Value> = s
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{label}: not a JSON line ({e}): {l}"))
        })
        .collect();
    assert!(
        lines.len() >= 6,
        "{label}: {} periodic reports in a run of more than 2 s at one per 250 ms",
        lines.len()
    );
    for v in &lines {
        for key in ["rtt_ms", "pkts_lost", rate] {
            assert!(v[key].is_number(), "{label}: no number \"{key}\" in {v}");
        }
    }
    let peak = lines
        .iter()
        .filter_map(|v| v[rate].as_f64())
        .fold(0.0, f64::max);
    assert!(
        peak > 0.8 * mbit && peak < 1.3 * mbit,
        "{label}: the peak {rate} reported is {peak:.1} at a paced {mbit} Mbit/s"
    );
    let times: Vec<f64> = lines.iter().filter_map(|v| v["time_s"].as_f64()).collect();
    if let Some(w) = times.windows(2).find(|w| w[1] - w[0] > 1.0) {
        panic!(
            "{label}: no periodic report between {:.2} s and {:.2} s",
            w[0], w[1]
        );
    }
}

/// One relay: paced numbered UDP → `sender` (udp → srt caller) → `receiver` (srt listener
/// → udp) → sink, at `mbit` for `secs`. Over loopback (`emu` None) nothing may be missing;
/// over an emulated path, exactly what the receiver reports dropped.
fn relay(emu: Option<&Emu>, sender: Tool, receiver: Tool, mbit: f64, secs: f64) {
    let label = format!("{sender:?} -> {receiver:?} at {mbit} Mbit/s");
    let dir = Scratch::new(&format!("relay-{sender:?}-{receiver:?}-{mbit}"));
    let (ns_a, ns_b, addr) = match emu {
        Some(e) => (Some(e.a.0.as_str()), Some(e.b.0.as_str()), e.b.1.clone()),
        None => (None, None, "127.0.0.1".to_string()),
    };
    let (p, input) = (port(), port());
    let sink = Sink::start(udp_socket(ns_b, "127.0.0.1:0"));
    let out = format!("udp://127.0.0.1:{}", sink.port);
    let stats = dir.path("receiver-stats.json");
    let stats_s = stats.display().to_string();
    let (periodic_rx, periodic_tx) = (dir.path("rx-periodic.jsonl"), dir.path("tx-periodic.jsonl"));
    let periodic_rx_s = periodic_rx.display().to_string();
    let periodic_tx_s = periodic_tx.display().to_string();
    let mut rx = match receiver {
        Tool::Slipstream => Peer::spawn(
            "slipstream live (receiver)",
            command(
                ns_b,
                BIN,
                &strings(&[
                    "live",
                    &format!("srt://:{p}"),
                    &out,
                    "--stats-json",
                    &stats_s,
                    "-s",
                    "250",
                    "--stats-format",
                    "json",
                    "--stats-file",
                    &periodic_rx_s,
                ]),
            ),
        ),
        Tool::SrtLiveTransmit => Peer::spawn(
            "srt-live-transmit (receiver)",
            command(
                ns_b,
                "srt-live-transmit",
                &strings(&[
                    "-s",
                    "100",
                    "-pf",
                    "json",
                    "-f",
                    "-statsout",
                    &stats_s,
                    &format!("srt://:{p}"),
                    &out,
                ]),
            ),
        ),
    };
    rx.wait_bound(p, Duration::from_secs(5));
    let target = format!("srt://{addr}:{p}");
    let src_uri = format!("udp://:{input}");
    let mut tx = match sender {
        Tool::Slipstream => Peer::spawn(
            "slipstream live (sender)",
            command(
                ns_a,
                BIN,
                &strings(&[
                    "live",
                    &src_uri,
                    &target,
                    "-s",
                    "250",
                    "--stats-format",
                    "json",
                    "--stats-file",
                    &periodic_tx_s,
                ]),
            ),
        ),
        Tool::SrtLiveTransmit => Peer::spawn(
            "srt-live-transmit (sender)",
            command(ns_a, "srt-live-transmit", &strings(&[&src_uri, &target])),
        ),
    };
    let src = udp_socket(ns_a, "127.0.0.1:0");
    let to: SocketAddr = format!("127.0.0.1:{input}").parse().unwrap();
    prime(
        &src,
        to,
        &sink,
        &mut [&mut rx, &mut tx],
        Duration::from_secs(8),
    );

    let n = (mbit * 1e6 * secs / (MSG as f64 * 8.0)) as u64;
    let t0 = Instant::now();
    let sent = Pacer::start(src, to, mbit, 0, Some(n)).finish(false);
    let took = t0.elapsed().as_secs_f64();
    sink.settle(n - 1, Duration::from_secs(2), Duration::from_secs(6));
    let got = sink.finish();
    let numbered = got.iter().filter(|m| m.len() < 8 || seq_of(m) != PROBE);
    eprintln!(
        "{label}: sent {sent} messages in {took:.2} s ({:.1} Mbit/s), {} arrived",
        sent as f64 * MSG as f64 * 8.0 / took / 1e6,
        numbered.count()
    );
    assert_eq!(sent, n);

    // Stop the receiver first (slipstream then writes its statistics), then the sender.
    match receiver {
        Tool::Slipstream => stop(&mut rx, Signal::INT, Duration::from_secs(5)),
        Tool::SrtLiveTransmit => {
            rx.signal(Signal::INT);
            let _ = rx.wait(Duration::from_secs(3));
        }
    }
    let drops = reported_drops(receiver, &stats);
    if let Some(e) = emu {
        eprintln!(
            "{label}: the emulator has lost {} packets a -> b so far; the receiver reported {drops:?} dropped",
            e.lost_a_to_b()
        );
    }
    let allowed = if emu.is_some() { drops.unwrap_or(0) } else { 0 };
    if let Err(e) = check_stream(&got, 0, sent, allowed) {
        panic!("{label}: {e} (the receiver reported {drops:?} dropped)");
    }
    if receiver == Tool::Slipstream {
        assert!(
            drops.is_some(),
            "{label}: slipstream wrote no connection statistics to --stats-json"
        );
        assert_summary(&rx, allowed > 0);
        check_periodic_stats(&periodic_rx, "recv_mbit_s", mbit, &label);
    }
    if sender == Tool::Slipstream {
        check_periodic_stats(&periodic_tx, "send_mbit_s", mbit, &label);
        // Its peer has gone; without --reconnect it may have ended by itself.
        if tx.poll().is_none() {
            stop(&mut tx, Signal::INT, Duration::from_secs(5));
        }
        if allowed == 0 {
            if let Some(s) = summary(&tx.stderr()) {
                let claims = drop_claims(&s);
                assert!(
                    claims.is_empty(),
                    "{label}: sender claims drops: {claims:?}"
                );
            }
        }
    }
}

/// slipstream (udp → srt caller) to srt-live-transmit (srt listener → udp) over loopback,
/// at 20 and 50 Mbit/s: every message, once, in order, byte-exact.
#[test]
fn loopback_slipstream_to_srt_live_transmit_20_and_50_mbit() {
    let _serial = serial();
    if !have("srt-live-transmit") {
        return;
    }
    for mbit in [20.0, 50.0] {
        relay(None, Tool::Slipstream, Tool::SrtLiveTransmit, mbit, 2.0);
    }
}

/// srt-live-transmit (udp → srt caller) to slipstream (srt listener → udp) over loopback,
/// at 20 and 50 Mbit/s: every message, once, in order, byte-exact; slipstream stops on
/// SIGINT with status 0 and a summary that claims no drops.
#[test]
fn loopback_srt_live_transmit_to_slipstream_20_and_50_mbit() {
    let _serial = serial();
    if !have("srt-live-transmit") {
        return;
    }
    for mbit in [20.0, 50.0] {
        relay(None, Tool::SrtLiveTransmit, Tool::Slipstream, mbit, 2.0);
    }
}

/// Over an emulated path of 10 ms round trip (5 ms each way) with 1 % random loss each way:
/// slipstream ↔ srt-live-transmit at 20 Mbit/s both ways and slipstream ↔ slipstream at
/// 50 Mbit/s. Every message arrives once, in order, byte-exact, except exactly those the
/// receiver reports dropped.
#[test]
fn lossy_path_10ms_1pct_both_ways() {
    if !root_test("lossy_path_10ms_1pct_both_ways") {
        return;
    }
    let _serial = serial();
    if !have("srt-live-transmit") {
        return;
    }
    let emu = Emu::up(
        &format!("lv{}", std::process::id()),
        &["--delay", "5ms", "--loss", "1%"],
    );
    relay(
        Some(&emu),
        Tool::Slipstream,
        Tool::SrtLiveTransmit,
        20.0,
        2.0,
    );
    relay(
        Some(&emu),
        Tool::SrtLiveTransmit,
        Tool::Slipstream,
        20.0,
        2.0,
    );
    relay(Some(&emu), Tool::Slipstream, Tool::Slipstream, 50.0, 2.0);
    assert!(emu.lost_a_to_b() > 0, "the emulator lost nothing");
}

// ---------------------------------------------------------------------------------------
// ffmpeg

/// (codec of the first video stream, its packet count), as ffprobe reads `file`.
fn ffprobe(file: &Path) -> (String, u64) {
    let out = Command::new("ffprobe")
        .args([
            "-v",
            "error",
            "-select_streams",
            "v:0",
            "-count_packets",
            "-show_entries",
            "stream=codec_name,nb_read_packets",
            "-of",
            "json",
        ])
        .arg(file)
        .stdin(Stdio::null())
        .output()
        .expect("ffprobe");
    assert!(
        out.status.success(),
        "ffprobe {}: {}",
        file.display(),
        text(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("ffprobe's JSON");
    let s = &v["streams"][0];
    (
        s["codec_name"].as_str().unwrap_or("none").to_string(),
        s["nb_read_packets"]
            .as_str()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0),
    )
}

/// A valid MPEG-TS byte stream: whole 188-byte packets, each starting with the sync byte.
fn assert_ts(bytes: &[u8], what: &str) {
    assert!(!bytes.is_empty(), "{what} is empty");
    assert_eq!(
        bytes.len() % 188,
        0,
        "{what}: {} bytes is not a whole number of TS packets",
        bytes.len()
    );
    if let Some(i) = bytes.chunks(188).position(|p| p[0] != 0x47) {
        panic!("{what}: TS packet {i} does not start with 0x47");
    }
}

/// ffmpeg encodes 3 s of test video in real time and sends it as MPEG-TS to a slipstream
/// listener (`--once`, writing a file). ffmpeg's tee muxer writes the same TS to a reference
/// file; slipstream's file must be a byte-exact prefix of it, short by no more than the last
/// few messages (ffmpeg's libsrt closes with zero linger, so its last packets may never
/// leave), a valid TS that ffprobe reads, and slipstream exits 0 on ffmpeg's SHUTDOWN.
#[test]
fn ffmpeg_sends_mpegts_to_slipstream() {
    let _serial = serial();
    if !have("ffmpeg") || !have("ffprobe") {
        return;
    }
    let dir = Scratch::new("ffmpeg-tx");
    let (out, reference) = (dir.path("received.ts"), dir.path("reference.ts"));
    let p = port();
    let mut rx = Peer::spawn(
        "slipstream live --once",
        command(
            None,
            BIN,
            &strings(&["live", "--once", &format!("srt://:{p}"), &file_uri(&out)]),
        ),
    );
    rx.wait_bound(p, Duration::from_secs(5));
    // ffmpeg's SRT latency is in microseconds.
    let tee = format!(
        "[f=mpegts]srt://127.0.0.1:{p}?mode=caller&pkt_size=1316&latency=120000|[f=mpegts]{}",
        reference.display()
    );
    let mut ff = Peer::spawn(
        "ffmpeg (sender)",
        command(
            None,
            "ffmpeg",
            &strings(&[
                "-nostdin",
                "-hide_banner",
                "-loglevel",
                "warning",
                "-re",
                "-f",
                "lavfi",
                "-i",
                "testsrc=size=640x360:rate=25",
                "-t",
                "3",
                "-c:v",
                "mpeg2video",
                "-b:v",
                "20M",
                "-map",
                "0",
                "-f",
                "tee",
                &tee,
            ]),
        ),
    );
    let st = ff.wait(Duration::from_secs(15)).unwrap();
    assert!(st.success(), "ffmpeg exited {st}");
    let st = rx.wait(Duration::from_secs(4)).unwrap();
    assert!(st.success(), "slipstream live --once exited {st}");
    let (got, want) = (
        std::fs::read(&out).unwrap(),
        std::fs::read(&reference).unwrap(),
    );
    assert_ts(&want, "ffmpeg's reference");
    assert_ts(&got, "slipstream's output");
    assert!(
        want.starts_with(&got),
        "slipstream's {} bytes are not a prefix of what ffmpeg muxed ({} bytes)",
        got.len(),
        want.len()
    );
    assert!(
        got.len() + 4 * MSG >= want.len(),
        "slipstream wrote {} of the {} bytes ffmpeg muxed",
        got.len(),
        want.len()
    );
    let ((codec, n), (_, n_ref)) = (ffprobe(&out), ffprobe(&reference));
    assert_eq!(codec, "mpeg2video");
    assert!(
        n + 2 >= n_ref && n_ref >= 70,
        "{n} video packets received, {n_ref} sent"
    );
    assert_summary(&rx, false);
}

/// slipstream sends a 3 s, 20 Mbit/s MPEG-TS file (as a listener, all at once: a finite
/// source) to ffmpeg calling in. ffmpeg reads the SRT stream with its raw `data`
/// demuxer and writes it with the `data` muxer, so its file holds the bytes exactly as they
/// arrived (with `-c copy -f mpegts` it would re-mux: new PAT/PMT, continuity counters and
/// PCR, so only packet counts could be compared). The bytes must equal the input; ffprobe
/// reads as many video packets as in the input; both exit 0.
#[test]
fn slipstream_sends_ts_file_to_ffmpeg() {
    let _serial = serial();
    if !have("ffmpeg") || !have("ffprobe") {
        return;
    }
    let dir = Scratch::new("ffmpeg-rx");
    let (input, out) = (dir.path("input.ts"), dir.path("received.ts"));
    let gen = Command::new("ffmpeg")
        .args([
            "-nostdin",
            "-hide_banner",
            "-loglevel",
            "error",
            "-f",
            "lavfi",
            "-i",
            "testsrc=size=640x360:rate=25",
            "-t",
            "3",
            "-c:v",
            "mpeg2video",
            "-b:v",
            "20M",
            "-minrate",
            "20M",
            "-maxrate",
            "20M",
            "-bufsize",
            "4M",
            "-f",
            "mpegts",
        ])
        .arg(&input)
        .stdin(Stdio::null())
        .output()
        .expect("ffmpeg");
    assert!(gen.status.success(), "ffmpeg: {}", text(&gen.stderr));
    let data = std::fs::read(&input).unwrap();
    assert_ts(&data, "the input");
    let p = port();
    let mut tx = Peer::spawn(
        "slipstream live (file sender, listener)",
        command(
            None,
            BIN,
            &strings(&["live", &file_uri(&input), &format!("srt://:{p}")]),
        ),
    );
    tx.wait_bound(p, Duration::from_secs(5));
    let mut ff = Peer::spawn(
        "ffmpeg (receiver)",
        command(
            None,
            "ffmpeg",
            &strings(&[
                "-nostdin",
                "-hide_banner",
                "-loglevel",
                "warning",
                "-y",
                "-f",
                "data",
                "-i",
                &format!("srt://127.0.0.1:{p}?mode=caller&latency=120000"),
                "-map",
                "0",
                "-c",
                "copy",
                "-f",
                "data",
                out.to_str().unwrap(),
            ]),
        ),
    );
    let st = tx.wait(Duration::from_secs(15)).unwrap();
    assert!(st.success(), "slipstream exited {st}");
    let st = ff.wait(Duration::from_secs(5)).unwrap();
    assert!(st.success(), "ffmpeg exited {st}");
    let got = std::fs::read(&out).unwrap_or_default();
    assert!(
        got == data,
        "ffmpeg received {} of {} bytes{}",
        got.len(),
        data.len(),
        if data.starts_with(&got) {
            " (a prefix)"
        } else {
            ", and they differ"
        }
    );
    assert_eq!(ffprobe(&out), ffprobe(&input));
    assert_summary(&tx, false);
}

// ---------------------------------------------------------------------------------------
// A bursty finite source

/// 20 MB (not a whole number of 1316-byte chunks) of patterned bytes.
fn big_input(path: &Path) -> Vec<u8> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let data: Vec<u8> = (0..20_000_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(path, &data).expect("write input");
    data
}

fn file_source_to(receiver: Tool) {
    let dir = Scratch::new(&format!("file-{receiver:?}"));
    let (input, out) = (dir.path("in.bin"), dir.path("out.bin"));
    let data = big_input(&input);
    let p = port();
    let mut rx = match receiver {
        Tool::Slipstream => Peer::spawn(
            "slipstream live --once (receiver)",
            command(
                None,
                BIN,
                &strings(&["live", "--once", &format!("srt://:{p}"), &file_uri(&out)]),
            ),
        ),
        // srt-live-transmit writes files only as file://con (stdout); without -a no its
        // listener would wait for the next caller instead of exiting.
        Tool::SrtLiveTransmit => Peer::spawn(
            "srt-live-transmit (receiver)",
            command(
                None,
                "srt-live-transmit",
                &strings(&["-a", "no", &format!("srt://:{p}"), "file://con"]),
            ),
        ),
    };
    rx.wait_bound(p, Duration::from_secs(5));
    let t0 = Instant::now();
    let mut tx = Peer::spawn(
        "slipstream live (file sender)",
        command(
            None,
            BIN,
            &strings(&["live", &file_uri(&input), &format!("srt://127.0.0.1:{p}")]),
        ),
    );
    let st = tx.wait(Duration::from_secs(15)).unwrap();
    assert!(st.success(), "the sender exited {st}");
    let st = rx.wait(Duration::from_secs(5)).unwrap();
    assert!(st.success(), "the receiver exited {st}");
    eprintln!(
        "20 MB file -> {receiver:?}: {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    let got = match receiver {
        Tool::Slipstream => std::fs::read(&out).unwrap_or_default(),
        Tool::SrtLiveTransmit => rx.stdout(),
    };
    let same = got.iter().zip(&data).take_while(|(a, b)| a == b).count();
    assert!(
        got == data,
        "received {} of {} bytes; the first {same} are right",
        got.len(),
        data.len()
    );
    assert_summary(&tx, false);
    if receiver == Tool::Slipstream {
        assert_summary(&rx, false);
    }
}

/// `slipstream live file://IN srt://…` to a slipstream receiver writing a file: the 20 MB
/// arrive byte for byte and both ends exit 0.
#[test]
fn file_source_arrives_whole_at_slipstream() {
    let _serial = serial();
    file_source_to(Tool::Slipstream);
}

/// `slipstream live file://IN srt://…` to srt-live-transmit writing to stdout: the 20 MB
/// arrive byte for byte (the sender waits for acknowledgement plus libsrt's latency before
/// its SHUTDOWN, which libsrt obeys at once, discarding what it has not delivered) and both
/// ends exit 0.
#[test]
fn file_source_arrives_whole_at_srt_live_transmit() {
    let _serial = serial();
    if !have("srt-live-transmit") {
        return;
    }
    file_source_to(Tool::SrtLiveTransmit);
}

// ---------------------------------------------------------------------------------------
// Callers that die or stop, listeners that stop

/// Starts a slipstream caller relaying `udp://:IN` to `srt://127.0.0.1:p` and waits until
/// it is ready: its UDP input bound and its stderr saying it connected (a message this test
/// does not insist on: after 3 s it goes on).
fn slipstream_caller(name: &str, p: u16, extra: &[&str]) -> (Peer, SocketAddr) {
    let input = port();
    let mut args = strings(&[
        "live",
        &format!("udp://:{input}"),
        &format!("srt://127.0.0.1:{p}"),
    ]);
    args.extend(strings(extra));
    let mut c = Peer::spawn(name, command(None, BIN, &args));
    c.wait_bound(input, Duration::from_secs(5));
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        let err = c.stderr().to_lowercase();
        if err.replace("disconnected", "").contains("connected") {
            break;
        }
        assert!(c.poll().is_none(), "{name} exited before connecting");
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    (c, format!("127.0.0.1:{input}").parse().unwrap())
}

/// A slipstream listener (no `--once`) writing a file; its caller streams at 10 Mbit/s and
/// is SIGKILLed. The listener says "disconnected" within ~6 s (SRT's 5 s peer idle
/// timeout), its file then holds a whole prefix of the stream (no torn message) with at
/// least every message sent up to half a second before the kill, it uses < 2 % CPU while
/// waiting, serves a second caller whose stream is appended in full, and exits 0 on SIGINT.
#[test]
fn killed_caller_listener_waits_and_serves_the_next() {
    let _serial = serial();
    let dir = Scratch::new("killed");
    let out = dir.path("out.bin");
    let p = port();
    let mut rx = Peer::spawn(
        "slipstream live (listener)",
        command(
            None,
            BIN,
            &strings(&["live", &format!("srt://:{p}"), &file_uri(&out)]),
        ),
    );
    rx.wait_bound(p, Duration::from_secs(5));

    let (mut c1, to) = slipstream_caller("slipstream live (first caller, killed)", p, &[]);
    let pacer = Pacer::start(udp_socket(None, "127.0.0.1:0"), to, 10.0, 0, None);
    std::thread::sleep(Duration::from_millis(1500));
    let delivered = pacer.sent();
    std::thread::sleep(Duration::from_millis(500));
    c1.signal(Signal::KILL);
    let killed = Instant::now();
    let sent = pacer.finish(true);
    assert!(
        rx.wait_stderr("disconnected", 1, Duration::from_secs(8)),
        "the listener did not report the dead caller in 8 s"
    );
    let noticed = killed.elapsed();
    eprintln!("dead caller noticed after {noticed:.2?}");
    assert!(
        noticed < Duration::from_millis(6500),
        "the dead caller was noticed only after {noticed:?}"
    );
    assert!(rx.poll().is_none(), "the listener exited without --once");

    // Waiting for the next caller costs no measurable CPU.
    let t0 = rx.cpu_ticks();
    std::thread::sleep(Duration::from_secs(2));
    let cpu = (rx.cpu_ticks() - t0) as f64 / clock_ticks_per_second() as f64 / 2.0;
    assert!(
        cpu < 0.02,
        "the idle listener used {:.1} % CPU",
        cpu * 100.0
    );

    // The output was flushed at the disconnection: a whole prefix of the stream.
    let first = std::fs::read(&out).unwrap_or_default();
    let n1 = check_prefix(&first, 0).unwrap_or_else(|e| panic!("after the kill: {e}"));
    eprintln!("first caller: {sent} sent, {n1} written, {delivered} sent 0.5 s before the kill");
    assert!(
        n1 >= delivered,
        "{n1} messages written, but {delivered} were sent 0.5 s before the kill"
    );

    // A second caller is served, appended to the same output.
    let (mut c2, to) = slipstream_caller("slipstream live (second caller)", p, &[]);
    let n2 = Pacer::start(
        udp_socket(None, "127.0.0.1:0"),
        to,
        10.0,
        SECOND,
        Some(1000),
    )
    .finish(false);
    std::thread::sleep(Duration::from_millis(800));
    stop(&mut c2, Signal::INT, Duration::from_secs(5));
    assert!(
        rx.wait_stderr("disconnected", 2, Duration::from_secs(4)),
        "the listener did not report the second caller's clean close"
    );
    assert!(rx.poll().is_none(), "the listener exited without --once");
    stop(&mut rx, Signal::INT, Duration::from_secs(5));
    assert!(
        summary(&rx.stderr()).is_some(),
        "the listener printed no summary"
    );

    let all = std::fs::read(&out).unwrap_or_default();
    assert!(
        all.len() >= first.len() && all[..first.len()] == first[..],
        "the first caller's output changed when the second came ({} -> {} bytes)",
        first.len(),
        all.len()
    );
    let m2 = check_prefix(&all[first.len()..], SECOND)
        .unwrap_or_else(|e| panic!("second caller's part: {e}"));
    assert_eq!(m2, n2, "the second caller's stream is incomplete");
}

/// With `--once`, a listener whose only caller is SIGKILLed exits non-zero after the idle
/// timeout (the peer died: no SHUTDOWN), having written a whole prefix of the stream.
#[test]
fn killed_caller_with_once_exits_nonzero() {
    let _serial = serial();
    let dir = Scratch::new("killed-once");
    let out = dir.path("out.bin");
    let p = port();
    let mut rx = Peer::spawn(
        "slipstream live --once (listener)",
        command(
            None,
            BIN,
            &strings(&["live", "--once", &format!("srt://:{p}"), &file_uri(&out)]),
        ),
    );
    rx.wait_bound(p, Duration::from_secs(5));
    let (mut c, to) = slipstream_caller("slipstream live (caller, killed)", p, &[]);
    let pacer = Pacer::start(udp_socket(None, "127.0.0.1:0"), to, 10.0, 0, None);
    std::thread::sleep(Duration::from_millis(1000));
    let delivered = pacer.sent();
    std::thread::sleep(Duration::from_millis(500));
    c.signal(Signal::KILL);
    pacer.finish(true);
    let st = rx.wait(Duration::from_secs(9)).unwrap();
    assert!(
        !st.success(),
        "the listener exited 0 though its peer died without SHUTDOWN"
    );
    assert!(
        st.code().is_some(),
        "the listener died of a signal ({st}) instead of exiting"
    );
    let n = check_prefix(&std::fs::read(&out).unwrap_or_default(), 0).unwrap();
    assert!(
        n >= delivered,
        "{n} messages written, {delivered} sent 0.5 s before the kill"
    );
}

/// A sender whose input has gone silent still notices that its receiver died: the
/// receiver is SIGKILLed after the stream pauses, and the sender (which has nothing to
/// write, so no failed send tells it) exits non-zero within SRT's idle timeout instead of
/// waiting for input forever.
#[test]
fn a_sender_with_a_silent_input_notices_its_receiver_die() {
    let _serial = serial();
    let p = port();
    let mut rx = Peer::spawn(
        "slipstream live --once (receiver, killed)",
        command(
            None,
            BIN,
            &strings(&["live", "--once", &format!("srt://:{p}"), "-"]),
        ),
    );
    rx.wait_bound(p, Duration::from_secs(5));
    let (mut tx, to) = slipstream_caller("slipstream live (sender, input goes silent)", p, &[]);
    Pacer::start(udp_socket(None, "127.0.0.1:0"), to, 10.0, 0, Some(500)).finish(false);
    std::thread::sleep(Duration::from_millis(500));
    rx.signal(Signal::KILL);
    let killed = Instant::now();
    let st = tx
        .wait(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("the sender kept waiting for input: {e}"));
    eprintln!("dead receiver noticed after {:.2?}", killed.elapsed());
    assert!(
        !st.success(),
        "the sender exited 0 though its receiver was killed"
    );
    assert!(
        st.code().is_some(),
        "the sender died of a signal ({st}) instead of exiting"
    );
}

/// SIGINT on a streaming sender: it exits 0 with a summary after sending SHUTDOWN, and the
/// receiver (`--once`, to stdout) sees it and exits 0 at once, not after a 5 s idle timeout;
/// stdout holds a whole prefix of the stream with everything sent up to 0.3 s before the
/// signal.
#[test]
fn sigint_on_the_sender_ends_both_ends_cleanly() {
    let _serial = serial();
    let p = port();
    let mut rx = Peer::spawn(
        "slipstream live --once (receiver, stdout)",
        command(
            None,
            BIN,
            &strings(&["live", "--once", &format!("srt://:{p}"), "-"]),
        ),
    );
    rx.wait_bound(p, Duration::from_secs(5));
    let (mut tx, to) = slipstream_caller("slipstream live (sender)", p, &[]);
    let pacer = Pacer::start(udp_socket(None, "127.0.0.1:0"), to, 10.0, 0, None);
    std::thread::sleep(Duration::from_millis(1500));
    let delivered = pacer.sent();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    stop(&mut tx, Signal::INT, Duration::from_secs(4));
    pacer.finish(true);
    let st = rx.wait(Duration::from_secs(8)).unwrap();
    let took = t0.elapsed();
    assert!(st.success(), "the receiver exited {st}");
    assert!(
        took < Duration::from_secs(3),
        "the receiver took {took:?} to end after the sender's SIGINT (an idle timeout, \
         not the SHUTDOWN?)"
    );
    let n = check_prefix(&rx.stdout(), 0).unwrap_or_else(|e| panic!("stdout: {e}"));
    assert!(
        n >= delivered,
        "{n} messages on stdout, {delivered} sent 0.3 s before SIGINT"
    );
    assert_summary(&tx, false);
    assert_summary(&rx, false);
}

/// SIGINT, then SIGTERM, on a receiver (listener without `--once`, writing a file) while
/// its caller streams: it exits 0 at once, its file holds a whole prefix of the stream with
/// everything sent up to 0.5 s before the signal, and it prints its summary.
#[test]
fn sigint_or_sigterm_on_the_receiver_flushes_and_exits_zero() {
    let _serial = serial();
    for (sig, name) in [(Signal::INT, "SIGINT"), (Signal::TERM, "SIGTERM")] {
        let dir = Scratch::new(&format!("rx-{name}"));
        let out = dir.path("out.bin");
        let p = port();
        let mut rx = Peer::spawn(
            &format!("slipstream live (receiver, {name})"),
            command(
                None,
                BIN,
                &strings(&["live", &format!("srt://:{p}"), &file_uri(&out)]),
            ),
        );
        rx.wait_bound(p, Duration::from_secs(5));
        let (_tx, to) = slipstream_caller("slipstream live (sender)", p, &[]);
        let pacer = Pacer::start(udp_socket(None, "127.0.0.1:0"), to, 10.0, 0, None);
        std::thread::sleep(Duration::from_millis(1500));
        let delivered = pacer.sent();
        std::thread::sleep(Duration::from_millis(500));
        let t0 = Instant::now();
        stop(&mut rx, sig, Duration::from_secs(3));
        eprintln!("receiver stopped by {name} in {:.2?}", t0.elapsed());
        pacer.finish(true);
        let n = check_prefix(&std::fs::read(&out).unwrap_or_default(), 0)
            .unwrap_or_else(|e| panic!("after {name}: {e}"));
        assert!(
            n >= delivered,
            "{n} messages written, {delivered} sent 0.5 s before {name}"
        );
        // What it had received and not yet played out (up to its latency's worth) is not
        // written: its summary may count that as dropped at the stop.
        assert!(
            summary(&rx.stderr()).is_some(),
            "no summary line starting \"relayed\" after {name}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// --fail-on-loss

/// A sender that loses 30 % of what it sends (`--netem loss=30%`) with 20 ms of latency:
/// retransmissions cannot all arrive in time, so the receiver drops messages. Its run ends
/// by `--duration` (not on the sender's SHUTDOWN, which the same loss may eat). With
/// `--fail-on-loss` the receiver exits non-zero; without, 0; either way its summary names
/// the drops with nonzero counts.
#[test]
fn fail_on_loss_exits_nonzero_and_the_summary_names_drops() {
    let _serial = serial();
    for fail in [true, false] {
        let dir = Scratch::new(&format!("fail-on-loss-{fail}"));
        let stats = dir.path("stats.json");
        let sink = Sink::start(udp_socket(None, "127.0.0.1:0"));
        let p = port();
        let mut args = strings(&[
            "live",
            &format!("srt://:{p}?latency=20"),
            &format!("udp://127.0.0.1:{}", sink.port),
            "--duration",
            "6",
            "--stats-json",
            stats.to_str().unwrap(),
        ]);
        if fail {
            args.push("--fail-on-loss".into());
        }
        let mut rx = Peer::spawn(
            &format!("slipstream live (receiver, fail-on-loss {fail})"),
            command(None, BIN, &args),
        );
        rx.wait_bound(p, Duration::from_secs(5));
        let input = port();
        let mut tx = Peer::spawn(
            "slipstream live (sender, 30 % loss)",
            command(
                None,
                BIN,
                &strings(&[
                    "live",
                    &format!("udp://:{input}"),
                    &format!("srt://127.0.0.1:{p}?latency=20"),
                    "--netem",
                    "loss=30%",
                ]),
            ),
        );
        tx.wait_bound(input, Duration::from_secs(5));
        let src = udp_socket(None, "127.0.0.1:0");
        let to: SocketAddr = format!("127.0.0.1:{input}").parse().unwrap();
        prime(
            &src,
            to,
            &sink,
            &mut [&mut rx, &mut tx],
            Duration::from_secs(5),
        );
        let sent = Pacer::start(src, to, 10.0, 0, Some(2000)).finish(false);
        let st = rx.wait(Duration::from_secs(10)).unwrap();
        let got = sink
            .finish()
            .iter()
            .filter(|m| m.len() < 8 || seq_of(m) != PROBE)
            .count();
        eprintln!("fail-on-loss {fail}: {sent} sent, {got} arrived, receiver exited {st}");
        assert!(
            got < sent as usize,
            "nothing was lost: the test needs drops"
        );
        if fail {
            assert!(
                !st.success(),
                "--fail-on-loss: the receiver exited 0 after dropping {} messages",
                sent as usize - got
            );
            assert!(st.code().is_some(), "the receiver died of a signal ({st})");
        } else {
            assert!(
                st.success(),
                "without --fail-on-loss the receiver exited {st}"
            );
        }
        assert_summary(&rx, true);
    }
}

/// `--reconnect`: a caller started before its listener exists keeps calling (with back-off)
/// and gets through once the listener is up; when that listener is SIGKILLed and another
/// takes its port, the caller notices the dead peer and calls the new one. Each listener
/// receives its stream whole; SIGINT then stops the caller with status 0.
#[test]
fn reconnecting_caller_finds_its_listener_and_a_replacement() {
    let _serial = serial();
    let (p, input) = (port(), port());
    let mut tx = Peer::spawn(
        "slipstream live --reconnect (caller)",
        command(
            None,
            BIN,
            &strings(&[
                "live",
                &format!("udp://:{input}"),
                &format!("srt://127.0.0.1:{p}"),
                "--reconnect",
            ]),
        ),
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        tx.poll().is_none(),
        "the caller gave up on a listener that is not there yet"
    );
    let to: SocketAddr = format!("127.0.0.1:{input}").parse().unwrap();
    let mut listeners = Vec::new();
    for (round, base) in [(1, 0), (2, SECOND)] {
        let sink = Sink::start(udp_socket(None, "127.0.0.1:0"));
        let mut rx = Peer::spawn(
            &format!("slipstream live (listener {round})"),
            command(
                None,
                BIN,
                &strings(&[
                    "live",
                    &format!("srt://:{p}"),
                    &format!("udp://127.0.0.1:{}", sink.port),
                ]),
            ),
        );
        rx.wait_bound(p, Duration::from_secs(5));
        let src = udp_socket(None, "127.0.0.1:0");
        // Round 1: the back-off reaches 2 s by now; round 2: the dead peer is noticed after
        // SRT's 5 s idle timeout, then the caller calls again.
        let t0 = Instant::now();
        prime(
            &src,
            to,
            &sink,
            &mut [&mut rx, &mut tx],
            Duration::from_secs(12),
        );
        eprintln!("round {round}: through after {:.2?}", t0.elapsed());
        let sent = Pacer::start(src, to, 5.0, base, Some(500)).finish(false);
        sink.settle(
            base + sent - 1,
            Duration::from_secs(2),
            Duration::from_secs(5),
        );
        if let Err(e) = check_stream(&sink.finish(), base, sent, 0) {
            panic!("listener {round}: {e}");
        }
        if round == 1 {
            rx.signal(Signal::KILL);
            let _ = rx.wait(Duration::from_secs(2));
        }
        listeners.push(rx);
    }
    stop(&mut tx, Signal::INT, Duration::from_secs(5));
}
