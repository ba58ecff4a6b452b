//! `slipstream netem`: a link emulator between two network namespaces, for a kernel without
//! netem (and for anyone who wants the same emulated path for every transport).
//!
//! `up NAME` creates the namespaces `NAME-a` and `NAME-b`, each holding one TUN interface
//! ([`DEV`]) with an address ([`ADDR_A`], [`ADDR_B`]), and starts a background process (the
//! forwarder, `forward`) that owns both TUN devices: every IP packet one side sends into its
//! interface is read by the forwarder, passed through a simulated [`Link`] for that direction
//! (rate with a drop-tail queue, delay and jitter, random or Gilbert–Elliott loss, reordering,
//! duplication) and written into the other side's interface when the link delivers it. Any
//! traffic between the namespaces crosses it: kernel TCP, SRT, slipstream.
//!
//! The forwarder's state lives in [`STATE_ROOT`]`/NAME`: its process id, its log, the
//! configuration and a statistics file it rewrites every 100 ms. `down NAME` stops the
//! forwarder (which removes the TUN devices with it), deletes both namespaces and the state.
//!
//! [`Link`]: slipstream_proto::sim::Link

pub(crate) mod forward;
pub mod netns;
mod state;
mod switch;

use crate::datapath::Impairment;
use serde::Serialize;
use std::fs;
use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub use state::{state_dir, STATE_ROOT};
pub use switch::{
    host_netns, run_switch, switch_addr, switch_up, Host, SwitchInfo, SwitchSpec, MAX_HOSTS,
};

/// Name of the TUN interface in each namespace.
pub const DEV: &str = "netem0";
/// Address of side a (namespace `NAME-a`).
pub const ADDR_A: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// Address of side b (namespace `NAME-b`).
pub const ADDR_B: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// Prefix length of the subnet both addresses share.
const PREFIX_LEN: u8 = 24;
/// Packets the kernel may queue on a TUN interface before the forwarder reads them.
const TXQUEUELEN: u32 = 4096;
/// How long `up` waits for the forwarder to open its devices.
const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `down` waits for the forwarder to exit after SIGTERM before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// What an emulator does to each direction.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Packets from a to b.
    pub ab: Impairment,
    /// Packets from b to a.
    pub ba: Impairment,
    /// MTU of both TUN interfaces.
    pub mtu: u32,
}

/// One side of a running emulator.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    /// Its network namespace (`ip netns` name).
    pub netns: String,
    /// Its address.
    pub addr: Ipv4Addr,
}

/// A running emulator, as `up` reports it.
#[derive(Debug, Clone, Serialize)]
pub struct Info {
    /// Side a.
    pub a: Side,
    /// Side b.
    pub b: Side,
    /// The emulator's name.
    pub name: String,
    /// Process id of the forwarder.
    pub pid: u32,
    /// Interface name in both namespaces.
    pub dev: &'static str,
    /// MTU of both interfaces.
    pub mtu: u32,
    /// Configuration of the a → b direction (an `--netem`-style spec).
    pub a_to_b: String,
    /// Configuration of the b → a direction.
    pub b_to_a: String,
}

/// The namespaces of emulator `name`.
pub fn namespaces(name: &str) -> (String, String) {
    (format!("{name}-a"), format!("{name}-b"))
}

/// Checks an emulator name: 1 to 32 characters among letters, digits, `_` and `-`.
pub fn validate_name(name: &str) -> Result<(), String> {
    let ok = (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "bad emulator name '{name}': 1 to 32 letters, digits, '_' or '-'"
        ))
    }
}

fn need_root() -> Result<(), String> {
    if netns::is_root() {
        Ok(())
    } else {
        Err(
            "netem needs root: it creates network namespaces and TUN devices \
             (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
                .into(),
        )
    }
}

fn netns_exists(ns: &str) -> bool {
    Path::new("/var/run/netns").join(ns).exists()
}

/// Emulators this process began to make ([`up`], [`switch_up`]) and has not taken down.
static MADE: netns::Made = netns::Made::new();

/// Notes that this process made emulator `name` (`true`) or took it down (`false`).
fn made(name: &str, yes: bool) {
    MADE.note(name, yes);
}

/// Takes down every emulator, and removes every veth pair's namespaces, that this process
/// made and still has: for a process ending on a signal, whose guards do not run. Returns
/// one line for each, saying what was removed or what failed.
pub fn remove_made() -> Vec<String> {
    let mut out: Vec<String> = MADE
        .take()
        .into_iter()
        .map(|n| match down(&n) {
            Ok(_) => format!("emulator {n}"),
            Err(e) => format!("emulator {n}: {e}"),
        })
        .collect();
    out.extend(netns::remove_made());
    out
}

/// Creates emulator `name` and starts its forwarder in the background. `exe` is the
/// slipstream binary, run as `exe netem run ...` for the forwarder. On error, whatever was
/// created is removed again.
pub fn up(name: &str, spec: &Spec, exe: &Path) -> Result<Info, String> {
    validate_name(name)?;
    need_root()?;
    if !Path::new("/dev/net/tun").exists() {
        return Err("/dev/net/tun is missing: this kernel has no TUN support".into());
    }
    let dir = state_dir(name);
    if dir.exists() {
        return Err(match state::running_pid(name) {
            Some(pid) => format!(
                "emulator '{name}' is already up (forwarder pid {pid}); \
                 `slipstream netem down {name}` first"
            ),
            None => format!(
                "an earlier emulator '{name}' left state behind in {} (its forwarder is not \
                 running); remove it with `slipstream netem down {name}`",
                dir.display()
            ),
        });
    }
    let (ns_a, ns_b) = namespaces(name);
    for ns in [&ns_a, &ns_b] {
        if netns_exists(ns) {
            return Err(format!(
                "network namespace {ns} already exists and is not an emulator's; choose \
                 another name or remove it (`ip netns del {ns}`)"
            ));
        }
    }
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    made(name, true);
    // From here on, a failure removes everything `down` knows how to remove.
    let mut guard = Teardown(Some(name.to_string()));
    for ns in [&ns_a, &ns_b] {
        netns::ip(&["netns", "add", ns])?;
    }
    let (ab, ba) = (spec.ab.to_spec(), spec.ba.to_spec());
    let pid = start_forwarder(name, exe, &["--a-to-b", &ab, "--b-to-a", &ba])?;
    for (ns, addr) in [(&ns_a, ADDR_A), (&ns_b, ADDR_B)] {
        configure_device(ns, addr, spec.mtu)?;
    }
    let info = Info {
        a: Side {
            netns: ns_a,
            addr: ADDR_A,
        },
        b: Side {
            netns: ns_b,
            addr: ADDR_B,
        },
        name: name.to_string(),
        pid,
        dev: DEV,
        mtu: spec.mtu,
        a_to_b: ab,
        b_to_a: ba,
    };
    let json = serde_json::to_string(&info).map_err(|e| e.to_string())?;
    state::write(name, state::INFO, &json)?;
    guard.0 = None;
    Ok(info)
}

/// Brings up loopback and the TUN device in namespace `ns`: MTU, transmit queue, `addr`/24.
fn configure_device(ns: &str, addr: Ipv4Addr, mtu: u32) -> Result<(), String> {
    let (mtu, qlen) = (mtu.to_string(), TXQUEUELEN.to_string());
    netns::ip(&["-n", ns, "link", "set", "lo", "up"])?;
    netns::ip(&[
        "-n",
        ns,
        "link",
        "set",
        "dev",
        DEV,
        "mtu",
        &mtu,
        "txqueuelen",
        &qlen,
        "up",
    ])?;
    netns::ip(&[
        "-n",
        ns,
        "addr",
        "add",
        &format!("{addr}/{PREFIX_LEN}"),
        "dev",
        DEV,
    ])
}

/// Starts the forwarder of emulator `name` (`exe netem run NAME ARGS...`, in its own
/// process group, output to the state directory's log), records its pid and waits until it
/// says its devices are open. Returns its pid.
fn start_forwarder(name: &str, exe: &Path, args: &[&str]) -> Result<u32, String> {
    let dir = state_dir(name);
    let log_path = dir.join(state::LOG);
    let log = fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let log2 = log
        .try_clone()
        .map_err(|e| format!("{}: {e}", log_path.display()))?;
    let mut child = Command::new(exe)
        .args(["netem", "run", name])
        .args(args)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        // Its own process group: a Ctrl-C meant for the shell's foreground job spares it.
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting the forwarder ({}): {e}", exe.display()))?;
    let pid = child.id();
    state::write(name, state::PID, &pid.to_string())?;
    let t0 = Instant::now();
    while !dir.join(state::READY).exists() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "the forwarder exited ({status}) before its devices were up: {}",
                state::log_tail(name)
            ));
        }
        if t0.elapsed() > READY_TIMEOUT {
            return Err(format!(
                "the forwarder did not open its devices within {READY_TIMEOUT:?}: {}",
                state::log_tail(name)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(pid)
}

/// Removes a half-made emulator on an error path of [`up`].
struct Teardown(Option<String>);

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Some(name) = self.0.take() {
            if let Err(e) = down(&name) {
                eprintln!("warning: cleaning up emulator '{name}': {e}");
            }
        }
    }
}

/// What [`down`] removed.
#[derive(Debug, Default)]
pub struct Removed {
    /// The forwarder's process id, if it was running.
    pub pid: Option<u32>,
    /// Namespaces deleted.
    pub namespaces: Vec<String>,
}

/// Stops emulator `name`'s forwarder and removes its namespaces and state. Fails if there
/// is no such emulator; a half-removed one is finished off.
pub fn down(name: &str) -> Result<Removed, String> {
    validate_name(name)?;
    need_root()?;
    let dir = state_dir(name);
    if !dir.exists() {
        return Err(format!(
            "no emulator named '{name}' (nothing in {})",
            dir.display()
        ));
    }
    let mut removed = Removed::default();
    if let Some(pid) = state::running_pid(name) {
        state::stop(pid, STOP_TIMEOUT)?;
        removed.pid = Some(pid);
    }
    let (ns_a, ns_b) = namespaces(name);
    let mut all = vec![ns_a, ns_b];
    if let Some(hosts) = state::read(name, state::HOSTS).and_then(|h| h.trim().parse().ok()) {
        all = (1..=hosts).map(|i| host_netns(name, i)).collect();
    }
    let mut errors = Vec::new();
    for ns in all {
        if netns_exists(&ns) {
            match netns::ip(&["netns", "del", &ns]) {
                Ok(()) => removed.namespaces.push(ns),
                Err(e) => errors.push(e),
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    fs::remove_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    made(name, false);
    Ok(removed)
}

/// The names of the emulators with state on this machine, sorted.
pub fn list() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(STATE_ROOT)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| validate_name(n).is_ok())
        .collect();
    names.sort();
    names
}

/// The emulator's counters: what the forwarder last wrote (at most 100 ms old), plus the
/// packets each side's kernel dropped before the forwarder read them (`device_drops`).
pub fn stats(name: &str) -> Result<serde_json::Value, String> {
    validate_name(name)?;
    let path = state_dir(name).join(state::STATS);
    let text = fs::read_to_string(&path).map_err(|e| {
        format!(
            "no statistics for emulator '{name}' ({}: {e}); is it up?",
            path.display()
        )
    })?;
    let mut v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if state::running_pid(name).is_none() {
        v["running"] = false.into();
    }
    let (ns_a, ns_b) = namespaces(name);
    for (key, ns) in [("a_to_b", ns_a), ("b_to_a", ns_b)] {
        if let Some(drops) = device_tx_drops(&ns) {
            v[key]["device_drops"] = drops.into();
        }
    }
    Ok(v)
}

/// Packets the kernel in `ns` dropped on the TUN interface's transmit queue.
fn device_tx_drops(ns: &str) -> Option<u64> {
    let out = Command::new("ip")
        .args(["-n", ns, "-s", "-j", "link", "show", "dev", DEV])
        .output()
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    v.get(0)?
        .get("stats64")?
        .get("tx")?
        .get("dropped")?
        .as_u64()
}

/// The forwarder process (`netem run`): opens the TUN device in each namespace, says it is
/// ready, then forwards until killed or a device disappears.
pub fn run_forwarder(name: &str, spec: &Spec) -> Result<(), String> {
    validate_name(name)?;
    let (ns_a, ns_b) = namespaces(name);
    let open = |ns: &str| -> Result<fs::File, String> {
        netns::enter(ns).map_err(|e| e.to_string())?;
        crate::sys::tun::open(DEV).map_err(|e| format!("in namespace {ns}: {e}"))
    };
    let tun_a = open(&ns_a)?;
    let tun_b = open(&ns_b)?;
    state::write(name, state::READY, "")?;
    let stats_path: PathBuf = state_dir(name).join(state::STATS);
    forward::Forwarder::new(tun_a, tun_b, spec, stats_path)
        .run()
        .map_err(|e| format!("forwarder: {e}"))
}
