//! loom model of the send turns of the Redis backend's coalescing (`backend::Turns`): a caller
//! that queues its decision while every turn is taken, racing a sender that gives its turn
//! back, never leaves the decision in the queue with nobody to send it. The queue is modelled
//! as a count with the release/acquire strength of the real lock-free queue.
#![cfg(floodgate_loom)]

use floodgate::loom_internals::TurnsProbe;
use floodgate_loom_tests::model;
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, Ordering};
use loom::thread;

/// The queue: pushed with release, looked at with acquire, drained whole.
#[derive(Default)]
struct Queue {
    queued: AtomicU32,
    sent: AtomicU32,
}

impl Queue {
    fn push(&self) {
        self.queued.fetch_add(1, Ordering::Release);
    }

    /// Turns the queue may have out: one while it has work (the coalescer's rule at rest).
    fn has_work(&self) -> u32 {
        u32::from(self.queued.load(Ordering::Acquire) > 0)
    }

    /// A sender holding a turn: sends batches while there is work, then gives the turn back.
    fn flush(&self, turns: &TurnsProbe) {
        loop {
            let batch = self.queued.swap(0, Ordering::AcqRel);
            self.sent.fetch_add(batch, Ordering::Relaxed);
            if batch == 0 && !turns.give_back(|| self.has_work()) {
                return;
            }
        }
    }
}

/// `pushers` callers queue one decision each while a call holds the only turn, which is then
/// given back: every decision is sent, and no turn is left taken.
fn nothing_is_left_behind(pushers: u32) {
    model(None, move || {
        let turns = Arc::new(TurnsProbe::new(2));
        let queue = Arc::new(Queue::default());
        assert!(turns.take(1), "the call out");
        let threads: Vec<_> = (0..pushers)
            .map(|_| {
                let (turns, queue) = (Arc::clone(&turns), Arc::clone(&queue));
                thread::spawn(move || {
                    if turns.take(1) {
                        // A turn was free: this caller's call goes out at once.
                        queue.sent.fetch_add(1, Ordering::Relaxed);
                        if turns.give_back(|| queue.has_work()) {
                            queue.flush(&turns);
                        }
                        return;
                    }
                    queue.push();
                    if turns.after_push(|| 1) {
                        queue.flush(&turns);
                    }
                })
            })
            .collect();
        // The call out comes back.
        if turns.give_back(|| queue.has_work()) {
            queue.flush(&turns);
        }
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(queue.queued.load(Ordering::SeqCst), 0, "left in the queue");
        assert_eq!(queue.sent.load(Ordering::SeqCst), pushers);
        assert_eq!(turns.taken(), 0, "a turn left taken");
    });
}

#[test]
fn a_queued_decision_is_sent_whoever_wins_the_race() {
    nothing_is_left_behind(1);
}

#[test]
fn two_queued_decisions_are_sent_whoever_wins_the_race() {
    nothing_is_left_behind(2);
}
