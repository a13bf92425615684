//! The penalty box: a key denied `strikes` times within `span` is blocked for `block` — every
//! request refused, whatever its limiter says — then starts over with a clean record.
//!
//! Each key gets a second word, the *jail word*, beside its algorithm's word:
//!
//! ```text
//! bits 63..58  marker  0 = no strike, 1..=61 = strikes counted, 63 = blocked
//! bits 57..0   time    in units of 64 ns: the span's start (counting) or the block's end (blocked)
//! ```
//!
//! Times are rounded **up** to a multiple of 64 ns, so a span or a block lasts at most 63 ns
//! longer than configured, never shorter (times in whole milliseconds are exact). 58 bits of
//! 64 ns units cover the whole `u64` nanosecond timeline. The jail word is updated with the one
//! CAS loop ([`crate::limiter::update`]), only on the deny path; a blocked key's denials read it
//! and write nothing, and so does a strike that raced the one starting the block (its retry
//! finds the block and keeps it).

use std::time::Duration;

use super::shards::{KeySlot, Liveness};
use super::slot::{LimiterSlot, Rules, decide_word, word_liveness};
use crate::clock::{Clock, duration_to_nanos};
use crate::decision::{AcquireError, ConfigError, Decision, window_nanos};
use crate::limiter::{Algorithm, Step, update};
use crate::sync::{AtomicU64, Ordering};

const UNIT_SHIFT: u32 = 6;
const TIME_BITS: u32 = 58;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;
const BLOCKED: u64 = 63;
/// The most strikes a penalty box can count to.
const MAX_STRIKES: u32 = 62;

/// When a key is blocked: after `strikes` denials within `span`, for `block`.
///
/// ```
/// use floodgate::PenaltyBox;
/// use std::time::Duration;
/// // 5 denials within 10 s: blocked for 10 minutes.
/// let penalty = PenaltyBox::new(5, Duration::from_secs(10), Duration::from_secs(600))?;
/// assert_eq!(penalty.strikes(), 5);
/// assert!(PenaltyBox::new(0, Duration::from_secs(1), Duration::from_secs(1)).is_err());
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PenaltyBox {
    strikes: u32,
    span_nanos: u64,
    block_nanos: u64,
}

impl PenaltyBox {
    /// Blocks a key for `block` once it has been denied `strikes` times within `span` (the span
    /// opens at the first strike).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for `strikes` outside `1..=62`, [`ConfigError::ZeroPeriod`] for a
    /// zero span or block, [`ConfigError::DurationOutOfRange`] (`what`: `"penalty span"` or
    /// `"penalty block"`) for one beyond `u64` nanoseconds (584 years), as a window.
    ///
    /// ```
    /// use floodgate::{ConfigError, PenaltyBox};
    /// use std::time::Duration;
    /// let secs = Duration::from_secs;
    /// assert!(PenaltyBox::new(3, secs(10), secs(60)).is_ok());
    /// assert_eq!(PenaltyBox::new(3, Duration::ZERO, secs(60)), Err(ConfigError::ZeroPeriod));
    /// assert!(PenaltyBox::new(63, secs(10), secs(60)).is_err()); // at most 62 strikes
    /// assert!(matches!(
    ///     PenaltyBox::new(3, secs(10), Duration::MAX),
    ///     Err(ConfigError::DurationOutOfRange { what: "penalty block", .. })
    /// ));
    /// ```
    pub fn new(strikes: u32, span: Duration, block: Duration) -> Result<Self, ConfigError> {
        if !(1..=MAX_STRIKES).contains(&strikes) {
            return Err(ConfigError::Invalid {
                what: "penalty strikes",
                why: "must be in 1..=62",
            });
        }
        Ok(PenaltyBox {
            strikes,
            span_nanos: window_nanos("penalty span", span)?,
            block_nanos: window_nanos("penalty block", block)?,
        })
    }

    /// Denials within the span that trigger a block.
    ///
    /// ```
    /// use std::time::Duration;
    /// let p = floodgate::PenaltyBox::new(3, Duration::from_secs(10), Duration::from_secs(60))?;
    /// assert_eq!(p.strikes(), 3);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn strikes(&self) -> u32 {
        self.strikes
    }

    /// The span strikes are counted in.
    ///
    /// ```
    /// use std::time::Duration;
    /// let p = floodgate::PenaltyBox::new(3, Duration::from_secs(10), Duration::from_secs(60))?;
    /// assert_eq!(p.span(), Duration::from_secs(10));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn span(&self) -> Duration {
        Duration::from_nanos(self.span_nanos)
    }

    /// How long a block lasts.
    ///
    /// ```
    /// use std::time::Duration;
    /// let p = floodgate::PenaltyBox::new(3, Duration::from_secs(10), Duration::from_secs(60))?;
    /// assert_eq!(p.block(), Duration::from_secs(60));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn block(&self) -> Duration {
        Duration::from_nanos(self.block_nanos)
    }

    /// Records a strike at `now` against `word`; `denial` is what the key's limiter said.
    /// The step's decision is `denial`, or the block's denial if this strike starts one.
    ///
    /// A live block is kept as it is (no write; the block's denial): a strike that raced the one
    /// starting the block retries its CAS on the block word and must not count over it.
    pub(crate) fn strike(&self, word: u64, now: u64, denial: Decision) -> Step {
        if let Some(left) = Self::blocked_for(word, now) {
            return Step::deny(Decision::deny(
                denial.limit(),
                0,
                left,
                left.max(denial_reset(denial)),
            ));
        }
        let (marker, time) = unpack(word);
        let counted = match marker {
            1..=61 if now < time_nanos(time).saturating_add(self.span_nanos) => marker,
            // Clean, expired, or a block that has ended: a new span opens now.
            _ => 0,
        };
        let start = if counted == 0 { to_units(now) } else { time };
        if counted + 1 >= u64::from(self.strikes) {
            let until = to_units(now.saturating_add(self.block_nanos));
            let left = time_nanos(until).saturating_sub(now);
            return Step::new(
                Some(pack(BLOCKED, until)),
                Decision::deny(denial.limit(), 0, left, left.max(denial_reset(denial))),
            );
        }
        Step::new(Some(pack(counted + 1, start)), denial)
    }

    /// Nanoseconds the key stays blocked, if it is blocked at `now`.
    #[inline]
    pub(crate) fn blocked_for(word: u64, now: u64) -> Option<u64> {
        let (marker, time) = unpack(word);
        let until = time_nanos(time);
        (marker == BLOCKED && now < until).then(|| until - now)
    }

    /// Idle (a fresh word would behave the same from `now` on), or a lower bound of when it
    /// turns idle.
    ///
    /// The bound must hold whatever strikes come next, since the map schedules its sweeps by it
    /// and refuses new keys until then: a strike that starts a block replaces the span's end by
    /// the block's, which comes earlier when the block is shorter than what is left of the span.
    /// A counting word therefore turns idle no sooner than the span's end or a block's length,
    /// whichever comes first.
    pub(crate) fn liveness(&self, word: u64, now: u64) -> Option<u64> {
        let (marker, time) = unpack(word);
        match marker {
            0 => None,
            BLOCKED => {
                let ends = time_nanos(time);
                (now < ends).then(|| ends - now)
            }
            _ => {
                let ends = time_nanos(time).saturating_add(self.span_nanos);
                (now < ends).then(|| (ends - now).min(self.block_nanos))
            }
        }
    }
}

fn denial_reset(denial: Decision) -> u64 {
    duration_to_nanos(denial.reset_after())
}

fn unpack(word: u64) -> (u64, u64) {
    (word >> TIME_BITS, word & TIME_MASK)
}

fn pack(marker: u64, units: u64) -> u64 {
    (marker << TIME_BITS) | (units & TIME_MASK)
}

/// `nanos` in 64 ns units, rounded up (saturating at the last unit).
fn to_units(nanos: u64) -> u64 {
    nanos.div_ceil(1 << UNIT_SHIFT).min(TIME_MASK)
}

fn time_nanos(units: u64) -> u64 {
    units << UNIT_SHIFT
}

/// One key's state with a penalty box: the algorithm's word and the jail word.
#[derive(Default)]
pub(crate) struct JailedSlot {
    state: AtomicU64,
    jail: AtomicU64,
}

impl JailedSlot {
    /// Nanoseconds the key stays blocked, if it is blocked at `now`.
    pub(crate) fn blocked_for(&self, now: u64) -> Option<u64> {
        // Relaxed: a snapshot of one self-contained word.
        PenaltyBox::blocked_for(self.jail.load(Ordering::Relaxed), now)
    }
}

impl<A: Algorithm> KeySlot<Rules<A, PenaltyBox>> for JailedSlot {
    fn liveness(&self, rules: &Rules<A, PenaltyBox>, now: u64) -> Liveness {
        // Relaxed: snapshots of self-contained words, as `WordSlot::liveness`.
        let state = self.state.load(Ordering::Relaxed);
        let jail = self.jail.load(Ordering::Relaxed);
        let jailed = rules.extra.liveness(jail, now);
        // A blocked key goes last, whatever its limiter holds (a block commonly outlives the
        // limiter's state): forgetting it would lift the block.
        let blocked = PenaltyBox::blocked_for(jail, now).is_some();
        match (word_liveness(&rules.algorithm, state, now), jailed) {
            (Liveness::Idle, None) => Liveness::Idle,
            (Liveness::Idle, Some(idle_in)) => Liveness::Live {
                used: if blocked { u64::MAX } else { 1 },
                idle_in,
            },
            (live, None) => live,
            (Liveness::Live { used, idle_in }, Some(jail_in)) => Liveness::Live {
                used: if blocked { u64::MAX } else { used },
                idle_in: idle_in.max(jail_in),
            },
        }
    }

    const COPIES: bool = true;

    #[inline(always)]
    fn copy(&self) -> Option<Self> {
        // Relaxed (both): a table the rebuild owns, as `WordSlot::copy`.
        Some(JailedSlot {
            state: AtomicU64::new(self.state.load(Ordering::Relaxed)),
            jail: AtomicU64::new(self.jail.load(Ordering::Relaxed)),
        })
    }
}

impl<A: Algorithm> LimiterSlot<A, PenaltyBox> for JailedSlot {
    #[inline]
    fn state(&self) -> &AtomicU64 {
        &self.state
    }

    /// A blocked key is refused outright (`retry_after` = what is left of its block); otherwise
    /// the algorithm decides, and a denial is a strike.
    #[inline]
    fn acquire(
        &self,
        rules: &Rules<A, PenaltyBox>,
        floor: &AtomicU64,
        now: u64,
        clock: &impl Clock,
        n: u32,
    ) -> Result<Decision, AcquireError> {
        let Rules {
            algorithm,
            extra: penalty,
        } = rules;
        if let Some(left) = self.blocked_for(now) {
            // `n` is checked here too: the map's lock-free path leaves it to the slot.
            algorithm.check_permits(n)?;
            // The limiter is back to full when the block is over and its word has reset, as the
            // strike that started the block said (a read: a blocked key's denials write nothing).
            // Relaxed: a snapshot of one self-contained word, for the report only.
            let state = self.state.load(Ordering::Relaxed);
            let reset = duration_to_nanos(algorithm.decide(state, now, n).decision.reset_after());
            return Ok(Decision::deny(algorithm.limit(), 0, left, left.max(reset)));
        }
        let decision = decide_word(algorithm, &self.state, floor, now, clock, n)?;
        if decision.is_allowed() {
            return Ok(decision);
        }
        Ok(update(&self.jail, |jail| {
            penalty.strike(jail, now, decision)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial() -> Decision {
        Decision::deny(5, 0, 1_000, 1_000)
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn strikes_count_within_the_span_then_block() {
        let penalty =
            PenaltyBox::new(3, Duration::from_millis(10), Duration::from_millis(100)).unwrap();
        let s1 = penalty.strike(0, MS, denial());
        assert_eq!(s1.decision, denial());
        let s2 = penalty.strike(s1.next.unwrap(), 5 * MS, denial());
        assert_eq!(s2.decision, denial());
        // The span is [1 ms, 11 ms): a strike 1 ns before its end still counts.
        let s3 = penalty.strike(s2.next.unwrap(), 11 * MS - 1, denial());
        let word = s3.next.unwrap();
        // Ends at 111 ms - 1 ns, rounded up to a multiple of 64 ns: 111 ms.
        assert_eq!(s3.decision.retry_after().as_nanos(), 100_000_001);
        assert_eq!(PenaltyBox::blocked_for(word, 11 * MS), Some(100 * MS));
        assert_eq!(PenaltyBox::blocked_for(word, 111 * MS), None);
        assert_eq!(penalty.liveness(word, 111 * MS - 1), Some(1));
        assert_eq!(penalty.liveness(word, 111 * MS), None);
    }

    #[test]
    fn a_strike_after_the_span_starts_over() {
        let penalty =
            PenaltyBox::new(2, Duration::from_millis(10), Duration::from_millis(100)).unwrap();
        let s1 = penalty.strike(0, 0, denial());
        assert_eq!(penalty.liveness(s1.next.unwrap(), 10 * MS - 1), Some(1));
        // The span [0, 10 ms) has ended: this is strike 1 of a new span, not a block.
        let s2 = penalty.strike(s1.next.unwrap(), 10 * MS, denial());
        assert_eq!(s2.decision, denial());
        assert_eq!(PenaltyBox::blocked_for(s2.next.unwrap(), 10 * MS), None);
        assert_eq!(penalty.liveness(s2.next.unwrap(), 20 * MS - 1), Some(1));
        let s3 = penalty.strike(s2.next.unwrap(), 20 * MS - 1, denial());
        assert_eq!(
            PenaltyBox::blocked_for(s3.next.unwrap(), 20 * MS - 1),
            Some(100 * MS + 1)
        );
    }

    #[test]
    fn times_round_up_to_64_ns_and_saturate_at_the_end_of_time() {
        let penalty = PenaltyBox::new(1, Duration::from_nanos(1), Duration::from_nanos(1)).unwrap();
        let word = penalty.strike(0, 100, denial()).next.unwrap();
        assert_eq!(PenaltyBox::blocked_for(word, 100), Some(28)); // until 128
        let late = penalty.strike(0, u64::MAX - 199, denial()).next.unwrap();
        assert_eq!(PenaltyBox::blocked_for(late, u64::MAX - 199), Some(8));
        // The last 63 ns of the timeline cannot hold a block's end: no panic, a plain denial.
        let end = penalty.strike(0, u64::MAX - 3, denial());
        assert!(!end.decision.is_allowed());
        assert_eq!(
            PenaltyBox::blocked_for(end.next.unwrap(), u64::MAX - 3),
            None
        );
    }

    #[test]
    fn a_counting_words_idle_time_is_a_bound_no_strike_can_bring_forward() {
        // Span 600 ms, block 10 ms: the next strike may end the record at its block's end.
        let penalty =
            PenaltyBox::new(2, Duration::from_millis(600), Duration::from_millis(10)).unwrap();
        let s1 = penalty.strike(0, 0, denial()).next.unwrap();
        assert_eq!(penalty.liveness(s1, MS), Some(10 * MS));
        let block = penalty.strike(s1, MS, denial()).next.unwrap();
        assert_eq!(penalty.liveness(block, MS), Some(10 * MS));
        assert_eq!(penalty.liveness(block, 11 * MS), None);
        // Near the span's end the span's end is the bound.
        assert_eq!(penalty.liveness(s1, 595 * MS), Some(5 * MS));
    }

    #[test]
    fn a_strike_on_a_live_block_keeps_it_and_writes_nothing() {
        let penalty =
            PenaltyBox::new(2, Duration::from_millis(10), Duration::from_millis(100)).unwrap();
        let s1 = penalty.strike(0, 0, denial());
        let block = penalty.strike(s1.next.unwrap(), MS, denial()).next.unwrap();
        assert_eq!(PenaltyBox::blocked_for(block, MS), Some(100 * MS));
        // A strike that raced the blocking one retries on the block word: no write, the block's
        // denial.
        let raced = penalty.strike(block, MS, denial());
        assert_eq!(raced.next, None);
        assert!(!raced.decision.is_allowed());
        assert_eq!(raced.decision.retry_after(), Duration::from_millis(100));
        // Once the block has ended, a strike opens a new span.
        let after = penalty.strike(block, 101 * MS, denial());
        assert_eq!(after.decision, denial());
        assert_eq!(PenaltyBox::blocked_for(after.next.unwrap(), 101 * MS), None);
    }
}
