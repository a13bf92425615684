//! A keyed map's special keys (a word 0, stored words 0) checked as keys like any other: the
//! helpers `keyed_zero_key.rs` and `keyed_pair_slots.rs` share.

use std::time::Duration;

use floodgate::keyed::WhenFull;
use floodgate::{FixedWindow, Key, Keyed, ManualClock};

/// A map of two requests a minute per key, one shard (so every key shares its table with the
/// others, key 0 in their probe sequences), on a manual clock.
pub fn map<K: Key>(
    max_keys: usize,
    when_full: WhenFull,
) -> (Keyed<K, FixedWindow, ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let keyed = Keyed::builder(FixedWindow::new(2, Duration::from_secs(60)).unwrap())
        .clock(clock.clone())
        .max_keys(max_keys)
        .shards(1)
        .when_full(when_full)
        .build()
        .unwrap();
    (keyed, clock)
}

pub fn take<K: Key>(keyed: &Keyed<K, FixedWindow, ManualClock>, key: K) -> bool {
    keyed.try_acquire(&key, 1).unwrap().is_allowed()
}

/// `special` keys among `others`: each gets its own two permits, is found by `peek`, survives the
/// growth rebuilds the others bring, is swept when idle, and is forgotten by name.
pub fn held_found_moved_swept_forgotten<K: Key + std::fmt::Debug>(special: &[K], others: &[K]) {
    let (keyed, clock) = map::<K>(4096, WhenFull::DenyNewKeys);
    for key in special {
        assert_eq!(keyed.peek(key, 1).unwrap().remaining(), 1, "{key:?} absent");
        assert!(take(&keyed, key.clone()), "{key:?}");
    }
    for key in others {
        assert!(take(&keyed, key.clone()), "{key:?}");
    }
    assert_eq!(keyed.len(), special.len() + others.len());
    for key in special {
        assert_eq!(keyed.peek(key, 1).unwrap().remaining(), 0, "{key:?} found");
        assert!(take(&keyed, key.clone()), "{key:?}");
        assert!(
            !take(&keyed, key.clone()),
            "{key:?}: its own window, moved by growth"
        );
    }
    // Forgotten by name: fresh again, the others untouched.
    let first = &special[0];
    assert!(keyed.forget(first));
    assert!(!keyed.forget(first));
    assert_eq!(keyed.len(), special.len() + others.len() - 1);
    assert!(take(&keyed, first.clone()), "{first:?} forgotten");
    for key in &special[1..] {
        assert!(
            !take(&keyed, key.clone()),
            "{key:?} kept by the forget's rebuild"
        );
    }
    // Idle after the window: every key swept, then fresh.
    clock.advance(Duration::from_secs(61));
    assert_eq!(keyed.retain_recent(), special.len() + others.len());
    assert_eq!(keyed.len(), 0);
    for key in special {
        assert_eq!(keyed.peek(key, 1).unwrap().remaining(), 1, "{key:?} swept");
        assert!(take(&keyed, key.clone()) && take(&keyed, key.clone()));
        assert!(!take(&keyed, key.clone()));
    }
}
