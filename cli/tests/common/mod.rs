//! Helpers shared by the integration tests that need root or read tool output.
#![allow(dead_code)]

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Lossy UTF-8 of a process's output.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether the tests run in CI (`CI=true`), where nothing they need may be skipped.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Whether a root-only test runs: as root, or in CI (where it then fails without root).
/// Elsewhere it says what it skips.
pub fn root_test(name: &str) -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| text(&o.stdout).trim() == "0");
    if !root && !ci() {
        eprintln!("skipping {name}: needs root (network namespaces, TUN devices); runs in CI");
    }
    root || ci()
}

/// `ip netns list`.
pub fn netns_list() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output();
    out.map(|o| text(&o.stdout)).unwrap_or_default()
}

/// A child process whose stdout and stderr are drained while it runs, so that a chatty tool
/// (srt-file-transmit prints a line per chunk it reads after its peer's shutdown) never blocks
/// on a full pipe. Killed when dropped: a failing test leaves no process behind.
pub struct Proc {
    child: Child,
    name: String,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command) -> Proc {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let out = child.stdout.take().map(drain);
        let err = child.stderr.take().map(drain);
        Proc {
            child,
            name: name.to_string(),
            out,
            err,
        }
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends it signal `sig`.
    pub fn signal(&self, sig: i32) {
        let _ = Command::new("kill")
            .args([format!("-{sig}"), self.child.id().to_string()])
            .status();
    }

    /// Waits at most `limit`: the output, or an error naming the process with what it printed.
    pub fn finish(mut self, limit: Duration) -> Result<Output, String> {
        let end = Instant::now() + limit;
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break Some(st);
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let join = |h: Option<JoinHandle<Vec<u8>>>| h.map(|h| h.join().unwrap_or_default());
        let stdout = join(self.out.take()).unwrap_or_default();
        let stderr = join(self.err.take()).unwrap_or_default();
        match status {
            Some(status) => Ok(Output {
                status,
                stdout,
                stderr,
            }),
            None => Err(format!(
                "{} did not finish in {limit:?}; it printed:\n{}{}",
                self.name,
                text(&stdout),
                text(&stderr)
            )),
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A UDP port free on loopback a moment ago.
pub fn free_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A fresh, empty directory for one test: `slipstream-{group}-{name}-{pid}` in the temporary
/// directory.
pub fn tmpdir(group: &str, name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("slipstream-{group}-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `slipstream send FILE srt://127.0.0.1:PORT --quiet EXTRA...` (a file or a directory) to a
/// local listener, started after a moment for the listener to bind; stderr piped.
pub fn spawn_send(file: &std::path::Path, port: u16, extra: &[&str]) -> Child {
    std::thread::sleep(Duration::from_millis(200));
    Command::new(env!("CARGO_BIN_EXE_slipstream"))
        .arg("send")
        .arg(file)
        .arg(format!("srt://127.0.0.1:{port}"))
        .arg("--quiet")
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}
