//! Interoperability with Haivision's srt-tools (libsrt 1.5.1), both directions, byte-exact:
//! file mode with `srt-file-transmit`, live mode with `srt-live-transmit`, and the clear
//! rejection of a peer that asks for encryption. In CI a missing tool is a failure; elsewhere
//! these tests skip with a message.

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{text, Proc};

const SLIPSTREAM: &str = env!("CARGO_BIN_EXE_slipstream");
/// Each test runs two busy processes; on a 2-core machine they run one at a time so that a
/// starved peer does not pass for an interop failure.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A UDP port free on loopback now, as the kernel picks one: a fixed range would lie among
/// the ephemeral ports other sockets are given (32768-60999 by default), and a peer bound
/// there first makes a test fail for nothing.
fn port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free UDP port on loopback")
}

/// Whether `tool` can run; in CI its absence fails the test.
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !ok {
        assert!(
            std::env::var("CI").is_err(),
            "{tool} is missing in CI (apt-get install srt-tools)"
        );
        eprintln!("skipping: {tool} not installed (apt-get install srt-tools)");
    }
    ok
}

/// Waits up to `limit`; returns (success, stdout+stderr) or (false, why).
fn finish(p: Proc, limit: Duration) -> (bool, String) {
    match p.finish(limit) {
        Ok(o) => (o.status.success(), text(&o.stdout) + &text(&o.stderr)),
        Err(e) => (false, e),
    }
}

/// The first and last lines of a long output (srt-file-transmit can log a line per loop
/// for as long as it runs).
fn clip(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    if lines.len() <= 40 {
        return s.to_string();
    }
    format!(
        "{}\n[... {} lines ...]\n{}",
        lines[..20].join("\n"),
        lines.len() - 40,
        lines[lines.len() - 20..].join("\n")
    )
}

/// A scratch directory, removed when the test ends (kept, and named, when it fails).
struct Scratch(PathBuf);

impl std::ops::Deref for Scratch {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("scratch files kept in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn scratch(name: &str) -> Scratch {
    let d = std::env::temp_dir().join(format!("slipstream-interop-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch dir");
    Scratch(d)
}

fn random_file(path: &Path, len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ len as u64;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(path, &data).expect("write input");
    data
}

#[test]
fn file_slipstream_sends_to_srt_file_transmit() {
    let _serial = serial();
    if !have("srt-file-transmit") {
        return;
    }
    let dir = scratch("s2srt");
    let data = random_file(&dir.join("payload.bin"), 8_000_000);
    std::fs::create_dir_all(dir.join("out")).unwrap();
    let p = port();
    let rx = Proc::spawn(
        "srt-file-transmit",
        Command::new("srt-file-transmit")
            .arg(format!("srt://:{p}"))
            .arg(format!("file://{}/", dir.join("out").display())),
    );
    std::thread::sleep(Duration::from_millis(400));
    let tx = Proc::spawn(
        "slipstream send",
        Command::new(SLIPSTREAM)
            .args(["send", "--quiet"])
            .arg(dir.join("payload.bin"))
            .arg(format!("srt://127.0.0.1:{p}")),
    );
    let (ok, out) = finish(tx, Duration::from_secs(30));
    assert!(ok, "slipstream send failed:\n{}", clip(&out));
    // Normally libsrt exits within milliseconds of our shutdown; if a loaded machine drops
    // that datagram it notices the silence after its 5 s idle timeout instead.
    let (ok, out) = finish(rx, Duration::from_secs(20));
    assert!(ok, "srt-file-transmit failed:\n{}", clip(&out));
    let got = std::fs::read(dir.join("out/payload.bin"))
        .expect("srt-file-transmit wrote the file under the stream id");
    assert!(
        got == data,
        "content differs ({} of {} bytes)",
        got.len(),
        data.len()
    );
}

/// srt-file-transmit (libsrt 1.5.1) sends a file to `slipstream recv`, byte-exact. OUT is
/// named, not a directory to be filled under the sender's stream id: srt-file-transmit
/// leaves the stream id out of its conclusion handshake now and then (2 runs in 30 under
/// load here; its 88-byte conclusion carried HSREQ and the congestion type only, where the
/// others carried the file name too), and slipstream then rightly refuses to guess a name.
/// Reading libsrt's stream id is tested on a captured conclusion (proto/tests/captures.rs).
#[test]
fn file_srt_file_transmit_sends_to_slipstream() {
    let _serial = serial();
    if !have("srt-file-transmit") {
        return;
    }
    let dir = scratch("srt2s");
    let data = random_file(&dir.join("movie.ts"), 8_000_000);
    std::fs::create_dir_all(dir.join("out")).unwrap();
    let p = port();
    let rx = Proc::spawn(
        "slipstream recv",
        Command::new(SLIPSTREAM)
            .args(["recv", "--quiet"])
            .arg(format!("srt://:{p}"))
            .arg(dir.join("out/movie.ts")),
    );
    std::thread::sleep(Duration::from_millis(400));
    let tx = Proc::spawn(
        "srt-file-transmit",
        Command::new("srt-file-transmit")
            .arg(format!("file://{}", dir.join("movie.ts").display()))
            .arg(format!("srt://127.0.0.1:{p}")),
    );
    let (ok, out) = finish(tx, Duration::from_secs(30));
    if !ok {
        // What the receiver saw tells which end broke off.
        let (_, rx_out) = finish(rx, Duration::from_secs(1));
        panic!(
            "srt-file-transmit failed:\n{}\nslipstream recv printed:\n{}",
            clip(&out),
            clip(&rx_out)
        );
    }
    let (ok, out) = finish(rx, Duration::from_secs(15));
    assert!(ok, "slipstream recv failed:\n{}", clip(&out));
    let got = std::fs::read(dir.join("out/movie.ts")).expect("slipstream wrote OUT");
    assert!(
        got == data,
        "content differs ({} of {} bytes)",
        got.len(),
        data.len()
    );
}

/// Sends `n` numbered 1316-byte datagrams to `to`, paced, and collects what arrives at `sink`.
fn pump_live(to: u16, sink: &UdpSocket, n: u32) -> Vec<Vec<u8>> {
    let src = UdpSocket::bind("127.0.0.1:0").unwrap();
    sink.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 2048];
    for i in 0..n {
        let mut m = vec![(i % 251) as u8; 1316];
        m[..4].copy_from_slice(&i.to_be_bytes());
        src.send_to(&m, ("127.0.0.1", to)).unwrap();
        std::thread::sleep(Duration::from_micros(1500));
        while let Ok(k) = sink.recv(&mut buf) {
            got.push(buf[..k].to_vec());
            if sink.set_nonblocking(true).is_err() {
                break;
            }
        }
        sink.set_nonblocking(false).unwrap();
    }
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end && got.len() < n as usize {
        if let Ok(k) = sink.recv(&mut buf) {
            got.push(buf[..k].to_vec());
        }
    }
    got
}

fn check_live(got: &[Vec<u8>], n: u32) {
    assert_eq!(
        got.len(),
        n as usize,
        "received {} of {n} datagrams",
        got.len()
    );
    for (i, m) in got.iter().enumerate() {
        assert_eq!(m.len(), 1316, "datagram {i} has {} bytes", m.len());
        assert_eq!(
            u32::from_be_bytes(m[..4].try_into().unwrap()),
            i as u32,
            "out of order at {i}"
        );
        assert!(
            m[4..].iter().all(|&b| b == (i % 251) as u8),
            "datagram {i} corrupted"
        );
    }
}

#[test]
fn live_srt_live_transmit_to_slipstream() {
    let _serial = serial();
    if !have("srt-live-transmit") {
        return;
    }
    let (p, input) = (port(), port());
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let out = sink.local_addr().unwrap().port();
    let _rx = Proc::spawn(
        "slipstream live",
        Command::new(SLIPSTREAM)
            .args(["live", "--quiet"])
            .arg(format!("srt://:{p}?mode=listener"))
            .arg(format!("udp://127.0.0.1:{out}")),
    );
    std::thread::sleep(Duration::from_millis(300));
    let _tx = Proc::spawn(
        "srt-live-transmit",
        Command::new("srt-live-transmit")
            .arg(format!("udp://:{input}"))
            .arg(format!("srt://127.0.0.1:{p}?mode=caller&streamid=camera-7")),
    );
    std::thread::sleep(Duration::from_millis(700));
    check_live(&pump_live(input, &sink, 1000), 1000);
}

#[test]
fn live_slipstream_to_srt_live_transmit() {
    let _serial = serial();
    if !have("srt-live-transmit") {
        return;
    }
    let (p, input) = (port(), port());
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let out = sink.local_addr().unwrap().port();
    let _rx = Proc::spawn(
        "srt-live-transmit",
        Command::new("srt-live-transmit")
            .arg(format!("srt://:{p}?mode=listener"))
            .arg(format!("udp://127.0.0.1:{out}")),
    );
    std::thread::sleep(Duration::from_millis(300));
    let _tx = Proc::spawn(
        "slipstream live",
        Command::new(SLIPSTREAM)
            .args(["live", "--quiet"])
            .arg(format!("udp://:{input}"))
            .arg(format!("srt://127.0.0.1:{p}?streamid=camera-7")),
    );
    std::thread::sleep(Duration::from_millis(700));
    check_live(&pump_live(input, &sink, 1000), 1000);
}

/// A caller that asks for encryption gets SRT's "password required or unexpected" rejection at
/// once instead of a time-out.
#[test]
fn encryption_request_is_rejected_clearly() {
    let _serial = serial();
    if !have("srt-live-transmit") {
        return;
    }
    let p = port();
    let _rx = Proc::spawn(
        "slipstream live",
        Command::new(SLIPSTREAM)
            .args(["live", "--quiet"])
            .arg(format!("srt://:{p}?mode=listener"))
            .arg(format!("udp://127.0.0.1:{}", port())),
    );
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let tx = Proc::spawn(
        "srt-live-transmit",
        Command::new("srt-live-transmit")
            .args(["-a", "no", "-t", "3"])
            .arg(format!("udp://:{}", port()))
            .arg(format!(
                "srt://127.0.0.1:{p}?mode=caller&passphrase=0123456789abcdef"
            )),
    );
    let (_, out) = finish(tx, Duration::from_secs(10));
    let lower = out.to_lowercase();
    assert!(
        lower.contains("reject") || lower.contains("password"),
        "no rejection seen:\n{out}"
    );
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "rejection took {:?}",
        t0.elapsed()
    );
}
