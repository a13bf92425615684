//! [`RateLimit`], the tower `Service`, and its [`ResponseFuture`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::Service;

use super::fields::partition_key;
use super::layer::{Settings, Shared};
use super::response::{Hold, RateLimitBody, Stamp, denied, pass_through, server_error};
use super::{Decided, KeyExtractor, KeyedLimiter, MissingKey};
use crate::async_acquire::wait_for_grant;
use crate::decision::{AcquireError, Decision};
use crate::observe::{RequestOutcome, Timer, Unended};

pub(super) const NO_KEY: &str = "floodgate::middleware: a request had no rate-limit key and was answered \
    500 (MissingKey::Reject). For per-IP limits the server must record peer addresses: serve \
    axum with `into_make_service_with_connect_info::<SocketAddr>()`, or insert the peer's \
    SocketAddr into the request extensions (hyper, tonic). `on_missing_key(MissingKey::Allow)` \
    lets such requests through unlimited. (Logged once per layer.)";
pub(super) const NEVER_GRANTED: &str = "floodgate::middleware: a request costs more permits than the \
    limiter's limit (lowered by set_limit?), so it can never be granted; answered 500. \
    (Logged once per layer.)";

/// The once-per-layer line for a request the limiter refused with an error: [`NEVER_GRANTED`]
/// for more permits than the limit, else the error itself (a key too long for memcached is not
/// a permit count to look for). Formatted only when [`log_once`] logs it, not on every such
/// request.
pub(super) struct NeverGranted(pub(super) AcquireError);

impl std::fmt::Display for NeverGranted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            AcquireError::ExceedsCapacity { .. } => f.write_str(NEVER_GRANTED),
            error => write!(
                f,
                "floodgate::middleware: a request can never be granted ({error}); answered \
                 500. (Logged once per layer.)"
            ),
        }
    }
}

/// Writes a setup error to standard error (and, with the `tracing` feature, as an `ERROR`
/// event), the first time only: a misconfigured server logs one line, not one per request, and
/// the client sees a bare 500. The message is formatted then only.
pub(super) fn log_once(logged: &AtomicBool, settings: &Settings, message: impl std::fmt::Display) {
    // Relaxed: the flag guards no other memory; the swap alone decides which call logs.
    if !logged.load(Ordering::Relaxed) && !logged.swap(true, Ordering::Relaxed) {
        let message = message.to_string();
        eprintln!("{message}");
        settings
            .observer
            .setup_error(settings.policy.name(), &message);
    }
}

/// The rate-limiting service made by [`RateLimitLayer`](super::RateLimitLayer): checks each
/// request's key, calls the inner service when allowed, answers 429 when not (or first waits, if
/// shaping is on).
///
/// ```
/// use floodgate::middleware::RateLimitLayer;
/// use floodgate::{FixedWindow, Keyed, ManualClock};
/// use http::{Request, Response, StatusCode};
/// use std::convert::Infallible;
/// use std::time::Duration;
/// use tower::{Layer, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(60))?)
///     .clock(ManualClock::new())
///     .build()?;
/// let service = RateLimitLayer::per_ip(per_ip).layer(tower::service_fn(|_req: Request<()>| async {
///     Ok::<_, Infallible>(Response::new(http_body_util::Empty::<bytes::Bytes>::new()))
/// }));
/// let request = || {
///     let mut request = Request::new(());
///     request.extensions_mut().insert("192.0.2.1:4000".parse::<std::net::SocketAddr>().unwrap());
///     request
/// };
/// assert_eq!(service.clone().oneshot(request()).await?.status(), StatusCode::OK);
/// let denied = service.oneshot(request()).await?;
/// assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
/// assert_eq!(denied.headers()["retry-after"], "60");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RateLimit<S, L, X> {
    pub(super) inner: S,
    pub(super) limiter: Arc<L>,
    pub(super) extractor: X,
    pub(super) settings: Arc<Settings>,
    pub(super) shared: Arc<Shared>,
}

impl<S: Clone, L, X: Clone> Clone for RateLimit<S, L, X> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            limiter: Arc::clone(&self.limiter),
            extractor: self.extractor.clone(),
            settings: Arc::clone(&self.settings),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S, L, X> RateLimit<S, L, X> {
    /// The keyed limiter.
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
    /// let per_ip = Keyed::builder(FixedWindow::new(5, Duration::from_secs(60))?)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let service = RateLimitLayer::per_ip(per_ip).layer(ok);
    /// service.clone().oneshot(from("192.0.2.1:1000")).await?;
    /// assert_eq!(service.limiter().len(), 1); // one client IP tracked
    /// # Ok(()) }
    /// ```
    pub fn limiter(&self) -> &Arc<L> {
        &self.limiter
    }

    /// The inner service.
    ///
    /// ```
    /// use floodgate::middleware::RateLimitLayer;
    /// use floodgate::{FixedWindow, Keyed};
    /// use tower::Layer;
    /// let per_ip = Keyed::new(FixedWindow::new(5, std::time::Duration::from_secs(1))?, 100)?;
    /// let service = RateLimitLayer::per_ip(per_ip).layer("the inner service");
    /// assert_eq!(*service.inner(), "the inner service");
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

pub(super) type BoxedResponse<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<RateLimitBody<B>>, E>> + Send>>;

impl<S, L, X, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, L, X>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
    X: KeyExtractor<ReqBody>,
    L: KeyedLimiter<X::Key>,
{
    type Response = Response<RateLimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let settings = &self.settings;
        if settings.skips(&request) {
            return ResponseFuture::called(self.inner.call(request), None, None);
        }
        let observer = &settings.observer;
        let timer = Timer::start();
        let Some(key) = self.extractor.extract(&request) else {
            observer.ended(RequestOutcome::NoKey);
            return match settings.missing_key {
                MissingKey::Allow => ResponseFuture::called(self.inner.call(request), None, None),
                MissingKey::Reject => {
                    log_once(&self.shared.logged_missing_key, settings, NO_KEY);
                    ResponseFuture::answered(server_error())
                }
            };
        };
        let checked = match self.limiter.decide(&key, settings.permits) {
            Decided::Now(checked) => checked,
            Decided::Later(future) => {
                return ResponseFuture::waiting(self.decide_later(future, timer, key, request));
            }
        };
        observer.decided(timer);
        let decision = match checked {
            Ok(decision) => decision,
            Err(error) => {
                observer.ended(RequestOutcome::NeverGranted);
                log_once(
                    &self.shared.logged_never_granted,
                    settings,
                    NeverGranted(error),
                );
                return ResponseFuture::answered(server_error());
            }
        };
        let pk = settings
            .policy
            .has_partition_key()
            .then(|| partition_key(&key));
        if decision.is_allowed() {
            observer.ended(RequestOutcome::Allowed);
            let stamp = Stamp::on_allowed(settings, decision, pk);
            return ResponseFuture::called(self.inner.call(request), stamp, None);
        }
        if let Some(shaping) = settings.shaping
            && decision.retry_after() <= shaping.max_delay
            && let Some(slot) = WaitingSlot::take(&self.shared, shaping.max_waiting)
        {
            return ResponseFuture::waiting(self.shape(slot, key, decision, pk, request));
        }
        observer.ended(RequestOutcome::Denied);
        observer.denied(settings.policy.name(), request.uri().path(), decision);
        ResponseFuture::answered(denied(&Stamp {
            settings: Arc::clone(settings),
            decision,
            pk,
        }))
    }
}

impl<S, L, X> RateLimit<S, L, X> {
    /// Waits out the denial (up to the shaping bound), then calls the inner service, or answers
    /// 429 if the wait outgrew the bound.
    fn shape<ReqBody, ResBody>(
        &mut self,
        slot: WaitingSlot,
        key: X::Key,
        denial: Decision,
        pk: Option<u64>,
        request: Request<ReqBody>,
    ) -> BoxedResponse<ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: 'static,
        ReqBody: Send + 'static,
        ResBody: Send + 'static,
        X: KeyExtractor<ReqBody>,
        L: KeyedLimiter<X::Key>,
    {
        // The ready service stays here for the next call: a waiting request must not hold what
        // it reserved (a concurrency permit, a buffer slot). The clone is made ready after the
        // wait, when it is about to be called.
        let mut inner = self.inner.clone();
        let limiter = Arc::clone(&self.limiter);
        let settings = Arc::clone(&self.settings);
        let shared = Arc::clone(&self.shared);
        let max_delay = settings.shaping.map(|s| s.max_delay);
        let path = event_path(&request);
        // Decided, not yet ended: `cancelled` if this future is dropped while it waits.
        let unended = Unended::new(&settings.observer);
        Box::pin(async move {
            let waited = wait_for_grant(limiter.clock(), max_delay, denial, || {
                limiter.try_acquire(&key, settings.permits)
            })
            .await;
            // The waiting is over: the place is free for the next shaped request, even while
            // this one is being served.
            drop(slot);
            match waited {
                Ok(waited) => {
                    let allowed = waited.decision.is_allowed();
                    let stamp = Stamp {
                        settings,
                        decision: waited.decision,
                        pk,
                    };
                    let observer = &stamp.settings.observer;
                    if !allowed {
                        unended.end(RequestOutcome::Denied);
                        observer.denied(stamp.settings.policy.name(), &path, stamp.decision);
                        return Ok(denied(&stamp));
                    }
                    unended.end(RequestOutcome::Delayed);
                    let stamp = stamp.if_needed();
                    std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                    Ok(pass_through(
                        inner.call(request).await?,
                        stamp.as_ref(),
                        None,
                    ))
                }
                Err(error) => {
                    unended.end(RequestOutcome::NeverGranted);
                    log_once(&shared.logged_never_granted, &settings, NeverGranted(error));
                    Ok(server_error())
                }
            }
        })
    }
}

/// The request's path for a denial's event (the request itself moves into a future): copied
/// only when that event can be seen.
fn event_path<B>(request: &Request<B>) -> String {
    #[cfg(feature = "tracing")]
    if tracing::enabled!(tracing::Level::DEBUG) {
        return request.uri().path().to_owned();
    }
    #[cfg(not(feature = "tracing"))]
    let _ = request;
    String::new() // does not allocate
}

impl<S, L, X> RateLimit<S, L, X> {
    /// Awaits a decision a round trip away ([`Decided::Later`]), then calls the inner service,
    /// waits (shaping) or answers 429, as for a decision made at once. A shaped wait is measured
    /// on tokio's clock: the store decides on its own (Redis) or on the limiter's clock.
    fn decide_later<ReqBody, ResBody>(
        &mut self,
        decision: Pin<Box<dyn Future<Output = Result<Decision, AcquireError>> + Send>>,
        timer: Timer,
        key: X::Key,
        request: Request<ReqBody>,
    ) -> BoxedResponse<ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: 'static,
        ReqBody: Send + 'static,
        ResBody: Send + 'static,
        X: KeyExtractor<ReqBody>,
        L: KeyedLimiter<X::Key>,
    {
        // As in `shape`: the ready service stays for the next call; the clone is made ready
        // once the decision is in.
        let mut inner = self.inner.clone();
        let limiter = Arc::clone(&self.limiter);
        let settings = Arc::clone(&self.settings);
        let shared = Arc::clone(&self.shared);
        let path = event_path(&request);
        Box::pin(async move {
            let checked = decision.await;
            let observer = &settings.observer;
            observer.decided(timer);
            // Decided, not yet ended: `cancelled` if this future is dropped while it waits.
            let unended = Unended::new(observer);
            let never_granted = |unended: Unended, error| {
                unended.end(RequestOutcome::NeverGranted);
                log_once(&shared.logged_never_granted, &settings, NeverGranted(error));
                Ok(server_error())
            };
            let mut decision = match checked {
                Ok(decision) => decision,
                Err(error) => return never_granted(unended, error),
            };
            let mut delayed = false;
            let shaping = settings.shaping.filter(|shaping| {
                !decision.is_allowed() && decision.retry_after() <= shaping.max_delay
            });
            if let Some(shaping) = shaping
                && let Some(slot) = WaitingSlot::take(&shared, shaping.max_waiting)
            {
                let start = tokio::time::Instant::now();
                // A denial's retry_after is at least 1 ns and tokio rounds a sleep up to its
                // next millisecond: each round lets time pass, and the budget ends the loop.
                while !decision.is_allowed()
                    && decision.retry_after() <= shaping.max_delay.saturating_sub(start.elapsed())
                {
                    tokio::time::sleep(decision.retry_after()).await;
                    let checked = match limiter.decide(&key, settings.permits) {
                        Decided::Now(checked) => checked,
                        Decided::Later(future) => future.await,
                    };
                    decision = match checked {
                        Ok(decision) => decision,
                        Err(error) => return never_granted(unended, error),
                    };
                }
                // The waiting is over: the place is free for the next shaped request.
                drop(slot);
                delayed = true;
            }
            let pk = settings
                .policy
                .has_partition_key()
                .then(|| partition_key(&key));
            let stamp = Stamp {
                settings: Arc::clone(&settings),
                decision,
                pk,
            };
            if !decision.is_allowed() {
                unended.end(RequestOutcome::Denied);
                observer.denied(settings.policy.name(), &path, decision);
                return Ok(denied(&stamp));
            }
            unended.end(if delayed {
                RequestOutcome::Delayed
            } else {
                RequestOutcome::Allowed
            });
            let stamp = stamp.if_needed();
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            Ok(pass_through(
                inner.call(request).await?,
                stamp.as_ref(),
                None,
            ))
        })
    }
}

/// One of the `max_waiting` places for shaped (delayed) requests, given back on drop (also when
/// the request is cancelled while it waits).
pub(super) struct WaitingSlot(Arc<Shared>);

impl WaitingSlot {
    pub(super) fn take(shared: &Arc<Shared>, max_waiting: usize) -> Option<Self> {
        // Relaxed: a bare counter; it guards no other memory.
        shared
            .waiting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max_waiting).then_some(n + 1)
            })
            .ok()
            .map(|_| WaitingSlot(Arc::clone(shared)))
    }
}

impl Drop for WaitingSlot {
    fn drop(&mut self) {
        // Relaxed: a bare counter; it guards no other memory.
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

pin_project! {
    /// The future of the response of [`RateLimit`] and of
    /// [`InFlightLimit`](super::InFlightLimit).
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project! {
    #[project = StateProjection]
    enum State<F, B, E> {
        // The inner service was called; add the header fields of `stamp` to its response, and
        // hand its body the permits of `hold` (an in-flight layer's).
        Called { #[pin] future: F, stamp: Option<Stamp>, hold: Option<Hold> },
        // Answered by the middleware (429, 503 or 500).
        Answered { response: Option<Response<RateLimitBody<B>>> },
        // Waiting (shaping, or queued for an in-flight permit), then calling the inner service.
        Waiting { future: BoxedResponse<B, E> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(super) fn called(future: F, stamp: Option<Stamp>, hold: Option<Hold>) -> Self {
        ResponseFuture {
            state: State::Called {
                future,
                stamp,
                hold,
            },
        }
    }

    pub(super) fn answered(response: Response<RateLimitBody<B>>) -> Self {
        ResponseFuture {
            state: State::Answered {
                response: Some(response),
            },
        }
    }

    pub(super) fn waiting(future: BoxedResponse<B, E>) -> Self {
        ResponseFuture {
            state: State::Waiting { future },
        }
    }
}

impl<F, B, E> std::fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResponseFuture")
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<RateLimitBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProjection::Called {
                future,
                stamp,
                hold,
            } => {
                match ready!(future.poll(cx)) {
                    Ok(response) => {
                        Poll::Ready(Ok(pass_through(response, stamp.as_ref(), hold.take())))
                    }
                    Err(error) => {
                        // The request has ended: its permits go back now, not when this
                        // (finished) future is dropped.
                        drop(hold.take());
                        Poll::Ready(Err(error))
                    }
                }
            }
            StateProjection::Answered { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after completion"))),
            StateProjection::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}
