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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    addr
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    addr
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
