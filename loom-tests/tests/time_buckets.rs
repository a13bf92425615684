//! The time-word buckets (token bucket, leaky bucket, GCRA, through `AtomicLimiter`) and the
//! smooth limiters under the time model (`floodgate_loom_tests::ModelClock`). Every model records
//! each admission's real-time interval `[before, after]` and asserts the README's promise
//! exactly: for every real span `[x, y]`, the permits of the admissions lying inside it are at
//! most `capacity + ⌊(y − x) / interval⌋` (a lagging or leaping call's interval is widened by
//! its skew, since it may be decided at its own read).
//!
//! Buckets: capacity 2, one permit per 100 ns. `SmoothBursty`: 10/s with 0.2 s of stored
//! permits (2), whose promise is the same bound with capacity `2 + 1` (a free limiter grants one
//! request beyond its stored permits and books it as debt, Guava's rule).
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test time_buckets`
#![cfg(floodgate_loom)]

use std::time::Duration;

use floodgate::clock::FLOOR_GRAIN_NANOS;
use floodgate::limiter::Step;
use floodgate::{
    AcquireError, Algorithm, AtomicLimiter, ConfigError, Gcra, Limiter, Rate, SmoothBursty,
};
use floodgate_loom_tests::{
    Admitted, MAX_LAG, ModelClock, assert_bucket_bound, join_all, model, take,
};
use loom::thread;
use std::sync::Arc;

/// Nanoseconds per permit of the buckets.
const T: u64 = 100;
/// Bucket capacity.
const C: u32 = 2;
/// Real time at the start of every bucket model: past the time floor's grain
/// (`FLOOR_GRAIN_NANOS`, 16,384 ns), so the first admission raises the floor to its clock read and
/// a reader lagging it by less than a grain is decided at the writer's time exactly. (A floor
/// already raised within the last grain lets a lagging reader be decided up to one grain early:
/// the documented price of raising it at most once per grain.)
const START: u64 = 100_000;

/// The live setters of the time-word bucket (`Gcra`, alias `TokenBucket` and `LeakyBucket`).
trait Bucket: Algorithm {
    fn make(capacity: u32, rate: Rate) -> Self;
    fn change_rate(&self, rate: Rate, now: u64);
    fn change_capacity(&self, capacity: u32, now: u64);
}

macro_rules! bucket {
    ($ty:ident, $make:expr) => {
        impl Bucket for $ty {
            fn make(capacity: u32, rate: Rate) -> Self {
                $make(rate, capacity).unwrap()
            }
            fn change_rate(&self, rate: Rate, now: u64) {
                self.set_rate(rate, now).unwrap()
            }
            fn change_capacity(&self, capacity: u32, now: u64) {
                self.set_capacity(capacity, now).unwrap()
            }
        }
    };
}
bucket!(Gcra, Gcra::new);

/// `Gcra` decided by the general engine: `Algorithm`'s default `acquire_word` (`update_at`, the
/// loop of `limiter::engine::floored_loop`) over `Gcra::decide`. `Gcra` itself serves these
/// models on its short path (`VirtualTime::short`), which loads the word itself and hands over
/// to the engine only off its common case (a leap, a far word, a time before a change).
struct EngineGcra(Gcra);

impl Algorithm for EngineGcra {
    const NEEDS_TIME_FLOOR: bool = true;
    fn check_permits(&self, n: u32) -> Result<(), AcquireError> {
        self.0.check_permits(n)
    }
    fn decide(&self, state: u64, now: u64, n: u32) -> Step {
        self.0.decide(state, now, n)
    }
    fn is_idle(&self, state: u64, now: u64) -> bool {
        self.0.is_idle(state, now)
    }
    fn set_limit(&self, limit: u32, now: u64) -> Result<(), ConfigError> {
        self.0.set_limit(limit, now)
    }
    fn limit(&self) -> u64 {
        self.0.limit()
    }
}

impl Bucket for EngineGcra {
    fn make(capacity: u32, rate: Rate) -> Self {
        EngineGcra(Gcra::new(rate, capacity).unwrap())
    }
    fn change_rate(&self, rate: Rate, now: u64) {
        self.0.set_rate(rate, now).unwrap()
    }
    fn change_capacity(&self, capacity: u32, now: u64) {
        self.0.set_capacity(capacity, now).unwrap()
    }
}

type Lim<B> = AtomicLimiter<B, ModelClock>;

/// `C` permits per `C·T` ns, written as `C` per `C·T` so `set_limit(1)` means 1 per `C·T`.
fn limiter<B: Bucket>(clock: &ModelClock) -> Lim<B> {
    let rate = Rate::new(C, Duration::from_nanos(u64::from(C) * T));
    AtomicLimiter::with_clock(B::make(C, rate), clock.clone())
}

fn permits(admitted: &[Admitted]) -> u64 {
    admitted.iter().map(|a| a.n).sum()
}

/// Builds one bucket limiter on a model clock.
type MakeBucket = fn(&ModelClock) -> Box<dyn BucketLimiter>;

fn for_each_bucket(run: fn(MakeBucket)) {
    run(|c| Box::new(limiter::<Gcra>(c)));
}

/// A bucket limiter with its setters, object-safe so one model runs all three.
trait BucketLimiter: Limiter + 'static {
    fn change_rate(&self, rate: Rate);
    fn change_capacity(&self, capacity: u32);
}

impl<B: Bucket> BucketLimiter for Lim<B> {
    fn change_rate(&self, rate: Rate) {
        self.algorithm().change_rate(rate, self.clock().now_nanos())
    }
    fn change_capacity(&self, capacity: u32) {
        self.algorithm()
            .change_capacity(capacity, self.clock().now_nanos())
    }
}

type Make = fn(&ModelClock) -> Box<dyn BucketLimiter>;

// ---------------------------------------------------------------------------------------------
// (a) The clock moves between any two steps while two threads take.

/// A takes 2; B moves time on by one interval and takes 1; then the driver takes 1: 4 requests
/// where capacity + refill allow at most 2 + 1 over the whole run, fewer over shorter spans.
fn clock_moves_between_steps(make: Make) {
    model(None, move || {
        let clock = ModelClock::starting_at(START);
        let l: Arc<dyn BucketLimiter> = Arc::from(make(&clock));
        let a = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                let mut got = take(&*l, &clock, 1, (0, 0));
                got.extend(take(&*l, &clock, 1, (0, 0)));
                got
            })
        };
        // B runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 677 executions of this race.
        let b = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(T);
                take(&*l, &clock, 1, (0, 0))
            })
        };
        let mut admitted = join_all(vec![a, b], Vec::new());
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        assert_bucket_bound(&admitted, u64::from(C), T);
    });
}

#[test]
fn buckets_clock_moves_between_steps() {
    for_each_bucket(clock_moves_between_steps);
}

// ---------------------------------------------------------------------------------------------
// (b) A thread stalled between its clock read and its commit.

/// S takes 1 and may stall right after its clock read while D moves time on by more than the
/// 10 s lag horizon and drains the bucket; after both, the driver takes once more at the same
/// real time. S's stale read must not refill anything: the state (and the floor) more than
/// `H` ahead of it, it reads the clock again and decides at the present (the model passes with
/// the floor never raised).
fn stalled_reader(make: Make) {
    model(None, move || {
        let clock = ModelClock::starting_at(START);
        let l: Arc<dyn BucketLimiter> = Arc::from(make(&clock));
        let s = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        };
        // D runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 208 executions of this race.
        let d = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(MAX_LAG + 2 * T);
                take(&*l, &clock, C, (0, 0))
            })
        };
        let mut admitted = join_all(vec![s, d], Vec::new());
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        assert_bucket_bound(&admitted, u64::from(C), T);
    });
}

#[test]
fn buckets_stalled_reader() {
    for_each_bucket(stalled_reader);
}

// ---------------------------------------------------------------------------------------------
// (c) A lagging reader.

/// L's reads lag one floor grain and half an interval. A writer W takes 1 and L takes 1 on a
/// full bucket: both fit, both are admitted (a lag beyond a grain refuses nothing: L's own floor
/// raise leaves W's time a grain or more above it, so W raises the floor too). Then the driver
/// drains what is left and tries once more: L's booking was not moved back in time, so the bound
/// holds. W runs on a model thread of its own: run on the thread that built the limiter, loom
/// explored 27 executions of this model. On `Gcra` every take here runs its short path, whose
/// Acquire load of the word this model pins; `buckets_lagging_reader_on_the_engine` runs the
/// same model on the general engine (`floored_loop`'s Acquire load). With a lag below a grain (half an interval, as the model
/// first had) L may be refused, as `update_at`'s docs allow: L raises the floor to its lagging
/// read before W, whose read is then less than a grain above it and raises nothing, and L's
/// retry after W's word is decided at that floor.
fn lagging_reader(make: Make) {
    const LAG: u64 = FLOOR_GRAIN_NANOS + T / 2;
    model(None, move || {
        let clock = ModelClock::starting_at(START);
        let l: Arc<dyn BucketLimiter> = Arc::from(make(&clock));
        let lagging = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::set_thread_lag(LAG);
                take(&*l, &clock, 1, (LAG, 0))
            })
        };
        let writer = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        };
        let mut admitted = join_all(vec![lagging, writer], Vec::new());
        assert_eq!(
            admitted.len(),
            2,
            "a lagging read refused a permit that fit"
        );
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        assert_bucket_bound(&admitted, u64::from(C), T);
    });
}

#[test]
fn buckets_lagging_reader() {
    for_each_bucket(lagging_reader);
}

/// The lagging reader on the general engine (`EngineGcra`). `buckets_lagging_reader` runs
/// `Gcra`'s short path, whose own Acquire load of the word it pins (it fails with that load
/// Relaxed), and never reaches the engine's: it passed with the Acquire load of the word in
/// `floored_loop` weakened to Relaxed. This one fails with it (L loads W's word without its
/// floor raise, and is refused at its lagging read).
#[test]
fn buckets_lagging_reader_on_the_engine() {
    lagging_reader(|c| Box::new(limiter::<EngineGcra>(c)));
}

// ---------------------------------------------------------------------------------------------
// (d) A leaping reader.

/// P's one read leaps 10 s + 1 µs (beyond the lag bound) while a writer W takes 1 (on a model
/// thread of its own: run on the thread that built the limiter, loom explored 27 executions of
/// this model, now 204). Then, at the same real time, the driver asks for the whole capacity (it may be denied: the leap may have
/// been taken for "the bucket is empty now"), and one refill τ = C·T later must be admitted:
/// a leap freezes a bucket for at most τ. The bound holds with P widened by its lead.
///
/// On today's code the leap raises the time floor to the leapt time: every later decision runs
/// there, the bucket refills C permits at once (the bound breaks) and then refuses until real
/// time catches up (a 10 s freeze).
fn leaping_reader(make: Make) {
    let lead = MAX_LAG + 1_000;
    model(None, move || {
        let clock = ModelClock::starting_at(START);
        let l: Arc<dyn BucketLimiter> = Arc::from(make(&clock));
        let leaper = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::leap_next_read(lead);
                take(&*l, &clock, 1, (0, lead))
            })
        };
        let writer = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        };
        let mut admitted = join_all(vec![leaper, writer], Vec::new());
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        clock.advance(u64::from(C) * T);
        let again = take(&*l, &clock, 1, (0, 0));
        assert!(
            !again.is_empty(),
            "a leap froze the bucket beyond one refill"
        );
        admitted.extend(again);
        assert_bucket_bound(&admitted, u64::from(C), T);
    });
}

#[test]
fn buckets_leaping_reader() {
    for_each_bucket(leaping_reader);
}

// ---------------------------------------------------------------------------------------------
// (e) Reconfiguration races.

/// The driver drains the bucket; then, with no time passing, R lowers the rate (one permit per
/// `4·T`, via `set_rate`, or lowers the capacity via `set_limit(1)`: `set_limit` sets the limit
/// every Decision reports, a bucket's capacity) while B takes 1. No
/// time elapsed, so the bound (at the faster rate) allows nothing more: a reconfiguration must
/// never turn the booked debt into fresh permits. On today's code the debt, kept in ns, is worth
/// fewer permits at the slower rate and C·(1 − T_old/T_new) permits appear at once.
fn lowering_the_rate_races_a_take(make: Make, via_set_limit: bool) {
    model(None, move || {
        let clock = ModelClock::starting_at(START);
        let l: Arc<dyn BucketLimiter> = Arc::from(make(&clock));
        let mut admitted = take(&*l, &clock, C, (0, 0));
        let setter = {
            let l = l.clone();
            thread::spawn(move || {
                if via_set_limit {
                    l.set_limit(1).unwrap();
                } else {
                    l.change_rate(Rate::new(1, Duration::from_nanos(4 * T)));
                }
                Vec::new()
            })
        };
        let b = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        };
        admitted = join_all(vec![setter, b], admitted);
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        assert_bucket_bound(&admitted, u64::from(C), T);
    });
}

#[test]
fn buckets_set_rate_races_a_take() {
    for_each_bucket(|make| lowering_the_rate_races_a_take(make, false));
}

#[test]
fn buckets_set_limit_races_a_take() {
    for_each_bucket(|make| lowering_the_rate_races_a_take(make, true));
}

/// As [`lowering_the_rate_races_a_take`], on a bucket already reconfigured: the driver first
/// lowers the rate to one permit per `2·T` (generation 1, whose words carry stamp bits 1) and
/// drains it, so B's take loads a word of other stamp bits than generation 0's and runs the
/// short path's other copy with that word kept (`VirtualTime::short`'s second branch, which
/// loads the generation after the word, as `recheck` requires) while R lowers the rate again
/// (generation 2). No time passes after the drain: nothing more may be admitted.
fn lowering_the_rate_races_a_take_on_a_reconfigured_bucket(make: Make) {
    model(None, move || {
        let clock = ModelClock::starting_at(START);
        let l: Arc<dyn BucketLimiter> = Arc::from(make(&clock));
        l.change_rate(Rate::new(1, Duration::from_nanos(2 * T)));
        let mut admitted = take(&*l, &clock, C, (0, 0));
        assert_eq!(permits(&admitted), u64::from(C), "the drain is admitted");
        let setter = {
            let l = l.clone();
            thread::spawn(move || {
                l.change_rate(Rate::new(1, Duration::from_nanos(4 * T)));
                Vec::new()
            })
        };
        let b = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        };
        admitted = join_all(vec![setter, b], admitted);
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        assert_bucket_bound(&admitted, u64::from(C), T);
        assert_eq!(
            permits(&admitted),
            u64::from(C),
            "no time passed after the drain"
        );
    });
}

#[test]
fn buckets_set_rate_races_a_take_on_a_reconfigured_bucket() {
    for_each_bucket(lowering_the_rate_races_a_take_on_a_reconfigured_bucket);
}

/// Two takes race for the last permit of a bucket changed once (generation 1, one permit per
/// `2·T`): the driver takes one of the two after the change, so the word carries stamp bits 1 and
/// both A and B run generation 1's own copy of the short path (`VirtualTime::short`'s second
/// branch, the generation a constant); the one whose compare-exchange loses decides again on the
/// winner's word, in that copy. No time passes: exactly one of them is admitted, and nothing
/// after.
fn takes_race_on_a_bucket_changed_once(make: Make) {
    model(None, move || {
        let clock = ModelClock::starting_at(START);
        let l: Arc<dyn BucketLimiter> = Arc::from(make(&clock));
        l.change_rate(Rate::new(1, Duration::from_nanos(2 * T)));
        let mut admitted = take(&*l, &clock, 1, (0, 0));
        assert_eq!(permits(&admitted), 1, "the first take after the change");
        let [a, b] = [(); 2].map(|()| {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        });
        admitted = join_all(vec![a, b], admitted);
        assert_eq!(
            permits(&admitted),
            u64::from(C),
            "one of A and B is admitted"
        );
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        assert_eq!(permits(&admitted), u64::from(C), "no time passed");
        assert_bucket_bound(&admitted, u64::from(C), T);
    });
}

#[test]
fn buckets_takes_race_on_a_bucket_changed_once() {
    for_each_bucket(takes_race_on_a_bucket_changed_once);
}

/// The capacity drops from 2 to 1 while two threads take on a full bucket (A once, B
/// twice): the bound at the larger capacity holds, and after the change a drained bucket stays
/// drained (no time passes).
fn set_capacity_races_takes(make: Make) {
    model(None, move || {
        let clock = ModelClock::starting_at(START);
        let l: Arc<dyn BucketLimiter> = Arc::from(make(&clock));
        let setter = {
            let l = l.clone();
            thread::spawn(move || {
                l.change_capacity(1);
                Vec::new()
            })
        };
        let a = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        };
        // B's two takes run on a model thread of their own: run on the thread that built the
        // limiter, loom explored 571 executions of this race.
        let b = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                let mut got = take(&*l, &clock, 1, (0, 0));
                got.extend(take(&*l, &clock, 1, (0, 0)));
                got
            })
        };
        let mut admitted = join_all(vec![setter, a, b], Vec::new());
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        assert_bucket_bound(&admitted, u64::from(C), T);
    });
}

#[test]
fn buckets_set_capacity_races_takes() {
    for_each_bucket(set_capacity_races_takes);
}

// ---------------------------------------------------------------------------------------------
// SmoothBursty: 10 permits/s (interval 100 ms), 0.2 s of stored permits (2).

/// Nanoseconds per permit of the smooth models.
const SMOOTH_T: u64 = 100_000_000;
/// Stored permits (2) + the one request a free limiter books as debt.
const SMOOTH_C: u64 = 3;
/// Real time at creation: 1 s, whole microseconds.
const SMOOTH_START: u64 = 1_000_000_000;

fn bursty(clock: &ModelClock) -> SmoothBursty<ModelClock> {
    let limiter = SmoothBursty::with_max_burst(10.0, 0.2, clock.clone()).unwrap();
    clock.advance(3 * SMOOTH_T); // 2 permits stored (the cap), a whole number of µs
    limiter
}

/// (a) A takes twice, B moves time on by one interval and takes once, then the driver once: 4 requests
/// against a bound of 3 over any span shorter than one interval.
#[test]
fn bursty_clock_moves_between_steps() {
    model(None, || {
        let clock = ModelClock::starting_at(SMOOTH_START);
        let l = Arc::new(bursty(&clock));
        let a = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                let mut got = take(&*l, &clock, 1, (0, 0));
                got.extend(take(&*l, &clock, 1, (0, 0)));
                got
            })
        };
        // B runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 189 executions of this race.
        let b = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(SMOOTH_T);
                take(&*l, &clock, 1, (0, 0))
            })
        };
        let mut admitted = join_all(vec![a, b], Vec::new());
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        assert_bucket_bound(&admitted, SMOOTH_C, SMOOTH_T);
    });
}

/// (b) S may stall right after its clock read while D moves on 2 s and takes 3 (stored + one in
/// debt); then the driver takes once more. S is decided at the floor; the
/// model asserts the upper bound only, which a stale read (refusing more, never admitting more)
/// keeps anyway: it passes with the smooth floor never raised (review build).
#[test]
fn bursty_stalled_reader() {
    model(None, || {
        let clock = ModelClock::starting_at(SMOOTH_START);
        let l = Arc::new(bursty(&clock));
        let s = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        };
        // D runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 146 executions of this race.
        let d = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(20 * SMOOTH_T);
                let mut got = take(&*l, &clock, 2, (0, 0));
                got.extend(take(&*l, &clock, 1, (0, 0)));
                got
            })
        };
        let mut admitted = join_all(vec![s, d], Vec::new());
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        assert_bucket_bound(&admitted, SMOOTH_C, SMOOTH_T);
    });
}

/// L lags `lag` and takes 1 while a writer W takes 1, with 2 stored: both are admitted in every
/// interleaving (W on a model thread of its own: run on the thread that built the limiter, loom
/// explored 27 executions of each model, now 168); then the driver takes `later` more, and the bound holds with L widened by its
/// lag.
fn bursty_lagging_reader_races_a_take(lag: u64, later: usize) {
    model(None, move || {
        let clock = ModelClock::starting_at(SMOOTH_START);
        let l = Arc::new(bursty(&clock));
        let lagging = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::set_thread_lag(lag);
                take(&*l, &clock, 1, (lag, 0))
            })
        };
        let writer = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        };
        let mut admitted = join_all(vec![lagging, writer], Vec::new());
        assert_eq!(admitted.len(), 2, "a lagging read refused a stored permit");
        for _ in 0..later {
            admitted.extend(take(&*l, &clock, 1, (0, 0)));
        }
        assert_bucket_bound(&admitted, SMOOTH_C, SMOOTH_T);
    });
}

/// (c) L lags half an interval. W takes 1 and L takes 1 with 2 stored: both are free
/// and admitted; then the driver takes twice more: the bound holds with L widened by its lag.
/// Half an interval is covered by the stored permits at L's own time too: this model passes
/// with the smooth floor never raised (review build); (c') is the one that needs it.
#[test]
fn bursty_lagging_reader() {
    bursty_lagging_reader_races_a_take(SMOOTH_T / 2, 2);
}

/// (c') L lags two intervals (more than the one stored permit W leaves): read first, it may
/// load the word before W's take lands and lose its compare-exchange to it. The retry must
/// decide on W's word at W's time (the floor loaded again), where
/// one permit is still stored: decided at its own read, two intervals earlier, that word is in
/// debt and L would be refused. Both are admitted in every interleaving.
#[test]
fn bursty_lagging_reader_that_loses_its_race() {
    bursty_lagging_reader_races_a_take(2 * SMOOTH_T, 0);
}

/// (d) P's one read leaps 10 s + 1 ms while W takes 1 (a model thread of its own: 27
/// executions on the thread that built the limiter, now 228); then the driver takes twice at
/// the same real time (any answer) and must be admitted again 0.3 s later (max burst + one
/// interval): a leap freezes the limiter for a bounded time. On today's code the floor stays at
/// the leapt time and the limiter refuses for 10 s.
#[test]
fn bursty_leaping_reader() {
    let lead = MAX_LAG + 1_000_000;
    model(None, move || {
        let clock = ModelClock::starting_at(SMOOTH_START);
        let l = Arc::new(bursty(&clock));
        let leaper = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                ModelClock::leap_next_read(lead);
                take(&*l, &clock, 1, (0, lead))
            })
        };
        let writer = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        };
        let mut admitted = join_all(vec![leaper, writer], Vec::new());
        admitted.extend(take(&*l, &clock, 2, (0, 0)));
        clock.advance(3 * SMOOTH_T);
        let again = take(&*l, &clock, 1, (0, 0));
        assert!(!again.is_empty(), "a leap froze the limiter");
        admitted.extend(again);
        assert_bucket_bound(&admitted, SMOOTH_C, SMOOTH_T);
    });
}

/// (e) The driver drains the limiter (2 stored + 1 in debt); with no time passing, R lowers the
/// rate to 2/s while B takes 1: B must be refused (debt stays debt), and so must a take after.
#[test]
fn bursty_set_rate_races_a_take() {
    model(None, || {
        let clock = ModelClock::starting_at(SMOOTH_START);
        let l = Arc::new(bursty(&clock));
        let mut admitted = take(&*l, &clock, 2, (0, 0));
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        assert_eq!(permits(&admitted), 3);
        let setter = {
            let l = l.clone();
            thread::spawn(move || {
                l.set_rate(2.0).unwrap();
                Vec::new()
            })
        };
        let b = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        };
        admitted = join_all(vec![setter, b], admitted);
        admitted.extend(take(&*l, &clock, 1, (0, 0)));
        assert_eq!(
            permits(&admitted),
            3,
            "a rate change granted permits: {admitted:?}"
        );
        assert_bucket_bound(&admitted, SMOOTH_C, SMOOTH_T);
    });
}

/// `admit` (the bool path) racing `try_acquire` on a full bucket while the clock moves one
/// interval: the short path's compare-exchange retry (decided again on the winner's word) never
/// over-admits, and `admit` takes exactly what `try_acquire` would (capacity 2 + one interval of
/// refill at most; at least the capacity, since nothing else takes).
#[test]
fn buckets_admit_races_try_acquire() {
    model(None, || {
        let clock = ModelClock::starting_at(START);
        let l = Arc::new(limiter::<Gcra>(&clock));
        let a = {
            let l = l.clone();
            thread::spawn(move || u64::from(l.admit(1).unwrap()) + u64::from(l.admit(1).unwrap()))
        };
        // B runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 504 executions of this race.
        let b = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || {
                let taken = u64::from(l.try_acquire(1).unwrap().is_allowed());
                clock.advance(T);
                taken + u64::from(l.admit(1).unwrap())
            })
        };
        let total = a.join().unwrap() + b.join().unwrap();
        assert!(total <= u64::from(C) + 1, "admitted {total}");
        assert!(total >= u64::from(C), "admitted {total}");
    });
}

/// As `lowering_the_rate_races_a_take_on_a_reconfigured_bucket`, but the setter makes four
/// changes (generations 2..=5) while B takes from a drained word of generation 1; the last
/// change raises the capacity to 1000 (tokens kept: none). No time passes: B admits nothing.
/// Written for a reverted design (CHANGELOG: the reconfigured buckets' hot slots), where
/// generation 5 rewrote the configuration slot B's short path read: with that slot's
/// generation stored before its fields, a decision mixing generation 1's `fast_from` with
/// generation 5's `tau` admitted (42,941 executions), which no other bucket model caught. It
/// races any configuration store four changes deep with a take.
#[test]
fn a_take_races_four_reconfigurations() {
    model(None, move || {
        let clock = ModelClock::starting_at(START);
        let l: Arc<dyn BucketLimiter> = Arc::new(limiter::<Gcra>(&clock));
        l.change_rate(Rate::new(1, Duration::from_nanos(2 * T)));
        let admitted = take(&*l, &clock, C, (0, 0));
        assert_eq!(permits(&admitted), u64::from(C), "the drain is admitted");
        let setter = {
            let l = l.clone();
            thread::spawn(move || {
                l.change_capacity(3);
                l.change_capacity(4);
                l.change_capacity(5);
                l.change_capacity(1000);
                Vec::new()
            })
        };
        let b = {
            let (l, clock) = (l.clone(), clock.clone());
            thread::spawn(move || take(&*l, &clock, 1, (0, 0)))
        };
        let got = join_all(vec![setter, b], Vec::new());
        assert_eq!(permits(&got), 0, "no time passed after the drain: {got:?}");
    });
}
