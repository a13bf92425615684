//! The time-word core of [`Gcra`](super::Gcra) (alias [`TokenBucket`](super::TokenBucket),
//! [`LeakyBucket`](super::LeakyBucket)).
//!
//! A token bucket of capacity `C` refilled one token per `T` ns, a leaky bucket (as a meter) of
//! capacity `C` draining one unit per `T` ns, and GCRA with emission interval `T` and burst `C`
//! admit exactly the same request sequences (ITU-T I.371 defines GCRA as the continuous-state
//! leaky bucket). floodgate stores all three as one time: the theoretical arrival time `tat`, the
//! instant at which the bucket is full (token bucket) or empty (leaky bucket) again. Tokens at
//! `now` are `C - (tat - now) / T`, so a fractional token is never rounded away: refill is time,
//! and time is kept to the nanosecond. The only rounding is of `T` itself to whole nanoseconds,
//! once, at configuration ([`Rate::nanos_per_permit`]).
//!
//! Layout: the whole word is `tat` in nanoseconds on the clock's timeline, see [`crate::packed`].

use std::num::NonZeroU64;
use std::sync::Mutex;
use std::time::Duration;

use super::MAX_CLOCK_LAG_NANOS;
use super::time_config::{ConfigStore, Snapshot};
use crate::clock::FLOOR_GRAIN_NANOS;
use crate::decision::AcquireError;
use crate::decision::{Answer, ConfigError, Decision, Rate, at_least_one, check_permits};
use crate::limiter::{Step, reads_after, update_at};
use crate::sync::{AtomicU64, Ordering};

/// Largest burst window `capacity × interval` accepted: 2^62 ns (146 years), so `now + tau`
/// stays meaningful on the Unix timeline.
pub(crate) const MAX_TAU_NANOS: u64 = 1 << 62;

/// The two top bits of a state word carry the generation (modulo 4) of the configuration it was
/// written under; the 62 bits below them are the time, exact to the nanosecond.
const GENERATION_SHIFT: u32 = 62;
/// Generations are kept modulo 4.
pub(crate) const GENERATION_MASK: u64 = 0b11;
/// The time bits of a state word, and the last time a bucket can book: 2^62 − 1 ns (the year
/// 2116 on the Unix timeline). A request whose booking would pass it is denied, never wrapped.
pub(crate) const END_OF_TIME: u64 = (1 << GENERATION_SHIFT) - 1;

/// Live configuration of a time-word bucket: one immutable [`Snapshot`] per generation.
///
/// # Reconfiguration
/// A change (rate, capacity) is validated as a whole new snapshot under the setter lock and
/// takes effect at an instant `t` (the setter's clock). A bucket's debt at `t` is kept in
/// *permits*: `D = (tat − t) / T_old` (0 if full; measured no earlier than `tat − C_old·T_old`,
/// its writer's earliest time, see [`convert`]), and with the capacity change
/// `D' = max(0, D + C_new − C_old)`, i.e. the tokens `C − D` are kept, capped at the new
/// capacity. So no reconfiguration ever makes permits available that were not available just
/// before; afterwards they accrue at the new rate. A fresh bucket (state `0`: a new limiter, a
/// new or evicted key, a reset) starts full at the capacity in force.
///
/// No state word is rewritten at set time (a [`Keyed`](crate::Keyed) map may hold millions):
/// each word carries its generation modulo 4, and a decision converts a word of the previous
/// three generations exactly (`debt_new = debt_old_permits × T_new`, rounded up) through the
/// kept snapshots. A word written four or more generations ago reads the same bits as a newer
/// one; for those, every snapshot records `settled_at`, a time by which every such word is full
/// whatever its history (bounded with the writers' clock lag
/// [`MAX_CLOCK_LAG_NANOS`](crate::algorithms::MAX_CLOCK_LAG_NANOS)); until then, every word is
/// read as at least that far in debt. This only bites after four changes within about one
/// refill time plus 10 s, and then refuses, never over-admits. A setter that leaves the interval
/// and the capacity as they are (the rate in force set again, or respelled) is no change: no
/// generation (`rate()`'s spelling is kept apart from the generations, in [`Settle`]).
#[derive(Debug)]
pub(crate) struct VirtualTime {
    store: ConfigStore,
    /// Setter-side history: bounds on the words of older generations (see [`Settle`]).
    settle: Mutex<Settle>,
}

/// For the generation in force `g`, upper bounds on the time at which words written in older
/// generations are full, read in `g`'s units (`0`: no such word can exist); and the rate as
/// last set (its spelling: the generations keep only the interval it rounds to).
#[derive(Debug)]
struct Settle {
    /// Generations `g−3`, `g−2`, `g−1`.
    recent: [u64; 3],
    /// For each bound in `recent`, the latest change instant it was computed at.
    recent_by: [u64; 3],
    /// The rate as last set, as `rate()` answers it.
    rate: Rate,
}

impl Settle {
    fn new(rate: Rate) -> Self {
        Settle {
            recent: [0; 3],
            recent_by: [0; 3],
            rate,
        }
    }
}

/// Converts a time word written under `(prev_interval, prev_capacity)` across a change at `at`
/// to `(interval, capacity)`: the debt in permits is kept, and the tokens are capped at the new
/// capacity (`D' = max(0, D + C_new − C_old)`); rounded toward more debt.
///
/// The debt is measured at `at`, or later for a word more than a full bucket (`tau_old`) ahead
/// of `at`: its writer decided at `tat − tau_old` or later (a word is at most `tau` ahead of its
/// writer's time), under the old configuration, on a clock read ahead of the change instant
/// (another core's, within `H`). That lead is kept as time, not counted as debt at the new rate:
/// counted as debt, `H` of lead became `H × T_new / T_old` of debt at each change, and the
/// settle bound of the words four generations old (converted here too) held every word of a
/// bucket whose rate was lowered 500-fold for 10,000 s (`tests/time_setters.rs`). Measuring later
/// only keeps more debt when the rate rises, and keeps at least the debt measured at the writer's
/// own time when it falls. Non-decreasing in `tat`, so a bound converts to a bound.
///
/// A debt that would end past [`END_OF_TIME`] is cut there, and a word at `END_OF_TIME` stays
/// there: it may stand for more debt than the word can hold, so converting it as a time would
/// read the debt cut off as tokens (a raise of capacity near the end of time, then a lowering,
/// freed permits an empty bucket never had). Such a bucket refuses until the end of time, as it
/// would have refused a booking past it.
#[inline]
pub(crate) fn convert(
    tat: u64,
    at: u64,
    prev_interval: u64,
    prev_capacity: u64,
    interval: u64,
    capacity: u64,
) -> u64 {
    if tat >= END_OF_TIME {
        return END_OF_TIME;
    }
    // `prev_capacity × prev_interval` ≤ 2^62 (validated by every setter).
    let at = at.max(tat.saturating_sub(prev_capacity * prev_interval));
    let debt_old = u128::from(tat.saturating_sub(at));
    let prev = u128::from(prev_interval.max(1));
    let scaled = (debt_old * u128::from(interval)).div_ceil(prev);
    let shift = (i128::from(capacity) - i128::from(prev_capacity)) * i128::from(interval);
    let debt = (scaled as i128 + shift).max(0);
    at.saturating_add(u64::try_from(debt).unwrap_or(u64::MAX))
        .min(END_OF_TIME)
}

/// The time a decision runs at given the last change's instant: no earlier than the change (a
/// clock value read before this call saw the snapshot, so never early) — unless the change
/// instant is more than the lag horizon ahead of `now`, which only a leaping clock read can
/// produce (a setter's, or a floor a leaper raised): it is not obeyed, so a leap cannot freeze
/// the bucket through its configuration.
#[inline(always)]
fn since_change(now: u64, changed_at: u64) -> u64 {
    if changed_at <= now.saturating_add(MAX_CLOCK_LAG_NANOS) {
        now.max(changed_at)
    } else {
        now
    }
}

/// What the short path of one request found: an admission's or a denial's terms (as
/// [`Answer::allowed`] and [`Answer::denied`] take them), or a case for the general engine.
enum Outcome {
    Allowed([u64; 4]),
    /// The terms (limit, room, unit, reset) and the retry.
    Denied([u64; 4], NonZeroU64),
    Engine,
    /// The generation tried is not the one in force (this one is): try again in it.
    Moved(u64),
}

/// One configuration's terms for a request of `n` permits: what [`decide_tat`] needs, computed
/// once per call from the snapshot in force.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Terms {
    /// The snapshot these terms were computed from.
    snapshot: Snapshot,
    /// `tau = C·T`: how far ahead of `now` a full bucket's time may be (≤ 2^62, validated).
    tau: u64,
    /// `n·T`, saturating.
    cost: u64,
}

impl Terms {
    #[inline(always)]
    fn new(snapshot: Snapshot, n: u32) -> Self {
        Terms {
            snapshot,
            tau: snapshot.capacity.saturating_mul(snapshot.interval),
            cost: u64::from(n).saturating_mul(snapshot.interval),
        }
    }
}

/// The pure decision over a time word, in the units of one configuration.
///
/// ```text
/// tau      = C·T
/// horizon  = min(now + tau, END_OF_TIME)   END_OF_TIME = 2^62 − 1: no booking passes it
/// tat      > horizon + H    →  horizon     a leap (see below); the repaired word is written
/// base     = max(tat, now)                 never moves back when `now` lags
/// new_tat  = base + n·T
/// allowed  ⇔ new_tat ≤ horizon             stored exactly, the generation in the top 2 bits
/// remaining = (horizon − new_tat) / T  (allowed), (horizon − base) / T  (denied)
/// ```
///
/// A legitimate word is at most `tau` ahead of its writer's clock, and a writer's clock at most
/// `H` = [`MAX_CLOCK_LAG_NANOS`](crate::algorithms::MAX_CLOCK_LAG_NANOS) ahead of ours; a word
/// further ahead was written by a clock that leaped. It reads as "empty now", and the repair is
/// written even when the request is denied (the one exception to "a denial writes nothing"), so
/// one far-future clock read freezes the bucket for at most one refill time `tau`.
/// The snapshot's generation goes into the top bits of the word written.
#[inline(always)]
pub(crate) fn decide_tat(tat: u64, now: u64, terms: &Terms) -> Step {
    let Terms {
        snapshot,
        tau,
        cost,
        ..
    } = *terms;
    let (interval, capacity) = (snapshot.interval, snapshot.capacity);
    // Capped at the end of time: no booking passes it, so the room a decision reports (its
    // `remaining`, and `available()`) is the room up to it, never tokens no request could take
    // (issue 17: 2^62 − 1 − now ns short of it, a full bucket reported `C` permits and refused
    // every request). A word is never past the cap, so the leap test is the same with it.
    let horizon = now.saturating_add(tau).min(END_OF_TIME);
    let stamp = |time: u64| time | ((snapshot.generation & GENERATION_MASK) << GENERATION_SHIFT);
    let leaped = tat > horizon.saturating_add(MAX_CLOCK_LAG_NANOS);
    let tat = if leaped { horizon } else { tat };
    let base = tat.max(now);
    let step = match base.checked_add(cost).filter(|&t| t <= END_OF_TIME) {
        Some(new_tat) if new_tat <= horizon => Step::allow(
            stamp(new_tat),
            Decision::allow_scaled(capacity, horizon - new_tat, interval, new_tat - now),
        ),
        new_tat => {
            let retry = new_tat.map_or(u64::MAX, |t| t - horizon);
            let decision = Decision::deny_scaled(
                capacity,
                horizon.saturating_sub(base),
                interval,
                retry,
                base - now,
            );
            match leaped {
                true => Step::repair(stamp(horizon), decision),
                false => Step::deny(decision),
            }
        }
    };
    // A leap is judged only on a clock read taken after the word was loaded (the engine reads
    // again otherwise): a reader preempted since its read never takes newer debt for a leap.
    if leaped { step.after_leap() } else { step }
}

impl VirtualTime {
    pub(crate) fn new(rate: Rate, capacity: u32) -> Result<Self, ConfigError> {
        let interval = rate.nanos_per_permit()?;
        period_nanos(rate)?;
        validate(interval, u64::from(capacity))?;
        Ok(VirtualTime {
            store: ConfigStore::new(Snapshot {
                generation: 0,
                interval,
                capacity: u64::from(capacity),
                changed_at: 0,
                settled_at: 0,
                settled_by: 0,
            }),
            settle: Mutex::new(Settle::new(rate)),
        })
    }

    /// A fresh bucket with the configuration in force (generation 0, no history): what
    /// cloning a configuration means.
    pub(crate) fn fresh_copy(&self) -> Self {
        // Under the setter lock: the spelling and the snapshot of one configuration.
        let settle = self.lock_settle();
        let current = self.store.load();
        VirtualTime {
            store: ConfigStore::new(Snapshot {
                generation: 0,
                changed_at: 0,
                settled_at: 0,
                settled_by: 0,
                ..current
            }),
            settle: Mutex::new(Settle::new(settle.rate)),
        }
    }

    #[inline]
    pub(crate) fn interval(&self) -> u64 {
        self.store.load().interval
    }

    #[inline(always)]
    pub(crate) fn capacity(&self) -> u64 {
        self.store.capacity()
    }

    /// The configured rate, as set (the interval that decides is rounded from it): the
    /// spelling last set, kept by the setters (not a decision's concern).
    pub(crate) fn rate(&self) -> Rate {
        self.lock_settle().rate
    }

    /// A rate that rounds to the interval in force (the same rate respelled, e.g. 2 per 200 ms
    /// for 1 per 100 ms, or a configuration reload re-applying it) changes only the spelling
    /// `rate()` answers: no new generation, as no decision changes. A new generation for it
    /// would let a word written four generations earlier alias it, so four such reloads within
    /// a refill time plus 10 s would hold every word of the bucket in debt until they settle.
    pub(crate) fn set_rate(&self, rate: Rate, now: u64) -> Result<(), ConfigError> {
        let interval = rate.nanos_per_permit()?;
        period_nanos(rate)?;
        self.reconfigure(now, Some(rate), |current| Snapshot {
            interval,
            ..current
        })
    }

    pub(crate) fn set_capacity(&self, capacity: u32, now: u64) -> Result<(), ConfigError> {
        self.reconfigure(now, None, |current| Snapshot {
            capacity: u64::from(capacity),
            ..current
        })
    }

    fn lock_settle(&self) -> std::sync::MutexGuard<'_, Settle> {
        self.settle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Validates and publishes the snapshot `change` makes of the one in force, as one step
    /// under the setter lock: racing setters each see the other's result, never half of it.
    /// A snapshot equal to the one in force (the same interval and capacity: the snapshot holds
    /// nothing else a setter sets) publishes nothing: no generation. `rate`, the spelling
    /// `rate()` answers, is kept once the change is validated, whether or not it made one.
    fn reconfigure(
        &self,
        now: u64,
        rate: Option<Rate>,
        change: impl FnOnce(Snapshot) -> Snapshot,
    ) -> Result<(), ConfigError> {
        let mut settle = self.lock_settle();
        let settle = &mut *settle;
        self.store.replace(|_, current| {
            let next = change(current);
            validate(next.interval, next.capacity)?;
            if let Some(rate) = rate {
                settle.rate = rate;
            }
            if next == current {
                return Ok(None);
            }
            let at = since_change(now, current.changed_at);
            let conv = |bound: u64| match bound {
                0 => 0,
                bound => convert(
                    bound,
                    at,
                    current.interval,
                    current.capacity,
                    next.interval,
                    next.capacity,
                ),
            };
            // Every word of the generation ending now: at most `tau` ahead of a writer whose
            // clock read at most `at + H`.
            let ending = at
                .saturating_add(MAX_CLOCK_LAG_NANOS)
                .saturating_add(current.capacity * current.interval);
            // A bound computed at an instant beyond this change's horizon came from a leaping
            // read (readers ignore it): replaced by `ending`, which bounds every word of an older
            // generation too (converted at instants no later than `at + H`, each word's debt in
            // permits at most a capacity on its writer's time). Kept, its instant would stay in
            // `settled_by` (a running maximum) and turn every later bound off with it until real
            // time reached the leap.
            let leaped = |by: u64| by > at.saturating_add(MAX_CLOCK_LAG_NANOS);
            let repair = |bound: u64, by: u64| match leaped(by) {
                true => (ending, at),
                false => (bound, by),
            };
            let [(g3, b3), (g2, b2), (g1, b1)] =
                [0, 1, 2].map(|i| repair(settle.recent[i], settle.recent_by[i]));
            let (current_settled_at, current_settled_by) =
                repair(current.settled_at, current.settled_by);
            let settled_at = conv(current_settled_at.max(g3));
            // Each bound converted now was also computed at `at`.
            let settled_by = current_settled_by.max(b3).max(at);
            settle.recent = [conv(g2), conv(g1), conv(ending)];
            settle.recent_by = [b2.max(at), b1.max(at), at];
            Ok(Some(Snapshot {
                changed_at: at,
                settled_at,
                settled_by,
                ..next
            }))
        })
    }

    #[inline(always)]
    pub(crate) fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        check_permits(n, self.capacity())
    }

    #[inline(always)]
    pub(crate) fn decide(&self, state: u64, now: u64, n: u32) -> Step {
        self.decide_with(&mut Terms::new(self.store.load(), n), state, now, n)
    }

    /// The decider of one call (see [`Algorithm::decider`](crate::Algorithm::decider)): the
    /// snapshot in force is read and `n` checked against it once; each attempt then only checks
    /// that the generation is unchanged (one load of a line no decision writes) before deciding
    /// on the terms computed up front.
    #[inline(always)]
    pub(crate) fn decider(
        &self,
        n: u32,
    ) -> Result<impl FnMut(u64, u64) -> Step + '_, AcquireError> {
        let snapshot = self.store.load();
        check_permits(n, snapshot.capacity)?;
        let mut terms = Terms::new(snapshot, n);
        Ok(
            #[inline(always)]
            move |state, now| self.decide_with(&mut terms, state, now, n),
        )
    }

    /// The decision on `terms` while its snapshot is still in force (else on the newer one, which
    /// replaces `terms`). The generation is loaded after `state` was (the engine's Acquire load
    /// or failed compare-exchange), so `state` was written in that generation or an older one,
    /// exactly as when the whole snapshot is read after the state.
    #[inline(always)]
    fn decide_with(&self, terms: &mut Terms, state: u64, now: u64, n: u32) -> Step {
        loop {
            if self.store.generation() != terms.snapshot.generation {
                *terms = Terms::new(self.store.load(), n);
            }
            let current = &terms.snapshot;
            // A change instant is a clock value read before this call saw the snapshot, so
            // deciding at it is never early (as the time floor of `update_at`).
            let now = since_change(now, current.changed_at);
            match self.effective(current, state, now) {
                Some(tat) => return decide_tat(tat, now, terms),
                // A setter lapped the snapshot ring: decide on the newest snapshot.
                None => *terms = Terms::new(self.store.load(), n),
            }
        }
    }

    /// One request on a word with its time floor (see
    /// [`Algorithm::acquire_word`](crate::Algorithm::acquire_word)): [`short`](Self::short)
    /// answering a whole [`Decision`].
    #[inline(always)]
    pub(crate) fn acquire_word(
        &self,
        word: &AtomicU64,
        floor: &AtomicU64,
        read_clock: impl FnMut() -> u64,
        n: u32,
    ) -> Result<Decision, AcquireError> {
        self.short(word, floor, read_clock, n)
    }

    /// [`acquire_word`](Self::acquire_word) answering only whether the request was admitted
    /// (see [`Algorithm::admit_word`](crate::Algorithm::admit_word)): the same decision and the
    /// same writes.
    #[inline(always)]
    pub(crate) fn admit_word(
        &self,
        word: &AtomicU64,
        floor: &AtomicU64,
        read_clock: impl FnMut() -> u64,
        n: u32,
    ) -> Result<bool, AcquireError> {
        self.short(word, floor, read_clock, n)
    }

    /// The short path of one request. It serves the common case: a word of the generation in
    /// force, a time within the horizon of the floor, after the last change and far from the
    /// end of time, no leap. It decides exactly as [`decide_tat`] does there (the tests compare
    /// the two) and writes nothing before its compare-exchange except the floor raise
    /// `update_at` also makes. A lost compare-exchange decides again on the word that won, with
    /// the same clock read and a fresh floor, as `update_at` retries; anything outside the common
    /// case goes to the general engine, which starts over.
    ///
    /// Generation 0 (a bucket never reconfigured, the common case) runs its own copy of the path,
    /// compiled with the generation a constant: the slot's address and the stamp (0) are then
    /// known, with no arithmetic on the generation; the logic is the same code. The state word
    /// is loaded first and tells which copy to try: a word with stamp bits 0 runs generation 0's
    /// copy without loading the generation (the load that validates its reads, the seqlock
    /// check needed anyway, tells whether generation 0 is in force, and if not, which one is);
    /// any other word loads the generation in force and runs its own copy, generation 1's with
    /// the generation a constant too (see there). (That branch is not
    /// marked cold: a call to an empty `#[cold]` function marked it, and cost a reconfigured
    /// bucket's every call the call, its return and a register saved around them, 3 to 4
    /// instructions, for no gain on generation 0's copy; issue 17.) A reconfigured bucket
    /// thus pays generation 0's try only in generations 4, 8, ... (stamp bits 0 again) or on a
    /// word of an older generation. `gcra-reconf` in `scripts/instructions` counts it.
    #[inline(always)]
    fn short<A: Answer>(
        &self,
        word: &AtomicU64,
        floor: &AtomicU64,
        mut read_clock: impl FnMut() -> u64,
        n: u32,
    ) -> Result<A, AcquireError> {
        // The clock first: nothing read below has to survive the call.
        let clock_now = read_clock();
        // Acquire: as in `update`; the floor load is ordered after it (see `update_at`), and so
        // is the load of the generation in `recheck` (see there).
        let current = word.load(Ordering::Acquire);
        let outcome = match current <= END_OF_TIME {
            true => match self.short_in::<A, true>(word, floor, clock_now, n, current, 0) {
                Outcome::Moved(generation) => {
                    // Acquire: as above; a fresh load (the word may have been rewritten since).
                    let current = word.load(Ordering::Acquire);
                    self.short_again::<A>(word, floor, clock_now, n, current, generation)
                }
                outcome => outcome,
            },
            false => {
                // The word loaded above, before the generation: it was written in that
                // generation or an older one (`recheck` needs only that it be loaded before its
                // own load of the generation, as the reload this replaced also was). A word of
                // other stamp bits is rejected by the stamp; one four or more generations old
                // with the same bits is read as it is, as `effective` reads it in the fast range
                // (which starts at `settled_at`). It was loaded again here, for generation 0's
                // registers, when this branch was marked cold; unmarked, keeping it costs that
                // copy nothing (issue 17). The loom model
                // `buckets_set_rate_races_a_take_on_a_reconfigured_bucket` (time_buckets.rs)
                // races a setter with this branch.
                let generation = self.store.generation();
                // Generation 1 (a bucket changed once, as one configuration reload changes it)
                // runs the same copy compiled with the generation a constant: its slot's address
                // and its stamp are then known (issue 17: 4 to 6 instructions a call fewer). The
                // generation was loaded as for any other, so nothing else changes. (A form that
                // also kept the stamp on the times it compares, 3 fewer an admission, slowed the
                // never-reconfigured buckets by about 7% in paired timing: CHANGELOG.)
                match generation {
                    1 => self.short_again::<A>(word, floor, clock_now, n, current, 1),
                    _ => self.short_again::<A>(word, floor, clock_now, n, current, generation),
                }
            }
        };
        match outcome {
            Outcome::Allowed([limit, room, unit, reset]) => {
                Ok(A::allowed(limit, room, unit, reset))
            }
            Outcome::Denied([limit, room, unit, reset], retry) => {
                Ok(A::denied(limit, room, unit, retry, reset))
            }
            Outcome::Engine | Outcome::Moved(_) => {
                self.general(word, floor, reads_after(clock_now, read_clock), n)
            }
        }
    }

    /// [`short_in`](Self::short_in) in `generation`: the one generation 0's `recheck` named, or
    /// the one loaded for a word of other stamp bits. A setter that races this try too sends the
    /// call to the engine, which reads everything again.
    #[inline(always)]
    fn short_again<A: Answer>(
        &self,
        word: &AtomicU64,
        floor: &AtomicU64,
        clock_now: u64,
        n: u32,
        current: u64,
        generation: u64,
    ) -> Outcome {
        match self.short_in::<A, false>(word, floor, clock_now, n, current, generation) {
            Outcome::Moved(_) => Outcome::Engine,
            outcome => outcome,
        }
    }

    /// [`short`](Self::short) in `generation` at the clock read `clock_now`: the answer's terms,
    /// built into the caller's answer after the two copies join (so they join on plain numbers,
    /// not on a whole `Decision`), or [`Outcome::Moved`] when `generation` is not in force.
    /// `FRESH`: this is generation 0's copy (`generation` is the constant 0).
    #[inline(always)]
    fn short_in<A: Answer, const FRESH: bool>(
        &self,
        word: &AtomicU64,
        floor: &AtomicU64,
        clock_now: u64,
        n: u32,
        mut current: u64,
        generation: u64,
    ) -> Outcome {
        let hot = self.store.hot(generation);
        // `n` in `1..=capacity`: `n = 1` always is (every capacity is at least 1), so a caller's
        // literal 1 checks nothing; any other `n` in one comparison (`n = 0` wraps to
        // `u32::MAX` ≥ any capacity). The capacity is loaded only for that check or an answer
        // that reports it.
        let capacity = match n != 1 || A::REPORTS_TERMS {
            true => hot.capacity(),
            false => 0,
        };
        let stamp = (generation & GENERATION_MASK) << GENERATION_SHIFT;
        if n == 1 || u64::from(n.wrapping_sub(1)) < capacity {
            loop {
                // The slot's fields are loaded where they are used, and validated together by
                // `recheck` after the decision is computed and before anything is acted on (an
                // answer returned, a floor raised, a word written): a torn read is discarded
                // there. Before it, only wrapping arithmetic (a torn mix may be any sizes) and
                // hand-overs to the engine, which reads everything again.
                // Relaxed: ordered after the Acquire load (or failed compare-exchange) that
                // produced `current`, as in `update_at`.
                let floor_now = floor.load(Ordering::Relaxed);
                // `max(clock, floor)`, served only while the floor is within the lag horizon of
                // the clock read (further ahead: a leaping clock's floor, or a stale read). The
                // floor's lead is checked only when it leads (a lagging reader), one comparison
                // on the common path.
                let behind = clock_now.wrapping_sub(floor_now);
                let now = match clock_now.checked_sub(floor_now) {
                    Some(_) => clock_now,
                    None if floor_now - clock_now > MAX_CLOCK_LAG_NANOS => break,
                    None => floor_now,
                };
                // Generation 0's `fast_from` is 0 (`ConfigStore::new`): known in its copy. The
                // other copy loads it here, where it is used: loaded before the loop, after a
                // test for generation 0, it was kept on the stack (3 to 8 instructions more a
                // call, issue 17).
                let fast_from = if FRESH { 0 } else { hot.fast_from() };
                if now.wrapping_sub(fast_from) >= hot.fast_len() {
                    break;
                }
                // The time word when `current` is of this generation; otherwise its generation
                // bits differ and it is at least 2^62, beyond any `now + reach` served here
                // (`now + 2·tau + H` < 2^62 in the fast range): one comparison rejects both a
                // word of another generation and a leaping clock's word.
                let tat = current ^ stamp;
                if tat > now.wrapping_add(hot.reach()) {
                    break;
                }
                // `cost` ≤ tau when the fields are one generation's.
                let interval = hot.interval();
                let cost = u64::from(n).wrapping_mul(interval);
                let horizon = now.wrapping_add(hot.tau());
                let base = tat.max(now);
                let new_tat = base.wrapping_add(cost);
                let in_force = self.store.recheck();
                if in_force != generation {
                    return Outcome::Moved(in_force);
                }
                if new_tat > horizon {
                    return Outcome::Denied(
                        [capacity, horizon.saturating_sub(base), interval, base - now],
                        // `new_tat - horizon`, written so the compiler sees it is not 0 here
                        // (`new_tat > horizon`): `at_least_one` costs nothing.
                        at_least_one(new_tat.saturating_sub(horizon)),
                    );
                }
                // An admission whose clock read passed the floor by its grain raises it (a floor
                // that leads the read is never raised by it): `now ≥ floor + grain`, tested on
                // the difference taken above, read as signed. In the fast range both times are
                // below 2^62, so it is the clock's lead when the clock is later, and minus the
                // floor's (negative) when the floor is.
                if behind as i64 >= FLOOR_GRAIN_NANOS as i64 {
                    // Relaxed: published by the Release compare-exchange below, as in
                    // `update_at`. One compare-exchange from the floor just loaded; only if
                    // another writer moved it meanwhile, `fetch_max` (the floor ends at least
                    // `now` either way, as `update_at`'s raise leaves it).
                    if floor
                        .compare_exchange(floor_now, now, Ordering::Relaxed, Ordering::Relaxed)
                        .is_err()
                    {
                        floor.fetch_max(now, Ordering::Relaxed);
                    }
                }
                // AcqRel / Acquire: as in `update`.
                match word.compare_exchange(
                    current,
                    new_tat | stamp,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => {
                        return Outcome::Allowed([
                            capacity,
                            horizon - new_tat,
                            interval,
                            new_tat - now,
                        ]);
                    }
                    // Another writer landed first: decide again on its word, as `update_at`
                    // does (same clock read, the floor loaded again).
                    Err(actual) => current = actual,
                }
            }
        }
        Outcome::Engine
    }

    /// The general engine for one request: [`update_at`] over [`decider`](Self::decider).
    #[cold]
    #[inline(never)]
    fn general<A: Answer>(
        &self,
        word: &AtomicU64,
        floor: &AtomicU64,
        read_clock: impl FnMut() -> u64,
        n: u32,
    ) -> Result<A, AcquireError> {
        Ok(A::of(update_at(word, floor, read_clock, self.decider(n)?)))
    }

    /// The generation in force (a lease records it, see [`refunded`](Self::refunded)).
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.store.generation()
    }

    /// The word that gives `unused` permits back to a bucket whose state is still exactly the
    /// word `word` a lease of at least `unused` permits wrote in `generation` (the full
    /// generation counter, read before and after the lease): its time less `unused × T`, in
    /// that generation's interval. `None` when the configuration changed since (the permits are
    /// then left to expire), or the word is not of that generation.
    ///
    /// Exact: every later booking is stacked on top of the lease's (a booking starts at
    /// `max(tat, now)` and only a refund of its own word moves a time back), so a word still equal
    /// to the lease's means nothing since began after a gap, and the bucket becomes exactly what
    /// it would be had the lease asked for `unused` fewer permits.
    pub(crate) fn refunded(&self, word: u64, generation: u64, unused: u32) -> Option<u64> {
        if self.store.generation() != generation {
            return None;
        }
        let snapshot = self.store.read(generation)?;
        let stamp = (generation & GENERATION_MASK) << GENERATION_SHIFT;
        if word & !END_OF_TIME != stamp {
            return None;
        }
        let back = u64::from(unused).checked_mul(snapshot.interval)?;
        let tat = (word & END_OF_TIME).checked_sub(back)?;
        Some(tat | stamp)
    }

    #[inline]
    pub(crate) fn is_idle(&self, state: u64, now: u64) -> bool {
        loop {
            let current = self.store.load();
            let now = since_change(now, current.changed_at);
            if let Some(tat) = self.effective(&current, state, now) {
                return tat <= now;
            }
        }
    }

    /// The time word in `current`'s units: converted from the generation it was written in,
    /// and at least `settled_at` while words of four or more generations ago may be in debt.
    /// `None` when a setter lapped the snapshot ring meanwhile (retry).
    #[inline(always)]
    fn effective(&self, current: &Snapshot, state: u64, now: u64) -> Option<u64> {
        if state == 0 {
            return Some(0);
        }
        let generation = current.generation;
        let behind = generation.wrapping_sub(state >> GENERATION_SHIFT) & GENERATION_MASK;
        let mut tat = state & END_OF_TIME;
        if behind != 0 {
            tat = self.convert_from(current, tat, behind, now)?;
        }
        // A settle bound computed at a change instant beyond the lag horizon came from a leaping
        // clock read (as `since_change` judges a change instant): not obeyed, so one leaped
        // setter read cannot hold every word in debt until real time reaches it. Words four or
        // more generations old are then read as they are, in this generation's units: at most
        // the leap's one capacity (a word beyond the horizon still reads as empty now).
        if now < current.settled_at && current.settled_by <= now.saturating_add(MAX_CLOCK_LAG_NANOS)
        {
            tat = tat.max(current.settled_at);
        }
        Some(tat)
    }

    /// Converts a word written `behind` (1..=3) generations ago through every change since, for
    /// a decision at `now`.
    ///
    /// A change instant more than the lag horizon ahead of `now` came from a leaping clock read
    /// (as [`since_change`] judges it): the word is converted across that change at the next
    /// change's instant, or at `now` across the last one, so its debt in permits is kept as it
    /// stands then. Converted at the leaped instant, every word, a full one too, would read as
    /// in debt until that instant, beyond the horizon: a leap, so "empty now", and one leaped
    /// setter read would drain every word (every key of a map) for a refill; converted at `now`
    /// and then measured back to a later change's earlier instant, an idle word would read the
    /// span between them as debt.
    #[cold]
    fn convert_from(&self, current: &Snapshot, mut tat: u64, behind: u64, now: u64) -> Option<u64> {
        let Some(first) = current.generation.checked_sub(behind) else {
            // Cannot happen (a word is never from a generation before 0): read it as settled.
            return Some(current.settled_at);
        };
        let mut prev = self.store.read(first)?;
        // The changes since, oldest first (`behind` ≤ 3 of them), and the instant each is
        // converted at, chosen from the newest back.
        let mut changes = [*current; GENERATION_MASK as usize];
        let changes = &mut changes[..behind as usize];
        for (change, generation) in changes.iter_mut().zip(first + 1..current.generation) {
            *change = self.store.read(generation)?;
        }
        let mut instants = [0; GENERATION_MASK as usize];
        let mut next = now;
        for (instant, change) in instants.iter_mut().zip(changes.iter()).rev() {
            if change.changed_at <= now.saturating_add(MAX_CLOCK_LAG_NANOS) {
                next = change.changed_at;
            } else {
                next = next.min(now);
            }
            *instant = next;
        }
        for (change, at) in changes.iter().zip(instants) {
            tat = convert(
                tat,
                at,
                prev.interval,
                prev.capacity,
                change.interval,
                change.capacity,
            );
            prev = *change;
        }
        Some(tat)
    }
}

fn period_nanos(rate: Rate) -> Result<u64, ConfigError> {
    u64::try_from(rate.period().as_nanos()).map_err(|_| ConfigError::DurationOverflow)
}

fn validate(interval: u64, capacity: u64) -> Result<(), ConfigError> {
    if capacity == 0 {
        return Err(ConfigError::ZeroLimit);
    }
    if capacity > u64::from(u32::MAX) {
        return Err(ConfigError::LimitTooLarge {
            limit: capacity,
            max: u64::from(u32::MAX),
        });
    }
    // At most (2^64 − 1) × (2^32 − 1): fits in u128.
    let tau = u128::from(interval) * u128::from(capacity);
    if tau <= u128::from(MAX_TAU_NANOS) {
        return Ok(());
    }
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    let value = u64::try_from(tau / NANOS_PER_SEC).map_or(Duration::MAX, |secs| {
        Duration::new(secs, (tau % NANOS_PER_SEC) as u32)
    });
    Err(ConfigError::DurationOutOfRange {
        what: "bucket burst window (capacity × interval per permit)",
        value,
        min: Duration::from_nanos(1),
        max: Duration::from_nanos(MAX_TAU_NANOS),
    })
}

/// Implements [`Algorithm`](crate::Algorithm) and the shared setters for a wrapper around
/// [`VirtualTime`] in a field named `core`.
macro_rules! time_word_algorithm {
    ($ty:ident) => {
        impl $crate::limiter::Algorithm for $ty {
            const NEEDS_TIME_FLOOR: bool = true;

            #[inline(always)]
            fn check_permits(&self, n: u32) -> Result<(), $crate::AcquireError> {
                self.core.check_permits(n)
            }

            #[inline(always)]
            fn decide(&self, state: u64, now: u64, n: u32) -> $crate::limiter::Step {
                self.core.decide(state, now, n)
            }

            #[inline(always)]
            fn acquire_word(
                &self,
                word: &$crate::sync::AtomicU64,
                floor: &$crate::sync::AtomicU64,
                read_clock: impl FnMut() -> u64,
                n: u32,
            ) -> Result<$crate::Decision, $crate::AcquireError> {
                self.core.acquire_word(word, floor, read_clock, n)
            }

            #[inline(always)]
            fn admit_word(
                &self,
                word: &$crate::sync::AtomicU64,
                floor: &$crate::sync::AtomicU64,
                read_clock: impl FnMut() -> u64,
                n: u32,
            ) -> Result<bool, $crate::AcquireError> {
                self.core.admit_word(word, floor, read_clock, n)
            }

            #[inline(always)]
            fn decider(
                &self,
                n: u32,
            ) -> Result<impl FnMut(u64, u64) -> $crate::limiter::Step + '_, $crate::AcquireError>
            {
                self.core.decider(n)
            }

            #[inline]
            fn is_idle(&self, state: u64, now: u64) -> bool {
                self.core.is_idle(state, now)
            }

            /// Sets the capacity (burst): the `limit` every decision reports. See
            /// [`set_capacity`](Self::set_capacity).
            fn set_limit(&self, limit: u32, now: u64) -> Result<(), $crate::ConfigError> {
                self.core.set_capacity(limit, now)
            }

            /// The capacity (burst).
            #[inline]
            fn limit(&self) -> u64 {
                self.core.capacity()
            }
        }

        impl $ty {
            /// Changes the rate live at `now` (nanoseconds on the limiter's clock: take it from
            /// [`AtomicLimiter::change_instant`](crate::AtomicLimiter::change_instant) or
            /// [`Keyed::change_instant`](crate::Keyed::change_instant), or call
            /// [`AtomicLimiter::set_rate`](crate::AtomicLimiter::set_rate), which does); the
            /// capacity stays. The
            /// debt booked so far is kept in permits: a drained bucket stays drained and refills
            /// at the new rate, so lowering the rate never frees permits. A rate that rounds to
            /// the interval per permit in force (the rate in force set again, or spelled
            /// otherwise: 2 per 200 ms for 1 per 100 ms) changes no decision, only the spelling
            /// [`rate`](Self::rate) answers; however often a configuration reload re-applies it,
            /// it costs the bucket nothing.
            ///
            /// The debt is measured at `now`: a `now` earlier than a decision already published
            /// (a raw clock read on a core whose clock trails, or a read taken before the
            /// setter was preempted) applies the change from `now`, so a raise from `r` to `r'`
            /// frees up to min(capacity, δ × (r' − r)) permits for a `now` δ early.
            /// `change_instant` raises the read to the limiter's time floor; a stall between it
            /// and this call is still δ (`tests/time_setters.rs`).
            ///
            /// # Errors
            /// As the constructor's rate checks; the old rate then stays.
            ///
            /// ```
            /// use floodgate::{AtomicLimiter, Clock, Limiter, ManualClock, Rate, TokenBucket};
            /// let clock = ManualClock::new();
            /// let b = AtomicLimiter::with_clock(TokenBucket::new(Rate::per_second(10), 10)?, clock.clone());
            /// assert!(b.try_acquire(10)?.is_allowed()); // drained: 1 s of debt at 10/s
            /// b.algorithm().set_rate(Rate::per_second(1), clock.now_nanos())?;
            /// assert!(!b.try_acquire(1)?.is_allowed()); // still 10 permits of debt, now at 1/s
            /// assert_eq!(b.algorithm().rate(), Rate::per_second(1));
            /// assert!(b.algorithm().set_rate(Rate::per_second(0), 0).is_err());
            /// assert_eq!(b.algorithm().rate(), Rate::per_second(1)); // the old rate stays
            /// # Ok::<(), Box<dyn std::error::Error>>(())
            /// ```
            pub fn set_rate(
                &self,
                rate: $crate::Rate,
                now: u64,
            ) -> Result<(), $crate::ConfigError> {
                self.core.set_rate(rate, now)
            }

            /// Changes the capacity (burst) live at `now`, as
            /// [`Limiter::set_limit`](crate::Limiter::set_limit) does. The tokens held are kept,
            /// capped at the new capacity: raising it frees nothing at once, the new room fills at
            /// the rate. A fresh bucket (never used, or reset) starts full at the capacity in force.
            /// `now` as for [`set_rate`](Self::set_rate): a `now` δ earlier than a decision
            /// already published lets the new room fill from it, up to min(raise, δ × rate)
            /// permits at once.
            ///
            /// # Errors
            /// [`ConfigError::ZeroLimit`](crate::ConfigError::ZeroLimit), or
            /// [`ConfigError::DurationOutOfRange`](crate::ConfigError::DurationOutOfRange) when
            /// capacity × interval passes 2^62 ns (naming the burst window, its value and the
            /// bound).
            ///
            /// ```
            /// use floodgate::{ConfigError, Rate, TokenBucket};
            /// let b = TokenBucket::new(Rate::per_second(5), 10)?;
            /// b.set_capacity(3, 0)?;
            /// assert_eq!(b.capacity(), 3);
            /// assert_eq!(b.set_capacity(0, 0), Err(ConfigError::ZeroLimit));
            /// # Ok::<(), ConfigError>(())
            /// ```
            pub fn set_capacity(&self, capacity: u32, now: u64) -> Result<(), $crate::ConfigError> {
                self.core.set_capacity(capacity, now)
            }

            /// The rate in force.
            ///
            /// ```
            /// use floodgate::{Rate, TokenBucket};
            /// use std::time::Duration;
            /// let b = TokenBucket::new(Rate::new(4, Duration::from_secs(2)), 10)?;
            /// assert_eq!(b.rate(), Rate::new(4, Duration::from_secs(2)));
            /// # Ok::<(), floodgate::ConfigError>(())
            /// ```
            pub fn rate(&self) -> $crate::Rate {
                self.core.rate()
            }

            /// The capacity (burst) in force.
            ///
            /// ```
            /// use floodgate::{Rate, TokenBucket};
            /// let b = TokenBucket::new(Rate::per_second(5), 10)?;
            /// assert_eq!(b.capacity(), 10);
            /// # Ok::<(), floodgate::ConfigError>(())
            /// ```
            pub fn capacity(&self) -> u64 {
                self.core.capacity()
            }

            /// Nanoseconds one permit is worth (the rate, rounded once to whole nanoseconds).
            ///
            /// ```
            /// use floodgate::{Rate, TokenBucket};
            /// let b = TokenBucket::new(Rate::per_second(3), 10)?;
            /// assert_eq!(b.nanos_per_permit(), 333_333_333); // 1 s / 3, rounded to nearest
            /// # Ok::<(), floodgate::ConfigError>(())
            /// ```
            pub fn nanos_per_permit(&self) -> u64 {
                self.core.interval()
            }

            /// The generation of the configuration in force (for a lease's refund).
            #[inline]
            pub(crate) fn lease_generation(&self) -> u64 {
                self.core.generation()
            }

            /// See `VirtualTime::refunded`.
            #[inline]
            pub(crate) fn lease_refund(
                &self,
                word: u64,
                generation: u64,
                unused: u32,
            ) -> Option<u64> {
                self.core.refunded(word, generation, unused)
            }
        }
    };
}
pub(crate) use time_word_algorithm;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A bucket after `changes` reconfigurations (each at `changed_at`), so words of several
    /// generations and change instants are in play; the last, with `raise` above 0, raises the
    /// capacity by `raise` (a count above generation 0's capacity then fits).
    fn bucket(
        interval: u64,
        capacity: u32,
        changes: u32,
        changed_at: u64,
        raise: u32,
    ) -> VirtualTime {
        let core =
            VirtualTime::new(Rate::new(1, Duration::from_nanos(interval)), capacity).unwrap();
        for i in 0..changes {
            match i + 1 == changes && raise > 0 {
                true => core.set_capacity(capacity + raise, changed_at).unwrap(),
                // Every change a real one (the interval in force set again makes no
                // generation): `interval + 1`, then `interval`, and so on.
                false => {
                    let rate = Rate::new(1, Duration::from_nanos(interval + u64::from(i % 2 == 0)));
                    core.set_rate(rate, changed_at).unwrap();
                }
            }
        }
        core
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4_000))]
        /// The short path of `acquire_word` decides and writes exactly as the general engine
        /// (`update_at` over `decide`) on the same word, floor and clock, inside its domain and
        /// out of it (where it hands over to that engine).
        #[test]
        fn short_path_decides_as_the_engine(
            interval in 1u64..5_000_000,
            capacity in 1u32..1_000,
            // Generation 1 (one change) a quarter of the cases: it runs a copy of its own.
            changes in prop_oneof![1 => Just(1u32), 3 => 0u32..20],
            changed_at in 0u64..3_000_000_000,
            other_generation in prop::option::weighted(0.2, 0u64..4),
            tat_offset in -20_000_000_000i64..20_000_000_000,
            boundary in 0u8..3,
            nudge in -2i64..3,
            clock in prop_oneof![
                8 => 0u64..4_000_000_000,
                1 => Just(END_OF_TIME - 5),
                1 => Just(u64::MAX),
            ],
            floor_offset in prop_oneof![
                Just(0i64),
                // Within a few grains either way: raised or not, led or lagged.
                -4 * FLOOR_GRAIN_NANOS as i64..4 * FLOOR_GRAIN_NANOS as i64,
                -20_000_000_000i64..20_000_000_000,
            ],
            floor_at_grain in any::<bool>(),
            n in prop_oneof![4 => 1u32..4, 1 => 0u32..2_000],
            fresh in prop::bool::weighted(0.1),
            raise in prop_oneof![1 => Just(0u32), 1 => 1u32..1_000],
            settled in any::<bool>(),
        ) {
            let core = bucket(interval, capacity, changes, changed_at, raise);
            let (interval, tau) = (core.interval(), core.capacity() * core.interval());
            // Half the cases past every settle bound of the last change (`changed_at + H +
            // 2·tau`), where a reconfigured bucket's own copy of the short path serves.
            let clock = match settled && clock < 4_000_000_000 {
                true => changed_at + MAX_CLOCK_LAG_NANOS + 2 * tau + clock,
                false => clock,
            };
            // The word's stamp: the generation in force's, unless another is drawn.
            let generation = other_generation.unwrap_or(core.generation()) & GENERATION_MASK;
            // At a boundary (give or take a few ns): a request that exactly fits, or a word
            // exactly the lag horizon beyond a full bucket (a leap).
            let cost = u64::from(n) * interval;
            let offset = match boundary {
                0 => tat_offset,
                1 => (tau as i64 - cost as i64) + nudge,
                _ => (tau + MAX_CLOCK_LAG_NANOS) as i64 + nudge,
            };
            let tat = clock.saturating_add_signed(offset) & END_OF_TIME;
            let state = if fresh { 0 } else { tat | (generation << GENERATION_SHIFT) };
            // At the grain: a floor exactly (or nearly) one grain behind the clock.
            let floor_offset = match floor_at_grain {
                true => nudge - FLOOR_GRAIN_NANOS as i64,
                false => floor_offset,
            };
            let floor = clock.saturating_add_signed(floor_offset);
            let (word_a, floor_a) = (AtomicU64::new(state), AtomicU64::new(floor));
            let (word_b, floor_b) = (AtomicU64::new(state), AtomicU64::new(floor));
            // A later read, for the engine's re-reads on a leap.
            let reads = |first: u64| {
                let mut reads = [first, first.saturating_add(1_000)].into_iter();
                move || reads.next().unwrap_or(u64::MAX)
            };
            let (word_c, floor_c) = (AtomicU64::new(state), AtomicU64::new(floor));
            let short = core.acquire_word(&word_a, &floor_a, reads(clock), n);
            let general = core
                .decider(n)
                .map(|decide| update_at(&word_b, &floor_b, reads(clock), decide));
            // The bool form: the same answer and the same writes.
            let admitted = core.admit_word(&word_c, &floor_c, reads(clock), n);
            prop_assert_eq!(short, general);
            prop_assert_eq!(admitted, general.map(|d| d.is_allowed()));
            let (word_b, floor_b) = (word_b.into_inner(), floor_b.into_inner());
            prop_assert_eq!(word_a.into_inner(), word_b);
            prop_assert_eq!(floor_a.into_inner(), floor_b);
            prop_assert_eq!(word_c.into_inner(), word_b);
            prop_assert_eq!(floor_c.into_inner(), floor_b);
        }
    }

    /// One step of a sequence (see `sequences_of_changes_decide_as_the_engine`).
    #[derive(Clone, Debug)]
    enum Op {
        /// `n` permits on the word `key`, `advance` ns later, on a clock read `lag` ns behind.
        Take {
            key: usize,
            n: u32,
            advance: u64,
            lag: u64,
        },
        /// The rate set to one permit per `interval` ns, `advance` ns later.
        Rate { interval: u64, advance: u64 },
        /// The capacity set, `advance` ns later.
        Capacity { capacity: u32, advance: u64 },
    }

    /// How far the manual clock moves before a step: not at all, within a refill, or past the
    /// lag horizon (where every settle bound of the changes before has passed and a
    /// reconfigured bucket's own copy of the short path serves).
    fn advance() -> impl Strategy<Value = u64> {
        prop_oneof![
            3 => Just(0u64),
            3 => 1u64..100_000,
            3 => 100_000u64..50_000_000,
            2 => MAX_CLOCK_LAG_NANOS..3 * MAX_CLOCK_LAG_NANOS,
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        let take = (
            0usize..4,
            prop_oneof![4 => 1u32..4, 1 => 0u32..40],
            advance(),
            prop_oneof![
                3 => Just(0u64),
                1 => 0u64..4 * FLOOR_GRAIN_NANOS,
                1 => 0u64..MAX_CLOCK_LAG_NANOS,
            ],
        )
            .prop_map(|(key, n, advance, lag)| Op::Take {
                key,
                n,
                advance,
                lag,
            });
        // The first configuration's rate and capacity among the others: a bucket set back to
        // them is in a later generation, with the first one's numbers.
        let rate = (
            prop_oneof![
                Just(FIRST_INTERVAL),
                Just(2 * FIRST_INTERVAL),
                Just(FIRST_INTERVAL - 1),
                1u64..5_000_000,
            ],
            advance(),
        )
            .prop_map(|(interval, advance)| Op::Rate { interval, advance });
        let capacity = (prop_oneof![Just(FIRST_CAPACITY), 1u32..30], advance())
            .prop_map(|(capacity, advance)| Op::Capacity { capacity, advance });
        prop_oneof![6 => take, 1 => rate, 1 => capacity]
    }

    const FIRST_INTERVAL: u64 = 1_000_000;
    const FIRST_CAPACITY: u32 = 10;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]
        /// Issue 17's review: on random sequences of rate and capacity changes (back to the first
        /// configuration among them, many more than four, so the stamp bits wrap and the hot
        /// slots are reused) interleaved with takes on four words (some left untouched for
        /// several generations) at a manual clock, the short path (`acquire_word`, and the bool
        /// form `admit_word`) decides every request exactly as the general engine (`update_at`
        /// over `decider`) on its own copy of the words and floor: every field of the decision
        /// (allowed, limit, remaining, retry_after, reset_after), and the same words and floor
        /// after each step.
        #[test]
        fn sequences_of_changes_decide_as_the_engine(
            start in 0u64..2_000_000_000,
            ops in prop::collection::vec(op(), 1..80),
        ) {
            let core = VirtualTime::new(
                Rate::new(1, Duration::from_nanos(FIRST_INTERVAL)),
                FIRST_CAPACITY,
            )
            .unwrap();
            // Per word: the short path's copy, the engine's and the bool form's; a floor each.
            let words: [[AtomicU64; 3]; 4] =
                std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0)));
            let floors: [AtomicU64; 3] = std::array::from_fn(|_| AtomicU64::new(0));
            let mut clock = start;
            for (step, op) in ops.iter().enumerate() {
                match *op {
                    Op::Take { key, n, advance, lag } => {
                        clock += advance;
                        let read = clock.saturating_sub(lag);
                        let [short_word, engine_word, bool_word] = &words[key];
                        let short = core.acquire_word(short_word, &floors[0], || read, n);
                        let general = core
                            .decider(n)
                            .map(|decide| update_at(engine_word, &floors[1], || read, decide));
                        let admitted = core.admit_word(bool_word, &floors[2], || read, n);
                        prop_assert_eq!(short, general, "step {} {:?} at {}", step, op, clock);
                        prop_assert_eq!(
                            admitted,
                            general.map(|d| d.is_allowed()),
                            "step {} {:?}",
                            step,
                            op
                        );
                    }
                    Op::Rate { interval, advance } => {
                        clock += advance;
                        core.set_rate(Rate::new(1, Duration::from_nanos(interval)), clock)
                            .unwrap();
                    }
                    Op::Capacity { capacity, advance } => {
                        clock += advance;
                        core.set_capacity(capacity, clock).unwrap();
                    }
                }
                for (key, [short_word, engine_word, bool_word]) in words.iter().enumerate() {
                    let engine = engine_word.load(Ordering::Relaxed);
                    prop_assert_eq!(
                        short_word.load(Ordering::Relaxed),
                        engine,
                        "word {} after step {} {:?}",
                        key,
                        step,
                        op
                    );
                    prop_assert_eq!(bool_word.load(Ordering::Relaxed), engine);
                }
                let engine = floors[1].load(Ordering::Relaxed);
                prop_assert_eq!(floors[0].load(Ordering::Relaxed), engine, "floor, step {}", step);
                prop_assert_eq!(floors[2].load(Ordering::Relaxed), engine);
            }
        }
    }

    /// A burst window `capacity × interval` of 2^61 or more (up to its bound 2^62): `now + 2·tau + H`
    /// passes the end of time for every `now`, so the short path must serve no time at all, not
    /// `now = 0` (a saturated `fast_until`). At 2^62 the engine denies a booking of 2^62 (past
    /// END_OF_TIME) that the short path admitted, writing the time into the generation bits.
    #[test]
    fn short_path_serves_no_time_when_the_burst_window_nears_the_end_of_time() {
        let third = (1u64 << 62) / 3; // 3 × third = 2^62 − 1 = END_OF_TIME
        for (interval, capacity, n, state) in [
            (1u64 << 31, 1u32 << 31, 1u32 << 31, 0u64),
            (1 << 62, 1, 1, 0),
            (1 << 61, 2, 2, 0),
            (third, 3, 1, END_OF_TIME),
            (third, 3, 3, 0),
        ] {
            let core =
                VirtualTime::new(Rate::new(1, Duration::from_nanos(interval)), capacity).unwrap();
            let (word_a, floor_a) = (AtomicU64::new(state), AtomicU64::new(0));
            let (word_b, floor_b) = (AtomicU64::new(state), AtomicU64::new(0));
            let short = core.acquire_word(&word_a, &floor_a, || 0, n);
            let general = core
                .decider(n)
                .map(|decide| update_at(&word_b, &floor_b, || 0, decide));
            assert_eq!(
                short, general,
                "interval {interval}, capacity {capacity}, n {n}"
            );
            assert_eq!(word_a.into_inner(), word_b.into_inner());
            assert_eq!(floor_a.into_inner(), floor_b.into_inner());
        }
    }

    #[test]
    fn overflow_at_the_end_of_time_is_denied_not_wrapped() {
        // tat near the end of the timeline: a further request would pass it.
        let snapshot = Snapshot {
            generation: 0,
            interval: 10,
            capacity: 3,
            changed_at: 0,
            settled_at: 0,
            settled_by: 0,
        };
        let step = decide_tat(END_OF_TIME - 5, END_OF_TIME - 10, &Terms::new(snapshot, 1));
        assert!(!step.decision.is_allowed());
        assert_eq!(step.next, None);
        assert_eq!(step.decision.retry_after(), Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn capacity_times_interval_is_bounded() {
        // A period past u64 nanoseconds is the period's error.
        assert_eq!(
            VirtualTime::new(Rate::new(1, Duration::from_secs(1 << 40)), 1).unwrap_err(),
            ConfigError::DurationOverflow
        );
        assert_eq!(
            VirtualTime::new(Rate::new(1, Duration::from_secs(1 << 30)), 1 << 31).unwrap_err(),
            ConfigError::DurationOutOfRange {
                what: "bucket burst window (capacity × interval per permit)",
                value: Duration::from_secs(1 << 61),
                min: Duration::from_nanos(1),
                max: Duration::from_nanos(MAX_TAU_NANOS),
            }
        );
    }
}
