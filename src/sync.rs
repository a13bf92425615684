//! Atomics shim: `std`'s atomics normally, loom's under `--cfg floodgate_loom`, so the loom
//! models in `loom-tests/` check the exact code that ships.
//!
//! The cfg is floodgate's own, not the bare `loom` that many crates share: a downstream crate
//! that runs its own loom tests with `RUSTFLAGS="--cfg loom"` gets floodgate with `std`'s
//! atomics (loom's would panic outside its `loom::model`).
//! The waiter queue of [`InFlight`](crate::concurrency::InFlight) also takes its mutex and
//! thread parking from here.

#[cfg(floodgate_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(floodgate_loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};

#[cfg(floodgate_loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(floodgate_loom)]
pub(crate) use loom::thread;
#[cfg(not(floodgate_loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
#[cfg(not(floodgate_loom))]
pub(crate) use std::thread;
