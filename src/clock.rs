//! Clocks: where a limiter reads "now".
//!
//! Every limiter reads its clock once per call and works in `u64` nanoseconds on the clock's
//! timeline. The two real clocks ([`QuantaClock`], [`CoarseClock`]) share one timeline that reads
//! as nanoseconds since the Unix epoch (taken once from the system clock, then advanced by the
//! monotonic TSC), so windows can be aligned to wall-clock boundaries. [`ManualClock`] is for
//! tests and simulation: it only moves when told to.
//!
//! A TSC read on one core can be a few nanoseconds *behind* a value another core stored a moment
//! before. No limiter in floodgate moves its state backwards or refuses a request because of
//! such a read: windows keep a stored window that is ahead of the reader's, and the time-word
//! buckets and the Guava-style smooth limiters decide at the latest clock read any writer
//! published (`limiter::update_at`). On machines whose
//! cores' TSCs disagree by more than a few nanoseconds, use [`MonotonicClock`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::decision::ConfigError;

/// The lag horizon of the time model: the most two clock reads of correct threads may disagree
/// (a core's TSC behind another's), 10 s — far beyond the skew seen between cores (1.6 s on broken
/// hardware, quanta#111).
///
/// Within it, lag is tolerated exactly: a state written by a clock up to this far ahead of a
/// reader's is kept and decided on, never moved back, and the time floor lifts the reader to the
/// writer's time. Beyond it, a state or a floor is taken for a *leaping* clock's only on a clock
/// read taken after the state was loaded (a thread preempted between its read and its
/// compare-exchange reads again first), and is then put back in range: a leap never freezes a
/// limiter for more than one window or one refill. See the README's "Time model".
///
/// ```
/// assert_eq!(floodgate::clock::MAX_CLOCK_LAG_NANOS, 10_000_000_000);
/// ```
pub const MAX_CLOCK_LAG_NANOS: u64 = 10_000_000_000;

/// The grain of the time floor (16,384 ns): a writer raises the floor only once its time has
/// passed it by this much, so the floor is raised about once per grain of the limiter's time
/// (about 61,000 times a second), not on every admission; writers that pass the same grain at
/// once may each raise it (a compare-exchange, then `fetch_max` if another moved it), so up to
/// one raise per racing writer per grain. A reader whose clock lags the last writer's is decided
/// at most this much before the writer's time.
///
/// The floor is one cache line that every check of a limiter or of a whole [`Keyed`](crate::Keyed)
/// map reads, so each raise costs every core that reads it a miss. With a grain of 1,024 ns a
/// keyed map was raised about once per microsecond and stopped scaling at 8 cores: 1,024 keys
/// round robin on 16 cores ran 16-17 M checks a second against governor's 42-44 M; with
/// 8,192 ns it ran 74 M, with 65,536 ns 83 M (the contention report's `keyed/1k` row, one run
/// of each build on a 16-core Xeon, issue 16). The price of a coarser grain shows only where
/// clock reads disagree: a lagging reader may be decided up to one grain before the writer's
/// time, and a change instant may trail the last decision by up to one grain (see
/// [`AtomicLimiter::change_instant`](crate::AtomicLimiter::change_instant)).
///
/// ```
/// assert_eq!(floodgate::clock::FLOOR_GRAIN_NANOS, 16_384);
/// ```
pub const FLOOR_GRAIN_NANOS: u64 = 1 << 14;

/// A source of time for limiters.
///
/// `now_nanos` must be cheap: it is called once on every decision.
///
/// ```
/// use floodgate::{Clock, ManualClock};
/// let clock = ManualClock::new();
/// clock.advance(std::time::Duration::from_millis(5));
/// assert_eq!(clock.now_nanos(), 5_000_000);
/// ```
pub trait Clock: Send + Sync + 'static {
    /// The current time in nanoseconds on this clock's timeline.
    ///
    /// ```
    /// use floodgate::{Clock, QuantaClock};
    /// let clock = QuantaClock::new();
    /// let (a, b) = (clock.now_nanos(), clock.now_nanos());
    /// assert!(b >= a); // monotonic
    /// ```
    fn now_nanos(&self) -> u64;
    /// Blocks the calling thread for `duration` (a [`ManualClock`] advances itself instead).
    ///
    /// ```
    /// use floodgate::{Clock, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// clock.sleep(Duration::from_millis(3));
    /// assert_eq!(clock.now_nanos(), 3_000_000);
    /// ```
    fn sleep(&self, duration: Duration);
}

/// Saturating conversion of a [`Duration`] to `u64` nanoseconds.
pub(crate) fn duration_to_nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

/// The shared timeline of the real clocks: a calibrated quanta clock's raw counter, mapped to
/// nanoseconds since the Unix epoch by one fixed-point multiply and one add.
///
/// `now = ((raw × scale) >> SCALE_SHIFT) + offset`: `scale` is quanta's own calibration (its
/// nanoseconds for 2^[`SCALE_SHIFT`] counter ticks, read once), and `offset` puts the counter's
/// reading at start on the system clock's Unix time then. The map is non-decreasing in `raw`
/// (a multiply by a non-negative constant, a floor shift, a constant add), so a later counter
/// reading never maps to an earlier time: the timeline is exactly as monotonic as quanta's
/// counter. Unlike `quanta::Clock::delta_as_nanos`, a reading slightly before the start (another
/// core's counter a few ticks behind) maps a few nanoseconds before the start instead of being
/// clamped to it. The shift is a constant, so the conversion is a multiply, a double shift by an
/// immediate and an add (no clock-type dispatch, no variable-width shift, no saturation). It
/// cannot wrap before the counter has counted 584 years of nanoseconds (the product's high bits
/// are dropped only past that), nor before the Unix time reaches 2^64 ns: the start is clamped
/// to 2^63 ns ([`Timeline::starting_at`]), so that is at least 292 years after the start.
struct Timeline {
    clock: quanta::Clock,
    /// Nanoseconds per 2^`SCALE_SHIFT` raw ticks.
    scale: u64,
    /// The Unix time at raw `0`, in nanoseconds, modulo 2^64 (wrapping).
    offset: u64,
}

/// The fixed point of [`Timeline`]'s scale: 40 bits, as quanta's own calibration holds it (the
/// timeline is exactly as precise as that calibration, a few parts per million, as before), and
/// a full 64-bit raw reading times it still fits the 128-bit product.
const SCALE_SHIFT: u32 = 40;

fn timeline() -> &'static Timeline {
    static TIMELINE: OnceLock<Timeline> = OnceLock::new();
    TIMELINE.get_or_init(|| {
        let clock = quanta::Clock::new();
        // quanta's own conversion of 2^SCALE_SHIFT ticks (`delta_as_nanos` is exact on an OS
        // clock, whose raw reading is already nanoseconds: scale 2^SCALE_SHIFT, the identity).
        let scale = clock.delta_as_nanos(0, 1 << SCALE_SHIFT);
        let base_raw = clock.raw();
        let unix_base_nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(duration_to_nanos)
            .unwrap_or(0);
        Timeline::starting_at(clock, scale, base_raw, unix_base_nanos)
    })
}

/// `raw` ticks in nanoseconds at `scale` (nanoseconds per 2^SCALE_SHIFT ticks).
#[inline(always)]
fn scaled(raw: u64, scale: u64) -> u64 {
    ((u128::from(raw) * u128::from(scale)) >> SCALE_SHIFT) as u64
}

impl Timeline {
    /// The timeline that reads `unix_base_nanos` at the counter reading `base_raw`. The start is
    /// clamped to 2^63 ns (the year 2262): a system clock set absurdly far ahead starts there and
    /// runs on for 292 years before the wrapping add could wrap, where an unclamped start near
    /// 2^64 would wrap back to 0 within microseconds.
    fn starting_at(clock: quanta::Clock, scale: u64, base_raw: u64, unix_base_nanos: u64) -> Self {
        let start = unix_base_nanos.min(1 << 63);
        Timeline {
            clock,
            scale,
            offset: start.wrapping_sub(scaled(base_raw, scale)),
        }
    }

    /// The TSC (or OS counter) read and mapped with one multiply-shift and one add.
    #[inline]
    fn now_nanos(&self) -> u64 {
        scaled(self.clock.raw(), self.scale).wrapping_add(self.offset)
    }

    #[cfg(test)]
    fn now_from(&self, raw: u64) -> u64 {
        scaled(raw, self.scale).wrapping_add(self.offset)
    }
}

/// The default clock: quanta's TSC-based clock (about 10–20 ns a read), on a timeline that reads
/// as nanoseconds since the Unix epoch.
///
/// ```
/// use floodgate::{Clock, QuantaClock};
/// let clock = QuantaClock::new();
/// let a = clock.now_nanos();
/// assert!(a > 1_600_000_000_000_000_000); // after September 2020
/// ```
#[derive(Clone, Copy)]
pub struct QuantaClock {
    timeline: &'static Timeline,
}

impl QuantaClock {
    /// The process-wide quanta clock (calibrated once, on first use).
    ///
    /// ```
    /// use floodgate::{Clock, QuantaClock};
    /// let clock = QuantaClock::new();
    /// let (a, b) = (clock.now_nanos(), clock.now_nanos());
    /// assert!(a > 1_600_000_000_000_000_000 && b >= a);
    /// ```
    pub fn new() -> Self {
        QuantaClock {
            timeline: timeline(),
        }
    }
}

impl Default for QuantaClock {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for QuantaClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuantaClock")
    }
}

impl Clock for QuantaClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.timeline.now_nanos()
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// A coarse clock: the shared timeline's time in nanoseconds, stored by an upkeep thread every
/// `resolution` (1 ms by default) or more often: the one upkeep thread of the process runs at the
/// finest resolution among the live `CoarseClock`s. A read is a single atomic load of that value
/// (no call, no conversion), the fastest path there is; the price is that time moves in steps and
/// lags real time.
///
/// # How far it lags
/// A read is the time of the upkeep thread's last refresh: up to one resolution behind on an idle
/// machine (the finest live clock's, so at most this clock's own `resolution`), and **behind by
/// however long the OS keeps the upkeep thread from running** on a loaded one. There is no hard
/// bound: on a 2-core machine oversubscribed by busy threads, lags of up to 25 ms were measured
/// with the 1 ms default. A lagging clock never makes a floodgate limiter admit more than its
/// limit (a late read only admits later), but a window resets, and a bucket refills, that much
/// later than on [`QuantaClock`]. Pick `QuantaClock` where the lag matters.
///
/// # Upkeep lifecycle
/// The upkeep thread is shared by every `CoarseClock` in the process and is stopped when the last
/// one is dropped. It runs at the finest resolution among the live clocks: a clock finer than
/// all others wakes it to run at its resolution at once, and when the last clock of the finest
/// resolution is dropped it goes back to the next finest. Starting and stopping both happen
/// under one process-wide lock, and the last drop joins the thread before it releases the lock,
/// so a clock created while the last one is being dropped waits for that stop and then starts a
/// new thread: it can never be built without an upkeep. The thread is floodgate's own (quanta's
/// `recent()` and its upkeep are not used: its `Instant` would need a conversion on every read),
/// and a drop wakes it to stop at once.
///
/// ```
/// use floodgate::{Clock, CoarseClock};
/// let clock = CoarseClock::new().unwrap();
/// assert!(clock.now_nanos() > 1_600_000_000_000_000_000);
/// ```
#[derive(Clone)]
pub struct CoarseClock {
    _upkeep: Arc<UpkeepLease>,
}

/// The coarse time: the timeline's nanoseconds at the upkeep thread's last refresh (0 before the
/// first `CoarseClock`). Only ever raised.
static COARSE_NANOS: AtomicU64 = AtomicU64::new(0);

/// Raises the coarse time to the timeline's reading now (never back: the upkeep thread may move
/// between cores whose counters disagree by a few nanoseconds).
fn refresh_coarse(timeline: &Timeline) {
    // Relaxed: the value is the whole message (no other memory is published with it); pairs
    // with the Relaxed load in `CoarseClock::now_nanos`.
    COARSE_NANOS.fetch_max(timeline.now_nanos(), Ordering::Relaxed);
}

/// floodgate's upkeep thread: refreshes the coarse time every `period` until stopped.
struct UpkeepThread {
    stop: Arc<AtomicBool>,
    /// The time between two refreshes, in nanoseconds: the finest live resolution.
    period: Arc<AtomicU64>,
    handle: std::thread::JoinHandle<()>,
}

impl UpkeepThread {
    fn start(resolution: Duration, timeline: &'static Timeline) -> std::io::Result<Self> {
        // A first value before the thread runs: a clock read right after `with_resolution`
        // returns is current, never 0 or a stopped thread's last refresh.
        refresh_coarse(timeline);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let period = Arc::new(AtomicU64::new(duration_to_nanos(resolution)));
        let thread_period = Arc::clone(&period);
        let handle = std::thread::Builder::new()
            .name("floodgate-coarse-clock".into())
            .spawn(move || {
                // Acquire: pairs with the Release store in `stop`; nothing else is read after it.
                while !stopped.load(Ordering::Acquire) {
                    refresh_coarse(timeline);
                    // Relaxed: pairs with the store in `set_period`; the value is the whole
                    // message, and the unpark that follows a finer one's store makes it
                    // visible here at once (an unpark synchronizes with the park it ends).
                    let period = Duration::from_nanos(thread_period.load(Ordering::Relaxed));
                    // Woken early by `stop` or a finer period (a spurious wake-up only refreshes
                    // once more).
                    std::thread::park_timeout(period);
                }
            })?;
        Ok(UpkeepThread {
            stop,
            period,
            handle,
        })
    }

    /// Runs the thread at `resolution` from its next refresh on; a finer one than it runs at
    /// wakes it, so that it takes effect at once (a coarser one waits out the current, finer,
    /// period).
    fn set_period(&self, resolution: Duration) {
        let nanos = duration_to_nanos(resolution);
        // Relaxed: pairs with the load in the thread's loop, as described there.
        let old = self.period.swap(nanos, Ordering::Relaxed);
        if nanos < old {
            self.handle.thread().unpark();
        }
    }

    /// Stops the thread and waits for it (at once: the thread is woken, not waited out).
    fn stop(self) {
        // Release: pairs with the Acquire load in the thread's loop.
        self.stop.store(true, Ordering::Release);
        self.handle.thread().unpark();
        // A panic in the thread (none is possible in its loop) leaves nothing to clean up.
        let _ = self.handle.join();
    }
}

impl std::fmt::Debug for CoarseClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CoarseClock")
    }
}

/// The finest [`CoarseClock`] resolution accepted: finer would keep a core busy refreshing.
pub const MIN_COARSE_RESOLUTION: Duration = Duration::from_micros(100);
/// The coarsest [`CoarseClock`] resolution accepted: a coarser clock would be no use to a
/// limiter.
pub const MAX_COARSE_RESOLUTION: Duration = Duration::from_secs(1);

/// Why a [`CoarseClock`] could not be built.
///
/// ```
/// use floodgate::clock::{CoarseClock, CoarseClockError};
/// use std::time::Duration;
/// let err = CoarseClock::with_resolution(Duration::ZERO).unwrap_err();
/// assert!(matches!(err, CoarseClockError::Config(_)));
/// assert!(err.to_string().contains("100µs..=1s"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum CoarseClockError {
    /// A resolution outside
    /// [`MIN_COARSE_RESOLUTION`]`..=`[`MAX_COARSE_RESOLUTION`].
    Config(ConfigError),
    /// The upkeep thread could not be spawned.
    Spawn(std::io::Error),
}

impl std::fmt::Display for CoarseClockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CoarseClockError::Config(e) => e.fmt(f),
            CoarseClockError::Spawn(e) => {
                write!(f, "cannot spawn the coarse clock's upkeep thread: {e}")
            }
        }
    }
}

impl std::error::Error for CoarseClockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CoarseClockError::Config(e) => Some(e),
            CoarseClockError::Spawn(e) => Some(e),
        }
    }
}

impl From<ConfigError> for CoarseClockError {
    fn from(e: ConfigError) -> Self {
        CoarseClockError::Config(e)
    }
}

/// The process-wide upkeep state: the resolutions of the live leases and, while any is alive,
/// the upkeep thread, running at the finest of them.
struct Upkeep {
    live: LiveResolutions,
    thread: Option<UpkeepThread>,
}

static UPKEEP: Mutex<Upkeep> = Mutex::new(Upkeep {
    live: LiveResolutions::new(),
    thread: None,
});

/// The resolutions of the live leases, with how many leases hold each.
struct LiveResolutions {
    leases: BTreeMap<Duration, usize>,
}

impl LiveResolutions {
    const fn new() -> Self {
        LiveResolutions {
            leases: BTreeMap::new(),
        }
    }

    fn add(&mut self, resolution: Duration) {
        *self.leases.entry(resolution).or_insert(0) += 1;
    }

    /// Releases one lease of `resolution` (none held: nothing changes).
    fn remove(&mut self, resolution: Duration) {
        if let Some(count) = self.leases.get_mut(&resolution) {
            *count -= 1;
            if *count == 0 {
                self.leases.remove(&resolution);
            }
        }
    }

    /// The finest live resolution; `None` when no lease is alive.
    fn finest(&self) -> Option<Duration> {
        self.leases.keys().next().copied()
    }
}

fn lock_upkeep() -> std::sync::MutexGuard<'static, Upkeep> {
    UPKEEP.lock().unwrap_or_else(|poison| poison.into_inner())
}

/// One `CoarseClock::with_resolution` call's share of the upkeep thread (shared by its clones),
/// at its `resolution`. Its drop releases the share; the last one stops the thread *while
/// holding the lock*, any other puts the thread at the finest resolution still live.
struct UpkeepLease {
    resolution: Duration,
}

impl Drop for UpkeepLease {
    fn drop(&mut self) {
        let mut upkeep = lock_upkeep();
        upkeep.live.remove(self.resolution);
        match upkeep.live.finest() {
            // Stopped and joined under the lock: the next `with_resolution` finds either a live
            // thread (a lease alive) or none at all, never one that is stopping.
            None => {
                if let Some(thread) = upkeep.thread.take() {
                    thread.stop();
                }
            }
            Some(finest) => {
                if let Some(thread) = &upkeep.thread {
                    thread.set_period(finest);
                }
            }
        }
    }
}

impl CoarseClock {
    /// A coarse clock refreshed every millisecond.
    ///
    /// # Errors
    /// [`CoarseClockError::Spawn`] if the upkeep thread cannot be spawned.
    ///
    /// ```
    /// use floodgate::{Clock, CoarseClock};
    /// let clock = CoarseClock::new()?;
    /// assert!(clock.now_nanos() > 1_600_000_000_000_000_000);
    /// # Ok::<(), floodgate::clock::CoarseClockError>(())
    /// ```
    pub fn new() -> Result<Self, CoarseClockError> {
        Self::with_resolution(Duration::from_millis(1))
    }

    /// A coarse clock refreshed at least every `resolution`, which must be within
    /// [`MIN_COARSE_RESOLUTION`]` ..= `[`MAX_COARSE_RESOLUTION`] (100 µs ..= 1 s). There is one
    /// upkeep thread per process, running at the finest resolution among the live clocks: this
    /// one steps more often while a finer one is alive, never less often.
    ///
    /// # Errors
    /// [`CoarseClockError::Config`] ([`ConfigError::DurationOutOfRange`]) for a resolution outside
    /// the range; [`CoarseClockError::Spawn`] if the upkeep thread cannot be spawned.
    ///
    /// ```
    /// use floodgate::{Clock, CoarseClock};
    /// use std::time::Duration;
    /// let clock = CoarseClock::with_resolution(Duration::from_millis(5))?;
    /// assert!(clock.now_nanos() > 1_600_000_000_000_000_000);
    /// assert!(CoarseClock::with_resolution(Duration::ZERO).is_err()); // would spin a core
    /// assert!(CoarseClock::with_resolution(Duration::MAX).is_err()); // drop would never return
    /// # Ok::<(), floodgate::clock::CoarseClockError>(())
    /// ```
    pub fn with_resolution(resolution: Duration) -> Result<Self, CoarseClockError> {
        if !(MIN_COARSE_RESOLUTION..=MAX_COARSE_RESOLUTION).contains(&resolution) {
            return Err(ConfigError::DurationOutOfRange {
                what: "CoarseClock resolution",
                value: resolution,
                min: MIN_COARSE_RESOLUTION,
                max: MAX_COARSE_RESOLUTION,
            }
            .into());
        }
        let timeline = timeline();
        let mut upkeep = lock_upkeep();
        match upkeep.live.finest() {
            // No lease is alive, so no thread runs: the last drop joined it under this lock.
            None => {
                upkeep.thread = Some(
                    UpkeepThread::start(resolution, timeline).map_err(CoarseClockError::Spawn)?,
                );
            }
            Some(finest) if resolution < finest => {
                if let Some(thread) = &upkeep.thread {
                    thread.set_period(resolution);
                }
            }
            Some(_) => {}
        }
        upkeep.live.add(resolution);
        drop(upkeep);
        Ok(CoarseClock {
            _upkeep: Arc::new(UpkeepLease { resolution }),
        })
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        // Relaxed: pairs with the Relaxed `fetch_max` in `refresh_coarse`; the value is the whole
        // message.
        COARSE_NANOS.load(Ordering::Relaxed)
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// The operating system's monotonic clock (`std::time::Instant`), on the same Unix timeline as
/// [`QuantaClock`]. A few nanoseconds slower a read than the TSC, but the kernel keeps it
/// monotonic across cores even where the TSCs of different cores disagree (quanta#111): pick it on
/// such machines.
///
/// ```
/// use floodgate::{Clock, MonotonicClock};
/// let clock = MonotonicClock::new();
/// let a = clock.now_nanos();
/// assert!(clock.now_nanos() >= a);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    base: std::time::Instant,
    unix_base_nanos: u64,
}

impl MonotonicClock {
    /// The process-wide monotonic clock.
    ///
    /// ```
    /// use floodgate::{Clock, MonotonicClock, QuantaClock};
    /// let clock = MonotonicClock::new();
    /// // Same Unix timeline as QuantaClock: within a minute of each other.
    /// let (m, q) = (clock.now_nanos(), QuantaClock::new().now_nanos());
    /// assert!(m.abs_diff(q) < 60_000_000_000);
    /// ```
    pub fn new() -> Self {
        static BASE: OnceLock<MonotonicClock> = OnceLock::new();
        *BASE.get_or_init(|| {
            let timeline = timeline();
            MonotonicClock {
                base: std::time::Instant::now(),
                unix_base_nanos: timeline.now_nanos(),
            }
        })
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.unix_base_nanos
            .saturating_add(duration_to_nanos(self.base.elapsed()))
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// A clock for tests and simulation. Clones share one time; [`advance`](ManualClock::advance) and
/// [`set`](ManualClock::set) move it, and [`sleep`](Clock::sleep) advances it by the duration and
/// records the sleep, so a test can assert an exact sleep sequence without ever sleeping.
///
/// ```
/// use floodgate::{Clock, ManualClock};
/// use std::time::Duration;
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// shared.sleep(Duration::from_millis(200));
/// assert_eq!(clock.now_nanos(), 200_000_000);
/// assert_eq!(clock.sleeps(), vec![Duration::from_millis(200)]);
/// ```
#[derive(Clone, Default, Debug)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Default, Debug)]
struct ManualInner {
    now_nanos: AtomicU64,
    sleeps: Mutex<Vec<Duration>>,
}

impl ManualClock {
    /// A manual clock at time zero.
    ///
    /// ```
    /// use floodgate::{Clock, ManualClock};
    /// assert_eq!(ManualClock::new().now_nanos(), 0);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// A manual clock at `nanos`.
    ///
    /// ```
    /// use floodgate::{Clock, ManualClock};
    /// let clock = ManualClock::starting_at(1_000);
    /// assert_eq!(clock.now_nanos(), 1_000);
    /// ```
    pub fn starting_at(nanos: u64) -> Self {
        let clock = Self::default();
        clock.set(nanos);
        clock
    }

    /// Moves time forward by `duration` (saturating at `u64::MAX` nanoseconds).
    ///
    /// ```
    /// use floodgate::{Clock, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::starting_at(5);
    /// clock.advance(Duration::from_micros(2));
    /// assert_eq!(clock.now_nanos(), 2_005);
    /// assert!(clock.sleeps().is_empty()); // advancing is not sleeping
    /// ```
    pub fn advance(&self, duration: Duration) {
        self.advance_nanos(duration_to_nanos(duration));
    }

    /// Moves time forward by `nanos` (saturating at `u64::MAX`).
    ///
    /// ```
    /// use floodgate::{Clock, ManualClock};
    /// let clock = ManualClock::starting_at(u64::MAX - 1);
    /// clock.advance_nanos(10);
    /// assert_eq!(clock.now_nanos(), u64::MAX); // saturates
    /// ```
    pub fn advance_nanos(&self, nanos: u64) {
        // SeqCst: a test clock; simplest ordering, no hot path.
        let _ = self
            .inner
            .now_nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(nanos))
            });
    }

    /// Sets the time to `nanos`, forwards or backwards (to simulate a clock read that lags).
    ///
    /// ```
    /// use floodgate::{Clock, ManualClock};
    /// let clock = ManualClock::starting_at(500);
    /// clock.set(100); // backwards is allowed
    /// assert_eq!(clock.now_nanos(), 100);
    /// ```
    pub fn set(&self, nanos: u64) {
        self.inner.now_nanos.store(nanos, Ordering::SeqCst);
    }

    /// Every sleep taken through this clock (and its clones), in order.
    ///
    /// ```
    /// use floodgate::{Clock, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// clock.clone().sleep(Duration::from_millis(3));
    /// clock.sleep(Duration::from_millis(4));
    /// assert_eq!(clock.sleeps(), [Duration::from_millis(3), Duration::from_millis(4)]);
    /// assert_eq!(clock.sleeps().len(), 2); // reading does not clear
    /// ```
    pub fn sleeps(&self) -> Vec<Duration> {
        self.lock_sleeps().clone()
    }

    /// Returns the recorded sleeps and clears the record.
    ///
    /// ```
    /// use floodgate::{Clock, ManualClock};
    /// use std::time::Duration;
    /// let clock = ManualClock::new();
    /// clock.sleep(Duration::from_secs(1));
    /// assert_eq!(clock.take_sleeps(), [Duration::from_secs(1)]);
    /// assert!(clock.sleeps().is_empty());
    /// ```
    pub fn take_sleeps(&self) -> Vec<Duration> {
        std::mem::take(&mut *self.lock_sleeps())
    }

    fn lock_sleeps(&self) -> std::sync::MutexGuard<'_, Vec<Duration>> {
        self.inner
            .sleeps
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.inner.now_nanos.load(Ordering::SeqCst)
    }

    fn sleep(&self, duration: Duration) {
        self.lock_sleeps().push(duration);
        self.advance(duration);
    }
}

impl<C: Clock> Clock for Arc<C> {
    #[inline]
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }

    fn sleep(&self, duration: Duration) {
        (**self).sleep(duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_saturates_and_goes_back() {
        let clock = ManualClock::starting_at(u64::MAX - 1);
        clock.advance(Duration::from_secs(10));
        assert_eq!(clock.now_nanos(), u64::MAX);
        clock.set(7);
        assert_eq!(clock.now_nanos(), 7);
    }

    #[test]
    fn manual_clock_records_sleeps_in_order() {
        let clock = ManualClock::new();
        clock.sleep(Duration::from_millis(1));
        clock.sleep(Duration::from_millis(3));
        assert_eq!(clock.now_nanos(), 4_000_000);
        assert_eq!(
            clock.take_sleeps(),
            vec![Duration::from_millis(1), Duration::from_millis(3)]
        );
        assert!(clock.sleeps().is_empty());
    }

    #[test]
    fn real_clocks_share_the_unix_timeline() {
        let quanta = QuantaClock::new();
        let coarse = CoarseClock::new().unwrap();
        let system = duration_to_nanos(SystemTime::now().duration_since(UNIX_EPOCH).unwrap());
        let a = quanta.now_nanos();
        // Within a minute of the system clock: same timeline, not an arbitrary origin.
        assert!(a.abs_diff(system) < 60_000_000_000, "{a} vs {system}");
        assert!(coarse.now_nanos().abs_diff(a) < 60_000_000_000);
        assert!(quanta.now_nanos() >= a);
    }
}

#[cfg(test)]
mod coarse_lifecycle_tests {
    use super::*;
    use std::sync::Barrier;
    use std::time::Instant;

    /// Polls until `clock` moves past `from`; fails only on a hang (10 s of wall time).
    fn assert_advances(clock: &CoarseClock, round: usize) {
        let from = clock.now_nanos();
        let deadline = Instant::now() + Duration::from_secs(10);
        while clock.now_nanos() == from {
            assert!(
                Instant::now() < deadline,
                "round {round}: coarse time frozen"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    #[test]
    fn a_clock_created_while_the_last_is_dropped_always_has_an_upkeep() {
        let barrier = Arc::new(Barrier::new(2));
        for round in 0..200 {
            let old = CoarseClock::with_resolution(MIN_COARSE_RESOLUTION).unwrap();
            let dropper = {
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    drop(old);
                })
            };
            barrier.wait();
            let new = CoarseClock::with_resolution(MIN_COARSE_RESOLUTION).unwrap();
            dropper.join().unwrap();
            assert_advances(&new, round);
        }
    }

    /// A coarse read is a past reading of the shared timeline: never ahead of a quanta read
    /// taken after it (1 ms of slack for cores whose counters disagree), and never moving back.
    #[test]
    fn a_coarse_read_is_a_past_timeline_reading() {
        let coarse = CoarseClock::new().unwrap();
        let quanta = QuantaClock::new();
        let mut last = 0;
        for _ in 0..10_000 {
            let read = coarse.now_nanos();
            assert!(read >= last, "coarse time moved back: {read} < {last}");
            let after = quanta.now_nanos();
            assert!(
                read <= after + 1_000_000,
                "coarse {read} ahead of quanta {after}"
            );
            last = read;
        }
    }

    /// The upkeep's period is the finest live resolution: a finer lease lowers it, the last
    /// lease of the finest resolution gives it back to the next finest, and the last lease of
    /// all leaves none (the thread is stopped). The thread itself: tests/coarse_resolution.rs.
    #[test]
    fn the_upkeep_runs_at_the_finest_live_resolution() {
        let (fine, middle, coarse) = (
            MIN_COARSE_RESOLUTION,
            Duration::from_millis(1),
            MAX_COARSE_RESOLUTION,
        );
        let mut live = LiveResolutions::new();
        assert_eq!(live.finest(), None);
        live.add(middle);
        live.add(coarse);
        assert_eq!(live.finest(), Some(middle));
        live.add(fine);
        live.add(fine);
        assert_eq!(live.finest(), Some(fine));
        live.remove(fine);
        assert_eq!(
            live.finest(),
            Some(fine),
            "one lease of the finest is still alive"
        );
        live.remove(fine);
        assert_eq!(live.finest(), Some(middle));
        live.remove(fine); // none held: nothing changes
        assert_eq!(live.finest(), Some(middle));
        live.remove(middle);
        assert_eq!(live.finest(), Some(coarse));
        live.remove(coarse);
        assert_eq!(live.finest(), None);
    }

    #[test]
    fn bad_resolutions_are_config_errors() {
        for bad in [
            Duration::ZERO,
            Duration::from_micros(99),
            Duration::from_millis(1001),
            Duration::MAX,
        ] {
            match CoarseClock::with_resolution(bad) {
                Err(CoarseClockError::Config(ConfigError::DurationOutOfRange {
                    value,
                    min,
                    max,
                    ..
                })) => {
                    assert_eq!(
                        (value, min, max),
                        (bad, MIN_COARSE_RESOLUTION, MAX_COARSE_RESOLUTION)
                    );
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let message = CoarseClock::with_resolution(Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "CoarseClock resolution must be within 100µs..=1s, got 0ns"
        );
    }
}

#[cfg(test)]
mod internal_examples {
    //! The examples of crate-internal items (doc tests run only on public ones).

    #[test]
    fn duration_to_nanos_example() {
        assert_eq!(
            crate::clock::duration_to_nanos(std::time::Duration::MAX),
            u64::MAX
        );
    }
}

/// The fixed-point timeline against quanta's own conversion, over the whole counter range.
#[cfg(test)]
mod timeline_tests {
    use super::*;

    #[test]
    fn scaled_deltas_match_quanta_over_every_uptime_and_counter_value() {
        let t = timeline();
        let q = &t.clock;
        let mut rng = 0xDEAD_BEEF_1234_5678u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let raw_now = q.raw();
        for i in 0..2_000_000u64 {
            let base = match i % 6 {
                0 => raw_now,
                1 => 0,
                2 => u64::MAX - (next() >> (next() % 64)),
                3 => next(),
                4 => 1 << 63,
                _ => next() >> 1,
            };
            let delta = (next() >> (next() % 64)).min(u64::MAX - base);
            if delta == 0 {
                continue;
            }
            let end = base + delta;
            let ours = scaled(end, t.scale).wrapping_sub(scaled(base, t.scale));
            let theirs = q.delta_as_nanos(base, end);
            // Only deltas whose nanoseconds fit a u64 (quanta truncates beyond).
            if (u128::from(delta) * u128::from(t.scale)) >> SCALE_SHIFT > u128::from(u64::MAX) {
                continue;
            }
            let diff = ours.abs_diff(theirs);
            assert!(
                diff <= 1,
                "base {base} delta {delta}: ours {ours}, quanta {theirs}"
            );
        }
    }

    /// A system clock at or past the end of the u64 nanosecond timeline (or one that reads
    /// absurdly far ahead) starts the timeline at 2^63 ns: it then runs on for 292 years before
    /// it could wrap, instead of wrapping back to 0 within microseconds.
    #[test]
    fn a_start_near_the_end_of_time_does_not_wrap() {
        let t = timeline();
        let base_raw = t.clock.raw();
        let ticks_2us = (2_000u64 << SCALE_SHIFT) / t.scale;
        for unix_base in [u64::MAX - 1_000, u64::MAX, 1 << 63] {
            let late = Timeline::starting_at(t.clock.clone(), t.scale, base_raw, unix_base);
            let (start, later) = (late.now_from(base_raw), late.now_from(base_raw + ticks_2us));
            assert_eq!(start, 1 << 63, "start {unix_base}");
            assert!(
                later > start && later - start <= 2_001,
                "{start} -> {later}"
            );
        }
        let now = Timeline::starting_at(
            t.clock.clone(),
            t.scale,
            base_raw,
            1_700_000_000_000_000_000,
        );
        assert_eq!(now.now_from(base_raw), 1_700_000_000_000_000_000);
    }

    #[test]
    fn the_map_never_steps_back_by_one_tick_anywhere() {
        let t = timeline();
        let step_max = (t.scale >> SCALE_SHIFT) + 1;
        let mut rng = 0x0123_4567_89AB_CDEFu64;
        for _ in 0..1_000_000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            for raw in [rng, u64::MAX - 1 - (rng >> 40), rng >> 1] {
                let (a, b) = (t.now_from(raw), t.now_from(raw + 1));
                assert!(b.wrapping_sub(a) <= step_max, "raw {raw}: {a} -> {b}");
            }
        }
    }
}
