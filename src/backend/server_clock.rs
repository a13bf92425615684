//! [`ServerOffset`]: the offset between a server's clock and this process's, learnt from
//! samples that each fall short of it by at most one round trip.

use crate::sync::{AtomicU64, Ordering};

/// Bits of the packed word holding the client second the kept sample's window began.
const WINDOW_BITS: u32 = 12;
/// Bits holding the offset, in µs: up to 2^52 µs (142 years since the Unix epoch).
const OFFSET_BITS: u32 = 64 - WINDOW_BITS;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
const WINDOWS: u64 = 1 << WINDOW_BITS;
/// Length of a window, in client µs: a sample from an older window than the kept one is ignored.
const WINDOW_MICROS: u64 = 1_000_000;
/// The packed word before any sample (an offset of `OFFSET_MASK` is never stored).
const NO_SAMPLE: u64 = u64::MAX;

/// `server clock − client clock`, in µs, for a server whose clock reads µs since the Unix epoch
/// and a client clock that reads µs since some local origin (monotonic). One word, updated by
/// compare-exchange: the high [`WINDOW_BITS`] bits are the client second (mod 4096) of the
/// window the sample belongs to, the low bits the offset.
///
/// A call brackets the offset: the server read its clock after the request was sent and before
/// the reply arrived, so `server − received ≤ offset ≤ server − sent`. The lower end is short of
/// the truth by at most that call's round trip. The value kept is the lower end of one sample,
/// raised by every later sample's lower end and lowered by every later sample's upper end:
/// `kept = max(lower, min(kept, upper))`. So a slow reply (read late by a busy client, say)
/// never pulls a good offset down, while a server clock that steps back is followed by the
/// first sample whose upper end is below the value kept. A sample from an older window than
/// the one kept is ignored (its bounds may predate a step forward).
#[derive(Debug)]
pub(crate) struct ServerOffset {
    packed: AtomicU64,
}

impl ServerOffset {
    /// No sample yet.
    pub(crate) fn new() -> Self {
        ServerOffset {
            packed: AtomicU64::new(NO_SAMPLE),
        }
    }

    /// Records that the server read `server_micros` after a request the client sent at
    /// `sent_micros` and before the reply it received at `received_micros`. A sample that would
    /// not fit (a server clock before the client's origin, or past 2^52 µs) is ignored.
    pub(crate) fn sample(&self, server_micros: u64, sent_micros: u64, received_micros: u64) {
        let Some(lower) = server_micros.checked_sub(received_micros) else {
            return;
        };
        if lower >= OFFSET_MASK {
            return;
        }
        let upper = server_micros.saturating_sub(sent_micros.min(received_micros));
        let window = (received_micros / WINDOW_MICROS) % WINDOWS;
        // SeqCst: one word, no other memory depends on it; the strongest ordering keeps the
        // model simple and costs nothing next to the network round trip that produced it.
        let mut current = self.packed.load(Ordering::SeqCst);
        loop {
            let mut offset = lower;
            if current != NO_SAMPLE {
                let kept_window = current >> OFFSET_BITS;
                // Windows wrap every 4096 s: "newer" is a forward distance under half of that.
                let ahead = window.wrapping_sub(kept_window) % WINDOWS;
                if ahead >= WINDOWS / 2 {
                    return; // an older window than the one kept
                }
                offset = lower.max((current & OFFSET_MASK).min(upper));
            }
            let mine = (window << OFFSET_BITS) | offset;
            if mine == current {
                return; // nothing learnt
            }
            match self
                .packed
                .compare_exchange(current, mine, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return,
                Err(seen) => current = seen,
            }
        }
    }

    /// The offset kept, `None` before the first sample.
    pub(crate) fn offset(&self) -> Option<u64> {
        // SeqCst: as in `sample`.
        let packed = self.packed.load(Ordering::SeqCst);
        (packed != NO_SAMPLE).then_some(packed & OFFSET_MASK)
    }
}

#[cfg(all(test, not(floodgate_loom)))]
mod tests {
    use super::*;

    /// A call sent at client µs `sent` to a server whose offset is `truth`: the request takes
    /// `out` µs to reach it, the reply `back` µs to be read.
    fn call(clock: &ServerOffset, truth: u64, sent: u64, out: u64, back: u64) {
        clock.sample(truth + sent + out, sent, sent + out + back);
    }

    #[test]
    fn the_best_lower_bound_is_kept_and_a_lower_upper_bound_pulls_it_down() {
        let clock = ServerOffset::new();
        assert_eq!(clock.offset(), None);
        let truth = 1_700_000_000_000_000;
        call(&clock, truth, 0, 50, 300);
        assert_eq!(clock.offset(), Some(truth - 300));
        call(&clock, truth, 100, 50, 40); // a better one
        assert_eq!(clock.offset(), Some(truth - 40));
        call(&clock, truth, 200, 50, 5_000); // a worse one changes nothing
        assert_eq!(clock.offset(), Some(truth - 40));
        // The next second: a reply read half a second late (a busy client) changes nothing
        // either; taken as the offset, it would put every deadline half a second early.
        call(&clock, truth, 1_000_000, 50, 500_000);
        assert_eq!(clock.offset(), Some(truth - 40));
        // The server's clock steps back 2 ms: the first sample whose upper end is below the
        // offset kept pulls it down to that end (late by at most that call's way out) ...
        let stepped = truth - 2_000;
        call(&clock, stepped, 2_000_000, 100, 700);
        assert_eq!(clock.offset(), Some(stepped + 100));
        // ... and faster calls bring it closer.
        call(&clock, stepped, 2_000_100, 10, 50);
        assert_eq!(clock.offset(), Some(stepped + 10));
        // A clock drifting ahead raises it.
        let ahead = stepped + 3_000;
        call(&clock, ahead, 3_000_000, 10, 50);
        assert_eq!(clock.offset(), Some(ahead - 50));
        // A late report from an older second is ignored, however tight.
        call(&clock, truth, 999_000, 0, 0);
        assert_eq!(clock.offset(), Some(ahead - 50));
        // Across the wrap of the 4096 windows, later is still later.
        let later = 4_096 * WINDOW_MICROS + 3_000_000;
        call(&clock, stepped, later, 5, 5);
        assert_eq!(clock.offset(), Some(stepped + 5));
        // Samples that do not fit are ignored.
        clock.sample(5, 0, 10);
        clock.sample(u64::MAX, 0, 0);
        assert_eq!(clock.offset(), Some(stepped + 5));
    }
}
