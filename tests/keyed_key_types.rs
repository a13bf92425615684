//! Every key type that was a key before the `Key` trait (any `Hash + Eq + Clone + Send + Sync +
//! 'static` type) is one again: arrays, socket addresses, `Option`s, tuples up to six, `Duration`,
//! `Cow<'static, str>`, `Arc<[u8]>`, `Arc<String>`, and a foreign type through `AnyKey`. Each
//! builds a `Keyed` and a `KeyedInFlight` and limits two keys apart (ManualClock: no time passes).

use std::borrow::Cow;
use std::fmt::Debug;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::Arc;
use std::time::Duration;

use floodgate::concurrency::KeyedInFlight;
use floodgate::keyed::{AnyKey, Key};
use floodgate::{Gcra, Keyed, ManualClock, Rate};

/// `a` and `b` are distinct keys: `a` is denied after its one permit, `b` is still allowed, in a
/// `Keyed` (burst 1, no time passing) and in a `KeyedInFlight` (limit 1, `a`'s permit held).
fn limits_two_keys_apart<K: Key + Debug>(a: K, b: K) {
    assert_ne!(a, b, "the test needs two distinct keys");
    let keyed: Keyed<K, _, _> = Keyed::builder(Gcra::new(Rate::per_second(1), 1).unwrap())
        .clock(ManualClock::new())
        .max_keys(16)
        .build()
        .unwrap();
    assert!(
        keyed.try_acquire(&a, 1).unwrap().is_allowed(),
        "{a:?} first"
    );
    assert!(
        !keyed.try_acquire(&a, 1).unwrap().is_allowed(),
        "{a:?} again"
    );
    assert!(
        keyed.try_acquire(&b, 1).unwrap().is_allowed(),
        "{b:?} first"
    );
    assert!(!keyed.check(&b).is_allowed(), "{b:?} again");
    assert!(!keyed.check(&a).is_allowed(), "{a:?} still denied");

    let in_flight: KeyedInFlight<K, _> =
        KeyedInFlight::with_clock(1, 16, ManualClock::new()).unwrap();
    let held = in_flight.try_acquire(&a, 1).unwrap().expect("a is free");
    assert!(
        in_flight.try_acquire(&a, 1).unwrap().is_none(),
        "{a:?} busy"
    );
    let other = in_flight.try_acquire(&b, 1).unwrap().expect("b is free");
    assert_eq!((in_flight.in_flight(&a), in_flight.in_flight(&b)), (1, 1));
    drop(held);
    assert_eq!(in_flight.in_flight(&a), 0);
    assert!(
        in_flight.try_acquire(&a, 1).unwrap().is_some(),
        "{a:?} freed"
    );
    drop(other);
}

#[test]
fn arrays_are_keys() {
    let mut second = [0u8; 16];
    second[15] = 1;
    limits_two_keys_apart([0u8; 16], second);
    limits_two_keys_apart([1u32, 2, 3, 4], [1u32, 2, 3, 5]);
    limits_two_keys_apart([String::from("a")], [String::from("b")]);
}

#[test]
fn socket_addresses_are_keys() {
    let v4 = |port| SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), port);
    let v6 = |port| SocketAddrV6::new(Ipv6Addr::LOCALHOST, port, 0, 0);
    limits_two_keys_apart(v4(80), v4(81));
    limits_two_keys_apart(v6(443), v6(444));
    limits_two_keys_apart(SocketAddr::V4(v4(80)), SocketAddr::V6(v6(80)));
    limits_two_keys_apart(SocketAddr::V4(v4(80)), SocketAddr::V4(v4(8080)));
}

#[test]
fn options_are_keys() {
    limits_two_keys_apart(Some(7u64), None);
    limits_two_keys_apart(Some(0u64), Some(1));
    limits_two_keys_apart(Some(String::from("a")), None);
}

#[test]
fn tuples_up_to_six_are_keys() {
    limits_two_keys_apart((1u8, 2u8), (1u8, 3u8));
    limits_two_keys_apart((1u8, 2u8, 3u8), (1u8, 2u8, 4u8));
    limits_two_keys_apart((10u8, 0u8, 0u8, 1u8), (10u8, 0u8, 0u8, 2u8));
    limits_two_keys_apart((1u8, 2u16, 3u32, 4u64, 5u8), (1u8, 2u16, 3u32, 4u64, 6u8));
    limits_two_keys_apart(
        (1u8, 2u16, 3u32, 4u64, "e", String::from("f")),
        (1u8, 2u16, 3u32, 4u64, "e", String::from("g")),
    );
}

#[test]
fn durations_cows_and_shared_pointers_are_keys() {
    limits_two_keys_apart(Duration::from_secs(1), Duration::from_nanos(1_000_000_001));
    limits_two_keys_apart(Cow::Borrowed("a"), Cow::Owned(String::from("b")));
    limits_two_keys_apart::<Arc<[u8]>>(Arc::from(&b"a"[..]), Arc::from(&b"b"[..]));
    limits_two_keys_apart(Arc::new(String::from("a")), Arc::new(String::from("b")));
}

#[test]
fn a_cow_key_is_found_borrowed_or_owned() {
    let keyed: Keyed<Cow<'static, str>, _, _> =
        Keyed::builder(Gcra::new(Rate::per_second(1), 1).unwrap())
            .clock(ManualClock::new())
            .build()
            .unwrap();
    assert!(keyed.check(&Cow::Borrowed("a")).is_allowed());
    assert!(!keyed.check(&Cow::Owned(String::from("a"))).is_allowed());
}

/// Stands in for a type of another crate (`uuid::Uuid`): no `Key` impl, none can be added here.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Foreign {
    id: u128,
}

#[test]
fn a_foreign_type_is_a_key_through_any_key() {
    limits_two_keys_apart(AnyKey(Foreign { id: 1 }), AnyKey(Foreign { id: 2 }));
    limits_two_keys_apart(
        AnyKey::from(Foreign { id: 0 }),
        AnyKey::from(Foreign { id: 1 << 100 }),
    );
}

#[test]
fn any_key_hashes_and_compares_as_its_inner_key() {
    use std::hash::BuildHasher;
    let state = std::collections::hash_map::RandomState::new();
    for id in [0, 1, u128::MAX] {
        let inner = Foreign { id };
        assert_eq!(
            state.hash_one(AnyKey(inner.clone())),
            state.hash_one(&inner)
        );
    }
    assert_eq!(AnyKey(Foreign { id: 3 }), AnyKey(Foreign { id: 3 }));
    assert_ne!(AnyKey(Foreign { id: 3 }), AnyKey(Foreign { id: 4 }));
    assert_eq!(AnyKey::from(Foreign { id: 5 }).0, Foreign { id: 5 });
}
