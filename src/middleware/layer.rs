//! [`RateLimitLayer`], the tower layer, and the settings it hands its services.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::Duration;

use http::{Method, StatusCode};
use tower::Layer;

use super::fields::Quota;
use super::{ClientIp, DenialBody, HeaderStyle, KeyedLimiter, MissingKey, Policy, RateLimit};
use crate::decision::{AcquireError, ConfigError};
use crate::keyed::IpKey;
use crate::observe::LayerObserver;

/// Shaping: delay a denied request instead of rejecting it, when its wait is short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Shaping {
    pub(crate) max_delay: Duration,
    pub(crate) max_waiting: usize,
}

type PathPredicate = dyn Fn(&str) -> bool + Send + Sync;

/// The layer's settings, shared (behind an `Arc`) by every service it makes.
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) permits: u32,
    pub(crate) headers_on_allowed: bool,
    pub(crate) shaping: Option<Shaping>,
    pub(crate) missing_key: MissingKey,
    pub(crate) style: HeaderStyle,
    pub(crate) policy: Policy,
    pub(crate) denial_body: DenialBody,
    pub(crate) skip_methods: Vec<Method>,
    pub(crate) skip_paths: Vec<Arc<PathPredicate>>,
    /// Metrics and tracing under the policy's name (features `metrics`, `tracing`).
    pub(crate) observer: LayerObserver,
    /// What the quota counts (requests per window, or requests in progress).
    pub(crate) quota: Quota,
    /// The status of a denial (`429`; an in-flight layer may answer `503`).
    pub(crate) denial_status: StatusCode,
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("permits", &self.permits)
            .field("headers_on_allowed", &self.headers_on_allowed)
            .field("shaping", &self.shaping)
            .field("missing_key", &self.missing_key)
            .field("style", &self.style)
            .field("policy", &self.policy)
            .field("denial_body", &self.denial_body)
            .field("skip_methods", &self.skip_methods)
            .field("skip_paths", &self.skip_paths.len())
            .field("quota", &self.quota)
            .field("denial_status", &self.denial_status)
            .finish()
    }
}

impl Settings {
    /// The defaults for a layer counting `quota`, denying with `denial_status`: one permit a
    /// request, fields on allowed responses (draft -11, policy `"default"`), problem+json
    /// denials, a missing key rejected, nothing skipped, no shaping.
    pub(crate) fn new(quota: Quota, denial_status: StatusCode) -> Self {
        Settings {
            permits: 1,
            headers_on_allowed: true,
            shaping: None,
            missing_key: MissingKey::Reject,
            style: HeaderStyle::Draft11,
            policy: Policy::default(),
            denial_body: DenialBody::ProblemJson,
            skip_methods: Vec::new(),
            skip_paths: Vec::new(),
            observer: LayerObserver::new(Policy::default().name()),
            quota,
            denial_status,
        }
    }

    /// Names the layer's policy; its metrics and setup-error events follow the name.
    pub(crate) fn set_policy(&mut self, policy: Policy) {
        self.observer = LayerObserver::new(policy.name());
        self.policy = policy;
    }

    /// Whether the request passes unlimited and unstamped (a skip filter matches it).
    #[inline]
    pub(crate) fn skips<B>(&self, request: &http::Request<B>) -> bool {
        self.skip_methods.contains(request.method())
            || self
                .skip_paths
                .iter()
                .any(|skip| skip(request.uri().path()))
    }
}

/// What the services of one layer share at run time.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// Shaped requests waiting now.
    pub(crate) waiting: AtomicUsize,
    /// Whether the "no key" setup error has been logged (once per layer).
    pub(crate) logged_missing_key: AtomicBool,
    /// Whether the "cost above the limit" setup error has been logged (once per layer).
    pub(crate) logged_never_granted: AtomicBool,
}

/// A tower [`Layer`] that rate-limits per key. See the [module docs](crate::middleware).
///
/// ```
/// use floodgate::keyed::HashedKey;
/// use floodgate::middleware::{KeyFn, LayerSettings, MissingKey, RateLimitLayer};
/// use floodgate::{Gcra, Keyed, Rate};
/// use std::time::Duration;
/// // Per API key (hashed: the client picks its length), 2 permits a request, delay up to 500 ms
/// // (at most 100 requests waiting) rather than reject, no headers on allowed responses,
/// // requests without a key pass.
/// let per_api_key: Keyed<HashedKey, _> = Keyed::new(Gcra::new(Rate::per_second(10), 10)?, 10_000)?;
/// let layer = RateLimitLayer::with_key(
///     per_api_key,
///     KeyFn(|req: &http::Request<()>| req.headers().get("x-api-key").map(|v| HashedKey::new(v.as_bytes()))),
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
    pub(super) settings: Arc<Settings>,
    shared: Arc<Shared>,
}

impl<L, X: Clone> Clone for RateLimitLayer<L, X> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            limiter: Arc::clone(&self.limiter),
            extractor: self.extractor.clone(),
            settings: Arc::clone(&self.settings),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<L: KeyedLimiter<IpKey>> RateLimitLayer<L, ClientIp> {
    /// Limits per client IP ([`ClientIp`] with the default [`IpKeyer`](crate::IpKeyer): IPv4 by
    /// address, IPv6 by /56). [`limiter`](Self::limiter) hands back a shared handle to it (for
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
    /// Limits per the key `extractor` picks ([`ClientIp`] with another keyer, a [`KeyFn`](super::KeyFn)
    /// closure, or your own [`KeyExtractor`](super::KeyExtractor)).
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
            settings: Arc::new(Settings::new(
                Quota::Requests,
                StatusCode::TOO_MANY_REQUESTS,
            )),
            shared: Arc::new(Shared::default()),
        }
    }

    /// Permits each request takes (default 1). The header fields then count whole requests:
    /// with 2 permits a request and a limit of 10, `q=5`, and `r` is the requests left (permits
    /// left / 2, rounded down).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] when the limiter could never grant `n` (zero, or above its
    /// capacity).
    ///
    /// ```
    /// use floodgate::middleware::RateLimitLayer;
    /// use floodgate::{Keyed, Rate, TokenBucket};
    /// let per_ip = Keyed::new(TokenBucket::new(Rate::per_second(5), 10)?, 1_000)?;
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
                Arc::make_mut(&mut self.settings).permits = n;
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

    /// Shaping: a denied request whose announced wait is at most `max_delay` waits (on tokio's
    /// timer, holding no thread) and is then served, instead of being rejected; at most
    /// `max_waiting` requests wait at once (more are rejected), so waiting requests cannot pile
    /// up without bound. A waiting request that is cancelled (client gone) consumes nothing. Waits
    /// are not queued: after a wait, waiters race for the permits, and one that loses waits again
    /// while the total stays within `max_delay`, then gets its 429. With a [`PenalizedKeyed`](crate::PenalizedKeyed)
    /// limiter each lost race counts as a strike. With a Redis or memcached limiter each attempt
    /// is a round trip, and the wait is measured on tokio's clock. A `max_delay` of zero or a
    /// `max_waiting` of 0 turns shaping off in effect: a denied request gets its 429 at once.
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
        Arc::make_mut(&mut self.settings).shaping = Some(Shaping {
            max_delay,
            max_waiting,
        });
        self
    }

    /// The policy the draft -11 fields and the problem body name (default `"default"`, without
    /// `w`). Give each layer its own name when several limit one route.
    ///
    /// ```
    /// use floodgate::middleware::{Policy, RateLimitLayer};
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
    /// let minute = Duration::from_secs(60);
    /// let per_ip = Keyed::builder(FixedWindow::new(5, minute)?).clock(ManualClock::new()).build()?;
    /// let layer = RateLimitLayer::per_ip(per_ip).policy(Policy::new("per-ip")?.window(minute)?);
    /// let response = layer.layer(ok).oneshot(from("192.0.2.1:1000")).await?;
    /// assert_eq!(response.headers()["ratelimit-policy"], r#""per-ip";q=5;w=60"#);
    /// assert_eq!(response.headers()["ratelimit"], r#""per-ip";r=4;t=60"#);
    /// # Ok(()) }
    /// ```
    pub fn policy(mut self, policy: Policy) -> Self {
        Arc::make_mut(&mut self.settings).set_policy(policy);
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
        Arc::make_mut(&mut self.settings).missing_key = missing_key;
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
            settings: Arc::clone(&self.settings),
            shared: Arc::clone(&self.shared),
        }
    }
}
