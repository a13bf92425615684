//! `floodgate::memcached` against real servers: each test starts its own `memcached` on a free
//! loopback port and kills it when done. Run with `cargo test --features memcached --test
//! memcached` (memcached must be installed; `scripts/test` installs it).
//!
//! Cells are keyed by a `ManualClock` that the tests move by hand, so the decisions are
//! deterministic; only the expiry test waits (memcached expires keys on its own real clock), and
//! the async `acquire` / `try_acquire_for` tests in `waits`, which sleep on tokio's timer on the
//! real clock (at most a 1 s window's wait; their assertions are causal, never durations).

#[path = "memcached/async_path.rs"]
mod async_path;
#[path = "memcached/cancel.rs"]
mod cancel;
#[path = "memcached/concurrency.rs"]
mod concurrency;
#[path = "memcached/decisions.rs"]
mod decisions;
#[path = "memcached/expiry.rs"]
mod expiry;
#[path = "memcached/failure.rs"]
mod failure;
#[path = "memcached/naive.rs"]
mod naive;
#[path = "memcached/retry.rs"]
mod retry;
#[path = "memcached/server.rs"]
mod server;
#[path = "memcached/shortcuts.rs"]
mod shortcuts;
#[path = "memcached/skew.rs"]
mod skew;
#[path = "memcached/waits.rs"]
mod waits;

use std::time::Duration;

use floodgate::ManualClock;
use floodgate::SlidingWindow;
use floodgate::backend::FailurePolicy;
use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};

/// Generous: a loaded CI machine must not turn into policy decisions in the exactness tests.
const TIMEOUT: Duration = Duration::from_secs(30);

const SEC: u64 = 1_000_000_000;

/// A realistic Unix time (November 2023), in the middle of a cell: cell 1_700_000_000 of 1 s.
const T0: u64 = 1_700_000_000 * SEC + SEC / 2;

fn backend(server: &server::MemcachedServer) -> MemcachedBackend {
    MemcachedBackend::connect(MemcachedConfig::new(server.addr()).timeout(TIMEOUT))
        .expect("a valid address")
}

/// `limit` per `window_secs` seconds in 1 s cells, failing closed, on `clock`.
fn limiter(
    backend: &MemcachedBackend,
    name: &str,
    limit: u32,
    window_secs: u64,
    clock: &ManualClock,
) -> MemcachedLimiter<ManualClock> {
    let window = SlidingWindow::new(
        limit,
        Duration::from_secs(window_secs),
        u32::try_from(window_secs).unwrap(),
    )
    .expect("a valid window");
    MemcachedLimiter::with_clock(
        backend,
        name,
        window,
        FailurePolicy::FailClosed,
        clock.clone(),
    )
    .expect("a valid limiter")
}

/// One decision that memcached itself made (a policy decision fails the test).
fn decide(limiter: &MemcachedLimiter<ManualClock>, key: &str, n: u32) -> floodgate::Decision {
    let outcome = limiter
        .blocking_try_acquire_outcome(key, n)
        .expect("a valid request");
    assert!(outcome.failure().is_none(), "{:?}", outcome.failure());
    outcome.decision()
}

/// Serial single permits until the first denial: how many were admitted.
fn top_up(limiter: &MemcachedLimiter<ManualClock>, key: &str) -> u64 {
    let mut admitted = 0;
    while decide(limiter, key, 1).is_allowed() {
        admitted += 1;
        assert!(
            admitted <= u64::from(limiter.window().limit()),
            "over the limit"
        );
    }
    admitted
}

/// The sum of `key`'s cells `first..=last` as memcached holds them.
fn stored_sum(
    server: &server::MemcachedServer,
    limiter: &MemcachedLimiter<ManualClock>,
    key: &str,
    cells: std::ops::RangeInclusive<u64>,
) -> u64 {
    cells
        .map(|i| server.count(&limiter.cell_key(key, i).unwrap()))
        .sum()
}
