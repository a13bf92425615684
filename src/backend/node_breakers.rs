//! [`NodeBreakers`]: one [`CircuitBreaker`] per node of a store (a Redis Cluster's masters), so
//! that one node's outage opens the breaker for its own calls only.
//!
//! A call names its node (the master that owns its key's slot, by the backend's copy of the
//! slot map) or none (one server; a slot whose owner is not known yet): a named node's breaker
//! is made on its first call, and calls that name none share one breaker.
//!
//! Lookup: the map is published through an [`arc_swap::ArcSwap`], so a call's lookup takes a
//! read guard (a thread-local debt slot), a hash lookup and an `Arc` clone of its node's breaker
//! (held until the call reports). Adding a node copies the map under a mutex, re-checking first,
//! so concurrent first calls of one node get the one breaker. A Redis limiter drops the
//! breakers of the nodes its backend's copy of the slot map no longer names (a master failed
//! over, its slots all moved) at its first call after each read of the map: no call goes to
//! such a node, so its open breaker would never be probed. At most [`MAX_NODE_BREAKERS`]
//! nodes are kept: a node past that first drops the closed breakers, and if none is closed it
//! shares the breaker of calls that name no node.

use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{BreakerConfig, BreakerState, CircuitBreaker};
use crate::clock::{Clock, QuantaClock};

/// The most nodes a [`NodeBreakers`] keeps a breaker for (a Redis Cluster's advised maximum is
/// 1,000 nodes).
pub const MAX_NODE_BREAKERS: usize = 4_096;

/// Node addresses are the cluster's own (from `CLUSTER SLOTS`), not callers' input: ahash.
type ByNode<C> = HashMap<Arc<str>, Arc<CircuitBreaker<C>>, ahash::RandomState>;

/// One [`CircuitBreaker`] per node, all of one [`BreakerConfig`] and clock: a node's failures
/// open its own breaker, and a success on one node does not reset another's run of failures.
/// Calls that name no node (one server, a key whose node is not known) share one breaker,
/// [`shared`](Self::shared).
///
/// ```
/// use floodgate::backend::{BreakerConfig, BreakerState, NodeBreakers};
/// use floodgate::ManualClock;
/// use std::time::Duration;
/// let config = BreakerConfig::new(2, Duration::from_millis(100), Duration::from_secs(1))?;
/// let breakers = NodeBreakers::with_clock(config, ManualClock::new());
/// let (down, up) = ("redis://10.0.0.1:7000", "redis://10.0.0.2:7000");
/// for _ in 0..2 {
///     breakers.node(down).admit().unwrap().failed();
///     breakers.node(up).admit().unwrap().succeeded(); // resets nothing on `down`
/// }
/// assert_eq!(breakers.node(down).state(), BreakerState::Open);
/// assert_eq!(breakers.node(up).state(), BreakerState::Closed);
/// assert_eq!(breakers.state(), BreakerState::Open); // the most open of them
/// # Ok::<(), floodgate::ConfigError>(())
/// ```
pub struct NodeBreakers<C = QuantaClock> {
    config: BreakerConfig,
    clock: C,
    shared: Arc<CircuitBreaker<C>>,
    by_node: arc_swap::ArcSwap<ByNode<C>>,
    /// Serialises adding a node (readers never take it).
    adding: Mutex<()>,
    /// Short-circuited calls of breakers dropped from the map.
    dropped_short_circuited: AtomicU64,
    /// The generation of the node list [`drop_unnamed`](Self::drop_unnamed) last kept to.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    named_generation: AtomicU64,
}

impl<C: Clock> fmt::Debug for NodeBreakers<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeBreakers")
            .field("config", &self.config)
            .field("state", &self.state())
            .field("nodes", &self.by_node.load().len())
            .field("short_circuited", &self.short_circuited())
            .finish_non_exhaustive()
    }
}

impl NodeBreakers<QuantaClock> {
    /// Breakers of `config` on the default clock.
    ///
    /// ```
    /// use floodgate::backend::{BreakerState, NodeBreakers};
    /// let breakers = NodeBreakers::new(Default::default());
    /// assert_eq!(breakers.state(), BreakerState::Closed);
    /// ```
    pub fn new(config: BreakerConfig) -> Self {
        Self::with_clock(config, QuantaClock::new())
    }
}

impl<C: Clock + Clone> NodeBreakers<C> {
    /// Breakers of `config` whose back-offs run on `clock`.
    ///
    /// ```
    /// use floodgate::backend::{BreakerConfig, NodeBreakers};
    /// use floodgate::ManualClock;
    /// let breakers = NodeBreakers::with_clock(BreakerConfig::default(), ManualClock::new());
    /// assert_eq!(*breakers.config(), BreakerConfig::default());
    /// ```
    pub fn with_clock(config: BreakerConfig, clock: C) -> Self {
        NodeBreakers {
            config,
            shared: Arc::new(CircuitBreaker::with_clock(config, clock.clone())),
            clock,
            by_node: arc_swap::ArcSwap::from_pointee(HashMap::default()),
            adding: Mutex::new(()),
            dropped_short_circuited: AtomicU64::new(0),
            named_generation: AtomicU64::new(0),
        }
    }

    /// The breaker of `node`, made on its first call. At most [`MAX_NODE_BREAKERS`] nodes are
    /// kept: a new node past that first drops the closed breakers, and if every kept one is
    /// open it gets the [`shared`](Self::shared) breaker.
    ///
    /// ```
    /// use floodgate::backend::NodeBreakers;
    /// use std::sync::Arc;
    /// let breakers = NodeBreakers::new(Default::default());
    /// let a = breakers.node("redis://10.0.0.1:7000");
    /// assert!(Arc::ptr_eq(&a, &breakers.node("redis://10.0.0.1:7000")));
    /// assert!(!Arc::ptr_eq(&a, &breakers.node("redis://10.0.0.2:7000")));
    /// ```
    pub fn node(&self, node: &str) -> Arc<CircuitBreaker<C>> {
        if let Some(breaker) = self.by_node.load().get(node) {
            return Arc::clone(breaker);
        }
        let _adding = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.by_node.load_full();
        if let Some(breaker) = current.get(node) {
            return Arc::clone(breaker);
        }
        let mut next: ByNode<C> = (*current).clone();
        if next.len() >= MAX_NODE_BREAKERS {
            next.retain(|_, breaker| {
                let keep = breaker.state() != BreakerState::Closed;
                if !keep {
                    // SeqCst: a statistics counter off the hot path.
                    self.dropped_short_circuited
                        .fetch_add(breaker.short_circuited(), Ordering::SeqCst);
                }
                keep
            });
            if next.len() >= MAX_NODE_BREAKERS {
                // Every kept node's breaker is open: this node's calls share the breaker of
                // calls that name no node, until a slot frees up.
                return Arc::clone(&self.shared);
            }
        }
        let breaker = Arc::new(CircuitBreaker::with_clock(self.config, self.clock.clone()));
        next.insert(node.into(), Arc::clone(&breaker));
        self.by_node.store(Arc::new(next));
        breaker
    }

    /// The breaker a call on `node` goes through: that node's, or, for `None`, the
    /// [`shared`](Self::shared) one.
    pub(crate) fn for_call(&self, node: Option<&str>) -> NodeBreaker<'_, C> {
        match node {
            Some(node) => NodeBreaker::Node(self.node(node)),
            None => NodeBreaker::Shared(&self.shared),
        }
    }
}

impl<C> NodeBreakers<C> {
    /// The configuration of every breaker.
    ///
    /// ```
    /// use floodgate::backend::{BreakerConfig, NodeBreakers};
    /// assert_eq!(NodeBreakers::new(BreakerConfig::default()).config().failures(), 5);
    /// ```
    pub fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The breaker of the calls that name no node: the only one for a single server, and a
    /// cluster's for a key whose node is not known (no slot map read yet).
    ///
    /// ```
    /// use floodgate::backend::{BreakerState, NodeBreakers};
    /// let breakers = NodeBreakers::new(Default::default());
    /// assert_eq!(breakers.shared().state(), BreakerState::Closed);
    /// ```
    pub fn shared(&self) -> &CircuitBreaker<C> {
        &self.shared
    }
}

impl<C: Clock> NodeBreakers<C> {
    /// The breaker of `node` if one was made (a call on it was admitted), without making one.
    ///
    /// ```
    /// use floodgate::backend::NodeBreakers;
    /// let breakers = NodeBreakers::new(Default::default());
    /// assert!(breakers.get("redis://10.0.0.1:7000").is_none());
    /// let _ = breakers.node("redis://10.0.0.1:7000");
    /// assert!(breakers.get("redis://10.0.0.1:7000").is_some());
    /// ```
    pub fn get(&self, node: &str) -> Option<Arc<CircuitBreaker<C>>> {
        self.by_node.load().get(node).cloned()
    }

    /// The nodes with a breaker, each with its state, in no particular order (the shared
    /// breaker is not listed).
    ///
    /// ```
    /// use floodgate::backend::{BreakerState, NodeBreakers};
    /// let breakers = NodeBreakers::new(Default::default());
    /// let _ = breakers.node("redis://10.0.0.1:7000");
    /// assert_eq!(breakers.nodes(), [("redis://10.0.0.1:7000".into(), BreakerState::Closed)]);
    /// ```
    pub fn nodes(&self) -> Vec<(Arc<str>, BreakerState)> {
        self.by_node
            .load()
            .iter()
            .map(|(node, breaker)| (Arc::clone(node), breaker.state()))
            .collect()
    }

    /// The most open state among the breakers (the shared one included): `Open` if any is
    /// open, else `HalfOpen` if any has its probe out, else `Closed`.
    ///
    /// ```
    /// use floodgate::backend::{BreakerState, NodeBreakers};
    /// assert_eq!(NodeBreakers::new(Default::default()).state(), BreakerState::Closed);
    /// ```
    pub fn state(&self) -> BreakerState {
        let map = self.by_node.load();
        let states = std::iter::once(self.shared.state()).chain(map.values().map(|b| b.state()));
        states.fold(BreakerState::Closed, |worst, state| match (worst, state) {
            (BreakerState::Open, _) | (_, BreakerState::Open) => BreakerState::Open,
            (BreakerState::HalfOpen, _) | (_, BreakerState::HalfOpen) => BreakerState::HalfOpen,
            _ => BreakerState::Closed,
        })
    }

    /// Calls short-circuited so far by all the breakers (those dropped from the map included).
    ///
    /// ```
    /// use floodgate::backend::NodeBreakers;
    /// assert_eq!(NodeBreakers::new(Default::default()).short_circuited(), 0);
    /// ```
    pub fn short_circuited(&self) -> u64 {
        let map = self.by_node.load();
        // SeqCst: as where it is added to.
        let dropped = self.dropped_short_circuited.load(Ordering::SeqCst);
        map.values().map(|b| b.short_circuited()).fold(
            self.shared.short_circuited().wrapping_add(dropped),
            u64::wrapping_add,
        )
    }
}

impl<C: Clock> NodeBreakers<C> {
    /// Drops the breakers of the nodes `named` no longer names, once per `generation` of the
    /// node list (a Redis Cluster's slot map as last read): no call goes to such a node, so its
    /// breaker, if open, would never be probed and would keep [`state`](Self::state) open.
    /// A node named again later gets a new breaker on its first call. `names` makes the test
    /// of whether a node is named, only when the generation is new.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn drop_unnamed<N: Fn(&str) -> bool>(
        &self,
        generation: u64,
        names: impl FnOnce() -> N,
    ) {
        // SeqCst: off the hot path's critical work (one load per call); no ordering to save.
        if self.named_generation.load(Ordering::SeqCst) == generation {
            return;
        }
        let _adding = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        // SeqCst: as above.
        if self.named_generation.swap(generation, Ordering::SeqCst) == generation {
            return;
        }
        let current = self.by_node.load_full();
        if current.is_empty() {
            return;
        }
        let named = names();
        if current.keys().all(|node| named(node)) {
            return;
        }
        let mut next: ByNode<C> = (*current).clone();
        next.retain(|node, breaker| {
            let keep = named(node);
            if !keep {
                // SeqCst: a statistics counter off the hot path.
                self.dropped_short_circuited
                    .fetch_add(breaker.short_circuited(), Ordering::SeqCst);
            }
            keep
        });
        self.by_node.store(Arc::new(next));
    }
}

/// The breaker one call goes through: a node's (held while the call is out) or the shared one.
pub(crate) enum NodeBreaker<'a, C> {
    Node(Arc<CircuitBreaker<C>>),
    Shared(&'a CircuitBreaker<C>),
}

impl<C> Deref for NodeBreaker<'_, C> {
    type Target = CircuitBreaker<C>;

    fn deref(&self) -> &CircuitBreaker<C> {
        match self {
            NodeBreaker::Node(breaker) => breaker,
            NodeBreaker::Shared(breaker) => breaker,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use std::time::Duration;

    fn breakers(failures: u32) -> NodeBreakers<ManualClock> {
        let config =
            BreakerConfig::new(failures, Duration::from_millis(100), Duration::from_secs(1))
                .unwrap();
        NodeBreakers::with_clock(config, ManualClock::new())
    }

    #[test]
    fn a_nodes_failures_open_its_breaker_alone_and_successes_elsewhere_do_not_reset_them() {
        let b = breakers(2);
        for _ in 0..2 {
            b.for_call(Some("down")).admit().unwrap().failed();
            b.for_call(Some("up")).admit().unwrap().succeeded();
            b.for_call(None).admit().unwrap().succeeded();
        }
        assert!(b.for_call(Some("down")).admit().is_none());
        assert!(b.for_call(Some("up")).admit().is_some());
        assert!(b.for_call(None).admit().is_some());
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.short_circuited(), 1);
        let mut nodes = b.nodes();
        nodes.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            nodes,
            [
                ("down".into(), BreakerState::Open),
                ("up".into(), BreakerState::Closed)
            ]
        );
    }

    #[test]
    fn concurrent_first_calls_of_a_node_share_one_breaker() {
        let b = Arc::new(breakers(1_000));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let b = Arc::clone(&b);
                std::thread::spawn(move || {
                    (0..100)
                        .map(|i| b.node(&format!("n{}", i % 10)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let seen: Vec<Vec<_>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        for calls in &seen {
            for (i, breaker) in calls.iter().enumerate() {
                let kept = b.get(&format!("n{}", i % 10)).unwrap();
                assert!(
                    Arc::ptr_eq(breaker, &kept),
                    "node n{} got two breakers",
                    i % 10
                );
            }
        }
        assert_eq!(b.nodes().len(), 10);
    }

    #[test]
    fn a_full_map_drops_closed_breakers_and_keeps_open_ones() {
        let b = breakers(1);
        // Every slot open: a new node shares the breaker of calls that name no node.
        let all_open = breakers(1);
        for i in 0..MAX_NODE_BREAKERS {
            all_open.node(&i.to_string()).admit().unwrap().failed();
        }
        let extra = all_open.node("extra");
        assert!(Arc::ptr_eq(&extra, &all_open.shared));

        b.node("open").admit().unwrap().failed();
        assert!(b.node("open").admit().is_none());
        for i in 0..MAX_NODE_BREAKERS - 1 {
            let _ = b.node(&i.to_string());
        }
        assert_eq!(b.nodes().len(), MAX_NODE_BREAKERS);
        let _ = b.node("one more");
        let nodes = b.nodes();
        assert_eq!(nodes.len(), 2, "the closed ones were dropped");
        assert_eq!(b.get("open").unwrap().state(), BreakerState::Open);
        assert_eq!(b.short_circuited(), 1);
    }
}
