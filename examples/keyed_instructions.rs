//! Keyed limiting, floodgate's `Keyed` against governor's keyed limiter (DashMap) with the same
//! hasher (ahash): instructions per call under callgrind, and paired timing rounds.
//!
//! Instructions (the measured loop is `measured_loop_*`; divide its Ir by CALLS):
//! ```text
//! cargo build --release --example keyed_instructions
//! valgrind --tool=callgrind --toggle-collect='*measured_loop*' \
//!     target/release/examples/keyed_instructions floodgate hot-allow 1000000
//! ```
//! Time: both limiters decide on a `PacedClock` of this file, not on a real clock. It starts at
//! `START_NANOS` and the harness moves it `NANOS_PER_CALL` (100 ns) forward before every call, in
//! the measured loops and in the setup that fills a map alike: a nominal rate of 10 million calls a
//! second. So what a run of one thread decides depends only on its arguments, not on how long it
//! takes: a callgrind run (some 50 times slower than a plain one) decides the same calls, expires
//! the same permits and runs the same judging passes (`JUDGE_INTERVAL_NANOS` in
//! `src/keyed/shards.rs`, 10 s of the map's time) as every other run with those arguments. (On the
//! real clock a callgrind run outlasted that interval and ran judging passes while measured:
//! `keys-1m` 1,033M to 1,142M Ir in such runs against 201M in a run with none; and `hot-deny` got 3
//! of its 1,000,000 calls allowed, a permit a second coming back.) At 100 ns a call no map reaches
//! a judging pass before 10^8 ticks of its clock (10 s), setup and every round of a `time` run
//! counted: `insert-1m`, and the filling of `keys-1m`, span 0.1 s of the map's time, `time keys-1m
//! 1 7 1000000` 0.8 s. (A `time` run past 10^8 ticks can run floodgate's passes in its rounds,
//! where governor's side has none to run.) Each read of a `PacedClock` also reads the limiter's own
//! real clock and discards the reading (floodgate's `QuantaClock`, governor's default
//! `QuantaClock`), so a call costs the instructions and time of a production clock read; the tick
//! adds a load and a store a call, the same on both sides. In a `time` run thread 0 ticks the
//! limiter's clock and every other thread a word of its own (the same work, one writer to a clock):
//! with 1 thread the clock advances 100 ns a call, with more 100 ns per call of thread 0, whose
//! store the other threads' clock reads then miss on, one more shared line per call on both sides.
//! With more than one thread what a run decides depends on how the threads interleave: while thread
//! 0 is descheduled the others' clock stands still, so a `churn-*` key can come round again before
//! its permit has, and be refused, on whichever limiter is running then.
//!
//! What still differs between runs is the hashing: both maps seed ahash at random (floodgate
//! offers no seed), so which keys collide, and the probes and table layouts that follow, change
//! from run to run. The hot-key workloads count the same in every run; the others moved by up
//! to 0.2% between two runs (`insert-1m`: 863.4M, 863.0M and 864.0M Ir for floodgate, 343.60M,
//! 343.60M and 343.59M for governor, three runs of one build), and by none in two runs of a
//! build with floodgate's seeds fixed.
//!
//! Workloads: `hot-allow`, `hot-deny` (one key, 0 or `KEYED_HOT_KEY`, drained first), `churn-1k` (1,024 keys round
//! robin, one permit per 10 µs each, so every key is idle between its uses), `churn-100k`
//! (100,000 keys so, each key's line cold at its turn), `keys-1m` (2^20 keys held, each checked in
//! a scattered order), `insert-1m` (the keys of `keys-1m` in the same order into an empty map:
//! with `CALLS` = 1048576, every call inserts its key, the tables growing as they do). `ip-` before
//! a workload's name (`ip-hot-allow`, `ip-churn-1k`, `ip-churn-100k`, ...) keys both limiters on
//! `IpKey`s instead of `u64`s, made by `IpKeyer` from the same key numbers (`ip_of`: half IPv4
//! addresses, half IPv6 /56 networks; the hot key's number 0 is an IPv4 address). Each loop
//! walks a cycle of the workload's keys computed before it starts
//! (one load and a wrap-around per call, the same harness for every limiter). Counts move by a
//! few instructions with how the compiler lays out a binary (governor's keyed loop: 155 to 183
//! in builds of this file that differ only in harness, and 189 on `hot-allow` with the paced
//! clock, where rustc no longer inlines governor's `measure_and_replace` into the loop, against
//! 165 before it): compare rows of one binary.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use floodgate::{Clock, Gcra, IpKey, IpKeyer, Key, Keyed, QuantaClock, Rate};
use governor::clock::{QuantaInstant, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};

/// Nanoseconds the limiters' clocks move forward per call (per call of thread 0 in a `time` run
/// of several threads): see the module docs.
const NANOS_PER_CALL: u64 = 100;

/// Where the limiters' clocks start: 2023-11-14T22:13:20Z as Unix nanoseconds, a reading of the
/// size floodgate's real clocks give (theirs count from the Unix epoch).
const START_NANOS: u64 = 1_700_000_000_000_000_000;

/// The clock both limiters read: one word of paced time, which [`tick`] moves forward (the
/// harness, once per call of thread 0) and `sleep` (which nothing here calls).
/// Clones share the word. A read also reads the limiter's own real clock and discards it
/// (floodgate's [`QuantaClock`], governor's default `QuantaClock`), so a call costs the
/// instructions and time of a real clock read as it does in production.
#[derive(Clone, Debug)]
struct PacedClock {
    paced: Arc<AtomicU64>,
    floodgate_real: QuantaClock,
    governor_real: governor::clock::QuantaClock,
}

impl PacedClock {
    fn new() -> Self {
        PacedClock {
            paced: Arc::new(AtomicU64::new(START_NANOS)),
            floodgate_real: QuantaClock::new(),
            governor_real: governor::clock::QuantaClock::default(),
        }
    }

    /// The word `tick` moves.
    fn word(&self) -> &AtomicU64 {
        &self.paced
    }

    #[inline(always)]
    fn paced(&self) -> u64 {
        // Relaxed: pairs with the store of `tick`; see there.
        self.paced.load(Ordering::Relaxed)
    }
}

impl Clock for PacedClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        black_box(self.floodgate_real.now_nanos());
        self.paced()
    }

    fn sleep(&self, duration: Duration) {
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        // SeqCst: not on any measured path.
        self.paced.fetch_add(nanos, Ordering::SeqCst);
    }
}

impl governor::clock::Clock for PacedClock {
    type Instant = QuantaInstant;

    /// The paced time as governor's own clock's instant type, so governor runs the code it runs
    /// on its default clock: its instant 0 (any reading less a longer span saturates to it) plus
    /// the paced nanoseconds.
    #[inline]
    fn now(&self) -> QuantaInstant {
        let real = black_box(governor::clock::Clock::now(&self.governor_real));
        real.saturating_sub(Nanos::from(u64::MAX)) + Nanos::from(self.paced())
    }
}

type Governor<K> = RateLimiter<
    K,
    DashMapStateStore<K, ahash::RandomState>,
    PacedClock,
    NoOpMiddleware<QuantaInstant>,
>;
type Floodgate<K> = Keyed<K, Gcra, PacedClock>;

/// What a workload keys on: the `u64` of its key number, or (`ip-*` workloads) an [`IpKey`]
/// made by [`IpKeyer`] from an address of its key number ([`ip_of`]).
trait BenchKey: Key + Copy + Hash + Eq + Send + Sync {
    fn of(number: u64) -> Self;
}

impl BenchKey for u64 {
    #[inline(always)]
    fn of(number: u64) -> u64 {
        number
    }
}

impl BenchKey for IpKey {
    fn of(number: u64) -> IpKey {
        ip_of(number)
    }
}

/// The client network of key number `number`: even numbers an IPv4 address (10.0.0.0 up, its
/// high word 0), odd ones an IPv6 address in a /56 of its own (2001:db8::/32 up, its low word 0
/// once masked), keyed by the default [`IpKeyer`] (/32, /56): half the keys of a workload are
/// each kind.
fn ip_of(number: u64) -> IpKey {
    let half = number / 2;
    let ip = if number.is_multiple_of(2) {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + half as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from_bits(
            (0x2001_0db8u128 << 96) | (u128::from(half) << 72) | 0x1234,
        ))
    };
    IpKeyer::new().key(ip)
}

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
        match name.strip_prefix("ip-").unwrap_or(name) {
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
            // Drained before measuring; one permit a second back, none within a run (1,000,000
            // calls are 0.1 s of the paced clock).
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
            Workload::HotAllow | Workload::HotDeny => hot_key(),
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
    fn cycle<K: BenchKey>(self, thread: u64) -> Vec<K> {
        let len = match self {
            Workload::Keys1m | Workload::Insert1m => KEYS_1M,
            other => other.held(),
        };
        (0..len).map(|i| K::of(self.key(thread, i))).collect()
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

/// The hot workloads' key: 0, or `KEYED_HOT_KEY` (a `u64`). floodgate stores a word-sized key
/// as its word, which for key 0 is an empty slot's too: a lookup that meets a word 0 loads the
/// table's record of the zero key's slot (three more instructions, key 0 only; see
/// `src/keyed/key.rs`), so `KEYED_HOT_KEY=1` measures the path every other key takes. Read when
/// the keys are computed and the map filled, never in a measured loop.
fn hot_key() -> u64 {
    std::env::var("KEYED_HOT_KEY")
        .ok()
        .and_then(|key| key.parse().ok())
        .unwrap_or(0)
}

/// One call's worth of time, [`NANOS_PER_CALL`], on `word`: a clock's ([`PacedClock::word`]) or,
/// on the threads of a `time` run other than thread 0, a word of the thread's own, so every
/// thread does the same work and one thread ticks a clock. With one writer a load and a store
/// suffice: no locked instruction (a fence on x86, which would keep one call's cache misses
/// from overlapping the next call's).
#[inline(always)]
fn tick(word: &AtomicU64) {
    // Relaxed (load and store): the word publishes nothing but itself; its one writer's stores
    // are in order, and the readers (`PacedClock::paced`, Relaxed) need only that.
    let now = word.load(Ordering::Relaxed);
    word.store(now + NANOS_PER_CALL, Ordering::Relaxed);
}

/// A limiter under test and the clock it reads, which the harness ticks.
struct Paced<L> {
    limiter: L,
    clock: PacedClock,
}

fn floodgate<K: BenchKey>(workload: Workload) -> Paced<Floodgate<K>> {
    let (rate, burst) = workload.quota();
    let clock = PacedClock::new();
    let keyed: Floodgate<K> = Keyed::builder(Gcra::new(Rate::per_second(rate), burst).unwrap())
        .max_keys(2 * KEYS_1M as usize)
        .clock(clock.clone())
        .build()
        .unwrap();
    for key in 0..workload.held() {
        let key = if workload == Workload::Keys1m || workload.held() == 1 {
            workload.key(0, key)
        } else {
            key
        };
        tick(clock.word());
        keyed.try_acquire(&K::of(key), 1).unwrap();
    }
    if workload == Workload::HotDeny {
        tick(clock.word());
        assert!(
            !keyed
                .try_acquire(&K::of(hot_key()), 1)
                .unwrap()
                .is_allowed()
        );
    }
    Paced {
        limiter: keyed,
        clock,
    }
}

fn governor<K: BenchKey>(workload: Workload) -> Paced<Governor<K>> {
    let (rate, burst) = workload.quota();
    let quota = Quota::per_second(NonZeroU32::new(rate).unwrap())
        .allow_burst(NonZeroU32::new(burst).unwrap());
    let clock = PacedClock::new();
    let keyed =
        RateLimiter::dashmap_with_clock_and_hasher(quota, clock.clone(), ahash::RandomState::new());
    for key in 0..workload.held() {
        let key = if workload == Workload::Keys1m || workload.held() == 1 {
            workload.key(0, key)
        } else {
            key
        };
        tick(clock.word());
        let _ = keyed.check_key(&K::of(key));
    }
    if workload == Workload::HotDeny {
        tick(clock.word());
        assert!(keyed.check_key(&K::of(hot_key())).is_err());
    }
    Paced {
        limiter: keyed,
        clock,
    }
}

/// The next key of `keys` (a cycle of [`Workload::cycle`]), `at` its place.
#[inline(always)]
fn next<K: Copy>(keys: &[K], at: &mut usize) -> K {
    let key = keys[*at];
    *at += 1;
    if *at == keys.len() {
        *at = 0;
    }
    key
}

#[inline(never)]
fn measured_loop_floodgate<K: BenchKey>(
    keyed: &Floodgate<K>,
    ticked: &AtomicU64,
    keys: &[K],
    calls: u64,
) -> u64 {
    let (mut allowed, mut at) = (0, 0);
    for _ in 0..calls {
        let key = next(keys, &mut at);
        tick(ticked);
        allowed += u64::from(black_box(keyed.check(&key)).is_allowed());
    }
    allowed
}

/// The loop of `measured_loop_floodgate` through `Keyed::admit` (a bool, as governor's
/// `check_key` answers `Ok(())` on an admission; on a denial governor builds `NotUntil`).
#[inline(never)]
fn measured_loop_floodgate_admit<K: BenchKey>(
    keyed: &Floodgate<K>,
    ticked: &AtomicU64,
    keys: &[K],
    calls: u64,
) -> u64 {
    let (mut allowed, mut at) = (0, 0);
    for _ in 0..calls {
        let key = next(keys, &mut at);
        tick(ticked);
        allowed += u64::from(black_box(keyed.admit(&key, 1)).unwrap_or(false));
    }
    allowed
}

#[inline(never)]
fn measured_loop_governor<K: BenchKey>(
    keyed: &Governor<K>,
    ticked: &AtomicU64,
    keys: &[K],
    calls: u64,
) -> u64 {
    let (mut allowed, mut at) = (0, 0);
    for _ in 0..calls {
        let key = next(keys, &mut at);
        tick(ticked);
        allowed += u64::from(black_box(keyed.check_key(&key)).is_ok());
    }
    allowed
}

/// A measured loop over a thread's keys; `true` for the thread that ticks the limiter's clock
/// (thread 0; see [`tick`]).
type Run<K> = Arc<dyn Fn(&[K], u64, bool) -> u64 + Send + Sync>;

/// Nanoseconds per call per thread, `threads` threads running `run` at once, each over its own
/// cycle of `workload`'s keys (computed before the clock starts).
fn timed<K: BenchKey + 'static>(workload: Workload, threads: u64, calls: u64, run: Run<K>) -> f64 {
    let start = Arc::new(Barrier::new(threads as usize + 1));
    let handles: Vec<_> = (0..threads)
        .map(|thread| {
            let (run, start) = (Arc::clone(&run), Arc::clone(&start));
            std::thread::spawn(move || {
                let keys = workload.cycle::<K>(thread);
                start.wait();
                let begin = Instant::now();
                black_box(run(&keys, calls, thread == 0));
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

const USAGE: &str = "usage: keyed_instructions floodgate|floodgate-admit|governor WORKLOAD CALLS
       keyed_instructions time WORKLOAD THREADS ROUNDS CALLS [admit]
WORKLOAD: [ip-]hot-allow | hot-deny | churn-1k | churn-100k | keys-1m | insert-1m";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let needed = if args.get(1).is_some_and(|mode| mode == "time") {
        6
    } else {
        4
    };
    if args.len() < needed {
        eprintln!("{USAGE}");
        std::process::exit(2);
    }
    // `ip-hot-allow`, `ip-churn-1k`, ...: the workload keyed on `IpKey`s (see `ip_of`).
    if args[2].starts_with("ip-") {
        run::<IpKey>(&args);
    } else {
        run::<u64>(&args);
    }
}

fn run<K: BenchKey + 'static>(args: &[String]) {
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
        let ours = floodgate::<K>(workload);
        let theirs = governor::<K>(workload);
        // The word a thread ticks: the limiter's clock on thread 0, its own on the others.
        fn ticked<'a>(clock: &'a PacedClock, own: &'a AtomicU64, ticks: bool) -> &'a AtomicU64 {
            if ticks { clock.word() } else { own }
        }
        let ours: Run<K> = if admit {
            Arc::new(move |keys, n, ticks| {
                let own = AtomicU64::new(START_NANOS);
                let ticked = ticked(&ours.clock, &own, ticks);
                measured_loop_floodgate_admit(&ours.limiter, ticked, keys, n)
            })
        } else {
            Arc::new(move |keys, n, ticks| {
                let own = AtomicU64::new(START_NANOS);
                let ticked = ticked(&ours.clock, &own, ticks);
                measured_loop_floodgate(&ours.limiter, ticked, keys, n)
            })
        };
        let theirs: Run<K> = Arc::new(move |keys, n, ticks| {
            let own = AtomicU64::new(START_NANOS);
            let ticked = ticked(&theirs.clock, &own, ticks);
            measured_loop_governor(&theirs.limiter, ticked, keys, n)
        });
        let time = |run: &Run<K>| timed(workload, threads, calls, Arc::clone(run));
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
    let keys = workload.cycle::<K>(0);
    let allowed = match args[1].as_str() {
        "floodgate" => {
            let paced = floodgate::<K>(workload);
            measured_loop_floodgate(&paced.limiter, paced.clock.word(), &keys, calls)
        }
        "floodgate-admit" => {
            let paced = floodgate::<K>(workload);
            measured_loop_floodgate_admit(&paced.limiter, paced.clock.word(), &keys, calls)
        }
        "governor" => {
            let paced = governor::<K>(workload);
            measured_loop_governor(&paced.limiter, paced.clock.word(), &keys, calls)
        }
        other => panic!("unknown limiter {other}"),
    };
    println!("{allowed} of {calls} allowed");
}
