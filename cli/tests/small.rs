//! `bench small` end to end: slipstream's small real-time messages and Aeron (Java, embedded
//! media driver, fetched from Maven Central) measured in one run, every message of both
//! sides received. Needs a JDK and Maven (always in CI; elsewhere skipped without them).

mod common;
use common::*;

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_slipstream");

fn have(tool: &str) -> bool {
    Command::new(tool).arg("-version").output().is_ok()
}

#[test]
fn small_message_bench_measures_both_sides_in_one_run() {
    if !(have("java") && have("javac") && have("mvn")) {
        assert!(
            !ci(),
            "CI must have java, javac and mvn (.ci/run installs them)"
        );
        eprintln!("skipping small_message_bench_measures_both_sides_in_one_run: needs java, javac and mvn");
        return;
    }
    let out = Command::new(BIN)
        .args([
            "bench",
            "small",
            "--repeat",
            "1",
            "--count",
            "50000",
            "--rates",
            "2000",
            "--seconds",
            "0.5",
            "--pings",
            "500",
            "--aeron-setups",
            "SHARED:backoff",
            "--no-samples",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let v: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    let rate = v["rate"].as_array().unwrap();
    assert_eq!(
        rate.len(),
        3,
        "slipstream, slipstream corked, one Aeron set-up: {v}"
    );
    for r in rate {
        let m = &r["median"];
        // Loopback with a receiver that keeps up: nothing lost on either side.
        assert_eq!(m["received"], m["sent"], "{r}");
        assert!(m["msgs_per_sec"].as_f64().unwrap() > 1000.0, "{r}");
    }
    let paced = v["paced"].as_array().unwrap();
    assert_eq!(paced.len(), 2, "{v}");
    for p in paced {
        let m = &p["median"];
        assert_eq!(m["received"], m["sent"], "{p}");
        assert_eq!(m["sent"], 1000, "{p}");
        let (p50, p99, max) = (
            m["p50_us"].as_f64().unwrap(),
            m["p99_us"].as_f64().unwrap(),
            m["max_us"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= p99 && p99 <= max, "{p}");
    }
    let pp = v["pingpong"].as_array().unwrap();
    assert_eq!(pp.len(), 3, "slipstream, plain UDP, one Aeron set-up: {v}");
    for p in pp {
        let m = &p["median"];
        assert_eq!(m["received"], 500, "{p}");
        let (p50, max) = (m["p50_us"].as_f64().unwrap(), m["max_us"].as_f64().unwrap());
        assert!(p50 > 0.0 && p50 <= max, "{p}");
    }
    assert!(v["rate_ratio_corked"].as_f64().unwrap() > 0.0);
    // The media driver's directory is gone (nothing else makes one by that name).
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("slipstream-aeron-"))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
}
