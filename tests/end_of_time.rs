//! Blocking calls at the end of the clock's timeline (issue 14, item 9): a wait that can never
//! end is an `AcquireError::PastEndOfTime`, never an infinite loop. Every limiter runs on a
//! `ManualClock` (sleeps advance it, nothing really sleeps); each call runs on a helper thread
//! with a generous hang guard that fails only if the call never returns.

use std::sync::mpsc;
use std::time::Duration;

use floodgate::{
    AcquireError, AtomicLimiter, FixedWindow, Gcra, LeakyBucket, Limiter, ManualClock,
    PackedSlidingWindow, Rate, Sharded, SlidingWindowLimiter, SmoothBursty, SmoothWarmingUp,
    TokenBucket,
};

/// Runs `f` on its own thread; fails if it has not returned within 60 s (a hang).
fn within_hang_guard<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the call never returned: it loops at the end of time")
}

const SECOND: u64 = 1_000_000_000;

/// Exhausts `limiter` at the end of time, then checks both blocking calls end with the error.
fn exhausted_at_the_end_of_time<L: Limiter + 'static>(
    make: impl FnOnce(ManualClock) -> L + Send + 'static,
) {
    within_hang_guard(move || {
        let clock = ManualClock::starting_at(u64::MAX - SECOND / 2);
        let limiter = make(clock.clone());
        while limiter.try_acquire(1).unwrap().is_allowed() {}
        let err = limiter.acquire(1).unwrap_err();
        assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}");
        assert!(
            err.to_string().contains("end of the clock's timeline"),
            "{err}"
        );
        // A timeout that reaches past the end: the same error, not a loop.
        let err = limiter.try_acquire_for(1, Duration::MAX).unwrap_err();
        assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}");
        // Nothing slept past the end of the timeline.
        assert!(
            clock
                .sleeps()
                .iter()
                .all(|s| s.as_nanos() <= u128::from(SECOND))
        );
    });
}

#[test]
fn fixed_window_acquire_ends_at_the_end_of_time() {
    exhausted_at_the_end_of_time(|c| {
        AtomicLimiter::with_clock(FixedWindow::new(3, Duration::from_secs(1)).unwrap(), c)
    });
    exhausted_at_the_end_of_time(|c| {
        AtomicLimiter::with_clock(FixedWindow::aligned(3, Duration::from_secs(1)).unwrap(), c)
    });
}

#[test]
fn buckets_acquire_ends_at_the_end_of_time() {
    exhausted_at_the_end_of_time(|c| {
        AtomicLimiter::with_clock(Gcra::new(Rate::per_second(2), 2).unwrap(), c)
    });
    exhausted_at_the_end_of_time(|c| {
        AtomicLimiter::with_clock(TokenBucket::new(Rate::per_second(1), 2).unwrap(), c)
    });
    exhausted_at_the_end_of_time(|c| {
        AtomicLimiter::with_clock(LeakyBucket::new(Rate::per_second(1), 2).unwrap(), c)
    });
}

#[test]
fn sliding_windows_acquire_ends_at_the_end_of_time() {
    exhausted_at_the_end_of_time(|c| {
        SlidingWindowLimiter::with_clock(3, Duration::from_secs(1), 4, c).unwrap()
    });
    exhausted_at_the_end_of_time(|c| {
        AtomicLimiter::with_clock(
            PackedSlidingWindow::new(3, Duration::from_secs(1), 4).unwrap(),
            c,
        )
    });
}

#[test]
fn sharded_acquire_ends_at_the_end_of_time() {
    exhausted_at_the_end_of_time(|c| Sharded::with_clock(4, Duration::from_secs(1), 2, c).unwrap());
}

#[test]
fn smooth_acquire_ends_at_the_end_of_its_range() {
    // A smooth limiter's range is 2^51 µs after its creation: past it a booking is "never".
    within_hang_guard(|| {
        let clock = ManualClock::starting_at(u64::MAX - SECOND);
        let bursty = SmoothBursty::create_with_clock(1.0, clock.clone()).unwrap();
        assert_eq!(bursty.acquire(1).unwrap(), Duration::ZERO);
        // The second permit is 1 s away: still before the end of u64 ns.
        let warming =
            SmoothWarmingUp::create_with_clock(1.0, Duration::from_secs(1), clock.clone()).unwrap();
        warming.acquire(1).unwrap();
        let err = (0..4)
            .find_map(|_| warming.acquire(1).err())
            .expect("an error");
        assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}");
        let err = (0..4)
            .find_map(|_| bursty.acquire(1).err())
            .expect("an error");
        assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}");
    });
}

#[test]
fn a_far_future_stamp_on_a_sliding_window_never_hangs_acquire() {
    within_hang_guard(|| {
        let clock = ManualClock::new();
        let window =
            SlidingWindowLimiter::with_clock(2, Duration::from_secs(1), 4, clock.clone()).unwrap();
        window.try_acquire_at(2, u64::MAX - SECOND / 2).unwrap();
        match window.acquire(1) {
            Ok(_) => {}
            Err(err) => assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}"),
        }
    });
}

/// A smooth limiter's `acquire` and `try_acquire_for` book before they sleep (Guava's model):
/// one whose wait would end past the end of the clock's timeline must fail without booking, or
/// each failed call would keep a permit it never handed out, pushing every later caller back
/// (here by the permit's cost per failed call).
#[test]
fn a_smooth_call_that_would_wait_past_the_end_of_time_books_nothing() {
    within_hang_guard(|| {
        let clock = ManualClock::starting_at(u64::MAX - SECOND / 2);
        let bursty = SmoothBursty::create_with_clock(1.0, clock.clone()).unwrap();
        let warming =
            SmoothWarmingUp::create_with_clock(1.0, Duration::from_secs(1), clock.clone()).unwrap();
        let limiters: [&dyn Limiter; 2] = [&bursty, &warming];
        for limiter in limiters {
            assert!(limiter.try_acquire(1).unwrap().is_allowed());
            // A zero-timeout try refuses without writing: the wait for the next permit.
            let next = || {
                let refused = limiter.try_acquire_for(1, Duration::ZERO).unwrap();
                assert!(!refused.is_allowed());
                refused.retry_after()
            };
            let before = next();
            assert!(before > Duration::from_nanos(SECOND / 2), "{before:?}");
            for _ in 0..3 {
                let err = limiter.acquire(1).unwrap_err();
                assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}");
                let err = limiter.try_acquire_for(1, Duration::MAX).unwrap_err();
                assert!(matches!(err, AcquireError::PastEndOfTime { .. }), "{err:?}");
            }
            assert_eq!(next(), before, "failed calls booked permits");
            assert!(clock.sleeps().is_empty());
        }
    });
}

/// The last time a time-word bucket (GCRA, token bucket, leaky bucket) can book: 2^62 − 1 ns on
/// the clock's timeline. A booking past it is refused.
const BUCKET_END_OF_TIME: u64 = (1 << 62) - 1;

/// Near the end of a bucket's timeline fewer permits can be booked than its tokens: a
/// `Decision`'s `remaining` and `available()` must count the bookable ones, never promise a
/// permit a request would be refused (issue 17). Every offset from the end, with capacity 10 at
/// one permit a second: each decision's `remaining` is exactly what a peek admits, and the
/// permits admitted in all are the bookable ones.
#[test]
fn a_bucket_near_the_end_of_time_never_reports_permits_it_would_refuse() {
    let capacity = 10u32;
    for seconds_left in 0..=12u64 {
        let clock = ManualClock::starting_at(BUCKET_END_OF_TIME - seconds_left * SECOND);
        let buckets = [
            Gcra::new(Rate::per_second(1), capacity).unwrap(),
            TokenBucket::new(Rate::per_second(1), capacity).unwrap(),
            LeakyBucket::new(Rate::per_second(1), capacity).unwrap(),
        ];
        for bucket in buckets {
            let limiter = AtomicLimiter::with_clock(bucket, clock.clone());
            // Bookable: up to the capacity, and no booking past the end of time.
            let bookable = seconds_left.min(u64::from(capacity));
            // Exactly `promised` more can be taken at once, and not one more.
            let check = |promised: u64, what: &str| {
                let n = u32::try_from(promised).unwrap();
                if n > 0 {
                    let peek = limiter.peek(n).unwrap();
                    assert!(
                        peek.is_allowed(),
                        "{seconds_left} s left: {what} promised {promised}, a peek of them is refused"
                    );
                }
                if n < capacity {
                    assert!(
                        !limiter.peek(n + 1).unwrap().is_allowed(),
                        "{seconds_left} s left: {what} promised {promised}, {} are admitted",
                        n + 1
                    );
                }
            };
            check(limiter.available(), "available()");
            assert_eq!(limiter.available(), bookable, "{seconds_left} s left");
            let mut admitted = 0;
            loop {
                let decision = limiter.try_acquire(1).unwrap();
                check(decision.remaining(), &format!("{decision:?}"));
                check(limiter.available(), "available()");
                if !decision.is_allowed() {
                    break;
                }
                admitted += 1;
                assert!(admitted <= capacity, "{seconds_left} s left: never refused");
            }
            assert_eq!(u64::from(admitted), bookable, "{seconds_left} s left");
        }
    }
}

/// 1 ns cells, 4 cells, limit 1: cell `u64::MAX - 1` takes the one permit; at `now = u64::MAX`
/// (cell `u64::MAX`, empty) the window is spent and its only used closed cell is `u64::MAX - 1`.
/// The same state and the same `now` give one answer: the first denial (the crossing's, through
/// the marks), the second (the short path, from the crossing's published ends) and `peek`.
/// Failed when the published ends answered a sole used cell's reset with the retry raised to
/// 1 ns (reset 1 ns against the marks' 0).
#[test]
fn the_spent_denial_at_the_end_of_time_agrees_with_the_marks() {
    let w = SlidingWindowLimiter::new(1, Duration::from_nanos(4), 4).unwrap();
    assert!(w.try_acquire_at(1, u64::MAX - 1).unwrap().is_allowed());
    let first = w.try_acquire_at(1, u64::MAX).unwrap();
    let second = w.try_acquire_at(1, u64::MAX).unwrap();
    let peeked = w.peek_at(1, u64::MAX).unwrap();
    assert!(!first.is_allowed(), "{first:?}");
    assert_eq!(first, second, "same state, same now, two answers");
    assert_eq!(first, peeked);
}

/// Random small sliding windows (1–8 cells of 1–5 ns, limits 1–6), a quarter of them run at
/// the end of time: each denial a crossing decides (the marks) equals the one the short path
/// decides at once after it (the published ends), and `peek`'s at the same instant.
#[test]
fn published_and_marks_denials_agree_on_random_states() {
    let mut seed = 0x1234_5678_9abc_def1u64;
    let mut below = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    for case in 0..20_000 {
        let cells = 1 + below(8) as u32;
        let cell = 1 + below(5);
        let limit = 1 + below(6) as u32;
        let at_the_end = below(4) == 0;
        let start = if at_the_end {
            u64::MAX - below(40) * cell - 20 * cell
        } else {
            below(1000)
        };
        let window = Duration::from_nanos(cell * u64::from(cells));
        let w = SlidingWindowLimiter::new(limit, window, cells).unwrap();
        let mut now = start;
        let mut log = vec![];
        for _ in 0..(1 + below(12)) {
            now = now.saturating_add(below(3 * cell));
            let n = 1 + below(u64::from(limit)) as u32;
            let first = w.try_acquire_at(n, now).unwrap();
            let again = w.try_acquire_at(n, now).unwrap();
            log.push((now, n, first.is_allowed(), again.is_allowed()));
            if !first.is_allowed() {
                assert_eq!(
                    first, again,
                    "case {case}: {cells} cells of {cell} ns, limit {limit}: {log:?}"
                );
            }
            if !again.is_allowed() {
                let peeked = w.peek_at(n, now).unwrap();
                assert_eq!(again, peeked, "peek: case {case}: {log:?}");
            }
        }
    }
}
