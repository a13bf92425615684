//! The async waiting loops the distributed limiters share (`RedisLimiter`, `MemcachedLimiter`):
//! `acquire` (try until admitted, sleeping each announced wait) and `try_acquire_for` (wait
//! only while the announced wait fits in the caller's budget; round trips count against it).

use std::future::Future;
use std::time::{Duration, Instant};

use super::{MAX_TIMEOUT, RequestError};
use crate::decision::Decision;

/// The shortest sleep between two tries: a denial announcing less would only hammer the
/// server.
pub(crate) const MIN_RETRY_SLEEP: Duration = Duration::from_millis(1);

/// `acquire`'s loop: `try_once` until it admits, sleeping each denial's `retry_after` (at
/// least [`MIN_RETRY_SLEEP`]) on tokio's timer. Returns the time waited, measured: zero when
/// the first try is admitted, otherwise from the call to the admission (sleeps and round
/// trips). An error of a try ends the call.
pub(crate) async fn acquire<F, Fut>(mut try_once: F) -> Result<Duration, RequestError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Decision, RequestError>>,
{
    let started = Instant::now();
    let mut first = true;
    loop {
        let decision = try_once().await?;
        if decision.is_allowed() {
            return Ok(if first {
                Duration::ZERO
            } else {
                started.elapsed()
            });
        }
        first = false;
        tokio::time::sleep(decision.retry_after().max(MIN_RETRY_SLEEP)).await;
    }
}

/// `try_acquire_for`'s loop: each try is `try_by(its deadline, whether that deadline is the
/// caller's)`, its deadline the sooner of `backend_timeout` from now and what is left of
/// `timeout` (a `timeout` too long for an `Instant` is no bound; the caller's when it is the
/// sooner). Returns the first admission, or the first denial whose wait (at least
/// [`MIN_RETRY_SLEEP`]) does not fit in what is left; otherwise sleeps it (tokio's timer) and
/// tries again.
pub(crate) async fn try_acquire_for<F, Fut>(
    timeout: Duration,
    backend_timeout: Duration,
    mut try_by: F,
) -> Result<Decision, RequestError>
where
    F: FnMut(Instant, bool) -> Fut,
    Fut: Future<Output = Result<Decision, RequestError>>,
{
    let deadline = Instant::now().checked_add(timeout);
    loop {
        let now = Instant::now();
        let backend_deadline = now
            .checked_add(backend_timeout)
            .or_else(|| now.checked_add(MAX_TIMEOUT))
            .unwrap_or(now);
        let callers = deadline.is_some_and(|d| d < backend_deadline);
        let try_deadline = deadline.map_or(backend_deadline, |d| d.min(backend_deadline));
        let decision = try_by(try_deadline, callers).await?;
        let wait = decision.retry_after().max(MIN_RETRY_SLEEP);
        let left = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        if decision.is_allowed() || wait > left {
            return Ok(decision);
        }
        tokio::time::sleep(wait).await;
    }
}
