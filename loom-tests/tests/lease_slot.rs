//! loom models of `LeaseSlot`, the lock-free serving side of `redis::LeasedKey`: servers
//! decrement one `generation | left` word while the owner retires the lease (learning its
//! unserved permits) and publishes the next. Every permit of every lease is served exactly once
//! or returned unserved, and no permit of an expired lease is served after a later lease's
//! expiry was read; under the time model (`floodgate_loom_tests::ModelClock`), a permit is
//! served only on a clock read taken before the expiry of the lease it comes from, however the
//! clock moves between a server's read and its serve.
#![cfg(floodgate_loom)]

use floodgate::loom_internals::LeaseSlotProbe;
use floodgate::{Clock, ManualClock};
use floodgate_loom_tests::ModelClock;
use loom::sync::Arc;
use loom::thread;

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(f);
}

/// Two servers take one permit each (twice) while the owner retires a lease of 2 and publishes
/// one of 1: served + returned = granted, under every interleaving.
#[test]
fn every_permit_is_served_once_or_returned() {
    model(|| {
        let clock = Arc::new(ManualClock::starting_at(10));
        let slot = Arc::new(LeaseSlotProbe::default());
        slot.retire();
        slot.publish(2, 100);
        let servers: Vec<_> = (0..2)
            .map(|_| {
                let (slot, clock) = (slot.clone(), clock.clone());
                thread::spawn(move || {
                    (0..2).filter(|_| slot.serve(1, &*clock).is_some()).count() as u64
                })
            })
            .collect();
        let first_unserved = slot.retire();
        slot.publish(1, 200);
        let served: u64 = servers.into_iter().map(|s| s.join().unwrap()).sum();
        let second_unserved = slot.retire();
        assert_eq!(served + first_unserved + second_unserved, 2 + 1);
    });
}

/// The first lease has expired (the clock reads past it); the owner replaces it while a server
/// tries: the server may serve only from the new lease, never the old one on the new expiry.
#[test]
fn an_expired_lease_is_never_served_on_its_successor_expiry() {
    model(|| {
        let clock = Arc::new(ManualClock::starting_at(150));
        let slot = Arc::new(LeaseSlotProbe::default());
        slot.retire();
        slot.publish(2, 100);
        let server = {
            let (slot, clock) = (slot.clone(), clock.clone());
            thread::spawn(move || {
                (0..2).filter(|_| slot.serve(1, &*clock).is_some()).count() as u64
            })
        };
        let old_unserved = slot.retire();
        slot.publish(1, 200);
        let served = server.join().unwrap();
        assert_eq!(old_unserved, 2, "the expired lease served nothing");
        assert_eq!(served + slot.retire(), 1);
    });
}

/// The time model's clock moves across the lease's expiry (99 → 100) while a server may be
/// stalled anywhere between its clock read and its compare-exchange; the owner, on a read that
/// sees the lease expired, retires it and publishes the next (1 permit, until 300). The old
/// lease serves only on reads taken before its expiry (99), each permit once: its serves are
/// exactly the permits its retirement did not return; a read of 100 or later serves only from
/// the new lease.
#[test]
fn the_clock_moving_past_expiry_between_read_and_serve_never_serves_the_expired_lease() {
    model(|| {
        let clock = ModelClock::starting_at(99);
        let slot = Arc::new(LeaseSlotProbe::default());
        slot.retire();
        slot.publish(2, 100);
        let server = {
            let (slot, clock) = (slot.clone(), clock.clone());
            thread::spawn(move || {
                (0..3)
                    .filter_map(|_| slot.serve(1, &clock).map(|(_, read)| read))
                    .collect::<Vec<u64>>()
            })
        };
        // The driver: real time reaches the lease's expiry.
        clock.advance(1);
        // The owner: its own read sees the lease expired; it replaces it.
        assert!(clock.now_nanos() >= 100);
        let old_unserved = slot.retire();
        slot.publish(1, 300);
        let reads = server.join().unwrap();
        let new_unserved = slot.retire();
        let before_expiry = reads.iter().filter(|&&read| read < 100).count() as u64;
        let after_expiry = reads.len() as u64 - before_expiry;
        assert_eq!(
            before_expiry + old_unserved,
            2,
            "the old lease: served on reads before its expiry, or returned ({reads:?})"
        );
        assert_eq!(
            after_expiry + new_unserved,
            1,
            "the new lease: served or returned ({reads:?})"
        );
    });
}
