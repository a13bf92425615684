//! The Prometheus example (`examples/prometheus.rs`) on loopback: its counters move as a real
//! client is allowed and denied, and `/metrics` renders them as Prometheus text.
//!
//! The limiter runs on a `ManualClock` (wall time cannot change a result), and the recorder is
//! this thread's local one: the test runs on a current-thread runtime, so the server's tasks
//! record on this thread, and no global recorder is shared with other tests.

#[path = "support/http_client.rs"]
mod http_client;
use http_client::HttpClient;

#[path = "../examples/prometheus.rs"]
#[allow(dead_code)] // the example's `main` is not used here
mod example;

use floodgate::ManualClock;
use hyper::StatusCode;

/// The lines of `text` that start with `prefix` (samples of one metric family), sorted (the
/// exporter writes label sets in no particular order).
fn samples<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut lines: Vec<&str> = text.lines().filter(|l| l.starts_with(prefix)).collect();
    lines.sort_unstable();
    lines
}

#[tokio::test(flavor = "current_thread")]
async fn counters_move_under_a_real_client_and_render_as_prometheus_text() {
    let recorder = example::recorder().unwrap();
    let handle = recorder.handle();
    let _local = metrics::set_default_local_recorder(&recorder);
    floodgate::observe::describe();

    let app = example::app(2, ManualClock::new(), move || handle.render()).unwrap();
    let (server_addr, _server) = http_client::serve(app).await;
    let client = HttpClient::from("127.0.0.1".parse().unwrap(), server_addr);

    // 2 per minute: two 200s and a 429.
    let statuses = [client.get().await, client.get().await, client.get().await].map(|a| a.status);
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    let scrape = client.get_path("/metrics").await;
    assert_eq!(scrape.status, StatusCode::OK);
    assert_eq!(
        scrape.header("content-type").unwrap(),
        "text/plain; version=0.0.4"
    );
    let text = scrape.body;
    assert_eq!(
        samples(&text, "floodgate_requests_total"),
        [
            r#"floodgate_requests_total{limiter="per-ip",outcome="allowed"} 2"#,
            r#"floodgate_requests_total{limiter="per-ip",outcome="denied"} 1"#,
        ],
        "{text}"
    );
    assert!(
        text.contains("# HELP floodgate_requests_total Requests the floodgate HTTP layer decided"),
        "{text}"
    );
    assert_eq!(
        samples(&text, "floodgate_keyed_"),
        [
            r#"floodgate_keyed_evictions_total{limiter="per-ip",kind="idle"} 0"#,
            r#"floodgate_keyed_evictions_total{limiter="per-ip",kind="live"} 0"#,
            r#"floodgate_keyed_keys{limiter="per-ip"} 1"#,
            r#"floodgate_keyed_refused_new_keys_total{limiter="per-ip"} 0"#,
        ],
        "{text}"
    );
    assert_eq!(
        samples(&text, "floodgate_decision_seconds_count"),
        [r#"floodgate_decision_seconds_count{limiter="per-ip"} 3"#],
        "{text}"
    );
    // Which bucket a decision lands in depends on the machine; the +Inf bucket holds them all.
    assert_eq!(
        samples(
            &text,
            r#"floodgate_decision_seconds_bucket{limiter="per-ip",le="+Inf"}"#
        ),
        [r#"floodgate_decision_seconds_bucket{limiter="per-ip",le="+Inf"} 3"#],
        "{text}"
    );

    // Two more 429s and a scrape: the counters moved; `/metrics` itself is not counted.
    for _ in 0..2 {
        assert_eq!(client.get().await.status, StatusCode::TOO_MANY_REQUESTS);
    }
    let text = client.get_path("/metrics").await.body;
    assert_eq!(
        samples(&text, "floodgate_requests_total"),
        [
            r#"floodgate_requests_total{limiter="per-ip",outcome="allowed"} 2"#,
            r#"floodgate_requests_total{limiter="per-ip",outcome="denied"} 3"#,
        ],
        "{text}"
    );
    assert_eq!(
        samples(&text, "floodgate_decision_seconds_count"),
        [r#"floodgate_decision_seconds_count{limiter="per-ip"} 5"#],
        "{text}"
    );
}
