//! The engine every packed-word limiter runs: the one CAS loop ([`update`]) and its forms that
//! read a clock ([`update_timed`]) and keep a time floor ([`update_at`], [`update_floored`],
//! [`update_floored_leap`]).

use crate::clock::{FLOOR_GRAIN_NANOS, MAX_CLOCK_LAG_NANOS};
use crate::decision::Decision;
use crate::sync::{AtomicU64, Ordering, fence};

use super::Step;

/// The one CAS loop: load the word, decide, publish with one compare-exchange against the exact
/// word the decision was computed from, retry on conflict. A step without `next` (a denial)
/// returns without writing, so a limiter under attack keeps its cache line shared.
///
/// A lost compare-exchange retries at once, with no backoff (session 31, issue 17). A pause of
/// 32-128 spin-loop hints after each loss, in this loop and the algorithms' short paths, made
/// the contention report's 2-thread GCRA 1.7-2.1x governor instead of 1.1x, but by starving
/// one thread: with each call timed, one thread made 0.26-0.86 M calls/s while the other made
/// 5-5.5 M (without the pause 3.6-3.9 M each), and 23-47 of its calls took over 100 us in 300
/// ms. Pausing once per call, or reloading the word after the pause, kept both threads
/// progressing, but with work between calls the pair made fewer calls than with no pause. The
/// report's batches of 64 calls hide such a starved thread in their percentiles.
#[inline]
pub(crate) fn update(word: &AtomicU64, mut decide: impl FnMut(u64) -> Step) -> Decision {
    // Acquire: a state word comes with everything its writer did before publishing it (the time
    // floor of `update_at`); the word itself needs no more than a total order on one location.
    let mut current = word.load(Ordering::Acquire);
    loop {
        let step = decide(current);
        let Some(next) = step.next else {
            return step.decision;
        };
        if next == current {
            return step.decision;
        }
        // AcqRel: Release publishes what was written before (the time floor) with the word;
        // Acquire on failure, as the load above. `actual` is the exact word the retry decides on.
        match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return step.decision,
            Err(actual) => current = actual,
        }
    }
}

/// [`update`] for decisions that depend on a clock read: `read_clock` is called once up front
/// and again only when a step judged its state to be a leaping clock's
/// ([`Step::is_after_leap`]) on a read that was taken *before* that state was loaded. So a step
/// that discards or folds far-ahead state is always based on a clock read newer than the state:
/// a thread preempted between its clock read and its compare-exchange (for any length of time)
/// finds newer state on its retry, reads the clock again, and decides on the present, never
/// re-opening a window that newer threads have filled.
#[inline]
pub(crate) fn update_timed(
    word: &AtomicU64,
    mut read_clock: impl FnMut() -> u64,
    mut decide: impl FnMut(u64, u64) -> Step,
) -> Decision {
    let mut now = read_clock();
    // Acquire: as in `update`.
    let mut current = word.load(Ordering::Acquire);
    // Whether `now` was read after `current` was loaded.
    let mut fresh = false;
    loop {
        let step = decide(current, now);
        if step.leap && !fresh {
            now = read_clock();
            fresh = true;
            continue;
        }
        let Some(next) = step.next else {
            return step.decision;
        };
        if next == current {
            return step.decision;
        }
        // AcqRel / Acquire: as in `update`.
        match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return step.decision,
            Err(actual) => {
                current = actual;
                fresh = false;
            }
        }
    }
}

/// A clock reader for [`update_timed`] / [`update_at`] whose first read is one already taken
/// (`first`), and every later read a fresh one from `clock`.
#[inline]
pub(crate) fn reads_after(first: u64, mut clock: impl FnMut() -> u64) -> impl FnMut() -> u64 {
    let mut first = Some(first);
    move || first.take().unwrap_or_else(&mut clock)
}

/// The units a time floor counts in: the lag horizon and the floor's grain, in the units of the
/// clock values it holds (nanoseconds for [`update_at`]; the smooth limiters count µs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FloorUnits {
    /// A floor further ahead of a fresh clock read than this was published by a leaping clock.
    pub(crate) horizon: u64,
    /// A writer raises the floor only when its time passed the floor by at least this much.
    pub(crate) grain: u64,
}

/// The floor of the smooth limiters, in microseconds: the buckets' grain, 16 µs. With a grain
/// of 1 µs the floor (on the state's line) was raised on most bookings from 4 threads up, and
/// `SmoothWarmingUp` ran 4.5-5.2 M calls a second on 16 cores where it runs 14.8-16.5 M with
/// 16 µs (`SmoothBursty` 5.0-6.1 and 6.0-8.8 M; at the limit 12-13 and 23-32 M; the
/// contention report, three rounds of each build alternated on a 16-core Xeon). Instructions
/// per call are unchanged or lower (callgrind: bursty 95.9 -> 94.1 allowing, 107 denying).
pub(crate) const MICROS_FLOOR: FloorUnits = FloorUnits {
    horizon: MAX_CLOCK_LAG_NANOS / 1_000,
    grain: FLOOR_GRAIN_NANOS / 1_000,
};

/// The floor of the time-word buckets, in nanoseconds.
pub(crate) const NANOS_FLOOR: FloorUnits = FloorUnits {
    horizon: MAX_CLOCK_LAG_NANOS,
    grain: FLOOR_GRAIN_NANOS,
};

/// The time a decision runs at, given a clock read and the floor: `max(clock, floor)` while the
/// floor is within the lag horizon of the read, else `None` (the floor is a leaping clock's, or
/// the read is stale: read the clock again to tell which).
#[inline]
pub(crate) fn floored(clock_now: u64, floor_now: u64, units: FloorUnits) -> Option<u64> {
    (floor_now <= clock_now.saturating_add(units.horizon)).then(|| clock_now.max(floor_now))
}

/// Raises the time floor from `seen` (the value this thread loaded) to `now`: one
/// compare-exchange when nobody moved the floor since, else `fetch_max` (the floor only ever
/// rises here). Relaxed: the caller publishes the floor with the Release compare-exchange of its
/// state word that follows (as `update_floored` does).
#[inline]
pub(crate) fn raise_floor(floor: &AtomicU64, seen: u64, now: u64) {
    // Relaxed / Relaxed: see above.
    move_floor(floor, seen, now, Ordering::Relaxed, Ordering::Relaxed);
}

/// Moves the time floor from `seen` (the value this thread loaded) to `now`: one
/// compare-exchange (`success` / `failure`) when nobody moved the floor since, else `fetch_max`
/// (`success`), so a floor another thread moved meanwhile ends at the later of its value and
/// `now`. The compare-exchange may lower the floor (a leap repair puts a leaped floor back to a
/// fresh read); the `fetch_max` never does. Each caller names what its orderings pair with.
#[inline(always)]
pub(crate) fn move_floor(
    floor: &AtomicU64,
    seen: u64,
    now: u64,
    success: Ordering,
    failure: Ordering,
) {
    if floor.compare_exchange(seen, now, success, failure).is_err() {
        floor.fetch_max(now, success);
    }
}

/// The time a read that writes nothing (a peek, a setter's change instant) runs at: `clock_now`
/// raised to the floor while the floor is within the lag horizon, the clock alone beyond it (a
/// leaping clock's floor is never obeyed). The floor load is Relaxed: a peek takes it after its
/// Acquire load of the state word (which pairs with the writer's Release CAS); a setter only
/// needs some past clock read.
#[inline]
pub(crate) fn read_at_floor(clock_now: u64, floor: &AtomicU64) -> u64 {
    floored(clock_now, floor.load(Ordering::Relaxed), NANOS_FLOOR).unwrap_or(clock_now)
}

/// [`update_timed`] with a time floor: every decision runs at `max(clock, floor)`, and a writer
/// whose time passed the floor by the floor's grain ([`FLOOR_GRAIN_NANOS`]) raises it before it
/// publishes its word, so a reader that sees the word also sees a floor at most one grain behind
/// the writer's clock. A reader whose clock lags (another core's TSC) is then decided at the
/// writer's time less at most one grain: never moved back, never refused for more than one grain
/// of its lag. The floor is a clock value some thread read before this call observed its
/// effect, so it is never later than the real time of the call: nothing is admitted early.
///
/// **Bounded**: a floor more than [`MAX_CLOCK_LAG_NANOS`] ahead of a clock read is never obeyed.
/// The clock is read again (a stale read, preempted since, becomes fresh); a floor still that far
/// ahead of a fresh read was published by a leaping clock: the decision runs at the fresh read,
/// and a writing step puts the floor back to it, after its word has landed (so until that store,
/// a reader that sees the repaired word may still load the leaped floor, and re-reads its clock).
/// Repairs racing each other leave the floor at the latest of their reads, so the one-grain bound
/// above holds again once their floor stores have landed. So one far-future read costs at most
/// one extra clock read per call until the next write, never a frozen limiter.
/// A denial writes nothing; raising the floor is the admission's second atomic operation only
/// once per grain of time.
#[inline]
pub(crate) fn update_at(
    word: &AtomicU64,
    floor: &AtomicU64,
    read_clock: impl FnMut() -> u64,
    decide: impl FnMut(u64, u64) -> Step,
) -> Decision {
    update_floored(word, floor, NANOS_FLOOR, read_clock, decide)
}

/// [`update_at`] with the floor counted in `units`.
#[inline]
pub(crate) fn update_floored(
    word: &AtomicU64,
    floor: &AtomicU64,
    units: FloorUnits,
    read_clock: impl FnMut() -> u64,
    mut decide: impl FnMut(u64, u64) -> Step,
) -> Decision {
    // A retry keeps its clock read: a bucket judges a leaped state from the word itself
    // (`Step::after_leap`), so a leaper's retry that lands after a repair is repaired again.
    floored_loop(word, floor, units, false, read_clock, |state, now, _| {
        decide(state, now)
    })
}

/// [`update_floored`] whose `decide` also gets the leap: how far a leaping clock's floor was
/// ahead of the fresh read `now` (0 when the floor is in range). A state published with that
/// floor was booked on the leaping clock, and may be moved back by it.
///
/// Such a state is judged a leap only through the floor, so every retry after a lost
/// compare-exchange decides on a new clock read. Kept, a leaper's read would decide its retry at
/// the leapt time again, after a repairer's word had landed; its word lands without raising the
/// floor (already at the leapt value, or seen so by its Relaxed load), and the repairer's
/// compare-exchange then lowers that floor: a leaped booking under an in-range floor, which no
/// reader moves back, freezes the limiter for the whole leap (found by the loom model
/// `loom-tests/tests/time_smooth_leap.rs`).
#[inline]
pub(crate) fn update_floored_leap(
    word: &AtomicU64,
    floor: &AtomicU64,
    units: FloorUnits,
    read_clock: impl FnMut() -> u64,
    decide: impl FnMut(u64, u64, u64) -> Step,
) -> Decision {
    floored_loop(word, floor, units, true, read_clock, decide)
}

/// The loop of [`update_floored`] and [`update_floored_leap`]; `read_on_retry`: a retry after a
/// lost compare-exchange reads the clock again (fresh) instead of keeping its read.
#[inline]
fn floored_loop(
    word: &AtomicU64,
    floor: &AtomicU64,
    units: FloorUnits,
    read_on_retry: bool,
    mut read_clock: impl FnMut() -> u64,
    mut decide: impl FnMut(u64, u64, u64) -> Step,
) -> Decision {
    let mut clock_now = read_clock();
    // Acquire: a state word comes with the floor its writer raised before publishing it.
    let mut current = word.load(Ordering::Acquire);
    let mut fresh = false;
    loop {
        // Relaxed: ordered after the Acquire load (or failed CAS) that produced `current`, which
        // synchronizes with the Release CAS that followed the writer's floor raise.
        let floor_now = floor.load(Ordering::Relaxed);
        let (now, floor_leaped) = match floored(clock_now, floor_now, units) {
            Some(now) => (now, false),
            None if !fresh => {
                clock_now = read_clock();
                fresh = true;
                continue;
            }
            None => (clock_now, true),
        };
        let leap = if floor_leaped { floor_now - now } else { 0 };
        let step = decide(current, now, leap);
        if step.leap && !fresh {
            clock_now = read_clock();
            fresh = true;
            continue;
        }
        let Some(next) = step.next else {
            if step.leap {
                // A refusal by a state beyond the horizon under an in-range floor (the smooth
                // limiters' long booking): legitimate, or `current` is older than the floor
                // just loaded: a repair replaced it and lowered the floor in between. No
                // compare-exchange checks a refusal, so check that the word is still the one
                // decided on. Acquire fence: pairs with the Release of that floor lowering
                // (below), which read `floor_now`; the word load then sees the repair.
                fence(Ordering::Acquire);
                // Acquire: as the first load.
                let again = word.load(Ordering::Acquire);
                if again != current {
                    current = again;
                    fresh = false;
                    continue;
                }
            }
            return step.decision;
        };
        if next == current {
            return step.decision;
        }
        if !floor_leaped && now >= floor_now.saturating_add(units.grain) {
            // Relaxed: published to readers by the Release CAS below.
            floor.fetch_max(now, Ordering::Relaxed);
        }
        // AcqRel / Acquire: as in `update`.
        match word.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                if floor_leaped {
                    // A floor a leaping clock left more than the horizon ahead of this fresh read
                    // goes back to it, only once this thread's word (which put the leaped state
                    // back in range) has landed: until then every reader still sees the leaped
                    // floor and judges the leaped word as a leap too. A reader that sees the old
                    // floor with a repaired word only re-reads its clock (the repaired word is in
                    // range). If another thread moved the floor meanwhile (another repair put it
                    // back to its own read, or a writer raised it), the floor is raised to this
                    // read: this thread's word is published and decided at `now`, and a floor
                    // left at an earlier repairer's read would be more than a grain behind it
                    // (found by `loom-tests/tests/time_floor_repair.rs`). A higher value (a later
                    // writer's, or a new leap's) stands. Until this store lands, a reader that
                    // sees this word may still load the other repairer's floor: the bound of
                    // `update_at` holds once every repair's floor store has landed.
                    // Release (both): pairs with the Acquire fence of a refusal that loaded the
                    // leaped word before this repair and this floor after it (above). Relaxed
                    // failure load: only compared, `fetch_max` then reads the floor again.
                    // The `fetch_max`'s Release is pinned by no model, and a model asserting
                    // which calls are admitted cannot pin it (`time_floor_repair.rs`,
                    // `time_smooth_leap.rs` and `time_smooth_admit_repair.rs` pass with it
                    // Relaxed). The only acquire of the floor is the Acquire fence above, taken
                    // by a refusal by a word beyond the horizon under an in-range floor (the
                    // smooth limiters'; a bucket repairs such a word by compare-exchange). This
                    // `fetch_max` runs only when the floor changed since this thread loaded the
                    // leaped floor: a raise (then it writes that higher value, and a reader
                    // deciding at it finds a word this repair replaced within the horizon: no
                    // refusal takes the fence path), or another repair's lowering
                    // compare-exchange, a Release. Every store to the floor is a
                    // read-modify-write, so that lowering heads a release sequence holding this
                    // store: a refusal whose floor load reads this store or a later one
                    // synchronizes with that repair with the `fetch_max` Relaxed too, and its
                    // word reload returns that repair's word or a later one. The Release adds
                    // this thread's word. That changes an answer only for a refusal whose word is
                    // a leaped booking landed after the other repair's word (a second leap within
                    // a grain of the leaped floor, which raised nothing) and replaced by this
                    // thread: with Release its reload returns this thread's word and it decides
                    // again; with Relaxed the reload may return the leaped word, and it is
                    // refused for the leap at `max(its read, this store's value)`. With Release
                    // the same call is refused by the same word when its floor loads come just
                    // before this store (they read the other repair's value): the freeze of
                    // `time_smooth_leap.rs`
                    // `bursty_second_leaper_lands_between_a_repair_and_its_floor_lowering`
                    // (ignored). So both orderings admit and refuse the same calls; they can
                    // differ only in the instant such a refusal is decided at (its
                    // `retry_after`), by at most how far this thread's read is ahead of the
                    // refused call's, in a refusal that freeze already makes wrong by the whole
                    // leap. A model pinning the Release would assert that instant. The model
                    // tried (on `SmoothBursty`: the driver leaps, leaps again once the first
                    // repairer has read the clock after loading the leaped floor, then reads
                    // lagging; a second repairer is gated to load the second leaper's word before
                    // the first repair's lowering and to write after it) gave, at
                    // LOOM_MAX_PREEMPTIONS=2 (109 s), the same outcomes (each thread's answer,
                    // the reader's `retry_after`) with the `fetch_max` Relaxed as with Release:
                    // the reader refused for about the whole leap (10.9 or 11 s) in both. Kept
                    // Release (the same instructions as Relaxed on x86-64).
                    move_floor(floor, floor_now, now, Ordering::Release, Ordering::Relaxed);
                }
                return step.decision;
            }
            Err(actual) => {
                current = actual;
                // A read taken after the failed compare-exchange loaded `actual` is fresh.
                fresh = read_on_retry;
                if read_on_retry {
                    clock_now = read_clock();
                }
            }
        }
    }
}
