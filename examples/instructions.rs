//! A fixed number of `try_acquire(1)` calls for one limiter, for counting instructions per call
//! with callgrind (repeatable on a noisy machine, unlike wall time):
//!
//! ```text
//! cargo build --release --example instructions
//! valgrind --tool=callgrind --callgrind-out-file=cg.out target/release/examples/instructions gcra 100000
//! callgrind_annotate --inclusive=yes cg.out | grep -E 'instructions.rs:instructions::main \[|calibrate \['
//! ```
//! (main's inclusive count minus quanta's one-off calibration, divided by the call count.)
//! Limiters: fixed, aligned, token, gcra, gcra-deny, governor, governor-deny.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use floodgate::{AtomicLimiter, FixedWindow, Gcra, Limiter, Rate, TokenBucket};

fn run(limiter: &dyn Limiter, calls: u64) {
    for _ in 0..calls {
        black_box(limiter.try_acquire(black_box(1)).ok());
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "gcra".into());
    let calls: u64 = args.next().and_then(|n| n.parse().ok()).unwrap_or(100_000);
    let fast = Rate::new(1, Duration::from_nanos(1));
    let window = Duration::from_millis(1);
    match which.as_str() {
        "fixed" => run(
            &AtomicLimiter::new(FixedWindow::new((1 << 24) - 1, window).unwrap()),
            calls,
        ),
        "aligned" => run(
            &AtomicLimiter::new(FixedWindow::aligned((1 << 24) - 1, window).unwrap()),
            calls,
        ),
        "token" => run(
            &AtomicLimiter::new(TokenBucket::new(1 << 30, fast).unwrap()),
            calls,
        ),
        "gcra" => run(
            &AtomicLimiter::new(Gcra::new(fast, 1 << 30).unwrap()),
            calls,
        ),
        "gcra-deny" => run(
            &AtomicLimiter::new(Gcra::new(Rate::per_hour(1), 1).unwrap()),
            calls,
        ),
        "governor" | "governor-deny" => {
            let quota = if which == "governor" {
                governor::Quota::with_period(Duration::from_nanos(1))
                    .unwrap()
                    .allow_burst(NonZeroU32::new(1 << 30).unwrap())
            } else {
                governor::Quota::per_hour(NonZeroU32::new(1).unwrap())
            };
            let limiter = governor::RateLimiter::direct(quota);
            for _ in 0..calls {
                black_box(limiter.check().ok());
            }
        }
        other => {
            eprintln!("unknown limiter {other:?}");
            std::process::exit(2);
        }
    }
}
