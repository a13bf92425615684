//! The responses the middleware makes or passes through, and [`RateLimitBody`], the body type
//! that carries either the inner body or the middleware's own.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::denial::{Denial, content};
use super::fields::{ceil_seconds, write_fields};
use super::layer::Settings;
use crate::concurrency::{KeyedPermit, OwnedInFlightPermit};
use crate::decision::Decision;

/// What the middleware writes onto a response it lets through or answers: the layer's settings,
/// the decision, and the request key's partition key.
pub(super) struct Stamp {
    pub(super) settings: Arc<Settings>,
    pub(super) decision: Decision,
    pub(super) pk: Option<u64>,
}

impl Stamp {
    fn write(&self, headers: &mut http::HeaderMap) {
        let settings = &self.settings;
        let decision = self.decision;
        // A response that already says `Retry-After` was denied further in (an inner layer, or
        // the application). If this layer allowed it but has no permits left for the next
        // request, retrying before this policy's `t` is pointless: raise `Retry-After` to it.
        let inner_retry_after = headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let fields = (in_requests(decision, settings.permits), settings.quota);
        write_fields(settings.style, headers, &settings.policy, fields, self.pk);
        if let Some(inner) = inner_retry_after {
            if decision.is_allowed() && decision.remaining() < u64::from(settings.permits) {
                let ours = ceil_seconds(decision.reset_after());
                headers.insert(RETRY_AFTER, HeaderValue::from(inner.max(ours)));
            }
        }
    }
}
/// `decision` counted in requests of `permits` permits each, as the draft's default quota unit
/// (`requests`) says `q` and `r` are: with 2 permits a request, a limit of 5 is 2 requests, and
/// 1 permit left is no request left (the next one is denied). Times are unchanged.
fn in_requests(decision: Decision, permits: u32) -> Decision {
    if permits <= 1 {
        return decision;
    }
    let n = u64::from(permits);
    let nanos = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let (limit, remaining) = (decision.limit() / n, decision.remaining() / n);
    let reset = nanos(decision.reset_after());
    if decision.is_allowed() {
        Decision::allow(limit, remaining, reset)
    } else {
        Decision::deny(limit, remaining, nanos(decision.retry_after()), reset)
    }
}

/// The answer to a denied request: the layer's [`DenialBody`](super::DenialBody), then the
/// header fields.
pub(super) fn denied<B>(stamp: &Stamp) -> Response<RateLimitBody<B>> {
    let settings = &stamp.settings;
    let denial = Denial::answered_with(
        stamp.decision,
        &settings.policy,
        settings.denial_status,
        settings.quota.retry_after(stamp.decision),
    );
    let mut response = stamp.settings.denial_body.build(&denial).map(text_body);
    stamp.write(response.headers_mut());
    response
}

/// The answer when the limiter cannot decide (no key, or a request cost the limiter can never
/// grant): a bare 500. The reason goes to the server's log (see the service), never to the
/// client.
pub(super) fn server_error<B>() -> Response<RateLimitBody<B>> {
    content(
        StatusCode::INTERNAL_SERVER_ERROR,
        "text/plain; charset=utf-8",
        Bytes::from_static(b"Internal Server Error\n"),
    )
    .map(text_body)
}

pub(super) fn text_body<B>(text: Bytes) -> RateLimitBody<B> {
    RateLimitBody {
        kind: Kind::Text { text: Some(text) },
    }
}

/// Permits an in-flight layer holds for a request: given back when the response body ends or
/// is dropped (see [`RateLimitBody`]).
#[derive(Debug)]
pub(super) enum Hold {
    Global { _permit: OwnedInFlightPermit },
    Keyed { _permit: KeyedPermit },
}

/// The inner service's response, with the header fields of `stamp` when given; its body holds
/// `hold` until it ends.
pub(super) fn pass_through<B>(
    response: Response<B>,
    stamp: Option<&Stamp>,
    hold: Option<Hold>,
) -> Response<RateLimitBody<B>> {
    let mut response = response.map(|body| RateLimitBody {
        kind: Kind::Inner { body, hold },
    });
    if let Some(stamp) = stamp {
        stamp.write(response.headers_mut());
    }
    response
}

pin_project! {
    /// The response body of the middleware: the inner service's body unchanged, or the body of
    /// a 429 / 503 (or 500) answered by the middleware itself.
    ///
    /// Under an [`InFlightLayer`](super::InFlightLayer) the inner body also holds the request's
    /// permit: it is given back when the body has yielded its last frame (or an error), or
    /// when the body is dropped, whichever comes first. So a streamed response counts as in
    /// progress until it is sent.
    ///
    /// ```
    /// use floodgate::middleware::RateLimitBody;
    /// use http_body::Body;
    /// fn is_body<B: Body>() {}
    /// is_body::<RateLimitBody<http_body_util::Full<bytes::Bytes>>>();
    /// ```
    pub struct RateLimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<B> {
        Inner { #[pin] body: B, hold: Option<Hold> },
        Text { text: Option<Bytes> },
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for RateLimitBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Inner { body, .. } => f.debug_tuple("RateLimitBody").field(body).finish(),
            Kind::Text { text } => f.debug_tuple("RateLimitBody").field(text).finish(),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for RateLimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProjection::Inner { body, hold } => {
                let frame = ready!(body.poll_frame(cx));
                if !matches!(frame, Some(Ok(_))) {
                    // The end of the body (or its failure): the request is no longer in
                    // progress, even if the body is kept around.
                    hold.take();
                }
                Poll::Ready(frame)
            }
            KindProjection::Text { text } => Poll::Ready(text.take().map(|t| Ok(Frame::data(t)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body, .. } => body.is_end_stream(),
            Kind::Text { text } => text.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body, .. } => body.size_hint(),
            Kind::Text { text } => {
                SizeHint::with_exact(text.as_ref().map_or(0, |t| t.len() as u64))
            }
        }
    }
}
