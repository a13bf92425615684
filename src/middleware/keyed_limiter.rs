//! [`KeyedLimiter`]: what the HTTP layer asks of a per-key limiter, and its implementations
//! (local maps decided now; memcached and Redis limiters awaited, [`Decided`]).

use crate::clock::Clock;
use crate::decision::{AcquireError, Decision};
use crate::keyed::{Key, Keyed, PenalizedKeyed};
use crate::limiter::Algorithm;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A decision from [`KeyedLimiter::decide`]: made now (a local limiter), or to be awaited (a
/// limiter whose state is in a shared store, such as memcached).
///
/// ```
/// use floodgate::middleware::{Decided, KeyedLimiter};
/// use floodgate::{FixedWindow, Keyed};
/// use std::sync::Arc;
/// let keyed: Arc<Keyed<u64, _>> = Arc::new(Keyed::new(FixedWindow::new(1, std::time::Duration::from_secs(1))?, 10)?);
/// assert!(matches!(keyed.decide(&7, 1), Decided::Now(Ok(d)) if d.is_allowed()));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub enum Decided {
    /// Decided without waiting.
    Now(Result<Decision, AcquireError>),
    /// A round trip away.
    Later(Pin<Box<dyn Future<Output = Result<Decision, AcquireError>> + Send>>),
}

impl std::fmt::Debug for Decided {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decided::Now(result) => f.debug_tuple("Now").field(result).finish(),
            Decided::Later(_) => f.write_str("Later(..)"),
        }
    }
}

/// A limiter the middleware can check per key: [`Keyed`] and [`PenalizedKeyed`] (with a
/// penalty box, a client that keeps hammering is blocked outright), decided in-process; and,
/// with their features, `MemcachedLimiter` and `RedisLimiter`, whose decisions the layer awaits
/// ([`decide`](Self::decide)), so a limit shared by several servers is one line.
///
/// ```
/// use floodgate::middleware::KeyedLimiter;
/// use floodgate::{FixedWindow, Keyed};
/// let keyed: Keyed<u64, _> = Keyed::new(FixedWindow::new(1, std::time::Duration::from_secs(1))?, 10)?;
/// assert!(KeyedLimiter::try_acquire(&keyed, &7, 1)?.is_allowed());
/// assert!(KeyedLimiter::check_permits(&keyed, 2).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait KeyedLimiter<K>: Send + Sync + 'static {
    /// Takes `n` permits from `key`'s limiter if available now (as [`Keyed::try_acquire`]).
    ///
    /// # Errors
    /// [`AcquireError`] when `n` is zero or above the capacity.
    fn try_acquire(&self, key: &K, n: u32) -> Result<Decision, AcquireError>;

    /// Whether a request for `n` permits can ever be granted.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    fn check_permits(&self, n: u32) -> Result<(), AcquireError>;

    /// The clock the limiter reads (shaped requests decided now measure their wait on it;
    /// those decided [`Later`](Decided::Later) on tokio's).
    fn clock(&self) -> &dyn Clock;

    /// The decision the layer acts on. By default [`try_acquire`](Self::try_acquire), now (no
    /// allocation). A limiter whose state is remote (memcached) returns [`Decided::Later`]
    /// instead: the layer awaits it without blocking the runtime (and, shaping, sleeps out a
    /// denial on tokio's timer, then asks again).
    fn decide(self: &Arc<Self>, key: &K, n: u32) -> Decided
    where
        Self: Sized,
    {
        Decided::Now(self.try_acquire(key, n))
    }
}

/// A per-key limit shared by every server that uses the same memcached, in the layer: each
/// request is decided by [`MemcachedLimiter::try_acquire`](crate::memcached::MemcachedLimiter::try_acquire)
/// on the server's runtime, keyed by the key's text (for [`ClientIp`](super::ClientIp), the address or
/// network). A memcached failure is decided by the limiter's failure policy.
///
/// ```no_run
/// use floodgate::backend::FailurePolicy;
/// use floodgate::SlidingWindow;
/// use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
/// use floodgate::middleware::RateLimitLayer;
/// use std::time::Duration;
/// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211"))?;
/// let window = SlidingWindow::new(100, Duration::from_secs(60), 60)?;
/// let per_ip = MemcachedLimiter::new(&backend, "per-ip", window, FailurePolicy::FailOpen)?;
/// let layer = RateLimitLayer::per_ip(per_ip); // every server on this memcached shares the limit
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "memcached")]
impl<K, C> KeyedLimiter<K> for crate::memcached::MemcachedLimiter<C>
where
    K: std::fmt::Display + Send + Sync + 'static,
    C: Clock + Clone,
{
    /// Blocks the calling thread (the layer calls [`decide`](KeyedLimiter::decide) instead).
    fn try_acquire(&self, key: &K, n: u32) -> Result<Decision, AcquireError> {
        self.blocking_try_acquire(&key.to_string(), n)
            .map_err(request_error)
    }

    fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        crate::decision::check_permits(n, u64::from(self.window().limit()))
    }

    fn clock(&self) -> &dyn Clock {
        crate::memcached::MemcachedLimiter::<C>::clock(self)
    }

    fn decide(self: &Arc<Self>, key: &K, n: u32) -> Decided {
        let limiter = Arc::clone(self);
        let key = key.to_string();
        Decided::Later(Box::pin(async move {
            limiter.try_acquire(&key, n).await.map_err(request_error)
        }))
    }
}

/// A per-key limit shared through Redis, in the layer: each request is decided by
/// [`RedisLimiter::try_acquire`](crate::redis::RedisLimiter::try_acquire), awaited on the
/// server's runtime (the backend must be connected on it), keyed by the key's text. A Redis failure is decided by the
/// limiter's failure policy.
///
/// ```no_run
/// use floodgate::backend::FailurePolicy;
/// use floodgate::middleware::RateLimitLayer;
/// use floodgate::FixedWindow;
/// use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
/// use std::time::Duration;
/// # #[tokio::main]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let backend = RedisBackend::connect(RedisConfig::single("redis://127.0.0.1:6379")).await?;
/// let window = FixedWindow::new(100, Duration::from_secs(60))?;
/// let per_ip = RedisLimiter::new(&backend, "per-ip", window, FailurePolicy::FailOpen)?;
/// let layer = RateLimitLayer::per_ip(per_ip); // every server on this Redis shares the limit
/// # Ok(()) }
/// ```
#[cfg(feature = "redis")]
impl<K, A> KeyedLimiter<K> for crate::redis::RedisLimiter<A>
where
    K: std::fmt::Display + Send + Sync + 'static,
    A: crate::redis::RedisAlgorithm,
{
    /// Blocks the calling thread (the layer calls [`decide`](KeyedLimiter::decide) instead).
    fn try_acquire(&self, key: &K, n: u32) -> Result<Decision, AcquireError> {
        self.blocking_try_acquire(&key.to_string(), n)
            .map_err(request_error)
    }

    fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        crate::decision::check_permits(n, crate::redis::RedisAlgorithm::limit(self.algorithm()))
    }

    /// Redis decides on its own clock; the layer measures shaped waits for decisions awaited
    /// from Redis on tokio's clock, not on this one.
    fn clock(&self) -> &dyn Clock {
        static CLOCK: std::sync::OnceLock<crate::clock::QuantaClock> = std::sync::OnceLock::new();
        CLOCK.get_or_init(crate::clock::QuantaClock::new)
    }

    fn decide(self: &Arc<Self>, key: &K, n: u32) -> Decided {
        let limiter = Arc::clone(self);
        let key = key.to_string();
        Decided::Later(Box::pin(async move {
            limiter.try_acquire(&key, n).await.map_err(request_error)
        }))
    }
}

/// A request a remote limiter refused to send: bad permits as they are, a key too long for
/// memcached as [`AcquireError::KeyTooLong`], a call outside a runtime as
/// [`AcquireError::Runtime`]: each a request the layer can never grant, which it answers with a
/// 500, logging the error.
#[cfg(any(feature = "memcached", feature = "redis"))]
fn request_error(error: crate::backend::RequestError) -> AcquireError {
    match error {
        crate::backend::RequestError::Permits(error) => error,
        crate::backend::RequestError::KeyTooLong { len, max } => AcquireError::KeyTooLong {
            len: len as u64,
            max: max as u64,
        },
        crate::backend::RequestError::Runtime(why) => AcquireError::Runtime(why),
    }
}

/// Implements [`KeyedLimiter`] for a keyed map type by its inherent methods.
macro_rules! keyed_limiter {
    ($ty:ident) => {
        impl<K, A, C> KeyedLimiter<K> for $ty<K, A, C>
        where
            K: Key,
            A: Algorithm,
            C: Clock,
        {
            #[inline]
            fn try_acquire(&self, key: &K, n: u32) -> Result<Decision, AcquireError> {
                $ty::try_acquire(self, key, n)
            }

            fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
                self.algorithm().check_permits(n)
            }

            fn clock(&self) -> &dyn Clock {
                $ty::<K, A, C>::clock(self)
            }
        }
    };
}

keyed_limiter!(Keyed);
keyed_limiter!(PenalizedKeyed);

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::request_error;
    use crate::backend::RequestError;
    use crate::middleware::service::NeverGranted;

    /// A remote limiter's call outside a tokio runtime (the layer polled on another executor) is
    /// a 500 whose one log line names that cause, not "more permits than the limit".
    #[test]
    fn a_call_outside_a_runtime_is_logged_as_itself() {
        let why = "RedisLimiter::try_acquire needs a tokio runtime";
        let line = NeverGranted(request_error(RequestError::Runtime(why))).to_string();
        assert!(line.contains(why) && !line.contains("set_limit"), "{line}");
    }
}
