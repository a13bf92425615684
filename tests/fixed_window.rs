//! FixedWindow on ManualClock: exact decisions, edges, anchors, wrap-around, lagging clocks.

use std::time::Duration;

use floodgate::{
    AcquireError, Anchor, AtomicLimiter, ConfigError, FixedWindow, Limiter, ManualClock,
};

/// The window tag's mask: tags count modulo 2^40 (the packed window word's layout, see
/// `src/packed.rs`).
const TAG_MASK: u64 = (1 << 40) - 1;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;
/// Anchored 1 s windows count their start in units of 2^13 ns (1e9 >> 13 is in [2^16, 2^17)).
const UNIT_1S: u64 = 1 << 13;

fn round_up(t: u64) -> u64 {
    t.div_ceil(UNIT_1S) * UNIT_1S
}

fn limiter(
    limit: u32,
    window: Duration,
    anchor: Anchor,
    start: u64,
) -> (AtomicLimiter<FixedWindow, ManualClock>, ManualClock) {
    let clock = ManualClock::starting_at(start);
    let algorithm = FixedWindow::with_anchor(limit, window, anchor).unwrap();
    (AtomicLimiter::with_clock(algorithm, clock.clone()), clock)
}

/// (allowed, remaining, retry_after ns, reset_after ns)
fn take(l: &AtomicLimiter<FixedWindow, ManualClock>, n: u32) -> (bool, u64, u64, u64) {
    let d = l.try_acquire(n).unwrap();
    (
        d.is_allowed(),
        d.remaining(),
        d.retry_after().as_nanos() as u64,
        d.reset_after().as_nanos() as u64,
    )
}

#[test]
fn anchored_exact_sequence() {
    let t0 = 1000 * UNIT_1S;
    let (l, clock) = limiter(3, Duration::from_secs(1), Anchor::FirstRequest, t0);
    assert_eq!(take(&l, 1), (true, 2, 0, SEC));
    assert_eq!(take(&l, 1), (true, 1, 0, SEC));
    assert_eq!(take(&l, 1), (true, 0, 0, SEC));
    assert_eq!(take(&l, 1), (false, 0, SEC, SEC));
    clock.advance_nanos(SEC - 1);
    assert_eq!(take(&l, 1), (false, 0, 1, 1));
    clock.advance_nanos(1);
    // A new window opens at t0 + 1 s, rounded up to the next 8192 ns unit.
    let opened = round_up(t0 + SEC);
    assert!(opened > t0 + SEC && opened - (t0 + SEC) < UNIT_1S);
    assert_eq!(take(&l, 2), (true, 1, 0, opened + SEC - (t0 + SEC)));
}

#[test]
fn anchored_window_starts_at_the_first_request_not_at_creation() {
    let (l, clock) = limiter(1, Duration::from_secs(1), Anchor::FirstRequest, 0);
    clock.set(10 * SEC + 500 * MS); // no request for 10.5 s
    assert!(take(&l, 1).0);
    clock.set(11 * SEC + 400 * MS); // 0.9 s into the window that opened at 10.5 s
    let (allowed, _, retry, _) = take(&l, 1);
    assert!(!allowed);
    let opened = round_up(10 * SEC + 500 * MS);
    assert_eq!(opened, 10_500_005_888);
    assert_eq!(retry, opened + SEC - (11 * SEC + 400 * MS));
    clock.set(opened + SEC - 1);
    assert!(!take(&l, 1).0);
    clock.set(opened + SEC);
    assert!(take(&l, 1).0);
}

#[test]
fn aligned_windows_follow_wall_clock_boundaries() {
    let (l, clock) = limiter(2, Duration::from_secs(60), Anchor::WallClock, 30 * SEC);
    assert_eq!(take(&l, 2), (true, 0, 0, 30 * SEC));
    assert_eq!(take(&l, 1), (false, 0, 30 * SEC, 30 * SEC));
    clock.set(60 * SEC);
    assert_eq!(take(&l, 1), (true, 1, 0, 60 * SEC));
}

#[test]
fn the_edge_burst_fixed_windows_allow() {
    // The seeds' 0:59 / 1:00 burst: 2 × limit inside two seconds, by design of fixed windows.
    let (l, clock) = limiter(100, Duration::from_secs(60), Anchor::WallClock, 59 * SEC);
    let first = (0..100).filter(|_| take(&l, 1).0).count();
    clock.set(60 * SEC);
    let second = (0..100).filter(|_| take(&l, 1).0).count();
    assert_eq!(first + second, 200);
    assert!(!take(&l, 1).0);
}

#[test]
fn permits_above_one_and_bad_requests() {
    let (l, _clock) = limiter(5, Duration::from_secs(1), Anchor::WallClock, 0);
    assert_eq!(take(&l, 3), (true, 2, 0, SEC));
    assert_eq!(take(&l, 3), (false, 2, SEC, SEC));
    assert_eq!(take(&l, 2), (true, 0, 0, SEC));
    assert_eq!(l.try_acquire(0), Err(AcquireError::ZeroPermits));
    assert_eq!(
        l.try_acquire(6),
        Err(AcquireError::ExceedsCapacity {
            requested: 6,
            capacity: 5
        })
    );
    assert_eq!(
        l.acquire(6),
        Err(AcquireError::ExceedsCapacity {
            requested: 6,
            capacity: 5
        })
    );
}

#[test]
fn set_limit_mid_window() {
    let (l, _clock) = limiter(5, Duration::from_secs(1), Anchor::WallClock, 0);
    assert_eq!(take(&l, 3).1, 2);
    l.set_limit(2).unwrap();
    assert_eq!(take(&l, 1), (false, 0, SEC, SEC));
    l.set_limit(10).unwrap();
    assert_eq!(take(&l, 7), (true, 0, 0, SEC));
    assert_eq!(l.set_limit(0), Err(ConfigError::ZeroLimit));
    assert_eq!(
        l.set_limit(1 << 24),
        Err(ConfigError::LimitTooLarge {
            limit: 1 << 24,
            max: (1 << 24) - 1
        })
    );
    assert_eq!(l.limit(), 10);
}

#[test]
fn config_errors() {
    let w = Duration::from_secs(1);
    assert_eq!(FixedWindow::new(0, w).unwrap_err(), ConfigError::ZeroLimit);
    assert_eq!(
        FixedWindow::new(1, Duration::ZERO).unwrap_err(),
        ConfigError::ZeroPeriod
    );
    assert_eq!(
        FixedWindow::new(1, Duration::MAX).unwrap_err(),
        ConfigError::DurationOutOfRange {
            what: "fixed window",
            value: Duration::MAX,
            min: Duration::from_nanos(1),
            max: Duration::from_nanos(u64::MAX),
        }
    );
    assert!(matches!(
        FixedWindow::aligned(u32::MAX, w).unwrap_err(),
        ConfigError::LimitTooLarge { .. }
    ));
    assert!(FixedWindow::new((1 << 24) - 1, w).is_ok());
}

#[test]
fn a_clock_read_behind_the_stored_window_never_moves_it_back_nor_refuses() {
    // Aligned: another core stored window 2; our read lags into window 1.
    let (l, clock) = limiter(3, Duration::from_secs(1), Anchor::WallClock, 2 * SEC);
    assert!(take(&l, 1).0);
    clock.set(2 * SEC - 10);
    // Counted in the stored (later) window, not a fresh window 1; allowed while room remains.
    assert_eq!(take(&l, 1), (true, 1, 0, SEC + 10));
    clock.set(2 * SEC);
    assert_eq!(take(&l, 1), (true, 0, 0, SEC));
    assert!(!take(&l, 1).0);

    // Anchored: a read 100 ns before the window's start.
    let (l, clock) = limiter(2, Duration::from_secs(1), Anchor::FirstRequest, 5 * UNIT_1S);
    assert!(take(&l, 1).0);
    clock.set(5 * UNIT_1S - 100);
    assert!(take(&l, 1).0);
    clock.set(5 * UNIT_1S);
    assert!(!take(&l, 1).0, "both requests count in the one window");
}

#[test]
fn aligned_tag_wraps_at_2_pow_40_windows() {
    let w = MS; // 1 ms windows: index 2^40 - 1 is at about 34.8 years.
    let last = TAG_MASK * w;
    let (l, clock) = limiter(2, Duration::from_nanos(w), Anchor::WallClock, last);
    assert!(take(&l, 2).0);
    assert!(!take(&l, 1).0);
    clock.set(last + w); // index 2^40: tag 0
    assert_eq!(take(&l, 1), (true, 1, 0, w));
    // The documented aliasing: untouched for exactly 2^40 windows reads as current.
    clock.set(last + w + (TAG_MASK + 1) * w);
    assert_eq!(take(&l, 1), (true, 0, 0, w));
    assert!(!take(&l, 1).0);
}

#[test]
fn anchored_tag_aliasing_lasts_at_most_one_window() {
    let t0 = 7 * UNIT_1S;
    let (l, clock) = limiter(1, Duration::from_secs(1), Anchor::FirstRequest, t0);
    assert!(take(&l, 1).0);
    let wrap = (TAG_MASK + 1) * UNIT_1S; // 2^40 units: about 104 days
    clock.set(t0 + wrap);
    assert!(
        !take(&l, 1).0,
        "documented aliasing: the old window reads as current"
    );
    clock.set(t0 + wrap + SEC);
    assert!(take(&l, 1).0, "but never beyond its end");
    // An idle time landing in the 'ahead' half, beyond the lag horizon, reads as a leaping
    // clock's window: its count is folded into the window opening now, never a future window,
    // and it holds for one window only.
    let (l2, c2) = limiter(1, Duration::from_secs(1), Anchor::FirstRequest, t0);
    assert!(take(&l2, 1).0);
    let folded_at = t0 + wrap / 2 + wrap / 4;
    c2.set(folded_at);
    assert!(
        !take(&l2, 1).0,
        "the folded count holds in the window opening now"
    );
    c2.set(folded_at + SEC + UNIT_1S);
    assert!(take(&l2, 1).0, "and never beyond its end");
}

#[test]
fn the_end_of_the_timeline_saturates() {
    let (l, clock) = limiter(1, Duration::from_secs(1), Anchor::WallClock, u64::MAX - 5);
    assert!(take(&l, 1).0);
    let (allowed, _, retry, _) = take(&l, 1);
    assert!(!allowed && retry >= 1);
    clock.set(u64::MAX);
    let _ = take(&l, 1);
    let (l, _) = limiter(
        1,
        Duration::from_secs(1),
        Anchor::FirstRequest,
        u64::MAX - 5,
    );
    assert!(take(&l, 1).0);
    assert!(!take(&l, 1).0);
}

#[test]
fn acquire_sleeps_until_the_window_ends() {
    let (l, clock) = limiter(1, Duration::from_secs(1), Anchor::WallClock, 250 * MS);
    assert_eq!(l.acquire(1).unwrap(), Duration::ZERO);
    assert_eq!(l.acquire(1).unwrap(), Duration::from_millis(750));
    assert_eq!(clock.take_sleeps(), vec![Duration::from_millis(750)]);
    let d = l.try_acquire_for(1, Duration::from_millis(999)).unwrap();
    assert!(!d.is_allowed());
    assert!(
        clock.sleeps().is_empty(),
        "a wait that does not fit is not slept"
    );
    assert!(
        l.try_acquire_for(1, Duration::from_secs(1))
            .unwrap()
            .is_allowed()
    );
    assert_eq!(clock.take_sleeps(), vec![Duration::from_secs(1)]);
}

#[test]
fn peek_and_reset() {
    let (l, _clock) = limiter(2, Duration::from_secs(1), Anchor::WallClock, 0);
    let fresh = l.peek(2).unwrap();
    assert!(fresh.is_allowed() && fresh.remaining() == 0);
    assert_eq!(l.peek(2).unwrap(), fresh, "peek consumes nothing");
    assert!(take(&l, 2).0);
    assert!(!l.peek(1).unwrap().is_allowed());
    l.reset();
    assert_eq!(take(&l, 2), (true, 0, 0, SEC));
}

#[test]
fn aligned_ahead_is_lag_up_to_ten_seconds_and_folded_beyond() {
    // 1 ms windows. A read 5 s behind the stored window is lag: counted in the stored window.
    let start = 20_000 * MS;
    let (l, clock) = limiter(2, Duration::from_millis(1), Anchor::WallClock, start);
    assert!(take(&l, 2).0);
    clock.set(start - 5 * SEC);
    assert!(
        !take(&l, 1).0,
        "a lagging read is counted in the newer, full window"
    );
    // Idle for 2^39 + 5 windows: the stored tag reads as 2^39 − 5 windows *ahead*, beyond the
    // lag horizon: a leaping clock's window (here an aliased one). Its count is folded into the
    // current window — nothing forgotten — and holds only until that window ends.
    let (l, clock) = limiter(2, Duration::from_millis(1), Anchor::WallClock, start);
    assert!(take(&l, 2).0);
    let at = start + ((1u64 << 39) + 5) * MS;
    clock.set(at);
    assert_eq!(take(&l, 1), (false, 0, MS, MS));
    clock.set(at + MS);
    assert_eq!(take(&l, 1), (true, 1, 0, MS));
}
