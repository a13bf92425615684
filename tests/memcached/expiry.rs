//! Every cell gets memcached's expiry (`window + cell`, rounded up, + 1 s), checked through
//! the protocol; one short test waits for a cell to expire on memcached's real clock (wall time
//! only as a hang bound).

use std::time::{Duration, Instant};

use floodgate::ManualClock;
use floodgate::SlidingWindow;
use floodgate::backend::FailurePolicy;
use floodgate::memcached::MemcachedLimiter;

use super::server::MemcachedServer;
use super::{SEC, T0, backend, decide, limiter};

#[test]
fn every_cell_is_written_with_its_ttl_and_increments_keep_it() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    let clock = ManualClock::starting_at(T0);
    let limiter = limiter(&backend, "ttl", 10, 60, &clock);
    assert_eq!(limiter.ttl_secs(), 62);
    let cell = limiter.cell_index(T0);
    for step in 0..3 {
        assert!(decide(&limiter, "k", 1).is_allowed());
        let key = limiter.cell_key("k", cell + step).unwrap();
        // memcached reports whole seconds left; its clock ticks once a second.
        let ttl = server.ttl(&key).expect("the cell exists");
        assert!((60..=62).contains(&ttl), "{key}: ttl {ttl}");
        clock.advance(Duration::from_secs(1));
    }
    // A later increment of an existing cell does not extend it; a denial neither.
    clock.set(T0);
    for _ in 0..8 {
        decide(&limiter, "k", 1);
    }
    let ttl = server.ttl(&limiter.cell_key("k", cell).unwrap()).unwrap();
    assert!((59..=62).contains(&ttl), "ttl {ttl}");
    // Cells that were only read were not created.
    assert_eq!(server.ttl(&limiter.cell_key("k", cell - 1).unwrap()), None);
    assert_eq!(server.ttl(&limiter.cell_key("k", cell + 3).unwrap()), None);
}

#[test]
fn an_old_cell_expires_in_memcached_and_its_permits_with_it() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    // 2 cells of 250 ms: a TTL of ceil(0.75 s) + 1 = 2 s, so memcached drops it after 1 to 2 s.
    let window = SlidingWindow::new(3, Duration::from_millis(500), 2).unwrap();
    // The clock stands still: only memcached's expiry can bring the permits back.
    let clock = ManualClock::starting_at(T0);
    let limiter =
        MemcachedLimiter::with_clock(&backend, "expiry", window, FailurePolicy::FailClosed, clock)
            .unwrap();
    assert_eq!(limiter.ttl_secs(), 2);
    let key = limiter.cell_key("k", T0 / (SEC / 4)).unwrap();
    // Memcached's own clock (whole seconds, ticking once a second) around the reads: the cell,
    // written with a 2 s TTL at a tick no earlier than `before`, lives until the clock reads
    // `before + 2` at the soonest. Read while it still read at most `before + 1`, the cell was
    // there throughout, however long each step took on the wall clock; after a longer stall it
    // may have expired already (the permits then came back, as below), and only the TTL read, if
    // any, is checked.
    let before = server.stat("time");
    let written = Instant::now();
    assert!(decide(&limiter, "k", 3).is_allowed());
    let next = decide(&limiter, "k", 1);
    let count = server.count(&key);
    // The cell carries its TTL, read through the protocol (memcached's clock, in whole seconds:
    // 2, or 1 if that clock ticked since the write). How long the cell then lives on the wall
    // clock depends on when memcached's once-a-second clock ticks, so it is not asserted; that it
    // expires is, with a hang bound of 15 times the TTL.
    let ttl = server.ttl(&key);
    if server.stat("time") <= before + 1 {
        assert!(!next.is_allowed(), "{next:?}");
        assert_eq!(count, 3);
        assert!(ttl.is_some_and(|ttl| (1..=2).contains(&ttl)), "ttl {ttl:?}");
    } else if let Some(ttl) = ttl {
        assert!((1..=2).contains(&ttl), "ttl {ttl}");
    }
    let deadline = written + Duration::from_secs(30);
    while server.get(&key).is_some() {
        assert!(Instant::now() < deadline, "{key} outlived its TTL");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Same cell on the caller's clock, but memcached forgot it: the permits are back.
    assert!(decide(&limiter, "k", 3).is_allowed());
}
