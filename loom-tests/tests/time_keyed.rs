//! `Keyed` under the time model (`floodgate_loom_tests::ModelClock`): checks racing inserts,
//! sweeps and evictions while real time moves, a checker stalled between its clock read (under
//! the shard's read lock) and its commit, and `set_limit` on a drained key (one shard), and the
//! map-wide time floor's reach from a leaping key to a key of another shard (two shards). The
//! promise is the per-key one of the algorithm, over the admissions' real times:
//! * fixed window (aligned, 1 per 10 ns): a key's admissions lying inside one window ≤ 1;
//! * GCRA (burst 2, one per 100 ns): a key's admissions inside `[x, y]` ≤ 2 + ⌊(y − x) / 100⌋.
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test time_keyed`
#![cfg(floodgate_loom)]

use std::time::Duration;

use floodgate::keyed::WhenFull;
use floodgate::{Algorithm, FixedWindow, Gcra, Keyed, Rate};
use floodgate_loom_tests::{
    Admitted, MAX_LAG, ModelClock, Span, assert_bucket_bound, join_all, max_in_aligned_window,
    model,
};
use loom::sync::Arc;
use loom::thread;

const W: u64 = 10;

fn keyed<A: Algorithm>(
    algorithm: A,
    clock: &ModelClock,
    cap: usize,
    when_full: WhenFull,
) -> Arc<Keyed<u32, A, ModelClock>> {
    Arc::new(
        Keyed::builder(algorithm)
            .clock(clock.clone())
            .max_keys(cap)
            .shards(1)
            .when_full(when_full)
            .build()
            .unwrap(),
    )
}

fn window() -> FixedWindow {
    FixedWindow::aligned(1, Duration::from_nanos(W)).unwrap()
}

fn check<A: Algorithm>(
    k: &Keyed<u32, A, ModelClock>,
    clock: &ModelClock,
    key: u32,
    n: u32,
) -> Vec<Admitted> {
    let (span, d) = clock.timed(|| k.try_acquire(&key, n).unwrap());
    if d.is_allowed() {
        vec![Admitted::at(span, u64::from(n))]
    } else {
        Vec::new()
    }
}

/// A model thread running a sweep (`retain_recent`) of `k`; it admits nothing.
fn sweeping<A: Algorithm + 'static>(
    k: &Arc<Keyed<u32, A, ModelClock>>,
) -> thread::JoinHandle<Vec<Admitted>> {
    let k = k.clone();
    thread::spawn(move || {
        k.retain_recent();
        Vec::new()
    })
}

fn check_window(admitted: &[Admitted]) {
    let (most, k) = max_in_aligned_window(admitted, W);
    assert!(
        most <= 1,
        "{most} admissions of key 1 inside window {k}: {admitted:?}"
    );
    assert!(
        placeable(admitted),
        "no instants in the admissions' intervals put key 1's at most one to a window: \
         {admitted:?}"
    );
}

/// Whether each admission (of 1 permit) can be given one instant in its interval `[lo, hi]`
/// so that no aligned window holds two: the promise over intervals exactly.
/// `max_in_aligned_window` counts only the admissions lying wholly inside one window; one whose
/// interval spans a window edge took the permit of one of the windows it touches, and is
/// counted here. Greedy, exact for intervals: in order of their last window, each takes the
/// earliest free window it touches.
fn placeable(admitted: &[Admitted]) -> bool {
    let mut windows: Vec<(u64, u64)> = admitted.iter().map(|a| (a.hi / W, a.lo / W)).collect();
    windows.sort_unstable();
    let mut taken: Vec<u64> = Vec::new();
    windows.into_iter().all(|(last, first)| {
        let mut k = first;
        while taken.contains(&k) {
            k += 1;
        }
        taken.push(k);
        k <= last
    })
}

/// Key 1 took its permit at real time 5 in a map of one key. A checks key 1; B moves time to the
/// next window (+5 ns) and checks key 2, evicting key 1; a third thread sweeps. Key 1's
/// admissions stay within one per window of real time, whatever the order of the clock move,
/// the eviction, the sweep and A's read, lock and commit: an idle key is evicted only when
/// idle at the evictor's time, and the check that re-inserts it is decided at a time at least
/// as late.
#[test]
fn eviction_and_sweep_race_a_check_while_time_moves() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let k = keyed(window(), &clock, 1, WhenFull::EvictLeastUsed);
        let first = check(&k, &clock, 1, 1);
        assert_eq!(first.len(), 1);
        let a = {
            let (k, clock) = (k.clone(), clock.clone());
            thread::spawn(move || check(&k, &clock, 1, 1))
        };
        let b = {
            let (k, clock) = (k.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(W / 2);
                check(&k, &clock, 2, 1);
                Vec::new()
            })
        };
        // The sweep runs on a model thread of its own: run on the thread that built the map,
        // loom explored 24,611 executions of this race (now SWEEP_EVICTION).
        let sweep = sweeping(&k);
        let mut admitted = join_all(vec![a, b, sweep], first);
        // One more check of key 1, unless a live key was evicted to make room (documented to
        // change decisions: a full map of live keys under `EvictLeastUsed`).
        if k.stats().evicted_live == 0 {
            admitted.extend(check(&k, &clock, 1, 1));
        }
        check_window(&admitted);
    });
}

/// A checker S (key 1) may stall between its clock read and its commit while T moves time on by
/// `stall` and takes key 1's permit; then the driver checks key 1 once more.
fn stalled_checker(stall: u64) {
    model(None, move || {
        let clock = ModelClock::starting_at(5);
        let k = keyed(window(), &clock, 2, WhenFull::DenyNewKeys);
        // Key 1 exists: S's check takes the read-lock path (clock read, then the CAS loop).
        let mut admitted = check(&k, &clock, 1, 1);
        clock.advance(W);
        let s = {
            let (k, clock) = (k.clone(), clock.clone());
            thread::spawn(move || check(&k, &clock, 1, 1))
        };
        // T runs on a model thread of its own: run on the thread that built the map, loom
        // explored 89 executions of this race.
        let t = {
            let (k, clock) = (k.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(stall);
                check(&k, &clock, 1, 1)
            })
        };
        admitted = join_all(vec![s, t], admitted);
        admitted.extend(check(&k, &clock, 1, 1));
        check_window(&admitted);
    });
}

/// A stall within the fixed window's horizon (2.5 windows).
#[test]
fn stalled_checker_within_the_horizon() {
    stalled_checker(2 * W + W / 2);
}

/// A stall beyond max(window, 10 s): Keyed inherits the fixed window's re-opening (item 1).
#[test]
fn stalled_checker_beyond_the_horizon() {
    stalled_checker(MAX_LAG + 2 * W);
}

/// GCRA keys, burst 2 at one per 100 ns, written as 2 per 200 ns. Key 1 is drained at real
/// time 1000; with no time passing, R lowers every key's limit to 1 per 200 ns while B checks
/// key 1: no time elapsed, so nothing more may be admitted (item 2 through Keyed).
#[test]
fn set_limit_on_a_drained_key_races_a_check() {
    model(None, || {
        let clock = ModelClock::starting_at(1_000);
        let gcra = Gcra::new(Rate::new(2, Duration::from_nanos(200)), 2).unwrap();
        let k = keyed(gcra, &clock, 2, WhenFull::DenyNewKeys);
        let mut admitted = check(&k, &clock, 1, 2);
        let setter = {
            let k = k.clone();
            thread::spawn(move || {
                k.set_limit(1).unwrap();
                Vec::new()
            })
        };
        let b = {
            let (k, clock) = (k.clone(), clock.clone());
            thread::spawn(move || check(&k, &clock, 1, 1))
        };
        admitted = join_all(vec![setter, b], admitted);
        admitted.extend(check(&k, &clock, 1, 1));
        assert_bucket_bound(&admitted, 2, 100);
    });
}

/// A check on key 1 (present: the lock-free path) races an insert that grows the table (a
/// rebuild moving every word) while time moves into key 1's next window, and a sweep. Key 1's
/// admissions stay within one per window of real time: the rebuild moves the word only after
/// the check committed to it, or the check waits for the rebuild and runs on the moved word.
#[test]
fn a_growing_rebuild_and_a_sweep_race_a_check_while_time_moves() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let k = keyed(window(), &clock, 16, WhenFull::DenyNewKeys);
        // The first table takes five keys: the sixth rebuilds it.
        let first = check(&k, &clock, 1, 1);
        assert_eq!(first.len(), 1);
        for key in 2..=5 {
            check(&k, &clock, key, 1);
        }
        let a = {
            let (k, clock) = (k.clone(), clock.clone());
            thread::spawn(move || check(&k, &clock, 1, 1))
        };
        let b = {
            let (k, clock) = (k.clone(), clock.clone());
            thread::spawn(move || {
                clock.advance(W / 2);
                check(&k, &clock, 6, 1);
                Vec::new()
            })
        };
        // The sweep runs on a model thread of its own: run on the thread that built the map,
        // loom explored 15,630 executions of this race (now SWEEP_REBUILD).
        let sweep = sweeping(&k);
        let mut admitted = join_all(vec![a, b, sweep], first);
        admitted.extend(check(&k, &clock, 1, 1));
        check_window(&admitted);
    });
}

/// Key 1 took its permit at time 5 (window [0, 10)); at 10 a sweep dropped it as idle. I
/// re-inserts key 1 at 10; R, whose reads lag by 5, checks key 1 lock-free. However they
/// interleave, key 1 is admitted once more, not twice: R must not find the key I inserted
/// before I's decision wrote its word, or R decides a fresh word at 5, inside the window where
/// key 1 already spent its permit (the drop-time floor only guarded I's own decision). Found by
/// review (3 admissions before the fix).
#[test]
fn a_lagging_reader_never_finds_a_reinserted_key_before_its_first_decision() {
    model(None, || {
        let clock = ModelClock::starting_at(5);
        let k = keyed(window(), &clock, 2, WhenFull::DenyNewKeys);
        assert!(k.try_acquire(&1, 1).unwrap().is_allowed());
        clock.advance(W / 2);
        assert_eq!(k.retain_recent(), 1);
        let inserter = {
            let k = k.clone();
            thread::spawn(move || k.try_acquire(&1, 1).unwrap().is_allowed())
        };
        let lagging = {
            let k = k.clone();
            thread::spawn(move || {
                ModelClock::set_thread_lag(W / 2);
                k.try_acquire(&1, 1).unwrap().is_allowed()
            })
        };
        let again = [inserter.join().unwrap(), lagging.join().unwrap()];
        assert_eq!(
            again.iter().filter(|&&a| a).count(),
            1,
            "key 1 admitted twice after its drop: {again:?}"
        );
    });
}

/// The map-wide time floor's reach across shards (README, "Time model"): GCRA keys, burst 2 at
/// one per 16,000 ns, in a map of two shards of one key each, so keys A and B are in different
/// shards (the hasher is seeded under loom: the same placement in every execution). B is drained
/// at real time 100,000. L admits A on a clock read `LEAD` = 24,000 ns ahead (more than the floor's
/// grain, within H); M checks B at real time, racing it; after both, B is checked twice more
/// with no time passing. The stated bound: B may be decided up to `LEAD` ahead of real time, so
/// its admissions obey the bucket bound over their real spans widened by `LEAD`, which here is
/// min(capacity, ⌈LEAD × rate⌉) early and once: exactly 1 permit (⌊1.5⌋, drained at the same
/// instant) over M's check and the two after, whatever the order.
#[test]
fn a_lead_on_one_key_lifts_a_key_of_another_shard_by_at_most_what_accrues_in_it() {
    const LEAD: u64 = 24_000;
    const INTERVAL: u64 = 16_000;
    model(None, || {
        let clock = ModelClock::starting_at(100_000);
        let gcra = Gcra::new(Rate::new(1, Duration::from_nanos(INTERVAL)), 2).unwrap();
        let k = Arc::new(
            Keyed::builder(gcra)
                .clock(clock.clone())
                .max_keys(2)
                .shards(2)
                .when_full(WhenFull::DenyNewKeys)
                .build()
                .unwrap(),
        );
        const A: u32 = 0;
        assert_eq!(check(&k, &clock, A, 1).len(), 1);
        // B: the first key the full shard of A refuses and the other shard takes (a shard holds
        // one key), drained at once.
        let b = (1..64)
            .find(|&key| k.try_acquire(&key, 2).unwrap().is_allowed())
            .expect("a key in the other shard");
        assert_eq!(k.stats().keys, 2, "A and B are held, one per shard");
        let drained = Admitted::at(
            Span {
                before: 100_000,
                after: 100_000,
            },
            2,
        );
        let leaper = {
            let k = k.clone();
            thread::spawn(move || {
                ModelClock::leap_next_read(LEAD);
                assert!(k.try_acquire(&A, 1).unwrap().is_allowed());
                Vec::new()
            })
        };
        let m = {
            let (k, clock) = (k.clone(), clock.clone());
            thread::spawn(move || lifted(&k, &clock, b))
        };
        let mut admitted = join_all(vec![leaper, m], Vec::new());
        admitted.extend(lifted(&k, &clock, b));
        admitted.extend(lifted(&k, &clock, b));
        assert_eq!(
            admitted.len(),
            1,
            "B gains exactly what accrues in the lead, once: {admitted:?}"
        );
        admitted.push(drained);
        assert_bucket_bound(&admitted, 2, INTERVAL);
    });

    /// One check of `key` at real time, its admission widened by `LEAD`: it may be decided at
    /// the leaper's time.
    fn lifted(k: &Keyed<u32, Gcra, ModelClock>, clock: &ModelClock, key: u32) -> Vec<Admitted> {
        let (span, d) = clock.timed(|| k.try_acquire(&key, 1).unwrap());
        if d.is_allowed() {
            vec![Admitted::skewed(span, 1, 0, LEAD)]
        } else {
            Vec::new()
        }
    }
}
