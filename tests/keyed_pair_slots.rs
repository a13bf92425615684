//! Keys held in two words (`PairCell`: `IpKey`, `HashedKey`, `u128`, `i128`, `Ipv6Addr`) whose
//! stored words (each word XOR its constant of `PairCell::MASKS`) are 0 and 0 (recorded by the
//! table, never written), 0 and x, or x and 0 (which read like another key's pair caught
//! half-written), next to IPv4 and IPv6 /56 `IpKey`s and `u128` 0, 1, 2^64 and `u128::MAX`:
//! keys like any other, held, found, denied after their limit, moved by growth, forgotten,
//! swept, evicted and kept through a shrink, among many keys of one table (issue 16).

use std::fmt::Debug;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

#[path = "support/every_key.rs"]
mod every_key;
use every_key::{held_found_moved_swept_forgotten, map, take};

use floodgate::keyed::{HashedKey, PairCell, PairKey, WhenFull};
use floodgate::{FixedWindow, IpKey, IpKeyer, Key, Keyed, ManualClock};

/// The constants each word is stored XOR.
const MASKS: [u64; 2] = PairCell::<u128>::MASKS;

/// The key words stored as `stored` (the stored words of a key are its words XOR `MASKS`).
fn stored_as([high, low]: [u64; 2]) -> [u64; 2] {
    [high ^ MASKS[0], low ^ MASKS[1]]
}

/// The pairs whose stored words are (0, 0), (0, x), (x, 0), for two values of x each, and
/// pairs sharing a stored word with those (the keys whose half-written pair reads as one of
/// them): `special` first, then `others`.
fn special_and_others() -> (Vec<[u64; 2]>, Vec<[u64; 2]>) {
    let special = [[0, 0], [0, 5], [5, 0], [0, u64::MAX], [u64::MAX, 0]]
        .map(stored_as)
        .to_vec();
    let mut others: Vec<[u64; 2]> = Vec::new();
    for x in 1..80u64 {
        others.push(stored_as([5, x + 5])); // half-written as (5, 0)
        others.push(stored_as([x + 5, 5])); // half-written as (0, 5)
        others.push(stored_as([u64::MAX, x])); // half-written as (MAX, 0)
        others.push([x, x]);
    }
    (special, others)
}

fn of<K>(pairs: &[[u64; 2]], key: impl Fn([u64; 2]) -> K) -> Vec<K> {
    pairs.iter().map(|&pair| key(pair)).collect()
}

fn u128_of([high, low]: [u64; 2]) -> u128 {
    (u128::from(high) << 64) | u128::from(low)
}

/// Every check of `keyed_zero_key.rs`'s word keys, for one pair key type, with the specials
/// first and last.
fn each_way<K: Key + Debug>(special: &[K], others: &[K]) {
    held_found_moved_swept_forgotten(special, others);
    let reversed: Vec<K> = special.iter().rev().cloned().collect();
    held_found_moved_swept_forgotten(&reversed, others);
}

#[test]
fn u128_keys_with_stored_zero_words_are_keys_like_any_other() {
    let (special, others) = special_and_others();
    let mut special = of(&special, u128_of);
    special.extend([0, 1, 1 << 64, u128::MAX]);
    each_way(&special, &of(&others, u128_of));
    each_way(
        &of(&special_and_others().0, |p| u128_of(p) as i128),
        &of(&others, |p| u128_of(p) as i128),
    );
    each_way(
        &of(&special_and_others().0, |p| Ipv6Addr::from_bits(u128_of(p))),
        &of(&others, |p| Ipv6Addr::from_bits(u128_of(p))),
    );
}

#[test]
fn ip_and_hashed_keys_with_stored_zero_words_are_keys_like_any_other() {
    let (special, others) = special_and_others();
    let keyer = IpKeyer::new();
    let mut ip_special = of(&special, IpKey::from_pair);
    for ip in [
        "192.0.2.7",
        "0.0.0.0",
        "255.255.255.255",
        "2001:db8:1::",
        "::",
    ] {
        ip_special.push(keyer.key(ip.parse::<IpAddr>().unwrap()));
    }
    let mut ip_others = of(&others, IpKey::from_pair);
    for n in 0..200u32 {
        ip_others.push(keyer.key(IpAddr::from([10, 0, (n >> 8) as u8, n as u8])));
        let v6 =
            Ipv6Addr::from_bits(0x2001_0db8_0000_0000_0000_0000_0000_0000 | u128::from(n) << 72);
        ip_others.push(keyer.key(IpAddr::V6(v6)));
    }
    // IPv4 keys have a zero high word, /56 networks a zero low word: stored, both nonzero.
    let v4 = keyer.key("192.0.2.7".parse().unwrap()).to_pair();
    let v6 = keyer.key("2001:db8:1:2::1".parse().unwrap()).to_pair();
    assert_eq!((v4[0], v6[1]), (0, 0));
    assert!(stored_as(v4).iter().chain(&stored_as(v6)).all(|&w| w != 0));
    each_way(&ip_special, &ip_others);
    each_way(
        &of(&special, HashedKey::from_pair),
        &of(&others, HashedKey::from_pair),
    );
}

/// `special` holding the fewest permits is the key an eviction picks, and restarts fresh; held
/// with more permits than the others, it is kept while one of them goes.
fn evicted_and_kept_like_any_other<K: Key + Debug>(special: K, others: &[K]) {
    let (keyed, _clock) = map::<K>(8, WhenFull::EvictLeastUsed);
    assert!(take(&keyed, special.clone()));
    for key in &others[..7] {
        assert!(take(&keyed, key.clone()) && take(&keyed, key.clone()));
    }
    assert!(take(&keyed, others[7].clone()), "a ninth key: an eviction");
    let stats = keyed.stats();
    assert_eq!((stats.evicted_live, stats.keys), (1, 8), "{stats:?}");
    for key in &others[..7] {
        assert!(!take(&keyed, key.clone()), "{key:?} kept");
    }
    assert!(
        take(&keyed, special.clone()) && take(&keyed, special.clone()),
        "{special:?} evicted: fresh"
    );
    assert!(!take(&keyed, special.clone()));

    let (keyed, _clock) = map::<K>(8, WhenFull::EvictLeastUsed);
    assert!(take(&keyed, special.clone()) && take(&keyed, special.clone()));
    for key in &others[..6] {
        assert!(take(&keyed, key.clone()) && take(&keyed, key.clone()));
    }
    assert!(take(&keyed, others[6].clone()));
    assert!(take(&keyed, others[7].clone()));
    assert_eq!(keyed.stats().evicted_live, 1);
    assert!(
        !take(&keyed, special.clone()),
        "{special:?} kept with its two permits"
    );
    assert!(
        take(&keyed, others[6].clone()),
        "held one permit: evicted, fresh"
    );
}

/// `special` through `shrink` (a rebuild sized to the keys kept): kept with its window while
/// the idle keys around it go (`special` inserted first, so it moves with every growth).
fn kept_through_a_shrink<K: Key + Debug>(special: K, others: &[K]) {
    let clock = ManualClock::new();
    let keyed: Keyed<K, FixedWindow, ManualClock> =
        Keyed::builder(FixedWindow::new(1, Duration::from_secs(60)).unwrap())
            .clock(clock.clone())
            .max_keys(4096)
            .shards(1)
            .build()
            .unwrap();
    assert!(keyed.try_acquire(&special, 1).unwrap().is_allowed());
    for key in others {
        assert!(keyed.try_acquire(key, 1).unwrap().is_allowed());
    }
    clock.advance(Duration::from_secs(61));
    // Found, not inserted (an insert this late may run a judging pass, dropping the others).
    assert!(keyed.try_acquire(&special, 1).unwrap().is_allowed());
    assert_eq!(keyed.shrink(), others.len());
    assert_eq!(keyed.len(), 1);
    assert!(
        !keyed.try_acquire(&special, 1).unwrap().is_allowed(),
        "{special:?} kept"
    );
    assert!(keyed.try_acquire(&others[0], 1).unwrap().is_allowed());
    assert!(
        !keyed.try_acquire(&special, 1).unwrap().is_allowed(),
        "{special:?} still found"
    );
}

#[test]
fn pair_keys_with_stored_zero_words_are_evicted_and_kept_through_a_shrink_like_any_other() {
    let (special, others) = special_and_others();
    for &pair in &special {
        evicted_and_kept_like_any_other(u128_of(pair), &of(&others, u128_of));
        evicted_and_kept_like_any_other(IpKey::from_pair(pair), &of(&others, IpKey::from_pair));
        evicted_and_kept_like_any_other(
            HashedKey::from_pair(pair),
            &of(&others, HashedKey::from_pair),
        );
        kept_through_a_shrink(u128_of(pair), &of(&others, u128_of));
        kept_through_a_shrink(IpKey::from_pair(pair), &of(&others, IpKey::from_pair));
    }
    for key in [0, 1, 1 << 64, u128::MAX] {
        evicted_and_kept_like_any_other(key, &of(&others, u128_of));
        kept_through_a_shrink(key, &of(&others, u128_of));
    }
}

/// Every built-in pair key's pair round-trips, and distinct keys have distinct pairs.
#[test]
fn built_in_pair_keys_round_trip_with_distinct_pairs() {
    use std::collections::HashSet;
    fn check<K: PairKey + PartialEq + Debug>(keys: &[K]) {
        let mut pairs = HashSet::new();
        for &key in keys {
            assert_eq!(K::from_pair(key.to_pair()), key);
            assert!(pairs.insert(key.to_pair()), "{key:?} shares its pair");
        }
    }
    check(&[0u128, 1, 1 << 64, u128::MAX, u128::MAX - 1, 1 << 127]);
    check(&[0i128, 1, -1, i128::MIN, i128::MAX]);
    check(&[
        Ipv6Addr::UNSPECIFIED,
        Ipv6Addr::LOCALHOST,
        "2001:db8::1".parse().unwrap(),
    ]);
    let keyer = IpKeyer::new();
    check(
        &[
            "10.0.0.1",
            "10.0.0.2",
            "2001:db8::",
            "2001:db8:0:100::",
            "::",
        ]
        .map(|ip| keyer.key(ip.parse().unwrap())),
    );
    check(&[HashedKey::new(b"a"), HashedKey::new(b"b")]);
    assert_eq!((1u128 << 64 | 7).to_pair(), [1, 7], "high word first");
    assert_eq!((-1i128).to_pair(), [u64::MAX, u64::MAX]);
}
