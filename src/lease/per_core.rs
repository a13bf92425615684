//! [`PerCore`]: one lease per core from an exact [`LeaseSource`].

use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::clock::{Clock, MAX_CLOCK_LAG_NANOS, duration_to_nanos};
use crate::decision::{AcquireError, ConfigError, Decision, check_permits};
use crate::lease::{Lease, LeaseSource};
use crate::limiter::Limiter;
use crate::sharded::{MAX_STRIPES, home_stripe};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The largest lease a stripe takes unless told otherwise ([`PerCore::with_max_lease`]).
///
/// ```
/// assert_eq!(floodgate::lease::DEFAULT_MAX_LEASE, 64);
/// ```
pub const DEFAULT_MAX_LEASE: u32 = 64;

/// How long a lease may be served unless told otherwise ([`PerCore::with_lifetime`]): 1 ms.
///
/// ```
/// assert_eq!(floodgate::lease::DEFAULT_LIFETIME, std::time::Duration::from_millis(1));
/// ```
pub const DEFAULT_LIFETIME: Duration = Duration::from_millis(1);

/// The lease size a stripe starts with (at most the largest lease).
const INITIAL_LEASE: u32 = 8;

/// The permits a stripe has left: the low 32 bits of its state word.
const LEFT: u64 = u32::MAX as u64;
/// Set while one thread replaces the stripe's lease (the others then ask the source directly).
const BUSY: u64 = 1 << 32;
/// One lease later: the sequence number in the top 31 bits (wraps; a serve that slept through
/// 2^31 replacements of its stripe's lease is the one case it does not catch).
const SEQ_ONE: u64 = 1 << 33;

/// The per-core form of an exact limiter: one stripe per core (each on its own cache line) that
/// leases small batches of permits from the exact source and serves requests from them without
/// writing any shared line.
///
/// A caller uses its *home* stripe (threads are numbered on first use and spread round-robin, as
/// [`Sharded`](crate::Sharded) does). A request the stripe's lease can serve (enough permits
/// left, not expired) costs one clock read and one compare-exchange on the stripe's own line.
/// Otherwise the caller replaces the lease: it gives the unused permits back
/// ([`LeaseSource::give_back`]: exact or not at all), then takes a new lease of between `n` and
/// the lease size permits in one exact decision of the source. While one thread replaces a
/// stripe's lease, the stripe's other callers ask the source directly for their `n` permits.
///
/// # The bound
/// See the [module docs](crate::lease#the-bound): over a [`FixedWindow`](crate::FixedWindow) or
/// [`SlidingWindowLimiter`](crate::SlidingWindowLimiter), **never over the limit**; over a bucket
/// ([`Gcra`](crate::Gcra), [`TokenBucket`](crate::TokenBucket),
/// [`LeakyBucket`](crate::LeakyBucket)) of capacity `C` and interval `T`, at most
/// `C + ⌊(d + L) / T⌋` permits in any span of length `d` (`L` = [`lifetime`](PerCore::lifetime)),
/// i.e. at most `⌈L / T⌉` and at most [`stranded_bound`](PerCore::stranded_bound) above the
/// exact bucket. Under-admission: at most [`stranded_bound`](PerCore::stranded_bound) permits
/// are held by stripes at any time.
///
/// # Lease size
/// Each stripe adapts its lease to its own rate and to the budget left: starting at
/// `min(8, max_lease)`, it doubles its lease size (up to [`max_lease`](PerCore::max_lease)) when
/// a lease ran out before it expired,
/// halves it when a lease expired unused, and never asks for more than
/// `remaining / (2 × stripes)` of what the source said was left at its last lease (but at
/// least the `n` of the request). Near the limit a lease is therefore exactly the request, and a
/// stripe without permits then asks the source for the request alone
/// ([`LeaseSource::take_exact`], the source's own short path): the per-core form degrades to
/// the exact source, one decision per request, and a denial writes nothing.
///
/// # Decisions
/// An allowed decision's `remaining` is the serving stripe's unserved permits plus what the
/// source reported left at that stripe's lease (other stripes' holdings are not counted:
/// reading them would share their lines), and never more than the limit in force (a lease taken
/// before the limit was lowered is still served); `reset_after` is the source's, from that lease. A
/// denial is the source's own decision for the `n` permits (also one decided while another
/// thread replaces the stripe's lease: the stripe then holds nothing, its unserved permits are
/// being given back).
///
/// ```
/// use floodgate::lease::PerCore;
/// use floodgate::{AtomicLimiter, Gcra, Limiter, ManualClock, Rate};
/// let clock = ManualClock::new();
/// let gcra = AtomicLimiter::with_clock(Gcra::new(Rate::per_second(100), 100)?, clock.clone());
/// let per_core = PerCore::with_stripes(gcra, 2)?;
/// let admitted = (0..150).filter(|_| per_core.check().is_allowed()).count();
/// assert_eq!(admitted, 100); // the exact bucket's burst, no more
/// assert!(per_core.stranded_bound() <= 2 * 63);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PerCore<S> {
    source: S,
    stripes: Box<[CachePadded<Stripe>]>,
    max_lease: u32,
    lifetime_nanos: u64,
    /// `log2(2 × stripes)`: a stripe's share of the source's budget is `budget >> share_shift`
    /// (`stripes` is a power of two of at most `MAX_STRIPES`, so the shift is at most 13 and
    /// `(n + 1) << share_shift` cannot overflow).
    share_shift: u32,
}

/// One stripe: its lease. The fields are written only by the thread that holds the stripe
/// (`BUSY` set by its compare-exchange) and published by the Release store that clears `BUSY`.
#[derive(Debug)]
struct Stripe {
    /// `sequence (31 bits) | BUSY | left (32 bits)`.
    state: AtomicU64,
    granted: AtomicU32,
    /// The lease size the next lease asks for.
    size: AtomicU32,
    taken_at: AtomicU64,
    expires_at: AtomicU64,
    /// When the source said the limit is whole again (`taken_at + reset_after`).
    reset_at: AtomicU64,
    /// What the source said was left after the lease.
    source_left: AtomicU64,
    receipt: [AtomicU64; 2],
}

impl<S: LeaseSource> PerCore<S> {
    /// One stripe per available core (rounded up to a power of two), leases of up to
    /// [`DEFAULT_MAX_LEASE`] permits lasting at most [`DEFAULT_LIFETIME`].
    ///
    /// ```
    /// use floodgate::lease::PerCore;
    /// use floodgate::{AtomicLimiter, Limiter, Rate, TokenBucket};
    /// let bucket = PerCore::new(AtomicLimiter::new(TokenBucket::new(Rate::per_second(1000), 50)?));
    /// assert!(bucket.try_acquire(1)?.is_allowed());
    /// assert_eq!(bucket.limit(), 50);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(source: S) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::build(source, cores.clamp(1, MAX_STRIPES))
    }

    /// `stripes` stripes (rounded up to a power of two).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for zero stripes, [`ConfigError::TooLarge`] above
    /// [`MAX_STRIPES`](crate::sharded::MAX_STRIPES).
    ///
    /// ```
    /// use floodgate::lease::PerCore;
    /// use floodgate::{AtomicLimiter, Gcra, Rate};
    /// let gcra = || AtomicLimiter::new(Gcra::new(Rate::per_second(10), 10).unwrap());
    /// assert_eq!(PerCore::with_stripes(gcra(), 3)?.stripes(), 4);
    /// assert!(PerCore::with_stripes(gcra(), 0).is_err());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn with_stripes(source: S, stripes: usize) -> Result<Self, ConfigError> {
        if stripes == 0 {
            return Err(ConfigError::Invalid {
                what: "stripes",
                why: "a per-core limiter needs at least one stripe",
            });
        }
        if stripes > MAX_STRIPES {
            return Err(ConfigError::TooLarge {
                what: "PerCore stripes",
                value: u64::try_from(stripes).unwrap_or(u64::MAX),
                max: MAX_STRIPES as u64,
            });
        }
        Ok(Self::build(source, stripes))
    }

    /// `stripes` stripes, already validated.
    fn build(source: S, stripes: usize) -> Self {
        let limit = source.limit();
        let stripes = stripes.next_power_of_two();
        let share_shift = stripes.trailing_zeros() + 1;
        let stripes = (0..stripes)
            .map(|_| {
                CachePadded::new(Stripe {
                    state: AtomicU64::new(0),
                    granted: AtomicU32::new(0),
                    size: AtomicU32::new(INITIAL_LEASE.min(DEFAULT_MAX_LEASE)),
                    taken_at: AtomicU64::new(0),
                    expires_at: AtomicU64::new(0),
                    reset_at: AtomicU64::new(0),
                    source_left: AtomicU64::new(limit),
                    receipt: [AtomicU64::new(0), AtomicU64::new(0)],
                })
            })
            .collect();
        PerCore {
            source,
            stripes,
            max_lease: DEFAULT_MAX_LEASE,
            lifetime_nanos: duration_to_nanos(DEFAULT_LIFETIME),
            share_shift,
        }
    }

    /// The same limiter with leases of at most `max_lease` permits (1: every request is decided
    /// by the source, exactly).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] for zero.
    ///
    /// ```
    /// use floodgate::lease::PerCore;
    /// use floodgate::{AtomicLimiter, Gcra, Rate};
    /// let gcra = || AtomicLimiter::new(Gcra::new(Rate::per_second(10), 10).unwrap());
    /// assert_eq!(PerCore::with_stripes(gcra(), 2)?.with_max_lease(8)?.max_lease(), 8);
    /// assert!(PerCore::with_stripes(gcra(), 2)?.with_max_lease(0).is_err());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn with_max_lease(self, max_lease: u32) -> Result<Self, ConfigError> {
        if max_lease == 0 {
            return Err(ConfigError::Invalid {
                what: "max_lease",
                why: "a lease must be allowed at least one permit",
            });
        }
        for stripe in self.stripes.iter() {
            // Relaxed: no thread can see the limiter yet (it is owned here).
            stripe
                .size
                .store(INITIAL_LEASE.min(max_lease), Ordering::Relaxed);
        }
        Ok(PerCore { max_lease, ..self })
    }

    /// The same limiter with leases served for at most `lifetime` (a window's lease also ends
    /// with its window). A bucket's over-admission is at most `lifetime`'s worth of its rate.
    ///
    /// # Errors
    /// [`ConfigError::DurationOutOfRange`] (`what: "lease lifetime"`) for zero or beyond
    /// `u64` nanoseconds.
    ///
    /// ```
    /// use floodgate::lease::PerCore;
    /// use floodgate::{AtomicLimiter, Gcra, Rate};
    /// use std::time::Duration;
    /// let gcra = || AtomicLimiter::new(Gcra::new(Rate::per_second(10), 10).unwrap());
    /// let per_core = PerCore::with_stripes(gcra(), 2)?.with_lifetime(Duration::from_micros(100))?;
    /// assert_eq!(per_core.lifetime(), Duration::from_micros(100));
    /// let zero = PerCore::with_stripes(gcra(), 2)?.with_lifetime(Duration::ZERO).unwrap_err();
    /// assert!(zero.to_string().starts_with("lease lifetime must be within 1ns..="));
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn with_lifetime(self, lifetime: Duration) -> Result<Self, ConfigError> {
        let lifetime_nanos = crate::lease::lifetime_nanos(lifetime)?;
        Ok(PerCore {
            lifetime_nanos,
            ..self
        })
    }

    /// The exact source the stripes lease from.
    ///
    /// ```
    /// use floodgate::lease::PerCore;
    /// use floodgate::{AtomicLimiter, Gcra, Rate};
    /// let per_core = PerCore::new(AtomicLimiter::new(Gcra::new(Rate::per_second(10), 5)?));
    /// assert_eq!(per_core.source().algorithm().capacity(), 5);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The number of stripes (a power of two).
    ///
    /// ```
    /// use floodgate::lease::PerCore;
    /// use floodgate::{AtomicLimiter, Gcra, Rate};
    /// let gcra = AtomicLimiter::new(Gcra::new(Rate::per_second(10), 5)?);
    /// assert_eq!(PerCore::with_stripes(gcra, 2)?.stripes(), 2);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn stripes(&self) -> usize {
        self.stripes.len()
    }

    /// The largest lease a stripe takes.
    ///
    /// ```
    /// use floodgate::lease::{DEFAULT_MAX_LEASE, PerCore};
    /// use floodgate::{AtomicLimiter, Gcra, Rate};
    /// let per_core = PerCore::new(AtomicLimiter::new(Gcra::new(Rate::per_second(10), 5)?));
    /// assert_eq!(per_core.max_lease(), DEFAULT_MAX_LEASE);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn max_lease(&self) -> u32 {
        self.max_lease
    }

    /// How long a lease may be served.
    ///
    /// ```
    /// use floodgate::lease::{DEFAULT_LIFETIME, PerCore};
    /// use floodgate::{AtomicLimiter, Gcra, Rate};
    /// let per_core = PerCore::new(AtomicLimiter::new(Gcra::new(Rate::per_second(10), 5)?));
    /// assert_eq!(per_core.lifetime(), DEFAULT_LIFETIME);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn lifetime(&self) -> Duration {
        Duration::from_nanos(self.lifetime_nanos)
    }

    /// The most permits the stripes can hold at once, taken from the source and not yet served:
    /// `stripes × (max_lease − 1)` (a lease serves its first request at once). This bounds the
    /// under-admission at any time, and a bucket's over-admission in any span.
    ///
    /// ```
    /// use floodgate::lease::PerCore;
    /// use floodgate::{AtomicLimiter, Gcra, Rate};
    /// let gcra = AtomicLimiter::new(Gcra::new(Rate::per_second(10), 5)?);
    /// let per_core = PerCore::with_stripes(gcra, 4)?.with_max_lease(16)?;
    /// assert_eq!(per_core.stranded_bound(), 60);
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn stranded_bound(&self) -> u64 {
        self.stripes.len() as u64 * u64::from(self.max_lease - 1)
    }

    /// Takes `n` permits with `home` (reduced modulo [`stripes`](PerCore::stripes)) as the home
    /// stripe. [`try_acquire`](Limiter::try_acquire) calls this with the calling thread's
    /// stripe; call it directly to pin a caller to a stripe (tests, models, a pool that knows
    /// its worker index).
    ///
    /// # Errors
    /// [`AcquireError::ZeroPermits`], or [`AcquireError::ExceedsCapacity`] above the limit.
    ///
    /// ```
    /// use floodgate::lease::PerCore;
    /// use floodgate::{AtomicLimiter, FixedWindow, ManualClock};
    /// use std::time::Duration;
    /// let window = FixedWindow::aligned(4, Duration::from_secs(1))?;
    /// let per_core = PerCore::with_stripes(AtomicLimiter::with_clock(window, ManualClock::new()), 2)?;
    /// assert!(per_core.try_acquire_on(0, 2)?.is_allowed());
    /// assert!(per_core.try_acquire_on(1, 2)?.is_allowed());
    /// assert!(!per_core.try_acquire_on(0, 1)?.is_allowed()); // never over the window's 4
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire_on(&self, home: usize, n: u32) -> Result<Decision, AcquireError> {
        let stripe = &self.stripes[home & (self.stripes.len() - 1)];
        let need = u64::from(n);
        // Read once, when first needed (a request the source decides alone reads the source's
        // clock there instead).
        let mut clock_now = None;
        // The limit in force, read when `n` is first checked against it (the stripe serves only
        // checked requests; the decision reports at most this limit): `None` until then.
        let mut checked = None;
        // Whether the clock was read again after a lease looked leaped (at most once a call).
        let mut reread = false;
        // Acquire: pairs with the Release store that published the lease (`publish`), so the
        // fields read below are that lease's or a later one's (a later one's fails the
        // compare-exchange, which checks the sequence number).
        let mut state = stripe.state.load(Ordering::Acquire);
        loop {
            if state & BUSY != 0 {
                return self.direct(n);
            }
            let left = state & LEFT;
            if left == 0 {
                // Nothing to serve or give back. When the budget the source last reported is
                // too small for a lease of more than `n` (`budget / (2 × stripes) ≤ n`), the new
                // lease would be this request: ask the source for it directly, without taking
                // the stripe (near the limit, and on every denial while the limit is exhausted,
                // this is the exact source's path). Relaxed: a hint (see `exact`).
                let hint = stripe.source_left.load(Ordering::Relaxed);
                let threshold = (need + 1) << self.share_shift;
                if hint < threshold {
                    // The source checks `n` (zero, or above the limit) itself.
                    return self.exact(stripe, n, threshold);
                }
            }
            let limit = match checked {
                Some(limit) => limit,
                None => {
                    let limit = self.source.limit();
                    check_permits(n, limit)?;
                    *checked.insert(limit)
                }
            };
            let mut read = *clock_now.get_or_insert_with(|| self.source.clock().now_nanos());
            // Relaxed: ordered after the Acquire load (or failed compare-exchange) of `state`,
            // which pairs with the Release store of `publish` (this lease's fields or a later
            // one's); a later lease's fail the compare-exchange below, whose Release on success
            // keeps these loads from reading a lease published after it.
            let taken_at = stripe.taken_at.load(Ordering::Relaxed);
            let expires_at = stripe.expires_at.load(Ordering::Relaxed);
            // A lease decided more than the lag horizon after this read (on a read taken after
            // the lease was loaded: this call's first read may be a stalled one) was decided on
            // a leaping read. Raising this read to its time would serve it for as long as the
            // leap, long after the window or cell the source counted it in (and folded back
            // into the present) has ended: it is treated as expired, and replaced.
            if taken_at.saturating_sub(read) > MAX_CLOCK_LAG_NANOS && !reread {
                reread = true;
                read = self.source.clock().now_nanos();
                clock_now = Some(read);
            }
            let leaped = taken_at.saturating_sub(read) > MAX_CLOCK_LAG_NANOS;
            let now = read.max(taken_at);
            let live = !leaped && now < expires_at;
            if live && left >= need {
                // Release on success: pairs with the Acquire claim of the next replacer (which
                // reads this serve's word, or a later one in its release sequence), so the field
                // loads above happen before that replacer's field stores and cannot read them.
                // Relaxed, a serve could (in the memory model, not on hardware that keeps the
                // control dependency) read the next lease's `expires_at` being written after a
                // claim that follows this compare-exchange, and serve an expired lease's permits.
                // `LeaseSlot::serve` gets the same guarantee from its Acquire load of
                // `expires_at`. Acquire on failure, as the load above.
                match stripe.state.compare_exchange_weak(
                    state,
                    state - need,
                    Ordering::Release,
                    Ordering::Acquire,
                ) {
                    Ok(_) => return Ok(self.served(stripe, left - need, now, limit)),
                    Err(actual) => {
                        state = actual;
                        continue;
                    }
                }
            }
            // Take the stripe to replace its lease. Acquire: as the load above (the old lease's
            // fields, which this thread now owns).
            let claimed = (state & !(LEFT | BUSY)).wrapping_add(SEQ_ONE) | BUSY;
            match stripe.state.compare_exchange_weak(
                state,
                claimed,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return self.replace(stripe, claimed & !BUSY, left, live, n),
                Err(actual) => state = actual,
            }
        }
    }

    /// The decision for `n` permits served by `stripe`, which has `left` after them, `limit`
    /// being the limit in force (read by this call when it checked `n`).
    #[inline]
    fn served(&self, stripe: &Stripe, left: u64, now: u64, limit: u64) -> Decision {
        // Relaxed: as the field loads of `try_acquire_on` (this lease's or a later one's: an
        // estimate either way).
        let source_left = stripe.source_left.load(Ordering::Relaxed);
        let reset_at = stripe.reset_at.load(Ordering::Relaxed);
        // At most the limit in force: the source's report may predate a lowered limit.
        Decision::allow(
            limit,
            left.saturating_add(source_left).min(limit),
            reset_at.saturating_sub(now),
        )
    }

    /// `n` permits decided by the source alone (while another thread replaces the lease of the
    /// caller's stripe: its claim cleared the permits left, so the stripe holds none).
    #[cold]
    fn direct(&self, n: u32) -> Result<Decision, AcquireError> {
        self.source.take_exact(n)
    }

    /// `n` permits decided by the source alone, for a stripe without permits whose budget is too
    /// small for a larger lease; what the source says is left becomes the stripe's budget hint.
    #[inline(always)]
    fn exact(&self, stripe: &Stripe, n: u32, threshold: u64) -> Result<Decision, AcquireError> {
        // Returned as the source made it (inspected in place: no copy of the decision).
        let result = self.source.take_exact(n);
        if let Ok(decision) = &result {
            // Below `threshold` the next request is decided here again whatever the exact
            // figure: record 0 and spare the division `remaining()` costs.
            let left = match decision.remaining_reaches(threshold) {
                true => decision.remaining(),
                false => 0,
            };
            // Relaxed: a hint for the lease size only (no serve reads it for its decision); a
            // racing lease replacement may overwrite it or be overwritten, either value is a
            // report the source made. Written only when it changes, so a denied flood leaves the
            // line clean.
            if stripe.source_left.load(Ordering::Relaxed) != left {
                stripe.source_left.store(left, Ordering::Relaxed);
            }
        }
        result
    }

    /// Replaces `stripe`'s lease (this thread holds it): gives back the `left` unused permits of
    /// the old lease, adapts the lease size, takes a new lease for `n` and publishes it with
    /// sequence `sequence`.
    #[cold]
    fn replace(
        &self,
        stripe: &Stripe,
        sequence: u64,
        left: u64,
        live: bool,
        n: u32,
    ) -> Result<Decision, AcquireError> {
        // Relaxed: this thread owns the fields since its Acquire claim.
        let old_granted = stripe.granted.load(Ordering::Relaxed);
        let taken_at = stripe.taken_at.load(Ordering::Relaxed);
        // The source's decision as far as a refund reads it: when its limit is whole again (a
        // fixed window's end).
        let reset_after = stripe
            .reset_at
            .load(Ordering::Relaxed)
            .saturating_sub(taken_at);
        let old = Lease::new(
            old_granted,
            taken_at,
            stripe.expires_at.load(Ordering::Relaxed),
            Decision::allow(0, 0, reset_after),
        )
        .with_receipt([
            stripe.receipt[0].load(Ordering::Relaxed),
            stripe.receipt[1].load(Ordering::Relaxed),
        ]);
        let unused = u32::try_from(left).unwrap_or(u32::MAX);
        if unused > 0 && old_granted > 0 {
            self.source.give_back(&old, unused);
        }
        let mut size = stripe.size.load(Ordering::Relaxed);
        if old_granted > 0 {
            if live {
                // Ran out before it expired: lease more.
                size = size.saturating_mul(2).min(self.max_lease);
            } else if unused > 0 {
                // Expired unused: lease less.
                size = (size / 2).max(1);
            }
        }
        stripe
            .size
            .store(size.min(self.max_lease), Ordering::Relaxed);
        // Relaxed: a hint, as in `exact` (which may write it without holding the stripe).
        // The stripe's share of the budget: `source_left / (2 × stripes)`.
        let budget = stripe.source_left.load(Ordering::Relaxed) >> self.share_shift;
        let want = u64::from(size).min(budget).max(u64::from(n));
        let want = u32::try_from(want).unwrap_or(u32::MAX);
        let lease = match self.source.take(n, want, self.lifetime_nanos) {
            Ok(lease) => lease,
            Err(err) => {
                self.publish(stripe, sequence, None);
                return Err(err);
            }
        };
        let decision = lease.decision();
        if lease.granted() == 0 {
            self.publish(stripe, sequence, Some((&lease, 0)));
            return Ok(decision);
        }
        // A source that broke `take`'s contract (granted 1 to n − 1 of a request for at least n)
        // has its grant given back where it can be, and `n` is decided by the source alone:
        // served from such a lease, `granted − n` would wrap (about 2^32 permits).
        let Some(left) = lease.granted().checked_sub(n) else {
            self.source.give_back(&lease, lease.granted());
            self.publish(stripe, sequence, None);
            return self.source.take_exact(n);
        };
        let left = u64::from(left);
        self.publish(stripe, sequence, Some((&lease, left)));
        // At most the limit in force, as `served` (a `set_limit` may land after the grant).
        let limit = self.source.limit();
        Ok(Decision::allow(
            limit,
            left.saturating_add(decision.remaining()).min(limit),
            duration_to_nanos(decision.reset_after()),
        ))
    }

    /// Publishes `lease` with `left` permits to serve as `stripe`'s lease number `sequence`
    /// (`None`: no lease), releasing the stripe.
    fn publish(&self, stripe: &Stripe, sequence: u64, lease: Option<(&Lease, u64)>) {
        let (granted, taken_at, expires_at, reset_at, source_left, receipt, left) = match lease {
            Some((lease, left)) => {
                let d = lease.decision();
                (
                    lease.granted(),
                    lease.taken_at(),
                    lease.expires_at(),
                    lease
                        .taken_at()
                        .saturating_add(duration_to_nanos(d.reset_after())),
                    d.remaining(),
                    lease.receipt(),
                    if lease.granted() > 0 { left } else { 0 },
                )
            }
            None => (0, 0, 0, 0, 0, [0, 0], 0),
        };
        // Relaxed: published by the Release store of the state below.
        stripe.granted.store(granted, Ordering::Relaxed);
        stripe.taken_at.store(taken_at, Ordering::Relaxed);
        stripe.expires_at.store(expires_at, Ordering::Relaxed);
        stripe.reset_at.store(reset_at, Ordering::Relaxed);
        stripe.source_left.store(source_left, Ordering::Relaxed);
        stripe.receipt[0].store(receipt[0], Ordering::Relaxed);
        stripe.receipt[1].store(receipt[1], Ordering::Relaxed);
        // Release: pairs with the Acquire loads (and failed compare-exchanges) of the serves and
        // the next claim, which then read these fields.
        stripe.state.store(sequence | left, Ordering::Release);
    }
}

impl<S: LeaseSource> Limiter for PerCore<S> {
    #[inline]
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        self.try_acquire_on(home_stripe(), n)
    }

    fn clock(&self) -> &dyn Clock {
        self.source.clock()
    }

    /// Changes the source's limit at once. Leases already held are served until they expire
    /// (see the [module docs](crate::lease#the-bound)).
    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        self.source.set_limit(limit)
    }

    fn limit(&self) -> u64 {
        self.source.limit()
    }
}
