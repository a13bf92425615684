//! A `RedisLimiter` call whose deadline has passed before its request would be written sends
//! nothing (issue 18): `RedisBackend::eval` used to poll the call (which writes the request)
//! before looking at the deadline, so a request with no time left still reached Redis, where
//! the script refuses it only while the server's clock offset is known (not on a lazy backend
//! before its first reply: there it took its permits for a caller that had given up). Starts
//! its own `redis-server`; no sleeps; real time only bounds a hang.
#![cfg(feature = "redis")]

#[path = "redis/server.rs"]
mod server;

use std::time::Duration;

use floodgate::backend::FailurePolicy;
use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{Gcra, Rate};
use server::RedisServer;

/// The backend's timeout: a live server's answer never misses it.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How long a step may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(60);

/// A try given no time (`try_acquire_for` with a zero timeout: its deadline is the moment it
/// was asked) reaches the coalescer's one-call path with its deadline already passed. It is
/// decided as a try cut short by the caller's own deadline (denied, Redis answering), and
/// nothing goes to the server: the `EVALSHA` count moves only by the call after it (answered
/// on the same connection after anything the try wrote), and Redis took nothing for the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_with_no_time_left_sends_nothing() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let gcra = Gcra::new(Rate::per_hour(1), 100).unwrap();
    let limiter = RedisLimiter::new(&backend, "unsent", gcra, FailurePolicy::FailOpen).unwrap();
    // The script loaded (a first call's NOSCRIPT would need more polls), a reply in.
    let warm = limiter.try_acquire_outcome("warm", 1).await.unwrap();
    assert!(
        warm.failure().is_none() && warm.decision().is_allowed(),
        "{warm:?}"
    );
    let before = server.calls("evalsha");

    let tried = tokio::time::timeout(HANG, limiter.try_acquire_for("k", 1, Duration::ZERO));
    let tried = tried.await.expect("a try with no time hung").unwrap();
    assert!(!tried.is_allowed(), "{tried:?}");

    // A call after it on the same connection: once answered, anything the try wrote was run.
    let flushed = limiter.try_acquire_outcome("other", 1).await.unwrap();
    assert!(flushed.failure().is_none(), "{flushed:?}");
    assert_eq!(
        server.calls("evalsha"),
        before + 1,
        "the try with no time left was sent (refused as late, or run) before the call after it"
    );
    // Nothing taken for the key: a request for all 100 of its hourly bucket is granted.
    let all = limiter.try_acquire_outcome("k", 100).await.unwrap();
    assert!(
        all.failure().is_none() && all.decision().is_allowed(),
        "{all:?}"
    );
    assert_eq!(
        limiter.failures().total(),
        0,
        "a caller's own cut, Redis answering"
    );
}
