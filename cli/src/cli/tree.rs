//! `slipstream send DIR` and what `recv` says of a tree it received.

use super::uri::Uri;
use super::{
    gbps, interrupted, interruptible, open_sender, progress_bar, CliResult, Common, StatsJson,
};
use slipstream::api::Endpoint;
use slipstream::tree::{self, TreeReport};
use slipstream_proto::cc::CcRegistry;
use slipstream_proto::conn::ConnStats;
use std::path::Path;
use std::time::Instant;

/// Entries listed by name in a report before "and N more".
const LISTED: usize = 10;

fn list(what: &str, items: &[(String, String)]) {
    for (p, why) in items.iter().take(LISTED) {
        eprintln!("{what} {p}: {why}");
    }
    if items.len() > LISTED {
        eprintln!("{what} ... and {} more", items.len() - LISTED);
    }
}

fn json(t: &TreeReport, role: &str, secs: f64, conn: Option<ConnStats>) -> serde_json::Value {
    let pairs = |v: &[(String, String)]| {
        v.iter()
            .map(|(p, why)| serde_json::json!({"path": p, "why": why}))
            .collect::<Vec<_>>()
    };
    serde_json::json!({
        "role": role,
        "tree": true,
        "files": t.files,
        "dirs": t.dirs,
        "bytes": t.bytes,
        "bytes_sent": t.bytes_sent,
        "identical_not_sent": t.identical,
        "resumed_files": t.resumed,
        "resumed_bytes": t.resumed_bytes,
        "seconds": secs,
        "gbit_per_s": gbps(t.bytes_sent, secs),
        "not_sent": pairs(&t.not_sent),
        "failed": pairs(&t.failed),
        "connection": conn,
    })
}

fn summary(role: &str, t: &TreeReport, secs: f64) {
    eprintln!(
        "{role} {} files ({} bytes) in {} directories: {} bytes carried in {:.2} s \
         ({:.3} Gbit/s, {:.0} files/s); {} identical already there, {} resumed ({} bytes kept)",
        t.files,
        t.bytes,
        t.dirs,
        t.bytes_sent,
        secs,
        gbps(t.bytes_sent, secs),
        t.files as f64 / secs.max(1e-9),
        t.identical,
        t.resumed,
        t.resumed_bytes
    );
}

/// Sends the directory `dir`: walked before connecting, then one connection for it all.
pub(super) fn send(
    dir: &Path,
    uri: &Uri,
    max_rate: Option<u64>,
    common: &Common,
    registry: &CcRegistry,
) -> CliResult {
    let t = tree::scan_tree(dir).map_err(|e| e.to_string())?;
    let stats_json = StatsJson::open(common.stats_json.as_deref())?;
    list("not sent:", &t.report().not_sent);
    let (ep, conn) = open_sender(dir, uri, max_rate, common, registry)?;
    let pb = progress_bar(common, Some(t.report().bytes));
    let t0 = Instant::now();
    let result = interruptible(&conn, || tree::send_tree(&conn, &t, |n| pb.set_position(n)));
    let secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let stats = conn.stats().ok();
    match result {
        Ok(r) => {
            summary("sent", &r, secs);
            eprintln!(
                "integrity: the receiver verified every file (XXH3-128) and committed the tree"
            );
            stats_json.write(&json(&r, "sent", secs, stats));
            let _ = ep;
            Ok(())
        }
        Err(e) => {
            if let Some(why) = interrupted("send") {
                return Err(format!(
                    "{why}; the receiver keeps the files it has, and the same command sends \
                     only the rest"
                ));
            }
            Err(format!("send failed: {e}"))
        }
    }
}

/// Reports a tree received at `root`: exit 0 only when every file was committed.
pub(super) fn received(
    root: &Path,
    t: &TreeReport,
    secs: f64,
    stats: Option<ConnStats>,
    stats_json: &StatsJson,
    _ep: &Endpoint,
) -> CliResult {
    summary("received", t, secs);
    stats_json.write(&json(t, "received", secs, stats));
    if let Some(why) = t.failure() {
        list("failed:", &t.failed);
        return Err(format!(
            "{} is incomplete: {why}; the same command again resumes",
            root.display()
        ));
    }
    eprintln!(
        "wrote {} (every file verified, XXH3-128, and synced)",
        root.display()
    );
    Ok(())
}
