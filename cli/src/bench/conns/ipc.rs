//! What `bench conns` and its two child processes say to each other, and how the bench drives
//! a child.
//!
//! A child writes one JSON line to its stdout when it is ready ([`Ready`]), then answers each
//! [`Cmd`] line on its stdin with exactly one JSON line: the reply type named on the command,
//! or `{"error": "..."}`. At the end of its stdin (the bench is gone) a child exits. Times are
//! CLOCK_MONOTONIC seconds ([`mono_s`]), which all processes share, so the bench may compare
//! one child's instants with the other's.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// A command to a child.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Cmd {
    /// Client: open every connection. Reply: [`Connected`].
    Connect,
    /// Server: wait until `n` connections are accepted, at most `timeout_s`. Reply:
    /// [`Accepted`].
    WaitAccepted { n: usize, timeout_s: f64 },
    /// Either: memory, CPU time, and connections found closed. Reply: [`Sample`].
    Sample,
    /// Either: start the pattern's thread per connection (sending on the client, receiving on
    /// the server). Reply: [`Started`].
    Start,
    /// Server: count what arrives for `secs`. Reply: [`Measured`].
    Measure { secs: f64 },
    /// Client: stop sending. Reply: [`Stopped`].
    Stop,
}

/// A child's first line.
#[derive(Debug, Serialize, Deserialize)]
pub struct Ready {
    /// The endpoint's bound address.
    pub addr: SocketAddr,
    /// Its datagram backend.
    pub datapath: String,
    /// VmRSS at start-up, KiB.
    pub rss_kib_start: u64,
    /// VmRSS once the endpoint is bound, before listening or connecting, KiB.
    pub rss_kib_bound: u64,
}

/// The client's connect phase.
#[derive(Debug, Serialize, Deserialize)]
pub struct Connected {
    /// Connections established.
    pub ok: usize,
    /// Connect calls that failed.
    pub failed: usize,
    /// When the first connect call started.
    pub first_start_s: f64,
    /// When the last connect call returned.
    pub last_return_s: f64,
}

/// The server's accept phase.
#[derive(Debug, Serialize, Deserialize)]
pub struct Accepted {
    /// Connections accepted so far.
    pub accepted: usize,
    /// When the first and the last were accepted.
    pub first_s: Option<f64>,
    pub last_s: Option<f64>,
    /// Why accepting stopped early, if it did.
    pub error: Option<String>,
}

/// A snapshot of a child.
#[derive(Debug, Serialize, Deserialize)]
pub struct Sample {
    /// When it was taken.
    pub t_s: f64,
    /// CPU time of the process so far (user + system, all threads), seconds.
    pub cpu_s: f64,
    /// VmRSS, KiB.
    pub rss_kib: u64,
    /// Connections lost so far: (index, why). Indices are the client's connect order, which
    /// the server learns from the stream id.
    pub lost: Vec<(usize, String)>,
}

/// The pattern's threads have started.
#[derive(Debug, Serialize, Deserialize)]
pub struct Started {
    /// Threads started (one per connection).
    pub threads: usize,
}

/// What the server received in its measured window.
#[derive(Debug, Serialize, Deserialize)]
pub struct Measured {
    /// Length of the window, seconds.
    pub secs: f64,
    /// CPU time of the process over it, seconds.
    pub cpu_s: f64,
    /// VmRSS at its end, KiB.
    pub rss_kib: u64,
    /// Bytes received per connection index (length: connections requested).
    pub bytes: Vec<u64>,
    /// Messages received per connection index (message pattern).
    pub msgs: Vec<u64>,
}

/// What the client sent from [`Cmd::Start`] to [`Cmd::Stop`].
#[derive(Debug, Serialize, Deserialize)]
pub struct Stopped {
    /// Seconds from start to stop.
    pub secs: f64,
    /// CPU time of the process over them, seconds.
    pub cpu_s: f64,
    /// VmRSS at the stop, KiB.
    pub rss_kib: u64,
    /// Bytes and messages queued, all connections.
    pub bytes: u64,
    pub msgs: u64,
}

/// CLOCK_MONOTONIC, seconds (the same clock in every process).
pub fn mono_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// VmRSS of this process, KiB (0 where `/proc` has none).
pub fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Writes one JSON line to stdout (the child's side).
pub fn say<T: Serialize>(v: &T) -> Result<(), String> {
    let line = serde_json::to_string(v).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| format!("writing to the bench: {e}"))
}

/// Writes `{"error": msg}` (the child's side).
pub fn say_error(msg: &str) {
    let _ = say(&serde_json::json!({ "error": msg }));
}

/// A child process of the bench: its stdin, its stdout's lines, killed when dropped.
#[derive(Debug)]
pub struct Child {
    name: &'static str,
    child: std::process::Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Child {
    /// Starts `exe args`; stderr is the bench's own, so that a child's complaints show.
    pub fn spawn(name: &'static str, exe: &Path, args: &[String]) -> Result<Child, String> {
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("starting the {name} ({}): {e}", exe.display()))?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("the {name} has no pipes"));
            }
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Child {
            name,
            child,
            stdin,
            lines,
        })
    }

    /// The next reply, at most `timeout` away; `what` names the step for messages.
    pub fn read<T: DeserializeOwned>(
        &mut self,
        timeout: Duration,
        what: &str,
    ) -> Result<T, String> {
        let name = self.name;
        loop {
            let line = match self.lines.recv_timeout(timeout) {
                Ok(l) => l,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "the {name} did not answer within {:.0} s ({what})",
                        timeout.as_secs_f64()
                    ))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().map(|s| s.to_string());
                    return Err(format!(
                        "the {name} exited ({}) during {what}",
                        status.unwrap_or_else(|e| e.to_string())
                    ));
                }
            };
            // Anything else on its stdout (not ours) is passed on, not parsed.
            if !line.starts_with('{') {
                eprintln!("{name}: {line}");
                continue;
            }
            let v: serde_json::Value = serde_json::from_str(&line)
                .map_err(|e| format!("the {name} said something unreadable ({e}): {line}"))?;
            if let Some(err) = v.get("error").and_then(|e| e.as_str()) {
                return Err(format!("{name}: {err} ({what})"));
            }
            return serde_json::from_value(v)
                .map_err(|e| format!("the {name}'s answer to {what} is not as expected ({e})"));
        }
    }

    /// Sends `cmd` and reads its reply.
    pub fn ask<T: DeserializeOwned>(&mut self, cmd: &Cmd, timeout: Duration) -> Result<T, String> {
        let what = format!("{cmd:?}");
        let line = serde_json::to_string(cmd).map_err(|e| e.to_string())?;
        if let Err(e) = writeln!(self.stdin, "{line}").and_then(|()| self.stdin.flush()) {
            return Err(match self.child.try_wait() {
                Ok(Some(status)) => format!("the {} exited ({status}) before {what}", self.name),
                _ => format!("telling the {} {what}: {e}", self.name),
            });
        }
        self.read(timeout, &what)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
