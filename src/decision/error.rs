//! The errors ([`ConfigError`] for a setting that can never work, [`AcquireError`] for a request
//! that can never be granted) and the shared checks that produce them.

use std::fmt;
use std::time::Duration;

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
    /// ([`Rate::nanos_per_permit`](super::Rate::nanos_per_permit)).
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
/// [`Decision`](super::Decision), never this.
///
/// ```
/// use floodgate::{AcquireError, AtomicLimiter, Limiter, TokenBucket, Rate};
/// let bucket = AtomicLimiter::new(TokenBucket::new(Rate::per_second(5), 5).unwrap());
/// assert_eq!(
///     bucket.try_acquire(6).unwrap_err(),
///     AcquireError::ExceedsCapacity { requested: 6, capacity: 5 }
/// );
/// assert_eq!(
///     bucket.try_acquire(6).unwrap_err().to_string(),
///     "6 permits can never be granted: one request can take at most 5"
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireError {
    /// `n = 0`: a request for nothing is almost certainly a bug at the call site.
    ZeroPermits,
    /// `n` is above the most one request can take (the limit or burst capacity; for a
    /// [`Sharded`](crate::Sharded) limiter, its [`max_request`](crate::Sharded::max_request),
    /// below its limit): no amount of waiting would admit it.
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
    /// The key is too long for the store behind the limiter (memcached's 250-byte keys, as a
    /// keyed limiter of the HTTP layer reports it): no request with it can be decided.
    KeyTooLong {
        /// Bytes of the longest store key it would make.
        len: u64,
        /// The store's maximum.
        max: u64,
    },
    /// The call cannot run on this thread (a Redis or memcached limiter's async call outside a
    /// tokio runtime, or a `blocking_*` one inside it, as a keyed limiter of the HTTP layer
    /// reports it): the text says which, and what to call instead.
    Runtime(&'static str),
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
                "{requested} permits can never be granted: one request can take at most {capacity}"
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
            AcquireError::KeyTooLong { len, max } => write!(
                f,
                "the key is too long for the limiter's store: its keys would be {len} bytes \
                 (max {max})"
            ),
            AcquireError::Runtime(why) => f.write_str(why),
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

/// The shared window check: a window must be longer than zero and at most `u64::MAX`
/// nanoseconds (584 years); the error names the setting and the value given.
pub(crate) fn window_nanos(what: &'static str, window: Duration) -> Result<u64, ConfigError> {
    if window.is_zero() {
        return Err(ConfigError::ZeroPeriod);
    }
    u64::try_from(window.as_nanos()).map_err(|_| ConfigError::DurationOutOfRange {
        what,
        value: window,
        min: Duration::from_nanos(1),
        max: Duration::from_nanos(u64::MAX),
    })
}

#[cfg(test)]
mod window_tests {
    use super::*;

    #[test]
    fn a_window_past_u64_nanoseconds_names_the_range_and_the_value() {
        assert_eq!(window_nanos("w", Duration::from_secs(3)), Ok(3_000_000_000));
        assert_eq!(
            window_nanos("w", Duration::ZERO),
            Err(ConfigError::ZeroPeriod)
        );
        let err = window_nanos("fixed window", Duration::MAX).unwrap_err();
        assert_eq!(
            err,
            ConfigError::DurationOutOfRange {
                what: "fixed window",
                value: Duration::MAX,
                min: Duration::from_nanos(1),
                max: Duration::from_nanos(u64::MAX),
            }
        );
        assert!(
            err.to_string().starts_with("fixed window must be within"),
            "{err}"
        );
    }
}
