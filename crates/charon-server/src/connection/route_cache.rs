//! A connection's route cache: the queues its last routed (exchange, routing key) reached, at
//! the topology generation they were routed under (`topology_lock.rs`). A publisher sends to
//! one exchange and key over and over; while the vhost's topology has not been written to
//! since, routing again would give the same queues, so they are taken from here without the
//! topology lock, the exchange lookup or the binding and queue lookups (~200 instructions a
//! publish of scenario b).
//!
//! Only routes that depend on nothing but the topology, the exchange and the key are cached
//! (the caller's part: no headers read, no CC/BCC, no delayed exchange, no topic permissions);
//! any write to the topology — declare, delete, bind, unbind, a queue's own removal, recovery —
//! moves the generation, and the next publish routes afresh. The publish is still counted in
//! the exchange's statistics, through the exchange's shared counters.

use std::sync::Arc;

use charon_core::exchange::ExchangeStats;

use crate::handles::QueueHandle;
use crate::topology_lock::Topology;

/// One cached route (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct RouteCache {
    entry: Option<Entry>,
}

#[derive(Debug)]
struct Entry {
    generation: u64,
    exchange: Arc<str>,
    routing_key: Arc<str>,
    targets: Vec<QueueHandle>,
    stats: Arc<ExchangeStats>,
}

fn same(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

impl RouteCache {
    /// When `exchange`/`routing_key` is the cached route and `topology` has not been written
    /// since it was routed: its queues pushed onto `out`, the publish counted in the
    /// exchange's statistics, and true. Otherwise false, with nothing pushed.
    pub(crate) fn route(
        &self,
        topology: &Topology,
        exchange: &Arc<str>,
        routing_key: &Arc<str>,
        out: &mut Vec<QueueHandle>,
    ) -> bool {
        let Some(e) = &self.entry else {
            return false;
        };
        if e.generation != topology.generation()
            || !same(&e.routing_key, routing_key)
            || !same(&e.exchange, exchange)
        {
            return false;
        }
        out.extend(e.targets.iter().cloned());
        e.stats.record(e.targets.len());
        true
    }

    /// Remembers that `exchange`/`routing_key` routed to `targets` under `generation` (read
    /// while holding the topology's shared lock the routing ran under).
    pub(crate) fn remember(
        &mut self,
        generation: u64,
        exchange: &Arc<str>,
        routing_key: &Arc<str>,
        targets: &[QueueHandle],
        stats: &Arc<ExchangeStats>,
    ) {
        match &mut self.entry {
            Some(e) => {
                e.generation = generation;
                if !Arc::ptr_eq(&e.exchange, exchange) {
                    e.exchange = exchange.clone();
                }
                if !Arc::ptr_eq(&e.routing_key, routing_key) {
                    e.routing_key = routing_key.clone();
                }
                e.targets.clear();
                e.targets.extend_from_slice(targets);
                if !Arc::ptr_eq(&e.stats, stats) {
                    e.stats = stats.clone();
                }
            }
            None => {
                self.entry = Some(Entry {
                    generation,
                    exchange: exchange.clone(),
                    routing_key: routing_key.clone(),
                    targets: targets.to_vec(),
                    stats: stats.clone(),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::locks::RwLockExt;
    use charon_core::{ExchangeDeclare, QueueDeclare, VHost};
    use charon_protocol::FieldTable;
    use proptest::prelude::*;

    const QUEUES: [&str; 3] = ["q0", "q1", "q2"];
    const KEYS: [&str; 5] = ["q0", "q1", "q2", "k0", "k1"];

    #[derive(Debug, Clone)]
    enum Op {
        DeclareQueue(usize),
        DeleteQueue(usize),
        DeclareExchange,
        DeleteExchange,
        Bind(usize, usize),
        Unbind(usize, usize),
        /// A write that changes nothing (a passive look, a repeated bind).
        Touch,
        /// Publish to the default exchange (false) or `x` (true) with `KEYS[k]`.
        Publish(bool, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..3usize).prop_map(Op::DeclareQueue),
            (0..3usize).prop_map(Op::DeleteQueue),
            Just(Op::DeclareExchange),
            Just(Op::DeleteExchange),
            (0..3usize, 3..5usize).prop_map(|(q, k)| Op::Bind(q, k)),
            (0..3usize, 3..5usize).prop_map(|(q, k)| Op::Unbind(q, k)),
            Just(Op::Touch),
            (any::<bool>(), 0..5usize).prop_map(|(x, k)| Op::Publish(x, k)),
            (any::<bool>(), 0..5usize).prop_map(|(x, k)| Op::Publish(x, k)),
            (any::<bool>(), 0..5usize).prop_map(|(x, k)| Op::Publish(x, k)),
        ]
    }

    fn declare_queue(v: &mut VHost<QueueHandle>, name: &str) {
        let d = QueueDeclare {
            name: name.to_string(),
            ..QueueDeclare::default()
        };
        let _ = v.declare_queue(&d, 1, |m| QueueHandle::new(m.name.clone()).0);
    }

    /// What `prepare_publish` does for a cacheable publish: the cache, else routing under the
    /// shared lock and remembering it with the generation read under that lock.
    fn route_cached(
        cache: &mut RouteCache,
        topology: &Topology,
        x: &Arc<str>,
        k: &Arc<str>,
    ) -> Option<Vec<u64>> {
        let mut out = Vec::new();
        if !cache.route(topology, x, k, &mut out) {
            let topo = topology.read_recover();
            let ex = topo.exchange(x)?;
            topo.route_from(ex, &[k], None, &mut out).ok()?;
            cache.remember(topology.generation(), x, k, &out, &ex.stats);
        }
        Some(out.iter().map(QueueHandle::id).collect())
    }

    fn route_fresh(topology: &Topology, x: &str, k: &str) -> Option<Vec<u64>> {
        let mut out = Vec::new();
        topology
            .read_recover()
            .route(x, &[k], None, &mut out)
            .ok()?;
        Some(out.iter().map(QueueHandle::id).collect())
    }

    proptest! {
        /// Routing through the cache gives what routing under the lock gives, whatever
        /// declares, deletes (and re-declares: new handles under the same names), binds and
        /// unbinds come between publishes; and the exchange's statistics count each publish
        /// once either way.
        #[test]
        fn cached_routes_match_routing_under_the_lock(ops in prop::collection::vec(op(), 1..120)) {
            let topology = Topology::new(VHost::new("/"));
            let mut cache = RouteCache::default();
            let names: Vec<Arc<str>> = KEYS.iter().map(|k| Arc::from(*k)).collect();
            let (default_x, x): (Arc<str>, Arc<str>) = (Arc::from(""), Arc::from("x"));
            let xd = ExchangeDeclare {
                name: "x".into(),
                kind: "direct".into(),
                ..ExchangeDeclare::default()
            };
            let mut published: std::collections::HashMap<bool, u64> = Default::default();
            for op in ops {
                match op {
                    Op::DeclareQueue(q) => declare_queue(&mut topology.write_recover(), QUEUES[q]),
                    Op::DeleteQueue(q) => {
                        let _ = topology.write_recover().remove_queue(QUEUES[q]);
                    }
                    Op::DeclareExchange => {
                        let _ = topology.write_recover().declare_exchange(&xd);
                    }
                    Op::DeleteExchange => {
                        let _ = topology.write_recover().delete_exchange("x", false);
                        published.remove(&true);
                    }
                    Op::Bind(q, k) => {
                        let _ = topology.write_recover().bind_queue(QUEUES[q], "x", KEYS[k], &FieldTable::default());
                    }
                    Op::Unbind(q, k) => {
                        let _ = topology.write_recover().unbind_queue(QUEUES[q], "x", KEYS[k], &FieldTable::default());
                    }
                    Op::Touch => drop(topology.write_recover()),
                    Op::Publish(to_x, k) => {
                        let ex = if to_x { &x } else { &default_x };
                        let fresh = route_fresh(&topology, ex, &names[k]);
                        // `route_fresh` counted the publish too: count it in the model twice.
                        let cached = route_cached(&mut cache, &topology, ex, &names[k]);
                        prop_assert_eq!(&cached, &fresh);
                        if fresh.is_some() {
                            *published.entry(to_x).or_default() += 2;
                        }
                        let topo = topology.read_recover();
                        if let Some(e) = topo.exchange(ex) {
                            prop_assert_eq!(e.stats.get().0, published.get(&to_x).copied().unwrap_or(0));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_cached_route_is_used_until_the_topology_is_written() {
        let topology = Topology::new(VHost::new("/"));
        declare_queue(&mut topology.write_recover(), "q0");
        let mut cache = RouteCache::default();
        let (x, k): (Arc<str>, Arc<str>) = (Arc::from(""), Arc::from("q0"));
        let mut out = Vec::new();
        assert!(!cache.route(&topology, &x, &k, &mut out));
        let first = route_cached(&mut cache, &topology, &x, &k);
        assert!(
            cache.route(&topology, &x, &k, &mut out),
            "a hit after routing once"
        );
        assert_eq!(Some(out.iter().map(QueueHandle::id).collect()), first);
        // Another key misses; a write (even one that changes nothing) invalidates.
        assert!(!cache.route(&topology, &x, &Arc::from("q1"), &mut out));
        drop(topology.write_recover());
        assert!(!cache.route(&topology, &x, &k, &mut out));
        out.clear();
        let _ = topology.write_recover().remove_queue("q0");
        declare_queue(&mut topology.write_recover(), "q0");
        let again = route_cached(&mut cache, &topology, &x, &k);
        assert_ne!(again, first, "a re-declared queue is a new handle");
    }
}
