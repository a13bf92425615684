//! Metrics (feature `metrics`) and tracing events (feature `tracing`): exact counter values after
//! known sequences on a `ManualClock` (or tokio's paused time), read from a thread-local
//! `DebuggingRecorder`, and events read by a small capturing subscriber.
//!
//! Each snapshot of the debugging recorder hands back what was counted since the previous one,
//! so a test can check one phase at a time.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use floodgate::keyed::WhenFull;
use floodgate::middleware::{KeyFn, LayerSettings, MissingKey, Policy, RateLimitLayer};
use floodgate::{FixedWindow, Keyed, ManualClock, TokioClock};
use http::{Method, Request, Response};
use http_body_util::Empty;
use hyper::body::Bytes;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tower::{Layer, Service, ServiceExt};

/// The metrics recorded since the last call, as `name{label=value,…}` → value: a counter's
/// increase, a gauge's value, a histogram's number of samples (each checked to be a duration
/// between 0 and a 60 s hang bound).
fn recorded(snapshotter: &Snapshotter) -> BTreeMap<String, u64> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            let value = match value {
                DebugValue::Counter(n) => n,
                DebugValue::Gauge(g) => g.into_inner() as u64,
                DebugValue::Histogram(samples) => {
                    for s in &samples {
                        assert!((0.0..60.0).contains(&s.into_inner()), "{name}: {s}");
                    }
                    samples.len() as u64
                }
            };
            (name, value)
        })
        .filter(|(_, value)| *value != 0)
        .collect()
}

fn expected(entries: &[(&str, u64)]) -> BTreeMap<String, u64> {
    entries.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
}

fn ok()
-> impl Service<Request<()>, Response = Response<Empty<Bytes>>, Error = Infallible, Future = impl Send>
+ Clone {
    tower::service_fn(|_: Request<()>| async { Ok(Response::new(Empty::new())) })
}

fn get(peer: Option<&str>, method: Method, path: &str) -> Request<()> {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .body(())
        .unwrap();
    if let Some(peer) = peer {
        let peer: std::net::SocketAddr = peer.parse().unwrap();
        request.extensions_mut().insert(peer);
    }
    request
}

async fn status<S, B>(service: &S, request: Request<()>) -> u16
where
    S: Service<Request<()>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    let response = service.clone().oneshot(request).await.unwrap();
    response.status().as_u16()
}

fn per_ip(limit: u32, clock: &ManualClock) -> Keyed<floodgate::IpKey, FixedWindow, ManualClock> {
    Keyed::builder(FixedWindow::new(limit, Duration::from_secs(60)).unwrap())
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn the_layer_counts_every_outcome_under_its_policy_name() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let clock = ManualClock::new();
    let service = RateLimitLayer::per_ip(per_ip(2, &clock))
        .policy(Policy::new("per-ip").unwrap())
        .skip_method(Method::OPTIONS)
        .layer(ok());
    let a = Some("192.0.2.1:1000");
    let b = Some("192.0.2.2:1000");

    let mut statuses = Vec::new();
    for (peer, method) in [
        (a, Method::GET),
        (a, Method::GET),
        (a, Method::GET),     // the third in the window: 429
        (b, Method::GET),     // another client
        (a, Method::OPTIONS), // skipped: not counted, not timed
        (None, Method::GET),  // no peer address: a bare 500
    ] {
        statuses.push(status(&service, get(peer, method, "/")).await);
    }
    assert_eq!(statuses, [200, 200, 429, 200, 200, 500]);
    assert_eq!(
        recorded(&snapshotter),
        expected(&[
            ("floodgate_decision_seconds{limiter=per-ip}", 4),
            (
                "floodgate_requests_total{limiter=per-ip,outcome=allowed}",
                3
            ),
            ("floodgate_requests_total{limiter=per-ip,outcome=denied}", 1),
            ("floodgate_requests_total{limiter=per-ip,outcome=no_key}", 1),
        ])
    );

    // The next window: allowed again. A snapshot holds only what came after the last one.
    clock.advance(Duration::from_secs(60));
    assert_eq!(status(&service, get(a, Method::GET, "/")).await, 200);
    assert_eq!(
        recorded(&snapshotter),
        expected(&[
            ("floodgate_decision_seconds{limiter=per-ip}", 1),
            (
                "floodgate_requests_total{limiter=per-ip,outcome=allowed}",
                1
            ),
        ])
    );
}

#[tokio::test(flavor = "current_thread")]
async fn stacked_layers_count_under_their_own_names_and_setup_errors_have_outcomes() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let clock = ManualClock::new();
    // Per user (a header; requests without one pass unlimited), inside per IP.
    let per_user: Keyed<String, _, _> =
        Keyed::builder(FixedWindow::new(1, Duration::from_secs(60)).unwrap())
            .clock(clock.clone())
            .build()
            .unwrap();
    let user = KeyFn(|r: &Request<()>| Some(r.headers().get("x-user")?.to_str().ok()?.to_owned()));
    let inner = RateLimitLayer::with_key(per_user, user)
        .policy(Policy::new("per-user").unwrap())
        .on_missing_key(MissingKey::Allow)
        .layer(ok());
    let outer = RateLimitLayer::per_ip(per_ip(10, &clock))
        .policy(Policy::new("per-ip").unwrap())
        .permits_per_request(2)
        .unwrap();
    let per_ip_handle = Arc::clone(outer.limiter());
    let service = outer.layer(inner);
    let as_ann = || {
        let mut r = get(Some("192.0.2.1:1000"), Method::GET, "/");
        r.headers_mut().insert("x-user", "ann".parse().unwrap());
        r
    };
    assert_eq!(status(&service, as_ann()).await, 200);
    assert_eq!(status(&service, as_ann()).await, 429); // per-user: 1 a minute
    assert_eq!(
        status(&service, get(Some("192.0.2.1:1000"), Method::GET, "/")).await,
        200 // no user: per-user lets it through unlimited
    );
    // The per-IP limit is lowered below the 2 permits a request costs: a setup 500.
    per_ip_handle.set_limit(1).unwrap();
    assert_eq!(status(&service, as_ann()).await, 500);
    assert_eq!(
        recorded(&snapshotter),
        expected(&[
            ("floodgate_decision_seconds{limiter=per-ip}", 4),
            ("floodgate_decision_seconds{limiter=per-user}", 2),
            (
                "floodgate_requests_total{limiter=per-ip,outcome=allowed}",
                3
            ),
            (
                "floodgate_requests_total{limiter=per-ip,outcome=never_granted}",
                1
            ),
            (
                "floodgate_requests_total{limiter=per-user,outcome=allowed}",
                1
            ),
            (
                "floodgate_requests_total{limiter=per-user,outcome=denied}",
                1
            ),
            (
                "floodgate_requests_total{limiter=per-user,outcome=no_key}",
                1
            ),
        ])
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn shaped_requests_count_as_delayed_and_those_that_cannot_wait_as_denied() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
        .clock(TokioClock::starting_at(0))
        .build()
        .unwrap();
    let service = RateLimitLayer::per_ip(per_ip)
        .shape(Duration::from_millis(1500), 1)
        .layer(ok());
    let a = || get(Some("192.0.2.1:1000"), Method::GET, "/");
    assert_eq!(status(&service, a()).await, 200);
    let started = tokio::time::Instant::now();
    assert_eq!(status(&service, a()).await, 200); // waited for the next window
    assert_eq!(started.elapsed(), Duration::from_secs(1));
    // One waits (the only place), the other finds no place: 429 at once.
    let (waited, refused) = tokio::join!(status(&service, a()), async {
        tokio::task::yield_now().await;
        status(&service, a()).await
    });
    assert_eq!((waited, refused), (200, 429));
    assert_eq!(
        recorded(&snapshotter),
        expected(&[
            ("floodgate_decision_seconds{limiter=default}", 4),
            (
                "floodgate_requests_total{limiter=default,outcome=allowed}",
                1
            ),
            (
                "floodgate_requests_total{limiter=default,outcome=delayed}",
                2
            ),
            (
                "floodgate_requests_total{limiter=default,outcome=denied}",
                1
            ),
        ])
    );
}

#[test]
fn keyed_counts_are_recorded_as_a_gauge_and_totals() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let build = |when_full| {
        Keyed::builder(FixedWindow::new(5, Duration::from_secs(60)).unwrap())
            .clock(clock.clone())
            .max_keys(2)
            .shards(1)
            .when_full(when_full)
            .build()
            .unwrap()
    };
    let evicting: Keyed<u32, _, _> = build(WhenFull::EvictLeastUsed);
    let refusing: Keyed<u32, _, _> = build(WhenFull::DenyNewKeys);
    for key in 1..=3 {
        evicting.try_acquire(&key, 1).unwrap(); // key 3 evicts a live key
        refusing.try_acquire(&key, 1).unwrap(); // key 3 is refused
    }
    clock.advance(Duration::from_secs(60)); // every window over: all keys idle
    refusing.retain_recent();
    metrics::with_local_recorder(&recorder, || {
        evicting.stats().record("evicting");
        refusing.stats().record("refusing");
    });
    assert_eq!(
        recorded(&snapshotter),
        expected(&[
            (
                "floodgate_keyed_evictions_total{limiter=evicting,kind=live}",
                1
            ),
            (
                "floodgate_keyed_evictions_total{limiter=refusing,kind=idle}",
                2
            ),
            ("floodgate_keyed_keys{limiter=evicting}", 2),
            (
                "floodgate_keyed_refused_new_keys_total{limiter=refusing}",
                1
            ),
        ])
    );
    // Recorded again: the same totals (absolute values), nothing double-counted.
    metrics::with_local_recorder(&recorder, || evicting.stats().record("evicting"));
    metrics::with_local_recorder(&recorder, || evicting.stats().record("evicting"));
    let again = recorded(&snapshotter);
    assert_eq!(
        again.get("floodgate_keyed_evictions_total{limiter=evicting,kind=live}"),
        Some(&1)
    );
}

/// The events a test emitted: level, then the fields as `name=value` joined by spaces.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl Captured {
    fn take(&self) -> Vec<(tracing::Level, String)> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if !self.0.is_empty() {
            self.0.push(' ');
        }
        self.0.push_str(&format!("{}={value:?}", field.name()));
    }
}

impl tracing::Subscriber for Captured {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test(flavor = "current_thread")]
async fn a_denial_is_a_debug_event_and_a_setup_error_one_error_event() {
    let captured = Captured::default();
    let _subscriber = tracing::subscriber::set_default(captured.clone());
    let service = RateLimitLayer::per_ip(per_ip(1, &ManualClock::new()))
        .policy(Policy::new("per-ip").unwrap())
        .layer(ok());
    let a = || get(Some("192.0.2.1:1000"), Method::GET, "/api/items?page=2");
    assert_eq!(status(&service, a()).await, 200);
    assert_eq!(status(&service, a()).await, 429);
    for _ in 0..3 {
        assert_eq!(status(&service, get(None, Method::GET, "/")).await, 500);
    }
    let events = captured.take();
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(
        events[0],
        (
            tracing::Level::DEBUG,
            r#"message=rate limited: 429 limiter="per-ip" path="/api/items" limit=1 retry_after_ms=60000"#
                .to_owned()
        )
    );
    // Three 500s, one line: the reason, under the policy's name.
    assert_eq!(events[1].0, tracing::Level::ERROR);
    assert!(
        events[1].1.contains("into_make_service_with_connect_info")
            && events[1].1.ends_with(r#"limiter="per-ip""#),
        "{events:?}"
    );
}

/// A loopback port nobody listens on (bound, then released): connections are refused at once.
#[cfg(any(feature = "memcached", feature = "redis"))]
fn refused_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The memcached timeout: a hang bound on each failing call, never reached when connections are
/// refused (the test asserts the kind, never a duration).
#[cfg(feature = "memcached")]
const TIMEOUT: Duration = Duration::from_secs(60);

#[cfg(feature = "memcached")]
#[test]
fn memcached_failures_are_counted_by_kind_and_warned_at_powers_of_two() {
    use floodgate::backend::FailurePolicy;
    use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let captured = Captured::default();
    let _subscriber = tracing::subscriber::set_default(captured.clone());
    let addr = format!("127.0.0.1:{}", refused_port());
    let backend =
        MemcachedBackend::connect(MemcachedConfig::new(&addr).timeout(TIMEOUT).lazy()).unwrap();
    let window = floodgate::SlidingWindow::new(10, Duration::from_secs(60), 60).unwrap();
    let limiter =
        MemcachedLimiter::new(&backend, "login", window, FailurePolicy::FailOpen).unwrap();
    metrics::with_local_recorder(&recorder, || {
        for _ in 0..5 {
            assert!(
                limiter
                    .blocking_try_acquire_outcome("k", 1)
                    .unwrap()
                    .failure()
                    .is_some()
            );
        }
    });
    assert_eq!(limiter.failures().errors, 5);
    assert_eq!(
        recorded(&snapshotter),
        expected(&[(
            "floodgate_backend_failures_total{backend=memcached,limiter=login,kind=error}",
            5
        )])
    );
    let events = captured.take();
    let levels: Vec<_> = events.iter().map(|(level, _)| *level).collect();
    use tracing::Level;
    assert_eq!(
        levels,
        [
            Level::WARN,
            Level::WARN,
            Level::DEBUG,
            Level::WARN,
            Level::DEBUG
        ],
        "{events:?}"
    );
    let first = &events[0].1;
    assert!(
        first.starts_with(
            r#"message=rate-limit backend failed; the failure policy decided backend="memcached" limiter="login" kind="error" failures=1 error="#
        ) && first.contains("refused"),
        "{first}"
    );
}

#[cfg(feature = "redis")]
#[test]
fn redis_failures_are_counted_by_kind() {
    use floodgate::FixedWindow;
    use floodgate::backend::FailurePolicy;
    use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let url = format!("redis://127.0.0.1:{}", refused_port());
    // Short: the client may report the refused connection as an error or time out waiting for
    // one; either way the kind is counted as `FailureCounts` counts it.
    let timeout = Duration::from_millis(150);
    let backend =
        RedisBackend::blocking_connect(RedisConfig::single(url).timeout(timeout).lazy()).unwrap();
    let window = FixedWindow::new(10, Duration::from_secs(60)).unwrap();
    let limiter = RedisLimiter::new(&backend, "api", window, FailurePolicy::FailClosed).unwrap();
    metrics::with_local_recorder(&recorder, || {
        for _ in 0..3 {
            assert!(!limiter.blocking_try_acquire("k", 1).unwrap().is_allowed());
        }
    });
    let counts = limiter.failures();
    assert_eq!(counts.total(), 3);
    let by_kind = [("timeout", counts.timeouts), ("error", counts.errors)]
        .into_iter()
        .filter(|&(_, n)| n > 0)
        .map(|(kind, n)| {
            (
                format!(
                    "floodgate_backend_failures_total{{backend=redis,limiter=api,kind={kind}}}"
                ),
                n,
            )
        })
        .collect::<BTreeMap<_, _>>();
    assert_eq!(recorded(&snapshotter), by_kind);
}

/// A key too long for memcached (a client-controlled header read by a `KeyFn`) is a 500, and the
/// one log line says so: it used to name a permit count above the limit ("lowered by
/// set_limit?"), a cause the operator would look for in vain.
#[cfg(feature = "memcached")]
#[tokio::test(flavor = "current_thread")]
async fn a_key_too_long_for_memcached_is_a_500_logged_with_its_cause() {
    use floodgate::backend::FailurePolicy;
    use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};

    let captured = Captured::default();
    let _subscriber = tracing::subscriber::set_default(captured.clone());
    let addr = format!("127.0.0.1:{}", refused_port());
    let backend =
        MemcachedBackend::connect(MemcachedConfig::new(&addr).timeout(TIMEOUT).lazy()).unwrap();
    let window = floodgate::SlidingWindow::new(10, Duration::from_secs(60), 60).unwrap();
    let limiter = MemcachedLimiter::new(&backend, "user", window, FailurePolicy::FailOpen).unwrap();
    let user = KeyFn(|r: &Request<()>| Some(r.headers().get("x-user")?.to_str().ok()?.to_owned()));
    let service = RateLimitLayer::with_key(limiter, user)
        .policy(Policy::new("per-user").unwrap())
        .layer(ok());
    let mut request = get(Some("192.0.2.1:1000"), Method::GET, "/");
    request
        .headers_mut()
        .insert("x-user", "u".repeat(300).parse().unwrap());
    assert_eq!(status(&service, request).await, 500);
    let events = captured.take();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, tracing::Level::ERROR);
    assert!(
        events[0].1.contains("too long for the limiter's store")
            && !events[0].1.contains("set_limit"),
        "{events:?}"
    );
}

/// A shaped request whose caller goes away while it waits (a client disconnect drops the
/// response future) was decided (its latency is recorded) but ended in no outcome: the outcomes
/// summed to fewer requests than the decisions. It ends as `cancelled`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_shaped_request_dropped_while_it_waits_counts_as_cancelled() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
        .clock(TokioClock::starting_at(0))
        .build()
        .unwrap();
    let service = RateLimitLayer::per_ip(per_ip)
        .shape(Duration::from_millis(1500), 1)
        .layer(ok());
    let a = || get(Some("192.0.2.1:1000"), Method::GET, "/");
    assert_eq!(status(&service, a()).await, 200);
    let gave_up = tokio::time::timeout(Duration::from_millis(100), status(&service, a())).await;
    assert!(
        gave_up.is_err(),
        "the shaped request waits for the next window"
    );
    assert_eq!(
        recorded(&snapshotter),
        expected(&[
            ("floodgate_decision_seconds{limiter=default}", 2),
            (
                "floodgate_requests_total{limiter=default,outcome=allowed}",
                1
            ),
            (
                "floodgate_requests_total{limiter=default,outcome=cancelled}",
                1
            ),
        ])
    );
    // The place it held is free: the next one waits and is served.
    assert_eq!(status(&service, a()).await, 200);
    assert_eq!(
        recorded(&snapshotter),
        expected(&[
            ("floodgate_decision_seconds{limiter=default}", 1),
            (
                "floodgate_requests_total{limiter=default,outcome=delayed}",
                1
            ),
        ])
    );
}

/// A limiter whose decisions are a round trip away ([`Decided::Later`], as memcached's): the
/// layer awaits them, and shapes a denial on tokio's timer.
struct Remote(Keyed<floodgate::IpKey, FixedWindow, TokioClock>);

impl floodgate::middleware::KeyedLimiter<floodgate::IpKey> for Remote {
    fn try_acquire(
        &self,
        key: &floodgate::IpKey,
        n: u32,
    ) -> Result<floodgate::Decision, floodgate::AcquireError> {
        self.0.try_acquire(key, n)
    }

    fn check_permits(&self, n: u32) -> Result<(), floodgate::AcquireError> {
        floodgate::middleware::KeyedLimiter::check_permits(&self.0, n)
    }

    fn clock(&self) -> &dyn floodgate::Clock {
        floodgate::middleware::KeyedLimiter::clock(&self.0)
    }

    fn decide(self: &Arc<Self>, key: &floodgate::IpKey, n: u32) -> floodgate::middleware::Decided {
        let decided = self.0.try_acquire(key, n);
        floodgate::middleware::Decided::Later(Box::pin(async move {
            tokio::task::yield_now().await;
            decided
        }))
    }
}

/// As above, for a decision made a round trip away: dropped while it waits to be shaped, it
/// ends as `cancelled`; dropped before its decision came back, it was never decided and counts
/// nowhere.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_remote_decision_dropped_while_it_waits_counts_as_cancelled() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);
    let per_ip = Keyed::builder(FixedWindow::new(1, Duration::from_secs(1)).unwrap())
        .clock(TokioClock::starting_at(0))
        .build()
        .unwrap();
    let service = RateLimitLayer::per_ip(Remote(per_ip))
        .shape(Duration::from_millis(1500), 1)
        .layer(ok());
    let a = || get(Some("192.0.2.1:1000"), Method::GET, "/");
    assert_eq!(status(&service, a()).await, 200);
    let gave_up = tokio::time::timeout(Duration::from_millis(100), status(&service, a())).await;
    assert!(
        gave_up.is_err(),
        "the shaped request waits for the next window"
    );
    assert_eq!(
        recorded(&snapshotter),
        expected(&[
            ("floodgate_decision_seconds{limiter=default}", 2),
            (
                "floodgate_requests_total{limiter=default,outcome=allowed}",
                1
            ),
            (
                "floodgate_requests_total{limiter=default,outcome=cancelled}",
                1
            ),
        ])
    );
    // Dropped before the round trip ends: not decided, not counted.
    let mut pending = Box::pin(service.clone().oneshot(a()));
    assert!(futures_poll_once(pending.as_mut()).await.is_none());
    drop(pending);
    assert_eq!(recorded(&snapshotter), expected(&[]));
}

/// Polls `future` once: its output if it was ready.
async fn futures_poll_once<F: std::future::Future + Unpin>(mut future: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut future).poll(cx) {
            std::task::Poll::Ready(output) => Some(output),
            std::task::Poll::Pending => None,
        })
    })
    .await
}
