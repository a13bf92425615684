//! One cell of the matrix: `threads` threads calling `try_acquire(1)` on one limiter for a
//! duration, in timed batches.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::Duration;

use floodgate::{Clock, Limiter, QuantaClock};

use crate::limiters::Span;

/// Whether workers call `admit(1)` (a bool) instead of `try_acquire(1)` (`--call admit`): set
/// once before any worker starts (spawning the workers publishes it).
pub static CALL_ADMIT: AtomicBool = AtomicBool::new(false);

/// Calls per timed batch: the per-call figures are a batch's time divided by this, so the two
/// TSC reads around a batch cost well under a nanosecond per call.
pub const BATCH: u64 = 64;

/// Per-call latency histogram: bins of 1/4 ns up to 4,096 ns, then one overflow bin.
const BINS_PER_NS: f64 = 4.0;
const BINS: usize = 4096 * 4;

pub struct Histogram {
    bins: Vec<u64>,
}

impl Histogram {
    fn new() -> Self {
        Histogram {
            bins: vec![0; BINS + 1],
        }
    }

    fn record(&mut self, ns_per_call: f64) {
        let bin = ((ns_per_call * BINS_PER_NS) as usize).min(BINS);
        self.bins[bin] += 1;
    }

    fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.bins.iter_mut().zip(&other.bins) {
            *a += b;
        }
    }

    /// The `q` quantile in ns per call (bin midpoint); `f64::INFINITY` in the overflow bin.
    pub fn quantile(&self, q: f64) -> f64 {
        let total: u64 = self.bins.iter().sum();
        if total == 0 {
            return f64::NAN;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bin, &count) in self.bins.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return if bin == BINS {
                    f64::INFINITY
                } else {
                    (bin as f64 + 0.5) / BINS_PER_NS
                };
            }
        }
        f64::INFINITY
    }
}

pub struct Measured {
    pub calls: u64,
    pub admitted: u64,
    /// `try_acquire` errors (none expected: every call asks for one permit).
    pub errors: u64,
    pub span: Span,
    pub latency: Histogram,
}

impl Measured {
    pub fn mops(&self) -> f64 {
        self.calls as f64 / self.span.nanos().max(1) as f64 * 1e3
    }
}

/// Runs `threads` threads against `limiter` for `duration`. The span starts before any thread
/// is released and ends after every thread has stopped, on the quanta timeline.
pub fn run(limiter: &dyn Limiter, threads: usize, duration: Duration) -> Measured {
    let timeline = QuantaClock::new();
    static TSC: OnceLock<quanta::Clock> = OnceLock::new();
    let tsc = TSC.get_or_init(quanta::Clock::new);
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    let (start, results) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| scope.spawn(|| worker(limiter, &barrier, &stop, tsc)))
            .collect();
        let start = timeline.now_nanos();
        barrier.wait();
        std::thread::sleep(duration);
        // Relaxed: a stop flag; the join below is what publishes the workers' results.
        stop.store(true, Ordering::Relaxed);
        let results: Vec<_> = workers
            .into_iter()
            .map(|w| w.join().expect("worker panicked"))
            .collect();
        (start, results)
    });
    let end = timeline.now_nanos();
    let mut measured = Measured {
        calls: 0,
        admitted: 0,
        errors: 0,
        span: Span { start, end },
        latency: Histogram::new(),
    };
    for r in &results {
        measured.calls += r.calls;
        measured.admitted += r.admitted;
        measured.errors += r.errors;
        measured.latency.merge(&r.latency);
    }
    measured
}

fn worker(
    limiter: &dyn Limiter,
    barrier: &Barrier,
    stop: &AtomicBool,
    tsc: &quanta::Clock,
) -> Measured {
    let mut m = Measured {
        calls: 0,
        admitted: 0,
        errors: 0,
        span: Span { start: 0, end: 0 },
        latency: Histogram::new(),
    };
    // Relaxed: written before this thread was spawned.
    let admit = CALL_ADMIT.load(Ordering::Relaxed);
    barrier.wait();
    // Relaxed: see `run`.
    while !stop.load(Ordering::Relaxed) {
        let before = tsc.raw();
        for _ in 0..BATCH {
            let allowed = if admit {
                limiter.admit(1)
            } else {
                limiter.try_acquire(1).map(|d| d.is_allowed())
            };
            match allowed {
                Ok(allowed) => m.admitted += u64::from(allowed),
                Err(_) => m.errors += 1,
            }
        }
        let after = tsc.raw();
        m.latency
            .record(tsc.delta_as_nanos(before, after) as f64 / BATCH as f64);
        m.calls += BATCH;
    }
    m
}
