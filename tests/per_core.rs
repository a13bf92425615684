//! `PerCore` (leases from an exact limiter, one stripe per core) on a `ManualClock`: exactness
//! against the exact limiter, the stated bounds under arbitrary interleavings of stripes and
//! time steps (proptest), refunds, and bad input. Deterministic: no threads, no wall time.

use std::time::Duration;

use floodgate::lease::{LeaseSource, PerCore};
use floodgate::{
    AcquireError, AtomicLimiter, Clock, ConfigError, FixedWindow, Gcra, LeakyBucket, Limiter,
    ManualClock, Rate, SlidingWindowLimiter, TokenBucket,
};
use proptest::prelude::*;

/// Nanoseconds per permit of the buckets below.
const T: u64 = 1_000;
/// Bucket capacity.
const C: u32 = 20;
/// The lease lifetime of the bucket cases: 3.5 permits' worth.
const L: u64 = 3_500;

fn bucket<B>(
    make: fn(Rate, u32) -> Result<B, ConfigError>,
    clock: &ManualClock,
) -> AtomicLimiter<B, ManualClock>
where
    B: floodgate::Algorithm,
{
    AtomicLimiter::with_clock(
        make(Rate::new(1, Duration::from_nanos(T)), C).unwrap(),
        clock.clone(),
    )
}

fn per_core<S: LeaseSource>(source: S, stripes: usize) -> PerCore<S> {
    PerCore::with_stripes(source, stripes)
        .unwrap()
        .with_max_lease(8)
        .unwrap()
        .with_lifetime(Duration::from_nanos(L))
        .unwrap()
}

/// One step of a scenario: the clock moves `dt`, then stripe `stripe` asks for `n`.
#[derive(Clone, Copy, Debug)]
struct Step {
    dt: u64,
    stripe: usize,
    n: u32,
}

fn steps(max_dt: u64, stripes: usize) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            prop_oneof![3 => Just(0u64), 2 => 0..max_dt, 1 => 0..max_dt * 20],
            0..stripes,
            prop_oneof![4 => Just(1u32), 1 => 1u32..4],
        )
            .prop_map(|(dt, stripe, n)| Step { dt, stripe, n }),
        1..160,
    )
}

/// Runs `steps` on `limiter`: the admissions as `(time, permits)`.
fn run(
    clock: &ManualClock,
    steps: &[Step],
    mut acquire: impl FnMut(usize, u32) -> bool,
) -> Vec<(u64, u64)> {
    let mut admitted = Vec::new();
    for step in steps {
        clock.advance(Duration::from_nanos(step.dt));
        if acquire(step.stripe, step.n) {
            admitted.push((clock.now_nanos(), u64::from(step.n)));
        }
    }
    admitted
}

/// The largest excess over `capacity + ⌊(y − x + lifetime) / T⌋` over every span `[x, y]`.
fn bucket_excess(admitted: &[(u64, u64)], lifetime: u64) -> i64 {
    let mut worst = i64::MIN;
    for (i, &(x, _)) in admitted.iter().enumerate() {
        let mut inside = 0u64;
        for &(y, n) in &admitted[i..] {
            inside += n;
            let bound = u64::from(C) + (y - x + lifetime) / T;
            worst = worst.max(inside as i64 - bound as i64);
        }
    }
    worst
}

type Make<B> = fn(Rate, u32) -> Result<B, ConfigError>;

/// One stripe serving one caller, with leases that live for one nanosecond (served only at the
/// instant they were taken), decides exactly as the exact bucket: a lease is a batch of the
/// bookings the bucket would have made at that instant, and what is not served goes back exactly
/// (nothing else writes the word in between). A longer lifetime serves a permit booked earlier,
/// which the bound `C + ⌊(d + L) / T⌋` allows for.
fn single_stripe_is_exact<B: floodgate::Algorithm>(make: Make<B>, steps: &[Step])
where
    AtomicLimiter<B, ManualClock>: LeaseSource,
{
    let clock = ManualClock::starting_at(1_000_000);
    let exact = bucket(make, &clock);
    let leased = per_core(bucket(make, &clock), 1)
        .with_lifetime(Duration::from_nanos(1))
        .unwrap();
    for (i, step) in steps.iter().enumerate() {
        clock.advance(Duration::from_nanos(step.dt));
        let want = exact.try_acquire(step.n).unwrap().is_allowed();
        let got = leased.try_acquire_on(0, step.n).unwrap().is_allowed();
        assert_eq!(got, want, "step {i} of {steps:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn one_stripe_decides_exactly_as_the_exact_bucket(steps in steps(2 * T, 1)) {
        single_stripe_is_exact::<Gcra>(Gcra::new, &steps);
        single_stripe_is_exact::<TokenBucket>(TokenBucket::new, &steps);
        single_stripe_is_exact::<LeakyBucket>(LeakyBucket::new, &steps);
    }

    #[test]
    fn one_stripe_decides_exactly_as_the_exact_fixed_window(steps in steps(3_000, 1)) {
        let clock = ManualClock::starting_at(1_000_000);
        let window = || FixedWindow::aligned(C, Duration::from_nanos(10_000)).unwrap();
        let exact = AtomicLimiter::with_clock(window(), clock.clone());
        let leased = per_core(AtomicLimiter::with_clock(window(), clock.clone()), 1);
        for step in &steps {
            clock.advance(Duration::from_nanos(step.dt));
            let want = exact.try_acquire(step.n).unwrap().is_allowed();
            prop_assert_eq!(leased.try_acquire_on(0, step.n).unwrap().is_allowed(), want);
        }
    }

    /// Any interleaving of stripes (four, or all requests on one) and time steps: a bucket
    /// served by leases admits at most `C + ⌊(d + L) / T⌋` in any span of length `d`.
    #[test]
    fn a_leased_bucket_stays_within_its_bound(steps in steps(2 * T, 4)) {
        for stripes in [4, 1] {
            let clock = ManualClock::starting_at(1_000_000);
            let leased = per_core(bucket(Gcra::new, &clock), stripes);
            let admitted =
                run(&clock, &steps, |s, n| leased.try_acquire_on(s, n).unwrap().is_allowed());
            prop_assert!(bucket_excess(&admitted, L) <= 0, "{:?}", admitted);
            let clock = ManualClock::starting_at(1_000_000);
            let leased = per_core(bucket(TokenBucket::new, &clock), stripes);
            let admitted =
                run(&clock, &steps, |s, n| leased.try_acquire_on(s, n).unwrap().is_allowed());
            prop_assert!(bucket_excess(&admitted, L) <= 0, "{:?}", admitted);
        }
    }

    /// Any interleaving: a fixed window served by leases never admits more than its limit in a
    /// window (leases die with their window), with leases that outlive the window or expire
    /// (and are refunded into it) well within it.
    #[test]
    fn a_leased_fixed_window_is_never_over_its_limit(steps in steps(3_000, 4)) {
        let window = 10_000u64;
        for lifetime in [Duration::from_secs(1), Duration::from_nanos(L)] {
            let clock = ManualClock::starting_at(1_000_000);
            let source = AtomicLimiter::with_clock(
                FixedWindow::aligned(C, Duration::from_nanos(window)).unwrap(),
                clock.clone(),
            );
            let leased = per_core(source, 4).with_lifetime(lifetime).unwrap();
            let admitted =
                run(&clock, &steps, |s, n| leased.try_acquire_on(s, n).unwrap().is_allowed());
            let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
            for (time, n) in admitted {
                *per_window.entry(time / window).or_default() += n;
            }
            prop_assert!(per_window.values().all(|&n| n <= u64::from(C)), "{:?}", per_window);
        }
    }

    /// Any interleaving: a sliding window served by leases never admits more than its limit in
    /// any window of cells (leases die with their cell).
    #[test]
    fn a_leased_sliding_window_is_never_over_its_limit(steps in steps(3_000, 4)) {
        let (cell, cells) = (2_500u64, 4u64);
        let clock = ManualClock::starting_at(1_000_000);
        let source = SlidingWindowLimiter::with_clock(
            C,
            Duration::from_nanos(cell * cells),
            cells as u32,
            clock.clone(),
        )
        .unwrap();
        let leased = per_core(source, 4).with_lifetime(Duration::from_secs(1)).unwrap();
        let admitted = run(&clock, &steps, |s, n| leased.try_acquire_on(s, n).unwrap().is_allowed());
        let mut per_cell = std::collections::BTreeMap::<u64, u64>::new();
        for (time, n) in admitted {
            *per_cell.entry(time / cell).or_default() += n;
        }
        for &last in per_cell.keys() {
            let window: u64 = per_cell.range(last.saturating_sub(cells - 1)..=last).map(|(_, n)| n).sum();
            prop_assert!(window <= u64::from(C), "cells ending at {}: {:?}", last, per_cell);
        }
    }
}

/// With the clock standing still nothing expires: two stripes taking turns get exactly the
/// bucket's capacity, no more (never over) and no less (held permits are served, and leases
/// shrink to single permits as the budget runs out).
#[test]
fn taking_turns_on_a_still_clock_gets_exactly_the_capacity() {
    let clock = ManualClock::starting_at(1_000_000);
    let source = AtomicLimiter::with_clock(
        TokenBucket::new(Rate::per_second(1), 1_000).unwrap(),
        clock.clone(),
    );
    let leased = PerCore::with_stripes(source, 2).unwrap();
    let mut admitted = 0;
    drain_taking_turns(|stripe| {
        let allowed = leased.try_acquire_on(stripe, 1).unwrap().is_allowed();
        admitted += u32::from(allowed);
        allowed
    });
    assert_eq!(admitted, 1_000);
}

/// Stripes 0 and 1 take one permit in turn through `take` (true: admitted) until two are denied
/// in a row: on a still clock, what both stripes and the source hold is drained.
fn drain_taking_turns(mut take: impl FnMut(usize) -> bool) {
    let mut denied_in_a_row = 0;
    let mut turn = 0;
    while denied_in_a_row < 2 {
        if take(turn % 2) {
            denied_in_a_row = 0;
        } else {
            denied_in_a_row += 1;
        }
        turn += 1;
    }
}

/// A stripe that keeps using its leases grows them (fewer trips to the source), but holds no
/// more than `stranded_bound` at any time.
#[test]
fn leases_grow_with_use_and_stay_within_the_stranded_bound() {
    let clock = ManualClock::starting_at(1_000_000);
    let source = AtomicLimiter::with_clock(
        Gcra::new(Rate::per_second(1), 10_000).unwrap(),
        clock.clone(),
    );
    let leased = PerCore::with_stripes(source, 2).unwrap();
    for served in 1..=500u64 {
        assert!(leased.try_acquire_on(0, 1).unwrap().is_allowed());
        let held = 10_000 - served - leased.source().available();
        assert!(
            held <= leased.stranded_bound(),
            "{held} held after {served}"
        );
    }
    // After 500 single requests the stripe holds a lease larger than one permit.
    assert!(10_000 - 500 - leased.source().available() > 0);
}

/// A lease from an exact bucket given back before anything else wrote the bucket: as if it had
/// been smaller. After a reconfiguration it is not given back (the units changed).
#[test]
fn a_refund_is_exact_or_does_not_happen() {
    let clock = ManualClock::starting_at(1_000_000);
    let gcra = bucket(Gcra::new, &clock);
    let lease = gcra.take(1, 8, L).unwrap();
    assert_eq!(lease.granted(), 8);
    assert!(gcra.give_back(&lease, 5));
    assert_eq!(gcra.available(), u64::from(C) - 3);
    assert!(
        !gcra.give_back(&lease, 5),
        "the word is no longer the lease's"
    );

    let lease = gcra.take(1, 8, L).unwrap();
    gcra.algorithm()
        .set_rate(Rate::new(1, Duration::from_nanos(2 * T)), clock.now_nanos())
        .unwrap();
    assert!(!gcra.give_back(&lease, 8), "refunded across a rate change");
    assert_eq!(gcra.available(), u64::from(C) - 11);
}

/// A rate respelled (2 per `2·T` after 1 per `T`: the same interval) is no change, so a lease
/// taken before it is still given back exactly, as if nothing had happened: the units did not
/// change. (While a respelling made a generation the refund was refused and the lease's unused
/// permits were left to expire.)
#[test]
fn a_refund_survives_a_respelled_rate() {
    let clock = ManualClock::starting_at(1_000_000);
    let gcra = bucket(Gcra::new, &clock);
    let lease = gcra.take(1, 8, L).unwrap();
    assert_eq!(lease.granted(), 8);
    gcra.algorithm()
        .set_rate(Rate::new(2, Duration::from_nanos(2 * T)), clock.now_nanos())
        .unwrap();
    assert!(gcra.give_back(&lease, 5), "refused across a respelling");
    assert_eq!(gcra.available(), u64::from(C) - 3);
}

/// A lease of a fixed window lasts until its window ends; a bucket's lasts its lifetime.
#[test]
fn leases_expire_with_their_window_or_lifetime() {
    let clock = ManualClock::starting_at(1_000_000);
    let window = AtomicLimiter::with_clock(
        FixedWindow::aligned(100, Duration::from_nanos(10_000)).unwrap(),
        clock.clone(),
    );
    clock.advance(Duration::from_nanos(2_500));
    let lease = window.take(1, 4, u64::MAX).unwrap();
    assert_eq!(
        (lease.taken_at(), lease.expires_at()),
        (1_002_500, 1_010_000)
    );
    let lease = window.take(1, 4, 100).unwrap();
    assert_eq!(lease.expires_at(), 1_002_600);

    let sliding =
        SlidingWindowLimiter::with_clock(100, Duration::from_nanos(10_000), 4, clock.clone())
            .unwrap();
    let lease = sliding.take(1, 4, u64::MAX).unwrap();
    assert_eq!(lease.expires_at(), 1_005_000); // the end of its 2.5 µs cell

    let gcra = bucket(Gcra::new, &clock);
    let lease = gcra.take(1, 4, L).unwrap();
    assert_eq!(lease.expires_at(), clock.now_nanos() + L);
}

/// A denied lease takes nothing and says why for the permits asked.
#[test]
fn a_denied_lease_takes_nothing() {
    let clock = ManualClock::starting_at(1_000_000);
    let gcra = bucket(Gcra::new, &clock);
    assert_eq!(gcra.take(C, C, L).unwrap().granted(), C);
    let denied = gcra.take(2, 8, L).unwrap();
    assert_eq!(denied.granted(), 0);
    assert_eq!(denied.decision().retry_after(), Duration::from_nanos(2 * T));
    clock.advance(Duration::from_nanos(3 * T));
    assert_eq!(gcra.take(1, 8, L).unwrap().granted(), 3); // what was left, not 8
}

#[test]
fn bad_input_is_refused_with_the_constraint() {
    let clock = ManualClock::new();
    let make = || bucket(Gcra::new, &clock);
    let leased = PerCore::with_stripes(make(), 2).unwrap();
    assert_eq!(leased.try_acquire(0), Err(AcquireError::ZeroPermits));
    assert!(matches!(
        leased.try_acquire(C + 1),
        Err(AcquireError::ExceedsCapacity { .. })
    ));
    assert!(matches!(
        make().take(0, 4, L),
        Err(AcquireError::ZeroPermits)
    ));
    assert!(matches!(
        PerCore::with_stripes(make(), 0),
        Err(ConfigError::Invalid {
            what: "stripes",
            ..
        })
    ));
    assert!(matches!(
        PerCore::with_stripes(make(), usize::MAX),
        Err(ConfigError::TooLarge {
            what: "PerCore stripes",
            ..
        })
    ));
    assert!(matches!(
        PerCore::with_stripes(make(), 1).unwrap().with_max_lease(0),
        Err(ConfigError::Invalid {
            what: "max_lease",
            ..
        })
    ));
    for lifetime in [Duration::ZERO, Duration::MAX] {
        assert!(matches!(
            PerCore::with_stripes(make(), 1)
                .unwrap()
                .with_lifetime(lifetime),
            Err(ConfigError::DurationOutOfRange {
                what: "lease lifetime",
                ..
            })
        ));
    }
}

/// `set_limit` reaches the source; `limit` and every decision report it.
#[test]
fn set_limit_changes_the_source() {
    let clock = ManualClock::new();
    let leased = PerCore::with_stripes(bucket(Gcra::new, &clock), 2).unwrap();
    leased.set_limit(5).unwrap();
    assert_eq!(leased.limit(), 5);
    assert_eq!(leased.source().algorithm().capacity(), 5);
    assert_eq!(leased.try_acquire(1).unwrap().limit(), 5);
    assert!(leased.set_limit(0).is_err());
}

/// A lease taken on a leaping clock read is not served once the clock reads normal time again:
/// its `taken_at` lies beyond the lag horizon ahead of every later read, so raising those reads
/// to it would serve the lease for as long as the leap (an hour here), long after the window the
/// source counted it in was folded back into the present and ended. Found by review: the stripe
/// served its held permits on top of a later window's full limit.
#[test]
fn a_lease_from_a_leaping_read_is_not_served_after_the_clock_comes_back() {
    const HOUR: u64 = 3_600_000_000_000;
    const SECOND: u64 = 1_000_000_000;
    let base = 100 * SECOND;
    let window = |clock: &ManualClock| {
        AtomicLimiter::with_clock(
            FixedWindow::aligned(10, Duration::from_secs(1)).unwrap(),
            clock.clone(),
        )
    };
    let sliding = |clock: &ManualClock| {
        SlidingWindowLimiter::with_clock(10, Duration::from_secs(1), 4, clock.clone()).unwrap()
    };
    fn check<S: LeaseSource + Limiter>(source: S, clock: &ManualClock, base: u64) {
        let per_core = PerCore::with_stripes(source, 1)
            .unwrap()
            .with_max_lease(8)
            .unwrap()
            .with_lifetime(Duration::from_secs(1))
            .unwrap();
        clock.set(base + HOUR); // one leaping read
        assert!(per_core.try_acquire_on(0, 1).unwrap().is_allowed());
        clock.set(base); // the clock reads normal time again
        // The exact source folds the leaped window (and the lease's count) back into the
        // present one; the next window is a fresh one, and the exact source fills it.
        clock.set(base + 5 * SECOND);
        while per_core.source().try_acquire(1).unwrap().is_allowed() {}
        clock.set(base + 6 * SECOND);
        let exact = (0..20)
            .filter(|_| per_core.source().try_acquire(1).unwrap().is_allowed())
            .count();
        assert_eq!(exact, 10, "the exact source admits its limit");
        let served = (0..8)
            .filter(|_| per_core.try_acquire_on(0, 1).unwrap().is_allowed())
            .count();
        assert_eq!(served, 0, "a window of 10 admitted {} more", served);
    }
    let clock = ManualClock::starting_at(base);
    check(window(&clock), &clock, base);
    let clock = ManualClock::starting_at(base);
    check(sliding(&clock), &clock, base);
}

/// A [`ManualClock`] whose next reads can be scripted: a thread that moves to a core whose
/// clock trails (within the lag horizon) between two reads of one call.
#[derive(Clone)]
struct Scripted {
    base: ManualClock,
    next: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<u64>>>,
}

impl Clock for Scripted {
    fn now_nanos(&self) -> u64 {
        let scripted = self.next.lock().unwrap().pop_front();
        scripted.unwrap_or_else(|| self.base.now_nanos())
    }

    fn sleep(&self, duration: Duration) {
        self.base.sleep(duration);
    }
}

/// A sliding window's lease expires with the cell the source counted it in, even when the
/// source's own clock read trails the read the lease's expiry was computed from (a thread
/// that moved to a core whose clock trails by 1 ms). Found by review: the expiry came from a
/// read taken before the decision, so a lease counted in cell c − 1 was served all through cell c
/// and a window of 10 admitted 14 in the four cells c..c+3.
#[test]
fn a_sliding_lease_expires_with_the_cell_it_was_counted_in() {
    const MS: u64 = 1_000_000;
    let base = ManualClock::starting_at(1_000 * MS); // the start of a 250 ms cell
    let clock = Scripted {
        base: base.clone(),
        next: Default::default(),
    };
    let source =
        SlidingWindowLimiter::with_clock(10, Duration::from_secs(1), 4, clock.clone()).unwrap();
    let per_core = PerCore::with_stripes(source, 1)
        .unwrap()
        .with_max_lease(8)
        .unwrap()
        .with_lifetime(Duration::from_secs(1))
        .unwrap();
    // The stripe's read and the lease's first read in cell c; the source's own read 1 ms behind,
    // in cell c − 1.
    clock
        .next
        .lock()
        .unwrap()
        .extend([1_000 * MS, 1_000 * MS, 999 * MS]);
    // The lease's first permit is the source's own decision, on its read in cell c − 1 (as
    // the exact window decides a request whose read trails): not counted in c..c+3 below.
    assert!(per_core.try_acquire_on(0, 1).unwrap().is_allowed());
    let mut admitted_in_c_to_c3 = 0;
    base.set(1_100 * MS); // cell c
    admitted_in_c_to_c3 += (0..8)
        .filter(|_| per_core.try_acquire_on(0, 1).unwrap().is_allowed())
        .count();
    base.set(1_750 * MS); // cell c + 3: the window c..c+3
    admitted_in_c_to_c3 += (0..20)
        .filter(|_| per_core.source().try_acquire(1).unwrap().is_allowed())
        .count();
    assert!(
        admitted_in_c_to_c3 <= 10,
        "the window c..c+3 admitted {admitted_in_c_to_c3}"
    );
}

/// A fixed window whose window outlasts the lease lifetime (a 1 s window, the default 1 ms
/// leases): a stripe whose lease expires part-served, after another stripe took from the window
/// (so its refund is not exact), strands the rest in the window; it then leases again in the same
/// window. The module docs bound the under-admission to `stranded_bound` per window. Here one
/// stripe grows its lease by using it up quickly, leaves most of it unserved, and lets it expire,
/// over and over in one window; then both stripes drain the window on a still clock.
#[test]
fn a_fixed_window_strands_at_most_the_stranded_bound_per_window() {
    let clock = ManualClock::starting_at(0);
    let source = AtomicLimiter::with_clock(
        FixedWindow::aligned(STRAND_LIMIT, Duration::from_secs(1)).unwrap(),
        clock.clone(),
    );
    assert_strands_at_most_the_bound(PerCore::with_stripes(source, 2).unwrap(), &clock);
}

/// The same pattern on a sliding window (one 1 s cell of a 4 s window): a lease replaced while
/// the cell it was counted in is open gives its unused permits back to that cell, so what stays
/// stranded in one cell is at most what the stripes hold when it is sealed. Failed before the
/// sliding window took refunds: each lease that expired part-served stranded the rest in its
/// cell, up to `max_lease − 1` per lease (1,171 here, bound 126).
#[test]
fn a_sliding_window_strands_at_most_the_stranded_bound_per_cell() {
    let clock = ManualClock::starting_at(0);
    let source =
        SlidingWindowLimiter::with_clock(STRAND_LIMIT, Duration::from_secs(4), 4, clock.clone())
            .unwrap();
    assert_strands_at_most_the_bound(PerCore::with_stripes(source, 2).unwrap(), &clock);
}

/// The limit of the stranding tests: far more than 20 rounds of leases can take.
const STRAND_LIMIT: u32 = 10_000;

/// Stripe 0 grows its lease by using it up quickly, leaves most of it unserved and lets it
/// expire, after stripe 1 took from the source (so a refund from the exact word cannot land),
/// 20 times within the source's first second (one window, or one cell); then both stripes drain
/// it on a still clock. What was never admitted was stranded: at most `stranded_bound`.
fn assert_strands_at_most_the_bound<S: LeaseSource>(leased: PerCore<S>, clock: &ManualClock) {
    const MS: u64 = 1_000_000;
    let mut admitted = 0u64;
    let mut take = |stripe: usize| {
        let allowed = leased.try_acquire_on(stripe, 1).unwrap().is_allowed();
        admitted += u64::from(allowed);
        allowed
    };
    for _ in 0..20 {
        // Quick use: each lease runs out before it expires, so the next one doubles.
        for _ in 0..100 {
            take(0);
        }
        take(1); // another stripe writes the source after stripe 0's last lease
        clock.advance(Duration::from_nanos(2 * MS)); // stripe 0's lease expires part-served
    }
    // Drain what is left (the clock stands still: nothing more expires).
    drain_taking_turns(&mut take);
    assert!(clock.now_nanos() < 1_000 * MS, "all in one window (cell)");
    let stranded = u64::from(STRAND_LIMIT) - admitted;
    assert!(
        stranded <= leased.stranded_bound(),
        "{stranded} permits stranded in one window (cell), bound {}",
        leased.stranded_bound()
    );
}

/// A fixed window takes a lease's refund while the window is the lease's, whatever was counted
/// since (a count is a sum), and not once the window has ended.
#[test]
fn a_fixed_window_refund_lands_while_its_window_is_open() {
    let clock = ManualClock::starting_at(0);
    let window = AtomicLimiter::with_clock(
        FixedWindow::aligned(10, Duration::from_secs(1)).unwrap(),
        clock.clone(),
    );
    let first = window.take(1, 4, u64::MAX).unwrap();
    assert!(window.try_acquire(3).unwrap().is_allowed());
    assert!(
        window.give_back(&first, 3),
        "the same window: as if it had been of 1"
    );
    assert_eq!(window.available(), 6);
    let second = window.take(1, 4, u64::MAX).unwrap();
    clock.advance(Duration::from_secs(1));
    assert!(!window.give_back(&second, 4), "its window has ended");
}

/// A sliding window's stripe leases, serves part of its lease, and replaces it (expired) within
/// the cell the lease was counted in, after another stripe wrote that cell: the unserved permits
/// go back to the cell, and the window then admits exactly its limit. Failed before the sliding
/// window took refunds: it admitted 86, the limit less the 7 unserved permits of each stripe's
/// first lease.
#[test]
fn a_sliding_window_stripe_gives_back_and_the_window_admits_exactly_its_limit() {
    const MS: u64 = 1_000_000;
    let clock = ManualClock::starting_at(0);
    let source =
        SlidingWindowLimiter::with_clock(100, Duration::from_secs(1), 4, clock.clone()).unwrap();
    // Leases of 8 (the first size) living the default 1 ms; the cells are 250 ms.
    let leased = PerCore::with_stripes(source, 2).unwrap();
    let mut admitted = 0u32;
    let mut take = |stripe: usize| {
        let allowed = leased.try_acquire_on(stripe, 1).unwrap().is_allowed();
        admitted += u32::from(allowed);
        allowed
    };
    assert!(take(0), "stripe 0 leases 8 and serves 1 of them");
    assert!(take(1), "stripe 1 leases 8 in the same cell after it");
    clock.advance(Duration::from_nanos(2 * MS)); // both leases expire with 7 unserved
    assert!(
        take(0),
        "stripe 0 gives 7 back and leases again, in the same cell"
    );
    // Drain the window on a still clock (nothing more expires; leases shrink near the limit).
    drain_taking_turns(&mut take);
    assert!(clock.now_nanos() < 250 * MS, "all in one cell");
    assert_eq!(admitted, 100, "the window admits exactly its limit");
}

/// A sliding window takes a lease's refund while the cell the lease was counted in is open
/// (whatever was counted in it since, and after the cell's time has passed if nobody has crossed
/// past it yet), as if the lease had been smaller. Once a crossing has sealed the cell (its count
/// is then in the published sums), or its slot holds a later cell, the refund is refused and
/// changes nothing.
#[test]
fn a_sliding_window_refund_lands_only_while_its_cell_is_open() {
    const MS: u64 = 1_000_000;
    // 10 per second in 4 cells of 250 ms: a ring of 8 slots (4 cells + 1 future, rounded up).
    let fresh = || {
        let clock = ManualClock::starting_at(0);
        let window =
            SlidingWindowLimiter::with_clock(10, Duration::from_secs(1), 4, clock.clone()).unwrap();
        (clock, window)
    };
    let remaining =
        |window: &SlidingWindowLimiter<ManualClock>| window.peek(1).unwrap().remaining();

    // The lease's cell, written since: lands, as if the lease had been of 1.
    let (_clock, window) = fresh();
    let lease = window.take(1, 4, u64::MAX).unwrap();
    assert_eq!(lease.granted(), 4);
    assert!(window.try_acquire(3).unwrap().is_allowed());
    assert!(window.give_back(&lease, 3), "the lease's cell, open");
    assert_eq!(remaining(&window), 10 - 1 - 3 - 1);
    assert!(!window.give_back(&lease, 0), "nothing to give back");

    // The cell's time has passed, but nobody crossed past it: still open, lands.
    let (clock, window) = fresh();
    let lease = window.take(1, 4, u64::MAX).unwrap();
    clock.set(300 * MS);
    assert!(window.give_back(&lease, 3), "cell 0 is not sealed yet");
    assert_eq!(remaining(&window), 10 - 1 - 1);

    // Sealed by a crossing into the next cell: refused, and the window is unchanged.
    let (clock, window) = fresh();
    let lease = window.take(1, 4, u64::MAX).unwrap();
    clock.set(300 * MS);
    assert!(window.try_acquire(1).unwrap().is_allowed()); // crosses into cell 1, seals cell 0
    let before = window.peek(1).unwrap();
    assert!(!window.give_back(&lease, 3), "cell 0 is sealed");
    assert_eq!(window.peek(1).unwrap(), before);
    let more = (0..10)
        .filter(|_| window.try_acquire(1).unwrap().is_allowed())
        .count();
    assert_eq!(more, 10 - 4 - 1, "the lease's 4 stay counted");

    // The lease's slot reused by a later cell (8 cells on: the same slot, the next round), not
    // sealed: refused, and that cell keeps its count.
    let (clock, window) = fresh();
    let lease = window.take(1, 4, u64::MAX).unwrap();
    clock.set(8 * 250 * MS);
    assert!(window.try_acquire(5).unwrap().is_allowed());
    let before = window.peek(1).unwrap();
    assert!(!window.give_back(&lease, 3), "the slot holds cell 8");
    assert_eq!(window.peek(1).unwrap(), before);
    assert_eq!(before.remaining(), 10 - 5 - 1);

    // More than the lease granted, or a denial's lease: refused.
    let (_clock, window) = fresh();
    let lease = window.take(1, 4, u64::MAX).unwrap();
    assert!(!window.give_back(&lease, 5));
    let denied = window.take(7, 7, u64::MAX).unwrap();
    assert_eq!(denied.granted(), 0);
    assert!(!window.give_back(&denied, 1));
    assert_eq!(remaining(&window), 10 - 4 - 1);
}

/// A slot's round tag wraps: 2^39 rounds of an 8-slot ring (2^42 cells of 1 ns, about 73 minutes)
/// after a lease, the lease's slot holds the same tag for another cell. A refund that late is
/// refused: it would take permits out of a count the lease was never part of.
#[test]
fn a_sliding_window_refund_is_refused_once_its_slot_tag_can_have_wrapped() {
    // 4 cells of 1 ns plus 1 future cell: 8 slots.
    let clock = ManualClock::starting_at(0);
    let window =
        SlidingWindowLimiter::with_clock(10, Duration::from_nanos(4), 4, clock.clone()).unwrap();
    let lease = window.take(1, 4, u64::MAX).unwrap();
    assert_eq!(lease.granted(), 4);
    clock.set(8); // cell 8: slot 0, the next round (the old count is reset)
    assert!(window.try_acquire(1).unwrap().is_allowed());
    clock.set(1 << 42); // cell 2^42: slot 0, round 2^39, whose 39-bit tag is cell 0's
    assert!(window.try_acquire(5).unwrap().is_allowed());
    let before = window.peek(1).unwrap();
    assert_eq!(before.remaining(), 10 - 5 - 1);
    assert!(!window.give_back(&lease, 3), "the tag may have wrapped");
    assert_eq!(window.peek(1).unwrap(), before);
}

/// A leaping clock's crossing overwrites the lease's slot (the leaped window's seal), and the
/// rewind that follows re-opens the lease's cell afresh: the same index and round tag, open, but
/// counting only what was admitted after the rewind (the lease's permits are among what the leap
/// forgot). A refund there took the lease's unused permits out of those later admissions: the
/// window then admitted 4 more than its limit in the cell. Found by review: the refund is refused
/// once the ring has been rewound since the lease.
#[test]
fn a_sliding_window_refund_is_refused_after_a_leap_and_rewind_reopened_its_cell() {
    const MS: u64 = 1_000_000;
    // 10 per second in 4 cells of 250 ms: 8 slots; the lag horizon is 40 cells (10 s).
    let clock = ManualClock::starting_at(0);
    let window =
        SlidingWindowLimiter::with_clock(10, Duration::from_secs(1), 4, clock.clone()).unwrap();
    let lease = window.take(1, 4, u64::MAX).unwrap(); // counted in cell 0 (slot 0)
    assert_eq!(lease.granted(), 4);
    // A leap to cell 801: its crossing seals cell 800 (slot 0), resetting cell 0's count.
    clock.set(801 * 250 * MS);
    assert!(window.try_acquire(1).unwrap().is_allowed());
    // Back in cell 0: the ring is rewound to it and cell 0 re-opened, empty; 4 admitted in it.
    clock.set(100 * MS);
    assert!(window.try_acquire(4).unwrap().is_allowed());
    assert_eq!(window.peek(1).unwrap().remaining(), 10 - 4 - 1);
    assert!(
        !window.give_back(&lease, 4),
        "cell 0 was re-opened by a rewind: its count is not the lease's"
    );
    assert_eq!(window.peek(1).unwrap().remaining(), 10 - 4 - 1);
    let more = (0..10)
        .filter(|_| window.try_acquire(1).unwrap().is_allowed())
        .count();
    assert_eq!(more, 10 - 4, "the cell admits its limit, no more");
}

/// A stripe's allowed decision never reports more permits remaining than the limit in force.
/// After the source's limit is lowered, a stripe still serves the lease it holds (as the module
/// docs say), but its decisions added what the source reported at the lease, before the change:
/// `remaining: 987` of a `limit: 10` (a header `RateLimit-Remaining: 987` on a limit of 10).
/// Found by QA.
#[test]
fn a_stripe_never_reports_more_remaining_than_the_limit_in_force() {
    fn check<S: LeaseSource>(per_core: PerCore<S>) {
        let first = per_core.try_acquire_on(0, 1).unwrap();
        assert!(
            first.is_allowed() && first.remaining() <= 1_000,
            "{first:?}"
        );
        per_core.set_limit(10).unwrap();
        // The clock stands still: the held lease is live and serves these.
        for _ in 0..3 {
            let d = per_core.try_acquire_on(0, 1).unwrap();
            assert!(d.is_allowed(), "{d:?}");
            assert_eq!(d.limit(), 10);
            assert!(d.remaining() <= d.limit(), "{d:?}");
        }
    }
    let clock = ManualClock::starting_at(1_000_000_000);
    let gcra = AtomicLimiter::with_clock(
        Gcra::new(Rate::per_second(1_000), 1_000).unwrap(),
        clock.clone(),
    );
    check(PerCore::with_stripes(gcra, 1).unwrap());
    let window = AtomicLimiter::with_clock(
        FixedWindow::aligned(1_000, Duration::from_secs(1)).unwrap(),
        clock.clone(),
    );
    check(PerCore::with_stripes(window, 1).unwrap());
    let sliding =
        SlidingWindowLimiter::with_clock(1_000, Duration::from_secs(1), 4, clock.clone()).unwrap();
    check(PerCore::with_stripes(sliding, 1).unwrap());
}

/// A lease lifetime of zero or beyond `u64` nanoseconds is refused with an error that names the
/// lifetime and its range: it said "window or period must be longer than zero" and "duration
/// overflows u64 nanoseconds arithmetic", naming neither. Found by QA.
#[test]
fn a_bad_lease_lifetime_names_the_lifetime_and_its_range() {
    let clock = ManualClock::new();
    for lifetime in [Duration::ZERO, Duration::MAX] {
        let error = PerCore::with_stripes(bucket(Gcra::new, &clock), 1)
            .unwrap()
            .with_lifetime(lifetime)
            .unwrap_err();
        assert_eq!(
            error,
            ConfigError::DurationOutOfRange {
                what: "lease lifetime",
                value: lifetime,
                min: Duration::from_nanos(1),
                max: Duration::from_nanos(u64::MAX),
            }
        );
        let text = error.to_string();
        assert!(
            text.starts_with("lease lifetime must be within 1ns..="),
            "{text}"
        );
    }
}

/// A lease is served up to the last nanosecond before its expiry and not at it: its lifetime's
/// end, or its window's end, whichever comes first. Served from the lease, a request leaves the
/// source alone; at the expiry the stripe goes back to the source.
#[test]
fn a_lease_is_served_until_the_nanosecond_before_its_expiry() {
    const WINDOW: u64 = 1_000_000;
    for (lifetime, start) in [(1_000, 0), (u64::MAX, WINDOW - 1_000)] {
        let clock = ManualClock::starting_at(10 * WINDOW + start);
        let source = AtomicLimiter::with_clock(
            FixedWindow::aligned(100, Duration::from_nanos(WINDOW)).unwrap(),
            clock.clone(),
        );
        let per_core = PerCore::with_stripes(source, 1)
            .unwrap()
            .with_max_lease(8)
            .unwrap()
            .with_lifetime(Duration::from_nanos(lifetime))
            .unwrap();
        assert!(per_core.try_acquire_on(0, 1).unwrap().is_allowed());
        let lease = per_core.source().available();
        assert!(
            lease < 99,
            "a lease of more than one permit ({})",
            100 - lease
        );
        clock.advance(Duration::from_nanos(999));
        assert!(per_core.try_acquire_on(0, 1).unwrap().is_allowed());
        assert_eq!(
            per_core.source().available(),
            lease,
            "served from the lease, 1 ns before its expiry (lifetime {lifetime})"
        );
        clock.advance(Duration::from_nanos(1));
        assert!(per_core.try_acquire_on(0, 1).unwrap().is_allowed());
        assert_ne!(
            per_core.source().available(),
            lease,
            "at its expiry the lease is not served (lifetime {lifetime})"
        );
    }
}

/// A source `S` whose `take` is `F` (given the source and `take`'s arguments); the rest is the
/// source's own: for sources that misbehave on purpose.
struct Wrapped<S, F>(S, F);

impl<S, F> LeaseSource for Wrapped<S, F>
where
    S: LeaseSource,
    F: Fn(&S, u32, u32, u64) -> Result<floodgate::lease::Lease, AcquireError> + Send + Sync,
{
    fn take(
        &self,
        min: u32,
        max: u32,
        lifetime_nanos: u64,
    ) -> Result<floodgate::lease::Lease, AcquireError> {
        (self.1)(&self.0, min, max, lifetime_nanos)
    }
    fn take_exact(&self, n: u32) -> Result<floodgate::Decision, AcquireError> {
        self.0.take_exact(n)
    }
    fn give_back(&self, lease: &floodgate::lease::Lease, unused: u32) -> bool {
        self.0.give_back(lease, unused)
    }
    fn clock(&self) -> &dyn Clock {
        self.0.clock()
    }
    fn limit(&self) -> u64 {
        self.0.limit()
    }
    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        self.0.set_limit(limit)
    }
}

/// A source whose limit is lowered (by another thread, here by the source itself) right after
/// it granted a lease: the stripe's decision for that lease reports at most the limit in force
/// when it returns, as its later serves do. The lowering lands between the grant and the
/// decision, where a concurrent `set_limit` can.
#[test]
fn a_lease_granted_just_before_a_lowered_limit_reports_at_most_the_new_limit() {
    let clock = ManualClock::starting_at(1_000_000_000);
    let window = AtomicLimiter::with_clock(
        FixedWindow::aligned(1_000, Duration::from_secs(1)).unwrap(),
        clock.clone(),
    );
    let per_core = PerCore::with_stripes(
        Wrapped(
            window,
            |source: &AtomicLimiter<FixedWindow, ManualClock>, min, max, life| {
                let lease = source.take(min, max, life)?;
                LeaseSource::set_limit(source, 10).unwrap();
                Ok(lease)
            },
        ),
        1,
    )
    .unwrap();
    let d = per_core.try_acquire_on(0, 1).unwrap();
    assert!(d.is_allowed(), "{d:?}");
    assert_eq!(d.limit(), 10);
    assert!(d.remaining() <= d.limit(), "{d:?}");
}

/// A `LeaseSource` that breaks `take`'s contract, granting fewer than `min` (here one permit
/// whatever is asked, taken for real; its `take_exact` is the window's own): a stripe never serves from such a lease (it computed
/// `granted − n`, which panicked in debug builds and wrapped to about 2^32 permits in release).
/// The short grant is given back and the source decides the request alone, so the count stays
/// exact.
#[test]
fn a_source_granting_fewer_than_asked_is_not_served_from() {
    let clock = ManualClock::starting_at(1_000_000_000);
    let window = AtomicLimiter::with_clock(
        FixedWindow::aligned(10, Duration::from_secs(1)).unwrap(),
        clock.clone(),
    );
    let per_core = PerCore::with_stripes(
        Wrapped(
            window,
            |source: &AtomicLimiter<FixedWindow, ManualClock>, _, _, life| source.take(1, 1, life),
        ),
        1,
    )
    .unwrap();
    let mut admitted = 0;
    for _ in 0..10 {
        let d = per_core.try_acquire_on(0, 3).unwrap();
        assert!(d.remaining() <= 10, "{d:?}");
        admitted += if d.is_allowed() { 3 } else { 0 };
    }
    assert_eq!(admitted, 9, "three requests for 3 fit a window of 10");
    assert_eq!(per_core.source().0.available(), 1);
}

/// Near the limit a stripe without permits asks the source for the request alone, without a
/// lease: exactly when the budget the source last reported is below `(n + 1) × 2 × stripes`
/// (a lease would then be of `n` anyway). Pins the threshold at its boundary, for 4 stripes
/// (8 shares) and `n = 1` (16): a window of 17 leaves 15 after the first lease (of
/// `⌊17 / 8⌋ = 2`), below 16, so the third call is the source's own; a window of 18 leaves 16,
/// so the third call takes a second lease (of `⌊16 / 8⌋ = 2`: one permit held by the stripe).
#[test]
fn a_stripe_asks_the_source_alone_exactly_below_its_share_of_the_budget() {
    use std::sync::atomic::{AtomicU32, Ordering};
    for (limit, leases, available) in [(17, 1, 14), (18, 2, 14)] {
        let clock = ManualClock::starting_at(1_000_000_000);
        let window = AtomicLimiter::with_clock(
            FixedWindow::aligned(limit, Duration::from_secs(1)).unwrap(),
            clock.clone(),
        );
        let takes = AtomicU32::new(0);
        let per_core = PerCore::with_stripes(
            Wrapped(
                window,
                |source: &AtomicLimiter<FixedWindow, ManualClock>, min, max, life| {
                    takes.fetch_add(1, Ordering::Relaxed);
                    source.take(min, max, life)
                },
            ),
            4,
        )
        .unwrap();
        for _ in 0..3 {
            assert!(per_core.try_acquire_on(0, 1).unwrap().is_allowed());
        }
        assert_eq!(
            takes.load(Ordering::Relaxed),
            leases,
            "window of {limit}: leases taken in three calls"
        );
        assert_eq!(
            per_core.source().0.available(),
            available,
            "window of {limit}"
        );
    }
}
