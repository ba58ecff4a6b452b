//! AF_XDP sockets in copy mode: whole Ethernet frames between a process and one receive queue
//! of a network device, past the kernel's IP and UDP stack, through rings in memory shared
//! with the kernel.
//!
//! [`Xsk::open`] sets up everything at once: the frame memory (UMEM: [`RX_FRAMES`] frames
//! for receiving, handed to the kernel on the fill ring, and [`TX_FRAMES`] for sending), the
//! four rings, the socket bound to queue 0 of the device, and an XDP program, attached to
//! the device through a BPF link, that steers to the socket the IPv4 UDP datagrams for one
//! port arriving on that queue (not fragments, not IP options) and passes everything else to
//! the kernel. Dropping the `Xsk` detaches the program and frees it all.
//!
//! Calling protocol: [`Xsk::recv`] takes what the kernel put on the receive ring and holds
//! it, readable with [`Xsk::frame`], until the next `recv` gives it back. To send, write a
//! free frame in [`Xsk::send_with`]'s closure, and [`Xsk::kick`] once for all queued (in
//! copy mode the kernel sends only inside that call). Frames sent come back to the free
//! list by themselves. No frame's address leaves the `Xsk`, so none can be handed back
//! twice or read while the kernel owns it.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes of a frame in the UMEM (a page: the largest chunk copy mode takes).
pub(crate) const FRAME: usize = 4096;
/// Frames for receiving (all on the fill ring or with the caller): what arrives while the
/// application does not look waits in them, so they hold a stall of about 25 ms of small
/// messages at 10,000 a second (the kernel socket's buffer holds more; past either, the
/// kernel drops and counts, [`Xsk::kernel_drops`]). Received frames cycle through all of
/// them in turn: 2,048 (8 MiB) made small messages 7-20 % slower on one CPU, with huge
/// pages too (docs/rt.md).
pub(crate) const RX_FRAMES: usize = 256;
/// Frames for sending.
pub(crate) const TX_FRAMES: usize = 256;
/// Entries of the fill and receive rings, and of the send and completion rings (powers of
/// two, at least the frames that may be on them).
const RX_RING: u32 = RX_FRAMES as u32;
const TX_RING: u32 = TX_FRAMES as u32;
const _: () = assert!(RX_RING.is_power_of_two() && TX_RING.is_power_of_two());

/// The `bpf(2)` commands and constants used here (linux/bpf.h).
const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u64 = 17;
const BPF_PROG_TYPE_XDP: u64 = 6;
const BPF_XDP: u64 = 37;
const XDP_FLAGS_DRV_MODE: u64 = 1 << 2;

/// `bpf(2)` with an attribute block of 16 words (the union is smaller; the rest stays zero).
fn bpf(cmd: libc::c_long, attr: &mut [u64; 16]) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, writable buffer of 128 bytes, the size passed; every command
    // used here reads and writes only within its own member of `union bpf_attr`, and the
    // pointers it holds point to live buffers of the sizes it states.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), 128usize) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Takes ownership of a descriptor a system call returned.
fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful call that creates a descriptor, and
    // nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) }
}

/// One BPF instruction: opcode, registers, offset, immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(code)
        | u64::from(dst & 0xf | (src & 0xf) << 4) << 8
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}

/// The XDP program: IPv4 UDP to `port` (and to address `ip`, if given), neither
/// fragmented nor with options, goes to the socket in `map` at the frame's queue (XDP_PASS if
/// there is none); the rest passes.
fn program(map: BorrowedFd<'_>, port: u16, ip: Option<Ipv4Addr>) -> Vec<u64> {
    // Loads of packet bytes read memory order: a big-endian field compares against its
    // bytes read as a little-endian number.
    let be16 = |v: u16| i32::from(u16::from_le_bytes(v.to_be_bytes()));
    // Jumps to `pass`, patched below.
    const PASS: i16 = i16::MIN;
    let mut p = vec![
        insn(0xbf, 6, 1, 0, 0),               // r6 = ctx
        insn(0x61, 2, 6, 0, 0),               // r2 = ctx->data
        insn(0x61, 3, 6, 4, 0),               // r3 = ctx->data_end
        insn(0xbf, 4, 2, 0, 0),               // r4 = r2
        insn(0x07, 4, 0, 0, 42),              // r4 += Ethernet + IPv4 + UDP headers
        insn(0x2d, 4, 3, PASS, 0),            // if r4 > r3: pass
        insn(0x69, 5, 2, 12, 0),              // r5 = EtherType
        insn(0x55, 5, 0, PASS, be16(0x0800)), // if not IPv4: pass
        insn(0x71, 5, 2, 23, 0),              // r5 = IP protocol
        insn(0x55, 5, 0, PASS, 17),           // if not UDP: pass
        insn(0x71, 5, 2, 14, 0),              // r5 = IP version and header length
        insn(0x55, 5, 0, PASS, 0x45),         // if options: pass
        insn(0x69, 5, 2, 20, 0),              // r5 = flags and fragment offset
        insn(0x45, 5, 0, PASS, be16(0x3fff)), // if a fragment: pass
        insn(0x69, 5, 2, 36, 0),              // r5 = UDP destination port
        insn(0x55, 5, 0, PASS, be16(port)),   // if not ours: pass
    ];
    if let Some(ip) = ip {
        p.extend([
            insn(0x61, 5, 2, 30, 0), // r5 = IP destination
            // 32-bit compare: the immediate is not sign-extended against a 64-bit r5.
            insn(0x56, 5, 0, PASS, u32::from_le_bytes(ip.octets()) as i32), // if not ours: pass
        ]);
    }
    p.extend([
        insn(0x61, 2, 6, 16, 0),              // r2 = ctx->rx_queue_index
        insn(0x18, 1, 1, 0, map.as_raw_fd()), // r1 = the map (64-bit load, two slots)
        insn(0, 0, 0, 0, 0),                  //
        insn(0xb7, 3, 0, 0, 2),               // r3 = XDP_PASS when the queue has no socket
        insn(0x85, 0, 0, 0, 51),              // r0 = bpf_redirect_map(r1, r2, r3)
        insn(0x95, 0, 0, 0, 0),               // return r0
        insn(0xb7, 0, 0, 0, 2),               // pass: r0 = XDP_PASS
        insn(0x95, 0, 0, 0, 0),               // return r0
    ]);
    let pass = p.len() as i16 - 2;
    for (i, x) in p.iter_mut().enumerate() {
        let jump = matches!(*x as u8 & 0x07, 0x05 | 0x06);
        if jump && (*x >> 16) as u16 == PASS as u16 {
            *x = *x & !(0xffff << 16) | u64::from((pass - i as i16 - 1) as u16) << 16;
        }
    }
    p
}

/// A ring shared with the kernel: producer and consumer indices and the entries.
#[derive(Debug)]
struct Ring {
    base: *mut libc::c_void,
    len: usize,
    prod: *const AtomicU32,
    cons: *const AtomicU32,
    desc: *mut u8,
    /// Entries (a power of two).
    size: u32,
}

impl Ring {
    /// Maps the ring of `fd` at page offset `pgoff`, of `size` entries of `elem` bytes.
    fn map(
        fd: BorrowedFd<'_>,
        off: &libc::xdp_ring_offset,
        pgoff: u64,
        (size, elem): (u32, usize),
    ) -> io::Result<Ring> {
        let len = off.desc as usize + size as usize * elem;
        // SAFETY: a shared mapping of the ring the kernel created for `fd` at this offset,
        // of the length its reported layout gives; no existing memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let at = |o: u64| base.cast::<u8>().wrapping_add(o as usize);
        Ok(Ring {
            base,
            len,
            prod: at(off.producer).cast(),
            cons: at(off.consumer).cast(),
            desc: at(off.desc),
            size,
        })
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: the kernel's layout puts an aligned u32 index there, mapped for the life of
        // `self`; both sides access it atomically.
        unsafe { &*self.prod }
    }

    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as for `prod`.
        unsafe { &*self.cons }
    }

    /// Entry `i` (any index: taken modulo the ring) as a `T`.
    fn entry<T>(&self, i: u32) -> *mut T {
        self.desc.cast::<T>().wrapping_add((i % self.size) as usize)
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base` and `len` are the mapping made in `Ring::map`, unmapped once here.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

/// Counters of an [`Xsk`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct XskStats {
    /// Frames taken from the receive ring.
    pub received: u64,
    /// Frames handed to the kernel to send.
    pub sent: u64,
    /// `sendto` calls that made the kernel send (in copy mode, one per batch).
    pub kicks: u64,
    /// Descriptors from the kernel that pointed outside the frame memory (never expected).
    pub bad_descriptors: u64,
}

/// Frames for the socket that the kernel dropped before they reached its receive ring.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct KernelDrops {
    /// The receive ring was full: the application had not taken what was there.
    pub ring_full: u64,
    /// No free frame to copy one into (all with the application), or one longer than a
    /// frame.
    pub other: u64,
}

/// An AF_XDP socket on queue 0 of a device, its frame memory and rings, and the XDP program
/// that steers one UDP port to it. See the module's calling protocol.
#[derive(Debug)]
pub(crate) struct Xsk {
    // Field order is drop order: the link (detaching the program) before the socket.
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    rx: Ring,
    tx: Ring,
    fill: Ring,
    comp: Ring,
    sock: OwnedFd,
    umem: *mut u8,
    tx_free: Vec<u64>,
    /// Receive frames taken from the ring, the process's until the next `recv`.
    held: Vec<(u64, u32)>,
    mac: [u8; 6],
    stats: XskStats,
}

// SAFETY: the mappings and the descriptors are owned by the `Xsk` alone; nothing in it is
// tied to the thread that created it.
unsafe impl Send for Xsk {}
// SAFETY: through `&Xsk` only the rings' indices are read (atomically) and frames the
// process holds are read, which the kernel does not write meanwhile.
unsafe impl Sync for Xsk {}

const UMEM_LEN: usize = FRAME * (RX_FRAMES + TX_FRAMES);

impl Xsk {
    /// Opens a socket on queue 0 of interface `ifindex` (copy mode) and steers to it the UDP
    /// datagrams for `port` (and address `ip`, if given). Needs CAP_NET_ADMIN and CAP_BPF
    /// (root), and a driver with XDP of its own; fails if the interface already has an XDP
    /// program.
    pub(crate) fn open(ifindex: u32, port: u16, ip: Option<Ipv4Addr>) -> io::Result<Xsk> {
        let ctx =
            |what: &str, e: io::Error| io::Error::new(e.kind(), format!("AF_XDP {what}: {e}"));
        // SAFETY: socket(2) with constant arguments.
        let fd = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(ctx("socket", io::Error::last_os_error()));
        }
        let sock = owned(fd.into());
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let umem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                UMEM_LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if umem == libc::MAP_FAILED {
            return Err(ctx("frame memory", io::Error::last_os_error()));
        }
        let umem = umem.cast::<u8>();
        // From here the mapping is freed by the `Xsk`, or by this guard on an early return.
        struct Unmap(*mut u8);
        impl Drop for Unmap {
            fn drop(&mut self) {
                if !self.0.is_null() {
                    // SAFETY: the UMEM mapping made above, unmapped once.
                    unsafe { libc::munmap(self.0.cast(), UMEM_LEN) };
                }
            }
        }
        let mut guard = Unmap(umem);
        let set = |opt: libc::c_int, val: *const libc::c_void, len: usize| -> io::Result<()> {
            // SAFETY: `val` points to a live value of `len` bytes of the type the option takes.
            let rc =
                unsafe { libc::setsockopt(sock.as_raw_fd(), libc::SOL_XDP, opt, val, len as u32) };
            if rc < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        };
        let reg = libc::xdp_umem_reg {
            addr: umem as u64,
            len: UMEM_LEN as u64,
            chunk_size: FRAME as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        set(
            libc::XDP_UMEM_REG,
            (&raw const reg).cast(),
            std::mem::size_of_val(&reg),
        )
        .map_err(|e| ctx("frame memory", e))?;
        for (opt, entries) in [
            (libc::XDP_UMEM_FILL_RING, RX_RING),
            (libc::XDP_UMEM_COMPLETION_RING, TX_RING),
            (libc::XDP_RX_RING, RX_RING),
            (libc::XDP_TX_RING, TX_RING),
        ] {
            set(opt, (&raw const entries).cast(), 4).map_err(|e| ctx("rings", e))?;
        }
        // SAFETY: all-zero bytes are a valid `xdp_mmap_offsets` (integers only).
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut off_len = std::mem::size_of_val(&off) as libc::socklen_t;
        // SAFETY: `off` is writable and `off_len` its size; the kernel writes at most that.
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&raw mut off).cast(),
                &mut off_len,
            )
        };
        if rc < 0 {
            return Err(ctx("ring layout", io::Error::last_os_error()));
        }
        let s = sock.as_fd();
        let rx = Ring::map(s, &off.rx, libc::XDP_PGOFF_RX_RING as u64, (RX_RING, 16))
            .map_err(|e| ctx("rings", e))?;
        let tx = Ring::map(s, &off.tx, libc::XDP_PGOFF_TX_RING as u64, (TX_RING, 16))
            .map_err(|e| ctx("rings", e))?;
        let fill = Ring::map(s, &off.fr, libc::XDP_UMEM_PGOFF_FILL_RING, (RX_RING, 8))
            .map_err(|e| ctx("rings", e))?;
        let comp = Ring::map(
            s,
            &off.cr,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            (TX_RING, 8),
        )
        .map_err(|e| ctx("rings", e))?;
        let addr = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: 0,
            sxdp_shared_umem_fd: 0,
        };
        // A socket closed on this queue moments ago is released by the kernel in deferred
        // work (tens of milliseconds): a busy queue is tried again for up to a second.
        let since = std::time::Instant::now();
        loop {
            // SAFETY: `addr` is a valid `sockaddr_xdp` of the size passed.
            let rc = unsafe {
                libc::bind(
                    sock.as_raw_fd(),
                    (&raw const addr).cast(),
                    std::mem::size_of_val(&addr) as libc::socklen_t,
                )
            };
            if rc == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EBUSY) {
                return Err(ctx("bind", e));
            }
            if since.elapsed() > std::time::Duration::from_secs(1) {
                return Err(ctx(
                    "bind (queue 0 of the interface already has an AF_XDP socket)",
                    e,
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mut a = [0u64; 16];
        a[0] = BPF_MAP_TYPE_XSKMAP | 4 << 32; // map type, key size
        a[1] = 4 | 1 << 32; // value size, entries
        let map = owned(bpf(BPF_MAP_CREATE, &mut a).map_err(|e| ctx("map", e))?);
        let key = 0u32;
        let value = sock.as_raw_fd() as u32;
        let mut a = [0u64; 16];
        a[0] = map.as_raw_fd() as u64;
        a[1] = &raw const key as u64;
        a[2] = &raw const value as u64;
        bpf(BPF_MAP_UPDATE_ELEM, &mut a).map_err(|e| ctx("map", e))?;
        let insns = program(map.as_fd(), port, ip);
        let license = c"GPL";
        let mut a = [0u64; 16];
        a[0] = BPF_PROG_TYPE_XDP | (insns.len() as u64) << 32;
        a[1] = insns.as_ptr() as u64;
        a[2] = license.as_ptr() as u64;
        a[8] = BPF_XDP << 32; // expected attach type
        let prog = owned(bpf(BPF_PROG_LOAD, &mut a).map_err(|e| ctx("program", e))?);
        let attach = |mode: u64| {
            let mut a = [0u64; 16];
            a[0] = prog.as_raw_fd() as u64 | u64::from(ifindex) << 32;
            a[1] = BPF_XDP | mode << 32;
            bpf(BPF_LINK_CREATE, &mut a)
        };
        // The device's own XDP if it has one, the generic one otherwise.
        // The device's own XDP only: the kernel's generic XDP would hand the socket
        // segmentation-offload and GRO super-frames, many datagrams as one.
        let link = match attach(XDP_FLAGS_DRV_MODE) {
            Ok(l) => l,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                return Err(ctx("attach (the interface has an XDP program already)", e))
            }
            Err(e) => {
                return Err(ctx(
                    "attach (the interface's driver has no XDP of its own; veth and most \
                     server NICs' drivers have)",
                    e,
                ))
            }
        };
        let link = owned(link);
        guard.0 = std::ptr::null_mut();
        let mut xsk = Xsk {
            _link: link,
            _prog: prog,
            _map: map,
            rx,
            tx,
            fill,
            comp,
            sock,
            umem,
            tx_free: (RX_FRAMES..RX_FRAMES + TX_FRAMES)
                .map(|i| (i * FRAME) as u64)
                .collect(),
            held: Vec::with_capacity(RX_FRAMES),
            mac: mac_of(ifindex)?,
            stats: XskStats::default(),
        };
        for i in 0..RX_FRAMES {
            xsk.release((i * FRAME) as u64);
        }
        Ok(xsk)
    }

    /// The socket, to wait on with `poll(2)` (readable: frames on the receive ring).
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// The interface's hardware address.
    pub(crate) fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Counters.
    pub(crate) fn stats(&self) -> XskStats {
        self.stats
    }

    /// What the kernel dropped on the way to the receive ring, from its counters
    /// (XDP_STATISTICS; zeros if it does not say).
    pub(crate) fn kernel_drops(&self) -> KernelDrops {
        // SAFETY: all-zero bytes are a valid `xdp_statistics` (integers only).
        let mut st: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
        // SAFETY: `st` is writable and `len` its size; the kernel writes at most that.
        let rc = unsafe {
            libc::getsockopt(
                self.sock.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&raw mut st).cast(),
                &mut len,
            )
        };
        if rc < 0 || len as usize != std::mem::size_of_val(&st) {
            return KernelDrops::default();
        }
        KernelDrops {
            ring_full: st.rx_ring_full,
            other: st.rx_dropped,
        }
    }

    /// Bytes of frame memory.
    pub(crate) fn memory(&self) -> usize {
        UMEM_LEN
    }

    /// Gives the frames held since the last call back to the kernel, then takes up to
    /// `max` (at most [`RX_FRAMES`]) from the receive ring and holds them until the next
    /// call: [`Self::frame`] reads them. Returns how many it holds.
    pub(crate) fn recv(&mut self, max: usize) -> usize {
        let held = std::mem::take(&mut self.held);
        for &(addr, _) in &held {
            self.release(addr);
        }
        self.held = held;
        self.held.clear();
        let cons = self.rx.cons().load(Ordering::Relaxed);
        let prod = self.rx.prod().load(Ordering::Acquire);
        let n = prod.wrapping_sub(cons).min(max.min(RX_FRAMES) as u32);
        for i in 0..n {
            // SAFETY: entries between the consumer and the producer index are written by the
            // kernel before it publishes the producer (acquired above); the pointer is within
            // the mapped ring.
            let d: libc::xdp_desc =
                unsafe { self.rx.entry::<libc::xdp_desc>(cons.wrapping_add(i)).read() };
            let end = d.addr.checked_add(u64::from(d.len));
            if end.is_some_and(|e| e <= (RX_FRAMES * FRAME) as u64) {
                self.held.push((d.addr, d.len));
            } else {
                self.stats.bad_descriptors += 1;
            }
        }
        self.rx
            .cons()
            .store(cons.wrapping_add(n), Ordering::Release);
        self.stats.received += u64::from(n);
        self.held.len()
    }

    /// The bytes of held frame `i` (of the last [`Self::recv`]).
    pub(crate) fn frame(&self, i: usize) -> Option<&[u8]> {
        let &(addr, len) = self.held.get(i)?;
        // SAFETY: `recv` held only descriptors within the receive half of the UMEM; the
        // kernel writes a frame only from the fill ring, and a held frame goes back there
        // only in the next `recv`, which needs `&mut self`: not while this slice lives.
        Some(unsafe { std::slice::from_raw_parts(self.umem.add(addr as usize), len as usize) })
    }

    /// Gives a receive frame back to the kernel (only `open` and `recv`: each frame once).
    fn release(&mut self, addr: u64) {
        let prod = self.fill.prod().load(Ordering::Relaxed);
        // SAFETY: the fill ring has room for every receive frame (RX_RING >= RX_FRAMES) and this
        // frame is not on it; the pointer is within the mapped ring.
        unsafe {
            self.fill
                .entry::<u64>(prod)
                .write(addr & !(FRAME as u64 - 1))
        };
        self.fill
            .prod()
            .store(prod.wrapping_add(1), Ordering::Release);
    }

    /// Takes a free send frame and lets `write` fill it: `Some(len)` queues its first `len`
    /// bytes for sending (see [`Self::kick`]), `None` puts the frame back. Returns false
    /// when no frame was free.
    pub(crate) fn send_with(&mut self, write: impl FnOnce(&mut [u8]) -> Option<usize>) -> bool {
        if self.tx_free.is_empty() {
            self.reap();
        }
        let Some(addr) = self.tx_free.pop() else {
            return false;
        };
        // SAFETY: a send frame on the free list is owned by the process alone (the kernel
        // has it only between being queued here and its completion, when `reap` puts it
        // back); within the UMEM's send half. The slice ends with the closure.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.umem.add(addr as usize), FRAME) };
        let Some(len) = write(bytes) else {
            self.tx_free.push(addr);
            return true;
        };
        let prod = self.tx.prod().load(Ordering::Relaxed);
        let d = libc::xdp_desc {
            addr,
            len: len.min(FRAME) as u32,
            options: 0,
        };
        // SAFETY: the send ring has room for every send frame (TX_RING >= TX_FRAMES) and this
        // one is not on it; the pointer is within the mapped ring.
        unsafe { self.tx.entry::<libc::xdp_desc>(prod).write(d) };
        self.tx
            .prod()
            .store(prod.wrapping_add(1), Ordering::Release);
        self.stats.sent += 1;
        true
    }

    /// Makes the kernel send what is queued.
    /// A call sends a batch of at most 32 frames and says EAGAIN if more wait: it is called
    /// again until none does. Busy or short of buffers, the rest goes with the next kick
    /// (see [`Self::tx_pending`]).
    pub(crate) fn kick(&mut self) -> io::Result<()> {
        for _ in 0..TX_FRAMES / 32 + 1 {
            self.stats.kicks += 1;
            // SAFETY: sendto(2) with no data and no address, on our socket.
            let rc = unsafe {
                libc::sendto(
                    self.sock.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if rc >= 0 {
                break;
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EAGAIN) if self.tx_pending() => continue,
                Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS) => break,
                _ => return Err(e),
            }
        }
        self.reap();
        Ok(())
    }

    /// Whether frames queued for sending wait for a kick.
    pub(crate) fn tx_pending(&self) -> bool {
        self.tx.prod().load(Ordering::Relaxed) != self.tx.cons().load(Ordering::Acquire)
    }

    /// Frames the kernel has sent, back to the free list.
    fn reap(&mut self) {
        let cons = self.comp.cons().load(Ordering::Relaxed);
        let prod = self.comp.prod().load(Ordering::Acquire);
        let n = prod.wrapping_sub(cons);
        for i in 0..n {
            // SAFETY: published entries (acquired above) within the mapped ring.
            let addr = unsafe { self.comp.entry::<u64>(cons.wrapping_add(i)).read() };
            if (RX_FRAMES * FRAME..UMEM_LEN).contains(&(addr as usize))
                && self.tx_free.len() < TX_FRAMES
            {
                self.tx_free.push(addr & !(FRAME as u64 - 1));
            } else {
                self.stats.bad_descriptors += 1;
            }
        }
        self.comp.cons().store(prod, Ordering::Release);
    }
}

impl Drop for Xsk {
    fn drop(&mut self) {
        // SAFETY: the UMEM mapping made in `open`, unmapped once. The socket and the rings
        // that refer to it are closed and unmapped after this (field order), and the kernel
        // holds its own reference to the pages while the socket lives.
        unsafe { libc::munmap(self.umem.cast(), UMEM_LEN) };
    }
}

/// The hardware address of interface `ifindex` (in the calling thread's network namespace:
/// sysfs would show the namespace it was mounted in).
fn mac_of(ifindex: u32) -> io::Result<[u8; 6]> {
    // SAFETY: `ifreq` is a plain C struct of integers, arrays and unions of them; all-zero
    // bytes are a valid value of it.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    // SAFETY: `ifr_name` has IF_NAMESIZE bytes, as if_indextoname requires.
    if unsafe { libc::if_indextoname(ifindex, req.ifr_name.as_mut_ptr()) }.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket(2) with constant arguments.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let sock = owned(fd.into());
    // SAFETY: SIOCGIFHWADDR reads the name and writes the address of one `struct ifreq`,
    // valid and exclusively borrowed for the call.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFHWADDR filled in the hardware-address member of the union.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    let mut mac = [0u8; 6];
    for (m, d) in mac.iter_mut().zip(data) {
        *m = d as u8;
    }
    Ok(mac)
}

/// The index of interface `name`.
pub(crate) fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name with a NUL"))?;
    // SAFETY: `c` is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {name}"),
        )),
        i => Ok(i),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_jumps_to_pass_and_loads_the_port_in_memory_order() {
        // No kernel needed: the shape of the program.
        // SAFETY: a descriptor number never used, only read as a number (no I/O on it).
        let fake = unsafe { BorrowedFd::borrow_raw(1000) };
        for ip in [None, Some(Ipv4Addr::new(10, 0, 0, 200))] {
            let p = program(fake, 0x1f4d, ip);
            let pass = p.len() - 2;
            let jumps: Vec<usize> = (0..p.len())
                .filter(|&i| [0x2d, 0x55, 0x45, 0x56].contains(&(p[i] as u8)))
                .collect();
            assert_eq!(jumps.len(), 6 + usize::from(ip.is_some()));
            for i in jumps {
                let off = (p[i] >> 16) as u16 as i16;
                assert_eq!(i as i64 + 1 + i64::from(off), pass as i64, "jump at {i}");
            }
            assert_eq!((p[15] >> 32) as u32, 0x4d1f);
            if ip.is_some() {
                assert_eq!((p[17] >> 32) as u32, 0xc800_000a);
            }
            let map = p.iter().position(|&x| x as u8 == 0x18).unwrap();
            assert_eq!((p[map] >> 32) as i32, 1000);
        }
    }
}
