//! `Sharded`: exact behaviour on a ManualClock, how early it denies under unbalanced load, bad
//! input, and a real-threads stress test of the global bound.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use floodgate::clock::MAX_CLOCK_LAG_NANOS;
use floodgate::{AcquireError, ConfigError, Limiter, ManualClock, Sharded};

#[allow(dead_code)] // the leap is not used here
#[path = "support/gated_clock.rs"]
mod gated_clock;
use gated_clock::GatedClock;

const SECOND: Duration = Duration::from_secs(1);

fn sharded(limit: u32, stripes: usize) -> (Sharded<ManualClock>, ManualClock) {
    let clock = ManualClock::starting_at(10_000_000_000); // 10 s: window index 10
    let limiter = Sharded::with_clock(limit, SECOND, stripes, clock.clone()).unwrap();
    (limiter, clock)
}

#[test]
fn balanced_load_admits_exactly_the_limit_per_window() {
    let (limiter, clock) = sharded(12, 4);
    assert_eq!(limiter.stripes(), 4);
    for round in 0..3 {
        let mut admitted = 0;
        for call in 0..40 {
            if limiter.try_acquire_on(call % 4, 1).unwrap().is_allowed() {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 12, "round {round}");
        clock.advance(SECOND);
    }
}

#[test]
fn one_permit_requests_are_never_denied_early_however_unbalanced() {
    // Every request comes home to stripe 0 (share 3 of 12): the rest is borrowed.
    let (limiter, _clock) = sharded(12, 4);
    for taken in 1..=12u64 {
        let d = limiter.try_acquire_on(0, 1).unwrap();
        assert!(d.is_allowed(), "request {taken} denied early");
        assert_eq!(d.limit(), 12);
    }
    let denied = limiter.try_acquire_on(0, 1).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(denied.remaining(), 0);
    // Every stripe is full: any home is denied, and the "all full" hint answers the same.
    for home in 0..4 {
        assert!(!limiter.try_acquire_on(home, 1).unwrap().is_allowed());
    }
}

#[test]
fn multi_permit_requests_may_be_denied_with_at_most_stripes_times_n_minus_one_left() {
    // 4 stripes of 3; requests of 2 leave 1 permit stranded in each stripe.
    let (limiter, _clock) = sharded(12, 4);
    let mut admitted = 0;
    while limiter.try_acquire_on(0, 2).unwrap().is_allowed() {
        admitted += 2;
    }
    assert_eq!(admitted, 8);
    let denied = limiter.try_acquire_on(0, 2).unwrap();
    assert_eq!(
        denied.remaining(),
        4,
        "stripes x (n - 1) = 4 left, scattered"
    );
    // The stranded permits are still there for requests that fit.
    for _ in 0..4 {
        assert!(limiter.try_acquire_on(0, 1).unwrap().is_allowed());
    }
    assert!(!limiter.try_acquire_on(3, 1).unwrap().is_allowed());
}

#[test]
fn a_denial_says_when_the_window_ends() {
    let (limiter, clock) = sharded(2, 2);
    clock.advance(Duration::from_millis(250));
    assert!(
        limiter.try_acquire(2).is_err(),
        "2 is above one stripe's share"
    );
    assert!(limiter.try_acquire_on(1, 1).unwrap().is_allowed());
    let d = limiter.try_acquire_on(1, 1).unwrap();
    assert!(d.is_allowed(), "borrowed from stripe 0");
    assert_eq!(d.reset_after(), Duration::from_millis(750));
    let denied = limiter.try_acquire_on(0, 1).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Duration::from_millis(750));
    assert_eq!(denied.limit(), 2);
    clock.advance(Duration::from_millis(750));
    assert!(limiter.try_acquire_on(0, 1).unwrap().is_allowed());
}

#[test]
fn stripes_are_a_power_of_two_and_at_most_the_limit() {
    let clock = ManualClock::new();
    let s = |limit, stripes| Sharded::with_clock(limit, SECOND, stripes, clock.clone()).unwrap();
    assert_eq!(s(100, 3).stripes(), 4);
    assert_eq!(s(100, 16).stripes(), 16);
    assert_eq!(s(5, 16).stripes(), 4);
    assert_eq!(s(1, 16).stripes(), 1);
    assert_eq!(s(10, 4).max_request(), 3);
}

#[test]
fn bad_input_is_an_error() {
    let clock = ManualClock::new();
    assert_eq!(
        Sharded::with_clock(0, SECOND, 2, clock.clone()).unwrap_err(),
        ConfigError::ZeroLimit
    );
    assert_eq!(
        Sharded::with_clock(5, Duration::ZERO, 2, clock.clone()).unwrap_err(),
        ConfigError::ZeroPeriod
    );
    assert!(matches!(
        Sharded::with_clock(5, SECOND, 0, clock.clone()).unwrap_err(),
        ConfigError::Invalid { .. }
    ));
    let limiter = Sharded::with_clock(8, SECOND, 4, clock).unwrap();
    assert_eq!(
        limiter.try_acquire(0).unwrap_err(),
        AcquireError::ZeroPermits
    );
    assert_eq!(
        limiter.try_acquire(3).unwrap_err(),
        AcquireError::ExceedsCapacity {
            requested: 3,
            capacity: 2
        }
    );
    assert!(matches!(
        limiter.set_limit(3).unwrap_err(),
        ConfigError::Invalid { .. }
    ));
    assert_eq!(limiter.limit(), 8, "a rejected limit leaves the old one");
}

#[test]
fn set_limit_resplits_live() {
    let (limiter, _clock) = sharded(4, 2);
    for _ in 0..4 {
        assert!(limiter.try_acquire_on(0, 1).unwrap().is_allowed());
    }
    assert!(!limiter.try_acquire_on(0, 1).unwrap().is_allowed());
    limiter.set_limit(10).unwrap();
    assert_eq!(limiter.limit(), 10);
    let mut more = 0;
    while limiter.try_acquire_on(1, 1).unwrap().is_allowed() {
        more += 1;
    }
    assert_eq!(
        more, 6,
        "the raise clears the all-full hint; counts taken stay taken"
    );
}

#[test]
fn acquire_sleeps_until_the_next_window() {
    let (limiter, clock) = sharded(2, 2);
    clock.advance(Duration::from_millis(400));
    assert_eq!(limiter.acquire(1).unwrap(), Duration::ZERO);
    assert_eq!(limiter.acquire(1).unwrap(), Duration::ZERO);
    assert_eq!(limiter.acquire(1).unwrap(), Duration::from_millis(600));
    assert_eq!(clock.sleeps(), vec![Duration::from_millis(600)]);
}

/// Real threads, real contention, a fixed ManualClock time per round: the permits admitted in a
/// window must equal the limit exactly (never more; and for one-permit requests, never fewer).
#[test]
fn stress_real_threads_admit_exactly_the_limit_per_window() {
    const THREADS: usize = 4;
    const LIMIT: u32 = 5_000;
    let (limiter, clock) = sharded(LIMIT, 4);
    for round in 0..4 {
        let admitted = AtomicU64::new(0);
        std::thread::scope(|scope| {
            for worker in 0..THREADS {
                let (limiter, admitted) = (&limiter, &admitted);
                scope.spawn(move || {
                    let mut mine = 0;
                    for call in 0..4_000usize {
                        // Round 0 and 2: each thread on its home stripe; 1 and 3: all piled on
                        // stripe 0 (the most unbalanced load), so borrowing races with owners.
                        let home = if round % 2 == 0 { worker } else { call % 2 };
                        if limiter.try_acquire_on(home, 1).unwrap().is_allowed() {
                            mine += 1;
                        }
                    }
                    // Relaxed: a tally read after the scope joins every thread.
                    admitted.fetch_add(mine, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(admitted.into_inner(), u64::from(LIMIT), "round {round}");
        clock.advance(SECOND);
    }
}

#[test]
fn stress_thread_homes_through_the_limiter_trait() {
    let (limiter, _clock) = sharded(3_000, 8);
    let admitted = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for _ in 0..6 {
            scope.spawn(|| {
                let mine = (0..1_000)
                    .filter(|_| limiter.try_acquire(1).unwrap().is_allowed())
                    .count() as u64;
                // Relaxed: a tally read after the scope joins every thread.
                admitted.fetch_add(mine, Ordering::Relaxed);
            });
        }
    });
    assert_eq!(admitted.into_inner(), 3_000);
}

/// A caller preempted between its clock read and its first stripe for longer than the lag
/// horizon, then borrowing: every stripe it touches is "ahead" of its read by more than the
/// horizon, and must be decided on a fresh read (the present, all full), never folded back to the
/// stale read's window (which would let the next present caller re-open that stripe).
/// `try_acquire_on` reuses its first read for the borrowed stripes; each stripe's `update_timed`
/// must still re-read before folding. (The real-clock stress's fault clock once injected a
/// beyond-the-horizon lag on that *re*-read too: a clock 10 s behind the other cores, outside the
/// time model; see `tests/support/fault_clock.rs`.)
#[test]
fn a_caller_stalled_past_the_horizon_borrows_without_reopening_a_stripe() {
    let start = 20_000_000_000;
    let clock = GatedClock::starting_at(start);
    // One permit per stripe: every stripe is full after one admission.
    let limiter = Sharded::with_clock(4, SECOND, 4, clock.clone()).unwrap();
    std::thread::scope(|scope| {
        clock.hold_next_read();
        let stalled = scope.spawn(|| limiter.try_acquire_on(0, 1).unwrap());
        clock.wait_until_held();
        // The present, past the horizon (and a whole window) after the stalled read: every
        // stripe is filled.
        clock.advance(MAX_CLOCK_LAG_NANOS + 2_000_000_000);
        for stripe in 0..4 {
            assert!(limiter.try_acquire_on(stripe, 1).unwrap().is_allowed());
        }
        clock.release();
        let decision = stalled.join().unwrap();
        assert!(!decision.is_allowed(), "the stalled caller found room");
        assert_eq!(decision.remaining(), 0);
    });
    for stripe in 0..4 {
        assert!(
            !limiter.try_acquire_on(stripe, 1).unwrap().is_allowed(),
            "stripe {stripe} was re-opened after the stalled caller"
        );
    }
}

#[test]
fn a_denial_whose_home_stripe_is_empty_still_reports_the_windows_reset() {
    // Shares 3, 3, 2, 2. Stripes 0 and 1 are spent; a request of 3 coming home to stripe 2
    // (share 2, empty) is denied by every stripe. The window holds 6 permits until it ends, so
    // the limiter is not back to full capacity before then: reset_after is the window's end
    // (it was the empty home stripe's own reset, 0).
    let (limiter, clock) = sharded(10, 4);
    assert!(limiter.try_acquire_on(0, 3).unwrap().is_allowed());
    assert!(limiter.try_acquire_on(1, 3).unwrap().is_allowed());
    clock.advance(Duration::from_millis(100));
    let denied = limiter.try_acquire_on(2, 3).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(denied.remaining(), 4);
    assert_eq!(denied.retry_after(), Duration::from_millis(900));
    assert_eq!(denied.reset_after(), Duration::from_millis(900));
}

/// A request above `max_request` (the largest stripe share) is refused with a message that
/// names what one request can take: the limit (4 here) is not what the request exceeded, so
/// "the capacity is 2" read as a contradiction of `limit()`. Found by QA.
#[test]
fn a_request_above_max_request_says_what_one_request_can_take() {
    let (limiter, _clock) = sharded(4, 2);
    assert_eq!((limiter.limit(), limiter.max_request()), (4, 2));
    let error = limiter.try_acquire(3).unwrap_err();
    assert_eq!(
        error,
        AcquireError::ExceedsCapacity {
            requested: 3,
            capacity: 2
        }
    );
    let text = error.to_string();
    assert_eq!(
        text,
        "3 permits can never be granted: one request can take at most 2"
    );
    assert!(!text.contains("capacity is"), "{text}");
}

/// Every permit the window still admits, one at a time, from each home stripe in turn.
fn drain(limiter: &Sharded<ManualClock>) -> u64 {
    let mut more = 0;
    for home in 0..limiter.stripes() {
        while limiter.try_acquire_on(home, 1).unwrap().is_allowed() {
            more += 1;
        }
    }
    more
}

/// Lowering the limit mid-window: once `set_limit` has returned, the window admits no more than
/// max(what it had admitted, the new limit) in total, whichever stripes took the permits
/// already taken (before the fix, a stripe over its new share kept its excess while every other
/// stripe still admitted its whole new share: 16 over 4 stripes, 4 taken on stripe 0, lowered
/// to 4, admitted 3 more).
#[test]
fn lowering_the_limit_caps_the_window_at_the_larger_of_taken_and_new() {
    // (limit, stripes, permits taken on each stripe before the change, new limit)
    let cases: [(u32, usize, &[u64], u32); 7] = [
        (16, 4, &[4, 0, 0, 0], 4),
        (16, 4, &[3, 1, 0, 0], 8),
        (16, 4, &[4, 4, 0, 0], 4),
        (16, 4, &[1, 1, 1, 1], 8),
        (16, 4, &[4, 4, 4, 4], 4),
        (
            10,
            2,
            &[5, 0],
            3, /* below the stripes' count is refused; 3 ≥ 2 */
        ),
        (1000, 8, &[125, 125, 125, 0, 0, 0, 0, 0], 100),
    ];
    for (limit, stripes, taken, lower) in cases {
        let (limiter, clock) = sharded(limit, stripes);
        assert_eq!(limiter.stripes(), stripes);
        for (home, &count) in taken.iter().enumerate() {
            for _ in 0..count {
                assert!(limiter.try_acquire_on(home, 1).unwrap().is_allowed());
            }
        }
        let before: u64 = taken.iter().sum();
        limiter.set_limit(lower).unwrap();
        assert_eq!(limiter.limit(), u64::from(lower));
        let more = drain(&limiter);
        let case = format!("{limit} over {stripes}, taken {taken:?}, lowered to {lower}");
        assert_eq!(before + more, before.max(u64::from(lower)), "{case}");
        // The next window has the new limit, all of it.
        clock.advance(SECOND);
        assert_eq!(drain(&limiter), u64::from(lower), "{case}: next window");
    }
}

/// A stripe holding the next window (a caller whose clock read later took permits there) when
/// `set_limit` reads the clock in the window before: that window is settled too, so the next
/// window admits no more than max(what it had admitted, the new limit).
#[test]
fn lowering_the_limit_settles_a_window_a_stripe_holds_ahead() {
    let (limiter, clock) = sharded(16, 4);
    clock.set(11_000_000_000); // window 11, as a later core reads it
    for _ in 0..4 {
        assert!(limiter.try_acquire_on(0, 1).unwrap().is_allowed());
    }
    clock.set(10_500_000_000); // set_limit's read lags, in window 10
    limiter.set_limit(4).unwrap();
    clock.set(11_000_000_000);
    assert_eq!(
        drain(&limiter),
        0,
        "window 11 already holds 4 ≥ the new limit"
    );
    clock.advance(SECOND);
    assert_eq!(drain(&limiter), 4);
}

/// `set_limit`'s clock read already in the next window while other cores still decide in the
/// window before (their reads lag, within the horizon): that window is settled too, so it admits
/// no more than max(what it had admitted, the new limit). Before the fix only `set_limit`'s own
/// window and windows ahead of it were settled: window 10, lowered to 4 with 4 taken, admitted 3
/// more to the lagging readers (stripes 1 to 3's new shares).
#[test]
fn lowering_the_limit_settles_the_window_lagging_readers_are_still_in() {
    let (limiter, clock) = sharded(16, 4);
    clock.set(10_900_000_000); // window 10
    for _ in 0..4 {
        assert!(limiter.try_acquire_on(0, 1).unwrap().is_allowed());
    }
    clock.set(11_100_000_000); // set_limit's read leads, in window 11
    limiter.set_limit(4).unwrap();
    clock.set(10_950_000_000); // other cores' reads, 0.15 s behind: still window 10
    assert_eq!(
        drain(&limiter),
        0,
        "window 10 already admitted 4 = the new limit"
    );
    clock.set(11_100_000_000);
    assert_eq!(drain(&limiter), 4, "window 11 has the new limit, all of it");
    clock.set(12_000_000_000);
    assert_eq!(drain(&limiter), 4);
}

/// A stripe charged for a window ahead (one another stripe holds, read by a later core) keeps the
/// count it holds for the window in progress: readers there decide in the charged window, and the
/// window in progress admits no more than max(what it had admitted, the new limit). Before the
/// fix the charge replaced stripe 0's two permits of window 10 with one of window 11, and window
/// 10 admitted a ninth permit after being lowered to 8 with 8 taken.
#[test]
fn a_charge_for_a_window_ahead_keeps_the_count_of_the_window_in_progress() {
    let (limiter, clock) = sharded(16, 4);
    clock.set(10_500_000_000); // window 10
    for home in 0..4 {
        for _ in 0..2 {
            assert!(limiter.try_acquire_on(home, 1).unwrap().is_allowed());
        }
    }
    clock.set(11_000_000_000); // a later core's read, in window 11
    for _ in 0..3 {
        assert!(limiter.try_acquire_on(3, 1).unwrap().is_allowed());
    }
    clock.set(10_600_000_000); // back in window 10 (a lag of 0.4 s, within the horizon)
    limiter.set_limit(8).unwrap(); // window 10 had admitted 8; window 11, 3 (1 over its share)
    assert_eq!(
        drain(&limiter),
        0,
        "window 10 already admitted the new limit"
    );
    clock.set(11_000_000_000);
    let window_11 = 3 + drain(&limiter);
    assert!(window_11 <= 8, "window 11 admitted {window_11}");
    clock.set(12_000_000_000);
    assert_eq!(drain(&limiter), 8);
}

/// Raising the limit after lowering it in the same window: the window admits up to the raised
/// limit less what the lowering charged (the charged permits are counts, like taken ones), and
/// the next window the whole raised limit.
#[test]
fn raising_after_lowering_in_one_window_keeps_the_charge_until_the_window_ends() {
    let (limiter, clock) = sharded(16, 4);
    for _ in 0..4 {
        assert!(limiter.try_acquire_on(0, 1).unwrap().is_allowed());
    }
    limiter.set_limit(4).unwrap(); // charges 3: one on each other stripe
    limiter.set_limit(16).unwrap();
    assert_eq!(drain(&limiter), 16 - 4 - 3);
    clock.advance(SECOND);
    assert_eq!(drain(&limiter), 16);
}

/// What [`HookClock`] runs at its first sleep.
type SleepHook = std::sync::Arc<std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A clock that runs a hook (once) when a caller sleeps on it, before the sleep moves time: a
/// reconfiguration that lands while a caller waits in `acquire`, without threads or sleeps.
#[derive(Clone)]
struct HookClock {
    time: ManualClock,
    on_sleep: SleepHook,
}

impl floodgate::Clock for HookClock {
    fn now_nanos(&self) -> u64 {
        self.time.now_nanos()
    }
    fn sleep(&self, duration: Duration) {
        let hook = self.on_sleep.lock().unwrap().take();
        if let Some(hook) = hook {
            hook();
        }
        self.time.sleep(duration);
    }
}

/// `limit` over `stripes` on a [`HookClock`] at 10 s, with `reconfigure` run at the first sleep.
fn sharded_with_hook(
    limit: u32,
    stripes: usize,
    reconfigure: impl FnOnce(&Sharded<HookClock>) + Send + 'static,
) -> std::sync::Arc<Sharded<HookClock>> {
    let clock = HookClock {
        time: ManualClock::starting_at(10_000_000_000),
        on_sleep: Default::default(),
    };
    let limiter =
        std::sync::Arc::new(Sharded::with_clock(limit, SECOND, stripes, clock.clone()).unwrap());
    let weak = std::sync::Arc::downgrade(&limiter);
    *clock.on_sleep.lock().unwrap() = Some(Box::new(move || reconfigure(&weak.upgrade().unwrap())));
    assert_eq!(limiter.clock().now_nanos(), 10_000_000_000);
    limiter
}

/// `set_limit` while a caller waits in `acquire` for the next window: lowered below its request,
/// the caller gets `ExceedsCapacity` when it wakes (never a wait forever, never permits past the
/// new limit); lowered but still within it, or raised, it is served in the next window, which
/// has the new limit.
#[test]
fn set_limit_while_a_caller_waits_in_acquire() {
    // 8 over 2 stripes (4 + 4), all taken; acquire(4) waits; the limit drops to 4 (2 + 2).
    let limiter = sharded_with_hook(8, 2, |l| l.set_limit(4).unwrap());
    assert!(limiter.try_acquire_on(0, 4).unwrap().is_allowed());
    assert!(limiter.try_acquire_on(1, 4).unwrap().is_allowed());
    assert_eq!(
        limiter.acquire(4).unwrap_err(),
        AcquireError::ExceedsCapacity {
            requested: 4,
            capacity: 2
        }
    );
    // acquire(2) waits; the limit drops to 4: served in the next window, which then has 2 left.
    let limiter = sharded_with_hook(8, 2, |l| l.set_limit(4).unwrap());
    assert!(limiter.try_acquire_on(0, 4).unwrap().is_allowed());
    assert!(limiter.try_acquire_on(1, 4).unwrap().is_allowed());
    assert_eq!(limiter.acquire(2).unwrap(), SECOND);
    let mut more = 0;
    for home in 0..2 {
        while limiter.try_acquire_on(home, 1).unwrap().is_allowed() {
            more += 1;
        }
    }
    assert_eq!(more, 2);
    // Raised while it waits: served at the window's end (the wait announced), with the new
    // limit in that window.
    let limiter = sharded_with_hook(4, 2, |l| l.set_limit(16).unwrap());
    assert!(limiter.try_acquire_on(0, 2).unwrap().is_allowed());
    assert!(limiter.try_acquire_on(1, 2).unwrap().is_allowed());
    assert_eq!(limiter.acquire(2).unwrap(), SECOND);
    assert_eq!(limiter.max_request(), 8);
    assert!(limiter.try_acquire_on(0, 6).unwrap().is_allowed());
}
