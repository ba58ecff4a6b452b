//! `slipstream netem up|down|stats|list`: the link emulator's command line (see
//! [`slipstream::netem`]).

use clap::{Args, Subcommand};
use slipstream::datapath::Impairment;
use slipstream::netem::{self, Spec};
use std::time::Duration;

/// The `netem` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum NetemCmd {
    /// Create namespaces NAME-a and NAME-b joined through an emulated link, start the emulator
    /// in the background, and print (last line) JSON with each side's namespace and address.
    Up(Box<UpArgs>),
    /// Stop emulator NAME and remove its namespaces and state.
    Down {
        /// The emulator's name.
        name: String,
    },
    /// Print emulator NAME's counters per direction and its own CPU time.
    Stats {
        /// The emulator's name.
        name: String,
        /// One JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the emulators on this machine.
    List,
    /// Create N hosts (namespaces NAME-1 ... NAME-N, addresses 10.78.0.1 ...) joined through
    /// an emulated switch: each host's access link and the switch's output port toward each
    /// host have their own rate and drop-tail queue, so several senders congest one
    /// receiver's port. Prints (last line) JSON with each host's namespace and address.
    Switch(SwitchArgs),
    /// The emulator process itself (started by `up` or `switch`).
    #[command(hide = true)]
    Run {
        name: String,
        #[arg(long)]
        a_to_b: Option<String>,
        #[arg(long)]
        b_to_a: Option<String>,
        #[arg(long)]
        hosts: Option<usize>,
        #[arg(long)]
        access: Option<String>,
        #[arg(long)]
        port: Option<String>,
    },
}

/// Options of `netem switch`.
#[derive(Debug, Args)]
pub(crate) struct SwitchArgs {
    /// The emulator's name: 1 to 32 letters, digits, '_' or '-'.
    name: String,
    /// Hosts to join (2 to 32).
    #[arg(long, default_value_t = 4)]
    hosts: usize,
    /// Each host's link into the switch, as a --netem spec (e.g. rate=100mbit,queue=64k).
    #[arg(long, value_name = "SPEC", default_value = "rate=100mbit")]
    access: String,
    /// The switch's output port toward each host, as a --netem spec (e.g.
    /// rate=100mbit,queue=64k).
    #[arg(long, value_name = "SPEC", default_value = "rate=100mbit")]
    port: String,
    /// MTU of every interface.
    #[arg(long, value_name = "BYTES", default_value_t = 1500)]
    mtu: u32,
}

impl SwitchArgs {
    /// The switch these options describe.
    pub(crate) fn spec(&self) -> Result<netem::SwitchSpec, String> {
        if !(68..=65_535).contains(&self.mtu) {
            return Err(format!("--mtu {}: must be within 68..=65535", self.mtu));
        }
        let parse = |flag: &str, v: &str| -> Result<Impairment, String> {
            let mut imp = Impairment::parse(v).map_err(|e| format!("--{flag}: {e}"))?;
            if !v.contains("queue=") {
                imp.link.queue_bytes = default_queue(imp.link.rate_bps, imp.link.delay * 2);
            }
            Ok(imp)
        };
        Ok(netem::SwitchSpec {
            hosts: self.hosts,
            access: parse("access", &self.access)?,
            port: parse("port", &self.port)?,
            mtu: self.mtu,
        })
    }
}

/// Options of `netem up`. Each applies to both directions unless its `--reverse-` form
/// overrides it for b → a.
#[derive(Debug, Args)]
pub(crate) struct UpArgs {
    /// The emulator's name: 1 to 32 letters, digits, '_' or '-'.
    name: String,
    /// Bottleneck rate, e.g. 100mbit, 1gbit (IP bytes; unlimited when absent).
    #[arg(long, value_name = "RATE")]
    rate: Option<String>,
    /// One-way delay, e.g. 25ms, 500us.
    #[arg(long, value_name = "TIME")]
    delay: Option<String>,
    /// Extra delay drawn uniformly from 0..=TIME per packet (order is kept; see --reorder).
    #[arg(long, value_name = "TIME")]
    jitter: Option<String>,
    /// Random loss, e.g. 1% or 0.01.
    #[arg(long, value_name = "RATIO")]
    loss: Option<String>,
    /// Bursty (Gilbert–Elliott) loss instead of --loss: P/R[/BAD[/GOOD]] as netem's
    /// `gemodel`: chance per packet of entering the bad state, of leaving it, and the loss
    /// ratios in the bad (default 100%) and good (default 0%) states; e.g. 1%/30%.
    #[arg(long, value_name = "P/R[/BAD[/GOOD]]")]
    loss_burst: Option<String>,
    /// Share of packets held back (delay/2 + 1 ms more) so later ones overtake them.
    #[arg(long, value_name = "RATIO")]
    reorder: Option<String>,
    /// Share of packets delivered twice.
    #[arg(long, value_name = "RATIO")]
    dup: Option<String>,
    /// Drop-tail queue in front of the bottleneck, bytes (e.g. 256k, 4m). Default: one
    /// bandwidth-delay product of --rate and the round-trip delay, at least 10 ms of --rate
    /// and at least 64 KiB.
    #[arg(long, value_name = "BYTES")]
    queue: Option<String>,
    /// --rate for b → a.
    #[arg(long, value_name = "RATE")]
    reverse_rate: Option<String>,
    /// --delay for b → a.
    #[arg(long, value_name = "TIME")]
    reverse_delay: Option<String>,
    /// --jitter for b → a.
    #[arg(long, value_name = "TIME")]
    reverse_jitter: Option<String>,
    /// --loss for b → a.
    #[arg(long, value_name = "RATIO")]
    reverse_loss: Option<String>,
    /// --loss-burst for b → a.
    #[arg(long, value_name = "P/R[/BAD[/GOOD]]")]
    reverse_loss_burst: Option<String>,
    /// --reorder for b → a.
    #[arg(long, value_name = "RATIO")]
    reverse_reorder: Option<String>,
    /// --dup for b → a.
    #[arg(long, value_name = "RATIO")]
    reverse_dup: Option<String>,
    /// --queue for b → a.
    #[arg(long, value_name = "BYTES")]
    reverse_queue: Option<String>,
    /// MTU of both interfaces.
    #[arg(long, value_name = "BYTES", default_value_t = 1500)]
    mtu: u32,
    /// Seed of the random choices (loss, jitter, reordering, duplication); b → a uses SEED+1.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Smallest default queue.
const MIN_QUEUE: usize = 64 << 10;
/// Smallest default queue in time at the configured rate.
const MIN_QUEUE_TIME: Duration = Duration::from_millis(10);

impl UpArgs {
    /// The emulator specification these options describe.
    pub(crate) fn spec(&self) -> Result<Spec, String> {
        if !(68..=65_535).contains(&self.mtu) {
            return Err(format!("--mtu {}: must be within 68..=65535", self.mtu));
        }
        let fwd = [
            ("rate", "rate", &self.rate),
            ("delay", "delay", &self.delay),
            ("jitter", "jitter", &self.jitter),
            ("loss", "loss", &self.loss),
            ("loss-burst", "burst", &self.loss_burst),
            ("reorder", "reorder", &self.reorder),
            ("dup", "dup", &self.dup),
            ("queue", "queue", &self.queue),
        ];
        let rev = [
            &self.reverse_rate,
            &self.reverse_delay,
            &self.reverse_jitter,
            &self.reverse_loss,
            &self.reverse_loss_burst,
            &self.reverse_reorder,
            &self.reverse_dup,
            &self.reverse_queue,
        ];
        let mut ab = Impairment::parse("").map_err(|e| e.to_string())?;
        let mut ba = ab.clone();
        for ((flag, key, f), r) in fwd.iter().zip(rev) {
            if let Some(v) = f {
                apply(&mut ab, flag, key, v)?;
            }
            if let Some(v) = r.as_ref().or(f.as_ref()) {
                let rflag = if r.is_some() {
                    format!("reverse-{flag}")
                } else {
                    flag.to_string()
                };
                apply(&mut ba, &rflag, key, v)?;
            }
        }
        if self.loss.is_some() && self.loss_burst.is_some() {
            return Err("--loss and --loss-burst exclude each other".into());
        }
        ab.seed = self.seed;
        ba.seed = self.seed.wrapping_add(1);
        let rtt = ab.link.delay + ba.link.delay;
        for (imp, explicit) in [
            (&mut ab, self.queue.is_some()),
            (
                &mut ba,
                self.reverse_queue.is_some() || self.queue.is_some(),
            ),
        ] {
            if !explicit {
                imp.link.queue_bytes = default_queue(imp.link.rate_bps, rtt);
            }
        }
        Ok(Spec {
            ab,
            ba,
            mtu: self.mtu,
        })
    }
}

/// One bandwidth-delay product, at least [`MIN_QUEUE_TIME`] of the rate (senders are bursty:
/// a queue much shorter than that idles the link) and at least [`MIN_QUEUE`].
fn default_queue(rate_bps: Option<u64>, rtt: Duration) -> usize {
    let time = rtt.max(MIN_QUEUE_TIME);
    let bdp = rate_bps.map_or(0, |r| (r as f64 / 8.0 * time.as_secs_f64()) as usize);
    bdp.max(MIN_QUEUE)
}

/// Applies option `--flag VALUE` (link key `key`) to `imp`.
fn apply(imp: &mut Impairment, flag: &str, key: &str, value: &str) -> Result<(), String> {
    // Values go through the `--netem` spec parser; keep them to one key=value pair.
    let value = if key == "burst" {
        value.replace(',', "/")
    } else {
        value.to_string()
    };
    if value.contains([',', '=']) {
        return Err(format!("--{flag} {value}: bad value"));
    }
    let one = Impairment::parse(&format!("{key}={value}")).map_err(|e| format!("--{flag}: {e}"))?;
    let l = &mut imp.link;
    match key {
        "rate" => l.rate_bps = one.link.rate_bps,
        "delay" => l.delay = one.link.delay,
        "jitter" => l.jitter = one.link.jitter,
        "loss" => l.loss = one.link.loss,
        "burst" => l.burst = one.link.burst,
        "reorder" => l.reorder = one.link.reorder,
        "dup" => l.dup = one.link.dup,
        _ => l.queue_bytes = one.link.queue_bytes,
    }
    Ok(())
}

/// Runs a `netem` subcommand.
pub(crate) fn run(cmd: NetemCmd) -> Result<(), String> {
    match cmd {
        NetemCmd::Up(a) => {
            let spec = a.spec()?;
            let exe = std::env::current_exe()
                .map_err(|e| format!("finding the slipstream binary: {e}"))?;
            let info = netem::up(&a.name, &spec, &exe)?;
            eprintln!(
                "netem {}: {} ({}) <-> {} ({}) via {} in each, emulator pid {}",
                info.name, info.a.netns, info.a.addr, info.b.netns, info.b.addr, info.dev, info.pid
            );
            eprintln!("  a -> b: {}", describe(&spec.ab));
            eprintln!("  b -> a: {}", describe(&spec.ba));
            eprintln!(
                "  run commands with `ip netns exec {} ...`; stop with `slipstream netem down {}`",
                info.a.netns, info.name
            );
            let json = serde_json::to_string(&info).map_err(|e| e.to_string())?;
            println!("{json}");
            Ok(())
        }
        NetemCmd::Down { name } => {
            let r = netem::down(&name)?;
            let pid = r
                .pid
                .map_or("not running".into(), |p| format!("pid {p} stopped"));
            let ns = if r.namespaces.is_empty() {
                "none".into()
            } else {
                r.namespaces.join(", ")
            };
            eprintln!("netem {name}: removed (emulator {pid}; namespaces: {ns})");
            Ok(())
        }
        NetemCmd::Stats { name, json } => {
            let v = netem::stats(&name)?;
            if json {
                println!("{v}");
            } else {
                print_stats(&name, &v);
            }
            Ok(())
        }
        NetemCmd::List => {
            for name in netem::list() {
                let info = std::fs::read_to_string(netem::state_dir(&name).join("info.json"))
                    .unwrap_or_default();
                println!("{name} {}", info.trim());
            }
            Ok(())
        }
        NetemCmd::Switch(a) => {
            let spec = a.spec()?;
            let exe = std::env::current_exe()
                .map_err(|e| format!("finding the slipstream binary: {e}"))?;
            let info = netem::switch_up(&a.name, &spec, &exe)?;
            let hosts: Vec<String> = info
                .hosts
                .iter()
                .map(|h| format!("{} ({})", h.netns, h.addr))
                .collect();
            eprintln!(
                "netem {}: switch joining {}; emulator pid {}",
                info.name,
                hosts.join(", "),
                info.pid
            );
            eprintln!("  access links: {}", describe(&spec.access));
            eprintln!("  output ports: {}", describe(&spec.port));
            eprintln!(
                "  run commands with `ip netns exec {} ...`; stop with `slipstream netem down {}`",
                info.hosts[0].netns, info.name
            );
            let json = serde_json::to_string(&info).map_err(|e| e.to_string())?;
            println!("{json}");
            Ok(())
        }
        NetemCmd::Run {
            name,
            hosts: Some(hosts),
            access,
            port,
            ..
        } => {
            #[cfg(target_os = "linux")]
            slipstream::HugePageAlloc::disable();
            let spec = netem::SwitchSpec {
                hosts,
                access: Impairment::parse(access.as_deref().unwrap_or(""))?,
                port: Impairment::parse(port.as_deref().unwrap_or(""))?,
                mtu: 0,
            };
            netem::run_switch(&name, &spec)
        }
        NetemCmd::Run {
            name,
            a_to_b,
            b_to_a,
            ..
        } => {
            // The forwarder times every packet: no 2 MiB first-touch stalls on its buffers,
            // whatever SLIPSTREAM_HUGEPAGES says (with huge pages here and at both ends, a
            // 10 ms path with 1 % loss lost up to 5 % of its rate; at both ends only, less).
            #[cfg(target_os = "linux")]
            slipstream::HugePageAlloc::disable();
            let spec = Spec {
                ab: Impairment::parse(a_to_b.as_deref().unwrap_or(""))?,
                ba: Impairment::parse(b_to_a.as_deref().unwrap_or(""))?,
                mtu: 0,
            };
            netem::run_forwarder(&name, &spec)
        }
    }
}

/// One line describing a direction.
fn describe(imp: &Impairment) -> String {
    let l = &imp.link;
    let rate = l
        .rate_bps
        .map_or("unlimited".into(), |r| format!("{} Mbit/s", r as f64 / 1e6));
    let loss = match l.burst {
        Some(ge) => format!(
            "bursty loss (p {} r {} bad {} good {}, mean {:.3}%)",
            ge.p_good_to_bad,
            ge.p_bad_to_good,
            ge.loss_bad,
            ge.loss_good,
            imp.mean_loss() * 100.0
        ),
        None => format!("loss {}%", l.loss * 100.0),
    };
    format!(
        "rate {rate}, queue {} B, delay {:?} + jitter {:?}, {loss}, reorder {}%, dup {}%",
        l.queue_bytes,
        l.delay,
        l.jitter,
        l.reorder * 100.0,
        l.dup * 100.0
    )
}

fn print_stats(name: &str, v: &serde_json::Value) {
    let f = |x: &serde_json::Value| x.as_f64().unwrap_or(0.0);
    let up = f(&v["uptime_seconds"]);
    let cpu = f(&v["cpu_seconds"]);
    println!(
        "netem {name}: up {up:.1} s, emulator CPU {cpu:.2} s ({:.1}% of one core){}",
        if up > 0.0 { cpu / up * 100.0 } else { 0.0 },
        if v["running"] == false {
            " [NOT RUNNING]"
        } else {
            ""
        }
    );
    println!(
        "{:<7} {:>12} {:>12} {:>14} {:>9} {:>11} {:>9} {:>10} {:>10}",
        "dir", "read", "delivered", "bytes", "lost", "queue_drop", "dup", "reordered", "dev_drops"
    );
    for key in ["a_to_b", "b_to_a"] {
        let d = &v[key];
        let n = |k: &str| d[k].as_u64().unwrap_or(0);
        println!(
            "{:<7} {:>12} {:>12} {:>14} {:>9} {:>11} {:>9} {:>10} {:>10}",
            key.replace("_to_", "->"),
            n("read"),
            n("delivered"),
            n("delivered_bytes"),
            n("lost"),
            n("queue_drops"),
            n("duplicated"),
            n("reordered"),
            n("device_drops") + n("write_drops"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        up: UpArgs,
    }

    fn spec(args: &[&str]) -> Result<Spec, String> {
        let mut v = vec!["t", "n"];
        v.extend_from_slice(args);
        T::try_parse_from(v).map_err(|e| e.to_string())?.up.spec()
    }

    #[test]
    fn both_directions_alike_unless_reversed() {
        let s = spec(&["--rate", "1gbit", "--delay", "25ms", "--loss", "1%"]).unwrap();
        assert_eq!(s.ab.link.rate_bps, Some(1_000_000_000));
        assert_eq!(s.ab.link, s.ba.link);
        assert_eq!(s.ab.link.delay, Duration::from_millis(25));
        // One BDP at 1 Gbit/s and 50 ms.
        assert_eq!(s.ab.link.queue_bytes, 6_250_000);
        assert_ne!(s.ab.seed, s.ba.seed);

        let s = spec(&[
            "--delay",
            "10ms",
            "--reverse-delay",
            "30ms",
            "--reverse-loss",
            "5%",
        ])
        .unwrap();
        assert_eq!(s.ab.link.delay, Duration::from_millis(10));
        assert_eq!(s.ba.link.delay, Duration::from_millis(30));
        assert_eq!((s.ab.link.loss, s.ba.link.loss), (0.0, 0.05));
        assert_eq!(s.ab.link.queue_bytes, MIN_QUEUE);
        // 10 ms of the rate when the round trip is shorter.
        let s = spec(&["--rate", "1gbit"]).unwrap();
        assert_eq!(s.ab.link.queue_bytes, 1_250_000);

        let s = spec(&["--loss-burst", "1%,30%", "--queue", "128k"]).unwrap();
        assert!(s.ab.link.burst.is_some() && s.ba.link.burst.is_some());
        assert_eq!(s.ba.link.queue_bytes, 128 << 10);
    }

    #[test]
    fn bad_values_name_their_flag() {
        for (args, flag) in [
            (&["--loss", "120%"][..], "--loss"),
            (&["--rate", "fast"][..], "--rate"),
            (&["--reverse-delay", "soon"][..], "--reverse-delay"),
            (&["--loss", "1%,delay=3"][..], "--loss"),
            (&["--loss-burst", "1%"][..], "--loss-burst"),
        ] {
            let e = spec(args).unwrap_err();
            assert!(e.contains(flag), "{args:?}: {e}");
        }
        assert!(spec(&["--loss", "1%", "--loss-burst", "1%/30%"]).is_err());
        assert!(spec(&["--mtu", "20"]).is_err());
    }
}
