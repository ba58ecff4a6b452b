//! The results of `bench transfer`: one record per run (JSON lines), the median run per
//! (scenario, tool) cell, markdown tables per round-trip time, goodput-versus-loss charts per
//! round-trip time, and the goodput-over-time chart.

use super::super::table::{fmt_num, median_by};
use super::measure::goodput_series;
use super::path::Scenario;
use super::tools::Tool;
use crate::plot;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

/// What one run measured.
#[derive(Debug, Clone, Serialize)]
pub struct RunRecord {
    /// Scenario name.
    pub scenario: String,
    /// Tool name.
    pub tool: String,
    /// Which repetition (0-based).
    pub repeat: usize,
    /// Round-trip time of an emulated path, ms.
    pub rtt_ms: Option<u32>,
    /// Loss per direction of an emulated path, %.
    pub loss_pct: Option<f64>,
    /// Input size.
    pub size_bytes: u64,
    /// Bytes the receiver wrote (all of them only if `complete`).
    pub bytes_received: u64,
    /// Sender start to receiver exit (or to the time cap), seconds.
    pub seconds: f64,
    /// `bytes_received` over `seconds`.
    pub goodput_mbit_s: f64,
    /// Goodput over the emulated link rate.
    pub utilisation: Option<f64>,
    /// The receiver exited 0 and its output equals the input (size and BLAKE3).
    pub complete: bool,
    /// The run hit the time cap and was killed.
    pub capped: bool,
    /// Exit status of the receiver.
    pub receiver_exit: String,
    /// Exit status of the sender.
    pub sender_exit: String,
    /// User + system CPU seconds of the sender process.
    pub cpu_sender_s: f64,
    /// User + system CPU seconds of the receiver process.
    pub cpu_receiver_s: f64,
    /// Both, per GB (10^9 bytes) received.
    pub cpu_s_per_gb: Option<f64>,
    /// Retransmitted share of the packets (segments) sent.
    pub retrans_fraction: Option<f64>,
    /// Why `retrans_fraction` is missing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retrans_missing: Option<String>,
    /// Emulator CPU seconds during the run.
    pub emulator_cpu_s: Option<f64>,
    /// The emulator's counters during the run (per direction: read, lost, queue drops).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulator: Option<serde_json::Value>,
    /// What went wrong, if anything (a line of the failing peer's stderr).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Output size every 100 ms: (seconds since sender start, bytes); timeline scenario only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Vec<(f64, u64)>>,
}

/// One (scenario, tool) cell: the median run by goodput, and how many runs completed.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// The median run.
    pub median: RunRecord,
    /// Runs in the cell.
    pub runs: usize,
    /// Of which complete.
    pub complete_runs: usize,
}

/// Groups runs into cells, in the order given by `scenarios` and `tools`.
pub fn cells(runs: &[RunRecord], scenarios: &[Scenario], tools: &[Tool]) -> Vec<Cell> {
    let mut out = Vec::new();
    for s in scenarios {
        for t in tools {
            let these: Vec<RunRecord> = runs
                .iter()
                .filter(|r| r.scenario == s.name() && r.tool == t.name())
                .cloned()
                .collect();
            let (n, complete) = (these.len(), these.iter().filter(|r| r.complete).count());
            if let Some(median) = median_by(these, |r| r.goodput_mbit_s) {
                out.push(Cell {
                    median,
                    runs: n,
                    complete_runs: complete,
                });
            }
        }
    }
    out
}

/// slipstream's goodput over the best other tool's in the same scenario.
fn ratio_to_best_peer(cells: &[Cell], scenario: &str) -> Option<f64> {
    let here = cells.iter().filter(|c| c.median.scenario == scenario);
    let ours = here
        .clone()
        .find(|c| c.median.tool == Tool::Slipstream.name())?
        .median
        .goodput_mbit_s;
    let best = here
        .filter(|c| c.median.tool != Tool::Slipstream.name())
        .map(|c| c.median.goodput_mbit_s)
        .fold(None, |m: Option<f64>, g| Some(m.map_or(g, |m| m.max(g))))?;
    (best > 0.0).then(|| ours / best)
}

/// Title of a group of scenarios (loopback, or one round-trip time).
fn group_title(rtt: Option<u32>) -> String {
    match rtt {
        None => "Loopback".into(),
        Some(r) => format!("Emulated 1 Gbit/s, RTT {r} ms"),
    }
}

/// The markdown report: `header` (command, date, versions, method), a table per group of
/// scenarios, and `notes`.
pub fn markdown(header: &str, cells: &[Cell], notes: &[String]) -> String {
    let mut out = format!("# File transfer: slipstream, kernel TCP, libsrt and UDT\n\n{header}\n");
    let mut groups: Vec<Option<u32>> = Vec::new();
    for c in cells {
        if !groups.contains(&c.median.rtt_ms) {
            groups.push(c.median.rtt_ms);
        }
    }
    for g in groups {
        let emulated = g.is_some();
        out.push_str(&format!("\n## {}\n\n", group_title(g)));
        out.push_str(
            "| scenario | tool | goodput, Mbit/s | utilisation | CPU s/GB | retransmitted | \
             complete | slipstream ÷ best peer |",
        );
        if emulated {
            out.push_str(" emulator CPU s |");
        }
        out.push_str("\n|---|---|---:|---:|---:|---:|---|---:|");
        if emulated {
            out.push_str("---:|");
        }
        out.push('\n');
        for c in cells.iter().filter(|c| c.median.rtt_ms == g) {
            let r = &c.median;
            let goodput = if r.complete {
                fmt_num(r.goodput_mbit_s)
            } else {
                format!("{}*", fmt_num(r.goodput_mbit_s))
            };
            let util = r
                .utilisation
                .map_or("–".into(), |u| format!("{:.1} %", u * 100.0));
            let cpu = r.cpu_s_per_gb.map_or("–".into(), |v| {
                if r.complete {
                    fmt_num(v)
                } else {
                    format!("{}*", fmt_num(v))
                }
            });
            let retx = r.retrans_fraction.map_or("–".into(), percent);
            let complete = if c.runs == 1 {
                if r.complete { "yes" } else { "**no**" }.to_string()
            } else if c.complete_runs == c.runs {
                format!("{}/{}", c.complete_runs, c.runs)
            } else {
                format!("**{}/{}**", c.complete_runs, c.runs)
            };
            let ratio = if r.tool == Tool::Slipstream.name() {
                ratio_to_best_peer(cells, &r.scenario).map_or("–".into(), |v| format!("{v:.2}×"))
            } else {
                String::new()
            };
            out.push_str(&format!(
                "| {} | {} | {goodput} | {util} | {cpu} | {retx} | {complete} | {ratio} |",
                r.scenario, r.tool
            ));
            if emulated {
                let emu = r.emulator_cpu_s.map_or("–".into(), fmt_num);
                out.push_str(&format!(" {emu} |"));
            }
            out.push('\n');
        }
    }
    let mut all: Vec<String> = notes.to_vec();
    all.extend(cell_notes(cells));
    if !all.is_empty() {
        out.push_str("\n## Notes\n\n");
        for n in all {
            out.push_str(&format!("- {n}\n"));
        }
    }
    out
}

/// Footnotes of the table rows: why a run is incomplete, why a count is missing.
fn cell_notes(cells: &[Cell]) -> Vec<String> {
    let mut out = Vec::new();
    for c in cells {
        let r = &c.median;
        if !r.complete {
            out.push(format!(
                "{} {}: incomplete, {} of {} bytes in {:.1} s ({}).",
                r.scenario,
                r.tool,
                r.bytes_received,
                r.size_bytes,
                r.seconds,
                r.error.as_deref().unwrap_or("no reason recorded")
            ));
        }
        if let Some(why) = &r.retrans_missing {
            out.push(format!(
                "{} {}: no retransmission count ({why}).",
                r.scenario, r.tool
            ));
        }
    }
    out
}

/// A fraction as a percentage with about three significant digits ("0 %" for none).
fn percent(f: f64) -> String {
    if f == 0.0 {
        "0 %".into()
    } else {
        format!("{} %", fmt_num(f * 100.0))
    }
}

/// Loss as drawn on the log x axis of the per-RTT charts: 0 % is drawn at this value.
pub const ZERO_LOSS_X: f64 = 0.01;

/// One chart per round-trip time: median goodput against loss, a line per tool, into
/// `dir/transfer-rtt<R>.svg`. Returns the files written.
pub fn write_loss_charts(
    dir: &Path,
    cells: &[Cell],
    tools: &[Tool],
) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut by_rtt: BTreeMap<u32, Vec<&Cell>> = BTreeMap::new();
    for c in cells {
        if let Some(r) = c.median.rtt_ms {
            by_rtt.entry(r).or_default().push(c);
        }
    }
    let mut written = Vec::new();
    for (rtt, cs) in by_rtt {
        let series: Vec<plot::Series> = tools
            .iter()
            .map(|t| {
                let mut pts: Vec<(f64, f64)> = cs
                    .iter()
                    .filter(|c| c.median.tool == t.name())
                    .filter_map(|c| {
                        let loss = c.median.loss_pct?;
                        let x = if loss > 0.0 { loss } else { ZERO_LOSS_X };
                        Some((x, c.median.goodput_mbit_s))
                    })
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                (t.name().to_string(), pts)
            })
            .collect();
        let path = dir.join(format!("transfer-rtt{rtt}.svg"));
        plot::line_chart(
            &path,
            &format!("File transfer goodput, 1 Gbit/s link, RTT {rtt} ms"),
            &format!("random loss per direction, % (log scale; 0 % drawn at {ZERO_LOSS_X})"),
            "goodput, Mbit/s",
            true,
            &series,
        )?;
        written.push(path);
    }
    Ok(written)
}

/// Goodput over time (0.5 s windows of the output's growth) of each tool's median run in
/// `scenario`, into `path`.
pub fn write_timeline(path: &Path, scenario: &str, cells: &[Cell]) -> std::io::Result<bool> {
    let series: Vec<plot::Series> = cells
        .iter()
        .filter(|c| c.median.scenario == scenario)
        .filter_map(|c| {
            let samples = c.median.timeline.as_ref()?;
            Some((c.median.tool.clone(), goodput_series(samples, 0.5)))
        })
        .collect();
    if series.is_empty() {
        return Ok(false);
    }
    plot::line_chart(
        path,
        &format!("Goodput over time, {scenario} (0.5 s windows)"),
        "seconds since the sender started",
        "goodput, Mbit/s",
        false,
        &series,
    )?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(scenario: &str, tool: &str, goodput: f64, complete: bool) -> RunRecord {
        let s = Scenario::parse(scenario).unwrap();
        RunRecord {
            scenario: scenario.into(),
            tool: tool.into(),
            repeat: 0,
            rtt_ms: s.rtt_ms(),
            loss_pct: s.loss_pct(),
            size_bytes: 1000,
            bytes_received: 1000,
            seconds: 1.0,
            goodput_mbit_s: goodput,
            utilisation: s.rate_bps().map(|r| goodput * 1e6 / r),
            complete,
            capped: !complete,
            receiver_exit: "exit status: 0".into(),
            sender_exit: "exit status: 0".into(),
            cpu_sender_s: 0.5,
            cpu_receiver_s: 0.5,
            cpu_s_per_gb: Some(2.0),
            retrans_fraction: Some(0.0123),
            retrans_missing: None,
            emulator_cpu_s: s.is_emulated().then_some(1.25),
            emulator: None,
            error: None,
            timeline: Some(vec![(0.0, 0), (0.1, 1_000_000), (0.2, 2_000_000)]),
        }
    }

    #[test]
    fn tables_and_ratios() {
        let runs = vec![
            run("loopback", "slipstream", 9000.0, true),
            run("loopback", "tcp-cubic", 12000.0, true),
            run("rtt50-loss1", "slipstream", 600.0, true),
            run("rtt50-loss1", "slipstream", 500.0, true),
            run("rtt50-loss1", "slipstream", 700.0, false),
            run("rtt50-loss1", "srt", 300.0, false),
        ];
        let scen = [Scenario::Loopback, Scenario::parse("rtt50-loss1").unwrap()];
        let c = cells(&runs, &scen, &Tool::ALL);
        assert_eq!(c.len(), 4);
        assert_eq!(c[2].median.goodput_mbit_s, 600.0);
        assert_eq!((c[2].runs, c[2].complete_runs), (3, 2));
        let md = markdown("hdr", &c, &["a note".into()]);
        assert!(md.contains("\n## Loopback\n"), "{md}");
        assert!(md.contains("\n## Emulated 1 Gbit/s, RTT 50 ms\n"), "{md}");
        assert!(
            md.contains("| loopback | slipstream | 9000 | – | 2.00 | 1.23 % | yes | 0.75× |\n"),
            "{md}"
        );
        assert!(md.contains("| loopback | tcp-cubic | 12000 | – |"), "{md}");
        assert!(
            md.contains("| rtt50-loss1 | slipstream | 600 | 60.0 % | 2.00 | 1.23 % | **2/3** | 2.00× | 1.25 |\n"),
            "{md}"
        );
        assert!(md.contains("| rtt50-loss1 | srt | 300* |"), "{md}");
        assert!(
            md.contains("- rtt50-loss1 srt: incomplete, 1000 of 1000 bytes in 1.0 s (no reason"),
            "{md}"
        );
        assert!(md.contains("- a note\n"));
    }

    #[test]
    fn charts() {
        let dir = std::env::temp_dir().join(format!("slipstream-bt-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let runs = vec![
            run("rtt10-loss0", "slipstream", 900.0, true),
            run("rtt10-loss1", "slipstream", 800.0, true),
            run("rtt10-loss1", "tcp-bbr", 700.0, true),
            run("loopback", "slipstream", 9000.0, true),
        ];
        let scen: Vec<Scenario> = ["loopback", "rtt10-loss0", "rtt10-loss1"]
            .iter()
            .map(|s| Scenario::parse(s).unwrap())
            .collect();
        let c = cells(&runs, &scen, &Tool::ALL);
        let files = write_loss_charts(&dir, &c, &Tool::ALL).unwrap();
        assert_eq!(files, vec![dir.join("transfer-rtt10.svg")]);
        let svg = std::fs::read_to_string(&files[0]).unwrap();
        assert!(svg.contains("tcp-bbr") && svg.contains("RTT 10 ms"));
        let t = dir.join("transfer-timeline.svg");
        assert!(write_timeline(&t, "rtt10-loss1", &c).unwrap());
        assert!(std::fs::read_to_string(&t).unwrap().contains("slipstream"));
        assert!(!write_timeline(&t, "rtt99-loss0", &c).unwrap());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
