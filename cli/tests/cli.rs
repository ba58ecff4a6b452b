//! The `slipstream` binary end to end on loopback: exit codes, files, reports.

mod common;

use common::{free_port, spawn_send};

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_slipstream");

fn tmpdir(name: &str) -> PathBuf {
    common::tmpdir("cli", name)
}

fn write_input(dir: &Path, len: usize) -> (PathBuf, Vec<u8>) {
    let data: Vec<u8> = (0..len)
        .map(|i| (i % 251) as u8 ^ (i >> 12) as u8)
        .collect();
    let p = dir.join("input.bin");
    std::fs::write(&p, &data).unwrap();
    (p, data)
}

fn spawn_recv(port: u16, out: &Path, extra: &[&str]) -> Child {
    Command::new(BIN)
        .args(["recv", &format!("srt://127.0.0.1:{port}?mode=listener")])
        .arg(out)
        .args(["--quiet", "--accept-timeout", "10"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn send(file: &Path, uri: &str, extra: &[&str]) -> Output {
    // Give the listener a moment to bind.
    std::thread::sleep(Duration::from_millis(200));
    Command::new(BIN)
        .arg("send")
        .arg(file)
        .arg(uri)
        .arg("--quiet")
        .args(extra)
        .output()
        .unwrap()
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn send_and_recv_a_file() {
    let dir = tmpdir("basic");
    let (input, data) = write_input(&dir, 3 << 20);
    let out = dir.join("output.bin");
    let json = dir.join("stats.json");
    let port = free_port();
    let tx_json = dir.join("tx.json");
    let rx = spawn_recv(port, &out, &["--stats-json", json.to_str().unwrap()]);
    let tx = send(
        &input,
        &format!("srt://127.0.0.1:{port}"),
        &["--stats-json", tx_json.to_str().unwrap()],
    );
    let rx = rx.wait_with_output().unwrap();
    assert!(tx.status.success(), "send failed: {}", text(&tx.stderr));
    assert!(rx.status.success(), "recv failed: {}", text(&rx.stderr));
    assert!(std::fs::read(&out).unwrap() == data, "output differs");
    let err = text(&rx.stderr);
    assert!(err.contains("integrity: verified"), "{err}");
    assert!(text(&tx.stderr).contains("Gbit/s"));
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(stats["bytes"], serde_json::json!(data.len()));
    assert_eq!(stats["verified"], serde_json::json!(true));
    assert!(stats["connection"]["pkts_recv"].as_u64().unwrap() > 0);
    let tx_stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tx_json).unwrap()).unwrap();
    assert_eq!(tx_stats["source"], "mapped", "{tx_stats}");

    // Existing output is not replaced without --force.
    let port = free_port();
    let rx = spawn_recv(port, &out, &[]);
    let rx = rx.wait_with_output().unwrap();
    assert!(!rx.status.success());
    assert!(text(&rx.stderr).contains("--force"), "{}", text(&rx.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn recv_into_directory_names_file_after_stream_id() {
    let dir = tmpdir("dir");
    let (input, data) = write_input(&dir, 200_000);
    let outdir = dir.join("incoming");
    std::fs::create_dir_all(&outdir).unwrap();
    let port = free_port();
    let rx = spawn_recv(port, &outdir, &["--cc", "file", "--mss", "1400"]);
    let tx = send(
        &input,
        &format!("srt://127.0.0.1:{port}?streamid=..%2Fsneaky.bin"),
        &[],
    );
    let rx = rx.wait_with_output().unwrap();
    assert!(tx.status.success(), "{}", text(&tx.stderr));
    assert!(rx.status.success(), "{}", text(&rx.stderr));
    assert!(std::fs::read(outdir.join("sneaky.bin")).unwrap() == data);
    assert!(!dir.join("sneaky.bin").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn failures_exit_non_zero() {
    let dir = tmpdir("fail");
    let (input, _) = write_input(&dir, 1000);
    // Nobody listening: the sender times out.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let tx = send(&input, &format!("srt://127.0.0.1:{port}"), &[]);
    assert!(!tx.status.success());
    assert!(
        text(&tx.stderr).contains("timed out"),
        "{}",
        text(&tx.stderr)
    );
    // Unknown congestion control lists the names.
    let tx = send(&input, "srt://127.0.0.1:9", &["--cc", "nope"]);
    assert!(!tx.status.success());
    assert!(
        text(&tx.stderr).contains("available: "),
        "{}",
        text(&tx.stderr)
    );
    // Missing input file.
    let tx = send(&dir.join("missing"), "srt://127.0.0.1:9", &[]);
    assert!(!tx.status.success());
    // Bad URI and bad netem spec.
    let tx = send(&input, "srt://127.0.0.1", &[]);
    assert!(!tx.status.success());
    let tx = send(&input, "srt://127.0.0.1:9", &["--netem", "loss=lots"]);
    assert!(!tx.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn send_through_netem_option() {
    let dir = tmpdir("netem");
    let (input, data) = write_input(&dir, 300_000);
    let out = dir.join("out.bin");
    let port = free_port();
    let rx = spawn_recv(port, &out, &["--netem", "loss=2%,delay=2ms"]);
    let tx = send(
        &input,
        &format!("srt://127.0.0.1:{port}"),
        &["--netem", "loss=2%,delay=20ms,seed=3"],
    );
    let sender_done = std::time::Instant::now();
    let rx = rx.wait_with_output().unwrap();
    assert!(tx.status.success(), "{}", text(&tx.stderr));
    assert!(rx.status.success(), "{}", text(&rx.stderr));
    assert!(std::fs::read(&out).unwrap() == data);
    // The sender's emulated link is drained before it exits: its last packets (the
    // acknowledgement of the verdict, SHUTDOWN) reach the receiver, which would otherwise
    // wait out its 5 s idle timeout.
    assert!(
        sender_done.elapsed() < Duration::from_secs(3),
        "the receiver ended {:?} after the sender",
        sender_done.elapsed()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file relayed in live mode arrives whole: the sender holds its input back while its
/// buffer is full (nothing that can still play is dropped), and closes only once all is
/// acknowledged and played; the `--once` listener exits 0 when the sender closes.
#[test]
fn live_relay_file_to_srt_to_file() {
    let dir = tmpdir("live");
    let (input, data) = write_input(&dir, 1316 * 3000 + 77);
    let out = dir.join("live-out.ts");
    let port = free_port();
    // Listener side: SRT in, file out.
    let rx = Command::new(BIN)
        .args(["live", &format!("srt://127.0.0.1:{port}?mode=listener")])
        .arg(format!("file://{}", out.display()))
        .args(["--quiet", "--once", "--duration", "30"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let tx = Command::new(BIN)
        .arg("live")
        .arg(format!("file://{}", input.display()))
        .arg(format!("srt://127.0.0.1:{port}"))
        .arg("--quiet")
        .output()
        .unwrap();
    let rx = rx.wait_with_output().unwrap();
    let (tx_err, rx_err) = (text(&tx.stderr), text(&rx.stderr));
    assert!(tx.status.success(), "{tx_err}");
    assert!(rx.status.success(), "{rx_err}");
    let got = std::fs::read(&out).unwrap();
    assert!(
        got == data,
        "{} of {} bytes relayed, or different; receiver: {rx_err}; sender: {tx_err}",
        got.len(),
        data.len()
    );
    // The sender cannot vouch for what the receiver gave up after acknowledging it.
    assert!(
        tx_err.contains("nothing dropped by this sender"),
        "{tx_err}"
    );
    assert!(rx_err.contains("nothing dropped or lost"), "{rx_err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A file truncated while it is being sent (mapped) fails both ends, promptly and saying so:
/// the sender with the truncation, the receiver without writing the output.
#[test]
fn a_file_truncated_while_sent_fails_both_ends() {
    let dir = tmpdir("truncated");
    let (input, _) = write_input(&dir, 24 << 20);
    let out = dir.join("out.bin");
    let port = free_port();
    let rx = spawn_recv(port, &out, &[]);
    std::thread::sleep(Duration::from_millis(200));
    // 24 MiB at 100 Mbit/s: about two seconds; cut it to 1 MiB after half a second.
    let tx = Command::new(BIN)
        .arg("send")
        .arg(&input)
        .arg(format!("srt://127.0.0.1:{port}"))
        .args(["--quiet", "--netem", "rate=100mbit"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    std::fs::OpenOptions::new()
        .write(true)
        .open(&input)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let t0 = std::time::Instant::now();
    let tx = tx.wait_with_output().unwrap();
    let rx = rx.wait_with_output().unwrap();
    let (tx_err, rx_err) = (text(&tx.stderr), text(&rx.stderr));
    assert!(!tx.status.success(), "the sender succeeded: {tx_err}");
    assert!(
        tx_err.contains("shrank") || tx_err.contains("changed size"),
        "{tx_err}"
    );
    assert!(!rx.status.success(), "the receiver succeeded: {rx_err}");
    assert!(!out.exists(), "output written");
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The sender's SIGBUS handler (for its mapped file) leaves other bus errors alone: one sent
/// from outside still kills it.
#[test]
fn a_sigbus_from_outside_still_kills_the_sender() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tmpdir("sigbus");
    let (input, _) = write_input(&dir, 1000);
    // Nobody answers: the sender waits for its handshake.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    // Without a core dump where the shell allows one.
    let mut tx = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -c 0; exec "$0" send "$1" "$2" --quiet"#)
        .arg(BIN)
        .arg(&input)
        .arg(format!("srt://127.0.0.1:{port}"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Long enough for the handler to be installed.
    std::thread::sleep(Duration::from_millis(500));
    let pid = tx.id().to_string();
    assert!(Command::new("kill")
        .args(["-BUS", &pid])
        .status()
        .unwrap()
        .success());
    let status = tx.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGBUS), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `recv` cannot write is reported before it listens (no sender needed), and a
/// `--stats-json` path that cannot be written fails either command before it starts.
#[test]
fn unwritable_outputs_fail_before_anything_connects() {
    let dir = tmpdir("unwritable");
    let (input, _) = write_input(&dir, 1000);
    let t0 = std::time::Instant::now();
    let rx = Command::new(BIN)
        .args(["recv", "srt://127.0.0.1:9?mode=listener"])
        .arg(dir.join("missing-dir").join("out.bin"))
        .args(["--quiet", "--accept-timeout", "30"])
        .output()
        .unwrap();
    assert!(!rx.status.success());
    assert!(
        text(&rx.stderr).contains("cannot write") && text(&rx.stderr).contains("missing-dir"),
        "{}",
        text(&rx.stderr)
    );
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "recv waited for a sender before checking its output"
    );

    let bad_json = dir.join("no-such-dir").join("s.json");
    let rx = Command::new(BIN)
        .args(["recv", "srt://127.0.0.1:9?mode=listener"])
        .arg(dir.join("out.bin"))
        .args(["--quiet", "--accept-timeout", "30", "--stats-json"])
        .arg(&bad_json)
        .output()
        .unwrap();
    assert!(!rx.status.success());
    assert!(
        text(&rx.stderr).contains("--stats-json"),
        "{}",
        text(&rx.stderr)
    );
    // The sender too, before it tries to connect (nobody listens on port 9).
    let tx = send(
        &input,
        "srt://127.0.0.1:9",
        &["--stats-json", bad_json.to_str().unwrap()],
    );
    assert!(!tx.status.success());
    let err = text(&tx.stderr);
    assert!(
        err.contains("--stats-json") && !err.contains("timed out"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `recv` writes into what is not a regular file (a FIFO here, `/dev/null` alike) instead of
/// renaming a file over it, and `-` is standard output; both byte-exact and verified.
#[test]
fn recv_writes_into_a_fifo_and_to_stdout() {
    let dir = tmpdir("fifo");
    let (input, data) = write_input(&dir, 1 << 20);
    let fifo = dir.join("pipe");
    mkfifo(&fifo);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    // Through a symbolic link, as `/dev/stdout` is one: the FIFO is written into.
    let link = dir.join("link");
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    let port = free_port();
    let rx = spawn_recv(port, &link, &[]);
    let tx = send(&input, &format!("srt://127.0.0.1:{port}"), &[]);
    let rx = rx.wait_with_output().unwrap();
    assert!(tx.status.success(), "{}", text(&tx.stderr));
    assert!(rx.status.success(), "{}", text(&rx.stderr));
    assert!(text(&rx.stderr).contains("integrity: verified"));
    assert!(
        reader.join().unwrap() == data,
        "the FIFO's reader got other bytes"
    );
    assert!(!dir.join("pipe.part").exists() && !dir.join("link.part").exists());
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());

    let port = free_port();
    let rx = Command::new(BIN)
        .args([
            "recv",
            &format!("srt://127.0.0.1:{port}?mode=listener"),
            "-",
        ])
        .args(["--quiet", "--accept-timeout", "10"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The sender waits for the receiver's verdict, which comes once stdout took everything:
    // stdout is drained while it runs.
    std::thread::sleep(Duration::from_millis(200));
    let tx = spawn_send(&input, port, &[]);
    let rx = rx.wait_with_output().unwrap();
    let tx = tx.wait_with_output().unwrap();
    assert!(tx.status.success(), "{}", text(&tx.stderr));
    assert!(rx.status.success(), "{}", text(&rx.stderr));
    assert!(rx.stdout == data, "stdout got {} bytes", rx.stdout.len());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The receiver's verdict ends the sender's run: a receiver whose writes fail near the end
/// (a file size limit stands in for a full disk: the same failed write, EFBIG instead of
/// ENOSPC) makes both ends exit non-zero, the sender with the receiver's reason, and leaves
/// no file; a name that exists without --force is refused to the sender too.
#[test]
fn the_receivers_failure_is_the_senders_failure() {
    let dir = tmpdir("verdict");
    let (input, _) = write_input(&dir, 3 << 20);
    let out = dir.join("out.bin");
    let port = free_port();
    // 5,800 blocks of 512 bytes: 64 KiB short of the file.
    let rx = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f 6016; exec '{BIN}' recv 'srt://127.0.0.1:{port}?mode=listener' \
             '{}' --quiet --accept-timeout 10",
            out.display()
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let tx = send(&input, &format!("srt://127.0.0.1:{port}"), &[]);
    let rx = rx.wait_with_output().unwrap();
    let (tx_err, rx_err) = (text(&tx.stderr), text(&rx.stderr));
    assert!(!rx.status.success(), "recv: {rx_err}");
    assert!(
        !tx.status.success(),
        "send exited 0 though the receiver failed: {tx_err}"
    );
    assert!(
        tx_err.contains("receiver: ") && tx_err.contains("too large"),
        "the sender does not give the receiver's reason: {tx_err}"
    );
    // No final file; what was written is kept for a resume once there is room, and the
    // receiver says so.
    assert!(!out.exists());
    assert!(
        dir.join("out.bin.part").exists() && rx_err.contains("resumes"),
        "{rx_err}"
    );

    // Into a directory, a name that exists is refused, to the sender too.
    let incoming = dir.join("incoming");
    std::fs::create_dir_all(&incoming).unwrap();
    std::fs::write(incoming.join("input.bin"), b"keep me").unwrap();
    let port = free_port();
    let rx = spawn_recv(port, &incoming, &[]);
    let tx = send(&input, &format!("srt://127.0.0.1:{port}"), &[]);
    let rx = rx.wait_with_output().unwrap();
    assert!(!rx.status.success());
    assert!(!tx.status.success());
    assert!(
        text(&tx.stderr).contains("receiver: ") && text(&tx.stderr).contains("--force"),
        "{}",
        text(&tx.stderr)
    );
    assert_eq!(
        std::fs::read(incoming.join("input.bin")).unwrap(),
        b"keep me"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A receiver killed after it acknowledged everything but before it committed the file
/// (here stuck writing into a FIFO nobody reads) leaves the sender without a verdict: the
/// sender exits non-zero instead of reporting success.
#[test]
fn a_receiver_killed_after_the_last_acknowledgement_fails_the_sender() {
    let dir = tmpdir("killed-rx");
    let (input, _) = write_input(&dir, 1 << 20);
    let fifo = dir.join("pipe");
    mkfifo(&fifo);
    // Opened for reading (so the receiver's open succeeds) and never read.
    let holder = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let f = std::fs::File::open(fifo).unwrap();
            std::thread::sleep(Duration::from_secs(20));
            drop(f);
        })
    };
    let port = free_port();
    let mut rx = spawn_recv(port, &fifo, &[]);
    let tx = spawn_send(&input, port, &[]);
    std::thread::sleep(Duration::from_millis(2000));
    rx.kill().unwrap();
    let _ = rx.wait();
    let t0 = std::time::Instant::now();
    let tx = tx.wait_with_output().unwrap();
    assert!(
        !tx.status.success(),
        "send exited 0 though the receiver never committed: {}",
        text(&tx.stderr)
    );
    let err = text(&tx.stderr);
    assert!(err.contains("verdict"), "{err}");
    // Why: the receiver stopped answering, not a verdict wait that ran out.
    assert!(
        err.contains("stopped responding") && !err.contains("120 s"),
        "{err}"
    );
    assert!(t0.elapsed() < Duration::from_secs(12));
    drop(holder);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Sends a signal to a child by name ("INT", "TERM", "KILL").
fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

/// Waits until `path` holds at least `n` bytes (a receiver's part file growing), at most
/// `secs` seconds.
fn wait_for_len(path: &Path, n: u64, secs: u64) {
    let t0 = std::time::Instant::now();
    while std::fs::metadata(path).map_or(0, |m| m.len()) < n {
        assert!(
            t0.elapsed() < Duration::from_secs(secs),
            "{} never reached {n} bytes",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The bytes a resumed sender said the receiver held ("resumed: the receiver held the
/// first N bytes"), 0 if it did not resume.
fn resumed_from(stderr: &str) -> u64 {
    stderr
        .split("held the first ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Runs a whole transfer of `input` into `out` and checks it byte for byte; returns the
/// sender's stderr.
fn transfer_whole(input: &Path, out: &Path, data: &[u8]) -> String {
    let port = free_port();
    let rx = spawn_recv(port, out, &[]);
    let tx = send(input, &format!("srt://127.0.0.1:{port}"), &[]);
    let rx = rx.wait_with_output().unwrap();
    let tx_err = text(&tx.stderr);
    assert!(tx.status.success(), "send: {tx_err}");
    assert!(rx.status.success(), "recv: {}", text(&rx.stderr));
    assert!(std::fs::read(out).unwrap() == data, "the output differs");
    assert!(!part(out).exists(), "the part file outlived success");
    tx_err
}

fn part(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

/// SIGINT stops either end at once and tells the peer (no wait for its 5 s idle timeout);
/// the receiver keeps what it has, the sender says how to resume, both exit 130 (143 for
/// SIGTERM), and the same commands again finish the file byte for byte, sending only what
/// was missing.
#[test]
fn signals_stop_both_ends_and_the_same_command_resumes() {
    let dir = tmpdir("signals");
    let (input, data) = write_input(&dir, 48 << 20);
    let out = dir.join("out.bin");
    for (who, sig, code) in [("sender", "INT", 130), ("receiver", "TERM", 143)] {
        let _ = std::fs::remove_file(&out);
        let port = free_port();
        let rx = spawn_recv(port, &out, &[]);
        std::thread::sleep(Duration::from_millis(200));
        let tx = spawn_send(&input, port, &["--max-rate", "100mbit"]);
        wait_for_len(&part(&out), 20 << 20, 30);
        let t0 = std::time::Instant::now();
        signal(if who == "sender" { &tx } else { &rx }, sig);
        let (tx, rx) = (
            tx.wait_with_output().unwrap(),
            rx.wait_with_output().unwrap(),
        );
        let (tx_err, rx_err) = (text(&tx.stderr), text(&rx.stderr));
        let stopped = if who == "sender" { &tx } else { &rx };
        assert_eq!(
            stopped.status.code(),
            Some(code),
            "{who}: {tx_err} {rx_err}"
        );
        assert!(!tx.status.success() && !rx.status.success());
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "the peer of the stopped {who} took {:?}",
            t0.elapsed()
        );
        let held = std::fs::metadata(part(&out)).unwrap().len();
        assert!(held >= 20 << 20, "{held}");
        assert!(rx_err.contains("resumes"), "{rx_err}");
        let tx_err = transfer_whole(&input, &out, &data);
        let resumed = resumed_from(&tx_err);
        assert!(
            resumed >= 16 << 20 && resumed <= held,
            "resumed from {resumed} with {held} held: {tx_err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// What the receiver holds is checked against the source chunk by chunk: a source changed
/// at its start is sent again in full, one changed in its middle from the chunk that
/// changed; never spliced.
#[test]
fn a_source_changed_between_runs_is_sent_again_from_the_change() {
    let dir = tmpdir("changed");
    let (input, mut data) = write_input(&dir, 40 << 20);
    let out = dir.join("out.bin");
    // (byte changed, where the second run must start)
    for (at, start) in [(5usize, 0u64), ((9 << 20) + 77, 8 << 20)] {
        let _ = std::fs::remove_file(&out);
        let port = free_port();
        let rx = spawn_recv(port, &out, &[]);
        std::thread::sleep(Duration::from_millis(200));
        let tx = spawn_send(&input, port, &["--max-rate", "100mbit"]);
        wait_for_len(&part(&out), 24 << 20, 30);
        signal(&tx, "INT");
        let _ = (
            tx.wait_with_output().unwrap(),
            rx.wait_with_output().unwrap(),
        );
        data[at] ^= 0x5a;
        std::fs::write(&input, &data).unwrap();
        let tx_err = transfer_whole(&input, &out, &data);
        assert_eq!(resumed_from(&tx_err), start, "change at {at}: {tx_err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The issue's resume test at full size: `kill -9` of the sender at about half of a 1 GB
/// transfer, then the same commands: byte-exact, and the second run sends at most 55 % of
/// the file. A receiver killed the same way resumes as well.
#[test]
#[ignore = "1 GB through an optimized build; scripts/test.sh runs it"]
fn a_killed_transfer_of_a_large_file_resumes_from_the_half() {
    let dir = tmpdir("resume-1g");
    let len: usize = 1 << 30;
    let (input, data) = write_input(&dir, len);
    let out = dir.join("out.bin");
    for who in ["sender", "receiver"] {
        let _ = std::fs::remove_file(&out);
        let port = free_port();
        let rx = spawn_recv(port, &out, &[]);
        std::thread::sleep(Duration::from_millis(200));
        let tx = spawn_send(&input, port, &["--max-rate", "2gbit"]);
        wait_for_len(&part(&out), len as u64 / 2, 60);
        signal(if who == "sender" { &tx } else { &rx }, "KILL");
        let (tx, rx) = (
            tx.wait_with_output().unwrap(),
            rx.wait_with_output().unwrap(),
        );
        assert!(!tx.status.success() && !rx.status.success(), "{who}");
        let tx_err = transfer_whole(&input, &out, &data);
        let resumed = resumed_from(&tx_err);
        assert!(
            resumed >= (len as u64) * 45 / 100,
            "after the {who} was killed the second run sent {} of {len} bytes: {tx_err}",
            len as u64 - resumed
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A transfer cut by SIGINT through the emulator's loss and delay resumes through them too.
#[test]
fn a_resume_crosses_a_lossy_path() {
    let dir = tmpdir("lossy-resume");
    let (input, data) = write_input(&dir, 32 << 20);
    let out = dir.join("out.bin");
    let lossy = ["--netem", "loss=1%,delay=5ms"];
    let port = free_port();
    let rx = spawn_recv(port, &out, &lossy);
    std::thread::sleep(Duration::from_millis(200));
    let mut extra = vec!["--max-rate", "100mbit"];
    extra.extend(lossy);
    let tx = spawn_send(&input, port, &extra);
    wait_for_len(&part(&out), 12 << 20, 30);
    signal(&tx, "INT");
    let (tx, rx) = (
        tx.wait_with_output().unwrap(),
        rx.wait_with_output().unwrap(),
    );
    assert_eq!(tx.status.code(), Some(130), "{}", text(&tx.stderr));
    assert!(!rx.status.success());
    let port = free_port();
    let rx = spawn_recv(port, &out, &lossy);
    let tx = send(&input, &format!("srt://127.0.0.1:{port}"), &lossy);
    let rx = rx.wait_with_output().unwrap();
    let tx_err = text(&tx.stderr);
    assert!(tx.status.success(), "{tx_err}");
    assert!(rx.status.success(), "{}", text(&rx.stderr));
    assert!(resumed_from(&tx_err) >= 8 << 20, "{tx_err}");
    assert!(std::fs::read(&out).unwrap() == data);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A receiver's --max-rate reaches the sender: 10 MB at 40 Mbit/s take two seconds.
#[test]
fn the_receivers_rate_cap_holds_the_sender() {
    let dir = tmpdir("max-rate");
    let (input, data) = write_input(&dir, 10 << 20);
    let out = dir.join("out.bin");
    let port = free_port();
    let rx = spawn_recv(port, &out, &["--max-rate", "40mbit"]);
    let t0 = std::time::Instant::now();
    let tx = send(&input, &format!("srt://127.0.0.1:{port}"), &[]);
    let secs = t0.elapsed().as_secs_f64() - 0.2;
    let rx = rx.wait_with_output().unwrap();
    assert!(tx.status.success(), "{}", text(&tx.stderr));
    assert!(rx.status.success(), "{}", text(&rx.stderr));
    assert_eq!(std::fs::read(&out).unwrap(), data);
    assert!(secs > 1.6, "10 MiB under a 40 Mbit/s cap took {secs:.2} s");
    // A bad rate is refused before anything starts.
    let o = Command::new(BIN)
        .args(["send", "x", "srt://127.0.0.1:9", "--max-rate", "fast"])
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o.stderr).contains("rate"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A real full disk at the very end (as root, in CI: the receiver writes into a tmpfs a
/// little smaller than the file): both ends fail, the sender with the receiver's "No space
/// left on device", and there is no final file.
#[test]
fn a_full_disk_at_the_end_fails_both_ends() {
    if !common::root_test("a_full_disk_at_the_end_fails_both_ends") {
        return;
    }
    let dir = tmpdir("disk-full");
    let (input, _) = write_input(&dir, 25 << 20);
    let mnt = dir.join("small");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=24m", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap()
        .success();
    assert!(mounted, "mount -t tmpfs (needs root)");
    let out = mnt.join("out.bin");
    let port = free_port();
    let rx = spawn_recv(port, &out, &[]);
    let tx = send(&input, &format!("srt://127.0.0.1:{port}"), &[]);
    let rx = rx.wait_with_output().unwrap();
    let (tx_err, rx_err) = (text(&tx.stderr), text(&rx.stderr));
    let final_exists = out.exists();
    let _ = Command::new("umount").arg(&mnt).status();
    assert!(!rx.status.success(), "recv: {rx_err}");
    assert!(
        !tx.status.success(),
        "send exited 0 on a full disk: {tx_err}"
    );
    assert!(
        tx_err.contains("receiver: ") && tx_err.contains("No space left on device"),
        "{tx_err}"
    );
    assert!(!final_exists);
    let _ = std::fs::remove_dir_all(&dir);
}
