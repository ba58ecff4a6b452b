//! `slipstream bench`: measurements of the datapaths themselves, without the protocol.
//!
//! - `bench dgram`: one ttcp-style cell ([`dgram`]): one payload size, one datapath, loopback
//!   or a veth pair between two network namespaces ([`netns`]).
//! - `bench dgram-table`: the matrix of sizes × datapaths ([`table`]), after Table 3 and
//!   Fig. 8 of the asynchronous-UDP paper, as markdown, JSON lines and SVG charts.
//! - `bench transfer`: one file moved by slipstream, kernel TCP, libsrt and UDT over loopback
//!   and emulated paths, side by side ([`transfer`]).
//! - `bench live`: a paced live stream relayed by `slipstream live` and `srt-live-transmit`
//!   (SRT live mode) over loopback and an emulated path: delivery, latency, CPU ([`live`]).
//! - `bench small`: 64-byte real-time messages against Aeron: rate and tail latency
//!   ([`small`]).
//! - `bench conns`: N connections between two processes over loopback: set-up rate, memory
//!   and idle CPU per connection, aggregate throughput and fairness under load ([`conns`]).

pub mod conns;
pub mod dgram;
pub mod live;
#[cfg(target_os = "linux")]
pub mod netem;
pub use slipstream::netem::netns;
pub mod rtmix;
pub mod rtpp;
pub mod small;
pub mod table;
pub mod table4;
pub mod transfer;

use clap::{Args, Subcommand};
use std::path::PathBuf;

/// The `bench` subcommands.
#[derive(Debug, Subcommand)]
pub enum BenchCmd {
    /// One cell: a sender thread floods SIZE-byte UDP payloads to a receiver thread through
    /// one datapath, counted at the receiver. With --json the last stdout line is JSON.
    Dgram(DgramArgs),
    /// The matrix of payload sizes × datapaths (median of --repeat runs per cell), written
    /// as DIR/dgram-<path>.md, .jsonl and .svg.
    DgramTable(TableArgs),
    /// Accuracy of the link emulator (`slipstream netem`): added delay, delivered rate and
    /// loss ratio against their configured values, and the emulator's CPU use (needs root).
    Netem(NetemArgs),
    /// The same file transfer with slipstream, kernel TCP (CUBIC, BBR), srt-file-transmit and
    /// UDT over loopback and emulated 1 Gbit/s paths, side by side: DIR/transfer.md, .jsonl
    /// and .svg charts.
    Transfer(transfer::TransferArgs),
    /// A paced constant-bit-rate UDP stream relayed in SRT live mode by `slipstream live` and
    /// `srt-live-transmit`, over loopback and an emulated path: delivered share, end-to-end
    /// latency (p50/p99/max) and CPU; DIR/live.md and .jsonl with --out-dir.
    Live(live::LiveArgs),
    /// N connections between two endpoints in two processes over loopback, idle or loaded
    /// (bulk streams, small messages): set-up rate, memory and idle CPU per connection,
    /// aggregate throughput, Jain's fairness, connections lost. With --json the last stdout
    /// line is JSON.
    Conns(conns::ConnsArgs),
    /// The SS-RTUDP paper's Table 4 (needs root): three senders of real-time and
    /// non-real-time messages congest one receiver's port on an emulated switch, without and
    /// with the traffic smoother, from one seeded trace. With --json the last stdout line is
    /// JSON (rt_loss_pct_without, rt_loss_pct_with, ..., time_scale, validity_ok).
    Table4(table4::Table4Args),
    /// The SS-RTUDP paper's Figs. 7 and 8 (needs root): ping-pong latency (p50, p99 of half
    /// the round trip) and streaming bandwidth from 1 B to 65,000 B, the real-time path against
    /// plain sendto/recvfrom, over veth or the link emulator at 100 Mbit/s or 1 Gbit/s.
    Rtpp(rtpp::RtppArgs),
    /// Small real-time messages (64 B by default) against Aeron (Java, embedded media driver,
    /// fetched from Maven Central) in the same run: message rate, and latency from the
    /// intended send time at paced rates (p50/p99/p99.9/max); Aeron's own EmbeddedThroughput
    /// and EmbeddedPingPong samples too. With --json the last stdout line is JSON.
    Small(small::SmallArgs),
    /// Real-time messages beside a bulk SRT transfer from the same process through one
    /// emulated link, without and with the process's smoother (needs root): one-way delay,
    /// deadline misses and the bulk rate. With --json the last stdout line is JSON.
    Rtmix(rtmix::RtmixArgs),
    /// The listening process of `bench conns` (started by it).
    #[command(hide = true)]
    ConnsServer(conns::PeerArgs),
    /// The calling process of `bench conns` (started by it).
    #[command(hide = true)]
    ConnsClient(conns::PeerArgs),
}

/// Options of `bench netem`.
#[derive(Debug, Args)]
pub struct NetemArgs {
    /// A short subset (one delay, one rate, one loss model) for a smoke test.
    #[arg(long)]
    quick: bool,
    /// Print the report as JSON (last line) as well.
    #[arg(long)]
    json: bool,
    /// Also write DIR/netem-accuracy.md and .json.
    #[arg(long, value_name = "DIR")]
    out_dir: Option<PathBuf>,
}

/// Options of `bench dgram`.
#[derive(Debug, Args)]
pub struct DgramArgs {
    /// UDP payload bytes per datagram, 1..=65507.
    #[arg(long, value_name = "BYTES")]
    size: usize,
    /// Datapath: plain, mmsg, gso, uring, uring-zc, msg-zc, async (whichever this build has).
    #[arg(long, value_name = "NAME", default_value = "plain")]
    datapath: String,
    #[command(flatten)]
    window: Window,
    /// Run over a veth pair between two fresh network namespaces (needs root).
    #[arg(long)]
    netns: bool,
    /// MTU of the veth pair.
    #[arg(long, value_name = "BYTES", default_value_t = 1500, requires = "netns")]
    mtu: u32,
    /// Also print the result as one JSON object, as the last line.
    #[arg(long)]
    json: bool,
}

/// How long each run measures, after how long a warm-up.
#[derive(Debug, Clone, Copy, Args)]
pub struct Window {
    /// Measured window of each run, seconds.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 2.0,
        allow_negative_numbers = true
    )]
    seconds: f64,
    /// Warm-up before the window (not counted), seconds.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 0.2,
        allow_negative_numbers = true
    )]
    warmup: f64,
}

/// Options of `bench dgram-table`.
#[derive(Debug, Args)]
pub struct TableArgs {
    /// Payload sizes, comma-separated [default: 32,64,...,8192,16384,65507].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    sizes: Option<Vec<usize>>,
    /// Datapaths, comma-separated; those this build lacks are skipped with a note
    /// [default: plain,mmsg,gso,uring,uring-zc,msg-zc,async].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    datapaths: Option<Vec<String>>,
    /// Runs per cell; the median is kept.
    #[arg(long, value_name = "K", default_value_t = 3)]
    repeat: usize,
    #[command(flatten)]
    window: Window,
    /// Paths, comma-separated: loopback, veth (veth needs root; by default it is skipped
    /// with a note when not root) [default: loopback,veth].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    paths: Option<Vec<String>>,
    /// MTU of the veth pair.
    #[arg(long, value_name = "BYTES", default_value_t = 1500)]
    mtu: u32,
    /// Output directory.
    #[arg(long, value_name = "DIR", default_value = "bench-results")]
    out_dir: PathBuf,
}

/// Runs a `bench` subcommand.
pub fn run(cmd: BenchCmd) -> Result<(), String> {
    remove_made_on_signal();
    if !matches!(cmd, BenchCmd::ConnsServer(_) | BenchCmd::ConnsClient(_)) {
        remove_stale_emulators();
    }
    match cmd {
        BenchCmd::Dgram(a) => run_dgram(a),
        BenchCmd::DgramTable(a) => table::run(&table::TableConfig {
            sizes: a.sizes.unwrap_or_else(|| table::DEFAULT_SIZES.to_vec()),
            datapaths: a.datapaths.unwrap_or_else(|| {
                table::DEFAULT_DATAPATHS
                    .iter()
                    .map(|s| s.to_string())
                    .collect()
            }),
            repeat: a.repeat,
            seconds: a.window.seconds,
            warmup: a.window.warmup,
            paths_explicit: a.paths.is_some(),
            paths: a
                .paths
                .unwrap_or_else(|| vec!["loopback".into(), "veth".into()]),
            mtu: a.mtu,
            out_dir: a.out_dir,
        }),
        BenchCmd::Transfer(a) => transfer::run(&a),
        BenchCmd::Netem(a) => run_netem(a),
        BenchCmd::Live(a) => live::run(&a),
        BenchCmd::Conns(a) => conns::run(&a),
        BenchCmd::Table4(a) => table4::run(&a),
        BenchCmd::Rtpp(a) => rtpp::run(&a),
        BenchCmd::Small(a) => small::run(&a),
        BenchCmd::Rtmix(a) => rtmix::run(&a),
        BenchCmd::ConnsServer(a) => conns::run_server(&a),
        BenchCmd::ConnsClient(a) => conns::run_client(&a),
    }
}

/// Prefixes of the emulators and switches benches name after their process id
/// (`rtpp<pid>`, `rtmix<pid>`, `t4x<pid>`, `ssacc<pid>`; `bench transfer` and `bench live`
/// name theirs `bt<hex pid>x<n>`).
const EMULATOR_PREFIXES: [&str; 4] = ["rtpp", "rtmix", "t4x", "ssacc"];

/// The process a bench emulator is named after, if `name` is one.
fn emulator_owner(name: &str) -> Option<u32> {
    EMULATOR_PREFIXES
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .filter(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|rest| rest.parse::<u32>().ok())
        .or_else(|| transfer::path::owner_pid(name))
}

/// Takes down the emulators that benches killed outright (SIGKILL, or a crash: no signal
/// handler runs) left behind: those named after a process that is gone. As root only; each
/// one removed is said on stderr. Every bench runs it first; `bench transfer`'s guardian
/// runs it again when the bench it watches dies.
pub(crate) fn remove_stale_emulators() {
    if !slipstream::netem::netns::is_root() {
        return;
    }
    for name in slipstream::netem::list() {
        let Some(pid) = emulator_owner(&name) else {
            continue;
        };
        if pid == std::process::id() || slipstream::netem::netns::alive(pid) {
            continue;
        }
        match slipstream::netem::down(&name) {
            Ok(_) => eprintln!("bench: removed emulator {name}, left behind by process {pid}"),
            Err(e) => eprintln!("warning: emulator {name} of process {pid}, which is gone: {e}"),
        }
    }
}

/// Child processes a bench started and has not waited for yet, which a stop signal ends
/// too (pids).
static CHILDREN: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Notes a child that a stop signal must end (with SIGTERM). Call
/// [`forget_child`] before waiting for it: until it is waited for its pid is not reused.
pub(crate) fn note_child(pid: u32) {
    CHILDREN.lock().unwrap_or_else(|e| e.into_inner()).push(pid);
}

/// Forgets a child noted with [`note_child`]; call it before waiting for the child.
pub(crate) fn forget_child(pid: u32) {
    CHILDREN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|&p| p != pid);
}

/// Sends SIGTERM to every child noted; returns how many.
fn stop_children() -> usize {
    let g = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
    for &pid in g.iter() {
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
    g.len()
}

/// A bench ended by SIGINT or SIGTERM would leave behind the emulators and namespaces it
/// made (their guards run only when the bench returns or unwinds), and the child processes
/// it runs (Aeron's java): a watcher takes them down and ends the process with 128 plus the
/// signal's number.
fn remove_made_on_signal() {
    if let Err(e) = slipstream::signal::install_stop_handler() {
        eprintln!("warning: no signal handler ({e}): a bench stopped by a signal leaves its emulators behind");
        return;
    }
    std::thread::spawn(|| loop {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if slipstream::signal::stop_requested() {
            let sig = slipstream::signal::stop_signal().unwrap_or("a signal");
            let ended = stop_children();
            let mut removed = slipstream::netem::remove_made();
            if ended > 0 {
                removed.push(format!("{ended} child process(es), sent SIGTERM"));
            }
            if removed.is_empty() {
                eprintln!("bench interrupted by {sig}");
            } else {
                eprintln!(
                    "bench interrupted by {sig}; removed: {}",
                    removed.join(", ")
                );
            }
            std::process::exit(if sig == "SIGTERM" { 143 } else { 130 });
        }
    });
}

fn run_netem(a: NetemArgs) -> Result<(), String> {
    use std::time::Duration;
    let ms = Duration::from_millis;
    let cfg = if a.quick {
        netem::Config {
            delays: vec![ms(10)],
            pings: 50,
            rates: vec![100_000_000],
            seconds: 1.0,
            losses: vec!["loss=5%".into()],
            datagrams: 20_000,
        }
    } else {
        netem::Config {
            delays: vec![ms(0), ms(1), ms(10), ms(50)],
            pings: 200,
            rates: vec![10_000_000, 100_000_000, 500_000_000, 1_000_000_000],
            seconds: 3.0,
            losses: ["loss=0.1%", "loss=1%", "loss=5%", "burst=1%/30%"]
                .map(String::from)
                .to_vec(),
            datagrams: 100_000,
        }
    };
    let report = netem::run(&cfg)?;
    println!("{}", report.markdown());
    if let Some(dir) = &a.out_dir {
        let cmd: Vec<String> = std::env::args().collect();
        netem::write(&report, dir, &cmd.join(" "))?;
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&report).map_err(|e| e.to_string())?
        );
    }
    if report.ok() {
        Ok(())
    } else {
        Err("the emulator missed a bound (see **no** above)".into())
    }
}

fn run_dgram(a: DgramArgs) -> Result<(), String> {
    let cfg = dgram::CellConfig {
        datapath: a.datapath,
        size: a.size,
        seconds: a.window.seconds,
        warmup: a.window.warmup,
    };
    dgram::validate(&cfg)?;
    let pair = if a.netns {
        Some(netns::VethPair::create(a.mtu)?)
    } else {
        None
    };
    let env = pair
        .as_ref()
        .map_or_else(dgram::PathEnv::loopback, dgram::PathEnv::veth);
    let r = dgram::run_cell(&cfg, &env).map_err(|e| format!("bench dgram: {e}"))?;
    drop(pair);
    println!("{}", r.summary());
    if r.ip_fragmented {
        println!(
            "note: {}-byte payloads exceed the veth MTU {} (minus {} bytes of IP/UDP headers): \
             plain datagrams are fragmented at the IP level",
            r.size,
            r.mtu.unwrap_or(0),
            dgram::UDP_IP_HEADERS
        );
    }
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&r).map_err(|e| format!("bench dgram: {e}"))?
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::emulator_owner;

    #[test]
    fn emulators_are_known_by_the_process_they_are_named_after() {
        assert_eq!(emulator_owner("rtmix4242"), Some(4242));
        assert_eq!(emulator_owner("t4x17"), Some(17));
        assert_eq!(
            emulator_owner("bt1fx3"),
            Some(0x1f),
            "bench transfer's, in hex"
        );
        for other in ["rtpp", "rtpp12a", "bt1f", "mylink", "ssacc-1"] {
            assert_eq!(emulator_owner(other), None, "{other}");
        }
    }
}
