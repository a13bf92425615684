//! Coalescing: decisions made while a call is out go to Redis together, in one script call that
//! decides them in order. Each test builds the queue deterministically: every future is polled
//! once (which sends it, or queues it) before any reply can be read.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use floodgate::backend::{FailureKind, FailurePolicy, Outcome, RequestError};
use floodgate::redis::{RedisAlgorithm, RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{Decision, FixedWindow, Gcra, Rate, SlidingLog, SlidingWindow};

use super::server::{RedisCluster, RedisServer, ScriptCall};

/// Generous: no test may turn into a policy decision on a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(30);
/// A hang guard only: every wait below ends long before it unless something is stuck.
const HANG: Duration = Duration::from_secs(60);
/// An aligned window no test run can straddle: its boundaries are forty years apart (the next
/// in 2049). A test's decisions on one key must see one window: across a boundary the key's
/// count starts again (and a 10-minute window's boundary could fall inside a test's run).
const FORTY_YEARS: Duration = Duration::from_secs(40 * 365 * 86_400);
/// The index of the aligned window of [`FORTY_YEARS`] that the server's clock is in.
fn aligned_index(server: &RedisServer) -> String {
    (server.time_micros() / FORTY_YEARS.as_micros() as u64).to_string()
}

pub(super) type Call = Pin<Box<dyn Future<Output = Result<Outcome, RequestError>> + Send>>;

/// One thread: the connection's task runs only when the test's task waits, so a first poll
/// only sends or queues a request (it cannot also be answered within that poll).
pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn poll_once(call: &mut Call) {
    let mut context = Context::from_waker(Waker::noop());
    assert!(
        matches!(call.as_mut().poll(&mut context), Poll::Pending),
        "a Redis call cannot be answered within its first poll"
    );
}

/// Polls every call once, in order (each is sent, or queued behind the calls out), then runs
/// them all to the end; their outcomes in the same order.
pub(super) async fn all_queued_then_run(mut calls: Vec<Call>) -> Vec<Outcome> {
    for call in &mut calls {
        poll_once(call);
    }
    let tasks: Vec<_> = calls.into_iter().map(tokio::spawn).collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        let outcome = tokio::time::timeout(HANG, task).await.expect("no hang");
        outcomes.push(outcome.unwrap().unwrap());
    }
    outcomes
}

pub(super) fn call<A: RedisAlgorithm>(
    limiter: &Arc<RedisLimiter<A>>,
    key: &'static str,
    n: u32,
) -> Call {
    let limiter = Arc::clone(limiter);
    Box::pin(async move { limiter.try_acquire_outcome(key, n).await })
}

/// Each caller's (key, n) for caller `i` of 128: three keys, 1 to 3 permits.
fn request(i: usize) -> (&'static str, u32) {
    let key = ["a", "b", "c"][i % 3];
    (key, 1 + (i % 4) as u32 / 2 + u32::from(i.is_multiple_of(7)))
}

/// What `limit` gives each request decided one after another on its own key, with no refill:
/// allowed while the permits fit; `remaining` is what is left after (or, denied, before) it.
fn sequential(limit: u64, requests: &[(&'static str, u32)]) -> Vec<(bool, u64)> {
    let mut used = std::collections::HashMap::new();
    requests
        .iter()
        .map(|&(key, n)| {
            let used = used.entry(key).or_insert(0u64);
            if *used + u64::from(n) <= limit {
                *used += u64::from(n);
                (true, limit - *used)
            } else {
                (false, limit - *used)
            }
        })
        .collect()
}

/// 128 concurrent callers on three keys with n of 1 to 3: each gets exactly the decision that
/// sequential calls in its order would have given it (so its own result), the server holds
/// exactly what was granted (`taken`), and all of it took at most `max_calls` script calls
/// (`script_calls` counts them on the server), not 128. Returns the requests and their
/// decisions, in order: caller 0 (key "a") is sent alone, the 127 others go in one batch.
fn exact_in_order<A: RedisAlgorithm>(
    config: RedisConfig,
    name: &str,
    algorithm: A,
    limit: u64,
    script_calls: impl Fn() -> u64,
    taken: impl Fn(&RedisLimiter<A>, &str) -> u64,
    max_calls: u64,
) -> Vec<((&'static str, u32), Decision)> {
    runtime().block_on(async {
        let backend = RedisBackend::connect(config.timeout(TIMEOUT))
            .await
            .unwrap();
        let limiter = Arc::new(
            RedisLimiter::new(&backend, name, algorithm, FailurePolicy::FailClosed).unwrap(),
        );
        // Loads the one-decision script, so that only the batch script may need a retry.
        let warm = limiter.try_acquire_outcome("warm", 1).await.unwrap();
        assert!(warm.failure().is_none(), "{warm:?}");
        let requests: Vec<_> = (0..128).map(request).collect();
        let before = script_calls();
        let calls = requests
            .iter()
            .map(|&(k, n)| call(&limiter, k, n))
            .collect();
        let outcomes = all_queued_then_run(calls).await;
        let made = script_calls() - before;
        let expected = sequential(limit, &requests);
        for (i, (outcome, (allowed, remaining))) in outcomes.iter().zip(&expected).enumerate() {
            assert!(
                outcome.failure().is_none(),
                "{name} caller {i}: {outcome:?}"
            );
            let decision: Decision = outcome.decision();
            assert_eq!(
                (decision.is_allowed(), decision.remaining()),
                (*allowed, *remaining),
                "{name} caller {i} ({:?}) got another caller's result",
                requests[i]
            );
        }
        for key in ["a", "b", "c"] {
            let granted: u64 = requests
                .iter()
                .zip(&outcomes)
                .filter(|((k, _), o)| *k == key && o.decision().is_allowed())
                .map(|((_, n), _)| u64::from(*n))
                .sum();
            assert!(granted <= limit, "{name} key {key}: {granted}");
            assert_eq!(taken(&limiter, key), granted, "{name} key {key}");
        }
        let denied = outcomes
            .iter()
            .filter(|o| !o.decision().is_allowed())
            .count();
        assert!(denied > 0, "{name}: the test must reach the limit");
        assert!(made <= max_calls, "{name}: {made} script calls");
        let decisions = outcomes.iter().map(Outcome::decision);
        requests.into_iter().zip(decisions).collect()
    })
}

/// The decisions on keys "b" and "c", which all went in one batch (the keys' first reads), with
/// `n` and the permits their key had granted before each.
fn batched(decided: &[((&'static str, u32), Decision)]) -> Vec<(u32, u64, Decision)> {
    let mut granted = std::collections::HashMap::new();
    decided
        .iter()
        .filter(|((key, _), _)| *key != "a")
        .map(|&((key, n), decision)| {
            let before: &mut u64 = granted.entry(key).or_default();
            let at = *before;
            if decision.is_allowed() {
                *before += u64::from(n);
            }
            (n, at, decision)
        })
        .collect()
}

/// The integer at `key` on a single server.
fn integer(server: &RedisServer, key: &str) -> u64 {
    server.cli(&["GET", key]).parse().unwrap()
}

/// GCRA at one permit an hour: its TAT is ahead of now by one hour per permit taken, less the
/// (sub-hour) time the test ran.
fn gcra_taken(tat: u64, now: u64) -> u64 {
    (tat - now) / 3_600_000_000 + 1
}

/// On one server: one call sent at once, then one batch (plus a retry when the batch script
/// was not loaded yet), allowing one more.
const SINGLE_MAX_CALLS: u64 = 4;

#[test]
fn a_batch_on_a_fixed_window_decides_exactly_as_sequential_calls() {
    let server = RedisServer::start();
    let decided = exact_in_order(
        RedisConfig::single(server.url()),
        "coalesce-fw",
        FixedWindow::new(40, Duration::from_secs(600)).unwrap(),
        40,
        || server.calls("evalsha"),
        |limiter, key| integer(&server, &limiter.redis_keys(key)[0]),
        SINGLE_MAX_CALLS,
    );
    // Every field, not only allowed and remaining: the batch opened these keys' windows, so
    // each of its decisions announces the whole window (as one call opening it would), a
    // denial as its retry too.
    let window = Duration::from_secs(600);
    for (n, before, decision) in batched(&decided) {
        let expected = if before + u64::from(n) <= 40 {
            Decision::allow(40, 40 - before - u64::from(n), window.as_nanos() as u64)
        } else {
            let window = window.as_nanos() as u64;
            Decision::deny(40, 40 - before, window, window)
        };
        assert_eq!(decision, expected, "n {n} after {before}");
    }
}

#[test]
fn a_batch_on_a_gcra_decides_exactly_as_sequential_calls() {
    let server = RedisServer::start();
    let decided = exact_in_order(
        RedisConfig::single(server.url()),
        "coalesce-gcra",
        Gcra::new(Rate::per_hour(1), 40).unwrap(),
        40,
        || server.calls("evalsha"),
        |limiter, key| {
            let tat = integer(&server, &limiter.redis_keys(key)[0]);
            gcra_taken(tat, server.time_micros())
        },
        SINGLE_MAX_CALLS,
    );
    // Every field: one batch runs at one instant on a full bucket, so after `before` permits
    // its TAT is `before` hours ahead; an allowed decision resets when its own permits have
    // drained too, a denied one may retry when the excess has.
    const HOUR: u64 = 3_600_000_000_000;
    for (n, before, decision) in batched(&decided) {
        let after = before + u64::from(n);
        let expected = if after <= 40 {
            Decision::allow(40, 40 - after, after * HOUR)
        } else {
            Decision::deny(40, 40 - before, (after - 40) * HOUR, before * HOUR)
        };
        assert_eq!(decision, expected, "n {n} after {before}");
    }
}

/// Values Lua's `tonumber` reads as a number but that are not a counter or time the scripts
/// keep: not an integer INCRBY takes ("1.5", " 7", "0x3", "007": INCRBY would raise after the
/// batch's other keys were written), or past Lua's exact integers (1e300, inf: a reply would
/// carry them cast to i64::MIN, from which the client's replay admitted what the script denied).
const NOT_EXACT: [&str; 12] = [
    "not a number",
    "1.5",
    " 7",
    "0x3",
    "007",
    "-0",
    "1e300",
    "-1e300",
    "inf",
    "nan",
    "9223372036854775807",
    "9007199254740992",
];

/// How a test puts something that is not the algorithm's state at a key.
type Store = fn(&RedisServer, &str, &str);

fn set_string(server: &RedisServer, key: &str, value: &str) {
    server.cli(&["SET", key, value]);
}

/// What a key holds, whatever its type, to check it is left as it was.
fn held(server: &RedisServer, key: &str) -> String {
    match server.cli(&["TYPE", key]).as_str() {
        "hash" => server.cli(&["HGETALL", key]),
        "zset" => server.cli(&["ZRANGE", key, "0", "-1", "WITHSCORES"]),
        _ => server.cli(&["GET", key]),
    }
}

/// For each of `values` stored at one key: a decision on that key, alone or in a batch over two
/// keys, fails with the script's error (naming the key) and is never admitted; the decisions on
/// the other key in the same call are decided, in order, as if it were alone, and take exactly
/// the permits they were granted; the bad key is left as it was.
fn a_bad_key_fails_only_its_own_decisions<A: RedisAlgorithm>(
    name: &str,
    algorithm: A,
    store: Store,
    values: &[&str],
    what: &str,
) {
    // The floodgate scripts' own errors name the key; Redis's (WRONGTYPE) do not.
    let names_key = what.contains("does not hold");
    let server = RedisServer::start();
    runtime().block_on(async {
        let backend = RedisBackend::connect(RedisConfig::single(server.url()).timeout(TIMEOUT))
            .await
            .unwrap();
        for (i, value) in values.iter().enumerate() {
            let limiter = Arc::new(
                RedisLimiter::new(
                    &backend,
                    &format!("{name}{i}"),
                    algorithm.clone(),
                    FailurePolicy::FailClosed,
                )
                .unwrap()
                .with_breaker(None),
            );
            let bad = limiter.redis_keys("bad")[0].clone();
            store(&server, &bad, value);
            let before = held(&server, &bad);
            let failed = |outcome: &Outcome| {
                let error = outcome.failure().unwrap_or_else(|| {
                    panic!("{value:?}: the bad key's decision fails: {outcome:?}")
                });
                assert_eq!(error.kind(), FailureKind::Script, "{value:?}: {error}");
                let error = error.to_string();
                assert!(error.contains(what), "{value:?}: {error}");
                assert!(!names_key || error.contains(&bad), "{value:?}: {error}");
                assert!(!outcome.decision().is_allowed(), "{value:?}: fail closed");
            };
            failed(&limiter.try_acquire_outcome("bad", 2).await.unwrap());
            // The first is sent alone; the other five go in one batch over both keys.
            let keys = ["good", "bad", "good", "bad", "good", "good"];
            let calls = keys.iter().map(|&k| call(&limiter, k, 2)).collect();
            let outcomes = all_queued_then_run(calls).await;
            let mut granted = 0;
            for (key, outcome) in keys.iter().zip(&outcomes) {
                if *key == "bad" {
                    failed(outcome);
                } else {
                    assert!(outcome.failure().is_none(), "{value:?}: {outcome:?}");
                    granted += 2;
                    assert!(outcome.decision().is_allowed(), "{value:?}: {outcome:?}");
                    assert_eq!(outcome.decision().remaining(), 10 - granted, "in order");
                }
            }
            // Exactly the permits granted were taken: the last two remain.
            let last = limiter.try_acquire_outcome("good", 2).await.unwrap();
            assert!(last.decision().is_allowed(), "{value:?}: {last:?}");
            assert_eq!(last.decision().remaining(), 0, "{value:?}: {last:?}");
            assert_eq!(held(&server, &bad), before, "{value:?}: left as it was");
        }
    });
}

#[test]
fn a_fixed_window_counter_that_is_not_an_exact_integer_fails_only_its_own_decisions() {
    let window = FixedWindow::new(10, Duration::from_secs(600)).unwrap();
    a_bad_key_fails_only_its_own_decisions(
        "bad-fw",
        window,
        set_string,
        &NOT_EXACT,
        "does not hold a counter",
    );
}

/// A fixed window's count below zero (another client's write; the scripts never write one) was
/// read as permits given back: "-5" admitted 15 in a window of 10, and a batch announced 12
/// remaining of 10. Anchored (a counter) and aligned (the hash's count in the current window).
#[test]
fn a_fixed_window_count_below_zero_fails_only_its_own_decisions() {
    fn aligned_count(server: &RedisServer, key: &str, value: &str) {
        server.cli(&["HSET", key, "i", &aligned_index(server), "c", value]);
    }
    let anchored = FixedWindow::new(10, Duration::from_secs(600)).unwrap();
    let aligned = FixedWindow::aligned(10, FORTY_YEARS).unwrap();
    let what = "does not hold a counter";
    let negative = ["-5", "-1", "-9007199254740991"];
    a_bad_key_fails_only_its_own_decisions("neg-fw", anchored, set_string, &negative, what);
    a_bad_key_fails_only_its_own_decisions("neg-fwa", aligned, aligned_count, &negative, what);
}

#[test]
fn an_aligned_window_batch_fails_only_the_decisions_on_a_key_of_another_type() {
    let window = FixedWindow::aligned(10, FORTY_YEARS).unwrap();
    a_bad_key_fails_only_its_own_decisions(
        "bad-fwa",
        window,
        set_string,
        &["not a hash"],
        "WRONGTYPE",
    );
}

/// The aligned window's hash: a count (in the current window) or a window index that is not an
/// exact integer, or an index whose window ends past 2^53 µs.
#[test]
fn an_aligned_window_count_or_index_that_is_not_an_exact_integer_fails_only_its_own_decisions() {
    fn count(server: &RedisServer, key: &str, value: &str) {
        server.cli(&["HSET", key, "i", &aligned_index(server), "c", value]);
    }
    fn index(server: &RedisServer, key: &str, value: &str) {
        server.cli(&["HSET", key, "i", value, "c", "0"]);
    }
    let window = FixedWindow::aligned(10, FORTY_YEARS).unwrap();
    let what = "does not hold a counter";
    a_bad_key_fails_only_its_own_decisions("bad-fwa-c", window.clone(), count, &NOT_EXACT, what);
    // The window of index 7 (forty years each) ends past 2^53 µs; index 6's within.
    const WINDOW_US: u128 = FORTY_YEARS.as_micros();
    const { assert!(7 * WINDOW_US < 1 << 53 && 8 * WINDOW_US >= 1 << 53) };
    let indices: Vec<&str> = NOT_EXACT.iter().copied().chain(["7"]).collect();
    a_bad_key_fails_only_its_own_decisions("bad-fwa-i", window, index, &indices, what);
}

/// The sliding window's hash (100 s cells, 6 a window): a cell whose count or index is not an
/// exact integer, whose count is below zero (read as permits given back: "-5" admitted 5 past
/// the limit), or whose window ends past 2^53 µs.
#[test]
fn a_sliding_window_cell_that_is_not_an_exact_count_fails_only_its_own_decisions() {
    fn count(server: &RedisServer, key: &str, value: &str) {
        let index = (server.time_micros() / 100_000_000).to_string();
        server.cli(&["HSET", key, &index, value]);
    }
    fn index(server: &RedisServer, key: &str, value: &str) {
        server.cli(&["HSET", key, value, "0"]);
    }
    let window = SlidingWindow::new(10, Duration::from_secs(600), 6).unwrap();
    let what = "does not hold a sliding window";
    let counts: Vec<&str> = NOT_EXACT.iter().copied().chain(["-5"]).collect();
    a_bad_key_fails_only_its_own_decisions("bad-sw-c", window, count, &counts, what);
    // The window of cell 90,071,987 ends past 2^53 µs; 90,071,986's within.
    let indices: Vec<&str> = NOT_EXACT.iter().copied().chain(["90071987"]).collect();
    a_bad_key_fails_only_its_own_decisions("bad-sw-i", window, index, &indices, what);
}

/// The sliding log's sequence (the names of its entries) that is not an exact integer, or whose
/// next names reach 2^53, where Lua's numbers no longer count: from 2^53 - 1, naming two entries
/// never ended, and the server stayed busy in a script it could not kill (it had written). And
/// a log whose newest entry's score is not an exact integer or leaves the window past 2^53 µs
/// (inf, 1e300: a denial announced the quota whole at once, or in 584 years).
#[test]
fn a_sliding_log_sequence_or_score_that_is_not_exact_fails_only_its_own_decisions() {
    fn sequence(server: &RedisServer, key: &str, value: &str) {
        server.cli(&["SET", &format!("{key}:seq"), value]);
    }
    fn score(server: &RedisServer, key: &str, value: &str) {
        server.cli(&["ZADD", key, value, "m"]);
    }
    let log = SlidingLog::new(10, Duration::from_secs(600)).unwrap();
    let what = "does not hold a sliding log";
    let sequences: Vec<&str> = NOT_EXACT
        .iter()
        .copied()
        .chain(["9007199254740991"])
        .collect();
    a_bad_key_fails_only_its_own_decisions("bad-sl-s", log, sequence, &sequences, what);
    let scores = [
        "inf",
        "1e300",
        "9007199254740992",
        "100000000000000000",
        "1.5",
    ];
    a_bad_key_fails_only_its_own_decisions("bad-sl-z", log, score, &scores, what);
}

#[test]
fn a_gcra_time_that_is_not_an_exact_integer_fails_only_its_own_decisions() {
    let gcra = Gcra::new(Rate::per_hour(1), 10).unwrap();
    a_bad_key_fails_only_its_own_decisions(
        "bad-gcra",
        gcra,
        set_string,
        &NOT_EXACT,
        "does not hold a time",
    );
}

#[test]
fn a_batch_on_a_sliding_log_decides_exactly_as_sequential_calls() {
    let server = RedisServer::start();
    exact_in_order(
        RedisConfig::single(server.url()),
        "coalesce-log",
        SlidingLog::new(40, Duration::from_secs(600)).unwrap(),
        40,
        || server.calls("evalsha"),
        |limiter, key| {
            let log = &limiter.redis_keys(key)[0];
            server.cli(&["ZCARD", log]).parse().unwrap()
        },
        SINGLE_MAX_CALLS,
    );
}

/// A sliding log whose entries are scored after the server's now (its clock stepped back 30 s
/// since they were added) is full until the server's clock passes their score + the window, and
/// each denial says so exactly, on the server's clock: one call (the first, sent at once) and
/// the batch the others are queued into. Then the clock is moved on by the shortest wait
/// announced (the entries are moved back by it, which is the same to the script): the same
/// request is admitted, as `retry_after` promises.
#[test]
fn a_sliding_log_ahead_of_a_clock_stepped_back_announces_the_exact_wait() {
    let server = RedisServer::start();
    let window = Duration::from_secs(60);
    let window_us = window.as_micros() as u64;
    let runtime = runtime();
    runtime.block_on(async {
        let backend = RedisBackend::connect(RedisConfig::single(server.url()).timeout(TIMEOUT))
            .await
            .unwrap();
        // No deny cache: the last request must reach the script.
        let log = Arc::new(
            RedisLimiter::new(
                &backend,
                "stepped",
                SlidingLog::new(2, window).unwrap(),
                FailurePolicy::FailClosed,
            )
            .unwrap()
            .with_deny_cache(None)
            .unwrap(),
        );
        // Two entries 30 s ahead of the server's clock: the log is full until score + window.
        let score = server.time_micros() + 30_000_000;
        let ahead = score.to_string();
        let key = &log.redis_keys("k")[0];
        let members = [format!("{ahead}:1"), format!("{ahead}:2")];
        server.cli(&["ZADD", key, &ahead, &members[0], &ahead, &members[1]]);
        let before = server.time_micros();
        let outcomes =
            all_queued_then_run((0..8).map(|i| call(&log, "k", 1 + i % 2)).collect()).await;
        let after = server.time_micros();
        let calls = server.calls("evalsha");
        assert!(
            calls <= SINGLE_MAX_CALLS,
            "8 decisions in {calls} calls: not batched"
        );
        // Each script's now lies in [before, after]: the wait it announces, score + window -
        // now, in [score + window - after, score + window - before] (clamped: the window).
        let (earliest, latest) = (score + window_us - after, score + window_us - before);
        let mut shortest = u64::MAX;
        for outcome in &outcomes {
            let decision = outcome.decision();
            assert!(outcome.failure().is_none(), "{outcome:?}");
            assert!(!decision.is_allowed(), "{decision:?}");
            for wait in [decision.retry_after(), decision.reset_after()] {
                let wait = wait.as_micros() as u64;
                assert!(
                    (earliest..=latest).contains(&wait),
                    "{wait} us, not score + window - now in {earliest}..={latest}: {decision:?}"
                );
            }
            shortest = shortest.min(decision.retry_after().as_micros() as u64);
        }
        // The clock moved on by the shortest wait announced (that decision's now + retry_after,
        // or later): the entries are out of the window and the largest request fits.
        let moved = (score - shortest).to_string();
        server.cli(&["ZADD", key, "XX", &moved, &members[0], &moved, &members[1]]);
        let retried = log.try_acquire_outcome("k", 2).await.unwrap();
        assert!(retried.failure().is_none(), "{retried:?}");
        assert!(retried.decision().is_allowed(), "{retried:?}");
    });
}

/// The sliding log's work on the server grows with `n` and the limit: a batch touches at most
/// as many sorted-set entries as one call at the per-call cap (2 × 4,096: a full log trimmed,
/// 4,096 added), however many decisions wait. Limit 1,024 and `n` = 1,024 (2,048 entries each)
/// on 64 distinct keys: every script call holds at most 4 decisions, and some hold 4.
#[test]
fn a_batch_of_sliding_log_decisions_touches_no_more_entries_than_one_capped_call() {
    const LIMIT: u32 = 1_024;
    let server = RedisServer::start();
    let keys: Vec<String> = runtime().block_on(async {
        let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
        let backend = RedisBackend::connect(config).await.unwrap();
        let log = SlidingLog::new(LIMIT, Duration::from_secs(600)).unwrap();
        let limiter =
            Arc::new(RedisLimiter::new(&backend, "bound", log, FailurePolicy::FailClosed).unwrap());
        assert!(limiter.try_acquire("warm", 1).await.unwrap().is_allowed());
        server.log_script_calls();
        let keys: Vec<&'static str> = (0..64)
            .map(|i| &*Box::leak(format!("k{i}").into_boxed_str()))
            .collect();
        let calls = keys.iter().map(|key| call(&limiter, key, LIMIT)).collect();
        for outcome in all_queued_then_run(calls).await {
            assert!(outcome.failure().is_none(), "{outcome:?}");
            assert!(outcome.decision().is_allowed(), "{outcome:?}");
        }
        keys.iter()
            .map(|k| limiter.redis_keys(k)[0].clone())
            .collect()
    });
    let calls = server.script_calls();
    // Two keys per limiter key (the log and its sequence), each key once per call.
    let decisions: Vec<usize> = calls.iter().map(|c| c.numkeys / 2).collect();
    let entries = |d: usize| d as u64 * 2 * u64::from(LIMIT);
    assert!(
        decisions.iter().all(|&d| entries(d) <= 2 * 4_096),
        "decisions per script call: {decisions:?}"
    );
    assert_eq!(
        decisions.iter().max(),
        Some(&4),
        "still batched: {decisions:?}"
    );
    for key in &keys {
        assert!(
            calls.iter().any(|c| c.keys.contains(key)),
            "{key} never reached the server"
        );
    }
}

#[test]
fn a_batch_on_a_sliding_window_decides_exactly_as_sequential_calls() {
    let server = RedisServer::start();
    exact_in_order(
        RedisConfig::single(server.url()),
        "coalesce-sw",
        // 100 s cells: the run may cross one cell boundary, never the 600 s window.
        SlidingWindow::new(40, Duration::from_secs(600), 6).unwrap(),
        40,
        || server.calls("evalsha"),
        |limiter, key| {
            let cells = server.cli(&["HVALS", &limiter.redis_keys(key)[0]]);
            cells
                .lines()
                .map(|c| c.trim().parse::<u64>().unwrap())
                .sum()
        },
        SINGLE_MAX_CALLS,
    );
}

#[test]
fn a_batch_on_an_aligned_window_decides_exactly_as_sequential_calls() {
    let server = RedisServer::start();
    let window = FORTY_YEARS;
    let decided = exact_in_order(
        RedisConfig::single(server.url()),
        "coalesce-aligned",
        FixedWindow::aligned(40, window).unwrap(),
        40,
        || server.calls("evalsha"),
        |limiter, key| {
            let count = server.cli(&["HGET", &limiter.redis_keys(key)[0], "c"]);
            count.parse().unwrap()
        },
        SINGLE_MAX_CALLS,
    );
    // Every field: one batch runs at one instant, so each of its decisions announces the same
    // window end (a denial as its retry too), within the window.
    let batched = batched(&decided);
    let reset = batched[0].2.reset_after();
    assert!(!reset.is_zero() && reset <= window, "{reset:?}");
    for (n, before, decision) in batched {
        let expected = if before + u64::from(n) <= 40 {
            Decision::allow(40, 40 - before - u64::from(n), reset.as_nanos() as u64)
        } else {
            let reset = reset.as_nanos() as u64;
            Decision::deny(40, 40 - before, reset, reset)
        };
        assert_eq!(decision, expected, "n {n} after {before}");
    }
}

#[test]
fn on_a_cluster_a_batch_is_split_by_slot_and_stays_exact() {
    let cluster = RedisCluster::start();
    // The value at `key`, from the master that owns it (the others answer MOVED).
    let read = |key: &str| -> u64 {
        cluster
            .nodes
            .iter()
            .find_map(|n| n.cli_unchecked(&["GET", key]).parse().ok())
            .expect("one master holds the key")
    };
    let calls = || cluster.nodes.iter().map(|n| n.calls("evalsha")).sum();
    // One call sent at once, then one call per key (three hash tags), each maybe retried once
    // on a master that had not loaded the script yet; one more allowed.
    let max_calls = 2 + 3 * 2 + 1;
    exact_in_order(
        RedisConfig::cluster(cluster.urls()),
        "coalesce-cluster-fw",
        FixedWindow::new(40, Duration::from_secs(600)).unwrap(),
        40,
        calls,
        |limiter, key| read(&limiter.redis_keys(key)[0]),
        max_calls,
    );
    exact_in_order(
        RedisConfig::cluster(cluster.urls()),
        "coalesce-cluster-gcra",
        Gcra::new(Rate::per_hour(1), 40).unwrap(),
        40,
        calls,
        |limiter, key| {
            let tat = read(&limiter.redis_keys(key)[0]);
            gcra_taken(tat, cluster.nodes[0].time_micros())
        },
        max_calls,
    );
}

/// A fixed window of 1,000 permits per 10 minutes named `name` on `server`, fail-closed, on a
/// backend connected from the current runtime.
async fn thousand_per_window(
    server: &RedisServer,
    name: &'static str,
) -> Arc<RedisLimiter<FixedWindow>> {
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = RedisBackend::connect(config).await.unwrap();
    let window = FixedWindow::new(1_000, Duration::from_secs(600)).unwrap();
    Arc::new(RedisLimiter::new(&backend, name, window, FailurePolicy::FailClosed).unwrap())
}

/// Polls `call` once, so that it is sent (or queued), and keeps it.
fn started(mut call: Call) -> Call {
    poll_once(&mut call);
    call
}

#[test]
fn dropped_senders_hand_the_queue_on_and_dropped_waiters_send_nothing() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let limiter = thousand_per_window(&server, "handoff").await;
        let key = limiter.redis_keys("k")[0].clone();
        assert!(limiter.try_acquire("k", 1).await.unwrap().is_allowed());
        server.freeze();
        // Distinct permit counts tell which calls the server ran: 2 is sent at once (the first
        // turn); 4 queues behind it, and takes the second turn for a flusher, which sends it.
        let first = started(call(&limiter, "k", 2));
        let second = started(call(&limiter, "k", 4));
        // Let the flusher take 4, and the connection write both calls to the frozen server.
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
        // Both turns out: 8 and 16 stay queued. A waiter gives up, then the sender is cancelled
        // while its call is out: the queue must still be sent, by a task no caller owns,
        // without the dropped waiter. (A waiter dropped after its decision was taken may
        // legitimately consume, as a call dropped while out.)
        let queued = started(call(&limiter, "k", 8));
        let dropped = started(call(&limiter, "k", 16));
        drop(dropped);
        drop(first);
        let second = tokio::spawn(second);
        let queued = tokio::spawn(queued);
        server.thaw();
        for call in [second, queued] {
            let outcome = tokio::time::timeout(HANG, call)
                .await
                .expect("the queued calls are not stranded")
                .unwrap()
                .unwrap();
            assert!(outcome.failure().is_none(), "{outcome:?}");
            assert!(outcome.decision().is_allowed());
        }
        // Exactly: the queued calls' 4 and 8, and the sender's 2 if its call reached the server
        // before it was dropped (the documented cost of dropping a call that was sent); the
        // dropped waiter's 16 never.
        let taken = integer(&server, &key) - 1;
        assert!(
            taken == 4 + 8 || taken == 4 + 8 + 2,
            "taken {taken}: the queued calls' 4 and 8 (and maybe the sender's 2), no waiter's 16"
        );
        // And the limiter works on: the next call is sent at once and answered.
        assert!(limiter.try_acquire("k", 1).await.unwrap().is_allowed());
    });
}

/// A batch's callers hand each other their answers, each the next as it takes its own: a caller
/// that is never polled again (its task stalled, or its runtime left idle) must not hold up the
/// answers of the callers after it in the batch (the flusher hands those out itself).
#[test]
fn a_caller_never_polled_again_does_not_hold_up_the_rest_of_its_batch() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let limiter = thousand_per_window(&server, "relay").await;
        let key = limiter.redis_keys("k")[0].clone();
        // 2 is sent at once; 4, 8 and 16 queue behind it, in that order, and go in one batch
        // when its call comes back. 4 is first in the batch, and its future is never polled
        // again.
        let sender = tokio::spawn(started(call(&limiter, "k", 2)));
        let stalled = started(call(&limiter, "k", 4));
        let rest: Vec<_> = [8, 16]
            .map(|n| tokio::spawn(started(call(&limiter, "k", n))))
            .into();
        for task in std::iter::once(sender).chain(rest) {
            let outcome = tokio::time::timeout(HANG, task)
                .await
                .expect("answered although the batch's first caller never runs again")
                .unwrap()
                .unwrap();
            assert!(outcome.failure().is_none(), "{outcome:?}");
            assert!(outcome.decision().is_allowed());
        }
        // The stalled caller's decision was taken with the batch (as a call dropped while out).
        assert_eq!(integer(&server, &key), 2 + 4 + 8 + 16);
        drop(stalled); // its answer, unread, goes with it
        assert!(limiter.try_acquire("k", 1).await.unwrap().is_allowed());
    });
}

/// A batch's callers hand each other their answers; one caller's own code, run after its
/// answer, must not hold up the answers of the others while a worker is idle. Two workers: the
/// first of the batch to have its answer then spins (its "request handler") until the others
/// have theirs. Were the next caller woken into the spinner's worker's LIFO slot (which the
/// idle worker cannot steal) and left there, they would wait until the hang bound.
#[test]
fn a_callers_own_code_after_its_answer_does_not_hold_up_the_rest_of_its_batch() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    const QUEUED: usize = 7;
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let limiter = thousand_per_window(&server, "relay").await;
        let key = limiter.redis_keys("k")[0].clone();
        // The server holds every reply back (its pause ends by itself), so the first call is
        // still out while the others queue behind it: they go in one batch when it is back.
        server.cli(&["CLIENT", "PAUSE", "1000", "ALL"]);
        let sender = tokio::spawn(started(call(&limiter, "k", 1)));
        let queued: Vec<Call> = (0..QUEUED)
            .map(|_| started(call(&limiter, "k", 1)))
            .collect();
        let spinning = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = queued
            .into_iter()
            .map(|call| {
                let (spinning, answered) = (Arc::clone(&spinning), Arc::clone(&answered));
                tokio::spawn(async move {
                    let outcome = call.await;
                    // The first answered spins until the others are (a hang bound only).
                    let all_answered = match spinning.swap(true, Ordering::SeqCst) {
                        false => {
                            let bound = std::time::Instant::now() + HANG;
                            while answered.load(Ordering::SeqCst) < QUEUED - 1
                                && std::time::Instant::now() < bound
                            {
                                std::hint::spin_loop();
                            }
                            Some(answered.load(Ordering::SeqCst) == QUEUED - 1)
                        }
                        true => {
                            answered.fetch_add(1, Ordering::SeqCst);
                            None
                        }
                    };
                    (outcome, all_answered)
                })
            })
            .collect();
        let sender = tokio::time::timeout(HANG, sender).await.expect("no hang");
        let mut outcomes = vec![sender.unwrap()];
        let mut spinners = Vec::new();
        for task in tasks {
            let (outcome, all_answered) = tokio::time::timeout(HANG * 2, task)
                .await
                .expect("no hang")
                .unwrap();
            outcomes.push(outcome);
            spinners.extend(all_answered);
        }
        for outcome in outcomes {
            let outcome = outcome.unwrap();
            assert!(outcome.failure().is_none(), "{outcome:?}");
            assert!(outcome.decision().is_allowed());
        }
        assert_eq!(
            spinners,
            [true],
            "the others were answered while the first ran its own code"
        );
        assert_eq!(integer(&server, &key), 1 + QUEUED as u64);
    });
}

/// Flushers run on the runtime that built the connection. When it has shut down, nothing can
/// send the queue any more: a decision queued behind a call out fails at once, with a
/// connection error, when that call's turn is handed on (not after its 30 s timeout).
#[test]
fn queued_decisions_fail_at_once_when_the_connections_runtime_has_shut_down() {
    let server = RedisServer::start();
    let connecting = runtime();
    let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
    let backend = connecting.block_on(RedisBackend::connect(config)).unwrap();
    let window = FixedWindow::new(1_000, Duration::from_secs(600)).unwrap();
    let limiter =
        Arc::new(RedisLimiter::new(&backend, "gone", window, FailurePolicy::FailClosed).unwrap());
    assert!(
        connecting
            .block_on(limiter.try_acquire("k", 1))
            .unwrap()
            .is_allowed()
    );
    let callers = runtime();
    let (mut first, mut queued) = (call(&limiter, "k", 1), call(&limiter, "k", 1));
    // The first call holds the turn (out, or waiting on the connection's runtime), the second
    // queues behind it.
    callers.block_on(async {
        poll_once(&mut first);
        poll_once(&mut queued);
    });
    drop(connecting);
    // The sender is dropped: its turn goes to a flusher spawned on the shut-down runtime.
    drop(first);
    let outcome = callers
        .block_on(async { tokio::time::timeout(HANG, queued).await })
        .expect("no hang")
        .unwrap();
    let failure = outcome.failure().expect("failed");
    assert_eq!(failure.kind(), FailureKind::Connection, "{failure}");
    assert!(failure.to_string().contains("shut down"), "{failure}");
    assert!(!outcome.decision().is_allowed(), "fail closed");
}

#[test]
fn each_decision_in_a_batch_keeps_its_own_deadline() {
    // Different n's (sent as a list of them) and one n for all (sent once).
    let window = FixedWindow::new(1_000, Duration::from_secs(600)).unwrap();
    for ns in [[4, 8, 16], [1, 1, 1]] {
        each_decision_keeps_its_own_deadline(window.clone(), ns, integer_held, tally_batch);
    }
}

/// The same for the sliding window's batch (its one-decision script run per decision,
/// `eval_batch`): its deadlines go as distances too, and the one past its deadline takes
/// nothing.
#[test]
fn each_decision_in_a_sliding_window_batch_keeps_its_own_deadline() {
    let window = SlidingWindow::new(1_000, Duration::from_secs(600), 60).unwrap();
    for ns in [[4, 8, 16], [1, 1, 1]] {
        each_decision_keeps_its_own_deadline(window, ns, cells_held, each_batch::<1>);
    }
}

/// The same for the sliding log's batch.
#[test]
fn each_decision_in_a_sliding_log_batch_keeps_its_own_deadline() {
    let log = SlidingLog::new(1_000, Duration::from_secs(600)).unwrap();
    for ns in [[4, 8, 16], [1, 1, 1]] {
        each_decision_keeps_its_own_deadline(log, ns, entries_held, each_batch::<2>);
    }
}

/// A one-decision fixed-window (anchored, aligned) or GCRA call sends the three arguments its
/// script reads (the configuration's two, `n`), then its deadline: no unused fourth argument
/// (Redis makes an object of each, about 860 instructions). The script reads the deadline where
/// it is sent: run again with a deadline long past, it refuses (allowed = 2) and takes nothing.
#[test]
fn a_one_decision_call_sends_only_what_its_script_reads() {
    let server = RedisServer::start();
    let window = Duration::from_secs(600);
    runtime().block_on(async {
        let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
        let backend = RedisBackend::connect(config).await.unwrap();
        let anchored = FixedWindow::new(1_000, window).unwrap();
        sends_only_what_its_script_reads(&server, &backend, "anchored", anchored).await;
        let aligned = FixedWindow::aligned(1_000, FORTY_YEARS).unwrap();
        sends_only_what_its_script_reads(&server, &backend, "aligned", aligned).await;
        let gcra = Gcra::new(Rate::per_hour(1), 1_000).unwrap();
        sends_only_what_its_script_reads(&server, &backend, "gcra", gcra).await;
        let log = SlidingLog::new(1_000, window).unwrap();
        sends_only_what_its_script_reads(&server, &backend, "sliding log", log).await;
    });
}

async fn sends_only_what_its_script_reads<A: RedisAlgorithm>(
    server: &RedisServer,
    backend: &RedisBackend,
    name: &'static str,
    algorithm: A,
) {
    let limiter = RedisLimiter::new(backend, name, algorithm, FailurePolicy::FailClosed).unwrap();
    let keys = limiter.redis_keys("k");
    server.log_script_calls();
    assert!(limiter.try_acquire("k", 3).await.unwrap().is_allowed());
    let calls = server.script_calls();
    let call = calls.last().expect("a script call");
    assert_eq!(call.keys, keys, "{name}: {calls:?}");
    assert_eq!(
        call.args.len(),
        4,
        "{name}: the configuration's two, n, the deadline: {calls:?}"
    );
    assert_eq!(call.args[2], "3", "{name}: n: {calls:?}");
    let deadline: u64 = call.args[3].parse().unwrap();
    assert!(
        deadline > server.time_micros(),
        "{name}: the deadline: {calls:?}"
    );
    let dump = || {
        keys.iter()
            .map(|key| server.cli(&["DUMP", key]))
            .collect::<Vec<_>>()
    };
    let before = dump();
    let count = keys.len().to_string();
    let mut words: Vec<&str> = vec!["EVALSHA", &call.sha, &count];
    words.extend(keys.iter().map(String::as_str));
    words.extend(call.args[..3].iter().map(String::as_str));
    words.push("1");
    // One line (a script that answers in a string) or one field a line (an array).
    let reply = server
        .cli(&words)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        reply.starts_with("2 0 0 0 0 "),
        "{name}: refused past its deadline: {reply}"
    );
    assert_eq!(dump(), before, "{name}: took nothing");
}

/// Three decisions of `algorithm` (1,000 permits a window) queued behind a call to a frozen
/// server, asking `[second, short, long]` permits; `short` gives up after 300 ms, the others
/// wait out the freeze. `held` reads the permits the key's Redis keys hold; `batch` reads a
/// batch call of the algorithm's format (`None` for any other call).
fn each_decision_keeps_its_own_deadline<A: RedisAlgorithm>(
    algorithm: A,
    [second_n, short_n, long_n]: [u32; 3],
    held: fn(&RedisServer, &[String]) -> u64,
    batch: fn(&ScriptCall) -> Option<BatchCall>,
) {
    let server = RedisServer::start();
    runtime().block_on(async {
        let config = RedisConfig::single(server.url()).timeout(TIMEOUT);
        let backend = RedisBackend::connect(config).await.unwrap();
        let limiter =
            RedisLimiter::new(&backend, "deadlines", algorithm, FailurePolicy::FailClosed);
        let limiter = Arc::new(limiter.unwrap());
        let keys = limiter.redis_keys("k");
        assert!(limiter.try_acquire("k", 1).await.unwrap().is_allowed());
        server.log_script_calls();
        server.freeze();
        let first = started(call(&limiter, "k", 2));
        // Queued behind it: two with the backend's 30 s, one that gives up after 300 ms.
        let second = started(call(&limiter, "k", second_n));
        let short = {
            let limiter = Arc::clone(&limiter);
            let mut short: Call = Box::pin(async move {
                let decision = limiter
                    .try_acquire_for("k", short_n, Duration::from_millis(300))
                    .await?;
                Ok(Outcome::from_backend(decision))
            });
            poll_once(&mut short);
            short
        };
        let long = started(call(&limiter, "k", long_n));
        // The sender is cancelled: a flusher takes the queue (the three decisions, in one call)
        // and sends it to the frozen server. It takes it in its first poll, which comes before
        // the short caller's task can see its deadline (one thread, tasks run in the order
        // they were spawned, the flusher first), however slow the machine: so the short
        // decision is sent, not skipped by the client. The server's log checks it below.
        drop(first);
        let second = tokio::spawn(second);
        let short = tokio::spawn(short);
        let long = tokio::spawn(long);
        let short = tokio::time::timeout(HANG, short)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(!short.decision().is_allowed(), "gave up at its deadline");
        // Cut short by its caller's own 300 ms (issue 18): denied, no Redis failure.
        assert_eq!(short.decision().retry_after(), TIMEOUT);
        assert_eq!(limiter.failures().total(), 0);
        // Only now does the server run the batch: past the short decision's deadline on the
        // server's clock, so the script refuses it, taking nothing, and decides the other.
        server.thaw();
        for call in [second, long] {
            let outcome = tokio::time::timeout(HANG, call)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            assert!(outcome.failure().is_none(), "{outcome:?}");
            assert!(outcome.decision().is_allowed());
        }
        // The dropped first call (2 permits) may have run too, once the server was thawed.
        let taken = u64::from(second_n + long_n);
        let held = held(&server, &keys) - 1;
        assert!(
            held == taken || held == taken + 2,
            "the decision past its deadline took nothing: {held} held, {taken} taken"
        );
    });
    // The short decision reached the server in the batch (so it was refused there, on the
    // server's clock, not skipped by the client).
    let calls = server.script_calls();
    let found = calls
        .iter()
        .find_map(|c| batch(c).filter(|b| b.ns == [second_n, short_n, long_n].map(u64::from)));
    let Some(found) = found else {
        panic!("no batch of {second_n}, {short_n}, {long_n} on the server: {calls:?}")
    };
    // Its deadlines go as distances from the earliest (the short one's), plus 1: the short
    // decision's is 1, the others' about 7/8 of their 30 s more (each deadline is sent an
    // eighth of its budget early), not deadlines of 16 digits.
    assert!(found.earliest > 1_000_000_000_000_000, "{found:?}");
    assert_eq!(found.distances[1], 1, "the short decision's: {found:?}");
    for distance in [found.distances[0], found.distances[2]] {
        assert!(
            (20_000_000..=30_000_000).contains(&distance),
            "about 26 s from the earliest: {found:?}"
        );
    }
    if second_n == short_n && short_n == long_n {
        assert_eq!(found.ns_sent, 1, "one n for all is sent once: {found:?}");
    }
}

/// What a batch call sent: each decision's `n`, how many numbers its list of `n`s held, the
/// earliest deadline on the server's clock, and each decision's distance from it plus 1.
#[derive(Debug)]
struct BatchCall {
    ns: Vec<u64>,
    ns_sent: usize,
    earliest: u64,
    distances: Vec<u64>,
}

/// The numbers of a list argument, separated by spaces.
fn numbers(arg: &str) -> Option<Vec<u64>> {
    arg.split(' ').map(|n| n.parse().ok()).collect()
}

/// `ns`, one number when all `decisions` ask the same, else one per decision.
fn each_n(ns: Vec<u64>, decisions: usize) -> Option<Vec<u64>> {
    match ns.len() {
        1 => Some(vec![ns[0]; decisions]),
        len if len == decisions => Some(ns),
        _ => None,
    }
}

/// A batch call in the tally format (fixed windows, GCRA; `None` for a one-decision call):
/// the two shared arguments, the number of decisions `D`, the earliest deadline, the `n`s (one
/// number when all `D` ask the same, else `D`), the `D` distances (and the `D` key indices
/// when the call has more than one key).
fn tally_batch(call: &ScriptCall) -> Option<BatchCall> {
    let decisions: usize = call.args.get(2)?.parse().ok()?;
    let arguments = if call.numkeys > 1 { 7 } else { 6 };
    if decisions == 0 || call.args.len() != arguments {
        return None;
    }
    let distances = numbers(&call.args[5])?;
    let sent = numbers(&call.args[4])?;
    (distances.len() == decisions).then_some(())?;
    Some(BatchCall {
        ns_sent: sent.len(),
        ns: each_n(sent, decisions)?,
        earliest: call.args[3].parse().ok()?,
        distances,
    })
}

/// A batch call made from a one-decision script of `PER` Redis keys a limiter key (sliding
/// window 1, sliding log 2; `None` for any other call): `per`, the four shared arguments, the
/// slot of `n` + 1, the `n`s (one number when all ask the same, else one per decision), the
/// earliest deadline, the distances (one per decision), and the key indices so when the call
/// has more than one limiter key.
fn each_batch<const PER: usize>(call: &ScriptCall) -> Option<BatchCall> {
    let arguments = if call.numkeys > PER { 10 } else { 9 };
    if call.args.len() != arguments || call.args[0] != PER.to_string() {
        return None;
    }
    let distances = numbers(&call.args[8])?;
    let sent = numbers(&call.args[6])?;
    Some(BatchCall {
        ns_sent: sent.len(),
        ns: each_n(sent, distances.len())?,
        earliest: call.args[7].parse().ok()?,
        distances,
    })
}

/// The permits a fixed window's counter holds.
fn integer_held(server: &RedisServer, keys: &[String]) -> u64 {
    integer(server, &keys[0])
}

/// The permits a sliding window's cells hold.
fn cells_held(server: &RedisServer, keys: &[String]) -> u64 {
    let cells = server.cli(&["HVALS", &keys[0]]);
    cells
        .lines()
        .map(|c| c.trim().parse::<u64>().unwrap())
        .sum()
}

/// The permits a sliding log holds (one entry each).
fn entries_held(server: &RedisServer, keys: &[String]) -> u64 {
    server.cli(&["ZCARD", &keys[0]]).parse().unwrap()
}

/// A sliding-log batch (its one-decision script run per decision, `eval_batch`) sent to a frozen
/// server: each of its callers gives up at its own timeout (bounded here only generously) with a
/// timeout failure, and the resumed server, past their deadlines, takes nothing.
#[test]
fn a_sliding_log_batch_to_a_frozen_server_times_out() {
    // Different n's (sent as a list of them) and one n for all (sent once).
    sliding_log_batch_to_a_frozen_server_times_out([2, 3]);
    sliding_log_batch_to_a_frozen_server_times_out([2, 2]);
}

/// Two decisions of `ns` permits queued behind a call to a frozen server.
fn sliding_log_batch_to_a_frozen_server_times_out(ns: [u32; 2]) {
    // Long enough that the warm-up and the call after the thaw are answered within it on a
    // loaded machine (at 300 ms either could time out and fail the test).
    const SHORT: Duration = Duration::from_secs(2);
    let server = RedisServer::start();
    let runtime = runtime();
    let limiter = runtime.block_on(async {
        let config = RedisConfig::single(server.url()).timeout(SHORT);
        let backend = RedisBackend::connect(config).await.unwrap();
        let log = SlidingLog::new(100, Duration::from_secs(600)).unwrap();
        let limiter = RedisLimiter::new(&backend, "frozen-log", log, FailurePolicy::FailClosed)
            .unwrap()
            .with_breaker(None);
        assert!(limiter.try_acquire("k", 1).await.unwrap().is_allowed()); // loads the script
        Arc::new(limiter)
    });
    server.log_script_calls();
    server.freeze();
    runtime.block_on(async {
        let asked = std::time::Instant::now();
        // 1 is sent at once; 2 and 3 queue behind it. The sender is cancelled: a flusher takes
        // the queue and sends it, in one batch call, to the frozen server.
        let first = started(call(&limiter, "k", 1));
        let queued = ns.map(|n| started(call(&limiter, "k", n)));
        drop(first);
        let queued = queued.map(tokio::spawn);
        for call in queued {
            let outcome = tokio::time::timeout(HANG, call)
                .await
                .expect("a frozen batch outlived the hang bound")
                .unwrap()
                .unwrap();
            super::deadline::assert_timed_out(&outcome, asked.elapsed(), SHORT);
        }
        assert_eq!(limiter.failures().timeouts, 2);
    });
    server.thaw();
    // The server ran what queued up, past every deadline: the next decision finds the warm-up's
    // entry only (the first call, if it reached the server, was refused there too).
    let next = runtime
        .block_on(async { tokio::time::timeout(HANG, limiter.try_acquire("k", 1)).await })
        .expect("no hang")
        .unwrap();
    assert_eq!(next.remaining(), 100 - 2, "the late requests took nothing");
    // The batch did reach the server: a sliding-log batch call of `ns`, one n sent once when
    // both ask the same.
    let calls = server.script_calls();
    let batch = calls
        .iter()
        .find_map(|c| each_batch::<2>(c).filter(|b| b.ns == ns.map(u64::from)));
    let Some(batch) = batch else {
        panic!("no batch of {ns:?} on the server: {calls:?}")
    };
    if ns[0] == ns[1] {
        assert_eq!(batch.ns_sent, 1, "one n for all is sent once: {batch:?}");
    }
}

/// The batch loop itself (the sliding window's batch script, `sliding_window_batch.lua`, and the
/// definition it is tested against, `each_batch.lua` after the one-decision script), by
/// `redis-cli`, one key of 100 permits: no deadline at all (earliest
/// 0); deadlines mixed with none, the earliest past (the past one refused and taking nothing,
/// the one without decided, the later one decided: the earliest is added back); the earliest
/// not yet passed (none read); a single decision past its deadline; and an error inside a
/// batch (a key of the wrong type: that decision reports it, the others are decided).
#[test]
fn the_batch_loop_reads_each_deadline_only_once_the_earliest_has_passed() {
    const TIME: &str = "local t = redis.call('TIME')";
    let exact = include_str!("../../src/redis/exact.lua");
    let one = format!(
        "{exact}{}",
        include_str!("../../src/redis/sliding_window.lua")
    );
    assert_eq!(one.matches(TIME).count(), 1);
    let body = one.replacen(TIME, "", 1);
    let each = include_str!("each_batch.lua");
    let reference = format!("local function decide(KEYS, ARGV, t)\n{body}\nend\n{each}");
    let batch = super::batch_scripts::batch_source(include_str!(
        "../../src/redis/sliding_window_batch.lua"
    ));
    for source in [reference, batch] {
        the_batch_loop_reads_each_deadline_only_once_the_earliest_has_passed_in(&source);
    }
}

fn the_batch_loop_reads_each_deadline_only_once_the_earliest_has_passed_in(source: &str) {
    let server = RedisServer::start();
    let sha = server.cli(&["SCRIPT", "LOAD", source]);
    let (key, wrong) = ("{t:k}:sw", "{t:w}:sw");
    server.cli(&["SET", wrong, "a string"]);
    // ARGV: per, limit, cell (60 s), cells, n (replaced), n's slot, the n's, the earliest, the
    // distances, then each decision's key index when there are two keys. Replies each
    // decision's `allowed` (3: an error), and the errors.
    let batch = |keys: &[&str], ns: &str, earliest: u64, distances: &str, indices: &str| {
        let (count, earliest) = (keys.len().to_string(), earliest.to_string());
        let mut command = vec!["EVALSHA", sha.as_str(), count.as_str()];
        command.extend(keys);
        command.extend([
            "1", "100", "60000000", "10", "0", "4", ns, &earliest, distances,
        ]);
        if !indices.is_empty() {
            command.push(indices);
        }
        let reply = server.cli(&command);
        let lines: Vec<String> = reply.lines().map(str::to_owned).collect();
        let decisions = (lines.len() - 1) / 5;
        let allowed: Vec<String> = (0..decisions).map(|d| lines[1 + d * 5].clone()).collect();
        (allowed, lines[1 + decisions * 5..].to_vec())
    };
    let held = || -> u64 {
        let values = server.cli(&["HVALS", key]);
        values.lines().map(|v| v.parse::<u64>().unwrap()).sum()
    };
    let s = |words: &[&str]| words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    // No deadline at all.
    let (allowed, errors) = batch(&[key], "1 2 4", 0, "0 0 0", "");
    assert_eq!((allowed, errors), (s(&["1", "1", "1"]), s(&[])));
    assert_eq!(held(), 7);
    // The earliest a second past; one without; one 120 s after the earliest.
    let past = server.time_micros() - 1_000_000;
    let (allowed, _) = batch(&[key], "1 2 4", past, "1 0 120000001", "");
    assert_eq!(
        allowed,
        s(&["2", "1", "1"]),
        "past: refused; none; later: decided"
    );
    assert_eq!(held(), 13, "the refused one took nothing");
    // The earliest not passed: no deadline is read (the second's, 0 + 1 - 1, would be past).
    let future = server.time_micros() + 60_000_000;
    let (allowed, _) = batch(&[key], "1", future, "1 1", "");
    assert_eq!(allowed, s(&["1", "1"]));
    assert_eq!(held(), 15);
    // A single decision past its deadline.
    let past = server.time_micros() - 1_000_000;
    let (allowed, _) = batch(&[key], "5", past, "1", "");
    assert_eq!(allowed, s(&["2"]));
    assert_eq!(held(), 15, "took nothing");
    // An error inside a batch: the wrong key's decision reports it, the others are decided.
    let (allowed, errors) = batch(&[key, wrong], "1", 0, "0 0 0", "1 2 1");
    assert_eq!(allowed, s(&["1", "3", "1"]));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].contains("WRONGTYPE"), "{errors:?}");
    assert_eq!(held(), 17);
}
