//! `LeasedKey` at its edges: during an outage a call must return within the
//! backend's timeout, as a per-call decision does. A frozen server (SIGSTOP) never answers, so
//! every Redis call a `LeasedKey` makes to it waits for its full timeout. The tests whose
//! calls must time out use [`SHORT`]; the others the generous [`TIMEOUT`], which only a hang
//! reaches.
#![cfg(feature = "redis")]

#[path = "support/lossy_proxy.rs"]
mod lossy_proxy;
#[path = "redis/server.rs"]
mod server;
#[path = "redis/taken.rs"]
mod taken;

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::backend::{BreakerConfig, BreakerState, FailureKind, FailurePolicy};
use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter, ReleaseError};
use floodgate::{Gcra, ManualClock, Rate};
use lossy_proxy::LossyProxy;
use server::RedisServer;
use std::future::Future as _;
use taken::taken;

/// The backend's timeout where no call must time out: a live server's answer never misses it,
/// however loaded the machine.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The backend's timeout where calls to a frozen server must time out (as the Redis cluster
/// tests'): long enough that a live server's answer does not miss it on a loaded machine, short
/// enough that the frozen calls' waits keep the tests quick.
const SHORT: Duration = Duration::from_secs(2);
/// The real-time bound on a call to a frozen server: only a hang reaches it.
const HANG: Duration = Duration::from_secs(60);

/// GCRA of 1 permit an hour with a burst of 100: no permit comes back during a test.
fn hourly_gcra() -> Gcra {
    Gcra::new(Rate::per_hour(1), 100).unwrap()
}

/// A fail-closed [`hourly_gcra`] limiter named `name` on `server` with `timeout`, on a manual
/// clock: its backend, the limiter and the clock.
async fn hourly(
    server: &RedisServer,
    timeout: Duration,
    name: &str,
) -> (RedisBackend, RedisLimiter<Gcra, ManualClock>, ManualClock) {
    hourly_on(&server.url(), timeout, name).await
}

/// [`hourly`] at `url` (a proxy's) with the generous [`TIMEOUT`].
async fn hourly_at(
    url: &str,
    name: &str,
) -> (RedisBackend, RedisLimiter<Gcra, ManualClock>, ManualClock) {
    hourly_on(url, TIMEOUT, name).await
}

/// [`hourly`] at `url`.
async fn hourly_on(
    url: &str,
    timeout: Duration,
    name: &str,
) -> (RedisBackend, RedisLimiter<Gcra, ManualClock>, ManualClock) {
    let config = RedisConfig::single(url).timeout(timeout);
    let backend = RedisBackend::connect(config).await.unwrap();
    let clock = ManualClock::new();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, name, hourly_gcra(), policy, clock.clone());
    (backend, limiter.unwrap(), clock)
}

/// A lease expired with permits unserved, then Redis freezes: the next call gives the old
/// lease back, then (had the refund been answered) asks for a new one, both within the call's
/// one timeout: the refund gets half of what is left of it, the request the rest, and a refund
/// that failed decides the call (no request follows it). Before, the refund waited up to a
/// whole timeout and the request up to a fresh one: two timeouts. The test bounded the call's
/// real wait by `2 × SHORT`, which a stall of the test (a loaded machine) could pass; it now
/// checks what the server was sent (`SLOWLOG`, read after the thaw once a later call on the
/// same connection was answered, so everything sent before that call has run):
/// * for the key, the refund and nothing after it;
/// * the refund's deadline (its last argument, on the server's clock) is at least `7/16` of a
///   timeout before the deadline of a per-call decision started after the refill's first poll.
///   The client sends `deadline − budget / 8`, shifted by one offset (no reply changes it while
///   the server is frozen): a refund given half of the call's timeout sends at most `7/16` of a
///   timeout past the refill's start, the later decision at least `7/8` of one past its own, so
///   no stall can bring them closer. A refund given the call's whole timeout sends `7/8` of one
///   past the refill's start: within microseconds of the later decision's.
///
/// Real time only bounds a hang ([`HANG`]).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refill_during_an_outage_returns_within_the_timeout() {
    let server = RedisServer::start();
    let (_, limiter, clock) = hourly(&server, SHORT, "review").await;
    let limiter = Arc::new(limiter);
    // The lease, refund and per-call scripts' SHAs, in that order (each loaded here).
    server.log_script_calls();
    let warm = LeasedKey::new(Arc::clone(&limiter), "warm");
    assert!(warm.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(warm.release().await.unwrap(), 7);
    assert!(limiter.try_acquire("warm", 1).await.unwrap().is_allowed());
    let mut shas: Vec<String> = Vec::new();
    for call in server.script_calls() {
        if !shas.contains(&call.sha) {
            shas.push(call.sha);
        }
    }
    let [lease, refund, decision]: [String; 3] = shas.try_into().expect("three scripts");
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);
    clock.advance(leased.lifetime());

    server.log_script_calls();
    server.freeze();
    // One poll: the expired lease is retired and its refund sent, its deadline set (before the
    // first await that waits).
    let mut refill = std::pin::pin!(leased.try_acquire_outcome(1));
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(refill.as_mut().poll(&mut context).is_pending());
    let later = limiter.try_acquire_outcome("other", 1);
    let both = tokio::time::timeout(HANG, async { tokio::join!(refill, later) }).await;
    server.thaw();
    let (outcome, later) = both.expect("the refill or the later decision hung");
    let (outcome, later) = (outcome.unwrap(), later.unwrap());
    assert!(
        outcome.failure().is_some_and(|e| e.is_timeout()),
        "{outcome:?}"
    );
    assert!(later.failure().is_some_and(|e| e.is_timeout()), "{later:?}");
    let synced = limiter.try_acquire_outcome("sync", 1).await.unwrap();
    assert!(synced.failure().is_none(), "{synced:?}");

    let calls = server.script_calls();
    let first_key = |key: &str| limiter.redis_keys(key)[0].clone();
    let on = |key: &str| -> Vec<&str> {
        let key = first_key(key);
        let on_key = calls.iter().filter(|c| c.keys.first() == Some(&key));
        on_key.map(|c| c.sha.as_str()).collect()
    };
    assert_eq!(
        on("k"),
        [refund.as_str()],
        "the refund only, no request ({lease}) after it failed: {calls:?}"
    );
    assert_eq!(on("other"), [decision.as_str()], "{calls:?}");
    let deadline = |key: &str| -> u64 {
        let key = first_key(key);
        let call = calls.iter().find(|c| c.keys.first() == Some(&key)).unwrap();
        call.args.last().unwrap().parse().unwrap()
    };
    let (refunds_by, later_by) = (deadline("k"), deadline("other"));
    // 2 µs: each side's shift to the server's clock truncates to the microsecond.
    let half = u64::try_from((SHORT * 7 / 16).as_micros()).unwrap() - 2;
    assert!(
        refunds_by > 0 && later_by >= refunds_by + half,
        "the refund's deadline {refunds_by} is not 7/16 of {SHORT:?} before a later call's \
         {later_by} (µs, the server's clock)"
    );
}

/// Six tasks share one `LeasedKey` and Redis is frozen. The first task's refill holds the
/// owner while its request waits for its timeout; the others wait for the owner, each until
/// its own deadline, and a refill that failed while they waited is their failure too: one
/// request for the six, each returning within its own timeout. Before, each waiting task sent
/// its own refill once it got the owner, one after another, each waiting a full timeout again,
/// until the default breaker (5 failures) opened: the fifth returned after five timeouts. The
/// test bounded the longest real wait by `3 × SHORT`, which a stall of the test could pass; it
/// now checks that one script reached the server (`SLOWLOG`, read after the thaw once a later
/// call on the same connection was answered). On a current-thread runtime the six tasks start,
/// in spawn order, before the first is polled again: each has asked before the first refill
/// can fail, however the test is stalled, so none may send a request of its own. Real time
/// only bounds a hang ([`HANG`]).
#[tokio::test(flavor = "current_thread")]
async fn concurrent_refills_during_an_outage_each_return_within_the_timeout() {
    const TASKS: usize = 6;
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(SHORT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let limiter =
        RedisLimiter::new(&backend, "review", hourly_gcra(), FailurePolicy::FailOpen).unwrap();
    let key = limiter.redis_keys("k")[0].clone();
    let leased = Arc::new(LeasedKey::new(Arc::new(limiter), "k"));
    // On the same connection, with no breaker to short-circuit it.
    let sync = RedisLimiter::new(&backend, "sync", hourly_gcra(), FailurePolicy::FailClosed);
    let sync = sync.unwrap().with_breaker(None);

    server.log_script_calls();
    server.freeze();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let leased = Arc::clone(&leased);
            tokio::spawn(async move { leased.try_acquire_outcome(1).await.unwrap() })
        })
        .collect();
    let joined = tokio::time::timeout(HANG, async {
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        outcomes
    })
    .await;
    server.thaw();
    let outcomes = joined.expect("a refill hung");
    for outcome in &outcomes {
        assert!(
            outcome.failure().is_some_and(|e| e.is_timeout()),
            "{outcomes:?}"
        );
    }
    let synced = sync.try_acquire_outcome("k", 1).await.unwrap();
    assert!(synced.failure().is_none(), "{synced:?}");
    let calls = server.script_calls();
    let sent = calls
        .iter()
        .filter(|c| c.keys.first() == Some(&key))
        .count();
    assert_eq!(sent, 1, "one request for the six: {calls:?}");
}

/// An anchored window's lease must end by the time the window's counter expires on the server
/// ("never over the limit": once the counter is gone, a new window opens and takes a full
/// limit, so a permit still served from the old lease is one over it). The lease ends
/// `reset_after` after a clock read taken after the `TIME` read below; the script takes
/// `reset_after` from `PTTL`, which Redis counts from the script's start truncated to the
/// millisecond, so it overstates the time left by up to 1 ms, and the lease outlives the
/// counter. Only server clock readings are compared (no clock offset enters); a correct
/// implementation never fails this, whatever the timing. 50 fresh keys: the overstatement
/// shows whenever the round trip fits in the millisecond the script starts in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anchored_window_lease_ends_by_the_counters_expiry() {
    let server = RedisServer::start();
    let backend = RedisBackend::connect(RedisConfig::single(server.url()).timeout(TIMEOUT))
        .await
        .unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let mut direct = client.get_multiplexed_async_connection().await.unwrap();
    let window = floodgate::FixedWindow::new(100, Duration::from_secs(60)).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = Arc::new(RedisLimiter::new(&backend, "review", window, policy).unwrap());
    let mut outlived = Vec::new();
    for i in 0..50 {
        let key = format!("k{i}");
        let leased = LeasedKey::new(Arc::clone(&limiter), &key)
            .with_lifetime(Duration::from_secs(3_600))
            .unwrap();
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut direct).await.unwrap();
        let before = secs * 1_000_000 + micros;
        let first = leased.try_acquire(1).await.unwrap();
        assert!(first.is_allowed() && leased.counts().held > 0, "{first:?}");
        let counter = &limiter.redis_keys(&key)[0];
        let expires_ms: u64 = redis::cmd("PEXPIRETIME")
            .arg(counter)
            .query_async(&mut direct)
            .await
            .unwrap();
        // The lease is served until at least `before + reset_after` (server clock).
        let lease_end = before + u64::try_from(first.reset_after().as_micros()).unwrap();
        if lease_end > expires_ms * 1_000 {
            outlived.push(lease_end - expires_ms * 1_000);
        }
    }
    assert!(
        outlived.is_empty(),
        "{} of 50 leases outlive their window's counter by (us): {outlived:?}",
        outlived.len()
    );
}

/// Conservation on a frozen bucket (nothing refills during the test): every permit Redis no
/// longer holds was handed to a caller or is counted as stranded, exactly, after 8 tasks raced
/// on one `LeasedKey` (leases growing, shrinking to per-call decisions near the limit, refunds)
/// and a release. Redis's own count is read with a per-call request for the whole capacity,
/// whose denial reports exactly what is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_permit_taken_from_redis_is_handed_out_or_counted_stranded() {
    const CAPACITY: u32 = 1_000;
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(Duration::from_secs(30));
    let backend = RedisBackend::connect(config).await.unwrap();
    let gcra = Gcra::new(Rate::per_hour(1), CAPACITY).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = Arc::new(RedisLimiter::new(&backend, "review", gcra, policy).unwrap());
    let leased = Arc::new(LeasedKey::new(Arc::clone(&limiter), "k"));
    let tasks: Vec<_> = (0..8u32)
        .map(|t| {
            let leased = Arc::clone(&leased);
            tokio::spawn(async move {
                let mut admitted = 0u64;
                for i in 0..300u32 {
                    let n = 1 + (t + i) % 3;
                    if leased.try_acquire(n).await.unwrap().is_allowed() {
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
    leased.release().await.unwrap();
    let counts = leased.counts();
    assert_eq!(limiter.failures().total(), 0);
    let probe = limiter.try_acquire_outcome("k", CAPACITY).await.unwrap();
    assert!(!probe.decision().is_allowed(), "{probe:?}");
    let taken = u64::from(CAPACITY) - probe.decision().remaining();
    assert_eq!(
        taken,
        admitted + counts.stranded,
        "Redis lost {taken}; admitted {admitted}: {counts:?}"
    );
}

/// Redis dies while a lease is held and comes back empty (a restart without persistence): the
/// held permits are still served (Redis granted them), the refill during the outage is the
/// policy's (one failure; the unserved permits it retired counted stranded, none given back),
/// and after the restart the next lease comes from the new, empty key: nothing counted twice,
/// no refund into the new key. Waits only for the restarted server to answer (a readiness
/// poll, bounded as a hang guard); no outcome depends on time passing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_through_a_restart_is_served_and_never_refunded_into_the_new_key() {
    let mut server = RedisServer::start();
    let (backend, limiter, _) = hourly(&server, TIMEOUT, "restart").await;
    let limiter = Arc::new(limiter.with_breaker(None));
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);

    server.kill();
    for _ in 0..3 {
        let outcome = leased.try_acquire_outcome(1).await.unwrap();
        assert!(outcome.decision().is_allowed() && outcome.failure().is_none());
    }
    // Five of the 4 left: a refill, which fails; the policy (fail closed) denies.
    let outcome = leased.try_acquire_outcome(5).await.unwrap();
    assert!(!outcome.decision().is_allowed() && outcome.failure().is_some());
    let counts = leased.counts();
    // The refill gave the 4 back first: that refund's call failed too (counted, not returned).
    assert_eq!(
        (
            counts.leases,
            counts.held,
            counts.refunded,
            counts.stranded,
            counts.failed_refunds
        ),
        (1, 0, 0, 4, 1)
    );
    assert_eq!(counts.served(), 4);
    assert_eq!(limiter.failures().total(), 1);

    server.restart();
    let ready =
        RedisLimiter::new(&backend, "ready", hourly_gcra(), FailurePolicy::FailClosed).unwrap();
    let ready = ready.with_breaker(None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while ready
        .try_acquire_outcome("k", 1)
        .await
        .unwrap()
        .failure()
        .is_some()
    {
        assert!(Instant::now() < deadline, "Redis never answered again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let next = leased.try_acquire(1).await.unwrap();
    assert!(next.is_allowed());
    let counts = leased.counts();
    assert_eq!((counts.leases, counts.stranded), (2, 4), "{counts:?}");
    // The new key counts only the new lease.
    let new_lease = counts.leased - 8;
    let probe = limiter.try_acquire_outcome("k", 100).await.unwrap();
    assert!(probe.failure().is_none(), "{probe:?}");
    assert_eq!(probe.decision().remaining(), 100 - new_lease, "{counts:?}");
    assert_eq!(next.remaining(), 100 - 1, "{next:?}");
}

/// The breaker is half-open and its probe is a lease refill of this `LeasedKey` (its owner):
/// the probe waits on a frozen Redis for up to the timeout while holding the owner's mutex.
/// Another caller of the key must be short-circuited at once, as a per-call decision is while
/// a probe is out ("calls during an outage return within 1 ms"), not wait behind the probe for
/// the timeout and then take its failure. The probe cannot end before `TIMEOUT` (30 s: a
/// frozen server never answers, and timers never fire early), so the second caller returning
/// while it is still out, short-circuited, is no race on any machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_waiting_on_a_half_open_probe_is_short_circuited_at_once() {
    const TIMEOUT: Duration = Duration::from_secs(30);
    let server = RedisServer::start();
    let (_, limiter, clock) = hourly(&server, TIMEOUT, "probe").await;
    let limiter = Arc::new(limiter);
    let leased = Arc::new(LeasedKey::new(Arc::clone(&limiter), "k"));
    // Open the breaker (5 consecutive failures by default) and let its back-off pass.
    let breaker = limiter.breaker().unwrap().shared();
    while breaker.state() == BreakerState::Closed {
        breaker.admit().expect("closed").failed();
    }
    clock.advance(breaker.retry_in());

    server.freeze();
    let probe = {
        let leased = Arc::clone(&leased);
        tokio::spawn(async move { leased.try_acquire_outcome(1).await.unwrap() })
    };
    // The refill holds the owner and has become the probe (a hang guard, not a timing).
    let guard = Instant::now() + Duration::from_secs(60);
    while breaker.state() != BreakerState::HalfOpen {
        assert!(Instant::now() < guard, "the refill never became the probe");
        tokio::task::yield_now().await;
    }
    let other = leased.try_acquire_outcome(1).await.unwrap();
    let probe_still_out = !probe.is_finished();
    server.thaw();
    let probed = probe.await.unwrap();
    assert!(
        other.failure().is_some_and(|e| e.is_circuit_open()) && probe_still_out,
        "a caller waited for the half-open probe (still out: {probe_still_out}): {other:?}"
    );
    assert!(!other.decision().is_allowed(), "{other:?}");
    // The probe reached Redis once it was thawed: the breaker closes.
    assert!(
        probed.failure().is_none() && probed.decision().is_allowed(),
        "{probed:?}"
    );
    assert_eq!(breaker.state(), BreakerState::Closed);
}

/// A lease of 8 served once (7 held), on a backend timing out after `timeout`: its key's
/// backend, limiter (shared) and `LeasedKey`.
async fn seven_held(
    server: &RedisServer,
    timeout: Duration,
    name: &str,
) -> (
    RedisBackend,
    Arc<RedisLimiter<Gcra, ManualClock>>,
    LeasedKey<Gcra, ManualClock>,
) {
    let (backend, limiter, _) = hourly(server, timeout, name).await;
    let limiter = Arc::new(limiter);
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);
    (backend, limiter, leased)
}

/// Redis is down when the process gives its lease back: `release` fails, naming the server,
/// and does not say "nothing to give back" (`Ok(0)`, which a refund the server refused
/// returns); the 7 permits are counted stranded. The time bound guards a hang only (a killed
/// server refuses the call at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_while_redis_is_down_fails_naming_the_server() {
    let mut server = RedisServer::start();
    let (_, _, leased) = seven_held(&server, TIMEOUT, "down").await;
    server.kill();
    let started = Instant::now();
    let released = leased.release().await;
    assert!(started.elapsed() < 10 * TIMEOUT, "hung: {released:?}");
    let (permits, error) = match released {
        Err(ReleaseError::Refund { permits, error }) => (permits, error),
        other => panic!("not the refund's failure: {other:?}"),
    };
    assert_eq!(permits, 7);
    assert!(error.to_string().contains(&server.url()), "{error}");
    assert_eq!(
        error.server_address(),
        Some(server.url().as_str()),
        "{error}"
    );
    let counts = leased.counts();
    assert_eq!(
        (
            counts.held,
            counts.refunded,
            counts.stranded,
            counts.failed_refunds
        ),
        (0, 0, 7, 1),
        "{counts:?}"
    );
}

/// Redis is frozen (SIGSTOP) when the process gives its lease back: `release` times out after
/// the backend's timeout and says so, naming the server (the refund may have run: the 7 are
/// counted stranded). Timers never fire early, so the call cannot return before `SHORT`; the
/// upper bound guards a hang only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_while_redis_is_frozen_times_out_naming_the_server() {
    let server = RedisServer::start();
    let (_, _, leased) = seven_held(&server, SHORT, "frozen").await;
    server.freeze();
    let started = Instant::now();
    let released = leased.release().await;
    let waited = started.elapsed();
    server.thaw();
    assert!(waited < 10 * SHORT, "hung: {released:?}");
    let (permits, error) = match released {
        Err(ReleaseError::Refund { permits, error }) => (permits, error),
        other => panic!("not the refund's failure: {other:?}"),
    };
    assert!(permits == 7 && error.is_timeout(), "{error}");
    assert!(error.to_string().contains(&server.url()), "{error}");
    let counts = leased.counts();
    assert_eq!(
        (counts.stranded, counts.failed_refunds),
        (7, 1),
        "{counts:?}"
    );
}

/// A decision on the key came after the lease: the refund script finds another word and
/// refuses; `release` returns `Ok(0)` (nothing given back, nothing failed) and the 7 are
/// counted stranded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_after_the_key_moved_on_gives_back_nothing_and_is_no_failure() {
    let server = RedisServer::start();
    let (_, limiter, leased) = seven_held(&server, TIMEOUT, "moved").await;
    assert!(limiter.try_acquire("k", 1).await.unwrap().is_allowed());
    assert_eq!(leased.release().await.unwrap(), 0);
    let counts = leased.counts();
    assert_eq!(
        (counts.refunded, counts.stranded, counts.failed_refunds),
        (0, 7, 0),
        "{counts:?}"
    );
    assert_eq!(limiter.failures().total(), 0);
}

/// Redis is down when the process gives its lease back: the refund's failed call is a failure
/// like any other Redis call's. It counts in the limiter's failures (an operator reading them
/// sees the outage) and in the key's breaker, which a single failure opens here; a per-call
/// decision after it is short-circuited without a call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_release_counts_as_a_failure_and_opens_the_breaker() {
    let mut server = RedisServer::start();
    let (_, limiter, clock) = hourly(&server, TIMEOUT, "seen").await;
    let one = BreakerConfig::new(1, Duration::from_secs(60), Duration::from_secs(60)).unwrap();
    let limiter = Arc::new(limiter.with_breaker(Some(one)));
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);
    let breaker = limiter.breaker().unwrap().shared();
    assert_eq!(breaker.state(), BreakerState::Closed);

    server.kill();
    let started = Instant::now();
    let released = leased.release().await;
    assert!(started.elapsed() < 10 * TIMEOUT, "hung: {released:?}");
    assert!(
        matches!(released, Err(ReleaseError::Refund { permits: 7, .. })),
        "{released:?}"
    );
    let failures = limiter.failures();
    assert_eq!(failures.timeouts + failures.errors, 1, "{failures:?}");
    assert_eq!(breaker.state(), BreakerState::Open, "one failure opens it");
    let after = limiter.try_acquire_outcome("k", 1).await.unwrap();
    assert!(
        after.failure().is_some_and(|e| e.is_circuit_open()),
        "{after:?}"
    );
    assert_eq!(limiter.failures().short_circuited, 1);
    drop(clock);
}

/// The same when a refill gives the old lease back: its refund's failure is the refill's (the
/// request is decided by the policy with it, one failure counted, seen by the breaker), and no
/// lease request follows it into a server that just failed (one timeout, not two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refill_whose_refund_fails_is_decided_by_that_failure() {
    let mut server = RedisServer::start();
    let (_, limiter, clock) = hourly(&server, TIMEOUT, "refill").await;
    let one = BreakerConfig::new(1, Duration::from_secs(60), Duration::from_secs(60)).unwrap();
    let limiter = Arc::new(limiter.with_breaker(Some(one)));
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    clock.advance(leased.lifetime());
    server.kill();
    let outcome = leased.try_acquire_outcome(1).await.unwrap();
    let error = outcome.failure().expect("decided by the policy");
    assert!(error.to_string().contains(&server.url()), "{error}");
    assert!(!outcome.decision().is_allowed(), "fail closed: {outcome:?}");
    let counts = leased.counts();
    assert_eq!(
        (counts.stranded, counts.failed_refunds),
        (7, 1),
        "{counts:?}"
    );
    assert_eq!(limiter.failures().total(), 1);
    let breaker = limiter.breaker().unwrap().shared();
    assert_eq!(breaker.state(), BreakerState::Open);
}

/// Redis is frozen when a refill gives an expired lease's 7 unserved permits back: the refund
/// times out (the refill is decided by that failure), and is kept. Once Redis answers again
/// the next refill sends it again, under its name, before asking for a lease: the 7 come back
/// exactly once (Redis's own count says so: only the 2 permits served stay taken), though the
/// first call also reached the server (when it thawed, past its deadline: refused as late).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_that_timed_out_is_sent_again_and_lands_once() {
    let server = RedisServer::start();
    let (_, limiter, clock) = hourly(&server, SHORT, "again").await;
    let limiter = Arc::new(limiter);
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);
    clock.advance(leased.lifetime());

    server.freeze();
    let failed = leased.try_acquire_outcome(1).await.unwrap();
    server.thaw();
    assert!(
        failed.failure().is_some_and(|e| e.is_timeout()),
        "{failed:?}"
    );
    assert!(!failed.decision().is_allowed(), "fail closed: {failed:?}");
    let counts = leased.counts();
    assert_eq!(
        (counts.leases, counts.stranded, counts.failed_refunds),
        (1, 7, 1),
        "{counts:?}"
    );

    let next = leased.try_acquire_outcome(1).await.unwrap();
    assert!(
        next.failure().is_none() && next.decision().is_allowed(),
        "{next:?}"
    );
    let counts = leased.counts();
    assert_eq!(
        (
            counts.leases,
            counts.refunded,
            counts.stranded,
            counts.failed_refunds,
            counts.resent_refunds,
            counts.given_up_refunds
        ),
        (2, 7, 0, 1, 1, 0),
        "{counts:?}"
    );
    let held = counts.held;
    assert_eq!(leased.release().await.unwrap(), held, "the new lease's");
    assert_eq!(
        leased.release().await.unwrap(),
        0,
        "nothing more to give back"
    );
    assert_eq!(taken(&limiter).await, 2, "{:?}", leased.counts());
    assert_eq!(leased.counts().served(), 2);
}

/// A refund's reply is lost (the proxy closes the connection after the server ran it: it
/// landed) and meanwhile another process decides 7 on the key, which brings it back to the
/// lease's word. `release` reports the failure; the next `release` sends the refund again
/// under its name, which finds the first landing's mark: it reports the 7 given back and
/// changes nothing (a refund under a new name would land a second time, giving 7 permits
/// nobody returned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_sent_again_after_a_lost_reply_lands_once() {
    let server = RedisServer::start();
    let proxy = LossyProxy::forward(LossyProxy::listener(), server.port);
    let proxied = proxy.url();
    let (_, limiter, _clock) = hourly_at(&proxied, "lost").await;
    let limiter = Arc::new(limiter);
    // Every script loaded now, on another key: the lost reply below is the refund's own.
    let warm = LeasedKey::new(Arc::clone(&limiter), "warm");
    assert!(warm.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(warm.release().await.unwrap(), 7);

    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    let key = limiter.redis_keys("k")[0].clone();
    let word = server.cli(&["GET", &key]);
    // A backend that blocks (for the proxy's thread), made off the runtime.
    let url = server.url();
    let other =
        std::thread::spawn(move || RedisBackend::blocking_connect(RedisConfig::single(url)))
            .join()
            .unwrap()
            .unwrap();
    let other =
        RedisLimiter::new(&other, "lost", hourly_gcra(), FailurePolicy::FailClosed).unwrap();
    let decided = Arc::new(std::sync::Mutex::new(None));
    let hook_decided = Arc::clone(&decided);
    proxy.lose_next_reply(move || {
        let decision = other.blocking_try_acquire("k", 7).map(|d| d.is_allowed());
        *hook_decided.lock().unwrap() = Some(decision);
    });
    let lost = leased.release().await;
    assert!(proxy.lost(), "the refund's reply was lost");
    assert!(
        matches!(lost, Err(ReleaseError::Refund { permits: 7, .. })),
        "{lost:?}"
    );
    let decided = decided.lock().unwrap().take();
    assert!(matches!(decided, Some(Ok(true))), "{decided:?}");
    assert_eq!(server.cli(&["GET", &key]), word, "back at the lease's word");

    assert_eq!(leased.release().await.unwrap(), 7, "the mark: it landed");
    assert_eq!(server.cli(&["GET", &key]), word, "and landed once");
    let counts = leased.counts();
    assert_eq!(
        (
            counts.refunded,
            counts.stranded,
            counts.failed_refunds,
            counts.resent_refunds
        ),
        (7, 0, 1, 1),
        "{counts:?}"
    );
}

/// A refund that failed is given up, unsent, once its lease's bucket time has passed on the
/// key's clock (8 permits of 1 an hour: 8 hours): a refund then could give back permits the
/// bucket has already made up. Counted; the 7 stay stranded, and Redis still holds them (the
/// first call reached the server when it thawed, past its deadline: refused as late).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_past_its_lease_s_time_is_given_up() {
    let server = RedisServer::start();
    let (_, limiter, clock) = hourly(&server, SHORT, "late").await;
    let limiter = Arc::new(limiter);
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    server.freeze();
    let released = leased.release().await;
    server.thaw();
    assert!(
        matches!(&released, Err(ReleaseError::Refund { permits: 7, error }) if error.is_timeout()),
        "{released:?}"
    );
    clock.advance(Duration::from_secs(8 * 3_600));
    assert_eq!(leased.release().await.unwrap(), 0);
    let counts = leased.counts();
    assert_eq!(
        (
            counts.refunded,
            counts.stranded,
            counts.failed_refunds,
            counts.resent_refunds,
            counts.given_up_refunds
        ),
        (0, 7, 1, 0, 1),
        "{counts:?}"
    );
    assert_eq!(taken(&limiter).await, 8, "nothing given back");
}

/// The refund's reply is rewritten to one the refund script never sends (first field 7): the
/// refund's failure is a protocol failure naming the server and the unexpected reply, counted
/// in the limiter's errors. The refund had landed (the server replied 1): sent again under its
/// name, it finds its mark and reports the 7 given back, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unexpected_refund_reply_is_a_protocol_failure() {
    let server = RedisServer::start();
    let proxy = LossyProxy::forward(LossyProxy::listener(), server.port);
    let proxied = proxy.url();
    let (_, limiter, _clock) = hourly_at(&proxied, "protocol").await;
    let limiter = Arc::new(limiter);
    let warm = LeasedKey::new(Arc::clone(&limiter), "warm");
    assert!(warm.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(warm.release().await.unwrap(), 7);
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());

    let original = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&original);
    proxy.rewrite_next_reply(move |reply| {
        *seen.lock().unwrap() = reply.to_vec();
        // `*6\r\n:1\r\n…`: the first field, 1 (landed), becomes 7.
        let mut changed = reply.to_vec();
        changed[5] = b'7';
        changed
    });
    let released = leased.release().await;
    assert!(proxy.rewritten());
    assert!(
        original.lock().unwrap().starts_with(b"*6\r\n:1\r\n"),
        "{:?}",
        String::from_utf8_lossy(&original.lock().unwrap())
    );
    let error = match released {
        Err(ReleaseError::Refund { permits: 7, error }) => error,
        other => panic!("not the refund's protocol failure: {other:?}"),
    };
    assert_eq!(error.kind(), FailureKind::Protocol, "{error}");
    let text = error.to_string();
    assert!(
        text.contains("unexpected reply from floodgate's refund script") && text.contains("[7, 0"),
        "{text}"
    );
    assert_eq!(error.server_address(), Some(proxied.as_str()), "{error}");
    assert_eq!(limiter.failures().errors, 1);
    assert_eq!(leased.counts().failed_refunds, 1);

    assert_eq!(leased.release().await.unwrap(), 7, "its mark: it landed");
    assert_eq!(taken(&limiter).await, 1, "the one served");
}

/// `release` outside a tokio runtime sends nothing and keeps the lease: `ReleaseError::Runtime`,
/// at the first poll (no runtime to wait on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_outside_a_runtime_keeps_the_lease() {
    let server = RedisServer::start();
    let (_, limiter, _clock) = hourly(&server, TIMEOUT, "runtime").await;
    let limiter = Arc::new(limiter);
    let leased = Arc::new(LeasedKey::new(Arc::clone(&limiter), "k"));
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    let outside = Arc::clone(&leased);
    let polled = std::thread::spawn(move || {
        let mut release = std::pin::pin!(outside.release());
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match release.as_mut().poll(&mut context) {
            std::task::Poll::Ready(result) => Some(result),
            std::task::Poll::Pending => None,
        }
    })
    .join()
    .unwrap();
    match polled {
        Some(Err(ReleaseError::Runtime(why))) => assert!(why.contains("tokio runtime"), "{why}"),
        other => panic!("not the runtime error: {other:?}"),
    }
    assert_eq!(leased.counts().held, 7, "the lease is kept");
    assert_eq!(leased.release().await.unwrap(), 7);
    assert_eq!(taken(&limiter).await, 1);
}

/// Near the limit a call is the exact per-call decision, straight to Redis, not through the
/// lease's owner; but while a refund is kept after a failed call, such a call goes through the
/// owner, which sends the refund first (the decision would move the key past the refund's
/// word, and it could no longer land). A bucket of 12: a lease of 3 (a quarter of 12), one
/// served, then Redis frozen while a refill gives the 2 back (kept); after the thaw a request
/// of 2 finds a quarter of the 9 left at most 2: the exact decision, after the refund.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_refund_goes_before_a_call_near_the_limit() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(SHORT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let clock = ManualClock::new();
    let gcra = Gcra::new(Rate::per_hour(1), 12).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, "near", gcra, policy, clock.clone());
    let limiter = Arc::new(limiter.unwrap());
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 2, "{:?}", leased.counts());
    clock.advance(leased.lifetime());
    server.freeze();
    let failed = leased.try_acquire_outcome(1).await.unwrap();
    server.thaw();
    assert!(
        failed.failure().is_some_and(|e| e.is_timeout()),
        "{failed:?}"
    );

    let near = leased.try_acquire_outcome(2).await.unwrap();
    assert!(
        near.failure().is_none() && near.decision().is_allowed(),
        "{near:?}"
    );
    let counts = leased.counts();
    assert_eq!(
        (
            counts.leases,
            counts.exact,
            counts.refunded,
            counts.stranded,
            counts.resent_refunds
        ),
        (1, 1, 2, 0, 1),
        "{counts:?}"
    );
    let probe = limiter.try_acquire_outcome("k", 12).await.unwrap();
    assert!(!probe.decision().is_allowed(), "{probe:?}");
    assert_eq!(12 - probe.decision().remaining(), 3, "1 served, then 2");
}

/// `release` must return within the backend's timeout from its start ("Within one timeout"),
/// whatever another caller of the key does: here a refill whose refund is out on a frozen
/// server, and whose future its caller stops polling. Before issue 18's fix that caller held
/// the key's lease for as long as it kept its future, and `release` gave up at its deadline
/// having sent nothing ([`ReleaseError::Busy`]). Now the refill's calls are the key's, not
/// their caller's alone: `release` polls them until they end (the refund times out at its
/// deadline, half of the refill's timeout, and decides the refill), then sends the kept refund
/// again in what is left of its own timeout; the server still frozen, that times out too: a
/// refund error naming the server, the 7 permits kept to send again. The 10-timeout guard
/// fails on a hang only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_behind_a_stalled_refill_polls_its_calls_and_returns_within_the_timeout() {
    let server = RedisServer::start();
    let (_, limiter, clock) = hourly(&server, SHORT, "busy").await;
    let limiter = Arc::new(limiter);
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);
    clock.advance(leased.lifetime());

    server.freeze();
    // One poll: the expired lease is retired and its refund sent to the frozen server.
    let mut refill = std::pin::pin!(leased.try_acquire_outcome(1));
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(refill.as_mut().poll(&mut context).is_pending());

    let guard = tokio::time::timeout(10 * SHORT, leased.release()).await;
    let released = guard.expect("release waited past its deadline (hung)");
    let (permits, error) = match released {
        Err(ReleaseError::Refund { permits, error }) => (permits, error),
        other => panic!("not the resent refund's timeout: {other:?}"),
    };
    assert_eq!(permits, 7);
    assert!(error.is_timeout(), "{error}");
    assert_eq!(
        error.server_address(),
        Some(server.url().as_str()),
        "{error}"
    );
    let counts = leased.counts();
    assert_eq!(
        (
            counts.refunded,
            counts.failed_refunds,
            counts.resent_refunds,
            counts.busy_releases
        ),
        (0, 2, 1, 0),
        "the refill's refund and release's retry both timed out: {counts:?}"
    );
    assert_eq!(limiter.failures().total(), 2, "one for each");

    // The refill, polled again after the thaw, has its outcome: decided by its refund's
    // timeout. The next `release` sends the refund again and the 7 come back.
    server.thaw();
    let refilled = refill.await.unwrap();
    assert!(
        refilled.failure().is_some_and(|e| e.is_timeout()),
        "{refilled:?}"
    );
    assert_eq!(leased.release().await.unwrap(), 7);
    assert_eq!(taken(&limiter).await, 1, "the one served");
}

/// While the key's breaker is half-open its probe may be a refill holding the lease, out for
/// the whole timeout on a frozen server: `release` must not wait behind it ("calls during an
/// outage return within 1 ms"; a refill's caller does not either). It returns at once, nothing
/// sent, the lease kept, with the breaker's error. The probe cannot end before `TIMEOUT` (30 s:
/// timers never fire early), so `release` returning while it is still out is no race; a
/// `release` that waits for the probe returns only after it (or at its own deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_behind_a_half_open_probe_returns_at_once() {
    const TIMEOUT: Duration = Duration::from_secs(30);
    let server = RedisServer::start();
    let (_, limiter, clock) = hourly(&server, TIMEOUT, "probe-release").await;
    let limiter = Arc::new(limiter);
    let leased = Arc::new(LeasedKey::new(Arc::clone(&limiter), "k"));
    let breaker = limiter.breaker().unwrap().shared();
    while breaker.state() == BreakerState::Closed {
        breaker.admit().expect("closed").failed();
    }
    clock.advance(breaker.retry_in());

    server.freeze();
    let probe = {
        let leased = Arc::clone(&leased);
        tokio::spawn(async move { leased.try_acquire_outcome(1).await.unwrap() })
    };
    // The refill holds the owner and has become the probe (a hang guard, not a timing).
    let guard = Instant::now() + Duration::from_secs(60);
    while breaker.state() != BreakerState::HalfOpen {
        assert!(Instant::now() < guard, "the refill never became the probe");
        tokio::task::yield_now().await;
    }
    let released = leased.release().await;
    let probe_still_out = !probe.is_finished();
    server.thaw();
    let probed = probe.await.unwrap();
    match &released {
        Err(ReleaseError::Busy { error }) if error.is_circuit_open() && probe_still_out => {}
        other => panic!("release waited for the probe (still out: {probe_still_out}): {other:?}"),
    }
    assert_eq!(limiter.failures().total(), 0, "release sent nothing");
    assert_eq!(leased.counts().busy_releases, 1, "{:?}", leased.counts());
    assert!(
        probed.failure().is_none() && probed.decision().is_allowed(),
        "{probed:?}"
    );
    // The probe's lease (8, one served) is there for the next release to give back.
    assert_eq!(leased.release().await.unwrap(), 7);
}
