//! `SmoothBursty::admit`'s refusal by a booking beyond the lag horizon, under the time model
//! (`floodgate_loom_tests::ModelClock`): the refusal that skips the confirming clock read.
//!
//! `admit` reads the clock before it loads the word. A refusal by a booking beyond the horizon
//! is confirmed by a second read (a booking that landed after the first read must not refuse
//! it), except that a `bool` answer skips the second read when its time is at least the floor's
//! grain (16 µs) past the floor loaded after the word: the booking's writer raised the floor to
//! within a grain of its own time before publishing, so the booking was decided before the read.
//!
//! Two callers on a limiter at 0.05 per second (one permit books about 19 s, beyond the 10 s
//! horizon; nothing is paid during the model). Each moves real time on by [`STEP`] (more than a
//! grain), then calls `admit(1)`, recording its clock reads:
//! * [`bursty_bool_refusal_interleaved`]: loom interleaves the two freely. A booking, then the
//!   other caller's step and read: the skip is taken.
//! * [`bursty_bool_refusal_stalled_between_read_and_load`]: the reader's first clock read waits
//!   (a gate) until the other caller has moved time on and booked, so its word load always
//!   sees the booking; where the reader's step and read came first, the booking was decided
//!   [`STEP`] after its read and must be confirmed by a second read. (Loom 0.7 did not reach this order on its own:
//!   its exploration misses interleavings after a redundant load, tokio-rs/loom#166 and #392.)
//!
//! Asserted: exactly one caller is admitted, and the refusal is the answer of a sequential
//! history at one of the refused caller's reads: the booking was decided (at the admitted
//! caller's read) at most one grain after the refused caller's last read (the grain is the
//! staleness the floor grants, as for a lagging reader).
//!
//! Checked when written: a panic in the skip branch fails the first model; weakening the skip's
//! condition to `now >= floor_now` (no grain) fails the second (refused at its first read by a
//! booking decided 40 µs after it).
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test time_smooth_booked_before_read`
#![cfg(floodgate_loom)]

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::Duration;

use floodgate::clock::FLOOR_GRAIN_NANOS;
use floodgate::{Clock, Limiter, SmoothBursty};
use floodgate_loom_tests::{ModelClock, model};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::thread;

/// Real time when the limiter is created: 1 s, whole microseconds.
const START: u64 = 1_000_000_000;
/// The callers' first time: 1 s after creation (the first booking raises the floor to it).
const IDLE: u64 = 1_000_000_000;
/// Each caller's step before its call: more than a grain, in whole microseconds.
const STEP: u64 = 40_000;
/// The floor's grain in the smooth limiters' whole microseconds (16 µs), in ns.
const GRAIN: u64 = FLOOR_GRAIN_NANOS / 1_000 * 1_000;

loom::thread_local! {
    /// This model thread's last clock read (the clock only moves forward: its latest).
    static LAST_READ: Cell<Option<u64>> = Cell::new(None);
    /// A gate this model thread's next read waits on after reading, once.
    static STALL: RefCell<Option<Arc<AtomicBool>>> = RefCell::new(None);
}

/// A [`ModelClock`] that records each thread's last read, and stalls a read on a gate.
#[derive(Clone, Debug)]
struct RecordingClock(ModelClock);

impl Clock for RecordingClock {
    fn now_nanos(&self) -> u64 {
        let read = self.0.now_nanos();
        LAST_READ.with(|r| r.set(Some(read)));
        if let Some(gate) = STALL.with(|s| s.borrow_mut().take()) {
            // SeqCst: the model's gate; the simplest order with the booking it waits for.
            while !gate.load(Ordering::SeqCst) {
                thread::yield_now();
            }
        }
        read
    }

    fn sleep(&self, duration: Duration) {
        self.0.sleep(duration);
    }
}

/// A caller: moves real time on by [`STEP`], then `admit(1)`: the answer and the caller's
/// last read during it.
fn admit(limiter: &dyn Limiter, clock: &ModelClock) -> (bool, u64) {
    clock.advance(STEP);
    LAST_READ.with(|r| r.set(None));
    let allowed = limiter.admit(1).unwrap();
    let read = LAST_READ.with(Cell::get).expect("admit reads the clock");
    (allowed, read)
}

/// Two callers race; with `stall`, the main thread's first read waits until the other has
/// booked.
fn two_callers(stall: bool) {
    model(None, move || {
        let clock = ModelClock::starting_at(START);
        let limiter: Arc<dyn Limiter> =
            Arc::new(SmoothBursty::create_with_clock(0.05, RecordingClock(clock.clone())).unwrap());
        clock.advance(IDLE);
        let booked = Arc::new(AtomicBool::new(false));
        let other = {
            let (limiter, clock, booked) = (limiter.clone(), clock.clone(), booked.clone());
            thread::spawn(move || {
                let answer = admit(&*limiter, &clock);
                // SeqCst: the model's gate (see `RecordingClock`).
                booked.store(true, Ordering::SeqCst);
                answer
            })
        };
        if stall {
            STALL.with(|s| *s.borrow_mut() = Some(booked));
        }
        let mine = admit(&*limiter, &clock);
        let other = other.join().unwrap();
        let (admitted, refused) = match (mine.0, other.0) {
            (true, false) => (mine.1, other.1),
            (false, true) => (other.1, mine.1),
            answers => panic!("one permit books 19 s: exactly one admitted, got {answers:?}"),
        };
        if stall {
            assert!(
                !mine.0,
                "the stalled reader loads the other caller's booking"
            );
        }
        assert!(
            admitted <= refused + GRAIN,
            "refused at its read {refused} ns by a booking decided at {admitted} ns, more than a \
             grain ({GRAIN} ns) later: a sequential history at the read admits it"
        );
    });
}

#[test]
fn bursty_bool_refusal_interleaved() {
    two_callers(false);
}

#[test]
fn bursty_bool_refusal_stalled_between_read_and_load() {
    two_callers(true);
}
