//! Instruction counts of the sliding window's denial after the limit was spent at the very end of
//! the previous cell (`examples/instructions`'s `spent` workload), at a chosen place of the
//! current cell in its block of marks, on a `ManualClock` (so a run is the same whenever it
//! runs: on the quanta clock the place, and with it the search, moves with the wall clock):
//!
//! ```text
//! cargo build --release --example instructions_spent
//! valgrind --tool=callgrind --toggle-collect='*measured_spent*' --callgrind-out-file=/tmp/cg.out \
//!     target/release/examples/instructions_spent 60 try 17 10000
//! ```
//! Arguments: CELLS, `try` (`try_acquire(1)`, using `retry_after` as a 429 does), `peek`
//! (`peek(1)`), `peek-rewound` or `peek-quiet` (below), the current cell's place in its block
//! (0 to CELLS − 1, or `all`: every place in turn, CALLS each), CALLS. Ir / calls = instructions per call (with `all`, the mean over the
//! places). One-minute cells, limit 1, window CELLS minutes.
//!
//! `cross` (`try_acquire(1)`, the clock a cell later before each call: every call is an
//! admitted crossing into a new cell, limit 1,000,000, one permit in every cell; PLACE is
//! ignored but must be valid) measures what a crossing costs, the clock's advance included.
//!
//! `peek-rewound` (`peek(1)` after a leap and a rewind, [`rewound`]) and `peek-quiet` (the same
//! history without them) measure an admitted peek two cells after the last crossing, the
//! limit 1,000,000 and one permit in every earlier cell: the leap is two windows behind, so
//! no cell it could have left counts in is in the peek's window.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Duration;

use floodgate::{AcquireError, Decision, Limiter, ManualClock, SlidingWindowLimiter};

const CELL: u64 = 60_000_000_000;

/// `try_acquire(1)` `calls` times, using what a 429 needs of the denial.
#[inline(never)]
fn measured_spent_try(ring: &SlidingWindowLimiter<ManualClock>, calls: u64) -> u64 {
    (0..calls)
        .map(|_| used(ring.try_acquire(black_box(1))))
        .sum()
}

/// `peek(1)` `calls` times, using `retry_after`.
#[inline(never)]
fn measured_spent_peek(ring: &SlidingWindowLimiter<ManualClock>, calls: u64) -> u64 {
    (0..calls).map(|_| used(ring.peek(black_box(1)))).sum()
}

/// `try_acquire(1)` `calls` times, the clock one cell later before each: every call crosses
/// into a new cell (the `cross` row: a crossing's cost, the clock's advance included).
#[inline(never)]
fn measured_spent_cross(
    ring: &SlidingWindowLimiter<ManualClock>,
    clock: &ManualClock,
    calls: u64,
) -> u64 {
    (0..calls)
        .map(|_| {
            clock.advance_nanos(CELL);
            used(ring.try_acquire(black_box(1)))
        })
        .sum()
}

/// 1 for an admission; a denial's `retry_after` is used (what a 429 needs), 0.
#[inline(always)]
fn used(answer: Result<Decision, AcquireError>) -> u64 {
    match answer {
        Ok(d) if d.is_allowed() => 1,
        Ok(d) => {
            black_box(d.retry_after());
            0
        }
        Err(_) => 0,
    }
}

/// A ring of `cells` one-minute cells, limit 1, whose current cell is at `place` in its block
/// (the third block, so the window spans two blocks), the permit taken one nanosecond before
/// that cell starts, and the crossing into it done (by one denied call).
fn spent(cells: u64, place: u64) -> Option<SlidingWindowLimiter<ManualClock>> {
    let cell = 2 * cells + place;
    let clock = ManualClock::starting_at((cell * CELL).checked_sub(1)?);
    let window = Duration::from_secs(60 * cells);
    let cells = u32::try_from(cells).ok()?;
    let ring = SlidingWindowLimiter::with_clock(1, window, cells, clock.clone()).ok()?;
    ring.try_acquire(1).ok()?.is_allowed().then_some(())?;
    clock.advance_nanos(1 + CELL / 2);
    (!ring.try_acquire(1).ok()?.is_allowed()).then_some(ring)
}

/// A ring of `cells` one-minute cells, limit 1,000,000, where one call took a permit in every
/// cell up to the last crossing, two cells before the clock's, whose place in its block is
/// `place`. With `leap`, a call one window past the horizon took one first, and the next call
/// (a window before that) rewound the ring: the last crossing is two windows past the leap.
fn rewound(cells: u64, place: u64, leap: bool) -> Option<SlidingWindowLimiter<ManualClock>> {
    let clock = ManualClock::starting_at(CELL);
    let window = Duration::from_secs(60 * cells);
    let ring = SlidingWindowLimiter::with_clock(
        1_000_000,
        window,
        u32::try_from(cells).ok()?,
        clock.clone(),
    )
    .ok()?;
    let take = |cell: u64| {
        clock.set(cell * CELL);
        ring.try_acquire(1).ok().filter(|d| d.is_allowed())
    };
    take(1)?;
    // The horizon is the window's cells (a minute is longer than the clock-lag bound).
    let leaped = 2 + 2 * cells;
    if leap {
        take(leaped)?;
    }
    // From cell 2: with `leap`, this call rewinds the ring.
    let last = (leaped + 2 * cells).next_multiple_of(cells) + place;
    for cell in 2..=last {
        take(cell)?;
    }
    clock.set((last + 2) * CELL + CELL / 2);
    Some(ring)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let parsed = match args.as_slice() {
        [cells, call, place, calls] => cells
            .parse::<u64>()
            .ok()
            .filter(|&c| c >= 2)
            .zip(calls.parse::<u64>().ok())
            .map(|(cells, calls)| (cells, call.as_str(), place.as_str(), calls)),
        _ => None,
    };
    let Some((cells, call, place, calls)) = parsed else {
        eprintln!(
            "usage: instructions_spent CELLS try|peek|peek-rewound|peek-quiet|cross PLACE|all CALLS"
        );
        return ExitCode::FAILURE;
    };
    let places: Vec<u64> = match place {
        "all" => (0..cells).collect(),
        one => match one.parse() {
            Ok(p) if p < cells => vec![p],
            _ => {
                eprintln!("PLACE: 0 to {} or `all`", cells - 1);
                return ExitCode::FAILURE;
            }
        },
    };
    let mut admitted = 0;
    if call == "cross" {
        let clock = ManualClock::starting_at(CELL);
        let Ok(ring) = SlidingWindowLimiter::with_clock(
            1_000_000,
            Duration::from_secs(60 * cells),
            u32::try_from(cells).unwrap_or(u32::MAX),
            clock.clone(),
        ) else {
            eprintln!("could not set up {cells} cells");
            return ExitCode::FAILURE;
        };
        admitted = measured_spent_cross(&ring, &clock, calls);
        println!("admitted {admitted}");
        return ExitCode::SUCCESS;
    }
    for place in places {
        let ring = match call {
            "peek-rewound" => rewound(cells, place, true),
            "peek-quiet" => rewound(cells, place, false),
            _ => spent(cells, place),
        };
        let Some(ring) = ring else {
            eprintln!("could not set up {cells} cells at place {place}");
            return ExitCode::FAILURE;
        };
        admitted += match call {
            "try" => measured_spent_try(&ring, calls),
            "peek" | "peek-rewound" | "peek-quiet" => measured_spent_peek(&ring, calls),
            _ => {
                eprintln!("call: try, peek, peek-rewound or peek-quiet");
                return ExitCode::FAILURE;
            }
        };
    }
    println!("admitted {admitted}");
    ExitCode::SUCCESS
}
