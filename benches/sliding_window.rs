//! Cost of `try_acquire(1)` on the sliding windows, next to the fixed window and governor's
//! direct `check()` in the same groups, so every figure is also a ratio; and bytes per limiter.
//!
//! Run: `cargo bench --bench sliding_window -- --warm-up-time 1 --measurement-time 2`
//! - allow-heavy: the limit is never reached (every call admits and writes);
//! - deny-heavy: the limit is exhausted (every call denies; floodgate writes nothing);
//! - contention: two threads on one limiter, allow-heavy, time per call per thread.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use floodgate::{AtomicLimiter, FixedWindow, Limiter, PackedSlidingWindow, SlidingWindowLimiter};
use governor::{Quota, RateLimiter};

const MAX: u32 = (1 << 24) - 1;

/// The limiters under test, named: limits out of reach (1 ms windows), or of 1 per hour-long
/// window (to be exhausted by one call).
fn limiters(exhausted: bool) -> Vec<(&'static str, Box<dyn Limiter>)> {
    let ms = if exhausted {
        Duration::from_secs(3600)
    } else {
        Duration::from_millis(1)
    };
    let (big, packed_big) = if exhausted { (1, 1) } else { (MAX, 65_535) };
    vec![
        (
            "floodgate/fixed_window_aligned",
            Box::new(AtomicLimiter::new(FixedWindow::aligned(big, ms).unwrap())),
        ),
        (
            "floodgate/sliding_window_10_cells",
            Box::new(SlidingWindowLimiter::new(big, ms, 10).unwrap()),
        ),
        (
            "floodgate/sliding_window_100_cells",
            Box::new(SlidingWindowLimiter::new(big, ms * 10, 100).unwrap()),
        ),
        (
            "floodgate/packed_sliding_window_2_cells",
            // 65,535 per 2 ms is out of reach of a single thread too.
            Box::new(AtomicLimiter::new(
                PackedSlidingWindow::new(packed_big, ms * 2, 2).unwrap(),
            )),
        ),
    ]
}

fn governor(exhausted: bool) -> governor::DefaultDirectRateLimiter {
    let quota = if exhausted {
        Quota::per_hour(NonZeroU32::new(1).unwrap())
    } else {
        Quota::with_period(Duration::from_nanos(1))
            .unwrap()
            .allow_burst(NonZeroU32::new(1 << 30).unwrap())
    };
    let limiter = RateLimiter::direct(quota);
    let _ = limiter.check();
    limiter
}

fn single_thread(c: &mut Criterion) {
    for (group_name, exhausted) in [("allow-heavy", false), ("deny-heavy", true)] {
        let mut group = c.benchmark_group(format!("sliding/{group_name}"));
        for (name, limiter) in limiters(exhausted) {
            if exhausted {
                let _ = limiter.try_acquire(1);
            }
            group.bench_function(name, |b| {
                b.iter(|| black_box(limiter.try_acquire(black_box(1))))
            });
        }
        let governor = governor(exhausted);
        group.bench_function("governor/direct", |b| {
            b.iter(|| black_box(governor.check()))
        });
        group.finish();
    }
}

/// Two threads, each making `iters` calls; the slower thread's time, per call.
fn two_threads(iters: u64, call: &(dyn Fn() + Sync)) -> Duration {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let start = Instant::now();
                    for _ in 0..iters {
                        call();
                    }
                    start.elapsed()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    })
}

fn contention(c: &mut Criterion) {
    let mut group = c.benchmark_group("sliding/contention-2-threads");
    for (name, limiter) in limiters(false) {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                two_threads(iters, &|| {
                    black_box(limiter.try_acquire(1).ok());
                })
            })
        });
    }
    let governor = governor(false);
    group.bench_function("governor/direct", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, &|| {
                black_box(governor.check().ok());
            })
        })
    });
    group.finish();
}

fn memory(_: &mut Criterion) {
    for cells in [1u32, 6, 10, 60, 100, 600] {
        let w = SlidingWindowLimiter::new(100, Duration::from_secs(60), cells).unwrap();
        println!(
            "sliding_window memory: {cells} cells + {} future = {} bytes",
            w.future_cells(),
            w.memory_bytes()
        );
    }
    println!(
        "packed_sliding_window (in AtomicLimiter): {} bytes; fixed_window: {} bytes",
        std::mem::size_of::<AtomicLimiter<PackedSlidingWindow>>(),
        std::mem::size_of::<AtomicLimiter<FixedWindow>>()
    );
}

criterion_group!(benches, memory, single_thread, contention);
criterion_main!(benches);
