//! [`LastReply`]: when a server last answered anything, so that a call its caller's own budget
//! cut short can be told apart from a server that has stopped answering.

use crate::sync::{AtomicU64, Ordering};

/// When a server last sent any reply, in µs of a monotonic client clock since some origin
/// (`0`: never), written with one store on the reply path and read only when a call is
/// cut short by its caller's own deadline (`RedisLimiter::try_acquire_for`, issue 18). One per
/// backend, and on a Redis Cluster also one per master (kept with the backend's copy of the
/// slot map): each word is written and read alone, as below.
///
/// Ordering: `SeqCst`, store and load. The word is a self-contained timestamp: nothing else
/// is published through it, and a stale read only makes the server look silent sooner (below),
/// so `Relaxed` would do for the design; but loom's model of a non-`SeqCst` load let the main
/// thread, after joining both writers, read a time its writer had overwritten (with
/// `Relaxed` and with `Release`/`Acquire` alike: `loom-tests/tests/last_reply.rs`), so the
/// model could not back a weaker ordering up. On x86-64 a `SeqCst` store is one `xchg` instead
/// of a `mov` (the same instruction count), once per reply, next to a network round trip; the
/// load is a plain `mov` either way and runs only when a call is cut short.
///
/// Monotonic enough: each time stored is one a replying thread read from a monotonic clock
/// (`Instant`), but two threads that read their times in one order may store them in the
/// other (one preempted between its read and its store), so the word can go back by as long as
/// a thread is held between those two steps, until the next reply's store
/// ([`record_if_later`](Self::record_if_later) never goes back). That error only
/// makes the server look quiet for longer than it was (a cut short call decided by the policy
/// while the server answered within its timeout); it never makes a server that has not
/// answered look alive: every time stored was a reply's (or, through
/// [`record_if_later`](Self::record_if_later), an instant a reply of that server followed). A
/// store per reply costs a plain instruction; `fetch_max` would keep the word monotonic at the
/// price of a read-modify-write loop, contended by every replying thread, on every reply.
#[derive(Debug, Default)]
pub(crate) struct LastReply {
    /// µs since the clock's origin, plus 1 (`0`: no reply yet).
    micros: AtomicU64,
}

impl LastReply {
    /// A reply arrived at `micros` (the clock's µs since its origin).
    #[inline]
    pub(crate) fn record(&self, micros: u64) {
        // SeqCst: see the type's docs (pairs with the load in `answered_within`).
        self.micros
            .store(micros.saturating_add(1), Ordering::SeqCst);
    }

    /// As [`record`](Self::record), for a time that may be well before the reply that proves
    /// it (a Redis Cluster master's, as of the instant its call was sent), so that a slow
    /// call's time does not replace a quicker later call's: stores `micros` only if the word
    /// holds an earlier time, by compare-exchange, so the word never goes back (a load and a
    /// store let two threads' steps overlap, and a slow call's instant then replaced a later
    /// one: a master looked quiet for as long as that call took; loom model
    /// `times_recorded_if_later_never_go_back`). The common case, a time no later than the
    /// word's (a call sent before the last recorded one), is one load and no write; a later
    /// time costs one locked instruction, as `record`'s `SeqCst` store does, and a retry only
    /// when another reply was recorded in between.
    #[cfg(any(feature = "redis", floodgate_loom, test))]
    #[inline]
    pub(crate) fn record_if_later(&self, micros: u64) {
        let stored = micros.saturating_add(1);
        // SeqCst: see the type's docs (pairs with the other stores of `record` and here, and
        // with the load in `answered_within`).
        let mut held = self.micros.load(Ordering::SeqCst);
        while held < stored {
            match self.micros.compare_exchange_weak(
                held,
                stored,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return,
                Err(now) => held = now,
            }
        }
    }

    /// Whether a reply arrived less than `within_micros` before `now_micros` (or after it: a
    /// reply recorded by a thread whose clock read came later than this caller's). `false`
    /// when no reply ever came.
    pub(crate) fn answered_within(&self, now_micros: u64, within_micros: u64) -> bool {
        // SeqCst: see the type's docs (pairs with the store in `record`).
        match self.micros.load(Ordering::SeqCst) {
            0 => false,
            stored => now_micros.saturating_add(1).saturating_sub(stored) < within_micros,
        }
    }

    /// The time recorded (`None`: no reply yet), read with the same one load as
    /// [`answered_within`](Self::answered_within): for the loom model and unit tests, and to
    /// order a Redis Cluster's masters by their last reply (the slot map's reads).
    #[cfg(any(feature = "redis", floodgate_loom, test))]
    pub(crate) fn last(&self) -> Option<u64> {
        // SeqCst: as in `answered_within`.
        self.micros.load(Ordering::SeqCst).checked_sub(1)
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn no_reply_is_never_within_any_window() {
        let last = LastReply::default();
        assert!(!last.answered_within(0, u64::MAX));
        assert!(!last.answered_within(5_000, u64::MAX));
    }

    #[test]
    fn a_reply_counts_for_less_than_the_window_after_it() {
        let last = LastReply::default();
        last.record(1_000);
        assert!(last.answered_within(1_000, 1));
        assert!(last.answered_within(1_199, 200));
        assert!(
            !last.answered_within(1_200, 200),
            "a whole window without a reply"
        );
        assert!(
            !last.answered_within(1_000, 0),
            "an empty window holds nothing"
        );
        // A reply recorded after the reader's clock read: within.
        assert!(last.answered_within(900, 200));
        // A reply at the clock's origin is one too.
        last.record(0);
        assert!(last.answered_within(0, 1));
        assert!(!last.answered_within(1, 1));
        last.record(u64::MAX);
        assert!(last.answered_within(u64::MAX, 1));
    }

    /// A time that may be well before its reply (a cluster master's, as of its call's send
    /// instant) does not replace a later one: a slow call's send instant would make a master
    /// that a quicker call just heard from look quiet.
    #[test]
    fn a_time_recorded_if_later_keeps_a_later_one() {
        let last = LastReply::default();
        last.record_if_later(1_000);
        assert_eq!(last.last(), Some(1_000), "a first reply");
        last.record_if_later(900);
        assert_eq!(
            last.last(),
            Some(1_000),
            "an earlier time replaced a later one"
        );
        last.record_if_later(1_200);
        assert_eq!(last.last(), Some(1_200));
        assert!(last.answered_within(1_250, 100));
        last.record_if_later(u64::MAX);
        assert_eq!(
            last.last(),
            Some(u64::MAX - 1),
            "saturates as `record` does"
        );
    }
}
