//! The two child processes of `bench conns`: the server (one endpoint listening on
//! 127.0.0.1, accepting every connection) and the client (one endpoint opening them all, from
//! several connector threads at once). Each answers the bench's commands ([`super::ipc`]).
//!
//! Connection `i` (the client's connect order) carries the stream id `i`, so both sides name
//! a connection the same way and the bench can count one lost connection once, whichever side
//! noticed. A connection is lost when it ends in any way during the run (no side closes one
//! on purpose): found closed when sampled, or an error (or the end of the stream) in a send or
//! a receive.
//!
//! The load patterns run on a few threads on each side, each serving its share of the
//! connections through a [`Poller`] (one per I/O thread by default, `--workers`), or on a
//! thread per connection (`--workers 0`, small stacks) making blocking calls.

use super::ipc::{self, Accepted, Cmd, Connected, Measured, Ready, Sample, Started, Stopped};
use super::{Pattern, PeerArgs};
use crate::bench::dgram::process_cpu;
use slipstream::api::{Connection, Endpoint, EndpointOptions};
use slipstream::{Interest, Poller};
use slipstream_proto::conn::{ConnConfig, Mode, SharedBytes, State};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Stack of a thread per connection: it only loops over one blocking call.
const WORKER_STACK: usize = 64 << 10;
/// Stack of a connector thread (connect runs the engine's handshake code on it).
const CONNECTOR_STACK: usize = 256 << 10;
/// Bytes per stream send with --copy, and of the buffer a stream receive copies into.
const STREAM_CHUNK: usize = 64 << 10;
/// Most receive-buffer pages one stream read takes out.
const RECV_PAGES: usize = 16;
/// Messages offered per `send_messages` call (one hold of the lock, one wake-up of the
/// I/O thread).
pub(super) const MSG_BATCH: u64 = 64;
/// Longest wait of a poller thread before it looks at the stop flag.
const POLL_SLICE: Duration = Duration::from_millis(50);
/// What [`Conns::step`] fails with where a polled connection would have waited.
const WOULD_BLOCK: &str = "would block";
/// Endpoint connection limit beyond the connections requested.
const SPARE_CONNS: usize = 16;

/// The connections of one side and what they did.
#[derive(Debug)]
struct Conns {
    list: Mutex<Vec<(usize, Arc<Connection>)>>,
    lost: Mutex<BTreeMap<usize, String>>,
    bytes: Vec<AtomicU64>,
    msgs: Vec<AtomicU64>,
    stop: AtomicBool,
    /// Message size of the message pattern, bytes.
    size: usize,
    /// Streams copy in and out instead of sharing chunks and taking pages (--copy).
    copy: bool,
    /// Poller threads serving the connections; 0 for a thread per connection.
    workers: usize,
}

impl Conns {
    fn new(n: usize, size: usize, copy: bool, workers: usize) -> Conns {
        Conns {
            list: Mutex::new(Vec::with_capacity(n)),
            lost: Mutex::new(BTreeMap::new()),
            bytes: (0..n).map(|_| AtomicU64::new(0)).collect(),
            msgs: (0..n).map(|_| AtomicU64::new(0)).collect(),
            stop: AtomicBool::new(false),
            size,
            copy,
            workers,
        }
    }

    fn lose(&self, id: usize, why: String) {
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        lost.entry(id).or_insert(why);
    }

    fn list(&self) -> Vec<(usize, Arc<Connection>)> {
        self.list.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn count(&self, id: usize, bytes: usize, msgs: u64) {
        if let (Some(b), Some(m)) = (self.bytes.get(id), self.msgs.get(id)) {
            b.fetch_add(bytes as u64, Ordering::Relaxed);
            m.fetch_add(msgs, Ordering::Relaxed);
        }
    }

    /// One line of statistics per connection on stderr (`--conn-stats`).
    fn print_stats(&self, side: &str) {
        let mut list = self.list();
        list.sort_by_key(|(id, _)| *id);
        for (id, c) in list {
            if let Ok(st) = c.stats() {
                eprintln!(
                    "  {side} conn {id}: sent {} B, received {} B, period {:.1} us, rtt {:.2} ms, \
                     in flight {} (window {}), data packets {} sent {} received, full ACKs {} \
                     sent {} received, light ACKs {}, ACKACKs {}, lost {} (sent) {} (received), \
                     retransmitted {}, timeouts {}, tail probes {}, send buffer {} of {}, receive \
                     buffer {} of {}, buffer memory {} KiB, send lag {} ms, receive pages \
                     allocated {}",
                    st.bytes_sent_unique,
                    st.bytes_recv_unique,
                    st.send_period_us,
                    st.rtt_ms,
                    st.pkts_in_flight,
                    st.flow_window_pkts,
                    st.pkts_sent,
                    st.pkts_recv,
                    st.acks_sent,
                    st.acks_recv,
                    st.light_acks_sent,
                    st.ackacks_sent,
                    st.pkts_snd_loss,
                    st.pkts_rcv_loss,
                    st.pkts_retransmitted,
                    st.timeouts,
                    st.tail_probes,
                    st.snd_buf_pkts,
                    st.snd_buf_cap_pkts,
                    st.rcv_buf_pkts,
                    st.rcv_buf_cap_pkts,
                    st.buf_mem_bytes >> 10,
                    st.send_lag_us / 1000,
                    st.rcv_pages_allocated,
                );
            }
        }
    }

    fn totals(&self) -> (Vec<u64>, Vec<u64>) {
        let load = |v: &[AtomicU64]| v.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        (load(&self.bytes), load(&self.msgs))
    }

    /// Checks every connection's state, then reports.
    fn sample(&self) -> Sample {
        for (id, c) in self.list() {
            match c.state() {
                Ok(State::Closed(r)) => self.lose(id, r.to_string()),
                Ok(_) => {}
                Err(e) => self.lose(id, e.to_string()),
            }
        }
        let lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        Sample {
            t_s: ipc::mono_s(),
            cpu_s: process_cpu(),
            rss_kib: ipc::rss_kib(),
            lost: lost.iter().map(|(i, w)| (*i, w.clone())).collect(),
        }
    }

    /// Starts the pattern: a thread per connection, or `workers` threads each serving its
    /// share of the connections through a [`Poller`].
    fn start(self: &Arc<Self>, pattern: Pattern, server: bool) -> Result<Started, String> {
        let list = self.list();
        if pattern == Pattern::Idle {
            return Ok(Started { threads: 0 });
        }
        // What every sender sends: one message, or for a stream one chunk shared by all
        // connections (queued without copying), or a smaller buffer copied in (--copy).
        let chunk = match list.first() {
            Some((_, c)) if pattern == Pattern::Bulk && !self.copy => {
                c.chunk_len().map_err(|e| e.to_string())?
            }
            _ if pattern == Pattern::Bulk => STREAM_CHUNK,
            _ => self.size,
        };
        let data: SharedBytes = Arc::new(vec![0xa5u8; chunk]);
        let job = Job {
            pattern,
            server,
            data,
        };
        if self.workers > 0 {
            return self.start_polled(job, list);
        }
        for (k, (id, c)) in list.iter().enumerate() {
            let (id, c, me, job) = (*id, c.clone(), self.clone(), job.clone());
            std::thread::Builder::new()
                .name(format!("conn-{id}"))
                .stack_size(WORKER_STACK)
                .spawn(move || {
                    let mut io = Io::new(me.size);
                    // Each call waits for its data or room; a sender checks for the stop.
                    let r = loop {
                        if !server && me.stop.load(Ordering::Relaxed) {
                            break Ok(());
                        }
                        if let Err(why) = me.step(&job, id, &c, &mut io) {
                            break Err(why);
                        }
                    };
                    if let Err(why) = r {
                        if !me.stop.load(Ordering::Relaxed) {
                            me.lose(id, why);
                        }
                    }
                })
                .map_err(|e| {
                    format!(
                        "starting the thread of connection {k} of {}: {e}",
                        list.len()
                    )
                })?;
        }
        Ok(Started {
            threads: list.len(),
        })
    }

    /// `workers` threads, each with a poller and every `workers`-th connection: a report
    /// means "go on until it would block".
    fn start_polled(
        self: &Arc<Self>,
        job: Job,
        list: Vec<(usize, Arc<Connection>)>,
    ) -> Result<Started, String> {
        let w = self.workers.min(list.len()).max(1);
        let interest = if job.server {
            Interest::READ
        } else {
            Interest::WRITE
        };
        for k in 0..w {
            let mine: Vec<(usize, Arc<Connection>)> =
                list.iter().skip(k).step_by(w).cloned().collect();
            let poller = Poller::new();
            for (slot, (_, c)) in mine.iter().enumerate() {
                poller
                    .add(c, slot as u64, interest)
                    .map_err(|e| format!("registering a connection with a poller: {e}"))?;
            }
            let (me, job) = (self.clone(), job.clone());
            std::thread::Builder::new()
                .name(format!("poll-{k}"))
                .stack_size(CONNECTOR_STACK)
                .spawn(move || {
                    let mut io = Io::new(me.size);
                    let (mut ready, mut dead) = (Vec::new(), vec![false; mine.len()]);
                    while !me.stop.load(Ordering::Relaxed) {
                        ready.clear();
                        poller.wait(&mut ready, POLL_SLICE);
                        for &t in &ready {
                            let slot = t as usize;
                            let Some((id, c)) = mine.get(slot).filter(|_| !dead[slot]) else {
                                continue;
                            };
                            loop {
                                match me.step(&job, *id, c, &mut io) {
                                    Ok(()) => {}
                                    Err(why) if why == WOULD_BLOCK => break,
                                    Err(why) => {
                                        dead[slot] = true;
                                        poller.remove(c);
                                        if !me.stop.load(Ordering::Relaxed) {
                                            me.lose(*id, why);
                                        }
                                        break;
                                    }
                                }
                            }
                        }
                    }
                })
                .map_err(|e| format!("starting poller thread {k} of {w}: {e}"))?;
        }
        Ok(Started { threads: w })
    }

    /// One call of the pattern on connection `id`: a receive (whole pages of the receive
    /// buffer taken out and given back, as the file receiver does, or copied out with
    /// --copy; a batch of messages) or a send (the shared chunk, queued without copying,
    /// or copied in with --copy; a batch of messages). Fails with [`WOULD_BLOCK`] where a
    /// polled connection would have waited.
    fn step(&self, job: &Job, id: usize, c: &Connection, io: &mut Io) -> Result<(), String> {
        let err = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::WouldBlock => WOULD_BLOCK.to_string(),
            _ => e.to_string(),
        };
        let ended = || Err("the peer ended the connection".to_string());
        match (job.pattern, job.server) {
            (Pattern::Idle, _) => Ok(()),
            (Pattern::Bulk, true) => {
                let n = if self.copy {
                    c.recv(&mut io.buf)
                } else {
                    c.recv_pages(&mut io.buf, &mut io.spares, &mut io.pages, RECV_PAGES)
                }
                .map_err(err)?;
                let paged: usize = io.pages.iter().map(|p| p.1).sum();
                io.spares.extend(io.pages.drain(..).map(|p| p.0));
                if n + paged == 0 {
                    return ended();
                }
                self.count(id, n + paged, 0);
                Ok(())
            }
            (Pattern::Messages, true) => {
                let k = c.recv_messages(&mut io.buf, &mut io.lens).map_err(err)?;
                if k == 0 {
                    return ended();
                }
                self.count(id, io.lens.iter().sum(), k as u64);
                Ok(())
            }
            (Pattern::Bulk, false) => {
                let data = &job.data;
                let len = (**data).as_ref().len();
                let n = if self.copy {
                    c.send((**data).as_ref())
                } else {
                    c.send_shared(data, 0..len).map(|()| len)
                }
                .map_err(err)?;
                self.count(id, n, 0);
                Ok(())
            }
            (Pattern::Messages, false) => {
                let msg: &[u8] = (*job.data).as_ref();
                let batch = [msg; MSG_BATCH as usize];
                let k = c.send_messages(&batch).map_err(err)?;
                self.count(id, msg.len() * k, k as u64);
                Ok(())
            }
        }
    }
}

/// What the load threads do.
#[derive(Clone)]
struct Job {
    pattern: Pattern,
    server: bool,
    /// The stream chunk or the message every sender sends.
    data: SharedBytes,
}

/// A load thread's buffers.
struct Io {
    buf: Vec<u8>,
    pages: Vec<(Vec<u8>, usize)>,
    spares: Vec<Vec<u8>>,
    lens: Vec<usize>,
}

impl Io {
    fn new(size: usize) -> Io {
        Io {
            buf: vec![0; STREAM_CHUNK.max(size * MSG_BATCH as usize)],
            pages: Vec::with_capacity(RECV_PAGES),
            spares: Vec::with_capacity(RECV_PAGES),
            lens: Vec::with_capacity(MSG_BATCH as usize),
        }
    }
}

/// The configuration of every connection (the client adds its stream id).
fn config(a: &PeerArgs) -> ConnConfig {
    let mut cfg = ConnConfig::new(match a.pattern {
        Pattern::Idle | Pattern::Bulk => Mode::File,
        Pattern::Messages => Mode::Message,
    });
    if let Some(cc) = &a.cc {
        cfg.set_cc(cc);
    }
    if let Some(mss) = a.mss {
        cfg.set_mss(mss);
    }
    cfg
}

fn bind(a: &PeerArgs) -> Result<(Endpoint, Ready), String> {
    let rss_kib_start = ipc::rss_kib();
    let mut opts = EndpointOptions::default();
    opts.set_datapath(&a.datapath)
        .set_max_connections(a.n + SPARE_CONNS)
        .set_threads(a.threads);
    let ep = Endpoint::bind("127.0.0.1:0".parse().expect("address"), opts)
        .map_err(|e| format!("binding 127.0.0.1: {e}"))?;
    let ready = Ready {
        addr: ep.local_addr(),
        datapath: ep.datapath_name().to_string(),
        rss_kib_start,
        rss_kib_bound: ipc::rss_kib(),
    };
    Ok((ep, ready))
}

/// Answers commands until the bench closes our stdin.
fn serve(mut handle: impl FnMut(Cmd) -> Result<(), String>) -> Result<(), String> {
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| format!("reading commands: {e}"))?;
        let r = serde_json::from_str::<Cmd>(&line)
            .map_err(|e| format!("unknown command ({e}): {line}"))
            .and_then(&mut handle);
        if let Err(e) = r {
            ipc::say_error(&e);
        }
    }
    Ok(())
}

fn fail(e: String) -> String {
    ipc::say_error(&e);
    e
}

/// `bench conns-server`.
pub fn run_server(a: &PeerArgs) -> Result<(), String> {
    let (ep, ready) = bind(a).map_err(fail)?;
    ep.listen(config(a))
        .map_err(|e| fail(format!("listen: {e}")))?;
    let ep = Arc::new(ep);
    let conns = Arc::new(Conns::new(a.n, a.size, a.copy, a.workers));
    let times: Arc<AcceptTimes> = Default::default();
    {
        let (ep, conns, times, n) = (ep.clone(), conns.clone(), times.clone(), a.n);
        std::thread::Builder::new()
            .name("accept".into())
            .spawn(move || accept_all(&ep, &conns, &times, n))
            .map_err(|e| fail(format!("starting the accept thread: {e}")))?;
    }
    ipc::say(&ready)?;
    serve(|cmd| match cmd {
        Cmd::WaitAccepted { n, timeout_s } => {
            let end = ipc::mono_s() + timeout_s;
            loop {
                let accepted = conns.list.lock().unwrap_or_else(|e| e.into_inner()).len();
                let t = times.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if accepted >= n || t.2.is_some() || ipc::mono_s() > end {
                    return ipc::say(&Accepted {
                        accepted,
                        first_s: t.0,
                        last_s: t.1,
                        error: t.2,
                    });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Cmd::Sample => ipc::say(&conns.sample()),
        Cmd::Start => ipc::say(&conns.start(a.pattern, true)?),
        Cmd::Measure { secs } => {
            let (b0, m0) = conns.totals();
            let (t, cpu) = (ipc::mono_s(), process_cpu());
            std::thread::sleep(Duration::from_secs_f64(secs));
            let (b1, m1) = conns.totals();
            let (t1, cpu1) = (ipc::mono_s(), process_cpu());
            if a.conn_stats {
                conns.print_stats("server");
            }
            let diff = |a: Vec<u64>, b: Vec<u64>| a.iter().zip(&b).map(|(x, y)| y - x).collect();
            ipc::say(&Measured {
                secs: t1 - t,
                cpu_s: cpu1 - cpu,
                rss_kib: ipc::rss_kib(),
                bytes: diff(b0, b1),
                msgs: diff(m0, m1),
            })
        }
        Cmd::Connect | Cmd::Stop => Err(format!("the server does not {cmd:?}")),
    })
}

/// When the first and the last connection were accepted, and why accepting stopped early.
type AcceptTimes = Mutex<(Option<f64>, Option<f64>, Option<String>)>;

fn accept_all(ep: &Endpoint, conns: &Conns, times: &AcceptTimes, n: usize) {
    let mut k = 0;
    while k < n {
        match ep.accept_timeout(Duration::from_millis(250)) {
            Ok(c) => {
                let t = ipc::mono_s();
                // The stream id is the client's index; anything else gets one past them.
                let id = c
                    .stream_id_str()
                    .and_then(|s| s.parse::<usize>().ok())
                    .filter(|&i| i < n)
                    .unwrap_or(n + k);
                conns
                    .list
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((id, Arc::new(c)));
                let mut g = times.lock().unwrap_or_else(|e| e.into_inner());
                g.0.get_or_insert(t);
                g.1 = Some(t);
                k += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(e) => {
                times.lock().unwrap_or_else(|e| e.into_inner()).2 = Some(format!("accept: {e}"));
                return;
            }
        }
    }
}

/// `bench conns-client`.
pub fn run_client(a: &PeerArgs) -> Result<(), String> {
    let server = a
        .addr
        .ok_or_else(|| fail("conns-client needs --addr".into()))?;
    let (ep, ready) = bind(a).map_err(fail)?;
    ipc::say(&ready)?;
    let conns = Arc::new(Conns::new(a.n, a.size, a.copy, a.workers));
    let mut t0 = (0.0, 0.0);
    serve(|cmd| match cmd {
        Cmd::Connect => ipc::say(&connect_all(&ep, server, &conns, a)?),
        Cmd::Sample => ipc::say(&conns.sample()),
        Cmd::Start => {
            t0 = (ipc::mono_s(), process_cpu());
            ipc::say(&conns.start(a.pattern, false)?)
        }
        Cmd::Stop => {
            if a.conn_stats {
                conns.print_stats("client");
            }
            conns.stop.store(true, Ordering::Relaxed);
            let (b, m) = conns.totals();
            ipc::say(&Stopped {
                secs: ipc::mono_s() - t0.0,
                cpu_s: process_cpu() - t0.1,
                rss_kib: ipc::rss_kib(),
                bytes: b.iter().sum(),
                msgs: m.iter().sum(),
            })
        }
        Cmd::WaitAccepted { .. } | Cmd::Measure { .. } => {
            Err(format!("the client does not {cmd:?}"))
        }
    })
}

/// Opens connections 0..n from `a.connectors` threads at once.
fn connect_all(
    ep: &Endpoint,
    server: SocketAddr,
    conns: &Conns,
    a: &PeerArgs,
) -> Result<Connected, String> {
    let next = AtomicUsize::new(0);
    let span = Mutex::new((f64::INFINITY, 0.0f64));
    let failed = AtomicUsize::new(0);
    let base = config(a);
    std::thread::scope(|s| {
        for t in 0..a.connectors.clamp(1, a.n) {
            std::thread::Builder::new()
                .name(format!("connect-{t}"))
                .stack_size(CONNECTOR_STACK)
                .spawn_scoped(s, || loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= a.n {
                        return;
                    }
                    let mut cfg = base.clone();
                    cfg.set_stream_id(Some(i.to_string().into_bytes()));
                    let start = ipc::mono_s();
                    let r = ep.connect(server, cfg);
                    let end = ipc::mono_s();
                    {
                        let mut g = span.lock().unwrap_or_else(|e| e.into_inner());
                        g.0 = g.0.min(start);
                        g.1 = g.1.max(end);
                    }
                    match r {
                        Ok(c) => conns
                            .list
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((i, Arc::new(c))),
                        Err(e) => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            conns.lose(i, format!("connect: {e}"));
                        }
                    }
                })
                .map(drop)
                .map_err(|e| format!("starting connector thread {t}: {e}"))?;
        }
        Ok::<(), String>(())
    })?;
    let (first_start_s, last_return_s) = *span.lock().unwrap_or_else(|e| e.into_inner());
    Ok(Connected {
        ok: conns.list().len(),
        failed: failed.into_inner(),
        first_start_s,
        last_return_s,
    })
}
