//! `slipstream bench conns`: many connections between two endpoints in two processes over
//! loopback, and what they cost: set-up rate, memory and idle CPU per connection, and, under
//! load, aggregate throughput and fairness.
//!
//! The bench runs this very binary twice ([`peer`]): `bench conns-server` (one endpoint
//! listening on 127.0.0.1) and `bench conns-client` (one endpoint opening the connections),
//! and drives both over their stdin and stdout ([`ipc`]). Every pattern goes through the same
//! phases:
//!
//! 1. connect: the client opens N connections from min(N, 64) threads at once; the set-up
//!    rate is N over the time from the first connect call's start to the last one's return,
//!    in the client (`setup_per_s`); the server's view, to its last accept, is
//!    `setup_per_s_server`;
//! 2. settle [`SETTLE`], then sample memory (VmRSS; per connection: its growth since the
//!    endpoint was bound, over the connections established) and CPU time;
//! 3. idle: nothing sent for the idle window; each process's CPU over it is its idle CPU;
//! 4. load (`bulk`, `messages`): a thread per connection on each side, the client's sending
//!    as fast as it can, the server's receiving; after `--warmup` the server counts what
//!    arrives for `--secs`.
//!
//! A connection that ends in any way during the run is lost (`connections_lost`, each counted
//! once whichever side saw it). Losses are reported, not fatal; a child that fails or stops
//! answering is: the bench then exits non-zero. The children are killed on every exit path,
//! and exit by themselves when the bench's end of their stdin closes.

mod ipc;
mod peer;
mod report;

use clap::{Args, ValueEnum};
use ipc::{Accepted, Child, Cmd, Connected, Measured, Ready, Sample, Started, Stopped};
use std::net::SocketAddr;
use std::time::Duration;

pub use peer::{run_client, run_server};

/// Quiet time between the connect phase and the first sample.
const SETTLE: Duration = Duration::from_secs(1);
/// Longest wait for a child's start-up line, a sample or a start.
const ANSWER: Duration = Duration::from_secs(15);
/// Most connector threads by default.
const CONNECTORS: usize = 64;
/// The library's connect timeout (ConnConfig's default): the longest one connect call takes.
const CONNECT_TIMEOUT_S: f64 = 3.0;

/// What the connections do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// Nothing: connected, then idle.
    Idle,
    /// Stream mode (file mode's default configuration), client to server, as fast as each can.
    Bulk,
    /// Message mode, --size-byte messages client to server, as fast as each can.
    Messages,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::Idle => "idle",
            Pattern::Bulk => "bulk",
            Pattern::Messages => "messages",
        }
    }
}

/// Options of `bench conns`.
#[derive(Debug, Args)]
pub struct ConnsArgs {
    /// Connections to open.
    #[arg(long, value_name = "N")]
    n: usize,
    /// What they do once connected.
    #[arg(long, value_enum, default_value = "idle")]
    pattern: Pattern,
    /// I/O threads per endpoint, on both sides (`EndpointOptions::set_threads`, at most 64).
    #[arg(long, value_name = "T", default_value_t = 1)]
    threads: usize,
    /// Measured window, seconds: the load of bulk and messages [default: 5]; for idle, the
    /// idle window [default: --idle-secs].
    #[arg(long, value_name = "SECS")]
    secs: Option<f64>,
    /// Idle window before the load of bulk and messages, seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3.0)]
    idle_secs: f64,
    /// Load before the measured window (not counted), seconds.
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    warmup: f64,
    /// Message bytes (messages).
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    size: usize,
    /// Connector threads of the client [default: min(N, 64)].
    #[arg(long, value_name = "K")]
    connectors: Option<usize>,
    /// Datagram backend of both endpoints (see `slipstream caps`).
    #[arg(long, value_name = "NAME", default_value = "auto")]
    datapath: String,
    /// Bulk: copy the stream in and out (`send`, `recv`, 64 KiB a call) instead of queueing
    /// one shared chunk without copying and taking whole pages out (`send_shared`,
    /// `recv_pages`, as file transfers do).
    #[arg(long)]
    copy: bool,
    /// Congestion controller of every connection (bbr, file, udt, live) [default: the
    /// library's for the mode].
    #[arg(long, value_name = "NAME")]
    cc: Option<String>,
    /// Packet size (MSS, bytes) of every connection, as on a path of that MTU [default:
    /// loopback's 64 KiB for bulk, 1500 for messages]; 1500 is what an Ethernet path gives.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(76..=65_535))]
    mss: Option<u32>,
    /// Load threads per side, each serving its share of the connections through a poller
    /// (`slipstream::Poller`) [default: one per I/O thread]; 0 runs a thread per connection
    /// making blocking calls.
    #[arg(long, value_name = "W")]
    workers: Option<usize>,
    /// Print each connection's statistics (both sides) to stderr when the load ends:
    /// pacing period, round trip, packets in flight, losses, buffers.
    #[arg(long)]
    conn_stats: bool,
    /// Also print the report as one JSON object, as the last line.
    #[arg(long)]
    json: bool,
}

/// Options of the hidden `bench conns-server` and `bench conns-client` (set by `bench conns`).
#[derive(Debug, Args)]
pub struct PeerArgs {
    /// The server's address (client only).
    #[arg(long)]
    addr: Option<SocketAddr>,
    #[arg(long)]
    n: usize,
    #[arg(long, value_enum)]
    pattern: Pattern,
    #[arg(long)]
    threads: usize,
    #[arg(long)]
    size: usize,
    #[arg(long)]
    connectors: usize,
    #[arg(long)]
    datapath: String,
    #[arg(long)]
    cc: Option<String>,
    #[arg(long)]
    mss: Option<u32>,
    #[arg(long)]
    copy: bool,
    #[arg(long)]
    conn_stats: bool,
    #[arg(long)]
    workers: usize,
}

/// Runs `bench conns`.
pub fn run(a: &ConnsArgs) -> Result<(), String> {
    let load = a.pattern != Pattern::Idle;
    let secs = match (a.secs, load) {
        (Some(s), _) => s,
        (None, true) => 5.0,
        (None, false) => a.idle_secs,
    };
    let idle = if load { a.idle_secs } else { secs };
    if a.n == 0 {
        return Err("--n must be at least 1".into());
    }
    if a.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    for (name, v) in [("--secs", secs), ("--idle-secs", idle)] {
        if !(v > 0.0 && v < 3600.0) {
            return Err(format!("{name} must be above 0 and below 3600 seconds"));
        }
    }
    if !(0.0..3600.0).contains(&a.warmup) {
        return Err("--warmup must be 0 or more seconds, below 3600".into());
    }
    if a.size == 0 || a.size > 16 << 20 {
        return Err("--size must be 1 to 16 MiB".into());
    }
    let connectors = a.connectors.unwrap_or(CONNECTORS).clamp(1, a.n);
    let workers = a.workers.unwrap_or(a.threads);

    let exe = std::env::current_exe().map_err(|e| format!("finding this program: {e}"))?;
    let mut args: Vec<String> = ["bench", "conns-server", "--n", &a.n.to_string()]
        .map(String::from)
        .to_vec();
    args.extend(
        [
            "--pattern",
            a.pattern.name(),
            "--threads",
            &a.threads.to_string(),
            "--size",
            &a.size.to_string(),
            "--connectors",
            &connectors.to_string(),
            "--datapath",
            &a.datapath,
            "--workers",
            &workers.to_string(),
        ]
        .map(String::from),
    );
    if let Some(cc) = &a.cc {
        args.extend(["--cc".into(), cc.clone()]);
    }
    if let Some(mss) = a.mss {
        args.extend(["--mss".into(), mss.to_string()]);
    }
    if a.copy {
        args.push("--copy".into());
    }
    if a.conn_stats {
        args.push("--conn-stats".into());
    }
    let mut server = Child::spawn("server", &exe, &args)?;
    let s_ready: Ready = server.read(ANSWER, "start-up")?;
    args[1] = "conns-client".into();
    args.extend(["--addr".into(), s_ready.addr.to_string()]);
    let mut client = Child::spawn("client", &exe, &args)?;
    let c_ready: Ready = client.read(ANSWER, "start-up")?;

    // 1. Connect. Each call takes at most the connect timeout; the connectors share them.
    eprintln!(
        "bench conns: opening {} connections ({connectors} at once)",
        a.n
    );
    let rounds = a.n.div_ceil(connectors) as f64;
    let budget = Duration::from_secs_f64(30.0 + rounds * (CONNECT_TIMEOUT_S + 1.0));
    let conn: Connected = client.ask(&Cmd::Connect, budget)?;
    let acc: Accepted = server.ask(
        &Cmd::WaitAccepted {
            n: conn.ok,
            timeout_s: 10.0,
        },
        ANSWER,
    )?;
    if let Some(e) = &acc.error {
        return Err(format!("server: {e}"));
    }

    // 2. Settle, sample; 3. idle window, sample.
    std::thread::sleep(SETTLE);
    let (s1, c1): (Sample, Sample) = (
        server.ask(&Cmd::Sample, ANSWER)?,
        client.ask(&Cmd::Sample, ANSWER)?,
    );
    eprintln!("bench conns: idle for {idle} s");
    std::thread::sleep(Duration::from_secs_f64(idle));
    let (s2, c2): (Sample, Sample) = (
        server.ask(&Cmd::Sample, ANSWER)?,
        client.ask(&Cmd::Sample, ANSWER)?,
    );

    // 4. Load.
    let loaded = if load {
        eprintln!(
            "bench conns: {} load for {} s after {} s",
            a.pattern.name(),
            secs,
            a.warmup
        );
        let _: Started = server.ask(&Cmd::Start, ANSWER)?;
        let _: Started = client.ask(&Cmd::Start, ANSWER)?;
        std::thread::sleep(Duration::from_secs_f64(a.warmup));
        let window = Duration::from_secs_f64(secs) + ANSWER;
        let m: Measured = server.ask(&Cmd::Measure { secs }, window)?;
        let st: Stopped = client.ask(&Cmd::Stop, ANSWER)?;
        Some((m, st))
    } else {
        None
    };
    let (s3, c3): (Sample, Sample) = (
        server.ask(&Cmd::Sample, ANSWER)?,
        client.ask(&Cmd::Sample, ANSWER)?,
    );
    drop((server, client));

    let plan = report::Plan {
        secs,
        idle,
        connectors,
        workers,
    };
    let seen = report::Seen {
        server_ready: s_ready,
        client_ready: c_ready,
        connected: conn,
        accepted: acc,
        server: [s1, s2, s3],
        client: [c1, c2, c3],
        load: loaded,
    };
    let r = report::Report::new(a, &plan, &seen);
    println!("{}", r.human());
    if a.json {
        println!(
            "{}",
            serde_json::to_string(&r).map_err(|e| format!("bench conns: {e}"))?
        );
    }
    Ok(())
}
