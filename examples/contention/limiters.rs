//! The limiters the contention report (and `benches/contention.rs`) compares: one table entry
//! each. To add an algorithm, add one [`Entry`] to [`entries`]: a name, a constructor for a
//! [`Quota`], and the most it may admit in a measured span.

use std::num::NonZeroU32;
use std::time::Duration;

use floodgate::lease::{LeaseSource, PerCore};
use floodgate::{
    AcquireError, AtomicLimiter, Clock, CoarseClock, ConfigError, Decision, FixedWindow, Gcra,
    LeakyBucket, Limiter, QuantaClock, Rate, Sharded, SlidingWindowLimiter, SmoothBursty,
    SmoothWarmingUp, TokenBucket,
};

/// What a workload asks of every limiter: `limit` permits per `period`, in bursts of up to
/// `limit` (a window's limit, a bucket's capacity, GCRA's burst).
#[derive(Clone, Copy, Debug)]
pub struct Quota {
    pub limit: u32,
    pub period: Duration,
}

/// The clock floodgate's limiters read (governor always reads its own quanta clock).
#[derive(Clone)]
pub enum ClockChoice {
    Quanta,
    Coarse(CoarseClock),
}

impl ClockChoice {
    pub fn name(&self) -> &'static str {
        match self {
            ClockChoice::Quanta => "quanta",
            ClockChoice::Coarse(_) => "coarse",
        }
    }
}

/// The measured span on the quanta timeline (Unix nanoseconds): every call of a run read its
/// clock within `start..=end`.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub start: u64,
    pub end: u64,
}

impl Span {
    pub fn nanos(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }
}

pub type Build = fn(Quota, &ClockChoice) -> Result<Box<dyn Limiter>, ConfigError>;

/// One row of the comparison.
pub struct Entry {
    pub name: &'static str,
    pub build: Build,
    /// The most the limiter may admit over `Span` for `Quota`, from its definition.
    pub bound: fn(Quota, Span) -> u64,
}

/// The reference every ratio is taken against.
pub const GOVERNOR: &str = "governor";
/// governor on its coarse clock (`QuantaUpkeepClock`, 1 ms): the reference of a `--clock coarse`
/// run that has it, so the ratio compares limiters on clocks of the same kind.
pub const GOVERNOR_COARSE: &str = "governor-coarse";

/// Every limiter in the comparison, governor first.
pub fn entries() -> Vec<Entry> {
    vec![
        Entry {
            name: GOVERNOR,
            build: |q, _| Ok(Box::new(Governor::new(q)?)),
            bound: governor_bound,
        },
        Entry {
            name: GOVERNOR_COARSE,
            build: |q, _| Ok(Box::new(Governor::coarse(q)?)),
            bound: governor_bound,
        },
        Entry {
            name: "governor+state",
            build: |q, _| Ok(Box::new(GovernorState::new(q)?)),
            bound: governor_bound,
        },
        Entry {
            name: "ratelimit",
            build: |q, _| Ok(Box::new(RatelimitPeer::new(q)?)),
            bound: ratelimit_bound,
        },
        Entry {
            name: "keyed/hot",
            build: |q, c| keyed_row(q, c, 1),
            bound: |q, s| bucket_bound(q, s),
        },
        Entry {
            name: "keyed/1k",
            build: |q, c| keyed_row(q, c, KEYS_1K),
            bound: |q, s| KEYS_1K * bucket_bound(q, s),
        },
        Entry {
            name: "keyed/100k",
            build: |q, c| keyed_row(q, c, KEYS_100K),
            bound: |q, s| KEYS_100K * bucket_bound(q, s),
        },
        Entry {
            name: "keyed/1m",
            build: |q, c| keyed_row(q, c, KEYS_1M),
            bound: |q, s| KEYS_1M * bucket_bound(q, s),
        },
        Entry {
            name: "governor-keyed/hot",
            build: |q, _| governor_keyed_row(q, 1, std::hash::RandomState::new()),
            bound: governor_bound,
        },
        Entry {
            name: "governor-keyed/1k",
            build: |q, _| governor_keyed_row(q, KEYS_1K, std::hash::RandomState::new()),
            bound: |q, s| KEYS_1K * governor_bound(q, s),
        },
        Entry {
            name: "governor-keyed/100k",
            build: |q, _| governor_keyed_row(q, KEYS_100K, std::hash::RandomState::new()),
            bound: |q, s| KEYS_100K * governor_bound(q, s),
        },
        Entry {
            name: "governor-keyed/1m",
            build: |q, _| governor_keyed_row(q, KEYS_1M, std::hash::RandomState::new()),
            bound: |q, s| KEYS_1M * governor_bound(q, s),
        },
        Entry {
            name: "governor-keyed-ahash/hot",
            build: |q, _| governor_keyed_row(q, 1, ahash::RandomState::new()),
            bound: governor_bound,
        },
        Entry {
            name: "governor-keyed-ahash/1k",
            build: |q, _| governor_keyed_row(q, KEYS_1K, ahash::RandomState::new()),
            bound: |q, s| KEYS_1K * governor_bound(q, s),
        },
        Entry {
            name: "governor-keyed-ahash/100k",
            build: |q, _| governor_keyed_row(q, KEYS_100K, ahash::RandomState::new()),
            bound: |q, s| KEYS_100K * governor_bound(q, s),
        },
        Entry {
            name: "governor-keyed-ahash/1m",
            build: |q, _| governor_keyed_row(q, KEYS_1M, ahash::RandomState::new()),
            bound: |q, s| KEYS_1M * governor_bound(q, s),
        },
        Entry {
            name: "floor/fetch-add",
            build: |q, c| Ok(Box::new(Floor::new(q, FloorOp::FetchAdd, c))),
            bound: no_bound,
        },
        Entry {
            name: "floor/cas",
            build: |q, c| Ok(Box::new(Floor::new(q, FloorOp::Cas, c))),
            bound: no_bound,
        },
        Entry {
            name: "floor/clock",
            build: |q, c| Ok(Box::new(Floor::new(q, FloorOp::Clock, c))),
            bound: no_bound,
        },
        Entry {
            name: "fixed-window/anchored",
            build: |q, c| boxed(FixedWindow::new(q.limit, q.period)?, c),
            bound: anchored_window_bound,
        },
        Entry {
            name: "fixed-window/aligned",
            build: |q, c| boxed(FixedWindow::aligned(q.limit, q.period)?, c),
            bound: aligned_window_bound,
        },
        Entry {
            name: "token-bucket",
            build: |q, c| boxed(TokenBucket::new(rate(q), q.limit)?, c),
            bound: bucket_bound,
        },
        Entry {
            name: "leaky-bucket",
            build: |q, c| boxed(LeakyBucket::new(rate(q), q.limit)?, c),
            bound: bucket_bound,
        },
        Entry {
            name: "gcra",
            build: |q, c| boxed(Gcra::new(rate(q), q.limit)?, c),
            bound: bucket_bound,
        },
        Entry {
            name: "sharded",
            build: |q, c| {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                Ok(match c {
                    ClockChoice::Quanta => Box::new(Sharded::with_clock(
                        q.limit,
                        q.period,
                        cores,
                        QuantaClock::new(),
                    )?),
                    ClockChoice::Coarse(clock) => Box::new(Sharded::with_clock(
                        q.limit,
                        q.period,
                        cores,
                        clock.clone(),
                    )?),
                })
            },
            bound: aligned_window_bound,
        },
        Entry {
            name: "per-core/gcra",
            build: |q, c| per_core(Gcra::new(rate(q), q.limit)?, c),
            bound: per_core_bucket_bound,
        },
        Entry {
            name: "per-core/token-bucket",
            build: |q, c| per_core(TokenBucket::new(rate(q), q.limit)?, c),
            bound: per_core_bucket_bound,
        },
        Entry {
            name: "per-core/fixed-window",
            build: |q, c| per_core(FixedWindow::aligned(q.limit, q.period)?, c),
            bound: aligned_window_bound,
        },
        Entry {
            name: "per-core/sliding-window",
            build: |q, c| {
                Ok(match c {
                    ClockChoice::Quanta => {
                        Box::new(PerCore::new(SlidingWindowLimiter::with_clock(
                            q.limit,
                            q.period,
                            SLIDING_CELLS,
                            QuantaClock::new(),
                        )?))
                    }
                    ClockChoice::Coarse(clock) => {
                        Box::new(PerCore::new(SlidingWindowLimiter::with_clock(
                            q.limit,
                            q.period,
                            SLIDING_CELLS,
                            clock.clone(),
                        )?))
                    }
                })
            },
            bound: sliding_window_bound,
        },
        Entry {
            name: "sliding-window",
            build: |q, c| {
                Ok(match c {
                    ClockChoice::Quanta => Box::new(SlidingWindowLimiter::with_clock(
                        q.limit,
                        q.period,
                        SLIDING_CELLS,
                        QuantaClock::new(),
                    )?),
                    ClockChoice::Coarse(clock) => Box::new(SlidingWindowLimiter::with_clock(
                        q.limit,
                        q.period,
                        SLIDING_CELLS,
                        clock.clone(),
                    )?),
                })
            },
            bound: sliding_window_bound,
        },
        Entry {
            name: "smooth-bursty",
            build: |q, c| {
                // Guava's SmoothBursty at limit/period, storing up to one period of permits.
                let (rate, burst) = (per_second(q), q.period.as_secs_f64());
                Ok(match c {
                    ClockChoice::Quanta => Box::new(SmoothBursty::with_max_burst(
                        rate,
                        burst,
                        QuantaClock::new(),
                    )?),
                    ClockChoice::Coarse(clock) => {
                        Box::new(SmoothBursty::with_max_burst(rate, burst, clock.clone())?)
                    }
                })
            },
            bound: smooth_bound,
        },
        Entry {
            name: "smooth-warming-up",
            build: |q, c| {
                // Guava's SmoothWarmingUp at limit/period, warming up over one period.
                let rate = per_second(q);
                Ok(match c {
                    ClockChoice::Quanta => Box::new(SmoothWarmingUp::create_with_clock(
                        rate,
                        q.period,
                        QuantaClock::new(),
                    )?),
                    ClockChoice::Coarse(clock) => Box::new(SmoothWarmingUp::create_with_clock(
                        rate,
                        q.period,
                        clock.clone(),
                    )?),
                })
            },
            bound: smooth_bound,
        },
    ]
}

/// Cells of the sliding window rows.
const SLIDING_CELLS: u32 = 10;

/// Sliding window: at most `limit` in any `SLIDING_CELLS` consecutive cells, so at most `limit`
/// per group of that many cells among those the span touches.
fn sliding_window_bound(q: Quota, s: Span) -> u64 {
    let cell = (nanos(q.period) / u64::from(SLIDING_CELLS)).max(1);
    let touched = s.end / cell - s.start / cell + 1;
    u64::from(q.limit) * touched.div_ceil(u64::from(SLIDING_CELLS))
}

fn per_second(q: Quota) -> f64 {
    f64::from(q.limit) / q.period.as_secs_f64()
}

/// Smooth limiters: at most `limit` stored permits (one period's worth), one request granted
/// ahead on credit (pre-consumption), and one permit per interval of the span.
fn smooth_bound(q: Quota, s: Span) -> u64 {
    u64::from(q.limit) + 1 + (s.nanos() as f64 * per_second(q) / 1e9).ceil() as u64
}

/// The quota's rate as the buckets take it: one permit per whole-nanosecond interval, rounded to
/// nearest (a `Rate` whose rounding would change it by more than 0.1% is refused, and the at-limit
/// quotas come from a measured throughput, so they are rounded here, once, visibly).
fn rate(q: Quota) -> Rate {
    let period = nanos(q.period);
    let limit = u64::from(q.limit.max(1));
    let interval = ((period + limit / 2) / limit).max(1);
    Rate::new(1, Duration::from_nanos(interval))
}

fn boxed<A: floodgate::Algorithm>(
    algorithm: A,
    clock: &ClockChoice,
) -> Result<Box<dyn Limiter>, ConfigError> {
    Ok(match clock {
        ClockChoice::Quanta => Box::new(AtomicLimiter::with_clock(algorithm, QuantaClock::new())),
        ClockChoice::Coarse(c) => Box::new(AtomicLimiter::with_clock(algorithm, c.clone())),
    })
}

/// `algorithm` as the exact source of a `PerCore` limiter (one stripe per core, the defaults).
fn per_core<A: floodgate::Algorithm>(
    algorithm: A,
    clock: &ClockChoice,
) -> Result<Box<dyn Limiter>, ConfigError>
where
    AtomicLimiter<A, QuantaClock>: LeaseSource,
    AtomicLimiter<A, CoarseClock>: LeaseSource,
{
    Ok(match clock {
        ClockChoice::Quanta => Box::new(PerCore::new(AtomicLimiter::with_clock(
            algorithm,
            QuantaClock::new(),
        ))),
        ClockChoice::Coarse(c) => Box::new(PerCore::new(AtomicLimiter::with_clock(
            algorithm,
            c.clone(),
        ))),
    })
}

/// A leased bucket: the exact bucket's bound plus the most permits the stripes can hold when
/// the span starts (`PerCore::stranded_bound` with the defaults), served late.
fn per_core_bucket_bound(q: Quota, s: Span) -> u64 {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let stripes = cores.next_power_of_two() as u64;
    bucket_bound(q, s) + stripes * u64::from(floodgate::lease::DEFAULT_MAX_LEASE - 1)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// Anchored windows are disjoint and `period` long, so at most `span / period + 1` of them open
/// within the span.
fn anchored_window_bound(q: Quota, s: Span) -> u64 {
    u64::from(q.limit) * (s.nanos() / nanos(q.period) + 1)
}

/// Aligned windows: every window index the span touches.
fn aligned_window_bound(q: Quota, s: Span) -> u64 {
    let p = nanos(q.period);
    u64::from(q.limit) * (s.end / p - s.start / p + 1)
}

/// A full bucket of `limit`, plus one permit per (rounded) interval of the span.
fn bucket_bound(q: Quota, s: Span) -> u64 {
    let interval = rate(q).nanos_per_permit().unwrap_or(1).max(1);
    u64::from(q.limit) + s.nanos() / interval
}

fn governor_quota(q: Quota) -> Result<governor::Quota, ConfigError> {
    let burst = NonZeroU32::new(q.limit).ok_or(ConfigError::ZeroLimit)?;
    let quota =
        governor::Quota::with_period(q.period / q.limit).ok_or(ConfigError::RateTooHigh {
            finest: Duration::from_nanos(1),
        })?;
    Ok(quota.allow_burst(burst))
}

/// GCRA as governor runs it: the burst, plus one cell per replenish interval of the span.
fn governor_bound(q: Quota, s: Span) -> u64 {
    let interval = governor_quota(q).map_or(1, |g| nanos(g.replenish_interval()));
    u64::from(q.limit) + s.nanos() / interval
}

/// governor's direct limiter behind floodgate's trait, so every row goes through the same
/// `Box<dyn Limiter>` call. It does not compute governor's wait time on a denial (that costs a
/// second clock read, which governor callers only pay when they ask): the report needs only
/// allowed/denied. `C`: the clock governor reads, its quanta clock (`governor`) or its
/// `QuantaUpkeepClock` (`governor-coarse`: an atomic load of quanta's recent time, refreshed by
/// an upkeep thread every millisecond, as floodgate's coarse clock is).
pub struct Governor<C: governor::clock::Clock = governor::clock::DefaultClock> {
    inner: governor::RateLimiter<
        governor::state::NotKeyed,
        governor::state::InMemoryState,
        C,
        governor::middleware::NoOpMiddleware<C::Instant>,
    >,
    burst: u32,
    clock: QuantaClock,
}

impl Governor {
    pub fn new(q: Quota) -> Result<Self, ConfigError> {
        Self::with_clock(q, governor::clock::DefaultClock::default())
    }
}

impl Governor<governor::clock::QuantaUpkeepClock> {
    /// governor on its `QuantaUpkeepClock` with a 1 ms upkeep, floodgate's coarse resolution.
    /// quanta runs one upkeep thread per process (a second start fails while the first runs), so
    /// every row shares one clock, started on first use and kept for the process.
    pub fn coarse(q: Quota) -> Result<Self, ConfigError> {
        static CLOCK: std::sync::OnceLock<Result<governor::clock::QuantaUpkeepClock, String>> =
            std::sync::OnceLock::new();
        let clock = CLOCK
            .get_or_init(|| {
                governor::clock::QuantaUpkeepClock::from_interval(Duration::from_millis(1))
                    .map_err(|e| e.to_string())
            })
            .clone()
            .map_err(|_| ConfigError::Invalid {
                what: "clock",
                why: "governor's QuantaUpkeepClock could not start its upkeep thread",
            })?;
        Self::with_clock(q, clock)
    }
}

impl<C: governor::clock::Clock> Governor<C> {
    fn with_clock(q: Quota, clock: C) -> Result<Self, ConfigError> {
        Ok(Governor {
            inner: governor::RateLimiter::direct_with_clock(governor_quota(q)?, clock),
            burst: q.limit,
            clock: QuantaClock::new(),
        })
    }

    /// The request checks floodgate's limiters make (a zero count, more than the burst).
    fn validate(&self, n: u32) -> Result<(), AcquireError> {
        if n == 0 {
            return Err(AcquireError::ZeroPermits);
        }
        if n > self.burst {
            return Err(AcquireError::ExceedsCapacity {
                requested: u64::from(n),
                capacity: u64::from(self.burst),
            });
        }
        Ok(())
    }
}

impl<C> Limiter for Governor<C>
where
    C: governor::clock::Clock + Send + Sync,
    C::Instant: Send + Sync,
{
    #[inline]
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        self.validate(n)?;
        let allowed = match NonZeroU32::new(n) {
            Some(n) if n.get() > 1 => matches!(self.inner.check_n(n), Ok(Ok(()))),
            _ => self.inner.check().is_ok(),
        };
        let limit = u64::from(self.burst);
        Ok(if allowed {
            Decision::allow(limit, 0, 0)
        } else {
            Decision::deny(limit, 0, 0, 0)
        })
    }

    /// governor's own bool answer: `check()` for one permit, straight away (no count checks:
    /// `check` takes no count), `check_n` otherwise; the work of floodgate's `admit`.
    #[inline]
    fn admit(&self, n: u32) -> Result<bool, AcquireError> {
        if n == 1 {
            return Ok(self.inner.check().is_ok());
        }
        self.validate(n)?;
        match NonZeroU32::new(n) {
            Some(n) => Ok(matches!(self.inner.check_n(n), Ok(Ok(())))),
            None => Err(AcquireError::ZeroPermits),
        }
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    fn set_limit(&self, _limit: u32) -> Result<(), ConfigError> {
        Err(ConfigError::Invalid {
            what: "limit",
            why: "governor's quota is fixed at construction",
        })
    }

    fn limit(&self) -> u64 {
        u64::from(self.burst)
    }
}

/// governor with `StateInformationMiddleware`: the same work as floodgate's `try_acquire`,
/// everything a 429 needs (remaining on an admission; on a denial the wait, which costs governor
/// a second clock read).
pub struct GovernorState {
    inner: governor::RateLimiter<
        governor::state::NotKeyed,
        governor::state::InMemoryState,
        governor::clock::QuantaClock,
        governor::middleware::StateInformationMiddleware,
    >,
    burst: u32,
    clock: QuantaClock,
}

impl GovernorState {
    pub fn new(q: Quota) -> Result<Self, ConfigError> {
        Ok(GovernorState {
            inner: governor::RateLimiter::direct(governor_quota(q)?)
                .with_middleware::<governor::middleware::StateInformationMiddleware>(),
            burst: q.limit,
            clock: QuantaClock::new(),
        })
    }
}

impl Limiter for GovernorState {
    #[inline]
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        use governor::clock::Clock as _;
        let limit = u64::from(self.burst);
        let n = NonZeroU32::new(n).ok_or(AcquireError::ZeroPermits)?;
        let checked = if n.get() == 1 {
            self.inner.check().map_err(Some)
        } else {
            match self.inner.check_n(n) {
                Ok(result) => result.map_err(|_| None),
                Err(_) => {
                    return Err(AcquireError::ExceedsCapacity {
                        requested: u64::from(n.get()),
                        capacity: limit,
                    });
                }
            }
        };
        Ok(match checked {
            Ok(snapshot) => {
                Decision::allow(limit, u64::from(snapshot.remaining_burst_capacity()), 0)
            }
            Err(Some(not_until)) => {
                let wait = not_until.wait_time_from(self.inner.clock().now());
                let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
                Decision::deny(limit, 0, wait, wait)
            }
            Err(None) => Decision::deny(limit, 0, 0, 0),
        })
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    fn set_limit(&self, _limit: u32) -> Result<(), ConfigError> {
        Err(ConfigError::Invalid {
            what: "limit",
            why: "governor's quota is fixed at construction",
        })
    }

    fn limit(&self) -> u64 {
        u64::from(self.burst)
    }
}

/// `ratelimit`'s token bucket (the crate's own lock-free limiter) on a quanta clock, full at the
/// start, `limit` tokens per `period`, bursts of `limit`.
pub struct RatelimitPeer {
    inner: ratelimit::Ratelimiter<QuantaElapsed>,
    limit: u32,
    clock: QuantaClock,
}

/// quanta as `ratelimit`'s clock (time since creation).
pub struct QuantaElapsed {
    clock: QuantaClock,
    start: u64,
}

impl ratelimit::Clock for QuantaElapsed {
    #[inline]
    fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.clock.now_nanos().saturating_sub(self.start))
    }
}

impl RatelimitPeer {
    pub fn new(q: Quota) -> Result<Self, ConfigError> {
        let clock = QuantaClock::new();
        let elapsed = QuantaElapsed {
            start: clock.now_nanos(),
            clock,
        };
        let inner = ratelimit::Builder::with_clock(u64::from(q.limit), elapsed)
            .period(q.period)
            .max_tokens(u64::from(q.limit))
            .initial_available(u64::from(q.limit))
            .build()
            .map_err(|_| ConfigError::Invalid {
                what: "ratelimit quota",
                why: "refused by ratelimit's builder",
            })?;
        Ok(RatelimitPeer {
            inner,
            limit: q.limit,
            clock,
        })
    }
}

impl Limiter for RatelimitPeer {
    #[inline]
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        if n == 0 {
            return Err(AcquireError::ZeroPermits);
        }
        let limit = u64::from(self.limit);
        Ok(match self.inner.try_wait_n(u64::from(n)) {
            Ok(()) => Decision::allow(limit, 0, 0),
            Err(ratelimit::TryWaitError::Insufficient(wait)) => {
                let wait = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
                Decision::deny(limit, 0, wait, wait)
            }
            Err(_) => {
                return Err(AcquireError::ExceedsCapacity {
                    requested: u64::from(n),
                    capacity: limit,
                });
            }
        })
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    fn set_limit(&self, _limit: u32) -> Result<(), ConfigError> {
        Err(ConfigError::Invalid {
            what: "limit",
            why: "not measured",
        })
    }

    fn limit(&self) -> u64 {
        u64::from(self.limit)
    }
}

/// `ratelimit` refills at most once per microsecond (and a lost refill race skips a refill): a
/// full bucket plus one token per interval of the span bounds it, as for the buckets.
fn ratelimit_bound(q: Quota, s: Span) -> u64 {
    u64::from(q.limit)
        + (u128::from(s.nanos()) * u128::from(q.limit) / u128::from(nanos(q.period))) as u64
        + 1
}

/// The machine's floors, as rows: what one call costs at least when all it does is one shared
/// `fetch_add`, one load + compare-exchange loop on a shared word, or one read of the clock
/// floodgate's limiters read (`--clock`: quanta, or the coarse clock's one load).
/// Every call is admitted; they limit nothing (no bound).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum FloorOp {
    FetchAdd,
    Cas,
    Clock,
}

pub struct Floor {
    op: FloorOp,
    word: crossbeam_utils::CachePadded<std::sync::atomic::AtomicU64>,
    limit: u32,
    clock: QuantaClock,
    /// `FloorOp::Clock` reads this coarse clock if set, else `clock`.
    coarse: Option<CoarseClock>,
}

impl Floor {
    pub fn new(q: Quota, op: FloorOp, read: &ClockChoice) -> Self {
        Floor {
            op,
            word: Default::default(),
            limit: q.limit,
            clock: QuantaClock::new(),
            coarse: match read {
                ClockChoice::Quanta => None,
                ClockChoice::Coarse(c) => Some(c.clone()),
            },
        }
    }
}

impl Limiter for Floor {
    #[inline]
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        let seen = match self.op {
            FloorOp::FetchAdd => self.word.fetch_add(u64::from(n), AcqRel),
            FloorOp::Cas => {
                let mut current = self.word.load(Acquire);
                loop {
                    match self.word.compare_exchange_weak(
                        current,
                        current + u64::from(n),
                        AcqRel,
                        Acquire,
                    ) {
                        Ok(seen) => break seen,
                        Err(now) => current = now,
                    }
                }
            }
            FloorOp::Clock => match &self.coarse {
                Some(coarse) => coarse.now_nanos(),
                None => self.clock.now_nanos(),
            },
        };
        std::hint::black_box(seen);
        Ok(Decision::allow(u64::from(self.limit), 0, 0))
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    fn set_limit(&self, _limit: u32) -> Result<(), ConfigError> {
        Ok(())
    }

    fn limit(&self) -> u64 {
        u64::from(self.limit)
    }
}

/// The floors limit nothing.
fn no_bound(_: Quota, _: Span) -> u64 {
    u64::MAX
}

/// The row a row's `×gov` ratio is taken against: governor's keyed limiter (default hasher) with
/// the same keys for the keyed rows, governor's direct limiter for the others.
pub fn reference(name: &str) -> &'static str {
    match name.rsplit_once('/') {
        Some((family, keys)) if family == "keyed" || family.starts_with("governor-keyed") => {
            match keys {
                "hot" => "governor-keyed/hot",
                "1k" => "governor-keyed/1k",
                "100k" => "governor-keyed/100k",
                _ => "governor-keyed/1m",
            }
        }
        _ => GOVERNOR,
    }
}

/// Keys of the `/1k` keyed rows.
const KEYS_1K: u64 = 1_024;
/// Keys of the `/100k` keyed rows.
const KEYS_100K: u64 = 100_000;
/// Keys of the `/1m` keyed rows.
const KEYS_1M: u64 = 1 << 20;

thread_local! {
    /// The next key a thread asks a keyed row for: each thread walks the keys round robin from
    /// its own start, so with a generous quota a key goes idle between two uses (the churn case).
    static CURSOR: std::cell::Cell<u64> = std::cell::Cell::new({
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::hash::RandomState::new().build_hasher();
        h.write_u64(0);
        h.finish()
    });
}

fn next_key(keys: u64) -> u64 {
    CURSOR.with(|c| {
        let k = c.get();
        c.set(k.wrapping_add(1));
        k % keys
    })
}

/// A keyed limiter as one row: every call asks for the calling thread's next key.
pub struct KeyedRow<K> {
    inner: K,
    keys: u64,
    limit: u32,
    clock: QuantaClock,
}

/// What a keyed row calls.
pub trait KeyedCall: Send + Sync {
    fn call(&self, key: u64, n: u32) -> Result<Decision, AcquireError>;
}

impl<C: Clock> KeyedCall for floodgate::Keyed<u64, Gcra, C> {
    #[inline]
    fn call(&self, key: u64, n: u32) -> Result<Decision, AcquireError> {
        self.try_acquire(&key, n)
    }
}

/// governor's keyed limiter (DashMap) with hasher `S`, asked only "allowed?" as the governor
/// row is.
pub struct GovernorKeyed<S: std::hash::BuildHasher + Default + Clone + Send + Sync> {
    inner: governor::RateLimiter<
        u64,
        governor::state::keyed::DashMapStateStore<u64, S>,
        governor::clock::QuantaClock,
    >,
}

impl<S: std::hash::BuildHasher + Default + Clone + Send + Sync> KeyedCall for GovernorKeyed<S> {
    #[inline]
    fn call(&self, key: u64, n: u32) -> Result<Decision, AcquireError> {
        let allowed = match NonZeroU32::new(n) {
            Some(n) if n.get() > 1 => matches!(self.inner.check_key_n(&key, n), Ok(Ok(()))),
            _ => self.inner.check_key(&key).is_ok(),
        };
        Ok(if allowed {
            Decision::allow(0, 0, 0)
        } else {
            Decision::deny(0, 0, 0, 0)
        })
    }
}

impl<K: KeyedCall> Limiter for KeyedRow<K> {
    #[inline]
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        self.inner.call(next_key(self.keys), n)
    }

    fn clock(&self) -> &dyn Clock {
        &self.clock
    }

    fn set_limit(&self, _limit: u32) -> Result<(), ConfigError> {
        Err(ConfigError::Invalid {
            what: "limit",
            why: "not measured",
        })
    }

    fn limit(&self) -> u64 {
        u64::from(self.limit)
    }
}

fn keyed_row(q: Quota, c: &ClockChoice, keys: u64) -> Result<Box<dyn Limiter>, ConfigError> {
    let max_keys = usize::try_from(2 * keys).unwrap_or(usize::MAX).max(1024);
    let gcra = Gcra::new(rate(q), q.limit)?;
    Ok(match c {
        ClockChoice::Quanta => Box::new(KeyedRow {
            inner: floodgate::Keyed::builder(gcra).max_keys(max_keys).build()?,
            keys,
            limit: q.limit,
            clock: QuantaClock::new(),
        }),
        ClockChoice::Coarse(clock) => Box::new(KeyedRow {
            inner: floodgate::Keyed::builder(gcra)
                .clock(clock.clone())
                .max_keys(max_keys)
                .build()?,
            keys,
            limit: q.limit,
            clock: QuantaClock::new(),
        }),
    })
}

fn governor_keyed_row<S: std::hash::BuildHasher + Default + Clone + Send + Sync + 'static>(
    q: Quota,
    keys: u64,
    hasher: S,
) -> Result<Box<dyn Limiter>, ConfigError> {
    let inner = governor::RateLimiter::dashmap_with_clock_and_hasher(
        governor_quota(q)?,
        governor::clock::QuantaClock::default(),
        hasher,
    );
    Ok(Box::new(KeyedRow {
        inner: GovernorKeyed { inner },
        keys,
        limit: q.limit,
        clock: QuantaClock::new(),
    }))
}

/// The three workloads of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// The limit is never reached: 10,000,000 permits per 10 ms (10^9 a second).
    AllowHeavy,
    /// The limit is exhausted at once: 1,024 permits per hour.
    DenyHeavy,
    /// A rate at which about half the calls pass (set by the caller from a measurement).
    AtLimit,
}

impl Workload {
    pub const ALL: [Workload; 3] = [Workload::AllowHeavy, Workload::DenyHeavy, Workload::AtLimit];

    pub fn name(self) -> &'static str {
        match self {
            Workload::AllowHeavy => "allow-heavy",
            Workload::DenyHeavy => "deny-heavy",
            Workload::AtLimit => "at-limit",
        }
    }

    /// The quota for this workload; `at_limit_per_second` is used by [`Workload::AtLimit`] only,
    /// as permits per 10 ms windows / bucket periods.
    pub fn quota(self, at_limit_per_second: f64) -> Quota {
        const TEN_MS: Duration = Duration::from_millis(10);
        match self {
            Workload::AllowHeavy => Quota {
                limit: 10_000_000,
                period: TEN_MS,
            },
            Workload::DenyHeavy => Quota {
                limit: 1_024,
                period: Duration::from_secs(3600),
            },
            Workload::AtLimit => Quota {
                limit: (at_limit_per_second / 100.0).clamp(1.0, 10_000_000.0) as u32,
                period: TEN_MS,
            },
        }
    }
}
