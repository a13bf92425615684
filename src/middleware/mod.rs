//! HTTP middleware (feature `tower`): a tower [`Layer`] that limits requests per key with a
//! [`Keyed`] limiter — per client IP by default — and answers a denied request with
//! `429 Too Many Requests`, `Retry-After`, and the IETF `RateLimit-Limit` / `RateLimit-Remaining`
//! / `RateLimit-Reset` headers (also on allowed responses unless turned off). It can instead
//! delay (shape) a request whose wait is short, up to a bound.
//!
//! The service is generic over request and response bodies (`http` 1.x, `Bytes` data), so it
//! fits axum, hyper and tonic stacks; it is tested with axum over loopback and with plain
//! `tower::service_fn` services (not with tonic). The response body becomes a [`RateLimitBody`]
//! over the inner one.
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use floodgate::middleware::RateLimitLayer;
//! use floodgate::{Keyed, Rate, TokenBucket};
//! use std::net::SocketAddr;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let per_ip = Keyed::new(TokenBucket::new(20, Rate::per_second(5))?, 100_000)?;
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::per_ip(per_ip));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! | situation | response |
//! |---|---|
//! | allowed | the inner response, plus `RateLimit-*` headers (see [`RateLimitLayer::headers_on_allowed`]) |
//! | denied | `429`, `Retry-After`, `RateLimit-*`, a text body |
//! | denied, shaping on, wait ≤ `max_delay`, fewer than `max_waiting` waiting | waits, then as allowed (or `429` if the wait grew past the bound) |
//! | no key (e.g. no peer address) | `500` ([`MissingKey::Reject`], the default) or unlimited ([`MissingKey::Allow`]) |
//! | the request's cost can never be granted (limit lowered below it) | `500` |
//!
//! Header values: `RateLimit-Limit` is the limiter's limit, `RateLimit-Remaining` the permits left
//! after this request, `RateLimit-Reset` and `Retry-After` whole seconds rounded **up** (a client
//! that honours them is never early; `Retry-After` is at least 1).

mod key;
mod response;
mod service;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

pub use key::{ClientIp, KeyExtractor, KeyFn};
pub use response::{
    RATELIMIT_LIMIT, RATELIMIT_REMAINING, RATELIMIT_RESET, RateLimitBody, write_headers,
};
pub use service::{RateLimit, ResponseFuture};
use tower::Layer;

use crate::clock::Clock;
use crate::decision::{AcquireError, ConfigError, Decision};
use crate::keyed::{IpKey, Keyed, PenalizedKeyed};
use crate::limiter::Algorithm;
use std::hash::Hash;

/// A limiter the middleware can check per key: [`Keyed`] and [`PenalizedKeyed`] (with a
/// penalty box, a client that keeps hammering is blocked outright).
///
/// ```
/// use floodgate::middleware::KeyedLimiter;
/// use floodgate::{FixedWindow, Keyed};
/// let keyed: Keyed<u64, _> = Keyed::new(FixedWindow::new(1, std::time::Duration::from_secs(1))?, 10)?;
/// assert!(KeyedLimiter::check(&keyed, &7, 1)?.is_allowed());
/// assert!(KeyedLimiter::check_permits(&keyed, 2).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait KeyedLimiter<K>: Send + Sync + 'static {
    /// Takes `n` permits from `key`'s limiter if available now (as [`Keyed::check`]).
    ///
    /// # Errors
    /// [`AcquireError`] when `n` is zero or above the capacity.
    fn check(&self, key: &K, n: u32) -> Result<Decision, AcquireError>;

    /// Whether a request for `n` permits can ever be granted.
    ///
    /// # Errors
    /// As [`check`](Self::check).
    fn check_permits(&self, n: u32) -> Result<(), AcquireError>;

    /// The clock the limiter reads (shaped requests measure their wait on it).
    fn clock(&self) -> &dyn Clock;
}

impl<K, A, C> KeyedLimiter<K> for Keyed<K, A, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
    C: Clock,
{
    #[inline]
    fn check(&self, key: &K, n: u32) -> Result<Decision, AcquireError> {
        Keyed::check(self, key, n)
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
    fn check(&self, key: &K, n: u32) -> Result<Decision, AcquireError> {
        PenalizedKeyed::check(self, key, n)
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
    /// Answer `500 Internal Server Error`: a missing key is a setup error (for client IPs: the
    /// server does not record peer addresses), and failing loudly beats not limiting at all.
    #[default]
    Reject,
    /// Pass the request through unlimited (and without `RateLimit-*` headers).
    Allow,
}

/// Shaping: delay a denied request instead of rejecting it, when its wait is short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shaping {
    pub(crate) max_delay: Duration,
    pub(crate) max_waiting: usize,
}

/// The layer's settings, copied into each service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) permits: u32,
    pub(crate) headers_on_allowed: bool,
    pub(crate) shaping: Option<Shaping>,
    pub(crate) missing_key: MissingKey,
}

/// A tower [`Layer`] that rate-limits per key. See the [module docs](self).
///
/// ```
/// use floodgate::middleware::{KeyFn, MissingKey, RateLimitLayer};
/// use floodgate::{Gcra, Keyed, Rate};
/// use std::time::Duration;
/// // Per API key, 2 permits a request, delay up to 500 ms (at most 100 requests waiting) rather
/// // than reject, no headers on allowed responses, requests without a key pass.
/// let per_api_key: Keyed<Vec<u8>, _> = Keyed::new(Gcra::new(Rate::per_second(10), 10)?, 10_000)?;
/// let layer = RateLimitLayer::with_key(
///     per_api_key,
///     KeyFn(|req: &http::Request<()>| req.headers().get("x-api-key").map(|v| v.as_bytes().to_vec())),
/// )
/// .permits_per_request(2)?
/// .shape(Duration::from_millis(500), 100)
/// .headers_on_allowed(false)
/// .on_missing_key(MissingKey::Allow);
/// assert!(layer.clone().permits_per_request(11).is_err()); // above the burst: never granted
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
#[must_use]
pub struct RateLimitLayer<L, X = ClientIp> {
    limiter: Arc<L>,
    extractor: X,
    settings: Settings,
    waiting: Arc<AtomicUsize>,
}

impl<L, X: Clone> Clone for RateLimitLayer<L, X> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            limiter: Arc::clone(&self.limiter),
            extractor: self.extractor.clone(),
            settings: self.settings,
            waiting: Arc::clone(&self.waiting),
        }
    }
}

impl<L: KeyedLimiter<IpKey>> RateLimitLayer<L, ClientIp> {
    /// Limits per client IP ([`ClientIp`] with the default [`IpKeyer`](crate::IpKeyer): IPv4 by
    /// address, IPv6 by /64). [`limiter`](Self::limiter) hands back a shared handle to it (for
    /// `stats()`, `set_limit`).
    ///
    /// ```
    /// use floodgate::middleware::RateLimitLayer;
    /// use floodgate::{FixedWindow, Keyed, ManualClock};
    /// use std::time::Duration;
    /// # use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
    /// # });
    /// # let from = |peer: &str| {
    /// #     let mut request = http::Request::new(());
    /// #     request.extensions_mut().insert(peer.parse::<std::net::SocketAddr>().unwrap());
    /// #     request
    /// # };
    /// let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(60))?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let service = RateLimitLayer::per_ip(per_ip).layer(ok);
    /// assert_eq!(service.clone().oneshot(from("192.0.2.1:1000")).await?.status(), 200);
    /// assert_eq!(service.clone().oneshot(from("192.0.2.1:2000")).await?.status(), 429); // same IP
    /// assert_eq!(service.oneshot(from("192.0.2.2:1000")).await?.status(), 200); // another IP
    /// # Ok(()) }
    /// ```
    pub fn per_ip(limiter: L) -> Self {
        Self::with_key(limiter, ClientIp::default())
    }
}

impl<L, X> RateLimitLayer<L, X> {
    /// Limits per the key `extractor` picks ([`ClientIp`] with another keyer, a [`KeyFn`]
    /// closure, or your own [`KeyExtractor`]).
    ///
    /// ```
    /// use floodgate::middleware::{KeyFn, RateLimitLayer};
    /// use floodgate::{FixedWindow, Keyed, ManualClock};
    /// use std::time::Duration;
    /// # use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
    /// # });
    /// # let as_user = |user: &str| http::Request::builder().header("x-user", user).body(()).unwrap();
    /// let per_user: Keyed<String, _, _> = Keyed::builder(FixedWindow::new(1, Duration::from_secs(60))?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let user = KeyFn(|r: &http::Request<()>| Some(r.headers().get("x-user")?.to_str().ok()?.to_owned()));
    /// let service = RateLimitLayer::with_key(per_user, user).layer(ok);
    /// assert_eq!(service.clone().oneshot(as_user("ann")).await?.status(), 200);
    /// assert_eq!(service.clone().oneshot(as_user("ann")).await?.status(), 429);
    /// assert_eq!(service.oneshot(as_user("bob")).await?.status(), 200);
    /// # Ok(()) }
    /// ```
    pub fn with_key(limiter: L, extractor: X) -> Self {
        RateLimitLayer {
            limiter: Arc::new(limiter),
            extractor,
            settings: Settings {
                permits: 1,
                headers_on_allowed: true,
                shaping: None,
                missing_key: MissingKey::Reject,
            },
            waiting: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Permits each request takes (default 1).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] when the limiter could never grant `n` (zero, or above its
    /// capacity).
    ///
    /// ```
    /// use floodgate::middleware::RateLimitLayer;
    /// use floodgate::{Keyed, Rate, TokenBucket};
    /// let per_ip = Keyed::new(TokenBucket::new(10, Rate::per_second(5))?, 1_000)?;
    /// let layer = RateLimitLayer::per_ip(per_ip);
    /// assert!(layer.clone().permits_per_request(0).is_err());
    /// assert!(layer.clone().permits_per_request(11).is_err()); // above the bucket: never granted
    /// assert!(layer.permits_per_request(10).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn permits_per_request<K>(mut self, n: u32) -> Result<Self, ConfigError>
    where
        L: KeyedLimiter<K>,
    {
        match self.limiter.check_permits(n) {
            Ok(()) => {
                self.settings.permits = n;
                Ok(self)
            }
            Err(AcquireError::ZeroPermits) => Err(ConfigError::Invalid {
                what: "permits per request",
                why: "must be at least 1",
            }),
            Err(_) => Err(ConfigError::Invalid {
                what: "permits per request",
                why: "above the limiter's capacity: no request could ever be granted",
            }),
        }
    }

    /// Whether allowed responses also get the `RateLimit-*` headers (default `true`; denials
    /// always get them).
    ///
    /// ```
    /// use floodgate::middleware::RateLimitLayer;
    /// use floodgate::{FixedWindow, Keyed, ManualClock};
    /// use std::time::Duration;
    /// # use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
    /// # });
    /// # let from = |peer: &str| {
    /// #     let mut request = http::Request::new(());
    /// #     request.extensions_mut().insert(peer.parse::<std::net::SocketAddr>().unwrap());
    /// #     request
    /// # };
    /// let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(60))?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let service = RateLimitLayer::per_ip(per_ip).headers_on_allowed(false).layer(ok);
    /// let allowed = service.clone().oneshot(from("192.0.2.1:1000")).await?;
    /// assert!(allowed.headers().get("ratelimit-limit").is_none());
    /// let denied = service.oneshot(from("192.0.2.1:1000")).await?;
    /// assert_eq!(denied.headers()["ratelimit-limit"], "1"); // denials always have them
    /// # Ok(()) }
    /// ```
    pub fn headers_on_allowed(mut self, on: bool) -> Self {
        self.settings.headers_on_allowed = on;
        self
    }

    /// Shaping: a denied request whose announced wait is at most `max_delay` waits (on tokio's
    /// timer, holding no thread) and is then served, instead of being rejected; at most
    /// `max_waiting` requests wait at once (more are rejected), so waiting requests cannot pile
    /// up without bound. A waiting request that is cancelled (client gone) consumes nothing. Waits
    /// are not queued: after a wait, waiters race for the permits, and one that loses waits again
    /// while the total stays within `max_delay`, then gets its 429. With a [`PenalizedKeyed`]
    /// limiter each lost race counts as a strike.
    ///
    /// ```
    /// use floodgate::middleware::RateLimitLayer;
    /// use floodgate::{FixedWindow, Keyed, TokioClock};
    /// use std::time::Duration;
    /// # use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
    /// # });
    /// # let from = |peer: &str| {
    /// #     let mut request = http::Request::new(());
    /// #     request.extensions_mut().insert(peer.parse::<std::net::SocketAddr>().unwrap());
    /// #     request
    /// # };
    /// let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1))?)
    ///     .clock(TokioClock::starting_at(0)) // tokio's (paused) time, which the waits run on
    ///     .build()?;
    /// let service = RateLimitLayer::per_ip(per_ip).shape(Duration::from_secs(2), 100).layer(ok);
    /// let start = tokio::time::Instant::now();
    /// assert_eq!(service.clone().oneshot(from("192.0.2.1:1000")).await?.status(), 200);
    /// assert_eq!(service.oneshot(from("192.0.2.1:1000")).await?.status(), 200); // waited, no 429
    /// assert_eq!(start.elapsed(), Duration::from_secs(1)); // until the window reset
    /// # Ok(()) }
    /// ```
    pub fn shape(mut self, max_delay: Duration, max_waiting: usize) -> Self {
        self.settings.shaping = Some(Shaping {
            max_delay,
            max_waiting,
        });
        self
    }

    /// What to do with requests that have no key (default [`MissingKey::Reject`]).
    ///
    /// ```
    /// use floodgate::middleware::{MissingKey, RateLimitLayer};
    /// use floodgate::{FixedWindow, Keyed};
    /// use std::time::Duration;
    /// # use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
    /// # });
    /// let reject = RateLimitLayer::per_ip(Keyed::new(FixedWindow::new(5, Duration::from_secs(1))?, 100)?);
    /// let allow = reject.clone().on_missing_key(MissingKey::Allow);
    /// let no_peer = || http::Request::new(()); // no peer address recorded: no key
    /// assert_eq!(reject.layer(ok.clone()).oneshot(no_peer()).await?.status(), 500);
    /// assert_eq!(allow.layer(ok).oneshot(no_peer()).await?.status(), 200);
    /// # Ok(()) }
    /// ```
    pub fn on_missing_key(mut self, missing_key: MissingKey) -> Self {
        self.settings.missing_key = missing_key;
        self
    }

    /// The keyed limiter, shared by every service this layer makes (clone the `Arc` to keep a
    /// handle).
    ///
    /// ```
    /// use floodgate::middleware::RateLimitLayer;
    /// use floodgate::{Algorithm, FixedWindow, Keyed};
    /// use std::{sync::Arc, time::Duration};
    /// let layer = RateLimitLayer::per_ip(Keyed::new(FixedWindow::new(5, Duration::from_secs(1))?, 100)?);
    /// let handle = Arc::clone(layer.limiter()); // the limiter every service of the layer uses
    /// handle.set_limit(10)?;
    /// assert_eq!(layer.limiter().algorithm().limit(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limiter(&self) -> &Arc<L> {
        &self.limiter
    }
}

impl<S, L, X: Clone> Layer<S> for RateLimitLayer<L, X> {
    type Service = RateLimit<S, L, X>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            limiter: Arc::clone(&self.limiter),
            extractor: self.extractor.clone(),
            settings: self.settings,
            waiting: Arc::clone(&self.waiting),
        }
    }
}
