//! The in-flight word: `(queued, limit, in_flight)` packed in one `u64`, and the pure decision
//! of a non-blocking acquire over it.
//!
//! | bits   | field       | width   | range                                              |
//! |--------|-------------|---------|----------------------------------------------------|
//! | 0..32  | `in_flight` | 32 bits | `0..=MAX_IN_FLIGHT_LIMIT` (permits held, including those assigned to queued waiters) |
//! | 32..63 | `limit`     | 31 bits | `1..=MAX_IN_FLIGHT_LIMIT`                          |
//! | 63     | `queued`    | 1 bit   | set while a waiter is queued                       |
//!
//! **Overflow.** `in_flight` never passes the largest limit the word has held
//! ([`MAX_IN_FLIGHT_LIMIT`] `< 2³²`): an acquire adds only while `in_flight + n ≤ limit`, and a
//! hand-off to a waiter likewise; a release subtracts permits that an acquire added. So adding to
//! and subtracting from the whole word (`fetch_sub(n)`) touches `in_flight` alone and never
//! carries or borrows into `limit`.

use crate::decision::Decision;
use crate::limiter::Step;

/// The largest limit an [`InFlight`](super::InFlight) holds: 2³¹ − 1 (the width of its packed
/// `limit` field).
///
/// ```
/// assert_eq!(floodgate::concurrency::MAX_IN_FLIGHT_LIMIT, 2_147_483_647);
/// ```
pub const MAX_IN_FLIGHT_LIMIT: u32 = (1 << 31) - 1;

const IN_FLIGHT_MASK: u64 = u32::MAX as u64;
const LIMIT_SHIFT: u32 = 32;
pub(crate) const QUEUED: u64 = 1 << 63;

/// The fields of an in-flight word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fields {
    pub(crate) in_flight: u32,
    pub(crate) limit: u32,
    pub(crate) queued: bool,
}

impl Fields {
    #[inline]
    pub(crate) const fn unpack(word: u64) -> Self {
        Fields {
            in_flight: (word & IN_FLIGHT_MASK) as u32,
            limit: ((word & !QUEUED) >> LIMIT_SHIFT) as u32,
            queued: word & QUEUED != 0,
        }
    }

    #[inline]
    pub(crate) const fn pack(self) -> u64 {
        (self.in_flight as u64)
            | ((self.limit as u64) << LIMIT_SHIFT)
            | if self.queued { QUEUED } else { 0 }
    }

    /// Permits free for a new request: the limit less what is held (zero while over a lowered
    /// limit).
    #[inline]
    pub(crate) const fn free(self) -> u32 {
        self.limit.saturating_sub(self.in_flight)
    }
}

/// The decision of a non-blocking acquire of `n` permits: admitted iff no waiter is queued
/// (a queued waiter is served first: fairness) and `in_flight + n ≤ limit`. A denial writes
/// nothing. The [`Decision`] reports the limit and the permits left; its `retry_after` means
/// nothing here (a permit frees when a holder drops it, not at a time).
#[inline]
pub(crate) fn decide(word: u64, n: u32) -> Step {
    let fields = Fields::unpack(word);
    let limit = u64::from(fields.limit);
    let free = fields.free();
    if fields.queued || n > free {
        let remaining = if fields.queued { 0 } else { u64::from(free) };
        return Step::deny(Decision::deny(limit, remaining, 1, 0));
    }
    let next = Fields {
        in_flight: fields.in_flight + n,
        ..fields
    };
    Step::allow(next.pack(), Decision::allow(limit, u64::from(free - n), 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(in_flight: u32, limit: u32, queued: bool) -> u64 {
        Fields {
            in_flight,
            limit,
            queued,
        }
        .pack()
    }

    #[test]
    fn fields_round_trip_at_their_extremes() {
        for fields in [
            Fields {
                in_flight: 0,
                limit: 1,
                queued: false,
            },
            Fields {
                in_flight: MAX_IN_FLIGHT_LIMIT,
                limit: MAX_IN_FLIGHT_LIMIT,
                queued: true,
            },
            Fields {
                in_flight: u32::MAX,
                limit: MAX_IN_FLIGHT_LIMIT,
                queued: false,
            },
        ] {
            assert_eq!(Fields::unpack(fields.pack()), fields);
        }
    }

    #[test]
    fn subtracting_from_the_whole_word_touches_in_flight_alone() {
        let w = word(MAX_IN_FLIGHT_LIMIT, MAX_IN_FLIGHT_LIMIT, true);
        let after = Fields::unpack(w - u64::from(MAX_IN_FLIGHT_LIMIT));
        assert_eq!(
            after,
            Fields {
                in_flight: 0,
                limit: MAX_IN_FLIGHT_LIMIT,
                queued: true
            }
        );
    }

    #[test]
    fn admits_up_to_the_limit_and_denies_without_writing() {
        let step = decide(word(3, 5, false), 2);
        assert_eq!(step.next, Some(word(5, 5, false)));
        assert_eq!(step.decision.remaining(), 0);
        let denied = decide(word(4, 5, false), 2);
        assert_eq!(denied.next, None);
        assert_eq!(denied.decision.remaining(), 1);
    }

    #[test]
    fn a_queued_waiter_is_never_overtaken() {
        let denied = decide(word(0, 5, true), 1);
        assert_eq!(denied.next, None);
        assert!(!denied.decision.is_allowed());
    }

    #[test]
    fn over_a_lowered_limit_nothing_is_free() {
        let fields = Fields::unpack(word(7, 3, false));
        assert_eq!(fields.free(), 0);
        assert_eq!(decide(fields.pack(), 1).next, None);
    }
}
