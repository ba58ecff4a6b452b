//! `slipstream recv --serve srt://:PORT DIR`: a receiver that keeps accepting transfers,
//! several at once, each file or tree into DIR under the sender's stream id, until SIGINT or
//! SIGTERM. Stopping aborts what is running (each sender is told at once; every part file
//! stays for the same send to resume) and exits 0. Each finished transfer prints a line,
//! or a JSON object per line on stdout with `--json`.

use super::{file_name_from_stream_id, gbps, hex, CliResult};
use slipstream::api::{Connection, Endpoint};
use slipstream::transfer::{self, Received, Verdict};
use slipstream::verdict;
use std::collections::HashSet;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Transfers received at once; a sender beyond them is refused with a reason.
pub(super) const MAX_CONCURRENT: usize = 64;
/// How often the accept loop looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);

/// What the server counts.
#[derive(Debug, Default)]
struct Counts {
    ok: AtomicU64,
    failed: AtomicU64,
    refused: AtomicU64,
}

/// One transfer's outcome, as a line or as JSON.
fn report(json: bool, peer: &str, name: &str, secs: f64, r: &io::Result<Received>) {
    let (ok, what, bytes, extra) = match r {
        Ok(Received::File(v)) => {
            let resumed = match v {
                Verdict::Verified { resumed_from, .. } => *resumed_from,
                Verdict::Unverified { .. } => 0,
            };
            let integrity = match v {
                Verdict::Verified { digest, .. } => format!("verified, XXH3-128 {}", hex(digest)),
                Verdict::Unverified { .. } => "UNVERIFIED (the peer offers no digest)".into(),
            };
            (
                true,
                "file".to_string(),
                v.bytes() - resumed,
                format!("{integrity}; {resumed} bytes resumed"),
            )
        }
        Ok(Received::Tree(t)) => (
            t.failure().is_none(),
            "tree".to_string(),
            t.bytes_sent,
            match t.failure() {
                Some(why) => why,
                None => format!(
                    "{} files, {} identical, {} resumed",
                    t.files, t.identical, t.resumed
                ),
            },
        ),
        Err(e) => (false, "transfer".to_string(), 0, e.to_string()),
    };
    if json {
        let v = serde_json::json!({
            "peer": peer,
            "name": name,
            "kind": what,
            "ok": ok,
            "bytes": bytes,
            "seconds": secs,
            "gbit_per_s": gbps(bytes, secs),
            "detail": extra,
        });
        let mut out = io::stdout().lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    } else {
        eprintln!(
            "{} {what} {name} from {peer}: {bytes} bytes in {secs:.2} s ({:.3} Gbit/s); {extra}",
            if ok { "received" } else { "FAILED" },
            gbps(bytes, secs)
        );
    }
}

/// Serves on `ep` (listening) into `dir` until SIGINT/SIGTERM.
pub(super) fn run(ep: &Endpoint, dir: &Path, force: bool, json: bool) -> CliResult {
    if let Err(e) = slipstream::signal::install_stop_handler() {
        return Err(format!("--serve needs a SIGINT/SIGTERM handler: {e}"));
    }
    eprintln!(
        "serving on {} into {}; SIGINT or SIGTERM stops",
        ep.local_addr(),
        dir.display()
    );
    let running: Arc<Mutex<Vec<Arc<Connection>>>> = Arc::default();
    // Names being received: a second sender of the same name would write the same part.
    let names: Arc<Mutex<HashSet<String>>> = Arc::default();
    let counts = Arc::new(Counts::default());
    let mut threads = Vec::new();
    while !slipstream::signal::stop_requested() {
        let conn = match ep.accept_timeout(POLL) {
            Ok(c) => Arc::new(c),
            Err(e) if e.kind() == io::ErrorKind::TimedOut => continue,
            Err(e) => return Err(format!("accepting: {e}")),
        };
        threads.retain(|t: &std::thread::JoinHandle<()>| !t.is_finished());
        let peer = conn.peer_addr().to_string();
        let name = conn
            .stream_id_str()
            .ok_or_else(|| "the sender gave no stream id (its name here)".to_string())
            .and_then(|sid| file_name_from_stream_id(&sid));
        let refuse = |why: String| {
            counts.refused.fetch_add(1, Ordering::Relaxed);
            report(json, &peer, "-", 0.0, &Err(io::Error::other(why.clone())));
            verdict::send_verdict(&conn, Err(&why));
        };
        let name = match name {
            Ok(n) => n,
            Err(why) => {
                refuse(why);
                continue;
            }
        };
        if threads.len() >= MAX_CONCURRENT {
            refuse(format!(
                "the receiver is busy ({MAX_CONCURRENT} transfers running); try again later"
            ));
            continue;
        }
        if !lock(&names).insert(name.clone()) {
            refuse(format!("a transfer of {name} is running already"));
            continue;
        }
        lock(&running).push(conn.clone());
        let (dir, names, running, counts) = (
            dir.to_path_buf(),
            names.clone(),
            running.clone(),
            counts.clone(),
        );
        threads.push(std::thread::spawn(move || {
            let t0 = Instant::now();
            let r = transfer::recv_into(&conn, &dir, &name, force, |_| {});
            let secs = t0.elapsed().as_secs_f64();
            let ok = matches!(&r, Ok(Received::File(_)))
                || matches!(&r, Ok(Received::Tree(t)) if t.failure().is_none());
            let c = if ok { &counts.ok } else { &counts.failed };
            c.fetch_add(1, Ordering::Relaxed);
            report(json, &peer, &name, secs, &r);
            lock(&names).remove(&name);
            lock(&running).retain(|c| !Arc::ptr_eq(c, &conn));
        }));
    }
    ep.stop_listening();
    let sig = slipstream::signal::stop_signal().unwrap_or("a signal");
    let cut = lock(&running).len();
    for c in lock(&running).iter() {
        c.abort();
    }
    for t in threads {
        let _ = t.join();
    }
    eprintln!(
        "stopped by {sig}: {} received, {} failed ({cut} of them cut short by the stop: \
         their part files stay, and the same sends resume them), {} refused",
        counts.ok.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed),
        counts.refused.load(Ordering::Relaxed),
    );
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `recv --serve` needs a directory that exists and a listener URI.
pub(super) fn check(out: &Path, listener: bool) -> Result<PathBuf, String> {
    if !listener {
        return Err("--serve listens: give srt://:PORT".into());
    }
    if !out.is_dir() {
        return Err(format!(
            "--serve receives into a directory; {} is not one",
            out.display()
        ));
    }
    Ok(out.to_path_buf())
}
