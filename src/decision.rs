//! What a check returns ([`Decision`]), how rates are written ([`Rate`]), and the errors.

use std::fmt;
use std::time::Duration;

/// The answer to one check: allowed or not, plus what a server puts in its response headers
/// (`RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`, `Retry-After`).
///
/// ```
/// use floodgate::{AtomicLimiter, FixedWindow, Limiter, ManualClock};
/// use std::time::Duration;
/// let limiter = AtomicLimiter::with_clock(
///     FixedWindow::new(2, Duration::from_secs(1)).unwrap(),
///     ManualClock::new(),
/// );
/// let d = limiter.try_acquire(1).unwrap();
/// assert!(d.is_allowed());
/// assert_eq!((d.limit(), d.remaining()), (2, 1));
/// assert_eq!(d.reset_after(), Duration::from_secs(1));
/// ```
#[derive(Clone, Copy)]
pub struct Decision {
    allowed: bool,
    limit: u64,
    /// Remaining permits in units of `remaining_unit` (1 for counts, the nanoseconds a permit is
    /// worth for time-word algorithms): the division happens only if a caller asks.
    remaining: u64,
    remaining_unit: u64,
    retry_after_nanos: u64,
    reset_after_nanos: u64,
}

impl Decision {
    /// An allowing decision. `remaining` is what is left after this request.
    ///
    /// ```
    /// let d = floodgate::Decision::allow(10, 9, 100);
    /// assert!(d.is_allowed() && d.retry_after().is_zero());
    /// ```
    #[inline]
    pub const fn allow(limit: u64, remaining: u64, reset_after_nanos: u64) -> Self {
        Self::allow_scaled(limit, remaining, 1, reset_after_nanos)
    }

    /// An allowing decision whose `remaining` is given in units of `unit` (for example nanoseconds
    /// of accrued refill, with `unit` the nanoseconds one permit is worth); `remaining()` divides.
    /// A `unit` of 0 is taken as 1.
    ///
    /// ```
    /// let d = floodgate::Decision::allow_scaled(10, 2_500, 1_000, 0);
    /// assert_eq!(d.remaining(), 2);
    /// assert_eq!(d, floodgate::Decision::allow(10, 2, 0));
    /// ```
    #[inline]
    pub const fn allow_scaled(
        limit: u64,
        remaining: u64,
        unit: u64,
        reset_after_nanos: u64,
    ) -> Self {
        Decision {
            allowed: true,
            limit,
            remaining,
            remaining_unit: if unit == 0 { 1 } else { unit },
            retry_after_nanos: 0,
            reset_after_nanos,
        }
    }

    /// A denying decision. `retry_after_nanos` is raised to at least 1 ns, so a caller that waits
    /// it out always makes progress.
    ///
    /// ```
    /// let d = floodgate::Decision::deny(10, 0, 0, 50);
    /// assert!(!d.is_allowed());
    /// assert_eq!(d.retry_after().as_nanos(), 1);
    /// ```
    #[inline]
    pub const fn deny(
        limit: u64,
        remaining: u64,
        retry_after_nanos: u64,
        reset_after_nanos: u64,
    ) -> Self {
        Self::deny_scaled(limit, remaining, 1, retry_after_nanos, reset_after_nanos)
    }

    /// A denying decision whose `remaining` is in units of `unit`, as [`Decision::allow_scaled`].
    ///
    /// ```
    /// let d = floodgate::Decision::deny_scaled(10, 999, 1_000, 1, 5);
    /// assert_eq!(d.remaining(), 0);
    /// ```
    #[inline]
    pub const fn deny_scaled(
        limit: u64,
        remaining: u64,
        unit: u64,
        retry_after_nanos: u64,
        reset_after_nanos: u64,
    ) -> Self {
        Decision {
            allowed: false,
            limit,
            remaining,
            remaining_unit: if unit == 0 { 1 } else { unit },
            retry_after_nanos: if retry_after_nanos == 0 {
                1
            } else {
                retry_after_nanos
            },
            reset_after_nanos,
        }
    }

    /// Whether the request was admitted (and its permits consumed).
    ///
    /// ```
    /// use floodgate::Decision;
    /// assert!(Decision::allow(10, 9, 0).is_allowed());
    /// assert!(!Decision::deny(10, 0, 5, 5).is_allowed());
    /// ```
    #[inline]
    pub const fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The limit in force: the window's limit or the bucket's capacity.
    ///
    /// ```
    /// assert_eq!(floodgate::Decision::allow(10, 9, 0).limit(), 10);
    /// ```
    #[inline]
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// Permits a request could still take right now (after this one, if it was allowed).
    ///
    /// ```
    /// use floodgate::Decision;
    /// assert_eq!(Decision::allow(10, 9, 0).remaining(), 9);
    /// assert_eq!(Decision::allow_scaled(10, 1_999, 1_000, 0).remaining(), 1); // rounds down
    /// ```
    #[inline]
    pub const fn remaining(&self) -> u64 {
        self.remaining / self.remaining_unit
    }

    /// Zero when allowed; otherwise the time until the same request could be allowed, if nobody
    /// else takes permits meanwhile.
    ///
    /// ```
    /// use floodgate::Decision;
    /// use std::time::Duration;
    /// assert_eq!(Decision::deny(10, 0, 2_000, 5_000).retry_after(), Duration::from_micros(2));
    /// assert_eq!(Decision::allow(10, 0, 5_000).retry_after(), Duration::ZERO);
    /// ```
    #[inline]
    pub const fn retry_after(&self) -> Duration {
        Duration::from_nanos(self.retry_after_nanos)
    }

    /// Time until the limiter is back to full capacity (window end, or bucket refilled).
    ///
    /// ```
    /// use std::time::Duration;
    /// let d = floodgate::Decision::deny(10, 0, 2_000, 5_000);
    /// assert_eq!(d.reset_after(), Duration::from_micros(5));
    /// ```
    #[inline]
    pub const fn reset_after(&self) -> Duration {
        Duration::from_nanos(self.reset_after_nanos)
    }

    /// The same decision reporting another `limit` (a limiter built from parts, such as a sharded
    /// one, restating a part's decision with the whole limit).
    ///
    /// ```
    /// let d = floodgate::Decision::allow(5, 2, 10).with_limit(20);
    /// assert_eq!((d.limit(), d.remaining()), (20, 2));
    /// ```
    #[inline]
    pub const fn with_limit(self, limit: u64) -> Self {
        Decision { limit, ..self }
    }

    fn key(&self) -> (bool, u64, u64, u64, u64) {
        (
            self.allowed,
            self.limit,
            self.remaining(),
            self.retry_after_nanos,
            self.reset_after_nanos,
        )
    }
}

impl PartialEq for Decision {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Decision {}

impl std::hash::Hash for Decision {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Decision")
            .field("allowed", &self.allowed)
            .field("limit", &self.limit)
            .field("remaining", &self.remaining())
            .field("retry_after", &self.retry_after())
            .field("reset_after", &self.reset_after())
            .finish()
    }
}

/// A rate: `amount` permits per `period`.
///
/// ```
/// use floodgate::Rate;
/// use std::time::Duration;
/// let r = Rate::per_second(100);
/// assert_eq!(r, Rate::new(100, Duration::from_secs(1)));
/// assert_eq!(r.nanos_per_permit().unwrap(), 10_000_000);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    amount: u32,
    period: Duration,
}

impl Rate {
    /// `amount` permits per `period`.
    ///
    /// ```
    /// use floodgate::Rate;
    /// use std::time::Duration;
    /// let r = Rate::new(3, Duration::from_millis(30));
    /// assert_eq!(r.nanos_per_permit().unwrap(), 10_000_000);
    /// ```
    pub const fn new(amount: u32, period: Duration) -> Self {
        Rate { amount, period }
    }

    /// `amount` permits per second.
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = floodgate::Rate::per_second(4);
    /// assert_eq!((r.amount(), r.period()), (4, Duration::from_secs(1)));
    /// ```
    pub const fn per_second(amount: u32) -> Self {
        Self::new(amount, Duration::from_secs(1))
    }

    /// `amount` permits per minute.
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(floodgate::Rate::per_minute(6).period(), Duration::from_secs(60));
    /// assert_eq!(floodgate::Rate::per_minute(6).nanos_per_permit().unwrap(), 10_000_000_000);
    /// ```
    pub const fn per_minute(amount: u32) -> Self {
        Self::new(amount, Duration::from_secs(60))
    }

    /// `amount` permits per hour.
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(floodgate::Rate::per_hour(1).period(), Duration::from_secs(3600));
    /// ```
    pub const fn per_hour(amount: u32) -> Self {
        Self::new(amount, Duration::from_secs(3600))
    }

    /// Permits per period.
    ///
    /// ```
    /// assert_eq!(floodgate::Rate::per_second(7).amount(), 7);
    /// ```
    pub const fn amount(&self) -> u32 {
        self.amount
    }

    /// The period.
    ///
    /// ```
    /// use std::time::Duration;
    /// let r = floodgate::Rate::new(1, Duration::from_millis(250));
    /// assert_eq!(r.period(), Duration::from_millis(250));
    /// ```
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The time one permit is worth, in whole nanoseconds (rounded to nearest). A rate that this
    /// rounding would change by more than 0.1% (at most [`MAX_RATE_ROUNDING_PER_MILLE`]‰) is
    /// refused rather than silently turned into another rate.
    ///
    /// # Errors
    /// [`ConfigError::ZeroLimit`] for a zero amount, [`ConfigError::ZeroPeriod`] for a zero
    /// period, [`ConfigError::RateTooHigh`] when one permit would be worth less than 1 ns,
    /// [`ConfigError::RateRounding`] when whole nanoseconds cannot keep the rate within 0.1%,
    /// [`ConfigError::DurationOverflow`] for a period beyond `u64` nanoseconds.
    ///
    /// ```
    /// use floodgate::{ConfigError, Rate};
    /// use std::time::Duration;
    /// assert_eq!(Rate::new(3, Duration::from_micros(10)).nanos_per_permit(), Ok(3_333)); // −0.01%
    /// assert_eq!(Rate::per_second(0).nanos_per_permit(), Err(ConfigError::ZeroLimit));
    /// // 3 per 4 ns would become 1 per ns (+33%): refused.
    /// assert!(matches!(
    ///     Rate::new(3, Duration::from_nanos(4)).nanos_per_permit(),
    ///     Err(ConfigError::RateRounding { nanos_per_permit: 1, .. })
    /// ));
    /// ```
    pub fn nanos_per_permit(&self) -> Result<u64, ConfigError> {
        if self.amount == 0 {
            return Err(ConfigError::ZeroLimit);
        }
        if self.period.is_zero() {
            return Err(ConfigError::ZeroPeriod);
        }
        let period =
            u64::try_from(self.period.as_nanos()).map_err(|_| ConfigError::DurationOverflow)?;
        let amount = u64::from(self.amount);
        let interval = period / amount + u64::from(period % amount >= amount.div_ceil(2));
        if interval == 0 {
            return Err(ConfigError::RateTooHigh {
                finest: Duration::from_nanos(1),
            });
        }
        // |interval·amount − period| ≤ period / 1000, in u128 (no overflow).
        let kept = u128::from(interval) * u128::from(amount);
        let error = kept.abs_diff(u128::from(period));
        if error * 1000 > u128::from(period) * u128::from(MAX_RATE_ROUNDING_PER_MILLE) {
            return Err(ConfigError::RateRounding {
                amount: self.amount,
                period: self.period,
                nanos_per_permit: interval,
            });
        }
        Ok(interval)
    }
}

/// The largest change, in per mille of the rate, that [`Rate::nanos_per_permit`] accepts from
/// rounding to whole nanoseconds per permit (1‰ = 0.1%).
///
/// ```
/// assert_eq!(floodgate::decision::MAX_RATE_ROUNDING_PER_MILLE, 1);
/// ```
pub const MAX_RATE_ROUNDING_PER_MILLE: u64 = 1;

/// A setting that can never work. Builders and setters return it instead of panicking.
///
/// ```
/// use floodgate::{ConfigError, FixedWindow};
/// use std::time::Duration;
/// assert_eq!(FixedWindow::new(0, Duration::from_secs(1)).unwrap_err(), ConfigError::ZeroLimit);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// A limit, capacity, burst or rate amount of zero.
    ZeroLimit,
    /// A window or period of zero.
    ZeroPeriod,
    /// A limit above what the algorithm's packed state can count.
    LimitTooLarge {
        /// The limit asked for.
        limit: u64,
        /// The largest limit this algorithm supports.
        max: u64,
    },
    /// A rate so high that one permit is worth less than the finest step the limiter counts
    /// (1 ns locally, 1 µs on Redis).
    RateTooHigh {
        /// The finest step: the shortest time one permit may be worth.
        finest: Duration,
    },
    /// A duration, or a product of durations and counts, beyond `u64` nanoseconds arithmetic.
    DurationOverflow,
    /// A floating-point setting outside the values it accepts (NaN, negative, out of range).
    InvalidNumber {
        /// Which setting.
        what: &'static str,
        /// The value given.
        value: f64,
        /// What it must be, as a reader would write it: `"> 0 and not NaN"`, `"in (0, 1]"`.
        expected: &'static str,
    },
    /// A duration outside the range a setting supports.
    DurationOutOfRange {
        /// Which setting.
        what: &'static str,
        /// The duration given.
        value: Duration,
        /// The shortest accepted.
        min: Duration,
        /// The longest accepted.
        max: Duration,
    },
    /// A count (shards, stripes, keys, …) or a product of counts above what can be allocated or
    /// computed.
    TooLarge {
        /// Which setting.
        what: &'static str,
        /// The value given (or the product it leads to).
        value: u64,
        /// The largest accepted.
        max: u64,
    },
    /// A rate whose rounding to whole nanoseconds per permit would change it by more than 0.1%
    /// ([`Rate::nanos_per_permit`]).
    RateRounding {
        /// Permits per period.
        amount: u32,
        /// The period.
        period: Duration,
        /// The whole nanoseconds per permit it would round to.
        nanos_per_permit: u64,
    },
    /// A duration that must be a whole number of some unit (a backend's resolution: Redis keeps
    /// windows in milliseconds) and is not.
    NotWhole {
        /// Which setting.
        what: &'static str,
        /// The duration given.
        value: Duration,
        /// The unit it must be a whole number of.
        unit: Duration,
    },
    /// A window that does not divide into its cells: each cell must be a whole number of
    /// nanoseconds.
    Indivisible {
        /// The window given.
        window: Duration,
        /// The number of cells it was to be divided into.
        cells: u32,
    },
    /// A setting that is invalid for a reason specific to one algorithm.
    Invalid {
        /// Which setting.
        what: &'static str,
        /// Why it is invalid.
        why: &'static str,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ZeroLimit => {
                f.write_str("limit, capacity or rate amount must be at least 1")
            }
            ConfigError::ZeroPeriod => f.write_str("window or period must be longer than zero"),
            ConfigError::LimitTooLarge { limit, max } => {
                write!(f, "limit {limit} is above the supported maximum {max}")
            }
            ConfigError::RateTooHigh { finest } => write!(
                f,
                "rate too high: one permit would be worth less than {finest:?}, the finest step \
                 this limiter counts"
            ),
            ConfigError::DurationOverflow => {
                f.write_str("duration overflows u64 nanoseconds arithmetic")
            }
            ConfigError::InvalidNumber {
                what,
                value,
                expected,
            } => write!(f, "{what} must be {expected}, got {value}"),
            ConfigError::DurationOutOfRange {
                what,
                value,
                min,
                max,
            } => write!(f, "{what} must be within {min:?}..={max:?}, got {value:?}"),
            ConfigError::TooLarge { what, value, max } => {
                write!(f, "{what} is {value}, above the supported maximum {max}")
            }
            ConfigError::RateRounding {
                amount,
                period,
                nanos_per_permit,
            } => write!(
                f,
                "rate {amount} per {period:?} cannot be kept within 0.1%: it would round to \
                 {nanos_per_permit} ns per permit"
            ),
            ConfigError::NotWhole { what, value, unit } => {
                write!(
                    f,
                    "{what} must be a whole number of {unit:?}, got {value:?}"
                )
            }
            ConfigError::Indivisible { window, cells } => write!(
                f,
                "window {window:?} does not divide into {cells} cells of a whole number of \
                 nanoseconds"
            ),
            ConfigError::Invalid { what, why } => write!(f, "invalid {what}: {why}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A request that can never be granted as asked. A denial that time will lift is a
/// [`Decision`], never this.
///
/// ```
/// use floodgate::{AcquireError, AtomicLimiter, Limiter, TokenBucket, Rate};
/// let bucket = AtomicLimiter::new(TokenBucket::new(Rate::per_second(5), 5).unwrap());
/// assert_eq!(
///     bucket.try_acquire(6).unwrap_err(),
///     AcquireError::ExceedsCapacity { requested: 6, capacity: 5 }
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireError {
    /// `n = 0`: a request for nothing is almost certainly a bug at the call site.
    ZeroPermits,
    /// `n` is above the limit or burst capacity: no amount of waiting would admit it.
    ExceedsCapacity {
        /// Permits asked for.
        requested: u64,
        /// The most one request can ever be granted.
        capacity: u64,
    },
    /// A smooth limiter's request whose cost (the debt it would book for the next caller) is
    /// longer than `max` (one year): booking it could push the limiter past its time range, and
    /// no `set_rate` could undo that. Nothing is booked.
    BookingTooLong {
        /// Permits asked for.
        requested: u64,
        /// The debt the request would book.
        booking: Duration,
        /// The longest booking one request may make.
        max: Duration,
    },
    /// The wait for the permits would end past the end of the clock's `u64` nanosecond
    /// timeline (or a smooth limiter's 2⁵¹ µs range): it can never end, so a blocking call
    /// returns this instead of looping forever.
    PastEndOfTime {
        /// The clock's reading when the wait was announced, in nanoseconds.
        now_nanos: u64,
        /// The wait announced.
        wait: Duration,
    },
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::ZeroPermits => f.write_str("a request must ask for at least 1 permit"),
            AcquireError::ExceedsCapacity {
                requested,
                capacity,
            } => write!(
                f,
                "{requested} permits can never be granted: the capacity is {capacity}"
            ),
            AcquireError::BookingTooLong {
                requested,
                booking,
                max,
            } => write!(
                f,
                "{requested} permits would book {booking:?} of debt; one request may book at \
                 most {max:?}"
            ),
            AcquireError::PastEndOfTime { now_nanos, wait } => write!(
                f,
                "the wait passes the end of the clock's timeline: {wait:?} from {now_nanos} ns \
                 goes past u64::MAX ns"
            ),
        }
    }
}

impl std::error::Error for AcquireError {}

/// The shared limit check of the builders: a limit must be in `1..=max`.
///
/// ```
/// use floodgate::{ConfigError, decision::validate_limit};
/// assert!(validate_limit(5, 5).is_ok());
/// assert_eq!(validate_limit(0, 5), Err(ConfigError::ZeroLimit));
/// assert_eq!(validate_limit(6, 5), Err(ConfigError::LimitTooLarge { limit: 6, max: 5 }));
/// ```
pub fn validate_limit(limit: u32, max: u64) -> Result<(), ConfigError> {
    if limit == 0 {
        Err(ConfigError::ZeroLimit)
    } else if u64::from(limit) > max {
        Err(ConfigError::LimitTooLarge {
            limit: u64::from(limit),
            max,
        })
    } else {
        Ok(())
    }
}

/// The shared permit check: `n` must be in `1..=capacity`.
#[inline]
pub(crate) fn check_permits(n: u32, capacity: u64) -> Result<(), AcquireError> {
    if n == 0 {
        Err(AcquireError::ZeroPermits)
    } else if u64::from(n) > capacity {
        Err(AcquireError::ExceedsCapacity {
            requested: u64::from(n),
            capacity,
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod internal_examples {
    //! The examples of crate-internal items (doc tests run only on public ones).

    #[test]
    fn check_permits_example() {
        use crate::decision::check_permits;
        assert!(check_permits(3, 3).is_ok());
        assert!(check_permits(0, 3).is_err());
        assert!(check_permits(4, 3).is_err());
    }
}
