//! The portable engine of [`super::AsyncSocket`]: a non-blocking `std` UDP socket. Sends are
//! made (and complete, `copied = true`) inside `post_send`; posted receives are filled when
//! the socket is polled. Kernel drops are not visible here.

use super::{AsyncOptions, AsyncStats, Buf, Completion, OpKind, Token};
use crate::sys::uring::pool::PoolMem;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

pub(super) struct PortableBackend {
    sock: UdpSocket,
    pool: Arc<PoolMem>,
    posted: VecDeque<(Token, Buf)>,
    syscalls: u64,
    inflight_high_water: u64,
}

impl PortableBackend {
    pub(super) fn bind(addr: SocketAddr, o: &AsyncOptions) -> io::Result<Self> {
        let sock = crate::sys::uring::engine::udp_socket(addr, o.socket_buffer, o.socket_buffer)?;
        sock.set_nonblocking(true)?;
        let n = o.buffers + o.reserve;
        Ok(PortableBackend {
            sock,
            pool: PoolMem::new(n.max(1), o.buf_size, n.max(1))?,
            posted: VecDeque::with_capacity(n),
            syscalls: 0,
            inflight_high_water: 0,
        })
    }

    pub(super) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    pub(super) fn claim(&self) -> Option<Buf> {
        self.pool.claim()
    }

    pub(super) fn free_buffers(&self) -> usize {
        self.pool.free_count()
    }

    fn wait_for(&mut self, flags: PollFlags, timeout: Option<Duration>) -> io::Result<()> {
        let ts = timeout.map(|t| Timespec {
            tv_sec: t.as_secs() as _,
            tv_nsec: t.subsec_nanos() as _,
        });
        let mut fds = [PollFd::new(&self.sock, flags)];
        self.syscalls += 1;
        match poll(&mut fds, ts.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    pub(super) fn post_send(
        &mut self,
        t: Token,
        buf: Buf,
        dst: SocketAddr,
        out: &mut VecDeque<Completion>,
    ) {
        self.inflight_high_water = self.inflight_high_water.max(1);
        let error = loop {
            self.syscalls += 1;
            match self.sock.send_to(buf.data(), dst) {
                Ok(_) => break None,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let _ = self.wait_for(PollFlags::OUT, None);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Some(e.raw_os_error().unwrap_or(libc::EIO)),
            }
        };
        let len = buf.len();
        out.push_back(Completion {
            token: t,
            kind: OpKind::Send,
            buf,
            len,
            peer: dst,
            error,
            zerocopy: false,
            copied: true,
            segments: 1,
            segment_size: len,
        });
    }

    pub(super) fn post_recv(&mut self, t: Token, buf: Buf) {
        self.posted.push_back((t, buf));
    }

    pub(super) fn progress(&mut self, out: &mut VecDeque<Completion>) -> io::Result<()> {
        while let Some((t, mut buf)) = self.posted.pop_front() {
            self.syscalls += 1;
            match self.sock.recv_from(buf.as_mut()) {
                Ok((len, src)) => {
                    buf.set_len(len);
                    out.push_back(Completion {
                        token: t,
                        kind: OpKind::Recv,
                        buf,
                        len,
                        peer: src,
                        error: None,
                        zerocopy: false,
                        copied: true,
                        segments: 1,
                        segment_size: len,
                    });
                }
                Err(e) => {
                    self.posted.push_front((t, buf));
                    match e.kind() {
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => break,
                        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset => {}
                        _ => return Err(e),
                    }
                }
            }
        }
        Ok(())
    }

    pub(super) fn block(&mut self, timeout: Duration) -> io::Result<()> {
        if self.posted.is_empty() {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
            return Ok(());
        }
        self.wait_for(PollFlags::IN, Some(timeout))
    }

    pub(super) fn fill_stats(&self, s: &mut AsyncStats) {
        s.engine = "portable";
        s.syscalls = self.syscalls;
        s.inflight_high_water = self.inflight_high_water;
    }
}
