//! [`ServerOffset`]: the offset between a server's clock and this process's, learnt from
//! samples that each fall short of it by at most one round trip.

use crate::sync::{AtomicU64, Ordering};

/// Bits of the packed word holding the client second the kept sample's window began.
const WINDOW_BITS: u32 = 12;
/// Bits holding the offset, in µs: up to 2^52 µs (142 years since the Unix epoch).
const OFFSET_BITS: u32 = 64 - WINDOW_BITS;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
const WINDOWS: u64 = 1 << WINDOW_BITS;
/// Length of a window, in client µs: the best sample of the newest window is kept.
const WINDOW_MICROS: u64 = 1_000_000;
/// The packed word before any sample (an offset of `OFFSET_MASK` is never stored).
const NO_SAMPLE: u64 = u64::MAX;

/// `server clock − client clock`, in µs, for a server whose clock reads µs since the Unix epoch
/// and a client clock that reads µs since some local origin (monotonic). One word, updated by
/// compare-exchange: the high [`WINDOW_BITS`] bits are the client second (mod 4096) of the
/// window the sample belongs to, the low bits the offset.
///
/// A sample is `server time read before a reply left − client time when it arrived`: never
/// above the true offset, and short of it by at most that call's round trip. So the largest
/// sample is the best, and every value kept is some sample (a lower bound). The newest window
/// wins: its first sample replaces an older window's best (so a drifting or stepped server
/// clock is followed within a second), a sample from an older window than the one kept is
/// ignored, and within a window the largest sample is kept.
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

    /// Records that the server read `server_micros` before a reply the client received at
    /// `client_micros`. A sample that would not fit (a server clock before the client's origin,
    /// or past 2^52 µs) is ignored.
    pub(crate) fn sample(&self, server_micros: u64, client_micros: u64) {
        let Some(offset) = server_micros.checked_sub(client_micros) else {
            return;
        };
        if offset >= OFFSET_MASK {
            return;
        }
        let window = (client_micros / WINDOW_MICROS) % WINDOWS;
        let mine = (window << OFFSET_BITS) | offset;
        // SeqCst: one word, no other memory depends on it; the strongest ordering keeps the
        // model simple and costs nothing next to the network round trip that produced it.
        let mut current = self.packed.load(Ordering::SeqCst);
        loop {
            if current != NO_SAMPLE {
                let kept = current >> OFFSET_BITS;
                // Windows wrap every 4096 s: "newer" is a forward distance under half of that.
                let ahead = window.wrapping_sub(kept) % WINDOWS;
                if ahead == 0 && offset <= current & OFFSET_MASK {
                    return; // the same window already holds a sample as good
                }
                if ahead >= WINDOWS / 2 {
                    return; // an older window than the one kept
                }
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

    #[test]
    fn the_best_sample_of_the_newest_window_is_kept() {
        let clock = ServerOffset::new();
        assert_eq!(clock.offset(), None);
        let truth = 1_700_000_000_000_000;
        clock.sample(truth + 100 - 300, 100); // round trip 300 µs
        assert_eq!(clock.offset(), Some(truth - 300));
        clock.sample(truth + 200 - 40, 200); // a better one
        assert_eq!(clock.offset(), Some(truth - 40));
        clock.sample(truth + 300 - 5_000, 300); // a worse one changes nothing
        assert_eq!(clock.offset(), Some(truth - 40));
        // The next second: its first sample replaces the old best (a drifting clock is
        // followed), then the best of that second wins again.
        let drifted = truth - 2_000;
        clock.sample(drifted + 1_000_100 - 700, 1_000_100);
        assert_eq!(clock.offset(), Some(drifted - 700));
        clock.sample(drifted + 1_000_200 - 50, 1_000_200);
        assert_eq!(clock.offset(), Some(drifted - 50));
        // A late report from the older second is ignored, however good.
        clock.sample(truth + 999_999, 999_999);
        assert_eq!(clock.offset(), Some(drifted - 50));
        // Across the wrap of the 4096 windows, later is still later.
        let later = 4_096 * WINDOW_MICROS + 1_000_000;
        clock.sample(truth + later - 10, later);
        assert_eq!(clock.offset(), Some(truth - 10));
        // Samples that do not fit are ignored.
        clock.sample(5, 10);
        clock.sample(u64::MAX, 0);
        assert_eq!(clock.offset(), Some(truth - 10));
    }
}
