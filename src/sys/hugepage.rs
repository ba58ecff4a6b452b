//! An allocator that can back large buffers with transparent huge pages.
//!
//! A transfer's send and receive buffers are tens of megabytes that every byte is copied
//! through. On 4 KiB pages their first pass costs a page fault every 4 KiB (a quarter of a
//! loopback sender's CPU in its first 120 ms), and every copy walks them through the TLB a
//! page at a time. [`HugePageAlloc`] maps each allocation of at least [`HUGE_MIN`] bytes on
//! its own, aligned to 2 MiB, and asks for huge pages there (`madvise(MADV_HUGEPAGE)`, which
//! works where `/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` or `always`, and is
//! a harmless no-op where it is `never`). Everything smaller goes to the system allocator.
//!
//! The `slipstream` binary installs it as its global allocator; a program using the library
//! may do the same. The advice is off until [`HugePageAlloc::enable`] (`SLIPSTREAM_HUGEPAGES=1`
//! for the binary): over loopback, 1 GiB transfers ran 16 % faster with it at 9 % less CPU,
//! but on an emulated 10 ms path with 1 % loss they lost up to 5 % of the link in most runs
//! (docs/benchmarks.md), and the cause is not yet known. A huge page's first touch zeroes
//! 2 MiB at once, and where the kernel compacts memory to find one (`defrag` set to
//! `madvise`, the default) it can wait for that too. Without the advice large blocks are
//! still mapped on their own, and go back to the kernel when freed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

/// Allocations of at least this many bytes get a mapping of their own (on huge pages when
/// enabled).
pub const HUGE_MIN: usize = 4 << 20;
/// A transparent huge page (x86-64, arm64 with 4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// The global allocator: the system's, with large allocations mapped on their own (on huge
/// pages when enabled).
#[derive(Debug, Clone, Copy, Default)]
pub struct HugePageAlloc;

impl HugePageAlloc {
    /// Asks for huge pages for the large blocks allocated from now on.
    pub fn enable() {
        ENABLED.store(true, Ordering::Relaxed);
    }
    /// Stops asking for huge pages: large blocks allocated from now on get a mapping of
    /// their own on small pages (the default).
    pub fn disable() {
        ENABLED.store(false, Ordering::Relaxed);
    }
}

/// Whether a block of `layout` is (or was) mapped here. A function of the layout alone, which
/// `dealloc` and `realloc` are given unchanged, so the owner of a block is never in doubt.
fn ours(layout: &Layout) -> bool {
    layout.size() >= HUGE_MIN && layout.align() <= HUGE_PAGE
}

/// Length of the mapping behind a block of `size` bytes.
fn mapped_len(size: usize) -> usize {
    size.div_ceil(HUGE_PAGE) * HUGE_PAGE
}

/// Maps `size` bytes (zero-filled, untouched until written) at a 2 MiB boundary and, when
/// enabled, asks for huge pages there. Null when the kernel has no room.
fn map(size: usize) -> *mut u8 {
    let len = mapped_len(size);
    let Some(span) = len.checked_add(HUGE_PAGE) else {
        return std::ptr::null_mut();
    };
    // SAFETY: a fresh private anonymous mapping: no file, no existing memory is touched.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            span,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    let base = base as usize;
    let start = base.next_multiple_of(HUGE_PAGE);
    let head = start - base;
    let tail = span - head - len;
    // SAFETY: both trimmed ranges and the advised one lie inside the mapping just made, and
    // nothing else refers to it yet.
    unsafe {
        if head > 0 {
            libc::munmap(base as *mut libc::c_void, head);
        }
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
        if ENABLED.load(Ordering::Relaxed) {
            // Advice only: if the kernel declines, the block works on small pages.
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
    }
    start as *mut u8
}

// SAFETY: a block is the system allocator's or a mapping of its own, as `ours` says from its
// layout; a mapping is `mapped_len` of its size long, aligned to 2 MiB when made and to a
// page after `mremap` (used only for layouts aligned to a page or less), which satisfies
// every alignment `ours` accepts.
unsafe impl GlobalAlloc for HugePageAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ours(&layout) {
            map(layout.size())
        } else {
            // SAFETY: the caller's contract, passed on.
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if ours(&layout) {
            // Anonymous mappings are zero-filled.
            map(layout.size())
        } else {
            // SAFETY: the caller's contract, passed on.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ours(&layout) {
            // SAFETY: `ptr` is a mapping of `mapped_len(size)` bytes made by `map` (or resized
            // by `realloc` to this size), and the caller gives it up.
            unsafe { libc::munmap(ptr as *mut libc::c_void, mapped_len(layout.size())) };
        } else {
            // SAFETY: the system allocator's block, passed back with its layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        match (ours(&layout), ours(&new_layout)) {
            // mremap keeps page alignment only, which is all most layouts ask for.
            (true, true) if layout.align() <= 4096 => {
                // SAFETY: resizes our own mapping; the kernel moves it if it must, keeping
                // its contents and its huge-page advice. On failure it leaves the old
                // mapping as it was, which is what a null return promises the caller.
                let q = unsafe {
                    libc::mremap(
                        ptr as *mut libc::c_void,
                        mapped_len(layout.size()),
                        mapped_len(new_size),
                        libc::MREMAP_MAYMOVE,
                    )
                };
                if q == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    q as *mut u8
                }
            }
            // SAFETY: the system allocator's block stays with the system allocator.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            // Crossing between the two, or a large block with a large alignment: allocate,
            // copy, free.
            // SAFETY: `new_layout` is valid (checked above); the copy stays within both
            // blocks; the old block is freed with its own layout.
            _ => unsafe {
                let fresh = self.alloc(new_layout);
                if !fresh.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                fresh
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_blocks_are_mapped_aligned_zeroed_and_keep_contents_when_resized() {
        let a = HugePageAlloc;
        let l = Layout::from_size_align(HUGE_MIN + 123, 8).unwrap();
        // SAFETY: the test allocates, uses within bounds and frees with matching layouts.
        unsafe {
            let p = a.alloc_zeroed(l);
            assert!(!p.is_null() && (p as usize) & (HUGE_PAGE - 1) == 0);
            let s = std::slice::from_raw_parts_mut(p, l.size());
            assert!(s.iter().all(|&b| b == 0));
            for (i, b) in s.iter_mut().enumerate() {
                *b = i as u8;
            }
            // Grow large to large, then shrink below the threshold: contents kept.
            let q = a.realloc(p, l, 3 * HUGE_MIN);
            assert!(!q.is_null() && (q as usize) & 4095 == 0);
            let s = std::slice::from_raw_parts(q, l.size());
            assert!(s.iter().enumerate().all(|(i, &b)| b == i as u8));
            let l3 = Layout::from_size_align(3 * HUGE_MIN, 8).unwrap();
            let r = a.realloc(q, l3, 1000);
            assert!(!r.is_null());
            let s = std::slice::from_raw_parts(r, 1000);
            assert!(s.iter().enumerate().all(|(i, &b)| b == i as u8));
            // And back up, across the threshold the other way.
            let l1k = Layout::from_size_align(1000, 8).unwrap();
            let t = a.realloc(r, l1k, HUGE_MIN);
            assert!(!t.is_null() && (t as usize) & (HUGE_PAGE - 1) == 0);
            let s = std::slice::from_raw_parts(t, 1000);
            assert!(s.iter().enumerate().all(|(i, &b)| b == i as u8));
            a.dealloc(t, Layout::from_size_align(HUGE_MIN, 8).unwrap());
        }
    }

    #[test]
    fn small_and_overaligned_blocks_go_to_the_system_allocator() {
        let a = HugePageAlloc;
        for l in [
            Layout::from_size_align(64, 8).unwrap(),
            Layout::from_size_align(HUGE_MIN - 1, 64).unwrap(),
            Layout::from_size_align(HUGE_MIN, 4 * HUGE_PAGE).unwrap(),
        ] {
            // SAFETY: allocated and freed with the same layout.
            unsafe {
                let p = a.alloc(l);
                assert!(!p.is_null());
                assert_eq!((p as usize) & (l.align() - 1), 0);
                *p = 7;
                a.dealloc(p, l);
            }
        }
    }
}
