//! The local shortcuts in front of memcached: the circuit breaker (a frozen server opens it;
//! calls then skip memcached and its timeout; a probe after the back-off closes it on recovery)
//! and the deny cache (a key memcached denied is denied locally, without a round trip, until
//! the `retry_after` memcached gave).

use std::time::{Duration, Instant};

use floodgate::SlidingWindow;
use floodgate::backend::{BreakerConfig, BreakerState, FailurePolicy};
use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
use floodgate::{Decision, ManualClock};

use super::server::MemcachedServer;
use super::{T0, decide};

/// Wall-clock guard against a hang (never a speed check).
const HANG_BOUND: Duration = Duration::from_secs(60);

/// `incr` commands memcached has run: one per decision it made.
fn incrs(server: &MemcachedServer) -> u64 {
    server.stat("incr_hits") + server.stat("incr_misses")
}

/// A counter of memcached's `stats`.

#[test]
fn a_frozen_server_opens_the_breaker_then_calls_skip_it_and_a_probe_closes_it() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    // Long enough that the calls to the live server (the first, and the probe after the resume)
    // are answered within it on a loaded machine, as the Redis cluster tests' 2 s; at 400 ms
    // either could time out and fail the test. The four calls to the frozen server wait it out.
    let timeout = Duration::from_secs(2);
    let backend =
        MemcachedBackend::connect(MemcachedConfig::new(server.addr()).timeout(timeout)).unwrap();
    let window = SlidingWindow::new(100, Duration::from_secs(60), 60).unwrap();
    let config = BreakerConfig::new(3, Duration::from_secs(1), Duration::from_secs(8)).unwrap();
    let limiter = MemcachedLimiter::with_clock(
        &backend,
        "breaker",
        window,
        FailurePolicy::FailClosed,
        clock.clone(),
    )
    .unwrap()
    .with_breaker(Some(config));
    let breaker = limiter.breaker().expect("on");
    assert!(decide(&limiter, "k", 1).is_allowed());

    server.pause();
    // Three calls wait for memcached and time out: the breaker opens.
    for _ in 0..3 {
        let started = Instant::now();
        let outcome = limiter.blocking_try_acquire_outcome("k", 1).unwrap();
        assert!(started.elapsed() >= timeout);
        assert!(outcome.failure().expect("policy").is_timeout());
        assert!(!outcome.decision().is_allowed());
    }
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(breaker.retry_in(), Duration::from_secs(1));

    // Open: a thousand calls, none sent: the counters below prove it (a call sent to the frozen
    // server would be a timeout); the wall clock only guards against a hang, and the average is
    // printed.
    let started = Instant::now();
    for _ in 0..1000 {
        let outcome = limiter.blocking_try_acquire_outcome("k", 1).unwrap();
        let error = outcome.failure().expect("decided by the policy");
        assert!(error.is_circuit_open(), "{error}");
        assert!(
            error.to_string().contains("circuit breaker open"),
            "{error}"
        );
        assert!(!outcome.decision().is_allowed());
        // Fail-closed's retry is when the probe is due, not the backend's timeout.
        assert_eq!(outcome.decision().retry_after(), Duration::from_secs(1));
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < HANG_BOUND,
        "1000 short-circuited calls took {elapsed:?}"
    );
    eprintln!("short-circuited call: {:?} on average", elapsed / 1000);
    let counts = limiter.failures();
    assert_eq!((counts.timeouts, counts.errors), (3, 0));
    assert_eq!(counts.short_circuited, 1000);
    assert_eq!(counts.total(), 1003);

    // The back-off passes while memcached is still frozen: one probe, which times out, and the
    // breaker re-opens for twice as long.
    clock.advance(Duration::from_secs(1));
    let outcome = limiter.blocking_try_acquire_outcome("k", 1).unwrap();
    assert!(outcome.failure().expect("policy").is_timeout());
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(breaker.retry_in(), Duration::from_secs(2));

    // Recovery: the next probe gets memcached's answer and closes the breaker.
    server.resume();
    assert!(
        limiter
            .blocking_try_acquire_outcome("k", 1)
            .unwrap()
            .failure()
            .is_some()
    );
    clock.advance(Duration::from_secs(2));
    assert!(decide(&limiter, "k", 1).is_allowed());
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert!(decide(&limiter, "k", 1).is_allowed());
    assert_eq!(limiter.failures().timeouts, 4);
}

#[test]
fn a_killed_server_opens_the_breaker_at_once_and_a_restart_closes_it() {
    let mut server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let backend = MemcachedBackend::connect(
        MemcachedConfig::new(server.addr()).timeout(Duration::from_secs(30)),
    )
    .unwrap();
    let window = SlidingWindow::new(10, Duration::from_secs(60), 60).unwrap();
    let limiter = MemcachedLimiter::with_clock(
        &backend,
        "killed",
        window,
        FailurePolicy::FailOpen,
        clock.clone(),
    )
    .unwrap(); // the default breaker: 5 failures, 250 ms
    assert!(decide(&limiter, "k", 1).is_allowed());
    server.kill();
    for _ in 0..5 {
        let outcome = limiter.blocking_try_acquire_outcome("k", 1).unwrap();
        assert!(
            outcome
                .failure()
                .expect("policy")
                .to_string()
                .contains("unreachable")
        );
        assert!(outcome.decision().is_allowed()); // fail open
    }
    let breaker = limiter.breaker().expect("on by default");
    assert_eq!(breaker.state(), BreakerState::Open);
    for _ in 0..100 {
        let outcome = limiter.blocking_try_acquire_outcome("k", 1).unwrap();
        assert!(outcome.failure().expect("policy").is_circuit_open());
        assert!(outcome.decision().is_allowed());
    }
    assert_eq!(limiter.failures().errors, 5);
    assert_eq!(limiter.failures().short_circuited, 100);
    server.restart();
    clock.advance(BreakerConfig::default().open_for(1));
    assert!(decide(&limiter, "k", 1).is_allowed());
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[test]
fn a_denied_key_is_denied_locally_until_memcached_said_to_retry() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let backend = super::backend(&server);
    let limiter = super::limiter(&backend, "deny", 3, 10, &clock)
        .with_deny_cache(Some(1_000))
        .unwrap();
    for _ in 0..3 {
        assert!(decide(&limiter, "k", 1).is_allowed());
    }
    let denial: Decision = decide(&limiter, "k", 1);
    assert!(!denial.is_allowed());
    // The cell of T0 leaves the 10 s window at T0's cell start + 10 s: 9.5 s from T0.
    assert_eq!(denial.retry_after(), Duration::from_millis(9_500));

    let asked = incrs(&server);
    clock.advance(Duration::from_secs(4));
    for n in [1, 2, 3] {
        let local = decide(&limiter, "k", n);
        assert!(!local.is_allowed());
        assert_eq!(local.remaining(), 0);
        assert_eq!(local.retry_after(), Duration::from_millis(5_500));
    }
    assert_eq!(incrs(&server), asked, "a local denial went to memcached");
    assert_eq!(limiter.deny_cache().unwrap().denied_locally(), 3);
    // Another key is not affected.
    assert!(decide(&limiter, "other", 1).is_allowed());
    assert_eq!(incrs(&server), asked + 1);

    // At the retry time memcached is asked again, and has room.
    clock.advance(Duration::from_millis(5_500));
    assert!(decide(&limiter, "k", 3).is_allowed());
    assert_eq!(incrs(&server), asked + 2);
    assert_eq!(limiter.deny_cache().unwrap().denied_locally(), 3);
}
