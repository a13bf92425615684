//! A dropped `LeasedKey` gives back what it holds (issue 18): the unserved permits of its
//! current lease, and a refund it kept after a failed call, sent in the background on the
//! runtime current at the drop (or the backend's, outside one). Each test starts its own
//! `redis-server`; the limiters' clocks are manual, so no lease expires during a test. The
//! background refund is waited for by polling Redis's state until it changes, bounded by 10 s
//! of real time: the bound fails a hang, it does not time the refund.
#![cfg(feature = "redis")]

#[path = "redis/server.rs"]
mod server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::backend::FailurePolicy;
use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter, ReleaseError};
use floodgate::{Gcra, ManualClock, Rate};
use server::RedisServer;

const TIMEOUT: Duration = Duration::from_secs(1);
/// The real-time bound on a background refund: only a hang reaches it.
const HANG: Duration = Duration::from_secs(10);

/// GCRA of 1 permit an hour with a burst of 100: no permit comes back during a test.
fn hourly_gcra() -> Gcra {
    Gcra::new(Rate::per_hour(1), 100).unwrap()
}

/// A fail-closed [`hourly_gcra`] limiter named `name` on `backend`, on a manual clock.
fn hourly(backend: &RedisBackend, name: &str) -> Arc<RedisLimiter<Gcra, ManualClock>> {
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(backend, name, hourly_gcra(), policy, ManualClock::new());
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

async fn connect(server: &RedisServer) -> RedisBackend {
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    RedisBackend::connect(config).await.unwrap()
}

/// A key takes a lease of 8, serves 3 of it and is dropped: its 5 unserved permits go back to
/// Redis, and a per-call caller of the same key is admitted exactly 97 more. Before, they stayed
/// taken until the bucket's time passed them (here an hour a permit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_key_gives_its_unserved_permits_back() {
    let server = RedisServer::start();
    let backend = connect(&server).await;
    let limiter = hourly(&backend, "drop");
    let probe = probe(&backend, "drop");
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    for _ in 0..3 {
        assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    }
    assert_eq!((leased.counts().leased, leased.counts().held), (8, 5));
    assert_eq!(taken(&probe).await, 8);

    drop(leased);
    assert_eq!(taken_becomes(&probe, 3).await, 3, "the 5 unserved came back");
    assert!(probe.try_acquire("k", 97).await.unwrap().is_allowed());
    assert!(!probe.try_acquire("k", 1).await.unwrap().is_allowed());
}

/// A refund kept after a failed call (Redis frozen past its timeout) is given back by the drop,
/// under its name, once Redis answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_key_gives_its_kept_refund_back() {
    let server = RedisServer::start();
    let backend = connect(&server).await;
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
    let guard = Instant::now() + HANG;
    let mut left = probe.blocking_try_acquire_outcome("k", 100).unwrap();
    while left.decision().remaining() != 99 && Instant::now() < guard {
        std::thread::sleep(Duration::from_millis(5));
        left = probe.blocking_try_acquire_outcome("k", 100).unwrap();
    }
    assert_eq!(left.decision().remaining(), 99, "the 7 unserved came back: {left:?}");
}
