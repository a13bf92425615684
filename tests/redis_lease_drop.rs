//! A dropped `LeasedKey` gives back what it holds (issue 18): the unserved permits of its
//! current lease, and a refund it kept after a failed call, sent in the background on the
//! runtime that built the backend's connection. Each test starts its own
//! `redis-server`; the limiters' clocks are manual, so no lease expires during a test. The
//! background refund is waited for by polling Redis's state until it changes, bounded by 60 s
//! of real time: the bound fails a hang, it does not time the refund.
#![cfg(feature = "redis")]

#[path = "redis/server.rs"]
mod server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::backend::{BreakerConfig, BreakerState, FailurePolicy};
use floodgate::redis::{
    DroppedLeases, LeasedKey, RedisBackend, RedisConfig, RedisLimiter, ReleaseError,
};
use floodgate::{Gcra, ManualClock, Rate};
use server::RedisServer;

/// The backend's timeout where no call must time out: a live server's answer never misses it,
/// however loaded the machine.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The backend's timeout where a call to a frozen server must time out (as the Redis cluster
/// tests'): a live server's answer does not miss it on a loaded machine, as it could 1 s.
const SHORT: Duration = Duration::from_secs(2);
/// The real-time bound on a background refund: only a hang reaches it.
const HANG: Duration = Duration::from_secs(60);

/// GCRA of 1 permit an hour with a burst of 100: no permit comes back during a test.
fn hourly_gcra() -> Gcra {
    Gcra::new(Rate::per_hour(1), 100).unwrap()
}

/// A fail-closed [`hourly_gcra`] limiter named `name` on `backend`, on a manual clock.
fn hourly(backend: &RedisBackend, name: &str) -> Arc<RedisLimiter<Gcra, ManualClock>> {
    let policy = FailurePolicy::FailClosed;
    let limiter =
        RedisLimiter::with_clock(backend, name, hourly_gcra(), policy, ManualClock::new());
    Arc::new(limiter.unwrap())
}

/// A limiter on the same Redis key as [`hourly`]'s `name` without a deny cache (each probe asks
/// Redis; a cached denial would answer from the first probe's report).
fn probe(backend: &RedisBackend, name: &str) -> RedisLimiter<Gcra> {
    let limiter = RedisLimiter::new(backend, name, hourly_gcra(), FailurePolicy::FailClosed);
    limiter.unwrap().with_deny_cache(None).unwrap()
}

/// What Redis has taken from key "k" of `probe`'s bucket: a request for the whole capacity,
/// whose denial reports exactly what is left (and changes nothing).
async fn taken(probe: &RedisLimiter<Gcra>) -> u64 {
    let outcome = probe.try_acquire_outcome("k", 100).await.unwrap();
    assert!(
        outcome.failure().is_none() && !outcome.decision().is_allowed(),
        "{outcome:?}"
    );
    100 - outcome.decision().remaining()
}

/// Polls [`taken`] until it reads `expected`, at most [`HANG`] of real time; returns the last
/// reading.
async fn taken_becomes(probe: &RedisLimiter<Gcra>, expected: u64) -> u64 {
    let guard = Instant::now() + HANG;
    loop {
        let now = taken(probe).await;
        if now == expected || Instant::now() > guard {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What is left of key "k" of `probe`'s bucket, read from a blocking caller (a request for the
/// whole capacity, denied: it changes nothing), polled until it reads `expected`, at most
/// [`HANG`] of real time; returns the last reading.
fn blocking_left_becomes(probe: &RedisLimiter<Gcra>, expected: u64) -> u64 {
    let guard = Instant::now() + HANG;
    loop {
        let left = probe.blocking_try_acquire_outcome("k", 100).unwrap();
        assert!(left.failure().is_none(), "{left:?}");
        let left = left.decision().remaining();
        if left == expected || Instant::now() > guard {
            return left;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Polls `limiter`'s [`DroppedLeases`] until no dropped key's refund is out, at most [`HANG`]
/// of real time; returns the last reading.
async fn settled<C: floodgate::Clock + Clone>(limiter: &RedisLimiter<Gcra, C>) -> DroppedLeases {
    let guard = Instant::now() + HANG;
    loop {
        let counts = limiter.dropped_leases();
        if counts.in_flight() == 0 || Instant::now() > guard {
            return counts;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A backend on `server` timing out after `timeout`.
async fn connect(server: &RedisServer, timeout: Duration) -> RedisBackend {
    let config = RedisConfig::single(server.url()).timeout(timeout);
    RedisBackend::connect(config).await.unwrap()
}

/// A key takes a lease of 8, serves 3 of it and is dropped: its 5 unserved permits go back to
/// Redis, and a per-call caller of the same key is admitted exactly 97 more. Before, they stayed
/// taken until the bucket's time passed them (here an hour a permit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_key_gives_its_unserved_permits_back() {
    let server = RedisServer::start();
    let backend = connect(&server, TIMEOUT).await;
    let limiter = hourly(&backend, "drop");
    let probe = probe(&backend, "drop");
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    for _ in 0..3 {
        assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    }
    assert_eq!((leased.counts().leased, leased.counts().held), (8, 5));
    assert_eq!(taken(&probe).await, 8);

    drop(leased);
    assert_eq!(
        taken_becomes(&probe, 3).await,
        3,
        "the 5 unserved came back"
    );
    assert!(probe.try_acquire("k", 97).await.unwrap().is_allowed());
    assert!(!probe.try_acquire("k", 1).await.unwrap().is_allowed());
    let counts = DroppedLeases {
        refunds: 1,
        permits: 5,
        refunded: 5,
        stranded: 0,
    };
    assert_eq!(settled(&limiter).await, counts);
    assert_eq!(limiter.failures().total(), 0);
}

/// A refund kept after a failed call (Redis frozen past its timeout) is given back by the drop,
/// under its name, once Redis answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_key_gives_its_kept_refund_back() {
    let server = RedisServer::start();
    let backend = connect(&server, SHORT).await;
    let limiter = hourly(&backend, "kept");
    let probe = probe(&backend, "kept");
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);

    // The refund's call times out (when the server thaws it is refused as late): kept.
    server.freeze();
    let released = leased.release().await;
    server.thaw();
    assert!(
        matches!(&released, Err(ReleaseError::Refund { permits: 7, error }) if error.is_timeout()),
        "{released:?}"
    );
    assert_eq!(taken(&probe).await, 8, "the timed-out refund did not land");

    drop(leased);
    assert_eq!(taken_becomes(&probe, 1).await, 1, "the kept 7 came back");
    let counts = DroppedLeases {
        refunds: 1,
        permits: 7,
        refunded: 7,
        stranded: 0,
    };
    assert_eq!(settled(&limiter).await, counts);
}

/// A key dropped outside any runtime (a blocking caller, on a backend with its own runtime)
/// neither panics nor blocks, and its unserved permits still go back (sent on the backend's
/// runtime).
#[test]
fn a_key_dropped_outside_a_runtime_gives_back_without_blocking() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::blocking_connect(config).unwrap();
    let limiter = hourly(&backend, "sync");
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.blocking_try_acquire(1).unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);

    drop(leased);
    let probe = probe(&backend, "sync");
    assert_eq!(
        blocking_left_becomes(&probe, 99),
        99,
        "the 7 unserved came back"
    );
}

/// A key whose `release` gave its permits back, and one that never took a lease, send nothing
/// when dropped: counted at the drop (none), and the server runs no script for them. The
/// server's count of scripts is checked after a third key's drop refund (one script) has
/// come back: had either of the first two sent one, the count would be one more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_key_and_one_holding_nothing_send_nothing_on_drop() {
    let server = RedisServer::start();
    let backend = connect(&server, TIMEOUT).await;
    let limiter = hourly(&backend, "nothing");
    let released = LeasedKey::new(Arc::clone(&limiter), "j");
    assert!(released.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(released.release().await.unwrap(), 7);
    let held = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(held.try_acquire(1).await.unwrap().is_allowed());
    let scripts = server.calls("evalsha");

    drop(released);
    drop(LeasedKey::new(Arc::clone(&limiter), "never"));
    assert_eq!(limiter.dropped_leases(), DroppedLeases::default());
    drop(held);
    let counts = DroppedLeases {
        refunds: 1,
        permits: 7,
        refunded: 7,
        stranded: 0,
    };
    assert_eq!(settled(&limiter).await, counts);
    assert_eq!(
        server.calls("evalsha"),
        scripts + 1,
        "only the held key's refund"
    );
}

/// A drop's refund whose call fails (Redis frozen past the timeout) is not retried: its permits
/// are counted stranded, the failure in the limiter's failures. (When the server thaws it
/// refuses the refund as late: the 7 stay taken.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_refund_that_fails_is_counted_stranded_and_a_failure() {
    let server = RedisServer::start();
    let backend = connect(&server, SHORT).await;
    let limiter = hourly(&backend, "failed");
    let probe = probe(&backend, "failed");
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());

    server.freeze();
    drop(leased);
    let counts = settled(&limiter).await;
    server.thaw();
    assert_eq!(
        counts,
        DroppedLeases {
            refunds: 1,
            permits: 7,
            refunded: 0,
            stranded: 7
        }
    );
    assert_eq!(limiter.failures().timeouts, 1, "{:?}", limiter.failures());
    assert_eq!(taken(&probe).await, 8);
}

/// A drop's refund the breaker does not let out (open) is not sent: counted stranded and
/// short-circuited, and the server runs no script for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_refund_the_breaker_holds_back_is_counted_stranded() {
    let server = RedisServer::start();
    let backend = connect(&server, TIMEOUT).await;
    let one = BreakerConfig::new(1, Duration::from_secs(60), Duration::from_secs(60)).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter =
        RedisLimiter::with_clock(&backend, "open", hourly_gcra(), policy, ManualClock::new());
    let limiter = Arc::new(limiter.unwrap().with_breaker(Some(one)));
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    let breaker = limiter.breaker().unwrap().shared();
    breaker.admit().expect("closed").failed();
    assert_eq!(breaker.state(), BreakerState::Open);
    let scripts = server.calls("evalsha");

    drop(leased);
    assert_eq!(
        settled(&limiter).await,
        DroppedLeases {
            refunds: 1,
            permits: 7,
            refunded: 0,
            stranded: 7
        }
    );
    assert_eq!(limiter.failures().short_circuited, 1);
    assert_eq!(server.calls("evalsha"), scripts, "nothing sent");
}

/// A key dropped on a current-thread runtime that is itself dropped before it runs the refund's
/// task: the task is dropped unrun, its permits counted stranded (nothing hangs or panics).
#[test]
fn a_drop_refund_whose_runtime_shuts_down_first_is_counted_stranded() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // The connection is built on this runtime: the drop's task is spawned on it.
    let backend = runtime.block_on(RedisBackend::connect(config)).unwrap();
    let limiter = hourly(&backend, "shut");
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    runtime.block_on(async {
        assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    });
    // Spawned on this runtime, which returns from `block_on` without running it.
    runtime.block_on(async move { drop(leased) });
    assert_eq!(limiter.dropped_leases().in_flight(), 7);
    drop(runtime);
    assert_eq!(
        limiter.dropped_leases(),
        DroppedLeases {
            refunds: 1,
            permits: 7,
            refunded: 0,
            stranded: 7
        }
    );
}

/// A key dropped on a runtime without timers (its task, spawned there, would panic at the
/// refund's timeout) gives back on the runtime that built the backend's connection, which
/// drives the connection and has them. Before, the refund's task ran on the dropping runtime,
/// panicked, and the 7 permits were counted stranded.
#[test]
fn a_key_dropped_on_a_runtime_without_timers_gives_back_on_the_connections_runtime() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::blocking_connect(config).unwrap();
    let limiter = hourly(&backend, "timerless");
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.blocking_try_acquire(1).unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);
    let timerless = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    timerless.block_on(async move {
        drop(leased);
        // Lets a task spawned here run (and, before, panic).
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    });
    let probe = probe(&backend, "timerless");
    assert_eq!(blocking_left_becomes(&probe, 99), 99, "the 7 came back");
    let guard = Instant::now() + HANG;
    while limiter.dropped_leases().in_flight() > 0 && Instant::now() < guard {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(limiter.dropped_leases().refunded, 7);
}
