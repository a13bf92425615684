//! Distributed limiting on memcached (feature `memcached`): the seeds' sliding window of
//! cells ([`SlidingWindow::cell`](crate::SlidingWindow::cell) long), without their
//! check-then-increment race.
//!
//! The seeds read the window's cells, summed them, and incremented the current cell if the sum
//! was under the limit. Read-then-increment is not atomic: callers that read the same sum all
//! pass. [`MemcachedLimiter`] turns the order around:
//!
//! 1. **increment first**: `add <cell> 0 <ttl> noreply` (create the current cell if absent, with
//!    its expiry) then `incr <cell> <n>`;
//! 2. **then read** every cell of the window, and the one after it, in one multi-get, and sum;
//! 3. admit if the sum (this request's `n` included) is at most the limit; otherwise **take the
//!    permits back** (`decr <cell> <n>`) and deny.
//!
//! The three commands of steps 1–2 go out in one write: memcached runs one connection's commands
//! in order, so the read sees the increment.
//!
//! # The guarantee
//! For any `cells` consecutive cells, the permits admitted in them never exceed the limit, however
//! many callers race. Why: take the admitted request `R` whose increment reached memcached last.
//! Every other admitted request `R'` in those cells incremented before `R` did, hence before `R`'s
//! read, and an admitted request never takes its permits back; so `R`'s read counted all of them
//! (plus, perhaps, permits of denied requests not yet taken back, which only add), and `R` was
//! admitted only because that sum fit the limit. This needs `R` to have read `R'`'s cell: it
//! reads the window ending at its own cell and one cell after, which holds whenever `R'` read its
//! clock less than one cell after `R` did (the skew tolerance below).
//!
//! # The cost
//! * An admitted request costs **one round trip**; a denied one **two** (the `decr`).
//! * Counts briefly include denied requests (between their `incr` and `decr`). A request is
//!   denied when the admitted permits in its window, plus its own `n`, plus the permits of
//!   requests incremented but not yet taken back at the moment of its read, exceed the limit. So
//!   concurrent requests can be denied that a serial order would admit — at most the permits of
//!   the requests overlapping them in time (with 9 of 10 taken, two concurrent requests for 1 can
//!   both be denied; one after the other, the first would pass). In a serial order the decision is
//!   exactly the sliding window of cells. `remaining` and `retry_after` are computed from the same
//!   counts, so under contention they err on the cautious side.
//! * A take-back that fails (timeout, lost connection) leaves the permits counted until their cell
//!   leaves the window: fewer admissions, never more.
//!
//! # Cancellation and timeouts
//! Once a request is written, memcached has counted it before its caller knows the answer. An
//! **async** call's exchange runs in a task of its own (`tokio::spawn`), holding its connection
//! and its place among the backend's connections until it ends or sends an admission (it pools
//! the connection and gives the place back as it sends: a caller never polled again holds
//! neither), so a caller that drops its future or reaches its timeout only loses its answer:
//! * a request not yet written when its caller gives up is never sent;
//! * one already written is finished within the caller's deadline plus the backend's
//!   [grace](MemcachedConfig::grace) (default 1 s): a denial is taken back as always, and an
//!   admission its caller never got is given back (`decr` of the same cell and `n`, exactly:
//!   the answer either reaches its caller or fails to, never both), so the call consumes
//!   nothing ([`MemcachedLimiter::reclaims`] counts it in `given_back`); an admission that
//!   reached its caller's end but was dropped unread is given back by the drop, on a new
//!   connection with a place of its own, taken within the backend's timeout from the drop
//!   (its `decr` bounded by that plus the grace), or counted in `left_counted`;
//! * an exchange that cannot be finished (the grace runs out, the connection fails, the
//!   runtime shuts down) closes its connection, and its permits may stay counted until their
//!   cell leaves the window (`left_counted`, except for a runtime shutting down).
//!
//! A request is sent **at most once**. A pooled connection memcached closed while idle
//! (restarted, its `idle_timeout`) is found closed before use (a peek, without waiting) and
//! replaced by a fresh one; a request whose connection failed before any byte of it was written
//! is sent on a fresh one too. One cut after its write (before or during its reply) is never
//! sent again: memcached may have counted it, and a second copy would count it twice. The call
//! is decided by the policy, and its increment counted in `left_counted` (both paths).
//!
//! A **blocking** call whose exchange ends with replies unread (its timeout passed after the
//! write, or during a take-back) returns its timeout at once and hands its connection, and its
//! place, to a thread of its own that reads the replies until the deadline plus the grace and
//! takes back an increment that was applied (an admission so given back is counted in
//! `given_back`); what that thread cannot finish is counted in `left_counted`.
//!
//! # Time and clock skew
//! memcached has no clock command, so cells are keyed by the **caller's** clock (any [`Clock`](
//! crate::Clock); [`QuantaClock`](crate::QuantaClock), the default, reads Unix time, so processes
//! on NTP-synced hosts share cell numbers). Tolerance: the guarantee holds while, for any two
//! requests, the one whose increment reaches memcached later read its clock less than one
//! cell before the other; enough is **clock skew between callers + the time from a clock read
//! to its increment (at most the timeout) < one cell**. Reading the cell *after* the
//! current one is what buys this: a caller whose clock runs ahead writes there, and the others
//! count it. Beyond the tolerance the bound weakens: permits written two or more cells ahead are
//! invisible to the others until their clocks catch up.
//!
//! Expiry is memcached's, on real time, in whole seconds: each cell gets `window + cell`,
//! rounded up, plus 1 s (memcached's clock ticks once a second, so an expiry of `T` can fire
//! after `T - 1`). A cell is read while some caller's clock is within a window of it; with skew
//! under one cell that is less than `window + cell` after it was created. Expiry only
//! frees memory: cells older than the window are never read.
//!
//! # Limits
//! One memcached server per backend (a multi-get must find every cell of a key on one server).
//! memcached evicts under memory pressure: an evicted cell loses its counts, so give memcached
//! room for `cells + 1` small items per limited key.
//!
//! ```no_run
//! use floodgate::backend::FailurePolicy;
//! use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
//! use floodgate::SlidingWindow;
//! use std::time::Duration;
//!
//! let backend = MemcachedBackend::connect(
//!     MemcachedConfig::new("127.0.0.1:11211").timeout(Duration::from_millis(50)),
//! )?;
//! let limiter = MemcachedLimiter::new(
//!     &backend,
//!     "api",
//!     SlidingWindow::new(300, Duration::from_secs(60), 60)?,
//!     FailurePolicy::local_fallback(0.5)?,
//! )?;
//! let outcome = limiter.blocking_try_acquire_outcome("tenant-7", 1)?;
//! if let Some(error) = outcome.failure() {
//!     eprintln!("memcached unavailable, decided by policy: {error}");
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod async_connection;
mod connection;
mod detached;
mod error;
mod limiter;
mod protocol;
mod sliding_window;

pub use connection::{MemcachedBackend, MemcachedConfig};
pub use detached::ReclaimCounts;
pub use error::MemcachedError;
pub use limiter::MemcachedLimiter;
pub use protocol::MAX_KEY_LEN;
pub use sliding_window::MAX_CELLS;

/// Test hook of the blocking send ([`connection`]) and the async exchange ([`detached`]):
/// a test sets it to make a call's deadline pass between the check that nothing is sent yet
/// and the first write (issue 18's "not sent" window).
#[cfg(test)]
mod write_gap {
    use std::time::Instant;

    thread_local! {
        static HOLD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    /// Run where a request's first write is about to be claimed: while the hook is set on
    /// this thread, waits until `deadline` has passed.
    pub(super) fn before_write(deadline: Instant) {
        if HOLD.get() {
            while Instant::now() < deadline {
                std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
            }
        }
    }

    /// Sets (`true`) or clears the hook on this thread.
    pub(super) fn hold_past_deadline(on: bool) {
        HOLD.set(on);
    }
}
