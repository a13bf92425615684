//! Polling a future once on a runtime left idle afterwards: a caller that sent its request and
//! is never polled again (its future kept, not dropped).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

/// Polls `future` once on `runtime` (which is then left idle, as a thread-local
/// current-thread runtime is between two `block_on` calls); true when it is pending. Panics
/// if it is done at that first poll.
pub fn poll_once<F: Future>(runtime: &tokio::runtime::Runtime, future: &mut Pin<Box<F>>) -> bool
where
    F::Output: std::fmt::Debug,
{
    runtime.block_on(std::future::poll_fn(|cx| match future.as_mut().poll(cx) {
        Poll::Pending => Poll::Ready(true),
        Poll::Ready(done) => panic!("done at the first poll: {done:?}"),
    }))
}
