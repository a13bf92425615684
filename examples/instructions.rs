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
//! read alone). governor is counted in `examples/instructions_peers`, a binary of its own: here,
//! the growing number of floodgate loops moved its calls across codegen units and out of line
//! (55 -> 94 instructions per call with no change to governor's code). Workloads: allow (limit
//! never reached), deny (exhausted after one permit), spent (sliding windows only: the whole
//! limit was taken at the very end of the cell before the current one, so every call is a denial
//! whose window holds a used closed cell: the denial an attacker makes every caller pay).
//! Clocks: quanta, coarse.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Duration;

#[path = "common/measured_loops.rs"]
mod measured_loops;

use floodgate::{
    AtomicLimiter, Clock, CoarseClock, FixedWindow, Gcra, Limiter, QuantaClock, Rate, Sharded,
    SlidingWindowLimiter, TokenBucket,
};
use measured_loops::{measured_loop, measured_loop_admit};

/// The call the loop makes: `try_acquire` (a whole `Decision`) or `admit` (a bool).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    Decision,
    Admit,
}

fn measured<L: Limiter>(call: Call, limiter: &L, calls: u64) -> u64 {
    match call {
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
}

/// A sliding window of `cells` cells: allow, 10^7 per minute (never reached; the whole-nanosecond
/// cells the ring needs rule out the others' 10 ms); deny and spent, 1 per `cells` minutes
/// (one-minute cells, so a run under callgrind stays in one cell: in a later one, `deny` would be
/// `spent`). For `spent`, the permit is taken one nanosecond before the current cell starts.
fn sliding<C: Clock>(workload: Workload, cells: u32, clock: C) -> Option<SlidingWindowLimiter<C>> {
    let (limit, window) = match workload {
        Workload::Allow => (10_000_000, Duration::from_secs(60)),
        Workload::Deny | Workload::Spent => (1, Duration::from_secs(60 * u64::from(cells))),
    };
    let ring = SlidingWindowLimiter::with_clock(limit, window, cells, clock).ok()?;
    if workload == Workload::Spent {
        let cell = 60_000_000_000;
        let start = ring.clock().now_nanos() / cell * cell;
        ring.try_acquire_at(limit, start.checked_sub(1)?).ok()?;
    }
    Some(ring)
}

fn run_with<C: Clock + Clone>(name: &str, workload: Workload, clock: C, calls: u64) -> Option<u64> {
    let (name, call) = match name.strip_suffix("/admit") {
        Some(name) => (name, Call::Admit),
        None => (name, Call::Decision),
    };
    if let Some(cells) = name.strip_prefix("sliding-window-") {
        let ring = sliding(workload, cells.parse().ok()?, clock)?;
        return Some(measured(call, &ring, calls));
    }
    // allow: 10^7 per 10 ms (never reached); deny: 1 per hour (exhausted by the first call).
    let (limit, period) = match workload {
        Workload::Allow => (10_000_000, Duration::from_millis(10)),
        Workload::Deny => (1, Duration::from_secs(3600)),
        Workload::Spent => return None,
    };
    let rate = Rate::new(limit, period);
    Some(match name {
        "clock" => measured_loop_clock(&clock, calls),
        "fixed-window" => measured(
            call,
            &AtomicLimiter::with_clock(FixedWindow::new(limit, period).ok()?, clock),
            calls,
        ),
        "fixed-window-aligned" => measured(
            call,
            &AtomicLimiter::with_clock(FixedWindow::aligned(limit, period).ok()?, clock),
            calls,
        ),
        "token-bucket" => measured(
            call,
            &AtomicLimiter::with_clock(TokenBucket::new(rate, limit).ok()?, clock),
            calls,
        ),
        "gcra" => measured(
            call,
            &AtomicLimiter::with_clock(Gcra::new(rate, limit).ok()?, clock),
            calls,
        ),
        // Reconfigured once (the same rate spelled `2 × limit` per `2 × period`: generation 1,
        // the same interval and capacity), so calls run generation 1's short path.
        "gcra-reconf" => {
            let gcra = AtomicLimiter::with_clock(Gcra::new(rate, limit).ok()?, clock);
            let now = gcra.clock().now_nanos();
            gcra.algorithm()
                .set_rate(Rate::new(limit * 2, period * 2), now)
                .ok()?;
            measured(call, &gcra, calls)
        }
        "sharded" => measured(
            call,
            &Sharded::with_clock(limit, period, 2, clock).ok()?,
            calls,
        ),
        _ => return None,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, workload, clock, calls] = args.as_slice() else {
        eprintln!("usage: instructions LIMITER allow|deny|spent quanta|coarse CALLS");
        return ExitCode::from(2);
    };
    let (Ok(calls), Some(load)) = (
        calls.parse::<u64>(),
        match workload.as_str() {
            "allow" => Some(Workload::Allow),
            "deny" => Some(Workload::Deny),
            "spent" => Some(Workload::Spent),
            _ => None,
        },
    ) else {
        eprintln!("bad workload or call count");
        return ExitCode::from(2);
    };
    let admitted = match clock.as_str() {
        "quanta" => run_with(name, load, QuantaClock::new(), calls),
        "coarse" => match CoarseClock::new() {
            Ok(c) => run_with(name, load, c, calls),
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
                "unknown limiter `{name}` or clock `{clock}` (`spent`: sliding windows only)"
            );
            ExitCode::from(2)
        }
    }
}
