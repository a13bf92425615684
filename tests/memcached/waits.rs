//! Issue 18's vocabulary on memcached, as on Redis: `acquire` (waits, returns the time waited),
//! `try_acquire_for` (waits only what fits in its budget; a try cut short by that budget is a
//! plain denial, one cut short by the backend's timeout an outage for the policy), their
//! `blocking_*` forms, and the startup check (`connect` is eager unless `lazy()`).
//!
//! The blocking forms sleep on the limiter's clock, so with a `ManualClock` they never sleep:
//! the clock records the sleeps. The async forms sleep on tokio's timer and are tested on the
//! real clock with a short window; their assertions are causal (what a zero wait would prove),
//! never durations. Wall-clock bounds are hang bounds only.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::{Duration, Instant};

use floodgate::backend::{BreakerConfig, BreakerState, FailureKind, FailurePolicy, RequestError};
use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
use floodgate::{AcquireError, Clock, ManualClock, SlidingWindow};

use super::server::{MemcachedServer, free_port};
use super::{T0, TIMEOUT, backend, limiter};

/// A hang bound, not a speed test: only a call that ignores its timeout or sleeps a wait that
/// did not fit takes this long.
const HANG: Duration = Duration::from_secs(60);

/// `limit` per second in ten 100 ms cells, failing closed, on the real clock.
fn real_clock_limiter(backend: &MemcachedBackend, name: &str, limit: u32) -> MemcachedLimiter {
    let window = SlidingWindow::new(limit, Duration::from_secs(1), 10).unwrap();
    MemcachedLimiter::new(backend, name, window, FailurePolicy::FailClosed).unwrap()
}

/// A limiter on a lazy backend at `addr` timing out after `timeout`, under `policy`.
fn lazy_limiter(
    addr: &str,
    timeout: Duration,
    policy: FailurePolicy,
) -> MemcachedLimiter<ManualClock> {
    let backend =
        MemcachedBackend::connect(MemcachedConfig::new(addr).timeout(timeout).lazy()).unwrap();
    let window = SlidingWindow::new(10, Duration::from_secs(60), 60).unwrap();
    MemcachedLimiter::with_clock(
        &backend,
        "waits",
        window,
        policy,
        ManualClock::starting_at(T0),
    )
    .unwrap()
}

#[test]
fn blocking_acquire_sleeps_the_announced_wait_on_the_limiters_clock_and_returns_it() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let limiter = limiter(&backend(&server), "acquire", 2, 10, &clock);
    assert_eq!(limiter.blocking_acquire("k", 2).unwrap(), Duration::ZERO);
    assert!(clock.sleeps().is_empty(), "admitted at once: no sleep");
    // Full: memcached announces when the first cell leaves the window (9.5 s: T0 is mid-cell).
    let denied = limiter.blocking_try_acquire("k", 1).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Duration::from_millis(9_500));
    let waited = limiter.blocking_acquire("k", 1).unwrap();
    // One sleep of the announced wait on the limiter's clock, then the admission.
    assert_eq!(clock.sleeps(), vec![Duration::from_millis(9_500)]);
    // Measured: at least what the clock moved (more only if the round trips took longer).
    assert!(waited >= Duration::from_millis(9_500), "{waited:?}");
    assert!(waited < Duration::from_millis(9_500) + HANG, "{waited:?}");
    assert_eq!(
        limiter.failures().total(),
        0,
        "memcached decided, not the policy"
    );
    // The admission was counted: the window (cells of the last 10 s) holds it.
    assert!(!limiter.blocking_try_acquire("k", 2).unwrap().is_allowed());
}

#[test]
fn blocking_try_acquire_for_sleeps_only_a_wait_that_fits_and_takes_nothing_otherwise() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let limiter = limiter(&backend(&server), "for", 2, 10, &clock);
    assert!(limiter.blocking_try_acquire("k", 2).unwrap().is_allowed());
    // 9.5 s to wait does not fit in 9 s: denied at once, no sleep, nothing taken.
    let denied = limiter
        .blocking_try_acquire_for("k", 1, Duration::from_secs(9))
        .unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Duration::from_millis(9_500));
    assert!(clock.sleeps().is_empty(), "slept {:?}", clock.sleeps());
    assert_eq!(limiter.failures().total(), 0);
    let current = limiter.cell_index(clock.now_nanos());
    assert_eq!(
        super::stored_sum(&server, &limiter, "k", current - 9..=current),
        2,
        "the denial's increment was taken back"
    );
    // It fits in 40 s (the round trips count too, and take far less than 30 s): one sleep of
    // the announced wait, then the admission.
    let admitted = limiter
        .blocking_try_acquire_for("k", 1, Duration::from_secs(40))
        .unwrap();
    assert!(admitted.is_allowed());
    assert_eq!(clock.sleeps(), vec![Duration::from_millis(9_500)]);
    // A timeout too long for an Instant is no bound (not a panic): admitted at once here.
    clock.advance(Duration::from_secs(60));
    assert!(
        limiter
            .blocking_try_acquire_for("k", 1, Duration::MAX)
            .unwrap()
            .is_allowed()
    );
}

#[test]
fn bad_input_gets_the_same_errors_from_every_new_method() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let limiter = limiter(&backend(&server), "bad", 5, 10, &clock);
    let zero = Err(RequestError::Permits(AcquireError::ZeroPermits));
    let over = Err(RequestError::Permits(AcquireError::ExceedsCapacity {
        requested: 6,
        capacity: 5,
    }));
    let second = Duration::from_secs(1);
    assert_eq!(limiter.blocking_acquire("k", 0).map(drop), zero);
    assert_eq!(limiter.blocking_acquire("k", 6).map(drop), over);
    assert_eq!(
        limiter.blocking_try_acquire_for("k", 0, second).map(drop),
        zero
    );
    assert_eq!(
        limiter.blocking_try_acquire_for("k", 6, second).map(drop),
        over
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        assert_eq!(limiter.acquire("k", 0).await.map(drop), zero);
        assert_eq!(limiter.acquire("k", 6).await.map(drop), over);
        assert_eq!(
            limiter.try_acquire_for("k", 0, second).await.map(drop),
            zero
        );
        assert_eq!(
            limiter.try_acquire_for("k", 6, second).await.map(drop),
            over
        );
        // A timeout too long for an Instant is no bound, not a panic.
        let d = limiter
            .try_acquire_for("k", 1, Duration::MAX)
            .await
            .unwrap();
        assert!(d.is_allowed());
    });
    // A key too long for memcached, before anything is sent.
    let long = "k".repeat(250);
    assert!(matches!(
        limiter.blocking_acquire(&long, 1),
        Err(RequestError::KeyTooLong { max: 250, .. })
    ));
    assert_eq!(limiter.failures().total(), 0);
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn acquire_waits_on_tokios_timer_and_returns_the_time_waited() {
    let server = MemcachedServer::start();
    let limiter = real_clock_limiter(&backend(&server), "async-acquire", 1);
    // The first admission lands in a cell at or after `opened`; that cell stays in the window
    // until at least 900 ms (the window less a cell) after it. So if less than 900 ms passed
    // from `opened` to the second acquire's return, its first try found the window full and a
    // zero wait is the bug, however long each step took on a loaded machine.
    let opened = Instant::now();
    assert_eq!(limiter.acquire("k", 1).await.unwrap(), Duration::ZERO);
    let asked = Instant::now();
    let waited = limiter.acquire("k", 1).await.unwrap();
    let took = asked.elapsed();
    assert!(waited <= took, "{waited:?} > {took:?}");
    if waited.is_zero() {
        assert!(
            opened.elapsed() >= Duration::from_millis(900),
            "admitted at once {:?} after the window filled",
            opened.elapsed()
        );
    }
    assert!(took < HANG, "{took:?}");
    assert_eq!(limiter.failures().total(), 0);
}

#[tokio::test]
async fn try_acquire_for_sleeps_only_a_wait_that_fits() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    // An hour-long window in 60 s cells, full.
    let window = SlidingWindow::new(2, Duration::from_secs(3600), 60).unwrap();
    let hourly = MemcachedLimiter::with_clock(
        &backend(&server),
        "async-for",
        window,
        FailurePolicy::FailClosed,
        clock.clone(),
    )
    .unwrap();
    assert!(hourly.try_acquire("k", 2).await.unwrap().is_allowed());
    // About an hour to wait does not fit in 20 s: denied at once, nothing taken. Had it slept
    // the announced wait, the call would last an hour (caught by the hang bound); the denial's
    // retry_after shows memcached decided (a try cut by the budget would say 30 s, the
    // backend's timeout), and the stored count that nothing was taken.
    let given = Duration::from_secs(20);
    let started = Instant::now();
    let denied = hourly.try_acquire_for("k", 1, given).await.unwrap();
    let took = started.elapsed();
    assert!(!denied.is_allowed());
    assert!(
        denied.retry_after() > Duration::from_secs(3000),
        "{denied:?}"
    );
    assert!(took < given, "slept: {took:?}");
    assert_eq!(hourly.failures().total(), 0);
    let current = hourly.cell_index(clock.now_nanos());
    assert_eq!(
        super::stored_sum(&server, &hourly, "k", current - 59..=current),
        2
    );

    // On the real clock with 100 ms cells, a wait of at most a second fits in 40 s: slept on
    // tokio's timer, then admitted.
    let limiter = real_clock_limiter(&backend(&server), "async-fits", 1);
    assert!(limiter.try_acquire("k", 1).await.unwrap().is_allowed());
    let started = Instant::now();
    let admitted = limiter
        .try_acquire_for("k", 1, Duration::from_secs(40))
        .await
        .unwrap();
    assert!(admitted.is_allowed(), "{admitted:?}");
    assert!(started.elapsed() < HANG);
    assert_eq!(limiter.failures().total(), 0);
}

/// A stopped server (SIGSTOP): a try cut short by the backend's own timeout, shorter than the
/// caller's budget, is an outage: the policy decides (fail-open admits) and it is counted.
#[test]
fn a_stopped_server_is_decided_by_the_policy_when_the_backend_timeout_cuts_the_try() {
    let server = MemcachedServer::start();
    let limiter = lazy_limiter(
        &server.addr(),
        Duration::from_millis(150),
        FailurePolicy::FailOpen,
    );
    server.pause();
    let started = Instant::now();
    let d = limiter
        .blocking_try_acquire_for("k", 1, Duration::from_secs(20))
        .unwrap();
    assert!(started.elapsed() < HANG, "{:?}", started.elapsed());
    assert!(d.is_allowed(), "fail-open admits: {d:?}");
    assert_eq!(limiter.failures().timeouts, 1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let d = runtime
        .block_on(limiter.try_acquire_for("k", 1, Duration::from_secs(20)))
        .unwrap();
    assert!(started.elapsed() < HANG, "{:?}", started.elapsed());
    assert!(d.is_allowed(), "fail-open admits: {d:?}");
    assert_eq!(limiter.failures().timeouts, 2);
    server.resume();
}

/// A stopped server and a caller's budget shorter than the backend's timeout: the try cut
/// short by the budget says nothing about memcached, so it is a plain denial (fail-open would
/// have admitted), not counted, and the breaker does not hear of it; the call returns within
/// its budget, not the backend's 60 s timeout.
#[test]
fn a_try_cut_short_by_the_callers_budget_is_a_plain_denial_not_an_outage() {
    let server = MemcachedServer::start();
    // A breaker that opens on the first failure reported to it: closed at the end shows it
    // heard of none.
    let breaker = BreakerConfig::new(1, Duration::from_secs(1), Duration::from_secs(8)).unwrap();
    let limiter = lazy_limiter(
        &server.addr(),
        Duration::from_secs(60),
        FailurePolicy::FailOpen,
    )
    .with_breaker(Some(breaker));
    // memcached answers first: within the backend's timeout of that answer, a cut is the
    // caller's (a backend that never had an answer looks down: the test below).
    assert!(
        limiter
            .blocking_try_acquire("warm", 1)
            .unwrap()
            .is_allowed()
    );
    server.pause();
    let budget = Duration::from_millis(200);
    let started = Instant::now();
    let d = limiter.blocking_try_acquire_for("k", 1, budget).unwrap();
    let took = started.elapsed();
    assert!(!d.is_allowed(), "a plain denial, not fail-open's admission");
    assert!(
        took < Duration::from_secs(30),
        "waited the backend's timeout: {took:?}"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    let d = runtime
        .block_on(limiter.try_acquire_for("k", 1, budget))
        .unwrap();
    let took = started.elapsed();
    assert!(!d.is_allowed(), "a plain denial, not fail-open's admission");
    assert!(
        took < Duration::from_secs(30),
        "waited the backend's timeout: {took:?}"
    );
    assert_eq!(limiter.failures().total(), 0, "no backend failure counted");
    let breaker = limiter.breaker().unwrap();
    assert_eq!(breaker.state(), BreakerState::Closed);
    server.resume();
}

/// A try cut short by the caller's budget while memcached has not answered for a whole
/// backend timeout (or never has: a lazy backend) is an outage as any other: decided by the
/// policy (fail-open admits) and counted as a timeout, but not reported to the breaker (a
/// caller's cut proves nothing alone), as on Redis.
#[test]
fn a_try_cut_short_while_memcached_has_not_answered_for_a_timeout_is_the_policys() {
    let server = MemcachedServer::start();
    let breaker = BreakerConfig::new(1, Duration::from_secs(1), Duration::from_secs(8)).unwrap();
    let timeout = Duration::from_millis(300);
    let budget = Duration::from_millis(20);
    // Never answered (lazy, paused from the start): the policy's at once.
    server.pause();
    let never = lazy_limiter(
        &server.addr(),
        Duration::from_secs(60),
        FailurePolicy::FailOpen,
    )
    .with_breaker(Some(breaker));
    let d = never.blocking_try_acquire_for("k", 1, budget).unwrap();
    assert!(d.is_allowed(), "fail-open's admission: {d:?}");
    assert_eq!(never.failures().timeouts, 1);
    assert_eq!(never.breaker().unwrap().state(), BreakerState::Closed);
    server.resume();

    // Answered, then paused: the caller's cut until a timeout has passed since the answer.
    let limiter =
        lazy_limiter(&server.addr(), timeout, FailurePolicy::FailOpen).with_breaker(Some(breaker));
    let answered = Instant::now();
    assert!(
        limiter
            .blocking_try_acquire("warm", 1)
            .unwrap()
            .is_allowed()
    );
    server.pause();
    loop {
        let d = limiter.blocking_try_acquire_for("k", 1, budget).unwrap();
        if d.is_allowed() {
            break;
        }
        assert_eq!(d.retry_after(), timeout, "the caller's cut: {d:?}");
        assert_eq!(limiter.failures().total(), 0);
        assert!(answered.elapsed() < HANG, "no try decided by the policy");
    }
    // Only once a whole backend timeout passed since the answer (a lower bound: load cannot
    // fail it).
    assert!(
        answered.elapsed() >= timeout,
        "after {:?}",
        answered.elapsed()
    );
    assert_eq!(limiter.failures().timeouts, 1);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let d = runtime
        .block_on(limiter.try_acquire_for("k", 1, budget))
        .unwrap();
    assert!(d.is_allowed(), "async alike: {d:?}");
    assert_eq!(limiter.failures().timeouts, 2);
    assert_eq!(limiter.breaker().unwrap().state(), BreakerState::Closed);
    server.resume();
}

#[test]
fn connect_fails_at_startup_on_a_closed_port_naming_the_server_unless_lazy() {
    let addr = format!("127.0.0.1:{}", free_port());
    let config = MemcachedConfig::new(&addr).timeout(TIMEOUT);
    let started = Instant::now();
    let refused = MemcachedBackend::connect(config.clone()).unwrap_err();
    assert!(started.elapsed() < HANG);
    assert_eq!(refused.kind(), FailureKind::Refused, "{refused}");
    let text = refused.to_string();
    assert!(text.contains(&format!("memcached://{addr}")), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
    // Lazy: made at once; the first call finds the port closed and the policy decides.
    let lazy = MemcachedBackend::connect(config.lazy()).unwrap();
    let window = SlidingWindow::new(10, Duration::from_secs(60), 60).unwrap();
    let limiter = MemcachedLimiter::new(&lazy, "lazy", window, FailurePolicy::FailClosed).unwrap();
    let outcome = limiter.blocking_try_acquire_outcome("k", 1).unwrap();
    assert_eq!(outcome.failure().unwrap().kind(), FailureKind::Refused);
}

#[test]
fn connect_fails_at_startup_on_a_stopped_server_or_one_that_is_not_memcached() {
    // Stopped (SIGSTOP): the kernel accepts the connection, nothing answers `version`.
    let server = MemcachedServer::start();
    server.pause();
    let config = MemcachedConfig::new(server.addr()).timeout(Duration::from_millis(300));
    let started = Instant::now();
    let silent = MemcachedBackend::connect(config).unwrap_err();
    assert!(started.elapsed() < HANG);
    assert_eq!(silent.kind(), FailureKind::Timeout, "{silent}");
    assert!(
        silent
            .to_string()
            .contains(&format!("memcached://{}", server.addr())),
        "{silent}"
    );
    server.resume();
    // Back: connects, and the connection it checked serves the first call.
    let backend = MemcachedBackend::connect(MemcachedConfig::new(server.addr()).timeout(TIMEOUT))
        .expect("memcached answers");
    let clock = ManualClock::starting_at(T0);
    let limiter = limiter(&backend, "up", 1, 10, &clock);
    assert!(super::decide(&limiter, "k", 1).is_allowed());

    // Something else on the port (an HTTP server, say): a protocol error, naming the server.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let http = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let mut request = [0u8; 64];
        let _ = socket.read(&mut request);
        let _ = socket.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
    });
    let wrong =
        MemcachedBackend::connect(MemcachedConfig::new(&addr).timeout(TIMEOUT)).unwrap_err();
    http.join().unwrap();
    assert_eq!(wrong.kind(), FailureKind::Protocol, "{wrong}");
    assert!(
        wrong.to_string().contains(&format!("memcached://{addr}")),
        "{wrong}"
    );
}

/// Every async call outside a tokio runtime is a `RequestError::Runtime` naming what to do, as
/// on Redis, not a panic (polled here by a plain executor: no runtime context).
#[test]
fn async_calls_outside_a_tokio_runtime_are_an_error_not_a_panic() {
    let limiter = lazy_limiter("127.0.0.1:1", TIMEOUT, FailurePolicy::FailOpen);
    let runtime_error = |result: Result<(), RequestError>| match result {
        Err(RequestError::Runtime(why)) => assert!(why.contains("blocking_"), "{why}"),
        other => panic!("expected a Runtime error, got {other:?}"),
    };
    runtime_error(block_on(limiter.try_acquire("k", 1)).map(drop));
    runtime_error(block_on(limiter.try_acquire_outcome("k", 1)).map(drop));
    runtime_error(block_on(limiter.acquire("k", 1)).map(drop));
    runtime_error(block_on(limiter.try_acquire_for("k", 1, Duration::from_secs(1))).map(drop));
}

/// Polls `future` to completion on this thread, with no runtime context (a waker that unparks
/// the thread).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    let started = Instant::now();
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        assert!(started.elapsed() < HANG, "hung");
        std::thread::park_timeout(Duration::from_millis(10));
    }
}
