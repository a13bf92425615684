//! The sliding window at the end of the `u64` timeline against a plain sequential model (issue
//! 17, fifth round's review): explicit-time calls whose cells reach the timeline's last cell,
//! for cell sizes that do and do not divide `2^64` (1 ns up to half the timeline) and windows
//! of 1 to many cells, so that the hint's one wrapping comparison, the short path's unchecked
//! start and the spent denial's `last_cell` bound all meet their edges. Every decision (and
//! peek) must be the model's, field for field. Run it with `--release` too: release builds do
//! not check overflow.

use std::time::Duration;

use floodgate::{Limiter, ManualClock, SlidingWindowLimiter};
use proptest::prelude::*;

#[path = "support/sliding_model.rs"]
mod sliding_model;
use sliding_model::Model;

#[derive(Clone, Debug)]
enum Op {
    /// Move on `quarters` quarter cells and `jitter` ns, then take `n`.
    Take { quarters: u64, jitter: u64, n: u32 },
    /// Move on, then peek `n`.
    Peek { quarters: u64, jitter: u64, n: u32 },
    /// Move on, then sweep as of that time.
    Sweep { quarters: u64, jitter: u64 },
    /// Change the limit.
    SetLimit(u32),
}

/// `(cells, cell_nanos)`: small cells (1 to 16 ns, most not dividing `2^64`), powers of two and
/// their neighbours, and huge ones up to the most the window allows.
fn geometry() -> impl Strategy<Value = (u32, u64)> {
    prop_oneof![
        (1u32..=6, 1u64..=16),
        (1u32..=48, 1u64..=4),
        (
            1u32..=6,
            prop::sample::select(vec![
                1_000,
                999_999_937,
                1 << 32,
                (1 << 32) + 1,
                (1 << 32) - 1,
                3 << 40,
            ])
        ),
        (1u32..=4).prop_flat_map(|cells| {
            let most = u64::MAX / u64::from(cells);
            (Just(cells), (most / 2)..=most)
        }),
    ]
}

fn ops(jitter_max: u64) -> impl Strategy<Value = Vec<Op>> {
    let quarters = prop_oneof![6 => 0u64..=4, 2 => 0u64..=16, 1 => 0u64..=200];
    let jitter = prop_oneof![3 => Just(0u64), 1 => 0..jitter_max];
    let op = prop_oneof![
        10 => (quarters.clone(), jitter.clone(), 1u32..=12)
            .prop_map(|(quarters, jitter, n)| Op::Take { quarters, jitter, n }),
        3 => (quarters.clone(), jitter.clone(), 1u32..=12)
            .prop_map(|(quarters, jitter, n)| Op::Peek { quarters, jitter, n }),
        2 => (quarters, jitter).prop_map(|(quarters, jitter)| Op::Sweep { quarters, jitter }),
        1 => (1u32..=12).prop_map(Op::SetLimit),
    ];
    prop::collection::vec(op, 1..120)
}

/// Runs `ops` from `start` (explicit times, saturating at `u64::MAX`) on a ring and the model.
fn ring_matches_model(
    (cells, cell_nanos): (u32, u64),
    future: u32,
    limit: u32,
    start: u64,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let window = Duration::from_nanos(cell_nanos * u64::from(cells));
    let ring = SlidingWindowLimiter::with_clock(limit, window, cells, ManualClock::new())
        .unwrap()
        .with_future_cells(future)
        .unwrap();
    let mut model = Model::new(cells, cell_nanos, u64::from(limit));
    let mut now = start;
    let mut step = |quarters: u64, jitter: u64| {
        let by = u128::from(quarters) * u128::from(cell_nanos) / 4 + u128::from(jitter);
        now = u64::try_from(u128::from(now) + by).unwrap_or(u64::MAX);
        now
    };
    for op in ops {
        match op {
            Op::Take {
                quarters,
                jitter,
                n,
            }
            | Op::Peek {
                quarters,
                jitter,
                n,
            } => {
                let now = step(quarters, jitter);
                let take = matches!(op, Op::Take { .. });
                let got = if take {
                    ring.try_acquire_at(n, now)
                } else {
                    ring.peek_at(n, now)
                };
                if u64::from(n) > model.limit {
                    prop_assert!(got.is_err(), "{:?} at {}: {:?}", op, now, got);
                    continue;
                }
                let got = got.unwrap();
                let want = model.decide(now, u64::from(n), take);
                prop_assert_eq!(got, want, "{:?} at {} (cell {})", op, now, now / cell_nanos);
            }
            Op::Sweep { quarters, jitter } => {
                let now = step(quarters, jitter);
                ring.sweep_at(now);
            }
            Op::SetLimit(l) => {
                ring.set_limit(l).unwrap();
                model.limit = u64::from(l);
            }
        }
    }
    Ok(())
}

/// A start `back` whole cells and `off` ns before the start of the timeline's last cell
/// (`u64::MAX / cell_nanos`), so the walk reaches it and the cells around it.
fn near_the_end(cell_nanos: u64, back: u64, off: u64) -> u64 {
    let last_start = (u64::MAX / cell_nanos) * cell_nanos;
    last_start
        .saturating_sub(back.saturating_mul(cell_nanos))
        .saturating_sub(off % cell_nanos)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    /// From a few windows before the timeline's last cell up to `u64::MAX` (the clock held
    /// there once it gets there).
    #[test]
    fn ring_matches_the_model_at_the_end_of_the_timeline(
        (cells, cell_nanos) in geometry(),
        future in 1u32..=4,
        limit in 1u32..=12,
        back in 0u64..=12,
        off in any::<u64>(),
        ops in (1u64..=16).prop_flat_map(ops),
    ) {
        let start = near_the_end(cell_nanos, back * u64::from(cells) / 2, off);
        ring_matches_model((cells, cell_nanos), future, limit, start, ops)?;
    }

    /// The same near the timeline's start (0 ns on), where a hint of the last cell would have
    /// wrapped in.
    #[test]
    fn ring_matches_the_model_at_the_start_of_the_timeline(
        (cells, cell_nanos) in geometry(),
        future in 1u32..=4,
        limit in 1u32..=12,
        start in prop_oneof![Just(0u64), 0u64..64],
        ops in (1u64..=16).prop_flat_map(ops),
    ) {
        ring_matches_model((cells, cell_nanos), future, limit, start, ops)?;
    }
}
