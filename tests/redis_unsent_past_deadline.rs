//! A `RedisLimiter` call whose deadline has passed before its request would be written sends
//! nothing (issue 18): `RedisBackend::eval` used to poll the call (which writes the request)
//! before looking at the deadline, so a request with no time left still reached Redis, where
//! the script refuses it only while the server's clock offset is known (not on a lazy backend
//! before its first reply: there it took its permits for a caller that had given up). Starts
//! its own `redis-server`; no sleeps; real time only bounds a hang.
#![cfg(feature = "redis")]

#[path = "support/poll_once.rs"]
mod poll_once;
#[path = "redis/server.rs"]
mod server;

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use floodgate::backend::{BreakerConfig, BreakerState, FailurePolicy, Outcome};
use floodgate::redis::{RedisAlgorithm, RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{Gcra, ManualClock, Rate, SlidingWindow};
use poll_once::poll_once;
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

/// A breaker that one failure opens, for a minute (its clock manual: it never half-opens).
fn opened_by_one() -> BreakerConfig {
    BreakerConfig::new(1, Duration::from_secs(60), Duration::from_secs(60)).unwrap()
}

/// A current-thread runtime, as sync code calling async code keeps one per thread.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Tries given no time, as many as the breaker's threshold, while Redis answers: each is a
/// caller's own cut (nothing sent), never Redis's failure. The breaker stays closed and the
/// next call is served by Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tries_with_no_time_left_do_not_open_the_breaker() {
    const THRESHOLD: u32 = 3;
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let breaker = BreakerConfig::new(THRESHOLD, Duration::from_secs(60), Duration::from_secs(60));
    let limiter = RedisLimiter::with_clock(
        &backend,
        "zero",
        hourly_gcra(),
        FailurePolicy::FailOpen,
        ManualClock::new(),
    );
    let limiter = limiter.unwrap().with_breaker(Some(breaker.unwrap()));
    let warm = limiter.try_acquire_outcome("warm", 1).await.unwrap();
    assert!(warm.failure().is_none(), "{warm:?}");
    for _ in 0..THRESHOLD {
        let tried = tokio::time::timeout(HANG, limiter.try_acquire_for("k", 1, Duration::ZERO));
        let tried = tried.await.expect("a try with no time hung").unwrap();
        assert!(!tried.is_allowed(), "{tried:?}");
    }
    let breaker = limiter.breaker().unwrap().shared();
    assert_eq!(breaker.state(), BreakerState::Closed);
    let served = limiter.try_acquire_outcome("k", 1).await.unwrap();
    assert!(
        served.failure().is_none() && served.decision().is_allowed(),
        "Redis is up, yet: {served:?}"
    );
}

fn hourly_gcra() -> Gcra {
    Gcra::new(Rate::per_hour(1), 100).unwrap()
}

/// Polls `future` on `runtime` (left idle between polls: its timers never fire) until it is
/// done, yielding the thread between polls; real time only bounds a hang.
fn poll_until_done<F: Future>(
    runtime: &tokio::runtime::Runtime,
    future: &mut Pin<Box<F>>,
) -> F::Output {
    let started = Instant::now();
    loop {
        let polled = runtime.block_on(std::future::poll_fn(|cx| match future.as_mut().poll(cx) {
            Poll::Ready(done) => Poll::Ready(Some(done)),
            Poll::Pending => Poll::Ready(None),
        }));
        if let Some(done) = polled {
            return done;
        }
        assert!(started.elapsed() < HANG, "never answered (hung)");
        std::thread::yield_now();
    }
}

/// What [`queued_past_their_deadline`] saw.
struct Queued {
    server: RedisServer,
    /// The queued callers' outcomes.
    outcomes: Vec<Outcome>,
    /// The outcomes of the decisions queued after the others' deadlines passed (in time).
    live: Vec<Outcome>,
    /// `EVALSHA` calls the server ran from the freeze until a call after everything, answered.
    sent: u64,
    /// The breaker's state once the queued callers were decided.
    breaker: BreakerState,
    /// A call made after them, Redis thawed (the breaker closed: Redis serves it).
    after: Outcome,
}

/// `queued` decisions of `algorithm`'s limiter (fail-closed, a breaker one failure opens) wait
/// in its coalescer's queue behind a call out on a frozen server; their callers are polled
/// once (on a runtime left idle), then not until after their deadlines have passed (a loaded
/// machine, a runtime busy elsewhere; the one wait is a call on the frozen server timing out).
/// The call out is then dropped, which hands the queue to a flusher: it takes the decisions,
/// all past their deadline, their callers still there.
///
/// `live` more decisions (on keys "k" and "j" in turn) queue after those deadlines have
/// passed: taken in the same batch, in time.
fn queued_past_their_deadline<A: RedisAlgorithm + Send + Sync + 'static>(
    algorithm: A,
    queued: usize,
    live: usize,
) -> Queued {
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = main.block_on(RedisBackend::connect(config)).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter =
        RedisLimiter::with_clock(&backend, "queued", algorithm, policy, ManualClock::new());
    let limiter = limiter.unwrap().with_breaker(Some(opened_by_one()));
    let bystander = RedisLimiter::new(
        &backend,
        "bystander",
        hourly_gcra(),
        FailurePolicy::FailOpen,
    );
    let bystander = bystander.unwrap().with_breaker(None);
    main.block_on(async {
        let warm = limiter.try_acquire_outcome("warm", 1).await.unwrap();
        assert!(warm.failure().is_none(), "{warm:?}");
        let warm = bystander.try_acquire_outcome("warm", 1).await.unwrap();
        assert!(warm.failure().is_none(), "{warm:?}");
    });

    let idle = current_thread();
    let before = server.calls("evalsha");
    server.freeze();
    // A call out, holding the coalescer's turn: the decisions after it queue.
    let mut out = Box::pin(limiter.try_acquire_outcome("out", 1));
    assert!(poll_once(&idle, &mut out), "its call is out");
    let mut waiting: Vec<_> = (0..queued)
        .map(|i| Box::pin(limiter.try_acquire_outcome(if i % 2 == 0 { "k" } else { "j" }, 1)))
        .collect();
    for future in &mut waiting {
        assert!(poll_once(&idle, future), "queued");
    }
    // A call made after them, with the same timeout, times out on the frozen server: their
    // deadlines have passed.
    let waited = main
        .block_on(bystander.try_acquire_outcome("y", 1))
        .unwrap();
    assert!(
        waited.failure().is_some_and(|e| e.is_timeout()),
        "{waited:?}"
    );
    let mut in_time: Vec<_> = (0..live)
        .map(|i| Box::pin(limiter.try_acquire_outcome(if i % 2 == 0 { "k" } else { "j" }, 1)))
        .collect();
    for future in &mut in_time {
        assert!(poll_once(&idle, future), "queued");
    }
    // The call out dropped: a flusher takes the queue.
    drop(out);
    let outcomes: Vec<Outcome> = waiting
        .iter_mut()
        .map(|future| poll_until_done(&idle, future).unwrap())
        .collect();
    let breaker = limiter.breaker().unwrap().shared().state();
    server.thaw();
    let live: Vec<Outcome> = in_time
        .iter_mut()
        .map(|future| poll_until_done(&idle, future).unwrap())
        .collect();
    // Answered after everything written before it on the connection ran.
    let flushed = main
        .block_on(bystander.try_acquire_outcome("z", 1))
        .unwrap();
    assert!(flushed.failure().is_none(), "{flushed:?}");
    let sent = server.calls("evalsha") - before;
    let after = main
        .block_on(limiter.try_acquire_outcome("after", 1))
        .unwrap();
    drop((waiting, in_time));
    std::thread::spawn(move || drop(idle)).join().unwrap();
    drop(limiter);
    drop(bystander);
    drop(backend);
    std::thread::spawn(move || drop(main)).join().unwrap();
    Queued {
        server,
        outcomes,
        live,
        sent,
        breaker,
        after,
    }
}

/// Asserts that every queued caller of [`queued_past_their_deadline`] got a "not sent"
/// timeout, decided by the policy (fail-closed: denied), that nothing but the call out, the
/// timed-out call and the flushing call was sent, and that the breaker stayed closed.
fn nothing_sent_for(queued: &Queued) {
    for outcome in &queued.outcomes {
        let error = outcome.failure().expect("past its deadline");
        assert!(
            error.is_timeout() && !outcome.decision().is_allowed(),
            "{outcome:?}"
        );
        assert!(
            error.to_string().contains("not sent"),
            "a decision past its deadline was sent: {error}"
        );
    }
    assert_eq!(
        queued.sent,
        3 + 2 * u64::from(!queued.live.is_empty()),
        "the call out, the timed-out call, the batch of those in time if any (twice: its \
         script not loaded yet, NOSCRIPT, then sent again) and the flushing call only"
    );
    assert_eq!(
        queued.breaker,
        BreakerState::Closed,
        "a decision not sent was told to the breaker: {:?}",
        queued.outcomes
    );
    assert!(
        queued.after.failure().is_none() && queued.after.decision().is_allowed(),
        "Redis is up, yet: {:?}",
        queued.after
    );
    let _ = &queued.server;
}

/// One decision queued past its deadline goes out alone (the one-call path), which sends
/// nothing past the deadline: a "not sent" timeout. It says nothing about Redis, yet it was
/// told to the breaker (opening it here: one failure opens it), and the next call, Redis up,
/// was short-circuited.
#[test]
fn a_decision_queued_past_its_deadline_is_not_the_breakers_failure() {
    nothing_sent_for(&queued_past_their_deadline(hourly_gcra(), 1, 0));
}

/// Decisions queued past their deadlines taken as one batch (GCRA's tally script): they were
/// sent, to be refused as late by the server (only while the clock offset is known). Now each
/// is answered with a "not sent" timeout, and the batch, left empty, is not sent.
#[test]
fn a_tally_batch_past_its_deadlines_is_not_sent() {
    nothing_sent_for(&queued_past_their_deadline(hourly_gcra(), 3, 0));
}

/// As above, a batch of the sliding window's (one reply per decision: `eval_batch`).
#[test]
fn a_batch_past_its_deadlines_is_not_sent() {
    let window = SlidingWindow::new(100, Duration::from_secs(3600), 10).unwrap();
    nothing_sent_for(&queued_past_their_deadline(window, 3, 0));
}

/// Decisions past their deadlines and decisions in time taken in one batch: those past are
/// answered "not sent" and left out; those in time are sent and decided once, against a key
/// the others took nothing from (each in-time decision is its key's first: 99 of 100 left).
#[test]
fn a_batch_sends_only_its_decisions_in_time() {
    let queued = queued_past_their_deadline(hourly_gcra(), 3, 2);
    nothing_sent_for(&queued);
    for outcome in &queued.live {
        assert!(
            outcome.failure().is_none() && outcome.decision().is_allowed(),
            "{outcome:?}"
        );
        assert_eq!(outcome.decision().remaining(), 99, "{outcome:?}");
    }
}
