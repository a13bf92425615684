//! The failure policy: a server killed mid-run and restarted, a server never there, one that
//! never answers, one that answers nonsense or never answers a take-back, a cell that holds no
//! number. Every call returns within the timeout (plus scheduling slack) and never panics.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use floodgate::SlidingWindow;
use floodgate::backend::{BackendError, FailurePolicy};
use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
use floodgate::{Decision, ManualClock};

use super::T0;
use super::server::{MemcachedServer, free_port};

const SHORT: Duration = Duration::from_millis(150);
/// Bound on one call while the server is down: a hang bound, not a speed test. A call gives up
/// after `SHORT` (150 ms); 60 s is 400 times that, so only a call that ignores its timeout
/// fails it, never a loaded machine (10 s was exceeded once at a load average of 44).
const CALL_BOUND: Duration = Duration::from_secs(60);

fn limiter(
    addr: &str,
    policy: FailurePolicy,
    clock: &ManualClock,
) -> MemcachedLimiter<ManualClock> {
    limiter_timing_out_after(addr, policy, clock, SHORT)
}

fn limiter_timing_out_after(
    addr: &str,
    policy: FailurePolicy,
    clock: &ManualClock,
    timeout: Duration,
) -> MemcachedLimiter<ManualClock> {
    // Lazy: the address may be closed or frozen (eager connecting would fail there).
    let config = MemcachedConfig::new(addr).timeout(timeout).lazy();
    let backend = MemcachedBackend::connect(config).unwrap();
    let window = SlidingWindow::new(10, Duration::from_secs(60), 60).unwrap();
    MemcachedLimiter::with_clock(&backend, "policy", window, policy, clock.clone()).unwrap()
}

/// One call, bounded in time; returns the decision and the error the policy decided on.
fn timed(limiter: &MemcachedLimiter<ManualClock>, key: &str) -> (Decision, Option<BackendError>) {
    let started = Instant::now();
    let outcome = limiter.blocking_try_acquire_outcome(key, 1).unwrap();
    assert!(
        started.elapsed() < CALL_BOUND,
        "took {:?}",
        started.elapsed()
    );
    outcome.into_parts()
}

#[test]
fn server_killed_mid_run_and_restarted_the_policy_holds() {
    let mut server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    // The policies themselves, on every call: no circuit breaker (tests/memcached/shortcuts.rs).
    // The generous timeout: calls to the killed server fail at once (refused, or the pooled
    // connection closed), so no call here waits for it, and every call to the live server must
    // be decided by memcached. With `SHORT` (150 ms), a warm-up call, a call before the kill
    // (the kill then never came: the loop below ends at the first failure) or one after the
    // restart that took 150 ms on a loaded machine failed the test.
    let make = |policy| {
        limiter_timing_out_after(&server.addr(), policy, &clock, super::TIMEOUT).with_breaker(None)
    };
    let open = make(FailurePolicy::FailOpen);
    let closed = make(FailurePolicy::FailClosed);
    let fallback = make(FailurePolicy::local_fallback(0.5).unwrap());
    for l in [&open, &closed, &fallback] {
        assert!(timed(l, "warm-up").1.is_none());
    }

    // Threads hammer the fail-closed limiter while the server dies under them.
    let stop = AtomicBool::new(false);
    let (admitted, failed) = (AtomicU64::new(0), AtomicU64::new(0));
    std::thread::scope(|s| {
        for thread in 0..4 {
            let (closed, stop, admitted, failed) = (&closed, &stop, &admitted, &failed);
            s.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    let (decision, error) = timed(closed, &format!("hammer-{thread}"));
                    if error.is_some() {
                        assert!(!decision.is_allowed(), "fail closed admitted");
                        failed.fetch_add(1, Ordering::SeqCst);
                    } else if decision.is_allowed() {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        // A hang bound: the kill is seen by the next call.
        let deadline = Instant::now() + Duration::from_secs(30);
        while closed.failures().total() == 0 {
            if admitted.load(Ordering::SeqCst) >= 8 {
                server.kill();
            }
            assert!(Instant::now() < deadline, "no failure seen");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(200));
        stop.store(true, Ordering::SeqCst);
    });
    // Each thread had its own key of limit 10; memcached admitted at most that.
    assert!(admitted.load(Ordering::SeqCst) <= 40);
    assert_eq!(closed.failures().total(), failed.load(Ordering::SeqCst));

    let before = [open.failures(), fallback.failures()];
    for _ in 0..20 {
        let (decision, error) = timed(&open, "k");
        assert!(decision.is_allowed() && error.is_some());
        let (decision, error) = timed(&closed, "k");
        assert!(!decision.is_allowed());
        assert_eq!(decision.retry_after(), super::TIMEOUT);
        let error = error.expect("decided by the policy").to_string();
        assert!(error.contains("unreachable"), "{error}");
    }
    // The local fallback admits exactly its share (5 of 10) for the key, and no more.
    let admitted = (0..20)
        .filter(|_| timed(&fallback, "k").0.is_allowed())
        .count();
    assert_eq!(admitted, 5);
    assert_eq!(open.failures().total() - before[0].total(), 20);
    assert_eq!(fallback.failures().total() - before[1].total(), 20);

    server.restart();
    // memcached decides again at once (a dead pooled connection is replaced within the call),
    // from scratch: it kept nothing.
    let admitted = (0..20).filter(|_| {
        let (decision, error) = timed(&closed, "fresh");
        assert!(error.is_none(), "{error:?}");
        decision.is_allowed()
    });
    assert_eq!(admitted.count(), 10);
}

/// memcached has no reconnect timer (issue 18): a call finds a pooled connection closed (the
/// peek) or fails on it, and the next call connects anew, at once; while the server is down
/// each call is refused at once (no back-off between attempts: the circuit breaker, off here,
/// is what spares a server that is down the calls), and the first call after the restart is
/// decided by memcached. The async path (the blocking one: the test above).
#[test]
fn async_calls_reconnect_at_the_first_call_after_a_restart_with_no_back_off() {
    use floodgate::backend::FailureKind;
    let mut server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    // The generous timeout: no call here waits for it (refusals come at once).
    let closed = limiter_timing_out_after(
        &server.addr(),
        FailurePolicy::FailClosed,
        &clock,
        super::TIMEOUT,
    )
    .with_breaker(None);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let first = closed.try_acquire_outcome("k", 1).await.unwrap();
        assert!(first.failure().is_none(), "{:?}", first.failure());
        server.kill();
        for call in 0..5 {
            let started = Instant::now();
            let outcome = closed.try_acquire_outcome("k", 1).await.unwrap();
            assert!(started.elapsed() < CALL_BOUND, "{:?}", started.elapsed());
            assert!(!outcome.decision().is_allowed());
            let error = outcome.failure().expect("decided by the policy");
            // The first call may write on the pooled connection before its FIN is in (a
            // loaded machine): the connection's failure then. Every later call connects anew.
            if call == 0 && error.kind() == FailureKind::Connection {
                continue;
            }
            assert_eq!(error.kind(), FailureKind::Refused, "{error}");
        }
        server.restart();
        let outcome = closed.try_acquire_outcome("fresh", 1).await.unwrap();
        assert!(outcome.failure().is_none(), "{:?}", outcome.failure());
        assert!(outcome.decision().is_allowed());
    });
    assert_eq!(closed.failures().total(), 5);
}

#[test]
fn a_server_that_is_not_there_is_a_clear_error_within_the_timeout() {
    let addr = format!("127.0.0.1:{}", free_port());
    let clock = ManualClock::starting_at(T0);
    // Refused at once: the generous timeout, so that a call a loaded machine delayed past
    // `SHORT` is not a timeout where the test wants the refusal.
    let closed = limiter_timing_out_after(&addr, FailurePolicy::FailClosed, &clock, super::TIMEOUT);
    for _ in 0..5 {
        let (decision, error) = timed(&closed, "k");
        assert!(!decision.is_allowed());
        let error = error.expect("decided by the policy");
        assert!(!error.is_timeout());
        let text = error.to_string();
        assert!(
            text.contains(&format!("memcached at {addr} is unreachable")),
            "{text}"
        );
        assert!(text.to_lowercase().contains("refused"), "{text}");
    }
    assert_eq!(closed.failures().errors, 5);
    // An address that does not resolve is refused when the backend is made.
    assert!(MemcachedBackend::connect(MemcachedConfig::new("not an address")).is_err());
    assert!(
        MemcachedBackend::connect(MemcachedConfig::new(&addr).timeout(Duration::ZERO)).is_err()
    );
}

/// A "server" on a free loopback port that accepts one connection, reads its requests and never
/// replies; `closed` runs when the client closes the connection. Its address and its thread.
fn silent_server(closed: impl FnOnce() + Send + 'static) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let silent = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let mut sink = [0u8; 4096];
        while socket.read(&mut sink).is_ok_and(|n| n > 0) {}
        closed();
    });
    (addr, silent)
}

/// A "server" on a free loopback port that accepts one connection, reads a request and answers
/// `reply` (a line memcached never sends, for the tests). Its address and its thread.
fn one_line_server(reply: &'static [u8]) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let liar = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = socket.read(&mut request);
        let _ = socket.write_all(reply);
    });
    (addr, liar)
}

/// Issue 18: failures classified (timeout, refused, protocol), naming the server, as the Redis
/// backend's are: one error type across the backends. Before, every memcached failure but a
/// timeout was `FailureKind::Other` with no server, and a timeout named none either.
#[test]
fn failures_are_classified_and_name_the_server() {
    use floodgate::backend::FailureKind;
    let clock = ManualClock::starting_at(T0);
    let server_of = |addr: &str| format!("memcached://{addr}");
    let check = |error: &BackendError, kind: FailureKind, addr: &str| {
        assert_eq!(error.kind(), kind, "{error}");
        assert_eq!(error.server_address(), Some(&*server_of(addr)), "{error}");
        assert!(error.to_string().contains(addr), "{error}");
    };
    // Nothing listens: refused, at once (the generous timeout: not taken for a timeout when a
    // loaded machine delays the call past `SHORT`).
    let refusing = |addr: &str| {
        limiter_timing_out_after(addr, FailurePolicy::FailClosed, &clock, super::TIMEOUT)
            .with_breaker(None)
    };
    let addr = format!("127.0.0.1:{}", free_port());
    let closed = refusing(&addr);
    let error = timed(&closed, "k").1.expect("decided by the policy");
    check(&error, FailureKind::Refused, &addr);
    // A server that never answers: a timeout.
    let (addr, silent) = silent_server(|| {});
    let open = limiter(&addr, FailurePolicy::FailOpen, &clock);
    let error = timed(&open, "k").1.expect("decided by the policy");
    check(&error, FailureKind::Timeout, &addr);
    drop(open);
    silent.join().unwrap();
    // A reply memcached never sends: a protocol error. It comes at once: the generous timeout,
    // so that a reply a loaded machine delayed past `SHORT` is not taken for a timeout.
    let (addr, liar) = one_line_server(b"HELLO THERE\r\n");
    let open = limiter_timing_out_after(&addr, FailurePolicy::FailOpen, &clock, super::TIMEOUT);
    let error = timed(&open, "k").1.expect("decided by the policy");
    check(&error, FailureKind::Protocol, &addr);
    liar.join().unwrap();
    // The async path classifies the same.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let closed = refusing(&addr);
    let outcome = runtime
        .block_on(closed.try_acquire_outcome("k", 1))
        .unwrap();
    check(
        outcome.failure().expect("decided by the policy"),
        FailureKind::Refused,
        &addr,
    );
}

#[test]
fn a_server_that_never_answers_times_out() {
    // Accepts connections and reads requests, but never replies.
    let (closed_tx, closed_rx) = std::sync::mpsc::channel();
    let (addr, silent) = silent_server(move || {
        let _ = closed_tx.send(());
    });
    let clock = ManualClock::starting_at(T0);
    let open = limiter(&addr, FailurePolicy::FailOpen, &clock);
    let started = Instant::now();
    let (decision, error) = timed(&open, "k");
    assert!(started.elapsed() >= SHORT);
    assert!(decision.is_allowed());
    assert!(error.expect("decided by the policy").is_timeout());
    assert_eq!(open.failures().timeouts, 1);
    // The timed-out connection was closed at once, not pooled (its reply could still come): the
    // silent server sees the end while the limiter lives on.
    assert!(
        closed_rx.recv_timeout(CALL_BOUND).is_ok(),
        "connection kept"
    );
    silent.join().unwrap();
    drop(open);
}

#[test]
fn nonsense_replies_and_foreign_values_are_counted_errors() {
    // Every reply here comes at once: the generous timeout, so that a reply a loaded machine
    // delayed past `SHORT` (150 ms) is not a timeout where the test wants the reply's error.
    let limiter = |addr: &str, clock: &ManualClock| {
        limiter_timing_out_after(addr, FailurePolicy::FailOpen, clock, super::TIMEOUT)
    };
    // A "server" that greets every request with a line memcached never sends.
    let (addr, liar) = one_line_server(b"HELLO THERE\r\n");
    let clock = ManualClock::starting_at(T0);
    let open = limiter(&addr, &clock);
    let (decision, error) = timed(&open, "k");
    assert!(decision.is_allowed());
    let error = error.expect("decided by the policy").to_string();
    assert!(error.contains("unexpected reply from memcached"), "{error}");
    assert_eq!(open.failures().errors, 1);
    liar.join().unwrap();

    // A cell that someone else filled with text.
    let server = MemcachedServer::start();
    let open = limiter(&server.addr(), &clock);
    let cell = open.cell_key("k", open.cell_index(T0)).unwrap();
    server.set(&cell, "abc");
    let (decision, error) = timed(&open, "k");
    assert!(decision.is_allowed());
    let error = error.expect("decided by the policy").to_string();
    assert!(error.contains("non-numeric"), "{error}");
    // A cell of the window (not the one incremented) holding text.
    let older = open.cell_key("k2", open.cell_index(T0) - 3).unwrap();
    server.set(&older, "12x");
    let error = timed(&open, "k2")
        .1
        .expect("decided by the policy")
        .to_string();
    assert!(error.contains("not a count"), "{error}");
    assert_eq!(open.failures().errors, 2);
    assert_eq!(open.failures().timeouts, 0);
}

#[test]
fn a_denial_stands_when_its_take_back_times_out_and_the_connection_is_dropped() {
    // A scripted "server": answers the decision with a full window, then never answers the decr.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (closed_tx, closed_rx) = std::sync::mpsc::channel();
    let script = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let mut request = Vec::new();
        let mut chunk = [0u8; 4096];
        while !String::from_utf8_lossy(&request).contains("\r\nget ") || !request.ends_with(b"\r\n")
        {
            let read = socket.read(&mut chunk).unwrap();
            assert!(read > 0, "closed before the request");
            request.extend_from_slice(&chunk[..read]);
        }
        let text = String::from_utf8_lossy(&request).into_owned();
        let cell = text
            .split("\r\n")
            .find_map(|line| line.strip_prefix("incr "))
            .and_then(|rest| rest.split(' ').next())
            .unwrap()
            .to_owned();
        let reply = format!("11\r\nVALUE {cell} 0 2\r\n11\r\nEND\r\n");
        socket.write_all(reply.as_bytes()).unwrap();
        // Read the decr, never answer; report when the client hangs up.
        while socket.read(&mut chunk).is_ok_and(|n| n > 0) {}
        let _ = closed_tx.send(());
    });
    let clock = ManualClock::starting_at(T0);
    let open = limiter(&addr, FailurePolicy::FailOpen, &clock);
    let started = Instant::now();
    let (decision, error) = timed(&open, "k");
    // memcached decided (a full window): fail-open does not turn it into an admission.
    assert!(error.is_none());
    assert!(!decision.is_allowed());
    assert!(started.elapsed() >= SHORT, "did not wait for the take-back");
    assert_eq!(open.failures().total(), 0);
    // The connection, with a reply possibly still on its way, was closed, not pooled.
    assert!(
        closed_rx.recv_timeout(CALL_BOUND).is_ok(),
        "connection kept"
    );
    script.join().unwrap();
    drop(open);
}

#[test]
fn backend_timeouts_of_zero_or_past_an_hour_are_refused_not_a_panic_later() {
    for bad in [Duration::ZERO, Duration::from_secs(3601), Duration::MAX] {
        let config = MemcachedConfig::new("127.0.0.1:1").timeout(bad);
        assert!(MemcachedBackend::connect(config).is_err(), "{bad:?}");
    }
}

/// memcached's `incr` wraps at 2^64: a cell someone else set to 18446744073709551615 read 0
/// after this request's increment, and the request was admitted on a count that held nothing
/// it took. An increment that leaves less than its own `n` is a counted error.
#[test]
fn a_cell_that_wraps_on_increment_is_a_counted_error_not_a_count() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let closed = limiter(&server.addr(), FailurePolicy::FailClosed, &clock);
    let cell = closed.cell_key("k", closed.cell_index(T0)).unwrap();
    server.set(&cell, &u64::MAX.to_string());
    let (decision, error) = timed(&closed, "k");
    let error = error.expect("decided by the policy").to_string();
    assert!(
        error.contains("wrapped") && error.contains(&cell),
        "{error}"
    );
    assert!(!decision.is_allowed(), "fail closed: {decision:?}");
    assert_eq!(closed.failures().errors, 1);
}

/// A "server" that answers its first decision on a connection whole, and cuts the connection
/// after the first line of the second (the `incr`'s count: that request was carried out). It
/// counts the decision requests it receives, on every connection.
fn server_closing_mid_reply() -> (String, std::sync::Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let requests = std::sync::Arc::new(AtomicU64::new(0));
    let counted = std::sync::Arc::clone(&requests);
    std::thread::spawn(move || {
        for socket in listener.incoming() {
            let Ok(mut socket) = socket else { return };
            let requests = std::sync::Arc::clone(&counted);
            std::thread::spawn(move || {
                let mut pending = Vec::new();
                let mut chunk = [0u8; 4096];
                for answered in 1.. {
                    // One decision: `add … noreply`, its data line, `incr`, then `get`.
                    while !(String::from_utf8_lossy(&pending).contains("\r\nget ")
                        && pending.ends_with(b"\r\n"))
                    {
                        match socket.read(&mut chunk) {
                            Ok(read) if read > 0 => pending.extend_from_slice(&chunk[..read]),
                            _ => return,
                        }
                    }
                    requests.fetch_add(1, Ordering::SeqCst);
                    let text = String::from_utf8_lossy(&pending).into_owned();
                    pending.clear();
                    let cell = text
                        .split("\r\n")
                        .find_map(|line| line.strip_prefix("incr "))
                        .and_then(|rest| rest.split(' ').next())
                        .unwrap()
                        .to_owned();
                    if answered == 1 {
                        let reply = format!("1\r\nVALUE {cell} 0 1\r\n1\r\nEND\r\n");
                        let _ = socket.write_all(reply.as_bytes());
                    } else {
                        let _ = socket.write_all(b"2\r\n");
                        let _ = socket.shutdown(std::net::Shutdown::Both);
                        return;
                    }
                }
            });
        }
    });
    (addr, requests)
}

/// A pooled connection that the server closes mid-reply: the request was carried out (its
/// increment was answered), so it is not sent again on a fresh connection, which would count
/// its permits twice. The call is decided by the policy, with the cut named. Blocking and async.
#[test]
fn a_connection_cut_mid_reply_is_not_retried() {
    let clock = ManualClock::starting_at(T0);
    let (addr, requests) = server_closing_mid_reply();
    let closed = limiter(&addr, FailurePolicy::FailClosed, &clock);
    assert!(timed(&closed, "k").0.is_allowed());
    let (decision, error) = timed(&closed, "k");
    assert!(!decision.is_allowed());
    let error = error.expect("decided by the policy").to_string();
    assert!(error.contains("mid-reply"), "{error}");
    assert_eq!(
        requests.load(Ordering::SeqCst),
        2,
        "the cut request was sent again"
    );

    let (addr, requests) = server_closing_mid_reply();
    let closed = limiter(&addr, FailurePolicy::FailClosed, &clock);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let first = closed.try_acquire_outcome("k", 1).await.unwrap();
        assert!(first.decision().is_allowed(), "{:?}", first.failure());
        let (decision, error) = closed
            .try_acquire_outcome("k", 1)
            .await
            .unwrap()
            .into_parts();
        assert!(!decision.is_allowed());
        let error = error.expect("decided by the policy").to_string();
        assert!(error.contains("mid-reply"), "{error}");
    });
    assert_eq!(
        requests.load(Ordering::SeqCst),
        2,
        "async: the cut request was sent again"
    );
}

/// memcached at its connection limit greets a new connection with `ERROR Too many open
/// connections` and closes it: the error names that, not "a count was expected", and is a
/// refused connection (a real memcached's: `a_server_at_its_connection_limit_…` below).
#[test]
fn a_server_out_of_connections_is_named_as_such() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let full = std::thread::spawn(move || {
        let (mut socket, _) = listener.accept().unwrap();
        let _ = socket.write_all(b"ERROR Too many open connections\r\n");
    });
    let clock = ManualClock::starting_at(T0);
    let closed = limiter(&addr, FailurePolicy::FailClosed, &clock);
    let (decision, error) = timed(&closed, "k");
    assert!(!decision.is_allowed());
    let error = error.expect("decided by the policy");
    assert_eq!(
        error.kind(),
        floodgate::backend::FailureKind::Refused,
        "{error}"
    );
    let error = error.to_string();
    assert!(
        error.contains("replying ERROR Too many open connections: its connection limit"),
        "{error}"
    );
    full.join().unwrap();
}

/// Opens connections to `server`, each asked `version`, keeping those memcached serves in
/// `held`, until one is refused (`ERROR Too many open connections`, its limit reached).
fn fill_to_the_limit(server: &MemcachedServer, held: &mut Vec<std::net::TcpStream>) {
    for _ in 0..64 {
        let mut stream = std::net::TcpStream::connect(server.addr()).unwrap();
        // A hang bound only: memcached answers at once.
        stream.set_read_timeout(Some(CALL_BOUND)).unwrap();
        stream.write_all(b"version\r\n").unwrap();
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        while !reply.ends_with(b"\r\n") && stream.read(&mut byte).unwrap() == 1 {
            reply.push(byte[0]);
        }
        let reply = String::from_utf8_lossy(&reply);
        if reply.starts_with("VERSION ") {
            held.push(stream);
        } else {
            assert_eq!(reply, "ERROR Too many open connections\r\n");
            return;
        }
    }
    panic!("memcached served 64 more connections past its limit");
}

/// memcached past its connection limit (`memcached -c`) accepts a connection, answers `ERROR
/// Too many open connections` and closes it, never reading the request: the server is
/// unavailable, a refused connection (as a closed port: told to the breaker, decided by the
/// policy), with a message naming the server and the limit, and nothing counted. Blocking and
/// async. Before: `Script` ("script error at memcached://…: memcached replied ERROR Too many
/// open connections"), and the async call counted its request in `left_counted`.
#[test]
fn a_server_at_its_connection_limit_refuses_the_call_naming_the_server() {
    use floodgate::backend::FailureKind;
    let server = MemcachedServer::start_with_max_conns(24);
    let clock = ManualClock::starting_at(T0);
    // Breaker off: every call reaches memcached.
    let limiter = limiter_timing_out_after(
        &server.addr(),
        FailurePolicy::FailClosed,
        &clock,
        Duration::from_secs(30),
    )
    .with_breaker(None);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut held = Vec::new();
    let (mut refused, mut answered) = (0, 0);
    for round in 0.. {
        // A connection memcached closes late (a helper's) can free a place after the fill: the
        // call is then answered, and the fill goes on.
        assert!(round < 5, "memcached kept answering past its limit");
        fill_to_the_limit(&server, &mut held);
        let blocking = timed(&limiter, "k");
        let async_call = runtime
            .block_on(limiter.try_acquire_outcome("k", 1))
            .unwrap()
            .into_parts();
        let mut all_refused = true;
        for (decision, error) in [blocking, async_call] {
            let Some(error) = error else {
                answered += 1;
                all_refused = false;
                continue;
            };
            refused += 1;
            assert_eq!(error.kind(), FailureKind::Refused, "{error}");
            let message = error.to_string();
            for part in [
                format!("memcached://{}", server.addr()),
                "Too many open connections".into(),
                "connection limit".into(),
            ] {
                assert!(message.contains(&part), "{message}");
            }
            assert!(!decision.is_allowed());
        }
        if all_refused {
            break;
        }
    }
    assert_eq!(limiter.failures().errors, refused);
    assert_eq!(limiter.failures().timeouts, 0);
    // memcached never read the refused requests: nothing to give back or left counted.
    assert_eq!(limiter.reclaims(), Default::default());
    drop(held);
    let cell = limiter.cell_index(T0);
    assert_eq!(
        server.count(&limiter.cell_key("k", cell).unwrap()),
        answered
    );
}

/// A blocking call that finds all 128 connections of its backend busy until its deadline never
/// got one and sent nothing: a "not sent" timeout, decided by the policy and counted, not told
/// to the circuit breaker (the calls holding the connections report their own failures). The
/// connections are held by exchanges whose caller timed out on a frozen memcached after
/// writing its request: each is finished on a thread of its own, with its connection, within
/// the grace (an hour here). Before: a plain timeout counted against the breaker, which (2
/// failures) opened at the second call.
#[test]
fn a_call_that_never_got_a_connection_is_not_sent_and_leaves_the_breaker_closed() {
    use floodgate::backend::{BreakerConfig, BreakerState};
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let timeout = Duration::from_secs(1);
    let config = MemcachedConfig::new(server.addr())
        .timeout(timeout)
        .grace(Duration::from_secs(3600))
        .lazy();
    let backend = MemcachedBackend::connect(config).unwrap();
    let window = SlidingWindow::new(10, Duration::from_secs(60), 60).unwrap();
    let holders = MemcachedLimiter::with_clock(
        &backend,
        "hold",
        window,
        FailurePolicy::FailClosed,
        clock.clone(),
    )
    .unwrap()
    .with_breaker(None);
    let breaker = BreakerConfig::new(2, Duration::from_secs(5), Duration::from_secs(60)).unwrap();
    let limiter =
        MemcachedLimiter::with_clock(&backend, "wait", window, FailurePolicy::FailClosed, clock)
            .unwrap()
            .with_breaker(Some(breaker));
    server.pause();
    // Each holder writes its request (the kernel accepts the connection for the frozen
    // memcached), times out and leaves its connection to a finisher. A holder whose own
    // deadline passed before its write (its thread held) holds none: more are started until
    // 128 hold one.
    let mut holding = 0;
    for round in 0.. {
        assert!(round < 10, "only {holding} holders wrote their request");
        if holding == 128 {
            break;
        }
        let holders = &holders;
        let errors: Vec<String> = std::thread::scope(|scope| {
            let calls: Vec<_> = (holding..128)
                .map(|i| {
                    scope.spawn(move || {
                        let (_, error) = timed(holders, &format!("h{round}-{i}"));
                        error.expect("memcached is frozen").to_string()
                    })
                })
                .collect();
            calls.into_iter().map(|call| call.join().unwrap()).collect()
        });
        holding += errors
            .iter()
            .filter(|error| error.contains("no answer within"))
            .count();
    }
    for call in 1..=3 {
        let (decision, error) = timed(&limiter, "k");
        let error = error.expect("decided by the policy");
        assert!(error.is_timeout(), "{error}");
        let message = error.to_string();
        assert!(message.contains("not sent"), "{message}");
        assert!(message.contains("all 128 connections"), "{message}");
        assert!(!decision.is_allowed());
        assert_eq!(
            limiter.breaker().unwrap().state(),
            BreakerState::Closed,
            "after call {call}"
        );
    }
    assert_eq!(limiter.failures().timeouts, 3);
    assert_eq!(limiter.failures().short_circuited, 0);
    server.resume();
}
