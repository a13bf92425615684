//! A batch whose decisions all ask the same `n` of one key, none past its deadline (the common
//! coalesced batch: one hot key): the batch scripts decide it without a step per decision
//! (`tally.lua`'s `uniform()`), and it must decide and write exactly what the same calls one
//! after another would.

use std::sync::Arc;
use std::time::Duration;

use floodgate::backend::{FailurePolicy, Outcome};
use floodgate::redis::{RedisAlgorithm, RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{FixedWindow, Gcra, Rate};

use super::coalesce::{all_queued_then_run, call, runtime};
use super::server::RedisServer;

/// Generous: no test may turn into a policy decision on a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(30);

/// What a limit of `limit` with `before` permits taken gives `callers` decisions of `n` each,
/// decided one after another: (allowed, remaining after, or before a denial).
fn sequential(limit: u64, before: u64, n: u64, callers: usize) -> Vec<(bool, u64)> {
    let mut used = before;
    (0..callers)
        .map(|_| {
            if used + n <= limit {
                used += n;
                (true, limit - used)
            } else {
                (false, limit.saturating_sub(used))
            }
        })
        .collect()
}

/// `held` permits already held at the key, `before` more taken one call at a time, then `callers` decisions of `n` on the same key
/// queued at once behind a call on another key (sent alone), so that they all go in batches of
/// one key and one `n`:
/// each gets what sequential calls give it, and the server holds what was granted (`taken`).
/// Returns the outcomes, after checking that a batch of one `n` on one key was sent.
fn one_n_on_one_key<A: RedisAlgorithm>(
    server: &RedisServer,
    name: &str,
    algorithm: A,
    limit: u64,
    held: u64,
    (before, n, callers): (u32, u32, usize),
    taken: impl Fn(&str) -> u64,
) -> Vec<Outcome> {
    runtime().block_on(async {
        let backend = RedisBackend::connect(RedisConfig::single(server.url()).timeout(TIMEOUT))
            .await
            .unwrap();
        let limiter = Arc::new(
            RedisLimiter::new(&backend, name, algorithm, FailurePolicy::FailClosed).unwrap(),
        );
        let key = limiter.redis_keys("k")[0].clone();
        for _ in 0..before {
            let outcome = limiter.try_acquire_outcome("k", 1).await.unwrap();
            assert!(outcome.decision().is_allowed(), "{name}: {outcome:?}");
        }
        server.log_script_calls();
        let lead = std::iter::once(call(&limiter, "lead", 1));
        let calls = lead.chain((0..callers).map(|_| call(&limiter, "k", n)));
        let mut outcomes = all_queued_then_run(calls.collect()).await;
        let lead = outcomes.remove(0);
        assert!(lead.decision().is_allowed(), "{name}: {lead:?}");
        let expected = sequential(limit, held + u64::from(before), u64::from(n), callers);
        let mut granted = held + u64::from(before);
        for (i, (outcome, &(allowed, remaining))) in outcomes.iter().zip(&expected).enumerate() {
            assert!(
                outcome.failure().is_none(),
                "{name} caller {i}: {outcome:?}"
            );
            let decision = outcome.decision();
            assert_eq!(
                (decision.is_allowed(), decision.remaining()),
                (allowed, remaining),
                "{name} caller {i} of {callers} (n {n}, {before} taken before)"
            );
            if allowed {
                granted += u64::from(n);
            }
        }
        assert_eq!(
            taken(&key),
            granted,
            "{name}: the server holds what was granted"
        );
        // Every decision on the key went in a batch of one key and one n: the tally format's
        // six arguments, the fifth the one n.
        // (A call the server refused with NOSCRIPT is logged, then sent again as it was.)
        let mut on_key: Vec<_> = server
            .script_calls()
            .into_iter()
            .filter(|c| c.keys.contains(&key))
            .collect();
        on_key.dedup_by(|a, b| (&a.sha, &a.args) == (&b.sha, &b.args));
        assert!(
            on_key.iter().all(|c| c.keys == [key.clone()]
                && c.args.len() == 6
                && c.args[4] == n.to_string()),
            "{name}: {on_key:?}"
        );
        let decided: usize = on_key
            .iter()
            .map(|c| c.args[2].parse::<usize>().unwrap())
            .sum();
        assert_eq!(decided, callers, "{name}: {on_key:?}");
        outcomes
    })
}

fn integer(server: &RedisServer, key: &str) -> u64 {
    server.cli(&["GET", key]).parse().unwrap()
}

/// Cases (permits taken before, n, callers): the batch fills the key and its last decisions
/// are denied (room left over, and none), the batch fits whole, and every decision is denied.
const CASES: [(u32, u32, usize); 5] = [(5, 2, 30), (0, 3, 20), (1, 7, 10), (0, 1, 16), (40, 1, 8)];

#[test]
fn an_anchored_window_batch_of_one_n_decides_as_sequential_calls() {
    let server = RedisServer::start();
    for (i, case) in CASES.into_iter().enumerate() {
        let name = format!("uniform-fw-{i}");
        let window = FixedWindow::new(40, Duration::from_secs(600)).unwrap();
        let outcomes = one_n_on_one_key(&server, &name, window, 40, 0, case, |key| {
            integer(&server, key)
        });
        // The window opened by the first decision (or before): every decision announces it
        // within the 600 s, and the key keeps a TTL.
        for outcome in outcomes {
            let reset = outcome.decision().reset_after();
            assert!(
                !reset.is_zero() && reset <= Duration::from_secs(600),
                "{reset:?}"
            );
        }
        let key = format!("{{{name}:k}}:fw");
        let ttl: i64 = server.cli(&["PTTL", &key]).parse().unwrap();
        assert!(ttl > 0 && ttl <= 600_000, "{name}: TTL {ttl}");
    }
}

#[test]
fn an_aligned_window_batch_of_one_n_decides_as_sequential_calls() {
    let server = RedisServer::start();
    // Forty years, aligned to the server's clock: the next boundary is in 2049.
    let forty_years = Duration::from_secs(40 * 365 * 86_400);
    for (i, case) in CASES.into_iter().enumerate() {
        let name = format!("uniform-fwa-{i}");
        let window = FixedWindow::aligned(40, forty_years).unwrap();
        one_n_on_one_key(&server, &name, window, 40, 0, case, |key| {
            server.cli(&["HGET", key, "c"]).parse().unwrap()
        });
        let key = format!("{{{name}:k}}:fwa");
        let ttl: i64 = server.cli(&["PTTL", &key]).parse().unwrap();
        assert!(ttl > 0, "{name}: TTL {ttl}");
    }
}

#[test]
fn a_gcra_batch_of_one_n_decides_as_sequential_calls() {
    let server = RedisServer::start();
    for (i, case) in CASES.into_iter().enumerate() {
        let name = format!("uniform-gcra-{i}");
        // One permit an hour: nothing refills during the test. The TAT is ahead of now by an
        // hour per permit taken, less the (sub-hour) time the test ran.
        let gcra = Gcra::new(Rate::per_hour(1), 40).unwrap();
        one_n_on_one_key(&server, &name, gcra, 40, 0, case, |key| {
            let tat = integer(&server, key);
            (tat - server.time_micros()) / 3_600_000_000 + 1
        });
    }
}

/// A batch of one n whose decisions are all denied on a counter found without a TTL (written
/// by hand, or by an old client) writes nothing but the TTL repair, as one call would.
#[test]
fn a_denied_batch_of_one_n_only_repairs_a_missing_ttl() {
    let server = RedisServer::start();
    let window = FixedWindow::new(40, Duration::from_secs(600)).unwrap();
    let key = "{uniform-repair:k}:fw";
    server.cli(&["SET", key, "40"]);
    let outcomes = one_n_on_one_key(
        &server,
        "uniform-repair",
        window,
        40,
        40,
        (0, 1, 8),
        |key| integer(&server, key),
    );
    assert!(outcomes.iter().all(|o| !o.decision().is_allowed()));
    assert_eq!(integer(&server, key), 40, "a denial takes nothing");
    let ttl: i64 = server.cli(&["PTTL", key]).parse().unwrap();
    assert!(ttl > 0 && ttl <= 600_000, "repaired: TTL {ttl}");
}

/// The same for GCRA: a TAT found without a TTL and far enough ahead that every decision of
/// the batch is denied keeps its value and gets the TTL one call would give it (the time until
/// the TAT, in whole ms rounded up).
#[test]
fn a_denied_gcra_batch_of_one_n_only_repairs_a_missing_ttl() {
    let server = RedisServer::start();
    // One permit an hour, 40 at once: a TAT 40 hours ahead leaves no room.
    let gcra = Gcra::new(Rate::per_hour(1), 40).unwrap();
    let key = "{uniform-gcra-repair:k}:gcra";
    let ahead = 40 * 3_600_000_000;
    let tat = server.time_micros() + ahead;
    server.cli(&["SET", key, &tat.to_string()]);
    assert_eq!(server.cli(&["PTTL", key]), "-1");
    let outcomes = one_n_on_one_key(
        &server,
        "uniform-gcra-repair",
        gcra,
        40,
        40,
        (0, 1, 8),
        |key| {
            let stored = integer(&server, key);
            (stored - server.time_micros()) / 3_600_000_000 + 1
        },
    );
    assert!(outcomes.iter().all(|o| !o.decision().is_allowed()));
    assert_eq!(integer(&server, key), tat, "a denial takes nothing");
    let ttl: i64 = server.cli(&["PTTL", key]).parse().unwrap();
    assert!(
        ttl > 0 && ttl as u64 <= ahead / 1000 + 1,
        "repaired: TTL {ttl}"
    );
}
