//! Instructions per `admit(1)` admission of floodgate's `SmoothWarmingUp` in the states a
//! limiter is in, on a `ManualClock` (every call is decided in the state named; the loop also
//! moves the clock, one `fetch_add`). `examples/instructions_smooth` measures the cold state on
//! the real clock only.
//!
//! ```text
//! cargo build --release --example instructions_warming_states
//! valgrind --tool=callgrind --toggle-collect='*measured_loop*' --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/instructions_warming_states busy 100000
//! ```
//! The limiter: 100 permits per second (10 ms a permit, above Guava's precision floor, so costs
//! are truncated as Guava's), warm-up 1 s (threshold 50 permits, at most 100). States:
//! * `busy`: at its rate: each call comes 3 µs after the last booking fell due, so it holds
//!   0.0003 stored permits (below the threshold), spends them and books the rest fresh;
//! * `booked`: each call comes exactly when the last booking falls due: nothing stored;
//! * `cold`: an hour between calls: the store is full, each call takes one permit above the
//!   threshold.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Duration;

use floodgate::{Limiter, ManualClock, SmoothWarmingUp};

/// `calls` admissions of one permit, each `step_nanos` after the last; returns how many were
/// admitted.
#[inline(never)]
fn measured_loop(
    limiter: &SmoothWarmingUp<ManualClock>,
    clock: &ManualClock,
    step_nanos: u64,
    calls: u64,
) -> u64 {
    (0..calls)
        .map(|_| {
            clock.advance_nanos(step_nanos);
            u64::from(limiter.admit(black_box(1)).is_ok_and(|allowed| allowed))
        })
        .sum()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [state, calls] = args.as_slice() else {
        eprintln!("usage: instructions_warming_states busy|booked|cold CALLS");
        return ExitCode::from(2);
    };
    let Ok(calls) = calls.parse::<u64>() else {
        eprintln!("bad call count `{calls}`");
        return ExitCode::from(2);
    };
    let clock = ManualClock::new();
    let limiter =
        match SmoothWarmingUp::create_with_clock(100.0, Duration::from_secs(1), clock.clone()) {
            Ok(limiter) => limiter,
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::FAILURE;
            }
        };
    const INTERVAL_NANOS: u64 = 10_000_000;
    // Spends the cold store and books 200 permits; the clock stops one interval before the
    // booking falls due, so that the first step lands on it.
    let drain = || -> Result<(), String> {
        limiter.reserve(200).map_err(|error| error.to_string())?;
        let due_nanos = limiter.snapshot().next_free_micros as u64 * 1000;
        clock.advance_nanos(due_nanos - INTERVAL_NANOS);
        Ok(())
    };
    let step = match state.as_str() {
        "busy" => drain().map(|()| INTERVAL_NANOS + 3_000),
        "booked" => drain().map(|()| INTERVAL_NANOS),
        "cold" => Ok(3_600 * 1_000_000_000),
        _ => Err(format!("bad state `{state}` (busy, booked or cold)")),
    };
    let step = match step {
        Ok(step) => step,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    let admitted = measured_loop(&limiter, &clock, step, calls);
    println!("{state}: {calls} calls, {admitted} admitted");
    if admitted == calls {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
