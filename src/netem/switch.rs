//! `slipstream netem switch`: N hosts (namespaces `NAME-1` … `NAME-N`, addresses
//! [`switch_addr`]) joined through an emulated store-and-forward switch.
//!
//! Each host has an access link into the switch and an output port toward it, each a
//! simulated [`Link`] with its own rate and drop-tail queue (and, if asked, delay, jitter and
//! loss). A packet a host sends crosses its access link, is switched on its IPv4 destination
//! address and crosses the destination's output port: several senders to one host congest
//! that host's port, as on a real switch. Packets to no host of the switch (IPv6 router
//! solicitations, broadcasts) are dropped and counted.
//!
//! The forwarder hands a packet from an access link to a port at the time the access link
//! delivers it (not when the forwarder gets to it), and takes the access links' packets in
//! the order they are due, so that a port sees its arrivals in time order.
//!
//! [`Link`]: slipstream_proto::sim::Link

use super::forward::{fatal, wait_devices, SLACK};
use super::state::StatsWriter;
use super::{netns, state, Teardown, DEV};
use crate::datapath::Impairment;
use rustix::event::{PollFd, PollFlags};
use rustix::time::{clock_gettime, ClockId};
use serde::Serialize;
use slipstream_proto::sim::{Link, LinkConfig};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Most hosts a switch joins.
pub const MAX_HOSTS: usize = 32;
/// Largest IP packet a TUN device hands over.
const MAX_PACKET: usize = 65_535;
/// Packets read from one device per turn.
const READ_BATCH: usize = 64;
/// How often the counters are written out.
const STATS_EVERY: Duration = Duration::from_millis(100);

/// Address of host `i` (1-based) of a switch.
pub fn switch_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 78, 0, i.min(254) as u8)
}

/// The namespace of host `i` (1-based) of switch `name`.
pub fn host_netns(name: &str, i: usize) -> String {
    format!("{name}-{i}")
}

/// What a switch is made of.
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchSpec {
    /// Hosts, 2 to [`MAX_HOSTS`].
    pub hosts: usize,
    /// Each host's link into the switch.
    pub access: Impairment,
    /// The switch's output port toward each host.
    pub port: Impairment,
    /// MTU of every host's interface.
    pub mtu: u32,
}

/// One host of a running switch.
#[derive(Debug, Clone, Serialize)]
pub struct Host {
    /// Its network namespace.
    pub netns: String,
    /// Its address.
    pub addr: Ipv4Addr,
}

/// A running switch, as [`switch_up`] reports it.
#[derive(Debug, Clone, Serialize)]
pub struct SwitchInfo {
    /// The emulator's name.
    pub name: String,
    /// The hosts, in order.
    pub hosts: Vec<Host>,
    /// Process id of the forwarder.
    pub pid: u32,
    /// Interface name in every namespace.
    pub dev: &'static str,
    /// MTU of the interfaces.
    pub mtu: u32,
    /// Each access link, as a `--netem` spec.
    pub access: String,
    /// Each output port, as a `--netem` spec.
    pub port: String,
}

/// Creates switch `name` and starts its forwarder in the background (`exe netem run NAME
/// --hosts N --access SPEC --port SPEC`). On error, whatever was created is removed again.
pub fn switch_up(name: &str, spec: &SwitchSpec, exe: &Path) -> Result<SwitchInfo, String> {
    super::validate_name(name)?;
    super::need_root()?;
    if !(2..=MAX_HOSTS).contains(&spec.hosts) {
        return Err(format!("a switch joins 2 to {MAX_HOSTS} hosts"));
    }
    let dir = state::state_dir(name);
    if dir.exists() {
        return Err(format!(
            "an emulator '{name}' exists already; `slipstream netem down {name}` first"
        ));
    }
    let names: Vec<String> = (1..=spec.hosts).map(|i| host_netns(name, i)).collect();
    if let Some(ns) = names.iter().find(|ns| super::netns_exists(ns)) {
        return Err(format!(
            "network namespace {ns} already exists and is not an emulator's; choose another \
             name or remove it (`ip netns del {ns}`)"
        ));
    }
    fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    super::made(name, true);
    let mut guard = Teardown(Some(name.to_string()));
    state::write(name, state::HOSTS, &spec.hosts.to_string())?;
    for ns in &names {
        netns::ip(&["netns", "add", ns])?;
    }
    let (access, port) = (spec.access.to_spec(), spec.port.to_spec());
    let hosts = spec.hosts.to_string();
    let pid = super::start_forwarder(
        name,
        exe,
        &["--hosts", &hosts, "--access", &access, "--port", &port],
    )?;
    let mut out = Vec::new();
    for (i, ns) in names.iter().enumerate() {
        let addr = switch_addr(i + 1);
        super::configure_device(ns, addr, spec.mtu)?;
        out.push(Host {
            netns: ns.clone(),
            addr,
        });
    }
    let info = SwitchInfo {
        name: name.to_string(),
        hosts: out,
        pid,
        dev: DEV,
        mtu: spec.mtu,
        access,
        port,
    };
    let json = serde_json::to_string(&info).map_err(|e| e.to_string())?;
    state::write(name, state::INFO, &json)?;
    guard.0 = None;
    Ok(info)
}

/// The forwarder of a switch (`netem run NAME --hosts N ...`): opens every host's device,
/// says it is ready, then forwards until killed or a device disappears.
pub fn run_switch(name: &str, spec: &SwitchSpec) -> Result<(), String> {
    super::validate_name(name)?;
    let mut devs = Vec::with_capacity(spec.hosts);
    for i in 1..=spec.hosts {
        let ns = host_netns(name, i);
        netns::enter(&ns).map_err(|e| e.to_string())?;
        devs.push(crate::sys::tun::open(DEV).map_err(|e| format!("in namespace {ns}: {e}"))?);
    }
    state::write(name, state::READY, "")?;
    let stats_path = state::state_dir(name).join(state::STATS);
    Switch::new(devs, spec, stats_path)
        .run()
        .map_err(|e| format!("forwarder: {e}"))
}

/// Counters of one host beyond its links' own.
#[derive(Debug, Default, Clone, Copy)]
struct HostStats {
    /// Packets read from its device.
    read: u64,
    /// Packets to no host of the switch (or not IPv4), dropped.
    unroutable: u64,
    /// Packets its device refused.
    write_drops: u64,
}

/// The forwarding loop of a switch.
struct Switch {
    devs: Vec<File>,
    access: Vec<Link>,
    ports: Vec<Link>,
    stats: Vec<HostStats>,
    buf: Vec<u8>,
    writer: StatsWriter,
    started: Instant,
}

fn link(imp: &Impairment, seed_offset: u64) -> Link {
    Link::new(
        LinkConfig {
            mtu: MAX_PACKET,
            ..imp.link.clone()
        },
        imp.seed.wrapping_add(seed_offset),
    )
}

impl Switch {
    fn new(devs: Vec<File>, spec: &SwitchSpec, stats_path: PathBuf) -> Switch {
        let n = devs.len();
        Switch {
            access: (0..n).map(|i| link(&spec.access, i as u64)).collect(),
            ports: (0..n).map(|i| link(&spec.port, 1000 + i as u64)).collect(),
            stats: vec![HostStats::default(); n],
            devs,
            buf: vec![0; MAX_PACKET],
            writer: StatsWriter::new(stats_path),
            started: Instant::now(),
        }
    }

    /// The port a packet goes out of: its IPv4 destination's host.
    fn route(&self, packet: &[u8]) -> Option<usize> {
        if packet.first()? >> 4 != 4 {
            return None;
        }
        let dst = packet.get(16..20)?;
        let net = switch_addr(1).octets();
        if dst[..3] != net[..3] {
            return None;
        }
        let i = usize::from(dst[3]);
        (1..=self.devs.len()).contains(&i).then(|| i - 1)
    }

    fn run(mut self) -> io::Result<()> {
        let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1));
        let mut next_stats = Instant::now();
        // The devices' poll set, built once on duplicates of their descriptors (the same
        // open devices): a wait allocates nothing.
        let polled = self
            .devs
            .iter()
            .map(File::try_clone)
            .collect::<io::Result<Vec<_>>>()?;
        let mut fds: Vec<PollFd<'_>> = polled
            .iter()
            .map(|d| PollFd::new(d, PollFlags::IN))
            .collect();
        loop {
            let now = Instant::now();
            self.switch_due(now);
            self.deliver(now)?;
            let mut busy = false;
            for i in 0..self.devs.len() {
                busy |= self.ingest(i)?;
            }
            if now >= next_stats {
                self.write_stats();
                next_stats = now + STATS_EVERY;
            }
            if busy {
                continue;
            }
            let deadline = self
                .access
                .iter()
                .chain(&self.ports)
                .filter_map(Link::next_delivery)
                .fold(next_stats, Instant::min);
            let wait = deadline.saturating_duration_since(Instant::now());
            wait_devices(&mut fds, wait, |i| format!("host {}", i + 1))?;
        }
    }

    /// Moves every packet the access links deliver by `now` (plus the slack) into its
    /// output port, earliest first, each at the time its access link delivered it.
    fn switch_due(&mut self, now: Instant) {
        let horizon = now + SLACK;
        loop {
            let next = self
                .access
                .iter()
                .enumerate()
                .filter_map(|(i, l)| Some((l.next_delivery()?, i)))
                .min();
            let Some((at, i)) = next.filter(|&(at, _)| at <= horizon) else {
                return;
            };
            let Some(n) = self.access[i].poll_deliver(at, &mut self.buf) else {
                return;
            };
            match self.route(&self.buf[..n]) {
                Some(j) => self.ports[j].send(at, &self.buf[..n]),
                None => self.stats[i].unroutable += 1,
            }
        }
    }

    /// Writes every packet the ports deliver by `now` (plus the slack) into its host.
    fn deliver(&mut self, now: Instant) -> io::Result<()> {
        for (j, port) in self.ports.iter_mut().enumerate() {
            while let Some(n) = port.poll_deliver(now + SLACK, &mut self.buf) {
                match (&self.devs[j]).write(&self.buf[..n]) {
                    Ok(_) => {}
                    Err(e) if fatal(&e) => {
                        return Err(io::Error::new(
                            e.kind(),
                            format!("writing to host {}: {e}", j + 1),
                        ))
                    }
                    Err(_) => self.stats[j].write_drops += 1,
                }
            }
        }
        Ok(())
    }

    /// Reads up to [`READ_BATCH`] packets from host `i` into its access link. Returns
    /// whether the batch was full.
    fn ingest(&mut self, i: usize) -> io::Result<bool> {
        for _ in 0..READ_BATCH {
            match (&self.devs[i]).read(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.stats[i].read += 1;
                    self.access[i].send(Instant::now(), &self.buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if fatal(&e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("reading from host {}: {e}", i + 1),
                    ))
                }
                Err(_) => return Ok(false),
            }
        }
        Ok(true)
    }

    fn write_stats(&self) {
        let cpu = clock_gettime(ClockId::ProcessCPUTime);
        let link = |l: &Link| {
            let s = l.stats();
            serde_json::json!({
                "offered": s.offered,
                "delivered": s.delivered,
                "delivered_bytes": s.delivered_bytes,
                "lost": s.lost,
                "queue_drops": s.queue_drops,
                "in_flight": l.in_flight(),
            })
        };
        let hosts: Vec<_> = (0..self.devs.len())
            .map(|i| {
                serde_json::json!({
                    "host": i + 1,
                    "read": self.stats[i].read,
                    "unroutable": self.stats[i].unroutable,
                    "write_drops": self.stats[i].write_drops,
                    "access": link(&self.access[i]),
                    "port": link(&self.ports[i]),
                })
            })
            .collect();
        let v = serde_json::json!({
            "running": true,
            "pid": std::process::id(),
            "uptime_seconds": self.started.elapsed().as_secs_f64(),
            "cpu_seconds": cpu.tv_sec as f64 + cpu.tv_nsec as f64 * 1e-9,
            "hosts": hosts,
        });
        self.writer.publish(v.to_string());
    }
}
