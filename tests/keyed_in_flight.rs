//! `KeyedInFlight`: exact per-key counts, permits given back to their key, bounded memory that
//! never drops a key with requests in progress (ManualClock: the sweep back-off is exact).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use floodgate::concurrency::{KEYED_SWEEP_BACKOFF_NANOS, KeyedInFlight};
use floodgate::{AcquireError, ConfigError, ManualClock};

#[test]
fn each_key_has_its_own_exact_count() {
    let keyed: KeyedInFlight<String> = KeyedInFlight::new(2, 1_000).unwrap();
    let a1 = keyed.try_acquire("a", 1).unwrap().unwrap();
    let a2 = keyed.try_acquire("a", 1).unwrap().unwrap();
    assert!(keyed.try_acquire("a", 1).unwrap().is_none());
    let b = keyed.try_acquire("b", 2).unwrap().unwrap();
    assert_eq!((keyed.in_flight("a"), keyed.in_flight("b")), (2, 2));
    drop(a1);
    assert_eq!(keyed.in_flight("a"), 1);
    assert!(keyed.try_acquire("a", 2).unwrap().is_none());
    let a3 = keyed.try_acquire("a", 1).unwrap().unwrap();
    drop((a2, a3, b));
    assert_eq!((keyed.in_flight("a"), keyed.in_flight("b")), (0, 0));
}

#[test]
fn bad_input_is_a_clear_error() {
    assert_eq!(
        KeyedInFlight::<u8>::new(0, 10).unwrap_err(),
        ConfigError::ZeroLimit
    );
    assert!(matches!(
        KeyedInFlight::<u8>::new(1, 0).unwrap_err(),
        ConfigError::Invalid {
            what: "max_keys",
            ..
        }
    ));
    let keyed: KeyedInFlight<u8> = KeyedInFlight::new(3, 10).unwrap();
    assert_eq!(
        keyed.try_acquire(&1, 0).unwrap_err(),
        AcquireError::ZeroPermits
    );
    assert_eq!(
        keyed.try_acquire(&1, 4).unwrap_err(),
        AcquireError::ExceedsCapacity {
            requested: 4,
            capacity: 3
        }
    );
    assert!(keyed.is_empty(), "a refused request inserts no key");
    assert_eq!(keyed.set_limit(0).unwrap_err(), ConfigError::ZeroLimit);
    assert_eq!(keyed.limit(), 3);
}

#[test]
fn a_panicking_handler_gives_its_key_back() {
    let keyed: KeyedInFlight<u8> = KeyedInFlight::new(1, 10).unwrap();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _p = keyed.try_acquire(&9, 1).unwrap().unwrap();
        panic!("handler failed");
    }));
    assert!(unwound.is_err());
    assert_eq!(keyed.in_flight(&9), 0);
    assert!(keyed.try_acquire(&9, 1).unwrap().is_some());
}

#[test]
fn a_full_map_of_busy_keys_refuses_new_keys_and_never_drops_a_busy_one() {
    let clock = ManualClock::new();
    let keyed: KeyedInFlight<u32, _> = KeyedInFlight::with_clock(1, 2, clock.clone()).unwrap();
    // One shard of two keys (the default for max_keys 2).
    let p1 = keyed.try_acquire(&1, 1).unwrap().unwrap();
    let p2 = keyed.try_acquire(&2, 1).unwrap().unwrap();
    assert!(keyed.try_acquire(&3, 1).unwrap().is_none());
    assert_eq!(keyed.stats().refused_new_keys, 1);
    // Busy keys keep their exact counts through every refused insert.
    clock.advance(Duration::from_secs(3600));
    assert!(keyed.try_acquire(&3, 1).unwrap().is_none());
    assert!(keyed.try_acquire(&1, 1).unwrap().is_none());
    assert_eq!((keyed.in_flight(&1), keyed.in_flight(&2)), (1, 1));
    // Key 1 drains; the shard looks for room again only after the back-off.
    drop(p1);
    assert!(keyed.try_acquire(&3, 1).unwrap().is_none());
    clock.advance_nanos(KEYED_SWEEP_BACKOFF_NANOS - 1);
    assert!(keyed.try_acquire(&3, 1).unwrap().is_none());
    clock.advance_nanos(1);
    let p3 = keyed.try_acquire(&3, 1).unwrap().unwrap();
    assert_eq!(keyed.len(), 2);
    assert_eq!(keyed.in_flight(&1), 0); // dropped as drained: starts fresh
    assert_eq!(keyed.in_flight(&2), 1);
    drop((p2, p3));
    assert_eq!(keyed.retain_busy(), 2);
    assert!(keyed.is_empty());
}

#[test]
fn lowering_the_limit_keeps_permits_and_admits_below_it_only() {
    let keyed: KeyedInFlight<u8> = KeyedInFlight::new(3, 10).unwrap();
    let held = keyed.try_acquire(&0, 3).unwrap().unwrap();
    keyed.set_limit(1).unwrap();
    assert_eq!(keyed.in_flight(&0), 3);
    assert!(keyed.try_acquire(&0, 1).unwrap().is_none());
    drop(held);
    let one = keyed.try_acquire(&0, 1).unwrap().unwrap();
    assert!(keyed.try_acquire(&0, 1).unwrap().is_none());
    drop(one);
}

/// Real threads on two keys: the holders of each key never count more than the limit, and
/// every permit comes back.
#[test]
fn threads_never_hold_more_than_the_limit_per_key() {
    const LIMIT: u32 = 2;
    let keyed: Arc<KeyedInFlight<u8>> = Arc::new(KeyedInFlight::new(LIMIT, 16).unwrap());
    let holding: Arc<[AtomicUsize; 2]> = Arc::new(Default::default());
    let peak = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let (keyed, holding, peak) = (keyed.clone(), holding.clone(), peak.clone());
            std::thread::spawn(move || {
                for round in 0..5_000u32 {
                    let key = ((t + round) % 2) as u8;
                    if let Some(permit) = keyed.try_acquire(&key, 1).unwrap() {
                        let h = &holding[usize::from(key)];
                        let now = h.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(now, Ordering::SeqCst);
                        h.fetch_sub(1, Ordering::SeqCst);
                        drop(permit);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(peak.load(Ordering::SeqCst) <= LIMIT as usize);
    assert_eq!((keyed.in_flight(&0), keyed.in_flight(&1)), (0, 0));
}
