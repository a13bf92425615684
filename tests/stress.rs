//! Real threads hammering one limiter on a frozen ManualClock: the admitted count is exact.

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use floodgate::{
    Algorithm, AtomicLimiter, FixedWindow, Gcra, LeakyBucket, Limiter, ManualClock, Rate,
    TokenBucket,
};

const THREADS: u64 = 8;
const CALLS: u64 = 100_000;

/// Runs THREADS × CALLS requests of 1–3 permits; returns the permits admitted.
fn hammer<A: Algorithm>(limiter: &AtomicLimiter<A, ManualClock>) -> u64 {
    let admitted = AtomicU64::new(0);
    thread::scope(|s| {
        for t in 0..THREADS {
            let admitted = &admitted;
            s.spawn(move || {
                let mut mine = 0;
                for i in 0..CALLS {
                    let n = 1 + ((i + t) % 3) as u32;
                    if limiter.try_acquire(n).unwrap().is_allowed() {
                        mine += u64::from(n);
                    }
                }
                // Relaxed: joined by the scope before it is read.
                admitted.fetch_add(mine, Ordering::Relaxed);
            });
        }
    });
    admitted.into_inner()
}

#[test]
fn fixed_windows_admit_exactly_the_limit() {
    for anchor in [
        floodgate::Anchor::WallClock,
        floodgate::Anchor::FirstRequest,
    ] {
        let clock = ManualClock::starting_at(123_456_789);
        let limiter = AtomicLimiter::with_clock(
            FixedWindow::with_anchor(10_000, Duration::from_secs(1), anchor).unwrap(),
            clock,
        );
        let admitted = hammer(&limiter);
        // Requests of 1–3 permits: the window fills to within 2 of the limit, never past it.
        assert!(
            (9_998..=10_000).contains(&admitted),
            "{anchor:?}: {admitted}"
        );
        assert_eq!(
            limiter.available(),
            10_000 - admitted,
            "nothing lost or double-counted"
        );
    }
}

#[test]
fn buckets_admit_exactly_their_capacity() {
    let rate = Rate::per_second(1);
    let clock = ManualClock::starting_at(5_000_000_000);
    let token = AtomicLimiter::with_clock(TokenBucket::new(rate, 10_000).unwrap(), clock.clone());
    let leaky = AtomicLimiter::with_clock(LeakyBucket::new(rate, 10_000).unwrap(), clock.clone());
    let gcra = AtomicLimiter::with_clock(Gcra::new(rate, 10_000).unwrap(), clock.clone());
    for (name, admitted, left) in [
        ("token", hammer(&token), token.available()),
        ("leaky", hammer(&leaky), leaky.available()),
        ("gcra", hammer(&gcra), gcra.available()),
    ] {
        assert_eq!(
            admitted + left,
            10_000,
            "{name}: nothing lost or double-counted"
        );
        assert!(left <= 2, "{name}: {left} left");
    }
}

#[test]
fn single_permits_fill_exactly() {
    let clock = ManualClock::new();
    let limiter = AtomicLimiter::with_clock(
        FixedWindow::aligned(50_000, Duration::from_secs(1)).unwrap(),
        clock,
    );
    let admitted = AtomicU64::new(0);
    thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let n = (0..CALLS)
                    .filter(|_| limiter.try_acquire(1).unwrap().is_allowed())
                    .count();
                // Relaxed: joined by the scope before it is read.
                admitted.fetch_add(n as u64, Ordering::Relaxed);
            });
        }
    });
    assert_eq!(admitted.into_inner(), 50_000);
}

#[test]
fn a_moving_clock_never_admits_past_the_bound() {
    // Threads race while another thread moves time forward window by window.
    let clock = ManualClock::new();
    let limit = 1_000u64;
    let limiter = AtomicLimiter::with_clock(
        FixedWindow::aligned(limit as u32, Duration::from_millis(10)).unwrap(),
        clock.clone(),
    );
    let admitted = AtomicU64::new(0);
    let windows = 20u64;
    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let n = (0..CALLS)
                    .filter(|_| limiter.try_acquire(1).unwrap().is_allowed())
                    .count();
                // Relaxed: joined by the scope before it is read.
                admitted.fetch_add(n as u64, Ordering::Relaxed);
            });
        }
        s.spawn(|| {
            for _ in 1..windows {
                thread::yield_now();
                clock.advance(Duration::from_millis(10));
            }
        });
    });
    let admitted = admitted.into_inner();
    assert!(
        admitted <= limit * windows,
        "{admitted} > {}",
        limit * windows
    );
    assert!(
        admitted >= limit,
        "the first window alone fills: {admitted}"
    );
}
