//! An axum server limited per client IP with floodgate's tower layer.
//!
//! ```text
//! cargo run --release --example http_per_ip --features axum                      # 60 per minute per IP
//! cargo run --release --example http_per_ip --features axum -- 127.0.0.1:3000 600 # 600 per minute
//! cargo run --release --example http_per_ip --features axum -- 127.0.0.1:3000 off # no layer
//! curl -i http://127.0.0.1:3000/
//! ```
//!
//! Every response carries the draft-11 fields, e.g. `RateLimit-Policy: "per-ip";q=60;w=60` and
//! `RateLimit: "per-ip";r=59;t=60`; past the limit the answer is `429 Too Many Requests` with
//! `Retry-After` and an `application/problem+json` body (problem type `quota-exceeded`).
//! `tests/http_per_ip.rs` serves this same [`app`] on loopback (on a `ManualClock`) and checks
//! it with a real client.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use floodgate::keyed::WhenFull;
use floodgate::middleware::{KeyedLimiter, Policy, RateLimitLayer};
use floodgate::{Clock, ConfigError, FixedWindow, IpKey, Keyed, QuantaClock};

/// The per-IP limiter: `per_minute` requests a minute for each client IP, at most 100,000 IPs
/// held (new IPs are refused while all of them are live).
pub fn per_ip_limiter<C: Clock>(
    per_minute: u32,
    clock: C,
) -> Result<Keyed<IpKey, FixedWindow, C>, ConfigError> {
    Keyed::builder(FixedWindow::new(per_minute, Duration::from_secs(60))?)
        .clock(clock)
        .max_keys(100_000)
        .when_full(WhenFull::DenyNewKeys)
        .build()
}

/// The layer: per client IP (the peer address), the fields naming the policy `per-ip` with its
/// 60 s window; everything else as the defaults.
pub fn per_ip_layer<L: KeyedLimiter<IpKey>>(
    limiter: L,
) -> Result<RateLimitLayer<L>, Box<dyn std::error::Error>> {
    let policy = Policy::new("per-ip")?.window(Duration::from_secs(60))?;
    Ok(RateLimitLayer::per_ip(limiter).policy(policy))
}

/// The application: `GET /` answers `hello`, limited by `layer` when there is one.
pub fn app<L: KeyedLimiter<IpKey>>(layer: Option<RateLimitLayer<L>>) -> Router {
    let router = Router::new().route("/", get(|| async { "hello\n" }));
    match layer {
        Some(layer) => router.layer(layer),
        None => router,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args.next().as_deref().unwrap_or("127.0.0.1:3000").parse()?;
    let limit = args.next().unwrap_or_else(|| "60".to_owned());
    let layer = match limit.as_str() {
        "off" => None,
        per_minute => Some(per_ip_layer(per_ip_limiter(
            per_minute.parse()?,
            QuantaClock::new(),
        )?)?),
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!(
        "listening on http://{} ({})",
        listener.local_addr()?,
        match limit.as_str() {
            "off" => "no rate limit".to_owned(),
            per_minute => format!("{per_minute} requests per minute per IP"),
        }
    );
    let service = app(layer).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, service).await?;
    Ok(())
}
