//! What a denial, a peek and a crossing cost, counted in slot words visited (cells and marks
//! read or written through the protocol, [`VISITS`](super::VISITS)): a structural count, not a
//! timing.

use std::time::Duration;

use super::marks::Closed;
use super::{SlidingWindowLimiter, VISITS, named_sum, open_count, pack_cell, unpack_cell};
use crate::clock::ManualClock;
use crate::decision::Decision;

/// 1 µs cells.
const CELL: u64 = 1_000;

/// 4 future cells (so 60,000 cells fit the ring's 65,536 slots).
fn ring(limit: u32, cells: u32) -> SlidingWindowLimiter<ManualClock> {
    let window = Duration::from_nanos(CELL * u64::from(cells));
    let config = super::SlidingWindow::with_parts(limit, window, cells, 4).unwrap();
    SlidingWindowLimiter::from_config(&config, ManualClock::new())
}

/// Slot words `f` visits on this thread, and its result.
fn visits<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = VISITS.with(std::cell::Cell::get);
    let out = f();
    (VISITS.with(std::cell::Cell::get) - before, out)
}

/// `⌈log2 cells⌉`.
fn log2(cells: u32) -> u64 {
    u64::from(cells.next_power_of_two().trailing_zeros())
}

/// The attack of issue 17: the whole limit taken at the very end of cell 5, then denials (and
/// peeks) in every later cell of its window. Before the marks each one read every closed cell
/// (116 µs at 50,000 cells); now one binary search over the marks, whatever the cells.
#[test]
fn a_denial_and_a_peek_read_o_log_cells_slot_words() {
    for cells in [60u32, 6_000, 60_000] {
        let limit = 10;
        let w = ring(limit, cells);
        let used = 5;
        assert!(
            w.try_acquire_at(limit, (used + 1) * CELL - 1)
                .unwrap()
                .is_allowed()
        );
        let last = used + u64::from(cells) - 1;
        let mut denials = [used + 1, used + 2, used + u64::from(cells) / 2, last];
        denials.sort_unstable();
        for cell in denials {
            let now = cell * CELL + 7;
            // The cell's retry and reset: when cell `used` leaves the window.
            let leaves = (used + u64::from(cells)) * CELL - now;
            let want = Decision::deny(u64::from(limit), 0, leaves, leaves);
            // The first call crosses into the cell (O(cells) once per block at most).
            assert_eq!(
                w.try_acquire_at(1, now).unwrap(),
                want,
                "{cells} cells, cell {cell}"
            );
            let (read, d) = visits(|| w.try_acquire_at(1, now).unwrap());
            assert_eq!(d, want);
            // Two levels, then one binary search: the window is short of all it holds, so the
            // cell by which it frees enough is its newest used cell (the retry's search finds
            // the reset's).
            let bound = 2 + log2(cells);
            assert!(
                read <= bound,
                "{cells} cells: a denial read {read} > {bound}"
            );
            let (read, d) = visits(|| w.peek_at(1, now).unwrap());
            assert_eq!(d, want);
            assert!(read <= bound + 1, "{cells} cells: a peek read {read}");
            // A peek some cells past the newest crossing reads that crossing's marks.
            if cell + 3 <= last {
                let later = now + 3 * CELL;
                let want =
                    Decision::deny(u64::from(limit), 0, leaves - 3 * CELL, leaves - 3 * CELL);
                let (read, d) = visits(|| w.peek_at(1, later).unwrap());
                assert_eq!(d, want, "{cells} cells, peek at cell {}", cell + 3);
                assert!(read <= bound + 4, "{cells} cells: a later peek read {read}");
            }
        }
    }
}

/// Denials whose window holds several used cells find the right ones: the retry cell is the
/// oldest by which enough has been taken, the reset cell the newest used one.
#[test]
fn the_searches_find_the_oldest_sufficient_and_the_newest_used_cell() {
    let cells = 1_000u32;
    let w = ring(10, cells);
    // 3 at cell 100, 4 at cell 400 (block 0).
    for (cell, n) in [(100u64, 3u32), (400, 4)] {
        assert!(w.try_acquire_at(n, cell * CELL).unwrap().is_allowed());
    }
    let now = 1_050 * CELL;
    let at = |cell: u64| cell * CELL - now;
    // Cell 1_050, window [51, 1_050]: 3 + 4 taken; 4 more need 1 freed (cell 100 leaves).
    // (Crossing first, then a denial that only reads marks.)
    let _ = w.try_acquire_at(4, now);
    let (read, d) = visits(|| w.try_acquire_at(4, now).unwrap());
    assert_eq!(d, Decision::deny(10, 3, at(1_100), at(1_400)));
    assert!(read <= 2 + 2 * log2(cells), "{read}");
    // 7 more need all 7 freed: cell 400 leaves.
    assert_eq!(
        w.try_acquire_at(7, now).unwrap(),
        Decision::deny(10, 3, at(1_400), at(1_400))
    );
    // 3 at cell 1_200 (block 1). Cell 1_300, window [301, 1_300]: 4 (cell 400, the older
    // block) + 3 (cell 1_200); 5 needs 2 freed, and the newest used cell is 1_200, in the newer
    // block.
    assert!(w.try_acquire_at(3, 1_200 * CELL).unwrap().is_allowed());
    let now = 1_300 * CELL;
    let at = |cell: u64| cell * CELL - now;
    let _ = w.try_acquire_at(5, now);
    let (read, d) = visits(|| w.try_acquire_at(5, now).unwrap());
    assert_eq!(d, Decision::deny(10, 3, at(1_400), at(2_200)));
    assert!(read <= 2 + 2 * log2(cells), "{read}");
}

/// A crossing into the next cell of the same block reads and writes O(1) slot words; the
/// first crossing into a block walks its window once.
#[test]
fn a_crossing_within_a_block_visits_o_1_slot_words() {
    for cells in [60u32, 6_000] {
        let w = ring(1_000, cells);
        let block = u64::from(cells);
        // Into the block, then one cell on: the first walks, the second does not.
        let (first, _) = visits(|| w.try_acquire_at(1, (block + 1) * CELL).unwrap());
        assert!(
            first >= block - 2,
            "{cells} cells: the block's first crossing read {first}"
        );
        for cell in block + 2..block + 10 {
            let (read, d) = visits(|| w.try_acquire_at(1, cell * CELL).unwrap());
            assert!(d.is_allowed());
            // Seal and mark the previous cell, read two marks, stamp this cell and one future.
            assert!(
                read <= 6,
                "{cells} cells: a crossing in a block read {read}"
            );
        }
        // Skipping cells in a block only walks the skipped ones: from cell `block + 9` to
        // `block + 20`, 11 cells sealed and marked, 2 marks read, 5 cells stamped.
        let (read, _) = visits(|| w.try_acquire_at(1, (block + 20) * CELL).unwrap());
        assert!(
            read <= 2 * 11 + 2 + 5,
            "{cells} cells: a skip of 11 cells read {read}"
        );
    }
}

/// A denial whose crossing's marks changed under it (here: the ring moved into the next block
/// after the decision, turning the block's prefix marks into suffix marks) notices, and the
/// cells read one by one give the same answer.
#[test]
fn a_reader_whose_marks_changed_notices() {
    let cells = 100u32;
    let w = ring(10, cells);
    assert!(w.try_acquire_at(10, 150 * CELL).unwrap().is_allowed());
    let now = 160 * CELL;
    let want = w.try_acquire_at(1, now).unwrap();
    assert_eq!(want, Decision::deny(10, 0, 90 * CELL, 90 * CELL));
    let closed = Closed::of_crossing(160, w.geometry.window_start(160), 10);
    assert_eq!(w.denial(160, now, closed, 0, 1, 10), Some(want));
    // The crossing into cell 160 (block 1) published its window; a caller in cell 205 (block 2)
    // rewrites block 1's marks as suffix marks.
    assert!(!w.try_acquire_at(1, 205 * CELL).unwrap().is_allowed());
    assert_eq!(
        w.denial(160, now, closed, 0, 1, 10),
        None,
        "stale marks were used"
    );
    let (read, d) = visits(|| w.denial_by_scan(160, now, 10, 0, 1, 10));
    assert_eq!(d, want);
    assert!(read >= 90, "{read}");
}

/// Whether cell `hint` of `cell_nanos` ends within the `u64` timeline: what a crossing stores
/// as a hint ([`advance`](SlidingWindowLimiter::advance)).
fn hint_in_timeline(hint: u64, cell_nanos: u64) -> bool {
    hint.checked_add(1)
        .and_then(|next| next.checked_mul(cell_nanos))
        .is_some()
}

/// `locate`'s one wrapping comparison is exact for every hint a crossing can store: near the
/// timeline's two ends, cells of every size from 1 ns that does not divide `2^64` (so the last
/// cell ends past `u64::MAX`) or does, each `now` within a few cells of either end, every hint
/// within a few cells of `now`'s and of the timeline's last hintable cell.
#[test]
fn a_hint_near_the_ends_of_the_timeline_is_used_only_where_it_is_exact() {
    let mut checked = 0u64;
    for cell_nanos in [1u64, 2, 3, 7, 10, 1_000, 1 << 20, 999_999_937] {
        let config =
            super::SlidingWindow::with_parts(1, Duration::from_nanos(cell_nanos * 4), 4, 2)
                .unwrap();
        let w = SlidingWindowLimiter::from_config(&config, ManualClock::new());
        let g = w.geometry;
        let last = u64::MAX / cell_nanos;
        let nows = (0..4 * cell_nanos.min(8))
            .chain((0..4 * cell_nanos.min(8)).map(|back| u64::MAX - back))
            .chain([cell_nanos - 1, cell_nanos, u64::MAX - cell_nanos]);
        for now in nows {
            let cell = g.cell_of(now);
            let want = (cell, g.place(cell).0, g.place(cell).1);
            let hints = (0..6).flat_map(|d| {
                [
                    cell.saturating_sub(d),
                    cell.saturating_add(d),
                    last.saturating_sub(d),
                ]
            });
            for hint in hints.filter(|&hint| hint_in_timeline(hint, cell_nanos)) {
                assert_eq!(
                    w.locate(hint, now),
                    want,
                    "cell {cell_nanos} ns, now {now}, hint {hint}"
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 1_000, "{checked} cases");
}

/// A crossing into the timeline's last cell (which ends past `u64::MAX` unless the cell size
/// divides `2^64`) leaves no hint of it: with 10 ns cells its start is `u64::MAX − 5`, and a
/// call at 0 to 3 ns would find `now − start`, wrapping, below 10 and take itself for a call in
/// that cell. Here a call at `u64::MAX` takes the limit, then an explicit-time call at 0 ns is
/// decided as on a limiter that never saw the end of time: allowed (the next one denied alike).
#[test]
fn the_timeline_s_last_cell_is_never_a_hint() {
    for cell_nanos in [10u64, 3, 7] {
        let config =
            super::SlidingWindow::with_parts(1, Duration::from_nanos(cell_nanos), 1, 2).unwrap();
        let w = SlidingWindowLimiter::from_config(&config, ManualClock::new());
        let last = u64::MAX / cell_nanos;
        assert!(w.try_acquire_at(1, u64::MAX).unwrap().is_allowed());
        assert_ne!(
            w.base.hint.load(crate::sync::Ordering::Relaxed),
            last,
            "{cell_nanos} ns"
        );
        // 0 ns lies within the nanoseconds that would wrap into the last cell.
        assert!(cell_nanos - 1 - u64::MAX % cell_nanos > 0);
        let fresh = SlidingWindowLimiter::from_config(&config, ManualClock::new());
        let got = w.try_acquire_at(1, 0).unwrap();
        assert!(got.is_allowed(), "{cell_nanos} ns: {got:?}");
        assert_eq!(got, fresh.try_acquire_at(1, 0).unwrap(), "{cell_nanos} ns");
        // The next call in cell 0 on each: denied alike.
        assert_eq!(
            w.try_acquire_at(1, 0).unwrap(),
            fresh.try_acquire_at(1, 0).unwrap(),
            "{cell_nanos} ns"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5_000))]
    /// Whatever the hint says (the newest crossing's cell, a stale or a newer one, any cell that
    /// ends within the timeline: every value a crossing stores), a call finds exactly the cell
    /// of its clock read, that cell's slot and its round.
    #[test]
    fn a_hint_is_used_only_where_it_is_exact(
        cells in 1u32..2_000,
        future in 1u32..300,
        cell_nanos in proptest::prop_oneof![1u64..4, 1u64..1_000_000, 1_000u64..100_000_000_000],
        now in proptest::prop_oneof![proptest::num::u64::ANY, 0u64..1 << 40],
        hinted_offset in -3i64..3,
        raw in proptest::num::u64::ANY,
        use_raw in proptest::bool::ANY,
    ) {
        let Some(window) = cell_nanos.checked_mul(u64::from(cells)) else { return Ok(()) };
        let Ok(config) = super::SlidingWindow::with_parts(1, Duration::from_nanos(window), cells, future) else {
            return Ok(());
        };
        let w = SlidingWindowLimiter::from_config(&config, ManualClock::new());
        let g = w.geometry;
        let cell = g.cell_of(now);
        let want = (cell, g.place(cell).0, g.place(cell).1);
        let hint = if use_raw {
            raw
        } else {
            cell.saturating_add_signed(hinted_offset)
        };
        // Any value a hint can hold: a cell that ends within the timeline (the crossing stores
        // no other, see `advance`); others are taken modulo the timeline's last cell.
        let hint = if hint_in_timeline(hint, cell_nanos) {
            hint
        } else {
            hint % (u64::MAX / cell_nanos)
        };
        proptest::prop_assert!(g.slots.is_power_of_two() && g.slots >= u64::from(cells + future));
        proptest::prop_assert_eq!(w.locate(hint, now), want);
    }

    /// The short path's one-comparison checks are the unpacked comparisons they stand for:
    /// any word, any round or cell (high bits included), near misses of both.
    #[test]
    fn the_short_path_s_word_checks_are_exact(
        word in proptest::prop_oneof![
            proptest::num::u64::ANY,
            proptest::strategy::Strategy::prop_map(
                (0u64..1 << 39, proptest::bool::ANY, 0u64..1 << 24),
                |(r, s, c)| pack_cell(r, s, c),
            ),
        ],
        round in proptest::num::u64::ANY,
        near in proptest::bool::ANY,
        cell in proptest::num::u64::ANY,
    ) {
        // A round equal to the word's, up to the bits the tag drops, half the time.
        let round = if near { unpack_cell(word).0 | (round << 39) } else { round };
        let (word_round, sealed, count) = unpack_cell(word);
        let open = word_round == round & super::ROUND_MASK && !sealed;
        proptest::prop_assert_eq!(open_count(word, round), open.then_some(count));
        let cell = if near { (word >> 24) | (cell << 40) } else { cell };
        let (tag, sum) = crate::packed::unpack_window(word);
        let named = tag == cell & crate::packed::TAG_MASK;
        proptest::prop_assert_eq!(named_sum(word, cell), named.then_some(sum));
    }
}

/// Reads a search over `m` cells needs to reach the newest one when each split is as high as
/// `k = ⌈log2 m⌉` reads in all allow: `k − ⌊log2 (2^k − m + 1)⌋` (halving needs about `k`).
fn newest_reads(m: u64) -> u64 {
    let k = m.next_power_of_two().trailing_zeros();
    u64::from(k - ((1u64 << k) - m + 1).ilog2())
}

/// The attack's first cell (issue 17, the "spent" column of BENCHMARKS.md): the whole limit
/// taken at the very end of the cell before. A denial reads the two levels the marks are
/// checked with, then searches the part of the window in the newest closed cell's block (`m`
/// cells) for it in [`newest_reads`]`(m)` reads; a halving search over the whole window read
/// about `⌈log2 (cells − 1)⌉` (here 7 at 60 cells, where this bound is 6).
#[test]
fn a_denial_after_the_limit_was_spent_at_the_previous_cell_s_end_searches_from_the_newest() {
    for cells in [60u32, 6_000, 60_000] {
        let limit = 10;
        let block = u64::from(cells);
        // The spent cell in the middle of a block (the window spans two blocks), at a block's
        // last cell (the crossing is the next block's first: its level is 0, read from no mark)
        // and at a block's first cell.
        for spent in [block + block / 2, block - 1, block] {
            let crossing = spent + 1;
            let (from, start) = (crossing + 1 - block, crossing - crossing % block);
            let m = if spent >= start {
                crossing - start
            } else {
                start - from
            };
            let w = ring(limit, cells);
            assert!(
                w.try_acquire_at(limit, crossing * CELL - 1)
                    .unwrap()
                    .is_allowed()
            );
            let now = crossing * CELL + 7;
            let leaves = (spent + block) * CELL - now;
            let want = Decision::deny(u64::from(limit), 0, leaves, leaves);
            // The first call crosses into the cell.
            assert_eq!(w.try_acquire_at(1, now).unwrap(), want);
            let (read, d) = visits(|| w.try_acquire_at(1, now).unwrap());
            assert_eq!(d, want, "{cells} cells, spent in cell {spent}");
            let bound = 2 + newest_reads(m);
            assert!(
                read <= bound,
                "{cells} cells, spent in cell {spent}: a denial read {read} > {bound}"
            );
            // A peek reads its cell's count besides.
            let (read, d) = visits(|| w.peek_at(1, now).unwrap());
            assert_eq!(d, want);
            assert!(
                read <= bound + 1,
                "{cells} cells, spent in cell {spent}: a peek read {read} > {}",
                bound + 1
            );
        }
    }
    // The figures of `first_reaching`'s docs.
    assert_eq!(
        [59, 5_999, 33, 1].map(newest_reads),
        [4, 2, 1, 0],
        "reads to the newest of m cells"
    );
}

/// A random history of admissions over a window of many cells (two blocks of marks), then
/// every denial in a cell crossed into (`denial`, through the marks) and a peek some cells past
/// that crossing (through its marks and the live cell) against the same denial read from the
/// cells one by one (`denial_by_scan`, the path every denial took before the marks).
fn marks_match_the_scan(
    cells: u32,
    limit: u32,
    history: &[(u64, u64, u32)],
    gap: u64,
    later: u64,
    inside: u64,
) -> Result<(), proptest::test_runner::TestCaseError> {
    let w = ring(limit, cells);
    let mut cell = 0;
    for &(skip, at, n) in history {
        cell += skip;
        // `at`: nanoseconds into the cell (its last one included).
        let _ = w.try_acquire_at(n.min(limit), cell * CELL + at % CELL);
    }
    let limit = u64::from(limit);
    // The scan's view of the window of `cell`: (sum of its closed cells, its own count).
    let scanned = |cell: u64| {
        let from = w.geometry.window_start(cell);
        (
            (from..cell).map(|i| w.count_of(i)).sum::<u64>(),
            w.count_of(cell),
        )
    };
    // A crossing into `cell` (the sweep's), then a denial of every size there.
    let cell = cell + gap;
    let now = cell * CELL + inside % CELL;
    w.sweep_at(now);
    let (prev, count) = scanned(cell);
    let from = w.geometry.window_start(cell);
    for n in 1..=limit {
        if prev + count + n <= limit {
            continue;
        }
        let closed = Closed::of_crossing(cell, from, prev);
        proptest::prop_assert_eq!(
            w.denial(cell, now, closed, count, n, limit),
            Some(w.denial_by_scan(cell, now, prev, count, n, limit)),
            "denial of {} in cell {}",
            n,
            cell
        );
        proptest::prop_assert_eq!(
            w.try_acquire_at(n as u32, now).unwrap(),
            w.denial_by_scan(cell, now, prev, count, n, limit)
        );
    }
    // A peek in a later cell of the same window, nobody having crossed into it.
    let peeked = cell + later;
    let now = peeked * CELL + inside % CELL;
    let (prev, count) = scanned(peeked);
    for n in 1..=limit {
        let got = w.peek_at(n as u32, now).unwrap();
        if prev + count + n <= limit {
            proptest::prop_assert!(got.is_allowed());
        } else {
            proptest::prop_assert_eq!(
                got,
                w.denial_by_scan(peeked, now, prev, count, n, limit),
                "peek of {} in cell {} (crossing {})",
                n,
                peeked,
                cell
            );
        }
    }
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

    /// [`marks_match_the_scan`] on histories dense and sparse, the permits often at a cell's
    /// last nanosecond (the attack's shape).
    #[test]
    fn a_denial_through_the_marks_is_the_scan_s(
        cells in proptest::prop_oneof![2u32..=9, 10u32..=70],
        limit in 1u32..=20,
        history in proptest::collection::vec(
            (
                proptest::prop_oneof![3 => 0u64..=2, 1 => 0u64..=80],
                proptest::prop_oneof![CELL - 1..CELL, 0..CELL],
                1u32..=20,
            ),
            0..40,
        ),
        gap in proptest::prop_oneof![0u64..=3, 0u64..=80],
        later in 0u64..=8,
        inside in 0..CELL,
    ) {
        marks_match_the_scan(cells, limit, &history, gap, later.min(u64::from(cells) - 1), inside)?;
    }
}

/// A peek past the newest crossing whose window starts after that crossing's block start
/// (`from > block`): it answers as the scan, and its searches for the retry and the newest used
/// cells read at most `⌈log2 (crossing − block)⌉` marks each, as `first_reaching`'s docs say
/// (the newer block's cells are searched from the block start: up to 14 reads where halving
/// `(from, crossing]` takes 12, at 40 cells past a crossing at 64 cells).
#[test]
fn a_peek_whose_window_starts_after_the_crossing_s_block_answers_as_the_scan_in_log_reads() {
    let (cells, limit) = (64u32, 10u32);
    let block = u64::from(cells);
    // The crossing: the last cell of block 1 (cells 64..128).
    let crossing = 2 * block - 1;
    for later in [10u64, 30, 40, 50] {
        let w = ring(limit, cells);
        let peeked = crossing + later;
        let from = w.geometry.window_start(peeked);
        assert!(from > block && from < crossing - 10, "{later}");
        // The limit, one permit a cell, in the closed cells from `from` on.
        for cell in from + 1..=from + u64::from(limit) {
            assert!(w.try_acquire_at(1, cell * CELL).unwrap().is_allowed());
        }
        w.sweep_at(crossing * CELL);
        let now = peeked * CELL + 3;
        let (prev, count, n) = (u64::from(limit), 0, 1);
        let want = w.denial_by_scan(peeked, now, prev, count, n, u64::from(limit));
        assert_eq!(w.peek_at(1, now).unwrap(), want, "{later}");
        let closed = Closed {
            crossing,
            from,
            marked: prev,
            live: 0,
            scan: false,
        };
        let (read, d) = visits(|| w.denial(peeked, now, closed, count, n, u64::from(limit)));
        assert_eq!(d, Some(want), "{later}");
        // The two levels the marks are checked with, then two searches (the retry's cell and
        // the newest used one) over the newer block's `crossing − block` cells.
        let reads = (crossing - block).next_power_of_two().trailing_zeros();
        let bound = 2 + 2 * u64::from(reads);
        assert!(
            read <= bound,
            "peek {later} cells past the crossing: {read} > {bound} reads"
        );
    }
}

/// The denials that need an old cell to leave, answered from the crossing's published ends
/// (the oldest and newest used closed cells, see [Ends](super#ends)) without reading a mark or a
/// cell, whatever the cells: the limit spent at the previous cell's end (issue 17's attack,
/// `count = 0`: the reset from the newest end), and a window at the limit with permits in the
/// current cell (the at-limit workload's denial, `need = 1`: the oldest end). Before the ends
/// both searched the marks: `2 + newest_reads(m)` and more slot words.
#[test]
fn a_denial_needing_an_old_cell_to_leave_reads_no_slot_word() {
    for cells in [60u32, 6_000, 60_000] {
        let limit = 10;
        let block = u64::from(cells);
        for spent in [block + block / 2, block - 1, block] {
            let crossing = spent + 1;
            let w = ring(limit, cells);
            // 7 at the very end of `spent`, 3 at the start of the crossing's cell.
            assert!(
                w.try_acquire_at(7, crossing * CELL - 1)
                    .unwrap()
                    .is_allowed()
            );
            let now = crossing * CELL + 7;
            // Limit spent at the previous cell's end, nothing in this cell: the crossing (by a
            // denial of 4), then a denial of 4 that reads nothing.
            let leaves = (spent + block) * CELL - now;
            let want = Decision::deny(u64::from(limit), 3, leaves, leaves);
            assert_eq!(w.try_acquire_at(4, now).unwrap(), want);
            let (read, d) = visits(|| w.try_acquire_at(4, now).unwrap());
            assert_eq!(d, want, "{cells} cells, spent in cell {spent}");
            assert_eq!(read, 0, "{cells} cells, spent in cell {spent}: denial");
            let (read, d) = visits(|| w.peek_at(4, now).unwrap());
            assert_eq!(d, want);
            assert_eq!(
                read, 1,
                "{cells} cells, spent in cell {spent}: peek (its count)"
            );
            // At the limit with 3 in this cell: 1 more waits for `spent` to leave, and the
            // window is back to full when this cell leaves.
            assert!(w.try_acquire_at(3, now).unwrap().is_allowed());
            let want = Decision::deny(u64::from(limit), 0, leaves, (crossing + block) * CELL - now);
            let (read, d) = visits(|| w.try_acquire_at(1, now).unwrap());
            assert_eq!(d, want, "{cells} cells, spent in cell {spent}");
            assert_eq!(
                read, 0,
                "{cells} cells, spent in cell {spent}: at-limit denial"
            );
            // 8 more need more than the oldest used cell frees: through the marks, as before.
            let (_, d) = visits(|| w.try_acquire_at(8, now).unwrap());
            assert_eq!(
                d,
                w.denial_by_scan(crossing, now, 7, 3, 8, u64::from(limit))
            );
        }
    }
}

/// Cells 10, 20 and 30 of a 60-cell window hold 3, 4 and 3 (limit 10): the window of every
/// cell from 31 to 69 is full, its oldest used cell 10 and its newest 30. Returns the ring, with
/// the crossing into cell 31 made (by a denial).
fn full_from_cell_10() -> SlidingWindowLimiter<ManualClock> {
    let w = ring(10, 60);
    fill_cells_10_20_30(&w);
    w
}

/// Takes 3, 4 and 3 at the ends of cells 10, 20 and 30 (a limit of 10: the window full from
/// then on), then makes the crossing into cell 31 with a denial.
fn fill_cells_10_20_30(w: &SlidingWindowLimiter<ManualClock>) {
    for (cell, n) in [(10, 3), (20, 4), (30, 3)] {
        assert!(
            w.try_acquire_at(n, (cell + 1) * CELL - 1)
                .unwrap()
                .is_allowed()
        );
    }
    assert!(!w.try_acquire_at(1, 31 * CELL).unwrap().is_allowed());
}

/// The ends are published by the crossing that won `base`, after it, by plain stores: a winner
/// stalled there can store its (older) cell's ends after a newer crossing's. Such a word names
/// its own cell, so a denial in the newer cell ignores it and searches the marks (the scan's
/// answer), and the next crossing, which starts from the ends of the crossing it follows,
/// ignores it too. Used as they stand (the tag unchecked), the stale ends of cell 31 (oldest
/// used cell 21 back) would put the retry of a denial in cell 32 at cell 11's departure, a
/// cell late.
#[test]
fn stale_ends_of_an_older_cell_stored_late_are_ignored() {
    let w = full_from_cell_10();
    let stale = (
        w.base.oldest.load(crate::sync::Ordering::SeqCst),
        w.base.newest.load(crate::sync::Ordering::SeqCst),
    );
    assert_eq!(
        named_sum(stale.0, 31).map(|e| e >> 8),
        Some(21),
        "cell 31's ends"
    );
    let now = 32 * CELL + 5;
    assert!(!w.try_acquire_at(1, now).unwrap().is_allowed()); // the crossing into cell 32
    // The stalled winner of cell 31 stores now.
    w.base.oldest.store(stale.0, crate::sync::Ordering::SeqCst);
    w.base.newest.store(stale.1, crate::sync::Ordering::SeqCst);
    let scan = w.denial_by_scan(32, now, 10, 0, 1, 10);
    assert_eq!(
        scan,
        Decision::deny(10, 0, 70 * CELL - now, 90 * CELL - now)
    );
    let (read, d) = visits(|| w.try_acquire_at(1, now).unwrap());
    assert_eq!(d, scan, "a denial in cell 32 with cell 31's ends in place");
    assert!(read > 0, "the marks are searched");
    assert_eq!(w.peek_at(1, now).unwrap(), scan, "the peek");
    // The crossing into cell 33 finds no ends of cell 32: it publishes its own, found in the
    // marks, and a denial there reads them (no slot word) and answers as the scan.
    let now = 33 * CELL + 5;
    assert!(!w.try_acquire_at(1, now).unwrap().is_allowed());
    let (read, d) = visits(|| w.try_acquire_at(1, now).unwrap());
    assert_eq!(d, w.denial_by_scan(33, now, 10, 0, 1, 10));
    assert_eq!(read, 0, "cell 33's own ends");
}

/// A rewind marks the ends none for the cell it moves `head` back to before moving it: a
/// crossing after the rewind never finds the ends of one before it, even of the same cell (the
/// window's counts may differ then). Here cell 31 is crossed (its ends: oldest used cell 10),
/// a leap far past the horizon is crossed (its window empty: it publishes no ends, so cell 31's
/// stay in place), and a call in cell 31 rewinds the ring to it: before its crossing publishes
/// anything, the ends name cell 31 as none.
#[test]
fn a_rewind_marks_the_ends_none_before_moving_head_back() {
    let w = full_from_cell_10();
    let ends_of_31 = w.base.oldest.load(crate::sync::Ordering::SeqCst);
    assert!(named_sum(ends_of_31, 31).is_some_and(|e| e & 0x7f == 3));
    let leap = 31 + 2 * w.horizon;
    assert!(w.try_acquire_at(1, leap * CELL).unwrap().is_allowed());
    assert_eq!(
        w.base.oldest.load(crate::sync::Ordering::SeqCst),
        ends_of_31,
        "the leap's crossing publishes no ends"
    );
    let mut me = super::horizon::Caller::new(31 * CELL + 5, 31, None);
    assert_eq!(w.follow(leap, 31, false, &mut me), (31, true), "the rewind");
    assert_eq!(
        named_sum(w.base.oldest.load(crate::sync::Ordering::SeqCst), 31),
        Some(0),
        "none, for cell 31"
    );
    // The rewound call then crosses into cell 31 and is decided there, as the scan decides.
    let now = 31 * CELL + 5;
    let d = w.try_acquire_at(1, now).unwrap();
    let prev = w.closed_by_scan(31).sum();
    if d.is_allowed() {
        assert!(prev < 10);
    } else {
        assert_eq!(d, w.denial_by_scan(31, now, prev, 0, 1, 10));
    }
}

/// Single-threaded random walks (3, 4, 7, 12 and 60 cells; limits 1 to 300, so oldest cells
/// past the ends' count cap of 127; `n` up to 150; steps within a cell, across a few cells and
/// across two windows), from cell 0, from 150 cells before the tag's period (2^40 cells) and
/// from 400 cells before the end of time: every denial, and the peek before it, answers as the
/// cell-by-cell scan, whether it read the published ends or the marks.
#[test]
fn random_walks_deny_and_peek_as_the_scan() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = |m: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % m
    };
    // Denials that read no slot word (a burst, or the published ends), and the others (the
    // marks); a retry a cell late on the ends' capped-count path fails here (checked by a
    // temporary mutation).
    let (mut by_ends, mut by_marks) = (0u32, 0u32);
    for round in 0..3000 {
        let cells = [3u32, 4, 7, 12, 60][usize::try_from(rnd(5)).unwrap()];
        let limit = [1u32, 3, 10, 200, 300][usize::try_from(rnd(5)).unwrap()];
        let w = ring(limit, cells);
        let mut t = [
            0u64,
            ((1u64 << 40) - 150) * CELL,
            (u64::MAX / CELL - 400) * CELL,
        ][usize::try_from(round % 3).unwrap()];
        for _ in 0..60 {
            t = t.saturating_add(match rnd(4) {
                0 => 0,
                1 => rnd(CELL),
                2 => rnd(3 * CELL),
                _ => rnd(u64::from(cells) * CELL * 2),
            });
            let n = 1 + rnd(u64::from(limit).min(150));
            let permits = u32::try_from(n).unwrap();
            let cell = t / CELL;
            let peek = w.peek_at(permits, t).unwrap();
            let (read, d) = visits(|| w.try_acquire_at(permits, t).unwrap());
            let at = format!("round {round}: {cells} cells, limit {limit}, t {t}, n {n}");
            assert_eq!(peek, d, "the peek before: {at}");
            if !d.is_allowed() {
                let prev = w.closed_by_scan(cell).sum();
                let count = w.count_of(cell);
                let scan = w.denial_by_scan(cell, t, prev, count, n, u64::from(limit));
                assert_eq!(d, scan, "{at}");
                if read == 0 {
                    by_ends += 1;
                } else {
                    by_marks += 1;
                }
            }
        }
    }
    // Both kinds of denial were compared (about 54,000 and 48,000).
    assert!(
        by_ends > 1_000 && by_marks > 1_000,
        "{by_ends} read no slot word, {by_marks} did"
    );
}

/// A winner stalled between its `base` and its ends across a whole leap, the rewind and a new
/// crossing of its own cell (the review's case): 40 cells and 1 future cell in 64 slots, so the
/// leap's crossing resets cell 10's slot and leaves cells 20's and 30's. Cells 10, 20 and 30
/// hold 3, 4 and 3; W1 wins the crossing into cell 31 and stalls after `base`; the leap, the
/// rewind to 31 and W2's crossing of 31 follow (the window now holds 7), then cell 31 takes 3;
/// then W1 stores its ends (oldest used cell 10). Named as they were, W1's ends would put a
/// denial's retry at cell 10's departure, 10 µs before the scan's (cell 20's): they were named
/// in the epoch before the rewind, so the denial and the peek ignore them and answer as the scan.
#[test]
fn ends_stored_by_a_winner_stalled_across_a_rewind_are_ignored() {
    let window = Duration::from_nanos(CELL * 40);
    let config = super::SlidingWindow::with_parts(10, window, 40, 1).unwrap();
    let w = SlidingWindowLimiter::from_config(&config, ManualClock::new());
    fill_cells_10_20_30(&w);
    // W1's ends for cell 31, as its late stores will write them.
    let stale = (
        w.base.oldest.load(crate::sync::Ordering::SeqCst),
        w.base.newest.load(crate::sync::Ordering::SeqCst),
    );
    assert_eq!(
        named_sum(stale.0, 31).map(|e| e >> 8),
        Some(21),
        "W1's ends"
    );
    let mut leap = 31 + 2 * w.horizon;
    leap += (12 + 64 - leap % 64) % 64; // cell 10's slot overwritten, 20's and 30's not
    assert!(w.try_acquire_at(1, leap * CELL).unwrap().is_allowed());
    let mut me = super::horizon::Caller::new(31 * CELL + 5, 31, None);
    assert_eq!(w.follow(leap, 31, false, &mut me), (31, true), "the rewind");
    let now = 31 * CELL + 5;
    assert!(w.try_acquire_at(3, now).unwrap().is_allowed());
    assert_eq!(w.closed_by_scan(31).sum(), 7);
    let scan = w.denial_by_scan(31, now, 7, 3, 1, 10);
    assert_eq!(
        scan,
        Decision::deny(10, 0, 60 * CELL - now, 71 * CELL - now)
    );
    assert_eq!(w.try_acquire_at(1, now).unwrap(), scan, "W2's ends");
    // W1 resumes: its two plain stores.
    w.base.oldest.store(stale.0, crate::sync::Ordering::SeqCst);
    w.base.newest.store(stale.1, crate::sync::Ordering::SeqCst);
    assert_eq!(w.try_acquire_at(1, now).unwrap(), scan);
    assert_eq!(w.peek_at(1, now).unwrap(), scan);
}

/// `waits_back` (the published denial's waits from the end of the caller's window) against
/// `until_start` of each cell plus `cells`, as the ends were read before it, on random
/// geometries, cells, times and distances back: small and huge cells, windows that end near or
/// past the end of the `u64` timeline (its cold path), times inside, before and after the cell.
#[test]
fn waits_back_agree_with_until_start_on_random_states() {
    use super::marks::waits_back;
    use crate::algorithms::ring::RingGeometry;
    let mut state = 0x5EED_0017_u64;
    let mut next = move || {
        // splitmix64
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    // A value of up to `bits` random bits, the width itself random: small and huge alike.
    let below = |max: u64, next: &mut dyn FnMut() -> u64| -> u64 {
        let bits = next() % 65;
        let v = if bits == 64 {
            next()
        } else {
            next() & ((1u64 << bits) - 1)
        };
        if max == u64::MAX { v } else { v % (max + 1) }
    };
    let mut past_the_end = 0;
    for case in 0..200_000 {
        let cells = 1 + below(65_535, &mut next);
        let cell_nanos = 1 + below(u64::MAX / cells - 1, &mut next);
        let geometry = RingGeometry {
            cell_nanos,
            cells,
            future: 0,
            slots: cells,
        };
        let window = cell_nanos * cells;
        let cell = below(u64::MAX / cell_nanos, &mut next);
        let start = cell * cell_nanos;
        // Mostly in the cell (the short path's callers), else anywhere (a peek's).
        let now = if next() % 4 == 0 {
            next()
        } else {
            start.saturating_add(below(cell_nanos - 1, &mut next))
        };
        let back = below(cell.min(cells + 2), &mut next);
        let newest = below(back, &mut next);
        let until = |b: u64| geometry.until_start((cell - b).saturating_add(cells), now);
        let got = waits_back(&geometry, window, cell, now, back, newest);
        assert_eq!(
            got,
            (until(back), until(newest)),
            "case {case}: cells {cells}, cell {cell} of {cell_nanos} ns, now {now}, back \
             {back}, newest {newest}"
        );
        if start.checked_add(window).is_none() {
            past_the_end += 1;
        }
    }
    assert!(
        past_the_end > 1_000,
        "the cold path ran {past_the_end} times"
    );
}

/// splitmix64 from `seed`: the randomized tests' generator.
fn splitmix(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed;
    move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// The ends' name from the epoch counter as read (`rewinds_begun`, in steps of `EPOCH_STEP`:
/// one `xor`) against the name as computed before, the cell mixed with the rewind count times
/// the odd factor: on random cells and rewind counts, the counter advanced one rewind at a
/// time as the rewinds' `fetch_add` advance it (wrapping), so the same 40-bit tag names the
/// same crossing's ends as before. Then the property the name is for: within 2,000 rewinds,
/// no two (cell, epoch) pairs of 4,096 neighbouring cells share a tag (with a step of 1, cell
/// `c` in epoch 1 would be named as cell `c ^ 1` in epoch 0).
#[test]
fn ends_names_from_the_stepped_epoch_counter_agree_with_the_product() {
    use super::marks::{EPOCH_STEP, ends_name};
    use crate::packed::TAG_MASK;
    let mut next = splitmix(0x5EED_0E90);
    for case in 0..2_000 {
        let cell = next() >> (next() % 64);
        let rewinds = next() % 5_000;
        let mut counter = 0u64;
        for _ in 0..rewinds {
            counter = counter.wrapping_add(EPOCH_STEP);
        }
        let before = cell ^ rewinds.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        assert_eq!(
            ends_name(cell, counter) & TAG_MASK,
            before & TAG_MASK,
            "case {case}: cell {cell}, {rewinds} rewinds"
        );
    }
    let base = next() & TAG_MASK;
    let mut seen = std::collections::HashSet::new();
    let mut counter = 0u64;
    for rewinds in 0..2_000u64 {
        for cell in base..base + 4_096 {
            assert!(
                seen.insert(ends_name(cell, counter) & TAG_MASK),
                "cell {cell} after {rewinds} rewinds is named as another crossing"
            );
        }
        counter = counter.wrapping_add(EPOCH_STEP);
    }
}

/// `newest_back` (the `newest` word's name and range in one comparison) against the two tests
/// it replaces, `named_sum` then `1 ≤ newest ≤ back`, on random words: names that agree, that
/// differ in one bit of the tag (or only above it: the same tag), payloads around 0, `back`
/// and `MAX_COUNT`, words that wrap below the name.
#[test]
fn newest_back_agrees_with_named_sum_and_the_range() {
    use super::marks::newest_back;
    use crate::packed::{COUNT_BITS, MAX_COUNT, TAG_MASK};
    let mut next = splitmix(0x5EED_BAC4);
    let mut agreed = 0;
    for case in 0..1_000_000 {
        let name = next();
        let back = match next() % 4 {
            0 => next() % 4,
            _ => next() % (1 << 16),
        };
        let payload = match next() % 6 {
            0 => next() % 3,
            1 => back.saturating_sub(1) + next() % 3,
            2 => MAX_COUNT - next() % 3,
            _ => next() & MAX_COUNT,
        };
        let tag = match next() % 5 {
            0 => name ^ (1 << (next() % 40)),
            1 => name ^ (1 << (40 + next() % 24)),
            2 => next(),
            _ => name,
        };
        let word = match next() % 8 {
            0 => next(),
            _ => ((tag & TAG_MASK) << COUNT_BITS) | payload,
        };
        let before = named_sum(word, name).filter(|&newest| newest != 0 && newest <= back);
        assert_eq!(
            newest_back(word, name, back),
            before,
            "case {case}: word {word:#x}, name {name:#x}, back {back}"
        );
        agreed += usize::from(before.is_some());
    }
    assert!(agreed > 100_000, "{agreed} accepted words");
}

/// A random short-path state for the wait tests: a ring geometry (1 ns cells to cells near the
/// end of the timeline), a `cell` (near either end of the timeline or anywhere), a `now` in it
/// and the oldest used closed cell's distance `back ≤ min(cell, cells − 1)`; `None` where the
/// drawn `now` fell outside `cell` (the last cell cut short by the end of the timeline).
struct RandomState {
    geometry: crate::algorithms::ring::RingGeometry,
    cell: u64,
    now: u64,
    back: u64,
}

fn random_state(next: &mut impl FnMut() -> u64) -> Option<RandomState> {
    let cells = 1 + next() % (1 + (next() >> (48 + next() % 16)));
    let cell_nanos = 1 + (next() >> (next() % 64)) % (u64::MAX / cells);
    let geometry = crate::algorithms::ring::RingGeometry {
        cell_nanos,
        cells,
        future: 0,
        slots: cells,
    };
    let last = u64::MAX / cell_nanos;
    let cell = match next() % 4 {
        0 => last - (next() % (2 * cells)).min(last),
        1 => (next() % (2 * cells)).min(last),
        _ => next() % last.saturating_add(1),
    };
    let start = cell * cell_nanos;
    // The cell's nanoseconds within the timeline (the last cell may be cut short).
    let span = (u64::MAX - start).saturating_add(1).min(cell_nanos);
    let now = start + next() % span;
    if now / cell_nanos != cell {
        return None;
    }
    let back = next() % (cell.min(cells - 1) + 1);
    Some(RandomState {
        geometry,
        cell,
        now,
        back,
    })
}

/// `waits_back_in_cell` (the short path's waits, plain subtractions) against `waits_back`
/// (saturating) where the short path calls it: `now` in `cell`, the oldest used closed cell in
/// the window (`back ≤ min(cell, cells − 1)`), `newest ≤ back`; random geometries from 1 ns
/// cells to cells near the end of the timeline (the cold path past it), and every retry short
/// of that end at least 1 ns (past it the index saturates, as `waits_back`'s, and the caller
/// raises a 0 to 1 ns).
#[test]
fn waits_back_in_cell_agree_with_waits_back_on_random_states() {
    use super::marks::{waits_back, waits_back_in_cell};
    let mut next = splitmix(0x5EED_1CE1);
    let mut past_the_end = 0;
    for case in 0..500_000 {
        let Some(RandomState {
            geometry,
            cell,
            now,
            back,
        }) = random_state(&mut next)
        else {
            continue;
        };
        let (cells, cell_nanos) = (geometry.cells, geometry.cell_nanos);
        let window = cell_nanos * cells;
        let start = cell * cell_nanos;
        let newest = next() % (back + 1);
        let got = waits_back_in_cell(&geometry, window, cell, now, back, newest);
        let want = waits_back(&geometry, window, cell, now, back, newest);
        assert_eq!(
            got, want,
            "case {case}: cells {cells}, cell {cell} of {cell_nanos} ns, now {now}, back \
             {back}, newest {newest}"
        );
        let whole = start.checked_add(window).is_some();
        assert!(
            got.0 >= 1 || !whole,
            "case {case}: a retry of 0: cells {cells}, cell {cell} of {cell_nanos} ns, now {now}, back {back}, newest {newest}"
        );
        past_the_end += usize::from(!whole);
    }
    assert!(
        past_the_end > 1_000,
        "the cold path ran {past_the_end} times"
    );
}

/// The short path's spent-denial wait (`sole_wait_in_cell`: `cell + (cells − back)` with a
/// checked sum and a plain subtraction) is the wait the peek's sole-cell branch computes,
/// `until_start((cell − back).saturating_add(cells))`, for a `now` in `cell` and a `back` a
/// crossing publishes (`back ≤ cell`, `back < cells`; 0 too), also where that cell starts past
/// the end of the `u64` timeline (the cold path), the retry at least 1 ns and the reset raw.
#[test]
fn sole_wait_in_cell_agrees_with_until_start_on_random_states() {
    use super::marks::sole_wait_in_cell;
    use crate::decision::at_least_one;
    let mut next = splitmix(0x501E_CE11);
    let mut past_the_end = 0;
    for case in 0..500_000 {
        let Some(RandomState {
            geometry,
            cell,
            now,
            back,
        }) = random_state(&mut next)
        else {
            continue;
        };
        let (cells, cell_nanos) = (geometry.cells, geometry.cell_nanos);
        let got = sole_wait_in_cell(&geometry, u64::MAX / cell_nanos, cell, now, back);
        let want = geometry.until_start((cell - back).saturating_add(cells), now);
        assert_eq!(
            got,
            Some((at_least_one(want), want)),
            "case {case}: cells {cells}, cell {cell} of {cell_nanos} ns, now {now}, back {back}"
        );
        past_the_end += usize::from(
            cell.checked_add(cells - back)
                .and_then(|index| index.checked_mul(cell_nanos))
                .is_none(),
        );
    }
    assert!(
        past_the_end > 1_000,
        "the cold path ran {past_the_end} times"
    );
}

/// Ends with a colliding name whose oldest used cell would lie before cell 0 (`back > cell`, in
/// the first window of the timeline: no crossing publishes that) are not tested for it by the
/// short path (`back < cells` is what its waits need): the denial answers a retry and a reset
/// within the window, never 0, and the call after it is still decided as the scan decides it.
#[test]
fn ends_whose_oldest_cell_lies_before_cell_0_give_waits_within_the_window() {
    use crate::packed::pack_window;
    let w = ring(1, 60);
    let window = 60 * CELL;
    assert!(w.try_acquire_at(1, 5 * CELL - 1).unwrap().is_allowed()); // cell 4
    let now = 7 * CELL + 5;
    let scan = w.denial_by_scan(7, now, 1, 0, 1, 1);
    assert_eq!(w.try_acquire_at(1, now).unwrap(), scan, "cell 7's own ends");
    for sole in [true, false] {
        // Named cell 7 (no rewind), the oldest 30 back (before cell 0) with 1; the newest 2 back.
        w.base
            .newest
            .store(pack_window(7, 2), crate::sync::Ordering::SeqCst);
        let payload = (30 << 8) | if sole { 1 << 7 } else { 0 } | 1;
        w.base
            .oldest
            .store(pack_window(7, payload), crate::sync::Ordering::SeqCst);
        let d = w.try_acquire_at(1, now).unwrap();
        assert!(!d.is_allowed());
        let (retry, reset) = (d.retry_after().as_nanos(), d.reset_after().as_nanos());
        assert!(
            (1..=u128::from(window)).contains(&retry) && reset <= u128::from(window),
            "sole {sole}: retry {retry} ns, reset {reset} ns"
        );
    }
}

/// Ends named by the current crossing whose oldest used cell lies before its window (`back ≥
/// cells`: no crossing publishes that, only a name that collides could carry it) are not used
/// by the short path, whose waits subtract without saturating (`waits_back_in_cell`): the
/// denial searches the marks and answers as the scan. Used, they would put the retry before
/// the call (a subtraction below 0: a panic in a debug build, a wrapped wait in a release one).
#[test]
fn ends_whose_oldest_cell_lies_before_the_window_are_not_used() {
    use crate::packed::pack_window;
    let w = full_from_cell_10();
    let now = 65 * CELL + 5;
    assert!(!w.try_acquire_at(1, now).unwrap().is_allowed()); // the crossing into cell 65
    let scan = w.denial_by_scan(65, now, 10, 0, 1, 10);
    assert_eq!(
        w.try_acquire_at(1, now).unwrap(),
        scan,
        "cell 65's own ends"
    );
    // Named cell 65 (no rewind: the name is the cell), the oldest 60 back (cell 5, before the
    // window's first cell 6) with 3, not the only one; the newest 35 back.
    w.base
        .newest
        .store(pack_window(65, 35), crate::sync::Ordering::SeqCst);
    w.base.oldest.store(
        pack_window(65, (60 << 8) | 3),
        crate::sync::Ordering::SeqCst,
    );
    let (read, d) = visits(|| w.try_acquire_at(1, now).unwrap());
    assert_eq!(d, scan, "ends 60 back in a 60-cell window");
    assert!(read > 0, "the marks are searched");
}

/// The review of issue 17's third round (the stepped epoch, `newest_back`, the refusal's `need`
/// handed on, `waits_back_in_cell`, no `need == 0` test): single-threaded random walks over
/// the geometries and limits the earlier walk leaves out (1- and 2-cell windows, 1 ns and 7 ns
/// cells, limits 1, 2, 127, 128 and `MAX_COUNT`, `n` 1, the limit or between), from cell 0,
/// from just before the tags' period and from just before the end of the `u64` timeline, with
/// leaps past the horizon and returns that rewind the ring (so ends named in later epochs, by
/// the stepped counter) and small steps back (lagging reads). Every denial, decided in the cell
/// `acquire_counted` names, answers as the cell-by-cell scan of that cell (the same answers at
/// `d80d784`, before the round). The peek before each call, where the call's time lies in that
/// cell, answers alike (before `closed_for_peek` read the cells after a rewind, 18 peeks here
/// took cells holding counts from before a leap for empty, at `d80d784` as at the round's end:
/// `a_peek_after_a_rewind_counts_the_cells_the_leap_left`). Since the fix of the quiet peek
/// after a leap to the end of time, walks also leap far past the horizon (up to the end of
/// time, several times a walk) and come back to where the latest far leap left from, so the
/// cells a rewind leaves marked as never reached, narrowed by every later rewind, are checked
/// against the call across several leaps and rewinds.
#[test]
fn random_walks_with_rewinds_deny_as_the_scan_on_small_windows_and_cells() {
    use crate::packed::MAX_COUNT;
    use crate::sync::Ordering;
    /// Walks run (a local stress: raise it, the counts are printed).
    const WALKS: u32 = 1_500;
    let mut next = splitmix(0x5EED_0017);
    let (mut by_ends, mut by_marks, mut rewound, mut peeks) = (0u32, 0u32, 0u32, 0u32);
    // Walks in which a rewind left cells marked as never reached, peeks in cells whose window a
    // far leap crossed, and walks that leaped far more than once.
    let (mut unreached, mut far_peeks, mut leaped_twice) = (0u32, 0u32, 0u32);
    for round in 0..WALKS {
        let cells = [1u64, 2, 3, 60][usize::try_from(next() % 4).unwrap()];
        let cell_nanos = [1u64, 7, 1_000][usize::try_from(next() % 3).unwrap()];
        let limit = [1u64, 2, 127, 128, MAX_COUNT][usize::try_from(next() % 5).unwrap()];
        let window = Duration::from_nanos(cell_nanos * cells);
        let config = super::SlidingWindow::with_parts(
            u32::try_from(limit).unwrap(),
            window,
            u32::try_from(cells).unwrap(),
            4,
        )
        .unwrap();
        let w = SlidingWindowLimiter::from_config(&config, ManualClock::new());
        let last = u64::MAX / cell_nanos;
        let mut t = match round % 3 {
            0 => 0,
            1 => ((1u64 << 40) - 2 * cells) * cell_nanos,
            _ => (last - 3 * cells - 8) * cell_nanos,
        };
        let origin = t;
        let leap = (w.horizon + 2 * cells) * cell_nanos;
        // Where the latest far leap left from, and how many far leaps the walk made.
        let (mut home, mut far) = (t, 0u32);
        // Whether a rewind left cells marked as never reached (that a peek skips).
        let mut skipping = false;
        for _ in 0..80 {
            t = match next() % 16 {
                0 => t.saturating_sub(next() % (2 * cell_nanos)), // a lagging read
                1 if t < u64::MAX / 2 => t + leap,
                2 => origin.max(t.saturating_sub(leap)), // back from a leap: a rewind
                // A leap far past the horizon: anywhere up to the end of time, or to within two
                // windows of it. (Not there with 1 ns cells: 2^64 cells are a multiple of
                // `2^39 × slots`, so cells there alias cells near 0, which only ever
                // over-counts, see `pack_cell`, and not alike in the call and the peek.)
                14 => {
                    home = t;
                    far += 1;
                    let room = u64::MAX - t;
                    if cell_nanos > 1 && next().is_multiple_of(2) {
                        u64::MAX - (next() % (2 * cells * cell_nanos)).min(room)
                    } else {
                        t + next() % room.max(1)
                    }
                }
                // Back to where the latest far leap left from, or a little after: a rewind.
                15 => home.saturating_add(next() % (2 * cells * cell_nanos + 1)),
                3..=5 => t.saturating_add(next() % cell_nanos),
                6..=9 => t.saturating_add(next() % (3 * cell_nanos)),
                _ => t.saturating_add(next() % (2 * cells * cell_nanos + 1)),
            };
            let n = match next() % 3 {
                0 => 1,
                1 => limit,
                _ => 1 + next() % limit,
            };
            skipping |= w.rewinds_begun.load(Ordering::SeqCst) != 0
                && w.unreached_from.load(Ordering::SeqCst) < w.unreached_to.load(Ordering::SeqCst);
            let permits = u32::try_from(n).unwrap();
            let peek = w.peek_at(permits, t).unwrap();
            let (read, (d, cell)) = visits(|| w.acquire_counted(n, limit, t, None));
            let at = format!(
                "round {round}: {cells} cells of {cell_nanos} ns, limit {limit}, t {t}, n {n}, \
                 cell {cell}"
            );
            if cell == t / cell_nanos {
                assert_eq!(peek, d, "the peek before: {at}");
                peeks += 1;
                far_peeks += u32::from(far > 0);
            }
            if !d.is_allowed() {
                let prev = w.closed_by_scan(cell).sum();
                let count = w.count_of(cell);
                let scan = w.denial_by_scan(cell, t, prev, count, n, limit);
                assert_eq!(d, scan, "{at}");
                if read == 0 {
                    by_ends += 1;
                } else {
                    by_marks += 1;
                }
            }
        }
        rewound += u32::from(w.rewinds_begun.load(Ordering::SeqCst) != 0);
        unreached += u32::from(skipping);
        leaped_twice += u32::from(far > 1);
    }
    let counts = format!(
        "{by_ends} read no slot word, {by_marks} did; {rewound} walks rewound, {unreached} \
         left cells never reached, {leaped_twice} leaped far twice or more; {peeks} peeks, \
         {far_peeks} after a far leap"
    );
    if WALKS > 1_500 {
        println!("{counts}");
    }
    assert!(
        by_ends > 10_000
            && by_marks > 5_000
            && rewound > 500
            && peeks > 20_000
            && unreached > 300
            && leaped_twice > 300
            && far_peeks > 5_000,
        "{counts}"
    );
}

/// A peek after a rewind counts the cells after the rewound `head` that still hold counts
/// from before the leap, as the call and the scan do. 2 cells of 1 µs (8 slots), limit 127:
/// cell 2 takes 104, a leap far past the horizon takes 110 in a cell whose window and future
/// leave cell 2's slot alone, a call at time 0 rewinds the ring to cell 0 and takes 1; then at
/// 3.373 µs (cell 3, whose window holds cell 2's 104) a peek of 127 must be refused, as the
/// call is (`retry` when cell 2 leaves). Before the fix the peek took the window for empty
/// (`head`, cell 0, before the window: "every cell of the window is still empty") and answered
/// allowed with 0 left. Found by the random walk above.
#[test]
fn a_peek_after_a_rewind_counts_the_cells_the_leap_left() {
    let w = ring(127, 2);
    assert!(w.try_acquire_at(104, 2_407).unwrap().is_allowed());
    let leap = w.horizon + 4;
    assert_eq!(
        leap % 8,
        4,
        "the leap's window and future leave slot 2 alone"
    );
    assert!(w.try_acquire_at(110, leap * CELL).unwrap().is_allowed());
    assert!(w.try_acquire_at(1, 0).unwrap().is_allowed()); // the rewind to cell 0
    assert_ne!(w.rewinds_begun.load(crate::sync::Ordering::SeqCst), 0);
    let now = 3 * CELL + 373;
    assert_eq!(
        w.closed_by_scan(3).sum(),
        104,
        "cell 2's count is still in the ring"
    );
    let want = Decision::deny(127, 23, 4 * CELL - now, 4 * CELL - now);
    assert_eq!(w.peek_at(127, now).unwrap(), want, "the peek");
    assert_eq!(w.peek_at(23, now).unwrap().remaining(), 0, "a peek of 23");
    assert_eq!(w.try_acquire_at(127, now).unwrap(), want, "the call");
}

/// Issue 17's goal for a peek after a rewind: once no cell a leap could have left counts in can
/// be in a peek's window any more, the peek is back on the marks, O(log cells) slot words, not
/// the cell-by-cell scan for the rest of the limiter's life. 60 and 6,000 cells of 1 s (the
/// horizon is then the cells), limit 1,000,000: cell 1 takes 1, a leap just past the horizon
/// and a window takes 1, a call in cell 2 rewinds the ring, then one call in every cell up to two
/// windows past the leap's cell; a peek two cells after the last crossing (its `base` an older
/// crossing's) answers as the scan and reads at most `2 log2(cells) + 4` slot words (before
/// the fix: every closed cell and its own, 60 and 6,000).
#[test]
fn a_peek_a_window_past_a_rewound_leap_reads_o_log_cells_slot_words() {
    const SECOND: u64 = 1_000_000_000;
    for cells in [60u32, 6_000] {
        let limit = 1_000_000;
        let window = Duration::from_secs(u64::from(cells));
        let config = super::SlidingWindow::with_parts(limit, window, cells, 4).unwrap();
        let w = SlidingWindowLimiter::from_config(&config, ManualClock::new());
        assert_eq!(w.horizon, u64::from(cells));
        assert!(w.try_acquire_at(1, SECOND).unwrap().is_allowed());
        let leap = 2 + w.horizon + u64::from(cells);
        assert!(w.try_acquire_at(1, leap * SECOND).unwrap().is_allowed());
        assert!(w.try_acquire_at(1, 2 * SECOND).unwrap().is_allowed()); // the rewind to cell 2
        assert_ne!(w.rewinds_begun.load(crate::sync::Ordering::SeqCst), 0);
        let last = leap + 2 * u64::from(cells);
        for cell in 3..=last {
            assert!(w.try_acquire_at(1, cell * SECOND).unwrap().is_allowed());
        }
        let cell = last + 2;
        let now = cell * SECOND + 7;
        let closed = w.closed_by_scan(cell).sum();
        assert_eq!(
            closed,
            u64::from(cells) - 2,
            "one permit in each closed cell but the last"
        );
        let (read, peek) = visits(|| w.peek_at(1, now).unwrap());
        let remaining = u64::from(limit) - closed - 1;
        assert_eq!(
            peek,
            Decision::allow(
                u64::from(limit),
                remaining,
                (cell + u64::from(cells)) * SECOND - now
            ),
            "{cells} cells"
        );
        assert!(
            read <= 2 * log2(cells) + 4,
            "{cells} cells: the peek read {read} slot words"
        );
    }
}

/// Issue 17's goal after a leap far past the horizon (here to within a window of the end of
/// time): `rewound_from` then stays past every cell the limiter will ever see, so a peek in a
/// quiet limiter (no crossing in its window) reads every closed cell of its window, one load
/// each, on every peek for the rest of the limiter's life, although no cell of its window can
/// hold a count the leap left. 60 and 6,000 cells of 1 s, limit 1,000,000: cell 1 takes 1, a
/// leap to the last whole window of `u64` nanoseconds takes 1, a call in cell 2 rewinds the
/// ring; then one call at 10 windows and a peek 3 windows after it, and the same a year later:
/// each peek should read at most `2 log2(cells) + 4` slot words (as the peek of
/// `a_peek_a_window_past_a_rewound_leap_reads_o_log_cells_slot_words`); it reads `cells`
/// (60: 60, 6,000: 6,000 before the fix). The rewind now leaves cells `[2, end)` marked as
/// never reached (the leap raised `head` from cell 1 straight to `end`): the peek reads none of
/// them, only its own cell (1 slot word at 60 and 6,000 cells).
#[test]
fn a_quiet_peek_after_a_leap_to_the_end_of_time_reads_o_log_cells_slot_words() {
    let reads = quiet_peeks_after_a_leap_to_the_end_of_time(1);
    assert!(
        reads.iter().all(|&(.., within)| within),
        "(cells, peek's window start - 3 windows in s, slot words read, within): {reads:?}"
    );
}

/// Review of issue 17's fix (`1cbfdbd`): as
/// `a_quiet_peek_after_a_leap_to_the_end_of_time_reads_o_log_cells_slot_words`, but the leaping
/// clock makes two calls, in two cells, before a fresh read rewinds the ring (a leaped core keeps
/// calling until another core's call rewinds it). The second raises `head` from the leaped cell,
/// so `raised_from` records a cell near the end of time and the rewind's range `(raised_from,
/// head)` holds one cell at most; `raised_from` never falls again, so every later rewind's range
/// is empty too, for the limiter's life. Each peek should read at most `2 log2(cells) + 4` slot
/// words; it read the window (60: 60, 6,000: 6,000), as before the fix. Now the leap (cell 1
/// to the leaped cell) is recorded as its epoch's widest raise past the horizon, and the
/// rewind narrows the cells never reached by that gap (`narrow_unreached`): each peek reads 1
/// slot word (its own cell), at 60 and 6,000 cells.
#[test]
fn a_quiet_peek_after_two_leaped_calls_reads_o_log_cells_slot_words() {
    let reads = quiet_peeks_after_a_leap_to_the_end_of_time(2);
    assert!(
        reads.iter().all(|&(.., within)| within),
        "(cells, peek's window start - 3 windows in s, slot words read, within): {reads:?}"
    );
}

/// A rewind narrows the cells never reached by a recorded leap only if the leap lies in the
/// epoch it ends. 60 cells of 1 s (horizon 60), limit 1,000,000: cell 1 takes 1, the leaped
/// clock takes 1 in two cells near the end of time, a call in cell 2 rewinds the ring (the
/// leap `(1, end)` is recorded: cells `[2, end)` never reached). Then calls in cells 62 and 122
/// (raises of 60 cells, not past the horizon: nothing recorded) and a call in cell 3, which
/// rewinds the ring again (122 is more than 60 cells ahead). Cell 122 holds 1, and lies in
/// `[2, end)`: the second rewind must not narrow by the first epoch's leap (its own top gap,
/// `(end, 122)`, is empty, so the range is too), and a peek in cell 123 counts cell 122, as
/// the call does. A rewind that took the record whatever its epoch (tried: this test fails,
/// the peek allowed with 999,999 left) keeps `[2, end)` and the peek takes cell 122 for empty.
#[test]
fn a_rewind_narrows_by_a_leap_only_of_the_epoch_it_ends() {
    const SECOND: u64 = 1_000_000_000;
    let limit = 1_000_000;
    let config = super::SlidingWindow::with_parts(limit, Duration::from_secs(60), 60, 4).unwrap();
    let w = SlidingWindowLimiter::from_config(&config, ManualClock::new());
    assert_eq!(w.horizon, 60);
    let end = u64::MAX / SECOND - 60;
    for cell in [1, end, end + 1, 2, 62, 122, 3] {
        assert!(w.try_acquire_at(1, cell * SECOND).unwrap().is_allowed());
    }
    assert_eq!(
        w.head.cell.load(crate::sync::Ordering::SeqCst),
        3,
        "rewound twice"
    );
    let now = 123 * SECOND + 7;
    assert_eq!(w.closed_by_scan(123).sum(), 1, "cell 122's count");
    let want = Decision::allow(u64::from(limit), u64::from(limit) - 2, 60 * SECOND - 7);
    assert_eq!(w.peek_at(1, now).unwrap(), want, "the peek");
    assert_eq!(w.try_acquire_at(1, now).unwrap(), want, "the call");
}

/// The history of the two tests above, at 60 and 6,000 cells of 1 s, limit 1,000,000: cell 1
/// takes 1; the leaped clock makes `leaped_calls` calls, one a cell from the last whole window
/// of `u64` nanoseconds; a call in cell 2 rewinds the ring; then one call at 10 windows and a
/// peek 3 windows after it, and the same a year later. Each peek is checked to answer as the
/// quiet window would; returned: (cells, the peek's window start - 3 windows in s, slot words
/// it read, whether within `2 log2(cells) + 4`).
fn quiet_peeks_after_a_leap_to_the_end_of_time(leaped_calls: u64) -> Vec<(u32, u64, u64, bool)> {
    const SECOND: u64 = 1_000_000_000;
    const YEAR: u64 = 365 * 24 * 3600;
    let mut reads = Vec::new();
    for cells in [60u32, 6_000] {
        let limit = 1_000_000;
        let window = Duration::from_secs(u64::from(cells));
        let config = super::SlidingWindow::with_parts(limit, window, cells, 4).unwrap();
        let w = SlidingWindowLimiter::from_config(&config, ManualClock::new());
        assert!(w.try_acquire_at(1, SECOND).unwrap().is_allowed());
        let end = u64::MAX / SECOND - u64::from(cells);
        for leaped in end..end + leaped_calls {
            assert!(w.try_acquire_at(1, leaped * SECOND).unwrap().is_allowed());
        }
        assert!(w.try_acquire_at(1, 2 * SECOND).unwrap().is_allowed()); // the rewind to cell 2
        assert_ne!(w.rewinds_begun.load(crate::sync::Ordering::SeqCst), 0);
        for start in [10 * u64::from(cells), YEAR] {
            assert!(w.try_acquire_at(1, start * SECOND).unwrap().is_allowed());
            let cell = start + 3 * u64::from(cells);
            let now = cell * SECOND + 7;
            assert_eq!(w.closed_by_scan(cell).sum(), 0, "a quiet window");
            let (read, peek) = visits(|| w.peek_at(1, now).unwrap());
            assert_eq!(
                peek,
                Decision::allow(
                    u64::from(limit),
                    u64::from(limit) - 1,
                    (cell + u64::from(cells)) * SECOND - now
                ),
                "{cells} cells at {start} s"
            );
            reads.push((cells, start, read, read <= 2 * log2(cells) + 4));
        }
    }
    reads
}

/// Review of issue 17's fix: a call that rewinds the ring never returns (found by a review walk
/// with 10 s cells, explicit times and leases; present before the fix too, on `a11a51a`). 8 cells
/// of 10 s, limit 3, 1 future cell: 3 taken in cell 16, a refusal in cell 19, a lease asked for
/// (and refused) on the clock at cell 10, a leap to cell 1,844,674,389 and a call in cell 8 that
/// rewinds the ring (and walks forward to cell 14); then a call in cell 1, 13 cells behind
/// `head` (more than the 8-cell horizon: a rewind), spun forever: it rewound the ring to cell 1,
/// walked forward over cells 1..=10 (sealed before the rewinds) raising `head`, took its own
/// head 10 (past cell 1 + the horizon) for a leap and rewound to cell 1 again. Each call must
/// return (10 s: a generous bound, the calls take microseconds), and the last is decided where
/// its walk ends: cell 14, whose 2 permits (the call in cell 8's) leave no room for 3.
#[test]
fn a_call_that_rewinds_after_a_walked_forward_rewind_returns() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let clock = ManualClock::new();
        let w = after_a_walked_forward_rewind(clock.clone(), |now| clock.set(now));
        assert_eq!(w.head.cell.load(crate::sync::Ordering::SeqCst), 14);
        let last = w.try_acquire_at(3, 14_942_222_018).unwrap();
        done.send((last, w.head.cell.load(crate::sync::Ordering::SeqCst)))
            .unwrap();
    });
    let last = finished.recv_timeout(std::time::Duration::from_secs(10));
    assert!(last.is_ok(), "the call in cell 1 did not return: {last:?}");
    let (last, head) = last.unwrap();
    assert!(!last.is_allowed(), "3 more in cell 14's window: {last:?}");
    assert_eq!(
        head, 14,
        "the walk ends in cell 14, the first cell not sealed"
    );
}

/// Review of the recorded leap (issue 17): after a leap to the end of time and its rewind
/// (cells `[2, end)` never reached), a second, short leap past the horizon and its rewind leave
/// no cell of the leaped era's range skippable above the second leap's head, for the limiter's
/// life. 60 and 6,000 cells of 1 s (horizon `h`: 60, 6,000), limit 1,000,000: cell 1 takes 1,
/// the leaped clock takes 1 in two cells near the end of time, a call in cell 2 rewinds the
/// ring; then the second leap reaches cell `3 + 2h`, in one raise (recorded: the gap `(2, 3 +
/// 2h)`) or in raises of `h` cells (none recorded, and the top gap `(raised_from, 3 + 2h)` is
/// inverted: `raised_from` stays at the leaped era's `end`); a call in cell 3 rewinds it. The
/// second rewind narrows the range to the recorded gap (`[3, 3 + 2h)`) or empties it, so a
/// quiet peek 3 windows after a call 10 windows on reads its window, one slot word a cell
/// (60, 6,000). Cells above the head a rewind moves back from were not held in its epoch
/// either (between two rewinds `head` only rises), so the gap `(3 + 2h, u64::MAX)` is as exact
/// as the other two, and with the leaped era's range `[2, end)` leaves `[4 + 2h, end)`: each
/// such peek should read at most `2 log2(cells) + 4` slot words. It read 60, 60, 6,000, 6,000;
/// now a rewind takes, of its three gaps, the one with the most cells below `rewound_from`
/// (`narrow_unreached`), here the one above its head: 1 slot word each (its own cell).
#[test]
fn a_quiet_peek_after_a_leap_and_a_second_short_leap_reads_o_log_cells_slot_words() {
    const SECOND: u64 = 1_000_000_000;
    let mut reads = Vec::new();
    for cells in [60u32, 6_000] {
        for in_steps in [false, true] {
            let limit = 1_000_000;
            let window = Duration::from_secs(u64::from(cells));
            let config = super::SlidingWindow::with_parts(limit, window, cells, 4).unwrap();
            let w = SlidingWindowLimiter::from_config(&config, ManualClock::new());
            let h = w.horizon;
            assert_eq!(h, u64::from(cells));
            let end = u64::MAX / SECOND - u64::from(cells);
            let second = 3 + 2 * h;
            let mut history = vec![1, end, end + 1, 2];
            if in_steps {
                history.extend([2 + h, 2 + 2 * h]);
            }
            history.extend([second, 3]);
            for cell in history {
                assert!(w.try_acquire_at(1, cell * SECOND).unwrap().is_allowed());
            }
            assert_eq!(
                w.head.cell.load(crate::sync::Ordering::SeqCst),
                3,
                "rewound"
            );
            let start = second + 10 * u64::from(cells);
            assert!(w.try_acquire_at(1, start * SECOND).unwrap().is_allowed());
            let cell = start + 3 * u64::from(cells);
            let now = cell * SECOND + 7;
            assert_eq!(w.closed_by_scan(cell).sum(), 0, "a quiet window");
            let (read, peek) = visits(|| w.peek_at(1, now).unwrap());
            let left = u64::from(limit) - 1;
            let reset = (cell + u64::from(cells)) * SECOND - now;
            assert_eq!(peek, Decision::allow(u64::from(limit), left, reset));
            assert_eq!(w.try_acquire_at(1, now).unwrap(), peek, "the call");
            reads.push((cells, in_steps, read, read <= 2 * log2(cells) + 4));
        }
    }
    assert!(
        reads.iter().all(|&(.., within)| within),
        "(cells, second leap in steps, slot words read, within): {reads:?}"
    );
}

/// The history of [`a_call_that_rewinds_after_a_walked_forward_rewind_returns`] up to its last
/// call (also `hunt::a_call_behind_a_walked_forward_rewind_rewalks_at_most_the_ring`'s): 8
/// cells of 10 s, limit 3, 1 future cell; 3 taken in cell 16, a refusal in cell 19, a lease
/// asked for (and refused) with `set` putting the clock at cell 10, a leap near the end of
/// time, and a call in cell 8 that rewinds the ring and walks forward to cell 14 (cells 1..=13
/// sealed).
pub(super) fn after_a_walked_forward_rewind<C: crate::clock::Clock>(
    clock: C,
    set: impl FnOnce(u64),
) -> SlidingWindowLimiter<C> {
    use crate::lease::LeaseSource;
    let config = super::SlidingWindow::with_parts(3, Duration::from_secs(80), 8, 1).unwrap();
    let w = SlidingWindowLimiter::from_config(&config, clock);
    assert!(w.try_acquire_at(3, 161_405_414_753).unwrap().is_allowed());
    assert!(!w.try_acquire_at(3, 191_540_193_662).unwrap().is_allowed());
    set(109_085_858_983);
    assert_eq!(w.take(2, 2, u64::MAX).unwrap().granted(), 0);
    assert!(
        w.try_acquire_at(2, 18_446_743_898_231_547_727)
            .unwrap()
            .is_allowed()
    );
    assert!(w.try_acquire_at(2, 89_575_380_630).unwrap().is_allowed());
    w
}
