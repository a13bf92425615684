//! Async acquire on tokio's paused clock (feature `tokio`).
//!
//! Two ways of keeping the limiter's time and tokio's timer in step, both exact:
//! - [`TokioClock`]: the limiter reads tokio's (paused) time itself; tokio jumps straight to each
//!   timer, in whole milliseconds, so every wait below is exact.
//! - A [`ManualClock`] stepped by hand together with tokio: `clock.advance(d)` then
//!   `tokio::time::advance(d)`, one millisecond at a time, so the test sees each instant and can
//!   assert that the waiting task wakes exactly once, at exactly the announced time.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use floodgate::async_acquire::Fair;
use floodgate::{
    AcquireError, AsyncLimiter, AtomicLimiter, Clock, ConfigError, Decision, FixedWindow, Gcra,
    Keyed, Limiter, ManualClock, Rate, TokenBucket, TokioClock,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const MS: Duration = Duration::from_millis(1);

/// A limiter that counts its attempts, so a test can tell a single wake-up from a spin. It panics
/// past `max_attempts`, so a wrong implementation fails instead of looping.
struct Counting<L> {
    inner: L,
    attempts: AtomicUsize,
    max_attempts: usize,
}

impl<L: Limiter> Counting<L> {
    fn new(inner: L, max_attempts: usize) -> Self {
        Counting {
            inner,
            attempts: AtomicUsize::new(0),
            max_attempts,
        }
    }

    fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }
}

impl<L: Limiter> Limiter for Counting<L> {
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        let attempts = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
        assert!(
            attempts <= self.max_attempts,
            "{attempts} attempts: spinning?"
        );
        self.inner.try_acquire(n)
    }

    fn clock(&self) -> &dyn Clock {
        self.inner.clock()
    }

    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        self.inner.set_limit(limit)
    }

    fn limit(&self) -> u64 {
        self.inner.limit()
    }
}

fn gcra(per_second: u32, burst: u32) -> Gcra {
    Gcra::new(Rate::per_second(per_second), burst).unwrap()
}

/// Moves the ManualClock and then tokio's paused clock by `by`, and lets woken tasks run.
async fn step(clock: &ManualClock, by: Duration) {
    clock.advance(by);
    tokio::time::advance(by).await;
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn waits_exactly_the_announced_time_on_tokio_clock() {
    let limiter = AtomicLimiter::with_clock(gcra(10, 2), TokioClock::starting_at(0));
    let start = Instant::now();
    assert_eq!(limiter.acquire_async(2).await.unwrap(), Duration::ZERO);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(limiter.acquire_async(1).await.unwrap(), 100 * MS);
    assert_eq!(start.elapsed(), 100 * MS);
    // Two permits at 10/s: 200 ms from an empty bucket.
    assert_eq!(limiter.acquire_async(2).await.unwrap(), 200 * MS);
    assert_eq!(start.elapsed(), 300 * MS);
    assert_eq!(limiter.clock().now_nanos(), 300_000_000);
}

#[tokio::test(start_paused = true)]
async fn wakes_once_at_the_announced_instant_in_step_with_a_manual_clock() {
    let clock = ManualClock::new();
    let limiter = Arc::new(Counting::new(
        AtomicLimiter::with_clock(gcra(10, 1), clock.clone()),
        3,
    ));
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    let task = {
        let limiter = Arc::clone(&limiter);
        tokio::spawn(async move { limiter.acquire_async(1).await })
    };
    while limiter.attempts() < 2 {
        tokio::task::yield_now().await; // the task's first attempt: denied, retry after 100 ms
    }
    for elapsed_ms in 1..100 {
        step(&clock, MS).await;
        assert!(!task.is_finished(), "woke early at {elapsed_ms} ms");
        assert_eq!(limiter.attempts(), 2, "attempted again at {elapsed_ms} ms");
    }
    step(&clock, MS).await;
    assert!(task.is_finished(), "not granted at 100 ms");
    assert_eq!(task.await.unwrap().unwrap(), 100 * MS);
    // One denial, one sleep, one grant: no spin, and the runtime thread ran this test meanwhile.
    assert_eq!(limiter.attempts(), 3);
    assert!(
        clock.sleeps().is_empty(),
        "the blocking clock sleep was used"
    );
}

#[tokio::test(start_paused = true)]
async fn a_dropped_future_consumes_nothing() {
    let clock = ManualClock::new();
    let limiter = Arc::new(Counting::new(
        AtomicLimiter::with_clock(gcra(1, 1), clock.clone()),
        2,
    ));
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    let task = {
        let limiter = Arc::clone(&limiter);
        tokio::spawn(async move { limiter.acquire_async(1).await })
    };
    tokio::task::yield_now().await;
    step(&clock, Duration::from_millis(999)).await;
    // It has tried once (denied) and is asleep until 1 s: our try plus its one.
    assert_eq!(limiter.attempts(), 2);
    task.abort(); // dropped while sleeping
    assert!(task.await.unwrap_err().is_cancelled());
    step(&clock, MS).await;
    // The permit that accrued at 1 s is still there: the dropped waiter took nothing.
    assert_eq!(limiter.inner.available(), 1);
    assert!(limiter.inner.try_acquire(1).unwrap().is_allowed());
}

#[tokio::test(start_paused = true)]
async fn a_timeout_around_acquire_either_grants_and_reports_or_consumes_nothing() {
    let limiter = AtomicLimiter::with_clock(gcra(1, 1), TokioClock::starting_at(0));
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    // Cancelled 1 ms before the permit accrues: nothing taken.
    let early = tokio::time::timeout(Duration::from_millis(999), limiter.acquire_async(1)).await;
    assert!(early.is_err());
    tokio::time::sleep(MS).await;
    assert_eq!(limiter.available(), 1);
    assert!(limiter.try_acquire(1).unwrap().is_allowed());
    // Deadline and permit at the same instant: tokio polls the future first, so it is granted,
    // and the grant is reported (the permit is gone because the caller got it).
    let on_time = tokio::time::timeout(Duration::from_secs(1), limiter.acquire_async(1)).await;
    assert_eq!(on_time.unwrap().unwrap(), Duration::from_secs(1));
    assert_eq!(limiter.available(), 0);
}

#[tokio::test(start_paused = true)]
async fn try_acquire_for_async_waits_only_when_the_wait_fits() {
    let limiter = AtomicLimiter::with_clock(
        FixedWindow::new(2, Duration::from_secs(1)).unwrap(),
        TokioClock::starting_at(0),
    );
    let start = Instant::now();
    assert!(limiter.try_acquire(2).unwrap().is_allowed());
    // The window reopens in 1 s: 999 ms is not enough, so no wait at all and nothing consumed.
    let denied = limiter
        .try_acquire_for_async(1, Duration::from_millis(999))
        .await
        .unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(denied.retry_after(), Duration::from_secs(1));
    assert_eq!(start.elapsed(), Duration::ZERO);
    // Exactly enough: waits 1 s and takes the first permit of the next window.
    let granted = limiter
        .try_acquire_for_async(1, Duration::from_secs(1))
        .await
        .unwrap();
    assert!(granted.is_allowed());
    assert_eq!(granted.remaining(), 1);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn impossible_requests_fail_at_once() {
    let limiter = AtomicLimiter::with_clock(gcra(10, 3), TokioClock::starting_at(0));
    let start = Instant::now();
    assert_eq!(
        limiter.acquire_async(0).await,
        Err(AcquireError::ZeroPermits)
    );
    assert_eq!(
        limiter.acquire_async(4).await,
        Err(AcquireError::ExceedsCapacity {
            requested: 4,
            capacity: 3
        })
    );
    assert!(
        limiter
            .try_acquire_for_async(4, Duration::from_secs(60))
            .await
            .is_err()
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(limiter.available(), 3);
}

#[tokio::test(start_paused = true)]
async fn waiters_on_one_limiter_are_granted_one_per_interval() {
    let limiter = Arc::new(AtomicLimiter::with_clock(
        gcra(10, 1),
        TokioClock::starting_at(0),
    ));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move { limiter.acquire_async(1).await.unwrap() })
        })
        .collect();
    let mut waits = Vec::new();
    for task in tasks {
        waits.push(task.await.unwrap());
    }
    waits.sort();
    assert_eq!(waits, vec![Duration::ZERO, 100 * MS, 200 * MS, 300 * MS]);
}

#[tokio::test(start_paused = true)]
async fn keyed_waits_per_key() {
    let keyed: Arc<Keyed<String, _, _>> = Arc::new(
        Keyed::builder(gcra(4, 1))
            .clock(TokioClock::starting_at(0))
            .build()
            .unwrap(),
    );
    let start = Instant::now();
    assert_eq!(keyed.acquire_async("a", 1).await.unwrap(), Duration::ZERO);
    // "b" has its own bucket; "a" waits 250 ms, in a spawned task (the future is Send).
    let a = {
        let keyed = Arc::clone(&keyed);
        tokio::spawn(async move { keyed.acquire_async("a", 1).await })
    };
    assert_eq!(keyed.acquire_async("b", 1).await.unwrap(), Duration::ZERO);
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(a.await.unwrap().unwrap(), 250 * MS);
    assert_eq!(start.elapsed(), 250 * MS);
    // A wait longer than the timeout: denied at once, nothing consumed.
    let denied = keyed.try_acquire_for_async("a", 1, 249 * MS).await.unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(start.elapsed(), 250 * MS);
    let granted = keyed.try_acquire_for_async("a", 1, 250 * MS).await.unwrap();
    assert!(granted.is_allowed());
    assert_eq!(start.elapsed(), 500 * MS);
    assert!(keyed.acquire_async("a", 2).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn keyed_dropped_waiter_consumes_nothing() {
    let clock = ManualClock::new();
    let keyed: Arc<Keyed<u32, _, _>> = Arc::new(
        Keyed::builder(gcra(1, 1))
            .clock(clock.clone())
            .build()
            .unwrap(),
    );
    assert!(keyed.try_acquire(&1, 1).unwrap().is_allowed());
    let task = {
        let keyed = Arc::clone(&keyed);
        tokio::spawn(async move { keyed.acquire_async(&1, 1).await })
    };
    tokio::task::yield_now().await;
    step(&clock, Duration::from_millis(500)).await;
    assert!(!task.is_finished());
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    step(&clock, Duration::from_millis(500)).await;
    let decision = keyed.peek(&1, 1).unwrap();
    assert!(decision.is_allowed());
    assert_eq!(decision.remaining(), 0); // the one permit of burst 1 is there to take
}

/// A token bucket of 10, one token per 100 ms, on tokio's paused time, emptied at t = 0.
async fn empty_bucket() -> AtomicLimiter<TokenBucket, TokioClock> {
    let bucket = TokenBucket::new(Rate::per_second(10), 10).unwrap();
    let limiter = AtomicLimiter::with_clock(bucket, TokioClock::starting_at(0));
    assert!(limiter.try_acquire(10).unwrap().is_allowed());
    limiter
}

/// The single requests' tasks, each giving its arrival index and its grant time.
type Singles = Vec<JoinHandle<(u64, Duration)>>;

/// While a request for 10 permits waits, requests for 1 arrive every 50 ms (twice the refill
/// rate) for 3 s, each recording `(arrival index, grant time)`. Returns the big request's task
/// and the single ones'.
fn big_then_a_stream_of_singles<F, Fut>(acquire: F) -> (JoinHandle<Duration>, JoinHandle<Singles>)
where
    F: Fn(u32) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Duration, AcquireError>> + Send + 'static,
{
    let start = Instant::now();
    let big = tokio::spawn({
        let acquire = acquire.clone();
        async move { acquire(10).await.unwrap() }
    });
    let singles = tokio::spawn(async move {
        let mut singles = Vec::new();
        for k in 1..=60 {
            tokio::time::sleep(50 * MS).await;
            let acquire = acquire.clone();
            singles.push(tokio::spawn(async move {
                acquire(1).await.unwrap();
                (k, start.elapsed())
            }));
        }
        singles
    });
    (big, singles)
}

#[tokio::test(start_paused = true)]
async fn fair_serves_a_big_request_while_single_ones_keep_arriving() {
    let fair = Arc::new(Fair::new(empty_bucket().await));
    let acquire = {
        let fair = Arc::clone(&fair);
        move |n| {
            let fair = Arc::clone(&fair);
            async move { fair.acquire_async(n).await }
        }
    };
    let (big, singles) = big_then_a_stream_of_singles(acquire);
    // The bucket is full again after 1 s: the big request, at the head, takes it whole.
    let waited = tokio::time::timeout(Duration::from_secs(60), big).await;
    assert_eq!(waited.unwrap().unwrap(), Duration::from_secs(1));
    // Then the single ones, in arrival order, one per refill: single k at 1 s + k × 100 ms.
    for single in singles.await.unwrap() {
        let (k, granted) = single.await.unwrap();
        assert_eq!(
            granted,
            Duration::from_millis(1_000 + 100 * k),
            "single {k}"
        );
    }
    assert_eq!(fair.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn without_fair_a_big_request_starves_behind_single_ones() {
    let limiter = Arc::new(empty_bucket().await);
    let acquire = {
        let limiter = Arc::clone(&limiter);
        move |n| {
            let limiter = Arc::clone(&limiter);
            async move { limiter.acquire_async(n).await }
        }
    };
    let (big, singles) = big_then_a_stream_of_singles(acquire);
    let singles = singles.await.unwrap(); // every single one has arrived: t = 3 s
    // Each token goes to a single request as soon as it refills: 10 never pile up.
    assert!(!big.is_finished(), "the big request got 10 tokens");
    let served = singles.iter().filter(|s| s.is_finished()).count();
    assert!(served >= 25, "{served} single requests served by 3 s");
    big.abort();
}

#[tokio::test(start_paused = true)]
async fn a_fair_waiter_that_gives_up_passes_its_place_on_and_takes_nothing() {
    let fair = Arc::new(Fair::new(empty_bucket().await));
    let start = Instant::now();
    let head = {
        let fair = Arc::clone(&fair);
        tokio::spawn(async move { tokio::time::timeout(500 * MS, fair.acquire_async(10)).await })
    };
    tokio::task::yield_now().await; // the big request is at the head of the line
    let next = {
        let fair = Arc::clone(&fair);
        tokio::spawn(async move { fair.acquire_async(3).await.unwrap() })
    };
    tokio::task::yield_now().await;
    assert_eq!(fair.waiting(), 2);
    // The head gives up at 500 ms having taken nothing: the next request is at the head, and
    // the 5 tokens refilled by then serve it at once.
    assert!(head.await.unwrap().is_err());
    assert_eq!(next.await.unwrap(), 500 * MS);
    assert_eq!(start.elapsed(), 500 * MS);
    assert!(fair.limiter().try_acquire(2).unwrap().is_allowed());
    assert!(!fair.limiter().try_acquire(1).unwrap().is_allowed());
    assert_eq!(fair.waiting(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_fair_request_that_can_never_be_granted_fails_at_once() {
    let fair = Fair::new(empty_bucket().await);
    assert_eq!(
        fair.acquire_async(11).await,
        Err(AcquireError::ExceedsCapacity {
            requested: 11,
            capacity: 10
        })
    );
    assert!(matches!(
        fair.acquire_async(0).await,
        Err(AcquireError::ZeroPermits)
    ));
    assert_eq!(fair.waiting(), 0);
}

/// `n = 0` is never a valid request: behind a line of waiters it fails at once with the error
/// that names it, instead of waiting its turn (here 1 s behind a request for 10) to be told.
#[tokio::test(start_paused = true)]
async fn a_fair_request_for_zero_permits_fails_at_once_even_behind_a_line() {
    let fair = Arc::new(Fair::new(empty_bucket().await));
    let start = Instant::now();
    let head = {
        let fair = Arc::clone(&fair);
        tokio::spawn(async move { fair.acquire_async(10).await })
    };
    tokio::task::yield_now().await; // the request for 10 is at the head, 1 s from its grant
    assert_eq!(fair.waiting(), 1);
    let zero = tokio::time::timeout(Duration::from_secs(60), fair.acquire_async(0)).await;
    assert_eq!(zero, Ok(Err(AcquireError::ZeroPermits)));
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "waited in line to learn n = 0 is invalid"
    );
    assert_eq!(fair.waiting(), 1);
    assert_eq!(head.await.unwrap(), Ok(Duration::from_secs(1)));
}

/// A waiter cancelled in the middle of the line gives up its place: the one behind it moves up
/// and is served when the head is done, and nothing is left in line.
#[tokio::test(start_paused = true)]
async fn a_fair_waiter_cancelled_mid_line_passes_its_place_on() {
    let fair = Arc::new(Fair::new(empty_bucket().await));
    let start = Instant::now();
    let spawn = |n: u32| {
        let fair = Arc::clone(&fair);
        tokio::spawn(async move {
            let waited = fair.acquire_async(n).await.unwrap();
            (waited, start.elapsed())
        })
    };
    let head = spawn(10);
    tokio::task::yield_now().await;
    let middle = spawn(5);
    tokio::task::yield_now().await;
    let last = spawn(2);
    tokio::task::yield_now().await;
    assert_eq!(fair.waiting(), 3);
    tokio::time::sleep(300 * MS).await;
    middle.abort();
    assert!(middle.await.unwrap_err().is_cancelled());
    assert_eq!(fair.waiting(), 2);
    // The head at 1 s (a full bucket), then the last one 2 tokens later, at 1.2 s.
    assert_eq!(
        head.await.unwrap(),
        (Duration::from_secs(1), Duration::from_secs(1))
    );
    let served = tokio::time::timeout(Duration::from_secs(60), last).await;
    assert_eq!(served.unwrap().unwrap(), (1_200 * MS, 1_200 * MS));
    assert_eq!(fair.waiting(), 0);
    // The served times show the cancelled request took nothing; and nothing was granted twice.
    assert!(!fair.limiter().try_acquire(1).unwrap().is_allowed());
}

/// The capacity lowered below the head's request while it waits: the head fails with the error
/// naming the new capacity at its next try (it never waits for what can no longer fit), and the
/// line moves on to the next waiter, served from what the bucket holds then.
#[tokio::test(start_paused = true)]
async fn a_fair_head_whose_request_no_longer_fits_fails_and_the_line_moves_on() {
    let fair = Arc::new(Fair::new(empty_bucket().await));
    let start = Instant::now();
    let head = {
        let fair = Arc::clone(&fair);
        tokio::spawn(async move { fair.acquire_async(10).await })
    };
    tokio::task::yield_now().await; // at the head: 10 tokens in 1 s
    let next = {
        let fair = Arc::clone(&fair);
        tokio::spawn(async move { fair.acquire_async(3).await })
    };
    tokio::task::yield_now().await;
    fair.limiter().set_limit(5).unwrap(); // the capacity: 10 can never fit now
    let failed = tokio::time::timeout(Duration::from_secs(60), head).await;
    assert_eq!(
        failed.unwrap().unwrap(),
        Err(AcquireError::ExceedsCapacity {
            requested: 10,
            capacity: 5
        })
    );
    // No later than its next try, at the end of the wait it had been announced.
    let failed_at = start.elapsed();
    assert!(failed_at <= Duration::from_secs(1), "{failed_at:?}");
    // Then the next request is served from what the bucket holds (at most its new capacity).
    let waited = next.await.unwrap().unwrap();
    assert!(waited <= Duration::from_secs(1), "{waited:?}");
    assert_eq!(fair.waiting(), 0);
    // 3 of the tokens the bucket held when the line moved on were taken, and no more.
    let held = u32::try_from(start.elapsed().as_millis() / 100)
        .unwrap()
        .min(5);
    if held > 3 {
        assert!(fair.limiter().try_acquire(held - 3).unwrap().is_allowed());
    }
    assert!(!fair.limiter().try_acquire(1).unwrap().is_allowed());
}
