//! [`FailureHandler`]: applies a [`FailurePolicy`], counts failures, keeps the local fallback
//! limiters.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::node_breakers::NodeBreaker;
use super::{
    BackendError, BreakerConfig, BreakerPermit, BreakerState, CircuitBreaker, DenyCache,
    FailureCounts, FailurePolicy, NodeBreakers, Outcome,
};
use crate::clock::{Clock, QuantaClock, duration_to_nanos};
use crate::decision::{ConfigError, Decision};
use crate::keyed::{HashedKey, Keyed};
use crate::limiter::Algorithm;
use crate::observe::BackendObserver;

/// Keys the local fallback keeps at most; past that, idle ones are dropped, and a new key that
/// still finds no room is denied (as [`FailurePolicy::FailClosed`] would).
pub const FALLBACK_MAX_KEYS: usize = 65_536;

/// Applies a [`FailurePolicy`] for one distributed limiter: counts each failure and returns the
/// policy's decision. For [`FailurePolicy::LocalFallback`] it keeps one local limiter word per
/// key in a [`Keyed`] map (at most [`FALLBACK_MAX_KEYS`] keys, idle ones swept inside calls), of
/// the algorithm `make_local(share_of_limit)` builds.
///
/// ```
/// use floodgate::backend::{BackendError, FailureHandler, FailurePolicy};
/// use floodgate::{FixedWindow, ManualClock};
/// use std::time::Duration;
/// let timeout = Duration::from_millis(100);
/// let handler = FailureHandler::with_clock(
///     FailurePolicy::local_fallback(0.5)?,
///     timeout,
///     |limit| FixedWindow::new(limit, Duration::from_secs(60)),
///     10, // the distributed limit
///     ManualClock::new(),
/// )?;
/// let down = || BackendError::Timeout { after: timeout };
/// let admitted = (0..10).filter(|_| handler.decide("user-1", 1, down()).decision().is_allowed());
/// assert_eq!(admitted.count(), 5); // half of the limit, locally
/// assert_eq!(handler.counts().timeouts, 10);
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
pub struct FailureHandler<A, C = QuantaClock> {
    policy: FailurePolicy,
    timeout: Duration,
    limit: u64,
    timeouts: AtomicU64,
    errors: AtomicU64,
    short_circuited: AtomicU64,
    local: Option<LocalLimiters<A, C>>,
    /// Reports each failure to `metrics` and `tracing` (features of those names).
    observer: BackendObserver,
    clock: C,
    /// The breakers: one per node the calls name, and one shared by calls that name none
    /// ([`run`](Self::run), [`run_async`](Self::run_async)).
    breaker: Option<NodeBreakers<C>>,
    denials: Option<DenyCache<C>>,
}

/// How [`FailureHandler::run_async_excusing`] takes a failed store call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) enum Excuse {
    /// The store's failure: reported to the breaker, decided by the policy and counted.
    None,
    /// A timeout of a call whose time a wait of its own cut (a lease's refill that first waited
    /// for another caller's): not reported to the breaker; decided by the policy and counted.
    Breaker,
    /// A timeout at the caller's own deadline, sooner than the store's timeout, while the store
    /// answers: it says nothing about the store. (Whoever picks the excuse says whether the
    /// store answers: `RedisLimiter` takes such a cut as [`Excuse::Breaker`] once the key's
    /// Redis, on a cluster the master that owns its slot, has sent no reply for a backend
    /// timeout.) Not reported to the breaker, not counted (nor observed), not decided by
    /// the policy: denied ([`FailureHandler::run_async_excusing`]).
    Caller,
}

/// What [`FailureHandler::before`] found: a decision without the store, or a call to make.
enum Before<'a, C: Clock> {
    Decided(Outcome),
    Call(Option<BreakerPermit<'a, C>>),
}

/// The breaker of one call, if the handler has breakers.
type CallBreaker<'a, C> = Option<NodeBreaker<'a, C>>;

struct LocalLimiters<A, C> {
    local_limit: u32,
    /// One local limiter word per key, bounded, with idle keys swept inside calls: floodgate's
    /// own keyed map, so an outage's flood of keys costs O(1) per call, not a scan. Keys are
    /// held as 128-bit hashes ([`HashedKey`]): an entry costs the same whatever the key's length.
    by_key: Keyed<HashedKey, A, C>,
}

impl<A, C> FailureHandler<A, C> {
    /// Failures counted so far.
    ///
    /// ```
    /// use floodgate::backend::{BackendError, FailureCounts, FailureHandler, FailurePolicy};
    /// use floodgate::FixedWindow;
    /// use std::time::Duration;
    /// let make = |limit| FixedWindow::new(limit, Duration::from_secs(1));
    /// let handler = FailureHandler::new(FailurePolicy::FailOpen, Duration::from_millis(5), make, 10)?;
    /// handler.decide("k", 1, BackendError::failed(std::io::Error::other("refused")));
    /// assert_eq!(handler.counts(), FailureCounts { timeouts: 0, errors: 1, short_circuited: 0 });
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn counts(&self) -> FailureCounts {
        FailureCounts {
            // Relaxed: independent statistics counters; no other memory depends on them.
            timeouts: self.timeouts.load(Ordering::Relaxed),
            // Relaxed: as above.
            errors: self.errors.load(Ordering::Relaxed),
            // Relaxed: as above.
            short_circuited: self.short_circuited.load(Ordering::Relaxed),
        }
    }

    /// The circuit breaker [`run`](FailureHandler::run) consults, if one was set with
    /// [`with_breaker`](FailureHandler::with_breaker) (the breakers of the calls that name a
    /// node, made by the crate's Redis limiter on a cluster, are
    /// [`NodeBreakers::node`]'s; this one is [`NodeBreakers::shared`]).
    ///
    /// ```
    /// use floodgate::backend::{FailureHandler, FailurePolicy};
    /// use floodgate::FixedWindow;
    /// use std::time::Duration;
    /// let make = |limit| FixedWindow::new(limit, Duration::from_secs(1));
    /// let handler = FailureHandler::new(FailurePolicy::FailOpen, Duration::from_millis(5), make, 10)?;
    /// assert!(handler.breaker().is_none());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn breaker(&self) -> Option<&CircuitBreaker<C>> {
        self.breaker.as_ref().map(NodeBreakers::shared)
    }

    /// Every breaker: the shared one and one per node the calls named.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn node_breakers(&self) -> Option<&NodeBreakers<C>> {
        self.breaker.as_ref()
    }

    /// The deny cache [`run`](FailureHandler::run) consults, if one was set with
    /// [`with_deny_cache`](FailureHandler::with_deny_cache).
    ///
    /// ```
    /// use floodgate::backend::{FailureHandler, FailurePolicy};
    /// use floodgate::FixedWindow;
    /// use std::time::Duration;
    /// let make = |limit| FixedWindow::new(limit, Duration::from_secs(1));
    /// let handler = FailureHandler::new(FailurePolicy::FailOpen, Duration::from_millis(5), make, 10)?
    ///     .with_deny_cache(1_000)?;
    /// assert_eq!(handler.deny_cache().map(|c| c.denied_locally()), Some(0));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn deny_cache(&self) -> Option<&DenyCache<C>> {
        self.denials.as_ref()
    }

    /// The clock this handler decides on (a lease's expiry is counted on it too).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn clock(&self) -> &C {
        &self.clock
    }
}

impl<A, C> fmt::Debug for FailureHandler<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailureHandler")
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .field("counts", &self.counts())
            .finish_non_exhaustive()
    }
}

impl<A: Algorithm> FailureHandler<A, QuantaClock> {
    /// A handler on the default clock. See [`FailureHandler::with_clock`].
    ///
    /// # Errors
    /// As [`FailureHandler::with_clock`].
    ///
    /// ```
    /// use floodgate::backend::{BackendError, FailureHandler, FailurePolicy};
    /// use floodgate::FixedWindow;
    /// use std::time::Duration;
    /// let make = |limit| FixedWindow::new(limit, Duration::from_secs(1));
    /// let policy = FailurePolicy::FailClosed;
    /// let handler = FailureHandler::new(policy, Duration::from_millis(5), make, 10)?;
    /// let outcome = handler.decide("k", 1, BackendError::Timeout { after: Duration::from_millis(5) });
    /// assert!(!outcome.decision().is_allowed());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn new(
        policy: FailurePolicy,
        timeout: Duration,
        make_local: impl Fn(u32) -> Result<A, ConfigError> + Send + Sync + 'static,
        limit: u32,
    ) -> Result<Self, ConfigError> {
        Self::with_clock(policy, timeout, make_local, limit, QuantaClock::new())
    }
}

impl<A: Algorithm, C: Clock + Clone> FailureHandler<A, C> {
    /// A handler for a distributed limit of `limit`, whose backend gives up after `timeout`.
    /// `make_local(l)` builds the local algorithm for a limit of `l`; it is called once here to
    /// check the configuration, and once per key during outages.
    ///
    /// # Errors
    /// The [`ConfigError`] of `make_local` for the local share of the limit.
    ///
    /// ```
    /// use floodgate::backend::{FailureHandler, FailurePolicy};
    /// use floodgate::{ConfigError, FixedWindow, ManualClock};
    /// use std::time::Duration;
    /// // make_local is checked here, so a bad local configuration fails now, not during an outage.
    /// let make = |limit| FixedWindow::new(limit, Duration::ZERO);
    /// let policy = FailurePolicy::local_fallback(0.5)?;
    /// let handler = FailureHandler::with_clock(policy, Duration::ZERO, make, 10, ManualClock::new());
    /// assert!(matches!(handler, Err(ConfigError::ZeroPeriod)));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn with_clock(
        policy: FailurePolicy,
        timeout: Duration,
        make_local: impl Fn(u32) -> Result<A, ConfigError> + Send + Sync + 'static,
        limit: u32,
        clock: C,
    ) -> Result<Self, ConfigError> {
        let local = match policy {
            FailurePolicy::LocalFallback(share) => {
                let local_limit = share.of(limit);
                Some(LocalLimiters {
                    local_limit,
                    by_key: Keyed::builder(make_local(local_limit)?)
                        .max_keys(FALLBACK_MAX_KEYS)
                        .clock(clock.clone())
                        .build()?,
                })
            }
            _ => None,
        };
        Ok(FailureHandler {
            policy,
            timeout,
            limit: u64::from(limit),
            timeouts: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            short_circuited: AtomicU64::new(0),
            local,
            observer: BackendObserver::default(),
            clock,
            breaker: None,
            denials: None,
        })
    }

    /// Puts a [`CircuitBreaker`] of `config` (on the handler's clock) in front of the store
    /// calls of [`run`](Self::run) and [`run_async`](Self::run_async): while it is open they
    /// decide by the policy at once, counted in [`FailureCounts::short_circuited`].
    ///
    /// ```
    /// use floodgate::backend::{BackendError, BreakerConfig, FailureHandler, FailurePolicy};
    /// use floodgate::{FixedWindow, ManualClock};
    /// use std::time::Duration;
    /// let make = |limit| FixedWindow::new(limit, Duration::from_secs(1));
    /// let handler = FailureHandler::with_clock(FailurePolicy::FailClosed, Duration::from_millis(50), make, 10, ManualClock::new())?
    ///     .with_breaker(BreakerConfig::new(2, Duration::from_secs(1), Duration::from_secs(8))?);
    /// let down = || Err(BackendError::failed(std::io::Error::other("refused")));
    /// let mut calls = 0;
    /// for _ in 0..10 {
    ///     handler.run("k", 1, || { calls += 1; down() });
    /// }
    /// assert_eq!(calls, 2); // then the breaker opened
    /// assert_eq!(handler.counts().short_circuited, 8);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn with_breaker(mut self, config: BreakerConfig) -> Self {
        self.set_breaker(Some(config));
        self
    }

    /// Puts a [`DenyCache`] of at most `max_keys` keys (on the handler's clock) in front of the
    /// store calls of [`run`](Self::run) and [`run_async`](Self::run_async).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `max_keys = 0`.
    ///
    /// ```
    /// use floodgate::backend::{FailureHandler, FailurePolicy};
    /// use floodgate::{Decision, FixedWindow, ManualClock};
    /// use std::time::Duration;
    /// let make = |limit| FixedWindow::new(limit, Duration::from_secs(1));
    /// let handler = FailureHandler::with_clock(FailurePolicy::FailOpen, Duration::from_millis(50), make, 10, ManualClock::new())?
    ///     .with_deny_cache(10_000)?;
    /// let mut calls = 0;
    /// for _ in 0..5 {
    ///     let outcome = handler.run("k", 1, || { calls += 1; Ok(Decision::deny(10, 0, 2_000_000_000, 2_000_000_000)) });
    ///     assert!(!outcome.decision().is_allowed());
    /// }
    /// assert_eq!(calls, 1); // the other four were denied locally
    /// assert_eq!(handler.deny_cache().unwrap().denied_locally(), 4);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn with_deny_cache(mut self, max_keys: usize) -> Result<Self, ConfigError> {
        self.set_deny_cache(Some(max_keys))?;
        Ok(self)
    }

    /// Replaces (or, with `None`, removes) the breaker.
    pub(crate) fn set_breaker(&mut self, config: Option<BreakerConfig>) {
        self.breaker = config.map(|config| NodeBreakers::with_clock(config, self.clock.clone()));
    }

    /// Replaces (or, with `None`, removes) the deny cache.
    pub(crate) fn set_deny_cache(&mut self, max_keys: Option<usize>) -> Result<(), ConfigError> {
        self.denials = match max_keys {
            Some(max_keys) => Some(DenyCache::with_clock(max_keys, self.clock.clone())?),
            None => None,
        };
        Ok(())
    }

    /// The decision for `n` permits on `key`: from the [`DenyCache`] if it holds a denial for
    /// them; by the policy if the [`CircuitBreaker`] is open; else from `store` (the store call,
    /// bounded by the backend's timeout), its failure decided by the policy. `n` must already be
    /// checked against the distributed limit.
    ///
    /// ```
    /// use floodgate::backend::{FailureHandler, FailurePolicy};
    /// use floodgate::{Decision, FixedWindow};
    /// use std::time::Duration;
    /// let make = |limit| FixedWindow::new(limit, Duration::from_secs(1));
    /// let handler = FailureHandler::new(FailurePolicy::FailOpen, Duration::from_millis(5), make, 10)?;
    /// let outcome = handler.run("k", 1, || Ok(Decision::allow(10, 9, 0)));
    /// assert!(outcome.failure().is_none() && outcome.decision().is_allowed());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn run(
        &self,
        key: &str,
        n: u32,
        store: impl FnOnce() -> Result<Decision, BackendError>,
    ) -> Outcome {
        self.run_within(key, n, store, |_| Excuse::None)
    }

    /// As [`run`](Self::run), awaiting the store's future. Dropping the returned future while
    /// the store call is out leaves the breaker as if the call never happened (a dropped probe
    /// lets the next call probe).
    ///
    /// ```
    /// use floodgate::backend::{FailureHandler, FailurePolicy};
    /// use floodgate::{Decision, FixedWindow};
    /// use std::time::Duration;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), floodgate::ConfigError> {
    /// let make = |limit| FixedWindow::new(limit, Duration::from_secs(1));
    /// let handler = FailureHandler::new(FailurePolicy::FailOpen, Duration::from_millis(5), make, 10)?;
    /// let outcome = handler.run_async("k", 1, || async { Ok(Decision::allow(10, 9, 0)) }).await;
    /// assert!(outcome.decision().is_allowed());
    /// # Ok(()) }
    /// ```
    pub async fn run_async<F>(&self, key: &str, n: u32, store: impl FnOnce() -> F) -> Outcome
    where
        F: Future<Output = Result<Decision, BackendError>>,
    {
        self.run_async_excusing(key, n, || None, store, |_| Excuse::None)
            .await
    }

    /// As [`run_async`](Self::run_async), except that a failure is taken as `excuse` says
    /// ([`Excuse`]): reported to the breaker, or not (a call cut short by a wait of its own, or
    /// by its caller's own deadline, says nothing about the store), and decided by the policy
    /// and counted, or (the caller's own deadline) denied and counted nowhere. The call goes
    /// through the breaker of the node `node()` names (the store's node it goes to; `None`: the
    /// shared breaker), asked only when the deny cache did not answer.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) async fn run_async_excusing<F>(
        &self,
        key: &str,
        n: u32,
        node: impl FnOnce() -> Option<Arc<str>>,
        store: impl FnOnce() -> F,
        excuse: impl FnOnce(&BackendError) -> Excuse,
    ) -> Outcome
    where
        F: Future<Output = Result<Decision, BackendError>>,
    {
        let asked_at = match self.cached_denial(key, n) {
            Ok(asked_at) => asked_at,
            Err(denial) => return denial,
        };
        let node = node();
        let breaker = self.call_breaker(node.as_deref());
        match self.before(key, n, &breaker) {
            Before::Decided(outcome) => outcome,
            Before::Call(permit) => {
                let result = store().await;
                self.after_excusing(key, n, permit, asked_at, result, excuse)
            }
        }
    }

    /// The answer to a call its caller's own deadline cut short ([`Excuse::Caller`]): a
    /// denial of the distributed limit, `retry_after` the store's timeout (as fail-closed's
    /// answer to a call the store did not answer; see `RedisLimiter::try_acquire_for`).
    #[cold]
    fn out_of_callers_time(&self) -> Decision {
        Decision::deny(self.limit, 0, duration_to_nanos(self.timeout), 0)
    }

    /// As [`run`](Self::run), for one try of a call bounded by its caller's own budget
    /// (`try_acquire_for`): a failure is taken as `excuse` says ([`Excuse`]), as in
    /// [`run_async_excusing`](Self::run_async_excusing): [`Excuse::Caller`] (the try was cut
    /// short by that budget, sooner than the store's timeout, while the store answers) is
    /// neither reported to the breaker nor counted, and answered with a plain denial, not the
    /// policy's; [`Excuse::Breaker`] is decided by the policy and counted, not reported to the
    /// breaker; [`Excuse::None`] is decided by the policy as in `run`.
    pub(crate) fn run_within(
        &self,
        key: &str,
        n: u32,
        store: impl FnOnce() -> Result<Decision, BackendError>,
        excuse: impl FnOnce(&BackendError) -> Excuse,
    ) -> Outcome {
        let asked_at = match self.cached_denial(key, n) {
            Ok(asked_at) => asked_at,
            Err(denial) => return denial,
        };
        let breaker = self.call_breaker(None);
        match self.before(key, n, &breaker) {
            Before::Decided(outcome) => outcome,
            Before::Call(permit) => {
                let result = store();
                self.after_excusing(key, n, permit, asked_at, result, excuse)
            }
        }
    }

    /// As [`run_within`](Self::run_within), awaiting the store's future (through the shared
    /// breaker: [`run_async_excusing`](Self::run_async_excusing)).
    #[cfg_attr(not(feature = "memcached"), allow(dead_code))]
    pub(crate) async fn run_async_within<F>(
        &self,
        key: &str,
        n: u32,
        store: impl FnOnce() -> F,
        excuse: impl FnOnce(&BackendError) -> Excuse,
    ) -> Outcome
    where
        F: Future<Output = Result<Decision, BackendError>>,
    {
        self.run_async_excusing(key, n, || None, store, excuse)
            .await
    }

    /// A call made for no caller's decision (a lease's refund) through the breaker of the node
    /// `node` names (`None`: the shared breaker): `None` when the breaker does not admit it
    /// (open, or its half-open probe is out: nothing is sent), a [`BackendError::CircuitOpen`]
    /// then (its `retry_in` as a short-circuited decision's); otherwise the call's result,
    /// reported to the breaker unless `excused` or never sent (its deadline passed before it
    /// was written: [`BackendError::is_not_sent`]) (as in
    /// [`run_async_excusing`](Self::run_async_excusing)). A failure is not counted here (no
    /// caller's request is decided by it): [`decide`](Self::decide) counts it when a request
    /// is decided by it, [`count_failure`](Self::count_failure) when none is. Dropping the
    /// future while the call is out leaves the breaker as if it never happened.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) async fn run_aside<T, F>(
        &self,
        node: Option<&str>,
        store: impl FnOnce() -> F,
        excused: impl FnOnce(&BackendError) -> bool,
    ) -> Result<T, BackendError>
    where
        F: Future<Output = Result<T, BackendError>>,
    {
        let breaker = self.call_breaker(node);
        let permit = match &breaker {
            Some(breaker) => match breaker.admit() {
                Some(permit) => Some(permit),
                None => return Err(self.short_circuited(breaker)),
            },
            None => None,
        };
        let result = store().await;
        if let Some(permit) = permit {
            match &result {
                Ok(_) => permit.succeeded(),
                // Not sent (its deadline passed before it was written): not the store's.
                Err(error) if excused(error) || error.is_not_sent() => {}
                Err(_) => permit.failed(),
            }
        }
        result
    }

    /// Counts `error` (a timeout, an error, or a short circuit) as
    /// [`decide`](Self::decide) does, for a call whose failure decides no request.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn count_failure(&self, error: &BackendError) {
        if error.is_circuit_open() {
            // Relaxed: a statistics counter; no other memory depends on it.
            self.short_circuited.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let counter = if error.is_timeout() {
            &self.timeouts
        } else {
            &self.errors
        };
        // Relaxed: a statistics counter; no other memory depends on it.
        let of_its_kind = counter.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
        self.observer.failed(error, of_its_kind);
    }

    /// The breaker a call on `node` goes through (`None`: the shared one), if any.
    #[inline]
    fn call_breaker(&self, node: Option<&str>) -> CallBreaker<'_, C> {
        self.breaker
            .as_ref()
            .map(|breakers| breakers.for_call(node))
    }

    /// Whether a call on `node` (`None`: the shared breaker) finds its breaker closed, or no
    /// breaker at all (a snapshot): a caller that would wait for another caller's store call
    /// checks it, since while the breaker is not closed that call may be its half-open probe,
    /// out for up to the store's timeout.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn breaker_closed(&self, node: Option<&str>) -> bool {
        self.breaker
            .as_ref()
            .is_none_or(|breakers| breakers.for_call(node).state() == BreakerState::Closed)
    }

    /// The error a call on `node` (`None`: the shared breaker) is short-circuited with while
    /// its breaker is not closed, as [`run_aside`](Self::run_aside) builds it (without
    /// admitting a call): for a caller that gives up waiting for another caller's call,
    /// which may be the breaker's half-open probe.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn circuit_open(&self, node: Option<&str>) -> BackendError {
        match self.call_breaker(node) {
            Some(breaker) => self.short_circuited(&breaker),
            None => BackendError::CircuitOpen {
                retry_in: Duration::ZERO,
            },
        }
    }

    /// The error of a call `breaker` does not let out. Open: until the probe is due.
    /// Half-open: the probe out answers within the store's timeout (the breaker's own expiry of
    /// it is a lost probe's).
    fn short_circuited(&self, breaker: &NodeBreaker<'_, C>) -> BackendError {
        let retry_in = match breaker.state() {
            BreakerState::HalfOpen => breaker.retry_in().min(self.timeout),
            _ => breaker.retry_in(),
        };
        BackendError::CircuitOpen { retry_in }
    }

    /// Decides a request of `n` on `key` that sends no store call because a call it must
    /// follow was short-circuited (`error`): as the breaker's short circuit of its own call
    /// would, the deny cache's denial first if it has one, else [`decide`](Self::decide) with
    /// `error`. (A `LeasedKey` request behind a refund the breaker held: see its `send`.)
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn decide_unsent(&self, key: &str, n: u32, error: BackendError) -> Outcome {
        match self.cached_denial(key, n) {
            Err(denial) => denial,
            Ok(_) => self.decide(key, n, error),
        }
    }

    /// The deny cache, before a store call: its denial, or the time the call is asked at
    /// (for [`after`](Self::after) to record a denial from).
    #[inline]
    fn cached_denial(&self, key: &str, n: u32) -> Result<u64, Outcome> {
        match &self.denials {
            Some(cache) => match cache.check(key, n, self.limit) {
                Some(denial) => Err(Outcome::from_backend(denial)),
                None => Ok(cache.now()),
            },
            None => Ok(0),
        }
    }

    /// `breaker`, before a store call (once the deny cache passed it).
    #[inline]
    fn before<'a>(&self, key: &str, n: u32, breaker: &'a CallBreaker<'_, C>) -> Before<'a, C> {
        let permit = match breaker {
            Some(breaker) => match breaker.admit() {
                Some(permit) => Some(permit),
                None => {
                    let error = self.short_circuited(breaker);
                    return Before::Decided(self.decide(key, n, error));
                }
            },
            None => None,
        };
        Before::Call(permit)
    }

    /// [`after`](Self::after), a failure taken as `excuse` says ([`Excuse`]).
    fn after_excusing(
        &self,
        key: &str,
        n: u32,
        permit: Option<BreakerPermit<'_, C>>,
        asked_at: u64,
        result: Result<Decision, BackendError>,
        excuse: impl FnOnce(&BackendError) -> Excuse,
    ) -> Outcome {
        let excuse = match &result {
            Err(error) => excuse(error),
            Ok(_) => Excuse::None,
        };
        match excuse {
            Excuse::None => self.after(key, n, permit, asked_at, result),
            // Dropping the permit unreported leaves the breaker as if the call never happened.
            Excuse::Breaker => self.after(key, n, None, asked_at, result),
            Excuse::Caller => {
                drop(permit);
                Outcome::from_backend(self.out_of_callers_time())
            }
        }
    }

    /// Reports the store call's result to the breaker and the deny cache.
    #[inline]
    fn after(
        &self,
        key: &str,
        n: u32,
        permit: Option<BreakerPermit<'_, C>>,
        asked_at: u64,
        result: Result<Decision, BackendError>,
    ) -> Outcome {
        match result {
            Ok(decision) => {
                if let Some(permit) = permit {
                    permit.succeeded();
                }
                if let Some(cache) = &self.denials {
                    cache.record(key, n, &decision, asked_at);
                }
                Outcome::from_backend(decision)
            }
            Err(error) => {
                // A request never sent (its deadline passed before it was written) says
                // nothing about the store: the permit is dropped unreported, leaving the
                // breaker as if the call never happened; the policy decides it and it is
                // counted, as any timeout.
                if let Some(permit) = permit.filter(|_| !error.is_not_sent()) {
                    permit.failed();
                }
                self.decide(key, n, error)
            }
        }
    }

    /// Names the failures this handler reports (features `metrics` and `tracing`): those of
    /// `backend`'s limiter `limiter`. Handlers made outside the crate's backends report none.
    #[cfg_attr(not(any(feature = "redis", feature = "memcached")), allow(dead_code))]
    pub(crate) fn observed_as(mut self, backend: &'static str, limiter: &str) -> Self {
        self.observer = BackendObserver::new(backend, limiter);
        self
    }

    /// The policy in force.
    ///
    /// ```
    /// use floodgate::backend::{FailureHandler, FailurePolicy};
    /// use floodgate::FixedWindow;
    /// use std::time::Duration;
    /// let make = |limit| FixedWindow::new(limit, Duration::from_secs(1));
    /// let handler = FailureHandler::new(FailurePolicy::FailOpen, Duration::from_millis(5), make, 10)?;
    /// assert_eq!(handler.policy(), FailurePolicy::FailOpen);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn policy(&self) -> FailurePolicy {
        self.policy
    }

    /// Counts `error` and returns the policy's decision for `n` permits on `key`.
    /// `n` must already be checked against the distributed limit. A denial's `retry_after` is
    /// the breaker's `retry_in` for [`BackendError::CircuitOpen`] (no call reaches the store
    /// before then), the store's timeout for any other failure.
    ///
    /// ```
    /// use floodgate::backend::{BackendError, FailureHandler, FailurePolicy};
    /// use floodgate::FixedWindow;
    /// use std::time::Duration;
    /// let make = |limit| FixedWindow::new(limit, Duration::from_secs(1));
    /// let handler = FailureHandler::new(FailurePolicy::FailOpen, Duration::from_millis(5), make, 10)?;
    /// let outcome = handler.decide("k", 3, BackendError::Timeout { after: Duration::from_millis(5) });
    /// assert_eq!((outcome.decision().is_allowed(), outcome.decision().remaining()), (true, 7));
    /// assert!(outcome.failure().is_some_and(|e| e.is_timeout()));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn decide(&self, key: &str, n: u32, error: BackendError) -> Outcome {
        // A short circuit is not reported to the observer: the failures that opened the
        // breaker were.
        self.count_failure(&error);
        // A denial's retry: while the breaker is open, until its probe is due (no call before
        // then reaches the store); otherwise the store's timeout.
        let retry_nanos = match &error {
            BackendError::CircuitOpen { retry_in } => duration_to_nanos(*retry_in),
            _ => duration_to_nanos(self.timeout),
        };
        let decision = match (&self.policy, &self.local) {
            (FailurePolicy::FailOpen, _) => {
                Decision::allow(self.limit, self.limit.saturating_sub(u64::from(n)), 0)
            }
            (FailurePolicy::LocalFallback(_), Some(local)) => {
                match local.by_key.try_acquire(&HashedKey::from(key), n) {
                    Ok(decision) => decision,
                    // n fits the distributed limit but not the local share: a denial.
                    Err(_) => Decision::deny(u64::from(local.local_limit), 0, retry_nanos, 0),
                }
            }
            _ => Decision::deny(self.limit, 0, retry_nanos, 0),
        };
        Outcome::from_policy(decision, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FixedWindow, Gcra, ManualClock, Rate};

    fn error() -> BackendError {
        BackendError::failed(std::io::Error::other("connection refused"))
    }

    fn handler(
        policy: FailurePolicy,
        clock: ManualClock,
    ) -> FailureHandler<FixedWindow, ManualClock> {
        FailureHandler::with_clock(
            policy,
            Duration::from_millis(250),
            |limit| FixedWindow::new(limit, Duration::from_secs(10)),
            8,
            clock,
        )
        .unwrap()
    }

    /// A try cut short by its caller's own budget (`try_acquire_for`) is a plain denial: not
    /// the policy's answer (fail-open would admit), not counted, not reported to the breaker
    /// (which opens on one failure here); any other failure is still the policy's.
    #[test]
    fn a_try_cut_short_by_its_callers_budget_is_a_plain_denial_not_counted_nor_reported() {
        let breaker = BreakerConfig::new(1, Duration::from_secs(1), Duration::from_secs(8));
        let handler =
            handler(FailurePolicy::FailOpen, ManualClock::new()).with_breaker(breaker.unwrap());
        let late = || {
            Err(BackendError::Timeout {
                after: Duration::from_millis(5),
            })
        };
        let caller = |e: &BackendError| {
            if e.is_timeout() {
                Excuse::Caller
            } else {
                Excuse::None
            }
        };
        for _ in 0..3 {
            let outcome = handler.run_within("k", 1, late, caller);
            assert!(!outcome.decision().is_allowed());
            assert!(outcome.failure().is_none());
            assert_eq!(outcome.decision().retry_after(), Duration::from_millis(250));
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let outcome =
            runtime.block_on(handler.run_async_within("k", 1, || async { late() }, caller));
        assert!(!outcome.decision().is_allowed() && outcome.failure().is_none());
        assert_eq!(handler.counts().total(), 0);
        assert_eq!(handler.breaker().unwrap().state(), BreakerState::Closed);
        // The store looks down (`Excuse::Breaker`): the policy decides (fail-open admits),
        // counted, the breaker not told.
        let outcome = handler.run_within("k", 1, late, |_| Excuse::Breaker);
        assert!(outcome.decision().is_allowed() && outcome.failure().is_some());
        assert_eq!(handler.counts().timeouts, 1);
        assert_eq!(handler.breaker().unwrap().state(), BreakerState::Closed);
        // Not excused: the policy decides (fail-open admits), counted, the breaker opens.
        let outcome = handler.run_within("k", 1, late, |_| Excuse::None);
        assert!(outcome.decision().is_allowed() && outcome.failure().is_some());
        assert_eq!(handler.counts().timeouts, 2);
        assert_eq!(handler.breaker().unwrap().state(), BreakerState::Open);
    }

    #[test]
    fn fail_open_admits_and_counts() {
        let h = handler(FailurePolicy::FailOpen, ManualClock::new());
        for _ in 0..20 {
            let outcome = h.decide("k", 3, error());
            assert!(outcome.decision().is_allowed());
            assert_eq!(outcome.decision().remaining(), 5);
            assert!(outcome.failure().is_some());
        }
        assert_eq!(
            h.counts(),
            FailureCounts {
                timeouts: 0,
                errors: 20,
                short_circuited: 0,
            }
        );
    }

    #[test]
    fn fail_closed_denies_with_the_timeout_as_retry() {
        let h = handler(FailurePolicy::FailClosed, ManualClock::new());
        let d = h.decide(
            "k",
            1,
            BackendError::Timeout {
                after: Duration::from_millis(250),
            },
        );
        assert!(!d.decision().is_allowed());
        assert_eq!(d.decision().retry_after(), Duration::from_millis(250));
        assert_eq!(h.counts().timeouts, 1);
        assert_eq!(h.counts().total(), 1);
    }

    #[test]
    fn fail_closed_while_the_breaker_is_open_retries_when_the_probe_is_due() {
        let clock = ManualClock::new();
        let config =
            BreakerConfig::new(2, Duration::from_secs(2), Duration::from_secs(60)).unwrap();
        let h = handler(FailurePolicy::FailClosed, clock.clone()).with_breaker(config);
        for _ in 0..2 {
            let d = h.run("k", 1, || Err(error())).decision();
            assert_eq!(d.retry_after(), Duration::from_millis(250)); // the store's timeout
        }
        let mut called = false;
        let open = h.run("k", 1, || {
            called = true;
            Err(error())
        });
        assert!(!called);
        assert!(open.failure().is_some_and(|e| e.is_circuit_open()));
        assert_eq!(open.decision().retry_after(), Duration::from_secs(2));
        clock.advance(Duration::from_millis(1_500));
        let d = h.run("k", 1, || Err(error())).decision();
        assert_eq!(d.retry_after(), Duration::from_millis(500));
        assert_eq!(h.counts().short_circuited, 2);
        // Half-open with the probe out: the probe answers within the store's timeout.
        clock.advance(Duration::from_millis(500));
        let probe = h.breaker().unwrap().admit().expect("the probe");
        let d = h.run("k", 1, || Err(error())).decision();
        assert_eq!(d.retry_after(), Duration::from_millis(250));
        probe.succeeded();
        assert_eq!(h.breaker().unwrap().state(), BreakerState::Closed);
    }

    #[test]
    fn an_excused_failure_leaves_the_breaker_alone() {
        let config =
            BreakerConfig::new(1, Duration::from_secs(2), Duration::from_secs(60)).unwrap();
        let h = handler(FailurePolicy::FailClosed, ManualClock::new()).with_breaker(config);
        let outcome = poll_once(h.run_async_excusing(
            "k",
            1,
            || None,
            || async { Err(error()) },
            |_| Excuse::Breaker,
        ));
        assert!(!outcome.decision().is_allowed());
        assert_eq!(h.counts().errors, 1);
        assert_eq!(h.breaker().unwrap().state(), BreakerState::Closed);
        let _ = poll_once(h.run_async_excusing(
            "k",
            1,
            || None,
            || async { Err(error()) },
            |_| Excuse::None,
        ));
        assert_eq!(h.breaker().unwrap().state(), BreakerState::Open);
    }

    #[test]
    fn a_call_cut_short_by_its_callers_deadline_is_denied_whatever_the_policy_and_not_counted() {
        let config =
            BreakerConfig::new(1, Duration::from_secs(2), Duration::from_secs(60)).unwrap();
        let timeout = || BackendError::Timeout {
            after: Duration::from_millis(1),
        };
        for policy in [
            FailurePolicy::FailOpen,
            FailurePolicy::FailClosed,
            FailurePolicy::local_fallback(0.5).unwrap(),
        ] {
            let h = handler(policy, ManualClock::new())
                .with_breaker(config)
                .with_deny_cache(16)
                .unwrap();
            let store = || async { Err(timeout()) };
            let outcome =
                poll_once(h.run_async_excusing("k", 3, || None, store, |_| Excuse::Caller));
            assert!(outcome.failure().is_none(), "{policy:?}");
            // The distributed limit, retry after the store's timeout (the handler's 250 ms).
            let denial = Decision::deny(8, 0, 250_000_000, 0);
            assert_eq!(outcome.decision(), denial, "{policy:?}");
            assert_eq!(h.counts(), FailureCounts::default(), "{policy:?}");
            assert_eq!(h.breaker().unwrap().state(), BreakerState::Closed);
            // Nothing cached: the next call goes to the store, and a store's failure is the
            // policy's to decide (and opens the breaker, at one failure).
            let mut called = false;
            let store = || {
                called = true;
                async { Err(timeout()) }
            };
            let next = poll_once(h.run_async_excusing("k", 3, || None, store, |_| Excuse::None));
            assert!(called && next.failure().is_some(), "{policy:?}");
            assert_eq!(h.counts().timeouts, 1, "{policy:?}");
            assert_eq!(h.breaker().unwrap().state(), BreakerState::Open);
        }
    }

    /// Polls a future that never waits (the stores above answer at once) to completion.
    /// The deny cache answers before the call's node (a cluster key's master, and its
    /// breaker) is looked up: a locally denied call asks for neither.
    #[test]
    fn a_cached_denial_looks_up_no_node() {
        let config =
            BreakerConfig::new(2, Duration::from_secs(2), Duration::from_secs(60)).unwrap();
        let h = handler(FailurePolicy::FailClosed, ManualClock::new())
            .with_breaker(config)
            .with_deny_cache(16)
            .unwrap();
        let looked_up = std::cell::Cell::new(0);
        let node = || {
            looked_up.set(looked_up.get() + 1);
            Some(Arc::<str>::from("redis://10.0.0.1:7000"))
        };
        let denied = || async { Ok(Decision::deny(8, 0, 5_000_000_000, 5_000_000_000)) };
        let first = poll_once(h.run_async_excusing("k", 1, node, denied, |_| Excuse::None));
        assert!(!first.decision().is_allowed());
        assert_eq!(
            looked_up.get(),
            1,
            "the call to the store looked its node up"
        );
        let mut called = false;
        let store = || {
            called = true;
            async { Err(error()) }
        };
        let cached = poll_once(h.run_async_excusing("k", 1, node, store, |_| Excuse::None));
        assert!(!cached.decision().is_allowed() && !called);
        assert_eq!(looked_up.get(), 1, "the cached denial looked its node up");
        assert_eq!(h.breaker().unwrap().state(), BreakerState::Closed);
    }

    fn poll_once<F: Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(output) => output,
            std::task::Poll::Pending => panic!("the store answers at once"),
        }
    }

    #[test]
    fn local_fallback_keeps_a_share_per_key_and_refills_with_time() {
        let clock = ManualClock::new();
        let h = handler(FailurePolicy::local_fallback(0.5).unwrap(), clock.clone());
        let admitted = |key: &str| {
            (0..10)
                .filter(|_| h.decide(key, 1, error()).decision().is_allowed())
                .count()
        };
        assert_eq!(admitted("a"), 4);
        assert_eq!(admitted("b"), 4);
        assert_eq!(admitted("a"), 0);
        clock.advance(Duration::from_secs(10));
        assert_eq!(admitted("a"), 4);
        // 5 permits fit the distributed limit (8) but never the local share (4): denied, not Err.
        let d = h.decide("c", 5, error()).decision();
        assert!(!d.is_allowed());
        assert_eq!(d.limit(), 4);
    }

    #[test]
    fn local_share_that_cannot_be_built_is_a_config_error() {
        let result = FailureHandler::with_clock(
            FailurePolicy::local_fallback(1.0).unwrap(),
            Duration::from_millis(1),
            |burst| Gcra::new(Rate::new(1, Duration::MAX), burst),
            8,
            ManualClock::new(),
        );
        assert!(result.is_err());
    }

    #[test]
    fn a_full_fallback_map_drops_idle_keys_then_denies() {
        let clock = ManualClock::new();
        let h = handler(FailurePolicy::local_fallback(1.0).unwrap(), clock.clone());
        let local = &h.local.as_ref().unwrap().by_key;
        // Busy keys fill the map (per shard) until a new key finds no room and is denied.
        let refused = (0..=FALLBACK_MAX_KEYS)
            .map(|i| i.to_string())
            .find(|key| !h.decide(key, 1, error()).decision().is_allowed())
            .expect("the cap refuses a new key once its shard is full of busy keys");
        assert!(local.len() <= FALLBACK_MAX_KEYS);
        assert!(local.len() > FALLBACK_MAX_KEYS / 2, "held {}", local.len());
        // Once the windows are over, the idle keys make room.
        clock.advance(Duration::from_secs(10));
        assert!(h.decide(&refused, 1, error()).decision().is_allowed());
        local.retain_recent();
        assert_eq!(local.len(), 1);
    }

    #[test]
    fn share_validation() {
        for bad in [0.0, -0.5, 1.5, f64::INFINITY, f64::NAN] {
            assert!(FailurePolicy::local_fallback(bad).is_err(), "{bad}");
        }
        assert_eq!(
            FailurePolicy::local_fallback(1.0).unwrap().share(),
            Some(1.0)
        );
    }
}
