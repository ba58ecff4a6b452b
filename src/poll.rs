//! [`Poller`]: one application thread waits on many connections at once, as `epoll` lets a
//! server wait on many sockets.
//!
//! A thread per connection costs a context switch per wake-up and a turn at the endpoint's
//! lock: with a thousand busy connections on two cores, most of the time went there and
//! little to moving data. A poller's connections are reported to it by the I/O threads,
//! many to one notification, and its thread serves them in turn.
//!
//! The calling protocol:
//! 1. [`Poller::add`] a connection with a token (any `u64` the application names it by) and
//!    an [`Interest`]. Its operations no longer wait: where they would, they fail with
//!    `WouldBlock` ([`Connection::set_nonblocking`]).
//! 2. [`Poller::wait`] returns the tokens of connections that changed in a way the interest
//!    names (something to read, a quarter of the send buffer free) or that ended. A newly
//!    added connection is reported once at once.
//! 3. For each, do its operations until one fails with `WouldBlock`: a report means "try
//!    again", and the next comes only with the next change (edge-triggered, like
//!    `EPOLLET`). A connection left with data unread is not reported again for that data.
//! 4. [`Poller::remove`] it (or drop it) when done; dropping the poller leaves its
//!    connections registered to nothing.

use crate::api::Connection;
use crate::runtime::{PollReg, PollSet};
use std::io;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// What a registered connection is reported for (besides its end, always reported).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interest {
    /// Something to read: stream bytes, a whole message, a live message due to play.
    pub read: bool,
    /// Room to write: a quarter of the send buffer free.
    pub write: bool,
}

impl Interest {
    /// Reported when there is something to read.
    pub const READ: Interest = Interest {
        read: true,
        write: false,
    };
    /// Reported when there is room to write.
    pub const WRITE: Interest = Interest {
        read: false,
        write: true,
    };
    /// Both.
    pub const BOTH: Interest = Interest {
        read: true,
        write: true,
    };
}

/// Waits on many connections at once (see the module documentation for the protocol).
#[derive(Debug, Default)]
pub struct Poller {
    set: Arc<PollSet>,
}

impl Poller {
    /// A poller with no connection.
    pub fn new() -> Poller {
        Poller::default()
    }

    /// Registers `conn` under `token` for `interest`, replacing an earlier registration of
    /// the same connection handle (with this poller or another), and makes its operations
    /// non-blocking. It is reported once at once, so that the application tries it.
    pub fn add(&self, conn: &Connection, token: u64, interest: Interest) -> io::Result<()> {
        let flag = Arc::new(AtomicBool::new(false));
        let mut g = conn.shared().lock();
        let st = &mut *g;
        let w = st
            .conds
            .get_mut(&conn.id())
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "connection is gone"))?;
        if w.poll.is_none() {
            st.polled += 1;
        }
        w.poll = Some(PollReg {
            set: self.set.clone(),
            token,
            read: interest.read,
            write: interest.write,
            flag: flag.clone(),
        });
        drop(g);
        conn.set_nonblocking(true);
        if self.set.report(token, &flag) {
            self.set.notify();
        }
        Ok(())
    }

    /// Unregisters `conn` (if this poller has it) and makes its operations wait again. A
    /// report already made for it may still be returned by the next [`Poller::wait`].
    pub fn remove(&self, conn: &Connection) {
        let mut g = conn.shared().lock();
        let st = &mut *g;
        if let Some(w) = st.conds.get_mut(&conn.id()) {
            if w.poll
                .as_ref()
                .is_some_and(|p| Arc::ptr_eq(&p.set, &self.set))
            {
                w.poll = None;
                st.polled -= 1;
                drop(g);
                conn.set_nonblocking(false);
            }
        }
    }

    /// Waits at most `timeout` for registered connections to be reported, and appends
    /// their tokens to `ready` (each once, in the order reported). Returns how many were
    /// appended: 0 when the timeout passed first.
    pub fn wait(&self, ready: &mut Vec<u64>, timeout: Duration) -> usize {
        let before = ready.len();
        self.set.take(ready, timeout);
        ready.len() - before
    }
}
