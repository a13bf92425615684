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
//! exhausted by the first call); the limiter stores one period of permits.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Duration;

use floodgate::{Limiter, QuantaClock, SmoothBursty};

#[inline(never)]
fn measured_loop<L: Limiter>(limiter: &L, calls: u64) -> u64 {
    let mut admitted = 0;
    for _ in 0..calls {
        admitted += u64::from(
            limiter
                .try_acquire(black_box(1))
                .is_ok_and(|d| d.is_allowed()),
        );
    }
    admitted
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [workload, calls] = args.as_slice() else {
        eprintln!("usage: instructions_smooth allow|deny CALLS");
        return ExitCode::from(2);
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
    let limiter = match SmoothBursty::with_max_burst(
        limit / period.as_secs_f64(),
        period.as_secs_f64(),
        QuantaClock::new(),
    ) {
        Ok(limiter) => limiter,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    let admitted = measured_loop(&limiter, calls);
    println!("smooth-bursty {workload}: {calls} calls, result {admitted}");
    ExitCode::SUCCESS
}
