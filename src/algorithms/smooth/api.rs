//! The inherent API and the `Limiter` impl shared by both smooth flavours (Guava's own return
//! types are in `compat::guava`).

/// The Guava-shaped inherent API and the [`Limiter`](crate::Limiter) impl, shared by both
/// flavours. The type provides `now_micros`, `decide_at(n, now, timeout) -> Outcome` (which
/// runs the CAS), `try_acquire_now::<A: Answer>(n)` (`try_acquire` / `admit` for `n > 0`: a
/// short path for the common case falling back to `try_acquire_general`), `set_infinite`,
/// `set_finite(interval, now)`, `infinite`, `interval` and `snapshot_at(now)`.
macro_rules! smooth_limiter_api {
    ($ty:ident, $make:literal) => {
        impl<C: $crate::Clock> $ty<C> {
            /// The µs from `now` (µs since creation) to the last whole µs whose wait, added to
            /// any clock read within that µs, still ends on the clock's `u64` nanosecond
            /// timeline (one µs short of its end, for the read's sub-µs part).
            fn micros_to_the_end(&self, now: i64) -> i64 {
                let end = $crate::algorithms::smooth::micros_since(u64::MAX, self.origin_nanos);
                end.saturating_sub(1).saturating_sub(now).max(0)
            }

            /// [`AcquireError::PastEndOfTime`](crate::AcquireError) for a wait of `wait` from now.
            fn past_end_of_time(&self, wait: std::time::Duration) -> $crate::AcquireError {
                $crate::AcquireError::PastEndOfTime {
                    now_nanos: $crate::Clock::now_nanos(&self.clock),
                    wait,
                }
            }

            #[doc = concat!(
                "Books `permits` like [`acquire`](crate::Limiter::acquire) but does not ",
                "sleep: returns how long the caller must wait before using them (for async ",
                "callers, e.g. `tokio::time::sleep(wait)`).\n\n# Errors\n",
                "[`AcquireError::ZeroPermits`](crate::AcquireError) for `permits = 0`; ",
                "[`AcquireError::BookingTooLong`](crate::AcquireError) for a booking longer than ",
                "a year (nothing is booked).\n\n```\n",
                "use floodgate::*;\nuse std::time::Duration;\nlet clock = ManualClock::new();\n",
                "let limiter = ", $make, ";\n",
                "assert_eq!(limiter.reserve(1).unwrap(), Duration::ZERO);\n",
                "assert!(limiter.reserve(1).unwrap() > Duration::ZERO);\n",
                "assert!(clock.sleeps().is_empty());\n",
                "assert!(matches!(limiter.reserve(u32::MAX), Err(AcquireError::BookingTooLong { .. })));\n```"
            )]
            pub fn reserve(&self, permits: u32) -> Result<std::time::Duration, $crate::AcquireError> {
                if permits == 0 {
                    return Err($crate::AcquireError::ZeroPermits);
                }
                let now = self.now_micros();
                let outcome = self.decide_at(permits, now, None);
                outcome.check_booking(permits)?;
                Ok(std::time::Duration::from_micros(outcome.wait_micros as u64))
            }

            #[doc = concat!(
                "Guava's `setRate(permitsPerSecond)`, live, from any thread, without a lock. ",
                "Debt already booked stays booked (the next request still pays the old ",
                "interval); stored permits keep their share of the maximum. `f64::INFINITY` ",
                "makes every request free.\n\n# Errors\n",
                "[`ConfigError::InvalidNumber`](crate::ConfigError) for zero, negative or NaN ",
                "(Guava: `IllegalArgumentException`), or a rate below one permit a year ",
                "(one permit would book more than a year: see *One request books at most a ",
                "year* in the module docs); for a warming limiter, ",
                "[`ConfigError::Invalid`](crate::ConfigError) for a finite rate so high that its ",
                "warm-up would hold more than `f64::MAX` permits, or so low that one cold permit ",
                "would book more than a year (less 2 µs with a warm-up above 0). The old rate then stays.\n\n```\n",
                "use floodgate::*;\nlet clock = ManualClock::new();\nlet limiter = ", $make,
                ";\nlimiter.set_rate(10.0).unwrap();\nassert_eq!(limiter.rate(), 10.0);\n",
                "assert!(limiter.set_rate(0.0).is_err() && limiter.set_rate(f64::NAN).is_err());\n```"
            )]
            pub fn set_rate(&self, permits_per_second: f64) -> Result<(), $crate::ConfigError> {
                match self.validate_rate(permits_per_second)? {
                    $crate::algorithms::smooth::RateSetting::Infinite => self.set_infinite(),
                    $crate::algorithms::smooth::RateSetting::Finite(interval) => {
                        let now = self.now_micros();
                        self.set_finite(interval, now)
                    }
                }
                Ok(())
            }

            #[doc = concat!(
                "Guava's `getRate()`: permits per second (`f64::INFINITY` for an infinite ",
                "rate).\n\n```\nuse floodgate::*;\nlet clock = ManualClock::new();\n",
                "let limiter = ", $make, ";\nassert_eq!(limiter.rate(), 5.0);\n```"
            )]
            pub fn rate(&self) -> f64 {
                if self.infinite() {
                    f64::INFINITY
                } else {
                    1e6 / self.interval()
                }
            }

            #[doc = concat!(
                "The state as Guava would see it now (after a resync), for monitoring and ",
                "tests.\n\n```\nuse floodgate::*;\nlet clock = ManualClock::new();\n",
                "let limiter = ", $make, ";\nlimiter.reserve(1).unwrap();\n",
                "assert!(limiter.snapshot().next_free_micros > 0);\n```"
            )]
            pub fn snapshot(&self) -> $crate::algorithms::smooth::SmoothSnapshot {
                self.snapshot_at(self.now_micros())
            }
        }

        impl<C: $crate::Clock> $ty<C> {
            /// Guava's `tryAcquire(n)` (no timeout, `n > 0`) through the general engine, at the
            /// clock read `now` (µs since creation) the caller already took.
            #[inline]
            fn try_acquire_engine(
                &self,
                n: u32,
                now: i64,
            ) -> Result<$crate::Decision, $crate::AcquireError> {
                let outcome = self.decide_at(n, now, Some(0));
                outcome.check_booking(n)?;
                Ok(outcome.decision)
            }

            /// `try_acquire` / `admit` of `n ≠ 1` permits: the short path in a copy of its own, out
            /// of line. The common call's copy then runs with `n = 1` known (where the one
            /// comparison of the count that `n = 0` needs anyway tells them apart), so the checks
            /// only a count above 1 needs (a refusal judged as booked when its wait ends, see
            /// `refusal`) fold away there; checked in the short path itself, they cost
            /// `try_acquire` 4 to 6 instructions a call (`instructions_smooth`, issue 17).
            /// Not `#[cold]`: measured 1 to 2 instructions more per refusal with it.
            #[inline(never)]
            fn try_acquire_many<A: $crate::decision::Answer>(
                &self,
                n: u32,
            ) -> Result<A, $crate::AcquireError> {
                if n == 0 {
                    return Err($crate::AcquireError::ZeroPermits);
                }
                self.try_acquire_now(n)
            }

            /// [`try_acquire_engine`](Self::try_acquire_engine) out of line: the fallback of a
            /// short path.
            #[cold]
            #[inline(never)]
            #[allow(dead_code)] // a flavour without a short path does not use it
            fn try_acquire_general(
                &self,
                n: u32,
                now: i64,
            ) -> Result<$crate::Decision, $crate::AcquireError> {
                self.try_acquire_engine(n, now)
            }
        }

        impl<C: $crate::Clock> $crate::Limiter for $ty<C> {
            /// Guava's `tryAcquire(permits)` (no timeout).
            #[inline]
            fn try_acquire(&self, n: u32) -> Result<$crate::Decision, $crate::AcquireError> {
                if n != 1 {
                    return self.try_acquire_many(n);
                }
                self.try_acquire_now(1)
            }

            /// [`try_acquire`](crate::Limiter::try_acquire), answering only whether the permits were
            /// taken (the short path answers a `bool`: the terms of the `Decision` are never
            /// computed).
            #[inline]
            fn admit(&self, n: u32) -> Result<bool, $crate::AcquireError> {
                if n != 1 {
                    return self.try_acquire_many(n);
                }
                self.try_acquire_now(1)
            }

            fn clock(&self) -> &dyn $crate::Clock {
                &self.clock
            }

            /// Sets the rate to `limit` permits per second ([`set_rate`](Self::set_rate)),
            /// unless [`limit`](crate::Limiter::limit) already reports `limit`: the rate is then
            /// kept exactly, so `set_limit(limit())` changes nothing (a 0.3/s limiter, which
            /// reports 1, stays at 0.3/s; use `set_rate(1.0)` for exactly 1/s).
            ///
            /// # Errors
            /// [`ConfigError::ZeroLimit`](crate::ConfigError) for 0; otherwise as
            /// [`set_rate`](Self::set_rate). The old rate then stays.
            fn set_limit(&self, limit: u32) -> Result<(), $crate::ConfigError> {
                if limit == 0 {
                    return Err($crate::ConfigError::ZeroLimit);
                }
                if $crate::Limiter::limit(self) == u64::from(limit) {
                    return Ok(());
                }
                self.set_rate(f64::from(limit))
            }

            /// The rate rounded half up to whole permits per second, at least 1 (a rate below
            /// 0.5/s still admits), saturating at `u64::MAX`; `u64::MAX` for ∞. The
            /// `limit` of every [`Decision`](crate::Decision) it answers, and what the HTTP
            /// fields publish as the quota (`q`).
            fn limit(&self) -> u64 {
                if self.infinite() {
                    u64::MAX
                } else {
                    $crate::algorithms::smooth::limit_of(self.interval())
                }
            }

            /// Guava's `acquire`: books at once, sleeps until the previous booking is paid. A
            /// wait that would end past the end of the clock's timeline books nothing. Returns
            /// the sleep it asked for, as Guava does, not the time measured across it: unlike
            /// the packed-word limiters', a sleep that ends late is not counted in full.
            fn acquire(&self, n: u32) -> Result<std::time::Duration, $crate::AcquireError> {
                if n == 0 {
                    return Err($crate::AcquireError::ZeroPermits);
                }
                let now = self.now_micros();
                // Guava's `canAcquire` with the time left on the clock as the timeout: a
                // booking whose wait would end past the clock's end is refused, writing nothing.
                let outcome = self.decide_at(n, now, Some(self.micros_to_the_end(now)));
                outcome.check_booking(n)?;
                if !outcome.decision.is_allowed() {
                    return Err(self.past_end_of_time(outcome.decision.retry_after()));
                }
                let wait = std::time::Duration::from_micros(outcome.wait_micros as u64);
                $crate::limiter::check_wait_ends(&self.clock, wait)?;
                if !wait.is_zero() {
                    // The sleep asked for is the answer (Guava's): a time measured across the
                    // sleep would also count other callers' sleeps on a clock whose sleeps move
                    // a shared time (the loom models' `time_smooth_leap` asserts the booking's
                    // own wait).
                    self.clock.sleep(wait);
                }
                Ok(wait)
            }

            /// Guava's `tryAcquire(permits, timeout)`: granted iff the limiter is free within
            /// `timeout`; then it sleeps until the previous booking is paid. A refusal writes
            /// nothing; its `retry_after` is the time until a no-wait try would succeed.
            fn try_acquire_for(
                &self,
                n: u32,
                timeout: std::time::Duration,
            ) -> Result<$crate::Decision, $crate::AcquireError> {
                if n == 0 {
                    return Err($crate::AcquireError::ZeroPermits);
                }
                let timeout = $crate::algorithms::smooth::timeout_micros(timeout);
                let now = self.now_micros();
                // The time left on the clock caps the timeout, so that a wait that would end
                // past the clock's end is refused, writing nothing (as `acquire`).
                let to_the_end = self.micros_to_the_end(now);
                let outcome = self.decide_at(n, now, Some(timeout.min(to_the_end)));
                outcome.check_booking(n)?;
                if !outcome.decision.is_allowed()
                    && timeout > to_the_end
                    && outcome.decision.retry_after().as_micros() <= timeout as u128
                {
                    // Refused by the clock's end, not by the caller's timeout.
                    return Err(self.past_end_of_time(outcome.decision.retry_after()));
                }
                if outcome.wait_micros > 0 {
                    let wait = std::time::Duration::from_micros(outcome.wait_micros as u64);
                    $crate::limiter::check_wait_ends(&self.clock, wait)?;
                    self.clock.sleep(wait);
                    // The grant was decided before the sleep: its reset counts from after it.
                    let granted = outcome.decision;
                    let reset = granted.reset_after().saturating_sub(wait);
                    return Ok($crate::Decision::allow(
                        granted.limit(),
                        granted.remaining(),
                        u64::try_from(reset.as_nanos()).unwrap_or(u64::MAX),
                    ));
                }
                Ok(outcome.decision)
            }
        }
    };
}
