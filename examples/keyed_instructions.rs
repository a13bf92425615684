//! Keyed limiting, floodgate's `Keyed` against governor's keyed limiter (DashMap) with the same
//! hasher (ahash): instructions per call under callgrind, and paired timing rounds.
//!
//! Instructions (the measured loop is `measured_loop_*`; divide its Ir by CALLS):
//! ```text
//! cargo build --release --example keyed_instructions
//! valgrind --tool=callgrind --toggle-collect='*measured_loop*' \
//!     target/release/examples/keyed_instructions floodgate hot-allow 1000000
//! ```
//! A run under callgrind takes longer than floodgate's judging interval (10 s of real time, see
//! `JUDGE_INTERVAL_NANOS` in `src/keyed/shards.rs`), so whether a judging pass runs within an
//! `insert-1m` loop, and sweeps keys whose one permit came back after a second, depends on how
//! long the run takes. `--toggle-collect='*judge_pass*'` added to the command leaves the passes
//! out of the count (collection toggles off inside one), for a count that does not depend on
//! timing. Only for `insert-1m`: in a workload with held keys a pass can run while they are
//! inserted, before the measured loop, where the toggle would switch collection on; and a
//! `keys-1m` run whose insertion took more than 10 s re-inserts in its loop the keys a pass
//! dropped (look for `ShardedMap::insert` in its profile).
//! Workloads: `hot-allow`, `hot-deny` (one key, drained first), `churn-1k` (1,024 keys round
//! robin, one permit per 10 µs each, so every key is idle between its uses), `churn-100k`
//! (100,000 keys so, each key's line cold at its turn), `keys-1m` (2^20 keys held, each checked in
//! a scattered order), `insert-1m` (the keys of `keys-1m` in the same order into an empty map:
//! with `CALLS` = 1048576, every call inserts its key, the tables growing as they do). Each loop walks a cycle of the workload's keys computed before it starts
//! (one load and a wrap-around per call, the same harness for every limiter). Counts move by a
//! few instructions with how the compiler lays out a binary (governor's keyed loop: 155 to 183
//! in builds of this file that differ only in harness): compare rows of one binary.
//!
//! `floodgate-admit` in place of `floodgate` measures `Keyed::admit` (a bool) instead of
//! `Keyed::check` (a `Decision`). governor's `check_key` answers a denial with `NotUntil` (its
//! earliest retry time, which `admit` does not compute): on `hot-deny` the equal-work
//! comparison is `floodgate` (`check`), not `floodgate-admit`.
//!
//! Timing: `keyed_instructions time WORKLOAD THREADS ROUNDS CALLS [admit]` runs floodgate and governor
//! alternately ROUNDS times (CALLS calls per thread per round; floodgate first in even rounds,
//! governor first in odd ones) and prints each one's median nanoseconds per call (per thread)
//! and their ratio.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Arc, Barrier};
use std::time::Instant;

use floodgate::{Gcra, Keyed, Rate};
use governor::clock::DefaultClock;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};

type Governor = RateLimiter<u64, DashMapStateStore<u64, ahash::RandomState>, DefaultClock>;
type Floodgate = Keyed<u64, Gcra>;

const KEYS_1M: u64 = 1 << 20;
const KEYS_100K: u64 = 100_000;

#[derive(Clone, Copy, PartialEq)]
enum Workload {
    HotAllow,
    HotDeny,
    Churn1k,
    Churn100k,
    Keys1m,
    Insert1m,
}

impl Workload {
    fn parse(name: &str) -> Workload {
        match name {
            "hot-allow" => Workload::HotAllow,
            "hot-deny" => Workload::HotDeny,
            "churn-1k" => Workload::Churn1k,
            "churn-100k" => Workload::Churn100k,
            "keys-1m" => Workload::Keys1m,
            "insert-1m" => Workload::Insert1m,
            _ => panic!("unknown workload {name}"),
        }
    }

    /// (rate per second, burst)
    fn quota(self) -> (u32, u32) {
        match self {
            // Always allowed: a nanosecond per permit.
            Workload::HotAllow => (1_000_000_000, 1_000),
            // Drained before measuring; one permit a second back (none within a run: 0 of
            // 1,000,000 allowed, under callgrind too).
            Workload::HotDeny => (1, 1),
            // One permit per 10 µs, burst 1: idle again long before the key's next turn.
            Workload::Churn1k | Workload::Churn100k => (100_000, 1),
            // Every key admitted: a big burst, nothing comes back.
            Workload::Keys1m | Workload::Insert1m => (1, 1_000_000),
        }
    }

    #[inline(always)]
    fn key(self, thread: u64, i: u64) -> u64 {
        match self {
            Workload::HotAllow | Workload::HotDeny => 0,
            Workload::Churn1k => (i + thread * 512) % 1024,
            Workload::Churn100k => (i + thread * (KEYS_100K / 2)) % KEYS_100K,
            Workload::Keys1m | Workload::Insert1m => {
                (i + thread * 7919).wrapping_mul(0x9E37_79B9) % KEYS_1M
            }
        }
    }

    /// The keys thread `thread` asks for, in order, one cycle of them (the measured loops walk
    /// it round and round): computed before measuring, so every loop's harness is the same
    /// load and wrap-around whatever the workload. (Computing the key in the loop matched on
    /// the workload per call, computed every workload's key and jumped through a table: some
    /// 15 instructions of harness, laid out differently in each limiter's loop.)
    fn cycle(self, thread: u64) -> Vec<u64> {
        let len = match self {
            Workload::Keys1m | Workload::Insert1m => KEYS_1M,
            other => other.held(),
        };
        (0..len).map(|i| self.key(thread, i)).collect()
    }

    fn held(self) -> u64 {
        match self {
            Workload::HotAllow | Workload::HotDeny => 1,
            Workload::Churn1k => 1024,
            Workload::Churn100k => KEYS_100K,
            Workload::Keys1m => KEYS_1M,
            Workload::Insert1m => 0,
        }
    }
}

fn floodgate(workload: Workload) -> Floodgate {
    let (rate, burst) = workload.quota();
    let keyed: Floodgate = Keyed::builder(Gcra::new(Rate::per_second(rate), burst).unwrap())
        .max_keys(2 * KEYS_1M as usize)
        .build()
        .unwrap();
    for key in 0..workload.held() {
        let key = if workload == Workload::Keys1m {
            workload.key(0, key)
        } else {
            key
        };
        keyed.try_acquire(&key, 1).unwrap();
    }
    if workload == Workload::HotDeny {
        assert!(!keyed.try_acquire(&0, 1).unwrap().is_allowed());
    }
    keyed
}

fn governor(workload: Workload) -> Governor {
    let (rate, burst) = workload.quota();
    let quota = Quota::per_second(NonZeroU32::new(rate).unwrap())
        .allow_burst(NonZeroU32::new(burst).unwrap());
    let keyed = RateLimiter::dashmap_with_clock_and_hasher(
        quota,
        DefaultClock::default(),
        ahash::RandomState::new(),
    );
    for key in 0..workload.held() {
        let key = if workload == Workload::Keys1m {
            workload.key(0, key)
        } else {
            key
        };
        let _ = keyed.check_key(&key);
    }
    if workload == Workload::HotDeny {
        assert!(keyed.check_key(&0).is_err());
    }
    keyed
}

/// The next key of `keys` (a cycle of [`Workload::cycle`]), `at` its place.
#[inline(always)]
fn next(keys: &[u64], at: &mut usize) -> u64 {
    let key = keys[*at];
    *at += 1;
    if *at == keys.len() {
        *at = 0;
    }
    key
}

#[inline(never)]
fn measured_loop_floodgate(keyed: &Floodgate, keys: &[u64], calls: u64) -> u64 {
    let (mut allowed, mut at) = (0, 0);
    for _ in 0..calls {
        let key = next(keys, &mut at);
        allowed += u64::from(black_box(keyed.check(&key)).is_allowed());
    }
    allowed
}

/// The loop of `measured_loop_floodgate` through `Keyed::admit` (a bool, as governor's
/// `check_key` answers `Ok(())` on an admission; on a denial governor builds `NotUntil`).
#[inline(never)]
fn measured_loop_floodgate_admit(keyed: &Floodgate, keys: &[u64], calls: u64) -> u64 {
    let (mut allowed, mut at) = (0, 0);
    for _ in 0..calls {
        let key = next(keys, &mut at);
        allowed += u64::from(black_box(keyed.admit(&key, 1)).unwrap_or(false));
    }
    allowed
}

#[inline(never)]
fn measured_loop_governor(keyed: &Governor, keys: &[u64], calls: u64) -> u64 {
    let (mut allowed, mut at) = (0, 0);
    for _ in 0..calls {
        let key = next(keys, &mut at);
        allowed += u64::from(black_box(keyed.check_key(&key)).is_ok());
    }
    allowed
}

/// A measured loop over a thread's keys.
type Run = Arc<dyn Fn(&[u64], u64) -> u64 + Send + Sync>;

/// Nanoseconds per call per thread, `threads` threads running `run` at once, each over its own
/// cycle of `workload`'s keys (computed before the clock starts).
fn timed(workload: Workload, threads: u64, calls: u64, run: Run) -> f64 {
    let start = Arc::new(Barrier::new(threads as usize + 1));
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let (run, start) = (Arc::clone(&run), Arc::clone(&start));
            std::thread::spawn(move || {
                let keys = workload.cycle(thread);
                start.wait();
                let begin = Instant::now();
                black_box(run(&keys, calls));
                begin.elapsed()
            })
        })
        .collect();
    start.wait();
    let longest = handles
        .into_iter()
        .map(|handle| handle.join().unwrap())
        .max()
        .unwrap();
    longest.as_nanos() as f64 / calls as f64
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args[1] == "time" {
        let workload = Workload::parse(&args[2]);
        if workload == Workload::Insert1m {
            // One map for every round: only the first would insert.
            eprintln!(
                "insert-1m is for instruction counts (one pass over an empty map), not `time`"
            );
            std::process::exit(2);
        }
        let threads: u64 = args[3].parse().unwrap();
        let rounds: usize = args[4].parse().unwrap();
        let calls: u64 = args[5].parse().unwrap();
        // An optional sixth argument `admit` times `Keyed::admit` instead of `Keyed::check`.
        let admit = args.get(6).is_some_and(|mode| mode == "admit");
        let ours = floodgate(workload);
        let theirs = governor(workload);
        let ours: Run = if admit {
            Arc::new(move |keys, n| measured_loop_floodgate_admit(&ours, keys, n))
        } else {
            Arc::new(move |keys, n| measured_loop_floodgate(&ours, keys, n))
        };
        let theirs: Run = Arc::new(move |keys, n| measured_loop_governor(&theirs, keys, n));
        let time = |run: &Run| timed(workload, threads, calls, Arc::clone(run));
        let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            // Who goes first alternates, so neither always runs on the caches (and the CPU
            // frequency) the other left.
            let (x, y) = if round % 2 == 0 {
                let x = time(&ours);
                (x, time(&theirs))
            } else {
                let y = time(&theirs);
                (time(&ours), y)
            };
            a.push(x);
            b.push(y);
            ratios.push(x / y);
        }
        println!(
            "{} {threads}t: floodgate {:.1} ns/call, governor {:.1} ns/call, ratio (median of paired rounds) {:.2}",
            args[2],
            median(a),
            median(b),
            median(ratios)
        );
        return;
    }
    let workload = Workload::parse(&args[2]);
    let calls: u64 = args[3].parse().unwrap();
    let allowed = match args[1].as_str() {
        "floodgate" => measured_loop_floodgate(&floodgate(workload), &workload.cycle(0), calls),
        "floodgate-admit" => {
            measured_loop_floodgate_admit(&floodgate(workload), &workload.cycle(0), calls)
        }
        "governor" => measured_loop_governor(&governor(workload), &workload.cycle(0), calls),
        other => panic!("unknown limiter {other}"),
    };
    println!("{allowed} of {calls} allowed");
}
