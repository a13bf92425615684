//! The answer to a denied request: an RFC 9457 problem (`application/problem+json`, problem type
//! `quota-exceeded`) by default, plain text, or a response built by the application.

use std::sync::Arc;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Response, StatusCode};

use super::fields::{Policy, retry_after_seconds};
use crate::decision::Decision;

/// The problem type of a denial (draft-ietf-httpapi-ratelimit-headers-11, section "Problem
/// Types").
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The problem type of a `503` denial: the server's capacity is exhausted for now, as an
/// [`InFlightLayer`](super::InFlightLayer) answers by default (draft-11, section "Problem
/// Types").
///
/// ```
/// use floodgate::concurrency::InFlight;
/// use floodgate::middleware::{InFlightLayer, TEMPORARY_REDUCED_CAPACITY};
/// use http_body_util::BodyExt;
/// use tower::{Layer, ServiceExt};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let ok = tower::service_fn(|_: http::Request<()>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(http_body_util::Full::new(bytes::Bytes::from("hi"))))
/// # });
/// let service = InFlightLayer::global(InFlight::new(1)?).layer(ok);
/// let _held = service.clone().oneshot(http::Request::new(())).await?;
/// let body = service.oneshot(http::Request::new(())).await?.into_body().collect().await?;
/// let body = String::from_utf8(body.to_bytes().to_vec())?;
/// assert!(body.contains(TEMPORARY_REDUCED_CAPACITY) && body.contains(r#""status":503"#));
/// # Ok(()) }
/// ```
pub const TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// A request the middleware denied, as handed to a [`DenialBody::custom`] builder.
///
/// ```
/// use floodgate::middleware::{Denial, DenialBody};
/// let body = DenialBody::custom(|denial: &Denial<'_>| {
///     let text = format!("slow down: {} s ({})", denial.retry_after_seconds(), denial.policy().name());
///     http::Response::builder().status(429).body(bytes::Bytes::from(text)).unwrap()
/// });
/// # let _ = body;
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Denial<'a> {
    decision: Decision,
    policy: &'a Policy,
    status: StatusCode,
    retry_after: u64,
}

impl<'a> Denial<'a> {
    /// The limiter's decision.
    ///
    /// ```
    /// use floodgate::Decision;
    /// use floodgate::middleware::{Denial, Policy};
    /// let policy = Policy::default();
    /// let denial = Denial::new(Decision::deny(10, 0, 2_500_000_000, 9_000_000_000), &policy);
    /// assert_eq!(denial.decision().limit(), 10);
    /// ```
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// The policy that was exceeded (the layer's).
    ///
    /// ```
    /// use floodgate::Decision;
    /// use floodgate::middleware::{Denial, Policy};
    /// let policy = Policy::new("per-ip")?;
    /// assert_eq!(Denial::new(Decision::deny(1, 0, 1, 1), &policy).policy().name(), "per-ip");
    /// # Ok::<(), floodgate::middleware::InvalidPolicyName>(())
    /// ```
    pub fn policy(&self) -> &'a Policy {
        self.policy
    }

    /// The `Retry-After` the response will carry: whole seconds, rounded up, at least 1.
    ///
    /// ```
    /// use floodgate::Decision;
    /// use floodgate::middleware::{Denial, Policy};
    /// let policy = Policy::default();
    /// let denial = Denial::new(Decision::deny(10, 0, 2_500_000_000, 9_000_000_000), &policy);
    /// assert_eq!(denial.retry_after_seconds(), 3);
    /// ```
    pub fn retry_after_seconds(&self) -> u64 {
        self.retry_after
    }

    /// The status the layer answers with: `429` for a rate limit; for an in-flight limit
    /// `503` or `429`, as [`InFlightLayer::status`](super::InFlightLayer::status) chose.
    ///
    /// ```
    /// use floodgate::Decision;
    /// use floodgate::middleware::{Denial, Policy};
    /// let policy = Policy::default();
    /// assert_eq!(Denial::new(Decision::deny(1, 0, 1, 1), &policy).status(), 429);
    /// ```
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// A denial of `decision` under `policy` (to test a builder).
    ///
    /// ```
    /// use floodgate::Decision;
    /// use floodgate::middleware::{Denial, DenialBody, Policy};
    /// let policy = Policy::default();
    /// let denial = Denial::new(Decision::deny(10, 0, 1, 1), &policy);
    /// assert_eq!(DenialBody::default().build(&denial).status(), 429);
    /// ```
    pub fn new(decision: Decision, policy: &'a Policy) -> Self {
        Denial {
            decision,
            policy,
            status: StatusCode::TOO_MANY_REQUESTS,
            retry_after: retry_after_seconds(decision),
        }
    }

    /// A denial answered with `status` and `Retry-After: retry_after` seconds.
    pub(super) fn answered_with(
        decision: Decision,
        policy: &'a Policy,
        status: StatusCode,
        retry_after: u64,
    ) -> Self {
        Denial {
            decision,
            policy,
            status,
            retry_after,
        }
    }
}

type Builder = dyn Fn(&Denial<'_>) -> Response<Bytes> + Send + Sync;

/// What a denied request is answered with. Whatever the body, the middleware then writes the
/// rate-limit fields and `Retry-After` onto the response (over any the builder set).
///
/// ```
/// use floodgate::Decision;
/// use floodgate::middleware::{Denial, DenialBody, Policy};
/// let policy = Policy::new("per-ip")?;
/// let denial = Denial::new(Decision::deny(10, 0, 1, 1), &policy);
/// let problem = DenialBody::ProblemJson.build(&denial);
/// assert_eq!(problem.headers()["content-type"], "application/problem+json");
/// assert_eq!(
///     problem.body(),
///     r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"violated-policies":["per-ip"]}"#
/// );
/// let text = DenialBody::PlainText.build(&denial);
/// assert_eq!(text.status(), 429);
/// assert_eq!(text.body().as_ref(), b"Too Many Requests\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
pub enum DenialBody {
    /// The denial's [status](Denial::status), `Content-Type: application/problem+json`, an
    /// RFC 9457 problem whose `violated-policies` names the layer's policy: of type
    /// [`QUOTA_EXCEEDED`] for a `429`, [`TEMPORARY_REDUCED_CAPACITY`] for a `503`.
    #[default]
    ProblemJson,
    /// The denial's status, `Content-Type: text/plain; charset=utf-8`, and its reason phrase
    /// (`Too Many Requests`, `Service Unavailable`).
    PlainText,
    /// The response the application builds (see [`DenialBody::custom`]).
    Custom(Arc<Builder>),
}

impl std::fmt::Debug for DenialBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DenialBody::ProblemJson => f.write_str("ProblemJson"),
            DenialBody::PlainText => f.write_str("PlainText"),
            DenialBody::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl DenialBody {
    /// Answers denials with the response `build` makes (any status; the middleware adds the
    /// rate-limit fields and `Retry-After`).
    ///
    /// ```
    /// use floodgate::Decision;
    /// use floodgate::middleware::{Denial, DenialBody, Policy};
    /// let body = DenialBody::custom(|denial: &Denial<'_>| {
    ///     http::Response::builder()
    ///         .status(503)
    ///         .body(format!("busy, retry in {} s", denial.retry_after_seconds()).into())
    ///         .unwrap()
    /// });
    /// let policy = Policy::default();
    /// let response = body.build(&Denial::new(Decision::deny(1, 0, 2_000_000_000, 1), &policy));
    /// assert_eq!(response.status(), 503);
    /// assert_eq!(response.body().as_ref(), b"busy, retry in 2 s");
    /// ```
    pub fn custom<F>(build: F) -> Self
    where
        F: Fn(&Denial<'_>) -> Response<Bytes> + Send + Sync + 'static,
    {
        DenialBody::Custom(Arc::new(build))
    }

    /// The response for `denial` (before the middleware adds the header fields).
    ///
    /// ```
    /// use floodgate::Decision;
    /// use floodgate::middleware::{Denial, DenialBody, Policy};
    /// let policy = Policy::default();
    /// let response = DenialBody::PlainText.build(&Denial::new(Decision::deny(1, 0, 1, 1), &policy));
    /// assert_eq!(response.headers()["content-type"], "text/plain; charset=utf-8");
    /// ```
    pub fn build(&self, denial: &Denial<'_>) -> Response<Bytes> {
        match self {
            DenialBody::ProblemJson => {
                let mut name = String::with_capacity(denial.policy.name().len() + 2);
                json_string(denial.policy.name(), &mut name);
                // The titles are the draft's own (section "Problem Types").
                let (problem, title) = if denial.status == StatusCode::SERVICE_UNAVAILABLE {
                    (
                        TEMPORARY_REDUCED_CAPACITY,
                        "Request cannot be satisfied due to temporary server capacity constraints",
                    )
                } else {
                    (
                        QUOTA_EXCEEDED,
                        "Request cannot be satisfied as assigned quota has been exceeded",
                    )
                };
                let status = denial.status.as_u16();
                let body = format!(
                    "{{\"type\":\"{problem}\",\"title\":\"{title}\",\"status\":{status},\
                     \"violated-policies\":[{name}]}}"
                );
                content(denial.status, "application/problem+json", Bytes::from(body))
            }
            DenialBody::PlainText => {
                let reason = denial.status.canonical_reason().unwrap_or("Denied");
                content(
                    denial.status,
                    "text/plain; charset=utf-8",
                    Bytes::from(format!("{reason}\n")),
                )
            }
            DenialBody::Custom(build) => build(denial),
        }
    }
}

/// A response with `status`, `content_type` and `body`.
pub(super) fn content(
    status: StatusCode,
    content_type: &'static str,
    body: Bytes,
) -> Response<Bytes> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// `text` as a JSON string (policy names are printable ASCII: only `"` and `\` need escapes).
fn json_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names_are_json_escaped() {
        let mut out = String::new();
        json_string(r#"a"b\c"#, &mut out);
        assert_eq!(out, r#""a\"b\\c""#);
        let mut out = String::new();
        json_string("\u{1}", &mut out);
        assert_eq!(out, r#""\u0001""#);
    }
}
