//! [`SmoothWarmingUp`]: Guava's `RateLimiter.create(permitsPerSecond, warmupPeriod)` in one
//! 128-bit word.
//!
//! # Word layout
//! ```text
//!  127 126                                   64 63                                   0
//! ┌───┬───────────────────────────────────────┬──────────────────────────────────────┐
//! │ ∞ │ nf: next free ticket, µs, 63 bits      │ stored_time: f64 bits (µs, 0..=W)    │
//! └───┴───────────────────────────────────────┴──────────────────────────────────────┘
//! ```
//! * bit 127: the rate is `+∞`.
//! * bits 64..=126: Guava's `nextFreeTicketMicros` since the limiter's creation, exactly
//!   (`i64::MAX` = Guava's saturated `Long.MAX_VALUE`: never).
//! * bits 0..=63: the stored permits as the time they took to accrue, an `f64` in `0..=W`
//!   (`W` = the warm-up period; `stored = stored_time × maxPermits / W`). A new limiter is
//!   cold: `stored_time = W`.
//!
//! Why not 64 bits: see the module docs of `smooth` (the state is two-dimensional).

use std::fmt;
use std::time::Duration;

use crossbeam_utils::CachePadded;

mod short;

use super::warm_up_math::WarmingMath;
use super::wide::AtomicWide;
use super::{
    IntervalCell, MAX_BOOKING_MICROS, Outcome, RateSetting, SmoothSnapshot, StoredPermits, Ticket,
    decide, micros_since, parse_rate, reserve, resync,
};
use crate::clock::{Clock, QuantaClock};
use crate::decision::ConfigError;
use crate::limiter::{MICROS_FLOOR, floored};
use crate::sync::{AtomicU64, Ordering, fence};

const INFINITE_BIT: u64 = 1 << 63;
/// Longest warm-up accepted: 2⁵² µs (142 years), so `W` is an exact `f64` of whole µs.
const MAX_WARMUP_MICROS: u128 = 1 << 52;
/// Guava's `RateLimiter.create(r, warmup)` cold factor.
const DEFAULT_COLD_FACTOR: f64 = 3.0;
/// The largest cold factor accepted. The warm-up zone is `4 / (1 + cold_factor)` of the
/// threshold's permits, computed next to them in an `f64`: from about 1e13 its rounding moves
/// the warm-up's cost by 0.01% and more, and from about 1e17 the zone rounds away (no warm-up
/// at all). At 1e9 the cost is kept to within a µs in a second (`bad_input_sweep`).
const MAX_COLD_FACTOR: f64 = 1e9;

/// Guava's `SmoothWarmingUp`: after idling, the limiter is *cold* and hands out permits slowly
/// (at `cold_factor ×` the stable interval), speeding up linearly to the stable rate as stored
/// permits are spent, so a cold start takes the warm-up period to reach full speed.
///
/// The whole state is one 128-bit word (layout in the source of `warming.rs`), updated by one
/// double-width compare-exchange; a refusal writes nothing.
///
/// ```
/// use floodgate::{Limiter, ManualClock, SmoothWarmingUp};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let limiter = SmoothWarmingUp::create_with_clock(2.0, Duration::from_secs(4), clock.clone())?;
/// // Guava's testWarmUp: R0.00, R1.38, R1.13, R0.88, R0.63, R0.50, R0.50, R0.50
/// let waits: Vec<u128> = (0..8)
///     .map(|_| limiter.acquire(1).map(|slept| slept.as_micros()))
///     .collect::<Result<_, _>>()?;
/// assert_eq!(waits, [0, 1_375_000, 1_125_000, 875_000, 625_000, 500_000, 500_000, 500_000]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SmoothWarmingUp<C = QuantaClock> {
    /// The state word and its time floor, on one cache line (an admission that raises the floor
    /// touches no second line).
    words: CachePadded<Words>,
    interval: IntervalCell,
    /// Guava's derived quantities for the interval at construction (a decision on another
    /// interval derives its own: [`WarmingMath::for_interval`]).
    base: WarmingMath,
    warmup_micros: f64,
    cold_factor: f64,
    clock: C,
    origin_nanos: u64,
}

impl SmoothWarmingUp<QuantaClock> {
    /// Guava's `RateLimiter.create(permitsPerSecond, warmupPeriod)` (cold factor 3) on the
    /// default clock.
    ///
    /// # Errors
    /// [`ConfigError::InvalidNumber`] for a rate that is zero, negative or NaN, or below one
    /// permit a year (as [`SmoothBursty::create`](crate::SmoothBursty::create));
    /// [`ConfigError::DurationOutOfRange`] (`what: "warm-up"`) for a warm-up above 2⁵² µs
    /// (142 years);
    /// [`ConfigError::Invalid`] for a finite rate so high that the warm-up would hold more than
    /// `f64::MAX` permits, or so low that one permit spent from a cold limiter (up to
    /// `cold_factor` stable intervals) would book more than a year less 2 µs (with a warm-up
    /// above 0: a permit booked partly stored and partly fresh is the sum of truncated parts,
    /// which can book a µs more than a cold or an empty limiter's permit); beyond a year every
    /// request would be refused as
    /// [`AcquireError::BookingTooLong`](crate::AcquireError::BookingTooLong).
    ///
    /// ```
    /// use std::time::Duration;
    /// let limiter = floodgate::SmoothWarmingUp::create(5.0, Duration::from_secs(5)).unwrap();
    /// assert_eq!(limiter.rate(), 5.0);
    /// let err = floodgate::SmoothWarmingUp::create(5.0, Duration::MAX).unwrap_err();
    /// assert!(matches!(err, floodgate::ConfigError::DurationOutOfRange { what: "warm-up", .. }));
    /// // 1 permit in 200 days: after a 10-year warm-up, a cold permit (up to 3 intervals) books
    /// // more than a year.
    /// let slow = 1.0 / (200.0 * 86_400.0);
    /// let err = floodgate::SmoothWarmingUp::create(slow, Duration::from_secs(315_360_000));
    /// assert!(matches!(err, Err(floodgate::ConfigError::Invalid { what: "permits_per_second", .. })));
    /// ```
    pub fn create(permits_per_second: f64, warmup: Duration) -> Result<Self, ConfigError> {
        Self::create_with_clock(permits_per_second, warmup, QuantaClock::new())
    }
}

impl<C: Clock> SmoothWarmingUp<C> {
    /// [`create`](SmoothWarmingUp::create) on `clock`. A warm-up of zero is accepted: no stored
    /// permits, every permit at the stable interval.
    ///
    /// # Errors
    /// As [`create`](SmoothWarmingUp::create).
    ///
    /// ```
    /// use floodgate::{ManualClock, SmoothWarmingUp};
    /// use std::time::Duration;
    /// let limiter =
    ///     SmoothWarmingUp::create_with_clock(2.0, Duration::from_secs(4), ManualClock::new()).unwrap();
    /// assert_eq!(limiter.snapshot().stored_permits, 8.0); // starts cold: maxPermits stored
    /// ```
    pub fn create_with_clock(
        permits_per_second: f64,
        warmup: Duration,
        clock: C,
    ) -> Result<Self, ConfigError> {
        Self::with_cold_factor(permits_per_second, warmup, DEFAULT_COLD_FACTOR, clock)
    }

    /// A warming limiter with Guava's package-private `coldFactor` (the cold interval is
    /// `cold_factor ×` the stable one; `create` uses 3.0, 1.0 is a flat limiter).
    ///
    /// # Errors
    /// As [`create`](SmoothWarmingUp::create), and [`ConfigError::InvalidNumber`] for a cold
    /// factor below 1, infinite or NaN, or above 1e9 (a larger one's warm-up zone,
    /// `4 / (1 + cold_factor)` of the threshold's permits, is lost to `f64` rounding).
    ///
    /// ```
    /// use floodgate::{ManualClock, SmoothWarmingUp};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// let limiter = SmoothWarmingUp::with_cold_factor(5.0, Duration::from_secs(4), 10.0, clock).unwrap();
    /// assert!((limiter.snapshot().stored_permits - 13.636363636363637).abs() < 1e-9);
    /// ```
    pub fn with_cold_factor(
        permits_per_second: f64,
        warmup: Duration,
        cold_factor: f64,
        clock: C,
    ) -> Result<Self, ConfigError> {
        if !(cold_factor.is_finite() && cold_factor >= 1.0) {
            return Err(ConfigError::InvalidNumber {
                what: "cold_factor",
                value: cold_factor,
                expected: "finite and at least 1",
            });
        }
        if cold_factor > MAX_COLD_FACTOR {
            return Err(ConfigError::InvalidNumber {
                what: "cold_factor",
                value: cold_factor,
                expected: "at most 1e9 (a larger one's warm-up zone, 4 / (1 + cold_factor) of \
                           the threshold's permits, is lost to f64 rounding)",
            });
        }
        let warmup_micros = warmup.as_micros();
        if warmup_micros > MAX_WARMUP_MICROS {
            return Err(ConfigError::DurationOutOfRange {
                what: "warm-up",
                value: warmup,
                min: Duration::ZERO,
                max: Duration::from_micros(MAX_WARMUP_MICROS as u64),
            });
        }
        let warmup_micros = warmup_micros as f64;
        let setting = check_warming(parse_rate(permits_per_second)?, warmup_micros, cold_factor)?;
        let (interval, infinite) = match setting {
            RateSetting::Finite(interval) => (interval, false),
            // Unused until a finite rate is set.
            RateSetting::Infinite => (0.0, true),
        };
        // Guava: a new warming limiter starts cold, with maxPermits stored.
        let cold = Ticket {
            next_free: 0,
            stored_time: warmup_micros,
        };
        Ok(SmoothWarmingUp {
            words: CachePadded::new(Words {
                state: AtomicWide::new(pack(cold, infinite)),
                floor: AtomicU64::new(0),
                repairs: AtomicU64::new(0),
            }),
            interval: IntervalCell::new(interval),
            base: WarmingMath::new(interval, warmup_micros, cold_factor),
            warmup_micros,
            cold_factor,
            origin_nanos: clock.now_nanos(),
            clock,
        })
    }

    /// Whether the 128-bit compare-exchange is lock-free on this machine (it is on every x86-64
    /// CPU with `cmpxchg16b` and on AArch64); otherwise `portable-atomic` falls back to a lock.
    ///
    /// ```
    /// # #[cfg(target_arch = "x86_64")]
    /// assert!(floodgate::SmoothWarmingUp::<floodgate::ManualClock>::is_lock_free());
    /// ```
    pub fn is_lock_free() -> bool {
        AtomicWide::is_lock_free()
    }

    #[inline]
    fn now_micros(&self) -> i64 {
        micros_since(self.clock.now_nanos(), self.origin_nanos)
    }

    fn validate_rate(&self, permits_per_second: f64) -> Result<RateSetting, ConfigError> {
        check_warming(
            parse_rate(permits_per_second)?,
            self.warmup_micros,
            self.cold_factor,
        )
    }

    fn load_word(&self) -> u128 {
        // Acquire: a word carries its writer's view of the interval (read after IntervalCell's
        // acquire fence); a reader of the word must see that interval or a later one.
        self.words.state.load(Ordering::Acquire)
    }

    fn infinite(&self) -> bool {
        unpack(self.load_word()).1
    }

    fn interval(&self) -> f64 {
        self.interval.load()
    }

    #[inline]
    fn math(&self) -> WarmingMath {
        WarmingMath::for_interval(&self.base, self.interval.load(), self.cold_factor)
    }

    /// One decision at `now`, published with one 128-bit CAS (retried on conflict).
    #[inline]
    fn decide_at(&self, permits: u32, now: i64, timeout: Option<i64>) -> Outcome {
        let mut outcome = Outcome::UNDECIDED;
        // AcqRel / Acquire, as `limiter::update`: the word publishes the interval its writer read,
        // so a request that decides on it cannot use an older one (IntervalCell's fences order
        // the interval itself). loom models this word with a mutex (no 128-bit atomics there),
        // so these orderings are argued here, not model-checked.
        // The time floor, as `limiter::update_floored` keeps it for one word: decide at
        // max(clock, floor); a booking raises the floor (once per grain) before its Release CAS.
        // A floor beyond the lag horizon of a clock read taken after the word was loaded is a
        // leaping clock's: ignored, and put back to that read by the next booking.
        let mut clock_now = u64::try_from(now).unwrap_or(0);
        let read_clock = || u64::try_from(self.now_micros()).unwrap_or(0);
        // Whether this is a retry after a lost compare-exchange: it decides on a new clock read,
        // as `update_floored_leap` does (a leaper's retry at its leapt time could land after a
        // repair, and the repair then lower the floor under a leaped booking).
        let mut retry = false;
        // The leaped floor to put back once this booking has landed: (the floor seen, the read).
        let mut lower = None;
        // Whether the last decision refused by a booking beyond the horizon under an in-range
        // floor (see `Step::leap`): it stands only on a word that is still current.
        let mut refused_beyond = false;
        let written = loop {
            // AcqRel / Acquire: as the engine's compare-exchange (`update`): Release publishes
            // the floor raised below with the word; Acquire pairs with the previous writer's
            // Release, so the floor loaded in the closure is at least the one it published.
            let written =
                self.words
                    .state
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                        // A read taken after `word` was loaded (the retry's) is fresh.
                        let mut fresh = retry;
                        if retry {
                            clock_now = read_clock();
                        }
                        retry = true;
                        // Relaxed: ordered after the Acquire load of `word`, which synchronizes with
                        // the Release CAS that followed the writer's floor raise.
                        let floor_now = self.words.floor.load(Ordering::Relaxed);
                        let mut floor_leaped = false;
                        let floored =
                            floored(clock_now, floor_now, MICROS_FLOOR).unwrap_or_else(|| {
                                if !fresh {
                                    clock_now = read_clock();
                                    fresh = true;
                                }
                                floored(clock_now, floor_now, MICROS_FLOOR).unwrap_or_else(|| {
                                    floor_leaped = true;
                                    clock_now
                                })
                            });
                        // The floor only ever holds values of `now_micros`, which fit in an i64.
                        let now = i64::try_from(floored).unwrap_or(now);
                        let (mut ticket, infinite) = unpack(word);
                        // Only a booking itself beyond the horizon is moved (the floor and the word are
                        // two atomics: a leaper's floor can be seen with a present word).
                        let horizon = i64::try_from(MICROS_FLOOR.horizon).unwrap_or(i64::MAX);
                        let beyond_horizon = ticket.next_free != i64::MAX
                            && ticket.next_free > now.saturating_add(horizon);
                        let leaped = floor_leaped && beyond_horizon;
                        if leaped {
                            // Booked on a leaping clock: moved back by the leap, its debt counted from
                            // the present (as SmoothBursty does).
                            let leap = i64::try_from(floor_now - floored).unwrap_or(i64::MAX);
                            ticket.next_free = ticket.next_free.saturating_sub(leap).max(0);
                        }
                        let math = (!infinite).then(|| self.math());
                        outcome = decide(ticket, now, permits, timeout, math.as_ref());
                        // A denial (or a free request at ∞) writes nothing, except the booking moved
                        // back from a leap (once per leap, so it stays where this read put it).
                        let next = outcome
                            .next
                            .map(|t| pack(t, infinite))
                            .or(leaped.then(|| pack(ticket, infinite)))
                            .filter(|&next| next != word);
                        refused_beyond = next.is_none() && beyond_horizon && !floor_leaped;
                        lower = (next.is_some() && floor_leaped).then_some((floor_now, floored));
                        // A leaped floor is lowered after the booking lands (below), as
                        // `update_floored_leap` does; otherwise raised once per grain.
                        if next.is_some()
                            && !floor_leaped
                            && floored >= floor_now.saturating_add(MICROS_FLOOR.grain)
                        {
                            // Relaxed: published to readers by the Release CAS that follows.
                            self.words.floor.fetch_max(floored, Ordering::Relaxed);
                        }
                        next
                    });
            if let (Err(seen), true) = (written, refused_beyond) {
                // The word may be a leaped one that a repair replaced since, lowering the floor
                // this decision loaded. Acquire fence: pairs with the Release of that lowering
                // (below); the load then sees the repair, and the decision is made again on it.
                fence(Ordering::Acquire);
                if self.load_word() != seen {
                    continue;
                }
            }
            break written;
        };
        if let (Ok(_), Some((seen, read))) = (written, lower) {
            // Counted before the floor is lowered, for the short path's refusal (`short.rs`),
            // which loads this count before the word and again after the floor. Release: pairs
            // with the Acquire load of the count before the word (a caller that sees this count
            // loads the repaired word or a later one); the floor's Release below orders it
            // before the lowering (a caller that sees the lowered floor sees this count).
            self.words.repairs.fetch_add(1, Ordering::Release);
            // A reader that sees the old floor with this booking only re-reads its clock (the
            // booking is in range); another thread's newer floor stands. Release: pairs with the
            // Acquire fence of a refusal that loaded the leaped word before this booking and
            // this floor after it (above, and `short.rs`).
            let _ =
                self.words
                    .floor
                    .compare_exchange(seen, read, Ordering::Release, Ordering::Relaxed);
        }
        outcome
    }

    fn set_infinite(&self) {
        // AcqRel / Acquire: as decide_at.
        let _ = self
            .words
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                let (ticket, infinite) = unpack(word);
                (!infinite).then(|| pack(ticket, true))
            });
    }

    fn set_finite(&self, interval: f64, now: i64) {
        let before = self.load_word();
        self.interval.publish(interval);
        if unpack(before).1 {
            // The word written is stamped with `now` (warm from then): publish the floor first,
            // as every writer does, so that a leaping read's word is judged a leap and repaired
            // (`tests/smooth_leaping_set_rate.rs`). Relaxed: published by the Release of the
            // update below. `now` is a read of `now_micros`.
            self.words
                .floor
                .fetch_max(u64::try_from(now).unwrap_or(0), Ordering::Relaxed);
            // AcqRel / Acquire: as decide_at; the release fence in `publish` orders the interval
            // first.
            let _ = self
                .words
                .state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                    let (ticket, infinite) = unpack(word);
                    // Guava: resync, then stored = 0 when leaving ∞ (fully warm).
                    let warm = Ticket {
                        next_free: ticket.next_free.max(now),
                        stored_time: 0.0,
                    };
                    infinite.then(|| pack(warm, false))
                });
        }
    }

    fn snapshot_at(&self, now: i64) -> SmoothSnapshot {
        let (ticket, infinite) = unpack(self.load_word());
        let ticket = resync(ticket, now, self.warmup_micros);
        let stored_permits = if infinite {
            f64::INFINITY
        } else {
            self.math().permits_of(ticket.stored_time)
        };
        SmoothSnapshot {
            next_free_micros: ticket.next_free,
            stored_permits,
            rate: self.rate(),
        }
    }
}

smooth_limiter_api!(
    SmoothWarmingUp,
    "SmoothWarmingUp::create_with_clock(5.0, std::time::Duration::ZERO, clock.clone()).unwrap()"
);

impl<C> fmt::Debug for SmoothWarmingUp<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Relaxed: diagnostics only.
        let (ticket, infinite) = unpack(self.words.state.load(Ordering::Relaxed));
        f.debug_struct("SmoothWarmingUp")
            .field("next_free_micros", &ticket.next_free)
            .field("stored_time_micros", &ticket.stored_time)
            .field("infinite", &infinite)
            .field("warmup_micros", &self.warmup_micros)
            .field("cold_factor", &self.cold_factor)
            .finish_non_exhaustive()
    }
}

/// [`SmoothWarmingUp`]'s state word and its time floor.
struct Words {
    state: AtomicWide,
    /// The time floor of `limiter::update_at` (µs since `origin_nanos`): a request whose clock
    /// read lags the last booking's is decided at that booking's time.
    floor: AtomicU64,
    /// How many leap repairs have lowered (or tried to lower) `floor`, counted before each
    /// lowering; wraps around. The short path's refusal by a booking beyond the horizon
    /// compares it with the count it loaded before the word instead of loading the 128-bit word
    /// again (`warming/short.rs`).
    repairs: AtomicU64,
}

/// How far below [`MAX_BOOKING_MICROS`] [`check_warming`] keeps the bookings of one permit from
/// a full and an empty limiter, when the warm-up stores anything: a permit split between stored
/// and fresh time, or across the threshold, is the sum of up to three truncated products, each
/// of which may round up past its exact value, so it can book a µs more than either.
const SPLIT_PERMIT_SLACK_MICROS: i64 = 2;

/// Rejects finite rates whose warm-up would hold a non-finite number of permits, and finite
/// rates at which one permit would book more than [`MAX_BOOKING_MICROS`] (a limiter that could
/// only refuse). The costliest single permit is the one spent from a full (cold) limiter: the
/// interval function rises with the stored permits, so the top permit costs the most, and a
/// limiter storing less than one permit pays the rest at the stable interval, which a stored
/// permit never undercuts. Both that and one fresh permit (nothing stored) are booked here
/// through [`reserve`], the decision's own arithmetic; with a warm-up above 0 they must book at
/// most [`MAX_BOOKING_MICROS`] less [`SPLIT_PERMIT_SLACK_MICROS`], so a permit split across
/// states (booked in truncated parts) stays within the bound `decide` applies.
fn check_warming(
    setting: RateSetting,
    warmup_micros: f64,
    cold_factor: f64,
) -> Result<RateSetting, ConfigError> {
    if let RateSetting::Finite(interval) = setting {
        let math = WarmingMath::new(interval, warmup_micros, cold_factor);
        if !(math.max_permits.is_finite() && math.threshold_permits.is_finite()) {
            return Err(ConfigError::Invalid {
                what: "permits_per_second",
                why: "too high for this warm-up period: the warm-up would hold more than f64::MAX permits",
            });
        }
        let one_permit = |stored_time: f64| {
            let from = Ticket {
                next_free: 0,
                stored_time,
            };
            reserve(from, 0, 1, &math).0.next_free
        };
        // A permit split between stored and fresh, or across the threshold, is booked as two
        // or three truncated products whose sum can exceed the full or empty state's booking
        // by a µs (`the_slowest_accepted_warming_rate_books_one_permit_from_every_state`): with
        // anything to store, those bookings must leave that much room.
        let bound = if warmup_micros > 0.0 {
            MAX_BOOKING_MICROS - SPLIT_PERMIT_SLACK_MICROS
        } else {
            MAX_BOOKING_MICROS
        };
        // A subnormal rate's interval is +∞: Guava's "one permit, then never", kept.
        if interval.is_finite() && one_permit(warmup_micros).max(one_permit(0.0)) > bound {
            return Err(ConfigError::Invalid {
                what: "permits_per_second",
                why: "too low for this warm-up and cold factor: one cold permit would book \
                      more than a year, the most one request may book",
            });
        }
    }
    Ok(setting)
}

#[inline]
fn pack(ticket: Ticket, infinite: bool) -> u128 {
    let high = ticket.next_free.max(0) as u64 | if infinite { INFINITE_BIT } else { 0 };
    (u128::from(high) << 64) | u128::from(ticket.stored_time.to_bits())
}

#[inline]
fn unpack(word: u128) -> (Ticket, bool) {
    let high = (word >> 64) as u64;
    let ticket = Ticket {
        next_free: (high & !INFINITE_BIT) as i64,
        stored_time: f64::from_bits(word as u64),
    };
    (ticket, high & INFINITE_BIT != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Limiter;
    use crate::clock::ManualClock;

    /// Review: at the slowest interval `check_warming` accepts (found by bisection on the
    /// interval's bits), one permit books at most a year from every stored time near the ones
    /// it checks (full, empty, and the ulps below full, where `permits_of` divides) and across
    /// `0..=W`; one ulp slower is refused.
    #[test]
    fn the_slowest_accepted_warming_rate_books_one_permit_from_every_state() {
        let mut over = Vec::new();
        for (warmup, cold) in [
            (4e6, 3.0),
            (1e13, 3.0),
            (3e13, 1.0),
            (1e14, 7.5),
            ((1u64 << 52) as f64, 3.0),
            (123_456_789.0, 1.5),
            (2e13, 3.0),
            (1e13, 1.0),
            (5e12, 1.2),
        ] {
            let accepts =
                |interval: f64| check_warming(RateSetting::Finite(interval), warmup, cold).is_ok();
            let (mut lo, mut hi) = (1.0f64.to_bits(), 1e300f64.to_bits());
            assert!(accepts(f64::from_bits(lo)) && !accepts(f64::from_bits(hi)));
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if accepts(f64::from_bits(mid)) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let interval = f64::from_bits(lo);
            let math = WarmingMath::new(interval, warmup, cold);
            let mut times = vec![0.0, warmup];
            let mut t = warmup;
            for _ in 0..64 {
                t = t.next_down();
                times.push(t);
            }
            times.extend((0..=10_000).map(|i| warmup * f64::from(i) / 10_000.0));
            for stored_time in times {
                let from = Ticket {
                    next_free: 0,
                    stored_time,
                };
                let (next, start) = super::super::reserve(from, 0, 1, &math);
                let cost = next.next_free - start;
                if cost > MAX_BOOKING_MICROS {
                    over.push(format!(
                        "W {warmup}, cold {cold}, I {interval}: {stored_time} books {cost}"
                    ));
                    break;
                }
            }
        }
        assert!(over.is_empty(), "{over:#?}");
    }

    /// Issue 17: an `admit` refusal computes no terms; it refuses exactly where `try_acquire`
    /// does, in debt beyond the lag horizon and within it, until the booking is paid.
    #[test]
    fn admit_refuses_where_try_acquire_refuses() {
        let clock = ManualClock::new();
        // 0.05 per second (20 s a permit), warm-up 10 s: the first permit books 25 s (10 s for
        // the stored half permit spent at up to the cold interval, 15 s fresh), more than the
        // 10 s horizon ahead; refused every 0.5 s until then.
        let limiter =
            SmoothWarmingUp::create_with_clock(0.05, Duration::from_secs(10), clock.clone())
                .unwrap();
        assert_eq!(limiter.admit(1), Ok(true));
        let mut refusals = 0;
        for _ in 0..200 {
            clock.advance(Duration::from_millis(500));
            let decision = limiter.try_acquire(1).unwrap();
            if decision.is_allowed() {
                break;
            }
            refusals += 1;
            assert_eq!(limiter.admit(1), Ok(false), "at {} ns", clock.now_nanos());
        }
        assert_eq!(refusals, 49, "refused until the booking is paid at 25 s");
    }

    #[test]
    fn pack_round_trips_and_keeps_the_flag_apart() {
        for (nf, stored, inf) in [(0, 0.0, false), (i64::MAX, 4e6, true), (123, 0.5, true)] {
            let t = Ticket {
                next_free: nf,
                stored_time: stored,
            };
            assert_eq!(unpack(pack(t, inf)), (t, inf));
        }
    }
}
