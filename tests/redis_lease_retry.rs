//! Review of the lease refund retries (issue 18): `LeasedKey` keeps a refund whose call failed
//! and sends it again, under its name, before the key's next refill or `release`, giving it up
//! past its lease's time. Each test starts its own `redis-server`; clocks are manual or gated
//! (real time only bounds a hang).
#![cfg(feature = "redis")]

#[allow(dead_code)] // its one-shot leap only, not its gate
#[path = "support/gated_clock.rs"]
mod gated_clock;
#[path = "support/poll_once.rs"]
mod poll_once;
#[path = "redis/server.rs"]
mod server;
#[path = "redis/taken.rs"]
mod taken;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use floodgate::backend::{BreakerConfig, BreakerState, FailurePolicy};
use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter, ReleaseError};
use floodgate::{Clock, Gcra, ManualClock, Rate};
use gated_clock::GatedClock;
use poll_once::poll_once;
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

/// Opens `limiter`'s breaker (one failure opens it: a per-call decision on another key times
/// out, the server frozen), then releases `leased`'s 7 held permits: the open breaker holds
/// their refund, kept to be sent before the key's next request.
async fn hold_the_refund<C: Clock + Clone + Send + Sync + 'static>(
    server: &RedisServer,
    limiter: &RedisLimiter<Gcra, C>,
    leased: &LeasedKey<Gcra, C>,
) {
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
    hold_the_refund(&server, &limiter, &leased).await;
    let breaker = limiter.breaker().unwrap().shared();

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

/// A clock that moves on to `to` once the breaker short-circuited a call since it was armed:
/// the reads that follow the breaker's refusal to let a refund out (the first: its own
/// `retry_in`) read the probe due. Exactly "the breaker's probe falls due between the
/// refund's admission and the next call's", on demand, without sleeps, and found by what the
/// breaker did, not by where the read is made (the backtrace it once searched for
/// `run_aside` has no such frame in a binary without symbols, or where it is inlined).
#[derive(Clone, Default)]
struct AfterTheRefundsAdmission {
    now: Arc<AtomicU64>,
    /// 0: not armed.
    to: Arc<AtomicU64>,
    /// The breaker's short circuits when armed.
    armed_at: Arc<AtomicU64>,
    /// The breaker's short circuits so far (set once the limiter is built: it holds the clock).
    short_circuits: Arc<OnceLock<Box<dyn Fn() -> u64 + Send + Sync>>>,
}

impl AfterTheRefundsAdmission {
    fn arm(&self, to: u64) {
        let so_far = self.short_circuits.get().expect("set")();
        self.armed_at.store(so_far, Ordering::SeqCst);
        self.to.store(to, Ordering::SeqCst);
    }
}

impl Clock for AfterTheRefundsAdmission {
    fn now_nanos(&self) -> u64 {
        let to = self.to.load(Ordering::SeqCst);
        let refused = || {
            let so_far = self.short_circuits.get().map_or(0, |count| count());
            so_far > self.armed_at.load(Ordering::SeqCst)
        };
        if to != 0 && refused() {
            self.to.store(0, Ordering::SeqCst);
            self.now.store(to, Ordering::SeqCst);
        }
        self.now.load(Ordering::SeqCst)
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
    let weak = Arc::downgrade(&limiter);
    let count = move || {
        weak.upgrade().map_or(0, |limiter| {
            limiter.breaker().unwrap().shared().short_circuited()
        })
    };
    assert!(clock.short_circuits.set(Box::new(count)).is_ok());
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);

    // A per-call decision on another key times out (the server frozen): the breaker opens,
    // its probe due a minute on; the refund is held by it, kept.
    hold_the_refund(&server, &limiter, &leased).await;
    let breaker = limiter.breaker().unwrap().shared();

    // A millisecond before the probe is due, the refund is admitted (held again); the clock
    // then reads the probe due for the request that follows it in the same refill.
    let due = HOUR_NANOS + 60 * 1_000_000_000;
    clock.now.store(due - 1_000_000, Ordering::SeqCst);
    clock.arm(due + 1_000_000);
    let first = leased.try_acquire_outcome(1).await.unwrap();
    assert_eq!(
        clock.to.load(Ordering::SeqCst),
        0,
        "the breaker refused the refund (the clock moved on)"
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

    hold_the_refund(&server, &limiter, &leased).await;

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

/// A clock that holds one read: once armed, the `at`-th read made on the thread named `thread`
/// takes its value and blocks until [`release`](Self::release) (a deterministic "that thread
/// is preempted right there"; reads on other threads go through).
#[derive(Clone, Default)]
struct HeldOnThread {
    now: Arc<AtomicU64>,
    gate: Arc<(Mutex<Hold>, Condvar)>,
}

#[derive(Default)]
struct Hold {
    thread: &'static str,
    /// Reads on `thread` still to go before the held one (0: not armed).
    left: u32,
    held: bool,
}

/// How long a test waits for a held thread before it calls the run a hang.
const HANG: Duration = Duration::from_secs(60);

impl HeldOnThread {
    fn hold(&self, thread: &'static str, at: u32) {
        let mut hold = self.gate.0.lock().unwrap();
        (hold.thread, hold.left) = (thread, at);
    }

    fn wait_until_held(&self) {
        let hold = self.gate.0.lock().unwrap();
        let (hold, timeout) = self
            .gate
            .1
            .wait_timeout_while(hold, HANG, |h| !h.held)
            .unwrap();
        assert!(!timeout.timed_out() && hold.held, "the read was never held");
    }

    fn release(&self) {
        self.gate.0.lock().unwrap().held = false;
        self.gate.1.notify_all();
    }
}

impl Clock for HeldOnThread {
    fn now_nanos(&self) -> u64 {
        let now = self.now.load(Ordering::SeqCst);
        let mut hold = self.gate.0.lock().unwrap_or_else(|p| p.into_inner());
        if hold.left > 0 && std::thread::current().name() == Some(hold.thread) {
            hold.left -= 1;
            if hold.left == 0 {
                hold.held = true;
                self.gate.1.notify_all();
                let (hold, timeout) = self
                    .gate
                    .1
                    .wait_timeout_while(hold, HANG, |h| h.held)
                    .unwrap();
                assert!(!timeout.timed_out() && !hold.held, "never released");
            }
        }
        now
    }

    fn sleep(&self, duration: Duration) {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        self.now.fetch_add(nanos, Ordering::SeqCst);
    }
}

/// A refill's calls carry the kept refund first. While they are out and the breaker is not
/// closed, another caller of the key does not wait for them (they may be the breaker's
/// probe): it used to take the limiter's per-call decision at once. With the probe due and
/// the refund not yet let out (its refill's caller preempted between making the calls and the
/// breaker's admission of the refund), that per-call decision was the probe: it reached Redis
/// first and moved the key past the refund's word, so the refund, let out next, was refused:
/// its 7 permits stranded though Redis answered. The caller behind a kept refund is now
/// decided as a short circuit (the refund goes first, as the probe), and the refund lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_behind_calls_out_does_not_overtake_their_kept_refund() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let clock = HeldOnThread::default();
    clock.now.store(HOUR_NANOS, Ordering::SeqCst);
    let policy = FailurePolicy::FailClosed;
    let one = BreakerConfig::new(1, Duration::from_secs(60), Duration::from_secs(60)).unwrap();
    let limiter =
        RedisLimiter::with_clock(&backend, "behind", hourly_gcra(), policy, clock.clone());
    let limiter = Arc::new(limiter.unwrap().with_breaker(Some(one)));
    let leased = Arc::new(LeasedKey::new(Arc::clone(&limiter), "k"));
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);

    // The breaker opens (a per-call decision on another key times out); the refund is held
    // by it, kept.
    hold_the_refund(&server, &limiter, &leased).await;
    let breaker = limiter.breaker().unwrap().shared();

    // The probe is due. Caller A's refill makes its calls (the kept refund, then the request
    // for a lease) and is held at its 5th clock read: the breaker's admission of the refund
    // (the 4 before it, under the owner's lock: the new lease's start and the refund's time,
    // two reads each). A hold anywhere under the lock would block B below: a hang, not a pass.
    clock.now.fetch_add(61 * 1_000_000_000, Ordering::SeqCst);
    clock.hold("caller A", 5);
    let a = std::thread::Builder::new()
        .name("caller A".to_owned())
        .spawn({
            let leased = Arc::clone(&leased);
            move || leased.blocking_try_acquire(1)
        })
        .unwrap();
    clock.wait_until_held();
    // Held before the breaker let the refund out (a hold after it would test nothing).
    assert_eq!(breaker.state(), BreakerState::Open, "A held too late");

    // Caller B finds A's calls out and the breaker not closed.
    let b = leased.try_acquire_outcome(1).await.unwrap();
    clock.release();
    let a = a.join().unwrap().unwrap();

    let counts = leased.counts();
    assert_eq!(
        (
            counts.refunded,
            counts.stranded,
            counts.resent_refunds,
            counts.given_up_refunds
        ),
        (7, 0, 1, 0),
        "the kept refund was overtaken: A {a:?}, B {b:?}, {counts:?}"
    );
    assert!(
        b.failure().is_some_and(|e| e.is_circuit_open()) && !b.decision().is_allowed(),
        "B decided as a short circuit (fail closed): {b:?}"
    );
    assert!(
        a.is_allowed(),
        "A's refund was the probe, then its lease: {a:?}"
    );
    assert_eq!(breaker.state(), BreakerState::Closed);
    let served_or_held = counts.served() + counts.held;
    assert_eq!(taken(&limiter).await, served_or_held, "{counts:?}");
    assert_eq!(counts.served(), 2, "{counts:?}");
}

/// A kept refund sent as the breaker's probe by a caller that is then never polled again (its
/// future kept): the refund lands when Redis answers, and the key's next caller takes its
/// reply in, closing the breaker and serving from the lease the calls took. That caller does
/// not short-circuit for as long as the stalled calls stay out (their probe never reported,
/// the breaker half-open until its probe is presumed lost) nor send a per-call decision past
/// them: it polls them once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_refund_sent_by_a_stalled_caller_lands_for_the_next_caller() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let clock = ManualClock::new();
    let policy = FailurePolicy::FailClosed;
    let one = BreakerConfig::new(1, Duration::from_secs(60), Duration::from_secs(60)).unwrap();
    let limiter = RedisLimiter::with_clock(&backend, "stall", hourly_gcra(), policy, clock.clone());
    let limiter = Arc::new(limiter.unwrap().with_breaker(Some(one)));
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    // A refund lands first: the refund script is loaded (a stalled call's `NOSCRIPT` would
    // need another poll before its refund went out at all).
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.release().await.unwrap(), 7);
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);

    hold_the_refund(&server, &limiter, &leased).await;
    let breaker = limiter.breaker().unwrap().shared();

    // The probe is due: caller A's refill sends the kept refund as the probe, and A is never
    // polled again (its runtime left idle, its future kept).
    clock.advance(Duration::from_secs(61));
    let idle = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut a = Box::pin(leased.try_acquire_outcome(1));
    // Polled on a thread of its own (a runtime cannot be entered from this one's), Redis
    // frozen meanwhile, so that no reply can come back within that poll.
    server.freeze();
    let pending = std::thread::scope(|s| s.spawn(|| poll_once(&idle, &mut a)).join().unwrap());
    server.thaw();
    assert!(pending, "A's calls are out");
    assert_eq!(
        breaker.state(),
        BreakerState::HalfOpen,
        "the refund is the probe"
    );
    // A call on the same connection after the refund's: once it is answered, so is the refund.
    let flush = RedisLimiter::new(&backend, "flush", hourly_gcra(), policy).unwrap();
    let flush = flush.with_breaker(None);
    assert!(
        flush
            .try_acquire_outcome("x", 1)
            .await
            .unwrap()
            .failure()
            .is_none()
    );

    let b = leased.try_acquire_outcome(1).await.unwrap();
    assert!(
        b.failure().is_none() && b.decision().is_allowed(),
        "B served from the lease A's calls took: {b:?}"
    );
    assert_eq!(breaker.state(), BreakerState::Closed);
    let counts = leased.counts();
    assert_eq!(
        (counts.refunded, counts.stranded, counts.resent_refunds),
        (14, 0, 1),
        "{counts:?}"
    );
    drop(a);
    // A runtime cannot be dropped inside this one either.
    std::thread::spawn(move || drop(idle)).join().unwrap();
    let served_or_held = counts.served() + counts.held;
    assert_eq!(taken(&limiter).await, served_or_held, "{counts:?}");
}
