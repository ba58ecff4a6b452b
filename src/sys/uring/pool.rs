//! A pool of pre-allocated, fixed-size datagram buffers in one page-aligned region, and
//! [`Buf`], the handle that owns one slot of it.
//!
//! The region never moves or shrinks while any handle or kernel operation refers to it: the
//! memory is owned by [`PoolMem`], which handles and engines keep alive through an `Arc`.
//! Every slot has [`HEADROOM`] bytes in front of its payload, where io_uring's multishot
//! receive writes its per-datagram header (source address and control messages); the payload
//! always starts at the same place, so a buffer that was received into can be sent from
//! without moving its bytes.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::{Arc, Mutex};

/// Bytes in front of each slot's payload (multishot receive header: 16 bytes of
/// `io_uring_recvmsg_out`, 32 of source address, 80 of control messages).
pub(crate) const HEADROOM: usize = 128;

/// The memory of a pool and its list of free slots.
pub(crate) struct PoolMem {
    base: *mut u8,
    layout: Layout,
    slot_size: usize,
    nslots: usize,
    /// Free slots (capacity reserved for all of them: pushing never allocates).
    free: Mutex<Vec<u32>>,
}

impl std::fmt::Debug for PoolMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolMem")
            .field("slot_size", &self.slot_size)
            .field("nslots", &self.nslots)
            .finish()
    }
}

// SAFETY: the region is plain memory; which thread may touch which slot is decided by slot
// ownership (one `Buf`, or the kernel), never by shared references, and the free list is
// behind a mutex.
unsafe impl Send for PoolMem {}
// SAFETY: as above; `&PoolMem` only gives access to the free list (locked) and to raw
// addresses.
unsafe impl Sync for PoolMem {}

impl Drop for PoolMem {
    fn drop(&mut self) {
        // SAFETY: `base` came from `alloc_zeroed(self.layout)` and is freed once, here; no
        // handle is left (they hold an `Arc` to us) and engines drain the kernel before
        // dropping their reference.
        unsafe { dealloc(self.base, self.layout) }
    }
}

impl PoolMem {
    /// A pool of `nslots` slots with `payload` usable bytes each. The first `free` slots are
    /// on the free list; the others are handed out by the creator with [`PoolMem::take`].
    pub(crate) fn new(nslots: usize, payload: usize, free: usize) -> std::io::Result<Arc<Self>> {
        let slot_size = (HEADROOM + payload).next_multiple_of(64);
        let size = slot_size
            .checked_mul(nslots.max(1))
            .filter(|&s| s <= 1 << 30 && nslots <= u32::MAX as usize)
            .ok_or_else(|| std::io::Error::other("buffer pool too large"))?;
        let layout = Layout::from_size_align(size, 4096).map_err(std::io::Error::other)?;
        // SAFETY: `layout` has a non-zero size.
        let base = unsafe { alloc_zeroed(layout) };
        if base.is_null() {
            return Err(std::io::ErrorKind::OutOfMemory.into());
        }
        let mut list = Vec::with_capacity(nslots);
        list.extend((0..free.min(nslots) as u32).rev());
        Ok(Arc::new(PoolMem {
            base,
            layout,
            slot_size,
            nslots,
            free: Mutex::new(list),
        }))
    }

    /// Bytes per slot, headroom included.
    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Usable payload bytes per slot.
    pub(crate) fn payload_capacity(&self) -> usize {
        self.slot_size - HEADROOM
    }

    /// Start of the region.
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    /// Size of the region in bytes.
    pub(crate) fn region_len(&self) -> usize {
        self.layout.size()
    }

    /// Address of `slot`'s first byte (its headroom).
    pub(crate) fn slot_ptr(&self, slot: u32) -> *mut u8 {
        assert!((slot as usize) < self.nslots);
        // SAFETY: in bounds of the allocation (checked above).
        unsafe { self.base.add(slot as usize * self.slot_size) }
    }

    /// Takes a free slot, if any.
    pub(crate) fn claim(self: &Arc<Self>) -> Option<Buf> {
        let slot = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
        Some(Buf::new(self.clone(), slot, 0))
    }

    /// Free slots right now.
    pub(crate) fn free_count(&self) -> usize {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn release(&self, slot: u32) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(slot);
    }

    /// Makes a handle for `slot`, which the caller owns (it was never on the free list, or it
    /// came back from the kernel).
    pub(crate) fn take(self: &Arc<Self>, slot: u32, len: usize) -> Buf {
        Buf::new(self.clone(), slot, len)
    }
}

/// One buffer of a pool, owned exclusively: its bytes can be written in place, and it can be
/// handed to the stack (send or receive) without copying. Dropping it returns the slot to the
/// pool's free list.
///
/// [`Buf::as_mut`] gives the whole capacity; [`Buf::data`] the first [`Buf::len`] bytes (what
/// was received, or what will be sent).
pub struct Buf {
    mem: Arc<PoolMem>,
    slot: u32,
    len: u32,
}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buf")
            .field("slot", &self.slot)
            .field("len", &self.len)
            .finish()
    }
}

impl Buf {
    fn new(mem: Arc<PoolMem>, slot: u32, len: usize) -> Self {
        let len = len.min(mem.payload_capacity()) as u32;
        Buf { mem, slot, len }
    }

    /// Usable bytes.
    pub fn capacity(&self) -> usize {
        self.mem.payload_capacity()
    }

    /// Bytes of data (received, or set with [`Buf::set_len`]).
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether [`Buf::len`] is zero.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the data length (at most the capacity).
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.capacity()) as u32;
    }

    /// The data: the first [`Buf::len`] bytes.
    pub fn data(&self) -> &[u8] {
        &self.as_ref()[..self.len as usize]
    }

    /// Index of the slot in its pool (stable for the life of the pool).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Gives up the handle without returning the slot to the free list: the caller now
    /// accounts for the slot (it goes to the kernel).
    pub(crate) fn into_slot(self) -> u32 {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again; the Arc is moved out exactly once so
        // its count stays balanced.
        let _mem = unsafe { std::ptr::read(&me.mem) };
        me.slot
    }

    /// Address of the payload (for the kernel).
    pub(crate) fn payload_ptr(&self) -> *mut u8 {
        // SAFETY: HEADROOM < slot_size, in bounds of the slot.
        unsafe { self.mem.slot_ptr(self.slot).add(HEADROOM) }
    }

    /// The pool this buffer belongs to.
    pub(crate) fn pool(&self) -> &Arc<PoolMem> {
        &self.mem
    }
}

impl AsRef<[u8]> for Buf {
    /// The whole capacity.
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the slot's payload range is inside the live region (the Arc keeps it), and
        // this handle owns the slot exclusively: neither the kernel nor another handle
        // touches it while the handle exists.
        unsafe { std::slice::from_raw_parts(self.payload_ptr(), self.capacity()) }
    }
}

impl AsMut<[u8]> for Buf {
    /// The whole capacity, for writing in place.
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_ref`; `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.payload_ptr(), self.capacity()) }
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        self.mem.release(self.slot);
    }
}
