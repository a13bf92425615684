//! loom models of the engine core: the one CAS loop (`limiter::update`) driving each packed-word
//! algorithm. Every interleaving of 2–3 threads is explored (preemptions bounded by
//! `LOOM_MAX_PREEMPTIONS`, default 3).
#![cfg(floodgate_loom)]

use std::time::Duration;

use floodgate::clock::FLOOR_GRAIN_NANOS;
use floodgate::loom_internals::unpack_window;
use floodgate::loom_internals::{update, update_at};
use floodgate::{
    Algorithm, AtomicLimiter, FixedWindow, Gcra, LeakyBucket, Limiter, ManualClock, Rate,
    TokenBucket,
};
use loom::sync::Arc;
use loom::sync::atomic::AtomicU64;
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// Three threads each take one permit of a limit of two on a frozen clock.
fn three_takers_of_two<A: Algorithm>(make: fn() -> A) {
    model(move || {
        let limiter = Arc::new(AtomicLimiter::with_clock(
            make(),
            ManualClock::starting_at(1_000),
        ));
        // All three on model threads of their own: with the third on the thread that built the
        // limiter, loom explored 696 executions of this race.
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let limiter = limiter.clone();
                thread::spawn(move || limiter.try_acquire(1).unwrap().is_allowed())
            })
            .collect();
        let admitted = handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .filter(|a| *a)
            .count();
        assert_eq!(admitted, 2, "exactly the limit, under every interleaving");
        assert_eq!(limiter.available(), 0);
    });
}

#[test]
fn fixed_window_admits_exactly_the_limit() {
    three_takers_of_two(|| FixedWindow::aligned(2, Duration::from_secs(1)).unwrap());
    three_takers_of_two(|| FixedWindow::new(2, Duration::from_secs(1)).unwrap());
}

#[test]
fn token_bucket_admits_exactly_its_capacity() {
    three_takers_of_two(|| TokenBucket::new(Rate::per_second(1), 2).unwrap());
}

#[test]
fn gcra_admits_exactly_its_burst() {
    three_takers_of_two(|| Gcra::new(Rate::per_second(1), 2).unwrap());
}

#[test]
fn fixed_window_edge_never_goes_back() {
    // Thread A reads window 0 (t = 9) twice; thread B reads window 1 (t = 10) once.
    model(|| {
        let algorithm = Arc::new(FixedWindow::aligned(2, Duration::from_nanos(10)).unwrap());
        let word = Arc::new(AtomicU64::new(0));
        let (a_alg, a_word) = (algorithm.clone(), word.clone());
        let a = thread::spawn(move || {
            (0..2)
                .filter(|_| update(&a_word, |s| a_alg.decide(s, 9, 1)).is_allowed())
                .count()
        });
        // B runs on a model thread of its own: run on the thread that built the word, loom
        // explored 12 executions of this race.
        let b = {
            let (word, algorithm) = (word.clone(), algorithm.clone());
            thread::spawn(move || update(&word, |s| algorithm.decide(s, 10, 1)).is_allowed())
        };
        let b_allowed = b.join().unwrap();
        let a_allowed = a.join().unwrap();
        let (tag, count) = unpack_window(word.load(loom::sync::atomic::Ordering::SeqCst));
        assert!(
            b_allowed,
            "a later window always has room for its first request"
        );
        assert_eq!(tag, 1, "the state never moves back to window 0");
        assert!(count <= 2, "window 1 holds at most the limit");
        // Every admitted request is in window 0 (at most 2) or counted in window 1.
        assert!(a_allowed + 1 >= count as usize);
        assert!(a_allowed >= 1);
    });
}

#[test]
fn gcra_lagging_reader_is_decided_at_the_writers_time() {
    // B's clock reads a floor grain and 3 ns behind A's (93,613 against 110,000). Without the
    // time floor, B would be refused when A wrote first (the bucket in debt at 93,613); with it,
    // both fit in the burst under every interleaving. (A's time is a grain or more past the
    // floor whoever raised it first, so A raises it.) A runs on a model thread of its own: run
    // on the thread that built the word, loom explored 27 executions of this model. With B 3 ns
    // behind, as the model first had, B may be refused, as `update_at`'s docs allow (never for
    // more than a grain of its lag): B raises the floor to 109,997 before A, whose read is then
    // within a grain of it and raises nothing, and B's retry after A's word is decided at
    // 109,997, 0.97 of a token.
    const B_READ: u64 = 110_000 - FLOOR_GRAIN_NANOS - 3;
    model(|| {
        let algorithm = Arc::new(Gcra::new(Rate::new(1, Duration::from_nanos(100)), 2).unwrap());
        let word = Arc::new(AtomicU64::new(0));
        let floor = Arc::new(AtomicU64::new(0));
        let (b_alg, b_word, b_floor) = (algorithm.clone(), word.clone(), floor.clone());
        let b = thread::spawn(move || {
            update_at(
                &b_word,
                &b_floor,
                || B_READ,
                |s, now| b_alg.decide(s, now, 1),
            )
            .is_allowed()
        });
        let a = {
            let (word, floor, algorithm) = (word.clone(), floor.clone(), algorithm.clone());
            thread::spawn(move || {
                update_at(
                    &word,
                    &floor,
                    || 110_000,
                    |s, now| algorithm.decide(s, now, 1),
                )
                .is_allowed()
            })
        };
        let a_allowed = a.join().unwrap();
        assert!(
            a_allowed && b.join().unwrap(),
            "the lag refuses nothing that fits"
        );
        let tat = word.load(loom::sync::atomic::Ordering::SeqCst);
        assert!(
            tat == 110_100 || tat == 110_200,
            "tat {tat}: both bookings, none lost"
        );
        assert!(
            floor.load(loom::sync::atomic::Ordering::SeqCst) <= 110_000,
            "the floor is a real clock read"
        );
    });
}

#[test]
fn leaky_bucket_batches_never_overflow() {
    // Requests of 2, 1 and 1 units into a meter of 3: admitted units ≤ 3, and the state books
    // exactly the admitted units.
    model(|| {
        let limiter = Arc::new(AtomicLimiter::with_clock(
            LeakyBucket::new(Rate::new(1, Duration::from_nanos(10)), 3).unwrap(),
            ManualClock::starting_at(50),
        ));
        let spawn = |n: u32| {
            let limiter = limiter.clone();
            thread::spawn(move || {
                if limiter.try_acquire(n).unwrap().is_allowed() {
                    n
                } else {
                    0
                }
            })
        };
        // All three on model threads of their own: with the third take on the thread that
        // built the limiter, loom explored 696 executions of this race.
        let (two, one, third) = (spawn(2), spawn(1), spawn(1));
        let admitted = two.join().unwrap() + one.join().unwrap() + third.join().unwrap();
        assert!(admitted == 3 || admitted == 2, "admitted {admitted}");
        assert_eq!(limiter.available(), u64::from(3 - admitted));
    });
}

#[test]
fn set_limit_races_try_acquire() {
    model(|| {
        let limiter = Arc::new(AtomicLimiter::with_clock(
            FixedWindow::aligned(1, Duration::from_secs(1)).unwrap(),
            ManualClock::new(),
        ));
        let setter = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.set_limit(2).unwrap())
        };
        let taker = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.try_acquire(1).unwrap().is_allowed())
        };
        // The second taker runs on a model thread of its own: run on the thread that built the
        // limiter, loom explored 744 executions of this race.
        let second = {
            let limiter = limiter.clone();
            thread::spawn(move || limiter.try_acquire(1).unwrap().is_allowed())
        };
        setter.join().unwrap();
        let admitted = usize::from(taker.join().unwrap()) + usize::from(second.join().unwrap());
        assert!((1..=2).contains(&admitted));
        assert_eq!(limiter.available(), 2 - admitted as u64);
    });
}
