//! [`Turns`]: who sends the work queued behind calls that are out, so that none is left behind.

use crate::sync::{AtomicU32, Ordering, fence};

/// At most `max` senders at a time, over a queue the caller keeps. A caller that finds a turn
/// free sends its own work; one that does not pushes its work to the queue and then calls
/// [`after_push`](Self::after_push). A sender done with its turn calls
/// [`give_back`](Self::give_back), which takes the turn again when the queue has work. Either
/// the pusher sees the turn given back, or the giver sees the pushed work (both sides fence):
/// work is never left in the queue with no sender.
///
/// Each take names how many turns may be out after it (`within`, at most `max`, at least 1):
/// the Redis coalescer takes its first with 1 (a caller's own call, sent while none is out)
/// and names `max` whenever work waits in the queue. Whatever it names, every turn given back
/// looks at the queue, so the guarantee holds.
#[derive(Debug)]
pub(crate) struct Turns {
    taken: AtomicU32,
    max: u32,
}

impl Turns {
    /// No turn taken; at most `max` at a time.
    pub(crate) fn new(max: u32) -> Self {
        Turns {
            taken: AtomicU32::new(0),
            max,
        }
    }

    /// Takes a turn if fewer than `within` (at least 1, at most `max`) are taken.
    pub(crate) fn take(&self, within: u32) -> bool {
        let within = within.clamp(1, self.max);
        // SeqCst: pairs with the fences of `after_push` and `give_back`.
        self.taken
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < within).then_some(n + 1)
            })
            .is_ok()
    }

    /// After pushing work to the queue: takes a turn if fewer than `within()` are out, so that
    /// the caller sends the queue (a sender giving its turn back meanwhile may have looked at
    /// the queue before the push).
    pub(crate) fn after_push(&self, within: impl FnOnce() -> u32) -> bool {
        // SeqCst fence: pairs with the one in `give_back` (store buffering): either this thread
        // sees the turn given back, or the giver sees the pushed work.
        fence(Ordering::SeqCst);
        self.take(within())
    }

    /// Gives a turn back; then, if `queued()` says work is waiting (how many turns it may
    /// take, 0 for an empty queue), takes a turn again: true when it did (the caller sends the
    /// queue).
    pub(crate) fn give_back(&self, queued: impl FnOnce() -> u32) -> bool {
        self.release();
        // SeqCst fence: pairs with the one in `after_push`.
        fence(Ordering::SeqCst);
        match queued() {
            0 => false,
            within => self.take(within),
        }
    }

    /// Gives a turn back without looking at the queue: only as the first half of
    /// [`give_back`](Self::give_back) (a turn given back without looking could leave work
    /// queued with no sender), and in tests.
    fn release(&self) {
        // SeqCst: pairs with `take`.
        self.taken.fetch_sub(1, Ordering::SeqCst);
    }

    /// Turns taken now.
    #[cfg_attr(not(floodgate_loom), allow(dead_code))]
    pub(crate) fn taken(&self) -> u32 {
        // SeqCst: as in `take`.
        self.taken.load(Ordering::SeqCst)
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn at_most_max_turns_and_a_turn_given_back_is_retaken_for_queued_work() {
        let turns = Turns::new(2);
        assert!(turns.take(1));
        assert!(!turns.take(1), "one out: no second within 1");
        assert!(turns.take(5), "within clamps to max");
        assert!(!turns.take(2) && !turns.after_push(|| 2));
        assert!(turns.give_back(|| 2), "work queued: retaken");
        assert_eq!(turns.taken(), 2);
        assert!(!turns.give_back(|| 0), "nothing queued: given back");
        assert_eq!(turns.taken(), 1);
        assert!(!turns.give_back(|| 0));
        assert!(turns.after_push(|| 0), "within is at least 1");
        turns.release();
        assert_eq!(turns.taken(), 0);
    }
}
