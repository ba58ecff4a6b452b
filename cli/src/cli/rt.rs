//! `slipstream rt pong` and `slipstream rt ping`: real-time messages (`slipstream::rt`)
//! between two hosts, as ZeroMQ's and Aeron's latency samples do it. `pong` answers each
//! message with the same bytes, to its sender; `ping` sends numbered messages on a schedule
//! (or each after the previous answer) and times the answers from each message's intended
//! send time, so that its own stalls are not hidden.
//!
//! A ping message carries its number and its intended send time (ns after the run began) in
//! its first 16 bytes; `ping` counts every number once: answered in time, answered too late
//! (lost), never answered (lost), or answered twice (a duplicate, not counted again).

use clap::Subcommand;
use slipstream::rt::{Class, RtConfig, RtSocket};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The bytes of a ping message that `ping` reads back: number, intended send time.
const STAMP: usize = 16;
/// Most messages one run may send (each answered one keeps its round trip, 8 bytes).
const MAX_COUNT: u64 = 10_000_000;
/// The largest `--max-message`, bytes.
const MAX_MESSAGE: usize = 1 << 20;
/// The longest `--timeout`, ms.
const MAX_TIMEOUT_MS: u64 = 3_600_000;

/// `slipstream rt ...`.
#[derive(Debug, Subcommand)]
pub enum RtCmd {
    /// Answer every real-time message with the same bytes, to its sender, until
    /// SIGINT/SIGTERM or --seconds. It answers whoever sends (answers are no larger than
    /// what came): run it where only the hosts you test from can reach it. A line a second
    /// (stderr): messages answered, answers refused (queue or pool full), messages that
    /// arrived after their deadline (a one-way delay: the two hosts' clocks must agree).
    Pong {
        /// Address to answer on, e.g. 0.0.0.0:7900 (port 0: any; the line printed first
        /// says which).
        addr: SocketAddr,
        /// Stop after this many seconds.
        #[arg(long, value_name = "SECS")]
        seconds: Option<f64>,
        /// Largest message, bytes (at most 1 MiB: the pool holds 128 of them).
        #[arg(long, default_value_t = 64 << 10)]
        max_message: usize,
        /// Look for messages without sleeping for this long before each wait (a busy wait
        /// that holds a CPU; for a host with a CPU to spare).
        #[arg(long, value_name = "US", default_value_t = 0)]
        spin: u64,
        /// Send and receive past the kernel's UDP stack with AF_XDP on this interface (as
        /// root; IPv4; one such socket an interface; see docs/rt.md).
        #[arg(long, value_name = "IFACE")]
        xdp: Option<String>,
        /// No line a second.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Send real-time messages to a `slipstream rt pong` and time their answers: round trip
    /// p50 / p99 / p99.9 / max from each message's intended send time, a line a second
    /// (stderr) and a summary (stdout). Exit status 0 when every message was answered in
    /// time, 1 when any was lost (the summary says how many).
    Ping {
        /// The pong's address.
        dst: SocketAddr,
        /// Message size, bytes (16 to --max-message; above the path's datagram payload it
        /// travels as fragments).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Messages to send.
        #[arg(long, default_value_t = 1000)]
        count: u64,
        /// Messages a second, on a fixed schedule (0: each as soon as the previous one was
        /// answered or given up).
        #[arg(long, default_value_t = 0.0)]
        rate: f64,
        /// An answer later than this after its intended send time is lost, ms.
        #[arg(long, value_name = "MS", default_value_t = 1000)]
        timeout: u64,
        /// Deadline of each message, µs (the pong counts late arrivals; default: none).
        #[arg(long, value_name = "US")]
        deadline: Option<u64>,
        /// Largest message, bytes (at most 1 MiB: the pool holds 128 of them).
        #[arg(long, default_value_t = 64 << 10)]
        max_message: usize,
        /// Look for answers without sleeping for this long before each wait.
        #[arg(long, value_name = "US", default_value_t = 0)]
        spin: u64,
        /// Send and receive past the kernel's UDP stack with AF_XDP on this interface (as
        /// root; IPv4; one such socket an interface; see docs/rt.md).
        #[arg(long, value_name = "IFACE")]
        xdp: Option<String>,
        /// The summary as one JSON object.
        #[arg(long)]
        json: bool,
        /// No line a second.
        #[arg(long, short)]
        quiet: bool,
    },
}

/// Runs `slipstream rt ...`.
pub fn run(cmd: RtCmd) -> Result<(), String> {
    let (RtCmd::Pong { max_message, .. } | RtCmd::Ping { max_message, .. }) = &cmd;
    if !(1..=MAX_MESSAGE).contains(max_message) {
        return Err(format!(
            "--max-message {max_message}: must be 1 to {MAX_MESSAGE} bytes"
        ));
    }
    if let Err(e) = slipstream::signal::install_stop_handler() {
        return Err(format!("installing the SIGINT/SIGTERM handler: {e}"));
    }
    match cmd {
        RtCmd::Pong {
            addr,
            seconds,
            max_message,
            spin,
            xdp,
            quiet,
        } => pong(
            addr,
            seconds,
            config(max_message, spin, xdp.as_deref())?,
            quiet,
        ),
        RtCmd::Ping {
            dst,
            size,
            count,
            rate,
            timeout,
            deadline,
            max_message,
            spin,
            xdp,
            json,
            quiet,
        } => {
            if !(STAMP..=max_message).contains(&size) {
                return Err(format!(
                    "--size {size}: must be {STAMP} to --max-message ({max_message})"
                ));
            }
            if count == 0 || count > MAX_COUNT {
                return Err(format!("--count {count}: must be 1 to {MAX_COUNT}"));
            }
            if !(rate == 0.0 || (1e-3..=1e9).contains(&rate)) {
                return Err(format!(
                    "--rate {rate}: must be 0 (one at a time) or 0.001 to 1e9 messages a second"
                ));
            }
            if !(1..=MAX_TIMEOUT_MS).contains(&timeout) {
                return Err(format!(
                    "--timeout {timeout}: must be 1 to {MAX_TIMEOUT_MS} ms"
                ));
            }
            let opts = PingOpts {
                size,
                count,
                rate,
                timeout: Duration::from_millis(timeout),
                deadline: deadline.map(Duration::from_micros),
                quiet,
            };
            let s = ping(dst, &opts, config(max_message, spin, xdp.as_deref())?)?;
            if json {
                println!("{}", serde_json::to_string(&s).map_err(|e| e.to_string())?);
            } else {
                println!("{}", s.line());
            }
            if slipstream::signal::stop_requested() {
                return Err(format!("stopped after {} of {} messages", s.sent, count));
            }
            if s.lost > 0 {
                return Err(format!(
                    "{} of {} messages were lost (no answer within {} ms)",
                    s.lost, s.sent, timeout
                ));
            }
            Ok(())
        }
    }
}

/// Buffers of a socket's pool not held spare by `pong`: answers being sent.
const RESERVED: usize = 32;

/// Real-time sockets for ping and pong: no smoother (they send one class, as the
/// application schedules), messages up to `max_message`, AF_XDP on interface `xdp` if
/// given.
fn config(max_message: usize, spin: u64, xdp: Option<&str>) -> Result<RtConfig, String> {
    let xdp_interface = match xdp {
        Some(name) => {
            Some(slipstream::rt::interface_index(name).map_err(|e| format!("--xdp {name}: {e}"))?)
        }
        None => None,
    };
    Ok(RtConfig {
        max_message,
        buffers: 128,
        rt_queue: 128,
        smoother: None,
        spin: Duration::from_micros(spin),
        xdp_interface,
        ..RtConfig::default()
    })
}

/// What the AF_XDP path counted, for the summaries ("" without one).
fn xdp_line(xdp: Option<slipstream::rt::XdpStats>) -> String {
    xdp.map_or(String::new(), |x| {
        format!(
            "; AF_XDP: {} frames sent, {} received, {} datagrams through the kernel, {} \
             frames malformed, {} dropped by the kernel before the socket took them (no \
             free frame or receive ring full: not taken in time)",
            x.frames_sent,
            x.frames_received,
            x.kernel_sends,
            x.malformed,
            x.kernel_ring_full + x.kernel_dropped
        )
    })
}

fn open(addr: SocketAddr, cfg: RtConfig) -> Result<RtSocket, String> {
    RtSocket::open(addr, cfg).map_err(|e| format!("opening a real-time socket on {addr}: {e}"))
}

fn pong(addr: SocketAddr, seconds: Option<f64>, cfg: RtConfig, quiet: bool) -> Result<(), String> {
    let mut sock = open(addr, cfg)?;
    let local = sock.local_addr().map_err(|e| e.to_string())?;
    eprintln!("rt pong: answering on {local}");
    let start = Instant::now();
    let end = seconds
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| start + Duration::from_secs_f64(s.min(1e9)));
    let (mut answered, mut refused, mut late) = (0u64, 0u64, 0u64);
    let mut last = (start, 0u64);
    // Answers wait here between the poll that delivered them and their send (the socket
    // is borrowed by the poll meanwhile), in buffers claimed before it; the pool bounds
    // both, and a message that finds no buffer spare is counted, not answered.
    let spares = cfg.buffers - RESERVED;
    let mut replies: Vec<(SocketAddr, slipstream::rt::Buf, usize)> = Vec::with_capacity(spares);
    let mut spare: Vec<slipstream::rt::Buf> = Vec::with_capacity(spares);
    while !slipstream::signal::stop_requested() && end.is_none_or(|e| Instant::now() < e) {
        while spare.len() < spares {
            let Some(b) = sock.claim() else { break };
            spare.push(b);
        }
        let polled = sock.poll(Duration::from_millis(100), |m| {
            late += u64::from(m.late);
            match spare.pop() {
                Some(mut buf) => {
                    buf.as_mut()[..m.data.len()].copy_from_slice(m.data);
                    replies.push((m.src, buf, m.data.len()));
                }
                None => refused += 1,
            }
        });
        polled.map_err(|e| format!("receiving: {e}"))?;
        for (dst, buf, len) in replies.drain(..) {
            match sock.send(buf, len, dst, Class::Rt, None) {
                Ok(()) => answered += 1,
                Err(_) => refused += 1,
            }
        }
        let now = Instant::now();
        if !quiet && now.duration_since(last.0) >= Duration::from_secs(1) {
            eprintln!(
                "rt pong: {:.0} s: {} answered ({}/s), {} refused, {} late on arrival",
                now.duration_since(start).as_secs_f64(),
                answered,
                ((answered - last.1) as f64 / now.duration_since(last.0).as_secs_f64()).round(),
                refused,
                late
            );
            last = (now, answered);
        }
    }
    let st = sock.stats();
    println!(
        "rt pong: {answered} messages answered, {refused} refused (queue or pool full), {late} \
         late on arrival; {} fragments dropped incomplete or malformed{}",
        st.reassembly.refused() + st.reassembly.expired,
        xdp_line(st.xdp)
    );
    Ok(())
}

/// What `ping` was asked to do.
struct PingOpts {
    size: usize,
    count: u64,
    rate: f64,
    timeout: Duration,
    deadline: Option<Duration>,
    quiet: bool,
}

/// What `ping` found.
#[derive(Debug, serde::Serialize)]
pub struct PingSummary {
    pub size: usize,
    pub sent: u64,
    /// Sends the socket refused (queue or pool full): waited out, not lost.
    pub send_waits: u64,
    pub answered: u64,
    /// Answered after the timeout, or never: sent - answered.
    pub lost: u64,
    pub late_answers: u64,
    pub duplicates: u64,
    pub rtt_p50_us: f64,
    pub rtt_p99_us: f64,
    pub rtt_p999_us: f64,
    pub rtt_max_us: f64,
    pub seconds: f64,
    /// The AF_XDP path's counts, if the socket had one (`--xdp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xdp: Option<slipstream::rt::XdpStats>,
}

impl PingSummary {
    fn line(&self) -> String {
        let rtt = if self.answered == 0 {
            "no round trip to time".to_string()
        } else {
            format!(
                "round trip from the intended send time p50 {:.1} us, p99 {:.1} us, p99.9 \
                 {:.1} us, max {:.1} us",
                self.rtt_p50_us, self.rtt_p99_us, self.rtt_p999_us, self.rtt_max_us
            )
        };
        format!(
            "rt ping: {} messages of {} B in {:.2} s: {} answered, {} lost ({} answered too \
             late), {} duplicates; {rtt}{}",
            self.sent,
            self.size,
            self.seconds,
            self.answered,
            self.lost,
            self.late_answers,
            self.duplicates,
            xdp_line(self.xdp),
        )
    }
}

/// The answers seen so far and their round trips.
struct Record {
    seen: Vec<u64>,
    rtts_ns: Vec<u64>,
    late: u64,
    duplicates: u64,
    timeout: Duration,
}

impl Record {
    /// An answer: the message's first bytes, got at `now`, the run begun at `t0`; anything
    /// not one of the `sent` messages is ignored.
    fn answer(&mut self, data: &[u8], t0: Instant, now: Instant, sent: u64) {
        let word = |i: usize| {
            data.get(i..i + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let (Some(n), Some(at)) = (word(0), word(8)) else {
            return;
        };
        let Some(at) = t0.checked_add(Duration::from_nanos(at)) else {
            return;
        };
        if n >= sent || at > now {
            return;
        }
        let (w, bit) = ((n / 64) as usize, 1u64 << (n % 64));
        if self.seen[w] & bit != 0 {
            self.duplicates += 1;
            return;
        }
        self.seen[w] |= bit;
        let rtt = now.duration_since(at).as_nanos() as u64;
        if rtt > self.timeout.as_nanos() as u64 {
            self.late += 1;
        } else {
            self.rtts_ns.push(rtt);
        }
    }
}

fn ping(dst: SocketAddr, o: &PingOpts, cfg: RtConfig) -> Result<PingSummary, String> {
    let any = if dst.is_ipv6() {
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0))
    };
    let mut sock = open(any, cfg)?;
    let mut rec = Record {
        seen: vec![0; o.count.div_ceil(64) as usize],
        rtts_ns: Vec::with_capacity(o.count.min(10_000_000) as usize),
        late: 0,
        duplicates: 0,
        timeout: o.timeout,
    };
    let t0 = Instant::now();
    let (mut sent, mut waits) = (0u64, 0u64);
    let mut last = (t0, 0usize);
    let interval = (o.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / o.rate));
    // The last message's send time, for giving up on it in back-to-back mode.
    let mut outstanding: Option<Instant> = None;
    let io = |e: std::io::Error| format!("receiving: {e}");
    loop {
        if slipstream::signal::stop_requested() {
            break;
        }
        let now = Instant::now();
        let due = match interval {
            Some(iv) => t0 + iv.mul_f64(sent as f64),
            None => now,
        };
        let answered = (rec.rtts_ns.len() as u64) + rec.late;
        let may_send = sent < o.count
            && match interval {
                Some(_) => now >= due,
                None => answered == sent || outstanding.is_none_or(|t| now >= t + o.timeout),
            };
        if may_send {
            match sock.claim() {
                Some(mut buf) => {
                    let intended = if interval.is_some() { due } else { now };
                    let b = buf.as_mut();
                    b[..8].copy_from_slice(&sent.to_le_bytes());
                    let at = intended.duration_since(t0).as_nanos() as u64;
                    b[8..16].copy_from_slice(&at.to_le_bytes());
                    match sock.send_at(buf, o.size, dst, Class::Rt, o.deadline, intended) {
                        Ok(()) => {
                            sent += 1;
                            outstanding = Some(intended);
                        }
                        Err(_) => waits += 1,
                    }
                }
                None => waits += 1,
            }
        }
        // Wait for answers until the next send is due (back-to-back: until the answer).
        let last_sent = outstanding.unwrap_or(t0);
        let wait = if sent < o.count {
            match interval {
                Some(_) => (t0 + interval.unwrap_or_default().mul_f64(sent as f64))
                    .saturating_duration_since(Instant::now()),
                None => (last_sent + o.timeout).saturating_duration_since(Instant::now()),
            }
        } else {
            // All sent: until the last one's timeout.
            let end = last_sent + o.timeout;
            if Instant::now() >= end || (rec.rtts_ns.len() as u64) + rec.late == sent {
                break;
            }
            end.saturating_duration_since(Instant::now())
        };
        sock.poll(wait.min(Duration::from_millis(100)), |m| {
            if m.src == dst {
                rec.answer(m.data, t0, Instant::now(), sent);
            }
        })
        .map_err(io)?;
        let now = Instant::now();
        if !o.quiet && now.duration_since(last.0) >= Duration::from_secs(1) {
            let got = &rec.rtts_ns[last.1..];
            let mut recent = got.to_vec();
            eprintln!(
                "rt ping: {:.0} s: {} sent, {} answered; last second: {} answers, round trip \
                 p50 {:.1} us, p99 {:.1} us",
                now.duration_since(t0).as_secs_f64(),
                sent,
                rec.rtts_ns.len(),
                recent.len(),
                quantile_us(&mut recent, 0.5),
                quantile_us(&mut recent, 0.99)
            );
            last = (now, rec.rtts_ns.len());
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let answered = rec.rtts_ns.len() as u64;
    let mut rtts = std::mem::take(&mut rec.rtts_ns);
    Ok(PingSummary {
        size: o.size,
        sent,
        send_waits: waits,
        answered,
        lost: sent - answered,
        late_answers: rec.late,
        duplicates: rec.duplicates,
        rtt_p50_us: quantile_us(&mut rtts, 0.5),
        rtt_p99_us: quantile_us(&mut rtts, 0.99),
        rtt_p999_us: quantile_us(&mut rtts, 0.999),
        rtt_max_us: quantile_us(&mut rtts, 1.0),
        seconds,
        xdp: sock.stats().xdp,
    })
}

/// The `p` quantile of `v` (ns), µs; NaN when empty.
fn quantile_us(v: &mut [u64], p: f64) -> f64 {
    v.sort_unstable();
    v.get(((v.len() as f64 - 1.0) * p).round() as usize)
        .map_or(f64::NAN, |&ns| ns as f64 / 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(n: u64, at_ns: u64) -> Vec<u8> {
        let mut m = n.to_le_bytes().to_vec();
        m.extend(at_ns.to_le_bytes());
        m.extend([0u8; 48]);
        m
    }

    #[test]
    fn each_answer_counts_once_and_what_is_not_ours_not_at_all() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_millis(10);
        let mut r = Record {
            seen: vec![0; 2],
            rtts_ns: Vec::new(),
            late: 0,
            duplicates: 0,
            timeout: Duration::from_millis(5),
        };
        let sent = 100;
        r.answer(&msg(3, 8_000_000), t0, now, sent); // 2 ms
        r.answer(&msg(3, 8_000_000), t0, now, sent); // again
        r.answer(&msg(4, 1_000_000), t0, now, sent); // 9 ms: too late
        r.answer(&msg(100, 9_000_000), t0, now, sent); // never sent
        r.answer(&msg(5, 20_000_000), t0, now, sent); // from the future
        r.answer(&msg(6, u64::MAX), t0, now, sent); // beyond any instant
        r.answer(&[1, 2, 3], t0, now, sent); // short
        assert_eq!(r.rtts_ns, [2_000_000]);
        assert_eq!((r.late, r.duplicates), (1, 1));
        assert_eq!(r.seen[0], 1 << 3 | 1 << 4);
    }
}
