//! HTTP middleware (feature `tower`): a tower [`Layer`](tower::Layer) that limits requests per
//! key with a [`Keyed`](crate::Keyed) limiter — per client IP by default — and answers a denied request with
//! `429 Too Many Requests`, `Retry-After`, an RFC 9457 problem body, and the `RateLimit-Policy`
//! / `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers-11 (also on allowed responses
//! unless turned off). It can instead delay (shape) a request whose wait is short, up to a bound.
//!
//! The service is generic over request and response bodies (`http` 1.x, `Bytes` data), so it
//! fits axum, hyper and tonic stacks; it is tested with axum over loopback and with plain
//! `tower::service_fn` services (not with tonic). The response body becomes a [`RateLimitBody`]
//! over the inner one.
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use floodgate::middleware::{Policy, RateLimitLayer};
//! use floodgate::{FixedWindow, Keyed};
//! use std::net::SocketAddr;
//! use std::time::Duration;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let minute = Duration::from_secs(60);
//! let per_ip = Keyed::new(FixedWindow::new(100, minute)?, 100_000)?;
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::per_ip(per_ip).policy(Policy::new("per-ip")?.window(minute)?));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! // The peer address is the key: serve with ConnectInfo.
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! A response then carries `RateLimit-Policy: "per-ip";q=100;w=60` and, on a client's first,
//! `RateLimit: "per-ip";r=99;t=61`: the window opens at the first 2^19 ns unit at or after the
//! request, so it ends a fraction of a millisecond more than 60 s later, and `t` rounds up.
//!
//! | situation | response |
//! |---|---|
//! | allowed | the inner response, plus the fields (see [`RateLimitLayer::headers_on_allowed`]) |
//! | denied | `429`, `Retry-After`, the fields, a [`DenialBody`] (problem+json by default) |
//! | denied, shaping on, wait ≤ `max_delay`, fewer than `max_waiting` waiting | waits, then as allowed (or `429` if the wait grew past the bound) |
//! | skipped ([`RateLimitLayer::skip_method`], [`RateLimitLayer::skip_path`]) | the inner response, untouched, nothing consumed |
//! | no key (e.g. no peer address) | a bare `500` ([`MissingKey::Reject`], the default) or unlimited ([`MissingKey::Allow`]) |
//! | the request's cost can never be granted (limit lowered below it) | a bare `500` |
//!
//! The two `500`s are setup errors: the client gets `Internal Server Error` and nothing else;
//! the reason (with the fix) goes to the server's standard error, once per layer, the first time
//! it happens. A layer cannot check this at startup: whether the server records peer addresses
//! is decided where it is served.
//!
//! Header fields: [`HeaderStyle`] picks them (draft -11 by default, the draft -06 trio,
//! `X-RateLimit-*`, or none) and documents what `r` and `t` mean for each algorithm; the
//! [`Policy`] names the quota, and stacked layers (per second and per day) each add an item to
//! the same fields. `Retry-After` is whole seconds rounded **up** (a client that honours it is
//! never early; at least 1), and never earlier than the denial's `t`.
//!
//! Per-route limits: put a layer with its own limiter and [`Policy`] on each route (in axum,
//! `Router::route(path, get(handler).layer(layer))` or `route_layer`); a layer on the whole
//! router as well adds its item to the same fields.
//!
//! Client IPs: [`ClientIp`] keys by the peer address, IPv4 by address and IPv6 by /56; behind
//! reverse proxies, [`ClientIp::behind_proxies`] reads `X-Forwarded-For` or `Forwarded`,
//! counting a configured number of trusted hops from the right, and
//! [`ClientIp::trusted_proxies`] believes the header only from the proxies' own network.
//!
//! Observability: with the feature `metrics`, each [`RateLimitLayer`] counts its requests by
//! outcome and times its decisions under its policy's name; with `tracing`, each 429 is a
//! `DEBUG` event and each setup `500` an `ERROR` one (see `floodgate::observe`, and
//! `examples/prometheus.rs`). An [`InFlightLayer`] records no metrics and no `DEBUG` events for
//! its denials; its setup `500`s are `ERROR` events as well.
//!
//! Requests in progress: [`InFlightLayer`] limits how many requests run at once, globally (an
//! [`InFlight`](crate::concurrency::InFlight), optionally queueing a bounded number of waiters
//! in FIFO order) or per key (a [`KeyedInFlight`](crate::concurrency::KeyedInFlight)). It
//! answers `503` (or `429`) with the same problem bodies and header styles, its policy in the
//! quota unit `concurrent-requests`, and keeps each request's permit until its response body
//! has ended. Stacked with a [`RateLimitLayer`], each adds its item to the same fields.

mod builder;
mod denial;
mod fields;
mod forwarded;
mod in_flight_layer;
mod in_flight_service;
mod key;
mod keyed_limiter;
mod layer;
mod response;
mod service;

pub use builder::LayerSettings;
pub use denial::{Denial, DenialBody, QUOTA_EXCEEDED, TEMPORARY_REDUCED_CAPACITY};
pub use fields::{
    HeaderStyle, InvalidPolicyName, Policy, RATELIMIT, RATELIMIT_LIMIT, RATELIMIT_POLICY,
    RATELIMIT_REMAINING, RATELIMIT_RESET, write_headers,
};
pub use in_flight_layer::InFlightLayer;
pub use in_flight_service::InFlightLimit;
pub use key::{ClientIp, KeyExtractor, KeyFn, ProxyHeader};
pub use keyed_limiter::{Decided, KeyedLimiter};
pub use layer::RateLimitLayer;
pub use response::RateLimitBody;
pub use service::{RateLimit, ResponseFuture};

/// What to do with a request the [`KeyExtractor`] finds no key for.
///
/// ```
/// assert_eq!(floodgate::middleware::MissingKey::default(), floodgate::middleware::MissingKey::Reject);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissingKey {
    /// Answer a bare `500 Internal Server Error`: a missing key is a setup error (for client IPs:
    /// the server does not record peer addresses), and failing loudly beats not limiting at
    /// all. The reason is written to standard error once per layer, never to the client.
    #[default]
    Reject,
    /// Pass the request through unlimited (and without rate-limit header fields).
    Allow,
}
