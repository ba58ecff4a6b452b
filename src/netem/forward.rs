//! The forwarder: one thread moving IP packets between two TUN devices through a simulated
//! [`Link`] per direction, in real time.
//!
//! Each turn of the loop: (1) writes every packet whose delivery time has come (or comes
//! within [`SLACK`]) into the destination device, (2) reads what the devices have (at most [`READ_BATCH`] per device, so
//! deliveries stay on time under a flood) and offers each packet to its direction's link,
//! stamped with the time it was read, (3) sleeps in `ppoll` until a device has a packet or the
//! next delivery is due, with the timer slack at its minimum. Deliveries are scheduled by the
//! link in absolute time, so waking late delays a packet but never slows the link's rate: the
//! packets that fell due meanwhile leave together. The slack lets one wake-up serve the
//! packets due just after it (a timer wake-up costs more than forwarding a packet): at light
//! load a packet still leaves at its time (up to [`SHORT_WAIT`] early: a shorter wait is not
//! slept); under load some leave up to [`SLACK`] early.
//!
//! Steady state allocates nothing: one receive buffer, and the links recycle theirs.

use super::state::StatsWriter;
use super::Spec;
use rustix::event::{poll, PollFd, PollFlags};
use rustix::time::{clock_gettime, ClockId, Timespec};
use slipstream_proto::sim::{Link, LinkConfig, LinkStats};
use std::fs::File;
use std::io::{self, Read, Write};
use std::num::NonZeroU64;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Packets read from one device per turn before deliveries are served again.
const READ_BATCH: usize = 64;
/// Packets due this soon after a wake-up leave with it.
pub(super) const SLACK: Duration = Duration::from_micros(100);
/// A wait shorter than this is not slept: it ends at once, and the next turn sends what was
/// due (up to this early). Slept, a timer this short came back late on this VM, so a
/// packet just read, due a serialization time later (under a microsecond at 1 Gbit/s),
/// left late by far more than its size explained: half a round trip over the emulated
/// 1 Gbit/s link grew from 63-67 µs for 1-byte datagrams to 98-105 µs for 96-byte
/// ones.
pub(super) const SHORT_WAIT: Duration = Duration::from_micros(25);
/// How often the counters are written out.
const STATS_EVERY: Duration = Duration::from_millis(100);
/// Largest IP packet a TUN device hands over.
const MAX_PACKET: usize = 65_535;

/// Counters of one direction beyond the link's own.
#[derive(Debug, Default, Clone, Copy)]
struct DirStats {
    /// Packets read from the source device.
    read: u64,
    /// Bytes read from the source device.
    read_bytes: u64,
    /// Packets the destination device refused (ENOBUFS, EAGAIN, interface down, ...).
    write_drops: u64,
    /// Failed reads other than "nothing to read" (the device stays in use).
    read_errors: u64,
}

/// One direction: packets read from `dirs[i]`'s source device go through `link`.
#[derive(Debug)]
struct Direction {
    link: Link,
    stats: DirStats,
}

/// The forwarding loop between device a and device b.
#[derive(Debug)]
pub(crate) struct Forwarder {
    /// Device of side a, then of side b.
    devs: [File; 2],
    /// a → b (read from devs[0], written to devs[1]), then b → a.
    dirs: [Direction; 2],
    buf: Vec<u8>,
    writer: StatsWriter,
    started: Instant,
}

impl Forwarder {
    /// A forwarder between the devices of side a and b.
    pub(crate) fn new(dev_a: File, dev_b: File, spec: &Spec, stats_path: PathBuf) -> Self {
        let dir = |imp: &crate::datapath::Impairment| Direction {
            link: Link::new(
                LinkConfig {
                    // The devices' MTU limits packet sizes; the link passes what they pass.
                    mtu: MAX_PACKET,
                    ..imp.link.clone()
                },
                imp.seed,
            ),
            stats: DirStats::default(),
        };
        Forwarder {
            devs: [dev_a, dev_b],
            dirs: [dir(&spec.ab), dir(&spec.ba)],
            buf: vec![0; MAX_PACKET],
            writer: StatsWriter::new(stats_path),
            started: Instant::now(),
        }
    }

    /// Forwards until a device fails (it disappears when its namespace is deleted).
    pub(crate) fn run(mut self) -> io::Result<()> {
        // Wake-ups as exact as the timer allows: the delay and jitter are configured in µs.
        let _ = rustix::thread::set_current_timer_slack(NonZeroU64::new(1));
        let mut next_stats = Instant::now();
        loop {
            let now = Instant::now();
            for d in 0..2 {
                self.deliver(d, now)?;
            }
            let mut busy = false;
            for d in 0..2 {
                busy |= self.ingest(d)?;
            }
            if now >= next_stats {
                self.write_stats();
                next_stats = now + STATS_EVERY;
            }
            if busy {
                continue;
            }
            let deadline = self
                .dirs
                .iter()
                .filter_map(|d| d.link.next_delivery())
                .fold(next_stats, Instant::min);
            let wait = deadline.saturating_duration_since(Instant::now());
            let [a, b] = &self.devs;
            let mut fds = [PollFd::new(a, PollFlags::IN), PollFd::new(b, PollFlags::IN)];
            wait_devices(&mut fds, wait, |i| format!("side {}", side(i)))?;
        }
    }

    /// Writes every packet of direction `d` due by `now` into its destination device.
    fn deliver(&mut self, d: usize, now: Instant) -> io::Result<()> {
        let out = &self.devs[1 - d];
        let dir = &mut self.dirs[d];
        while let Some(n) = dir.link.poll_deliver(now + SLACK, &mut self.buf) {
            match (&*out).write(&self.buf[..n]) {
                Ok(_) => {}
                Err(e) if fatal(&e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("writing to side {}: {e}", side(1 - d)),
                    ))
                }
                // The receiving kernel refused it (full backlog, packet it rejects): a drop.
                Err(_) => dir.stats.write_drops += 1,
            }
        }
        Ok(())
    }

    /// Reads up to [`READ_BATCH`] packets from direction `d`'s source device into its link.
    /// Returns whether the batch was full (more may be waiting).
    fn ingest(&mut self, d: usize) -> io::Result<bool> {
        let src = &self.devs[d];
        let dir = &mut self.dirs[d];
        for _ in 0..READ_BATCH {
            match (&*src).read(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    dir.stats.read += 1;
                    dir.stats.read_bytes += n as u64;
                    dir.link.send(Instant::now(), &self.buf[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if fatal(&e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("reading from side {}: {e}", side(d)),
                    ))
                }
                Err(_) => {
                    dir.stats.read_errors += 1;
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Rewrites the statistics file (best effort: a full disk must not stop the link).
    fn write_stats(&self) {
        let cpu = clock_gettime(ClockId::ProcessCPUTime);
        let json = |d: &Direction| {
            let l: LinkStats = d.link.stats();
            serde_json::json!({
                "read": d.stats.read,
                "read_bytes": d.stats.read_bytes,
                "offered": l.offered,
                "delivered": l.delivered,
                "delivered_bytes": l.delivered_bytes,
                "lost": l.lost,
                "queue_drops": l.queue_drops,
                "duplicated": l.duplicated,
                "reordered": l.reordered,
                "write_drops": d.stats.write_drops,
                "read_errors": d.stats.read_errors,
                "in_flight": d.link.in_flight(),
            })
        };
        let v = serde_json::json!({
            "running": true,
            "pid": std::process::id(),
            "uptime_seconds": self.started.elapsed().as_secs_f64(),
            "cpu_seconds": cpu.tv_sec as f64 + cpu.tv_nsec as f64 * 1e-9,
            "a_to_b": json(&self.dirs[0]),
            "b_to_a": json(&self.dirs[1]),
        });
        self.writer.publish(v.to_string());
    }
}

/// Waits up to `wait` for one of `fds` (TUN devices) to have a packet (not at all if `wait`
/// is shorter than [`SHORT_WAIT`]). A device that failed (`who` names it by index) ends the
/// forwarder: its namespace is gone.
pub(super) fn wait_devices(
    fds: &mut [PollFd<'_>],
    wait: Duration,
    who: impl Fn(usize) -> String,
) -> io::Result<()> {
    let wait = if wait < SHORT_WAIT {
        Duration::ZERO
    } else {
        wait
    };
    let ts = Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: i64::from(wait.subsec_nanos()),
    };
    match poll(fds, Some(&ts)) {
        Ok(_) => {}
        Err(e) if e == rustix::io::Errno::INTR => {}
        Err(e) => return Err(e.into()),
    }
    for (i, fd) in fds.iter().enumerate() {
        let r = fd.revents();
        if r.intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL) {
            return Err(io::Error::other(format!(
                "device of {} failed ({r:?}); was its namespace deleted?",
                who(i)
            )));
        }
    }
    Ok(())
}

fn side(i: usize) -> char {
    if i == 0 {
        'a'
    } else {
        'b'
    }
}

/// Errors after which a device is gone for good (its interface was deleted). An interface
/// merely set down (EIO) comes back when set up again.
pub(super) fn fatal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBADFD) | Some(libc::ENODEV) | Some(libc::EBADF)
    )
}
