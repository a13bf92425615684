//! Instruction count of a `LeasedKey` admission served from its lease (no round trip): warms a
//! key until its lease holds more permits than the loop takes, then calls
//! `blocking_try_acquire(1)` N times inside `measured_loop` (never inlined), so callgrind counts
//! exactly the lease-served path:
//!
//! ```text
//! redis-server --port 6379 &            # or REDIS_URL=redis://host:port
//! cargo build --release --example leased_instructions --features redis
//! valgrind --tool=callgrind --toggle-collect='*measured_loop*' --callgrind-out-file=/dev/null \
//!     target/release/examples/leased_instructions 500      # Ir / 500 = instructions per call
//! ```
//! The limiter runs on a `ManualClock` that never moves (no lease expires, whatever valgrind's
//! slowness), with a 30 s backend timeout (valgrind's round trips must not turn into policy
//! decisions during the warm-up).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use floodgate::backend::FailurePolicy;
use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{Gcra, ManualClock, Rate};

/// `calls` admissions of one permit, each one served from the lease.
#[inline(never)]
fn measured_loop(leased: &LeasedKey<Gcra, ManualClock>, calls: u64) -> u64 {
    let mut remaining = 0;
    for _ in 0..calls {
        let decision = leased.blocking_try_acquire(1).expect("valid");
        remaining += black_box(decision).remaining();
    }
    remaining
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let calls: u64 = std::env::args()
        .nth(1)
        .map_or(Ok(500), |arg| arg.parse())
        .map_err(|_| "the argument is the number of calls")?;
    if calls > 1_000 {
        return Err("at most 1,000 calls (a lease holds at most 1,024 permits)".into());
    }
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let config = RedisConfig::single(url).timeout(Duration::from_secs(30));
    let backend = RedisBackend::blocking_connect(config)?;
    let gcra = Gcra::new(Rate::per_second(1), 1_000_000)?;
    let key = format!("instructions-{}", std::process::id());
    let policy = FailurePolicy::FailClosed;
    let limiter = RedisLimiter::with_clock(&backend, "leased", gcra, policy, ManualClock::new())?;
    let leased = LeasedKey::new(Arc::new(limiter), &key);
    // Leases double while they run out before they expire: warm up to one that holds `calls`.
    while leased.counts().held < calls {
        assert!(leased.blocking_try_acquire(1)?.is_allowed());
    }
    let leases = leased.counts().leases;
    let remaining = measured_loop(&leased, calls);
    let counts = leased.counts();
    assert_eq!(
        counts.leases, leases,
        "every measured call served from the lease"
    );
    println!("{calls} calls served from the lease (remaining summed: {remaining}), {counts:?}");
    Ok(())
}
