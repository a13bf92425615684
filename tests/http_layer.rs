//! The tower layer in-process (feature `tower`): exact headers, key choice, missing keys, shaping.
//!
//! The inner service is a plain `tower::service_fn` over `http_body_util::Full<Bytes>` (no axum):
//! the layer is generic over http bodies. Limiters run on a `ManualClock`, or for shaping on a
//! `TokioClock` under tokio's paused time, so every value is exact.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use floodgate::middleware::{KeyFn, MissingKey, RateLimitLayer};
use floodgate::{
    FixedWindow, Gcra, IpKey, Keyed, ManualClock, PenaltyBox, Rate, TokenBucket, TokioClock,
};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

type Body = Full<Bytes>;

fn hello() -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_request: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"hello"))))
    })
}

fn from_peer(peer: &str) -> Request<Body> {
    let mut request = Request::new(Body::default());
    request
        .extensions_mut()
        .insert(peer.parse::<SocketAddr>().unwrap());
    request
}

/// Status, the four headers (limit, remaining, reset, retry-after), and the body.
async fn answer<S>(service: &S, request: Request<Body>) -> (u16, [Option<String>; 4], String)
where
    S: Service<Request<Body>, Error = Infallible> + Clone,
    S::Response: Into<Response<floodgate::middleware::RateLimitBody<Body>>>,
{
    let response: Response<_> = service.clone().oneshot(request).await.unwrap().into();
    let headers = [
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "retry-after",
    ]
    .map(|name| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    });
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, headers, String::from_utf8(body.to_vec()).unwrap())
}

fn h(limit: u64, remaining: u64, reset: u64, retry: Option<u64>) -> [Option<String>; 4] {
    [
        Some(limit.to_string()),
        Some(remaining.to_string()),
        Some(reset.to_string()),
        retry.map(|r| r.to_string()),
    ]
}

const NONE: [Option<String>; 4] = [None, None, None, None];

fn token_bucket(clock: &ManualClock) -> Keyed<IpKey, TokenBucket, ManualClock> {
    // 2 permits, one more every 1.5 s.
    Keyed::builder(TokenBucket::new(2, Rate::new(2, Duration::from_secs(3))).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn headers_round_up_and_retry_after_is_exact() {
    let clock = ManualClock::new();
    let service = RateLimitLayer::per_ip(token_bucket(&clock)).layer(hello());
    let peer = "192.0.2.1:1000";
    // Full after 1.5 s per permit used, rounded up.
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (200, h(2, 1, 2, None), "hello".into())
    );
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (200, h(2, 0, 3, None), "hello".into())
    );
    let denied = (
        429,
        h(2, 0, 3, Some(2)), // next permit in 1.5 s: Retry-After 2
        "Too Many Requests\n".to_owned(),
    );
    assert_eq!(answer(&service, from_peer(peer)).await, denied);
    clock.advance(Duration::from_millis(1_499));
    // 1 ms left: Retry-After never says 0.
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (429, h(2, 0, 2, Some(1)), "Too Many Requests\n".into())
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        answer(&service, from_peer(peer)).await,
        (200, h(2, 0, 3, None), "hello".into())
    );
    // Another IPv4 address is another client.
    assert_eq!(answer(&service, from_peer("192.0.2.2:1000")).await.0, 200);
}

#[tokio::test]
async fn ipv6_clients_share_their_64() {
    let clock = ManualClock::new();
    let layer = RateLimitLayer::per_ip(token_bucket(&clock));
    let per_ip = layer.limiter().clone();
    let service = layer.layer(hello());
    assert_eq!(answer(&service, from_peer("[2001:db8::1]:1")).await.0, 200);
    assert_eq!(
        answer(&service, from_peer("[2001:db8::ffff:2]:1")).await.0,
        200
    );
    assert_eq!(answer(&service, from_peer("[2001:db8::3]:1")).await.0, 429);
    assert_eq!(
        answer(&service, from_peer("[2001:db8:0:1::1]:1")).await.0,
        200
    );
    assert_eq!(per_ip.len(), 2);
    // An IpAddr extension works as well as a SocketAddr.
    let mut request = Request::new(Body::default());
    request
        .extensions_mut()
        .insert("2001:db8::9".parse::<IpAddr>().unwrap());
    assert_eq!(answer(&service, request).await.0, 429);
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
        h(2, 0, 3, Some(2))
    );
}

#[tokio::test]
async fn a_request_without_a_key_is_a_500_or_passes_as_configured() {
    let clock = ManualClock::new();
    let strict = RateLimitLayer::per_ip(token_bucket(&clock)).layer(hello());
    let (status, headers, body) = answer(&strict, Request::new(Body::default())).await;
    assert_eq!((status, headers), (500, NONE));
    assert!(body.contains("ConnectInfo<SocketAddr>"), "{body}");
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
    assert_eq!(answer(&service, as_user("ann")).await.1, h(5, 3, 10, None));
    assert_eq!(answer(&service, as_user("ann")).await.1, h(5, 1, 10, None));
    assert_eq!(
        answer(&service, as_user("ann")).await.1,
        h(5, 1, 10, Some(10))
    );
    assert_eq!(answer(&service, as_user("bob")).await.1, h(5, 3, 10, None));
    // The limit lowered below the cost of a request: it can never be granted, a 500.
    per_user.set_limit(1).unwrap();
    assert_eq!(answer(&service, as_user("cy")).await.0, 500);
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
    assert_eq!(answer(&service, from_peer(peer)).await.0, 200);
    assert_eq!(
        answer(&service, from_peer(peer)).await.1,
        h(1, 0, 1, Some(1))
    );
    // Second strike: blocked for 5 minutes.
    assert_eq!(
        answer(&service, from_peer(peer)).await.1,
        h(1, 0, 300, Some(300))
    );
    clock.advance(Duration::from_secs(10));
    assert_eq!(
        answer(&service, from_peer(peer)).await.1,
        h(1, 0, 290, Some(290))
    );
}

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
        (200, h(1, 0, 1, None), "hello".into())
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
    assert_eq!(rejected.1, h(1, 0, 1, Some(1)));
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
