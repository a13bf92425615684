//! What a check returns ([`Decision`]); how rates are written ([`Rate`], in `rate.rs`); the
//! errors and the shared validation (in `error.rs`). One responsibility per file; everything is
//! re-exported here, at the paths it always had.

mod error;
mod rate;

pub use error::{AcquireError, ConfigError, validate_limit};
pub(crate) use error::{check_permits, window_nanos};
pub use rate::{MAX_RATE_ROUNDING_PER_MILLE, Rate};

use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

/// The answer to one check: allowed or not, plus what a server puts in its response headers
/// (`RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`, `Retry-After`).
///
/// ```
/// use floodgate::{AtomicLimiter, FixedWindow, Limiter, ManualClock};
/// use std::time::Duration;
/// let limiter = AtomicLimiter::with_clock(
///     FixedWindow::new(2, Duration::from_secs(1)).unwrap(),
///     ManualClock::new(),
/// );
/// let d = limiter.try_acquire(1).unwrap();
/// assert!(d.is_allowed());
/// assert_eq!((d.limit(), d.remaining()), (2, 1));
/// assert_eq!(d.reset_after(), Duration::from_secs(1));
/// ```
#[derive(Clone, Copy)]
pub struct Decision {
    allowed: bool,
    limit: u64,
    /// Remaining permits in units of `remaining_unit` (1 for counts, the nanoseconds a permit is
    /// worth for time-word algorithms): the division happens only if a caller asks.
    remaining: u64,
    remaining_unit: u64,
    retry_after_nanos: u64,
    reset_after_nanos: u64,
}

impl Decision {
    /// An allowing decision. `remaining` is what is left after this request.
    ///
    /// ```
    /// let d = floodgate::Decision::allow(10, 9, 100);
    /// assert!(d.is_allowed() && d.retry_after().is_zero());
    /// ```
    #[inline]
    pub const fn allow(limit: u64, remaining: u64, reset_after_nanos: u64) -> Self {
        Self::allow_scaled(limit, remaining, 1, reset_after_nanos)
    }

    /// An allowing decision whose `remaining` is given in units of `unit` (for example nanoseconds
    /// of accrued refill, with `unit` the nanoseconds one permit is worth); `remaining()` divides.
    /// A `unit` of 0 is taken as 1.
    ///
    /// ```
    /// let d = floodgate::Decision::allow_scaled(10, 2_500, 1_000, 0);
    /// assert_eq!(d.remaining(), 2);
    /// assert_eq!(d, floodgate::Decision::allow(10, 2, 0));
    /// ```
    #[inline]
    pub const fn allow_scaled(
        limit: u64,
        remaining: u64,
        unit: u64,
        reset_after_nanos: u64,
    ) -> Self {
        Self::allowed_in_units(
            limit,
            remaining,
            if unit == 0 { 1 } else { unit },
            reset_after_nanos,
        )
    }

    /// A denying decision. `retry_after_nanos` is raised to at least 1 ns, so a caller that waits
    /// it out always makes progress.
    ///
    /// ```
    /// let d = floodgate::Decision::deny(10, 0, 0, 50);
    /// assert!(!d.is_allowed());
    /// assert_eq!(d.retry_after().as_nanos(), 1);
    /// ```
    #[inline]
    pub const fn deny(
        limit: u64,
        remaining: u64,
        retry_after_nanos: u64,
        reset_after_nanos: u64,
    ) -> Self {
        Self::deny_scaled(limit, remaining, 1, retry_after_nanos, reset_after_nanos)
    }

    /// A denying decision whose `remaining` is in units of `unit`, as [`Decision::allow_scaled`].
    ///
    /// ```
    /// let d = floodgate::Decision::deny_scaled(10, 999, 1_000, 1, 5);
    /// assert_eq!(d.remaining(), 0);
    /// ```
    #[inline]
    pub const fn deny_scaled(
        limit: u64,
        remaining: u64,
        unit: u64,
        retry_after_nanos: u64,
        reset_after_nanos: u64,
    ) -> Self {
        Self::denied_in_units(
            limit,
            remaining,
            if unit == 0 { 1 } else { unit },
            at_least_one(retry_after_nanos),
            reset_after_nanos,
        )
    }

    /// [`allow_scaled`](Decision::allow_scaled) for a `unit` the caller knows is at least 1 (a
    /// validated interval): no check on a hot path.
    #[inline(always)]
    pub(crate) const fn allowed_in_units(
        limit: u64,
        remaining: u64,
        unit: u64,
        reset_after_nanos: u64,
    ) -> Self {
        debug_assert!(unit >= 1);
        Decision {
            allowed: true,
            limit,
            remaining,
            remaining_unit: unit,
            retry_after_nanos: 0,
            reset_after_nanos,
        }
    }

    /// [`deny_scaled`](Decision::deny_scaled) for a `unit` the caller knows is at least 1: no
    /// check on a hot path. The retry is at least 1 by its type, in every build (a denial's
    /// retry is what tells it from an admission in [`from_words`](Self::from_words)); a caller
    /// gets one from [`at_least_one`], which costs nothing where the compiler sees the value
    /// is not 0 (e.g. `a.saturating_sub(b)` where `a > b` was just tested).
    #[inline(always)]
    pub(crate) const fn denied_in_units(
        limit: u64,
        remaining: u64,
        unit: u64,
        retry_after_nanos: NonZeroU64,
        reset_after_nanos: u64,
    ) -> Self {
        debug_assert!(unit >= 1);
        Decision {
            allowed: false,
            limit,
            remaining,
            remaining_unit: unit,
            retry_after_nanos: retry_after_nanos.get(),
            reset_after_nanos,
        }
    }

    /// The decision as five words, without its flag (see [`DecisionWords`]).
    #[inline(always)]
    pub(crate) const fn to_words(self) -> DecisionWords {
        debug_assert!(self.allowed == (self.retry_after_nanos == 0));
        DecisionWords([
            self.limit,
            self.remaining,
            self.remaining_unit,
            self.retry_after_nanos,
            self.reset_after_nanos,
        ])
    }

    /// The decision [`to_words`](Self::to_words) made `words` of.
    #[inline(always)]
    pub(crate) const fn from_words(words: DecisionWords) -> Self {
        let [
            limit,
            remaining,
            remaining_unit,
            retry_after_nanos,
            reset_after_nanos,
        ] = words.0;
        Decision {
            // A denial's retry is at least 1 (a `NonZeroU64` in `denied_in_units`), an
            // admission's 0.
            allowed: retry_after_nanos == 0,
            limit,
            remaining,
            remaining_unit,
            retry_after_nanos,
            reset_after_nanos,
        }
    }

    /// Whether the request was admitted (and its permits consumed).
    ///
    /// ```
    /// use floodgate::Decision;
    /// assert!(Decision::allow(10, 9, 0).is_allowed());
    /// assert!(!Decision::deny(10, 0, 5, 5).is_allowed());
    /// ```
    #[inline]
    pub const fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The limit in force: the window's limit or the bucket's capacity.
    ///
    /// ```
    /// assert_eq!(floodgate::Decision::allow(10, 9, 0).limit(), 10);
    /// ```
    #[inline]
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// Permits a request could still take right now (after this one, if it was allowed).
    ///
    /// ```
    /// use floodgate::Decision;
    /// assert_eq!(Decision::allow(10, 9, 0).remaining(), 9);
    /// assert_eq!(Decision::allow_scaled(10, 1_999, 1_000, 0).remaining(), 1); // rounds down
    /// ```
    #[inline]
    pub const fn remaining(&self) -> u64 {
        // The windows count whole permits (unit 1): no division for them.
        match self.remaining_unit {
            1 => self.remaining,
            unit => self.remaining / unit,
        }
    }

    /// Whether [`remaining`](Decision::remaining) is at least `permits`, without its division
    /// (a hot path that only compares, such as a lease's budget check).
    #[inline]
    pub(crate) const fn remaining_reaches(&self, permits: u64) -> bool {
        self.remaining >= permits.saturating_mul(self.remaining_unit)
    }

    /// Zero when allowed; otherwise the time until the same request could be allowed, if nobody
    /// else takes permits meanwhile.
    ///
    /// ```
    /// use floodgate::Decision;
    /// use std::time::Duration;
    /// assert_eq!(Decision::deny(10, 0, 2_000, 5_000).retry_after(), Duration::from_micros(2));
    /// assert_eq!(Decision::allow(10, 0, 5_000).retry_after(), Duration::ZERO);
    /// ```
    #[inline]
    pub const fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry_after_nanos)
    }

    /// Time until the limiter is back to full capacity (window end, or bucket refilled).
    ///
    /// ```
    /// use std::time::Duration;
    /// let d = floodgate::Decision::deny(10, 0, 2_000, 5_000);
    /// assert_eq!(d.reset_after(), Duration::from_micros(5));
    /// ```
    #[inline]
    pub const fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_nanos)
    }

    /// The same decision reporting another `limit` (a limiter built from parts, such as a sharded
    /// one, restating a part's decision with the whole limit).
    ///
    /// ```
    /// let d = floodgate::Decision::allow(5, 2, 10).with_limit(20);
    /// assert_eq!((d.limit(), d.remaining()), (20, 2));
    /// ```
    #[inline]
    pub const fn with_limit(self, limit: u64) -> Self {
        Decision { limit, ..self }
    }

    fn key(&self) -> (bool, u64, u64, u64, u64) {
        (
            self.allowed,
            self.limit,
            self.remaining(),
            self.retry_after_nanos,
            self.reset_after_nanos,
        )
    }
}

/// `value`, or 1 where it is 0: a denial's retry (see [`Decision::denied_in_units`]).
#[inline(always)]
pub(crate) const fn at_least_one(value: u64) -> NonZeroU64 {
    match NonZeroU64::new(value) {
        Some(value) => value,
        None => NonZeroU64::MIN,
    }
}

/// A [`Decision`] as five plain words, its flag implied (allowed exactly when the retry word is
/// 0): what a keyed check carries out of its table guard. A `Decision` (five words and a flag
/// byte) carried across the guard's drop went through the stack with its padding, a handful of
/// moves more per call (issue 16); the flag is set again once, after the drop.
#[derive(Clone, Copy)]
pub(crate) struct DecisionWords([u64; 5]);

impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Decision {}

impl std::hash::Hash for Decision {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("limit", &self.limit)
            .field("remaining", &self.remaining())
            .field("retry_after", &self.retry_after())
            .field("reset_after", &self.reset_after())
            .finish()
    }
}

/// What a short decision path answers: a whole [`Decision`], or only whether the request was
/// admitted (`bool`, for [`Limiter::admit`](crate::Limiter::admit)). A short path written once
/// over this trait serves both; inlined into a `bool` caller, the terms only a `Decision`
/// reports are never computed.
pub(crate) trait Answer: Sized {
    /// Whether [`allowed`](Self::allowed) and [`denied`](Self::denied) use their terms (a
    /// `bool` does not: a short path need not load what only feeds them).
    const REPORTS_TERMS: bool = true;
    /// An admission: as [`Decision::allowed_in_units`].
    fn allowed(limit: u64, remaining: u64, unit: u64, reset_after_nanos: u64) -> Self;
    /// A denial: as [`Decision::denied_in_units`].
    fn denied(
        limit: u64,
        remaining: u64,
        unit: u64,
        retry_after_nanos: NonZeroU64,
        reset_after_nanos: u64,
    ) -> Self;
    /// The answer a general engine's `Decision` gives.
    fn of(decision: Decision) -> Self;
}

impl Answer for Decision {
    #[inline(always)]
    fn allowed(limit: u64, remaining: u64, unit: u64, reset_after_nanos: u64) -> Self {
        Decision::allowed_in_units(limit, remaining, unit, reset_after_nanos)
    }

    #[inline(always)]
    fn denied(
        limit: u64,
        remaining: u64,
        unit: u64,
        retry_after_nanos: NonZeroU64,
        reset_after_nanos: u64,
    ) -> Self {
        Decision::denied_in_units(limit, remaining, unit, retry_after_nanos, reset_after_nanos)
    }

    #[inline(always)]
    fn of(decision: Decision) -> Self {
        decision
    }
}

impl Answer for bool {
    const REPORTS_TERMS: bool = false;

    #[inline(always)]
    fn allowed(_: u64, _: u64, _: u64, _: u64) -> Self {
        true
    }

    #[inline(always)]
    fn denied(_: u64, _: u64, _: u64, _: NonZeroU64, _: u64) -> Self {
        false
    }

    #[inline(always)]
    fn of(decision: Decision) -> Self {
        decision.is_allowed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_keeps_a_retry_of_at_least_one_through_its_words() {
        // A zero retry would read back as an admission: the denial raises it to 1.
        let denied = Decision::denied_in_units(10, 0, 1, at_least_one(0), 5);
        assert!(!denied.is_allowed());
        assert_eq!(denied.retry_after_nanos, 1);
        let back = Decision::from_words(denied.to_words());
        assert!(!back.is_allowed());
        assert_eq!(back, denied);
        let allowed = Decision::allowed_in_units(10, 3, 1, 5);
        assert_eq!(Decision::from_words(allowed.to_words()), allowed);
        assert!(Decision::from_words(allowed.to_words()).is_allowed());
    }
}
