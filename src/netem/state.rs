//! Where a running emulator keeps its state: one directory per emulator under [`STATE_ROOT`]
//! (a tmpfs, so nothing survives a reboot, as the namespaces don't).

use super::netns;
use rustix::process::{kill_process, Pid, Signal};
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Parent of every emulator's state directory.
pub const STATE_ROOT: &str = "/run/slipstream/netem";
/// The forwarder's process id.
pub(super) const PID: &str = "pid";
/// The forwarder's stdout and stderr.
pub(super) const LOG: &str = "log";
/// Written by the forwarder once both devices exist.
pub(super) const READY: &str = "ready";
/// What `up` printed, as JSON.
pub(super) const INFO: &str = "info.json";
/// A switch's number of hosts (absent for a two-sided emulator), written before any of its
/// namespaces is made.
pub(super) const HOSTS: &str = "hosts";
/// The forwarder's counters, rewritten every 100 ms.
pub(super) const STATS: &str = "stats.json";

/// The state directory of emulator `name`.
pub fn state_dir(name: &str) -> PathBuf {
    PathBuf::from(STATE_ROOT).join(name)
}

/// Replaces state file `file` of emulator `name` atomically (readers never see half of it).
pub(super) fn write(name: &str, file: &str, text: &str) -> Result<(), String> {
    let path = state_dir(name).join(file);
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text)
        .and_then(|()| fs::rename(&tmp, &path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// State file `file` of emulator `name`, if it can be read.
pub(super) fn read(name: &str, file: &str) -> Option<String> {
    fs::read_to_string(state_dir(name).join(file)).ok()
}

/// The forwarder's pid if it is running: the pid file names a live process whose command
/// line is this emulator's forwarder (a recycled pid is not mistaken for it).
pub(super) fn running_pid(name: &str) -> Option<u32> {
    let pid: u32 = fs::read_to_string(state_dir(name).join(PID))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if !netns::alive(pid) {
        return None;
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let ours = args
        .windows(3)
        .any(|w| w[0] == b"netem" && w[1] == b"run" && w[2] == name.as_bytes());
    ours.then_some(pid)
}

/// Stops process `pid`: SIGTERM, then SIGKILL after `timeout`.
pub(super) fn stop(pid: u32, timeout: Duration) -> Result<(), String> {
    let p = i32::try_from(pid)
        .ok()
        .and_then(Pid::from_raw)
        .ok_or_else(|| format!("bad pid {pid}"))?;
    let _ = kill_process(p, Signal::TERM);
    let t0 = Instant::now();
    while netns::alive(pid) {
        if t0.elapsed() > timeout {
            let _ = kill_process(p, Signal::KILL);
            if t0.elapsed() > timeout * 2 {
                return Err(format!("the forwarder (pid {pid}) does not exit"));
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

/// The last lines of the forwarder's log, for error messages.
pub(super) fn log_tail(name: &str) -> String {
    let text = fs::read_to_string(state_dir(name).join(LOG)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
    if tail.is_empty() {
        "(its log is empty)".into()
    } else {
        tail
    }
}
