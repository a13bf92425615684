//! `LeasedKey` with a caller that stops being polled: a caller whose request for a lease went
//! out and whose future is then kept but never polled again (a stream its consumer stopped
//! reading, a task on a runtime that nothing drives any more) must not hold up the key's other
//! callers while Redis answers (issue 18). And the other side of that: a `release` that waits
//! for other callers' calls gives up at its own deadline, with `ReleaseError::Busy`.
#![cfg(feature = "redis")]

#[path = "support/poll_once.rs"]
mod poll_once;
#[path = "redis/server.rs"]
mod server;

use std::sync::Arc;
use std::time::Duration;

use floodgate::backend::FailurePolicy;
use floodgate::redis::{
    LeaseCounts, LeasedKey, RedisBackend, RedisConfig, RedisLimiter, ReleaseError,
};
use floodgate::{Gcra, ManualClock, Rate};
use poll_once::poll_once;
use server::RedisServer;

/// The backend's timeout: a live server's answer never misses it, however loaded the machine;
/// a caller held up by the stalled one waits for all of it.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The real-time bound on the later calls, well under [`TIMEOUT`]: only a caller held up
/// until its timeout reaches it.
const HANG: Duration = Duration::from_secs(10);
/// Calls made on the key after the stalled one.
const LATER: usize = 12;

/// A current-thread runtime, as sync code calling async code keeps one per thread.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Redis holds for "k" exactly what `counts` says was served plus what the key holds: the rest
/// of the 100 is admitted in one call, and nothing after it.
fn redis_holds_the_rest(limiter: &RedisLimiter<Gcra, ManualClock>, counts: &LeaseCounts) {
    let left = 100 - counts.served() - counts.held;
    let rest = limiter.blocking_try_acquire("k", left as u32).unwrap();
    assert!(rest.is_allowed(), "{left} left: {rest:?}");
    assert!(!limiter.blocking_try_acquire("k", 1).unwrap().is_allowed());
}

/// A fail-closed GCRA limiter of 1 permit an hour with a burst of 100 (nothing refills during
/// the test) on a clock that never moves (no lease expires), its scripts loaded and the server's
/// clock known (a lease taken and given back on key "warm").
fn warm_limiter(server: &RedisServer) -> Arc<RedisLimiter<Gcra, ManualClock>> {
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::blocking_connect(config).unwrap();
    let gcra = Gcra::new(Rate::per_hour(1), 100).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, "stall", gcra, policy, ManualClock::new());
    let limiter = Arc::new(limiter.unwrap());
    let warm = LeasedKey::new(Arc::clone(&limiter), "warm");
    assert!(warm.blocking_try_acquire(1).unwrap().is_allowed());
    limiter
}

/// A caller is polled until its request for a lease is out (Redis frozen meanwhile, so that the
/// reply cannot come back within that poll), then kept but never polled again. Redis answers
/// it. Every later call on the key is then answered promptly, and allowed: the stalled caller's
/// lease is served to them (not left unpublished behind it), and the next lease asked for.
/// Before, each later call waited for the stalled caller's hold on the key's refill until its
/// own timeout, and was denied by the policy with a timeout.
///
/// Then the stalled caller, polled again, gets its own permit, from the lease its request took;
/// no permit was taken twice or lost (the counts add up, and Redis holds exactly what was
/// served plus what the key still holds).
#[test]
fn a_caller_never_polled_after_its_lease_request_went_out_does_not_hold_up_the_others() {
    let server = RedisServer::start();
    let limiter = warm_limiter(&server);
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");

    let idle = current_thread();
    let before = server.calls("evalsha");
    server.freeze();
    let mut stalled = Box::pin(leased.try_acquire_outcome(1));
    assert!(poll_once(&idle, &mut stalled), "its lease request is out");
    server.thaw();
    // Its request reached Redis (and was answered): it is no longer out at the server.
    server.wait_for_calls("evalsha", before + 1);

    let busy = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let later = busy.block_on(async {
        let calls = async {
            let mut outcomes = Vec::new();
            for _ in 0..LATER {
                outcomes.push(leased.try_acquire_outcome(1).await.unwrap());
            }
            outcomes
        };
        tokio::time::timeout(HANG, calls).await
    });
    let later = later.unwrap_or_else(|_| {
        panic!("{LATER} calls after the stalled one not answered within {HANG:?}, Redis up")
    });
    for (i, outcome) in later.iter().enumerate() {
        assert!(
            outcome.failure().is_none() && outcome.decision().is_allowed(),
            "Redis is up, yet call {i} after the stalled one got {outcome:?}"
        );
    }

    // The stalled caller, polled again, gets the permit its lease request took.
    let own = busy.block_on(async { tokio::time::timeout(HANG, stalled).await });
    let own = own
        .expect("the stalled caller, polled again, hung")
        .unwrap();
    assert!(
        own.failure().is_none() && own.decision().is_allowed(),
        "{own:?}"
    );
    let counts = leased.counts();
    assert_eq!(counts.served(), 1 + LATER as u64, "{counts:?}");
    assert_eq!((counts.refunded, counts.stranded), (0, 0), "{counts:?}");
    // Redis holds what was served and what the key holds: 100 − served − held left.
    redis_holds_the_rest(&limiter, &counts);
    drop(idle);
}

/// As above, but the stalled caller is dropped once another caller has taken in its reply:
/// its request's permit (1) was taken from the limit with its lease, and goes to no one (as
/// documented: at most the request's `n` per such refill), counted among the leased permits
/// served; the rest of its lease was served to the others. Nothing else is lost: Redis holds
/// exactly what the counts say was served (the dropped caller's permit among them) plus what
/// the key holds.
#[test]
fn a_stalled_caller_dropped_after_its_reply_was_taken_in_loses_only_its_own_permits() {
    let server = RedisServer::start();
    let limiter = warm_limiter(&server);
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");

    let idle = current_thread();
    let before = server.calls("evalsha");
    server.freeze();
    let mut stalled = Box::pin(leased.try_acquire_outcome(1));
    assert!(poll_once(&idle, &mut stalled), "its lease request is out");
    server.thaw();
    server.wait_for_calls("evalsha", before + 1);

    let busy = current_thread();
    let later =
        busy.block_on(async { tokio::time::timeout(HANG, leased.try_acquire_outcome(1)).await });
    let later = later.expect("the call after the stalled one hung").unwrap();
    assert!(
        later.failure().is_none() && later.decision().is_allowed(),
        "{later:?}"
    );
    let counts = leased.counts();
    assert_eq!(
        (counts.leases, counts.leased, counts.held),
        (1, 8, 6),
        "the stalled caller's lease, published and served once: {counts:?}"
    );
    drop(stalled);
    assert_eq!(
        counts.served(),
        2,
        "the dropped caller's 1 and the later call's 1"
    );
    redis_holds_the_rest(&limiter, &counts);
    drop(idle);
}

/// A caller polled until its request for a lease is out (Redis frozen) on a runtime that is
/// then shut down (a thread's current-thread runtime dropped with the thread), its future
/// kept. The calls' deadline timer was armed on that runtime. The key's next caller polls the
/// calls while Redis is still frozen: it must neither panic (a timer of a runtime that shut
/// down panics when polled, and a `Shared` future that panicked panics for every later poller)
/// nor hang: once Redis answers it is served, as are the calls after it. Before the fix, that
/// caller's first poll panicked ("A Tokio 1.x context was found, but it is being shutdown"),
/// and every later call on the key with it ("inner future panicked during poll") while the
/// stalled future was kept.
#[test]
fn a_caller_stalled_on_a_runtime_that_shut_down_does_not_make_the_others_panic() {
    let server = RedisServer::start();
    let limiter = warm_limiter(&server);
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");

    let gone = current_thread();
    let before = server.calls("evalsha");
    server.freeze();
    let mut stalled = Box::pin(leased.try_acquire_outcome(1));
    assert!(poll_once(&gone, &mut stalled), "its lease request is out");
    drop(gone);

    let busy = current_thread();
    let mut next = Box::pin(leased.try_acquire_outcome(1));
    // Redis still frozen: the next caller polls the calls' timer too.
    let first =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| poll_once(&busy, &mut next)));
    server.thaw();
    assert!(
        matches!(first, Ok(true)),
        "the next caller's first poll, Redis frozen, panicked or was answered"
    );
    server.wait_for_calls("evalsha", before + 1);
    let next = busy.block_on(async { tokio::time::timeout(HANG, next).await });
    let next = next.expect("the next caller hung, Redis up").unwrap();
    assert!(
        next.failure().is_none() && next.decision().is_allowed(),
        "{next:?}"
    );
    let later = busy.block_on(async {
        tokio::time::timeout(HANG, async {
            let mut outcomes = Vec::new();
            for _ in 0..LATER {
                outcomes.push(leased.try_acquire_outcome(1).await.unwrap());
            }
            outcomes
        })
        .await
    });
    for outcome in later.expect("later calls hung, Redis up") {
        assert!(
            outcome.failure().is_none() && outcome.decision().is_allowed(),
            "{outcome:?}"
        );
    }
    let own = busy.block_on(async { tokio::time::timeout(HANG, stalled).await });
    let own = own
        .expect("the stalled caller, polled again, hung")
        .unwrap();
    assert!(
        own.failure().is_none() && own.decision().is_allowed(),
        "{own:?}"
    );
    let counts = leased.counts();
    assert_eq!(counts.served(), 2 + LATER as u64, "{counts:?}");
}

/// The backend's timeout of the `Busy` tests below: their `release` waits all of it; the steps
/// before that wait must take less (a frozen server thawed and frozen again, one reply taken
/// in): 5 s is a hundred times what they take.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// `ReleaseError::Busy` at its deadline: a `release` that waits for another caller's calls
/// and finds, when they end, the calls of a refill that began after it, still out on a frozen
/// server; those end at their own deadline, after this `release`'s (their caller started
/// later), so it gives up at its deadline having sent nothing: `Busy`, counted in
/// `busy_releases` (not a failure), the lease's refund untouched.
///
/// The order, each step a poll, no sleep: a first `release` sends the lease's refund (the
/// server frozen); a second `release` waits for it; the server runs the refund and is frozen
/// again; a refill takes the reply in and sends its own request for a lease; the second
/// `release`, polled again, finds the refill's calls out.
#[test]
fn a_release_whose_deadline_passes_behind_a_later_refill_is_busy() {
    release_behind_a_later_refill(Polled::Throughout);
}

/// As above, but the second `release` is not polled again until the refill's calls have
/// ended (at the refill's deadline, after the `release`'s): as a thread that ran late (a
/// loaded machine) finds them. Its deadline passed while they were out: `Busy`, nothing sent,
/// all the same. Before, it took their end in as if it came in time and went on past its
/// deadline (no lease left: `Ok(0)`; a lease left: a refund sent with no time left, a
/// timeout counted as a failure), and the test above failed whenever its thread was not
/// run between the two deadlines (about 60 ms apart: the `INFO`s and signals between the
/// two first polls).
#[test]
fn a_release_first_polled_after_its_deadline_behind_a_later_refill_is_busy() {
    release_behind_a_later_refill(Polled::AfterTheRefillsEnd);
}

/// When the second `release` of [`release_behind_a_later_refill`] is polled again.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Polled {
    /// Until its end, from the moment the refill's calls are out.
    Throughout,
    /// Only once the refill's calls ended at their deadline (the server still frozen).
    AfterTheRefillsEnd,
}

fn release_behind_a_later_refill(polled: Polled) {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(BUSY_TIMEOUT);
    let backend = RedisBackend::blocking_connect(config).unwrap();
    let gcra = Gcra::new(Rate::per_hour(1), 100).unwrap();
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, "busy", gcra, policy, ManualClock::new());
    let limiter = Arc::new(limiter.unwrap());
    // The scripts loaded (a lease's and a refund's): each call below is one `EVALSHA`.
    let warm = LeasedKey::new(Arc::clone(&limiter), "warm");
    assert!(warm.blocking_try_acquire(1).unwrap().is_allowed());
    assert!(current_thread().block_on(warm.release()).unwrap() > 0);
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    assert!(leased.blocking_try_acquire(1).unwrap().is_allowed());
    let held = leased.counts().held;
    assert!(held > 0, "a lease with permits to give back");

    let (first_runtime, second_runtime, refill_runtime) =
        (current_thread(), current_thread(), current_thread());
    let before = server.calls("evalsha");
    server.freeze();
    let mut first = Box::pin(leased.release());
    assert!(poll_once(&first_runtime, &mut first), "its refund is out");
    let mut second = Box::pin(leased.release());
    assert!(
        poll_once(&second_runtime, &mut second),
        "it waits for the refund"
    );
    server.thaw();
    server.wait_for_calls("evalsha", before + 1); // the refund ran
    let refunded = server.calls("evalsha");
    server.freeze();

    // A refill, first polled now (its deadline a thaw, a freeze and a few `INFO`s after the
    // second `release`'s, not microseconds: at the second `release`'s deadline its calls
    // must still be out, not timing out on the same tick of the timer), takes the refund's
    // reply in (when it comes back), then sends its own request.
    let mut refill = Box::pin(leased.try_acquire_outcome(1));
    let took_in = refill_runtime.block_on(async {
        let took_in = std::future::poll_fn(|cx| match refill.as_mut().poll(cx) {
            std::task::Poll::Ready(outcome) => panic!("answered, the server frozen: {outcome:?}"),
            std::task::Poll::Pending if leased.counts().refunded > 0 => std::task::Poll::Ready(()),
            std::task::Poll::Pending => std::task::Poll::Pending,
        });
        tokio::time::timeout(HANG, took_in).await
    });
    took_in.expect("the refund's reply never came back");
    assert_eq!(leased.counts().refunded, held, "{:?}", leased.counts());

    // The refill's own end: now (at its deadline, the server frozen: a timeout decided by the
    // policy, one failure), or once thawed, below.
    let mut refill_failures = 0;
    let mut refill = Some(refill);
    if polled == Polled::AfterTheRefillsEnd {
        let late = refill.take().unwrap();
        let own = refill_runtime
            .block_on(async { tokio::time::timeout(BUSY_TIMEOUT + HANG, late).await });
        let own = own
            .expect("the refill waited past its deadline (hung)")
            .unwrap();
        let failure = own.failure().expect("the server frozen past its deadline");
        assert!(
            failure.is_timeout() && !own.decision().is_allowed(),
            "{own:?}"
        );
        refill_failures = 1;
    }

    let released = second_runtime
        .block_on(async { tokio::time::timeout(BUSY_TIMEOUT + HANG, second.as_mut()).await });
    let error = match released.expect("release waited past its deadline (hung)") {
        Err(ReleaseError::Busy { error }) => error,
        other => panic!("not Busy: {other:?}"),
    };
    assert!(error.is_timeout(), "{error}");
    assert!(
        error
            .to_string()
            .contains("another caller held this key's lease"),
        "{error}"
    );
    let counts = leased.counts();
    assert_eq!(
        (counts.busy_releases, counts.refunded, counts.stranded),
        (1, held, 0),
        "{counts:?}"
    );
    assert_eq!(
        limiter.failures().total(),
        refill_failures,
        "Busy is no failure"
    );

    // Thawed: the refill's request runs (the busy `release` sent nothing: one call since the
    // refund, the refill's). It is taken, or, run past the refill's own deadline (which is
    // close), refused: nothing taken, a timeout decided by the policy. The first `release`
    // gets the permits its refund gave back.
    server.thaw();
    if let Some(refill) = refill {
        let own = refill_runtime.block_on(async { tokio::time::timeout(HANG, refill).await });
        let own = own.expect("the refill hung, Redis up").unwrap();
        match own.failure() {
            None => assert!(own.decision().is_allowed(), "{own:?}"),
            Some(error) => assert!(
                error.is_timeout() && !own.decision().is_allowed(),
                "{own:?}"
            ),
        }
    }
    server.wait_for_calls("evalsha", refunded + 1);
    assert_eq!(server.calls("evalsha"), refunded + 1);
    let first = first_runtime.block_on(async { tokio::time::timeout(HANG, first).await });
    assert_eq!(first.expect("the first release hung").unwrap(), held);
    redis_holds_the_rest(&limiter, &leased.counts());
}
