//! Deadlines on the server's clock: a call that timed out, or a future that was dropped, takes
//! nothing from the limit when the server only reaches its request after the deadline. The
//! server is frozen with SIGSTOP; the counts are read from the server itself.

use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::{Duration, Instant};

use floodgate::backend::{FailureCounts, FailureKind, FailurePolicy, Outcome};
use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{Decision, Rate};
use floodgate::{FixedWindow, Gcra};

use super::server::RedisServer;
use crate::lossy_proxy::LossyProxy;

/// Short, so the frozen calls give up quickly; long enough that a call to the live server (the
/// warm-ups, the calls after a thaw) is answered within it on a loaded machine, as the cluster
/// tests' 2 s. At 300 ms ("an idle round trip") a warm-up that a loaded machine delayed timed
/// out, and the test failed on its policy decision.
const SHORT: Duration = Duration::from_secs(2);
/// A hang guard only: a frozen call that outlives it has lost its timeout (every wait below ends
/// long before it otherwise).
const HANG: Duration = Duration::from_secs(60);

/// `future`'s output, or a failure (not a hung test) if it takes longer than [`HANG`].
async fn bounded<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(HANG, future)
        .await
        .expect("no call outlives the hang bound")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The count a fixed-window counter holds (0 when absent).
fn counter(server: &RedisServer, key: &str) -> u64 {
    let value = server.cli(&["GET", key]);
    if value.is_empty() {
        0
    } else {
        value.parse().unwrap()
    }
}

#[test]
fn calls_that_time_out_while_the_server_is_frozen_take_nothing_after_it_resumes() {
    let server = RedisServer::start();
    let runtime = runtime();
    let backend = runtime
        .block_on(RedisBackend::connect(
            RedisConfig::single(server.url()).timeout(SHORT),
        ))
        .unwrap();
    let window = Arc::new(
        RedisLimiter::new(
            &backend,
            "frozen",
            FixedWindow::new(1_000, Duration::from_secs(600)).unwrap(),
            FailurePolicy::FailOpen,
        )
        .unwrap()
        // Every call must reach the frozen server (the breaker is tested in outage.rs).
        .with_breaker(None),
    );
    let gcra = Arc::new(
        RedisLimiter::new(
            &backend,
            "frozen",
            Gcra::new(Rate::per_hour(1), 1_000).unwrap(),
            FailurePolicy::FailClosed,
        )
        .unwrap()
        .with_breaker(None),
    );
    // Warm up (loads the scripts): one permit each.
    runtime.block_on(async {
        assert!(
            window
                .try_acquire_outcome("k", 1)
                .await
                .unwrap()
                .failure()
                .is_none()
        );
        assert!(
            gcra.try_acquire_outcome("k", 1)
                .await
                .unwrap()
                .failure()
                .is_none()
        );
    });
    // (A script's first call counts twice: NOSCRIPT, then the call after SCRIPT LOAD.)
    let ran_before = server.calls("evalsha");

    server.freeze();
    const CALLS: u64 = 40;
    let outcomes = runtime.block_on(async {
        let tasks: Vec<_> = (0..CALLS)
            .map(|i| {
                let (window, gcra) = (Arc::clone(&window), Arc::clone(&gcra));
                tokio::spawn(async move {
                    if i % 2 == 0 {
                        window.try_acquire_outcome("k", 1).await.unwrap()
                    } else {
                        gcra.try_acquire_outcome("k", 1).await.unwrap()
                    }
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(bounded(task).await.unwrap());
        }
        outcomes
    });
    // Every call gave up (its deadline is behind us now) and the policy decided.
    for outcome in &outcomes {
        let error = outcome.failure().expect("the server is frozen");
        assert_eq!(error.kind(), FailureKind::Timeout, "{error}");
        assert!(error.to_string().contains(&server.url()), "{error}");
    }
    assert_eq!(window.failures().timeouts + gcra.failures().timeouts, CALLS);

    // The requests sat in the server's socket; resumed, it runs them, past their deadlines, and
    // each refuses without changing anything. The next calls travel on the same socket, behind
    // them, so their replies come after the server has run every one of them.
    server.thaw();
    runtime.block_on(async {
        let next = bounded(window.try_acquire_outcome("k", 1)).await.unwrap();
        assert!(next.failure().is_none(), "{:?}", next.failure());
        assert_eq!(
            next.decision().remaining(),
            1_000 - 2,
            "only the warm-up was taken"
        );
        let next = bounded(gcra.try_acquire_outcome("k", 1)).await.unwrap();
        assert!(next.failure().is_none(), "{:?}", next.failure());
        assert_eq!(
            next.decision().remaining(),
            1_000 - 2,
            "only the warm-up was taken"
        );
    });
    assert_eq!(counter(&server, &window.redis_keys("k")[0]), 2);
    // The late requests did reach the server (redis-rs skips only those whose caller gave up
    // before its connection task took them, which a 2 s freeze leaves no time for).
    let ran = server.calls("evalsha") - ran_before;
    assert!(ran > 2, "no late request ran: {ran}");
}

/// The outcome of a fail-closed call to a frozen server that gave up after `took` (timed from
/// before the call was made) with the timeout `short`: a timeout failure and a refusal, not
/// before its timeout, and well within the hang bound (a loaded machine may run it late).
pub(super) fn assert_timed_out(outcome: &Outcome, took: Duration, short: Duration) {
    let error = outcome.failure().expect("the server is frozen");
    assert_eq!(error.kind(), FailureKind::Timeout, "{error}");
    assert!(!outcome.decision().is_allowed(), "fail closed");
    assert!(took >= short, "gave up early, after {took:?}");
    assert!(took < short + HANG / 2, "gave up only after {took:?}");
}

/// A blocking call to a frozen server gives up at its timeout (bounded here only generously: a
/// loaded machine may run the thread late) with a timeout failure, and takes nothing.
#[test]
fn a_blocking_call_to_a_frozen_server_times_out() {
    let server = RedisServer::start();
    let backend =
        RedisBackend::blocking_connect(RedisConfig::single(server.url()).timeout(SHORT)).unwrap();
    let limiter = RedisLimiter::new(
        &backend,
        "frozen-blocking",
        FixedWindow::new(1_000, Duration::from_secs(600)).unwrap(),
        FailurePolicy::FailClosed,
    )
    .unwrap()
    .with_breaker(None);
    assert!(limiter.blocking_try_acquire("k", 1).unwrap().is_allowed()); // loads the script
    server.freeze();
    let (sent, outcome) = std::sync::mpsc::channel();
    let caller = std::thread::spawn(move || {
        let started = Instant::now();
        let outcome = limiter.blocking_try_acquire_outcome("k", 1);
        sent.send((outcome, started.elapsed())).unwrap();
        limiter
    });
    let (outcome, took) = outcome
        .recv_timeout(HANG)
        .expect("the blocking call outlived the hang bound");
    let limiter = caller.join().unwrap();
    let outcome = outcome.unwrap();
    assert_timed_out(&outcome, took, SHORT);
    assert_eq!(limiter.failures().timeouts, 1);
    server.thaw();
    let next = limiter.blocking_try_acquire("k", 1).unwrap();
    assert_eq!(next.remaining(), 1_000 - 2, "the late request took nothing");
}

/// Waits, letting the runtime run, until the server has run `command` `calls` times (60 s bound
/// against a hang).
async fn ran(server: &RedisServer, command: &str, calls: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while server.calls(command) < calls {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{command} never ran {calls} times"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[test]
fn dropped_futures_send_nothing_unpolled_and_take_nothing_past_their_deadline() {
    // One thread: the connection's task runs only when the test's task waits, so a first poll
    // only queues the request (it cannot also be answered within that poll).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    runtime.block_on(async {
        let config = RedisConfig::single(server.url()).timeout(SHORT);
        let backend = RedisBackend::connect(config).await.unwrap();
        let limiter = RedisLimiter::new(
            &backend,
            "dropped",
            FixedWindow::new(1_000, Duration::from_secs(600)).unwrap(),
            FailurePolicy::FailClosed,
        )
        .unwrap();
        let key = &limiter.redis_keys("k")[0];
        assert!(limiter.try_acquire("k", 1).await.unwrap().is_allowed());
        let base = server.calls("evalsha");
        let mut context = Context::from_waker(Waker::noop());

        // 1. Dropped before its first poll: nothing is sent. The next call is the server's next.
        drop(limiter.try_acquire("k", 1));
        assert_eq!(
            limiter.try_acquire("k", 1).await.unwrap().remaining(),
            1_000 - 2
        );
        assert_eq!(
            server.calls("evalsha"),
            base + 1,
            "the unpolled future sent nothing"
        );

        // 2. Polled once, then dropped before the connection's task took the request: redis-rs
        //    skips it; nothing is sent.
        {
            let mut call = pin!(limiter.try_acquire("k", 1));
            assert!(call.as_mut().poll(&mut context).is_pending());
        }
        assert_eq!(
            limiter.try_acquire("k", 1).await.unwrap().remaining(),
            1_000 - 3
        );
        assert_eq!(
            server.calls("evalsha"),
            base + 2,
            "the dropped request was not sent"
        );

        // 3. Sent and run by the server, dropped before its reply is read: the permit is
        //    consumed though nobody receives it (documented).
        {
            let mut call = pin!(limiter.try_acquire("k", 1));
            assert!(call.as_mut().poll(&mut context).is_pending());
            ran(&server, "evalsha", base + 3).await;
        }
        assert_eq!(counter(&server, key), 4, "consumed, handed to no one");

        // 4. Sent to a frozen server and dropped past its deadline: the resumed server runs it,
        //    refuses it, and takes nothing.
        server.freeze();
        {
            let mut call = pin!(limiter.try_acquire("k", 1));
            assert!(call.as_mut().poll(&mut context).is_pending());
            // The connection's task writes it meanwhile; we wait out the call's deadline (set
            // at its first poll) on this process's clock.
            tokio::time::sleep(SHORT).await;
        }
        server.thaw();
        ran(&server, "evalsha", base + 4).await;
        assert_eq!(counter(&server, key), 4, "the late request took nothing");
        assert_eq!(
            bounded(limiter.try_acquire("k", 1))
                .await
                .unwrap()
                .remaining(),
            1_000 - 5
        );
        assert_eq!(
            limiter.failures().total(),
            0,
            "a dropped call is no failure"
        );
    });
}

#[test]
fn the_server_clock_offset_is_learnt_at_connect_within_the_connect_time() {
    let server = RedisServer::start();
    let runtime = runtime();
    let before = server.time_micros();
    let started = std::time::Instant::now();
    // A generous timeout: the default 200 ms connect failed once on a loaded 2-core machine
    // (load 6-8); the bounds below hold for any connect time, since they use the one measured.
    let backend = runtime
        .block_on(RedisBackend::connect(
            RedisConfig::single(server.url()).timeout(Duration::from_secs(60)),
        ))
        .unwrap();
    let connecting = u64::try_from(started.elapsed().as_micros()).unwrap();
    let after = server.time_micros();
    // offset = server time − client time since the backend was made, from a `TIME` read during
    // connect: the server read at least `before`, and the client side is at most the time
    // connecting took; the server read at most `after`, and the client side is at least 0.
    let offset = u64::try_from(
        backend
            .server_offset()
            .expect("read at connect")
            .as_micros(),
    )
    .unwrap();
    assert!(offset <= after, "{offset} > {after}");
    assert!(
        offset >= before - connecting,
        "{offset} < {before} − {connecting}"
    );
}

#[test]
fn a_reply_read_late_does_not_pull_the_learnt_offset_down() {
    const TRIES: u32 = 10_000;
    const HANG_BOUND: Duration = Duration::from_secs(120);
    // A reply read 1.5 s after the server wrote it (a busy client) is a sample 1.5 s short of the
    // server's clock. Taken as the offset, every deadline sent after it would be 1.5 s early,
    // and the script would refuse calls that reach it well in time.
    let server = RedisServer::start();
    let runtime = runtime(); // the connection's task runs on the workers, the test's call here
    let connecting = Instant::now();
    let backend = runtime
        .block_on(RedisBackend::connect(
            RedisConfig::single(server.url()).timeout(Duration::from_secs(60)),
        ))
        .unwrap();
    let limiter = RedisLimiter::new(
        &backend,
        "late-reader",
        // Room for every try below: a try whose reply is ready at its first poll takes a permit.
        FixedWindow::new(TRIES + 1, Duration::from_secs(600)).unwrap(),
        FailurePolicy::FailClosed,
    )
    .unwrap();
    assert!(
        runtime
            .block_on(limiter.try_acquire("k", 1))
            .unwrap()
            .is_allowed()
    ); // loads it
    let learnt = backend.server_offset().unwrap();
    // The first poll sends the request; on a loaded machine the connection's task (on another
    // worker) can get the reply before that same poll checks for it, and the call is then
    // ready at once, with nothing read late. Such a try sets nothing up: try again, up to
    // `TRIES` times within `HANG_BOUND` (20 tries once all came back ready at a load of 6-8).
    let mut read_late = false;
    let trying = Instant::now();
    for _ in 0..TRIES {
        if trying.elapsed() > HANG_BOUND {
            break;
        }
        let ran_before = server.calls("evalsha");
        read_late = runtime.block_on(async {
            let mut call = pin!(limiter.try_acquire("k", 1));
            if call
                .as_mut()
                .poll(&mut Context::from_waker(Waker::noop()))
                .is_ready()
            {
                return false;
            }
            // The script ran and its reply is on its way; this task reads it only when polled
            // again, in a later second of the backend's clock than the samples before.
            server.wait_for_calls("evalsha", ran_before + 1);
            std::thread::sleep(
                (connecting + Duration::from_millis(1_500))
                    .saturating_duration_since(Instant::now()),
            );
            assert!(call.await.unwrap().is_allowed());
            true
        });
        if read_late {
            break;
        }
    }
    assert!(
        read_late,
        "no call's reply could be held back in {TRIES} tries or {HANG_BOUND:?}"
    );
    let offset = backend.server_offset().unwrap();
    assert!(
        offset >= learnt,
        "a late reply pulled the offset down by {:?}",
        learnt - offset
    );
}

/// The limit of the limiters of the own-budget tests below: a fixed window of an hour, so no
/// permit comes back during a test.
const OWN_BUDGET_LIMIT: u64 = 5;

/// The backend's timeout of the own-budget tests on a healthy server: a try cut short by its
/// caller's budget is the caller's matter (denied, counted nowhere) only while Redis has sent a
/// reply within the backend's timeout (issue 18, refined); this is long enough that no stall of
/// a loaded machine between two replies makes a healthy Redis look down. No call waits it out.
const OWN_BUDGET_TIMEOUT: Duration = Duration::from_secs(30);

/// A fail-open limiter of [`OWN_BUDGET_LIMIT`] an hour on `backend`, named `name`.
fn fail_open_hourly(backend: &RedisBackend, name: &str) -> RedisLimiter<FixedWindow> {
    let window = FixedWindow::new(OWN_BUDGET_LIMIT as u32, Duration::from_secs(3600)).unwrap();
    RedisLimiter::new(backend, name, window, FailurePolicy::FailOpen).unwrap()
}

/// How many of `decisions` (tries of `try_acquire_for` given less than the backend's
/// `timeout`, on a healthy server) were admitted, having checked each: the limiter's limit,
/// and a denial is either Redis's (or its deny cache's: the rest of the hour) or a try cut
/// short by its caller's budget (`retry_after` = the backend's timeout).
fn admitted_by_tries(decisions: &[Decision], timeout: Duration) -> u64 {
    for decision in decisions {
        assert_eq!(decision.limit(), OWN_BUDGET_LIMIT, "{decision:?}");
        if !decision.is_allowed() {
            let cut_short = decision.retry_after() == timeout;
            let by_redis = decision.retry_after() > Duration::from_secs(3000);
            assert!(cut_short || by_redis, "{decision:?}");
        }
    }
    decisions.iter().filter(|d| d.is_allowed()).count() as u64
}

/// Tiny budgets, all far below the backend's timeout: a few µs (cut short before any reply can
/// come), and a round trip or so (some answered, some not, as the machine's load has it).
const TINY_BUDGETS: [Duration; 4] = [
    Duration::from_nanos(1),
    Duration::from_micros(100),
    Duration::from_micros(500),
    Duration::from_millis(2),
];

/// Issue 18: a try of `try_acquire_for` cut short by its caller's own budget (sooner than the
/// backend's timeout) says nothing about Redis. Under `FailOpen`, with Redis healthy, 20 tries
/// given no time at all were admitted by the policy (20 of 20 on a limit of 5, nothing counted
/// on Redis) and counted as 20 Redis timeouts. Now each is denied, counted nowhere, and over
/// the whole test the callers are admitted at most what Redis counted, which is at most the
/// limit: Redis's count can be more than the admissions only by permits that tries whose
/// script ran before its deadline on the server took though their replies came too late for
/// their callers (consumed, handed to nobody: see `RedisBackend`, "What can still be consumed").
#[test]
fn tries_cut_short_by_the_callers_own_budget_are_denied_and_no_failure() {
    let server = RedisServer::start();
    let runtime = runtime();
    let backend = runtime
        .block_on(RedisBackend::connect(
            RedisConfig::single(server.url()).timeout(OWN_BUDGET_TIMEOUT),
        ))
        .unwrap();
    let limiter = Arc::new(fail_open_hourly(&backend, "own-budget"));
    let key = limiter.redis_keys("k")[0].clone();
    let (zero, tiny) = runtime.block_on(async {
        // Loads the script, on another key.
        assert!(limiter.try_acquire("warm", 1).await.unwrap().is_allowed());
        let mut zero = Vec::new();
        for _ in 0..20 {
            zero.push(
                limiter
                    .try_acquire_for("k", 1, Duration::ZERO)
                    .await
                    .unwrap(),
            );
        }
        // Tiny budgets: one after another (some answered in time), then 40 at once (most of
        // them queued behind one call out).
        let mut tiny = Vec::new();
        for budget in TINY_BUDGETS.repeat(5) {
            tiny.push(limiter.try_acquire_for("k", 1, budget).await.unwrap());
        }
        let tasks: Vec<_> = (0..40)
            .map(|i| {
                let limiter = Arc::clone(&limiter);
                let budget = TINY_BUDGETS[i % TINY_BUDGETS.len()];
                tokio::spawn(async move { limiter.try_acquire_for("k", 1, budget).await })
            })
            .collect();
        for task in tasks {
            tiny.push(bounded(task).await.unwrap().unwrap());
        }
        (zero, tiny)
    });
    let zero_admitted = admitted_by_tries(&zero, OWN_BUDGET_TIMEOUT);
    assert_eq!(
        (zero_admitted, limiter.failures()),
        (0, FailureCounts::default()),
        "20 tries given no time on a healthy Redis: admitted, failures"
    );
    // A try given no time is cut short before any reply can come, and its request (if sent)
    // reaches the server past its deadline: nothing taken (the warm-up took its own key's).
    for decision in &zero {
        assert_eq!(decision.retry_after(), OWN_BUDGET_TIMEOUT, "{decision:?}");
    }
    let admitted = zero_admitted + admitted_by_tries(&tiny, OWN_BUDGET_TIMEOUT);
    assert_eq!(
        limiter.failures(),
        FailureCounts::default(),
        "Redis is healthy"
    );
    let taken = counter(&server, &key);
    assert!(
        admitted <= taken && taken <= OWN_BUDGET_LIMIT,
        "{admitted} admitted, {taken} taken on Redis, limit {OWN_BUDGET_LIMIT}"
    );
}

/// As [`tries_cut_short_by_the_callers_own_budget_are_denied_and_no_failure`], through
/// `blocking_try_acquire_for`, from one thread and then from four at once.
#[test]
fn blocking_tries_cut_short_by_the_callers_own_budget_are_denied_and_no_failure() {
    let server = RedisServer::start();
    let backend = RedisBackend::blocking_connect(
        RedisConfig::single(server.url()).timeout(OWN_BUDGET_TIMEOUT),
    )
    .unwrap();
    let limiter = Arc::new(fail_open_hourly(&backend, "own-budget-blocking"));
    let key = limiter.redis_keys("k")[0].clone();
    assert!(
        limiter
            .blocking_try_acquire("warm", 1)
            .unwrap()
            .is_allowed()
    );
    let zero: Vec<_> = (0..20)
        .map(|_| {
            limiter
                .blocking_try_acquire_for("k", 1, Duration::ZERO)
                .unwrap()
        })
        .collect();
    let zero_admitted = admitted_by_tries(&zero, OWN_BUDGET_TIMEOUT);
    assert_eq!(
        (zero_admitted, limiter.failures()),
        (0, FailureCounts::default()),
        "20 blocking tries given no time on a healthy Redis: admitted, failures"
    );
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            std::thread::spawn(move || {
                (0..10)
                    .map(|i| {
                        let budget = TINY_BUDGETS[i % TINY_BUDGETS.len()];
                        limiter.blocking_try_acquire_for("k", 1, budget).unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let tiny: Vec<_> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let admitted = zero_admitted + admitted_by_tries(&tiny, OWN_BUDGET_TIMEOUT);
    assert_eq!(
        limiter.failures(),
        FailureCounts::default(),
        "Redis is healthy"
    );
    let taken = counter(&server, &key);
    assert!(
        admitted <= taken && taken <= OWN_BUDGET_LIMIT,
        "{admitted} admitted, {taken} taken on Redis, limit {OWN_BUDGET_LIMIT}"
    );
}

/// A try whose script ran before its deadline on the server's clock (an eighth of its budget
/// before its caller's) but whose reply came after its caller's budget ran out: the caller is
/// denied, nothing is counted as a failure, and the permit the script took stays taken, handed
/// to nobody, ever: the key's next calls get the 4 others of 5. The reply is held back by a
/// proxy until the caller has its answer (no timing decides it, but that the request reaches
/// the server within 7/8 of the 3 s budget).
#[test]
fn a_permit_taken_by_a_try_whose_reply_came_too_late_for_its_caller_goes_to_nobody() {
    let server = RedisServer::start();
    let proxy = LossyProxy::forward(LossyProxy::listener(), server.port);
    let runtime = runtime();
    let timeout = Duration::from_secs(30);
    let backend = runtime
        .block_on(RedisBackend::connect(
            RedisConfig::single(proxy.url()).timeout(timeout),
        ))
        .unwrap();
    let limiter = fail_open_hourly(&backend, "late-reply");
    let key = limiter.redis_keys("k")[0].clone();
    let budget = Duration::from_secs(3);
    runtime.block_on(async {
        // Loads the script, on another key, so the held reply is the try's own.
        assert!(limiter.try_acquire("warm", 1).await.unwrap().is_allowed());
        let (reply_seen, seen) = std::sync::mpsc::channel();
        let (release, released) = std::sync::mpsc::channel::<()>();
        proxy.rewrite_next_reply(move |reply| {
            reply_seen.send(reply.to_vec()).unwrap();
            // Held until the caller has its answer (the hang bound only against a lost test).
            let _ = released.recv_timeout(HANG);
            reply.to_vec()
        });
        let decision = bounded(limiter.try_acquire_for("k", 1, budget))
            .await
            .unwrap();
        assert!(!decision.is_allowed(), "{decision:?}");
        assert_eq!(decision.limit(), OWN_BUDGET_LIMIT);
        assert_eq!(decision.retry_after(), timeout, "{decision:?}");
        assert_eq!(limiter.failures(), FailureCounts::default());
        let reply = seen.recv_timeout(HANG).expect("the script replied");
        release.send(()).unwrap();
        assert_eq!(
            counter(&server, &key),
            1,
            "the script ran in time and took its permit: {}",
            String::from_utf8_lossy(&reply)
        );
        let mut admitted = 0;
        for _ in 0..OWN_BUDGET_LIMIT + 1 {
            let outcome = bounded(limiter.try_acquire_outcome("k", 1)).await.unwrap();
            assert!(outcome.failure().is_none(), "{outcome:?}");
            admitted += u64::from(outcome.decision().is_allowed());
        }
        assert_eq!(
            admitted,
            OWN_BUDGET_LIMIT - 1,
            "the late try's permit went to nobody"
        );
        assert_eq!(counter(&server, &key), OWN_BUDGET_LIMIT);
        assert_eq!(limiter.failures(), FailureCounts::default());
    });
}
