//! A 3-master Redis Cluster: the same limiters, unchanged, with every limiter key's Redis keys
//! in one slot.

use std::sync::Arc;

use floodgate::redis::RedisConfig;

use super::server::RedisCluster;
use super::{Acquire, backend, for_each_algorithm, hammer};

#[test]
fn limiters_run_unchanged_on_a_three_master_cluster() {
    let cluster = RedisCluster::start();
    let backend = backend(RedisConfig::cluster(cluster.urls()));
    for_each_algorithm(60, |what, make| {
        let limiter: Arc<dyn Acquire> = Arc::from(make(&backend, "cluster"));
        // Exact under 8 threads, on whichever master owns the key.
        assert_eq!(hammer(Arc::clone(&limiter), "k", 8, 15), 60, "{what}");

        // All Redis keys of one limiter key hash to one slot, and live on one node.
        let keys = limiter.redis_keys("k");
        let slots: Vec<String> = keys
            .iter()
            .map(|k| cluster.nodes[0].cli(&["CLUSTER", "KEYSLOT", k]))
            .collect();
        assert!(
            slots.iter().all(|s| *s == slots[0]),
            "{what}: {keys:?} in slots {slots:?}"
        );
        for key in &keys {
            assert_eq!(cluster.holders(key), 1, "{what}: {key}");
        }

        // Many keys spread over every master; each decision still runs in one slot.
        for i in 0..30 {
            let outcome = limiter.try_acquire(&format!("spread-{i}"), 1);
            assert!(
                outcome.failure().is_none(),
                "{what}: {:?}",
                outcome.failure()
            );
            assert!(outcome.decision().is_allowed());
        }
        for node in &cluster.nodes {
            let keys: u64 = node.cli(&["DBSIZE"]).parse().unwrap();
            assert!(keys > 0, "{what}: node {} holds no key", node.port);
        }

        // SCRIPT FLUSH on every master: the next decisions reload the script where needed.
        for node in &cluster.nodes {
            assert_eq!(node.cli(&["SCRIPT", "FLUSH"]), "OK");
        }
        for i in 0..30 {
            let outcome = limiter.try_acquire(&format!("spread-{i}"), 1);
            assert!(
                outcome.failure().is_none(),
                "{what} after flush: {:?}",
                outcome.failure()
            );
        }
        assert!(
            !limiter.try_acquire("k", 1).decision().is_allowed(),
            "{what}"
        );
    });
}
