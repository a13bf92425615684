//! What Redis has taken from a test's hourly GCRA bucket of 100 (the lease tests' key "k").

use floodgate::redis::RedisLimiter;
use floodgate::{Clock, Gcra};

/// What Redis has taken from the hourly bucket of `limiter`'s key "k" (nothing refills during a
/// test): a per-call request for the whole capacity, whose denial reports exactly what is left.
///
/// The denial is Redis's own: a probe denied by `limiter`'s deny cache (which keeps this
/// probe's own denial, so a second `taken` on one limiter would read the first one's figure)
/// fails the test instead of returning a stale count.
pub async fn taken<C: Clock + Clone + Send + Sync + 'static>(
    limiter: &RedisLimiter<Gcra, C>,
) -> u64 {
    let local = || {
        limiter
            .deny_cache()
            .map_or(0, |cache| cache.denied_locally())
    };
    let before = local();
    let probe = limiter.try_acquire_outcome("k", 100).await.unwrap();
    assert_eq!(
        local(),
        before,
        "the probe was denied by the deny cache, not by Redis: probe with a limiter built \
         `with_deny_cache(None)`, or once per limiter"
    );
    assert!(
        probe.failure().is_none() && !probe.decision().is_allowed(),
        "{probe:?}"
    );
    100 - probe.decision().remaining()
}
