//! The per-IP server of `http_per_ip`, with its metrics served as Prometheus text at `/metrics`
//! (floodgate's feature `metrics`, recorded by `metrics-exporter-prometheus`).
//!
//! ```text
//! cargo run --release --example prometheus --features axum,metrics -- 127.0.0.1:3000 5
//! for i in 1 2 3 4 5 6 7; do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:3000/; done
//! curl -s http://127.0.0.1:3000/metrics | grep '^floodgate'
//! ```
//!
//! After those seven requests at 5 per minute, `/metrics` shows (histogram buckets left out):
//!
//! ```text
//! floodgate_requests_total{limiter="per-ip",outcome="allowed"} 5
//! floodgate_requests_total{limiter="per-ip",outcome="denied"} 2
//! floodgate_keyed_keys{limiter="per-ip"} 1
//! floodgate_keyed_evictions_total{limiter="per-ip",kind="idle"} 0
//! floodgate_decision_seconds_count{limiter="per-ip"} 7
//! ```
//!
//! `/metrics` itself is not limited (it is routed after the layer). `tests/prometheus.rs` serves
//! this same [`app`] on loopback (on a `ManualClock`) and checks the text with a real client.

#[path = "http_per_ip.rs"]
#[allow(dead_code)] // its `main` is not used here
mod http_per_ip;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::header::CONTENT_TYPE;
use axum::routing::get;
use floodgate::observe::DECISION_SECONDS;
use floodgate::{Clock, FixedWindow, IpKey, Keyed, QuantaClock};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusRecorder};

/// The recorder: Prometheus text, with histogram buckets for the decision latency from 250 ns to
/// 1 ms (a decision takes well under a microsecond; a millisecond means something is wrong).
pub fn recorder() -> Result<PrometheusRecorder, BuildError> {
    let buckets = [250e-9, 500e-9, 1e-6, 2.5e-6, 5e-6, 10e-6, 100e-6, 1e-3];
    Ok(PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(DECISION_SECONDS.to_owned()), &buckets)?
        .build_recorder())
}

/// The application: `GET /` answers `hello`, limited to `per_minute` per client IP (the
/// `http_per_ip` example's layer, policy `per-ip`); `GET /metrics` answers `render()`, after
/// recording the keyed map's counts (keys held, evictions) under the same name.
pub fn app<C: Clock>(
    per_minute: u32,
    clock: C,
    render: impl Fn() -> String + Clone + Send + Sync + 'static,
) -> Result<Router, Box<dyn std::error::Error>> {
    let layer = http_per_ip::per_ip_layer(http_per_ip::per_ip_limiter(per_minute, clock)?)?;
    let per_ip: Arc<Keyed<IpKey, FixedWindow, C>> = Arc::clone(layer.limiter());
    let metrics = move || {
        per_ip.stats().record("per-ip");
        let text = render();
        async move { ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text) }
    };
    Ok(http_per_ip::app(Some(layer)).route("/metrics", get(metrics)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:3000").parse()?;
    let per_minute: u32 = args.next().as_deref().unwrap_or("60").parse()?;

    let recorder = recorder()?;
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;
    floodgate::observe::describe();
    // Upkeep drains histogram samples even when nobody scrapes for a while.
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });

    let app = app(per_minute, QuantaClock::new(), move || handle.render())?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!(
        "listening on http://{0} ({per_minute} requests per minute per IP); metrics at http://{0}/metrics",
        listener.local_addr()?
    );
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
