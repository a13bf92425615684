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
//!   outside the time model, not a stall);
//! * **leap**: once armed, the next reading is `leap` ahead of the base clock (a TSC glitch).
//!
//! The wrapper records, per thread, the largest lag it injected since the last
//! [`take_injected_lag`], so a checker knows how far before its own "before" stamp the reading the
//! limiter decided at can be.
//!
//! Randomness is a per-thread xorshift seeded from the thread's id: no dependency, no lock.
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
    /// Whether half the lags exceed the 10 s horizon (else all are short).
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
            if f.long_lags && below(2) == 0 {
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
