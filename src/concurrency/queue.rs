//! The fair waiter queue of [`InFlight`](super::InFlight): FIFO, permits handed off to the head.
//!
//! # Protocol
//! The queue lives under a mutex that only waiters and the releases that find a waiter queued
//! take; the hot path (a non-blocking acquire, a release with nobody waiting) never does.
//!
//! * The word's `queued` bit is set exactly while the queue holds a waiter; it is set and
//!   cleared only under the mutex, by a compare-exchange on the word. A non-blocking acquire
//!   that sees it set is denied (it never overtakes a waiter), so permits freed while a waiter
//!   is queued can only go to the queue.
//! * A release subtracts its permits from the word (`fetch_sub`, never blocked). If the value it
//!   replaced had `queued` set, it takes the mutex and **pumps**: the free permits
//!   (`limit − in_flight`) are handed to the waiters in FIFO order — each waiter served whole
//!   is granted and woken; the first one that cannot be served whole is *assigned* what is left
//!   (it keeps those permits while it waits for the rest). A hand-off adds the permits back to
//!   `in_flight` in one compare-exchange that also clears `queued` if the queue is emptied.
//!   So a request for many permits at the head collects permits as they are freed and is never
//!   starved by a stream of single ones, which queue behind it.
//! * A release and a waiter that queues race on the word only: the waiter sets `queued` by a
//!   compare-exchange from the word it judged full, so either the release's `fetch_sub` came
//!   first (the compare-exchange fails and the waiter judges the new word, and may take the
//!   permits at once), or the waiter's came first (the release sees `queued` and pumps). No
//!   wake-up is lost.
//! * A waiter that gives up (a dropped future) is removed under the mutex; the permits assigned
//!   to it are released and pumped on to the next waiters. A waiter granted but dropped before
//!   it took its permit releases them as a permit would.
//! * `set_limit` that finds `queued` set changes the limit under the mutex, fails every waiter
//!   asking for more than the new limit (it could never be served), and pumps.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::task::Waker;

use super::word::{Fields, QUEUED};
use crate::decision::AcquireError;
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering, thread};

/// A waiter's outcome, packed: `WAITING`, `GRANTED`, or `FAILED | capacity << 32`.
const WAITING: u64 = 0;
const GRANTED: u64 = 1;
const FAILED: u64 = 2;

/// What a waiter learns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Waiting,
    Granted,
    /// The limit was lowered below the request: it can never be served.
    Failed {
        capacity: u32,
    },
}

/// The part of a waiter its owner keeps: the outcome the pump publishes.
#[derive(Debug)]
pub(crate) struct Node {
    outcome: AtomicU64,
}

impl Node {
    /// The outcome so far. Acquire: pairs with the Release store of the pump (or the failer)
    /// that decided it, so the permits it grants are seen as handed over.
    pub(crate) fn outcome(&self) -> Outcome {
        decode(self.outcome.load(Ordering::Acquire))
    }
}

fn decode(raw: u64) -> Outcome {
    match raw & 0b11 {
        WAITING => Outcome::Waiting,
        GRANTED => Outcome::Granted,
        _ => Outcome::Failed {
            capacity: (raw >> 32) as u32,
        },
    }
}

/// How to wake a waiter: a parked thread, or a task.
#[derive(Debug)]
pub(crate) enum Wake {
    Thread(thread::Thread),
    Task(Waker),
}

impl Wake {
    fn wake(self) {
        match self {
            Wake::Thread(thread) => thread.unpark(),
            Wake::Task(waker) => waker.wake(),
        }
    }
}

#[derive(Debug)]
struct Waiter {
    /// Permits asked for.
    n: u32,
    /// Permits handed to it so far (`< n` while it waits).
    assigned: u32,
    node: Arc<Node>,
    wake: Wake,
}

#[derive(Debug, Default)]
struct Waiters {
    /// By ticket: FIFO order, and O(log n) removal of a waiter that gives up.
    queue: BTreeMap<u64, Waiter>,
    next_ticket: u64,
    /// At least the largest request queued (exact after `fail_oversized` scanned): the pump
    /// looks for waiters above the limit only when this is above it, so a release scans nothing
    /// unless the limit was lowered below a queued request.
    max_n: u32,
    /// Waiters `fail_oversized` has looked at, all told (the unit tests bound its work).
    #[cfg(test)]
    examined: u64,
}

/// A waiter in the queue: its ticket and its outcome.
#[derive(Debug)]
pub(crate) struct Ticket {
    pub(crate) id: u64,
    pub(crate) node: Arc<Node>,
}

/// The result of [`WaitQueue::enqueue`].
#[derive(Debug)]
pub(crate) enum Entered {
    /// The permits were free (nobody queued): taken at once.
    Taken,
    /// Queued: wait for the ticket's outcome (it may already be granted).
    Queued(Ticket),
}

/// The mutex-guarded FIFO of waiters.
#[derive(Debug)]
pub(crate) struct WaitQueue {
    waiters: Mutex<Waiters>,
}

impl Default for WaitQueue {
    fn default() -> Self {
        WaitQueue {
            waiters: Mutex::new(Waiters::default()),
        }
    }
}

impl WaitQueue {
    fn lock(&self) -> MutexGuard<'_, Waiters> {
        // No code under this lock calls out to user code (wakers run after it is released), so
        // a poisoned lock only means a panic (out of memory) in between; the queue is consistent
        // at every step that can unwind.
        self.waiters
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Takes `n` permits now if nobody is queued and they are free, else queues a waiter woken
    /// by `wake`.
    ///
    /// # Errors
    /// [`AcquireError::ExceedsCapacity`] when `n` is above the limit in force.
    pub(crate) fn enqueue(
        &self,
        word: &AtomicU64,
        n: u32,
        wake: Wake,
    ) -> Result<Entered, AcquireError> {
        let mut waiters = self.lock();
        // Acquire: pairs with the Release of releases and hand-offs (the permits' last holder's
        // work happens before a taker's).
        let mut current = word.load(Ordering::Acquire);
        loop {
            let fields = Fields::unpack(current);
            if n > fields.limit {
                return Err(AcquireError::ExceedsCapacity {
                    requested: u64::from(n),
                    capacity: u64::from(fields.limit),
                });
            }
            let next = if fields.queued {
                // Behind the queue. The bit is ours to keep (only this lock's holders move it),
                // so the word needs no write.
                None
            } else if n <= fields.free() {
                Some(
                    Fields {
                        in_flight: fields.in_flight + n,
                        ..fields
                    }
                    .pack(),
                )
            } else {
                Some(current | QUEUED)
            };
            if let Some(next) = next {
                // AcqRel: Acquire as the load above; Release publishes the bit to releases,
                // which then take this lock (the queue under it is then ours to read).
                if let Err(actual) =
                    word.compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
                {
                    current = actual;
                    continue;
                }
                if next & QUEUED == 0 {
                    return Ok(Entered::Taken);
                }
            }
            let id = waiters.next_ticket;
            waiters.next_ticket += 1;
            waiters.max_n = waiters.max_n.max(n);
            let node = Arc::new(Node {
                outcome: AtomicU64::new(WAITING),
            });
            waiters.queue.insert(
                id,
                Waiter {
                    n,
                    assigned: 0,
                    node: Arc::clone(&node),
                    wake,
                },
            );
            // Free permits (some may be) go to the head at once.
            let woken = pump(&mut waiters, word);
            drop(waiters);
            wake_all(woken);
            return Ok(Entered::Queued(Ticket { id, node }));
        }
    }

    /// Replaces the waker of a queued task. Returns `false` when the ticket is no longer
    /// waiting (its outcome is decided: read it).
    pub(crate) fn register(&self, ticket: &Ticket, waker: &Waker) -> bool {
        let mut waiters = self.lock();
        // Under the lock the outcome cannot change: it is decided only by this lock's holders.
        if ticket.node.outcome() != Outcome::Waiting {
            return false;
        }
        if let Some(waiter) = waiters.queue.get_mut(&ticket.id) {
            match &mut waiter.wake {
                Wake::Task(old) if old.will_wake(waker) => {}
                wake => *wake = Wake::Task(waker.clone()),
            }
        }
        true
    }

    /// Gives up a ticket: removes a waiting one and passes the permits assigned to it on; a
    /// granted one releases the `n` permits it was granted. A failed one holds nothing.
    pub(crate) fn cancel(&self, word: &AtomicU64, ticket: &Ticket, n: u32) {
        let mut waiters = self.lock();
        match ticket.node.outcome() {
            Outcome::Waiting => {
                let assigned = waiters.queue.remove(&ticket.id).map_or(0, |w| w.assigned);
                if assigned > 0 {
                    // Release: as `release`; the pump below runs under the lock we hold.
                    word.fetch_sub(u64::from(assigned), Ordering::Release);
                }
                // Clears `queued` if this was the last waiter; hands freed permits on.
                let woken = pump(&mut waiters, word);
                drop(waiters);
                wake_all(woken);
            }
            Outcome::Granted => {
                drop(waiters);
                self.release(word, n);
            }
            Outcome::Failed { .. } => {}
        }
    }

    /// Gives `n` held permits back: one `fetch_sub`, and a pump under the lock only when a
    /// waiter is queued.
    #[inline]
    pub(crate) fn release(&self, word: &AtomicU64, n: u32) {
        // Release: pairs with the Acquire load or compare-exchange of the next taker, so what
        // the holder did under the permits happens before. The queued bit is read from the
        // value this replaced: a waiter that set it first is pumped below; one that sets it
        // later compare-exchanges from a word that already has these permits back.
        let before = word.fetch_sub(u64::from(n), Ordering::Release);
        if before & QUEUED != 0 {
            self.pump(word);
        }
    }

    /// Hands free permits to the queue (after a release, or a raised limit), failing waiters
    /// that ask for more than the limit.
    pub(crate) fn pump(&self, word: &AtomicU64) {
        let woken = pump(&mut self.lock(), word);
        wake_all(woken);
    }

    /// Waiters queued now.
    pub(crate) fn len(&self) -> usize {
        self.lock().queue.len()
    }
}

fn wake_all(woken: Vec<Wake>) {
    for wake in woken {
        wake.wake();
    }
}

/// The pump, under the lock: fails waiters above the limit, then hands `limit − in_flight` to
/// the queue in FIFO order (see the module docs) with one compare-exchange, and clears `queued`
/// when the queue empties. Returns who to wake once the lock is released.
fn pump(waiters: &mut Waiters, word: &AtomicU64) -> Vec<Wake> {
    let mut woken = Vec::new();
    // Acquire: as in `enqueue`.
    let mut current = word.load(Ordering::Acquire);
    loop {
        let fields = Fields::unpack(current);
        if !fields.queued {
            // Only this lock's holders clear the bit, and they empty the queue first.
            debug_assert!(waiters.queue.is_empty());
            return woken;
        }
        let failed = fail_oversized(waiters, fields.limit, &mut woken);
        if failed > 0 {
            // Release: as `release`.
            current = word.fetch_sub(u64::from(failed), Ordering::Release) - u64::from(failed);
            continue;
        }
        let (served, partial) = plan(waiters, fields.free());
        let given: u32 = waiters
            .queue
            .values()
            .take(served)
            .map(|w| w.n - w.assigned)
            .sum::<u32>()
            + partial;
        let next = Fields {
            in_flight: fields.in_flight + given,
            queued: served < waiters.queue.len(),
            ..fields
        }
        .pack();
        if next == current {
            return woken;
        }
        // AcqRel: Acquire as the load above; Release publishes the hand-off with the word.
        if let Err(actual) =
            word.compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
        {
            // A release's fetch_sub or a limit change landed: plan again on the new word.
            current = actual;
            continue;
        }
        for _ in 0..served {
            if let Some((_, waiter)) = waiters.queue.pop_first() {
                // Release: pairs with the waiter's Acquire read of its outcome.
                waiter.node.outcome.store(GRANTED, Ordering::Release);
                woken.push(waiter.wake);
            }
        }
        if let Some(mut head) = waiters.queue.first_entry() {
            head.get_mut().assigned += partial;
        }
        return woken;
    }
}

/// How `free` permits serve the queue: the number of waiters at the front served whole, and
/// what is left for the next one (assigned to it, which keeps waiting).
fn plan(waiters: &Waiters, mut free: u32) -> (usize, u32) {
    let mut served = 0;
    for waiter in waiters.queue.values() {
        let need = waiter.n - waiter.assigned;
        if need > free {
            return (served, free);
        }
        free -= need;
        served += 1;
    }
    (served, 0)
}

/// Removes every waiter asking for more than `limit`, publishing its failure; returns the
/// permits that were assigned to them (to be released). Scans the queue only when a request
/// above `limit` may be queued (`max_n`), and leaves `max_n` exact.
fn fail_oversized(waiters: &mut Waiters, limit: u32, woken: &mut Vec<Wake>) -> u32 {
    if waiters.max_n <= limit {
        return 0;
    }
    waiters.max_n = waiters
        .queue
        .values()
        .map(|w| w.n)
        .filter(|&n| n <= limit)
        .max()
        .unwrap_or(0);
    #[cfg(test)]
    {
        waiters.examined += waiters.queue.len() as u64;
    }
    let oversized: Vec<u64> = waiters
        .queue
        .iter()
        .filter(|(_, w)| w.n > limit)
        .map(|(&id, _)| id)
        .collect();
    let mut assigned = 0;
    for id in oversized {
        if let Some(waiter) = waiters.queue.remove(&id) {
            assigned += waiter.assigned;
            let failed = FAILED | (u64::from(limit) << 32);
            // Release: pairs with the waiter's Acquire read of its outcome.
            waiter.node.outcome.store(failed, Ordering::Release);
            woken.push(waiter.wake);
        }
    }
    assigned
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};

    use super::super::InFlight;

    /// Draining a long queue one release at a time costs O(1) per release in the search for
    /// waiters above the limit (there are none: the limit never moved). It scanned the whole
    /// queue on every release: 20,000 waiters took 25 s to drain (debug build), quadratic.
    #[test]
    fn a_drain_does_not_rescan_the_queue_on_every_release() {
        const WAITERS: u64 = 2_000;
        let limit = InFlight::new(1).unwrap();
        let held = limit.try_acquire(1).unwrap().unwrap();
        let mut cx = Context::from_waker(Waker::noop());
        let mut futures: Vec<_> = (0..WAITERS).map(|_| limit.acquire_async(1)).collect();
        for future in &mut futures {
            assert!(Pin::new(future).poll(&mut cx).is_pending());
        }
        drop(held);
        for future in &mut futures {
            let Poll::Ready(Ok(permit)) = Pin::new(future).poll(&mut cx) else {
                panic!("the queue serves in order, one release at a time");
            };
            drop(permit);
        }
        assert_eq!((limit.in_flight(), limit.waiters()), (0, 0));
        let examined = limit.queue().lock().examined;
        assert!(
            examined <= 2 * WAITERS,
            "looked at {examined} waiters for {WAITERS} releases"
        );
    }
}
