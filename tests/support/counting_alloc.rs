//! A global allocator that forwards to the system allocator and counts live heap bytes, for
//! measuring memory per key (tests and benches install it with `#[global_allocator]`).
#![allow(dead_code)] // each user uses a part

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// The counting allocator.
pub struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: a statistic, read after the work on the thread that did it.
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same layout contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Relaxed: as alloc.
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Heap bytes allocated and not yet freed, process-wide.
pub fn live_bytes() -> isize {
    // Relaxed: as alloc.
    LIVE_BYTES.load(Ordering::Relaxed)
}
