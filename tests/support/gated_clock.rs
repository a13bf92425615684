//! A clock that can hold one thread right after its clock read: exactly "preempted between the
//! clock read and the compare-exchange", on demand and without sleeps. Also a one-shot leap.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use floodgate::Clock;

/// How long a test waits for the held thread before it calls the run a hang.
const HANG: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Gate {
    /// The next read blocks after taking its value.
    armed: bool,
    /// A read is being held.
    held: bool,
}

#[derive(Default)]
struct Inner {
    now: AtomicU64,
    /// Added to the next read only (a one-shot leap of the reading core's clock).
    leap: AtomicU64,
    gate: Mutex<Gate>,
    moved: Condvar,
}

/// Clones share the time and the gate.
#[derive(Clone, Default)]
pub struct GatedClock {
    inner: Arc<Inner>,
}

impl GatedClock {
    pub fn starting_at(nanos: u64) -> Self {
        let clock = Self::default();
        clock.set(nanos);
        clock
    }

    pub fn set(&self, nanos: u64) {
        self.inner.now.store(nanos, Ordering::SeqCst);
    }

    pub fn advance(&self, nanos: u64) {
        self.inner.now.fetch_add(nanos, Ordering::SeqCst);
    }

    /// The next read (by any thread) reads `leap` ahead of the shared time.
    pub fn leap_next_read(&self, leap: u64) {
        self.inner.leap.store(leap, Ordering::SeqCst);
    }

    /// The next read (by any thread) takes its value and then blocks until [`release`].
    pub fn hold_next_read(&self) {
        self.gate().armed = true;
    }

    /// Waits until a thread is held right after its read (fails on a hang).
    pub fn wait_until_held(&self) {
        let gate = self.gate();
        let (gate, timeout) = self
            .inner
            .moved
            .wait_timeout_while(gate, HANG, |g| !g.held)
            .unwrap();
        assert!(
            !timeout.timed_out() && gate.held,
            "no thread reached the clock"
        );
    }

    /// Lets the held thread go on with the value it read.
    pub fn release(&self) {
        self.gate().held = false;
        self.inner.moved.notify_all();
    }

    fn gate(&self) -> std::sync::MutexGuard<'_, Gate> {
        self.inner.gate.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Clock for GatedClock {
    fn now_nanos(&self) -> u64 {
        let leap = self.inner.leap.swap(0, Ordering::SeqCst);
        let now = self.inner.now.load(Ordering::SeqCst).saturating_add(leap);
        let mut gate = self.gate();
        if gate.armed {
            gate.armed = false;
            gate.held = true;
            self.inner.moved.notify_all();
            let (gate, timeout) = self
                .inner
                .moved
                .wait_timeout_while(gate, HANG, |g| g.held)
                .unwrap();
            assert!(!timeout.timed_out() && !gate.held, "never released");
        }
        now
    }

    fn sleep(&self, duration: Duration) {
        self.advance(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
    }
}
