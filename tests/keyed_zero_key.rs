//! Keys whose word is 0 or all ones (`0u64`, `u64::MAX`, `-1i64`, `'\0'`, `false`, `0.0.0.0`)
//! are keys like any other in a map of word keys, where an empty slot's word is also 0: held,
//! found, swept, evicted, forgotten and moved by rebuilds exactly as the others (issue 16).

use std::net::Ipv4Addr;
use std::time::Duration;

use floodgate::keyed::WhenFull;
use floodgate::{FixedWindow, Key, Keyed, ManualClock};

/// A map of two requests a minute per key, one shard (so every key shares its table with the
/// others, key 0 in their probe sequences), on a manual clock.
fn map<K: Key>(
    max_keys: usize,
    when_full: WhenFull,
) -> (Keyed<K, FixedWindow, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let keyed = Keyed::builder(FixedWindow::new(2, Duration::from_secs(60)).unwrap())
        .clock(clock.clone())
        .max_keys(max_keys)
        .shards(1)
        .when_full(when_full)
        .build()
        .unwrap();
    (keyed, clock)
}

fn take<K: Key>(keyed: &Keyed<K, FixedWindow, ManualClock>, key: K) -> bool {
    keyed.try_acquire(&key, 1).unwrap().is_allowed()
}

/// `special` keys among `others`: each gets its own two permits, is found by `peek`, survives the
/// growth rebuilds the others bring, is swept when idle, and is forgotten by name.
fn held_found_moved_swept_forgotten<K: Key + std::fmt::Debug>(special: &[K], others: &[K]) {
    let (keyed, clock) = map::<K>(4096, WhenFull::DenyNewKeys);
    for key in special {
        assert_eq!(keyed.peek(key, 1).unwrap().remaining(), 1, "{key:?} absent");
        assert!(take(&keyed, key.clone()), "{key:?}");
    }
    for key in others {
        assert!(take(&keyed, key.clone()), "{key:?}");
    }
    assert_eq!(keyed.len(), special.len() + others.len());
    for key in special {
        assert_eq!(keyed.peek(key, 1).unwrap().remaining(), 0, "{key:?} found");
        assert!(take(&keyed, key.clone()), "{key:?}");
        assert!(
            !take(&keyed, key.clone()),
            "{key:?}: its own window, moved by growth"
        );
    }
    // Forgotten by name: fresh again, the others untouched.
    let first = &special[0];
    assert!(keyed.forget(first));
    assert!(!keyed.forget(first));
    assert_eq!(keyed.len(), special.len() + others.len() - 1);
    assert!(take(&keyed, first.clone()), "{first:?} forgotten");
    for key in &special[1..] {
        assert!(
            !take(&keyed, key.clone()),
            "{key:?} kept by the forget's rebuild"
        );
    }
    // Idle after the window: every key swept, then fresh.
    clock.advance(Duration::from_secs(61));
    assert_eq!(keyed.retain_recent(), special.len() + others.len());
    assert_eq!(keyed.len(), 0);
    for key in special {
        assert_eq!(keyed.peek(key, 1).unwrap().remaining(), 1, "{key:?} swept");
        assert!(take(&keyed, key.clone()) && take(&keyed, key.clone()));
        assert!(!take(&keyed, key.clone()));
    }
}

#[test]
fn u64_zero_and_max_are_keys_like_any_other() {
    let others: Vec<u64> = (1..200).chain((1..200).map(|k| u64::MAX - k)).collect();
    held_found_moved_swept_forgotten(&[0, u64::MAX], &others);
    held_found_moved_swept_forgotten(&[u64::MAX, 0], &others);
}

#[test]
fn other_word_keys_with_word_zero_are_keys_like_any_other() {
    let others: Vec<i64> = (1..300).chain((2..300).map(|k| -k)).collect();
    held_found_moved_swept_forgotten(&[0i64, -1, i64::MIN, i64::MAX], &others);
    let others: Vec<u32> = (1..300).collect();
    held_found_moved_swept_forgotten(&[0u32, u32::MAX], &others);
    let others: Vec<char> = ('a'..='z').chain('A'..='Z').collect();
    held_found_moved_swept_forgotten(&['\0', char::MAX], &others);
    held_found_moved_swept_forgotten(&[false], &[true]);
    held_found_moved_swept_forgotten(&[true], &[false]);
    let others: Vec<Ipv4Addr> = (1..300u32).map(Ipv4Addr::from).collect();
    held_found_moved_swept_forgotten(&[Ipv4Addr::UNSPECIFIED, Ipv4Addr::BROADCAST], &others);
}

/// Key 0 holding the fewest permits is the one an eviction picks, and restarts fresh; held with
/// more permits than the others, it is kept while they go.
#[test]
fn the_zero_key_is_evicted_and_kept_like_any_other() {
    let (keyed, _clock) = map::<u64>(8, WhenFull::EvictLeastUsed);
    assert!(take(&keyed, 0));
    for key in 1..8 {
        assert!(take(&keyed, key) && take(&keyed, key));
    }
    assert_eq!(keyed.len(), 8);
    // A new key: the shard is full of live keys; key 0 holds the fewest permits.
    assert!(take(&keyed, 100));
    let stats = keyed.stats();
    assert_eq!((stats.evicted_live, stats.keys), (1, 8), "{stats:?}");
    for key in 1..8 {
        assert!(!take(&keyed, key), "key {key} kept");
    }
    assert!(take(&keyed, 0) && take(&keyed, 0), "key 0 evicted: fresh");
    assert!(!take(&keyed, 0));

    // Now key 0 holds 2 and key 100 one: the next eviction takes key 100.
    let (keyed, _clock) = map::<u64>(8, WhenFull::EvictLeastUsed);
    assert!(take(&keyed, 0) && take(&keyed, 0));
    for key in 1..7 {
        assert!(take(&keyed, key) && take(&keyed, key));
    }
    assert!(take(&keyed, u64::MAX));
    assert!(take(&keyed, 200));
    assert_eq!(keyed.stats().evicted_live, 1);
    assert!(!take(&keyed, 0), "key 0 kept with its two permits");
    assert!(
        take(&keyed, u64::MAX),
        "u64::MAX held one permit: evicted, fresh"
    );
}
