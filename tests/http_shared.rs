//! A per-IP limit shared by two axum servers through one memcached, and through one Redis
//! (each started here on a free port): `RateLimitLayer::per_ip(limiter)`, one line per server.
//! Each decision is a round trip awaited on the server's runtime; the count across both servers
//! is exact.

#[path = "support/http_client.rs"]
mod http_client;
use http_client::HttpClient;

#[path = "memcached/server.rs"]
mod server;
use server::MemcachedServer;

// Both server modules load tests/support/process.rs as their own `process` module: the
// Redis one only in this file's Redis test, gated on the feature.
#[cfg(feature = "redis")]
#[allow(clippy::duplicate_mod)]
#[path = "redis/server.rs"]
mod redis_server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::{Router, routing::get};
use floodgate::ManualClock;
use floodgate::SlidingWindow;
use floodgate::backend::FailurePolicy;
use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
use floodgate::middleware::{Policy, RateLimitLayer};
use hyper::StatusCode;

const LIMIT: u32 = 7;

/// One server limited per IP on `memcached`, its own backend (its own connections), the
/// shared limiter name "per-ip"; returns its address.
async fn serve(memcached: &MemcachedServer, clock: &ManualClock) -> SocketAddr {
    let backend = MemcachedBackend::connect(
        MemcachedConfig::new(memcached.addr()).timeout(Duration::from_secs(30)),
    )
    .unwrap();
    let window = SlidingWindow::new(LIMIT, Duration::from_secs(60), 60).unwrap();
    let per_ip = MemcachedLimiter::with_clock(
        &backend,
        "per-ip",
        window,
        FailurePolicy::FailClosed,
        clock.clone(),
    )
    .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(RateLimitLayer::per_ip(per_ip).policy(Policy::new("per-ip").unwrap()));
    http_client::serve(app).await.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_per_ip_limit_exactly() {
    let memcached = MemcachedServer::start();
    // Both servers' cells on one timeline (a realistic Unix time), moved only by the test.
    let clock = ManualClock::starting_at(1_700_000_000_500_000_000);
    let (a, b) = (
        serve(&memcached, &clock).await,
        serve(&memcached, &clock).await,
    );
    let client = "127.0.0.1".parse().unwrap();
    let (to_a, to_b) = (HttpClient::from(client, a), HttpClient::from(client, b));

    // Alternating between the servers, and then concurrently: exactly LIMIT pass in all.
    let mut ok = 0;
    let mut remaining = Vec::new();
    for i in 0..6 {
        let answer = if i % 2 == 0 {
            to_a.get().await
        } else {
            to_b.get().await
        };
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (StatusCode::OK, "hello\n")
        );
        ok += 1;
        remaining.push(answer.header("ratelimit").unwrap());
    }
    assert_eq!(remaining[0], r#""per-ip";r=6;t=60"#);
    assert_eq!(remaining[5], r#""per-ip";r=1;t=60"#);
    // A concurrent burst on both servers: never past the limit (a request denied while others'
    // permits were briefly counted may leave one permit over)...
    let (to_a, to_b) = (Arc::new(to_a), Arc::new(to_b));
    let burst: Vec<_> = (0..10)
        .map(|i| {
            let client = Arc::clone(if i % 2 == 0 { &to_a } else { &to_b });
            tokio::spawn(async move { client.get().await.status })
        })
        .collect();
    for answer in burst {
        match answer.await.unwrap() {
            StatusCode::OK => ok += 1,
            status => assert_eq!(status, StatusCode::TOO_MANY_REQUESTS),
        }
    }
    assert!(
        ok <= LIMIT as usize,
        "the two servers admitted {ok} of a shared {LIMIT}"
    );
    // ...and every denied request took its permit back: serial requests find exactly the rest.
    loop {
        let answer = if ok % 2 == 0 {
            to_a.get().await
        } else {
            to_b.get().await
        };
        if answer.status == StatusCode::TOO_MANY_REQUESTS {
            assert!(answer.header("retry-after").is_some());
            break;
        }
        assert_eq!(answer.status, StatusCode::OK);
        ok += 1;
        assert!(ok <= LIMIT as usize, "over the shared limit");
    }
    assert_eq!(
        ok, LIMIT as usize,
        "the two servers admitted {ok} of a shared {LIMIT}"
    );

    // Another client IP has its own limit, on either server.
    let other = HttpClient::from("127.0.0.2".parse().unwrap(), b);
    assert_eq!(other.get().await.status, StatusCode::OK);
    // A minute later the window has slid past every admission.
    clock.advance(Duration::from_secs(60));
    assert_eq!(to_a.get().await.status, StatusCode::OK);
}

/// One server limited per IP on `redis` with its own backend (its own connection) and the shared
/// limiter name "per-ip-redis"; returns its address.
#[cfg(feature = "redis")]
async fn serve_on_redis(redis: &redis_server::RedisServer) -> SocketAddr {
    use floodgate::FixedWindow;
    use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    let backend =
        RedisBackend::connect(RedisConfig::single(redis.url()).timeout(Duration::from_secs(30)))
            .await
            .unwrap();
    // Ten minutes: the window cannot end during the test (Redis decides on its own clock).
    let window = FixedWindow::new(LIMIT, Duration::from_secs(600)).unwrap();
    let per_ip =
        RedisLimiter::new(&backend, "per-ip-redis", window, FailurePolicy::FailClosed).unwrap();
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(RateLimitLayer::per_ip(per_ip).policy(Policy::new("per-ip").unwrap()));
    http_client::serve(app).await.0
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_one_per_ip_limit_on_redis_exactly() {
    let redis = redis_server::RedisServer::start();
    let (a, b) = (serve_on_redis(&redis).await, serve_on_redis(&redis).await);
    let client = "127.0.0.1".parse().unwrap();
    let (to_a, to_b) = (HttpClient::from(client, a), HttpClient::from(client, b));

    // Alternating between the servers: each sees the other's admissions.
    for i in 0..3u32 {
        let answer = if i % 2 == 0 {
            to_a.get().await
        } else {
            to_b.get().await
        };
        assert_eq!(
            (answer.status, answer.body.as_str()),
            (StatusCode::OK, "hello\n")
        );
        let header = answer.header("ratelimit").unwrap();
        let expected = format!(r#""per-ip";r={};"#, LIMIT - 1 - i);
        assert!(header.starts_with(&expected), "{header}");
    }
    // A concurrent burst on both servers: each script decides atomically, so exactly the
    // LIMIT - 3 permits left are handed out, and every other request is denied.
    let (to_a, to_b) = (Arc::new(to_a), Arc::new(to_b));
    let burst: Vec<_> = (0..12)
        .map(|i| {
            let client = Arc::clone(if i % 2 == 0 { &to_a } else { &to_b });
            tokio::spawn(async move { client.get().await })
        })
        .collect();
    let mut ok = 3;
    for answer in burst {
        let answer = answer.await.unwrap();
        match answer.status {
            StatusCode::OK => ok += 1,
            status => {
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
                assert!(answer.header("retry-after").is_some());
            }
        }
    }
    assert_eq!(
        ok, LIMIT,
        "the two servers admitted {ok} of a shared {LIMIT}"
    );
    // Spent on both servers (each now denies from Redis or from its deny cache).
    assert_eq!(to_a.get().await.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(to_b.get().await.status, StatusCode::TOO_MANY_REQUESTS);
    // The one count, in Redis: exactly LIMIT (a denial changes nothing there).
    let key = "{per-ip-redis:127.0.0.1}:fw";
    assert_eq!(redis.cli(&["GET", key]), LIMIT.to_string(), "{key}");

    // Another client IP has its own limit, on either server.
    let other = HttpClient::from("127.0.0.2".parse().unwrap(), b);
    assert_eq!(other.get().await.status, StatusCode::OK);
}

// In-process: two tower services, each with its own layer over its own limiter (the same name
// and configuration, the same server), interleaved. What the 429 says is checked against the
// backend's own decision for the next request.

#[path = "support/http_service.rs"]
mod http_service;

/// Whole seconds, rounded up, as `Retry-After` and `t` are written.
fn ceil_secs(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// A header value as text (the test fails if it is missing).
fn header(headers: &http::HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {headers:?}"))
        .to_str()
        .unwrap()
        .to_owned()
}

/// What [`drive_two_layers`] saw: the admissions, each 429's headers with when its request
/// was sent (read before it went out), and the longest any request took from that reading to
/// its response.
type Driven = (u32, Vec<(std::time::Instant, http::HeaderMap)>, Duration);

/// Sends `3 × LIMIT` requests from one peer, alternately to the two `services`; checks each
/// admitted response's `RateLimit` line with `admitted_line(line, admitted so far)`.
async fn drive_two_layers<S, B>(services: &[S; 2], admitted_line: impl Fn(&str, u32)) -> Driven
where
    S: tower::Service<
            http::Request<http_body_util::Full<bytes::Bytes>>,
            Response = http::Response<B>,
        > + Clone,
    S::Error: std::fmt::Debug,
{
    use tower::ServiceExt;
    let mut admitted = 0;
    let mut denials = Vec::new();
    let mut longest = Duration::ZERO;
    for i in 0..3 * LIMIT as usize {
        let sent = std::time::Instant::now();
        let response = services[i % 2]
            .clone()
            .oneshot(http_service::from_peer("192.0.2.7:4000"))
            .await
            .unwrap();
        longest = longest.max(sent.elapsed());
        match response.status() {
            StatusCode::OK => {
                admitted += 1;
                admitted_line(&header(response.headers(), "ratelimit"), admitted);
            }
            status => {
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
                denials.push((sent, response.headers().clone()));
            }
        }
    }
    (admitted, denials, longest)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_layers_on_one_memcached_admit_exactly_the_limit_and_429s_carry_its_decision() {
    use http_service::{from_peer, hello};
    use tower::{Layer, ServiceExt};
    let memcached = MemcachedServer::start();
    let clock = ManualClock::starting_at(1_700_000_000_500_000_000);
    let minute = Duration::from_secs(60);
    let limiter = || {
        let backend = MemcachedBackend::connect(
            MemcachedConfig::new(memcached.addr()).timeout(Duration::from_secs(30)),
        )
        .unwrap();
        let window = SlidingWindow::new(LIMIT, minute, 60).unwrap();
        MemcachedLimiter::with_clock(
            &backend,
            "api",
            window,
            FailurePolicy::FailClosed,
            clock.clone(),
        )
        .unwrap()
    };
    let policy = Policy::new("api").unwrap().window(minute).unwrap();
    let services = [
        RateLimitLayer::per_ip(limiter())
            .policy(policy.clone())
            .layer(hello()),
        RateLimitLayer::per_ip(limiter())
            .policy(policy.clone())
            .layer(hello()),
    ];
    let (admitted, denials, _) = drive_two_layers(&services, |line, admitted| {
        assert_eq!(line, format!(r#""api";r={};t=60"#, LIMIT - admitted));
    })
    .await;
    assert_eq!(admitted, LIMIT, "two layers on one memcached");
    // memcached's decision for the next request (a denial takes its permits back).
    let decision = limiter().try_acquire("192.0.2.7", 1).await.unwrap();
    assert!(!decision.is_allowed());
    assert_eq!(decision.retry_after(), Duration::from_millis(59_500));
    let retry = ceil_secs(decision.retry_after());
    assert_eq!(denials.len(), 2 * LIMIT as usize);
    for (_, headers) in &denials {
        assert_eq!(header(headers, "retry-after"), retry.to_string());
        assert_eq!(
            header(headers, "ratelimit"),
            format!(r#""api";r={};t={retry}"#, decision.remaining())
        );
        assert_eq!(
            header(headers, "ratelimit-policy"),
            format!(r#""api";q={LIMIT};w=60"#)
        );
    }
    // Once every admission has slid out of the window, either layer admits again.
    clock.advance(minute);
    for service in services {
        let response = service.oneshot(from_peer("192.0.2.7:4000")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_layers_on_one_redis_admit_exactly_the_limit_and_429s_carry_its_decision() {
    use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    use floodgate::{FixedWindow, Gcra, Rate};
    use http_service::hello;
    use std::time::Instant;
    use tower::Layer;
    let redis = redis_server::RedisServer::start();
    let ten_minutes = Duration::from_secs(600);
    let backend = || async {
        RedisBackend::connect(RedisConfig::single(redis.url()).timeout(Duration::from_secs(30)))
            .await
            .unwrap()
    };
    // A fixed window of ten minutes and a bucket refilling one permit in ten minutes: neither
    // gives anything back during the test (Redis decides on its own clock).
    let fixed = FixedWindow::new(LIMIT, ten_minutes).unwrap();
    let gcra = Gcra::new(Rate::new(1, ten_minutes), LIMIT).unwrap();
    macro_rules! check {
        ($name:literal, $algorithm:expr) => {{
            let limiter = || async {
                RedisLimiter::new(
                    &backend().await,
                    $name,
                    $algorithm,
                    FailurePolicy::FailClosed,
                )
                .unwrap()
            };
            let policy = Policy::new($name).unwrap();
            let services = [
                RateLimitLayer::per_ip(limiter().await)
                    .policy(policy.clone())
                    .layer(hello()),
                RateLimitLayer::per_ip(limiter().await)
                    .policy(policy.clone())
                    .layer(hello()),
            ];
            // The second round of denials comes from each layer's deny cache.
            let (admitted, denials, longest) = drive_two_layers(&services, |line, admitted| {
                let expected = format!(r#""{}";r={};t="#, $name, LIMIT - admitted);
                assert!(line.starts_with(&expected), "{line}");
            })
            .await;
            assert_eq!(admitted, LIMIT, "{}: two layers on one Redis", $name);
            // Redis's own decision for the next request (a denial changes nothing there).
            let decision = limiter().await.try_acquire("192.0.2.7", 1).await.unwrap();
            let asked = Instant::now();
            assert!(!decision.is_allowed());
            assert_eq!(denials.len(), 2 * LIMIT as usize);
            for (at, headers) in &denials {
                // Each 429's request was sent (`at`) before Redis's decision was asked for,
                // and Redis decided it after `at`: its wait is longer than Redis's last by at
                // most the time from `at` to `asked` (and the rounding up), however long a
                // stall came between a decision and the test reading the time. A 429 from a
                // layer's deny cache is no earlier than its cached denial's request, whose
                // wait ran from when it was asked for, up to `longest` before Redis decided
                // it: its wait may be that much shorter than Redis's (and 1 ms, its rounding
                // down).
                let low = ceil_secs(
                    decision
                        .retry_after()
                        .saturating_sub(longest + Duration::from_millis(1)),
                );
                let high = ceil_secs(decision.retry_after() + asked.duration_since(*at)) + 1;
                let retry: u64 = header(headers, "retry-after").parse().unwrap();
                assert!(
                    (low..=high).contains(&retry),
                    "{}: {retry} not in {low}..={high}",
                    $name
                );
                assert_eq!(
                    header(headers, "ratelimit"),
                    format!(r#""{}";r=0;t={retry}"#, $name)
                );
                assert_eq!(
                    header(headers, "ratelimit-policy"),
                    format!(r#""{}";q={LIMIT}"#, $name)
                );
            }
        }};
    }
    check!("fixed", fixed.clone());
    check!("gcra", gcra.clone());
}

/// A limiter failing open has no idea of the client's state: the allowed response must not
/// claim the quota is whole again at once (`t=0`, `RateLimit-Reset: 0`), which invites a client
/// to send more exactly while the store is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_open_decision_claims_no_reset_time() {
    use floodgate::middleware::{HeaderStyle, LayerSettings};
    use http_service::{from_peer, hello};
    use tower::{Layer, ServiceExt};
    // Nothing listens there: every call is refused at once, and the policy decides.
    let addr = format!("127.0.0.1:{}", server::free_port());
    let backend = MemcachedBackend::connect(
        MemcachedConfig::new(addr)
            .timeout(Duration::from_millis(1))
            .lazy(),
    )
    .unwrap();
    let window = SlidingWindow::new(LIMIT, Duration::from_secs(60), 60).unwrap();
    let limiter =
        || MemcachedLimiter::new(&backend, "api", window, FailurePolicy::FailOpen).unwrap();
    let policy = Policy::new("api").unwrap();
    let draft11 = RateLimitLayer::per_ip(limiter())
        .policy(policy.clone())
        .layer(hello());
    let draft06 = RateLimitLayer::per_ip(limiter())
        .header_style(HeaderStyle::Draft06)
        .layer(hello());
    let xratelimit = RateLimitLayer::per_ip(limiter())
        .header_style(HeaderStyle::XRateLimit)
        .layer(hello());
    for _ in 0..2 * LIMIT {
        let response = draft11
            .clone()
            .oneshot(from_peer("192.0.2.7:4000"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let line = header(response.headers(), "ratelimit");
        assert_eq!(line, format!(r#""api";r={}"#, LIMIT - 1));
        let response = draft06
            .clone()
            .oneshot(from_peer("192.0.2.7:4000"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(
            header(response.headers(), "ratelimit-limit"),
            LIMIT.to_string()
        );
        assert!(!response.headers().contains_key("ratelimit-reset"));
        let response = xratelimit
            .clone()
            .oneshot(from_peer("192.0.2.7:4000"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert!(!response.headers().contains_key("x-ratelimit-reset"));
    }
}

/// Shaping (`.shape(max_delay, max_waiting)`) on a layer whose limiter decides on Redis: a
/// denied request whose wait fits `max_delay` waits and is served, as with a local limiter (it
/// was answered 429 at once: shaping silently applied only to local limiters); one whose wait
/// does not fit is refused at once.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shaping_delays_a_request_denied_by_redis() {
    use floodgate::FixedWindow;
    use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
    use http_service::{from_peer, hello};
    use tower::{Layer, ServiceExt};
    let redis = redis_server::RedisServer::start();
    let backend =
        RedisBackend::connect(RedisConfig::single(redis.url()).timeout(Duration::from_secs(30)))
            .await
            .unwrap();
    let limiter = |name, window| {
        let window = FixedWindow::new(1, window).unwrap();
        RedisLimiter::new(&backend, name, window, FailurePolicy::FailClosed).unwrap()
    };
    // One a quarter second: the second request waits for the window's end (on Redis's clock).
    let shaped = RateLimitLayer::per_ip(limiter("shaped", Duration::from_millis(250)))
        .shape(Duration::from_secs(30), 10)
        .layer(hello());
    let start = std::time::Instant::now();
    for _ in 0..3 {
        let response = shaped
            .clone()
            .oneshot(from_peer("192.0.2.7:4000"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    // The second and the third each waited for the end of the window before them.
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(450), "{waited:?}");
    // A wait longer than max_delay: refused at once.
    let long = RateLimitLayer::per_ip(limiter("long", Duration::from_secs(600)))
        .shape(Duration::from_secs(1), 10)
        .layer(hello());
    let first = long.clone().oneshot(from_peer("192.0.2.7:4000")).await;
    assert_eq!(first.unwrap().status(), StatusCode::OK);
    let second = long.oneshot(from_peer("192.0.2.7:4000")).await.unwrap();
    assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
}
