//! Distributed limiting on Redis and Redis Cluster (feature `redis`).
//!
//! The same algorithms as the local limiters, configured by the same types (one configuration
//! type per algorithm, whatever runs it), each run as one Lua script that Redis runs atomically:
//!
//! | configuration | Redis state (per limiter key) | Redis's own constraints (checked by [`RedisLimiter::new`]) |
//! |---|---|---|
//! | [`FixedWindow`](crate::FixedWindow) (`new`) | counter, `INCRBY` + `PEXPIRE` on the first hit | window in whole ms |
//! | [`FixedWindow`](crate::FixedWindow) (`aligned`) | hash `{i, c}`, `PEXPIREAT` at the window's end | window in whole ms, aligned to the server's clock |
//! | [`SlidingWindow`](crate::SlidingWindow) | hash of cells (field = cell index) | window and cell in whole ms, at most [`MAX_CELLS`] cells |
//! | [`SlidingLog`](crate::SlidingLog) | sorted set, one entry per permit (+ a sequence key) | window in whole ms; exact; a denial adds nothing |
//! | [`Gcra`](crate::Gcra) (= [`TokenBucket`](crate::TokenBucket), [`LeakyBucket`](crate::LeakyBucket)) | the theoretical arrival time | at least 1 µs per permit; expires when full again |
//!
//! Every decision:
//! * is **one round trip**: `EVALSHA` (redis-rs [`Script`](redis::Script); on `NOSCRIPT`, after a
//!   restart or `SCRIPT FLUSH`, it loads the script, on a cluster on the key's master only, and
//!   runs it again; a call redirected to a master without the script, during a slot's
//!   migration, is then sent once as `EVAL` with the source), **shared** with the limiter's
//!   concurrent decisions (below);
//! * is **atomic**: check and update happen inside the script, so no two callers can both take the
//!   last permit;
//! * reads time from the **server** (`TIME`, or the key's TTL), never from the client's clock, so
//!   clients whose clocks disagree still share one timeline;
//! * leaves **every key with a TTL**; a key found without one (written by hand, or by an old
//!   client) is repaired by the next decision instead of blocking its limit forever;
//! * returns the same [`Decision`](crate::Decision) as the local limiters (durations have
//!   microsecond resolution).
//!
//! Keys are `{name:key}:suffix`: all keys of one limiter key share the hash tag `{name:key}`, so
//! each script touches one slot and the same code runs unchanged on a Redis Cluster
//! ([`RedisConfig::cluster`]).
//!
//! Calls are async and run on the caller's tokio runtime ([`RedisLimiter::try_acquire`],
//! [`acquire`](RedisLimiter::acquire), [`try_acquire_for`](RedisLimiter::try_acquire_for),
//! [`try_acquire_outcome`](RedisLimiter::try_acquire_outcome)); the sync forms are `blocking_*`
//! (tokio's naming) on a backend made by [`RedisBackend::blocking_connect`]. All callers of one
//! [`RedisBackend`] share one multiplexed connection per node, which pipelines their requests.
//!
//! **Coalescing.** A limiter sends a decision at once when none of its calls is out, so a lone
//! caller waits for one round trip and nothing else. Decisions made while its call is out queue,
//! and go together in the next call (a second call goes out while many wait, so that two
//! batches pipeline), to a batch
//! form of the script that decides the batch's decisions in queue order on the server's clock,
//! each against its own deadline: `N` decisions on one key admit exactly what `N` sequential
//! calls would, and each caller gets its own [`Decision`](crate::Decision) (breaker, deny cache
//! and policy see it as before). Across calls out at the same time, each decision is exact
//! against the key's state in the order Redis runs the calls (not necessarily queue order). A
//! batch holds at most 256 decisions, and sliding-log decisions touching at most as many
//! sorted-set entries as one call at the per-call cap (so a batch holds the server no longer
//! than the costliest single call). Every batch script reads each key once per batch: the
//! fixed window (anchored and aligned) and GCRA ones reply each key's state as read (the
//! client replays the decisions from it), so a hot key costs Redis little more per batch than
//! per decision; the sliding window and sliding log ones work out each decision in the script
//! and write a key's admissions at once; a
//! batch on one key whose decisions all ask the same `n` (none past its deadline) is decided
//! by arithmetic, with no step per decision on the server.
//! A queued caller whose future is dropped before its batch is taken sends nothing; the batch
//! is sent by a task on the runtime that built the connection (the one that runs the
//! connection itself), not by any one caller nor on a caller's runtime, and a caller's own call
//! lets the next one out when its reply comes, whether or not the caller is polled again, so no
//! cancelled caller, no caller never polled again, and no caller's runtime left idle or shut
//! down, strands the others; if the connection's
//! runtime shuts down, the queued callers get a connection error at once. On a Redis Cluster a batch
//! holds one limiter key (one hash tag, one slot); batches for different keys are pipelined.
//! Each request carries a deadline on the server's clock and the script refuses it, taking
//! nothing, once that is past (see [`RedisBackend`]). On a Redis Cluster, a request whose
//! connection drops after the script ran and before its reply came is sent again by redis-rs's
//! cluster client and decided again if it arrives before that deadline: it takes what it asked
//! once more per copy (under-admission; a lease's refund lands at most once; see
//! [`RedisBackend`], "What can still be consumed"). When Redis does not answer within the
//! timeout, the limiter's [`FailurePolicy`](crate::backend::FailurePolicy) decides (fail open,
//! fail closed, or a local limiter with a share of the limit), counts the failure, and reports
//! it, classified ([`FailureKind`](crate::backend::FailureKind)) and naming the server, to
//! callers that use [`RedisLimiter::try_acquire_outcome`]. After repeated failures a circuit
//! breaker ([`RedisLimiter::with_breaker`], on by default; one per master on a Redis Cluster)
//! stops calling Redis (that master) for a back-off: the policy decides at once until a probe
//! succeeds. A key Redis denied is denied locally until
//! its `retry_after`, without a round trip ([`RedisLimiter::with_deny_cache`], on by default:
//! Redis's `retry_after` is exact).
//!
//! ```no_run
//! use floodgate::backend::FailurePolicy;
//! use floodgate::redis::{RedisBackend, RedisConfig, RedisLimiter};
//! use floodgate::{Gcra, Rate};
//! use std::time::Duration;
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Eager: a wrong address or a closed port fails here, naming the server.
//! let backend = RedisBackend::connect(
//!     RedisConfig::single("redis://127.0.0.1:6379").timeout(Duration::from_millis(50)),
//! )
//! .await?;
//! let limiter = RedisLimiter::new(
//!     &backend,
//!     "api",
//!     Gcra::new(Rate::per_second(10), 20)?,
//!     FailurePolicy::FailOpen,
//! )?;
//! let outcome = limiter.try_acquire_outcome("tenant-7", 1).await?;
//! if let Some(error) = outcome.failure() {
//!     eprintln!("redis unavailable ({}), decided by policy: {error}", error.kind());
//! }
//! assert!(outcome.decision().limit() == 20);
//! # Ok(()) }
//! ```

/// A script built once from Lua sources in this folder, concatenated in order (a prelude such as
/// `exact.lua` first): `static S: LazyLock<LuaScript> = lua_script!("exact.lua", "gcra.lua");`.
macro_rules! lua_script {
    ($($file:literal),+ $(,)?) => {
        std::sync::LazyLock::new(|| $crate::redis::lua_script::LuaScript::new(concat!($(include_str!($file)),+)))
    };
}

mod coalesce;
mod connection;
mod fixed_window;
mod gcra;
mod leased;
mod limiter;
mod lua_script;
mod refund_name;
mod release_error;
mod sliding_log;
mod sliding_window;
mod slot_owners;

pub use connection::{RedisBackend, RedisConfig};
pub use leased::{DroppedLeases, LeaseAlgorithm, LeaseCounts, LeasedKey};
pub use limiter::{RedisAlgorithm, RedisLimiter};
pub use release_error::ReleaseError;
pub use sliding_window::MAX_CELLS;
