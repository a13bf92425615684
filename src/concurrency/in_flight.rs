//! [`InFlight`]: at most `limit` permits held at once, one atomic word, RAII permits.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use crossbeam_utils::CachePadded;

use super::queue::WaitQueue;
use super::word::{self, Fields, MAX_IN_FLIGHT_LIMIT};
use crate::decision::{AcquireError, ConfigError, Decision, check_permits, validate_limit};
use crate::limiter::update;
use crate::sync::{AtomicU64, Ordering};

/// A concurrency limit: at most `limit` permits held at once (the JDK's `Semaphore`, tokio's
/// `Semaphore`), with permits that give themselves back when dropped.
///
/// * **One atomic word** holds the permits in flight, the limit and a "waiter queued" bit. A
///   [`try_acquire`](Self::try_acquire) is one compare-exchange; dropping a permit is one
///   `fetch_sub`. Neither takes a lock while nobody waits.
/// * **RAII**: a [`Permit`] returns its permits when dropped: at the end of a scope, on a panic
///   (unwinding drops it), and when a future holding it is cancelled.
/// * **Fair waiting**: [`acquire`](Self::acquire) (blocking) and
///   [`acquire_async`](Self::acquire_async) queue in FIFO order, and freed permits are handed to
///   the head of the queue, so a request for many permits collects them as they free up and is
///   never starved by a stream of single ones (which queue behind it, as in tokio's batch
///   semaphore). A non-blocking acquire never overtakes a queued waiter.
/// * **Live limit**: [`set_limit`](Self::set_limit) raises (waking waiters) or lowers (holders
///   keep their permits; new ones wait until in-flight drops below the new limit) at any time.
///
/// ```
/// use floodgate::concurrency::InFlight;
/// let limit = InFlight::new(2)?;
/// let a = limit.try_acquire(1)?.expect("free");
/// let b = limit.try_acquire(1)?.expect("free");
/// assert!(limit.try_acquire(1)?.is_none()); // two in flight
/// drop(a);
/// assert!(limit.try_acquire(1)?.is_some()); // a's permit came back
/// assert!(limit.try_acquire(3).is_err()); // more than the limit: never
/// # drop(b);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct InFlight {
    /// The packed `(queued, limit, in_flight)` word (see `word.rs`), alone on its cache line.
    word: CachePadded<AtomicU64>,
    waiters: WaitQueue,
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fields = self.fields();
        f.debug_struct("InFlight")
            .field("limit", &fields.limit)
            .field("in_flight", &fields.in_flight)
            .field("queued", &fields.queued)
            .finish()
    }
}

impl InFlight {
    /// At most `limit` permits held at once; `limit` in `1..=`[`MAX_IN_FLIGHT_LIMIT`].
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`], or [`ConfigError::LimitTooLarge`] above
    /// [`MAX_IN_FLIGHT_LIMIT`].
    ///
    /// ```
    /// use floodgate::ConfigError;
    /// use floodgate::concurrency::InFlight;
    /// assert_eq!(InFlight::new(20)?.limit(), 20);
    /// assert_eq!(InFlight::new(0).unwrap_err(), ConfigError::ZeroLimit);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn new(limit: u32) -> Result<Self, ConfigError> {
        validate_limit(limit, u64::from(MAX_IN_FLIGHT_LIMIT))?;
        let fields = Fields {
            in_flight: 0,
            limit,
            queued: false,
        };
        Ok(InFlight {
            word: CachePadded::new(AtomicU64::new(fields.pack())),
            waiters: WaitQueue::default(),
        })
    }

    /// Takes `n` permits if they are free now and nobody is queued for permits; never blocks.
    /// `Ok(None)` when they are not (nothing is taken).
    ///
    /// # Errors
    /// [`AcquireError::ZeroPermits`] for `n = 0`; [`AcquireError::ExceedsCapacity`] for `n`
    /// above the limit (no release could ever make room).
    ///
    /// ```
    /// use floodgate::AcquireError;
    /// use floodgate::concurrency::InFlight;
    /// let limit = InFlight::new(5)?;
    /// let permit = limit.try_acquire(3)?.expect("free");
    /// assert_eq!((permit.permits(), limit.in_flight(), limit.available()), (3, 3, 2));
    /// assert!(limit.try_acquire(3)?.is_none());
    /// assert_eq!(
    ///     limit.try_acquire(6).unwrap_err(),
    ///     AcquireError::ExceedsCapacity { requested: 6, capacity: 5 }
    /// );
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self, n: u32) -> Result<Option<InFlightPermit<'_>>, AcquireError> {
        try_acquire_with(self, n)
    }

    /// [`try_acquire`](Self::try_acquire) for an `Arc`: the permit owns a clone of it, so it can
    /// move into a spawned task.
    ///
    /// # Errors
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// use std::sync::Arc;
    /// let limit = Arc::new(InFlight::new(1)?);
    /// let permit = limit.try_acquire_owned(1)?.expect("free");
    /// std::thread::spawn(move || drop(permit)).join().unwrap();
    /// assert_eq!(limit.in_flight(), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire_owned(
        self: &Arc<Self>,
        n: u32,
    ) -> Result<Option<OwnedInFlightPermit>, AcquireError> {
        try_acquire_with(Arc::clone(self), n)
    }

    /// Changes the limit live. Raising it hands the new room to queued waiters at once.
    /// Lowering it keeps every permit held (in flight may stay above the new limit until they
    /// are dropped; nothing new is admitted meanwhile) and fails queued waiters that ask for
    /// more than the new limit with [`AcquireError::ExceedsCapacity`].
    ///
    /// # Errors
    /// As [`new`](Self::new); the old limit then stays.
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// let limit = InFlight::new(2)?;
    /// let held = limit.try_acquire(2)?.expect("free");
    /// limit.set_limit(1)?;
    /// assert_eq!((limit.limit(), limit.in_flight(), limit.available()), (1, 2, 0));
    /// drop(held);
    /// assert!(limit.try_acquire(1)?.is_some());
    /// assert!(limit.set_limit(0).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        validate_limit(limit, u64::from(MAX_IN_FLIGHT_LIMIT))?;
        // Acquire: the limit joins the word's total order; the word carries no other data.
        let mut current = self.word.load(Ordering::Acquire);
        loop {
            let fields = Fields::unpack(current);
            let next = Fields { limit, ..fields }.pack();
            // AcqRel / Acquire: a read-modify-write in the word's order, as every other one.
            match self.word.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(actual) => current = actual,
            }
        }
        // A waiter queued before the change is served by the new limit, or failed by it. One
        // queued after it judged the new limit already. (The pump re-reads `queued` under the
        // lock: it returns at once if the queue emptied meanwhile.)
        if current & word::QUEUED != 0 {
            self.waiters.pump(&self.word);
        }
        Ok(())
    }

    /// The limit in force.
    ///
    /// ```
    /// assert_eq!(floodgate::concurrency::InFlight::new(7).unwrap().limit(), 7);
    /// ```
    pub fn limit(&self) -> u32 {
        self.fields().limit
    }

    /// Permits held now, including those handed to a queued waiter that is still collecting
    /// the rest of its request.
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// let limit = InFlight::new(4)?;
    /// let _p = limit.try_acquire(3)?;
    /// assert_eq!(limit.in_flight(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn in_flight(&self) -> u32 {
        self.fields().in_flight
    }

    /// Permits a non-blocking acquire could take now: `limit − in_flight`, and zero while a
    /// waiter is queued (it is served first).
    ///
    /// ```
    /// use floodgate::concurrency::InFlight;
    /// let limit = InFlight::new(4)?;
    /// let _p = limit.try_acquire(1)?;
    /// assert_eq!(limit.available(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn available(&self) -> u32 {
        let fields = self.fields();
        if fields.queued { 0 } else { fields.free() }
    }

    /// Waiters queued now (blocking and async).
    ///
    /// ```
    /// assert_eq!(floodgate::concurrency::InFlight::new(1).unwrap().waiters(), 0);
    /// ```
    pub fn waiters(&self) -> usize {
        self.waiters.len()
    }

    fn fields(&self) -> Fields {
        // Acquire: a snapshot in the word's order (pairs with the Release of releases).
        Fields::unpack(self.word.load(Ordering::Acquire))
    }

    /// The permit check against the limit in force.
    pub(crate) fn check(&self, n: u32) -> Result<(), AcquireError> {
        check_permits(n, u64::from(self.limit()))
    }

    /// The non-blocking take: one CAS loop (`limiter::update`) over the pure decision.
    #[inline]
    pub(crate) fn take(&self, n: u32) -> bool {
        self.take_decision(n).is_allowed()
    }

    /// [`take`](Self::take) with its decision: the limit, and the permits a non-blocking
    /// acquire could take after it (zero while a waiter is queued). The caller owns `n` permits
    /// when it is allowed.
    #[inline]
    pub(crate) fn take_decision(&self, n: u32) -> Decision {
        update(&self.word, |state| word::decide(state, n))
    }

    pub(crate) fn word(&self) -> &AtomicU64 {
        &self.word
    }

    pub(crate) fn queue(&self) -> &WaitQueue {
        &self.waiters
    }

    #[inline]
    fn release(&self, n: u32) {
        self.waiters.release(&self.word, n);
    }
}

#[inline]
fn try_acquire_with<H: Deref<Target = InFlight>>(
    handle: H,
    n: u32,
) -> Result<Option<Permit<H>>, AcquireError> {
    handle.check(n)?;
    Ok(handle.take(n).then(|| Permit::new(handle, n)))
}

/// Permits held from an [`InFlight`], given back when dropped (also on a panic, and when the
/// future holding it is dropped). `H` is how it reaches the limiter: a reference
/// ([`InFlightPermit`]) or an `Arc` ([`OwnedInFlightPermit`]).
///
/// ```
/// use floodgate::concurrency::InFlight;
/// let limit = InFlight::new(1)?;
/// let result = std::panic::catch_unwind(|| {
///     let _permit = limit.try_acquire(1).unwrap().unwrap();
///     panic!("the handler failed");
/// });
/// assert!(result.is_err());
/// assert_eq!(limit.in_flight(), 0); // unwinding dropped the permit
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a permit is given back as soon as it is dropped"]
pub struct Permit<H: Deref<Target = InFlight>> {
    handle: H,
    permits: u32,
}

/// A [`Permit`] borrowing its [`InFlight`].
pub type InFlightPermit<'a> = Permit<&'a InFlight>;

/// A [`Permit`] owning an `Arc` of its [`InFlight`] (`'static`: it can move into a task).
pub type OwnedInFlightPermit = Permit<Arc<InFlight>>;

impl<H: Deref<Target = InFlight>> Permit<H> {
    pub(crate) fn new(handle: H, permits: u32) -> Self {
        Permit { handle, permits }
    }

    /// Permits held.
    ///
    /// ```
    /// let limit = floodgate::concurrency::InFlight::new(5)?;
    /// assert_eq!(limit.try_acquire(4)?.unwrap().permits(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The limiter the permits came from.
    ///
    /// ```
    /// let limit = floodgate::concurrency::InFlight::new(5)?;
    /// let permit = limit.try_acquire(1)?.unwrap();
    /// assert_eq!(permit.limiter().in_flight(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limiter(&self) -> &InFlight {
        &self.handle
    }
}

impl<H: Deref<Target = InFlight>> Drop for Permit<H> {
    #[inline]
    fn drop(&mut self) {
        self.handle.release(self.permits);
    }
}

impl<H: Deref<Target = InFlight>> fmt::Debug for Permit<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("permits", &self.permits)
            .finish_non_exhaustive()
    }
}
