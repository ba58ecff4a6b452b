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
//! The load patterns run one thread per connection on each side (small stacks): the API's
//! calls block, and a stream send has no timeout, so a thread serving several connections
//! would stall all of them behind the first whose buffer is full.

use super::ipc::{self, Accepted, Cmd, Connected, Measured, Ready, Sample, Started, Stopped};
use super::{Pattern, PeerArgs};
use crate::bench::dgram::process_cpu;
use slipstream::api::{Connection, Endpoint, EndpointOptions};
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
}

impl Conns {
    fn new(n: usize, size: usize, copy: bool) -> Conns {
        Conns {
            list: Mutex::new(Vec::with_capacity(n)),
            lost: Mutex::new(BTreeMap::new()),
            bytes: (0..n).map(|_| AtomicU64::new(0)).collect(),
            msgs: (0..n).map(|_| AtomicU64::new(0)).collect(),
            stop: AtomicBool::new(false),
            size,
            copy,
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
                     in flight {}, lost {} (sent) {} (received), send buffer {} of {}, receive \
                     buffer {} of {}, buffer memory {} KiB",
                    st.bytes_sent_unique,
                    st.bytes_recv_unique,
                    st.send_period_us,
                    st.rtt_ms,
                    st.pkts_in_flight,
                    st.pkts_snd_loss,
                    st.pkts_rcv_loss,
                    st.snd_buf_pkts,
                    st.snd_buf_cap_pkts,
                    st.rcv_buf_pkts,
                    st.rcv_buf_cap_pkts,
                    st.buf_mem_bytes >> 10,
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

    /// Starts the pattern's thread per connection.
    fn start(self: &Arc<Self>, pattern: Pattern, server: bool) -> Result<Started, String> {
        let list = self.list();
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
        for (k, (id, c)) in list.iter().enumerate() {
            let (id, c, me, data) = (*id, c.clone(), self.clone(), data.clone());
            std::thread::Builder::new()
                .name(format!("conn-{id}"))
                .stack_size(WORKER_STACK)
                .spawn(move || {
                    let r = match (pattern, server) {
                        (Pattern::Idle, _) => Ok(()),
                        (Pattern::Bulk, true) => me.receive_stream(id, &c),
                        (Pattern::Messages, true) => me.receive_messages(id, &c),
                        (Pattern::Bulk, false) => me.send_stream(id, &c, &data),
                        (Pattern::Messages, false) => me.send_messages(id, &c, (*data).as_ref()),
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

    /// Reads the stream: whole pages of the receive buffer taken out and given back (as the
    /// file receiver does), or copied out (--copy).
    fn receive_stream(&self, id: usize, c: &Connection) -> Result<(), String> {
        let mut buf = vec![0; STREAM_CHUNK];
        let mut pages = Vec::with_capacity(RECV_PAGES);
        let mut spares = Vec::with_capacity(RECV_PAGES);
        loop {
            let n = if self.copy {
                c.recv(&mut buf)
            } else {
                c.recv_pages(&mut buf, &mut spares, &mut pages, RECV_PAGES)
            }
            .map_err(|e| e.to_string())?;
            let paged: usize = pages.iter().map(|p| p.1).sum();
            if n + paged == 0 {
                return Err("the peer ended the connection".into());
            }
            spares.extend(pages.drain(..).map(|p| p.0));
            self.count(id, n + paged, 0);
        }
    }

    /// Reads messages a batch at a time ([`Connection::recv_messages`]).
    fn receive_messages(&self, id: usize, c: &Connection) -> Result<(), String> {
        let mut buf = vec![0; (self.size * MSG_BATCH as usize).max(self.size)];
        let mut lens = Vec::with_capacity(MSG_BATCH as usize);
        loop {
            let k = c
                .recv_messages(&mut buf, &mut lens)
                .map_err(|e| e.to_string())?;
            if k == 0 {
                return Err("the peer ended the connection".into());
            }
            self.count(id, lens.iter().sum(), k as u64);
        }
    }

    fn send_stream(&self, id: usize, c: &Connection, data: &SharedBytes) -> Result<(), String> {
        let len = (**data).as_ref().len();
        while !self.stop.load(Ordering::Relaxed) {
            let n = if self.copy {
                c.send((**data).as_ref())
            } else {
                c.send_shared(data, 0..len).map(|()| len)
            }
            .map_err(|e| e.to_string())?;
            self.count(id, n, 0);
        }
        Ok(())
    }

    fn send_messages(&self, id: usize, c: &Connection, msg: &[u8]) -> Result<(), String> {
        let batch = [msg; MSG_BATCH as usize];
        while !self.stop.load(Ordering::Relaxed) {
            let k = c.send_messages(&batch).map_err(|e| e.to_string())?;
            self.count(id, msg.len() * k, k as u64);
        }
        Ok(())
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
    let conns = Arc::new(Conns::new(a.n, a.size, a.copy));
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
    let conns = Arc::new(Conns::new(a.n, a.size, a.copy));
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
