//! Calls given up after their request was written: a dropped future, a timeout. memcached
//! increments first and decides after, so such a call's increment is on the server before its
//! caller can know the answer; it must not stay there unless its permits were handed out.
//!
//! A proxy between the limiter and memcached forwards requests at once and holds the replies
//! until the test releases them, and reports what passes: the test knows, without timing, that
//! memcached applied the increment (its reply came) while the caller has not read it.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use floodgate::ManualClock;
use floodgate::backend::FailurePolicy;
use floodgate::memcached::{MemcachedBackend, MemcachedConfig, MemcachedLimiter};
use floodgate::{Decision, SlidingWindow};
use tokio::sync::mpsc;

use super::server::MemcachedServer;
use super::{T0, TIMEOUT, backend, decide, limiter, stored_sum};

/// A hang bound on waiting for the proxy's next report, never reached by a working limiter.
const BOUND: Duration = Duration::from_secs(60);

/// What passed through the proxy.
#[derive(Debug)]
enum Event {
    /// Bytes from the limiter to memcached, and when they came.
    Request(String, std::time::Instant),
    /// Bytes from memcached to the limiter (forwarded once released).
    Reply,
    /// The limiter closed a connection.
    Closed,
}

/// Forwards requests to memcached at once; holds replies while `held`.
struct Proxy {
    addr: String,
    gate: Arc<(Mutex<bool>, Condvar)>,
    /// Whether a take-back (`decr`) closes the gate before it is forwarded: its reply is held.
    hold_take_backs: Arc<AtomicBool>,
    events: mpsc::UnboundedReceiver<Event>,
    /// The proxy's ends of the limiter's connections, to cut them ([`Proxy::cut`]).
    clients: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let (tx, events) = mpsc::unbounded_channel();
        let held = Arc::clone(&gate);
        let hold_take_backs = Arc::new(AtomicBool::new(false));
        let holding_take_backs = Arc::clone(&hold_take_backs);
        let clients = Arc::new(Mutex::new(Vec::new()));
        let accepted = Arc::clone(&clients);
        std::thread::spawn(move || {
            while let Ok((client, _)) = listener.accept() {
                accepted.lock().unwrap().push(client.try_clone().unwrap());
                let server = TcpStream::connect(&upstream).unwrap();
                let (client_in, server_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let up = tx.clone();
                let (gate, holding) = (Arc::clone(&held), Arc::clone(&holding_take_backs));
                std::thread::spawn(move || {
                    pipe(client_in, server_out, |bytes| {
                        // SeqCst: a flag set before the call, read here; the gate's mutex
                        // orders the rest.
                        if bytes.starts_with(b"decr ") && holding.load(Ordering::SeqCst) {
                            *gate.0.lock().unwrap() = true;
                        }
                        let _ = up.send(if bytes.is_empty() {
                            Event::Closed
                        } else {
                            Event::Request(
                                String::from_utf8_lossy(bytes).into_owned(),
                                std::time::Instant::now(),
                            )
                        });
                    })
                });
                let (down, held) = (tx.clone(), Arc::clone(&held));
                std::thread::spawn(move || {
                    pipe(server, client, |bytes| {
                        if bytes.is_empty() {
                            return;
                        }
                        let _ = down.send(Event::Reply);
                        let (lock, released) = &*held;
                        let mut held = lock.lock().unwrap();
                        while *held {
                            held = released.wait(held).unwrap();
                        }
                    })
                });
            }
        });
        Proxy {
            addr,
            gate,
            hold_take_backs,
            events,
            clients,
        }
    }

    /// Closes every connection the limiter opened so far, as a memcached that closed its
    /// idle connections would (restarted, or its `idle_timeout` passed): the limiter sees an
    /// end of stream at its next read.
    fn cut(&self) {
        for client in self.clients.lock().unwrap().drain(..) {
            let _ = client.shutdown(Shutdown::Both);
        }
    }

    fn hold(&self, held: bool) {
        let (lock, released) = &*self.gate;
        *lock.lock().unwrap() = held;
        released.notify_all();
    }

    async fn next(&mut self) -> Event {
        tokio::time::timeout(BOUND, self.events.recv())
            .await
            .expect("the proxy saw nothing for a minute")
            .expect("the proxy runs")
    }

    /// Waits for the first reply from memcached: it applied the increment.
    async fn until_reply(&mut self) {
        while !matches!(self.next().await, Event::Reply) {}
    }

    /// Waits until the permits of the call given up were taken back (a `decr` went out and
    /// memcached answered it), or its connection closed without one; says which.
    async fn take_back_or_close(&mut self) -> bool {
        let mut decr = false;
        loop {
            match self.next().await {
                Event::Request(request, _) if request.starts_with("decr ") => decr = true,
                Event::Reply if decr => return true,
                Event::Closed if !decr => return false,
                _ => {}
            }
        }
    }
}

/// Copies `from` to `to`, calling `seen` with each chunk before writing it (and with an empty
/// chunk at the end).
fn pipe(mut from: TcpStream, mut to: TcpStream, mut seen: impl FnMut(&[u8])) {
    let mut chunk = [0u8; 4096];
    loop {
        match from.read(&mut chunk) {
            Ok(0) | Err(_) => {
                seen(&[]);
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(read) => {
                seen(&chunk[..read]);
                if to.write_all(&chunk[..read]).is_err() {
                    return;
                }
            }
        }
    }
}

/// A limit of 10 per 10 s with 9 taken (directly on memcached), and a limiter of the same name
/// through a proxy, its backend built by `config`.
fn nine_of_ten(
    server: &MemcachedServer,
    clock: &ManualClock,
    config: impl FnOnce(MemcachedConfig) -> MemcachedConfig,
) -> (Proxy, MemcachedLimiter<ManualClock>) {
    nine_of_ten_under(server, clock, config, FailurePolicy::FailClosed)
}

/// As [`nine_of_ten`], the limiter through the proxy under `policy`.
fn nine_of_ten_under(
    server: &MemcachedServer,
    clock: &ManualClock,
    config: impl FnOnce(MemcachedConfig) -> MemcachedConfig,
    policy: FailurePolicy,
) -> (Proxy, MemcachedLimiter<ManualClock>) {
    let direct = limiter(&backend(server), "cancel", 10, 10, clock);
    for _ in 0..9 {
        assert!(decide(&direct, "k", 1).is_allowed());
    }
    let proxy = Proxy::start(server.addr());
    let backend =
        MemcachedBackend::connect(config(MemcachedConfig::new(&proxy.addr).lazy())).unwrap();
    let window = SlidingWindow::new(10, Duration::from_secs(10), 10).unwrap();
    let through =
        MemcachedLimiter::with_clock(&backend, "cancel", window, policy, clock.clone()).unwrap();
    (proxy, through)
}

/// Waits until every task spawned on the runtime ended (the exchanges, and the give-backs of
/// dropped admissions), yielding to them; bounded by [`BOUND`] against a hang.
async fn settled() {
    let runtime = tokio::runtime::Handle::current();
    let started = std::time::Instant::now();
    while runtime.metrics().num_alive_tasks() > 0 {
        assert!(started.elapsed() < BOUND, "an exchange never ended");
        tokio::task::yield_now().await;
    }
}

/// What memcached counts for "k" in the window at `T0` (its cells and the one after).
fn counted_at_t0(server: &MemcachedServer, through: &MemcachedLimiter<ManualClock>) -> u64 {
    let current = through.cell_index(T0);
    stored_sum(server, through, "k", current - 9..=current + 1)
}

/// Polls `call` until the proxy has seen memcached's reply to it (memcached applied its
/// increment), then drops it unanswered.
async fn drop_once_applied<F: std::future::Future>(proxy: &mut Proxy, call: F)
where
    F::Output: std::fmt::Debug,
{
    tokio::pin!(call);
    tokio::select! {
        biased;
        outcome = &mut call => panic!("answered though its reply is held: {outcome:?}"),
        () = proxy.until_reply() => {}
    }
}

/// Polls `call` once, which must not answer it yet (its exchange runs on in a task of its own).
async fn polled_once<F: std::future::Future + Unpin>(call: &mut F)
where
    F::Output: std::fmt::Debug,
{
    tokio::select! {
        biased;
        outcome = call => panic!("answered on its first poll: {outcome:?}"),
        () = std::future::ready(()) => {}
    }
}

/// A decision memcached made, on the async path.
async fn decided(limiter: &MemcachedLimiter<ManualClock>, n: u32) -> Decision {
    let outcome = limiter.try_acquire_outcome("k", n).await.unwrap();
    assert!(outcome.failure().is_none(), "{:?}", outcome.failure());
    outcome.decision()
}

/// 9 of 10 taken; a call for 5 (memcached would deny it) is dropped once memcached applied its
/// increment, before its reply is read. Before: the dropped future closed its connection, the
/// 5 stayed in the cell, and a call for 1 was denied until the cell left the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_whose_increment_was_written_leaves_nothing_counted() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let (mut proxy, through) = nine_of_ten(&server, &clock, |c| c.timeout(TIMEOUT));
    proxy.hold(true);
    drop_once_applied(&mut proxy, through.try_acquire_outcome("k", 5)).await; // dropped: memcached holds its increment, its reply is unread
    proxy.hold(false);
    let taken_back = proxy.take_back_or_close().await;
    settled().await; // the exchange counted what it did
    let counted = counted_at_t0(&server, &through);
    assert!(
        taken_back && counted == 9,
        "taken back: {taken_back}, counted: {counted}"
    );
    assert!(decided(&through, 1).await.is_allowed());
    assert_eq!(through.reclaims().left_counted, 0);
}

/// The same with an admitted call (9 of 10 taken, a call for 1): its permit was never handed
/// out, so it is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_that_memcached_admitted_gives_its_permits_back() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let (mut proxy, through) = nine_of_ten(&server, &clock, |c| c.timeout(TIMEOUT));
    proxy.hold(true);
    drop_once_applied(&mut proxy, through.try_acquire_outcome("k", 1)).await;
    proxy.hold(false);
    let given_back = proxy.take_back_or_close().await;
    settled().await; // the exchange counted what it did
    let counted = counted_at_t0(&server, &through);
    assert!(
        given_back && counted == 9,
        "given back: {given_back}, counted: {counted}"
    );
    assert_eq!(through.reclaims().given_back, 1);
    assert!(decided(&through, 1).await.is_allowed());
    assert!(!decided(&through, 1).await.is_allowed());
}

/// Timeouts tried in turn by a test whose call must time out after its request was written: a
/// machine stalled past a short one times the call out before memcached answers (legitimately),
/// and the test tries again, on a fresh server, with a longer one.
const TIMEOUTS: [Duration; 3] = [
    Duration::from_secs(3),
    Duration::from_secs(15),
    Duration::from_secs(60),
];

/// 9 of 10 taken; a call for 5 whose reply is held past its timeout gets its timeout in time
/// (decided by the policy), and its increment is taken back once the reply comes (within
/// `grace`).
async fn timed_out_after_its_write_leaves_nothing_counted(grace: Duration) {
    for timeout in TIMEOUTS {
        let server = MemcachedServer::start();
        let clock = ManualClock::starting_at(T0);
        let (mut proxy, through) =
            nine_of_ten(&server, &clock, |c| c.timeout(timeout).grace(grace));
        proxy.hold(true);
        let call = through.try_acquire_outcome("k", 5);
        tokio::pin!(call);
        let early = tokio::select! {
            biased;
            outcome = &mut call => Some(outcome),
            () = proxy.until_reply() => None,
        };
        if let Some(outcome) = early {
            // Timed out before memcached answered: try a longer timeout.
            assert!(outcome.unwrap().failure().expect("timed out").is_timeout());
            proxy.hold(false);
            continue;
        }
        let outcome = call.await.unwrap();
        assert!(outcome.failure().expect("the policy decided").is_timeout());
        assert!(!outcome.decision().is_allowed()); // fail closed
        proxy.hold(false);
        let taken_back = proxy.take_back_or_close().await;
        settled().await; // the exchange counted what it did
        let counted = counted_at_t0(&server, &through);
        assert!(
            taken_back && counted == 9,
            "taken back: {taken_back}, counted: {counted}"
        );
        assert_eq!(through.reclaims().left_counted, 0);
        assert!(decided(&through, 1).await.is_allowed());
        return;
    }
    panic!("memcached never answered a call before its timeout (up to {TIMEOUTS:?})");
}

/// 9 of 10 taken; a call for 5 whose reply is held past its timeout gets its timeout in time
/// (decided by the policy), and its increment is taken back once the reply comes (within the
/// grace, here a hang bound). Before: the timeout closed the connection, the 5 stayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_times_out_after_its_write_leaves_nothing_counted() {
    timed_out_after_its_write_leaves_nothing_counted(BOUND).await;
}

/// A call dropped before its request was written sends nothing: on a current-thread runtime
/// its exchange's task runs only after the drop, connects, finds its caller gone, and closes
/// the connection without a byte.
#[tokio::test(flavor = "current_thread")]
async fn a_call_dropped_before_its_write_sends_nothing() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let (mut proxy, through) = nine_of_ten(&server, &clock, |c| c.timeout(TIMEOUT));
    {
        let call = through.try_acquire_outcome("k", 1);
        tokio::pin!(call);
        polled_once(&mut call).await;
    }
    match proxy.next().await {
        Event::Closed => {}
        event => panic!("a call dropped before its write sent {event:?}"),
    }
    let current = through.cell_index(T0);
    assert_eq!(
        stored_sum(&server, &through, "k", current - 9..=current + 1),
        9
    );
    assert_eq!(through.reclaims(), Default::default());
    assert!(decided(&through, 1).await.is_allowed());
}

/// The blocking path: a call whose timeout passes after its write returns its timeout in time,
/// and hands its connection to a thread that reads the reply and takes the increment back
/// (9 of 10 taken, a call for 5, or for 1 that memcached admitted: given back). Before: the
/// caller closed the connection with the increment in place (the window read 14, or 10, until
/// the cell left it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_call_that_times_out_after_its_write_leaves_nothing_counted() {
    'n: for (n, given_back) in [(5, 0), (1, 1)] {
        for timeout in TIMEOUTS {
            let server = MemcachedServer::start();
            let clock = ManualClock::starting_at(T0);
            let (mut proxy, through) =
                nine_of_ten(&server, &clock, |c| c.timeout(timeout).grace(BOUND));
            let through = Arc::new(through);
            proxy.hold(true);
            let call = {
                let through = Arc::clone(&through);
                tokio::task::spawn_blocking(move || through.blocking_try_acquire_outcome("k", n))
            };
            tokio::pin!(call);
            let early = tokio::select! {
                biased;
                outcome = &mut call => Some(outcome),
                () = proxy.until_reply() => None, // memcached applied the increment
            };
            if let Some(outcome) = early {
                // Timed out before memcached answered: try a longer timeout.
                let outcome = outcome.unwrap().unwrap();
                assert!(outcome.failure().expect("timed out").is_timeout());
                proxy.hold(false);
                continue;
            }
            let outcome = call.await.unwrap().unwrap();
            assert!(outcome.failure().expect("the policy decided").is_timeout());
            proxy.hold(false);
            assert!(proxy.take_back_or_close().await, "n = {n}: no take-back");
            // The finisher counts, then closes its connection.
            while !matches!(proxy.next().await, Event::Closed) {}
            assert_eq!(through.reclaims().given_back, given_back, "n = {n}");
            assert_eq!(through.reclaims().left_counted, 0, "n = {n}");
            let counted = counted_at_t0(&server, &through);
            assert_eq!(counted, 9, "n = {n}");
            assert!(decided(&through, 1).await.is_allowed());
            continue 'n;
        }
        panic!("memcached never answered a call before its timeout (up to {TIMEOUTS:?})");
    }
}

/// An admission that reached the caller's end but was never returned (the future dropped
/// between the answer's arrival and its next poll) is given back too. On a current-thread
/// runtime the test runs the exchange's task to its end without polling the call again, then
/// drops the call with the answer waiting in it.
#[tokio::test(flavor = "current_thread")]
async fn an_admission_dropped_unread_gives_its_permits_back() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let (mut proxy, through) = nine_of_ten(&server, &clock, |c| c.timeout(TIMEOUT));
    {
        let call = through.try_acquire_outcome("k", 1);
        tokio::pin!(call);
        polled_once(&mut call).await;
        // The exchange's task runs (and ends) while the call is not polled.
        settled().await;
    } // dropped with the admission unread
    let given_back = proxy.take_back_or_close().await;
    settled().await; // the exchange counted what it did
    let counted = counted_at_t0(&server, &through);
    assert!(
        given_back && counted == 9,
        "given back: {given_back}, counted: {counted}"
    );
    assert_eq!(through.reclaims().given_back, 1);
    assert!(decided(&through, 1).await.is_allowed());
}

/// 9 of 10 taken; a call for 5, which memcached denies, whose take-back's reply is held past
/// the caller's timeout: the caller gets memcached's denial (at its deadline at the latest),
/// not a timeout the policy decides, and the take-back finishes once its reply comes, as on
/// the blocking path. Before: the async caller waited for the take-back, timed out, and a
/// FailOpen policy admitted the call memcached had denied (and the breaker counted a failure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denial_whose_take_back_outlasts_the_timeout_is_still_a_denial() {
    for timeout in TIMEOUTS {
        let server = MemcachedServer::start();
        let clock = ManualClock::starting_at(T0);
        let (mut proxy, through) = nine_of_ten_under(
            &server,
            &clock,
            |c| c.timeout(timeout).grace(BOUND),
            FailurePolicy::FailOpen,
        );
        proxy.hold_take_backs.store(true, Ordering::SeqCst);
        let started = std::time::Instant::now(); // the call's deadline is `timeout` after
        let outcome = through.try_acquire_outcome("k", 5).await.unwrap();
        if outcome.failure().is_some_and(|f| f.is_timeout()) {
            // Legitimate only if memcached's decision came after the deadline: the take-back,
            // sent right after it, went out after `started + timeout`.
            let decr_at = loop {
                match proxy.next().await {
                    Event::Request(request, at) if request.starts_with("decr ") => break at,
                    _ => {}
                }
            };
            assert!(
                decr_at >= started + timeout,
                "memcached denied the call {:?} before its deadline, yet it timed out",
                started + timeout - decr_at
            );
            proxy.hold(false);
            continue; // try a longer timeout
        }
        assert!(outcome.failure().is_none(), "{:?}", outcome.failure());
        assert!(!outcome.decision().is_allowed());
        assert_eq!(through.failures().total(), 0);
        proxy.hold_take_backs.store(false, Ordering::SeqCst);
        proxy.hold(false);
        assert!(proxy.take_back_or_close().await, "no take-back");
        settled().await; // the exchange counted what it did
        let counted = counted_at_t0(&server, &through);
        assert_eq!(counted, 9);
        assert_eq!(through.reclaims().left_counted, 0);
        assert!(decided(&through, 1).await.is_allowed());
        return;
    }
    panic!("memcached never decided a call before its timeout (up to {TIMEOUTS:?})");
}

/// A grace of `Duration::MAX` (no end) is a grace, not none, nor a panic: an admission dropped
/// unread is given back (before: `now + timeout + grace` overflowed in the future's drop, a
/// panic), and a call that times out after its write is finished after its deadline (before:
/// the deadline plus the grace overflowed to the deadline itself, no grace at all: the
/// increment stayed, left counted).
#[tokio::test(flavor = "current_thread")]
async fn a_grace_without_end_gives_an_admission_dropped_unread_back() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let (mut proxy, through) =
        nine_of_ten(&server, &clock, |c| c.timeout(TIMEOUT).grace(Duration::MAX));
    {
        let call = through.try_acquire_outcome("k", 1);
        tokio::pin!(call);
        polled_once(&mut call).await;
        settled().await;
    } // dropped with the admission unread
    assert!(proxy.take_back_or_close().await, "not given back");
    settled().await;
    assert_eq!(through.reclaims().given_back, 1);
    assert!(decided(&through, 1).await.is_allowed());
}

/// See [`a_grace_without_end_gives_an_admission_dropped_unread_back`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grace_without_end_finishes_a_call_that_timed_out_after_its_write() {
    timed_out_after_its_write_leaves_nothing_counted(Duration::MAX).await;
}

/// Admissions that reached their callers' ends while those callers were never polled again
/// (their futures kept, not dropped) hold no connection place: the 128 places are free for the
/// next call, and the admissions are still there when the calls are polled. Before: each such
/// admission carried its connection and its place to the caller's end, so 128 of them took
/// every place, and the next call waited its whole timeout for one and failed.
#[tokio::test(flavor = "current_thread")]
async fn admissions_waiting_for_callers_never_polled_again_hold_no_connection_place() {
    const PLACES: usize = 128; // the backend's async connection places
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let through = limiter(&backend(&server), "unpolled", 1_000, 10, &clock);
    let mut calls: Vec<_> = (0..PLACES)
        .map(|_| Box::pin(through.try_acquire_outcome("k", 1)))
        .collect();
    for call in &mut calls {
        polled_once(call).await;
    }
    // Every exchange runs to its end (its admission sent) while no call is polled again.
    settled().await;
    let next = through.try_acquire_outcome("k", 1).await.unwrap();
    assert!(next.failure().is_none(), "{:?}", next.failure());
    assert!(next.decision().is_allowed());
    for call in calls {
        let outcome = call.await.unwrap();
        assert!(outcome.failure().is_none(), "{:?}", outcome.failure());
        assert!(outcome.decision().is_allowed());
    }
    let current = through.cell_index(T0);
    assert_eq!(
        stored_sum(&server, &through, "k", current - 9..=current + 1),
        PLACES as u64 + 1
    );
    assert_eq!(
        through.reclaims(),
        floodgate::memcached::ReclaimCounts::default()
    );
}

/// An admission dropped unread is given back although the pooled connection memcached closed
/// meanwhile (its `idle_timeout`, a proxy's): 9 of 10 taken, a call for 1 admitted, its
/// exchange ended (its connection pooled), then the proxy cuts every connection and the call
/// is dropped. Before: the give-back took the stale pooled connection, its `decr` failed on
/// the closed stream, and the permit stayed counted (`left_counted` 1, the window at 10, a
/// call for 1 denied) though memcached was up the whole time.
#[tokio::test(flavor = "current_thread")]
async fn an_admission_dropped_unread_is_given_back_past_a_stale_pooled_connection() {
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let (mut proxy, through) = nine_of_ten(&server, &clock, |c| c.timeout(TIMEOUT));
    {
        let call = through.try_acquire_outcome("k", 1);
        tokio::pin!(call);
        polled_once(&mut call).await;
        // The exchange runs to its end (its connection pooled) while the call is not polled.
        settled().await;
        proxy.cut();
        while !matches!(proxy.next().await, Event::Closed) {} // the proxy's side is closed
    } // dropped with the admission unread
    settled().await; // the give-back ended, counted
    let reclaims = through.reclaims();
    assert_eq!((reclaims.given_back, reclaims.left_counted), (1, 0));
    assert_eq!(counted_at_t0(&server, &through), 9);
    assert!(decided(&through, 1).await.is_allowed());
}
