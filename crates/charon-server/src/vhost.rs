//! One virtual host's shared state: its topology (exchanges, bindings, the registry of queue
//! handles), its policies, and its durable topology as last saved to the store.
//!
//! Each part sits behind a `std::sync` lock, taken only for routing and for declare/bind/delete,
//! never across an `.await` (critical sections are short; see docs/ARCHITECTURE.md).

use std::sync::{Arc, RwLock};

use charon_core::policy::{PolicyDefinition, effective_args, merge_operator};
use charon_core::{Policies, QueueArgs, QueueMeta, VHost};

use crate::handles::QueueHandle;
use crate::locks::{MutexExt, RwLockExt};
use crate::persist::{self, Durable, Persistence, StoreSlot};
use crate::topology_lock::Topology;

/// One virtual host: its topology (exchanges, bindings, queue handles) and its policies.
///
/// Lock order: never hold `policies` while taking `topology` (declare takes `topology` then reads
/// `policies`; policy changes release `policies` before visiting the queues).
#[derive(Debug)]
pub struct VHostState {
    /// The vhost's name.
    pub name: Arc<str>,
    /// Exchanges, bindings and the registry of queue actors, with the generation every write
    /// advances (`topology_lock.rs`).
    pub topology: Topology,
    /// Policies (set through `Broker::set_policy`, policies.rs).
    pub policies: RwLock<Policies>,
    /// Operator policies (`Broker::set_policy_of`, policies.rs), merged over `policies`.
    pub operator_policies: RwLock<Policies>,
    /// The broker's store slot (empty without a store).
    store: StoreSlot,
    /// The durable topology as last saved: methods that change nothing durable (transient and
    /// passive declares) write nothing and wait for no fsync.
    saved_topology: std::sync::Mutex<bytes::Bytes>,
    /// The delayed message exchanges' task (`exchange_delay`), started on first use.
    pub(crate) delayed: std::sync::OnceLock<crate::exchange_delay::DelayHandle>,
}

impl VHostState {
    /// An empty vhost without a store; `seed` varies server-made queue names across restarts.
    pub fn new(name: &str, seed: u64) -> Self {
        Self::with_store(name, seed, StoreSlot::default())
    }

    /// An empty vhost sharing the broker's store slot.
    pub(crate) fn with_store(name: &str, seed: u64, store: StoreSlot) -> Self {
        let mut v = VHost::new(name);
        v.seed_names(seed);
        Self {
            name: Arc::from(name),
            topology: Topology::new(v),
            policies: RwLock::new(Policies::default()),
            operator_policies: RwLock::new(Policies::default()),
            store,
            saved_topology: std::sync::Mutex::new(bytes::Bytes::new()),
            delayed: std::sync::OnceLock::new(),
        }
    }

    /// The store, when the broker runs with one.
    pub(crate) fn persistence(&self) -> Option<&Arc<Persistence>> {
        self.store.get()
    }

    /// Saves the durable topology after a change (no-op without a store, or when nothing
    /// durable changed); the write completes once it is on disk.
    pub(crate) fn save_topology(&self) -> Option<Durable> {
        let p = self.persistence()?;
        // Held while encoding and appending, so that saves reach the log in topology order
        // (lock order: `saved_topology`, then `topology`).
        let mut saved = self.saved_topology.lock_recover();
        let encoded = {
            let topo = self.topology.read_recover();
            persist::encode_topology(&topo, QueueHandle::store_id)
        };
        if *saved == encoded {
            return None;
        }
        *saved = encoded.clone();
        p.save_topology(&self.name, encoded)
    }

    /// Sets on exchange `name` of `topo` (this vhost's topology, write-locked by the caller) what
    /// the vhost's policies apply to it (charon-core `vhost/exchange_policy.rs`): after a declare.
    pub(crate) fn apply_exchange_policy(&self, topo: &mut VHost<QueueHandle>, name: &str) {
        let policies = self.policies.read_recover();
        topo.apply_exchange_policy(name, &policies);
    }

    /// Sets on every exchange what the vhost's policies apply to it (after a policy changed, and
    /// once the saved policies and topology are restored). Taking the topology's write lock
    /// advances its generation, so no connection's route cache keeps a route computed before.
    pub(crate) fn apply_exchange_policies(&self) {
        let mut topo = self.topology.write_recover();
        let policies = self.policies.read_recover();
        topo.apply_exchange_policies(&policies);
    }

    /// The settings queue `meta` runs with: its arguments overlaid with the policy and the
    /// operator policy that apply (merged by charon-core's `merge_operator`).
    pub fn effective_args(&self, meta: &QueueMeta) -> QueueArgs {
        let declared_overflow = charon_core::value::lookup(&meta.arguments, "x-overflow").is_some();
        let merged = self.policy_for(meta).definition;
        effective_args(&meta.args, declared_overflow, merged.as_ref())
    }

    /// The user policy and the operator policy that apply to queue `meta` (their names) and
    /// the definition they make together (RabbitMQ's `effective_policy_definition`).
    pub fn policy_for(&self, meta: &QueueMeta) -> AppliedPolicy {
        let ty = meta.args.queue_type;
        let policies = self.policies.read_recover();
        let ops = self.operator_policies.read_recover();
        let user = policies.for_queue_of(&meta.name, ty);
        let op = ops.for_queue_of(&meta.name, ty);
        AppliedPolicy {
            policy: user.map(|p| p.name.clone()),
            operator_policy: op.map(|p| p.name.clone()),
            definition: merge_operator(user.map(|p| &p.definition), op.map(|p| &p.definition)),
        }
    }
}

/// The policies that apply to one queue.
#[derive(Debug, Clone, Default)]
pub struct AppliedPolicy {
    /// The user policy's name.
    pub policy: Option<String>,
    /// The operator policy's name.
    pub operator_policy: Option<String>,
    /// Both definitions merged (`None`: no policy applies).
    pub definition: Option<PolicyDefinition>,
}
