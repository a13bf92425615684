//! `InFlight`: permits, fairness, cancellation, live limits. Futures are polled by hand with a
//! counting waker, so every test sees each wake-up and depends on no scheduler; the thread tests
//! wait for a state with a 60 s bound that only a hang reaches.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use floodgate::concurrency::{Acquire, InFlight, MAX_IN_FLIGHT_LIMIT, Permit};
use floodgate::{AcquireError, ConfigError};

/// A waker that counts its wake-ups.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A hand-polled future and the wake-ups it received.
struct Polled<'a> {
    future: Acquire<&'a InFlight>,
    wakes: Arc<Counter>,
}

impl<'a> Polled<'a> {
    fn new(limit: &'a InFlight, n: u32) -> Self {
        Polled {
            future: limit.acquire_async(n),
            wakes: Arc::default(),
        }
    }

    fn poll(&mut self) -> Poll<Result<Permit<&'a InFlight>, AcquireError>> {
        let waker = Waker::from(Arc::clone(&self.wakes));
        Pin::new(&mut self.future).poll(&mut Context::from_waker(&waker))
    }

    fn pending(&mut self) {
        assert!(self.poll().is_pending(), "expected to wait");
    }

    fn ready(&mut self) -> Permit<&'a InFlight> {
        match self.poll() {
            Poll::Ready(Ok(permit)) => permit,
            other => panic!("expected a permit, got {other:?}"),
        }
    }

    fn wakes(&self) -> usize {
        self.wakes.0.load(Ordering::SeqCst)
    }
}

/// Waits (yielding) until `done`; fails on a hang only.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "hung waiting for {what}");
        std::thread::yield_now();
    }
}

#[test]
fn bad_limits_and_requests_are_clear_errors() {
    assert_eq!(InFlight::new(0).unwrap_err(), ConfigError::ZeroLimit);
    assert_eq!(
        InFlight::new(MAX_IN_FLIGHT_LIMIT + 1).unwrap_err(),
        ConfigError::LimitTooLarge {
            limit: u64::from(MAX_IN_FLIGHT_LIMIT) + 1,
            max: u64::from(MAX_IN_FLIGHT_LIMIT)
        }
    );
    let limit = InFlight::new(MAX_IN_FLIGHT_LIMIT).unwrap();
    let all = limit.try_acquire(MAX_IN_FLIGHT_LIMIT).unwrap().unwrap();
    assert_eq!(limit.in_flight(), MAX_IN_FLIGHT_LIMIT);
    drop(all);
    let limit = InFlight::new(3).unwrap();
    let too_many = AcquireError::ExceedsCapacity {
        requested: 4,
        capacity: 3,
    };
    assert_eq!(limit.try_acquire(0).unwrap_err(), AcquireError::ZeroPermits);
    assert_eq!(limit.try_acquire(4).unwrap_err(), too_many);
    assert_eq!(limit.acquire(4).unwrap_err(), too_many);
    assert_eq!(limit.acquire(0).unwrap_err(), AcquireError::ZeroPermits);
    let mut polled = Polled::new(&limit, 4);
    assert_eq!(polled.poll().map(|r| r.err()), Poll::Ready(Some(too_many)));
    assert_eq!(
        too_many.to_string(),
        "4 permits can never be granted: one request can take at most 3"
    );
    assert_eq!(limit.set_limit(0).unwrap_err(), ConfigError::ZeroLimit);
    assert_eq!(limit.limit(), 3);
}

#[test]
fn permits_come_back_on_drop_and_on_panic() {
    let limit = InFlight::new(3).unwrap();
    let a = limit.try_acquire(2).unwrap().unwrap();
    assert!(limit.try_acquire(2).unwrap().is_none());
    assert_eq!(limit.available(), 1);
    drop(a);
    assert_eq!(limit.in_flight(), 0);
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _held = limit.try_acquire(3).unwrap().unwrap();
        panic!("handler panicked");
    }));
    assert!(unwound.is_err());
    assert_eq!(limit.in_flight(), 0);
    assert!(limit.try_acquire(3).unwrap().is_some());
}

#[test]
fn a_big_request_is_not_starved_by_single_ones() {
    let limit = InFlight::new(4).unwrap();
    let singles: Vec<_> = (0..4)
        .map(|_| limit.try_acquire(1).unwrap().unwrap())
        .collect();
    let mut big = Polled::new(&limit, 4);
    big.pending();
    let mut small = Polled::new(&limit, 1);
    small.pending();
    for (i, single) in singles.into_iter().enumerate() {
        drop(single);
        // The freed permit went to the head: nobody, blocking or not, can take it.
        assert!(limit.try_acquire(1).unwrap().is_none(), "release {i}");
        assert_eq!(limit.in_flight(), 4);
        assert_eq!(limit.available(), 0);
        if i < 3 {
            big.pending();
            assert_eq!(big.wakes(), 0);
        }
    }
    assert_eq!(big.wakes(), 1, "woken once, when whole");
    assert_eq!(small.wakes(), 0);
    let permit = big.ready();
    assert_eq!(permit.permits(), 4);
    small.pending();
    drop(permit);
    assert_eq!(small.wakes(), 1);
    let one = small.ready();
    assert_eq!((limit.in_flight(), limit.waiters()), (1, 0));
    assert_eq!(limit.available(), 3); // the queue emptied: non-blocking acquires again
    drop(one);
}

#[test]
fn waiters_are_served_in_arrival_order() {
    let limit = InFlight::new(2).unwrap();
    let held = limit.try_acquire(2).unwrap().unwrap();
    let mut first = Polled::new(&limit, 2);
    let mut second = Polled::new(&limit, 1);
    let mut third = Polled::new(&limit, 1);
    first.pending();
    second.pending();
    third.pending();
    drop(held);
    assert_eq!((first.wakes(), second.wakes(), third.wakes()), (1, 0, 0));
    let first = first.ready();
    drop(first);
    // Both fit now: served together, in order.
    assert_eq!((second.wakes(), third.wakes()), (1, 1));
    let (s, t) = (second.ready(), third.ready());
    assert_eq!(limit.in_flight(), 2);
    drop((s, t));
}

#[test]
fn a_cancelled_waiter_passes_its_assigned_permits_on() {
    let limit = InFlight::new(3).unwrap();
    let a = limit.try_acquire(1).unwrap().unwrap();
    let b = limit.try_acquire(1).unwrap().unwrap();
    let mut big = Polled::new(&limit, 3);
    big.pending(); // the free permit is assigned to it at once
    let mut next = Polled::new(&limit, 2);
    next.pending();
    assert_eq!((limit.in_flight(), limit.waiters()), (3, 2));
    drop(a); // assigned to big too: it has 2 of its 3
    assert_eq!(limit.in_flight(), 3);
    drop(big); // gives up: its 2 go to `next`, served whole
    assert_eq!(next.wakes(), 1);
    let next = next.ready();
    assert_eq!((limit.in_flight(), limit.waiters()), (3, 0));
    drop((b, next));
    assert_eq!((limit.in_flight(), limit.available()), (0, 3));
}

#[test]
fn a_granted_future_dropped_unpolled_gives_its_permits_back() {
    let limit = InFlight::new(1).unwrap();
    let held = limit.try_acquire(1).unwrap().unwrap();
    let mut granted = Polled::new(&limit, 1);
    granted.pending();
    let mut after = Polled::new(&limit, 1);
    after.pending();
    drop(held);
    assert_eq!(granted.wakes(), 1);
    drop(granted); // never polled again: the permit it was handed goes on
    assert_eq!(after.wakes(), 1);
    drop(after.ready());
    assert_eq!(limit.in_flight(), 0);
}

#[test]
fn raising_the_limit_wakes_waiters_and_lowering_fails_the_oversized() {
    let limit = InFlight::new(2).unwrap();
    let held = limit.try_acquire(2).unwrap().unwrap();
    let mut one = Polled::new(&limit, 1);
    one.pending();
    limit.set_limit(3).unwrap();
    assert_eq!(one.wakes(), 1);
    let one = one.ready();
    let mut big = Polled::new(&limit, 3);
    big.pending();
    let mut small = Polled::new(&limit, 1);
    small.pending();
    drop(one); // assigned to big (1 of 3)
    assert_eq!(limit.in_flight(), 3);
    limit.set_limit(2).unwrap(); // big can never be served: failed; its permit goes back
    assert_eq!(big.wakes(), 1);
    assert_eq!(
        big.poll().map(|r| r.err()),
        Poll::Ready(Some(AcquireError::ExceedsCapacity {
            requested: 3,
            capacity: 2
        }))
    );
    // in flight 2 (held) = the new limit: small waits for a release.
    assert_eq!((limit.in_flight(), small.wakes()), (2, 0));
    drop(held);
    assert_eq!(small.wakes(), 1);
    drop(small.ready());
    assert_eq!((limit.in_flight(), limit.waiters()), (0, 0));
}

#[test]
fn lowering_below_in_flight_admits_nothing_until_it_drains() {
    let limit = InFlight::new(4).unwrap();
    let held: Vec<_> = (0..4)
        .map(|_| limit.try_acquire(1).unwrap().unwrap())
        .collect();
    limit.set_limit(2).unwrap();
    let mut waiter = Polled::new(&limit, 1);
    waiter.pending();
    let mut held = held.into_iter();
    drop(held.next());
    drop(held.next());
    assert_eq!((limit.in_flight(), waiter.wakes()), (2, 0)); // at the new limit
    drop(held.next());
    assert_eq!(waiter.wakes(), 1);
    let permit = waiter.ready();
    assert_eq!(limit.in_flight(), 2);
    drop((permit, held));
}

#[test]
fn a_blocking_waiter_is_handed_the_permit() {
    let limit = Arc::new(InFlight::new(2).unwrap());
    let held = limit.try_acquire_owned(2).unwrap().unwrap();
    let waiter = {
        let limit = Arc::clone(&limit);
        std::thread::spawn(move || limit.acquire(2).map(|p| p.permits()))
    };
    wait_until("the waiter to queue", || limit.waiters() == 1);
    assert!(limit.try_acquire(1).unwrap().is_none());
    drop(held);
    assert_eq!(waiter.join().unwrap(), Ok(2));
    assert_eq!(limit.in_flight(), 0);
}

#[test]
fn a_blocking_waiter_is_failed_by_a_lowered_limit() {
    let limit = Arc::new(InFlight::new(2).unwrap());
    let held = limit.try_acquire_owned(1).unwrap().unwrap();
    let waiter = {
        let limit = Arc::clone(&limit);
        std::thread::spawn(move || limit.acquire(2).map(|p| p.permits()))
    };
    wait_until("the waiter to queue", || limit.waiters() == 1);
    limit.set_limit(1).unwrap();
    assert_eq!(
        waiter.join().unwrap(),
        Err(AcquireError::ExceedsCapacity {
            requested: 2,
            capacity: 1
        })
    );
    assert_eq!(limit.in_flight(), 1);
    drop(held);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_timed_out_async_waiter_leaks_nothing() {
    let limit = InFlight::new(2).unwrap();
    let held = limit.acquire_async(1).await.unwrap();
    let gave_up = tokio::time::timeout(Duration::from_millis(5), limit.acquire_async(2)).await;
    assert!(gave_up.is_err());
    assert_eq!((limit.in_flight(), limit.waiters()), (1, 0));
    drop(held);
    let both = limit.acquire_async(2).await.unwrap();
    assert_eq!(both.permits(), 2);
}

/// Real threads mixing the three acquires: the permits held never pass the limit (counted by
/// the holders themselves), and every acquire completes.
#[test]
fn threads_never_hold_more_than_the_limit() {
    const LIMIT: u32 = 3;
    const THREADS: usize = 6;
    const ROUNDS: usize = 2_000;
    let limit = Arc::new(InFlight::new(LIMIT).unwrap());
    let holding = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (limit, holding, peak) = (limit.clone(), holding.clone(), peak.clone());
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    let n = 1 + ((t + round) % 2) as u32;
                    let permit = match round % 3 {
                        0 => limit.acquire(n).unwrap(),
                        1 => match limit.try_acquire(n).unwrap() {
                            Some(p) => p,
                            None => continue,
                        },
                        _ => futures_block_on(limit.acquire_async(n)).unwrap(),
                    };
                    let now = holding.fetch_add(n as usize, Ordering::SeqCst) + n as usize;
                    peak.fetch_max(now, Ordering::SeqCst);
                    holding.fetch_sub(n as usize, Ordering::SeqCst);
                    drop(permit);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(peak.load(Ordering::SeqCst) <= LIMIT as usize);
    assert_eq!((limit.in_flight(), limit.waiters()), (0, 0));
}

/// A minimal executor: polls on this thread, parking between wake-ups.
fn futures_block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}
