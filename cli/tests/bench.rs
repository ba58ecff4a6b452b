//! `slipstream bench` end to end: the datagram cell's JSON report, argument errors, the
//! matrix runner's files, and (as root) the veth path between two network namespaces.

mod common;
use common::*;

use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_slipstream");

fn bench(args: &[&str]) -> Output {
    Command::new(BIN).arg("bench").args(args).output().unwrap()
}

/// The JSON object on the last stdout line.
fn last_json(out: &Output) -> serde_json::Value {
    let stdout = text(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {stdout}"))
}

fn check_cell(v: &serde_json::Value, datapath: &str, path: &str) {
    for field in [
        "datapath",
        "size",
        "gbit_per_s",
        "packets_per_s",
        "cpu_s_per_gb",
        "syscalls_per_packet",
        "tx_syscalls_per_packet",
        "rx_syscalls_per_packet",
        "sent",
        "received",
        "loss",
        "path",
        "seconds",
    ] {
        assert!(v.get(field).is_some(), "missing {field}: {v}");
    }
    assert_eq!(v["datapath"], datapath);
    assert_eq!(v["size"], 1472);
    assert_eq!(v["path"], path);
    assert!(v["received"].as_u64().unwrap() > 0, "{v}");
    assert!(v["gbit_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(v["syscalls_per_packet"].as_f64().unwrap() > 0.0, "{v}");
    let loss = v["loss"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&loss), "{v}");
}

#[test]
fn dgram_cell_reports_json() {
    let out = bench(&[
        "dgram",
        "--size",
        "1472",
        "--datapath",
        "plain",
        "--seconds",
        "0.3",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("Gbit/s"));
    check_cell(&last_json(&out), "plain", "loopback");
}

#[test]
fn dgram_cell_runs_the_async_api_with_batched_syscalls() {
    let out = bench(&[
        "dgram",
        "--size",
        "1472",
        "--datapath",
        "async",
        "--seconds",
        "0.3",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = last_json(&out);
    check_cell(&v, "async", "loopback");
    // Posted sends leave in GSO batches and receives come back GRO-coalesced: far fewer
    // system calls than datagrams.
    let per = v["syscalls_per_packet"].as_f64().unwrap();
    assert!(per < 0.5, "{per} syscalls per packet: {v}");
}

#[test]
fn dgram_rejects_bad_arguments() {
    let cases: &[(&[&str], &str)] = &[
        (&["dgram", "--size", "0"], "--size"),
        (&["dgram", "--size", "65508"], "65507"),
        (&["dgram", "--size", "64", "--seconds", "0"], "--seconds"),
        (&["dgram", "--size", "64", "--seconds", "-1"], "--seconds"),
        (&["dgram", "--size", "64", "--datapath", "nope"], "nope"),
        (&["dgram", "--size", "64", "--mtu", "9000"], "--netns"),
        (&["dgram"], "--size"),
        (
            &[
                "dgram-table",
                "--sizes",
                "64,0",
                "--out-dir",
                "/nonexistent",
            ],
            "--size",
        ),
        (
            &["dgram-table", "--paths", "wan", "--out-dir", "/nonexistent"],
            "wan",
        ),
        (
            &["dgram-table", "--repeat", "0", "--out-dir", "/nonexistent"],
            "--repeat",
        ),
    ];
    for (args, needle) in cases {
        let out = bench(args);
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            err.contains(needle),
            "{args:?}: expected '{needle}' in: {err}"
        );
    }
}

#[test]
fn dgram_table_writes_reports() {
    let dir = std::env::temp_dir().join(format!("slipstream-bench-table-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = bench(&[
        "dgram-table",
        "--sizes",
        "64,1472",
        "--datapaths",
        "plain,nope",
        "--repeat",
        "1",
        "--seconds",
        "0.1",
        "--warmup",
        "0.05",
        "--paths",
        "loopback",
        "--out-dir",
        dir.to_str().unwrap(),
    ]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("skipping datapath nope"), "{err}");
    let md = std::fs::read_to_string(dir.join("dgram-loopback.md")).unwrap();
    assert!(md.contains("| bytes | plain |"), "{md}");
    assert!(md.contains("| ÷ plain @ 1472 B | 1.00× |"), "{md}");
    assert!(md.contains("nope skipped"), "{md}");
    let jsonl = std::fs::read_to_string(dir.join("dgram-loopback.jsonl")).unwrap();
    assert_eq!(jsonl.lines().count(), 2, "{jsonl}");
    for line in jsonl.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["datapath"], "plain");
        assert!(v["received"].as_u64().unwrap() > 0);
    }
    let svg = std::fs::read_to_string(dir.join("dgram-loopback.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("plain"));
    assert!(dir.join("dgram-loopback-ratio.svg").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dgram_cell_over_veth_between_namespaces() {
    if !root_test("dgram_cell_over_veth_between_namespaces") {
        return;
    }
    let list = netns_list;
    let out = bench(&[
        "dgram",
        "--size",
        "1472",
        "--datapath",
        "plain",
        "--seconds",
        "0.3",
        "--netns",
        "--json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = last_json(&out);
    check_cell(&v, "plain", "veth");
    assert_eq!(v["mtu"], 1500);
    assert_eq!(v["ip_fragmented"], false);
    // Larger than the MTU: fragmented, and said so.
    let out = bench(&[
        "dgram",
        "--size",
        "4000",
        "--seconds",
        "0.1",
        "--netns",
        "--mtu",
        "1500",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("fragmented"),
        "{}",
        text(&out.stdout)
    );
    // Failures after the namespaces exist still remove them.
    let out = bench(&["dgram", "--size", "64", "--netns", "--datapath", "nope"]);
    assert!(!out.status.success());
    let left: Vec<String> = list()
        .lines()
        .filter(|l| l.starts_with("ssd"))
        .map(str::to_string)
        .collect();
    // Other runs may be in progress concurrently; ours are gone once the processes exit, and
    // a leftover would be named after a dead process.
    for l in left {
        let pid: String = l[3..].chars().take_while(char::is_ascii_digit).collect();
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "namespace {l} left behind"
        );
    }
}
