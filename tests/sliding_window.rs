//! Sliding window, packed sliding window and rolling counter on a ManualClock: the edge burst,
//! sweeps that never run or run late, clock jumps, tag wrap, bad input, and real-thread stress.

#[path = "support/gated_clock.rs"]
mod gated_clock;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use floodgate::clock::MAX_CLOCK_LAG_NANOS;
use floodgate::stats::RollingCounter;
use floodgate::{
    AcquireError, AtomicLimiter, Clock, ConfigError, Decision, FixedWindow, Limiter, Maintenance,
    ManualClock, PackedSlidingWindow, SlidingWindow, SlidingWindowLimiter,
};
use gated_clock::GatedClock;

const SECOND: u64 = 1_000_000_000;

fn sliding(
    limit: u32,
    window: Duration,
    cells: u32,
    clock: &ManualClock,
) -> SlidingWindowLimiter<ManualClock> {
    SlidingWindowLimiter::with_clock(limit, window, cells, clock.clone()).unwrap()
}

#[test]
fn edge_burst_that_a_fixed_window_admits_is_refused() {
    let minute = Duration::from_secs(60);
    let clock = ManualClock::new();
    let fixed =
        AtomicLimiter::with_clock(FixedWindow::aligned(100, minute).unwrap(), clock.clone());
    let ring = sliding(100, minute, 60, &clock);
    let packed = AtomicLimiter::with_clock(
        PackedSlidingWindow::new(100, minute, 4).unwrap(),
        clock.clone(),
    );
    clock.set(59 * SECOND); // 0:59
    for limiter in [&fixed as &dyn Limiter, &ring, &packed] {
        assert!(limiter.try_acquire(100).unwrap().is_allowed());
    }
    clock.set(60 * SECOND); // 1:00
    assert!(
        fixed.try_acquire(100).unwrap().is_allowed(),
        "2 × limit within one second"
    );
    let denied = ring.try_acquire(1).unwrap();
    assert_eq!(denied, Decision::deny(100, 0, 59 * SECOND, 59 * SECOND));
    let denied = packed.try_acquire(1).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Duration::from_secs(45)); // the 45–60 s cell leaves at 1:45
    // The whole 59 s before the 0:59 cell leaves the window stay refused; then the limit is back.
    clock.set(118 * SECOND + 999_999_999);
    assert!(!ring.try_acquire(1).unwrap().is_allowed());
    clock.set(119 * SECOND);
    assert_eq!(
        ring.try_acquire(100).unwrap(),
        Decision::allow(100, 0, 60 * SECOND)
    );
}

/// A tiny deterministic generator, so schedules are reproducible without a seed dependency.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below
    }
}

#[test]
fn sweep_never_run_or_ten_windows_late_changes_no_decision() {
    let window = Duration::from_secs(10); // 10 cells of 1 s
    let clocks: Vec<ManualClock> = (0..3).map(|_| ManualClock::new()).collect();
    let limiters: Vec<_> = clocks
        .iter()
        .map(|c| sliding(7, window, 10, c).with_future_cells(3).unwrap())
        .collect();
    let counters: Vec<_> = clocks
        .iter()
        .map(|c| RollingCounter::with_clock(window, 10, 2, c.clone()).unwrap())
        .collect();
    let mut rng = Lcg(7);
    let mut now = 0;
    for step in 0..5_000u64 {
        now += rng.next(SECOND / 2);
        for clock in &clocks {
            clock.set(now);
        }
        // 0: swept before every call. 1: never swept. 2: swept only every 10 windows, and
        // otherwise only by a sweep 10 windows behind the clock.
        limiters[0].sweep();
        counters[0].sweep();
        if step % 200 == 0 {
            limiters[2].sweep();
            counters[2].sweep();
        } else {
            limiters[2].sweep_at(now.saturating_sub(10 * 10 * SECOND));
            counters[2].sweep_at(now.saturating_sub(10 * 10 * SECOND));
        }
        let n = 1 + rng.next(3) as u32;
        let decisions: Vec<_> = limiters.iter().map(|l| l.try_acquire(n).unwrap()).collect();
        assert_eq!(decisions[0], decisions[1], "step {step}");
        assert_eq!(decisions[0], decisions[2], "step {step}");
        let series = rng.next(2) as usize;
        let sums: Vec<_> = counters
            .iter()
            .map(|c| {
                c.add(series, n).unwrap();
                (c.sum(0).unwrap(), c.sum(1).unwrap())
            })
            .collect();
        assert_eq!(sums[0], sums[1], "step {step}");
        assert_eq!(sums[0], sums[2], "step {step}");
    }
}

#[test]
fn clock_jump_by_a_thousand_windows() {
    let clock = ManualClock::starting_at(5 * SECOND);
    let ring = sliding(10, Duration::from_secs(6), 3, &clock);
    let packed = AtomicLimiter::with_clock(
        PackedSlidingWindow::new(10, Duration::from_secs(6), 3).unwrap(),
        clock.clone(),
    );
    let counter = RollingCounter::with_clock(Duration::from_secs(6), 3, 1, clock.clone()).unwrap();
    for limiter in [&ring as &dyn Limiter, &packed] {
        assert!(limiter.try_acquire(10).unwrap().is_allowed());
    }
    counter.add(0, 10).unwrap();
    clock.advance(Duration::from_secs(6 * 1_000) + Duration::from_millis(500));
    for limiter in [&ring as &dyn Limiter, &packed] {
        assert_eq!(
            limiter.try_acquire(4).unwrap(),
            Decision::allow(10, 6, 4 * SECOND + SECOND / 2)
        );
    }
    assert_eq!(counter.sum(0).unwrap(), 0);
    // Every cell of the new window counts; the first leaves exactly one window later.
    for _ in 0..2 {
        clock.advance(Duration::from_secs(2));
        for limiter in [&ring as &dyn Limiter, &packed] {
            assert!(limiter.try_acquire(3).unwrap().is_allowed());
        }
        counter.add(0, 3).unwrap();
    }
    assert_eq!(counter.sum(0).unwrap(), 6);
    for limiter in [&ring as &dyn Limiter, &packed] {
        let d = limiter.try_acquire(1).unwrap();
        assert_eq!(
            (d.is_allowed(), d.retry_after()),
            (false, Duration::from_millis(500))
        );
    }
    clock.advance(Duration::from_millis(500));
    for limiter in [&ring as &dyn Limiter, &packed] {
        assert_eq!(limiter.try_acquire(4).unwrap().remaining(), 0);
    }
}

#[test]
fn a_lagging_clock_read_is_decided_in_the_newest_cell() {
    let clock = ManualClock::new();
    let ring = sliding(4, Duration::from_secs(4), 4, &clock);
    let packed = AtomicLimiter::with_clock(
        PackedSlidingWindow::new(4, Duration::from_secs(4), 4).unwrap(),
        clock.clone(),
    );
    clock.set(5 * SECOND);
    for limiter in [&ring as &dyn Limiter, &packed] {
        assert!(limiter.try_acquire(1).unwrap().is_allowed());
    }
    clock.set(SECOND); // a read four cells behind
    for limiter in [&ring as &dyn Limiter, &packed] {
        let d = limiter.try_acquire(3).unwrap();
        // Counted in cell 5, so the reset is measured from 1 s to cell 9 (9 s).
        assert_eq!(d, Decision::allow(4, 0, 8 * SECOND));
    }
    clock.set(8 * SECOND);
    assert!(
        !ring.try_acquire(1).unwrap().is_allowed(),
        "cell 5 is still in the window"
    );
    assert!(!packed.try_acquire(1).unwrap().is_allowed());
    clock.set(9 * SECOND);
    assert!(ring.try_acquire(4).unwrap().is_allowed());
    assert!(packed.try_acquire(4).unwrap().is_allowed());
}

#[test]
fn a_packed_state_idle_into_the_ahead_half_of_its_tag_holds_at_most_the_horizon_and_a_window() {
    // 4 cells of 1 ms: a 32-bit tag. From 2^31 cells (25 days) of idleness on, the old tag reads
    // as ahead of the clock. Within the lag horizon (10 s = 10,000 cells) it is taken for a
    // later clock read; beyond it, for a leaping clock's state, whose counts are folded into the
    // current cell. Either way the old counts hold for at most the horizon plus one window, and
    // the request is then decided afresh.
    const MS: u64 = 1_000_000;
    let horizon_and_window = Duration::from_nanos(floodgate::clock::MAX_CLOCK_LAG_NANOS + 4 * MS);
    for idle_cells in [1 << 31, (1 << 31) + 5, (1 << 32) - 5] {
        let clock = ManualClock::new();
        let packed = AtomicLimiter::with_clock(
            PackedSlidingWindow::new(4, Duration::from_millis(4), 4).unwrap(),
            clock.clone(),
        );
        assert!(packed.try_acquire(4).unwrap().is_allowed());
        assert!(!packed.try_acquire(1).unwrap().is_allowed());
        clock.advance(Duration::from_nanos(idle_cells * MS));
        let mut d = packed.try_acquire(4).unwrap();
        if !d.is_allowed() {
            assert!(
                d.retry_after() <= horizon_and_window,
                "idle for {idle_cells} cells: {d:?}"
            );
            clock.advance(d.retry_after());
            d = packed.try_acquire(4).unwrap();
        }
        assert_eq!(
            d,
            Decision::allow(4, 0, 4 * MS),
            "idle for {idle_cells} cells"
        );
        assert!(!packed.try_acquire(1).unwrap().is_allowed());
    }
}

/// The model of the window the ring keeps: counts per cell, admit iff the window plus n fits.
fn model_decide(
    counts: &mut BTreeMap<u64, u64>,
    cells: u64,
    cell_nanos: u64,
    limit: u64,
    now: u64,
    n: u64,
) -> Decision {
    let cell = now / cell_nanos;
    let start = cell.saturating_sub(cells - 1);
    let used: u64 = counts.range(start..=cell).map(|(_, c)| c).sum();
    if used + n <= limit {
        *counts.entry(cell).or_default() += n;
        let reset = (cell.saturating_add(cells)).saturating_mul(cell_nanos) - now;
        return Decision::allow(limit, limit - used - n, reset);
    }
    let mut freed = 0;
    let mut retry = cell.saturating_add(cells);
    for (&i, &c) in counts.range(start..=cell) {
        freed += c;
        if freed >= used + n - limit {
            retry = i.saturating_add(cells);
            break;
        }
    }
    let reset = counts
        .range(start..=cell)
        .filter(|(_, c)| **c > 0)
        .map(|(i, _)| i.saturating_add(cells).saturating_mul(cell_nanos) - now)
        .max()
        .unwrap_or(0);
    Decision::deny(
        limit,
        limit - used,
        retry.saturating_mul(cell_nanos) - now,
        reset,
    )
}

/// Runs a schedule across `start` and compares the ring with the model at every step.
fn ring_matches_model_from(start: u64, cells: u32, future: u32) {
    let clock = ManualClock::starting_at(start);
    let ring = sliding(5, Duration::from_nanos(u64::from(cells)), cells, &clock)
        .with_future_cells(future)
        .unwrap();
    let mut counts = BTreeMap::new();
    let mut rng = Lcg(start);
    for step in 0..400 {
        clock.advance_nanos(rng.next(3));
        let n = 1 + rng.next(3);
        let now = clock.now_nanos();
        let want = model_decide(&mut counts, u64::from(cells), 1, 5, now, n);
        assert_eq!(
            ring.try_acquire(n as u32).unwrap(),
            want,
            "step {step} at {now}"
        );
    }
}

/// A burst denial (the call's own cell holds the limit) in the last cells of the `u64` timeline,
/// where its cell leaves the window past the end of it: both waits are exact, computed past
/// the end (in `u128`), as a denial earlier in the timeline computes them.
#[test]
fn a_burst_denial_whose_window_ends_past_the_timeline_waits_exactly() {
    for cells in [1u32, 4, 60] {
        // In the last (partial) cell, in the whole cell before it, and two cells earlier.
        for back in [1, SECOND / 2, SECOND + 5, 2 * SECOND + 3] {
            let now = u64::MAX - back;
            let window = Duration::from_secs(u64::from(cells));
            let ring =
                SlidingWindowLimiter::with_clock(2, window, cells, ManualClock::starting_at(now))
                    .unwrap();
            assert!(ring.try_acquire(2).unwrap().is_allowed());
            let denied = ring.try_acquire(1).unwrap();
            let leaves = (u128::from(now / SECOND) + u128::from(cells)) * u128::from(SECOND)
                - u128::from(now);
            let leaves = Duration::from_nanos(u64::try_from(leaves).unwrap_or(u64::MAX));
            assert_eq!(
                (
                    denied.is_allowed(),
                    denied.retry_after(),
                    denied.reset_after()
                ),
                (false, leaves, leaves),
                "{cells} cells, {back} ns before the end"
            );
        }
    }
}

#[test]
fn epoch_tags_wrap() {
    // Cells of 1 ns, so the 39-bit round tag (index / slots) and the 40-bit base tag wrap at
    // reachable times.
    for (cells, future) in [(2, 1), (3, 2), (4, 4)] {
        // The ring's slots: `cells + future` rounded up to a power of two.
        let slots = u64::from(cells + future).next_power_of_two();
        ring_matches_model_from(slots * (1 << 39) - 300, cells, future);
        ring_matches_model_from((1 << 40) - 300, cells, future);
        ring_matches_model_from(u64::MAX - 900, cells, future); // the end of the timeline
    }
    // The counter's 28-bit round, and the packed word's tag (32 bits for 4 cells).
    let slots: u64 = 4 + 1;
    let clock = ManualClock::starting_at(slots * (1 << 28) - 40);
    let counter = RollingCounter::with_clock(Duration::from_nanos(4), 4, 1, clock.clone()).unwrap();
    let packed = AtomicLimiter::with_clock(
        PackedSlidingWindow::new(3, Duration::from_nanos(4), 4).unwrap(),
        ManualClock::starting_at((1 << 32) - 40),
    );
    let mut counts = BTreeMap::new();
    let mut packed_counts = BTreeMap::new();
    for step in 0..80 {
        let now = clock.now_nanos();
        counter.add(0, 1).unwrap();
        *counts.entry(now).or_insert(0) += 1;
        let in_window: u64 = counts
            .range(now.saturating_sub(3)..=now)
            .map(|(_, c)| c)
            .sum();
        assert_eq!(counter.sum(0).unwrap(), in_window, "step {step}");
        let packed_now = packed.clock().now_nanos();
        let want = model_decide(&mut packed_counts, 4, 1, 3, packed_now, 1);
        assert_eq!(packed.try_acquire(1).unwrap(), want, "step {step}");
        clock.advance_nanos(1);
        packed.clock().sleep(Duration::from_nanos(1));
    }
}

#[test]
fn a_slot_aliased_by_a_full_tag_cycle_only_denies_more() {
    // 2 cells + 1 future in a ring of 4 slots (3 rounded up to a power of two) of 1 ns: slot
    // 0's round repeats after 4 × 2^39 cells.
    let clock = ManualClock::new();
    let ring = sliding(3, Duration::from_nanos(2), 2, &clock)
        .with_future_cells(1)
        .unwrap();
    assert!(ring.try_acquire(3).unwrap().is_allowed());
    clock.set(4 * (1 << 39));
    // The untouched slot reads as current with its old count: a false denial, not an admission.
    assert!(!ring.try_acquire(1).unwrap().is_allowed());
    clock.advance_nanos(2);
    assert!(
        ring.try_acquire(3).unwrap().is_allowed(),
        "one window later it is gone"
    );
}

#[test]
fn bad_input_is_an_error() {
    let clock = ManualClock::new();
    let ring = sliding(3, Duration::from_secs(1), 2, &clock);
    let capacity = AcquireError::ExceedsCapacity {
        requested: 4,
        capacity: 3,
    };
    assert_eq!(ring.try_acquire(4).unwrap_err(), capacity);
    assert_eq!(ring.acquire(4).unwrap_err(), capacity);
    assert_eq!(ring.try_acquire(0).unwrap_err(), AcquireError::ZeroPermits);
    assert_eq!(ring.peek(4).unwrap_err(), capacity);
    let packed = AtomicLimiter::with_clock(
        PackedSlidingWindow::new(3, Duration::from_secs(1), 2).unwrap(),
        clock.clone(),
    );
    assert_eq!(packed.try_acquire(4).unwrap_err(), capacity);
    let s = Duration::from_secs(1);
    assert_eq!(
        SlidingWindow::new(0, s, 2).unwrap_err(),
        ConfigError::ZeroLimit
    );
    assert_eq!(
        SlidingWindow::new(1 << 24, s, 2).unwrap_err(),
        ConfigError::LimitTooLarge {
            limit: 1 << 24,
            max: (1 << 24) - 1
        }
    );
    assert_eq!(
        SlidingWindow::new(1, Duration::ZERO, 2).unwrap_err(),
        ConfigError::ZeroPeriod
    );
    assert!(matches!(
        SlidingWindow::new(1, s, 0),
        Err(ConfigError::Invalid { .. })
    ));
    assert_eq!(
        SlidingWindow::new(1, Duration::from_nanos(5), 2).unwrap_err(),
        ConfigError::Indivisible {
            window: Duration::from_nanos(5),
            cells: 2
        }
    );
    assert!(matches!(
        SlidingWindow::new(1, s, 8).unwrap().with_future_cells(0),
        Err(ConfigError::Invalid { .. })
    ));
    assert!(matches!(
        PackedSlidingWindow::new(1, s, 1),
        Err(ConfigError::Invalid { .. })
    ));
    assert!(matches!(
        PackedSlidingWindow::new(1, s, 9),
        Err(ConfigError::Invalid { .. })
    ));
    assert_eq!(
        PackedSlidingWindow::new(64, s, 5).unwrap_err(),
        ConfigError::LimitTooLarge { limit: 64, max: 63 }
    );
    assert!(matches!(
        RollingCounter::new(s, 4, 0),
        Err(ConfigError::Invalid { .. })
    ));
    // set_limit keeps the old limit on error, and a raised limit applies at once.
    assert!(ring.set_limit(0).is_err());
    assert!(packed.set_limit(1 << 16).is_err());
    assert_eq!(ring.limit(), 3);
    ring.set_limit(5).unwrap();
    assert_eq!(ring.try_acquire(5).unwrap(), Decision::allow(5, 0, SECOND));
    let counter = RollingCounter::with_clock(s, 4, 2, clock).unwrap();
    assert!(counter.add(2, 1).is_err() && counter.sum(5).is_err() && counter.ratio(0, 2).is_err());
}

#[test]
fn acquire_sleeps_until_the_cell_leaves() {
    let clock = ManualClock::starting_at(SECOND / 2);
    let ring = sliding(2, Duration::from_secs(2), 2, &clock);
    assert_eq!(ring.acquire(2).unwrap(), Duration::ZERO);
    assert_eq!(ring.acquire(1).unwrap(), Duration::from_millis(1_500));
    assert_eq!(clock.take_sleeps(), vec![Duration::from_millis(1_500)]);
    assert!(
        !ring
            .try_acquire_for(2, Duration::from_millis(999))
            .unwrap()
            .is_allowed()
    );
    assert!(
        clock.sleeps().is_empty(),
        "a wait past the timeout is not taken"
    );
}

#[test]
fn maintenance_thread_starts_and_stops() {
    let clock = ManualClock::new();
    let ring = Arc::new(sliding(2, Duration::from_secs(2), 2, &clock));
    let counter =
        Arc::new(RollingCounter::with_clock(Duration::from_secs(2), 2, 1, clock.clone()).unwrap());
    let upkeep = Maintenance::start(ring.clone(), Duration::from_millis(1)).unwrap();
    let counter_upkeep = Maintenance::start(counter.clone(), Duration::from_millis(1)).unwrap();
    assert!(ring.try_acquire(2).unwrap().is_allowed());
    counter.add(0, 2).unwrap();
    clock.set(SECOND);
    assert!(!ring.try_acquire(1).unwrap().is_allowed());
    assert_eq!(counter.sum(0).unwrap(), 2);
    clock.set(3 * SECOND);
    assert!(ring.try_acquire(2).unwrap().is_allowed());
    assert_eq!(counter.sum(0).unwrap(), 0);
    assert!(upkeep.stop() >= 1);
    drop(counter_upkeep); // dropping stops and joins
    assert!(Maintenance::start(ring, Duration::ZERO).is_err());
}

const THREADS: usize = 8;

/// Each thread takes 1 permit at a time, `calls` times; returns the permits admitted.
fn hammer(limiter: &dyn Limiter, calls: usize) -> u64 {
    let admitted = AtomicU64::new(0);
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mine = (0..calls)
                    .filter(|_| limiter.try_acquire(1).unwrap().is_allowed())
                    .count();
                // Relaxed: read after the scope joins.
                admitted.fetch_add(mine as u64, Ordering::Relaxed);
            });
        }
    });
    admitted.into_inner()
}

#[test]
fn threads_fill_every_window_exactly_to_the_limit() {
    // Phases on a frozen clock; between phases the clock moves by 0.4–1.6 cells. With 1-permit
    // requests and enough demand, every phase admits exactly what the model has left: never
    // more (the bound), never less (no false denial from racing callers).
    let clock = ManualClock::new();
    let ring = sliding(1_000, Duration::from_secs(5), 5, &clock);
    let packed = AtomicLimiter::with_clock(
        PackedSlidingWindow::new(1_000, Duration::from_secs(6), 3).unwrap(),
        clock.clone(),
    );
    for (limiter, cells, cell_nanos) in
        [(&ring as &dyn Limiter, 5, SECOND), (&packed, 3, 2 * SECOND)]
    {
        clock.set(0);
        let mut counts = BTreeMap::new();
        let mut rng = Lcg(11);
        for phase in 0..30 {
            let now = clock.now_nanos();
            let cell = now / cell_nanos;
            let used: u64 = counts
                .range(cell.saturating_sub(cells - 1)..=cell)
                .map(|(_, c)| c)
                .sum();
            let admitted = hammer(limiter, 60);
            assert_eq!(
                admitted,
                (1_000 - used).min(THREADS as u64 * 60),
                "phase {phase}"
            );
            *counts.entry(cell).or_insert(0) += admitted;
            clock.advance_nanos(cell_nanos * 2 / 5 + rng.next(cell_nanos * 6 / 5));
        }
        // The bound over every aligned window, checked on the record.
        let last = *counts.keys().last().unwrap();
        for end in 0..=last {
            let sum: u64 = counts
                .range(end.saturating_sub(cells - 1)..=end)
                .map(|(_, c)| c)
                .sum();
            assert!(sum <= 1_000, "window ending at cell {end}: {sum}");
        }
    }
}

#[test]
fn threads_on_a_frozen_clock_admit_exactly_the_limit() {
    let clock = ManualClock::starting_at(987_654_321);
    let ring = sliding(20_000, Duration::from_secs(1), 10, &clock);
    assert_eq!(hammer(&ring, 5_000), 20_000);
    assert_eq!(ring.peek(1).unwrap().remaining(), 0);
    let counter = RollingCounter::with_clock(Duration::from_secs(1), 10, 2, clock).unwrap();
    thread::scope(|s| {
        for t in 0..THREADS {
            let counter = &counter;
            s.spawn(move || {
                for i in 0..10_000u32 {
                    counter.add((t + i as usize) % 2, 1 + i % 3).unwrap();
                }
            });
        }
    });
    let mut expected = [0u64; 2];
    for t in 0..THREADS {
        for i in 0..10_000u64 {
            expected[(t + i as usize) % 2] += 1 + i % 3;
        }
    }
    assert_eq!([counter.sum(0).unwrap(), counter.sum(1).unwrap()], expected);
}

// ---- Time: the ring's lag horizon (issue 14 items 3 and 9) ----
//
// With 1 s cells and 4 cells the horizon is max(4, ⌈10 s / 1 s⌉) = 10 cells: a head up to 10
// cells ahead of a caller's cell is a lagging read's; further ahead, on a fresh read, a leap's.

const DAY: u64 = 86_400 * SECOND;

/// A clock whose reads return `now`, and that runs a hook once, inside a chosen read: other
/// calls then land exactly between a caller's loads and its re-read of the clock.
#[derive(Clone, Default)]
struct HookClock {
    now: Arc<AtomicU64>,
    reads: Arc<AtomicU64>,
    hook: Arc<Mutex<Option<Hook>>>,
}

type Hook = (u64, Box<dyn FnOnce() + Send>);

impl HookClock {
    fn starting_at(nanos: u64) -> Self {
        let clock = Self::default();
        clock.now.store(nanos, Ordering::SeqCst);
        clock
    }

    /// Runs `hook` inside the read after the next `skip` reads.
    fn hook_read(&self, skip: u64, hook: impl FnOnce() + Send + 'static) {
        let at = self.reads.load(Ordering::SeqCst) + skip;
        *self.hook.lock().unwrap() = Some((at, Box::new(hook)));
    }
}

impl Clock for HookClock {
    fn now_nanos(&self) -> u64 {
        let read = self.reads.fetch_add(1, Ordering::SeqCst);
        let hook = {
            let mut hook = self.hook.lock().unwrap();
            if hook.as_ref().is_some_and(|(at, _)| *at == read) {
                hook.take()
            } else {
                None
            }
        };
        if let Some((_, hook)) = hook {
            hook();
        }
        self.now.load(Ordering::SeqCst)
    }

    fn sleep(&self, duration: Duration) {
        self.now
            .fetch_add(duration.as_nanos() as u64, Ordering::SeqCst);
    }
}

/// Item 3 on the ring: one clock read a day ahead raises head there. The next present-time
/// caller (its re-read confirms the leap) rewinds the ring to its own cell and is admitted: no
/// freeze at all. What the leap costs is what the ring forgets: the window's admissions before
/// the leap (the leaper's crossing resets the ring, as it would after a day of idleness) and the
/// leaped era's (the leaper's own request). Afterwards every window holds the limit again.
#[test]
fn a_one_day_leap_then_present_callers_are_admitted_and_the_bound_holds_after() {
    let clock = GatedClock::starting_at(100 * SECOND);
    let ring =
        SlidingWindowLimiter::with_clock(4, Duration::from_secs(4), 4, clock.clone()).unwrap();
    assert!(ring.try_acquire(2).unwrap().is_allowed()); // cell 100, before the leap
    clock.leap_next_read(DAY); // one read a day ahead
    assert!(ring.try_acquire(1).unwrap().is_allowed());
    clock.set(100 * SECOND + SECOND / 2);
    // Decided in the present cell 100: the window resets when cell 100 leaves, at 104 s.
    assert_eq!(
        ring.try_acquire(1).unwrap(),
        Decision::allow(4, 3, 3 * SECOND + SECOND / 2)
    );
    assert!(ring.try_acquire(3).unwrap().is_allowed());
    let denied = ring.try_acquire(1).unwrap();
    assert!(!denied.is_allowed());
    assert!(denied.retry_after() <= Duration::from_secs(4), "{denied:?}");
    // Admitted in cells 100–103 in real time: 2 + 1 + 4 = 7 = limit + what was forgotten. From
    // the rewind on, the ring's bound: any 4 consecutive cells hold at most 4.
    let mut per_cell = BTreeMap::from([(100, 4)]);
    let mut rng = Lcg(14);
    for _ in 0..2_000 {
        clock.advance(rng.next(SECOND / 3));
        let n = 1 + rng.next(2) as u32;
        if ring.try_acquire(n).unwrap().is_allowed() {
            *per_cell.entry(clock.now_nanos() / SECOND).or_default() += u64::from(n);
        }
    }
    let last = *per_cell.keys().last().unwrap();
    assert!(last > 200);
    for start in 97..=last {
        let span: u64 = per_cell.range(start..start + 4).map(|(_, c)| c).sum();
        assert!(span <= 4, "cells {start}..{}: {span}", start + 4);
    }
    // Given explicitly, a far-future `now` freezes nothing either (issue 14 item 9): a blocking
    // acquire at the present returns without waiting.
    assert!(
        ring.try_acquire_at(1, clock.now_nanos() + DAY)
            .unwrap()
            .is_allowed()
    );
    clock.advance(4 * SECOND);
    assert_eq!(ring.acquire(4).unwrap(), Duration::ZERO);
}

/// A lagging read within the horizon is decided in head's cell and never moves the ring back;
/// one cell beyond the horizon (a fresh read 11 cells behind head) is a leap's head.
#[test]
fn a_lagging_read_within_the_horizon_follows_head_and_never_moves_the_ring_back() {
    let clock = ManualClock::starting_at(105 * SECOND);
    let ring = sliding(4, Duration::from_secs(4), 4, &clock);
    assert!(ring.try_acquire(1).unwrap().is_allowed()); // head: cell 105
    clock.set(95 * SECOND + SECOND / 2); // cell 95: 10 cells behind, the horizon
    // Counted in cell 105: the reset is measured from 95.5 s to 109 s.
    assert_eq!(
        ring.try_acquire(2).unwrap(),
        Decision::allow(4, 1, 13 * SECOND + SECOND / 2)
    );
    let d = ring.try_acquire_at(2, 96 * SECOND).unwrap();
    assert_eq!(d, Decision::deny(4, 1, 13 * SECOND, 13 * SECOND));
    clock.set(105 * SECOND);
    assert_eq!(ring.peek(1).unwrap().remaining(), 0, "cell 105 holds 3");
    assert!(ring.try_acquire(1).unwrap().is_allowed());
    assert!(!ring.try_acquire(1).unwrap().is_allowed());
    // 11 cells behind on a fresh read: head is a leaping clock's, and the caller's cell is decided
    // afresh (the explicit `now` counts as fresh).
    let ring = sliding(4, Duration::from_secs(4), 4, &clock);
    assert!(ring.try_acquire_at(4, 105 * SECOND).unwrap().is_allowed());
    assert_eq!(
        ring.try_acquire_at(4, 94 * SECOND).unwrap(),
        Decision::allow(4, 0, 4 * SECOND)
    );
}

/// Item 1 on the ring: a thread held between its clock read and its loads for longer than the
/// horizon finds head far ahead of its read. It must not take that head for a leap (its re-read
/// is the present): it is decided in head's cell, and the full window stays full.
#[test]
fn a_held_reader_never_rewinds_the_ring() {
    let clock = GatedClock::starting_at(100 * SECOND + SECOND / 2);
    let ring = Arc::new(
        SlidingWindowLimiter::with_clock(4, Duration::from_secs(4), 4, clock.clone()).unwrap(),
    );
    clock.hold_next_read();
    let held = {
        let ring = ring.clone();
        thread::spawn(move || ring.try_acquire(1).unwrap())
    };
    clock.wait_until_held();
    clock.advance(2 * MAX_CLOCK_LAG_NANOS);
    assert!(ring.try_acquire(4).unwrap().is_allowed());
    clock.release();
    let stale = held.join().unwrap();
    assert!(
        !stale.is_allowed(),
        "the held reader re-opened the window: {stale:?}"
    );
    assert!(!ring.try_acquire(1).unwrap().is_allowed());
}

/// A rewind racing a caller that loaded the leaped head: between its load and its re-read of the
/// clock, another caller rewinds the ring and fills the present window. The racing caller's
/// rewind then fails, it sees head went back under it, re-reads its clock and is decided in the
/// present: denied, and the ring never leaps again. Then a stale explicit-time sequence: every
/// later present-time caller is decided in the present cell.
#[test]
fn a_rewind_racing_a_caller_that_loaded_the_leaped_head_never_re_leaps() {
    let present = 100 * SECOND + SECOND / 2;
    let clock = HookClock::starting_at(present);
    let ring = Arc::new(
        SlidingWindowLimiter::with_clock(4, Duration::from_secs(4), 4, clock.clone()).unwrap(),
    );
    assert!(ring.try_acquire_at(1, present + DAY).unwrap().is_allowed()); // the leap
    let other = ring.clone();
    // The racing caller's first read is its `now`; the hook runs inside its re-read.
    clock.hook_read(1, move || {
        let d = other.try_acquire_at(1, present).unwrap();
        assert_eq!(d, Decision::allow(4, 3, 3 * SECOND + SECOND / 2), "rewound");
        assert!(other.try_acquire_at(3, present).unwrap().is_allowed());
    });
    let racing = ring.try_acquire(1).unwrap();
    assert_eq!(
        racing,
        Decision::deny(4, 0, 3 * SECOND + SECOND / 2, 3 * SECOND + SECOND / 2)
    );
    // Head is the present cell: a clocked call reads the clock once (a leaped head would make it
    // read again to confirm the leap).
    let reads = clock.reads.load(Ordering::SeqCst);
    assert!(!ring.try_acquire(1).unwrap().is_allowed());
    assert_eq!(
        clock.reads.load(Ordering::SeqCst),
        reads + 1,
        "head leaped again"
    );
    clock.now.store(present + 4 * SECOND, Ordering::SeqCst);
    assert_eq!(
        ring.try_acquire(4).unwrap(),
        Decision::allow(4, 0, 3 * SECOND + SECOND / 2)
    );
}

/// Cells of 1 ns up to the last instant of the `u64` timeline, where a cell's index is the last
/// one and the denial's search through the marks has no index past it: every admission is the
/// model's, and nothing panics. Found by review: with 4 cells of 1 ns, a denial at `u64::MAX`
/// after an admission at `u64::MAX − 1` overflowed (`attempt to add with overflow` in the
/// marks' search, a debug build; a release build wraps the arithmetic instead).
#[test]
fn one_ns_cells_decide_as_the_model_up_to_the_last_instant() {
    for cells in [1u32, 2, 4, 8] {
        for limit in [1u64, 3] {
            let start = u64::MAX - 40;
            let clock = ManualClock::starting_at(start);
            let ring = sliding(
                limit as u32,
                Duration::from_nanos(u64::from(cells)),
                cells,
                &clock,
            );
            let mut counts = BTreeMap::new();
            let mut rng = Lcg(start ^ u64::from(cells));
            for step in 0..120 {
                let now = clock.now_nanos();
                let n = 1 + rng.next(limit);
                let want = model_decide(&mut counts, u64::from(cells), 1, limit, now, n);
                let peeked = ring.peek(n as u32).unwrap();
                let got = ring.try_acquire(n as u32).unwrap();
                assert_eq!(
                    (got.is_allowed(), peeked.is_allowed()),
                    (want.is_allowed(), want.is_allowed()),
                    "{cells} cells, limit {limit}, step {step} at MAX - {}",
                    u64::MAX - now
                );
                clock.set(now.saturating_add(rng.next(2)));
            }
            assert_eq!(clock.now_nanos(), u64::MAX, "the schedule reaches the end");
        }
    }
}
