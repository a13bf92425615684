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

use std::process::ExitCode;
use std::time::Duration;

#[path = "common/measured_loops.rs"]
mod measured_loops;

use floodgate::{Limiter, QuantaClock, SmoothBursty, SmoothWarmingUp};
use measured_loops::{measured_loop, measured_loop_admit};

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
