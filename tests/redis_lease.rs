//! `floodgate::redis::LeasedKey` against a real `redis-server` (started by each test on a free
//! loopback port): exact refunds, lease sizes, the failure policy, and four OS processes (this
//! test binary started again as workers) hammering one key. Run with
//! `cargo test --features redis --test redis_lease -- --nocapture` to see the measured figures.

#[path = "support/lossy_proxy.rs"]
mod lossy_proxy;
#[path = "redis/server.rs"]
mod server;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use floodgate::backend::{BreakerConfig, FailurePolicy};
use floodgate::redis::{
    DroppedLeases, LeaseAlgorithm, LeaseCounts, LeasedKey, RedisBackend, RedisConfig, RedisLimiter,
    ReleaseError,
};
use floodgate::{FixedWindow, Gcra, ManualClock, Rate};
use lossy_proxy::LossyProxy;
use server::{RedisCluster, RedisServer};

/// Generous: a loaded machine must not turn into policy decisions in the exactness tests.
const TIMEOUT: Duration = Duration::from_secs(30);

async fn backend(server: &RedisServer) -> RedisBackend {
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    RedisBackend::connect(config).await.expect("server up")
}

/// A bucket of `capacity` that refills one permit per hour: nothing refills during a test.
fn frozen(backend: &RedisBackend, capacity: u32) -> Arc<RedisLimiter<Gcra>> {
    let gcra = Gcra::new(Rate::per_hour(1), capacity).unwrap();
    Arc::new(RedisLimiter::new(backend, "lease", gcra, FailurePolicy::FailClosed).unwrap())
}

/// `frozen`, on a clock that never moves: a lease never expires, however slow the machine
/// (its lifetime counts on the limiter's clock), so a test's counts do not depend on speed.
fn frozen_still(backend: &RedisBackend, capacity: u32) -> Arc<RedisLimiter<Gcra, ManualClock>> {
    let gcra = Gcra::new(Rate::per_hour(1), capacity).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(backend, "lease", gcra, policy, ManualClock::new());
    Arc::new(limiter.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_is_exact_when_nothing_was_decided_since() {
    let server = RedisServer::start();
    let limiter = frozen_still(&backend(&server).await, 100);
    let leased = LeasedKey::new(limiter.clone(), "k");
    let first = leased.try_acquire(1).await.unwrap();
    assert!(first.is_allowed());
    assert_eq!(first.remaining(), 99, "92 in Redis + 7 held");
    let counts = leased.counts();
    assert_eq!((counts.leases, counts.leased, counts.held), (1, 8, 7));
    // Six more from the lease, with no round trip: Redis is not asked.
    let scripts = server.calls("evalsha");
    for _ in 0..6 {
        assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    }
    assert_eq!(server.calls("evalsha"), scripts, "served locally");
    assert_eq!(leased.release().await.unwrap(), 1);
    // Exactly as if the lease had been of 7: 93 left, not one more.
    assert!(limiter.try_acquire("k", 93).await.unwrap().is_allowed());
    assert!(!limiter.try_acquire("k", 1).await.unwrap().is_allowed());
    let counts = leased.counts();
    assert_eq!(
        (counts.refunded, counts.stranded, counts.served()),
        (1, 0, 7)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_after_another_decision_gives_nothing_back() {
    let server = RedisServer::start();
    let limiter = frozen(&backend(&server).await, 100);
    let leased = LeasedKey::new(limiter.clone(), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    // A per-call decision moves the key past the lease's word: its refund cannot be exact.
    assert!(limiter.try_acquire("k", 1).await.unwrap().is_allowed());
    assert_eq!(leased.release().await.unwrap(), 0);
    let counts = leased.counts();
    assert_eq!((counts.refunded, counts.stranded), (0, 7));
    // The 7 stay taken (under-admission, never over): 100 − 8 − 1 = 91 left.
    assert!(!limiter.try_acquire("k", 92).await.unwrap().is_allowed());
    assert!(limiter.try_acquire("k", 91).await.unwrap().is_allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_refunded_beside_the_next_one() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let clock = ManualClock::new();
    let gcra = Gcra::new(Rate::per_hour(1), 100).unwrap();
    let limiter = RedisLimiter::with_clock(
        &backend,
        "lease",
        gcra,
        FailurePolicy::FailClosed,
        clock.clone(),
    );
    let leased = LeasedKey::new(Arc::new(limiter.unwrap()), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    clock.advance(leased.lifetime());
    // Expired: the next call retires it (7 unused), gives them back and takes a new lease (of
    // 4: it expired unused, so the size halved).
    let second = leased.try_acquire(1).await.unwrap();
    assert!(second.is_allowed());
    let counts = leased.counts();
    assert_eq!(
        counts,
        LeaseCounts {
            leases: 2,
            leased: 12,
            held: 3,
            refunded: 7,
            stranded: 0,
            failed_refunds: 0,
            resent_refunds: 0,
            given_up_refunds: 0,
            busy_releases: 0,
            exact: 0
        }
    );
    // 100 − 1 − 4 taken: 95 left in Redis.
    assert_eq!(second.remaining(), 95 + 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_size_halved_by_idle_periods_grows_back_with_use() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let clock = ManualClock::new();
    let gcra = Gcra::new(Rate::per_hour(1), 1_000).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, "lease", gcra, policy, clock.clone());
    let leased = LeasedKey::new(Arc::new(limiter.unwrap()), "k");
    // Five idle periods: each lease expires with permits held (8, 4, 2, then leases of 2: one
    // more than the request, however small the size).
    for _ in 0..5 {
        assert!(leased.try_acquire(1).await.unwrap().is_allowed());
        clock.advance(leased.lifetime());
    }
    let idle = leased.counts();
    assert_eq!(
        (idle.leases, idle.leased, idle.exact),
        (5, 18, 0),
        "{idle:?}"
    );
    // Then a burst of use: leases double again (2, 2, 4, …, 64) instead of one call each.
    for _ in 0..100 {
        assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    }
    let busy = leased.counts();
    assert_eq!(busy.exact, 0, "{busy:?}");
    assert!(busy.leases - idle.leases <= 8, "{busy:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_grow_with_use_and_shrink_to_exact_near_the_limit() {
    let server = RedisServer::start();
    // No lease expires (the clock never moves): the sizes only grow, however slow the machine.
    let limiter = frozen_still(&backend(&server).await, 1_000);
    let leased = LeasedKey::new(limiter.clone(), "k");
    let mut admitted = 0;
    for _ in 0..1_000 {
        admitted += usize::from(leased.try_acquire(1).await.unwrap().is_allowed());
    }
    assert_eq!(admitted, 1_000, "the whole burst, and nothing stranded");
    let denied = leased.try_acquire(1).await.unwrap();
    assert!(!denied.is_allowed());
    let counts = leased.counts();
    assert_eq!(counts.stranded, 0);
    // Every permit is accounted for: served from leases, or decided per call (all but the
    // last per-call decision, the denial, were grants).
    assert_eq!(counts.served() + counts.exact - 1, 1_000, "{counts:?}");
    assert!(
        counts.exact >= 2,
        "near the limit a lease is the request: {counts:?}"
    );
    assert!(
        counts.leases <= 64,
        "leases grew with use (1,000 permits, {} leases)",
        counts.leases
    );
    assert!(
        server.calls("evalsha") < 200,
        "far fewer scripts than decisions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tasks_never_pass_a_frozen_bucket() {
    let server = RedisServer::start();
    let limiter = frozen(&backend(&server).await, 1_000);
    let leased = Arc::new(LeasedKey::new(limiter.clone(), "k"));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let leased = Arc::clone(&leased);
            tokio::spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..500 {
                    admitted += u64::from(leased.try_acquire(1).await.unwrap().is_allowed());
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    leased.release().await.unwrap();
    let counts = leased.counts();
    // Nothing refills: the bucket's 1,000 bound the whole run. 4,000 tries exhaust it, so every
    // permit was handed out, given back, or is counted as stranded.
    assert!(admitted <= 1_000, "{admitted} > 1,000: {counts:?}");
    assert!(
        admitted + counts.stranded + counts.refunded >= 1_000,
        "{admitted}: {counts:?}"
    );
    assert_eq!(leased.limiter().failures().total(), 0);
}

#[test]
fn blocking_calls_serve_from_the_lease() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::blocking_connect(config).unwrap();
    let limiter = frozen_still(&backend, 100);
    let leased = LeasedKey::new(limiter.clone(), "k");
    assert!(leased.blocking_try_acquire(1).unwrap().is_allowed());
    let scripts = server.calls("evalsha");
    for _ in 0..7 {
        assert!(leased.blocking_try_acquire(1).unwrap().is_allowed());
    }
    assert_eq!(server.calls("evalsha"), scripts, "served from the lease");
    assert!(leased.blocking_try_acquire(0).is_err());
    assert_eq!(leased.counts().served(), 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_refill_is_decided_by_the_policy_and_opens_the_breaker() {
    // Nothing listens on port 1.
    let config = RedisConfig::single("redis://127.0.0.1:1").timeout(Duration::from_millis(50));
    let backend = RedisBackend::connect(config.lazy()).await.unwrap();
    let gcra = Gcra::new(Rate::per_second(100), 100).unwrap();
    let minute = Duration::from_secs(60);
    let breaker = BreakerConfig::new(3, minute, minute).unwrap();
    let limiter = RedisLimiter::new(&backend, "lease", gcra, FailurePolicy::FailClosed).unwrap();
    let leased = LeasedKey::new(Arc::new(limiter.with_breaker(Some(breaker))), "k");
    for _ in 0..20 {
        let outcome = leased.try_acquire_outcome(1).await.unwrap();
        assert!(!outcome.decision().is_allowed() && outcome.failure().is_some());
    }
    // Three refills reached for Redis; then the breaker, open for a minute, decided the rest
    // without a call.
    let failures = leased.limiter().failures();
    assert_eq!(failures.total(), 20);
    assert_eq!(failures.short_circuited, 17, "{failures:?}");
    assert_eq!(leased.counts().leases, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aligned_window_refund_is_exact_and_an_anchored_one_never_happens() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let policy = FailurePolicy::FailClosed;
    let aligned = FixedWindow::aligned(100, FIFTY_YEARS).unwrap();
    let limiter = Arc::new(RedisLimiter::new(&backend, "leasew", aligned, policy).unwrap());
    let leased = LeasedKey::new(limiter.clone(), "k");
    let first = leased.try_acquire(1).await.unwrap();
    assert_eq!((first.is_allowed(), first.remaining()), (true, 99));
    assert_eq!(leased.release().await.unwrap(), 7);
    assert!(limiter.try_acquire("k", 99).await.unwrap().is_allowed());
    assert!(!limiter.try_acquire("k", 1).await.unwrap().is_allowed());

    let anchored = FixedWindow::new(100, Duration::from_secs(60)).unwrap();
    let limiter = Arc::new(RedisLimiter::new(&backend, "leasea", anchored, policy).unwrap());
    let leased = LeasedKey::new(limiter.clone(), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(
        leased.release().await.unwrap(),
        0,
        "an anchored window never refunds"
    );
    assert_eq!(leased.counts().stranded, 7);
    assert!(!limiter.try_acquire("k", 93).await.unwrap().is_allowed());
    assert!(limiter.try_acquire("k", 92).await.unwrap().is_allowed());
}

/// A window's lease ends with its window, as the server reported it: `reset_after`, the time from
/// the script's `TIME` read to the counter's `PEXPIRETIME`, counted on the (frozen) limiter
/// clock from the read taken before the request. That is not exactly 60 s: Redis 7.0 counts
/// `PEXPIRE` from its own clock read, taken after `TIME` and truncated to the millisecond, so
/// the window ends up to 1 ms before, or (when the two reads straddle a millisecond, or the
/// server is preempted between them) some µs or ms after, 60 s from `TIME`. Advancing the
/// manual clock by exactly 60 s would see the lease still served in those runs (a test
/// assumption, not over-admission: `redis_lease_outage`'s
/// `an_anchored_window_lease_ends_by_the_counters_expiry` checks on the server's clock that a
/// lease never outlives its counter). So the test advances to one nanosecond before the end the
/// server reported, where the lease still serves, and then to that end, where it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_lease_ends_with_its_window() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let clock = ManualClock::new();
    let window = FixedWindow::new(100, Duration::from_secs(60)).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, "leasew", window, policy, clock.clone());
    let leased = LeasedKey::new(Arc::new(limiter.unwrap()), "k")
        .with_lifetime(Duration::from_secs(3_600))
        .unwrap();
    let first = leased.try_acquire(1).await.unwrap();
    assert!(first.is_allowed());
    // The window's end, from the clock read taken before the request. Redis's truncation puts
    // it at most 1 ms before 60 s; a slow server only later. Far below the lease's hour either
    // way: the window, not the lifetime, ends this lease.
    let end = first.reset_after();
    assert!(
        end > Duration::from_secs(59) && end < leased.lifetime(),
        "{end:?}"
    );
    let scripts = server.calls("evalsha");
    let second = leased.try_acquire(1).await.unwrap();
    assert!(second.is_allowed());
    assert_eq!(second.reset_after(), end, "the clock has not moved");
    // Just before the window's end: still the lease.
    clock.advance(end - Duration::from_nanos(1));
    let third = leased.try_acquire(1).await.unwrap();
    assert!(third.is_allowed());
    assert_eq!(third.reset_after(), Duration::from_nanos(1));
    assert_eq!(
        server.calls("evalsha"),
        scripts,
        "the second and third came from the lease"
    );
    assert_eq!(leased.counts().leases, 1);
    // At the window's end the lease is not served: a new lease, and the 5 left in the old one
    // stranded (an anchored window's lease is never refunded).
    clock.advance(Duration::from_nanos(1));
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    let counts = leased.counts();
    assert_eq!((counts.leases, counts.stranded), (2, 5), "{counts:?}");
}

/// Single permits each task of a worker tries.
const TRIES: usize = 5_000;

/// The figures one worker process prints, and the parent reads.
const REPORT: &str = "LEASE_WORKER";

/// Runs four worker processes (this binary again, `lease_worker`) on one key of `algorithm`
/// ("gcra" or "window") and returns their totals with the server-clock span `[t0, t1]` that
/// contains every request they sent.
fn four_processes(algorithm: &str) -> (Totals, u64, u64) {
    let server = RedisServer::start();
    let t0 = server.time_micros();
    let exe = std::env::current_exe().unwrap();
    // All four started before any is waited for: they run at once.
    let workers: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args(["--ignored", "--exact", "lease_worker", "--nocapture"])
                .args(["--test-threads", "1"])
                .env("FLOODGATE_LEASE_URL", server.url())
                .env("FLOODGATE_LEASE_ALGORITHM", algorithm)
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a worker")
        })
        .collect();
    let mut total = Totals::default();
    for worker in workers {
        let output = worker.wait_with_output().expect("run a worker");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "worker failed: {stdout}");
        let line = stdout
            .lines()
            .find_map(|l| l.split_once(REPORT).map(|(_, report)| report))
            .unwrap_or_else(|| panic!("no report in: {stdout}"));
        total.add(line);
    }
    let t1 = server.time_micros();
    (total, t0, t1)
}

/// Four processes share one key: a bucket of 2,000 refilling at 100/s (T = 10 ms: a denial's
/// wait is long enough for the deny cache, so denied tries mostly stay local). Every lease's
/// request is sent after `t0` and every permit served before `t1` (server clock), so all grants
/// fall in `[t0, t1]` and the exact bucket bounds the total: `C + ⌊(t1 − t0) / T⌋`. Run
/// twice: with the default lifetime (50 ms), and with leases of 1 ms, some of which expire
/// holding permits (given back, or stranded when another process decided first).
#[test]
fn four_processes_never_pass_the_bucket() {
    for algorithm in ["gcra", "gcra-short"] {
        let (total, t0, t1) = four_processes(algorithm);
        check_bucket(algorithm, &total, t1 - t0);
    }
}

/// The bucket's bound for one run of `four_processes`.
fn check_bucket(algorithm: &str, total: &Totals, span: u64) {
    const CAPACITY: u64 = 2_000;
    const INTERVAL_MICROS: u64 = 10_000;
    let exact_bound = CAPACITY + span / INTERVAL_MICROS;
    println!(
        "{algorithm}, 4 processes, span {span} us: admitted {} (exact bucket: {exact_bound}; slack {}), \
         leases {} of {} permits, refunded {}, stranded {}, per-call {}",
        total.admitted,
        exact_bound.saturating_sub(total.admitted),
        total.leases,
        total.leased,
        total.refunded,
        total.stranded,
        total.exact,
    );
    assert!(
        total.admitted <= exact_bound,
        "over the bucket: {} > {exact_bound}",
        total.admitted
    );
    assert!(total.leases > 0, "the workers leased");
    // Nothing vanished: the tries (320,000) far exceed the bucket, so Redis granted at least
    // the burst; each permit granted was handed out, given back, or counted as stranded.
    assert!(
        total.admitted + total.stranded + total.refunded >= CAPACITY,
        "permits vanished: {total:?}"
    );
}

/// Four processes share one key of an aligned fixed window of 2,000 per 50 years (no window
/// boundary falls in the run): a lease ends with its window, so never over the limit.
#[test]
fn four_processes_never_pass_the_window() {
    const LIMIT: u64 = 2_000;
    let (total, t0, t1) = four_processes("window");
    println!(
        "fixed window, 4 processes, span {} us: admitted {} (limit {LIMIT}), leases {} of {} \
         permits, refunded {}, stranded {}, per-call {}",
        t1 - t0,
        total.admitted,
        total.leases,
        total.leased,
        total.refunded,
        total.stranded,
        total.exact,
    );
    assert!(total.admitted <= LIMIT, "over the window: {total:?}");
    assert!(total.leases > 0, "the workers leased");
    assert!(
        total.admitted + total.stranded + total.refunded >= LIMIT,
        "permits vanished: {total:?}"
    );
}

#[derive(Debug, Default)]
struct Totals {
    admitted: u64,
    leases: u64,
    leased: u64,
    refunded: u64,
    stranded: u64,
    exact: u64,
}

impl Totals {
    fn add(&mut self, line: &str) {
        for field in line.split_whitespace() {
            let (name, value) = field.split_once('=').expect("name=value");
            let value: u64 = value.parse().expect("a count");
            match name {
                "admitted" => self.admitted += value,
                "leases" => self.leases += value,
                "leased" => self.leased += value,
                "refunded" => self.refunded += value,
                "stranded" => self.stranded += value,
                "exact" => self.exact += value,
                "failures" => assert_eq!(value, 0, "a worker's call failed"),
                other => panic!("unknown field {other}"),
            }
        }
    }
}

/// One worker of `four_processes` (run by it, with the server's URL in `FLOODGATE_LEASE_URL`
/// and the algorithm in `FLOODGATE_LEASE_ALGORITHM`): 4 tasks on 2 threads each try `TRIES`
/// single permits, then the lease is released and the counts printed.
#[test]
#[ignore = "a worker process of four_processes_never_pass_the_bucket / _window"]
fn lease_worker() {
    let url = std::env::var("FLOODGATE_LEASE_URL").expect("run by the parent test");
    let algorithm = std::env::var("FLOODGATE_LEASE_ALGORITHM").expect("run by the parent test");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let backend = RedisBackend::connect(RedisConfig::single(url).timeout(TIMEOUT))
            .await
            .unwrap();
        let policy = FailurePolicy::FailClosed;
        match algorithm.as_str() {
            "gcra" => {
                let gcra = Gcra::new(Rate::per_second(100), 2_000).unwrap();
                let limiter = RedisLimiter::new(&backend, "lease4", gcra, policy).unwrap();
                hammer(LeasedKey::new(Arc::new(limiter), "hot")).await;
            }
            "gcra-short" => {
                // Leases of 1 ms: some expire with permits held, which are then given back
                // (when no other process decided since) or stranded.
                let gcra = Gcra::new(Rate::per_second(100), 2_000).unwrap();
                let limiter = RedisLimiter::new(&backend, "lease4s", gcra, policy).unwrap();
                let leased = LeasedKey::new(Arc::new(limiter), "hot");
                hammer(leased.with_lifetime(Duration::from_millis(1)).unwrap()).await;
            }
            "window" => {
                let window = FixedWindow::aligned(2_000, FIFTY_YEARS).unwrap();
                let limiter = RedisLimiter::new(&backend, "lease4w", window, policy).unwrap();
                hammer(LeasedKey::new(Arc::new(limiter), "hot")).await;
            }
            other => panic!("unknown algorithm {other}"),
        }
    });
}

/// An aligned window no test run can straddle: its boundaries are 50 years apart (2020, 2070).
const FIFTY_YEARS: Duration = Duration::from_secs(50 * 365 * 86_400);

/// 4 tasks each try `TRIES` single permits on `leased`; then the lease is released and the
/// counts printed for the parent.
async fn hammer<A: LeaseAlgorithm>(leased: LeasedKey<A>) {
    let leased = Arc::new(leased);
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let leased = Arc::clone(&leased);
            tokio::spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..TRIES {
                    admitted += u64::from(leased.try_acquire(1).await.unwrap().is_allowed());
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    leased.release().await.unwrap();
    let c = leased.counts();
    println!(
        "{REPORT} admitted={admitted} leases={} leased={} refunded={} stranded={} exact={} \
         failures={}",
        c.leases,
        c.leased,
        c.refunded,
        c.stranded,
        c.exact,
        leased.limiter().failures().total()
    );
}

/// A lease on a key holding something that is not a counter or time the scripts keep (a float,
/// a value past 2^53, a leading zero: Lua's `tonumber` reads them, INCRBY or an exact reply
/// could not) fails with the script's error naming the key, and grants nothing.
async fn a_lease_on_a_bad_value_fails<A: LeaseAlgorithm>(
    server: &RedisServer,
    algorithm: A,
    store: fn(&RedisServer, &str, &str),
    values: &[&str],
    what: &str,
) {
    let backend = backend(server).await;
    for (i, value) in values.iter().enumerate() {
        let limiter = RedisLimiter::new(
            &backend,
            &format!("bad{i}{}", values[0]),
            algorithm.clone(),
            FailurePolicy::FailClosed,
        );
        let limiter = Arc::new(limiter.unwrap().with_breaker(None));
        let key = limiter.redis_keys("k")[0].clone();
        store(server, &key, value);
        let leased = LeasedKey::new(limiter, "k");
        let outcome = leased.try_acquire_outcome(1).await.unwrap();
        let error = outcome.failure().expect("the lease fails").to_string();
        assert!(
            error.contains(what) && error.contains(&key),
            "{value:?}: {error}"
        );
        assert!(!outcome.decision().is_allowed(), "{value:?}: {outcome:?}");
        assert_eq!(leased.counts().leases, 0, "{value:?}");
    }
}

const NOT_EXACT: [&str; 4] = ["1.5", "1e300", "007", "9007199254740992"];

fn set(server: &RedisServer, key: &str, value: &str) {
    server.cli(&["SET", key, value]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_on_a_value_that_is_not_an_exact_integer_fails_and_grants_nothing() {
    let server = RedisServer::start();
    let gcra = Gcra::new(Rate::per_hour(1), 10).unwrap();
    a_lease_on_a_bad_value_fails(&server, gcra, set, &NOT_EXACT, "does not hold a time").await;
    let anchored = FixedWindow::new(10, Duration::from_secs(60)).unwrap();
    a_lease_on_a_bad_value_fails(
        &server,
        anchored,
        set,
        &NOT_EXACT,
        "does not hold a counter",
    )
    .await;
    fn count(server: &RedisServer, key: &str, value: &str) {
        server.cli(&["HSET", key, "i", "0", "c", value]);
    }
    let aligned = FixedWindow::aligned(10, Duration::from_secs(60)).unwrap();
    a_lease_on_a_bad_value_fails(
        &server,
        aligned,
        count,
        &NOT_EXACT,
        "does not hold a counter",
    )
    .await;
}

/// A window's count below zero (another client's write) is not a count either: a lease on it
/// was granted the limit and more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_lease_on_a_count_below_zero_fails_and_grants_nothing() {
    let server = RedisServer::start();
    let negative = ["-5", "-9007199254740991"];
    let what = "does not hold a counter";
    let anchored = FixedWindow::new(10, Duration::from_secs(60)).unwrap();
    a_lease_on_a_bad_value_fails(&server, anchored, set, &negative, what).await;
    fn count(server: &RedisServer, key: &str, value: &str) {
        server.cli(&["HSET", key, "i", "0", "c", value]);
    }
    let aligned = FixedWindow::aligned(10, Duration::from_secs(60)).unwrap();
    a_lease_on_a_bad_value_fails(&server, aligned, count, &negative, what).await;
}

/// An aligned window's key lost during a lease (deleted, evicted under `maxmemory`, a failover
/// to a replica that missed the write, a restart without persistence) and counted up again in
/// the same window to the very count the lease wrote: the old lease's refund must not land in
/// the new key, which never counted its permits. Landing, it lowered the new key's count by 7
/// permits it had handed out (by another process's lease, or per call), and the window admitted
/// 7 more than the limit on top of what the new key counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aligned_window_refund_never_lands_in_a_key_lost_and_counted_up_again() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let policy = FailurePolicy::FailClosed;
    let aligned = FixedWindow::aligned(100, FIFTY_YEARS).unwrap();
    let limiter = Arc::new(RedisLimiter::new(&backend, "leasel", aligned, policy).unwrap());
    let key = limiter.redis_keys("k")[0].clone();

    // Re-created per call: 8 permits, the count the lease wrote.
    let first = LeasedKey::new(limiter.clone(), "k");
    assert!(first.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(first.counts().held, 7);
    server.cli(&["DEL", &key]);
    assert!(limiter.try_acquire("k", 8).await.unwrap().is_allowed());
    assert_eq!(first.release().await.unwrap(), 0, "refunded into a new key");
    assert_eq!(first.counts().stranded, 7);
    // The new key counted 8: 92 left, not 99.
    assert!(!limiter.try_acquire("k", 93).await.unwrap().is_allowed());
    assert!(limiter.try_acquire("k", 92).await.unwrap().is_allowed());

    // Re-created by another process's lease (another `LeasedKey`) of the same size (another
    // limiter key: the deny cache holds the denial of 93 above).
    let key = limiter.redis_keys("j")[0].clone();
    let one = LeasedKey::new(limiter.clone(), "j");
    let other = LeasedKey::new(limiter.clone(), "j");
    assert!(one.try_acquire(1).await.unwrap().is_allowed());
    server.cli(&["DEL", &key]);
    assert!(other.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(one.release().await.unwrap(), 0, "refunded into a new key");
    // The other lease's own refund still lands: nothing was decided on its key since.
    assert_eq!(other.release().await.unwrap(), 7);
    assert!(limiter.try_acquire("j", 99).await.unwrap().is_allowed());
    assert!(!limiter.try_acquire("j", 1).await.unwrap().is_allowed());
}

/// Three `LeasedKey`s ("processes": leases of at most 1, 5 and the default) and per-call
/// decisions share one key, with requests of 1 to 12 permits (above the smaller lease sizes):
/// a frozen bucket and a window no run straddles are never passed, and every permit Redis no
/// longer holds was handed to a caller or is counted as stranded, exactly. A `LeasedKey` of
/// `max_lease` 1 decides every call per call.
async fn mixed_requests_on_one_key<A: LeaseAlgorithm>(server: &RedisServer, algorithm: A) {
    const LIMIT: u32 = 600;
    let backend = backend(server).await;
    let policy = FailurePolicy::FailClosed;
    // The probe at the end asks Redis, not this process's deny cache.
    let probe = RedisLimiter::new(&backend, "mixed", algorithm.clone(), policy).unwrap();
    let probe = probe.with_deny_cache(None).unwrap();
    let limiter = Arc::new(RedisLimiter::new(&backend, "mixed", algorithm, policy).unwrap());
    let keys: Vec<_> = [1, 5, LeasedKey::<A>::DEFAULT_MAX_LEASE]
        .into_iter()
        .map(|max| {
            let leased = LeasedKey::new(limiter.clone(), "k").with_max_lease(max);
            Arc::new(leased.unwrap())
        })
        .collect();
    let tasks: Vec<_> = (0..6u32)
        .map(|t| {
            let leased = Arc::clone(&keys[t as usize % 3]);
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let mut admitted = 0u64;
                for i in 0..150u32 {
                    let n = 1 + (t * 7 + i * 5) % 12;
                    let decision = if i % 10 == 9 {
                        limiter.try_acquire("k", n).await.unwrap()
                    } else {
                        leased.try_acquire(n).await.unwrap()
                    };
                    if decision.is_allowed() {
                        admitted += u64::from(n);
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    let mut stranded = 0;
    for leased in &keys {
        leased.release().await.unwrap();
        stranded += leased.counts().stranded;
    }
    let single = keys[0].counts();
    assert_eq!((single.leases, single.stranded), (0, 0), "{single:?}");
    assert!(single.exact > 0, "{single:?}");
    assert_eq!(limiter.failures().total(), 0);
    assert!(admitted <= u64::from(LIMIT), "over the limit: {admitted}");
    // 5,400 permits asked of 600: the limit was reached (every permit taken).
    let probe = probe.try_acquire_outcome("k", LIMIT).await.unwrap();
    assert!(!probe.decision().is_allowed(), "{probe:?}");
    let taken = u64::from(LIMIT) - probe.decision().remaining();
    println!(
        "admitted {admitted}, stranded {stranded}, taken {taken}: {:?}",
        keys[2].counts()
    );
    assert_eq!(
        taken,
        admitted + stranded,
        "Redis lost {taken}; admitted {admitted}, stranded {stranded}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_leased_keys_with_requests_above_the_lease_never_pass_the_limit() {
    let server = RedisServer::start();
    mixed_requests_on_one_key(&server, Gcra::new(Rate::per_hour(1), 600).unwrap()).await;
    let server = RedisServer::start();
    mixed_requests_on_one_key(&server, FixedWindow::aligned(600, FIFTY_YEARS).unwrap()).await;
}

/// A refund that finds its key gone (expired, deleted, evicted) gives nothing back and creates
/// no key (none without a TTL, none at all); one that lands leaves the key's TTL in place.
async fn a_refund_to_a_gone_key_creates_nothing<A: LeaseAlgorithm>(
    server: &RedisServer,
    algorithm: A,
) {
    let backend = backend(server).await;
    let policy = FailurePolicy::FailClosed;
    let limiter = Arc::new(RedisLimiter::new(&backend, "gone", algorithm, policy).unwrap());
    let key = limiter.redis_keys("k")[0].clone();
    let leased = LeasedKey::new(limiter.clone(), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    server.cli(&["DEL", &key]);
    assert_eq!(leased.release().await.unwrap(), 0);
    assert_eq!(server.cli(&["EXISTS", &key]), "0", "a refund created {key}");
    assert_eq!(leased.counts().stranded, 7);
    // Landing: the key keeps a TTL.
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.release().await.unwrap(), 7);
    let ttl: i64 = server.cli(&["PTTL", &key]).parse().unwrap();
    assert!(ttl > 0, "{key} left with PTTL {ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_to_a_gone_key_gives_nothing_and_creates_no_key() {
    let server = RedisServer::start();
    a_refund_to_a_gone_key_creates_nothing(&server, Gcra::new(Rate::per_hour(1), 100).unwrap())
        .await;
    let server = RedisServer::start();
    let aligned = FixedWindow::aligned(100, FIFTY_YEARS).unwrap();
    a_refund_to_a_gone_key_creates_nothing(&server, aligned).await;
}

/// `stranded_bound` bounds the permits a `LeasedKey` holds at once, not the under-admission it
/// leaves behind: each lease whose refund cannot land (another process decided on the key
/// first) strands its unserved permits, which stay taken until the bucket's time passes them.
/// Three leases expiring unused, each after another process's decision, strand 7 + 3 + 1
/// permits of a bound of 7, and Redis still counts them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stranded_permits_add_up_past_the_stranded_bound() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let clock = ManualClock::new();
    let gcra = Gcra::new(Rate::per_hour(1), 100).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, "strand", gcra, policy, clock.clone());
    let limiter = Arc::new(limiter.unwrap());
    let leased = LeasedKey::new(limiter.clone(), "k")
        .with_max_lease(8)
        .unwrap();
    assert_eq!(leased.stranded_bound(), 7);
    for _ in 0..3 {
        assert!(leased.try_acquire(1).await.unwrap().is_allowed());
        // Another process decides on the key: the lease's refund can no longer be exact.
        assert!(limiter.try_acquire("k", 1).await.unwrap().is_allowed());
        clock.advance(leased.lifetime());
    }
    assert_eq!(leased.release().await.unwrap(), 0);
    let counts = leased.counts();
    assert_eq!((counts.leased, counts.held, counts.stranded), (14, 0, 11));
    assert!(counts.stranded > leased.stranded_bound(), "{counts:?}");
    // Redis counts 3 served, 3 per call and the 11 stranded: 83 left.
    let last = limiter.try_acquire_outcome("k", 100).await.unwrap();
    assert_eq!(last.decision().remaining(), 83, "{last:?}");
}

/// An aligned window's refund that arrives after its window rolled over (on the server) never
/// lands in the next window, even where the next window's count reached the lease's count and
/// the hash still holds the lease's stamp (a per-call decision rolling the window rewrites only
/// the index and the count). The roll-over is written into the hash by hand: the next window
/// of a 50-year window cannot be waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aligned_window_refund_never_lands_in_the_next_window() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let policy = FailurePolicy::FailClosed;
    let aligned = FixedWindow::aligned(100, FIFTY_YEARS).unwrap();
    let limiter = Arc::new(RedisLimiter::new(&backend, "leaser", aligned, policy).unwrap());
    let key = limiter.redis_keys("k")[0].clone();
    let leased = LeasedKey::new(limiter.clone(), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    let index: u64 = server.cli(&["HGET", &key, "i"]).parse().unwrap();
    assert_eq!(server.cli(&["HGET", &key, "c"]), "8");
    let next = (index + 1).to_string();
    server.cli(&["HSET", &key, "i", &next]);
    assert_eq!(
        leased.release().await.unwrap(),
        0,
        "refunded into the next window"
    );
    assert_eq!(server.cli(&["HGET", &key, "c"]), "8");
    assert_eq!(server.cli(&["HGET", &key, "i"]), next);
}

/// `release` gives the unserved permits back at once; the key, dropped after it, has nothing
/// left to send (a key dropped holding permits gives them back: `tests/redis_lease_drop.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_key_has_nothing_to_give_back_when_dropped() {
    let server = RedisServer::start();
    let limiter = frozen_still(&backend(&server).await, 100);
    let released = LeasedKey::new(limiter.clone(), "j");
    assert!(released.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(released.release().await.unwrap(), 7);
    let probe = limiter.try_acquire_outcome("j", 100).await.unwrap();
    assert_eq!(probe.decision().remaining(), 99, "{probe:?}");
    drop(released);
    assert_eq!(limiter.dropped_leases(), DroppedLeases::default());
}

/// A manual clock whose next read, once armed, is `leap` ahead (a one-shot TSC leap).
#[derive(Clone)]
struct LeapOnce {
    base: ManualClock,
    leap: Arc<std::sync::atomic::AtomicU64>,
}

impl floodgate::Clock for LeapOnce {
    fn now_nanos(&self) -> u64 {
        let leap = self.leap.swap(0, std::sync::atomic::Ordering::SeqCst);
        self.base.now_nanos().saturating_add(leap)
    }

    fn sleep(&self, duration: Duration) {
        self.base.sleep(duration);
    }
}

/// A window's lease counts its life from a clock read taken before its request: one that leaps
/// (by 5 s here, within the time model's 10 s horizon) must not keep the lease served for the
/// leap past the window the server counted it in, where its permits would be served in the
/// next window on top of that window's limit. The lease's start is the earlier of two reads,
/// so a one-shot leap is not its start. Before, the lease was still served 5 s into the next
/// window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaping_read_before_the_request_does_not_stretch_a_window_lease() {
    let server = RedisServer::start();
    let backend = backend(&server).await;
    let base = ManualClock::new();
    let clock = LeapOnce {
        base: base.clone(),
        leap: Arc::new(std::sync::atomic::AtomicU64::new(0)),
    };
    let window = FixedWindow::new(100, Duration::from_secs(60)).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, "leasel", window, policy, clock.clone());
    let leased = LeasedKey::new(Arc::new(limiter.unwrap()), "k")
        .with_lifetime(Duration::from_secs(3_600))
        .unwrap();
    clock
        .leap
        .store(5_000_000_000, std::sync::atomic::Ordering::SeqCst);
    let first = leased.try_acquire(1).await.unwrap();
    assert!(first.is_allowed());
    assert_eq!(
        clock.leap.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the leaping read was taken"
    );
    let end = first.reset_after();
    assert!(end > Duration::from_secs(59), "{end:?}");
    // At the window's end (on the clock that did not leap) the lease is over: a new lease.
    base.advance(end);
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(
        leased.counts().leases,
        2,
        "the first lease was served past its window's end"
    );
}

/// A refund whose reply is lost (the server ran it; the connection closed before its reply came
/// back) on a cluster connection, which redis-rs re-sends on a new connection: another process
/// brought the key back to the lease's very word in between (a decision of as many permits as
/// were refunded), so the copy found the word it compares with. It must not land again: that
/// would give the other process's permits back (over-admission). GCRA: the TAT the lease wrote.
#[test]
fn a_refund_re_sent_after_a_lost_reply_lands_once() {
    let (node, proxy) = proxied_cluster();
    let config = || RedisConfig::cluster([proxy.url()]);
    let bucket = || Gcra::new(Rate::per_hour(1), 100).unwrap();
    let (returned, refunds) = refund_with_a_lost_reply(&node, &proxy, config, bucket, "GET");
    assert_eq!(refunds, 2, "redis-rs's cluster client re-sent the refund");
    assert_eq!(
        returned.unwrap(),
        7,
        "the copy reports the refund that landed"
    );
}

/// The same for an aligned window's lease: a per-call decision leaves the lease's stamp, so one
/// of 7 brings the hash back to the lease's own index, count and stamp.
#[test]
fn an_aligned_window_refund_re_sent_after_a_lost_reply_lands_once() {
    let (node, proxy) = proxied_cluster();
    let config = || RedisConfig::cluster([proxy.url()]);
    let window = || FixedWindow::aligned(100, FIFTY_YEARS).unwrap();
    let (returned, refunds) = refund_with_a_lost_reply(&node, &proxy, config, window, "HGETALL");
    assert_eq!(refunds, 2, "redis-rs's cluster client re-sent the refund");
    assert_eq!(
        returned.unwrap(),
        7,
        "the copy reports the refund that landed"
    );
}

/// The same on one server: redis-rs's `ConnectionManager` does not re-send a request whose
/// connection dropped (it reconnects for the next one), so the refund is sent once; its reply
/// lost, `release` returns the call's failure, naming the server (the proxy, as configured),
/// and the client counts the permits stranded and the refund failed.
#[test]
fn a_refund_whose_reply_is_lost_is_not_re_sent_to_a_single_server() {
    let server = RedisServer::start();
    let proxy = LossyProxy::forward(LossyProxy::listener(), server.port);
    let config = || RedisConfig::single(proxy.url());
    let bucket = || Gcra::new(Rate::per_hour(1), 100).unwrap();
    let (returned, refunds) = refund_with_a_lost_reply(&server, &proxy, config, bucket, "GET");
    assert_eq!(refunds, 1, "sent once");
    match returned {
        Err(ReleaseError::Refund { permits: 7, error }) => {
            assert_eq!(
                error.server_address(),
                Some(proxy.url().as_str()),
                "{error}"
            );
        }
        other => panic!("its reply lost, not known to be refunded: {other:?}"),
    }
}

/// A one-master cluster reached only through a [`LossyProxy`] (it announces the proxy's port).
fn proxied_cluster() -> (RedisServer, LossyProxy) {
    let listener = LossyProxy::listener();
    let announced = listener.local_addr().unwrap().port();
    let node = RedisServer::start_cluster_announcing(announced);
    let proxy = LossyProxy::forward(listener, node.port);
    (node, proxy)
}

/// A lease of 8 of 100 (7 held; limiters on a clock that never moves, so it never expires)
/// given back through `proxy` (to `server`) with its reply lost; meanwhile another process, on
/// a connection of its own, decides 7 on the key, which brings it back to the lease's word.
/// Checks that the key then holds that word (read with `read`: the refund landed once, the
/// other's 7 stay taken) and that the counts agree with what `release` returned (7 refunded,
/// or 7 stranded and one failed refund); returns what `release` returned and how many refund
/// requests went through the proxy.
fn refund_with_a_lost_reply<A: LeaseAlgorithm>(
    server: &RedisServer,
    proxy: &LossyProxy,
    config: impl Fn() -> RedisConfig,
    algorithm: impl Fn() -> A,
    read: &str,
) -> (Result<u64, ReleaseError>, usize) {
    let policy = FailurePolicy::FailClosed;
    let clock = ManualClock::new();
    let other = RedisBackend::blocking_connect(config().timeout(TIMEOUT)).unwrap();
    let other = RedisLimiter::with_clock(&other, "lost", algorithm(), policy, clock.clone());
    let other = Arc::new(other.unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The scripts loaded now, on another key (the server's script cache is shared): the lost
    // reply below is the refund's own, not a NOSCRIPT, and the other's decision is one call.
    assert!(other.blocking_try_acquire("warm", 1).unwrap().is_allowed());
    let warm = LeasedKey::new(Arc::clone(&other), "warm");
    assert!(warm.blocking_try_acquire(1).unwrap().is_allowed());
    assert!(runtime.block_on(warm.release()).unwrap() > 0, "a refund");
    runtime.block_on(async {
        let backend = RedisBackend::connect(config().timeout(TIMEOUT))
            .await
            .unwrap();
        let limiter = RedisLimiter::with_clock(&backend, "lost", algorithm(), policy, clock);
        let limiter = Arc::new(limiter.unwrap());
        let leased = LeasedKey::new(limiter.clone(), "k");
        assert!(leased.try_acquire(1).await.unwrap().is_allowed());
        assert_eq!(leased.counts().held, 7);
        let key = limiter.redis_keys("k")[0].clone();
        let word = server.cli(&[read, &key]);
        assert!(!word.is_empty(), "{key}");
        let decided = Arc::new(std::sync::Mutex::new(None));
        let hook_decided = Arc::clone(&decided);
        let before = proxy.script_requests();
        proxy.lose_next_reply(move || {
            let decision = other.blocking_try_acquire("k", 7).map(|d| d.is_allowed());
            *hook_decided.lock().unwrap() = Some(decision);
        });
        let returned = leased.release().await;
        assert!(proxy.lost(), "the refund's reply was lost");
        let counts = leased.counts();
        let (refunded, failed) = if returned.is_ok() { (7, 0) } else { (0, 1) };
        assert_eq!(
            (counts.refunded, counts.stranded, counts.failed_refunds),
            (refunded, 7 - refunded, failed),
            "{returned:?}"
        );
        let decided = decided.lock().unwrap().take();
        assert!(
            matches!(decided, Some(Ok(true))),
            "the other process's decision: {decided:?}"
        );
        assert_eq!(
            server.cli(&[read, &key]),
            word,
            "the refund landed once: the other's 7 stay taken"
        );
        // Less the other's decision, which went through the proxy too.
        (returned, proxy.script_requests() - before - 1)
    })
}

/// The GCRA refund script itself: a refund with no deadline (the server's clock offset unknown:
/// its mark could be given no end) gives nothing back and leaves no mark; one whose mark is
/// there (a copy of a refund that landed) replies that it landed and changes nothing; one that
/// lands leaves its mark, ending just after its deadline or the word's time, whichever is later.
#[test]
fn a_refund_lands_only_with_a_deadline_and_only_once() {
    let server = RedisServer::start();
    let sha = server.cli(&[
        "SCRIPT",
        "LOAD",
        include_str!("../src/redis/gcra_refund.lua"),
    ]);
    let hour = 3_600_000_000u64;
    let now = server.time_micros();
    let word = (now + 8 * hour).to_string();
    let (key, mark) = ("{t:k}:g", "{t:k}:g:refund:1.0");
    server.cli(&["SET", key, &word, "PX", "86400000"]);
    let refund = |deadline: &str| {
        let args = [
            "EVALSHA",
            &sha,
            "2",
            key,
            mark,
            &hour.to_string(),
            &word,
            "7",
            "0",
        ];
        let mut args = args.to_vec();
        args.push(deadline);
        server.cli(&args)
    };
    let refused = refund("0");
    assert!(
        refused.starts_with("0\n"),
        "no deadline, no refund: {refused}"
    );
    assert_eq!(server.cli(&["GET", key]), word);
    assert_eq!(server.cli(&["EXISTS", mark]), "0", "no mark");
    let deadline = server.time_micros() + 60_000_000;
    let landed = refund(&deadline.to_string());
    assert!(landed.starts_with("1\n"), "{landed}");
    let refunded = (now + hour).to_string();
    assert_eq!(server.cli(&["GET", key]), refunded);
    // The word's time (8 hours on) is past the deadline: a retry of this refund sent after the
    // deadline, under its name, must still find the mark while the key can hold the word.
    let ends = server.cli(&["PEXPIRETIME", mark]);
    let after = ((now + 8 * hour) / 1_000 + 1).to_string();
    assert_eq!(
        ends, after,
        "marked until the millisecond after the word's time, the later of it and the deadline"
    );
    // Brought back to the word (as a decision of 7 would), the copy still does not land.
    server.cli(&["SET", key, &word, "PX", "86400000"]);
    let copy = refund(&deadline.to_string());
    assert!(
        copy.starts_with("1\n"),
        "the copy reports the landing: {copy}"
    );
    assert_eq!(server.cli(&["GET", key]), word, "and changes nothing");
}

/// A per-call decision whose reply is lost on a cluster connection: redis-rs's cluster client
/// re-sends it on a new connection and the server, before the call's deadline, decides it
/// again, so it takes its `n` twice (under-admission of `n` per copy; `RedisBackend`'s docs,
/// "What can still be consumed"). The caller gets the copy's decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_call_decision_re_sent_after_a_lost_reply_takes_its_permits_twice() {
    let (node, proxy) = proxied_cluster();
    let config = RedisConfig::cluster([proxy.url()]).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let window = FixedWindow::aligned(10, FIFTY_YEARS).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::new(&backend, "resent", window, policy).unwrap();
    // The script loaded now, on another key: the lost reply below is the decision's own.
    assert!(limiter.try_acquire("warm", 1).await.unwrap().is_allowed());
    let before = proxy.script_requests();
    proxy.lose_next_reply(|| {});
    let decision = limiter.try_acquire("k", 3).await.unwrap();
    assert!(proxy.lost(), "the decision's reply was lost");
    assert_eq!(proxy.script_requests() - before, 2, "re-sent once");
    assert!(decision.is_allowed());
    assert_eq!(decision.remaining(), 4, "the copy's decision: 10 − 3 − 3");
    let key = limiter.redis_keys("k")[0].clone();
    assert_eq!(node.cli(&["HGET", &key, "c"]), "6", "taken twice");
}

/// A lease request whose reply is lost on a cluster connection: the copy grants a second lease,
/// which the client serves; the first grant's permits stay taken and are in none of
/// [`LeasedKey::counts`] (under-admission of one lease per copy; `LeasedKey`'s docs, "The
/// bound"). The second lease's refund still lands exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_re_sent_after_a_lost_reply_strands_the_first_grant_uncounted() {
    let (node, proxy) = proxied_cluster();
    let config = RedisConfig::cluster([proxy.url()]).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let window = FixedWindow::aligned(100, FIFTY_YEARS).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, "resent", window, policy, ManualClock::new());
    let limiter = Arc::new(limiter.unwrap());
    // The lease and refund scripts loaded now, on another key.
    let warm = LeasedKey::new(Arc::clone(&limiter), "warm");
    assert!(warm.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(warm.release().await.unwrap(), 7);
    let before = proxy.script_requests();
    proxy.lose_next_reply(|| {});
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert!(proxy.lost(), "the lease's reply was lost");
    assert_eq!(proxy.script_requests() - before, 2, "re-sent once");
    let key = limiter.redis_keys("k")[0].clone();
    assert_eq!(
        node.cli(&["HGET", &key, "c"]),
        "16",
        "two leases of 8 taken"
    );
    let counts = leased.counts();
    assert_eq!((counts.leases, counts.leased, counts.held), (1, 8, 7));
    assert_eq!(
        leased.release().await.unwrap(),
        7,
        "the second lease's refund"
    );
    assert_eq!(
        node.cli(&["HGET", &key, "c"]),
        "9",
        "the first grant's 8 stay taken"
    );
    let counts = leased.counts();
    assert_eq!(
        (counts.refunded, counts.stranded),
        (7, 0),
        "and are counted nowhere"
    );
}

/// A refund's mark is named after the limiter key (`{name:key}:suffix:refund:…`), so it shares
/// the key's hash tag and slot whatever the user key holds (`{`, `}`, `:`; the limiter's name
/// holds none): on a three-master cluster each refund lands (a mark in another slot would fail
/// the script with `CROSSSLOT`, and `release` would return 0), and its mark is on the key's
/// master, in the key's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_mark_shares_the_keys_slot_whatever_the_user_key_holds() {
    let cluster = RedisCluster::start();
    let config = RedisConfig::cluster(cluster.urls()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let gcra = Gcra::new(Rate::per_hour(1), 100).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, "slots", gcra, policy, ManualClock::new());
    let limiter = Arc::new(limiter.unwrap());
    let users = [
        "plain", "a{b}c", "{b}", "}{", "{", "}", "{}", "a:b:c", ":", "x}y",
    ];
    let mut slots = std::collections::HashSet::new();
    for user in users {
        let leased = LeasedKey::new(Arc::clone(&limiter), user);
        assert!(leased.try_acquire(1).await.unwrap().is_allowed(), "{user}");
        assert_eq!(
            leased.release().await.unwrap(),
            7,
            "{user}: the refund landed"
        );
        let key = limiter.redis_keys(user)[0].clone();
        let prefix = format!("{key}:refund:");
        let slot = cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", &key]);
        slots.insert(slot.clone());
        let marks: Vec<(usize, String)> = (0..cluster.nodes.len())
            .flat_map(|i| {
                let keys = cluster.nodes[i].cli(&["KEYS", "*"]);
                let keys: Vec<String> = keys.lines().map(str::to_owned).collect();
                keys.into_iter()
                    .filter(|k| k.starts_with(&prefix))
                    .map(move |k| (i, k))
            })
            .collect();
        assert_eq!(marks.len(), 1, "{user}: one mark, {marks:?}");
        let (holder, mark) = &marks[0];
        assert_eq!(cluster.nodes[*holder].cli(&["EXISTS", &key]), "1", "{user}");
        let mark_slot = cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", mark]);
        assert_eq!(mark_slot, slot, "{user}: {mark} in {key}'s slot");
    }
    assert!(slots.len() > 1, "the keys spread over slots: {slots:?}");
}

/// A refund's deadline is 0 only while the backend's server-clock offset is unknown (a lazy
/// backend before its first reply), and the refund script then gives nothing back; but every
/// refund follows its lease's reply, which taught the offset: a lazy backend's first lease is
/// refunded as an eager one's is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_backends_first_lease_is_refunded_its_reply_taught_the_offset() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT).lazy();
    let backend = RedisBackend::connect(config).await.unwrap();
    assert_eq!(backend.server_offset(), None, "nothing learnt yet");
    let leased = LeasedKey::new(frozen_still(&backend, 100), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert!(backend.server_offset().is_some(), "the lease's reply");
    assert_eq!(leased.release().await.unwrap(), 7, "the refund landed");
    assert_eq!(leased.counts().refunded, 7);
}

/// The aligned window's refund script itself (as `a_refund_lands_only_with_a_deadline_and_only_once`
/// for GCRA's): no deadline, no refund and no mark; a landing leaves a mark ending the
/// millisecond after its deadline's (its window ends before), whether the deadline ends a
/// millisecond (`…999` µs) or starts one (`…000` µs); a copy finding the mark changes
/// nothing; a copy that arrives after its deadline, its mark gone, is refused as late and
/// changes nothing. A lease of a window that ends after the deadline is marked until the window ends:
/// a retry under the same name sent after the deadline still finds the mark.
#[test]
fn an_aligned_refund_lands_only_with_a_deadline_and_only_once() {
    let server = RedisServer::start();
    let source = include_str!("../src/redis/fixed_window_aligned_refund.lua");
    let sha = server.cli(&["SCRIPT", "LOAD", source]);
    let window = 1_000_000u64; // a second, in µs: it ends before the deadlines below
    let stamp = server.time_micros();
    let (stamp_arg, window_arg) = (stamp.to_string(), window.to_string());
    let key = "{t:k}:fwa";
    // The hash a lease of 8 wrote at `stamp`.
    let leased = || {
        let index = (stamp / window).to_string();
        server.cli(&["HSET", key, "i", &index, "c", "8", "l", &stamp_arg]);
        server.cli(&["PEXPIRE", key, "86400000"]);
    };
    let refund = |mark: &str, deadline: u64| {
        let deadline = deadline.to_string();
        let args = ["2", key, mark, &stamp_arg, "8", "7", &window_arg, &deadline];
        let mut command = vec!["EVALSHA", sha.as_str()];
        command.extend(args);
        server.cli(&command)
    };
    let count = || server.cli(&["HGET", key, "c"]);
    leased();
    let refused = refund("{t:k}:fwa:refund:1.0", 0);
    assert!(refused.starts_with("0\n"), "no deadline: {refused}");
    assert_eq!(count(), "8", "nothing given back");
    assert_eq!(
        server.cli(&["EXISTS", "{t:k}:fwa:refund:1.0"]),
        "0",
        "no mark"
    );
    let ms = server.time_micros() / 1_000 + 60_000;
    for (token, deadline) in [("1.1", ms * 1_000 + 999), ("1.2", ms * 1_000)] {
        let mark = format!("{{t:k}}:fwa:refund:{token}");
        leased();
        let landed = refund(&mark, deadline);
        assert!(landed.starts_with("1\n"), "{landed}");
        assert_eq!(count(), "1", "7 of 8 given back");
        let ends = server.cli(&["PEXPIRETIME", &mark]);
        assert_eq!(
            ends,
            (ms + 1).to_string(),
            "{deadline}: to the next millisecond"
        );
        // Brought back to the lease's index, count and stamp (as a per-call decision of 7
        // would), the copy does not land again.
        leased();
        let copy = refund(&mark, deadline);
        assert!(
            copy.starts_with("1\n"),
            "the copy reports the landing: {copy}"
        );
        assert_eq!(count(), "8", "and changes nothing");
    }
    // A copy after its deadline finds no mark (gone: as once it has expired) and is refused.
    server.cli(&["DEL", "{t:k}:fwa:refund:1.1"]);
    let late = refund("{t:k}:fwa:refund:1.1", server.time_micros() - 1_000_000);
    assert!(late.starts_with("2\n"), "late: {late}");
    assert_eq!(count(), "8", "nothing given back");

    // A window of 10^15 µs (about 31.7 years, ending in 2033): marked until it ends, long
    // past the deadline (a minute).
    let long = 1_000_000_000_000_000u64;
    let long_arg = long.to_string();
    let index = (stamp / long).to_string();
    server.cli(&["HSET", key, "i", &index, "c", "8", "l", &stamp_arg]);
    let deadline = (server.time_micros() + 60_000_000).to_string();
    let mark = "{t:k}:fwa:refund:1.3";
    let args = ["2", key, mark, &stamp_arg, "8", "7", &long_arg, &deadline];
    let mut command = vec!["EVALSHA", sha.as_str()];
    command.extend(args);
    let landed = server.cli(&command);
    assert!(landed.starts_with("1\n"), "{landed}");
    assert_eq!(count(), "1", "7 of 8 given back");
    let window_end = (stamp / long + 1) * long;
    assert_eq!(
        server.cli(&["PEXPIRETIME", mark]),
        (window_end / 1_000 + 1).to_string(),
        "marked until the window's end"
    );
}
