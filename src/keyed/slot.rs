//! What a keyed limiter keeps per key and how it decides on it: the [`LimiterSlot`] trait, the
//! [`Rules`] a slot is read with, and the plain slot of [`Keyed`](crate::Keyed), one algorithm
//! word ([`WordSlot`]).

use super::shards::{KeySlot, Liveness};
use crate::clock::{Clock, duration_to_nanos};
use crate::decision::{AcquireError, Decision};
use crate::limiter::{Algorithm, reads_after};
use crate::sync::{AtomicU64, Ordering};

/// The configuration a keyed limiter's slots are read with: the algorithm every key runs, and
/// what the slot type adds to it (`()` for a [`WordSlot`], the penalty box for a jailed slot).
pub(crate) struct Rules<A, E = ()> {
    pub(crate) algorithm: A,
    pub(crate) extra: E,
}

/// A key's slot in a keyed limiter: the algorithm's state word, maybe more words beside it, and
/// how a request is decided on them. The map-facing code (`KeyedFacade`) is written once over
/// this trait; [`Keyed`](crate::Keyed) and [`PenalizedKeyed`](crate::PenalizedKeyed) differ only
/// in their slot type.
pub(crate) trait LimiterSlot<A: Algorithm, E>: KeySlot<Rules<A, E>> {
    /// The algorithm's state word.
    fn state(&self) -> &AtomicU64;

    /// Decides `n` permits on this slot at `now` (the map's clock read; `clock` reads again
    /// where the engine must confirm a leap), with the map's time `floor`.
    ///
    /// Checks `n` on every path (the map's lock-free path does not check it before).
    ///
    /// # Errors
    /// As [`Algorithm::check_permits`].
    fn acquire(
        &self,
        rules: &Rules<A, E>,
        floor: &AtomicU64,
        now: u64,
        clock: &impl Clock,
        n: u32,
    ) -> Result<Decision, AcquireError>;

    /// [`acquire`](Self::acquire) answering only whether the permits were taken: the same
    /// decision and the same writes ([`Keyed::admit`](crate::Keyed::admit)).
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    #[inline(always)]
    fn admit(
        &self,
        rules: &Rules<A, E>,
        floor: &AtomicU64,
        now: u64,
        clock: &impl Clock,
        n: u32,
    ) -> Result<bool, AcquireError> {
        self.acquire(rules, floor, now, clock, n)
            .map(|decision| decision.is_allowed())
    }
}

/// One key's state: the algorithm's word.
#[derive(Default)]
pub(crate) struct WordSlot {
    state: AtomicU64,
}

/// Idle, or how many permits the word holds and when it turns idle, from a probe that asks for
/// more than any capacity (a denial, so it consumes nothing and reports the exact state).
pub(crate) fn word_liveness<A: Algorithm>(algorithm: &A, state: u64, now: u64) -> Liveness {
    if algorithm.is_idle(state, now) {
        return Liveness::Idle;
    }
    let probe = algorithm.decide(state, now, u32::MAX).decision;
    Liveness::Live {
        used: algorithm.limit().saturating_sub(probe.remaining()).max(1),
        idle_in: duration_to_nanos(probe.reset_after()).max(1),
    }
}

impl<A: Algorithm> KeySlot<Rules<A>> for WordSlot {
    fn liveness(&self, rules: &Rules<A>, now: u64) -> Liveness {
        // Relaxed: a snapshot of one self-contained word, taken by a rebuild that owns the table
        // (every check on it has finished) or by the inserter (a lower bound of its idle time;
        // or a judging pass, which drops nothing itself: the rebuild it asks for judges again).
        word_liveness(&rules.algorithm, self.state.load(Ordering::Relaxed), now)
    }

    const COPIES: bool = true;

    #[inline(always)]
    fn copy(&self) -> Option<Self> {
        Some(WordSlot {
            // Relaxed: a table the rebuild owns: every check on it has finished, and `take_arc`'s
            // Acquire made their writes visible (see `KeySlot::copy`).
            state: AtomicU64::new(self.state.load(Ordering::Relaxed)),
        })
    }
}

impl<A: Algorithm> LimiterSlot<A, ()> for WordSlot {
    #[inline(always)]
    fn state(&self) -> &AtomicU64 {
        &self.state
    }

    #[inline(always)]
    fn acquire(
        &self,
        rules: &Rules<A>,
        floor: &AtomicU64,
        now: u64,
        clock: &impl Clock,
        n: u32,
    ) -> Result<Decision, AcquireError> {
        decide_word(&rules.algorithm, &self.state, floor, now, clock, n)
    }

    /// [`Algorithm::admit_word`]: the algorithm's short path answers without building a
    /// [`Decision`].
    #[inline(always)]
    fn admit(
        &self,
        rules: &Rules<A>,
        floor: &AtomicU64,
        now: u64,
        clock: &impl Clock,
        n: u32,
    ) -> Result<bool, AcquireError> {
        rules.algorithm.admit_word(
            &self.state,
            floor,
            reads_after(now, || clock.now_nanos()),
            n,
        )
    }
}

/// One decision on a key's state word, through [`Algorithm::acquire_word`] with the map's
/// time floor (used by algorithms that need one, [`Algorithm::NEEDS_TIME_FLOOR`]), so a reader
/// whose clock lags the key's last writer is decided at the writer's time, as
/// [`AtomicLimiter`](crate::AtomicLimiter) does; the floor being the map's, a reader is decided
/// at the latest write to any key of the map (see [`Keyed`](crate::Keyed), "One time floor per
/// map"). `now` is the map's clock read; `clock` reads
/// again where the engine must confirm a leap.
///
/// # Errors
/// As [`Algorithm::check_permits`], for a capacity lowered since the caller checked `n`.
#[inline(always)]
pub(crate) fn decide_word<A: Algorithm>(
    algorithm: &A,
    state: &AtomicU64,
    floor: &AtomicU64,
    now: u64,
    clock: &impl Clock,
    n: u32,
) -> Result<Decision, AcquireError> {
    algorithm.acquire_word(state, floor, reads_after(now, || clock.now_nanos()), n)
}
