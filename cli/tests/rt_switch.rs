//! Real-time datagrams and the emulated switch, as root (always in CI): a switch's port
//! congested by two senders drops at that port only; the Table 4 bench runs end to end on
//! it, with every message accounted for.

mod common;
use common::*;

use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_slipstream");

/// These tests measure rates and deadlines: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn slipstream(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// A switch, taken down on drop even when the test fails.
struct Switch(String);

impl Switch {
    /// `netem switch NAME --hosts N --access ACCESS --port PORT`; its JSON.
    fn up(name: &str, hosts: usize, access: &str, port: &str) -> (Switch, serde_json::Value) {
        let hosts = hosts.to_string();
        let out = slipstream(&[
            "netem", "switch", name, "--hosts", &hosts, "--access", access, "--port", port,
        ]);
        assert!(out.status.success(), "netem switch: {}", text(&out.stderr));
        let v = serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap();
        (Switch(name.to_string()), v)
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        let _ = slipstream(&["netem", "down", &self.0]);
    }
}

/// Sends 1,472-byte UDP payloads from namespace `ns` to `dst` at about `mbit` Mbit/s for
/// `secs`, from a thread that entered the namespace; returns how many were sent.
fn blast(ns: &str, dst: &str, mbit: f64, secs: f64) -> std::thread::JoinHandle<u64> {
    let (ns, dst) = (ns.to_string(), dst.to_string());
    std::thread::spawn(move || {
        slipstream::netem::netns::enter(&ns).unwrap();
        let s = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        let gap = Duration::from_secs_f64(1500.0 * 8.0 / (mbit * 1e6));
        let start = std::time::Instant::now();
        let mut sent = 0u64;
        let payload = [0u8; 1472];
        while start.elapsed().as_secs_f64() < secs {
            let due = start + gap * sent as u32;
            if let Some(w) = due.checked_duration_since(std::time::Instant::now()) {
                std::thread::sleep(w);
            }
            if s.send_to(&payload, &dst).is_ok() {
                sent += 1;
            }
        }
        sent
    })
}

#[test]
fn two_senders_congest_one_port_of_the_switch() {
    if !root_test("two_senders_congest_one_port_of_the_switch") {
        return;
    }
    let _serial = serial();
    let name = format!("tsw{}", std::process::id());
    {
        // Room on the access links for the bursts a sender that fell behind its pacing
        // catches up with.
        let (_sw, v) = Switch::up(&name, 3, "rate=100mbit,queue=4m", "rate=40mbit,queue=64k");
        assert_eq!(v["hosts"].as_array().unwrap().len(), 3);
        let list = netns_list();
        for i in 1..=3 {
            assert!(list.contains(&format!("{name}-{i}")), "{list}");
        }
        // The receiver's port: a sink that reads nothing (the kernel drops what it cannot
        // queue; the switch counts what it delivered).
        let secs = 2.0;
        let a = blast(&format!("{name}-1"), "10.78.0.3:9", 30.0, secs);
        let b = blast(&format!("{name}-2"), "10.78.0.3:9", 30.0, secs);
        let sent = a.join().unwrap() + b.join().unwrap();
        std::thread::sleep(Duration::from_millis(400));
        let out = slipstream(&["netem", "stats", &name, "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let h = |i: usize, link: &str, k: &str| v["hosts"][i][link][k].as_u64().unwrap();
        // 60 Mbit/s offered to a 40 Mbit/s port: it drops about a third; the access links
        // (100 Mbit/s each, 30 offered) drop nothing.
        let port_offered = h(2, "port", "offered");
        let port_drops = h(2, "port", "queue_drops");
        assert!(
            port_offered >= sent * 95 / 100,
            "{port_offered} of {sent}: {v}"
        );
        let share = port_drops as f64 / port_offered as f64;
        assert!((0.2..0.45).contains(&share), "port dropped {share}: {v}");
        assert_eq!(
            h(0, "access", "queue_drops") + h(1, "access", "queue_drops"),
            0
        );
        let rate = h(2, "port", "delivered_bytes") as f64 * 8.0 / secs / 1e6;
        assert!(
            (30.0..44.0).contains(&rate),
            "port delivered {rate} Mbit/s: {v}"
        );
    }
    let list = netns_list();
    assert!(!list.contains(&format!("{name}-1")), "{list}");
    assert!(!std::path::Path::new("/run/slipstream/netem")
        .join(&name)
        .exists());
}

#[test]
fn table4_runs_on_the_switch_and_every_message_is_accounted_for() {
    if !root_test("table4_runs_on_the_switch_and_every_message_is_accounted_for") {
        return;
    }
    let _serial = serial();
    let out = slipstream(&["bench", "table4", "--quick", "--scale", "10", "--json"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let v: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    for key in [
        "rt_loss_pct_without",
        "rt_loss_pct_with",
        "nrt_loss_pct_without",
        "nrt_loss_pct_with",
        "rt_late_pct_with",
        "time_scale",
        "validity_ok",
    ] {
        assert!(v.get(key).is_some(), "{key} missing: {v}");
    }
    assert_eq!(v["time_scale"], 10);
    // On an ideal host the smooth trace misses nothing and the overloaded one loses most
    // real-time messages: the assumptions, not the machine, set both.
    assert_eq!(v["ideal_validity_rt_miss_pct"], 0.0, "{v}");
    assert!(
        v["ideal_rt_loss_pct_without"].as_f64().unwrap() > 5.0,
        "{v}"
    );
    let runs = v["report"]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for run in runs {
        for class in ["rt", "nrt"] {
            let c = &run[class];
            let n = |k: &str| c[k].as_u64().unwrap();
            assert!(n("sent") > 0, "{run}");
            assert_eq!(
                n("sent"),
                n("smoother_drops") + n("network_lost") + n("late") + n("on_time"),
                "{class}: {run}"
            );
        }
        assert!(run["marked_received"].as_u64().unwrap() > 0, "{run}");
    }
    // Without the smoother the port overflows: drops there, and real-time messages late.
    let off = &runs[0];
    assert_eq!(off["smoother"], false);
    assert!(off["port_drops"].as_u64().unwrap() > 0, "{off}");
    assert!(v["rt_loss_pct_without"].as_f64().unwrap() >= 5.0, "{v}");
    // With it the smoother reacted to the receiver's reports.
    let on = &runs[1];
    assert!(on["reports_taken"].as_u64().unwrap() > 0, "{on}");
    assert!(on["lossy_refreshes"].as_u64().unwrap() > 0, "{on}");
    assert!(!netns_list().contains("t4x"), "the switch is gone");
}

/// `FragCreates` of the IP counters of the calling thread's network namespace.
fn frag_creates() -> u64 {
    let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp").unwrap();
    let mut ip = snmp.lines().filter(|l| l.starts_with("Ip: "));
    let (names, values) = (ip.next().unwrap(), ip.next().unwrap());
    let i = names
        .split_whitespace()
        .position(|n| n == "FragCreates")
        .unwrap();
    values.split_whitespace().nth(i).unwrap().parse().unwrap()
}

#[test]
fn messages_up_to_a_mebibyte_cross_the_switch_whole_and_never_as_ip_fragments() {
    use slipstream::rt::{Class, RtConfig, RtSocket};
    if !root_test("messages_up_to_a_mebibyte_cross_the_switch_whole_and_never_as_ip_fragments") {
        return;
    }
    let _serial = serial();
    let name = format!("tfr{}", std::process::id());
    let (_sw, _) = Switch::up(&name, 2, "rate=1gbit,queue=8m", "rate=1gbit,queue=8m");
    let cfg = RtConfig {
        max_message: 1 << 20,
        buffers: 4,
        reassembly_slots: 4,
        smoother: None,
        ..RtConfig::default()
    };
    let sizes = [1usize, 1440, 1441, 64 << 10, 1 << 20];
    let rounds = 10;
    let dst: std::net::SocketAddr = "10.78.0.2:7900".parse().unwrap();
    let ns2 = format!("{name}-2");
    let rx = std::thread::spawn(move || {
        slipstream::netem::netns::enter(&ns2).unwrap();
        let mut sock = RtSocket::open(dst, cfg).unwrap();
        let mut got = Vec::new();
        let end = std::time::Instant::now() + Duration::from_secs(20);
        while got.len() < sizes.len() * rounds && std::time::Instant::now() < end {
            sock.poll(Duration::from_millis(10), |m| {
                let seed = m.data.first().copied().unwrap_or(0);
                let exact = m
                    .data
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| i == 0 || b == (i as u8).wrapping_mul(7).wrapping_add(seed));
                got.push((m.data.len(), exact));
            })
            .unwrap();
        }
        got
    });
    let ns1 = format!("{name}-1");
    let tx = std::thread::spawn(move || {
        slipstream::netem::netns::enter(&ns1).unwrap();
        let before = frag_creates();
        let mut sock = RtSocket::open("10.78.0.1:7900".parse().unwrap(), cfg).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        for r in 0..rounds {
            for (k, &len) in sizes.iter().enumerate() {
                let mut buf = loop {
                    if let Some(b) = sock.claim() {
                        break b;
                    }
                    sock.poll(Duration::from_millis(1), |_| {}).unwrap();
                };
                let seed = (r * sizes.len() + k) as u8;
                for (i, b) in buf.as_mut()[..len].iter_mut().enumerate() {
                    *b = (i as u8).wrapping_mul(7).wrapping_add(seed);
                }
                buf.as_mut()[0] = seed;
                let class = if k % 2 == 0 { Class::Rt } else { Class::Nrt };
                sock.send(buf, len, dst, class, Some(Duration::from_secs(5)))
                    .unwrap();
                // 1 Gbit/s moves a mebibyte in 8 ms: leave the queues room.
                std::thread::sleep(Duration::from_millis(12));
            }
        }
        let rt = frag_creates() - before;
        // The control: one plain 8,000-byte UDP datagram is cut into IP fragments here.
        let plain = std::net::UdpSocket::bind("10.78.0.1:0").unwrap();
        plain.send_to(&[0u8; 8000], "10.78.0.2:9").unwrap();
        (rt, frag_creates() - before - rt, sock.stats())
    });
    let (rt_frags, plain_frags, stats) = tx.join().unwrap();
    let got = rx.join().unwrap();
    assert_eq!(got.len(), sizes.len() * rounds, "{got:?} {stats:?}");
    assert!(got.iter().all(|&(_, exact)| exact), "byte-exact");
    let mut lens: Vec<usize> = got.iter().map(|&(l, _)| l).collect();
    lens.sort_unstable();
    let mut want: Vec<usize> = sizes
        .iter()
        .flat_map(|&s| std::iter::repeat_n(s, rounds))
        .collect();
    want.sort_unstable();
    assert_eq!(lens, want);
    assert_eq!(rt_frags, 0, "real-time messages made IP fragments");
    assert!(plain_frags >= 5, "the control made {plain_frags} fragments");
    assert!(stats.datapath.gso_sends > 0, "{stats:?}");
}

#[test]
fn latency_and_bandwidth_bench_runs_both_paths_at_every_size() {
    if !root_test("latency_and_bandwidth_bench_runs_both_paths_at_every_size") {
        return;
    }
    let _serial = serial();
    // Sleeping on one CPU (the default), and spinning on a CPU a side: both paths spin then,
    // plain ones on non-blocking receives.
    let spinning = ["--pin", "apart", "--spin", "100"];
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runs: &[&[&str]] = if cpus >= 2 {
        &[&[], &spinning]
    } else {
        eprintln!("one CPU: --pin apart --spin not run");
        &[&[]]
    };
    for &extra in runs {
        let mut args = vec![
            "bench",
            "rtpp",
            "--sizes",
            "1,1472,4096,65000",
            "--iters",
            "50",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = slipstream(&args);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
        let rows: serde_json::Value =
            serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
        let rows = rows.as_array().unwrap();
        assert_eq!(rows.len(), 4);
        for r in rows {
            for k in ["rt_p50_us", "rt_p99_us", "plain_p50_us", "plain_p99_us"] {
                let v = r[k].as_f64().unwrap();
                assert!(v > 0.0 && v < 100_000.0, "{k}: {r}");
            }
            for k in ["rt_mbps", "plain_mbps"] {
                assert!(r[k].as_f64().unwrap() > 0.0, "{k}: {r}");
            }
            assert_eq!(
                (&r["rt_lost"], &r["plain_lost"]),
                (&0.into(), &0.into()),
                "{extra:?}: {r}"
            );
        }
        assert!(!netns_list().contains("ssd"), "the veth pair is gone");
    }
}

#[test]
fn real_time_beside_bulk_srt_bench_runs_without_and_with_the_process_smoother() {
    if !root_test("real_time_beside_bulk_srt_bench_runs_without_and_with_the_process_smoother") {
        return;
    }
    let _serial = serial();
    let out = slipstream(&["bench", "rtmix", "--seconds", "3", "--json"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let runs: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        let (sent, got) = (
            r["rt_sent"].as_u64().unwrap(),
            r["rt_received"].as_u64().unwrap(),
        );
        assert!(sent >= 2500 && got <= sent, "{r}");
        assert!(r["rt_late"].as_u64().unwrap() <= got, "{r}");
        assert!(r["bulk_mbps"].as_f64().unwrap() > 1.0, "{r}");
    }
    let (off, on) = (&runs[0], &runs[1]);
    assert_eq!(off["held"], 0, "{off}");
    assert!(
        on["held"].as_u64().unwrap() > 0,
        "the smoother never held the bulk transfer: {on}"
    );
    // Without the smoother the bulk transfer's queue is ahead of every real-time message.
    assert!(
        on["rt_p50_us"].as_f64().unwrap() < off["rt_p50_us"].as_f64().unwrap(),
        "{off}\n{on}"
    );
    assert!(!netns_list().contains("rtmix"), "the emulator is gone");
}

#[test]
fn a_bench_stopped_by_a_signal_takes_its_emulators_down() {
    if !root_test("a_bench_stopped_by_a_signal_takes_its_emulators_down") {
        return;
    }
    let _serial = serial();
    // SIGTERM during the link-emulated run of rtpp, SIGINT during rtmix's: each leaves
    // nothing behind and ends with 128 plus the signal's number.
    for (bench, prefix, sig, status) in [
        (
            &["bench", "rtpp", "--paths", "netem100", "--iters", "100000"][..],
            "rtpp",
            libc::SIGTERM,
            143,
        ),
        (
            &["bench", "rtmix", "--seconds", "60"][..],
            "rtmix",
            libc::SIGINT,
            130,
        ),
    ] {
        let p = Proc::spawn(bench[1], Command::new(BIN).args(bench));
        let name = format!("{prefix}{}", p.id());
        let state = emulator_up(&name);
        p.signal(sig);
        let out = p.finish(Duration::from_secs(20)).unwrap();
        assert_eq!(out.status.code(), Some(status), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(&format!("removed: emulator {name}")),
            "{}",
            text(&out.stderr)
        );
        assert!(!state.exists(), "{name}'s state is gone");
        assert!(
            !netns_list().contains(&name),
            "{name}'s namespaces are gone"
        );
    }
}

/// Waits (20 s at most) until emulator `name` is up and has run half a second; returns its
/// state directory.
fn emulator_up(name: &str) -> std::path::PathBuf {
    let state = std::path::Path::new("/run/slipstream/netem").join(name);
    let t = std::time::Instant::now();
    while !state.join("info.json").exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{name} never came up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    state
}

/// A bench killed outright (SIGKILL: no handler runs) leaves its emulator behind; the next
/// bench run as root takes it down, once the process it is named after is gone.
#[test]
fn a_bench_killed_outright_leaves_its_emulator_to_the_next_bench() {
    if !root_test("a_bench_killed_outright_leaves_its_emulator_to_the_next_bench") {
        return;
    }
    let _serial = serial();
    let args = ["bench", "rtpp", "--paths", "netem100", "--iters", "100000"];
    let p = Proc::spawn("rtpp", Command::new(BIN).args(args));
    let name = format!("rtpp{}", p.id());
    let state = emulator_up(&name);
    p.signal(libc::SIGKILL);
    let out = p.finish(Duration::from_secs(20)).unwrap();
    assert_eq!(out.status.code(), None, "killed by a signal");
    assert!(
        state.exists(),
        "{name} outlived its bench (else nothing to test)"
    );
    // Any bench cleans up after it.
    let out = Command::new(BIN)
        .args(["bench", "conns", "--n", "1", "--pattern", "idle"])
        .args(["--idle-secs", "0.2", "--json"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("removed emulator {name}, left behind by process")),
        "{err}"
    );
    assert!(!state.exists(), "{name}'s state is gone");
    assert!(
        !netns_list().contains(&name),
        "{name}'s namespaces are gone"
    );
}
