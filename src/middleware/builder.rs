//! [`LayerSettings`]: the settings both HTTP layers ([`RateLimitLayer`](super::RateLimitLayer)
//! and [`InFlightLayer`]) share, set the same way on either.

use std::sync::Arc;

use http::Method;

use super::layer::Settings;
use super::{DenialBody, HeaderStyle, InFlightLayer, RateLimitLayer};

// Sealed: the trait is reachable from `LayerSettings` but not nameable outside the crate, and
// the settings it hands out are the crate's own type.
#[allow(private_interfaces)]
pub(crate) mod sealed {
    /// The layers whose settings [`LayerSettings`](super::LayerSettings) sets. Sealed: the
    /// settings are the crate's.
    pub trait HasSettings {
        /// The settings the layer hands its services (copied on write).
        #[doc(hidden)]
        fn settings_mut(&mut self) -> &mut super::Settings;
    }
}

#[allow(private_interfaces)]
impl<L, X> sealed::HasSettings for RateLimitLayer<L, X> {
    fn settings_mut(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }
}

#[allow(private_interfaces)]
impl<L, X> sealed::HasSettings for InFlightLayer<L, X> {
    fn settings_mut(&mut self) -> &mut Settings {
        Arc::make_mut(&mut self.settings)
    }
}

/// The response settings both HTTP layers share: header fields, the denial's body, and the
/// requests that pass unlimited. Implemented by [`RateLimitLayer`] and [`InFlightLayer`]
/// (sealed); import it to call these builder methods on either.
///
/// ```
/// use floodgate::concurrency::InFlight;
/// use floodgate::middleware::{DenialBody, HeaderStyle, InFlightLayer, LayerSettings, RateLimitLayer};
/// use floodgate::{FixedWindow, Keyed};
/// use std::time::Duration;
/// let per_ip = RateLimitLayer::per_ip(Keyed::new(FixedWindow::new(5, Duration::from_secs(1))?, 100)?)
///     .header_style(HeaderStyle::XRateLimit)
///     .skip_path(|path| path == "/healthz");
/// let in_flight = InFlightLayer::global(InFlight::new(64)?)
///     .denial_body(DenialBody::PlainText)
///     .skip_path(|path| path == "/healthz");
/// # let _ = (per_ip, in_flight);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait LayerSettings: sealed::HasSettings + Sized {
    /// Which header fields to write (default [`HeaderStyle::Draft11`]: `RateLimit-Policy` and
    /// `RateLimit`).
    ///
    /// ```
    /// use floodgate::middleware::LayerSettings;
    /// use floodgate::middleware::{HeaderStyle, RateLimitLayer};
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
    /// let per_ip = Keyed::builder(FixedWindow::new(5, Duration::from_secs(60))?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let service = RateLimitLayer::per_ip(per_ip).header_style(HeaderStyle::XRateLimit).layer(ok);
    /// let response = service.oneshot(from("192.0.2.1:1000")).await?;
    /// assert_eq!(response.headers()["x-ratelimit-remaining"], "4");
    /// # Ok(()) }
    /// ```
    ///
    /// On an [`InFlightLayer`]:
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use floodgate::middleware::LayerSettings;
    /// use floodgate::middleware::{HeaderStyle, InFlightLayer};
    /// use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
    /// # });
    /// let layer = InFlightLayer::global(InFlight::new(5)?).header_style(HeaderStyle::XRateLimit);
    /// let response = layer.layer(ok).oneshot(http::Request::new(())).await?;
    /// assert_eq!(response.headers()["x-ratelimit-remaining"], "4");
    /// assert!(response.headers().get("x-ratelimit-reset").is_none()); // no reset time
    /// # Ok(()) }
    /// ```
    fn header_style(mut self, style: HeaderStyle) -> Self {
        self.settings_mut().style = style;
        self
    }

    /// Whether allowed responses also get the rate-limit header fields (default `true`; denials
    /// always get them). Off, a [`RateLimitLayer`] still raises the `Retry-After` of a request
    /// an inner layer denied to its own reset when it has no permits left for the next request
    /// (see [`HeaderStyle`]): that is no field, but when the client may come back.
    ///
    /// ```
    /// use floodgate::middleware::LayerSettings;
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
    /// assert!(allowed.headers().get("ratelimit").is_none());
    /// let denied = service.oneshot(from("192.0.2.1:1000")).await?;
    /// assert_eq!(denied.headers()["ratelimit"], r#""default";r=0;t=60"#); // denials always have them
    /// # Ok(()) }
    /// ```
    ///
    /// On an [`InFlightLayer`]:
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use floodgate::middleware::LayerSettings;
    /// use floodgate::middleware::InFlightLayer;
    /// use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
    /// # });
    /// let layer = InFlightLayer::global(InFlight::new(5)?).headers_on_allowed(false);
    /// let response = layer.layer(ok).oneshot(http::Request::new(())).await?;
    /// assert!(response.headers().get("ratelimit").is_none());
    /// # Ok(()) }
    /// ```
    fn headers_on_allowed(mut self, on: bool) -> Self {
        self.settings_mut().headers_on_allowed = on;
        self
    }

    /// How denied requests are answered (default [`DenialBody::ProblemJson`]).
    ///
    /// ```
    /// use floodgate::middleware::LayerSettings;
    /// use floodgate::middleware::{DenialBody, RateLimitLayer};
    /// use floodgate::{FixedWindow, Keyed, ManualClock};
    /// use std::time::Duration;
    /// # use http_body_util::BodyExt;
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
    /// let service = RateLimitLayer::per_ip(per_ip).denial_body(DenialBody::PlainText).layer(ok);
    /// service.clone().oneshot(from("192.0.2.1:1000")).await?;
    /// let denied = service.oneshot(from("192.0.2.1:1000")).await?;
    /// assert_eq!(denied.into_body().collect().await?.to_bytes(), "Too Many Requests\n");
    /// # Ok(()) }
    /// ```
    ///
    /// On an [`InFlightLayer`]:
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use floodgate::middleware::LayerSettings;
    /// use floodgate::middleware::{DenialBody, InFlightLayer};
    /// use http_body_util::BodyExt;
    /// use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
    /// # });
    /// let layer = InFlightLayer::global(InFlight::new(1)?).denial_body(DenialBody::PlainText);
    /// let service = layer.layer(ok);
    /// let _held = service.clone().oneshot(http::Request::new(())).await?;
    /// let rejected = service.oneshot(http::Request::new(())).await?;
    /// assert_eq!(rejected.into_body().collect().await?.to_bytes(), "Service Unavailable\n");
    /// # Ok(()) }
    /// ```
    fn denial_body(mut self, body: DenialBody) -> Self {
        self.settings_mut().denial_body = body;
        self
    }

    /// Lets requests with `method` through unlimited and without header fields (for example
    /// `OPTIONS`, so CORS preflights do not count against a browser client's quota). Call again
    /// to skip more methods.
    ///
    /// ```
    /// use floodgate::middleware::LayerSettings;
    /// use floodgate::middleware::RateLimitLayer;
    /// use floodgate::{FixedWindow, Keyed, ManualClock};
    /// use http::Method;
    /// use std::time::Duration;
    /// # use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
    /// # });
    /// let request = |method: Method| {
    ///     let mut request = http::Request::builder().method(method).body(()).unwrap();
    ///     request.extensions_mut().insert("192.0.2.1:1000".parse::<std::net::SocketAddr>().unwrap());
    ///     request
    /// };
    /// let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(60))?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let service = RateLimitLayer::per_ip(per_ip).skip_method(Method::OPTIONS).layer(ok);
    /// for _ in 0..3 {
    ///     assert_eq!(service.clone().oneshot(request(Method::OPTIONS)).await?.status(), 200);
    /// }
    /// assert_eq!(service.clone().oneshot(request(Method::GET)).await?.status(), 200);
    /// assert_eq!(service.oneshot(request(Method::GET)).await?.status(), 429);
    /// # Ok(()) }
    /// ```
    ///
    /// On an [`InFlightLayer`]:
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use floodgate::middleware::LayerSettings;
    /// use floodgate::middleware::InFlightLayer;
    /// use http::Method;
    /// use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
    /// # });
    /// let layer = InFlightLayer::global(InFlight::new(1)?).skip_method(Method::OPTIONS);
    /// let service = layer.layer(ok);
    /// let _held = service.clone().oneshot(http::Request::new(())).await?;
    /// let preflight = http::Request::builder().method(Method::OPTIONS).body(())?;
    /// assert_eq!(service.oneshot(preflight).await?.status(), 200);
    /// # Ok(()) }
    /// ```
    fn skip_method(mut self, method: Method) -> Self {
        self.settings_mut().skip_methods.push(method);
        self
    }

    /// Lets requests whose path (the URI path, without the query) matches `skip` through
    /// unlimited and without header fields (health checks, static assets). Call again to add
    /// more predicates; a request matching any of them is skipped.
    ///
    /// ```
    /// use floodgate::middleware::LayerSettings;
    /// use floodgate::middleware::RateLimitLayer;
    /// use floodgate::{FixedWindow, Keyed, ManualClock};
    /// use std::time::Duration;
    /// # use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
    /// # });
    /// let get = |path: &str| {
    ///     let mut request = http::Request::builder().uri(path).body(()).unwrap();
    ///     request.extensions_mut().insert("192.0.2.1:1000".parse::<std::net::SocketAddr>().unwrap());
    ///     request
    /// };
    /// let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(60))?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let service = RateLimitLayer::per_ip(per_ip)
    ///     .skip_path(|path| path == "/healthz")
    ///     .layer(ok);
    /// assert_eq!(service.clone().oneshot(get("/healthz?probe=1")).await?.status(), 200);
    /// assert_eq!(service.clone().oneshot(get("/api")).await?.status(), 200);
    /// assert_eq!(service.clone().oneshot(get("/healthz")).await?.status(), 200);
    /// assert_eq!(service.oneshot(get("/api")).await?.status(), 429);
    /// # Ok(()) }
    /// ```
    ///
    /// On an [`InFlightLayer`]:
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use floodgate::middleware::LayerSettings;
    /// use floodgate::middleware::InFlightLayer;
    /// use tower::{Layer, ServiceExt};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let ok = tower::service_fn(|_: http::Request<()>| async {
    /// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
    /// # });
    /// let layer = InFlightLayer::global(InFlight::new(1)?).skip_path(|path| path == "/healthz");
    /// let service = layer.layer(ok);
    /// let _held = service.clone().oneshot(http::Request::new(())).await?;
    /// let probe = http::Request::builder().uri("/healthz").body(())?;
    /// assert_eq!(service.oneshot(probe).await?.status(), 200);
    /// # Ok(()) }
    /// ```
    fn skip_path<F>(mut self, skip: F) -> Self
    where
        F: Fn(&str) -> bool + Send + Sync + 'static,
    {
        self.settings_mut().skip_paths.push(Arc::new(skip));
        self
    }
}

impl<L, X> LayerSettings for RateLimitLayer<L, X> {}
impl<L, X> LayerSettings for InFlightLayer<L, X> {}
