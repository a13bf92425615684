//! Compatibility shapes for code ported from other rate limiters: their method names and return
//! types, kept apart from floodgate's own verbs ([`Limiter::try_acquire`](crate::Limiter),
//! [`acquire`](crate::Limiter::acquire) → `Duration`, [`Decision`](crate::Decision)).
//!
//! * [`guava`]: Guava's `RateLimiter` (`acquire(n)` → seconds slept as a `double`,
//!   `tryAcquire(n, timeout)` → `boolean`) on [`SmoothBursty`](crate::SmoothBursty) and
//!   [`SmoothWarmingUp`](crate::SmoothWarmingUp).

pub mod guava;
