//! Asynchronous datagrams: plain UDP (no reliability) with Asynchronous-UDP semantics.
//!
//! A send or receive is *posted* with a buffer from the socket's pool and returns at once
//! with a [`Token`]; the buffer belongs to the stack until the operation's [`Completion`] is
//! reported ([`AsyncSocket::poll_completions`], [`AsyncSocket::wait`]), which hands the buffer
//! back. Nothing is copied in user space, and steady-state operation allocates nothing.
//!
//! # Calling protocol
//!
//! - Buffers: [`AsyncSocket::claim`] takes a free [`Buf`] from the pool (`None` when every
//!   buffer is posted or held: poll completions to get some back). Write into it in place
//!   (`buf.as_mut()`); dropping a `Buf` returns it to the pool.
//! - Send: [`AsyncSocket::commit`] (alias [`AsyncSocket::post_send`]) queues the first `len`
//!   bytes for `dst`. Consecutive sends of the same length to the same destination are
//!   gathered into one GSO send (one `SENDMSG`/`SENDMSG_ZC` with an iovec per buffer and a
//!   `UDP_SEGMENT` control message, up to 64 datagrams and 64 KiB). **Submission to the kernel
//!   happens when batches fill (every couple of full operations), or on
//!   [`AsyncSocket::flush`], [`AsyncSocket::poll_completions`] and [`AsyncSocket::wait`]**: a
//!   sender that posts and then stops must call one of those.
//! - In flight: at most [`AsyncOptions::max_inflight`] send operations are with the kernel;
//!   further posts wait, in order, in an overflow queue and move up as operations complete
//!   (the two-level queue of E-UDP). The queue cannot grow without bound: each entry holds a
//!   pool buffer.
//! - Receive: [`AsyncSocket::post_recv`] gives a buffer to the kernel ahead of time; a
//!   datagram is written straight into it. Datagrams arriving while nothing is posted land in
//!   a pre-allocated reserve of [`AsyncOptions::reserve`] buffers and complete the next post at
//!   once (the posted buffer takes the reserve buffer's place: a swap, no copy). When the
//!   reserve is used up the kernel's socket queue holds datagrams, and what it drops is
//!   counted ([`AsyncStats::kernel_drops`], from `SO_RXQ_OVFL`, reported with the next
//!   datagram received).
//! - Engines: io_uring when the kernel allows it ([`Engine::Uring`]), else a portable socket
//!   ([`Engine::Portable`]: sends complete immediately, `copied = true`; receives are read
//!   when polled). [`AsyncStats::engine`] says which one runs.

mod bench;
mod portable;
mod uring;

pub use crate::sys::uring::pool::Buf;
pub use crate::sys::uring::UringCaps;
pub use bench::RecvCount;

use serde::Serialize;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// What io_uring offers on this machine (probed once per process, then cached).
pub fn probe() -> UringCaps {
    static CAPS: std::sync::OnceLock<UringCaps> = std::sync::OnceLock::new();
    *CAPS.get_or_init(crate::sys::uring::probe)
}

/// Which engine to run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum Engine {
    /// io_uring when [`probe`] says it works, else the portable engine.
    #[default]
    Auto,
    /// io_uring (fails to bind if unavailable).
    Uring,
    /// A plain non-blocking UDP socket.
    Portable,
}

/// Options of an [`AsyncSocket`].
#[derive(Debug, Clone, Copy)]
pub struct AsyncOptions {
    /// Engine choice.
    pub engine: Engine,
    /// Pool buffers for the application (claim / post).
    pub buffers: usize,
    /// Payload bytes per buffer (at least 65,507 with `gro`).
    pub buf_size: usize,
    /// Receive reserve: buffers the kernel fills while nothing is posted.
    pub reserve: usize,
    /// Send operations in flight at most (one GSO send counts once).
    pub max_inflight: usize,
    /// Send with SEND_ZC / SENDMSG_ZC (io_uring only).
    pub zerocopy: bool,
    /// Gather same-size consecutive sends into GSO sends.
    pub gso: bool,
    /// UDP_GRO: a receive may return several coalesced datagrams.
    pub gro: bool,
    /// SO_SNDBUF / SO_RCVBUF asked for (the kernel may grant less).
    pub socket_buffer: usize,
}

impl Default for AsyncOptions {
    fn default() -> Self {
        AsyncOptions {
            engine: Engine::Auto,
            buffers: 1024,
            buf_size: 2048,
            reserve: 256,
            max_inflight: 64,
            zerocopy: false,
            gso: true,
            gro: false,
            socket_buffer: 8 << 20,
        }
    }
}

/// Names a posted operation; reported again in its [`Completion`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(pub u64);

/// What a completion finishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A posted send.
    Send,
    /// A posted receive.
    Recv,
}

/// A finished operation: the buffer is the application's again.
#[derive(Debug)]
pub struct Completion {
    /// The token the post returned.
    pub token: Token,
    /// Send or receive.
    pub kind: OpKind,
    /// The buffer: for a receive, `buf.data()` is what arrived (several datagrams with GRO).
    pub buf: Buf,
    /// Bytes sent or received.
    pub len: usize,
    /// Destination of a send, source of a receive.
    pub peer: SocketAddr,
    /// errno when the operation failed (ENOBUFS: dropped by the kernel).
    pub error: Option<i32>,
    /// The send went through the zero-copy path.
    pub zerocopy: bool,
    /// The kernel copied the bytes (always true on the portable engine; reported by the
    /// kernel on the zero-copy path, and true on loopback).
    pub copied: bool,
    /// Datagrams in the buffer (1 unless GRO coalesced several).
    pub segments: usize,
    /// Size of each datagram but the last when `segments > 1`; else `len`.
    pub segment_size: usize,
}

impl Completion {
    /// The datagrams of a receive, one slice each (GRO split).
    pub fn datagrams(&self) -> impl Iterator<Item = &[u8]> {
        let data = &self.buf.data()[..self.len.min(self.buf.len())];
        data.chunks(self.segment_size.max(1))
    }
}

/// Counters of an [`AsyncSocket`].
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct AsyncStats {
    /// "uring" or "portable".
    pub engine: &'static str,
    /// Sends posted / completed.
    pub posted_sends: u64,
    pub completed_sends: u64,
    /// Receives posted / completed.
    pub posted_recvs: u64,
    pub completed_recvs: u64,
    /// Datagrams sent (completed without error) and received (GRO segments counted).
    pub sent_datagrams: u64,
    pub received_datagrams: u64,
    /// Send completions through the zero-copy path, and those the kernel copied anyway.
    pub zerocopy: u64,
    pub copied: u64,
    /// Sends that waited in the overflow queue.
    pub overflow_queued: u64,
    /// Most datagrams in flight at once.
    pub inflight_high_water: u64,
    /// Datagrams that landed in the reserve (nothing posted), and the most held at once.
    pub reserve_used: u64,
    pub reserve_high_water: u64,
    /// Datagrams the kernel dropped on a full socket queue (SO_RXQ_OVFL; io_uring engine).
    pub kernel_drops: u64,
    /// Times the receive ring ran dry (the kernel queue held datagrams meanwhile).
    pub ring_empty: u64,
    /// System calls (io_uring_enter, send/recv, poll).
    pub syscalls: u64,
    /// GSO sends and GRO receives.
    pub gso_sends: u64,
    pub gro_batches: u64,
    /// Failed sends (ENOBUFS included).
    pub send_errors: u64,
    /// Times a kernel feature was given up at run time (GSO refused).
    pub degraded: u64,
}

enum Backend {
    Uring(Box<uring::UringBackend>),
    Portable(portable::PortableBackend),
}

/// An asynchronous UDP socket. See the module documentation for the calling protocol.
pub struct AsyncSocket {
    backend: Backend,
    next_token: u64,
    completions: VecDeque<Completion>,
    stats: AsyncStats,
}

impl std::fmt::Debug for AsyncSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncSocket")
            .field("stats", &self.stats())
            .finish()
    }
}

impl AsyncSocket {
    /// Binds `addr` with `opts`.
    pub fn bind(addr: SocketAddr, opts: AsyncOptions) -> io::Result<Self> {
        if opts.gro && opts.buf_size < crate::datapath::MAX_UDP_PAYLOAD {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "gro needs buffers of at least 65507 bytes",
            ));
        }
        let use_uring = match opts.engine {
            Engine::Portable => false,
            Engine::Uring => true,
            Engine::Auto => {
                let c = probe();
                c.available && c.recvmsg_multishot && c.buf_ring
            }
        };
        let backend = if use_uring {
            Backend::Uring(Box::new(uring::UringBackend::bind(addr, &opts)?))
        } else {
            Backend::Portable(portable::PortableBackend::bind(addr, &opts)?)
        };
        let cap = opts.buffers + opts.reserve;
        Ok(AsyncSocket {
            backend,
            next_token: 0,
            completions: VecDeque::with_capacity(cap),
            stats: AsyncStats::default(),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match &self.backend {
            Backend::Uring(b) => b.local_addr(),
            Backend::Portable(b) => b.local_addr(),
        }
    }

    /// Which engine runs: "uring" or "portable".
    pub fn engine(&self) -> &'static str {
        match &self.backend {
            Backend::Uring(_) => "uring",
            Backend::Portable(_) => "portable",
        }
    }

    /// A free buffer from the pool, if any.
    pub fn claim(&mut self) -> Option<Buf> {
        match &self.backend {
            Backend::Uring(b) => b.claim(),
            Backend::Portable(b) => b.claim(),
        }
    }

    /// Free buffers in the pool right now.
    pub fn free_buffers(&self) -> usize {
        match &self.backend {
            Backend::Uring(b) => b.free_buffers(),
            Backend::Portable(b) => b.free_buffers(),
        }
    }

    fn token(&mut self) -> Token {
        self.next_token += 1;
        Token(self.next_token)
    }

    /// Posts the first `len` bytes of `buf` for sending to `dst`; returns at once. The buffer
    /// comes back in the send's completion.
    pub fn post_send(&mut self, mut buf: Buf, len: usize, dst: SocketAddr) -> Token {
        let t = self.token();
        buf.set_len(len);
        self.stats.posted_sends += 1;
        match &mut self.backend {
            Backend::Uring(b) => b.post_send(t, buf, dst),
            Backend::Portable(b) => b.post_send(t, buf, dst, &mut self.completions),
        }
        t
    }

    /// Claim/commit: sends a claimed buffer written in place (same as [`Self::post_send`]).
    pub fn commit(&mut self, buf: Buf, len: usize, dst: SocketAddr) -> Token {
        self.post_send(buf, len, dst)
    }

    /// Posts `buf` for receiving; returns at once. If a datagram is already waiting in the
    /// reserve, the completion is ready at the next poll.
    pub fn post_recv(&mut self, buf: Buf) -> Token {
        let t = self.token();
        self.stats.posted_recvs += 1;
        match &mut self.backend {
            Backend::Uring(b) => b.post_recv(t, buf, &mut self.completions),
            Backend::Portable(b) => b.post_recv(t, buf),
        }
        t
    }

    /// Submits whatever posted sends are not yet with the kernel (one system call).
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.backend {
            Backend::Uring(b) => b.flush(),
            Backend::Portable(_) => Ok(()),
        }
    }

    fn progress(&mut self) -> io::Result<()> {
        match &mut self.backend {
            Backend::Uring(b) => b.progress(&mut self.completions),
            Backend::Portable(b) => b.progress(&mut self.completions),
        }
    }

    fn count(&mut self, c: &Completion) {
        let s = &mut self.stats;
        match c.kind {
            OpKind::Send => {
                s.completed_sends += 1;
                if c.error.is_none() {
                    s.sent_datagrams += 1;
                } else {
                    s.send_errors += 1;
                }
                if c.zerocopy {
                    s.zerocopy += 1;
                }
                if c.copied {
                    s.copied += 1;
                }
            }
            OpKind::Recv => {
                s.completed_recvs += 1;
                s.received_datagrams += c.segments as u64;
            }
        }
    }

    /// Submits pending sends, takes what the kernel finished (no waiting) and hands every
    /// completion to `f`. Returns how many.
    pub fn poll_completions(&mut self, mut f: impl FnMut(Completion)) -> io::Result<usize> {
        self.progress()?;
        let mut n = 0;
        while let Some(c) = self.completions.pop_front() {
            self.count(&c);
            f(c);
            n += 1;
        }
        Ok(n)
    }

    /// Like [`Self::poll_completions`], but first waits up to `timeout` for at least one
    /// completion.
    pub fn wait_completions(
        &mut self,
        timeout: Duration,
        f: impl FnMut(Completion),
    ) -> io::Result<usize> {
        self.progress()?;
        if self.completions.is_empty() {
            self.block(timeout)?;
            self.progress()?;
        }
        self.poll_completions(f)
    }

    fn block(&mut self, timeout: Duration) -> io::Result<()> {
        match &mut self.backend {
            Backend::Uring(b) => b.block(timeout),
            Backend::Portable(b) => b.block(timeout),
        }
    }

    /// Waits for `token`'s completion (other completions stay queued for
    /// [`Self::poll_completions`]). `None` after `timeout`.
    pub fn wait_timeout(
        &mut self,
        token: Token,
        timeout: Duration,
    ) -> io::Result<Option<Completion>> {
        let end = Instant::now() + timeout;
        loop {
            self.progress()?;
            if let Some(i) = self.completions.iter().position(|c| c.token == token) {
                let c = self.completions.remove(i).expect("index from position");
                self.count(&c);
                return Ok(Some(c));
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            self.block(left.min(Duration::from_millis(100)))?;
        }
    }

    /// Waits for `token`'s completion, however long it takes.
    pub fn wait(&mut self, token: Token) -> io::Result<Completion> {
        loop {
            if let Some(c) = self.wait_timeout(token, Duration::from_secs(3600))? {
                return Ok(c);
            }
        }
    }

    /// Counters.
    pub fn stats(&self) -> AsyncStats {
        let mut s = self.stats;
        match &self.backend {
            Backend::Uring(b) => b.fill_stats(&mut s),
            Backend::Portable(b) => b.fill_stats(&mut s),
        }
        s
    }
}
