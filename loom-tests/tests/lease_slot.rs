//! loom models of `LeaseSlot`, the lock-free serving side of `redis::LeasedKey`: servers
//! decrement one `generation | left` word while the owner retires the lease (learning its
//! unserved permits) and publishes the next. Every permit of every lease is served exactly once
//! or returned unserved, and no permit of an expired lease is served after a later lease's
//! expiry was read.
#![cfg(floodgate_loom)]

use floodgate::ManualClock;
use floodgate::loom_internals::LeaseSlotProbe;
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
