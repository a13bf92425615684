//! [`KeyedLimiter`]: what the HTTP layer asks of a per-key limiter, and its two implementations.

use crate::clock::Clock;
use crate::decision::{AcquireError, Decision};
use crate::keyed::{Keyed, PenalizedKeyed};
use crate::limiter::Algorithm;
use std::hash::Hash;

/// A limiter the middleware can check per key: [`Keyed`] and [`PenalizedKeyed`] (with a
/// penalty box, a client that keeps hammering is blocked outright).
///
/// ```
/// use floodgate::middleware::KeyedLimiter;
/// use floodgate::{FixedWindow, Keyed};
/// let keyed: Keyed<u64, _> = Keyed::new(FixedWindow::new(1, std::time::Duration::from_secs(1))?, 10)?;
/// assert!(KeyedLimiter::try_acquire(&keyed, &7, 1)?.is_allowed());
/// assert!(KeyedLimiter::check_permits(&keyed, 2).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait KeyedLimiter<K>: Send + Sync + 'static {
    /// Takes `n` permits from `key`'s limiter if available now (as [`Keyed::try_acquire`]).
    ///
    /// # Errors
    /// [`AcquireError`] when `n` is zero or above the capacity.
    fn try_acquire(&self, key: &K, n: u32) -> Result<Decision, AcquireError>;

    /// Whether a request for `n` permits can ever be granted.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    fn check_permits(&self, n: u32) -> Result<(), AcquireError>;

    /// The clock the limiter reads (shaped requests measure their wait on it).
    fn clock(&self) -> &dyn Clock;
}

/// Implements [`KeyedLimiter`] for a keyed map type by its inherent methods.
macro_rules! keyed_limiter {
    ($ty:ident) => {
        impl<K, A, C> KeyedLimiter<K> for $ty<K, A, C>
        where
            K: Hash + Eq + Clone + Send + Sync + 'static,
            A: Algorithm,
            C: Clock,
        {
            #[inline]
            fn try_acquire(&self, key: &K, n: u32) -> Result<Decision, AcquireError> {
                $ty::try_acquire(self, key, n)
            }

            fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
                self.algorithm().check_permits(n)
            }

            fn clock(&self) -> &dyn Clock {
                $ty::<K, A, C>::clock(self)
            }
        }
    };
}

keyed_limiter!(Keyed);
keyed_limiter!(PenalizedKeyed);
