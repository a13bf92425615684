//! Edge inputs (times at the end of the clock, odd caps) for the keyed maps: no panic, no hang.

use std::time::Duration;

use floodgate::concurrency::KeyedInFlight;
use floodgate::keyed::WhenFull;
use floodgate::{FixedWindow, Gcra, Keyed, ManualClock, PenaltyBox, Rate, TokenBucket};

#[test]
fn times_at_the_end_of_the_clock_do_not_panic() {
    for when_full in [WhenFull::DenyNewKeys, WhenFull::EvictLeastUsed] {
        for t in [u64::MAX, u64::MAX - 1, u64::MAX - 64, u64::MAX / 2, 1 << 62] {
            let clock = ManualClock::new();
            clock.set(t);
            let keyed = Keyed::builder(TokenBucket::new(Rate::per_second(1), 2).unwrap())
                .clock(clock.clone())
                .max_keys(4)
                .shards(1)
                .when_full(when_full)
                .build_with_penalty::<u32>(
                    PenaltyBox::new(
                        2,
                        Duration::from_nanos(u64::MAX),
                        Duration::from_nanos(u64::MAX),
                    )
                    .unwrap(),
                )
                .unwrap();
            for k in 0..20u32 {
                for _ in 0..4 {
                    let _ = keyed.try_acquire(&k, 1).unwrap();
                }
                let _ = keyed.try_acquire(&k, 2).unwrap();
                assert!(keyed.try_acquire(&k, 3).is_err());
            }
            assert!(keyed.len() <= 4);
            keyed.retain_recent();
            keyed.shrink();
            let g = Keyed::builder(Gcra::new(Rate::per_second(1), 3).unwrap())
                .clock(clock.clone())
                .max_keys(2)
                .shards(2)
                .when_full(when_full)
                .build::<u32>()
                .unwrap();
            for k in 0..10u32 {
                let _ = g.try_acquire(&k, 3).unwrap();
                let _ = g.peek(&k, 1).unwrap();
            }
            assert!(g.len() <= 2);
            let f = Keyed::builder(FixedWindow::new(1, Duration::from_nanos(u64::MAX)).unwrap())
                .clock(clock.clone())
                .max_keys(1)
                .when_full(when_full)
                .build::<u32>()
                .unwrap();
            for k in 0..5u32 {
                let _ = f.try_acquire(&k, 1).unwrap();
            }
            let flight: KeyedInFlight<u32, _> =
                KeyedInFlight::with_clock(2, 1, clock.clone()).unwrap();
            let p = flight.try_acquire(&1, 2).unwrap();
            assert!(p.is_some());
            assert!(flight.try_acquire(&2, 1).unwrap().is_none());
            drop(p);
            clock.set(u64::MAX);
            let _ = flight.try_acquire(&2, 1).unwrap();
        }
    }
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// A penalty box of 1 to `strikes` strikes, a span of 1 ms to 3 s and a block of 1 ms to
    /// `block_ms`.
    fn penalty(&mut self, strikes: u64, block_ms: u64) -> PenaltyBox {
        let strikes = 1 + (self.next() % strikes) as u32;
        let span = Duration::from_millis(1 + self.next() % 3000);
        let block = Duration::from_millis(1 + self.next() % block_ms);
        PenaltyBox::new(strikes, span, block).unwrap()
    }

    /// One step of a random walk: `now` moved on by 0 to 1.2 s (set on `clock`), then a key of
    /// `0..keys` and a count of 1 to 3.
    fn step(&mut self, now: &mut u64, clock: &ManualClock, keys: u64) -> (u8, u32) {
        *now += (self.next() % 5) * (self.next() % 300) * MS;
        clock.set(*now);
        ((self.next() % keys) as u8, 1 + (self.next() % 3) as u32)
    }
}

const MS: u64 = 1_000_000;

#[test]
fn a_capped_penalized_map_decides_as_an_unbounded_one_for_every_key_it_admits() {
    for seed in 0..300u64 {
        let mut rng = Lcg(seed * 7919 + 1);
        let penalty = rng.penalty(3, 3000);
        let clock = ManualClock::new();
        let algorithm = || TokenBucket::new(Rate::per_second(2), 3).unwrap();
        let capped = Keyed::builder(algorithm())
            .clock(clock.clone())
            .max_keys(3)
            .shards(1)
            .build_with_penalty::<u8>(penalty)
            .unwrap();
        let unbounded = Keyed::builder(algorithm())
            .clock(clock.clone())
            .max_keys(1000)
            .shards(1)
            .build_with_penalty::<u8>(penalty)
            .unwrap();
        let mut now = 0;
        for step in 0..400 {
            let (key, n) = rng.step(&mut now, &clock, 6);
            let refused = capped.stats().refused_new_keys;
            let got = capped.try_acquire(&key, n).unwrap();
            if capped.stats().refused_new_keys != refused {
                continue;
            }
            let want = unbounded.try_acquire(&key, n).unwrap();
            assert_eq!(
                got, want,
                "seed {seed} step {step} at {now} key {key} n {n} ({penalty:?})"
            );
            assert_eq!(capped.is_blocked(&key), unbounded.is_blocked(&key));
        }
    }
}

#[test]
fn a_full_shard_never_refuses_a_new_key_while_it_holds_an_idle_one() {
    for seed in 0..300u64 {
        let mut rng = Lcg(seed * 104_729 + 3);
        let penalty = rng.penalty(3, 3000);
        let clock = ManualClock::new();
        let keyed = Keyed::builder(TokenBucket::new(Rate::per_second(2), 3).unwrap())
            .clock(clock.clone())
            .max_keys(3)
            .shards(1)
            .build_with_penalty::<u8>(penalty)
            .unwrap();
        let map = Walked {
            acquire: |key, n| keyed.try_acquire(&key, n).unwrap(),
            refused: || keyed.stats().refused_new_keys,
            retain: || keyed.retain_recent(),
        };
        map.never_refuses_with_an_idle_key(&mut rng, &clock, &format!("seed {seed} ({penalty:?})"));
    }
}

/// A map as the "refused while an idle key is held" walk drives it: `Keyed` and
/// `PenalizedKeyed` alike.
struct Walked<T, R, D> {
    acquire: T,
    refused: R,
    retain: D,
}

impl<T, R, D> Walked<T, R, D>
where
    T: Fn(u8, u32) -> floodgate::Decision,
    R: Fn() -> u64,
    D: Fn() -> usize,
{
    /// 400 random steps over keys `0..6` on `clock`: whenever a request is refused as a new key
    /// (`refused_new_keys` moved), the map held no idle key (`retain_recent` drops nothing).
    fn never_refuses_with_an_idle_key(&self, rng: &mut Lcg, clock: &ManualClock, what: &str) {
        let mut now = 0;
        for step in 0..400 {
            let (key, n) = rng.step(&mut now, clock, 6);
            let refused = (self.refused)();
            let got = (self.acquire)(key, n);
            if (self.refused)() != refused {
                assert_eq!(
                    (self.retain)(),
                    0,
                    "{what} step {step} at {now}: refused {got:?} with an idle key held"
                );
            }
        }
    }
}

fn never_refuses_with_an_idle_key<A: floodgate::Algorithm>(algorithm: impl Fn() -> A) {
    for seed in 0..300u64 {
        let mut rng = Lcg(seed * 15_485_863 + 5);
        let clock = ManualClock::new();
        let keyed = Keyed::builder(algorithm())
            .clock(clock.clone())
            .max_keys(3)
            .shards(1)
            .build::<u8>()
            .unwrap();
        let map = Walked {
            acquire: |key, n| keyed.try_acquire(&key, n).unwrap(),
            refused: || keyed.stats().refused_new_keys,
            retain: || keyed.retain_recent(),
        };
        map.never_refuses_with_an_idle_key(&mut rng, &clock, &format!("seed {seed}"));
    }
}

#[test]
fn a_full_shard_of_plain_keys_never_refuses_a_new_key_while_it_holds_an_idle_one() {
    never_refuses_with_an_idle_key(|| TokenBucket::new(Rate::per_second(2), 3).unwrap());
    never_refuses_with_an_idle_key(|| Gcra::new(Rate::per_second(2), 3).unwrap());
    never_refuses_with_an_idle_key(|| FixedWindow::new(3, Duration::from_millis(700)).unwrap());
    never_refuses_with_an_idle_key(|| floodgate::LeakyBucket::new(Rate::per_second(2), 3).unwrap());
}

#[test]
fn evicting_a_live_key_never_takes_a_blocked_one_while_another_is_not_blocked() {
    for seed in 0..300u64 {
        let mut rng = Lcg(seed * 32_452_843 + 7);
        let penalty = rng.penalty(2, 5000);
        let clock = ManualClock::new();
        let keyed = Keyed::builder(TokenBucket::new(Rate::per_second(2), 3).unwrap())
            .clock(clock.clone())
            .max_keys(3)
            .shards(1)
            .when_full(WhenFull::EvictLeastUsed)
            .build_with_penalty::<u8>(penalty)
            .unwrap();
        let mut now = 0;
        for step in 0..400 {
            let (key, n) = rng.step(&mut now, &clock, 8);
            let blocked: Vec<u8> = (0..8).filter(|k| keyed.is_blocked(k)).collect();
            let held = keyed.len();
            let evicted = keyed.stats().evicted_live;
            let _ = keyed.try_acquire(&key, n).unwrap();
            if keyed.stats().evicted_live != evicted && blocked.len() < held {
                for k in &blocked {
                    assert!(
                        keyed.is_blocked(k),
                        "seed {seed} step {step}: blocked key {k} evicted ({penalty:?})"
                    );
                }
            }
        }
    }
}

/// `Keyed::peek` answers as the next `try_acquire` on the same key does, for keys the map holds
/// and keys it does not, at and below the cap, through inserts, sweeps, `forget`,
/// `retain_recent` and `shrink` (each changes a shard's key count, which a peek on an absent key
/// reads without the shard's lock when the shard is below its cap). One shard of 4 and two
/// shards of 2, a key space of 8, `WhenFull::DenyNewKeys`.
#[test]
fn peek_on_any_key_agrees_with_the_next_try_through_every_change_of_the_key_count() {
    for shards in [1, 2] {
        for seed in 0..200u64 {
            let mut rng = Lcg(seed * 49_979_687 + 11);
            let clock = ManualClock::new();
            let keyed = Keyed::builder(TokenBucket::new(Rate::per_second(2), 3).unwrap())
                .clock(clock.clone())
                .max_keys(4)
                .shards(shards)
                .build::<u8>()
                .unwrap();
            let (mut now, mut refusals) = (0, 0);
            for step in 0..300 {
                let (key, n) = rng.step(&mut now, &clock, 8);
                match rng.next() % 16 {
                    0 => {
                        keyed.forget(&key);
                    }
                    1 => {
                        keyed.retain_recent();
                    }
                    2 => {
                        keyed.shrink();
                    }
                    _ => {}
                }
                let held = keyed.len();
                let peeked = keyed.peek(&key, n).unwrap();
                let refused = keyed.stats().refused_new_keys;
                let got = keyed.try_acquire(&key, n).unwrap();
                let what = format!("{shards} shards, seed {seed} step {step} at {now}: key {key}");
                assert_eq!(peeked, got, "{what}, {held} keys held");
                if keyed.stats().refused_new_keys != refused {
                    refusals += 1;
                }
            }
            // The walks reach full shards: the refusal path is exercised, not only the room one.
            if seed == 0 {
                assert!(refusals > 0, "{shards} shards: no new key was ever refused");
            }
        }
    }
}

std::thread_local! {
    /// How many times a [`CountedIdle`] algorithm was asked whether a state is idle, on this thread.
    static IDLE_TESTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A fixed window that counts its idle tests: how often the map judged a key's liveness.
struct CountedIdle(FixedWindow);

impl floodgate::Algorithm for CountedIdle {
    fn check_permits(&self, n: u32) -> Result<(), floodgate::AcquireError> {
        self.0.check_permits(n)
    }
    fn decide(&self, state: u64, now: u64, n: u32) -> floodgate::limiter::Step {
        self.0.decide(state, now, n)
    }
    fn is_idle(&self, state: u64, now: u64) -> bool {
        IDLE_TESTS.set(IDLE_TESTS.get() + 1);
        self.0.is_idle(state, now)
    }
    fn set_limit(&self, limit: u32, now: u64) -> Result<(), floodgate::ConfigError> {
        self.0.set_limit(limit, now)
    }
    fn limit(&self) -> u64 {
        self.0.limit()
    }
}

/// Peeks at new keys against a full shard of live keys whose sweep schedule has passed (every
/// key used again since the schedule was set, so none is idle when it falls due) judge the
/// shard's keys once, not on every peek: the first peek keeps the bound it found, as a sweep
/// that finds no idle key does. Before: every such peek read every key's liveness under the
/// shard's mutex (8 keys here: 80 idle tests for 10 peeks), until an insert swept.
#[test]
fn peeks_at_new_keys_against_a_full_shard_of_live_keys_judge_its_keys_once() {
    const SEC: u64 = 1_000_000_000;
    let clock = ManualClock::new();
    let keyed: Keyed<u64, CountedIdle, ManualClock> = Keyed::builder(CountedIdle(
        FixedWindow::new(1_000, Duration::from_secs(1)).unwrap(),
    ))
    .clock(clock.clone())
    .max_keys(8)
    .shards(1)
    .when_full(WhenFull::DenyNewKeys)
    .build()
    .unwrap();
    for key in 1..=8 {
        assert!(keyed.check(&key).is_allowed(), "key {key}");
    }
    // The schedule fell due at 1 s; every key is live again, in a window of its own.
    clock.set(SEC + SEC / 2);
    for key in 1..=8 {
        assert!(keyed.check(&key).is_allowed(), "key {key}");
    }
    IDLE_TESTS.set(0);
    let first = keyed.peek(&100, 1).unwrap();
    assert!(
        !first.is_allowed(),
        "room for a new key in a full shard: {first:?}"
    );
    for _ in 0..9 {
        assert_eq!(keyed.peek(&100, 1).unwrap(), first);
    }
    let tests = IDLE_TESTS.get();
    assert!(tests <= 8, "10 peeks judged {tests} keys' liveness");
    // The insert agrees, with the same wait.
    let refused = keyed.check(&100);
    assert!(!refused.is_allowed());
    assert_eq!(refused.retry_after(), first.retry_after());
    // Once that wait is over every key is idle: the next peek and insert find room.
    clock.advance(first.retry_after());
    assert!(keyed.peek(&100, 1).unwrap().is_allowed());
    assert!(keyed.check(&100).is_allowed());
}
