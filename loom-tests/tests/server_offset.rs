//! loom model of the Redis backend's server-clock offset (`backend::ServerOffset`): samplers
//! racing their compare-exchange keep the best lower bound (pulled down only by a lower upper
//! bound), never a torn or invented value, and a late sampler from an older window never
//! replaces a newer one.
#![cfg(floodgate_loom)]

use floodgate::loom_internals::ServerOffsetProbe;
use floodgate_loom_tests::model;
use loom::sync::Arc;
use loom::thread;

/// µs in one window of the offset (one client second).
const SECOND: u64 = 1_000_000;
const BASE: u64 = 1_700_000_000_000_000;

#[test]
fn racing_samples_of_one_window_keep_the_best() {
    model(None, || {
        let clock = Arc::new(ServerOffsetProbe::default());
        // Sent at `client - rtt`, read by the server as it arrived: the upper ends are BASE.
        clock.sample(BASE + 1_010 - 300, 1_010 - 300, 1_010);
        let samplers: Vec<_> = [
            (BASE + 1_020 - 50, 1_020, 50),
            (BASE + 1_030 - 90, 1_030, 90),
        ]
        .into_iter()
        .map(|(server, client, rtt)| {
            let clock = clock.clone();
            thread::spawn(move || clock.sample(server, client - rtt, client))
        })
        .collect();
        // A reader meanwhile sees one of the samples, never anything else. It runs on a model
        // thread of its own: run on the thread that built the offset, loom explored 40
        // executions of this model.
        let reader = {
            let clock = clock.clone();
            thread::spawn(move || clock.offset().unwrap())
        };
        for sampler in samplers {
            sampler.join().unwrap();
        }
        let seen = reader.join().unwrap();
        assert!([BASE - 300, BASE - 50, BASE - 90].contains(&seen), "{seen}");
        assert_eq!(clock.offset(), Some(BASE - 50));
    });
}

#[test]
fn the_newest_window_wins_whatever_the_order() {
    model(None, || {
        let clock = Arc::new(ServerOffsetProbe::default());
        // A sample from second 0, reported late, races one from second 1 taken after the
        // server's clock stepped back 2 ms (both exact: sent and received at once).
        let old = {
            let clock = clock.clone();
            thread::spawn(move || clock.sample(BASE + 5, 5, 5))
        };
        let new = {
            let clock = clock.clone();
            thread::spawn(move || clock.sample(BASE - 2_000 + SECOND, SECOND, SECOND))
        };
        old.join().unwrap();
        new.join().unwrap();
        assert_eq!(clock.offset(), Some(BASE - 2_000));
    });
}
