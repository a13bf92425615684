//! The circuit breaker and the deny cache in front of a real Redis: a frozen server (SIGSTOP)
//! opens the breaker after its failures and calls then return without Redis; a probe closes it
//! after SIGCONT. A denied key is denied locally, with no command reaching Redis (counted by
//! `INFO commandstats`), until its `retry_after` on the limiter's clock.

use std::time::{Duration, Instant};

use floodgate::backend::{BreakerConfig, BreakerState, FailureKind, FailurePolicy};
use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{FixedWindow, ManualClock};

use super::server::RedisServer;

/// The backend's timeout while the server is frozen: each call the breaker lets through waits
/// this long.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Wall-clock guard against a hang (never a speed check).
const HANG_BOUND: Duration = Duration::from_secs(60);
/// The breaker's back-off: on the limiter's ManualClock, so it passes only when the test says.
const OPEN_FOR: Duration = Duration::from_secs(5);
const FAILURES: u32 = 2;
const SHORT_CIRCUITED: u64 = 100;

/// Scripts the server has run (EVALSHA, or EVAL when it did not have the script yet).
fn scripts_run(server: &RedisServer) -> u64 {
    server.calls("evalsha") + server.calls("eval")
}

/// Async calls on a current-thread runtime of the test's own. A reconnect series of redis-rs's
/// connection manager is a task spawned on the runtime of the call that starts it, so the test
/// sees a series end (no task left alive on the runtime) rather than sleeping for it.
struct OwnRuntime(tokio::runtime::Runtime);

impl OwnRuntime {
    fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Self(runtime)
    }

    fn call(
        &self,
        limiter: &RedisLimiter<FixedWindow, ManualClock>,
    ) -> floodgate::backend::Outcome {
        self.0
            .block_on(limiter.try_acquire_outcome("k", 1))
            .unwrap()
    }

    /// Calls until `limiter`'s breaker opens, each call failing (the server is `down`: what the
    /// failure message names), then until the reconnect series the last call started has ended
    /// (its error kept for the next call: the one the probe must not be given).
    fn until_the_breaker_opens(
        &self,
        limiter: &RedisLimiter<FixedWindow, ManualClock>,
        down: &str,
    ) {
        let started = Instant::now();
        let breaker = limiter.breaker().unwrap();
        while breaker.state() != BreakerState::Open {
            assert!(self.call(limiter).failure().is_some(), "decided by {down}?");
            assert!(started.elapsed() < HANG_BOUND, "the breaker never opened");
        }
        self.until_no_task_alive("the reconnect series the last call started");
    }

    /// The breaker's probe: it must reach the server, be decided and close the breaker.
    fn probe_closes_the_breaker(&self, limiter: &RedisLimiter<FixedWindow, ManualClock>) {
        let probe = self.call(limiter);
        assert!(
            probe.failure().is_none(),
            "the probe: {:?}",
            probe.failure()
        );
        assert!(probe.decision().is_allowed());
        assert_eq!(limiter.breaker().unwrap().state(), BreakerState::Closed);
    }

    /// Runs the runtime's tasks until none is alive; `what` names them for the hang bound.
    fn until_no_task_alive(&self, what: &str) {
        let started = Instant::now();
        self.0.block_on(async {
            let metrics = tokio::runtime::Handle::current().metrics();
            while metrics.num_alive_tasks() > 0 {
                assert!(started.elapsed() < HANG_BOUND, "{what} never ended");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    }
}

#[test]
fn a_frozen_server_opens_the_breaker_and_a_probe_closes_it() {
    let server = RedisServer::start();
    let backend =
        RedisBackend::blocking_connect(RedisConfig::single(server.url()).timeout(TIMEOUT)).unwrap();
    let clock = ManualClock::new();
    let window = FixedWindow::new(1_000, Duration::from_secs(60)).unwrap();
    let breaker = BreakerConfig::new(FAILURES, OPEN_FOR, Duration::from_secs(60)).unwrap();
    let limiter = RedisLimiter::with_clock(
        &backend,
        "outage",
        window,
        FailurePolicy::FailClosed,
        clock.clone(),
    )
    .unwrap()
    .with_breaker(Some(breaker));
    assert!(limiter.blocking_try_acquire("k", 1).unwrap().is_allowed());

    server.freeze();
    for _ in 0..FAILURES {
        let outcome = limiter.blocking_try_acquire_outcome("k", 1).unwrap();
        assert!(!outcome.decision().is_allowed());
        assert_eq!(
            outcome.failure().map(|e| e.kind()),
            Some(FailureKind::Timeout)
        );
        assert_eq!(outcome.decision().retry_after(), TIMEOUT);
    }
    let breaker = limiter.breaker().unwrap();
    assert_eq!(breaker.state(), BreakerState::Open);
    assert_eq!(limiter.failures().timeouts, u64::from(FAILURES));

    // Open: the policy decides without Redis. The counters prove it (a call that reached the
    // frozen server would be one more timeout); the wall clock only guards against a hang.
    let started = Instant::now();
    for _ in 0..SHORT_CIRCUITED {
        let outcome = limiter.blocking_try_acquire_outcome("k", 1).unwrap();
        assert!(!outcome.decision().is_allowed());
        assert_eq!(
            outcome.failure().map(|e| e.kind()),
            Some(FailureKind::CircuitOpen)
        );
        // Fail-closed's retry is when the breaker's probe is due, not the backend's timeout.
        assert_eq!(outcome.decision().retry_after(), OPEN_FOR);
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < HANG_BOUND,
        "{SHORT_CIRCUITED} short-circuited calls took {elapsed:?}"
    );
    assert_eq!(limiter.failures().short_circuited, SHORT_CIRCUITED);
    assert_eq!(limiter.failures().timeouts, u64::from(FAILURES));
    assert_eq!(breaker.short_circuited(), SHORT_CIRCUITED);
    clock.advance(OPEN_FOR / 2);
    let halfway = limiter.blocking_try_acquire("k", 1).unwrap();
    assert_eq!(halfway.retry_after(), OPEN_FOR / 2);

    server.thaw();
    // Still open on the limiter's clock: the thawed server is not asked yet.
    let before = scripts_run(&server);
    assert_eq!(
        limiter
            .blocking_try_acquire_outcome("k", 1)
            .unwrap()
            .failure()
            .map(|e| e.kind()),
        Some(FailureKind::CircuitOpen)
    );
    assert_eq!(scripts_run(&server), before);
    // The probe is due: it reaches Redis, succeeds, and closes the breaker.
    clock.advance(OPEN_FOR / 2);
    let probe = limiter.blocking_try_acquire_outcome("k", 1).unwrap();
    assert!(probe.failure().is_none(), "{:?}", probe.failure());
    assert!(probe.decision().is_allowed());
    assert_eq!(breaker.state(), BreakerState::Closed);
    assert_eq!(scripts_run(&server), before + 1);
    assert!(limiter.blocking_try_acquire("k", 1).unwrap().is_allowed());
    assert_eq!(limiter.failures().short_circuited, SHORT_CIRCUITED + 2);
}

#[test]
fn a_denied_key_is_denied_locally_until_its_retry_after() {
    let server = RedisServer::start();
    let backend = RedisBackend::blocking_connect(
        RedisConfig::single(server.url()).timeout(Duration::from_secs(30)),
    )
    .unwrap();
    let clock = ManualClock::new();
    let window = FixedWindow::new(2, Duration::from_secs(60)).unwrap();
    let limiter = RedisLimiter::with_clock(
        &backend,
        "deny",
        window,
        FailurePolicy::FailClosed,
        clock.clone(),
    )
    .unwrap();
    let cache = limiter.deny_cache().expect("on by default for Redis");
    assert!(
        limiter
            .blocking_try_acquire("alice", 2)
            .unwrap()
            .is_allowed()
    );
    let denied = limiter.blocking_try_acquire("alice", 1).unwrap();
    assert!(!denied.is_allowed());
    let retry_after = denied.retry_after();
    assert!(retry_after > Duration::from_secs(1) && retry_after <= Duration::from_secs(60));
    assert_eq!(cache.denied_locally(), 0);

    // Denied locally: no script reaches Redis, on the blocking path and the async one.
    let ran = scripts_run(&server);
    for _ in 0..10 {
        let local = limiter.blocking_try_acquire_outcome("alice", 1).unwrap();
        assert!(!local.decision().is_allowed() && local.failure().is_none());
        assert_eq!(local.decision().retry_after(), retry_after);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for _ in 0..10 {
            assert!(!limiter.try_acquire("alice", 2).await.unwrap().is_allowed());
        }
    });
    assert_eq!(cache.denied_locally(), 20);
    assert_eq!(scripts_run(&server), ran);
    // Another key still goes to Redis.
    assert!(limiter.blocking_try_acquire("bob", 1).unwrap().is_allowed());
    assert_eq!(scripts_run(&server), ran + 1);

    // Just before retry_after on the limiter's clock: still local, with what is left of it.
    clock.advance(retry_after - Duration::from_millis(1));
    let local = limiter.blocking_try_acquire("alice", 1).unwrap();
    assert!(!local.is_allowed());
    assert!(local.retry_after() <= Duration::from_millis(1), "{local:?}");
    assert_eq!(cache.denied_locally(), 21);
    assert_eq!(scripts_run(&server), ran + 1);
    // At retry_after the cache stops answering: the call goes to Redis (whose own window, on
    // the server's clock, has not moved: it denies again, and the cache holds that denial).
    clock.advance(Duration::from_millis(1));
    let asked = limiter.blocking_try_acquire("alice", 1).unwrap();
    assert!(!asked.is_allowed());
    assert_eq!(scripts_run(&server), ran + 2);
    assert_eq!(cache.denied_locally(), 21);

    // With the cache off every call asks Redis.
    let limiter = limiter.with_deny_cache(None).unwrap();
    for _ in 0..5 {
        assert!(
            !limiter
                .blocking_try_acquire("alice", 1)
                .unwrap()
                .is_allowed()
        );
    }
    assert_eq!(scripts_run(&server), ran + 7);
}

#[test]
fn a_try_cut_short_by_the_callers_own_deadline_is_not_held_against_redis() {
    let server = RedisServer::start();
    // Longer than `TIMEOUT`: the cut try below is the caller's matter only while Redis has
    // replied within the backend's timeout (issue 18, refined), which no stall of a loaded
    // machine between the warm-up's reply and the cut should outlast.
    const TIMEOUT: Duration = Duration::from_secs(10);
    let backend =
        RedisBackend::blocking_connect(RedisConfig::single(server.url()).timeout(TIMEOUT)).unwrap();
    let breaker = BreakerConfig::new(1, OPEN_FOR, Duration::from_secs(60)).unwrap();
    let window = FixedWindow::new(10, Duration::from_secs(60)).unwrap();
    let limiter = RedisLimiter::with_clock(
        &backend,
        "cut",
        window,
        FailurePolicy::FailClosed,
        ManualClock::new(),
    )
    .unwrap()
    .with_breaker(Some(breaker));
    assert!(limiter.blocking_try_acquire("k", 1).unwrap().is_allowed());
    server.freeze();
    // The caller's 20 ms run out long before the backend's timeout: the try says nothing
    // about Redis (issue 18): denied, retry after the backend's timeout, counted nowhere, and
    // the breaker (opening at one failure) stays closed.
    let d = limiter
        .blocking_try_acquire_for("k", 1, Duration::from_millis(20))
        .unwrap();
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), TIMEOUT);
    assert_eq!(limiter.failures().total(), 0);
    let breaker = limiter.breaker().unwrap();
    assert_eq!(breaker.state(), BreakerState::Closed);
    // A call that waits out the backend's own timeout does count: the breaker opens.
    let outcome = limiter.blocking_try_acquire_outcome("k", 1).unwrap();
    assert_eq!(
        outcome.failure().map(|e| e.kind()),
        Some(FailureKind::Timeout)
    );
    assert_eq!(breaker.state(), BreakerState::Open);
    server.thaw();
}

/// The budget of the tries below: far shorter than the backend's timeout, so each is cut short
/// by its caller's own deadline while the server is frozen.
const CUT_BUDGET: Duration = Duration::from_millis(20);

/// Issue 18, refined: a try cut short by its caller's own budget is the caller's matter only
/// while Redis answers. A server whose calls all use short budgets denied everything while
/// Redis was frozen, even under `FailOpen` (no full-timeout call fails to open the breaker,
/// and the cuts were neither counted nor given to the policy). Now, once no reply has come
/// for a backend timeout, such tries are an outage: decided by the policy (fail-open admits)
/// and counted as timeouts, still not told to the breaker (opening at one failure, it stays
/// closed). Tries are made one after another until one is admitted (bounded only against a
/// hang); which of the first ones fall within the backend's timeout of the last reply is the
/// machine's business, and each of those must be the caller's denial, counted nowhere.
#[test]
fn tries_cut_short_while_redis_has_not_answered_for_a_timeout_are_decided_by_the_policy() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(500);
    let backend =
        RedisBackend::blocking_connect(RedisConfig::single(server.url()).timeout(timeout)).unwrap();
    let breaker = BreakerConfig::new(1, OPEN_FOR, Duration::from_secs(60)).unwrap();
    let window = FixedWindow::new(5, Duration::from_secs(3600)).unwrap();
    let limiter = RedisLimiter::with_clock(
        &backend,
        "cut-down",
        window,
        FailurePolicy::FailOpen,
        ManualClock::new(),
    )
    .unwrap()
    .with_breaker(Some(breaker));
    // The last reply comes after this instant.
    let asked = Instant::now();
    assert!(limiter.blocking_try_acquire("k", 1).unwrap().is_allowed());
    server.freeze();
    let breaker = limiter.breaker().unwrap();
    let mut denied = 0;
    loop {
        let d = limiter
            .blocking_try_acquire_for("k", 1, CUT_BUDGET)
            .unwrap();
        if d.is_allowed() {
            break;
        }
        // Within the backend's timeout of the last reply: the caller's cut, counted nowhere.
        assert_eq!(d.retry_after(), timeout, "{d:?}");
        assert_eq!(limiter.failures().total(), 0, "{d:?}");
        assert_eq!(breaker.state(), BreakerState::Closed);
        denied += 1;
        assert!(
            asked.elapsed() < HANG_BOUND,
            "{denied} tries cut short on a frozen Redis, none decided by the policy"
        );
    }
    // Admitted by the policy only once a whole backend timeout had passed since the last reply.
    assert!(
        asked.elapsed() >= timeout,
        "admitted after {:?}",
        asked.elapsed()
    );
    let failures = limiter.failures();
    assert_eq!(
        (failures.timeouts, failures.total()),
        (1, 1),
        "{failures:?}"
    );
    // The next tries likewise, each counted; the breaker is told none of them.
    for _ in 0..3 {
        let d = limiter
            .blocking_try_acquire_for("k", 1, CUT_BUDGET)
            .unwrap();
        assert!(d.is_allowed(), "{d:?}");
    }
    assert_eq!(limiter.failures().timeouts, 4);
    assert_eq!(breaker.state(), BreakerState::Closed);
    server.thaw();
}

/// A backend that never had a reply (lazy, its server frozen from the start) counts as down:
/// a try cut short by its caller's budget is decided by the policy and counted, not denied as
/// the caller's matter, and still not told to the breaker.
#[test]
fn a_try_cut_short_on_a_backend_that_never_had_a_reply_is_decided_by_the_policy() {
    let server = RedisServer::start();
    server.freeze();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT).lazy();
    let backend = RedisBackend::blocking_connect(config).unwrap();
    let breaker = BreakerConfig::new(1, OPEN_FOR, Duration::from_secs(60)).unwrap();
    let window = FixedWindow::new(5, Duration::from_secs(3600)).unwrap();
    let limiter = RedisLimiter::with_clock(
        &backend,
        "never",
        window,
        FailurePolicy::FailOpen,
        ManualClock::new(),
    )
    .unwrap()
    .with_breaker(Some(breaker));
    let d = limiter
        .blocking_try_acquire_for("k", 1, CUT_BUDGET)
        .unwrap();
    assert!(d.is_allowed(), "{d:?}");
    let failures = limiter.failures();
    assert_eq!(
        (failures.timeouts, failures.total()),
        (1, 1),
        "{failures:?}"
    );
    assert_eq!(limiter.breaker().unwrap().state(), BreakerState::Closed);
    server.thaw();
}

/// A fail-closed limiter of 1,000 a minute named `name` on `backend`, on a manual clock (returned
/// with it), behind a breaker of [`FAILURES`] failures open for [`OPEN_FOR`]: the probe tests'.
fn probed_limiter(
    backend: &RedisBackend,
    name: &str,
) -> (RedisLimiter<FixedWindow, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let window = FixedWindow::new(1_000, Duration::from_secs(60)).unwrap();
    let breaker = BreakerConfig::new(FAILURES, OPEN_FOR, Duration::from_secs(60)).unwrap();
    let limiter = RedisLimiter::with_clock(
        backend,
        name,
        window,
        FailurePolicy::FailClosed,
        clock.clone(),
    )
    .unwrap()
    .with_breaker(Some(breaker));
    (limiter, clock)
}

/// A killed server's outage outlasts the connection manager's reconnect series (which a call
/// starts and which gives up after 5 refused attempts, at most about 300 ms of waits); the
/// breaker is open meanwhile, so no call starts another. Once the server is back, the breaker's
/// probe must reach it and close the breaker (issue 18: "probe half-open, close on success").
///
/// The calls run on a runtime of the test's own: the series a call starts is a task redis-rs
/// spawns on the runtime of that call, so the test sees the last series end (no task left
/// alive on it) instead of sleeping for it; the probe then finds that series' refusal kept,
/// which it must not be given.
#[test]
fn the_first_probe_after_a_killed_server_is_back_closes_the_breaker() {
    let mut server = RedisServer::start();
    let backend =
        RedisBackend::blocking_connect(RedisConfig::single(server.url()).timeout(TIMEOUT)).unwrap();
    let (limiter, clock) = probed_limiter(&backend, "restart");
    let own = OwnRuntime::new();
    let call = || own.call(&limiter);
    assert!(call().decision().is_allowed());
    // A call with the server up leaves no task on the caller's runtime (so an alive task below
    // is a reconnect series).
    own.until_no_task_alive("a call's task with the server up");

    server.kill();
    own.until_the_breaker_opens(&limiter, "a dead server");
    server.restart();
    clock.advance(OPEN_FOR);
    own.probe_closes_the_breaker(&limiter);
}

/// As above, the reconnect series ending in connection timeouts instead of refusals: the port
/// held by a listener that accepts and never answers (as a host that is down or a server that
/// hangs at connect), each attempt timing out. Once the server is back, the probe must reach
/// it, not get the stale timeout of the series the last call started (issue 18). As above, the
/// test waits for that series to end by watching its runtime's tasks, not by sleeping.
#[test]
fn the_first_probe_after_connects_timed_out_reaches_the_server_that_is_back() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut server = RedisServer::start();
    // Each connection attempt of a series gives up after this: a whole series takes 5 of it.
    // Also the probe's whole budget to connect to the restarted server: generous for that.
    let timeout = Duration::from_secs(1);
    let backend =
        RedisBackend::blocking_connect(RedisConfig::single(server.url()).timeout(timeout)).unwrap();
    let (limiter, clock) = probed_limiter(&backend, "hung");
    let own = OwnRuntime::new();
    let call = || own.call(&limiter);
    assert!(call().decision().is_allowed());
    own.until_no_task_alive("a call's task with the server up");

    server.kill();
    let listener = std::net::TcpListener::bind(("127.0.0.1", server.port)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let silent = std::thread::spawn(move || {
        let mut held = Vec::new();
        // SeqCst: a test flag.
        while !stopping.load(Ordering::SeqCst) {
            if let Ok((socket, _)) = listener.accept() {
                held.push(socket);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    // Until the series the last call started has ended (5 attempts of `timeout` each and the
    // waits between them), its timeout kept for the next call.
    own.until_the_breaker_opens(&limiter, "a silent port");
    stop.store(true, Ordering::SeqCst);
    silent.join().unwrap();
    server.restart();
    clock.advance(OPEN_FOR);
    own.probe_closes_the_breaker(&limiter);
}

/// As above, the reconnect series ending in an `AUTH` refusal: the server restarted without the
/// password the backend's URL carries (its configuration not yet restored), so each attempt of
/// the series the probe starts connects and is refused at the handshake. redis-rs's connection
/// manager starts another series only for an I/O error; after one that ended in
/// `AuthenticationFailed` it hands that kept error to every later call at once, for good. Once
/// the server takes the password again, the next probe must reach it (issue 18).
#[test]
fn the_probe_after_an_auth_refusal_reaches_the_server_that_takes_the_password_again() {
    let mut server = RedisServer::start();
    server.cli(&["CONFIG", "SET", "requirepass", "right"]);
    let url = format!("redis://:right@127.0.0.1:{}", server.port);
    let backend =
        RedisBackend::blocking_connect(RedisConfig::single(&url).timeout(TIMEOUT)).unwrap();
    let (limiter, clock) = probed_limiter(&backend, "auth");
    let own = OwnRuntime::new();
    let call = || own.call(&limiter);
    assert!(call().decision().is_allowed());
    own.until_no_task_alive("a call's task with the server up");

    server.kill();
    own.until_the_breaker_opens(&limiter, "a dead server");
    let breaker = limiter.breaker().unwrap();
    // Back without its password: the probe's series ends refused at AUTH, each attempt.
    server.restart();
    clock.advance(OPEN_FOR);
    let refused = call();
    let error = refused.failure().expect("a probe refused at AUTH");
    assert!(
        error.to_string().contains("authentication failed")
            || error.to_string().contains("Password authentication failed"),
        "{error}"
    );
    assert_eq!(breaker.state(), BreakerState::Open);
    own.until_no_task_alive("the probe's series");

    // The password is back. The breaker's back-off doubled after the failed probe.
    server.cli(&["CONFIG", "SET", "requirepass", "right"]);
    clock.advance(OPEN_FOR * 2);
    own.probe_closes_the_breaker(&limiter);
    assert!(call().decision().is_allowed());
}
