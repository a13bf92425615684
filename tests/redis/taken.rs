//! What Redis has taken from a test's hourly GCRA bucket of 100 (the lease tests' key "k").

use floodgate::redis::RedisLimiter;
use floodgate::{Clock, Gcra};

/// What Redis has taken from the hourly bucket of `limiter`'s key "k" (nothing refills during a
/// test): a per-call request for the whole capacity, whose denial reports exactly what is left.
pub async fn taken<C: Clock + Clone + Send + Sync + 'static>(
    limiter: &RedisLimiter<Gcra, C>,
) -> u64 {
    let probe = limiter.try_acquire_outcome("k", 100).await.unwrap();
    assert!(
        probe.failure().is_none() && !probe.decision().is_allowed(),
        "{probe:?}"
    );
    100 - probe.decision().remaining()
}
