//! [`RedisLimiter`]: one algorithm's Lua script run against Redis per decision, under a
//! [`FailurePolicy`].

use std::time::{Duration, Instant};

use crate::backend::waits;
use crate::backend::{
    BackendError, BreakerConfig, DENY_CACHE_MAX_KEYS, DenyCache, Excuse, FailureCounts,
    FailureHandler, FailureKind, FailurePolicy, NodeBreakers, Outcome, RequestError,
};
use crate::clock::{Clock, QuantaClock};
use crate::decision::{AcquireError, ConfigError, Decision};

use std::sync::Arc;

use super::RedisBackend;
use super::coalesce::Coalescer;
use super::connection::{Fields6, Keys, Request};
use super::leased::{DropCounters, DroppedLeases};

pub(crate) mod sealed {
    use crate::decision::ConfigError;
    use crate::limiter::Algorithm;

    /// How an algorithm's batch script replies.
    #[derive(Clone, Copy, Debug)]
    pub enum Batch {
        /// Five fields per decision, as the one-decision script's reply (the format of
        /// `RedisBackend::eval_batch`: the sliding window's and sliding log's batch scripts).
        Each(&'static crate::redis::lua_script::LuaScript),
        /// The tally format of `RedisBackend::eval_tally`: each key's state as the script read
        /// it, from which the client replays the decisions with the [`Replay`].
        Tally(&'static crate::redis::lua_script::LuaScript, Replay),
    }

    /// One decision of a tally batch replayed on the client, exactly as the batch script
    /// decided it on the server: from the key's `state` (as the script read it, updated in
    /// place), the shared arguments, the server's time (µs) and `n`, the decision's five reply
    /// fields (`{allowed, limit, remaining, retry_after_us, reset_after_us}`); `None` if they
    /// overflow an `i64` (a state no script of this crate replies: a protocol error).
    pub type Replay =
        fn(state: &mut [i64; 2], args: [u64; 4], now: i64, n: u64) -> Option<[i64; 5]>;

    /// What a Redis algorithm hands the generic limiter. Sealed: the scripts and the reply
    /// format are one contract, kept inside this crate.
    pub trait Script: Clone + Send + Sync + 'static {
        /// The local algorithm used by [`FailurePolicy::LocalFallback`](crate::backend::FailurePolicy).
        type Local: Algorithm;
        /// What Redis adds to the local configuration's checks (microsecond time, millisecond
        /// expiries, Lua's exact integers): checked when the limiter is built.
        fn validate(&self) -> Result<(), ConfigError>;
        /// The Lua script; it replies `{allowed, limit, remaining, retry_after_us, reset_after_us,
        /// now_us}`, as an array or (fixed windows, GCRA) one string of them, space-separated.
        fn script(&self) -> &'static crate::redis::lua_script::LuaScript;
        /// The script deciding a batch in order, as the one-decision script would one call after
        /// another at the same instant: replying per decision, or in the tally format.
        fn batch_script(&self) -> Batch;
        /// Suffixes of the Redis keys of one limiter key (`KEYS[1]`, `KEYS[2]`, …).
        fn key_suffixes(&self) -> &'static [&'static str];
        /// `ARGV` for a request of `n` permits.
        fn args(&self, n: u32) -> [u64; 4];
        /// How many of [`args`](Self::args) the one-decision script reads (its deadline is sent
        /// after them): 3 (the default: the fourth is an unused 0 for fixed windows, GCRA and
        /// the sliding log, and an argument sent costs the server an object, about 860
        /// instructions), or 4 (the sliding window, whose fourth is `n`).
        fn script_args(&self) -> usize {
            3
        }
        /// The limit, for the local share.
        fn limit_u32(&self) -> u32;
        /// The sorted-set entries a decision of `n` permits may touch on the server, for an
        /// algorithm whose work grows with `n` or the limit (the sliding log); 0 (the default)
        /// for constant work. A coalesced batch keeps their sum within one capped call's.
        fn entries(&self, n: u32) -> u64 {
            let _ = n;
            0
        }
        /// The local twin with a limit of `limit`.
        fn local(&self, limit: u32) -> Result<Self::Local, ConfigError>;
    }
}

/// A rate-limiting algorithm that runs on Redis as one Lua script: the local configuration types
/// [`FixedWindow`](crate::FixedWindow), [`SlidingWindow`](crate::SlidingWindow),
/// [`SlidingLog`](crate::SlidingLog) and [`Gcra`](crate::Gcra) (with its aliases
/// [`TokenBucket`](crate::TokenBucket), [`LeakyBucket`](crate::LeakyBucket)). Sealed.
pub trait RedisAlgorithm: sealed::Script {
    /// The limit in force (the `limit` of every [`Decision`]).
    fn limit(&self) -> u64 {
        u64::from(self.limit_u32())
    }

    /// `n` must be in `1..=limit`.
    ///
    /// # Errors
    /// [`AcquireError`] otherwise.
    fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        crate::decision::check_permits(n, self.limit())
    }
}

/// A limit shared through Redis by every process that uses the same `name`, key and
/// configuration. Each decision is decided atomically by a Lua script (one round trip, on the
/// server's clock; concurrent decisions share one call, decided in order: see
/// [the module](crate::redis)) returning the same [`Decision`] as the local limiters; when Redis gives no answer within the
/// backend's timeout, the [`FailurePolicy`] decides and the failure is counted.
///
/// Keys look like `{name:key}:suffix`: every key of one limiter key shares the hash tag
/// `{name:key}`, so a script only touches one Redis Cluster slot.
///
/// **Outages.** A circuit breaker ([`BreakerConfig::default`], see
/// [`with_breaker`](Self::with_breaker)), one per master on a Redis Cluster, stops calling a
/// failing Redis (master) after that many consecutive failures: the policy then decides at
/// once, without waiting for the timeout (counted in [`FailureCounts::short_circuited`]; a
/// fail-closed denial's `retry_after` is the time until the breaker's next probe), until a
/// probe succeeds.
///
/// **Deny cache, on by default.** A [`DenyCache`] of [`DENY_CACHE_MAX_KEYS`] keys (see
/// [`with_deny_cache`](Self::with_deny_cache)): once Redis denies `n` permits for a key with a
/// `retry_after`, requests for `n` or more on that key are denied in this process until then,
/// without a round trip (counted in [`DenyCache::denied_locally`]). On by default because
/// Redis's `retry_after` is exact: each script decides atomically on the server's clock, a
/// denial changes no state, and nothing gives permits back, so no process can be granted those
/// permits before `retry_after`; the cache measures it from a clock read taken before the
/// request was sent, so it never outlasts Redis's own. The local answer is the one Redis would
/// give, without the round trip (only `remaining` reads 0). One exception: a
/// [`LeasedKey`](super::LeasedKey)'s refund gives permits back, so after one the cache may deny
/// a little longer than Redis would (under-admission, never over). Memcached's cache is off by default
/// for the opposite reason: its denials can be cautious under contention.
///
/// ```no_run
/// use floodgate::backend::FailurePolicy;
/// use floodgate::FixedWindow;
/// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
/// use std::time::Duration;
///
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let backend = RedisBackend::connect(RedisConfig::single("redis://127.0.0.1:6379")).await?;
/// let per_minute = RedisLimiter::new(
///     &backend,
///     "api",
///     FixedWindow::new(100, Duration::from_secs(60))?,
///     FailurePolicy::local_fallback(0.25)?,
/// )?;
/// let decision = per_minute.try_acquire("user-42", 1).await?;
/// if !decision.is_allowed() {
///     println!("429, retry after {:?}", decision.retry_after());
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RedisLimiter<A: RedisAlgorithm, C: Clock + Clone = QuantaClock> {
    backend: RedisBackend,
    /// Sends this limiter's decisions, coalescing concurrent ones.
    coalescer: Arc<Coalescer>,
    name: String,
    algorithm: A,
    failures: FailureHandler<A::Local, C>,
    /// What dropped [`LeasedKey`](super::LeasedKey)s of this limiter gave back, or could not.
    dropped: DropCounters,
}

impl<A: RedisAlgorithm> RedisLimiter<A, QuantaClock> {
    /// A limiter named `name` (the namespace of its keys) running `algorithm` on `backend`.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for an empty name or one containing `{` or `}` (it would break
    /// the hash tag) or `:` (name `a` with key `b:c` and name `a:b` with key `c` would share
    /// `{a:b:c}`); a configuration Redis cannot keep ([`ConfigError::NotWhole`] for a window or
    /// cell that is not whole milliseconds, [`ConfigError::RateTooHigh`] for a permit worth
    /// under 1 µs, [`ConfigError::DurationOutOfRange`] past 2^51 µs); the local algorithm's
    /// error when the policy's share cannot be built.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// assert!(RedisLimiter::new(&backend, "api", window.clone(), FailurePolicy::FailOpen).is_ok());
    /// assert!(RedisLimiter::new(&backend, "a:b", window, FailurePolicy::FailOpen).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(
        backend: &RedisBackend,
        name: &str,
        algorithm: A,
        policy: FailurePolicy,
    ) -> Result<Self, ConfigError> {
        Self::with_clock(backend, name, algorithm, policy, QuantaClock::new())
    }
}

impl<A: RedisAlgorithm, C: Clock + Clone> RedisLimiter<A, C> {
    /// As [`new`](RedisLimiter::new), with `clock` for what this process decides alone: the
    /// circuit breaker's back-off, the deny cache's deadlines and the local fallback's windows.
    /// Redis decides on its own clock whatever this one says.
    ///
    /// # Errors
    /// As [`new`](RedisLimiter::new).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{FixedWindow, ManualClock};
    /// use std::time::Duration;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// let clock = ManualClock::new();
    /// let limiter = RedisLimiter::with_clock(&backend, "api", window, FailurePolicy::FailOpen, clock)?;
    /// assert!(limiter.breaker().is_some() && limiter.deny_cache().is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(
        backend: &RedisBackend,
        name: &str,
        algorithm: A,
        policy: FailurePolicy,
        clock: C,
    ) -> Result<Self, ConfigError> {
        if name.is_empty() || name.contains(['{', '}', ':']) {
            return Err(ConfigError::Invalid {
                what: "Redis limiter name",
                why: "must be non-empty and contain no '{', '}' or ':'",
            });
        }
        algorithm.validate()?;
        let limit = algorithm.limit_u32();
        let twin = algorithm.clone();
        let failures = FailureHandler::with_clock(
            policy,
            backend.timeout(),
            move |l| twin.local(l),
            limit,
            clock,
        )?
        .observed_as("redis", name)
        .with_breaker(BreakerConfig::default())
        .with_deny_cache(DENY_CACHE_MAX_KEYS)?;
        Ok(RedisLimiter {
            backend: backend.clone(),
            coalescer: Arc::new(Coalescer::new(
                backend.clone(),
                algorithm.script(),
                algorithm.batch_script(),
                n_slot(&algorithm),
                algorithm.script_args(),
            )),
            name: name.to_owned(),
            algorithm,
            failures,
            dropped: DropCounters::default(),
        })
    }

    /// The algorithm and its configuration.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::Gcra;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::Rate;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let gcra = Gcra::new(Rate::per_second(5), 10)?;
    /// let limiter = RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?;
    /// assert_eq!(limiter.algorithm().capacity(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// The failure policy in force.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::SlidingLog;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let log = SlidingLog::new(5, Duration::from_secs(60))?;
    /// let limiter = RedisLimiter::new(&backend, "login", log, FailurePolicy::FailClosed)?;
    /// assert_eq!(limiter.policy(), FailurePolicy::FailClosed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policy(&self) -> FailurePolicy {
        self.failures.policy()
    }

    /// Failures so far (each decided by the policy).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// let limiter = RedisLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// assert_eq!(limiter.failures().total(), 0); // nothing asked of Redis yet
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn failures(&self) -> FailureCounts {
        self.failures.counts()
    }

    /// What the [`LeasedKey`](super::LeasedKey)s of this limiter that were dropped holding
    /// permits (their current lease's unserved ones, or a refund kept after a failed call) gave
    /// back in the background, and what they could not (see [`LeasedKey`](super::LeasedKey),
    /// "Drop"). A dropped key's own [`counts`](super::LeasedKey::counts) die with it.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::redis::{DroppedLeases, LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::{Gcra, Rate};
    /// use std::sync::Arc;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let gcra = Gcra::new(Rate::per_second(1_000), 500)?;
    /// let limiter = Arc::new(RedisLimiter::new(&backend, "api", gcra, FailurePolicy::FailOpen)?);
    /// drop(LeasedKey::new(Arc::clone(&limiter), "k")); // held nothing: sends nothing
    /// assert_eq!(limiter.dropped_leases(), DroppedLeases::default());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn dropped_leases(&self) -> DroppedLeases {
        self.dropped.counts()
    }

    /// The counters of [`dropped_leases`](Self::dropped_leases).
    pub(super) fn dropped(&self) -> &DropCounters {
        &self.dropped
    }

    /// Sets the circuit breakers: `Some(config)` replaces the default configuration, `None`
    /// turns them off (every call then waits for Redis or its timeout).
    ///
    /// On a Redis Cluster there is one breaker per master: a call goes through the breaker of
    /// the master that owns its key's slot in the backend's copy of the slot map (see
    /// [`RedisBackend::server`]), so `failures` consecutive failures on one master open it for
    /// that master's keys only, and successes on the other masters do not reset its run. Keys
    /// whose master is not known yet (a lazy backend before its first read of the slot map)
    /// share one breaker, as on one server.
    ///
    /// A slot's move: while a master's breaker is open, no call for its slots is sent, so no
    /// failure re-reads the slot map; each short-circuited call starts a re-read instead (in
    /// the background, at most one per backend timeout, as after a failure). Once the copy
    /// names the slot's new owner, its calls go through that master's breaker; until then they
    /// stay short-circuited, and the old master's probe (a call for any of its slots, routed by
    /// redis-rs's own slot map) may fail and back off again. A master the copy no longer
    /// names at all (failed over, its slots all moved) gets no call, so its breaker would
    /// never be probed: the limiter drops it at its first call after that read of the map.
    ///
    /// ```
    /// use floodgate::backend::{BreakerConfig, FailurePolicy};
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// let limiter = RedisLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?
    ///     .with_breaker(Some(BreakerConfig::new(3, Duration::from_millis(100), Duration::from_secs(5))?));
    /// assert_eq!(limiter.breaker().unwrap().config().failures(), 3);
    /// assert!(limiter.with_breaker(None).breaker().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_breaker(mut self, config: Option<BreakerConfig>) -> Self {
        self.failures.set_breaker(config);
        self
    }

    /// Sets the deny cache (on by default with room for [`DENY_CACHE_MAX_KEYS`] keys; see the
    /// [type docs](Self) for why): `Some(max_keys)` replaces it with one of room for `max_keys`
    /// keys, `None` turns it off (every call then asks Redis).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `Some(0)`.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// let limiter = RedisLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// assert_eq!(limiter.deny_cache().unwrap().max_keys(), floodgate::backend::DENY_CACHE_MAX_KEYS);
    /// let limiter = limiter.with_deny_cache(None)?;
    /// assert!(limiter.deny_cache().is_none());
    /// assert!(limiter.with_deny_cache(Some(0)).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_deny_cache(mut self, max_keys: Option<usize>) -> Result<Self, ConfigError> {
        self.failures.set_deny_cache(max_keys)?;
        Ok(self)
    }

    /// The circuit breakers in front of Redis, if on: on a Redis Cluster one per master
    /// ([`NodeBreakers::node`], by the address its errors name), and a shared one for keys
    /// whose master is not known yet; on one server, only the shared one
    /// ([`NodeBreakers::shared`]). [`NodeBreakers::state`] is the most open of them.
    ///
    /// ```
    /// use floodgate::backend::{BreakerState, FailurePolicy};
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// let limiter = RedisLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// assert_eq!(limiter.breaker().unwrap().state(), BreakerState::Closed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn breaker(&self) -> Option<&NodeBreakers<C>> {
        self.failures.node_breakers()
    }

    /// The local cache of Redis's denials, if on ([`DenyCache::denied_locally`] counts the
    /// calls it answered without a round trip).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?; // lazy
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// let limiter = RedisLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// assert_eq!(limiter.deny_cache().unwrap().denied_locally(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deny_cache(&self) -> Option<&DenyCache<C>> {
        self.failures.deny_cache()
    }

    /// The backend (the lease calls of [`LeasedKey`](super::LeasedKey) use it too).
    pub(super) fn backend(&self) -> &RedisBackend {
        &self.backend
    }

    /// The failure handler: policy, breaker and deny cache, which a lease refill of
    /// [`LeasedKey`](super::LeasedKey) goes through as a per-call decision does.
    pub(super) fn handler(&self) -> &FailureHandler<A::Local, C> {
        &self.failures
    }

    /// The Redis keys that hold `key`'s state, all with the hash tag `{name:key}`.
    ///
    /// ```no_run
    /// # use floodgate::{backend::FailurePolicy, redis::*, SlidingLog};
    /// # let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379").lazy())?;
    /// let log = RedisLimiter::new(&backend, "login", SlidingLog::new(5, std::time::Duration::from_secs(60))?, FailurePolicy::FailClosed)?;
    /// assert_eq!(log.redis_keys("alice"), ["{login:alice}:sl", "{login:alice}:sl:seq"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn redis_keys(&self, key: &str) -> Vec<String> {
        self.algorithm
            .key_suffixes()
            .iter()
            .map(|suffix| self.redis_key(key, suffix))
            .collect()
    }

    /// `key`'s Redis key with `suffix`.
    fn redis_key(&self, key: &str, suffix: &str) -> String {
        // Pushed, not format!ted: this runs for every decision (~800 instructions less).
        let mut redis_key = String::with_capacity(self.name.len() + key.len() + 4 + suffix.len());
        for part in ["{", &self.name, ":", key, "}:", suffix] {
            redis_key.push_str(part);
        }
        redis_key
    }

    /// [`redis_keys`](Self::redis_keys) for a request: one key without a `Vec` around it.
    fn request_keys(&self, key: &str) -> Keys {
        match self.algorithm.key_suffixes() {
            [suffix] => Keys::One(self.redis_key(key, suffix)),
            _ => Keys::Many(self.redis_keys(key)),
        }
    }

    /// Takes `n` permits for `key` if the shared limit has them: one script call on the
    /// caller's tokio runtime, within the backend's timeout. A Redis failure is decided by the
    /// policy (see [`try_acquire_outcome`](Self::try_acquire_outcome) to see it).
    ///
    /// Dropping the future before its request is written sends nothing; after, the server may
    /// still run it before its deadline (see [`RedisBackend`] for what that consumes).
    ///
    /// # Errors
    /// [`RequestError::Permits`] for `n = 0` or `n` above the limit (Redis is not asked);
    /// [`RequestError::Runtime`] outside a tokio runtime.
    ///
    /// ```
    /// use floodgate::backend::{FailurePolicy, RequestError};
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use floodgate::AcquireError;
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let config = RedisConfig::single("redis://127.0.0.1:6379").lazy(); // no server needed here
    /// let backend = RedisBackend::connect(config).await?;
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// let limiter = RedisLimiter::new(&backend, "doc", window, FailurePolicy::FailClosed)?;
    /// // Refused before Redis is asked:
    /// let zero = limiter.try_acquire("alice", 0).await;
    /// assert_eq!(zero, Err(RequestError::Permits(AcquireError::ZeroPermits)));
    /// assert!(limiter.try_acquire("alice", 11).await.is_err()); // above the limit
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, key: &str, n: u32) -> Result<Decision, RequestError> {
        self.try_acquire_outcome(key, n).await.map(|o| o.decision())
    }

    /// As [`try_acquire`](Self::try_acquire), with the Redis error when the policy decided.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use floodgate::backend::{FailureKind, FailurePolicy};
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Nothing listens on port 1: the call fails within the timeout and the policy decides.
    /// let config = RedisConfig::single("redis://127.0.0.1:1").timeout(Duration::from_millis(20));
    /// let backend = RedisBackend::connect(config.lazy()).await?;
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// let limiter = RedisLimiter::new(&backend, "doc", window, FailurePolicy::FailOpen)?;
    /// let outcome = limiter.try_acquire_outcome("alice", 1).await?;
    /// assert!(outcome.decision().is_allowed());
    /// let error = outcome.failure().expect("decided by the policy");
    /// // Refused, or a timeout while a lazy backend retries connecting with back-off.
    /// assert!(matches!(error.kind(), FailureKind::Refused | FailureKind::Timeout));
    /// assert!(error.to_string().contains("redis://127.0.0.1:1"));
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_outcome(&self, key: &str, n: u32) -> Result<Outcome, RequestError> {
        let deadline = Instant::now()
            .checked_add(self.backend.timeout())
            .unwrap_or_else(far_future);
        self.outcome_by(key, n, deadline, Excuse::None).await
    }

    /// Takes `n` permits for `key`, sleeping (on the caller's runtime) until the shared limit
    /// grants them: each denial's `retry_after` (from the server's clock) is slept, then the
    /// request is tried again, as [`Limiter::acquire`](crate::Limiter::acquire) does locally.
    /// Returns the time actually waited, measured: zero when the first try is admitted,
    /// otherwise from the call to the admission (sleeps and round trips). While Redis is down
    /// the policy decides each try (under `FailClosed` that means waiting until Redis answers):
    /// use [`try_acquire_for`](Self::try_acquire_for) for a bound.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire): a request that can never be granted returns at once.
    ///
    /// ```no_run
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let backend = RedisBackend::connect(RedisConfig::single("redis://127.0.0.1:6379")).await?;
    /// let window = FixedWindow::new(1, Duration::from_millis(100))?;
    /// let limiter = RedisLimiter::new(&backend, "doc", window, FailurePolicy::FailClosed)?;
    /// limiter.acquire("alice", 1).await?;
    /// let waited = limiter.acquire("alice", 1).await?; // until the window's end, on Redis's clock
    /// assert!(waited > Duration::ZERO);
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, key: &str, n: u32) -> Result<Duration, RequestError> {
        waits::acquire(|| self.try_acquire(key, n)).await
    }

    /// Takes `n` permits for `key` if they can be had within `timeout`: sleeps only while the
    /// announced wait fits in what is left of it, otherwise returns the denial at once,
    /// consuming nothing (as [`Limiter::try_acquire_for`](crate::Limiter::try_acquire_for)).
    /// Round trips count against it too: each try's deadline is the sooner of the backend's
    /// timeout and what is left of `timeout`, so the call returns within `timeout` (plus the
    /// timer's resolution).
    ///
    /// **A try cut short by the caller's own budget is not an outage while Redis answers.** A
    /// try whose deadline is the caller's (what is left of `timeout` is shorter than the
    /// backend's timeout) and that gets no answer by then is taken by what the backend last
    /// heard from the key's Redis, when the try gives up. That is the server for one server,
    /// and **per node on a Redis Cluster**: the master that owns the key's slot by the
    /// backend's copy of the slot map (the node whose breaker the call goes through), so
    /// another master's replies do not make a frozen master look alive; while the copy names
    /// no owner for the slot (no map read yet), any node's reply counts. A reply counts for
    /// the master the copy names only while the copy is fresh for its call (read less than
    /// `max(timeout, 1 s)` plus a timeout before the call was sent; a reply to a call sent
    /// `max(timeout, 1 s)` after the read has the map read again): redis-rs follows a moved
    /// slot's `MOVED` unseen, and an older copy may name an owner the slot has left.
    ///
    /// * **Redis answering:** the backend read a reply from the key's Redis (to any of its
    ///   calls that went there, any caller's, an error reply too; on a cluster only an error
    ///   the master itself sent, not a redirect, `CLUSTERDOWN` or `TRYAGAIN`, which another
    ///   node may have sent) less than the backend's timeout before. The try is
    ///   denied, whatever the policy: `is_allowed()` false, `limit` the limiter's, `remaining`
    ///   0, and `retry_after` the backend's timeout (what fail-closed announces for a call Redis
    ///   did not answer: the same budget tried again sooner is likely cut short again, and each
    ///   such try may take a permit, below). It is not counted in [`failures`](Self::failures)
    ///   nor reported to the metrics, nor told to the circuit breaker: a budget shorter than a
    ///   round trip says nothing about a Redis that answers, so it neither admits (fail-open, or
    ///   a local share) what Redis would have refused, nor makes a healthy Redis look down.
    /// * **Redis silent:** no reply from the key's Redis for a whole backend timeout, or none
    ///   ever (a lazy backend before its first; on a cluster, a master that has not answered a
    ///   call of this backend for a timeout since the read of the slot map that first named it:
    ///   a healthy master new to the map, at connect or after a failover, is not taken for
    ///   silent before its first reply). Redis looks
    ///   down, and the try is an outage: decided by the policy
    ///   and counted as a timeout (in [`failures`](Self::failures) and the metrics), as a try
    ///   given the whole timeout would be, but still not told to the breaker (a caller's cut
    ///   alone proves nothing; calls that wait out the backend's timeout open it). So under
    ///   `FailOpen` a server whose calls all have short budgets admits once Redis (on a
    ///   cluster, the key's master) has said nothing for a backend timeout, and denies them
    ///   only for at most that long after its last reply.
    ///
    /// A reply counts when the backend reads it: one that comes after every caller of its call
    /// gave up is not read (a cut try's own late reply counts only when its call was a batch
    /// that another caller still waited for). While Redis answers, this call never admits more
    /// than [`try_acquire`](Self::try_acquire) would. A try's script may still have run on the
    /// server before its deadline there (an eighth of what the try had left before the
    /// caller's) with its reply arriving too late: its permits are then taken and handed to
    /// nobody (see [`RedisBackend`], "What can still be consumed"); a try given no time at all
    /// takes nothing (its request, if sent, reaches the server past its deadline; but see there
    /// for a lazy backend's first calls).
    ///
    /// A try that waits out the backend's own timeout (what is left of `timeout` is at least
    /// that long) is an outage, as for [`try_acquire`](Self::try_acquire): decided by the
    /// policy, counted and told to the breaker; so is any other failure (a refused connection,
    /// an error reply), whatever the try's deadline, and while the breaker is open the policy
    /// answers every try at once.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Nothing listens on port 1 (a lazy backend keeps trying to connect): no reply ever came,
    /// // so Redis looks down. A try given no time, cut short by the caller's own budget, is then
    /// // an outage too: the policy (fail-open) admits, and the failure is counted. (With a reply
    /// // from Redis within the last 20 ms, it would be denied, retry after 20 ms, not counted.)
    /// let config = RedisConfig::single("redis://127.0.0.1:1").timeout(Duration::from_millis(20));
    /// let backend = RedisBackend::connect(config.lazy()).await?;
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// let limiter = RedisLimiter::new(&backend, "doc", window, FailurePolicy::FailOpen)?;
    /// let d = limiter.try_acquire_for("alice", 1, Duration::ZERO).await?;
    /// assert!(d.is_allowed());
    /// assert_eq!(limiter.failures().total(), 1);
    /// // Given the backend's whole timeout, a try that gets no answer is an outage whatever
    /// // Redis last said: the policy admits, and the failure is counted.
    /// let d = limiter.try_acquire_for("alice", 1, Duration::from_secs(1)).await?;
    /// assert!(d.is_allowed());
    /// assert_eq!(limiter.failures().total(), 2);
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        key: &str,
        n: u32,
        timeout: Duration,
    ) -> Result<Decision, RequestError> {
        // A try cut short by the caller's own deadline (sooner than the backend's timeout)
        // says nothing about Redis while it answers: denied, and neither counted nor told to
        // the breaker (`outcome_by` hands it to the policy once Redis looks down).
        let try_by = |deadline, callers| async move {
            let on_timeout = if callers {
                Excuse::Caller
            } else {
                Excuse::None
            };
            let outcome = self.outcome_by(key, n, deadline, on_timeout).await?;
            Ok(outcome.decision())
        };
        waits::try_acquire_for(timeout, self.backend.timeout(), try_by).await
    }

    /// [`try_acquire`](Self::try_acquire), blocking the thread (tokio's `blocking_*` naming).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire), and [`RequestError::Runtime`] when called inside
    /// a tokio runtime (await [`try_acquire`](Self::try_acquire) there) or on a backend made by
    /// [`RedisBackend::connect`] on a current-thread runtime (use
    /// [`RedisBackend::blocking_connect`]).
    ///
    /// ```no_run
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379"))?;
    /// let window = FixedWindow::new(2, Duration::from_secs(60))?;
    /// let limiter = RedisLimiter::new(&backend, "doc", window, FailurePolicy::FailClosed)?;
    /// assert!(limiter.blocking_try_acquire("alice", 2)?.is_allowed());
    /// assert!(!limiter.blocking_try_acquire("alice", 1)?.is_allowed()); // shared by every process on "doc"
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blocking_try_acquire(&self, key: &str, n: u32) -> Result<Decision, RequestError> {
        self.backend.block_on(self.try_acquire(key, n))?
    }

    /// [`try_acquire_outcome`](Self::try_acquire_outcome), blocking the thread.
    ///
    /// # Errors
    /// As [`blocking_try_acquire`](Self::blocking_try_acquire).
    ///
    /// ```
    /// use floodgate::backend::{FailurePolicy, RequestError};
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// // Nothing listens on port 1: the call fails within the timeout and the policy decides.
    /// let config = RedisConfig::single("redis://127.0.0.1:1").timeout(Duration::from_millis(20));
    /// let backend = RedisBackend::blocking_connect(config.lazy())?;
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// let limiter = RedisLimiter::new(&backend, "doc", window, FailurePolicy::FailClosed)?;
    /// let outcome = limiter.blocking_try_acquire_outcome("alice", 1)?;
    /// assert!(outcome.failure().is_some() && !outcome.decision().is_allowed());
    /// assert_eq!(limiter.failures().total(), 1);
    /// // Inside a tokio runtime the blocking form refuses to run, rather than block it:
    /// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    /// let inside = runtime.block_on(async { limiter.blocking_try_acquire_outcome("alice", 1) });
    /// assert!(matches!(inside, Err(RequestError::Runtime(_))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blocking_try_acquire_outcome(&self, key: &str, n: u32) -> Result<Outcome, RequestError> {
        self.backend.block_on(self.try_acquire_outcome(key, n))?
    }

    /// [`acquire`](Self::acquire), blocking the thread.
    ///
    /// # Errors
    /// As [`blocking_try_acquire`](Self::blocking_try_acquire).
    ///
    /// ```no_run
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:6379"))?;
    /// let window = FixedWindow::new(1, Duration::from_millis(100))?;
    /// let limiter = RedisLimiter::new(&backend, "doc", window, FailurePolicy::FailClosed)?;
    /// limiter.blocking_acquire("alice", 1)?;
    /// let waited = limiter.blocking_acquire("alice", 1)?;
    /// assert!(waited > Duration::ZERO);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blocking_acquire(&self, key: &str, n: u32) -> Result<Duration, RequestError> {
        self.backend.block_on(self.acquire(key, n))?
    }

    /// [`try_acquire_for`](Self::try_acquire_for), blocking the thread (a try cut short by the
    /// caller's own budget is denied and not counted while the key's Redis answers (on a
    /// cluster, the master that owns its slot), decided by the policy and counted once it has
    /// not answered for a backend timeout, as there).
    ///
    /// # Errors
    /// As [`blocking_try_acquire`](Self::blocking_try_acquire).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::FixedWindow;
    /// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    /// use std::time::Duration;
    /// // Nothing listens on port 1 and no reply ever came: denied by fail-closed, whether the
    /// // try saw a refused connection or was cut short by its 10 ms (a lazy backend still
    /// // trying to connect: Redis looks down, so the policy decides that too).
    /// let config = RedisConfig::single("redis://127.0.0.1:1").timeout(Duration::from_millis(20));
    /// let backend = RedisBackend::blocking_connect(config.lazy())?;
    /// let window = FixedWindow::new(10, Duration::from_secs(1))?;
    /// let limiter = RedisLimiter::new(&backend, "doc", window, FailurePolicy::FailClosed)?;
    /// let d = limiter.blocking_try_acquire_for("alice", 1, Duration::from_millis(10))?;
    /// assert!(!d.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blocking_try_acquire_for(
        &self,
        key: &str,
        n: u32,
        timeout: Duration,
    ) -> Result<Decision, RequestError> {
        self.backend
            .block_on(self.try_acquire_for(key, n, timeout))?
    }

    /// One decision, giving up at `deadline`, a timeout then taken as `on_timeout` says
    /// ([`Excuse`]): the backend's timeout ([`Excuse::None`]: an outage, decided by the policy),
    /// the caller's own sooner deadline ([`Excuse::Caller`]: denied, not counted, while the
    /// key's server, on a cluster its slot's master, had a reply within the backend's timeout;
    /// otherwise taken as [`Excuse::Breaker`]), or a deadline
    /// a wait of the call's own shortened ([`Excuse::Breaker`]: decided by the policy, not told
    /// to the breaker). (Also [`LeasedKey`](super::LeasedKey)'s per-call decisions, within the
    /// deadline of the call they serve.)
    pub(super) async fn outcome_by(
        &self,
        key: &str,
        n: u32,
        deadline: Instant,
        on_timeout: Excuse,
    ) -> Result<Outcome, RequestError> {
        self.algorithm.check_permits(n)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RequestError::Runtime(
                "RedisLimiter's async calls need a tokio runtime: call them inside one, or use \
                 the blocking_* forms",
            ));
        }
        let store = || async {
            let request = Request {
                keys: self.request_keys(key),
                args: self.algorithm.args(n),
                deadline,
            };
            let entries = self.algorithm.entries(n);
            let keys = || self.request_keys(key);
            let reply = self.coalescer.eval(request, entries, keys).await;
            reply.and_then(|r| decision_from_reply(&r, self.backend.server()))
        };
        // Only a timeout is excused: any other failure (a refused connection, an error reply)
        // is Redis's, whoever's deadline the call had. A timeout at the caller's own deadline
        // is the caller's only while the key's server answers (any reply within the backend's
        // timeout; on a cluster, from the master that owns the key's slot); otherwise it looks
        // down: decided by the policy and counted, but still not told to the breaker (a
        // caller's cut alone proves nothing; calls given the whole timeout open it).
        let excuse = |error: &BackendError| match (error.is_timeout(), on_timeout) {
            (false, _) => Excuse::None,
            (true, Excuse::Caller) if !self.answered_within_timeout(key) => Excuse::Breaker,
            (true, excuse) => excuse,
        };
        let node = || self.node_of(key);
        let outcome = self
            .failures
            .run_async_excusing(key, n, node, store, excuse)
            .await;
        self.after_short_circuit(&outcome);
        Ok(outcome)
    }

    /// Whether the server of `key`'s calls replied within the backend's timeout
    /// ([`RedisBackend::answered_within_timeout`]): on a cluster, the master that owns the key's
    /// slot by the backend's copy of the slot map (the node [`node_of`](Self::node_of) names).
    fn answered_within_timeout(&self, key: &str) -> bool {
        if !self.backend.is_cluster() {
            return self.backend.answered_within_timeout(None);
        }
        let suffix = self.algorithm.key_suffixes().first().copied().unwrap_or("");
        self.backend
            .answered_within_timeout(Some(&self.redis_key(key, suffix)))
    }

    /// The node whose breaker a call for `key` goes through: on a cluster, the master that
    /// owns the key's slot by the backend's copy of the slot map (`None`, the shared breaker,
    /// while not known, and on one server).
    pub(super) fn node_of(&self, key: &str) -> Option<Arc<str>> {
        if !self.backend.is_cluster() {
            return None;
        }
        if let Some(breakers) = self.breaker() {
            self.backend.drop_unnamed_nodes(breakers);
        }
        let suffix = self.algorithm.key_suffixes().first().copied().unwrap_or("");
        self.backend.node_of(&self.redis_key(key, suffix))
    }

    /// A call short-circuited by its node's open breaker sent nothing, so no failure re-reads
    /// the slot map: it starts a re-read itself (at most one per backend timeout), so that a
    /// slot that moved to a live master leaves the down master's breaker.
    pub(super) fn after_short_circuit(&self, outcome: &Outcome) {
        if outcome.failure().is_some_and(BackendError::is_circuit_open) {
            self.backend.reread_slot_owners();
        }
    }
}

/// Which of `algorithm`'s four script arguments carries `n`: the one that differs between one
/// permit and two (the others are its configuration).
fn n_slot<A: RedisAlgorithm>(algorithm: &A) -> usize {
    let (one, two) = (algorithm.args(1), algorithm.args(2));
    (0..one.len()).find(|&i| one[i] != two[i]).unwrap_or(0)
}

/// Far enough ahead to stand for "no deadline" without overflowing `Instant`.
fn far_future() -> Instant {
    Instant::now() + crate::backend::MAX_TIMEOUT
}

/// Reads a script's reply `{allowed, limit, remaining, retry_after_us, reset_after_us, now_us}`
/// (`now_us` is read by the backend).
pub(super) fn decision_from_reply(reply: &[i64], server: &str) -> Result<Decision, BackendError> {
    let &[allowed, limit, remaining, retry_us, reset_us, _now] = reply else {
        return Err(unexpected_reply(reply, server));
    };
    let count = |v: i64| u64::try_from(v).unwrap_or(0);
    let nanos = |us: i64| count(us).saturating_mul(1_000);
    Ok(if allowed == 1 {
        Decision::allow(count(limit), count(remaining), nanos(reset_us))
    } else {
        Decision::deny(
            count(limit),
            count(remaining),
            nanos(retry_us),
            nanos(reset_us),
        )
    })
}

/// A one-decision script's reply as its six fields (see [`decision_from_reply`]); another
/// length is the same protocol error as there, naming `server()` (called only then).
pub(super) fn reply_fields(
    reply: &[i64],
    server: impl FnOnce() -> Arc<str>,
) -> Result<Fields6, BackendError> {
    Fields6::try_from(reply).map_err(|_| unexpected_reply(reply, &server()))
}

fn unexpected_reply(reply: &[i64], server: &str) -> BackendError {
    BackendError::at(
        FailureKind::Protocol,
        server,
        std::io::Error::other(format!(
            "unexpected reply from a floodgate script: {reply:?}"
        )),
    )
}

/// Whole milliseconds of `window` (Redis expiries have millisecond resolution), within
/// [`MAX_WINDOW_MILLIS`]; the errors name the setting and the value given.
pub(crate) fn whole_millis(window: Duration, what: &'static str) -> Result<u64, ConfigError> {
    if window.is_zero() {
        return Err(ConfigError::ZeroPeriod);
    }
    // The range first: a window too long for Lua is that, whatever its sub-millisecond part.
    let max = Duration::from_millis(MAX_WINDOW_MILLIS);
    if window > max {
        return Err(ConfigError::DurationOutOfRange {
            what,
            value: window,
            min: Duration::from_millis(1),
            max,
        });
    }
    if !window.subsec_nanos().is_multiple_of(1_000_000) {
        return Err(ConfigError::NotWhole {
            what,
            value: window,
            unit: Duration::from_millis(1),
        });
    }
    // At most MAX_WINDOW_MILLIS (checked above).
    Ok(window.as_millis() as u64)
}

/// Longest window or burst period on Redis: 2^51 µs (71 years), so that Unix time in
/// microseconds plus it stays below 2^53, where Lua's numbers are exact integers.
pub(crate) const MAX_WINDOW_MILLIS: u64 = (1 << 51) / 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_is_found_in_each_algorithms_arguments() {
        let minute = Duration::from_secs(60);
        assert_eq!(n_slot(&crate::FixedWindow::new(5, minute).unwrap()), 2);
        assert_eq!(n_slot(&crate::FixedWindow::aligned(5, minute).unwrap()), 2);
        assert_eq!(n_slot(&crate::SlidingWindow::new(5, minute, 6).unwrap()), 3);
        assert_eq!(n_slot(&crate::SlidingLog::new(5, minute).unwrap()), 2);
        let gcra = crate::Gcra::new(crate::Rate::per_second(5), 5).unwrap();
        assert_eq!(n_slot(&gcra), 2);
    }

    #[test]
    fn replies_become_decisions() {
        let allow = decision_from_reply(&[1, 10, 7, 0, 2_000, 9], "s").unwrap();
        assert_eq!(allow, Decision::allow(10, 7, 2_000_000));
        let deny = decision_from_reply(&[0, 10, 0, 1_500, 3_000, 9], "s").unwrap();
        assert_eq!(deny, Decision::deny(10, 0, 1_500_000, 3_000_000));
        let short = decision_from_reply(&[1, 2, 3], "redis://h:1").unwrap_err();
        assert_eq!(short.kind(), FailureKind::Protocol);
        assert!(short.to_string().contains("redis://h:1"), "{short}");
        // A negative field (never sent by the scripts) reads as zero rather than wrapping.
        assert_eq!(
            decision_from_reply(&[1, 5, -1, 0, -7, 9], "s")
                .unwrap()
                .remaining(),
            0
        );
    }

    #[test]
    fn windows_are_whole_milliseconds_within_lua_precision() {
        assert_eq!(
            whole_millis(Duration::from_millis(1500), "w").unwrap(),
            1500
        );
        assert_eq!(
            whole_millis(Duration::ZERO, "w").unwrap_err(),
            ConfigError::ZeroPeriod
        );
        assert_eq!(
            whole_millis(Duration::from_micros(1500), "w").unwrap_err(),
            ConfigError::NotWhole {
                what: "w",
                value: Duration::from_micros(1500),
                unit: Duration::from_millis(1)
            }
        );
        let long = Duration::from_secs(100 * 365 * 86_400);
        assert!(matches!(
            whole_millis(long, "w").unwrap_err(),
            ConfigError::DurationOutOfRange { value, .. } if value == long
        ));
        // Duration::MAX is too long, not "not whole milliseconds".
        let err = whole_millis(Duration::MAX, "Redis window").unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::DurationOutOfRange {
                    value: Duration::MAX,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("Redis window must be within"),
            "{err}"
        );
    }
}
