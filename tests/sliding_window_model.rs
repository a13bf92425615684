//! Property tests: the ring sliding window, the packed sliding window and the rolling counter
//! against a plain sequential model (a map from cell index to count), over random schedules with
//! sweeps interleaved at random.

use std::time::Duration;

use floodgate::stats::RollingCounter;
use floodgate::{
    AtomicLimiter, Clock, Limiter, ManualClock, PackedSlidingWindow, SlidingWindowLimiter,
};
use proptest::prelude::*;

#[path = "support/sliding_model.rs"]
mod sliding_model;
use sliding_model::Model;

#[derive(Clone, Debug)]
enum Op {
    /// Advance the clock by this many nanoseconds, then take `n`.
    Take { dt: u64, n: u32 },
    /// Advance, then peek `n`.
    Peek { dt: u64, n: u32 },
    /// Advance, then sweep (the ring only; the model does not change).
    Sweep { dt: u64 },
    /// Advance, then sweep as of a time this far behind the clock.
    LateSweep { dt: u64, behind: u64 },
    /// Change the limit.
    SetLimit(u32),
}

fn ops(cell_nanos: u64, limit: u32) -> impl Strategy<Value = Vec<Op>> {
    let dt = prop_oneof![
        8 => 0..cell_nanos,
        3 => 0..cell_nanos * 4,
        1 => 0..cell_nanos * 40,
    ];
    let n = 1..=limit;
    let op = prop_oneof![
        10 => (dt.clone(), n.clone()).prop_map(|(dt, n)| Op::Take { dt, n }),
        2 => (dt.clone(), n).prop_map(|(dt, n)| Op::Peek { dt, n }),
        2 => dt.clone().prop_map(|dt| Op::Sweep { dt }),
        1 => (dt, 0..cell_nanos * 100).prop_map(|(dt, behind)| Op::LateSweep { dt, behind }),
        1 => (1..=limit).prop_map(Op::SetLimit),
    ];
    prop::collection::vec(op, 1..150)
}

fn config() -> impl Strategy<Value = (u32, u32, u64, u32, u64)> {
    // (cells, future, cell_nanos, limit, start)
    (1u32..=6, 1u32..=4, 1u64..=50, 1u32..=12, 0u64..1_000_000)
}

/// Runs `ops` on a ring and the model side by side: every decision (and peek) must be the
/// model's.
fn ring_matches_model(
    cells: u32,
    future: u32,
    cell_nanos: u64,
    limit: u32,
    start: u64,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(start);
    let window = Duration::from_nanos(cell_nanos * u64::from(cells));
    let ring = SlidingWindowLimiter::with_clock(limit, window, cells, clock.clone())
        .unwrap()
        .with_future_cells(future)
        .unwrap();
    let mut model = Model::new(cells, cell_nanos, u64::from(limit));
    for op in ops {
        match op {
            Op::Take { dt, n } | Op::Peek { dt, n } => {
                clock.advance_nanos(dt);
                let now = clock.now_nanos();
                let take = matches!(op, Op::Take { .. });
                if u64::from(n) > model.limit {
                    prop_assert!(ring.try_acquire(n).is_err());
                    continue;
                }
                let got = if take {
                    ring.try_acquire(n)
                } else {
                    ring.peek(n)
                }
                .unwrap();
                prop_assert_eq!(
                    got,
                    model.decide(now, u64::from(n), take),
                    "{:?} at {}",
                    op,
                    now
                );
            }
            Op::Sweep { dt } => {
                clock.advance_nanos(dt);
                ring.sweep();
            }
            Op::LateSweep { dt, behind } => {
                clock.advance_nanos(dt);
                ring.sweep_at(clock.now_nanos().saturating_sub(behind));
            }
            Op::SetLimit(l) => {
                ring.set_limit(l).unwrap();
                model.limit = u64::from(l);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn ring_matches_the_model((cells, future, cell_nanos, limit, start) in config(), ops in ops(50, 12)) {
        ring_matches_model(cells, future, cell_nanos, limit, start, ops)?;
    }

    /// Windows of many cells, so a window spans two blocks of the marks (issue 17: a crossing
    /// within a block reads only its new cells, a denial or a peek searches the marks), with
    /// gaps of up to ~160 cells.
    #[test]
    fn ring_of_many_cells_matches_the_model(
        cells in 7u32..=48,
        future in 1u32..=12,
        cell_nanos in 1u64..=4,
        limit in 1u32..=12,
        start in 0u64..1_000_000,
        ops in ops(4, 12),
    ) {
        ring_matches_model(cells, future, cell_nanos, limit, start, ops)?;
    }

    #[test]
    fn packed_matches_the_model(cells in 2u32..=8, cell_nanos in 1u64..=50, start in 0u64..1_000_000, ops in ops(50, 15)) {
        let clock = ManualClock::starting_at(start);
        let window = Duration::from_nanos(cell_nanos * u64::from(cells));
        let limit = 15; // the largest limit every cell count supports
        let packed = AtomicLimiter::with_clock(PackedSlidingWindow::new(limit, window, cells).unwrap(), clock.clone());
        let mut model = Model::new(cells, cell_nanos, u64::from(limit));
        for op in ops {
            match op {
                Op::Take { dt, n } | Op::Peek { dt, n } => {
                    clock.advance_nanos(dt);
                    let now = clock.now_nanos();
                    if u64::from(n) > model.limit {
                        prop_assert!(packed.try_acquire(n).is_err());
                        continue;
                    }
                    let take = matches!(op, Op::Take { .. });
                    let got = if take { packed.try_acquire(n) } else { packed.peek(n) }.unwrap();
                    prop_assert_eq!(got, model.decide(now, u64::from(n), take), "{:?} at {}", op, now);
                }
                Op::Sweep { dt } | Op::LateSweep { dt, .. } => clock.advance_nanos(dt),
                Op::SetLimit(l) => {
                    packed.set_limit(l).unwrap();
                    model.limit = u64::from(l);
                }
            }
        }
    }

    #[test]
    fn counter_matches_the_model((cells, future, cell_nanos, _, start) in config(), ops in ops(50, 40)) {
        let clock = ManualClock::starting_at(start);
        let window = Duration::from_nanos(cell_nanos * u64::from(cells));
        let counter = RollingCounter::with_clock(window, cells, 2, clock.clone())
            .unwrap()
            .with_future_cells(future)
            .unwrap();
        let mut models: Vec<Model> = (0..2)
            .map(|_| Model::new(cells, cell_nanos, u64::MAX))
            .collect();
        for op in ops {
            match op {
                Op::Take { dt, n } | Op::Peek { dt, n } => {
                    clock.advance_nanos(dt);
                    let series = (n % 2) as usize;
                    counter.add(series, n).unwrap();
                    *models[series].counts.entry(clock.now_nanos() / cell_nanos).or_default() += u64::from(n);
                }
                Op::Sweep { dt } => {
                    clock.advance_nanos(dt);
                    counter.sweep();
                }
                Op::LateSweep { dt, behind } => {
                    clock.advance_nanos(dt);
                    counter.sweep_at(clock.now_nanos().saturating_sub(behind));
                }
                Op::SetLimit(_) => {}
            }
            let cell = clock.now_nanos() / cell_nanos;
            for (series, model) in models.iter().enumerate() {
                prop_assert_eq!(counter.sum(series).unwrap(), model.used(cell));
            }
        }
    }
}
