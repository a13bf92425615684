//! Waiting for [`InFlight`] permits: blocking ([`InFlight::acquire`], the thread parks) and
//! async ([`InFlight::acquire_async`], the task sleeps on its waker). Both queue fairly
//! (see `queue.rs`).

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::in_flight::{InFlight, InFlightPermit, OwnedInFlightPermit, Permit};
use super::queue::{Entered, Outcome, Ticket, Wake};
use crate::decision::AcquireError;
use crate::sync::thread;

impl InFlight {
    /// Takes `n` permits, parking the calling thread in the fair queue until they are handed to
    /// it. Permits free now are taken at once when nobody is queued.
    ///
    /// # Errors
    /// [`AcquireError::ZeroPermits`]; [`AcquireError::ExceedsCapacity`] for `n` above the limit,
    /// at once, or while waiting if [`set_limit`](Self::set_limit) lowers the limit below `n`.
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use std::sync::Arc;
    /// let limit = Arc::new(InFlight::new(1)?);
    /// let held = limit.try_acquire_owned(1)?.expect("free");
    /// let waiter = {
    ///     let limit = Arc::clone(&limit);
    ///     std::thread::spawn(move || limit.acquire(1).map(|p| p.permits()))
    /// };
    /// drop(held); // handed to the waiter, whenever it queued
    /// assert_eq!(waiter.join().unwrap()?, 1);
    /// assert!(limit.acquire(2).is_err()); // above the limit: at once, never a hang
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire(&self, n: u32) -> Result<InFlightPermit<'_>, AcquireError> {
        acquire_blocking(self, n)
    }

    /// [`acquire`](Self::acquire) for an `Arc`: the permit owns a clone of it.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use std::sync::Arc;
    /// let limit = Arc::new(InFlight::new(2)?);
    /// let permit = limit.acquire_owned(2)?;
    /// assert_eq!(limit.in_flight(), 2);
    /// drop(permit);
    /// assert_eq!(limit.in_flight(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire_owned(self: &Arc<Self>, n: u32) -> Result<OwnedInFlightPermit, AcquireError> {
        acquire_blocking(Arc::clone(self), n)
    }

    /// Takes `n` permits, waiting asynchronously in the fair queue. The future works on any
    /// executor (it only uses its waker). Dropping it gives up its place and passes on any
    /// permits already handed to it, so a `timeout` or `select!` around it leaks nothing.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limit = InFlight::new(3)?;
    /// let permit = limit.acquire_async(2).await?;
    /// assert_eq!(limit.in_flight(), 2);
    /// drop(permit);
    /// assert!(limit.acquire_async(4).await.is_err());
    /// # Ok(()) }
    /// ```
    pub fn acquire_async(&self, n: u32) -> Acquire<&Self> {
        Acquire::new(self, n)
    }

    /// [`acquire_async`](Self::acquire_async) for an `Arc`: the future and its permit are
    /// `'static` (spawnable).
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use std::sync::Arc;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limit = Arc::new(InFlight::new(1)?);
    /// let task = tokio::spawn(Arc::clone(&limit).acquire_owned_async(1));
    /// let permit = task.await??;
    /// assert_eq!(permit.limiter().in_flight(), 1);
    /// # Ok(()) }
    /// ```
    pub fn acquire_owned_async(self: Arc<Self>, n: u32) -> Acquire<Arc<Self>> {
        Acquire::new(self, n)
    }
}

fn acquire_blocking<H: Deref<Target = InFlight>>(
    handle: H,
    n: u32,
) -> Result<Permit<H>, AcquireError> {
    handle.check(n)?;
    if handle.take(n) {
        return Ok(Permit::new(handle, n));
    }
    let ticket = match handle
        .queue()
        .enqueue(handle.word(), n, Wake::Thread(thread::current()))?
    {
        Entered::Taken => return Ok(Permit::new(handle, n)),
        Entered::Queued(ticket) => ticket,
    };
    loop {
        match ticket.node.outcome() {
            Outcome::Granted => return Ok(Permit::new(handle, n)),
            Outcome::Failed { capacity } => return Err(exceeds(n, capacity)),
            // A wake-up before the park leaves the park's token set: no wake-up is lost, and a
            // spurious one only loops.
            Outcome::Waiting => thread::park(),
        }
    }
}

fn exceeds(n: u32, capacity: u32) -> AcquireError {
    AcquireError::ExceedsCapacity {
        requested: u64::from(n),
        capacity: u64::from(capacity),
    }
}

/// The future of [`InFlight::acquire_async`] / [`InFlight::acquire_owned_async`]: resolves to a
/// [`Permit`]. Dropping it before it resolves takes nothing (see
/// [`acquire_async`](InFlight::acquire_async)).
///
/// ```
/// use floodgate::concurrency::InFlight;
/// use std::time::Duration;
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limit = InFlight::new(1)?;
/// let held = limit.acquire_async(1).await?;
/// // Gives up after 10 ms (tokio's paused test time): nothing leaks.
/// assert!(tokio::time::timeout(Duration::from_millis(10), limit.acquire_async(1)).await.is_err());
/// assert_eq!((limit.in_flight(), limit.waiters()), (1, 0));
/// drop(held);
/// assert_eq!(limit.in_flight(), 0);
/// # Ok(()) }
/// ```
#[must_use = "futures do nothing unless polled"]
pub struct Acquire<H: Deref<Target = InFlight>> {
    /// `None` once the permit (which took it) was returned.
    handle: Option<H>,
    n: u32,
    ticket: Option<Ticket>,
}

impl<H: Deref<Target = InFlight>> Acquire<H> {
    fn new(handle: H, n: u32) -> Self {
        Acquire {
            handle: Some(handle),
            n,
            ticket: None,
        }
    }

    fn finish(
        &mut self,
        result: Result<(), AcquireError>,
    ) -> Poll<Result<Permit<H>, AcquireError>> {
        self.ticket = None;
        let handle = self
            .handle
            .take()
            .expect("InFlight acquire future polled after it completed");
        Poll::Ready(result.map(|()| Permit::new(handle, self.n)))
    }
}

// Nothing in it is structurally pinned: the handle, a count and a ticket move freely.
impl<H: Deref<Target = InFlight>> Unpin for Acquire<H> {}

impl<H: Deref<Target = InFlight>> Future for Acquire<H> {
    type Output = Result<Permit<H>, AcquireError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let n = this.n;
        let Some(handle) = this.handle.as_deref() else {
            panic!("InFlight acquire future polled after it completed");
        };
        let Some(ticket) = &this.ticket else {
            if let Err(e) = handle.check(n) {
                return this.finish(Err(e));
            }
            if handle.take(n) {
                return this.finish(Ok(()));
            }
            let entered = handle
                .queue()
                .enqueue(handle.word(), n, Wake::Task(cx.waker().clone()));
            return match entered {
                Err(e) => this.finish(Err(e)),
                Ok(Entered::Taken) => this.finish(Ok(())),
                Ok(Entered::Queued(ticket)) => {
                    // It may already be granted (permits were freed meanwhile): look once.
                    let outcome = ticket.node.outcome();
                    this.ticket = Some(ticket);
                    match outcome {
                        Outcome::Waiting => Poll::Pending,
                        Outcome::Granted => this.finish(Ok(())),
                        Outcome::Failed { capacity } => this.finish(Err(exceeds(n, capacity))),
                    }
                }
            };
        };
        loop {
            match ticket.node.outcome() {
                Outcome::Granted => return this.finish(Ok(())),
                Outcome::Failed { capacity } => return this.finish(Err(exceeds(n, capacity))),
                Outcome::Waiting => {
                    // Under the queue's lock: either still waiting with this waker registered
                    // (the grant will wake it), or decided meanwhile (look again).
                    if handle.queue().register(ticket, cx.waker()) {
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}

impl<H: Deref<Target = InFlight>> Drop for Acquire<H> {
    fn drop(&mut self) {
        if let (Some(handle), Some(ticket)) = (self.handle.as_deref(), self.ticket.take()) {
            handle.queue().cancel(handle.word(), &ticket, self.n);
        }
    }
}

impl<H: Deref<Target = InFlight>> fmt::Debug for Acquire<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquire")
            .field("n", &self.n)
            .field("queued", &self.ticket.is_some())
            .finish_non_exhaustive()
    }
}
