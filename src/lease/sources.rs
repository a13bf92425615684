//! The [`LeaseSource`] implementations: the exact local limiters.
//!
//! Each lease is one exact decision of the parent (one compare-exchange on its word), recorded
//! with the time it was decided at and the word it wrote, so a refund can be a compare-exchange
//! from exactly that word.

use crate::algorithms::{FixedWindow, Gcra, SlidingWindowLimiter};
use crate::clock::{Clock, duration_to_nanos};
use crate::decision::{AcquireError, ConfigError, Decision, check_permits};
use crate::lease::{Lease, LeaseSource, take_between};
use crate::limiter::{AtomicLimiter, Limiter};
use crate::packed::{pack_window, unpack_window};

/// A receipt generation that no refund accepts (a bucket's configuration changed during the
/// lease; a sliding window's ring was being rewound when the lease was taken).
const NO_REFUND: u64 = u64::MAX;

/// `max` capped at the limit in force (a lease is never larger than the limit).
fn capped(max: u32, limit: u64) -> u32 {
    u32::try_from(limit).map_or(max, |limit| max.min(limit))
}

/// Leases from a time-word bucket: valid for `lifetime`; refunded by moving the word's time back
/// by the unused permits' worth, only from the exact word the lease wrote in the same
/// configuration generation (see `VirtualTime::refunded`). `TokenBucket` and `LeakyBucket` are
/// aliases of `Gcra`: this one impl serves all three.
impl<C: Clock> LeaseSource for AtomicLimiter<Gcra, C> {
    fn take(&self, min: u32, max: u32, lifetime_nanos: u64) -> Result<Lease, AcquireError> {
        check_permits(min, Limiter::limit(self))?;
        let max = capped(max, Limiter::limit(self));
        let (granted, decision, (now, receipt)) = take_between(min, max, |n| {
            let generation = self.algorithm().lease_generation();
            let (decision, written) = self.take_recorded(n)?;
            let same = self.algorithm().lease_generation() == generation;
            let generation = if same { generation } else { NO_REFUND };
            Ok((decision, (written.now, [written.word, generation])))
        })?;
        let expires_at = now.saturating_add(lifetime_nanos);
        Ok(Lease::new(granted, now, expires_at, decision).with_receipt(receipt))
    }

    fn give_back(&self, lease: &Lease, unused: u32) -> bool {
        if unused == 0 || unused > lease.granted() {
            return false;
        }
        let [word, generation] = lease.receipt();
        self.algorithm()
            .lease_refund(word, generation, unused)
            .is_some_and(|refunded| self.replace_word(word, refunded))
    }

    #[inline(always)]
    fn take_exact(&self, n: u32) -> Result<Decision, AcquireError> {
        Limiter::try_acquire(self, n)
    }

    fn clock(&self) -> &dyn Clock {
        Limiter::clock(self)
    }

    fn limit(&self) -> u64 {
        Limiter::limit(self)
    }

    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        Limiter::set_limit(self, limit)
    }
}

/// Leases from a fixed window: valid until the end of the window they were counted in (or
/// `lifetime`, if sooner); refunded by lowering the count while the word is still in the window
/// the lease wrote (a window's count is a sum: lowering it by the unused permits leaves the
/// window exactly as if the lease had been smaller, whatever was counted after it). Refusing a
/// refund because another request wrote the window since would strand the permits in it: with
/// leases shorter than the window, a stripe could strand a lease's worth every lifetime.
impl<C: Clock> LeaseSource for AtomicLimiter<FixedWindow, C> {
    fn take(&self, min: u32, max: u32, lifetime_nanos: u64) -> Result<Lease, AcquireError> {
        check_permits(min, Limiter::limit(self))?;
        let max = capped(max, Limiter::limit(self));
        let (granted, decision, (now, word)) = take_between(min, max, |n| {
            let (decision, written) = self.take_recorded(n)?;
            Ok((decision, (written.now, written.word)))
        })?;
        // An allowed decision's `reset_after` is the time to the end of the window that counted
        // it (a window ahead of `now`, for a lagging read, included).
        let window_end = now.saturating_add(duration_to_nanos(decision.reset_after()));
        let expires_at = window_end.min(now.saturating_add(lifetime_nanos));
        Ok(Lease::new(granted, now, expires_at, decision).with_receipt([word, 0]))
    }

    fn give_back(&self, lease: &Lease, unused: u32) -> bool {
        if unused == 0 || unused > lease.granted() {
            return false;
        }
        // Only while the lease's window is open (an allowed decision's `reset_after` is the time
        // to its end): past it a refund changes nothing a decision reads, and a word whose tag
        // has wrapped around (2^40 tag units on) must not take it.
        let window_end = lease
            .taken_at()
            .saturating_add(duration_to_nanos(lease.decision().reset_after()));
        if Limiter::clock(self).now_nanos() >= window_end {
            return false;
        }
        let (tag, _) = unpack_window(lease.receipt()[0]);
        self.refund_word(|word| {
            let (current, count) = unpack_window(word);
            let count = count.checked_sub(u64::from(unused))?;
            (current == tag).then(|| pack_window(tag, count))
        })
    }

    #[inline(always)]
    fn take_exact(&self, n: u32) -> Result<Decision, AcquireError> {
        Limiter::try_acquire(self, n)
    }

    fn clock(&self) -> &dyn Clock {
        Limiter::clock(self)
    }

    fn limit(&self) -> u64 {
        Limiter::limit(self)
    }

    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        Limiter::set_limit(self, limit)
    }
}

/// Leases from a sliding window: valid until the end of the cell the window counted the lease
/// in (the source says which: its own clock read may trail one taken before, on another core),
/// or `lifetime` after a clock read taken before the lease was decided, if sooner. Refunded by
/// lowering that cell's count while the cell is open, its slot still holding it, and no rewind
/// of the ring has begun since the lease (the receipt is the cell's index and the rewinds begun
/// before it, or `NO_REFUND` if one was under way): an open cell's count is a sum that nothing
/// published has read yet, so the window is then exactly as if the lease had been smaller,
/// whatever was counted in the cell since. Once a crossing into a later cell has sealed it (its count is then in the published
/// sums), the refund does not happen (see `SlidingWindowLimiter::refund`).
impl<C: Clock> LeaseSource for SlidingWindowLimiter<C> {
    fn take(&self, min: u32, max: u32, lifetime_nanos: u64) -> Result<Lease, AcquireError> {
        check_permits(min, Limiter::limit(self))?;
        let max = capped(max, Limiter::limit(self));
        let before = Limiter::clock(self).now_nanos();
        // Read before the lease is counted: a rewind begun since refuses its refund.
        let rewinds = self.rewinds().unwrap_or(NO_REFUND);
        let (granted, decision, (cell, cell_end)) =
            take_between(min, max, |n| self.try_acquire_counted(n))?;
        let expires_at = cell_end.min(before.saturating_add(lifetime_nanos));
        Ok(Lease::new(granted, before, expires_at, decision).with_receipt([cell, rewinds]))
    }

    fn give_back(&self, lease: &Lease, unused: u32) -> bool {
        let [cell, rewinds] = lease.receipt();
        if unused == 0 || unused > lease.granted() || rewinds == NO_REFUND {
            return false;
        }
        self.refund(cell, rewinds, u64::from(unused))
    }

    #[inline(always)]
    fn take_exact(&self, n: u32) -> Result<Decision, AcquireError> {
        Limiter::try_acquire(self, n)
    }

    fn clock(&self) -> &dyn Clock {
        Limiter::clock(self)
    }

    fn limit(&self) -> u64 {
        Limiter::limit(self)
    }

    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        Limiter::set_limit(self, limit)
    }
}
