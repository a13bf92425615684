//! Observability: counters, a gauge and a histogram through the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`), and [`tracing`](https://docs.rs/tracing) events (feature
//! `tracing`). With neither feature on, every hook in the crate compiles to nothing: no clock
//! read, no branch, no field.
//!
//! # Metrics (feature `metrics`)
//!
//! They go to whichever recorder the application installs (metrics-exporter-prometheus, a
//! StatsD or OpenTelemetry bridge, …); with none installed they cost one atomic load each.
//! [`describe`] registers their help texts and units.
//!
//! | name | kind | labels | counts |
//! |---|---|---|---|
//! | [`REQUESTS`] `floodgate_requests_total` | counter | `limiter`, `outcome` | requests the HTTP layer decided; `outcome` is `allowed`, `delayed` (shaped, then allowed), `denied` (429), `no_key` (no key: a 500, or unlimited under [`MissingKey::Allow`](crate::middleware::MissingKey)), `never_granted` (a cost the limiter can never grant: a 500) or `cancelled` (dropped while it waited to be shaped, e.g. the client went away) |
//! | [`DECISION_SECONDS`] `floodgate_decision_seconds` | histogram | `limiter` | the layer's time to decide one request: key extraction and the limiter's check (not a shaping wait, not the inner service) |
//! | [`BACKEND_FAILURES`] `floodgate_backend_failures_total` | counter | `backend` (`redis`, `memcached`), `limiter`, `kind` (`timeout`, `error`) | calls the [`FailurePolicy`](crate::backend::FailurePolicy) decided because the store gave no answer (as [`FailureCounts`](crate::backend::FailureCounts)) |
//! | [`KEYED_KEYS`] `floodgate_keyed_keys` | gauge | `limiter` | keys a [`Keyed`](crate::Keyed) map holds |
//! | [`KEYED_EVICTIONS`] `floodgate_keyed_evictions_total` | counter | `limiter`, `kind` (`idle`, `live`) | keys dropped from it |
//! | [`KEYED_REFUSED`] `floodgate_keyed_refused_new_keys_total` | counter | `limiter` | new keys it refused for lack of room |
//!
//! In the HTTP layer `limiter` is the layer's [`Policy`](crate::middleware::Policy) name; for
//! Redis and memcached it is the limiter's name. Skipped requests
//! ([`skip_method`](crate::middleware::LayerSettings::skip_method),
//! [`skip_path`](crate::middleware::LayerSettings::skip_path)) are not counted. The in-flight
//! layer ([`InFlightLayer`](crate::middleware::InFlightLayer)) records none of these metrics and
//! no `DEBUG` event for its refusals; of the events below it writes only the setup `ERROR`.
//!
//! A keyed map keeps its counts under its shard locks and has no name, so it is not recorded
//! on every request: record it where you read it, typically when metrics are scraped, with
//! [`KeyedStats::record`](crate::keyed::KeyedStats::record) (the counts are the map's own:
//! totals since it was built, written as absolute values), under a name no other map is
//! recorded under: two maps under one name overwrite each other's values silently.
//!
//! # Tracing events (feature `tracing`)
//!
//! | level | when | fields |
//! |---|---|---|
//! | `DEBUG` | the HTTP layer answers 429 | `limiter`, `path`, `limit`, `retry_after_ms` |
//! | `WARN` | a Redis or memcached call fails, on the 1st, 2nd, 4th, 8th, … failure of each kind (`DEBUG` for the others, so an outage at thousands of requests a second writes a few dozen warnings, not one per request) | `backend`, `limiter`, `kind`, `failures` (of that kind so far), `error` |
//! | `ERROR` | the HTTP layer answers a setup `500` (no key, or a cost never granted); once per layer, as the line on standard error | `limiter` |
//!
//! Targets are the module paths (`floodgate::middleware::…`, `floodgate::backend::…`).

#[cfg(feature = "metrics")]
use ::metrics::{Key, Label, Level, Metadata};

#[cfg(any(feature = "metrics", feature = "tracing"))]
use std::sync::Arc;

#[cfg(any(feature = "metrics", feature = "tracing"))]
use crate::backend::BackendError;
#[cfg(feature = "metrics")]
use crate::clock::{Clock, QuantaClock};
#[cfg(feature = "metrics")]
use crate::keyed::KeyedStats;

/// `floodgate_requests_total`: requests the HTTP layer decided, by `limiter` and `outcome`.
///
/// ```
/// assert_eq!(floodgate::observe::REQUESTS, "floodgate_requests_total");
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub const REQUESTS: &str = "floodgate_requests_total";

/// `floodgate_decision_seconds`: the HTTP layer's time to decide a request, by `limiter`.
///
/// ```
/// assert_eq!(floodgate::observe::DECISION_SECONDS, "floodgate_decision_seconds");
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub const DECISION_SECONDS: &str = "floodgate_decision_seconds";

/// `floodgate_backend_failures_total`: Redis or memcached calls decided by the failure policy,
/// by `backend`, `limiter` and `kind`.
///
/// ```
/// assert_eq!(floodgate::observe::BACKEND_FAILURES, "floodgate_backend_failures_total");
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub const BACKEND_FAILURES: &str = "floodgate_backend_failures_total";

/// `floodgate_keyed_keys`: keys a keyed map holds, by `limiter`.
///
/// ```
/// assert_eq!(floodgate::observe::KEYED_KEYS, "floodgate_keyed_keys");
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub const KEYED_KEYS: &str = "floodgate_keyed_keys";

/// `floodgate_keyed_evictions_total`: keys dropped from a keyed map, by `limiter` and `kind`.
///
/// ```
/// assert_eq!(floodgate::observe::KEYED_EVICTIONS, "floodgate_keyed_evictions_total");
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub const KEYED_EVICTIONS: &str = "floodgate_keyed_evictions_total";

/// `floodgate_keyed_refused_new_keys_total`: new keys a full keyed map refused, by `limiter`.
///
/// ```
/// assert_eq!(floodgate::observe::KEYED_REFUSED, "floodgate_keyed_refused_new_keys_total");
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub const KEYED_REFUSED: &str = "floodgate_keyed_refused_new_keys_total";

/// Registers the help text and unit of every floodgate metric with the installed recorder (an
/// exporter prints them as `# HELP` lines). Optional; call it once after installing the
/// recorder.
///
/// ```
/// use metrics_util::debugging::DebuggingRecorder;
/// let recorder = DebuggingRecorder::new();
/// let snapshotter = recorder.snapshotter();
/// metrics::with_local_recorder(&recorder, || {
///     floodgate::observe::describe();
///     metrics::counter!(floodgate::observe::REQUESTS).increment(0);
/// });
/// let (_, _, help, _) = &snapshotter.snapshot().into_vec()[0];
/// assert!(help.as_deref().unwrap().contains("HTTP layer"));
/// ```
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe() {
    use ::metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        REQUESTS,
        Unit::Count,
        "Requests the floodgate HTTP layer decided, by limiter (policy name) and outcome \
         (allowed, delayed, denied, no_key, never_granted, cancelled)."
    );
    describe_histogram!(
        DECISION_SECONDS,
        Unit::Seconds,
        "Time the floodgate HTTP layer took to decide a request: key extraction and the \
         limiter's check."
    );
    describe_counter!(
        BACKEND_FAILURES,
        Unit::Count,
        "Redis or memcached calls that got no answer and were decided by the failure policy, \
         by backend, limiter and kind (timeout, error)."
    );
    describe_gauge!(KEYED_KEYS, Unit::Count, "Keys a floodgate keyed map holds.");
    describe_counter!(
        KEYED_EVICTIONS,
        Unit::Count,
        "Keys dropped from a floodgate keyed map, by kind (idle, live)."
    );
    describe_counter!(
        KEYED_REFUSED,
        Unit::Count,
        "New keys a full floodgate keyed map refused."
    );
}

/// What the metrics say they come from (the recorder may filter on it).
#[cfg(feature = "metrics")]
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

#[cfg(feature = "metrics")]
fn key(name: &'static str, labels: &[(&'static str, &str)]) -> Key {
    let labels: Vec<Label> = labels
        .iter()
        .map(|&(key, value)| Label::new(key, value.to_owned()))
        .collect();
    Key::from_parts(name, labels)
}

#[cfg(feature = "metrics")]
fn increment(key: &Key, by: u64) {
    ::metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(by));
}

#[cfg(feature = "metrics")]
impl KeyedStats {
    /// Writes these counts to the installed `metrics` recorder under `limiter`:
    /// [`KEYED_KEYS`] (gauge), [`KEYED_EVICTIONS`] (idle and live) and [`KEYED_REFUSED`]
    /// (counters, set to these totals). Call it where you read the stats, typically when metrics
    /// are scraped: it costs the map nothing beyond [`Keyed::stats`](crate::Keyed::stats).
    ///
    /// `limiter` must name one map. The stats carry no identity of the map they came from, so
    /// two maps recorded under the same name write the same gauge and counters: each call
    /// overwrites the other's values (the last call wins) and nothing reports the collision.
    ///
    /// ```
    /// use floodgate::{FixedWindow, Keyed};
    /// use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    /// use std::time::Duration;
    /// let per_user: Keyed<u64, _> = Keyed::builder(FixedWindow::new(1, Duration::from_secs(60))?)
    ///     .max_keys(1)
    ///     .build()?;
    /// per_user.try_acquire(&1, 1)?;
    /// per_user.try_acquire(&2, 1)?; // full of live keys: refused
    /// let recorder = DebuggingRecorder::new();
    /// let snapshotter = recorder.snapshotter();
    /// metrics::with_local_recorder(&recorder, || per_user.stats().record("per-user"));
    /// let refused = snapshotter.snapshot().into_vec().into_iter()
    ///     .find(|(key, ..)| key.key().name() == floodgate::observe::KEYED_REFUSED)
    ///     .map(|(.., value)| value);
    /// assert_eq!(refused, Some(DebugValue::Counter(1)));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn record(&self, limiter: &str) {
        let limiter = ("limiter", limiter);
        ::metrics::with_recorder(|recorder| {
            recorder
                .register_gauge(&key(KEYED_KEYS, &[limiter]), &METADATA)
                .set(self.keys as f64);
            for (kind, total) in [("idle", self.evicted_idle), ("live", self.evicted_live)] {
                recorder
                    .register_counter(&key(KEYED_EVICTIONS, &[limiter, ("kind", kind)]), &METADATA)
                    .absolute(total);
            }
            recorder
                .register_counter(&key(KEYED_REFUSED, &[limiter]), &METADATA)
                .absolute(self.refused_new_keys);
        });
    }
}

/// How the HTTP layer ended a request it limited, for [`REQUESTS`]'s `outcome` label.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestOutcome {
    Allowed,
    Delayed,
    Denied,
    NoKey,
    NeverGranted,
    Cancelled,
}

#[cfg(feature = "metrics")]
const OUTCOMES: [(RequestOutcome, &str); 6] = [
    (RequestOutcome::Allowed, "allowed"),
    (RequestOutcome::Delayed, "delayed"),
    (RequestOutcome::Denied, "denied"),
    (RequestOutcome::NoKey, "no_key"),
    (RequestOutcome::NeverGranted, "never_granted"),
    (RequestOutcome::Cancelled, "cancelled"),
];

/// The start of a decision, for [`DECISION_SECONDS`]; nothing without the `metrics` feature.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) struct Timer {
    #[cfg(feature = "metrics")]
    started_nanos: u64,
}

#[cfg_attr(not(feature = "tower"), allow(dead_code))]
impl Timer {
    #[inline]
    pub(crate) fn start() -> Self {
        Timer {
            #[cfg(feature = "metrics")]
            started_nanos: QuantaClock::new().now_nanos(),
        }
    }
}

/// The HTTP layer's metric keys, made once per layer configuration (no allocation per
/// request); a zero-sized no-op without the `metrics` feature.
#[derive(Clone, Debug)]
pub(crate) struct LayerObserver {
    #[cfg(feature = "metrics")]
    keys: Arc<LayerKeys>,
}

#[cfg(feature = "metrics")]
#[derive(Debug)]
struct LayerKeys {
    /// [`REQUESTS`], in the order of [`OUTCOMES`].
    requests: [Key; 6],
    decision_seconds: Key,
}

#[cfg_attr(not(feature = "tower"), allow(dead_code, unused_variables))]
impl LayerObserver {
    /// The keys for the layer whose policy is named `limiter`.
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn new(limiter: &str) -> Self {
        LayerObserver {
            #[cfg(feature = "metrics")]
            keys: Arc::new(LayerKeys {
                requests: OUTCOMES.map(|(_, outcome)| {
                    key(REQUESTS, &[("limiter", limiter), ("outcome", outcome)])
                }),
                decision_seconds: key(DECISION_SECONDS, &[("limiter", limiter)]),
            }),
        }
    }

    /// Counts a request that ended in `outcome`.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn ended(&self, outcome: RequestOutcome) {
        #[cfg(feature = "metrics")]
        increment(&self.keys.requests[outcome as usize], 1);
    }

    /// Records the time since `timer` started as a decision's latency.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn decided(&self, timer: Timer) {
        #[cfg(feature = "metrics")]
        {
            let nanos = QuantaClock::new()
                .now_nanos()
                .saturating_sub(timer.started_nanos);
            ::metrics::with_recorder(|recorder| {
                recorder
                    .register_histogram(&self.keys.decision_seconds, &METADATA)
                    .record(nanos as f64 / 1e9);
            });
        }
    }

    /// A 429: a `DEBUG` event.
    #[inline]
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn denied(&self, limiter: &str, path: &str, decision: crate::Decision) {
        #[cfg(feature = "tracing")]
        tracing::debug!(
            limiter,
            path,
            limit = decision.limit(),
            retry_after_ms = u64::try_from(decision.retry_after().as_millis()).unwrap_or(u64::MAX),
            "rate limited: 429"
        );
    }

    /// A setup `500` (logged once per layer): an `ERROR` event with the reason.
    #[cfg_attr(not(feature = "tracing"), allow(unused_variables))]
    pub(crate) fn setup_error(&self, limiter: &str, reason: &str) {
        #[cfg(feature = "tracing")]
        tracing::error!(limiter, "{reason}");
    }
}

/// A request the HTTP layer decided but has not ended yet (it waits to be shaped): ends as
/// [`RequestOutcome::Cancelled`] if dropped before [`end`](Self::end), so that every decided
/// request ends in exactly one outcome.
#[cfg_attr(not(feature = "tower"), allow(dead_code))]
pub(crate) struct Unended(Option<LayerObserver>);

#[cfg_attr(not(feature = "tower"), allow(dead_code))]
impl Unended {
    /// A request of the layer observed by `observer` that has yet to end.
    pub(crate) fn new(observer: &LayerObserver) -> Self {
        Unended(Some(observer.clone()))
    }

    /// Ends the request in `outcome`.
    pub(crate) fn end(mut self, outcome: RequestOutcome) {
        if let Some(observer) = self.0.take() {
            observer.ended(outcome);
        }
    }
}

impl Drop for Unended {
    fn drop(&mut self) {
        if let Some(observer) = self.0.take() {
            observer.ended(RequestOutcome::Cancelled);
        }
    }
}

/// The labels a [`FailureHandler`](crate::backend::FailureHandler) reports its failures under:
/// which backend, which limiter. Zero-sized without the features.
#[derive(Debug, Default)]
pub(crate) struct BackendObserver {
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    names: Option<Arc<BackendNames>>,
}

#[cfg(any(feature = "metrics", feature = "tracing"))]
#[derive(Debug)]
struct BackendNames {
    #[cfg(feature = "tracing")]
    backend: &'static str,
    #[cfg(feature = "tracing")]
    limiter: String,
    /// [`BACKEND_FAILURES`] for timeouts, then for errors.
    #[cfg(feature = "metrics")]
    failures: [Key; 2],
}

impl BackendObserver {
    /// Failures of `backend`'s limiter named `limiter`.
    #[cfg_attr(
        not(any(feature = "metrics", feature = "tracing")),
        allow(unused_variables)
    )]
    #[cfg_attr(not(any(feature = "redis", feature = "memcached")), allow(dead_code))]
    pub(crate) fn new(backend: &'static str, limiter: &str) -> Self {
        BackendObserver {
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            names: Some(Arc::new(BackendNames {
                #[cfg(feature = "tracing")]
                backend,
                #[cfg(feature = "tracing")]
                limiter: limiter.to_owned(),
                #[cfg(feature = "metrics")]
                failures: ["timeout", "error"].map(|kind| {
                    key(
                        BACKEND_FAILURES,
                        &[("backend", backend), ("limiter", limiter), ("kind", kind)],
                    )
                }),
            })),
        }
    }

    /// Reports a failure; `of_its_kind` counts failures of its kind so far, this one included.
    /// Unnamed handlers (made outside the crate's backends) report nothing.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[inline]
    pub(crate) fn failed(&self, error: &BackendError, of_its_kind: u64) {
        let Some(names) = &self.names else { return };
        #[cfg(feature = "metrics")]
        increment(&names.failures[usize::from(!error.is_timeout())], 1);
        #[cfg(feature = "tracing")]
        {
            let kind = if error.is_timeout() {
                "timeout"
            } else {
                "error"
            };
            let (backend, limiter) = (names.backend, names.limiter.as_str());
            if of_its_kind.is_power_of_two() {
                tracing::warn!(backend, limiter, kind, failures = of_its_kind, %error,
                    "rate-limit backend failed; the failure policy decided");
            } else {
                tracing::debug!(backend, limiter, kind, failures = of_its_kind, %error,
                    "rate-limit backend failed; the failure policy decided");
            }
        }
        #[cfg(not(feature = "tracing"))]
        let _ = of_its_kind;
    }

    /// Without the features: nothing.
    #[cfg(not(any(feature = "metrics", feature = "tracing")))]
    #[inline(always)]
    pub(crate) fn failed(&self, _: &crate::backend::BackendError, _: u64) {}
}
