//! `Sharded` near the end of time and across splits (issue 17's review of its cuts: the "all full" hint holding the window's index,
//! `NO_HINT = u64::MAX`, the last two windows sharing the mark `u64::MAX − 1`; one permit
//! skipping the share check): `Sharded` against `FixedWindow::aligned` as a model, on a manual
//! clock, over random sequences near the end of time, with 1 ns, short, cached (at least 2^20 ns)
//! and huge windows.
//!
//! Single-threaded and on a clock that only moves forward, `Sharded` must decide every request of
//! one permit exactly as `FixedWindow::aligned` with the same limit and window (it never denies a
//! one-permit request early, and never admits past the limit in a window); requests of more
//! permits may be denied early, but never admit past the limit in a window.

use std::collections::HashMap;
use std::time::Duration;

use floodgate::clock::MAX_CLOCK_LAG_NANOS;
use floodgate::{AtomicLimiter, FixedWindow, Limiter, ManualClock, Sharded};

/// A small deterministic generator (splitmix64): the same sequences on every run.
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// Runs one random sequence of requests on `Sharded` (limit, window, stripes) and on the model
/// `FixedWindow::aligned(limit, window)`, from `start`, with steps of at most `max_step` ns.
/// Returns how many requests were compared exactly (one permit) and how many windows the
/// sequence crossed, so the caller can check the sequence did what it meant to.
fn compare(
    seed: u64,
    limit: u32,
    window_nanos: u64,
    stripes: usize,
    start: u64,
    max_step: u64,
    calls: usize,
) -> (usize, usize) {
    let window = Duration::from_nanos(window_nanos);
    let clock = ManualClock::starting_at(start);
    let sharded = Sharded::with_clock(limit, window, stripes, clock.clone()).unwrap();
    let model =
        AtomicLimiter::with_clock(FixedWindow::aligned(limit, window).unwrap(), clock.clone());
    let mut rng = Mix(seed);
    // Permits admitted by `Sharded` in each window index (`now / window`).
    let mut admitted: HashMap<u64, u64> = HashMap::new();
    let mut exact = 0;
    let mut now = start;
    for call in 0..calls {
        let step = rng.below(max_step + 1);
        now = now.saturating_add(step);
        clock.set(now);
        let home = rng.below(stripes as u64 * 2) as usize;
        // Mostly one permit (compared exactly), sometimes up to the largest share.
        let n = if rng.below(4) == 0 {
            1 + rng.below(sharded.max_request()) as u32
        } else {
            1
        };
        let index = now / window_nanos;
        let got = sharded.try_acquire_on(home, n).unwrap();
        if got.is_allowed() {
            *admitted.entry(index).or_default() += u64::from(n);
            assert!(
                admitted[&index] <= u64::from(limit),
                "seed {seed} call {call}: window {index} admitted {} > limit {limit} \
                 (window {window_nanos} ns, now {now}, n {n}, home {home})",
                admitted[&index]
            );
        }
        // The model sees every request of one permit, and what `Sharded` admitted of more
        // (those may be denied early, and must then not be taken from the model either).
        if n == 1 {
            let want = model.try_acquire(1).unwrap();
            assert_eq!(
                got.is_allowed(),
                want.is_allowed(),
                "seed {seed} call {call}: one permit at {now} (window {window_nanos} ns, index \
                 {index}, home {home}, stripes {stripes}, limit {limit}): sharded {got:?}, \
                 model {want:?}"
            );
            exact += 1;
        } else if got.is_allowed() {
            assert!(
                model.try_acquire(n).unwrap().is_allowed(),
                "seed {seed} call {call}: sharded admitted {n} at {now} where the model has no room"
            );
        }
    }
    (exact, admitted.len())
}

#[test]
fn sharded_decides_one_permit_as_fixed_window_near_the_end_of_time() {
    let mut compared = 0;
    for (window, max_step) in [
        // 1 ns windows: the last two windows of time share the hint's mark.
        (1u64, 2u64),
        (2, 3),
        (3, 4),
        (7, 9),
        // Just below and at the cached window length (2^20 ns).
        ((1 << 20) - 1, 1 << 19),
        (1 << 20, 1 << 19),
        (1_000_000_007, 400_000_000),
        // Huge windows: the last window of time does not end within a `u64`.
        (1 << 62, 1 << 60),
        (u64::MAX / 3, u64::MAX / 13),
        (u64::MAX, u64::MAX / 5),
    ] {
        for (limit, stripes) in [(1u32, 1usize), (2, 2), (3, 2), (4, 4), (5, 4), (9, 8)] {
            for seed in 0..6u64 {
                // Start a few windows before the end of time, so the sequence reaches the last
                // windows (and saturates there: the clock stays at `u64::MAX`).
                let span = window.saturating_mul(3).max(24);
                let start = u64::MAX - span.min(u64::MAX / 2) - seed;
                let (exact, windows) = compare(
                    seed * 31 + u64::from(limit),
                    limit,
                    window,
                    stripes,
                    start,
                    max_step,
                    200,
                );
                assert!(exact > 100, "most requests are of one permit: {exact}");
                assert!(windows >= 1);
                compared += exact;
            }
        }
    }
    assert!(compared > 50_000, "{compared}");
}

#[test]
fn sharded_reaches_the_last_two_windows_of_time_with_1_ns_windows() {
    // The last two 1 ns windows (indices u64::MAX − 1 and u64::MAX) share the hint's mark: the
    // hint is never set there, so a full home stripe in the last window still borrows. Limit 2
    // over 2 stripes, one request per stripe's home in each window, home 0 only.
    // Started at each of the last windows (a fresh limiter's hint is `NO_HINT`, `u64::MAX`, the
    // last window's index), and once more after `set_limit` (which resets the hint to it).
    for start in [u64::MAX - 3, u64::MAX - 1, u64::MAX] {
        for reset in [false, true] {
            let clock = ManualClock::starting_at(start);
            let sharded =
                Sharded::with_clock(2, Duration::from_nanos(1), 2, clock.clone()).unwrap();
            for now in start..=u64::MAX {
                clock.set(now);
                if reset {
                    sharded.set_limit(2).unwrap();
                }
                // Both permits from home 0 (the second borrowed from stripe 1), then a denial.
                assert!(
                    sharded.try_acquire_on(0, 1).unwrap().is_allowed(),
                    "{start} {now}"
                );
                assert!(
                    sharded.try_acquire_on(0, 1).unwrap().is_allowed(),
                    "{start} {now}"
                );
                let denied = sharded.try_acquire_on(0, 1).unwrap();
                assert!(!denied.is_allowed(), "{start} {now}");
                assert!(!sharded.admit(1).unwrap(), "{start} {now}");
            }
        }
    }
}

#[test]
fn every_split_and_resplit_serves_exactly_the_limit_one_permit_at_a_time() {
    // Every constructor split and every `set_limit` re-split leaves each stripe a share of at
    // least 1 (the short path lets a one-permit request skip the share check on that ground):
    // one permit at a time, from every home in turn, a window admits exactly the limit, and a
    // limit below the stripes is refused with the old limit kept.
    let window = Duration::from_secs(1);
    for stripes in [1usize, 2, 3, 4, 8, 16] {
        for limit in 1u32..=18 {
            let clock = ManualClock::starting_at(5 * 1_000_000_000);
            let sharded = Sharded::with_clock(limit, window, stripes, clock.clone()).unwrap();
            let count = sharded.stripes();
            assert!(count as u32 <= limit);
            for new in [0u32, 1, 2, 3, 5, 8, 16, 17] {
                let old = sharded.limit();
                match sharded.set_limit(new) {
                    Ok(()) => {
                        assert!(new as usize >= count, "{new} over {count} accepted");
                        assert_eq!(sharded.limit(), u64::from(new));
                    }
                    Err(_) => {
                        assert!((new as usize) < count, "{new} over {count} refused");
                        assert_eq!(sharded.limit(), old);
                    }
                }
                // A fresh window for each split.
                clock.advance(window);
                let limit = sharded.limit();
                let mut served = 0;
                for call in 0..limit + 4 {
                    // Home stripes in turn, the last ones first (the shares' remainder goes to
                    // the first stripes).
                    let home = count - 1 - (call as usize % count);
                    if sharded.try_acquire_on(home, 1).unwrap().is_allowed() {
                        served += 1;
                    }
                }
                assert_eq!(served, limit, "limit {limit} over {count} stripes");
            }
        }
    }
}

#[test]
fn sharded_never_admits_past_the_limit_in_the_window_it_decides_in_with_lagging_reads() {
    // Reads that sometimes go back (up to two windows, and within `MAX_CLOCK_LAG_NANOS`, as
    // another core's lagging read): each
    // admission is counted in the window its decision says it was decided in (the one ending
    // `reset_after` after the read), which may be newer than the read's; no window admits past
    // the limit. Near the end of time and with the cached window length.
    let mut counted = 0;
    for window in [1u64, 3, 1 << 20, 1_000_000_007, 1 << 62] {
        for (limit, stripes) in [(2u32, 2usize), (5, 4), (9, 8)] {
            for seed in 0..8u64 {
                let start = u64::MAX - window.saturating_mul(6).min(u64::MAX / 2) - seed;
                let clock = ManualClock::starting_at(start);
                let sharded = Sharded::with_clock(
                    limit,
                    Duration::from_nanos(window),
                    stripes,
                    clock.clone(),
                )
                .unwrap();
                let mut rng = Mix(seed ^ window);
                let mut admitted: HashMap<u64, u64> = HashMap::new();
                let mut latest = start;
                for call in 0..300 {
                    let now = match rng.below(5) {
                        // Within the lag horizon: a read further behind is a leaping
                        // clock's peer, whose word is folded back (documented, as FixedWindow).
                        0 => latest.saturating_sub(
                            rng.below(window.saturating_mul(2).min(MAX_CLOCK_LAG_NANOS) + 1),
                        ),
                        _ => {
                            latest = latest.saturating_add(rng.below(window / 2 + 2));
                            latest
                        }
                    };
                    clock.set(now);
                    let home = rng.below(stripes as u64) as usize;
                    let n = 1 + rng.below(sharded.max_request()) as u32;
                    let got = sharded.try_acquire_on(home, n).unwrap();
                    if !got.is_allowed() {
                        continue;
                    }
                    let reset = u64::try_from(got.reset_after().as_nanos()).unwrap();
                    // A window ending past `u64::MAX` is the last one.
                    let decided = now
                        .checked_add(reset)
                        .map_or(u64::MAX / window, |end| (end - 1) / window);
                    let total = admitted.entry(decided).or_default();
                    *total += u64::from(n);
                    counted += 1;
                    assert!(
                        *total <= u64::from(limit),
                        "call {call}: window {decided} admitted {total} > {limit} (window \
                         {window} ns, read {now}, latest {latest}, n {n}, home {home})"
                    );
                }
            }
        }
    }
    assert!(counted > 1000, "{counted}");
}
