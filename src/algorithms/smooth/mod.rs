//! Guava-compatible smooth limiters: [`SmoothBursty`] (`RateLimiter.create(r)`) and
//! [`SmoothWarmingUp`] (`RateLimiter.create(r, warmup)`), lock-free.
//!
//! # Semantics (Guava's, to the microsecond)
//! The state is Guava's: the *next free ticket* `nf` (µs since the limiter was created) and the
//! *stored permits* (unused permits saved while idle). A request for `p` permits at `now`:
//! 1. resyncs: if `now > nf`, the idle time `now − nf` turns into stored permits (capped) and
//!    `nf = now`;
//! 2. waits until the **old** `nf` (`max(nf − now, 0)`) — its own size never delays it;
//! 3. books its cost: stored permits first (free for bursty, the warm-up integral for warming),
//!    then fresh permits at the stable interval; `nf` moves forward by that cost, so the **next**
//!    caller pays for it (pre-consumption).
//!
//! `try_acquire_for(p, timeout)` is Guava's `tryAcquire`: it tests only the *start* of the
//! reservation (`nf − timeout ≤ now`); a refusal changes nothing, not even a resync.
//!
//! # Stored permits are kept as time
//! Guava stores permits as a `double` and rescales them by `new_max / old_max` on `setRate`,
//! after a resync with the *old* rate. floodgate stores instead the **time** the stored permits
//! took to accrue, `stored_time = stored × coolDownInterval` (µs). Their maximum
//! `W = maxPermits × coolDownInterval` does not depend on the rate: it is `maxBurstSeconds × 10⁶`
//! for bursty and the warm-up period for warming. So:
//! * a resync is an exact addition of microseconds: `stored_time = min(W, stored_time + idle)`;
//! * Guava's "resync with the old rate, then rescale by `new_max / old_max`" leaves
//!   `stored_time` unchanged: **a finite `set_rate` does not touch the state word at all**. It is
//!   one atomic store of the new stable interval, and a concurrent request sees either the old or
//!   the new rate, each consistent with a sequential order (see *Consistency* below).
//!
//! Stored permits are derived per decision: `stored_time / stable` (bursty) or
//! `stored_time × maxPermits / W` (warming). A bursty request that its stored permits cover is
//! decided without them, in the word's fixed point: it costs `n` stable intervals of stored time
//! (the interval held to 2⁻¹² µs), one integer multiply-add (`bursty_fixed.rs`).
//!
//! # Layouts
//! * [`SmoothBursty`]: **one `AtomicU64`**, run by `limiter::update`.
//!   Bursty state is one-dimensional: stored permits only grow in a resync, which sets
//!   `nf = now`, and a request that books fresh permits spends all stored ones first, so
//!   `stored > 0 ⇒ nf ≤ now`. Both fit in one virtual time `V = nf − stored_time`; see
//!   `bursty.rs` for the bit layout (63 bits of `V` in 2⁻¹² µs, one flag bit).
//! * [`SmoothWarmingUp`]: **one 128-bit word** (`nf` as 63-bit µs, a flag bit, `stored_time` as
//!   an `f64`), compare-exchanged as a whole (`cmpxchg16b` on x86-64, `casp`/LL-SC on AArch64,
//!   through `portable-atomic`). One 64-bit word cannot hold it: warming state is genuinely
//!   two-dimensional — spending stored permits *costs time*, so after a request
//!   `stored > 0` and `nf > now` coexist and both matter to later requests — and it needs an
//!   absolute time (≥ 50 bits of µs for a limiter that lives for decades) *and* stored permits
//!   at `double` precision (a warm-up of 4 s held in the remaining 13 bits would be 488 µs
//!   coarse). The 128-bit word is the smallest lock-free alternative: still one word, one CAS.
//!
//! # Rate +∞
//! Guava special-cases an infinite rate (everything free) and the transitions out of it
//! (bursty: stored = max; warming: stored = 0). Infinity is therefore a flag **in the state
//! word** (not in the interval cell): `set_rate(∞)` sets it with one CAS; `set_rate(finite)`
//! from ∞ stores the interval, then clears the flag and applies Guava's transition in one CAS.
//! While the flag is set, a request costs nothing and writes nothing (it still waits for debt
//! booked before, as Guava does).
//!
//! # Consistency with a live `set_rate`
//! A request loads the word, then (after an acquire fence) the interval, decides, and
//! compare-exchanges the word it loaded. `set_rate` stores the interval, then issues a release
//! fence before any later write of the word. So a request that sees a word written after a
//! `set_rate` also sees that rate (fence-to-fence synchronisation through the word), and a request
//! whose CAS succeeds used a rate that was current while the word held the value it decided
//! from: requests and `set_rate` calls are linearizable. The loom model
//! (`loom-tests/tests/smooth.rs`) checks it. `set_rate` calls racing *each other* are
//! linearizable too, except one corner: with three or more concurrent calls of which one is
//! `set_rate(∞)`, a finite call that started before the ∞ may have its value published by a later
//! call that leaves ∞ (the final rate is then one of the racing calls', never a torn value).
//!
//! # Mapping onto [`Decision`]
//! * `limit`: the rate rounded half up to whole permits per second, **at least 1** (a rate below
//!   0.5/s still admits: a free limiter grants a request at once), `u64::MAX` for ∞ and for
//!   rates of 2⁶⁴/s and more. It is what [`Limiter::limit`](crate::Limiter::limit) reports and
//!   what [`Limiter::set_limit`](crate::Limiter::set_limit) sets: `set_limit(n)` keeps the rate
//!   exactly when it already reports `n` (so writing the reported limit back changes nothing),
//!   and otherwise sets it to `n` permits per second. `rate()` and `set_rate` are exact.
//! * `remaining`: whole stored permits that the next request could spend without booking new
//!   debt, if the limiter is free now (`nf ≤ now`), else 0. (A free limiter grants a request of
//!   *any* size at once: that is pre-consumption.)
//! * `retry_after` (denials): `nf − now`, the time until `try_acquire` (no timeout) succeeds.
//! * `reset_after`: time until the limiter is idle and full again: `max(nf − now, 0)` plus the
//!   time to accrue the missing stored permits (for warming: until it is fully cold again).
//!
//! # Rates above Guava's precision
//! Guava books every cost as `(long)` whole microseconds, truncated. At high rates this admits
//! far more than the rate (1.11× at 300,000/s, 1.43× at 700,000/s, unlimited above 10⁶/s).
//! floodgate keeps the truncation only where it provably costs at most 0.1% of the rate: each
//! request loses less than 1 µs per truncation (bursty: one, plus < 2⁻¹¹ µs of stored-time
//! rounding; warming: up to three) against a cost of at least one stable interval `I`, so
//! `I / (I − loss) ≤ 1.001` from `I ≥ 1,002 µs` (bursty, rates up to about 998/s) and
//! `I ≥ 3,004 µs` (warming, about 332/s). Below those intervals every cost is rounded **up** to
//! the next whole µs and bursty stored time is rounded down, so nothing is ever booked short:
//! admissions stay within `rate × elapsed × 1.001 + burst + 1` at every rate, and at rates
//! near 10⁶/s and above the limiter admits fewer than asked (at most one permit per µs).
//! Guava's test scenarios (`tests/guava_conformance.rs`) are unchanged.
//!
//! # One request books at most a year
//! A request whose cost (the debt it books for the next caller) is longer than one year is
//! [`AcquireError::BookingTooLong`](crate::AcquireError::BookingTooLong) and books nothing:
//! booked, `try_acquire(u32::MAX)` at 1/s would push the limiter past its 71-year range, after
//! which it refuses forever and no `set_rate` can repair it. The one exception is a stable
//! interval of `+∞` (Guava's `Double.MIN_VALUE`): one permit, then never, as Guava documents.
//! A request refused because the limiter is busy is judged as it would be booked when the
//! refusal's wait ends: too long then, it is the error at once, whatever the state, never a
//! `retry_after` after which the same request gets the error.
//! A finite rate at which a single permit would book more than a year (bursty: a stable
//! interval of a year and a µs or more, rates below one permit a year; warming: one permit
//! spent from a cold limiter, which depends on the warm-up and cold factor, or from an empty
//! one, with 2 µs to spare when the warm-up is above 0, for a permit booked in truncated parts)
//! is refused with a [`ConfigError`] at creation and at `set_rate`: such a limiter could only
//! refuse.
//!
//! # Deviations from Guava, all documented edge cases
//! * Warm-up 0: Guava computes `coolDown = 0/0 = NaN` and, after any idle time, grants every
//!   later request for free. floodgate gives the intended meaning: no stored permits, every
//!   permit at the stable interval.
//! * `set_rate(∞)` then `set_rate(finite)` on a *bursty* limiter while debt booked before ∞ is
//!   still outstanding: Guava grants a full burst at the end of the debt; the one-word bursty
//!   layout cannot hold "stored permits, but not before the debt is paid", so floodgate keeps
//!   the debt and lets the burst accrue after it (it never grants more than Guava would).
//! * Stored permits are kept to 2⁻¹² µs (bursty; `n` stored permits cost `n · I` rounded up to
//!   2⁻¹² µs once per request) or as an `f64`
//!   of time (warming) instead of a `double` of permits. Where Guava's own `(long)` truncation
//!   of a `double` lands within rounding noise of a whole microsecond, a booking can differ from
//!   Guava's by 1 µs, and such flips add up along an unbroken chain of debt (an idle limiter
//!   resyncs to `now`). A bursty request's stored-permit cost is rounded once (< 2⁻¹¹ µs,
//!   whatever `n`), so the drift does not grow with the request's size. Guava's test scenarios
//!   all come out identical (`tests/guava_conformance.rs`). The figures that follow are samples,
//!   not a bound: random sequences of up to 60 calls against a transcription of Guava
//!   (`tests/smooth_vs_guava_model.rs`' method), 20,000 per domain, bursty with a 1 s burst:
//!   rates 0.5–50/s and n < 12, waits identical in 99.0% of sequences, worst 2 µs; 10³–10⁶/s,
//!   n < 12: 99.0%, worst 2 µs; n < 5,000: 99.9%, worst 1 µs; 10⁶–10⁹/s, n < 10⁵: 99.98%,
//!   worst 1 µs; bursts of 10⁷–3·10⁷ s spent in chunks of 10⁶–5·10⁷ permits (rates 0.5–7/s):
//!   identical. Warming (sampled before, 0.5–50/s, n < 12): 96.9%, worst 6 µs.
//! * A bursty limiter's time range is 2⁵¹ µs (71 years) after its creation; later, its clock
//!   reads saturate there.
//! * Negative timeouts cannot be written as a [`Duration`]; Guava clamps them to 0, the
//!   same as `Duration::ZERO`.

#[macro_use]
mod api;
mod bursty;
mod bursty_fixed;
mod bursty_word;
mod warm_up_math;
mod warming;
pub(crate) mod wide;

use std::time::Duration;

pub use bursty::SmoothBursty;
pub use warming::SmoothWarmingUp;

use crate::decision::{ConfigError, Decision};
use crate::sync::{AtomicU64, Ordering};

#[cfg(floodgate_loom)]
use loom::sync::atomic::fence;
#[cfg(not(floodgate_loom))]
use std::sync::atomic::fence;

/// A point-in-time view of a smooth limiter, as Guava would see it after a resync at `now`.
///
/// ```
/// use floodgate::{ManualClock, SmoothBursty};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let limiter = SmoothBursty::create_with_clock(5.0, clock.clone()).unwrap();
/// clock.advance(Duration::from_millis(400));
/// let s = limiter.snapshot();
/// assert_eq!((s.next_free_micros, s.stored_permits, s.rate), (400_000, 2.0, 5.0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SmoothSnapshot {
    /// The next free ticket, in µs since the limiter was created.
    pub next_free_micros: i64,
    /// Stored permits (`f64::INFINITY` while the rate is infinite).
    pub stored_permits: f64,
    /// The rate in permits per second.
    pub rate: f64,
}

/// Guava's state, decoded: the next free ticket (µs since creation; `i64::MAX` = never) and the
/// stored permits as the time they took to accrue (µs, `0..=W`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Ticket {
    pub(crate) next_free: i64,
    pub(crate) stored_time: f64,
}

/// The per-flavour math of stored permits (Guava's `SmoothBursty` / `SmoothWarmingUp`).
pub(crate) trait StoredPermits {
    /// Microseconds per fresh permit (`stableIntervalMicros`).
    fn interval(&self) -> f64;
    /// `W`: the stored time of a full limiter.
    fn full_time(&self) -> f64;
    /// Stored permits for a stored time.
    fn permits_of(&self, stored_time: f64) -> f64;
    /// Stored time for a number of stored permits.
    fn time_of(&self, permits: f64) -> f64;
    /// The rate as whole permits per second ([`Decision`]'s `limit`).
    #[inline]
    fn limit(&self) -> u64 {
        limit_of(self.interval())
    }
    /// Guava's `storedPermitsToWaitTime` (each `(long)` truncation through [`Self::micros`]).
    fn wait_for_stored(&self, stored_permits: f64, take: f64) -> i64;
    /// Whether Guava's whole-µs truncation keeps this flavour within 0.1% of its rate: true for
    /// a stable interval of at least [`Self::GUAVA_MIN_INTERVAL`] µs.
    const GUAVA_MIN_INTERVAL: f64;
    /// A cost in µs as booked: Guava's `(long)` truncation where it keeps the rate within 0.1%,
    /// rounded up otherwise (see *Rates above Guava's precision* in the module docs).
    #[inline]
    fn micros(&self, cost: f64) -> i64 {
        round_micros(cost, self.interval() >= Self::GUAVA_MIN_INTERVAL)
    }
    /// [`reserve_general`] of one permit, the same new state and old next free ticket to the
    /// bit; a flavour may decide its common states with fewer steps.
    #[inline]
    fn reserve_one(&self, ticket: Ticket, now: i64) -> (Ticket, i64)
    where
        Self: Sized,
    {
        reserve_general(ticket, now, 1, self)
    }
}

/// `cost` in whole µs: truncated like Java's `(long)` if `truncate`, else rounded up. `as`
/// saturates (NaN → 0, +∞ → `i64::MAX`), as Java's cast does.
#[inline]
pub(crate) fn round_micros(cost: f64, truncate: bool) -> i64 {
    let whole = cost as i64;
    if !truncate && (whole as f64) < cost {
        whole.saturating_add(1)
    } else {
        whole
    }
}

/// The most debt one request may book: one year of µs. A request whose cost is longer is an
/// [`AcquireError::BookingTooLong`](crate::AcquireError::BookingTooLong) and books nothing
/// (a rate of `f64::MIN_POSITIVE`-like subnormals, whose interval is `+∞`, keeps Guava's
/// documented "one permit, then never").
pub(crate) const MAX_BOOKING_MICROS: i64 = 365 * 86_400 * 1_000_000;

/// Guava's `resync`: idle time turns into stored time, capped at `W`.
#[inline]
pub(crate) fn resync(ticket: Ticket, now: i64, full_time: f64) -> Ticket {
    if now > ticket.next_free {
        let idle = (now - ticket.next_free) as f64;
        Ticket {
            next_free: now,
            stored_time: cap(ticket.stored_time + idle, full_time),
        }
    } else {
        ticket
    }
}

/// `stored.min(full)` for a `stored` that is not NaN (one `minsd`; `f64::min`'s handling of a
/// NaN `stored` was five instructions more per resync, `instructions_warming_states`). The same
/// bits as `f64::min` whenever `stored` is not NaN, whatever `full` is
/// (`cap_is_f64_min_for_every_stored_time_that_is_not_nan`); a resync's `stored` is a stored
/// time in `0..=W` plus at least 1 µs of idle time, never NaN.
#[inline]
fn cap(stored: f64, full: f64) -> f64 {
    if stored > full { full } else { stored }
}

/// Guava's `reserveEarliestAvailable`: returns the new state and the OLD next free ticket. One
/// permit goes through the flavour's [`StoredPermits::reserve_one`].
#[inline]
pub(crate) fn reserve<K: StoredPermits>(
    ticket: Ticket,
    now: i64,
    permits: u32,
    math: &K,
) -> (Ticket, i64) {
    if permits == 1 {
        math.reserve_one(ticket, now)
    } else {
        reserve_general(ticket, now, permits, math)
    }
}

/// [`reserve`] for any count, step by step as Guava's `reserveEarliestAvailable`.
#[inline]
pub(crate) fn reserve_general<K: StoredPermits>(
    ticket: Ticket,
    now: i64,
    permits: u32,
    math: &K,
) -> (Ticket, i64) {
    (
        book_general(ticket, now, permits, math),
        resynced_next_free(ticket, now),
    )
}

/// The next free ticket of `ticket` resynced at `now` ([`resync`]'s, without the stored time):
/// the old next free ticket [`reserve`] returns.
#[inline(always)]
fn resynced_next_free(ticket: Ticket, now: i64) -> i64 {
    if now > ticket.next_free {
        now
    } else {
        ticket.next_free
    }
}

/// [`reserve_general`]'s new state alone. Out of line, a [`Ticket`] comes back in two registers
/// where `(Ticket, i64)` comes back through memory: a caller that calls it on a rare branch
/// (a permit straddling the warming threshold) keeps its common branches' results in
/// registers (issue 17, `instructions_warming_states`).
#[inline]
pub(crate) fn book_general<K: StoredPermits>(
    ticket: Ticket,
    now: i64,
    permits: u32,
    math: &K,
) -> Ticket {
    let ticket = resync(ticket, now, math.full_time());
    let required = f64::from(permits);
    let stored = math.permits_of(ticket.stored_time);
    let spend = required.min(stored);
    let fresh = required - spend;
    // `as i64` is Java's `(long)`: truncation, NaN → 0, saturation at the ends.
    let wait = math
        .wait_for_stored(stored, spend)
        .saturating_add(math.micros(fresh * math.interval()));
    let stored_time = if spend >= stored {
        0.0
    } else {
        math.time_of(stored - spend).clamp(0.0, math.full_time())
    };
    Ticket {
        next_free: ticket.next_free.saturating_add(wait),
        stored_time,
    }
}

/// What one decision produced: the state to publish (`None`: no write; a [`Ticket`], or a
/// flavour's encoded word), the answer, and the time the caller must wait before using its
/// permits.
/// The answer is a whole [`Decision`], or whatever a short path answers (`A`: an
/// [`Answer`](crate::decision::Answer), e.g. `bool` for `admit`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Outcome<N = Ticket, A = Decision> {
    pub(crate) next: Option<N>,
    pub(crate) decision: A,
    pub(crate) wait_micros: i64,
    /// The cost of a booking refused for being longer than [`MAX_BOOKING_MICROS`] (then
    /// `next` is `None`).
    pub(crate) refused_booking: Option<i64>,
}

impl<N> Outcome<N> {
    /// Nothing decided yet (the initial value a CAS closure overwrites).
    pub(crate) const UNDECIDED: Self = Outcome {
        next: None,
        decision: Decision::allow(0, 0, 0),
        wait_micros: 0,
        refused_booking: None,
    };
}

impl<N, A> Outcome<N, A> {
    /// The error for a refused booking, if this is one.
    #[inline]
    pub(crate) fn check_booking(&self, permits: u32) -> Result<(), crate::AcquireError> {
        match self.refused_booking {
            None => Ok(()),
            Some(cost) => Err(crate::AcquireError::BookingTooLong {
                requested: u64::from(permits),
                booking: Duration::from_micros(cost.max(0) as u64),
                max: Duration::from_micros(MAX_BOOKING_MICROS as u64),
            }),
        }
    }

    /// The same outcome with its state to publish mapped (e.g. encoded as a word).
    #[inline]
    pub(crate) fn map_next<M>(self, f: impl FnOnce(N) -> M) -> Outcome<M, A> {
        Outcome {
            next: self.next.map(f),
            decision: self.decision,
            wait_micros: self.wait_micros,
            refused_booking: self.refused_booking,
        }
    }
}

/// The whole decision, flavour-independent. `timeout` is `None` for `acquire`/`reserve` (always
/// granted) and `Some(µs)` for `tryAcquire` (Guava's `canAcquire` first). `math` is `None`
/// while the rate is infinite.
#[inline(always)]
pub(crate) fn decide<K: StoredPermits>(
    ticket: Ticket,
    now: i64,
    permits: u32,
    timeout: Option<i64>,
    math: Option<&K>,
) -> Outcome {
    if let Some(refused) = timeout.and_then(|timeout| refusal(ticket, now, timeout, permits, math))
    {
        return refused;
    }
    let limit = math.map_or(u64::MAX, StoredPermits::limit);
    let Some(math) = math else {
        // Rate +∞: free, nothing booked, nothing written; only debt booked before is waited.
        let wait = (ticket.next_free - now).max(0);
        let remaining = if wait == 0 { u64::MAX } else { 0 };
        return Outcome {
            next: None,
            decision: Decision::allow(limit, remaining, micros_to_nanos(wait)),
            wait_micros: wait,
            refused_booking: None,
        };
    };
    let (next, start) = reserve(ticket, now, permits, math);
    // No overflow, so no saturation (7 instructions, issue 17): `start` is `max(nf, now)`, at
    // least `now`, a µs count since the limiter's creation (never negative), and `next` is
    // `start.saturating_add(wait)`, so `next − start` is `wait` or `i64::MAX − start`.
    let cost = next.next_free - start;
    if cost > MAX_BOOKING_MICROS && math.interval().is_finite() {
        // One request may not book more than a year: beyond it, a single call could push the
        // limiter past its time range (never again) and no `set_rate` could repair it.
        return booking_too_long(limit, cost);
    }
    let remaining = if next.next_free <= now {
        // `as` truncates: the floor of a non-negative count (no libm call).
        f64_to_u64(math.permits_of(next.stored_time))
    } else {
        0
    };
    Outcome {
        next: Some(next),
        decision: Decision::allow(
            limit,
            remaining,
            micros_to_nanos(reset_after(next, now, math.full_time())),
        ),
        wait_micros: (start - now).max(0),
        refused_booking: None,
    }
}

/// The refusal of a booking of `cost` µs, longer than [`MAX_BOOKING_MICROS`]: nothing booked,
/// [`Outcome::check_booking`] makes it the error.
#[inline]
fn booking_too_long(limit: u64, cost: i64) -> Outcome {
    Outcome {
        next: None,
        decision: Decision::deny(limit, 0, micros_to_nanos(cost), micros_to_nanos(cost)),
        wait_micros: 0,
        refused_booking: Some(cost),
    }
}

/// Guava's `canAcquire` failing for `tryAcquire(_, timeout)` (`nf − timeout > now`): the
/// refusal, which writes nothing (`None`: the request is granted, see [`decide`]).
///
/// A request of `permits` is judged first as it would be booked when the refusal's wait ends
/// (at `nf`, on the limiter as it stands): a booking longer than [`MAX_BOOKING_MICROS`] then is
/// the refusal of a booking too long (the error), not a `retry_after` after which the same
/// request gets that error (issue 17). One permit never books more than a year at a rate the
/// limiter accepts (`parse_rate`, `check_warming`), so `permits = 1` skips the check (a
/// literal 1 compiles it away).
#[inline]
pub(crate) fn refusal<K: StoredPermits>(
    ticket: Ticket,
    now: i64,
    timeout: i64,
    permits: u32,
    math: Option<&K>,
) -> Option<Outcome> {
    let refused = wait_refusal(ticket, now, timeout, math)?;
    if permits != 1
        && let Some(too_long) = math.and_then(|math| too_long_when_paid(ticket, permits, math))
    {
        return Some(too_long);
    }
    Some(refused)
}

/// [`refusal`] by the wait alone, for one permit: a short path that serves `n > 1` sends such
/// a refusal to the engine (a check of the count inside the short path's refusal cost its
/// `try_acquire` 39 to 45 instructions a call, `instructions_smooth`).
#[inline]
pub(crate) fn wait_refusal<K: StoredPermits>(
    ticket: Ticket,
    now: i64,
    timeout: i64,
    math: Option<&K>,
) -> Option<Outcome> {
    if ticket.next_free.saturating_sub(timeout) <= now {
        return None;
    }
    let limit = math.map_or(u64::MAX, StoredPermits::limit);
    let retry = ticket.next_free - now;
    let reset = math.map_or(retry, |m| reset_after(ticket, now, m.full_time()));
    Some(Outcome {
        next: None,
        decision: Decision::deny(limit, 0, micros_to_nanos(retry), micros_to_nanos(reset)),
        wait_micros: 0,
        refused_booking: None,
    })
}

/// The refusal for a booking too long of `permits` booked at `nf` (when a refusal's wait ends,
/// nothing else booked meanwhile), if it is one: what [`decide`] would answer then.
#[cold]
#[inline(never)]
pub(crate) fn too_long_when_paid<K: StoredPermits>(
    ticket: Ticket,
    permits: u32,
    math: &K,
) -> Option<Outcome> {
    let (next, start) = reserve(ticket, ticket.next_free, permits, math);
    let cost = next.next_free - start;
    (cost > MAX_BOOKING_MICROS && math.interval().is_finite())
        .then(|| booking_too_long(math.limit(), cost))
}

/// Time until the limiter is idle and its stored permits full again.
#[inline]
pub(crate) fn reset_after(ticket: Ticket, now: i64, full_time: f64) -> i64 {
    let debt = ticket.next_free.saturating_sub(now).max(0);
    debt.saturating_add(refill_micros(full_time, ticket.stored_time))
}

/// Whole µs (rounded up) until `stored_time` accrues to `full_time`; 0 if it is there.
#[inline]
pub(crate) fn refill_micros(full_time: f64, stored_time: f64) -> i64 {
    let missing = (full_time - stored_time).max(0.0);
    // ⌈missing⌉ without a libm call.
    let whole = missing as i64;
    if (whole as f64) < missing {
        whole + 1
    } else {
        whole
    }
}

/// The rate as whole permits per second (Decision's `limit`): rounded half up, at least 1 (a
/// rate below 0.5/s still admits: a free limiter grants a request at once, so 0 would be
/// false), saturating at `u64::MAX`.
#[inline]
pub(crate) fn limit_of(interval: f64) -> u64 {
    // Round half up without a libm call; saturating (∞ → u64::MAX). The interval of a valid
    // rate is positive (+∞ for a subnormal rate: 0 before the floor), never NaN.
    f64_to_u64(1e6 / interval + 0.5).max(1)
}

/// `x as u64` (truncating, saturating, NaN → 0), in fewer instructions on x86-64 for the values
/// below 2⁶³ (one signed `cvttsd2si` instead of the unsigned conversion's two and a blend).
#[inline]
pub(crate) fn f64_to_u64(x: f64) -> u64 {
    /// 2⁶³: the `f64` values in `0..2⁶³` convert to `i64` exactly as to `u64`.
    const I64_END: f64 = 9_223_372_036_854_775_808.0;
    if x < I64_END {
        (x as i64).max(0) as u64
    } else {
        x as u64
    }
}

/// Microseconds to nanoseconds, saturating; negative counts as zero.
#[inline]
pub(crate) fn micros_to_nanos(micros: i64) -> u64 {
    (micros.max(0) as u64).saturating_mul(1000)
}

/// Guava's `unit.toMicros(timeout)`: truncating, saturating at `i64::MAX`.
#[inline]
pub(crate) fn timeout_micros(timeout: Duration) -> i64 {
    i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX)
}

/// Microseconds since `origin` on the clock's timeline (a read behind the origin counts as 0).
#[inline]
pub(crate) fn micros_since(now_nanos: u64, origin_nanos: u64) -> i64 {
    (now_nanos.saturating_sub(origin_nanos) / 1000) as i64
}

/// A validated rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum RateSetting {
    /// A finite rate, as its stable interval in µs per permit (`+∞` for a subnormal rate, as in
    /// Guava: one permit, then nothing ever again).
    Finite(f64),
    /// `+∞` permits per second.
    Infinite,
}

/// The stable interval (µs) from which one fresh permit books more than
/// [`MAX_BOOKING_MICROS`]: its cost is the interval truncated to whole µs (a finite interval
/// this long is past [`round_micros`]' rounding-up range), so `MAX_BOOKING_MICROS + 1` and
/// above. The number is exact in an `f64` (below 2⁵³).
const FIRST_UNBOOKABLE_INTERVAL: f64 = (MAX_BOOKING_MICROS + 1) as f64;

/// Guava's `checkArgument(permitsPerSecond > 0.0 && !Double.isNaN(permitsPerSecond))`, and a
/// finite rate slow enough that one permit would book more than a year is refused: such a
/// limiter could only answer [`AcquireError::BookingTooLong`](crate::AcquireError). The bound
/// is on the stable interval `1e6 / rate`: below `MAX_BOOKING_MICROS + 1` µs (rates from about
/// 3.17·10⁻⁸ per second, one permit a year). A rate whose interval overflows to `+∞` (below
/// about 5.6·10⁻³⁰³ per second: Guava's `Double.MIN_VALUE`) keeps Guava's "one permit, then
/// never". A warming limiter's stored permits cost more than the interval: `check_warming` in
/// `warming.rs` bounds those.
pub(crate) fn parse_rate(permits_per_second: f64) -> Result<RateSetting, ConfigError> {
    if permits_per_second.is_nan() || permits_per_second <= 0.0 {
        return Err(ConfigError::InvalidNumber {
            what: "permits_per_second",
            value: permits_per_second,
            expected: "> 0 and not NaN",
        });
    }
    if permits_per_second == f64::INFINITY {
        return Ok(RateSetting::Infinite);
    }
    let interval = 1e6 / permits_per_second;
    if interval.is_finite() && interval >= FIRST_UNBOOKABLE_INTERVAL {
        return Err(ConfigError::InvalidNumber {
            what: "permits_per_second",
            value: permits_per_second,
            expected: "at least one permit a year (1/31536000 per second; one request books \
                       at most a year), or below about 5.6e-303 (Guava's Double.MIN_VALUE: \
                       one permit, then never)",
        });
    }
    Ok(RateSetting::Finite(interval))
}

/// The live stable interval (µs per permit, `f64` bits) of a finite rate. Infinity is a flag in
/// the state word instead (see the module docs).
#[derive(Debug)]
pub(crate) struct IntervalCell {
    bits: AtomicU64,
}

impl IntervalCell {
    pub(crate) fn new(interval: f64) -> Self {
        IntervalCell {
            bits: AtomicU64::new(interval.to_bits()),
        }
    }

    /// The interval, read after the caller loaded the state word.
    #[inline]
    pub(crate) fn load(&self) -> f64 {
        // Acquire fence: pairs with `publish`'s release fence through the state word, so a
        // decision made from a word written after a `set_rate` uses that rate or a later one.
        fence(Ordering::Acquire);
        // Relaxed: ordered by the fence above.
        f64::from_bits(self.bits.load(Ordering::Relaxed))
    }

    /// Stores a new interval; every later write of the state word by this thread publishes it.
    pub(crate) fn publish(&self, interval: f64) {
        // Relaxed: the release fence below orders it before this thread's next word write.
        self.bits.store(interval.to_bits(), Ordering::Relaxed);
        // Release fence: see `load`.
        fence(Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rate_validation_follows_guava() {
        for bad in [0.0, -0.0, -1.0, f64::NAN, f64::NEG_INFINITY] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_rate(5.0), Ok(RateSetting::Finite(200_000.0)));
        assert_eq!(parse_rate(f64::INFINITY), Ok(RateSetting::Infinite));
        // Double.MIN_VALUE: a stable interval of +∞ (one permit, then never again).
        assert_eq!(
            parse_rate(f64::from_bits(1)),
            Ok(RateSetting::Finite(f64::INFINITY))
        );
    }

    /// Splitmix64: a deterministic step generator for the admission counts.
    fn next(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Admissions of single permits over `span` of simulated time, trying until refused at
    /// every step and stepping the clock by 1..=`max_step_nanos` (deterministic).
    fn admissions(
        limiter: &impl crate::Limiter,
        clock: &crate::ManualClock,
        span: u64,
        max_step_nanos: u64,
        mut seed: u64,
    ) -> (u64, u64) {
        use crate::Clock;
        let start = clock.now_nanos();
        let mut admitted = 0u64;
        while clock.now_nanos() - start < span {
            while limiter.try_acquire(1).unwrap().is_allowed() {
                admitted += 1;
            }
            clock.advance_nanos(1 + next(&mut seed) % max_step_nanos);
        }
        (admitted, clock.now_nanos() - start)
    }

    fn assert_within_rate(rate: f64, burst: f64, admitted: u64, elapsed_nanos: u64) {
        let bound = rate * elapsed_nanos as f64 / 1e9 * 1.001 + burst + 1.0;
        assert!(
            (admitted as f64) <= bound,
            "rate {rate}: {admitted} admitted in {elapsed_nanos} ns, bound {bound}"
        );
    }

    #[test]
    fn smooth_limiters_never_exceed_their_rate_by_more_than_a_thousandth() {
        use crate::{ManualClock, SmoothBursty, SmoothWarmingUp};
        // Guava's rounding (low rates) and the rounded-up costs (high rates), both flavours.
        for (rate, span, step) in [
            (300.0, 200_000_000_000, 5_000_000),
            (997.0, 50_000_000_000, 2_000_000),
            (3_000.0, 10_000_000_000, 700_000),
            (300_000.0, 200_000_000, 9_000),
            (400_000.0, 200_000_000, 9_000),
            (700_000.0, 200_000_000, 9_000),
            (3_000_000.0, 20_000_000, 3_000),
        ] {
            for seed in 0..2 {
                let clock = ManualClock::new();
                let bursty = SmoothBursty::create_with_clock(rate, clock.clone()).unwrap();
                let (admitted, elapsed) = admissions(&bursty, &clock, span, step, seed);
                assert_within_rate(rate, rate, admitted, elapsed);

                let clock = ManualClock::new();
                let warmup = Duration::from_millis(100);
                let warming =
                    SmoothWarmingUp::create_with_clock(rate, warmup, clock.clone()).unwrap();
                let max_permits = rate * 0.1; // warm-up / stable interval, cold factor 3
                let (admitted, elapsed) = admissions(&warming, &clock, span, step, seed);
                assert_within_rate(rate, max_permits, admitted, elapsed);
            }
        }
    }

    /// The values a cap can meet: the signed zeros, subnormals, the ends of the finite range,
    /// the infinities, NaN (for `full` only, see `cap`), and ordinary values.
    fn edge_f64() -> impl Strategy<Value = f64> {
        prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::from_bits(1)),
            Just(f64::MIN_POSITIVE),
            Just(f64::MAX),
            Just(f64::MIN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(4e6),
            -1e16f64..1e16,
            any::<u64>().prop_map(f64::from_bits),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        /// `cap` is `f64::min` to the bit for every `stored` that is not NaN, whatever `full`
        /// is (NaN included).
        #[test]
        fn cap_is_f64_min_for_every_stored_time_that_is_not_nan(
            stored in edge_f64(),
            full in prop_oneof![edge_f64(), Just(f64::NAN)],
        ) {
            prop_assume!(!stored.is_nan());
            let (capped, min) = (cap(stored, full), stored.min(full));
            // `f64::min` leaves the sign of a zero from two zeros unspecified; a resync's
            // `stored` is at least 1 µs.
            if capped == 0.0 && min == 0.0 {
                return Ok(());
            }
            prop_assert_eq!(capped.to_bits(), min.to_bits(), "{} {}", stored, full);
        }
    }

    #[test]
    fn guava_rounding_is_kept_where_it_is_within_a_thousandth() {
        assert_eq!(round_micros(3.9, true), 3);
        assert_eq!(round_micros(3.1, false), 4);
        assert_eq!(round_micros(3.0, false), 3);
        assert_eq!(round_micros(f64::INFINITY, false), i64::MAX);
        assert_eq!(round_micros(f64::NAN, false), 0);
    }

    #[test]
    fn one_request_cannot_book_past_a_year() {
        use crate::{AcquireError, Clock, Limiter, ManualClock, SmoothBursty, SmoothWarmingUp};
        let clock = ManualClock::new();
        let bursty = SmoothBursty::create_with_clock(1.0, clock.clone()).unwrap();
        let err = bursty.try_acquire(u32::MAX).unwrap_err();
        assert_eq!(
            err,
            AcquireError::BookingTooLong {
                requested: u64::from(u32::MAX),
                booking: Duration::from_secs(u64::from(u32::MAX)),
                max: Duration::from_micros(MAX_BOOKING_MICROS as u64),
            }
        );
        assert!(err.to_string().contains("at most 31536000s"), "{err}");
        assert!(bursty.reserve(u32::MAX).is_err());
        assert!(bursty.try_acquire_for(u32::MAX, Duration::MAX).is_err());
        // Nothing was booked: the limiter still grants at once, and a year's worth is fine.
        assert!(bursty.try_acquire(1).unwrap().is_allowed());
        clock.advance(Duration::from_secs(1));
        assert!(bursty.try_acquire(365 * 86_400).unwrap().is_allowed());
        // …and set_rate then repairs the debt it booked.
        bursty.set_rate(1e6).unwrap();
        clock.set(clock.now_nanos() + 365 * 86_400 * 1_000_000_000);
        assert!(bursty.try_acquire(1).unwrap().is_allowed());

        let warming =
            SmoothWarmingUp::create_with_clock(1.0, Duration::from_secs(1), clock.clone()).unwrap();
        assert!(matches!(
            warming.try_acquire(u32::MAX),
            Err(AcquireError::BookingTooLong { .. })
        ));
        assert!(warming.try_acquire(1).unwrap().is_allowed());
        // Guava's Double.MIN_VALUE (interval +∞) keeps its documented "one, then never".
        let tiny = SmoothBursty::create_with_clock(f64::from_bits(1), clock.clone()).unwrap();
        assert!(tiny.try_acquire(1).unwrap().is_allowed());
        assert!(!tiny.try_acquire(1).unwrap().is_allowed());
    }

    /// The steps of [`short_path_decides_as_the_engine`]: permits, a clock step (ns) and maybe a
    /// new rate first (∞, `Double.MIN_VALUE`'s *never*, or finite).
    fn steps() -> impl Strategy<Value = Vec<(u32, u64, Option<f64>)>> {
        let rate = prop_oneof![Just(f64::INFINITY), Just(f64::from_bits(1)), 0.5f64..1e6];
        prop::collection::vec(
            (
                prop_oneof![1u32..20, Just(100_000_000)],
                // Long idles, and steps of a few µs (bookings that end just now or just after).
                prop_oneof![0u64..400_000_000, 0u64..3_000],
                prop_oneof![8 => Just(None), 1 => rate.prop_map(Some)],
            ),
            1..80,
        )
    }

    /// `try_acquire` (the short path) and `try_acquire_for(n, 0)` (the general engine) give the
    /// same answers on the same calls, and leave the same state; `admit` agrees.
    /// The calls start `start_nanos` after the limiters' creation.
    fn short_path_decides_as_the_engine<L: crate::Limiter>(
        make: impl Fn(&crate::ManualClock) -> L,
        set_rate: impl Fn(&L, f64),
        snapshot: impl Fn(&L) -> SmoothSnapshot,
        start_nanos: u64,
        steps: Vec<(u32, u64, Option<f64>)>,
    ) -> Result<(), TestCaseError> {
        let clock = crate::ManualClock::new();
        let (short, engine, admit) = (make(&clock), make(&clock), make(&clock));
        clock.advance_nanos(start_nanos);
        for (n, step, rate) in steps {
            if let Some(rate) = rate {
                for limiter in [&short, &engine, &admit] {
                    set_rate(limiter, rate);
                }
            }
            let a = short.try_acquire(n);
            prop_assert_eq!(a, engine.try_acquire_for(n, Duration::ZERO));
            prop_assert_eq!(a.map(|d| d.is_allowed()), admit.admit(n));
            prop_assert_eq!(snapshot(&short), snapshot(&engine));
            prop_assert_eq!(snapshot(&short), snapshot(&admit));
            clock.advance_nanos(step);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        /// Through rate changes (to and from ∞), long bookings and *never*; from the start of the
        /// time range, or from its last 30 s (the lag horizon's reach, and the end itself).
        #[test]
        fn bursty_short_path_decides_as_the_engine(
            rate in prop_oneof![Just(5.0), Just(3.0), 0.5f64..2_000.0, 1e5f64..1e9],
            burst in prop_oneof![Just(1.0), 0.0f64..3.0],
            before_end in prop_oneof![2 => Just(None), 1 => (0u64..30_000_000).prop_map(Some)],
            steps in steps(),
        ) {
            use crate::SmoothBursty;
            // The range's end, as `BurstyCodec::max_micros` (µs since creation).
            let end = (1u64 << 51) - 1 - (burst * 1e6).ceil() as u64 - 1;
            let start = before_end.map_or(0, |before| end.saturating_sub(before) * 1000);
            short_path_decides_as_the_engine(
                |clock| SmoothBursty::with_max_burst(rate, burst, clock.clone()).unwrap(),
                |l, r| l.set_rate(r).unwrap(),
                SmoothBursty::snapshot,
                start,
                steps,
            )?;
        }

        /// As for bursty, cold and warm.
        #[test]
        fn warming_short_path_decides_as_the_engine(
            rate in prop_oneof![Just(5.0), Just(2.0), 0.5f64..2_000.0, 1e5f64..1e9],
            warmup_ms in prop_oneof![Just(0u64), Just(4000), 1u64..3000],
            cold_factor in prop_oneof![Just(3.0), 1.0f64..10.0],
            steps in steps(),
        ) {
            use crate::SmoothWarmingUp;
            let warmup = Duration::from_millis(warmup_ms);
            short_path_decides_as_the_engine(
                |clock| {
                    SmoothWarmingUp::with_cold_factor(rate, warmup, cold_factor, clock.clone())
                        .unwrap()
                },
                |l, r| {
                    // A rate too high for the warm-up is refused by both alike.
                    let _ = l.set_rate(r);
                },
                SmoothWarmingUp::snapshot,
                0,
                steps,
            )?;
        }
    }

    #[test]
    fn conversions_saturate() {
        assert_eq!(micros_to_nanos(-5), 0);
        assert_eq!(micros_to_nanos(i64::MAX), u64::MAX);
        assert_eq!(timeout_micros(Duration::MAX), i64::MAX);
        assert_eq!(timeout_micros(Duration::from_nanos(1999)), 1);
        assert_eq!(micros_since(5, 10), 0);
        // A subnormal rate's interval: it admits one permit, so its limit is 1, never 0.
        assert_eq!(limit_of(f64::INFINITY), 1);
        assert_eq!(limit_of(3e6), 1); // 0.33/s
        assert_eq!(limit_of(1e6 / f64::MAX), u64::MAX);
    }
}
