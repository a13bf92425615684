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
//! (1 per hour, exhausted by the first call), at-limit (governor-state only, as `instructions`'
//! at-limit rows: on governor's `FakeRelativeClock`, advanced 25 ns before every call, 200,000
//! per 10 ms, so about half the calls pass; 4¼ periods called through first, not counted).

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

/// governor-state on a fake clock the at-limit loop advances.
type GovernorPaced = governor::RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    governor::clock::FakeRelativeClock,
    governor::middleware::StateInformationMiddleware,
>;

/// The at-limit pace: the fake clock advances this much before every call (as `instructions`).
const AT_LIMIT_STEP: Duration = Duration::from_nanos(25);

/// `measured_loop_governor_state`'s calls, the clock advanced by [`AT_LIMIT_STEP`] before each
/// (governor's `FakeRelativeClock::advance`: a load and a compare-exchange, as floodgate's
/// `ManualClock::advance_nanos` in `instructions`).
#[inline(always)]
fn paced_governor_state(
    limiter: &GovernorPaced,
    clock: &governor::clock::FakeRelativeClock,
    calls: u64,
) -> u64 {
    use governor::clock::Clock as _;
    (0..calls)
        .map(|_| {
            clock.advance(AT_LIMIT_STEP);
            match limiter.check() {
                // Counted whatever the remaining burst is (at the limit it is 0).
                Ok(snapshot) => {
                    black_box(snapshot.remaining_burst_capacity());
                    1
                }
                Err(not_until) => {
                    black_box(not_until.wait_time_from(limiter.clock().now()));
                    0
                }
            }
        })
        .sum()
}

#[inline(never)]
fn measured_loop_governor_paced(
    limiter: &GovernorPaced,
    clock: &governor::clock::FakeRelativeClock,
    calls: u64,
) -> u64 {
    paced_governor_state(limiter, clock, calls)
}

#[inline(never)]
fn warm_up_governor_paced(
    limiter: &GovernorPaced,
    clock: &governor::clock::FakeRelativeClock,
    calls: u64,
) -> u64 {
    paced_governor_state(limiter, clock, calls)
}

/// governor-state at the limit (see the module docs).
fn at_limit(name: &str, calls: u64) -> Option<u64> {
    if name != "governor-state" {
        return None;
    }
    let (limit, period) = (200_000u32, Duration::from_millis(10));
    let quota = governor::Quota::with_period(period / limit)?.allow_burst(NonZeroU32::new(limit)?);
    let clock = governor::clock::FakeRelativeClock::default();
    clock.advance(Duration::from_secs(1));
    let limiter = governor::RateLimiter::direct_with_clock(quota, clock.clone())
        .with_middleware::<governor::middleware::StateInformationMiddleware>();
    let warm = 17 * period.as_nanos() / 4 / AT_LIMIT_STEP.as_nanos();
    warm_up_governor_paced(&limiter, &clock, u64::try_from(warm).ok()?);
    Some(measured_loop_governor_paced(&limiter, &clock, calls))
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
            "usage: instructions_peers governor|governor-n|governor-state|ratelimit allow|deny CALLS, \
             or instructions_peers governor-state at-limit CALLS"
        );
        return ExitCode::from(2);
    };
    let allow = match workload.as_str() {
        "allow" => Some(true),
        "deny" => Some(false),
        "at-limit" => None,
        _ => {
            eprintln!("bad workload `{workload}` (allow, deny or at-limit)");
            return ExitCode::from(2);
        }
    };
    let Ok(calls) = calls.parse::<u64>() else {
        eprintln!("bad call count `{calls}`");
        return ExitCode::from(2);
    };
    let answer = match allow {
        Some(allow) => run(name, allow, calls),
        None => at_limit(name, calls),
    };
    match answer {
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
