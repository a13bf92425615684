//! Keys whose word is 0 or all ones (`0u64`, `u64::MAX`, `-1i64`, `'\0'`, `false`, `0.0.0.0`)
//! are keys like any other in a map of word keys, where an empty slot's word is also 0: held,
//! found, swept, evicted, forgotten and moved by rebuilds exactly as the others (issue 16).

use std::net::Ipv4Addr;

#[path = "support/every_key.rs"]
mod every_key;
use every_key::{held_found_moved_swept_forgotten, map, take};

use floodgate::keyed::WhenFull;

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
