//! Decisions per second at 1 and 16 concurrent callers (OS threads, sync calls), against a local
//! memcached and a local redis-server that the bench starts on free loopback ports:
//!
//! * floodgate's memcached sliding window, allowed (one round trip: add + incr + multi-get);
//! * the same, denied (a second round trip: the decr that takes the permit back);
//! * floodgate's Redis sliding window (`floodgate::SlidingWindow` on Redis, one EVALSHA);
//! * the seeds' naive memcached read-then-increment (two round trips, and racy).
//!
//! All windows are 60 s in 1 s cells. Throughput is printed as elements/s = decisions/s.
//! `cargo bench --features memcached,redis --bench memcached -- --warm-up-time 1 --measurement-time 2`
// Both server harnesses below include tests/support/process.rs, each as its own private module.
#![allow(clippy::duplicate_mod)]

#[path = "../tests/memcached/server.rs"]
mod memcached_server;
#[path = "../tests/memcached/naive.rs"]
mod naive;
#[path = "../tests/redis/server.rs"]
mod redis_server;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::{BenchmarkId, Criterion, Throughput};
use floodgate::SlidingWindow;
use floodgate::backend::FailurePolicy;
use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};

const CALLERS: [u64; 2] = [1, 16];
const WINDOW: Duration = Duration::from_secs(60);
/// One-second cells.
const CELLS: u32 = 60;
/// The largest sliding-window limit: never reached in a bench.
const MAX_LIMIT: u32 = (1 << 24) - 1;

/// Runs `iters` decisions split over `callers` threads; `make()` builds one caller's
/// decision function (its own connection, where it has one). Returns the time for `iters`.
fn run<D: FnMut()>(callers: u64, iters: u64, make: impl Fn() -> D + Sync) -> Duration {
    let per_caller = iters.div_ceil(callers);
    let barrier = std::sync::Barrier::new(callers as usize + 1);
    let elapsed = std::thread::scope(|s| {
        let handles: Vec<_> = (0..callers)
            .map(|_| {
                let (barrier, make) = (&barrier, &make);
                s.spawn(move || {
                    let mut decide = make();
                    barrier.wait();
                    for _ in 0..per_caller {
                        decide();
                    }
                })
            })
            .collect();
        barrier.wait();
        let started = Instant::now();
        for handle in handles {
            handle.join().unwrap();
        }
        started.elapsed()
    });
    // Normalise to exactly `iters` decisions.
    elapsed.mul_f64(iters as f64 / (per_caller * callers) as f64)
}

/// One client's measurement: `(setup, callers, iters) -> time for iters decisions`.
type Measure = fn(&Setup, u64, u64) -> Duration;

struct Setup {
    allow: MemcachedLimiter,
    deny: MemcachedLimiter,
    redis: RedisLimiter<SlidingWindow>,
    memcached_addr: String,
    // Last: killed after the clients are gone.
    _memcached: memcached_server::MemcachedServer,
    _redis: redis_server::RedisServer,
}

impl Setup {
    fn new() -> Self {
        assert!(memcached_server::available(), "memcached must be installed");
        assert!(
            redis_server::available(),
            "redis-server and redis-cli must be installed"
        );
        let memcached_server = memcached_server::MemcachedServer::start();
        let redis_server = redis_server::RedisServer::start();
        let timeout = Duration::from_secs(5);
        let backend = MemcachedBackend::connect(
            MemcachedConfig::new(memcached_server.addr()).timeout(timeout),
        )
        .unwrap();
        let window = |limit| SlidingWindow::new(limit, WINDOW, CELLS).unwrap();
        let allow = MemcachedLimiter::new(
            &backend,
            "bench",
            window(MAX_LIMIT),
            FailurePolicy::FailClosed,
        )
        .unwrap();
        let deny =
            MemcachedLimiter::new(&backend, "full", window(1), FailurePolicy::FailClosed).unwrap();
        assert!(deny.blocking_try_acquire("k", 1).unwrap().is_allowed());
        let redis_backend = RedisBackend::blocking_connect(
            RedisConfig::single(redis_server.url()).timeout(timeout),
        )
        .unwrap();
        let redis = RedisLimiter::new(
            &redis_backend,
            "bench",
            SlidingWindow::new(MAX_LIMIT, WINDOW, CELLS).unwrap(),
            FailurePolicy::FailClosed,
        )
        .unwrap();
        Setup {
            allow,
            deny,
            redis,
            memcached_addr: memcached_server.addr(),
            _memcached: memcached_server,
            _redis: redis_server,
        }
    }

    fn memcached_allowed(&self, callers: u64, iters: u64) -> Duration {
        run(callers, iters, || {
            || {
                let outcome = self.allow.blocking_try_acquire_outcome("k", 1).unwrap();
                assert!(outcome.failure().is_none() && outcome.decision().is_allowed());
            }
        })
    }

    fn memcached_denied(&self, callers: u64, iters: u64) -> Duration {
        run(callers, iters, || {
            || {
                // Denied, but for the first call after the one permit's cell left the window
                // (once a minute), which takes it again.
                let outcome = self.deny.blocking_try_acquire_outcome("k", 1).unwrap();
                assert!(outcome.failure().is_none());
            }
        })
    }

    fn redis(&self, callers: u64, iters: u64) -> Duration {
        run(callers, iters, || {
            || {
                let outcome = self.redis.blocking_try_acquire_outcome("k", 1).unwrap();
                assert!(outcome.failure().is_none() && outcome.decision().is_allowed());
            }
        })
    }

    fn naive(&self, callers: u64, iters: u64) -> Duration {
        run(callers, iters, || {
            let mut client = naive::NaiveClient::connect(&self.memcached_addr, "naive:k:", 60, 62);
            move || {
                let second = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_secs();
                assert!(client.check(second, u64::from(u32::MAX)));
            }
        })
    }
}

fn decisions_per_second(c: &mut Criterion, setup: &Setup) {
    let mut group = c.benchmark_group("memcached decisions");
    group.throughput(Throughput::Elements(1));
    for callers in CALLERS {
        let mut bench = |name: &str, f: Measure| {
            group.bench_with_input(BenchmarkId::new(name, callers), &callers, |b, &callers| {
                b.iter_custom(|iters| f(setup, callers, iters))
            });
        };
        bench(
            "floodgate memcached sliding window, allowed",
            Setup::memcached_allowed,
        );
        bench(
            "floodgate memcached sliding window, denied",
            Setup::memcached_denied,
        );
        bench("floodgate redis sliding window", Setup::redis);
        bench("naive memcached read-then-increment", Setup::naive);
    }
    group.finish();
}

/// On a noisy machine, sequential criterion runs drift apart; this pass alternates the clients
/// in short rounds and prints the median decisions/s of each, per caller count.
fn interleaved(setup: &Setup) {
    const ROUNDS: usize = 9;
    const DECISIONS: u64 = 2_000;
    let per_second = |d: Duration| DECISIONS as f64 / d.as_secs_f64();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("\ninterleaved: median decisions/s over {ROUNDS} alternating rounds of {DECISIONS}");
    for callers in CALLERS {
        let mut rows: [(&str, Measure, Vec<f64>); 4] = [
            ("memcached allowed", Setup::memcached_allowed, vec![]),
            ("memcached denied", Setup::memcached_denied, vec![]),
            ("redis sliding window", Setup::redis, vec![]),
            ("naive memcached", Setup::naive, vec![]),
        ];
        for _ in 0..ROUNDS {
            for (_, f, samples) in &mut rows {
                samples.push(per_second(f(setup, callers, DECISIONS)));
            }
        }
        let medians: Vec<(&str, f64)> = rows
            .into_iter()
            .map(|(name, _, samples)| (name, median(samples)))
            .collect();
        let redis = medians[2].1;
        let line: Vec<String> = medians
            .iter()
            .map(|(name, rate)| format!("{name} {rate:.0}/s ({:.2}x redis)", rate / redis))
            .collect();
        println!("callers {callers:>2}: {}", line.join(", "));
    }
}

fn main() {
    let setup = Setup::new();
    let mut criterion = Criterion::default().configure_from_args();
    decisions_per_second(&mut criterion, &setup);
    // Only under `cargo bench` (which passes --bench), not when tests run the bench once.
    if std::env::args().any(|a| a == "--bench") {
        interleaved(&setup);
    }
    criterion.final_summary();
}
