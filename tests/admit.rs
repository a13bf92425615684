//! `Limiter::admit` (the bool-only path) decides exactly as `try_acquire`: two limiters of the
//! same configuration on one ManualClock, one driven by each, give the same answer and reach
//! the same state after every step of random sequences of requests, clock moves (forward, back
//! within the lag horizon, far leaps) and live reconfigurations. `Keyed::admit` likewise
//! against `Keyed::try_acquire`, and `PenalizedKeyed::admit` against its `try_acquire` (strikes,
//! blocks), over a few keys in a map too small for them all (new keys refused, idle ones swept).

use std::time::Duration;

use floodgate::keyed::{KeyedBuilder, KeyedStats, WhenFull};
use floodgate::{
    AcquireError, Algorithm, AtomicLimiter, Clock, ConfigError, Decision, FixedWindow, Gcra, Keyed,
    LeakyBucket, Limiter, ManualClock, PackedSlidingWindow, PenalizedKeyed, PenaltyBox, Rate,
    SlidingWindowLimiter, TokenBucket,
};
use proptest::prelude::*;

/// One step of a sequence.
#[derive(Clone, Debug)]
enum Op {
    /// A request for `n` permits (0 and above the capacity included: errors must match too).
    Take(u32),
    /// The clock moves forward by this many ns.
    Advance(u64),
    /// The clock moves back by this many ns (a lagging reader).
    Back(u64),
    /// The clock leaps a day ahead and comes back (a TSC glitch).
    Leap,
    /// `set_limit` to this value.
    SetLimit(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u32..12).prop_map(Op::Take),
        4 => (0u64..300_000_000).prop_map(Op::Advance),
        1 => (0u64..2_000_000_000).prop_map(Op::Back),
        1 => Just(Op::Leap),
        1 => (1u32..12).prop_map(Op::SetLimit),
    ]
}

/// Runs `ops` on two copies made by `make` (one answering through `try_acquire`, the other
/// through `admit`), comparing the answers and the state after every step.
fn same_decisions<A: Algorithm>(make: impl Fn() -> A, ops: &[Op]) -> Result<(), TestCaseError> {
    same_answers(
        |clock| AtomicLimiter::with_clock(make(), clock),
        AtomicLimiter::peek,
        ops,
    )
}

/// [`same_decisions`] for any limiter made on a clock by `make`, its state read by `peek`.
fn same_answers<L: Limiter>(
    make: impl Fn(ManualClock) -> L,
    peek: impl Fn(&L, u32) -> Result<Decision, AcquireError>,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(1_700_000_000_000_000_000);
    let by_decision = make(clock.clone());
    let by_bool = make(clock.clone());
    for (step, op) in ops.iter().enumerate() {
        match *op {
            Op::Take(n) => {
                let decision = by_decision.try_acquire(n).map(|d| d.is_allowed());
                let admitted = by_bool.admit(n);
                prop_assert_eq!(decision, admitted, "step {}: {:?}", step, op);
            }
            Op::Advance(ns) => clock.advance_nanos(ns),
            Op::Back(ns) => clock.set(clock.now_nanos().saturating_sub(ns)),
            Op::Leap => {
                let now = clock.now_nanos();
                clock.set(now + 86_400_000_000_000);
                let decision = by_decision.try_acquire(1).map(|d| d.is_allowed());
                prop_assert_eq!(decision, by_bool.admit(1), "step {}: leap", step);
                clock.set(now);
            }
            Op::SetLimit(limit) => {
                prop_assert_eq!(by_decision.set_limit(limit), by_bool.set_limit(limit));
            }
        }
        // The same state: what the next request of each size would get.
        for n in 1..=3 {
            prop_assert_eq!(
                peek(&by_decision, n),
                peek(&by_bool, n),
                "step {}: {:?}, peek({})",
                step,
                op,
                n
            );
        }
    }
    Ok(())
}

/// A keyed limiter as [`keyed_same_decisions`] drives it: [`Keyed`] and [`PenalizedKeyed`].
trait KeyedUnderTest {
    /// What [`state`](Self::state) reads of a key.
    type State: PartialEq + std::fmt::Debug;
    fn try_acquire(&self, key: u8, n: u32) -> Result<Decision, AcquireError>;
    fn check(&self, key: u8) -> Decision;
    fn admit(&self, key: u8, n: u32) -> Result<bool, AcquireError>;
    fn set_limit(&self, limit: u32) -> Result<(), ConfigError>;
    fn stats(&self) -> KeyedStats;
    /// What can be seen of `key` without changing it: the decisions of 1 to 3 permits for a
    /// plain key (its whole word), whether it is blocked for a penalized one (its jail word;
    /// its algorithm word shows in the answers that follow).
    fn state(&self, key: u8) -> Self::State;
}

impl<A: Algorithm> KeyedUnderTest for Keyed<u8, A, ManualClock> {
    type State = Vec<Result<Decision, AcquireError>>;
    fn try_acquire(&self, key: u8, n: u32) -> Result<Decision, AcquireError> {
        Keyed::try_acquire(self, &key, n)
    }
    fn check(&self, key: u8) -> Decision {
        Keyed::check(self, &key)
    }
    fn admit(&self, key: u8, n: u32) -> Result<bool, AcquireError> {
        Keyed::admit(self, &key, n)
    }
    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        Keyed::set_limit(self, limit)
    }
    fn stats(&self) -> KeyedStats {
        Keyed::stats(self)
    }
    fn state(&self, key: u8) -> Self::State {
        (1..=3).map(|n| self.peek(&key, n)).collect()
    }
}

impl<A: Algorithm> KeyedUnderTest for PenalizedKeyed<u8, A, ManualClock> {
    type State = bool;
    fn try_acquire(&self, key: u8, n: u32) -> Result<Decision, AcquireError> {
        PenalizedKeyed::try_acquire(self, &key, n)
    }
    fn check(&self, key: u8) -> Decision {
        PenalizedKeyed::check(self, &key)
    }
    fn admit(&self, key: u8, n: u32) -> Result<bool, AcquireError> {
        PenalizedKeyed::admit(self, &key, n)
    }
    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        PenalizedKeyed::set_limit(self, limit)
    }
    fn stats(&self) -> KeyedStats {
        PenalizedKeyed::stats(self)
    }
    fn state(&self, key: u8) -> Self::State {
        self.is_blocked(&key)
    }
}

/// The maps [`keyed_and_penalized_same_decisions`] runs: (max keys, shards). Three keys in one
/// shard (new keys refused while the three held are live, idle ones swept); and 64 keys over 8
/// shards, where the keys `0..4` spread over several shards (each map hashes with its own random
/// seeds, so only a map whose shards never fill gives every map the same answers).
const MAPS: [(usize, usize); 2] = [(3, 1), (64, 8)];

/// A keyed map for [`keyed_same_decisions`]: `max_keys` over `shards`, new keys refused when
/// full.
fn keyed_builder<A: Algorithm>(
    algorithm: A,
    clock: &ManualClock,
    (max_keys, shards): (usize, usize),
) -> KeyedBuilder<A, ManualClock> {
    Keyed::builder(algorithm)
        .clock(clock.clone())
        .max_keys(max_keys)
        .shards(shards)
        .when_full(WhenFull::DenyNewKeys)
}

/// [`same_decisions`] for three keyed limiters made by `build` (one answering through
/// `try_acquire`, one through `admit`, one through `check` for one permit and `try_acquire`
/// otherwise) over keys `0..4` in a map of three, so new keys are refused while the three held
/// are live and idle ones are swept: the same answers (`check`'s whole `Decision` equal to
/// `try_acquire`'s) and, after every step, the same counters (keys held, refusals, sweeps) and
/// the same state of each key.
/// (Not under `WhenFull::EvictLeastUsed`: which of two keys holding as many permits goes first
/// follows the table's layout, and each map hashes with its own random seeds.)
fn keyed_same_decisions<L: KeyedUnderTest>(
    build: impl Fn(&ManualClock) -> L,
    ops: &[(u8, Op)],
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(1_700_000_000_000_000_000);
    let (by_decision, by_bool, by_check) = (build(&clock), build(&clock), build(&clock));
    for (step, &(key, ref op)) in ops.iter().enumerate() {
        match *op {
            Op::Take(n) => {
                let decision = by_decision.try_acquire(key, n);
                let admitted = by_bool.admit(key, n);
                let allowed = decision.map(|d| d.is_allowed());
                prop_assert_eq!(allowed, admitted, "step {}: key {} {:?}", step, key, op);
                let checked = match n {
                    1 => Ok(by_check.check(key)),
                    _ => by_check.try_acquire(key, n),
                };
                prop_assert_eq!(
                    checked,
                    decision,
                    "step {}: key {} {:?}, check",
                    step,
                    key,
                    op
                );
            }
            Op::Advance(ns) => clock.advance_nanos(ns),
            Op::Back(ns) => clock.set(clock.now_nanos().saturating_sub(ns)),
            Op::Leap => {
                let now = clock.now_nanos();
                clock.set(now + 86_400_000_000_000);
                let decision = by_decision.try_acquire(key, 1);
                let allowed = decision.map(|d| d.is_allowed());
                prop_assert_eq!(allowed, by_bool.admit(key, 1), "step {}: leap", step);
                prop_assert_eq!(
                    Ok(by_check.check(key)),
                    decision,
                    "step {}: leap, check",
                    step
                );
                clock.set(now);
            }
            Op::SetLimit(limit) => {
                let set = by_decision.set_limit(limit);
                prop_assert_eq!(set, by_bool.set_limit(limit));
                prop_assert_eq!(set, by_check.set_limit(limit));
            }
        }
        for other in [&by_bool, &by_check] {
            prop_assert_eq!(
                by_decision.stats(),
                other.stats(),
                "step {}: counters",
                step
            );
            for key in 0..4u8 {
                prop_assert_eq!(
                    by_decision.state(key),
                    other.state(key),
                    "step {}: {:?}, key {}",
                    step,
                    op,
                    key
                );
            }
        }
    }
    Ok(())
}

/// [`keyed_same_decisions`] for a plain map of `make`'s algorithm and for one with a penalty
/// box (2 strikes in 1 s block for 2 s: the sequences strike, block and outlive blocks), each
/// in every shape of [`MAPS`].
fn keyed_and_penalized_same_decisions<A: Algorithm>(
    make: impl Fn() -> A,
    ops: &[(u8, Op)],
) -> Result<(), TestCaseError> {
    let penalty = PenaltyBox::new(2, Duration::from_secs(1), Duration::from_secs(2)).unwrap();
    for map in MAPS {
        keyed_same_decisions(
            |clock| keyed_builder(make(), clock, map).build::<u8>().unwrap(),
            ops,
        )?;
        keyed_same_decisions(
            |clock| {
                keyed_builder(make(), clock, map)
                    .build_with_penalty::<u8>(penalty)
                    .unwrap()
            },
            ops,
        )?;
    }
    Ok(())
}

fn keyed_op() -> impl Strategy<Value = (u8, Op)> {
    (0u8..4, op())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn keyed_gcra_admits_as_it_decides(ops in prop::collection::vec(keyed_op(), 1..120)) {
        keyed_and_penalized_same_decisions(|| Gcra::new(Rate::per_second(20), 5).unwrap(), &ops)?;
    }

    /// The extremes of a GCRA's rate: a permit every nanosecond (every clock move refills the
    /// burst) and one an hour (a denial's retry is most of an hour).
    #[test]
    fn keyed_gcra_at_extreme_rates_admits_as_it_decides(ops in prop::collection::vec(keyed_op(), 1..120)) {
        keyed_and_penalized_same_decisions(|| Gcra::new(Rate::new(1, Duration::from_nanos(1)), 5).unwrap(), &ops)?;
        keyed_and_penalized_same_decisions(|| Gcra::new(Rate::per_hour(1), 2).unwrap(), &ops)?;
    }

    #[test]
    fn keyed_windows_admit_as_they_decide(ops in prop::collection::vec(keyed_op(), 1..120)) {
        keyed_and_penalized_same_decisions(|| FixedWindow::new(5, Duration::from_millis(500)).unwrap(), &ops)?;
        keyed_and_penalized_same_decisions(|| FixedWindow::aligned(5, Duration::from_millis(500)).unwrap(), &ops)?;
        keyed_and_penalized_same_decisions(|| PackedSlidingWindow::new(5, Duration::from_millis(500), 2).unwrap(), &ops)?;
    }

    /// A 1 ns window: every clock move starts a new one (and a request in it waits 1 ns).
    #[test]
    fn keyed_one_nanosecond_windows_admit_as_they_decide(ops in prop::collection::vec(keyed_op(), 1..120)) {
        keyed_and_penalized_same_decisions(|| FixedWindow::new(5, Duration::from_nanos(1)).unwrap(), &ops)?;
        keyed_and_penalized_same_decisions(|| FixedWindow::aligned(5, Duration::from_nanos(1)).unwrap(), &ops)?;
    }

    #[test]
    fn gcra_admits_as_it_decides(ops in prop::collection::vec(op(), 1..120)) {
        same_decisions(|| Gcra::new(Rate::per_second(20), 5).unwrap(), &ops)?;
    }

    #[test]
    fn token_and_leaky_buckets_admit_as_they_decide(ops in prop::collection::vec(op(), 1..120)) {
        same_decisions(|| TokenBucket::new(Rate::new(3, Duration::from_millis(100)), 4).unwrap(), &ops)?;
        same_decisions(|| LeakyBucket::new(Rate::per_second(7), 2).unwrap(), &ops)?;
    }

    #[test]
    fn fixed_windows_admit_as_they_decide(ops in prop::collection::vec(op(), 1..120)) {
        same_decisions(|| FixedWindow::new(5, Duration::from_millis(500)).unwrap(), &ops)?;
        same_decisions(|| FixedWindow::aligned(5, Duration::from_millis(500)).unwrap(), &ops)?;
    }

    /// The ring's short path (`admit`) and its engine (`try_acquire`): every crossing, burst,
    /// refusal through the marks, lag and leap of the sequence.
    #[test]
    fn sliding_windows_admit_as_they_decide(ops in prop::collection::vec(op(), 1..120)) {
        for (window_ms, cells) in [(1_000, 4), (600, 60)] {
            same_answers(
                |clock| SlidingWindowLimiter::with_clock(5, Duration::from_millis(window_ms), cells, clock).unwrap(),
                SlidingWindowLimiter::peek,
                &ops,
            )?;
        }
    }
}

/// The sliding window ring's `admit`: its errors are `try_acquire`'s, and a window's permits
/// come back as the cells leave.
#[test]
fn the_ring_s_admit_is_try_acquire_s_answer() {
    let clock = ManualClock::new();
    let ring =
        floodgate::SlidingWindowLimiter::with_clock(2, Duration::from_secs(1), 4, clock.clone())
            .unwrap();
    assert_eq!(ring.admit(2), Ok(true));
    assert_eq!(ring.admit(1), Ok(false));
    assert!(ring.admit(0).is_err());
    assert!(ring.admit(3).is_err());
    clock.advance(Duration::from_secs(1));
    assert_eq!(ring.admit(1), Ok(true));
}
