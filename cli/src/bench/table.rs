//! The datagram matrix (payload sizes × datapaths, per path), after the paper's Table 3 and
//! Fig. 8: every cell repeated and its median run kept, written as markdown tables, JSON lines
//! of every run, and throughput-versus-size charts.

use super::dgram::{self, CellConfig, CellResult, PathEnv};
use super::netns;
use crate::plot;
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Default payload sizes: the paper's 32 B .. 8 KB, plus 1472 (one Ethernet frame), 16 KB and
/// the largest UDP payload.
pub const DEFAULT_SIZES: &[usize] = &[
    32, 64, 128, 256, 512, 1024, 1472, 2048, 3072, 4096, 5120, 6144, 7168, 8192, 16384, 65507,
];
/// Default datapaths, in column order.
pub const DEFAULT_DATAPATHS: &[&str] = &[
    "plain", "mmsg", "gso", "uring", "uring-zc", "msg-zc", "async",
];
/// The baseline of ratios (the paper's experiment A).
pub const BASELINE: &str = "plain";
/// Sizes of the ratio rows.
pub const RATIO_SIZES: &[usize] = &[64, 1472];

/// What the matrix covers.
#[derive(Debug, Clone)]
pub struct TableConfig {
    pub sizes: Vec<usize>,
    pub datapaths: Vec<String>,
    pub repeat: usize,
    pub seconds: f64,
    pub warmup: f64,
    /// "loopback" and/or "veth".
    pub paths: Vec<String>,
    /// Whether the paths were asked for (else veth is skipped with a note when not root).
    pub paths_explicit: bool,
    pub mtu: u32,
    pub out_dir: PathBuf,
}

/// Checks the matrix parameters.
pub fn validate(cfg: &TableConfig) -> Result<(), String> {
    if cfg.sizes.is_empty() || cfg.datapaths.is_empty() || cfg.paths.is_empty() {
        return Err("--sizes, --datapaths and --paths must not be empty".into());
    }
    for &size in &cfg.sizes {
        dgram::validate(&CellConfig {
            datapath: "x".into(),
            size,
            seconds: cfg.seconds,
            warmup: cfg.warmup,
        })?;
    }
    if !(1..=99).contains(&cfg.repeat) {
        return Err(format!("--repeat {}: must be within 1..=99", cfg.repeat));
    }
    for p in &cfg.paths {
        if p != "loopback" && p != "veth" {
            return Err(format!("--paths: unknown path '{p}' (loopback, veth)"));
        }
    }
    if let Some(d) = cfg.datapaths.iter().find(|d| d.is_empty()) {
        return Err(format!("--datapaths: empty name in '{d}'"));
    }
    Ok(())
}

/// Runs the matrix on every path and writes DIR/dgram-<path>.{md,jsonl,svg}.
pub fn run(cfg: &TableConfig) -> Result<(), String> {
    validate(cfg)?;
    std::fs::create_dir_all(&cfg.out_dir).map_err(|e| format!("{}: {e}", cfg.out_dir.display()))?;
    for path in &cfg.paths {
        let pair = if path == "veth" {
            if !netns::is_root() && !cfg.paths_explicit {
                eprintln!("note: skipping the veth path (needs root)");
                continue;
            }
            Some(netns::VethPair::create(cfg.mtu)?)
        } else {
            None
        };
        let env = pair.as_ref().map_or_else(PathEnv::loopback, PathEnv::veth);
        run_path(cfg, &env)?;
    }
    Ok(())
}

/// The matrix on one path. Sizes are the outer loop so that all datapaths of one size run
/// close together in time (this machine is shared and noisy).
fn run_path(cfg: &TableConfig, env: &PathEnv) -> Result<(), String> {
    let stem = cfg.out_dir.join(format!("dgram-{}", env.name));
    let jsonl_path = stem.with_extension("jsonl");
    let mut jsonl =
        std::fs::File::create(&jsonl_path).map_err(|e| format!("{}: {e}", jsonl_path.display()))?;
    let mut medians: Vec<CellResult> = Vec::new();
    let mut skipped: BTreeMap<String, String> = BTreeMap::new();
    let mut worked: HashSet<String> = HashSet::new();
    let mut notes: Vec<String> = Vec::new();
    let total = cfg.sizes.len() * cfg.datapaths.len() * cfg.repeat;
    let mut done = 0;
    for &size in &cfg.sizes {
        for dp in &cfg.datapaths {
            if skipped.contains_key(dp) {
                done += cfg.repeat;
                continue;
            }
            let cell = CellConfig {
                datapath: dp.clone(),
                size,
                seconds: cfg.seconds,
                warmup: cfg.warmup,
            };
            let mut runs = Vec::new();
            for k in 0..cfg.repeat {
                done += 1;
                match dgram::run_cell(&cell, env) {
                    Ok(r) => {
                        eprintln!(
                            "[{done}/{total}] {} {dp} {size} B run {}/{}: {:.3} Gbit/s, {:.3} Mpps",
                            env.name,
                            k + 1,
                            cfg.repeat,
                            r.gbit_per_s,
                            r.packets_per_s / 1e6
                        );
                        let mut v = serde_json::to_value(&r).map_err(|e| e.to_string())?;
                        v["repeat"] = serde_json::json!(k);
                        writeln!(jsonl, "{v}")
                            .map_err(|e| format!("{}: {e}", jsonl_path.display()))?;
                        worked.insert(dp.clone());
                        runs.push(r);
                    }
                    Err(e) if !worked.contains(dp) => {
                        eprintln!("note: skipping datapath {dp} on {}: {e}", env.name);
                        skipped.insert(dp.clone(), e.to_string());
                        done += cfg.repeat - k - 1;
                        break;
                    }
                    Err(e) => {
                        let n = format!("{dp} {size} B run {} failed: {e}", k + 1);
                        eprintln!("note: {n}");
                        notes.push(n);
                    }
                }
            }
            if let Some(m) = median_by(runs, |r| r.gbit_per_s) {
                medians.push(m);
            }
        }
    }
    let shown: Vec<String> = cfg
        .datapaths
        .iter()
        .filter(|d| !skipped.contains_key(*d))
        .cloned()
        .collect();
    for (dp, why) in &skipped {
        notes.push(format!("{dp} skipped: {why}"));
    }
    if let Some(mtu) = env.mtu {
        let frag: Vec<String> = cfg
            .sizes
            .iter()
            .filter(|&&s| env.fragments(s))
            .map(|s| s.to_string())
            .collect();
        if !frag.is_empty() {
            notes.push(format!(
                "veth MTU {mtu}: payloads of {} bytes are fragmented at the IP level when sent \
                 as plain datagrams",
                frag.join(", ")
            ));
        }
    }
    let header = format!(
        "Each cell: median (by Gbit/s) of {} run(s) of {} s after a {} s warm-up; one sender \
         thread, one receiver thread; counted at the receiver. {} CPU(s), Linux {}.",
        cfg.repeat,
        cfg.seconds,
        cfg.warmup,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
    );
    let md = markdown(env.name, &header, &shown, &cfg.sizes, &medians, &notes);
    let md_path = stem.with_extension("md");
    std::fs::write(&md_path, md).map_err(|e| format!("{}: {e}", md_path.display()))?;
    let svg = stem.with_extension("svg");
    write_charts(env.name, &svg, &shown, &medians).map_err(|e| e.to_string())?;
    eprintln!(
        "wrote {}, {} and {}",
        md_path.display(),
        jsonl_path.display(),
        svg.display()
    );
    Ok(())
}

/// The run whose `key` is the median (the lower middle one for an even count), so every field
/// of the kept result comes from one real run.
pub fn median_by<T>(mut runs: Vec<T>, key: impl Fn(&T) -> f64) -> Option<T> {
    if runs.is_empty() {
        return None;
    }
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let mid = (runs.len() - 1) / 2;
    Some(runs.swap_remove(mid))
}

/// A number with about three significant digits.
pub fn fmt_num(v: f64) -> String {
    let a = v.abs();
    if !v.is_finite() {
        "–".into()
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn find<'a>(res: &'a [CellResult], dp: &str, size: usize) -> Option<&'a CellResult> {
    res.iter().find(|r| r.datapath == dp && r.size == size)
}

/// One markdown table: a row per size, a column per datapath, cells from `value`.
fn table(
    out: &mut String,
    title: &str,
    dps: &[String],
    sizes: &[usize],
    res: &[CellResult],
    value: impl Fn(&CellResult) -> Option<f64>,
) {
    out.push_str(&format!("\n## {title}\n\n| bytes |"));
    for d in dps {
        out.push_str(&format!(" {d} |"));
    }
    out.push_str("\n|---:|");
    out.push_str(&"---:|".repeat(dps.len()));
    out.push('\n');
    for &s in sizes {
        out.push_str(&format!("| {s} |"));
        for d in dps {
            let cell = find(res, d, s).and_then(&value).map_or("–".into(), fmt_num);
            out.push_str(&format!(" {cell} |"));
        }
        out.push('\n');
    }
}

/// Throughput of `dp` over the baseline's at `size`.
fn ratio(res: &[CellResult], dp: &str, size: usize) -> Option<f64> {
    let base = find(res, BASELINE, size)?.gbit_per_s;
    let v = find(res, dp, size)?.gbit_per_s;
    (base > 0.0).then(|| v / base)
}

/// The report of one path.
pub fn markdown(
    path: &str,
    header: &str,
    dps: &[String],
    sizes: &[usize],
    res: &[CellResult],
    notes: &[String],
) -> String {
    let mut out = format!("# Datagram throughput over {path}\n\n{header}\n");
    table(&mut out, "Throughput, Gbit/s", dps, sizes, res, |r| {
        Some(r.gbit_per_s)
    });
    for &s in RATIO_SIZES {
        out.push_str(&format!("| ÷ {BASELINE} @ {s} B |"));
        for d in dps {
            let cell = ratio(res, d, s).map_or("–".into(), |v| format!("{v:.2}×"));
            out.push_str(&format!(" {cell} |"));
        }
        out.push('\n');
    }
    let others: Vec<String> = dps.iter().filter(|d| *d != BASELINE).cloned().collect();
    if dps.iter().any(|d| d == BASELINE) && !others.is_empty() {
        out.push_str(&format!(
            "\n## Improvement over {BASELINE}, % (the paper's Table 3)\n\n| bytes | {BASELINE}, Gbit/s |"
        ));
        for d in &others {
            out.push_str(&format!(" {d} |"));
        }
        out.push_str("\n|---:|---:|");
        out.push_str(&"---:|".repeat(others.len()));
        out.push('\n');
        for &s in sizes {
            let base = find(res, BASELINE, s).map_or("–".into(), |r| fmt_num(r.gbit_per_s));
            out.push_str(&format!("| {s} | {base} |"));
            for d in &others {
                let cell =
                    ratio(res, d, s).map_or("–".into(), |v| format!("{:+.0}", (v - 1.0) * 100.0));
                out.push_str(&format!(" {cell} |"));
            }
            out.push('\n');
        }
    }
    table(
        &mut out,
        "Packets, million per second",
        dps,
        sizes,
        res,
        |r| Some(r.packets_per_s / 1e6),
    );
    table(
        &mut out,
        "CPU seconds per GB received (process, user + sys)",
        dps,
        sizes,
        res,
        |r| r.cpu_s_per_gb,
    );
    table(
        &mut out,
        "System calls per datagram received (sender + receiver)",
        dps,
        sizes,
        res,
        |r| r.syscalls_per_packet,
    );
    table(&mut out, "Loss, %", dps, sizes, res, |r| {
        Some(r.loss * 100.0)
    });
    if !notes.is_empty() {
        out.push_str("\n## Notes\n\n");
        for n in notes {
            out.push_str(&format!("- {n}\n"));
        }
    }
    out
}

/// Fig. 8 (throughput versus payload size, log x) into `svg`, and the ratio to the baseline
/// into `<svg stem>-ratio.svg`.
fn write_charts(path: &str, svg: &Path, dps: &[String], res: &[CellResult]) -> std::io::Result<()> {
    let series = |f: &dyn Fn(&CellResult) -> Option<f64>, skip_base: bool| -> Vec<plot::Series> {
        dps.iter()
            .filter(|d| !(skip_base && *d == BASELINE))
            .map(|d| {
                let mut pts: Vec<(f64, f64)> = res
                    .iter()
                    .filter(|r| &r.datapath == d)
                    .filter_map(|r| Some((r.size as f64, f(r)?)))
                    .collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                (d.clone(), pts)
            })
            .collect()
    };
    plot::line_chart(
        svg,
        &format!("UDP payload throughput over {path}"),
        "payload bytes per datagram",
        "Gbit/s",
        true,
        &series(&|r| Some(r.gbit_per_s), false),
    )?;
    let stem = svg.with_extension("");
    let ratio_svg = PathBuf::from(format!("{}-ratio.svg", stem.display()));
    plot::line_chart(
        &ratio_svg,
        &format!("Throughput relative to {BASELINE} over {path}"),
        "payload bytes per datagram",
        &format!("× {BASELINE}"),
        true,
        &series(&|r| ratio(res, &r.datapath, r.size), true),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use slipstream::datapath::DatapathStats;

    fn result(dp: &str, size: usize, gbit: f64) -> CellResult {
        CellResult {
            datapath: dp.into(),
            backend: dp.into(),
            size,
            path: "loopback".into(),
            mtu: None,
            ip_fragmented: false,
            segments_per_send: 1,
            seconds: 1.0,
            gbit_per_s: gbit,
            packets_per_s: gbit * 1e9 / 8.0 / size as f64,
            cpu_s_per_gb: Some(1.5),
            cpu_s: 1.0,
            syscalls_per_packet: Some(1.25),
            tx_syscalls_per_packet: Some(1.0),
            rx_syscalls_per_packet: Some(0.25),
            sent: 100,
            received: 99,
            received_bytes: 99 * size as u64,
            loss: 0.01,
            tx_stats: DatapathStats::default(),
            rx_stats: DatapathStats::default(),
        }
    }

    #[test]
    fn median_keeps_a_real_run() {
        let runs = vec![3.0, 1.0, 2.0];
        assert_eq!(median_by(runs, |v| *v), Some(2.0));
        assert_eq!(median_by(vec![4.0, 1.0, 3.0, 2.0], |v| *v), Some(2.0));
        assert_eq!(median_by(vec![f64::NAN, 1.0, 5.0], |v| *v), Some(5.0));
        assert_eq!(median_by(Vec::<f64>::new(), |v| *v), None);
    }

    #[test]
    fn numbers() {
        assert_eq!(fmt_num(123.4), "123");
        assert_eq!(fmt_num(12.34), "12.3");
        assert_eq!(fmt_num(6.912), "6.91");
        assert_eq!(fmt_num(0.1234), "0.123");
        assert_eq!(fmt_num(f64::INFINITY), "–");
    }

    #[test]
    fn markdown_tables() {
        let res = vec![
            result("plain", 64, 0.3),
            result("plain", 1472, 6.9),
            result("gso", 64, 0.6),
            result("gso", 1472, 69.0),
        ];
        let dps = vec!["plain".to_string(), "gso".to_string(), "mmsg".to_string()];
        let md = markdown(
            "loopback",
            "hdr",
            &dps,
            &[64, 1472],
            &res,
            &["a note".into()],
        );
        assert!(md.starts_with("# Datagram throughput over loopback\n\nhdr\n"));
        assert!(
            md.contains("| bytes | plain | gso | mmsg |\n|---:|---:|---:|---:|\n"),
            "{md}"
        );
        assert!(md.contains("| 64 | 0.300 | 0.600 | – |\n"), "{md}");
        assert!(md.contains("| 1472 | 6.90 | 69.0 | – |\n"), "{md}");
        assert!(
            md.contains("| ÷ plain @ 64 B | 1.00× | 2.00× | – |\n"),
            "{md}"
        );
        assert!(
            md.contains("| ÷ plain @ 1472 B | 1.00× | 10.00× | – |\n"),
            "{md}"
        );
        assert!(md.contains("| 1472 | 6.90 | +900 | – |\n"), "{md}");
        assert!(md.contains("## System calls per datagram"));
        assert!(md.contains("| 64 | 1.25 | 1.25 | – |\n"), "{md}");
        assert!(md.contains("- a note\n"));
    }

    #[test]
    fn charts_are_written() {
        let dir = std::env::temp_dir().join(format!("slipstream-table-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let svg = dir.join("dgram-loopback.svg");
        let res = vec![
            result("plain", 64, 0.3),
            result("gso", 64, 0.6),
            result("plain", 1472, 6.9),
        ];
        let dps = vec!["plain".to_string(), "gso".to_string()];
        write_charts("loopback", &svg, &dps, &res).unwrap();
        assert!(std::fs::metadata(&svg).unwrap().len() > 200);
        let ratio = std::fs::read_to_string(dir.join("dgram-loopback-ratio.svg")).unwrap();
        assert!(ratio.contains("gso"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
