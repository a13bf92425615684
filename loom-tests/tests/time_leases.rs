//! `PerCore` leases under the time model (`floodgate_loom_tests::ModelClock`): threads serving
//! from one stripe race the thread that replaces its lease (give back, take, publish) and the
//! source's other callers, while the clock moves, a reader stalls between its read and its
//! commit, a read lags, and a setter changes the rate. Every model asserts the bound the
//! `floodgate::lease` docs state, over each admission's real-time interval:
//! * a fixed window: never more than the limit in one window;
//! * a bucket of capacity `C` and interval `T` with leases of lifetime `L`: for every real span
//!   `[x, y]`, at most `C + ⌈L / T⌉ + ⌊(y − x) / T⌋` (a permit is served at most `L` after the
//!   exact bucket granted it).
//!
//! Run: `RUSTFLAGS="--cfg floodgate_loom" CARGO_TARGET_DIR=target/loom cargo test -p floodgate-loom-tests --release --test time_leases -- --test-threads=1`
#![cfg(floodgate_loom)]

use std::sync::Arc;
use std::time::Duration;

use floodgate::lease::{LeaseSource, PerCore};
use floodgate::{
    AcquireError, AtomicLimiter, Clock, ConfigError, Decision, FixedWindow, Gcra, Limiter, Rate,
};
use floodgate_loom_tests::{
    Admitted, ModelClock, assert_bucket_bound, join_all, max_in_aligned_window, model, take,
};
use loom::thread;

/// Nanoseconds per permit of the bucket.
const T: u64 = 100;
/// Bucket capacity: large enough for a stripe's budget rule (`remaining / (2 × stripes)`) to
/// allow a lease of 4 on a full bucket.
const C: u32 = 8;
/// Lease lifetime: one interval.
const L: u64 = T;
/// Real time at the start: past the floor's grain, as in `time_buckets.rs`. These models assert
/// upper bounds only, which the floor does not affect (it only keeps a lagging read from being
/// refused): they pass with the exact bucket's floor never raised.
const START: u64 = 100_000;
/// Long enough for a lease to expire and the bucket to refill completely.
const LATER: u64 = 20 * T;

/// One caller pinned to one stripe of a shared `PerCore` (loom threads share the OS thread, so
/// the thread-local home stripe cannot tell them apart).
struct Pinned<S> {
    limiter: Arc<PerCore<S>>,
    stripe: usize,
}

impl<S: LeaseSource> Limiter for Pinned<S> {
    fn try_acquire(&self, n: u32) -> Result<Decision, AcquireError> {
        self.limiter.try_acquire_on(self.stripe, n)
    }
    fn clock(&self) -> &dyn Clock {
        self.limiter.clock()
    }
    fn set_limit(&self, limit: u32) -> Result<(), ConfigError> {
        self.limiter.set_limit(limit)
    }
    fn limit(&self) -> u64 {
        self.limiter.limit()
    }
}

fn pinned<S>(limiter: &Arc<PerCore<S>>, stripe: usize) -> Pinned<S> {
    Pinned {
        limiter: limiter.clone(),
        stripe,
    }
}

type Bucket = AtomicLimiter<Gcra, ModelClock>;

/// GCRA of capacity `C` at one permit per `T`, in leases of up to 4 permits living `L`, over
/// `stripes` stripes.
fn bucket(clock: &ModelClock, stripes: usize) -> Arc<PerCore<Bucket>> {
    let gcra = Gcra::new(Rate::new(1, Duration::from_nanos(T)), C).unwrap();
    let limiter = PerCore::with_stripes(AtomicLimiter::with_clock(gcra, clock.clone()), stripes)
        .unwrap()
        .with_max_lease(4)
        .unwrap()
        .with_lifetime(Duration::from_nanos(L))
        .unwrap();
    Arc::new(limiter)
}

fn assert_leased_bucket_bound(admitted: &[Admitted]) {
    assert_bucket_bound(admitted, u64::from(C) + L.div_ceil(T), T);
}

// ---------------------------------------------------------------------------------------------
// (a) Serving and replacing one stripe's lease while the clock moves.

/// The driver's first take leases 4 on the one stripe (3 left). A takes 2 twice while B
/// moves time on past the lease's expiry and asks for the whole capacity: A's serves race
/// the replacement of the lease (its refund, a new take) and the source's direct path. A served
/// permit of the expired lease, or one served twice, would put `C + 2` in one instant.
#[test]
fn one_stripe_serves_race_a_replacement() {
    model(None, || {
        let clock = ModelClock::starting_at(START);
        let limiter = bucket(&clock, 1);
        let me = pinned(&limiter, 0);
        let admitted = take(&me, &clock, 1, (0, 0));
        let a = {
            let (me, clock) = (pinned(&limiter, 0), clock.clone());
            thread::spawn(move || {
                let mut got = take(&me, &clock, 2, (0, 0));
                got.extend(take(&me, &clock, 2, (0, 0)));
                got
            })
        };
        // B runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 4,954 executions of this race.
        let b = {
            let (me, clock) = (pinned(&limiter, 0), clock.clone());
            thread::spawn(move || {
                clock.advance(LATER);
                take(&me, &clock, C, (0, 0))
            })
        };
        let admitted = join_all(vec![a, b], admitted);
        assert_leased_bucket_bound(&admitted);
    });
}

/// Two stripes lease from the one bucket while the clock moves: a lease held by one stripe is
/// counted by the bucket when the other takes, and never served beyond its lifetime.
#[test]
fn two_stripes_share_the_exact_bucket() {
    model(None, || {
        let clock = ModelClock::starting_at(START);
        let limiter = bucket(&clock, 2);
        let me = pinned(&limiter, 1);
        let admitted = take(&me, &clock, 1, (0, 0));
        let a = {
            let (me, clock) = (pinned(&limiter, 0), clock.clone());
            thread::spawn(move || {
                let mut got = take(&me, &clock, 2, (0, 0));
                got.extend(take(&me, &clock, 2, (0, 0)));
                got
            })
        };
        // B runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 260 executions of this race.
        let b = {
            let (me, clock) = (pinned(&limiter, 1), clock.clone());
            thread::spawn(move || {
                clock.advance(LATER);
                take(&me, &clock, C, (0, 0))
            })
        };
        let admitted = join_all(vec![a, b], admitted);
        assert_leased_bucket_bound(&admitted);
    });
}

// ---------------------------------------------------------------------------------------------
// (b) A stalled reader and a lagging reader.

/// S may stall between its clock read and its serve while B moves time on past the
/// lease's expiry and asks for the whole capacity on the same stripe: a stale read serves only
/// what the lease held when S read (its interval spans the stall), never a permit of the expired
/// lease on a fresh read.
#[test]
fn a_stalled_reader_serves_no_expired_lease() {
    model(None, || {
        let clock = ModelClock::starting_at(START);
        let limiter = bucket(&clock, 1);
        let me = pinned(&limiter, 0);
        let admitted = take(&me, &clock, 1, (0, 0)); // the stripe holds 3
        let s = {
            let (me, clock) = (pinned(&limiter, 0), clock.clone());
            thread::spawn(move || take(&me, &clock, 2, (0, 0)))
        };
        // B runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 1,977 executions of this race.
        let b = {
            let (me, clock) = (pinned(&limiter, 0), clock.clone());
            thread::spawn(move || {
                clock.advance(LATER);
                take(&me, &clock, C, (0, 0))
            })
        };
        let admitted = join_all(vec![s, b], admitted);
        assert_leased_bucket_bound(&admitted);
    });
}

/// A's reads lag half an interval; it serves from the stripe the driver leased on while B
/// moves time on and drains the bucket. A lagging read is decided at the lease's time,
/// never earlier: the bound holds with A's interval widened by its lag.
#[test]
fn a_lagging_reader_is_decided_at_the_lease_time() {
    model(None, || {
        let clock = ModelClock::starting_at(START);
        let limiter = bucket(&clock, 1);
        let me = pinned(&limiter, 0);
        let admitted = take(&me, &clock, 1, (0, 0));
        let lagging = {
            let (me, clock) = (pinned(&limiter, 0), clock.clone());
            thread::spawn(move || {
                ModelClock::set_thread_lag(T / 2);
                take(&me, &clock, 2, (T / 2, 0))
            })
        };
        // B runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 1,977 executions of this race.
        let b = {
            let (me, clock) = (pinned(&limiter, 0), clock.clone());
            thread::spawn(move || {
                clock.advance(LATER);
                take(&me, &clock, C, (0, 0))
            })
        };
        let admitted = join_all(vec![lagging, b], admitted);
        assert_leased_bucket_bound(&admitted);
    });
}

// ---------------------------------------------------------------------------------------------
// (c) A rate change racing a lease's refund.

/// A setter thread lowers the rate (one permit per 2T) while A replaces the stripe's lease after it
/// expired (refunding its 3 unused permits). A refund across the change does not land; the bound
/// with the old, faster rate holds either way, and the setter's take of the whole capacity
/// afterwards cannot see refunded permits twice.
#[test]
fn set_rate_races_a_refund() {
    model(None, || {
        let clock = ModelClock::starting_at(START);
        let limiter = bucket(&clock, 1);
        let me = pinned(&limiter, 0);
        let admitted = take(&me, &clock, 1, (0, 0));
        clock.advance(2 * T);
        let a = {
            let (me, clock) = (pinned(&limiter, 0), clock.clone());
            thread::spawn(move || take(&me, &clock, 2, (0, 0)))
        };
        // The setter (then its take) runs on a model thread of its own: run on the thread that
        // built the limiter, loom explored 4,225 executions of this race.
        let setter = {
            let (limiter, clock) = (limiter.clone(), clock.clone());
            thread::spawn(move || {
                limiter
                    .source()
                    .algorithm()
                    .set_rate(Rate::new(1, Duration::from_nanos(2 * T)), clock.now_nanos())
                    .unwrap();
                take(&pinned(&limiter, 0), &clock, C, (0, 0))
            })
        };
        let admitted = join_all(vec![a, setter], admitted);
        assert_leased_bucket_bound(&admitted);
    });
}

// ---------------------------------------------------------------------------------------------
// (d) A fixed window: leases die with their window.

/// Limit 4 per window of 1,000 ns, one stripe: the driver leases 2 (1 left) in one window; A
/// takes 1 twice while B moves the clock into the next window and takes the whole
/// limit there. Never more than 4 admitted in one window, whoever holds which lease.
#[test]
fn a_leased_fixed_window_is_never_over_its_limit() {
    const WINDOW: u64 = 1_000;
    model(None, || {
        let clock = ModelClock::starting_at(START + WINDOW / 2);
        let window = FixedWindow::aligned(4, Duration::from_nanos(WINDOW)).unwrap();
        let limiter = Arc::new(
            PerCore::with_stripes(AtomicLimiter::with_clock(window, clock.clone()), 1)
                .unwrap()
                .with_max_lease(2)
                .unwrap(),
        );
        let me = pinned(&limiter, 0);
        let admitted = take(&me, &clock, 1, (0, 0));
        let a = {
            let (me, clock) = (pinned(&limiter, 0), clock.clone());
            thread::spawn(move || {
                let mut got = take(&me, &clock, 1, (0, 0));
                got.extend(take(&me, &clock, 1, (0, 0)));
                got
            })
        };
        // B runs on a model thread of its own: run on the thread that built the limiter, loom
        // explored 2,386 executions of this race.
        let b = {
            let (me, clock) = (pinned(&limiter, 0), clock.clone());
            thread::spawn(move || {
                clock.advance(WINDOW);
                take(&me, &clock, 4, (0, 0))
            })
        };
        let admitted = join_all(vec![a, b], admitted);
        let (most, index) = max_in_aligned_window(&admitted, WINDOW);
        assert!(most <= 4, "{most} admitted in window {index}: {admitted:?}");
    });
}
