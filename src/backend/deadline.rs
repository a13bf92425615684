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
    let mut sleep = std::pin::pin!(tokio::time::sleep_until(tokio::time::Instant::from_std(
        wake_at
    )));
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(output) = future.as_mut().poll(cx) {
            return Poll::Ready(Ok(output));
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
