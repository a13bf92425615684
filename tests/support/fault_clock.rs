//! A [`Clock`] wrapper that makes a real clock behave like a loaded production machine's, for the
//! real-clock stress (`tests/time_stress.rs`):
//!
//! * **stall**: the reading is taken, then the thread yields or sleeps before returning it, exactly
//!   "preempted between the clock read and the compare-exchange";
//! * **lag**: the reading returned is `lag` older than the base clock's (saturating at 0): the
//!   same as a thread that read the clock `lag` ago and was preempted ever since, without waiting
//!   `lag` for real (so a stall longer than the 10 s horizon costs nothing). The read after a
//!   lagged one on the same thread is never lagged: a stalled thread's *next* read is fresh (two
//!   lagged reads in a row would be a clock running more than the horizon behind, which is
//!   outside the time model, not a stall). A lag **beyond the horizon** is injected only on the
//!   *first* read of a limiter call ([`begin_call`]); see "Which reads may lag" below;
//! * **leap**: once armed, the next reading is `leap` ahead of the base clock (a TSC glitch).
//!
//! The wrapper records, per thread, the largest lag it injected since the last
//! [`take_injected_lag`], so a checker knows how far before its own "before" stamp the reading the
//! limiter decided at can be.
//!
//! Randomness is a per-thread xorshift seeded from the thread's id: no dependency, no lock.
//!
//! # Which reads may lag
//! A lagged reading stands for a stall only if the thread could have taken it `lag` ago and done
//! nothing since. That holds for the first read of a call: nothing of the limiter was loaded
//! before it in that call, so to the limiter it is the same as a thread preempted right after
//! reading. A later read in the same call comes after the call loaded some state word (and
//! usually after a fresh read): a real clock read taken after that load is never older than a
//! clock value published in that word, up to the cross-core lag. Returning a value more than the
//! horizon (`MAX_CLOCK_LAG_NANOS`) older is a clock running more than the horizon behind the
//! other cores, which the time model excludes (DESIGN.md "Time is part of the protocol": past
//! the horizon a state ahead of a *fresh* read is a leaping clock's, and is folded back to it).
//! So such lags are injected only on a call's first read; later reads may still lag by less than
//! the horizon (a core whose clock trails), which the checker covers through
//! [`take_injected_lag`].
//!
//! Found by the `sharded` stress (1 run in ~50): `Sharded::try_acquire_on` reuses its first read
//! for every stripe it borrows from, and each stripe's `update_timed` re-reads the clock when
//! that read is beyond the horizon. With the first read lagged past the horizon, the home stripe
//! re-read (fresh), then a borrowed stripe re-read again, and that third read could be lagged
//! past the horizon too: the stripe's full window, "ahead" of that read by more than the horizon,
//! was folded back 10 s, and the next caller re-opened it (+250, one stripe's share). A real
//! clock cannot do that; a stall after the first read cannot either (every re-read is taken
//! after the stall).
#![allow(dead_code)] // each test binary uses its own part

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate::Clock;

/// A shared, type-erased base clock: the stress stamps admissions with the same clock the
/// limiter reads (without the injected faults).
#[derive(Clone)]
pub struct Shared(pub Arc<dyn Clock>);

impl Clock for Shared {
    fn now_nanos(&self) -> u64 {
        self.0.now_nanos()
    }
    fn sleep(&self, duration: Duration) {
        self.0.sleep(duration);
    }
}

/// How often and how badly a [`FaultClock`] misbehaves. `0` in a `*_one_in` field disables that
/// fault.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    /// One read in this many yields the thread after reading.
    pub yield_one_in: u64,
    /// One read in this many sleeps up to `max_sleep` after reading.
    pub sleep_one_in: u64,
    /// The longest post-read sleep.
    pub max_sleep: Duration,
    /// One read in this many returns a reading up to `max_short_lag_nanos` old, one in this many
    /// others a reading older than the 10 s horizon (`MAX_CLOCK_LAG_NANOS`) plus up to
    /// `max_short_lag_nanos`.
    pub lag_one_in: u64,
    /// See `lag_one_in`.
    pub max_short_lag_nanos: u64,
    /// Whether half the lags on a call's first read exceed the 10 s horizon (else all are
    /// short; later reads of a call always lag short, see the module doc).
    pub long_lags: bool,
}

impl Faults {
    /// No fault: the base clock as it is.
    pub const NONE: Faults = Faults {
        yield_one_in: 0,
        sleep_one_in: 0,
        max_sleep: Duration::ZERO,
        lag_one_in: 0,
        max_short_lag_nanos: 0,
        long_lags: false,
    };
}

thread_local! {
    static RNG: Cell<u64> = const { Cell::new(0) };
    static INJECTED_LAG: Cell<u64> = const { Cell::new(0) };
    /// This thread's last read was lagged.
    static LAGGED_LAST: Cell<bool> = const { Cell::new(false) };
    /// The next read is the first of a limiter call ([`begin_call`]): the only one that may lag
    /// beyond the horizon. A thread that never calls `begin_call` gets one such read.
    static FIRST_IN_CALL: Cell<bool> = const { Cell::new(true) };
}

/// A random `u64` from this thread's xorshift64*.
pub fn random() -> u64 {
    RNG.with(|cell| {
        let mut x = cell.get();
        if x == 0 {
            // Seed from the address of a thread-local and the thread id's hash: distinct per
            // thread, no clock involved.
            use std::hash::{BuildHasher, RandomState};
            x = RandomState::new().hash_one(std::thread::current().id()) | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        cell.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

/// A random number in `0..bound` (`bound > 0`).
pub fn below(bound: u64) -> u64 {
    random() % bound
}

/// The largest lag injected on this thread since the last call; resets it.
pub fn take_injected_lag() -> u64 {
    INJECTED_LAG.with(|cell| cell.replace(0))
}

/// Marks the start of a limiter call on this thread: resets the injected lag, and lets the next
/// read (only that one) lag beyond the horizon (see "Which reads may lag" in the module doc).
pub fn begin_call() {
    take_injected_lag();
    FIRST_IN_CALL.with(|cell| cell.set(true));
}

/// The base clock with [`Faults`] injected, and an optional one-shot leap.
#[derive(Clone)]
pub struct FaultClock {
    base: Shared,
    faults: Faults,
    leap: Arc<AtomicU64>,
}

impl FaultClock {
    pub fn new(base: Shared, faults: Faults) -> Self {
        FaultClock {
            base,
            faults,
            leap: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The next read (by any thread) returns the base reading plus `nanos`, once.
    pub fn arm_leap(&self, nanos: u64) {
        self.leap.store(nanos, Ordering::SeqCst);
    }

    fn one_in(n: u64) -> bool {
        n != 0 && below(n) == 0
    }
}

impl Clock for FaultClock {
    fn now_nanos(&self) -> u64 {
        let now = self.base.now_nanos();
        let first_in_call = FIRST_IN_CALL.with(|cell| cell.replace(false));
        if self.leap.load(Ordering::Relaxed) != 0 {
            let leap = self.leap.swap(0, Ordering::SeqCst);
            if leap != 0 {
                return now.saturating_add(leap);
            }
        }
        let f = self.faults;
        let after_lag = LAGGED_LAST.with(|cell| cell.replace(false));
        if !after_lag && Self::one_in(f.lag_one_in) {
            LAGGED_LAST.with(|cell| cell.set(true));
            let mut lag = 1 + below(f.max_short_lag_nanos.max(1));
            // Beyond the horizon only on a call's first read: a stall, not a clock that runs
            // more than the horizon behind (module doc, "Which reads may lag").
            if f.long_lags && first_in_call && below(2) == 0 {
                lag += floodgate::algorithms::MAX_CLOCK_LAG_NANOS;
            }
            let reading = now.saturating_sub(lag);
            INJECTED_LAG.with(|cell| cell.set(cell.get().max(now - reading)));
            return reading;
        }
        if Self::one_in(f.sleep_one_in) {
            let max = u64::try_from(f.max_sleep.as_nanos())
                .unwrap_or(u64::MAX)
                .max(1);
            std::thread::sleep(Duration::from_nanos(below(max)));
        } else if Self::one_in(f.yield_one_in) {
            std::thread::yield_now();
        }
        now
    }

    fn sleep(&self, duration: Duration) {
        self.base.sleep(duration);
    }
}

#[cfg(test)]
mod fault_clock_tests {
    use super::*;

    /// Only a call's first read lags beyond the horizon; later reads of the call lag at most the
    /// short lag. (With every eligible read lagged, a first read is long with probability 1/2:
    /// 2,000 calls without one would be a 2^-2000 event.)
    #[test]
    fn only_a_calls_first_read_lags_beyond_the_horizon() {
        let horizon = floodgate::algorithms::MAX_CLOCK_LAG_NANOS;
        let base = floodgate::ManualClock::new();
        base.set(2 * horizon);
        let short = 8_000_000;
        let clock = FaultClock::new(
            Shared(Arc::new(base)),
            Faults {
                lag_one_in: 1,
                max_short_lag_nanos: short,
                long_lags: true,
                ..Faults::NONE
            },
        );
        let mut long_first_reads = 0;
        for _ in 0..2_000 {
            begin_call();
            if 2 * horizon - clock.now_nanos() > horizon {
                long_first_reads += 1;
            }
            for _ in 0..4 {
                let lag = 2 * horizon - clock.now_nanos();
                assert!(lag <= short, "a later read of a call lagged {lag} ns");
            }
        }
        assert!(long_first_reads > 0);
    }
}
