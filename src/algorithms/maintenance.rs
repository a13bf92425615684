//! The optional maintenance thread that runs a ring's sweep ahead of callers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A structure whose upkeep can run ahead of its callers ([`SlidingWindowLimiter`](super::SlidingWindowLimiter),
/// [`RollingCounter`](crate::stats::RollingCounter)), run by [`Maintenance`]. Callers do the same work inline when it has not been done, so a sweep is
/// only ever an optimisation.
///
/// ```
/// use floodgate::algorithms::Sweep;
/// let counter = floodgate::stats::RollingCounter::new(std::time::Duration::from_secs(1), 10, 1).unwrap();
/// Sweep::sweep(&counter);
/// ```
pub trait Sweep: Send + Sync + 'static {
    /// Prepares the current and future cells.
    fn sweep(&self);
}

/// A thread that sweeps a ring every `period` (real time) until stopped. Dropping the handle stops
/// and joins the thread.
///
/// ```
/// use floodgate::{Maintenance, SlidingWindowLimiter};
/// use std::sync::Arc;
/// use std::time::Duration;
/// let limiter = Arc::new(SlidingWindowLimiter::new(100, Duration::from_secs(60), 60)?);
/// let upkeep = Maintenance::start(limiter.clone(), Duration::from_millis(500))?;
/// // ... use `limiter` ...
/// assert!(upkeep.stop() >= 1); // sweeps it ran (always at least one)
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Maintenance {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<u64>>,
}

impl Maintenance {
    /// Starts a thread that sweeps `target` at once and then every `period`.
    ///
    /// # Errors
    /// [`std::io::ErrorKind::InvalidInput`] for a zero period; the spawn error if the thread
    /// cannot be started.
    ///
    /// ```
    /// use floodgate::{Maintenance, stats::RollingCounter};
    /// use std::{sync::Arc, time::Duration};
    /// let counter = Arc::new(RollingCounter::new(Duration::from_secs(1), 10, 1).unwrap());
    /// assert!(Maintenance::start(counter, Duration::ZERO).is_err());
    /// ```
    pub fn start<T: Sweep>(target: Arc<T>, period: Duration) -> std::io::Result<Self> {
        if period.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the maintenance period must be longer than zero",
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stop_flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("floodgate-sweep".into())
            .spawn(move || {
                let mut sweeps = 0u64;
                loop {
                    target.sweep();
                    sweeps += 1;
                    // Acquire: pairs with the Release store in `halt`.
                    if stop_flag.load(Ordering::Acquire) {
                        return sweeps;
                    }
                    std::thread::park_timeout(period);
                }
            })?;
        Ok(Maintenance {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the thread, waits for it, and returns how many sweeps it ran (at least one).
    ///
    /// ```
    /// use floodgate::{Maintenance, stats::RollingCounter};
    /// use std::{sync::Arc, time::Duration};
    /// let counter = Arc::new(RollingCounter::new(Duration::from_secs(1), 10, 1)?);
    /// // A long period: the thread sweeps once at start, then waits until stopped.
    /// let upkeep = Maintenance::start(counter, Duration::from_secs(3600))?;
    /// assert!(upkeep.stop() >= 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stop(mut self) -> u64 {
        self.halt()
    }

    fn halt(&mut self) -> u64 {
        // Release: pairs with the thread's Acquire load.
        self.stop.store(true, Ordering::Release);
        match self.thread.take() {
            Some(thread) => {
                thread.thread().unpark();
                thread.join().unwrap_or(0)
            }
            None => 0,
        }
    }
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        self.halt();
    }
}
