//! Atomics shim: `std`'s atomics normally, loom's under `--cfg loom`, so the loom models in
//! `loom-tests/` check the exact code that ships. The waiter queue of
//! [`InFlight`](crate::concurrency::InFlight) also takes its mutex and thread parking from here.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};
#[cfg(loom)]
pub(crate) use loom::thread;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};
#[cfg(not(loom))]
pub(crate) use std::thread;
