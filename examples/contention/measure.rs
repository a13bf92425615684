//! One cell of the matrix: `threads` threads calling `try_acquire(1)` on one limiter for a
//! duration, in timed batches; or on several limiters in turns ([`run_interleaved`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// The whole run: every call of it read its clock within it (for the bound).
    pub span: Span,
    /// The time this limiter was called in: the whole span, or its turns ([`run_interleaved`]).
    pub active_nanos: u64,
    pub latency: Histogram,
    /// The calls of the thread that made the fewest.
    pub slowest_thread_calls: u64,
    pub threads: usize,
}

impl Measured {
    fn new() -> Self {
        Measured {
            calls: 0,
            admitted: 0,
            errors: 0,
            span: Span { start: 0, end: 0 },
            active_nanos: 0,
            latency: Histogram::new(),
            slowest_thread_calls: u64::MAX,
            threads: 0,
        }
    }

    pub fn mops(&self) -> f64 {
        self.calls as f64 / self.active_nanos.max(1) as f64 * 1e3
    }

    /// The slowest thread's calls over an even share of all calls: 1 when every thread made as
    /// many calls, near 0 when one thread was starved (by a limiter whose compare-exchange
    /// loop lets one thread win over and over). The latency quantiles cannot show a starved
    /// thread: it makes few batches, so few samples.
    pub fn fairness(&self) -> f64 {
        match self.calls {
            0 => 1.0,
            calls => self.slowest_thread_calls as f64 * self.threads as f64 / calls as f64,
        }
    }
}

/// The turn number that stops the workers.
const STOP: usize = usize::MAX;

/// Runs `threads` threads against `limiter` for `duration`. The span starts before any thread
/// is released and ends after every thread has stopped, on the quanta timeline.
pub fn run(limiter: &dyn Limiter, threads: usize, duration: Duration) -> Measured {
    let mut measured = run_interleaved(&[limiter], threads, duration, duration);
    let mut one = measured.pop().expect("one limiter, one result");
    one.active_nanos = one.span.nanos();
    one
}

/// Runs `threads` threads against `limiters` in turns of `slice` (the first limiter, then the
/// next, ..., again), each for about `duration` in all: every limiter of the cell sees the same
/// mix of machine conditions (other processes, frequency), so the ratio of two of them is a paired
/// measure even on a busy machine. All threads switch together (each checks the turn before each
/// batch of [`BATCH`] calls). Each result's `span` is the whole run (its bound's span: an idle
/// turn is part of a limiter's time), its `active_nanos` the sum of its turns.
pub fn run_interleaved(
    limiters: &[&dyn Limiter],
    threads: usize,
    duration: Duration,
    slice: Duration,
) -> Vec<Measured> {
    let timeline = QuantaClock::new();
    static TSC: OnceLock<quanta::Clock> = OnceLock::new();
    let tsc = TSC.get_or_init(quanta::Clock::new);
    let turns = limiters.len() * (duration.as_nanos() / slice.as_nanos().max(1)).max(1) as usize;
    let turn = AtomicUsize::new(0);
    let barrier = Barrier::new(threads + 1);
    let mut active = vec![0u64; limiters.len()];
    let (start, results) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| scope.spawn(|| worker(limiters, &barrier, &turn, tsc)))
            .collect();
        let start = timeline.now_nanos();
        barrier.wait();
        let mut turn_start = start;
        for t in 0..turns {
            std::thread::sleep(slice);
            let now = timeline.now_nanos();
            active[t % limiters.len()] += now.saturating_sub(turn_start);
            turn_start = now;
            // Relaxed: a turn flag; the join below is what publishes the workers' results.
            turn.store(if t + 1 == turns { STOP } else { t + 1 }, Ordering::Relaxed);
        }
        let results: Vec<Vec<Measured>> = workers
            .into_iter()
            .map(|w| w.join().expect("worker panicked"))
            .collect();
        (start, results)
    });
    let end = timeline.now_nanos();
    let mut measured: Vec<Measured> = Vec::new();
    for (i, &active_nanos) in active.iter().enumerate() {
        let mut m = Measured::new();
        m.span = Span { start, end };
        m.active_nanos = active_nanos;
        for r in results.iter().map(|r| &r[i]) {
            m.calls += r.calls;
            m.admitted += r.admitted;
            m.errors += r.errors;
            m.latency.merge(&r.latency);
            m.slowest_thread_calls = m.slowest_thread_calls.min(r.calls);
            m.threads += 1;
        }
        measured.push(m);
    }
    measured
}

fn worker(
    limiters: &[&dyn Limiter],
    barrier: &Barrier,
    turn: &AtomicUsize,
    tsc: &quanta::Clock,
) -> Vec<Measured> {
    let mut measured: Vec<Measured> = limiters.iter().map(|_| Measured::new()).collect();
    // Relaxed: written before this thread was spawned.
    let admit = CALL_ADMIT.load(Ordering::Relaxed);
    barrier.wait();
    loop {
        // Relaxed: see `run_interleaved`.
        let t = turn.load(Ordering::Relaxed);
        if t == STOP {
            break;
        }
        let (limiter, m) = (
            limiters[t % limiters.len()],
            &mut measured[t % limiters.len()],
        );
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
    measured
}
