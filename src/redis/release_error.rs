//! [`ReleaseError`]: why [`LeasedKey::release`](super::LeasedKey::release) could not say what
//! it gave back.

use std::fmt;

use crate::backend::BackendError;

/// Why [`LeasedKey::release`](super::LeasedKey::release) could not say what it gave back: it
/// was called outside a tokio runtime, or another caller held the key's lease past the call's
/// timeout (nothing was sent, the lease is kept, either way), or the refund's call failed (the
/// refund is kept and sent again). A refund the server refused (a decision on the key came
/// after the lease) is no error: `release` returns `Ok(0)`.
///
/// ```
/// use floodgate::backend::{BackendError, FailureKind};
/// use floodgate::redis::ReleaseError;
/// use std::error::Error as _;
/// let down = BackendError::at(FailureKind::Refused, "redis://10.0.0.7:6379", std::io::Error::other("no"));
/// let e = ReleaseError::Refund { permits: 7, error: down };
/// assert_eq!(
///     e.to_string(),
///     "the refund of 7 leased permits failed (counted stranded; kept, to be sent again): \
///      connection refused at redis://10.0.0.7:6379: no"
/// );
/// assert!(e.source().is_some());
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ReleaseError {
    /// Called outside a tokio runtime: nothing was sent and the lease is kept. The text says
    /// what to do instead.
    Runtime(&'static str),
    /// Another caller (a refill replacing the key's lease, or another `release`) held the
    /// lease until less than [`LeasedKey::min_call_time`](super::LeasedKey::min_call_time)
    /// was left of the backend's timeout from this call's start (a refund sent with less would
    /// most likely time out), or held it while the key's circuit breaker was open or
    /// half-open (its call may be the breaker's probe: this call then returns at once, once
    /// it polled the call and found it still out): this call gave up waiting for it, sent
    /// nothing and kept the lease (its unserved permits are given back by a later `release`,
    /// or by the refill that held it). Not a failure of the server: not
    /// counted in the limiter's [`failures`](super::RedisLimiter::failures) nor told to its
    /// breaker.
    ///
    /// ```
    /// use floodgate::backend::{BackendError, FailureKind};
    /// use floodgate::redis::ReleaseError;
    /// use std::error::Error as _;
    /// let late = std::io::Error::new(std::io::ErrorKind::TimedOut, "the lease was held");
    /// let error = BackendError::at(FailureKind::Timeout, "redis://10.0.0.7:6379", late);
    /// let e = ReleaseError::Busy { error };
    /// assert_eq!(
    ///     e.to_string(),
    ///     "nothing was sent (the lease is kept, to be given back later): \
    ///      timeout at redis://10.0.0.7:6379: the lease was held"
    /// );
    /// assert!(e.source().is_some_and(|s| s.to_string().contains("the lease was held")));
    /// ```
    Busy {
        /// A [`FailureKind::Timeout`](crate::backend::FailureKind::Timeout) naming the
        /// key's server (on a Redis Cluster, its master) and the timeout, or the breaker's
        /// [`BackendError::CircuitOpen`].
        error: BackendError,
    },
    /// The refund's call failed: the server could not be reached, did not answer within the
    /// backend's timeout, or replied what the refund script cannot reply (a
    /// [`FailureKind::Protocol`](crate::backend::FailureKind::Protocol) failure); or the key's
    /// breaker did not let it out ([`BackendError::CircuitOpen`]). The lease is dropped and its
    /// unserved permits are counted in [`LeaseCounts`](super::LeaseCounts)'s `stranded` (and a
    /// failed call in its `failed_refunds`, and in the limiter's failures). The refund is kept
    /// and sent again, under its name, by the key's next `release` or refill, until its
    /// lease's time has passed: a retry that lands (or finds that the refund had landed) moves
    /// the permits to `refunded`. A refund that was sent (a timeout, a connection that dropped
    /// before the reply) may have run and given them back, or may still run (until its
    /// deadline on the server's clock; then it is refused as late): until a retry says so, the
    /// `stranded` count is then that many high.
    Refund {
        /// The unserved permits the refund would have given back.
        permits: u64,
        /// The call's failure, naming the server (on a Redis Cluster, the key's master).
        error: BackendError,
    },
}

impl fmt::Display for ReleaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseError::Runtime(why) => f.write_str(why),
            ReleaseError::Busy { error } => write!(
                f,
                "nothing was sent (the lease is kept, to be given back later): {error}"
            ),
            ReleaseError::Refund { permits, error } => write!(
                f,
                "the refund of {permits} leased permits failed (counted stranded; kept, to be \
                 sent again): {error}"
            ),
        }
    }
}

impl std::error::Error for ReleaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReleaseError::Runtime(_) => None,
            ReleaseError::Refund { error, .. } | ReleaseError::Busy { error } => Some(error),
        }
    }
}
