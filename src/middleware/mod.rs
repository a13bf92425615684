//! HTTP middleware (feature `tower`): a tower [`Layer`](tower::Layer) that limits requests per
//! key with a [`Keyed`] limiter — per client IP by default — and answers a denied request with
//! `429 Too Many Requests`, `Retry-After`, an RFC 9457 problem body, and the `RateLimit-Policy`
//! / `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers-11 (also on allowed responses
//! unless turned off). It can instead delay (shape) a request whose wait is short, up to a bound.
//!
//! The service is generic over request and response bodies (`http` 1.x, `Bytes` data), so it
//! fits axum, hyper and tonic stacks; it is tested with axum over loopback and with plain
//! `tower::service_fn` services (not with tonic). The response body becomes a [`RateLimitBody`]
//! over the inner one.
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use floodgate::middleware::{Policy, RateLimitLayer};
//! use floodgate::{FixedWindow, Keyed};
//! use std::net::SocketAddr;
//! use std::time::Duration;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let minute = Duration::from_secs(60);
//! let per_ip = Keyed::new(FixedWindow::new(100, minute)?, 100_000)?;
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::per_ip(per_ip).policy(Policy::new("per-ip")?.window(minute)?));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // The peer address is the key: serve with ConnectInfo.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! A response then carries `RateLimit-Policy: "per-ip";q=100;w=60` and
//! `RateLimit: "per-ip";r=99;t=60`.
//!
//! | situation | response |
//! |---|---|
//! | allowed | the inner response, plus the fields (see [`RateLimitLayer::headers_on_allowed`]) |
//! | denied | `429`, `Retry-After`, the fields, a [`DenialBody`] (problem+json by default) |
//! | denied, shaping on, wait ≤ `max_delay`, fewer than `max_waiting` waiting | waits, then as allowed (or `429` if the wait grew past the bound) |
//! | skipped ([`RateLimitLayer::skip_method`], [`RateLimitLayer::skip_path`]) | the inner response, untouched, nothing consumed |
//! | no key (e.g. no peer address) | a bare `500` ([`MissingKey::Reject`], the default) or unlimited ([`MissingKey::Allow`]) |
//! | the request's cost can never be granted (limit lowered below it) | a bare `500` |
//!
//! The two `500`s are setup errors: the client gets `Internal Server Error` and nothing else;
//! the reason (with the fix) goes to the server's standard error, once per layer, the first time
//! it happens. A layer cannot check this at startup: whether the server records peer addresses
//! is decided where it is served.
//!
//! Header fields: [`HeaderStyle`] picks them (draft -11 by default, the draft -06 trio,
//! `X-RateLimit-*`, or none) and documents what `r` and `t` mean for each algorithm; the
//! [`Policy`] names the quota, and stacked layers (per second and per day) each add an item to
//! the same fields. `Retry-After` is whole seconds rounded **up** (a client that honours it is
//! never early; at least 1), and never earlier than the denial's `t`.
//!
//! Per-route limits: put a layer with its own limiter and [`Policy`] on each route (in axum,
//! `Router::route(path, get(handler).layer(layer))` or `route_layer`); a layer on the whole
//! router as well adds its item to the same fields.
//!
//! Client IPs: [`ClientIp`] keys by the peer address, IPv4 by address and IPv6 by /56; behind
//! reverse proxies, [`ClientIp::behind_proxies`] reads `X-Forwarded-For` or `Forwarded`,
//! counting a configured number of trusted hops from the right.
//!
//! Observability: with the feature `metrics`, each layer counts its requests by outcome and
//! times its decisions under its policy's name; with `tracing`, each 429 is a `DEBUG` event and
//! each setup `500` an `ERROR` one (see `floodgate::observe`, and `examples/prometheus.rs`).
//!
//! Requests in progress: [`InFlightLayer`] limits how many requests run at once, globally (an
//! [`InFlight`](crate::concurrency::InFlight), optionally queueing a bounded number of waiters
//! in FIFO order) or per key (a [`KeyedInFlight`](crate::concurrency::KeyedInFlight)). It
//! answers `503` (or `429`) with the same problem bodies and header styles, its policy in the
//! quota unit `concurrent-requests`, and keeps each request's permit until its response body
//! has ended. Stacked with a [`RateLimitLayer`], each adds its item to the same fields.

mod denial;
mod fields;
mod forwarded;
mod in_flight_layer;
mod in_flight_service;
mod key;
mod layer;
mod response;
mod service;

pub use denial::{Denial, DenialBody, QUOTA_EXCEEDED, TEMPORARY_REDUCED_CAPACITY};
pub use fields::{
    HeaderStyle, InvalidPolicyName, Policy, RATELIMIT, RATELIMIT_LIMIT, RATELIMIT_POLICY,
    RATELIMIT_REMAINING, RATELIMIT_RESET, write_headers,
};
pub use in_flight_layer::InFlightLayer;
pub use in_flight_service::InFlightLimit;
pub use key::{ClientIp, KeyExtractor, KeyFn, ProxyHeader};
pub use layer::RateLimitLayer;
pub use response::RateLimitBody;
pub use service::{RateLimit, ResponseFuture};

use crate::clock::Clock;
use crate::decision::{AcquireError, Decision};
use crate::keyed::{Keyed, PenalizedKeyed};
use crate::limiter::Algorithm;
use std::future::Future;
use std::hash::Hash;
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

    /// The clock the limiter reads (shaped requests measure their wait on it).
    fn clock(&self) -> &dyn Clock;

    /// The decision the layer acts on. By default [`try_acquire`](Self::try_acquire), now (no
    /// allocation). A limiter whose state is remote (memcached) returns [`Decided::Later`]
    /// instead: the layer awaits it without blocking the runtime. Shaping applies only to
    /// decisions made now.
    fn decide(self: &Arc<Self>, key: &K, n: u32) -> Decided
    where
        Self: Sized,
    {
        Decided::Now(self.try_acquire(key, n))
    }
}

/// A per-key limit shared by every server that uses the same memcached, in the layer: each
/// request is decided by [`MemcachedLimiter::try_acquire`](crate::memcached::MemcachedLimiter::try_acquire)
/// on the server's runtime, keyed by the key's text (for [`ClientIp`], the address or
/// network). A memcached failure is decided by the limiter's failure policy.
///
/// ```no_run
/// use floodgate::backend::FailurePolicy;
/// use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter, SlidingWindow};
/// use floodgate::middleware::RateLimitLayer;
/// use std::time::Duration;
/// let backend = MemcachedBackend::connect(MemcachedConfig::new("127.0.0.1:11211"))?;
/// let window = SlidingWindow::new(100, Duration::from_secs(60), Duration::from_secs(1))?;
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
            .map_err(|error| request_error(self, n, error))
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
            limiter
                .try_acquire(&key, n)
                .await
                .map_err(|error| request_error(&limiter, n, error))
        }))
    }
}

/// A per-key limit shared through Redis, in the layer: each request is decided by
/// [`RedisLimiter::try_acquire_async`](crate::redis::RedisLimiter::try_acquire_async), awaited
/// on the server's runtime, keyed by the key's text. A Redis failure is decided by the
/// limiter's failure policy.
///
/// ```no_run
/// use floodgate::backend::FailurePolicy;
/// use floodgate::middleware::RateLimitLayer;
/// use floodgate::redis::{FixedWindow, RedisBackend, RedisConfig, RedisLimiter};
/// use std::time::Duration;
/// let backend = RedisBackend::connect(RedisConfig::single("redis://127.0.0.1:6379"))?;
/// let window = FixedWindow::new(100, Duration::from_secs(60))?;
/// let per_ip = RedisLimiter::new(&backend, "per-ip", window, FailurePolicy::FailOpen)?;
/// let layer = RateLimitLayer::per_ip(per_ip); // every server on this Redis shares the limit
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(feature = "redis")]
impl<K, A> KeyedLimiter<K> for crate::redis::RedisLimiter<A>
where
    K: std::fmt::Display + Send + Sync + 'static,
    A: crate::redis::RedisAlgorithm,
{
    /// Blocks the calling thread (the layer calls [`decide`](KeyedLimiter::decide) instead).
    fn try_acquire(&self, key: &K, n: u32) -> Result<Decision, AcquireError> {
        crate::redis::RedisLimiter::try_acquire(self, &key.to_string(), n)
    }

    fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        crate::decision::check_permits(n, crate::redis::RedisAlgorithm::limit(self.algorithm()))
    }

    /// Redis decides on its own clock; this one only measures shaped waits, which the layer
    /// does not do for decisions awaited from Redis.
    fn clock(&self) -> &dyn Clock {
        static CLOCK: std::sync::OnceLock<crate::clock::QuantaClock> = std::sync::OnceLock::new();
        CLOCK.get_or_init(crate::clock::QuantaClock::new)
    }

    fn decide(self: &Arc<Self>, key: &K, n: u32) -> Decided {
        let limiter = Arc::clone(self);
        let key = key.to_string();
        Decided::Later(Box::pin(
            async move { limiter.try_acquire_async(&key, n).await },
        ))
    }
}

/// A request memcached refused to take: bad permits, or a key too long for it (which the layer,
/// like any request it can never grant, answers with a 500).
#[cfg(feature = "memcached")]
fn request_error<C: Clock + Clone>(
    limiter: &crate::memcached::MemcachedLimiter<C>,
    n: u32,
    error: crate::backend::RequestError,
) -> AcquireError {
    match error {
        crate::backend::RequestError::Permits(error) => error,
        _ => AcquireError::ExceedsCapacity {
            requested: u64::from(n),
            capacity: u64::from(limiter.window().limit()),
        },
    }
}

impl<K, A, C> KeyedLimiter<K> for Keyed<K, A, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
    C: Clock,
{
    #[inline]
    fn try_acquire(&self, key: &K, n: u32) -> Result<Decision, AcquireError> {
        Keyed::try_acquire(self, key, n)
    }

    fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        self.algorithm().check_permits(n)
    }

    fn clock(&self) -> &dyn Clock {
        Keyed::<K, A, C>::clock(self)
    }
}

impl<K, A, C> KeyedLimiter<K> for PenalizedKeyed<K, A, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
    C: Clock,
{
    #[inline]
    fn try_acquire(&self, key: &K, n: u32) -> Result<Decision, AcquireError> {
        PenalizedKeyed::try_acquire(self, key, n)
    }

    fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        self.algorithm().check_permits(n)
    }

    fn clock(&self) -> &dyn Clock {
        PenalizedKeyed::<K, A, C>::clock(self)
    }
}

/// What to do with a request the [`KeyExtractor`] finds no key for.
///
/// ```
/// assert_eq!(floodgate::middleware::MissingKey::default(), floodgate::middleware::MissingKey::Reject);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissingKey {
    /// Answer a bare `500 Internal Server Error`: a missing key is a setup error (for client IPs:
    /// the server does not record peer addresses), and failing loudly beats not limiting at
    /// all. The reason is written to standard error once per layer, never to the client.
    #[default]
    Reject,
    /// Pass the request through unlimited (and without rate-limit header fields).
    Allow,
}
