//! The loom models live in `tests/`. This library is their **time model** (built only under
//! `--cfg floodgate_loom`, floodgate's own cfg: see floodgate's `src/sync.rs`): a [`ModelClock`]
//! whose reads are loom atomic loads, so loom interleaves them with every other step of every
//! model thread, and the exact checkers that turn each limiter's promise into an assertion over
//! the admissions' real times.
//!
//! # The time model
//! * **Real time** is one loom `AtomicU64` (the *shared* clock). It only moves forward:
//!   [`ModelClock::advance`] (a driver, from any model thread) and [`Clock::sleep`] add to it.
//! * **A read** (`now_nanos`) is one `SeqCst` load of it, so loom may preempt the reading thread
//!   right after it, before the limiter loads its state or commits its compare-exchange: a
//!   thread stalled between its clock read and its commit, while others move time and state on.
//! * **Lag**: a handle made by [`ModelClock::lagging`], or any handle on a thread that called
//!   [`ModelClock::set_thread_lag`], reads `shared − lag` (at most [`MAX_LAG`], the documented
//!   bound `floodgate::algorithms::MAX_CLOCK_LAG_NANOS`).
//! * **Leap**: after [`ModelClock::leap_next_read`], the calling thread's next read returns
//!   `shared + lead` (one far-future read: a TSC glitch).
//! * **Stamps**: [`ModelClock::timed`] reads real time right before and right after a call, so
//!   the call took effect at a real time in `[before, after]`. The checkers below bound the
//!   admissions by those intervals; a lagging or leaping call widens its interval by its skew
//!   ([`Admitted::skewed`]), since the limiter may legitimately decide it at its skewed read.
#![cfg(floodgate_loom)]

use std::cell::Cell;
use std::time::Duration;

use floodgate::{Clock, Decision, Limiter};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU64, Ordering};

/// The documented bound on the lag between two clock reads (10 s).
pub const MAX_LAG: u64 = floodgate::algorithms::MAX_CLOCK_LAG_NANOS;

loom::thread_local! {
    /// This model thread's skew: `(lag, lead of the next read)`.
    static SKEW: Cell<(u64, u64)> = Cell::new((0, 0));
}

/// A loom-visible clock (see the crate docs). Clones share the same real time; a clone made by
/// [`lagging`](ModelClock::lagging) reads behind it.
#[derive(Clone, Debug)]
pub struct ModelClock {
    shared: Arc<AtomicU64>,
    lag: u64,
}

impl ModelClock {
    /// Real time starts at `nanos`.
    pub fn starting_at(nanos: u64) -> Self {
        ModelClock {
            shared: Arc::new(AtomicU64::new(nanos)),
            lag: 0,
        }
    }

    /// A handle on the same real time whose reads are `lag` behind it.
    pub fn lagging(&self, lag: u64) -> Self {
        assert!(lag <= MAX_LAG, "a lag beyond the documented bound");
        ModelClock {
            shared: self.shared.clone(),
            lag,
        }
    }

    /// Every read on the calling model thread (through any handle) is `lag` behind real time.
    pub fn set_thread_lag(lag: u64) {
        assert!(lag <= MAX_LAG, "a lag beyond the documented bound");
        SKEW.with(|s| s.set((lag, s.get().1)));
    }

    /// The calling model thread's next read (through any handle) is `lead` ahead of real time.
    pub fn leap_next_read(lead: u64) {
        SKEW.with(|s| s.set((s.get().0, lead)));
    }

    /// The driver: moves real time forward by `nanos` (one loom step).
    pub fn advance(&self, nanos: u64) {
        // SeqCst: the model's clock; the simplest total order with every other step.
        self.shared.fetch_add(nanos, Ordering::SeqCst);
    }

    /// Real time now: no lag, no leap (the stamps' reads).
    pub fn real_now(&self) -> u64 {
        // SeqCst: as advance. Reads of one location never go back (coherence), and real time
        // only grows, so a stamp before a call is ≤ the call's read ≤ the stamp after it.
        self.shared.load(Ordering::SeqCst)
    }

    /// Runs `call` between two real-time stamps: its effect happened in `[before, after]`.
    pub fn timed<T>(&self, call: impl FnOnce() -> T) -> (Span, T) {
        let before = self.real_now();
        let value = call();
        let after = self.real_now();
        (Span { before, after }, value)
    }
}

impl Clock for ModelClock {
    fn now_nanos(&self) -> u64 {
        let shared = self.real_now();
        let (thread_lag, lead) = SKEW.with(|s| {
            let (lag, lead) = s.get();
            s.set((lag, 0));
            (lag, lead)
        });
        shared
            .saturating_sub(self.lag.max(thread_lag))
            .saturating_add(lead)
    }

    fn sleep(&self, duration: Duration) {
        self.advance(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
    }
}

/// The real-time interval a call took effect in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Real time read right before the call.
    pub before: u64,
    /// Real time read right after it.
    pub after: u64,
}

/// An admitted request: `n` permits, decided at a clock value in `[lo, hi]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    /// Earliest clock value the decision may have used.
    pub lo: u64,
    /// Latest clock value the decision may have used.
    pub hi: u64,
    /// Permits taken.
    pub n: u64,
}

impl Admitted {
    /// An admission by a call with exact clock reads, stamped `span`.
    pub fn at(span: Span, n: u64) -> Self {
        Self::skewed(span, n, 0, 0)
    }

    /// An admission by a call whose read lagged by up to `lag` or leapt by up to `lead`: the
    /// limiter may decide it anywhere in `[before − lag, after + lead]`.
    pub fn skewed(span: Span, n: u64, lag: u64, lead: u64) -> Self {
        Admitted {
            lo: span.before.saturating_sub(lag),
            hi: span.after.saturating_add(lead),
            n,
        }
    }
}

/// Runs a loom model: preemptions bounded by `LOOM_MAX_PREEMPTIONS` (3 when unset), and at
/// most `max_branches` branches per execution (loom's default when `None`).
pub fn model(max_branches: Option<usize>, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    if let Some(max) = max_branches {
        builder.max_branches = max;
    }
    builder.check(f);
}

/// Aligned windows of `window` ns: the most permits of admissions lying wholly inside one
/// window (`[k·window, (k+1)·window)`), and that window's index.
pub fn max_in_aligned_window(admitted: &[Admitted], window: u64) -> (u64, u64) {
    let mut best = (0, 0);
    for a in admitted {
        let k = a.lo / window;
        let sum = admitted
            .iter()
            .filter(|b| b.lo / window == k && b.hi / window == k)
            .map(|b| b.n)
            .sum();
        if sum > best.0 {
            best = (sum, k);
        }
    }
    best
}

/// The most permits of admissions lying wholly inside one closed span `[x, x + len]`, and `x`.
pub fn max_in_span(admitted: &[Admitted], len: u64) -> (u64, u64) {
    let mut best = (0, 0);
    for a in admitted {
        let x = a.lo;
        let sum = admitted
            .iter()
            .filter(|b| b.lo >= x && b.hi <= x.saturating_add(len))
            .map(|b| b.n)
            .sum();
        if sum > best.0 {
            best = (sum, x);
        }
    }
    best
}

/// The bucket promise: for every closed real span `[x, y]`, the permits of admissions lying
/// wholly inside it are at most `capacity + ⌊(y − x) / interval⌋` (a full bucket at `x` plus
/// what refills by `y`). Panics naming the first span that breaks it.
pub fn assert_bucket_bound(admitted: &[Admitted], capacity: u64, interval: u64) {
    for a in admitted {
        for b in admitted {
            let (x, y) = (a.lo, b.hi);
            if y < x {
                continue;
            }
            let inside: u64 = admitted
                .iter()
                .filter(|c| c.lo >= x && c.hi <= y)
                .map(|c| c.n)
                .sum();
            let bound = capacity + (y - x) / interval;
            assert!(
                inside <= bound,
                "{inside} permits admitted in [{x}, {y}], above capacity {capacity} + \
                 elapsed / {interval} = {bound}: {admitted:?}"
            );
        }
    }
}

/// One stamped `try_acquire(n)` on `limiter`: the admission, if any, widened by `skew`
/// (`lag`, `lead`) as [`Admitted::skewed`] does, and the decision.
pub fn try_take<L: Limiter + ?Sized>(
    limiter: &L,
    clock: &ModelClock,
    n: u32,
    skew: (u64, u64),
) -> (Vec<Admitted>, Decision) {
    let (span, decision) = clock.timed(|| limiter.try_acquire(n).unwrap());
    let admitted = if decision.is_allowed() {
        vec![Admitted::skewed(span, u64::from(n), skew.0, skew.1)]
    } else {
        Vec::new()
    };
    (admitted, decision)
}

/// [`try_take`]'s admission alone.
pub fn take<L: Limiter + ?Sized>(
    limiter: &L,
    clock: &ModelClock,
    n: u32,
    skew: (u64, u64),
) -> Vec<Admitted> {
    try_take(limiter, clock, n, skew).0
}

/// One stamped `acquire(n)` on `limiter` (its wait is a [`Clock::sleep`], which moves real time
/// on): the admission and the wait. The permits are used when the wait ends, so the admission
/// lies in `[before + wait, after]`.
pub fn acquire<L: Limiter + ?Sized>(limiter: &L, clock: &ModelClock, n: u32) -> (Admitted, u64) {
    let (span, wait) = clock.timed(|| limiter.acquire(n).unwrap());
    let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
    let admitted = Admitted {
        lo: span.before.saturating_add(wait),
        hi: span.after,
        n: u64::from(n),
    };
    (admitted, wait)
}

/// Joins model threads that each return their admissions, and adds them to `into`.
pub fn join_all(
    handles: Vec<loom::thread::JoinHandle<Vec<Admitted>>>,
    mut into: Vec<Admitted>,
) -> Vec<Admitted> {
    for h in handles {
        into.extend(h.join().unwrap());
    }
    into
}
