//! `LeasedKey` calls to Redis never go out past their deadline (issue 18): a refill's request
//! for a lease polled after its caller's deadline sends nothing, a refund is not sent with less
//! than the least time a call is given (`LeasedKey::min_call_time`), and a `release` behind a
//! stalled breaker probe polls it once instead of reporting `Busy` at once. Each test starts its
//! own `redis-server`; clocks are manual; real time only bounds a hang, and the one wait for a
//! deadline to pass is a call to a frozen server timing out.
#![cfg(feature = "redis")]

#[path = "support/poll_once.rs"]
mod poll_once;
#[path = "redis/server.rs"]
mod server;
#[path = "redis/taken.rs"]
mod taken;

use std::sync::Arc;
use std::time::Duration;

use floodgate::backend::{BreakerConfig, BreakerState, FailurePolicy, Outcome};
use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter, ReleaseError};
use floodgate::{Gcra, ManualClock, Rate};
use poll_once::poll_once;
use server::RedisServer;
use taken::taken;

/// The backend's timeout: a call to a frozen server must time out, and a live one's answer
/// never miss it (2 s, as the other lease tests': a loaded machine can delay a live answer past
/// a second). The least time a call is sent with is a sixteenth of it, 125 ms: far more than
/// the few steps between two callers' first polls below.
const TIMEOUT: Duration = Duration::from_secs(2);
/// How long a step may take before the test calls it a hang.
const HANG: Duration = Duration::from_secs(60);

/// GCRA of 1 permit an hour with a burst of 100: no permit comes back during a test.
fn hourly_gcra() -> Gcra {
    Gcra::new(Rate::per_hour(1), 100).unwrap()
}

/// A current-thread runtime, as sync code calling async code keeps one per thread.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A limiter on `backend` with no breaker, for calls that must not touch the tested limiter's
/// breaker or counts: a call answered after another call's request (the same connection
/// answers in order), or one that times out on a frozen server.
fn bystander(backend: &RedisBackend) -> RedisLimiter<Gcra> {
    let limiter = RedisLimiter::new(backend, "bystander", hourly_gcra(), FailurePolicy::FailOpen);
    limiter.unwrap().with_breaker(None)
}

/// A refill whose old lease has unserved permits gives them back first, then asks for a new
/// lease, both within its one deadline. Here its caller is polled until the refund is out, then
/// not again (its future kept); the refund lands, and its reply waits for a poller. The next
/// caller polls the calls only after the first caller's deadline has passed (a loaded machine,
/// a runtime busy elsewhere). The request for a lease would then go out with no time left: the
/// script refuses it as late (or, with no server-clock deadline, grants a lease nobody
/// receives), its timeout is told to the breaker (opening it here: one failure opens it) and
/// becomes the key's failure, so the next caller is denied by the policy though Redis is up.
/// Polled past its deadline, the request sends nothing, is decided as a timeout that says so,
/// not told to the breaker, and is not the key's failure: the next caller takes its own lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_request_polled_after_its_deadline_is_not_sent() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let policy = FailurePolicy::FailClosed;
    let one = BreakerConfig::new(1, Duration::from_secs(60), Duration::from_secs(60)).unwrap();
    let limiter =
        RedisLimiter::with_clock(&backend, "late", hourly_gcra(), policy, ManualClock::new());
    let limiter = Arc::new(limiter.unwrap().with_breaker(Some(one)));
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    // The lease and refund scripts loaded (a stalled call's `NOSCRIPT` would need another
    // poll), then a lease holding 7.
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.release().await.unwrap(), 7);
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);
    let bystander = bystander(&backend);

    // Caller A asks for 8: its refill gives the 7 back, then would ask for a lease. Polled once
    // (Redis frozen, so that no reply comes within that poll): the refund is out.
    let idle = current_thread();
    let mut a = Box::pin(leased.try_acquire_outcome(8));
    server.freeze();
    let pending = std::thread::scope(|s| s.spawn(|| poll_once(&idle, &mut a)).join().unwrap());
    server.thaw();
    assert!(pending, "A's refund is out");
    // A call on the same connection after the refund's: once it is answered, so is the refund.
    let flushed = bystander.try_acquire_outcome("x", 1).await.unwrap();
    assert!(flushed.failure().is_none(), "{flushed:?}");

    // A's deadline passes, nothing polling its calls: a call made after A's, with the same
    // timeout, times out on the frozen server (its deadline is later than A's).
    let ran = server.calls("evalsha");
    server.freeze();
    let waited = bystander.try_acquire_outcome("y", 1).await.unwrap();
    server.thaw();
    assert!(
        waited.failure().is_some_and(|e| e.is_timeout()),
        "{waited:?}"
    );
    server.wait_for_calls("evalsha", ran + 1); // the late copy, refused when thawed
    let before = server.calls("evalsha");

    // Caller B finds A's calls out (the breaker closed) and polls them: A's refund's reply is
    // taken in; A's request for a lease, past A's deadline, is not sent. B then takes its own.
    let b = tokio::time::timeout(HANG, leased.try_acquire_outcome(1)).await;
    let b = b.expect("B hung, Redis up").unwrap();
    let breaker = limiter.breaker().unwrap().shared();
    assert_eq!(
        breaker.state(),
        BreakerState::Closed,
        "a request not sent told the breaker of a failure: B {b:?}"
    );
    assert!(
        b.failure().is_none() && b.decision().is_allowed(),
        "Redis is up, yet B got {b:?}"
    );
    assert_eq!(
        server.calls("evalsha"),
        before + 1,
        "B's request for a lease only: A's was sent past its deadline"
    );

    // A, polled again: a timeout saying nothing was sent, decided by the policy (fail closed).
    let a = tokio::time::timeout(HANG, a).await;
    let a = a.expect("A, polled again, hung").unwrap();
    let error = a.failure().expect("A's deadline passed");
    assert!(error.is_timeout() && !a.decision().is_allowed(), "{a:?}");
    assert!(error.to_string().contains("not sent"), "{error}");
    idle_runtime(idle);

    // Nothing lost or counted twice: the two refunds of 7 landed, and Redis holds exactly what
    // was served and what the key holds.
    let counts = leased.counts();
    assert_eq!(
        (counts.refunded, counts.stranded, counts.failed_refunds),
        (14, 0, 0),
        "{counts:?}"
    );
    assert_eq!(
        counts.served(),
        3,
        "the warm-up's 1, the lease's 1, B's 1: {counts:?}"
    );
    assert_eq!(
        taken(&limiter).await,
        counts.served() + counts.held,
        "{counts:?}"
    );
}

/// Drops `runtime` on a thread of its own (a runtime cannot be dropped inside another).
fn idle_runtime(runtime: tokio::runtime::Runtime) {
    std::thread::spawn(move || drop(runtime)).join().unwrap();
}

/// The second call of [`behind_a_refund_out_until_its_deadline`].
#[derive(Clone, Copy)]
enum Second {
    /// A request of 1 (the key holds no lease: a refill).
    Refill,
    /// A second `release`.
    Release,
    /// A request of 1 under fail-open, the key's bucket drained first and a denial of 1 by
    /// Redis in the limiter's deny cache (a refill).
    DeniedRefill,
}

/// What the second call returned.
#[derive(Debug)]
enum Returned {
    Refill(Outcome),
    Release(Result<u64, ReleaseError>),
}

/// What [`behind_a_refund_out_until_its_deadline`] hands its test.
struct Behind {
    server: RedisServer,
    leased: LeasedKey<Gcra, ManualClock>,
    second: Returned,
    /// `EVALSHA` calls the server had run before the first `release`.
    before: u64,
    /// The same Redis key's limiter without a deny cache, to ask Redis what it took.
    probe: RedisLimiter<Gcra>,
    /// What the per-call requests that drained the bucket took (`Second::DeniedRefill`).
    drained: u64,
}

/// A key holding 7 gives them back with a first `release`, Redis frozen: its refund is out
/// until the release's deadline (and then times out: kept, to be sent again). A `second` call,
/// first polled just after the `release`'s (microseconds later), waits for the refund's call,
/// polling it; it ends at the `release`'s deadline, leaving the second call only the
/// microseconds between the two first polls (or none) of its own. Returns once the second call
/// is done and the first `release` has returned, Redis thawed.
fn behind_a_refund_out_until_its_deadline(second: Second) -> Behind {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::blocking_connect(config).unwrap();
    let policy = match second {
        Second::DeniedRefill => FailurePolicy::FailOpen,
        Second::Refill | Second::Release => FailurePolicy::FailClosed,
    };
    let clock = ManualClock::new();
    let limiter = RedisLimiter::with_clock(&backend, "near", hourly_gcra(), policy, clock);
    let probe = RedisLimiter::new(&backend, "near", hourly_gcra(), FailurePolicy::FailClosed);
    let probe = probe.unwrap().with_deny_cache(None).unwrap();
    let limiter = Arc::new(limiter.unwrap());
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    let (first_runtime, second_runtime) = (current_thread(), current_thread());
    // The scripts loaded, then a lease holding 7.
    assert!(leased.blocking_try_acquire(1).unwrap().is_allowed());
    assert_eq!(first_runtime.block_on(leased.release()).unwrap(), 7);
    let mut drained = 0;
    if let Second::DeniedRefill = second {
        // Per-call requests take all but the next lease's 8 (before it: taken after the lease,
        // they would move the key past the word the lease's refund must find).
        let left = limiter.blocking_try_acquire("k", 100).unwrap();
        assert!(!left.is_allowed(), "{left:?}");
        drained = left.remaining() - 8;
        let rest = u32::try_from(drained).unwrap();
        assert!(
            limiter
                .blocking_try_acquire("k", rest)
                .unwrap()
                .is_allowed()
        );
    }
    assert!(leased.blocking_try_acquire(1).unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);
    if let Second::DeniedRefill = second {
        // Redis denies a per-call request of 1 (a denial writes nothing: the lease's word
        // stays), and the deny cache keeps the denial (the manual clock never moves).
        assert!(!limiter.blocking_try_acquire("k", 1).unwrap().is_allowed());
    }

    let before = server.calls("evalsha");
    server.freeze();
    let mut first = Box::pin(leased.release());
    assert!(poll_once(&first_runtime, &mut first), "its refund is out");
    let returned = second_runtime.block_on(async {
        let bound = TIMEOUT + HANG;
        match second {
            Second::Refill | Second::DeniedRefill => {
                tokio::time::timeout(bound, leased.try_acquire_outcome(1))
                    .await
                    .map(|outcome| Returned::Refill(outcome.unwrap()))
            }
            Second::Release => tokio::time::timeout(bound, leased.release())
                .await
                .map(Returned::Release),
        }
    });
    let returned = returned.expect("the second call waited past its deadline (hung)");
    server.thaw();
    let first = first_runtime.block_on(async { tokio::time::timeout(HANG, first).await });
    let first = first.expect("the first release hung");
    assert!(
        matches!(&first, Err(ReleaseError::Refund { permits: 7, error }) if error.is_timeout()),
        "the first release's refund timed out, Redis frozen: {first:?}"
    );
    drop((first_runtime, second_runtime));
    Behind {
        server,
        leased,
        second: returned,
        before,
        probe,
        drained,
    }
}

/// The kept refund, sent again by a `release` once Redis answers, lands (the first release's
/// copy reached Redis after its deadline and was refused as late): counted once, nothing lost.
fn the_kept_refund_lands_once(behind: &Behind) {
    let Behind {
        server,
        leased,
        before,
        probe,
        drained,
        ..
    } = behind;
    server.wait_for_calls("evalsha", before + 1);
    assert_eq!(
        server.calls("evalsha"),
        before + 1,
        "the first release's refund only: the second call sent one with no time left"
    );
    let runtime = current_thread();
    assert_eq!(runtime.block_on(leased.release()).unwrap(), 7);
    let counts = leased.counts();
    assert_eq!(
        (
            counts.refunded,
            counts.stranded,
            counts.failed_refunds,
            counts.resent_refunds,
            counts.given_up_refunds
        ),
        (14, 0, 1, 1, 0),
        "{counts:?}"
    );
    let taken = runtime.block_on(taken(probe));
    assert_eq!(taken, counts.served() + counts.held + drained, "{counts:?}");
}

/// A refill behind the refund's call (above) has microseconds left when it ends, or none: it
/// used to send the kept refund again with half of them (and then no request: decided by the
/// refund's failure), a call sure to time out, counted as a second failed refund (and, had
/// Redis answered, possibly applied after its caller gave up). With less than twice the least
/// time a call is sent with (the refund gets half), it sends nothing: a timeout saying so,
/// decided by the policy, the refund kept as it was.
#[test]
fn a_refill_left_microseconds_behind_a_refund_sends_nothing() {
    let behind = behind_a_refund_out_until_its_deadline(Second::Refill);
    let Returned::Refill(outcome) = &behind.second else {
        unreachable!()
    };
    let error = outcome.failure().expect("no time left for a call");
    assert!(
        error.is_timeout() && !outcome.decision().is_allowed(),
        "{outcome:?}"
    );
    assert_eq!(
        behind.leased.counts().failed_refunds,
        1,
        "the refill sent the kept refund again with (almost) no time left: {outcome:?}, {:?}",
        behind.leased.counts()
    );
    assert!(error.to_string().contains("not sent"), "{error}");
    the_kept_refund_lands_once(&behind);
}

/// As above, a second `release`: it used to send the kept refund with the microseconds left
/// (`ReleaseError::Refund`, a timeout, a second failed refund), or, with none left, report
/// `Busy`. With less than the least time a call is sent with left, it sends nothing: `Busy`
/// (another caller held the lease until then), the refund kept as it was.
#[test]
fn a_release_left_microseconds_behind_a_refund_is_busy() {
    let behind = behind_a_refund_out_until_its_deadline(Second::Release);
    match &behind.second {
        Returned::Release(Err(ReleaseError::Busy { error })) => {
            assert!(error.is_timeout(), "{error}")
        }
        other => panic!("not Busy: {other:?}, {:?}", behind.leased.counts()),
    }
    let counts = behind.leased.counts();
    assert_eq!(
        (counts.busy_releases, counts.failed_refunds),
        (1, 1),
        "{counts:?}"
    );
    the_kept_refund_lands_once(&behind);
}

/// The breaker opened (one failure opens it), and its probe is due: caller A's refill sends its
/// request for a lease as the probe, and A is then never polled again (its future kept). Redis
/// answers. A `release` finding A's calls out while the breaker is not closed used to return
/// `Busy` at once without polling them, as long as A stayed stalled (the probe never reported:
/// the breaker half-open until it presumes the probe lost). It now polls them once, as a
/// refill's caller behind a kept refund does: the reply is taken in (the lease published, the
/// breaker closed), and the `release` gives the lease's unserved permits back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_behind_a_stalled_probe_polls_it_and_is_not_busy() {
    behind_a_stalled_probe(Finder::Release).await;
}

/// As above, but the caller finding the stalled probe's calls out is a refill (the key holds no
/// lease, and no refund is kept): it used to go straight to the limiter's per-call decision,
/// which the half-open breaker short-circuits while its probe is out (under fail-closed, a
/// denial), as long as the prober stayed stalled, though the probe's reply (a lease) was
/// waiting to be taken in. It now polls the calls once, as a `release` and a refill behind a
/// kept refund do: the reply is taken in (the lease published, the breaker closed), and the
/// refill is served from that lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refill_behind_a_stalled_probe_polls_it_and_is_served() {
    behind_a_stalled_probe(Finder::Refill).await;
}

/// Who finds the stalled probe's calls out, in [`behind_a_stalled_probe`].
enum Finder {
    /// A `release`.
    Release,
    /// Caller B, whose request needs a refill.
    Refill,
}

/// The history of the two tests above: the breaker opened, A's request for a lease sent as its
/// probe and A never polled again, Redis's answer waiting; then `finder` finds A's calls out,
/// must take the answer in (the breaker closed), and A, polled again, gets its permit. Nothing
/// lost or counted twice: Redis holds what was served and what the key holds.
async fn behind_a_stalled_probe(finder: Finder) {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let clock = ManualClock::new();
    let policy = FailurePolicy::FailClosed;
    let one = BreakerConfig::new(1, Duration::from_secs(60), Duration::from_secs(60)).unwrap();
    let limiter = RedisLimiter::with_clock(&backend, "probe", hourly_gcra(), policy, clock.clone());
    let limiter = Arc::new(limiter.unwrap().with_breaker(Some(one)));
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    // The scripts loaded; the key holds no lease (and keeps no refund).
    assert!(leased.try_acquire(1).await.unwrap().is_allowed());
    assert_eq!(leased.release().await.unwrap(), 7);

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

    // The probe is due: A's request for a lease is the probe, and A is never polled again.
    clock.advance(Duration::from_secs(61));
    let idle = current_thread();
    let mut a = Box::pin(leased.try_acquire_outcome(1));
    server.freeze();
    let pending = std::thread::scope(|s| s.spawn(|| poll_once(&idle, &mut a)).join().unwrap());
    server.thaw();
    assert!(pending, "A's request is out");
    assert_eq!(
        breaker.state(),
        BreakerState::HalfOpen,
        "A's request is the probe"
    );
    // A call on the same connection after A's request: once it is answered, so is A's.
    let flushed = bystander(&backend)
        .try_acquire_outcome("x", 1)
        .await
        .unwrap();
    assert!(flushed.failure().is_none(), "{flushed:?}");

    match finder {
        Finder::Release => {
            let released = tokio::time::timeout(HANG, leased.release()).await;
            let released = released.expect("the release hung, Redis up");
            let counts = leased.counts();
            assert_eq!(
                released.as_ref().ok(),
                Some(&7),
                "the release did not take A's reply in: {released:?}, {counts:?}"
            );
            assert_eq!(breaker.state(), BreakerState::Closed);
            assert_eq!(
                (
                    counts.busy_releases,
                    counts.refunded,
                    counts.stranded,
                    counts.held
                ),
                (0, 14, 0, 0),
                "{counts:?}"
            );
        }
        Finder::Refill => {
            let before = server.calls("evalsha");

            // B needs a refill: it finds A's calls out, the breaker half-open, no refund kept.
            let b = tokio::time::timeout(HANG, leased.try_acquire_outcome(1)).await;
            let b = b.expect("B hung, Redis up").unwrap();
            let counts = leased.counts();
            assert!(
                b.failure().is_none() && b.decision().is_allowed(),
                "B did not take A's reply in: {b:?}, {counts:?}"
            );
            assert_eq!(breaker.state(), BreakerState::Closed);
            assert_eq!(
                server.calls("evalsha"),
                before,
                "B was served from A's lease: no call of its own"
            );
        }
    }

    // A, polled again, gets the permit its request took.
    let a = tokio::time::timeout(HANG, a).await;
    let a = a.expect("A, polled again, hung").unwrap();
    assert!(a.failure().is_none() && a.decision().is_allowed(), "{a:?}");
    idle_runtime(idle);
    let counts = leased.counts();
    assert_eq!(
        taken(&limiter).await,
        counts.served() + counts.held,
        "{counts:?}"
    );
    match finder {
        Finder::Release => {
            assert_eq!(counts.served(), 2, "the warm-up's 1 and A's 1: {counts:?}")
        }
        Finder::Refill => {
            assert_eq!(
                counts.served(),
                3,
                "the warm-up's 1, A's 1, B's 1: {counts:?}"
            );
            assert_eq!(
                (counts.refunded, counts.stranded, counts.failed_refunds),
                (7, 0, 0),
                "{counts:?}"
            );
        }
    }
}

/// As [`a_refill_left_microseconds_behind_a_refund_sends_nothing`], under fail-open, with the
/// key's bucket drained and Redis's denial of 1 in the limiter's deny cache: the refill left
/// too little time to send anything was decided by the policy straight away, so fail-open
/// admitted it, though the deny cache (which answers a request before any call, and before the
/// breaker's short circuit) holds Redis's denial. A request not sent for want of time is
/// decided as one the breaker short-circuits: the deny cache first, then the policy.
#[test]
fn a_refill_left_no_time_asks_the_deny_cache_first() {
    let behind = behind_a_refund_out_until_its_deadline(Second::DeniedRefill);
    let Returned::Refill(outcome) = &behind.second else {
        unreachable!()
    };
    assert!(
        !outcome.decision().is_allowed() && outcome.failure().is_none(),
        "the deny cache holds Redis's denial, yet: {outcome:?}"
    );
    assert_eq!(behind.leased.counts().failed_refunds, 1, "{outcome:?}");
    the_kept_refund_lands_once(&behind);
}

/// A request whose deadline passes while it waits for another caller's refill (its calls still
/// out on a frozen server: they were made after this request, so their deadline is later) was
/// decided by the policy straight away: under fail-open it was admitted, though the deny cache
/// (which answers a request before any call) held Redis's denial of as many permits. Decided as
/// a request the breaker short-circuits now: the deny cache first, then the policy.
#[test]
fn a_request_waited_out_behind_a_refill_asks_the_deny_cache_first() {
    let server = RedisServer::start();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::blocking_connect(config).unwrap();
    let policy = FailurePolicy::FailOpen;
    let limiter = RedisLimiter::with_clock(
        &backend,
        "waited",
        hourly_gcra(),
        policy,
        ManualClock::new(),
    );
    let limiter = Arc::new(limiter.unwrap());
    let leased = LeasedKey::new(Arc::clone(&limiter), "k");
    let (first_runtime, second_runtime, refill_runtime) =
        (current_thread(), current_thread(), current_thread());
    // The scripts loaded, then a lease holding 7 (the budget Redis reported stays large: the
    // drain below is the plain limiter's, which the lease does not see).
    assert!(leased.blocking_try_acquire(1).unwrap().is_allowed());
    assert_eq!(first_runtime.block_on(leased.release()).unwrap(), 7);
    assert!(leased.blocking_try_acquire(1).unwrap().is_allowed());
    assert_eq!(leased.counts().held, 7);
    // Per-call requests leave 3; Redis then denies 5, and the deny cache keeps the denial
    // (the manual clock never moves): a request of 5 or more is denied without a call.
    let left = limiter.blocking_try_acquire("k", 100).unwrap();
    assert!(!left.is_allowed(), "{left:?}");
    let rest = u32::try_from(left.remaining() - 3).unwrap();
    assert!(
        limiter
            .blocking_try_acquire("k", rest)
            .unwrap()
            .is_allowed()
    );
    let five = limiter.blocking_try_acquire_outcome("k", 5).unwrap();
    assert!(
        five.failure().is_none() && !five.decision().is_allowed(),
        "{five:?}"
    );

    // A `release` sends the lease's 7 back (frozen; refused once thawed, the key moved past
    // the lease's word: stranded, which does not matter here); B, a request of 5, waits for it.
    let before = server.calls("evalsha");
    server.freeze();
    let mut first = Box::pin(leased.release());
    assert!(poll_once(&first_runtime, &mut first), "its refund is out");
    let mut b = Box::pin(leased.try_acquire_outcome(5));
    assert!(poll_once(&second_runtime, &mut b), "B waits for the refund");
    server.thaw();
    server.wait_for_calls("evalsha", before + 1); // the refund ran
    server.freeze();
    // C, a request of 1 first polled now (its deadline after B's), takes the refund's reply in
    // and sends its own request for a lease (1 is below the cached denial's 5).
    let mut c = Box::pin(leased.try_acquire_outcome(1));
    let took_in = refill_runtime.block_on(async {
        let took_in = std::future::poll_fn(|cx| match c.as_mut().poll(cx) {
            std::task::Poll::Ready(outcome) => panic!("answered, the server frozen: {outcome:?}"),
            std::task::Poll::Pending if settled(&leased) > 7 => std::task::Poll::Ready(()),
            std::task::Poll::Pending => std::task::Poll::Pending,
        });
        tokio::time::timeout(HANG, took_in).await
    });
    took_in.expect("the refund's reply never came back");

    // B, polled again, finds C's calls out and waits for them until its own deadline.
    let b = second_runtime.block_on(async { tokio::time::timeout(TIMEOUT + HANG, b).await });
    let b = b.expect("B waited past its deadline (hung)").unwrap();
    server.thaw();
    assert!(
        !b.decision().is_allowed() && b.failure().is_none(),
        "the deny cache holds Redis's denial of 5, yet B got {b:?}"
    );
    let c = refill_runtime.block_on(async { tokio::time::timeout(HANG, c).await });
    let c = c.expect("C hung, Redis up").unwrap();
    assert!(c.failure().is_none_or(|e| e.is_timeout()), "{c:?}");
    let first = first_runtime.block_on(async { tokio::time::timeout(HANG, first).await });
    // Its refund refused as stranded or landed, it returns (what it says is not this test's).
    let _released = first.expect("the first release hung");
    drop((first_runtime, second_runtime, refill_runtime));
}

/// The refunds whose reply was taken in: landed, or refused (stranded: the per-call requests
/// after the lease moved the key past its word).
fn settled(leased: &LeasedKey<Gcra, ManualClock>) -> u64 {
    let counts = leased.counts();
    counts.refunded + counts.stranded
}
