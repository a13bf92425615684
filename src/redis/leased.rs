//! [`LeasedKey`]: one key of a Redis GCRA limit, served locally from leases taken with one
//! script call each.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::{FutureExt as _, Shared, WeakShared};

use super::lua_script::LuaScript;
use super::refund_name::refund_name;
use super::release_error::ReleaseError;

use super::limiter::decision_from_reply;
use super::limiter::sealed::Script as _;
use super::{RedisAlgorithm, RedisLimiter};
use crate::algorithms::{Anchor, FixedWindow, Gcra};
use crate::backend::{BackendError, Excuse, FailureKind, Outcome, RequestError, until_deadline};
use crate::clock::{Clock, QuantaClock, duration_to_nanos};
use crate::decision::{ConfigError, Decision};
use crate::lease::{Lease, LeaseSlot};
use crate::sync::{AtomicU64, Ordering};
use std::sync::atomic::AtomicBool;

pub(super) static GCRA_LEASE: LazyLock<LuaScript> = lua_script!("exact.lua", "gcra_lease.lua");
pub(super) static GCRA_REFUND: LazyLock<LuaScript> = lua_script!("gcra_refund.lua");
pub(super) static WINDOW_LEASE: LazyLock<LuaScript> =
    lua_script!("exact.lua", "count.lua", "fixed_window_lease.lua");
pub(super) static ALIGNED_LEASE: LazyLock<LuaScript> = lua_script!(
    "exact.lua",
    "count.lua",
    "aligned.lua",
    "fixed_window_aligned_lease.lua"
);
pub(super) static ALIGNED_REFUND: LazyLock<LuaScript> =
    lua_script!("fixed_window_aligned_refund.lua");

pub(crate) mod sealed {
    /// What a leasing algorithm adds to its per-call script: its lease and refund scripts.
    /// Sealed, as the per-call scripts are.
    pub trait LeaseScript {
        /// Takes between `ARGV[3]` and `ARGV[4]` permits (the per-call `ARGV` otherwise);
        /// replies `{allowed, limit, remaining, retry_after_us, reset_after_us, granted,
        /// receipt0, receipt1, now_us}`.
        fn lease_script(&self) -> &'static crate::redis::lua_script::LuaScript;
        /// The refund script, `None` where a lease is never given back.
        fn refund_script(&self) -> Option<&'static crate::redis::lua_script::LuaScript>;
        /// `ARGV` of a refund of `unused` permits of a lease with `receipt`.
        fn refund_args(&self, receipt: [u64; 2], unused: u64) -> [u64; 4];
        /// Whether a lease also ends with the window that counted it (a grant's `reset_after`).
        fn ends_with_window(&self) -> bool;
    }
}

/// An algorithm whose Redis state can lend permits to a [`LeasedKey`]: [`Gcra`] (and so
/// [`TokenBucket`](crate::TokenBucket), [`LeakyBucket`](crate::LeakyBucket)) and
/// [`FixedWindow`]. Sealed.
///
/// ```
/// use floodgate::backend::FailurePolicy;
/// use floodgate::redis::{LeaseAlgorithm, LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
/// use floodgate::FixedWindow;
/// use std::{sync::Arc, time::Duration};
/// fn leased<A: LeaseAlgorithm>(limiter: RedisLimiter<A>, key: &str) -> LeasedKey<A> {
///     LeasedKey::new(Arc::new(limiter), key)
/// }
/// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
/// let window = FixedWindow::aligned(1_000, Duration::from_secs(1))?;
/// let limiter = RedisLimiter::new(&backend, "api", window, FailurePolicy::FailClosed)?;
/// assert_eq!(leased(limiter, "tenant-7").key(), "tenant-7");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait LeaseAlgorithm: RedisAlgorithm + sealed::LeaseScript {}

/// A lease advances the theoretical arrival time by its permits; a refund moves it back, only
/// from the exact time the lease wrote.
impl sealed::LeaseScript for Gcra {
    fn lease_script(&self) -> &'static crate::redis::lua_script::LuaScript {
        &GCRA_LEASE
    }

    fn refund_script(&self) -> Option<&'static crate::redis::lua_script::LuaScript> {
        Some(&GCRA_REFUND)
    }

    fn refund_args(&self, receipt: [u64; 2], unused: u64) -> [u64; 4] {
        // The interval per permit, as the per-call script gets it.
        [self.args(1)[0], receipt[0], unused, 0]
    }

    fn ends_with_window(&self) -> bool {
        false
    }
}

/// Leases from the token bucket family.
impl LeaseAlgorithm for Gcra {}

/// A lease is counted in the current window and ends with it. An aligned window's lease is
/// refunded only from the exact window index, count and stamp it wrote (the grant's server
/// time, kept in the hash: a hash lost and counted up again in the same window to the same
/// count has no stamp, or another lease's); an anchored window's is never refunded (a new
/// window's counter can reach the same count: its permits die with the window).
/// A refund by window index alone (whatever was counted since) would strand less, but it is
/// not idempotent (a refund re-sent after a lost reply, as the cluster client does, would lower
/// the count twice) and would land in a key lost and re-created in the same window: both
/// over-admit, where the exact refund can only under-admit (tried and reverted in session 29).
/// The exact refund alone was not idempotent either: a per-call decision leaves the stamp, so
/// one of as many permits as were refunded brings the hash back to the lease's own index,
/// count and stamp, where a re-sent copy landed again; each refund now marks its own name when
/// it lands, and a copy that finds the mark does not land.
impl sealed::LeaseScript for FixedWindow {
    fn lease_script(&self) -> &'static crate::redis::lua_script::LuaScript {
        match self.anchor() {
            Anchor::FirstRequest => &WINDOW_LEASE,
            Anchor::WallClock => &ALIGNED_LEASE,
        }
    }

    fn refund_script(&self) -> Option<&'static crate::redis::lua_script::LuaScript> {
        match self.anchor() {
            Anchor::FirstRequest => None,
            Anchor::WallClock => Some(&ALIGNED_REFUND),
        }
    }

    fn refund_args(&self, receipt: [u64; 2], unused: u64) -> [u64; 4] {
        // The lease's stamp and count, and the window in µs (as the per-call script gets it).
        [receipt[1], receipt[0], unused, self.args(1)[1]]
    }

    fn ends_with_window(&self) -> bool {
        true
    }
}

/// Leases from the fixed window (anchored or aligned).
impl LeaseAlgorithm for FixedWindow {}

/// The lease size a key starts with (at most the largest lease).
const INITIAL_LEASE: u32 = 8;
/// A lease is never more than this share of what the script last said was left.
const BUDGET_SHARE: u64 = 4;
/// No lease: nothing to serve or give back.
const NO_LEASE: Lease = Lease::new(0, 0, 0, Decision::allow(0, 0, 0));
/// A call to Redis is sent only with at least this share of the backend's timeout left to its
/// deadline (see [`LeasedKey::min_call_time`]).
const MIN_CALL_SHARE: u32 = 16;

/// One key of a [`RedisLimiter`] over [`Gcra`] (and so [`TokenBucket`](crate::TokenBucket),
/// [`LeakyBucket`](crate::LeakyBucket)) or [`FixedWindow`] (a [`LeaseAlgorithm`]) served from
/// **leases**: the process takes a batch of permits from the key's Redis state with one script
/// call, serves them locally (one compare-exchange on one word: no await, no round trip), and
/// gives back exactly what it does not use, or lets it expire.
///
/// The lease is taken from the same Redis key and state as the limiter's per-call decisions
/// (the bucket's theoretical arrival time, the window's count): leased and per-call callers, in
/// any number of processes, share one limit.
///
/// # How a call is decided
/// * **From the lease** when it has `n` permits and has not expired: one clock read and one
///   compare-exchange.
/// * Otherwise one caller (the others wait for its calls to Redis, polling them too: see
///   [Cancellation](Self#cancellation-and-callers-not-polled)) retires the lease, learning
///   exactly how many permits were not served, and asks
///   Redis, through the limiter's [`FailurePolicy`](crate::backend::FailurePolicy), circuit
///   breaker and deny cache, for a new lease of between `n` and the lease size permits, as
///   many as fit (one script call, `*_lease.lua`). Unserved permits of the old lease (it
///   expired, or held fewer than `n`) are given back first (a second script, `*_refund.lua`,
///   given at most half of the call's time: see below), exactly or not at all: only
///   when the key still holds the word the old lease wrote (nothing was decided on the key
///   since) is the bucket's time moved back, or the aligned window's count lowered, by the
///   unused permits, leaving the key exactly as if the lease had been smaller. An anchored
///   window's lease is never given back (a later window's counter could hold the same
///   count): its permits die with its window.
/// * **A refund that fails is seen and sent again**: its failed call is reported to the key's
///   circuit breaker and counted in the limiter's [`failures`](RedisLimiter::failures), as
///   any call's; a refill whose refund failed is decided by that failure (through the policy),
///   without asking for a lease from the server that just failed. The refund is kept (one per
///   `LeasedKey`: a refund lands only on the word its lease wrote, so once a later lease is
///   granted an older refund can no longer land, and is given up) and sent again, under its
///   name, before the key's next refill or [`release`](Self::release): its permits come back
///   when Redis answers again, once however many of its copies reach the server (the refund
///   scripts keep each refund's mark until its lease's word, or window, can no longer be
///   found). One whose time has passed (the lease's `reset_after`, counted from the read
///   taken before its request) is given up unsent. A refund the breaker does not let out
///   (open, or its probe out) is kept the same way, and the refill's request is decided by
///   that short circuit (through the policy): a request sent past a kept refund (the
///   breaker's probe falling due between the two) would move the key past the refund's word
///   and strand it. While one is kept, a call near the limit (below) goes through the owner,
///   which sends the refund first.
/// * **Within one timeout**: a call that must ask Redis returns within the backend's
///   [timeout](super::RedisConfig::timeout) from its start, whatever the others do: the wait
///   for the owner, the refund and the lease request share that one deadline. A caller whose
///   deadline passes while another caller's refill is out gets a timeout, and one that waited
///   through a refill that failed gets that refill's failure, both decided by the policy
///   (without a call of its own). While the key's circuit breaker is open or half-open, a
///   caller does not wait for another's refill (it may be the breaker's probe, out for the
///   whole timeout): it polls the calls out once (taking in their reply if it came: their own
///   caller may be stalled) and, while they are still out and the breaker not closed, takes
///   the limiter's per-call decision, short-circuited at once while the probe is out, as a
///   [`RedisLimiter`] call is; except behind a kept refund, which that per-call decision (the
///   probe, once due) could overtake: it is then decided as a short circuit (the deny cache,
///   then the policy) without a call of its own. [`release`](Self::release) keeps the
///   same bound: one whose deadline passes while another caller holds the lease, or that finds
///   it held while the breaker is open or half-open (polling the calls out once, as above: a
///   reply that came is taken in and the `release` goes on; still out, at once), sends
///   nothing, keeps the lease and says so ([`ReleaseError::Busy`]). No call is sent with less
///   than [`min_call_time`](Self::min_call_time) (a sixteenth of the timeout) left of its
///   deadline: it would most likely time out, perhaps after the server ran it. A refill (or a
///   `release`) left less than that by its wait is decided as above (a timeout, or `Busy`)
///   without a call, leaving the lease and a kept refund as they were; a request for a lease
///   whose calls are polled too late (their caller stalled after the refund went out) is
///   not sent, a timeout for the caller that asked, not the key's failure for the others.
/// * **Near the limit** the lease is the request: when the lease size would be `n` or less
///   (no permit held, and a quarter of what Redis last said was left, or
///   [`max_lease`](Self::max_lease), is at most `n`), the call
///   is the limiter's own exact per-call decision ([`RedisLimiter::try_acquire_outcome`]: its
///   deny cache answers repeated denials locally), without the mutex: concurrent calls go out
///   together, as per-call ones do.
///
/// # Decisions
/// A decision served from the lease is allowed with `remaining` = the lease's unserved permits
/// plus what Redis said was left after the lease (other processes' leases are not counted), and
/// `reset_after` from that lease's reply. The request that takes a lease gets the same; a
/// denial, and every per-call decision, is Redis's own (or the policy's).
///
/// Share one `LeasedKey` per key among the tasks of a process (in an [`Arc`]): each
/// `LeasedKey` holds its own lease, and the bounds below count per `LeasedKey`.
///
/// # Cancellation and callers not polled
/// A refill's calls to Redis (the old lease's refund, then the request for a new lease) are
/// made by one caller, but they are not its alone: the key's other callers wait for them by
/// polling them too, so their reply is taken in (the refund's fate counted, the new lease
/// published) by whichever caller polls first, not only by the one that sent them. A caller
/// whose calls went out and which is then never polled again, its future kept (a stream its
/// consumer stopped reading, a task on a runtime that nothing drives any more), holds up no
/// one while Redis answers: the key's next caller takes in the reply, publishes the lease and
/// is served from it. (Before, every later call on the key waited for its own timeout behind
/// the stalled caller, and was decided by the policy.) The calls' deadline is kept by
/// whichever runtime polls them: the stalled caller's runtime, left idle or shut down, neither
/// holds them out past it nor fails the callers polling them.
/// [`release`](Self::release)'s refund is taken in the same way. What a refill reserves on Redis goes:
/// * **the lease beyond the request**: served to the key's callers, given back when retired
///   unserved, or left to expire, as any lease (see [the bound](Self#the-bound));
/// * **the request's own `n` permits**: to the caller that asked, in its outcome when it is
///   polled again. A caller dropped after another caller took in its reply never gets them:
///   they are taken from the limit and handed to no one (at most that request's `n` per such
///   refill; [`counts`](Self::counts) counts them among the leased permits served);
/// * **calls dropped while out**: the calls go on as long as any caller polls them, and are
///   dropped with the last future polling them (the caller that made them, and every waiting
///   caller, dropped or timed out). Then nothing more is sent; a lease whose request was out is
///   lost (at most one lease of under-admission, in none of the counts), and a refund whose
///   call was out is kept and sent again, under its name, before the key's next refill or
///   `release` (it lands at most once).
///
/// A caller waiting for another's calls gives up at its own deadline, as before (a timeout,
/// decided by the policy); the calls keep the deadline their caller gave them.
///
/// # Drop
/// A `LeasedKey` dropped holding permits gives them back in the background, as
/// [`release`](Self::release) would: the current lease is retired, and its unserved permits (or,
/// with no lease to give back, a refund kept after a failed call) are sent in one refund, exact
/// or not at all, at most once, under its name, by the same scripts, through the key's circuit
/// breaker and within one [timeout](super::RedisConfig::timeout). A `LeasedKey` that holds no
/// lease, or whose unserved permits were [`release`](Self::release)d, sends nothing.
///
/// * **Where it runs:** a task spawned on the runtime that built the backend's connection (the
///   backend's own for [`RedisBackend::blocking_connect`](super::RedisBackend::blocking_connect),
///   the caller's for [`connect`](super::RedisBackend::connect)), whichever runtime the drop
///   happens on, or none: the runtime that drives the connection the refund goes through, with
///   the timers its timeout needs (a runtime current at the drop may have none). Spawning blocks
///   neither the dropping thread nor the runtime; the drop never waits for Redis. The task
///   holds an [`Arc`] of the limiter (and so the backend) until it ends.
/// * **Not retried:** the key is gone, so a refund that fails (counted in the limiter's
///   [`failures`](RedisLimiter::failures) and told to the breaker, as `release`'s), that the
///   breaker does not let out, that the server refuses (a decision on the key came first), or
///   whose lease's time has passed, is not sent again. Its permits stay taken (a bucket's until
///   its time passes them, a window's until the window ends). So are an anchored window's (never
///   given back), and a refund's whose task is dropped before it ends: the runtime shut down
///   first (a current-thread runtime dropped before it ran the task; one that nothing drives
///   any more never runs it), or while its call was out (it may then have landed).
/// * **Counted** in the limiter, since a dropped key's own [`counts`](Self::counts) die with
///   it: [`RedisLimiter::dropped_leases`] says how many permits dropped keys held, how many came
///   back, how many did not, and how many are still out.
///
/// # Lease size
/// Adapts to this key's rate in this process and to the budget left: starting at 8 (at most
/// [`max_lease`](Self::max_lease)), the size doubles when a lease ran out before it expired and
/// halves when one expired unused; a lease asks for at least one permit more than the request
/// (so a size halved down by idle periods grows back with use), and never for more than a
/// quarter of what Redis said was left at the last decision. A lease is also never more than
/// the bucket's capacity (the script grants only what fits), so a key leases well only with a
/// burst well above the lease size.
///
/// # The bound
/// The two rules of [`crate::lease`]: a permit is served at most once, only from a lease Redis
/// granted, on a clock read taken after the lease was received and before it expired; a refund
/// is exact or does not happen, and lands at most once (a copy the cluster client re-sends after
/// a lost reply finds the refund's own mark and does not land again, even where decisions since
/// brought the key back to the lease's word). A lease's lifetime `L` ([`lifetime`](Self::lifetime)) is counted
/// on this process's clock from a read taken **before its request was sent** (the earlier of
/// two reads, so one read that leaps ahead is not its start), so it ends at most `L` after Redis
/// decided it, in real time, whatever the offset between the clocks (only their rates must
/// agree; a serving read that lags across cores adds its lag). A window's lease
/// also ends with the window that counted it, counted the same way: `reset_after` from that
/// read, where the script's `reset_after` is at most the time from its own clock read to the
/// window's end on the server (the aligned window's end, kept to the microsecond; the anchored
/// window's counter's expiry, read to the millisecond with `PEXPIRETIME`, or with `PTTL`
/// less 1 ms before Redis 7.0). Hence:
///
/// * **Fixed window: never over the limit** in any window: every permit served was counted in
///   the window it is served in (a lease is served only before the counter that counted it
///   expires and a new window opens; the clocks' rates agreeing, as above). Under-admission:
///   the permits held in leases, dead with their window unless refunded, as below.
/// * **Bucket, over-admission** (`C` the capacity, `T` the interval per permit): all callers of the key together (leased and per-call, every process)
///   are admitted at most `C + ⌊(d + L) / T⌋` permits in any span of length `d` (the exact
///   bucket: `C + ⌊d / T⌋`): at most `⌈L / T⌉` above the exact bucket, and at most what the
///   leases held when the span began (`max_lease − 1` per `LeasedKey`). Over a
///   span that contains every lease's request (say, the whole run of a test), **none**: every
///   permit served was granted inside the span.
/// * **Under-admission** (both): the permits held in leases ([`stranded_bound`](Self::stranded_bound)
///   per `LeasedKey`, at any time), plus the permits of leases whose unserved part
///   could not be given back (another decision came first: they stay taken until the bucket's
///   time passes them), whose refund's call failed or was not let out by the breaker and was
///   not sent again before a later lease was granted on the key or its time passed (given
///   up), or whose reply was lost (a timeout, or calls dropped by every caller polling them,
///   after the script ran) and
///   whose retry did not come (a retry finds the first landing's mark and reports it).
///   [`counts`](Self::counts) reports them. A dropped `LeasedKey` gives back what it holds
///   (see [Drop](Self#drop)): only what its refund could not give back adds to this, counted in
///   [`RedisLimiter::dropped_leases`] (`stranded`). On a Redis Cluster also the leases granted to a
///   request whose connection dropped before its reply came: redis-rs's cluster client sends
///   it again and Redis grants the copy (before the request's deadline) a lease more; the
///   client serves the last copy's, and the earlier grants' permits stay taken, in none of
///   the counts: at most one lease per connection dropped so while a request was out (see
///   [`RedisBackend`](super::RedisBackend), "What can still be consumed").
///
/// A refund can give permits back after Redis announced a denial's `retry_after` to some
/// caller: a [`DenyCache`](crate::backend::DenyCache) then denies until that time, a little
/// longer than Redis would (under-admission only).
///
/// ```no_run
/// use floodgate::backend::FailurePolicy;
/// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
/// use floodgate::{Gcra, Rate};
/// use std::sync::Arc;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let backend = RedisBackend::connect(RedisConfig::single("redis://127.0.0.1:6379")).await?;
/// let gcra = Gcra::new(Rate::per_second(100_000), 100_000)?;
/// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailClosed)?);
/// let hot = LeasedKey::new(limiter, "tenant-7");
/// for _ in 0..1_000 {
///     // Mostly served from the lease, without a round trip.
///     assert!(hot.try_acquire(1).await?.is_allowed());
/// }
/// hot.release().await?; // give back what is left
/// # Ok(()) }
/// ```
pub struct LeasedKey<A: LeaseAlgorithm = Gcra, C: Clock + Clone = QuantaClock> {
    limiter: Arc<RedisLimiter<A, C>>,
    key: String,
    redis_keys: Vec<String>,
    slot: LeaseSlot,
    /// What the script said was left after the published lease (for the serves' decisions).
    source_left: AtomicU64,
    /// When the key is whole again, by the published lease's reply (clock nanoseconds).
    reset_at: AtomicU64,
    /// What Redis said was left at the last decision (a lease's or a per-call one).
    budget: AtomicU64,
    /// Held only between two awaits (never across one): a refill's calls are out with it
    /// released, as [`Owner::in_flight`].
    owner: Mutex<Owner>,
    /// Whether the owner keeps a refund to send again (`Owner::pending` is `Some`): a request
    /// near the limit then goes through the owner, which sends it first, instead of straight
    /// to the exact per-call decision (which would move the key past the refund's word).
    refund_kept: AtomicBool,
    max_lease: u32,
    lifetime_nanos: u64,
    counters: Counters,
}

/// What the caller replacing the lease owns.
#[derive(Debug)]
struct Owner {
    /// The published lease ([`NO_LEASE`] for none).
    lease: Lease,
    /// The size the next lease asks for.
    size: u32,
    /// The last refill's failure (not a short circuit) and when it was decided; `None` after a
    /// refill that reached Redis. A caller that waited for the owner while it failed takes
    /// this failure (decided by the policy) instead of sending a call of its own.
    failed: Option<(Instant, BackendError)>,
    /// A refund whose call failed or was not sent (the breaker open), to be sent again, under
    /// its own name, before the key's next call to Redis from this owner (a refill, or
    /// [`LeasedKey::release`]). One is enough: a refund lands only on the word its lease
    /// wrote, so once a later lease is granted on the key an older refund can no longer land
    /// (it is given up then).
    pending: Option<Refund>,
    /// The refill (or `release`) whose calls to Redis are out: the key's other callers wait
    /// for it, and whichever of them (or its own caller) first finds its reply settles it (see
    /// [`LeasedKey::settle`]). Weak: once every caller polling it has dropped its future, the
    /// calls are dropped with them, and the next caller finds it gone.
    in_flight: Option<InFlight>,
}

/// A refill's (or a `release`'s) calls to Redis: the refund of a retired lease (or a kept one),
/// then the request for a new lease, in one future that any caller of the key may poll, so that
/// the reply is taken in by whichever caller polls first, not only by the caller that sent it.
type Calls = Shared<Pin<Box<dyn Future<Output = CallsReply> + Send>>>;

/// What [`Calls`] got back.
#[derive(Clone, Debug)]
struct CallsReply {
    /// The refund's call (`None`: none was sent).
    refund: Option<Result<Refunded, BackendError>>,
    /// The refill's request: its outcome (decided by the refund's failure, or its short
    /// circuit, when it had one), and the lease it took, if any. `None`: no lease asked for (a `release`, or near the
    /// limit: the request is then the exact per-call decision, made by its own caller).
    take: Option<Taken>,
}

/// What became of a refill's request.
#[derive(Clone, Debug)]
struct Taken {
    /// The request's outcome (decided by the refund's failure, or its short circuit, when
    /// the refund did not land or get refused).
    outcome: Outcome,
    /// The lease Redis granted it (of which the request's `n` go to the request).
    lease: Option<Lease>,
    /// The permits the request asked for.
    n: u32,
    /// Not sent: less than [`LeasedKey::min_call_time`] was left to its deadline when it was
    /// due (its calls polled late). Its timeout says nothing about Redis: not the key's
    /// failure for the callers that waited for it (`Owner::failed` is left as it was).
    late: bool,
}

/// The [`Calls`] out, as [`Owner`] keeps them.
#[derive(Debug)]
struct InFlight {
    calls: WeakShared<Pin<Box<dyn Future<Output = CallsReply> + Send>>>,
    /// The refund's permits, and whether it was sent before (a kept refund's retry).
    refund: Option<(u64, bool)>,
}

/// A refund of a retired lease's unserved permits: sent at once, and kept to be sent again
/// while its call fails.
#[derive(Clone, Debug)]
struct Refund {
    /// The lease's receipt: the word the refund must find.
    receipt: [u64; 2],
    /// The permits it gives back.
    unused: u64,
    /// Its name ([`refund_name`]): every copy and every retry carries it, so it lands at most
    /// once (the script's mark; see the refund scripts).
    name: String,
    /// Until when (this key's clock, nanoseconds) it can still land: the lease's `reset_after`
    /// from the read taken before its request (the bucket's time of the lease's word, the end
    /// of the window that counted it), on or before the server's own end of it. Past this it
    /// is given up, unsent.
    until: u64,
    /// Tries so far: calls sent for it, and tries the breaker did not let out (a kept refund
    /// either way: its next call is counted in `resent_refunds`).
    tries: u32,
}

/// What became of a refund's call.
#[derive(Clone, Copy, Debug)]
enum Refunded {
    /// It landed (or a copy of it had: the mark was found): the permits are back.
    Landed,
    /// The server refused it (another decision on the key came first), or the algorithm gives
    /// nothing back (an anchored window).
    Refused,
}

#[derive(Debug, Default)]
struct Counters {
    leases: AtomicU64,
    leased: AtomicU64,
    returned: AtomicU64,
    refunded: AtomicU64,
    failed_refunds: AtomicU64,
    resent_refunds: AtomicU64,
    given_up_refunds: AtomicU64,
    busy_releases: AtomicU64,
    exact: AtomicU64,
}

/// What a [`LeasedKey`] took and served (see [`LeasedKey::counts`]).
///
/// ```
/// use floodgate::redis::LeaseCounts;
/// let counts = LeaseCounts {
///     leases: 2,
///     leased: 100,
///     held: 10,
///     refunded: 20,
///     stranded: 5,
///     failed_refunds: 1,
///     resent_refunds: 1,
///     given_up_refunds: 0,
///     busy_releases: 0,
///     exact: 0,
/// };
/// assert_eq!(counts.served(), 65);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseCounts {
    /// Leases Redis granted (replies received).
    pub leases: u64,
    /// Permits in those leases.
    pub leased: u64,
    /// Permits of the current lease not yet served.
    pub held: u64,
    /// Unserved permits of retired leases given back to Redis (refunds confirmed).
    pub refunded: u64,
    /// Unserved permits of retired leases not confirmed given back: taken from the limit,
    /// handed to no caller (under-admission; they stay taken until the bucket's time passes
    /// them): the server refused the refund (a decision on the key came first), it was given
    /// up, or its call failed and no retry has landed yet (counted in
    /// [`failed_refunds`](Self::failed_refunds) too; a retry that lands moves them to
    /// `refunded`). A
    /// refund whose reply was lost (its call dropped while it was out by every caller polling
    /// it, a
    /// reply that came after the call's deadline to a script that ran just before it, or, on a
    /// Redis Cluster, a copy re-sent after the reply was lost that reached the server after the
    /// deadline and was refused as late) is counted here, though it may have landed: then
    /// `served()` reads that many low.
    pub stranded: u64,
    /// Refund calls that failed (Redis unreachable, no answer within the timeout, an
    /// unexpected reply), in [`release`](LeasedKey::release) (which returns the failure) or
    /// when a refill gave an old lease back (the refill is then decided by that failure): one
    /// per call, a retry that fails again counted again. Each is also counted in the limiter's
    /// [`failures`](super::RedisLimiter::failures) and reported to its breaker. The refund is
    /// kept and sent again (see [`resent_refunds`](Self::resent_refunds)); its permits are in
    /// `stranded` until a retry lands. A refund the server refused is not one.
    pub failed_refunds: u64,
    /// Refunds sent again after their call failed (or was not sent: the breaker open), under
    /// their own name, so that one lands at most once however many copies reach the server:
    /// before the key's next refill or [`release`](LeasedKey::release). One that lands moves
    /// its permits from `stranded` to `refunded`.
    pub resent_refunds: u64,
    /// Refunds dropped unsent (most of them kept after a failed call): past the end of the
    /// lease's window or the bucket's time of its word (a refund then could no longer land as
    /// it was taken), or a later lease was granted on the key first (the refund could no longer
    /// find its word). Their permits stay in `stranded`.
    pub given_up_refunds: u64,
    /// [`release`](LeasedKey::release) calls that returned [`ReleaseError::Busy`]: another
    /// caller held the lease until less than [`min_call_time`](LeasedKey::min_call_time) was
    /// left of the call's deadline, or held it (its calls still out once polled) while the
    /// key's breaker was open or half-open. Each sent nothing and kept the lease (its permits
    /// stay in `held`, or a kept refund stays kept), so each is in none of the other counts nor
    /// in the limiter's [`failures`](super::RedisLimiter::failures).
    pub busy_releases: u64,
    /// Decisions made per call, exactly (near the limit).
    pub exact: u64,
}

impl LeaseCounts {
    /// Permits served from leases: `leased − held − refunded − stranded`.
    ///
    /// ```
    /// use floodgate::redis::LeaseCounts;
    /// assert_eq!(LeaseCounts { leased: 10, held: 3, ..LeaseCounts::default() }.served(), 7);
    /// ```
    pub fn served(&self) -> u64 {
        self.leased
            .saturating_sub(self.held)
            .saturating_sub(self.refunded)
            .saturating_sub(self.stranded)
    }
}

impl<A: LeaseAlgorithm, C: Clock + Clone> std::fmt::Debug for LeasedKey<A, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedKey")
            .field("key", &self.key)
            .field("max_lease", &self.max_lease)
            .field("lifetime", &self.lifetime())
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl<A: LeaseAlgorithm, C: Clock + Clone> LeasedKey<A, C> {
    /// How long a lease may be served unless told otherwise
    /// ([`with_lifetime`](Self::with_lifetime)): 50 ms, well above a round trip.
    pub const DEFAULT_LIFETIME: Duration = Duration::from_millis(50);

    /// The largest lease unless told otherwise ([`with_max_lease`](Self::with_max_lease)).
    pub const DEFAULT_MAX_LEASE: u32 = 1024;

    /// `key` of `limiter`, served from leases of up to [`DEFAULT_MAX_LEASE`](Self::DEFAULT_MAX_LEASE)
    /// permits (at most the limit) lasting at most [`DEFAULT_LIFETIME`](Self::DEFAULT_LIFETIME).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::sync::Arc;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let gcra = Gcra::new(Rate::per_second(1_000), 10_000)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?);
    /// let leased = LeasedKey::new(limiter, "tenant-7");
    /// assert_eq!((leased.key(), leased.max_lease()), ("tenant-7", 1024));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(limiter: Arc<RedisLimiter<A, C>>, key: &str) -> Self {
        let redis_keys = limiter.redis_keys(key);
        let limit = RedisAlgorithm::limit(limiter.algorithm());
        let max_lease = lease_at_most(Self::DEFAULT_MAX_LEASE, limit);
        LeasedKey {
            limiter,
            key: key.to_owned(),
            redis_keys,
            slot: LeaseSlot::new(),
            source_left: AtomicU64::new(0),
            reset_at: AtomicU64::new(0),
            owner: Mutex::new(Owner {
                lease: NO_LEASE,
                size: INITIAL_LEASE.min(max_lease),
                failed: None,
                pending: None,
                in_flight: None,
            }),
            refund_kept: AtomicBool::new(false),
            budget: AtomicU64::new(limit),
            max_lease,
            lifetime_nanos: duration_to_nanos(Self::DEFAULT_LIFETIME),
            counters: Counters::default(),
        }
    }

    /// The same key with leases of at most `max_lease` permits (1: every call is the exact
    /// per-call decision). Above the limit it reads as the limit: [`max_lease`](Self::max_lease)
    /// and [`stranded_bound`](Self::stranded_bound) report the limit then.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for zero.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::sync::Arc;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let gcra = Gcra::new(Rate::per_second(1_000), 1_000)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?);
    /// assert_eq!(LeasedKey::new(limiter.clone(), "k").with_max_lease(64)?.stranded_bound(), 63);
    /// let above = LeasedKey::new(limiter.clone(), "k").with_max_lease(5_000)?;
    /// assert_eq!((above.max_lease(), above.stranded_bound()), (1_000, 999)); // the limit
    /// let zero = LeasedKey::new(limiter, "k").with_max_lease(0).unwrap_err();
    /// assert!(zero.to_string().contains("max_lease"), "{zero}");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_max_lease(mut self, max_lease: u32) -> Result<Self, ConfigError> {
        if max_lease == 0 {
            return Err(ConfigError::Invalid {
                what: "max_lease",
                why: "a lease must be allowed at least one permit",
            });
        }
        let max_lease = lease_at_most(max_lease, RedisAlgorithm::limit(self.limiter.algorithm()));
        let owner = self.owner.get_mut().unwrap_or_else(PoisonError::into_inner);
        owner.size = INITIAL_LEASE.min(max_lease);
        self.max_lease = max_lease;
        Ok(self)
    }

    /// The same key with leases served for at most `lifetime` (from a clock read taken before
    /// the lease was asked for). The over-admission above the exact bucket is at most
    /// `lifetime`'s worth of the rate; a lifetime shorter than a round trip wastes every lease.
    ///
    /// # Errors
    /// [`ConfigError::DurationOutOfRange`] (`what: "lease lifetime"`) for zero or beyond
    /// `u64` nanoseconds.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{ConfigError, Gcra, Rate};
    /// use std::{sync::Arc, time::Duration};
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let gcra = Gcra::new(Rate::per_second(1_000), 1_000)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?);
    /// let short = LeasedKey::new(limiter.clone(), "k").with_lifetime(Duration::from_millis(5))?;
    /// assert_eq!(short.lifetime(), Duration::from_millis(5));
    /// let zero = LeasedKey::new(limiter, "k").with_lifetime(Duration::ZERO);
    /// assert!(matches!(zero, Err(ConfigError::DurationOutOfRange { what: "lease lifetime", .. })));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_lifetime(mut self, lifetime: Duration) -> Result<Self, ConfigError> {
        self.lifetime_nanos = crate::lease::lifetime_nanos(lifetime)?;
        Ok(self)
    }

    /// The limiter whose key this is (its per-call decisions share the limit).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::sync::Arc;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?);
    /// assert_eq!(LeasedKey::new(limiter, "k").limiter().algorithm().capacity(), 500);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limiter(&self) -> &Arc<RedisLimiter<A, C>> {
        &self.limiter
    }

    /// The limiter key served.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::sync::Arc;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?);
    /// assert_eq!(LeasedKey::new(limiter, "bob").key(), "bob");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The largest lease taken: the one configured, at most the limit.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::sync::Arc;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?);
    /// assert_eq!(LeasedKey::new(limiter.clone(), "k").with_max_lease(64)?.max_lease(), 64);
    /// assert_eq!(LeasedKey::new(limiter, "k").max_lease(), 500); // 1024 by default: the limit
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn max_lease(&self) -> u32 {
        self.max_lease
    }

    /// How long a lease may be served.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::{sync::Arc, time::Duration};
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?);
    /// assert_eq!(LeasedKey::new(limiter, "k").lifetime(), Duration::from_millis(50));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn lifetime(&self) -> Duration {
        Duration::from_nanos(self.lifetime_nanos)
    }

    /// The least time left to its deadline that a call of this key to Redis (a refund, a
    /// request for a lease, the exact per-call decision) is sent with: a sixteenth of the
    /// backend's [timeout](super::RedisConfig::timeout) (12.5 ms of the default 200 ms).
    ///
    /// A call sent with less would most likely time out, and may do so after the server ran it:
    /// a refund that gave its permits back reported failed (its permits counted `stranded`
    /// until a retry finds it landed), a lease granted (its permits taken) to a caller that has
    /// given up. So a call that has less than this left when it is due is not sent:
    /// * a refill sends its calls only with this left, or twice this with a refund to send (the
    ///   refund gets half of what is left): one that waited for another caller's calls until
    ///   less was left (a refill starts with the whole timeout) sends nothing and touches
    ///   nothing (the lease stays published, a kept refund stays kept, counted `stranded` as
    ///   one the breaker did not let out), and is a timeout decided as a request the breaker
    ///   short-circuits: the deny cache's denial if it holds one for the key, else the policy
    ///   (counted in the limiter's [`failures`](RedisLimiter::failures); not told to the
    ///   breaker);
    /// * a refill's request for a lease whose calls are polled only when less than this is left
    ///   of its deadline (its caller stalled after its refund went out, say) is not sent: the
    ///   same timeout for the caller that asked, and not a failure for the callers waiting
    ///   for it (they ask Redis themselves);
    /// * a [`release`](Self::release) that waited for another caller's calls until less than
    ///   this was left sends nothing and keeps the lease ([`ReleaseError::Busy`]).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::{sync::Arc, time::Duration};
    /// let config = RedisConfig::single("redis://127.0.0.1:6379");
    /// let backend = RedisBackend::blocking_connect(config.timeout(Duration::from_millis(80)).lazy())?;
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?);
    /// assert_eq!(LeasedKey::new(limiter, "k").min_call_time(), Duration::from_millis(5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn min_call_time(&self) -> Duration {
        min_call_time(self.limiter.backend().timeout())
    }

    /// The most permits this key holds in its lease at once, taken from Redis and not yet
    /// served: [`max_lease`](Self::max_lease) − 1 (a lease serves its first request at once;
    /// `max_lease` is at most the limit). It bounds this process's share of the over-admission
    /// in any span (see [the bound](Self#the-bound)), and the permits it holds at any time.
    ///
    /// It does **not** bound [`counts`](Self::counts)`().stranded`, nor the under-admission this
    /// key leaves behind: each lease whose unserved permits could not be given back (another
    /// decision on the key came first, or the refund failed and was given up before a retry
    /// landed) strands them, and they stay taken
    /// (a bucket's until its time passes them, a window's until it ends); leases stranded one
    /// after another add up past this bound.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::sync::Arc;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?);
    /// assert_eq!(LeasedKey::new(limiter.clone(), "k").stranded_bound(), 499); // the limit, 500, − 1
    /// assert_eq!(LeasedKey::new(limiter, "k").with_max_lease(64)?.stranded_bound(), 63);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stranded_bound(&self) -> u64 {
        u64::from(self.max_lease - 1)
    }

    /// What this key took from Redis and what became of it. `served()` counts permits handed
    /// out from leases; a lease whose reply was lost is in none of the counts (nor is one
    /// granted to a request the cluster client then sent again: only the copy's lease is).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeaseCounts, LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::sync::Arc;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?);
    /// assert_eq!(LeasedKey::new(limiter, "k").counts(), LeaseCounts::default());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn counts(&self) -> LeaseCounts {
        // Relaxed: independent statistics counters; no other memory depends on them.
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let c = &self.counters;
        let (returned, refunded) = (load(&c.returned), load(&c.refunded));
        LeaseCounts {
            leases: load(&c.leases),
            leased: load(&c.leased),
            held: self.slot.left(),
            refunded,
            stranded: returned.saturating_sub(refunded),
            failed_refunds: load(&c.failed_refunds),
            resent_refunds: load(&c.resent_refunds),
            given_up_refunds: load(&c.given_up_refunds),
            busy_releases: load(&c.busy_releases),
            exact: load(&c.exact),
        }
    }

    /// Takes `n` permits: from the lease without a round trip when it has them, else as
    /// described [above](Self#how-a-call-is-decided). A Redis failure is decided by the
    /// limiter's policy (see [`try_acquire_outcome`](Self::try_acquire_outcome) to see it).
    ///
    /// A future dropped, or kept and never polled again, while its request for a lease is out
    /// holds up none of the key's other callers; what its request reserved is served to them,
    /// given back or lost as [Cancellation](Self#cancellation-and-callers-not-polled) says.
    ///
    /// # Errors
    /// [`RequestError::Permits`] for `n = 0` or `n` above the capacity;
    /// [`RequestError::Runtime`] outside a tokio runtime when Redis must be asked.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::{sync::Arc, time::Duration};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Nothing listens on port 1: the lease refill fails and the policy (fail open) decides.
    /// let config = RedisConfig::single("redis://127.0.0.1:1").timeout(Duration::from_millis(20));
    /// let backend = RedisBackend::connect(config.lazy()).await?;
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "doc", gcra, FailurePolicy::FailOpen)?);
    /// let leased = LeasedKey::new(limiter.clone(), "alice");
    /// assert!(leased.try_acquire(1).await?.is_allowed());
    /// assert_eq!(limiter.failures().total(), 1);
    /// assert!(leased.try_acquire(0).await.is_err());
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, n: u32) -> Result<Decision, RequestError> {
        self.try_acquire_outcome(n).await.map(|o| o.decision())
    }

    /// As [`try_acquire`](Self::try_acquire), with the Redis error when the policy decided.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::{sync::Arc, time::Duration};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = RedisConfig::single("redis://127.0.0.1:1").timeout(Duration::from_millis(20));
    /// let backend = RedisBackend::connect(config.lazy()).await?;
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "doc", gcra, FailurePolicy::FailClosed)?);
    /// let outcome = LeasedKey::new(limiter, "alice").try_acquire_outcome(1).await?;
    /// assert!(!outcome.decision().is_allowed());
    /// assert!(outcome.failure().unwrap().to_string().contains("redis://127.0.0.1:1"));
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_outcome(&self, n: u32) -> Result<Outcome, RequestError> {
        RedisAlgorithm::check_permits(self.limiter.algorithm(), n)?;
        if let Some((left, now)) = self.slot.serve(n, self.clock()) {
            return Ok(Outcome::from_backend(self.served(left, now)));
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RequestError::Runtime(
                "LeasedKey's async calls need a tokio runtime: call them inside one, or use \
                 the blocking_* forms",
            ));
        }
        self.unserved(n).await
    }

    /// [`try_acquire`](Self::try_acquire), blocking the thread when Redis must be asked (a
    /// serve from the lease never blocks).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire), and [`RequestError::Runtime`] when Redis must be
    /// asked inside a tokio runtime, or on a backend that cannot block (see
    /// [`RedisLimiter::blocking_try_acquire`]).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::{sync::Arc, time::Duration};
    /// let config = RedisConfig::single("redis://127.0.0.1:1").timeout(Duration::from_millis(20));
    /// let backend = RedisBackend::blocking_connect(config.lazy())?;
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "doc", gcra, FailurePolicy::FailClosed)?);
    /// assert!(!LeasedKey::new(limiter, "alice").blocking_try_acquire(1)?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blocking_try_acquire(&self, n: u32) -> Result<Decision, RequestError> {
        RedisAlgorithm::check_permits(self.limiter.algorithm(), n)?;
        if let Some((left, now)) = self.slot.serve(n, self.clock()) {
            return Ok(self.served(left, now));
        }
        let outcome = self.limiter.backend().block_on(self.unserved(n))??;
        Ok(outcome.decision())
    }

    /// Gives the unserved permits of the current lease back to Redis (exactly, or not at all:
    /// see [`LeasedKey`]) and drops the lease; the next call takes a new one. Returns the
    /// permits given back: 0 when there is no lease or nothing unserved, or when Redis refused
    /// the refund (a decision on the key came after the lease; an anchored window's lease is
    /// never given back), the permits then counted `stranded` in [`counts`](Self::counts).
    /// A `LeasedKey` dropped without it gives its unserved permits back in the background (see
    /// [Drop](Self#drop)); `release` does it now, reports the outcome, and keeps a refund whose
    /// call failed to send again (a drop's refund is not retried).
    ///
    /// Returns within the backend's [timeout](super::RedisConfig::timeout) from its start: the
    /// wait for another caller holding the lease (a refill) and the refund share that one
    /// deadline.
    ///
    /// # Errors
    /// [`ReleaseError::Runtime`] outside a tokio runtime (nothing sent, the lease kept);
    /// [`ReleaseError::Busy`] when another caller held the lease until less than
    /// [`min_call_time`](Self::min_call_time) was left of the deadline (a refund sent with less
    /// would most likely time out, perhaps after it landed), or held it while the key's breaker
    /// was open or half-open (then at once, once its calls, polled once, are still out: they
    /// may be the breaker's probe; a reply that came is taken in, and the release goes on)
    /// (nothing sent, the lease kept; not counted as a failure, but in
    /// [`LeaseCounts::busy_releases`]);
    /// [`ReleaseError::Refund`] when the refund's call failed (Redis unreachable, no answer
    /// within the backend's timeout, an unexpected reply), naming the server, or the breaker
    /// did not let it out ([`BackendError::CircuitOpen`]): the lease is dropped, its permits
    /// counted `stranded` (and a failed call in `failed_refunds` and in the limiter's
    /// [`failures`](RedisLimiter::failures), reported to the breaker), though after a timeout
    /// the refund may have landed. The refund is kept: the next `release` (or refill) sends it
    /// again under its name, so it lands at most once (a copy that finds it landed reports its
    /// permits given back), until its lease's time has passed; it returns the permits a
    /// retry gave back.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::sync::Arc;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let backend = RedisBackend::connect(RedisConfig::single("redis://127.0.0.1:6379").lazy()).await?;
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "doc", gcra, FailurePolicy::FailOpen)?);
    /// assert_eq!(LeasedKey::new(limiter, "alice").release().await?, 0); // no lease yet
    /// # Ok(()) }
    /// ```
    pub async fn release(&self) -> Result<u64, ReleaseError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ReleaseError::Runtime(
                "LeasedKey::release needs a tokio runtime",
            ));
        }
        // One deadline for the whole call: the wait for another caller's calls (its refill may
        // be out for its own whole timeout) and the refund share it.
        let timeout = self.limiter.backend().timeout();
        let deadline = deadline(timeout);
        // Nothing retired, nothing sent while another caller's calls are out and this call's
        // deadline passes: the lease (or the holder's kept refund) stays for a later `release`
        // or refill.
        let mut waited = false;
        let (calls, permits) = loop {
            match self.start_release(deadline, waited) {
                Start::Sent(calls, permits) => break (calls, permits),
                Start::Out(calls) => {
                    if calls.peek().is_none() && !self.breaker_closed() {
                        // While the key's breaker is open or half-open, the holder's call may
                        // be the breaker's probe, out for up to the timeout on a server that
                        // does not answer (a refund sent while it is out would be
                        // short-circuited). Polled once first, as a refill's caller behind a
                        // kept refund polls them: their own caller may be stalled (never
                        // polled again) with their reply waiting, the probe unreported and
                        // the breaker half-open for as long as it stays so. A reply found is
                        // taken in (the probe reported), and this call looks again.
                        if let Some(reply) = calls.clone().now_or_never() {
                            self.settle(&calls, &reply);
                            continue;
                        }
                        // Still out: the breaker's error at once, as a refill's caller gets
                        // its short-circuited per-call decision (once it closed, wait below).
                        if !self.breaker_closed() {
                            let node = self.limiter.node_of(&self.key);
                            let error = self.limiter.handler().circuit_open(node.as_deref());
                            return Err(self.busy(error));
                        }
                    }
                    match until_deadline(calls.clone(), deadline).await {
                        Ok(reply) => self.settle(&calls, &reply),
                        Err(()) => return Err(self.released_out(timeout)),
                    }
                    if deadline.saturating_duration_since(Instant::now()) < self.min_call_time() {
                        // The holder's calls ended, but with less than the least time a call
                        // is sent with left of this call's, or none (this task polled late: a
                        // loaded machine, a runtime busy elsewhere; or they ended near this
                        // call's deadline): they held the lease until then, and a refund sent
                        // now would most likely time out, perhaps after the server applied
                        // it (a failure that says nothing about Redis, the permits counted
                        // stranded though given back). Nothing sent, as when the deadline is
                        // seen first.
                        return Err(self.released_out(timeout));
                    }
                    waited = true;
                }
                Start::Decided(_) | Start::Exact => return Ok(0),
            }
        };
        let reply = calls.clone().await;
        self.settle(&calls, &reply);
        match reply.refund {
            Some(Ok(Refunded::Landed)) => Ok(permits),
            Some(Ok(Refunded::Refused)) | None => Ok(0),
            // Counted in the limiter's failures by the calls (no request is decided by it).
            Some(Err(error)) => Err(ReleaseError::Refund { permits, error }),
        }
    }

    /// What `release` does next, decided under the owner's lock: wait for the calls out, or
    /// retire the lease and send its refund (or a kept one; [`Start::Exact`]: none to send).
    /// `waited`: it waited for another caller's calls (a timeout of the refund, shortened by
    /// the wait, says nothing about Redis: not told to the breaker).
    fn start_release(&self, deadline: Instant, waited: bool) -> Start<u64> {
        let mut owner = self.lock_owner();
        if let Some(calls) = self.calls_out(&owner) {
            return Start::Out(calls);
        }
        let unused = self.retire(&mut owner);
        let old = std::mem::replace(&mut owner.lease, NO_LEASE);
        let fresh = self.refund_of(&old, unused);
        let Some((refund, retry)) = self.refund_to_send(&mut owner, fresh) else {
            return Start::Exact;
        };
        let permits = refund.unused;
        let calls = self.send(&mut owner, Some((refund, deadline, waited, retry)), None);
        Start::Sent(calls, permits)
    }

    /// The clock leases expire on (the limiter's).
    fn clock(&self) -> &dyn Clock {
        self.limiter.handler().clock()
    }

    /// The decision for a serve that left `left` permits in the lease, at `now`.
    #[inline]
    fn served(&self, left: u64, now: u64) -> Decision {
        // Relaxed: hints written before the lease was published (this lease's or a later one's:
        // an estimate either way, as `PerCore`'s).
        let source_left = self.source_left.load(Ordering::Relaxed);
        let reset_at = self.reset_at.load(Ordering::Relaxed);
        Decision::allow(
            RedisAlgorithm::limit(self.limiter.algorithm()),
            left.saturating_add(source_left),
            reset_at.saturating_sub(now),
        )
    }

    /// The decision for a request of `n` with less than `needed` left to its `deadline`: a
    /// timeout (nothing sent, for `what`), decided as a request the breaker short-circuits (the
    /// deny cache's denial first, which a call would have met before anything was sent; else
    /// the policy, counted), not told to the breaker; `None` with `needed` left.
    #[inline]
    fn out_of_time(
        &self,
        n: u32,
        deadline: Instant,
        needed: Duration,
        what: &str,
    ) -> Option<Outcome> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left >= needed {
            return None;
        }
        let backend = self.limiter.backend();
        let error = not_sent(backend, &self.redis_keys, left, needed, what);
        Some(self.limiter.handler().decide_unsent(&self.key, n, error))
    }

    /// The decision for a request of `n` whose deadline passed while another caller's refill
    /// held the owner: a timeout, decided as a request the breaker short-circuits (the deny
    /// cache's denial first, which a call would have met before anything was sent; else the
    /// policy, counted), as `out_of_time`; the breaker is not told: this call sent nothing.
    #[cold]
    fn waited_out(&self, n: u32) -> Outcome {
        let timeout = self.limiter.backend().timeout();
        let error = self.owner_busy(format!(
            "no lease within {timeout:?}: another caller's request for a lease of this key was \
             still out"
        ));
        self.limiter.handler().decide_unsent(&self.key, n, error)
    }

    /// The decision for a request of `n` that found another caller's calls out, carrying a
    /// kept refund, while the key's breaker is not closed: a short circuit (the deny cache
    /// first, then the policy), as the request behind a refund the breaker held is decided
    /// (see `send`); no call of its own goes out ahead of the refund.
    #[cold]
    fn behind_a_kept_refund(&self, n: u32) -> Outcome {
        let node = self.limiter.node_of(&self.key);
        let handler = self.limiter.handler();
        let error = handler.circuit_open(node.as_deref());
        let outcome = handler.decide_unsent(&self.key, n, error);
        self.limiter.after_short_circuit(&outcome);
        outcome
    }

    /// A timeout naming the key's server, for a call whose deadline passed while another caller
    /// held the owner; `message` says what the call could not do.
    fn owner_busy(&self, message: String) -> BackendError {
        BackendError::at(
            FailureKind::Timeout,
            self.limiter.backend().failed_at(&self.redis_keys),
            std::io::Error::new(std::io::ErrorKind::TimedOut, message),
        )
    }

    /// The error of a `release` whose deadline passed while another caller held the owner: a
    /// timeout naming the key's server, not counted as a failure (the breaker is not told:
    /// this call sent nothing).
    #[cold]
    fn released_out(&self, timeout: Duration) -> ReleaseError {
        let error = self.owner_busy(format!(
            "no release within {timeout:?}: another caller held this key's lease (its request for \
             a lease, or its refund, was still out) until less than {:?} of this call's time \
             was left (LeasedKey::min_call_time)",
            self.min_call_time()
        ));
        self.busy(error)
    }

    /// A `release` that sent nothing because another caller held the owner, with `error`:
    /// counted in `busy_releases`.
    #[cold]
    fn busy(&self, error: BackendError) -> ReleaseError {
        // Relaxed: a statistics counter; no other memory depends on it.
        self.counters.busy_releases.fetch_add(1, Ordering::Relaxed);
        ReleaseError::Busy { error }
    }

    /// Retires the published lease (the caller owns the slot): its unserved permits.
    fn retire(&self, _owner: &mut Owner) -> u64 {
        let unused = self.slot.retire();
        // Relaxed: a statistics counter; no other memory depends on it.
        self.counters.returned.fetch_add(unused, Ordering::Relaxed);
        unused
    }

    /// A request of `n` the lease could not serve. With no permit held and a budget too small
    /// for a lease of more than `n`, the exact per-call decision, without waiting for the
    /// lease's owner (near the limit, and on every denial while the limit is exhausted, this is
    /// the per-call path, concurrent calls included); otherwise the lease is replaced.
    ///
    /// The whole call is bounded by one deadline, the backend's timeout from now: the wait for
    /// the lease's owner, the refund of an old lease and the request for a new one share it.
    async fn unserved(&self, n: u32) -> Result<Outcome, RequestError> {
        let asked = Instant::now();
        let deadline = asked
            .checked_add(self.limiter.backend().timeout())
            .unwrap_or(asked);
        // SeqCst: a hint, stored by the owner whenever its kept refund changes; a stale read
        // either sends this call straight to the exact decision (as before the refund failed:
        // it can then no longer land) or through the owner, which finds none to send.
        if self.slot.left() == 0
            && self.exact_suffices(n)
            && !self.refund_kept.load(Ordering::SeqCst)
        {
            return self.exact(n, deadline, false).await;
        }
        self.refill(n, asked, deadline).await
    }

    /// Whether this key's breaker (its node's, on a cluster) is closed, or there is none.
    fn breaker_closed(&self) -> bool {
        let node = self.limiter.node_of(&self.key);
        self.limiter.handler().breaker_closed(node.as_deref())
    }

    /// Whether a lease of more than `n` is ruled out: by the budget Redis last reported, or by
    /// the largest lease.
    fn exact_suffices(&self, n: u32) -> bool {
        self.lease_cap() <= u64::from(n)
    }

    /// The largest lease the next refill may take: a quarter of the budget Redis last reported,
    /// at most the largest lease.
    fn lease_cap(&self) -> u64 {
        // Relaxed: a hint for the lease size only; any value is a report Redis made.
        let budget = self.budget.load(Ordering::Relaxed);
        (budget / BUDGET_SHARE).min(u64::from(self.max_lease))
    }

    /// The limiter's exact per-call decision for `n`, giving up at `deadline` (`shortened`: part
    /// of the call's time went to waiting for the owner, so a timeout is not the breaker's to
    /// count); what it says is left becomes the budget.
    async fn exact(
        &self,
        n: u32,
        deadline: Instant,
        shortened: bool,
    ) -> Result<Outcome, RequestError> {
        // Less than the least time a call is sent with left (after a wait for the owner, or a
        // refund): not sent.
        if let Some(outcome) = self.out_of_time(n, deadline, self.min_call_time(), "a decision") {
            return Ok(outcome);
        }
        // A timeout of a call shortened by a wait for the owner is still within the call's one
        // timeout (the backend's): decided by the policy, but not the breaker's to count.
        let on_timeout = match shortened {
            true => Excuse::Breaker,
            false => Excuse::None,
        };
        let outcome = self
            .limiter
            .outcome_by(&self.key, n, deadline, on_timeout)
            .await?;
        // Relaxed: a statistics counter; no other memory depends on it.
        self.counters.exact.fetch_add(1, Ordering::Relaxed);
        if outcome.failure().is_none() {
            // Relaxed: a hint (see `exact_suffices`).
            self.budget
                .store(outcome.decision().remaining(), Ordering::Relaxed);
        }
        Ok(outcome)
    }

    /// Replaces the lease for a request of `n` the lease could not serve (a call made at
    /// `asked`, to be decided by `deadline`).
    async fn refill(
        &self,
        n: u32,
        asked: Instant,
        deadline: Instant,
    ) -> Result<Outcome, RequestError> {
        let mut waited = false;
        loop {
            match self.start_refill(n, asked, deadline, waited) {
                Start::Out(calls) => {
                    // Another caller is replacing the lease. While the key's breaker is open
                    // or half-open, its call may be the breaker's probe, out for up to the
                    // timeout on a server that does not answer: this call is the limiter's
                    // per-call decision instead, which the breaker short-circuits at once while
                    // its probe is out (or which is the probe, when one is due), as for any
                    // other caller. (Calls whose reply came are settled first: their lease may
                    // serve this one.)
                    if calls.peek().is_none() && !self.breaker_closed() {
                        // Polled once first, as `release` polls them: their own caller may be
                        // stalled (never polled again) with their reply waiting, the probe
                        // unreported, the breaker half-open (short-circuiting this call's
                        // per-call decision) until it presumes the probe lost. A reply found is
                        // taken in (the probe reported; its lease may serve this call), and
                        // this call looks again. Once the breaker closed, wait as below.
                        if let Some(reply) = calls.clone().now_or_never() {
                            self.settle(&calls, &reply);
                            continue;
                        }
                        if !self.breaker_closed() {
                            // SeqCst: see `unserved`. Stored under the owner's lock before the
                            // calls were made, so calls found out carry the refund it says is
                            // kept.
                            if !self.refund_kept.load(Ordering::SeqCst) {
                                return self.exact(n, deadline, false).await;
                            }
                            // The calls send a kept refund first, perhaps not let out yet
                            // (their caller between making them and the breaker's admission of
                            // it). A per-call decision now could be the breaker's probe, reach
                            // the key first and move it past the refund's word (refused:
                            // stranded). Decided as a short circuit instead while they are out
                            // and the breaker is still not closed: the refund is, or will be,
                            // the probe.
                            return Ok(self.behind_a_kept_refund(n));
                        }
                    }
                    // Otherwise wait for them, polling them (their reply is taken in by
                    // whichever caller polls first), but not past this call's own deadline
                    // (their Redis call may take the whole timeout).
                    match until_deadline(calls.clone(), deadline).await {
                        Ok(reply) => self.settle(&calls, &reply),
                        Err(()) => return Ok(self.waited_out(n)),
                    }
                    waited = true;
                }
                Start::Decided(outcome) => return Ok(outcome),
                Start::Exact => return self.exact(n, deadline, waited).await,
                Start::Sent(calls, ()) => {
                    let reply = calls.clone().await;
                    self.settle(&calls, &reply);
                    return match reply.take {
                        Some(taken) => Ok(taken.outcome),
                        // Near the limit: the exact per-call decision, after the refund.
                        None => self.exact(n, deadline, waited).await,
                    };
                }
            }
        }
    }

    /// What a refill of a request of `n` (a call made at `asked`, to be decided by `deadline`;
    /// `waited`: it waited for another caller's calls) does next, decided under the owner's
    /// lock: wait for the calls out; serve from a lease published meanwhile, or take the
    /// failure of a refill that failed meanwhile; or retire the lease and send its refund and
    /// the request for a new one (near the limit, the exact per-call decision instead, after
    /// the refund if there is one).
    fn start_refill(&self, n: u32, asked: Instant, deadline: Instant, waited: bool) -> Start<()> {
        let mut owner = self.lock_owner();
        if let Some(calls) = self.calls_out(&owner) {
            return Start::Out(calls);
        }
        // Another caller may have published a lease while this one waited.
        if let Some((left, now)) = self.slot.serve(n, self.clock()) {
            return Start::Decided(Outcome::from_backend(self.served(left, now)));
        }
        // A refill that failed while this call waited: its failure is this call's too (one
        // failed call per outage and timeout, not one per waiting caller).
        let failed_meanwhile = owner
            .failed
            .as_ref()
            .filter(|(at, _)| waited && *at >= asked)
            .map(|(_, error)| error.clone());
        if let Some(error) = failed_meanwhile {
            drop(owner);
            return Start::Decided(self.limiter.handler().decide(&self.key, n, error));
        }
        // Each call goes out only with the least time a call is sent with left: a refund (a
        // retired lease's unserved permits, or one kept) gets half of what is left, so with one
        // to send the refill needs twice that. (Only after a long wait for another caller's
        // calls, or a thread held that long: a refill starts with the whole timeout.) With less,
        // nothing is sent and nothing is touched: the lease stays published (still served
        // while it lasts), a kept refund stays kept, and the request is a timeout decided as a
        // short circuit (the deny cache first, then the policy), not told to the breaker.
        // Conservative: the permits left may all be served, or a kept refund given up, before
        // the refund would be made.
        let refund_coming = owner.pending.is_some()
            || (self.limiter.algorithm().refund_script().is_some()
                && owner.lease.granted() > 0
                && self.slot.left() > 0);
        let needed = self.min_call_time() * if refund_coming { 2 } else { 1 };
        if let Some(outcome) = self.out_of_time(n, deadline, needed, "a lease") {
            drop(owner);
            return Start::Decided(outcome);
        }
        // Before anything is sent: the new lease's lifetime counts from here. The earlier of
        // two reads: a one-shot leaping read (up to the lag horizon ahead) would otherwise
        // stretch the lease's life by the leap, and a window's lease past the window the
        // server counted it in (the serving reads after it do not leap).
        let sent = {
            let clock = self.clock();
            clock.now_nanos().min(clock.now_nanos())
        };
        let old = std::mem::replace(&mut owner.lease, NO_LEASE);
        let unused = self.retire(&mut owner);
        if old.granted() > 0 {
            if sent < old.expires_at() {
                // Ran out before it expired: lease more.
                owner.size = owner.size.saturating_mul(2).min(self.max_lease);
            } else if unused > 0 {
                // Expired unused: lease less.
                owner.size = (owner.size / 2).max(1);
            }
        }
        // At least one permit more than the request while the budget and the largest lease
        // allow it, so that a size halved down by idle periods grows back with use.
        let want = u64::from(owner.size)
            .max(u64::from(n) + 1)
            .min(self.lease_cap())
            .max(u64::from(n));
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        // The old lease's refund (or one kept after a failed call) goes first (it must find
        // the key as its lease left it), within half of what is left of the call's time; the
        // next request gets the rest: the call returns within its one timeout, even when
        // neither is answered. A refund whose call failed decides this call (by the policy,
        // with that failure): no request follows it into a server that just failed. One the
        // breaker did not let out is kept, and decides this call as a short circuit: the
        // request must not overtake it (see `send`).
        let fresh = self.refund_of(&old, unused);
        let refund = self
            .refund_to_send(&mut owner, fresh)
            .map(|(refund, retry)| {
                let now = Instant::now();
                let half = deadline.saturating_duration_since(now) / 2;
                let refund_deadline = now.checked_add(half).unwrap_or(deadline);
                (refund, refund_deadline, waited, retry)
            });
        // Near the limit the lease would be the request: the exact per-call decision, made by
        // this caller (not holding the owner: there is no lease to serve), after the refund.
        if refund.is_none() && want <= n {
            return Start::Exact;
        }
        let take = Take {
            n,
            want,
            sent,
            deadline,
            waited,
        };
        Start::Sent(self.send(&mut owner, refund, Some(take)), ())
    }

    /// The refund of `unused` permits of the retired `lease`, if there is one to send: some
    /// unserved, of a lease Redis granted, of an algorithm that gives leases back.
    fn refund_of(&self, lease: &Lease, unused: u64) -> Option<Refund> {
        self.limiter.algorithm().refund_script()?;
        if unused == 0 || lease.granted() == 0 {
            return None;
        }
        let reset = duration_to_nanos(lease.decision().reset_after());
        Some(Refund {
            receipt: lease.receipt(),
            unused,
            name: refund_name(),
            until: lease.taken_at().saturating_add(reset),
            tries: 0,
        })
    }

    /// The owner's lock, held only between two awaits (nothing panics under it: a poisoned
    /// lock still holds a consistent owner).
    fn lock_owner(&self) -> MutexGuard<'_, Owner> {
        self.owner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The calls out (another caller's refill or `release`), if any: forgets calls that every
    /// caller polling them has dropped (their refund is kept in `pending`; a lease their
    /// request took is lost, as a dropped call's reply).
    fn calls_out(&self, owner: &Owner) -> Option<Calls> {
        owner.in_flight.as_ref()?.calls.upgrade()
    }

    /// Makes the calls of a refill or a `release` (the refund given back, then the request for
    /// a lease) and records them as out in `owner`; they go out when first polled. 'static:
    /// whichever caller of the key polls first drives them, so the caller that made them need
    /// not be polled again for the others to get on (its reply is settled by whoever finds
    /// it first).
    fn send(
        &self,
        owner: &mut Owner,
        refund: Option<(Refund, Instant, bool, bool)>,
        take: Option<Take>,
    ) -> Calls {
        let limiter = Arc::clone(&self.limiter);
        let key = self.key.clone();
        let redis_keys = self.redis_keys.clone();
        let lifetime_nanos = self.lifetime_nanos;
        let counted = refund
            .as_ref()
            .map(|(refund, _, _, retry)| (refund.unused, *retry));
        let calls = async move {
            let refund = match refund {
                Some((refund, deadline, excused, _)) => {
                    let sent = send_refund(&limiter, &key, &redis_keys, &refund, deadline, excused);
                    Some(sent.await)
                }
                None => None,
            };
            let failed = match &refund {
                Some(Err(error)) => Some(error.clone()),
                _ => None,
            };
            let take = match (take, failed) {
                // A refund whose call failed decides the request: no request follows it into a
                // server that just failed. One the breaker did not let out (kept) decides it
                // too, as a short circuit: the request must not overtake it. The breaker's
                // probe may fall due (or another call's probe close the breaker) between the
                // refund's admission and the request's: the request would be let out, and a
                // lease granted (or a per-call decision, near the limit) moves the key past the
                // refund's word, so that the refund could never land (given up, stranded).
                (Some(take), Some(error)) => {
                    let handler = limiter.handler();
                    let outcome = match error.is_circuit_open() {
                        // The deny cache first, as for a request the breaker short-circuits.
                        true => handler.decide_unsent(&key, take.n, error),
                        false => handler.decide(&key, take.n, error),
                    };
                    limiter.after_short_circuit(&outcome);
                    Some(Taken {
                        outcome,
                        lease: None,
                        n: take.n,
                        late: false,
                    })
                }
                (Some(take), None) if take.want > take.n => {
                    Some(take_lease(&limiter, &key, &redis_keys, lifetime_nanos, take).await)
                }
                // Near the limit: the request is the exact per-call decision, its caller's.
                (Some(_), None) => None,
                // A `release`: no request is decided by its refund's failure: counted here.
                (None, _) => {
                    if let Some(Err(error)) = &refund {
                        limiter.handler().count_failure(error);
                    }
                    None
                }
            };
            CallsReply { refund, take }
        };
        let boxed: Pin<Box<dyn Future<Output = CallsReply> + Send>> = Box::pin(calls);
        let calls = boxed.shared();
        if let Some(weak) = calls.downgrade() {
            owner.in_flight = Some(InFlight {
                calls: weak,
                refund: counted,
            });
        }
        calls
    }

    /// Takes in the `reply` of `calls`, once, if they are still the calls out (whoever polled
    /// them first; the others find them settled): what became of the refund, and the lease
    /// published (to serve the key's callers, the one that asked for it or not).
    fn settle(&self, calls: &Calls, reply: &CallsReply) {
        let mut owner = self.lock_owner();
        let ours = owner
            .in_flight
            .as_ref()
            .and_then(|in_flight| in_flight.calls.upgrade())
            .is_some_and(|out| out.ptr_eq(calls));
        if !ours {
            return;
        }
        let counted = owner
            .in_flight
            .take()
            .and_then(|in_flight| in_flight.refund);
        // Relaxed throughout: statistics counters and hints (see `exact_suffices`; the lease's
        // hints are published by the Release stores of `publish`); no other memory depends on
        // them.
        if let (Some(result), Some((permits, retry))) = (&reply.refund, counted) {
            let let_out = !matches!(result, Err(error) if error.is_circuit_open());
            if retry && let_out {
                self.counters.resent_refunds.fetch_add(1, Ordering::Relaxed);
            }
            match result {
                Ok(Refunded::Landed) => {
                    self.counters.refunded.fetch_add(permits, Ordering::Relaxed);
                    owner.pending = None;
                }
                Ok(Refunded::Refused) => owner.pending = None,
                // Not let out by the breaker (no call failed): kept.
                Err(error) if error.is_circuit_open() => {}
                // Failed: kept, and its next call is a resent refund.
                Err(_) => _ = self.counters.failed_refunds.fetch_add(1, Ordering::Relaxed),
            }
        }
        if let Some(Taken {
            outcome,
            lease,
            n,
            late,
        }) = &reply.take
        {
            if !late {
                owner.failed = outcome
                    .failure()
                    .filter(|error| !error.is_circuit_open())
                    .map(|error| (Instant::now(), error.clone()));
            }
            if lease.is_some() && owner.pending.take().is_some() {
                // A lease was granted on the key past a kept refund's word: it can no longer
                // land.
                self.counters
                    .given_up_refunds
                    .fetch_add(1, Ordering::Relaxed);
            }
            match lease {
                Some(lease) if outcome.failure().is_none() => {
                    self.budget
                        .store(lease.decision().remaining(), Ordering::Relaxed);
                    if lease.granted() > 0 {
                        self.counters.leases.fetch_add(1, Ordering::Relaxed);
                        self.counters
                            .leased
                            .fetch_add(u64::from(lease.granted()), Ordering::Relaxed);
                        self.source_left
                            .store(lease.decision().remaining(), Ordering::Relaxed);
                        let reset = duration_to_nanos(lease.decision().reset_after());
                        self.reset_at
                            .store(lease.taken_at().saturating_add(reset), Ordering::Relaxed);
                        // The lease's first `n` went to the request that took it (in its
                        // outcome, whoever settles it).
                        self.slot.publish(lease.granted() - n, lease.expires_at());
                        owner.lease = *lease;
                    }
                }
                _ => {}
            }
        }
        // SeqCst: see `unserved`.
        self.refund_kept
            .store(owner.pending.is_some(), Ordering::SeqCst);
    }

    /// The refund to send now, and whether it was sent before: the refund kept after a failed
    /// call, or `fresh` (a retired lease's: it replaces a kept one, which can no longer land
    /// once `fresh`'s lease was granted); `None` when there is none, or its time has passed
    /// (given up, unsent). It stays kept in the owner while its call is out: calls dropped
    /// meanwhile leave it to be sent again, under its name.
    fn refund_to_send(&self, owner: &mut Owner, fresh: Option<Refund>) -> Option<(Refund, bool)> {
        // Relaxed throughout: statistics counters; no other memory depends on them.
        if let Some(fresh) = fresh
            && owner.pending.replace(fresh).is_some()
        {
            self.counters
                .given_up_refunds
                .fetch_add(1, Ordering::Relaxed);
        }
        // Past its time a refund could no longer land as it was taken: given up unsent. The
        // earlier of two reads: a one-shot leaping read would give up (and strand) a refund
        // that could still land (as `refill`'s `sent`).
        let now = {
            let clock = self.clock();
            clock.now_nanos().min(clock.now_nanos())
        };
        if owner
            .pending
            .as_ref()
            .is_some_and(|refund| now >= refund.until)
        {
            owner.pending = None;
            self.counters
                .given_up_refunds
                .fetch_add(1, Ordering::Relaxed);
        }
        // SeqCst: see `unserved` (stored again when the calls are settled; calls dropped while
        // out leave the refund kept, and this hint with it).
        self.refund_kept
            .store(owner.pending.is_some(), Ordering::SeqCst);
        let refund = owner.pending.as_mut()?;
        let retry = refund.tries > 0;
        refund.tries = refund.tries.saturating_add(1);
        Some((refund.clone(), retry))
    }
}

/// What a refill or a `release` does next (decided under the owner's lock, released before it
/// awaits anything).
enum Start<T> {
    /// Wait for another caller's calls, then look again.
    Out(Calls),
    /// Decided without a call of its own.
    Decided(Outcome),
    /// A refill: the exact per-call decision (near the limit). A `release`: nothing to send.
    Exact,
    /// Wait for its own calls, just made (a `release`'s: with the refund's permits).
    Sent(Calls, T),
}

/// A refill's request for a lease: between `n` and `want` permits (none when `want` is at most
/// `n`: the request is then the exact per-call decision, made by its caller after the refund),
/// its lifetime counted from `sent`, by `deadline` (`waited`: part of the call's time went to
/// waiting for another caller's calls, so a timeout is not the breaker's to count).
#[derive(Clone, Copy, Debug)]
struct Take {
    n: u32,
    want: u32,
    sent: u64,
    deadline: Instant,
    waited: bool,
}

/// The request of `take` for a lease of `key` of `limiter` (its Redis keys `redis_keys`,
/// leases lasting `lifetime_nanos`), through the limiter's deny cache, breaker and policy: its
/// outcome, and the lease Redis granted (if any reply came).
async fn take_lease<A: LeaseAlgorithm, C: Clock + Clone>(
    limiter: &RedisLimiter<A, C>,
    key: &str,
    redis_keys: &[String],
    lifetime_nanos: u64,
    take: Take,
) -> Taken {
    // Its calls polled late (their caller stalled, a runtime busy elsewhere): with less than
    // the least time a call is sent with left, the request would time out, after the server
    // granted (and took) a lease nobody receives where the script does not refuse it as late.
    // Not sent: a timeout, decided as a short circuit (the deny cache first, then the
    // policy), not told to the breaker.
    let needed = min_call_time(limiter.backend().timeout());
    let left = take.deadline.saturating_duration_since(Instant::now());
    if left < needed {
        let error = not_sent(limiter.backend(), redis_keys, left, needed, "a lease");
        return Taken {
            outcome: limiter.handler().decide_unsent(key, take.n, error),
            lease: None,
            n: take.n,
            late: true,
        };
    }
    let mut taken = None;
    let slot = &mut taken;
    let store = move || async move {
        let lease = lease_script(limiter, redis_keys, lifetime_nanos, take).await?;
        *slot = Some(lease);
        Ok(lease_decision(&lease, take.n))
    };
    // A timeout of a call shortened by the wait for the owner says nothing about Redis.
    let excuse = |error: &BackendError| match take.waited && error.is_timeout() {
        true => Excuse::Breaker,
        false => Excuse::None,
    };
    let node = || limiter.node_of(key);
    let outcome = limiter
        .handler()
        .run_async_excusing(key, take.n, node, store, excuse)
        .await;
    limiter.after_short_circuit(&outcome);
    Taken {
        outcome,
        lease: taken,
        n: take.n,
        late: false,
    }
}

/// One lease script: between `take.n` and `take.want` permits, as many as fit; its lifetime
/// counts from `take.sent` (a clock read taken before the request).
async fn lease_script<A: LeaseAlgorithm, C: Clock + Clone>(
    limiter: &RedisLimiter<A, C>,
    redis_keys: &[String],
    lifetime_nanos: u64,
    take: Take,
) -> Result<Lease, BackendError> {
    let Take {
        n,
        want,
        sent,
        deadline,
        ..
    } = take;
    let backend = limiter.backend();
    let algorithm = limiter.algorithm();
    let mut args = algorithm.args(n);
    args[3] = u64::from(want);
    let reply = backend
        .eval(algorithm.lease_script(), redis_keys, &args, deadline)
        .await?;
    let protocol = || {
        BackendError::at(
            FailureKind::Protocol,
            backend.failed_at(redis_keys),
            std::io::Error::other(format!(
                "unexpected reply from floodgate's lease script: {reply:?}"
            )),
        )
    };
    let &[
        allowed,
        limit,
        remaining,
        retry,
        reset,
        granted,
        word,
        stamp,
        now,
    ] = reply.as_slice()
    else {
        return Err(protocol());
    };
    let decision = decision_from_reply(
        &[allowed, limit, remaining, retry, reset, now],
        backend.server(),
    )?;
    let granted = u32::try_from(granted).map_err(|_| protocol())?;
    let receipt = [
        u64::try_from(word).map_err(|_| protocol())?,
        u64::try_from(stamp).map_err(|_| protocol())?,
    ];
    if decision.is_allowed() != (granted > 0) || (granted > 0 && !(n..=want).contains(&granted)) {
        return Err(protocol());
    }
    let mut expires_at = sent.saturating_add(lifetime_nanos);
    if algorithm.ends_with_window() {
        // A grant's `reset_after` is the time from the script's clock read to the end of
        // the window that counted it; `sent` came before that read.
        let window_end = sent.saturating_add(duration_to_nanos(decision.reset_after()));
        expires_at = expires_at.min(window_end);
    }
    Ok(Lease::new(granted, sent, expires_at, decision).with_receipt(receipt))
}

/// Sends `refund` of `key` of `limiter` (its Redis keys `redis_keys`: its unused permits back if
/// the key still holds the word its lease wrote) through the key's breaker, giving up at
/// `deadline`: landed, refused (another decision on the key came first), or the call's failure
/// (reported to the breaker unless `excused` and a timeout; not counted in the limiter's
/// failures): unreachable, timed out (perhaps after the script ran), an unexpected reply, or not
/// sent (the breaker open). A [`LeasedKey`]'s refunds, and a dropped one's (which has no `self`).
async fn send_refund<A: LeaseAlgorithm, C: Clock + Clone>(
    limiter: &RedisLimiter<A, C>,
    key: &str,
    redis_keys: &[String],
    refund: &Refund,
    deadline: Instant,
    excused: bool,
) -> Result<Refunded, BackendError> {
    let backend = limiter.backend();
    let algorithm = limiter.algorithm();
    let Some(script) = algorithm.refund_script() else {
        return Ok(Refunded::Refused);
    };
    let args = algorithm.refund_args(refund.receipt, refund.unused);
    // The key's, then this refund's mark (in the key's slot: its name starts with the key's,
    // hash tag and all).
    let mut keys = redis_keys.to_vec();
    keys.push(format!("{}:refund:{}", redis_keys[0], refund.name));
    let call = || async {
        // A reply past the deadline (first field 2) is the backend's timeout error.
        match backend.eval(script, &keys, &args, deadline).await? {
            reply if reply.first() == Some(&1) => Ok(Refunded::Landed),
            reply if reply.first() == Some(&0) => Ok(Refunded::Refused),
            reply => Err(BackendError::at(
                FailureKind::Protocol,
                backend.failed_at(&keys),
                std::io::Error::other(format!(
                    "unexpected reply from floodgate's refund script: {reply:?}"
                )),
            )),
        }
    };
    let node = limiter.node_of(key);
    let excused = |error: &BackendError| excused && error.is_timeout();
    limiter
        .handler()
        .run_aside(node.as_deref(), call, excused)
        .await
}

/// Gives back, in the background, the unserved permits of the current lease and a refund kept
/// after a failed call (see [`LeasedKey`], "Drop").
impl<A: LeaseAlgorithm, C: Clock + Clone> Drop for LeasedKey<A, C> {
    fn drop(&mut self) {
        // `&mut self`: no caller serves or holds the owner any more (nor polls its calls: any
        // still out were dropped with their callers' futures, their refund kept in `pending`).
        let owner = self.owner.get_mut().unwrap_or_else(PoisonError::into_inner);
        let lease = std::mem::replace(&mut owner.lease, NO_LEASE);
        let kept = owner.pending.take();
        let unused = self.slot.retire();
        let fresh = self.refund_of(&lease, unused);
        let dropped = self.limiter.dropped();
        // The retired lease's refund replaces a kept one (as in `release`: once its lease was
        // granted, an older refund can no longer land). Not a case that arises: a kept refund
        // is given up when a later lease is granted.
        let refund = match (fresh, kept) {
            (Some(fresh), kept) => {
                if let Some(kept) = kept {
                    dropped.held(kept.unused, false);
                    dropped.stranded(kept.unused);
                }
                fresh
            }
            (None, Some(kept)) => {
                if unused > 0 {
                    // Unserved permits of a lease never given back (an anchored window's).
                    dropped.held(unused, false);
                    dropped.stranded(unused);
                }
                kept
            }
            (None, None) => {
                if unused > 0 {
                    dropped.held(unused, false);
                    dropped.stranded(unused);
                }
                return;
            }
        };
        dropped.held(refund.unused, true);
        let task = DropRefund {
            limiter: Arc::clone(&self.limiter),
            key: std::mem::take(&mut self.key),
            redis_keys: std::mem::take(&mut self.redis_keys),
            refund,
            settled: false,
        };
        // On the runtime that built the backend's connection (its own for `blocking_connect`),
        // wherever the drop runs: it drives the connection the refund goes through and has the
        // timers its timeout needs (a runtime current here may have neither). Spawning blocks
        // nothing. A runtime shut down drops the task at once (its refund counted stranded).
        drop(self.limiter.backend().runtime().spawn(task.send()));
    }
}

/// What a dropped [`LeasedKey`] had to give back, sent by a task in the background (see
/// [`LeasedKey`], "Drop"). Counted in its limiter's
/// [`dropped_leases`](RedisLimiter::dropped_leases): `permits` when made, then `refunded` or
/// `stranded` once, when the refund's fate is known, or when the task is dropped unfinished (a
/// runtime shut down before it ran, or while its call was out: the refund may have landed).
struct DropRefund<A: LeaseAlgorithm, C: Clock + Clone> {
    limiter: Arc<RedisLimiter<A, C>>,
    key: String,
    redis_keys: Vec<String>,
    refund: Refund,
    /// Whether its outcome was counted.
    settled: bool,
}

impl<A: LeaseAlgorithm, C: Clock + Clone> DropRefund<A, C> {
    /// Sends the refund once, within one timeout from now, unless its time has passed; no
    /// retry (there is no key left to keep it). A failed call is counted in the limiter's
    /// failures (and told to the breaker), as [`LeasedKey::release`]'s is.
    async fn send(mut self) {
        // As `refund_to_send`: the earlier of two reads (a one-shot leaping read would give up,
        // and strand, a refund that could still land).
        let now = {
            let clock = self.limiter.handler().clock();
            clock.now_nanos().min(clock.now_nanos())
        };
        if now < self.refund.until {
            let deadline = deadline(self.limiter.backend().timeout());
            let sent = send_refund(
                &self.limiter,
                &self.key,
                &self.redis_keys,
                &self.refund,
                deadline,
                false,
            )
            .await;
            match sent {
                Ok(Refunded::Landed) => {
                    self.limiter.dropped().refunded(self.refund.unused);
                    self.settled = true;
                    return;
                }
                Ok(Refunded::Refused) => {}
                // No request is decided by this failure: counted here.
                Err(error) => self.limiter.handler().count_failure(&error),
            }
        }
        // Refused, failed, not let out by the breaker, or past its time: not given back.
        self.limiter.dropped().stranded(self.refund.unused);
        self.settled = true;
    }
}

impl<A: LeaseAlgorithm, C: Clock + Clone> Drop for DropRefund<A, C> {
    fn drop(&mut self) {
        if !self.settled {
            // Dropped before its outcome was known (its runtime shut down).
            self.limiter.dropped().stranded(self.refund.unused);
        }
    }
}

/// What the dropped [`LeasedKey`]s of one [`RedisLimiter`] held and what became of it
/// ([`RedisLimiter::dropped_leases`]; see [`LeasedKey`], "Drop").
///
/// ```
/// use floodgate::redis::DroppedLeases;
/// let counts = DroppedLeases { refunds: 3, permits: 20, refunded: 12, stranded: 5 };
/// assert_eq!(counts.in_flight(), 3);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DroppedLeases {
    /// Refunds started in the background by dropped keys: one per key dropped holding unserved
    /// permits of a lease that can be given back, or a refund kept after a failed call.
    pub refunds: u64,
    /// Unserved permits the dropped keys held: their current lease's and their kept refund's
    /// (an anchored window's too, which are never given back).
    pub permits: u64,
    /// Of `permits`, given back to Redis (refunds confirmed).
    pub refunded: u64,
    /// Of `permits`, not given back (under-admission: they stay taken until the bucket's time
    /// passes them, or the window ends): an anchored window's lease; a refund the server
    /// refused (a decision on the key came first); one whose call failed (also counted in
    /// [`failures`](RedisLimiter::failures) and told to the breaker) or that the breaker did not
    /// let out, neither sent again; one past its lease's time; one whose task was dropped before
    /// its outcome was known (its runtime shut down: if its call was out, it may have landed).
    pub stranded: u64,
}

impl DroppedLeases {
    /// Permits of refunds still out (or whose task has not run yet): `permits − refunded −
    /// stranded`.
    ///
    /// ```
    /// use floodgate::redis::DroppedLeases;
    /// assert_eq!(DroppedLeases { refunds: 1, permits: 7, ..DroppedLeases::default() }.in_flight(), 7);
    /// ```
    pub fn in_flight(&self) -> u64 {
        self.permits
            .saturating_sub(self.refunded)
            .saturating_sub(self.stranded)
    }
}

/// The counters of [`DroppedLeases`], kept by the limiter (a dropped key's die with it). SeqCst
/// throughout (rare: once or twice per dropped key): a reader that sees a refund's outcome sees
/// its `permits` too (read after the outcomes), so `in_flight` never reads low.
#[derive(Debug, Default)]
pub(super) struct DropCounters {
    refunds: AtomicU64,
    permits: AtomicU64,
    refunded: AtomicU64,
    stranded: AtomicU64,
}

impl DropCounters {
    /// A dropped key held `permits`; `refund`: a refund of them was started.
    fn held(&self, permits: u64, refund: bool) {
        if refund {
            self.refunds.fetch_add(1, Ordering::SeqCst);
        }
        self.permits.fetch_add(permits, Ordering::SeqCst);
    }

    fn refunded(&self, permits: u64) {
        self.refunded.fetch_add(permits, Ordering::SeqCst);
    }

    fn stranded(&self, permits: u64) {
        self.stranded.fetch_add(permits, Ordering::SeqCst);
    }

    pub(super) fn counts(&self) -> DroppedLeases {
        // The outcomes first: each was counted after its `permits` (in the dropping thread,
        // before the task that counts the outcome was spawned).
        let refunded = self.refunded.load(Ordering::SeqCst);
        let stranded = self.stranded.load(Ordering::SeqCst);
        DroppedLeases {
            refunds: self.refunds.load(Ordering::SeqCst),
            permits: self.permits.load(Ordering::SeqCst),
            refunded,
            stranded,
        }
    }
}

/// The decision for the request of `n` that took `lease`: the lease's own for a denial; for a
/// grant, the lease's unserved permits count as remaining.
fn lease_decision(lease: &Lease, n: u32) -> Decision {
    let d = lease.decision();
    if lease.granted() == 0 {
        return d;
    }
    let held = u64::from(lease.granted() - n);
    Decision::allow(
        d.limit(),
        d.remaining().saturating_add(held),
        duration_to_nanos(d.reset_after()),
    )
}

/// `max_lease`, at most `limit` (no lease can hold more), and at least 1.
fn lease_at_most(max_lease: u32, limit: u64) -> u32 {
    max_lease
        .min(u32::try_from(limit).unwrap_or(u32::MAX))
        .max(1)
}

/// The least time left to its deadline a call to Redis is sent with, on a backend whose timeout
/// is `timeout` (see [`LeasedKey::min_call_time`]).
fn min_call_time(timeout: Duration) -> Duration {
    timeout / MIN_CALL_SHARE
}

/// The error of a call for `what` on `redis_keys` not sent to `backend` because only `left` of
/// its time was left, under the `needed` it must have: a timeout naming the server, not told to
/// the circuit breaker (`RedisBackend::not_sent_because`).
fn not_sent(
    backend: &super::RedisBackend,
    redis_keys: &[String],
    left: Duration,
    needed: Duration,
    what: &str,
) -> BackendError {
    let reason = format!(
        "not sent: the call for {what} had {left:?} left of its time, under the {needed:?} a \
         call is sent with at least (LeasedKey::min_call_time)"
    );
    backend.not_sent_because(redis_keys, reason.into())
}

/// A call's deadline: `timeout` from now (the backend validated it to at most an hour).
fn deadline(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout).unwrap_or(now)
}
