//! The io_uring engine of [`super::AsyncSocket`]: token bookkeeping over
//! [`crate::sys::uring::engine::Engine`].
//!
//! Receive matching: the kernel fills ring buffers in the order they were given, and every
//! buffer in the ring is interchangeable, so a datagram completes the oldest posted receive
//! whatever buffer it landed in (the posted buffer stays in the ring in its place). With no
//! receive posted, it waits in the reserve queue and completes the next post at once.

use super::{AsyncOptions, AsyncStats, Buf, Completion, OpKind, Token};
use crate::sys::uring::engine::{Engine, EngineConfig, RecvDone};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// Submit once this many send operations are queued for the kernel.
const SUBMIT_EVERY: usize = 2;

pub(super) struct UringBackend {
    eng: Engine,
    /// Posted receives waiting for a datagram, oldest first.
    posted: VecDeque<Token>,
    /// Datagrams that arrived while nothing was posted (the reserve in use).
    ready: VecDeque<RecvDone>,
    reserve_used: u64,
    reserve_high_water: u64,
}

impl UringBackend {
    pub(super) fn bind(addr: SocketAddr, o: &AsyncOptions) -> io::Result<Self> {
        let cfg = EngineConfig {
            bufs: o.buffers,
            reserve: o.reserve.max(1),
            payload: o.buf_size,
            ops: o.max_inflight,
            zerocopy: o.zerocopy,
            gso: o.gso,
            gro: o.gro,
            sndbuf: o.socket_buffer,
            rcvbuf: o.socket_buffer,
        };
        let n = o.buffers + o.reserve.max(1);
        Ok(UringBackend {
            eng: Engine::new(addr, cfg)?,
            posted: VecDeque::with_capacity(n),
            ready: VecDeque::with_capacity(n),
            reserve_used: 0,
            reserve_high_water: 0,
        })
    }

    pub(super) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.eng.socket().local_addr()
    }

    pub(super) fn claim(&self) -> Option<Buf> {
        self.eng.pool().claim()
    }

    pub(super) fn free_buffers(&self) -> usize {
        self.eng.pool().free_count()
    }

    pub(super) fn post_send(&mut self, t: Token, buf: Buf, dst: SocketAddr) {
        self.eng.post_send(t.0, buf, dst);
        if self.eng.unsubmitted() >= SUBMIT_EVERY {
            let _ = self.eng.submit();
        }
    }

    pub(super) fn post_recv(&mut self, t: Token, buf: Buf, out: &mut VecDeque<Completion>) {
        self.eng.provide(buf);
        match self.ready.pop_front() {
            Some(r) => out.push_back(recv_completion(t, r)),
            None => self.posted.push_back(t),
        }
    }

    pub(super) fn flush(&mut self) -> io::Result<()> {
        self.eng.flush()
    }

    pub(super) fn progress(&mut self, out: &mut VecDeque<Completion>) -> io::Result<()> {
        self.eng.flush()?;
        self.eng.reap()?;
        // Sends freed ops: move overflow-queued ones up and submit them now.
        if self.eng.unsubmitted() > 0 {
            self.eng.flush()?;
        }
        while let Some(d) = self.eng.send_done.pop_front() {
            let len = d.buf.len();
            out.push_back(Completion {
                token: Token(d.tag),
                kind: OpKind::Send,
                buf: d.buf,
                len,
                peer: d.dst,
                error: d.error,
                zerocopy: d.zerocopy,
                copied: d.copied,
                segments: 1,
                segment_size: len,
            });
        }
        while let Some(r) = self.eng.recv_done.pop_front() {
            match self.posted.pop_front() {
                Some(t) => out.push_back(recv_completion(t, r)),
                None => {
                    self.reserve_used += 1;
                    self.ready.push_back(r);
                    self.reserve_high_water = self.reserve_high_water.max(self.ready.len() as u64);
                }
            }
        }
        Ok(())
    }

    pub(super) fn block(&mut self, timeout: Duration) -> io::Result<()> {
        self.eng.flush()?;
        self.eng.wait(Some(timeout))
    }

    pub(super) fn fill_stats(&self, s: &mut AsyncStats) {
        let e = &self.eng.stats;
        s.engine = "uring";
        s.overflow_queued = e.overflow_queued;
        s.inflight_high_water = e.inflight_high_water;
        s.reserve_used = self.reserve_used;
        s.reserve_high_water = self.reserve_high_water;
        s.kernel_drops = e.kernel_drops;
        s.ring_empty = e.recv_nobufs;
        s.syscalls = e.enters;
        s.gso_sends = e.gso_sends;
        s.gro_batches = e.gro_batches;
        s.degraded = e.degraded;
    }
}

fn recv_completion(t: Token, r: RecvDone) -> Completion {
    let len = r.buf.len();
    let (segments, segment_size) = if r.segment_size > 0 {
        let s = r.segment_size as usize;
        (len.div_ceil(s), s)
    } else {
        (1, len)
    };
    Completion {
        token: t,
        kind: OpKind::Recv,
        buf: r.buf,
        len,
        peer: r.src,
        error: None,
        zerocopy: false,
        copied: false,
        segments,
        segment_size,
    }
}
