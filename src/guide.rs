//! # Guide: from the use case to the type
//!
//! Find your case in the table; its section is the setup in about five lines, then what the
//! client sees and the knobs you are likely to want next. Every snippet here is compiled (and,
//! where it needs no server, run) as a test.
//!
//! | you want | type | crate feature |
//! |---|---|---|
//! | [one limit for the whole process](#a-global-limit) | [`AtomicLimiter`]`<`[`Gcra`]`>` (or any one-word algorithm) | — |
//! | [a limit per client IP on an axum server](#per-ip-http-axum) | [`RateLimitLayer::per_ip`] over a [`Keyed`]`<`[`IpKey`]`, _>` | `axum` |
//! | [a limit per user or API key](#per-user-or-api-key) | [`Keyed`]`<String, _>`; over HTTP [`RateLimitLayer::with_key`] + [`KeyFn`] | — / `tower` |
//! | [a port of Guava's `RateLimiter`](#guava-port-smoothbursty-smoothwarmingup) | [`SmoothBursty`], [`SmoothWarmingUp`] | — |
//! | [one limit shared by many processes](#shared-via-redis) | [`RedisLimiter`] | `redis` |
//! | [an HTTP limit shared by many processes](#http--redis-or-memcached) | [`RateLimitLayer::per_ip`] over a [`RedisLimiter`] (or a [`MemcachedLimiter`](crate::memcached::MemcachedLimiter)) | `axum`, `redis` / `memcached` |
//! | [metrics and logs](#observability) | [`observe`](crate::observe) | `metrics`, `tracing` |
//! | [to replace tower_governor](#from-tower_governor-to-floodgate) | the table at the end | `axum` |
//!
//! Which algorithm: [`FixedWindow`] for "N per minute" with a reset (aligned to the wall clock
//! with [`FixedWindow::aligned`]); [`SlidingWindow`](crate::SlidingWindow) for "N in any
//! minute" counted in cells (a minute that starts inside a cell can also hold what that cell
//! admitted; [`SlidingLog`](crate::SlidingLog) is exact over any span, up to
//! [`MAX_SLIDING_LOG_CAPACITY`](crate::algorithms::MAX_SLIDING_LOG_CAPACITY) permits);
//! [`Gcra`] for a rate with bursts ([`TokenBucket`] and
//! [`LeakyBucket`](crate::LeakyBucket) are the same type under the names you may know). Each is
//! one configuration value, the same for the local engine and Redis (memcached runs
//! [`SlidingWindow`](crate::SlidingWindow)); a local limiter
//! is `config.into_limiter()` ([`IntoLimiter`](crate::IntoLimiter)), or `AtomicLimiter::new(config)`
//! for the one-word algorithms. No lock, and a denial writes nothing.
//!
//! ## A global limit
//!
//! One limiter shared by every thread (put it in an `Arc` or a `static`):
//!
//! ```
//! use floodgate::{AtomicLimiter, Gcra, Limiter, Rate};
//! let limiter = AtomicLimiter::new(Gcra::new(Rate::per_second(100), 10)?); // 100/s, bursts of 10
//! let decision = limiter.try_acquire(1)?; // never blocks; Err only for n = 0 or n > burst
//! assert!(decision.is_allowed());
//! limiter.acquire(1)?; // or sleep (on the limiter's clock) until a permit is free
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A denied [`Decision`] says when to come back ([`Decision::retry_after`]) and how much is left
//! ([`Decision::remaining`]). Async code uses `acquire_async` ([`AsyncLimiter`](crate::AsyncLimiter),
//! feature `tokio`), which waits on tokio's timer instead of a thread.
//!
//! ## Per-IP HTTP (axum)
//!
//! ```no_run
//! # #[cfg(feature = "axum")]
//! # async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//! use axum::{Router, routing::get};
//! use floodgate::{FixedWindow, Keyed, middleware::{Policy, RateLimitLayer}};
//! let minute = std::time::Duration::from_secs(60);
//! let per_ip = Keyed::new(FixedWindow::new(60, minute)?, 100_000)?; // 60 a minute per IP, ≤ 100k IPs held
//! let layer = RateLimitLayer::per_ip(per_ip).policy(Policy::new("per-ip")?.window(minute)?);
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(layer);
//! let listener = tokio::net::TcpListener::bind("0.0.0.0:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! Every response then carries `RateLimit-Policy: "per-ip";q=60;w=60` and, on a client's first,
//! `RateLimit: "per-ip";r=59;t=61` (draft-ietf-httpapi-ratelimit-headers-11; `t` is rounded up,
//! and the window opens at the first 2^19 ns unit at or after the request); past the limit the
//! answer is `429` with `Retry-After` and an `application/problem+json` body. Serve with
//! `into_make_service_with_connect_info`: without it no request has a peer address, and each is
//! answered a bare `500` while the reason is written once to the server's standard error.
//!
//! Next knobs, all on [`RateLimitLayer`]: behind a reverse proxy, key by the address the proxy
//! recorded, counted from the right (the leftmost entry is whatever the client wrote; if clients
//! can also reach the server directly, name the proxies' network with
//! [`ClientIp::trusted_proxies`](crate::middleware::ClientIp::trusted_proxies)):
//!
//! ```
//! # #[cfg(feature = "tower")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use floodgate::middleware::{ClientIp, LayerSettings, ProxyHeader, RateLimitLayer};
//! use floodgate::{FixedWindow, IpKey, Keyed};
//! let per_ip: Keyed<IpKey, _> = Keyed::new(FixedWindow::new(60, std::time::Duration::from_secs(60))?, 100_000)?;
//! let behind_nginx = ClientIp::default().behind_proxies(ProxyHeader::XForwardedFor, 1)?; // one proxy
//! let layer = RateLimitLayer::with_key(per_ip, behind_nginx).skip_method(http::Method::OPTIONS);
//! # let _ = layer; Ok(()) }
//! # #[cfg(not(feature = "tower"))] fn main() {}
//! ```
//!
//! Stack two layers (say per second and per day, each with its own [`Policy`] name) and both
//! items appear in the same fields; [`RateLimitLayer::shape`] delays short waits instead of
//! refusing them; [`RateLimitLayer::header_style`] picks older header names. The runnable server:
//! `cargo run --example http_per_ip --features axum -- 127.0.0.1:3000 60`.
//!
//! ## Per user or API key
//!
//! A [`Keyed`] map holds one limiter word per key, with a cap on the keys it holds (idle ones are
//! dropped by the calls that find their shard full, no background task):
//!
//! ```
//! use floodgate::{Keyed, Rate, TokenBucket};
//! let per_user: Keyed<String, _> = Keyed::new(TokenBucket::new(Rate::per_second(5), 20)?, 100_000)?;
//! assert!(per_user.try_acquire("alice", 1)?.is_allowed()); // &str looks up String keys
//! assert_eq!(per_user.try_acquire("alice", 19)?.remaining(), 0); // 5/s, bursts of 20, per user
//! assert!(!per_user.try_acquire("alice", 1)?.is_allowed() && per_user.try_acquire("bob", 1)?.is_allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Over HTTP, a [`KeyFn`] picks the key from the request (a header, or a user id an
//! authentication layer put in the extensions). Hash what the client writes
//! ([`HashedKey`](crate::keyed::HashedKey), 16 bytes a key): a `Vec<u8>` of the header's bytes
//! is as long as the client makes it, for each of the 100,000 keys:
//!
//! ```
//! # #[cfg(feature = "tower")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use floodgate::keyed::HashedKey;
//! use floodgate::middleware::{KeyFn, MissingKey, Policy, RateLimitLayer};
//! use floodgate::{Keyed, Rate, TokenBucket};
//! let per_key: Keyed<HashedKey, _> = Keyed::new(TokenBucket::new(Rate::per_second(5), 20)?, 100_000)?;
//! let api_key = KeyFn(|r: &http::Request<()>| Some(HashedKey::new(r.headers().get("x-api-key")?.as_bytes())));
//! let layer = RateLimitLayer::with_key(per_key, api_key).policy(Policy::new("per-key")?);
//! let layer = layer.on_missing_key(MissingKey::Allow); // no key: unlimited (default: 500)
//! # let _ = layer; Ok(()) }
//! # #[cfg(not(feature = "tower"))] fn main() {}
//! ```
//!
//! [`PenalizedKeyed`](crate::PenalizedKeyed) (from [`Keyed::builder`]) also blocks a key that
//! keeps being denied, for a while.
//!
//! ## Guava port (SmoothBursty, SmoothWarmingUp)
//!
//! Guava's `RateLimiter` with its numbers to the microsecond (its own test scenarios are replayed
//! in `tests/guava_conformance.rs`), lock-free:
//!
//! ```
//! use floodgate::compat::guava::GuavaRateLimiter; // Guava's return types (f64 seconds, bool)
//! use floodgate::{ManualClock, SmoothBursty, SmoothWarmingUp};
//! use std::time::Duration;
//! let limiter = SmoothBursty::create_with_clock(5.0, ManualClock::new())?; // RateLimiter.create(5.0)
//! assert_eq!(limiter.acquire_permits(1)?, 0.0); // acquire(): seconds slept
//! assert_eq!(limiter.acquire_permits(1)?, 0.2); // slept on the (manual) clock
//! assert!(!limiter.try_acquire_timeout(1, Duration::ZERO)?); // tryAcquire()
//! let warming = SmoothWarmingUp::create(2.0, Duration::from_secs(4))?; // create(2.0, 4, SECONDS)
//! # let _ = warming;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! `create(r)` is on the real clock; `set_rate`, `rate`, `reserve` are there too, and both
//! implement [`Limiter`](crate::Limiter), so they fit anywhere the other limiters do. The README's
//! Guava table maps every method.
//!
//! ## Shared via Redis
//!
//! Many processes, one limit: each decision is one Lua script on the Redis server's clock, and
//! when Redis does not answer within the timeout the [`FailurePolicy`] decides. During an outage
//! the limiter's circuit breaker has the policy decide at once, without waiting for the timeout,
//! until a probe finds Redis back; a key Redis denied is denied locally until its `retry_after`
//! (both on by default; see [`RedisLimiter`]):
//!
//! ```no_run
//! # #[cfg(feature = "redis")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use floodgate::{Gcra, Rate, backend::FailurePolicy, redis::{RedisBackend, RedisConfig, RedisLimiter}};
//! let config = RedisConfig::single("redis://127.0.0.1:6379").timeout(std::time::Duration::from_millis(50));
//! let backend = RedisBackend::connect(config).await?; // eager; clone it freely: one multiplexed connection
//! let fallback = FailurePolicy::local_fallback(0.25)?; // Redis down: each of 4 processes allows 1/4
//! let limiter = RedisLimiter::new(&backend, "api", Gcra::new(Rate::per_second(100), 100)?, fallback)?;
//! let allowed = limiter.try_acquire("user-42", 1).await?.is_allowed(); // sync: blocking_try_acquire
//! # let _ = allowed; Ok(()) }
//! ```
//!
//! [`RedisLimiter`] takes the same configuration types as the local engine: [`FixedWindow`],
//! [`SlidingWindow`](crate::SlidingWindow), [`SlidingLog`](crate::SlidingLog) and [`Gcra`]; the
//! same code runs on a Redis Cluster (`RedisConfig::cluster`). Memcached:
//! [`memcached`](crate::memcached) (feature `memcached`), with a [`SlidingWindow`](crate::SlidingWindow).
//!
//! ## HTTP + Redis or memcached
//!
//! A [`RedisLimiter`](crate::redis::RedisLimiter) or a
//! [`MemcachedLimiter`](crate::memcached::MemcachedLimiter) goes straight into the tower layer:
//! each request's decision is a round trip awaited on the server's runtime
//! ([`KeyedLimiter::decide`](crate::middleware::KeyedLimiter::decide)), with the same client-IP
//! key, header fields and problem body as a local limit, and every server that uses the same
//! store shares the count. Store failures are decided by the limiter's failure policy (and,
//! during an outage, at once by its circuit breaker).
//!
//! ```no_run
//! # #[cfg(all(feature = "axum", feature = "redis"))]
//! # mod server {
//! use axum::Router;
//! use floodgate::middleware::{Policy, RateLimitLayer};
//! use floodgate::FixedWindow;
//! use floodgate::redis::RedisLimiter;
//!
//! pub fn app(limiter: RedisLimiter<FixedWindow>) -> Result<Router, floodgate::middleware::InvalidPolicyName> {
//!     Ok(Router::new()
//!         .route("/", axum::routing::get(|| async { "hello" }))
//!         .layer(RateLimitLayer::per_ip(limiter).policy(Policy::new("per-ip")?)))
//! }
//! # }
//! ```
//!
//! ## Observability
//!
//! With the feature `metrics`, each layer counts its requests by outcome and times its decisions
//! under its policy's name, Redis and memcached count failures by kind, and a keyed map's size
//! and evictions are recorded when you ask (at scrape time); with `tracing`, each 429 is a
//! `DEBUG` event and backend failures are `WARN`s. The names and labels are listed in
//! [`observe`](crate::observe); `examples/prometheus.rs` serves them as Prometheus text
//! (`cargo run --example prometheus --features axum,metrics`).
//!
//! ```
//! # #[cfg(feature = "metrics")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use floodgate::{FixedWindow, Keyed};
//! let per_ip: Keyed<floodgate::IpKey, _> = Keyed::new(FixedWindow::new(60, std::time::Duration::from_secs(60))?, 100_000)?;
//! floodgate::observe::describe(); // help texts, once, after installing a recorder
//! per_ip.stats().record("per-ip"); // floodgate_keyed_keys{limiter="per-ip"} and evictions
//! # Ok(()) }
//! # #[cfg(not(feature = "metrics"))] fn main() {}
//! ```
//!
//! ## From tower_governor to floodgate
//!
//! A typical tower_governor setup (one permit back every 2 s, bursts of 5, per peer IP, with its
//! `x-ratelimit-*` headers):
//!
//! ```text
//! let conf = GovernorConfigBuilder::default().per_second(2).burst_size(5).use_headers().finish().unwrap();
//! let app = Router::new().route("/", get(hello)).layer(GovernorLayer::new(conf));
//! // + a thread calling conf.limiter().retain_recent() every minute
//! ```
//!
//! is in floodgate (the same GCRA, the same header names for existing clients):
//!
//! ```
//! # #[cfg(feature = "axum")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use floodgate::middleware::{HeaderStyle, LayerSettings, RateLimitLayer};
//! use floodgate::{Gcra, Keyed, Rate};
//! let per_ip = Keyed::new(Gcra::new(Rate::new(1, std::time::Duration::from_secs(2)), 5)?, 100_000)?;
//! let layer = RateLimitLayer::per_ip(per_ip).header_style(HeaderStyle::XRateLimit);
//! let app: axum::Router = axum::Router::new().route("/", axum::routing::get(|| async { "hello" })).layer(layer);
//! # use tower::ServiceExt;
//! # let mut request = axum::http::Request::new(axum::body::Body::empty());
//! # let peer: std::net::SocketAddr = "192.0.2.1:1000".parse()?;
//! # request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
//! # let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! # let response = runtime.block_on(app.oneshot(request))?;
//! # assert_eq!(response.headers()["x-ratelimit-limit"], "5");
//! # assert_eq!(response.headers()["x-ratelimit-remaining"], "4");
//! # Ok(()) }
//! # #[cfg(not(feature = "axum"))] fn main() {}
//! ```
//!
//! | tower_governor | floodgate |
//! |---|---|
//! | `.per_second(s)` / `.per_millisecond(ms)` / `.period(d)`: **one** permit back every `s` seconds | [`Rate::new`]`(1, d)`: `Gcra::new(Rate::new(1, Duration::from_secs(s)), burst)` (or say what you mean: `Rate::per_minute(30)`) |
//! | `.burst_size(b)` | the second argument of [`Gcra::new`] |
//! | `GovernorConfig::default()` (8, one every 500 ms) / `::secure()` (2, one every 4 s) | `Gcra::new(Rate::new(1, Duration::from_millis(500)), 8)` / `Gcra::new(Rate::new(1, Duration::from_secs(4)), 2)` |
//! | `GovernorLayer::new(config)` | [`RateLimitLayer::per_ip`]`(Keyed::new(algorithm, max_keys)?)` |
//! | `PeerIpKeyExtractor` (the default) | [`ClientIp`] (the default of `per_ip`); IPv6 is keyed by /56, `ClientIp::new(IpKeyer::new().with_ipv6_prefix(128)?)` keys each address |
//! | `SmartIpKeyExtractor`: the **first** `X-Forwarded-For` entry, else `X-Real-IP`, `Forwarded`, the peer | [`ClientIp::behind_proxies`]`(ProxyHeader::XForwardedFor, hops)`: the entry `hops` from the right, the one your proxies wrote (the first is the client's to forge). For `X-Real-IP` set by your proxy: a [`KeyFn`] reading it |
//! | `GlobalKeyExtractor` | [`RateLimitLayer::with_key`]`(Keyed::<(), _>::new(algorithm, 1)?, KeyFn(\|_: &Request<B>\| Some(())))` |
//! | a custom `KeyExtractor` (e.g. bearer token) | a [`KeyFn`] closure, or `impl` [`KeyExtractor`](crate::middleware::KeyExtractor) |
//! | `.use_headers()`: `x-ratelimit-limit`, `x-ratelimit-remaining`, `x-ratelimit-after` | `.header_style(`[`HeaderStyle::XRateLimit`]`)`: the same, plus `x-ratelimit-reset`; the default is draft-11 `RateLimit-Policy` / `RateLimit` |
//! | `.methods(vec![Method::GET])`: limit only these | [`RateLimitLayer::skip_method`] for each method to leave out; [`RateLimitLayer::skip_path`] |
//! | `.error_handler(f)`; the 429 body `Too Many Requests! Wait for 2s` | [`RateLimitLayer::denial_body`]`(DenialBody::custom(f))`; default problem+json, or `DenialBody::PlainText` |
//! | `UnableToExtractKey`: `500 Unable To Extract Key!` to the client | a bare `500`, the reason logged once on the server; or [`MissingKey::Allow`](crate::middleware::MissingKey) |
//! | a background thread calling `retain_recent()` | nothing: idle keys are swept inside calls, and `max_keys` bounds memory |
//! | `config.limiter().len()` | [`RateLimitLayer::limiter`]`().len()`, `.stats()` |
//! | feature `tracing` | features `tracing` and `metrics` ([`observe`](crate::observe)) |
//!
//! Differences to expect: `x-ratelimit-remaining` counts whole permits available now (as
//! tower_governor's does); `Retry-After` is rounded **up** to whole seconds, so a client that
//! honours it is never early; [`RateLimitLayer::shape`] can delay instead of refuse.
//!
//! [`AtomicLimiter`]: crate::AtomicLimiter
//! [`Gcra`]: crate::Gcra
//! [`Gcra::new`]: crate::Gcra::new
//! [`TokenBucket`]: crate::TokenBucket
//! [`FixedWindow`]: crate::FixedWindow
//! [`FixedWindow::aligned`]: crate::FixedWindow::aligned
//! [`Keyed`]: crate::Keyed
//! [`Keyed::builder`]: crate::Keyed::builder
//! [`IpKey`]: crate::IpKey
//! [`Rate::new`]: crate::Rate::new
//! [`Decision`]: crate::Decision
//! [`Decision::retry_after`]: crate::Decision::retry_after
//! [`Decision::remaining`]: crate::Decision::remaining
//! [`SmoothBursty`]: crate::SmoothBursty
//! [`SmoothWarmingUp`]: crate::SmoothWarmingUp
//! [`FailurePolicy`]: crate::backend::FailurePolicy
//! [`RedisLimiter`]: crate::redis::RedisLimiter
//! [`RateLimitLayer`]: crate::middleware::RateLimitLayer
//! [`RateLimitLayer::per_ip`]: crate::middleware::RateLimitLayer::per_ip
//! [`RateLimitLayer::with_key`]: crate::middleware::RateLimitLayer::with_key
//! [`RateLimitLayer::shape`]: crate::middleware::RateLimitLayer::shape
//! [`RateLimitLayer::header_style`]: crate::middleware::LayerSettings::header_style
//! [`RateLimitLayer::skip_method`]: crate::middleware::LayerSettings::skip_method
//! [`RateLimitLayer::skip_path`]: crate::middleware::LayerSettings::skip_path
//! [`RateLimitLayer::denial_body`]: crate::middleware::LayerSettings::denial_body
//! [`RateLimitLayer::limiter`]: crate::middleware::RateLimitLayer::limiter
//! [`Policy`]: crate::middleware::Policy
//! [`KeyFn`]: crate::middleware::KeyFn
//! [`ClientIp`]: crate::middleware::ClientIp
//! [`ClientIp::behind_proxies`]: crate::middleware::ClientIp::behind_proxies
//! [`HeaderStyle::XRateLimit`]: crate::middleware::HeaderStyle::XRateLimit
