//! The I/O thread ("bottom half") of an endpoint and the state it shares with application
//! threads.
//!
//! This module owns the event loop: one thread per endpoint receives a batch of datagrams
//! without holding the lock, then locks once to feed them to the sans-IO
//! [`Endpoint`](slipstream_proto::endpoint::Endpoint), run its timers, collect a batch of
//! transmits and drain its events, and sends the batch after unlocking. Application threads
//! lock the same state for their operations, wait on one condition variable, and wake the I/O
//! thread (only when it sleeps) when they have queued something to send.
//!
//! The loop allocates nothing per packet: receive and transmit slots are allocated once (and
//! grown only when a connection with a larger MSS appears).
//!
//! Where the datapath gathers ([`Datapath::gathers`]), data packets are not copied out of the
//! send buffers: the engine writes their headers only, and the batch goes to the kernel,
//! headers and payloads in place, before the lock is released (the payloads live in the
//! engine, which only the lock holder may read). Otherwise the engine copies whole datagrams
//! into the loop's buffer and the batch is sent after unlocking.
//!
//! Where the connections' payloads are large (64 KiB over loopback) and the datapath splits
//! receives ([`Datapath::splits`]), the received payloads are not copied either: each
//! datagram's header lands apart and its payload in a buffer of its own, which the engine
//! takes into its receive buffer in exchange for another ([`Split`]).

use crate::datapath::{
    Datapath, DatapathStats, RxBatch, RxSplit, Tx, TxGather, Waker, MAX_UDP_PAYLOAD, SPLIT_HEAD,
};
use crate::smoother::HostSmoother;
use rustc_hash::FxHashMap;
use slipstream_proto::conn::{Connection, Event, State as ConnState};
use slipstream_proto::endpoint::{ConnId, Endpoint, PayloadRef};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Most datagrams sent per loop iteration.
const TX_DATAGRAMS: usize = 256;
/// IPv4 and UDP headers, added to a datagram's payload for its time on the smoother's link
/// (IPv6 has 20 bytes more: counted short).
const UDP_IP_HEADERS: usize = 28;
/// Datagrams per split receive (see [`Split`]): with 64 KiB payloads, 4 MiB of buffers.
const SPLIT_MSGS: usize = 64;
/// Most payload bytes per gather send: it runs under the lock (see [`IoLoop::gather`]), and
/// application threads wait for that lock to queue data or read it. Small enough, too, that
/// payloads a send tap has just read (a file sender's digest, see
/// [`slipstream_proto::conn::SendTap`]) are still in the core's cache when the kernel copies
/// them: with 1 MiB batches the sender spent 0.32-0.39 CPU s a GiB over loopback, with
/// 256 KiB 0.31-0.33, against 0.36-0.40 for digests taken by the application ahead.
const GATHER_BYTES: usize = 256 << 10;
/// Largest datagrams (a slot) sent by copying them whole rather than gathering their
/// payloads from the send buffers: see the loop.
const GATHER_MIN_SLOT: usize = 4096;
/// Smallest slot size: an Ethernet-MTU datagram plus room for a jumbo-ish peer.
const MIN_SLOT: usize = 2048;
/// Deadlines closer than this are slept for this long instead: a wake-up per paced packet
/// (12 µs apart at 1 Gbit/s) would cost a core in system calls. The engine's pacing releases
/// what fell due meanwhile as one burst (its quantum and credit), so the rate holds; incoming
/// datagrams end the sleep at once, except while a stream arrives (see [`STEADY_WINDOW`]).
const NAP: Duration = Duration::from_micros(50);
/// Receive coalescing. While a stream of at least [`STEADY_DATAGRAMS`] datagrams per
/// [`STEADY_WINDOW`] arrives (about 370 Mbit/s of full-size datagrams), the I/O thread sleeps
/// [`COALESCE`] (at most until its own next deadline) before it reads again, instead of
/// waking for every few datagrams: through slipstream's emulator at 1 Gbit/s those came a few
/// at a time every 100 µs or so, and a receiver woke over 10,000 times a second, a context
/// switch each. A window closes with the first batch at least this long after it opened, so
/// it spans 1-2 ms, and the decision holds until the next one closes; a millisecond without
/// datagrams ends it. A request and its reply, a datagram a round trip, count as a stream
/// only with round trips under about 30 µs. The nap is a plain sleep: application threads
/// that wake the I/O thread meanwhile (a write, a close) wait for its end, up to 250 µs.
const STEADY_WINDOW: Duration = Duration::from_millis(1);
/// See [`STEADY_WINDOW`].
const STEADY_DATAGRAMS: usize = 32;
/// See [`STEADY_WINDOW`]. Far below the 10 ms ACK interval; the kernel's socket buffer holds
/// what arrives meanwhile (31 kB at 1 Gbit/s).
const COALESCE: Duration = Duration::from_micros(250);
/// A waiting stream reader is woken after this many datagrams (~370 kB at 1456-byte
/// payloads) while data keeps flowing...
const NOTIFY_DATAGRAMS: usize = 256;
/// ...or once the oldest datagram it has not been told of is this old. Waking it whenever the
/// I/O thread naps (every few packets of a paced 1 Gbit/s flow) cost a context switch per
/// wake on both threads: tens of thousands a second.
const READ_NOTIFY_DELAY: Duration = Duration::from_micros(250);

/// When the endpoint is closed and its connections are gone, datagrams an emulated link
/// (an impairment's delay line) still holds go out before the I/O thread ends, for at most
/// this long: a sender's last acknowledgement and SHUTDOWN are among them, and without them
/// the peer waits out its idle timeout.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// What the I/O thread and the application threads share, under one lock.
#[derive(Debug)]
pub(crate) struct State {
    /// The protocol engine.
    pub ep: Endpoint,
    /// Connections accepted by the listener and not yet taken by `accept`.
    pub accept_queue: VecDeque<ConnId>,
    /// Whether accepted connections are queued (false: they are aborted).
    pub listening: bool,
    /// Connections whose handles were dropped; removed once their last datagrams are out.
    pub to_remove: Vec<ConnId>,
    /// The endpoint handle was dropped: stop once no connection handle is left.
    pub shutdown: bool,
    /// Live connection handles.
    pub handles: usize,
    /// Application threads waiting on the condition variable.
    pub waiters: usize,
    /// Of those, waiting for their own timeout or an event ([`Wait::Timer`]).
    pub timers: usize,
    /// Of those, stream readers (woken by a useful amount of data, not every packet).
    pub readers: usize,
    /// Of those, stream writers (woken when a useful share of the send buffer is free).
    pub writers: usize,
    /// Largest MSS any connection may use; the I/O thread sizes its slots from it.
    pub max_mss: usize,
    /// The I/O thread has stopped; its error if it failed.
    pub io_done: Option<Option<String>>,
    /// Datapath counters, refreshed by the I/O thread.
    pub dp_stats: DatapathStats,
    /// The condition variable of each connection handle: its threads wait on it, and the
    /// I/O thread wakes those of the connections something happened to, not every thread
    /// of the endpoint (a thousand connections each with a reader would wake a thousand
    /// threads per event). Fx-hashed: the ids are the endpoint's own random draws.
    pub conds: FxHashMap<ConnId, ConnWaiters>,
    /// Connection handles registered with a [`crate::poll::Poller`].
    pub polled: usize,
}

/// A connection handle's condition variable and how many threads wait on it now (changed
/// under the lock): the I/O thread notifies only those with waiters, since a notification
/// costs a system call whether anyone waits or not (with a thousand busy connections, a
/// third of the I/O thread went to waking nobody).
#[derive(Debug)]
pub(crate) struct ConnWaiters {
    /// What the handle's threads wait on.
    pub cond: Arc<Condvar>,
    /// Threads waiting on it.
    pub waiting: usize,
    /// Of those, stream or message readers (woken only when the connection has something
    /// to read or has ended).
    pub reading: usize,
    /// Of those, writers (woken only when a quarter of the send buffer is free or the
    /// connection has ended).
    pub writing: usize,
    /// The poller the handle is registered with, if any.
    pub poll: Option<PollReg>,
}

/// A connection handle's registration with a poller.
#[derive(Debug)]
pub(crate) struct PollReg {
    /// Where it is reported.
    pub set: Arc<PollSet>,
    /// The application's name for it.
    pub token: u64,
    /// Reported for something to read.
    pub read: bool,
    /// Reported for room to write.
    pub write: bool,
    /// Reported and not yet taken by the poller (it is reported once until then).
    pub flag: Arc<AtomicBool>,
}

impl PollReg {
    /// Whether a change to `conn` (gone when `None`) is worth reporting: it ended, has
    /// something to read or room to write, as registered.
    fn concerned(&self, conn: Option<&Connection>, now: Instant) -> bool {
        let Some(c) = conn else {
            return true;
        };
        c.state() != ConnState::Connected
            || (self.read && c.is_readable(now))
            || (self.write && c.has_room())
    }
}

/// Where the I/O threads report the connections registered with a poller, and what the
/// poller waits on.
#[derive(Debug, Default)]
pub(crate) struct PollSet {
    state: Mutex<PollState>,
    cond: Condvar,
}

#[derive(Debug, Default)]
struct PollState {
    ready: Vec<(u64, Arc<AtomicBool>)>,
    waiting: usize,
}

impl PollSet {
    fn lock(&self) -> MutexGuard<'_, PollState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reports `token` unless it is reported and not yet taken. Returns whether a thread
    /// waits for it (the caller notifies [`PollSet::cond`] after unlocking its own lock).
    pub fn report(&self, token: u64, flag: &Arc<AtomicBool>) -> bool {
        if flag.swap(true, Ordering::AcqRel) {
            return false;
        }
        let mut s = self.lock();
        s.ready.push((token, flag.clone()));
        s.waiting > 0
    }

    /// Wakes the threads waiting in [`PollSet::take`].
    pub fn notify(&self) {
        self.cond.notify_all();
    }

    /// Moves the reported tokens into `out`, waiting at most `timeout` for one.
    pub fn take(&self, out: &mut Vec<u64>, timeout: Duration) {
        let mut s = self.lock();
        if s.ready.is_empty() && !timeout.is_zero() {
            s.waiting += 1;
            s = self
                .cond
                .wait_timeout_while(s, timeout, |s| s.ready.is_empty())
                .unwrap_or_else(|e| e.into_inner())
                .0;
            s.waiting -= 1;
        }
        for (token, flag) in s.ready.drain(..) {
            flag.store(false, Ordering::Release);
            out.push(token);
        }
    }
}

impl ConnWaiters {
    /// A connection handle's entry, no thread waiting yet.
    pub fn new(cond: Arc<Condvar>) -> Self {
        ConnWaiters {
            cond,
            waiting: 0,
            reading: 0,
            writing: 0,
            poll: None,
        }
    }

    /// Whether a change to `conn` (gone when `None`) concerns a thread waiting here: one
    /// waiting for anything, a reader with something to read, a writer with room. A
    /// connection acknowledging data it receives is changed a hundred times a second;
    /// waking its reader each time cost a thousand readers the I/O thread's time.
    pub fn concerned(&self, conn: Option<&Connection>, now: Instant) -> bool {
        let Some(c) = conn else {
            return self.waiting > 0;
        };
        let ended = c.state() != ConnState::Connected;
        self.waiting > self.reading + self.writing
            || (self.reading > 0 && (ended || c.is_readable(now)))
            || (self.writing > 0 && (ended || c.has_room()))
    }
}

/// Bumped and notified by the I/O threads of an endpoint's shards whenever they queue an
/// accepted connection: `accept` waits on it, whichever shard the connection is in.
#[derive(Debug, Default)]
pub(crate) struct AcceptSignal {
    /// How many times a connection was queued.
    pub count: Mutex<u64>,
    /// Notified with each bump.
    pub cond: Condvar,
}

impl AcceptSignal {
    /// The count now.
    pub fn count(&self) -> u64 {
        *self.count.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self) {
        *self.count.lock().unwrap_or_else(|e| e.into_inner()) += 1;
        self.cond.notify_all();
    }

    /// Waits at most `timeout` for the count to move past `seen`.
    pub fn wait(&self, seen: u64, timeout: Duration) {
        let g = self.count.lock().unwrap_or_else(|e| e.into_inner());
        if *g == seen {
            let _ = self.cond.wait_timeout(g, timeout);
        }
    }
}

/// Shared between the I/O thread and the application handles.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The endpoint's accept signal (shared by its shards).
    pub accepts: Arc<AcceptSignal>,
    state: Mutex<State>,
    cond: Condvar,
    io_sleeping: AtomicBool,
    waker: Waker,
}

impl Shared {
    /// Locks the state (a panicked holder does not make the state unusable).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the I/O thread if it is blocked, so newly queued work goes out now.
    pub fn wake_io(&self) {
        if self.io_sleeping.swap(false, Ordering::AcqRel) {
            self.waker.wake();
        }
    }

    /// Waits for the I/O thread to report progress, at most `timeout`.
    pub fn wait<'a>(&self, g: MutexGuard<'a, State>, timeout: Duration) -> MutexGuard<'a, State> {
        self.wait_on(&self.cond, g, timeout, Wait::Any)
    }

    /// Waits on `cond` (the endpoint's, or a connection's from [`State::conds`]) as a
    /// stream reader, writer or for any progress, at most `timeout`.
    pub fn wait_on<'a>(
        &self,
        cond: &Condvar,
        mut g: MutexGuard<'a, State>,
        timeout: Duration,
        kind: Wait,
    ) -> MutexGuard<'a, State> {
        g.waiters += 1;
        match kind {
            Wait::Read => g.readers += 1,
            Wait::Write => g.writers += 1,
            Wait::Timer => g.timers += 1,
            Wait::Any | Wait::Message => {}
        }
        let (mut g, _) = cond
            .wait_timeout(g, timeout)
            .unwrap_or_else(|e| e.into_inner());
        g.waiters -= 1;
        match kind {
            Wait::Read => g.readers -= 1,
            Wait::Write => g.writers -= 1,
            Wait::Timer => g.timers -= 1,
            Wait::Any | Wait::Message => {}
        }
        g
    }
}

/// What an application thread waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Stream data to read.
    Read,
    /// Room in the stream send buffer.
    Write,
    /// Anything (events, messages, state changes).
    Any,
    /// A whole message to read: woken like [`Wait::Any`] by any progress of the endpoint,
    /// but only if its own connection has a message (or has ended).
    Message,
    /// Its own timeout, or an event (a live reader whose next message is complete and
    /// waits for its play time: later arrivals change nothing for it).
    Timer,
}

/// Starts the I/O thread for `ep` on `dp`.
pub(crate) fn spawn(
    dp: Box<dyn Datapath>,
    ep: Endpoint,
    max_mss: usize,
    accepts: Arc<AcceptSignal>,
    smoother: Option<HostSmoother>,
) -> io::Result<(Arc<Shared>, JoinHandle<()>)> {
    let shared = Arc::new(Shared {
        accepts,
        state: Mutex::new(State {
            ep,
            accept_queue: VecDeque::new(),
            listening: false,
            to_remove: Vec::new(),
            shutdown: false,
            handles: 0,
            waiters: 0,
            timers: 0,
            readers: 0,
            writers: 0,
            max_mss,
            io_done: None,
            dp_stats: DatapathStats::default(),
            conds: FxHashMap::default(),
            polled: 0,
        }),
        cond: Condvar::new(),
        io_sleeping: AtomicBool::new(false),
        waker: dp.waker()?,
    });
    let slot = max_mss.max(MIN_SLOT);
    let io = IoLoop {
        dp,
        shared: shared.clone(),
        tx_buf: vec![0; TX_DATAGRAMS * slot],
        txs: Vec::with_capacity(TX_DATAGRAMS),
        gather: Vec::with_capacity(TX_DATAGRAMS),
        slot,
        since_notify: 0,
        unnotified_since: None,
        coalesce: Coalescer::default(),
        split: Split::default(),
        drain_until: None,
        smoother,
        held: false,
        wake: Vec::new(),
        woken: Vec::new(),
        poll_wake: Vec::new(),
    };
    let handle = std::thread::Builder::new()
        .name("slipstream-io".into())
        .spawn(move || io.run())?;
    Ok((shared, handle))
}

struct IoLoop {
    dp: Box<dyn Datapath>,
    /// Connection condition variables to notify once the lock is released.
    wake: Vec<Arc<Condvar>>,
    /// The connections changed since the last notification (reused).
    woken: Vec<ConnId>,
    /// Pollers with a waiting thread that something was reported to.
    poll_wake: Vec<Arc<PollSet>>,
    shared: Arc<Shared>,
    /// Outgoing datagrams, packed back to back so that runs can go out as one GSO send.
    tx_buf: Vec<u8>,
    txs: Vec<Tx>,
    /// The batch of a gather send: each datagram's destination, its bytes in `tx_buf` (the
    /// header, or a whole control packet) and the payload it names.
    gather: Vec<(SocketAddr, usize, usize, Option<PayloadRef>)>,
    slot: usize,
    /// Datagrams handled since application threads were last woken.
    since_notify: usize,
    /// When the first of those was handled.
    unnotified_since: Option<Instant>,
    coalesce: Coalescer,
    split: Split,
    /// Set when the endpoint is done: the delay line is drained until then.
    drain_until: Option<Instant>,
    /// The process's smoother: every datagram takes a credit (see [`HostSmoother`]).
    smoother: Option<HostSmoother>,
    /// The last collection stopped for want of credit or link room: come back when the
    /// smoother says ([`HostSmoother::next_wake`]), and do not take the engine for drained.
    held: bool,
}

/// Split receives (see [`Endpoint::handle_data_owned`]): while the engine's connections carry
/// large payloads and the datapath can, each datagram's header lands in `heads` and its
/// payload in a buffer of `bufs`, which the engine may keep (giving back another): a payload
/// of 64 KiB over loopback then reaches the application without a copy of ours.
#[derive(Debug, Default)]
struct Split {
    /// Payload buffer length, from [`Endpoint::owned_payload_len`]; `None`: receive batches.
    len: Option<usize>,
    heads: Vec<[u8; SPLIT_HEAD]>,
    bufs: Vec<Vec<u8>>,
    got: Vec<RxSplit>,
    /// Where a GRO batch's first datagram is joined back together.
    joined: Vec<u8>,
}

impl Split {
    /// Follows the engine's payload length; (re)allocates the buffers when it changes.
    fn set_len(&mut self, len: Option<usize>) {
        if len == self.len {
            return;
        }
        self.len = len;
        self.got.clear();
        match len {
            Some(n) => {
                self.heads = vec![[0; SPLIT_HEAD]; SPLIT_MSGS];
                self.bufs = vec![vec![0; n]; SPLIT_MSGS];
            }
            None => {
                self.heads = Vec::new();
                self.bufs = Vec::new();
            }
        }
    }

    /// Datagrams the last split receive got.
    fn datagrams(&self) -> usize {
        self.got
            .iter()
            .map(|m| m.segment.map_or(1, |g| m.len.div_ceil(g.max(1))))
            .sum()
    }

    /// Hands what the last split receive got to the engine.
    fn handle(&mut self, ep: &mut Endpoint, now: Instant) {
        for m in &self.got {
            let at = m.at.unwrap_or(now);
            let (head, buf) = (&self.heads[m.index], &mut self.bufs[m.index]);
            let h = m.len.min(SPLIT_HEAD);
            let Some(seg) = m.segment else {
                ep.handle_data_owned(now, at, m.src, &head[..h], buf, m.len - h);
                continue;
            };
            // Several datagrams (only while the datapath turns GRO off: the socket may still
            // hold a batch it coalesced before): joined back together, then cut.
            self.joined.clear();
            self.joined.extend_from_slice(&head[..h]);
            self.joined.extend_from_slice(&buf[..m.len - h]);
            for d in self.joined.chunks(seg.max(1)) {
                ep.handle_at(now, at, m.src, d);
            }
        }
    }
}

/// Decides the receive-coalescing naps (see [`STEADY_WINDOW`]). Reads no clock.
#[derive(Debug, Default)]
struct Coalescer {
    /// When the last batch with datagrams was read.
    last_rx: Option<Instant>,
    /// Start of the open counting window and the datagrams read in it.
    window: Option<(Instant, usize)>,
    /// The last closed window counted a stream.
    steady: bool,
}

impl Coalescer {
    /// A batch of `n` datagrams (possibly none) read at `at`.
    fn on_batch(&mut self, at: Instant, n: usize) {
        if n == 0 {
            return;
        }
        if self
            .last_rx
            .is_some_and(|t| at.saturating_duration_since(t) >= STEADY_WINDOW)
        {
            // A pause: whatever comes next is counted afresh.
            self.window = None;
            self.steady = false;
        }
        self.last_rx = Some(at);
        let (start, count) = self.window.get_or_insert((at, 0));
        *count += n;
        if at.saturating_duration_since(*start) >= STEADY_WINDOW {
            self.steady = *count >= STEADY_DATAGRAMS;
            self.window = None;
        }
    }

    /// How long to sleep at `now` before a read that would wait at most `timeout`: zero
    /// unless a stream is arriving (and has not paused for a window), never past `timeout`.
    fn nap(&self, now: Instant, timeout: Duration) -> Duration {
        let flowing = self
            .last_rx
            .is_some_and(|t| now.saturating_duration_since(t) < STEADY_WINDOW);
        if self.steady && flowing {
            timeout.min(COALESCE)
        } else {
            Duration::ZERO
        }
    }
}

impl IoLoop {
    /// Whether the smoother (if any) has credit, and its link room, for one more datagram
    /// now; if not, the loop comes back when it may ([`HostSmoother::next_wake`]).
    fn credit(&mut self, now: Instant) -> bool {
        let ok = self
            .smoother
            .as_ref()
            .is_none_or(|s| s.nrt_ready_or_hold(now));
        self.held |= !ok;
        ok
    }

    /// A datagram of `len` bytes of UDP payload was taken from the engine: its credit and
    /// its time on the link below.
    fn take_credit(&self, now: Instant, len: usize) {
        if let Some(s) = &self.smoother {
            s.take_nrt(now, len + UDP_IP_HEADERS);
        }
    }

    /// Polls the engine for datagrams, packing them back to back in `tx_buf` and grouping
    /// consecutive ones of one size to one destination into runs the datapath can send as
    /// one segmentation-offload transmit (the engine emits paced data packets of the same
    /// size back to back). Returns whether the batch filled up (more may be ready).
    fn collect_transmits(&mut self, g: &mut State, now: Instant) -> bool {
        self.txs.clear();
        let max_segments = self.dp.max_segments().max(1);
        let (mut at, mut count) = (0, 0);
        while count < TX_DATAGRAMS {
            if at + self.slot > self.tx_buf.len() {
                return true;
            }
            if !self.credit(now) {
                // Data waits for credit; control packets go all the same.
                while count < TX_DATAGRAMS && at + self.slot <= self.tx_buf.len() {
                    let Some(t) =
                        g.ep.poll_transmit_control(now, &mut self.tx_buf[at..at + self.slot])
                    else {
                        return false;
                    };
                    self.take_credit(now, t.len);
                    count += 1;
                    self.txs.push(Tx::single(t.dst, at, t.len));
                    at += t.len;
                }
                return true;
            }
            let Some(t) =
                g.ep.poll_transmit(now, &mut self.tx_buf[at..at + self.slot])
            else {
                return false;
            };
            self.take_credit(now, t.len);
            count += 1;
            let extends = self.txs.last().is_some_and(|run| {
                run.dst == t.dst
                    && run.offset + run.len == at
                    && run.len % run.segment_size.max(1) == 0
                    && t.len <= run.segment_size
                    && t.len > 0
                    && run.datagrams() < max_segments
                    && run.len + t.len <= MAX_UDP_PAYLOAD
            });
            match self.txs.last_mut() {
                Some(run) if extends => run.len += t.len,
                _ => self.txs.push(Tx::single(t.dst, at, t.len)),
            }
            at += t.len;
        }
        true
    }

    /// Polls the engine for a gather send (see the module documentation): headers and
    /// control packets packed in `tx_buf`, payloads named. Returns whether the batch filled
    /// up (more may be ready).
    /// Follows the endpoint's payload length ([`Endpoint::owned_payload_len`], which changes
    /// only as connections come and go): the split buffers, and the datapath's receive mode
    /// switched before anything else is sent.
    fn follow_split(&mut self, ep: &mut Endpoint) {
        if !self.dp.splits() {
            return;
        }
        let len = ep.owned_payload_len();
        if len != self.split.len {
            self.dp.set_split(len.is_some());
            self.split.set_len(len);
        }
    }

    fn collect_gather(&mut self, g: &mut State, now: Instant) -> bool {
        self.gather.clear();
        let (mut at, mut bytes) = (0, 0);
        while self.gather.len() < TX_DATAGRAMS && bytes < GATHER_BYTES {
            if at + self.slot > self.tx_buf.len() {
                return true;
            }
            if !self.credit(now) {
                // Data waits for credit; control packets go all the same.
                while self.gather.len() < TX_DATAGRAMS && at + self.slot <= self.tx_buf.len() {
                    let Some(t) =
                        g.ep.poll_transmit_control(now, &mut self.tx_buf[at..at + self.slot])
                    else {
                        return false;
                    };
                    self.take_credit(now, t.len);
                    self.gather.push((t.dst, at, t.len, None));
                    at += t.len;
                }
                return true;
            }
            let Some((t, payload)) =
                g.ep.poll_transmit_gather(now, &mut self.tx_buf[at..at + self.slot])
            else {
                return false;
            };
            let len = t.len + payload.map_or(0, |p| p.len());
            self.take_credit(now, len);
            bytes += len;
            self.gather.push((t.dst, at, t.len, payload));
            at += t.len;
        }
        true
    }

    fn run(mut self) {
        let result = self.event_loop();
        let mut g = self.shared.lock();
        g.dp_stats = self.dp.stats();
        g.io_done = Some(result.err().map(|e| format!("I/O thread failed: {e}")));
        let conds: Vec<Arc<Condvar>> = g.conds.values().map(|w| w.cond.clone()).collect();
        // Pollers learn of it as of any end: their connections are reported.
        let mut sets: Vec<Arc<PollSet>> = Vec::new();
        for p in g.conds.values().filter_map(|w| w.poll.as_ref()) {
            p.set.report(p.token, &p.flag);
            if !sets.iter().any(|s| Arc::ptr_eq(s, &p.set)) {
                sets.push(p.set.clone());
            }
        }
        drop(g);
        self.shared.cond.notify_all();
        conds.iter().for_each(|c| c.notify_all());
        sets.iter().for_each(|s| s.notify());
        self.shared.accepts.bump();
    }

    fn event_loop(&mut self) -> io::Result<()> {
        let shared = self.shared.clone();
        let mut timeout = Some(Duration::ZERO);
        loop {
            if let Some(t) = timeout {
                let nap = self.coalesce.nap(Instant::now(), t);
                if !nap.is_zero() {
                    std::thread::sleep(nap);
                    timeout = Some(t - nap);
                }
            }
            let split = self.split.len.is_some() && self.dp.splits();
            let batch = if split {
                let sp = &mut self.split;
                self.dp
                    .recv_split(timeout, &mut sp.heads, &mut sp.bufs, &mut sp.got)?;
                RxBatch::empty()
            } else {
                self.dp.recv(timeout)?
            };
            shared.io_sleeping.store(false, Ordering::Release);

            // One time per batch: when it was read (the receiver's rate estimator shares the
            // time since the previous batch among the batch's packets; a clock read per
            // datagram would time the CPU working through the batch, not the link). Where the
            // datapath has the kernel's receive timestamp, it times the arrival for the rate
            // the receiver averages over an ACK interval.
            let read_at = Instant::now();
            let mut g = shared.lock();
            let n = batch.len() + if split { self.split.datagrams() } else { 0 };
            self.coalesce.on_batch(read_at, n);
            for (src, data, at) in batch.iter_timed() {
                g.ep.handle_at(read_at, at.unwrap_or(read_at), src, data);
            }
            if split {
                self.split.handle(&mut g.ep, read_at);
            }
            let now = Instant::now();
            let mut fired = false;
            if g.ep.poll_timeout().is_some_and(|t| t <= now) {
                g.ep.handle_timeout(now);
                fired = true;
            }

            let mut events = false;
            let mut accepted = false;
            while let Some((id, ev)) = g.ep.poll_event() {
                events = true;
                if matches!(ev, Event::Accepted | Event::Connected) {
                    // Slots must hold the negotiated packet size (header room included).
                    if let Some(c) = g.ep.conn(id) {
                        let need = c.payload_size() + 128;
                        g.max_mss = g.max_mss.max(need);
                    }
                }
                if ev == Event::Accepted {
                    if g.listening && !g.shutdown {
                        g.accept_queue.push_back(id);
                        accepted = true;
                    } else if let Some(c) = g.ep.conn(id) {
                        c.abort();
                        g.to_remove.push(id);
                    }
                }
            }
            // Before anything is sent: a new connection (a handshake response, a caller's
            // first packet) must find the socket already in the receive mode its payloads
            // need (see `Datapath::set_split`).
            self.follow_split(&mut g.ep);
            if g.max_mss > self.slot {
                // A connection with a larger MSS appeared: grow once, outside the steady state.
                self.slot = g.max_mss;
                self.tx_buf = vec![0; TX_DATAGRAMS * self.slot];
            }
            // Gather only where payloads are large: a datagram of a few hundred bytes costs
            // the kernel two small copies (header and payload) gathered, one copied here,
            // and runs of copied datagrams go out as one GSO send from one buffer. 64-byte
            // messages moved at 700,000 a second gathered (a fifth of the I/O thread in the
            // kernel's copy loop), PENDING copied.
            let gather = self.dp.gathers() && self.slot > GATHER_MIN_SLOT;
            self.held = false;
            let full = if gather {
                self.collect_gather(&mut g, now)
            } else {
                self.collect_transmits(&mut g, now)
            };
            if gather && !self.gather.is_empty() {
                // The payloads are read in place: send before anything changes the engine.
                let batch = Gathered {
                    buf: &self.tx_buf,
                    list: &self.gather,
                    ep: &g.ep,
                };
                self.dp.send_gather(&batch)?;
            }
            // Everything that may go now has been polled: all datagrams, or (held by the
            // smoother) all control packets, shutdowns included; held data waits for credit.
            let drained = !full;
            if drained && !g.to_remove.is_empty() {
                // Every pending datagram (a closing shutdown) has been polled: forget them.
                let st = &mut *g;
                for id in st.to_remove.drain(..) {
                    st.ep.remove(id);
                }
                events = true;
            }
            if events {
                // Connections removed above.
                self.follow_split(&mut g.ep);
            }
            let done = g.shutdown && g.handles == 0 && g.ep.is_empty() && drained;
            let exit = done
                && (self.dp.next_deadline().is_none()
                    || *self.drain_until.get_or_insert(now + DRAIN_LIMIT) <= now);
            g.dp_stats = self.dp.stats();

            let deadline = match (g.ep.poll_timeout(), self.dp.next_deadline()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // Held by the smoother: its next refresh brings credit.
            let deadline = match (deadline, self.smoother.as_ref().filter(|_| self.held)) {
                (d, Some(s)) => Some(d.map_or(s.next_wake(), |d| d.min(s.next_wake()))),
                (d, None) => d,
            };
            timeout = if full {
                Some(Duration::ZERO)
            } else {
                deadline.map(|d| d.saturating_duration_since(now).max(NAP))
            };
            if timeout != Some(Duration::ZERO) {
                shared.io_sleeping.store(true, Ordering::Release);
            }
            // Wake application threads when it is worth it: a stream reader or writer woken
            // for every few packets costs a context switch each and reads or writes tiny
            // pieces. Other waiters (messages, events) are woken by any progress; stream
            // readers by a batch of datagrams or once the oldest is READ_NOTIFY_DELAY old;
            // stream writers once a quarter of a send buffer is free.
            if n > 0 && self.since_notify == 0 {
                self.unnotified_since = Some(read_at);
            }
            self.since_notify += n;
            let idle = timeout != Some(Duration::ZERO);
            let others = g.waiters.saturating_sub(g.readers + g.writers + g.timers);
            let read_due = self.unnotified_since.map(|t| t + READ_NOTIFY_DELAY);
            // Pollers are told of any progress, like waiters for anything: telling one costs
            // at most one notification a loop, however many connections it reports.
            let notify = (g.waiters > 0 || g.polled > 0)
                && (events
                    || ((others > 0 || g.polled > 0)
                        && (n > 0 || fired || (idle && self.since_notify > 0)))
                    || (g.readers > 0
                        && (self.since_notify >= NOTIFY_DATAGRAMS
                            || read_due.is_some_and(|d| d <= now)))
                    || ((g.writers > 0 || g.polled > 0) && g.ep.take_writable()));
            if notify {
                // The threads of the connections something happened to, and their pollers.
                let st = &mut *g;
                self.woken.extend(st.ep.drain_woken());
                for id in self.woken.drain(..) {
                    let Some(w) = st.conds.get(&id) else {
                        continue;
                    };
                    let conn = st.ep.peek(id);
                    if w.waiting > 0 && w.concerned(conn, now) {
                        self.wake.push(w.cond.clone());
                    }
                    if let Some(p) = w.poll.as_ref().filter(|p| p.concerned(conn, now)) {
                        if p.set.report(p.token, &p.flag)
                            && !self.poll_wake.iter().any(|s| Arc::ptr_eq(s, &p.set))
                        {
                            self.poll_wake.push(p.set.clone());
                        }
                    }
                }
            }
            if !notify && g.readers > 0 && idle {
                if let Some(d) = read_due {
                    // Come back to wake the reader then.
                    let wait = d.saturating_duration_since(now);
                    timeout = Some(timeout.map_or(wait, |t| t.min(wait)));
                }
            }
            // A notification costs a system call whether anyone waits or not.
            let waiters = g.waiters > 0;
            drop(g);
            if accepted {
                shared.accepts.bump();
            }
            if notify {
                self.since_notify = 0;
                self.unnotified_since = None;
                if waiters {
                    shared.cond.notify_all();
                }
                for c in self.wake.drain(..) {
                    c.notify_all();
                }
                for p in self.poll_wake.drain(..) {
                    p.notify();
                }
            }

            if !gather && !self.txs.is_empty() {
                // Datagrams the kernel had no room for are lost; the protocol recovers them.
                self.dp.send(&self.tx_buf, &self.txs)?;
            }
            if self.dp.next_deadline().is_some_and(|d| d <= Instant::now()) {
                self.dp.service()?;
            }
            if let Some(d) = self.dp.next_deadline() {
                // Sending may have put datagrams on the delay line.
                let wait = d.saturating_duration_since(Instant::now()).max(NAP);
                timeout = Some(timeout.map_or(wait, |t| t.min(wait)));
            }
            if exit {
                return Ok(());
            }
        }
    }
}

/// A gather batch as the datapath reads it: headers from the loop's buffer, payloads from
/// the engine's send buffers (which the lock keeps unchanged for the call).
struct Gathered<'a> {
    buf: &'a [u8],
    list: &'a [(SocketAddr, usize, usize, Option<PayloadRef>)],
    ep: &'a Endpoint,
}

impl TxGather for Gathered<'_> {
    fn len(&self) -> usize {
        self.list.len()
    }

    fn get(&self, i: usize) -> (SocketAddr, &[u8], &[u8]) {
        let (dst, at, len, payload) = self.list[i];
        // Every payload named is held: the engine accounted it as sent when it was polled,
        // and only acknowledgements, timers and application operations release or move
        // send-buffer data, none of which can run between the poll and this read (both
        // under one lock hold).
        let tail = payload.and_then(|p| self.ep.payload(p));
        debug_assert!(
            payload.is_none_or(|p| tail.map(<[u8]>::len) == Some(p.len())),
            "a polled payload vanished or changed"
        );
        let tail = tail.unwrap_or(&[]);
        (dst, &self.buf[at..at + len], tail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn a_stream_is_read_in_naps_an_exchange_is_not() {
        let t0 = Instant::now();
        let mut c = Coalescer::default();
        // A request and reply every 40 µs: one datagram a read, 25 a millisecond.
        for k in 0..100 {
            c.on_batch(t0 + us(40 * k), 1);
            assert_eq!(c.nap(t0 + us(40 * k + 1), us(1000)), Duration::ZERO);
        }
        // 8 datagrams every 100 µs (the emulator's 1 Gbit/s): naps from the first
        // millisecond on, never past the read's own deadline.
        let t1 = t0 + us(10_000);
        for k in 0..10 {
            c.on_batch(t1 + us(100 * k), 8);
        }
        let now = t1 + us(1_000);
        c.on_batch(now, 8);
        assert_eq!(c.nap(now, us(5_000)), COALESCE);
        assert_eq!(c.nap(now, us(60)), us(60));
        // Empty reads change nothing.
        c.on_batch(now + us(20), 0);
        assert_eq!(c.nap(now + us(20), us(5_000)), COALESCE);
        // The stream slows to 20 a millisecond without a pause: naps until the first window
        // of the slow stream closes, none after.
        for k in 1..=21u64 {
            let t = now + us(50 * k);
            c.on_batch(t, 1);
            let want = if k < 21 { COALESCE } else { Duration::ZERO };
            assert_eq!(c.nap(t, us(5_000)), want, "after {k} slow datagrams");
        }
        // Fast again for a window, then a pause of a window: no nap, at once.
        let t3 = now + us(1_100);
        for k in 0..=10 {
            c.on_batch(t3 + us(100 * k), 8);
        }
        let last = t3 + us(1_000);
        assert_eq!(c.nap(last, us(5_000)), COALESCE);
        assert_eq!(c.nap(last + us(1_000), us(5_000)), Duration::ZERO);
    }
}
