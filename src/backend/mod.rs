//! What a distributed limiter does when its shared store (Redis today, memcached later) is slow or
//! down. Backend-neutral, so every distributed backend applies the same policy the same way:
//!
//! * [`FailurePolicy`]: fail open, fail closed, or decide locally with a share of the limit;
//! * [`BackendError`]: why the store gave no answer (a timeout, or the store's own error), and
//!   its [`FailureKind`] (timeout, refused, connection, protocol, script);
//! * [`Outcome`]: the decision, plus the error when the decision came from the policy;
//! * [`FailureHandler`]: applies a policy, keeps the per-key local fallback limiters and counts
//!   failures ([`FailureCounts`]); with [`FailureHandler::run`] / [`FailureHandler::run_async`]
//!   it also puts a [`CircuitBreaker`] and a [`DenyCache`] in front of the store call;
//! * [`CircuitBreaker`]: after repeated failures, stop calling the store for a back-off, then
//!   probe;
//! * [`DenyCache`]: after the store denies a key, deny it locally until its `retry_after`.
//!
//! A backend calls the store with a timeout; on any error it hands the error to its
//! [`FailureHandler`], which returns the policy's decision. The caller never waits past the
//! timeout and never sees a panic; it sees the error only if it asks for the [`Outcome`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::decision::{AcquireError, ConfigError, Decision};

mod breaker;
#[cfg(any(feature = "redis", feature = "memcached"))]
mod deadline;
mod deny_cache;
mod handler;
#[cfg_attr(
    not(any(feature = "redis", feature = "memcached", floodgate_loom)),
    allow(dead_code)
)]
mod last_reply;
mod node_breakers;
#[cfg_attr(not(any(feature = "redis", floodgate_loom)), allow(dead_code))]
mod server_clock;
#[cfg_attr(not(any(feature = "redis", floodgate_loom)), allow(dead_code))]
mod turns;
#[cfg(any(feature = "redis", feature = "memcached"))]
pub(crate) mod waits;

pub use breaker::{
    BreakerConfig, BreakerPermit, BreakerState, CircuitBreaker, MAX_BREAKER_FAILURES, MAX_OPEN_FOR,
};
#[cfg(any(feature = "redis", feature = "memcached"))]
pub(crate) use deadline::until_deadline;
pub use deny_cache::{DENY_CACHE_MAX_KEYS, DenyCache};
#[cfg_attr(
    not(any(feature = "redis", feature = "memcached")),
    allow(unused_imports)
)]
pub(crate) use handler::Excuse;
pub use handler::{FALLBACK_MAX_KEYS, FailureHandler};
#[cfg_attr(
    not(any(feature = "redis", feature = "memcached", floodgate_loom)),
    allow(unused_imports)
)]
pub(crate) use last_reply::LastReply;
pub use node_breakers::{MAX_NODE_BREAKERS, NodeBreakers};
#[cfg_attr(not(any(feature = "redis", floodgate_loom)), allow(unused_imports))]
pub(crate) use server_clock::ServerOffset;
#[cfg_attr(not(any(feature = "redis", floodgate_loom)), allow(unused_imports))]
pub(crate) use turns::Turns;

/// What to decide when the shared store gives no answer in time.
///
/// ```
/// use floodgate::backend::FailurePolicy;
/// let policy = FailurePolicy::local_fallback(0.25).unwrap(); // each process: 25% of the limit
/// assert_eq!(policy.share(), Some(0.25));
/// assert!(FailurePolicy::local_fallback(0.0).is_err());
/// assert_eq!(FailurePolicy::FailClosed.share(), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Admit every request (availability first). The decision reports the full limit with
    /// `remaining = limit - n` and no reset time (`reset_after` zero: the store's state is
    /// unknown); the HTTP layer then writes no `t` (or reset field) rather than `0`.
    FailOpen,
    /// Deny every request (protection first). `retry_after` is the backend's timeout.
    FailClosed,
    /// Decide locally, per key, with a local floodgate limiter of the same kind holding
    /// `share` of the limit (at least 1). With `k` processes, `share = 1/k` keeps the total near
    /// the limit. Local state starts fresh at the first failure and is kept for later outages.
    LocalFallback(Share),
}

/// A share of a limit in `(0, 1]`, for [`FailurePolicy::LocalFallback`]; made by
/// [`FailurePolicy::local_fallback`], which refuses a share outside that range.
///
/// ```
/// use floodgate::backend::FailurePolicy;
/// let FailurePolicy::LocalFallback(share) = FailurePolicy::local_fallback(0.25)? else {
///     unreachable!()
/// };
/// assert_eq!(share.of(100), 25);
/// assert!(FailurePolicy::local_fallback(0.0).is_err());
/// assert!(FailurePolicy::local_fallback(1.5).is_err());
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Share(f64);

impl Share {
    /// The share as a number in `(0, 1]`.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// let policy = FailurePolicy::local_fallback(0.25)?;
    /// let FailurePolicy::LocalFallback(share) = policy else { unreachable!() };
    /// assert_eq!(share.get(), 0.25);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn get(self) -> f64 {
        self.0
    }

    /// `limit × share`, rounded down, at least 1.
    ///
    /// ```
    /// let policy = floodgate::backend::FailurePolicy::local_fallback(0.5).unwrap();
    /// let floodgate::backend::FailurePolicy::LocalFallback(share) = policy else { unreachable!() };
    /// assert_eq!(share.of(9), 4);
    /// assert_eq!(share.of(1), 1);
    /// ```
    pub fn of(self, limit: u32) -> u32 {
        let product = f64::from(limit) * self.0;
        // A decimal share is stored to within half an ulp and the product rounds once more, so
        // an exact product such as 100 × 0.29 = 29 can read 28.999999999999996: a product
        // within a few ulps of an integer is that integer (a share would need 15 significant
        // digits to mean a product that close), anything else is rounded down.
        let nearest = product.round();
        let product = if (product - nearest).abs() <= nearest * 4.0 * f64::EPSILON {
            nearest
        } else {
            product.floor()
        };
        // At most `limit` (share <= 1), so the cast cannot overflow.
        (product as u32).clamp(1, limit.max(1))
    }
}

impl FailurePolicy {
    /// [`FailurePolicy::LocalFallback`] with `share` of the limit.
    ///
    /// # Errors
    /// [`ConfigError::InvalidNumber`] unless `0 < share <= 1`.
    ///
    /// ```
    /// assert!(floodgate::backend::FailurePolicy::local_fallback(f64::NAN).is_err());
    /// ```
    pub fn local_fallback(share: f64) -> Result<Self, ConfigError> {
        if share.is_finite() && share > 0.0 && share <= 1.0 {
            Ok(FailurePolicy::LocalFallback(Share(share)))
        } else {
            Err(ConfigError::InvalidNumber {
                what: "fallback share",
                value: share,
                expected: "in (0, 1]",
            })
        }
    }

    /// The share of [`FailurePolicy::LocalFallback`], `None` for the other policies.
    ///
    /// ```
    /// use floodgate::backend::FailurePolicy;
    /// assert_eq!(FailurePolicy::local_fallback(0.5)?.share(), Some(0.5));
    /// assert_eq!(FailurePolicy::FailOpen.share(), None);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn share(&self) -> Option<f64> {
        match self {
            FailurePolicy::LocalFallback(share) => Some(share.get()),
            _ => None,
        }
    }
}

/// Why the shared store gave no decision.
///
/// ```
/// use floodgate::backend::BackendError;
/// use std::time::Duration;
/// let e = BackendError::Timeout { after: Duration::from_millis(50) };
/// assert!(e.is_timeout());
/// assert_eq!(e.to_string(), "no answer from the backend within 50ms");
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum BackendError {
    /// No answer within the configured timeout.
    Timeout {
        /// The timeout that ran out.
        after: Duration,
    },
    /// The store (or the connection to it) answered with an error.
    Failed(Arc<dyn std::error::Error + Send + Sync>),
    /// A failure of a known [`FailureKind`] at a named server (its address, password redacted).
    Server {
        /// What went wrong.
        kind: FailureKind,
        /// The server's address as configured, any password replaced by `***`.
        server: Arc<str>,
        /// The underlying error.
        error: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// Not called: the [`CircuitBreaker`] is open after repeated failures.
    CircuitOpen {
        /// How long until the breaker lets a probe through.
        retry_in: Duration,
    },
}

/// The kind of a [`BackendError`], for metrics, alerts and circuit breakers.
///
/// ```
/// use floodgate::backend::{BackendError, FailureKind};
/// let e = BackendError::at(FailureKind::Refused, "redis://10.0.0.7:6379", std::io::Error::other("no"));
/// assert_eq!(e.kind(), FailureKind::Refused);
/// assert_eq!(e.to_string(), "connection refused at redis://10.0.0.7:6379: no");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailureKind {
    /// No answer within the timeout (or the server refused work past the request's deadline).
    Timeout,
    /// The server refused the connection (nothing listens on the port).
    Refused,
    /// The connection failed or dropped (I/O error, reset, DNS).
    Connection,
    /// The server's reply could not be read, or was not what the request expects.
    Protocol,
    /// The server answered with an error (a script error, a key of the wrong type, OOM, …).
    Script,
    /// Anything else: a configuration the client refused or the server does not match (a
    /// Redis Cluster configuration at a server with cluster mode off, or the reverse), an
    /// unclassified error.
    Other,
    /// The store was not called: the circuit breaker is open after repeated failures.
    CircuitOpen,
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailureKind::Timeout => "timeout",
            FailureKind::Refused => "connection refused",
            FailureKind::Connection => "connection error",
            FailureKind::Protocol => "protocol error",
            FailureKind::Script => "script error",
            FailureKind::Other => "error",
            FailureKind::CircuitOpen => "circuit open",
        })
    }
}

impl BackendError {
    /// A [`BackendError::Failed`] wrapping `error`.
    ///
    /// ```
    /// let e = floodgate::backend::BackendError::failed(std::io::Error::other("refused"));
    /// assert!(!e.is_timeout());
    /// ```
    pub fn failed(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        BackendError::Failed(Arc::new(error))
    }

    /// Whether this is a [`BackendError::CircuitOpen`]: the store was not called.
    ///
    /// ```
    /// use floodgate::backend::BackendError;
    /// assert!(BackendError::CircuitOpen { retry_in: std::time::Duration::ZERO }.is_circuit_open());
    /// ```
    pub fn is_circuit_open(&self) -> bool {
        matches!(self, BackendError::CircuitOpen { .. })
    }

    /// Whether this is a [`BackendError::Timeout`].
    ///
    /// ```
    /// use floodgate::backend::BackendError;
    /// use std::time::Duration;
    /// assert!(BackendError::Timeout { after: Duration::from_millis(1) }.is_timeout());
    /// assert!(!BackendError::failed(std::io::Error::other("refused")).is_timeout());
    /// ```
    pub fn is_timeout(&self) -> bool {
        self.kind() == FailureKind::Timeout
    }

    /// A [`BackendError::Server`]: `error`, of `kind`, at `server` (give it without a password).
    ///
    /// ```
    /// use floodgate::backend::{BackendError, FailureKind};
    /// let e = BackendError::at(FailureKind::Timeout, "redis://h:6379", std::io::Error::other("late"));
    /// assert!(e.is_timeout() && e.server_address() == Some("redis://h:6379"));
    /// ```
    pub fn at(
        kind: FailureKind,
        server: impl Into<Arc<str>>,
        error: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        BackendError::Server {
            kind,
            server: server.into(),
            error: Arc::new(error),
        }
    }

    /// The kind of failure: [`FailureKind::Timeout`] for [`BackendError::Timeout`],
    /// [`FailureKind::Other`] for an unclassified [`BackendError::Failed`].
    ///
    /// ```
    /// use floodgate::backend::{BackendError, FailureKind};
    /// use std::time::Duration;
    /// assert_eq!(BackendError::Timeout { after: Duration::ZERO }.kind(), FailureKind::Timeout);
    /// assert_eq!(BackendError::failed(std::fmt::Error).kind(), FailureKind::Other);
    /// ```
    pub fn kind(&self) -> FailureKind {
        match self {
            BackendError::Timeout { .. } => FailureKind::Timeout,
            BackendError::Failed(_) => FailureKind::Other,
            BackendError::Server { kind, .. } => *kind,
            BackendError::CircuitOpen { .. } => FailureKind::CircuitOpen,
        }
    }

    /// The server the failure happened at, when known.
    ///
    /// ```
    /// use floodgate::backend::BackendError;
    /// assert_eq!(BackendError::failed(std::fmt::Error).server_address(), None);
    /// ```
    pub fn server_address(&self) -> Option<&str> {
        match self {
            BackendError::Server { server, .. } => Some(server),
            _ => None,
        }
    }
}

/// The cause of a timeout whose request was never sent: its deadline had passed before
/// anything was written (a future first polled late, a decision queued past its deadline, a
/// memcached exchange its runtime started past it, a blocking memcached call past it before
/// its write or that never got a connection), or too little of it was left to send it
/// (`LeasedKey::min_call_time`). It says nothing about the
/// store, so [`FailureHandler`] does not report it to the breaker
/// ([`BackendError::is_not_sent`]). Holds the reason, as the error's message.
#[derive(Debug)]
#[cfg_attr(not(any(feature = "redis", feature = "memcached")), allow(dead_code))]
pub(crate) struct NotSent(pub(crate) std::borrow::Cow<'static, str>);

impl fmt::Display for NotSent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotSent {}

impl BackendError {
    /// Whether this is a timeout of a request that was never sent ([`NotSent`]): no call
    /// reached the store, so the breaker is not told of it.
    pub(crate) fn is_not_sent(&self) -> bool {
        match self {
            BackendError::Server { error, .. } => error.downcast_ref::<NotSent>().is_some(),
            _ => false,
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Timeout { after } => {
                write!(f, "no answer from the backend within {after:?}")
            }
            BackendError::Failed(error) => write!(f, "backend error: {error}"),
            BackendError::Server {
                kind,
                server,
                error,
            } => write!(f, "{kind} at {server}: {error}"),
            BackendError::CircuitOpen { retry_in } => write!(
                f,
                "backend not called: circuit breaker open after repeated failures \
                 (next probe in {retry_in:?})"
            ),
        }
    }
}

impl std::error::Error for BackendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BackendError::Timeout { .. } | BackendError::CircuitOpen { .. } => None,
            BackendError::Failed(error) | BackendError::Server { error, .. } => Some(&**error),
        }
    }
}

/// A decision and, when the store gave none, the error the [`FailurePolicy`] decided on instead.
///
/// ```
/// use floodgate::backend::Outcome;
/// use floodgate::Decision;
/// let o = Outcome::from_backend(Decision::allow(10, 9, 0));
/// assert!(o.failure().is_none() && o.decision().is_allowed());
/// ```
#[derive(Clone, Debug)]
pub struct Outcome {
    decision: Decision,
    failure: Option<BackendError>,
}

impl Outcome {
    /// A decision the store made.
    ///
    /// ```
    /// use floodgate::{backend::Outcome, Decision};
    /// let o = Outcome::from_backend(Decision::deny(10, 0, 5, 5));
    /// assert!(o.failure().is_none() && !o.decision().is_allowed());
    /// ```
    pub fn from_backend(decision: Decision) -> Self {
        Outcome {
            decision,
            failure: None,
        }
    }

    /// A decision the [`FailurePolicy`] made because of `error`.
    ///
    /// ```
    /// use floodgate::backend::{BackendError, Outcome};
    /// use floodgate::Decision;
    /// let o = Outcome::from_policy(Decision::allow(10, 9, 0), BackendError::failed(std::fmt::Error));
    /// assert!(o.failure().is_some_and(|e| !e.is_timeout()));
    /// ```
    pub fn from_policy(decision: Decision, error: BackendError) -> Self {
        Outcome {
            decision,
            failure: Some(error),
        }
    }

    /// The decision (the store's, or the policy's).
    ///
    /// ```
    /// use floodgate::{backend::Outcome, Decision};
    /// let d = Decision::allow(10, 9, 0);
    /// assert_eq!(Outcome::from_backend(d).decision(), d);
    /// ```
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// The error, when the decision is the policy's.
    ///
    /// ```
    /// use floodgate::backend::{BackendError, Outcome};
    /// use floodgate::Decision;
    /// use std::time::Duration;
    /// let error = BackendError::Timeout { after: Duration::ZERO };
    /// let o = Outcome::from_policy(Decision::deny(10, 0, 1, 1), error);
    /// assert!(o.failure().is_some_and(|e| e.is_timeout()));
    /// ```
    pub fn failure(&self) -> Option<&BackendError> {
        self.failure.as_ref()
    }

    /// Splits into the decision and the error.
    ///
    /// ```
    /// use floodgate::backend::{BackendError, Outcome};
    /// use floodgate::Decision;
    /// let o = Outcome::from_policy(Decision::allow(10, 9, 0), BackendError::failed(std::fmt::Error));
    /// let (decision, error) = o.into_parts();
    /// assert!(decision.is_allowed() && error.is_some());
    /// ```
    pub fn into_parts(self) -> (Decision, Option<BackendError>) {
        (self.decision, self.failure)
    }
}

/// The longest backend timeout accepted: one hour. Longer ones are almost certainly a bug, and
/// `Instant::now() + timeout` must stay representable.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Checks a backend timeout: longer than zero (a zero timeout would fail every call at once) and
/// at most [`MAX_TIMEOUT`].
///
/// # Errors
/// A [`BackendError`] of kind `InvalidInput` saying which bound was broken.
///
/// ```
/// use floodgate::backend::validate_timeout;
/// use std::time::Duration;
/// assert!(validate_timeout(Duration::from_millis(50)).is_ok());
/// assert!(validate_timeout(Duration::ZERO).is_err());
/// assert!(validate_timeout(Duration::MAX).is_err());
/// ```
pub fn validate_timeout(timeout: Duration) -> Result<(), BackendError> {
    let why = if timeout.is_zero() {
        "a backend timeout must be longer than zero"
    } else if timeout > MAX_TIMEOUT {
        "a backend timeout must be at most one hour"
    } else {
        return Ok(());
    };
    Err(BackendError::failed(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        why,
    )))
}

/// Failures seen so far, for metrics.
///
/// ```
/// let counts = floodgate::backend::FailureCounts::default();
/// assert_eq!(counts.total(), 0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FailureCounts {
    /// Calls that got no answer within the timeout.
    pub timeouts: u64,
    /// Calls that got an error (connection refused, script error, …).
    pub errors: u64,
    /// Calls not sent because the [`CircuitBreaker`] was open.
    pub short_circuited: u64,
}

impl FailureCounts {
    /// Every call the policy decided: timeouts, errors and short-circuited calls.
    ///
    /// ```
    /// let counts = floodgate::backend::FailureCounts { timeouts: 2, errors: 3, short_circuited: 4 };
    /// assert_eq!(counts.total(), 9);
    /// ```
    pub fn total(&self) -> u64 {
        self.timeouts + self.errors + self.short_circuited
    }
}

/// A request a backend limiter (Redis, memcached) refuses to send: bad permits, or a key the
/// store cannot hold. One type for every backend; store failures are not errors but
/// [`Outcome`]s decided by the [`FailurePolicy`].
///
/// ```
/// use floodgate::backend::RequestError;
/// use floodgate::AcquireError;
/// let e = RequestError::from(AcquireError::ZeroPermits);
/// assert_eq!(e.to_string(), "a request must ask for at least 1 permit");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// `n = 0` or `n` above the limit.
    Permits(AcquireError),
    /// The key, encoded, makes cell keys longer than memcached's 250 bytes.
    KeyTooLong {
        /// Bytes of the longest cell key it would make.
        len: usize,
        /// memcached's maximum.
        max: usize,
    },
    /// The call cannot run on this thread: an async call outside a tokio runtime, or a
    /// `blocking_*` call inside one (it would block a runtime thread, or deadlock a
    /// current-thread runtime). The text says which, and what to call instead.
    Runtime(&'static str),
}

impl From<AcquireError> for RequestError {
    fn from(error: AcquireError) -> Self {
        RequestError::Permits(error)
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Permits(error) => error.fmt(f),
            RequestError::KeyTooLong { len, max } => write!(
                f,
                "key too long for memcached: its cell keys would be {len} bytes (max {max})"
            ),
            RequestError::Runtime(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for RequestError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decimal_share_of_a_limit_is_its_exact_product() {
        let of = |share: f64, limit: u32| {
            let FailurePolicy::LocalFallback(share) = FailurePolicy::local_fallback(share).unwrap()
            else {
                unreachable!()
            };
            share.of(limit)
        };
        // 100 × 0.29 is 28.999999999999996 in f64: rounded down, a share of 29 became 28.
        for (share, limit, expected) in [
            (0.29, 100, 29),
            (0.57, 100, 57),
            (0.58, 100, 58),
            (0.07, 100, 7),
            (0.1, 30, 3),
            (1.0 / 3.0, 300, 100),
            (0.5, 9, 4),
            (0.999, 1_000, 999),
            (0.9999999, u32::MAX, 4_294_966_865),
            (1.0, u32::MAX, u32::MAX),
            (1e-9, 10, 1),
        ] {
            assert_eq!(of(share, limit), expected, "{share} of {limit}");
        }
        // Every share of a hundredth, of every limit a multiple of 100 up to 10,000.
        for hundredths in 1..=100u32 {
            let share = f64::from(hundredths) / 100.0;
            for limit in (100..=10_000u32).step_by(100) {
                assert_eq!(
                    of(share, limit),
                    limit / 100 * hundredths,
                    "{share} of {limit}"
                );
            }
        }
    }
}
