//! Leases: a child limiter serves permits it took in small batches from one exact parent.
//!
//! One exact state word caps a limiter at one cache-line transfer per admission. A lease breaks
//! that cap: a child takes `k` permits from the parent in one decision (one compare-exchange on
//! a local word; one script call on a server), serves them locally, and gives back what it does
//! not use. The parent is a [`LeaseSource`]; [`PerCore`] is the child that keeps one lease per
//! core.
//!
//! # The bound
//! Every lease form obeys the same two rules, so its bound follows from its parent's:
//! 1. **A permit is served at most once, and only from a lease the parent granted**, at a time
//!    between the lease's decision time and its expiry ([`Lease::expires_at`]). A serving thread
//!    whose clock reads earlier than the lease's decision time is decided at that time (as the
//!    time floor does for the exact limiters).
//! 2. **A refund is exact or does not happen**: [`LeaseSource::give_back`] leaves the parent
//!    exactly as if the lease had asked for fewer permits, or leaves it alone (the permits then
//!    stay taken until they expire: under-admission, never over-admission).
//!
//! What that means per parent (`S` = [`PerCore::stranded_bound`] = `stripes × (max_lease − 1)`,
//! the most permits the stripes of a [`PerCore`] can hold at once):
//!
//! | parent | over-admission | under-admission |
//! |---|---|---|
//! | [`FixedWindow`](crate::FixedWindow) | **none**: a lease expires with the window it was counted in, so every permit served is counted in the window it is served in, and the window's count never passes its limit | at most `S` per window (held, then dead with the window; a lease replaced within its window gives its unused permits back to it) |
//! | [`SlidingWindowLimiter`](crate::SlidingWindowLimiter) | **none**: a lease expires with the cell it was counted in | at most `S` per cell: a lease's unused permits are refunded to its cell while the cell is open (until a crossing into a later cell seals it), whatever was counted in it since; what the stripes hold when the cell is sealed stays counted in it until it leaves the window (so at most `cells × S` in one window), and so does what they held when a rewind of the ring began (after a leap: at most `S` more, once per leap) |
//! | [`Gcra`](crate::Gcra), [`TokenBucket`](crate::TokenBucket), [`LeakyBucket`](crate::LeakyBucket) | in any span of length `d`, at most what the exact bucket may grant in `d + L` (`L` the lease lifetime): `C + ⌊(d + L) / T⌋` permits instead of `C + ⌊d / T⌋`: at most `⌈L / T⌉` above the exact bucket in any span, and at most `S` | at most `S` held at any time; held permits are refunded when the parent's word is still the lease's, else they die at expiry |
//!
//! The same rules hold for a lease from a Redis key (`redis::LeasedKey`, feature `redis`): the
//! fixed window and bucket rows apply to all its callers together, with `L` (and a window's
//! end) counted on the process's clock
//! from a read taken before the lease's request was sent (so in real time, whatever the offset
//! between the process's and the server's clocks), and `S` = `max_lease − 1` per
//! `LeasedKey`.
//!
//! A bucket's excess comes only from serving late: the permits were granted (the parent's word
//! counted them) at most `L` before they are served, so a span `[a, b]` of serving times sees
//! only grants from `(a − L, b]`. [`PerCore`] keeps `L` short (1 ms by default) so the excess is a
//! fraction of the rate, and near the limit a lease is of one permit (see [`PerCore`]'s lease
//! size), where the child is the exact parent.
//!
//! **Time model.** Lagging clock reads are raised to the lease's decision time; a reader stalled
//! between its clock read and its serve serves at most until the lease's expiry by its own clock
//! read, i.e. a stale read serves a permit the parent counted no earlier than that read. A lease
//! decided more than [`MAX_CLOCK_LAG_NANOS`](crate::clock::MAX_CLOCK_LAG_NANOS) after a serving
//! read (checked on a fresh read) was decided on a leaping read and is not served: raising the
//! reads to it would serve it for as long as the leap. A
//! reconfiguration (`set_limit`, `set_rate`) applies to the parent at once; leases already held
//! are served until they expire, and a refund across a change of a bucket's configuration does
//! not happen. One case escapes rule 2: a parent word moved back (a bucket's leap repair, a fixed
//! window's count folded back from a leaped window, or
//! [`AtomicLimiter::reset`](crate::AtomicLimiter::reset)) can come back to a lease's exact word
//! (a fixed window's: to the lease's window); a refund landing then may give back up to that
//! lease's unused permits (at most `S` once per leap or reset, on top of what the leap or reset
//! itself forgets; a window's "none" above holds outside leaps and resets). A sliding window
//! does not escape: its refund is refused once its ring has begun a rewind since the lease (a
//! rewind can re-open the lease's cell at zero).

mod per_core;
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
mod slot;
mod sources;

pub use per_core::{DEFAULT_LIFETIME, DEFAULT_MAX_LEASE, PerCore};
#[cfg_attr(not(feature = "redis"), allow(unused_imports))]
pub(crate) use slot::LeaseSlot;

use std::time::Duration;

use crate::clock::Clock;
use crate::decision::{AcquireError, ConfigError, Decision};

/// An exact limiter that grants permits in batches (leases): a local limiter word.
///
/// Synchronous: a [`PerCore`] stripe takes its next lease while it holds the stripe, where no
/// await is possible. The Redis lease (`redis::LeasedKey`, feature `redis`)
/// is async (a script call) and so is not a `LeaseSource`; it shares the [`Lease`] type, the
/// lock-free serving word and the two rules of the [module docs](self#the-bound).
///
/// Implemented for [`AtomicLimiter`](crate::AtomicLimiter) over [`Gcra`](crate::Gcra),
/// [`TokenBucket`](crate::TokenBucket), [`LeakyBucket`](crate::LeakyBucket) and
/// [`FixedWindow`](crate::FixedWindow), and for [`SlidingWindowLimiter`](crate::SlidingWindowLimiter). An
/// implementation must keep the two rules of the [module docs](self#the-bound): its grants are
/// counted by its own exact bound, and a refund is exact or does not happen.
///
/// ```
/// use floodgate::lease::LeaseSource;
/// use floodgate::{AtomicLimiter, Gcra, ManualClock, Rate};
/// let gcra = AtomicLimiter::with_clock(Gcra::new(Rate::per_second(10), 10)?, ManualClock::new());
/// let lease = gcra.take(1, 4, 1_000_000)?; // between 1 and 4 permits, for at most 1 ms
/// assert_eq!(lease.granted(), 4);
/// assert_eq!(lease.decision().remaining(), 6);
/// assert!(gcra.give_back(&lease, 3)); // nothing happened since: the refund is exact
/// assert_eq!(gcra.take(1, 10, 1_000_000)?.granted(), 9);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait LeaseSource: Send + Sync {
    /// Takes between `min` and `max` permits now (as many as fit, up to `max`), valid for at
    /// most `lifetime_nanos` (a window's lease also ends with its window). A lease of
    /// [`granted`](Lease::granted) `0` is a denial: nothing was taken, and its
    /// [`decision`](Lease::decision) says why (`remaining`, `retry_after` for `min` permits).
    ///
    /// # Errors
    /// [`AcquireError`] when `min` is zero or above the limit. `max` below `min` is read as `min`;
    /// `max` above the limit is read as the limit.
    ///
    /// ```
    /// use floodgate::lease::LeaseSource;
    /// use floodgate::{AtomicLimiter, FixedWindow, ManualClock};
    /// use std::time::Duration;
    /// let window =
    ///     AtomicLimiter::with_clock(FixedWindow::new(5, Duration::from_secs(1))?, ManualClock::new());
    /// assert_eq!(window.take(1, 3, u64::MAX)?.granted(), 3);
    /// assert_eq!(window.take(1, 3, u64::MAX)?.granted(), 2); // as many as fit
    /// assert_eq!(window.take(1, 3, u64::MAX)?.granted(), 0); // a denial
    /// assert!(window.take(0, 3, u64::MAX).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn take(&self, min: u32, max: u32, lifetime_nanos: u64) -> Result<Lease, AcquireError>;

    /// Gives `unused` permits of `lease` back, if that can be done exactly (the parent then is
    /// as if the lease had asked for `unused` fewer); otherwise does nothing. Returns whether
    /// they were given back. Call it at most once per lease, with at most its unserved permits.
    ///
    /// ```
    /// use floodgate::lease::LeaseSource;
    /// use floodgate::{AtomicLimiter, FixedWindow, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let window =
    ///     AtomicLimiter::with_clock(FixedWindow::aligned(10, Duration::from_secs(1))?, clock.clone());
    /// let first = window.take(1, 5, u64::MAX)?;
    /// let second = window.take(1, 5, u64::MAX)?;
    /// assert!(window.give_back(&first, 2)); // the same window: as if `first` had been of 3
    /// assert_eq!(window.take(1, 10, u64::MAX)?.granted(), 2);
    /// clock.advance(Duration::from_secs(1));
    /// assert_eq!(window.take(1, 10, u64::MAX)?.granted(), 10); // a new window
    /// assert!(!window.give_back(&second, 2)); // its window has ended: nothing to give back
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn give_back(&self, lease: &Lease, unused: u32) -> bool;

    /// Takes exactly `n` permits or none, as the source's own `try_acquire(n)` would: one exact
    /// decision, and no lease to track (the path a [`PerCore`] stripe takes near the limit,
    /// where a lease would be of `n` permits anyway). By default
    /// [`take(n, n, 0)`](LeaseSource::take)'s decision; the local sources use their short path.
    ///
    /// # Errors
    /// As [`take`](LeaseSource::take).
    ///
    /// ```
    /// use floodgate::lease::LeaseSource;
    /// use floodgate::{AtomicLimiter, Gcra, ManualClock, Rate};
    /// let gcra = AtomicLimiter::with_clock(Gcra::new(Rate::per_second(1), 2)?, ManualClock::new());
    /// assert!(gcra.take_exact(2)?.is_allowed());
    /// assert!(!gcra.take_exact(1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn take_exact(&self, n: u32) -> Result<Decision, AcquireError> {
        self.take(n, n, 0).map(|lease| lease.decision())
    }

    /// The clock the source decides on (and its leases expire on).
    ///
    /// ```
    /// use floodgate::lease::LeaseSource;
    /// use floodgate::{AtomicLimiter, Clock, FixedWindow, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let window = AtomicLimiter::with_clock(FixedWindow::new(5, Duration::from_secs(1))?, clock.clone());
    /// clock.advance(Duration::from_millis(7));
    /// assert_eq!(LeaseSource::clock(&window).now_nanos(), 7_000_000);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    fn clock(&self) -> &dyn Clock;

    /// The limit in force (as [`Limiter::limit`](crate::Limiter::limit)): no lease is larger.
    ///
    /// ```
    /// use floodgate::lease::LeaseSource;
    /// use floodgate::{AtomicLimiter, FixedWindow, ManualClock};
    /// use std::time::Duration;
    /// let window =
    ///     AtomicLimiter::with_clock(FixedWindow::new(5, Duration::from_secs(1))?, ManualClock::new());
    /// assert_eq!(LeaseSource::limit(&window), 5);
    /// assert_eq!(window.take(1, 100, u64::MAX)?.granted(), 5); // no lease above the limit
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn limit(&self) -> u64;

    /// Changes the limit (as [`Limiter::set_limit`](crate::Limiter::set_limit)).
    ///
    /// # Errors
    /// As the source's `Limiter::set_limit`.
    ///
    /// ```
    /// use floodgate::lease::LeaseSource;
    /// use floodgate::{AtomicLimiter, FixedWindow, ManualClock};
    /// use std::time::Duration;
    /// let window =
    ///     AtomicLimiter::with_clock(FixedWindow::new(5, Duration::from_secs(1))?, ManualClock::new());
    /// LeaseSource::set_limit(&window, 2)?;
    /// assert_eq!(window.take(1, 5, u64::MAX)?.granted(), 2);
    /// assert!(LeaseSource::set_limit(&window, 0).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn set_limit(&self, limit: u32) -> Result<(), ConfigError>;
}

/// A batch of permits taken from a [`LeaseSource`] (or a denial: [`granted`](Lease::granted)
/// `0`).
///
/// ```
/// use floodgate::Decision;
/// use floodgate::lease::Lease;
/// let lease = Lease::new(3, 100, 1_100, Decision::allow(10, 7, 0));
/// assert_eq!((lease.granted(), lease.taken_at(), lease.expires_at()), (3, 100, 1_100));
/// assert_eq!(lease.receipt(), [0, 0]);
/// assert_eq!(lease.with_receipt([7, 1]).receipt(), [7, 1]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    granted: u32,
    taken_at: u64,
    expires_at: u64,
    decision: Decision,
    receipt: [u64; 2],
}

impl Lease {
    /// A lease of `granted` permits decided at `taken_at` and served until before `expires_at`
    /// (nanoseconds on the source's clock), with the source's `decision` for it.
    ///
    /// ```
    /// use floodgate::{Decision, lease::Lease};
    /// let denied = Lease::new(0, 5, 5, Decision::deny(10, 0, 1_000, 1_000));
    /// assert!(!denied.decision().is_allowed());
    /// ```
    pub const fn new(granted: u32, taken_at: u64, expires_at: u64, decision: Decision) -> Self {
        Lease {
            granted,
            taken_at,
            expires_at,
            decision,
            receipt: [0, 0],
        }
    }

    /// The same lease with the source's own receipt (what its
    /// [`give_back`](LeaseSource::give_back) needs: the word the lease wrote, the index of the
    /// sliding-window cell it was counted in, a lease id on a server).
    ///
    /// ```
    /// use floodgate::{Decision, lease::Lease};
    /// let lease = Lease::new(1, 0, 10, Decision::allow(1, 0, 0)).with_receipt([42, 0]);
    /// assert_eq!(lease.receipt()[0], 42);
    /// ```
    pub const fn with_receipt(self, receipt: [u64; 2]) -> Self {
        Lease { receipt, ..self }
    }

    /// Permits granted; `0` for a denial.
    ///
    /// ```
    /// use floodgate::{Decision, lease::Lease};
    /// assert_eq!(Lease::new(2, 0, 10, Decision::allow(5, 3, 0)).granted(), 2);
    /// ```
    pub const fn granted(&self) -> u32 {
        self.granted
    }

    /// The time (nanoseconds on the source's clock) the source decided the lease at.
    ///
    /// ```
    /// use floodgate::{Decision, lease::Lease};
    /// assert_eq!(Lease::new(2, 7, 10, Decision::allow(5, 3, 0)).taken_at(), 7);
    /// ```
    pub const fn taken_at(&self) -> u64 {
        self.taken_at
    }

    /// The time from which the lease's permits may no longer be served.
    ///
    /// ```
    /// use floodgate::{Decision, lease::Lease};
    /// assert_eq!(Lease::new(2, 7, 10, Decision::allow(5, 3, 0)).expires_at(), 10);
    /// ```
    pub const fn expires_at(&self) -> u64 {
        self.expires_at
    }

    /// The source's decision for the lease (for a grant: what is left after it).
    ///
    /// ```
    /// use floodgate::{Decision, lease::Lease};
    /// let lease = Lease::new(2, 0, 10, Decision::allow(5, 3, 0));
    /// assert_eq!(lease.decision().remaining(), 3);
    /// ```
    pub const fn decision(&self) -> Decision {
        self.decision
    }

    /// The source's receipt (see [`with_receipt`](Lease::with_receipt)).
    ///
    /// ```
    /// use floodgate::{Decision, lease::Lease};
    /// assert_eq!(Lease::new(2, 0, 10, Decision::allow(5, 3, 0)).receipt(), [0, 0]);
    /// ```
    pub const fn receipt(&self) -> [u64; 2] {
        self.receipt
    }
}

/// A lease lifetime in nanoseconds: at least 1 ns and at most `u64::MAX` ns, else
/// [`ConfigError::DurationOutOfRange`] naming the lifetime and that range (the check of
/// [`PerCore::with_lifetime`] and `redis::LeasedKey::with_lifetime`).
pub(crate) fn lifetime_nanos(lifetime: Duration) -> Result<u64, ConfigError> {
    match u64::try_from(lifetime.as_nanos()) {
        Ok(nanos) if nanos > 0 => Ok(nanos),
        _ => Err(ConfigError::DurationOutOfRange {
            what: "lease lifetime",
            value: lifetime,
            min: Duration::from_nanos(1),
            max: Duration::from_nanos(u64::MAX),
        }),
    }
}

/// Takes between `min` and `max` permits with `take` (one exact decision per call): `max` first;
/// if denied, as many as the denial said were left (at least `min`); then `min` alone. Each
/// call is one exact decision, so the result is exact whatever races in between.
pub(crate) fn take_between<R>(
    min: u32,
    max: u32,
    mut take: impl FnMut(u32) -> Result<(Decision, R), AcquireError>,
) -> Result<(u32, Decision, R), AcquireError> {
    let max = max.max(min);
    let (decision, receipt) = take(max)?;
    if decision.is_allowed() || max == min {
        let granted = if decision.is_allowed() { max } else { 0 };
        return Ok((granted, decision, receipt));
    }
    let left = u32::try_from(decision.remaining()).unwrap_or(u32::MAX);
    if left > min {
        let n = left.min(max - 1);
        let (decision, receipt) = take(n)?;
        if decision.is_allowed() {
            return Ok((n, decision, receipt));
        }
    }
    // Last, `min` alone: a denial then describes the request the caller needs.
    let (decision, receipt) = take(min)?;
    let granted = if decision.is_allowed() { min } else { 0 };
    Ok((granted, decision, receipt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_between_tries_max_then_what_is_left_then_min() {
        let mut asked = Vec::new();
        let mut left = 3u32;
        let got = take_between(1, 8, |n| {
            asked.push(n);
            if n <= left {
                left -= n;
                Ok((Decision::allow(10, u64::from(left), 0), ()))
            } else {
                Ok((Decision::deny(10, u64::from(left), 1, 1), ()))
            }
        })
        .unwrap();
        assert_eq!((got.0, asked.as_slice()), (3, &[8, 3][..]));
    }

    #[test]
    fn take_between_falls_back_to_min_and_then_denies() {
        let mut asked = Vec::new();
        // Says 5 are left, but a racer takes them: 5 is denied, then min (2) is denied too.
        let got = take_between(2, 8, |n| {
            asked.push(n);
            Ok((Decision::deny(10, 5, 1, 1), ()))
        })
        .unwrap();
        assert_eq!((got.0, asked.as_slice()), (0, &[8, 5, 2][..]));
        asked.clear();
        let got = take_between(2, 2, |n| {
            asked.push(n);
            Ok((Decision::deny(10, 1, 1, 1), ()))
        })
        .unwrap();
        assert_eq!((got.0, asked.as_slice()), (0, &[2][..]));
        asked.clear();
        // Nothing left below min: no second try.
        take_between(2, 8, |n| {
            asked.push(n);
            Ok((Decision::deny(10, 1, 1, 1), ()))
        })
        .unwrap();
        assert_eq!(asked, [8, 2]);
    }
}
