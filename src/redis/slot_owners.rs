//! Which node of a Redis Cluster owns each hash slot, as last read from `CLUSTER SLOTS`: to
//! name, in a failed call's error, the node the call went to, and to pick the circuit breaker
//! a call goes through (one per master, see `RedisLimiter::with_breaker`).
//!
//! redis-rs routes each request by its own slot map and does not say, in an error, which node
//! failed. So the backend keeps a copy of the map: read at eager connect, and read again in the
//! background after a failed call, a call short-circuited by an open breaker, a reply to a
//! call sent a while after the last read (below), or any reply while the copy names no master
//! (a lazy backend, an eager connect whose read failed; at most one such read per `fresh`,
//! below: before, nothing read the map while every call succeeded). At most one read is in
//! flight per backend, and at most one started per timeout, so a steady stream of failures
//! does not add a `CLUSTER SLOTS` per failure. A call's error and breaker are those of the owner of its key's slot in
//! that copy; after a slot moved, the owner is stale until the next read lands.
//!
//! A background read goes to the master that last replied to a call of this backend, and to
//! the next-freshest if it fails ([`SlotOwners::read_order`]; a master whose read failed after
//! its last reply is asked last, such masters taking turns), not to a node redis-rs picks at random, which could be a
//! frozen master (issue 18): while reads failed, the replies the copy was too old for (below)
//! stayed uncounted, and the healthy masters looked silent, for as long as the random draws
//! kept hitting the frozen one. With `m` masters not answering and one that does, at most
//! `⌈m / 2⌉` background reads in a row fail before one lands. Until the copy names a master
//! (a lazy backend, or an eager connect whose read failed), a background read goes to the
//! configured nodes, in their order from the one after the last whose read failed (so a
//! configured node that is gone does not make every read fail); the eager connect's own read goes where redis-rs routes
//! it, within what is left of the connect's timeout.
//!
//! Each try of a background read (two at most) has a budget of its own, the backend's timeout
//! and at least a second (`RedisBackend::map_read_budget`), and goes over a connection of the
//! backend's own for these reads (`MapReader`), not the cluster connection, whose every request
//! redis-rs gives up after the backend's timeout: a `CLUSTER SLOTS` slower than a short
//! timeout (a big cluster's reply) failed every time (issue 18). What it costs while a master
//! is frozen: a try sent to it waits out the budget before the next master is tried, so the
//! replies the copy was too old for count up to a budget later, once per frozen master (it is
//! asked last after that); the read stays in flight meanwhile, and no other starts. If the
//! node refuses the reader's own connection with an error reply (a password or ACL user
//! rotated since the cluster connection authenticated, `-NOAUTH`, `maxclients`), the try goes
//! to the same node over the cluster connection (redis-rs's routing by address), within what
//! is left of its budget and redis-rs's response timeout (the backend's): the reply is still
//! that master's, and the try's bound is unchanged; only a `CLUSTER SLOTS` slower than the
//! timeout fails on that path. Before, every read failed for as long as the refusal lasted,
//! while every call succeeded: the copy went stale for good, and healthy masters looked silent.
//!
//! A master `CLUSTER SLOTS` names by no host (an empty string, a `NULL`: a cluster behind a
//! load balancer, `cluster-preferred-endpoint-type unknown-endpoint`) is the node the read
//! was sent to, at the port given, as Redis documents it and redis-rs takes it
//! ([`SlotOwners::update_answered_by`]); not knowing that node (the eager connect's read,
//! routed by redis-rs), such a range is left out, as is one whose host is `?` (an unknown
//! node). A slot the copy has no owner for (no read answered yet, a range so left out)
//! names the configured node list and says that the node is not known, and its calls share one
//! breaker.
//!
//! Each master the copy names also keeps when it last replied ([`LastReply`]), recorded by the
//! backend on each reply to a call on one of its slots (an error reply only when that master
//! provably sent it: not a redirect redis-rs gave up on, `CLUSTERDOWN`, `TRYAGAIN`, which
//! another node may have sent; see `RedisBackend::replied_with`): a try of `RedisLimiter::try_acquire_for`
//! cut short by its caller's own budget is the caller's matter only while the master that owns
//! its key's slot answers (issue 18). A master named again by a later read keeps its time; a
//! master new to the copy starts as having replied when the read naming it was sent.
//!
//! redis-rs follows a `MOVED` unseen and then sends the slot's calls to its new owner, whose
//! replies the copy would credit to the old owner for as long as the copy is not read again
//! (a frozen old owner kept looking alive while calls on the moved slot came). So a reply is
//! credited only to a copy fresh for its call (read at most `fresh + slack` before the call
//! was sent), and a reply to a call sent `fresh` or more after the read asks for a new read
//! ([`SlotOwners::owner_replied`]): while calls come, the copy is read again about once per
//! `fresh`, and a master whose slot moved away gets no credit for the new owner's replies to
//! calls sent more than `fresh + slack` after the last read that named it the owner. A reply
//! the copy was too old for is held (the latest-sent per master) and counts once a read sent
//! after it arrived names the same master the owner of its slot.
//!
//! Memory: one entry per contiguous slot range, so at most 16,384 entries (one per slot), each
//! two `u16`s and a shared master (its address and its last reply); a read replaces the whole
//! copy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use redis::Value;

use crate::backend::LastReply;

/// The number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16_384;

/// A slot range's first and last slot and the master that owns it.
type Range = (u16, u16, Arc<Master>);

/// A master as a `CLUSTER SLOTS` reply names it: its address (`scheme://host:port`), and its
/// host and port as written there (what redis-rs routes a command to a node by).
#[derive(Clone, Debug)]
struct Node {
    address: Arc<str>,
    host: Arc<str>,
    port: u16,
}

/// A master the copy names: its address, and when a call on one of its slots last got a reply
/// (shared by its ranges, and kept by the next read of the map that still names it).
#[derive(Debug)]
struct Master {
    address: Arc<str>,
    /// The host and port `CLUSTER SLOTS` names it by: where a read of the map is sent
    /// ([`SlotOwners::read_order`]).
    host: Arc<str>,
    port: u16,
    last_reply: LastReply,
    /// When (client µs, at least 1) the last read of the map sent to this master was sent, if
    /// it failed (0: none did): a master whose read failed after its last reply is asked
    /// last ([`SlotOwners::read_order`]).
    read_failed: AtomicU64,
    /// The latest-sent reply credited to this master by a copy too old for its call (see
    /// [`SlotOwners::owner_replied`]), held until a read of the map sent after it arrived
    /// tells whether the master still owns the call's slot. Taken on that path only if free
    /// (`try_lock`: a reply never waits), and by a read settling it.
    pending: Mutex<Option<Pending>>,
}

/// A reply to a call on `slot`, sent and received at those client µs, that a copy of the map
/// too old for the call named `slot`'s master for.
#[derive(Clone, Copy, Debug)]
struct Pending {
    slot: u16,
    sent: u64,
    received: u64,
}

impl Master {
    fn new(node: &Node, replied_at: u64) -> Self {
        let last_reply = LastReply::default();
        last_reply.record(replied_at);
        Master {
            address: Arc::clone(&node.address),
            host: Arc::clone(&node.host),
            port: node.port,
            last_reply,
            read_failed: AtomicU64::new(0),
            pending: Mutex::new(None),
        }
    }

    /// Where this master goes in the order of a read of the map ([`SlotOwners::read_order`],
    /// lowest first): a master whose last read failed after its last reply goes after every
    /// other, and among those, the one whose read failed longest ago first (so they take
    /// turns); the others by their last reply, the latest first.
    fn read_rank(&self) -> (bool, u64) {
        let last = self.last_reply.last().unwrap_or(0);
        // SeqCst: read and written only by the one read of the map in flight
        // (`SlotOwners::start_read`); no ordering subtlety to save.
        let failed = self.read_failed.load(Ordering::SeqCst);
        if failed > last {
            (true, failed)
        } else {
            (false, u64::MAX - last)
        }
    }
}

/// A master to send a read of the slot map to ([`SlotOwners::read_order`]).
#[derive(Debug)]
pub(super) struct ReadTarget(Arc<Master>);

impl ReadTarget {
    /// The host `CLUSTER SLOTS` names the master by (redis-rs's name for its connection).
    pub(super) fn host(&self) -> &str {
        &self.0.host
    }

    /// The master's port.
    pub(super) fn port(&self) -> u16 {
        self.0.port
    }

    /// The read sent to this master at `sent_micros` (client µs) failed: it is asked last
    /// until it replies to a call again.
    pub(super) fn failed(&self, sent_micros: u64) {
        // SeqCst: as in `Master::read_rank`.
        self.0
            .read_failed
            .store(sent_micros.max(1), Ordering::SeqCst);
    }
}

/// `mutex` locked if no one holds it (a poisoned one taken as it is), `None` if someone does:
/// for the paths a reply takes, which never wait.
fn lock_if_free<T>(mutex: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match mutex.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Whether a reply asks for a read of the slot map ([`SlotOwners::owner_replied`]), and why.
/// The values are those of the `Option<bool>` it is made from, so making it costs nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReadAsked {
    /// No read: the copy is fresh for the call.
    No = 0,
    /// The call was sent `fresh` or more after the read that made the copy: a read, at most
    /// one started per timeout (as after a failed call).
    CopyOld = 1,
    /// The copy has no owner for the call's slot: a read if the copy names no master at all
    /// ([`names_no_master`](SlotOwners::names_no_master): no read landed yet), at most one
    /// started per `fresh`, so a cluster whose map names no known host (`CLUSTER SLOTS`
    /// answering `?`) is not read once per timeout while its calls succeed; else none.
    NoOwner = 2,
}

/// One read of the slot map: its ranges, and when the read was sent.
#[derive(Debug, Default)]
struct MapCopy {
    /// The backend's client µs when the `CLUSTER SLOTS` that this copy is was sent: the
    /// map is at least as recent (0 before any read).
    asked_micros: u64,
    /// Slot ranges `(first, last, master)`, sorted by `first`, not overlapping.
    ranges: Vec<Range>,
}

/// The copy of the slot map, and whether a read of it is in flight.
#[derive(Debug, Default)]
pub(super) struct SlotOwners {
    /// The last read's ranges and when it was sent. Read on every cluster call (its node
    /// picks its breaker) and reply (its master's last reply): a load, no lock.
    copy: arc_swap::ArcSwap<MapCopy>,
    /// Set by the one caller that starts a read, cleared when its [`ReadInFlight`] drops.
    reading: AtomicBool,
    /// When the last read started after a failure (`None`: none yet).
    last_start: Mutex<Option<Instant>>,
    /// How many times the copy was replaced (0: never read).
    generation: AtomicU64,
}

impl SlotOwners {
    /// `with` applied to the master owning `slot`, if the copy has one.
    #[inline]
    fn with_owner<R>(&self, slot: u16, with: impl FnOnce(&Master, u64) -> R) -> Option<R> {
        let copy = self.copy.load();
        let ranges = &copy.ranges;
        let at = ranges.partition_point(|&(first, _, _)| first <= slot);
        let (first, last, master) = ranges.get(at.checked_sub(1)?)?;
        (*first <= slot && slot <= *last).then(|| with(master, copy.asked_micros))
    }

    /// The address of the node owning `slot`, if the copy has one.
    pub(super) fn owner(&self, slot: u16) -> Option<Arc<str>> {
        self.with_owner(slot, |master, _| Arc::clone(&master.address))
    }

    /// Records a reply to a call on `slot` as its owner's, as of `micros` (the backend's client
    /// µs: when the call was sent), unless a later one is recorded
    /// ([`LastReply::record_if_later`]), if the copy was read less than `fresh + slack` µs
    /// before the call was sent (a call sent before the read: its copy is newer than the
    /// call); nothing if the copy has no owner for it. Returns whether the caller starts a new
    /// read ([`ReadAsked`]): [`CopyOld`](ReadAsked::CopyOld) if the call was sent `fresh` µs
    /// or more after the read (see the module docs), [`NoOwner`](ReadAsked::NoOwner) if the
    /// copy has no owner for the slot (the caller then reads the map if the copy names no
    /// master at all: a lazy backend, an eager connect whose read failed), else
    /// [`No`](ReadAsked::No).
    ///
    /// A copy older than its call may name an owner the slot has left (redis-rs follows a
    /// `MOVED` unseen, and the reply is the new owner's): so the old owner's word gets no
    /// time later than `fresh + slack` after the read that last named it the slot's owner,
    /// until a read sent after the reply arrived (`received_micros`) names it the slot's owner
    /// still: then the reply counts as of `micros` ([`update`](Self::update); the latest-sent
    /// such reply per master is kept for it), so a master whose calls come further apart than
    /// `fresh + slack` is not taken for silent for want of a fresh copy.
    ///
    /// Takes no lock that it waits for: the held reply is behind a `try_lock`, and a reply
    /// that finds it taken is not held. What that loses: the lock is taken for a few
    /// instructions, by another reply of the same master the copy is too old for (held in
    /// its place if sent later; if sent earlier, the master's credit is earlier by the two
    /// calls' gap) or by a read settling it (a reply arriving then arrived after that read
    /// was sent, so it waited for the next read; a call sent after the read landed counts at
    /// once). Either way the master may look silent sooner, never alive longer.
    #[inline]
    pub(super) fn owner_replied(
        &self,
        slot: u16,
        micros: u64,
        received_micros: u64,
        fresh: u64,
        slack: u64,
    ) -> ReadAsked {
        let old = self.with_owner(slot, |master, asked| {
            let age = micros.saturating_sub(asked);
            if age < fresh.saturating_add(slack) {
                master.last_reply.record_if_later(micros);
            } else {
                // Never waits (a reply's path): a reply that finds the lock held (another
                // reply of this master being held, a read settling it) is not held.
                let Some(mut pending) = lock_if_free(&master.pending) else {
                    return age >= fresh;
                };
                if pending.is_none_or(|held| held.sent < micros) {
                    *pending = Some(Pending {
                        slot,
                        sent: micros,
                        received: received_micros,
                    });
                }
            }
            age >= fresh
        });
        match old {
            Some(false) => ReadAsked::No,
            Some(true) => ReadAsked::CopyOld,
            None => ReadAsked::NoOwner,
        }
    }

    /// Whether the copy names no master at all (no read landed yet, or one whose every range
    /// named no host it could place: `?`, or none with the answering node unknown): a reply then asks for a read (`RedisBackend::master_replied`). Before,
    /// nothing did: after an eager connect whose read failed (its timeout spent by the
    /// connect itself, a loaded machine) or on a lazy backend, only a failed or
    /// short-circuited call asked for a read, so while every call succeeded the copy stayed
    /// empty, every call shared one breaker and an error named no master.
    pub(super) fn names_no_master(&self) -> bool {
        self.copy.load().ranges.is_empty()
    }

    /// Whether `slot`'s owner replied less than `within_micros` before `now_micros`
    /// ([`LastReply::answered_within`]); `None` if the copy has no owner for it.
    pub(super) fn owner_answered_within(
        &self,
        slot: u16,
        now_micros: u64,
        within_micros: u64,
    ) -> Option<bool> {
        self.with_owner(slot, |master, _| {
            master.last_reply.answered_within(now_micros, within_micros)
        })
    }

    /// The time (client µs) `slot`'s owner last replied, as recorded (`None`: no owner known).
    #[cfg(test)]
    pub(super) fn owner_last_reply(&self, slot: u16) -> Option<u64> {
        self.with_owner(slot, |master, _| master.last_reply.last())
            .flatten()
    }

    /// Replaces the copy with the ranges of a `CLUSTER SLOTS` `reply`, each node written as
    /// `scheme://host:port`; a reply of another shape, or a read sent before the one that
    /// made the copy, leaves the copy as it was. A master the
    /// copy named already keeps its last reply (the same [`Master`]); a new one starts as if it
    /// had replied at `read_at_micros` (when the read was sent, the backend's client µs: the
    /// copy's time too, see [`owner_replied`](Self::owner_replied)): a
    /// node of the cluster named it a master after that, so a healthy master new to the copy (at
    /// connect, after a failover) is not taken for silent before a call of this backend has
    /// been answered by it, and a new master that never answers looks silent one backend
    /// timeout after the read, as a known one does one timeout after its last reply.
    pub(super) fn update(&self, reply: &Value, scheme: &str, read_at_micros: u64) {
        self.update_answered_by(reply, scheme, read_at_micros, None);
    }

    /// [`update`](Self::update), the reply read from the node at `answered_by` (its host as
    /// the read was sent to it; `None`: not known, a read redis-rs routed): a master that
    /// `CLUSTER SLOTS` names by no host (an empty string, a `NULL`, or a wildcard `0.0.0.0`
    /// / `::`) is at that host, with the port the reply gives, as Redis documents it ("the
    /// same endpoint it used to send the CLUSTER SLOTS command", a node behind a load
    /// balancer with `cluster-preferred-endpoint-type unknown-endpoint`) and as redis-rs's
    /// own map takes it (`parse_slots`); with `answered_by` `None`, such a range is left out.
    /// A `?` host (a node told to announce a hostname and given none) names an unknown node,
    /// not the one answering: left out either way. Before, every such range was left out, so
    /// a cluster naming its nodes so had a copy with no master and was read once per `fresh`
    /// while calls came (issue 18), and a `NULL` host made the whole reply be refused.
    pub(super) fn update_answered_by(
        &self,
        reply: &Value,
        scheme: &str,
        read_at_micros: u64,
        answered_by: Option<&str>,
    ) {
        if let Some(parsed) = parse(reply, scheme, answered_by) {
            // `rcu`: should two updates overlap (none do today: the eager connect's read ends
            // before the backend is returned, and background reads run one at a time), each
            // carries over the masters of the copy it replaces, so none loses a reply
            // recorded in between; and a read sent before the copy's own (landing out of
            // order) keeps the newer copy: its map is the more recent, and the copy's time,
            // which replies are checked against, never goes back.
            self.copy.rcu(|current| {
                if current.asked_micros > read_at_micros {
                    return Arc::clone(current);
                }
                Arc::new(MapCopy {
                    asked_micros: read_at_micros,
                    ranges: with_masters(&parsed, &current.ranges, read_at_micros),
                })
            });
            // SeqCst: read once per cluster call, after the ranges are stored; no ordering
            // subtlety to save.
            self.generation.fetch_add(1, Ordering::SeqCst);
            self.settle_pending();
        }
    }

    /// Settles each master's pending reply ([`owner_replied`](Self::owner_replied)) that
    /// arrived before the read that made the copy was sent: it counts as the master's (as of
    /// its call's send) if the copy names the master the owner of the reply's slot (the slot
    /// did not move between the call and the read, unless it moved away and back), else not
    /// at all. A reply that arrived after the read was sent waits for the next read. The
    /// copy's own time, not the landing read's: a read that landed after a newer one left the
    /// newer copy in place ([`update`](Self::update)), and a reply is settled only by a map
    /// read after it arrived.
    fn settle_pending(&self) {
        let copy = self.copy.load();
        let read_at_micros = copy.asked_micros;
        // One look per master (a master owns many ranges).
        let mut settled = std::collections::HashSet::new();
        for (_, _, master) in copy.ranges.iter() {
            if !settled.insert(Arc::as_ptr(master)) {
                continue;
            }
            let mut pending = master.pending.lock().unwrap_or_else(|e| e.into_inner());
            let Some(reply) = *pending else {
                continue;
            };
            if reply.received > read_at_micros {
                continue;
            }
            *pending = None;
            drop(pending);
            let owns = self.with_owner(reply.slot, |owner, _| std::ptr::eq(owner, &**master));
            if owns == Some(true) {
                master.last_reply.record_if_later(reply.sent);
            }
        }
    }

    /// How many times the copy was replaced (0: never read): changes when the nodes it names
    /// may have.
    pub(super) fn generation(&self) -> u64 {
        // SeqCst: as in `update`.
        self.generation.load(Ordering::SeqCst)
    }

    /// Up to `tries` masters of the copy to send a read of the map to, in the order to try
    /// them: the master that last replied to a call of this backend first (the freshest
    /// [`LastReply`], which a read never credits), a master whose last read failed after its
    /// last reply after every other, those taking turns (the one whose read failed longest
    /// ago first); empty while the copy names none. A frozen or unreachable master stops
    /// replying, so it falls behind those that answer, and once a read sent to it failed it
    /// is asked last: with `m` masters not answering and at least one that does, at most
    /// `⌈m / tries⌉` reads in a row fail (each marks `tries` of them, which then go behind
    /// every master marked before) before one lands. That holds for a live master marked too
    /// (a read of it failed once, for a transient reason, and no call has gone to it since to
    /// clear the mark): only the masters unmarked or marked before it go first. Before the
    /// turns, the marked ones went by their last reply: the silent masters that replied last
    /// were asked on every read, and such a live one never.
    pub(super) fn read_order(&self, tries: usize) -> Vec<ReadTarget> {
        let copy = self.copy.load();
        let mut seen = std::collections::HashSet::new();
        let mut masters: Vec<&Arc<Master>> = copy
            .ranges
            .iter()
            .map(|(_, _, master)| master)
            .filter(|master| seen.insert(Arc::as_ptr(master)))
            .collect();
        masters.sort_by_key(|master| master.read_rank());
        masters
            .into_iter()
            .take(tries)
            .map(|master| ReadTarget(Arc::clone(master)))
            .collect()
    }

    /// Whether every master the copy names had a read of the map fail since its last reply
    /// (`false` while it names none): a read then asks a configured node too (`reread`).
    pub(super) fn every_master_failed(&self) -> bool {
        let copy = self.copy.load();
        !copy.ranges.is_empty()
            && copy
                .ranges
                .iter()
                .all(|(_, _, master)| master.read_rank().0)
    }

    /// The nodes the copy names as the owner of some slot.
    pub(super) fn named(&self) -> std::collections::HashSet<Arc<str>> {
        self.copy
            .load()
            .ranges
            .iter()
            .map(|(_, _, owner)| Arc::clone(&owner.address))
            .collect()
    }

    /// A read the caller may start at `now`: `Some` for one caller at a time (until the
    /// returned [`ReadInFlight`] is dropped), and only once `every` has passed since the last
    /// read started (a clock read that lags the last start counts as no time passed).
    pub(super) fn start_read(
        self: &Arc<Self>,
        now: Instant,
        every: Duration,
    ) -> Option<ReadInFlight> {
        // Called on replies too (a copy `fresh` old or more, `owner_replied`), so it never
        // waits: a read in flight is seen with a load, and a caller that finds another one
        // here leaves the start to it (it decides as this caller would, on the same last
        // start and flag; only its clock read is its own, an instant apart).
        // SeqCst: a flag read and written only when a read is asked for; no ordering
        // subtlety to save.
        if self.reading.load(Ordering::SeqCst) {
            return None;
        }
        let mut last = lock_if_free(&self.last_start)?;
        if last.is_some_and(|at| now.saturating_duration_since(at) < every) {
            return None;
        }
        // SeqCst: as above.
        if self.reading.swap(true, Ordering::SeqCst) {
            return None;
        }
        *last = Some(now);
        Some(ReadInFlight(Arc::clone(self)))
    }
}

/// The one read of the slot map in flight, allowed by [`SlotOwners::start_read`]: dropping it
/// lets the next read start, whether the read ended or its task was dropped unfinished (with
/// the runtime it ran on).
#[derive(Debug)]
pub(super) struct ReadInFlight(Arc<SlotOwners>);

impl Drop for ReadInFlight {
    fn drop(&mut self) {
        // SeqCst: as in `start_read`.
        self.0.reading.store(false, Ordering::SeqCst);
    }
}

/// `parsed` ranges, each with its master: the one `current` names at that address (so it keeps
/// its last reply), else a new one, taken as having replied at `read_at_micros`; one per
/// address, shared by its ranges.
fn with_masters(parsed: &[(u16, u16, Node)], current: &[Range], read_at_micros: u64) -> Vec<Range> {
    let mut masters: HashMap<&str, Arc<Master>> = current
        .iter()
        .map(|(_, _, master)| (&*master.address, Arc::clone(master)))
        .collect();
    parsed
        .iter()
        .map(|(first, last, node)| {
            let master = masters
                .entry(&*node.address)
                .or_insert_with(|| Arc::new(Master::new(node, read_at_micros)));
            (*first, *last, Arc::clone(master))
        })
        .collect()
}

/// The ranges of a `CLUSTER SLOTS` reply (`[[first, last, [host, port, id, …], replicas…], …]`),
/// sorted; `None` unless every range is well formed and no two overlap (so at most one per
/// slot), and every port fits 16 bits. A range whose master has no host (empty, `NULL`, or a
/// wildcard) is at `answered_by`, the host of the node that answered
/// ([`SlotOwners::update_answered_by`]), or left out if that is not known; one whose master's
/// host is `?` (unknown) is left out.
fn parse(reply: &Value, scheme: &str, answered_by: Option<&str>) -> Option<Vec<(u16, u16, Node)>> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut parsed = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let slot = |value: Option<&Value>| match value {
            Some(Value::Int(slot)) => u16::try_from(*slot).ok().filter(|s| *s < SLOTS),
            _ => None,
        };
        let (first, last) = (slot(fields.first())?, slot(fields.get(1))?);
        let Some(Value::Array(master)) = fields.get(2) else {
            return None;
        };
        let host = match master.first() {
            Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
            Some(Value::SimpleString(host)) => host.clone(),
            Some(Value::Nil) => String::new(),
            _ => return None,
        };
        let Some(Value::Int(port)) = master.get(1) else {
            return None;
        };
        let port = u16::try_from(*port).ok()?;
        // No host: the node that answered (Redis's `CLUSTER SLOTS` docs; redis-rs's
        // `parse_slots` does the same).
        let host = if host.is_empty() || host == "0.0.0.0" || host == "::" {
            match answered_by {
                Some(answered_by) => answered_by.to_owned(),
                None => continue,
            }
        } else {
            host
        };
        if first > last || host.is_empty() || host == "?" {
            continue;
        }
        let address = if host.contains(':') {
            format!("{scheme}://[{host}]:{port}") // IPv6
        } else {
            format!("{scheme}://{host}:{port}")
        };
        let node = Node {
            address: address.into(),
            host: host.into(),
            port,
        };
        parsed.push((first, last, node));
    }
    parsed.sort_by_key(|&(first, _, _)| first);
    let overlap = parsed.windows(2).any(|pair| pair[0].1 >= pair[1].0);
    (!overlap).then_some(parsed)
}

/// The hash slot of a Redis `key`: CRC16 (XMODEM) of its hash tag (the bytes between the first
/// `{` and the next `}`, when not empty) or of the whole key, modulo 16,384, as Redis computes
/// it.
pub(super) fn slot_of(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in hashed {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_key_slots() {
        // `CLUSTER KEYSLOT` of each, from a Redis 7 server.
        assert_eq!(slot_of(b"foo"), 12_182);
        assert_eq!(slot_of(b"123456789"), 12_739); // the CRC16/XMODEM check value, 0x31C3
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_ne!(slot_of(b"foo{}{bar}"), slot_of(b"bar")); // empty first tag: the whole key
        assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"));
        assert_eq!(slot_of(b""), 0);
        // Hash-tag edge cases, each against `CLUSTER KEYSLOT` of a Redis 7 cluster node.
        for (key, slot) in [
            ("{}", 15_257),
            ("{}foo", 9_500),
            ("foo{}", 5_542),
            ("foo{}{bar}", 8_363),
            ("foo{{bar}}zap", 4_015),
            ("foo{bar}{zap}", 5_061),
            ("{bar", 4_015),
            ("bar}", 6_624),
            ("}{bar}", 5_061),
            ("{{}}", 4_092),
            ("{a}{b}", 15_495),
            ("a{b", 13_340),
            ("{user1000}.following", 3_443),
            ("{ }", 9_314),
            ("\u{e9}{\u{fc}}", 9_552),
        ] {
            assert_eq!(slot_of(key.as_bytes()), slot, "{key:?}");
        }
    }

    #[test]
    fn each_master_keeps_its_own_last_reply_across_reads_of_the_map() {
        let node = |port: i64| {
            Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
            ])
        };
        let range = |first: i64, last: i64, port: i64| {
            Value::Array(vec![Value::Int(first), Value::Int(last), node(port)])
        };
        let owners = SlotOwners::default();
        assert_eq!(owners.owner_answered_within(0, 0, u64::MAX), None);
        // No owner known: nothing to record (a read asked: the copy names no master).
        assert_eq!(
            owners.owner_replied(0, 1_000, 1_000, u64::MAX, 0),
            ReadAsked::NoOwner
        );
        // 7000 owns two ranges, 7001 the one between.
        let map = |last_port: i64| {
            Value::Array(vec![
                range(0, 99, 7000),
                range(100, 199, 7001),
                range(200, 16_383, last_port),
            ])
        };
        owners.update(&map(7000), "redis", 0);
        let within = |slot| owners.owner_answered_within(slot, 1_050, 100);
        assert_eq!(within(0), Some(false), "no reply since the read at 0");
        owners.owner_replied(5, 1_000, 1_000, u64::MAX, 0);
        assert_eq!(within(0), Some(true));
        assert_eq!(within(16_000), Some(true), "7000's other range");
        assert_eq!(within(150), Some(false), "7001 has not replied");
        // A read naming 7000 again keeps its reply; a master new to the map has none.
        owners.update(&map(7002), "redis", 0);
        assert_eq!(within(0), Some(true));
        assert_eq!(within(16_000), Some(false), "7002, new");
        owners.owner_replied(16_000, 1_040, 1_040, u64::MAX, 0);
        assert_eq!(within(16_000), Some(true));
        assert_eq!(within(150), Some(false));
        assert_eq!(owners.owner_answered_within(0, 1_200, 100), Some(false));
        // A master new to a read is taken as having replied when the read was: for one window.
        owners.update(&map(7003), "redis", 1_100);
        assert_eq!(owners.owner_answered_within(16_000, 1_150, 100), Some(true));
        assert_eq!(
            owners.owner_answered_within(16_000, 1_200, 100),
            Some(false)
        );
        assert_eq!(
            owners.owner_answered_within(0, 1_150, 100),
            Some(false),
            "7000 keeps its own"
        );
    }

    /// A reply counts as the owner's at once only while the copy naming it is fresh for the
    /// call: a slot may have moved since (redis-rs follows `MOVED` unseen), and the reply be
    /// the new owner's. A call sent `fresh` or more after the read asks for a new one; a reply
    /// a stale copy could not credit counts once a read sent after it arrived names the same
    /// owner for its slot, and not at all if that read names another.
    #[test]
    fn a_reply_counts_for_the_owner_only_while_the_copy_is_fresh_for_its_call() {
        // 7000 owns slots 0-99 and the rest; 7001 the slots 100-199 when `moved`.
        let map = |moved: bool| {
            if moved {
                ranges_map(&[(0, 99, 7000), (100, 199, 7001), (200, 16_383, 7000)])
            } else {
                ranges_map(&[(0, 16_383, 7000)])
            }
        };
        let owners = SlotOwners::default();
        let last = |slot| owners.owner_last_reply(slot);
        assert_eq!(
            owners.owner_replied(0, 5_000, 5_000, 100, 50),
            ReadAsked::NoOwner,
            "no copy"
        );
        assert!(owners.names_no_master(), "a read asked");
        let holed = SlotOwners::default();
        holed.update(&ranges_map(&[(0, 99, 7000)]), "redis", 1_000);
        assert_eq!(
            holed.owner_replied(500, 1_010, 1_010, 100, 50),
            ReadAsked::NoOwner,
            "a copy naming a master, none for this slot"
        );
        assert!(!holed.names_no_master(), "no read asked");
        owners.update(&map(false), "redis", 1_000);
        assert_eq!(last(0), Some(1_000), "new: as of the read");
        // Sent before the read: the copy is newer than the call.
        assert_eq!(owners.owner_replied(0, 900, 950, 100, 50), ReadAsked::No);
        assert_eq!(last(0), Some(1_000));
        assert_eq!(
            owners.owner_replied(0, 1_099, 1_099, 100, 50),
            ReadAsked::No
        );
        assert_eq!(last(0), Some(1_099));
        // `fresh` after the read: credited, a new read asked.
        assert_eq!(
            owners.owner_replied(0, 1_100, 1_100, 100, 50),
            ReadAsked::CopyOld
        );
        assert_eq!(
            owners.owner_replied(0, 1_149, 1_149, 100, 50),
            ReadAsked::CopyOld
        );
        assert_eq!(last(0), Some(1_149));
        // `fresh + slack` after the read: not credited yet.
        assert_eq!(
            owners.owner_replied(0, 2_000, 2_010, 100, 50),
            ReadAsked::CopyOld
        );
        assert_eq!(
            owners.owner_replied(150, 3_000, 3_010, 100, 50),
            ReadAsked::CopyOld
        );
        assert_eq!(last(0), Some(1_149));
        // A read sent before the latest pending reply arrived settles nothing.
        owners.update(&map(false), "redis", 3_005);
        assert_eq!(last(0), Some(1_149));
        // A read sent after it, naming 7000 for slot 150 still: counted as of its call.
        owners.update(&map(false), "redis", 3_020);
        assert_eq!(last(0), Some(3_000));
        assert_eq!(
            owners.owner_replied(0, 3_050, 3_060, 100, 50),
            ReadAsked::No
        );
        assert_eq!(last(0), Some(3_050));
        // A stale reply for slot 150, which the next read names 7001 for: not 7000's.
        assert_eq!(
            owners.owner_replied(150, 9_000, 9_010, 100, 50),
            ReadAsked::CopyOld
        );
        owners.update(&map(true), "redis", 9_020);
        assert_eq!(
            last(0),
            Some(3_050),
            "the slot moved: the reply was not 7000's"
        );
        assert_eq!(last(150), Some(9_020), "7001, new: as of the read");
        // Settled once: a later read of the same map credits nothing more.
        owners.update(&map(true), "redis", 9_500);
        assert_eq!(last(0), Some(3_050));
    }

    /// A read of the map goes to the master that replied last to a call of the backend, then
    /// to the next; one whose read failed after its last reply goes last, until it replies
    /// again. Routed by the host as `CLUSTER SLOTS` wrote it (an IPv6 one without brackets).
    #[test]
    fn reads_go_to_the_master_that_replied_last_and_one_whose_read_failed_goes_last() {
        let owners = SlotOwners::default();
        assert!(owners.read_order(2).is_empty(), "no copy: no master to ask");
        let map = ranges_map(&[(0, 99, 7000), (100, 199, 7001), (200, 16_383, 7002)]);
        owners.update(&map, "redis", 1_000);
        let order = |tries| -> Vec<u16> {
            owners
                .read_order(tries)
                .iter()
                .map(ReadTarget::port)
                .collect()
        };
        assert_eq!(
            order(3),
            [7000, 7001, 7002],
            "all as of the read: the map's order"
        );
        owners.owner_replied(150, 1_100, 1_100, 10_000, 0); // 7001
        owners.owner_replied(300, 1_200, 1_200, 10_000, 0); // 7002
        assert_eq!(order(2), [7002, 7001]);
        assert_eq!(owners.read_order(1)[0].host(), "127.0.0.1");
        owners.read_order(1)[0].failed(1_300);
        assert_eq!(
            order(3),
            [7001, 7000, 7002],
            "7002's read failed: asked last"
        );
        owners.update(&map, "redis", 1_350);
        assert_eq!(
            order(3),
            [7001, 7000, 7002],
            "kept by a read naming it again"
        );
        owners.owner_replied(300, 1_400, 1_400, 10_000, 0);
        assert_eq!(
            order(3),
            [7002, 7001, 7000],
            "7002 replied since: first again"
        );

        let node = Value::Array(vec![Value::BulkString(b"::1".to_vec()), Value::Int(7)]);
        let v6 = SlotOwners::default();
        let range = Value::Array(vec![Value::Int(0), Value::Int(16_383), node]);
        v6.update(&Value::Array(vec![range]), "redis", 0);
        assert_eq!(v6.owner(0).as_deref(), Some("redis://[::1]:7"));
        assert_eq!(v6.read_order(1)[0].host(), "::1");
    }

    /// A master `CLUSTER SLOTS` names by no host (empty, `NULL`, a wildcard) is the node that
    /// answered, at the port given (Redis's docs; redis-rs's `parse_slots`); a `?` host is an
    /// unknown node, left out. Not knowing who answered (a read redis-rs routed), the no-host
    /// ranges are left out, the others kept: a `NULL` host no longer refuses the whole reply.
    #[test]
    fn a_master_named_by_no_host_is_the_node_that_answered() {
        let node = |host: Value, port: i64| Value::Array(vec![host, Value::Int(port)]);
        let bulk = |host: &str| Value::BulkString(host.as_bytes().to_vec());
        let range = |first: i64, last: i64, master: Value| {
            Value::Array(vec![Value::Int(first), Value::Int(last), master])
        };
        let reply = Value::Array(vec![
            range(0, 99, node(bulk(""), 7001)),
            range(100, 199, node(Value::Nil, 7002)),
            range(200, 299, node(bulk("0.0.0.0"), 7003)),
            range(300, 399, node(bulk("?"), 7004)),
            range(400, 16_383, node(bulk("10.0.0.1"), 7000)),
        ]);
        let owners = SlotOwners::default();
        owners.update_answered_by(&reply, "redis", 0, Some("10.0.0.9"));
        let owner = |slot| owners.owner(slot).as_deref().map(str::to_owned);
        assert_eq!(owner(0).as_deref(), Some("redis://10.0.0.9:7001"));
        assert_eq!(owner(100).as_deref(), Some("redis://10.0.0.9:7002"));
        assert_eq!(owner(200).as_deref(), Some("redis://10.0.0.9:7003"));
        assert_eq!(owner(300), None, "`?`: an unknown node");
        assert_eq!(owner(400).as_deref(), Some("redis://10.0.0.1:7000"));
        let mut hosts: Vec<_> = owners
            .read_order(5)
            .iter()
            .map(|t| (t.host().to_owned(), t.port()))
            .collect();
        hosts.sort();
        assert_eq!(
            hosts,
            [
                ("10.0.0.1".to_owned(), 7000),
                ("10.0.0.9".to_owned(), 7001),
                ("10.0.0.9".to_owned(), 7002),
                ("10.0.0.9".to_owned(), 7003),
            ],
            "reads go to the masters at the answering host"
        );

        let routed = SlotOwners::default();
        routed.update(&reply, "redis", 0);
        assert_eq!(routed.owner(0), None, "who answered is not known");
        assert_eq!(routed.owner(100), None);
        assert_eq!(routed.owner(200), None);
        assert_eq!(
            routed.owner(400).as_deref(),
            Some("redis://10.0.0.1:7000"),
            "a NULL host leaves out its range, not the reply"
        );

        let v6 = SlotOwners::default();
        let only = Value::Array(vec![range(0, 16_383, node(bulk(""), 7005))]);
        v6.update_answered_by(&only, "rediss", 0, Some("::1"));
        assert_eq!(v6.owner(9).as_deref(), Some("rediss://[::1]:7005"));
    }

    /// Whether every master of the copy failed its last read: only once the last of them did
    /// (a reply clears a master's mark); never for an empty copy.
    #[test]
    fn every_master_failed_once_the_last_of_them_did() {
        let owners = SlotOwners::default();
        assert!(!owners.every_master_failed(), "no copy");
        owners.update(
            &ranges_map(&[(0, 99, 7000), (100, 16_383, 7001)]),
            "redis",
            1_000,
        );
        let fail = |port: u16, at: u64| {
            let targets = owners.read_order(2);
            targets
                .iter()
                .find(|t| t.port() == port)
                .unwrap()
                .failed(at);
        };
        fail(7000, 1_100);
        assert!(!owners.every_master_failed());
        fail(7001, 1_200);
        assert!(owners.every_master_failed());
        owners.owner_replied(150, 1_300, 1_300, 10_000, 0); // 7001 replied since
        assert!(!owners.every_master_failed());
    }

    /// Masters whose reads failed since their last reply take turns, the one whose read
    /// failed longest ago first: one read, failed once for a transient reason, of a master
    /// no call goes to (so no reply clears the mark), and the masters that replied later
    /// frozen since. Before, the marked masters went by their last reply alone: the two that
    /// replied last were asked on every read, and failed, and the live one never was.
    #[test]
    fn masters_whose_reads_failed_take_turns_the_longest_failed_first() {
        let owners = SlotOwners::default();
        let map = ranges_map(&[(0, 99, 7000), (100, 199, 7001), (200, 16_383, 7002)]);
        owners.update(&map, "redis", 1_000);
        owners.owner_replied(150, 1_100, 1_100, 10_000, 0); // 7001
        owners.owner_replied(300, 1_200, 1_200, 10_000, 0); // 7002
        let fail = |port: u16, at: u64| {
            let targets = owners.read_order(3);
            let target = targets.iter().find(|t| t.port() == port).unwrap();
            target.failed(at);
        };
        fail(7000, 1_300); // transient: 7000 is live, but no call goes to it
        fail(7002, 1_400); // frozen
        fail(7001, 1_400); // frozen
        let mut now = 1_500;
        for read in 1..=2 {
            let targets = owners.read_order(2);
            let ports: Vec<u16> = targets.iter().map(ReadTarget::port).collect();
            if ports.contains(&7000) {
                return;
            }
            for target in &targets {
                target.failed(now);
                now += 10;
            }
            assert!(read < 2, "7000 not asked in two reads: {ports:?} each time");
        }
    }

    /// A `CLUSTER SLOTS` reply of one range per master port: `(first, last, port)`.
    fn ranges_map(ranges: &[(i64, i64, i64)]) -> Value {
        Value::Array(
            ranges
                .iter()
                .map(|&(first, last, port)| {
                    Value::Array(vec![
                        Value::Int(first),
                        Value::Int(last),
                        Value::Array(vec![
                            Value::BulkString(b"127.0.0.1".to_vec()),
                            Value::Int(port),
                        ]),
                    ])
                })
                .collect(),
        )
    }

    /// A reply never waits on a lock (the backend's hot path): not for its master's held
    /// reply while another thread holds it (a read settling it, another reply being held),
    /// nor for the start of a read that it asks for while another caller is starting one.
    /// Before, both were `Mutex::lock`: the replying thread waited as long as the lock was
    /// held (here, until the test let go of it).
    #[test]
    fn a_reply_never_waits_on_a_lock() {
        let owners = Arc::new(SlotOwners::default());
        owners.update(&ranges_map(&[(0, 16_383, 7000)]), "redis", 0);
        let master = Arc::clone(&owners.copy.load().ranges[0].2);
        let held = master.pending.lock().unwrap();
        let starting = owners.last_start.lock().unwrap();
        let (done, replied) = std::sync::mpsc::channel();
        let replying = Arc::clone(&owners);
        let thread = std::thread::spawn(move || {
            // A call sent long after the read: too old a copy, a read asked.
            let asks = replying.owner_replied(0, 10_000, 10_010, 100, 50);
            let started = replying.start_read(Instant::now(), Duration::ZERO);
            done.send((asks, started.is_some())).unwrap();
        });
        // Real time only as a bound on a hang: the thread takes microseconds.
        let got = replied.recv_timeout(Duration::from_secs(60));
        drop((held, starting));
        thread.join().unwrap();
        assert_eq!(
            got,
            Ok((ReadAsked::CopyOld, false)),
            "the reply returned at once, asking for a read; the start found another \
             caller starting one and left it to that caller"
        );
        assert!(
            master.pending.lock().unwrap().is_none(),
            "the reply that found the lock held was not held (dropped)"
        );
    }

    /// The copy is the newest read's: of two reads landing out of order (the eager connect's
    /// and a background one at once), the one sent earlier does not replace the later one's
    /// map, and a reply is checked against the newer map. Before, the later landing always
    /// won: an older map named 7000 the owner of slot 150 again after a newer read had named
    /// 7001, and the copy's time went back.
    #[test]
    fn an_older_read_landing_later_does_not_replace_a_newer_copy() {
        let owners = SlotOwners::default();
        let before = ranges_map(&[(0, 16_383, 7000)]);
        let moved = ranges_map(&[(0, 99, 7000), (100, 199, 7001), (200, 16_383, 7000)]);
        owners.update(&moved, "redis", 2_000);
        owners.update(&before, "redis", 1_500);
        assert_eq!(owners.owner(150).as_deref(), Some("redis://127.0.0.1:7001"));
        assert_eq!(owners.copy.load().asked_micros, 2_000);
        // A reply to a call sent 40 µs after the newer read counts for 7001, not 7000.
        assert_eq!(
            owners.owner_replied(150, 2_040, 2_050, 100, 50),
            ReadAsked::No
        );
        assert_eq!(owners.owner_last_reply(150), Some(2_040));
        assert_eq!(
            owners.owner_last_reply(0),
            Some(2_000),
            "7000: as of its read"
        );
    }

    #[test]
    fn owners_are_looked_up_by_range_and_a_bad_reply_changes_nothing() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |first: i64, last: i64, master: Value| {
            Value::Array(vec![Value::Int(first), Value::Int(last), master])
        };
        let reply = Value::Array(vec![
            range(10_923, 16_383, node("127.0.0.1", 7002)),
            range(0, 5_460, node("127.0.0.1", 7000)),
            range(5_461, 10_922, node("", 7001)), // host unknown to the node answering
        ]);
        let owners = Arc::new(SlotOwners::default());
        assert_eq!(owners.owner(0), None, "nothing read yet");
        owners.update(&reply, "redis", 0);
        assert_eq!(owners.owner(0).as_deref(), Some("redis://127.0.0.1:7000"));
        assert_eq!(
            owners.owner(5_460).as_deref(),
            Some("redis://127.0.0.1:7000")
        );
        assert_eq!(owners.owner(5_461), None);
        assert_eq!(
            owners.owner(10_923).as_deref(),
            Some("redis://127.0.0.1:7002")
        );
        assert_eq!(
            owners.owner(16_383).as_deref(),
            Some("redis://127.0.0.1:7002")
        );
        for bad in [
            Value::Nil,
            Value::Array(vec![range(0, 16_384, node("h", 1))]),
            // Overlapping ranges (no Redis replies them): which owner is meant is unknown,
            // and repeated ranges would lift the copy past one entry per slot.
            Value::Array(vec![
                range(0, 10, node("h", 1)),
                range(10, 20, node("h", 2)),
            ]),
            Value::Array(vec![range(0, 0, node("h", 1)), range(0, 0, node("h", 1))]),
            Value::Array(vec![Value::Array(vec![Value::Int(0)])]),
        ] {
            owners.update(&bad, "redis", 0);
            assert_eq!(owners.owner(0).as_deref(), Some("redis://127.0.0.1:7000"));
        }
        owners.update(
            &Value::Array(vec![range(0, 0, node("::1", 7))]),
            "rediss",
            0,
        );
        assert_eq!(owners.owner(0).as_deref(), Some("rediss://[::1]:7"));
        assert_eq!(owners.owner(1), None);

        let (t0, every) = (Instant::now(), Duration::from_millis(200));
        let read = owners.start_read(t0, every).expect("the first read");
        assert!(
            owners.start_read(t0 + every, every).is_none(),
            "one read at a time"
        );
        drop(read);
        let early = t0 + every - Duration::from_nanos(1);
        assert!(
            owners.start_read(early, every).is_none(),
            "one read per `every`"
        );
        assert!(
            owners.start_read(t0, every).is_none(),
            "a lagging clock read is no time passed"
        );
        assert!(owners.start_read(t0 + every, every).is_some());
    }

    /// The read task is spawned on the runtime that built the connection; a runtime dropped
    /// before the task ends drops the task with it, and the "read in flight" flag must clear
    /// then too, or no read would ever start again.
    #[test]
    fn a_read_dropped_with_its_runtime_lets_the_next_one_start() {
        let owners = Arc::new(SlotOwners::default());
        let (t0, every) = (Instant::now(), Duration::from_millis(200));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let read = owners.start_read(t0, every).expect("the first read");
        runtime.spawn(async move {
            std::future::pending::<()>().await; // a read that never answers
            drop(read);
        });
        drop(runtime);
        assert!(
            owners.start_read(t0 + every, every).is_some(),
            "the flag of a read dropped unfinished stayed set"
        );
    }
}
