//! `slipstream rt pong` and `slipstream rt ping` end to end on loopback.

mod common;

use common::{free_port, text, Proc};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_slipstream");

fn ping(port: u16, extra: &[&str]) -> (Output, serde_json::Value) {
    let out = Command::new(BIN)
        .args([
            "rt",
            "ping",
            &format!("127.0.0.1:{port}"),
            "--json",
            "--quiet",
        ])
        .args(extra)
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    let v = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", text(&out.stderr)));
    (out, v)
}

#[test]
fn ping_times_every_answer_of_a_pong_and_counts_what_is_lost() {
    let port = free_port();
    let pong = Proc::spawn(
        "rt pong",
        Command::new(BIN).args([
            "rt",
            "pong",
            &format!("127.0.0.1:{port}"),
            "--seconds",
            "60",
            "--quiet",
        ]),
    );
    // Until the pong answers (its socket is bound a moment after it starts).
    let end = Instant::now() + Duration::from_secs(10);
    // Tries, each of one message (one not answered in time may still reach the pong).
    let mut tries = 0;
    loop {
        let (out, v) = ping(port, &["--count", "1", "--timeout", "200"]);
        tries += 1;
        if out.status.success() {
            assert_eq!(v["answered"], 1, "{v}");
            break;
        }
        assert!(Instant::now() < end, "the pong never answered: {v}");
    }
    // One message at a time, then on a schedule with messages of three fragments.
    let runs: [&[&str]; 2] = [
        &["--count", "500"],
        &["--count", "2000", "--rate", "5000", "--size", "3000"],
    ];
    for args in runs {
        let (out, v) = ping(port, args);
        assert!(out.status.success(), "{args:?}: {v}\n{}", text(&out.stderr));
        let sent = v["sent"].as_u64().unwrap();
        assert_eq!(v["answered"].as_u64().unwrap(), sent, "{v}");
        assert_eq!(v["lost"], 0, "{v}");
        assert_eq!(v["duplicates"], 0, "{v}");
        let (p50, max) = (
            v["rtt_p50_us"].as_f64().unwrap(),
            v["rtt_max_us"].as_f64().unwrap(),
        );
        assert!(p50 > 0.0 && p50 <= max && max < 1e6, "{v}");
    }
    // Nobody answers: every message lost, said so, exit status 1.
    let dead = free_port();
    let (out, v) = ping(dead, &["--count", "3", "--timeout", "100"]);
    assert_eq!(out.status.code(), Some(1), "{v}");
    assert_eq!((v["sent"].as_u64(), v["lost"].as_u64()), (Some(3), Some(3)));
    assert!(v["rtt_p50_us"].is_null(), "{v}");
    assert!(
        text(&out.stderr).contains("3 of 3 messages were lost"),
        "{}",
        text(&out.stderr)
    );
    // Stopped by SIGTERM, the pong says what it answered and exits 0.
    pong.signal(15);
    let out = pong.finish(Duration::from_secs(10)).unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary = text(&out.stdout);
    let answered: u64 = summary
        .split_whitespace()
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{summary}"));
    assert!(
        (2501..=2500 + tries).contains(&answered) && summary.contains(" answered, 0 refused"),
        "{summary}"
    );
}

#[test]
fn ping_refuses_what_it_cannot_do() {
    for (args, says) in [
        (&["--size", "8"][..], "--size 8"),
        (&["--count", "0"][..], "--count 0"),
        (&["--rate=-1"][..], "--rate -1"),
        (&["--size", "70000"][..], "--size 70000"),
        (&["--max-message", "2000000"][..], "--max-message 2000000"),
    ] {
        let out = Command::new(BIN)
            .args(["rt", "ping", "127.0.0.1:9"])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(text(&out.stderr).contains(says), "{}", text(&out.stderr));
    }
}

#[test]
fn ping_and_pong_over_af_xdp_between_two_namespaces() {
    if !common::root_test("ping_and_pong_over_af_xdp_between_two_namespaces") {
        return;
    }
    let pair = slipstream::netem::netns::VethPair::create(1500).unwrap();
    let at = format!("{}:7400", pair.addr_b);
    let pong = Proc::spawn(
        "rt pong --xdp",
        Command::new("ip")
            .args(["netns", "exec", &pair.ns_b, BIN, "rt", "pong", &at])
            .args(["--xdp", &pair.dev_b, "--seconds", "60", "--quiet"]),
    );
    let ping = |extra: &[&str]| {
        let out = Command::new("ip")
            .args([
                "netns",
                "exec",
                &pair.ns_a,
                BIN,
                "rt",
                "ping",
                &at,
                "--xdp",
                &pair.dev_a,
            ])
            .args(["--json", "--quiet"])
            .args(extra)
            .output()
            .unwrap();
        let stdout = text(&out.stdout);
        let v: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {stdout}\n{}", text(&out.stderr)));
        (out, v)
    };
    // Until the pong answers.
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let (out, v) = ping(&["--count", "1", "--timeout", "200"]);
        if out.status.success() {
            break;
        }
        assert!(Instant::now() < end, "the pong never answered: {v}");
    }
    // Messages of one datagram, then of three fragments (which leave through the kernel's
    // GSO and still arrive as frames).
    for (args, one_datagram) in [
        (&["--count", "1000"][..], true),
        (&["--count", "500", "--size", "3000"][..], false),
    ] {
        let (out, v) = ping(args);
        assert!(out.status.success(), "{args:?}: {v}\n{}", text(&out.stderr));
        assert_eq!(v["lost"], 0, "{v}");
        let (sent, x) = (v["sent"].as_u64().unwrap(), &v["xdp"]);
        assert!(x["frames_received"].as_u64().unwrap() >= sent, "{v}");
        if one_datagram {
            // All but the first, sent before the pong's address was learned.
            assert!(x["frames_sent"].as_u64().unwrap() >= sent - 1, "{v}");
        }
        assert_eq!(x["malformed"], 0, "{v}");
    }
    pong.signal(15);
    let out = pong.finish(Duration::from_secs(10)).unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("; AF_XDP: "),
        "{}",
        text(&out.stdout)
    );
}
