//! Single-thread cost of `try_acquire(1)` for each packed-word algorithm, next to governor's
//! direct `check()` in the same group, so every figure is also a ratio.
//!
//! Run: `cargo bench --bench single_thread`
//! - allow-heavy: the limit is never reached (every call admits and writes);
//! - deny-heavy: the limit is exhausted (every call denies; floodgate writes nothing).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use floodgate::{
    Algorithm, AtomicLimiter, Clock, CoarseClock, FixedWindow, Gcra, LeakyBucket, Limiter,
    PackedSlidingWindow, Rate, SlidingWindowLimiter, SmoothBursty, SmoothWarmingUp, TokenBucket,
};
use governor::{Quota, RateLimiter};

fn bench_one<A: Algorithm, C: Clock>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    limiter: AtomicLimiter<A, C>,
) {
    group.bench_function(name, |b| {
        b.iter(|| black_box(limiter.try_acquire(black_box(1))))
    });
}

fn allow_heavy(c: &mut Criterion) {
    let mut group = c.benchmark_group("try_acquire_1/allow-heavy");
    // Limits no benchmark loop can reach: 16M per ms, or one permit a nanosecond.
    let window = || FixedWindow::new((1 << 24) - 1, Duration::from_millis(1)).unwrap();
    let fast = Rate::new(1, Duration::from_nanos(1));
    bench_one(
        &mut group,
        "floodgate/fixed_window",
        AtomicLimiter::new(window()),
    );
    bench_one(
        &mut group,
        "floodgate/fixed_window_aligned",
        AtomicLimiter::new(FixedWindow::aligned((1 << 24) - 1, Duration::from_millis(1)).unwrap()),
    );
    bench_one(
        &mut group,
        "floodgate/token_bucket",
        AtomicLimiter::new(TokenBucket::new(fast, 1 << 30).unwrap()),
    );
    bench_one(
        &mut group,
        "floodgate/leaky_bucket",
        AtomicLimiter::new(LeakyBucket::new(fast, 1 << 30).unwrap()),
    );
    bench_one(
        &mut group,
        "floodgate/gcra",
        AtomicLimiter::new(Gcra::new(fast, 1 << 30).unwrap()),
    );
    let sliding = SlidingWindowLimiter::new((1 << 24) - 1, Duration::from_millis(1), 10).unwrap();
    group.bench_function("floodgate/sliding_window", |b| {
        b.iter(|| black_box(sliding.try_acquire(black_box(1))))
    });
    bench_one(
        &mut group,
        "floodgate/packed_sliding_window",
        AtomicLimiter::new(PackedSlidingWindow::new(65_535, Duration::from_micros(10), 2).unwrap()),
    );
    let bursty = SmoothBursty::create(1e9).unwrap();
    group.bench_function("floodgate/smooth_bursty", |b| {
        b.iter(|| black_box(bursty.try_acquire(black_box(1))))
    });
    let warming = SmoothWarmingUp::create(1e9, Duration::from_millis(1)).unwrap();
    group.bench_function("floodgate/smooth_warming_up", |b| {
        b.iter(|| black_box(warming.try_acquire(black_box(1))))
    });
    let coarse = CoarseClock::new().expect("upkeep thread");
    bench_one(
        &mut group,
        "floodgate/fixed_window+coarse",
        AtomicLimiter::with_clock(window(), coarse.clone()),
    );
    bench_one(
        &mut group,
        "floodgate/gcra+coarse",
        AtomicLimiter::with_clock(Gcra::new(fast, 1 << 30).unwrap(), coarse),
    );
    let quota = Quota::with_period(Duration::from_nanos(1))
        .unwrap()
        .allow_burst(NonZeroU32::new(1 << 30).unwrap());
    let governor = RateLimiter::direct(quota);
    group.bench_function("governor/direct", |b| {
        b.iter(|| black_box(governor.check()))
    });
    group.finish();
}

fn deny_heavy(c: &mut Criterion) {
    let mut group = c.benchmark_group("try_acquire_1/deny-heavy");
    let slow = Rate::per_hour(1);
    let exhausted = |l: &dyn Limiter| {
        while l.try_acquire(1).unwrap().is_allowed() {}
    };
    let fixed = AtomicLimiter::new(FixedWindow::new(1, Duration::from_secs(3600)).unwrap());
    let token = AtomicLimiter::new(TokenBucket::new(slow, 1).unwrap());
    let leaky = AtomicLimiter::new(LeakyBucket::new(slow, 1).unwrap());
    let gcra = AtomicLimiter::new(Gcra::new(slow, 1).unwrap());
    exhausted(&fixed);
    exhausted(&token);
    exhausted(&leaky);
    exhausted(&gcra);
    bench_one(&mut group, "floodgate/fixed_window", fixed);
    bench_one(&mut group, "floodgate/token_bucket", token);
    bench_one(&mut group, "floodgate/leaky_bucket", leaky);
    bench_one(&mut group, "floodgate/gcra", gcra);
    let sliding = SlidingWindowLimiter::new(1, Duration::from_secs(3600), 10).unwrap();
    exhausted(&sliding);
    group.bench_function("floodgate/sliding_window", |b| {
        b.iter(|| black_box(sliding.try_acquire(black_box(1))))
    });
    let bursty = SmoothBursty::create(1.0 / 3600.0).unwrap();
    exhausted(&bursty);
    group.bench_function("floodgate/smooth_bursty", |b| {
        b.iter(|| black_box(bursty.try_acquire(black_box(1))))
    });
    let governor = RateLimiter::direct(Quota::per_hour(NonZeroU32::new(1).unwrap()));
    while governor.check().is_ok() {}
    group.bench_function("governor/direct", |b| {
        b.iter(|| black_box(governor.check()))
    });
    group.finish();
}

criterion_group!(benches, allow_heavy, deny_heavy);
criterion_main!(benches);
