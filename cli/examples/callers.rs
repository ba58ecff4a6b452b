//! Many slipstream callers against any SRT listener (libsrt's `srt-tunnel`, `srt-live-transmit`,
//! or slipstream itself): the caller half of `slipstream bench conns`, for listeners that are
//! not slipstream.
//!
//! ```sh
//! cargo run --release -p slipstream-cli --example callers -- ADDR N MODE \
//!     [--connectors K] [--hold SECS] [--retries R] [--trickle MS]
//! ```
//!
//! One endpoint (connection limit N + 16) opens N connections to ADDR from K threads at once
//! (default min(N, 64), as `bench conns`), connection `i` with the stream id `i`. MODE is
//! `file` (stream API, libsrt's `transtype=file`), `message` (file mode, message API) or
//! `live`. When every connect call has returned it prints one JSON line:
//!
//! `{"n":..,"established":..,"failed":..,"retries":..,"setup_s":..,"setup_per_s":..,"errors":{..}}`
//!
//! `setup_s` runs from the first connect call's start to the last one's return;
//! `setup_per_s` is `established / setup_s` (the definition of `bench conns`). `errors` counts
//! the failed calls by error text. With `--retries R` a refused call (e.g. a full listen
//! backlog) is repeated up to R times after a short pause, inside the measured time;
//! `retries` counts them.
//!
//! It then holds the connections idle for `--hold` seconds (default 5), sending nothing (with
//! `--trickle MS`, file mode only: one byte on every connection every MS milliseconds from
//! its set-up on, for listeners that drop connections idle for a second, such as libsrt 1.5's
//! `srt-tunnel`),
//! prints a second line, `{"held_s":..,"alive":..,"closed":..,"closed_reasons":{..}}` (the
//! connections that ended by themselves while held), and closes them all.

use slipstream::api::{Connection, Endpoint, EndpointOptions};
use slipstream::proto::conn::State;
use slipstream::{ConnConfig, Mode};
use std::collections::BTreeMap;
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Endpoint connection limit beyond the connections requested (as `bench conns`).
const SPARE_CONNS: usize = 16;
/// Connector threads by default (as `bench conns`).
const CONNECTORS: usize = 64;
/// Stack of a connector thread (connect runs the engine's handshake code on it).
const CONNECTOR_STACK: usize = 256 << 10;
/// Pause before retrying a refused connect, times the attempt number.
const RETRY_PAUSE: Duration = Duration::from_millis(10);

#[derive(Debug)]
struct Args {
    addr: SocketAddr,
    n: usize,
    mode: Mode,
    connectors: usize,
    hold: Duration,
    retries: usize,
    trickle: Option<Duration>,
}

const USAGE: &str =
    "usage: callers ADDR N file|message|live [--connectors K] [--hold SECS] [--retries R] \
     [--trickle MS]";

fn parse() -> Result<Args, String> {
    let mut pos = Vec::new();
    let mut connectors = None;
    let mut hold = 5.0f64;
    let mut retries = 0usize;
    let mut trickle = 0u64;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--connectors" => {
                connectors = Some(
                    value("--connectors")?
                        .parse()
                        .map_err(|e| format!("--connectors: {e}"))?,
                )
            }
            "--hold" => {
                hold = value("--hold")?
                    .parse()
                    .map_err(|e| format!("--hold: {e}"))?
            }
            "--retries" => {
                retries = value("--retries")?
                    .parse()
                    .map_err(|e| format!("--retries: {e}"))?
            }
            "--trickle" => {
                trickle = value("--trickle")?
                    .parse()
                    .map_err(|e| format!("--trickle: {e}"))?
            }
            "-h" | "--help" => return Err(USAGE.into()),
            _ if a.starts_with("--") => return Err(format!("unknown option {a}\n{USAGE}")),
            _ => pos.push(a),
        }
    }
    let [addr, n, mode] = <[String; 3]>::try_from(pos).map_err(|_| USAGE.to_string())?;
    let addr: SocketAddr = addr.parse().map_err(|e| format!("ADDR {addr}: {e}"))?;
    let n: usize = n.parse().map_err(|e| format!("N {n}: {e}"))?;
    if n == 0 {
        return Err("N must be at least 1".into());
    }
    let mode = match mode.as_str() {
        "file" => Mode::File,
        "message" => Mode::Message,
        "live" => Mode::Live,
        _ => return Err(format!("MODE must be file, message or live, not {mode}")),
    };
    if trickle > 0 && mode != Mode::File {
        return Err("--trickle needs file mode".into());
    }
    if !(0.0..86400.0).contains(&hold) {
        return Err("--hold must be 0 to 86400 seconds".into());
    }
    Ok(Args {
        addr,
        n,
        mode,
        connectors: connectors.unwrap_or(CONNECTORS).clamp(1, n),
        hold: Duration::from_secs_f64(hold),
        retries,
        trickle: (trickle > 0).then(|| Duration::from_millis(trickle)),
    })
}

/// The local address to bind for reaching `remote`: its loopback or the wildcard.
fn local_for(remote: SocketAddr) -> SocketAddr {
    let ip = match (remote.ip(), remote.ip().is_loopback()) {
        (IpAddr::V4(_), true) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        (IpAddr::V4(_), false) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        (IpAddr::V6(_), true) => IpAddr::V6(Ipv6Addr::LOCALHOST),
        (IpAddr::V6(_), false) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    SocketAddr::new(ip, 0)
}

fn bump(map: &Mutex<BTreeMap<String, usize>>, key: String) {
    *map.lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key)
        .or_default() += 1;
}

fn say(v: &serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn run(a: &Args) -> Result<(), String> {
    let mut opts = EndpointOptions::default();
    opts.set_max_connections(a.n + SPARE_CONNS);
    let local = local_for(a.addr);
    let ep = Endpoint::bind(local, opts).map_err(|e| format!("binding {local}: {e}"))?;

    let next = AtomicUsize::new(0);
    let retries = AtomicUsize::new(0);
    let span = Mutex::new((None::<Instant>, None::<Instant>));
    let errors = Mutex::new(BTreeMap::new());
    let conns: Arc<Mutex<Vec<Arc<Connection>>>> = Arc::new(Mutex::new(Vec::with_capacity(a.n)));
    let stop = Arc::new(AtomicBool::new(false));
    // The trickle starts with the first connection: a listener that drops connections idle
    // for a second would otherwise lose them while the others are still being set up.
    let trickler = a.trickle.map(|every| {
        let (conns, stop) = (Arc::clone(&conns), Arc::clone(&stop));
        std::thread::spawn(move || trickle(&conns, &stop, every))
    });
    let base = ConnConfig::new(a.mode);
    std::thread::scope(|s| {
        for t in 0..a.connectors {
            std::thread::Builder::new()
                .name(format!("connect-{t}"))
                .stack_size(CONNECTOR_STACK)
                .spawn_scoped(s, || loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= a.n {
                        return;
                    }
                    let mut cfg = base.clone();
                    cfg.set_stream_id(Some(i.to_string().into_bytes()));
                    let start = Instant::now();
                    let mut attempt = 0;
                    let r = loop {
                        match ep.connect(a.addr, cfg.clone()) {
                            Err(e)
                                if e.kind() == ErrorKind::ConnectionRefused
                                    && attempt < a.retries =>
                            {
                                attempt += 1;
                                retries.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(RETRY_PAUSE * attempt as u32);
                            }
                            r => break r,
                        }
                    };
                    let end = Instant::now();
                    {
                        let mut g = span.lock().unwrap_or_else(|e| e.into_inner());
                        g.0 = Some(g.0.map_or(start, |f| f.min(start)));
                        g.1 = Some(g.1.map_or(end, |l| l.max(end)));
                    }
                    match r {
                        Ok(c) => conns
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(Arc::new(c)),
                        Err(e) => bump(&errors, e.to_string()),
                    }
                })
                .map(drop)
                .map_err(|e| format!("starting connector thread {t}: {e}"))?;
        }
        Ok::<(), String>(())
    })?;
    let snapshot =
        |m: &Mutex<Vec<Arc<Connection>>>| m.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let conns_now = snapshot(&conns);
    let errors = errors.into_inner().unwrap_or_else(|e| e.into_inner());
    let (first, last) = span.into_inner().unwrap_or_else(|e| e.into_inner());
    let setup_s = match (first, last) {
        (Some(f), Some(l)) => l.duration_since(f).as_secs_f64(),
        _ => 0.0,
    };
    let established = conns_now.len();
    say(&serde_json::json!({
        "n": a.n,
        "established": established,
        "failed": a.n - established,
        "retries": retries.into_inner(),
        "connectors": a.connectors,
        "trickle_ms": a.trickle.map(|d| d.as_millis() as u64),
        "setup_s": setup_s,
        "setup_per_s": if setup_s > 0.0 { established as f64 / setup_s } else { 0.0 },
        "errors": errors,
    }));

    std::thread::sleep(a.hold);
    stop.store(true, Ordering::Relaxed);
    if let Some(t) = trickler {
        let _ = t.join();
    }
    let conns = snapshot(&conns);
    let mut closed = BTreeMap::<String, usize>::new();
    for c in &conns {
        match c.state() {
            Ok(State::Closed(r)) => *closed.entry(r.to_string()).or_default() += 1,
            Ok(_) => {}
            Err(e) => *closed.entry(e.to_string()).or_default() += 1,
        }
    }
    let gone: usize = closed.values().sum();
    say(&serde_json::json!({
        "held_s": a.hold.as_secs_f64(),
        "alive": established - gone,
        "closed": gone,
        "closed_reasons": closed,
    }));

    // Close from the connector threads' number of threads at once: a graceful close waits for
    // the peer's answer.
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..a.connectors.min(conns.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(c) = conns.get(i) else { return };
                if matches!(c.state(), Ok(State::Connected)) {
                    let _ = c.close();
                }
            });
        }
    });
    drop(conns);
    drop(ep);
    Ok(())
}

/// Sends one byte on every connection every `every` until `stop`.
fn trickle(conns: &Mutex<Vec<Arc<Connection>>>, stop: &AtomicBool, every: Duration) {
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep((next - now).min(Duration::from_millis(20)));
            continue;
        }
        let list = conns.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for c in &list {
            if matches!(c.state(), Ok(State::Connected)) {
                let _ = c.send(&[0]);
            }
        }
        next += every;
    }
}

fn main() -> ExitCode {
    match parse().and_then(|a| run(&a)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("callers: {e}");
            ExitCode::FAILURE
        }
    }
}
