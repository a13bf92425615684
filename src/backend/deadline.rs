//! Deadlines for async store calls (Redis, memcached) that hold within a turn of the runtime.

use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant};

/// How long before a deadline an async call stops sleeping on tokio's timer and re-polls
/// instead: the timer has millisecond resolution and fires on the tick after its deadline, so a
/// bare `timeout_at` overran by 1–4 ms.
pub(crate) const TIMER_SLACK: Duration = Duration::from_millis(2);

/// Runs `future` until `deadline` (`Err(())` past it): asleep on tokio's timer until
/// [`TIMER_SLACK`] before it, then re-polled at each turn of the runtime, so the deadline holds
/// within one turn. The last stretch keeps the task busy, at most `TIMER_SLACK` per timed-out
/// call (during an outage the circuit breaker soon stops such calls).
pub(crate) async fn until_deadline<F: Future>(
    future: F,
    deadline: Instant,
) -> Result<F::Output, ()> {
    let wake_at = deadline.checked_sub(TIMER_SLACK).unwrap_or(deadline);
    let wake_at = tokio::time::Instant::from_std(wake_at);
    let mut sleep = std::pin::pin!(tokio::time::sleep_until(wake_at));
    // The runtime whose timer `sleep` is on. A future shared between callers (a `LeasedKey`'s
    // calls) may be polled from another runtime than the one that first polled it, which may
    // be idle (its timer never fires) or shut down (its timer panics when polled): the timer is
    // then set again on the runtime polling it.
    let mut armed_on = runtime_id();
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
        }
        let polled_on = runtime_id();
        if polled_on.is_some() && polled_on != armed_on {
            sleep.set(tokio::time::sleep_until(wake_at));
            armed_on = polled_on;
        }
        if sleep.as_mut().poll(cx).is_ready() {
            if Instant::now() >= deadline {
                return Poll::Ready(Err(()));
            }
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    })
    .await
}

/// The runtime the calling thread is in, if any.
fn runtime_id() -> Option<tokio::runtime::Id> {
    tokio::runtime::Handle::try_current()
        .ok()
        .map(|handle| handle.id())
}
