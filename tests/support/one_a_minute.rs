//! A keyed map of one permit a minute per key, one shard of at most 64 keys, on a manual clock:
//! the map `keyed_word_slots.rs` and `keyed_growth_panics.rs` share. Its first table (7 slots)
//! takes 5 keys, so the sixth key's insert grows it.

use std::time::Duration;

use floodgate::keyed::Key;
use floodgate::{FixedWindow, Keyed, ManualClock};

/// The map (see the module doc).
pub fn one_a_minute<K: Key>() -> Keyed<K, FixedWindow, ManualClock> {
    Keyed::builder(FixedWindow::new(1, Duration::from_secs(60)).unwrap())
        .clock(ManualClock::new())
        .max_keys(64)
        .shards(1)
        .build()
        .unwrap()
}
