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
use super::fields::{X_RATELIMIT_AFTER, ceil_seconds, write_fields};
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
    /// What a rate-limit layer writes on a response it allowed: its fields when
    /// `headers_on_allowed` is on; and whether or not they are, when it has no permits left for
    /// the next request, the raise of an inner denial's `Retry-After` to its reset (see
    /// `write`). `None` when there is nothing to write (no `Arc` clone on that path).
    pub(super) fn on_allowed(
        settings: &Arc<Settings>,
        decision: Decision,
        pk: Option<u64>,
    ) -> Option<Stamp> {
        Self::needed(settings, decision).then(|| Stamp {
            settings: Arc::clone(settings),
            decision,
            pk,
        })
    }

    /// This stamp of an allowed decision, if it has anything to write (see
    /// [`on_allowed`](Self::on_allowed)).
    pub(super) fn if_needed(self) -> Option<Stamp> {
        Self::needed(&self.settings, self.decision).then_some(self)
    }

    fn needed(settings: &Settings, decision: Decision) -> bool {
        settings.headers_on_allowed || decision.remaining() < u64::from(settings.permits)
    }

    fn write(&self, headers: &mut http::HeaderMap) {
        let settings = &self.settings;
        let decision = self.decision;
        // A response that already says `Retry-After` was denied further in (an inner layer, or
        // the application). If this layer allowed it but has no permits left for the next
        // request, retrying before this policy's `t` is pointless: raise `Retry-After` to it.
        // Delta-seconds or an HTTP-date (RFC 9110 allows both), as seconds from now; a value
        // no client can read counts as none (0), so it is raised too.
        let inner_retry_after = headers
            .get(RETRY_AFTER)
            .map(|v| v.to_str().ok().and_then(seconds_until_retry).unwrap_or(0));
        if !decision.is_allowed() || settings.headers_on_allowed {
            let fields = (in_requests(decision, settings.permits), settings.quota);
            write_fields(settings.style, headers, &settings.policy, fields, self.pk);
        }
        if let Some(inner) = inner_retry_after
            && decision.is_allowed()
            && decision.remaining() < u64::from(settings.permits)
        {
            let ours = ceil_seconds(decision.reset_after());
            // A later inner value stands as it was written (a date stays a date).
            if ours > inner {
                headers.insert(RETRY_AFTER, HeaderValue::from(ours));
                // An inner layer's `X-RateLimit-After` (style `XRateLimit`) is the same wait
                // in seconds: raised with it, or its readers come back too early.
                let after = headers.get(X_RATELIMIT_AFTER).map(|v| {
                    v.to_str()
                        .ok()
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .unwrap_or(0)
                });
                if after.is_some_and(|after| after < ours) {
                    headers.insert(X_RATELIMIT_AFTER, HeaderValue::from(ours));
                }
            }
        }
    }
}
/// A `Retry-After` value as whole seconds from now: delta-seconds, or an HTTP-date in any of
/// RFC 9110's three forms (a date already past is 0); `None` for anything else.
fn seconds_until_retry(value: &str) -> Option<u64> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // More digits than a u64 holds is still "a very long time".
        return Some(value.parse().unwrap_or(u64::MAX));
    }
    let date = http_date(value)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    Some(date.saturating_sub(now))
}

/// An HTTP-date (RFC 9110 section 5.6.7) as Unix seconds: `Sun, 06 Nov 1994 08:49:37 GMT`
/// (IMF-fixdate), `Sunday, 06-Nov-94 08:49:37 GMT` (RFC 850) or `Sun Nov  6 08:49:37 1994`
/// (asctime). The day name is not checked against the date.
fn http_date(value: &str) -> Option<u64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month_of = |name: &str| MONTHS.iter().position(|&m| m == name).map(|m| m as u64 + 1);
    let number = |text: &str, digits: std::ops::RangeInclusive<usize>| {
        (digits.contains(&text.len()) && text.bytes().all(|b| b.is_ascii_digit()))
            .then(|| text.parse::<u64>().ok())
            .flatten()
    };
    let words: Vec<&str> = value.split_ascii_whitespace().collect();
    let (day, month, year, time) = match words[..] {
        // IMF-fixdate.
        [weekday, day, month, year, time, "GMT"] if weekday.ends_with(',') => (
            number(day, 2..=2)?,
            month_of(month)?,
            number(year, 4..=4)?,
            time,
        ),
        // RFC 850: a two-digit year, taken as the latest year with those digits that is not
        // more than 50 years ahead (RFC 9110).
        [weekday, date, time, "GMT"] if weekday.ends_with(',') => {
            let mut parts = date.split('-');
            let (Some(day), Some(month), Some(yy), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return None;
            };
            let yy = number(yy, 2..=2)?;
            let this_year = 1970
                + std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |since| since.as_secs())
                    / 31_556_952;
            let mut year = this_year - this_year % 100 + yy;
            if year > this_year + 50 {
                year -= 100;
            }
            (number(day, 2..=2)?, month_of(month)?, year, time)
        }
        // asctime: the day is space-padded, not zero-padded.
        [_weekday, month, day, time, year] => (
            number(day, 1..=2)?,
            month_of(month)?,
            number(year, 4..=4)?,
            time,
        ),
        _ => return None,
    };
    let mut clock = time.split(':');
    let (Some(h), Some(m), Some(s), None) =
        (clock.next(), clock.next(), clock.next(), clock.next())
    else {
        return None;
    };
    let (h, m, s) = (number(h, 2..=2)?, number(m, 2..=2)?, number(s, 2..=2)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if year < 1970 || day == 0 || day > month_days[month as usize - 1] || h > 23 || m > 59 || s > 60
    {
        return None;
    }
    // Days since 1970-01-01 of the civil date (H. Hinnant's days_from_civil).
    let (y, mp) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    Some(days * 86_400 + h * 3_600 + m * 60 + s)
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

#[cfg(test)]
mod tests {
    use super::{http_date, seconds_until_retry};

    #[test]
    fn http_dates_in_their_three_forms() {
        // RFC 9110's example instant, 784111777 in Unix seconds, in each form.
        for form in [
            "Sun, 06 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(http_date(form), Some(784_111_777), "{form}");
        }
        assert_eq!(
            http_date("Tue, 29 Feb 2000 00:00:00 GMT"),
            Some(951_782_400)
        );
        assert_eq!(
            http_date("Fri, 31 Dec 9999 23:59:59 GMT"),
            Some(253_402_300_799)
        );
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(0));
        for bad in [
            "Thu, 29 Feb 2001 00:00:00 GMT", // not a leap year
            "Sun, 6 Nov 1994 08:49:37 GMT",  // IMF-fixdate pads the day
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Wed, 31 Dec 1969 23:59:59 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
            "",
            "soon",
        ] {
            assert_eq!(http_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn retry_after_values_as_seconds_from_now() {
        assert_eq!(seconds_until_retry("120"), Some(120));
        assert_eq!(seconds_until_retry(" 7 "), Some(7));
        assert_eq!(
            seconds_until_retry("99999999999999999999999"),
            Some(u64::MAX)
        );
        assert_eq!(
            seconds_until_retry("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(0)
        );
        assert!(seconds_until_retry("Fri, 31 Dec 9999 23:59:59 GMT").unwrap() > 200_000_000_000);
        assert_eq!(seconds_until_retry("-1"), None);
        assert_eq!(seconds_until_retry("1.5"), None);
    }
}
