//! loom model of the Redis backend's last-reply time (`backend::LastReply`), written by each
//! replying thread and read when a caller's own deadline cut a call short (`SeqCst` both: with
//! `Relaxed`, or `Release`/`Acquire`, loom let the main thread read 10 after joining the
//! writers, whose 30 had overwritten it): a reader sees "never" or a time some reply stored,
//! never an invented or torn one, and never a writer's earlier time after its later one, nor
//! "never" after a reply; a thread that stored a time never reads "never" after it; and with
//! the stores done, the window test answers by the last time stored.
#![cfg(floodgate_loom)]

use floodgate::loom_internals::LastReplyProbe;
use floodgate_loom_tests::model;
use loom::sync::Arc;
use loom::thread;

/// The backend's timeout in the model, µs.
const TIMEOUT: u64 = 100;

/// The replies each replying thread stores, in the order it read their times.
const WRITERS: [[u64; 2]; 2] = [[10, 30], [20, 40]];

#[test]
fn racing_replies_and_a_reader_see_only_stored_times_never_going_back() {
    model(None, || {
        let last = Arc::new(LastReplyProbe::default());
        let writers: Vec<_> = WRITERS
            .into_iter()
            .map(|times| {
                let last = last.clone();
                thread::spawn(move || {
                    for t in times {
                        last.record(t);
                        // Its own store, or one after it in the word's order: never "never".
                        assert!(last.last().is_some());
                        assert!(last.answered_within(t, TIMEOUT));
                    }
                })
            })
            .collect();
        let reader = {
            let last = last.clone();
            thread::spawn(move || {
                let first = last.last();
                let second = last.last();
                for seen in [first, second].into_iter().flatten() {
                    assert!([10, 20, 30, 40].contains(&seen), "an invented time {seen}");
                }
                match (first, second) {
                    (Some(_), None) => panic!("a reply seen, then none"),
                    // Coherence: never a writer's earlier store after its later one.
                    (Some(a), Some(b)) => {
                        let earlier = WRITERS.iter().any(|w| w == &[b, a]);
                        assert!(!earlier, "{a} then {b}");
                    }
                    _ => {}
                }
            })
        };
        for writer in writers {
            writer.join().unwrap();
        }
        reader.join().unwrap();
        // Each writer's last store is the last in its order, so the word holds one of them.
        let kept = last.last().unwrap();
        assert!([30, 40].contains(&kept), "{kept}");
        // The window test answers by it: within `TIMEOUT` after it, not at `TIMEOUT`.
        assert!(last.answered_within(kept + TIMEOUT - 1, TIMEOUT));
        assert!(!last.answered_within(kept + TIMEOUT, TIMEOUT));
    });
}

#[test]
fn no_reply_is_never_within_the_window() {
    model(None, || {
        let last = Arc::new(LastReplyProbe::default());
        let reader = {
            let last = last.clone();
            thread::spawn(move || (last.last(), last.answered_within(5, TIMEOUT)))
        };
        let writer = {
            let last = last.clone();
            thread::spawn(move || last.record(3))
        };
        writer.join().unwrap();
        let (seen, within) = reader.join().unwrap();
        assert!(seen.is_none() || seen == Some(3), "{seen:?}");
        // With no store yet a reader is never told Redis answered; with the one store, it is.
        assert!(!within || last.last() == Some(3));
        assert!(last.answered_within(5, TIMEOUT));
    });
}

/// A cluster master's time is the instant its call was sent (`record_if_later`): a slow call's
/// earlier instant, stored after a quicker call's later one, would make the master look quiet
/// for as long as the slow call took. Two writers with their instants in either order: the
/// word ends at the later one, and a reader never sees it go back.
#[test]
fn times_recorded_if_later_never_go_back() {
    model(None, || {
        let last = Arc::new(LastReplyProbe::default());
        let writers: Vec<_> = [10, 40]
            .into_iter()
            .map(|t| {
                let last = last.clone();
                thread::spawn(move || {
                    last.record_if_later(t);
                    // Its own time or a later one.
                    assert!(last.last().is_some_and(|held| held >= t));
                })
            })
            .collect();
        let reader = {
            let last = last.clone();
            thread::spawn(move || {
                let (first, second) = (last.last(), last.last());
                if let (Some(a), Some(b)) = (first, second) {
                    assert!(b >= a, "{a} then {b}");
                }
            })
        };
        for writer in writers {
            writer.join().unwrap();
        }
        reader.join().unwrap();
        assert_eq!(last.last(), Some(40));
    });
}
