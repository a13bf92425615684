//! The shared connection to Redis (one node, or a cluster), the server-clock offset, and the
//! one script call every decision makes.
//!
//! Async calls run on the caller's tokio runtime: the caller's task writes the request into the
//! multiplexed connection and awaits the reply, with its own timer. The `blocking_*` forms drive
//! the same future with `block_on` on a runtime the backend keeps for them.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisWrite as _, Script, Value};

use super::limiter::sealed::Replay;
use super::lua_script::LuaScript;
use super::slot_owners::{ReadAsked, ReadTarget, SlotOwners, slot_of};
use crate::backend::{
    BackendError, FailureKind, LastReply, NotSent, RequestError, ServerOffset, until_deadline,
};

/// Where the Redis backend connects, and how long a decision may take.
///
/// ```
/// use floodgate::redis::RedisConfig;
/// use std::time::Duration;
/// let single = RedisConfig::single("redis://127.0.0.1:6379").timeout(Duration::from_millis(50));
/// assert_eq!(single.get_timeout(), Duration::from_millis(50));
/// let cluster = RedisConfig::cluster(["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]);
/// assert_eq!(cluster.get_timeout(), RedisConfig::DEFAULT_TIMEOUT);
/// ```
#[derive(Clone, Debug)]
pub struct RedisConfig {
    nodes: Vec<String>,
    cluster: bool,
    timeout: Duration,
    lazy: bool,
}

impl RedisConfig {
    /// The timeout unless set: 200 ms.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(200);

    /// One Redis server (`redis://host:port/db`, `rediss://…`, `unix:///path`).
    ///
    /// ```
    /// use floodgate::redis::RedisConfig;
    /// let config = RedisConfig::single("redis://127.0.0.1:6379/0");
    /// assert_eq!(config.get_timeout(), RedisConfig::DEFAULT_TIMEOUT);
    /// ```
    pub fn single(url: impl Into<String>) -> Self {
        RedisConfig {
            nodes: vec![url.into()],
            cluster: false,
            timeout: Self::DEFAULT_TIMEOUT,
            lazy: false,
        }
    }

    /// A Redis Cluster, reached through any of its `nodes` (the rest are discovered).
    ///
    /// ```
    /// use floodgate::redis::{RedisBackend, RedisConfig};
    /// let config = RedisConfig::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]);
    /// assert_eq!(config.get_timeout(), RedisConfig::DEFAULT_TIMEOUT);
    /// // At least one node is needed to discover the rest.
    /// let none = RedisBackend::blocking_connect(RedisConfig::cluster(Vec::<String>::new()));
    /// assert!(none.is_err());
    /// ```
    pub fn cluster<S: Into<String>>(nodes: impl IntoIterator<Item = S>) -> Self {
        RedisConfig {
            nodes: nodes.into_iter().map(Into::into).collect(),
            cluster: true,
            timeout: Self::DEFAULT_TIMEOUT,
            lazy: false,
        }
    }

    /// The longest a decision may take, connecting included; past it the limiter's
    /// [`FailurePolicy`](crate::backend::FailurePolicy) decides.
    ///
    /// ```
    /// use floodgate::redis::RedisConfig;
    /// use std::time::Duration;
    /// let config = RedisConfig::single("redis://127.0.0.1:6379").timeout(Duration::from_millis(20));
    /// assert_eq!(config.get_timeout(), Duration::from_millis(20));
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The timeout in force.
    ///
    /// ```
    /// use floodgate::redis::RedisConfig;
    /// use std::time::Duration;
    /// assert_eq!(RedisConfig::single("redis://h").get_timeout(), Duration::from_millis(200));
    /// ```
    pub fn get_timeout(&self) -> Duration {
        self.timeout
    }

    /// Connect in the background instead of at [`RedisBackend::connect`]: the backend is
    /// returned at once, whether or not the server is up, and decisions fail (decided by the
    /// policy) until it answers. For a service that must start while Redis is down (with
    /// [`FailurePolicy::FailOpen`](crate::backend::FailurePolicy) or a local share). Without it
    /// (the default), `connect` fails at startup on a wrong address or a closed port.
    ///
    /// A lazy backend learns the server's clock from its first reply, so the decisions sent
    /// before that carry no deadline (see [`RedisBackend`]).
    ///
    /// ```
    /// use floodgate::redis::{RedisBackend, RedisConfig};
    /// // Nothing listens on port 1, yet the backend is made: calls fail until a server answers.
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:1").lazy())?;
    /// assert!(backend.server_offset().is_none()); // not learnt yet
    /// # Ok::<(), floodgate::backend::BackendError>(())
    /// ```
    pub fn lazy(mut self) -> Self {
        self.lazy = true;
        self
    }
}

/// A connection to Redis shared by every limiter and caller that clones it: a self-reconnecting
/// multiplexed connection to one node, or a cluster connection that follows slot moves.
/// Concurrent calls share it: redis-rs pipelines their requests on the one socket per node, and
/// each limiter coalesces its concurrent decisions into one script call (see
/// [the module](crate::redis)).
///
/// # Connecting
/// [`connect`](Self::connect) (async) builds the connection on the caller's tokio runtime, and
/// [`blocking_connect`](Self::blocking_connect) on a small runtime the backend keeps for the
/// `blocking_*` calls. Both are eager: they connect and read the server's clock (`TIME`) within
/// the timeout, so a wrong address or a closed port fails at startup with an error naming the
/// server; [`RedisConfig::lazy`] connects in the background instead.
///
/// # Deadlines on the server's clock
/// Every decision carries a deadline in the server's clock, and the script refuses, without
/// touching any state, a request that reaches it later (the caller then sees a timeout, decided
/// by the policy; or, for a try of [`try_acquire_for`](super::RedisLimiter::try_acquire_for)
/// cut short by its caller's own budget, a denial counted nowhere while the server answers:
/// while the backend has read any reply from it within the last timeout, on a cluster from the
/// master that owns the key's slot (per node: another master's replies do not count); with none
/// for a whole timeout, or none yet, such a try is decided by the policy and counted as a
/// timeout, not told to the breaker). The client learns the offset between the server's `TIME` and its own
/// monotonic clock at connect, and refreshes it from every reply (each reply carries the
/// server's time). The server read its clock after the request left and before the reply came
/// back, so each call brackets the offset: `server − received ≤ offset ≤ server − sent`. The
/// backend keeps the largest lower end, pulled down only by a later call's upper end (a server
/// clock that stepped back): a slow reply never lowers a good offset. The deadline sent is
/// `call deadline − left / 8`, `left` being the time the call has left when its request is
/// built (the whole timeout for a call sent at once; less for a decision that waited in the
/// queue for its batch, or a try of [`try_acquire_for`](super::RedisLimiter::try_acquire_for)
/// cut to the caller's own deadline), shifted by this offset: the script refuses early by at
/// most the best call's round trip, never late (but after a step back, below), and it refuses
/// at least `left / 8` before the caller gives up, so the reply of a script that ran has that
/// long to come back. A call whose deadline has passed before its request is written (its
/// future first polled late: a thread held, a runtime busy elsewhere, a try given no time)
/// sends nothing: a timeout saying "not sent", decided as any timeout (the policy, or a try's
/// own budget as above) but never told to the circuit breaker (it says nothing about Redis;
/// so too a coalesced decision whose deadline passed while it was queued), so that a lazy
/// backend before its first reply (no deadline to send) takes nothing for a caller that has
/// given up.
///
/// What can still be consumed without being handed out, per call:
/// * a future dropped after its request was written (or, queued behind other calls, after its
///   batch was taken from the queue), if the server runs the script before the deadline (a
///   future dropped before its first poll, before the request left, or while queued, sends
///   nothing);
/// * a reply that takes longer than `left / 8` to come back (a connection cut just after the
///   script ran, or a try of [`try_acquire_for`](super::RedisLimiter::try_acquire_for) given
///   about a round trip or less: its caller is denied, though the script took its permits);
/// * with a [`lazy`](RedisConfig::lazy) backend, decisions sent before the first reply, which
///   carry no deadline; and after the server's clock steps back by `d`, deadlines are late by at
///   most `d`, and by at most the way out (request to server) of the fastest call since;
/// * on a Redis Cluster ([`RedisConfig::cluster`]), a request whose connection dropped after
///   the script ran and before its reply came back: redis-rs's cluster client sends it again on
///   a new connection (up to 16 times a request), and the server decides again each copy that
///   reaches it before the deadline. A decision (each decision of a batch) takes its `n` once
///   more and its caller gets the last copy's decision; a [`LeasedKey`](super::LeasedKey)'s
///   lease request is granted once more, and the earlier grant's permits stay taken, in none
///   of its [`counts`](super::LeasedKey::counts). So at most what the request asked, per
///   connection dropped that way while it was out; a copy that reaches the server after the
///   deadline takes nothing. A lease's refund lands at most once (each carries a mark, see
///   [`LeasedKey`](super::LeasedKey)). One server ([`RedisConfig::single`]) does not re-send:
///   the caller gets the connection's error (decided by the policy) and what the script took
///   stays taken, as in the points above.
///
/// The async calls need a tokio runtime (with time enabled); the connection's background task,
/// and the tasks that send the decisions each limiter coalesces, live on the runtime that built
/// it, so keep that runtime alive, and driven, as long as the backend (with `connect` on a
/// current-thread runtime, that means its thread keeps running it).
///
/// ```no_run
/// use floodgate::redis::{RedisBackend, RedisConfig};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), floodgate::backend::BackendError> {
/// let backend = RedisBackend::connect(RedisConfig::single("redis://127.0.0.1:6379")).await?;
/// let same_sockets = backend.clone();
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisBackend {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// What each call takes its own handle on ([`SharedConnection::get`]).
    connection: SharedConnection,
    timeout: Duration,
    /// The configured address(es), passwords redacted, for error messages.
    server: Arc<str>,
    clock: ServerClock,
    /// When the server last sent any reply, on `clock`'s client side: whether a call its
    /// caller's own deadline cut short met a server that answers (see
    /// [`RedisBackend::answered_within_timeout`]). On a cluster, any node's reply: read only
    /// for a key whose slot's owner `owners` does not know (each master there keeps its own).
    last_reply: LastReply,
    /// A cluster's slot owners as last read, to name the node a failed call went to (empty for
    /// one server).
    owners: Arc<SlotOwners>,
    /// A cluster's own connection for the background reads of `owners` (`None` for one
    /// server).
    map_reader: Option<Arc<MapReader>>,
    /// The script loads in flight, shared by concurrent `NOSCRIPT` replies.
    loads: ScriptLoads,
    /// The scheme the owners' addresses are written with: the first node's ([`owner_scheme`]).
    scheme: &'static str,
    /// What drives the `blocking_*` calls: the backend's own runtime, or the caller's
    /// multi-thread runtime that `connect` ran on; `None` for a current-thread runtime.
    blocking: Option<BlockingRuntime>,
    /// The runtime that built the connection (the caller's for `connect`, the backend's own
    /// for `blocking_connect`), where the connection's driver task runs: the coalescing
    /// flushers run there too, so they are exactly as alive as the connection (never on some
    /// caller's runtime that nothing drives any more).
    runtime: tokio::runtime::Handle,
}

#[derive(Debug)]
enum BlockingRuntime {
    Own(OwnRuntime),
    /// The caller's runtime, and word of whether it still runs ([`BlockingRuntime::borrowed`]).
    Borrowed {
        handle: tokio::runtime::Handle,
        /// Upgradable while a task of the runtime's holds its `Arc`: a runtime that shut down
        /// dropped it (as every task of its).
        alive: std::sync::Weak<()>,
        /// Dropped with the backend, ending that task (it outlives no backend).
        _ends: tokio::sync::oneshot::Sender<()>,
    },
}

impl BlockingRuntime {
    /// The caller's multi-thread runtime, with a task on it that only waits, holding the `Arc`
    /// of `alive`, for the backend's drop: its runtime's shutdown drops it, so a blocking call
    /// made after that finds out (a `block_on` on a runtime that shut down runs the call with
    /// the runtime's timers gone: redis-rs's reconnect series panicked at its first timer,
    /// "A Tokio 1.x context was found, but it is being shutdown", issue 18).
    fn borrowed(handle: tokio::runtime::Handle) -> Self {
        let held = Arc::new(());
        let alive = Arc::downgrade(&held);
        let (ends, ended) = tokio::sync::oneshot::channel::<()>();
        // The task runs on even if its handle is dropped.
        drop(handle.spawn(async move {
            let _held = held;
            let _ = ended.await;
        }));
        BlockingRuntime::Borrowed {
            handle,
            alive,
            _ends: ends,
        }
    }
}

/// A one-node or cluster connection, as one [`ConnectionLike`]: a call's own handle
/// ([`SharedConnection::get`]). A single server's carries the generation of its manager
/// ([`SingleServer`]), so that a call that found it stuck replaces that one only.
#[derive(Clone)]
enum Connection {
    Single(ConnectionManager, u64),
    Cluster(ClusterConnection),
}

/// The backend's connection, from which each call takes its own handle.
enum SharedConnection {
    Single(SingleServer),
    Cluster(ClusterConnection),
}

impl SharedConnection {
    /// A call's handle on the connection: the single server's current manager, or the cluster's.
    fn get(&self) -> Connection {
        match self {
            // The first manager as long as none replaced it: a plain load on the hot path (an
            // `ArcSwap` load measured about 110 instructions a decision more, issue 18). A call
            // that reads `false` just after a replacement sends on the stuck manager, gets its
            // kept error at once and finds the replacement in `replace` (generation 0 is old).
            SharedConnection::Single(single) if !single.replaced.load(Ordering::SeqCst) => {
                Connection::Single(single.first.clone(), 0)
            }
            SharedConnection::Single(single) => {
                let current = single.current.load();
                Connection::Single(current.manager.clone(), current.generation)
            }
            SharedConnection::Cluster(cluster) => Connection::Cluster(cluster.clone()),
        }
    }
}

/// A single server's connection manager, replaced by a fresh one when a finished reconnect
/// series left it stuck ([`Stale::Replace`]).
struct SingleServer {
    /// The manager built at connect (generation 0), used while `replaced` is `false`.
    first: ConnectionManager,
    /// Whether `current` holds a replacement of `first`.
    replaced: AtomicBool,
    current: arc_swap::ArcSwap<Manager>,
    /// What a fresh manager is built from: the backend's client and timeout.
    client: redis::Client,
    timeout: Duration,
}

/// A single server's connection manager and its generation (0 for the first; one more for
/// each replacement).
struct Manager {
    manager: ConnectionManager,
    generation: u64,
    /// When it was made: one made by a replacement is not replaced again before
    /// [`REPLACED_KEPT_AT_LEAST`] has passed.
    made: Instant,
}

/// The least time a manager made by a replacement ([`SingleServer::replace`]) is kept before it
/// may be replaced in turn: at most one replacement a second, after the first. A wrong password
/// (a configuration error, never recovered from) would otherwise make each call that finds
/// the last series over build a manager and run a series of its own (five connections and
/// `AUTH`s), every call; within the second, such a call fails at once on the kept error, as
/// redis-rs would have it (issue 18). The manager made at connect may be replaced at any time:
/// the first `AUTH` refusal's replacement is never held back.
const REPLACED_KEPT_AT_LEAST: Duration = Duration::from_secs(1);

impl SingleServer {
    fn new(client: redis::Client, manager: ConnectionManager, timeout: Duration) -> Self {
        SingleServer {
            first: manager.clone(),
            replaced: AtomicBool::new(false),
            current: arc_swap::ArcSwap::from_pointee(Manager {
                manager,
                generation: 0,
                made: Instant::now(),
            }),
            client,
            timeout,
        }
    }

    /// Replaces the manager of `generation`, stuck on a finished series' error, with a fresh
    /// one built on `runtime` (its tasks live there), unless another call replaced it first;
    /// returns a handle on the current manager, or `None` if no fresh one could be built or
    /// the stuck one was itself made by a replacement less than [`REPLACED_KEPT_AT_LEAST`]
    /// before `now` (the call then fails on its kept error). Lazy: the fresh manager connects
    /// (a series of its own) when the call sent on it polls.
    fn replace(
        &self,
        generation: u64,
        runtime: &tokio::runtime::Handle,
        now: Instant,
    ) -> Option<Connection> {
        let current = self.current.load();
        if current.generation == generation {
            if generation > 0
                && now.saturating_duration_since(current.made) < REPLACED_KEPT_AT_LEAST
            {
                return None;
            }
            let _on = runtime.enter();
            let fresh = ConnectionManager::new_lazy_with_config(
                self.client.clone(),
                manager_config(self.timeout),
            )
            .ok()?;
            // Only over the stuck one: of two calls that found it stuck, the first replaces it
            // and the second sends on that replacement.
            self.current.compare_and_swap(
                &current,
                Arc::new(Manager {
                    manager: fresh,
                    generation: generation + 1,
                    made: now,
                }),
            );
            // SeqCst: a flag read by `SharedConnection::get`; stored after `current` holds the
            // replacement (any store of it does).
            self.replaced.store(true, Ordering::SeqCst);
        }
        let now = self.current.load();
        Some(Connection::Single(now.manager.clone(), now.generation))
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Connection::Single(..) => "Connection::Single",
            Connection::Cluster(_) => "Connection::Cluster",
        })
    }
}

impl std::fmt::Debug for SharedConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SharedConnection::Single(_) => "SharedConnection::Single",
            SharedConnection::Cluster(_) => "SharedConnection::Cluster",
        })
    }
}

/// Awaits `call`, with whether it was ready at its first poll. Pinned in the caller's own
/// future: no allocation.
async fn ready_at_once<T>(
    call: impl Future<Output = redis::RedisResult<T>>,
) -> (redis::RedisResult<T>, bool) {
    let mut call = std::pin::pin!(call);
    let mut polls = 0u32;
    let result = std::future::poll_fn(|cx| {
        polls += 1;
        call.as_mut().poll(cx)
    })
    .await;
    (result, polls == 1)
}

/// What a single server's call that failed on a finished reconnect series' kept error calls
/// for ([`stale_connection_error`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stale {
    /// Sent once more on the same manager: handing the error over started a new series
    /// (redis-rs does so for an I/O error), which the resend waits for.
    Resend,
    /// Sent once more on a fresh manager ([`SingleServer::replace`]): redis-rs starts no new
    /// series after a non-I/O error, and would hand the kept one to every later call.
    Replace,
}

/// Whether a single server's call failed on a reconnect series that had already ended before
/// it was made, and so was never sent, and what it calls for ([`Stale`]); `None` for any other
/// failure. The connection manager keeps a failed series' error and hands it to the next call
/// at once: after an outage during which no call was made (the circuit breaker open), the
/// breaker's probe got the error of the series the last call started, however long ago,
/// though the server was back, and the breaker opened again for a doubled back-off (issue 18).
/// Such a call never reached the server (the manager had no connection to send it on), so it
/// is sent once more, and waits, within its deadline, for a series of its own. A call that
/// waited for a series (pending at its first poll) gets that series' error, which is news,
/// and is not sent again.
///
/// Only errors that a series can end with and that a request on a live connection never gets
/// at its first poll (read against redis-rs 1.2.2; a series is `connect`, then the handshake,
/// `AUTH`/`HELLO` and `SELECT`, `CLIENT SETINFO`'s replies ignored):
/// * [`Stale::Resend`]: a refused connection; a connection timeout (no request on a live
///   connection times out at once: redis-rs has no response timeout here, and a socket's own
///   timeout comes after minutes of retransmissions, to the oldest request in flight); a host
///   name that did not resolve (std's "failed to lookup address information", the text of a
///   failed `getaddrinfo`: a name is looked up only to connect).
/// * [`Stale::Replace`]: `AuthenticationFailed` (the handshake's `AUTH` or `HELLO` refused: a
///   server restarted without its password, its ACLs not yet loaded) and `InvalidClientConfig`
///   (a name that resolved to no address): only a connection attempt has them.
///
/// Not: a `LOADING` error (`BusyLoading`) or any other server error, a reset or an end of
/// stream, a closed driver (`BrokenPipe`, a connection whose runtime was dropped), a parse
/// error. A server error is a reply: Redis accepts `AUTH`, `HELLO` and `SELECT` while it
/// loads, so a series never ends on `LOADING`, which comes only as the reply to the call
/// itself (the server up, not running it yet: news for the breaker, and a resend would be
/// answered the same). The others also arise on a live connection, where in a race the
/// driver may have written the request and failed within the caller's first poll, so
/// resending them on their kind alone could count a decision twice.
fn stale_connection_error<T>(result: &redis::RedisResult<T>, at_once: bool) -> Option<Stale> {
    let error = result.as_ref().err().filter(|_| at_once)?;
    match error.kind() {
        ErrorKind::AuthenticationFailed | ErrorKind::InvalidClientConfig => Some(Stale::Replace),
        ErrorKind::Io
            if error.is_connection_refusal()
                || error.is_timeout()
                || error
                    .to_string()
                    .contains("failed to lookup address information") =>
        {
            Some(Stale::Resend)
        }
        _ => None,
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(c, _) => c.req_packed_command(cmd),
            Connection::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(c, _) => c.req_packed_commands(cmd, offset, count),
            Connection::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(c, _) => c.get_db(),
            Connection::Cluster(c) => c.get_db(),
        }
    }
}

/// The backend's runtime for `blocking_*` calls. Shut down in the background on drop, so
/// dropping the last backend inside some other async runtime neither blocks nor panics.
#[derive(Debug)]
struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// The server's clock as seen from here: a monotonic origin for the client's side, and the
/// offset learnt from samples ([`ServerOffset`]).
#[derive(Debug)]
struct ServerClock {
    base: Instant,
    offset: ServerOffset,
}

impl ServerClock {
    fn new() -> Self {
        ServerClock {
            base: Instant::now(),
            offset: ServerOffset::new(),
        }
    }

    fn client_micros(&self, at: Instant) -> u64 {
        micros_since(self.base, at)
    }

    /// Records `server_micros`, read by the server after a request sent at `sent` and before its
    /// reply arrived at `received_micros` (its [`client_micros`](Self::client_micros)).
    fn sample(&self, server_micros: i64, sent: Instant, received_micros: u64) {
        if let Ok(server) = u64::try_from(server_micros) {
            self.offset
                .sample(server, self.client_micros(sent), received_micros);
        }
    }

    /// `at` on the server's clock, in µs since the epoch (0, "no deadline", while unknown).
    fn server_micros(&self, at: Instant) -> u64 {
        self.offset.offset().map_or(0, |offset| {
            offset.saturating_add(self.client_micros(at)).max(1)
        })
    }
}

impl RedisBackend {
    /// A backend for `config`, connected on the caller's tokio runtime: connects and reads the
    /// server's clock within the timeout (unless [`RedisConfig::lazy`]). The connection's
    /// background task, and the tasks that send coalesced decisions, run on this runtime.
    ///
    /// # Errors
    /// A [`BackendError`] naming the server (password redacted) for an invalid URL, an empty
    /// node list, a timeout of zero or over an hour, no tokio runtime, and (eager only) a server
    /// that refuses the connection or does not answer within the timeout
    /// ([`BackendError::kind`] says which), or whose cluster mode does not match the
    /// configuration ([`FailureKind::Other`]): [`RedisConfig::cluster`] at a server with cluster
    /// mode off ("not in cluster mode"), or [`RedisConfig::single`] at a cluster node
    /// (`INFO cluster` says `cluster_enabled:1`). A lazy single-server backend at a cluster node
    /// fails each call for a key on another master with the same kind, naming the node that
    /// owns the key's slot; a lazy cluster backend at a standalone server knows no slot's
    /// owner, and redis-rs sends each call to the one node it reached, which decides it.
    ///
    /// ```
    /// use floodgate::backend::FailureKind;
    /// use floodgate::redis::{RedisBackend, RedisConfig};
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// // Nothing listens on port 1: eager connecting fails now, naming the server.
    /// let refused = RedisBackend::connect(RedisConfig::single("redis://127.0.0.1:1")).await.unwrap_err();
    /// assert_eq!(refused.kind(), FailureKind::Refused);
    /// assert!(refused.to_string().contains("redis://127.0.0.1:1"), "{refused}");
    /// let bad = RedisBackend::connect(RedisConfig::single("not a url")).await.unwrap_err();
    /// assert!(bad.to_string().contains("\"not a url\"")); // names the URL, and redis's reason
    /// let secret = RedisConfig::single("rediss://u:hunter2@h:x");
    /// let secret = RedisBackend::connect(secret).await.unwrap_err();
    /// assert!(!secret.to_string().contains("hunter2")); // a password is never shown
    /// # }
    /// ```
    pub async fn connect(config: RedisConfig) -> Result<Self, BackendError> {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return Err(BackendError::failed(std::io::Error::other(
                "RedisBackend::connect needs a tokio runtime; outside one, use blocking_connect",
            )));
        };
        let blocking = match handle.runtime_flavor() {
            tokio::runtime::RuntimeFlavor::MultiThread => Some(BlockingRuntime::borrowed(handle)),
            _ => None,
        };
        Self::connect_on(config, blocking).await
    }

    /// A backend for `config` with its own small runtime (one worker thread) for the
    /// `blocking_*` calls, connected on it (eagerly unless [`RedisConfig::lazy`]). Its async
    /// calls work too, from any tokio runtime.
    ///
    /// # Errors
    /// As [`connect`](Self::connect); also when called inside a tokio runtime (use `connect`
    /// there), or when the runtime cannot start.
    ///
    /// ```
    /// use floodgate::redis::{RedisBackend, RedisConfig};
    /// use std::time::Duration;
    /// let config = RedisConfig::single("redis://127.0.0.1:1").timeout(Duration::from_millis(50));
    /// let refused = RedisBackend::blocking_connect(config).unwrap_err();
    /// assert!(refused.to_string().starts_with("connection refused at redis://127.0.0.1:1"), "{refused}");
    /// ```
    pub fn blocking_connect(config: RedisConfig) -> Result<Self, BackendError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(BackendError::failed(std::io::Error::other(
                "RedisBackend::blocking_connect called inside a tokio runtime: \
                 use RedisBackend::connect(config).await",
            )));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("floodgate-redis")
            .enable_all()
            .build()
            .map_err(BackendError::failed)?;
        let own = OwnRuntime(Some(runtime));
        let Some(runtime) = own.0.as_ref() else {
            unreachable!("set just above")
        };
        // Connect on a task of the runtime, so the connection's driver is spawned there.
        let task = runtime.spawn(Self::connect_on(config, None));
        let shared = match runtime.block_on(task) {
            Ok(Ok(backend)) => backend.shared,
            Ok(Err(error)) => return Err(error),
            Err(join) => return Err(BackendError::failed(join)),
        };
        let mut shared = Arc::into_inner(shared).expect("not shared yet");
        shared.blocking = Some(BlockingRuntime::Own(own));
        Ok(RedisBackend {
            shared: Arc::new(shared),
        })
    }

    async fn connect_on(
        config: RedisConfig,
        blocking: Option<BlockingRuntime>,
    ) -> Result<Self, BackendError> {
        crate::backend::validate_timeout(config.timeout)?;
        if config.nodes.is_empty() {
            return Err(BackendError::failed(std::io::Error::other(
                "no Redis node given",
            )));
        }
        let timeout = config.timeout;
        let server: Arc<str> = config
            .nodes
            .iter()
            .map(|n| redact(n))
            .collect::<Vec<_>>()
            .join(", ")
            .into();
        let started = Instant::now();
        let connecting = async {
            if config.cluster {
                let client = ClusterClient::builder(config.nodes.clone())
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()
                    .map_err(|error| bad_url(&config.nodes, &error))?;
                let cluster_config = ClusterConfig::new()
                    .set_connection_timeout(timeout)
                    .set_response_timeout(timeout);
                if config.lazy {
                    Ok(SharedConnection::Cluster(
                        client.get_pending_async_connection_with_config(cluster_config),
                    ))
                } else {
                    client
                        .get_async_connection_with_config(cluster_config)
                        .await
                        .map(SharedConnection::Cluster)
                        .map_err(|error| classify(&server, true, error))
                }
            } else {
                let client = redis::Client::open(config.nodes[0].as_str())
                    .map_err(|error| bad_url(&config.nodes[..1], &error))?;
                let manager_config = manager_config(timeout);
                let single = |manager| {
                    SharedConnection::Single(SingleServer::new(client.clone(), manager, timeout))
                };
                if config.lazy {
                    ConnectionManager::new_lazy_with_config(client.clone(), manager_config)
                        .map(single)
                        .map_err(|error| classify(&server, false, error))
                } else {
                    // One plain attempt first: the manager retries with back-off, which would
                    // turn a refused connection into a timeout.
                    let probe = redis::AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout));
                    client
                        .get_multiplexed_async_connection_with_config(&probe)
                        .await
                        .map_err(|error| classify(&server, false, error))?;
                    ConnectionManager::new_with_config(client.clone(), manager_config)
                        .await
                        .map(single)
                        .map_err(|error| classify(&server, false, error))
                }
            }
        };
        let connection = match until_deadline(connecting, started + timeout).await {
            Ok(connection) => connection?,
            Err(_) => return Err(timed_out(&server, timeout, "connecting")),
        };
        let backend = RedisBackend {
            shared: Arc::new(Shared {
                connection,
                timeout,
                server,
                clock: ServerClock::new(),
                last_reply: LastReply::default(),
                owners: Arc::default(),
                map_reader: config
                    .cluster
                    .then(|| MapReader::new(&config.nodes))
                    .flatten()
                    .map(Arc::new),
                loads: ScriptLoads::default(),
                scheme: owner_scheme(&config.nodes[0]),
                blocking,
                // `connect_on` runs on the runtime that builds the connection.
                runtime: tokio::runtime::Handle::current(),
            }),
        };
        if !config.lazy {
            let left = timeout.saturating_sub(started.elapsed());
            backend.read_server_clock(left).await?;
            let left = timeout.saturating_sub(started.elapsed());
            if config.cluster {
                backend.read_slot_owners(left).await;
            } else {
                backend.refuse_a_cluster_node(left).await?;
            }
        }
        Ok(backend)
    }

    /// `TIME`, within `within`: one offset sample.
    async fn read_server_clock(&self, within: Duration) -> Result<(), BackendError> {
        let mut connection = self.shared.connection.get();
        let time = redis::cmd("TIME");
        let sent = Instant::now();
        let reply = time.query_async::<(i64, i64)>(&mut connection);
        match until_deadline(reply, sent + within).await {
            Ok(Ok((seconds, micros))) => {
                let server = seconds.saturating_mul(1_000_000).saturating_add(micros);
                let received = self.replied(sent, Instant::now(), None);
                self.shared.clock.sample(server, sent, received);
                Ok(())
            }
            Ok(Err(error)) => {
                self.replied_with(&error, None, sent);
                Err(self.classify(error))
            }
            Err(_) => Err(timed_out(
                &self.shared.server,
                self.shared.timeout,
                "reading its clock",
            )),
        }
    }

    /// Eager single-server connect: refuses a Redis Cluster node (`INFO cluster` says
    /// `cluster_enabled:1`), which would answer each decision for a key of another master's
    /// slots with a `MOVED` error. A server whose `INFO` fails (a renamed or forbidden command)
    /// is taken as it is.
    async fn refuse_a_cluster_node(&self, within: Duration) -> Result<(), BackendError> {
        let mut connection = self.shared.connection.get();
        let info = redis::cmd("INFO").arg("cluster").to_owned();
        let reply = info.query_async::<String>(&mut connection);
        match until_deadline(reply, Instant::now() + within).await {
            Ok(Ok(info)) if info.lines().any(|l| l.trim() == "cluster_enabled:1") => {
                Err(BackendError::at(
                    FailureKind::Other,
                    self.shared.server.clone(),
                    std::io::Error::other(
                        "the server is a Redis Cluster node (INFO: cluster_enabled:1), and a \
                         single-server connection gets MOVED for every key on another master's \
                         slots: use RedisConfig::cluster",
                    ),
                ))
            }
            Ok(_) => Ok(()),
            Err(_) => Err(timed_out(
                &self.shared.server,
                self.shared.timeout,
                "checking its cluster mode",
            )),
        }
    }

    /// A redis-rs error of a call on this backend's connection, classified, naming the server.
    fn classify(&self, error: RedisError) -> BackendError {
        classify(&self.shared.server, self.is_cluster(), error)
    }

    /// Reads a cluster's slot owners (`CLUSTER SLOTS`, to whichever node redis-rs picks) within
    /// `within`, for naming the node of a failed call; a failed or late read changes nothing.
    async fn read_slot_owners(&self, within: Duration) {
        // The map read is at least as recent as this instant (see `SlotOwners::update`).
        let asked = self.shared.clock.client_micros(Instant::now());
        let reply = read_slot_owners(self.shared.connection.get(), within).await;
        if let Some(reply) = reply {
            self.shared.owners.update(&reply, self.shared.scheme, asked);
        }
    }

    /// On a cluster, starts a read of the slot owners in the background, unless one is in
    /// flight or one started less than the backend's timeout ago: after a failed call (see
    /// [`failed_at`](Self::failed_at)), for a call short-circuited by its node's open
    /// breaker, which sends nothing that could fail, so that a slot moved off a down master is
    /// soon looked up under its new owner (whose breaker is its own), and for a reply to a
    /// call sent [`fresh_micros`](Self::fresh_micros) or more after the last read
    /// ([`master_replied`](Self::master_replied); a reply while the copy names no master asks
    /// too, at most once per `fresh_micros`: [`reread_slot_owners_every`](Self::reread_slot_owners_every)).
    pub(crate) fn reread_slot_owners(&self) {
        self.reread_slot_owners_every(self.shared.timeout);
    }

    /// [`reread_slot_owners`](Self::reread_slot_owners), unless one started less than `every`
    /// ago: the timeout, or for a reply while the copy names no master
    /// ([`master_replied`](Self::master_replied)), the [`fresh_micros`](Self::fresh_micros)
    /// interval.
    fn reread_slot_owners_every(&self, every: Duration) {
        let shared = &*self.shared;
        if !self.is_cluster() {
            return;
        }
        let Some(reader) = &shared.map_reader else {
            return;
        };
        if let Some(read) = shared.owners.start_read(Instant::now(), every) {
            let (reader, owners, scheme, base) = (
                Arc::clone(reader),
                Arc::clone(&shared.owners),
                shared.scheme,
                shared.clock.base,
            );
            let within = self.map_read_budget();
            // The fallback of a try the reader's own connection was refused on (`try_read`).
            let cluster = match shared.connection.get() {
                Connection::Cluster(cluster) => Some(cluster),
                Connection::Single(..) => None,
            };
            // `read` moves into the task: dropped when the read ends, or with the task if its
            // runtime goes first, so the next read can start either way.
            shared.runtime.spawn(async move {
                let map = Read {
                    reader: &reader,
                    owners: &owners,
                    cluster,
                    scheme,
                    base,
                    within,
                };
                reread(&map).await;
                drop(read);
            });
        }
    }

    /// The node a call on `redis_key` goes to, as the breaker knows it: on a cluster, the
    /// owner of its slot in the backend's copy of the slot map (`None` while not known); `None`
    /// for one server (its calls share one breaker).
    pub(crate) fn node_of(&self, redis_key: &str) -> Option<Arc<str>> {
        if !self.is_cluster() {
            return None;
        }
        self.shared.owners.owner(slot_of(redis_key.as_bytes()))
    }

    /// Drops from `breakers` the nodes the backend's copy of the slot map no longer names (a
    /// master failed over, its slots all moved), once per read of the map: no call goes to
    /// them, so an open breaker of theirs would never be probed. On one server, nothing.
    pub(crate) fn drop_unnamed_nodes<C: crate::clock::Clock>(
        &self,
        breakers: &crate::backend::NodeBreakers<C>,
    ) {
        if !self.is_cluster() {
            return;
        }
        let owners = &self.shared.owners;
        breakers.drop_unnamed(owners.generation(), || {
            let named = owners.named();
            move |node: &str| named.contains(node)
        });
    }

    /// The server to name in the error of a call on `keys` that failed: one server's address;
    /// on a cluster, the owner of the keys' slot as last read (see
    /// [`slot_owners`](super::slot_owners)), or, when not known, the configured nodes and a
    /// word that the node is not known. On a cluster it also starts a read of the slot owners
    /// in the background, unless one is in flight or one started less than the backend's
    /// timeout ago, so a moved slot is named after the next failure past that.
    pub(crate) fn failed_at(&self, keys: &[String]) -> Arc<str> {
        let shared = &*self.shared;
        if !self.is_cluster() {
            return shared.server.clone();
        }
        self.reread_slot_owners();
        let Some(key) = keys.first() else {
            return shared.server.clone();
        };
        let slot = slot_of(key.as_bytes());
        shared.owners.owner(slot).unwrap_or_else(|| {
            format!(
                "{} (a node of this cluster: the owner of slot {slot} is not known)",
                shared.server
            )
            .into()
        })
    }

    /// The longest a decision may take.
    ///
    /// ```
    /// use floodgate::redis::{RedisBackend, RedisConfig};
    /// use std::time::Duration;
    /// let config = RedisConfig::single("redis://127.0.0.1:6379").timeout(Duration::from_millis(75));
    /// let backend = RedisBackend::blocking_connect(config.lazy())?; // lazy: no server needed yet
    /// assert_eq!(backend.timeout(), Duration::from_millis(75));
    /// # Ok::<(), floodgate::backend::BackendError>(())
    /// ```
    pub fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    /// The server's address as configured (the nodes, for a cluster), passwords redacted: the
    /// name its errors carry, but for a cluster call's error, which names the node that owns
    /// the call's key's slot when the backend knows it (its copy of the slot map, read with
    /// `CLUSTER SLOTS` at eager connect and again in the background after a failed call; after
    /// a slot moved, the old owner until that read lands), else these nodes and a word that
    /// the owner is not known.
    ///
    /// ```
    /// use floodgate::redis::{RedisBackend, RedisConfig};
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://u:pw@127.0.0.1:1").lazy())?;
    /// assert_eq!(backend.server(), "redis://u:***@127.0.0.1:1");
    /// # Ok::<(), floodgate::backend::BackendError>(())
    /// ```
    pub fn server(&self) -> &str {
        &self.shared.server
    }

    /// The offset learnt between the server's clock and this process's (`server − client`,
    /// the client's side read as time since the backend was made), or `None` before the first
    /// sample. It falls short of the true offset by at most the round trip of the best call,
    /// and exceeds it only after the server's clock stepped back (see [`RedisBackend`]).
    ///
    /// ```
    /// use floodgate::redis::{RedisBackend, RedisConfig};
    /// let backend = RedisBackend::blocking_connect(RedisConfig::single("redis://127.0.0.1:1").lazy())?;
    /// assert_eq!(backend.server_offset(), None); // lazy, and no reply yet
    /// # Ok::<(), floodgate::backend::BackendError>(())
    /// ```
    pub fn server_offset(&self) -> Option<Duration> {
        self.shared.clock.offset.offset().map(Duration::from_micros)
    }

    /// Runs `future` to completion for a `blocking_*` call.
    pub(crate) fn block_on<F: std::future::Future>(
        &self,
        future: F,
    ) -> Result<F::Output, RequestError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(RequestError::Runtime(
                "a blocking_* call inside a tokio runtime would block (or deadlock) it: \
                 await the async form instead",
            ));
        }
        match &self.shared.blocking {
            Some(BlockingRuntime::Own(own)) => match own.0.as_ref() {
                Some(runtime) => Ok(runtime.block_on(future)),
                None => unreachable!("taken only on drop"),
            },
            Some(BlockingRuntime::Borrowed { handle, alive, .. }) => {
                if alive.strong_count() == 0 {
                    return Err(RequestError::Runtime(
                        "the tokio runtime this RedisBackend was connected on has shut down, \
                         and its connection and timers with it: connect a new backend (or use \
                         RedisBackend::blocking_connect, whose runtime lives as long as it)",
                    ));
                }
                Ok(handle.block_on(future))
            }
            None => Err(RequestError::Runtime(
                "this RedisBackend was connected on a current-thread runtime, which no other \
                 thread can drive: use RedisBackend::blocking_connect for blocking_* calls",
            )),
        }
    }

    /// The runtime that built the connection, where its driver task runs (see `Shared`).
    pub(crate) fn runtime(&self) -> &tokio::runtime::Handle {
        &self.shared.runtime
    }

    /// Whether this is a Redis Cluster connection (a script call's keys must share a slot).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.shared.connection, SharedConnection::Cluster(_))
    }

    /// The deadline sent to the server, at `now`, for a call that gives up at `deadline`: the
    /// script must refuse at least a eighth of what is left before the caller gives up (see the
    /// type's docs), shifted to the server's clock (0, "none", while its offset is unknown).
    fn server_deadline(&self, deadline: Instant, now: Instant) -> u64 {
        let budget = deadline.saturating_duration_since(now);
        self.shared
            .clock
            .server_micros(deadline.checked_sub(budget / 8).unwrap_or(now))
    }

    /// Records that the server replied at `received` (a reply of any kind, an error reply
    /// too) to a call on `key` sent at `sent` (`None`: a call on no key, such as `TIME`): one
    /// store ([`LastReply`]); on a cluster, a second one as the reply of the master that owns
    /// `key`'s slot in the backend's copy of the slot map, if it knows one, as of `sent`
    /// ([`master_replied`](Self::master_replied)). Returns `received` in the clock's client µs
    /// (for the offset's sample).
    #[inline]
    fn replied(&self, sent: Instant, received: Instant, key: Option<&str>) -> u64 {
        let shared = &*self.shared;
        let micros = shared.clock.client_micros(received);
        shared.last_reply.record(micros);
        if let Some(key) = key.filter(|_| self.is_cluster()) {
            self.master_replied(key, sent, micros);
        }
        micros
    }

    /// On a cluster, records a reply to a call on `key` sent at `sent` as a reply of the master
    /// that owns its slot (if the copy of the slot map knows it), as of `sent`: never later
    /// than a reply that master sent itself. redis-rs does not say which node a reply came
    /// from, and follows redirects unseen: after an `ASK` (the key's slot half-migrated, the key
    /// not on its owner) the reply that arrives is the importing master's, which can come long
    /// after the owner answered (the owner frozen or gone since). The owner did answer, though
    /// (the `ASK`), after the call was sent: so the call counts as its reply as of the instant it
    /// was sent, not as of the importing master's reply (which made a frozen owner look alive
    /// for a timeout past it, issue 18).
    ///
    /// A reply that redis-rs routed as the copy does not (a slot moved since the copy was
    /// read: redis-rs follows the old owner's `MOVED`, then sends the slot's calls to the new
    /// owner) would count as the copy's owner's for as long as the copy is not read again, and
    /// only a failed, cut short or short-circuited call read it again: a frozen old owner looked alive while calls on the
    /// moved slot came (issue 18). So a reply counts as the copy's owner's only for a call sent
    /// less than [`fresh_micros`](Self::fresh_micros) plus a timeout after the read that made
    /// the copy was sent, and a reply to a call sent `fresh_micros` or more after it starts a
    /// new read in the background ([`reread_slot_owners`](Self::reread_slot_owners), each try
    /// bounded by [`map_read_budget`](Self::map_read_budget), so it lands before replies stop
    /// counting unless it fails or takes more than a timeout): while calls
    /// come, the map is read about once per `fresh_micros`, and the old owner of a moved slot
    /// gets no time later than `fresh_micros` plus a timeout after the last read that named
    /// it. A reply the copy was too old for counts later, as of `sent`, if a read sent after
    /// it arrived names the same master the owner of its slot (`SlotOwners::owner_replied`;
    /// the latest-sent such reply per master): so a master whose calls come further apart than
    /// that is not taken for silent for want of a fresh copy. A read that fails (the node it
    /// went to down) leaves those replies uncounted until one lands: the masters look silent
    /// sooner, never alive longer. Reads go to the masters that answered last ([`reread`]):
    /// a master that does not answer makes a bounded number of them fail.
    ///
    /// `sent` is read before the call is handed to redis-rs, so before its own waits (its
    /// queue, a reconnect and re-send, a redirect followed, a `TRYAGAIN` back-off) and the
    /// `NOSCRIPT` load and re-send ([`query_script`]): the time credited is earlier than the
    /// real send, by at most the call's whole span (each call is bounded by its deadline,
    /// `until_deadline`). That never makes a master look alive longer: a reply the master
    /// sent for the call came after the real send, so after `sent`; a reply another node sent
    /// (a redirect, or a re-send that redis-rs routed by a newer map than the copy) is
    /// credited only under the freshness rule above, which compares this same `sent`, so the
    /// old owner's word still gets no time later than `fresh_micros` plus a timeout after the
    /// read. It only makes a master that answers slowly look silent sooner (by up to the
    /// call's span, e.g. 2 s for a call that the importing master held 2 s after an `ASK`:
    /// `a_reply_after_an_ask_redirect_counts_for_the_owner_only_as_of_the_call`).
    ///
    /// A later time already recorded is kept ([`LastReply::record_if_later`]): a slow call's
    /// send instant does not hide a quicker call's. Not inlined: so that
    /// [`replied`](Self::replied) stays small enough to be inlined where a single server's
    /// reply is read (measured: with this inlined into it, `replied` was called, not inlined,
    /// ~26 instructions a decision more on one server).
    #[inline(never)]
    fn master_replied(&self, key: &str, sent: Instant, received_micros: u64) {
        let shared = &*self.shared;
        let slot = slot_of(key.as_bytes());
        let micros = shared.clock.client_micros(sent);
        let (fresh, slack) = (self.fresh_micros(), micros_of(shared.timeout));
        let asked = shared
            .owners
            .owner_replied(slot, micros, received_micros, fresh, slack);
        // One test, as of the `bool` this was (measured: telling the three apart here, or
        // looking at the copy for a slot with no owner in `owner_replied`, cost every reply an
        // instruction more).
        if asked != ReadAsked::No {
            self.reread_asked(asked);
        }
    }

    /// A read of the slot map asked for by a reply ([`master_replied`](Self::master_replied)):
    /// at most one started per timeout for a copy too old for the call, and, for a call on a
    /// slot the copy has no owner for, one per [`fresh_micros`](Self::fresh_micros) if the
    /// copy names no master at all (no read landed yet).
    #[inline(never)]
    fn reread_asked(&self, asked: ReadAsked) {
        match asked {
            ReadAsked::No => {}
            ReadAsked::CopyOld => self.reread_slot_owners(),
            ReadAsked::NoOwner => {
                if self.shared.owners.names_no_master() {
                    self.reread_slot_owners_every(self.map_read_budget());
                }
            }
        }
    }

    /// How long after a read of the slot map a call's reply asks for the next one (see
    /// [`master_replied`](Self::master_replied)): the backend's timeout, and at least
    /// [`FRESH_AT_LEAST`], so that a backend with a short timeout reads the map at most about
    /// once a second per backend while calls come.
    fn fresh_micros(&self) -> u64 {
        micros_of(self.shared.timeout.max(FRESH_AT_LEAST))
    }

    /// How long each try of a background read of the slot map may take ([`reread`]): the
    /// [`fresh_micros`](Self::fresh_micros) interval, the backend's timeout and at least
    /// [`FRESH_AT_LEAST`], not the timeout alone: a big cluster's `CLUSTER SLOTS` reply (or a
    /// node busy for a moment) may take longer than a short timeout, and every read then
    /// failed (issue 18).
    fn map_read_budget(&self) -> Duration {
        self.shared.timeout.max(FRESH_AT_LEAST)
    }

    /// Records a reply to a call on `key` if `error` is one the server sent (an error reply),
    /// not the connection's (I/O, a dropped connection, a timeout). On a cluster, it is the
    /// reply of the master that owns `key`'s slot only if that master provably sent it
    /// ([`sent_by_the_slots_node`]): redis-rs does not say which node an error came from, and
    /// a redirect it gave up on, `CLUSTERDOWN` or `TRYAGAIN` may have come from another node
    /// (the owner silent); such an error is the cluster's reply only (the backend-wide word),
    /// no master's (not the node a redirect names either: naming it is not its reply). A
    /// master's is as of `sent`, when the call was sent ([`master_replied`](Self::master_replied)).
    fn replied_with(&self, error: &RedisError, key: Option<&str>, sent: Instant) {
        let kind = error.kind();
        if !matches!(kind, ErrorKind::Server(_)) {
            return;
        }
        let key = key.filter(|_| sent_by_the_slots_node(kind));
        let _ = self.replied(sent, Instant::now(), key);
    }

    /// Whether the server that runs calls on `redis_key` sent any reply (to any call of this
    /// backend that went to it, whoever made it: an error reply too, on a cluster only one
    /// that master provably sent, see [`replied_with`](Self::replied_with)) less than the
    /// backend's timeout ago. That server is one server's, and on a cluster the master that owns the
    /// key's slot in the backend's copy of the slot map (the one whose breaker the call goes
    /// through): another master's replies do not count. On a cluster whose copy names no owner
    /// for the slot (no map read yet), or for `None`, any reply counts. `false` for a server
    /// that never had one (a lazy backend before its first reply), and for a master the copy
    /// named for the first time, once a timeout has passed since that read of the map with no
    /// reply from it (a new master counts as having replied when the read naming it was sent:
    /// see `SlotOwners::update`). A call cut short by its
    /// caller's own deadline is the caller's matter only while this holds: otherwise its
    /// server looks down (`RedisLimiter::try_acquire_for`, issue 18).
    ///
    /// Replies are timed on the monotonic clock the server-clock offset is kept on (`Instant`
    /// since the backend was made), read after each reply arrived (a master's: when its call
    /// was sent, see [`master_replied`](Self::master_replied)); see [`LastReply`] for how
    /// stale the time kept may be (never later than a real reply). A reply is the master's
    /// that the copy names for the call's key when it is read, and only while the copy is
    /// fresh for the call: after a slot moved, the old owner gets the new owner's replies
    /// until the next read of the map lands, and none to calls sent more than
    /// [`fresh_micros`](Self::fresh_micros) plus a timeout after the read that named it
    /// (see [`master_replied`](Self::master_replied)).
    pub(crate) fn answered_within_timeout(&self, redis_key: Option<&str>) -> bool {
        let shared = &*self.shared;
        let now = shared.clock.client_micros(Instant::now());
        let timeout = micros_of(shared.timeout);
        redis_key
            .filter(|_| self.is_cluster())
            .and_then(|key| {
                let slot = slot_of(key.as_bytes());
                shared.owners.owner_answered_within(slot, now, timeout)
            })
            .unwrap_or_else(|| shared.last_reply.answered_within(now, timeout))
    }

    /// The error of a call on `keys` given up after `after`, naming the server (on a cluster,
    /// the owner of the keys' slot: [`failed_at`](Self::failed_at)).
    pub(crate) fn timeout_error(
        &self,
        keys: &[String],
        after: Duration,
        doing: &str,
    ) -> BackendError {
        timed_out(&self.failed_at(keys), after, doing)
    }

    /// Runs `script` once (EVALSHA; on NOSCRIPT, SCRIPT LOAD and EVALSHA again) on the caller's
    /// runtime, giving up at `deadline`. The script gets `args` then the server-clock deadline
    /// (`ARGV[args.len() + 1]`, 0 for none) and replies with the server's time last, which refreshes the
    /// offset; a reply whose first field is [`PAST_DEADLINE`] is a timeout. A call whose
    /// `deadline` has passed before its request is written sends nothing: a timeout that says
    /// so, decided as any other (the server would refuse it only while the clock offset is
    /// known: a lazy backend before its first reply sends no deadline, and the script would
    /// take its permits for a caller that has given up).
    pub(crate) async fn eval(
        &self,
        script: &'static LuaScript,
        keys: &[String],
        args: &[u64],
        deadline: Instant,
    ) -> Result<Vec<i64>, BackendError> {
        let shared = &*self.shared;
        let now = Instant::now();
        // Before the first poll, which writes the request.
        if now >= deadline {
            return Err(self.not_sent(keys));
        }
        // Built in place (a ScriptInvocation would allocate a buffer per argument, then copy
        // them into a command like this one).
        let mut command = evalsha(script, keys.len(), args.len() + 1, 64);
        for key in keys {
            command.arg(key.as_str());
        }
        for &arg in args {
            command.arg(arg);
        }
        command.arg(self.server_deadline(deadline, now));
        let mut connection = shared.connection.get();
        let key = keys.first().map(String::as_str);
        let call = query_script::<Fields>(shared, script, key, &command, &mut connection);
        let reply = match until_deadline(call, deadline).await {
            Ok(Ok(Fields(reply))) => reply,
            Ok(Err(error)) => {
                self.replied_with(&error, key, now);
                let server = self.failed_at(keys);
                return Err(classify(&server, self.is_cluster(), error));
            }
            Err(_) => {
                let budget = deadline.saturating_duration_since(now);
                return Err(timed_out(&self.failed_at(keys), budget, "deciding"));
            }
        };
        self.decided(reply, keys, now, Instant::now())
    }

    /// Runs `requests` in order in one call of `batch`, a batch script that replies per
    /// decision (`sliding_window_batch.lua`, `sliding_log_batch.lua`; the fixed windows' and
    /// GCRA's use the tally format, [`eval_tally`](Self::eval_tally)). Gives
    /// up at the latest of their deadlines (each caller waits only until its own). The outer
    /// error is the call's (every decision in it failed alike); the inner results are each
    /// decision's, as [`eval`](Self::eval) returns them.
    ///
    /// The requests share their arguments but `n` (`args[n_slot]`). Batch format, compact so
    /// that a decision costs the server (and this client) little more than its arithmetic:
    /// * `KEYS`: each distinct limiter key's keys once (`per` keys each), in order of first use;
    /// * `ARGV`: `per`, the four shared arguments, `n_slot + 1`, then the `n`s (one number when
    ///   all are the same, else one per decision), the earliest of the deadlines on the
    ///   server's clock (0: none has one), the deadlines, each as its distance from the earliest
    ///   plus 1 (0: none; [`distances`], as in [`eval_tally`](Self::eval_tally): the script
    ///   reads them only once the earliest has passed), and, only when `KEYS` holds more than
    ///   one limiter key, each decision's key's index in `KEYS` (counted in limiter keys, from
    ///   1); each list is one argument, its numbers separated by spaces ([`spaced`]);
    /// * reply: the server's time, five fields per decision (a one-decision reply without the
    ///   time), then the error messages: a decision whose first field is [`BATCH_ERROR`]
    ///   raised the error its second field numbers (from 1).
    pub(crate) async fn eval_batch(
        &self,
        batch: &'static LuaScript,
        n_slot: usize,
        requests: &[&Request],
    ) -> Result<Vec<Result<Fields6, BackendError>>, BackendError> {
        let shared = &*self.shared;
        let Some(plan) = self.plan_batch(requests)? else {
            return Ok(Vec::new());
        };
        let BatchPlan {
            first, now, latest, ..
        } = plan;
        let per = first.keys.len();
        // The lists take up to ~24 bytes per decision (an n of a few digits, a deadline's
        // distance, an index, each with its space).
        let mut command = evalsha(batch, per * plan.distinct.len(), 10, 24 * requests.len());
        // Each distinct limiter key's keys, from the request that used it first.
        for request in &plan.distinct {
            for key in request.keys.iter() {
                command.arg(key.as_str());
            }
        }
        command.arg(per);
        for arg in first.args {
            command.arg(arg);
        }
        command.arg(n_slot + 1);
        n_list(&mut command, requests, n_slot);
        command.arg(plan.earliest);
        plan.deadlines_and_indices(&mut command);
        let mut connection = shared.connection.get();
        let key = first.keys.first().map(String::as_str);
        let call = query_script::<Value>(shared, batch, key, &command, &mut connection);
        let (items, received) = self
            .batch_reply(call, now, latest, requests.len(), &first.keys)
            .await?;
        let fields = 1 + 5 * requests.len();
        let Some(numbers) = integers(items.get(..fields)) else {
            return Err(self.batch_protocol(&first.keys, requests.len(), &items));
        };
        let server_now = numbers[0];
        shared.clock.sample(server_now, now, received);
        let errors = &items[fields..];
        Ok(numbers[1..]
            .chunks_exact(5)
            .map(|decision| {
                if decision[0] == BATCH_ERROR {
                    let error = self.batch_script_error(&first.keys, errors, decision[1], decision);
                    return Err(error);
                }
                let [allowed, limit, remaining, retry, reset] = decision else {
                    unreachable!("chunks of 5")
                };
                let fields = [*allowed, *limit, *remaining, *retry, *reset, server_now];
                self.past_deadline(fields, &first.keys)
            })
            .collect())
    }

    /// As [`eval_batch`](Self::eval_batch), for a batch script in the tally format, whose reply
    /// holds no field per decision: the client knows each decision's `n` and the shared
    /// arguments, so the script replies only what the client cannot know, and `replay` works
    /// out each decision from it exactly as the script did. So a decision costs the server a
    /// comparison and an addition, and neither side formats or parses its reply fields.
    /// Each limiter key has one Redis key.
    /// * `KEYS`: each distinct limiter key once, in order of first use;
    /// * `ARGV`: the two shared arguments before `n` (`args[0]`, `args[1]`), the number of
    ///   decisions `D`, the earliest of their deadlines on the server's clock (0: none has one:
    ///   while it has not passed the script looks at no decision's own), then the `n`s (one
    ///   number when all `D` are the same, else the `D` of them), the `D` deadlines, each as
    ///   its distance from the earliest plus 1 (0: none; the script reads them only once the
    ///   earliest has passed, and a deadline's 16 digits cost the server about 190 instructions
    ///   a decision to take in, a distance's few much less), and, only when `KEYS` holds more
    ///   than one key, the `D` indices into `KEYS` (from 1);
    ///   each list is one argument, its numbers separated by spaces ([`spaced`]). An argument
    ///   costs the server more than a decision's arithmetic (an object, then a string Lua
    ///   interns): callgrind, a fixed-window batch of 14 decisions of one permit took 138.0K
    ///   instructions a call with an argument per `n` and per deadline, 115.7K with one `n`
    ///   and one list of deadlines (about 860 an argument);
    /// * reply: the server's time; per key, the index (from 1) of the error its read raised (0:
    ///   none) and its state as first read (two integers, for `replay`); the number of
    ///   decisions refused past their deadline and their indices (from 1); the error messages.
    pub(crate) async fn eval_tally(
        &self,
        batch: &'static LuaScript,
        replay: Replay,
        n_slot: usize,
        requests: &[&Request],
    ) -> Result<Vec<Result<Fields6, BackendError>>, BackendError> {
        let shared = &*self.shared;
        let Some(plan) = self.plan_batch(requests)? else {
            return Ok(Vec::new());
        };
        let BatchPlan {
            first, now, latest, ..
        } = plan;
        // EVALSHA, the hash, the key count, the keys, and up to seven arguments, the lists
        // taking up to ~24 bytes per decision (an n of a few digits, a deadline's distance, an
        // index, each with its space).
        let mut command = evalsha(batch, plan.distinct.len(), 7, 24 * requests.len());
        for request in &plan.distinct {
            command.arg(limiter_key(request));
        }
        command.arg(first.args[0]).arg(first.args[1]);
        command.arg(requests.len()).arg(plan.earliest);
        n_list(&mut command, requests, n_slot);
        plan.deadlines_and_indices(&mut command);
        let mut connection = shared.connection.get();
        let key = first.keys.first().map(String::as_str);
        let call = query_script::<Value>(shared, batch, key, &command, &mut connection);
        let (items, received) = self
            .batch_reply(call, now, latest, requests.len(), &first.keys)
            .await?;
        // The time, three integers per key, the count of late decisions, then those and the
        // error messages.
        let head = 2 + 3 * plan.distinct.len();
        let Some(numbers) = integers(items.get(..head)) else {
            return Err(self.batch_protocol(&first.keys, requests.len(), &items));
        };
        let late_count = usize::try_from(numbers[head - 1]).unwrap_or(usize::MAX);
        let late = head
            .checked_add(late_count)
            .and_then(|end| integers(items.get(head..end)));
        let Some(late) = late else {
            return Err(self.batch_protocol(&first.keys, requests.len(), &items));
        };
        let errors = &items[head + late_count..];
        let server_now = numbers[0];
        if server_now.unsigned_abs() >= EXACT {
            return Err(self.batch_protocol(&first.keys, requests.len(), &items));
        }
        shared.clock.sample(server_now, now, received);
        let mut states: Vec<(i64, [i64; 2])> = numbers[1..head - 1]
            .chunks_exact(3)
            .map(|key| (key[0], [key[1], key[2]]))
            .collect();
        let mut late = late.into_iter().peekable();
        Ok(requests
            .iter()
            .zip(plan.indices)
            .enumerate()
            .map(|(i, (request, index))| {
                if late.next_if(|&l| l == i as i64 + 1).is_some() {
                    return Err(self.deadline_error(&request.keys));
                }
                let (error, state) = &mut states[index];
                if *error != 0 {
                    let error = self.batch_script_error(&request.keys, errors, *error, &[*error]);
                    return Err(error);
                }
                // The scripts read only integers within Lua's exact ones, and reply them as
                // read: a state beyond is not their reply (as a float past 2^63 arrives as
                // i64::MIN), nor is one whose replay overflows.
                let exact = state.iter().all(|v| v.unsigned_abs() < EXACT);
                let fields = exact
                    .then(|| replay(state, request.args, server_now, request.args[n_slot]))
                    .flatten();
                let Some([allowed, limit, remaining, retry, reset]) = fields else {
                    let what = format!("a key's state {state:?} (at most 2^53 - 1 either way)");
                    return Err(self.batch_protocol(&request.keys, requests.len(), &what));
                };
                Ok([allowed, limit, remaining, retry, reset, server_now])
            })
            .collect())
    }

    /// What [`eval_batch`](Self::eval_batch) and [`eval_tally`](Self::eval_tally) work out
    /// from a batch's `requests`, now, before building the call (`None`: no request): the
    /// distinct limiter keys, each decision's index among them, the deadlines on the
    /// server's clock and the earliest of them (0: none), and the latest deadline (the call's).
    /// A batch whose every deadline passed before its request is written is not sent: the
    /// error says so (the coalescer leaves out those past theirs when it takes the batch; this
    /// is the instant since).
    fn plan_batch<'r>(
        &self,
        requests: &[&'r Request],
    ) -> Result<Option<BatchPlan<'r>>, BackendError> {
        let now = Instant::now();
        let Some(&first) = requests.first() else {
            return Ok(None);
        };
        // Distinct limiter keys, by their first key: a batch holds a few (often one).
        let mut plan = BatchPlan {
            first,
            now,
            distinct: Vec::new(),
            indices: Vec::with_capacity(requests.len()),
            deadlines: Vec::with_capacity(requests.len()),
            earliest: 0,
            latest: now,
        };
        for request in requests {
            let index = distinct_index(&mut plan.distinct, request);
            plan.indices.push(index);
            let deadline = self.server_deadline(request.deadline, now);
            if deadline > 0 && (plan.earliest == 0 || deadline < plan.earliest) {
                plan.earliest = deadline;
            }
            plan.deadlines.push(deadline);
            plan.latest = plan.latest.max(request.deadline);
        }
        if plan.latest <= now {
            return Err(self.not_sent(&first.keys));
        }
        Ok(Some(plan))
    }

    /// Awaits a batch's `call` (sent at `now`) until `latest`: its reply's items and when it came
    /// (in the clock's client µs).
    /// `keys` are the first decision's (on a cluster, a batch's keys share one slot), to name
    /// the node in an error.
    async fn batch_reply(
        &self,
        call: impl std::future::Future<Output = redis::RedisResult<Value>>,
        now: Instant,
        latest: Instant,
        decisions: usize,
        keys: &[String],
    ) -> Result<(Vec<Value>, u64), BackendError> {
        let key = keys.first().map(String::as_str);
        match until_deadline(call, latest).await {
            Ok(Ok(Value::Array(items))) => Ok((items, self.replied(now, Instant::now(), key))),
            Ok(Ok(other)) => {
                let _ = self.replied(now, Instant::now(), key);
                Err(self.batch_protocol(keys, decisions, &other))
            }
            Ok(Err(error)) => {
                self.replied_with(&error, key, now);
                Err(classify(&self.failed_at(keys), self.is_cluster(), error))
            }
            Err(_) => {
                let budget = latest.saturating_duration_since(now);
                Err(timed_out(&self.failed_at(keys), budget, "deciding"))
            }
        }
    }

    /// The error for a batch reply of an unexpected shape, for a decision on `keys` (naming
    /// the owner of their slot on a cluster).
    fn batch_protocol(
        &self,
        keys: &[String],
        decisions: usize,
        what: &dyn std::fmt::Debug,
    ) -> BackendError {
        BackendError::at(
            FailureKind::Protocol,
            self.failed_at(keys),
            std::io::Error::other(format!(
                "unexpected reply from a floodgate batch of {decisions}: {what:?}"
            )),
        )
    }

    /// The error a batch script raised for a decision on `keys`: message `number` (from 1) of
    /// `errors`, or the decision's fields if there is none such; naming the owner of the keys'
    /// slot on a cluster.
    fn batch_script_error(
        &self,
        keys: &[String],
        errors: &[Value],
        number: i64,
        fields: &[i64],
    ) -> BackendError {
        let message = usize::try_from(number - 1)
            .ok()
            .and_then(|i| errors.get(i))
            .map_or_else(
                || format!("{fields:?}"),
                |v| match v {
                    Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    other => format!("{other:?}"),
                },
            );
        BackendError::at(
            FailureKind::Script,
            self.failed_at(keys),
            std::io::Error::other(message),
        )
    }

    /// A script's reply for a request on `keys` sent at `sent`, received at `received`:
    /// refreshes the offset from the server's time (last field); [`PAST_DEADLINE`] becomes a
    /// timeout.
    fn decided(
        &self,
        reply: Vec<i64>,
        keys: &[String],
        sent: Instant,
        received: Instant,
    ) -> Result<Vec<i64>, BackendError> {
        let received = self.replied(sent, received, keys.first().map(String::as_str));
        if let Some(&server_now) = reply.last() {
            self.shared.clock.sample(server_now, sent, received);
        }
        self.past_deadline(reply, keys)
    }

    /// `reply` of a request on `keys`, or a timeout if the script refused it past its deadline
    /// ([`PAST_DEADLINE`]).
    fn past_deadline<R: AsRef<[i64]>>(&self, reply: R, keys: &[String]) -> Result<R, BackendError> {
        if reply.as_ref().first() == Some(&PAST_DEADLINE) {
            return Err(self.deadline_error(keys));
        }
        Ok(reply)
    }

    /// The error of a request on `keys` not sent because its deadline had passed before it
    /// was written: [`not_sent_because`](Self::not_sent_because) that.
    #[cold]
    pub(crate) fn not_sent(&self, keys: &[String]) -> BackendError {
        self.not_sent_because(
            keys,
            "not sent: the request's deadline passed before it was written; nothing was taken"
                .into(),
        )
    }

    /// The error of a request on `keys` not sent, for `reason` (its message): a timeout naming
    /// the server (on a cluster, the owner of the keys' slot). Not told to the circuit breaker
    /// ([`NotSent`]): it says nothing about Redis.
    #[cold]
    pub(crate) fn not_sent_because(
        &self,
        keys: &[String],
        reason: std::borrow::Cow<'static, str>,
    ) -> BackendError {
        BackendError::at(FailureKind::Timeout, self.failed_at(keys), NotSent(reason))
    }

    /// The error of a request on `keys` the script refused past its deadline
    /// ([`PAST_DEADLINE`]), naming the owner of the keys' slot on a cluster.
    fn deadline_error(&self, keys: &[String]) -> BackendError {
        BackendError::at(
            FailureKind::Timeout,
            self.failed_at(keys),
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the request reached the server after its deadline; nothing was taken",
            ),
        )
    }
}

/// A decision's reply fields, `{allowed, limit, remaining, retry_after_us, reset_after_us,
/// now_us}`, inline: a batch's decisions allocate nothing each for their replies.
pub(crate) type Fields6 = [i64; 6];

/// One decision to run: the Redis keys, the script's `args` (`ARGV[1..=4]`), and when the
/// caller gives up.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) keys: Keys,
    pub(crate) args: [u64; 4],
    pub(crate) deadline: Instant,
}

/// A decision's Redis keys: one (the fixed windows, GCRA), held without a `Vec` (one allocation
/// less per decision), or several. Reads as the slice of them.
#[derive(Debug)]
pub(crate) enum Keys {
    One(String),
    Many(Vec<String>),
}

impl std::ops::Deref for Keys {
    type Target = [String];

    fn deref(&self) -> &[String] {
        match self {
            Keys::One(key) => std::slice::from_ref(key),
            Keys::Many(keys) => keys,
        }
    }
}

/// A batch's n's, as its script reads them: one number when every request asks the same
/// `args[n_slot]`, else the list of them, [`spaced`].
fn n_list(command: &mut Cmd, requests: &[&Request], n_slot: usize) {
    let n = requests[0].args[n_slot];
    if requests.iter().all(|request| request.args[n_slot] == n) {
        command.arg(n);
    } else {
        spaced(command, requests.iter().map(|request| request.args[n_slot]));
    }
}

/// Adds `values` to `command` as one argument: their decimal digits, separated by spaces (a
/// list of the tally format, see [`RedisBackend::eval_tally`]).
///
/// Formatted with `itoa` (what redis-rs formats an integer argument with): a batch's list
/// held a 16-digit deadline per decision when measured, and formatting one digit a step took ~250
/// instructions a decision (callgrind, 16 callers).
fn spaced(command: &mut Cmd, values: impl Iterator<Item = u64>) {
    let mut argument = command.writer_for_next_arg();
    let mut digits = itoa::Buffer::new();
    for (i, value) in values.enumerate() {
        // Into the command's buffer: cannot fail.
        if i > 0 {
            let _ = argument.write_all(b" ");
        }
        let _ = argument.write_all(digits.format(value).as_bytes());
    }
}

/// `deadlines` on the server's clock (0: none), each as its distance from `earliest` (the least
/// of those not 0; 0 when all are) plus 1, 0 for none: one argument, as [`spaced`] writes it.
/// The batch scripts add `earliest` back (`tally.lua`, `sliding_window_batch.lua`,
/// `sliding_log_batch.lua`).
fn distances(command: &mut Cmd, deadlines: &[u64], earliest: u64) {
    // `earliest` is the least of those not 0, so none underflows.
    let distance = |&deadline: &u64| match deadline {
        0 => 0,
        deadline => deadline - earliest + 1,
    };
    spaced(command, deadlines.iter().map(distance));
}

/// An `EVALSHA` of `script` with `keys` keys, to which the caller adds the keys, then about
/// `args` arguments taking about `bytes` bytes.
fn evalsha(script: &Script, keys: usize, args: usize, bytes: usize) -> Cmd {
    let mut command = Cmd::with_capacity(3 + keys + args, 128 + bytes);
    command.arg("EVALSHA").arg(script.get_hash()).arg(keys);
    command
}

/// Runs `command`, an [`evalsha`] of `script` whose first key is `key`, loading the script
/// first if the server does not know it (a restarted server, a failover, a master's first use).
/// On a cluster the script is loaded on the master that owns `key`'s slot only: redis-rs sends
/// a plain `SCRIPT LOAD` to every master and waits for all, so one frozen master would fail
/// the load for keys on the others. Concurrent calls that get `NOSCRIPT` share one load per
/// node and script ([`ScriptLoads`]); the node is the slot's owner in the backend's copy of
/// the slot map, which redis-rs may route otherwise.
///
/// A call that gets `NOSCRIPT` again after that load is sent once more as an `EVAL` carrying
/// the script's source ([`LuaScript::eval_command`]), which the node that runs it keeps: the
/// load went to another node than the one that runs the call, either because the slot moved
/// since the copy was read (`MOVED`: redis-rs sends the `EVAL` to the new owner) or because
/// the slot is half-migrated and the key is not on its owner (the owner answers `ASK`, and
/// redis-rs follows it, with the `EVAL` too, to the importing master, which no load routed
/// by key can reach). The first `NOSCRIPT` still loads on the owner: a reply does not say
/// which node sent it, and the owner's own calls (after a restart, a `SCRIPT FLUSH`, a
/// failover) need the script there, loaded once for all of them rather than sent as source
/// by each; a redirected call pays that load (a round trip to an owner that may have the
/// script) once per importing master and script, since the `EVAL` leaves the script there.
async fn query_script<T: redis::FromRedisValue>(
    shared: &Shared,
    script: &LuaScript,
    key: Option<&str>,
    command: &Cmd,
    connection: &mut Connection,
) -> redis::RedisResult<T> {
    let no_script =
        |error: &RedisError| error.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript);
    match query_sent_once_more_if_stale::<T>(shared, command, connection).await {
        Err(error) if no_script(&error) => {
            let node: Arc<str> = match (&*connection, key) {
                (Connection::Cluster(_), Some(key)) => {
                    let slot = slot_of(key.as_bytes());
                    shared
                        .owners
                        .owner(slot)
                        .unwrap_or_else(|| format!("slot {slot}").into())
                }
                _ => Arc::clone(&shared.server),
            };
            let mut load_connection = connection.clone();
            let load = || async move { load_script(script, key, &mut load_connection).await };
            shared.loads.load(node, script.get_hash(), load).await?;
            match command.query_async::<T>(connection).await {
                // The load went to another node than the one that runs this call (cold).
                Err(error) if no_script(&error) => {
                    script
                        .eval_command(command)
                        .query_async::<T>(connection)
                        .await
                }
                reply => reply,
            }
        }
        reply => reply,
    }
}

/// `command` sent on `connection`, and on a single server sent once more if its error is a
/// finished reconnect series' kept error ([`stale_connection_error`]): on the same manager,
/// whose new series it waits for, or on a fresh one replacing a manager that series left
/// stuck ([`Stale::Replace`]; at most one replacement a second after the first,
/// [`REPLACED_KEPT_AT_LEAST`], a call held back failing on the kept error). The script calls' first send ([`query_script`]), which every
/// decision, batch, lease and refund makes, the breaker's probe included. The resend's check
/// lives here, in the caller's future, not in a wrapper of [`Connection`]'s
/// `req_packed_command`, which would box a second future per request (measured, issue 18:
/// ~370 instructions a decision, one caller; see CHANGELOG). The other calls (`TIME`, `INFO`,
/// `SCRIPT LOAD`, `CLUSTER SLOTS`) are not resent: a stale error fails them as any failure
/// does, and the next script call finds the new series (or replaces the stuck manager).
async fn query_sent_once_more_if_stale<T: redis::FromRedisValue>(
    shared: &Shared,
    command: &Cmd,
    connection: &mut Connection,
) -> redis::RedisResult<T> {
    let (result, at_once) = ready_at_once(command.query_async::<T>(&mut *connection)).await;
    let (Connection::Single(_, generation), SharedConnection::Single(single)) =
        (&*connection, &shared.connection)
    else {
        return result;
    };
    match stale_connection_error(&result, at_once) {
        None => result,
        Some(Stale::Resend) => command.query_async::<T>(connection).await,
        Some(Stale::Replace) => {
            match single.replace(*generation, &shared.runtime, Instant::now()) {
                Some(fresh) => {
                    *connection = fresh;
                    command.query_async::<T>(connection).await
                }
                None => result,
            }
        }
    }
}

/// `SCRIPT LOAD` of `script` on the node that runs a call on `key` (see [`query_script`]).
async fn load_script(
    script: &LuaScript,
    key: Option<&str>,
    connection: &mut Connection,
) -> redis::RedisResult<()> {
    match (&mut *connection, key) {
        (Connection::Cluster(cluster), Some(key)) => {
            let owner = Route::with_key(key, SlotAddr::Master);
            let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(owner));
            cluster
                .route_command(script.load_command(), route)
                .await?
                .extract_error()?;
        }
        _ => {
            script
                .load_command()
                .query_async::<String>(&mut *connection)
                .await?;
        }
    }
    Ok(())
}

/// The script loads in flight, one per (node, script hash): concurrent calls that all get
/// `NOSCRIPT` (after `SCRIPT FLUSH`, a restart or a failover) send one `SCRIPT LOAD`, and the
/// others wait for it, each within its own call's deadline (the caller's `until_deadline`
/// around the whole call). The node is a cluster slot's owner as the backend's copy of the slot
/// map names it (the slot itself while not known), or the server.
///
/// A load that fails or whose caller gives up is not shared: the next waiter sends its own.
/// An entry is removed by the first caller to see its load done, or by the last caller of a
/// load that failed or was given up ([`LoadWaiter`]); a call that gets `NOSCRIPT` after that
/// loads again.
#[derive(Debug, Default)]
pub(super) struct ScriptLoads {
    in_flight: std::sync::Mutex<std::collections::HashMap<LoadKey, Arc<LoadCell>>>,
}

/// A load's node and script hash.
type LoadKey = (Arc<str>, String);

/// One caller's hold on a load's cell, from the map lookup until it returns or is dropped
/// (its deadline, a dropped future): it removes the entry once the load is done, or when it
/// is the cell's last caller (a failed or abandoned load, which no one else waits for).
struct LoadWaiter<'a> {
    loads: &'a ScriptLoads,
    key: LoadKey,
    /// Taken in `drop`, under the map's lock, so that every caller's count on the cell drops
    /// under the lock and the last one sees itself the last.
    cell: Option<Arc<LoadCell>>,
}

impl Drop for LoadWaiter<'_> {
    fn drop(&mut self) {
        let mut in_flight = self
            .loads
            .in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(cell) = self.cell.take() else {
            return;
        };
        // The map's reference and this caller's: no one else waits on the cell.
        let last = Arc::strong_count(&cell) == 2;
        if (cell.initialized() || last)
            && in_flight
                .get(&self.key)
                .is_some_and(|c| Arc::ptr_eq(c, &cell))
        {
            in_flight.remove(&self.key);
        }
        drop(cell);
    }
}

type LoadCell = tokio::sync::OnceCell<()>;

impl ScriptLoads {
    /// Runs `load` for (`node`, `hash`) unless a load of that pair is in flight, else waits for
    /// that one (and runs `load` if it failed or was dropped unfinished).
    async fn load<F, L>(&self, node: Arc<str>, hash: &str, load: L) -> redis::RedisResult<()>
    where
        L: FnOnce() -> F,
        F: std::future::Future<Output = redis::RedisResult<()>>,
    {
        let key = (node, hash.to_owned());
        let cell = {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(in_flight.entry(key.clone()).or_default())
        };
        let waiting = LoadWaiter {
            loads: self,
            key,
            cell: Some(cell),
        };
        let cell = waiting.cell.as_deref().expect("set above");
        cell.get_or_try_init(load).await.map(|_| ())
    }

    /// Loads in flight (or not yet removed).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

/// A request's limiter key: its first Redis key.
fn limiter_key(request: &Request) -> &str {
    request.keys.first().map_or("", String::as_str)
}

/// The index of `request`'s limiter key ([`limiter_key`]) among a batch's distinct limiter
/// keys, `distinct`, each held by the request that used it first (in order of first use;
/// `request` pushed there if its key is new): a batch holds a few (often one), so a scan.
fn distinct_index<'a>(distinct: &mut Vec<&'a Request>, request: &'a Request) -> usize {
    let key = limiter_key(request);
    match distinct.iter().position(|first| limiter_key(first) == key) {
        Some(index) => index,
        None => {
            distinct.push(request);
            distinct.len() - 1
        }
    }
}

/// A batch's requests as [`RedisBackend::plan_batch`] works them out.
struct BatchPlan<'r> {
    /// The first request (its keys name the node in an error).
    first: &'r Request,
    /// When the batch was taken up (before its request is written).
    now: Instant,
    /// The distinct limiter keys, each by the request that used it first ([`distinct_index`]),
    /// in order of first use.
    distinct: Vec<&'r Request>,
    /// Each decision's limiter key's index in `distinct`.
    indices: Vec<usize>,
    /// Each decision's deadline on the server's clock (0: none).
    deadlines: Vec<u64>,
    /// The earliest of `deadlines` (0: none has one).
    earliest: u64,
    /// The latest of the decisions' deadlines: the call's.
    latest: Instant,
}

impl BatchPlan<'_> {
    /// Adds the batch's last two arguments to `command`: the deadlines, each as its distance
    /// from the earliest ([`distances`]), and, only when the batch holds more than one limiter
    /// key, each decision's key's index among them, from 1 ([`spaced`]).
    fn deadlines_and_indices(&self, command: &mut Cmd) {
        distances(command, &self.deadlines, self.earliest);
        if self.distinct.len() > 1 {
            spaced(command, self.indices.iter().map(|&index| index as u64 + 1));
        }
    }
}

/// A one-decision script's reply: its integer fields, sent either as an array of integers or
/// (the fixed windows' and GCRA's scripts) as one string of them, space-separated. redis-rs
/// parses each element of an array on its own, at ~1,000 instructions an integer; one string
/// of six costs about as much as one integer, and splitting it here little more (measured
/// under callgrind, 1 caller on the fixed window: redis-rs's parsing 7,500 -> 1,900
/// instructions a decision, this one ~1,200).
struct Fields(Vec<i64>);

impl redis::FromRedisValue for Fields {
    fn from_redis_value_ref(value: &Value) -> Result<Self, redis::ParsingError> {
        let text = match value {
            Value::BulkString(bytes) => bytes.as_slice(),
            Value::SimpleString(text) => text.as_bytes(),
            _ => return Vec::<i64>::from_redis_value_ref(value).map(Fields),
        };
        let mut fields = Vec::with_capacity(6);
        for field in text.split(|&b| b == b' ') {
            match integer(field) {
                Some(field) => fields.push(field),
                None => {
                    let what = format!("a floodgate script's reply is not integers: {value:?}");
                    return Err(what.into());
                }
            }
        }
        Ok(Fields(fields))
    }

    fn from_redis_value(value: Value) -> Result<Self, redis::ParsingError> {
        Self::from_redis_value_ref(&value)
    }
}

/// `field` as Lua's `%d` writes an integer (an optional `-`, then digits), if it is one within
/// `i64`.
fn integer(field: &[u8]) -> Option<i64> {
    let (negative, digits) = match field {
        [b'-', digits @ ..] => (true, digits),
        digits => (false, digits),
    };
    if digits.is_empty() {
        return None;
    }
    // Accumulated negative, so that i64::MIN fits.
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value
            .checked_mul(10)?
            .checked_sub(i64::from(digit - b'0'))?;
    }
    if negative {
        Some(value)
    } else {
        value.checked_neg()
    }
}

/// The integers of `values`, if all are.
fn integers(values: Option<&[Value]>) -> Option<Vec<i64>> {
    values?
        .iter()
        .map(|v| match v {
            Value::Int(i) => Some(*i),
            _ => None,
        })
        .collect()
}

/// The first field of a batch entry whose decision raised an error.
const BATCH_ERROR: i64 = 3;

/// Lua's exact integers: a tally reply's time and key states are below it in magnitude.
const EXACT: u64 = 1 << 53;

/// The first reply field of a script that refused a request past its deadline.
pub(crate) const PAST_DEADLINE: i64 = 2;

/// `CLUSTER SLOTS` on `connection` (to whichever node redis-rs routes it), within `within`.
async fn read_slot_owners(mut connection: Connection, within: Duration) -> Option<Value> {
    let slots = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
    let reply = slots.query_async::<Value>(&mut connection);
    match until_deadline(reply, Instant::now() + within).await {
        Ok(Ok(reply)) => Some(reply),
        _ => None,
    }
}

/// How many masters one background read of the slot map tries ([`reread`]).
const MAP_READ_TRIES: usize = 2;

/// One background read of the slot map into `owners` (the one in flight,
/// [`RedisBackend::reread_slot_owners`]): `CLUSTER SLOTS` sent to the master that last replied
/// to this backend, and on failure to the next, up to [`MAP_READ_TRIES`] masters
/// ([`SlotOwners::read_order`]); the first reply replaces the copy. While the copy names no
/// master (no read landed yet), to the configured nodes instead, from the one after the last
/// whose read failed ([`MapReader::seed_order`]); and once every master the copy names has
/// failed its last read, to one configured node more after the masters' tries
/// ([`SlotOwners::every_master_failed`]: the masters may all be at new addresses).
///
/// Not to a node redis-rs picks at random (issue 18): that could be a frozen master, and while
/// reads failed, the replies of healthy masters that the copy was too old for stayed
/// uncounted, for as long as the draws kept hitting it (no bound). Now, with `m` masters not
/// answering and one that does, at most `⌈m / 2⌉` reads in a row fail, since a master whose
/// read failed is asked last until it replies to a call (the masters so marked taking turns,
/// the one whose read failed longest ago first: so a live one marked once is asked again).
///
/// Each try has `within` ([`RedisBackend::map_read_budget`]: the timeout and a second at
/// least), connecting included, and goes over the [`MapReader`]'s own connection, not the
/// cluster connection, whose every request redis-rs gives up after the backend's timeout: a
/// `CLUSTER SLOTS` slower than that failed every time. What that costs while a master is
/// frozen: a try sent to it waits out `within` before the next master is tried, so the
/// replies the copy was too old for count up to `within` later (one try per frozen master:
/// it is then asked last), and one read is in flight meanwhile (none other starts).
async fn reread(read: &Read<'_>) {
    let (reader, owners) = (read.reader, read.owners);
    let masters = owners.read_order(MAP_READ_TRIES);
    let targets: Vec<(&str, u16, Asked<'_>)> = if masters.is_empty() {
        reader
            .seed_order(MAP_READ_TRIES)
            .map(|at| reader.seed(at))
            .collect()
    } else {
        let named = masters.iter();
        named
            .map(|m| (m.host(), m.port(), Asked::Master(m)))
            .collect()
    };
    for (host, port, target) in targets {
        if try_read(read, host, port, target).await {
            return;
        }
    }
    // Every master the copy names failed its last read (the cluster's masters all at new
    // addresses, the copy naming only the old ones: an idle backend through a restart that
    // moved every node): a configured node too, else no read would land again.
    if masters.is_empty() || !owners.every_master_failed() {
        return;
    }
    if let Some(at) = reader.seed_order(1).next() {
        let (host, port, target) = reader.seed(at);
        try_read(read, host, port, target).await;
    }
}

/// What one background read of the slot map ([`reread`]) works with.
struct Read<'a> {
    reader: &'a MapReader,
    owners: &'a SlotOwners,
    /// The cluster connection: a try the reader's own connection was refused on goes over it
    /// ([`try_read`]).
    cluster: Option<ClusterConnection>,
    scheme: &'static str,
    /// The backend's clock base (`micros_since`).
    base: Instant,
    /// Each try's budget ([`RedisBackend::map_read_budget`]).
    within: Duration,
}

/// One try of [`reread`]: `CLUSTER SLOTS` at `host`:`port` within `read.within`, the copy
/// replaced by its reply; `false`, and `target` marked as failed, if it failed.
///
/// If the node refused the reader's own connection (a server error reply, not a timeout or a
/// broken connection: a password or ACL user rotated since the cluster connection
/// authenticated, `maxclients` reached, `-NOAUTH`), the same `CLUSTER SLOTS` goes to the
/// same node over the cluster connection (redis-rs's routing by address, its live
/// authenticated connection there), within what is left of the try's budget (and redis-rs's
/// own response timeout, the backend's timeout). Before, every read failed so for as long as
/// the cause lasted, while calls succeeded: the copy went stale for good and the replies it
/// was too old for were held, so healthy masters looked silent (issue 18). The node asked is
/// the one the try was for, so the reply is that master's as before, and the try keeps its
/// bound (`within`, connecting included).
async fn try_read(read: &Read<'_>, host: &str, port: u16, target: Asked<'_>) -> bool {
    // When the read is sent, on the clock's client side (`client_micros`): the map read is at
    // least as recent.
    let sent = Instant::now();
    let asked = micros_since(read.base, sent);
    let deadline = sent + read.within;
    let reply = match read.reader.read(host, port, read.within).await {
        Ok(reply) => Some(reply),
        Err(ReadFailed::Refused) => match &read.cluster {
            Some(cluster) => read_by_address(cluster.clone(), host, port, deadline).await,
            None => None,
        },
        Err(ReadFailed::Silent) => None,
    };
    match reply {
        Some(reply) => {
            let owners = read.owners;
            owners.update_answered_by(&reply, read.scheme, asked, Some(host));
            true
        }
        None => {
            match target {
                Asked::Master(master) => master.failed(asked),
                Asked::Seed(at) => read.reader.seed_failed(at),
            }
            false
        }
    }
}

/// `CLUSTER SLOTS` sent to the node at `host`:`port` over the cluster connection (redis-rs's
/// routing by address), by `deadline`; `None` if it failed or did not answer in time.
async fn read_by_address(
    mut cluster: ClusterConnection,
    host: &str,
    port: u16,
    deadline: Instant,
) -> Option<Value> {
    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
        host: host.to_owned(),
        port,
    });
    let slots = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
    let reply = cluster.route_command(slots, route);
    until_deadline(reply, deadline)
        .await
        .ok()?
        .and_then(Value::extract_error)
        .ok()
}

/// Why a read of the reader's own connection failed ([`MapReader::read`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadFailed {
    /// No reply in time, or the connection broke or was refused at the TCP level: the node's
    /// own silence, as far as the reader can tell.
    Silent,
    /// The node answered with an error (at the handshake, `AUTH`, or to `CLUSTER SLOTS`): it
    /// is up, and refused this connection ([`try_read`] tries the cluster connection).
    Refused,
}

impl ReadFailed {
    fn of(error: &RedisError) -> Self {
        if error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
        {
            ReadFailed::Silent
        } else {
            ReadFailed::Refused
        }
    }
}

/// Where a try of a read of the slot map goes ([`reread`]): a master the copy names, or,
/// while it names none, a configured node (its index in [`MapReader::seeds`]).
enum Asked<'a> {
    Master(&'a ReadTarget),
    Seed(usize),
}

/// A cluster backend's own connection for its background reads of the slot map ([`reread`]):
/// one plain connection to one node, made with the first configured node's settings (its
/// username and password, TLS, protocol; database 0, as the cluster connection) at the node's
/// host and port, kept while reads go to that node and
/// made again (the old one dropped) when a read goes to another or fails on it. A kept
/// connection to a node the last read no longer names a master stays open, idle, until the
/// next read (which goes to a named master, so drops it) or the server's idle `timeout`: one
/// connection at most, and the configured-node fallback read may reuse it. No response
/// timeout of redis-rs's: each read is bounded by its own budget. One read in flight at a time
/// ([`SlotOwners::start_read`]), so the connection is taken by it and put back when it lands;
/// the lock is never waited on for longer than that take or put.
struct MapReader {
    info: redis::ConnectionInfo,
    /// The configured nodes' host and port, in their order: where a read goes while the
    /// copy names no master ([`seed_order`](Self::seed_order)).
    seeds: Vec<(String, u16)>,
    /// The seed a read asks first while the copy names no master: the one after the last
    /// whose read failed, so the seeds take turns ([`seed_failed`](Self::seed_failed)).
    next_seed: AtomicUsize,
    /// The last landed read's connection, and its node's host and port.
    open: std::sync::Mutex<Option<(String, u16, redis::aio::MultiplexedConnection)>>,
}

impl std::fmt::Debug for MapReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not `info`: it holds the password.
        f.debug_struct("MapReader")
            .field("seeds", &self.seeds)
            .finish_non_exhaustive()
    }
}

impl MapReader {
    /// A reader with the settings of `nodes[0]`, or `None` if it is not a TCP node URL (the
    /// cluster client refuses any other first).
    fn new(nodes: &[String]) -> Option<Self> {
        use redis::IntoConnectionInfo as _;
        let info = nodes.first()?.as_str().into_connection_info().ok()?;
        // Database 0, as redis-rs's cluster connection takes for every node (it ignores a
        // URL's database): a cluster node refuses `SELECT` of any other, which failed every
        // connect of the reader, so no read of the map landed.
        let settings = info.redis_settings().clone().set_db(0);
        let info = info.set_redis_settings(settings);
        let seeds = nodes
            .iter()
            .filter_map(|node| node.as_str().into_connection_info().ok())
            .filter_map(|node| match node.addr() {
                redis::ConnectionAddr::Tcp(host, port)
                | redis::ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
                _ => None,
            })
            .collect();
        Some(MapReader {
            info,
            seeds,
            next_seed: AtomicUsize::new(0),
            open: std::sync::Mutex::new(None),
        })
    }

    /// The seeds (indices into [`seeds`](Self::seeds)) a read asks while the copy names no
    /// master, up to `tries`, in order: from the one after the last whose read failed, in
    /// the configured order, wrapping. Before, the first two configured nodes were asked on
    /// every read: with those two gone (a node list written before nodes were replaced), no
    /// read landed while the copy was empty.
    fn seed_order(&self, tries: usize) -> impl Iterator<Item = usize> {
        let count = self.seeds.len();
        // SeqCst: read and written only by the one read of the map in flight
        // (`SlotOwners::start_read`); no ordering subtlety to save.
        let first = self.next_seed.load(Ordering::SeqCst);
        (0..count.min(tries)).map(move |i| (first + i) % count)
    }

    /// Seed `at` (an index from [`seed_order`](Self::seed_order)) as a try's target.
    fn seed(&self, at: usize) -> (&str, u16, Asked<'_>) {
        let (host, port) = &self.seeds[at];
        (host.as_str(), *port, Asked::Seed(at))
    }

    /// The read sent to seed `at` failed: the next read asks the seeds after it first.
    fn seed_failed(&self, at: usize) {
        // SeqCst: as in `seed_order`.
        let next = (at + 1) % self.seeds.len().max(1);
        self.next_seed.store(next, Ordering::SeqCst);
    }

    /// `CLUSTER SLOTS` on the node at `host`:`port`, connecting to it first unless the last
    /// read's connection goes there, within `within` in all; an error if it failed or did not
    /// answer in time (the connection is then dropped): [`ReadFailed::Refused`] if the node
    /// answered with an error (`AUTH` refused, `-NOAUTH`, `maxclients`), else
    /// [`ReadFailed::Silent`]. A kept connection whose read fails
    /// (the server closed it since: its idle `timeout`, a restart) is made again once, within
    /// the same `within`: before, the try failed at once and the master was asked last from
    /// then on, as one that does not answer.
    async fn read(&self, host: &str, port: u16, within: Duration) -> Result<Value, ReadFailed> {
        let deadline = Instant::now() + within;
        let kept = self.open.lock().unwrap_or_else(|e| e.into_inner()).take();
        let kept = kept.filter(|(at_host, at_port, _)| at_host == host && *at_port == port);
        let slots = redis::cmd("CLUSTER").arg("SLOTS").to_owned();
        let reading = async {
            if let Some((_, _, mut connection)) = kept
                && let Ok(reply) = slots.query_async::<Value>(&mut connection).await
            {
                return Ok((connection, reply));
            }
            // Closed by the server since the last read (its idle `timeout`, a restart)
            // or broken: not the master's silence. A new connection, within the same
            // budget.
            let mut connection = self.connect(host, port, within).await?;
            let reply = slots.query_async::<Value>(&mut connection).await?;
            Ok::<_, RedisError>((connection, reply))
        };
        let (connection, reply) = until_deadline(reading, deadline)
            .await
            .map_err(|_| ReadFailed::Silent)?
            .map_err(|error| ReadFailed::of(&error))?;
        *self.open.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((host.to_owned(), port, connection));
        Ok(reply)
    }

    /// A new connection to `host`:`port` with the first node's settings.
    async fn connect(
        &self,
        host: &str,
        port: u16,
        within: Duration,
    ) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
        let addr = match self.info.addr() {
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => redis::ConnectionAddr::Tcp(host.to_owned(), port),
        };
        let client = redis::Client::open(self.info.clone().set_addr(addr))?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(within))
            .set_response_timeout(None);
        client
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }
}

/// The first wait of a single server's reconnect series ([`manager_config`]).
const RECONNECT_MIN_DELAY: Duration = Duration::from_millis(10);
/// The longest wait between two connection attempts of a reconnect series, before jitter.
const RECONNECT_MAX_DELAY: Duration = Duration::from_millis(500);
/// The attempts of a reconnect series after its first.
const RECONNECT_RETRIES: usize = 4;

/// The settings of a single server's [`ConnectionManager`], and so its reconnect timers (issue
/// 18). When the connection drops (a call fails on it with an I/O error: the server killed or
/// restarted, a reset), the manager starts a *reconnect series* in the background: a connection
/// attempt (each bounded by `timeout`), then up to [`RECONNECT_RETRIES`] more, waiting 10, 20,
/// 40 and 80 ms before them ([`RECONNECT_MIN_DELAY`] doubling, capped at
/// [`RECONNECT_MAX_DELAY`]), each wait up to doubled by a random jitter: at most 300 ms of
/// waits and 5 attempts. Calls made meanwhile wait for the series, each no longer than its own
/// deadline (a timeout then). A series whose every attempt failed ends with the last
/// attempt's error (a refusal, for a server that is down): the calls waiting get it. The
/// manager hands that error to the next call at once, however long ago the series ended, and
/// starts a new series if it is an I/O error (a refusal, a timeout, a name that did not
/// resolve); that call is sent once more and waits for the new series within its deadline
/// ([`stale_connection_error`]), so a call made after the server is back (the breaker's probe
/// after an outage) reaches it. After a series that ended on another error (`AUTH` refused at
/// the handshake, a name with no address) the manager would start none, and hand that error to
/// every later call: the call that gets it is sent once more on a fresh manager, which replaces
/// the stuck one ([`SingleServer::replace`]; a manager so made is kept at least a second,
/// [`REPLACED_KEPT_AT_LEAST`], so a wrong password costs at most a series a second). So a server that is down keeps being tried,
/// one series per call that finds the last one over; no timer of the manager's outlives a
/// series. (The circuit breaker, not this back-off, is what spares a server that is
/// down the calls.) `tests/redis/failure.rs` runs a series to its end and a recovery after it.
///
/// No response timeout of redis-rs's own: every call made here is bounded by a timeout of ours
/// (its caller's deadline; a batch's, the latest of its callers'), set before the call is sent,
/// so it ends the call first: a second timer per call would only cost its setting and
/// cancelling.
fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(None)
        .set_min_delay(RECONNECT_MIN_DELAY)
        .set_max_delay(RECONNECT_MAX_DELAY)
        .set_number_of_retries(RECONNECT_RETRIES)
}

fn timed_out(server: &Arc<str>, after: Duration, doing: &str) -> BackendError {
    BackendError::at(
        FailureKind::Timeout,
        server.clone(),
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {after:?} ({doing})"),
        ),
    )
}

/// The least time between two reads of a cluster's slot map that replies ask for
/// ([`RedisBackend::fresh_micros`]): a backend's timeout when longer.
const FRESH_AT_LEAST: Duration = Duration::from_secs(1);

/// `duration` in µs, saturating at `u64::MAX`.
fn micros_of(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// `at` in µs since `base` (0 before it, saturating at `u64::MAX`): a time on the server clock's
/// client side ([`ServerClock::client_micros`]).
fn micros_since(base: Instant, at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(base).as_micros()).unwrap_or(u64::MAX)
}

/// Whether a server error of `kind`, to a call on a key of a Redis Cluster, was sent by a node
/// that serves the key's slot (the master the call was routed to): one Redis replies only
/// after its cluster check found the slot served by itself (`processCommand`: the command ran
/// or was refused there), so no other node sends it for a keyed command (a node that does not
/// serve the slot replies a redirect first) but the master importing the slot, after the
/// owner's `ASK` (the owner replied, the `ASK`, after the call was sent: so the reply counts as
/// the owner's only as of that instant, [`RedisBackend::master_replied`]): a script's error
/// (`ERR`), `NOSCRIPT`, `LOADING`, `READONLY`, `EXECABORT`. Not: `MOVED` and `ASK` (a node that does not serve the slot, or no
/// longer holds the key), `TRYAGAIN` (a node importing the slot, after an `ASK`), `CLUSTERDOWN`
/// (any node that finds the cluster, or the slot, down), `CROSSSLOT` (any node), `MASTERDOWN`
/// (a replica), `NOPERM` (checked before the slot, by any node), and codes redis-rs does not
/// know (their origin unknown).
fn sent_by_the_slots_node(kind: ErrorKind) -> bool {
    use redis::ServerErrorKind::{BusyLoading, ExecAbort, NoScript, ReadOnly, ResponseError};
    matches!(
        kind,
        ErrorKind::Server(ResponseError | NoScript | BusyLoading | ReadOnly | ExecAbort)
    )
}

/// A redis-rs error of a `cluster` or single-server connection, classified, naming the server.
fn classify(server: &Arc<str>, cluster: bool, error: RedisError) -> BackendError {
    if let Some(mismatch) = mode_mismatch(server, cluster, &error) {
        return mismatch;
    }
    let kind = if let Some(kind) = wrapped_kind(&error) {
        kind
    } else if error.is_timeout() {
        FailureKind::Timeout
    } else if error.is_connection_refusal() {
        FailureKind::Refused
    } else if error.is_io_error() || error.is_connection_dropped() {
        FailureKind::Connection
    } else {
        match error.kind() {
            ErrorKind::Parse | ErrorKind::UnexpectedReturnType | ErrorKind::RESP3NotSupported => {
                FailureKind::Protocol
            }
            ErrorKind::Server(_) | ErrorKind::Extension => FailureKind::Script,
            ErrorKind::ClusterConnectionNotFound => FailureKind::Connection,
            _ => FailureKind::Other,
        }
    };
    BackendError::at(kind, server.clone(), error)
}

/// The configuration error for a server whose cluster mode does not match the connection's,
/// if `error` says so: a cluster connection to a server with cluster mode off ("ERR This
/// instance has cluster support disabled", from the `CLUSTER SLOTS` redis-rs sends at connect),
/// or a single-server connection to a cluster node (a `MOVED` redirect, which only a cluster
/// connection follows). Of [`FailureKind::Other`]: retrying does not help, and it is not the
/// script's error.
fn mode_mismatch(server: &Arc<str>, cluster: bool, error: &RedisError) -> Option<BackendError> {
    let message = if cluster {
        let disabled = error.kind() == ErrorKind::Server(redis::ServerErrorKind::ResponseError)
            && error.to_string().contains("cluster support disabled");
        if !disabled {
            return None;
        }
        format!(
            "the server is not in cluster mode ({error}): use RedisConfig::single for a \
             standalone server"
        )
    } else {
        if error.kind() != ErrorKind::Server(redis::ServerErrorKind::Moved) {
            return None;
        }
        let (node, slot) = error.redirect_node()?;
        format!(
            "the key's slot {slot} lives on another node, {node}: the server is a Redis Cluster \
             node, which a single-server connection cannot follow; use RedisConfig::cluster"
        )
    };
    Some(BackendError::at(
        FailureKind::Other,
        server.clone(),
        std::io::Error::other(message),
    ))
}

/// The kind of an error redis-rs wrapped as text: a cluster that reached none of its initial
/// nodes reports the last node's error only as the detail of an `Io` error ("Failed to create
/// initial connections - Io: Connection refused (os error 111)"), which would otherwise read as
/// a connection error whatever the cause.
fn wrapped_kind(error: &RedisError) -> Option<FailureKind> {
    if error.kind() != ErrorKind::Io {
        return None;
    }
    let detail = error.detail()?;
    if detail.contains("Connection refused") {
        Some(FailureKind::Refused)
    } else if detail.contains("Parse error") {
        Some(FailureKind::Protocol)
    } else if detail.contains("timed out") || detail.contains("Timeout") {
        Some(FailureKind::Timeout)
    } else {
        None
    }
}

/// The error for a Redis URL (or cluster node list) redis-rs refuses: names the URL, with any
/// password replaced by `***`, and redis-rs's reason.
fn bad_url(urls: &[String], error: &redis::RedisError) -> BackendError {
    // Each node redacted on its own: a later node's user-info must not swallow the ones before.
    let shown: Vec<String> = urls.iter().map(|url| redact(url)).collect();
    BackendError::failed(std::io::Error::other(format!(
        "invalid Redis URL {:?}: {error}",
        shown.join(", ")
    )))
}

/// The scheme to write a cluster's slot owners with: the first configured node's, as redis-rs
/// reads it (case-insensitive: `redis`, `rediss`, `valkey`, `valkeys`), so a TLS cluster's
/// owners read as TLS; `redis` for anything else.
fn owner_scheme(first_node: &str) -> &'static str {
    let scheme = first_node
        .split_once("://")
        .map_or("", |(scheme, _)| scheme);
    ["redis", "rediss", "valkey", "valkeys"]
        .into_iter()
        .find(|known| known.eq_ignore_ascii_case(scheme))
        .unwrap_or("redis")
}

/// `url` with its passwords replaced by `***`: the user-info part's
/// (`scheme://user:password@host`), and a `pass` (or `password`) query parameter's, where
/// redis-rs reads a Unix socket URL's password (`unix:///path?pass=password`).
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let rest = match rest.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info
                .split_once(':')
                .map_or(user_info, |(user, _)| user);
            let hidden = if user_info.contains(':') { ":***" } else { "" };
            format!("{user}{hidden}@{host}")
        }
        None => rest.to_owned(),
    };
    format!("{scheme}://{}", redact_query(&rest))
}

/// `rest` (a URL after its scheme) with the value of each query parameter named `pass` or
/// `password` (any case, percent-encoded or not) replaced by `***`, up to the next `&` (a
/// fragment after it included: the value may hold an unencoded `#`).
fn redact_query(rest: &str) -> String {
    let Some((before, query)) = rest.split_once('?') else {
        return rest.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if is_password_name(name) => format!("{name}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{before}?{}", pairs.join("&"))
}

/// Whether a query parameter's name, form-decoded (`%XX`, `+`), reads `pass` or `password`.
fn is_password_name(name: &str) -> bool {
    let mut decoded = Vec::with_capacity(name.len());
    let mut bytes = name.bytes();
    while let Some(byte) = bytes.next() {
        decoded.push(match byte {
            b'+' => b' ',
            b'%' => {
                let hex = [bytes.next(), bytes.next()];
                let digits = hex.map(|b| b.and_then(|b| char::from(b).to_digit(16)));
                match digits {
                    [Some(high), Some(low)] => (high * 16 + low) as u8,
                    _ => return false,
                }
            }
            byte => byte,
        });
    }
    decoded.eq_ignore_ascii_case(b"pass") || decoded.eq_ignore_ascii_case(b"password")
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::FromRedisValue as _;

    /// The errors ready at a call's first poll that a finished reconnect series kept, and what
    /// each calls for (issue 18): a series' I/O errors are sent once more, its handshake's
    /// `AUTH` refusal and a name with no address on a fresh manager; a reply (`LOADING`, a
    /// script's error) never, nor a live connection's own errors, nor anything that came after
    /// waiting (news).
    #[test]
    fn a_finished_series_errors_are_told_from_replies_and_live_connections_errors() {
        use redis::ServerErrorKind::{BusyLoading, NoScript, ResponseError};
        use std::io::ErrorKind as Io;
        let io = |kind: Io| Err::<(), _>(RedisError::from(std::io::Error::from(kind)));
        let of = |kind: ErrorKind, what: &'static str| Err::<(), _>(RedisError::from((kind, what)));
        let lookup = Err::<(), _>(RedisError::from(std::io::Error::other(
            "failed to lookup address information: Name or service not known",
        )));
        for (error, stale) in [
            (io(Io::ConnectionRefused), Some(Stale::Resend)),
            (io(Io::TimedOut), Some(Stale::Resend)),
            (lookup, Some(Stale::Resend)),
            (
                of(
                    ErrorKind::AuthenticationFailed,
                    "Password authentication failed",
                ),
                Some(Stale::Replace),
            ),
            (
                of(ErrorKind::InvalidClientConfig, "No address found for host"),
                Some(Stale::Replace),
            ),
            (of(ErrorKind::Server(BusyLoading), "LOADING"), None),
            (of(ErrorKind::Server(ResponseError), "ERR"), None),
            (of(ErrorKind::Server(NoScript), "NOSCRIPT"), None),
            (of(ErrorKind::Parse, "parse error"), None),
            (io(Io::ConnectionReset), None),
            (io(Io::BrokenPipe), None),
            (io(Io::UnexpectedEof), None),
            // Only an I/O error's text is read: a reply (a script's error, any server error)
            // with the lookup's words is a reply, never resent; nor an I/O error without them.
            (
                of(
                    ErrorKind::Server(ResponseError),
                    "failed to lookup address information: Name or service not known",
                ),
                None,
            ),
            (
                of(
                    ErrorKind::Parse,
                    "failed to lookup address information: Name or service not known",
                ),
                None,
            ),
            (
                Err(RedisError::from(std::io::Error::other(
                    "address information lookup failed",
                ))),
                None,
            ),
        ] {
            let shown = format!("{:?}", error.as_ref().unwrap_err());
            assert_eq!(stale_connection_error(&error, true), stale, "{shown}");
            assert_eq!(
                stale_connection_error(&error, false),
                None,
                "{shown} after waiting"
            );
        }
        assert_eq!(stale_connection_error(&Ok(()), true), None);
    }

    /// A host name that does not resolve: the series a call waits for ends on the lookup's
    /// error, which the manager keeps and hands to the next call at once (starting another
    /// series). That call must not take the kept error as its own, at once: it is sent once
    /// more and waits for the series its failure started (issue 18: a DNS name gone during an
    /// outage; once it resolves again, the breaker's probe reaches the server). The series run
    /// as tasks of this test's runtime, so the test sees one end instead of sleeping for it.
    /// Skipped where the name resolves (a resolver that answers every name), or where no
    /// resolver answers within 2 s.
    #[tokio::test(flavor = "current_thread")]
    async fn a_call_after_a_series_ended_on_a_failed_lookup_waits_for_a_new_series() {
        const NAME: &str = "floodgate-test.invalid";
        let asked = Instant::now();
        let Err(lookup) = tokio::net::lookup_host((NAME, 6379)).await else {
            eprintln!("{NAME} resolves here: nothing to test");
            return;
        };
        // A resolver that is not reachable answers only after its own timeouts (seconds per
        // lookup, ten lookups here): no test of the resend there, only of the resolver.
        if asked.elapsed() > Duration::from_secs(2) {
            eprintln!("no resolver answers here ({lookup}): nothing to test");
            return;
        }
        let hang_bound = Instant::now() + Duration::from_secs(60);
        let backend = RedisBackend::connect(
            RedisConfig::single(format!("redis://{NAME}:6379"))
                .timeout(Duration::from_secs(10))
                .lazy(),
        )
        .await
        .unwrap();
        let shared = &*backend.shared;
        let command = redis::cmd("PING");
        let call = || async {
            let mut connection = shared.connection.get();
            ready_at_once(query_sent_once_more_if_stale::<String>(
                shared,
                &command,
                &mut connection,
            ))
            .await
        };
        let until_no_task_alive = || async {
            let metrics = tokio::runtime::Handle::current().metrics();
            while metrics.num_alive_tasks() > 0 {
                assert!(Instant::now() < hang_bound, "a series never ended");
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        let (first, at_once) = call().await;
        let first = first.unwrap_err();
        assert!(!at_once, "the first call waits for its series: {first}");
        assert!(
            first
                .to_string()
                .contains("failed to lookup address information"),
            "{first} (the lookup's own error: {lookup})"
        );
        // Handing the error over started another series in the background: until it ends.
        until_no_task_alive().await;
        let (second, at_once) = call().await;
        let second = second.unwrap_err();
        assert!(
            !at_once,
            "the finished series' kept error was handed over as the call's own: {second}"
        );
        assert!(
            second
                .to_string()
                .contains("failed to lookup address information"),
            "{second}"
        );
    }

    /// A stuck manager is replaced once, by the first call that finds it so; one made by a
    /// replacement is not replaced again within [`REPLACED_KEPT_AT_LEAST`] of its making (a
    /// wrong password would make a manager and a series every call), and is after it; the
    /// manager made at connect is replaced at any time. Times are given, not waited for.
    #[test]
    fn a_replacement_is_kept_a_second_before_it_is_replaced_in_turn() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _on = runtime.enter();
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let timeout = Duration::from_secs(1);
        let first =
            ConnectionManager::new_lazy_with_config(client.clone(), manager_config(timeout))
                .unwrap();
        let shared = SharedConnection::Single(SingleServer::new(client, first, timeout));
        let SharedConnection::Single(single) = &shared else {
            unreachable!()
        };
        let generation = |connection: Option<Connection>| match connection {
            Some(Connection::Single(_, generation)) => Some(generation),
            other => panic!("{other:?}"),
        };
        let handle = runtime.handle();
        let t0 = Instant::now();
        assert_eq!(generation(Some(shared.get())), Some(0));
        // Made at connect: replaced at once.
        assert_eq!(generation(single.replace(0, handle, t0)), Some(1));
        assert_eq!(generation(Some(shared.get())), Some(1));
        // A second call that found the first manager stuck sends on the replacement.
        assert_eq!(generation(single.replace(0, handle, t0)), Some(1));
        // The replacement stuck within its second: held back, the call fails as it is.
        let just_short = t0 + REPLACED_KEPT_AT_LEAST - Duration::from_nanos(1);
        assert!(single.replace(1, handle, t0).is_none());
        assert!(single.replace(1, handle, just_short).is_none());
        assert_eq!(generation(Some(shared.get())), Some(1));
        // Its second over: replaced, and the new one held back in turn.
        let t1 = t0 + REPLACED_KEPT_AT_LEAST;
        assert_eq!(generation(single.replace(1, handle, t1)), Some(2));
        assert!(
            single
                .replace(2, handle, t1 + Duration::from_millis(500))
                .is_none()
        );
        assert_eq!(
            generation(single.replace(2, handle, t1 + REPLACED_KEPT_AT_LEAST)),
            Some(3)
        );
        assert_eq!(generation(Some(shared.get())), Some(3));
    }

    /// Replaced managers are freed, their tasks with them: over many replacements (many `AUTH`
    /// outages), what stays is the manager made at connect and the current one. With RESP3
    /// each manager keeps a task of its own (redis-rs's watch for disconnection pushes, aborted
    /// when the manager is dropped), so the runtime's live tasks count the managers alive.
    #[test]
    fn replaced_managers_and_their_tasks_are_freed() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _on = runtime.enter();
        let client = redis::Client::open("redis://127.0.0.1:1/?protocol=resp3").unwrap();
        let timeout = Duration::from_secs(1);
        let first =
            ConnectionManager::new_lazy_with_config(client.clone(), manager_config(timeout))
                .unwrap();
        let single = SingleServer::new(client, first, timeout);
        let settle = || {
            runtime.block_on(async {
                for _ in 0..16 {
                    tokio::task::yield_now().await;
                }
            });
            runtime.metrics().num_alive_tasks()
        };
        let alone = settle();
        assert_eq!(alone, 1, "the first manager's task");
        let mut now = Instant::now();
        for generation in 0..20 {
            let replaced = single.replace(generation, runtime.handle(), now);
            assert!(matches!(replaced, Some(Connection::Single(_, g)) if g == generation + 1));
            drop(replaced);
            now += REPLACED_KEPT_AT_LEAST;
            assert_eq!(settle(), 2, "after replacement {}", generation + 1);
        }
    }

    /// The reconnect timers of a single server, as `manager_config`'s docs state them: the
    /// series' waits are 10, 20, 40 and 80 ms before jitter (doubling from the minimum, under the
    /// cap), five attempts in all, each connection attempt bounded by the backend's timeout, and
    /// no response timeout of redis-rs's own.
    #[test]
    fn the_reconnect_series_is_five_attempts_with_10_to_80_ms_between() {
        let timeout = Duration::from_millis(123);
        let config = manager_config(timeout);
        assert_eq!(config.connection_timeout(), Some(timeout));
        assert_eq!(config.response_timeout(), None);
        assert_eq!(config.number_of_retries(), 4);
        assert_eq!(config.min_delay(), Duration::from_millis(10));
        assert_eq!(config.max_delay(), Some(Duration::from_millis(500)));
        assert!((config.exponent_base() - 2.0).abs() < f32::EPSILON);
        let waits: Vec<Duration> = (0..config.number_of_retries())
            .scan(config.min_delay(), |wait, _| {
                let this = *wait;
                // The base is 2 (asserted above): doubled exactly, not in f32.
                *wait = (*wait * 2).min(config.max_delay().unwrap());
                Some(this)
            })
            .collect();
        let ms = Duration::from_millis;
        assert_eq!(waits, [ms(10), ms(20), ms(40), ms(80)]);
        // Jitter adds up to one more of each: at most 300 ms of waits in a series.
        assert_eq!(waits.iter().sum::<Duration>() * 2, ms(300));
    }

    #[test]
    fn passwords_are_redacted_from_the_user_info_and_the_query() {
        for (url, shown) in [
            ("redis://u:pw@h:6379/0", "redis://u:***@h:6379/0"),
            ("redis://h:6379", "redis://h:6379"),
            ("unix:///s.sock?pass=pw", "unix:///s.sock?pass=***"),
            (
                "unix:///s.sock?db=1&pass=p@w&user=u",
                "unix:///s.sock?db=1&pass=***&user=u",
            ),
            (
                "unix:///s.sock?user=u&pass=p:w@x",
                "unix:///s.sock?user=u&pass=***",
            ),
            (
                "unix:///s.sock?Password=pw#frag",
                "unix:///s.sock?Password=***",
            ),
            (
                "unix:///s.sock?pa%73s=pw&p+ss=x",
                "unix:///s.sock?pa%73s=***&p+ss=x",
            ),
            ("redis://:a?pass=b@h", "redis://:***@h"),
            ("unix:///s.sock?db=1", "unix:///s.sock?db=1"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn integer_fields_read_as_luas_percent_d_writes_them_and_nothing_else() {
        for (text, expected) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("-12", Some(-12)),
            ("1795873033520664", Some(1_795_873_033_520_664)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("", None),
            ("-", None),
            ("+1", None),
            ("1.5", None),
            ("1e3", None),
            (" 1", None),
            ("0x3", None),
        ] {
            assert_eq!(integer(text.as_bytes()), expected, "{text:?}");
        }
    }

    #[test]
    fn a_one_decision_reply_is_read_from_one_string_or_an_array() {
        let read = |value: Value| Fields::from_redis_value(value).map(|f| f.0);
        let text = Value::BulkString(b"1 10 9 0 60000000 1795873033520664".to_vec());
        assert_eq!(
            read(text).unwrap(),
            [1, 10, 9, 0, 60_000_000, 1_795_873_033_520_664]
        );
        let array = Value::Array(vec![Value::Int(2), Value::Int(0), Value::Int(-3)]);
        assert_eq!(read(array).unwrap(), [2, 0, -3]);
        for bad in ["1  2", "1 2 ", "1 x", ""] {
            let error = read(Value::BulkString(bad.as_bytes().to_vec())).unwrap_err();
            assert!(
                error.to_string().contains("not integers"),
                "{bad:?}: {error}"
            );
        }
    }

    #[test]
    fn a_list_is_one_argument_of_decimals_separated_by_spaces() {
        let mut command = Cmd::new();
        spaced(&mut command, [7, 0, u64::MAX].into_iter());
        spaced(&mut command, [42].into_iter());
        let packed = command.get_packed_command();
        assert_eq!(
            String::from_utf8(packed).unwrap(),
            "*2\r\n$24\r\n7 0 18446744073709551615\r\n$2\r\n42\r\n"
        );
    }

    #[test]
    fn spaced_writes_every_number_as_its_decimal_digits() {
        // Each digit count's ends, odd and even lengths, and a server-clock deadline.
        let mut values = vec![u64::MAX, u64::MAX - 1, 1_764_000_000_123_456];
        let mut power = 1u64;
        for _ in 0..20 {
            values.extend([power - 1, power, power + 1, power.saturating_mul(10) - 1]);
            power = power.saturating_mul(10);
        }
        let mut command = Cmd::new();
        spaced(&mut command, values.iter().copied());
        let expected = values.iter().map(u64::to_string).collect::<Vec<_>>();
        let expected = expected.join(" ");
        let packed = String::from_utf8(command.get_packed_command()).unwrap();
        assert_eq!(
            packed,
            format!("*1\r\n${}\r\n{expected}\r\n", expected.len())
        );
    }

    #[test]
    fn deadlines_are_client_instants_shifted_by_the_offset() {
        let clock = ServerClock::new();
        assert_eq!(
            clock.server_micros(clock.base),
            0,
            "no deadline while unknown"
        );
        clock.sample(1_700_000_000_000_000, clock.base, 0);
        let at = clock.base + Duration::from_micros(2_500);
        assert_eq!(clock.server_micros(at), 1_700_000_000_002_500);
        clock.sample(-5, at, clock.client_micros(at)); // nonsense from a server is ignored
        assert_eq!(clock.server_micros(at), 1_700_000_000_002_500);
    }

    /// A `CLUSTER SLOTS` reply giving every slot to `port` but `slot`, given to `slot_port`.
    fn slot_map(slot: u16, slot_port: i64, port: i64) -> Value {
        let range = |first: u16, last: u16, port: i64| {
            let master = Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
            ]);
            Value::Array(vec![
                Value::Int(i64::from(first)),
                Value::Int(i64::from(last)),
                master,
            ])
        };
        let mut ranges = vec![range(slot, slot, slot_port)];
        if slot > 0 {
            ranges.push(range(0, slot - 1, port));
        }
        if slot < 16_383 {
            ranges.push(range(slot + 1, 16_383, port));
        }
        Value::Array(ranges)
    }

    /// A current-thread runtime with time and I/O, for the tests that drive futures here.
    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A limiter named `name` on a lazy cluster backend whose seed nothing listens on (a call
    /// that goes out fails, 50 ms timeout), fail-closed, on `clock`, with a breaker that opens
    /// after `failures`; inside a current-thread runtime the caller keeps entered.
    fn limiter_on_a_dead_cluster(
        name: &str,
        failures: u32,
        clock: crate::ManualClock,
    ) -> (
        tokio::runtime::Runtime,
        RedisBackend,
        crate::redis::RedisLimiter<crate::FixedWindow, crate::ManualClock>,
    ) {
        use crate::backend::{BreakerConfig, FailurePolicy};
        use crate::redis::RedisLimiter;
        let runtime = current_thread();
        // Nothing listens on port 1: a call that goes out fails (never short-circuited).
        let config =
            RedisConfig::cluster(["redis://127.0.0.1:1"]).timeout(Duration::from_millis(50));
        let backend = {
            let _inside = runtime.enter();
            runtime
                .block_on(RedisBackend::connect(config.lazy()))
                .unwrap()
        };
        let window = crate::FixedWindow::new(10, Duration::from_secs(60)).unwrap();
        let breaker =
            BreakerConfig::new(failures, Duration::from_secs(5), Duration::from_secs(60)).unwrap();
        let limiter =
            RedisLimiter::with_clock(&backend, name, window, FailurePolicy::FailClosed, clock)
                .unwrap()
                .with_breaker(Some(breaker));
        (runtime, backend, limiter)
    }

    /// A key's calls go through the breaker of its slot's owner in the backend's copy of the
    /// slot map. With that master's breaker open, a call is short-circuited and starts a re-read
    /// of the map (no call was sent, so no failure would); once the copy names the slot's new
    /// owner, the key's calls go through the new owner's closed breaker.
    #[test]
    fn a_slot_moved_off_a_master_with_an_open_breaker_leaves_that_breaker() {
        use crate::backend::BreakerState;
        let (runtime, backend, limiter) =
            limiter_on_a_dead_cluster("moved", 1, crate::ManualClock::new());
        let _inside = runtime.enter();
        let slot = slot_of(limiter.redis_keys("k")[0].as_bytes());
        let (old, new) = ("redis://127.0.0.1:7000", "redis://127.0.0.1:7001");
        let owners = &backend.shared.owners;
        assert_eq!(limiter.node_of("k"), None, "no slot map read yet");
        owners.update(&slot_map(slot, 7000, 7001), "redis", 0);
        assert_eq!(limiter.node_of("k").as_deref(), Some(old));
        let breakers = limiter.breaker().unwrap();
        breakers.node(old).admit().unwrap().failed();
        let outcome = runtime
            .block_on(limiter.try_acquire_outcome("k", 1))
            .unwrap();
        assert!(outcome.failure().is_some_and(BackendError::is_circuit_open));
        assert!(
            owners.start_read(Instant::now(), Duration::ZERO).is_none(),
            "the short-circuited call started no re-read of the slot map"
        );
        // The re-read's answer (simulated): the slot moved to the other master.
        owners.update(&slot_map(slot, 7001, 7000), "redis", 0);
        assert_eq!(limiter.node_of("k").as_deref(), Some(new));
        let outcome = runtime
            .block_on(limiter.try_acquire_outcome("k", 1))
            .unwrap();
        let failure = outcome.failure().expect("nothing listens");
        assert!(!failure.is_circuit_open(), "{failure}");
        assert_eq!(breakers.get(old).unwrap().state(), BreakerState::Open);
        assert!(
            breakers.get(new).is_some(),
            "the new owner's breaker took the call"
        );
    }

    /// A master the slot map no longer names (failed over, its slots all moved) gets no call,
    /// so its open breaker is never probed: it must not stay listed, nor keep
    /// `NodeBreakers::state` open, once the copy of the map no longer names it.
    #[test]
    fn an_open_breaker_of_a_master_the_slot_map_no_longer_names_is_dropped() {
        use crate::backend::BreakerState;
        let clock = crate::ManualClock::new();
        let (runtime, backend, limiter) = limiter_on_a_dead_cluster("orphan", 2, clock.clone());
        let _inside = runtime.enter();
        let slot = slot_of(limiter.redis_keys("k")[0].as_bytes());
        let (old, new) = ("redis://127.0.0.1:7000", "redis://127.0.0.1:7001");
        let owners = &backend.shared.owners;
        owners.update(&slot_map(slot, 7000, 7001), "redis", 0);
        let breakers = limiter.breaker().unwrap();
        for _ in 0..2 {
            breakers.node(old).admit().unwrap().failed();
        }
        assert_eq!(breakers.node(old).state(), BreakerState::Open);
        // The failover: every slot is on the other master now.
        owners.update(&slot_map(slot, 7001, 7001), "redis", 0);
        assert_eq!(limiter.node_of("k").as_deref(), Some(new));
        // A call on the new master (nothing listens: one failure of two, still closed).
        let outcome = runtime
            .block_on(limiter.try_acquire_outcome("k", 1))
            .unwrap();
        assert!(outcome.failure().is_some_and(|e| !e.is_circuit_open()));
        // No call names the old master, so however long passes, nothing probes its breaker.
        clock.advance(Duration::from_secs(3_600));
        assert!(
            breakers.get(old).is_none(),
            "the breaker of a master no slot names is still kept: {:?}",
            breakers.nodes()
        );
        assert_ne!(
            breakers.state(),
            BreakerState::Open,
            "an unnamed master's breaker, never probed, keeps the state open: {:?}",
            breakers.nodes()
        );
        assert_eq!(breakers.short_circuited(), 0);
    }

    #[test]
    fn concurrent_script_loads_of_one_node_and_script_share_one() {
        let runtime = current_thread();
        let loads = ScriptLoads::default();
        let sent = std::sync::atomic::AtomicUsize::new(0);
        let (release, released) = tokio::sync::watch::channel(false);
        let load = || async {
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut released = released.clone();
            let _ = released.wait_for(|r| *r).await;
            Ok(())
        };
        runtime.block_on(async {
            let waiting = async {
                let calls = (0..8).map(|_| loads.load("".into(), "hash", load));
                let other = loads.load("7".into(), "hash", load);
                let (results, other) = tokio::join!(join_all(calls), other);
                assert!(results.iter().chain([&other]).all(Result::is_ok));
            };
            let releasing = async {
                tokio::task::yield_now().await;
                release.send(true).unwrap();
            };
            tokio::join!(waiting, releasing);
        });
        assert_eq!(sent.into_inner(), 2, "one load per node and script");
        assert_eq!(loads.len(), 0, "finished loads are removed");
        // A failed load is not shared: the next waiter sends its own.
        let failures = std::sync::atomic::AtomicUsize::new(0);
        let failing = || async {
            failures.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Err(RedisError::from(std::io::Error::other("refused")))
        };
        runtime.block_on(async {
            let calls = (0..3).map(|_| loads.load("".into(), "hash", failing));
            assert!(join_all(calls).await.iter().all(Result::is_err));
        });
        assert_eq!(failures.into_inner(), 3);
    }

    /// A load that fails, or whose caller gives up mid-load (its deadline, a dropped future),
    /// must not leave its entry behind: the key is a node or, while the slot's owner is not
    /// known, a slot, so entries left by failures would pile up to 16,384 per script.
    #[test]
    fn failed_and_dropped_script_loads_leave_no_entry() {
        let runtime = current_thread();
        let loads = ScriptLoads::default();
        let failing = || async { Err::<(), _>(RedisError::from(std::io::Error::other("refused"))) };
        runtime.block_on(async {
            for slot in 0..100 {
                let node: Arc<str> = format!("slot {slot}").into();
                assert!(loads.load(node, "hash", failing).await.is_err());
            }
        });
        assert_eq!(loads.len(), 0, "failed loads left their entries");
        // A caller that gives up mid-load (dropped after its first poll).
        let never = || std::future::pending::<redis::RedisResult<()>>();
        runtime.block_on(async {
            for slot in 0..100 {
                let node: Arc<str> = format!("slot {slot}").into();
                let load = loads.load(node, "hash", never);
                let given_up = tokio::time::timeout(Duration::ZERO, load).await;
                assert!(given_up.is_err());
            }
        });
        assert_eq!(loads.len(), 0, "dropped loads left their entries");
    }

    /// A caller waiting on another's load is not stranded when that caller is dropped
    /// mid-load: it sends its own load, and returns with it.
    #[test]
    fn a_waiter_on_a_load_whose_caller_is_dropped_sends_its_own() {
        let runtime = current_thread();
        let loads = ScriptLoads::default();
        let sent = std::sync::atomic::AtomicUsize::new(0);
        let never = || async {
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::future::pending::<redis::RedisResult<()>>().await
        };
        let answers = || async {
            sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        };
        let waited = runtime.block_on(async {
            let mut first = Box::pin(loads.load("n".into(), "hash", never));
            let mut second = Box::pin(loads.load("n".into(), "hash", answers));
            // Both polled once: the first is loading, the second waits for it.
            assert!(pending_once(&mut first).await, "the first loads");
            assert!(pending_once(&mut second).await, "the second waits");
            assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 1);
            drop(first);
            // Bounded so that a stranded waiter fails the test instead of hanging it.
            tokio::time::timeout(Duration::from_secs(60), second).await
        });
        assert!(waited.is_ok_and(|r| r.is_ok()), "the waiter was stranded");
        assert_eq!(sent.into_inner(), 2, "the waiter sent its own load");
        assert_eq!(loads.len(), 0);
    }

    /// Polls `future` once: whether it was pending.
    async fn pending_once<F: std::future::Future + Unpin>(future: &mut F) -> bool {
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::pin::Pin::new(&mut *future).poll(cx).is_pending())
        })
        .await
    }

    /// Awaits every future of `futures` concurrently on this task.
    async fn join_all<F: std::future::Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
        let mut set = Vec::new();
        for future in futures {
            set.push(Box::pin(future));
        }
        let mut outputs: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
        std::future::poll_fn(|cx| {
            let mut pending = false;
            for (future, output) in set.iter_mut().zip(outputs.iter_mut()) {
                if output.is_none() {
                    match future.as_mut().poll(cx) {
                        std::task::Poll::Ready(value) => *output = Some(value),
                        std::task::Poll::Pending => pending = true,
                    }
                }
            }
            if pending {
                std::task::Poll::Pending
            } else {
                std::task::Poll::Ready(())
            }
        })
        .await;
        outputs.into_iter().map(Option::unwrap).collect()
    }

    /// The map reader connects with the first node's settings (its password here; TLS needs a
    /// redis-rs feature this crate does not turn on), and reads from the configured nodes
    /// while the copy names no master; its `Debug` shows no password.
    #[test]
    fn the_map_reader_takes_the_first_nodes_settings_and_every_nodes_address() {
        let nodes = [
            "redis://:secret@10.0.0.1:7000",
            "redis://10.0.0.2:7001",
            "redis://[::1]:7002",
        ]
        .map(String::from);
        let reader = MapReader::new(&nodes).expect("TCP nodes");
        let seeds: Vec<(&str, u16)> = reader.seeds.iter().map(|(h, p)| (&**h, *p)).collect();
        assert_eq!(
            seeds,
            [("10.0.0.1", 7000), ("10.0.0.2", 7001), ("::1", 7002)]
        );
        assert_eq!(reader.info.redis_settings().password(), Some("secret"));
        assert!(!format!("{reader:?}").contains("secret"));
        let order = |tries| reader.seed_order(tries).collect::<Vec<_>>();
        assert_eq!(order(2), [0, 1], "the configured order first");
        reader.seed_failed(0);
        reader.seed_failed(1);
        assert_eq!(order(2), [2, 0], "after the last that failed, wrapping");
        reader.seed_failed(2);
        assert_eq!(order(5), [0, 1, 2], "each once");
        assert!(MapReader::new(&[]).is_none());
    }

    /// A cluster node URL's database number (`redis://host:port/3`) is not the map reader's:
    /// redis-rs's cluster connection ignores it (every node connection uses database 0), and
    /// a cluster node refuses `SELECT` of any other (`ERR SELECT is not allowed in cluster
    /// mode`), so a reader that sent it failed every connect, and no background read of the
    /// slot map ever landed. The rest of the first node's settings are kept.
    #[test]
    fn the_map_reader_ignores_a_node_urls_database_as_the_cluster_connection_does() {
        let nodes = ["redis://user:secret@10.0.0.1:7000/3?protocol=resp3"].map(String::from);
        let reader = MapReader::new(&nodes).expect("TCP nodes");
        let settings = reader.info.redis_settings();
        assert_eq!(settings.db(), 0, "a cluster node refuses SELECT 3");
        assert_eq!(settings.username(), Some("user"));
        assert_eq!(settings.password(), Some("secret"));
        assert_eq!(settings.protocol(), redis::ProtocolVersion::RESP3);
    }

    #[test]
    fn slot_owners_are_written_with_the_first_nodes_scheme() {
        for (node, scheme) in [
            ("redis://h:7000", "redis"),
            ("rediss://h:7000", "rediss"),
            ("REDISS://h:7000", "rediss"),
            ("valkey://h:7000", "valkey"),
            ("valkeys://u:pw@h:7000", "valkeys"),
            ("h:7000", "redis"),
        ] {
            assert_eq!(owner_scheme(node), scheme, "{node}");
        }
    }

    #[test]
    fn failures_are_classified_and_name_the_server() {
        let server: Arc<str> = "redis://127.0.0.1:6379".into();
        let io = |kind| RedisError::from(std::io::Error::new(kind, "x"));
        assert_eq!(
            classify(&server, false, io(std::io::ErrorKind::ConnectionRefused)).kind(),
            FailureKind::Refused
        );
        assert_eq!(
            classify(&server, false, io(std::io::ErrorKind::TimedOut)).kind(),
            FailureKind::Timeout
        );
        assert_eq!(
            classify(&server, false, io(std::io::ErrorKind::ConnectionReset)).kind(),
            FailureKind::Connection
        );
        let parse = RedisError::from((ErrorKind::Parse, "bad frame"));
        assert_eq!(
            classify(&server, false, parse).kind(),
            FailureKind::Protocol
        );
        // A cluster that reached none of its nodes: the cause survives only as text.
        let initial = |detail: &str| {
            let error = RedisError::from((
                ErrorKind::Io,
                "Failed to create initial connections",
                detail.to_owned(),
            ));
            classify(&server, true, error).kind()
        };
        let refused = initial("Io: Connection refused (os error 111)");
        assert_eq!(refused, FailureKind::Refused);
        let garbage = initial("Io: Incompatible type - Parse error at 1");
        assert_eq!(garbage, FailureKind::Protocol);
        let reset = initial("Io: Connection reset by peer (os error 104)");
        assert_eq!(reset, FailureKind::Connection);
        // A server whose cluster mode does not match the connection's: a configuration error
        // saying so, not the script's error.
        let moved = RedisError::from((
            ErrorKind::Server(redis::ServerErrorKind::Moved),
            "An error was signalled by the server",
            "10096 127.0.0.1:7001".to_owned(),
        ));
        let on_single = classify(&server, false, moved.clone());
        assert_eq!(on_single.kind(), FailureKind::Other);
        let text = on_single.to_string();
        assert!(
            text.contains("slot 10096 lives on another node, 127.0.0.1:7001"),
            "{text}"
        );
        assert!(text.contains("use RedisConfig::cluster"), "{text}");
        // A cluster connection follows MOVED itself: one it gives up on is the server's error.
        assert_eq!(classify(&server, true, moved).kind(), FailureKind::Script);
        let disabled = || {
            RedisError::from((
                ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "An error was signalled by the server",
                "This instance has cluster support disabled".to_owned(),
            ))
        };
        let on_cluster = classify(&server, true, disabled());
        assert_eq!(on_cluster.kind(), FailureKind::Other);
        assert!(
            on_cluster.to_string().contains("not in cluster mode"),
            "{on_cluster}"
        );
        assert_eq!(
            classify(&server, false, disabled()).kind(),
            FailureKind::Script
        );
        let timeout = timed_out(&server, Duration::from_millis(5), "deciding");
        assert!(timeout.is_timeout());
        assert_eq!(
            timeout.to_string(),
            "timeout at redis://127.0.0.1:6379: no answer within 5ms (deciding)"
        );
    }

    /// On a cluster, a server error is credited to the master the copy of the slot map names
    /// for the call's key only when that master provably sent it: one Redis sends only once
    /// the node found it serves the key's slot (a script's error, `NOSCRIPT`, `LOADING`,
    /// `READONLY`, `EXECABORT`). A redirect (`MOVED`, `ASK`: from a node that does not serve
    /// the slot, or not the key), `TRYAGAIN`, `CLUSTERDOWN`, `CROSSSLOT`, `MASTERDOWN` and
    /// `NOPERM` (checked before the slot) may come from any node: redis-rs does not say which,
    /// and crediting them would keep a master that does not answer looking alive. They count
    /// as the cluster's reply only (the backend-wide word). A master's reply counts as of the
    /// instant its call was sent (`RedisBackend::master_replied`).
    #[test]
    fn a_cluster_error_reply_counts_as_the_masters_only_when_the_master_sent_it() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let config = RedisConfig::cluster(["redis://127.0.0.1:1"]).lazy();
        let backend = runtime.block_on(RedisBackend::connect(config)).unwrap();
        // One master owning every slot, at `port`.
        let map = |port: i64| {
            let node = Value::Array(vec![
                Value::BulkString(b"127.0.0.1".to_vec()),
                Value::Int(port),
            ]);
            Value::Array(vec![Value::Array(vec![
                Value::Int(0),
                Value::Int(16_383),
                node,
            ])])
        };
        // Read at the clock's origin, before any reply: the master's word then says whether
        // any reply since was credited to it (a master's time is kept only if later).
        const READ_AT: u64 = 0;
        backend.shared.owners.update(&map(7000), "redis", READ_AT);
        let key = "{k}";
        let slot = slot_of(key.as_bytes());
        let error = |resp: &str| {
            let value = redis::parse_redis_value(resp.as_bytes()).unwrap();
            value.extract_error().unwrap_err()
        };
        for resp in [
            "-MOVED 866 127.0.0.1:7001\r\n",
            "-ASK 866 127.0.0.1:7001\r\n",
            "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            "-CLUSTERDOWN The cluster is down\r\n",
            "-CLUSTERDOWN Hash slot not served\r\n",
            "-CROSSSLOT Keys in request don't hash to the same slot\r\n",
            "-MASTERDOWN Link with MASTER is down\r\n",
            "-NOPERM this user has no permissions to run the 'evalsha' command\r\n",
        ] {
            let error = error(resp);
            assert!(matches!(error.kind(), ErrorKind::Server(_)), "{resp:?}");
            backend.replied_with(&error, Some(key), Instant::now());
            assert_eq!(
                backend.shared.owners.owner_last_reply(slot),
                Some(READ_AT),
                "{resp:?} was credited to the key's master"
            );
        }
        assert!(
            backend.shared.last_reply.answered_within(0, u64::MAX),
            "a node of the cluster replied"
        );
        for (resp, port) in [
            "-ERR user_script:1: Script attempted to access nonexistent global variable\r\n",
            "-NOSCRIPT No matching script. Please use EVAL.\r\n",
            "-LOADING Redis is loading the dataset in memory\r\n",
            "-READONLY You can't write against a read only replica.\r\n",
        ]
        .into_iter()
        .zip(7001..)
        {
            // A master new to the map, read at the origin.
            backend.shared.owners.update(&map(port), "redis", READ_AT);
            let error = error(resp);
            let sent = Instant::now();
            backend.replied_with(&error, Some(key), sent);
            let credited = backend.shared.owners.owner_last_reply(slot);
            let sent = backend.shared.clock.client_micros(sent);
            assert_eq!(credited, Some(sent), "{resp:?}: as of the call's send");
        }
        drop(backend);
        drop(runtime);
    }
}
