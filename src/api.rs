//! The blocking application API: [`Endpoint`] (one UDP socket, its I/O thread, a listener and
//! any number of connections) and [`Connection`] (stream, message and live operations).
//!
//! Every operation locks the endpoint's shared state once, runs the engine's application
//! operation, wakes the I/O thread if it queued data, and otherwise waits on the endpoint's
//! condition variable. Errors are `io::Error`s with precise kinds and the engine's reason text.

use crate::datapath::{self, DatapathStats, Impaired, Impairment};
use crate::runtime::{self, AcceptSignal, Shared, State, Wait};
use crate::smoother::HostSmoother;
use slipstream_proto::cc::CcRegistry;
use slipstream_proto::conn::State as ConnState;
use slipstream_proto::conn::{
    CloseReason, ConnConfig, ConnStats, Mode, RecvError, SendError, SendTap, SharedBytes,
    StreamRead,
};
use slipstream_proto::endpoint::{ConnId, EndpointConfig, EndpointStats};
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest single wait on the condition variable before re-checking (a safety net: the I/O
/// thread notifies on every change).
const WAIT_SLICE: Duration = Duration::from_millis(100);
/// A live-mode read waiting for the play time of a complete message sleeps this much past
/// it, so that messages due within it are handed over in one wake-up: at 20 Mbit/s of
/// 1316-byte messages, about four a wake instead of one. Delivery is at most this late
/// (libsrt's receivers delivered 6-11 ms past the latency in the same runs, see
/// docs/benchmarks.md); 0.5 ms cost 35 % more CPU at 20 Mbit/s.
const LIVE_SLACK: Duration = Duration::from_millis(2);
/// Most messages one [`Connection::recv_messages`] call takes (a bound on the lock's hold).
const RECV_BATCH: usize = 1024;

/// Settings of an [`Endpoint`].
#[derive(Debug, Clone)]
pub struct EndpointOptions {
    datapath: String,
    impairment: Option<Impairment>,
    max_connections: usize,
    memory_budget: Option<usize>,
    threads: usize,
    registry: CcRegistry,
    seed: Option<u64>,
    smoother: Option<HostSmoother>,
}

impl Default for EndpointOptions {
    fn default() -> Self {
        EndpointOptions {
            // The fastest backend the kernel supports.
            datapath: "auto".into(),
            impairment: None,
            // The engine's default limit.
            max_connections: 1024,
            memory_budget: None,
            threads: 1,
            registry: CcRegistry::default(),
            seed: None,
            smoother: None,
        }
    }
}

impl EndpointOptions {
    /// Datagram backend by name ([`datapath::open`]). Default "auto": the fastest this kernel
    /// supports.
    pub fn set_datapath(&mut self, name: &str) -> &mut Self {
        self.datapath = name.to_string();
        self
    }
    /// Pass outgoing datagrams through a simulated link (loss, delay, ...). Default none.
    pub fn set_impairment(&mut self, imp: Option<Impairment>) -> &mut Self {
        self.impairment = imp;
        self
    }
    /// Most connections at once. Default 1024.
    pub fn set_max_connections(&mut self, n: usize) -> &mut Self {
        self.max_connections = n;
        self
    }
    /// Most bytes the connections' buffers may hold together (see
    /// [`EndpointConfig::set_memory_budget`]); past it they take no new memory and new
    /// callers are refused. Default ([`None`]): a quarter of the machine's memory.
    pub fn set_memory_budget(&mut self, bytes: Option<usize>) -> &mut Self {
        self.memory_budget = bytes;
        self
    }
    /// I/O threads, each with a socket of its own bound to the same address (Linux:
    /// `SO_REUSEPORT`, datagrams steered to the socket of the thread that holds their
    /// connection by SRT socket id). Connections are spread over them: new callers in turn,
    /// incoming ones by their socket id. The connection limit and memory budget apply to
    /// each thread's share. Default 1; at most 64.
    pub fn set_threads(&mut self, n: usize) -> &mut Self {
        self.threads = n.clamp(1, 64);
        self
    }
    /// Congestion controllers connections may name. Default: the built-ins ("bbr", "file",
    /// "udt", "live").
    pub fn set_registry(&mut self, r: CcRegistry) -> &mut Self {
        self.registry = r;
        self
    }
    /// The registry.
    pub fn registry(&self) -> &CcRegistry {
        &self.registry
    }
    /// Fixed seed for socket ids and sequence numbers (tests). Default: OS randomness.
    pub fn set_seed(&mut self, seed: Option<u64>) -> &mut Self {
        self.seed = seed;
        self
    }
    /// Answer to the process's traffic smoother ([`HostSmoother`], shared with real-time
    /// sockets): each datagram of the endpoint's connections takes a credit, as a
    /// non-real-time packet does, and waits for the next refresh when there is none; real-time
    /// receivers' loss reports slow the whole process. Default none.
    pub fn set_smoother(&mut self, s: Option<HostSmoother>) -> &mut Self {
        self.smoother = s;
        self
    }
}

/// The default memory budget of an endpoint: a quarter of the machine's memory (1 GiB if
/// it cannot be read).
pub fn default_memory_budget() -> usize {
    let info = rustix::system::sysinfo();
    let total = (info.totalram as u128 * u128::from(info.mem_unit.max(1))) as usize;
    if total == 0 {
        1 << 30
    } else {
        total / 4
    }
}

fn os_seed() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// Maps a connection's end to an `io::Error` carrying the engine's explanation.
pub fn close_error(r: CloseReason) -> io::Error {
    let kind = match r {
        CloseReason::Local | CloseReason::PeerShutdown => io::ErrorKind::BrokenPipe,
        CloseReason::PeerIdle | CloseReason::ConnectTimeout | CloseReason::LingerTimeout => {
            io::ErrorKind::TimedOut
        }
        CloseReason::Rejected(_) => io::ErrorKind::ConnectionRefused,
        CloseReason::Aborted => io::ErrorKind::ConnectionAborted,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, r.to_string())
}

fn send_error(e: SendError) -> io::Error {
    match e {
        SendError::TooLarge => io::Error::new(
            io::ErrorKind::InvalidInput,
            "message larger than the send buffer can ever hold",
        ),
        SendError::WrongMode => io::Error::new(
            io::ErrorKind::InvalidInput,
            "wrong operation for this connection's mode (stream send vs message send)",
        ),
        SendError::NotConnected => {
            io::Error::new(io::ErrorKind::NotConnected, "connection not established")
        }
        SendError::Closed(Some(r)) => close_error(r),
        SendError::Closed(None) => io::Error::new(
            io::ErrorKind::BrokenPipe,
            "connection is closing: no more data can be sent",
        ),
        SendError::WouldBlock => io::Error::from(io::ErrorKind::WouldBlock),
        _ => io::Error::other(format!("{e:?}")),
    }
}

fn gone() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, "connection no longer exists")
}

fn io_failed(g: &State) -> Option<io::Error> {
    g.io_done.as_ref().map(|e| {
        io::Error::other(
            e.clone()
                .unwrap_or_else(|| "endpoint I/O thread has stopped".into()),
        )
    })
}

/// One UDP socket carrying any number of SRT connections, served by its own I/O thread.
///
/// Dropping it stops listening and aborts connections not yet accepted; the I/O thread stops
/// once every [`Connection`] has been dropped too.
#[derive(Debug)]
pub struct Endpoint {
    /// One socket, engine and I/O thread per thread asked for.
    shards: Vec<Shard>,
    /// The shard the next caller goes to.
    next: std::sync::atomic::AtomicUsize,
    accepts: Arc<AcceptSignal>,
    local: SocketAddr,
    registry: CcRegistry,
    datapath: &'static str,
}

impl Endpoint {
    /// Binds `addr` and starts the I/O thread (or threads, see
    /// [`EndpointOptions::set_threads`]).
    pub fn bind(addr: SocketAddr, opts: EndpointOptions) -> io::Result<Endpoint> {
        let n = opts.threads.max(1);
        let accepts = Arc::new(AcceptSignal::default());
        let mut shards = Vec::with_capacity(n);
        let mut local = addr;
        let mut datapath = "";
        let seed = opts.seed.unwrap_or_else(os_seed);
        let budget = opts.memory_budget.unwrap_or_else(default_memory_budget) / n;
        for k in 0..n {
            let open = || datapath::open(&opts.datapath, local);
            #[cfg(target_os = "linux")]
            let dp = if n > 1 {
                datapath::in_reuseport_group(n as u32, open)?
            } else {
                open()?
            };
            #[cfg(not(target_os = "linux"))]
            let dp = open()?;
            let dp: Box<dyn datapath::Datapath> = match opts.impairment.clone() {
                Some(imp) => Box::new(Impaired::new(dp, imp)),
                None => dp,
            };
            if k == 0 {
                // The others bind the same address, the port included.
                local = dp.local_addr()?;
                datapath = dp.name();
            }
            let mut cfg = EndpointConfig::default();
            cfg.set_max_connections(opts.max_connections.div_ceil(n))
                .set_memory_budget(Some(budget))
                .set_shard(k as u32, n as u32)
                .set_seed(seed.wrapping_add(k as u64))
                .set_registry(opts.registry.clone())
                .set_receive_queue(dp.receive_queue_bytes());
            let ep = slipstream_proto::endpoint::Endpoint::new(cfg, Instant::now());
            let (shared, thread) =
                runtime::spawn(dp, ep, 1500, accepts.clone(), opts.smoother.clone())?;
            shards.push(Shard {
                shared,
                thread: Some(thread),
            });
        }
        Ok(Endpoint {
            shards,
            next: std::sync::atomic::AtomicUsize::new(0),
            accepts,
            local,
            registry: opts.registry,
            datapath,
        })
    }

    /// I/O threads (shards) this endpoint runs.
    pub fn threads(&self) -> usize {
        self.shards.len()
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Endpoint counters (datagrams dropped before reaching a connection, ...), summed
    /// over the I/O threads.
    pub fn stats(&self) -> EndpointStats {
        let mut s = EndpointStats::default();
        for sh in &self.shards {
            s.merge(&sh.shared.lock().ep.stats());
        }
        s
    }

    /// Endpoint counters of each I/O thread.
    pub fn stats_per_thread(&self) -> Vec<EndpointStats> {
        self.shards
            .iter()
            .map(|sh| sh.shared.lock().ep.stats())
            .collect()
    }

    /// Datapath counters (socket-level drops, impairment), summed over the I/O threads.
    pub fn datapath_stats(&self) -> DatapathStats {
        let mut s = DatapathStats::default();
        for sh in &self.shards {
            s.merge(&sh.shared.lock().dp_stats);
        }
        s
    }

    /// The datagram backend this endpoint runs on ("gso", "uring", "std", ...).
    pub fn datapath_name(&self) -> &'static str {
        self.datapath
    }

    fn check_cc(&self, cfg: &ConnConfig) -> io::Result<()> {
        if self.registry.build(cfg.cc()).is_none() {
            let names: Vec<&str> = self.registry.names().collect();
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "unknown congestion control '{}' (available: {})",
                    cfg.cc(),
                    names.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// Accepts incoming connections configured with `cfg` from now on.
    pub fn listen(&self, cfg: ConnConfig) -> io::Result<()> {
        self.check_cc(&cfg)?;
        for sh in &self.shards {
            let mut g = sh.shared.lock();
            g.ep.listen(Some(cfg.clone()));
            g.listening = true;
        }
        Ok(())
    }

    /// Stops accepting; connections already accepted are kept.
    pub fn stop_listening(&self) {
        for sh in &self.shards {
            let mut g = sh.shared.lock();
            g.ep.listen(None);
            g.listening = false;
        }
    }

    /// Waits for the next incoming connection.
    pub fn accept(&self) -> io::Result<Connection> {
        self.accept_until(None)
    }

    /// Waits at most `timeout` for the next incoming connection (`TimedOut` otherwise).
    pub fn accept_timeout(&self, timeout: Duration) -> io::Result<Connection> {
        self.accept_until(Some(Instant::now() + timeout))
    }

    fn accept_until(&self, deadline: Option<Instant>) -> io::Result<Connection> {
        let start = self.next.load(std::sync::atomic::Ordering::Relaxed);
        loop {
            // Read the signal first: a connection queued after the look below moves it.
            let seen = self.accepts.count();
            for k in 0..self.shards.len() {
                let sh = &self.shards[(start + k) % self.shards.len()];
                let mut g = sh.shared.lock();
                if !g.listening {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "endpoint is not listening",
                    ));
                }
                if let Some(id) = g.accept_queue.pop_front() {
                    return Connection::new(&sh.shared, &mut g, id);
                }
                if let Some(e) = io_failed(&g) {
                    return Err(e);
                }
            }
            let slice = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(w) if !w.is_zero() => w.min(WAIT_SLICE),
                    _ => {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "no incoming connection within the timeout",
                        ))
                    }
                },
                None => WAIT_SLICE,
            };
            self.accepts.wait(seen, slice);
        }
    }

    /// Connects to `remote` and waits until the handshake completes (or fails: `TimedOut`
    /// when nobody answers, `ConnectionRefused` with the peer's reason when rejected).
    pub fn connect(&self, remote: SocketAddr, mut cfg: ConnConfig) -> io::Result<Connection> {
        self.check_cc(&cfg)?;
        if let Some(mtu) = crate::datapath::path_mtu(remote) {
            cfg.set_mss_from_path(mtu);
        }
        let k = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let shared = &self.shards[k % self.shards.len()].shared;
        let mut g = shared.lock();
        let id =
            g.ep.connect(Instant::now(), remote, cfg)
                .map_err(|e| io::Error::other(e.to_string()))?;
        drop(g);
        shared.wake_io();
        g = shared.lock();
        loop {
            let state = g.ep.conn(id).map(|c| c.state());
            match state {
                Some(ConnState::Connecting) => {}
                Some(ConnState::Closed(r)) => {
                    g.ep.remove(id);
                    return Err(close_error(r));
                }
                Some(_) => return Connection::new(shared, &mut g, id),
                None => return Err(gone()),
            }
            if let Some(e) = io_failed(&g) {
                g.ep.remove(id);
                return Err(e);
            }
            g = shared.wait(g, WAIT_SLICE);
        }
    }
}

/// One socket, engine and I/O thread of an [`Endpoint`].
#[derive(Debug)]
struct Shard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Shard {
    fn drop(&mut self) {
        let mut g = self.shared.lock();
        g.shutdown = true;
        g.listening = false;
        g.ep.listen(None);
        while let Some(id) = g.accept_queue.pop_front() {
            if let Some(c) = g.ep.conn(id) {
                c.abort();
            }
            g.to_remove.push(id);
        }
        let idle = g.handles == 0;
        drop(g);
        self.shared.wake_io();
        if idle {
            // Nothing else keeps the socket: wait for the thread so it is closed on return.
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

/// One SRT connection. Blocking operations; `&self` methods may be called from several
/// threads through a shared reference (`Read`/`Write` need `&mut`).
///
/// Dropping a connection that was not closed aborts it (the peer is told), then removes it.
#[derive(Debug)]
pub struct Connection {
    shared: Arc<Shared>,
    /// What this handle's threads wait on (registered in the shared state's `conds`).
    cond: Arc<std::sync::Condvar>,
    id: ConnId,
    peer: SocketAddr,
    mode: Mode,
    stream_id: Option<Vec<u8>>,
    digest: bool,
    verdict: bool,
    latency: Duration,
    peer_latency: Duration,
    /// Operations fail with `WouldBlock` instead of waiting.
    nonblocking: AtomicBool,
}

impl Connection {
    fn new(shared: &Arc<Shared>, g: &mut MutexGuard<'_, State>, id: ConnId) -> io::Result<Self> {
        let c = g.ep.conn(id).ok_or_else(gone)?;
        let cond = Arc::new(std::sync::Condvar::new());
        let conn = Connection {
            shared: shared.clone(),
            cond: cond.clone(),
            id,
            peer: c.peer_addr(),
            mode: c.config().mode(),
            stream_id: c.stream_id().map(<[u8]>::to_vec),
            digest: c.digest_agreed(),
            verdict: c.verdict_agreed(),
            latency: c.latency(),
            peer_latency: c.peer_latency(),
            nonblocking: AtomicBool::new(false),
        };
        g.handles += 1;
        g.conds.insert(id, runtime::ConnWaiters::new(cond));
        Ok(conn)
    }

    /// Runs `f` on the engine's connection under the lock.
    fn with<T>(
        &self,
        f: impl FnOnce(&mut slipstream_proto::conn::Connection, Instant) -> T,
    ) -> io::Result<T> {
        let mut g = self.shared.lock();
        let c = g.ep.conn(self.id).ok_or_else(gone)?;
        Ok(f(c, Instant::now()))
    }

    /// The state its I/O thread shares (for the poller).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The engine's id of the connection.
    pub(crate) fn id(&self) -> ConnId {
        self.id
    }

    /// With `true`, operations that would wait (for data, for room, for a message) fail
    /// with `WouldBlock` instead; a [`crate::Poller`] says when to try again. Its `add`
    /// sets this.
    pub fn set_nonblocking(&self, on: bool) {
        self.nonblocking.store(on, Ordering::Relaxed);
    }

    /// The peer's UDP address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }
    /// The transfer mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// The stream id: sent by the caller (raw bytes; SRT does not require UTF-8).
    pub fn stream_id(&self) -> Option<&[u8]> {
        self.stream_id.as_deref()
    }
    /// The stream id as text (lossy).
    pub fn stream_id_str(&self) -> Option<String> {
        self.stream_id
            .as_deref()
            .map(|s| String::from_utf8_lossy(s).into_owned())
    }
    /// Both ends are slipstream and agreed on the end-to-end file digest trailer.
    pub fn digest_agreed(&self) -> bool {
        self.digest
    }
    /// Both ends agreed that a file transfer starts with its length and ends with the
    /// receiver's verdict sent back (see [`crate::transfer`]).
    pub fn verdict_agreed(&self) -> bool {
        self.verdict
    }
    /// Negotiated TSBPD latency (live mode) of the direction this end receives.
    pub fn latency(&self) -> Duration {
        self.latency
    }
    /// Negotiated TSBPD latency (live mode) of the direction this end sends: how long after
    /// a message was queued the peer plays it.
    pub fn peer_latency(&self) -> Duration {
        self.peer_latency
    }
    /// A statistics snapshot.
    pub fn stats(&self) -> io::Result<ConnStats> {
        self.with(|c, now| c.stats(now))
    }
    /// The connection's state.
    pub fn state(&self) -> io::Result<ConnState> {
        self.with(|c, _| c.state())
    }
    /// Caps this end's sending rate from now on, bytes per second on the wire (packets
    /// with their headers, retransmissions included; 0: no cap). See
    /// [`ConnConfig::set_max_bw`](crate::proto::conn::ConnConfig::set_max_bw).
    pub fn set_max_rate(&self, bytes_per_s: u64) -> io::Result<()> {
        self.with(|c, _| c.set_max_bw(bytes_per_s))?;
        self.shared.wake_io();
        Ok(())
    }
    /// The sending rate cap in effect, bytes per second (0: none).
    pub fn max_rate(&self) -> io::Result<u64> {
        self.with(|c, _| match c.config().max_bw_rule() {
            crate::proto::conn::MaxBw::Absolute(b) => b,
            _ => 0,
        })
    }

    /// Waits (at most one slice) for progress; fails if the I/O thread is gone.
    fn wait<'a>(
        &self,
        g: MutexGuard<'a, State>,
        slice: Duration,
    ) -> io::Result<MutexGuard<'a, State>> {
        self.wait_for(g, slice, Wait::Any)
    }

    fn wait_for<'a>(
        &self,
        mut g: MutexGuard<'a, State>,
        slice: Duration,
        kind: Wait,
    ) -> io::Result<MutexGuard<'a, State>> {
        if let Some(e) = io_failed(&g) {
            return Err(e);
        }
        if self.nonblocking.load(Ordering::Relaxed) {
            return Err(io::Error::from(io::ErrorKind::WouldBlock));
        }
        let count = |w: &mut runtime::ConnWaiters, up: bool| {
            let step = |n: &mut usize| *n = if up { *n + 1 } else { *n - 1 };
            step(&mut w.waiting);
            match kind {
                Wait::Read | Wait::Message => step(&mut w.reading),
                Wait::Write => step(&mut w.writing),
                Wait::Any | Wait::Timer => {}
            }
        };
        if let Some(w) = g.conds.get_mut(&self.id) {
            count(w, true);
        }
        let mut g = self.shared.wait_on(&self.cond, g, slice, kind);
        if let Some(w) = g.conds.get_mut(&self.id) {
            count(w, false);
        }
        Ok(g)
    }

    /// Stream mode: queues bytes, waiting until there is room for some. Returns how many
    /// were taken (all of `data` when the buffer has room).
    pub fn send(&self, data: &[u8]) -> io::Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let mut g = self.shared.lock();
        loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            match c.send(Instant::now(), data) {
                Ok(n) => {
                    drop(g);
                    self.shared.wake_io();
                    return Ok(n);
                }
                Err(SendError::WouldBlock) => g = self.wait_for(g, WAIT_SLICE, Wait::Write)?,
                Err(e) => return Err(send_error(e)),
            }
        }
    }

    /// Stream mode: a buffer to fill and hand to [`Connection::send_chunk`], the length the
    /// connection takes best (a whole number of packets, about 1 MiB): one handed over
    /// earlier whose packets were all acknowledged (contents stale), or a new one.
    pub fn take_chunk(&self) -> io::Result<Vec<u8>> {
        let (len, reused) = self.with(|c, _| (c.chunk_len(), c.take_chunk()))?;
        Ok(match reused {
            Some(v) if v.len() >= len => v,
            _ => vec![0; len],
        })
    }

    /// Stream mode: the length the connection takes best for [`Connection::send_chunk`] and
    /// [`Connection::send_shared`]: a whole number of packets, about 1 MiB.
    pub fn chunk_len(&self) -> io::Result<usize> {
        self.with(|c, _| c.chunk_len())
    }

    /// Stream mode: queues the first `len` bytes of `chunk` (from
    /// [`Connection::take_chunk`], or any buffer) without copying them, waiting for room:
    /// the packets go out from the chunk itself. Filling it needs no lock, so a slow source
    /// never holds up the connection. Fails with `InvalidInput` for `len` 0 or beyond the
    /// chunk, or a chunk longer than the send buffer can ever hold.
    pub fn send_chunk(&self, mut chunk: Vec<u8>, len: usize) -> io::Result<()> {
        let mut g = self.shared.lock();
        loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            match c.send_chunk(Instant::now(), chunk, len) {
                Ok(()) => {
                    drop(g);
                    self.shared.wake_io();
                    return Ok(());
                }
                Err((SendError::WouldBlock, back)) => {
                    chunk = back;
                    g = self.wait_for(g, WAIT_SLICE, Wait::Write)?;
                }
                Err((SendError::TooLarge, back)) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "cannot queue {len} bytes of a {}-byte chunk (empty, beyond the \
                             chunk, or more than the send buffer can hold)",
                            back.len()
                        ),
                    ))
                }
                Err((e, _)) => return Err(send_error(e)),
            }
        }
    }

    /// Stream mode: queues `data[range]` without copying it, waiting for room, as
    /// [`Connection::send_chunk`] does, from bytes shared read-only (a mapped file, say): the
    /// packets go out from `data` where it lies, and the connection holds a reference to it
    /// until they are acknowledged. Fails with `InvalidInput` for an empty range, one beyond
    /// `data`, or one longer than the send buffer can ever hold.
    pub fn send_shared(&self, data: &SharedBytes, range: Range<usize>) -> io::Result<()> {
        let mut g = self.shared.lock();
        loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            match c.send_shared(Instant::now(), data, range.clone()) {
                Ok(()) => {
                    drop(g);
                    self.shared.wake_io();
                    return Ok(());
                }
                Err(SendError::WouldBlock) => g = self.wait_for(g, WAIT_SLICE, Wait::Write)?,
                Err(SendError::TooLarge) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "cannot queue bytes {range:?} of {} shared bytes (empty, beyond \
                             them, or more than the send buffer can hold)",
                            (**data).as_ref().len()
                        ),
                    ))
                }
                Err(e) => return Err(send_error(e)),
            }
        }
    }

    /// Message or live mode: queues one whole message, waiting for room. In live mode data
    /// too late to play is dropped first (and counted), so a full buffer means the source
    /// outruns the link: it is held back here, as libsrt's blocking send does.
    pub fn send_message(&self, msg: &[u8]) -> io::Result<()> {
        self.queue_message(msg)?;
        self.shared.wake_io();
        Ok(())
    }

    /// As [`Connection::send_message`], but the I/O thread is not woken for this message:
    /// more follow at once, and the caller calls [`Connection::flush`] (or
    /// [`Connection::send_message`]) after the last of them, so that a burst read from an
    /// input costs one wake-up of the I/O thread, not one per message. Until then the
    /// messages wait (at most until the I/O thread's next timer). Waiting for room wakes
    /// the I/O thread first.
    pub fn send_message_more(&self, msg: &[u8]) -> io::Result<()> {
        self.queue_message(msg)
    }

    /// Message or live mode: queues as many of `msgs` as there is room for, in order, under
    /// one hold of the endpoint's lock and with one wake-up of the I/O thread; waits for
    /// room only while none fits. Returns how many were queued (at least one, unless `msgs`
    /// is empty). For streams of small messages: one lock a batch instead of one a message.
    pub fn send_messages(&self, msgs: &[&[u8]]) -> io::Result<usize> {
        if msgs.is_empty() {
            return Ok(0);
        }
        let mut g = self.shared.lock();
        loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            let now = Instant::now();
            let mut queued = 0;
            for m in msgs {
                match c.send_message(now, m) {
                    Ok(()) => queued += 1,
                    Err(SendError::WouldBlock) => break,
                    Err(e) if queued == 0 => return Err(send_error(e)),
                    Err(_) => break,
                }
            }
            if queued > 0 {
                drop(g);
                self.shared.wake_io();
                return Ok(queued);
            }
            self.shared.wake_io();
            g = self.wait_for(g, WAIT_SLICE, Wait::Write)?;
        }
    }

    /// Sends what [`Connection::send_message_more`] queued: wakes the I/O thread if it
    /// sleeps.
    pub fn flush(&self) {
        self.shared.wake_io();
    }

    fn queue_message(&self, msg: &[u8]) -> io::Result<()> {
        let mut g = self.shared.lock();
        loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            match c.send_message(Instant::now(), msg) {
                Ok(()) => return Ok(()),
                Err(SendError::WouldBlock) => {
                    // Room comes from acknowledgements, which need what is queued sent.
                    self.shared.wake_io();
                    g = self.wait_for(g, WAIT_SLICE, Wait::Write)?;
                }
                Err(e) => return Err(send_error(e)),
            }
        }
    }

    /// After a read: a window update the read made due goes out now (the I/O thread is woken
    /// if it sleeps), since the sender may be waiting for nothing else.
    fn read_done(&self, ack_pending: bool) {
        if ack_pending {
            self.shared.wake_io();
        }
    }

    /// Stream mode: reads bytes, waiting for some. `Ok(0)` is the clean end of the stream.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_until(buf, None)
    }

    /// Like [`Connection::recv`] but gives up after `timeout` (`TimedOut`).
    pub fn recv_timeout(&self, buf: &mut [u8], timeout: Duration) -> io::Result<usize> {
        self.recv_until(buf, Some(Instant::now() + timeout))
    }

    fn recv_until(&self, buf: &mut [u8], deadline: Option<Instant>) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut g = self.shared.lock();
        loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            match c.recv(buf) {
                Ok(n) => {
                    self.read_done(c.ack_pending());
                    return Ok(n);
                }
                Err(RecvError::WouldBlock) => {
                    let slice = match deadline {
                        Some(d) => match d.checked_duration_since(Instant::now()) {
                            Some(left) if !left.is_zero() => left.min(WAIT_SLICE),
                            _ => return Err(io::ErrorKind::TimedOut.into()),
                        },
                        None => WAIT_SLICE,
                    };
                    g = self.wait_for(g, slice, Wait::Read)?;
                }
                Err(e) => return Err(recv_error(e)),
            }
        }
    }

    /// Stream mode: reads as [`Connection::recv`] does, but when the next bytes fill a whole
    /// page of the receive buffer ([`Connection::recv_page_len`] bytes: up to 1 MiB of full
    /// packets in order, or one packet where packets are 16 KiB or more, as over loopback)
    /// takes that page out instead of copying it, for the caller to write out from where the
    /// packets landed: `Page(page, len)`, the stream's next bytes being `page[..len]`.
    /// Otherwise copies into `buf`, up to the end of the current page. `spare` gives back a
    /// page from an earlier call for reuse (a later receive writes into it,
    /// [`crate::proto::endpoint::Endpoint::give_page`]). `Copied(0)` is the end of the stream.
    pub fn recv_page(&self, buf: &mut [u8], mut spare: Option<Vec<u8>>) -> io::Result<StreamRead> {
        if buf.is_empty() {
            return Ok(StreamRead::Copied(0));
        }
        let mut g = self.shared.lock();
        loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            match c.recv_page(buf, &mut None) {
                Ok(r) => {
                    self.read_done(c.ack_pending());
                    // The spare goes to the endpoint, for the next payload received.
                    if let Some(s) = spare.take() {
                        g.ep.give_page(Instant::now(), self.id, s);
                    }
                    return Ok(r);
                }
                Err(RecvError::WouldBlock) => g = self.wait_for(g, WAIT_SLICE, Wait::Read)?,
                Err(e) => return Err(recv_error(e)),
            }
        }
    }

    /// Stream mode: reads as [`Connection::recv_page`] does, and when that gives a page,
    /// takes the whole pages that follow it too, up to `max` in all, under one lock: fewer
    /// lock round trips and fewer, larger writes for the caller. The pages are appended to
    /// `pages`; `spares` gives back pages from earlier calls (one per page taken, for later
    /// receives to write into, [`crate::proto::endpoint::Endpoint::give_page`]; the rest
    /// stay in it). Returns
    /// the bytes copied into `buf` instead (where the next bytes are not a whole page); 0
    /// with no page added is the end of the stream.
    pub fn recv_pages(
        &self,
        buf: &mut [u8],
        spares: &mut Vec<Vec<u8>>,
        pages: &mut Vec<(Vec<u8>, usize)>,
        max: usize,
    ) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut g = self.shared.lock();
        let held = pages.len();
        let n = loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            // A spare goes back (for the next payloads received) only for a page taken; the
            // caller keeps the rest.
            match c.recv_page(buf, &mut None) {
                Ok(StreamRead::Copied(n)) => break n,
                Ok(StreamRead::Page(p, len)) => {
                    pages.push((p, len));
                    while pages.len() < max {
                        match c.recv_whole_page(&mut None) {
                            Some(page) => pages.push(page),
                            None => break,
                        }
                    }
                    let back = spares.len().min(pages.len() - held);
                    let now = Instant::now();
                    for s in spares.drain(spares.len() - back..) {
                        g.ep.give_page(now, self.id, s);
                    }
                    break 0;
                }
                Err(RecvError::WouldBlock) => g = self.wait_for(g, WAIT_SLICE, Wait::Read)?,
                Err(e) => return Err(recv_error(e)),
            }
        };
        if let Some(c) = g.ep.conn(self.id) {
            self.read_done(c.ack_pending());
        }
        Ok(n)
    }

    /// Bytes of a page [`Connection::recv_page`] hands out (set by the packet size the
    /// connection negotiated).
    pub fn recv_page_len(&self) -> io::Result<usize> {
        self.with(|c, _| c.recv_page_len())
    }

    /// Message or live mode: reads one whole message, waiting for one. `Ok(0)` means the
    /// peer closed cleanly and nothing is left.
    pub fn recv_message(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_message_until(buf, None)
    }

    /// Message mode: reads whole messages into `buf` one after another, waiting for the
    /// first, and sets `lens` to their lengths: as many as are complete and fit (at most
    /// 1,024), taken under one lock, so that a reader of small messages pays for the lock
    /// and the wake-up once a batch, not once a message. Returns how many; `Ok(0)` means
    /// the peer closed cleanly and nothing is left. Live mode reads one message at a time
    /// ([`Connection::recv_message`]): each has its own play time.
    pub fn recv_messages(&self, buf: &mut [u8], lens: &mut Vec<usize>) -> io::Result<usize> {
        lens.clear();
        if self.mode != Mode::Message {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "recv_messages reads message mode; use recv_message in live mode",
            ));
        }
        let first = self.recv_message(buf)?;
        if first == 0 {
            return Ok(0);
        }
        lens.push(first);
        let mut off = first;
        let mut g = self.shared.lock();
        let mut ack = false;
        if let Some(c) = g.ep.conn(self.id) {
            let now = Instant::now();
            while lens.len() < RECV_BATCH && off < buf.len() {
                match c.recv_message(now, &mut buf[off..]) {
                    Ok(n) if n > 0 => {
                        lens.push(n);
                        off += n;
                        ack |= c.ack_pending();
                    }
                    _ => break,
                }
            }
        }
        drop(g);
        self.read_done(ack);
        Ok(lens.len())
    }

    /// Like [`Connection::recv_message`] but gives up after `timeout` (`TimedOut`).
    pub fn recv_message_timeout(&self, buf: &mut [u8], timeout: Duration) -> io::Result<usize> {
        self.recv_message_until(buf, Some(Instant::now() + timeout))
    }

    fn recv_message_until(&self, buf: &mut [u8], deadline: Option<Instant>) -> io::Result<usize> {
        let mut g = self.shared.lock();
        // When the end was first reported while live data was still waiting for its play
        // time (see below), and how long that data may take.
        let mut drain_until: Option<Instant> = None;
        loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            let now = Instant::now();
            let r = match c.recv_message(now, buf) {
                Ok(n) if n > 0 => {
                    self.read_done(c.ack_pending());
                    Ok(n)
                }
                // Workaround: in live mode the engine reports the end (`Ok(0)`) as soon as the
                // peer's shutdown arrives, even while received messages still wait in the
                // buffer for their delivery time. Keep reading them until they are delivered
                // (or the latency plus a margin has passed).
                Ok(0) if self.mode == Mode::Live && c.stats(now).rcv_buf_pkts > 0 => {
                    let until =
                        *drain_until.get_or_insert(now + self.latency + Duration::from_secs(1));
                    if now < until {
                        Err(RecvError::WouldBlock)
                    } else {
                        Ok(0)
                    }
                }
                r => r,
            };
            // Live mode: with a complete message held, sleep until it plays (later arrivals
            // change nothing: they play later), else until something arrives; never in short
            // slices: an idle reader costs nothing.
            let (slice, kind) = match c.next_delivery() {
                Some(t) => (
                    (t + LIVE_SLACK)
                        .saturating_duration_since(now)
                        .min(WAIT_SLICE),
                    Wait::Timer,
                ),
                // A message reader is woken by a whole message (or the end), a live one
                // by any arrival: it may set an earlier play time to sleep until.
                None if c.config().mode() == Mode::Message => (WAIT_SLICE, Wait::Message),
                None => (WAIT_SLICE, Wait::Any),
            };
            match r {
                Ok(n) => return Ok(n),
                Err(RecvError::WouldBlock) => {
                    let wait = match deadline {
                        Some(d) => match d.checked_duration_since(Instant::now()) {
                            Some(w) if !w.is_zero() => w.min(slice),
                            _ => {
                                return Err(io::Error::new(
                                    io::ErrorKind::TimedOut,
                                    "no message within the timeout",
                                ))
                            }
                        },
                        None => slice,
                    };
                    g = self.wait_for(g, wait, kind)?;
                }
                Err(e) => return Err(recv_error(e)),
            }
        }
    }

    /// Bytes queued and not yet acknowledged by the peer.
    pub fn unacknowledged(&self) -> io::Result<u64> {
        self.with(|c, _| c.send_buffer_len())
    }

    /// Stream mode: shows `tap` the next `limit` bytes of the stream as they are first sent,
    /// by the I/O thread just before it sends them (see
    /// [`slipstream_proto::conn::Connection::set_send_tap`]). Set it before queueing them.
    pub fn set_send_tap(&self, tap: Box<dyn SendTap>, limit: u64) -> io::Result<()> {
        self.with(|c, _| c.set_send_tap(tap, limit))
    }

    /// Waits until the send tap has seen `n` bytes. Fails with `TimedOut` when it sees none
    /// for `idle`, or with the connection's end reason if it ends first.
    pub fn wait_tapped(&self, n: u64, idle: Duration) -> io::Result<()> {
        let mut g = self.shared.lock();
        let mut last = 0;
        let mut progress_at = Instant::now();
        loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            let seen = c.send_tapped();
            if seen >= n {
                return Ok(());
            }
            if let ConnState::Closed(r) = c.state() {
                return Err(close_error(r));
            }
            let now = Instant::now();
            if seen > last {
                (last, progress_at) = (seen, now);
            } else if now.duration_since(progress_at) >= idle {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("nothing sent for {idle:?}; {seen} of {n} bytes sent"),
                ));
            }
            g = self.wait(g, WAIT_SLICE)?;
        }
    }

    /// Waits until everything queued has been acknowledged. Fails with `TimedOut` when no
    /// acknowledgement progress is made for `idle` (the transfer is stuck, however slow it
    /// is otherwise), or with the connection's end reason if it ends first.
    pub fn wait_acknowledged(&self, idle: Duration) -> io::Result<()> {
        let mut g = self.shared.lock();
        let mut last = u64::MAX;
        let mut progress_at = Instant::now();
        loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            let left = c.send_buffer_len();
            match c.state() {
                ConnState::Closed(r) if left > 0 => return Err(close_error(r)),
                _ if left == 0 => return Ok(()),
                _ => {}
            }
            let now = Instant::now();
            if left < last {
                last = left;
                progress_at = now;
            } else if now.duration_since(progress_at) >= idle {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no acknowledgement for {idle:?}; {left} bytes outstanding"),
                ));
            }
            g = self.wait(g, WAIT_SLICE)?;
        }
    }

    /// Graceful close: waits until everything sent is acknowledged, then tells the peer.
    /// Errors when the data could not be delivered (linger timeout, peer gone or closed first).
    pub fn close(&self) -> io::Result<()> {
        let mut g = self.shared.lock();
        let c = g.ep.conn(self.id).ok_or_else(gone)?;
        c.close(Instant::now());
        drop(g);
        self.shared.wake_io();
        g = self.shared.lock();
        loop {
            let c = g.ep.conn(self.id).ok_or_else(gone)?;
            match c.state() {
                ConnState::Closed(CloseReason::Local) => return Ok(()),
                ConnState::Closed(r) => {
                    let left = c.send_buffer_len();
                    if left == 0 && r == CloseReason::PeerShutdown {
                        return Ok(());
                    }
                    let e = close_error(r);
                    return Err(io::Error::new(
                        e.kind(),
                        format!("{e}; {left} bytes were not acknowledged"),
                    ));
                }
                _ => g = self.wait(g, WAIT_SLICE)?,
            }
        }
    }

    /// Immediate close: tells the peer and discards buffered data.
    pub fn abort(&self) {
        let _ = self.with(|c, _| c.abort());
        self.shared.wake_io();
    }
}

fn recv_error(e: RecvError) -> io::Error {
    match e {
        RecvError::BufferTooSmall(n) => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("buffer too small for the next message: it needs {n} bytes"),
        ),
        RecvError::WrongMode => io::Error::new(
            io::ErrorKind::InvalidInput,
            "wrong operation for this connection's mode (stream recv vs message recv)",
        ),
        RecvError::Closed(r) => close_error(r),
        RecvError::WouldBlock => io::Error::from(io::ErrorKind::WouldBlock),
        _ => io::Error::other(format!("{e:?}")),
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let mut g = self.shared.lock();
        if let Some(c) = g.ep.conn(self.id) {
            if !matches!(c.state(), ConnState::Closed(_)) {
                c.abort();
            }
        }
        g.to_remove.push(self.id);
        if g.conds.remove(&self.id).is_some_and(|w| w.poll.is_some()) {
            g.polled -= 1;
        }
        g.handles -= 1;
        drop(g);
        self.shared.wake_io();
    }
}

impl Read for Connection {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.mode {
            Mode::File => self.recv(buf),
            _ => self.recv_message(buf),
        }
    }
}

impl Write for Connection {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.mode {
            Mode::File => self.send(buf),
            _ => self.send_message(buf).map(|()| buf.len()),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
