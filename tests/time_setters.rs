//! A setter's clock read is as stale as any other (DESIGN.md, "Time is part of the protocol"):
//! the thread can lag another core's clock by up to `H` (`MAX_CLOCK_LAG_NANOS`), or be preempted
//! between its read and the change. A reconfiguration must still never turn existing debt into
//! fresh permits: "the debt booked so far is kept in permits: a drained bucket stays drained",
//! and "raising [the capacity] frees nothing at once". Found in review (time model, setters).

use std::cell::Cell;
use std::time::Duration;

use floodgate::{AtomicLimiter, Clock, Keyed, Limiter, ManualClock, Rate, TokenBucket};

const SEC: u64 = 1_000_000_000;

/// A bucket of `capacity` at `per_second`, at 100 s on a manual clock.
fn bucket(
    capacity: u32,
    per_second: u32,
) -> (AtomicLimiter<TokenBucket, ManualClock>, ManualClock) {
    let clock = ManualClock::starting_at(100 * SEC);
    let b = TokenBucket::new(Rate::per_second(per_second), capacity).unwrap();
    (AtomicLimiter::with_clock(b, clock.clone()), clock)
}

/// A half-drained bucket (5 permits of debt at 1/s) whose rate is raised to 10/s by a setter on
/// a core whose clock trails the drain by 5 s (within the horizon), through
/// `AtomicLimiter::change_instant`: the 5 permits of debt stay 5 permits (0.5 s at the new rate).
/// With the setter's own clock read as the change instant (before `change_instant`), the bucket
/// was repaid at the new rate since that read: full at once. Half drained, not drained: a
/// drained bucket's word is a full bucket ahead of the stale instant, so the conversion alone
/// keeps its debt (`a_setter_stalled_after_its_instant_keeps_a_drained_buckets_debt`) and the
/// test passed with the time floor never raised.
#[test]
fn raising_the_rate_on_a_lagging_clock_keeps_the_debt() {
    let (b, clock) = lagging_bucket(10, 1);
    assert!(b.try_acquire(5).unwrap().is_allowed());
    LAG.set(5 * SEC);
    let at = b.change_instant();
    LAG.set(0);
    b.algorithm().set_rate(Rate::per_second(10), at).unwrap();
    assert_eq!(
        b.available(),
        5,
        "a half-drained bucket was refilled by a rate change"
    );
    clock.advance(Duration::from_millis(100));
    assert_eq!(b.available(), 6);
}

/// A rate raise through `AtomicLimiter::set_rate`, which takes its instant at the floor itself,
/// called on the lagging core, on a half-drained bucket: its 5 permits of debt stay (with the
/// setter's own read as the instant, 5 s before the drain, it was refilled at once).
#[test]
fn atomic_limiter_set_rate_on_a_lagging_clock_keeps_the_debt() {
    let (b, clock) = lagging_bucket(10, 1);
    assert!(b.try_acquire(5).unwrap().is_allowed());
    LAG.set(5 * SEC);
    b.set_rate(Rate::per_second(10)).unwrap();
    LAG.set(0);
    assert_eq!(
        b.available(),
        5,
        "a half-drained bucket was refilled by a rate change"
    );
    clock.advance(Duration::from_millis(100));
    assert_eq!(b.available(), 6);
}

/// The capacity raised from 3 to 13 on a bucket holding its 3 tokens, by a setter whose clock
/// trails by 5 s (`set_limit`, which reads its instant at the floor): the 10 new tokens fill at
/// the rate from the change, not at once. This passes with the time floor never raised: on one
/// word, a lagging instant comes before the last admission's own booking, so the word cannot
/// look full at it and the conversion frees nothing at any lagging instant. The floor matters
/// where other words sit full, a map's idle keys (`keyed_set_limit_on_a_lagging_clock_frees_nothing_at_once`).
#[test]
fn raising_the_capacity_on_a_lagging_clock_frees_nothing_at_once() {
    let (b, clock) = lagging_bucket(3, 1);
    // A used bucket (a fresh word starts full at the capacity in force), full again 10 s later;
    // an admission at 110 s publishes that time.
    assert!(b.try_acquire(1).unwrap().is_allowed());
    clock.advance(Duration::from_secs(10));
    assert!(b.try_acquire(1).unwrap().is_allowed());
    LAG.set(5 * SEC);
    b.set_limit(13).unwrap();
    LAG.set(0);
    assert_eq!(
        b.available(),
        2,
        "raising the capacity freed permits at once"
    );
}

/// A setter preempted between reading its instant and publishing the change, while the bucket
/// is drained: the drain's word is a full bucket ahead of the stale instant, so its writer
/// decided after that instant, and the conversion measures the debt no earlier than that
/// (`convert`): the 10 permits of debt stay 10 permits.
#[test]
fn a_setter_stalled_after_its_instant_keeps_a_drained_buckets_debt() {
    let (b, clock) = bucket(10, 1);
    let at = b.change_instant();
    clock.advance(Duration::from_secs(5));
    assert!(b.try_acquire(10).unwrap().is_allowed());
    b.algorithm().set_rate(Rate::per_second(10), at).unwrap();
    assert_eq!(
        b.available(),
        0,
        "a drained bucket was refilled by a rate change"
    );
}

/// Not fixed (the change instant is a parameter of `set_rate` / `set_capacity`, read before the
/// setter's lock): the same stall while the bucket is half drained. Its word is not a full bucket
/// ahead of the stale instant, so nothing shows that it was booked after it: the change applies
/// from the stale instant, and a rate raise from `r` to `r'` frees up to
/// min(capacity, δ × (r' − r)) permits for a stall δ (here 5 of the 5 held in debt).
#[test]
#[ignore = "known: a setter stalled between its instant and the change applies it from the \
            stale instant (issue: time model, setters); needs the instant read under the lock"]
fn a_setter_stalled_after_its_instant_keeps_a_partial_debt() {
    let (b, clock) = bucket(10, 1);
    let at = b.change_instant();
    clock.advance(Duration::from_secs(5));
    assert!(b.try_acquire(5).unwrap().is_allowed());
    b.algorithm().set_rate(Rate::per_second(10), at).unwrap();
    assert_eq!(
        b.available(),
        5,
        "a rate change freed the debt of 5 permits"
    );
}

thread_local! {
    /// How far this thread's reads of [`LaggingClock`] trail its base clock.
    static LAG: Cell<u64> = const { Cell::new(0) };
}

/// A manual clock that a thread can read as if its core's clock trailed the others by `LAG`.
#[derive(Clone)]
struct LaggingClock(ManualClock);

/// [`bucket`] on a [`LaggingClock`].
fn lagging_bucket(
    capacity: u32,
    per_second: u32,
) -> (AtomicLimiter<TokenBucket, LaggingClock>, ManualClock) {
    let clock = ManualClock::starting_at(100 * SEC);
    let b = TokenBucket::new(Rate::per_second(per_second), capacity).unwrap();
    (
        AtomicLimiter::with_clock(b, LaggingClock(clock.clone())),
        clock,
    )
}

impl Clock for LaggingClock {
    fn now_nanos(&self) -> u64 {
        self.0.now_nanos().saturating_sub(LAG.get())
    }
    fn sleep(&self, duration: Duration) {
        self.0.sleep(duration);
    }
}

/// `Keyed::set_limit` reads the map's clock: a setter on a core whose clock trails the writers'
/// by 5 s (within the horizon) must not free permits on the keys (the map's time floor is the
/// writers' time, as `AtomicLimiter::set_limit` raises its read to its own floor).
#[test]
fn keyed_set_limit_on_a_lagging_clock_frees_nothing_at_once() {
    let base = ManualClock::starting_at(100 * SEC);
    let clock = LaggingClock(base.clone());
    let keyed: Keyed<u32, TokenBucket, LaggingClock> =
        Keyed::builder(TokenBucket::new(Rate::per_second(1), 3).unwrap())
            .max_keys(64)
            .clock(clock)
            .build()
            .unwrap();
    // Each key used once, full again 10 s later; another key's admission then raises the
    // map's floor to 110 s.
    for key in 0..4 {
        assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
    }
    base.advance(Duration::from_secs(10));
    assert!(keyed.try_acquire(&99, 1).unwrap().is_allowed());
    // The setter's core reads 105 s.
    LAG.set(5 * SEC);
    keyed.set_limit(13).unwrap();
    LAG.set(0);
    for key in 0..4 {
        assert!(
            !keyed.try_acquire(&key, 4).unwrap().is_allowed(),
            "key {key}: a capacity raise freed permits at once"
        );
    }
}

/// `Keyed::set_rate` takes its instant at the map's floor: a rate raise from 1/s to 10/s by a
/// setter whose core reads 5 s behind the writers keeps each half-drained key's debt (with the
/// setter's raw read as the instant, every key was refilled at once).
#[test]
fn keyed_set_rate_on_a_lagging_clock_keeps_the_debt() {
    let base = ManualClock::starting_at(100 * SEC);
    let keyed: Keyed<u32, TokenBucket, LaggingClock> =
        Keyed::builder(TokenBucket::new(Rate::per_second(1), 10).unwrap())
            .max_keys(64)
            .clock(LaggingClock(base.clone()))
            .build()
            .unwrap();
    for key in 0..4 {
        assert!(keyed.try_acquire(&key, 5).unwrap().is_allowed());
    }
    LAG.set(5 * SEC);
    keyed.set_rate(Rate::per_second(10)).unwrap();
    LAG.set(0);
    for key in 0..4 {
        assert!(
            !keyed.try_acquire(&key, 6).unwrap().is_allowed(),
            "key {key}: a rate raise refilled a half-drained key"
        );
        assert!(keyed.try_acquire(&key, 5).unwrap().is_allowed());
    }
}

/// Four rate changes in a row (within the lag horizon) make every word read as at least the
/// settle bound of the words four generations old (their generation bits alias). That bound
/// counts the writers' clock lead `H` as debt and scales it with each change's rate ratio: here
/// the last change lowers the rate 500-fold, and 10 s of lead became 5,000 s of debt, refusing
/// every request on the bucket (capacity 10, refilled in 10 s at the new rate) for 10,000 s.
/// The promise: words four generations old are read as full by the time they would be
/// (a refill plus `H` after the change, at the new rate), and no longer held.
#[test]
fn four_quick_rate_changes_hold_a_bucket_for_at_most_a_refill_and_the_horizon() {
    let (b, clock) = bucket(10, 1000);
    assert!(b.try_acquire(1).unwrap().is_allowed());
    for per_second in [500, 1000, 500, 1] {
        b.algorithm()
            .set_rate(Rate::per_second(per_second), b.change_instant())
            .unwrap();
    }
    // A refill at the new rate (10 s) plus H (10 s) after the changes, and a margin.
    clock.advance(Duration::from_secs(30));
    let d = b.try_acquire(1).unwrap();
    assert!(
        d.is_allowed(),
        "held {:?} after four changes: {d:?}",
        Duration::from_secs(30)
    );
}

/// Not fixed (documented instead): `change_instant` reads the time floor, which a decision
/// raises only once it passes the floor by its grain (`clock::FLOOR_GRAIN_NANOS`, 16,384 ns), so
/// the instant can trail a published decision by up to a grain, and a rate raise then frees what
/// the grain accrues at the new rate. At one permit per µs raised to one per ns, a bucket of 1,000
/// half drained 1,023 ns after the floor was set is full again at once (500 permits of debt
/// freed), where the instant was promised to be "no earlier than any decision already
/// published". Found in review (time model, setters).
#[test]
#[ignore = "known: change_instant trails the last decision by up to the floor's grain (16,384 ns); \
            a raise frees up to ⌈grain × (r' − r)⌉ permits (documented on change_instant)"]
fn a_change_instant_within_the_floor_grain_keeps_the_debt() {
    let clock = ManualClock::starting_at(1_000 * SEC);
    let b = AtomicLimiter::with_clock(
        TokenBucket::new(Rate::per_second(1_000_000), 1_000).unwrap(),
        LaggingClock(clock.clone()),
    );
    assert!(b.try_acquire(1).unwrap().is_allowed()); // raises the floor to 1,000 s
    clock.advance(Duration::from_nanos(1_023));
    assert!(b.try_acquire(500).unwrap().is_allowed()); // within the grain: the floor stays
    LAG.set(5 * SEC);
    let at = b.change_instant();
    LAG.set(0);
    let before = b.available();
    b.algorithm()
        .set_rate(Rate::per_second(1_000_000_000), at)
        .unwrap();
    assert_eq!(b.available(), before, "a rate raise freed debt");
}
