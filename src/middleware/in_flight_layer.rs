//! [`InFlightLayer`], the tower layer limiting requests in progress, and its settings.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use tower::Layer;

use super::fields::{Quota, whole_seconds};
use super::layer::{Settings, Shared};
use super::{ClientIp, InFlightLimit, MissingKey, Policy};
use crate::clock::Clock;
use crate::concurrency::{InFlight, KeyedInFlight};
use crate::decision::ConfigError;
use crate::keyed::{IpKey, Key};

/// A tower [`Layer`] that limits how many requests are **in progress** at once: globally (one
/// [`InFlight`]: "at most 100 requests in the handlers") or per key (a [`KeyedInFlight`]: "at
/// most 5 in progress per client IP / API key").
///
/// | situation | response |
/// |---|---|
/// | a permit is free | the inner response, plus the fields (see [`headers_on_allowed`](super::LayerSettings::headers_on_allowed)) |
/// | none free | `503` ([`TEMPORARY_REDUCED_CAPACITY`](super::TEMPORARY_REDUCED_CAPACITY) problem; or `429`, see [`status`](Self::status)), `Retry-After`, the fields |
/// | none free, global layer with [`queue`](Self::queue), fewer than its bound waiting | waits in FIFO order for a permit, then as allowed |
/// | skipped ([`skip_method`](super::LayerSettings::skip_method), [`skip_path`](super::LayerSettings::skip_path)) | the inner response, untouched, no permit taken |
/// | per key, no key | a bare `500` or unlimited, as [`on_missing_key`](Self::on_missing_key) says |
///
/// **How long a request holds its permit**: from admission until its **response body has
/// ended** (yielded its last frame or an error) or has been dropped, whichever comes first; if
/// the inner service fails (or the request is cancelled) the permit is given back then. So a
/// streamed response counts as in progress until it is sent, unlike tower's `ConcurrencyLimit`,
/// which gives its permit back when the response future completes. Each request holds one
/// permit.
///
/// **Header fields** (draft-ietf-httpapi-ratelimit-headers-11): the quota unit is
/// `concurrent-requests`, `q` is the limit in force (per key for a keyed layer) and `r` the
/// permits left after this request; there is no `w` and no `t`, since a permit frees when a
/// request ends, not at a time: `RateLimit-Policy: "default";q=100;qu="concurrent-requests"`,
/// `RateLimit: "default";r=42`. The draft -06 and `X-RateLimit-*` styles write the limit and
/// remaining fields and no reset. A denial carries `Retry-After` (1 s unless
/// [`retry_after`](Self::retry_after) says otherwise).
///
/// ```
/// use floodgate::concurrency::InFlight;
/// use floodgate::middleware::InFlightLayer;
/// use tower::{Layer, ServiceExt};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let ok = tower::service_fn(|_: http::Request<()>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
/// # });
/// let service = InFlightLayer::global(InFlight::new(1)?).layer(ok);
/// let first = service.clone().oneshot(http::Request::new(())).await?;
/// assert_eq!(first.headers()["ratelimit-policy"], r#""default";q=1;qu="concurrent-requests""#);
/// assert_eq!(first.headers()["ratelimit"], r#""default";r=0"#);
/// // `first`'s body has not been sent yet: the request is still in progress.
/// let second = service.clone().oneshot(http::Request::new(())).await?;
/// assert_eq!(second.status(), 503);
/// assert_eq!(second.headers()["retry-after"], "1");
/// drop(first); // its body is gone: the permit is back
/// assert_eq!(service.oneshot(http::Request::new(())).await?.status(), 200);
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use]
pub struct InFlightLayer<L, X = ()> {
    limiter: Arc<L>,
    extractor: X,
    pub(super) settings: Arc<Settings>,
    shared: Arc<Shared>,
    /// The most requests waiting for a permit (global layers only); `None`: reject at once.
    queue: Option<usize>,
    /// Whether requests are limited per key (a partition key can be derived).
    keyed: bool,
}

impl<L, X: Clone> Clone for InFlightLayer<L, X> {
    fn clone(&self) -> Self {
        InFlightLayer {
            limiter: Arc::clone(&self.limiter),
            extractor: self.extractor.clone(),
            settings: Arc::clone(&self.settings),
            shared: Arc::clone(&self.shared),
            queue: self.queue,
            keyed: self.keyed,
        }
    }
}

impl InFlightLayer<InFlight, ()> {
    /// At most `limit.limit()` requests in progress at once, over every request the layer
    /// sees. [`limiter`](Self::limiter) hands back a shared handle (for `set_limit`, or to share
    /// the limit with other code).
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use floodgate::middleware::InFlightLayer;
    /// let layer = InFlightLayer::global(InFlight::new(100)?);
    /// layer.limiter().set_limit(50)?; // live
    /// assert_eq!(layer.limiter().limit(), 50);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn global(limit: InFlight) -> Self {
        Self::build(limit, (), false)
    }

    /// Requests that find no permit free wait for one instead of being rejected, in FIFO order
    /// (the [`InFlight`] queue: freed permits are handed to the longest waiting first), at most
    /// `max_waiting` of them at once; more are rejected. A waiting request that is cancelled
    /// (client gone) gives up its place and takes nothing. A waiting request has no deadline
    /// of its own: put a timeout layer outside this one to bound the wait. `queue(0)` is the
    /// layer without a queue: no request waits, as if `queue` were not called.
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use floodgate::middleware::InFlightLayer;
    /// use std::future::Future;
    /// use std::task::{Context, Poll, Waker};
    /// use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
    /// # });
    /// let service = InFlightLayer::global(InFlight::new(1)?).queue(1).layer(ok);
    /// let first = service.clone().oneshot(http::Request::new(())).await?; // holds the permit
    /// let mut queued = Box::pin(service.clone().oneshot(http::Request::new(())));
    /// let mut cx = Context::from_waker(Waker::noop());
    /// assert!(queued.as_mut().poll(&mut cx).is_pending()); // waits: one place in the queue
    /// let rejected = service.clone().oneshot(http::Request::new(())).await?;
    /// assert_eq!(rejected.status(), 503); // the queue is full
    /// drop(first); // the permit goes to the waiting request
    /// let Poll::Ready(served) = queued.as_mut().poll(&mut cx) else { panic!("still waiting") };
    /// assert_eq!(served?.status(), 200);
    /// # Ok(()) }
    /// ```
    pub fn queue(mut self, max_waiting: usize) -> Self {
        self.queue = Some(max_waiting);
        self
    }
}

impl<C: Clock> InFlightLayer<KeyedInFlight<IpKey, C>, ClientIp> {
    /// At most `limit.limit()` requests in progress per client IP ([`ClientIp`] with the default
    /// keyer: IPv4 by address, IPv6 by /56).
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// use floodgate::middleware::InFlightLayer;
    /// use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
    /// # });
    /// # let from = |peer: &str| {
    /// #     let mut request = http::Request::new(());
    /// #     request.extensions_mut().insert(peer.parse::<std::net::SocketAddr>().unwrap());
    /// #     request
    /// # };
    /// let service = InFlightLayer::per_ip(KeyedInFlight::new(1, 100_000)?).layer(ok);
    /// let held = service.clone().oneshot(from("192.0.2.1:1000")).await?; // body not sent yet
    /// assert_eq!(service.clone().oneshot(from("192.0.2.1:2000")).await?.status(), 503); // same IP
    /// assert_eq!(service.clone().oneshot(from("192.0.2.2:1000")).await?.status(), 200); // another
    /// drop(held);
    /// assert_eq!(service.oneshot(from("192.0.2.1:1000")).await?.status(), 200);
    /// # Ok(()) }
    /// ```
    pub fn per_ip(limit: KeyedInFlight<IpKey, C>) -> Self {
        Self::with_key(limit, ClientIp::default())
    }
}

impl<K: Key, C, X> InFlightLayer<KeyedInFlight<K, C>, X> {
    /// At most `limit.limit()` requests in progress per key, the key `extractor` picks
    /// ([`ClientIp`] with another keyer, a [`KeyFn`](super::KeyFn) closure, or your own
    /// [`KeyExtractor`](super::KeyExtractor)).
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// use floodgate::keyed::HashedKey;
    /// use floodgate::middleware::{InFlightLayer, KeyFn};
    /// use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
    /// # });
    /// let api_key = KeyFn(|r: &http::Request<()>| Some(HashedKey::new(r.headers().get("x-api-key")?.as_bytes())));
    /// let service = InFlightLayer::with_key(KeyedInFlight::new(20, 10_000)?, api_key).layer(ok);
    /// let request = http::Request::builder().header("x-api-key", "k1").body(())?;
    /// let response = service.oneshot(request).await?;
    /// assert_eq!(response.headers()["ratelimit"], r#""default";r=19"#);
    /// # Ok(()) }
    /// ```
    pub fn with_key(limit: KeyedInFlight<K, C>, extractor: X) -> Self {
        Self::build(limit, extractor, true)
    }

    /// What to do with requests that have no key (default [`MissingKey::Reject`]: a bare
    /// `500`, the reason logged once to standard error).
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// use floodgate::middleware::{InFlightLayer, MissingKey};
    /// use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
    /// # });
    /// let reject = InFlightLayer::per_ip(KeyedInFlight::new(5, 100)?);
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
}

impl<L, X> InFlightLayer<L, X> {
    fn build(limit: L, extractor: X, keyed: bool) -> Self {
        let quota = Quota::ConcurrentRequests { retry_after: 1 };
        InFlightLayer {
            limiter: Arc::new(limit),
            extractor,
            settings: Arc::new(Settings::new(quota, StatusCode::SERVICE_UNAVAILABLE)),
            shared: Arc::new(Shared::default()),
            queue: None,
            keyed,
        }
    }

    /// The status of a rejected request: `503 Service Unavailable` (the default; the server is
    /// at capacity, problem type [`TEMPORARY_REDUCED_CAPACITY`](super::TEMPORARY_REDUCED_CAPACITY))
    /// or `429 Too Many Requests` (the client has too many requests in progress, problem type
    /// [`QUOTA_EXCEEDED`](super::QUOTA_EXCEEDED); fitting for a per-key limit).
    ///
    /// # Errors
    /// [`ConfigError::InvalidNumber`] for any other status.
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// use floodgate::middleware::InFlightLayer;
    /// use http::StatusCode;
    /// let layer = InFlightLayer::per_ip(KeyedInFlight::new(5, 100)?);
    /// let layer = layer.status(StatusCode::TOO_MANY_REQUESTS)?;
    /// assert_eq!(
    ///     layer.status(StatusCode::INTERNAL_SERVER_ERROR).unwrap_err().to_string(),
    ///     "in-flight rejection status must be 429 or 503, got 500"
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn status(mut self, status: StatusCode) -> Result<Self, ConfigError> {
        if status != StatusCode::SERVICE_UNAVAILABLE && status != StatusCode::TOO_MANY_REQUESTS {
            return Err(ConfigError::InvalidNumber {
                what: "in-flight rejection status",
                value: f64::from(status.as_u16()),
                expected: "429 or 503",
            });
        }
        Arc::make_mut(&mut self.settings).denial_status = status;
        Ok(self)
    }

    /// The `Retry-After` of a rejected request (default 1 s): a permit frees whenever a request
    /// ends, so this is a hint for how soon to try again, not a promise.
    ///
    /// # Errors
    /// [`ConfigError::DurationOutOfRange`] for zero or above 999,999,999,999,999 s;
    /// [`ConfigError::Invalid`] for a fraction of a second (`Retry-After` is whole seconds).
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use floodgate::middleware::InFlightLayer;
    /// use std::time::Duration;
    /// let layer = InFlightLayer::global(InFlight::new(5)?).retry_after(Duration::from_secs(3))?;
    /// assert!(layer.retry_after(Duration::from_millis(1500)).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retry_after(mut self, retry_after: Duration) -> Result<Self, ConfigError> {
        let seconds = whole_seconds(
            "in-flight Retry-After",
            "must be whole seconds: Retry-After has no sub-second precision",
            retry_after,
        )?;
        Arc::make_mut(&mut self.settings).quota = Quota::ConcurrentRequests {
            retry_after: seconds,
        };
        Ok(self)
    }

    /// The policy the draft -11 fields and the problem body name (default `"default"`).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for a policy with a window (`w`): requests in progress are not
    /// counted per time; and for a policy with a partition key on a global layer (there is no
    /// key to derive it from).
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// use floodgate::middleware::{InFlightLayer, Policy};
    /// use std::time::Duration;
    /// let layer = InFlightLayer::per_ip(KeyedInFlight::new(5, 100)?);
    /// let layer = layer.policy(Policy::new("per-ip-concurrent")?.partition_key(true))?;
    /// let windowed = Policy::new("per-ip")?.window(Duration::from_secs(60))?;
    /// assert!(layer.policy(windowed).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn policy(mut self, policy: Policy) -> Result<Self, ConfigError> {
        if policy.window_seconds().is_some() {
            return Err(ConfigError::Invalid {
                what: "in-flight policy",
                why: "has no window (w): requests in progress are not counted per time",
            });
        }
        if policy.has_partition_key() && !self.keyed {
            return Err(ConfigError::Invalid {
                what: "in-flight policy",
                why: "a global limit has no request key to derive a partition key (pk) from",
            });
        }
        Arc::make_mut(&mut self.settings).set_policy(policy);
        Ok(self)
    }

    /// The limiter, shared by every service this layer makes.
    ///
    /// ```
    /// use floodgate::concurrency::KeyedInFlight;
    /// use floodgate::middleware::InFlightLayer;
    /// let layer = InFlightLayer::per_ip(KeyedInFlight::new(5, 100)?);
    /// layer.limiter().set_limit(10)?;
    /// assert_eq!(layer.limiter().limit(), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limiter(&self) -> &Arc<L> {
        &self.limiter
    }
}

impl<S, L, X: Clone> Layer<S> for InFlightLayer<L, X> {
    type Service = InFlightLimit<S, L, X>;

    fn layer(&self, inner: S) -> Self::Service {
        InFlightLimit {
            inner,
            limiter: Arc::clone(&self.limiter),
            extractor: self.extractor.clone(),
            settings: Arc::clone(&self.settings),
            shared: Arc::clone(&self.shared),
            queue: self.queue,
        }
    }
}
