//! A tiny driver for instruction counts: calls `try_acquire(1)` N times on one limiter, on one
//! thread, inside `measured_loop` (never inlined), so callgrind can count exactly that loop:
//!
//! ```text
//! cargo build --release --example instructions
//! valgrind --tool=callgrind --toggle-collect='*measured_loop*' --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/instructions token-bucket allow quanta 1000000
//! callgrind_annotate /tmp/cg.out | head -30      # Ir / 1,000,000 = instructions per call
//! ```
//! Each call uses what a 429 needs of the `Decision` (`remaining` of an admission, `retry_after`
//! of a denial), as `governor-state` does in `examples/instructions_peers`; a limiter name ending
//! in `/admit` (`gcra/admit`) calls `admit` instead, which answers a bool, as `governor` does.
//! Limiters: fixed-window (anchored), fixed-window-aligned, token-bucket, gcra, gcra-reconf (a
//! gcra reconfigured once before the loop: generation 1's short path), sharded,
//! sliding-window-60 and sliding-window-6000 (the ring with 60 or 6,000 cells), clock (the clock
//! read alone), and the per-core forms (`lease::PerCore`, 16 stripes, default leases; the loop
//! runs on stripe 0): per-core/gcra, per-core/token-bucket, per-core/fixed-window (aligned),
//! per-core/sliding-window-N. governor is counted in `examples/instructions_peers`, a binary of its own: here,
//! the growing number of floodgate loops moved its calls across codegen units and out of line
//! (55 -> 94 instructions per call with no change to governor's code). Workloads: allow (limit
//! never reached), deny (exhausted after one permit), spent (sliding windows only: the whole
//! limit was taken at the very end of the cell before the current one, so every call is a denial
//! whose window holds a used closed cell: the denial an attacker makes every caller pay),
//! at-limit (the contention harness's `at-limit` call pattern, deterministic: clock `manual`
//! only, see [`at_limit`]; gcra, token-bucket, fixed-window-aligned, the sliding windows and the
//! per-core rows). Clocks: quanta, coarse, manual (at-limit only). On the coarse clock, one call and a bounded wait come first (see
//! `settle`): the measured loop starts past the start of the window that call opened.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Duration;

#[path = "common/measured_loops.rs"]
mod measured_loops;

use floodgate::lease::PerCore;
use floodgate::{
    AtomicLimiter, Clock, CoarseClock, FixedWindow, Gcra, Limiter, ManualClock, QuantaClock, Rate,
    Sharded, SlidingWindowLimiter, TokenBucket,
};
use measured_loops::{measured_loop, measured_loop_admit};

/// The stripes of the `per-core/...` rows: the contention report's 16-core machine's (a
/// `PerCore` decides near the limit by its stripes' share, `remaining / (2 × stripes)`), fixed
/// so the counts do not depend on the machine that takes them. The measured thread is the
/// first to use a `PerCore`: stripe 0.
const PER_CORE_STRIPES: usize = 16;

/// `source`'s per-core form, [`PER_CORE_STRIPES`] stripes and the default leases.
fn per_core<S: floodgate::lease::LeaseSource>(source: S) -> Option<PerCore<S>> {
    PerCore::with_stripes(source, PER_CORE_STRIPES).ok()
}

/// The call the loop makes: `try_acquire` (a whole `Decision`) or `admit` (a bool).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    Decision,
    Admit,
}

/// Whether the limiters read the coarse clock, whose first tick the measured loop must not start
/// in (see [`settle`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tick {
    /// quanta: every read is a new time; nothing to wait for.
    Free,
    /// The coarse clock: one call, then wait for the clock to pass the window's start.
    Coarse,
}

/// How long [`settle`] waits for the coarse clock before it gives up (1 ms ticks; under valgrind
/// the upkeep thread runs only when the main thread lets valgrind switch threads: it sleeps here).
const SETTLE_BOUND: Duration = Duration::from_secs(10);

/// Puts a coarse-clock limiter in the state the measured calls should meet. Without it, an
/// anchored fixed window's first call opens the window at the next unit (its start rounded up),
/// and a clock that does not tick during a short run (callgrind's: valgrind rarely lets the
/// upkeep thread run while the measured loop runs) keeps every measured call in the "window
/// starts one unit ahead" branch: a figure of the frozen clock, not of the limiter. So: one call
/// (the first permit: `deny` is exhausted by it, as it would be by the loop's first call), then
/// wait until the clock reads past the start of the window it opened: at most
/// `reset_after − period` past the call (the round-up; nothing for limiters without one), and at
/// least one tick in any case. A clock that jumped past the end of that window meanwhile (a
/// window of `period` from the start, when the call rounded up) would leave the loop a closed
/// window: then again. Bounded by [`SETTLE_BOUND`]; outside the measured loop, so callgrind does
/// not count it.
fn settle<L: Limiter>(limiter: &L, period: Duration) -> Result<(), String> {
    let clock = limiter.clock();
    let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    let started = std::time::Instant::now();
    loop {
        // The limiter's read lies in `before..=read` (the clock never goes back): `read` bounds
        // the window's start from above, `before` its end from below.
        let before = clock.now_nanos();
        let decision = limiter
            .try_acquire(1)
            .map_err(|e| format!("settling call: {e}"))?;
        let read = clock.now_nanos();
        let round_up = decision.reset_after().saturating_sub(period);
        let past = read.saturating_add(nanos(round_up));
        let mut now = clock.now_nanos();
        while now <= past {
            if started.elapsed() > SETTLE_BOUND {
                return Err(format!(
                    "the coarse clock did not pass {past} ns (read {read} ns) within \
                     {SETTLE_BOUND:?}: a frozen clock would measure the window-ahead branch only"
                ));
            }
            std::thread::sleep(Duration::from_micros(500));
            now = clock.now_nanos();
        }
        let end = before.saturating_add(nanos(decision.reset_after()));
        if round_up.is_zero() || now < end {
            return Ok(());
        }
        if started.elapsed() > SETTLE_BOUND {
            return Err(format!(
                "the coarse clock jumped past the settled window's end every time within \
                 {SETTLE_BOUND:?}"
            ));
        }
    }
}

/// How a row measures: the call it makes, and the clock's settling.
#[derive(Clone, Copy)]
struct How {
    call: Call,
    tick: Tick,
    /// The limiter's window or period (`settle` reads the round-up past it).
    period: Duration,
}

fn measured<L: Limiter>(how: How, limiter: &L, calls: u64) -> u64 {
    if how.tick == Tick::Coarse
        && let Err(e) = settle(limiter, how.period)
    {
        eprintln!("{e}");
        std::process::exit(1);
    }
    match how.call {
        Call::Decision => measured_loop(limiter, calls),
        Call::Admit => measured_loop_admit(limiter, calls),
    }
}

#[inline(never)]
fn measured_loop_clock<C: Clock>(clock: &C, calls: u64) -> u64 {
    (0..calls).fold(0, |acc, _| acc ^ black_box(clock.now_nanos()))
}

/// What the measured calls meet.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Workload {
    /// The limit is never reached.
    Allow,
    /// Exhausted by the first call.
    Deny,
    /// Sliding windows: the limit was spent at the end of the previous cell.
    Spent,
    /// About half the calls admitted, steadily (see [`at_limit`]).
    AtLimit,
}

/// The at-limit pace: the clock advances this many nanoseconds before every call.
const AT_LIMIT_STEP: u64 = 25;
/// The at-limit window or period: the contention harness's 10 ms (a sliding window's rounded up
/// to whole-nanosecond cells: 60 cells of 166,667 ns).
const AT_LIMIT_PERIOD: u64 = 10_000_000;
/// Windows called through (unmeasured) before the measured loop, in quarters: 4¼ windows. A
/// sliding window paced from empty admits every call of the first half of each window and
/// denies every call of the second (a cell's calls are all admitted or all denied: the counts
/// stay where the first window put them), so the measured calls start in the middle of an
/// admitting half: 1,000,000 calls (2.5 windows) are then half admitted, half denied.
const AT_LIMIT_WARM_QUARTERS: u64 = 17;

/// `try_acquire(1)` as [`measured_loop`] calls it, the clock advanced by [`AT_LIMIT_STEP`]
/// before each call (`ManualClock::advance_nanos`, a load and a compare-exchange: the
/// `clock at-limit manual` row counts it with one read, to subtract).
#[inline(never)]
fn measured_loop_paced<L: Limiter>(limiter: &L, clock: &ManualClock, calls: u64) -> u64 {
    // `black_box`: a body of its own, which the compiler cannot fold into `warm_up_paced`'s
    // (identical otherwise: folded, this loop's symbol is gone and callgrind counts nothing).
    paced(limiter, clock, black_box(calls))
}

/// The calls of [`measured_loop_paced`], for the warm-up (not counted: another name).
#[inline(always)]
fn paced<L: Limiter>(limiter: &L, clock: &ManualClock, calls: u64) -> u64 {
    (0..calls)
        .map(|_| {
            clock.advance_nanos(AT_LIMIT_STEP);
            match limiter.try_acquire(black_box(1)) {
                // Counted whatever `remaining` is (at the limit it is 0): the admitted calls.
                Ok(d) if d.is_allowed() => {
                    black_box(d.remaining());
                    1
                }
                Ok(d) => {
                    black_box(d.retry_after());
                    0
                }
                Err(_) => 0,
            }
        })
        .sum()
}

#[inline(never)]
fn warm_up_paced<L: Limiter>(limiter: &L, clock: &ManualClock, calls: u64) -> u64 {
    paced(limiter, clock, calls)
}

/// The contention harness's `at-limit` workload, deterministic: one thread calls
/// `try_acquire(1)` at a steady pace, one call every [`AT_LIMIT_STEP`] ns of a `ManualClock`,
/// against a limit of half the calls a window (or period) holds, so that about half the calls
/// are admitted over whole windows (a sliding window: the first half of each window's cells
/// admit every call, the second half deny every call, as the contention harness's turns do:
/// each turn starts on an empty window, admits, then denies; a crossing every `cell / step`
/// calls). [`AT_LIMIT_WARM_QUARTERS`] quarter windows are called through first. Limiters:
/// `sliding-window-N` (N cells of `⌈10 ms / N⌉`), gcra (its `Rate` as the harness builds it),
/// token-bucket, fixed-window-aligned, the per-core rows (the limit and period of gcra, or of
/// `sliding-window-N`), clock (the advance and one read alone). Returns the admitted calls (about `calls / 2`).
fn at_limit(name: &str, calls: u64) -> Option<u64> {
    let clock = ManualClock::starting_at(1_000_000_000);
    if name == "clock" {
        return Some(measured_loop_clock_paced(&clock, calls));
    }
    if let Some(cells) = name.strip_prefix("sliding-window-") {
        let cells: u32 = cells.parse().ok()?;
        let window = AT_LIMIT_PERIOD.div_ceil(u64::from(cells)) * u64::from(cells);
        let limit = u32::try_from(window / AT_LIMIT_STEP / 2).ok()?;
        let ring = SlidingWindowLimiter::with_clock(
            limit,
            Duration::from_nanos(window),
            cells,
            clock.clone(),
        )
        .ok()?;
        warm_up_paced(
            &ring,
            &clock,
            AT_LIMIT_WARM_QUARTERS * window / 4 / AT_LIMIT_STEP,
        );
        return Some(measured_loop_paced(&ring, &clock, calls));
    }
    if let Some(cells) = name.strip_prefix("per-core/sliding-window-") {
        let cells: u32 = cells.parse().ok()?;
        let window = AT_LIMIT_PERIOD.div_ceil(u64::from(cells)) * u64::from(cells);
        let limit = u32::try_from(window / AT_LIMIT_STEP / 2).ok()?;
        let ring = SlidingWindowLimiter::with_clock(
            limit,
            Duration::from_nanos(window),
            cells,
            clock.clone(),
        )
        .ok()?;
        let ring = per_core(ring)?;
        warm_up_paced(
            &ring,
            &clock,
            AT_LIMIT_WARM_QUARTERS * window / 4 / AT_LIMIT_STEP,
        );
        return Some(measured_loop_paced(&ring, &clock, calls));
    }
    let limit = u32::try_from(AT_LIMIT_PERIOD / AT_LIMIT_STEP / 2).ok()?;
    let period = Duration::from_nanos(AT_LIMIT_PERIOD);
    let rate = Rate::new(limit, period);
    let warm = AT_LIMIT_WARM_QUARTERS * AT_LIMIT_PERIOD / 4 / AT_LIMIT_STEP;
    let paced = |limiter: &dyn PacedRow| limiter.run(&clock, warm, calls);
    fn source<A: floodgate::Algorithm>(
        algorithm: A,
        clock: &ManualClock,
    ) -> AtomicLimiter<A, ManualClock> {
        AtomicLimiter::with_clock(algorithm, clock.clone())
    }
    match name {
        "gcra" => Some(paced(&source(Gcra::new(rate, limit).ok()?, &clock))),
        "token-bucket" => Some(paced(&source(TokenBucket::new(rate, limit).ok()?, &clock))),
        "fixed-window-aligned" => Some(paced(&source(
            FixedWindow::aligned(limit, period).ok()?,
            &clock,
        ))),
        "per-core/gcra" => Some(paced(&per_core(source(
            Gcra::new(rate, limit).ok()?,
            &clock,
        ))?)),
        "per-core/token-bucket" => Some(paced(&per_core(source(
            TokenBucket::new(rate, limit).ok()?,
            &clock,
        ))?)),
        "per-core/fixed-window" => Some(paced(&per_core(source(
            FixedWindow::aligned(limit, period).ok()?,
            &clock,
        ))?)),
        _ => None,
    }
}

/// An at-limit row: its warm-up and its measured loop, each monomorphized for the limiter (a
/// trait object only to pick the row, outside both loops).
trait PacedRow {
    fn run(&self, clock: &ManualClock, warm: u64, calls: u64) -> u64;
}

impl<L: Limiter> PacedRow for L {
    #[inline(never)]
    fn run(&self, clock: &ManualClock, warm: u64, calls: u64) -> u64 {
        warm_up_paced(self, clock, warm);
        measured_loop_paced(self, clock, calls)
    }
}

/// The at-limit pace alone: the advance and one read of the clock a call makes.
#[inline(never)]
fn measured_loop_clock_paced(clock: &ManualClock, calls: u64) -> u64 {
    (0..calls).fold(0, |acc, _| {
        clock.advance_nanos(AT_LIMIT_STEP);
        acc ^ black_box(clock.now_nanos())
    })
}

/// A sliding window of `cells` cells: allow, 10^7 per minute (never reached; the whole-nanosecond
/// cells the ring needs rule out the others' 10 ms); deny and spent, 1 per `cells` minutes
/// (one-minute cells, so a run under callgrind stays in one cell: in a later one, `deny` would be
/// `spent`). For `spent`, the permit is taken one nanosecond before the current cell starts.
fn sliding<C: Clock>(workload: Workload, cells: u32, clock: C) -> Option<SlidingWindowLimiter<C>> {
    let (limit, window) = match workload {
        Workload::Allow => (10_000_000, Duration::from_secs(60)),
        Workload::Deny | Workload::Spent | Workload::AtLimit => {
            (1, Duration::from_secs(60 * u64::from(cells)))
        }
    };
    let ring = SlidingWindowLimiter::with_clock(limit, window, cells, clock).ok()?;
    if workload == Workload::Spent {
        let cell = 60_000_000_000;
        let start = ring.clock().now_nanos() / cell * cell;
        ring.try_acquire_at(limit, start.checked_sub(1)?).ok()?;
    }
    Some(ring)
}

fn run_with<C: Clock + Clone>(
    name: &str,
    workload: Workload,
    clock: C,
    tick: Tick,
    calls: u64,
) -> Option<u64> {
    let (name, call) = match name.strip_suffix("/admit") {
        Some(name) => (name, Call::Admit),
        None => (name, Call::Decision),
    };
    if let Some(cells) = name.strip_prefix("per-core/sliding-window-") {
        let ring = per_core(sliding(workload, cells.parse().ok()?, clock)?)?;
        let how = How {
            call,
            tick,
            period: Duration::MAX,
        };
        return Some(measured(how, &ring, calls));
    }
    if let Some(cells) = name.strip_prefix("sliding-window-") {
        let ring = sliding(workload, cells.parse().ok()?, clock)?;
        // No round-up to wait out: `Duration::MAX` leaves `settle` its one tick.
        let how = How {
            call,
            tick,
            period: Duration::MAX,
        };
        return Some(measured(how, &ring, calls));
    }
    // allow: 10^7 per 10 ms (never reached); deny: 1 per hour (exhausted by the first call).
    let (limit, period) = match workload {
        Workload::Allow => (10_000_000, Duration::from_millis(10)),
        Workload::Deny => (1, Duration::from_secs(3600)),
        Workload::Spent | Workload::AtLimit => return None,
    };
    let rate = Rate::new(limit, period);
    let how = How { call, tick, period };
    Some(match name {
        "clock" => measured_loop_clock(&clock, calls),
        "fixed-window" => measured(
            how,
            &AtomicLimiter::with_clock(FixedWindow::new(limit, period).ok()?, clock),
            calls,
        ),
        "fixed-window-aligned" => measured(
            how,
            &AtomicLimiter::with_clock(FixedWindow::aligned(limit, period).ok()?, clock),
            calls,
        ),
        "token-bucket" => measured(
            how,
            &AtomicLimiter::with_clock(TokenBucket::new(rate, limit).ok()?, clock),
            calls,
        ),
        "gcra" => measured(
            how,
            &AtomicLimiter::with_clock(Gcra::new(rate, limit).ok()?, clock),
            calls,
        ),
        // Reconfigured once: made with a capacity one larger, then set to `gcra`'s (generation
        // 1, the same interval and capacity as `gcra`), so calls run generation 1's short path
        // on `gcra`'s terms. (A respelled rate, `2 × limit` per `2 × period`, was used until it
        // stopped making a generation.)
        "gcra-reconf" => {
            let gcra =
                AtomicLimiter::with_clock(Gcra::new(rate, limit.checked_add(1)?).ok()?, clock);
            let now = gcra.clock().now_nanos();
            gcra.algorithm().set_capacity(limit, now).ok()?;
            measured(how, &gcra, calls)
        }
        "sharded" => measured(
            how,
            &Sharded::with_clock(limit, period, 2, clock).ok()?,
            calls,
        ),
        "per-core/gcra" => measured(
            how,
            &per_core(AtomicLimiter::with_clock(
                Gcra::new(rate, limit).ok()?,
                clock,
            ))?,
            calls,
        ),
        "per-core/token-bucket" => measured(
            how,
            &per_core(AtomicLimiter::with_clock(
                TokenBucket::new(rate, limit).ok()?,
                clock,
            ))?,
            calls,
        ),
        "per-core/fixed-window" => measured(
            how,
            &per_core(AtomicLimiter::with_clock(
                FixedWindow::aligned(limit, period).ok()?,
                clock,
            ))?,
            calls,
        ),
        _ => return None,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, workload, clock, calls] = args.as_slice() else {
        eprintln!(
            "usage: instructions LIMITER allow|deny|spent quanta|coarse CALLS, \
             or instructions LIMITER at-limit manual CALLS"
        );
        return ExitCode::from(2);
    };
    let (Ok(calls), Some(load)) = (
        calls.parse::<u64>(),
        match workload.as_str() {
            "allow" => Some(Workload::Allow),
            "deny" => Some(Workload::Deny),
            "spent" => Some(Workload::Spent),
            "at-limit" => Some(Workload::AtLimit),
            _ => None,
        },
    ) else {
        eprintln!("bad workload or call count");
        return ExitCode::from(2);
    };
    let admitted = match clock.as_str() {
        "manual" if load == Workload::AtLimit => at_limit(name, calls),
        _ if load == Workload::AtLimit => None,
        "quanta" => run_with(name, load, QuantaClock::new(), Tick::Free, calls),
        "coarse" => match CoarseClock::new() {
            Ok(c) => run_with(name, load, c, Tick::Coarse, calls),
            Err(e) => {
                eprintln!("coarse clock: {e}");
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    match admitted {
        Some(admitted) => {
            println!("{name} {workload} {clock}: {calls} calls, result {admitted}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "unknown limiter `{name}` or clock `{clock}` (`spent`: sliding windows only; \
                 `at-limit`: on `manual` only)"
            );
            ExitCode::from(2)
        }
    }
}
