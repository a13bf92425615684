//! Instructions per call of floodgate's `SmoothBursty`, in a binary of its own: beside governor in
//! `examples/instructions` it changed how the compiler inlined governor (55 -> 94 per call), and
//! beside the peers of `examples/instructions_peers` it changed theirs.
//!
//! ```text
//! cargo build --release --example instructions_smooth
//! valgrind --tool=callgrind --toggle-collect='*measured_loop*' --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/instructions_smooth allow 1000000
//! ```
//! Workloads as in `instructions`: allow (10^7 per 10 ms, never reached), deny (1 per hour,
//! exhausted by the first call); the limiter stores one period of permits. Limiters:
//! `smooth-bursty` (the default), `smooth-warming-up` (warming up over one period). Calls as in
//! `instructions`: `try_acquire` using what a 429 needs (the shape of `governor-state` in
//! `instructions_peers`), or, with a name ending in `/admit`, `admit` (a bool, the shape of
//! `governor`).

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Duration;

use floodgate::{Limiter, QuantaClock, SmoothBursty, SmoothWarmingUp};

/// `try_acquire`, using what a 429 needs: `remaining` of an admission, `retry_after` of a
/// denial (as `instructions` and `governor-state` in `instructions_peers`).
#[inline(never)]
fn measured_loop<L: Limiter>(limiter: &L, calls: u64) -> u64 {
    (0..calls)
        .map(|_| match limiter.try_acquire(black_box(1)) {
            Ok(d) if d.is_allowed() => u64::from(black_box(d.remaining()) > 0),
            Ok(d) => {
                black_box(d.retry_after());
                0
            }
            Err(_) => 0,
        })
        .sum()
}

/// The count the `admit` loop passes: a literal `1`, as a caller writes `admit(1)` and as
/// governor's `check()` (no count) is one permit by construction; built with
/// `INSTRUCTIONS_OPAQUE_N` set in the environment, `black_box(1)`, a count the compiler cannot
/// see (the `admit-n` rows of `scripts/instructions`). A build-time switch, not a second loop: a
/// second call site of `admit` changes what the compiler inlines into both.
#[inline(always)]
fn count() -> u32 {
    if option_env!("INSTRUCTIONS_OPAQUE_N").is_some() {
        black_box(1)
    } else {
        1
    }
}

/// `admit`: only whether the permit was taken (as `governor`'s `check().is_ok()`).
#[inline(never)]
fn measured_loop_admit<L: Limiter>(limiter: &L, calls: u64) -> u64 {
    (0..calls)
        .map(|_| u64::from(limiter.admit(count()).is_ok_and(|allowed| allowed)))
        .sum()
}

fn measured<L: Limiter>(admit: bool, limiter: &L, calls: u64) -> u64 {
    if admit {
        measured_loop_admit(limiter, calls)
    } else {
        measured_loop(limiter, calls)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (name, workload, calls) = match args.as_slice() {
        [workload, calls] => ("smooth-bursty", workload, calls),
        [name, workload, calls] => (name.as_str(), workload, calls),
        _ => {
            eprintln!("usage: instructions_smooth [LIMITER[/admit]] allow|deny CALLS");
            return ExitCode::from(2);
        }
    };
    let (limiter, admit) = match name.strip_suffix("/admit") {
        Some(limiter) => (limiter, true),
        None => (name, false),
    };
    let (limit, period) = match workload.as_str() {
        "allow" => (10_000_000.0, Duration::from_millis(10)),
        "deny" => (1.0, Duration::from_secs(3600)),
        _ => {
            eprintln!("bad workload `{workload}` (allow or deny)");
            return ExitCode::from(2);
        }
    };
    let Ok(calls) = calls.parse::<u64>() else {
        eprintln!("bad call count `{calls}`");
        return ExitCode::from(2);
    };
    let rate = limit / period.as_secs_f64();
    let admitted = match limiter {
        "smooth-bursty" => {
            SmoothBursty::with_max_burst(rate, period.as_secs_f64(), QuantaClock::new())
                .map(|l| measured(admit, &l, calls))
        }
        "smooth-warming-up" => SmoothWarmingUp::create_with_clock(rate, period, QuantaClock::new())
            .map(|l| measured(admit, &l, calls)),
        _ => {
            eprintln!("unknown limiter `{limiter}` (smooth-bursty or smooth-warming-up)");
            return ExitCode::from(2);
        }
    };
    match admitted {
        Ok(admitted) => {
            println!("{name} {workload}: {calls} calls, result {admitted}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
