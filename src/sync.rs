//! Atomics shim: `std`'s atomics normally, loom's under `--cfg floodgate_loom`, so the loom
//! models in `loom-tests/` check the exact code that ships.
//!
//! The cfg is floodgate's own, not the bare `loom` that many crates share: a downstream crate
//! that runs its own loom tests with `RUSTFLAGS="--cfg loom"` gets floodgate with `std`'s
//! atomics (loom's would panic outside its `loom::model`).
//! The waiter queue of [`InFlight`](crate::concurrency::InFlight) also takes its mutex and
//! thread parking from here.

#[cfg(floodgate_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
#[cfg(not(floodgate_loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

#[cfg(floodgate_loom)]
pub(crate) use loom::thread_local;
#[cfg(not(floodgate_loom))]
pub(crate) use std::thread_local;

#[cfg(not(floodgate_loom))]
thread_local! {
    /// Calls left in which this thread reads a state word for writing (see [`read_word`]):
    /// re-armed by a lost compare-exchange, counted down by every read.
    static CONTENDED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}
#[cfg(floodgate_loom)]
thread_local! {
    /// As above, per loom model thread (loom's thread locals have no `const` form).
    static CONTENDED: std::cell::Cell<u32> = std::cell::Cell::new(0);
}

/// Calls after a lost compare-exchange during which this thread reads for writing.
const CONTENDED_CALLS: u32 = 64;

/// Loads a state word a decision will be computed from, and possibly written by a
/// compare-exchange. Normally a plain Acquire load, so a denial (which writes nothing) leaves the
/// cache line shared. For [`CONTENDED_CALLS`] calls after this thread lost a compare-exchange
/// ([`lost_race`]), it is `fetch_add(0)` instead: a read-modify-write that changes nothing but
/// takes the line exclusively at once, so the admission's compare-exchange does not have to ask
/// for it a second time while another core holds a shared copy (measured: GCRA admitting at 2
/// threads 0.89 → 1.27 × governor). Either read is the word's latest value or an older one the
/// compare-exchange then rejects; the decision never depends on which read was used.
#[inline(always)]
pub(crate) fn read_word(word: &AtomicU64) -> u64 {
    let left = CONTENDED.with(std::cell::Cell::get);
    if left == 0 {
        // Acquire: pairs with the Release (AcqRel) compare-exchange that published the word.
        return word.load(Ordering::Acquire);
    }
    CONTENDED.with(|c| c.set(left - 1));
    // Acquire: as the load above. Adds 0: the word is unchanged.
    word.fetch_add(0, Ordering::Acquire)
}

/// Records that this thread lost a compare-exchange on a state word: its next reads are for
/// writing ([`read_word`]).
#[inline(always)]
pub(crate) fn lost_race() {
    CONTENDED.with(|c| c.set(CONTENDED_CALLS));
}

#[cfg(floodgate_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(floodgate_loom)]
pub(crate) use loom::thread;
#[cfg(not(floodgate_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
#[cfg(not(floodgate_loom))]
pub(crate) use std::thread;
