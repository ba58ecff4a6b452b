//! Where a real-time socket's datagrams go in and out: its kernel UDP socket, and, when the
//! socket was opened with [`super::RtConfig::xdp_interface`], an AF_XDP socket on that
//! interface beside it.
//!
//! With AF_XDP, datagrams for the socket's port that arrive on the interface's queue 0 reach
//! it as frames, past the kernel's IP and UDP stack; everything else (other queues, other
//! interfaces) still comes through the UDP socket, which keeps the port. Sending needs the
//! next hop's hardware address, which this path does not look up: it learns it, per host
//! address, from the frames a host's datagrams arrive in (the address they came from, which
//! for a host beyond a router is the router's, as a reply needs), for up to
//! [`super::RtConfig::peers`] hosts, the least recently heard forgotten first. Datagrams to
//! a host not heard from that way go through the kernel, which resolves it. A frame that
//! does not parse as IPv4 UDP with correct lengths and checksums is dropped and counted.

use crate::datapath::{Datapath, RxBatch, RxMeta, RxParts, TxGather};
use crate::sys::mmsg::{Mark, Mmsg};
use crate::sys::xdp::{Xsk, FRAME};
use rustix::event::epoll;
use rustix::event::Timespec;
use serde::Serialize;
use slipstream_proto::rt::frame::{Frame, HEADERS_LEN};
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// Frames handed to the caller at most per receive.
const RX_BATCH: usize = 64;
/// While spinning, the kernel socket is looked at once every this many looks at the ring
/// (a system call each; only peers not yet learned and other queues come that way).
const KERNEL_EVERY: u32 = 16;

/// Counters of the AF_XDP path.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct XdpStats {
    /// Datagrams sent as frames, and received as frames.
    pub frames_sent: u64,
    pub frames_received: u64,
    /// `sendto` calls that made the kernel send frames.
    pub kicks: u64,
    /// Datagrams sent through the kernel's UDP socket: to peers whose hardware address was
    /// not known yet, or too large for a frame.
    pub kernel_sends: u64,
    /// Frames dropped: not IPv4 UDP with consistent lengths and checksums.
    pub malformed: u64,
    /// Frames for the port but another of the host's addresses than the socket's.
    pub foreign: u64,
    /// Frames taken without a payload check: their UDP checksum was 0, or left to the
    /// sender's device (only a virtual device passes such frames on).
    pub unchecked: u64,
    /// Send frames: none free when a datagram needed one (it went later).
    pub frames_short: u64,
    /// Frames for the socket the kernel dropped (its counters) because the receive ring
    /// was full.
    pub kernel_ring_full: u64,
    /// Frames the kernel dropped for want of a free frame to copy into, or too long. Both
    /// counts grow when the application does not take what arrives for longer than its
    /// 256 receive frames last (a stall: about 25 ms of messages at 10,000 a second).
    pub kernel_dropped: u64,
}

/// A host whose datagrams arrived as frames: where to send it frames. The hardware
/// address is the next hop's toward the host's address, whatever the port, so a host is
/// learned by its address alone: a socket heard from teaches the way to its neighbours
/// on the same host.
#[derive(Debug, Clone, Copy)]
struct Peer {
    host: Ipv4Addr,
    mac: [u8; 6],
    /// Our address it sent to.
    local: Ipv4Addr,
    used: u64,
}

/// The AF_XDP side.
#[derive(Debug)]
struct Xdp {
    xsk: Xsk,
    port: u16,
    /// The socket's own address, if it is bound to one.
    bound: Option<Ipv4Addr>,
    peers: Vec<Peer>,
    max_peers: usize,
    tick: u64,
    /// Frames the AF_XDP socket holds from the last receive (`metas` point into them).
    held: usize,
    metas: Vec<RxMeta>,
    tos: u8,
    spins: u32,
    /// How long a wait with no precise timer due lasts ([`Path::slice`]).
    slice: Duration,
    /// Both sockets, to wait on (an epoll set: nothing to register per wait).
    epoll: OwnedFd,
    stats: XdpStats,
}

impl RxParts for Xdp {
    fn part(&self, i: usize) -> Option<&[u8]> {
        self.xsk.frame(i)
    }
}

impl Xdp {
    fn peer(&self, dst: SocketAddr) -> Option<usize> {
        let SocketAddr::V4(dst) = dst else {
            return None;
        };
        self.peers.iter().position(|p| p.host == *dst.ip())
    }

    /// Gives back the frames held from last time and takes those on the ring (their
    /// datagrams into `metas`), learning their senders.
    fn take(&mut self) {
        self.metas.clear();
        self.held = self.xsk.recv(RX_BATCH);
        self.tick += 1;
        for i in 0..self.held {
            let Some(bytes) = self.xsk.frame(i) else {
                break;
            };
            match Frame::parse(bytes) {
                Ok(f)
                    if f.dst.port() == self.port && self.bound.is_none_or(|b| b == *f.dst.ip()) =>
                {
                    self.stats.unchecked += u64::from(f.unchecked);
                    // Only a frame sent to this interface's own address teaches where its
                    // sender is: a broadcast's destination is no source to answer from.
                    if f.dst_mac == self.xsk.mac() {
                        learn(&mut self.peers, self.max_peers, self.tick, &f);
                    }
                    self.metas.push(RxMeta {
                        src: SocketAddr::V4(f.src),
                        part: i,
                        offset: HEADERS_LEN,
                        len: f.payload_len,
                        at: None,
                        tos: f.tos,
                    });
                }
                Ok(_) => self.stats.foreign += 1,
                Err(_) => self.stats.malformed += 1,
            }
        }
        self.stats.frames_received += self.held as u64;
    }

    /// The learned peer datagram `i` of `d` goes to as a frame, if it goes as one: a
    /// datagram alone to its peer (several in a row to one peer, a message's fragments or
    /// a bundle, leave together through the kernel as one segmentation-offload send, which
    /// costs less than a frame each), fitting a frame, to a peer heard from.
    fn frame_peer(&self, d: &dyn TxGather, i: usize) -> Option<usize> {
        let (dst, head, tail) = d.get(i);
        let same = |j: usize| d.get(j).0 == dst;
        let in_run = (i + 1 < d.len() && same(i + 1)) || (i > 0 && same(i - 1));
        if in_run || HEADERS_LEN + head.len() + tail.len() > FRAME {
            return None;
        }
        self.peer(dst)
    }

    /// Sends datagrams `from..` of `d` while they go as frames ([`Self::frame_peer`]) and
    /// frames are free. Returns how many went.
    fn send_run(&mut self, d: &dyn TxGather, from: usize) -> io::Result<usize> {
        let mac = self.xsk.mac();
        let mut i = from;
        while i < d.len() {
            let (dst, head, tail) = d.get(i);
            let (Some(k), SocketAddr::V4(dst)) = (self.frame_peer(d, i), dst) else {
                break;
            };
            let p = &mut self.peers[k];
            p.used = self.tick;
            let f = Frame {
                src_mac: mac,
                dst_mac: p.mac,
                src: SocketAddrV4::new(p.local, self.port),
                dst,
                tos: self.tos,
                payload_len: 0,
                unchecked: false,
            };
            let mut written = false;
            let free = self.xsk.send_with(|buf| {
                let len = f.emit(buf, &[head, tail])?;
                buf.get_mut(HEADERS_LEN..HEADERS_LEN + head.len())?
                    .copy_from_slice(head);
                buf.get_mut(HEADERS_LEN + head.len()..len)?
                    .copy_from_slice(tail);
                written = true;
                Some(len)
            });
            if !free {
                self.stats.frames_short += 1;
            }
            if !written {
                break;
            }
            i += 1;
        }
        if i > from {
            self.xsk.kick()?;
            self.stats.frames_sent += (i - from) as u64;
        }
        Ok(i - from)
    }
}

/// Remembers where `f` came from, in a table of at most `max` peers (the least recently
/// used goes first).
fn learn(peers: &mut Vec<Peer>, max: usize, tick: u64, f: &Frame) {
    let entry = Peer {
        host: *f.src.ip(),
        mac: f.src_mac,
        local: *f.dst.ip(),
        used: tick,
    };
    if let Some(p) = peers.iter_mut().find(|p| p.host == *f.src.ip()) {
        *p = entry;
    } else if peers.len() < max {
        peers.push(entry);
    } else if let Some(p) = peers.iter_mut().min_by_key(|p| p.used) {
        *p = entry;
    }
}

/// Datagrams `from..to` of another gather.
struct Range<'a> {
    d: &'a dyn TxGather,
    from: usize,
    to: usize,
}

impl TxGather for Range<'_> {
    fn len(&self) -> usize {
        self.to - self.from
    }
    fn get(&self, i: usize) -> (SocketAddr, &[u8], &[u8]) {
        self.d.get(self.from + i)
    }
}

/// Where a receive found datagrams.
#[derive(Clone, Copy)]
enum From {
    Frames,
    Kernel,
    Nothing,
}

/// A real-time socket's datapath: the kernel UDP socket, and the AF_XDP socket if any.
#[derive(Debug)]
pub(crate) struct Path {
    pub(crate) udp: Mmsg,
    xdp: Option<Xdp>,
}

impl Path {
    /// The kernel socket alone.
    pub(crate) fn udp(udp: Mmsg) -> Path {
        Path { udp, xdp: None }
    }

    /// The kernel socket `udp` (IPv4, bound) and an AF_XDP socket on interface `ifindex`
    /// for its port, learning up to `peers` hosts; waits with nothing precise due last
    /// `slice`.
    pub(crate) fn with_xdp(
        udp: Mmsg,
        ifindex: u32,
        peers: usize,
        slice: Duration,
    ) -> io::Result<Path> {
        let SocketAddr::V4(local) = udp.local_addr()? else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "AF_XDP takes IPv4 sockets only",
            ));
        };
        let bound = Some(*local.ip()).filter(|ip| !ip.is_unspecified());
        let xsk = Xsk::open(ifindex, local.port(), bound)?;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        // Event data 0: frames; 1: the kernel socket.
        for (k, fd) in [xsk.fd(), udp.fd()].into_iter().enumerate() {
            epoll::add(
                &ep,
                fd,
                epoll::EventData::new_u64(k as u64),
                epoll::EventFlags::IN,
            )?;
        }
        let xdp = Xdp {
            xsk,
            port: local.port(),
            bound,
            peers: Vec::with_capacity(peers),
            max_peers: peers.max(1),
            tick: 0,
            held: 0,
            metas: Vec::with_capacity(RX_BATCH),
            tos: 0,
            spins: 0,
            slice,
            epoll: ep,
            stats: XdpStats::default(),
        };
        Ok(Path {
            udp,
            xdp: Some(xdp),
        })
    }

    /// The mark of the datagrams sent from now on.
    pub(crate) fn set_mark(&mut self, mark: Option<Mark>) {
        if let Some(x) = &mut self.xdp {
            x.tos = mark.map_or(0, |m| m.tos);
        }
        self.udp.set_mark(mark);
    }

    /// Sends the datagrams of `d` in order, each to a learned peer as a frame, the others
    /// through the kernel; returns how many went (the rest did not, as with
    /// [`Mmsg::send_gather`]).
    pub(crate) fn send_gather(&mut self, d: &dyn TxGather) -> io::Result<usize> {
        let Some(x) = &mut self.xdp else {
            return self.udp.send_gather(d);
        };
        let mut i = 0;
        while i < d.len() {
            let n = x.send_run(d, i)?;
            i += n;
            if i == d.len() {
                break;
            }
            if x.frame_peer(d, i).is_some() {
                // Stopped short of one that goes as a frame: out of frames.
                break;
            }
            // Through the kernel, up to the next datagram that goes as a frame.
            let mut j = i + 1;
            while j < d.len() && x.frame_peer(d, j).is_none() {
                j += 1;
            }
            let r = self.udp.send_gather(&Range { d, from: i, to: j });
            let went = match r {
                Ok(k) => k,
                Err(e) if i == 0 => return Err(e),
                Err(_) => 0,
            };
            x.stats.kernel_sends += went as u64;
            i += went;
            if i < j {
                break;
            }
        }
        Ok(i)
    }

    /// How long a wait lasts when no timer that must be on time is due within it plus a
    /// kernel tick, if waits are cut so ([`Self::recv`] with `sliced`): the kernel socket's
    /// SO_RCVTIMEO, or with AF_XDP an `epoll_pwait2` that long. A wait of a fixed length
    /// of at least a tick ends after the CPU's next tick, so arming its timer does not
    /// reprogram the CPU's timer device, which a virtual machine pays dearly for (a trap to
    /// the hypervisor); waits cut at each report's time often did (docs/rt.md: 5,617
    /// timer-device writes against 521 over the same 20,000 messages).
    pub(crate) fn slice(&self) -> Option<Duration> {
        match &self.xdp {
            Some(x) => Some(x.slice),
            None => self.udp.slice(),
        }
    }

    /// One receive: a blocking one begun at `sliced` if given, for [`Self::slice`], else
    /// waiting up to `wait`. AF_XDP frames first.
    pub(crate) fn recv(
        &mut self,
        sliced: Option<Instant>,
        wait: Duration,
    ) -> io::Result<RxBatch<'_>> {
        let Some(x) = &mut self.xdp else {
            return match sliced {
                Some(before) => self.udp.recv_slice(before),
                None => self.udp.recv(Some(wait)),
            };
        };
        if x.xsk.tx_pending() {
            x.xsk.kick()?;
        }
        x.take();
        let from = if x.held > 0 {
            From::Frames
        } else if wait.is_zero() {
            x.spins = x.spins.wrapping_add(1);
            if x.spins % KERNEL_EVERY == 0 {
                From::Kernel
            } else {
                From::Nothing
            }
        } else {
            let wait = if sliced.is_some() { x.slice } else { wait };
            // Longer than a day: no timeout (a Duration past i64 seconds is none either).
            let ts = (wait < Duration::from_secs(86_400)).then(|| Timespec {
                tv_sec: wait.as_secs() as _,
                tv_nsec: wait.subsec_nanos() as _,
            });
            let mut events = [epoll::Event {
                flags: epoll::EventFlags::empty(),
                data: epoll::EventData::new_u64(0),
            }; 2];
            let (mut frames, mut kernel) = (false, false);
            match epoll::wait(&x.epoll, &mut events, ts.as_ref()) {
                Ok(n) => {
                    for e in &events[..n] {
                        match e.data.u64() {
                            0 => frames = true,
                            _ => kernel = true,
                        }
                    }
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            if frames {
                x.take();
            }
            if x.held > 0 {
                From::Frames
            } else if kernel {
                From::Kernel
            } else {
                From::Nothing
            }
        };
        match from {
            From::Frames => match &self.xdp {
                Some(x) => Ok(RxBatch::with_parts(x, &x.metas)),
                None => Ok(RxBatch::empty()),
            },
            From::Kernel => {
                let batch = self.udp.recv(Some(Duration::ZERO))?;
                // A host heard through the kernel comes another way than frames on this
                // queue (another interface, queue or route): its learned address may be
                // stale, and the kernel knows the way back.
                if let Some(x) = &mut self.xdp {
                    for (src, _) in batch.iter() {
                        x.peers.retain(|p| IpAddr::V4(p.host) != src.ip());
                    }
                }
                Ok(batch)
            }
            From::Nothing => Ok(RxBatch::empty()),
        }
    }

    /// Bytes allocated at open.
    pub(crate) fn memory(&self) -> usize {
        self.udp.memory() + self.xdp.as_ref().map_or(0, |x| x.xsk.memory())
    }

    /// The AF_XDP path's counters, if it has one.
    pub(crate) fn xdp_stats(&self) -> Option<XdpStats> {
        self.xdp.as_ref().map(|x| {
            let k = x.xsk.stats();
            let d = x.xsk.kernel_drops();
            XdpStats {
                kicks: k.kicks,
                malformed: x.stats.malformed + k.bad_descriptors,
                kernel_ring_full: d.ring_full,
                kernel_dropped: d.other,
                ..x.stats
            }
        })
    }
}
