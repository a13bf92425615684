//! The 128-bit state word of [`SmoothWarmingUp`](super::SmoothWarmingUp).
//!
//! Normally `portable_atomic::AtomicU128`: lock-free wherever the CPU has a double-width CAS
//! (`cmpxchg16b` on x86-64, detected at run time; `casp` or LL/SC pairs on AArch64), which
//! [`SmoothWarmingUp::is_lock_free`](super::SmoothWarmingUp::is_lock_free) reports. Under
//! `--cfg floodgate_loom` (loom has no 128-bit atomics) it is one loom-checked location guarded
//! by a loom mutex: every load and every compare-exchange is its own scheduling point, so loom
//! explores the same interleavings of the CAS protocol (including failed CASes) as with a real
//! atomic.

#[cfg(not(floodgate_loom))]
pub(crate) use portable_atomic::AtomicU128 as AtomicWide;

#[cfg(floodgate_loom)]
pub(crate) use loom_wide::AtomicWide;

#[cfg(floodgate_loom)]
mod loom_wide {
    use crate::sync::Ordering;

    /// A 128-bit atomic location for loom models.
    #[derive(Debug)]
    pub(crate) struct AtomicWide(loom::sync::Mutex<u128>);

    impl AtomicWide {
        pub(crate) fn new(value: u128) -> Self {
            AtomicWide(loom::sync::Mutex::new(value))
        }

        fn lock(&self) -> loom::sync::MutexGuard<'_, u128> {
            self.0.lock().unwrap_or_else(|poison| poison.into_inner())
        }

        pub(crate) fn load(&self, _order: Ordering) -> u128 {
            *self.lock()
        }

        pub(crate) fn compare_exchange_weak(
            &self,
            current: u128,
            new: u128,
            _success: Ordering,
            _failure: Ordering,
        ) -> Result<u128, u128> {
            let mut word = self.lock();
            if *word == current {
                *word = new;
                Ok(current)
            } else {
                Err(*word)
            }
        }

        /// The same loop as `portable_atomic`'s `fetch_update`.
        pub(crate) fn fetch_update<F>(
            &self,
            success: Ordering,
            failure: Ordering,
            mut f: F,
        ) -> Result<u128, u128>
        where
            F: FnMut(u128) -> Option<u128>,
        {
            let mut previous = self.load(failure);
            while let Some(next) = f(previous) {
                match self.compare_exchange_weak(previous, next, success, failure) {
                    Ok(value) => return Ok(value),
                    Err(actual) => previous = actual,
                }
            }
            Err(previous)
        }

        pub(crate) fn is_lock_free() -> bool {
            false
        }
    }
}
