//! Edge cases of the HTTP layers (feature `tower`): stacked layers raising an inner denial's
//! waits, fields off on allowed responses, in-flight permits on errors, axum's per-connection
//! clones. Limiters run on a `ManualClock`: every value is exact.

use std::time::Duration;

use floodgate::middleware::{HeaderStyle, LayerSettings, Policy, RateLimitLayer};
use floodgate::{FixedWindow, Keyed, ManualClock};
use tower::{Layer, ServiceExt};

#[path = "support/ratelimit_fields.rs"]
mod ratelimit_fields;
use ratelimit_fields::{checked_fields, parse_list};

#[path = "support/http_client.rs"]
mod http_client;

#[path = "support/http_service.rs"]
mod http_service;
use http_service::{fixed_window, from_peer, hello};

/// `X-RateLimit-After` is the wait of a 429 in seconds, as `Retry-After` (tower_governor's
/// clients read it instead). When an inner layer denies and the outer one, which allowed, has no
/// permits left, the outer raises `Retry-After` to its own reset: `X-RateLimit-After` must say
/// the same, or a client that honours it comes back in 1 s and is refused by the outer limit.
#[tokio::test]
async fn x_ratelimit_after_is_raised_with_retry_after_by_an_outer_layer() {
    let clock = ManualClock::new();
    let per_second =
        RateLimitLayer::per_ip(fixed_window(1, 1, &clock)).header_style(HeaderStyle::XRateLimit);
    let per_day = RateLimitLayer::per_ip(fixed_window(2, 86_400, &clock))
        .header_style(HeaderStyle::XRateLimit);
    let service = per_day.layer(per_second.layer(hello()));
    let peer = "192.0.2.1:1000";
    let first = service.clone().oneshot(from_peer(peer)).await.unwrap();
    assert_eq!(first.status(), 200);
    // The second's limit denies; the day's last permit went on the way in.
    let denied = service.clone().oneshot(from_peer(peer)).await.unwrap();
    assert_eq!(denied.status(), 429);
    let header = |name: &str| denied.headers()[name].to_str().unwrap().to_owned();
    assert_eq!(header("retry-after"), "86400");
    assert_eq!(header("x-ratelimit-reset"), "86400");
    assert_eq!(header("x-ratelimit-remaining"), "0");
    assert_eq!(header("x-ratelimit-after"), header("retry-after"));
}

/// The module docs of `floodgate::middleware` said a client's first response under
/// `FixedWindow::new(100, 60 s)` carries `RateLimit: "per-ip";r=99;t=60`. Its window opens at the
/// first 2^19 ns unit at or after the request (never earlier), so unless the request lands on
/// such a unit, the window ends a fraction of a millisecond more than 60 s later and `t`, rounded
/// up, is 61 (as the guide and the README say).
#[tokio::test]
async fn a_client_s_first_fixed_window_response_says_t_61() {
    let clock = ManualClock::new();
    clock.set(1_000_000_000); // 1 s: not a multiple of 2^19 ns, as almost every real reading
    let policy = Policy::new("per-ip")
        .unwrap()
        .window(Duration::from_secs(60))
        .unwrap();
    let service = RateLimitLayer::per_ip(fixed_window(100, 60, &clock))
        .policy(policy)
        .layer(hello());
    let first = service.oneshot(from_peer("192.0.2.1:1000")).await.unwrap();
    assert_eq!(
        checked_fields(first.headers()),
        Some((
            r#""per-ip";q=100;w=60"#.to_owned(),
            r#""per-ip";r=99;t=61"#.to_owned()
        ))
    );
}

/// `Policy::partition_key` said the same key gives the same `pk` "on every server built with the
/// same floodgate version". That holds only for keys whose `Hash` is a function of the key alone
/// (a `HashedKey` is seeded per process: the same API key got `pk=:HhtJ0lIPzKk=:` and
/// `pk=:q+BflZoHkm4=:` in two runs of one test binary); the docs now say so. This pins the
/// derivation they give for an `IpKey`, which is the same in every process: FNV-1a 64 over the
/// bytes its `Hash` writes (the masked address as two native-endian `u64`s, IPv4 as
/// `::ffff:a.b.c.d`), sent big-endian.
#[tokio::test]
async fn an_ip_key_s_partition_key_is_fnv1a_of_its_hash_bytes_in_every_process() {
    let clock = ManualClock::new();
    let policy = Policy::new("per-ip").unwrap().partition_key(true);
    let service = RateLimitLayer::per_ip(fixed_window(5, 60, &clock))
        .policy(policy)
        .layer(hello());
    let response = service.oneshot(from_peer("192.0.2.1:1000")).await.unwrap();
    let items = parse_list(response.headers()["ratelimit"].to_str().unwrap());
    let (high, low): (u64, u64) = (0, 0xffff_c000_0201);
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in [high.to_ne_bytes(), low.to_ne_bytes()].concat() {
        hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
    }
    assert_eq!(items[0].pk.as_deref(), Some(&hash.to_be_bytes()[..]));
}

/// An outer layer with `headers_on_allowed(false)` still knows, when an inner layer denies, that
/// it has no permits left for the next request: `Retry-After` must point at its reset (as with
/// the fields on), not at the inner wait, or the client comes back in 1 s to a 429 for a day.
/// Turning the fields off on allowed responses is about the fields, not about `Retry-After`.
#[tokio::test]
async fn an_outer_layer_without_fields_on_allowed_still_raises_an_inner_retry_after() {
    let clock = ManualClock::new();
    let per_second = RateLimitLayer::per_ip(fixed_window(1, 1, &clock));
    let per_day = RateLimitLayer::per_ip(fixed_window(2, 86_400, &clock)).headers_on_allowed(false);
    let service = per_day.layer(per_second.layer(hello()));
    let peer = "192.0.2.1:1000";
    let first = service.clone().oneshot(from_peer(peer)).await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["ratelimit"], r#""default";r=0;t=1"#); // the inner's only
    let denied = service.clone().oneshot(from_peer(peer)).await.unwrap();
    assert_eq!(denied.status(), 429);
    assert_eq!(denied.headers()["retry-after"], "86400");
    // The outer adds no item: its fields stay off on a response it allowed.
    assert_eq!(denied.headers()["ratelimit"], r#""default";r=0;t=1"#);
    // With permits left for the next request, the inner wait stands.
    clock.advance(Duration::from_secs(86_400));
    let service = RateLimitLayer::per_ip(fixed_window(3, 86_400, &clock))
        .headers_on_allowed(false)
        .layer(RateLimitLayer::per_ip(fixed_window(1, 1, &clock)).layer(hello()));
    assert_eq!(
        service
            .clone()
            .oneshot(from_peer(peer))
            .await
            .unwrap()
            .status(),
        200
    );
    let denied = service.oneshot(from_peer(peer)).await.unwrap();
    assert_eq!(denied.status(), 429);
    assert_eq!(denied.headers()["retry-after"], "1");
}

/// The in-flight layer's docs: "if the inner service fails ... the permit is given back then".
/// It was given back only when the response future was dropped: a caller that keeps the
/// completed future (a `select!` arm, a join set that outlives it) held the permit on.
#[tokio::test]
async fn a_failed_handler_s_in_flight_permit_comes_back_when_its_error_is_returned() {
    use floodgate::concurrency::InFlight;
    use floodgate::middleware::InFlightLayer;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use tower::Service;
    let failing = tower::service_fn(|_request: http::Request<http_service::Body>| async {
        Err::<http::Response<http_service::Body>, &'static str>("handler failed")
    });
    let mut service = InFlightLayer::global(InFlight::new(1).unwrap()).layer(failing);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(service.poll_ready(&mut cx).is_ready());
    let mut future = Box::pin(service.call(http::Request::default()));
    assert_eq!(service.limiter().in_flight(), 1);
    let Poll::Ready(result) = future.as_mut().poll(&mut cx) else {
        panic!("the handler fails at once");
    };
    assert_eq!(result.unwrap_err(), "handler failed");
    assert_eq!(
        service.limiter().in_flight(),
        0,
        "held by a finished future"
    );
    drop(future);
}

/// The brief's trap (tower's own `RateLimit` is per service clone, so under axum, which clones
/// the router for each connection, 5 a second let 1,500 through): checked and found sound. Six
/// requests from one IP, each on a new connection (a new pool, so a new router clone on the
/// server), get exactly the limit of 3 through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_limit_holds_across_axum_s_per_connection_clones() {
    use axum::{Router, routing::get};
    use http_client::HttpClient;
    let clock = ManualClock::new();
    let layer = RateLimitLayer::per_ip(fixed_window(3, 60, &clock));
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer);
    let (server_addr, server) = http_client::serve(app).await;
    let mut answers = Vec::new();
    for _ in 0..6 {
        let client = HttpClient::from("127.0.0.1".parse().unwrap(), server_addr);
        let answer = client.get().await;
        answers.push((answer.status.as_u16(), answer.body.starts_with("hello")));
    }
    let ok = (200, true);
    let denied = (429, false);
    assert_eq!(answers, [ok, ok, ok, denied, denied, denied]);
    server.abort();
}

/// `shape` with a zero `max_delay` or a `max_waiting` of 0 is shaping off in effect: a denied
/// request gets its 429 at once (tokio's paused clock does not move), as `shape`'s docs say.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn shaping_with_no_delay_or_no_place_rejects_at_once() {
    for (max_delay, max_waiting) in [(Duration::ZERO, 10), (Duration::from_secs(2), 0)] {
        let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
            .clock(floodgate::TokioClock::starting_at(0))
            .build()
            .unwrap();
        let service = RateLimitLayer::per_ip(per_ip)
            .shape(max_delay, max_waiting)
            .layer(hello());
        let peer = "192.0.2.1:1000";
        let start = tokio::time::Instant::now();
        let first = service.clone().oneshot(from_peer(peer)).await.unwrap();
        assert_eq!(first.status(), 200);
        let denied = service.clone().oneshot(from_peer(peer)).await.unwrap();
        assert_eq!(denied.status(), 429, "{max_delay:?}, {max_waiting}");
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "{max_delay:?}, {max_waiting}"
        );
    }
}

/// `InFlightLayer::queue(0)` is the layer without a queue, as its docs say: with the one permit
/// held, the next request is rejected at once (503), not left waiting.
#[tokio::test]
async fn an_in_flight_queue_of_no_place_rejects_at_once() {
    use floodgate::concurrency::InFlight;
    use floodgate::middleware::InFlightLayer;
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let service = InFlightLayer::global(InFlight::new(1).unwrap())
        .queue(0)
        .layer(hello());
    let first = service
        .clone()
        .oneshot(http::Request::new(Default::default()))
        .await
        .unwrap(); // its body holds the permit
    let mut second = Box::pin(
        service
            .clone()
            .oneshot(http::Request::new(Default::default())),
    );
    match second
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(response) => assert_eq!(response.unwrap().status(), 503),
        Poll::Pending => panic!("queue(0) left a request waiting"),
    }
    drop(first);
}
