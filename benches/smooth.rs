//! Single-thread cost of the Guava-style smooth limiters next to GCRA and governor's direct
//! `check()`, in the same group so every figure is also a ratio.
//!
//! Run: `cargo bench --bench smooth -- --warm-up-time 1 --measurement-time 2`
//! - `smooth/allow-heavy`: a rate no loop can reach (10⁹/s): every call is granted, books and
//!   writes (one CAS); `acquire(1)` never has to sleep, so it measures the booking path.
//! - `smooth/deny-heavy`: the limiter is in debt for the next ~1000 s; every `try_acquire`
//!   is refused and writes nothing.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use floodgate::{AtomicLimiter, Gcra, Limiter, Rate, SmoothBursty, SmoothWarmingUp};
use governor::{Quota, RateLimiter};

fn governor_fast() -> governor::DefaultDirectRateLimiter {
    let quota = Quota::with_period(Duration::from_nanos(1))
        .unwrap()
        .allow_burst(NonZeroU32::new(1 << 30).unwrap());
    RateLimiter::direct(quota)
}

fn allow_heavy(c: &mut Criterion) {
    let mut group = c.benchmark_group("smooth/allow-heavy");
    let bursty = SmoothBursty::create(1e9).unwrap();
    let warming = SmoothWarmingUp::create(1e9, Duration::from_secs(1)).unwrap();
    let gcra =
        AtomicLimiter::new(Gcra::new(Rate::new(1, Duration::from_nanos(1)), 1 << 30).unwrap());
    let governor = governor_fast();
    group.bench_function("floodgate/bursty/try_acquire", |b| {
        b.iter(|| black_box(bursty.try_acquire(black_box(1))))
    });
    group.bench_function("floodgate/bursty/acquire", |b| {
        b.iter(|| black_box(bursty.acquire(black_box(1))))
    });
    group.bench_function("floodgate/warming/try_acquire", |b| {
        b.iter(|| black_box(warming.try_acquire(black_box(1))))
    });
    group.bench_function("floodgate/warming/acquire", |b| {
        b.iter(|| black_box(warming.acquire(black_box(1))))
    });
    group.bench_function("floodgate/gcra/try_acquire", |b| {
        b.iter(|| black_box(gcra.try_acquire(black_box(1))))
    });
    group.bench_function("governor/direct/check", |b| {
        b.iter(|| black_box(governor.check()))
    });
    group.finish();
}

fn deny_heavy(c: &mut Criterion) {
    let mut group = c.benchmark_group("smooth/deny-heavy");
    // 1000 permits at 1/s: the next ~1000 s are booked (Guava pre-consumption).
    let bursty = SmoothBursty::create(1.0).unwrap();
    bursty.reserve(1000).unwrap();
    let warming = SmoothWarmingUp::create(1.0, Duration::from_secs(1)).unwrap();
    warming.reserve(1000).unwrap();
    let gcra = AtomicLimiter::new(Gcra::new(Rate::per_hour(1), 1).unwrap());
    while gcra.try_acquire(1).unwrap().is_allowed() {}
    let governor = RateLimiter::direct(Quota::per_hour(NonZeroU32::new(1).unwrap()));
    while governor.check().is_ok() {}
    assert!(!bursty.try_acquire(1).unwrap().is_allowed());
    assert!(!warming.try_acquire(1).unwrap().is_allowed());
    group.bench_function("floodgate/bursty/try_acquire", |b| {
        b.iter(|| black_box(bursty.try_acquire(black_box(1))))
    });
    group.bench_function("floodgate/warming/try_acquire", |b| {
        b.iter(|| black_box(warming.try_acquire(black_box(1))))
    });
    group.bench_function("floodgate/gcra/try_acquire", |b| {
        b.iter(|| black_box(gcra.try_acquire(black_box(1))))
    });
    group.bench_function("governor/direct/check", |b| {
        b.iter(|| black_box(governor.check()))
    });
    group.finish();
}

criterion_group!(benches, allow_heavy, deny_heavy);
criterion_main!(benches);
