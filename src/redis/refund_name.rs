//! The names of lease refunds: each refund script marks its own name when it lands, so a copy
//! of it (re-sent by the cluster client after a lost reply) lands nowhere. Two refunds that
//! share a name are one refund to Redis: the second is taken for a copy and dropped.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The refund names of one process: 64 bits drawn from fresh entropy, the process id, and the
/// process's count of refunds ([`name`]).
///
/// A process forked from one that named refunds (a prefork server's workers, a supervisor's
/// `fork`) starts with a copy of this state: the parent's draw and count. So each name carries
/// its process's id, and a process whose id is not the one that drew (its first refund, or its
/// first since a fork) draws again before naming one. Hence:
/// * processes alive together on one host name apart by their ids, whatever they drew;
/// * two processes that had one id in turn (a worker exited and its id was reused) name apart
///   by their draws, made after the fork from entropy a fork cannot copy ([`fresh_entropy`]:
///   the OS's randomness, and a nanosecond clock read at the draw);
/// * processes on other hosts (or in other pid namespaces) by their draws too: equal with odds
///   of 2^-64.
///
/// A fork is seen by `std::process::id()` (a `getpid` system call with glibc since 2.25, and
/// with musl): one per refund, which is a Redis round trip anyway, and no `unsafe` hook on
/// `fork`. Left: a process whose id is that of the ancestor whose state it inherited, so it
/// does not draw again (the ancestor exited and its id came round again, and the two named the
/// same count on one key within one refund's mark life: since refunds are sent again after a
/// failed call, the later of the refund's deadline and its lease's word (a bucket's, up to its
/// burst × interval ahead) or window end, not just the backend's timeout).
pub(super) struct RefundNames {
    /// The process that drew `draw` (0: nothing drawn yet; no process has id 0).
    pid: AtomicU32,
    /// 64 bits drawn by process `pid`.
    draw: AtomicU64,
    /// Refunds named so far (in this process, and before its fork in its ancestors).
    count: AtomicU64,
}

impl RefundNames {
    /// Nothing drawn yet.
    pub(super) const fn new() -> Self {
        RefundNames {
            pid: AtomicU32::new(0),
            draw: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// The next name, in process `pid`; `fresh` gives the entropy of a draw, called when
    /// `pid` is not the process that drew.
    pub(super) fn next(&self, pid: u32, fresh: impl FnOnce() -> u64) -> String {
        // SeqCst throughout, for one argument in one total order: a thread that reads `pid` as
        // its own process's reads it after a thread of this process stored a fresh draw and
        // then `pid`, so it reads that draw or a later one, never one a fork copied. Threads
        // racing to draw each store their own: any of them is this process's.
        if self.pid.load(Ordering::SeqCst) != pid {
            self.draw.store(fresh(), Ordering::SeqCst);
            self.pid.store(pid, Ordering::SeqCst);
        }
        let draw = self.draw.load(Ordering::SeqCst);
        let count = self.count.fetch_add(1, Ordering::SeqCst);
        name(draw, pid, count)
    }
}

/// A refund's name: its process's draw, the process's id and the refund's count in it.
fn name(draw: u64, pid: u32, count: u64) -> String {
    format!("{draw:x}.{pid:x}.{count:x}")
}

/// The names of this process's refunds.
static NAMES: RefundNames = RefundNames::new();

/// A name no other refund has (see [`RefundNames`]).
pub(super) fn refund_name() -> String {
    NAMES.next(std::process::id(), fresh_entropy)
}

/// 64 bits a fork cannot copy: the OS's randomness (`getrandom`, already a dependency of
/// `ahash`), and a nanosecond reading of the system clock taken now, mixed with the process
/// id by std's per-process keyed hasher. (That hasher's keys alone would not do: std draws
/// them once per thread and steps them per `RandomState`, and a fork copies them.) Without the
/// OS's randomness (its call failed), two processes with one id still draw apart: one id is
/// held by one process at a time, so they draw at different nanoseconds (unless the clock was
/// set back between them).
fn fresh_entropy() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::hash::RandomState::new().build_hasher();
    match getrandom::u64() {
        Ok(bits) => hasher.write_u64(bits),
        Err(_) => hasher.write_u8(0),
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    hasher.write_u128(now.map_or(0, |since| since.as_nanos()));
    hasher.write_u32(std::process::id());
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    impl RefundNames {
        /// What `fork` leaves a child: a copy of the parent's memory.
        fn forked(&self) -> Self {
            RefundNames {
                pid: AtomicU32::new(self.pid.load(Ordering::SeqCst)),
                draw: AtomicU64::new(self.draw.load(Ordering::SeqCst)),
                count: AtomicU64::new(self.count.load(Ordering::SeqCst)),
            }
        }

        /// `n` names in process `pid`, each draw's entropy `entropy`.
        fn take(&self, pid: u32, entropy: u64, n: usize) -> HashSet<String> {
            (0..n).map(|_| self.next(pid, || entropy)).collect()
        }
    }

    /// A prefork server: the parent (pid 100) named 3 refunds, then forked a child (pid 101)
    /// that inherits its draw and its count, and whose own draw finds the very entropy the
    /// parent's did (the worst case: entropy a fork copies, as std's hash seed). Their next
    /// refunds still have names apart: a name shared would be one refund to Redis, the second
    /// landing nowhere.
    #[test]
    fn a_forked_child_names_its_refunds_apart_from_its_parent() {
        let parent = RefundNames::new();
        let before = parent.take(100, 7, 3);
        let child = parent.forked();
        let parents = parent.take(100, 7, 1_000);
        let childs = child.take(101, 7, 1_000);
        assert_eq!(parents.len() + childs.len(), 2_000, "each its own names");
        assert!(
            parents.is_disjoint(&childs),
            "shared: {:?}",
            parents.intersection(&childs).take(3).collect::<Vec<_>>()
        );
        assert!(before.is_disjoint(&childs));
    }

    /// Two children forked from one parent state, under one pid (the first exited and its pid
    /// was reused): each draws again on its first refund, and fresh entropy (the OS's, a
    /// clock read: what a fork cannot copy) sets their names apart; so do two siblings alive
    /// together, by their pids, whatever their entropy.
    #[test]
    fn sibling_children_name_their_refunds_apart() {
        let parent = RefundNames::new();
        parent.take(100, 7, 3);
        let (first, second) = (parent.forked(), parent.forked());
        let firsts = first.take(101, 11, 1_000);
        let seconds = second.take(101, 12, 1_000);
        assert!(firsts.is_disjoint(&seconds), "one pid, two draws");
        let (third, fourth) = (parent.forked(), parent.forked());
        assert!(
            third
                .take(102, 13, 1_000)
                .is_disjoint(&fourth.take(103, 13, 1_000)),
            "two pids, one entropy"
        );
    }

    /// In one process every name is new, and the real draw's entropy differs call to call
    /// (64 bits from the OS: equal with odds of 2^-64).
    #[test]
    fn a_process_never_repeats_a_name_and_its_entropy_is_fresh() {
        let names: HashSet<String> = (0..1_000).map(|_| refund_name()).collect();
        assert_eq!(names.len(), 1_000);
        assert_ne!(fresh_entropy(), fresh_entropy());
    }
}
