//! QA probes of the HTTP layer against draft-ietf-httpapi-ratelimit-headers-11 and the layer's
//! own documented behaviour: every style's reset field on a denial, `t` on allowed responses,
//! limits lowered below a request's cost, and a Redis that is down.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use floodgate::middleware::{HeaderStyle, LayerSettings, RateLimitLayer};
use floodgate::{
    Algorithm, FixedWindow, Gcra, IpKey, Keyed, LeakyBucket, ManualClock, PackedSlidingWindow,
    PenaltyBox, Rate, TokenBucket,
};
use http::{HeaderMap, Request, Response};
use http_body_util::Full;
use tower::{Layer, Service, ServiceExt};

#[path = "support/ratelimit_fields.rs"]
mod ratelimit_fields;
use ratelimit_fields::{checked_fields, parse_list};

#[path = "support/http_service.rs"]
mod http_service;
use http_service::{Body, from_peer, hello};

async fn call<S, B>(service: &S, request: Request<Body>) -> (u16, HeaderMap)
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible> + Clone,
{
    let response = service.clone().oneshot(request).await.unwrap();
    (response.status().as_u16(), response.headers().clone())
}

fn int(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers
        .get(name)
        .map(|v| v.to_str().unwrap().parse().unwrap())
}

/// `(r, t)` of the only item of `RateLimit`.
fn r_t(headers: &HeaderMap) -> (i64, i64) {
    let (_, state) = checked_fields(headers).expect("draft -11 fields");
    let items = parse_list(&state);
    let ints = &items[0].ints;
    (ints[0].1, ints[1].1)
}

/// A denial in the draft -06 and `X-RateLimit-*` styles: the reset field says when the quota is
/// back, so on a 429 it must not be earlier than `Retry-After` (a client that retries at the
/// reset is denied again). A penalty box blocks for 300 s while the window behind it resets in
/// 1 s.
#[tokio::test]
async fn the_reset_field_of_a_denial_is_never_earlier_than_retry_after() {
    for (style, reset) in [
        (HeaderStyle::Draft06, "ratelimit-reset"),
        (HeaderStyle::XRateLimit, "x-ratelimit-reset"),
    ] {
        let clock = ManualClock::new();
        let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
            .clock(clock.clone())
            .build_with_penalty::<IpKey>(
                PenaltyBox::new(2, Duration::from_secs(10), Duration::from_secs(300)).unwrap(),
            )
            .unwrap();
        let service = RateLimitLayer::per_ip(per_ip)
            .header_style(style)
            .layer(hello());
        let peer = "198.51.100.7:9";
        for _ in 0..6 {
            let (status, headers) = call(&service, from_peer(peer)).await;
            if status == 429 {
                let retry_after = int(&headers, "retry-after").unwrap();
                let reset = int(&headers, reset).unwrap();
                assert!(
                    reset >= retry_after,
                    "{style:?}: {reset} {reset} < Retry-After {retry_after}: {headers:?}"
                );
            }
        }
    }
}

/// On an allowed response that leaves less than the whole quota, `t` is at least 1: `t=0` would
/// say the quota is whole again now. Checked for every algorithm the layer takes, at
/// sub-second offsets.
#[tokio::test]
async fn t_is_at_least_one_second_while_the_quota_is_not_whole() {
    async fn exercise<A: Algorithm>(algorithm: A, name: &str) {
        let clock = ManualClock::new();
        clock.set(1_234_567_891);
        let per_ip = Keyed::builder(algorithm)
            .clock(clock.clone())
            .build()
            .unwrap();
        let service = RateLimitLayer::per_ip(per_ip).layer(hello());
        for step in 0..200u64 {
            let (status, headers) = call(&service, from_peer("192.0.2.1:1")).await;
            let (r, t) = r_t(&headers);
            if status == 429 {
                assert!(t >= 1, "{name}: denied with t={t}");
                assert!(int(&headers, "retry-after").unwrap() >= 1);
            } else {
                let (policy, _) = checked_fields(&headers).unwrap();
                let q = parse_list(&policy)[0].ints[0].1;
                assert!(r == q || t >= 1, "{name}: r={r} of {q} with t={t}");
            }
            clock.advance(Duration::from_nanos(137_000_000 + step * 7_919_999));
        }
    }
    let rate = Rate::new(3, Duration::from_secs(10));
    exercise(
        FixedWindow::new(3, Duration::from_secs(10)).unwrap(),
        "fixed",
    )
    .await;
    exercise(
        FixedWindow::aligned(3, Duration::from_secs(10)).unwrap(),
        "aligned",
    )
    .await;
    exercise(
        PackedSlidingWindow::new(3, Duration::from_secs(10), 5).unwrap(),
        "sliding",
    )
    .await;
    exercise(TokenBucket::new(rate, 3).unwrap(), "token").await;
    exercise(Gcra::new(rate, 3).unwrap(), "gcra").await;
    exercise(LeakyBucket::new(rate, 3).unwrap(), "leaky").await;
}

/// A limit lowered below the layer's cost per request: the documented answer is a bare 500
/// (the request can never be granted), not a 429 that sends the client back forever.
#[tokio::test]
async fn a_limit_lowered_below_the_cost_is_a_500_for_every_algorithm() {
    async fn exercise<A: Algorithm>(algorithm: A, name: &str) {
        let clock = ManualClock::new();
        let per_ip = Keyed::builder(algorithm)
            .clock(clock.clone())
            .build()
            .unwrap();
        let layer = RateLimitLayer::per_ip(per_ip)
            .permits_per_request(4)
            .unwrap();
        let limiter = std::sync::Arc::clone(layer.limiter());
        let service = layer.layer(hello());
        assert_eq!(
            call(&service, from_peer("192.0.2.1:1")).await.0,
            200,
            "{name}"
        );
        limiter.set_limit(2).unwrap();
        for peer in ["192.0.2.1:1", "192.0.2.2:1"] {
            let (status, headers) = call(&service, from_peer(peer)).await;
            assert_eq!(status, 500, "{name} {peer}: {headers:?}");
        }
    }
    exercise(
        FixedWindow::new(8, Duration::from_secs(10)).unwrap(),
        "fixed",
    )
    .await;
    exercise(
        PackedSlidingWindow::new(8, Duration::from_secs(10), 5).unwrap(),
        "sliding",
    )
    .await;
    let rate = Rate::new(8, Duration::from_secs(10));
    exercise(TokenBucket::new(rate, 8).unwrap(), "token").await;
    exercise(Gcra::new(rate, 8).unwrap(), "gcra").await;
    exercise(LeakyBucket::new(rate, 8).unwrap(), "leaky").await;
}

/// The layer over a Redis that cannot be reached (nothing listens on port 1): each failure
/// policy decides, the client never sees a panic or a hang, and the fields stay valid.
#[cfg(feature = "redis")]
mod redis_down {
    use super::*;
    use floodgate::backend::FailurePolicy;
    use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};

    async fn layer_over_dead_redis(
        policy: FailurePolicy,
        style: HeaderStyle,
        permits: u32,
    ) -> impl Service<Request<Body>, Response = Response<impl Sized>, Error = Infallible> + Clone
    {
        let config = RedisConfig::single("redis://127.0.0.1:1")
            .lazy()
            .timeout(Duration::from_millis(200));
        let backend = RedisBackend::connect(config).await.unwrap();
        let window = FixedWindow::new(10, Duration::from_secs(60)).unwrap();
        let limiter = RedisLimiter::new(&backend, "per-ip", window, policy).unwrap();
        RateLimitLayer::per_ip(limiter)
            .permits_per_request::<IpKey>(permits)
            .unwrap()
            .header_style(style)
            .layer(hello())
    }

    #[tokio::test]
    async fn fail_open_allows_and_fail_closed_denies_with_valid_fields() {
        let open = layer_over_dead_redis(FailurePolicy::FailOpen, HeaderStyle::Draft11, 1).await;
        for _ in 0..3 {
            let (status, headers) = call(&open, from_peer("192.0.2.1:1")).await;
            assert_eq!(status, 200, "{headers:?}");
            let (_, state) = checked_fields(&headers).unwrap();
            // Redis's state is unknown: no reset time is claimed (not `t=0`, "whole again now").
            assert_eq!(state, r#""default";r=9"#);
        }
        let closed =
            layer_over_dead_redis(FailurePolicy::FailClosed, HeaderStyle::Draft11, 1).await;
        for _ in 0..3 {
            let (status, headers) = call(&closed, from_peer("192.0.2.1:1")).await;
            assert_eq!(status, 429, "{headers:?}");
            let (r, t) = r_t(&headers);
            assert_eq!(r, 0);
            assert!(t >= 1 && int(&headers, "retry-after").unwrap() >= t as u64);
        }
    }

    /// Fail closed, in the draft -06 style: a 429 whose `RateLimit-Reset` is 0 tells the client
    /// its quota is back now, while `Retry-After` says 1.
    #[tokio::test]
    async fn fail_closed_draft06_reset_is_not_earlier_than_retry_after() {
        let closed =
            layer_over_dead_redis(FailurePolicy::FailClosed, HeaderStyle::Draft06, 1).await;
        let (status, headers) = call(&closed, from_peer("192.0.2.1:1")).await;
        assert_eq!(status, 429, "{headers:?}");
        let retry_after = int(&headers, "retry-after").unwrap();
        let reset = int(&headers, "ratelimit-reset").unwrap();
        assert!(
            reset >= retry_after,
            "RateLimit-Reset {reset} < Retry-After {retry_after}"
        );
    }
}

/// The application's own policies, on two field lines (RFC 9110 §5.3: the same as one line
/// joined by commas): the layer adds its item and keeps both of the application's.
#[tokio::test]
async fn the_applications_items_on_several_lines_are_all_kept() {
    let app = tower::service_fn(|_request: Request<Body>| async {
        let mut response = Response::new(Full::new(Bytes::from_static(b"hello")));
        let headers = response.headers_mut();
        for (policy, state) in [
            (r#""app-a";q=5"#, r#""app-a";r=4;t=1"#),
            (r#""app-b";q=7"#, r#""app-b";r=6;t=1"#),
        ] {
            headers.append("ratelimit-policy", policy.parse().unwrap());
            headers.append("ratelimit", state.parse().unwrap());
        }
        Ok::<_, Infallible>(response)
    });
    let per_ip = Keyed::builder(FixedWindow::new(3, Duration::from_secs(10)).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let service = RateLimitLayer::per_ip(per_ip).layer(app);
    let (status, headers) = call(&service, from_peer("192.0.2.1:1")).await;
    assert_eq!(status, 200);
    let (policy, state) = checked_fields(&headers).unwrap();
    assert_eq!(policy, r#""app-a";q=5, "app-b";q=7, "default";q=3"#);
    assert_eq!(
        state,
        r#""app-a";r=4;t=1, "app-b";r=6;t=1, "default";r=2;t=10"#
    );
}

/// A handler that panics (in its future): the task unwinds, and the in-flight permit it held
/// comes back with it.
#[tokio::test]
async fn a_panicking_handler_gives_its_in_flight_permit_back() {
    use floodgate::concurrency::InFlight;
    use floodgate::middleware::InFlightLayer;
    let panics = tower::service_fn(|request: Request<Body>| async move {
        if request.uri().path() == "/panic" {
            panic!("handler panic (expected by the test)");
        }
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
    });
    let layer = InFlightLayer::global(InFlight::new(1).unwrap());
    let limit = std::sync::Arc::clone(layer.limiter());
    let service = layer.layer(panics);
    let mut request = Request::new(Body::default());
    *request.uri_mut() = "/panic".parse().unwrap();
    let task = tokio::spawn(service.clone().oneshot(request));
    assert!(task.await.unwrap_err().is_panic());
    assert_eq!(limit.available(), 1);
    let response = service.clone().oneshot(Request::new(Body::default())).await;
    assert_eq!(response.unwrap().status(), 200);
}
