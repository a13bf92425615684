//! The async path (`try_acquire*` on the caller's tokio runtime) and timeouts on both paths: a
//! silent server makes every call give up at its timeout, not 4–8 ms later (the overruns are
//! printed; asserted only against a hang bound, since a loaded machine may wake late).

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::ManualClock;
use floodgate::SlidingWindow;
use floodgate::backend::{BreakerState, FailurePolicy};
use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};

use super::server::MemcachedServer;
use super::{T0, backend, limiter, stored_sum};

const CALL_BOUND: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_share_one_limit_exactly_on_the_callers_runtime() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    let clock = ManualClock::starting_at(T0);
    let limiter = Arc::new(limiter(&backend, "async", 50, 10, &clock));
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..10 {
                    let outcome = limiter.try_acquire_outcome("k", 1).await.unwrap();
                    assert!(outcome.failure().is_none(), "{:?}", outcome.failure());
                    admitted += u64::from(outcome.decision().is_allowed());
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    assert!(admitted <= 50, "admitted {admitted}");
    // Every denied request took its permit back: serial requests find exactly what is left.
    let mut topped = 0;
    while limiter.try_acquire("k", 1).await.unwrap().is_allowed() {
        topped += 1;
        assert!(topped <= 50);
    }
    assert_eq!(admitted + topped, 50, "admitted {admitted}, then {topped}");
    let current = limiter.cell_index(T0);
    assert_eq!(
        stored_sum(&server, &limiter, "k", current - 9..=current + 1),
        50
    );
    // The async and the blocking path share the same cells.
    assert!(!limiter.blocking_try_acquire("k", 1).unwrap().is_allowed());
}

/// A "server" that accepts every connection and never answers.
fn silent_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept() {
            held.push(socket);
        }
    });
    addr
}

fn silent_limiter(addr: &str, timeout: Duration) -> MemcachedLimiter<ManualClock> {
    let backend =
        MemcachedBackend::connect(MemcachedConfig::new(addr).timeout(timeout).lazy()).unwrap();
    let window = SlidingWindow::new(10, Duration::from_secs(60), 60).unwrap();
    let clock = ManualClock::starting_at(T0);
    MemcachedLimiter::with_clock(&backend, "silent", window, FailurePolicy::FailOpen, clock)
        .unwrap()
}

#[tokio::test]
async fn async_calls_to_a_silent_server_time_out_then_the_breaker_answers_at_once() {
    let timeout = Duration::from_millis(60);
    let limiter = silent_limiter(&silent_server(), timeout);
    let mut overruns = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let outcome = limiter.try_acquire_outcome("k", 1).await.unwrap();
        let elapsed = started.elapsed();
        assert!(elapsed >= timeout && elapsed < CALL_BOUND, "{elapsed:?}");
        assert!(outcome.failure().expect("policy").is_timeout());
        assert!(outcome.decision().is_allowed());
        overruns.push(elapsed - timeout);
    }
    eprintln!("async timeout overruns: {overruns:?}");
    assert_eq!(limiter.breaker().unwrap().state(), BreakerState::Open);
    // Open: decided without memcached. The counters prove it (a call sent to the silent
    // server would be a sixth timeout); the wall clock only guards against a hang.
    let started = Instant::now();
    let outcome = limiter.try_acquire_outcome("k", 1).await.unwrap();
    assert!(started.elapsed() < CALL_BOUND, "{:?}", started.elapsed());
    assert!(outcome.failure().expect("policy").is_circuit_open());
    assert_eq!(limiter.failures().timeouts, 5);
    assert_eq!(limiter.failures().short_circuited, 1);
}

#[test]
fn blocking_calls_to_a_silent_server_give_up_at_their_timeout() {
    let timeout = Duration::from_millis(60);
    let limiter = silent_limiter(&silent_server(), timeout).with_breaker(None);
    let mut overruns = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let outcome = limiter.blocking_try_acquire_outcome("k", 1).unwrap();
        let elapsed = started.elapsed();
        assert!(elapsed >= timeout && elapsed < CALL_BOUND, "{elapsed:?}");
        assert!(outcome.failure().expect("policy").is_timeout());
        overruns.push(elapsed - timeout);
    }
    eprintln!("blocking timeout overruns: {overruns:?}");
    assert_eq!(limiter.failures().timeouts, 5);
}

/// A flood of concurrent decisions (what a limiter is for) on one backend: each call used to
/// open its own connection when none was idle, so 3,000 at once ran memcached out of
/// connections (1,024 by default), and the refused calls (then the open breaker) were decided
/// by the policy: a fail-open limit of 10 admitted about 1,700. The backend now holds at most a
/// bounded number of connections; the other callers wait for one within their deadline.
#[test]
fn a_flood_of_concurrent_calls_is_decided_by_memcached_not_the_policy() {
    let server = MemcachedServer::start();
    let connections_before = server.stat("total_connections");
    let backend = backend(&server);
    let clock = ManualClock::starting_at(T0);
    let limiter = Arc::new(limiter(&backend, "flood", 10, 60, &clock));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let admitted = runtime.block_on(async {
        let tasks: Vec<_> = (0..3_000)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                tokio::spawn(async move { limiter.try_acquire_outcome("k", 1).await.unwrap() })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            let outcome = task.await.unwrap();
            assert!(outcome.failure().is_none(), "{:?}", outcome.failure());
            admitted += usize::from(outcome.decision().is_allowed());
        }
        admitted
    });
    // Never past the limit; a denial's permits, briefly counted, may have cost an admission
    // under this contention: serial calls then find exactly the rest.
    assert!(admitted <= 10, "{admitted} admitted");
    let rest = (0..10)
        .take_while(|_| super::decide(&limiter, "k", 1).is_allowed())
        .count();
    assert_eq!(admitted + rest, 10);
    assert_eq!(limiter.failures().total(), 0);
    let opened = server.stat("total_connections") - connections_before;
    eprintln!("flood: {opened} connections opened");
    assert!(opened <= 200, "{opened} connections opened");
}

/// A call whose exchange its runtime starts only after the call's deadline sends nothing, and
/// that says nothing about memcached: decided by the policy and counted as a timeout ("not
/// sent"), never told to the circuit breaker (as on Redis, issue 18). Before: each was reported
/// to the breaker as a failure of memcached, and two such calls opened it (2 failures) while
/// memcached answered; the third was short-circuited.
#[test]
fn an_exchange_started_past_its_deadline_sends_nothing_and_leaves_the_breaker_closed() {
    use floodgate::backend::BreakerConfig;
    let server = MemcachedServer::start();
    let timeout = Duration::from_millis(20);
    // Lazy: no startup check to fit in the short timeout.
    let backend =
        MemcachedBackend::connect(MemcachedConfig::new(server.addr()).timeout(timeout).lazy())
            .unwrap();
    let window = SlidingWindow::new(10, Duration::from_secs(60), 60).unwrap();
    let clock = ManualClock::starting_at(T0);
    let breaker = BreakerConfig::new(2, Duration::from_secs(5), Duration::from_secs(60)).unwrap();
    let limiter =
        MemcachedLimiter::with_clock(&backend, "late", window, FailurePolicy::FailClosed, clock)
            .unwrap()
            .with_breaker(Some(breaker));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for _ in 0..3 {
            let mut call = std::pin::pin!(limiter.try_acquire_outcome("k", 1));
            // The first poll spawns the exchange on this runtime, which runs it only once this
            // task yields.
            let first = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(call.as_mut().poll(cx).is_pending())
            });
            assert!(first.await, "answered on its first poll");
            // The runtime's one thread held past the call's deadline (at least `timeout`
            // passes; a loaded machine only makes it more).
            std::thread::sleep(timeout * 2);
            let outcome = call.await.unwrap();
            let error = outcome.failure().expect("decided by the policy");
            assert!(error.is_timeout(), "{error}");
            assert!(error.to_string().contains("not sent"), "{error}");
            assert!(!outcome.decision().is_allowed());
            assert_eq!(limiter.breaker().unwrap().state(), BreakerState::Closed);
        }
    });
    assert_eq!(limiter.failures().timeouts, 3);
    assert_eq!(limiter.failures().short_circuited, 0);
    // memcached saw no decision.
    assert_eq!(server.stat("incr_hits") + server.stat("incr_misses"), 0);
    assert_eq!(limiter.reclaims(), Default::default());
}
