//! The example server (`examples/http_per_ip.rs`) on loopback, checked with a real HTTP client.
//!
//! The limiter runs on a `ManualClock`, so wall time cannot change a result: the window moves
//! only when the test advances it. The server listens on 127.0.0.1 (port 0: the OS picks a free
//! one); a second client binds its socket to 127.0.0.2 (Linux routes all of 127/8 to loopback) to
//! show that each client IP has its own limit. 12 requests in all.

#[path = "support/ratelimit_fields.rs"]
mod ratelimit_fields;
use ratelimit_fields::checked_fields;

#[path = "support/http_client.rs"]
mod http_client;
use http_client::{Answer, HttpClient};

#[path = "../examples/http_per_ip.rs"]
#[allow(dead_code)] // the example's `main` is not used here
mod example;

use std::sync::Arc;
use std::time::Duration;

use floodgate::ManualClock;
use hyper::StatusCode;

/// `RateLimit-Policy`, `RateLimit` (checked with a structured-field parser) and `Retry-After`.
fn rate_limit_fields(answer: &Answer) -> [Option<String>; 3] {
    let (policy, state) = checked_fields(&answer.headers).unzip();
    [policy, state, answer.header("retry-after")]
}

const POLICY: &str = r#""per-ip";q=3;w=60"#;

fn fields(r: u64, t: u64, retry: Option<u64>) -> [Option<String>; 3] {
    [
        Some(POLICY.to_owned()),
        Some(format!(r#""per-ip";r={r};t={t}"#)),
        retry.map(|r| r.to_string()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_ip_limit_over_loopback() {
    let clock = ManualClock::new();
    let layer = example::per_ip_layer(example::per_ip_limiter(3, clock.clone()).unwrap()).unwrap();
    let per_ip = Arc::clone(layer.limiter());
    let app = example::app(Some(layer));
    let (server_addr, server) = http_client::serve(app).await;

    let first = HttpClient::from("127.0.0.1".parse().unwrap(), server_addr);
    let second = HttpClient::from("127.0.0.2".parse().unwrap(), server_addr);

    // 3 per minute for 127.0.0.1: three 200s counting down, then 429s.
    for remaining in [2, 1, 0] {
        let answer = first.get().await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(answer.body, "hello\n");
        assert_eq!(rate_limit_fields(&answer), fields(remaining, 60, None));
    }
    clock.advance(Duration::from_millis(20_500));
    for _ in 0..2 {
        let answer = first.get().await;
        assert_eq!(answer.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            answer.body,
            "{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\
             \"title\":\"Request cannot be satisfied as assigned quota has been exceeded\",\
             \"status\":429,\"violated-policies\":[\"per-ip\"]}"
        );
        // 39.5 s left in the window: t and Retry-After both rounded up.
        assert_eq!(rate_limit_fields(&answer), fields(0, 40, Some(40)));
        assert_eq!(
            answer.header("content-type").unwrap(),
            "application/problem+json"
        );
    }

    // 127.0.0.2 is another client: its own window, untouched by the first client's 429s.
    // An anchored window opens at the next 2^19 ns unit at or after its first request (60 s /
    // 2^19 ns is not whole; a window never ends early), so one opened at 20.5 s ends a fraction
    // of a millisecond more than 60 s later: `t` rounds that up to 61.
    let answer = second.get().await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(rate_limit_fields(&answer), fields(2, 61, None));
    assert_eq!(per_ip.len(), 2);

    // The first client's window ends 60 s after its first request: 200 again, exactly then.
    clock.advance(Duration::from_millis(39_499));
    assert_eq!(first.get().await.status, StatusCode::TOO_MANY_REQUESTS);
    clock.advance(Duration::from_millis(1));
    let answer = first.get().await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(rate_limit_fields(&answer), fields(2, 61, None)); // opened at 60 s: as above
    // The second client's window (opened at 20.5 s) still holds its one request.
    let answer = second.get().await;
    assert_eq!(rate_limit_fields(&answer), fields(1, 21, None));

    server.abort();
}

#[tokio::test]
async fn without_the_layer_nothing_is_limited() {
    let app = example::app::<floodgate::Keyed<floodgate::IpKey, floodgate::FixedWindow>>(None);
    let (server_addr, server) = http_client::serve(app).await;
    let client = HttpClient::from("127.0.0.1".parse().unwrap(), server_addr);
    for _ in 0..2 {
        let answer = client.get().await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(rate_limit_fields(&answer), [None, None, None]);
    }
    server.abort();
}

/// Served without `into_make_service_with_connect_info`: the layer finds no peer address. The
/// client gets a bare 500 (the setup hint goes to the server's stderr, not to the client).
#[tokio::test]
async fn without_connect_info_the_client_sees_a_bare_500() {
    let clock = ManualClock::new();
    let layer = example::per_ip_layer(example::per_ip_limiter(3, clock).unwrap()).unwrap();
    let app = example::app(Some(layer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server_addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let client = HttpClient::from("127.0.0.1".parse().unwrap(), server_addr);
    for _ in 0..2 {
        let answer = client.get().await;
        assert_eq!(answer.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(answer.body, "Internal Server Error\n");
        assert_eq!(rate_limit_fields(&answer), [None, None, None]);
    }
    server.abort();
}
