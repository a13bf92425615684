//! The in-flight tower layer in-process (feature `tower`): requests in progress limited globally
//! and per key, the `concurrent-requests` header fields (checked with a structured-field
//! parser), 503 / 429 problem bodies, how long a permit is held (until the response body ends;
//! given back on an error or a cancelled request), the bounded FIFO queue, and setup errors.
//!
//! No sleeps and no wall time: a pending request is a future polled by hand with a no-op waker,
//! and an inner service that must stay "in progress" waits on a gate the test opens.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use floodgate::concurrency::{InFlight, KeyedInFlight};
use floodgate::middleware::{
    HeaderStyle, InFlightLayer, LayerSettings, MissingKey, Policy, RateLimitLayer,
    TEMPORARY_REDUCED_CAPACITY,
};
use floodgate::{ConfigError, FixedWindow, IpKeyer, Keyed, ManualClock};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceExt};

#[path = "support/ratelimit_fields.rs"]
mod ratelimit_fields;
use ratelimit_fields::{checked_fields, parse_list};

#[path = "support/http_service.rs"]
mod http_service;
use http_service::{Body, from_peer, hello};

/// An inner service whose requests stay in progress until the test adds a permit to `gate`
/// (one per request to let through).
fn gated(
    gate: &Arc<Semaphore>,
) -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static {
    let gate = Arc::clone(gate);
    tower::service_fn(move |_request: Request<Body>| {
        let gate = Arc::clone(&gate);
        async move {
            gate.acquire().await.unwrap().forget();
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        }
    })
}

/// Polls `future` once, with a waker that does nothing: the test decides when to look again.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

/// A request in flight, as a boxed future the test polls by hand.
type Pending<B> = Pin<Box<dyn Future<Output = Result<Response<B>, Infallible>> + Send>>;

fn start<S, B>(service: &S, request: Request<Body>) -> Pending<B>
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    Box::pin(service.clone().oneshot(request))
}

/// The response of a request that must already be answered.
fn ready<B>(pending: &mut Pending<B>) -> Response<B> {
    match poll_once(pending) {
        Poll::Ready(response) => response.unwrap(),
        Poll::Pending => panic!("the request is still waiting"),
    }
}

/// Status, the checked draft -11 fields (policy, state), `Retry-After`, and the body.
async fn answer<B>(response: Response<B>) -> (u16, Option<(String, String)>, Option<String>, String)
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Debug,
{
    let status = response.status().as_u16();
    let fields = checked_fields(response.headers());
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        fields,
        retry_after,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

fn text<'a>(headers: &'a http::HeaderMap, name: &str) -> &'a str {
    headers[name].to_str().unwrap()
}

fn fields(policy: &str, state: &str) -> Option<(String, String)> {
    Some((policy.to_owned(), state.to_owned()))
}

/// The problem+json body of a rejection with `status` under `policy`.
fn problem(status: u16, policy: &str) -> String {
    let (problem, title) = if status == 503 {
        (
            TEMPORARY_REDUCED_CAPACITY.to_owned(),
            "Request cannot be satisfied due to temporary server capacity constraints",
        )
    } else {
        (
            "https://iana.org/assignments/http-problem-types#quota-exceeded".to_owned(),
            "Request cannot be satisfied as assigned quota has been exceeded",
        )
    };
    format!(
        "{{\"type\":\"{problem}\",\"title\":\"{title}\",\"status\":{status},\
         \"violated-policies\":[\"{policy}\"]}}"
    )
}

const POLICY_2: &str = r#""default";q=2;qu="concurrent-requests""#;

#[tokio::test]
async fn a_global_limit_rejects_with_503_and_concurrency_fields() {
    let service = InFlightLayer::global(InFlight::new(2).unwrap()).layer(hello());
    let first = service.clone().oneshot(Request::default()).await.unwrap();
    let second = service.clone().oneshot(Request::default()).await.unwrap();
    let third = service.clone().oneshot(Request::default()).await.unwrap();
    assert_eq!(third.headers()["content-type"], "application/problem+json");
    assert_eq!(
        answer(third).await,
        (
            503,
            fields(POLICY_2, r#""default";r=0"#),
            Some("1".into()),
            problem(503, "default")
        )
    );
    assert_eq!(service.limiter().in_flight(), 2);
    assert_eq!(
        answer(first).await,
        (
            200,
            fields(POLICY_2, r#""default";r=1"#),
            None,
            "hello".into()
        )
    );
    assert_eq!(
        answer(second).await,
        (
            200,
            fields(POLICY_2, r#""default";r=0"#),
            None,
            "hello".into()
        )
    );
    assert_eq!(service.limiter().in_flight(), 0);
}

#[tokio::test]
async fn the_permit_is_held_until_the_response_body_ends() {
    let service = InFlightLayer::global(InFlight::new(1).unwrap()).layer(hello());
    let mut body = service
        .clone()
        .oneshot(Request::default())
        .await
        .unwrap()
        .into_body();
    // The handler has returned, but the body is not sent: still in progress.
    assert_eq!(service.limiter().in_flight(), 1);
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "hello");
    assert_eq!(service.limiter().in_flight(), 1); // the end of the body is not known yet
    assert!(body.frame().await.is_none());
    // The body has ended (and is still alive): the permit is back.
    assert_eq!(service.limiter().in_flight(), 0);
    let next = service.clone().oneshot(Request::default()).await.unwrap();
    assert_eq!(next.status(), 200);
    drop(body);
    assert_eq!(service.limiter().in_flight(), 1);
}

#[tokio::test]
async fn the_permit_is_held_while_the_handler_runs_and_given_back_on_cancel() {
    let gate = Arc::new(Semaphore::new(0));
    let service = InFlightLayer::global(InFlight::new(1).unwrap()).layer(gated(&gate));
    let mut running = start(&service, Request::default());
    assert!(poll_once(&mut running).is_pending());
    assert_eq!(service.limiter().in_flight(), 1);
    let rejected = ready(&mut start(&service, Request::default()));
    assert_eq!(rejected.status(), StatusCode::SERVICE_UNAVAILABLE);
    // The client leaves: the request is cancelled, its permit comes back.
    drop(running);
    assert_eq!(service.limiter().in_flight(), 0);
    let mut next = start(&service, Request::default());
    assert!(poll_once(&mut next).is_pending());
    gate.add_permits(1);
    let done = ready(&mut next);
    assert_eq!(service.limiter().in_flight(), 1); // until its body ends
    assert_eq!(answer(done).await.3, "done");
    assert_eq!(service.limiter().in_flight(), 0);
}

#[tokio::test]
async fn a_failed_handler_gives_its_permit_back() {
    let failing = tower::service_fn(|_request: Request<Body>| async {
        Err::<Response<Body>, &'static str>("handler failed")
    });
    let service = InFlightLayer::global(InFlight::new(1).unwrap()).layer(failing);
    for _ in 0..3 {
        let error = service.clone().oneshot(Request::default()).await;
        assert_eq!(error.unwrap_err(), "handler failed");
        assert_eq!(service.limiter().in_flight(), 0);
    }
}

#[tokio::test]
async fn the_queue_serves_waiters_in_order_up_to_its_bound() {
    let service = InFlightLayer::global(InFlight::new(1).unwrap())
        .queue(2)
        .layer(hello());
    let limiter = Arc::clone(service.limiter());
    let first = ready(&mut start(&service, Request::default()));
    let mut second = start(&service, Request::default());
    let mut third = start(&service, Request::default());
    assert!(poll_once(&mut second).is_pending());
    assert!(poll_once(&mut third).is_pending());
    assert_eq!(limiter.waiters(), 2);
    // The queue is full: rejected at once.
    let fourth = ready(&mut start(&service, Request::default()));
    assert_eq!(
        answer(fourth).await,
        (
            503,
            fields(
                r#""default";q=1;qu="concurrent-requests""#,
                r#""default";r=0"#
            ),
            Some("1".into()),
            problem(503, "default")
        )
    );
    // A cancelled waiter (its client left) gives its place up and takes nothing.
    drop(third);
    assert_eq!((limiter.waiters(), limiter.in_flight()), (1, 1));
    let mut fifth = start(&service, Request::default());
    assert!(poll_once(&mut fifth).is_pending()); // took the place `third` gave up
    assert_eq!(limiter.waiters(), 2);
    // The first request's body ends: its permit goes to the head of the queue.
    assert_eq!(answer(first).await.0, 200);
    assert!(poll_once(&mut fifth).is_pending()); // behind `second`
    let second = ready(&mut second);
    assert_eq!(
        answer(second).await,
        (
            200,
            fields(
                r#""default";q=1;qu="concurrent-requests""#,
                r#""default";r=0"#
            ),
            None,
            "hello".into()
        )
    );
    assert_eq!(answer(ready(&mut fifth)).await.0, 200);
    assert_eq!((limiter.in_flight(), limiter.waiters()), (0, 0));
}

#[tokio::test]
async fn a_per_key_limit_answers_429_when_asked_with_a_partition_key() {
    let layer =
        InFlightLayer::per_ip(KeyedInFlight::with_clock(1, 100, ManualClock::new()).unwrap())
            .status(StatusCode::TOO_MANY_REQUESTS)
            .unwrap()
            .retry_after(Duration::from_secs(5))
            .unwrap()
            .policy(Policy::new("per-ip").unwrap().partition_key(true))
            .unwrap();
    let per_ip = Arc::clone(layer.limiter());
    let service = layer.layer(hello());
    let held = ready(&mut start(&service, from_peer("192.0.2.1:1000")));
    let rejected = ready(&mut start(&service, from_peer("192.0.2.1:2000")));
    let other = ready(&mut start(&service, from_peer("192.0.2.2:1000")));
    let pk = |headers: &http::HeaderMap| {
        let policy = parse_list(headers["ratelimit-policy"].to_str().unwrap());
        assert_eq!(policy[0].qu.as_deref(), Some("concurrent-requests"));
        policy[0].pk.clone().unwrap()
    };
    assert_eq!(pk(held.headers()), pk(rejected.headers()));
    assert_ne!(pk(held.headers()), pk(other.headers()));
    let (status, checked, retry_after, body) = answer(rejected).await;
    assert_eq!((status, retry_after), (429, Some("5".into())));
    assert_eq!(body, problem(429, "per-ip"));
    let (policy, state) = checked.unwrap();
    assert!(
        policy.starts_with(r#""per-ip";q=1;qu="concurrent-requests";pk=:"#),
        "{policy}"
    );
    assert!(state.starts_with(r#""per-ip";r=0;pk=:"#), "{state}");
    let first_ip = IpKeyer::new().key("192.0.2.1".parse().unwrap());
    assert_eq!((per_ip.in_flight(&first_ip), per_ip.len()), (1, 2));
    drop((held, other));
    assert_eq!(
        ready(&mut start(&service, from_peer("192.0.2.1:1000"))).status(),
        200
    );
}

#[tokio::test]
async fn a_request_without_a_key_is_a_bare_500_or_passes_as_configured() {
    let keyed = || KeyedInFlight::with_clock(1, 100, ManualClock::new()).unwrap();
    let strict = InFlightLayer::per_ip(keyed()).layer(hello());
    let (status, checked, _, body) = answer(ready(&mut start(&strict, Request::default()))).await;
    assert_eq!(
        (status, checked, body.as_str()),
        (500, None, "Internal Server Error\n")
    );
    let lenient = InFlightLayer::per_ip(keyed())
        .on_missing_key(MissingKey::Allow)
        .layer(hello());
    // Unlimited: no permit, no fields.
    let a = ready(&mut start(&lenient, Request::default()));
    let b = ready(&mut start(&lenient, Request::default()));
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    assert!(a.headers().get("ratelimit").is_none());
    assert!(lenient.limiter().is_empty());
}

#[tokio::test]
async fn skipped_requests_take_no_permit_and_get_no_fields() {
    let service = InFlightLayer::global(InFlight::new(1).unwrap())
        .skip_path(|path| path == "/healthz")
        .layer(hello());
    let _held = ready(&mut start(&service, Request::default()));
    let probe = Request::builder()
        .uri("/healthz")
        .body(Body::default())
        .unwrap();
    let probe = ready(&mut start(&service, probe));
    assert_eq!(probe.status(), 200);
    assert!(probe.headers().get("ratelimit").is_none());
    assert_eq!(service.limiter().in_flight(), 1);
}

#[tokio::test]
async fn other_header_styles_have_no_reset_field() {
    let styled = |style| {
        InFlightLayer::global(InFlight::new(1).unwrap())
            .header_style(style)
            .layer(hello())
    };
    let draft06 = styled(HeaderStyle::Draft06);
    let allowed = ready(&mut start(&draft06, Request::default()));
    let denied = ready(&mut start(&draft06, Request::default()));
    let h = denied.headers();
    assert_eq!(
        (text(h, "ratelimit-limit"), text(h, "ratelimit-remaining")),
        ("1", "0")
    );
    assert_eq!(h["retry-after"], "1");
    assert!(h.get("ratelimit-reset").is_none() && h.get("ratelimit").is_none());
    assert_eq!(allowed.headers()["ratelimit-remaining"], "0");
    let x = styled(HeaderStyle::XRateLimit);
    let _held = ready(&mut start(&x, Request::default()));
    let denied = ready(&mut start(&x, Request::default()));
    let h = denied.headers();
    assert_eq!(
        (
            text(h, "x-ratelimit-limit"),
            text(h, "x-ratelimit-remaining")
        ),
        ("1", "0")
    );
    assert_eq!(
        (text(h, "x-ratelimit-after"), text(h, "retry-after")),
        ("1", "1")
    );
    assert!(h.get("x-ratelimit-reset").is_none());
    let none = styled(HeaderStyle::None);
    let _held = ready(&mut start(&none, Request::default()));
    let denied = ready(&mut start(&none, Request::default()));
    let names: Vec<&str> = denied.headers().keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["content-type", "retry-after"]);
}

#[tokio::test]
async fn under_a_rate_limit_each_layer_adds_its_item() {
    let per_ip = Keyed::builder(FixedWindow::new(5, Duration::from_secs(60)).unwrap())
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let minute = Policy::new("per-ip")
        .unwrap()
        .window(Duration::from_secs(60))
        .unwrap();
    let service = tower::ServiceBuilder::new()
        .layer(RateLimitLayer::per_ip(per_ip).policy(minute))
        .layer(
            InFlightLayer::global(InFlight::new(1).unwrap())
                .policy(Policy::new("concurrent").unwrap())
                .unwrap(),
        )
        .service(hello());
    let held = ready(&mut start(&service, from_peer("192.0.2.1:1000")));
    let (status, checked, retry_after, body) =
        answer(ready(&mut start(&service, from_peer("192.0.2.1:1000")))).await;
    assert_eq!((status, retry_after), (503, Some("1".into())));
    assert_eq!(body, problem(503, "concurrent"));
    assert_eq!(
        checked,
        fields(
            r#""concurrent";q=1;qu="concurrent-requests", "per-ip";q=5;w=60"#,
            r#""concurrent";r=0, "per-ip";r=3;t=60"#
        )
    );
    // The permit travels inside the outer layer's body too.
    assert_eq!(answer(held).await.0, 200);
    assert_eq!(
        ready(&mut start(&service, from_peer("192.0.2.1:1000"))).status(),
        200
    );
}

#[test]
fn setup_errors_name_the_constraint_and_the_value() {
    let global = || InFlightLayer::global(InFlight::new(1).unwrap());
    assert_eq!(
        global().status(StatusCode::BAD_GATEWAY).unwrap_err(),
        ConfigError::InvalidNumber {
            what: "in-flight rejection status",
            value: 502.0,
            expected: "429 or 503"
        }
    );
    assert!(matches!(
        global().retry_after(Duration::ZERO).unwrap_err(),
        ConfigError::DurationOutOfRange {
            value: Duration::ZERO,
            ..
        }
    ));
    assert!(matches!(
        global()
            .retry_after(Duration::from_millis(1_500))
            .unwrap_err(),
        ConfigError::Invalid {
            what: "in-flight Retry-After",
            ..
        }
    ));
    let windowed = Policy::new("w")
        .unwrap()
        .window(Duration::from_secs(1))
        .unwrap();
    let error = global().policy(windowed).unwrap_err().to_string();
    assert!(error.contains("no window"), "{error}");
    let error = global()
        .policy(Policy::new("pk").unwrap().partition_key(true))
        .unwrap_err()
        .to_string();
    assert!(error.contains("partition key"), "{error}");
}
