//! The rate-limit header fields: the [`Policy`] a layer announces, the [`HeaderStyle`] it writes
//! them in (draft-ietf-httpapi-ratelimit-headers-11 `RateLimit-Policy` / `RateLimit` by
//! default), and `Retry-After`.

use std::hash::{Hash, Hasher};
use std::time::Duration;

use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::decision::{ConfigError, Decision};

/// `RateLimit-Limit` (draft -06): the limit in force.
pub const RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("ratelimit-limit");
/// `RateLimit-Remaining` (draft -06): permits left after this request.
pub const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
/// `RateLimit-Reset` (draft -06): whole seconds (rounded up) until the client's quota is full
/// again.
pub const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
/// `RateLimit-Policy` (draft -11): the quota policies that apply, a structured-field List.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (draft -11): the client's state under each policy, a structured-field List.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
/// `X-RateLimit-After`: the wait of a denial in whole seconds, as `Retry-After`.
pub(super) const X_RATELIMIT_AFTER: HeaderName = HeaderName::from_static("x-ratelimit-after");

/// The largest structured-field Integer (RFC 9651: at most 15 digits); larger values are capped.
const MAX_SF_INTEGER: u64 = 999_999_999_999_999;

/// Which rate-limit header fields the middleware writes. Every style answers a denial with
/// `Retry-After` (whole seconds, rounded up, at least 1).
///
/// | style | fields (values for a policy `"default"` of 100 a minute, 57 left, 30 s to go) |
/// |---|---|
/// | [`Draft11`](Self::Draft11) (default) | `RateLimit-Policy: "default";q=100;w=60` and `RateLimit: "default";r=57;t=30` |
/// | [`Draft06`](Self::Draft06) | `RateLimit-Limit: 100`, `RateLimit-Remaining: 57`, `RateLimit-Reset: 30` |
/// | [`XRateLimit`](Self::XRateLimit) | `X-RateLimit-Limit: 100`, `X-RateLimit-Remaining: 57`, `X-RateLimit-Reset: 30`, and on a 429 `X-RateLimit-After` (as tower_governor) |
/// | [`None`](Self::None) | none (`Retry-After` only, on a 429) |
///
/// Draft -11 fields are Lists: when several layers limit one request (a per-second and a
/// per-day policy), each adds its own item to the same field, inner layer first:
/// `RateLimit: "per-second";r=4;t=1, "per-day";r=990;t=80000`. Give each layer its own
/// [`Policy`] name. When an inner layer denies and an outer one has no permits left for the next
/// request, the outer layer raises `Retry-After` to its own `t` (an inner value later than that,
/// in delta-seconds or as an HTTP-date, stands as written), and an inner `X-RateLimit-After`
/// with it, also with [`headers_on_allowed`](super::LayerSettings::headers_on_allowed) off. The other styles have one value per field: the outermost layer's replaces the inner
/// ones.
///
/// ## `t` and `Retry-After`
/// `r` is the permits left after this request. With [`RateLimitLayer::permits_per_request`](super::RateLimitLayer::permits_per_request)
/// `n` > 1, `q`, `r` and the limit and remaining fields of the other styles count whole requests
/// (permits / `n`, rounded down), the draft's default quota unit. `t` is whole seconds, rounded up: on an allowed
/// response, the time until the client's quota is whole again if it takes nothing more (what
/// [`Decision::reset_after`] reports); on a denial, the `Retry-After` value (the time until the
/// denied request could pass), so `Retry-After` is never earlier than `t`. Per algorithm:
///
/// * [`FixedWindow`](crate::FixedWindow): the end of the current window. Until then the client
///   gets no more than `r`; then the whole quota. This is exactly the draft's meaning of `t`.
/// * [`SlidingWindow`](crate::SlidingWindow), [`PackedSlidingWindow`](crate::PackedSlidingWindow):
///   until every request counted now has slid out of the window. Permits come back gradually
///   before that, as old requests leave the window.
/// * [`TokenBucket`](crate::TokenBucket), [`Gcra`](crate::Gcra): until the bucket is full again;
///   one permit comes back every `w / q` before that.
/// * [`LeakyBucket`](crate::LeakyBucket): until the bucket has drained; room comes back at the
///   leak rate before that.
/// * Smooth limiters: until the limiter is idle and its stored permits are full.
///
/// So for all but the fixed window a client that spreads `r` requests over `t` seconds is
/// never throttled but under-uses its quota; the draft allows this (a client must not assume
/// the whole quota is back after `t`, and more may come back sooner).
///
/// An allowed decision with no reset time (`reset_after` zero: what a Redis or memcached
/// limiter's [`FailurePolicy::FailOpen`](crate::backend::FailurePolicy::FailOpen) reports, as
/// it cannot know the client's state) gets no `t` and no reset field, rather than `0` ("the
/// quota is whole again now", which invites a client to send more while the store is down).
///
/// ```
/// use floodgate::Decision;
/// use floodgate::middleware::{HeaderStyle, Policy};
/// let policy = Policy::new("default")?.window(std::time::Duration::from_secs(60))?;
/// let mut headers = http::HeaderMap::new();
/// // 100 a minute, 57 left, the window ends in 29.2 s.
/// HeaderStyle::Draft11.write(&mut headers, &policy, Decision::allow(100, 57, 29_200_000_000));
/// assert_eq!(headers["ratelimit-policy"], r#""default";q=100;w=60"#);
/// assert_eq!(headers["ratelimit"], r#""default";r=57;t=30"#);
/// assert_eq!(HeaderStyle::default(), HeaderStyle::Draft11);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeaderStyle {
    /// `RateLimit-Policy` and `RateLimit`, draft-ietf-httpapi-ratelimit-headers-11.
    #[default]
    Draft11,
    /// `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`: draft -06 (2022), what
    /// floodgate wrote before; see [`write_headers`].
    Draft06,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds from now, not a
    /// Unix time), and on a 429 `X-RateLimit-After`: for clients of tower_governor and of the
    /// many APIs that use these names.
    XRateLimit,
    /// No rate-limit fields (a 429 still carries `Retry-After`).
    None,
}

impl HeaderStyle {
    /// Writes the fields of this style for `decision` under `policy` into `headers`, and
    /// `Retry-After` on a denial. Draft -11 items are appended to a field already there (from
    /// an inner layer); the other styles replace existing values. No partition key (`pk`) is
    /// written here: it needs the request's key (see [`Policy::partition_key`]).
    ///
    /// ```
    /// use floodgate::Decision;
    /// use floodgate::middleware::{HeaderStyle, Policy};
    /// let (second, day) = (Policy::new("per-second")?, Policy::new("per-day")?);
    /// let mut headers = http::HeaderMap::new();
    /// HeaderStyle::Draft11.write(&mut headers, &second, Decision::deny(5, 0, 400_000_000, 400_000_000));
    /// HeaderStyle::Draft11.write(&mut headers, &day, Decision::allow(1000, 990, 80_000_000_000_000));
    /// assert_eq!(headers["ratelimit"], r#""per-second";r=0;t=1, "per-day";r=990;t=80000"#);
    /// assert_eq!(headers["retry-after"], "1");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write(self, headers: &mut HeaderMap, policy: &Policy, decision: Decision) {
        write_fields(self, headers, policy, (decision, Quota::Requests), None);
    }
}

/// A quota policy as the draft -11 fields name it: a name (the List item's String), the quota
/// `q` (always the limiter's limit in force, read per request), and optionally the window `w`
/// and a partition key `pk`.
///
/// ```
/// use floodgate::middleware::Policy;
/// use std::time::Duration;
/// let policy = Policy::new("per-ip")?.window(Duration::from_secs(60))?.partition_key(true);
/// assert_eq!(policy.name(), "per-ip");
/// assert_eq!(policy.window_seconds(), Some(60));
/// assert!(Policy::new("tab\tinside").is_err()); // not a structured-field String
/// assert!(Policy::new("per-ip")?.window(Duration::from_millis(1500)).is_err()); // w is whole seconds
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    name: String,
    /// The name as a structured-field String: quoted, `"` and `\` escaped.
    quoted: String,
    window_seconds: Option<u64>,
    partition_key: bool,
}

impl Default for Policy {
    /// The policy `"default"`, no `w`, no `pk`.
    fn default() -> Self {
        Policy {
            name: "default".to_owned(),
            quoted: "\"default\"".to_owned(),
            window_seconds: None,
            partition_key: false,
        }
    }
}

impl Policy {
    /// A policy named `name`, without `w` or `pk`.
    ///
    /// # Errors
    /// [`InvalidPolicyName`] when `name` is not a structured-field String: every character must
    /// be printable ASCII (space to `~`).
    ///
    /// ```
    /// use floodgate::middleware::Policy;
    /// assert_eq!(Policy::new("default")?, Policy::default());
    /// let error = Policy::new("zürich").unwrap_err();
    /// assert_eq!(error.to_string(), "policy name \"zürich\": 'ü' at byte 1 is not printable ASCII (' ' to '~'), which a structured-field String requires");
    /// # Ok::<(), floodgate::middleware::InvalidPolicyName>(())
    /// ```
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidPolicyName> {
        let name = name.into();
        if let Some((at, bad)) = name
            .char_indices()
            .find(|&(_, c)| !(' '..='~').contains(&c))
        {
            return Err(InvalidPolicyName { name, at, bad });
        }
        let mut quoted = String::with_capacity(name.len() + 2);
        quoted.push('"');
        for c in name.chars() {
            if c == '"' || c == '\\' {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        Ok(Policy {
            name,
            quoted,
            window_seconds: None,
            partition_key: false,
        })
    }

    /// Announces the window `w` in `RateLimit-Policy` (the time the quota `q` is granted for).
    /// Say what the limiter does: 60 s for `FixedWindow::new(q, 60 s)`, the refill time of the
    /// whole quota for a bucket.
    ///
    /// # Errors
    /// [`ConfigError::DurationOutOfRange`] for a window of zero or above 999,999,999,999,999 s
    /// (the largest structured-field Integer); [`ConfigError::Invalid`] for a window that is not
    /// whole seconds (the draft's `w` has no sub-second precision).
    ///
    /// ```
    /// use floodgate::middleware::Policy;
    /// use std::time::Duration;
    /// assert_eq!(Policy::default().window(Duration::from_secs(86_400))?.window_seconds(), Some(86_400));
    /// assert!(Policy::default().window(Duration::ZERO).is_err());
    /// # Ok::<(), floodgate::ConfigError>(())
    /// ```
    pub fn window(mut self, window: Duration) -> Result<Self, ConfigError> {
        self.window_seconds = Some(whole_seconds(
            "policy window (w)",
            "must be whole seconds: the RateLimit-Policy `w` parameter has no sub-second precision",
            window,
        )?);
        Ok(self)
    }

    /// Adds a partition key `pk` to both fields: the 8 bytes (big-endian) of the 64-bit FNV-1a
    /// hash of what the request key's `Hash` impl feeds a hasher, as a structured-field Byte
    /// Sequence. It tells a client which of its quotas it is consuming without showing the key
    /// itself. Off by default.
    ///
    /// The same key gives the same `pk` on every server of the same floodgate version and byte
    /// order only when its `Hash` is a function of the key alone: an [`IpKey`](crate::IpKey)
    /// (two `u64`s), a `String`, an integer. A [`HashedKey`](crate::keyed::HashedKey) (what
    /// [`KeyFn`](super::KeyFn) recommends for API keys) holds hashes seeded at random per
    /// process, so its `pk` differs between servers and after each restart: a client behind a
    /// load balancer sees one key's quota under several `pk`s. And a hash of a guessable key is
    /// no secret: an IPv4 key's `pk` is found by trying the 2^32 addresses.
    ///
    /// ```
    /// let policy = floodgate::middleware::Policy::default().partition_key(true);
    /// assert!(policy.has_partition_key());
    /// ```
    pub fn partition_key(mut self, on: bool) -> Self {
        self.partition_key = on;
        self
    }

    /// The policy's name.
    ///
    /// ```
    /// assert_eq!(floodgate::middleware::Policy::default().name(), "default");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The announced window `w` in seconds, if set.
    ///
    /// ```
    /// assert_eq!(floodgate::middleware::Policy::default().window_seconds(), None);
    /// ```
    pub fn window_seconds(&self) -> Option<u64> {
        self.window_seconds
    }

    /// Whether the fields carry a partition key `pk`.
    ///
    /// ```
    /// assert!(!floodgate::middleware::Policy::default().has_partition_key());
    /// ```
    pub fn has_partition_key(&self) -> bool {
        self.partition_key
    }
}

/// A policy name that cannot be written as a structured-field String.
///
/// ```
/// let error = floodgate::middleware::Policy::new("a\nb").unwrap_err();
/// assert_eq!((error.name(), error.position()), ("a\nb", 1));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidPolicyName {
    name: String,
    at: usize,
    bad: char,
}

impl InvalidPolicyName {
    /// The name given.
    ///
    /// ```
    /// assert_eq!(floodgate::middleware::Policy::new("é").unwrap_err().name(), "é");
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The byte offset of the first character that is not printable ASCII.
    ///
    /// ```
    /// assert_eq!(floodgate::middleware::Policy::new("ab\u{7f}").unwrap_err().position(), 2);
    /// ```
    pub fn position(&self) -> usize {
        self.at
    }
}

impl std::fmt::Display for InvalidPolicyName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "policy name {:?}: {:?} at byte {} is not printable ASCII (' ' to '~'), which a \
             structured-field String requires",
            self.name, self.bad, self.at
        )
    }
}

impl std::error::Error for InvalidPolicyName {}

/// `duration` as a header's whole seconds: from 1 s to the largest structured-field Integer, and
/// no fraction (`why_whole` says why a fraction is refused).
pub(super) fn whole_seconds(
    what: &'static str,
    why_whole: &'static str,
    duration: Duration,
) -> Result<u64, ConfigError> {
    let max = Duration::from_secs(MAX_SF_INTEGER);
    if duration.is_zero() || duration > max {
        return Err(ConfigError::DurationOutOfRange {
            what,
            value: duration,
            min: Duration::from_secs(1),
            max,
        });
    }
    if duration.subsec_nanos() != 0 {
        return Err(ConfigError::Invalid {
            what,
            why: why_whole,
        });
    }
    Ok(duration.as_secs())
}

/// What a policy's quota counts: the draft's quota unit, and what follows for the fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Quota {
    /// Requests per window (the draft's default unit, so no `qu`). `t`, the reset fields and
    /// `Retry-After` come from the decision's times.
    Requests,
    /// Requests in progress at once: `qu="concurrent-requests"`. A slot frees when a request
    /// ends, not at a time, so there is no `t`, no reset field and no `w`; a denial carries
    /// `Retry-After: retry_after` (whole seconds).
    ConcurrentRequests {
        /// The `Retry-After` of a denial, in seconds.
        retry_after: u64,
    },
}

impl Quota {
    /// The `Retry-After` seconds of a denial by `decision`.
    pub(super) fn retry_after(self, decision: Decision) -> u64 {
        match self {
            Quota::Requests => retry_after_seconds(decision),
            Quota::ConcurrentRequests { retry_after } => retry_after,
        }
    }
}

/// The partition key of `key`: 64-bit FNV-1a over what its `Hash` impl writes.
pub(super) fn partition_key<K: Hash>(key: &K) -> u64 {
    struct Fnv1a(u64);
    impl Hasher for Fnv1a {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for &byte in bytes {
                self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    let mut hasher = Fnv1a(0xcbf2_9ce4_8422_2325);
    key.hash(&mut hasher);
    hasher.finish()
}

/// Seconds, rounded up: a client told to come back after them is never early.
pub(super) fn ceil_seconds(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// `Retry-After` for a denial: whole seconds, rounded up, at least 1.
pub(super) fn retry_after_seconds(decision: Decision) -> u64 {
    ceil_seconds(decision.retry_after()).max(1)
}

/// Writes `style`'s fields for a `quota` (with the partition key `pk` when the policy asks for
/// one and it is given), and `Retry-After` on a denial.
pub(super) fn write_fields(
    style: HeaderStyle,
    headers: &mut HeaderMap,
    policy: &Policy,
    (decision, quota): (Decision, Quota),
    pk: Option<u64>,
) {
    let retry_after = (!decision.is_allowed()).then(|| quota.retry_after(decision));
    // Seconds until the quota is whole again: a time for requests per window; none for
    // requests in progress (a slot frees when a request ends).
    // A denial's quota is not whole before the denied request could pass: the reset is never
    // earlier than `Retry-After` (a limiter failing closed reports no reset time at all).
    // An allowed decision without a reset time (a backend failing open, which cannot know the
    // client's state) has none: no `t`, no reset field, rather than "whole again now" (`0`).
    let reset = match quota {
        Quota::Requests if decision.is_allowed() && decision.reset_after().is_zero() => None,
        Quota::Requests => Some(ceil_seconds(decision.reset_after()).max(retry_after.unwrap_or(0))),
        Quota::ConcurrentRequests { .. } => None,
    };
    match style {
        HeaderStyle::Draft11 => {
            let pk = pk.filter(|_| policy.partition_key).map(|pk| {
                let mut param = String::from(";pk=:");
                base64(&pk.to_be_bytes(), &mut param);
                param.push(':');
                param
            });
            let pk = pk.as_deref().unwrap_or("");
            let q = decision.limit().min(MAX_SF_INTEGER);
            let unit = match quota {
                Quota::Requests => "",
                Quota::ConcurrentRequests { .. } => ";qu=\"concurrent-requests\"",
            };
            let policy_item = match policy.window_seconds {
                Some(w) => format!("{};q={q}{unit};w={w}{pk}", policy.quoted),
                None => format!("{};q={q}{unit}{pk}", policy.quoted),
            };
            let r = decision.remaining().min(MAX_SF_INTEGER);
            // On a denial `t` is the `Retry-After` (never earlier than it); without a reset
            // time and allowed, `t` is left out (the draft makes it optional).
            let t = retry_after
                .filter(|_| reset.is_some())
                .or(reset)
                .map(|t| format!(";t={}", t.min(MAX_SF_INTEGER)))
                .unwrap_or_default();
            let state_item = format!("{};r={r}{t}{pk}", policy.quoted);
            append_list_item(headers, RATELIMIT_POLICY, policy_item);
            append_list_item(headers, RATELIMIT, state_item);
        }
        HeaderStyle::Draft06 => {
            headers.insert(RATELIMIT_LIMIT, HeaderValue::from(decision.limit()));
            headers.insert(RATELIMIT_REMAINING, HeaderValue::from(decision.remaining()));
            if let Some(reset) = reset {
                headers.insert(RATELIMIT_RESET, HeaderValue::from(reset));
            }
        }
        HeaderStyle::XRateLimit => {
            headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(decision.limit()));
            let remaining = HeaderValue::from(decision.remaining());
            headers.insert(X_RATELIMIT_REMAINING, remaining);
            if let Some(reset) = reset {
                headers.insert(X_RATELIMIT_RESET, HeaderValue::from(reset));
            }
            if let Some(after) = retry_after {
                headers.insert(X_RATELIMIT_AFTER, HeaderValue::from(after));
            }
        }
        HeaderStyle::None => {}
    }
    if let Some(after) = retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from(after));
    }
}

/// Adds `item` to the structured-field List in `name`: appended to the values already there
/// (every line, in order: several lines are one List, RFC 9110 section 5.3), all on one line,
/// items joined by `", "`; or as the only item.
fn append_list_item(headers: &mut HeaderMap, name: HeaderName, item: String) {
    if !headers.contains_key(&name) {
        // The common case (no inner layer, no application fields): the item as it is.
        if let Ok(value) = HeaderValue::try_from(item) {
            headers.insert(name, value);
        }
        return;
    }
    let mut joined = String::new();
    for existing in headers.get_all(&name) {
        let existing = existing.to_str().map(str::trim).unwrap_or("");
        if !existing.is_empty() {
            joined.push_str(existing);
            joined.push_str(", ");
        }
    }
    joined.push_str(&item);
    // Printable ASCII only (names are checked, the rest are digits and base64): always valid.
    if let Ok(value) = HeaderValue::try_from(joined) {
        headers.insert(name, value);
    }
}

/// Standard base64 with padding (RFC 4648), as a structured-field Byte Sequence spells it.
fn base64(bytes: &[u8], out: &mut String) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in bytes.chunks(3) {
        let word = chunk
            .iter()
            .enumerate()
            .fold(0u32, |w, (i, &b)| w | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(word >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
}

/// Writes the draft -06 `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` headers
/// for `decision` ([`HeaderStyle::Draft06`]), and `Retry-After` (whole seconds, rounded up, at
/// least 1) when it is a denial. Existing values are replaced. For the current draft's fields
/// use [`HeaderStyle::write`].
///
/// ```
/// use floodgate::Decision;
/// use floodgate::middleware::write_headers;
/// let mut headers = http::HeaderMap::new();
/// write_headers(&mut headers, Decision::deny(10, 0, 1_500_000_000, 60_000_000_000));
/// assert_eq!(headers["ratelimit-limit"], "10");
/// assert_eq!(headers["ratelimit-remaining"], "0");
/// assert_eq!(headers["ratelimit-reset"], "60");
/// assert_eq!(headers["retry-after"], "2");
/// ```
pub fn write_headers(headers: &mut HeaderMap, decision: Decision) {
    write_fields(
        HeaderStyle::Draft06,
        headers,
        &Policy::default(),
        (decision, Quota::Requests),
        None,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            let mut out = String::new();
            base64(input.as_bytes(), &mut out);
            assert_eq!(out, expected, "{input:?}");
        }
    }

    #[test]
    fn policy_names_are_escaped() {
        let policy = Policy::new(r#"a "q" \ b"#).unwrap();
        assert_eq!(policy.quoted, r#""a \"q\" \\ b""#);
        assert!(Policy::new("").is_ok());
        let error = Policy::new("x\u{1}").unwrap_err();
        assert_eq!((error.position(), error.bad), (1, '\u{1}'));
    }

    #[test]
    fn huge_values_are_capped_to_structured_field_integers() {
        let mut headers = HeaderMap::new();
        HeaderStyle::Draft11.write(
            &mut headers,
            &Policy::default(),
            Decision::allow(u64::MAX, u64::MAX, u64::MAX),
        );
        assert_eq!(headers[RATELIMIT_POLICY], "\"default\";q=999999999999999");
        assert_eq!(
            headers[RATELIMIT],
            "\"default\";r=999999999999999;t=18446744074"
        );
    }

    /// A denial whose decision has no reset time (a backend failing closed reports 0): the
    /// reset fields must not say the quota is back before `Retry-After`.
    #[test]
    fn a_denial_never_resets_before_retry_after() {
        for style in [HeaderStyle::Draft06, HeaderStyle::XRateLimit] {
            let mut headers = HeaderMap::new();
            style.write(
                &mut headers,
                &Policy::default(),
                Decision::deny(10, 0, 1_500_000_000, 0),
            );
            let reset = match style {
                HeaderStyle::Draft06 => RATELIMIT_RESET,
                _ => X_RATELIMIT_RESET,
            };
            assert_eq!(headers[RETRY_AFTER], "2", "{style:?}");
            assert_eq!(headers[reset], "2", "{style:?}");
        }
    }

    /// An allowed decision without a reset time (a backend failing open) claims none: no `t`,
    /// no reset field, rather than `0` (the quota whole again at once).
    #[test]
    fn an_allowed_decision_without_a_reset_time_claims_none() {
        let fail_open = Decision::allow(10, 9, 0);
        let mut headers = HeaderMap::new();
        HeaderStyle::Draft11.write(&mut headers, &Policy::default(), fail_open);
        assert_eq!(headers[RATELIMIT], "\"default\";r=9");
        for (style, reset) in [
            (HeaderStyle::Draft06, RATELIMIT_RESET),
            (HeaderStyle::XRateLimit, X_RATELIMIT_RESET),
        ] {
            let mut headers = HeaderMap::new();
            style.write(&mut headers, &Policy::default(), fail_open);
            assert!(!headers.contains_key(&reset), "{style:?}: {headers:?}");
            assert!(!headers.contains_key(RETRY_AFTER), "{style:?}");
        }
        // A sub-second reset is still a reset: rounded up to 1.
        let mut headers = HeaderMap::new();
        HeaderStyle::Draft11.write(&mut headers, &Policy::default(), Decision::allow(10, 9, 1));
        assert_eq!(headers[RATELIMIT], "\"default\";r=9;t=1");
    }

    #[test]
    fn fnv1a_is_the_published_function() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; `str`'s Hash writes its bytes then 0xff.
        struct Raw(&'static [u8]);
        impl Hash for Raw {
            fn hash<H: Hasher>(&self, state: &mut H) {
                state.write(self.0);
            }
        }
        assert_eq!(partition_key(&Raw(b"a")), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(partition_key(&Raw(b"")), 0xcbf2_9ce4_8422_2325);
    }
}
