//! The `slipstream` command line: `send`, `recv`, `live` and `demo`.
//!
//! This module owns argument parsing, progress display, the final summary line and the
//! `--stats-json` report. Progress and messages go to stderr; stdout carries data only for
//! live-mode output to `-` / `file://con`. Exit status 0 means complete (and, when both ends
//! are slipstream, verified); anything else is a failure.

mod caps;
mod demo;
pub(crate) mod live;
mod netem;
pub mod rt;
mod serve;
mod tree;
pub mod uri;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use slipstream::api::{Connection, Endpoint, EndpointOptions};
use slipstream::datapath::Impairment;
use slipstream::transfer::{self, Received, Verdict};
use slipstream::verdict;
use slipstream_proto::cc::CcRegistry;
use slipstream_proto::conn::{ConnConfig, ConnStats, MaxBw, Mode};
use std::io::{self, IsTerminal};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use uri::{Uri, UriMode};

/// Command-line interface.
#[derive(Debug, Parser)]
#[command(
    name = "slipstream",
    version,
    about = "Fast file transfer and live streaming over UDP, speaking SRT"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

/// Options every subcommand takes.
#[derive(Debug, Clone, Args)]
struct Common {
    /// No progress bar (it is also hidden when stderr is not a terminal).
    #[arg(long, short)]
    quiet: bool,
    /// Write final connection, endpoint and throughput statistics as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    stats_json: Option<PathBuf>,
    /// Congestion control by name: "bbr" (default for files), "file"/"udt" (UDT native, as
    /// libsrt), "live" (default in live mode), or any the application registered.
    #[arg(long, value_name = "NAME")]
    cc: Option<String>,
    /// Maximum segment size in bytes (IP packet size). Default: the path MTU for files (64 KiB
    /// over loopback, 1500 over Ethernet), 1500 in live mode.
    #[arg(long, value_name = "BYTES")]
    mss: Option<u32>,
    /// Impair outgoing datagrams, e.g. "loss=2%,delay=20ms" (also jitter, reorder, dup,
    /// rate=100mbit, queue=4m, seed).
    #[arg(long, value_name = "SPEC")]
    netem: Option<String>,
    /// Datagram backend: "auto" (default: the fastest this kernel supports, see
    /// `slipstream caps`), or force one of gso, mmsg, uring, uring-zc, msg-zc, std.
    #[arg(long, value_name = "NAME", default_value = "auto")]
    datapath: String,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send a file: `slipstream send FILE srt://HOST:PORT` (or srt://:PORT to wait for the
    /// receiver to call). Exits 0 only when a slipstream receiver verified the file and
    /// committed it under its final name (a plain SRT receiver: when it acknowledged
    /// everything). An interrupted transfer resumes when run again: only what the receiver
    /// does not hold yet, checked chunk by chunk, is sent. The file is sent as long as it was
    /// when the send began; if it changes size meanwhile, the send fails.
    Send {
        /// The file to send.
        file: PathBuf,
        /// Where to: srt://HOST:PORT[?streamid=NAME&...]; the stream id defaults to the
        /// file name.
        uri: String,
        /// Send at most this fast, e.g. 300mbit or 1.5gbit (bits per second on the wire,
        /// headers and retransmissions included). The receiver may set a lower cap.
        #[arg(long, value_name = "RATE", value_parser = parse_rate)]
        max_rate: Option<u64>,
        #[command(flatten)]
        common: Common,
    },
    /// Receive one file: `slipstream recv srt://:PORT OUT` (OUT may be a directory: the file
    /// is named after the sender's stream id). Exits 0 only when the file is complete. It is
    /// written to OUT.part and renamed once verified; an interrupted transfer leaves OUT.part
    /// for the same command to resume from.
    Recv {
        /// srt://:PORT to listen (or srt://HOST:PORT to call a sending listener).
        uri: String,
        /// Output file or directory.
        out: PathBuf,
        /// Replace an existing output file.
        #[arg(long)]
        force: bool,
        /// Give up if no sender connects within this many seconds.
        #[arg(long, value_name = "SECS")]
        accept_timeout: Option<f64>,
        /// Let a slipstream sender send at most this fast, e.g. 300mbit (bits per second on
        /// the wire); the lower of both ends' caps holds.
        #[arg(long, value_name = "RATE", value_parser = parse_rate)]
        max_rate: Option<u64>,
        /// Keep accepting transfers, several at once, each into the directory OUT under its
        /// stream id, until SIGINT/SIGTERM (which cut short what runs, keeping what it
        /// received for the same send to resume, and exit 0). A line per transfer.
        #[arg(long)]
        serve: bool,
        /// With --serve: a JSON object per finished transfer on stdout instead of lines.
        #[arg(long, requires = "serve")]
        json: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Relay live messages between udp://, srt:// and file:// (or - for stdin/stdout), like
    /// srt-live-transmit. An SRT listener serves caller after caller (until SIGINT/SIGTERM,
    /// or --once); the summary accounts for every message, and exit status 0 means an
    /// orderly end (with --fail-on-loss: and nothing dropped or lost).
    Live {
        /// Source: udp://:PORT, srt://..., file://PATH, file://con or -.
        src: String,
        /// Destination: udp://HOST:PORT, srt://..., file://PATH, file://con or -.
        dst: String,
        /// Stop after this many seconds.
        #[arg(long, value_name = "SECS")]
        duration: Option<f64>,
        /// Stop after relaying this many messages.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Print statistics every MS milliseconds (to stderr, or --stats-file).
        #[arg(short = 's', long = "stats", value_name = "MS")]
        stats: Option<u64>,
        /// Format of the periodic statistics.
        #[arg(long, value_enum, default_value = "text", value_name = "FORMAT")]
        stats_format: live::StatsFormat,
        /// Write the periodic statistics to FILE instead of stderr.
        #[arg(long, value_name = "FILE")]
        stats_file: Option<PathBuf>,
        /// Exit non-zero if any message was dropped or lost (by the kernel on input, by
        /// either SRT end as too late, or unacknowledged at the end).
        #[arg(long)]
        fail_on_loss: bool,
        /// An SRT listener serves one peer, then exits: 0 if the peer closed the
        /// connection, non-zero if it died.
        #[arg(long)]
        once: bool,
        /// An SRT caller whose peer cannot be reached or goes away calls again, with
        /// back-off (0.25 s, doubling to 8 s), as srt-live-transmit's -a.
        #[arg(long)]
        reconnect: bool,
        #[command(flatten)]
        common: Common,
    },
    /// Show what this kernel supports (GSO/GRO, MSG_ZEROCOPY, io_uring features) and which
    /// datapath endpoints will use.
    Caps {
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Transfer generated data between two in-process endpoints over a simulated lossy link,
    /// and verify it end to end.
    Demo {
        /// Data to transfer, MiB.
        #[arg(long, default_value_t = 256)]
        size: u64,
        /// Loss ratio of each direction, percent.
        #[arg(long, default_value_t = 1.0)]
        loss: f64,
        /// One-way delay of each direction, milliseconds.
        #[arg(long, default_value_t = 10)]
        delay: u64,
        #[command(flatten)]
        common: Common,
    },
    /// Benchmarks: datagram backends (cells and tables), the link emulator's accuracy, and
    /// file transfers against kernel TCP, libsrt and UDT.
    #[command(subcommand)]
    Bench(crate::bench::BenchCmd),
    /// Link emulator between two network namespaces (rate, delay, jitter, loss, reordering,
    /// duplication) for any traffic: `netem up NAME --rate 1gbit --delay 25ms --loss 1%`.
    #[command(subcommand)]
    Netem(netem::NetemCmd),
    /// Real-time messages between two hosts: `rt pong ADDR` answers, `rt ping ADDR` times
    /// the round trips (p50 to max, from each message's intended send time).
    #[command(subcommand)]
    Rt(rt::RtCmd),
}

/// Runs the command line with the congestion controllers of `registry` available to `--cc`.
pub fn run_with(registry: CcRegistry) -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Command::Send {
            file,
            uri,
            max_rate,
            common,
        } => {
            // Send regular files mapped: a truncation meanwhile ends the process with a
            // message (without the handler, files are read).
            #[cfg(target_os = "linux")]
            if let Err(e) = slipstream::exit_on_sigbus_in_mappings() {
                eprintln!("slipstream: warning: no SIGBUS handler, reading the file: {e}");
            }
            cmd_send(&file, &uri, max_rate, &common, &registry)
        }
        Command::Recv {
            uri,
            out,
            force,
            accept_timeout,
            max_rate,
            serve,
            json,
            common,
        } => {
            let opts = RecvOpts {
                force,
                accept_timeout,
                max_rate,
                serve,
                json,
            };
            cmd_recv(&uri, &out, &opts, &common, &registry)
        }
        Command::Live {
            src,
            dst,
            duration,
            count,
            stats,
            stats_format,
            stats_file,
            fail_on_loss,
            once,
            reconnect,
            common,
        } => {
            let opts = live::LiveOpts {
                duration,
                count,
                stats_every: stats.map(|ms| Duration::from_millis(ms.max(1))),
                stats_format,
                stats_file,
                fail_on_loss,
                once,
                reconnect,
            };
            live::run(&src, &dst, &opts, &common, &registry)
        }
        Command::Caps { json } => caps::run(json),
        Command::Demo {
            size,
            loss,
            delay,
            common,
        } => demo::run(size, loss, delay, &common, &registry),
        Command::Bench(cmd) => crate::bench::run(cmd),
        Command::Netem(cmd) => netem::run(cmd),
        Command::Rt(cmd) => rt::run(cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("slipstream: error: {e}");
            // Stopped by a signal: the shell's convention, 128 + its number.
            match slipstream::signal::stop_signal() {
                Some("SIGINT") => ExitCode::from(130),
                Some("SIGTERM") => ExitCode::from(143),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

/// A rate in bits per second ("300mbit", "1.5gbit", "800000"), as bytes per second.
fn parse_rate(v: &str) -> Result<u64, String> {
    let bits = slipstream::datapath::parse_rate(v)?;
    if bits < 8_000 {
        return Err(format!("rate '{v}' is below 8kbit"));
    }
    Ok(bits / 8)
}

/// Runs `f` with SIGINT and SIGTERM aborting `conn`: the peer is sent a SHUTDOWN at once
/// (it stops without waiting for its idle timeout) and `f`'s waits end with an error. A
/// second signal ends the process at once. Without the handler, the signals end the process
/// as usual.
fn interruptible<T>(conn: &Connection, f: impl FnOnce() -> T) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    if let Err(e) = slipstream::signal::install_stop_handler() {
        eprintln!("slipstream: warning: no SIGINT/SIGTERM handler: {e}");
        return f();
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Acquire) {
                if slipstream::signal::stop_requested() {
                    conn.abort();
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        let r = f();
        done.store(true, Ordering::Release);
        r
    })
}

/// The error of a transfer stopped by a signal, if it was.
fn interrupted(what: &str) -> Option<String> {
    slipstream::signal::stop_signal().map(|sig| format!("{what} interrupted by {sig}"))
}

/// Runs the command line with the built-in congestion controllers.
pub fn run() -> ExitCode {
    run_with(CcRegistry::default())
}

type CliResult = Result<(), String>;

fn endpoint_options(common: &Common, registry: &CcRegistry) -> Result<EndpointOptions, String> {
    let mut o = EndpointOptions::default();
    o.set_registry(registry.clone())
        .set_datapath(&common.datapath);
    if let Some(spec) = &common.netem {
        o.set_impairment(Some(
            Impairment::parse(spec).map_err(|e| format!("--netem: {e}"))?,
        ));
    }
    Ok(o)
}

fn conn_config(
    mode: Mode,
    uri: &Uri,
    common: &Common,
    registry: &CcRegistry,
) -> Result<ConnConfig, String> {
    let mut cfg = ConnConfig::new(mode);
    if let Some(cc) = &common.cc {
        if registry.build(cc).is_none() {
            let names: Vec<&str> = registry.names().collect();
            return Err(format!(
                "unknown congestion control '{cc}' (available: {})",
                names.join(", ")
            ));
        }
        cfg.set_cc(cc);
    }
    if let Some(mss) = common.mss.or(uri.mss) {
        cfg.set_mss(mss);
    }
    let live = mode == Mode::Live;
    match uri.trans_type.as_deref() {
        Some("file") if live => {
            return Err("transtype=file: `slipstream live` is live mode; use send/recv".into())
        }
        Some("live") if !live => {
            return Err("transtype=live: send and recv are file mode; use `slipstream live`".into())
        }
        _ => {}
    }
    if !live {
        let live_only = [
            ("latency", uri.latency.is_some()),
            ("rcvlatency", uri.rcv_latency.is_some()),
            ("peerlatency", uri.peer_latency.is_some()),
            ("maxbw=0", uri.max_bw == Some(0)),
            ("inputbw", uri.input_bw.is_some()),
            ("oheadbw", uri.overhead_bw.is_some()),
            ("payloadsize", uri.payload_size.is_some()),
            ("tlpktdrop", uri.too_late_drop.is_some()),
            ("nakreport", uri.nak_report.is_some()),
            ("timeout", uri.timeout.is_some()),
        ];
        if let Some((name, _)) = live_only.iter().find(|(_, on)| *on) {
            let name = if name.contains('=') {
                name.to_string()
            } else {
                format!("{name}=")
            };
            return Err(format!(
                "{name} applies to live mode (`slipstream live`), not to file transfers"
            ));
        }
    }
    // latency sets both directions' wish, rcvlatency and peerlatency one each (libsrt).
    if let Some(l) = uri.rcv_latency.or(uri.latency) {
        cfg.set_latency(l);
    }
    if let Some(l) = uri.peer_latency.or(uri.latency) {
        cfg.set_peer_latency(Some(l));
    }
    match uri.max_bw {
        None | Some(-1) => {
            if uri.input_bw.is_some() || uri.overhead_bw.is_some() {
                return Err(
                    "inputbw= and oheadbw= take effect with maxbw=0 (relative to the \
                            input rate), as in libsrt"
                        .into(),
                );
            }
        }
        Some(0) => {
            cfg.set_max_bw_rule(MaxBw::Relative {
                input_bps: uri.input_bw.unwrap_or(0),
                overhead_pct: uri.overhead_bw.unwrap_or(25),
            });
        }
        Some(b) => {
            cfg.set_max_bw(b as u64);
        }
    }
    if let Some(t) = uri.connect_timeout {
        cfg.set_connect_timeout(t.max(Duration::from_millis(1)));
    }
    cfg.set_send_buffer_cap(uri.snd_buf)
        .set_recv_buffer_cap(uri.rcv_buf);
    if let Some(on) = uri.too_late_drop {
        cfg.set_too_late_drop(on);
    }
    if let Some(on) = uri.nak_report {
        cfg.set_nak_report(on);
    }
    if mode == Mode::File {
        cfg.set_file_digest(true);
    }
    Ok(cfg)
}

fn any_addr_for(remote: SocketAddr) -> SocketAddr {
    if remote.is_ipv4() {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    }
}

/// Opens the endpoint and the connection a URI describes (caller or listener).
fn open(
    uri: &Uri,
    cfg: ConnConfig,
    opts: EndpointOptions,
    accept_timeout: Option<f64>,
) -> Result<(Endpoint, Connection), String> {
    match uri.mode {
        UriMode::Caller => {
            let remote = uri.remote()?;
            let ep = Endpoint::bind(any_addr_for(remote), opts).map_err(|e| e.to_string())?;
            let c = ep
                .connect(remote, cfg)
                .map_err(|e| format!("connecting to {remote}: {e}"))?;
            Ok((ep, c))
        }
        UriMode::Listener => {
            let addr = uri.bind_addr()?;
            let ep = Endpoint::bind(addr, opts).map_err(|e| format!("binding {addr}: {e}"))?;
            ep.listen(cfg).map_err(|e| e.to_string())?;
            let c = match accept_timeout {
                Some(s) => ep.accept_timeout(Duration::from_secs_f64(s.max(0.0))),
                None => ep.accept(),
            }
            .map_err(|e| format!("waiting for a connection on {addr}: {e}"))?;
            Ok((ep, c))
        }
    }
}

fn progress_bar(common: &Common, total: Option<u64>) -> ProgressBar {
    if common.quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    match total {
        Some(n) => {
            let pb = ProgressBar::new(n);
            pb.set_style(
                ProgressStyle::with_template(
                    "{bar:40.cyan/blue} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            pb
        }
        None => {
            let pb = ProgressBar::new_spinner();
            pb.set_style(
                ProgressStyle::with_template("{spinner} {bytes} {binary_bytes_per_sec} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            pb.enable_steady_tick(Duration::from_millis(200));
            pb
        }
    }
}

fn hex(h: &transfer::Digest) -> String {
    h.iter().map(|b| format!("{b:02x}")).collect()
}

/// Throughput in Gbit/s.
fn gbps(bytes: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        bytes as f64 * 8.0 / secs / 1e9
    } else {
        0.0
    }
}

/// Where `--stats-json` goes: created before any work (a path that cannot be written fails
/// the command before it starts), written at the end. A failure to write then is a warning:
/// statistics never change a transfer's verdict or exit status.
pub(super) struct StatsJson(Option<PathBuf>);

impl StatsJson {
    pub(super) fn open(path: Option<&Path>) -> Result<Self, String> {
        if let Some(p) = path {
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(p)
                .map_err(|e| format!("--stats-json {}: {e}", p.display()))?;
        }
        Ok(StatsJson(path.map(Path::to_path_buf)))
    }

    pub(super) fn write(&self, v: &serde_json::Value) {
        let Some(p) = &self.0 else {
            return;
        };
        let written = serde_json::to_string_pretty(v)
            .map_err(|e| e.to_string())
            .and_then(|t| std::fs::write(p, t + "\n").map_err(|e| e.to_string()));
        if let Err(e) = written {
            eprintln!(
                "slipstream: warning: statistics not written to {}: {e}",
                p.display()
            );
        }
    }
}

/// What a transfer reports at the end.
struct Summary<'a> {
    role: &'a str,
    bytes: u64,
    secs: f64,
    integrity: String,
    verified: Option<bool>,
    digest: Option<transfer::Digest>,
    /// How a sender read its file: "mapped" or "read".
    source: Option<&'static str>,
    conn: Option<ConnStats>,
}

impl Summary<'_> {
    fn print(&self) {
        let (retx, rtt) = self
            .conn
            .map(|s| (s.pkts_retransmitted, s.rtt_ms))
            .unwrap_or((0, 0.0));
        eprintln!(
            "{} {} bytes in {:.2} s ({:.3} Gbit/s), {} packets retransmitted, RTT {:.2} ms; \
             integrity: {}",
            self.role,
            self.bytes,
            self.secs,
            gbps(self.bytes, self.secs),
            retx,
            rtt,
            self.integrity
        );
    }

    fn write_json(&self, out: &StatsJson, ep: Option<&Endpoint>) {
        let v = serde_json::json!({
            "role": self.role,
            "bytes": self.bytes,
            "seconds": self.secs,
            "gbit_per_s": gbps(self.bytes, self.secs),
            "integrity": self.integrity,
            "verified": self.verified,
            "xxh3_128": self.digest.as_ref().map(hex),
            "source": self.source,
            "connection": self.conn,
            "endpoint": ep.map(Endpoint::stats),
            "datapath": ep.map(|e| serde_json::json!({
                "name": e.datapath_name(),
                "stats": e.datapath_stats(),
            })),
        });
        out.write(&v);
    }
}

/// Connects a sender of `file` (a file or a directory): its stream id defaults to the
/// file's name, and `max_rate` caps it.
fn open_sender(
    file: &Path,
    uri: &Uri,
    max_rate: Option<u64>,
    common: &Common,
    registry: &CcRegistry,
) -> Result<(Endpoint, Connection), String> {
    let mut cfg = conn_config(Mode::File, uri, common, registry)?;
    if let Some(r) = max_rate {
        cfg.set_max_bw(r);
    }
    let sid = uri.stream_id.clone().or_else(|| {
        // The name of a directory given as "." or "dir/" is its own.
        let abs = std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
        abs.file_name().map(|n| n.to_string_lossy().into_owned())
    });
    cfg.set_stream_id(sid.map(String::into_bytes));
    open(uri, cfg, endpoint_options(common, registry)?, None)
}

fn cmd_send(
    file: &Path,
    uri: &str,
    max_rate: Option<u64>,
    common: &Common,
    registry: &CcRegistry,
) -> CliResult {
    let uri = Uri::parse(uri)?;
    if uri.scheme != "srt" {
        return Err("send needs an srt:// destination".into());
    }
    if file.is_dir() {
        return tree::send(file, &uri, max_rate, common, registry);
    }
    // Opened before connecting: an unreadable file fails here, not at the receiver as a
    // truncated transfer.
    let f = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let meta = f
        .metadata()
        .map_err(|e| format!("{}: {e}", file.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", file.display()));
    }
    let stats_json = StatsJson::open(common.stats_json.as_deref())?;
    let (ep, conn) = open_sender(file, &uri, max_rate, common, registry)?;
    let pb = progress_bar(common, Some(meta.len()));
    let t0 = Instant::now();
    let result = interruptible(&conn, || {
        transfer::send_open_file(&conn, f, file, |n| pb.set_position(n))
    });
    let secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let stats = conn.stats().ok();
    match result {
        Ok(r) => {
            if r.resumed_from > 0 {
                eprintln!(
                    "resumed: the receiver held the first {} bytes ({:.1} %), checked chunk \
                     by chunk; sent the other {}",
                    r.resumed_from,
                    100.0 * r.resumed_from as f64 / r.bytes.max(1) as f64,
                    r.bytes - r.resumed_from
                );
            }
            let integrity = if r.committed {
                format!(
                    "the receiver verified it (XXH3-128 {}) and committed it",
                    hex(&r.digest)
                )
            } else if r.digest_sent {
                format!(
                    "digest trailer sent (XXH3-128 {}), receiver verifies",
                    hex(&r.digest)
                )
            } else {
                "acknowledged; the peer offers no end-to-end digest".into()
            };
            let s = Summary {
                role: "sent",
                bytes: r.bytes - r.resumed_from,
                secs,
                integrity,
                verified: None,
                digest: Some(r.digest),
                source: Some(if r.mapped { "mapped" } else { "read" }),
                conn: stats,
            };
            s.print();
            s.write_json(&stats_json, Some(&ep));
            Ok(())
        }
        Err(e) => {
            if let Some(s) = stats {
                eprintln!(
                    "after {} bytes acknowledged, {} retransmitted packets, RTT {:.2} ms",
                    s.bytes_acked, s.pkts_retransmitted, s.rtt_ms
                );
            }
            if let Some(why) = interrupted("send") {
                return Err(format!(
                    "{why}; a slipstream receiver keeps what it has, and the same command \
                     resumes from there"
                ));
            }
            Err(format!("send failed: {e}"))
        }
    }
}

/// A file name from a stream id: its last path component, which must be a real name.
fn file_name_from_stream_id(sid: &str) -> Result<String, String> {
    let last = sid.rsplit(['/', '\\']).next().unwrap_or("");
    let name: String = last
        .chars()
        .map(|c| if c.is_control() { '_' } else { c })
        .take(255)
        .collect();
    if name.is_empty() || name == "." || name == ".." {
        return Err(format!(
            "the sender's stream id '{sid}' is not usable as a file name; give OUT as a file"
        ));
    }
    Ok(name)
}

/// Whether `recv` can write OUT: into it (a directory), over or into it (an existing file,
/// device or FIFO), or a new file in its directory.
fn check_writable(out: &Path, into_dir: bool) -> CliResult {
    use rustix::fs::{access, Access};
    let (what, mode) = if into_dir {
        (out.to_path_buf(), Access::WRITE_OK | Access::EXEC_OK)
    } else if out.metadata().is_ok_and(|m| !m.is_file()) {
        (out.to_path_buf(), Access::WRITE_OK)
    } else {
        let dir = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(format!(
                "cannot write {}: {} is not a directory",
                out.display(),
                dir.display()
            ));
        }
        (dir, Access::WRITE_OK | Access::EXEC_OK)
    };
    access(&what, mode).map_err(|e| {
        format!(
            "cannot write {}: {}: {}",
            out.display(),
            what.display(),
            io::Error::from(e)
        )
    })
}

/// `recv`'s options beyond the common ones.
#[derive(Debug, Clone, Copy)]
struct RecvOpts {
    force: bool,
    accept_timeout: Option<f64>,
    max_rate: Option<u64>,
    serve: bool,
    json: bool,
}

fn cmd_recv(
    uri: &str,
    out: &Path,
    opts: &RecvOpts,
    common: &Common,
    registry: &CcRegistry,
) -> CliResult {
    let RecvOpts {
        force,
        accept_timeout,
        max_rate,
        serve,
        json,
    } = *opts;
    let uri = Uri::parse(uri)?;
    if uri.scheme != "srt" {
        return Err("recv needs an srt:// source".into());
    }
    let stats_json = StatsJson::open(common.stats_json.as_deref())?;
    let to_stdout = out == Path::new("-");
    let into_dir = out.is_dir();
    let regular = out.metadata().is_ok_and(|m| m.is_file());
    if !into_dir && regular && !force {
        return Err(format!(
            "{} exists (use --force to replace it)",
            out.display()
        ));
    }
    // Checked before listening: a sender should not connect to a receiver that cannot write.
    if !to_stdout {
        check_writable(out, into_dir)?;
    }
    let mut cfg = conn_config(Mode::File, &uri, common, registry)?;
    if let Some(r) = max_rate {
        // Offered to the sender, which sends at most this fast.
        cfg.set_max_bw(r);
    }
    if serve {
        let dir = serve::check(out, uri.mode == UriMode::Listener)?;
        let addr = uri.bind_addr()?;
        let eo = endpoint_options(common, registry)?;
        let ep = Endpoint::bind(addr, eo).map_err(|e| format!("binding {addr}: {e}"))?;
        ep.listen(cfg).map_err(|e| e.to_string())?;
        return serve::run(&ep, &dir, force, json);
    }
    let (ep, conn) = open(
        &uri,
        cfg,
        endpoint_options(common, registry)?,
        accept_timeout,
    )?;
    let name = if into_dir {
        let name = conn
            .stream_id_str()
            .ok_or_else(|| "the sender gave no stream id; give OUT as a file name".to_string())
            .and_then(|sid| file_name_from_stream_id(&sid));
        Some(name.inspect_err(|why| verdict::send_verdict(&conn, Err(why.as_str())))?)
    } else {
        None
    };
    let path = match &name {
        Some(n) => out.join(n),
        None => out.to_path_buf(),
    };
    let pb = progress_bar(common, None);
    let t0 = Instant::now();
    let result = interruptible(&conn, || {
        let progress = |n| pb.set_position(n);
        match &name {
            _ if to_stdout => {
                transfer::recv_stream(&conn, io::stdout().lock(), progress).map(Received::File)
            }
            Some(n) => transfer::recv_into(&conn, out, n, force, progress),
            None => transfer::recv_file(&conn, &path, force, progress).map(Received::File),
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let stats = conn.stats().ok();
    match result {
        Ok(Received::Tree(t)) => tree::received(&path, &t, secs, stats, &stats_json, &ep),
        Ok(Received::File(v)) => {
            let mut resumed = 0;
            let (integrity, verified, digest) = match v {
                Verdict::Verified {
                    digest,
                    resumed_from,
                    ..
                } => {
                    resumed = resumed_from;
                    (
                        format!("verified (XXH3-128 {})", hex(&digest)),
                        true,
                        Some(digest),
                    )
                }
                Verdict::Unverified { .. } => (
                    "UNVERIFIED: the peer offers no end-to-end digest; complete per its clean \
                     shutdown only"
                        .to_string(),
                    false,
                    None,
                ),
            };
            if resumed > 0 {
                eprintln!(
                    "resumed: {} bytes ({:.1} %) were kept from an interrupted transfer",
                    resumed,
                    100.0 * resumed as f64 / v.bytes().max(1) as f64
                );
            }
            let s = Summary {
                role: "received",
                bytes: v.bytes() - resumed,
                secs,
                integrity,
                verified: Some(verified),
                digest,
                source: None,
                conn: stats,
            };
            s.print();
            eprintln!("wrote {}", path.display());
            s.write_json(&stats_json, Some(&ep));
            Ok(())
        }
        Err(e) => {
            let part = transfer::part_path(&path);
            let kept = match std::fs::metadata(&part) {
                Ok(m) if !to_stdout && m.len() > 0 => format!(
                    "; {} keeps {} bytes: the same command resumes from there",
                    part.display(),
                    m.len()
                ),
                _ => String::new(),
            };
            match interrupted("receive") {
                Some(why) => Err(format!("{why}, {} not written{kept}", path.display())),
                None => Err(format!(
                    "receive failed, {} not written: {e}{kept}",
                    path.display()
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_id_file_names() {
        assert_eq!(file_name_from_stream_id("movie.ts").unwrap(), "movie.ts");
        assert_eq!(
            file_name_from_stream_id("../../etc/passwd").unwrap(),
            "passwd"
        );
        assert_eq!(file_name_from_stream_id("a\\b\\c.bin").unwrap(), "c.bin");
        assert!(file_name_from_stream_id("..").is_err());
        assert!(file_name_from_stream_id("dir/").is_err());
        assert!(file_name_from_stream_id("").is_err());
    }
}
