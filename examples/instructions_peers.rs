//! The instruction-count driver for the other peers, in a binary of their own so that their code
//! does not change how the compiler inlines governor's in `examples/instructions.rs` (a second
//! governor middleware type in that binary raised governor's count there from 55 to 94 per call;
//! floodgate's `SmoothBursty` is counted apart for the same reason, `examples/instructions_smooth`):
//!
//! ```text
//! cargo build --release --example instructions_peers
//! valgrind --tool=callgrind --toggle-collect='*measured_loop*' --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/instructions_peers governor-state allow 1000000
//! ```
//! Peers: governor (`check().is_ok()`, a bool: the shape of floodgate's `admit` rows),
//! governor-n (`check_n(black_box(1))`, a bool for a count the compiler cannot see: the shape of
//! floodgate's `admit-n` rows),
//! governor-state (governor with `StateInformationMiddleware`, computing what a 429 needs,
//! as floodgate's `try_acquire` does: the remaining burst on an admission, the wait on a denial,
//! which costs governor a second clock read), ratelimit (the `ratelimit` crate's token bucket on
//! a quanta clock). Workloads as in `instructions`: allow (10^7 per 10 ms, never reached), deny
//! (1 per hour, exhausted by the first call).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::ExitCode;
use std::time::Duration;

use floodgate::{Clock, QuantaClock};

/// governor with the state a 429 needs.
type GovernorState = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    governor::clock::QuantaClock,
    governor::middleware::StateInformationMiddleware,
>;

/// governor's bool: the same shape as `instructions`' `admit` loop.
#[inline(never)]
fn measured_loop_governor(limiter: &governor::DefaultDirectRateLimiter, calls: u64) -> u64 {
    (0..calls).map(|_| u64::from(limiter.check().is_ok())).sum()
}

/// governor's bool for a count the compiler cannot see: `check_n(black_box(1))`, the call shape
/// of floodgate's `admit-n` rows (`admit(black_box(1))`). A zero count (never passed here) is
/// refused, as floodgate's `admit(0)` is an error.
#[inline(never)]
fn measured_loop_governor_n(limiter: &governor::DefaultDirectRateLimiter, calls: u64) -> u64 {
    (0..calls)
        .map(|_| {
            let admitted = NonZeroU32::new(black_box(1))
                .is_some_and(|n| matches!(limiter.check_n(n), Ok(Ok(()))));
            u64::from(admitted)
        })
        .sum()
}

#[inline(never)]
fn measured_loop_governor_state(limiter: &GovernorState, calls: u64) -> u64 {
    use governor::clock::Clock as _;
    (0..calls)
        .map(|_| match limiter.check() {
            Ok(snapshot) => u64::from(black_box(snapshot.remaining_burst_capacity()) > 0),
            Err(not_until) => {
                black_box(not_until.wait_time_from(limiter.clock().now()));
                0
            }
        })
        .sum()
}

/// quanta as `ratelimit`'s clock (time since creation).
struct QuantaElapsed(QuantaClock, u64);

impl ratelimit::Clock for QuantaElapsed {
    #[inline]
    fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.0.now_nanos().saturating_sub(self.1))
    }
}

#[inline(never)]
fn measured_loop_ratelimit(limiter: &ratelimit::Ratelimiter<QuantaElapsed>, calls: u64) -> u64 {
    (0..calls)
        .map(|_| u64::from(limiter.try_wait().is_ok()))
        .sum()
}

fn run(name: &str, allow: bool, calls: u64) -> Option<u64> {
    let (limit, period) = if allow {
        (10_000_000, Duration::from_millis(10))
    } else {
        (1, Duration::from_secs(3600))
    };
    Some(match name {
        "governor" => {
            let quota =
                governor::Quota::with_period(period / limit)?.allow_burst(NonZeroU32::new(limit)?);
            measured_loop_governor(&governor::RateLimiter::direct(quota), calls)
        }
        "governor-n" => {
            let quota =
                governor::Quota::with_period(period / limit)?.allow_burst(NonZeroU32::new(limit)?);
            measured_loop_governor_n(&governor::RateLimiter::direct(quota), calls)
        }
        "governor-state" => {
            let quota =
                governor::Quota::with_period(period / limit)?.allow_burst(NonZeroU32::new(limit)?);
            let limiter = governor::RateLimiter::direct(quota)
                .with_middleware::<governor::middleware::StateInformationMiddleware>();
            measured_loop_governor_state(&limiter, calls)
        }
        "ratelimit" => {
            let quanta = QuantaClock::new();
            let start = quanta.now_nanos();
            let limiter =
                ratelimit::Builder::with_clock(u64::from(limit), QuantaElapsed(quanta, start))
                    .period(period)
                    .max_tokens(u64::from(limit))
                    .initial_available(u64::from(limit))
                    .build()
                    .ok()?;
            measured_loop_ratelimit(&limiter, calls)
        }
        _ => return None,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [name, workload, calls] = args.as_slice() else {
        eprintln!(
            "usage: instructions_peers governor|governor-n|governor-state|ratelimit allow|deny CALLS"
        );
        return ExitCode::from(2);
    };
    let allow = match workload.as_str() {
        "allow" => true,
        "deny" => false,
        _ => {
            eprintln!("bad workload `{workload}` (allow or deny)");
            return ExitCode::from(2);
        }
    };
    let Ok(calls) = calls.parse::<u64>() else {
        eprintln!("bad call count `{calls}`");
        return ExitCode::from(2);
    };
    match run(name, allow, calls) {
        Some(admitted) => {
            println!("{name} {workload}: {calls} calls, result {admitted}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("unknown peer `{name}`");
            ExitCode::from(2)
        }
    }
}
