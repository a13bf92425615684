//! Keyed limiting: floodgate's `Keyed` next to governor's keyed limiter (its default DashMap
//! store, with its default SipHash and with ahash) and a DashMap store running floodgate's own algorithm (the map choice), on a hot key,
//! 1k keys and 1M keys, from 1 thread and from every core. Before the timings, heap bytes per
//! key are measured with a counting global allocator for both limiters.
//!
//! `cargo bench --bench keyed -- --warm-up-time 1 --measurement-time 2`

use std::hint::black_box;
use std::net::{IpAddr, Ipv6Addr};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use dashmap::DashMap;
use floodgate::{Algorithm, Clock, Gcra, IpKey, IpKeyer, Keyed, QuantaClock, Rate};
use governor::clock::DefaultClock;
use governor::state::keyed::DashMapStateStore;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// governor's keyed limiter with floodgate's hasher, so the rows compare the maps, not SipHash.
type GovernorAhash = RateLimiter<u64, DashMapStateStore<u64, ahash::RandomState>, DefaultClock>;

#[path = "../tests/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{Counting, live_bytes};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MILLION: u64 = 1 << 20;

/// Bursts of a million, one permit an hour back: every key stays live (held) for the whole run,
/// so nothing is swept and both maps really hold every key. The 1k and 1M key loops are admitted
/// (the full path: lookup, decide, one compare-exchange); the hot key is drained first, so its
/// loop is the deny path (an attacker hammering one key).
const BURST: u32 = 1_000_000;

fn gcra() -> Gcra {
    Gcra::new(Rate::per_hour(1), BURST).unwrap()
}

fn quota() -> Quota {
    Quota::per_hour(NonZeroU32::new(1).unwrap()).allow_burst(NonZeroU32::new(BURST).unwrap())
}

fn floodgate_keyed<K: floodgate::Key>() -> Keyed<K, Gcra> {
    Keyed::builder(gcra())
        .max_keys(2 * MILLION as usize)
        .build()
        .unwrap()
}

/// The alternative map: DashMap (governor's store) holding floodgate's word, ahash-hashed.
struct DashKeyed {
    map: DashMap<u64, AtomicU64, ahash::RandomState>,
    /// The time floor, one for the map (as a `Keyed` shard has one).
    floor: AtomicU64,
    algorithm: Gcra,
    clock: QuantaClock,
}

impl DashKeyed {
    fn new() -> Self {
        DashKeyed {
            map: DashMap::with_hasher(ahash::RandomState::new()),
            floor: AtomicU64::new(0),
            algorithm: gcra(),
            clock: QuantaClock::new(),
        }
    }
    fn try_acquire(&self, key: u64, n: u32) -> bool {
        let now = self.clock.now_nanos();
        let run = |word: &AtomicU64| self.algorithm.acquire_word(word, &self.floor, || now, n);
        match self.map.get(&key) {
            Some(word) => run(&word),
            None => run(&self.map.entry(key).or_default()),
        }
        .is_ok_and(|d| d.is_allowed())
    }
}

/// Heap bytes per key once `MILLION` keys are held, for both limiters and two key types.
fn report_memory() {
    fn per_key(fill: impl FnOnce() -> Box<dyn std::any::Any>) -> f64 {
        let before = live_bytes();
        let held = fill();
        let bytes = live_bytes() - before;
        drop(held);
        bytes as f64 / MILLION as f64
    }
    let keyer = IpKeyer::new();
    let ip = |i: u64| keyer.key(IpAddr::V6(Ipv6Addr::from(u128::from(i) << 64)));
    let rows = [
        (
            "floodgate Keyed<u64>",
            per_key(|| {
                let keyed = floodgate_keyed::<u64>();
                (0..MILLION).for_each(|k| assert!(keyed.try_acquire(&k, 1).unwrap().is_allowed()));
                Box::new(keyed)
            }),
        ),
        (
            "governor keyed<u64> (DashMap)",
            per_key(|| {
                let keyed: DefaultKeyedRateLimiter<u64> = RateLimiter::keyed(quota());
                (0..MILLION).for_each(|k| assert!(keyed.check_key(&k).is_ok()));
                Box::new(keyed)
            }),
        ),
        (
            "floodgate Keyed<IpKey>",
            per_key(|| {
                let keyed = floodgate_keyed::<IpKey>();
                (0..MILLION)
                    .for_each(|k| assert!(keyed.try_acquire(&ip(k), 1).unwrap().is_allowed()));
                Box::new(keyed)
            }),
        ),
        (
            "governor keyed<IpAddr> (DashMap)",
            per_key(|| {
                let keyed: DefaultKeyedRateLimiter<IpAddr> = RateLimiter::keyed(quota());
                (0..MILLION).for_each(|k| {
                    assert!(
                        keyed
                            .check_key(&IpAddr::V6(Ipv6Addr::from(u128::from(k) << 64)))
                            .is_ok()
                    )
                });
                Box::new(keyed)
            }),
        ),
    ];
    println!("heap bytes per key with {MILLION} keys held (counting allocator):");
    for (name, bytes) in rows {
        println!("  {name:36} {bytes:6.1}");
    }
}

/// Which key iteration `i` checks.
type KeyOf = fn(u64) -> u64;
/// One check of one contender, on the key for iteration `i`.
type Check = Arc<dyn Fn(u64) + Send + Sync>;

/// Times `iters` checks on each of `threads` threads; returns the wall time (so the figure is
/// the time per check with that many threads checking at once).
fn on_threads(threads: usize, iters: u64, check: Check) -> Duration {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let check = Arc::clone(&check);
            scope.spawn(move || {
                let offset = thread as u64 * 7_919;
                for i in 0..iters {
                    check(i + offset);
                }
            });
        }
    });
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    // (name, key for iteration i)
    let shapes: [(&str, KeyOf); 3] = [
        ("hot_key", |_| 0),
        ("1k_keys", |i| i % 1_000),
        ("1M_keys", |i| i.wrapping_mul(0x9E37_79B9) % MILLION),
    ];
    for (shape, key_of) in shapes {
        let ours = Arc::new(floodgate_keyed::<u64>());
        let governor: Arc<DefaultKeyedRateLimiter<u64>> = Arc::new(RateLimiter::keyed(quota()));
        let governor_ahash: Arc<GovernorAhash> =
            Arc::new(RateLimiter::dashmap_with_clock_and_hasher(
                quota(),
                DefaultClock::default(),
                ahash::RandomState::new(),
            ));
        let dash = Arc::new(DashKeyed::new());
        // Every key held before timing, as in a server that has seen its clients.
        let held = if shape == "1M_keys" { MILLION } else { 1_000 };
        for key in (0..held).map(key_of) {
            ours.try_acquire(&key, 1).unwrap();
            let _ = governor.check_key(&key);
            let _ = governor_ahash.check_key(&key);
            dash.try_acquire(key, 1);
        }
        if shape == "hot_key" {
            let rest = BURST - held as u32;
            assert!(ours.try_acquire(&0, rest).unwrap().is_allowed());
            assert!(
                governor
                    .check_key_n(&0, NonZeroU32::new(rest).unwrap())
                    .unwrap()
                    .is_ok()
            );
            assert!(
                governor_ahash
                    .check_key_n(&0, NonZeroU32::new(rest).unwrap())
                    .unwrap()
                    .is_ok()
            );
            assert!(dash.try_acquire(0, rest));
            assert!(!ours.try_acquire(&0, 1).unwrap().is_allowed());
        }
        let distinct = if shape == "hot_key" { 1 } else { held };
        assert_eq!(ours.len() as u64, distinct, "every key held, none swept");
        assert_eq!(governor.len() as u64, distinct);
        let mut group = c.benchmark_group(format!("keyed/{shape}"));
        for threads in [1, cores] {
            let contenders: [(&str, Check); 4] = [
                ("floodgate", {
                    let ours = Arc::clone(&ours);
                    Arc::new(move |i| {
                        black_box(ours.try_acquire(&key_of(i), 1).unwrap());
                    })
                }),
                ("governor_dashmap", {
                    let governor = Arc::clone(&governor);
                    Arc::new(move |i| {
                        let _ = black_box(governor.check_key(&key_of(i)));
                    })
                }),
                ("governor_dashmap_ahash", {
                    let governor = Arc::clone(&governor_ahash);
                    Arc::new(move |i| {
                        let _ = black_box(governor.check_key(&key_of(i)));
                    })
                }),
                ("dashmap_floodgate_word", {
                    let dash = Arc::clone(&dash);
                    Arc::new(move |i| {
                        black_box(dash.try_acquire(key_of(i), 1));
                    })
                }),
            ];
            for (name, check) in contenders {
                group.bench_function(BenchmarkId::new(name, format!("{threads}t")), |b| {
                    b.iter_custom(|iters| on_threads(threads, iters, Arc::clone(&check)))
                });
            }
        }
        group.finish();
    }
}

fn main() {
    report_memory();
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
