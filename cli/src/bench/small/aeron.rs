//! Aeron's side of `bench small`: the aeron-all jar from Maven Central (fetched with `mvn`
//! when missing), Aeron's own `EmbeddedThroughput` and `EmbeddedPingPong` samples as shipped,
//! and `AeronSmall.java` (the same two measurements as slipstream's side, compiled here).

use super::{Paced, Rate};
use std::cell::Cell;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const HARNESS: &str = include_str!("AeronSmall.java");

/// JVM flags Aeron needs on Java 17 and later.
const JVM_FLAGS: [&str; 2] = [
    "--add-exports=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
];

/// A compiled harness beside the jar, and where media-driver directories go.
pub struct Aeron {
    jar: PathBuf,
    classes: PathBuf,
    /// Each java run has a directory of its own (`dir-N`), removed after it: a driver ended
    /// by a kill leaves one that looks active for a while, and a driver that finds such a
    /// directory refuses to start.
    dir: PathBuf,
    runs: Cell<u32>,
}

impl Drop for Aeron {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.classes);
    }
}

/// A java process and its media-driver directory, removed when dropped.
struct Run {
    child: Child,
    dir: PathBuf,
}

impl Drop for Run {
    fn drop(&mut self) {
        // TERM, which `timeout` passes on to java (a KILL would end `timeout` alone).
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        crate::bench::forget_child(self.child.id());
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Finds (or fetches) the jar and compiles the harness.
pub fn prepare(jar: Option<&Path>, version: &str) -> Result<Aeron, String> {
    for tool in ["java", "javac"] {
        if Command::new(tool).arg("-version").output().is_err() {
            return Err(format!(
                "{tool} not found: the Aeron side needs a JDK (17 or later)"
            ));
        }
    }
    let jar = match jar {
        Some(j) => j.to_path_buf(),
        None => {
            let home = std::env::var_os("HOME").ok_or("HOME is not set")?;
            let j = PathBuf::from(home).join(format!(
                ".m2/repository/io/aeron/aeron-all/{version}/aeron-all-{version}.jar"
            ));
            if !j.exists() {
                eprintln!("small: fetching io.aeron:aeron-all:{version} with mvn");
                let out = Command::new("mvn")
                    .args(["-q", "dependency:get"])
                    .arg(format!("-Dartifact=io.aeron:aeron-all:{version}"))
                    .output()
                    .map_err(|e| format!("running mvn (to fetch Aeron): {e}"))?;
                if !out.status.success() || !j.exists() {
                    return Err(format!(
                        "mvn could not fetch io.aeron:aeron-all:{version}: {}",
                        String::from_utf8_lossy(&out.stdout).trim()
                    ));
                }
            }
            j
        }
    };
    sweep(Path::new("/dev/shm"), "slipstream-aeron-");
    sweep(&std::env::temp_dir(), "slipstream-aeron-small-");
    let pid = std::process::id();
    let classes = std::env::temp_dir().join(format!("slipstream-aeron-small-{pid}"));
    std::fs::create_dir_all(&classes).map_err(|e| e.to_string())?;
    let src = classes.join("AeronSmall.java");
    std::fs::write(&src, HARNESS).map_err(|e| e.to_string())?;
    let out = Command::new("javac")
        .arg("-cp")
        .arg(&jar)
        .arg("-d")
        .arg(&classes)
        .arg(&src)
        .output()
        .map_err(|e| format!("running javac: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "javac AeronSmall.java: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(Aeron {
        jar,
        dir: PathBuf::from(format!("/dev/shm/slipstream-aeron-{pid}")),
        runs: Cell::new(0),
        classes,
    })
}

/// Removes what a bench killed outright left in `dir`: entries named `prefix` + the pid of
/// a process no longer running (+ anything after a `-`).
fn sweep(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|p| !slipstream::netem::netns::alive(p)) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Aeron {
    /// The jar in use.
    pub fn jar(&self) -> &Path {
        &self.jar
    }

    /// Starts `main` with `props` and `args` in a media-driver directory of its own, under
    /// `timeout` (coreutils): Aeron's samples wait on standard input for "execute again?"
    /// after their run, so a java left behind by a bench killed outright still ends by
    /// `limit` (plus 5 s).
    fn java(
        &self,
        props: &[(&str, String)],
        main: &str,
        args: &[String],
        limit: Duration,
    ) -> Result<Run, String> {
        let n = self.runs.get() + 1;
        self.runs.set(n);
        let dir = PathBuf::from(format!("{}-{n}", self.dir.display()));
        let mut c = Command::new("timeout");
        c.arg("--kill-after=5")
            .arg(limit.as_secs().max(1).to_string())
            .arg("java");
        c.args(JVM_FLAGS);
        c.arg(format!("-Daeron.dir={}", dir.display()));
        c.arg("-Daeron.dir.delete.on.shutdown=true");
        for (k, v) in props {
            c.arg(format!("-D{k}={v}"));
        }
        let cp = format!("{}:{}", self.jar.display(), self.classes.display());
        c.arg("-cp").arg(cp).arg(main).args(args);
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let child = c
            .spawn()
            .map_err(|e| format!("starting java (under timeout): {e}"))?;
        // A bench stopped by SIGINT or SIGTERM ends it too.
        crate::bench::note_child(child.id());
        Ok(Run { child, dir })
    }

    /// The harness's message rate with the driver's `threading` and `idle`.
    pub fn rate(
        &self,
        size: usize,
        count: u64,
        threading: &str,
        idle: &str,
    ) -> Result<Rate, String> {
        let args = [
            "rate",
            &size.to_string(),
            &count.to_string(),
            threading,
            idle,
        ];
        let v = self.harness(&args, Duration::from_secs(120))?;
        Ok(Rate {
            sent: num(&v, "sent")? as u64,
            received: num(&v, "received")? as u64,
            seconds: num(&v, "seconds")?,
            msgs_per_sec: num(&v, "msgs_per_sec")?,
        })
    }

    /// The harness's paced latency with the driver's `threading` and `idle`.
    pub fn paced(
        &self,
        size: usize,
        rate: u64,
        seconds: f64,
        threading: &str,
        idle: &str,
    ) -> Result<Paced, String> {
        let args = [
            "paced",
            &size.to_string(),
            &rate.to_string(),
            &seconds.to_string(),
            threading,
            idle,
        ];
        let limit = Duration::from_secs_f64(seconds + 60.0);
        latencies(&self.harness(&args, limit)?, rate)
    }

    /// The harness's round trips (times in `Paced`'s fields, `rate` 0).
    pub fn pingpong(
        &self,
        size: usize,
        count: u64,
        threading: &str,
        idle: &str,
    ) -> Result<Paced, String> {
        let args = [
            "pingpong",
            &size.to_string(),
            &count.to_string(),
            threading,
            idle,
        ];
        latencies(&self.harness(&args, Duration::from_secs(300))?, 0)
    }

    fn harness(&self, args: &[&str], limit: Duration) -> Result<serde_json::Value, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let mut run = self.java(&[], "AeronSmall", &args, limit)?;
        let lines = read_until(&mut run.child, limit, |l| l.starts_with('{'))?;
        let last = lines.last().ok_or("AeronSmall printed nothing")?;
        serde_json::from_str(last).map_err(|e| format!("AeronSmall's output {last:?}: {e}"))
    }

    /// Aeron's `EmbeddedThroughput` sample as shipped (its own driver set-up: dedicated
    /// threads, busy-spinning): the median of its once-a-second rates, the first left out.
    pub fn sample_throughput(&self, size: usize, seconds: u64) -> Result<f64, String> {
        let props = [
            ("aeron.sample.messageLength", size.to_string()),
            ("aeron.sample.messages", "1000000000".to_string()),
        ];
        let limit = Duration::from_secs(seconds + 60);
        let mut run = self.java(&props, "io.aeron.samples.EmbeddedThroughput", &[], limit)?;
        let mut seen = 0;
        let lines = read_until(&mut run.child, limit, |l| {
            if l.contains("msgs/sec") {
                seen += 1;
            }
            seen > seconds
        })?;
        let mut rates: Vec<f64> = lines
            .iter()
            .filter(|l| l.contains("msgs/sec"))
            .skip(1)
            .filter_map(|l| l.split_whitespace().next()?.parse().ok())
            .collect();
        if rates.is_empty() {
            return Err("EmbeddedThroughput printed no rate".into());
        }
        rates.sort_by(f64::total_cmp);
        Ok(rates[rates.len() / 2])
    }

    /// Aeron's `EmbeddedPingPong` sample as shipped: `count` round trips after a warm-up;
    /// its round-trip histogram's p50, p99, p99.9 and max, µs.
    pub fn sample_pingpong(&self, size: usize, count: u64) -> Result<[f64; 4], String> {
        let props = [
            ("aeron.sample.messageLength", size.to_string()),
            ("aeron.sample.messages", count.to_string()),
            ("aeron.sample.warmup.iterations", "1".to_string()),
            (
                "aeron.sample.warmup.messages",
                (count / 4).max(1).to_string(),
            ),
        ];
        let limit = Duration::from_secs(600);
        let mut run = self.java(&props, "io.aeron.samples.EmbeddedPingPong", &[], limit)?;
        let lines = read_until(&mut run.child, limit, |l| l.starts_with("#[Max"))?;
        // HdrHistogram's percentile lines: value, percentile, count, 1/(1-percentile).
        let table: Vec<(f64, f64)> = lines
            .iter()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let v = f.next()?.parse().ok()?;
                let p = f.next()?.parse().ok()?;
                Some((v, p))
            })
            .collect();
        let at = |q: f64| {
            table
                .iter()
                .find(|&&(_, p)| p >= q)
                .map(|&(v, _)| v)
                .ok_or_else(|| format!("EmbeddedPingPong's histogram has no {q} percentile"))
        };
        let max = lines
            .iter()
            .find_map(|l| {
                // "#[Max     =   119996.415, Total count    =    20000]"
                let rest = l.strip_prefix("#[Max")?.trim_start().strip_prefix('=')?;
                rest.split(',').next()?.trim().parse().ok()
            })
            .ok_or("EmbeddedPingPong printed no maximum")?;
        Ok([at(0.5)?, at(0.99)?, at(0.999)?, max])
    }
}

/// Reads the child's stdout lines until `done` says so or it exits; fails past `limit`.
/// The caller's [`Run`] ends the child.
fn read_until(
    child: &mut Child,
    limit: Duration,
    mut done: impl FnMut(&str) -> bool,
) -> Result<Vec<String>, String> {
    let out = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let end = Instant::now() + limit;
    let mut lines = Vec::new();
    let result = loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let stop = done(&line);
                lines.push(line);
                if stop {
                    break Ok(());
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break Ok(()),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                break Err(format!("java ran past {} s", limit.as_secs()))
            }
        }
    };
    result.map(|()| lines)
}

/// A paced or ping-pong line of the harness.
fn latencies(v: &serde_json::Value, rate: u64) -> Result<Paced, String> {
    Ok(Paced {
        rate,
        sent: num(v, "sent")? as u64,
        received: num(v, "received")? as u64,
        p50_us: num(v, "p50_us")?,
        p99_us: num(v, "p99_us")?,
        p999_us: num(v, "p999_us")?,
        max_us: num(v, "max_us")?,
    })
}

fn num(v: &serde_json::Value, key: &str) -> Result<f64, String> {
    v.get(key)
        .and_then(|x| x.as_f64())
        .ok_or_else(|| format!("AeronSmall's output has no {key}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_removes_only_what_dead_processes_left() {
        let dir = std::env::temp_dir().join(format!("slipstream-sweep-{}", std::process::id()));
        let dead = dir.join("x-999999999-1");
        let mine = dir.join(format!("x-{}-1", std::process::id()));
        let other = dir.join("y-999999999");
        for d in [&dead, &mine, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        sweep(&dir, "x-");
        assert!(!dead.exists());
        assert!(mine.exists());
        assert!(other.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
