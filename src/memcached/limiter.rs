//! [`MemcachedLimiter`]: the sliding window of cells on memcached, increment first, under a
//! [`FailurePolicy`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::connection::{Connection, Finisher, MemcachedBackend, Pending, Transport, run_blocking};
use super::detached::{Job, ReclaimCounts, Reclaims, decide_async};
use super::error::{CallError, MemcachedError};
use super::protocol::{self, MAX_INDEX_DIGITS, MAX_KEY_LEN};
use super::sliding_window::Cells;
use crate::algorithms::{FixedWindow, SlidingWindow};
#[cfg(doc)]
use crate::backend::DENY_CACHE_MAX_KEYS;
use crate::backend::waits::{self, MIN_RETRY_SLEEP};
use crate::backend::{
    BackendError, BreakerConfig, CircuitBreaker, DenyCache, Excuse, FailureCounts, FailureHandler,
    FailurePolicy, Outcome, RequestError,
};
use crate::clock::{Clock, QuantaClock};
use crate::decision::{ConfigError, Decision, check_permits};

/// A sliding-window limit shared through one memcached server by every process that uses the
/// same `name`, key and configuration. Never admits more than the limit, whatever the
/// concurrency: each request adds its permits to the current cell *first*, then reads the window,
/// and takes them back if the sum is over the limit (see the [module docs](super) for the
/// guarantee, its cost and the clock-skew tolerance). When memcached gives no answer within the
/// backend's timeout, the [`FailurePolicy`] decides and the failure is counted; its local
/// fallback is a [`FixedWindow`] of the same length per key (coarser, the same bound per window).
///
/// A [`CircuitBreaker`] ([`BreakerConfig::default`], see [`with_breaker`](Self::with_breaker))
/// stops calling a failing memcached (the policy decides at once, without waiting for the
/// timeout) until a probe succeeds. A [`DenyCache`] ([`with_deny_cache`](Self::with_deny_cache),
/// off by default) denies a key locally until the `retry_after` memcached gave it. It is off by
/// default because memcached's denials are cautious under contention: a request denied while
/// other denied requests' permits were still counted is told to retry when the current cell
/// leaves the window (a whole window), and the cache would hold every later request of that key
/// in this process to it, although memcached may have room sooner.
///
/// Cell keys are `name:key:cell_index`, `key` with spaces, control and non-ASCII bytes and `%`
/// written as `%XX`.
///
/// ```no_run
/// use floodgate::backend::FailurePolicy;
/// use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
/// use floodgate::SlidingWindow;
/// use std::time::Duration;
///
/// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211"))?;
/// let limiter = MemcachedLimiter::new(
///     &backend,
///     "api",
///     SlidingWindow::new(100, Duration::from_secs(60), 60)?,
///     FailurePolicy::FailClosed,
/// )?;
/// let decision = limiter.blocking_try_acquire("user-42", 1)?;
/// if !decision.is_allowed() {
///     println!("429, retry after {:?}", decision.retry_after());
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct MemcachedLimiter<C: Clock + Clone = QuantaClock> {
    backend: MemcachedBackend,
    name: String,
    config: SlidingWindow,
    window: Cells,
    clock: C,
    failures: FailureHandler<FixedWindow, C>,
    reclaims: Arc<Reclaims>,
}

impl MemcachedLimiter<QuantaClock> {
    /// A limiter named `name` (the namespace of its keys) on the default clock. See
    /// [`with_clock`](Self::with_clock).
    ///
    /// # Errors
    /// As [`with_clock`](Self::with_clock).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
    /// use floodgate::SlidingWindow;
    /// use std::time::Duration;
    /// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// let window = SlidingWindow::new(100, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// assert_eq!(limiter.window().limit(), 100);
    /// assert!(MemcachedLimiter::new(&backend, "", window, FailurePolicy::FailOpen).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(
        backend: &MemcachedBackend,
        name: &str,
        window: SlidingWindow,
        policy: FailurePolicy,
    ) -> Result<Self, ConfigError> {
        Self::with_clock(backend, name, window, policy, QuantaClock::new())
    }
}

impl<C: Clock + Clone> MemcachedLimiter<C> {
    /// A limiter named `name` whose cells are keyed by `clock` (every process sharing the limit
    /// must use a clock on the same timeline, such as the Unix time of [`QuantaClock`]).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for an empty name, one with a byte outside printable ASCII or a
    /// `:`, or one too long to leave room for keys; memcached's own constraints on the window
    /// ([`ConfigError::TooLarge`] above [`MAX_CELLS`](super::MAX_CELLS) cells,
    /// [`ConfigError::DurationOutOfRange`] when `window + cell` passes 30 days less 1 s, which
    /// memcached would read as a date); the local algorithm's error when the policy's share
    /// cannot be built.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
    /// use floodgate::SlidingWindow;
    /// use floodgate::ManualClock;
    /// use std::time::Duration;
    /// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?;
    /// let window = SlidingWindow::new(10, Duration::from_secs(10), 10)?;
    /// let bad = MemcachedLimiter::with_clock(&backend, "a:b", window, FailurePolicy::FailOpen, ManualClock::new());
    /// assert!(bad.is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(
        backend: &MemcachedBackend,
        name: &str,
        window: SlidingWindow,
        policy: FailurePolicy,
        clock: C,
    ) -> Result<Self, ConfigError> {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
            return Err(ConfigError::Invalid {
                what: "memcached limiter name",
                why: "must be non-empty printable ASCII without spaces or ':'",
            });
        }
        // `name:` + at least a one-byte key + `:` + the longest index.
        if name.len() + 3 + MAX_INDEX_DIGITS > MAX_KEY_LEN {
            return Err(ConfigError::Invalid {
                what: "memcached limiter name",
                why: "too long: cell keys must fit memcached's 250 bytes",
            });
        }
        let config = window;
        let window = Cells::of(&config)?;
        let local_window = window.window();
        let failures = FailureHandler::with_clock(
            policy,
            backend.timeout(),
            move |limit| FixedWindow::new(limit, local_window),
            window.limit(),
            clock.clone(),
        )?
        .observed_as("memcached", name)
        .with_breaker(BreakerConfig::default());
        Ok(MemcachedLimiter {
            backend: backend.clone(),
            name: name.to_owned(),
            config,
            window,
            clock,
            failures,
            reclaims: Arc::default(),
        })
    }

    /// The window's configuration.
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// let window = SlidingWindow::new(100, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// assert_eq!(*limiter.window(), window);
    /// assert_eq!(limiter.window().cells(), 60);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn window(&self) -> &SlidingWindow {
        &self.config
    }

    /// The failure policy in force.
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// let window = SlidingWindow::new(100, Duration::from_secs(60), 60)?;
    /// let policy = FailurePolicy::local_fallback(0.5)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, policy)?;
    /// assert_eq!(limiter.policy(), policy);
    /// assert_eq!(limiter.policy().share(), Some(0.5));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policy(&self) -> FailurePolicy {
        self.failures.policy()
    }

    /// Failures so far (each decided by the policy).
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// // Nothing listens on port 1: each call fails at once and the policy decides.
    /// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:1").lazy())?;
    /// let window = SlidingWindow::new(10, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailClosed)?;
    /// assert_eq!(limiter.failures().total(), 0);
    /// assert!(!limiter.blocking_try_acquire("alice", 1)?.is_allowed());
    /// assert_eq!(limiter.failures().errors, 1); // refused: an error, not a timeout
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn failures(&self) -> FailureCounts {
        self.failures.counts()
    }

    /// Requests memcached counted whose permits did not reach their caller: given back, or
    /// possibly left counted until their cell leaves the window (see [`ReclaimCounts`]). An
    /// async call given up after its request was written (its future dropped, or its timeout
    /// passed) is finished in a task of its own: a denial is taken back as always, an
    /// admission given back (`given_back`). A blocking call that times out after its write is
    /// finished the same way on a thread of its own.
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// let window = SlidingWindow::new(10, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailClosed)?;
    /// assert_eq!(limiter.reclaims(), ReclaimCounts::default());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reclaims(&self) -> ReclaimCounts {
        self.reclaims.counts()
    }

    /// Sets the circuit breaker: `Some(config)` replaces the default one, `None` turns it off
    /// (every call then waits for memcached or its timeout).
    ///
    /// ```
    /// # use floodgate::{backend::{BreakerConfig, FailurePolicy}, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// let window = SlidingWindow::new(100, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?
    ///     .with_breaker(Some(BreakerConfig::new(3, Duration::from_millis(100), Duration::from_secs(5))?));
    /// assert_eq!(limiter.breaker().unwrap().config().failures(), 3);
    /// assert!(limiter.with_breaker(None).breaker().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_breaker(mut self, config: Option<BreakerConfig>) -> Self {
        self.failures.set_breaker(config);
        self
    }

    /// Sets the deny cache (off by default; see the [type docs](Self) for why):
    /// `Some(max_keys)`, such as [`DENY_CACHE_MAX_KEYS`], turns it on with room for `max_keys`
    /// keys, `None` off (every call then asks memcached).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `Some(0)`.
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// let window = SlidingWindow::new(100, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// assert!(limiter.deny_cache().is_none()); // off by default
    /// let limiter = limiter.with_deny_cache(Some(floodgate::backend::DENY_CACHE_MAX_KEYS))?;
    /// assert!(limiter.deny_cache().is_some());
    /// assert!(limiter.with_deny_cache(Some(0)).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_deny_cache(mut self, max_keys: Option<usize>) -> Result<Self, ConfigError> {
        self.failures.set_deny_cache(max_keys)?;
        Ok(self)
    }

    /// The circuit breaker in front of memcached, if on.
    ///
    /// ```
    /// # use floodgate::{backend::{BreakerState, FailurePolicy}, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// let window = SlidingWindow::new(100, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// assert_eq!(limiter.breaker().unwrap().state(), BreakerState::Closed);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn breaker(&self) -> Option<&CircuitBreaker<C>> {
        self.failures.breaker()
    }

    /// The local cache of memcached's denials, if on ([`DenyCache::denied_locally`] counts the
    /// calls it answered).
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// let window = SlidingWindow::new(100, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?
    ///     .with_deny_cache(Some(10_000))?;
    /// assert_eq!(limiter.deny_cache().unwrap().denied_locally(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn deny_cache(&self) -> Option<&DenyCache<C>> {
        self.failures.deny_cache()
    }

    /// The clock cells are keyed by.
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// # use floodgate::{Clock, ManualClock};
    /// let window = SlidingWindow::new(10, Duration::from_secs(10), 10)?;
    /// let clock = ManualClock::starting_at(7_500_000_000); // 7.5 s
    /// let limiter = MemcachedLimiter::with_clock(&backend, "api", window, FailurePolicy::FailOpen, clock)?;
    /// assert_eq!(limiter.clock().now_nanos() / window.cell().as_nanos() as u64, 7); // cell 7
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Finishes a blocking exchange whose caller timed out (or whose connection failed) with a
    /// written request's replies unread: reads them and takes back an increment that was
    /// applied, counting an admission given back, or what may stay.
    fn finisher(&self, prefix: &str, now: u64, n: u32) -> Finisher {
        let (window, prefix, reclaims) =
            (self.window, prefix.to_owned(), Arc::clone(&self.reclaims));
        // Dropped unrun (its thread could not be started), it counts what it left.
        let unrun = Unrun(Some(Arc::clone(&reclaims)));
        Box::new(move |connection: &mut Connection, pending, finish_by| {
            let mut unrun = unrun;
            unrun.0 = None;
            let cell = window.cell_index(now);
            let cells = window.read_cells(cell);
            let finished = run_blocking(async {
                let added = match pending {
                    Pending::Nothing => return Ok(false),
                    Pending::TakeBack => {
                        protocol::read_counter(connection, finish_by).await?;
                        return Ok(false);
                    }
                    Pending::Decision { added: Some(added) } => added,
                    Pending::Decision { added: None } => {
                        protocol::read_counter(connection, finish_by).await?
                    }
                };
                let counts = protocol::read_counts(connection, finish_by, &prefix, &cells).await?;
                if added.is_none() || !counts.iter().any(|&(index, _)| index == cell) {
                    // The cell vanished: the increment is lost, and a `decr` could take
                    // permits from a cell recreated by others.
                    return Ok(false);
                }
                let admitted = window.decide(now, cell, n, &counts).is_allowed();
                take_back(connection, finish_by, &prefix, cell, n).await?;
                Ok::<_, CallError>(admitted)
            });
            match finished {
                Ok(true) => reclaims.given_back(),
                Ok(false) => {}
                Err(_) => reclaims.left_counted(),
            }
        })
    }

    /// `name:encoded key:`, checked to leave room for any cell index.
    fn key_prefix(&self, key: &str) -> Result<String, RequestError> {
        let mut prefix = String::with_capacity(self.name.len() + key.len() + 2);
        prefix.push_str(&self.name);
        prefix.push(':');
        protocol::encode_key(key, &mut prefix);
        prefix.push(':');
        let len = prefix.len() + MAX_INDEX_DIGITS;
        if len > MAX_KEY_LEN {
            return Err(RequestError::KeyTooLong {
                len,
                max: MAX_KEY_LEN,
            });
        }
        Ok(prefix)
    }

    /// The cell that holds time `now_nanos` on the limiter's clock: `now_nanos / cell`.
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// let window = SlidingWindow::new(10, Duration::from_secs(10), 10)?; // 1 s cells
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// assert_eq!(limiter.cell_index(2_999_999_999), 2);
    /// assert_eq!(limiter.cell_index(3_000_000_000), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cell_index(&self, now_nanos: u64) -> u64 {
        self.window.cell_index(now_nanos)
    }

    /// The expiry set on each cell key, in seconds: `window + cell` rounded up, plus 1 (memcached's
    /// clock ticks once a second, so an expiry of `T` can fire after `T - 1`).
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// let window = SlidingWindow::new(10, Duration::from_secs(10), 20)?; // 500 ms cells
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// assert_eq!(limiter.ttl_secs(), 12); // 10.5 s rounded up to 11, plus 1
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn ttl_secs(&self) -> u32 {
        self.window.ttl_secs()
    }

    /// The memcached key of `key`'s cell number `index` (see [`cell_index`](Self::cell_index)).
    ///
    /// # Errors
    /// [`RequestError::KeyTooLong`].
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, ManualClock, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?;
    /// let window = SlidingWindow::new(5, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "login", window, FailurePolicy::FailClosed)?;
    /// assert_eq!(limiter.cell_key("bob smith", 1_700_000_000)?, "login:bob%20smith:1700000000");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cell_key(&self, key: &str, index: u64) -> Result<String, RequestError> {
        Ok(format!("{}{index}", self.key_prefix(key)?))
    }

    /// Takes `n` permits for `key` if the shared window has them, on the caller's tokio runtime
    /// (no thread hop), in at most the backend's timeout. A memcached failure is decided by the
    /// policy (see [`try_acquire_outcome`](Self::try_acquire_outcome) to see it).
    ///
    /// **Cancellation**: the exchange runs in a task of its own (spawned on the runtime), so a
    /// caller that drops the future, or reaches its timeout, only loses its answer. A request not
    /// yet written when the caller gives up is never sent (a call whose exchange had not
    /// written a byte of its request by its timeout, its runtime busy elsewhere or the
    /// deadline passing just before the write, is a timeout that says "not sent": decided by
    /// the policy and counted, but not told to the circuit breaker, as on Redis; one whose
    /// timeout passed while its exchange was connecting is told, as a slow connect says
    /// something about memcached);
    /// one already written is finished
    /// within the timeout plus the backend's [grace](super::MemcachedConfig::grace): a denial is
    /// taken back, an admission its caller never got is given back (`decr` of the same cell and
    /// `n`), so the call consumes nothing; one that cannot be finished is counted in
    /// [`reclaims`](Self::reclaims) (`left_counted`).
    ///
    /// # Errors
    /// [`RequestError`] for `n = 0`, `n` above the limit, or a key too long for memcached.
    ///
    /// [`RequestError::Runtime`] outside a tokio runtime (the `blocking_*` forms need none).
    ///
    /// # Panics
    /// In a tokio runtime built without I/O or time enabled (`#[tokio::main]` enables both).
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// use floodgate::{AcquireError, backend::RequestError};
    /// let window = SlidingWindow::new(10, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailClosed)?;
    /// // Refused before memcached is asked:
    /// let zero = limiter.try_acquire("alice", 0).await;
    /// assert_eq!(zero, Err(RequestError::Permits(AcquireError::ZeroPermits)));
    /// let long_key = limiter.try_acquire(&"k".repeat(250), 1).await;
    /// assert!(matches!(long_key, Err(RequestError::KeyTooLong { max: 250, .. })));
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, key: &str, n: u32) -> Result<Decision, RequestError> {
        self.try_acquire_outcome(key, n).await.map(|o| o.decision())
    }

    /// As [`try_acquire`](Self::try_acquire), with the memcached error when the policy decided.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// # Panics
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Nothing listens on port 1: the call fails within the timeout and the policy decides.
    /// let config = MemcachedConfig::new("127.0.0.1:1").timeout(Duration::from_millis(50));
    /// let backend = MemcachedBackend::connect(config.lazy())?;
    /// let window = SlidingWindow::new(10, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// let outcome = limiter.try_acquire_outcome("alice", 1).await?;
    /// assert!(outcome.decision().is_allowed() && outcome.failure().is_some());
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_outcome(&self, key: &str, n: u32) -> Result<Outcome, RequestError> {
        let deadline = Instant::now() + self.backend.timeout();
        self.outcome_by(key, n, deadline, false).await
    }

    /// Takes `n` permits for `key`, sleeping (on the caller's runtime: tokio's timer) until the
    /// shared window grants them: each denial's `retry_after` is slept, then the request is
    /// tried again, as [`Limiter::acquire`](crate::Limiter::acquire) does locally. Returns the
    /// time actually waited, measured: zero when the first try is admitted, otherwise from the
    /// call to the admission (sleeps and round trips). While memcached is down the policy
    /// decides each try (under `FailClosed` that means waiting until memcached answers): use
    /// [`try_acquire_for`](Self::try_acquire_for) for a bound.
    ///
    /// Cells are keyed by the limiter's [`clock`](Self::clock) while the sleeps are real: on a
    /// [`ManualClock`](crate::ManualClock) nobody moves, a full window never frees (use the
    /// blocking forms, which sleep on the limiter's clock).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire): a request that can never be granted returns at once.
    ///
    /// ```no_run
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
    /// use floodgate::SlidingWindow;
    /// use std::time::Duration;
    /// # #[tokio::main]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211"))?;
    /// let window = SlidingWindow::new(1, Duration::from_secs(1), 10)?; // 100 ms cells
    /// let limiter = MemcachedLimiter::new(&backend, "doc", window, FailurePolicy::FailClosed)?;
    /// limiter.acquire("alice", 1).await?;
    /// let waited = limiter.acquire("alice", 1).await?; // until the first cell leaves the window
    /// assert!(waited > Duration::ZERO);
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, key: &str, n: u32) -> Result<Duration, RequestError> {
        waits::acquire(|| self.try_acquire(key, n)).await
    }

    /// Takes `n` permits for `key` if they can be had within `timeout`: sleeps (tokio's timer)
    /// only while the announced wait fits in what is left of it, otherwise returns the denial
    /// at once, consuming nothing (as
    /// [`Limiter::try_acquire_for`](crate::Limiter::try_acquire_for)). Round trips count
    /// against it too: each try's deadline is the sooner of the backend's timeout and what is
    /// left of `timeout`, so the call returns within `timeout` (plus the timer's resolution).
    /// A try cut short by the backend's own timeout is an outage, decided by the policy. A try
    /// cut short by `timeout` (shorter than the backend's) while memcached answered a call
    /// within the last backend timeout says nothing about memcached: it is answered with a
    /// plain denial (no [`failure`](Outcome::failure), `retry_after` the backend's timeout),
    /// neither counted in [`failures`](Self::failures) nor reported to the breaker. Once
    /// memcached has answered nothing for a backend timeout (or never has: a lazy backend
    /// before its first answer), such a try is an outage as any other, decided by the policy
    /// and counted as a timeout, but still not reported to the breaker (as on Redis). A
    /// `timeout` too long for an [`Instant`] is no bound.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
    /// use floodgate::SlidingWindow;
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Nothing listens on port 1: fail-closed denies with retry_after = the 20 ms timeout,
    /// // which does not fit in 10 ms, so the call returns the denial without sleeping.
    /// let config = MemcachedConfig::new("127.0.0.1:1").timeout(Duration::from_millis(20));
    /// let backend = MemcachedBackend::connect(config.lazy())?;
    /// let window = SlidingWindow::new(10, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "doc", window, FailurePolicy::FailClosed)?;
    /// let d = limiter.try_acquire_for("alice", 1, Duration::from_millis(10)).await?;
    /// assert!(!d.is_allowed());
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire_for(
        &self,
        key: &str,
        n: u32,
        timeout: Duration,
    ) -> Result<Decision, RequestError> {
        let try_by = |deadline, callers| async move {
            let outcome = self.outcome_by(key, n, deadline, callers).await?;
            Ok(outcome.decision())
        };
        waits::try_acquire_for(timeout, self.backend.timeout(), try_by).await
    }

    /// One async decision, given up at `deadline`: the caller's own (`callers_deadline`, sooner
    /// than the backend's timeout: a try cut short by it is a plain denial, not counted) or the
    /// backend's.
    async fn outcome_by(
        &self,
        key: &str,
        n: u32,
        deadline: Instant,
        callers_deadline: bool,
    ) -> Result<Outcome, RequestError> {
        check_permits(n, u64::from(self.window.limit()))?;
        let prefix = self.key_prefix(key)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RequestError::Runtime(
                "MemcachedLimiter's async calls need a tokio runtime: call them inside one, or \
                 use the blocking_* forms",
            ));
        }
        let now = self.clock.now_nanos();
        let job = Job {
            window: self.window,
            prefix,
            now,
            n,
        };
        let store = || decide_async(&self.backend, job, &self.reclaims, deadline);
        let excuse = |error: &BackendError| self.excuse(callers_deadline, error);
        Ok(self.failures.run_async_within(key, n, store, excuse).await)
    }

    /// As [`try_acquire`](Self::try_acquire), blocking the calling thread (std sockets; no
    /// runtime needed, and not to be called on an async task). A call whose deadline passes
    /// before any byte of its request is written (its thread held, all 128 connections of the
    /// backend busy until then, or the deadline passing as the write begins) is a timeout
    /// that says "not sent": decided by the policy and counted, but not told to the circuit
    /// breaker, as on the async path. A deadline passing during a connect, or once a byte is
    /// written, is a timeout told to the breaker.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// # use floodgate::{backend::{FailurePolicy, RequestError}, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// # let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211").lazy())?; // lazy: no server needed
    /// use floodgate::AcquireError;
    /// let window = SlidingWindow::new(10, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailClosed)?;
    /// let zero = limiter.blocking_try_acquire("alice", 0);
    /// assert_eq!(zero, Err(RequestError::Permits(AcquireError::ZeroPermits)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blocking_try_acquire(&self, key: &str, n: u32) -> Result<Decision, RequestError> {
        self.blocking_try_acquire_outcome(key, n)
            .map(|o| o.decision())
    }

    /// As [`try_acquire_outcome`](Self::try_acquire_outcome), blocking the calling thread.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// # use floodgate::{backend::FailurePolicy, memcached::*, SlidingWindow};
    /// # use std::time::Duration;
    /// // Nothing listens on port 1: the call fails within the timeout and the policy decides.
    /// let config = MemcachedConfig::new("127.0.0.1:1").timeout(Duration::from_millis(50));
    /// let backend = MemcachedBackend::connect(config.lazy())?;
    /// let window = SlidingWindow::new(10, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailOpen)?;
    /// let outcome = limiter.blocking_try_acquire_outcome("alice", 1)?;
    /// assert!(outcome.decision().is_allowed() && outcome.failure().is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blocking_try_acquire_outcome(&self, key: &str, n: u32) -> Result<Outcome, RequestError> {
        let deadline = Instant::now() + self.backend.timeout();
        self.blocking_outcome_by(key, n, deadline, false)
    }

    /// [`acquire`](Self::acquire), blocking the calling thread (std sockets; no runtime needed,
    /// and not to be called on an async task): the waits are slept on the limiter's
    /// [`clock`](Self::clock) ([`Clock::sleep`]: a [`ManualClock`](crate::ManualClock) advances
    /// itself instead), and the time waited is measured on it too (never less than the real
    /// time the call took).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```no_run
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
    /// use floodgate::SlidingWindow;
    /// use std::time::Duration;
    /// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211"))?;
    /// let window = SlidingWindow::new(1, Duration::from_secs(1), 10)?; // 100 ms cells
    /// let limiter = MemcachedLimiter::new(&backend, "doc", window, FailurePolicy::FailClosed)?;
    /// limiter.blocking_acquire("alice", 1)?;
    /// let waited = limiter.blocking_acquire("alice", 1)?;
    /// assert!(waited > Duration::ZERO);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blocking_acquire(&self, key: &str, n: u32) -> Result<Duration, RequestError> {
        let spent = Spent::start(&self.clock);
        let mut first = true;
        loop {
            let decision = self.blocking_try_acquire(key, n)?;
            if decision.is_allowed() {
                return Ok(if first {
                    Duration::ZERO
                } else {
                    spent.so_far(&self.clock)
                });
            }
            first = false;
            self.clock
                .sleep(decision.retry_after().max(MIN_RETRY_SLEEP));
        }
    }

    /// [`try_acquire_for`](Self::try_acquire_for), blocking the calling thread: the waits are
    /// slept on the limiter's [`clock`](Self::clock), and what is left of `timeout` is measured
    /// on it and in real time, whichever has passed more (round trips count against it, as
    /// the sleeps do).
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
    /// use floodgate::SlidingWindow;
    /// use std::time::Duration;
    /// // Nothing listens on port 1: fail-closed denies with retry_after = the 20 ms timeout,
    /// // which does not fit in 10 ms, so the call returns the denial without sleeping.
    /// let config = MemcachedConfig::new("127.0.0.1:1").timeout(Duration::from_millis(20));
    /// let backend = MemcachedBackend::connect(config.lazy())?;
    /// let window = SlidingWindow::new(10, Duration::from_secs(60), 60)?;
    /// let limiter = MemcachedLimiter::new(&backend, "doc", window, FailurePolicy::FailClosed)?;
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
        let spent = Spent::start(&self.clock);
        loop {
            let left = timeout.saturating_sub(spent.so_far(&self.clock));
            let backend_timeout = self.backend.timeout();
            let callers_deadline = left < backend_timeout;
            let deadline = Instant::now() + left.min(backend_timeout);
            let decision = self
                .blocking_outcome_by(key, n, deadline, callers_deadline)?
                .decision();
            let wait = decision.retry_after().max(MIN_RETRY_SLEEP);
            let left = timeout.saturating_sub(spent.so_far(&self.clock));
            if decision.is_allowed() || wait > left {
                return Ok(decision);
            }
            self.clock.sleep(wait);
        }
    }

    /// One blocking decision, given up at `deadline` (as [`outcome_by`](Self::outcome_by)).
    fn blocking_outcome_by(
        &self,
        key: &str,
        n: u32,
        deadline: Instant,
        callers_deadline: bool,
    ) -> Result<Outcome, RequestError> {
        check_permits(n, u64::from(self.window.limit()))?;
        let prefix = self.key_prefix(key)?;
        let now = self.clock.now_nanos();
        let excuse = |error: &BackendError| self.excuse(callers_deadline, error);
        let store = || {
            self.backend.call_by(
                deadline,
                |connection, deadline| {
                    run_blocking(async {
                        let decision =
                            decide(&self.window, connection, deadline, &prefix, now, n, &|| {
                                true
                            })
                            .await?;
                        if !decision.is_allowed() {
                            // The denial stands whatever happens to the take-back (one cut
                            // short is finished by the finisher).
                            let cell = self.window.cell_index(now);
                            let taken_back =
                                take_back(connection, deadline, &prefix, cell, n).await;
                            if taken_back.is_err() && connection.pending() == Pending::Nothing {
                                // Not written: no finisher will take the permits back.
                                self.reclaims.left_counted();
                            }
                        }
                        Ok(decision)
                    })
                },
                || self.finisher(&prefix, now, n),
            )
        };
        Ok(self.failures.run_within(key, n, store, excuse))
    }

    /// How a failed try is taken: a timeout at the caller's own deadline (`callers_deadline`:
    /// sooner than the backend's) is the caller's matter ([`Excuse::Caller`]: a plain denial,
    /// counted nowhere) while memcached answered a call within the last backend timeout;
    /// otherwise memcached looks down and the policy decides it, counted as a timeout but not
    /// reported to the breaker ([`Excuse::Breaker`]: a caller's cut proves nothing alone).
    fn excuse(&self, callers_deadline: bool, error: &BackendError) -> Excuse {
        if !(callers_deadline && error.is_timeout()) {
            Excuse::None
        } else if self.backend.answered_within_timeout() {
            Excuse::Caller
        } else {
            Excuse::Breaker
        }
    }
}

/// How long a blocking call has spent: in real time and on the limiter's clock (which a
/// [`ManualClock`](crate::ManualClock)'s sleeps move without time passing), whichever is more.
struct Spent {
    started: Instant,
    clock_started: u64,
}

impl Spent {
    fn start(clock: &impl Clock) -> Self {
        Spent {
            started: Instant::now(),
            clock_started: clock.now_nanos(),
        }
    }

    fn so_far(&self, clock: &impl Clock) -> Duration {
        let on_clock = Duration::from_nanos(clock.now_nanos().saturating_sub(self.clock_started));
        self.started.elapsed().max(on_clock)
    }
}

/// A finisher's: counts its exchange left counted if dropped before it ran.
struct Unrun(Option<Arc<Reclaims>>);

impl Drop for Unrun {
    fn drop(&mut self) {
        if let Some(reclaims) = self.0.take() {
            reclaims.left_counted();
        }
    }
}

/// Adds `n` to the current cell and reads the window, on one connection: the decision (a denial
/// still counted: the caller takes it back with [`take_back`]). Each request is written only
/// if `waiting()` says its caller still waits for it (else a "not sent" timeout for the first,
/// a timeout for the second: the first was carried out).
pub(crate) async fn decide<T: Transport>(
    window: &Cells,
    connection: &mut T,
    deadline: Instant,
    prefix: &str,
    now: u64,
    n: u32,
    waiting: &impl Fn() -> bool,
) -> Result<Decision, CallError> {
    let current = window.cell_index(now);
    let cells = window.read_cells(current);
    let request = protocol::decision_request(prefix, current, cells.clone(), window.ttl_secs(), n);
    // A cell can vanish between the add and the incr, or the incr and the get (evicted, or
    // `flush_all`): the increment is then lost, so one more try cannot count it twice.
    for attempt in 0..2 {
        if !waiting() {
            // Nothing of this call written yet: not sent; else the first request was carried
            // out.
            return Err(if attempt == 0 {
                CallError::NotSent
            } else {
                CallError::Timeout
            });
        }
        connection.set_pending(Pending::Decision { added: None });
        connection
            .send(&request, deadline)
            .await
            .map_err(|error| match error {
                // The first request was carried out: this call did reach memcached.
                CallError::NotSent if attempt > 0 => CallError::Timeout,
                error => error,
            })?;
        let added = match protocol::read_counter(connection, deadline).await {
            Ok(added) => added,
            Err(CallError::Failed(error)) if error.is_connection_limit() => {
                // memcached refused the connection as it accepted it (its connection limit)
                // and closed it, never reading the request: nothing to finish or count.
                connection.set_pending(Pending::Nothing);
                connection.set_broken();
                return Err(error.into());
            }
            Err(error) => return Err(error),
        };
        connection.set_pending(Pending::Decision { added: Some(added) });
        let counts = protocol::read_counts(connection, deadline, prefix, &cells).await?;
        connection.set_pending(Pending::Nothing);
        // `incr` wraps at 2^64: a count below the request's own n after adding it means the
        // cell held a value near 2^64 that no limiter wrote, and its count is meaningless.
        if let Some(added) = added.filter(|&added| added < u64::from(n)) {
            return Err(MemcachedError::Protocol(format!(
                "cell {prefix}{current} wrapped past 2^64 on incr (it read {added} after \
                 adding {n}): it held a value no limiter writes"
            ))
            .into());
        }
        if added.is_none() || !counts.iter().any(|&(index, _)| index == current) {
            continue;
        }
        return Ok(window.decide(now, current, n, &counts));
    }
    Err(MemcachedError::Protocol(format!(
        "cell {prefix}{current} vanished right after it was written, twice (memcached evicting?)"
    ))
    .into())
}

/// Takes `n` permits back from cell `cell` (`decr`): a denial's, or an admission its caller
/// never got. A failed take-back leaves the permits counted until their cell leaves the window
/// (never an over-admission) and marks the connection out of step (its reply may still come).
pub(crate) async fn take_back<T: Transport>(
    connection: &mut T,
    deadline: Instant,
    prefix: &str,
    cell: u64,
    n: u32,
) -> Result<(), CallError> {
    let request = protocol::take_back_request(prefix, cell, n);
    connection.set_pending(Pending::TakeBack);
    let result = match connection.send(&request, deadline).await {
        Ok(()) => protocol::read_counter(connection, deadline).await.map(drop),
        Err(error) => Err(error),
    };
    if result.is_ok() {
        connection.set_pending(Pending::Nothing);
    } else {
        connection.set_broken();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    /// A finisher dropped without running (its thread could not be started) counts its
    /// exchange in `left_counted`: its increment may stay. Before: it counted nothing.
    #[test]
    fn a_finisher_that_never_runs_counts_its_exchange_left_counted() {
        let backend =
            MemcachedBackend::connect(super::super::MemcachedConfig::new("127.0.0.1:1").lazy())
                .unwrap();
        let window = SlidingWindow::new(10, Duration::from_secs(10), 10).unwrap();
        let limiter = MemcachedLimiter::with_clock(
            &backend,
            "fin",
            window,
            FailurePolicy::FailClosed,
            ManualClock::new(),
        )
        .unwrap();
        drop(limiter.finisher("fin:k:", 0, 1));
        assert_eq!(limiter.reclaims().left_counted, 1);
    }
}
