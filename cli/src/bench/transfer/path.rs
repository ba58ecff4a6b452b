//! The network paths of `bench transfer`: loopback, or an emulated link between two network
//! namespaces made by `slipstream netem` (run as a subprocess of this binary).
//!
//! An emulated scenario `rttR-lossP` is 1 Gbit/s in each direction, one-way delay R/2 ms each
//! way, random loss P % each way, and a drop-tail queue of one bandwidth-delay product
//! (1 Gbit/s × R; at least 1 MiB). The sender runs in namespace `NAME-a`, the receiver in
//! `NAME-b`. In each, kernel TCP gets room for that path ([`TCP_SYSCTLS`]); the emulator is
//! removed ([`Drop`]) whatever happens, and one left behind by a killed run is removed by the
//! next.

use slipstream::netem::netns;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// Rate of every emulated link, bits per second.
pub const RATE_BPS: f64 = 1e9;
/// Smallest queue of an emulated link, bytes.
pub const MIN_QUEUE: u64 = 1 << 20;
/// Round-trip times of the default matrix, milliseconds.
pub const RTTS_MS: [u32; 3] = [10, 50, 200];
/// Loss percentages of the default matrix.
pub const LOSSES_PCT: [f64; 4] = [0.0, 0.1, 1.0, 5.0];

/// Per-namespace sysctls set in both namespaces of an emulated path, so that kernel TCP is
/// not window-limited at 1 Gbit/s × 200 ms (plus a full one-BDP queue: 50 MB in flight),
/// and so that one connection's cached metrics (ssthresh) do not carry over to the next run.
/// (`net.core.rmem_max`/`wmem_max` are global on Linux and are left alone: they cap the UDP
/// socket buffers a non-forcing tool such as libsrt gets.)
pub const TCP_SYSCTLS: [(&str, &str); 3] = [
    ("net/ipv4/tcp_rmem", "4096 131072 134217728"),
    ("net/ipv4/tcp_wmem", "4096 16384 134217728"),
    ("net/ipv4/tcp_no_metrics_save", "1"),
];

/// Prefix of the emulator names this module makes: `bt<pid in hex>x<n>` (at most 10
/// characters: interface names derive from them).
const PREFIX: &str = "bt";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A path a transfer runs over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scenario {
    /// Both ends in this namespace on 127.0.0.1, no emulation.
    Loopback,
    /// The emulated link: round-trip time (ms) and random loss (%) per direction.
    Emulated {
        /// Round-trip time, milliseconds.
        rtt_ms: u32,
        /// Random loss of each direction, percent.
        loss_pct: f64,
    },
}

impl Scenario {
    /// Every scenario of the full matrix, in report order.
    pub fn all() -> Vec<Scenario> {
        let mut v = vec![Scenario::Loopback];
        for rtt_ms in RTTS_MS {
            for loss_pct in LOSSES_PCT {
                v.push(Scenario::Emulated { rtt_ms, loss_pct });
            }
        }
        v
    }

    /// Its name: `loopback` or `rtt50-loss0.1`.
    pub fn name(&self) -> String {
        match self {
            Scenario::Loopback => "loopback".into(),
            Scenario::Emulated { rtt_ms, loss_pct } => format!("rtt{rtt_ms}-loss{loss_pct}"),
        }
    }

    /// Parses a name: `loopback`, or `rttR-lossP` for any R in 2..=2000 ms and P in 0..=50 %.
    pub fn parse(name: &str) -> Result<Scenario, String> {
        let bad = || {
            let all: Vec<String> = Scenario::all().iter().map(Scenario::name).collect();
            format!(
                "unknown scenario '{name}' (valid: {}; or any rttMS-lossPCT with MS in 2..=2000 \
                 and PCT in 0..=50)",
                all.join(", ")
            )
        };
        if name == "loopback" {
            return Ok(Scenario::Loopback);
        }
        let (rtt, loss) = name
            .strip_prefix("rtt")
            .and_then(|r| r.split_once("-loss"))
            .ok_or_else(bad)?;
        let rtt_ms: u32 = rtt.parse().map_err(|_| bad())?;
        let loss_pct: f64 = loss.parse().map_err(|_| bad())?;
        if !(2..=2000).contains(&rtt_ms) || !(0.0..=50.0).contains(&loss_pct) {
            return Err(bad());
        }
        Ok(Scenario::Emulated { rtt_ms, loss_pct })
    }

    /// Whether it needs the link emulator (and root).
    pub fn is_emulated(&self) -> bool {
        matches!(self, Scenario::Emulated { .. })
    }

    /// Its round-trip time, if emulated.
    pub fn rtt_ms(&self) -> Option<u32> {
        match self {
            Scenario::Emulated { rtt_ms, .. } => Some(*rtt_ms),
            Scenario::Loopback => None,
        }
    }

    /// Its loss percentage, if emulated.
    pub fn loss_pct(&self) -> Option<f64> {
        match self {
            Scenario::Emulated { loss_pct, .. } => Some(*loss_pct),
            Scenario::Loopback => None,
        }
    }

    /// The link rate, bits per second, if emulated.
    pub fn rate_bps(&self) -> Option<f64> {
        self.is_emulated().then_some(RATE_BPS)
    }

    /// The drop-tail queue of an emulated link: one BDP, at least [`MIN_QUEUE`].
    pub fn queue_bytes(&self) -> Option<u64> {
        self.rtt_ms()
            .map(|r| ((RATE_BPS / 8.0 * f64::from(r) / 1e3) as u64).max(MIN_QUEUE))
    }
}

/// A path in use: where each end runs and where the sender finds the receiver. An emulated
/// path is torn down on drop.
#[derive(Debug)]
pub struct NetPath {
    /// What it is.
    pub scenario: Scenario,
    /// Namespace of the sender (none: this one).
    pub tx_ns: Option<String>,
    /// Namespace of the receiver.
    pub rx_ns: Option<String>,
    /// The receiver's address.
    pub rx_addr: IpAddr,
    emulator: Option<Emulator>,
}

/// A running `slipstream netem` emulator, stopped on drop.
#[derive(Debug)]
struct Emulator {
    exe: PathBuf,
    name: String,
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Err(e) = netem(&self.exe, &["down", &self.name]) {
            eprintln!("warning: could not remove emulator {}: {e}", self.name);
        }
    }
}

/// Runs `exe netem ARGS`; its last stdout line on success, else its stderr.
fn netem(exe: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(exe)
        .arg("netem")
        .args(args)
        .output()
        .map_err(|e| format!("running {} netem: {e}", exe.display()))?;
    if out.status.success() {
        let stdout = String::from_utf8_lossy(&out.stdout);
        Ok(stdout.lines().last().unwrap_or("").to_string())
    } else {
        Err(format!(
            "netem {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl NetPath {
    /// Loopback: both ends here, on 127.0.0.1.
    pub fn loopback() -> NetPath {
        NetPath {
            scenario: Scenario::Loopback,
            tx_ns: None,
            rx_ns: None,
            rx_addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            emulator: None,
        }
    }

    /// Brings up the path of `scenario` (`exe` is this binary, for `netem`).
    pub fn create(scenario: Scenario, exe: &Path) -> Result<NetPath, String> {
        let Scenario::Emulated { rtt_ms, loss_pct } = scenario else {
            return Ok(NetPath::loopback());
        };
        if !netns::is_root() {
            return Err(format!(
                "scenario {} needs root (network namespaces and the link emulator)",
                scenario.name()
            ));
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed) % 16;
        let name = format!("{PREFIX}{:x}x{n:x}", std::process::id());
        let delay = format!("{}us", u64::from(rtt_ms) * 500);
        let queue = scenario.queue_bytes().unwrap_or(MIN_QUEUE).to_string();
        let loss = format!("{loss_pct}%");
        let mut args = vec![
            "up", &name, "--rate", "1gbit", "--delay", &delay, "--queue", &queue,
        ];
        if loss_pct > 0.0 {
            args.extend(["--loss", &loss]);
        }
        let last = netem(exe, &args)?;
        // From here on the emulator exists: the guard removes it on every path out.
        let emulator = Emulator {
            exe: exe.to_path_buf(),
            name: name.clone(),
        };
        let info: serde_json::Value = serde_json::from_str(&last)
            .map_err(|e| format!("netem up printed no JSON ({e}): {last}"))?;
        let field = |side: &str, key: &str| -> Result<String, String> {
            info[side][key]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("netem up: no {side}.{key} in {last}"))
        };
        let (tx_ns, rx_ns) = (field("a", "netns")?, field("b", "netns")?);
        let rx_addr: IpAddr = field("b", "addr")?
            .parse()
            .map_err(|e| format!("netem up: b.addr: {e}"))?;
        for ns in [&tx_ns, &rx_ns] {
            set_sysctls(ns)?;
        }
        Ok(NetPath {
            scenario,
            tx_ns: Some(tx_ns),
            rx_ns: Some(rx_ns),
            rx_addr,
            emulator: Some(emulator),
        })
    }

    /// The emulator's counters and CPU time (`netem stats --json`), if there is one.
    pub fn emulator_stats(&self) -> Option<serde_json::Value> {
        let e = self.emulator.as_ref()?;
        let last = netem(&e.exe, &["stats", &e.name, "--json"]).ok()?;
        serde_json::from_str(&last).ok()
    }
}

/// Writes [`TCP_SYSCTLS`] in namespace `ns` from a thread that enters it (`/proc/sys/net`
/// belongs to the writer's namespace).
fn set_sysctls(ns: &str) -> Result<(), String> {
    let ns = ns.to_string();
    std::thread::spawn(move || -> Result<(), String> {
        netns::enter(&ns).map_err(|e| e.to_string())?;
        for (key, value) in TCP_SYSCTLS {
            let path = format!("/proc/sys/{key}");
            std::fs::write(&path, value).map_err(|e| format!("{path} in {ns}: {e}"))?;
        }
        Ok(())
    })
    .join()
    .map_err(|_| "setting sysctls: thread panicked".to_string())?
}

/// The change of the emulator counters that matter between two `netem stats` snapshots:
/// its CPU seconds and, per direction, packets read, lost and dropped by the queue, and those
/// the kernel dropped at the TUN device before the emulator read them (`device_drops`: the
/// emulator fell behind).
pub fn emulator_delta(
    before: &serde_json::Value,
    after: &serde_json::Value,
) -> Option<serde_json::Value> {
    let num = |v: &serde_json::Value, path: &[&str]| -> Option<f64> {
        path.iter().try_fold(v, |v, k| v.get(k))?.as_f64()
    };
    let d = |path: &[&str]| -> Option<f64> { Some(num(after, path)? - num(before, path)?) };
    let cpu = d(&["cpu_seconds"])?;
    let mut dirs = serde_json::Map::new();
    for dir in ["a_to_b", "b_to_a"] {
        let mut m = serde_json::Map::new();
        for k in [
            "read",
            "read_bytes",
            "delivered",
            "lost",
            "queue_drops",
            "device_drops",
        ] {
            if let Some(v) = d(&[dir, k]) {
                m.insert(k.into(), serde_json::json!(v as i64));
            }
        }
        dirs.insert(dir.into(), m.into());
    }
    let mut v = serde_json::json!({ "cpu_seconds": cpu });
    v.as_object_mut()?.extend(dirs);
    Some(v)
}

/// The process id in an emulator name this module makes (`bt<hex pid>x<n>`), if it is one.
pub(crate) fn owner_pid(name: &str) -> Option<u32> {
    let (pid, n) = name.strip_prefix(PREFIX)?.split_once('x')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u32::from_str_radix(pid, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names() {
        let all = Scenario::all();
        assert_eq!(all.len(), 13);
        for s in &all {
            assert_eq!(Scenario::parse(&s.name()).as_ref(), Ok(s));
        }
        assert_eq!(all[1].name(), "rtt10-loss0");
        assert_eq!(all[2].name(), "rtt10-loss0.1");
        assert_eq!(
            Scenario::parse("rtt100-loss2"),
            Ok(Scenario::Emulated {
                rtt_ms: 100,
                loss_pct: 2.0
            })
        );
        for bad in [
            "lan",
            "rtt50",
            "rtt50-loss",
            "rtt1-loss0",
            "rtt50-loss60",
            "rttx-loss1",
        ] {
            let e = Scenario::parse(bad).unwrap_err();
            assert!(e.contains(bad) && e.contains("rtt200-loss5"), "{e}");
        }
    }

    #[test]
    fn queues_are_one_bdp() {
        let q = |r| {
            Scenario::Emulated {
                rtt_ms: r,
                loss_pct: 0.0,
            }
            .queue_bytes()
        };
        assert_eq!(q(10), Some(1_250_000));
        assert_eq!(q(50), Some(6_250_000));
        assert_eq!(q(200), Some(25_000_000));
        assert_eq!(q(2), Some(MIN_QUEUE));
        assert_eq!(Scenario::Loopback.queue_bytes(), None);
    }

    #[test]
    fn emulator_names() {
        let name = format!("{PREFIX}{:x}x{:x}", 4_194_303, 15);
        assert!(name.len() <= 10, "{name}");
        assert_eq!(owner_pid(&name), Some(4_194_303));
        assert_eq!(owner_pid("bt1fx0"), Some(0x1f));
        assert_eq!(owner_pid("bt1fx"), None);
        assert_eq!(owner_pid("other"), None);
    }

    #[test]
    fn emulator_deltas() {
        let a = serde_json::json!({"cpu_seconds": 1.5,
            "a_to_b": {"read": 10, "lost": 1, "device_drops": 7}});
        let b = serde_json::json!({"cpu_seconds": 4.0,
            "a_to_b": {"read": 110, "lost": 3, "device_drops": 12}});
        let d = emulator_delta(&a, &b).unwrap();
        assert_eq!(d["cpu_seconds"], 2.5);
        assert_eq!(d["a_to_b"]["read"], 100);
        assert_eq!(d["a_to_b"]["lost"], 2);
        assert_eq!(d["a_to_b"]["device_drops"], 5);
        assert!(emulator_delta(&a, &serde_json::json!({})).is_none());
    }
}
