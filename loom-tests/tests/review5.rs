#![cfg(floodgate_loom)]
//! loom model of `Sharded::admit` (the `bool` answer of the short path, issue 17) where its
//! callers must borrow: `admit` racing `try_acquire_on` admits every request while permits are
//! left and writes exactly the permits it reports, so that nothing is left after the limit.
//! `sharded.rs`'s `admit_racing_try_acquire_admits_exactly_the_limit` passes with an `admit`
//! that never borrows (its callers' home stripe serves the limit's half, the owner the other
//! half); this one does not, nor with a compare-exchange replaced by a store.

use std::sync::Arc;
use std::time::Duration;

use floodgate::{Limiter, ManualClock, Sharded};
use loom::thread;

fn builder() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    let bound = std::env::var("LOOM_MAX_PREEMPTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    builder.preemption_bound = Some(bound);
    builder
}

#[test]
fn admit_borrowing_racing_an_owner_admits_every_request_and_writes_what_it_reports() {
    // Limit 4 over two stripes (shares 2 and 2). `admit`'s callers share one home (loom runs
    // every model thread on one OS thread): three `admit`s there, one owner's request on
    // stripe 1. Four requests for four permits: none may be denied (whichever stripe is the
    // home, a third request there must borrow), and afterwards none is left (an admission
    // reported without its write would leave one).
    builder().check(|| {
        let limiter = Arc::new(
            Sharded::with_clock(4, Duration::from_secs(1), 2, ManualClock::new()).unwrap(),
        );
        let admitting: Vec<_> = [2usize, 1]
            .into_iter()
            .map(|requests| {
                let limiter = limiter.clone();
                thread::spawn(move || {
                    (0..requests).filter(|_| limiter.admit(1).unwrap()).count() as u64
                })
            })
            .collect();
        let owner = {
            let limiter = limiter.clone();
            thread::spawn(move || u64::from(limiter.try_acquire_on(1, 1).unwrap().is_allowed()))
        };
        let admitted: u64 = admitting
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum::<u64>()
            + owner.join().unwrap();
        assert_eq!(admitted, 4);
        // Every permit is written: nothing left on either stripe, by either path.
        assert_eq!(limiter.admit(1), Ok(false));
        for home in 0..2 {
            let d = limiter.try_acquire_on(home, 1).unwrap();
            assert!(!d.is_allowed(), "stripe {home} admitted a fifth request");
            assert_eq!(d.remaining(), 0);
        }
    });
}
