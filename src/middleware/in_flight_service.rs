//! [`InFlightLimit`], the service of an [`InFlightLayer`](super::InFlightLayer): takes a permit
//! per request (globally or per key) and hands it to the response body.

use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower::Service;

use super::fields::partition_key;
use super::layer::{Settings, Shared};
use super::response::{Hold, RateLimitBody, Stamp, denied, pass_through, server_error};
use super::service::{BoxedResponse, NEVER_GRANTED, NO_KEY, ResponseFuture, WaitingSlot, log_once};
use super::{KeyExtractor, MissingKey};
use crate::clock::Clock;
use crate::concurrency::{InFlight, KeyedInFlight, Permit};
use crate::decision::Decision;
use crate::keyed::Key;

/// The service made by [`InFlightLayer`](super::InFlightLayer): admits a request while a permit
/// is free (globally, or for its key), and keeps the permit until the response body has ended.
///
/// ```
/// use floodgate::concurrency::InFlight;
/// use floodgate::middleware::InFlightLayer;
/// use http_body_util::BodyExt;
/// use tower::{Layer, ServiceExt};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let service = InFlightLayer::global(InFlight::new(10)?).layer(tower::service_fn(
///     |_: http::Request<()>| async {
///         Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(
///             bytes::Bytes::from("hello"),
///         )))
///     },
/// ));
/// let response = service.clone().oneshot(http::Request::new(())).await?;
/// assert_eq!(service.limiter().in_flight(), 1); // the body is not sent yet
/// assert_eq!(response.into_body().collect().await?.to_bytes(), "hello");
/// assert_eq!(service.limiter().in_flight(), 0); // sent: the permit is back
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct InFlightLimit<S, L, X> {
    pub(super) inner: S,
    pub(super) limiter: Arc<L>,
    pub(super) extractor: X,
    pub(super) settings: Arc<Settings>,
    pub(super) shared: Arc<Shared>,
    pub(super) queue: Option<usize>,
}

impl<S: Clone, L, X: Clone> Clone for InFlightLimit<S, L, X> {
    fn clone(&self) -> Self {
        InFlightLimit {
            inner: self.inner.clone(),
            limiter: Arc::clone(&self.limiter),
            extractor: self.extractor.clone(),
            settings: Arc::clone(&self.settings),
            shared: Arc::clone(&self.shared),
            queue: self.queue,
        }
    }
}

impl<S, L, X> InFlightLimit<S, L, X> {
    /// The limiter ([`InFlight`] or [`KeyedInFlight`]).
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use floodgate::middleware::InFlightLayer;
    /// use tower::Layer;
    /// let service = InFlightLayer::global(InFlight::new(3)?).layer("the inner service");
    /// assert_eq!(service.limiter().limit(), 3);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn limiter(&self) -> &Arc<L> {
        &self.limiter
    }

    /// The inner service.
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use floodgate::middleware::InFlightLayer;
    /// use tower::Layer;
    /// let service = InFlightLayer::global(InFlight::new(3)?).layer("the inner service");
    /// assert_eq!(*service.inner(), "the inner service");
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn stamp(&self, decision: Decision, pk: Option<u64>) -> Stamp {
        Stamp {
            settings: Arc::clone(&self.settings),
            decision,
            pk,
        }
    }

    /// Calls the inner service for an admitted request; its body will hold `hold`.
    fn admit<ReqBody, ResBody>(
        &mut self,
        request: Request<ReqBody>,
        decision: Decision,
        pk: Option<u64>,
        hold: Hold,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    {
        let stamp = self
            .settings
            .headers_on_allowed
            .then(|| self.stamp(decision, pk));
        ResponseFuture::called(self.inner.call(request), stamp, Some(hold))
    }

    /// A request the layer does not limit (skipped, or without a key and let through).
    fn pass<ReqBody, ResBody>(
        &mut self,
        request: Request<ReqBody>,
    ) -> ResponseFuture<S::Future, ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    {
        ResponseFuture::called(self.inner.call(request), None, None)
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for InFlightLimit<S, InFlight, ()>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<RateLimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        if self.settings.skips(&request) {
            return self.pass(request);
        }
        // Denied while a waiter is queued: a request never overtakes the queue.
        let decision = self.limiter.take_decision(1);
        if decision.is_allowed() {
            let permit = Permit::new(Arc::clone(&self.limiter), 1);
            return self.admit(request, decision, None, Hold::Global { _permit: permit });
        }
        if let Some(max_waiting) = self.queue
            && let Some(slot) = WaitingSlot::take(&self.shared, max_waiting)
        {
            return ResponseFuture::waiting(self.wait_in_queue(slot, request));
        }
        ResponseFuture::answered(denied(&self.stamp(decision, None)))
    }
}

impl<S> InFlightLimit<S, InFlight, ()> {
    /// Waits in the limiter's FIFO queue for a permit, then calls the inner service.
    fn wait_in_queue<ReqBody, ResBody>(
        &mut self,
        slot: WaitingSlot,
        request: Request<ReqBody>,
    ) -> BoxedResponse<ResBody, S::Error>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: 'static,
        ReqBody: Send + 'static,
        ResBody: Send + 'static,
    {
        // As for shaping: the ready service stays here for the next call; the clone is made
        // ready once the permit is held.
        let mut inner = self.inner.clone();
        let limiter = Arc::clone(&self.limiter);
        let settings = Arc::clone(&self.settings);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            // Dropping this future (the client left) gives up the place in the queue and any
            // permit handed to it.
            let acquired = Arc::clone(&limiter).acquire_owned_async(1).await;
            drop(slot);
            let Ok(permit) = acquired else {
                // One permit exceeds no limit (limits are at least 1): unreachable, but a
                // request is never left without an answer.
                log_once(&shared.logged_never_granted, &settings, NEVER_GRANTED);
                return Ok(server_error());
            };
            let stamp = settings.headers_on_allowed.then(|| Stamp {
                decision: Decision::allow(
                    u64::from(limiter.limit()),
                    u64::from(limiter.available()),
                    0,
                ),
                settings,
                pk: None,
            });
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            let response = inner.call(request).await?;
            let hold = Hold::Global { _permit: permit };
            Ok(pass_through(response, stamp.as_ref(), Some(hold)))
        })
    }
}

impl<S, K, C, X, ReqBody, ResBody> Service<Request<ReqBody>>
    for InFlightLimit<S, KeyedInFlight<K, C>, X>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
    K: Key,
    C: Clock,
    X: KeyExtractor<ReqBody, Key = K>,
{
    type Response = Response<RateLimitBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        if self.settings.skips(&request) {
            return self.pass(request);
        }
        let Some(key) = self.extractor.extract(&request) else {
            return match self.settings.missing_key {
                MissingKey::Allow => self.pass(request),
                MissingKey::Reject => {
                    log_once(&self.shared.logged_missing_key, &self.settings, NO_KEY);
                    ResponseFuture::answered(server_error())
                }
            };
        };
        let (decision, permit) = match self.limiter.take(&key, 1) {
            Ok(taken) => taken,
            Err(_) => {
                // One permit exceeds no limit (limits are at least 1): unreachable.
                log_once(
                    &self.shared.logged_never_granted,
                    &self.settings,
                    NEVER_GRANTED,
                );
                return ResponseFuture::answered(server_error());
            }
        };
        let pk = self
            .settings
            .policy
            .has_partition_key()
            .then(|| partition_key(&key));
        match permit {
            Some(permit) => self.admit(request, decision, pk, Hold::Keyed { _permit: permit }),
            None => ResponseFuture::answered(denied(&self.stamp(decision, pk))),
        }
    }
}
