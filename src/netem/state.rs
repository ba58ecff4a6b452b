//! Where a running emulator keeps its state: one directory per emulator under [`STATE_ROOT`]
//! (a tmpfs on most systems, so nothing survives a reboot, as the namespaces don't; on this
//! project's test machine it is the root ext4 file system).

use super::netns;
use rustix::process::{kill_process, Pid, Signal};
use std::fs;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
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

/// Writes a forwarder's counters file from a thread of its own. Replacing a file can block
/// for tens of milliseconds (up to 108 ms measured on an ext4 `/run`: the rename waits for
/// the new file's blocks), and a forwarding loop that waited for it would hold every packet
/// in flight that long. The newest snapshot wins: one published while an older one is still
/// waiting replaces it.
/// The newest snapshot not yet written, and whether the writer is to stop.
type Slot = (Mutex<(Option<String>, bool)>, Condvar);

#[derive(Debug)]
pub(super) struct StatsWriter {
    slot: Arc<Slot>,
    thread: Option<JoinHandle<()>>,
}

impl StatsWriter {
    /// A writer of `path` (through `path.tmp` and a rename, so readers never see half).
    pub(super) fn new(path: PathBuf) -> StatsWriter {
        let slot: Arc<Slot> = Arc::new((Mutex::new((None, false)), Condvar::new()));
        let theirs = slot.clone();
        let thread = std::thread::Builder::new()
            .name("netem-stats".into())
            .spawn(move || {
                let (lock, cv) = &*theirs;
                loop {
                    let text = {
                        let Ok(mut g) = lock.lock() else { return };
                        while g.0.is_none() && !g.1 {
                            g = match cv.wait(g) {
                                Ok(g) => g,
                                Err(_) => return,
                            };
                        }
                        match g.0.take() {
                            Some(t) => t,
                            None => return,
                        }
                    };
                    let tmp = path.with_extension("tmp");
                    let ok = fs::write(&tmp, text).and_then(|()| fs::rename(&tmp, &path));
                    if let Err(e) = ok {
                        eprintln!("warning: writing {}: {e}", path.display());
                    }
                }
            })
            .ok();
        StatsWriter { slot, thread }
    }

    /// Hands over the newest counters; never waits for the file system.
    pub(super) fn publish(&self, text: String) {
        let (lock, cv) = &*self.slot;
        if let Ok(mut g) = lock.lock() {
            g.0 = Some(text);
            cv.notify_one();
        }
    }
}

impl Drop for StatsWriter {
    /// Writes what was published last, then ends the thread.
    fn drop(&mut self) {
        let (lock, cv) = &*self.slot;
        if let Ok(mut g) = lock.lock() {
            g.1 = true;
            cv.notify_one();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
