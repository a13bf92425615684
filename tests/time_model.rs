//! Issue 14's time model, one deterministic regression test per case: a thread held between its
//! clock read and its compare-exchange (item 1), a one-shot leaping clock read (item 3), and a
//! keyed eviction on a clock ahead of a checker's (item 8). The held thread is a real thread
//! parked inside `Clock::now_nanos` right after taking its reading (`GatedClock`): no sleeps,
//! no wall time (the gate's 60 s bound only turns a hang into a failure).

#[path = "support/gated_clock.rs"]
mod gated_clock;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use floodgate::clock::MAX_CLOCK_LAG_NANOS;
use floodgate::{
    AtomicLimiter, Decision, FixedWindow, Gcra, Keyed, Limiter, PackedSlidingWindow, Rate, Sharded,
};
use gated_clock::GatedClock;

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
/// Longer than the lag horizon: the held thread's read is this stale when it resumes.
const STALL: u64 = 2 * MAX_CLOCK_LAG_NANOS;

/// Holds a thread right after its clock read while `meanwhile` runs, then lets it finish its
/// call. Returns what the held call decided.
fn held_call<T: Send + 'static>(
    clock: &GatedClock,
    call: impl FnOnce() -> T + Send + 'static,
    meanwhile: impl FnOnce(),
) -> T {
    clock.hold_next_read();
    let held = thread::spawn(call);
    clock.wait_until_held();
    meanwhile();
    clock.release();
    held.join().unwrap()
}

/// Item 1 on an `AtomicLimiter`: while one thread is held after reading the clock, time moves
/// past the lag horizon and the current window is filled. The held thread must not take the
/// newer window for a clock glitch and re-open it.
fn stale_reader_never_reopens<A: floodgate::Algorithm>(algorithm: A, limit: u32) {
    let clock = GatedClock::starting_at(100 * SEC + SEC / 2);
    let limiter = Arc::new(AtomicLimiter::with_clock(algorithm, clock.clone()));
    let held = limiter.clone();
    let stale = held_call(
        &clock,
        move || held.try_acquire(1).unwrap(),
        || {
            clock.advance(STALL);
            assert!(limiter.try_acquire(limit).unwrap().is_allowed());
            assert!(!limiter.try_acquire(1).unwrap().is_allowed());
        },
    );
    assert!(
        !stale.is_allowed(),
        "the stale reader re-opened a full window: {stale:?}"
    );
    assert!(!limiter.try_acquire(1).unwrap().is_allowed());
}

#[test]
fn a_held_reader_never_reopens_an_aligned_fixed_window() {
    stale_reader_never_reopens(FixedWindow::aligned(3, Duration::from_secs(1)).unwrap(), 3);
}

#[test]
fn a_held_reader_never_reopens_an_anchored_fixed_window() {
    stale_reader_never_reopens(FixedWindow::new(3, Duration::from_secs(1)).unwrap(), 3);
}

#[test]
fn a_held_reader_never_reopens_a_packed_sliding_window() {
    // The case: 4 ms windows, where a stall of one window used to be enough.
    stale_reader_never_reopens(
        PackedSlidingWindow::new(4, Duration::from_millis(4), 4).unwrap(),
        4,
    );
}

#[test]
fn a_held_reader_never_refills_a_drained_bucket() {
    stale_reader_never_reopens(Gcra::new(Rate::per_second(1), 3).unwrap(), 3);
}

#[test]
fn a_held_reader_never_reopens_a_sharded_window() {
    let clock = GatedClock::starting_at(100 * SEC + SEC / 2);
    let sharded =
        Arc::new(Sharded::with_clock(4, Duration::from_secs(1), 2, clock.clone()).unwrap());
    let held = sharded.clone();
    let stale = held_call(
        &clock,
        move || held.try_acquire_on(0, 1).unwrap(),
        || {
            clock.advance(STALL);
            for stripe in [0, 1] {
                assert!(sharded.try_acquire_on(stripe, 2).unwrap().is_allowed());
            }
            assert!(!sharded.try_acquire_on(0, 1).unwrap().is_allowed());
        },
    );
    assert!(!stale.is_allowed(), "re-opened: {stale:?}");
    for stripe in [0, 1] {
        assert!(!sharded.try_acquire_on(stripe, 1).unwrap().is_allowed());
    }
}

#[test]
fn a_held_reader_never_reopens_a_keyed_window() {
    let clock = GatedClock::starting_at(100 * SEC + SEC / 2);
    let keyed: Arc<Keyed<u32, FixedWindow, GatedClock>> = Arc::new(
        Keyed::builder(FixedWindow::aligned(2, Duration::from_secs(1)).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    assert!(keyed.try_acquire(&7, 1).unwrap().is_allowed()); // the key exists: the read path
    let held = keyed.clone();
    let stale = held_call(
        &clock,
        move || held.try_acquire(&7, 1).unwrap(),
        || {
            clock.advance(STALL);
            assert!(keyed.try_acquire(&7, 2).unwrap().is_allowed());
        },
    );
    assert!(!stale.is_allowed(), "re-opened: {stale:?}");
    assert!(!keyed.try_acquire(&7, 1).unwrap().is_allowed());
}

/// Item 3 on a window: one read leaps a day ahead and takes permits in that far window. Later
/// present-time readers fold that window into theirs: its admissions stay counted (nothing is
/// forgotten) and the limiter is back to full windows after at most one window.
#[test]
fn a_leaping_read_costs_fixed_windows_at_most_one_window() {
    for window in [
        FixedWindow::aligned(3, Duration::from_secs(1)).unwrap(),
        FixedWindow::new(3, Duration::from_secs(1)).unwrap(),
    ] {
        let clock = GatedClock::starting_at(100 * SEC);
        let limiter = AtomicLimiter::with_clock(window, clock.clone());
        clock.leap_next_read(86_400 * SEC);
        assert!(limiter.try_acquire(2).unwrap().is_allowed()); // at the leaped time
        let d = limiter.try_acquire(1).unwrap();
        assert!(d.is_allowed(), "the leaper's 2 are folded in: 1 is left");
        assert!(!limiter.try_acquire(1).unwrap().is_allowed());
        assert!(d.reset_after() <= Duration::from_secs(1) + Duration::from_micros(16));
        clock.advance(SEC + SEC / 10);
        assert!(
            limiter.try_acquire(3).unwrap().is_allowed(),
            "one window later"
        );
    }
}

#[test]
fn a_leaping_read_costs_a_packed_window_at_most_one_window() {
    let clock = GatedClock::starting_at(100 * SEC);
    let limiter = AtomicLimiter::with_clock(
        PackedSlidingWindow::new(4, Duration::from_millis(4), 4).unwrap(),
        clock.clone(),
    );
    clock.leap_next_read(86_400 * SEC);
    assert!(limiter.try_acquire(3).unwrap().is_allowed());
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    let denied = limiter.try_acquire(1).unwrap();
    assert!(!denied.is_allowed());
    assert!(denied.retry_after() <= Duration::from_millis(4));
    clock.advance(4 * MS);
    assert!(limiter.try_acquire(4).unwrap().is_allowed());
}

/// Item 3 on a bucket: a day-long leap publishes a far floor and a far theoretical arrival time.
/// Present-time readers ignore the floor and read the state as an empty bucket: permits come
/// back at the rate, not a day later.
#[test]
fn a_leaping_read_freezes_a_bucket_for_at_most_one_refill() {
    let clock = GatedClock::starting_at(100 * SEC);
    let limiter =
        AtomicLimiter::with_clock(Gcra::new(Rate::per_second(10), 5).unwrap(), clock.clone());
    clock.leap_next_read(86_400 * SEC);
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    let first = limiter.try_acquire(1).unwrap();
    let refill = Duration::from_millis(500); // 5 permits at 10/s
    assert!(
        first.is_allowed() || first.retry_after() <= refill,
        "{first:?}"
    );
    clock.advance(500 * MS);
    assert!(
        limiter.try_acquire(1).unwrap().is_allowed(),
        "frozen past one refill"
    );
    clock.advance(400 * MS); // full again: the one permit taken above has refilled
    assert!(limiter.try_acquire(5).unwrap().is_allowed());
    assert!(
        !limiter.try_acquire(1).unwrap().is_allowed(),
        "and back to the rate"
    );
}

/// Item 8: a key dropped as idle by a sweep whose clock is ahead of a checker's. The checker,
/// lagging within the horizon, must not start the key afresh in the old window, where it was
/// full: it is decided no earlier than the drop, exactly as a lagging reader of an
/// `AtomicLimiter` is counted in the newer window.
#[test]
fn a_key_dropped_on_a_clock_ahead_is_not_refilled_for_a_lagging_checker() {
    let clock = GatedClock::starting_at(10 * SEC + 200 * MS);
    let keyed: Keyed<u32, FixedWindow, GatedClock> =
        Keyed::builder(FixedWindow::aligned(2, Duration::from_secs(1)).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap();
    assert!(keyed.try_acquire(&1, 2).unwrap().is_allowed()); // window 10 is full
    clock.set(11 * SEC + 500 * MS); // the sweeping thread's clock: window 10 has ended
    assert_eq!(keyed.retain_recent(), 1);
    clock.set(10 * SEC + 900 * MS); // a checker lagging 0.6 s: still window 10 on its clock
    let lagging = keyed.try_acquire(&1, 2).unwrap();
    assert_eq!(
        lagging,
        Decision::allow(2, 0, 500 * MS),
        "counted in window 11"
    );
    clock.set(11 * SEC + 500 * MS);
    assert!(
        !keyed.try_acquire(&1, 1).unwrap().is_allowed(),
        "window 11 already holds the lagging checker's 2"
    );
}

/// Item 3 on the smooth limiters: a booking made on a day-long leap is moved back by the leap
/// (the floor says how far it was), so the next present-time callers wait one interval, not a
/// day; a later read in range decides normally again.
#[test]
fn a_leaping_read_costs_smooth_limiters_one_booking_not_a_day() {
    let interval = Duration::from_millis(100); // 10/s
    let bursty_clock = GatedClock::starting_at(100 * SEC);
    let bursty = floodgate::SmoothBursty::create_with_clock(10.0, bursty_clock.clone()).unwrap();
    let warming_clock = GatedClock::starting_at(100 * SEC);
    let warming = floodgate::SmoothWarmingUp::create_with_clock(
        10.0,
        Duration::from_secs(1),
        warming_clock.clone(),
    )
    .unwrap();
    let limiters: [(&dyn Limiter, &GatedClock, Duration); 2] = [
        (&bursty, &bursty_clock, interval),
        // Cold: a warming limiter's first permits cost up to cold_factor (3) intervals.
        (&warming, &warming_clock, 3 * interval),
    ];
    for (limiter, clock, wait) in limiters {
        clock.leap_next_read(86_400 * SEC);
        assert!(limiter.try_acquire(1).unwrap().is_allowed()); // booked a day ahead
        let next = limiter.try_acquire(1).unwrap();
        assert!(next.retry_after() <= wait, "{next:?}");
        clock.advance(u64::try_from(wait.as_nanos()).unwrap());
        assert!(
            limiter.try_acquire(1).unwrap().is_allowed(),
            "frozen by the leap"
        );
    }
}

/// A sweep whose clock read leaps (one far read) must not drop keys that are live now: it
/// judges idleness at the earlier of two reads.
#[test]
fn a_leaping_read_in_a_sweep_drops_no_live_key() {
    let clock = GatedClock::starting_at(10 * SEC);
    let keyed: Keyed<u32, Gcra, GatedClock> =
        Keyed::builder(Gcra::new(Rate::per_second(1), 2).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap();
    assert!(keyed.try_acquire(&1, 2).unwrap().is_allowed()); // drained: live for 2 s
    clock.leap_next_read(86_400 * SEC);
    assert_eq!(
        keyed.retain_recent(),
        0,
        "a live key was dropped by a leaping read"
    );
    assert!(
        !keyed.try_acquire(&1, 1).unwrap().is_allowed(),
        "and refilled"
    );
    clock.advance(2 * SEC);
    assert_eq!(keyed.retain_recent(), 1);
}

/// A read lagging by up to the horizon is lag, never a leap, whatever the window: with 6 s
/// windows (which do not divide 10 s) a read 6.001 s behind the writer sees the state two
/// windows ahead. It must be counted there, not fold the full window back for the next present
/// caller to re-open (review finding: the horizon was ⌊H / window⌋).
#[test]
fn a_read_lagging_within_the_horizon_is_never_taken_for_a_leap() {
    for (window, limit) in [(6 * SEC, 5), (3 * SEC, 5)] {
        let clock = GatedClock::starting_at(12 * SEC);
        let fixed = AtomicLimiter::with_clock(
            FixedWindow::aligned(limit, Duration::from_nanos(window)).unwrap(),
            clock.clone(),
        );
        let packed = AtomicLimiter::with_clock(
            PackedSlidingWindow::new(limit, Duration::from_nanos(2 * window), 2).unwrap(),
            clock.clone(),
        );
        let limiters: [&dyn Limiter; 2] = [&fixed, &packed];
        for l in limiters {
            clock.set(12 * SEC);
            assert!(l.try_acquire(limit).unwrap().is_allowed());
            clock.set(12 * SEC - MAX_CLOCK_LAG_NANOS + 1); // lagging by just under H
            assert!(!l.try_acquire(1).unwrap().is_allowed(), "a lag re-opened");
            clock.set(12 * SEC + 1);
            assert!(
                !l.try_acquire(1).unwrap().is_allowed(),
                "the window went back"
            );
        }
    }
}

/// A `set_limit` after a leaping read must not carry the leap into the configuration (review
/// finding: the change instant took the leaped floor, and every later decision ran a day ahead).
#[test]
fn a_reconfiguration_after_a_leap_does_not_freeze_a_bucket() {
    let clock = GatedClock::starting_at(100 * SEC);
    let limiter =
        AtomicLimiter::with_clock(Gcra::new(Rate::per_second(10), 5).unwrap(), clock.clone());
    clock.leap_next_read(86_400 * SEC);
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    limiter.set_limit(6).unwrap();
    let mut admitted = 0;
    for _ in 0..100 {
        clock.advance(100 * MS);
        admitted += u32::from(limiter.try_acquire(1).unwrap().is_allowed());
    }
    assert!(
        admitted >= 90,
        "{admitted} of 100 at the rate: frozen by the leap"
    );
}
