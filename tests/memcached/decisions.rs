//! Serial decisions on a `ManualClock`: the sliding window of cells, `n > 1`, the `Decision`'s
//! fields, keys and bad input.

use std::time::Duration;

use floodgate::SlidingWindow;
use floodgate::backend::FailurePolicy;
use floodgate::backend::RequestError;
use floodgate::memcached::MemcachedLimiter;
use floodgate::{AcquireError, Decision, ManualClock};

use super::server::MemcachedServer;
use super::{SEC, backend, decide, limiter};

const S: Duration = Duration::from_secs(1);

#[test]
fn the_window_slides_cell_by_cell_with_exact_decisions() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    // Cell 1000 starts at 1000 s; the window is 10 cells of 1 s.
    let clock = ManualClock::starting_at(1000 * SEC);
    let limiter = limiter(&backend, "slide", 5, 10, &clock);

    assert_eq!(decide(&limiter, "k", 3), Decision::allow(5, 2, 10 * SEC));
    clock.advance(4 * S); // cell 1004
    assert_eq!(decide(&limiter, "k", 2), Decision::allow(5, 0, 10 * SEC));
    // Full: 3 in cell 1000 and 2 in 1004. One more waits for cell 1000 to leave (at 1010 s).
    assert_eq!(
        decide(&limiter, "k", 1),
        Decision::deny(5, 0, 6 * SEC, 10 * SEC)
    );
    // The denial took its permit back.
    assert_eq!(server.count(&limiter.cell_key("k", 1004).unwrap()), 2);
    clock.advance(5 * S + S / 2); // 1009.5 s: cell 1000 is still in the window
    assert_eq!(
        decide(&limiter, "k", 2),
        Decision::deny(5, 0, SEC / 2, 4 * SEC + SEC / 2)
    );
    clock.advance(S / 2); // 1010 s: cell 1000 has left, 3 permits are back
    assert_eq!(decide(&limiter, "k", 3), Decision::allow(5, 0, 10 * SEC));
    assert!(!decide(&limiter, "k", 1).is_allowed());
    // Other keys are other limits.
    assert_eq!(
        decide(&limiter, "other", 5),
        Decision::allow(5, 0, 10 * SEC)
    );
}

#[test]
fn bad_requests_are_errors_not_decisions() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    let clock = ManualClock::starting_at(1000 * SEC);
    let limiter = limiter(&backend, "bad", 5, 10, &clock);
    assert_eq!(
        limiter.blocking_try_acquire("k", 0).unwrap_err(),
        RequestError::Permits(AcquireError::ZeroPermits)
    );
    assert_eq!(
        limiter.blocking_try_acquire("k", 6).unwrap_err(),
        RequestError::Permits(AcquireError::ExceedsCapacity {
            requested: 6,
            capacity: 5
        })
    );
    let long = "x".repeat(250);
    let error = limiter.blocking_try_acquire(&long, 1).unwrap_err();
    assert!(
        matches!(error, RequestError::KeyTooLong { max: 250, .. }),
        "{error}"
    );
    // Nothing was written for them.
    assert_eq!(server.count(&limiter.cell_key("k", 1000).unwrap()), 0);
    // The longest key that fits works: "bad:" + key + ":" + 20 digits = 250 bytes.
    let longest = "y".repeat(250 - 4 - 1 - 20);
    assert!(decide(&limiter, &longest, 5).is_allowed());
    assert!(!decide(&limiter, &longest, 1).is_allowed());
}

#[test]
fn any_key_is_encoded_and_distinct_keys_stay_distinct() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    let clock = ManualClock::starting_at(1000 * SEC);
    let limiter = limiter(&backend, "keys", 1, 10, &clock);
    for key in [
        "bob smith",
        "bob%20smith",
        "bob_smith",
        "línea\r\nnueva",
        "",
        "a:b",
    ] {
        assert!(decide(&limiter, key, 1).is_allowed(), "{key:?}");
        assert!(!decide(&limiter, key, 1).is_allowed(), "{key:?}");
    }
    assert_eq!(
        limiter.cell_key("bob smith", 1000).unwrap(),
        "keys:bob%20smith:1000"
    );
    assert_eq!(server.count("keys:bob%20smith:1000"), 1);
}

#[test]
fn names_and_windows_are_validated() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    let window = SlidingWindow::new(5, Duration::from_secs(10), 10).unwrap();
    let build = |name: &str| {
        MemcachedLimiter::with_clock(
            &backend,
            name,
            window,
            FailurePolicy::FailOpen,
            ManualClock::new(),
        )
    };
    for bad in ["", "a b", "a:b", "é", &"n".repeat(230)] {
        assert!(build(bad).is_err(), "{bad:?}");
    }
    assert!(build("ok-name_1.v2").is_ok());
    // A share of the limit the local fallback cannot hold is refused at construction.
    assert!(FailurePolicy::local_fallback(0.0).is_err());
}

/// The largest request memcached is sent: 1,024 cells (the most a window may have) of the
/// longest key, so one `get` of 1,025 keys of 250 bytes (about 257 KB on one line), and the
/// largest limit a `SlidingWindow` takes. Decided exactly, nothing lost or counted twice.
#[test]
fn the_widest_window_of_the_longest_keys_and_a_huge_limit() {
    let server = MemcachedServer::start();
    let backend = backend(&server);
    let clock = ManualClock::starting_at(1_700_000_000 * SEC);
    let limit = (1 << 24) - 1;
    let window = SlidingWindow::new(limit, Duration::from_secs(1024), 1024).unwrap();
    let limiter = MemcachedLimiter::with_clock(
        &backend,
        "wide",
        window,
        FailurePolicy::FailClosed,
        clock.clone(),
    )
    .unwrap();
    let key = "k".repeat(250 - "wide:".len() - 1 - 20);
    let big = limit - 1;
    assert_eq!(
        decide(&limiter, &key, big),
        Decision::allow(u64::from(limit), 1, 1024 * SEC)
    );
    // Spread over many cells: each decision reads all 1,025.
    for _ in 0..3 {
        clock.advance(100 * S);
        let d = decide(&limiter, &key, 1);
        assert!(!d.is_allowed() || d.remaining() == 0, "{d:?}");
    }
    // Exactly one more fitted; the rest were taken back.
    let first = limiter.cell_index(1_700_000_000 * SEC);
    let counted: u64 = (first..=first + 300)
        .map(|i| server.count(&limiter.cell_key(&key, i).unwrap()))
        .sum();
    assert_eq!(counted, u64::from(limit));
    // A big request that cannot fit is denied until the first cell leaves the window.
    let d = decide(&limiter, &key, big);
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), Duration::from_secs(1024 - 300));
}
