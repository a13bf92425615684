//! Property: a capped `Keyed` decides exactly as an unbounded map of limiters for as long as the
//! keys that hold state fit in the cap — dropping idle keys never changes a decision, and no live
//! key is evicted while an idle one could go instead.

use std::collections::HashMap;
use std::time::Duration;

use floodgate::keyed::WhenFull;
use floodgate::{Algorithm, FixedWindow, Gcra, Keyed, ManualClock, Rate, TokenBucket};
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Anchored,
    Aligned,
    Bucket,
    Gcra,
}

fn run(
    kind: Kind,
    ops: &[(u8, u16, u32)],
    cap: usize,
    when_full: WhenFull,
) -> Result<(), TestCaseError> {
    let ms = Duration::from_millis;
    match kind {
        Kind::Anchored => {
            check_against_model(|| FixedWindow::new(3, ms(5)).unwrap(), ops, cap, when_full)
        }
        Kind::Aligned => check_against_model(
            || FixedWindow::aligned(3, ms(5)).unwrap(),
            ops,
            cap,
            when_full,
        ),
        Kind::Bucket => check_against_model(
            || TokenBucket::new(Rate::per_second(400), 3).unwrap(),
            ops,
            cap,
            when_full,
        ),
        Kind::Gcra => check_against_model(
            || Gcra::new(Rate::per_second(250), 2).unwrap(),
            ops,
            cap,
            when_full,
        ),
    }
}

fn check_against_model<A: Algorithm>(
    make: impl Fn() -> A,
    ops: &[(u8, u16, u32)],
    cap: usize,
    when_full: WhenFull,
) -> Result<(), TestCaseError> {
    let clock = ManualClock::starting_at(1_000_000_000);
    let model = make();
    let keyed: Keyed<u8, A, ManualClock> = Keyed::builder(make())
        .clock(clock.clone())
        .max_keys(cap)
        .shards(1)
        .when_full(when_full)
        .build()
        .unwrap();
    let mut states: HashMap<u8, u64> = HashMap::new();
    for &(key, advance_tenths_ms, n) in ops {
        clock.advance(Duration::from_micros(u64::from(advance_tenths_ms) * 100));
        let now = floodgate::Clock::now_nanos(&clock);
        let n = n.min(model.limit() as u32);
        let state = states.get(&key).copied().unwrap_or(0);
        let key_live = !model.is_idle(state, now);
        let others_live = states
            .iter()
            .filter(|&(&other, &s)| other != key && !model.is_idle(s, now))
            .count();
        if !key_live && others_live >= cap {
            // The cap is genuinely exceeded: from here the policy may change decisions.
            prop_assert_eq!(keyed.stats().evicted_live, 0);
            return Ok(());
        }
        let step = model.decide(state, now, n);
        if let Some(next) = step.next {
            states.insert(key, next);
        }
        let got = keyed.try_acquire(&key, n).unwrap();
        prop_assert_eq!(got, step.decision, "key {} at {} n {}", key, now, n);
        prop_assert!(keyed.len() <= cap);
    }
    let stats = keyed.stats();
    prop_assert_eq!((stats.evicted_live, stats.refused_new_keys), (0, 0));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn capped_keyed_matches_an_unbounded_model(
        kind in prop_oneof![Just(Kind::Anchored), Just(Kind::Aligned), Just(Kind::Bucket), Just(Kind::Gcra)],
        ops in prop::collection::vec((0u8..10, 0u16..40, 1u32..=3), 1..200),
        cap in 1usize..=6,
        evict in any::<bool>(),
    ) {
        let when_full = if evict { WhenFull::EvictLeastUsed } else { WhenFull::DenyNewKeys };
        run(kind, &ops, cap, when_full)?;
    }
}
