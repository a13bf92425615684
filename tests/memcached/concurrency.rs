//! Many threads racing on one limit: floodgate never admits past it and takes back every denied
//! permit; the seeds' read-then-increment client, under the same load, over-admits.

use std::sync::Barrier;

use floodgate::ManualClock;

use super::naive::NaiveClient;
use super::server::MemcachedServer;
use super::{T0, backend, decide, limiter, stored_sum, top_up};

const THREADS: usize = 8;

/// `THREADS` threads run `rounds` rounds; in each, all threads wait at a barrier and then call
/// `attempt(thread)` at once. Returns the permits admitted in all.
fn race(rounds: usize, attempt: impl Fn(usize) -> u64 + Sync) -> u64 {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (barrier, attempt) = (&barrier, &attempt);
                s.spawn(move || {
                    (0..rounds)
                        .map(|_| {
                            barrier.wait();
                            attempt(thread)
                        })
                        .sum::<u64>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

#[test]
fn eight_threads_share_one_limit_exactly() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    let clock = ManualClock::starting_at(T0);
    let limiter = limiter(&backend, "exact", 100, 60, &clock);
    // 8 × 40 = 320 attempts for 100 permits, all in one cell.
    let admitted = race(40, |_| u64::from(decide(&limiter, "k", 1).is_allowed()));
    assert!(admitted <= 100, "admitted {admitted} > 100");
    // Every denied request took its permit back: serial requests find exactly what is left.
    let topped = top_up(&limiter, "k");
    assert_eq!(admitted + topped, 100, "admitted {admitted}, then {topped}");
    let current = limiter.cell_index(T0);
    assert_eq!(
        stored_sum(&server, &limiter, "k", current - 59..=current + 1),
        100
    );
}

#[test]
fn requests_for_several_permits_share_the_limit_exactly() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    let clock = ManualClock::starting_at(T0);
    let limiter = limiter(&backend, "several", 100, 60, &clock);
    // Threads ask 1, 2, 3 or 4 permits a time.
    let admitted = race(30, |thread| {
        let n = 1 + (thread % 4) as u32;
        let decision = decide(&limiter, "k", n);
        if decision.is_allowed() {
            assert!(decision.remaining() <= 100 - u64::from(n));
            u64::from(n)
        } else {
            0
        }
    });
    assert!(admitted <= 100, "admitted {admitted} permits > 100");
    assert_eq!(admitted + top_up(&limiter, "k"), 100);
}

#[test]
fn naive_read_then_increment_over_admits_where_floodgate_does_not() {
    const LIMIT: u64 = 20;
    const ROUNDS: usize = 10;
    let server = MemcachedServer::start();
    let clock = ManualClock::starting_at(T0);
    let current = T0 / super::SEC;

    // The seeds' client; in each round every thread reads, all wait, then those that saw room
    // increment: the check-then-increment race, forced.
    let read_done = Barrier::new(THREADS);
    let clients: Vec<_> = (0..THREADS)
        .map(|_| std::sync::Mutex::new(NaiveClient::connect(&server.addr(), "naive:k:", 60, 62)))
        .collect();
    let naive = race(ROUNDS, |thread| {
        let mut client = clients[thread].lock().unwrap();
        let room = client.read_sum(current) < LIMIT;
        read_done.wait();
        if room {
            client.increment(current);
        }
        u64::from(room)
    });

    // floodgate under the same threads and rounds.
    let backend = backend(&server);
    let limiter = limiter(&backend, "floodgate", LIMIT as u32, 60, &clock);
    let floodgate = race(ROUNDS, |_| u64::from(decide(&limiter, "k", 1).is_allowed()));

    eprintln!(
        "{THREADS} threads x {ROUNDS} rounds, limit {LIMIT}: naive read-then-increment admitted \
         {naive} ({} over), floodgate admitted {floodgate} ({} over)",
        naive.saturating_sub(LIMIT),
        floodgate.saturating_sub(LIMIT)
    );
    // Rounds 1-3 read 0, 8 and 16: all 8 threads pass each time.
    assert_eq!(
        naive, 24,
        "the naive client admits every thread that read the same sum"
    );
    assert!(floodgate <= LIMIT);
    assert_eq!(floodgate + top_up(&limiter, "k"), LIMIT);
}
