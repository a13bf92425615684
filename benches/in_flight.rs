//! An acquire + release pair on an in-flight limit: floodgate's `InFlight` (one CAS to take, one
//! `fetch_sub` to give back) next to tokio's `Semaphore` (`try_acquire` + drop of the permit)
//! in the same group, on 1 and 2 threads, so every figure is also a same-run ratio. The limit is
//! never reached (every take succeeds): the cost of the pair, not of waiting.
//!
//! Run: `cargo bench --bench in_flight`

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use floodgate::concurrency::InFlight;
use tokio::sync::Semaphore;

/// Runs `pair` `iters` times on each of `threads` threads started together; the wall time of
/// the slowest.
fn on_threads(threads: usize, iters: u64, pair: &(dyn Fn() + Sync)) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
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

fn pairs(c: &mut Criterion) {
    let limit = 1 << 20;
    let in_flight = InFlight::new(limit).unwrap();
    let semaphore = Semaphore::new(limit as usize);
    let floodgate = || drop(black_box(in_flight.try_acquire(black_box(1)).unwrap()));
    let tokio = || drop(black_box(semaphore.try_acquire().unwrap()));
    for threads in [1, 2] {
        let mut group = c.benchmark_group(format!("acquire_release/{threads}_threads"));
        group.bench_function("floodgate/in_flight", |b| {
            b.iter_custom(|iters| on_threads(threads, iters, &floodgate))
        });
        group.bench_function("tokio/semaphore", |b| {
            b.iter_custom(|iters| on_threads(threads, iters, &tokio))
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1));
    targets = pairs
}
criterion_main!(benches);
