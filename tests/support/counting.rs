//! A global allocator that counts the allocations of the threads that ask it to, between
//! [`start`] and [`stop`]: the tests' proof that a hot path allocates nothing. Each test crate
//! that includes this module installs it with `#[global_allocator]`.

// Each test crate uses what it needs of this module.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The counting allocator (forwards to the system allocator).
pub struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
thread_local! { static MINE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) }; }

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) && MINE.with(|m| m.get()) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(p, l) }
    }
}

/// Counts this thread's allocations from now on if `count` (else only marks the thread).
pub fn start(count: bool) {
    MINE.with(|m| m.set(true));
    COUNTING.store(count, Ordering::SeqCst);
}

/// Stops counting.
pub fn stop() {
    COUNTING.store(false, Ordering::SeqCst);
    MINE.with(|m| m.set(false));
}

/// Allocations counted so far.
pub fn allocations() -> u64 {
    ALLOCS.load(Ordering::SeqCst)
}

/// Sets the count back to zero.
pub fn reset() {
    ALLOCS.store(0, Ordering::SeqCst);
}
