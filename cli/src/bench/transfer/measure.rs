//! What one transfer run measures, independent of the tool: the CPU time of each peer process,
//! when each exits, whether the receiver listens yet, kernel TCP counters of a network
//! namespace, the growth of the output over time, and the BLAKE3 digest of a file.
//!
//! CPU time comes from `/proc/PID/stat` of the exited process before it is reaped (a zombie
//! keeps its final user and system time, all threads included): the process is watched through
//! a pidfd, its times read once it has exited, and only then is it waited for. This charges each
//! run with exactly its two peer processes, whatever else this process runs in between.

use slipstream::netem::netns;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Clock ticks per second of the times in `/proc/PID/stat` (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;

/// A peer process of a run, watched until it exits.
#[derive(Debug)]
pub struct Peer {
    /// What it is, for messages ("sender", "receiver").
    pub role: &'static str,
    child: Child,
    pidfd: OwnedFd,
    /// Set once it has exited and been reaped.
    pub outcome: Option<Outcome>,
}

/// How a peer process ended.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    /// Its exit status (a kill shows as a signal).
    pub status: ExitStatus,
    /// When it was seen to exit.
    pub at: Instant,
    /// User + system CPU seconds, its own and its reaped children's.
    pub cpu_s: f64,
    /// Whether the run killed it (time cap or clean-up).
    pub killed: bool,
}

impl Peer {
    /// Starts `cmd` (its stdout and stderr should already be redirected to files).
    pub fn spawn(role: &'static str, cmd: &mut Command) -> Result<Peer, String> {
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting the {role} ({:?}): {e}", cmd.get_program()))?;
        let pid = rustix::process::Pid::from_child(&child);
        let pidfd = match rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("pidfd_open for the {role}: {e}"));
            }
        };
        Ok(Peer {
            role,
            child,
            pidfd,
            outcome: None,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running (not yet seen to exit).
    pub fn running(&self) -> bool {
        self.outcome.is_none()
    }

    /// If it has exited: reads its CPU time, reaps it and records the outcome. Returns whether
    /// it has exited (now or before).
    fn collect(&mut self, killed: bool) -> Result<bool, String> {
        if self.outcome.is_some() {
            return Ok(true);
        }
        if !exited(&self.pidfd, Duration::ZERO)? {
            return Ok(false);
        }
        let at = Instant::now();
        let cpu_s = zombie_cpu_seconds(self.pid()).unwrap_or(f64::NAN);
        let status = self
            .child
            .wait()
            .map_err(|e| format!("waiting for the {}: {e}", self.role))?;
        self.outcome = Some(Outcome {
            status,
            at,
            cpu_s,
            killed,
        });
        Ok(true)
    }

    /// Kills it (SIGKILL) if still running, and collects it.
    pub fn kill(&mut self) -> Result<(), String> {
        if self.outcome.is_some() {
            return Ok(());
        }
        let _ = self.child.kill();
        // The kill is asynchronous: wait for the exit so that the times are final.
        exited(&self.pidfd, Duration::from_secs(10))?;
        self.collect(true)?;
        Ok(())
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if self.outcome.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether the process behind `pidfd` has exited, waiting up to `wait`.
fn exited(pidfd: &OwnedFd, wait: Duration) -> Result<bool, String> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let ts = Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: wait.subsec_nanos() as _,
    };
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    loop {
        match poll(&mut fds, Some(&ts)) {
            Ok(n) => return Ok(n > 0),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(format!("poll on a pidfd: {e}")),
        }
    }
}

/// Waits until every peer has exited or `deadline` passes, collecting those that exit; returns
/// early once `until` says so. Polls every `tick` so that the caller's condition is fresh.
pub fn wait_peers(
    peers: &mut [&mut Peer],
    deadline: Instant,
    until: impl Fn(&[&mut Peer]) -> bool,
) -> Result<(), String> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    loop {
        for p in peers.iter_mut() {
            p.collect(false)?;
        }
        if peers.iter().all(|p| !p.running()) || until(peers) {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(());
        }
        let left = deadline - now;
        let ts = Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds: Vec<PollFd<'_>> = peers
            .iter()
            .filter(|p| p.running())
            .map(|p| PollFd::new(&p.pidfd, PollFlags::IN))
            .collect();
        match poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("poll on pidfds: {e}")),
        }
    }
}

/// User + system CPU seconds of an exited, not yet reaped process (its own threads and its
/// reaped children), from `/proc/PID/stat`.
fn zombie_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    cpu_seconds_from_stat(&stat)
}

/// Fields 14–17 (utime, stime, cutime, cstime) of a `/proc/PID/stat` line, in seconds.
fn cpu_seconds_from_stat(stat: &str) -> Option<f64> {
    // The command name (field 2) is parenthesised and may hold spaces: count after its end.
    let (_, rest) = stat.rsplit_once(')')?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: Option<Vec<u64>> = f.get(11..15)?.iter().map(|s| s.parse().ok()).collect();
    Some(ticks?.iter().sum::<u64>() as f64 / USER_HZ)
}

/// Waits until process `pid` has a socket bound to `port` (a listening TCP socket for `tcp`,
/// any bound UDP socket otherwise), seen in its own network namespace through
/// `/proc/PID/net/*`. Fails when `peer` exits first or after `limit`.
pub fn wait_listening(
    peer: &mut Peer,
    port: u16,
    tcp: bool,
    limit: Duration,
) -> Result<(), String> {
    let end = Instant::now() + limit;
    let files: &[&str] = if tcp {
        &["tcp", "tcp6"]
    } else {
        &["udp", "udp6"]
    };
    loop {
        for f in files {
            let path = format!("/proc/{}/net/{f}", peer.pid());
            if let Ok(table) = std::fs::read_to_string(&path) {
                if bound(&table, port, tcp) {
                    return Ok(());
                }
            }
        }
        if peer.collect(false)? {
            return Err(format!("the {} exited before listening", peer.role));
        }
        if Instant::now() > end {
            return Err(format!(
                "the {} was not listening on port {port} after {limit:?}",
                peer.role
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether a `/proc/net/{tcp,udp}[6]` table has a socket on local `port` (TCP: in LISTEN).
fn bound(table: &str, port: u16, tcp: bool) -> bool {
    let want = format!(":{port:04X}");
    table.lines().skip(1).any(|l| {
        let mut f = l.split_whitespace();
        let local = f.nth(1).unwrap_or("");
        let state = f.nth(1).unwrap_or("");
        local.ends_with(&want) && (!tcp || state == "0A")
    })
}

/// TCP segment counters of a network namespace (`/proc/net/snmp`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpCounters {
    /// Segments sent (`OutSegs`).
    pub out_segs: u64,
    /// Segments retransmitted (`RetransSegs`).
    pub retrans_segs: u64,
}

impl TcpCounters {
    /// Reads the counters of network namespace `ns` (`ip netns` name), or of this process's
    /// own namespace for `None`. A namespace is entered by a short-lived thread, so nothing
    /// is spawned.
    pub fn read(ns: Option<&str>) -> Result<TcpCounters, String> {
        let text = match ns {
            None => std::fs::read_to_string("/proc/net/snmp")
                .map_err(|e| format!("/proc/net/snmp: {e}"))?,
            Some(ns) => {
                let ns = ns.to_string();
                std::thread::spawn(move || -> Result<String, String> {
                    netns::enter(&ns).map_err(|e| e.to_string())?;
                    std::fs::read_to_string("/proc/thread-self/net/snmp")
                        .map_err(|e| format!("/proc/net/snmp in {ns}: {e}"))
                })
                .join()
                .map_err(|_| "reading /proc/net/snmp: thread panicked".to_string())??
            }
        };
        parse_snmp(&text).ok_or_else(|| "no Tcp: OutSegs/RetransSegs in /proc/net/snmp".into())
    }

    /// Retransmitted share of segments sent between `before` and `self`.
    pub fn retrans_fraction_since(&self, before: &TcpCounters) -> Option<f64> {
        let out = self.out_segs.checked_sub(before.out_segs)?;
        let re = self.retrans_segs.checked_sub(before.retrans_segs)?;
        (out > 0).then(|| re as f64 / out as f64)
    }
}

/// The `Tcp:` header and value lines of `/proc/net/snmp`.
fn parse_snmp(text: &str) -> Option<TcpCounters> {
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let names: Vec<&str> = tcp.next()?.split_whitespace().collect();
    let values: Vec<&str> = tcp.next()?.split_whitespace().collect();
    let get = |name: &str| -> Option<u64> {
        let i = names.iter().position(|n| *n == name)?;
        values.get(i)?.parse().ok()
    };
    Some(TcpCounters {
        out_segs: get("OutSegs")?,
        retrans_segs: get("RetransSegs")?,
    })
}

/// Samples the total size of the regular files in a directory every `every`, from its start,
/// in a background thread: the output's growth over time, and the bytes a killed or failed
/// receiver had written (whatever its temporary file names).
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(f64, u64)>>>,
}

impl Sampler {
    /// Starts sampling `dir`, with time 0 at `t0`.
    pub fn start(dir: PathBuf, t0: Instant, every: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            let mut next = t0;
            while !flag.load(Ordering::Relaxed) {
                samples.push((t0.elapsed().as_secs_f64(), dir_bytes(&dir)));
                next += every;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
            }
            samples
        });
        Sampler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops and returns the samples: (seconds since t0, bytes).
    pub fn finish(mut self) -> Vec<(f64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Total bytes of the regular files directly in `dir` (0 if it cannot be read).
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// BLAKE3 of a file's contents.
pub fn file_blake3(path: &Path) -> Result<blake3::Hash, String> {
    let mut f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if n == 0 {
            return Ok(h.finalize());
        }
        h.update(&buf[..n]);
    }
}

/// Goodput over time from cumulative byte samples: Mbit/s over the `window` ending at each
/// sample (from the first sample until a full window exists).
pub fn goodput_series(samples: &[(f64, u64)], window: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, &(t, b)) in samples.iter().enumerate() {
        while start < i && samples[start].0 < t - window - 1e-9 {
            start += 1;
        }
        let (t0, b0) = samples[start];
        if t > t0 {
            out.push((t, b.saturating_sub(b0) as f64 * 8.0 / (t - t0) / 1e6));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times() {
        let stat = "1234 (a (weird) name) Z 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 3 2 20 0 \
                    1 0 100 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
        assert_eq!(cpu_seconds_from_stat(stat), Some(3.3));
        assert_eq!(cpu_seconds_from_stat("1 (x) R 1 2"), None);
        let own = std::fs::read_to_string("/proc/self/stat").unwrap();
        assert!(cpu_seconds_from_stat(&own).is_some());
    }

    #[test]
    fn socket_tables() {
        let tcp =
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt\n   \
                   0: 00000000:A411 00000000:0000 0A 00000000:00000000 00:00000000 00000000\n   \
                   1: 0100007F:A412 0100007F:9C40 01 00000000:00000000 00:00000000 00000000\n";
        assert!(bound(tcp, 0xA411, true));
        assert!(!bound(tcp, 0xA412, true), "established, not listening");
        assert!(bound(tcp, 0xA412, false));
        assert!(!bound(tcp, 0x11, false));
    }

    #[test]
    fn snmp_counters() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                    Tcp: RtoAlgorithm OutSegs RetransSegs InErrs\nTcp: 1 1000 25 0\n";
        let c = parse_snmp(text).unwrap();
        assert_eq!((c.out_segs, c.retrans_segs), (1000, 25));
        let before = TcpCounters {
            out_segs: 500,
            retrans_segs: 20,
        };
        assert_eq!(c.retrans_fraction_since(&before), Some(0.01));
        assert!(TcpCounters::read(None).is_ok());
    }

    #[test]
    fn goodput_windows() {
        // 1 MB every 0.1 s = 80 Mbit/s.
        let s: Vec<(f64, u64)> = (0..20).map(|i| (i as f64 * 0.1, i * 1_000_000)).collect();
        let g = goodput_series(&s, 0.5);
        assert_eq!(g.len(), 19);
        for (_, v) in &g {
            assert!((v - 80.0).abs() < 1e-6, "{v}");
        }
        // The window slides: the last point spans 1.4..1.9 s.
        let last = g.last().unwrap();
        assert!((last.0 - 1.9).abs() < 1e-9);
        assert!(goodput_series(&[], 0.5).is_empty());
    }

    #[test]
    fn peers_report_cpu_and_status() {
        let mut p = Peer::spawn(
            "test",
            Command::new("sh").args(["-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"]),
        )
        .unwrap();
        wait_peers(
            &mut [&mut p],
            Instant::now() + Duration::from_secs(20),
            |_| false,
        )
        .unwrap();
        let o = p.outcome.unwrap();
        assert!(o.status.success() && !o.killed);
        assert!(o.cpu_s.is_finite());
        let mut q = Peer::spawn("sleeper", Command::new("sleep").arg("30")).unwrap();
        let t = Instant::now();
        wait_peers(&mut [&mut q], t + Duration::from_millis(100), |_| false).unwrap();
        assert!(q.running());
        q.kill().unwrap();
        let o = q.outcome.unwrap();
        assert!(o.killed && !o.status.success());
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
