//! An acquire + release pair on an in-flight limit, every contender in the same group, on 1 and
//! 2 threads, so every figure is also a same-run ratio. The limit is never reached (every take
//! succeeds): the cost of the pair, not of waiting.
//!
//! * `acquire_release`: floodgate's `InFlight` (one CAS to take, one `fetch_sub` to give back),
//!   tokio's `Semaphore` (`try_acquire` + drop of the permit), and tower's `ConcurrencyLimit`
//!   around a service that answers at once (`poll_ready` takes the permit, `call`, and polling
//!   the response future to completion gives it back): what each costs a caller.
//! * `layer` (feature `tower`): one `http` request through floodgate's `InFlightLayer` (global,
//!   no header fields; the permit is given back when the response body is dropped) and through
//!   tower's `ConcurrencyLimitLayer`, around the same immediate service.
//!
//! Run: `cargo bench --bench in_flight` (add `--features tower` for the `layer` group).

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Barrier;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use floodgate::concurrency::InFlight;
use tokio::sync::Semaphore;
use tower::limit::ConcurrencyLimit;
use tower::{Service, service_fn};

/// One acquire + release, made fresh on each thread (a tower service is polled through `&mut`).
type Pair<'a> = Box<dyn FnMut() + Send + 'a>;

/// Runs a pair from `make` `iters` times on each of `threads` threads started together; the
/// wall time of the slowest.
fn on_threads<'a>(threads: usize, iters: u64, make: &(dyn Fn() -> Pair<'a> + Sync)) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut pair = make();
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        pair();
                    }
                    start.elapsed()
                })
            })
            .collect();
        barrier.wait();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap_or_default()
    })
}

/// One request through `service`: `poll_ready`, `call`, the response future polled to its end
/// (all ready at once: the inner service answers immediately and the limit is never reached),
/// then the response dropped.
fn one_request<S: Service<R>, R>(service: &mut S, request: R) {
    let mut cx = Context::from_waker(Waker::noop());
    let Poll::Ready(Ok(())) = service.poll_ready(&mut cx) else {
        panic!("the service is not ready")
    };
    let mut response = pin!(service.call(request));
    let Poll::Ready(Ok(response)) = response.as_mut().poll(&mut cx) else {
        panic!("the response is not ready")
    };
    drop(black_box(response));
}

const LIMIT: u32 = 1 << 20;

fn pairs(c: &mut Criterion) {
    let in_flight = InFlight::new(LIMIT).unwrap();
    let semaphore = Semaphore::new(LIMIT as usize);
    let immediate = service_fn(|_: u8| std::future::ready(Ok::<_, ()>(())));
    let tower = ConcurrencyLimit::new(immediate, LIMIT as usize);
    let floodgate = || -> Pair<'_> {
        Box::new(|| drop(black_box(in_flight.try_acquire(black_box(1)).unwrap())))
    };
    let tokio = || -> Pair<'_> { Box::new(|| drop(black_box(semaphore.try_acquire().unwrap()))) };
    let tower = || -> Pair<'_> {
        let mut service = tower.clone(); // clones share the semaphore
        Box::new(move || one_request(&mut service, black_box(0u8)))
    };
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("acquire_release/{threads}_threads"));
        group.bench_function("floodgate/in_flight", |b| {
            b.iter_custom(|iters| on_threads(threads, iters, &floodgate))
        });
        group.bench_function("tokio/semaphore", |b| {
            b.iter_custom(|iters| on_threads(threads, iters, &tokio))
        });
        group.bench_function("tower/concurrency_limit", |b| {
            b.iter_custom(|iters| on_threads(threads, iters, &tower))
        });
        group.finish();
    }
}

#[cfg(feature = "tower")]
fn layers(c: &mut Criterion) {
    use floodgate::middleware::{InFlightLayer, LayerSettings};
    use tower::Layer;
    use tower::limit::ConcurrencyLimitLayer;

    type Body = http_body_util::Empty<bytes::Bytes>;
    let immediate = service_fn(|_: http::Request<()>| {
        std::future::ready(Ok::<_, std::convert::Infallible>(http::Response::new(
            Body::new(),
        )))
    });
    let floodgate_layer = InFlightLayer::global(InFlight::new(LIMIT).unwrap())
        .headers_on_allowed(false)
        .layer(immediate);
    let tower_layer = ConcurrencyLimitLayer::new(LIMIT as usize).layer(immediate);
    let floodgate = || -> Pair<'_> {
        let mut service = floodgate_layer.clone();
        Box::new(move || one_request(&mut service, http::Request::new(())))
    };
    let tower = || -> Pair<'_> {
        let mut service = tower_layer.clone();
        Box::new(move || one_request(&mut service, http::Request::new(())))
    };
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("layer/{threads}_threads"));
        group.bench_function("floodgate/in_flight_layer", |b| {
            b.iter_custom(|iters| on_threads(threads, iters, &floodgate))
        });
        group.bench_function("tower/concurrency_limit_layer", |b| {
            b.iter_custom(|iters| on_threads(threads, iters, &tower))
        });
        group.finish();
    }
}

#[cfg(not(feature = "tower"))]
fn layers(_: &mut Criterion) {}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = pairs, layers
}
criterion_main!(benches);
