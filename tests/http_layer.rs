//! The tower layer in-process (feature `tower`): exact header fields (draft -11, checked with a
//! structured-field parser; the other styles), problem bodies, key choice (trusted proxies),
//! missing keys, filters, stacked layers, shaping.
//!
//! The inner service is a plain `tower::service_fn` over `http_body_util::Full<Bytes>` (no axum):
//! the layer is generic over http bodies. Limiters run on a `ManualClock`, or for shaping on a
//! `TokioClock` under tokio's paused time, so every value is exact.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use floodgate::middleware::{
    ClientIp, Denial, DenialBody, HeaderStyle, KeyFn, LayerSettings, MissingKey, Policy,
    ProxyHeader, RateLimitLayer,
};
use floodgate::{
    FixedWindow, Gcra, IpKey, IpKeyer, Keyed, LeakyBucket, ManualClock, PackedSlidingWindow,
    PenaltyBox, Rate, TokenBucket, TokioClock,
};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

#[path = "support/ratelimit_fields.rs"]
mod ratelimit_fields;
use ratelimit_fields::{checked_fields, parse_list};

#[path = "support/http_service.rs"]
mod http_service;
use http_service::{Body, fixed_window, from_peer, hello};

/// The header fields a test checks: `RateLimit-Policy`, `RateLimit` (both checked by the
/// structured-field parser first) and `Retry-After`.
#[derive(Debug, PartialEq, Eq)]
struct Fields {
    policy: Option<String>,
    state: Option<String>,
    retry_after: Option<String>,
}

fn fields_of(headers: &http::HeaderMap) -> Fields {
    let (policy, state) = checked_fields(headers).unzip();
    Fields {
        policy,
        state,
        retry_after: headers
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned()),
    }
}

/// Expected fields: the policy line, the state line, and `Retry-After`.
fn f(policy: &str, state: &str, retry_after: Option<u64>) -> Fields {
    Fields {
        policy: Some(policy.to_owned()),
        state: Some(state.to_owned()),
        retry_after: retry_after.map(|r| r.to_string()),
    }
}

const NONE: Fields = Fields {
    policy: None,
    state: None,
    retry_after: None,
};

/// The problem+json body of a denial under `policy`.
fn problem(policy: &str) -> String {
    format!(
        "{{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\
         \"title\":\"Request cannot be satisfied as assigned quota has been exceeded\",\
         \"status\":429,\"violated-policies\":[\"{policy}\"]}}"
    )
}

/// Status, the fields, and the body.
async fn answer<S, B>(service: &S, request: Request<Body>) -> (u16, Fields, String)
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible> + Clone,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let (status, headers, body) = full_answer(service, request).await;
    (status, fields_of(&headers), body)
}

/// Status, all headers, and the body.
async fn full_answer<S, B>(service: &S, request: Request<Body>) -> (u16, http::HeaderMap, String)
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible> + Clone,
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let response = service.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8(body.to_vec()).unwrap())
}

fn token_bucket(clock: &ManualClock) -> Keyed<IpKey, TokenBucket, ManualClock> {
    // 2 permits, one more every 1.5 s.
    Keyed::builder(TokenBucket::new(Rate::new(2, Duration::from_secs(3)), 2).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap()
}

const TB_POLICY: &str = r#""default";q=2"#;

#[tokio::test]
async fn headers_round_up_and_retry_after_is_exact() {
    let clock = ManualClock::new();
    let service = RateLimitLayer::per_ip(token_bucket(&clock)).layer(hello());
    let peer = "192.0.2.1:1000";
    // t: full again after 1.5 s per permit used, rounded up.
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (
            200,
            f(TB_POLICY, r#""default";r=1;t=2"#, None),
            "hello".into()
        )
    );
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (
            200,
            f(TB_POLICY, r#""default";r=0;t=3"#, None),
            "hello".into()
        )
    );
    // Denied: the next permit in 1.5 s, Retry-After 2 and t the same (never later than it).
    let (status, headers, body) = full_answer(&service, from_peer(peer)).await;
    assert_eq!(status, 429);
    assert_eq!(
        fields_of(&headers),
        f(TB_POLICY, r#""default";r=0;t=2"#, Some(2))
    );
    assert_eq!(headers["content-type"], "application/problem+json");
    assert_eq!(body, problem("default"));
    clock.advance(Duration::from_millis(1_499));
    // 1 ms left: Retry-After never says 0.
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (
            429,
            f(TB_POLICY, r#""default";r=0;t=1"#, Some(1)),
            problem("default")
        )
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (
            200,
            f(TB_POLICY, r#""default";r=0;t=3"#, None),
            "hello".into()
        )
    );
    // Another IPv4 address is another client.
    assert_eq!(answer(&service, from_peer("192.0.2.2:1000")).await.0, 200);
}

#[tokio::test]
async fn ipv6_clients_share_their_56() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::per_ip(token_bucket(&clock));
    let per_ip = layer.limiter().clone();
    let service = layer.layer(hello());
    assert_eq!(answer(&service, from_peer("[2001:db8::1]:1")).await.0, 200);
    assert_eq!(
        answer(&service, from_peer("[2001:db8:0:ff::2]:1")).await.0,
        200
    );
    assert_eq!(answer(&service, from_peer("[2001:db8::3]:1")).await.0, 429);
    assert_eq!(
        answer(&service, from_peer("[2001:db8:0:100::1]:1")).await.0,
        200
    );
    assert_eq!(per_ip.len(), 2);
    // An IpAddr extension works as well as a SocketAddr.
    let mut request = Request::new(Body::default());
    request
        .extensions_mut()
        .insert("2001:db8::9".parse::<IpAddr>().unwrap());
    assert_eq!(answer(&service, request).await.0, 429);
    // Another prefix length on request.
    let by_64 = ClientIp::new(IpKeyer::new().with_ipv6_prefix(64).unwrap());
    let service = RateLimitLayer::with_key(token_bucket(&clock), by_64).layer(hello());
    for peer in ["[2001:db8::1]:1", "[2001:db8::2]:1"] {
        assert_eq!(answer(&service, from_peer(peer)).await.0, 200);
    }
    assert_eq!(answer(&service, from_peer("[2001:db8::3]:1")).await.0, 429);
    assert_eq!(
        answer(&service, from_peer("[2001:db8:0:1::1]:1")).await.0,
        200
    );
}

#[tokio::test]
async fn headers_on_allowed_responses_can_be_turned_off() {
    let clock = ManualClock::new();
    let service = RateLimitLayer::per_ip(token_bucket(&clock))
        .headers_on_allowed(false)
        .layer(hello());
    let peer = "192.0.2.1:1000";
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (200, NONE, "hello".into())
    );
    assert_eq!(answer(&service, from_peer(peer)).await.1, NONE);
    assert_eq!(
        answer(&service, from_peer(peer)).await.1,
        f(TB_POLICY, r#""default";r=0;t=2"#, Some(2))
    );
}

#[tokio::test]
async fn a_request_without_a_key_is_a_bare_500_or_passes_as_configured() {
    let clock = ManualClock::new();
    let strict = RateLimitLayer::per_ip(token_bucket(&clock)).layer(hello());
    for _ in 0..2 {
        // No setup hint for the client (it goes to the server's stderr, once).
        let (status, headers, body) = full_answer(&strict, Request::new(Body::default())).await;
        assert_eq!((status, fields_of(&headers)), (500, NONE));
        assert_eq!(body, "Internal Server Error\n");
        assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    }
    let lenient = RateLimitLayer::per_ip(token_bucket(&clock))
        .on_missing_key(MissingKey::Allow)
        .layer(hello());
    for _ in 0..3 {
        assert_eq!(
            answer(&lenient, Request::new(Body::default())).await,
            (200, NONE, "hello".into())
        );
    }
}

#[tokio::test]
async fn a_closure_picks_the_key_and_requests_can_cost_more() {
    let clock = ManualClock::new();
    let per_user: Keyed<String, _, _> =
        Keyed::builder(FixedWindow::new(5, Duration::from_secs(10)).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap();
    let layer = RateLimitLayer::with_key(
        per_user,
        KeyFn(|request: &Request<Body>| {
            request
                .headers()
                .get("x-user")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        }),
    )
    .policy(
        Policy::new("per-user")
            .unwrap()
            .window(Duration::from_secs(10))
            .unwrap(),
    );
    assert!(layer.clone().permits_per_request(0).is_err());
    assert!(layer.clone().permits_per_request(6).is_err());
    let layer = layer.permits_per_request(2).unwrap();
    let per_user = layer.limiter().clone();
    let service = layer.layer(hello());
    let as_user = |user: &str| {
        Request::builder()
            .header("x-user", user)
            .body(Body::default())
            .unwrap()
    };
    // Requests cost 2 permits of 5: the fields count whole requests (the draft's default unit).
    let policy = r#""per-user";q=2;w=10"#;
    assert_eq!(
        answer(&service, as_user("ann")).await.1,
        f(policy, r#""per-user";r=1;t=10"#, None)
    );
    assert_eq!(
        answer(&service, as_user("ann")).await.1,
        f(policy, r#""per-user";r=0;t=10"#, None)
    );
    // One permit left, the request costs two: no request left, denied until the window ends.
    let (status, fields, body) = answer(&service, as_user("ann")).await;
    assert_eq!(
        (status, fields),
        (429, f(policy, r#""per-user";r=0;t=10"#, Some(10)))
    );
    assert_eq!(body, problem("per-user"));
    assert_eq!(
        answer(&service, as_user("bob")).await.1,
        f(policy, r#""per-user";r=1;t=10"#, None)
    );
    // The limit lowered below the cost of a request: it can never be granted, a bare 500.
    per_user.set_limit(1).unwrap();
    assert_eq!(
        answer(&service, as_user("cy")).await,
        (500, NONE, "Internal Server Error\n".into())
    );
}

#[tokio::test]
async fn a_penalty_box_blocks_a_hammering_client() {
    let clock = ManualClock::new();
    let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
        .clock(clock.clone())
        .build_with_penalty::<IpKey>(
            PenaltyBox::new(2, Duration::from_secs(10), Duration::from_secs(300)).unwrap(),
        )
        .unwrap();
    let service = RateLimitLayer::per_ip(per_ip).layer(hello());
    let peer = "198.51.100.7:9";
    let policy = r#""default";q=1"#;
    assert_eq!(answer(&service, from_peer(peer)).await.0, 200);
    assert_eq!(
        answer(&service, from_peer(peer)).await.1,
        f(policy, r#""default";r=0;t=1"#, Some(1))
    );
    // Second strike: blocked for 5 minutes.
    assert_eq!(
        answer(&service, from_peer(peer)).await.1,
        f(policy, r#""default";r=0;t=300"#, Some(300))
    );
    clock.advance(Duration::from_secs(10));
    assert_eq!(
        answer(&service, from_peer(peer)).await.1,
        f(policy, r#""default";r=0;t=290"#, Some(290))
    );
}

const GCRA_POLICY: &str = r#""default";q=1"#;

fn gcra_on_tokio() -> Keyed<IpKey, Gcra, TokioClock> {
    // One request per 100 ms, no burst.
    Keyed::builder(Gcra::new(Rate::per_second(10), 1).unwrap())
        .clock(TokioClock::starting_at(0))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn shaping_delays_a_request_whose_wait_fits_and_rejects_the_rest() {
    let service = RateLimitLayer::per_ip(gcra_on_tokio())
        .shape(Duration::from_millis(100), 10)
        .layer(hello());
    let peer = "192.0.2.1:1";
    let start = Instant::now();
    assert_eq!(answer(&service, from_peer(peer)).await.0, 200);
    assert_eq!(start.elapsed(), Duration::ZERO);
    // Waits the 100 ms, then is served.
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (
            200,
            f(GCRA_POLICY, r#""default";r=0;t=1"#, None),
            "hello".into()
        )
    );
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    // Two at once: both are told 100 ms and wait; at 100 ms one wins and is served, the other
    // would need another 100 ms (200 in all > 100): 429. Which one wins is up to the poll order.
    let (a, b) = tokio::join!(
        answer(&service, from_peer(peer)),
        answer(&service, from_peer(peer))
    );
    let (served, rejected) = if a.0 == 200 { (a, b) } else { (b, a) };
    assert_eq!((served.0, rejected.0), (200, 429));
    assert_eq!(rejected.1, f(GCRA_POLICY, r#""default";r=0;t=1"#, Some(1)));
    assert_eq!(start.elapsed(), Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn shaping_is_bounded_by_the_delay_and_the_number_waiting() {
    let short = RateLimitLayer::per_ip(gcra_on_tokio())
        .shape(Duration::from_millis(99), 10)
        .layer(hello());
    let peer = "192.0.2.1:1";
    let start = Instant::now();
    assert_eq!(answer(&short, from_peer(peer)).await.0, 200);
    assert_eq!(answer(&short, from_peer(peer)).await.0, 429); // 100 ms > 99 ms: no wait
    assert_eq!(start.elapsed(), Duration::ZERO);

    let one_waiting = RateLimitLayer::per_ip(gcra_on_tokio())
        .shape(Duration::from_secs(1), 1)
        .layer(hello());
    assert_eq!(answer(&one_waiting, from_peer(peer)).await.0, 200);
    let waiting = tokio::spawn({
        let service = one_waiting.clone();
        async move { answer(&service, from_peer(peer)).await.0 }
    });
    tokio::task::yield_now().await; // it is now waiting, holding the one place
    assert_eq!(answer(&one_waiting, from_peer(peer)).await.0, 429); // no place: at once
    assert_eq!(start.elapsed(), Duration::ZERO);
    // A waiting request that is dropped frees its place and takes no permit.
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(answer(&one_waiting, from_peer(peer)).await.0, 200);
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    // The place is free again: this one waits its 100 ms.
    assert_eq!(answer(&one_waiting, from_peer(peer)).await.0, 200);
    assert_eq!(start.elapsed(), Duration::from_millis(200));
}

#[tokio::test(start_paused = true)]
async fn a_shaped_request_frees_its_waiting_place_once_it_is_served() {
    // The inner service takes 10 s. One place to wait: request 2 waits 100 ms and is then being
    // served; request 3 (at 150 ms, needing 50 ms) must find the place free again.
    let slow = tower::service_fn(|_request: Request<Body>| async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"slow"))))
    });
    let service = RateLimitLayer::per_ip(gcra_on_tokio())
        .shape(Duration::from_secs(1), 1)
        .layer(slow);
    let peer = "192.0.2.1:1";
    let spawn = |service: &_| {
        let service = Clone::clone(service);
        tokio::spawn(async move { answer(&service, from_peer(peer)).await.0 })
    };
    let first = spawn(&service);
    tokio::task::yield_now().await;
    let second = spawn(&service);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let third = spawn(&service);
    for handle in [first, second, third] {
        assert_eq!(handle.await.unwrap(), 200);
    }
}

fn policy(name: &str, window_secs: u64) -> Policy {
    Policy::new(name)
        .unwrap()
        .window(Duration::from_secs(window_secs))
        .unwrap()
}

#[tokio::test]
async fn stacked_layers_each_add_their_policy_to_the_same_fields() {
    let clock = ManualClock::new();
    let per_second =
        RateLimitLayer::per_ip(fixed_window(2, 1, &clock)).policy(policy("per-second", 1));
    let per_day =
        RateLimitLayer::per_ip(fixed_window(3, 86_400, &clock)).policy(policy("per-day", 86_400));
    // The day's layer is outside: it decides first and writes last.
    let service = per_day.layer(per_second.layer(hello()));
    let peer = "192.0.2.1:1000";
    let both = r#""per-second";q=2;w=1, "per-day";q=3;w=86400"#;
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (
            200,
            f(both, r#""per-second";r=1;t=1, "per-day";r=2;t=86400"#, None),
            "hello".into()
        )
    );
    assert_eq!(
        answer(&service, from_peer(peer)).await.1,
        f(both, r#""per-second";r=0;t=1, "per-day";r=1;t=86400"#, None)
    );
    // The second's limit denies (the day's last permit is taken by the outer layer on the way
    // in); since the day's quota is now spent, Retry-After points at its end, not in 1 s.
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (
            429,
            f(
                both,
                r#""per-second";r=0;t=1, "per-day";r=0;t=86400"#,
                Some(86_400)
            ),
            problem("per-second")
        )
    );
    // A second later the day's limit denies first: only its item.
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (
            429,
            f(
                r#""per-day";q=3;w=86400"#,
                r#""per-day";r=0;t=86399"#,
                Some(86_399)
            ),
            problem("per-day")
        )
    );
}

#[tokio::test]
async fn the_older_header_styles_and_none() {
    let clock = ManualClock::new();
    let peer = "192.0.2.1:1000";
    let names = [
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "x-ratelimit-after",
        "retry-after",
        "ratelimit-policy",
        "ratelimit",
    ];
    let values = |headers: &http::HeaderMap| -> Vec<String> {
        names
            .iter()
            .filter_map(|&name| Some(format!("{name}: {}", headers.get(name)?.to_str().unwrap())))
            .collect()
    };
    let expect = [
        (
            HeaderStyle::Draft06,
            vec![
                "ratelimit-limit: 1",
                "ratelimit-remaining: 0",
                "ratelimit-reset: 60",
            ],
            vec![
                "ratelimit-limit: 1",
                "ratelimit-remaining: 0",
                "ratelimit-reset: 60",
                "retry-after: 60",
            ],
        ),
        (
            HeaderStyle::XRateLimit,
            vec![
                "x-ratelimit-limit: 1",
                "x-ratelimit-remaining: 0",
                "x-ratelimit-reset: 60",
            ],
            vec![
                "x-ratelimit-limit: 1",
                "x-ratelimit-remaining: 0",
                "x-ratelimit-reset: 60",
                "x-ratelimit-after: 60",
                "retry-after: 60",
            ],
        ),
        (HeaderStyle::None, vec![], vec!["retry-after: 60"]),
    ];
    for (style, allowed, denied) in expect {
        let service = RateLimitLayer::per_ip(fixed_window(1, 60, &clock))
            .header_style(style)
            .layer(hello());
        let (status, headers, _) = full_answer(&service, from_peer(peer)).await;
        let allowed: Vec<String> = allowed.into_iter().map(String::from).collect();
        assert_eq!((status, values(&headers)), (200, allowed), "{style:?}");
        let (status, headers, _) = full_answer(&service, from_peer(peer)).await;
        let denied: Vec<String> = denied.into_iter().map(String::from).collect();
        assert_eq!((status, values(&headers)), (429, denied), "{style:?}");
    }
}

#[tokio::test]
async fn a_partition_key_tells_clients_apart_without_showing_the_key() {
    let clock = ManualClock::new();
    let service = RateLimitLayer::per_ip(fixed_window(5, 60, &clock))
        .policy(policy("per-ip", 60).partition_key(true))
        .layer(hello());
    let pk = |headers: &http::HeaderMap| {
        checked_fields(headers).unwrap(); // the same pk in both fields
        let items = parse_list(headers["ratelimit"].to_str().unwrap());
        assert_eq!(items.len(), 1);
        items[0].pk.clone().unwrap()
    };
    let (_, first, _) = full_answer(&service, from_peer("192.0.2.1:1000")).await;
    let (_, same_ip, _) = full_answer(&service, from_peer("192.0.2.1:2000")).await;
    let (_, other_ip, _) = full_answer(&service, from_peer("192.0.2.2:1000")).await;
    assert_eq!(pk(&first).len(), 8);
    assert_eq!(pk(&first), pk(&same_ip));
    assert_ne!(pk(&first), pk(&other_ip));
    let line = first["ratelimit"].to_str().unwrap();
    assert!(
        line.starts_with(r#""per-ip";r=4;t=60;pk=:"#) && line.ends_with("=:"),
        "{line}"
    );
}

#[tokio::test]
async fn denial_bodies_plain_text_and_custom() {
    let clock = ManualClock::new();
    let peer = "192.0.2.1:1000";
    let plain = RateLimitLayer::per_ip(fixed_window(1, 60, &clock))
        .denial_body(DenialBody::PlainText)
        .layer(hello());
    answer(&plain, from_peer(peer)).await;
    let (status, headers, body) = full_answer(&plain, from_peer(peer)).await;
    assert_eq!((status, body.as_str()), (429, "Too Many Requests\n"));
    assert_eq!(headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(
        fields_of(&headers),
        f(r#""default";q=1"#, r#""default";r=0;t=60"#, Some(60))
    );

    let custom = RateLimitLayer::per_ip(fixed_window(1, 60, &clock))
        .policy(policy("per-ip", 60))
        .denial_body(DenialBody::custom(|denial: &Denial<'_>| {
            let text = format!(
                "{} exceeded, back in {} s",
                denial.policy().name(),
                denial.retry_after_seconds()
            );
            let mut response = Response::new(Bytes::from(text));
            *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            response
                .headers_mut()
                .insert("x-app", "mine".parse().unwrap());
            response
        }))
        .layer(hello());
    answer(&custom, from_peer(peer)).await;
    let (status, headers, body) = full_answer(&custom, from_peer(peer)).await;
    assert_eq!(
        (status, body.as_str()),
        (503, "per-ip exceeded, back in 60 s")
    );
    assert_eq!(headers["x-app"], "mine");
    assert_eq!(
        fields_of(&headers),
        f(r#""per-ip";q=1;w=60"#, r#""per-ip";r=0;t=60"#, Some(60))
    );
}

#[tokio::test]
async fn skipped_methods_and_paths_pass_untouched_and_cost_nothing() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::per_ip(fixed_window(1, 60, &clock))
        .skip_method(http::Method::OPTIONS)
        .skip_path(|path| path.starts_with("/health"));
    let per_ip = layer.limiter().clone();
    let service = layer.layer(hello());
    let request = |method: http::Method, path: &str| {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::default())
            .unwrap();
        request
            .extensions_mut()
            .insert("192.0.2.1:1000".parse::<SocketAddr>().unwrap());
        request
    };
    for _ in 0..3 {
        let preflight = request(http::Method::OPTIONS, "/api");
        assert_eq!(
            answer(&service, preflight).await,
            (200, NONE, "hello".into())
        );
        let health = request(http::Method::GET, "/healthz?deep=1");
        assert_eq!(answer(&service, health).await, (200, NONE, "hello".into()));
    }
    assert_eq!(per_ip.len(), 0);
    let get = || request(http::Method::GET, "/api");
    assert_eq!(
        answer(&service, get()).await.1,
        f(r#""default";q=1"#, r#""default";r=0;t=60"#, None)
    );
    assert_eq!(answer(&service, get()).await.0, 429);
    // A POST is not skipped either.
    assert_eq!(
        answer(&service, request(http::Method::POST, "/api"))
            .await
            .0,
        429
    );
}

#[tokio::test]
async fn behind_a_proxy_the_client_is_the_trusted_entry_not_the_first() {
    let clock = ManualClock::new();
    let behind_one = ClientIp::default()
        .behind_proxies(ProxyHeader::XForwardedFor, 1)
        .unwrap();
    let layer = RateLimitLayer::with_key(fixed_window(1, 60, &clock), behind_one);
    let per_ip = layer.limiter().clone();
    let service = layer.layer(hello());
    let via_proxy = |xff: Option<&str>| {
        let mut request = from_peer("10.0.0.1:50000"); // the proxy
        if let Some(xff) = xff {
            request
                .headers_mut()
                .insert("x-forwarded-for", xff.parse().unwrap());
        }
        request
    };
    assert_eq!(
        answer(&service, via_proxy(Some("198.51.100.1"))).await.0,
        200
    );
    // The same client writing its own first entry does not get a fresh quota.
    for spoof in ["1.2.3.4, 198.51.100.1", "5.6.7.8,6.7.8.9 , 198.51.100.1"] {
        assert_eq!(answer(&service, via_proxy(Some(spoof))).await.0, 429);
    }
    // Another client behind the same proxy has its own quota.
    assert_eq!(
        answer(&service, via_proxy(Some("198.51.100.1, 198.51.100.2")))
            .await
            .0,
        200
    );
    // No header: keyed by the peer (the proxy itself).
    assert_eq!(answer(&service, via_proxy(None)).await.0, 200);
    assert_eq!(answer(&service, via_proxy(None)).await.0, 429);
    assert_eq!(per_ip.len(), 3);

    // Two hops of RFC 7239 Forwarded.
    let behind_two = ClientIp::default()
        .behind_proxies(ProxyHeader::Forwarded, 2)
        .unwrap();
    let service = RateLimitLayer::with_key(fixed_window(1, 60, &clock), behind_two).layer(hello());
    let forwarded = |value: &str| {
        let mut request = from_peer("10.0.0.1:50000");
        request
            .headers_mut()
            .insert("forwarded", value.parse().unwrap());
        request
    };
    let client = r#"for="[2001:db8:cafe::17]:4711", for=203.0.113.5;proto=https"#;
    assert_eq!(answer(&service, forwarded(client)).await.0, 200);
    let spoofed = r#"for=192.0.2.99, for="[2001:db8:cafe::18]", for=203.0.113.5"#;
    assert_eq!(answer(&service, forwarded(spoofed)).await.0, 429); // same /56
}

/// Every algorithm a keyed limiter runs, through a stretch of allowed and denied requests: the
/// fields always parse, `r` ≤ `q`, and on a 429 `Retry-After` ≥ `t` (checked_fields) and the
/// request passes once `Retry-After` has elapsed.
#[tokio::test]
async fn retry_after_is_never_earlier_than_t_for_every_algorithm() {
    async fn exercise<A: floodgate::Algorithm>(algorithm: A, name: &str) {
        let clock = ManualClock::new();
        let per_ip = Keyed::builder(algorithm)
            .clock(clock.clone())
            .build()
            .unwrap();
        let service = RateLimitLayer::per_ip(per_ip).layer(hello());
        let peer = "192.0.2.1:1000";
        let mut denials = 0;
        for _ in 0..40 {
            let (status, headers, _) = full_answer(&service, from_peer(peer)).await;
            let (_, state) = checked_fields(&headers).unwrap();
            let t: u64 = state.rsplit("t=").next().unwrap().parse().unwrap();
            if status == 429 {
                denials += 1;
                let retry_after: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
                assert!(
                    retry_after >= t,
                    "{name}: {state}, Retry-After {retry_after}"
                );
                clock.advance(Duration::from_secs(retry_after));
                assert_eq!(
                    full_answer(&service, from_peer(peer)).await.0,
                    200,
                    "{name}: denied after Retry-After"
                );
            } else {
                clock.advance(Duration::from_millis(300));
            }
        }
        assert!(denials > 3, "{name}: only {denials} denials");
    }
    let rate = Rate::new(3, Duration::from_secs(10));
    exercise(
        FixedWindow::new(3, Duration::from_secs(10)).unwrap(),
        "fixed",
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

/// axum, in-process: each route with its own limiter and policy, one router-wide layer over
/// both; the fields of a response name the route's policy, then the router's.
#[tokio::test]
async fn per_route_layers_with_their_own_policies() {
    use axum::routing::get;
    let clock = ManualClock::new();
    let search = RateLimitLayer::per_ip(fixed_window(1, 60, &clock)).policy(policy("search", 60));
    let home = RateLimitLayer::per_ip(fixed_window(5, 60, &clock)).policy(policy("home", 60));
    let global =
        RateLimitLayer::per_ip(fixed_window(100, 3_600, &clock)).policy(policy("all", 3_600));
    let app = axum::Router::new()
        .route("/search", get(|| async { "found" }).layer(search))
        .route("/", get(|| async { "home" }).layer(home))
        .layer(global);
    let get = |path: &str| {
        let mut request = Request::builder()
            .uri(path)
            .body(axum::body::Body::empty())
            .unwrap();
        request
            .extensions_mut()
            .insert("192.0.2.1:1000".parse::<SocketAddr>().unwrap());
        request
    };
    let fields = |path: &str| {
        let app = app.clone();
        let request = get(path);
        async move {
            let response = app.oneshot(request).await.unwrap();
            (response.status().as_u16(), fields_of(response.headers()))
        }
    };
    assert_eq!(
        fields("/search").await,
        (
            200,
            f(
                r#""search";q=1;w=60, "all";q=100;w=3600"#,
                r#""search";r=0;t=60, "all";r=99;t=3600"#,
                None
            )
        )
    );
    assert_eq!(fields("/search").await.0, 429);
    assert_eq!(
        fields("/").await,
        (
            200,
            f(
                r#""home";q=5;w=60, "all";q=100;w=3600"#,
                r#""home";r=4;t=60, "all";r=97;t=3600"#,
                None
            )
        )
    );
}

/// An application (or an inner layer) that answers `503` with `Retry-After` given as an
/// HTTP-date (RFC 9110 allows either form): when the outer layer has no permits left for the next
/// request, it raises `Retry-After` to its own `t` as it does for delta-seconds; a date later
/// than its `t` is left as the application wrote it.
#[tokio::test]
async fn an_inner_retry_after_given_as_a_date_is_raised_to_the_outer_t_too() {
    let unavailable_until = |date: &'static str| {
        tower::service_fn(move |_request: Request<Body>| async move {
            let mut response = Response::new(Full::new(Bytes::from_static(b"later")));
            *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            response
                .headers_mut()
                .insert("retry-after", http::HeaderValue::from_static(date));
            Ok::<_, Infallible>(response)
        })
    };
    // The three forms of an HTTP-date, each long past, and a bare value no client can read.
    for past in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
        "soon",
    ] {
        let clock = ManualClock::new();
        let layer = RateLimitLayer::per_ip(fixed_window(1, 600, &clock)).policy(policy("p", 600));
        let service = layer.layer(unavailable_until(past));
        let (status, fields, _) = answer(&service, from_peer("192.0.2.1:1000")).await;
        assert_eq!(status, 503, "{past}");
        // This layer's quota is spent for 600 s: retrying earlier is pointless.
        assert_eq!(
            fields,
            f(r#""p";q=1;w=600"#, r#""p";r=0;t=600"#, Some(600)),
            "{past}"
        );
    }
    // A date after this layer's t stands, as written.
    let far = "Fri, 31 Dec 9999 23:59:59 GMT";
    let clock = ManualClock::new();
    let layer = RateLimitLayer::per_ip(fixed_window(1, 600, &clock)).policy(policy("p", 600));
    let (status, headers, _) = full_answer(
        &layer.layer(unavailable_until(far)),
        from_peer("192.0.2.1:1000"),
    )
    .await;
    assert_eq!(
        (status, headers["retry-after"].to_str().unwrap()),
        (503, far)
    );
}
