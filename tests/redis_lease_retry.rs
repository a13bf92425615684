//! Review of the lease refund retries (issue 18): `LeasedKey` keeps a refund whose call failed
//! and sends it again, under its name, before the key's next refill or `release`, giving it up
//! past its lease's time. Each test starts its own `redis-server`; clocks are manual or gated
//! (real time only bounds a hang).
#![cfg(feature = "redis")]

#[allow(dead_code)] // its one-shot leap only, not its gate
#[path = "support/gated_clock.rs"]
mod gated_clock;
#[path = "redis/server.rs"]
mod server;
#[path = "redis/taken.rs"]
mod taken;

use std::backtrace::Backtrace;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate::backend::{BreakerConfig, BreakerState, FailurePolicy};
use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter, ReleaseError};
use floodgate::{Clock, Gcra, ManualClock, Rate};
use gated_clock::GatedClock;
use server::RedisServer;
use taken::taken;

/// The backend's timeout: both tests need a call to a frozen server to time out, and their
/// other calls answered by a live one. 2 s (as the Redis cluster tests'), not 1 s: a loaded
/// machine can delay a live server's answer past a second.
const TIMEOUT: Duration = Duration::from_secs(2);
const HOUR_NANOS: u64 = 3_600 * 1_000_000_000;

/// GCRA of 1 permit an hour with a burst of 100: no permit comes back during a test.
fn hourly_gcra() -> Gcra {
    Gcra::new(Rate::per_hour(1), 100).unwrap()
}

/// A kept refund is given up once the key's clock reads past its lease's time (here 8 hours
/// on: 8 permits of 1 an hour). One clock read that leaps 9 hours ahead (a one-shot leaping
/// read, as the serving reads' `min` of two reads guards against elsewhere) must not give up a
/// refund whose lease is still minutes old: the refund would land, and giving it up strands
/// its 7 permits (under-admission) on the strength of one bad read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaping_clock_read_does_not_give_up_a_kept_refund() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let clock = GatedClock::starting_at(HOUR_NANOS);
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, "leap", hourly_gcra(), policy, clock.clone());
    let limiter = Arc::new(limiter.unwrap());
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);

    // The refund's call times out (the server frozen past its deadline: when it thaws the
    // call is refused as late, changing nothing): kept.
    server.freeze();
    let released = leased.release().await;
    server.thaw();
    assert!(
        matches!(&released, Err(ReleaseError::Refund { permits: 7, error }) if error.is_timeout()),
        "{released:?}"
    );

    clock.leap_next_read(9 * HOUR_NANOS);
    let again = leased.release().await;
    let counts = leased.counts();
    assert_eq!(
        (
            again.ok(),
            counts.refunded,
            counts.stranded,
            counts.resent_refunds,
            counts.given_up_refunds
        ),
        (Some(7), 7, 0, 1, 0),
        "{counts:?}"
    );
    assert_eq!(taken(&limiter).await, 1, "the one served");
}

/// A refund the breaker does not let out (open) is kept, and sent once the breaker lets it out:
/// a kept refund sent again, which `LeaseCounts::resent_refunds` counts by its doc ("Refunds
/// sent again after their call failed (or was not sent: the breaker open)"). Counted nowhere,
/// such a refund is in none of `failed_refunds` (no call failed), `resent_refunds` and
/// `given_up_refunds`: its 7 permits move from `stranded` to `refunded` with no count saying
/// a kept refund went out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_the_breaker_held_is_counted_resent_when_it_goes_out() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let clock = ManualClock::new();
    let policy = FailurePolicy::FailClosed;
    let one = BreakerConfig::new(1, Duration::from_secs(60), Duration::from_secs(60)).unwrap();
    let limiter = RedisLimiter::with_clock(&backend, "held", hourly_gcra(), policy, clock.clone());
    let limiter = Arc::new(limiter.unwrap().with_breaker(Some(one)));
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);

    // A per-call decision on another key times out (the server frozen): the breaker opens.
    server.freeze();
    let failed = limiter.try_acquire_outcome("other", 1).await.unwrap();
    server.thaw();
    assert!(
        failed.failure().is_some_and(|e| e.is_timeout()),
        "{failed:?}"
    );
    let breaker = limiter.breaker().unwrap().shared();
    assert_eq!(breaker.state(), BreakerState::Open);
    let held = leased.release().await;
    assert!(
        matches!(&held, Err(ReleaseError::Refund { permits: 7, error }) if error.is_circuit_open()),
        "{held:?}"
    );

    clock.advance(Duration::from_secs(61));
    assert_eq!(leased.release().await.unwrap(), 7, "sent as the probe");
    assert_eq!(breaker.state(), BreakerState::Closed);
    let counts = leased.counts();
    assert_eq!(
        (
            counts.refunded,
            counts.stranded,
            counts.failed_refunds,
            counts.resent_refunds,
            counts.given_up_refunds
        ),
        (7, 0, 0, 1, 0),
        "{counts:?}"
    );
    assert_eq!(taken(&limiter).await, 1, "the one served");
}

/// A clock that moves on to `to` right after one read: the first read made inside the
/// breaker's admission of a refund (`FailureHandler::run_aside`, found in the reading thread's
/// backtrace) while armed. Exactly "the breaker's probe falls due between the refund's
/// admission and the next call's", on demand and without sleeps.
#[derive(Clone, Default)]
struct AfterTheRefundsAdmission {
    now: Arc<AtomicU64>,
    /// 0: not armed.
    to: Arc<AtomicU64>,
}

impl Clock for AfterTheRefundsAdmission {
    fn now_nanos(&self) -> u64 {
        let now = self.now.load(Ordering::SeqCst);
        let to = self.to.load(Ordering::SeqCst);
        if to != 0 && Backtrace::force_capture().to_string().contains("run_aside") {
            self.to.store(0, Ordering::SeqCst);
            self.now.store(to, Ordering::SeqCst);
        }
        now
    }

    fn sleep(&self, duration: Duration) {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        self.now.fetch_add(nanos, Ordering::SeqCst);
    }
}

/// A refund the breaker held (open) is kept, to be sent before the key's next request. The
/// next refill sends it first through the breaker, then its request for a lease: when the
/// breaker's probe falls due between the two (or another call's probe closes it), the refund
/// is short-circuited and kept, while the request for a lease is the probe and reaches Redis.
/// The lease it is granted moves the key past the refund's word, so the refund can no longer
/// land: given up, its 7 permits stranded for good, though Redis answered. The request must
/// not overtake the kept refund: it is decided by the refund's short circuit, and the next
/// call sends the refund first (as the probe), which lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_due_right_after_a_held_refund_does_not_overtake_it() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let clock = AfterTheRefundsAdmission::default();
    clock.now.store(HOUR_NANOS, Ordering::SeqCst);
    let policy = FailurePolicy::FailClosed;
    let open_for = Duration::from_secs(60);
    let one = BreakerConfig::new(1, open_for, open_for).unwrap();
    let limiter = RedisLimiter::with_clock(&backend, "probe", hourly_gcra(), policy, clock.clone());
    let limiter = Arc::new(limiter.unwrap().with_breaker(Some(one)));
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);

    // A per-call decision on another key times out (the server frozen): the breaker opens,
    // its probe due a minute on; the refund is held by it, kept.
    server.freeze();
    let failed = limiter.try_acquire_outcome("other", 1).await.unwrap();
    server.thaw();
    assert!(
        failed.failure().is_some_and(|e| e.is_timeout()),
        "{failed:?}"
    );
    let breaker = limiter.breaker().unwrap().shared();
    assert_eq!(breaker.state(), BreakerState::Open);
    let held = leased.release().await;
    assert!(
        matches!(&held, Err(ReleaseError::Refund { permits: 7, error }) if error.is_circuit_open()),
        "{held:?}"
    );

    // A millisecond before the probe is due, the refund is admitted (held again); the clock
    // then reads the probe due for the request that follows it in the same refill.
    let due = HOUR_NANOS + 60 * 1_000_000_000;
    clock.now.store(due - 1_000_000, Ordering::SeqCst);
    clock.to.store(due + 1_000_000, Ordering::SeqCst);
    let first = leased.try_acquire_outcome(1).await.unwrap();
    assert_eq!(
        clock.to.load(Ordering::SeqCst),
        0,
        "the refund was admitted"
    );
    let counts = leased.counts();
    assert_eq!(
        (counts.given_up_refunds, counts.stranded),
        (0, 7),
        "the kept refund was given up: {first:?}, {counts:?}"
    );
    assert!(
        first.failure().is_some_and(|e| e.is_circuit_open()) && !first.decision().is_allowed(),
        "decided by the refund's short circuit (fail closed): {first:?}"
    );

    // The next call sends the refund first, as the probe: it lands, then the lease is taken.
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(breaker.state(), BreakerState::Closed);
    let counts = leased.counts();
    assert_eq!(
        (
            counts.refunded,
            counts.stranded,
            counts.resent_refunds,
            counts.given_up_refunds
        ),
        (7, 0, 1, 0),
        "{counts:?}"
    );
    let served_or_held = counts.served() + counts.held;
    assert_eq!(taken(&limiter).await, served_or_held, "{counts:?}");
    assert_eq!(counts.served(), 2, "{counts:?}");
}

/// A request decided by a refund the breaker held (above) is answered as the breaker's short
/// circuit of its own call would be: the deny cache first. Here, near the limit (the request
/// is the exact per-call decision after the refund), a request Redis just denied is denied
/// again from the cache, not admitted by fail-open as a short circuit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_behind_a_held_refund_is_denied_by_the_deny_cache_first() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let clock = ManualClock::new();
    let policy = FailurePolicy::FailOpen;
    let one = BreakerConfig::new(1, Duration::from_secs(60), Duration::from_secs(60)).unwrap();
    let limiter =
        RedisLimiter::with_clock(&backend, "cached", hourly_gcra(), policy, clock.clone());
    let limiter = Arc::new(limiter.unwrap().with_breaker(Some(one)));
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);
    // 92 left: Redis denies 93, and the deny cache keeps the denial.
    let denied = limiter.try_acquire_outcome("k", 93).await.unwrap();
    assert!(denied.failure().is_none() && !denied.decision().is_allowed());

    server.freeze();
    let failed = limiter.try_acquire_outcome("other", 1).await.unwrap();
    server.thaw();
    assert!(
        failed.failure().is_some_and(|e| e.is_timeout()),
        "{failed:?}"
    );
    let held = leased.release().await;
    assert!(
        matches!(&held, Err(ReleaseError::Refund { permits: 7, error }) if error.is_circuit_open()),
        "{held:?}"
    );

    let near = leased.try_acquire_outcome(93).await.unwrap();
    assert!(
        near.failure().is_none() && !near.decision().is_allowed(),
        "the deny cache's denial: {near:?}"
    );

    clock.advance(Duration::from_secs(61));
    assert_eq!(leased.release().await.unwrap(), 7, "sent as the probe");
    let counts = leased.counts();
    assert_eq!(
        (counts.refunded, counts.stranded, counts.given_up_refunds),
        (7, 0, 0),
        "{counts:?}"
    );
}
