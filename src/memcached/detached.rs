//! The async path's exchange, run in a task of its own so that a caller who gives up (drops its
//! future, or reaches its timeout) after the request was written only loses its answer: the
//! exchange still reads memcached's reply and takes the increment back unless its permits were
//! handed out.
//!
//! * The caller waits for a connection place, then spawns the exchange ([`tokio::spawn`]) with
//!   the place, and awaits its answer on a oneshot channel within its timeout.
//! * The exchange writes a request only while its caller waits (the channel open and the
//!   caller's deadline not passed): a caller gone before the write sends nothing. An exchange
//!   its runtime had not started by the caller's deadline (busy elsewhere) does nothing, and the
//!   caller's timeout is a "not sent" one, decided by the policy but never told to the circuit
//!   breaker (it says nothing about memcached; as on Redis). Once written,
//!   the exchange runs on, bounded by the caller's deadline plus the backend's
//!   [grace](super::MemcachedConfig::grace) (an unread admission's give-back, below, by the
//!   backend's timeout from the drop plus the grace).
//! * A denial is answered at once, and its caller waits for its take-back until its deadline
//!   (a serial caller's next request must not find its permits), never past it: the denial
//!   stands whatever happens to the take-back, which runs on in the task.
//! * An admission is handed over alone: the exchange pools its connection and gives its place
//!   back as it sends it, so a caller never polled again holds no place. A caller found gone
//!   when the exchange has its reply gets the permits given back (`decr` of the same cell and
//!   `n`) on the exchange's connection; one gone after that check, or dropped with the
//!   admission unread (the channel is closed first, so a send either reaches the caller or
//!   fails, and exactly one of the exchange and the drop gives back), gets them given back on a
//!   new connection of its own (never a pooled one, which memcached may have closed), taken
//!   with a place like any call's, within the backend's timeout from the drop; no place or no
//!   connection by then counts it in [`ReclaimCounts::left_counted`].
//! * Whatever cannot be taken back (the grace ran out, the connection failed) may stay counted
//!   until its cell leaves the window, and is counted in [`ReclaimCounts::left_counted`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Instant;

use tokio::sync::{OwnedSemaphorePermit, oneshot};

use super::async_connection::AsyncConnection;
use super::connection::{MemcachedBackend, Pending, later_by};
use super::error::{CallError, MemcachedError};
use super::limiter::{decide, take_back};
use super::sliding_window::Cells;
use crate::backend::{BackendError, until_deadline};
use crate::decision::Decision;

/// What became of requests whose permits were not handed out to their caller although
/// memcached counted them: given back, or possibly left counted (see
/// [`MemcachedLimiter::reclaims`](super::MemcachedLimiter::reclaims)).
///
/// ```
/// let counts = floodgate::memcached::ReclaimCounts::default();
/// assert_eq!((counts.given_back, counts.left_counted), (0, 0));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReclaimCounts {
    /// Admissions whose caller was gone (its future dropped, or its timeout passed) before it
    /// got them, whose permits were given back (`decr`): they consume nothing. (Denials whose
    /// caller was gone are taken back as every denial is, and not counted.)
    pub given_back: u64,
    /// Requests written to memcached whose increment may stay counted, never handed out, until
    /// its cell leaves the window: a denial's take-back or a give-back that failed or ran out of
    /// time (an admission dropped unread included, whose give-back found no connection place or
    /// could not connect within the backend's timeout from the drop), an exchange that failed
    /// or ran out of time after its write (the timeout plus the grace), an admission left
    /// unread by a future dropped outside a runtime. Each costs admissions (never adds any) for
    /// at most one window.
    ///
    /// An upper bound: a request whose connection ended before any byte of its reply (after
    /// its write succeeded) is counted here whether or not memcached read it. A pooled
    /// connection memcached closed (restarted, its `idle_timeout`) just after the limiter's
    /// check found it open, before the request reached it, consumed nothing; a connection cut
    /// after memcached carried the request out consumed its permits; the limiter sees the same
    /// end of stream in both, so it counts both (and sends neither again).
    pub left_counted: u64,
}

/// The counters behind [`ReclaimCounts`], shared with detached exchanges.
#[derive(Debug, Default)]
pub(crate) struct Reclaims {
    given_back: AtomicU64,
    left_counted: AtomicU64,
}

impl Reclaims {
    pub(crate) fn given_back(&self) {
        self.given_back.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn left_counted(&self) {
        self.left_counted.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn counts(&self) -> ReclaimCounts {
        ReclaimCounts {
            given_back: self.given_back.load(Ordering::SeqCst),
            left_counted: self.left_counted.load(Ordering::SeqCst),
        }
    }
}

/// One decision to make: `n` permits at `now` for the key whose cells start with `prefix`.
pub(crate) struct Job {
    pub(crate) window: Cells,
    pub(crate) prefix: String,
    pub(crate) now: u64,
    pub(crate) n: u32,
}

impl Job {
    fn cell(&self) -> u64 {
        self.window.cell_index(self.now)
    }
}

/// A connection with its place among the backend's async places.
struct Held {
    connection: AsyncConnection,
    place: OwnedSemaphorePermit,
}

/// What the exchange sends its caller: an admission, a denial, or a failure.
enum Answer {
    Decided(Decision),
    /// A denial whose take-back is under way: `taken_back` ends (a value, or closed) once it is
    /// done or given up.
    Denied(Decision, oneshot::Receiver<()>),
    Failed(CallError),
    /// Started only after the caller's deadline: nothing was sent.
    NotSent,
}

/// Whether the exchange has started ([`Start`]): claimed once, by the exchange as it starts or
/// by its caller as it gives up, whichever comes first.
const UNSTARTED: u8 = 0;
const STARTED: u8 = 1;
const ABANDONED: u8 = 2;

/// Who claimed the exchange's start: the exchange (it may send), or its caller, giving up at
/// its deadline before the exchange ran (nothing is ever sent: the caller's timeout says
/// nothing about memcached, as a Redis request whose deadline passed before it was written).
#[derive(Default)]
struct Start(AtomicU8);

impl Start {
    /// Claims the start for the exchange; `false` if its caller gave up first.
    fn begin(&self) -> bool {
        // SeqCst: one claim of the two sides (`abandon`); only one compare-exchange wins.
        self.0
            .compare_exchange(UNSTARTED, STARTED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Claims the start for the caller giving up; `false` if the exchange started first.
    fn abandon(&self) -> bool {
        // SeqCst: pairs with `begin`'s compare-exchange, as above.
        self.0
            .compare_exchange(UNSTARTED, ABANDONED, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }
}

/// The caller's end. Dropped with an admission unread, it gives the permits back.
struct Awaiting {
    answer: oneshot::Receiver<Answer>,
    backend: MemcachedBackend,
    job: Arc<Job>,
    reclaims: Arc<Reclaims>,
}

impl Drop for Awaiting {
    fn drop(&mut self) {
        // After `close`, a send fails (the exchange then gives the permits back itself); a
        // value sent before is still here.
        self.answer.close();
        if let Ok(Answer::Decided(_)) = self.answer.try_recv() {
            let deadline = later_by(Instant::now(), self.backend.timeout());
            let give = give_back_unread(
                self.backend.clone(),
                Arc::clone(&self.job),
                deadline,
                Arc::clone(&self.reclaims),
            );
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(give)),
                Err(_) => self.reclaims.left_counted(),
            }
        }
    }
}

/// Decides `job` on memcached, on the caller's runtime, before `deadline` (the backend's
/// timeout from now, or a caller's own sooner deadline).
pub(crate) async fn decide_async(
    backend: &MemcachedBackend,
    job: Job,
    reclaims: &Arc<Reclaims>,
    deadline: Instant,
) -> Result<Decision, BackendError> {
    let place = backend.async_place(deadline).await?;
    // Taken here, with the place (no await in between): a place given back finds the
    // connection given back with it, as when the exchange ran in the caller's task.
    let pooled = backend.pop_idle_async();
    let (sender, answer) = oneshot::channel();
    let start = Arc::new(Start::default());
    let job = Arc::new(job);
    let mut awaiting = Awaiting {
        answer,
        backend: backend.clone(),
        job: Arc::clone(&job),
        reclaims: Arc::clone(reclaims),
    };
    // The task runs on even if its handle is dropped.
    drop(tokio::spawn(exchange(
        backend.clone(),
        place,
        pooled,
        job,
        sender,
        deadline,
        Arc::clone(reclaims),
        Arc::clone(&start),
    )));
    match until_deadline(&mut awaiting.answer, deadline).await {
        Ok(Ok(Answer::Decided(decision))) => {
            backend.replied();
            Ok(decision)
        }
        Ok(Ok(Answer::Denied(decision, taken_back))) => {
            // The denial stands whatever happens to its take-back (as on the blocking path): the
            // caller waits for it until its deadline (a serial caller's next request must not
            // find its permits), never past it, so a take-back that outlasts the deadline is no
            // timeout for the policy to decide (FailOpen would admit what memcached denied).
            backend.replied();
            let _ = until_deadline(taken_back, deadline).await;
            Ok(decision)
        }
        Ok(Ok(Answer::NotSent)) => Err(backend.not_sent()),
        // Given up before the exchange started (its runtime ran other tasks until the
        // deadline): it never will, and nothing was sent.
        Err(()) if start.abandon() => Err(backend.not_sent()),
        Ok(Ok(Answer::Failed(CallError::Timeout))) | Err(()) => {
            Err(backend.call_failed(CallError::Timeout))
        }
        Ok(Ok(Answer::Failed(error))) => Err(backend.call_failed(error)),
        Ok(Err(_)) => Err(backend.call_failed(CallError::Failed(MemcachedError::Io(
            std::io::Error::other(
                "the exchange's task ended without an answer (its runtime shutting down?)",
            ),
        )))),
    }
}

/// The exchange, in its own task: sends the request only while the caller waits, then finishes
/// whatever becomes of the caller. Started past the caller's deadline (or after the caller gave
/// up), it does nothing.
#[allow(clippy::too_many_arguments)]
async fn exchange(
    backend: MemcachedBackend,
    place: OwnedSemaphorePermit,
    pooled: Option<AsyncConnection>,
    job: Arc<Job>,
    sender: oneshot::Sender<Answer>,
    deadline: Instant,
    reclaims: Arc<Reclaims>,
    start: Arc<Start>,
) {
    // Past the deadline, the start is left unclaimed: the caller's give-up finds it so.
    if Instant::now() >= deadline || !start.begin() {
        // Nothing done: the pooled connection is as it was (its place given back on return).
        if let Some(connection) = pooled {
            backend.pool_async(connection);
        }
        let _ = sender.send(Answer::NotSent);
        return;
    }
    let finish_by = later_by(deadline, backend.grace());
    let sent = AtomicBool::new(false);
    let waiting = || {
        let waiting = !sender.is_closed() && Instant::now() < deadline;
        if waiting {
            sent.store(true, Ordering::SeqCst);
        }
        waiting
    };
    // A failure comes with whether nothing of the failed request was written (the server
    // never saw it).
    let run = |connection: Option<AsyncConnection>| async {
        let mut connection = match connection {
            Some(connection) => connection,
            None => match until_deadline(AsyncConnection::open(backend.addr()), deadline).await {
                Ok(Ok(connection)) => connection,
                Ok(Err(error)) => return Err((error, true)),
                Err(()) => return Err((CallError::Timeout, true)),
            },
        };
        let decided = decide(
            &job.window,
            &mut connection,
            finish_by,
            &job.prefix,
            job.now,
            job.n,
            &waiting,
        )
        .await;
        match decided {
            Ok(decision) => Ok((decision, connection)),
            Err(error) => Err((error, connection.pending() == Pending::Nothing)),
        }
    };
    let attempt = async {
        // A pooled connection found closed (memcached restarted, or closed it while idle) is
        // replaced before anything is sent on it; one that fails before the first byte of its
        // request is written, too. Once a byte was written, never again: memcached may have
        // counted the request, and a second copy would count it twice (issue 18).
        let pooled = match pooled {
            Some(connection) if connection.closed_while_idle() => {
                backend.clear_idle_async();
                None
            }
            pooled => pooled,
        };
        let from_pool = pooled.is_some();
        match run(pooled).await {
            Err((CallError::Failed(MemcachedError::Io(_)), true)) if from_pool => {
                backend.clear_idle_async();
                // The first try wrote nothing: only the second can leave a count.
                sent.store(false, Ordering::SeqCst);
                run(None).await
            }
            other => other,
        }
    };
    let result = until_deadline(attempt, finish_by)
        .await
        .unwrap_or(Err((CallError::Timeout, false)));
    match result {
        Ok((decision, connection)) if decision.is_allowed() => {
            let held = Held { connection, place };
            if sender.is_closed() {
                // The caller is gone: its permits go back on this connection.
                give_back(held, backend, job, finish_by, reclaims).await;
                return;
            }
            // The connection and the place are no longer this call's, whether or not its
            // caller is ever polled again; pooled before the answer goes, so that a serial
            // caller's next call finds the connection.
            backend.pool_async(held.connection);
            drop(held.place);
            if sender.send(Answer::Decided(decision)).is_err() {
                // The caller went in between: its permits go back as an unread admission's.
                let deadline = later_by(Instant::now(), backend.timeout());
                give_back_unread(backend, job, deadline, reclaims).await;
            }
        }
        Ok((decision, connection)) => {
            // The denial stands whatever happens to the take-back: answered at once, with word
            // of the take-back's end, which its caller waits for until its deadline (a serial
            // caller's next request must not find the permits of its last denial); the
            // take-back runs on until `finish_by`.
            let (done, taken_back) = oneshot::channel();
            let _ = sender.send(Answer::Denied(decision, taken_back));
            let held = Held { connection, place };
            take_back_held(held, &backend, &job, finish_by, &reclaims).await;
            let _ = done.send(());
        }
        Err((error, unsent)) => {
            // Written (a byte of it, at least): memcached may count it.
            if sent.load(Ordering::SeqCst) && !unsent {
                reclaims.left_counted();
            }
            let _ = sender.send(Answer::Failed(error));
        }
    }
}

/// Takes back the permits of an admission its caller never got: `decr` of the same cell and
/// `n`, on the connection of the exchange.
async fn give_back(
    held: Held,
    backend: MemcachedBackend,
    job: Arc<Job>,
    finish_by: Instant,
    reclaims: Arc<Reclaims>,
) {
    if take_back_held(held, &backend, &job, finish_by, &reclaims).await {
        reclaims.given_back();
    }
}

/// Gives back the permits of an admission dropped unread at its caller's end: `decr` of the
/// same cell and `n` on a new connection taken with a place, as a call's, by `deadline` (the
/// backend's timeout from the drop), its exchange bounded by `deadline` plus the grace.
async fn give_back_unread(
    backend: MemcachedBackend,
    job: Arc<Job>,
    deadline: Instant,
    reclaims: Arc<Reclaims>,
) {
    let finish_by = later_by(deadline, backend.grace());
    let Ok(place) = backend.async_place(deadline).await else {
        reclaims.left_counted();
        return;
    };
    // A new connection, never a pooled one: a pooled connection memcached closed meanwhile
    // (restarted, its `idle_timeout`) fails the `decr`, and trying again on another could
    // decrement twice (the first may have landed), giving back permits handed out. The
    // give-back of an unread admission is rare; a connect is its price.
    let connection = until_deadline(AsyncConnection::open(backend.addr()), deadline)
        .await
        .ok()
        .and_then(Result::ok);
    let Some(connection) = connection else {
        reclaims.left_counted();
        drop(place);
        return;
    };
    give_back(
        Held { connection, place },
        backend,
        job,
        finish_by,
        reclaims,
    )
    .await;
}

/// `job`'s permits taken back (`decr`) on `held`'s connection by `finish_by`: the connection
/// pooled if it did, counted in `left_counted` if not; the place given back either way.
/// Returns whether the take-back landed.
async fn take_back_held(
    held: Held,
    backend: &MemcachedBackend,
    job: &Job,
    finish_by: Instant,
    reclaims: &Reclaims,
) -> bool {
    let Held {
        mut connection,
        place,
    } = held;
    let taking = take_back(&mut connection, finish_by, &job.prefix, job.cell(), job.n);
    let landed = matches!(until_deadline(taking, finish_by).await, Ok(Ok(())));
    if landed {
        backend.pool_async(connection);
    } else {
        reclaims.left_counted();
    }
    drop(place);
    landed
}
