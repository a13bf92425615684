//! loom models of `InFlight`: the one-word try_acquire/release, the fair queue's hand-off to a
//! parked waiter (no lost wake-up: loom fails a model in which a thread parks forever), a
//! waiter giving up while a release hands it permits, and a limit change racing a waiter.
//! (`InFlight` is shared through `std::sync::Arc`: its owned permits and futures take one.)
#![cfg(floodgate_loom)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use floodgate::AcquireError;
use floodgate::concurrency::InFlight;
use floodgate_loom_tests::model;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::thread;

struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

fn noop_context_poll<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    let waker = Waker::from(Arc::new(Noop));
    Pin::new(future).poll(&mut Context::from_waker(&waker))
}

/// Three threads each try to take one of two permits, hold it, and give it back: never more
/// than two held at once (counted by the holders), and every permit comes back.
#[test]
fn try_acquire_and_release_never_pass_the_limit() {
    model(None, || {
        let limit = Arc::new(InFlight::new(2).unwrap());
        let holding = Arc::new(AtomicUsize::new(0));
        let take = |limit: Arc<InFlight>, holding: Arc<AtomicUsize>| {
            move || {
                if let Some(permit) = limit.try_acquire(1).unwrap() {
                    // SeqCst: the checker's own counter.
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    assert!(now <= 2, "{now} permits held at once");
                    holding.fetch_sub(1, Ordering::SeqCst);
                    drop(permit);
                    true
                } else {
                    false
                }
            }
        };
        let others: Vec<_> = (0..2)
            .map(|_| thread::spawn(take(limit.clone(), holding.clone())))
            .collect();
        let mine = take(limit.clone(), holding.clone())();
        let admitted = others.into_iter().map(|h| h.join().unwrap());
        let admitted = admitted.filter(|a| *a).count() + usize::from(mine);
        assert!(admitted >= 2, "at most one can find both permits taken");
        assert_eq!(limit.in_flight(), 0);
    });
}

/// A holder releases while a blocking waiter for the whole limit queues, and a third thread
/// tries to take a permit: the waiter is always handed both permits (it never parks forever:
/// no wake-up is lost between its queueing and the release), and every permit comes back.
#[test]
fn a_release_hands_off_to_a_parked_waiter() {
    model(None, || {
        let limit = Arc::new(InFlight::new(2).unwrap());
        let held = limit.try_acquire_owned(1).unwrap().unwrap();
        let waiter = {
            let limit = limit.clone();
            thread::spawn(move || limit.acquire(2).map(|p| p.permits()))
        };
        let releaser = thread::spawn(move || drop(held));
        // A barger's permit, if any, was taken before the waiter queued; it is given back here.
        let barger = limit.try_acquire(1).unwrap();
        drop(barger);
        releaser.join().unwrap();
        assert_eq!(waiter.join().unwrap(), Ok(2));
        assert_eq!((limit.in_flight(), limit.waiters()), (0, 0));
        assert_eq!(limit.available(), 2);
    });
}

/// An async waiter gives up (its future is dropped) while the holder's release hands it the
/// permit: whichever wins, the permit is never lost, and the next waiter (blocking) gets it.
#[test]
fn a_waiter_giving_up_races_the_hand_off() {
    model(Some(10_000), || {
        let limit = Arc::new(InFlight::new(1).unwrap());
        let held = limit.try_acquire_owned(1).unwrap().unwrap();
        let mut quitter = limit.clone().acquire_owned_async(1);
        assert!(noop_context_poll(&mut quitter).is_pending());
        let next = {
            let limit = limit.clone();
            thread::spawn(move || limit.acquire(1).map(|p| p.permits()))
        };
        let releaser = thread::spawn(move || drop(held));
        drop(quitter);
        releaser.join().unwrap();
        assert_eq!(next.join().unwrap(), Ok(1));
        assert_eq!((limit.in_flight(), limit.waiters()), (0, 0));
    });
}

/// A limit lowered below a queued request races the waiter queueing and a release: the waiter
/// is either served (queued and handed permits before the change) or failed with the new
/// capacity; it never parks forever and no permit is lost.
#[test]
fn a_lowered_limit_races_a_waiter() {
    model(Some(10_000), || {
        let limit = Arc::new(InFlight::new(2).unwrap());
        let held = limit.try_acquire_owned(1).unwrap().unwrap();
        let waiter = {
            let limit = limit.clone();
            thread::spawn(move || limit.acquire(2).map(|p| p.permits()))
        };
        let setter = {
            let limit = limit.clone();
            thread::spawn(move || limit.set_limit(1).unwrap())
        };
        drop(held);
        setter.join().unwrap();
        match waiter.join().unwrap() {
            Ok(2) => {}
            Err(AcquireError::ExceedsCapacity {
                requested: 2,
                capacity: 1,
            }) => {}
            other => panic!("{other:?}"),
        }
        assert_eq!((limit.in_flight(), limit.waiters()), (0, 0));
        assert_eq!(limit.available(), 1);
    });
}
