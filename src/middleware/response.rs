//! What the middleware writes: the `RateLimit-*` and `Retry-After` headers, the 429 and 500
//! answers, and [`RateLimitBody`], the body type that carries either the inner body or them.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use crate::decision::Decision;

/// `RateLimit-Limit`: the limit in force.
pub const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
/// `RateLimit-Remaining`: permits left after this request.
pub const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
/// `RateLimit-Reset`: whole seconds (rounded up) until the client's quota is full again.
pub const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");

/// Seconds, rounded up: a client told to come back after them is never early.
fn ceil_seconds(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// Writes the IETF `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` headers
/// (draft-ietf-httpapi-ratelimit-headers) for `decision`, and `Retry-After` (whole seconds,
/// rounded up, at least 1) when it is a denial. Existing values are replaced.
///
/// ```
/// use floodgate::Decision;
/// use floodgate::middleware::write_headers;
/// let mut headers = http::HeaderMap::new();
/// write_headers(&mut headers, Decision::deny(10, 0, 1_500_000_000, 60_000_000_000));
/// assert_eq!(headers["ratelimit-limit"], "10");
/// assert_eq!(headers["ratelimit-remaining"], "0");
/// assert_eq!(headers["ratelimit-reset"], "60");
/// assert_eq!(headers["retry-after"], "2");
/// ```
pub fn write_headers(headers: &mut HeaderMap, decision: Decision) {
    headers.insert(RATELIMIT_LIMIT, HeaderValue::from(decision.limit()));
    headers.insert(RATELIMIT_REMAINING, HeaderValue::from(decision.remaining()));
    headers.insert(
        RATELIMIT_RESET,
        HeaderValue::from(ceil_seconds(decision.reset_after())),
    );
    if !decision.is_allowed() {
        let retry_after = ceil_seconds(decision.retry_after()).max(1);
        headers.insert(RETRY_AFTER, HeaderValue::from(retry_after));
    }
}

/// The answer to a denied request: 429, the headers, a one-line text body.
pub(super) fn too_many_requests<B>(decision: Decision) -> Response<RateLimitBody<B>> {
    let mut response = text_response(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests\n");
    write_headers(response.headers_mut(), decision);
    response
}

/// The answer when the limiter cannot decide (no key, or a request cost the limiter can never
/// grant): 500 with the reason, since it is a server configuration error.
pub(super) fn server_error<B>(reason: &'static str) -> Response<RateLimitBody<B>> {
    text_response(StatusCode::INTERNAL_SERVER_ERROR, reason)
}

fn text_response<B>(status: StatusCode, text: &'static str) -> Response<RateLimitBody<B>> {
    let mut response = Response::new(RateLimitBody {
        kind: Kind::Text {
            text: Some(Bytes::from_static(text.as_bytes())),
        },
    });
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The inner service's response, with the headers of `decision` when given.
pub(super) fn pass_through<B>(
    response: Response<B>,
    decision: Option<Decision>,
) -> Response<RateLimitBody<B>> {
    let mut response = response.map(|body| RateLimitBody {
        kind: Kind::Inner { body },
    });
    if let Some(decision) = decision {
        write_headers(response.headers_mut(), decision);
    }
    response
}

pin_project! {
    /// The response body of the middleware: the inner service's body unchanged, or the short
    /// text of a 429 (or 500) answered by the middleware itself.
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
        Inner { #[pin] body: B },
        Text { text: Option<Bytes> },
    }
}

impl<B: std::fmt::Debug> std::fmt::Debug for RateLimitBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Inner { body } => f.debug_tuple("RateLimitBody").field(body).finish(),
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
            KindProjection::Inner { body } => body.poll_frame(cx),
            KindProjection::Text { text } => Poll::Ready(text.take().map(|t| Ok(Frame::data(t)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Text { text } => text.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Text { text } => {
                SizeHint::with_exact(text.as_ref().map_or(0, |t| t.len() as u64))
            }
        }
    }
}
