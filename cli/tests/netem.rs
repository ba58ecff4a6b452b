//! `slipstream netem` end to end: option errors (anywhere), and as root (always in CI) the
//! emulator's life cycle, its accuracy probes, and kernel TCP, SRT and slipstream crossing
//! it byte-exact through loss.

mod common;
use common::*;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_slipstream");

/// The emulator tests run one at a time: the accuracy probe measures the delivered rate, and
/// on two cores a transfer test running beside it took a quarter of it away.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn slipstream(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

/// Whether `tool` runs; in CI its absence fails the test.
fn have(tool: &str, package: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    assert!(
        ok || !ci(),
        "{tool} is missing in CI (apt-get install {package})"
    );
    if !ok {
        eprintln!("skipping the {tool} part: not installed (apt-get install {package})");
    }
    ok
}

/// An emulator, taken down on drop even when the test fails.
struct Emu {
    name: String,
    a: (String, String),
    b: (String, String),
}

impl Emu {
    fn up(name: &str, opts: &[&str]) -> Emu {
        let mut args = vec!["netem", "up", name];
        args.extend_from_slice(opts);
        let out = slipstream(&args);
        assert!(out.status.success(), "netem up: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        let v: serde_json::Value =
            serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
        let side = |s: &str| {
            (
                v[s]["netns"].as_str().unwrap().to_string(),
                v[s]["addr"].as_str().unwrap().to_string(),
            )
        };
        Emu {
            name: name.into(),
            a: side("a"),
            b: side("b"),
        }
    }
}

impl Drop for Emu {
    fn drop(&mut self) {
        let _ = slipstream(&["netem", "down", &self.name]);
    }
}

fn in_ns(ns: &str, cmd: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(cmd);
    c
}

/// Waits for `p` at most `secs`; its output, or a panic naming `what` with what it printed.
fn finish(p: Proc, secs: u64, what: &str) -> Output {
    p.finish(Duration::from_secs(secs))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn spawn(mut c: Command) -> Proc {
    Proc::spawn("child", &mut c)
}

/// 500 Mbit/s, 10 ms RTT, 1 % loss and 0.5 % reordering each way.
const LOSSY_10MS: &[&str] = &[
    "--rate",
    "500mbit",
    "--delay",
    "5ms",
    "--loss",
    "1%",
    "--reorder",
    "0.5%",
];

/// Writes 8 MiB of patterned bytes to `dir/in.bin` and returns its path and the bytes.
fn test_input(dir: &Path, shift: u32) -> (std::path::PathBuf, Vec<u8>) {
    let input = dir.join("in.bin");
    let data: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> shift) as u8)
        .collect();
    std::fs::write(&input, &data).unwrap();
    (input, data)
}

/// `slipstream recv srt://:PORT OUT -q --force` in namespace `ns`.
fn spawn_recv(ns: &str, port: u16, out: &Path) -> Proc {
    spawn(in_ns(
        ns,
        &[
            BIN,
            "recv",
            &format!("srt://:{port}"),
            out.to_str().unwrap(),
            "-q",
            "--force",
        ],
    ))
}

fn same_file(a: &Path, b: &Path) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert_eq!(
        x.len(),
        y.len(),
        "{} vs {}: sizes differ",
        a.display(),
        b.display()
    );
    assert!(x == y, "{} and {} differ", a.display(), b.display());
}

#[test]
fn bad_options_are_refused_before_anything_is_created() {
    for (args, needle) in [
        (&["netem", "up", "x", "--loss", "200%"][..], "--loss"),
        (&["netem", "up", "x", "--rate", "lots"][..], "--rate"),
        (&["netem", "up", "bad/name"][..], "bad emulator name"),
        (
            &["netem", "up", "x", "--loss", "1%", "--loss-burst", "1%/30%"][..],
            "exclude",
        ),
        (&["netem", "down", "no such"][..], "bad emulator name"),
    ] {
        let out = slipstream(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = text(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn emulator_lifecycle_and_accuracy() {
    if !root_test("emulator_lifecycle_and_accuracy") {
        return;
    }
    let _serial = serial();
    let name = format!("tn{}", std::process::id());
    {
        let emu = Emu::up(&name, &["--delay", "5ms", "--rate", "200mbit"]);
        let list = netns_list();
        assert!(list.contains(&emu.a.0) && list.contains(&emu.b.0), "{list}");
        // A second `up` of the same name is refused and leaves the first alone.
        let out = slipstream(&["netem", "up", &name]);
        assert!(!out.status.success());
        assert!(text(&out.stderr).contains("already up"));
        let stats = slipstream(&["netem", "stats", &name, "--json"]);
        assert!(stats.status.success(), "{}", text(&stats.stderr));
        let v: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
        assert_eq!(v["running"], true);
        assert!(v["cpu_seconds"].as_f64().is_some(), "{v}");
    }
    // Dropping the guard ran `down`: nothing is left.
    let list = netns_list();
    assert!(!list.contains(&format!("{name}-a")), "{list}");
    assert!(!Path::new("/run/slipstream/netem").join(&name).exists());
    let out = slipstream(&["netem", "down", &name]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("no emulator named"));

    // The accuracy probes (delay, rate, loss) at small scale; exit status 0 means every
    // probe was within its bound.
    let out = slipstream(&["bench", "netem", "--quick", "--json"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let v: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    for probe in ["delay", "rate", "loss"] {
        let rows = v[probe].as_array().unwrap();
        assert!(
            !rows.is_empty() && rows.iter().all(|r| r["ok"] == true),
            "{v}"
        );
    }
    assert!(!netns_list().contains("ssacc"));
}

#[test]
fn tcp_srt_and_slipstream_cross_the_emulator_byte_exact() {
    if !root_test("tcp_srt_and_slipstream_cross_the_emulator_byte_exact") {
        return;
    }
    let _serial = serial();
    let name = format!("tx{}", std::process::id());
    let emu = Emu::up(&name, LOSSY_10MS);
    let dir = std::env::temp_dir().join(format!("slipstream-netem-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, data) = test_input(&dir, 13);
    let (a, b, addr) = (&emu.a.0, &emu.b.0, emu.b.1.clone());

    // slipstream, verified end to end.
    let out = dir.join("slipstream.bin");
    let rx = spawn_recv(b, 9400, &out);
    std::thread::sleep(Duration::from_millis(200));
    let tx = spawn(in_ns(
        a,
        &[
            BIN,
            "send",
            input.to_str().unwrap(),
            &format!("srt://{addr}:9400"),
            "-q",
        ],
    ));
    let t = finish(tx, 60, "slipstream send");
    assert!(t.status.success(), "send: {}", text(&t.stderr));
    let r = finish(rx, 10, "slipstream recv");
    assert!(r.status.success(), "recv: {}", text(&r.stderr));
    assert!(text(&r.stderr).contains("verified"), "{}", text(&r.stderr));
    same_file(&input, &out);

    // Kernel TCP. (iperf3's receiver stops reading once the sender has written its last
    // byte, so its -F output is not a byte-exact copy: count what its receiver reports.)
    if have("iperf3", "iperf3") {
        let srv = spawn(in_ns(b, &["iperf3", "-s", "-1", "-p", "9401"]));
        std::thread::sleep(Duration::from_millis(300));
        let n = data.len().to_string();
        let cli = spawn(in_ns(
            a,
            &["iperf3", "-c", &addr, "-p", "9401", "-n", &n, "--json"],
        ));
        let c = finish(cli, 60, "iperf3 client");
        assert!(c.status.success(), "iperf3 -c: {}", text(&c.stdout));
        let s = finish(srv, 10, "iperf3 server");
        assert!(s.status.success(), "iperf3 -s: {}", text(&s.stdout));
        let v: serde_json::Value = serde_json::from_slice(&c.stdout).unwrap();
        let got = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        assert!(
            got > data.len() as u64 / 2,
            "the TCP receiver got {got} bytes"
        );
    }

    // SRT between two libsrt peers.
    if have("srt-file-transmit", "srt-tools") {
        // The receiver writes into a directory, naming the file after the stream id (the
        // sender's file name).
        // libsrt's file receiver has been seen (once in many runs) to end with success and
        // an empty file; such a run is shown and tried once more, a second one fails.
        let out = dir.join("srt");
        for attempt in 1..=2 {
            let _ = std::fs::remove_dir_all(&out);
            std::fs::create_dir_all(&out).unwrap();
            let rx = spawn(in_ns(
                b,
                &[
                    "srt-file-transmit",
                    "srt://:9402",
                    &format!("file://{}/", out.display()),
                ],
            ));
            std::thread::sleep(Duration::from_millis(300));
            let tx = spawn(in_ns(
                a,
                &[
                    "srt-file-transmit",
                    &format!("file://{}", input.display()),
                    &format!("srt://{addr}:9402"),
                ],
            ));
            let t = finish(tx, 60, "srt-file-transmit sender");
            assert!(t.status.success(), "srt send: {}", text(&t.stderr));
            let r = finish(rx, 20, "srt-file-transmit receiver");
            assert!(r.status.success(), "srt recv: {}", text(&r.stderr));
            let got = std::fs::metadata(out.join("in.bin")).map_or(0, |m| m.len());
            if attempt == 1 && got == 0 {
                eprintln!(
                    "libsrt's receiver ended with an empty file; trying once more.\n\
                     sender: {}\nreceiver: {}",
                    text(&t.stderr),
                    text(&r.stderr)
                );
                continue;
            }
            same_file(&input, &out.join("in.bin"));
            break;
        }
    }

    // The emulator really dropped and reordered packets on the way.
    let stats = slipstream(&["netem", "stats", &name, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert!(v["a_to_b"]["lost"].as_u64().unwrap() > 0, "{v}");
    assert!(v["a_to_b"]["reordered"].as_u64().unwrap() > 0, "{v}");
    drop(emu);
    let _ = std::fs::remove_dir_all(&dir);
}

/// libsrt's file sender paces at the receive speed slipstream's ACKs report, and at 1 % loss
/// hardly climbs above what it read in the first ACKs. A report of the average over its
/// window-limited start held it at a few packets per round trip: 8 MB took 6–36 s at 50 ms
/// and 50 MB up to three minutes. Now most runs take a few seconds, but libsrt's controller
/// still spirals down in some (it cuts its rate at loss reports while its few packets in
/// flight make the loss ratio look high; up to 30 s for 8 MB in these runs, where a libsrt
/// receiver, which reports several times the link rate, gives 0.6–2 s). Timing is the
/// benchmark's business (docs/benchmarks.md); here the transfer must complete byte-exact.
#[test]
fn libsrt_file_sender_to_slipstream_over_lossy_paths() {
    if !root_test("libsrt_file_sender_to_slipstream_over_lossy_paths") {
        return;
    }
    let _serial = serial();
    if !have("srt-file-transmit", "srt-tools") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("slipstream-libsrt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (input, _) = test_input(&dir, 11);
    let paths: [&[&str]; 2] = [
        LOSSY_10MS,
        &["--rate", "1gbit", "--delay", "25ms", "--loss", "1%"],
    ];
    for (i, opts) in paths.iter().enumerate() {
        let name = format!("ls{i}{}", std::process::id());
        let emu = Emu::up(&name, opts);
        let (a, b, addr) = (&emu.a.0, &emu.b.0, emu.b.1.clone());
        // libsrt sends its SHUTDOWN once; when the path drops it (1 % of the time) the
        // receiver cannot tell the end of the stream from a vanished peer and must fail
        // (libsrt offers no digest). Only that failure earns a second attempt.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let out = dir.join(format!("out{i}-{attempt}"));
            std::fs::create_dir_all(&out).unwrap();
            // OUT named: srt-file-transmit leaves its stream id out now and then (see
            // interop.rs, file_srt_file_transmit_sends_to_slipstream).
            let rx = spawn_recv(b, 9403, &out.join("in.bin"));
            std::thread::sleep(Duration::from_millis(300));
            let started = std::time::Instant::now();
            let tx = spawn(in_ns(
                a,
                &[
                    "srt-file-transmit",
                    &format!("file://{}", input.display()),
                    &format!("srt://{addr}:9403"),
                ],
            ));
            let t = finish(tx, 90, &format!("srt-file-transmit sender over {opts:?}"));
            let took = started.elapsed();
            assert!(t.status.success(), "srt send: {}", text(&t.stderr));
            let r = finish(rx, 10, "slipstream recv");
            let err = text(&r.stderr);
            eprintln!("libsrt -> slipstream over {opts:?}: {took:.2?} (attempt {attempt})");
            if !r.status.success() && err.contains("idle timeout") && attempt == 1 {
                continue;
            }
            assert!(r.status.success(), "recv over {opts:?}: {err}");
            assert!(err.contains("UNVERIFIED"), "{err}");
            same_file(&input, &out.join("in.bin"));
            break;
        }
        drop(emu);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
