//! The sharded key → slot map behind [`Keyed`](super::Keyed) and
//! [`PenalizedKeyed`](super::PenalizedKeyed) (and the per-key in-flight counts): per shard, an
//! immutable-layout open-addressing table published through [`arc_swap::ArcSwap`], a mutex for
//! inserts and rebuilds, the cap, the sweeps and the eviction order.
//!
//! Protocol (what the loom models in `loom-tests/tests/keyed.rs`, `time_keyed.rs` and
//! `kstats.rs` check):
//! - A table never moves or removes a slot: a slot's key is set once (in the key type's cell,
//!   [`Key::Cell`](super::Key::Cell): a word-sized key in one atomic word, a 128-bit key
//!   (`IpKey`, `HashedKey`, `u128`, `i128`, `Ipv6Addr`) in two, any other in an `OnceLock`)
//!   and its state word(s) live in it for the table's life. A check on a key that exists loads the
//!   shard's table (`ArcSwap::load`: a thread-local debt slot, no shared write), finds the key by
//!   linear probing, reads the clock, and updates the slot's word(s) with the one CAS loop. It
//!   takes no lock and writes nothing shared except the key's word and, for an algorithm with
//!   a time floor (`NEEDS_TIME_FLOOR`: GCRA, token and leaky bucket), the map's floor, which an
//!   admission raises when its read is `FLOOR_GRAIN_NANOS` past it (about once per grain, see
//!   the field); a denial writes nothing.
//! - A look at a key the map does not hold (`Keyed::peek`) takes no lock either while its
//!   shard is below its cap: whether a new key would be refused reads a mirror of the shard's
//!   key count (an atomic written only under the mutex, before the table or key it counts is
//!   published); only a shard at its cap takes the mutex, to read its sweep schedule.
//! - `len()` and `stats()` take no lock either: each shard's key count and counters are atomics
//!   written only under its mutex (the counters after the key count, with Release stores) and
//!   read without it (the counters before the key count, with Acquire loads), so a scrape
//!   never waits on an insert (see `stats` for what a concurrent scrape reads).
//! - A new key is inserted under the shard's mutex into an empty slot of the current table: its
//!   first decision writes the slot's word, then the cell publishes the key (`OnceLock::set`, or
//!   a Release store of the key's word; for the word key whose word is 0, which an empty slot
//!   also reads, a Release store of the slot's index in the table's `zero` record, which a
//!   reader of a word 0 loads with Acquire; a pair key's two words, each XOR a constant, with
//!   Release stores between a Release store of the slot's index in the table's `inserting`
//!   record and one of `usize::MAX`: a reader that reads exactly one zero word loads that
//!   record and reads a slot it names as empty, so a pair caught half-written is never taken
//!   for the key whose complete pair it equals, see `PairCell`); readers find it from then
//!   on, never with the fresh word (see `insert`). The table the failed lock-free
//!   lookup loaded serves the insert when the mutex is free at once (`try_lock`; a table other
//!   than the placeholder is then the current one, since a rebuild replacing it would still
//!   hold the mutex, waiting for this reader); otherwise the lookup's table is let go before
//!   waiting for the mutex (its holder may be a rebuild waiting for that table) and loaded
//!   again under it. In a kept table the empty slot where the lookup's search ended is the
//!   key's slot if it is still empty (a key is only ever added into the first empty slot of its
//!   probe sequence), so the insert does not search again.
//! - Removing keys (a sweep of idle keys, an eviction, `forget`) and resizing rebuild the table
//!   under the mutex: the rebuild swaps in an empty placeholder (readers that load it go to the
//!   mutex and wait for the rebuild), then **waits until no reader holds the old table** (its
//!   `Arc` is unique again: every check that found a key in it has finished its CAS), and only
//!   then reads the clock (`t`) and judges and copies the words. So a rebuild and a check on the
//!   same key are ordered as the old read/write lock ordered them: a check on the old table
//!   committed before the words were judged and copied (no admission lost, none counted twice);
//!   a check on the new table loaded it after the rebuild read its clock, so it reads `now ≥ t`
//!   on a clock monotonic across threads, and since a dropped word was idle at `t`, the fresh
//!   word it starts from decides exactly as the old one would have.
//! - One time floor for the whole map (the latest clock read an admission published, to within
//!   `FLOOR_GRAIN_NANOS`), which the time-word algorithms decide at when it is ahead of their
//!   read and within the lag horizon `H`. So a reader lagging the writer of *any* key is
//!   decided at that writer's time, not only a lagging reader of the same key: one admission
//!   on one key whose read was `lead` ≤ `H` ahead lets every time-word key (GCRA / token /
//!   leaky bucket) gain what accrues in `lead`, at most min(capacity, ⌈lead × rate⌉) permits,
//!   early and once (the key's word is then written at the floor's time), until real time
//!   reaches the floor. A floor more than `H` ahead of a fresh read is ignored, so `H`'s worth
//!   is the most. The windows (`FixedWindow`, `PackedSlidingWindow`) use no floor;
//!   `PenalizedKeyed`'s penalty box, `KeyedInFlight` and the deny cache ignore it. With a floor
//!   per shard (before issue 16) the same held among a shard's keys; one per map spares a
//!   floor raise on nearly every admission when the keys in use span many shards. Pinned by
//!   `tests/keyed.rs` (`a_lead_on_one_key_lifts_every_bucket_key_once…`) and the loom model
//!   `time_keyed.rs` (`a_lead_on_one_key_lifts_a_key_of_another_shard…`).
//! - Rebuilds are amortized: a shard rebuilds when its table is three-quarters full (growing to
//!   twice its keys, within the cap), when it is full and a sweep is due (some key can be idle:
//!   `next_idle_at`), in batches of evictions, and when a judging pass finds a shard below its
//!   cap well over its live keys (below). Each rebuild sizes the table to twice the keys it
//!   keeps, so a flood of keys gone idle hands its memory back with no explicit `shrink()`: in a
//!   shard it filled to the cap, at its next sweep (the next new key there once some key can be
//!   idle); in a shard it grew but did not fill, at its next judging pass. A growth rebuild
//!   judges nothing. A growth of keys held in words ([`WordCell`](super::WordCell),
//!   [`PairCell`](super::PairCell)) with state in plain words (every map's but
//!   `KeyedInFlight`'s) copies each key's cell and state into the new table in one pass and only
//!   reads the old table, so a panic in the key's `Hash` leaves it whole; it publishes the new
//!   table in the old one's `Arc` allocation (`copy_all`, `take_arc`, `store_taken`). Other
//!   rebuilds take two passes (hashes first, then the moves).
//! - Below the cap, an insert of a new key (under the mutex, never a check of a present key)
//!   judges the shard when its table has room for more than `JUDGE_MIN_KEYS` (64), at least
//!   `slots / JUDGE_EVERY` (half its slots) new keys came since the last pass (so a pass, one
//!   look at every slot, costs at most two slot looks per insert, amortized), some key live at
//!   the last pass can be idle by now, and `JUDGE_INTERVAL_NANOS` (10 s) passed since the last
//!   pass (since the shard's first insert, before the first). If at most a
//!   quarter of its keys are live, the shard is rebuilt to twice its live keys, dropping the
//!   idle ones (a sweep, under the rebuild protocol above); otherwise it drops nothing, so a
//!   shard in steady use keeps its idle keys. A pass cannot tell a flood gone idle from keys
//!   in use that are idle between their uses; the interval bounds what it costs the second
//!   kind: a key used again after going idle is found in place, and re-inserted at most once
//!   per interval. Each pass counts in `stats().sweeps`. A shard no new key reaches keeps its
//!   table until `retain_recent()` or `shrink()`.
//!
//! Why a check takes the `ArcSwap` guard (measured against a thread-local table cache, issue 16;
//! `examples/keyed_instructions.rs`, callgrind, one hot key, GCRA; governor keyed with ahash:
//! 162 instructions allowing, 163 denying, in the same binary). This path takes 244 allowing
//! and 231 denying. With no protection at all (the table leaked, unsound, as a bound) it would
//! take 199 and 184, so no way of protecting the table brings the hot key under governor's count.
//! Safe thread-local caches of the table (`thread_local!` of `Arc<dyn Any>` entries keyed by
//! map, shard and table generation, reached through `RefCell`, `Cell::take` or a leaked
//! per-thread array) took 259 to 350 and were not faster in paired timing rounds. They would
//! also need a rebuild to seal each word it copies, since a cached table outlives its rebuild,
//! and a reader to recognise the seal inside the CAS loop: that loop belongs to
//! [`Algorithm::acquire_word`](crate::Algorithm::acquire_word), which a user's algorithm may
//! override and whose state may be any `u64`, so no sealed value can be reserved without
//! changing that public contract.
//!
//! Where a hot-key check's instructions go (session 26, per instruction with callgrind
//! `--dump-instr=yes`; `Keyed::check` 209 allowing, 197 denying, `Keyed::admit` 190.5 and 180,
//! governor keyed with ahash 162 and 163, all in the same binary; governor's `check_key`
//! answers a denial with `NotUntil`, its earliest retry time, so on denials `check` is the
//! equal-work comparison): the benchmark loop and the
//! `black_box` store of the answer about 24; hashing the `u64` key 14; picking the shard 11;
//! the guard, `ArcSwap::load` (a thread-local lookup, a debt slot taken with `xchg`) about 47
//! and its drop (the debt paid back with `lock cmpxchg`) 8; probing and comparing the key,
//! `OnceLock` state included, 13; the clock read 17; GCRA's generation-0 short path with its
//! compare-exchange 39; the `Decision` built and spilled across the guard's drop about 19 (the
//! difference `admit` saved). Session 27: `check` carries the decision out of the guard as five
//! plain words and builds the `Decision` after the drop, and it no longer pays that 19: in the
//! harness of `examples/keyed_instructions` as it is now (keys read from a precomputed cycle),
//! `check` 191 allowing and 182 denying, `admit` 192.5 and 185, governor 183 and 184, one
//! binary; after the cell array's padding (1 instruction a check in a paired build) and the
//! example's time mode alternating its order (which moved floodgate's loops, not governor's),
//! `check` 187 and 177, `admit` 188 and 180, governor 183 and 184. Issue 16, with the
//! example's paced clock (one binary, `--dump-instr=yes`): `check` 189.0 allowing and 181.0
//! denying, `admit` 188.0 and 183.0, governor 189.0 and 190.0. The guard is about 55 of the 189
//! (41 in `LocalNode::with`, about 5 for the call and the guard's spill, 9 for its drop with the
//! debt's `lock cmpxchg`), so the same path reading the table with no protection would take
//! about 135 allowing and 127 denying: the issue's 0.9× of governor (170 allowing, 171
//! denying) leaves about 35 and 44 instructions for protecting the table, under what
//! `ArcSwap::load` costs and under what the thread-local caches above cost. Nothing else on
//! the path comes near that: the hash 11, the shard's cell 10 (its bounds check included), the
//! probe 14 (`OnceLock` state included), the clock read about 19 (the example's paced clock
//! and a discarded real read), GCRA with the floor and the decision's words about 45, the
//! loop, the tick and the `black_box` of the answer the rest (about 34). The hash is
//! ahash's on purpose (issue 16, hot-key pass): foldhash's fast hash, one folded multiply (6
//! instructions for a `u64` key against ahash's 11), took `hot-allow` on key 1 from 189 to 184
//! and `ip-hot-allow` from 206 to 200, but for some random seeds it spreads sequential or
//! structured keys unevenly: `churn-100k`, six runs each, 198.0 to 198.5 with ahash every run,
//! 184.8 to 194.5 and once 254.0 with foldhash (longer probes); `ip-churn-100k` 217.7 to 218.8
//! against 204.3 to 211.4 with runs at 245.7 and 275.0. ahash's second keyed multiply keeps the
//! probes short whatever the seed. A 1,024-key churn call costs what a hot-key call does plus 0.15 extra probe
//! (linear-probing collisions, about 2 instructions): no floor, sweep-schedule or key-compare
//! work of its own. At 100,000 keys the probes average 1.67 and the slot's line misses the L2
//! cache more often than governor's bucket (callgrind with a 1 MiB last level: 1.17 against
//! 0.64 misses a call; issue 16, with a 64 KiB first level: 1.28 against 0.77, 1.06 of
//! floodgate's at the slot's first load, 0.64 of governor's at its bucket's key): 24-byte
//! slots against hashbrown's 16-byte buckets at up to 7/8. Since a word-sized key is held in
//! its word ([`WordCell`](super::WordCell)), a slot of `Keyed<u64, Gcra>` is 16 bytes, four to
//! a line, none straddling two: `churn-100k` with `--cache-sim=yes --D1=65536,8,64
//! --LL=1048576,16,64` misses the last level 0.93 times a call (1.27 with 24-byte slots,
//! governor 0.77) and the first 1.81 (2.17, governor 1.92). A key whose word is 0 (key 0) is
//! told from an empty slot by the table's `zero` record: its lookups take one more load,
//! compare and branch (`hot-allow` on key 0: 192 instructions, 189 on any other key, 188 with
//! the `OnceLock`). A 128-bit key (`IpKey`, `HashedKey`, `u128`, `i128`, `Ipv6Addr`) is held in
//! two words ([`PairCell`](super::PairCell)): a slot of `Keyed<IpKey, Gcra>` is 24 bytes (32
//! with the `OnceLock`), one in four straddling two lines; `ip-churn-100k` misses the last
//! level 1.43 times a call (1.56 with the `OnceLock`, governor 1.22), and a lookup took 14 to
//! 17 instructions more than with the `OnceLock` (`ip-hot-allow` 212 against 198, governor
//! 200; 206 since its constants fit an instruction and its home slot is tested before the
//! probe loop, `CellOps::HOME_FIRST`); at the cap 32.4 bytes a live `IpKey` key (43.1 with the `OnceLock`). A
//! growth rebuild sizes the table to `slots_for(2 × kept)`, about 2.67 slots a key kept, so the
//! load runs from 3/8 (just after a growth) to 3/4 (the next growth): 21 to 43 bytes a live
//! `u64` key below the cap (16-byte slots; a counting allocator on `Keyed<u64, Gcra>`, the shards'
//! fixed parts in: 37.3, 35.7 and 33.7 bytes a key at 50,000, 100,000 and 1,000,000 keys, 53.2,
//! 52.0 and 50.5 with 24-byte slots; `tests/keyed_flood.rs`), and about 21.3 bytes a key of the
//! cap at the cap (measured 21.7 to 21.8; 32 to 33.6 with 24-byte slots), where a table is
//! sized to the cap, not to twice its keys. Each shard adds a fixed part, about 520 bytes on
//! x86-64 (its `ShardMeta`, the table's cache-padded header and `inserting` record, its cell;
//! 630 with the 6 slots of the table it starts with, all allocated when the map is built),
//! which its keys share: a `u64` key at the cap costs 21.5 bytes with 4,096 keys a shard, 23.5
//! with 256, 29.9 with 64, 55.8 with 16, 89.5 with 8 (the fewest the default shard count gives;
//! `tests/keyed_shard_bytes.rs`). After a reconfiguration
//! (`set_limit`), each key's first decision
//! goes to the general engine, its word being stamped with an older generation; so does every
//! new key's while the generation is not a multiple of 4 (word 0 reads as generation 0's, and the
//! stamp keeps two bits). Then the word carries the generation in force and the key is back on
//! the short path: one engine call per key per reconfiguration, never on the steady path.

use std::borrow::Borrow;
use std::hash::Hash;

use crossbeam_utils::CachePadded;

use super::cap::{KeyedStats, WhenFull};
use super::key::Key;
use super::key::sealed::{CellOps, Records};
use crate::clock::{Clock, MAX_CLOCK_LAG_NANOS};
use crate::sync::{AtomicU64, Ordering};
#[cfg(not(floodgate_loom))]
use crate::sync::{Mutex, MutexGuard};
#[cfg(floodgate_loom)]
use meta_lock::{Mutex, MutexGuard};
use std::sync::TryLockError;

/// Most keys a shard holds when the shard count is chosen automatically: bounds the cost of one
/// sweep (a sweep looks at every key of one shard).
pub(crate) const KEYS_PER_SHARD_TARGET: usize = 4096;

/// Keys a shard's first table has room for (it grows by doubling).
const MIN_KEYS: usize = 4;

/// A shard below its cap whose table has room for at most this many keys is never judged for a
/// shrink on insert (see [`ShardedMap::judge_due`]): a table of at most 86 slots.
const JUDGE_MIN_KEYS: usize = 64;

/// A judging pass (see [`ShardedMap::judge_due`]) runs only after `slots / JUDGE_EVERY` new keys
/// came to the shard since the last one: a pass looks at every slot, so this bounds its cost to
/// `JUDGE_EVERY` slot looks per insert, amortized. With 8 (a pass every eighth of the slots) a
/// flood of unique keys that go idle between passes cost 1,598 instructions an insert instead of
/// 808 before judging existed (callgrind, `examples/keyed_instructions insert-1m`), 650 of them
/// in the passes' liveness checks; with 2, 1,067 (that part cut to a quarter), and a flood's
/// memory comes back after half a table of new keys instead of an eighth. (Those figures are
/// from before [`JUDGE_INTERVAL_NANOS`]: `insert-1m` now inserts its million keys within one
/// interval, so no pass runs: an insert cost 832 then, 679 after issue 16's insert cuts, 647
/// since a growth copies word keys in one pass into the old table's allocation.)
const JUDGE_EVERY: usize = 2;

/// A shard below its cap is judged (see [`ShardedMap::judge_due`]) at most once per this many
/// nanoseconds (10 s), the first time that long after its first insert. A pass cannot tell a
/// flood gone idle from keys in steady use that are idle between their uses (a key limited to
/// a few requests a millisecond and used every 10 ms is idle most of the time): both are
/// mostly idle at any instant. Dropping the second kind only re-inserts them on their next use,
/// and before this interval existed a walk over 100,000 keys did so all the time (a pass during
/// the walk's first round dropped the keys inserted so far, whose re-inserts brought the next
/// pass): 3.2x slower than without judging (`examples/keyed_instructions time churn-100k`).
/// With it, a key in steady use of a shard below its cap is dropped and re-inserted at most
/// once per interval (at its cap a shard sweeps when full, [`make_room`](ShardedMap::make_room)),
/// and a flood's memory comes back at the first new key that much after its last pass that
/// finds the rest of [`judge_due`](ShardedMap::judge_due) met (half a table of new keys since
/// that pass, and the idle bound).
pub(crate) const JUDGE_INTERVAL_NANOS: u64 = 10_000_000_000;

/// Whether forgetting a slot at a given time would change a later decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Liveness {
    /// Equal to a fresh slot: dropping it changes nothing.
    Idle,
    /// Holds state a fresh slot would not.
    Live {
        /// Permits the slot holds (what forgetting it would hand back); the eviction order.
        used: u64,
        /// Nanoseconds until it becomes idle if nobody touches it (`Decision::reset_after`), or
        /// earlier where a later check can bring that moment forward (a penalty box's block
        /// shorter than its span): the sweep schedule and a refusal's `retry_after` take it as
        /// the first moment the key can be idle.
        idle_in: u64,
    },
}

/// What a key maps to: one or more state words.
/// `R` is the configuration that gives the words meaning (the algorithm, the penalty).
pub(crate) trait KeySlot<R>: Default + Send + Sync + 'static {
    /// Whether the slot is idle at `now`.
    fn liveness(&self, rules: &R, now: u64) -> Liveness;

    /// Whether [`copy`](Self::copy) copies every slot of the type (its state is plain words,
    /// no owned resource): a growth rebuild then copies the table in one pass, leaving the old
    /// one whole (see `ShardedMap::copy_all`).
    const COPIES: bool = false;

    /// A copy of the slot's state, for a rebuild that owns the table (no reader holds it, see
    /// `take_arc`); `None` where the type does not copy (`COPIES` false).
    fn copy(&self) -> Option<Self> {
        None
    }
}

/// A new key could not get a slot: its shard is full of live keys and the policy is
/// [`WhenFull::DenyNewKeys`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Refused {
    /// Nanoseconds until some key of the shard may become idle (at least 1).
    pub(crate) retry_after: u64,
}

/// One slot of a table: a key set once (in the key type's cell, see [`Key`]), and its state.
struct Slot<K: Key, S> {
    key: K::Cell,
    value: S,
}

/// An open-addressing table with linear probing. Its layout never changes: keys are only added
/// (into empty slots, under the shard's mutex), never moved or removed; a rebuild makes a new
/// table. At most three quarters of the slots hold keys, so a probe always ends at an empty slot.
/// The table with no slots is the placeholder a rebuild publishes while it works.
struct Table<K: Key, S> {
    slots: Box<[Slot<K, S>]>,
    /// The slot holding the key whose word is 0 (a [`WordCell`](super::WordCell) key: its slot's
    /// word reads as an empty slot's; a [`PairCell`](super::PairCell) key stored as two zero
    /// words), and the slot whose `PairCell` is being published (see [`Records`]). Beside the
    /// slots' address, which every check loads, so a reader that reads a zero word finds them on
    /// the same line.
    records: Records,
    /// Readers holding this table (loom builds only: the grace period `ArcSwap` gives otherwise).
    #[cfg(floodgate_loom)]
    readers: AtomicU64,
}

/// Slots of a table with room for `keys` keys (at most three quarters full), at least 2.
fn slots_for(keys: usize) -> usize {
    keys.saturating_add(keys.div_ceil(3))
        .saturating_add(1)
        .max(2)
}

/// The most keys a table of `slots` slots takes.
fn room_of(slots: usize) -> usize {
    slots / 4 * 3 + slots % 4 * 3 / 4
}

/// The slot `hash` starts probing at: the high bits of `hash` scaled to `slots` (any size).
#[inline]
fn home(hash: u64, slots: usize) -> usize {
    ((u128::from(hash) * slots as u128) >> 64) as usize
}

impl<K: Key, S: Default> Table<K, S> {
    fn new(slots: usize) -> Self {
        Table {
            slots: (0..slots)
                .map(|_| Slot {
                    key: K::Cell::empty(),
                    value: S::default(),
                })
                .collect(),
            records: Records::new(),
            #[cfg(floodgate_loom)]
            readers: AtomicU64::new(0),
        }
    }
}

impl<K: Key, S> Table<K, S> {
    fn placeholder() -> Self {
        Table {
            slots: Box::new([]),
            records: Records::new(),
            #[cfg(floodgate_loom)]
            readers: AtomicU64::new(0),
        }
    }

    fn is_placeholder(&self) -> bool {
        self.slots.is_empty()
    }

    /// Runs `f` on the key slot `index` holds, `None` when it is empty (see the cell's
    /// `with_key`).
    #[inline(always)]
    fn with_key<R>(&self, index: usize, f: impl FnOnce(&K) -> R) -> Option<R> {
        self.slots[index].key.with_key(&self.records, index, f)
    }

    /// Whether slot `index` holds a key (running no user code: not the key's `from_word`).
    #[inline(always)]
    fn is_set(&self, index: usize) -> bool {
        self.slots[index].key.is_set(&self.records, index)
    }

    /// The slots that hold keys, with their indices.
    fn held(&self) -> impl Iterator<Item = (usize, &Slot<K, S>)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.is_set(i))
    }

    /// The slot of `key`, if the table holds it (never for the placeholder).
    #[inline(always)]
    fn find<Q>(&self, key: &Q, hash: u64) -> Option<&S>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        self.search(key, hash).ok().map(|slot| &slot.value)
    }

    /// `key`'s slot (`Ok`), or the index of the first empty slot of its probe sequence (`Err`),
    /// where an insert puts it: one walk serves an insert's lookup and its placement (the
    /// inserter holds the shard's mutex, under which no other key is set). `None` only for the
    /// placeholder (no slots).
    #[inline(always)]
    fn probe<Q>(&self, key: &Q, hash: u64) -> Option<Result<&Slot<K, S>, usize>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        match self.search(key, hash) {
            Ok(slot) => Some(Ok(slot)),
            // A table with slots always has an empty one (`room_of`), where the search ends.
            Err(i) if i < self.slots.len() => Some(Err(i)),
            Err(_) => None,
        }
    }

    /// The walk of `key`'s probe sequence, for the lock-free lookup (and [`probe`](Self::probe)):
    /// `key`'s slot, or the index of the first empty slot of the sequence (for the placeholder,
    /// 0, which holds no slot).
    #[inline(always)]
    fn search<Q>(&self, key: &Q, hash: u64) -> Result<&Slot<K, S>, usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let slots = &self.slots[..];
        let mut i = home(hash, slots.len());
        if K::Cell::HOME_FIRST {
            // The home slot before the loop: the same loads and tests as the loop's first turn
            // (see `CellOps::HOME_FIRST`).
            let Some(slot) = slots.get(i) else {
                return Err(i);
            };
            match slot
                .key
                .with_key(&self.records, i, |held| held.borrow() == key)
            {
                None => return Err(i),
                Some(true) => return Ok(slot),
                Some(false) => {}
            }
            i += 1;
            if i == slots.len() {
                i = 0;
            }
        }
        loop {
            let Some(slot) = slots.get(i) else {
                return Err(i);
            };
            match slot
                .key
                .with_key(&self.records, i, |held| held.borrow() == key)
            {
                None => return Err(i),
                Some(true) => return Ok(slot),
                Some(false) => {}
            }
            i += 1;
            if i == slots.len() {
                i = 0;
            }
        }
    }

    /// The first empty slot of `hash`'s probe sequence, where its key goes (the caller holds the
    /// shard's mutex, knows the key is absent and that the table has room). Keys are set only
    /// under the mutex: the slot stays empty, and no reader finds it, until the caller sets it.
    /// Returns the slot's index.
    fn vacant(&self, hash: u64) -> usize {
        let len = self.slots.len();
        let mut i = home(hash, len);
        while self.is_set(i) {
            i += 1;
            if i == len {
                i = 0;
            }
        }
        i
    }

    /// [`insert`](ShardedMap::insert) into a table this thread owns: `key` is the cell of a slot of
    /// the old table, moved as it is (re-setting a fresh `OnceLock` would run its `Once` again);
    /// `zero_key` says whether it held the key whose word is 0 (the old table's record), which
    /// this table then records at its new slot.
    fn put(&mut self, key: K::Cell, value: S, hash: u64, zero_key: bool) {
        let i = self.vacant(hash);
        let slot = &mut self.slots[i];
        slot.key = key;
        slot.value = value;
        if zero_key {
            // Relaxed: the table is this thread's until the rebuild publishes it (the cell's
            // store, a Release the readers' load pairs with), and `vacant` above is this
            // thread's own read.
            self.records.zero.store(i, Ordering::Relaxed);
        }
    }
}

/// Where a shard publishes its table: `ArcSwap` normally, so a reader's load writes only its
/// own thread's debt slot; under loom a mutex and a reader count loom can see (the protocol
/// above is what the models check, not `ArcSwap`'s internals).
///
/// The table is published cache-padded (`CachePadded<Table>`: 128 bytes aligned to 128 on
/// x86-64, aarch64 and powerpc64; crossbeam pads to 256 on s390x, 64 on riscv64 and most other
/// targets, 32 on 32-bit arm and mips): every check reads its header (the slots' address and
/// length), and `Arc::new` would otherwise place it right after the slots' allocation, within
/// the 128 bytes (the pair of lines the adjacent-line prefetcher fetches together) of the
/// table's last slots and of the next allocation, often another shard's first slots; an
/// admission on a key there then made every other core's next check miss the header (the test
/// `a_tables_header_shares_no_line_with_its_slots`, run on the targets padded to 128 or more).
#[cfg(not(floodgate_loom))]
mod cell {
    use super::{Key, Table};
    use crossbeam_utils::CachePadded;
    use std::sync::Arc;

    pub(super) struct TableCell<K: Key, S>(arc_swap::ArcSwap<CachePadded<Table<K, S>>>);

    pub(super) type TableGuard<K, S> = arc_swap::Guard<Arc<CachePadded<Table<K, S>>>>;

    /// The placeholder every rebuild of the map's shards publishes (see `take_arc`): one
    /// allocation for the map, not one per rebuild. No slot, no record of it is ever written.
    pub(super) struct Placeholder<K: Key, S>(Arc<CachePadded<Table<K, S>>>);

    impl<K: Key, S> Placeholder<K, S> {
        pub(super) fn new() -> Self {
            Placeholder(Arc::new(CachePadded::new(Table::placeholder())))
        }

        /// The placeholder's strong count: the map's own, plus one for each cell holding it.
        #[cfg(test)]
        pub(super) fn holders(&self) -> usize {
            Arc::strong_count(&self.0)
        }
    }

    impl<K: Key, S> TableCell<K, S> {
        pub(super) fn new(table: Table<K, S>) -> Self {
            TableCell(arc_swap::ArcSwap::from_pointee(CachePadded::new(table)))
        }

        /// A cell holding the table this one holds (the map's unused end cells share one
        /// placeholder).
        pub(super) fn sharing(&self) -> Self {
            TableCell(arc_swap::ArcSwap::new(self.0.load_full()))
        }

        #[inline]
        pub(super) fn load(&self) -> TableGuard<K, S> {
            self.0.load()
        }

        pub(super) fn store(&self, table: Table<K, S>) {
            self.0.store(Arc::new(CachePadded::new(table)));
        }

        /// Publishes the placeholder and returns the old table once no reader holds it. The
        /// swap turns every reader's debt on the old table into a strong count, so the `Arc`
        /// is unique exactly when the last check that loaded it has finished; `try_unwrap`'s
        /// Acquire pairs with the Release decrement of each reader's guard drop, so every word
        /// they wrote is visible here.
        ///
        /// A cell that already held the placeholder (a rebuild that unwound after taking its
        /// table apart; every caller runs `repair` first, so none does today) gives an empty
        /// table at once: the shared placeholder is never unique (the map holds it), and waiting
        /// for it would spin forever. Tested only once the `Arc` is found shared, off the
        /// common path.
        #[cfg(test)]
        pub(super) fn take(&self, placeholder: &Placeholder<K, S>) -> Table<K, S> {
            self.take_arc(placeholder).into_table()
        }

        /// Publishes the placeholder and returns the old table, in its allocation, once no
        /// reader holds it, so that [`store_taken`](Self::store_taken) puts the next table in
        /// it instead of allocating another. The swap (`ArcSwap`'s debt payment, a SeqCst
        /// compare-exchange on each thread's debt slot) turns every debt still on the old table
        /// into a strong count, whose guard drop is a Release decrement that `get_mut`'s
        /// Acquire load of the count pairs with (as `try_unwrap`'s Acquire did); a reader that
        /// paid its debt back before (its own SeqCst compare-exchange on that slot, after its
        /// CAS) has that write read by the swap's (failing, SeqCst, so Acquire)
        /// compare-exchange on the slot. So the `Arc` is unique exactly when the
        /// last check that loaded it has finished, and every word it wrote is visible here.
        /// (A cell that held the placeholder gives a new empty table, as `take` does.)
        pub(super) fn take_arc(&self, placeholder: &Placeholder<K, S>) -> Taken<K, S> {
            let mut old = self.0.swap(Arc::clone(&placeholder.0));
            loop {
                if Arc::get_mut(&mut old).is_some() {
                    return Taken(old);
                }
                if Arc::ptr_eq(&old, &placeholder.0) {
                    return Taken(Arc::new(CachePadded::new(Table::placeholder())));
                }
                std::thread::yield_now();
            }
        }

        /// Publishes `next` in the allocation of the table `taken` holds, which it returns (the
        /// caller drops it after the store, as a rebuild dropped the table it took apart).
        pub(super) fn store_taken(&self, taken: Taken<K, S>, next: Table<K, S>) -> Table<K, S> {
            let mut arc = taken.0;
            let old = match Arc::get_mut(&mut arc) {
                Some(table) => {
                    CachePadded::into_inner(std::mem::replace(table, CachePadded::new(next)))
                }
                // Not while this thread holds the only `Arc` (`take_arc`): a fresh allocation,
                // as `store` makes.
                None => {
                    self.store(next);
                    return Table::placeholder();
                }
            };
            self.0.store(arc);
            old
        }

        /// Puts a taken table back as it was (a rebuild that unwinds).
        pub(super) fn put_back(&self, taken: Taken<K, S>) {
            self.0.store(taken.0);
        }
    }

    /// A table taken out of its cell by [`TableCell::take_arc`], no reader holding it.
    pub(super) struct Taken<K: Key, S>(Arc<CachePadded<Table<K, S>>>);

    impl<K: Key, S> Taken<K, S> {
        /// The table, out of its allocation (for a rebuild that takes it apart).
        pub(super) fn into_table(self) -> Table<K, S> {
            let mut arc = self.0;
            loop {
                match Arc::try_unwrap(arc) {
                    Ok(table) => return CachePadded::into_inner(table),
                    // Not while `take_arc` found it unique (no reader can load it again from the
                    // cell, which holds the placeholder): waited for, as `take` waited.
                    Err(shared) => {
                        arc = shared;
                        std::thread::yield_now();
                    }
                }
            }
        }
    }

    impl<K: Key, S> std::ops::Deref for Taken<K, S> {
        type Target = Table<K, S>;
        fn deref(&self) -> &Table<K, S> {
            &self.0
        }
    }
}

#[cfg(floodgate_loom)]
mod cell {
    use super::{Key, Table};
    use crate::sync::{Mutex, Ordering, thread};
    use std::sync::Arc;

    pub(super) struct TableCell<K: Key, S>(Mutex<Arc<Table<K, S>>>);

    pub(super) struct TableGuard<K: Key, S>(Arc<Table<K, S>>);

    /// The map's one placeholder, as without loom: every `take_arc` of every shard publishes it, so
    /// the models run the sharing (its reader count moved by the readers of every shard that
    /// load it, never waited on). Made with the map, inside the model.
    pub(super) struct Placeholder<K: Key, S>(Arc<Table<K, S>>);

    impl<K: Key, S> Placeholder<K, S> {
        pub(super) fn new() -> Self {
            Placeholder(Arc::new(Table::placeholder()))
        }
    }

    impl<K: Key, S> std::ops::Deref for TableGuard<K, S> {
        type Target = Table<K, S>;
        fn deref(&self) -> &Table<K, S> {
            &self.0
        }
    }

    impl<K: Key, S> Drop for TableGuard<K, S> {
        fn drop(&mut self) {
            // SeqCst: the model's grace period; pairs with the load in `take_arc`.
            self.0.readers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl<K: Key, S> TableCell<K, S> {
        pub(super) fn new(table: Table<K, S>) -> Self {
            TableCell(Mutex::new(Arc::new(table)))
        }

        pub(super) fn sharing(&self) -> Self {
            TableCell(Mutex::new(Arc::clone(&self.0.lock().unwrap())))
        }

        pub(super) fn load(&self) -> TableGuard<K, S> {
            let current = self.0.lock().unwrap();
            let table = Arc::clone(&current);
            // SeqCst: counted before the swap in `take_arc` can happen (under the same mutex).
            table.readers.fetch_add(1, Ordering::SeqCst);
            TableGuard(table)
        }

        pub(super) fn store(&self, table: Table<K, S>) {
            *self.0.lock().unwrap() = Arc::new(table);
        }

        pub(super) fn take_arc(&self, placeholder: &Placeholder<K, S>) -> Taken<K, S> {
            let mut old =
                std::mem::replace(&mut *self.0.lock().unwrap(), Arc::clone(&placeholder.0));
            loop {
                if Arc::ptr_eq(&old, &placeholder.0) {
                    // As without loom: never waited on.
                    return Taken(Arc::new(Table::placeholder()));
                }
                // SeqCst: pairs with the readers' decrement.
                if old.readers.load(Ordering::SeqCst) == 0 && Arc::get_mut(&mut old).is_some() {
                    return Taken(old);
                }
                thread::yield_now();
            }
        }

        pub(super) fn store_taken(&self, taken: Taken<K, S>, next: Table<K, S>) -> Table<K, S> {
            let mut arc = taken.0;
            let old = match Arc::get_mut(&mut arc) {
                Some(table) => std::mem::replace(table, next),
                None => {
                    self.store(next);
                    return Table::placeholder();
                }
            };
            *self.0.lock().unwrap() = arc;
            old
        }

        pub(super) fn put_back(&self, taken: Taken<K, S>) {
            *self.0.lock().unwrap() = taken.0;
        }
    }

    pub(super) struct Taken<K: Key, S>(Arc<Table<K, S>>);

    impl<K: Key, S> Taken<K, S> {
        pub(super) fn into_table(self) -> Table<K, S> {
            let mut arc = self.0;
            loop {
                match Arc::try_unwrap(arc) {
                    Ok(table) => return table,
                    Err(shared) => {
                        arc = shared;
                        thread::yield_now();
                    }
                }
            }
        }
    }

    impl<K: Key, S> std::ops::Deref for Taken<K, S> {
        type Target = Table<K, S>;
        fn deref(&self) -> &Table<K, S> {
            &self.0
        }
    }
}

use cell::{Placeholder, TableCell, TableGuard, Taken};

/// The shard's mutex under loom: a lock flag behind loom's `Mutex` and `Condvar` (a waiter
/// blocks, as on a real mutex, instead of spinning), the data behind a second loom `Mutex` taken
/// only by the flag's holder, so that `try_lock` is modelled as std's is: one attempt that never
/// waits for the holder. loom 0.7's own `try_lock` can leave the trying thread blocked when
/// another thread takes the mutex at that step (tokio-rs/loom#376), a deadlock no real mutex
/// has: `insert`'s `try_lock` while it holds a table would then hang a rebuild waiting for that
/// table.
#[cfg(floodgate_loom)]
mod meta_lock {
    use loom::sync::Condvar;
    use std::ops::{Deref, DerefMut};
    use std::sync::{LockResult, PoisonError, TryLockError, TryLockResult};

    pub(super) struct Mutex<T> {
        /// Whether a guard is out; held by loom's mutex only for these bookkeeping steps.
        held: loom::sync::Mutex<bool>,
        freed: Condvar,
        data: loom::sync::Mutex<T>,
    }

    pub(super) struct MutexGuard<'a, T> {
        /// `None` only while dropping: the data is let go before the flag.
        data: Option<loom::sync::MutexGuard<'a, T>>,
        lock: &'a Mutex<T>,
    }

    impl<T> Mutex<T> {
        pub(super) fn new(data: T) -> Self {
            Mutex {
                held: loom::sync::Mutex::new(false),
                freed: Condvar::new(),
                data: loom::sync::Mutex::new(data),
            }
        }

        pub(super) fn lock(&self) -> LockResult<MutexGuard<'_, T>> {
            let mut held = self.flag();
            while *held {
                held = self
                    .freed
                    .wait(held)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            *held = true;
            drop(held);
            self.guard()
        }

        pub(super) fn try_lock(&self) -> TryLockResult<MutexGuard<'_, T>> {
            let mut held = self.flag();
            if *held {
                return Err(TryLockError::WouldBlock);
            }
            *held = true;
            drop(held);
            Ok(self.guard()?)
        }

        fn flag(&self) -> loom::sync::MutexGuard<'_, bool> {
            self.held.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// The data, free whenever the flag is (only the flag's holder takes it).
        fn guard(&self) -> LockResult<MutexGuard<'_, T>> {
            match self.data.lock() {
                Ok(data) => Ok(MutexGuard {
                    data: Some(data),
                    lock: self,
                }),
                Err(poison) => Err(PoisonError::new(MutexGuard {
                    data: Some(poison.into_inner()),
                    lock: self,
                })),
            }
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            match &self.data {
                Some(data) => data,
                None => unreachable!("taken only in drop"),
            }
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            match &mut self.data {
                Some(data) => data,
                None => unreachable!("taken only in drop"),
            }
        }
    }

    impl<T> Drop for MutexGuard<'_, T> {
        fn drop(&mut self) {
            drop(self.data.take());
            *self.lock.flag() = false;
            self.lock.freed.notify_one();
        }
    }
}

/// Unused table cells at each end of the map's array of cells: 128 bytes (two 64-byte cache
/// lines, the pair the adjacent-line prefetcher fetches together), so no other heap object
/// shares a line with a shard's cell (a write to such a neighbour would make every check on
/// those shards miss its cell). They share one empty placeholder table and are never read. Under
/// loom, where a cell is a loom mutex, none: the models make no cells beyond their shards.
#[cfg(not(floodgate_loom))]
const PAD_CELLS: usize = 128 / size_of::<usize>();
#[cfg(floodgate_loom)]
const PAD_CELLS: usize = 0;

/// A shard's bookkeeping, under its mutex.
struct Meta {
    /// Keys in the current table; written only through [`set_len`], which mirrors it in
    /// [`ShardMeta::keys`].
    len: usize,
    /// Slots of the current table; written only through [`Meta::set_slots`].
    slots: usize,
    /// The most keys the current table takes (`room_of(slots)`), kept with `slots`: read on
    /// every insert, which would otherwise compute it twice.
    room: usize,
    /// No key of this shard becomes idle before this time (a lower bound, kept by every sweep
    /// and by inserts once the shard is within an eighth of its cap, see `insert`): before it, a
    /// sweep would free nothing. Read only when the shard is full.
    next_idle_at: u64,
    /// The latest clock read at which a sweep or an eviction dropped a key of this shard. A key
    /// inserted afterwards is first decided no earlier than this (within the lag horizon): a
    /// dropped key was idle at the dropper's time, so a checker whose clock lags the dropper's
    /// must not start it afresh at its own, earlier time (where the old state may still have been
    /// live).
    dropped_at: u64,
    /// No shrink judging (see [`judge_due`](ShardedMap::judge_due)) runs before this time: the
    /// earliest moment a key live at the last judging pass can be idle (a lower bound while
    /// checks only move a key's idle time later).
    next_judge_at: u64,
    /// The time of the last judging pass, or of the shard's first insert before its first pass
    /// (`None` before that insert): no pass runs within [`JUDGE_INTERVAL_NANOS`] of it.
    judged_at: Option<u64>,
    /// New keys inserted since the last judging pass: a pass runs only after
    /// `slots / JUDGE_EVERY` of them, which keeps its cost (one look at every slot) O(1)
    /// amortized per insert.
    inserts_since_judge: usize,
    /// Inserts deciding their new key: one more while an insert runs the user's code for it (the
    /// algorithm's decision, then its idle test for the sweep schedule), one fewer once the
    /// schedule counts the key. A panic there leaves it above 0, when `next_idle_at` may miss
    /// the key (idle: its decision never ran) or was never set (`u64::MAX` at the mark): a full
    /// shard then sweeps at once ([`make_room`](ShardedMap::make_room)), and a sweep, which
    /// judges every key, sets it back to 0. A count, not a flag: a later insert's own pair of
    /// steps leaves an earlier panic's mark in place. (Costs an increment and a decrement of a
    /// word of the mutex's line per insert, nothing kept in a register across the decision.)
    deciding: usize,
}

impl Meta {
    /// Records the current table's slot count, and the keys it takes.
    fn set_slots(&mut self, slots: usize) {
        self.slots = slots;
        self.room = room_of(slots);
    }
}

/// A shard's mutex and bookkeeping, and what a read takes without the mutex: the mirror of its
/// key count and its counters.
struct ShardMeta {
    lock: Mutex<Meta>,
    /// `Meta::len`, written with it under the mutex (only by [`set_len`]), before the table or
    /// key it counts is published; read without the mutex by
    /// [`refuses_new_key`](ShardedMap::refuses_new_key), so a `peek` on an absent key in a shard
    /// below its cap takes no lock, and by [`len`](ShardedMap::len) and
    /// [`stats`](ShardedMap::stats). A `u64` for the loom shim's atomics.
    keys: AtomicU64,
    counters: Counters,
}

/// The shard's counters behind [`KeyedStats`]: written only under the shard's mutex (by
/// [`add`]), read without it by [`stats`](ShardedMap::stats), so a metrics scrape neither
/// waits on an insert nor delays one.
#[derive(Default)]
struct Counters {
    evicted_idle: AtomicU64,
    evicted_live: AtomicU64,
    refused_new_keys: AtomicU64,
    sweeps: AtomicU64,
}

/// One shard, as the map's two arrays hold it: its table, which every check reads, and its
/// mutex and bookkeeping, which inserts write.
struct Shard<'a, K: Key, S> {
    table: &'a TableCell<K, S>,
    meta: &'a Mutex<Meta>,
    /// The mirror of `meta.len` ([`ShardMeta::keys`]).
    keys: &'a AtomicU64,
    /// The counters ([`ShardMeta::counters`]), written under `meta`.
    counters: &'a Counters,
}

impl<K: Key, S> Clone for Shard<'_, K, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K: Key, S> Copy for Shard<'_, K, S> {}

/// What a rebuild does besides copying.
#[derive(Clone, Copy)]
struct Plan {
    /// Judge every key and drop the idle ones.
    sweep: bool,
    /// Evict this many live keys, fewest permits held first.
    evict: usize,
    /// Size the table to exactly the keys kept (an explicit shrink), not twice them.
    tight: bool,
}

/// What pass 2 of a rebuild does with a slot of the old table (see
/// [`rebuild`](ShardedMap::rebuild)).
#[derive(Clone, Copy)]
enum Fate {
    /// No key: nothing to move.
    Empty,
    /// A key pass 1 let go (idle, or forgotten): dropped after the new table is published.
    Drop,
    /// A kept key: moved, with the next of pass 1's hashes.
    Keep,
    /// A key pass 1 kept and an eviction then chose: its hash skipped, dropped after the new
    /// table is published.
    Evict,
}

/// The `forget` of a rebuild that forgets no key by name.
fn no_forget<K>() -> Option<fn(&K) -> bool> {
    None
}

/// The sharded map. Rules (the algorithm, the penalty) are passed in by the owner.
pub(crate) struct ShardedMap<K: Key, S> {
    /// Each shard's table cell (one pointer), side by side: a check reads only its shard's
    /// cell, and the cells of many shards share a cache line (64 shards in 512 bytes), which
    /// stays cached however many shards the keys in use spread over. A check's load writes
    /// nothing here (`ArcSwap::load` writes its own thread's debt slot); only a rebuild's store
    /// does, which makes the readers of the neighbouring shards fetch the line once again.
    /// (A shard used to be one cache-padded struct of its cell and its mutex: 256 bytes a
    /// shard, one more cache line per check as soon as the shards in use outgrew the L1 cache,
    /// e.g. 1,024 keys over 512 shards.) Shard `i`'s cell is `tables[PAD_CELLS + i]`, with
    /// [`PAD_CELLS`] unused cells at either end, so the array shares no cache line holding a
    /// shard's cell with another allocation.
    tables: Box<[TableCell<K, S>]>,
    /// Each shard's mutex and bookkeeping (and the mirror of its key count), a cache line or
    /// two of its own (inserts write it), off the lines checks read.
    metas: Box<[CachePadded<ShardMeta>]>,
    /// The time floor of every key's state words (see
    /// [`limiter::update_at`](crate::limiter::update_at)), one for the whole map, beside the
    /// fields every check reads. A floor per shard was raised by nearly every admission once
    /// the keys in use were spread over many shards (each shard then goes more than one
    /// [`FLOOR_GRAIN_NANOS`](crate::clock::FLOOR_GRAIN_NANOS) between its checks): one more
    /// locked operation per admission, on the line every reader of the shard loads its table
    /// from. One floor is raised at most about once per grain whatever the keys. The price: a
    /// floor raised by another key's writer is a clock value some thread read before (nothing
    /// is decided later than some past read), but where reads disagree a key is decided at
    /// another key's later read: one read `lead` (≤ the lag horizon) ahead lets each time-word
    /// key gain min(capacity, ⌈lead × rate⌉) permits early, once (see the module docs).
    floor: AtomicU64,
    /// What a rebuild publishes while it works (shared by every shard's rebuilds).
    placeholder: Placeholder<K, S>,
    hasher: ahash::RandomState,
    shard_mask: usize,
    shard_cap: usize,
    /// `shard_cap - shard_cap / 8`: the key count from which an insert keeps the sweep schedule
    /// (`next_idle_at`, see `insert`), computed once, not on every insert.
    mark: usize,
    when_full: WhenFull,
}

fn lock(meta: &Mutex<Meta>) -> MutexGuard<'_, Meta> {
    // A panic in user code run under the mutex (a key's Hash, Eq, Clone or Drop, the clock, the
    // algorithm) poisons it; the bookkeeping is never left half-updated in a way that breaks a
    // later call. A rebuild interrupted in its first pass (Hash, Eq) puts its table back; the
    // keys it drops are dropped (their Drop run) only after the new table is published and
    // counted, so a panic there loses nothing else.
    meta.lock().unwrap_or_else(|poison| poison.into_inner())
}

impl<K: Key, S> ShardedMap<K, S> {
    pub(crate) fn shard_count(&self) -> usize {
        self.shard_mask + 1
    }

    pub(crate) fn max_keys(&self) -> usize {
        self.shard_cap * self.shard_count()
    }

    /// The map's time floor (see the field), for a read that writes no key: a setter's change
    /// instant.
    pub(crate) fn floor(&self) -> &AtomicU64 {
        &self.floor
    }

    /// Shard `index`'s table cell.
    #[inline]
    fn cell(&self, index: usize) -> &TableCell<K, S> {
        &self.tables[PAD_CELLS + index]
    }

    /// The shard `hash` falls in.
    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        // Bits 32.. pick the shard; the table's home slot comes from the top bits.
        (hash >> 32) as usize & self.shard_mask
    }

    /// Shard `index`'s table cell and mutex.
    fn shard_at(&self, index: usize) -> Shard<'_, K, S> {
        let meta = &self.metas[index];
        Shard {
            table: self.cell(index),
            meta: &meta.lock,
            keys: &meta.keys,
            counters: &meta.counters,
        }
    }

    /// The shard `hash` falls in.
    fn shard(&self, hash: u64) -> Shard<'_, K, S> {
        self.shard_at(self.shard_index(hash))
    }

    /// Every shard, in order.
    fn all_shards(&self) -> impl Iterator<Item = Shard<'_, K, S>> {
        (0..self.shard_count()).map(|index| self.shard_at(index))
    }
}

impl<K: Key, S> ShardedMap<K, S>
where
    S: Default + Send + Sync + 'static,
{
    /// `shards` must be a power of two no larger than `max_keys` (checked by the builder).
    pub(crate) fn new(max_keys: usize, shards: usize, when_full: WhenFull) -> Self {
        debug_assert!(shards.is_power_of_two() && shards <= max_keys);
        let shard_cap = max_keys / shards;
        let first = slots_for(MIN_KEYS.min(shard_cap));
        // The unused end cells share one placeholder: they are never read or written. (None
        // under loom, which has no end cells: the models make no objects beyond their shards.)
        #[cfg(not(floodgate_loom))]
        let unused = Some(TableCell::new(Table::placeholder()));
        #[cfg(floodgate_loom)]
        let unused: Option<TableCell<K, S>> = None;
        let pads = || {
            unused
                .iter()
                .flat_map(|unused| (0..PAD_CELLS).map(|_| unused.sharing()))
        };
        let tables = pads()
            .chain((0..shards).map(|_| TableCell::new(Table::new(first))))
            .chain(pads())
            .collect();
        let metas = (0..shards)
            .map(|_| {
                CachePadded::new(ShardMeta {
                    lock: Mutex::new(Meta {
                        len: 0,
                        slots: first,
                        room: room_of(first),
                        next_idle_at: u64::MAX,
                        dropped_at: 0,
                        next_judge_at: 0,
                        judged_at: None,
                        inserts_since_judge: 0,
                        deciding: 0,
                    }),
                    keys: AtomicU64::new(0),
                    counters: Counters::default(),
                })
            })
            .collect();
        // Under loom, fixed seeds: a table's layout decides which slot's (loom) atomic a new key
        // gets, and loom replays executions only if every one makes the same objects.
        #[cfg(floodgate_loom)]
        let hasher = ahash::RandomState::with_seeds(1, 2, 3, 4);
        #[cfg(not(floodgate_loom))]
        let hasher = ahash::RandomState::new();
        ShardedMap {
            tables,
            metas,
            floor: AtomicU64::new(0),
            placeholder: Placeholder::new(),
            hasher,
            shard_mask: shards - 1,
            shard_cap,
            mark: shard_cap - shard_cap / 8,
            when_full,
        }
    }

    /// The hash `key` is found by (for [`get_or`](Self::get_or) and [`insert`](Self::insert)).
    #[inline(always)]
    pub(crate) fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Runs `run(slot, now, floor)` on `key`'s slot, inserting a fresh slot if the key is new and
    /// there is room (see the module docs for the protocol). Reads the clock exactly once.
    /// `floor` is the map's time floor, for algorithms that need one.
    #[inline]
    pub(crate) fn access<Q, R, T>(
        &self,
        key: &Q,
        clock: &impl Clock,
        rules: &R,
        run: impl Fn(&S, u64, &AtomicU64) -> T,
    ) -> Result<T, Refused>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        S: KeySlot<R>,
    {
        let hash = self.hash(key);
        self.get_or(
            key,
            hash,
            clock,
            |slot, now, floor| Ok(run(slot, now, floor)),
            |missed| self.insert(key, hash, clock, rules, &run, missed),
        )
    }

    /// The lock-free path of [`access`](Self::access): runs `run(slot, now, floor)` on `key`'s
    /// slot if the shard's current table holds it (`hash` from [`hash`](Self::hash)), reading
    /// the clock once; otherwise (the key is absent, or a rebuild is under way:
    /// [`insert`](Self::insert) waits for it) runs `missing` with the table it searched, which
    /// `insert` reuses when it can (see [`Missed`]).
    #[inline(always)]
    pub(crate) fn get_or<Q, T>(
        &self,
        key: &Q,
        hash: u64,
        clock: &impl Clock,
        run: impl FnOnce(&S, u64, &AtomicU64) -> T,
        missing: impl FnOnce(Missed<K, S>) -> T,
    ) -> T
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        // The table cell alone: the lock-free path never touches the shard's mutex.
        let table = self.cell(self.shard_index(hash)).load();
        match table.search(key, hash) {
            Ok(slot) => run(&slot.value, clock.now_nanos(), &self.floor),
            Err(vacant) => missing(Missed { table, vacant }),
        }
    }

    /// [`access`](Self::access) for a key [`get_or`](Self::get_or) did not find: under the shard's
    /// mutex, inserting it if it is still absent and there is room.
    ///
    /// `missed` is the failed lookup's table. It is kept, and not loaded again, when the mutex is
    /// free at once (`try_lock`): unless it is a rebuild's placeholder (then loaded again as
    /// below), it is then the shard's current table, and stays so while this thread holds the
    /// mutex. A table other than the placeholder is replaced only by a rebuild (under the
    /// mutex), which waits until no reader holds it (see `take_arc`): one that replaced this table
    /// after the lookup loaded it would still be waiting for this thread's guard, so would still
    /// hold the mutex. When the mutex is taken, the guard is let go before waiting for it (the
    /// holder may be a rebuild waiting for this very table), and the table is loaded again under
    /// the mutex. (loom model `a_new_key_racing_a_rebuild_lands_in_the_table_that_stays`.)
    #[inline(never)]
    pub(crate) fn insert<Q, R, T>(
        &self,
        key: &Q,
        hash: u64,
        clock: &impl Clock,
        rules: &R,
        run: impl FnOnce(&S, u64, &AtomicU64) -> T,
        missed: Missed<K, S>,
    ) -> Result<T, Refused>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        S: KeySlot<R>,
    {
        self.insert_inline(key, hash, clock, rules, run, missed)
    }

    /// [`insert`](Self::insert), inlined into a caller that is itself off the lookup's path
    /// (`KeyedFacade::insert`, not inlined): one call and one copy of the answer fewer per new
    /// key than through `insert`.
    #[inline(always)]
    pub(crate) fn insert_inline<Q, R, T>(
        &self,
        key: &Q,
        hash: u64,
        clock: &impl Clock,
        rules: &R,
        run: impl FnOnce(&S, u64, &AtomicU64) -> T,
        missed: Missed<K, S>,
    ) -> Result<T, Refused>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
        S: KeySlot<R>,
    {
        let shard = self.shard(hash);
        let (mut meta, kept) = match shard.meta.try_lock() {
            Ok(meta) => (meta, Some(missed)),
            // A panic in user code under the mutex poisons it (see `lock`): taken all the same.
            Err(TryLockError::Poisoned(poison)) => (poison.into_inner(), Some(missed)),
            Err(TryLockError::WouldBlock) => {
                drop(missed);
                (lock(shard.meta), None)
            }
        };
        let now = clock.now_nanos();
        // One table serves the lookup and, when no rebuild is needed, the insert: under the mutex
        // the table changes only by this thread's rebuild, which must not run while this thread
        // holds the old table (a rebuild waits until no check holds it).
        let (mut table, mut searched) = match kept {
            Some(missed) => (missed.table, missed.vacant),
            None => (shard.table.load(), usize::MAX),
        };
        // The placeholder: a rebuild was under way when the table was loaded (the lookup's, which
        // then got the mutex after the rebuild let it go), or one was interrupted.
        if table.is_placeholder() {
            drop(table);
            repair(shard, &mut meta);
            table = shard.table.load();
            // Where the search ended says nothing of this table.
            searched = usize::MAX;
        }
        // Where the key goes if this table stays: the first empty slot of its probe sequence.
        // Where the lookup's search of this table ended, if that slot is still empty: keys are
        // only added (under the mutex, into the first empty slot of their probe sequence) and
        // never moved or removed, so the slots the search passed still hold other keys, and the
        // key, had another thread inserted it since, would be in that slot. (`searched` is
        // `usize::MAX`, no slot, for a table loaded here.)
        let seen = searched < table.slots.len() && !table.is_set(searched);
        let mut vacant = if seen {
            Some(searched)
        } else {
            match table.probe(key, hash) {
                // Inserted by another thread, or a rebuild was under way.
                Some(Ok(slot)) => return Ok(run(&slot.value, now, &self.floor)),
                Some(Err(i)) => Some(i),
                None => None,
            }
        };
        // A table well over its live keys hands its memory back (see `judge_due`): judged here,
        // on the insert of a new key, never on a check of a present one.
        meta.inserts_since_judge = meta.inserts_since_judge.saturating_add(1);
        if meta.judged_at.is_none() {
            // A second read, as for a pass: a one-shot leaping read must not put off judging
            // until real time reaches it.
            meta.judged_at = Some(judge_time(now, clock));
        }
        if self.judge_due(&meta, now) {
            let swept;
            (table, swept) = self.judge_pass(shard, &mut meta, table, rules, now, clock);
            if swept {
                vacant = None;
            }
        }
        if self.needs_room(&meta) {
            drop(table);
            self.make_room(shard, &mut meta, rules, now, clock)?;
            table = shard.table.load();
            vacant = None;
        }
        // A fresh slot is decided no earlier than the latest drop in this shard: the key may be
        // one that was dropped as idle on a clock ahead of ours. A drop time beyond the lag
        // horizon is a leaping clock's and is not obeyed.
        let now = if meta.dropped_at > now && meta.dropped_at - now <= MAX_CLOCK_LAG_NANOS {
            meta.dropped_at
        } else {
            now
        };
        let index = match vacant {
            Some(i) => i,
            None => table.vacant(hash),
        };
        let slot = &table.slots[index];
        // Decided before the key is published: a reader finds the key only with this decision's
        // word, so one whose clock lags the drop time never decides the fresh word at its own,
        // earlier time (the floor above guards this decision only). The key is published when
        // `publish` drops, after the decision or while a panic in it unwinds (the slot's word is
        // then the key's, never left behind in an empty slot), and counted before. The key is
        // cloned and staged (a word key's `to_word`) first: a panic in that user code leaves
        // the slot and the count untouched.
        let publish = Publish {
            table: &table,
            index,
            owned: Some(K::Cell::stage(key.to_owned())),
        };
        let len = meta.len + 1;
        set_len(shard, &mut meta, len);
        // From the mark on the sweep schedule counts the new key, after its decision (below):
        // a panic in the user's code there (the algorithm's decision or idle test) leaves
        // `deciding` above 0, so a full shard sweeps at once instead of trusting a bound never
        // set (`u64::MAX`, which refused every new key of a full shard for good) or one that
        // misses the new key, idle when its decision never ran (a full shard refusing new keys
        // while it holds it).
        meta.deciding += 1;
        let result = run(&slot.value, now, &self.floor);
        drop(publish);
        // The sweep schedule (`next_idle_at`) is read only when the shard is full. Far below the
        // cap it is not kept, which spares each insert a probe decision; the insert that brings
        // the shard to within an eighth of its cap judges every key once (`idle_bound`), and
        // later inserts keep the bound with the new key's probe. The judging pass runs again
        // only after a rebuild (itself a pass over the keys) took the shard back under the mark.
        let mark = self.mark;
        if meta.len == mark {
            meta.next_idle_at = idle_bound(&table, rules, now);
        } else if meta.len > mark
            && let Liveness::Live { idle_in, .. } = slot.value.liveness(rules, now)
        {
            meta.next_idle_at = meta.next_idle_at.min(now.saturating_add(idle_in));
        }
        meta.deciding -= 1;
        Ok(result)
    }

    /// Runs `run(slot, now, floor)` with `key`'s slot if it is tracked; inserts nothing.
    pub(crate) fn peek<Q, R>(
        &self,
        key: &Q,
        clock: &impl Clock,
        run: impl FnOnce(Option<&S>, u64, &AtomicU64) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        {
            let table = shard.table.load();
            if !table.is_placeholder() {
                return run(table.find(key, hash), clock.now_nanos(), &self.floor);
            }
        }
        // A rebuild is under way: wait for it.
        let mut meta = lock(shard.meta);
        repair(shard, &mut meta);
        let table = shard.table.load();
        run(table.find(key, hash), clock.now_nanos(), &self.floor)
    }

    /// What [`insert`](Self::insert) would answer a new key of hash `hash` at `now`, taking
    /// nothing: `Some(retry_after)` when its shard is full of live keys and the policy refuses new
    /// keys (the `retry_after` an insert would report), `None` when there is room (or some key
    /// is idle, so a sweep would make room). Scans the shard only when it is full and a sweep
    /// would run, and keeps the schedule it finds when no key is idle (as that sweep would), so
    /// peeks against a full shard of live keys scan it once per schedule, not once each; for
    /// [`peek`](crate::Keyed::peek) on a key the map does not hold.
    ///
    /// Takes no lock while the shard is below its cap (the common case): it reads the mirror of
    /// the shard's key count. Only a shard at its cap takes the mutex, to read its sweep schedule
    /// (and scan it). A shard whose rebuild is under way reads the count from before it, which
    /// is no lower than after (a rebuild keeps or drops keys; an interrupted one's repair leaves
    /// none), so the fast answer, room, stands.
    pub(crate) fn refuses_new_key<R>(&self, hash: u64, rules: &R, now: u64) -> Option<u64>
    where
        S: KeySlot<R>,
    {
        if self.when_full == WhenFull::EvictLeastUsed {
            return None;
        }
        let shard = self.shard(hash);
        // Acquire: pairs with the Release store in `set_len`. That store precedes the publication
        // of the table (a rebuild's) or key (an insert's) it counts, so a caller that loaded that
        // table, or found that key, before this call reads this count or a later one.
        let keys = shard.keys.load(Ordering::Acquire);
        if keys < self.shard_cap as u64 {
            return None;
        }
        let mut meta = lock(shard.meta);
        repair(shard, &mut meta);
        if meta.len < self.shard_cap {
            return None;
        }
        // As `make_room`: before `next_idle_at` no key is idle and no sweep runs; from it on, a
        // sweep drops the idle keys, or finds none and schedules the next one.
        let next_idle_at = if now >= meta.next_idle_at || meta.deciding > 0 {
            let bound = idle_bound(&shard.table.load(), rules, now);
            // No key idle: the schedule a sweep finding none would set (the bound an insert at
            // the mark sets, read the same way: a lower bound, since a check only puts a key's
            // idle time later), kept so that later peeks and inserts do not judge every key
            // again before it. Not while a decision is under way (`deciding`: its key may be
            // missing from the bound); a bound at or before `now` (an idle key) is not kept.
            if bound > now && meta.deciding == 0 {
                meta.next_idle_at = bound;
            }
            bound
        } else {
            meta.next_idle_at
        };
        (next_idle_at > now).then(|| next_idle_at - now)
    }

    /// Whether an insert into a shard below its cap judges whether the shard is well over its live
    /// keys ([`judge`](Self::judge)): its table has room for more than [`JUDGE_MIN_KEYS`], at
    /// least `slots / JUDGE_EVERY` new keys came since the last pass, some key live at that pass
    /// can be idle by now (`next_judge_at`), and [`JUDGE_INTERVAL_NANOS`] have passed since it
    /// (since the shard's first insert, before its first pass: `judged_at`). So a pass runs
    /// at most once per interval and per idle horizon of the shard's earliest live key, and
    /// costs O(1) amortized per insert. A shard at its cap sweeps on its own schedule
    /// ([`make_room`](Self::make_room)).
    fn judge_due(&self, meta: &Meta, now: u64) -> bool {
        // The new keys' count first: it is what an insert finds short nearly every time.
        meta.inserts_since_judge >= meta.slots / JUDGE_EVERY
            && meta.len < self.shard_cap
            && meta.room > JUDGE_MIN_KEYS
            && now >= meta.next_judge_at
            && meta
                .judged_at
                .is_some_and(|at| now >= at.saturating_add(JUDGE_INTERVAL_NANOS))
    }

    /// A judging pass ([`judge`](Self::judge)) and, when it finds the shard well over its live
    /// keys, the sweep that drops its idle keys; none when the pass is not due on a second
    /// clock read ([`judge_time`]). Takes the table the caller loaded and returns
    /// the current one, with whether it changed (a sweep). Not inlined into `insert`: a pass is
    /// rare, and a profile shows it apart (callgrind `--toggle-collect='*judge_pass*'` leaves it
    /// out of a count).
    #[inline(never)]
    fn judge_pass<R>(
        &self,
        shard: Shard<'_, K, S>,
        meta: &mut Meta,
        table: TableGuard<K, S>,
        rules: &R,
        now: u64,
        clock: &impl Clock,
    ) -> (TableGuard<K, S>, bool)
    where
        S: KeySlot<R>,
    {
        // Due on a second read too (as `judge` reads): an insert's one leaping read must not
        // judge the shard before the interval (or the idle bound) is over on the clock.
        let now = judge_time(now, clock);
        if !self.judge_due(meta, now) {
            return (table, false);
        }
        if !self.judge(shard, meta, &table, rules, now, clock) {
            return (table, false);
        }
        // The rebuild waits until no check holds the old table: this thread's guard included.
        drop(table);
        let plan = Plan {
            sweep: true,
            evict: 0,
            tight: false,
        };
        self.rebuild(shard, meta, rules, clock, plan, no_forget());
        // The kept keys' earliest idle time, or, with none kept, the next insert credit.
        meta.next_judge_at = if meta.next_idle_at == u64::MAX {
            now
        } else {
            meta.next_idle_at
        };
        (shard.table.load(), true)
    }

    /// A judging pass over the current table (read without waiting for checks: it only loads
    /// words): whether at most a quarter of the shard's keys are live at `now` (read again, see
    /// [`judge_time`]), so the caller rebuilds the table to twice the live keys, dropping the
    /// idle ones (a sweep, counted by the rebuild). Otherwise it drops nothing, so a shard in
    /// steady use keeps its idle keys, counts the pass in `sweeps`, and schedules the next one.
    fn judge<R>(
        &self,
        shard: Shard<'_, K, S>,
        meta: &mut Meta,
        table: &Table<K, S>,
        rules: &R,
        now: u64,
        clock: &impl Clock,
    ) -> bool
    where
        S: KeySlot<R>,
    {
        let now = judge_time(now, clock);
        meta.inserts_since_judge = 0;
        meta.judged_at = Some(now);
        let mut live = 0usize;
        let mut next_idle_at = u64::MAX;
        for (_, slot) in table.held() {
            if let Liveness::Live { idle_in, .. } = slot.value.liveness(rules, now) {
                live += 1;
                next_idle_at = next_idle_at.min(now.saturating_add(idle_in));
            }
        }
        if live.saturating_mul(4) <= meta.len {
            return true;
        }
        add(&shard.counters.sweeps, 1);
        meta.next_judge_at = next_idle_at;
        false
    }

    /// Whether one more key needs [`make_room`](Self::make_room): the shard is full, or its table
    /// three-quarters full.
    fn needs_room(&self, meta: &Meta) -> bool {
        meta.len >= self.shard_cap || meta.len >= meta.room
    }

    /// Makes room for one more key: grows a table three-quarters full; in a full shard, sweeps
    /// when some key can be idle and evicts a batch under [`WhenFull::EvictLeastUsed`]. Errs when the shard is full of live keys and the
    /// policy refuses new keys.
    fn make_room<R>(
        &self,
        shard: Shard<'_, K, S>,
        meta: &mut Meta,
        rules: &R,
        now: u64,
        clock: &impl Clock,
    ) -> Result<(), Refused>
    where
        S: KeySlot<R>,
    {
        if !self.needs_room(meta) {
            return Ok(());
        }
        let full = meta.len >= self.shard_cap;
        if !full {
            // Below the cap a table grows and keeps its idle keys: dropping them would only
            // re-insert them on their next use (a key used every minute by a rate of one a
            // second is idle between uses). Idle keys go when the cap needs their room, when a
            // judging pass finds at most a quarter of the keys live (`judge`), or on
            // `retain_recent`.
            let plan = Plan {
                sweep: false,
                evict: 0,
                tight: false,
            };
            self.rebuild(shard, meta, rules, clock, plan, no_forget());
            return Ok(());
        }
        // Dropping a key judges it idle at `now`: a second read guards that judgement against a
        // one-shot leaping read (which would drop keys live at the present time).
        let now = judge_time(now, clock);
        // Before `next_idle_at` no key is idle, so a sweep would find nothing: skipping it is
        // what keeps a flood of new keys against a full shard of live keys O(1) per call.
        let sweep = now >= meta.next_idle_at || meta.deciding > 0;
        let evict = match self.when_full {
            // A batch (an eighth of the shard, at most 1,024) per rebuild keeps evictions
            // O(1) amortized per new key.
            WhenFull::EvictLeastUsed => (self.shard_cap / 8).clamp(1, 1024),
            WhenFull::DenyNewKeys => 0,
        };
        if sweep || evict > 0 {
            let plan = Plan {
                sweep,
                evict,
                tight: false,
            };
            self.rebuild(shard, meta, rules, clock, plan, no_forget());
        }
        if meta.len < self.shard_cap {
            return Ok(());
        }
        add(&shard.counters.refused_new_keys, 1);
        Err(Refused {
            retry_after: meta.next_idle_at.saturating_sub(now).max(1),
        })
    }

    /// Replaces the shard's table by a new one holding its keys less the dropped ones (idle
    /// keys when `plan.sweep`, a batch of live keys when `plan.evict` and the shard is still
    /// full, keys `forget` names), sized to twice the keys kept. Waits until no check holds the
    /// old table before judging (see the module docs). Returns how many idle keys it dropped.
    fn rebuild<R>(
        &self,
        shard: Shard<'_, K, S>,
        meta: &mut Meta,
        rules: &R,
        clock: &impl Clock,
        plan: Plan,
        forget: Option<impl Fn(&K) -> bool>,
    ) -> usize
    where
        S: KeySlot<R>,
    {
        // Pass 1 runs all of the user's code a rebuild runs (`Eq` in `forget`, `Hash`): a panic
        // there puts the old table back, so it loses nothing (pass 2 only moves words). So a
        // growth hashes its keys before it moves them, into a vector of the keys' hashes, not
        // while moving them. A growth of cells and states that copy (`copy_all`) needs no second
        // pass: it copies, leaving the old table whole until the new one is complete.
        let restore = Restore {
            cell: shard.table,
            table: Some(shard.table.take_arc(&self.placeholder)),
        };
        let Some(old) = restore.table.as_ref() else {
            unreachable!("set above")
        };
        let judge = plan.sweep || plan.evict > 0;
        // A growth (or a shrink to fit) of words: one pass copies every key into the new table
        // (it judges nothing, so reads no clock).
        if !judge
            && forget.is_none()
            && let Some((next, kept)) = self.copy_all::<R>(old, meta.len, plan.tight)
        {
            let taken = restore.disarm();
            meta.set_slots(next.slots.len());
            set_len(shard, meta, kept);
            // In the old table's allocation; the old table, whole (its keys' copies are in
            // `next`, and none has a `Drop` to run), dropped after.
            drop(shard.table.store_taken(taken, next));
            return 0;
        }
        // Read after every check on the old table has committed (`take_arc` waited for them).
        let now = judge_time(clock.now_nanos(), clock);
        // Each slot's fate, only where a key can be dropped: a growth (or a shrink to fit)
        // moves every key, from the slots pass 1 lists.
        let mut fates = if judge || forget.is_some() {
            vec![Fate::Empty; old.slots.len()]
        } else {
            Vec::new()
        };
        // A growth (or a shrink to fit) keeps every key: pass 1 reads each cell once, for the
        // key's hash, and lists where the keys are; pass 2 moves them from there, never
        // looking at an empty slot again.
        let moves_all = fates.is_empty();
        // Pass 1: what stays, and the hashes of the keys it keeps, in slot order (pass 2 moves
        // them in that order); with the keys' slots when `moves_all`.
        let mut hashes = Vec::with_capacity(if moves_all { 0 } else { meta.len });
        let mut held: Vec<(u64, usize)> = Vec::with_capacity(if moves_all { meta.len } else { 0 });
        let mut kept = 0;
        let mut idle = 0;
        let mut forgotten = 0;
        let mut next_idle_at = u64::MAX;
        let mut candidates: Vec<(u64, usize)> = Vec::new();
        for (i, slot) in old.slots.iter().enumerate() {
            if moves_all {
                if let Some(hash) = old.with_key(i, |key| self.hasher.hash_one(key)) {
                    held.push((hash, i));
                    kept += 1;
                }
                continue;
            }
            // Whether `forget` names the key (a word key is rebuilt on the stack).
            let Some(forgotten_key) =
                old.with_key(i, |key| forget.as_ref().is_some_and(|forget| forget(key)))
            else {
                continue;
            };
            if forgotten_key {
                forgotten += 1;
                fates[i] = Fate::Drop;
                continue;
            }
            if judge {
                match slot.value.liveness(rules, now) {
                    Liveness::Idle => {
                        idle += 1;
                        fates[i] = Fate::Drop;
                        continue;
                    }
                    Liveness::Live { used, idle_in } => {
                        next_idle_at = next_idle_at.min(now.saturating_add(idle_in));
                        if plan.evict > 0 {
                            candidates.push((used, i));
                        }
                    }
                }
            }
            if let Some(fate) = fates.get_mut(i) {
                *fate = Fate::Keep;
            }
            if let Some(hash) = old.with_key(i, |key| self.hasher.hash_one(key)) {
                hashes.push(hash);
            }
            kept += 1;
        }
        let old = restore.disarm().into_table();
        let mut evicted = 0;
        if plan.evict > 0 && kept >= self.shard_cap {
            let batch = plan.evict.min(candidates.len());
            if batch < candidates.len() {
                candidates.select_nth_unstable_by_key(batch, |&(used, _)| used);
            }
            for &(_, i) in &candidates[..batch] {
                fates[i] = Fate::Evict;
            }
            evicted = batch;
            kept -= batch;
        }
        // Pass 2: move the kept keys into a table sized to twice them (a sweep of a flood gone
        // idle hands its memory back), within the cap.
        let mut next = Table::new(self.slots_after(kept, plan.tight));
        // The keys the rebuild lets go are set aside until the new table is published and
        // counted. Their `Drop` is user code: one that panics then loses nothing (before, keys
        // were dropped while the kept ones moved, and such a panic left the placeholder, so
        // `repair` started the shard over empty). A growth lets no key go.
        let mut hashes = hashes.into_iter();
        let mut dropped = Vec::with_capacity(idle + forgotten + evicted);
        // Relaxed: the old table is this thread's (no reader holds it: `take_arc`).
        let zero = old.records.zero_owned();
        let mut old = old;
        // Every key, from the slots pass 1 listed; each left empty in the old table, which is
        // then dropped with no key in it.
        for &(hash, i) in &held {
            let slot = std::mem::replace(
                &mut old.slots[i],
                Slot {
                    key: K::Cell::empty(),
                    value: S::default(),
                },
            );
            next.put(slot.key, slot.value, hash, i == zero);
        }
        // Otherwise each slot by its fate (`fates` has one for every slot of the old table).
        let slots = if moves_all {
            Vec::new()
        } else {
            std::mem::take(&mut old.slots).into_vec()
        };
        drop(old);
        for (i, slot) in slots.into_iter().enumerate() {
            let fate = fates.get(i).copied().unwrap_or(Fate::Empty);
            // A key pass 1 kept has its hash next in `hashes`, an evicted one too (it was kept
            // before the batch was chosen); only slots holding a key are kept.
            match fate {
                Fate::Keep => {
                    if let Some(hash) = hashes.next() {
                        next.put(slot.key, slot.value, hash, i == zero);
                    }
                }
                Fate::Evict => {
                    hashes.next();
                    dropped.push(slot);
                }
                Fate::Drop => dropped.push(slot),
                Fate::Empty => {}
            }
        }
        meta.set_slots(next.slots.len());
        set_len(shard, meta, kept);
        shard.table.store(next);
        // After `set_len`: a scrape that counts these drops reads the key count without them
        // (see `stats`).
        add(&shard.counters.evicted_idle, idle as u64);
        add(&shard.counters.evicted_live, evicted as u64);
        if judge {
            meta.next_idle_at = next_idle_at;
            meta.deciding = 0;
        }
        // A pass that judged every key and dropped the idle ones is a sweep, whether a sweep was
        // due (`plan.sweep`) or an eviction needed the judging (it drops idle keys first): one
        // count per pass.
        if judge {
            add(&shard.counters.sweeps, 1);
        }
        if idle + evicted + forgotten > 0 {
            meta.dropped_at = latest_drop(meta.dropped_at, now);
        }
        // Last: the dropped keys' `Drop` (see pass 2).
        drop(dropped);
        idle
    }

    /// Slots of the table a rebuild keeping `kept` keys makes: room for twice them (for exactly
    /// them when `tight`, an explicit shrink), at least [`MIN_KEYS`], within the cap.
    fn slots_after(&self, kept: usize, tight: bool) -> usize {
        let want = if tight { kept } else { kept.saturating_mul(2) };
        slots_for(want.max(MIN_KEYS).min(self.shard_cap).max(kept))
    }

    /// A growth (or a shrink to fit) in one pass, for a key cell and a state that copy
    /// (`CellOps::COPIES`, `KeySlot::COPIES`: word and pair keys, the crate's word slots): each
    /// held key hashed and its cell and state copied into a new table sized for `len` keys (the
    /// shard's count), with the number copied. The old table (owned by the rebuild: no reader
    /// holds it) is only read, so a panic in the key's `Hash` (or `from_word`) loses nothing:
    /// the copy is dropped (no key to drop in it) and the rebuild's `Restore` puts the old table
    /// back, as the two-pass path does. `None`, having allocated nothing, where the types do not
    /// copy; `None` too if the table holds more keys than `len` (the shard's count is exact, so
    /// this is a guard, not a path): the caller's two passes then count them.
    ///
    /// Against the two passes (pass 1 listing each key's hash and slot, pass 2 moving the
    /// listed slots), this writes no list and no empty slot back into the old table, and
    /// allocates no list: in `examples/keyed_instructions floodgate insert-1m 1000000`
    /// (callgrind; 4,608 growths, 1.565 keys moved an insert) the rebuild's own instructions
    /// went from 117.6 to 90.3 an insert (issue 16).
    fn copy_all<R>(
        &self,
        old: &Table<K, S>,
        len: usize,
        tight: bool,
    ) -> Option<(Table<K, S>, usize)>
    where
        S: KeySlot<R>,
    {
        if !(K::Cell::COPIES && S::COPIES) {
            return None;
        }
        let mut next = Table::new(self.slots_after(len, tight));
        let room = room_of(next.slots.len());
        let zero = old.records.zero_owned();
        let mut kept = 0;
        for (i, slot) in old.slots.iter().enumerate() {
            // The cell's own `with_key`: `old.slots[i]` again would test `i` against the length.
            let Some(hash) = slot
                .key
                .with_key(&old.records, i, |key| self.hasher.hash_one(key))
            else {
                continue;
            };
            if kept == room {
                return None;
            }
            let (Some(key), Some(value)) = (slot.key.copy(), slot.value.copy()) else {
                return None;
            };
            next.put(key, value, hash, i == zero);
            kept += 1;
        }
        Some((next, kept))
    }

    /// Drops every idle key of every shard; returns how many.
    pub(crate) fn retain_recent<R>(&self, clock: &impl Clock, rules: &R) -> usize
    where
        S: KeySlot<R>,
    {
        self.all_shards()
            .map(|shard| {
                let mut meta = lock(shard.meta);
                repair(shard, &mut meta);
                let plan = Plan {
                    sweep: true,
                    evict: 0,
                    tight: false,
                };
                self.rebuild(shard, &mut meta, rules, clock, plan, no_forget())
            })
            .sum()
    }

    /// Sizes every table to its keys (after [`retain_recent`](Self::retain_recent)).
    pub(crate) fn shrink_to_fit<R>(&self, clock: &impl Clock, rules: &R)
    where
        S: KeySlot<R>,
    {
        for shard in self.all_shards() {
            let mut meta = lock(shard.meta);
            repair(shard, &mut meta);
            let plan = Plan {
                sweep: false,
                evict: 0,
                tight: true,
            };
            self.rebuild(shard, &mut meta, rules, clock, plan, no_forget());
        }
    }

    /// Forgets `key`; returns whether it was tracked.
    pub(crate) fn remove<Q, R>(&self, key: &Q, clock: &impl Clock, rules: &R) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
        S: KeySlot<R>,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        let mut meta = lock(shard.meta);
        repair(shard, &mut meta);
        if shard.table.load().find(key, hash).is_none() {
            return false;
        }
        let plan = Plan {
            sweep: false,
            evict: 0,
            tight: false,
        };
        self.rebuild(
            shard,
            &mut meta,
            rules,
            clock,
            plan,
            Some(|held: &K| held.borrow() == key),
        );
        true
    }

    /// Makes the next insert into every shard sweep again (after a configuration change that may
    /// bring idle times forward).
    pub(crate) fn forget_idle_bounds(&self) {
        for shard in self.all_shards() {
            let mut meta = lock(shard.meta);
            meta.next_idle_at = 0;
            meta.next_judge_at = 0;
        }
    }

    pub(crate) fn len(&self) -> usize {
        // No lock: each shard's key-count mirror. Acquire: pairs with the Release store in
        // `set_len`, as in `refuses_new_key`. A snapshot, as a count taken shard by shard under
        // each lock was (the shards are not frozen together either way).
        self.all_shards()
            .map(|shard| shard.keys.load(Ordering::Acquire) as usize)
            .sum()
    }

    /// Slots the shards' tables have (their memory, in keys).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.all_shards().map(|shard| lock(shard.meta).slots).sum()
    }

    /// The counters summed over the shards, taking no lock (each shard's counters and key count
    /// are atomics written under its mutex). What a scrape concurrent with inserts sees:
    /// - each field is a sum of per-shard values read one after the other, not a snapshot of
    ///   the map at one moment (as the sum taken shard by shard under each mutex was not);
    /// - each counter never goes back: a later scrape (on any thread, ordered after this one)
    ///   reads each shard's counter at this value or a later one;
    /// - an event that happened before the scrape (on this thread, or ordered before it by a
    ///   synchronisation) is counted;
    /// - within a shard, a key a sweep or an eviction dropped is never counted both in `keys`
    ///   and as dropped: the counters are read before the key count, and a rebuild sets the
    ///   count before it adds its drops.
    pub(crate) fn stats(&self) -> KeyedStats {
        let mut stats = KeyedStats {
            keys: 0,
            max_keys: self.max_keys(),
            evicted_idle: 0,
            evicted_live: 0,
            refused_new_keys: 0,
            sweeps: 0,
        };
        for shard in self.all_shards() {
            let counters = shard.counters;
            // Acquire: pairs with the Release store in `add`.
            stats.evicted_idle += counters.evicted_idle.load(Ordering::Acquire);
            stats.evicted_live += counters.evicted_live.load(Ordering::Acquire);
            stats.refused_new_keys += counters.refused_new_keys.load(Ordering::Acquire);
            stats.sweeps += counters.sweeps.load(Ordering::Acquire);
            // Acquire: pairs with the Release store in `set_len`. Read after the counters, so a
            // rebuild whose drops they include has its key count (set before them) read here.
            stats.keys += shard.keys.load(Ordering::Acquire) as usize;
        }
        stats
    }
}

/// What a lookup that did not find its key ([`get_or`](ShardedMap::get_or)) hands on to
/// [`insert`](ShardedMap::insert): the table it searched, still held, which `insert` uses
/// instead of loading the table again when it gets the shard's mutex at once, and where the
/// search ended.
pub(crate) struct Missed<K: Key, S> {
    table: TableGuard<K, S>,
    /// The empty slot the search ended at (0 for the placeholder, which has none).
    vacant: usize,
}

/// A key to publish in its slot (`table`'s slot `index`) when this drops (see `insert`).
struct Publish<'a, K: Key, S> {
    table: &'a Table<K, S>,
    index: usize,
    /// The key, staged before the slot's first decision (see the cell's `stage`).
    owned: Option<<K::Cell as CellOps<K>>::Staged>,
}

impl<K: Key, S> Drop for Publish<'_, K, S> {
    fn drop(&mut self) {
        if let Some(key) = self.owned.take() {
            let table = self.table;
            table.slots[self.index]
                .key
                .publish(&table.records, self.index, key);
        }
    }
}

/// A table a rebuild took out of its cell: put back if the rebuild unwinds before
/// [`disarm`](Restore::disarm) (a panic in a user's `Hash` or `Eq`).
struct Restore<'a, K: Key, S> {
    cell: &'a TableCell<K, S>,
    table: Option<Taken<K, S>>,
}

impl<K: Key, S> Restore<'_, K, S> {
    /// The table, now the rebuild's to take apart or replace.
    fn disarm(mut self) -> Taken<K, S> {
        match self.table.take() {
            Some(table) => table,
            None => unreachable!("disarmed once"),
        }
    }
}

impl<K: Key, S> Drop for Restore<'_, K, S> {
    fn drop(&mut self) {
        if let Some(table) = self.table.take() {
            self.cell.put_back(table);
        }
    }
}

/// Sets the shard's key count to `len`: `meta.len` and its mirror [`ShardMeta::keys`]. Called
/// under the mutex, before the table or key the count includes is published (see
/// [`refuses_new_key`](ShardedMap::refuses_new_key)).
fn set_len<K: Key, S>(shard: Shard<'_, K, S>, meta: &mut Meta, len: usize) {
    meta.len = len;
    // Release: pairs with the Acquire load in `refuses_new_key`.
    shard.keys.store(len as u64, Ordering::Release);
}

/// Adds `n` to one of the shard's [`Counters`]. Called under the shard's mutex, the only place
/// a counter is written, so a load and a store suffice (no read-modify-write).
fn add(counter: &AtomicU64, n: u64) {
    // Relaxed: the previous store to this counter (this function, by the mutex's previous
    // holder) happens before this load through the mutex, so the load reads it.
    let count = counter.load(Ordering::Relaxed);
    // Release: pairs with the Acquire loads in `stats`, which see the writes made before this
    // one under the mutex (the key count `set_len` stored).
    counter.store(count.saturating_add(n), Ordering::Release);
}

/// Puts an empty table in if a rebuild was interrupted where [`Restore`] could not put the old
/// one back: between pass 2's start and the new table's store no user code runs (a dropped
/// key's `Drop` runs after the store), so only a panic of the rebuild's own (an allocation
/// failure built to unwind) gets here. Its keys are then lost, as a `forget` of each would
/// lose them; the shard is not left on the placeholder.
fn repair<K: Key, S: Default>(shard: Shard<'_, K, S>, meta: &mut Meta) {
    if shard.table.load().is_placeholder() {
        let table = Table::new(slots_for(MIN_KEYS));
        meta.set_slots(table.slots.len());
        set_len(shard, meta, 0);
        shard.table.store(table);
    }
}

/// The earliest time some key of `table` can be idle, judged at `now` (`now` itself if one is
/// idle already). It stays a lower bound while checks go on as long as a check only moves a
/// key's idle time later (an algorithm's word); where a write can bring it forward, the sweep is
/// only late, as with the insert's probe.
fn idle_bound<K: Key, S: KeySlot<R>, R>(table: &Table<K, S>, rules: &R, now: u64) -> u64 {
    table
        .held()
        .map(|(_, slot)| match slot.value.liveness(rules, now) {
            Liveness::Idle => now,
            Liveness::Live { idle_in, .. } => now.saturating_add(idle_in),
        })
        .min()
        .unwrap_or(u64::MAX)
}

/// The shard's latest drop time after a drop at `now`: the later of the two, except that a
/// recorded time beyond the lag horizon (a leaping read's) is replaced, so one leap cannot turn
/// the protection off until real time reaches it.
fn latest_drop(recorded: u64, now: u64) -> u64 {
    if recorded > now.saturating_add(MAX_CLOCK_LAG_NANOS) {
        now
    } else {
        recorded.max(now)
    }
}

/// The time a sweep or an eviction judges idleness at: the earlier of `first` and a second
/// read, so one leaping clock read cannot make keys that are live now look idle. (Sweeps are off
/// the hot path; the second read costs one clock read per sweep or eviction.)
fn judge_time(first: u64, clock: &impl Clock) -> u64 {
    first.min(clock.now_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drop_time_beyond_the_horizon_is_replaced_not_kept() {
        let now = 100 * MAX_CLOCK_LAG_NANOS;
        assert_eq!(latest_drop(now - 5, now), now);
        assert_eq!(latest_drop(now + 5, now), now + 5); // a clock ahead within the horizon
        // A leaping read's drop time would otherwise switch the protection off until real time
        // reaches it (every later drop absorbed by the max).
        assert_eq!(latest_drop(now + MAX_CLOCK_LAG_NANOS + 1, now), now);
    }

    #[test]
    fn a_table_has_room_for_what_it_was_sized_for_and_always_one_empty_slot() {
        for keys in 0..2_000 {
            let slots = slots_for(keys);
            assert!(room_of(slots) >= keys, "{keys} keys, {slots} slots");
            assert!(room_of(slots) < slots);
            // u64 keys: 16 bytes a slot, so at most 22 bytes a key in a table filled to size
            // (beyond the smallest tables; a growth sizes for twice the keys kept, so up to 43
            // bytes a live key below the cap).
            if keys >= 64 {
                assert!(slots * 16 <= keys * 22 + 48, "{keys} keys, {slots} slots");
            }
        }
    }

    /// A slot of a `Keyed<u64, _>` (or of any key that fits a word) with a one-word algorithm is
    /// two words, so four share a 64-byte line and none straddles two (with an `OnceLock<u64>`,
    /// 24 bytes: one slot in three straddled). Keys that do not fit a word keep the `OnceLock`.
    #[test]
    fn a_word_keys_slot_is_sixteen_bytes() {
        use crate::keyed::slot::WordSlot;
        assert_eq!(size_of::<Slot<u64, WordSlot>>(), 16);
        assert_eq!(size_of::<Slot<u64, AtomicU64>>(), 16);
        assert_eq!(size_of::<Slot<u32, WordSlot>>(), 16);
        assert_eq!(size_of::<Slot<i64, WordSlot>>(), 16);
        assert_eq!(size_of::<Slot<std::net::Ipv4Addr, WordSlot>>(), 16);
        assert_eq!(size_of::<Slot<String, WordSlot>>(), 40);
    }

    /// A slot of a map of 128-bit keys (`IpKey`, `HashedKey`, `u128`, `i128`, `Ipv6Addr`) with a
    /// one-word algorithm is three words: the key in two atomic words (a `PairCell`) and the
    /// state word (with an `OnceLock<IpKey>`, 20 bytes padded to 24, a slot was 32).
    #[test]
    fn a_pair_keys_slot_is_twenty_four_bytes() {
        use crate::keyed::slot::WordSlot;
        use crate::keyed::{HashedKey, IpKey};
        assert_eq!(size_of::<Slot<IpKey, WordSlot>>(), 24);
        assert_eq!(size_of::<Slot<HashedKey, WordSlot>>(), 24);
        assert_eq!(size_of::<Slot<u128, WordSlot>>(), 24);
        assert_eq!(size_of::<Slot<i128, WordSlot>>(), 24);
        assert_eq!(size_of::<Slot<std::net::Ipv6Addr, WordSlot>>(), 24);
        assert_eq!(size_of::<Slot<IpKey, AtomicU64>>(), 24);
    }

    /// Publishes `key` in `table`'s first empty slot of `hash`'s probe sequence, its state word
    /// set to `state` first (as `insert` does); returns the slot's index.
    fn publish_at(table: &Table<u64, AtomicU64>, key: u64, hash: u64, state: u64) -> usize {
        let index = table.vacant(hash);
        table.slots[index].value.store(state, Ordering::Relaxed);
        drop(Publish {
            table,
            index,
            owned: Some(<u64 as Key>::Cell::stage(key)),
        });
        index
    }

    /// The state word `key` is found with, if found.
    fn state_of(table: &Table<u64, AtomicU64>, key: u64, hash: u64) -> Option<u64> {
        table
            .search(&key, hash)
            .ok()
            .map(|slot| slot.value.load(Ordering::Relaxed))
    }

    /// The key whose word is 0 (an empty word-cell slot's word too) in the probe sequence of
    /// other keys, before and after a rebuild moves it: found, passed over, never taken for an
    /// empty slot, and an empty slot never taken for it.
    #[test]
    fn the_zero_key_sits_in_other_keys_probe_sequences_like_any_key() {
        let table = Table::<u64, AtomicU64>::new(8);
        let hash = 0; // every key homes at slot 0
        assert_eq!(
            state_of(&table, 0, hash),
            None,
            "an empty slot is not key 0"
        );
        assert_eq!(publish_at(&table, 0, hash, 100), 0);
        assert_eq!(publish_at(&table, 5, hash, 105), 1, "probes past key 0");
        assert_eq!(publish_at(&table, u64::MAX, hash, 199), 2);
        for (key, state) in [(0, 100), (5, 105), (u64::MAX, 199)] {
            assert_eq!(state_of(&table, key, hash), Some(state), "key {key}");
        }
        assert_eq!(table.search(&7, hash).err(), Some(3));
        // A key homed past key 0 and one homed before, wrapping round through it.
        let before = u64::MAX; // home(u64::MAX, 8) == 7
        assert_eq!(home(before, 8), 7);
        assert_eq!(publish_at(&table, 9, before, 109), 7);
        assert_eq!(
            publish_at(&table, 11, before, 111),
            3,
            "wraps past 0, 5 and MAX"
        );
        assert_eq!(state_of(&table, 11, before), Some(111));
        assert_eq!(
            table.search(&7, before).err(),
            Some(4),
            "passes 9, 0, 5, MAX, 11"
        );
        // A rebuild moves the cells in the reverse order: key 0 lands last, off its old index.
        let zero = table.records.zero_owned();
        let held: Vec<bool> = (0..8).map(|i| table.is_set(i)).collect();
        let homes = [hash, hash, hash, before, 0, 0, 0, before];
        let mut next = Table::<u64, AtomicU64>::new(8);
        for (i, slot) in table.slots.into_vec().into_iter().enumerate().rev() {
            if held[i] {
                next.put(slot.key, slot.value, homes[i], i == zero);
            }
        }
        for (key, home_hash, state) in [
            (0, hash, 100),
            (5, hash, 105),
            (u64::MAX, hash, 199),
            (9, before, 109),
            (11, before, 111),
        ] {
            assert_eq!(state_of(&next, key, home_hash), Some(state), "key {key}");
        }
        assert_eq!(state_of(&next, 7, hash), None);
        assert_eq!((0..8).filter(|&i| next.is_set(i)).count(), 5);
    }

    /// Keys of a pair cell stored as (0, 0) (the table's zero record), (x, 0) and (0, y) (which
    /// read like the half-written pair of the key stored (x, y)), and (x, y) itself, all in one
    /// probe sequence, before and after a rebuild moves them: each found with its own state
    /// word, passed over by the others, never taken for an empty slot, and the keys not held
    /// (an alias of one, stored (0, x)) found absent at the sequence's first empty slot.
    #[test]
    fn pair_keys_with_stored_zero_words_sit_in_other_keys_probe_sequences_like_any_key() {
        use crate::keyed::PairCell;
        let [mh, ml] = PairCell::<u128>::MASKS;
        let stored = |[h, l]: [u64; 2]| (u128::from(h ^ mh) << 64) | u128::from(l ^ ml);
        let (x, y) = (5, 9);
        let keys = [
            (stored([x, y]), 100),
            (stored([x, 0]), 101),
            (stored([0, 0]), 102),
            (stored([0, y]), 103),
            (0, 104),
            (u128::MAX, 105),
        ];
        let table = Table::<u128, AtomicU64>::new(8);
        let hash = 0; // every key homes at slot 0
        assert_eq!(table.search(&stored([0, 0]), hash).err(), Some(0));
        for (i, &(key, state)) in keys.iter().enumerate() {
            let index = table.vacant(hash);
            assert_eq!(index, i);
            table.slots[index].value.store(state, Ordering::Relaxed);
            drop(Publish {
                table: &table,
                index,
                owned: Some(<u128 as Key>::Cell::stage(key)),
            });
        }
        let state_of = |table: &Table<u128, AtomicU64>, key: u128| {
            table
                .search(&key, hash)
                .ok()
                .map(|slot| slot.value.load(Ordering::Relaxed))
        };
        for &(key, state) in &keys {
            assert_eq!(state_of(&table, key), Some(state), "{key:#x}");
        }
        assert_eq!(table.search(&stored([0, x]), hash).err(), Some(6));
        assert_eq!(table.search(&stored([y, 0]), hash).err(), Some(6));
        // A rebuild moves the cells in the reverse order: the zero-stored key off its index.
        let zero = table.records.zero_owned();
        assert_eq!(zero, 2);
        let held: Vec<bool> = (0..8).map(|i| table.is_set(i)).collect();
        assert_eq!(held.iter().filter(|&&h| h).count(), keys.len());
        let mut next = Table::<u128, AtomicU64>::new(8);
        for (i, slot) in table.slots.into_vec().into_iter().enumerate().rev() {
            if held[i] {
                next.put(slot.key, slot.value, hash, i == zero);
            }
        }
        assert_eq!(next.records.zero_owned(), 3);
        for &(key, state) in &keys {
            assert_eq!(state_of(&next, key), Some(state), "{key:#x} moved");
        }
        assert_eq!(state_of(&next, stored([0, x])), None);
        assert_eq!((0..8).filter(|&i| next.is_set(i)).count(), keys.len());
    }

    /// Pair keys (whose lookup tests the home slot before its probe loop, `HOME_FIRST`) homed
    /// at a table's last slot: found there, and past it by wrapping round to slot 0; an absent
    /// key's search ends at the first empty slot after the wrap; a placeholder's at 0.
    #[test]
    fn pair_keys_homed_at_the_last_slot_wrap_round_from_their_home_slot() {
        const { assert!(<<u128 as Key>::Cell as CellOps<u128>>::HOME_FIRST) };
        let table = Table::<u128, AtomicU64>::new(8);
        let last = u64::MAX; // home(u64::MAX, 8) == 7
        assert_eq!(home(last, 8), 7);
        let keys = [(3u128, 103), (1 << 64, 104), (u128::MAX, 105)];
        for (i, &(key, state)) in keys.iter().enumerate() {
            let index = table.vacant(last);
            assert_eq!(index, [7, 0, 1][i]);
            table.slots[index].value.store(state, Ordering::Relaxed);
            drop(Publish {
                table: &table,
                index,
                owned: Some(<u128 as Key>::Cell::stage(key)),
            });
        }
        for &(key, state) in &keys {
            let found = table.search(&key, last).ok();
            assert_eq!(
                found.map(|slot| slot.value.load(Ordering::Relaxed)),
                Some(state),
                "{key:#x}"
            );
        }
        assert_eq!(table.search(&7, last).err(), Some(2), "passes 7, 0 and 1");
        assert_eq!(table.search(&7, 0).err(), Some(2), "home 0 holds 1 << 64");
        let placeholder = Table::<u128, AtomicU64>::placeholder();
        assert_eq!(placeholder.search(&3, last).err(), Some(0));
    }

    /// Key 0 and a key homed at its slot, through a map: decided, grown past, forgotten.
    #[test]
    fn a_maps_zero_key_shares_its_probe_sequence_and_survives_growth() {
        use crate::keyed::slot::{LimiterSlot, Rules, WordSlot};
        use crate::{FixedWindow, ManualClock};
        let rules = Rules {
            algorithm: FixedWindow::new(2, std::time::Duration::from_secs(60)).unwrap(),
            extra: (),
        };
        let clock = ManualClock::new();
        let map = ShardedMap::<u64, WordSlot>::new(1024, 1, WhenFull::DenyNewKeys);
        let slots = slots_for(MIN_KEYS);
        let home0 = home(map.hash(&0u64), slots);
        let other = (1u64..)
            .find(|k| home(map.hash(k), slots) == home0)
            .unwrap();
        let take = |key: u64| {
            map.access(&key, &clock, &rules, |slot, now, floor| {
                slot.acquire(&rules, floor, now, &clock, 1)
                    .unwrap()
                    .is_allowed()
            })
            .unwrap()
        };
        assert!(take(0) && take(other) && take(0) && take(other));
        assert!(!take(0) && !take(other), "each key's own window");
        assert_eq!(map.len(), 2);
        // Growth rebuilds move both.
        for key in 1000..1100 {
            assert!(take(key));
        }
        assert!(map.capacity() > slots);
        assert!(!take(0) && !take(other), "moved with their words");
        assert!(map.remove(&0, &clock, &rules));
        assert!(!map.remove(&0, &clock, &rules));
        assert!(take(0), "forgotten: fresh");
        assert!(!take(other));
        assert_eq!(map.len(), 102);
    }

    #[test]
    fn no_other_allocation_shares_a_line_with_a_shards_table_cell() {
        #[cfg(not(floodgate_loom))]
        assert_eq!(size_of::<TableCell<u64, AtomicU64>>(), 8);
        let pad = PAD_CELLS * size_of::<TableCell<u64, AtomicU64>>();
        #[cfg(not(floodgate_loom))]
        assert!(pad >= 128);
        for shards in [1, 2, 16, 512] {
            let map = ShardedMap::<u64, AtomicU64>::new(4096, shards, WhenFull::DenyNewKeys);
            assert_eq!(map.shard_count(), shards);
            let start = map.tables.as_ptr() as usize;
            let end = start + size_of_val(&*map.tables);
            let cells: std::collections::HashSet<usize> = (0..shards)
                .map(|i| std::ptr::from_ref(map.cell(i)) as usize)
                .collect();
            // Every shard's cell is its own, at least `pad` bytes inside either end.
            assert_eq!(cells.len(), shards);
            for &cell in &cells {
                let size = size_of::<TableCell<u64, AtomicU64>>();
                assert!(
                    cell >= start + pad && cell + size <= end - pad,
                    "{shards} shards"
                );
            }
        }
    }

    /// A check reads its table's header (the slots' address and length) on every call, and a
    /// hot key's word is written on every admission: the header shares no 128-byte block (the
    /// pair of lines the adjacent-line prefetcher fetches together) with any slot of its own
    /// table. Before, `Arc::new` put the header right after the slots' allocation, in the block
    /// of the last slots, so an admission on a key there made every other core's next check
    /// miss the header too. Only on the targets where crossbeam's `CachePadded` aligns to 128
    /// bytes or more (elsewhere it pads to 64 or 32, and the header may share a 128-byte block).
    #[cfg(all(
        not(floodgate_loom),
        any(
            target_arch = "x86_64",
            target_arch = "aarch64",
            target_arch = "arm64ec",
            target_arch = "powerpc64",
            target_arch = "s390x"
        )
    ))]
    #[test]
    fn a_tables_header_shares_no_line_with_its_slots() {
        for shards in [1, 2, 16] {
            let map = ShardedMap::<u64, AtomicU64>::new(4096, shards, WhenFull::DenyNewKeys);
            for i in 0..shards {
                let table = map.cell(i).load();
                let header = std::ptr::from_ref::<Table<u64, AtomicU64>>(&table) as usize;
                let start = table.slots.as_ptr() as usize;
                let end = start + size_of_val(&*table.slots);
                let block = header / 128;
                let apart = end <= block * 128 || start >= (block + 1) * 128;
                assert!(
                    header.is_multiple_of(128) && apart,
                    "{shards} shards: slots {start:#x}..{end:#x}, header at {header:#x}"
                );
            }
        }
    }

    /// The record of the pair being published, written twice by every pair-key insert, is on a
    /// line of its own: not the header's, which every check of the shard loads, nor a slot's.
    #[test]
    fn the_inserting_record_shares_no_line_with_the_header_or_the_slots() {
        let map = ShardedMap::<u128, AtomicU64>::new(4096, 2, WhenFull::DenyNewKeys);
        for i in 0..2 {
            let table = map.cell(i).load();
            let header = std::ptr::from_ref::<Table<u128, AtomicU64>>(&table) as usize;
            let record = std::ptr::from_ref(&**table.records.inserting) as usize;
            let start = table.slots.as_ptr() as usize;
            let end = start + size_of_val(&*table.slots);
            let line = record / 128;
            assert_eq!(record % 128, 0, "{record:#x}");
            assert_ne!(line, header / 128, "header {header:#x}, record {record:#x}");
            assert!(
                end <= line * 128 || start >= (line + 1) * 128,
                "{record:#x}"
            );
        }
    }

    /// A shard's cell left holding the map's shared placeholder (what a rebuild that unwound
    /// after taking its table apart leaves: only a panic of the rebuild's own, an allocation's,
    /// gets there). Taking it again answers at once with an empty table. Review of 9d9afcd: the
    /// shared placeholder is never unique (the map holds it), and `take` spun forever waiting
    /// for it to be; a per-rebuild placeholder was unique, and `take` gave it back.
    #[cfg(not(floodgate_loom))]
    #[test]
    fn a_cell_left_on_the_shared_placeholder_is_taken_at_once() {
        let map = ShardedMap::<u64, AtomicU64>::new(64, 1, WhenFull::DenyNewKeys);
        assert_eq!(map.placeholder.holders(), 1);
        let first = map.cell(0).take(&map.placeholder);
        assert_eq!(first.slots.len(), slots_for(MIN_KEYS));
        assert_eq!(map.placeholder.holders(), 2, "the cell holds it");
        let again = map.cell(0).take(&map.placeholder);
        assert!(again.is_placeholder());
        assert!(map.cell(0).load().is_placeholder());
        assert_eq!(map.placeholder.holders(), 2, "the cell holds it once");
    }

    /// Every entry point that rebuilds or inserts into a shard left on the shared placeholder
    /// (see above) puts a table of its own in first (`repair`): the shard works again, empty
    /// (its keys were lost with the unwound rebuild), and no cell holds the placeholder after.
    #[cfg(not(floodgate_loom))]
    #[test]
    fn every_entry_point_repairs_a_shard_left_on_the_shared_placeholder() {
        use crate::keyed::slot::{LimiterSlot, Rules, WordSlot};
        use crate::{FixedWindow, ManualClock};
        let rules = Rules {
            algorithm: FixedWindow::new(1, std::time::Duration::from_secs(60)).unwrap(),
            extra: (),
        };
        let clock = ManualClock::new();
        let take = |map: &ShardedMap<u64, WordSlot>, key: u64| {
            map.access(&key, &clock, &rules, |slot, now, floor| {
                slot.acquire(&rules, floor, now, &clock, 1)
                    .unwrap()
                    .is_allowed()
            })
            .unwrap()
        };
        type Entry<'a> = &'a dyn Fn(&ShardedMap<u64, WordSlot>);
        let entries: [(&str, Entry<'_>); 5] = [
            ("insert", &|map| assert!(take(map, 7))),
            ("peek", &|map| {
                assert!(!map.peek(&1, &clock, |slot, _, _| slot.is_some()));
            }),
            ("remove", &|map| assert!(!map.remove(&1, &clock, &rules))),
            ("retain_recent", &|map| {
                assert_eq!(map.retain_recent(&clock, &rules), 0);
            }),
            ("shrink_to_fit", &|map| map.shrink_to_fit(&clock, &rules)),
        ];
        for (name, entry) in entries {
            let map = ShardedMap::<u64, WordSlot>::new(64, 1, WhenFull::DenyNewKeys);
            for key in 1..=10 {
                assert!(take(&map, key), "{name}: key {key}");
            }
            drop(map.cell(0).take(&map.placeholder));
            entry(&map);
            assert!(!map.cell(0).load().is_placeholder(), "{name}");
            assert_eq!(
                map.placeholder.holders(),
                1,
                "{name}: a cell still holds it"
            );
            // The shard works again: new keys are decided and grow it.
            for key in 100..120 {
                assert!(take(&map, key), "{name}: key {key}");
                assert!(!take(&map, key), "{name}: key {key} again");
            }
            assert!(map.remove(&100, &clock, &rules), "{name}");
        }
    }

    #[test]
    fn home_slots_cover_the_table() {
        assert_eq!(home(0, 7), 0);
        assert_eq!(home(u64::MAX, 7), 6);
        assert_eq!(home(1 << 63, 10), 5);
    }
}
