//! A 3-master Redis Cluster: the same limiters, unchanged, with every limiter key's Redis keys
//! in one slot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::backend::{BreakerConfig, BreakerState, FailureKind, FailurePolicy, Outcome};
use floodgate::redis::{LeasedKey, RedisBackend, RedisConfig, RedisLimiter};
use floodgate::{FixedWindow, ManualClock};
use tokio::task::JoinHandle;

use super::server::{RedisCluster, RedisServer};
use super::{Acquire, backend, for_each_algorithm, hammer};

#[test]
fn limiters_run_unchanged_on_a_three_master_cluster() {
    let cluster = RedisCluster::start();
    let backend = backend(RedisConfig::cluster(cluster.urls()));
    for_each_algorithm(60, |what, make| {
        let limiter: Arc<dyn Acquire> = Arc::from(make(&backend, "cluster"));
        // Exact under 8 threads, on whichever master owns the key.
        assert_eq!(hammer(Arc::clone(&limiter), "k", 8, 15), 60, "{what}");

        // All Redis keys of one limiter key hash to one slot, and live on one node.
        let keys = limiter.redis_keys("k");
        let slots: Vec<String> = keys
            .iter()
            .map(|k| cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", k]))
            .collect();
        assert!(
            slots.iter().all(|s| *s == slots[0]),
            "{what}: {keys:?} in slots {slots:?}"
        );
        for key in &keys {
            assert_eq!(cluster.holders(key), 1, "{what}: {key}");
        }

        // Many keys spread over every master; each decision still runs in one slot.
        for i in 0..30 {
            let outcome = limiter.try_acquire(&format!("spread-{i}"), 1);
            assert!(
                outcome.failure().is_none(),
                "{what}: {:?}",
                outcome.failure()
            );
            assert!(outcome.decision().is_allowed());
        }
        for node in &cluster.nodes {
            let keys: u64 = node.cli(&["DBSIZE"]).parse().unwrap();
            assert!(keys > 0, "{what}: node {} holds no key", node.port);
        }

        // SCRIPT FLUSH on every master: the next decisions reload the script where needed.
        for node in &cluster.nodes {
            assert_eq!(node.cli(&["SCRIPT", "FLUSH"]), "OK");
        }
        for i in 0..30 {
            let outcome = limiter.try_acquire(&format!("spread-{i}"), 1);
            assert!(
                outcome.failure().is_none(),
                "{what} after flush: {:?}",
                outcome.failure()
            );
        }
        assert!(
            !limiter.try_acquire("k", 1).decision().is_allowed(),
            "{what}"
        );
    });
}

/// A 3-master cluster whose live masters keep answering for their slots while another master
/// is frozen or killed: without `cluster-require-full-coverage no` the whole cluster refuses
/// queries once the frozen master is marked failed.
fn partitionable_cluster() -> RedisCluster {
    let cluster = RedisCluster::start();
    for node in &cluster.nodes {
        node.cli(&["CONFIG", "SET", "cluster-require-full-coverage", "no"]);
    }
    cluster
}

/// An eagerly connected backend on `cluster` whose calls time out after `timeout`.
fn cluster_backend(cluster: &RedisCluster, timeout: Duration) -> RedisBackend {
    RedisBackend::blocking_connect(RedisConfig::cluster(cluster.urls()).timeout(timeout)).unwrap()
}

/// A fixed window of `limit` per minute named `name`, failing closed, with the default breaker,
/// on a `ManualClock` that never moves (a breaker's back-off never passes).
fn fixed_window(
    backend: &RedisBackend,
    name: &str,
    limit: u32,
) -> RedisLimiter<FixedWindow, ManualClock> {
    RedisLimiter::with_clock(
        backend,
        name,
        FixedWindow::new(limit, Duration::from_secs(60)).unwrap(),
        FailurePolicy::FailClosed,
        ManualClock::new(),
    )
    .unwrap()
}

/// One blocking decision of one permit for `key`; a call still running after a minute (far past
/// any backend timeout here) fails the test as hung.
fn call(limiter: &RedisLimiter<FixedWindow, ManualClock>, key: &str) -> Outcome {
    let started = Instant::now();
    let outcome = limiter.blocking_try_acquire_outcome(key, 1).unwrap();
    assert!(started.elapsed() < Duration::from_secs(60), "hung: {key}");
    outcome
}

/// `outcome` was decided by Redis, not by the failure policy; `context` leads the message.
#[track_caller]
fn assert_decided(outcome: &Outcome, context: impl std::fmt::Display) {
    assert!(
        outcome.failure().is_none(),
        "{context}: decided by the policy: {:?}",
        outcome.failure()
    );
}

/// `outcome` was decided by the policy after a failure of `kind`.
#[track_caller]
fn assert_failed(outcome: &Outcome, kind: FailureKind) {
    assert_eq!(outcome.failure().map(|e| e.kind()), Some(kind));
}

/// One limiter key whose Redis keys live on `node`: the node that owns a key's slot answers
/// for it without a `MOVED` redirect.
fn key_on(
    cluster: &RedisCluster,
    limiter: &RedisLimiter<FixedWindow, ManualClock>,
    node: usize,
    prefix: &str,
) -> String {
    (0..1_000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|key| {
            !cluster.nodes[node]
                .cli_unchecked(&["GET", &limiter.redis_keys(key)[0]])
                .contains("MOVED")
        })
        .unwrap_or_else(|| panic!("no key on node {node}"))
}

/// One master frozen (SIGSTOP): its keys time out, decided by the policy, while keys on the
/// other masters are still decided by Redis. With a breaker, the frozen master's failures open
/// its own breaker, not the live masters'.
#[test]
fn a_frozen_master_fails_only_its_own_keys() {
    let cluster = partitionable_cluster();
    // Long enough that a live master's answer never misses it on a loaded machine.
    let backend = cluster_backend(&cluster, Duration::from_secs(2));
    let plain = fixed_window(&backend, "frozen", 1_000).with_breaker(None);
    let breaker = BreakerConfig::new(1, Duration::from_secs(5), Duration::from_secs(60)).unwrap();
    let guarded = fixed_window(&backend, "broken", 1_000).with_breaker(Some(breaker));
    let on_frozen = key_on(&cluster, &plain, 0, "a");
    let on_live = key_on(&cluster, &plain, 1, "b");
    let guarded_on_frozen = key_on(&cluster, &guarded, 0, "a");
    let guarded_on_live = key_on(&cluster, &guarded, 1, "b");
    for (limiter, key) in [
        (&plain, &on_frozen),
        (&plain, &on_live),
        (&guarded, &guarded_on_frozen),
        (&guarded, &guarded_on_live),
    ] {
        assert_decided(&call(limiter, key), key);
    }
    cluster.nodes[0].freeze();
    let outcome = call(&plain, &on_frozen);
    assert!(!outcome.decision().is_allowed());
    assert_failed(&outcome, FailureKind::Timeout);
    for i in 0..3 {
        let outcome = call(&plain, &on_live);
        assert_decided(&outcome, format_args!("call {i}: a live master's key"));
        assert!(outcome.decision().is_allowed());
    }

    // One failure (the breaker's threshold here) on the frozen master opens its breaker: its
    // key is short-circuited, the live master's is still decided by Redis.
    assert_failed(&call(&guarded, &guarded_on_frozen), FailureKind::Timeout);
    assert_failed(
        &call(&guarded, &guarded_on_frozen),
        FailureKind::CircuitOpen,
    );
    let outcome = call(&guarded, &guarded_on_live);
    assert_decided(&outcome, "the breaker is per master");
    cluster.nodes[0].thaw();

    // Killed, not frozen: the same (its keys fail by the policy, the others' are decided). The
    // dead master's calls wait out the timeout while redis-rs retries it; the error's kind is
    // not asserted, as it is no promise (the node it names is:
    // `a_failed_call_names_the_master_that_owns_its_key`).
    let mut cluster = cluster;
    cluster.nodes[0].kill();
    let outcome = call(&plain, &on_frozen);
    assert!(!outcome.decision().is_allowed());
    assert!(outcome.failure().is_some(), "decided by a dead master?");
    for i in 0..3 {
        assert_decided(
            &call(&plain, &on_live),
            format_args!("call {i} after the kill: a live master's key"),
        );
    }
}

/// A limiter key's slot moved to another master mid-run (`CLUSTER SETSLOT` and `MIGRATE`, as a
/// reshard does): the next decisions follow the `MOVED` redirect to the new owner, with the
/// count moved along, so the limit stays exact.
#[test]
fn a_slot_moved_to_another_master_keeps_its_count() {
    let cluster = RedisCluster::start();
    let backend = super::backend(RedisConfig::cluster(cluster.urls()));
    let limiter = fixed_window(&backend, "moved", 10);
    let key = key_on(&cluster, &limiter, 0, "m");
    for i in 0..4 {
        let outcome = call(&limiter, &key);
        assert_decided(&outcome, format_args!("call {i}"));
        assert!(outcome.decision().is_allowed());
    }
    let (from, to) = (&cluster.nodes[0], &cluster.nodes[1]);
    let redis_keys = limiter.redis_keys(&key);
    let slot = from.cli(&["CLUSTER", "KEYSLOT", &redis_keys[0]]);
    let id = |node: &super::server::RedisServer| node.cli(&["CLUSTER", "MYID"]);
    let (from_id, to_id) = (id(from), id(to));
    assert_eq!(
        to.cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
        "OK"
    );
    assert_eq!(
        from.cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
        "OK"
    );
    let port = to.port.to_string();
    let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    migrate.extend(redis_keys.iter().map(String::as_str));
    assert_eq!(from.cli(&migrate), "OK");
    for node in &cluster.nodes {
        assert_eq!(
            node.cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]),
            "OK"
        );
    }
    assert_eq!(cluster.holders(&redis_keys[0]), 1);
    assert!(
        !to.cli_unchecked(&["GET", &redis_keys[0]]).contains("MOVED"),
        "the slot did not move"
    );
    let admitted = (0..10)
        .filter(|i| {
            let outcome = call(&limiter, &key);
            assert_decided(&outcome, format_args!("call {i} after the move"));
            outcome.decision().is_allowed()
        })
        .count();
    assert_eq!(admitted, 6);
}

/// `RedisConfig::cluster` pointed at a standalone server (cluster mode off): a configuration
/// error naming the server and saying it is not in cluster mode, at eager connect (it read as a
/// "script error"); a lazy backend's calls go to that server.
#[test]
fn a_cluster_config_at_a_standalone_server_says_it_is_not_in_cluster_mode() {
    let server = RedisServer::start();
    let config = RedisConfig::cluster([server.url()]).timeout(Duration::from_secs(10));
    let started = Instant::now();
    let error = RedisBackend::blocking_connect(config.clone()).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(60), "hung");
    assert_eq!(error.kind(), FailureKind::Other, "{error}");
    assert_eq!(error.server_address(), Some(server.url().as_str()));
    assert!(
        error.to_string().contains("not in cluster mode")
            && error.to_string().contains("RedisConfig::single"),
        "{error}"
    );

    let lazy = RedisBackend::blocking_connect(config.lazy()).unwrap();
    let limiter = fixed_window(&lazy, "standalone", 10).with_breaker(None);
    // A lazy cluster connection whose `CLUSTER SLOTS` failed knows no slot's owner, and redis-rs
    // sends each call to a node it is connected to: this one, which decides it as a
    // single-server backend would (the script loaded there on first use).
    for i in 0..2 {
        let outcome = call(&limiter, "k");
        assert_decided(&outcome, format_args!("call {i}"));
        assert!(outcome.decision().is_allowed());
    }
    assert_eq!(server.calls("evalsha"), 3, "NOSCRIPT, then two decisions");
}

/// The opposite mistake: `RedisConfig::single` pointed at a cluster node. Eager connect refuses
/// it (`INFO cluster`: `cluster_enabled:1`), saying to use `RedisConfig::cluster`; a lazy
/// backend's calls for keys on other masters fail saying which node owns the key's slot (each
/// read as a "script error", `Moved: 10096 127.0.0.1:43527`).
#[test]
fn a_single_config_at_a_cluster_node_says_to_use_the_cluster_config() {
    let cluster = RedisCluster::start();
    let url = cluster.nodes[0].url();
    let config = RedisConfig::single(url.clone()).timeout(Duration::from_secs(10));
    let error = RedisBackend::blocking_connect(config.clone()).unwrap_err();
    assert_eq!(error.kind(), FailureKind::Other, "{error}");
    assert_eq!(error.server_address(), Some(url.as_str()));
    assert!(
        error.to_string().contains("Redis Cluster node")
            && error.to_string().contains("RedisConfig::cluster"),
        "{error}"
    );

    let lazy = RedisBackend::blocking_connect(config.lazy()).unwrap();
    let limiter = fixed_window(&lazy, "moved", 10).with_breaker(None);
    let key = key_on(&cluster, &limiter, 1, "elsewhere");
    let owner = format!("127.0.0.1:{}", cluster.nodes[1].port);
    let outcome = call(&limiter, &key);
    let failure = outcome.failure().expect("decided by the policy");
    assert_eq!(failure.kind(), FailureKind::Other, "{failure}");
    assert!(
        failure.to_string().contains(&owner)
            && failure.to_string().contains("RedisConfig::cluster"),
        "{failure}"
    );
    // A key on the node itself is decided there.
    let home = key_on(&cluster, &limiter, 0, "home");
    assert_decided(&call(&limiter, &home), &home);
}

/// A call's error names the master the failing request went to (the owner of its key's slot),
/// not the configured node list: frozen (SIGSTOP, a timeout) and then killed.
#[test]
fn a_failed_call_names_the_master_that_owns_its_key() {
    let mut cluster = partitionable_cluster();
    let backend = cluster_backend(&cluster, Duration::from_secs(2));
    let limiter = fixed_window(&backend, "named", 1_000).with_breaker(None);
    // The node given first is not the one that fails: the list's head is no answer.
    let key = key_on(&cluster, &limiter, 2, "n");
    let owner = cluster.nodes[2].url();
    assert_decided(&call(&limiter, &key), &key);

    cluster.nodes[2].freeze();
    let outcome = call(&limiter, &key);
    let failure = outcome.failure().expect("decided by the policy");
    assert_eq!(failure.kind(), FailureKind::Timeout, "{failure}");
    assert_eq!(failure.server_address(), Some(owner.as_str()), "{failure}");
    cluster.nodes[2].thaw();

    cluster.nodes[2].kill();
    let outcome = call(&limiter, &key);
    let failure = outcome.failure().expect("decided by a dead master?");
    assert_eq!(failure.server_address(), Some(owner.as_str()), "{failure}");
}

/// A breaker per master: with one master frozen, its keys' calls open its breaker after
/// `failures` timeouts even though calls on the two healthy masters succeed in between (a
/// shared run of failures was reset by each success, so every call for the frozen master's key
/// waited out the timeout), then are short-circuited, decided by the policy; the healthy
/// masters' keys are decided by Redis throughout (a shared breaker opened for them too). Once
/// thawed, the probe (due by the limiter's manual clock) closes the frozen master's breaker.
#[test]
fn a_frozen_masters_breaker_opens_for_its_own_keys_only_and_its_probe_closes_it() {
    const FAILURES: u32 = 2;
    const ROUNDS: usize = 10;
    let open_for = Duration::from_secs(5);
    let cluster = partitionable_cluster();
    let timeout = Duration::from_secs(2);
    let backend = cluster_backend(&cluster, timeout);
    let clock = ManualClock::new();
    let breaker = BreakerConfig::new(FAILURES, open_for, Duration::from_secs(60)).unwrap();
    let limiter = RedisLimiter::with_clock(
        &backend,
        "per-node",
        FixedWindow::new(100_000, Duration::from_secs(60)).unwrap(),
        FailurePolicy::FailClosed,
        clock.clone(),
    )
    .unwrap()
    .with_breaker(Some(breaker));
    let on_frozen = key_on(&cluster, &limiter, 0, "f");
    let on_live = [
        key_on(&cluster, &limiter, 1, "l"),
        key_on(&cluster, &limiter, 2, "m"),
    ];
    for key in std::iter::once(&on_frozen).chain(&on_live) {
        assert_decided(&call(&limiter, key), key);
    }
    cluster.nodes[0].freeze();
    // Mixed traffic: each round one call for the frozen master's key, then one for each live
    // master's key.
    let started = Instant::now();
    let mut frozen_kinds = Vec::new();
    let mut live_decided = 0;
    for round in 0..ROUNDS {
        let outcome = call(&limiter, &on_frozen);
        assert!(
            !outcome.decision().is_allowed(),
            "round {round}: fail closed"
        );
        frozen_kinds.push(outcome.failure().map(|e| e.kind()));
        for key in &on_live {
            let outcome = call(&limiter, key);
            assert_decided(&outcome, format_args!("round {round}: a live master's key"));
            assert!(outcome.decision().is_allowed());
            live_decided += 1;
        }
    }
    let elapsed = started.elapsed();
    // A figure for the report, not asserted (no timed assertions in tests).
    eprintln!(
        "frozen master: {live_decided} live-master decisions in {elapsed:?} ({:.1}/s) with a frozen-master call before each pair",
        f64::from(live_decided) / elapsed.as_secs_f64()
    );
    let mut expected = vec![Some(FailureKind::Timeout); FAILURES as usize];
    expected.resize(ROUNDS, Some(FailureKind::CircuitOpen));
    assert_eq!(frozen_kinds, expected, "the frozen master's calls");
    let counts = limiter.failures();
    assert_eq!(
        counts.timeouts,
        u64::from(FAILURES),
        "each failure counted once"
    );
    assert_eq!(counts.short_circuited, (ROUNDS - FAILURES as usize) as u64);
    assert_eq!(counts.errors, 0);
    let breakers = limiter.breaker().unwrap();
    let frozen = breakers
        .get(&cluster.nodes[0].url())
        .expect("the frozen master's breaker");
    assert_eq!(frozen.state(), BreakerState::Open);
    for node in &cluster.nodes[1..] {
        let live = breakers.get(&node.url()).expect("a live master's breaker");
        assert_eq!(live.state(), BreakerState::Closed, "{}", node.url());
    }
    assert_eq!(breakers.state(), BreakerState::Open);
    assert_eq!(breakers.short_circuited(), counts.short_circuited);

    cluster.nodes[0].thaw();
    // The probe is due once the back-off passed on the limiter's clock. redis-rs may still be
    // reconnecting to the thawed master: a failed probe backs off again (doubling), so each
    // try moves the clock past the longest back-off; a hang bound, not a timing.
    clock.advance(open_for);
    let mut tries = 0;
    loop {
        let outcome = call(&limiter, &on_frozen);
        if outcome.failure().is_none() {
            break;
        }
        tries += 1;
        assert!(
            tries < 20,
            "the probe never closed the breaker: {:?}",
            outcome.failure()
        );
        clock.advance(Duration::from_secs(60));
    }
    assert_eq!(frozen.state(), BreakerState::Closed);
    assert_eq!(breakers.state(), BreakerState::Closed);
}

/// Issue 18 on a cluster: a try cut short by its caller's own budget is the caller's (a plain
/// denial, counted nowhere) only while the master that owns its key answers, whatever the
/// other masters do. One master frozen, another answering a call before each try: the frozen
/// master's tries of 20 ms are denied only until a backend timeout has passed since that
/// master's last reply; then fail-open admits them, each counted as a timeout and not told to
/// the breaker. The same tries on the live master's key stay Redis's to decide. Before, the
/// last reply was kept per backend: the live master's replies kept every cut on the frozen
/// master's key a plain denial, until the hang bound.
#[test]
fn a_try_cut_short_on_a_frozen_masters_key_is_the_policys_while_other_masters_answer() {
    // A wall-clock guard against a hang (never a speed check).
    const HANG_BOUND: Duration = Duration::from_secs(60);
    const CUT: Duration = Duration::from_millis(20);
    let cluster = partitionable_cluster();
    // Long enough that a live master's answer never misses it on a loaded machine.
    let timeout = Duration::from_secs(2);
    let backend = cluster_backend(&cluster, timeout);
    let breaker = BreakerConfig::new(1, Duration::from_secs(5), Duration::from_secs(60)).unwrap();
    let limiter = RedisLimiter::with_clock(
        &backend,
        "cut-node",
        FixedWindow::new(100_000, Duration::from_secs(3600)).unwrap(),
        FailurePolicy::FailOpen,
        ManualClock::new(),
    )
    .unwrap()
    .with_breaker(Some(breaker));
    let on_frozen = key_on(&cluster, &limiter, 0, "f");
    let on_live = key_on(&cluster, &limiter, 1, "l");
    assert_decided(&call(&limiter, &on_live), &on_live);
    // The frozen master's last reply comes after this instant.
    let asked = Instant::now();
    assert_decided(&call(&limiter, &on_frozen), &on_frozen);
    cluster.nodes[0].freeze();
    let mut denied = 0;
    loop {
        // The other masters keep answering: a call on the live master's key before each try.
        let outcome = call(&limiter, &on_live);
        assert_decided(
            &outcome,
            format_args!("after {denied} denials: the live master"),
        );
        let d = limiter
            .blocking_try_acquire_for(&on_frozen, 1, CUT)
            .unwrap();
        if d.is_allowed() {
            break;
        }
        // Within the backend's timeout of the frozen master's last reply: the caller's cut.
        assert_eq!(d.retry_after(), timeout, "{d:?}");
        assert_eq!(limiter.failures().total(), 0, "{d:?}");
        denied += 1;
        assert!(
            asked.elapsed() < HANG_BOUND,
            "{denied} tries cut short on the frozen master's key, none decided by the policy \
             while the live master answered"
        );
    }
    assert!(
        asked.elapsed() >= timeout,
        "admitted after {:?}, within the frozen master's timeout",
        asked.elapsed()
    );
    let failures = limiter.failures();
    assert_eq!(
        (failures.timeouts, failures.total()),
        (1, 1),
        "{failures:?}"
    );
    // The next tries likewise, each counted, the live master answering between them.
    for i in 0..3 {
        assert_decided(&call(&limiter, &on_live), format_args!("live, round {i}"));
        let d = limiter
            .blocking_try_acquire_for(&on_frozen, 1, CUT)
            .unwrap();
        assert!(d.is_allowed(), "round {i}: {d:?}");
    }
    assert_eq!(limiter.failures().timeouts, 4);
    // The live master's key, under a budget shorter than the backend's timeout: Redis decides
    // (the fail-open policy would admit too, but would count it). On a loaded machine the
    // answer may miss the budget: then it is the caller's cut (a denial, after the budget),
    // or, held past a backend timeout, the policy's (admitted).
    let trying = Instant::now();
    let d = limiter
        .blocking_try_acquire_for(&on_live, 1, timeout / 2)
        .unwrap();
    assert!(
        d.is_allowed() || trying.elapsed() >= timeout / 2,
        "denied within its budget: {d:?}"
    );
    // Cut short at once (no time given), right after the live master answered: the caller's
    // denial, counted nowhere, unless this thread was held for a backend timeout in between.
    let replied = Instant::now();
    assert_decided(&call(&limiter, &on_live), "live, before the cut");
    let counted = limiter.failures().timeouts;
    let d = limiter
        .blocking_try_acquire_for(&on_live, 1, Duration::ZERO)
        .unwrap();
    if replied.elapsed() < timeout {
        assert!(!d.is_allowed(), "{d:?}");
        assert_eq!(d.retry_after(), timeout, "{d:?}");
        assert_eq!(limiter.failures().timeouts, counted);
    }
    // Not told to the breaker: every master's is closed.
    let breakers = limiter.breaker().unwrap();
    for (node, state) in breakers.nodes() {
        assert_eq!(state, BreakerState::Closed, "{node}");
    }
    cluster.nodes[0].thaw();
}

/// Issue 18 on a cluster, right after an eager connect: the connect read the slot map (a node
/// of the cluster answered it) and no call has gone to any master yet. A try cut short by its
/// caller's own budget (none at all here) on a healthy cluster is the caller's denial, counted
/// nowhere, as on one server after its connect check: a master the map names for the first
/// time counts as having answered when the map naming it was read, for at most a backend
/// timeout. Before, a master new to the map had no reply at all, so fail-open admitted every
/// such try on every master's keys (each counted as a timeout) until that master's first reply
/// was read.
#[test]
fn a_try_cut_short_right_after_an_eager_connect_is_the_callers_on_every_master() {
    let cluster = RedisCluster::start();
    // Long, so that only a thread held for half a minute skips the checks below.
    let timeout = Duration::from_secs(30);
    let connecting = Instant::now();
    let backend = cluster_backend(&cluster, timeout);
    let limiter = RedisLimiter::with_clock(
        &backend,
        "cut-new",
        FixedWindow::new(100_000, Duration::from_secs(3600)).unwrap(),
        FailurePolicy::FailOpen,
        ManualClock::new(),
    )
    .unwrap();
    for node in 0..cluster.nodes.len() {
        let key = key_on(&cluster, &limiter, node, "n");
        let d = limiter
            .blocking_try_acquire_for(&key, 1, Duration::ZERO)
            .unwrap();
        if connecting.elapsed() < timeout {
            assert!(!d.is_allowed(), "master {node}: {d:?}");
            assert_eq!(d.retry_after(), timeout, "master {node}: {d:?}");
            assert_eq!(limiter.failures().total(), 0, "master {node}: {d:?}");
        }
    }
}

/// A master that has not run a limiter's script yet loads it while another master is frozen:
/// the script is loaded on the master that owns the key, not on every master (`SCRIPT LOAD`
/// through redis-rs's cluster connection goes to all of them, and waited for the frozen one,
/// so the healthy master's key timed out).
#[test]
fn a_frozen_master_does_not_stop_loading_the_script_on_a_live_one() {
    let cluster = partitionable_cluster();
    let backend = cluster_backend(&cluster, Duration::from_secs(2));
    let limiter = fixed_window(&backend, "load", 1_000).with_breaker(None);
    let on_live = key_on(&cluster, &limiter, 1, "l");
    for node in &cluster.nodes {
        assert_eq!(node.cli(&["SCRIPT", "FLUSH"]), "OK");
    }
    cluster.nodes[0].freeze();
    for i in 0..2 {
        let outcome = call(&limiter, &on_live);
        assert_decided(&outcome, format_args!("call {i}: a live master's key"));
        assert!(outcome.decision().is_allowed());
    }
    cluster.nodes[0].thaw();
}

/// A 3-master cluster, a limiter (fixed window, fail closed, no breaker) on it, and a key on
/// its third master, frozen (SIGSTOP) once `prepare` ran if `freeze`: each `callers` outcome,
/// run concurrently, and that master's address.
fn third_master_outcomes(
    freeze: bool,
    prepare: impl FnOnce(&RedisCluster, &Arc<RedisLimiter<FixedWindow, ManualClock>>, &str),
    callers: impl FnOnce(&Arc<RedisLimiter<FixedWindow, ManualClock>>, &str) -> Vec<JoinHandle<Outcome>>,
) -> (Vec<Outcome>, String) {
    let cluster = partitionable_cluster();
    let backend = cluster_backend(&cluster, Duration::from_secs(2));
    let limiter = Arc::new(fixed_window(&backend, "queued", 100_000).with_breaker(None));
    // Not the node given first: the list's head is no answer.
    let key = key_on(&cluster, &limiter, 2, "q");
    let owner = cluster.nodes[2].url();
    prepare(&cluster, &limiter, &key);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if freeze {
        cluster.nodes[2].freeze();
    }
    let started = Instant::now();
    let outcomes = runtime.block_on(async {
        let mut outcomes = Vec::new();
        for task in callers(&limiter, &key) {
            outcomes.push(task.await.unwrap());
        }
        outcomes
    });
    assert!(started.elapsed() < Duration::from_secs(60), "hung");
    if freeze {
        cluster.nodes[2].thaw();
    }
    (outcomes, owner)
}

/// 64 concurrent tasks, each one async decision of one permit for `key` on `limiter`.
fn sixty_four_callers(
    limiter: &Arc<RedisLimiter<FixedWindow, ManualClock>>,
    key: &str,
) -> Vec<JoinHandle<Outcome>> {
    (0..64)
        .map(|_| {
            let (limiter, key) = (Arc::clone(limiter), key.to_owned());
            tokio::spawn(async move { limiter.try_acquire_outcome(&key, 1).await.unwrap() })
        })
        .collect()
}

/// Each of `outcomes` is a failure of `kind` naming `owner` alone.
fn assert_all_name(outcomes: &[Outcome], kind: FailureKind, owner: &str) {
    let wrong: Vec<String> = outcomes
        .iter()
        .map(|outcome| outcome.failure().expect("decided by the policy"))
        .filter(|f| f.kind() != kind || f.server_address() != Some(owner))
        .map(ToString::to_string)
        .collect();
    assert!(
        wrong.is_empty(),
        "{} of {}, not naming {owner}: {wrong:#?}",
        wrong.len(),
        outcomes.len()
    );
}

/// Makes the counter of `key`'s Redis key, on the third master that owns it, negative: a value
/// the scripts never write, so each decision for it is the script's error.
fn break_counter_on_third_master(
    cluster: &RedisCluster,
    limiter: &RedisLimiter<FixedWindow, ManualClock>,
    key: &str,
) {
    let redis_key = &limiter.redis_keys(key)[0];
    assert_eq!(cluster.nodes[2].cli(&["SET", redis_key, "-5"]), "OK");
}

/// Concurrent callers of one key on a frozen master all name that master: the first call,
/// the batches the others are sent in, and the callers still queued at their deadline (whose
/// timeout named the configured node list).
#[test]
fn coalesced_callers_of_a_frozen_master_name_it() {
    let (outcomes, owner) = third_master_outcomes(
        true,
        |_, limiter, key| assert_decided(&call(limiter, key), key),
        sixty_four_callers,
    );
    assert_all_name(&outcomes, FailureKind::Timeout, &owner);
}

/// A leased key whose leases are of one permit decides each request with a per-call decision
/// (queued in the limiter like any other): its concurrent callers on a frozen master all name
/// that master too.
#[test]
fn per_call_decisions_of_a_leased_key_on_a_frozen_master_name_it() {
    let leased = std::sync::OnceLock::new();
    let (outcomes, owner) = third_master_outcomes(
        true,
        |_, limiter, key| {
            let key = LeasedKey::new(Arc::clone(limiter), key)
                .with_max_lease(1)
                .unwrap();
            assert!(key.blocking_try_acquire(1).unwrap().is_allowed());
            leased.set(Arc::new(key)).ok().unwrap();
        },
        |_, _| {
            (0..16)
                .map(|_| {
                    let leased = Arc::clone(leased.get().unwrap());
                    tokio::spawn(async move { leased.try_acquire_outcome(1).await.unwrap() })
                })
                .collect()
        },
    );
    assert!(
        leased.get().unwrap().counts().exact > 0,
        "per-call decisions were made"
    );
    assert_all_name(&outcomes, FailureKind::Timeout, &owner);
}

/// Concurrent callers of one key whose Redis key holds no counter (a count below zero, which
/// the scripts never write): each decision is the script's error, also those sent in a batch
/// (whose error named the configured node list), naming the master that owns the key.
#[test]
fn batched_script_errors_on_a_cluster_name_the_keys_master() {
    let (outcomes, owner) = third_master_outcomes(
        false,
        |cluster, limiter, key| break_counter_on_third_master(cluster, limiter, key),
        sixty_four_callers,
    );
    assert_all_name(&outcomes, FailureKind::Script, &owner);
    let texts: Vec<String> = outcomes
        .iter()
        .map(|o| o.failure().unwrap().to_string())
        .collect();
    assert!(
        texts.iter().all(|t| t.contains("does not hold a counter")),
        "{texts:#?}"
    );
}

/// A steady stream of failed calls (here each the script's error for a key holding no
/// counter) re-reads the slot map at most once per backend timeout, not once per failure: a
/// `CLUSTER SLOTS` per failed decision doubled the cluster's requests and rebuilt the whole
/// map each time.
#[test]
fn failures_re_read_the_slot_map_at_most_once_per_timeout() {
    let cluster = RedisCluster::start();
    // Long, so that the whole run falls within one timeout however slow the machine.
    let backend = cluster_backend(&cluster, Duration::from_secs(60));
    let limiter = fixed_window(&backend, "reread", 1_000).with_breaker(None);
    let key = key_on(&cluster, &limiter, 2, "r");
    break_counter_on_third_master(&cluster, &limiter, &key);
    let reads = || -> u64 { cluster.nodes.iter().map(|n| n.calls("cluster|slots")).sum() };
    let before = reads();
    for i in 0..40 {
        let outcome = limiter.blocking_try_acquire_outcome(&key, 1).unwrap();
        let failure = outcome.failure().expect("the script's error");
        assert_eq!(failure.kind(), FailureKind::Script, "call {i}: {failure}");
    }
    let after = reads();
    assert!(
        after - before <= 1,
        "{} slot map reads for 40 failures",
        after - before
    );
}
