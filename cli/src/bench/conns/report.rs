//! The figures of one `bench conns` run, from what its two children said: the JSON object and
//! the human-readable summary.

use super::ipc::{Accepted, Connected, Measured, Ready, Sample, Stopped};
use super::{ConnsArgs, Pattern};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// The run's resolved settings.
#[derive(Debug)]
pub struct Plan {
    /// Measured window (load, or idle for `idle`), seconds.
    pub secs: f64,
    /// Idle window, seconds.
    pub idle: f64,
    /// Connector threads of the client.
    pub connectors: usize,
    /// Poller threads per side (0: a thread per connection).
    pub workers: usize,
}

/// What the children reported, in order.
#[derive(Debug)]
pub struct Seen {
    pub server_ready: Ready,
    pub client_ready: Ready,
    pub connected: Connected,
    pub accepted: Accepted,
    /// After settling, after the idle window, at the end.
    pub server: [Sample; 3],
    pub client: [Sample; 3],
    pub load: Option<(Measured, Stopped)>,
}

/// The result of one run (the JSON object). Load figures are null for `idle`.
#[derive(Debug, Serialize)]
pub struct Report {
    n: usize,
    pattern: &'static str,
    /// I/O threads per endpoint (`EndpointOptions::set_threads`).
    threads: usize,
    /// Load threads per side serving the connections through pollers; 0: a thread per
    /// connection.
    workers: usize,
    connectors: usize,
    datapath: String,
    /// Bulk streams copied in and out (--copy) rather than zero-copy.
    copy: bool,
    /// The congestion controller asked for (null: the library's default for the mode).
    cc: Option<String>,
    /// The packet size asked for (null: the path's, 64 KiB over loopback for bulk, 1500
    /// for messages).
    mss: Option<u32>,
    /// The measured window: the load (bulk, messages) or the idle window (idle), seconds.
    secs: f64,
    idle_secs: f64,
    warmup_s: Option<f64>,
    /// Message bytes (messages).
    size: Option<usize>,
    /// Messages a sender queues per wake-up of its I/O thread (messages).
    msg_batch: Option<u64>,
    /// Connections the client established, the server accepted, and connect calls failed.
    established: usize,
    accepted: usize,
    connect_failed: usize,
    /// First connect call's start to the last one's return, in the client.
    setup_s: f64,
    setup_per_s: f64,
    setup_measured: &'static str,
    /// Accepted connections over the first connect call's start to the last accept.
    setup_per_s_server: Option<f64>,
    /// VmRSS growth from the bound endpoint to after the settle, per connection accepted
    /// (established, for the client), KiB.
    rss_per_conn_kib: f64,
    rss_per_conn_kib_client: f64,
    /// VmRSS after the settle, MiB, and once the endpoint was bound.
    server_rss_mib: f64,
    client_rss_mib: f64,
    server_rss_base_mib: f64,
    client_rss_base_mib: f64,
    /// CPU over the idle window, percent of one core.
    idle_cpu_pct: f64,
    idle_cpu_pct_client: f64,
    /// Bytes received by the server in the measured window, all connections, Gbit/s.
    aggregate_gbit_per_s: Option<f64>,
    /// Messages received by the server per second (messages).
    msgs_per_s: Option<f64>,
    /// Jain's index over the N connections' bytes (bulk) or messages (messages) in the
    /// window; a connection that never connected or was lost counts as 0.
    jain: Option<f64>,
    per_conn_min: Option<u64>,
    per_conn_max: Option<u64>,
    /// Connections that received nothing in the window.
    starved: Option<usize>,
    /// Bytes the client queued from the start of the load to its stop (warm-up included).
    sent_gbit_per_s: Option<f64>,
    sent_msgs_per_s: Option<f64>,
    /// CPU during the load, percent of one core: the server's over the window, the client's
    /// from start to stop.
    server_cpu_pct: Option<f64>,
    client_cpu_pct: Option<f64>,
    server_rss_mib_load: Option<f64>,
    client_rss_mib_load: Option<f64>,
    /// Connections that ended during the run (failed connects included), each once.
    connections_lost: usize,
    lost_server: usize,
    lost_client: usize,
    /// "side: why" and how many connections.
    lost_reasons: BTreeMap<String, usize>,
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn per_conn(after: u64, before: u64, conns: usize) -> f64 {
    (after as f64 - before as f64) / conns.max(1) as f64
}

fn cpu_pct(a: &Sample, b: &Sample) -> f64 {
    let dt = b.t_s - a.t_s;
    if dt > 0.0 {
        (b.cpu_s - a.cpu_s) / dt * 100.0
    } else {
        0.0
    }
}

/// Jain's fairness index, (Σx)²/(n·Σx²); none when nothing moved at all.
pub fn jain(x: &[u64]) -> Option<f64> {
    let sum: f64 = x.iter().map(|&v| v as f64).sum();
    let sq: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    (sq > 0.0).then(|| sum * sum / (x.len() as f64 * sq))
}

impl Report {
    /// The figures of a run.
    pub fn new(a: &ConnsArgs, plan: &Plan, seen: &Seen) -> Report {
        let (c, acc) = (&seen.connected, &seen.accepted);
        let (s1, s2, s3) = (&seen.server[0], &seen.server[1], &seen.server[2]);
        let (c1, c2, c3) = (&seen.client[0], &seen.client[1], &seen.client[2]);
        let setup_s = (c.last_return_s - c.first_start_s).max(0.0);
        let rate = |k: usize, s: f64| if s > 0.0 { k as f64 / s } else { 0.0 };

        let mut lost_reasons = BTreeMap::new();
        let mut ids = BTreeSet::new();
        for (side, sample) in [("server", s3), ("client", c3)] {
            for (id, why) in &sample.lost {
                ids.insert(*id);
                *lost_reasons.entry(format!("{side}: {why}")).or_insert(0) += 1;
            }
        }
        let not_accepted = c.ok.saturating_sub(acc.accepted);
        if not_accepted > 0 {
            lost_reasons.insert("server: never accepted".into(), not_accepted);
        }

        let mut r = Report {
            n: a.n,
            pattern: a.pattern.name(),
            threads: a.threads,
            workers: plan.workers,
            connectors: plan.connectors,
            datapath: seen.server_ready.datapath.clone(),
            cc: a.cc.clone(),
            mss: a.mss,
            copy: a.copy,
            secs: plan.secs,
            idle_secs: plan.idle,
            warmup_s: None,
            size: (a.pattern == Pattern::Messages).then_some(a.size),
            msg_batch: (a.pattern == Pattern::Messages).then_some(super::peer::MSG_BATCH),
            established: c.ok,
            accepted: acc.accepted,
            connect_failed: c.failed,
            setup_s,
            setup_per_s: rate(c.ok, setup_s),
            setup_measured: "client: first connect start to last connect return",
            setup_per_s_server: acc.last_s.map(|l| rate(acc.accepted, l - c.first_start_s)),
            rss_per_conn_kib: per_conn(s1.rss_kib, seen.server_ready.rss_kib_bound, acc.accepted),
            rss_per_conn_kib_client: per_conn(c1.rss_kib, seen.client_ready.rss_kib_bound, c.ok),
            server_rss_mib: mib(s1.rss_kib),
            client_rss_mib: mib(c1.rss_kib),
            server_rss_base_mib: mib(seen.server_ready.rss_kib_bound),
            client_rss_base_mib: mib(seen.client_ready.rss_kib_bound),
            idle_cpu_pct: cpu_pct(s1, s2),
            idle_cpu_pct_client: cpu_pct(c1, c2),
            aggregate_gbit_per_s: None,
            msgs_per_s: None,
            jain: None,
            per_conn_min: None,
            per_conn_max: None,
            starved: None,
            sent_gbit_per_s: None,
            sent_msgs_per_s: None,
            server_cpu_pct: None,
            client_cpu_pct: None,
            server_rss_mib_load: None,
            client_rss_mib_load: None,
            connections_lost: ids.len() + not_accepted,
            lost_server: s3.lost.len(),
            lost_client: c3.lost.len(),
            lost_reasons,
        };
        if let Some((m, st)) = &seen.load {
            let x = if a.pattern == Pattern::Messages {
                &m.msgs
            } else {
                &m.bytes
            };
            let secs = m.secs.max(1e-9);
            let bytes: u64 = m.bytes.iter().sum();
            r.warmup_s = Some(a.warmup);
            r.secs = m.secs;
            r.aggregate_gbit_per_s = Some(bytes as f64 * 8.0 / secs / 1e9);
            r.msgs_per_s =
                (a.pattern == Pattern::Messages).then(|| m.msgs.iter().sum::<u64>() as f64 / secs);
            r.jain = jain(x);
            r.per_conn_min = x.iter().min().copied();
            r.per_conn_max = x.iter().max().copied();
            r.starved = Some(x.iter().filter(|&&v| v == 0).count());
            let sent_secs = st.secs.max(1e-9);
            r.sent_gbit_per_s = Some(st.bytes as f64 * 8.0 / sent_secs / 1e9);
            r.sent_msgs_per_s =
                (a.pattern == Pattern::Messages).then(|| st.msgs as f64 / sent_secs);
            r.server_cpu_pct = Some(m.cpu_s / secs * 100.0);
            r.client_cpu_pct = Some(st.cpu_s / sent_secs * 100.0);
            r.server_rss_mib_load = Some(mib(m.rss_kib));
            r.client_rss_mib_load = Some(mib(st.rss_kib));
        }
        r
    }

    /// A few lines for people.
    pub fn human(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "bench conns: {} {} connections, two processes over loopback (datapath {}, {} I/O \
             thread(s) each)",
            self.n, self.pattern, self.datapath, self.threads,
        );
        let _ = writeln!(
            s,
            "  set-up    {} of {} in {:.3} s: {:.0}/s (client side, connector threads: {}){}",
            self.established,
            self.n,
            self.setup_s,
            self.setup_per_s,
            self.connectors,
            self.setup_per_s_server
                .map(|v| format!("; to the server's last accept: {v:.0}/s"))
                .unwrap_or_default()
        );
        let _ = writeln!(
            s,
            "  memory    server {:.0} KiB/conn ({:.1} MiB in all, {:.1} bound), client {:.0} \
             KiB/conn ({:.1} MiB, {:.1} bound)",
            self.rss_per_conn_kib,
            self.server_rss_mib,
            self.server_rss_base_mib,
            self.rss_per_conn_kib_client,
            self.client_rss_mib,
            self.client_rss_base_mib
        );
        let _ = writeln!(
            s,
            "  idle CPU  server {:.2} % of a core, client {:.2} % (over {} s)",
            self.idle_cpu_pct, self.idle_cpu_pct_client, self.idle_secs
        );
        if let Some(g) = self.aggregate_gbit_per_s {
            let j = self.jain.map_or("n/a".into(), |j| format!("{j:.3}"));
            let unit = if self.msgs_per_s.is_some() {
                "msgs"
            } else {
                "bytes"
            };
            let _ = writeln!(
                s,
                "  load      {:.3} Gbit/s received in all{}, Jain {j}, {unit} per connection \
                 {}..{}, {} starved; CPU server {:.0} %, client {:.0} % (over {:.1} s)",
                g,
                self.msgs_per_s
                    .map(|m| format!(" ({m:.0} msgs/s)"))
                    .unwrap_or_default(),
                self.per_conn_min.unwrap_or(0),
                self.per_conn_max.unwrap_or(0),
                self.starved.unwrap_or(0),
                self.server_cpu_pct.unwrap_or(0.0),
                self.client_cpu_pct.unwrap_or(0.0),
                self.secs
            );
        }
        let _ = write!(s, "  lost      {}", self.connections_lost);
        for (why, k) in &self.lost_reasons {
            let _ = write!(s, "\n    {k} × {why}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::jain;

    #[test]
    fn jain_index() {
        assert_eq!(jain(&[5, 5, 5, 5]), Some(1.0));
        assert!((jain(&[1, 0, 0, 0]).unwrap() - 0.25).abs() < 1e-12);
        assert_eq!(jain(&[0, 0]), None);
    }
}
