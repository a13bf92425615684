//! Coalescing: concurrent decisions of one limiter go to Redis together, in one script call that
//! decides them in order.
//!
//! A decision made while none of the limiter's calls is out is sent at once, by its caller, as
//! one plain script call (no latency added to a lone caller). A decision made while one is out
//! joins a lock-free queue, and a task (the *flusher*, not any caller) takes everything queued,
//! up to [`MAX_BATCH`] decisions (and, for the sliding log, up to [`MAX_BATCH_ENTRIES`]
//! sorted-set entries touched), and sends it as one call of the batch script: when a call
//! comes back, or at once while only one call is out and at least [`SECOND_SENDER_QUEUE`]
//! decisions wait ([`MAX_SENDERS`]: two batches pipeline).
//! The batch script decides the batch's decisions in queue order, atomically, exactly as the
//! one-decision script would one call after another at the same instant: the fixed windows'
//! (anchored and aligned) and GCRA's batch scripts are written for it (each key read once, written once, and the
//! reply carries each key's state as read instead of each decision's fields: the client
//! replays the decisions from it, see [`RedisBackend::eval_tally`]); the sliding windows' and
//! sliding logs' (`sliding_window_batch.lua`, `sliding_log_batch.lua`) read each key once and
//! reply with each decision's fields, as the one-decision script's replies (the sliding log
//! writes a key's admissions at once before its first denial or at the end, the sliding window
//! at the end). So a batch of `N`
//! decisions on one key admits exactly what `N` sequential calls would, and each decision keeps
//! its own deadline (checked by the script on the server's clock, as for one call). The flusher
//! hands the batch's first caller its answer, and each caller hands on the next ([`Answers`]:
//! mostly run in turn on one worker, not each woken on an idle one), then goes on while the queue
//! refills (letting the callers it answered queue again first, and handing out itself any
//! answer the callers have not handed on by then), then gives its turn back.
//!
//! Order: each decision is exact against the key's state in the order Redis runs the calls.
//! Within one batch that is queue order. Across calls it is the order the server receives
//! them: a caller's own call, and a second batch out at the same time as the first (a second
//! sender, or in a cluster the batches of other keys), may run before or after a batch holding
//! decisions queued earlier. Every decision is decided once, or not at all (then its caller
//! gets an error); none is decided against a state that skips or repeats another's.
//!
//! Runtimes: flushers run on the runtime that built the connection (where redis-rs spawned its
//! driver: the caller's runtime for [`RedisBackend::connect`], the backend's own for
//! [`RedisBackend::blocking_connect`]), never on the runtime of the caller that handed its turn
//! on, which may be a current-thread runtime that nothing drives after its `block_on` returned,
//! or one shut down. So a flusher runs as long as the connection does.
//!
//! Cancellation: a queued caller whose future is dropped (or whose own deadline passed) before
//! its batch is taken is skipped, and sends nothing; dropped after, its decision may be taken
//! (as for a plain call dropped while out). A decision whose deadline has passed when its batch
//! is taken, its caller not yet gone (not polled since: a busy runtime), is left out of the
//! call and answered with a "not sent" timeout (a batch left empty is not sent). A caller sending its own call at once and dropped
//! while it is out hands the queue to a flusher in its drop, so nobody is left waiting on a
//! call that no task will make. A flusher itself is only dropped when the connection's runtime
//! shuts down: it then drops the replies it owes, fails every queued decision (those callers
//! see a connection error at once), and gives its turn back the usual way, so that a decision
//! queued after that is failed too, by whichever turn next finds it (a flusher spawned on the
//! shut-down runtime is dropped at once and does the same).
//!
//! Redis Cluster: the keys of one script call must share a slot, so there a batch holds the
//! decisions of one limiter key (one hash tag, one slot); batches for different keys go out
//! together, pipelined on the cluster connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use super::lua_script::LuaScript;
use crossbeam_queue::SegQueue;
use tokio::sync::oneshot;

use super::RedisBackend;
use super::connection::{Fields6, Keys, Request};
use super::limiter::reply_fields;
use super::limiter::sealed::Batch;
use crate::algorithms::MAX_SLIDING_LOG_CAPACITY;
use crate::backend::{BackendError, FailureKind, Turns, until_deadline};

/// Most decisions in one script call: the server runs a call to its end before anything else,
/// so this bounds how long one call holds it: a few µs per decision, more for a sliding window
/// of many cells (its cells are read and sorted once per key in a batch, each denial then a
/// binary search) or a sliding log's entries (bounded by [`MAX_BATCH_ENTRIES`]).
pub(crate) const MAX_BATCH: usize = 256;

/// Most sorted-set entries the decisions of one batch may touch on the server (the sliding
/// log's work grows with `n` and the limit, see `entries` of the algorithm's script): as many
/// as one decision at the per-call cap may (`n` = limit = [`MAX_SLIDING_LOG_CAPACITY`]: a full
/// log trimmed, `n` entries added). So a batch holds the server no longer than the costliest
/// single call; a decision over it alone goes in a call of its own.
pub(crate) const MAX_BATCH_ENTRIES: u64 = 2 * MAX_SLIDING_LOG_CAPACITY as u64;

/// Calls of one limiter out at a time (a caller's own call, or a flusher's batch): one, and a
/// second while at least [`SECOND_SENDER_QUEUE`] decisions wait. Two calls out pipeline: Redis
/// runs one batch while this process hands out the other's results and gathers the next.
/// More than two would only split the same callers into smaller batches, each paying a round
/// trip's fixed cost (measured: more CPU per decision on both sides at 16 and 128 callers, no
/// more decisions/s).
const MAX_SENDERS: u32 = 2;

/// Decisions waiting that let a second call go out (see [`MAX_SENDERS`]). Each call costs a
/// round trip's fixed work on both sides (on the server, about as much as 8 decisions' script
/// work), which a second call out early pays for a smaller batch. Where the client and the
/// server share few cores, CPU per decision bounds decisions/s, so fewer, larger batches win:
/// measured at 16 callers on 2 shared cores (`benches/redis.rs -- cpu`), a second call as soon
/// as 1 decision waited split them into two batches of ~8 (client + server 6.7 µs per
/// decision, fixed window); waiting for 16 kept one batch of ~15 (5.7 µs), with 4 or 8 no
/// better than 1. At 128 callers the queue is long and two calls go out as before.
const SECOND_SENDER_QUEUE: usize = 16;

/// A decision's result: its reply's fields (as [`RedisBackend::eval`] returns them, checked
/// to be six), inline.
type Answer = Result<Fields6, BackendError>;

/// Where a queued decision's result goes: its answer, and the [`Baton`] of its batch.
type Reply = oneshot::Sender<(Answer, Baton)>;

/// The answers of a sent batch not yet handed out, in queue order.
///
/// The flusher does not wake a batch's callers itself, one after another: it hands the first
/// its answer, and each caller, as it takes its own, hands on the next ([`Baton`]). A task woken
/// by the task running on a worker takes that worker's next slot (tokio's LIFO slot), so the
/// batch's callers mostly run there in turn rather than each waking an idle worker to steal it
/// (tokio runs at most 3 tasks in a row from the LIFO slot, then queues the next: not one
/// wake-up per worker, but far fewer than one per caller). Where the cores are busy, each such
/// wake-up cost a context switch or two. A caller that hands the next answer on then steps
/// aside once ([`requeue`]) before its own code goes on, so that code (a request handler) does
/// not hold the next caller in the LIFO slot, which no other worker can steal. So that a caller
/// slow to run (a busy runtime, or one not driven) does not hold up the others, the flusher
/// hands out whatever is left itself once its worker has run the callers it woke
/// ([`hand_out`], after its `yield_now`). Each answer is popped once, so it goes to its caller
/// once, whoever sends it. Measured (client CPU per decision at 16 callers on 2 cores shared
/// with other work, median of 5 alternating runs of `--bench cpu floodgate`, fixed window /
/// GCRA): each caller woken by the flusher 3.95 / 4.04 µs; handed on 2.66 / 2.70 µs; handed on
/// and stepping aside 2.93 / 2.99 µs.
///
/// The answers are a list made once (the batch's, in queue order) and then only popped from
/// its front, by one caller at a time in the usual case (the baton's holder) and by the
/// flusher's [`hand_out`]: a `Vec`'s iterator behind a mutex held for one `next()`. (A
/// `SegQueue` here allocated and zeroed a block of 31 slots per batch: callgrind of
/// `--bench cpu 'floodgate fixed'` at 16 callers, 100K decisions in batches of ~13, counted
/// 7,883 instructions a decision in the whole bench process with it, 7,434 with this list.)
#[derive(Clone)]
struct Answers(Arc<Mutex<std::vec::IntoIter<(Reply, Answer)>>>);

impl Answers {
    /// The answers of a batch, `list` in queue order.
    fn new(list: Vec<(Reply, Answer)>) -> Self {
        Answers(Arc::new(Mutex::new(list.into_iter())))
    }

    /// The next answer not yet taken, and its caller's reply; each is taken once.
    fn pop(&self) -> Option<(Reply, Answer)> {
        // Nothing panics while the lock is held (it moves one item out): a poisoned lock
        // still holds a consistent iterator.
        let mut rest = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        rest.next()
    }

    /// Whether every answer has been taken.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        let rest = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        rest.len() == 0
    }
}

/// A batch's [`Answers`], travelling with one caller's answer: dropped (the answer read, or
/// dropped unread with its caller), it hands the next answer on (`None`: nothing to hand on).
struct Baton(Option<Answers>);

impl Baton {
    /// Hands the next answer on now; true if it went to a caller (woken, to run next).
    fn pass(mut self) -> bool {
        self.0.take().is_some_and(|answers| pass_on(&answers))
    }
}

impl Drop for Baton {
    fn drop(&mut self) {
        if let Some(answers) = self.0.take() {
            pass_on(&answers);
        }
    }
}

/// Sends the next of `answers` to its caller, with the baton; a caller gone is skipped. True
/// if one was sent.
fn pass_on(answers: &Answers) -> bool {
    while let Some((reply, answer)) = answers.pop() {
        match reply.send((answer, Baton(Some(answers.clone())))) {
            Ok(()) => return true,
            // Its caller is gone: the next one (not by this baton's drop, which would recurse).
            Err((_, mut baton)) => baton.0 = None,
        }
    }
    false
}

/// Returns `Pending` once, having woken its own task: a caller that has just woken the next
/// (into its worker's LIFO slot, which no other worker can steal) steps aside, so that the next
/// runs before this caller's own code goes on. Tokio puts a task that woke itself while it ran
/// at the back of its worker's run queue, from where an idle worker (notified) can steal it.
async fn requeue() {
    let mut woken = false;
    std::future::poll_fn(|cx| {
        if woken {
            return std::task::Poll::Ready(());
        }
        woken = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await;
}

/// Sends every answer still in `answers` to its caller (those gone drop theirs).
fn hand_out(answers: &Answers) {
    while let Some((reply, answer)) = answers.pop() {
        let _ = reply.send((answer, Baton(None)));
    }
}

/// The answers of the batch a flusher sent last (or, in a cluster, of one group, held by that
/// group's task): dropped (after a yield, or with its task, when its runtime shuts down),
/// hands out those the callers have not handed on.
struct HandOut(Vec<Answers>);

impl HandOut {
    /// Yields (so that this worker runs the callers just woken), then hands out those the
    /// callers have not handed on yet (see [`Answers`]); also if dropped before.
    async fn after_a_yield(self) {
        tokio::task::yield_now().await;
        drop(self);
    }
}

impl Drop for HandOut {
    fn drop(&mut self) {
        self.0.iter().for_each(hand_out);
    }
}

/// A queued decision and where its result goes.
struct Pending {
    request: Request,
    /// Sorted-set entries it may touch (0: constant work), counted against [`MAX_BATCH_ENTRIES`].
    entries: u64,
    reply: Reply,
}

/// The coalescing sender of one limiter (one script). See the module docs.
pub(crate) struct Coalescer {
    backend: RedisBackend,
    script: &'static LuaScript,
    batch: Batch,
    /// Which of the script's four arguments is `n` (the others are the same for every decision).
    n_slot: usize,
    /// How many of the four the one-decision script reads (sent before its deadline).
    script_args: usize,
    queue: SegQueue<Pending>,
    /// Calls out (see [`MAX_SENDERS`]): whoever holds a turn must, when done, either pass it to
    /// a flusher (queue not empty) or give it back and look at the queue again.
    turns: Turns,
}

impl std::fmt::Debug for Coalescer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("queued", &self.queue.len())
            .finish_non_exhaustive()
    }
}

impl Coalescer {
    pub(crate) fn new(
        backend: RedisBackend,
        script: &'static LuaScript,
        batch: Batch,
        n_slot: usize,
        script_args: usize,
    ) -> Self {
        Coalescer {
            backend,
            script,
            batch,
            n_slot,
            script_args,
            queue: SegQueue::new(),
            turns: Turns::new(MAX_SENDERS),
        }
    }

    /// Decides `request` on the server: at once if no call is out, else in the next batch.
    /// `entries`: the sorted-set entries it may touch (0 for constant work), which bound a
    /// batch with [`MAX_BATCH_ENTRIES`]. `keys` makes the request's keys again, only to name
    /// the node in the error of a caller still queued at its deadline (the request went to the
    /// queue; on a cluster the node is the owner of the keys' slot). Must run inside a tokio
    /// runtime (checked by the caller).
    pub(crate) async fn eval(
        self: &Arc<Self>,
        request: Request,
        entries: u64,
        keys: impl FnOnce() -> Keys,
    ) -> Answer {
        if self.turns.take(1) {
            // Hands the queue on when the call's future is first woken (its reply came back,
            // most likely), whether or not this caller is polled again, and at the latest
            // when this future is done or dropped.
            let turn = Arc::new(Turn::new(Arc::clone(self)));
            let _hands_on = HandsOn(Arc::clone(&turn));
            let waker = std::task::Waker::from(Arc::clone(&turn));
            let mut call = std::pin::pin!(self.eval_one(request));
            return std::future::poll_fn(|cx| {
                turn.woken_by(cx.waker());
                call.as_mut()
                    .poll(&mut std::task::Context::from_waker(&waker))
            })
            .await;
        }
        let started = Instant::now();
        let deadline = request.deadline;
        let (reply, answer) = oneshot::channel();
        self.queue.push(Pending {
            request,
            entries,
            reply,
        });
        // Something waits (this decision): a second call may go out, if enough wait.
        if self.turns.after_push(|| self.senders()) {
            self.spawn_flusher();
        }
        match until_deadline(answer, deadline).await {
            Ok(Ok((result, baton))) => {
                // The next caller's answer, on to it; then that caller runs before this one's
                // own code goes on (see `Answers`).
                if baton.pass() {
                    requeue().await;
                }
                result
            }
            Ok(Err(_)) => Err(BackendError::at(
                FailureKind::Connection,
                self.backend_server(),
                std::io::Error::other(
                    "the runtime that built the Redis connection (and sends the queued \
                     decisions) shut down before this decision was answered",
                ),
            )),
            Err(_) => Err(self.backend.timeout_error(
                &keys(),
                deadline.saturating_duration_since(started),
                "deciding",
            )),
        }
    }

    /// One plain script call for `request`.
    async fn eval_one(&self, request: Request) -> Answer {
        let reply = self
            .backend
            .eval(
                self.script,
                &request.keys,
                &request.args[..self.script_args],
                request.deadline,
            )
            .await?;
        reply_fields(&reply, || self.backend.failed_at(&request.keys))
    }

    fn backend_server(&self) -> Arc<str> {
        self.backend.server().into()
    }

    /// Gives a turn back; takes it again (for a new flusher) if something was queued meanwhile.
    fn give_back(self: &Arc<Self>) {
        if self.give_back_and_retake() {
            self.spawn_flusher();
        }
    }

    /// Gives a turn back; true if it was taken again because the queue is not empty.
    fn give_back_and_retake(&self) -> bool {
        self.turns.give_back(|| match self.queue.is_empty() {
            true => 0,
            false => self.senders(),
        })
    }

    /// How many calls may be out for the queue as it is now: a second only while at least
    /// [`SECOND_SENDER_QUEUE`] decisions wait.
    fn senders(&self) -> u32 {
        match self.queue.len() >= SECOND_SENDER_QUEUE {
            true => MAX_SENDERS,
            false => 1,
        }
    }

    /// Starts a flusher holding the turn the caller took, on the runtime that drives the
    /// connection (whichever runtime the caller is on, and whether or not anything drives it
    /// later). If that runtime has shut down, the task is dropped unpolled (here, at once) and
    /// its turn fails the queued callers ([`FlusherTurn`]).
    fn spawn_flusher(self: &Arc<Self>) {
        let mut held = FlusherTurn(Some(Arc::clone(self)));
        self.backend.runtime().spawn(async move {
            if let Some(coalescer) = &held.0 {
                coalescer.flush().await;
            }
            held.disarm();
        });
    }

    /// Sends batches while the queue has work, then gives the turn back.
    async fn flush(self: &Arc<Self>) {
        // A decision taken from the queue that did not fit the last batch: first in the next.
        let mut carried = None;
        loop {
            let batch = self.take_batch(&mut carried);
            if batch.is_empty() {
                if self.give_back_and_retake() {
                    continue;
                }
                return;
            }
            // The callers just answered mostly decide again at once: let them queue before
            // taking the next batch (else it would hold the few that came meanwhile, and the
            // rest would wait a whole round trip more).
            HandOut(self.send(batch).await).after_a_yield().await;
        }
    }

    /// The next batch, in queue order from `carried`: at most [`MAX_BATCH`] decisions touching
    /// at most [`MAX_BATCH_ENTRIES`] entries (but always one, however costly). The decision that
    /// would overflow it is left in `carried` (the queue cannot take it back at its head).
    /// Empty only if `carried` was empty and the queue held no live decision.
    fn take_batch(&self, carried: &mut Option<Pending>) -> Vec<Pending> {
        // Sized once (not grown 4, 8, 16, … as it fills): the queue's length now, give or take
        // the decisions pushed meanwhile.
        let queued = self.queue.len() + usize::from(carried.is_some());
        let mut batch = Vec::with_capacity(queued.min(MAX_BATCH));
        let mut entries = 0u64;
        while batch.len() < MAX_BATCH {
            let Some(pending) = carried.take().or_else(|| self.queue.pop()) else {
                break;
            };
            // Its caller is gone (dropped, or past its deadline): send nothing.
            if pending.reply.is_closed() {
                continue;
            }
            let total = entries.saturating_add(pending.entries);
            if !batch.is_empty() && total > MAX_BATCH_ENTRIES {
                *carried = Some(pending);
                break;
            }
            entries = total;
            batch.push(pending);
        }
        batch
    }

    /// Sends `batch`: one call, or in a cluster one call per hash tag (so per slot), pipelined.
    /// Returns the answers its callers have still to hand on (see [`Answers`]); in a cluster,
    /// several groups' tasks each hand out their own as soon as that group is back (none left).
    async fn send(self: &Arc<Self>, batch: Vec<Pending>) -> Vec<Answers> {
        if !self.backend.is_cluster() {
            return self.send_group(batch).await.into_iter().collect();
        }
        let mut groups: Vec<(String, Vec<Pending>)> = Vec::new();
        for pending in batch {
            let tag = hash_tag(&pending.request.keys).to_owned();
            match groups.iter_mut().find(|(t, _)| *t == tag) {
                Some((_, group)) => group.push(pending),
                None => groups.push((tag, vec![pending])),
            }
        }
        if groups.len() == 1 {
            let (_, group) = groups.pop().expect("one group");
            return self.send_group(group).await.into_iter().collect();
        }
        // Each group's task hands out its own leftover answers as soon as its callers have had
        // their turn (not after the slowest group), also if this flusher is dropped meanwhile.
        let tasks: Vec<_> = groups
            .into_iter()
            .map(|(_, group)| {
                let me = Arc::clone(self);
                self.backend.runtime().spawn(async move {
                    let answers = HandOut(me.send_group(group).await.into_iter().collect());
                    answers.after_a_yield().await;
                })
            })
            .collect();
        for task in tasks {
            // A group task fails only when its runtime shuts down; its callers then see an error.
            let _ = task.await;
        }
        Vec::new()
    }

    /// `group` without the decisions whose deadline passed while they were queued (their
    /// callers not yet gone), each of those answered now with a "not sent" timeout (decided
    /// by its caller's policy, not told to the breaker: it says nothing about Redis). Sent,
    /// such a decision would be refused by the server only while the clock offset is known (a
    /// lazy backend before its first reply sends no deadline: its script would take the
    /// permits for a caller that has given up). Each decision is answered once: here, or by
    /// the call that the rest go in.
    fn answer_late(&self, group: Vec<Pending>) -> Vec<Pending> {
        let now = Instant::now();
        // The usual case, none late: no second list.
        if group.iter().all(|pending| pending.request.deadline > now) {
            return group;
        }
        let (live, late): (Vec<Pending>, Vec<Pending>) = group
            .into_iter()
            .partition(|pending| pending.request.deadline > now);
        for pending in late {
            let error = self.backend.not_sent(&pending.request.keys);
            // A caller gone meanwhile drops its answer.
            let _ = pending.reply.send((Err(error), Baton(None)));
        }
        live
    }

    /// One script call for `group` (keys sharing a slot), each result to its caller: the first
    /// at once, the others handed on by the callers ([`Answers`], returned).
    async fn send_group(&self, group: Vec<Pending>) -> Option<Answers> {
        let mut group = self.answer_late(group);
        if group.is_empty() {
            return None;
        }
        if group.len() == 1 {
            let Pending { request, reply, .. } = group.pop().expect("one");
            let result = self.eval_one(request).await;
            let _ = reply.send((result, Baton(None))); // a caller gone meanwhile drops its result
            return None;
        }
        let requests: Vec<&Request> = group.iter().map(|p| &p.request).collect();
        let results = match self.batch {
            Batch::Each(batch) => self.backend.eval_batch(batch, self.n_slot, &requests).await,
            Batch::Tally(batch, replay) => {
                let backend = &self.backend;
                backend
                    .eval_tally(batch, replay, self.n_slot, &requests)
                    .await
            }
        };
        let answers = Answers::new(match results {
            Ok(results) => group
                .into_iter()
                .zip(results)
                .map(|(pending, result)| (pending.reply, result))
                .collect(),
            Err(error) => group
                .into_iter()
                .map(|pending| (pending.reply, Err(error.clone())))
                .collect(),
        });
        pass_on(&answers);
        Some(answers)
    }
}

/// The hash tag of a decision's keys (`{name:key}`), which fixes their slot.
fn hash_tag(keys: &[String]) -> &str {
    let first = keys.first().map_or("", String::as_str);
    first.find('}').map_or(first, |end| &first[..=end])
}

/// The turn of a caller sending its own call: handed on once ([`hand_on`](Self::hand_on)),
/// passed to a flusher if decisions were queued meanwhile, else given back. Handed on when the
/// call's future is first woken (the reply came back, most likely: then the call is no longer
/// out), or when the caller is done with the call or drops its future, whichever comes first.
/// Not at the caller's next poll alone: a caller whose call went out and which is then never
/// polled again, its future kept (a stream its consumer stopped reading, a task on a runtime
/// that nothing drives any more), held the turn for as long as it kept the future, and every
/// decision queued behind it waited for its timeout while Redis was up. A wake that comes
/// before the reply (a reconnection, a timer) only lets the next call out early: more calls out
/// at once than [`MAX_SENDERS`], each decision still decided once.
struct Turn {
    coalescer: Arc<Coalescer>,
    handed_on: AtomicBool,
    /// The caller's waker, as its last poll gave it.
    caller: Mutex<Option<std::task::Waker>>,
}

impl Turn {
    fn new(coalescer: Arc<Coalescer>) -> Self {
        Turn {
            coalescer,
            handed_on: AtomicBool::new(false),
            caller: Mutex::new(None),
        }
    }

    /// Keeps `caller`, the waker of the caller's latest poll, to wake when the call is woken.
    fn woken_by(&self, caller: &std::task::Waker) {
        // The lock is held for a comparison and a clone: nothing panics under it.
        let mut kept = self.caller.lock().unwrap_or_else(PoisonError::into_inner);
        if !kept.as_ref().is_some_and(|kept| kept.will_wake(caller)) {
            *kept = Some(caller.clone());
        }
    }

    /// Passes the turn to a flusher if decisions are queued, else gives it back: the first time
    /// only.
    fn hand_on(&self) {
        // SeqCst: one flag read and written only by this swap; whoever swaps first hands the
        // turn on, once (the turn's own accounting, `Turns`, orders the rest).
        if self.handed_on.swap(true, Ordering::SeqCst) {
            return;
        }
        if self.coalescer.queue.is_empty() {
            self.coalescer.give_back();
        } else {
            self.coalescer.spawn_flusher();
        }
    }
}

impl std::task::Wake for Turn {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.hand_on();
        // The lock is held for a clone: nothing panics under it.
        let caller = self
            .caller
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(caller) = caller {
            caller.wake();
        }
    }
}

/// Hands its [`Turn`] on when dropped (the call done, or its future dropped), if not before.
struct HandsOn(Arc<Turn>);

impl Drop for HandsOn {
    fn drop(&mut self) {
        self.0.hand_on();
    }
}

/// A flusher's turn. If the flusher task is dropped before it ends (the connection's runtime
/// shutting down, or already shut down when it was spawned), nothing can send the queue any
/// more: the turn fails every queued caller at once (dropping its reply: the caller sees a
/// connection error) and is given back, looking at the queue again as any turn does, so that
/// a decision queued meanwhile is failed too rather than left waiting for its timeout.
/// `None` once `flush` gave the turn back itself.
struct FlusherTurn(Option<Arc<Coalescer>>);

impl FlusherTurn {
    /// `flush` ended, having given the turn back itself.
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for FlusherTurn {
    fn drop(&mut self) {
        if let Some(coalescer) = self.0.take() {
            loop {
                while let Some(pending) = coalescer.queue.pop() {
                    drop(pending); // its caller sees the reply dropped: a connection error
                }
                if !coalescer.give_back_and_retake() {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::RedisConfig;
    use crate::redis::limiter::sealed::Script as _;
    use std::future::Future as _;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Context, Wake, Waker};
    use std::time::Duration;

    /// A coalescer whose queue is filled by hand (a lazy backend: no server needed).
    fn coalescer() -> Coalescer {
        let config = RedisConfig::single("redis://127.0.0.1:1").lazy();
        let backend = RedisBackend::blocking_connect(config).unwrap();
        let log = crate::SlidingLog::new(4_096, Duration::from_secs(60)).unwrap();
        Coalescer::new(backend, log.script(), log.batch_script(), 2, 4)
    }

    /// Queues a decision touching `entries`; its answer's receiver (dropping it gives up).
    fn queue(coalescer: &Coalescer, n: u64, entries: u64) -> oneshot::Receiver<(Answer, Baton)> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            keys: super::super::connection::Keys::One("k".into()),
            args: [4_096, 60_000_000, n, 0],
            deadline: Instant::now() + Duration::from_secs(60),
        };
        coalescer.queue.push(Pending {
            request,
            entries,
            reply,
        });
        answer
    }

    fn ns(batch: &[Pending]) -> Vec<u64> {
        batch.iter().map(|p| p.request.args[2]).collect()
    }

    #[test]
    fn a_batch_is_bounded_by_entries_and_the_overflow_goes_first_in_the_next() {
        let coalescer = coalescer();
        let quarter = MAX_BATCH_ENTRIES / 4;
        let mut answers: Vec<_> = (1..=6).map(|n| queue(&coalescer, n, quarter)).collect();
        answers.push(queue(&coalescer, 7, MAX_BATCH_ENTRIES + 1));
        answers.push(queue(&coalescer, 8, 0));
        let mut carried = None;
        let first = coalescer.take_batch(&mut carried);
        assert_eq!(ns(&first), [1, 2, 3, 4], "four quarters fill a batch");
        assert_eq!(carried.as_ref().map(|p| p.request.args[2]), Some(5));
        let second = coalescer.take_batch(&mut carried);
        assert_eq!(ns(&second), [5, 6], "then the carried one, in queue order");
        let third = coalescer.take_batch(&mut carried);
        assert_eq!(ns(&third), [7], "one over the bound goes alone");
        let fourth = coalescer.take_batch(&mut carried);
        assert_eq!(ns(&fourth), [8]);
        assert!(coalescer.take_batch(&mut carried).is_empty() && carried.is_none());
        drop(answers);
    }

    #[test]
    fn a_caller_gone_while_its_decision_was_carried_is_skipped() {
        let coalescer = coalescer();
        let _first = queue(&coalescer, 1, MAX_BATCH_ENTRIES);
        let gone = queue(&coalescer, 2, 1);
        let _third = queue(&coalescer, 3, 1);
        let mut carried = None;
        assert_eq!(ns(&coalescer.take_batch(&mut carried)), [1]);
        assert!(carried.is_some(), "2 did not fit");
        drop(gone);
        assert_eq!(ns(&coalescer.take_batch(&mut carried)), [3]);
        assert!(carried.is_none());
    }

    /// A batch's answers `0..n` (each its caller's index), and the callers' receivers.
    fn answers(n: i64) -> (Answers, Vec<oneshot::Receiver<(Answer, Baton)>>) {
        let (list, receivers) = (0..n)
            .map(|i| {
                let (reply, answer) = oneshot::channel();
                ((reply, Ok([i, 0, 0, 0, 0, 0])), answer)
            })
            .unzip();
        (Answers::new(list), receivers)
    }

    /// The answer waiting for `receiver`, if any.
    fn answered(receiver: &mut oneshot::Receiver<(Answer, Baton)>) -> Option<(i64, Baton)> {
        let (answer, baton) = receiver.try_recv().ok()?;
        Some((answer.unwrap()[0], baton))
    }

    #[test]
    fn each_caller_hands_the_next_answer_on_skipping_callers_gone() {
        let (answers, mut receivers) = answers(4);
        drop(receivers.remove(1)); // caller 1 is gone
        pass_on(&answers);
        let (first, baton) = answered(&mut receivers[0]).expect("the first, from the flusher");
        assert_eq!(first, 0);
        assert!(
            answered(&mut receivers[1]).is_none(),
            "not before the first hands it on"
        );
        drop(baton);
        let (next, baton) = answered(&mut receivers[1]).expect("handed on by the first");
        assert_eq!(next, 2, "caller 1, gone, is skipped");
        assert!(answered(&mut receivers[2]).is_none());
        drop(baton);
        let (last, baton) = answered(&mut receivers[2]).expect("handed on by caller 2");
        assert_eq!(last, 3);
        drop(baton); // nothing left to hand on
        assert!(answers.is_empty());
    }

    #[test]
    fn an_answer_dropped_unread_still_hands_the_next_on() {
        let (answers, mut receivers) = answers(3);
        pass_on(&answers);
        drop(receivers.remove(0)); // caller 0 gone after its answer was sent, unread
        let (next, _baton) = answered(&mut receivers[0]).expect("handed on by the drop");
        assert_eq!(next, 1);
        assert!(answered(&mut receivers[1]).is_none());
    }

    #[test]
    fn the_flusher_hands_out_what_the_callers_have_not_handed_on() {
        let (answers, mut receivers) = answers(4);
        pass_on(&answers);
        // Caller 0 has not run yet (a busy runtime): the others are not held up by it.
        hand_out(&answers);
        let mut got: Vec<i64> = receivers[1..]
            .iter_mut()
            .map(|r| answered(r).expect("handed out").0)
            .collect();
        got.sort_unstable();
        assert_eq!(got, [1, 2, 3]);
        let (first, baton) = answered(&mut receivers[0]).expect("its own");
        assert_eq!(first, 0);
        drop(baton); // nothing left: each answer went out once
        assert!(answers.is_empty());
    }

    /// The answers a caller has not handed on yet (1 to 3; 0 has its own from the flusher).
    fn handed_out(receivers: &mut [oneshot::Receiver<(Answer, Baton)>]) -> Vec<i64> {
        let mut got: Vec<i64> = receivers[1..]
            .iter_mut()
            .filter_map(|r| Some(answered(r)?.0))
            .collect();
        got.sort_unstable();
        got
    }

    #[test]
    fn a_flusher_dropped_with_its_runtime_hands_out_what_is_left() {
        let (answers, mut receivers) = answers(4);
        pass_on(&answers);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        // A flusher that holds its hand-out and never gets further (its runtime shuts down).
        let held = HandOut(vec![answers]);
        runtime.spawn(async move {
            let _held = held;
            std::future::pending::<()>().await;
        });
        assert_eq!(handed_out(&mut receivers), [0i64; 0], "not before");
        drop(runtime);
        assert_eq!(handed_out(&mut receivers), [1, 2, 3]);
    }

    #[test]
    fn a_hand_out_dropped_at_its_yield_hands_out_what_is_left() {
        let (answers, mut receivers) = answers(4);
        pass_on(&answers);
        let mut after = Box::pin(HandOut(vec![answers]).after_a_yield());
        let mut context = Context::from_waker(Waker::noop());
        assert!(
            after.as_mut().poll(&mut context).is_pending(),
            "at its yield"
        );
        assert_eq!(handed_out(&mut receivers), [0i64; 0], "not before");
        drop(after);
        assert_eq!(handed_out(&mut receivers), [1, 2, 3]);
    }

    #[test]
    fn requeue_wakes_its_task_and_is_pending_once() {
        struct Count(AtomicUsize);
        impl Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&count));
        let mut context = Context::from_waker(&waker);
        let mut requeued = std::pin::pin!(requeue());
        assert!(requeued.as_mut().poll(&mut context).is_pending());
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            1,
            "woken, to be polled again"
        );
        assert!(requeued.as_mut().poll(&mut context).is_ready());
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_batch_holds_at_most_max_batch_decisions() {
        let coalescer = coalescer();
        let _answers: Vec<_> = (0..MAX_BATCH as u64 + 1)
            .map(|n| queue(&coalescer, n, 0))
            .collect();
        let mut carried = None;
        assert_eq!(coalescer.take_batch(&mut carried).len(), MAX_BATCH);
        assert_eq!(ns(&coalescer.take_batch(&mut carried)), [MAX_BATCH as u64]);
    }
}
