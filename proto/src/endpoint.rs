//! An endpoint: many SRT connections on one UDP socket, demultiplexed by destination socket id,
//! plus the listener's stateless half of the handshake (SYN cookie).
//!
//! # Calling protocol
//!
//! - Input: [`Endpoint::handle`] for every datagram the socket receives, with its source
//!   address; [`Endpoint::handle_timeout`] once [`Endpoint::poll_timeout`] has passed. A
//!   runtime may instead receive each datagram's header and payload apart, the payload into
//!   a buffer of [`Endpoint::owned_payload_len`] bytes, and hand both to
//!   [`Endpoint::handle_data_owned`]: large payloads then enter the receive buffer without a
//!   copy (the runtime gets another buffer, of stale contents, back in exchange).
//! - Output: after any input, timeout or application operation, call
//!   [`Endpoint::poll_transmit`] until it returns `None`, sending each datagram; then read
//!   [`Endpoint::poll_timeout`] to know when to wake, and drain [`Endpoint::poll_event`].
//! - Connections: [`Endpoint::connect`] starts a caller; [`Endpoint::listen`] makes incoming
//!   handshakes welcome; [`Endpoint::conn`] gives access to a connection's application
//!   operations; [`Endpoint::remove`] forgets a closed connection.
//!
//! A listener keeps no state for a peer until that peer returns the cookie of the induction
//! response, so a flood of spoofed handshakes costs no memory. Every queue is bounded.
//!
//! # Cost per call
//!
//! Nothing here visits every connection. Each connection's next deadline sits in a heap; a
//! connection enters the queue of those that may have something to send, and the queue of
//! those that may have an event, when something happens to it (a datagram, a timer, an
//! application operation through [`Endpoint::conn`]), and leaves them once polled dry. So a
//! wake-up costs what is due, whatever the number of idle connections, and the send queue
//! is served a packet per connection in turn: backlogged connections share the socket
//! equally.

use crate::cc::CcRegistry;
use crate::conn::handshake::{peer_ip_field, srt_flags, HS_EXT_CONFIG, HS_EXT_HSREQ, SRT_VERSION};
use crate::conn::{Accepted, ConnConfig, Connection, Event, Mode, Pressure, OWNED_PAYLOAD_MIN};
use crate::seq::SeqNo;
use crate::share::RxShare;
use crate::wire::{
    Control, ControlBody, DataHeader, Handshake, HsExtensions, HsType, Packet, RejectReason,
    SlipstreamExt, SrtFlags, SrtHs, HEADER_LEN, HS_VERSION_SRT5, MAX_DATAGRAM, SRT_MAGIC,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::hash::Hasher;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Handle of a connection: its local SRT socket id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u32);

/// A datagram to send: `len` bytes of the buffer given to `poll_transmit`, to `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Destination.
    pub dst: SocketAddr,
    /// Length written into the buffer.
    pub len: usize,
}

/// A data packet's payload left in its connection's send buffer by
/// [`Endpoint::poll_transmit_gather`]; read it with [`Endpoint::payload`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadRef {
    conn: u32,
    seq: SeqNo,
    len: usize,
}

impl PayloadRef {
    /// The payload's length, bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Endpoint-wide settings.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    max_connections: usize,
    shard: (u32, u32),
    memory_budget: Option<usize>,
    receive_queue: Option<usize>,
    seed: u64,
    registry: CcRegistry,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            max_connections: 1024,
            shard: (0, 1),
            memory_budget: None,
            receive_queue: None,
            seed: 0x5eed,
            registry: CcRegistry::default(),
        }
    }
}

impl EndpointConfig {
    /// Most connections at once; further handshakes are rejected (`RESOURCE`). Default 1024.
    pub fn set_max_connections(&mut self, n: usize) -> &mut Self {
        self.max_connections = n.max(1);
        self
    }
    /// Most bytes all connections together may hold: their buffers (which grow toward each
    /// connection's bandwidth-delay product) and [`CONN_OVERHEAD`] each. Beyond it, buffers
    /// take no new memory (they reuse what they hold; arrivals that would need more are
    /// dropped and retransmitted) and new connections are refused (`RESOURCE`). The check is
    /// made as connections are touched, so the budget may be passed by one receive batch.
    /// Default: none (the runtime sets one from the machine's memory).
    pub fn set_memory_budget(&mut self, bytes: Option<usize>) -> &mut Self {
        self.memory_budget = bytes;
        self
    }
    /// The memory budget.
    pub fn memory_budget(&self) -> Option<usize> {
        self.memory_budget
    }
    /// Bytes the kernel queues for the endpoint's socket before it drops arrivals: the
    /// flow windows advertised to the connections receiving data stay, together, within
    /// it (see [`crate::share`]). Default: unknown (each connection's own buffer bounds
    /// its window).
    pub fn set_receive_queue(&mut self, bytes: Option<usize>) -> &mut Self {
        self.receive_queue = bytes;
        self
    }
    /// This endpoint is shard `index` of `count` sharing one address (one socket and I/O
    /// thread each): its socket ids are `index` modulo `count`, which is how datagrams are
    /// steered to it. Default: the only one.
    pub fn set_shard(&mut self, index: u32, count: u32) -> &mut Self {
        let count = count.max(1);
        self.shard = (index % count, count);
        self
    }
    /// Seed for socket ids, initial sequence numbers and the cookie secret. The runtime passes
    /// OS randomness; tests pass a fixed seed.
    pub fn set_seed(&mut self, seed: u64) -> &mut Self {
        self.seed = seed;
        self
    }
    /// The congestion controllers connections may name.
    pub fn set_registry(&mut self, r: CcRegistry) -> &mut Self {
        self.registry = r;
        self
    }
    /// The registry.
    pub fn registry(&self) -> &CcRegistry {
        &self.registry
    }
}

/// Why `connect` failed at once.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectError {
    /// The endpoint already holds `max_connections`.
    TooManyConnections,
    /// The endpoint's connections hold its whole memory budget.
    OutOfMemoryBudget,
    /// No congestion controller of that name is registered.
    UnknownCongestionControl(String),
}

impl core::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConnectError::TooManyConnections => f.write_str("connection limit reached"),
            ConnectError::OutOfMemoryBudget => {
                f.write_str("the endpoint's connections hold its whole memory budget")
            }
            ConnectError::UnknownCongestionControl(n) => {
                write!(f, "unknown congestion control '{n}'")
            }
        }
    }
}
impl std::error::Error for ConnectError {}

/// Endpoint-level counters: everything dropped before it reached a connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EndpointStats {
    /// Datagrams received.
    pub datagrams_in: u64,
    /// Datagrams sent.
    pub datagrams_out: u64,
    /// Datagrams that did not parse (truncated, malformed, oversized).
    pub malformed: u64,
    /// Packets for a socket id we do not have.
    pub unknown_socket: u64,
    /// Packets for a known socket id from the wrong address.
    pub wrong_source: u64,
    /// Conclusions with a wrong or stale cookie.
    pub bad_cookie: u64,
    /// Handshakes we did not expect (no listener, wrong type or version).
    pub handshake_ignored: u64,
    /// Handshakes rejected (encryption asked, mode mismatch, limits).
    pub rejected: u64,
    /// Of those, rejected at the connection limit.
    pub rejected_limit: u64,
    /// Of those, rejected because the connections held the memory budget.
    pub rejected_memory: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Handshake responses dropped because the response queue was full.
    pub response_overflow: u64,
    /// Connection timers handled (an ACK interval, a keepalive, pacing, a retransmission
    /// timeout...): what idle connections cost in wake-ups.
    pub timers: u64,
    /// Bytes the connections hold as last counted (see
    /// [`EndpointConfig::set_memory_budget`]).
    pub memory_held: u64,
    /// Whether the connections were over the memory budget when last counted.
    pub memory_pressure: bool,
}

impl EndpointStats {
    /// Adds `o`'s counts (the shards of one address); pressure if either is under it.
    pub fn merge(&mut self, o: &EndpointStats) {
        self.datagrams_in += o.datagrams_in;
        self.datagrams_out += o.datagrams_out;
        self.malformed += o.malformed;
        self.unknown_socket += o.unknown_socket;
        self.wrong_source += o.wrong_source;
        self.bad_cookie += o.bad_cookie;
        self.handshake_ignored += o.handshake_ignored;
        self.rejected += o.rejected;
        self.rejected_limit += o.rejected_limit;
        self.rejected_memory += o.rejected_memory;
        self.accepted += o.accepted;
        self.response_overflow += o.response_overflow;
        self.timers += o.timers;
        self.memory_held += o.memory_held;
        self.memory_pressure |= o.memory_pressure;
    }
}

/// What a connection is counted as holding beside its buffers, against the memory budget:
/// its state, its loss lists, the endpoint's tables (about 12 KiB measured, rounded up).
pub const CONN_OVERHEAD: usize = 16 << 10;

/// Pages given back that an endpoint keeps for owned payloads ([`Endpoint::give_page`]):
/// 16 MB of 64 KiB pages, more than readers take out at once (a file receiver takes up to
/// a megabyte or so, `bench conns` 16 pages a connection).
pub const PAGE_POOL: usize = 256;
/// Pages given back and not taken or given for this long are freed.
pub const PAGES_IDLE: Duration = Duration::from_secs(1);
/// Handshake responses waiting to be sent: a burst of callers arrives in one receive batch.
const RESPONSE_QUEUE: usize = 1024;
const COOKIE_BUCKET: Duration = Duration::from_secs(60);

/// What the endpoint knows of a connection's scheduling, beside it in [`Endpoint::sched`].
#[derive(Debug, Clone, Copy, Default)]
struct Sched {
    /// The deadline the timer heap holds for it (entries that differ are stale).
    deadline: Option<Instant>,
    /// Its deadline may have changed: in [`Endpoint::dirty`].
    dirty: bool,
    /// In [`Endpoint::sendq`].
    sending: bool,
    /// In [`Endpoint::eventq`].
    eventful: bool,
    /// In [`Endpoint::woken`].
    woken: bool,
    /// Its receive slot size, as counted in [`Endpoint::slot_sizes`].
    slot: usize,
    /// Its buffers' memory, as counted in [`Endpoint::held`].
    mem: usize,
    /// The last [`RxShare`] window it received data in.
    rx_epoch: u32,
}

/// Many connections on one socket. See the module docs for the calling protocol.
#[derive(Debug)]
pub struct Endpoint {
    /// Shares of the socket's receive queue among the connections receiving.
    rx_share: RxShare,
    cfg: EndpointConfig,
    start: Instant,
    conns: Vec<Connection>,
    /// Beside `conns`, index for index.
    sched: Vec<Sched>,
    /// Deadlines and the connections they belong to, soonest first; an entry whose deadline
    /// is no longer its connection's is dropped when it comes up.
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
    /// Connections whose deadline must be read again.
    dirty: Vec<u32>,
    /// Connections that may have something to send, served in turn.
    sendq: VecDeque<u32>,
    /// Connections that may have events.
    eventq: VecDeque<u32>,
    /// Connections touched since the last [`Endpoint::drain_woken`].
    woken: Vec<u32>,
    /// How many connections have each receive slot size (for `owned_payload_len`).
    slot_sizes: BTreeMap<usize, usize>,
    /// A connection's send buffer became at least a quarter free since the last
    /// [`Endpoint::take_writable`].
    writable: bool,
    /// Bytes the connections' buffers hold, as last counted.
    held: usize,
    /// Shared with every connection's buffers: set while over the budget.
    pressure: Pressure,

    /// Socket id to index in `conns`. Hashed with Fx, not SipHash: the ids are drawn by
    /// this endpoint at random, so a peer cannot pick colliding ones, and the index is read
    /// for every datagram in and out.
    index: FxHashMap<u32, usize>,
    by_peer: HashMap<(SocketAddr, u32), u32>,
    listener: Option<ConnConfig>,
    rng: SmallRng,
    secret: (u64, u64),
    responses: VecDeque<(SocketAddr, u32, Handshake)>,
    stats: EndpointStats,
    /// Where [`Endpoint::handle_data_owned`] joins a datagram that is not a data packet.
    joined: Vec<u8>,
    /// Pages readers gave back, most recent last: the next owned payload kept takes the
    /// place of one ([`Endpoint::give_page`]).
    pages: Vec<Vec<u8>>,
    /// When a page of `pages` was last taken or given (they are freed a second later).
    pages_at: Option<Instant>,
    /// When an owned payload last arrived, and its buffer's length: pages of that length go
    /// to `pages` while they keep arriving.
    owned_at: Option<(Instant, usize)>,
}

impl Endpoint {
    /// A new endpoint; `now` anchors the cookie clock.
    pub fn new(cfg: EndpointConfig, now: Instant) -> Self {
        let mut rng = SmallRng::seed_from_u64(cfg.seed);
        let secret = (rng.gen(), rng.gen());
        let rx_queue = cfg.receive_queue;
        Endpoint {
            cfg,
            start: now,
            conns: Vec::new(),
            sched: Vec::new(),
            timers: BinaryHeap::new(),
            dirty: Vec::new(),
            sendq: VecDeque::new(),
            eventq: VecDeque::new(),
            woken: Vec::new(),
            slot_sizes: BTreeMap::new(),
            writable: false,
            held: 0,
            pressure: Pressure::default(),
            rx_share: RxShare::new(rx_queue),

            index: FxHashMap::default(),
            by_peer: HashMap::new(),
            listener: None,
            rng,
            secret,
            responses: VecDeque::new(),
            stats: EndpointStats::default(),
            joined: Vec::new(),
            pages: Vec::new(),
            pages_at: None,
            owned_at: None,
        }
    }

    /// Accept incoming connections with this configuration (`None` stops accepting).
    pub fn listen(&mut self, cfg: Option<ConnConfig>) {
        self.listener = cfg;
    }

    /// Starts a caller connection to `remote`.
    pub fn connect(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        cfg: ConnConfig,
    ) -> Result<ConnId, ConnectError> {
        if self.conns.len() >= self.cfg.max_connections {
            return Err(ConnectError::TooManyConnections);
        }
        if self.over_budget() {
            return Err(ConnectError::OutOfMemoryBudget);
        }
        let cc = self
            .cfg
            .registry
            .build(cfg.cc())
            .ok_or_else(|| ConnectError::UnknownCongestionControl(cfg.cc().to_string()))?;
        let id = self.new_socket_id();
        let isn = cfg
            .initial_seq
            .unwrap_or_else(|| SeqNo::new(self.rng.gen()));
        self.insert(Connection::connect(now, id, remote, cfg, cc, isn));
        Ok(ConnId(id))
    }

    fn new_socket_id(&mut self) -> u32 {
        let (k, n) = self.cfg.shard;
        loop {
            let id = self.rng.gen_range(n..0x3FFF_FFFF);
            let id = id - id % n + k;
            if id != 0 && !self.index.contains_key(&id) {
                return id;
            }
        }
    }

    /// Whether the connections hold the whole memory budget (one more would pass it).
    fn over_budget(&mut self) -> bool {
        self.settle();
        self.cfg.memory_budget.is_some_and(|b| {
            self.held + self.pages_held() + (self.conns.len() + 1) * CONN_OVERHEAD > b
        })
    }

    fn insert(&mut self, mut c: Connection) {
        c.set_pressure(self.pressure.clone());
        c.set_timer_epoch(self.start);
        let i = self.conns.len();
        self.index.insert(c.local_id(), i);
        let slot = c.recv_slot_size();
        *self.slot_sizes.entry(slot).or_default() += 1;
        self.conns.push(c);
        self.sched.push(Sched {
            slot,
            ..Sched::default()
        });
        self.touch(i);
    }

    /// Something happened to connection `i`: it may have datagrams or events, and its
    /// deadline may have moved.
    fn touch(&mut self, i: usize) {
        let id = self.conns[i].local_id();
        let s = &mut self.sched[i];
        if !s.sending {
            s.sending = true;
            self.sendq.push_back(id);
        }
        self.touch_sent(i);
    }

    /// Connection `i` has been polled for a datagram: its deadline may have moved, and it
    /// may have an event (its end) for the application.
    fn touch_sent(&mut self, i: usize) {
        let id = self.conns[i].local_id();
        let s = &mut self.sched[i];
        if !s.dirty {
            s.dirty = true;
            self.dirty.push(id);
        }
        if !s.eventful {
            s.eventful = true;
            self.eventq.push_back(id);
        }
        if !s.woken {
            s.woken = true;
            self.woken.push(id);
        }
    }

    /// The connections something happened to (a datagram, a timer, an application
    /// operation) since the last call, each once: a runtime wakes the application threads
    /// waiting on those, not every thread.
    pub fn drain_woken(&mut self) -> impl Iterator<Item = ConnId> + '_ {
        let (index, sched) = (&self.index, &mut self.sched);
        self.woken.drain(..).map(move |id| {
            if let Some(&i) = index.get(&id) {
                sched[i].woken = false;
            }
            ConnId(id)
        })
    }

    /// Reads again the deadlines that may have moved (and what else a change may have
    /// changed: the receive slot size, a send buffer's free room).
    fn settle(&mut self) {
        while let Some(id) = self.dirty.pop() {
            let Some(&i) = self.index.get(&id) else {
                continue;
            };
            let c = &self.conns[i];
            let s = &mut self.sched[i];
            s.dirty = false;
            // A connection waiting its turn to send is polled then: its pacing needs no timer.
            let d = if s.sending {
                c.poll_timeout_queued()
            } else {
                c.poll_timeout()
            };
            if d != s.deadline {
                s.deadline = d;
                if let Some(t) = d {
                    self.timers.push(Reverse((t, id)));
                }
            }
            let slot = c.recv_slot_size();
            if slot != s.slot {
                let old = std::mem::replace(&mut s.slot, slot);
                Self::count_slot(&mut self.slot_sizes, old, false);
                Self::count_slot(&mut self.slot_sizes, slot, true);
            }
            if c.has_room() {
                self.writable = true;
            }
            let mem = c.buffer_memory();
            self.held = self.held + mem - std::mem::replace(&mut s.mem, mem);
        }
        if let Some(b) = self.cfg.memory_budget {
            let over = self.held + self.pages_held() + self.conns.len() * CONN_OVERHEAD > b;
            if over {
                // Spare pages first: what is received needs the memory more.
                self.pages = Vec::new();
            }
            if over != self.pressure.on() {
                self.pressure.set(over);
            }
        }
        // Stale entries are dropped as they come up; should they pile up (deadlines that
        // keep moving later), the heap is rebuilt from the live ones.
        if self.timers.len() > 2 * self.conns.len() + 64 {
            let live = self
                .sched
                .iter()
                .zip(&self.conns)
                .filter_map(|(s, c)| s.deadline.map(|t| Reverse((t, c.local_id()))));
            self.timers = live.collect();
        }
    }

    fn count_slot(sizes: &mut BTreeMap<usize, usize>, slot: usize, add: bool) {
        if add {
            *sizes.entry(slot).or_default() += 1;
        } else if let Some(n) = sizes.get_mut(&slot) {
            *n -= 1;
            if *n == 0 {
                sizes.remove(&slot);
            }
        }
    }

    /// The connection `id`, for application operations (which may queue data or change its
    /// timers: the endpoint looks at it again).
    pub fn conn(&mut self, id: ConnId) -> Option<&mut Connection> {
        let i = *self.index.get(&id.0)?;
        self.touch(i);
        self.conns.get_mut(i)
    }

    /// Connection `id`, to look at (unlike [`Endpoint::conn`], this marks nothing as
    /// changed: a runtime uses it to decide whom a change concerns).
    pub fn peek(&self, id: ConnId) -> Option<&Connection> {
        self.conns.get(*self.index.get(&id.0)?)
    }

    /// Whether a connection's send buffer has had at least a quarter of its capacity free
    /// since the last call (a runtime wakes blocked stream writers then).
    pub fn take_writable(&mut self) -> bool {
        self.settle();
        std::mem::take(&mut self.writable)
    }

    /// Forgets a connection (closed or not: an open one is aborted first).
    pub fn remove(&mut self, id: ConnId) {
        let Some(i) = self.index.remove(&id.0) else {
            return;
        };
        let c = self.conns.swap_remove(i);
        let s = self.sched.swap_remove(i);
        Self::count_slot(&mut self.slot_sizes, s.slot, false);
        self.held -= s.mem;
        self.by_peer.remove(&(c.peer_addr(), c.peer_id()));
        if let Some(moved) = self.conns.get(i) {
            self.index.insert(moved.local_id(), i);
        }
    }

    /// Connections held.
    pub fn len(&self) -> usize {
        self.conns.len()
    }
    /// True when no connection is held.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }
    /// Ids of all connections.
    pub fn ids(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.conns.iter().map(|c| ConnId(c.local_id()))
    }
    /// All connections, read-only.
    pub fn connections(&self) -> impl Iterator<Item = &Connection> + '_ {
        self.conns.iter()
    }
    /// Endpoint counters.
    pub fn stats(&self) -> EndpointStats {
        let mut s = self.stats;
        s.memory_held = (self.held + self.conns.len() * CONN_OVERHEAD) as u64;
        s.memory_pressure = self.pressure.on();
        s
    }

    /// Processes one received datagram from `remote`.
    pub fn handle(&mut self, now: Instant, remote: SocketAddr, datagram: &[u8]) {
        self.handle_at(now, now, remote, datagram);
    }

    /// [`handle`](Self::handle) for a datagram the caller knows arrived at `received` (a
    /// kernel receive timestamp, at most `now`). The receive time only times data arrivals for
    /// the receiving rate the receiver averages over each ACK interval and reports in full
    /// ACKs, which the sender's rate controller samples; everything else happens at `now`. A
    /// runtime that reads datagrams in batches stamps them better this way than with the time
    /// of the read, which includes however long its thread waited to run.
    pub fn handle_at(
        &mut self,
        now: Instant,
        received: Instant,
        remote: SocketAddr,
        datagram: &[u8],
    ) {
        self.stats.datagrams_in += 1;
        let pkt = match Packet::parse(datagram) {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed += 1;
                return;
            }
        };
        let dst = match &pkt {
            Packet::Data(h, _) => h.dst_socket,
            Packet::Control(c) => c.dst_socket,
        };
        if dst == 0 {
            match &pkt {
                Packet::Control(Control {
                    body: ControlBody::Handshake(hs),
                    timestamp,
                    ..
                }) => self.on_listener_handshake(now, remote, *timestamp, hs),
                _ => self.stats.unknown_socket += 1,
            }
            return;
        }
        let Some(i) = self.conn_for(dst, remote) else {
            return;
        };
        if let Packet::Data(..) = pkt {
            self.share_window(now, received, i);
        }
        let c = &mut self.conns[i];
        let was_connecting = c.peer_id() == 0;
        c.handle_packet_at(now, received.min(now), &pkt);
        if was_connecting && c.peer_id() != 0 {
            self.by_peer.insert((remote, c.peer_id()), dst);
        }
        self.touch(i);
    }

    /// The payload length of receive buffers for [`Endpoint::handle_data_owned`]: the
    /// largest receive slot of the connections ([`Connection::recv_slot_size`]), if it is at
    /// least [`OWNED_PAYLOAD_MIN`] (smaller payloads are copied; a runtime reads them the
    /// usual way, in batches). A runtime should not let the kernel coalesce datagrams (GRO)
    /// into buffers of this length: a batch would not fit.
    pub fn owned_payload_len(&mut self) -> Option<usize> {
        self.settle();
        let max = self.slot_sizes.keys().next_back().copied();
        max.filter(|&n| n >= OWNED_PAYLOAD_MIN)
    }

    /// Gives back a page a reader of connection `id` took out ([`Connection::recv_page`])
    /// for reuse. While owned payloads of its length arrive ([`Endpoint::handle_data_owned`],
    /// in the last second), it goes to the endpoint, and the next one any connection keeps
    /// leaves in its place the page given back last: a page just read is still in cache,
    /// where a receive into it writes faster. With a spare of each connection's own, 1,000
    /// streams over loopback wrote into pages given back tens of milliseconds before, and
    /// moved 23 Gbit/s against 27-28 (its listener's resident memory 91-131 MB against
    /// 45-48). The endpoint keeps at most [`PAGE_POOL`], none under memory pressure, and
    /// frees them a second after the last was given or taken ([`Endpoint::handle_timeout`]).
    /// Otherwise (payloads copied into the buffer: smaller packets, or a datapath that does
    /// not split receives) the page goes to the connection's own spares, where its next
    /// packets are copied.
    pub fn give_page(&mut self, now: Instant, id: ConnId, page: Vec<u8>) {
        let owned = self.owned_at.is_some_and(|(t, len)| {
            len == page.len() && now.saturating_duration_since(t) < PAGES_IDLE
        });
        if !owned {
            if let Some(c) = self.conn(id) {
                c.give_page(page);
            }
            return;
        }
        if self.pages.len() < PAGE_POOL && !self.pressure.on() {
            self.pages.push(page);
            self.pages_at = Some(now);
        }
    }

    /// Pages given back and kept ([`Endpoint::give_page`]), bytes (they are of one length,
    /// but for a few left from before the length changed).
    pub fn pages_held(&self) -> usize {
        self.pages.first().map_or(0, Vec::len) * self.pages.len()
    }

    /// [`handle_at`](Self::handle_at) for a datagram received in two parts: its first
    /// [`HEADER_LEN`] bytes in `head` and the rest in the first `len` bytes of `payload`, a
    /// buffer the caller owns. When it is a data packet and `payload` is as long as a slot of
    /// its connection's receive buffer ([`Connection::recv_slot_size`], see
    /// [`Endpoint::owned_payload_len`]), the connection keeps `payload` and leaves in its
    /// place a buffer of the same length (stale contents) for the caller's next receive: the
    /// payload is never copied. Anything else is joined and handled as `handle_at` would.
    pub fn handle_data_owned(
        &mut self,
        now: Instant,
        received: Instant,
        remote: SocketAddr,
        head: &[u8],
        payload: &mut Vec<u8>,
        len: usize,
    ) {
        let len = len.min(payload.len());
        let data =
            head.len() == HEADER_LEN && head[0] & 0x80 == 0 && HEADER_LEN + len <= MAX_DATAGRAM;
        let hdr = if data {
            DataHeader::parse(head).ok()
        } else {
            None
        };
        let Some(h) = hdr else {
            let mut joined = std::mem::take(&mut self.joined);
            joined.clear();
            joined.extend_from_slice(head);
            joined.extend_from_slice(&payload[..len]);
            self.handle_at(now, received, remote, &joined);
            self.joined = joined;
            return;
        };
        self.stats.datagrams_in += 1;
        let Some(i) = self.conn_for(h.dst_socket, remote) else {
            return;
        };
        self.share_window(now, received, i);
        self.owned_at = Some((now, payload.len()));
        let mut offer = self.pages.pop();
        if offer.is_some() {
            self.pages_at = Some(now);
        }
        self.conns[i].handle_data_owned(now, received.min(now), &h, payload, len, &mut offer);
        // Not taken (a connection whose packets are smaller, or not receiving): kept for the
        // next, unless of another length than this payload's buffer.
        self.pages
            .extend(offer.filter(|p| p.len() == payload.len()));
        self.touch(i);
    }

    /// Connection `i` receives a data packet that arrived at `received`: it may advertise
    /// its share of the socket's receive queue at most.
    fn share_window(&mut self, now: Instant, received: Instant, i: usize) {
        let c = &mut self.conns[i];
        let slot = c.recv_slot_size();
        let wait = now.saturating_duration_since(received);
        let share = self
            .rx_share
            .on_data(now, wait, &mut self.sched[i].rx_epoch, slot);
        c.set_window_share(share);
    }

    /// The index of connection `dst` if `remote` is its peer; counts why not otherwise.
    fn conn_for(&mut self, dst: u32, remote: SocketAddr) -> Option<usize> {
        let Some(&i) = self.index.get(&dst) else {
            self.stats.unknown_socket += 1;
            return None;
        };
        if self.conns[i].peer_addr() != remote {
            self.stats.wrong_source += 1;
            return None;
        }
        Some(i)
    }

    /// Processes the timers that have expired.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.settle();
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(&i) = self.index.get(&id) else {
                continue;
            };
            if self.sched[i].deadline != Some(t) {
                continue;
            }
            self.sched[i].deadline = None;
            let c = &mut self.conns[i];
            let due = if self.sched[i].sending {
                c.poll_timeout_queued()
            } else {
                c.poll_timeout()
            };
            if due.is_some_and(|d| d <= now) {
                c.handle_timeout(now);
                self.stats.timers += 1;
            }
            self.touch(i);
        }
        // Pages given back and not wanted for a second: their memory goes back, as an idle
        // connection's buffers do (each connection's keepalive timer comes by every second).
        if self
            .pages_at
            .is_some_and(|t| now.saturating_duration_since(t) >= PAGES_IDLE)
        {
            self.pages = Vec::new();
            self.pages_at = None;
        }
    }

    /// The earliest deadline of any connection, or of freeing the pages given back.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.settle();
        // Pages given back are freed on time even with no connection left.
        let pages = self.pages_at.map(|t| t + PAGES_IDLE);
        while let Some(&Reverse((t, id))) = self.timers.peek() {
            let live = self
                .index
                .get(&id)
                .is_some_and(|&i| self.sched[i].deadline == Some(t));
            if live {
                return Some(pages.map_or(t, |p| p.min(t)));
            }
            self.timers.pop();
        }
        pages
    }

    /// Writes the next datagram into `buf` (at least 1500 bytes, or the largest MSS in use).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.poll_transmit_inner(now, buf, false).map(|(t, _)| t)
    }

    /// Like [`Endpoint::poll_transmit`], but a data packet's payload is not copied into
    /// `buf`: only its header is (the [`Transmit`] length counts the header), and the
    /// payload is named by the [`PayloadRef`], to be sent right behind the header by a
    /// gather send. Read every payload with [`Endpoint::payload`] after polling and before
    /// anything else changes the endpoint (handling datagrams or timers, application
    /// operations, removing connections).
    pub fn poll_transmit_gather(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<(Transmit, Option<PayloadRef>)> {
        self.poll_transmit_inner(now, buf, true)
    }

    /// The payload a [`PayloadRef`] names, while its connection's send buffer holds it.
    pub fn payload(&self, r: PayloadRef) -> Option<&[u8]> {
        let i = *self.index.get(&r.conn)?;
        self.conns.get(i)?.payload(r.seq)
    }

    /// Like [`Endpoint::poll_transmit`], but control packets only (handshake answers, and
    /// each connection's acknowledgements, loss reports, keepalives, shutdowns): what a
    /// sender holding data back (a traffic smoother without credit) still sends, so that its
    /// connections stay alive. Connections waiting to send data keep their turn.
    pub fn poll_transmit_control(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        if let Some(t) = self.poll_response(now, buf) {
            return Some(t);
        }
        for k in 0..self.sendq.len() {
            let Some(&i) = self.sendq.get(k).and_then(|id| self.index.get(id)) else {
                continue;
            };
            let c = &mut self.conns[i];
            if let Some(len) = c.poll_transmit_control(now, buf) {
                let dst = c.peer_addr();
                self.touch_sent(i);
                self.stats.datagrams_out += 1;
                return Some(Transmit { dst, len });
            }
        }
        None
    }

    /// The next queued handshake answer of the listener, if any.
    fn poll_response(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        while let Some((dst, sock, hs)) = self.responses.pop_front() {
            let ts = now.saturating_duration_since(self.start).as_micros() as u32;
            let ctl = Control {
                timestamp: ts,
                dst_socket: sock,
                body: ControlBody::Handshake(hs),
            };
            if let Some(len) = ctl.emit(buf) {
                self.stats.datagrams_out += 1;
                return Some(Transmit { dst, len });
            }
        }
        None
    }

    fn poll_transmit_inner(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        gather: bool,
    ) -> Option<(Transmit, Option<PayloadRef>)> {
        if let Some(t) = self.poll_response(now, buf) {
            return Some((t, None));
        }
        // A packet from each connection in turn: backlogged connections share equally.
        for _ in 0..self.sendq.len() {
            let id = self.sendq.pop_front()?;
            let Some(&i) = self.index.get(&id) else {
                continue;
            };
            let c = &mut self.conns[i];
            let polled = if gather {
                c.poll_transmit_gather(now, buf)
            } else {
                c.poll_transmit(now, buf).map(|n| (n, None))
            };
            let out = polled.map(|(len, seq)| {
                let payload = seq.map(|(seq, len)| PayloadRef {
                    conn: c.local_id(),
                    seq,
                    len,
                });
                (
                    Transmit {
                        dst: c.peer_addr(),
                        len,
                    },
                    payload,
                )
            });
            self.touch_sent(i);
            if out.is_some() {
                self.sendq.push_back(id);
                self.stats.datagrams_out += 1;
                return out;
            }
            self.sched[i].sending = false;
        }
        None
    }

    /// The next connection event.
    pub fn poll_event(&mut self) -> Option<(ConnId, Event)> {
        while let Some(&id) = self.eventq.front() {
            if let Some(&i) = self.index.get(&id) {
                if let Some(e) = self.conns[i].poll_event() {
                    return Some((ConnId(id), e));
                }
                self.sched[i].eventful = false;
            }
            self.eventq.pop_front();
        }
        None
    }

    // ---- listener ----

    fn cookie(&self, remote: SocketAddr, bucket: u64) -> u32 {
        let mut h = siphasher::sip::SipHasher13::new_with_keys(self.secret.0, self.secret.1);
        match remote {
            SocketAddr::V4(a) => h.write(&a.ip().octets()),
            SocketAddr::V6(a) => h.write(&a.ip().octets()),
        }
        h.write_u16(remote.port());
        h.write_u64(bucket);
        h.finish() as u32
    }

    fn bucket(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_secs() / COOKIE_BUCKET.as_secs()
    }

    fn respond(&mut self, remote: SocketAddr, dst: u32, hs: Handshake) {
        if self.responses.len() >= RESPONSE_QUEUE {
            self.stats.response_overflow += 1;
            return;
        }
        self.responses.push_back((remote, dst, hs));
    }

    fn reject(&mut self, remote: SocketAddr, req: &Handshake, reason: RejectReason) {
        self.stats.rejected += 1;
        let mut rsp = req.clone();
        rsp.hs_type = HsType::Reject(reason);
        rsp.ext = HsExtensions::default();
        rsp.extension_field = 0;
        rsp.socket_id = 0;
        self.respond(remote, req.socket_id, rsp);
    }

    fn on_listener_handshake(&mut self, now: Instant, remote: SocketAddr, ts: u32, hs: &Handshake) {
        let Some(lcfg) = self.listener.clone() else {
            self.stats.handshake_ignored += 1;
            return;
        };
        match hs.hs_type {
            HsType::Induction => {
                let cookie = self.cookie(remote, self.bucket(now));
                let rsp = Handshake {
                    version: HS_VERSION_SRT5,
                    encryption: 0,
                    extension_field: SRT_MAGIC,
                    initial_seq: hs.initial_seq,
                    mss: hs.mss,
                    flow_window: hs.flow_window,
                    hs_type: HsType::Induction,
                    socket_id: 0,
                    cookie,
                    peer_ip: peer_ip_field(remote),
                    ext: HsExtensions::default(),
                };
                self.respond(remote, hs.socket_id, rsp);
            }
            HsType::Conclusion => self.on_conclusion(now, remote, ts, hs, lcfg),
            _ => self.stats.handshake_ignored += 1,
        }
    }

    fn on_conclusion(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        ts: u32,
        hs: &Handshake,
        lcfg: ConnConfig,
    ) {
        let b = self.bucket(now);
        if hs.cookie != self.cookie(remote, b)
            && (b == 0 || hs.cookie != self.cookie(remote, b - 1))
        {
            self.stats.bad_cookie += 1;
            return;
        }
        if let Some(&id) = self.by_peer.get(&(remote, hs.socket_id)) {
            if let Some(c) = self.conn(ConnId(id)) {
                c.resend_handshake();
            }
            return;
        }
        if hs.version != HS_VERSION_SRT5 {
            return self.reject(remote, hs, RejectReason::VERSION);
        }
        if hs.ext.kmreq || hs.encryption != 0 {
            // Encryption is not supported yet: say so clearly instead of timing out.
            return self.reject(remote, hs, RejectReason::UNSECURE);
        }
        let Some(req) = hs.ext.hsreq else {
            return self.reject(remote, hs, RejectReason::ROGUE);
        };
        let stream = req.flags.has(SrtFlags::STREAM);
        if stream != (lcfg.mode() == Mode::File) {
            return self.reject(remote, hs, RejectReason::MESSAGE_API);
        }
        let peer_live = hs.ext.congestion.as_deref().is_none_or(|c| c == b"live");
        if peer_live != (lcfg.mode() == Mode::Live) {
            return self.reject(remote, hs, RejectReason::CONGESTION);
        }
        if self.conns.len() >= self.cfg.max_connections {
            self.stats.rejected_limit += 1;
            return self.reject(remote, hs, RejectReason::RESOURCE);
        }
        if self.over_budget() {
            self.stats.rejected_memory += 1;
            return self.reject(remote, hs, RejectReason::RESOURCE);
        }
        let Some(cc) = self.cfg.registry.build(lcfg.cc()) else {
            return self.reject(remote, hs, RejectReason::CONGESTION);
        };
        let local_id = self.new_socket_id();
        let mut cfg = lcfg;
        // Without an explicit limit, accept the caller's MSS: it comes from its kernel's path
        // MTU toward us (libsrt callers propose 1500).
        // Live and message modes keep their own (1500 unless set): live peers expect at most
        // 1456-byte payloads, and their buffers count packets, a message or more each.
        let limit = if cfg.mss_explicit || cfg.mode() != Mode::File {
            cfg.mss
        } else {
            65_535
        };
        let mss = limit.min(hs.mss).max(76);
        cfg.mss = mss;
        // Each direction plays out at the larger of its receiver's latency and what its sender
        // asks of it (HSREQ: the caller's receiving latency, then what it asks of us).
        let mut latency_us = cfg.latency.as_micros() as u64;
        let mut snd_latency_us = cfg.peer_latency().as_micros() as u64;
        if cfg.mode() == Mode::Live {
            latency_us = latency_us.max(u64::from(req.send_tsbpd_delay_ms) * 1000);
            snd_latency_us = snd_latency_us.max(u64::from(req.recv_tsbpd_delay_ms) * 1000);
        }
        let ms = |us: u64| (us / 1000).min(u64::from(u16::MAX)) as u16;
        let file_ext = match (&hs.ext.slipstream, cfg.file_digest) {
            (Some(s), true) => SlipstreamExt::agreed(SlipstreamExt::FILE_FLAGS, s.flags),
            _ => 0,
        };
        let mut ext = HsExtensions {
            hsrsp: Some(SrtHs {
                version: SRT_VERSION,
                flags: srt_flags(cfg.mode()),
                recv_tsbpd_delay_ms: ms(latency_us),
                send_tsbpd_delay_ms: ms(snd_latency_us),
            }),
            ..HsExtensions::default()
        };
        let mut ext_field = HS_EXT_HSREQ;
        if cfg.mode() != Mode::Live {
            // libsrt callers in file mode insist that the listener declares "file" too.
            ext.congestion = Some(b"file".to_vec());
            ext_field |= HS_EXT_CONFIG;
        }
        if file_ext != 0 {
            ext.slipstream = Some(SlipstreamExt {
                version: 1,
                flags: file_ext,
            });
            ext_field |= HS_EXT_CONFIG;
        }
        let payload = crate::conn::payload_size(mss, remote);
        let response = Handshake {
            version: HS_VERSION_SRT5,
            encryption: 0,
            extension_field: ext_field,
            initial_seq: hs.initial_seq,
            mss,
            // What the connection's receive buffer will start with (as its own handshakes
            // say), but no more than its share of the socket's queue were every connection
            // receiving (see `RxShare::idle_window`).
            flow_window: (cfg.recv_buffer_pkts(payload).0 as u32).min(
                self.rx_share
                    .idle_window(payload + crate::wire::HEADER_LEN, self.conns.len() + 1),
            ),
            hs_type: HsType::Conclusion,
            socket_id: local_id,
            cookie: hs.cookie,
            peer_ip: peer_ip_field(remote),
            ext,
        };
        let acc = Accepted {
            peer_id: hs.socket_id,
            isn: hs.initial_seq,
            mss,
            peer_window: hs.flow_window,
            latency_us,
            snd_latency_us,
            peer_stream_id: hs.ext.stream_id.clone(),
            file_ext,
            peer_ts: ts,
            response,
        };
        let conn = Connection::accept(now, local_id, remote, cfg, cc, acc);
        self.by_peer.insert((remote, hs.socket_id), local_id);
        self.insert(conn);
        self.stats.accepted += 1;
    }
}
