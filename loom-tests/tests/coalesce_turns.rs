//! loom model of the send turns of the Redis backend's coalescing (`backend::Turns`): a caller
//! that queues its decision while every turn is taken, racing a sender that gives its turn
//! back, never leaves the decision in the queue with nobody to send it. The queue is modelled
//! as a count with the release/acquire strength of the real lock-free queue. A sender whose
//! task is dropped (the connection's runtime shut down) fails the queue instead of sending it,
//! then gives its turn back the same way: no decision is left waiting then either.
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
    /// Failed by a dying sender (its callers see an error at once).
    failed: AtomicU32,
    /// Turns the queue may have out while it has work: 1 (the coalescer while fewer than
    /// `SECOND_SENDER_QUEUE` decisions wait) or 2 (its `MAX_SENDERS`, while that many wait).
    senders: u32,
}

impl Queue {
    fn push(&self) {
        self.queued.fetch_add(1, Ordering::Release);
    }

    /// Turns the queue may have out: `senders` while it has work, none when empty.
    fn has_work(&self) -> u32 {
        self.senders * u32::from(self.queued.load(Ordering::Acquire) > 0)
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

    /// A sender whose task is dropped with its runtime (`FlusherTurn`'s drop): fails what is
    /// queued, gives the turn back, and fails again while giving it back retakes it.
    fn fail(&self, turns: &TurnsProbe) {
        loop {
            let batch = self.queued.swap(0, Ordering::AcqRel);
            self.failed.fetch_add(batch, Ordering::Relaxed);
            if !turns.give_back(|| self.has_work()) {
                return;
            }
        }
    }

    /// Whatever a turn holder does with the queue: send it, or (dying) fail it.
    fn handle(&self, turns: &TurnsProbe, dying: bool) {
        if dying {
            self.fail(turns);
        } else {
            self.flush(turns);
        }
    }
}

/// `pushers` callers queue one decision each while a call holds a turn (of two; with `senders`
/// = 2 a pusher may take the second and send the queue alongside it, with 1 it leaves the queue
/// to the turn's holder), which is then given back: every decision is sent (or, with `dying`
/// senders, sent by its caller or failed), and no turn is left taken.
fn nothing_is_left_behind(pushers: u32, dying: bool, senders: u32) {
    model(None, move || {
        let turns = Arc::new(TurnsProbe::new(2));
        let queue = Arc::new(Queue {
            senders,
            ..Queue::default()
        });
        assert!(turns.take(1), "the call out");
        let threads: Vec<_> = (0..pushers)
            .map(|_| {
                let (turns, queue) = (Arc::clone(&turns), Arc::clone(&queue));
                thread::spawn(move || {
                    if turns.take(1) {
                        // A turn was free: this caller's call goes out at once.
                        queue.sent.fetch_add(1, Ordering::Relaxed);
                        if turns.give_back(|| queue.has_work()) {
                            queue.handle(&turns, dying);
                        }
                        return;
                    }
                    queue.push();
                    // As the coalescer: something waits, so a second call may go out.
                    if turns.after_push(|| queue.senders) {
                        queue.handle(&turns, dying);
                    }
                })
            })
            .collect();
        // The call out comes back, or its caller is dropped and its turn handed to a sender
        // on a runtime that has shut down (dropped at once: it fails the queue).
        if dying {
            queue.fail(&turns);
        } else if turns.give_back(|| queue.has_work()) {
            queue.flush(&turns);
        }
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(queue.queued.load(Ordering::SeqCst), 0, "left in the queue");
        let failed = queue.failed.load(Ordering::SeqCst);
        assert_eq!(queue.sent.load(Ordering::SeqCst) + failed, pushers);
        assert!(dying || failed == 0);
        assert_eq!(turns.taken(), 0, "a turn left taken");
    });
}

#[test]
fn a_queued_decision_is_sent_whoever_wins_the_race() {
    nothing_is_left_behind(1, false, 1);
    nothing_is_left_behind(1, false, 2);
}

#[test]
fn two_queued_decisions_are_sent_whoever_wins_the_race() {
    nothing_is_left_behind(2, false, 1);
    nothing_is_left_behind(2, false, 2);
}

#[test]
fn a_dying_sender_leaves_no_queued_decision_waiting() {
    nothing_is_left_behind(1, true, 1);
    nothing_is_left_behind(1, true, 2);
}

#[test]
fn two_queued_decisions_are_answered_whatever_a_dying_sender_races() {
    nothing_is_left_behind(2, true, 1);
    nothing_is_left_behind(2, true, 2);
}
