//! The real-clock adversarial stress (issue 14): oversubscribed threads (2, 8 and 32 on however
//! few cores), real clocks (quanta, coarse, monotonic) with injected stalls and lags, a thread
//! reconfiguring the limiter at random moments, and an exact checker over every admission's
//! stamps (`tests/support/stress_check.rs` says why it can never flag a correct limiter).
//!
//! * Short form (CI): `cargo test --test time_stress` — bounded by decision counts, never by wall
//!   time, so a loaded machine makes it slower, never red.
//! * Long form: `FLOODGATE_STRESS_DECISIONS=100000000 cargo test --release --test time_stress --
//!   --nocapture --test-threads=1` — that many decisions per algorithm (split over the clocks
//!   and thread counts); prints the worst excess per algorithm and run.
//!
//! A leaping clock is outside the exact bound's model (a reading from the future *is* the future
//! for the limiter), so leaps get a liveness check instead: after one far-future read, an attempt
//! started more than the documented horizon (`MAX_CLOCK_LAG_NANOS`) plus one period later must
//! be admitted.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use floodgate::algorithms::MAX_CLOCK_LAG_NANOS;
use floodgate::lease::PerCore;
use floodgate::{
    Anchor, AtomicLimiter, Clock, CoarseClock, Decision, FixedWindow, Gcra, Keyed, LeakyBucket,
    Limiter, MonotonicClock, PackedSlidingWindow, QuantaClock, Rate, Sharded, SlidingWindowLimiter,
    SmoothBursty, SmoothWarmingUp, TokenBucket,
};

#[path = "support/fault_clock.rs"]
mod fault_clock;
#[path = "support/stress_check.rs"]
mod stress_check;

use fault_clock::{FaultClock, Faults, Shared, begin_call, below, random, take_injected_lag};
use stress_check::{Admission, rate_excess, span_excess, window_end_excess};

/// Cases known to fail, with the issue item that explains them. They still run and print their
/// excess; they are not asserted. Empty: every case is asserted.
///
/// Measured before issue 14's fixes (short form, worst excess in permits over the 9 runs, in 3 runs of the
/// binary): fixed_window_aligned +4,997 to +6,130, fixed_window_anchored +3,854 to +5,993,
/// packed_sliding_window +4,851 to +9,004 (+2,662 with only lags shorter than the horizon: a
/// stall of one window is enough), sharded +1,367 to +2,794, keyed_fixed_window +1,000 to
/// +2,168; gcra, token_bucket, leaky_bucket +497 to +500, keyed_gcra +423 to +500 (the item's
/// C·(1 − T_old/T_new) = 500 with C = 1,000 and T doubled). Every run of each was over.
const KNOWN_FAILING: &[(&str, &str)] = &[];

/// Cases whose leap liveness check is known to fail. Empty: every case is asserted.
/// Measured before issue 14's fixes: after one read a day ahead and a drain, each still refused 10 s later
/// (a day of refusals), and so did sliding_window; the fixed windows, packed sliding window and
/// sharded recovered at once.
const KNOWN_FROZEN: &[(&str, &str)] = &[];

/// Decisions per algorithm in the short form, split over 3 clocks × 3 thread counts.
const SHORT_DECISIONS: u64 = 360_000;
const THREADS: [usize; 3] = [2, 8, 32];

/// The fixed and sliding windows' configuration: `LIMITS[0]` per `WINDOW`, reconfigured between
/// the two limits (the case: 1,000 per 4 ms).
const WINDOW: Duration = Duration::from_millis(4);
const LIMITS: [u32; 2] = [1_000, 500];
/// The buckets: 2 or 1 permits per 10 µs (via `set_rate` or `set_limit`), capacity 1,000 or 500.
const BUCKET_PERIOD: Duration = Duration::from_micros(10);
const BUCKET_AMOUNTS: [u32; 2] = [2, 1];
const CAPACITIES: [u32; 2] = [1_000, 500];
/// The smooth limiters: 40,000 or 20,000 permits/s (whole µs per permit: exact), bursts of 5 ms.
const SMOOTH_RATES: [f64; 2] = [40_000.0, 20_000.0];
const SMOOTH_BURST: Duration = Duration::from_millis(5);
/// Requests take 1 to `MAX_N` permits.
const MAX_N: u32 = 3;
/// Keys of the keyed limiters.
const KEYS: u64 = 4;

/// What the stress drives: one limiter, or a keyed map of them.
trait Subject: Send + Sync {
    /// How many keys it limits separately (1: one limiter).
    fn keys(&self) -> u64;
    fn acquire(&self, key: u64, n: u32) -> Decision;
    /// One random reconfiguration between the two configured values.
    fn reconfigure(&self, choice: u64);
}

struct One<L> {
    limiter: L,
    reconfigure: fn(&L, u64),
}

impl<L: Limiter> Subject for One<L> {
    fn keys(&self) -> u64 {
        1
    }
    fn acquire(&self, _key: u64, n: u32) -> Decision {
        self.limiter.try_acquire(n).expect("a valid request")
    }
    fn reconfigure(&self, choice: u64) {
        (self.reconfigure)(&self.limiter, choice);
    }
}

struct Many<A: floodgate::Algorithm> {
    keyed: Keyed<u64, A, FaultClock>,
    limits: [u32; 2],
}

impl<A: floodgate::Algorithm> Subject for Many<A> {
    fn keys(&self) -> u64 {
        KEYS
    }
    fn acquire(&self, key: u64, n: u32) -> Decision {
        self.keyed.try_acquire(&key, n).expect("a valid request")
    }
    fn reconfigure(&self, choice: u64) {
        self.keyed
            .set_limit(self.limits[(choice % 2) as usize])
            .unwrap();
    }
}

/// An exact bound the checker applies to every key's admissions.
#[derive(Clone, Copy, Debug)]
enum Bound {
    /// At most `limit` in any `span` consecutive aligned units of `unit` ns.
    Spans { unit: u64, span: u64, limit: u64 },
    /// Anchored windows: at most `limit` per window, located by `reset_after`.
    AnchoredEnds { window: u64, limit: u64 },
    /// At most `burst + elapsed / nanos_per_permit` over every interval.
    Rate { burst: u64, nanos_per_permit: u64 },
}

struct Target {
    name: &'static str,
    build: fn(FaultClock) -> Box<dyn Subject>,
    bounds: Vec<Bound>,
    /// How far before the call's own reading a correct decision may be placed (the smooth
    /// limiters truncate readings to whole µs).
    truncation: u64,
    /// One period of the limiter (a window, or τ): the leap check allows the horizon plus this.
    period: Duration,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap()
}

fn fixed_bounds() -> Vec<Bound> {
    let w = nanos(WINDOW);
    let l = u64::from(LIMITS[0]);
    vec![
        Bound::Spans {
            unit: w,
            span: 1,
            limit: l,
        },
        Bound::Spans {
            unit: w,
            span: 2,
            limit: 2 * l,
        },
    ]
}

fn sliding_bounds(cells: u32) -> Vec<Bound> {
    vec![Bound::Spans {
        unit: nanos(WINDOW) / u64::from(cells),
        span: u64::from(cells),
        limit: u64::from(LIMITS[0]),
    }]
}

fn bucket_bounds() -> Vec<Bound> {
    // Most permissive: the largest capacity, the fastest rate.
    vec![Bound::Rate {
        burst: u64::from(CAPACITIES[0]),
        nanos_per_permit: nanos(BUCKET_PERIOD) / u64::from(BUCKET_AMOUNTS[0]),
    }]
}

/// How long a `PerCore` bucket's lease may be served in this stress.
const LEASE_LIFETIME: Duration = Duration::from_micros(20);

/// A bucket served by `PerCore` leases: every permit served was granted by the exact bucket at
/// most the lease lifetime `L` earlier, so the admissions served in `[x, y]` were granted in
/// `(x − L, y]`: at most `burst + (y − x + L) / T`, i.e. the exact bound with `⌈L / T⌉` more
/// burst (see `floodgate::lease`).
fn per_core_bucket_bounds() -> Vec<Bound> {
    let interval = nanos(BUCKET_PERIOD) / u64::from(BUCKET_AMOUNTS[0]);
    vec![Bound::Rate {
        burst: u64::from(CAPACITIES[0]) + nanos(LEASE_LIFETIME).div_ceil(interval),
        nanos_per_permit: interval,
    }]
}

fn smooth_bounds() -> Vec<Bound> {
    // Guava's accounting: let V = stored permits − (next free − now) / interval. A request is
    // admitted only when next free ≤ now, so V ≥ 0 before it; it lowers V by exactly its n; time
    // raises V by at most elapsed / interval, and V never exceeds the stored maximum (a burst).
    // So the admissions decided in [x, y] hold at most burst + n_last + (y − x) / interval.
    // `set_rate` rescales the stored permits with the maximum (their share of a burst is kept,
    // and that share refills in the burst's seconds whatever the rate), so with live rates the
    // fastest rate and its burst bound every interval. Plus one permit for the µs rounding.
    let rate = SMOOTH_RATES[0];
    let stored = (rate * SMOOTH_BURST.as_secs_f64()).ceil() as u64;
    vec![Bound::Rate {
        burst: stored + u64::from(MAX_N) + 1,
        nanos_per_permit: (1e9 / rate) as u64,
    }]
}

fn fixed_reconfigure<L: Limiter>(limiter: &L, choice: u64) {
    limiter.set_limit(LIMITS[(choice % 2) as usize]).unwrap();
}

macro_rules! bucket_reconfigure {
    ($limiter:expr, $choice:expr) => {{
        let pick = (($choice >> 2) % 2) as usize;
        match $choice % 3 {
            0 => $limiter
                .algorithm()
                .set_rate(
                    Rate::new(BUCKET_AMOUNTS[pick], BUCKET_PERIOD),
                    $limiter.clock().now_nanos(),
                )
                .unwrap(),
            1 => $limiter
                .algorithm()
                .set_capacity(CAPACITIES[pick], $limiter.clock().now_nanos())
                .unwrap(),
            // `set_limit` sets the limit every Decision reports: a bucket's capacity.
            _ => $limiter.set_limit(CAPACITIES[pick]).unwrap(),
        }
    }};
}

fn smooth_reconfigure<L: Limiter>(limiter: &L, choice: u64) {
    limiter
        .set_limit(SMOOTH_RATES[(choice % 2) as usize] as u32)
        .unwrap();
}

fn targets() -> Vec<Target> {
    let window_period = WINDOW;
    let bucket_tau = BUCKET_PERIOD * CAPACITIES[0];
    vec![
        Target {
            name: "fixed_window_aligned",
            build: |c| {
                Box::new(One {
                    limiter: AtomicLimiter::with_clock(
                        FixedWindow::aligned(LIMITS[0], WINDOW).unwrap(),
                        c,
                    ),
                    reconfigure: fixed_reconfigure,
                })
            },
            bounds: fixed_bounds(),
            truncation: 0,
            period: window_period,
        },
        Target {
            name: "fixed_window_anchored",
            build: |c| {
                Box::new(One {
                    limiter: AtomicLimiter::with_clock(
                        FixedWindow::with_anchor(LIMITS[0], WINDOW, Anchor::FirstRequest).unwrap(),
                        c,
                    ),
                    reconfigure: fixed_reconfigure,
                })
            },
            bounds: vec![Bound::AnchoredEnds {
                window: nanos(WINDOW),
                limit: u64::from(LIMITS[0]),
            }],
            truncation: 0,
            period: window_period,
        },
        Target {
            name: "sliding_window",
            build: |c| {
                Box::new(One {
                    limiter: SlidingWindowLimiter::with_clock(LIMITS[0], WINDOW, 4, c).unwrap(),
                    reconfigure: fixed_reconfigure,
                })
            },
            bounds: sliding_bounds(4),
            truncation: 0,
            period: window_period,
        },
        Target {
            name: "packed_sliding_window",
            build: |c| {
                Box::new(One {
                    limiter: AtomicLimiter::with_clock(
                        PackedSlidingWindow::new(LIMITS[0], WINDOW, 2).unwrap(),
                        c,
                    ),
                    reconfigure: fixed_reconfigure,
                })
            },
            bounds: sliding_bounds(2),
            truncation: 0,
            period: window_period,
        },
        Target {
            name: "sharded",
            build: |c| {
                Box::new(One {
                    limiter: Sharded::with_clock(LIMITS[0], WINDOW, 4, c).unwrap(),
                    reconfigure: fixed_reconfigure,
                })
            },
            bounds: fixed_bounds(),
            truncation: 0,
            period: window_period,
        },
        Target {
            name: "per_core_fixed_window",
            build: |c| {
                Box::new(One {
                    limiter: PerCore::with_stripes(
                        AtomicLimiter::with_clock(
                            FixedWindow::aligned(LIMITS[0], WINDOW).unwrap(),
                            c,
                        ),
                        4,
                    )
                    .unwrap(),
                    reconfigure: fixed_reconfigure,
                })
            },
            bounds: fixed_bounds(),
            truncation: 0,
            period: window_period,
        },
        Target {
            name: "per_core_sliding_window",
            build: |c| {
                Box::new(One {
                    limiter: PerCore::with_stripes(
                        SlidingWindowLimiter::with_clock(LIMITS[0], WINDOW, 4, c).unwrap(),
                        4,
                    )
                    .unwrap(),
                    reconfigure: fixed_reconfigure,
                })
            },
            bounds: sliding_bounds(4),
            truncation: 0,
            period: window_period,
        },
        Target {
            name: "per_core_gcra",
            build: |c| {
                let gcra = AtomicLimiter::with_clock(
                    Gcra::new(Rate::new(BUCKET_AMOUNTS[0], BUCKET_PERIOD), CAPACITIES[0]).unwrap(),
                    c,
                );
                Box::new(One {
                    limiter: PerCore::with_stripes(gcra, 4)
                        .unwrap()
                        .with_lifetime(LEASE_LIFETIME)
                        .unwrap(),
                    reconfigure: |l, choice| bucket_reconfigure!(l.source(), choice),
                })
            },
            bounds: per_core_bucket_bounds(),
            truncation: 0,
            period: bucket_tau,
        },
        Target {
            name: "per_core_token_bucket",
            build: |c| {
                let bucket = AtomicLimiter::with_clock(
                    TokenBucket::new(Rate::new(BUCKET_AMOUNTS[0], BUCKET_PERIOD), CAPACITIES[0])
                        .unwrap(),
                    c,
                );
                Box::new(One {
                    limiter: PerCore::with_stripes(bucket, 4)
                        .unwrap()
                        .with_lifetime(LEASE_LIFETIME)
                        .unwrap(),
                    reconfigure: |l, choice| bucket_reconfigure!(l.source(), choice),
                })
            },
            bounds: per_core_bucket_bounds(),
            truncation: 0,
            period: bucket_tau,
        },
        Target {
            name: "gcra",
            build: |c| {
                Box::new(One {
                    limiter: AtomicLimiter::with_clock(
                        Gcra::new(Rate::new(BUCKET_AMOUNTS[0], BUCKET_PERIOD), CAPACITIES[0])
                            .unwrap(),
                        c,
                    ),
                    reconfigure: |l, choice| bucket_reconfigure!(l, choice),
                })
            },
            bounds: bucket_bounds(),
            truncation: 0,
            period: bucket_tau,
        },
        Target {
            name: "token_bucket",
            build: |c| {
                Box::new(One {
                    limiter: AtomicLimiter::with_clock(
                        TokenBucket::new(
                            Rate::new(BUCKET_AMOUNTS[0], BUCKET_PERIOD),
                            CAPACITIES[0],
                        )
                        .unwrap(),
                        c,
                    ),
                    reconfigure: |l, choice| bucket_reconfigure!(l, choice),
                })
            },
            bounds: bucket_bounds(),
            truncation: 0,
            period: bucket_tau,
        },
        Target {
            name: "leaky_bucket",
            build: |c| {
                Box::new(One {
                    limiter: AtomicLimiter::with_clock(
                        LeakyBucket::new(
                            Rate::new(BUCKET_AMOUNTS[0], BUCKET_PERIOD),
                            CAPACITIES[0],
                        )
                        .unwrap(),
                        c,
                    ),
                    reconfigure: |l, choice| bucket_reconfigure!(l, choice),
                })
            },
            bounds: bucket_bounds(),
            truncation: 0,
            period: bucket_tau,
        },
        Target {
            name: "smooth_bursty",
            build: |c| {
                Box::new(One {
                    limiter: SmoothBursty::with_max_burst(
                        SMOOTH_RATES[0],
                        SMOOTH_BURST.as_secs_f64(),
                        c,
                    )
                    .unwrap(),
                    reconfigure: smooth_reconfigure,
                })
            },
            bounds: smooth_bounds(),
            truncation: 1_000,
            period: SMOOTH_BURST,
        },
        Target {
            name: "smooth_warming_up",
            build: |c| {
                Box::new(One {
                    limiter: SmoothWarmingUp::create_with_clock(SMOOTH_RATES[0], SMOOTH_BURST, c)
                        .unwrap(),
                    reconfigure: smooth_reconfigure,
                })
            },
            bounds: smooth_bounds(),
            truncation: 1_000,
            // The cold rate is 3× slower: a period is then 3 stable intervals per permit.
            period: SMOOTH_BURST * 3,
        },
        Target {
            name: "keyed_gcra",
            build: |c| {
                Box::new(Many {
                    keyed: Keyed::builder(
                        Gcra::new(Rate::new(BUCKET_AMOUNTS[0], BUCKET_PERIOD), CAPACITIES[0])
                            .unwrap(),
                    )
                    .clock(c)
                    .max_keys(1_000)
                    .build()
                    .unwrap(),
                    limits: CAPACITIES,
                })
            },
            bounds: bucket_bounds(),
            truncation: 0,
            period: bucket_tau,
        },
        Target {
            name: "keyed_fixed_window",
            build: |c| {
                Box::new(Many {
                    keyed: Keyed::builder(FixedWindow::aligned(LIMITS[0], WINDOW).unwrap())
                        .clock(c)
                        .max_keys(1_000)
                        .build()
                        .unwrap(),
                    limits: LIMITS,
                })
            },
            bounds: fixed_bounds(),
            truncation: 0,
            period: window_period,
        },
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClockKind {
    Quanta,
    Coarse,
    Monotonic,
}

impl ClockKind {
    const ALL: [ClockKind; 3] = [ClockKind::Quanta, ClockKind::Coarse, ClockKind::Monotonic];

    fn base(self) -> Shared {
        match self {
            ClockKind::Quanta => Shared(Arc::new(QuantaClock::new())),
            // One for the whole binary: a CoarseClock created while another is dropped can
            // come up without its upkeep (issue 14 item 4), frozen, which would make a run
            // vacuous (still sound: a frozen clock puts every admission in one window).
            ClockKind::Coarse => {
                static COARSE: OnceLock<Shared> = OnceLock::new();
                COARSE
                    .get_or_init(|| Shared(Arc::new(CoarseClock::new().expect("a coarse clock"))))
                    .clone()
            }
            ClockKind::Monotonic => Shared(Arc::new(MonotonicClock::new())),
        }
    }

    /// How far two cores' reads of this clock may disagree: the TSC of one core may trail
    /// another's (quanta); a coarse clock is one shared counter, the monotonic clock the
    /// kernel's. Widens every stamp interval by this much on both sides.
    fn skew(self) -> u64 {
        match self {
            ClockKind::Quanta => 20_000,
            ClockKind::Coarse | ClockKind::Monotonic => 0,
        }
    }
}

/// Faults in the stress runs: frequent yields, a sleep of up to two windows after one read in
/// 3,000 (a thread preempted between its read and its commit), and one read in 2,000 lagging by
/// up to two windows or by more than the 10 s horizon.
/// `FLOODGATE_STRESS_FAULTS=0` turns them off (to tell a fault's effect from a reconfiguration's).
fn faults() -> Faults {
    if std::env::var("FLOODGATE_STRESS_FAULTS").is_ok_and(|v| v == "0") {
        return Faults::NONE;
    }
    Faults {
        yield_one_in: 64,
        sleep_one_in: 3_000,
        max_sleep: WINDOW * 2,
        lag_one_in: 2_000,
        max_short_lag_nanos: nanos(WINDOW * 2),
        // `FLOODGATE_STRESS_LONG_LAGS=0`: only lags shorter than the horizon.
        long_lags: !std::env::var("FLOODGATE_STRESS_LONG_LAGS").is_ok_and(|v| v == "0"),
    }
}

struct Outcome {
    /// The worst excess in permits over every bound and key (≤ 0: within every bound).
    worst: f64,
    detail: String,
    admitted: u64,
}

/// One run: `threads` workers making `decisions` requests in all, a reconfiguring thread, then
/// the checker.
fn run(target: &Target, kind: ClockKind, threads: usize, decisions: u64) -> Outcome {
    let base = kind.base();
    let subject = (target.build)(FaultClock::new(base.clone(), faults()));
    let subject = &*subject;
    let start = Barrier::new(threads + 1);
    let working = AtomicUsize::new(threads);
    let per_thread = decisions / threads as u64;
    let records: Mutex<Vec<(u64, Admission)>> = Mutex::new(Vec::new());
    let skew = kind.skew();
    let truncation = target.truncation;
    thread::scope(|s| {
        for _ in 0..threads {
            let (base, start, records, working) = (&base, &start, &records, &working);
            s.spawn(move || {
                let mut mine = Vec::new();
                start.wait();
                for _ in 0..per_thread {
                    let key = below(subject.keys());
                    let n = 1 + below(u64::from(MAX_N)) as u32;
                    begin_call();
                    let before = base.now_nanos();
                    let decision = subject.acquire(key, n);
                    let after = base.now_nanos();
                    let lag = take_injected_lag();
                    if decision.is_allowed() {
                        let reset = u64::try_from(decision.reset_after().as_nanos()).unwrap();
                        mine.push((
                            key,
                            Admission {
                                lo: before.saturating_sub(lag + skew + truncation),
                                hi: after.saturating_add(skew),
                                n: u64::from(n),
                                reset_nanos: reset,
                            },
                        ));
                    }
                }
                records.lock().unwrap().extend(mine);
                working.fetch_sub(1, Ordering::SeqCst);
            });
        }
        s.spawn(|| {
            start.wait();
            // Timing here only spreads the reconfigurations; the checker does not depend on it.
            // It stops when the last worker has made its counted decisions.
            // `FLOODGATE_STRESS_RECONFIGURE=0` turns it off.
            let reconfigure =
                !std::env::var("FLOODGATE_STRESS_RECONFIGURE").is_ok_and(|v| v == "0");
            // The first move is choice 12: the buckets' rate down (on a drained bucket, the
            // moment item 2 is about), the others' first value again.
            let mut choice = 12;
            while working.load(Ordering::SeqCst) > 0 {
                thread::sleep(Duration::from_micros(below(2_000)));
                if reconfigure {
                    // Its first read may lag beyond the horizon, as a worker's.
                    begin_call();
                    subject.reconfigure(choice);
                }
                choice = random();
            }
        });
    });
    check(&records.into_inner().unwrap(), target)
}

/// Applies every bound of `target` to every key's admissions.
fn check(records: &[(u64, Admission)], target: &Target) -> Outcome {
    let mut outcome = Outcome {
        worst: f64::MIN,
        detail: String::new(),
        admitted: records.iter().map(|(_, a)| a.n).sum(),
    };
    for key in 0..KEYS {
        let admissions: Vec<Admission> = records
            .iter()
            .filter(|(k, _)| *k == key)
            .map(|(_, a)| *a)
            .collect();
        if admissions.is_empty() {
            continue;
        }
        for bound in &target.bounds {
            let (excess, at) = match *bound {
                Bound::Spans { unit, span, limit } => {
                    let (e, at) = span_excess(&admissions, unit, span, limit);
                    (e as f64, at * unit)
                }
                Bound::AnchoredEnds { window, limit } => {
                    let (e, at) = window_end_excess(&admissions, window, limit);
                    (e as f64, at * (window / 8))
                }
                Bound::Rate {
                    burst,
                    nanos_per_permit,
                } => rate_excess(&admissions, burst, nanos_per_permit),
            };
            if excess > outcome.worst {
                outcome.worst = excess;
                outcome.detail = format!("key {key}, {bound:?}, at {at} ns");
            }
        }
    }
    outcome
}

fn known(list: &[(&'static str, &'static str)], name: &str) -> Option<&'static str> {
    list.iter().find(|(n, _)| *n == name).map(|(_, why)| *why)
}

/// Decisions per algorithm: `FLOODGATE_STRESS_DECISIONS`, or the short form's.
fn decisions_per_algorithm() -> u64 {
    std::env::var("FLOODGATE_STRESS_DECISIONS")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(SHORT_DECISIONS, |v| v as u64)
}

/// Every clock × thread count for the target named `name`; asserts every run within its bounds
/// unless the target is in [`KNOWN_FAILING`].
fn stress(name: &str) {
    let target = targets().into_iter().find(|t| t.name == name).unwrap();
    let per_run = decisions_per_algorithm() / (ClockKind::ALL.len() * THREADS.len()) as u64;
    let mut failures = Vec::new();
    let mut worst = f64::MIN;
    let started = Instant::now();
    for kind in ClockKind::ALL {
        for threads in THREADS {
            let outcome = run(&target, kind, threads, per_run);
            let line = format!(
                "{name} {kind:?} {threads} threads: {per_run} decisions, {} permits admitted, \
                 worst excess {:+} ({})",
                outcome.admitted, outcome.worst, outcome.detail
            );
            println!("{line}");
            worst = worst.max(outcome.worst);
            if outcome.worst > 0.0 {
                failures.push(line);
            }
        }
    }
    println!(
        "{name}: worst excess over all runs {worst:+} permits ({:.1?})",
        started.elapsed()
    );
    match known(KNOWN_FAILING, name) {
        Some(why) => println!(
            "{name}: known failing ({why}); {} of {} runs over their bound",
            failures.len(),
            ClockKind::ALL.len() * THREADS.len()
        ),
        None => assert!(
            failures.is_empty(),
            "admitted beyond the exact bound:\n{}",
            failures.join("\n")
        ),
    }
}

#[test]
fn fixed_window_aligned() {
    stress("fixed_window_aligned");
}

#[test]
fn fixed_window_anchored() {
    stress("fixed_window_anchored");
}

#[test]
fn sliding_window() {
    stress("sliding_window");
}

#[test]
fn packed_sliding_window() {
    stress("packed_sliding_window");
}

#[test]
fn sharded() {
    stress("sharded");
}

#[test]
fn per_core_fixed_window() {
    stress("per_core_fixed_window");
}

#[test]
fn per_core_sliding_window() {
    stress("per_core_sliding_window");
}

#[test]
fn per_core_gcra() {
    stress("per_core_gcra");
}

#[test]
fn per_core_token_bucket() {
    stress("per_core_token_bucket");
}

#[test]
fn gcra() {
    stress("gcra");
}

#[test]
fn token_bucket() {
    stress("token_bucket");
}

#[test]
fn leaky_bucket() {
    stress("leaky_bucket");
}

#[test]
fn smooth_bursty() {
    stress("smooth_bursty");
}

#[test]
fn smooth_warming_up() {
    stress("smooth_warming_up");
}

#[test]
fn keyed_gcra() {
    stress("keyed_gcra");
}

#[test]
fn keyed_fixed_window() {
    stress("keyed_fixed_window");
}

/// One far-future read (a day ahead) must not freeze a limiter for longer than the horizon plus
/// one period: after the leap the limiter is drained, and an attempt *started* one period after
/// both the horizon and the drain, on an otherwise idle limiter, must be admitted.
/// Sound under any load: the deadline is on the clock, and the attempt that decides it started
/// after it. Every target runs in its own thread, so a frozen one costs the horizon once.
#[test]
fn a_leaping_read_never_freezes_a_limiter_beyond_the_horizon() {
    const LEAP: u64 = 86_400_000_000_000;
    let results: Vec<(&'static str, Result<Duration, String>)> = thread::scope(|s| {
        let handles: Vec<_> = targets()
            .into_iter()
            .map(|target| {
                s.spawn(move || {
                    let base = ClockKind::Monotonic.base();
                    let clock = FaultClock::new(base.clone(), Faults::NONE);
                    let subject = (target.build)(clock.clone());
                    assert!(subject.acquire(0, 1).is_allowed(), "{}", target.name);
                    clock.arm_leap(LEAP);
                    let leap_at = base.now_nanos();
                    subject.acquire(0, 1); // the leaping read, admitted or not
                    // Drain it: a limiter frozen at a far-future floor still serves its burst,
                    // but never refills.
                    for _ in 0..1_000_000 {
                        if !subject.acquire(0, 1).is_allowed() {
                            break;
                        }
                    }
                    let drained_at = base.now_nanos();
                    let deadline =
                        (leap_at + MAX_CLOCK_LAG_NANOS).max(drained_at) + nanos(target.period);
                    loop {
                        let before = base.now_nanos();
                        if subject.acquire(0, 1).is_allowed() {
                            return (target.name, Ok(Duration::from_nanos(before - leap_at)));
                        }
                        if before > deadline {
                            return (
                                target.name,
                                Err(format!(
                                    "still refusing {:?} after a one-day leap",
                                    Duration::from_nanos(before - leap_at)
                                )),
                            );
                        }
                        thread::sleep(Duration::from_millis(1));
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut failures = Vec::new();
    for (name, result) in results {
        println!("leap {name}: {result:?}");
        match (result, known(KNOWN_FROZEN, name)) {
            (Err(e), None) => failures.push(format!("{name}: {e}")),
            (Err(_), Some(why)) => println!("leap {name}: known frozen ({why})"),
            (Ok(_), _) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
