//! One redis-server: exact counts under contention (threads, tasks, two processes), decision
//! fields, TTLs, the no-TTL repair, SCRIPT FLUSH.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use floodgate::backend::RequestError;
use floodgate::redis::{RedisBackend, RedisConfig};
use floodgate::{AcquireError, FixedWindow, Gcra, Rate, SlidingLog, SlidingWindow};

use super::server::RedisServer;
use super::{Acquire, backend, for_each_algorithm, hammer, limiter};

#[test]
fn eight_threads_admit_exactly_the_limit_for_every_algorithm() {
    let server = RedisServer::start();
    let backend = backend(RedisConfig::single(server.url()));
    for_each_algorithm(100, |what, make| {
        let limiter: Arc<dyn Acquire> = Arc::from(make(&backend, "threads"));
        assert_eq!(hammer(Arc::clone(&limiter), "k", 8, 40), 100, "{what}");
        // Every key the decisions touched has a TTL.
        for key in limiter.redis_keys("k") {
            let ttl: i64 = server.cli(&["PTTL", &key]).parse().unwrap();
            assert!(ttl > 0, "{what}: {key} has PTTL {ttl}");
        }
    });
}

#[test]
fn aligned_window_admits_exactly_the_limit_within_one_window() {
    let server = RedisServer::start();
    let backend = backend(RedisConfig::single(server.url()));
    let hour = Duration::from_secs(3600);
    let window_micros = 3_600_000_000;
    // A run that straddles the hour (read on the server's clock) is retried once: the next run
    // starts just after the boundary, a whole hour from the next one.
    for attempt in 0..2 {
        let limiter: Arc<dyn Acquire> = Arc::new(limiter(
            &backend,
            "aligned",
            FixedWindow::aligned(50, hour).unwrap(),
        ));
        let key = format!("attempt-{attempt}");
        let before = server.time_micros() / window_micros;
        let admitted = hammer(Arc::clone(&limiter), &key, 8, 20);
        let after = server.time_micros() / window_micros;
        if before == after {
            assert_eq!(admitted, 50);
            // PEXPIREAT at the window's end: the TTL ends on a whole hour of server time.
            let redis_key = &limiter.redis_keys(&key)[0];
            let expire_at_ms: u64 = server.cli(&["PEXPIRETIME", redis_key]).parse().unwrap();
            assert_eq!(expire_at_ms % 3_600_000, 0);
            assert_eq!(expire_at_ms * 1000 / window_micros, before + 1);
            return;
        }
        assert!(admitted <= 100);
    }
    panic!("two runs straddled an hour boundary");
}

#[test]
fn async_tasks_admit_exactly_the_limit() {
    let server = RedisServer::start();
    let backend = backend(RedisConfig::single(server.url()));
    let limiter = Arc::new(limiter(
        &backend,
        "async",
        Gcra::new(Rate::per_hour(1), 64).unwrap(),
    ));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let admitted: usize = runtime.block_on(async {
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                tokio::spawn(async move {
                    let mut admitted = 0;
                    for _ in 0..8 {
                        let outcome = limiter.try_acquire_outcome("k", 1).await.unwrap();
                        assert!(outcome.failure().is_none());
                        admitted += usize::from(outcome.decision().is_allowed());
                    }
                    admitted
                })
            })
            .collect();
        let mut total = 0;
        for task in tasks {
            total += task.await.unwrap();
        }
        total
    });
    assert_eq!(admitted, 64);
}

/// Env var that turns the re-invoked test binary into the second process.
const CHILD_PORT: &str = "FLOODGATE_REDIS_CHILD_PORT";

/// Both processes meet here (a counter in Redis) so that their hammering overlaps.
fn barrier(server_url: &str) {
    let client = redis::Client::open(server_url).unwrap();
    let mut connection = client.get_connection().unwrap();
    let _: i64 = redis::cmd("INCR")
        .arg("barrier")
        .query(&mut connection)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while redis::cmd("GET")
        .arg("barrier")
        .query::<i64>(&mut connection)
        .unwrap()
        < 2
    {
        assert!(Instant::now() < deadline, "the other process never arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn share_of_two_processes(url: &str) -> usize {
    let backend = backend(RedisConfig::single(url));
    let limiter: Arc<dyn Acquire> = Arc::new(limiter(
        &backend,
        "processes",
        FixedWindow::new(500, Duration::from_secs(60)).unwrap(),
    ));
    barrier(url);
    hammer(limiter, "shared", 8, 50)
}

#[test]
fn two_processes_of_eight_threads_share_one_limit_exactly() {
    if let Ok(port) = std::env::var(CHILD_PORT) {
        // The second process: report its share on stdout.
        let admitted = share_of_two_processes(&format!("redis://127.0.0.1:{port}"));
        println!("child-admitted={admitted}");
        return;
    }
    let server = RedisServer::start();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "single::two_processes_of_eight_threads_share_one_limit_exactly",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_PORT, server.port.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let parent = share_of_two_processes(&server.url());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    let child: usize = stdout
        .lines()
        .find_map(|l| l.split("child-admitted=").nth(1))
        .unwrap_or_else(|| panic!("no count from the child: {stdout}"))
        .trim()
        .parse()
        .unwrap();
    // 2 processes × 8 threads × 50 attempts = 800 > 500: the limit is reached exactly.
    assert_eq!(parent + child, 500, "parent {parent}, child {child}");
}

#[test]
fn decisions_carry_the_same_fields_as_the_local_limiters() {
    let server = RedisServer::start();
    let b = backend(RedisConfig::single(server.url()));
    let minute = Duration::from_secs(60);

    // Fixed window: remaining counts down, a denial waits for the window's end.
    let fw = limiter(&b, "fields", FixedWindow::new(5, minute).unwrap());
    let d = fw.blocking_try_acquire("k", 2).unwrap();
    assert!(d.is_allowed() && d.limit() == 5 && d.remaining() == 3);
    assert!(d.retry_after().is_zero() && d.reset_after() <= minute && !d.reset_after().is_zero());
    assert_eq!(fw.blocking_try_acquire("k", 3).unwrap().remaining(), 0);
    let denied = fw.blocking_try_acquire("k", 1).unwrap();
    assert!(!denied.is_allowed() && denied.remaining() == 0);
    assert!(denied.retry_after() <= minute && !denied.retry_after().is_zero());
    assert_eq!(denied.retry_after(), denied.reset_after());
    assert_eq!(
        fw.blocking_try_acquire("k", 6).unwrap_err(),
        RequestError::Permits(AcquireError::ExceedsCapacity {
            requested: 6,
            capacity: 5
        })
    );
    assert_eq!(
        fw.blocking_try_acquire("k", 0).unwrap_err(),
        RequestError::Permits(AcquireError::ZeroPermits)
    );

    // GCRA: 1 per hour, burst 3 (1 per second assumed the two calls within 1 s: a stall of a
    // second refilled a permit, and `remaining` read 1). After the burst, 2 more wait for 2
    // intervals, less the time between the calls.
    let hour = Duration::from_secs(3600);
    let gcra = limiter(&b, "fields", Gcra::new(Rate::per_hour(1), 3).unwrap());
    let d = gcra.blocking_try_acquire("k", 3).unwrap();
    assert!(d.is_allowed() && d.remaining() == 0 && d.reset_after() == 3 * hour);
    let denied = gcra.blocking_try_acquire("k", 2).unwrap();
    assert!(
        !denied.is_allowed() && denied.remaining() == 0,
        "{denied:?}"
    );
    assert!(
        !denied.retry_after().is_zero() && denied.retry_after() <= 2 * hour,
        "{denied:?}"
    );
    assert!(
        denied.reset_after() > hour && denied.reset_after() <= 3 * hour,
        "{denied:?}"
    );

    // Sliding log: a denial adds no entry, however often it is repeated.
    let log = limiter(&b, "fields", SlidingLog::new(3, minute).unwrap());
    assert_eq!(log.blocking_try_acquire("k", 2).unwrap().remaining(), 1);
    let d = log.blocking_try_acquire("k", 1).unwrap();
    assert!(d.is_allowed() && d.remaining() == 0 && d.reset_after() == minute);
    for n in [1, 2, 3, 1] {
        let denied = log.blocking_try_acquire("k", n).unwrap();
        assert!(!denied.is_allowed());
        assert!(
            denied.retry_after() <= minute && denied.reset_after() <= minute,
            "n = {n}: {denied:?}"
        );
    }
    assert_eq!(server.cli(&["ZCARD", &log.redis_keys("k")[0]]), "3");

    // Sliding window: n > 1 counted in full; remaining is what is left of the window.
    let sw = limiter(&b, "fields", SlidingWindow::new(4, minute, 60).unwrap());
    assert_eq!(sw.blocking_try_acquire("k", 3).unwrap().remaining(), 1);
    let denied = sw.blocking_try_acquire("k", 2).unwrap();
    assert!(!denied.is_allowed() && denied.remaining() == 1);
    assert!(denied.retry_after() <= minute && denied.retry_after() > Duration::from_secs(30));
    assert!(sw.blocking_try_acquire("k", 1).unwrap().is_allowed());
}

#[test]
fn keys_found_without_a_ttl_are_repaired() {
    let server = RedisServer::start();
    let b = backend(RedisConfig::single(server.url()));
    // Each algorithm: fill the limit, strip every TTL (PERSIST), then one denied decision must
    // give every key a TTL again. What went wrong, if anything, is returned.
    let minute = Duration::from_secs(60);
    let check = |limiter: &dyn Acquire, key: &str| -> Result<(), String> {
        if !limiter.try_acquire(key, 2).decision().is_allowed() {
            return Err("the first 2 permits were denied".into());
        }
        for redis_key in limiter.redis_keys(key) {
            let persisted = server.cli(&["PERSIST", &redis_key]);
            let ttl = server.cli(&["PTTL", &redis_key]);
            if (persisted.as_str(), ttl.as_str()) != ("1", "-1") {
                return Err(format!("{redis_key}: PERSIST {persisted}, then PTTL {ttl}"));
            }
        }
        if limiter.try_acquire(key, 1).decision().is_allowed() {
            return Err("the decision past the limit was admitted".into());
        }
        for redis_key in limiter.redis_keys(key) {
            let ttl: i64 = server.cli(&["PTTL", &redis_key]).parse().unwrap();
            if !(1..=60_000).contains(&ttl) {
                return Err(format!("{redis_key} has PTTL {ttl}"));
            }
        }
        Ok(())
    };
    let fixed = limiter(&b, "repair", FixedWindow::new(2, minute).unwrap());
    let sliding = limiter(&b, "repair", SlidingWindow::new(2, minute, 10).unwrap());
    let log = limiter(&b, "repair", SlidingLog::new(2, minute).unwrap());
    let gcra = limiter(&b, "repair", Gcra::new(Rate::per_minute(2), 2).unwrap());
    let each: [(&str, &dyn Acquire); 4] = [
        ("fixed", &fixed),
        ("sliding window", &sliding),
        ("sliding log", &log),
        ("gcra", &gcra),
    ];
    for (what, limiter) in each {
        check(limiter, "k").unwrap_or_else(|why| panic!("{what}: {why}"));
    }
    // The aligned window's key expires at the minute's end on the server's clock, which may
    // come between any two steps of a run (the key is then gone at the PERSIST, or the next
    // decision opens a new window and is admitted). A run whose server time read before it and
    // after it fall in one minute met no expiry and is checked as strictly as the others; one
    // that straddles a minute's end is run again on another key (it starts just after that end,
    // a whole minute before the next one). Before, a decision made 3 ms before the minute's end
    // found its key gone at the PERSIST ("0", not "1").
    let aligned = limiter(&b, "repair", FixedWindow::aligned(2, minute).unwrap());
    let minute_now = || server.time_micros() / 60_000_000;
    for attempt in 0..2 {
        let before = minute_now();
        let checked = check(&aligned, &format!("k{attempt}"));
        if minute_now() == before {
            checked.unwrap_or_else(|why| panic!("aligned: {why}"));
            break;
        }
        assert_eq!(attempt, 0, "aligned: two runs straddled a minute's end");
    }

    // A counter written by hand, at the limit and without a TTL, no longer blocks forever: the
    // next decision gives it the window as TTL, and once that passes requests are admitted.
    let short = limiter(
        &b,
        "repair",
        FixedWindow::new(5, Duration::from_millis(200)).unwrap(),
    );
    let key = &short.redis_keys("stuck")[0];
    server.cli(&["SET", key, "5"]);
    assert!(!short.blocking_try_acquire("stuck", 1).unwrap().is_allowed());
    // The repair gave the key a TTL of at most the window. `redis-cli` is a process started
    // after the decision: on a loaded machine the 200 ms may be over before it asks, and then the
    // key is gone (-2), which also proves it had a TTL. -1 (no TTL) is the bug.
    let ttl: i64 = server.cli(&["PTTL", key]).parse().unwrap();
    assert!(ttl == -2 || (1..=200).contains(&ttl), "PTTL {ttl}");
    // A hang bound, 50 times the window.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !short.blocking_try_acquire("stuck", 1).unwrap().is_allowed() {
        assert!(
            Instant::now() < deadline,
            "the repaired counter never expired"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn script_flush_is_survived() {
    let server = RedisServer::start();
    let b = backend(RedisConfig::single(server.url()));
    for_each_algorithm(10, |what, make| {
        let limiter = make(&b, "flush");
        for _ in 0..4 {
            assert!(
                limiter.try_acquire("k", 1).decision().is_allowed(),
                "{what}"
            );
        }
        assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
        // NOSCRIPT → SCRIPT LOAD → EVALSHA, inside the same call; the count carries on.
        let outcome = limiter.try_acquire("k", 6);
        assert!(
            outcome.failure().is_none(),
            "{what}: {:?}",
            outcome.failure()
        );
        assert!(
            outcome.decision().is_allowed() && outcome.decision().remaining() == 0,
            "{what}"
        );
        assert!(
            !limiter.try_acquire("k", 1).decision().is_allowed(),
            "{what}"
        );
    });
}

/// After `SCRIPT FLUSH`, 16 concurrent calls (each a lone call of its own limiter, so each sends
/// its own `EVALSHA` of the one script) all get `NOSCRIPT`: one `SCRIPT LOAD` goes out and the
/// others wait for it (each sent its own before). On one current-thread runtime, every task
/// writes its `EVALSHA` before the connection's driver task runs, so all 16 reach the server
/// before any load.
#[test]
fn concurrent_noscript_replies_load_the_script_once() {
    const CALLERS: usize = 16;
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = Instant::now();
    runtime.block_on(async {
        let config = RedisConfig::single(server.url()).timeout(super::TIMEOUT);
        let backend = RedisBackend::connect(config).await.unwrap();
        let limiters: Vec<_> = (0..CALLERS)
            .map(|i| {
                let window = FixedWindow::new(10, Duration::from_secs(60)).unwrap();
                Arc::new(limiter(&backend, &format!("noscript{i}"), window))
            })
            .collect();
        let first = limiters[0].try_acquire_outcome("k", 1).await.unwrap();
        assert!(first.failure().is_none(), "{:?}", first.failure());
        assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
        let loads_before = server.calls("script|load");
        let noscript_before = server.calls("evalsha");
        let tasks: Vec<_> = limiters
            .iter()
            .map(|l| {
                let l = Arc::clone(l);
                tokio::spawn(async move { l.try_acquire_outcome("k", 1).await.unwrap() })
            })
            .collect();
        for task in tasks {
            let outcome = task.await.unwrap();
            assert!(outcome.failure().is_none(), "{:?}", outcome.failure());
            assert!(outcome.decision().is_allowed());
        }
        // Each call's EVALSHA, then its retry after the load.
        assert_eq!(
            server.calls("evalsha") - noscript_before,
            2 * CALLERS as u64
        );
        assert_eq!(
            server.calls("script|load") - loads_before,
            1,
            "one SCRIPT LOAD for {CALLERS} concurrent NOSCRIPT replies"
        );
    });
    assert!(started.elapsed() < Duration::from_secs(60), "hung");
}

#[test]
fn blocking_calls_inside_a_runtime_are_refused_and_drops_there_neither_panic_nor_deadlock() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Built outside, used and dropped on the runtime's only thread.
    let backend = backend(RedisConfig::single(server.url()));
    let limiter = limiter(
        &backend,
        "inside",
        SlidingLog::new(3, Duration::from_secs(60)).unwrap(),
    );
    let admitted = runtime.block_on(async move {
        // A blocking call would block the runtime's thread: refused, with a reason.
        let refused = limiter.blocking_try_acquire("k", 1);
        assert!(
            matches!(refused, Err(RequestError::Runtime(_))),
            "{refused:?}"
        );
        let mut admitted = 0;
        for _ in 0..5 {
            let outcome = limiter.try_acquire_outcome("k", 1).await.unwrap();
            assert!(outcome.failure().is_none());
            admitted += usize::from(outcome.decision().is_allowed());
        }
        drop(limiter);
        drop(backend);
        admitted
    });
    assert_eq!(admitted, 3);
    // blocking_connect inside a runtime is refused too; connect().await is the way there.
    let inside = runtime.block_on(async {
        RedisBackend::blocking_connect(RedisConfig::single(server.url())).map(|_| ())
    });
    assert!(inside.is_err());
}

#[test]
fn a_backend_connected_on_the_callers_runtime_decides_there() {
    let server = RedisServer::start();
    let gcra = || Gcra::new(Rate::per_hour(1), 4).unwrap();
    // A current-thread runtime: async calls run on it; no other thread can drive it, so the
    // blocking forms say so instead of hanging.
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let backend = current
        .block_on(RedisBackend::connect(
            RedisConfig::single(server.url()).timeout(super::TIMEOUT),
        ))
        .unwrap();
    assert!(
        backend.server_offset().is_some(),
        "eager: the clock is read at connect"
    );
    let l = limiter(&backend, "callers", gcra());
    assert!(
        current
            .block_on(l.try_acquire("k", 3))
            .unwrap()
            .is_allowed()
    );
    let refused =
        std::thread::scope(|s| s.spawn(|| l.blocking_try_acquire("k", 1)).join().unwrap());
    assert!(
        matches!(refused, Err(RequestError::Runtime(_))),
        "{refused:?}"
    );
    // A multi-thread runtime: its workers drive the connection, so plain threads may block on it.
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let backend = multi
        .block_on(RedisBackend::connect(
            RedisConfig::single(server.url()).timeout(super::TIMEOUT),
        ))
        .unwrap();
    let l = limiter(&backend, "callers", gcra());
    let from_thread =
        std::thread::scope(|s| s.spawn(|| l.blocking_try_acquire("k", 1)).join().unwrap());
    assert_eq!(
        from_thread.unwrap().remaining(),
        0,
        "the same key: 3 + 1 of 4"
    );
    assert!(!multi.block_on(l.try_acquire("k", 1)).unwrap().is_allowed());
}

#[test]
fn acquire_waits_for_the_shared_window_and_try_acquire_for_respects_its_bound() {
    let server = RedisServer::start();
    let backend = backend(RedisConfig::single(server.url()));
    let make = |name: &str, window: Duration| {
        floodgate::redis::RedisLimiter::new(
            &backend,
            name,
            FixedWindow::new(2, window).unwrap(),
            floodgate::backend::FailurePolicy::FailClosed,
        )
        .unwrap()
    };
    // An hour-long window, full: a wait that does not fit in the 20 s given is not slept and
    // takes nothing. Had it slept the announced wait, the call would last an hour (caught by the
    // hang bound) and then be admitted; the denial itself is the proof, whatever the load. (The
    // 1 ms given before also bounded the round trip: on a loaded machine the try was cut short
    // and the policy denied, with no hour-long `retry_after`.)
    let hourly = make("bounded", Duration::from_secs(3600));
    assert_eq!(hourly.blocking_acquire("k", 2).unwrap(), Duration::ZERO);
    let given = Duration::from_secs(20);
    let started = Instant::now();
    let denied = hourly.blocking_try_acquire_for("k", 1, given).unwrap();
    let took = started.elapsed();
    assert_eq!(
        hourly.failures().total(),
        0,
        "Redis decided, not the policy"
    );
    assert!(!denied.is_allowed());
    assert!(
        denied.retry_after() > Duration::from_secs(3000),
        "{denied:?}"
    );
    assert!(took < given, "slept: {took:?}");
    assert!(
        !hourly.blocking_try_acquire("k", 1).unwrap().is_allowed(),
        "took nothing, admitted nothing"
    );

    // Anchored at the first request, 1 s long: acquire sleeps the announced wait (the window's
    // end on Redis's clock), then is admitted. The window opened on the server after `opened`,
    // and the second acquire's first try reached it before that call returned: if less than the
    // window passed from `opened` to the return, the first try found the window full, so an
    // admission at once (a zero wait) is the bug, however long each step took.
    let limiter = make("blocking", Duration::from_secs(1));
    let opened = Instant::now();
    assert_eq!(limiter.blocking_acquire("k", 2).unwrap(), Duration::ZERO);
    let asked = Instant::now();
    let waited = limiter.blocking_acquire("k", 1).unwrap();
    let took = asked.elapsed();
    // The time actually waited, measured: never more than the call took.
    assert!(waited <= took, "{waited:?} > {took:?}");
    if waited.is_zero() {
        let since_opened = opened.elapsed();
        assert!(
            since_opened >= Duration::from_secs(1),
            "admitted inside a full window ({since_opened:?} after it opened)"
        );
    }
    // Above, a hang bound only: `waited` is measured, sleeps and round trips included, so a
    // stall of the machine adds to it (the old bound, the window plus 100 ms, assumed none).
    // Ten windows still catch an acquire that sleeps some fixed time rather than the wait.
    assert!(waited < Duration::from_secs(10), "{waited:?}");
    assert_eq!(
        limiter.blocking_acquire("k", 3),
        Err(RequestError::Permits(AcquireError::ExceedsCapacity {
            requested: 3,
            capacity: 2
        }))
    );
}

/// A backend connected on a multi-thread runtime that is then dropped: its blocking calls (run
/// on that runtime) are errors, the second and later ones too (the second panicked at a timer
/// of the dead runtime, issue 18); async calls from another runtime reconnect there.
#[test]
fn blocking_calls_on_a_backend_whose_runtime_was_dropped_fail_without_panicking() {
    let server = RedisServer::start();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let backend = multi
        .block_on(RedisBackend::connect(
            RedisConfig::single(server.url()).timeout(super::TIMEOUT),
        ))
        .unwrap();
    let l = limiter(
        &backend,
        "orphan",
        FixedWindow::new(5, Duration::from_secs(60)).unwrap(),
    );
    assert!(l.blocking_try_acquire("k", 1).unwrap().is_allowed());
    drop(multi);
    // The connection's task and the timers died with the runtime: an error (or a policy
    // decision), never a panic, never a hang. Not only the first call: the first finds the
    // connection's task gone and may leave the connection manager a reconnect series (issue
    // 18's resend of a stale connection error runs on such a call's failure), so the calls
    // after it must hold too.
    for call in 1..=3 {
        let started = Instant::now();
        let after = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            l.blocking_try_acquire_outcome("k", 1)
        }));
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "call {call} hung"
        );
        let after = after.unwrap_or_else(|_| {
            panic!("blocking call {call} after the runtime was dropped panicked")
        });
        match after {
            Err(RequestError::Runtime(why)) => assert!(why.contains("runtime"), "{why}"),
            Ok(outcome) => assert!(outcome.failure().is_some(), "call {call}: {outcome:?}"),
            Err(other) => panic!("call {call}: {other:?}"),
        }
    }
    // Async calls from another runtime: the first finds the connection's task gone (an error,
    // or the policy), and starts a reconnect on its own runtime; Redis decides the next ones.
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let outcomes: Vec<_> = (0..3)
        .map(|_| {
            other
                .block_on(async {
                    tokio::time::timeout(Duration::from_secs(60), l.try_acquire_outcome("k", 1))
                        .await
                })
                .expect("an async call hung")
                .unwrap()
        })
        .collect();
    assert!(
        outcomes[1..].iter().all(|o| o.failure().is_none()),
        "{outcomes:?}"
    );
}

/// A sliding log whose entries are scored after the server's now (its clock stepped back 30 s
/// since they were added) counts them until the clock passes their score + the window: each
/// denial says so (`a_sliding_log_ahead_of_a_clock_stepped_back_announces_the_exact_wait`). An
/// admission beside them must keep them that long too: its expiry of the log (and of the
/// member sequence) may not fall before the newest entry's score + the window. A `PEXPIRE` of
/// the window from now dropped the ahead entries 30 s early, and with them the count: a full
/// quota was then admitted on top of entries the log still counted.
#[test]
fn a_sliding_log_admission_keeps_entries_ahead_of_a_clock_stepped_back() {
    let server = RedisServer::start();
    let b = backend(RedisConfig::single(server.url()));
    let window = Duration::from_secs(60);
    let log = limiter(&b, "stepped", SlidingLog::new(3, window).unwrap());
    let keys = log.redis_keys("k");
    // Two entries 30 s ahead, with the expiry their own admission gave them (score + window).
    let score = server.time_micros() + 30_000_000;
    let ahead = score.to_string();
    let end_ms = (score + window.as_micros() as u64).div_ceil(1_000);
    server.cli(&[
        "ZADD",
        &keys[0],
        &ahead,
        &format!("{ahead}:1"),
        &ahead,
        &format!("{ahead}:2"),
    ]);
    server.cli(&["SET", &keys[1], "2"]);
    for key in &keys {
        assert_eq!(server.cli(&["PEXPIREAT", key, &end_ms.to_string()]), "1");
    }
    let admitted = log.blocking_try_acquire("k", 1).unwrap();
    assert!(
        admitted.is_allowed() && admitted.remaining() == 0,
        "{admitted:?}"
    );
    for key in &keys {
        let at: u64 = server.cli(&["PEXPIRETIME", key]).parse().unwrap();
        assert!(
            at >= end_ms,
            "{key} expires at {at} ms, before its newest entry leaves the window at {end_ms} ms"
        );
    }
    // And the log still holds all three entries.
    assert_eq!(server.cli(&["ZCARD", &keys[0]]), "3");
}

/// Each algorithm at the largest limit it takes (a `SlidingWindow` / `FixedWindow` limit of
/// 2^24 - 1, a GCRA burst whose whole refill is just under Redis's 2^51 µs), and keys with the
/// bytes that mean something to Redis or to its cluster (hash-tag braces, the separator,
/// spaces, CR LF, NUL, a 100 kB key): a request for the whole limit fits once, then nothing
/// more; each key counts apart.
#[test]
fn the_largest_limits_and_odd_keys_decide_exactly() {
    let server = RedisServer::start();
    let b = backend(RedisConfig::single(server.url()));
    let minute = Duration::from_secs(60);
    let max = (1 << 24) - 1;
    // 1 permit a minute: a burst of 2^51 µs / 1 min (37,529,996). At 1 permit a second (a
    // burst of 2,251,799,813) a stall of a second between taking the whole burst and the next
    // request refilled a permit, and that request was admitted.
    let burst = ((1u64 << 51) / 60_000_000) as u32;
    let huge: [(u32, Box<dyn super::Acquire>); 3] = [
        (
            max,
            Box::new(limiter(&b, "big", FixedWindow::new(max, minute).unwrap())),
        ),
        (
            max,
            Box::new(limiter(
                &b,
                "big",
                SlidingWindow::new(max, minute, 6).unwrap(),
            )),
        ),
        (
            burst,
            Box::new(limiter(
                &b,
                "big",
                Gcra::new(Rate::per_minute(1), burst).unwrap(),
            )),
        ),
    ];
    for (i, (limit, limiter)) in huge.iter().enumerate() {
        let key = i.to_string();
        let all = limiter.try_acquire(&key, *limit);
        assert!(all.failure().is_none(), "{limit}: {:?}", all.failure());
        let d = all.decision();
        assert!(d.is_allowed() && d.remaining() == 0, "{limit}: {d:?}");
        assert_eq!(d.limit(), u64::from(*limit));
        let d = limiter.try_acquire(&key, 1).decision();
        assert!(
            !d.is_allowed() && !d.retry_after().is_zero(),
            "{limit}: {d:?}"
        );
    }
    let log = limiter(&b, "odd", SlidingLog::new(1, minute).unwrap());
    let fw = limiter(&b, "odd", FixedWindow::new(1, minute).unwrap());
    let long = "k".repeat(100_000);
    let keys = [
        "", "{", "}", "{}", "}{", "a}b", "a}c", "{odd:a}", ":", "a:b", "a b", "a\r\nb", "a\nb",
        "\0", &long,
    ];
    for limiter in [&log as &dyn super::Acquire, &fw] {
        for key in keys {
            let first = limiter.try_acquire(key, 1);
            assert!(first.failure().is_none(), "{key:?}: {:?}", first.failure());
            assert!(first.decision().is_allowed(), "{key:?} shares a count");
            assert!(
                !limiter.try_acquire(key, 1).decision().is_allowed(),
                "{key:?}"
            );
        }
    }
}
