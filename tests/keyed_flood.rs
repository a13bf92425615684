//! A flood of 1,000,000 distinct keys (and of 2,000,000 from two threads; `FLOODGATE_FLOOD_KEYS`
//! scales both): the map stays within
//! its cap and its memory bound, measured by a counting global allocator. One `#[test]` so
//! nothing else allocates meanwhile.

use std::time::Duration;

use floodgate::keyed::WhenFull;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use floodgate::{FixedWindow, Gcra, IpKey, IpKeyer, Key, Keyed, ManualClock, Rate};

#[path = "support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{Counting, live_bytes};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Distinct keys per flood: 1,000,000, or `FLOODGATE_FLOOD_KEYS` (the 10M-key flood:
/// `FLOODGATE_FLOOD_KEYS=10000000 cargo test --release --test keyed_flood -- --nocapture`).
fn flood() -> u64 {
    std::env::var("FLOODGATE_FLOOD_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > CAP as u64)
        .unwrap_or(1_000_000)
}
const CAP: usize = 10_000;
/// Heap bytes per key of the cap that a map of `u64` keys may use between calls, all overheads
/// in: a slot is 16 bytes (the key's word and the algorithm's word) and a table is at most
/// three quarters full, so a shard at its cap holds about 21.3 bytes a key (measured peaks:
/// 21.72 to 21.81); the bound leaves room for the shards' fixed parts. (With the key in an
/// `OnceLock`, 24 bytes a slot, the peaks printed 32 in whole bytes and the bound was 36.) A
/// rebuild holds the old table and the new one for its duration, inside a call.
const BYTES_PER_KEY_BOUND: isize = 24;
/// The same for a map of `IpKey`s: a slot is 24 bytes (the key's two words and the algorithm's
/// word), about 32 bytes a key of the cap at three quarters full (measured peak: 32.40); in
/// an `OnceLock`, a 32-byte slot, the same flood peaks at 43.07.
const IP_BYTES_PER_KEY_BOUND: isize = 34;

/// The client network of key number `k`: even numbers IPv4 addresses, odd ones IPv6 /56
/// networks, keyed by the default `IpKeyer` (as `examples/keyed_instructions.rs`'s `ip_of`).
fn ip_of(k: u64) -> IpKey {
    let half = k / 2;
    let ip = if k.is_multiple_of(2) {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + half as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from_bits(
            (0x2001_0db8u128 << 96) | (u128::from(half) << 72),
        ))
    };
    IpKeyer::new().key(ip)
}

fn flood_with_live_keys(when_full: WhenFull) {
    flood_of_live_keys(when_full, |k| k, BYTES_PER_KEY_BOUND);
}

/// [`flood_with_live_keys`] on keys `key(0)`, `key(1)`, ... within `bytes_per_key` bytes a key
/// of the cap; returns the peak.
fn flood_of_live_keys<K: Key>(
    when_full: WhenFull,
    key: impl Fn(u64) -> K,
    bytes_per_key: isize,
) -> f64 {
    let before = live_bytes();
    let clock = ManualClock::new();
    let keyed: Keyed<K, _, _> =
        Keyed::builder(FixedWindow::new(10, Duration::from_secs(3600)).unwrap())
            .clock(clock)
            .max_keys(CAP)
            .when_full(when_full)
            .build()
            .unwrap();
    let mut admitted = 0u64;
    let mut peak = 0;
    for k in 0..flood() {
        admitted += u64::from(keyed.try_acquire(&key(k), 1).unwrap().is_allowed());
        if k % 1024 == 0 {
            peak = peak.max(live_bytes() - before);
        }
    }
    let stats = keyed.stats();
    assert!(stats.keys <= CAP && stats.keys > CAP * 9 / 10, "{stats:?}");
    let bound = CAP as isize * bytes_per_key;
    assert!(peak <= bound, "{when_full:?}: peak {peak} bytes > {bound}");
    eprintln!(
        "{when_full:?}, {}: peak {:.2} bytes per key of the cap",
        std::any::type_name::<K>(),
        peak as f64 / CAP as f64
    );
    match when_full {
        WhenFull::DenyNewKeys => {
            // Every key stays live for an hour: the first keys keep their slots, the rest wait.
            assert_eq!(admitted, stats.keys as u64);
            assert_eq!(stats.refused_new_keys, flood() - admitted);
            assert_eq!(stats.evicted_live, 0);
            assert!(!keyed.try_acquire(&key(flood()), 1).unwrap().is_allowed());
        }
        WhenFull::EvictLeastUsed => {
            assert_eq!(admitted, flood());
            assert_eq!(stats.evicted_live, flood() - stats.keys as u64);
            assert_eq!(stats.refused_new_keys, 0);
        }
    }
    drop(keyed);
    let left = live_bytes() - before;
    assert!(left < 1024, "everything given back: {left} bytes left");
    peak as f64 / CAP as f64
}

/// A flood of `IpKey`s at the cap: 24-byte slots, against the same keys in an `OnceLock`
/// (32-byte slots), which must peak at least a fifth higher.
fn ip_flood_with_live_keys() {
    let pair = flood_of_live_keys(WhenFull::EvictLeastUsed, ip_of, IP_BYTES_PER_KEY_BOUND);
    let once = flood_of_live_keys(WhenFull::EvictLeastUsed, |k| OnceLockIp(ip_of(k)), 48);
    assert!(
        pair * 1.2 < once,
        "{pair:.2} against {once:.2} bytes a key of the cap"
    );
}

fn flood_with_keys_going_idle() {
    let before = live_bytes();
    let clock = ManualClock::new();
    // One request a millisecond per key, bursts of 1: a key is idle 1 ms after its request.
    let keyed: Keyed<u64, _, _> = Keyed::builder(Gcra::new(Rate::per_second(1000), 1).unwrap())
        .clock(clock.clone())
        .max_keys(CAP)
        .build()
        .unwrap();
    let mut peak = 0;
    for key in 0..flood() {
        // 10 µs apart: about 100 keys are live at any moment; the other held keys are idle.
        clock.advance(Duration::from_micros(10));
        assert!(keyed.try_acquire(&key, 1).unwrap().is_allowed());
        assert!(!keyed.try_acquire(&key, 1).unwrap().is_allowed());
        if key % 1024 == 0 {
            peak = peak.max(live_bytes() - before);
        }
    }
    let stats = keyed.stats();
    assert_eq!((stats.evicted_live, stats.refused_new_keys), (0, 0));
    assert!(stats.keys <= CAP);
    assert_eq!(stats.evicted_idle + stats.keys as u64, flood());
    let bound = CAP as isize * BYTES_PER_KEY_BOUND;
    assert!(peak <= bound, "peak {peak} bytes > {bound}");
    eprintln!(
        "keys going idle: peak {:.2} bytes per key of the cap",
        peak as f64 / CAP as f64
    );
    clock.advance(Duration::from_millis(1));
    let held = stats.keys;
    assert_eq!(keyed.shrink(), held);
    assert!(
        live_bytes() - before < 64 * 1024,
        "shrink gives the tables back"
    );
}

#[test]
fn a_million_distinct_keys_stay_within_the_cap_and_memory_bound() {
    // Initialise the process-wide globals (quanta's timeline, ahash's seed) before counting.
    let warm_up: Keyed<u64, _> = Keyed::new(Gcra::new(Rate::per_second(1), 1).unwrap(), 8).unwrap();
    warm_up.try_acquire(&0, 1).unwrap();
    drop(warm_up);
    flood_with_live_keys(WhenFull::DenyNewKeys);
    flood_with_live_keys(WhenFull::EvictLeastUsed);
    ip_flood_with_live_keys();
    flood_with_keys_going_idle();
    flood_from_two_threads();
    bytes_per_live_key_below_the_cap();
}

/// A `u64` key kept in an `OnceLock`, as every key was before word keys (a 24-byte slot with a
/// one-word algorithm): the comparison row of [`bytes_per_live_key_below_the_cap`].
#[derive(Clone, PartialEq, Eq, Hash)]
struct OnceLockKey(u64);

impl floodgate::Key for OnceLockKey {
    type Cell = floodgate::keyed::OnceLockCell<Self>;
}

/// An `IpKey` kept in an `OnceLock`, as it was before pair keys (a 32-byte slot with a one-word
/// algorithm): the comparison row for `IpKey`s.
#[derive(Clone, PartialEq, Eq, Hash)]
struct OnceLockIp(IpKey);

impl floodgate::Key for OnceLockIp {
    type Cell = floodgate::keyed::OnceLockCell<Self>;
}

/// Heap bytes per live key below the cap (2,000,000), all overheads in, at 50,000, 100,000 and
/// 1,000,000 keys: `u64` keys (a 16-byte slot) against the same keys in an `OnceLock` (24
/// bytes). Below the cap a table holds 3/8 to 3/4 of its slots (a growth sizes it for twice its
/// keys), so 21 to 43 bytes a key for 16-byte slots, 32 to 64 for 24-byte ones, plus the
/// shards' fixed parts (512 shards).
fn bytes_per_live_key_below_the_cap() {
    fn per_key<K: floodgate::Key>(keys: u64, key: impl Fn(u64) -> K) -> f64 {
        let before = live_bytes();
        let keyed: Keyed<K, _, _> = Keyed::builder(Gcra::new(Rate::per_second(1), 1).unwrap())
            .clock(ManualClock::new())
            .max_keys(2_000_000)
            .build()
            .unwrap();
        for k in 0..keys {
            assert!(keyed.try_acquire(&key(k), 1).unwrap().is_allowed());
        }
        assert_eq!(keyed.len() as u64, keys);
        let bytes = live_bytes() - before;
        drop(keyed);
        bytes as f64 / keys as f64
    }
    for keys in [50_000, 100_000, 1_000_000] {
        let word = per_key(keys, |k| k);
        let once = per_key(keys, OnceLockKey);
        eprintln!(
            "{keys} live keys below the cap: {word:.1} bytes a key (u64), {once:.1} (OnceLock)"
        );
        assert!(word <= 48.0, "{keys} keys: {word:.1} bytes a key");
        // The same tables, two thirds of the slot bytes.
        assert!(
            word < once * 0.72,
            "{keys} keys: {word:.1} against {once:.1}"
        );
        let ip = per_key(keys, ip_of);
        let once_ip = per_key(keys, |k| OnceLockIp(ip_of(k)));
        eprintln!(
            "{keys} live keys below the cap: {ip:.1} bytes a key (IpKey), {once_ip:.1} (OnceLock)"
        );
        // 24-byte slots, 3/8 to 3/4 full: 32 to 64 bytes a key plus the fixed parts.
        assert!(ip <= 66.0, "{keys} keys: {ip:.1} bytes an IpKey");
        // The same tables, three quarters of the slot bytes.
        assert!(
            ip < once_ip * 0.8,
            "{keys} keys: {ip:.1} against {once_ip:.1}"
        );
    }
}

/// Two threads bring 1,000,000 distinct keys each at once (every key live for an hour): the
/// shards hold their cap exactly, the memory stays within the bound, and every key beyond the
/// cap is refused.
fn flood_from_two_threads() {
    use std::sync::Arc;
    let before = live_bytes();
    let keyed: Arc<Keyed<u64, _, _>> = Arc::new(
        Keyed::builder(FixedWindow::new(10, Duration::from_secs(3600)).unwrap())
            .clock(ManualClock::new())
            .max_keys(CAP)
            .build()
            .unwrap(),
    );
    let threads: Vec<_> = (0..2u64)
        .map(|thread| {
            let keyed = Arc::clone(&keyed);
            std::thread::spawn(move || {
                let (mut admitted, mut peak) = (0u64, 0);
                for i in 0..flood() {
                    let key = i * 2 + thread;
                    admitted += u64::from(keyed.try_acquire(&key, 1).unwrap().is_allowed());
                    if i % 1024 == 0 {
                        peak = peak.max(live_bytes() - before);
                    }
                }
                (admitted, peak)
            })
        })
        .collect();
    let (mut admitted, mut peak) = (0, 0);
    for thread in threads {
        let (a, p) = thread.join().unwrap();
        admitted += a;
        peak = peak.max(p);
    }
    let stats = keyed.stats();
    assert_eq!(stats.keys, stats.max_keys, "every shard filled to its cap");
    assert_eq!(admitted, stats.keys as u64);
    assert_eq!(stats.refused_new_keys, 2 * flood() - admitted);
    // The other thread may be mid-rebuild when one samples: two tables of a shard at once.
    let bound = CAP as isize * BYTES_PER_KEY_BOUND + 2 * 16 * 4096;
    assert!(peak <= bound, "two threads: peak {peak} bytes > {bound}");
    eprintln!(
        "two threads: peak {:.2} bytes per key of the cap",
        peak as f64 / CAP as f64
    );
    drop(keyed);
    let left = live_bytes() - before;
    assert!(left < 1024, "everything given back: {left} bytes left");
}
