//! Coalescing across runtimes: a decision queued behind calls that are out must be
//! sent while Redis is up, whichever runtimes the other callers ran on.
#![cfg(feature = "redis")]

#[path = "support/poll_once.rs"]
mod poll_once;
#[path = "redis/server.rs"]
mod server;

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use floodgate::backend::FailurePolicy;
use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{Gcra, Rate};
use poll_once::poll_once;
use server::RedisServer;

/// Generous: Redis is up and answers in microseconds; only a stranded decision reaches it.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A limiter over a GCRA key on `server`, with its script loaded and the server's clock known
/// (one decision taken on key "k").
fn warm_gcra_limiter(server: &RedisServer) -> Arc<RedisLimiter<Gcra>> {
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::blocking_connect(config).unwrap();
    let gcra = Gcra::new(Rate::per_second(1_000), 1_000).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = Arc::new(RedisLimiter::new(&backend, "review", gcra, policy).unwrap());
    assert!(limiter.blocking_try_acquire("k", 1).unwrap().is_allowed());
    limiter
}

/// A current-thread runtime, as sync code calling async code keeps one per thread.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A runtime with one worker that drives what is spawned on it.
fn one_worker() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Two callers on a current-thread runtime send their own calls (the two turns), a third caller
/// on another runtime queues behind them (Redis is frozen meanwhile, so that both calls are
/// surely out), and the first two are dropped (a timeout, a select); then Redis is thawed.
/// The queued decision and the limiter's next one are sent and decided: their turns go to
/// flushers on the connection's runtime, not on the idle runtime of the dropped callers (there
/// they would never run, and every later decision would time out with Redis up).
#[test]
fn callers_dropped_on_an_idle_runtime_strand_no_queued_decision() {
    let server = RedisServer::start();
    let limiter = warm_gcra_limiter(&server);

    let idle = current_thread();
    // Frozen while the calls go out, so that they stay out until dropped.
    server.freeze();
    let mut a = Box::pin(limiter.try_acquire_outcome("k", 1));
    let mut b = Box::pin(limiter.try_acquire_outcome("k", 1));
    assert!(poll_once(&idle, &mut a), "a's call is out");
    assert!(poll_once(&idle, &mut b), "b's call is out");

    let busy = one_worker();
    let queued = busy.block_on(async {
        let mut c = Box::pin(limiter.try_acquire_outcome("k", 1));
        let pending = std::future::poll_fn(|cx| Poll::Ready(c.as_mut().poll(cx).is_pending()));
        assert!(pending.await, "c is queued behind a and b");
        drop(a);
        drop(b);
        server.thaw();
        c.await.unwrap()
    });
    // The limiter's next decision, with nothing else out.
    let later = busy.block_on(limiter.try_acquire_outcome("k", 1)).unwrap();
    let up = |o: &floodgate::backend::Outcome| o.failure().is_none() && o.decision().is_allowed();
    assert!(
        up(&queued) && up(&later),
        "Redis is up, yet the queued decision got {queued:?} and a later one {later:?}"
    );
    drop(idle);
}

/// As above, but the callers' runtime is shut down (a runtime built per call, dropped with the
/// futures still out): the decision queued meanwhile on another runtime is still sent and
/// decided (a turn given back looks at the queue).
#[test]
fn callers_on_a_runtime_shut_down_strand_no_queued_decision() {
    let server = RedisServer::start();
    let limiter = warm_gcra_limiter(&server);

    server.freeze();
    let short_lived = current_thread();
    let mut a = Box::pin(limiter.try_acquire_outcome("k", 1));
    let mut b = Box::pin(limiter.try_acquire_outcome("k", 1));
    assert!(poll_once(&short_lived, &mut a), "a's call is out");
    assert!(poll_once(&short_lived, &mut b), "b's call is out");

    let busy = one_worker();
    let queued = busy.block_on(async {
        let mut c = Box::pin(limiter.try_acquire_outcome("k", 1));
        let pending = std::future::poll_fn(|cx| Poll::Ready(c.as_mut().poll(cx).is_pending()));
        assert!(pending.await, "c is queued behind a and b");
        short_lived.shutdown_background();
        drop(a);
        drop(b);
        server.thaw();
        c.await.unwrap()
    });
    assert!(
        queued.failure().is_none() && queued.decision().is_allowed(),
        "Redis is up, yet the queued decision got {queued:?}"
    );
}

/// No caller is dropped: two threads each drive their call with `block_on` on their own
/// current-thread runtime (a thread-local runtime, as sync code calling async code keeps one),
/// and a third caller queues behind them. The first two calls complete normally and `block_on`
/// returns at once: the queued decision is still sent and decided (its flusher runs on the
/// connection's runtime, not on the callers' runtimes, which nothing drives any more).
#[test]
fn callers_completing_on_thread_local_runtimes_strand_no_queued_decision() {
    let server = RedisServer::start();
    let limiter = warm_gcra_limiter(&server);

    let (first, second) = (current_thread(), current_thread());
    server.freeze();
    let mut a = Box::pin(limiter.try_acquire_outcome("k", 1));
    let mut b = Box::pin(limiter.try_acquire_outcome("k", 1));
    assert!(poll_once(&first, &mut a), "a's call is out");
    assert!(poll_once(&second, &mut b), "b's call is out (or queued)");

    let busy = one_worker();
    let (queued_tx, queued_rx) = std::sync::mpsc::channel();
    let shared = Arc::clone(&limiter);
    let c = busy.spawn(async move {
        let mut c = Box::pin(shared.try_acquire_outcome("k", 1));
        let pending = std::future::poll_fn(|cx| Poll::Ready(c.as_mut().poll(cx).is_pending()));
        queued_tx.send(pending.await).unwrap();
        c.await.unwrap()
    });
    let hang_guard = Duration::from_secs(60);
    assert!(
        queued_rx.recv_timeout(hang_guard).unwrap(),
        "c is queued behind a and b"
    );
    server.thaw();
    // a and b complete, each on its thread's runtime (b may have queued too, when only one
    // call may be out).
    let a = first.block_on(a).unwrap();
    let b = second.block_on(b).unwrap();
    let c = busy.block_on(c).unwrap();
    let up = |o: &floodgate::backend::Outcome| o.failure().is_none() && o.decision().is_allowed();
    assert!(
        up(&a) && up(&b) && up(&c),
        "Redis is up, yet a got {a:?}, b {b:?}, the queued c {c:?}"
    );
}

/// A caller whose own call went out and which is then never polled again, though its future
/// is kept (a `Stream` its consumer stopped reading, a future stored for later, a task whose
/// runtime nothing drives any more): its reply comes back, unseen. The limiter's other callers
/// must still be decided by Redis, not queue behind it until their timeout (the policy then
/// deciding each one while Redis is up, and their failures opening the breaker).
#[test]
fn a_caller_never_polled_after_its_own_call_went_out_does_not_hold_up_the_others() {
    let server = RedisServer::start();
    let limiter = warm_gcra_limiter(&server);

    let idle = current_thread();
    let before = server.calls("evalsha");
    // Frozen while the call goes out, so that its reply cannot come back within its first
    // poll (on a loaded machine the poll, preempted after the send, found the reply there).
    server.freeze();
    let mut stalled = Box::pin(limiter.try_acquire_outcome("k", 1));
    assert!(poll_once(&idle, &mut stalled), "its call is out");
    server.thaw();
    // Its request reached Redis (and was answered): it is no longer out at the server.
    server.wait_for_calls("evalsha", before + 1);

    let busy = one_worker();
    let later = busy.block_on(async {
        let mut outcomes = Vec::new();
        for _ in 0..3 {
            outcomes.push(limiter.try_acquire_outcome("k", 1).await.unwrap());
        }
        outcomes
    });
    for (i, outcome) in later.iter().enumerate() {
        assert!(
            outcome.failure().is_none() && outcome.decision().is_allowed(),
            "Redis is up, yet call {i} after the stalled one got {outcome:?}"
        );
    }
    drop(stalled);
    drop(idle);
}

/// A batch is bounded by work, not only by count (256 capped SlidingLog decisions in one script
/// call held the server 1.4-4.2 s): queued SlidingLog decisions on distinct keys, each at
/// the per-call cap (`n` = limit = 4,096), each go to the server in a call of their own (a
/// batch touches no more sorted-set entries than one capped call), and every one is decided.
#[test]
fn a_batch_of_capped_sliding_log_decisions_holds_the_server_no_longer_than_one_call() {
    const CALLERS: usize = 2 + 8;
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let keys: Vec<String> = runtime.block_on(async {
        let config = RedisConfig::single(server.url()).timeout(Duration::from_secs(30));
        let backend = RedisBackend::connect(config).await.unwrap();
        let log = floodgate::SlidingLog::new(4_096, Duration::from_secs(60)).unwrap();
        let policy = FailurePolicy::FailClosed;
        let limiter = Arc::new(RedisLimiter::new(&backend, "review", log, policy).unwrap());
        assert!(limiter.try_acquire("warm", 1).await.unwrap().is_allowed());
        server.log_script_calls();
        let keys: Vec<&'static str> = (0..CALLERS)
            .map(|i| &*Box::leak(format!("k{i}").into_boxed_str()))
            .collect();
        let mut calls: Vec<_> = keys
            .iter()
            .map(|&key| {
                let limiter = Arc::clone(&limiter);
                Box::pin(async move { limiter.try_acquire_outcome(key, 4_096).await })
            })
            .collect();
        let waker = std::task::Waker::noop();
        let mut context = std::task::Context::from_waker(waker);
        for call in &mut calls {
            assert!(call.as_mut().poll(&mut context).is_pending());
        }
        let tasks: Vec<_> = calls.into_iter().map(tokio::spawn).collect();
        for task in tasks {
            let outcome = task.await.unwrap().unwrap();
            assert!(outcome.failure().is_none(), "{outcome:?}");
            assert!(outcome.decision().is_allowed(), "{outcome:?}");
        }
        keys.iter()
            .map(|k| limiter.redis_keys(k)[0].clone())
            .collect()
    });
    let calls = server.script_calls();
    for call in &calls {
        // Two keys per limiter key (the log and its sequence): one decision per call.
        assert_eq!(
            call.numkeys, 2,
            "a script call held several decisions: {call:?}"
        );
    }
    for key in &keys {
        assert!(
            calls.iter().any(|c| c.keys.first() == Some(key)),
            "{key} never reached the server: {calls:?}"
        );
    }
}

/// 64 callers on one key, `n` of 1 to 3, all polled once (two sent, the rest queued behind
/// them) and then run: each gets the decision sequential calls in that order would give it.
/// tests/redis/coalesce.rs covers the anchored fixed window, GCRA and the sliding log; these are
/// the two algorithms whose batch script is generated (`batch_source`).
fn batch_is_exact<A: floodgate::redis::RedisAlgorithm>(name: &str, algorithm: A, limit: u64) {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let config = RedisConfig::single(server.url()).timeout(Duration::from_secs(30));
        let backend = RedisBackend::connect(config).await.unwrap();
        let policy = FailurePolicy::FailClosed;
        let limiter = Arc::new(RedisLimiter::new(&backend, name, algorithm, policy).unwrap());
        assert!(limiter.try_acquire("warm", 1).await.unwrap().is_allowed());
        let before = server.calls("evalsha");
        let ns: Vec<u32> = (0..64u32).map(|i| 1 + (i * 7) % 3).collect();
        let mut calls: Vec<_> = ns
            .iter()
            .map(|&n| {
                let limiter = Arc::clone(&limiter);
                Box::pin(async move { limiter.try_acquire_outcome("k", n).await })
            })
            .collect();
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        for call in &mut calls {
            assert!(call.as_mut().poll(&mut context).is_pending());
        }
        let tasks: Vec<_> = calls.into_iter().map(tokio::spawn).collect();
        let mut used = 0u64;
        for (i, (task, n)) in tasks.into_iter().zip(&ns).enumerate() {
            let outcome = task.await.unwrap().unwrap();
            assert!(
                outcome.failure().is_none(),
                "{name} caller {i}: {outcome:?}"
            );
            let fits = used + u64::from(*n) <= limit;
            if fits {
                used += u64::from(*n);
            }
            let d = outcome.decision();
            assert_eq!(
                (d.is_allowed(), d.remaining()),
                (fits, limit - used),
                "{name} caller {i} (n = {n})"
            );
        }
        // Two calls sent at once, then one batch (retried once to load its script).
        let made = server.calls("evalsha") - before;
        assert!(made <= 4, "{name}: {made} script calls, not a batch");
    });
}

#[test]
fn a_batch_on_an_aligned_fixed_window_decides_exactly_as_sequential_calls() {
    // An aligned window no test run straddles (boundaries 50 years apart).
    let fifty_years = Duration::from_secs(50 * 365 * 86_400);
    let window = floodgate::FixedWindow::aligned(40, fifty_years).unwrap();
    batch_is_exact("review-aligned", window, 40);
}

#[test]
fn a_batch_on_a_sliding_window_decides_exactly_as_sequential_calls() {
    let window = floodgate::SlidingWindow::new(40, Duration::from_secs(600), 6).unwrap();
    batch_is_exact("review-sw", window, 40);
}
