//! `floodgate::redis` against real servers: each test starts its own `redis-server` (or a
//! 3-master Redis Cluster) on free loopback ports and kills it when done. Run with
//! `cargo test --features redis --test redis` (redis-server and redis-cli must be installed;
//! `scripts/test` installs them).

#[path = "redis/batch_scripts.rs"]
mod batch_scripts;
#[path = "redis/cluster.rs"]
mod cluster;
#[path = "redis/coalesce.rs"]
mod coalesce;
#[path = "redis/deadline.rs"]
mod deadline;
#[path = "redis/failure.rs"]
mod failure;
#[path = "support/lossy_proxy.rs"]
mod lossy_proxy;
#[path = "redis/outage.rs"]
mod outage;
#[path = "redis/server.rs"]
mod server;
#[path = "redis/single.rs"]
mod single;
#[path = "redis/uniform_batch.rs"]
mod uniform_batch;

use std::sync::Arc;
use std::time::Duration;

use floodgate::backend::FailurePolicy;
use floodgate::redis::{RedisAlgorithm, RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{FixedWindow, Gcra, Rate, SlidingLog, SlidingWindow};

/// Generous: a loaded CI machine must not turn into policy decisions in the exactness tests.
const TIMEOUT: Duration = Duration::from_secs(30);

fn backend(config: RedisConfig) -> RedisBackend {
    RedisBackend::blocking_connect(config.timeout(TIMEOUT)).expect("server up")
}

fn limiter<A: RedisAlgorithm>(backend: &RedisBackend, name: &str, algorithm: A) -> RedisLimiter<A> {
    RedisLimiter::new(backend, name, algorithm, FailurePolicy::FailClosed).expect("valid limiter")
}

/// Every algorithm with a limit of `limit` that cannot refill during a test run: 60 s windows
/// (the sliding window's first cell stays for at least 50 s) and a bucket refilling one permit
/// per hour. The aligned window is left out: its boundary may fall inside a run (tested apart).
fn for_each_algorithm(
    limit: u32,
    mut run: impl FnMut(&str, &dyn Fn(&RedisBackend, &str) -> Box<dyn Acquire>),
) {
    let minute = Duration::from_secs(60);
    run("fixed window", &move |b: &RedisBackend,
                               name: &str|
          -> Box<dyn Acquire> {
        Box::new(limiter(b, name, FixedWindow::new(limit, minute).unwrap()))
    });
    run("sliding window", &move |b: &RedisBackend,
                                 name: &str|
          -> Box<dyn Acquire> {
        Box::new(limiter(
            b,
            name,
            SlidingWindow::new(limit, minute, 6).unwrap(),
        ))
    });
    run("sliding log", &move |b: &RedisBackend,
                              name: &str|
          -> Box<dyn Acquire> {
        Box::new(limiter(b, name, SlidingLog::new(limit, minute).unwrap()))
    });
    run("gcra", &move |b: &RedisBackend,
                       name: &str|
          -> Box<dyn Acquire> {
        Box::new(limiter(
            b,
            name,
            Gcra::new(Rate::per_hour(1), limit).unwrap(),
        ))
    });
}

/// Object-safe view of a limiter for the table-driven tests.
trait Acquire: Send + Sync {
    fn try_acquire(&self, key: &str, n: u32) -> floodgate::backend::Outcome;
    fn redis_keys(&self, key: &str) -> Vec<String>;
}

impl<A: RedisAlgorithm> Acquire for RedisLimiter<A> {
    fn try_acquire(&self, key: &str, n: u32) -> floodgate::backend::Outcome {
        self.blocking_try_acquire_outcome(key, n)
            .expect("n within the limit")
    }
    fn redis_keys(&self, key: &str) -> Vec<String> {
        RedisLimiter::redis_keys(self, key)
    }
}

/// `threads` threads each try `attempts` single permits on `key`; returns how many were granted.
/// Any decision that came from the failure policy fails the test.
fn hammer(limiter: Arc<dyn Acquire>, key: &str, threads: usize, attempts: usize) -> usize {
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            let key = key.to_owned();
            std::thread::spawn(move || {
                (0..attempts)
                    .filter(|_| {
                        let outcome = limiter.try_acquire(&key, 1);
                        assert!(outcome.failure().is_none(), "{:?}", outcome.failure());
                        outcome.decision().is_allowed()
                    })
                    .count()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).sum()
}
