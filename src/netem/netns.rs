//! A veth pair between two fresh network namespaces, for benchmarks over a real (virtual)
//! link instead of loopback.
//!
//! [`VethPair::create`] runs `ip` (iproute2) as root and returns a guard that deletes the
//! namespaces (and with them the veth pair) when dropped, also on error paths. Namespaces left
//! behind by a killed run (Ctrl-C) are named after its process id and are removed by the next
//! run once that process is gone. Threads join a namespace with [`enter`] before opening
//! their sockets.

use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// Prefix of the namespaces this module creates: `ssd<pid>_<n>a` / `ssd<pid>_<n>b`.
const PREFIX: &str = "ssd";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Names of what this process made (emulators, namespaces) and has not removed yet: what a
/// process ending on a signal must remove itself, its guards not running.
pub(crate) struct Made(Mutex<Vec<String>>);

impl Made {
    pub(crate) const fn new() -> Made {
        Made(Mutex::new(Vec::new()))
    }

    /// Notes that `name` was made (`true`) or removed (`false`).
    pub(crate) fn note(&self, name: &str, made: bool) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        m.retain(|n| n != name);
        if made {
            m.push(name.to_string());
        }
    }

    /// Every name noted as made and not removed, forgotten here.
    pub(crate) fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Namespaces of veth pairs this process made and has not removed.
static MADE: Made = Made::new();

/// Removes the namespaces of every veth pair this process made and still has (see
/// [`super::remove_made`]): one line for each.
pub(crate) fn remove_made() -> Vec<String> {
    MADE.take()
        .into_iter()
        .map(|ns| match ip(&["netns", "del", &ns]) {
            Ok(()) => format!("namespace {ns}"),
            Err(e) => format!("namespace {ns}: {e}"),
        })
        .collect()
}

/// Two network namespaces joined by a veth pair, removed on drop.
#[derive(Debug)]
pub struct VethPair {
    /// Namespace of side a (the sender in the benchmarks).
    pub ns_a: String,
    /// Namespace of side b (the receiver).
    pub ns_b: String,
    /// Address of side a.
    pub addr_a: Ipv4Addr,
    /// Address of side b.
    pub addr_b: Ipv4Addr,
    /// MTU of both veth ends.
    pub mtu: u32,
    /// The veth ends' interface names, in namespace a and b.
    pub dev_a: String,
    pub dev_b: String,
    created: Vec<String>,
}

/// Whether the process runs as root (namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

impl VethPair {
    /// Creates namespaces a and b, a veth pair with one end in each (10.201.0.1/24 in a,
    /// .2 in b), sets `mtu`, and brings the links and loopback up.
    pub fn create(mtu: u32) -> Result<Self, String> {
        if !is_root() {
            return Err("--netns needs root (network namespaces and veth pairs)".into());
        }
        if !(68..=65535).contains(&mtu) {
            return Err(format!("--mtu {mtu}: must be within 68..=65535"));
        }
        remove_stale();
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Interface names are limited to 15 bytes; the namespaces keep them apart anyway.
        let dev_a = format!("vs{pid:x}x{}a", n % 100);
        let dev_b = format!("vs{pid:x}x{}b", n % 100);
        let mut pair = VethPair {
            ns_a: format!("{PREFIX}{pid}_{n}a"),
            ns_b: format!("{PREFIX}{pid}_{n}b"),
            addr_a: Ipv4Addr::new(10, 201, 0, 1),
            addr_b: Ipv4Addr::new(10, 201, 0, 2),
            mtu,
            dev_a: dev_a.clone(),
            dev_b: dev_b.clone(),
            created: Vec::new(),
        };
        for ns in [pair.ns_a.clone(), pair.ns_b.clone()] {
            ip(&["netns", "add", &ns])?;
            MADE.note(&ns, true);
            pair.created.push(ns);
        }
        let (a, b) = (pair.ns_a.clone(), pair.ns_b.clone());
        let mtu_s = mtu.to_string();
        // Fixed MAC addresses and permanent neighbour entries: no ARP, whose first request
        // can be lost while the link comes up (then every datagram waits a 1 s retry out).
        let (mac_a, mac_b) = ("02:53:53:00:00:01", "02:53:53:00:00:02");
        ip(&[
            "link", "add", &dev_a, "netns", &a, "address", mac_a, "mtu", &mtu_s, "type", "veth",
            "peer", "name", &dev_b, "netns", &b, "address", mac_b, "mtu", &mtu_s,
        ])?;
        let sides = [
            (&a, &dev_a, pair.addr_a, pair.addr_b, mac_b),
            (&b, &dev_b, pair.addr_b, pair.addr_a, mac_a),
        ];
        for (ns, dev, addr, peer, peer_mac) in sides {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
            ip(&[
                "-n",
                ns,
                "neigh",
                "replace",
                &peer.to_string(),
                "lladdr",
                peer_mac,
                "dev",
                dev,
                "nud",
                "permanent",
            ])?;
            // The datapaths' wakers bind loopback.
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
        }
        for (ns, dev) in [(&a, &dev_a), (&b, &dev_b)] {
            wait_up(ns, dev)?;
        }
        Ok(pair)
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for ns in self.created.drain(..) {
            match ip(&["netns", "del", &ns]) {
                Ok(()) => MADE.note(&ns, false),
                Err(e) => eprintln!("warning: could not remove network namespace {ns}: {e}"),
            }
        }
    }
}

/// Moves the calling thread into the named network namespace (`ip netns` name).
pub fn enter(ns: &str) -> io::Result<()> {
    let f = File::open(format!("/var/run/netns/{ns}"))
        .map_err(|e| io::Error::new(e.kind(), format!("network namespace {ns}: {e}")))?;
    rustix::thread::move_into_link_name_space(
        f.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .map_err(|e| io::Error::other(format!("entering network namespace {ns}: {e}")))
}

/// Waits (up to 2 s) until `dev` in `ns` reports its link operationally up.
pub fn wait_up(ns: &str, dev: &str) -> Result<(), String> {
    let t = std::time::Instant::now();
    loop {
        let out = Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", "dev", dev])
            .output()
            .map_err(|e| format!("running ip (iproute2): {e}"))?;
        if String::from_utf8_lossy(&out.stdout).contains("state UP") {
            return Ok(());
        }
        if t.elapsed() > std::time::Duration::from_secs(2) {
            return Err(format!("{dev} in namespace {ns} did not come up"));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Runs `ip ARGS`, turning a failure into its stderr.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip (iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Deletes namespaces of earlier runs whose process no longer exists (killed before its
/// guard ran).
fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if let Some(pid) = owner_pid(name) {
            if !alive(pid) {
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
}

/// Whether process `pid` exists and has not exited (a zombie has).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The process id in a name this module makes (`ssd<pid>_<n>a`), if it is one.
fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, tail) = rest.split_once('_')?;
    let side = tail.trim_start_matches(|c: char| c.is_ascii_digit());
    if side != "a" && side != "b" || tail.len() == side.len() {
        return None;
    }
    pid.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_names() {
        assert_eq!(owner_pid("ssd1234_0a"), Some(1234));
        assert_eq!(owner_pid("ssd1234_12b"), Some(1234));
        assert_eq!(owner_pid("ssd1234_b"), None);
        assert_eq!(owner_pid("ssd1234_0c"), None);
        assert_eq!(owner_pid("other"), None);
        assert_eq!(owner_pid("ssdx_0a"), None);
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX));
    }
}
