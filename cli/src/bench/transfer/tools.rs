//! The transfer tools compared, and how to run each: its receiver and sender command lines,
//! whether it is available here, its version, and where its retransmission count comes from.
//!
//! | tool | receiver | sender | retransmitted fraction |
//! |---|---|---|---|
//! | `slipstream` | `slipstream recv` | `slipstream send` | sender's `--stats-json`: `pkts_retransmitted / pkts_sent` |
//! | `tcp-cubic`, `tcp-bbr` | `bench transfer --tcp-peer recv` | `--tcp-peer send` ([`super::tcp`]) | the sender namespace's `RetransSegs / OutSegs` |
//! | `srt` | `srt-file-transmit` listener | `srt-file-transmit` caller | receiver's `-statsout`: retransmitted packets received / packets received |
//! | `udt` | `udtperf recv` | `udtperf send` | sender's JSON line: `pkts_retrans / pkts_sent` |
//!
//! libsrt's sender stops reporting statistics once the whole file sits in its (large) send
//! buffer, so its counters are read at the receiver, which reports until the end (from its
//! line with the most packets: the file also holds lines of the listening socket).

use super::measure::TcpCounters;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One transfer tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tool {
    /// This crate's `send` / `recv`.
    Slipstream,
    /// Kernel TCP with CUBIC.
    TcpCubic,
    /// Kernel TCP with BBR.
    TcpBbr,
    /// libsrt's `srt-file-transmit` (file mode, UDT's native congestion control).
    Srt,
    /// UDT4 (`udtperf` over libudt).
    Udt,
}

impl Tool {
    /// Every tool, in report order.
    pub const ALL: [Tool; 5] = [
        Tool::Slipstream,
        Tool::TcpCubic,
        Tool::TcpBbr,
        Tool::Srt,
        Tool::Udt,
    ];

    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Slipstream => "slipstream",
            Tool::TcpCubic => "tcp-cubic",
            Tool::TcpBbr => "tcp-bbr",
            Tool::Srt => "srt",
            Tool::Udt => "udt",
        }
    }

    /// The tool called `name`.
    pub fn parse(name: &str) -> Result<Tool, String> {
        Tool::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| {
                let all: Vec<&str> = Tool::ALL.iter().map(|t| t.name()).collect();
                format!("unknown tool '{name}' (valid: {})", all.join(", "))
            })
    }

    /// Whether its receiver listens on TCP (else UDP).
    pub fn is_tcp(self) -> bool {
        matches!(self, Tool::TcpCubic | Tool::TcpBbr)
    }

    /// The kernel congestion control of a TCP tool.
    fn tcp_cc(self) -> Option<&'static str> {
        match self {
            Tool::TcpCubic => Some("cubic"),
            Tool::TcpBbr => Some("bbr"),
            _ => None,
        }
    }
}

/// libsrt options for both ends: buffers for 1 Gbit/s × 200 ms with a full one-BDP queue
/// (about 50 MB in flight). `fc` is the flow window in packets (64 MiB / 1456-byte payloads
/// is 46091 packets; libsrt caps `rcvbuf` at `fc` packets); `rcvbuf` and `sndbuf` are bytes.
/// The defaults (fc 25600, 8192-packet buffers, about 12 MB) would cap a 200 ms path near
/// 480 Mbit/s.
pub const SRT_OPTIONS: &str = "fc=65536&rcvbuf=67108864&sndbuf=67108864";

/// Everything one run needs to build its command lines.
#[derive(Debug, Clone)]
pub struct Plan<'a> {
    /// The file to send.
    pub input: &'a Path,
    /// The (empty) directory the receiver writes into, under the input's file name.
    pub out_dir: &'a Path,
    /// Where the peers' logs and statistics files go.
    pub work: &'a Path,
    /// Port of the receiver.
    pub port: u16,
    /// Address the sender reaches the receiver at.
    pub rx_addr: IpAddr,
    /// Network namespace of the sender (none: this one).
    pub tx_ns: Option<&'a str>,
    /// Network namespace of the receiver.
    pub rx_ns: Option<&'a str>,
}

impl Plan<'_> {
    /// The receiver's output file.
    pub fn output(&self) -> PathBuf {
        self.out_dir
            .join(self.input.file_name().unwrap_or_default())
    }

    fn file(&self, name: &str) -> PathBuf {
        self.work.join(name)
    }

    /// The sender's stdout (JSON lines of the TCP peer and udtperf).
    pub fn tx_stdout(&self) -> PathBuf {
        self.file("tx.out")
    }
}

/// The programs used, found once per invocation.
#[derive(Debug)]
pub struct Toolbox {
    /// This binary.
    pub exe: PathBuf,
    /// The built `udtperf`, if UDT is available.
    pub udtperf: Option<PathBuf>,
}

/// A command running `program` in network namespace `ns` (through `ip netns exec`, which
/// execs it: the process is the tool itself), or here.
fn command_in(ns: Option<&str>, program: &Path) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// Output of a log file: stdout or stderr of a peer.
fn log_file(path: &Path) -> Result<Stdio, String> {
    std::fs::File::create(path)
        .map(Stdio::from)
        .map_err(|e| format!("{}: {e}", path.display()))
}

impl Toolbox {
    fn program(&self, tool: Tool) -> Result<PathBuf, String> {
        match tool {
            Tool::Slipstream | Tool::TcpCubic | Tool::TcpBbr => Ok(self.exe.clone()),
            Tool::Srt => Ok(PathBuf::from("srt-file-transmit")),
            Tool::Udt => self
                .udtperf
                .clone()
                .ok_or_else(|| "udtperf is not built".to_string()),
        }
    }

    /// The receiver's command, stdout and stderr going to files in the plan's work directory.
    pub fn receiver(&self, tool: Tool, plan: &Plan<'_>) -> Result<Command, String> {
        let mut c = command_in(plan.rx_ns, &self.program(tool)?);
        let out = plan.output();
        let port = plan.port.to_string();
        match tool {
            Tool::Slipstream => {
                c.arg("recv")
                    .arg(format!("srt://:{port}"))
                    .arg(&out)
                    .args(["--force", "-q", "--stats-json"])
                    .arg(plan.file("rx.json"));
            }
            Tool::TcpCubic | Tool::TcpBbr => {
                c.args(["bench", "transfer", "--tcp-peer", "recv", &port])
                    .arg(&out);
            }
            Tool::Srt => {
                // The listener names the file after the caller's stream id (the input's file
                // name), inside the output directory.
                c.args(["-s", "1000", "-pf", "json", "-f", "-statsout"])
                    .arg(plan.file("rx-stats.json"))
                    .arg(format!("srt://:{port}?mode=listener&{SRT_OPTIONS}"))
                    .arg(format!("file://{}/", plan.out_dir.display()));
            }
            Tool::Udt => {
                c.args(["recv", &port]).arg(&out);
            }
        }
        c.stdin(Stdio::null())
            .stdout(log_file(&plan.file("rx.out"))?)
            .stderr(log_file(&plan.file("rx.err"))?);
        Ok(c)
    }

    /// The sender's command.
    pub fn sender(&self, tool: Tool, plan: &Plan<'_>) -> Result<Command, String> {
        let mut c = command_in(plan.tx_ns, &self.program(tool)?);
        let (addr, port) = (plan.rx_addr, plan.port);
        match tool {
            Tool::Slipstream => {
                c.arg("send")
                    .arg(plan.input)
                    .arg(format!("srt://{addr}:{port}"))
                    .args(["-q", "--stats-json"])
                    .arg(plan.file("tx.json"));
            }
            Tool::TcpCubic | Tool::TcpBbr => {
                c.args(["bench", "transfer", "--tcp-peer", "send"])
                    .arg(std::net::SocketAddr::new(addr, port).to_string())
                    .arg(plan.input)
                    .arg(tool.tcp_cc().unwrap_or("cubic"));
            }
            Tool::Srt => {
                c.arg(format!("file://{}", plan.input.display()))
                    .arg(format!("srt://{addr}:{port}?{SRT_OPTIONS}"));
            }
            Tool::Udt => {
                c.arg("send")
                    .arg(addr.to_string())
                    .arg(port.to_string())
                    .arg(plan.input);
            }
        }
        c.stdin(Stdio::null())
            .stdout(log_file(&plan.tx_stdout())?)
            .stderr(log_file(&plan.file("tx.err"))?);
        Ok(c)
    }

    /// The retransmitted share of packets sent, and where it comes from, after a run; `None`
    /// with the reason when the tool left no count. `tcp` holds the sender namespace's
    /// counters before and after the run (TCP tools).
    pub fn retrans_fraction(
        &self,
        tool: Tool,
        plan: &Plan<'_>,
        tcp: Option<(TcpCounters, TcpCounters)>,
    ) -> Result<f64, String> {
        match tool {
            Tool::Slipstream => {
                let v = read_json(&plan.file("tx.json"))?;
                let c = &v["connection"];
                ratio(&c["pkts_retransmitted"], &c["pkts_sent"])
                    .map_err(|e| format!("sender's stats: {e}"))
            }
            Tool::TcpCubic | Tool::TcpBbr => {
                let (before, after) = tcp.ok_or("no TCP counters were read")?;
                after
                    .retrans_fraction_since(&before)
                    .ok_or_else(|| "no TCP segments counted".into())
            }
            Tool::Srt => {
                let text = std::fs::read_to_string(plan.file("rx-stats.json"))
                    .map_err(|e| format!("receiver stats: {e}"))?;
                // Totals grow line by line; lines of another socket (or a last line written
                // while closing) can carry other counts: take the line with the most packets.
                let v = text
                    .lines()
                    .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                    .max_by_key(|v| v["recv"]["packets"].as_u64().unwrap_or(0))
                    .ok_or("no JSON in the receiver's stats")?;
                let r = &v["recv"];
                ratio(&r["packetsRetransmitted"], &r["packets"])
                    .map_err(|e| format!("receiver's stats: {e}"))
            }
            Tool::Udt => {
                let text = std::fs::read_to_string(plan.tx_stdout())
                    .map_err(|e| format!("sender output: {e}"))?;
                let v = last_json_line(&text).ok_or("no JSON line from udtperf send")?;
                ratio(&v["pkts_retrans"], &v["pkts_sent"]).map_err(|e| format!("udtperf send: {e}"))
            }
        }
    }
}

/// `num / den` of two JSON counters: retransmitted packets and all packets sent (or received).
fn ratio(num: &serde_json::Value, den: &serde_json::Value) -> Result<f64, String> {
    let (Some(n), Some(d)) = (num.as_f64(), den.as_f64()) else {
        return Err("counters missing".into());
    };
    if d <= 0.0 || n < 0.0 || n > d {
        return Err(format!(
            "inconsistent counters: {n} retransmitted of {d} packets"
        ));
    }
    Ok(n / d)
}

fn read_json(path: &Path) -> Result<serde_json::Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The last line of `text` that parses as a JSON object.
pub fn last_json_line(text: &str) -> Option<serde_json::Value> {
    text.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l.trim()).ok())
        .find(|v| v.is_object())
}

/// Whether a tool can run here: `Ok(version text)` or `Err(why not)`. UDT is built here
/// (see [`build_udtperf`]).
pub fn probe(tool: Tool) -> Result<String, String> {
    match tool {
        Tool::Slipstream => Ok(format!("slipstream {}", env!("CARGO_PKG_VERSION"))),
        Tool::TcpCubic | Tool::TcpBbr => {
            let cc = tool.tcp_cc().unwrap_or("cubic");
            let avail =
                std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
                    .map_err(|e| format!("tcp_available_congestion_control: {e}"))?;
            if avail.split_whitespace().any(|c| c == cc) {
                Ok(format!("kernel TCP {cc}"))
            } else {
                Err(format!(
                    "TCP congestion control {cc} is not available in this kernel \
                     (available: {}; modprobe tcp_{cc})",
                    avail.trim()
                ))
            }
        }
        Tool::Srt => {
            let out = Command::new("srt-file-transmit")
                .arg("-version")
                .output()
                .map_err(|e| format!("srt-file-transmit: {e} (apt-get install srt-tools)"))?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            let version = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("SRT Library version:"))
                .and_then(|v| v.split(',').next())
                .map_or("version unknown", str::trim);
            Ok(format!("srt-file-transmit (libsrt {version})"))
        }
        Tool::Udt => {
            let out = Command::new("dpkg-query")
                .args(["-W", "-f", "${Version}", "libudt-dev"])
                .output();
            Ok(match out {
                Ok(o) if o.status.success() && !o.stdout.is_empty() => {
                    format!(
                        "udtperf (libudt {})",
                        String::from_utf8_lossy(&o.stdout).trim()
                    )
                }
                _ => "udtperf (libudt, version unknown)".into(),
            })
        }
    }
}

/// Builds `udtperf` from `src` (`build.sh` and `udtperf.cpp`) into `out`, unless `out` is
/// newer than every file in `src`. Fails with the build's own message (missing g++ or
/// libudt-dev, compile errors).
pub fn build_udtperf(src: &Path, out: &Path) -> Result<PathBuf, String> {
    let script = src.join("build.sh");
    if !script.exists() {
        return Err(format!(
            "{} not found (the UDT peer's sources; see --udt-dir)",
            script.display()
        ));
    }
    let newest_src = std::fs::read_dir(src)
        .map_err(|e| format!("{}: {e}", src.display()))?
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok()?.modified().ok())
        .max();
    let built = std::fs::metadata(out).and_then(|m| m.modified()).ok();
    if let (Some(b), Some(s)) = (built, newest_src) {
        if b >= s {
            return Ok(out.to_path_buf());
        }
    }
    eprintln!("building {} from {}", out.display(), src.display());
    let o = Command::new("sh")
        .arg(&script)
        .arg(out)
        .output()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    if o.status.success() && out.exists() {
        Ok(out.to_path_buf())
    } else {
        let err = String::from_utf8_lossy(&o.stderr);
        let tail: Vec<&str> = err.lines().rev().take(3).collect();
        Err(format!(
            "building udtperf failed ({}): {}",
            o.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for t in Tool::ALL {
            assert_eq!(Tool::parse(t.name()), Ok(t));
        }
        let e = Tool::parse("ftp").unwrap_err();
        assert!(e.contains("ftp") && e.contains("tcp-bbr, srt, udt"), "{e}");
    }

    #[test]
    fn json_lines() {
        let text = "noise\n{\"a\":1}\n{\"a\":2}\nnot json\n";
        assert_eq!(last_json_line(text).unwrap()["a"], 2);
        assert!(last_json_line("[1]\n").is_none());
        let v: serde_json::Value = serde_json::json!({"n": 5, "d": 100, "z": 0});
        assert_eq!(ratio(&v["n"], &v["d"]), Ok(0.05));
        assert!(ratio(&v["n"], &v["z"]).is_err());
        assert!(ratio(&v["d"], &v["n"])
            .unwrap_err()
            .contains("100 retransmitted of 5"));
        assert!(ratio(&v["x"], &v["d"]).is_err());
    }

    #[test]
    fn command_lines() {
        let tb = Toolbox {
            exe: PathBuf::from("/bin/slipstream"),
            udtperf: None,
        };
        let work = std::env::temp_dir().join(format!("slipstream-bt-cmd-{}", std::process::id()));
        std::fs::create_dir_all(&work).unwrap();
        let plan = Plan {
            input: Path::new("/dev/shm/x/input.bin"),
            out_dir: Path::new("/dev/shm/x/out"),
            work: &work,
            port: 4000,
            rx_addr: "10.77.0.2".parse().unwrap(),
            tx_ns: Some("n-a"),
            rx_ns: Some("n-b"),
        };
        let args = |c: &Command| -> Vec<String> {
            std::iter::once(c.get_program())
                .chain(c.get_args())
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let s = args(&tb.sender(Tool::Srt, &plan).unwrap()).join(" ");
        assert_eq!(
            s,
            format!(
                "ip netns exec n-a srt-file-transmit file:///dev/shm/x/input.bin \
                 srt://10.77.0.2:4000?{SRT_OPTIONS}"
            )
        );
        let r = args(&tb.receiver(Tool::TcpBbr, &plan).unwrap()).join(" ");
        assert_eq!(
            r,
            "ip netns exec n-b /bin/slipstream bench transfer --tcp-peer recv 4000 \
             /dev/shm/x/out/input.bin"
        );
        let s = args(&tb.sender(Tool::TcpBbr, &plan).unwrap());
        assert_eq!(
            s[s.len() - 3..],
            ["10.77.0.2:4000", "/dev/shm/x/input.bin", "bbr"]
        );
        assert!(tb.receiver(Tool::Udt, &plan).is_err());
        let _ = std::fs::remove_dir_all(&work);
    }
}
