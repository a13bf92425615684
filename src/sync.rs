//! Atomics shim: `std`'s atomics normally, loom's under `--cfg loom`, so the loom models in
//! `loom-tests/` check the exact code that ships.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
