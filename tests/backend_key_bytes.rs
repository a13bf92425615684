//! Heap bytes a key costs in the distributed backends' local maps (the deny cache and the local
//! fallback's limiters), with keys a client controls: an 8 KiB key must cost a bounded entry,
//! not its length (issue 18: "the deny cache and fallback maps cap keys, not bytes"). Measured by
//! a counting global allocator; one `#[test]` so nothing else allocates meanwhile.

use std::time::Duration;

use floodgate::backend::{BackendError, DenyCache, FailureHandler, FailurePolicy};
use floodgate::{Decision, FixedWindow, ManualClock};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{Counting, live_bytes};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: usize = 2_000;
const KEY_BYTES: usize = 8 * 1024;

/// The `i`th of [`KEYS`] distinct keys of [`KEY_BYTES`] bytes.
fn long_key(i: usize) -> String {
    let mut key = format!("{i:08}");
    key.extend(std::iter::repeat_n('x', KEY_BYTES - key.len()));
    key
}

#[test]
fn long_keys_cost_a_bounded_entry_in_the_deny_cache_and_the_fallback_map() {
    let clock = ManualClock::new();
    let keys: Vec<String> = (0..KEYS).map(long_key).collect();

    let cache = DenyCache::with_clock(KEYS * 4, clock.clone()).unwrap();
    let before = live_bytes();
    let denial = Decision::deny(10, 0, 5_000_000_000, 5_000_000_000);
    for key in &keys {
        cache.record(key, 1, &denial, 0);
    }
    let per_key = (live_bytes() - before) as f64 / KEYS as f64;
    assert_eq!(cache.len(), KEYS);
    assert!(cache.check(&keys[7], 1, 10).is_some(), "a recorded denial");
    assert!(cache.check(&long_key(KEYS), 1, 10).is_none(), "another key");
    println!("deny cache: {per_key:.1} bytes a key of {KEY_BYTES} bytes");
    assert!(per_key < 256.0, "{per_key:.1} bytes a key");

    let make = |limit| FixedWindow::new(limit, Duration::from_secs(60));
    let policy = FailurePolicy::local_fallback(1.0).unwrap();
    let handler =
        FailureHandler::with_clock(policy, Duration::from_millis(5), make, 1, clock).unwrap();
    let down = || BackendError::failed(std::io::Error::other("refused"));
    let before = live_bytes();
    for key in &keys {
        assert!(handler.decide(key, 1, down()).decision().is_allowed());
    }
    let per_key = (live_bytes() - before) as f64 / KEYS as f64;
    assert!(
        !handler.decide(&keys[7], 1, down()).decision().is_allowed(),
        "its own limit"
    );
    println!("fallback map: {per_key:.1} bytes a key of {KEY_BYTES} bytes");
    assert!(per_key < 256.0, "{per_key:.1} bytes a key");
}
