//! The configuration of a time-word bucket as one immutable snapshot per generation, read by
//! deciders without a lock and replaced by setters under a mutex.
//!
//! Eight slots form a ring; generation `g` lives in slot `g % 8`. A setter (serialized by the
//! mutex) writes the whole snapshot of `g + 1` into its slot, then publishes `g + 1` in
//! `current`. A reader loads `current`, reads the slots it needs and checks each slot's stamp
//! afterwards (seqlock style): a slot is rewritten only when a setter laps the ring, and then the
//! reader retries with the newer generation. No reader ever waits on a setter in progress: the
//! slot being written is never the current one.

use std::sync::Mutex;

use crate::clock::MAX_CLOCK_LAG_NANOS;
use crate::sync::{AtomicU64, Ordering, fence};

/// Slots in the ring; a reader needs the current one and the three before it.
const SLOTS: usize = 8;
/// Stamp of a slot being written.
const WRITING: u64 = u64::MAX;

/// One generation's configuration, as plain values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// The generation (how many reconfigurations came before).
    pub(crate) generation: u64,
    /// Nanoseconds one permit is worth.
    pub(crate) interval: u64,
    /// Permits the bucket holds.
    pub(crate) capacity: u64,
    /// The instant this generation took effect (0 for generation 0).
    pub(crate) changed_at: u64,
    /// Every state word written four or more generations before this one is full by this time,
    /// read in this generation's units (0 while there is none).
    pub(crate) settled_at: u64,
    /// The latest change instant `settled_at` was computed at (its own and the conversions'):
    /// a settle bound from an instant more than the lag horizon ahead of a reader's clock was
    /// made from a leaping clock read and is not obeyed, as a leaped `changed_at` is not.
    pub(crate) settled_by: u64,
}

#[derive(Debug)]
struct Slot {
    stamp: AtomicU64,
    interval: AtomicU64,
    capacity: AtomicU64,
    changed_at: AtomicU64,
    settled_at: AtomicU64,
    settled_by: AtomicU64,
}

/// What the short decision path reads of one generation ([`Hot`]), derived when the slot is
/// written, on a cache line of its own: 64 bytes, so a generation's is found with one mask and
/// one shift.
#[derive(Debug)]
#[repr(align(64))]
struct HotSlot {
    interval: AtomicU64,
    capacity: AtomicU64,
    tau: AtomicU64,
    reach: AtomicU64,
    fast_from: AtomicU64,
    fast_len: AtomicU64,
}

/// What the short decision path of a time-word bucket reads of one generation, derived from its
/// snapshot when the slot is written (see [`ConfigStore::hot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hot {
    /// Nanoseconds one permit is worth.
    interval: u64,
    /// Permits the bucket holds.
    capacity: u64,
    /// `capacity × interval` (≤ 2^62, validated by every setter).
    tau: u64,
    /// `tau + H` ([`MAX_CLOCK_LAG_NANOS`]): a word further than this ahead of `now` is a leaping
    /// clock's.
    reach: u64,
    /// The short path serves the times `t` with `t − fast_from < fast_len` (wrapping), i.e.
    /// `fast_from..fast_from + fast_len`: from the later of the change instant and the settle
    /// time (so neither moves the time or the word), to a time early enough that `t + 2·tau + H`
    /// stays below the end of the timeline; `fast_len = 0` (none at all) when no time is that
    /// early. One wrapping subtraction and one comparison test both ends.
    fast_from: u64,
    fast_len: u64,
}

/// The short path's view of one generation's [`Hot`] fields, each loaded only where it is
/// used (a field a call does not need costs it no load). Every load is Relaxed, unchecked:
/// valid only if [`ConfigStore::recheck`] finds the generation still in force afterwards.
#[derive(Clone, Copy)]
pub(crate) struct HotView<'a> {
    slot: &'a HotSlot,
}

impl HotView<'_> {
    /// Nanoseconds one permit is worth.
    #[inline(always)]
    pub(crate) fn interval(self) -> u64 {
        // Relaxed: validated by `recheck` (seqlock reader without the stamp), as every field.
        self.slot.interval.load(Ordering::Relaxed)
    }

    /// Permits the bucket holds.
    #[inline(always)]
    pub(crate) fn capacity(self) -> u64 {
        // Relaxed: as in `interval` (validated by `recheck`).
        self.slot.capacity.load(Ordering::Relaxed)
    }

    /// `capacity × interval`.
    #[inline(always)]
    pub(crate) fn tau(self) -> u64 {
        // Relaxed: as in `interval` (validated by `recheck`).
        self.slot.tau.load(Ordering::Relaxed)
    }

    /// `tau + H`: a word further ahead of `now` is a leaping clock's.
    #[inline(always)]
    pub(crate) fn reach(self) -> u64 {
        // Relaxed: as in `interval` (validated by `recheck`).
        self.slot.reach.load(Ordering::Relaxed)
    }

    /// The first time served (see [`Hot`]); 0 for generation 0.
    #[inline(always)]
    pub(crate) fn fast_from(self) -> u64 {
        // Relaxed: as in `interval` (validated by `recheck`).
        self.slot.fast_from.load(Ordering::Relaxed)
    }

    /// How many times from `fast_from` on are served (see [`Hot`]).
    #[inline(always)]
    pub(crate) fn fast_len(self) -> u64 {
        // Relaxed: as in `interval` (validated by `recheck`).
        self.slot.fast_len.load(Ordering::Relaxed)
    }
}

impl Hot {
    fn of(snapshot: &Snapshot) -> Self {
        let tau = snapshot.capacity.saturating_mul(snapshot.interval);
        let fast_until = tau
            .checked_mul(2)
            .and_then(|two_tau| two_tau.checked_add(MAX_CLOCK_LAG_NANOS))
            .and_then(|reach| super::virtual_time::END_OF_TIME.checked_sub(reach));
        // No time is far enough from the end (tau ≥ 2^61 or so): serve none. A saturated
        // `fast_until` of 0 would serve `now = 0`, where a booking may pass the end of time.
        let fast_from = snapshot.changed_at.max(snapshot.settled_at);
        // `until < END_OF_TIME < u64::MAX`, so `until + 1` cannot overflow; a `fast_from` past
        // `until` serves nothing, as does a burst window too long for any time.
        let fast_len = fast_until.map_or(0, |until| (until + 1).saturating_sub(fast_from));
        Hot {
            interval: snapshot.interval,
            capacity: snapshot.capacity,
            tau,
            reach: tau.saturating_add(MAX_CLOCK_LAG_NANOS),
            fast_from,
            fast_len,
        }
    }
}

/// The ring of snapshots.
#[derive(Debug)]
pub(crate) struct ConfigStore {
    current: AtomicU64,
    slots: [Slot; SLOTS],
    /// The short path's view of each slot's generation, written with it.
    hot: [HotSlot; SLOTS],
    /// Serializes setters; never taken on the decision path.
    setter: Mutex<()>,
}

impl ConfigStore {
    pub(crate) fn new(first: Snapshot) -> Self {
        let store = ConfigStore {
            current: AtomicU64::new(0),
            // Not `Default`: loom's atomics have none.
            slots: std::array::from_fn(|_| Slot {
                stamp: AtomicU64::new(WRITING),
                interval: AtomicU64::new(0),
                capacity: AtomicU64::new(0),
                changed_at: AtomicU64::new(0),
                settled_at: AtomicU64::new(0),
                settled_by: AtomicU64::new(0),
            }),
            hot: std::array::from_fn(|_| HotSlot {
                interval: AtomicU64::new(0),
                capacity: AtomicU64::new(0),
                tau: AtomicU64::new(0),
                reach: AtomicU64::new(0),
                fast_from: AtomicU64::new(0),
                fast_len: AtomicU64::new(0),
            }),
            setter: Mutex::new(()),
        };
        // Generation 0 is the configuration no change came before: it takes effect at time 0 and
        // has nothing to settle (so the short path serves it from time 0, `fast_from = 0`).
        debug_assert!(
            first.changed_at == 0 && first.settled_at == 0 && first.settled_by == 0,
            "the first configuration takes effect at time 0 with nothing to settle"
        );
        store.write_slot(&Snapshot {
            generation: 0,
            changed_at: 0,
            settled_at: 0,
            settled_by: 0,
            ..first
        });
        store
    }

    /// The generation in force.
    #[inline(always)]
    pub(crate) fn generation(&self) -> u64 {
        // Acquire: pairs with the Release store of `current` in `replace`, so the slot written
        // before it is visible to the reads that follow.
        self.current.load(Ordering::Acquire)
    }

    /// The snapshot of `generation`, or `None` when a setter has since lapped the ring and
    /// rewritten its slot (the caller retries from [`generation`](Self::generation)).
    #[inline(always)]
    pub(crate) fn read(&self, generation: u64) -> Option<Snapshot> {
        let slot = &self.slots[(generation % SLOTS as u64) as usize];
        // Relaxed field loads: validated by the stamp check below (seqlock reader).
        let snapshot = Snapshot {
            generation,
            interval: slot.interval.load(Ordering::Relaxed),
            capacity: slot.capacity.load(Ordering::Relaxed),
            changed_at: slot.changed_at.load(Ordering::Relaxed),
            settled_at: slot.settled_at.load(Ordering::Relaxed),
            settled_by: slot.settled_by.load(Ordering::Relaxed),
        };
        // Acquire fence: pairs with the Release fence in `write_slot`; if any field load above
        // saw a value of a later write, the stamp load below sees that write's WRITING or newer.
        fence(Ordering::Acquire);
        // Relaxed: ordered by the fence above.
        (slot.stamp.load(Ordering::Relaxed) == generation).then_some(snapshot)
    }

    /// The capacity in force: one field of the current slot, without the snapshot's consistency
    /// check (a capacity read while a setter laps the ring is the old or the new one, each a
    /// capacity that was in force: what `check_permits` and `limit()` need).
    #[inline(always)]
    pub(crate) fn capacity(&self) -> u64 {
        let slot = &self.slots[(self.generation() % SLOTS as u64) as usize];
        // Relaxed: a single value written whole; ordered after the Acquire load of `current`.
        slot.capacity.load(Ordering::Relaxed)
    }

    /// The short path's view of `generation`'s slot, read without a stamp check: what it loads
    /// is valid only if [`recheck`](Self::recheck) returns `generation` afterwards. Generation 0
    /// needs no prior load of the generation: its slot was written before the store was shared,
    /// and is rewritten only by the setter of generation 8, which `recheck` detects.
    #[inline(always)]
    pub(crate) fn hot(&self, generation: u64) -> HotView<'_> {
        HotView {
            slot: &self.hot[(generation % SLOTS as u64) as usize],
        }
    }

    /// The generation in force, loaded after everything read since [`hot`](Self::hot) (the
    /// slot's fields, a state word): if it is the generation those reads were of, the values
    /// read of its slot were its own, and a state word loaded before this (with Acquire) was
    /// written in that generation or an older one.
    ///
    /// The slot of `g` is rewritten only by the setter of `g + 8`, after `g + 7` was published
    /// (setters are serialized). If a field load above saw any of that setter's stores, the
    /// Release fence it issued before them synchronizes with the Acquire fence here, so the load
    /// of `current` below sees `g + 7` or later: the check fails. A state word's writer loaded
    /// the generation it wrote in before its Release compare-exchange; the caller's Acquire load
    /// of that word makes the generation load here see that one or a later one.
    #[inline(always)]
    pub(crate) fn recheck(&self) -> u64 {
        // Acquire fence: pairs with the Release fence in `write_slot` (see above).
        fence(Ordering::Acquire);
        // Acquire: as in `generation` (pairs with the Release store in `replace`), so a caller
        // that goes on to read the slot of the generation returned sees it whole.
        self.current.load(Ordering::Acquire)
    }

    /// The snapshot in force, consistent (retries while a setter laps the ring).
    #[inline(always)]
    pub(crate) fn load(&self) -> Snapshot {
        loop {
            if let Some(snapshot) = self.read(self.generation()) {
                return snapshot;
            }
        }
    }

    /// Runs `make` on the snapshot in force under the setter lock; publishes what it returns as
    /// the next generation. `make` validates the whole new snapshot; on error nothing changes.
    pub(crate) fn replace<E>(
        &self,
        make: impl FnOnce(&Self, Snapshot) -> Result<Option<Snapshot>, E>,
    ) -> Result<(), E> {
        let _guard = self
            .setter
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = self.load();
        let Some(next) = make(self, current)? else {
            return Ok(());
        };
        let generation = current.generation + 1;
        self.write_slot(&Snapshot { generation, ..next });
        // Release: publishes the slot written above; pairs with the Acquire in `generation`.
        self.current.store(generation, Ordering::Release);
        Ok(())
    }

    fn write_slot(&self, snapshot: &Snapshot) {
        let slot = &self.slots[(snapshot.generation % SLOTS as u64) as usize];
        // Relaxed: the Release fence below orders it before the field stores (seqlock writer).
        slot.stamp.store(WRITING, Ordering::Relaxed);
        // Release fence: pairs with the Acquire fence in `read`.
        fence(Ordering::Release);
        // Relaxed stores: published by the Release stamp store below and the Release store of
        // `current` in `replace`.
        slot.interval.store(snapshot.interval, Ordering::Relaxed);
        slot.capacity.store(snapshot.capacity, Ordering::Relaxed);
        slot.changed_at
            .store(snapshot.changed_at, Ordering::Relaxed);
        slot.settled_at
            .store(snapshot.settled_at, Ordering::Relaxed);
        slot.settled_by
            .store(snapshot.settled_by, Ordering::Relaxed);
        let hot = Hot::of(snapshot);
        let hot_slot = &self.hot[(snapshot.generation % SLOTS as u64) as usize];
        // Relaxed: as the field stores above, after the same Release fence; the short path
        // validates what it read with `recheck`, whose Acquire fence pairs with that fence.
        hot_slot.interval.store(hot.interval, Ordering::Relaxed);
        hot_slot.capacity.store(hot.capacity, Ordering::Relaxed);
        hot_slot.tau.store(hot.tau, Ordering::Relaxed);
        hot_slot.reach.store(hot.reach, Ordering::Relaxed);
        hot_slot.fast_from.store(hot.fast_from, Ordering::Relaxed);
        hot_slot.fast_len.store(hot.fast_len, Ordering::Relaxed);
        // Release: pairs with nothing on its own: readers load the stamp Relaxed, after their
        // Acquire fence (`read`), and see the fields through the Acquire load of `current`, which
        // pairs with the Release store that follows this one in `replace` (generation 0: the
        // store is shared only after `new`). Kept Release so the stamp is never seen before the
        // fields it vouches for.
        slot.stamp.store(snapshot.generation, Ordering::Release);
    }
}
