//! Contention benchmarks: every limiter of the contention report × 1, 2, 4 threads × the three
//! workloads, governor in every group. One iteration = one `try_acquire(1)` on each thread at
//! once, so criterion's throughput (elements/s) is the aggregate calls per second.
//!
//! ```text
//! cargo bench --bench contention -- --warm-up-time 1 --measurement-time 2
//! cargo bench --bench contention -- 'allow-heavy/2'      # one group
//! ```

use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use floodgate::Limiter;

// The report's table of limiters and workloads: one list for both.
#[path = "../examples/contention/limiters.rs"]
#[allow(dead_code)] // the report uses parts of it (names of clocks, spans) this bench does not
mod limiters;

use limiters::{ClockChoice, GOVERNOR, Workload, entries};

const THREADS: [usize; 3] = [1, 2, 4];

/// `threads` threads each make `calls` calls, released together; returns the wall time.
fn hammer(limiter: &dyn Limiter, threads: usize, calls: u64) -> Duration {
    let barrier = Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                barrier.wait();
                for _ in 0..calls {
                    std::hint::black_box(limiter.try_acquire(std::hint::black_box(1)).ok());
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        // The scope joins every thread before returning.
        start
    })
    .elapsed()
}

/// Half of governor's allow-heavy throughput at `threads`, in calls per second (briefly
/// measured): the at-limit rate every limiter of the group faces.
fn at_limit_rate(threads: usize) -> f64 {
    let governor = entries()
        .into_iter()
        .find(|e| e.name == GOVERNOR)
        .expect("governor is in the table");
    let limiter = (governor.build)(Workload::AllowHeavy.quota(0.0), &ClockChoice::Quanta)
        .expect("allow-heavy quota is valid");
    let calls = 2_000_000;
    let elapsed = hammer(&*limiter, threads, calls);
    (threads as u64 * calls) as f64 / elapsed.as_secs_f64() / 2.0
}

fn contention(c: &mut Criterion) {
    for workload in Workload::ALL {
        for threads in THREADS {
            let rate = match workload {
                Workload::AtLimit => at_limit_rate(threads),
                _ => 0.0,
            };
            let quota = workload.quota(rate);
            let mut group = c.benchmark_group(format!("contention/{}/{threads}", workload.name()));
            group.throughput(Throughput::Elements(threads as u64));
            for entry in entries() {
                let limiter = (entry.build)(quota, &ClockChoice::Quanta)
                    .unwrap_or_else(|e| panic!("{} rejects {quota:?}: {e}", entry.name));
                group.bench_function(entry.name, |b| {
                    b.iter_custom(|iters| hammer(&*limiter, threads, iters))
                });
            }
            group.finish();
        }
    }
}

criterion_group!(benches, contention);
criterion_main!(benches);
