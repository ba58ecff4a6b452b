//! `slipstream live SRC DST`: relays messages between UDP, SRT (live mode) and files or
//! stdin/stdout, like `srt-live-transmit`.
//!
//! - Inputs: `udp://[HOST]:PORT` (one message per datagram, at most `payloadsize` bytes),
//!   `srt://...`, `file://PATH`, `file://con` or `-` (read in 1316-byte chunks, seven
//!   MPEG-TS packets, or `payloadsize`). Outputs: `udp://HOST:PORT`, `srt://...`,
//!   `file://PATH`, `file://con` or `-`.
//! - An SRT listener whose peer leaves (SHUTDOWN) or dies (idle timeout) says so, flushes its
//!   output and waits for the next caller; `--once` exits instead (non-zero if the peer
//!   died). An SRT caller retries with back-off under `--reconnect`.
//! - A finite input (a file, stdin) ends with everything acknowledged and then the peer's
//!   latency and a margin more, so that a libsrt receiver, which discards what still waits
//!   for its play time when SHUTDOWN arrives, plays it all.
//! - SIGINT/SIGTERM stop in order: SHUTDOWN sent, output flushed, summary printed, exit 0.
//! - Every message is accounted for in the summary (and `--stats-json`): relayed, dropped
//!   on the way in (by the kernel, too large), dropped by the sender or the receiver as too
//!   late, or still unacknowledged at the end. `--fail-on-loss` turns any of these into a
//!   non-zero exit. `-s MS` prints statistics while running.

use super::uri::{Uri, UriMode, MAX_LIVE_PAYLOAD};
use super::{any_addr_for, conn_config, endpoint_options, CliResult, Common, StatsJson};
use clap::ValueEnum;
use slipstream::api::{Connection, Endpoint, EndpointOptions};
use slipstream_proto::cc::CcRegistry;
use slipstream_proto::conn::{CloseReason, ConnConfig, ConnStats, Mode, State};
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Seven 188-byte MPEG-TS packets, as srt-live-transmit reads files.
const CHUNK: usize = 1316;
/// How often a waiting input re-checks signals, deadlines and statistics.
const POLL: Duration = Duration::from_millis(100);
/// Receive buffer asked for a UDP input: 200 Mbit/s for a fifth of a second.
const UDP_RCVBUF: usize = 8 << 20;
/// A busy UDP input is read in batches at most this often: datagrams that arrive meanwhile
/// wait in the socket, and are read and queued together, waking the relay and the I/O
/// thread once (at 20 Mbit/s of 1316-byte datagrams, about ten a wake-up instead of one),
/// and the receiver for fewer, larger bursts. Adds at most this much to the delay (half on
/// average), which the receiver's latency absorbs. srt-live-transmit reads its UDP input
/// when libsrt's epoll wait returns, at the latest every 10 ms (about every 7 ms at 20
/// Mbit/s). At 2 ms the relay woke 480 times a second at 20 Mbit/s and the chain spent
/// 1.18x libsrt's CPU on the emulated path; at 5 ms, 200 times.
const UDP_BATCH: Duration = Duration::from_millis(5);
/// First and longest wait between connection attempts of `--reconnect`.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(8));
/// Written output is flushed at least this often (a live consumer reads it as it comes).
const FLUSH_EVERY: Duration = Duration::from_millis(20);

/// How periodic statistics are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum StatsFormat {
    /// One line of text per connection and report.
    Text,
    /// One JSON object per connection and report, a line each.
    Json,
}

/// The options of `slipstream live` besides its addresses.
#[derive(Debug, Clone)]
pub(super) struct LiveOpts {
    pub duration: Option<f64>,
    pub count: Option<u64>,
    pub stats_every: Option<Duration>,
    pub stats_format: StatsFormat,
    pub stats_file: Option<PathBuf>,
    pub fail_on_loss: bool,
    pub once: bool,
    pub reconnect: bool,
}

fn stop_requested() -> bool {
    #[cfg(unix)]
    {
        slipstream::signal::stop_requested()
    }
    #[cfg(not(unix))]
    {
        false
    }
}

/// Sums of the counters of the SRT sessions one end has had.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
struct Tally {
    sessions: u64,
    pkts_queued: u64,
    pkts_acked: u64,
    pkts_snd_dropped: u64,
    pkts_unacked_at_close: u64,
    pkts_retransmitted: u64,
    pkts_delivered: u64,
    pkts_rcv_dropped: u64,
    pkts_rcv_snd_dropped: u64,
    pkts_unread_at_close: u64,
    pkts_recv_retrans: u64,
    pkts_rcv_loss_detected: u64,
}

impl Tally {
    fn add(&mut self, s: &ConnStats) {
        self.sessions += 1;
        self.pkts_queued += s.pkts_queued;
        self.pkts_acked += s.pkts_acked;
        self.pkts_snd_dropped += s.pkts_snd_dropped;
        self.pkts_unacked_at_close += u64::from(s.snd_buf_pkts);
        self.pkts_retransmitted += s.pkts_retransmitted;
        self.pkts_delivered += s.pkts_delivered;
        self.pkts_rcv_dropped += s.pkts_rcv_dropped;
        self.pkts_rcv_snd_dropped += s.pkts_rcv_snd_dropped;
        self.pkts_unread_at_close += u64::from(s.rcv_buf_pkts);
        self.pkts_recv_retrans += s.pkts_recv_retrans;
        self.pkts_rcv_loss_detected += s.pkts_rcv_loss;
    }
}

/// One SRT side of the relay: its address and settings, the endpoint (kept across
/// sessions: a listener stays bound), the current connection and the tally of past ones.
struct SrtEnd {
    // Field order matters: the connection drops before its endpoint.
    conn: Option<Connection>,
    ep: Option<Endpoint>,
    uri: Uri,
    cfg: ConnConfig,
    opts: EndpointOptions,
    /// "input" or "output".
    dir: &'static str,
    tally: Tally,
    last: Option<ConnStats>,
    last_msg: Instant,
    /// Statistics at the last periodic report (for rates).
    reported: Option<(Instant, ConnStats)>,
    /// `--reconnect`: the wait before the next attempt.
    backoff: Duration,
}

/// Why an SRT session ended.
enum Gone {
    /// The peer sent SHUTDOWN.
    Closed,
    /// The peer died or the link broke (idle timeout, `timeout=`), with the reason.
    Died(String),
}

impl SrtEnd {
    fn new(
        uri: Uri,
        dir: &'static str,
        common: &Common,
        registry: &CcRegistry,
    ) -> Result<SrtEnd, String> {
        Ok(SrtEnd {
            conn: None,
            ep: None,
            cfg: conn_config(Mode::Live, &uri, common, registry)?,
            opts: endpoint_options(common, registry)?,
            uri,
            dir,
            tally: Tally::default(),
            last: None,
            last_msg: Instant::now(),
            reported: None,
            backoff: BACKOFF.0,
        })
    }

    /// Connects (caller) or waits for a caller (listener) unless connected. `Ok(false)` when
    /// a stop was requested or the deadline passed meanwhile.
    fn ensure(&mut self, reconnect: bool, deadline: Option<Instant>) -> Result<bool, String> {
        let give_up = || stop_requested() || deadline.is_some_and(|d| Instant::now() >= d);
        if self.conn.is_some() {
            return Ok(true);
        }
        match self.uri.mode {
            UriMode::Listener => {
                if self.ep.is_none() {
                    let addr = self.uri.bind_addr()?;
                    let ep = Endpoint::bind(addr, self.opts.clone())
                        .map_err(|e| format!("binding {addr}: {e}"))?;
                    ep.listen(self.cfg.clone()).map_err(|e| e.to_string())?;
                    self.ep = Some(ep);
                }
                let ep = self.ep.as_ref().expect("bound above");
                loop {
                    if give_up() {
                        return Ok(false);
                    }
                    match ep.accept_timeout(POLL) {
                        Ok(c) => {
                            self.connected(c);
                            return Ok(true);
                        }
                        Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                        Err(e) => return Err(format!("{}: {e}", self.where_())),
                    }
                }
            }
            UriMode::Caller => loop {
                if give_up() {
                    return Ok(false);
                }
                let remote = self.uri.remote()?;
                if self.ep.is_none() {
                    let ep = Endpoint::bind(any_addr_for(remote), self.opts.clone())
                        .map_err(|e| e.to_string())?;
                    self.ep = Some(ep);
                }
                let ep = self.ep.as_ref().expect("bound above");
                match ep.connect(remote, self.cfg.clone()) {
                    Ok(c) => {
                        self.backoff = BACKOFF.0;
                        self.connected(c);
                        return Ok(true);
                    }
                    Err(e) if reconnect => {
                        eprintln!(
                            "live: connecting to {remote} failed: {e}; retrying in {:.1} s",
                            self.backoff.as_secs_f64()
                        );
                        let until = Instant::now() + self.backoff;
                        while Instant::now() < until && !give_up() {
                            std::thread::sleep(POLL.min(until - Instant::now()));
                        }
                        self.backoff = (self.backoff * 2).min(BACKOFF.1);
                    }
                    Err(e) => return Err(format!("connecting to {remote}: {e}")),
                }
            },
        }
    }

    fn where_(&self) -> String {
        match self.uri.mode {
            UriMode::Listener => format!("listening on port {}", self.uri.port),
            UriMode::Caller => format!("{}:{}", self.uri.host, self.uri.port),
        }
    }

    fn connected(&mut self, c: Connection) {
        eprintln!(
            "live: SRT {} connected with {} (latency {} ms)",
            self.dir,
            c.peer_addr(),
            if self.dir == "input" {
                c.latency().as_millis()
            } else {
                c.peer_latency().as_millis()
            }
        );
        self.last_msg = Instant::now();
        self.reported = None;
        self.conn = Some(c);
    }

    /// Why the connection ended, if it did.
    fn gone(&self) -> Option<Gone> {
        let c = self.conn.as_ref()?;
        match c.state() {
            Ok(State::Closed(CloseReason::PeerShutdown)) => Some(Gone::Closed),
            Ok(State::Closed(r)) => Some(Gone::Died(r.to_string())),
            Ok(_) => None,
            Err(e) => Some(Gone::Died(e.to_string())),
        }
    }

    /// Ends the session: counts it and reports it.
    fn end_session(&mut self, why: &Gone) {
        let Some(c) = self.conn.take() else { return };
        if let Ok(s) = c.stats() {
            self.tally.add(&s);
            self.last = Some(s);
        }
        let what = match why {
            Gone::Closed => "the peer closed the connection".to_string(),
            Gone::Died(r) => format!("the peer is gone ({r})"),
        };
        eprintln!(
            "live: SRT {} {} disconnected: {what}",
            self.dir,
            c.peer_addr()
        );
        c.abort();
    }

    /// Closes the session in order (SHUTDOWN) and counts it. With `drain`, everything
    /// queued is first acknowledged (while the connection makes progress) and the peer's
    /// latency passes, so that its receiver plays it all.
    fn close(&mut self, drain: bool) -> io::Result<()> {
        let Some(c) = self.conn.take() else {
            return Ok(());
        };
        // Messages queued with `more` go out before anything waits for them.
        c.flush();
        let mut result = Ok(());
        if drain {
            result = c.wait_acknowledged(c.peer_latency() + Duration::from_secs(2));
            if result.is_ok() {
                let rtt = c.stats().map(|s| s.rtt_ms).unwrap_or(0.0);
                let margin = Duration::from_millis(100) + Duration::from_secs_f64(rtt * 2e-3);
                let until = Instant::now() + c.peer_latency() + margin;
                while Instant::now() < until && !stop_requested() {
                    if !matches!(c.state(), Ok(State::Connected)) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10).min(until - Instant::now()));
                }
            }
        }
        if let Ok(s) = c.stats() {
            self.tally.add(&s);
            self.last = Some(s);
        }
        let closed = c.close();
        result.and(closed)
    }
}

enum Input {
    Udp {
        sock: UdpSocket,
        port: u16,
        limit: usize,
        too_large: u64,
        kernel_drops_at_start: u64,
        batch: UdpBatch,
    },
    Srt(Box<SrtEnd>),
    Reader(Box<dyn Read>, usize),
}

enum Output {
    Udp(UdpSocket, SocketAddr),
    Srt(Box<SrtEnd>),
    Writer(Box<dyn Write>, Instant),
}

/// What one read of the input gave.
enum Got {
    Msg(usize),
    Idle,
    /// A finite input ended.
    End,
    /// The SRT input's peer left or died.
    Gone(Gone),
}

fn is_std(spec: &str) -> bool {
    spec == "-" || spec == "file://con"
}

fn non_srt_options(uri: &Uri) -> Result<(), String> {
    match uri.srt_only_options().as_slice() {
        [] => Ok(()),
        opts => Err(format!(
            "{}://: {} apply to srt:// addresses only",
            uri.scheme,
            opts.join(", ")
        )),
    }
}

/// Drops the kernel counted for the UDP socket bound to `port` (`/proc/net/udp`, `udp6`):
/// datagrams that arrived while its receive buffer was full.
fn udp_kernel_drops(port: u16) -> Option<u64> {
    udp_kernel_drops_in("/proc/net", port)
}

/// [`udp_kernel_drops`] from the tables under `proc_net` (`/proc/thread-self/net` for the
/// network namespace of the calling thread, which `/proc/net` is not: it follows the
/// process's first thread).
pub(crate) fn udp_kernel_drops_in(proc_net: &str, port: u16) -> Option<u64> {
    let mut total = None;
    for table in ["udp", "udp6"].map(|t| format!("{proc_net}/{t}")) {
        let Ok(text) = std::fs::read_to_string(&table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = f
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) {
                if let Some(d) = f.last().and_then(|d| d.parse::<u64>().ok()) {
                    *total.get_or_insert(0) += d;
                }
            }
        }
    }
    total
}

fn open_input(spec: &str, common: &Common, registry: &CcRegistry) -> Result<Input, String> {
    if is_std(spec) {
        return Ok(Input::Reader(Box::new(io::stdin()), CHUNK));
    }
    if let Some(path) = spec.strip_prefix("file://") {
        let f = File::open(path).map_err(|e| format!("{path}: {e}"))?;
        return Ok(Input::Reader(Box::new(f), CHUNK));
    }
    let uri = Uri::parse(spec)?;
    if uri.scheme == "udp" {
        non_srt_options(&uri)?;
        let sock = UdpSocket::bind(uri.bind_addr()?).map_err(|e| format!("{spec}: {e}"))?;
        sock.set_read_timeout(Some(POLL))
            .map_err(|e| e.to_string())?;
        // A larger queue than the default rides out the relay's pauses; as root, past
        // rmem_max. Whatever it still drops is counted and reported.
        if rustix::net::sockopt::set_socket_recv_buffer_size_force(&sock, UDP_RCVBUF).is_err() {
            let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&sock, UDP_RCVBUF);
        }
        let port = sock.local_addr().map_err(|e| e.to_string())?.port();
        return Ok(Input::Udp {
            sock,
            port,
            limit: MAX_LIVE_PAYLOAD,
            too_large: 0,
            kernel_drops_at_start: udp_kernel_drops(port).unwrap_or(0),
            batch: UdpBatch::default(),
        });
    }
    Ok(Input::Srt(Box::new(SrtEnd::new(
        uri, "input", common, registry,
    )?)))
}

fn open_output(spec: &str, common: &Common, registry: &CcRegistry) -> Result<Output, String> {
    if is_std(spec) {
        let w = io::BufWriter::with_capacity(64 << 10, io::stdout());
        return Ok(Output::Writer(Box::new(w), Instant::now()));
    }
    if let Some(path) = spec.strip_prefix("file://") {
        let f = File::create(path).map_err(|e| format!("{path}: {e}"))?;
        let w = io::BufWriter::with_capacity(64 << 10, f);
        return Ok(Output::Writer(Box::new(w), Instant::now()));
    }
    let uri = Uri::parse(spec)?;
    if uri.scheme == "udp" {
        non_srt_options(&uri)?;
        if uri.mode == UriMode::Listener {
            return Err(format!("{spec}: UDP output needs a destination host"));
        }
        let dst = uri.remote()?;
        let sock = UdpSocket::bind(any_addr_for(dst)).map_err(|e| e.to_string())?;
        return Ok(Output::Udp(sock, dst));
    }
    Ok(Output::Srt(Box::new(SrtEnd::new(
        uri, "output", common, registry,
    )?)))
}

impl Input {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<Got> {
        match self {
            Input::Udp {
                sock,
                limit,
                too_large,
                batch,
                ..
            } => match udp_read(sock, buf, batch) {
                Ok(n) if n > *limit => {
                    // A live message travels in one packet (libsrt refuses larger ones).
                    if *too_large == 0 {
                        eprintln!(
                            "live: input datagram of {n} bytes dropped: a live message is at \
                             most {limit} bytes (counted in the summary)"
                        );
                    }
                    *too_large += 1;
                    Ok(Got::Idle)
                }
                Ok(n) => Ok(Got::Msg(n)),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) =>
                {
                    Ok(Got::Idle)
                }
                Err(e) => Err(e),
            },
            Input::Srt(end) => {
                let Some(c) = end.conn.as_ref() else {
                    return Ok(Got::Idle);
                };
                match c.recv_message_timeout(buf, POLL) {
                    Ok(0) => Ok(Got::Gone(Gone::Closed)),
                    Ok(n) => {
                        end.last_msg = Instant::now();
                        Ok(Got::Msg(n))
                    }
                    Err(e) => match end.gone() {
                        Some(g) => Ok(Got::Gone(g)),
                        None if e.kind() == io::ErrorKind::TimedOut => {
                            if let Some(t) = end.uri.timeout {
                                if end.last_msg.elapsed() >= t {
                                    return Ok(Got::Gone(Gone::Died(format!(
                                        "no data for {} ms (timeout=)",
                                        t.as_millis()
                                    ))));
                                }
                            }
                            Ok(Got::Idle)
                        }
                        None => Err(e),
                    },
                }
            }
            Input::Reader(r, chunk) => {
                let mut n = 0;
                while n < *chunk {
                    match r.read(&mut buf[n..*chunk]) {
                        Ok(0) => break,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                            if stop_requested() {
                                break;
                            }
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok(if n == 0 { Got::End } else { Got::Msg(n) })
            }
        }
    }
}

/// Reads one datagram from a UDP input: the rest of the batch under way without waiting,
/// `WouldBlock` at its end (the caller then sends what it queued). The next read, while
/// datagrams come faster than one a [`UDP_BATCH`] on average, first sleeps out the rest of
/// that time, then waits for a datagram.
fn udp_read(sock: &UdpSocket, buf: &mut [u8], batch: &mut UdpBatch) -> io::Result<usize> {
    if let Some(start) = batch.start {
        match rustix::net::recv(sock, &mut *buf, rustix::net::RecvFlags::DONTWAIT) {
            Ok((n, _)) => return Ok(n),
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {
                let busy = batch
                    .prev
                    .is_some_and(|prev| start.duration_since(prev) < 2 * UDP_BATCH);
                batch.resume = busy.then_some(start + UDP_BATCH);
                batch.prev = Some(start);
                batch.start = None;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(until) = batch.resume.take() {
        let now = Instant::now();
        if until > now && !stop_requested() {
            std::thread::sleep(until - now);
        }
    }
    let (n, _) = sock.recv_from(buf)?;
    batch.start = Some(Instant::now());
    Ok(n)
}

/// Where a UDP input is in its batches (see [`udp_read`]).
#[derive(Debug, Default)]
struct UdpBatch {
    /// When the batch being read began.
    start: Option<Instant>,
    /// When the one before it began.
    prev: Option<Instant>,
    /// Sleep until then before the next batch.
    resume: Option<Instant>,
}

/// What writing one message to the output gave.
enum Put {
    Done,
    /// The SRT output's peer is gone; the message was not sent.
    Gone(Gone),
}

impl Output {
    /// Writes one message. With `more`, an SRT output leaves it queued until the next
    /// [`Output::flush`] (more follow at once: a batch costs the I/O thread one wake-up).
    fn write(&mut self, msg: &[u8], more: bool) -> io::Result<Put> {
        match self {
            Output::Udp(s, dst) => s.send_to(msg, *dst).map(|_| Put::Done),
            Output::Srt(end) => {
                let Some(c) = end.conn.as_ref() else {
                    return Ok(Put::Gone(Gone::Died("not connected".into())));
                };
                let sent = if more {
                    c.send_message_more(msg)
                } else {
                    c.send_message(msg)
                };
                match sent {
                    Ok(()) => Ok(Put::Done),
                    Err(e) => match end.gone() {
                        Some(g) => Ok(Put::Gone(g)),
                        None => Err(e),
                    },
                }
            }
            Output::Writer(w, flushed) => {
                w.write_all(msg)?;
                if flushed.elapsed() >= FLUSH_EVERY {
                    w.flush()?;
                    *flushed = Instant::now();
                }
                Ok(Put::Done)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Output::Writer(w, flushed) => {
                *flushed = Instant::now();
                w.flush()
            }
            Output::Srt(end) => {
                if let Some(c) = &end.conn {
                    c.flush();
                }
                Ok(())
            }
            Output::Udp(..) => Ok(()),
        }
    }
}

/// Everything `run` counts besides the SRT sessions.
#[derive(Debug, Default, serde::Serialize)]
struct Counts {
    msgs: u64,
    bytes: u64,
    /// Messages read while the SRT output had no peer (it had left and no other had come).
    no_receiver: u64,
    /// UDP input: datagrams too large for a live packet.
    too_large: u64,
    /// UDP input: datagrams the kernel dropped before they were read.
    kernel_drops: u64,
}

pub(super) fn run(
    src: &str,
    dst: &str,
    o: &LiveOpts,
    common: &Common,
    registry: &CcRegistry,
) -> CliResult {
    let stats_json = StatsJson::open(common.stats_json.as_deref())?;
    #[cfg(unix)]
    if let Err(e) = slipstream::signal::install_stop_handler() {
        eprintln!("slipstream: warning: no SIGINT/SIGTERM handler: {e}");
    }
    let mut stats_out: Box<dyn Write> = match &o.stats_file {
        Some(p) => Box::new(File::create(p).map_err(|e| format!("{}: {e}", p.display()))?),
        None => Box::new(io::stderr()),
    };
    // As srt-live-transmit: the output first (an SRT output may wait for its peer), then
    // the input.
    let mut out = open_output(dst, common, registry)?;
    let mut inp = open_input(src, common, registry)?;
    if let Input::Srt(end) = &inp {
        if end.uri.payload_size.is_some() {
            return Err("payloadsize= limits what an SRT output sends; give it there".into());
        }
    }
    if let Output::Srt(end) = &out {
        if let Some(p) = end.uri.payload_size {
            match &mut inp {
                Input::Udp { limit, .. } => *limit = p,
                Input::Reader(_, chunk) => *chunk = p,
                Input::Srt(_) => {}
            }
        }
        if end.uri.timeout.is_some() {
            return Err("timeout= applies to an SRT input (a receive timeout)".into());
        }
    }
    let t0 = Instant::now();
    let deadline = o.duration.map(|s| t0 + Duration::from_secs_f64(s.max(0.0)));
    let mut buf = vec![0u8; 65_536];
    let mut n = Counts::default();
    let mut failure: Option<String> = None;
    let mut next_stats = o.stats_every.map(|d| t0 + d);
    'relay: loop {
        if stop_requested()
            || o.count.is_some_and(|c| n.msgs >= c)
            || deadline.is_some_and(|d| Instant::now() >= d)
        {
            break;
        }
        if let Some(t) = next_stats {
            if Instant::now() >= t {
                report(&mut *stats_out, o.stats_format, t0, &mut out, &mut inp);
                next_stats = o.stats_every.map(|d| t + d);
            }
        }
        for end in srt_ends(&mut out, &mut inp) {
            match end.ensure(o.reconnect, deadline) {
                Ok(true) => {}
                Ok(false) => break 'relay,
                Err(e) => {
                    failure = Some(e);
                    break 'relay;
                }
            }
        }
        let got = match inp.read(&mut buf) {
            Ok(g) => g,
            Err(e) => {
                failure = Some(format!("input: {e}"));
                break;
            }
        };
        match got {
            Got::Msg(len) => {
                n.msgs += 1;
                n.bytes += len as u64;
                // A UDP input ends each batch with `Idle`, which flushes.
                let more = matches!(inp, Input::Udp { .. });
                match out.write(&buf[..len], more) {
                    Ok(Put::Done) => {}
                    Ok(Put::Gone(why)) => {
                        n.no_receiver += 1;
                        let Output::Srt(end) = &mut out else {
                            unreachable!()
                        };
                        end.end_session(&why);
                        if let Some(f) = session_over(end, &why, o) {
                            failure = f;
                            break;
                        }
                    }
                    Err(e) => {
                        failure = Some(format!("output: {e}"));
                        break;
                    }
                }
            }
            Got::Idle => {
                if let Err(e) = out.flush() {
                    failure = Some(format!("output: {e}"));
                    break;
                }
                // With nothing to send, a dead receiver is noticed here, not at the next
                // write (a silent input would keep the relay waiting forever).
                if let Output::Srt(end) = &mut out {
                    if let Some(why) = end.gone() {
                        end.end_session(&why);
                        if let Some(f) = session_over(end, &why, o) {
                            failure = f;
                            break;
                        }
                    }
                }
            }
            Got::End => break,
            Got::Gone(why) => {
                if let Err(e) = out.flush() {
                    failure = Some(format!("output: {e}"));
                    break;
                }
                let Input::Srt(end) = &mut inp else {
                    unreachable!()
                };
                end.end_session(&why);
                if let Some(f) = session_over(end, &why, o) {
                    failure = f;
                    break;
                }
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let stopped_by = {
        #[cfg(unix)]
        {
            slipstream::signal::stop_signal()
        }
        #[cfg(not(unix))]
        {
            None::<&str>
        }
    };
    // An orderly end (the input ended, a signal, --duration, --count) delivers what is on
    // its way: an SRT input hands over what it holds without waiting for its play times,
    // and an SRT output waits until everything is acknowledged and played. A failure
    // closes at once.
    let orderly = failure.is_none();
    if let Input::Srt(end) = &mut inp {
        if let (Some(c), true) = (end.conn.as_ref(), orderly) {
            let _ = c.close();
            while let Ok(len @ 1..) = c.recv_message_timeout(&mut buf, Duration::from_millis(20)) {
                n.msgs += 1;
                n.bytes += len as u64;
                if !matches!(out.write(&buf[..len], false), Ok(Put::Done)) {
                    n.no_receiver += 1;
                }
            }
        }
    }
    let drain = orderly;
    match &mut out {
        Output::Srt(end) => {
            if let Err(e) = end.close(drain) {
                if drain {
                    failure.get_or_insert(format!("output: delivering the end: {e}"));
                }
            }
        }
        other => {
            if let Err(e) = other.flush() {
                failure.get_or_insert(format!("output: {e}"));
            }
        }
    }
    if let Input::Srt(end) = &mut inp {
        let _ = end.close(false);
    }
    if let Input::Udp {
        port,
        too_large,
        kernel_drops_at_start,
        ..
    } = &inp
    {
        n.too_large = *too_large;
        n.kernel_drops = udp_kernel_drops(*port)
            .unwrap_or(0)
            .saturating_sub(*kernel_drops_at_start);
    }
    let (snd, rcv) = (srt_tally(&out), srt_tally_in(&inp));
    let lost = summarize(&n, secs, stopped_by, snd.as_ref(), rcv.as_ref());
    write_json(
        &stats_json,
        &n,
        secs,
        snd.as_ref(),
        rcv.as_ref(),
        lost,
        &out,
        &inp,
    );
    if let Some(f) = failure {
        return Err(f);
    }
    if o.fail_on_loss && lost > 0 {
        return Err(format!(
            "{lost} messages were dropped or lost (--fail-on-loss)"
        ));
    }
    Ok(())
}

/// After an SRT session ended: `None` to carry on (a listener waits for the next caller, a
/// caller with `--reconnect` calls again), or `Some(result)` to stop: `Some(None)` for an
/// orderly end, `Some(Some(reason))` for a failure.
fn session_over(end: &SrtEnd, why: &Gone, o: &LiveOpts) -> Option<Option<String>> {
    let again = match end.uri.mode {
        UriMode::Listener => !o.once,
        UriMode::Caller => o.reconnect,
    };
    if again && !stop_requested() {
        if end.uri.mode == UriMode::Listener {
            eprintln!("live: waiting for the next caller on port {}", end.uri.port);
        }
        return None;
    }
    Some(match why {
        Gone::Closed => None,
        Gone::Died(r) => Some(format!("SRT {}: the peer is gone ({r})", end.dir)),
    })
}

fn srt_ends<'a>(out: &'a mut Output, inp: &'a mut Input) -> Vec<&'a mut SrtEnd> {
    let mut v = Vec::with_capacity(2);
    if let Output::Srt(e) = out {
        v.push(&mut **e);
    }
    if let Input::Srt(e) = inp {
        v.push(&mut **e);
    }
    v
}

fn srt_tally(out: &Output) -> Option<Tally> {
    match out {
        Output::Srt(e) => Some(e.tally),
        _ => None,
    }
}

fn srt_tally_in(inp: &Input) -> Option<Tally> {
    match inp {
        Input::Srt(e) => Some(e.tally),
        _ => None,
    }
}

/// Prints the final summary; returns how many messages were dropped or lost on the way.
fn summarize(
    n: &Counts,
    secs: f64,
    stopped_by: Option<&str>,
    snd: Option<&Tally>,
    rcv: Option<&Tally>,
) -> u64 {
    eprintln!(
        "relayed {} messages ({} bytes) in {secs:.2} s ({:.3} Mbit/s){}",
        n.msgs,
        n.bytes,
        if secs > 0.0 {
            n.bytes as f64 * 8.0 / secs / 1e6
        } else {
            0.0
        },
        stopped_by
            .map(|s| format!(", stopped by {s}"))
            .unwrap_or_default()
    );
    let mut lost = n.kernel_drops + n.too_large + n.no_receiver;
    if n.kernel_drops + n.too_large > 0 {
        eprintln!(
            "  input: {} datagrams dropped by the kernel before they were read (receive \
             buffer full), {} too large for a live packet",
            n.kernel_drops, n.too_large
        );
    }
    if let Some(t) = snd {
        eprintln!(
            "  SRT output ({} session{}): {} packets sent: {} acknowledged, {} dropped by this \
             sender as too late, {} unacknowledged at the end; {} retransmissions{}",
            t.sessions,
            if t.sessions == 1 { "" } else { "s" },
            t.pkts_queued,
            t.pkts_acked,
            t.pkts_snd_dropped,
            t.pkts_unacked_at_close,
            t.pkts_retransmitted,
            if n.no_receiver > 0 {
                format!(
                    "; {} messages arrived while no receiver was connected (dropped)",
                    n.no_receiver
                )
            } else {
                String::new()
            }
        );
        lost += t.pkts_snd_dropped + t.pkts_unacked_at_close;
    }
    if let Some(t) = rcv {
        eprintln!(
            "  SRT input ({} session{}): {} packets delivered, {} lost (missing at their \
             play time, given up by this receiver), {} dropped by the sender, {} unread at \
             the end; {} retransmissions received",
            t.sessions,
            if t.sessions == 1 { "" } else { "s" },
            t.pkts_delivered,
            t.pkts_rcv_dropped,
            t.pkts_rcv_snd_dropped,
            t.pkts_unread_at_close,
            t.pkts_recv_retrans
        );
        lost += t.pkts_rcv_dropped + t.pkts_rcv_snd_dropped + t.pkts_unread_at_close;
    }
    if lost == 0 && rcv.is_none() && snd.is_some() {
        // A live receiver acknowledges past what it gives up as too late: all acknowledged
        // is not all delivered, and only the receiver can say what it lost.
        eprintln!(
            "  result: nothing dropped by this sender, every packet acknowledged (the \
             receiver acknowledges what it gives up as too late too: its summary tells)"
        );
    } else if lost == 0 {
        eprintln!("  result: nothing dropped or lost");
    } else {
        eprintln!("  result: LOSS: {lost} messages dropped or lost (see above)");
    }
    lost
}

#[allow(clippy::too_many_arguments)]
fn write_json(
    out_json: &StatsJson,
    n: &Counts,
    secs: f64,
    snd: Option<&Tally>,
    rcv: Option<&Tally>,
    lost: u64,
    out: &Output,
    inp: &Input,
) {
    let last = |end: Option<&SrtEnd>| end.and_then(|e| e.last);
    let out_end = match out {
        Output::Srt(e) => Some(&**e),
        _ => None,
    };
    let in_end = match inp {
        Input::Srt(e) => Some(&**e),
        _ => None,
    };
    let v = serde_json::json!({
        "role": "relayed",
        "messages": n.msgs,
        "bytes": n.bytes,
        "seconds": secs,
        "mbit_per_s": if secs > 0.0 { n.bytes as f64 * 8.0 / secs / 1e6 } else { 0.0 },
        "input": n,
        "srt_output": snd,
        "srt_input": rcv,
        "lost": lost,
        // The last session's own statistics (as `send` and `recv` report them).
        "connection": last(in_end).or(last(out_end)),
    });
    out_json.write(&v);
}

/// One periodic report per connected SRT end.
fn report(w: &mut dyn Write, format: StatsFormat, t0: Instant, out: &mut Output, inp: &mut Input) {
    for end in srt_ends(out, inp) {
        let Some(c) = end.conn.as_ref() else { continue };
        let Ok(s) = c.stats() else { continue };
        let now = Instant::now();
        let (dt, prev) = match end.reported {
            Some((t, p)) => (now.duration_since(t).as_secs_f64(), p),
            None => (s.elapsed_us as f64 / 1e6, ConnStats::default()),
        };
        let mbit = |b: u64, a: u64| {
            if dt > 0.0 {
                b.saturating_sub(a) as f64 * 8.0 / dt / 1e6
            } else {
                0.0
            }
        };
        let send = mbit(s.bytes_sent, prev.bytes_sent);
        let recv = mbit(s.bytes_recv_unique, prev.bytes_recv_unique);
        end.reported = Some((now, s));
        let t = t0.elapsed().as_secs_f64();
        let line = match format {
            StatsFormat::Json => serde_json::json!({
                "time_s": t,
                "srt": end.dir,
                "peer": c.peer_addr().to_string(),
                "rtt_ms": s.rtt_ms,
                "send_mbit_s": send,
                "recv_mbit_s": recv,
                "pkts_sent": s.pkts_sent,
                "pkts_retransmitted": s.pkts_retransmitted,
                "pkts_snd_dropped": s.pkts_snd_dropped,
                "pkts_snd_loss": s.pkts_snd_loss,
                "snd_buf_pkts": s.snd_buf_pkts,
                "pkts_recv": s.pkts_recv,
                "pkts_lost": s.pkts_rcv_loss,
                "pkts_rcv_dropped": s.pkts_rcv_dropped,
                "pkts_rcv_snd_dropped": s.pkts_rcv_snd_dropped,
                "pkts_recv_retrans": s.pkts_recv_retrans,
                "rcv_buf_pkts": s.rcv_buf_pkts,
                "latency_ms": s.latency_ms,
                "latency_margin_ms": s.latency_margin_ms,
                "latency_margin_min_ms": s.latency_margin_min_ms,
            })
            .to_string(),
            StatsFormat::Text if end.dir == "output" => format!(
                "live {t:.1} s: SRT output {}: {send:.2} Mbit/s, RTT {:.2} ms, {} sent, {} \
                 retransmitted, {} dropped too late, {} reported lost, buffer {} packets",
                c.peer_addr(),
                s.rtt_ms,
                s.pkts_sent,
                s.pkts_retransmitted,
                s.pkts_snd_dropped,
                s.pkts_snd_loss,
                s.snd_buf_pkts
            ),
            StatsFormat::Text => format!(
                "live {t:.1} s: SRT input {}: {recv:.2} Mbit/s, RTT {:.2} ms, {} received, \
                 {} lost on the way, {} given up too late, {} dropped by the sender, buffer \
                 {} packets, latency {} ms (margin {:.1} ms, least {:.1})",
                c.peer_addr(),
                s.rtt_ms,
                s.pkts_recv,
                s.pkts_rcv_loss,
                s.pkts_rcv_dropped,
                s.pkts_rcv_snd_dropped,
                s.rcv_buf_pkts,
                s.latency_ms,
                s.latency_margin_ms,
                s.latency_margin_min_ms
            ),
        };
        let _ = writeln!(w, "{line}");
        let _ = w.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_drops_of_an_unbound_port_are_unknown() {
        // Port 1 is privileged and never bound by the tests.
        assert_eq!(udp_kernel_drops(1), None);
    }

    #[test]
    fn kernel_drops_of_a_bound_port_are_read() {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = s.local_addr().unwrap().port();
        assert_eq!(udp_kernel_drops(port), Some(0));
    }
}
