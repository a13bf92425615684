//! A tiny driver for instruction counts: calls `try_acquire(1)` N times on one limiter, on one
//! thread, inside `measured_loop` (never inlined), so callgrind can count exactly that loop:
//!
//! ```text
//! cargo build --release --example instructions
//! valgrind --tool=callgrind --toggle-collect='*measured_loop*' --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/instructions token-bucket allow quanta 1000000
//! callgrind_annotate /tmp/cg.out | head -30      # Ir / 1,000,000 = instructions per call
//! ```
//! Limiters: fixed-window (anchored), fixed-window-aligned, token-bucket, gcra, sharded, governor,
//! clock (the clock read alone). Workloads: allow (limit never reached), deny (exhausted after
//! one permit). Clocks: quanta, coarse (floodgate's limiters only; governor reads its own).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::ExitCode;
use std::time::Duration;

use floodgate::{
    AtomicLimiter, Clock, CoarseClock, FixedWindow, Gcra, Limiter, QuantaClock, Rate, Sharded,
    TokenBucket,
};

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

#[inline(never)]
fn measured_loop_clock<C: Clock>(clock: &C, calls: u64) -> u64 {
    (0..calls).fold(0, |acc, _| acc ^ black_box(clock.now_nanos()))
}

#[inline(never)]
fn measured_loop_governor(limiter: &governor::DefaultDirectRateLimiter, calls: u64) -> u64 {
    (0..calls).map(|_| u64::from(limiter.check().is_ok())).sum()
}

fn run_with<C: Clock + Clone>(name: &str, allow: bool, clock: C, calls: u64) -> Option<u64> {
    // allow: 10^7 per 10 ms (never reached); deny: 1 per hour (exhausted by the first call).
    let (limit, period) = if allow {
        (10_000_000, Duration::from_millis(10))
    } else {
        (1, Duration::from_secs(3600))
    };
    let rate = Rate::new(limit, period);
    Some(match name {
        "clock" => measured_loop_clock(&clock, calls),
        "fixed-window" => measured_loop(
            &AtomicLimiter::with_clock(FixedWindow::new(limit, period).ok()?, clock),
            calls,
        ),
        "fixed-window-aligned" => measured_loop(
            &AtomicLimiter::with_clock(FixedWindow::aligned(limit, period).ok()?, clock),
            calls,
        ),
        "token-bucket" => measured_loop(
            &AtomicLimiter::with_clock(TokenBucket::new(rate, limit).ok()?, clock),
            calls,
        ),
        "gcra" => measured_loop(
            &AtomicLimiter::with_clock(Gcra::new(rate, limit).ok()?, clock),
            calls,
        ),
        "sharded" => measured_loop(&Sharded::with_clock(limit, period, 2, clock).ok()?, calls),
        "governor" => {
            let quota =
                governor::Quota::with_period(period / limit)?.allow_burst(NonZeroU32::new(limit)?);
            measured_loop_governor(&governor::RateLimiter::direct(quota), calls)
        }
        _ => return None,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, workload, clock, calls] = args.as_slice() else {
        eprintln!("usage: instructions LIMITER allow|deny quanta|coarse CALLS");
        return ExitCode::from(2);
    };
    let (Ok(calls), Some(allow)) = (
        calls.parse::<u64>(),
        match workload.as_str() {
            "allow" => Some(true),
            "deny" => Some(false),
            _ => None,
        },
    ) else {
        eprintln!("bad workload or call count");
        return ExitCode::from(2);
    };
    let admitted = match clock.as_str() {
        "quanta" => run_with(name, allow, QuantaClock::new(), calls),
        "coarse" => match CoarseClock::new() {
            Ok(c) => run_with(name, allow, c, calls),
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
            eprintln!("unknown limiter `{name}` or clock `{clock}`");
            ExitCode::from(2)
        }
    }
}
