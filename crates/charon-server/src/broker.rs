//! Broker-wide state: virtual hosts, users and permissions ([`crate::access`]), id counters.
//!
//! Each vhost's topology sits behind a `std::sync::RwLock`, taken only for routing and for
//! declare/bind/delete, never across an `.await` (critical sections are short; see
//! docs/ARCHITECTURE.md).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use charon_core::policy::effective_args;
use charon_core::{Policies, QueueArgs, QueueMeta, QueueState, VHost};

use crate::access::{AccessControl, ConfigError};
use crate::config::Config;
use crate::persist::{self, Persistence};
use crate::queue::{self, QueueHandle};

/// One virtual host: its topology (exchanges, bindings, queue handles) and its policies.
///
/// Lock order: never hold `policies` while taking `topology` (declare takes `topology` then reads
/// `policies`; policy changes release `policies` before visiting the queues).
#[derive(Debug)]
pub struct VHostState {
    /// The vhost's name.
    pub name: Arc<str>,
    /// Exchanges, bindings and the registry of queue actors.
    pub topology: RwLock<VHost<QueueHandle>>,
    /// Policies (see [`crate::policies`]).
    pub policies: RwLock<Policies>,
    /// The store, when the broker runs with one (set once at start).
    pub persist: OnceLock<Arc<Persistence>>,
    /// The durable topology as last saved: methods that change nothing durable (transient and
    /// passive declares) write nothing and wait for no fsync.
    saved_topology: std::sync::Mutex<bytes::Bytes>,
}

impl VHostState {
    /// An empty vhost; `seed` varies server-made queue names across restarts.
    pub fn new(name: &str, seed: u64) -> Self {
        let mut v = VHost::new(name);
        v.seed_names(seed);
        Self {
            name: Arc::from(name),
            topology: RwLock::new(v),
            policies: RwLock::new(Policies::default()),
            persist: OnceLock::new(),
            saved_topology: std::sync::Mutex::new(bytes::Bytes::new()),
        }
    }

    /// Saves the durable topology after a change (no-op without a store); the ticket completes
    /// once it is on disk.
    pub fn save_topology(&self) -> Option<charon_store::Commit> {
        let p = self.persist.get()?;
        // Held while encoding and appending, so that saves reach the log in topology order
        // (lock order: `saved_topology`, then `topology`).
        let mut saved = self
            .saved_topology
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let encoded = {
            let topo = self.topology.read().unwrap_or_else(|p| p.into_inner());
            persist::encode_topology(&topo)
        };
        if *saved == encoded {
            return None;
        }
        *saved = encoded.clone();
        p.save_topology(&self.name, encoded)
    }

    /// The settings queue `meta` runs with: its arguments overlaid with the policy that applies.
    pub fn effective_args(&self, meta: &QueueMeta) -> QueueArgs {
        let policies = self.policies.read().unwrap_or_else(|p| p.into_inner());
        let declared_overflow = charon_core::value::lookup(&meta.arguments, "x-overflow").is_some();
        effective_args(
            &meta.args,
            declared_overflow,
            policies.for_queue(&meta.name).map(|p| &p.definition),
        )
    }
}

/// The running broker's shared state.
#[derive(Debug)]
pub struct Broker {
    config: Config,
    /// Vhosts by name; added and deleted at run time through [`crate::admin`].
    pub(crate) vhosts: RwLock<HashMap<String, Arc<VHostState>>>,
    access: AccessControl,
    /// Connection registry, message counters, start time (management and metrics).
    admin: crate::admin::AdminState,
    next_id: AtomicU64,
    /// Resource alarm (free disk under `disk_free_limit`): publishers are blocked while on.
    alarm: tokio::sync::watch::Sender<bool>,
}

impl Broker {
    /// Builds vhosts, users and permissions from the configuration (see
    /// [`AccessControl::from_config`] for the default `guest`).
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let mut vhosts = HashMap::new();
        vhosts.insert("/".to_string(), Arc::new(VHostState::new("/", seed)));
        for v in &config.vhosts {
            vhosts
                .entry(v.name.clone())
                .or_insert_with(|| Arc::new(VHostState::new(&v.name, seed ^ 0x9e37)));
        }
        let access = AccessControl::from_config(&config)?;
        Ok(Self {
            config,
            vhosts: RwLock::new(vhosts),
            access,
            admin: crate::admin::AdminState::new(seed),
            next_id: AtomicU64::new(1),
            alarm: tokio::sync::watch::channel(false).0,
        })
    }

    /// The configuration the broker runs with.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// A broker-unique id (connections, consumers).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Users and permissions.
    pub fn access(&self) -> &AccessControl {
        &self.access
    }

    /// Checks a login; `peer` is the client's address (loopback-only users).
    pub fn authenticate(&self, user: &str, password: &str, peer: IpAddr) -> bool {
        self.access.authenticate(user, password, peer)
    }

    /// The vhost, if it exists.
    pub fn vhost(&self, name: &str) -> Option<Arc<VHostState>> {
        self.vhosts
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Connection registry, counters and start time, for management and metrics.
    pub fn admin(&self) -> &crate::admin::AdminState {
        &self.admin
    }

    /// The resource alarm, for connections to watch.
    pub fn alarm(&self) -> tokio::sync::watch::Receiver<bool> {
        self.alarm.subscribe()
    }

    /// Sets or clears the resource alarm (logged on change).
    pub fn set_alarm(&self, on: bool) {
        self.alarm.send_if_modified(|v| {
            if *v == on {
                return false;
            }
            *v = on;
            if on {
                tracing::warn!(limit = self.config.disk_free_limit, "disk alarm set: free disk space is under disk_free_limit; publishers are blocked");
            } else {
                tracing::info!("disk alarm cleared: publishers may go on");
            }
            true
        });
    }

    /// All vhosts.
    pub fn vhosts(&self) -> Vec<Arc<VHostState>> {
        let mut v: Vec<_> = self
            .vhosts
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// A management API login: the user's tags when the password is right (from any address,
    /// as RabbitMQ's management plugin, which has no loopback restriction of its own for
    /// `guest` on localhost). An empty list means the user may not use the API.
    pub fn management_login(&self, user: &str, password: &str) -> Option<Vec<String>> {
        self.access.management_login(user, password)
    }

    /// Whether `user` has any permission on `vhost`.
    pub fn may_access(&self, user: &str, vhost: &str) -> bool {
        self.access.may_access_vhost(user, vhost)
    }
}

/// Makes the actor for a newly declared queue; passed to `VHost::declare_queue`. It runs with
/// its arguments overlaid with the vhost's applicable policy; a durable queue of a broker with a
/// store gets a new store id.
pub fn spawn_queue(meta: &QueueMeta, vhost: &Arc<VHostState>, vhost_name: &str) -> QueueHandle {
    let store_id = match vhost.persist.get() {
        Some(p) if meta.durable => Some(p.new_queue_id()),
        _ => None,
    };
    spawn_queue_with(meta, vhost, vhost_name, store_id, &[])
}

/// [`spawn_queue`] with its store id and the messages recovered from the store for it. They
/// come back with their bodies on disk (read when delivered), redelivered if they had been
/// delivered, expiring by the wall clock from their enqueue time.
pub(crate) fn spawn_queue_with(
    meta: &QueueMeta,
    vhost: &Arc<VHostState>,
    vhost_name: &str,
    store_id: Option<u64>,
    recovered: &[charon_store::RecoveredEntry],
) -> QueueHandle {
    let quorum = meta.args.queue_type == charon_core::QueueType::Quorum;
    let first_id = recovered.last().map_or(0, |e| e.id + 1);
    let (handle, rx) = QueueHandle::with_type(meta.name.clone(), quorum, store_id, first_id);
    let mut state = QueueState::new(meta.name.clone(), vhost.effective_args(meta));
    state.set_vhost(vhost_name);
    let persist = match (vhost.persist.get(), store_id) {
        (Some(p), Some(sid)) => {
            state.track_gone();
            Some((p.clone(), sid))
        }
        _ => None,
    };
    let mut persisted = std::collections::HashMap::with_capacity(recovered.len());
    let mut shapes = queue::PagedShapes::default();
    for e in recovered {
        let sm = &e.message;
        let message = shapes.get(
            &sm.exchange,
            &sm.routing_key,
            &sm.properties,
            u64::from(sm.body.len),
        );
        let mut expires_at = state.expiry_for(&message, sm.enqueue_ms);
        if let Some(own) = sm.expiry_ms {
            expires_at = Some(expires_at.map_or(own, |q| q.min(own)));
        }
        state.restore(e.id, message, expires_at, e.delivery_count > 0);
        persisted.insert(e.id, queue::Persisted::paged(sm.id));
    }
    if !recovered.is_empty() {
        // Length limits hold after recovery too (a policy may have lowered them).
        let args = state.args().clone();
        state.set_args(args);
    }
    let ctx = queue::QueueContext {
        vhost: vhost.clone(),
        auto_delete: meta.auto_delete,
        store: persist.map(|(p, sid)| queue::StoreSide::new(p, sid, persisted, shapes)),
    };
    queue::spawn(state, &handle, rx, ctx);
    handle
}

impl Broker {
    /// Opens the store under the data directory, restores durable definitions, policies and
    /// persistent messages, and keeps the store for what follows. Call once, inside the runtime.
    pub fn open_store(&self) -> Result<(), charon_store::OpenError> {
        let (p, rec) = Persistence::open(
            std::path::Path::new(&self.config.data_dir),
            self.config.message_memory_budget,
        )?;
        let mut restored = 0usize;
        let mut known = std::collections::HashSet::new();
        // Users, vhosts and permissions changed at run time (before the vhosts are visited).
        self.restore_access(&p, &rec);
        for v in self.vhosts() {
            let _ = v.persist.set(p.clone());
            if let Some(data) = persist::policies_of(&rec, &v.name) {
                self.restore_policies(&v, data);
            }
            if let Some(data) = persist::topology_of(&rec, &v.name) {
                let name = v.name.clone();
                let mut topo = v.topology.write().unwrap_or_else(|p| p.into_inner());
                let restored_ok = persist::restore_topology(&mut topo, data, |meta, sid| {
                    p.note_queue_id(sid);
                    known.insert(sid);
                    let msgs = rec.queues.get(&sid).map_or(&[][..], |m| m.as_slice());
                    restored += msgs.len();
                    spawn_queue_with(meta, &v, &name, Some(sid), msgs)
                });
                if restored_ok.is_none() {
                    tracing::warn!(vhost = %name, "the saved topology is damaged; restored what could be read");
                }
                drop(topo);
                drop(v.save_topology());
            }
        }
        // Messages of queues that no longer exist (deleted while a publish was on its way).
        for sid in rec.queues.keys().filter(|q| !known.contains(*q)) {
            p.purge(*sid);
        }
        tracing::info!(messages = restored, "store opened and recovered");
        Ok(())
    }

    /// The store, once opened (every vhost shares it).
    pub(crate) fn persistence(&self) -> Option<Arc<Persistence>> {
        self.vhosts
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .find_map(|v| v.persist.get().cloned())
    }

    /// Completes once everything written to the store so far is durable (no-op without one).
    pub async fn wait_durable(&self) {
        let Some(p) = self.persistence() else {
            return;
        };
        if let Some(c) = p.barrier() {
            let _ = c.await;
        }
    }

    /// Watches free disk space every second and sets the alarm under `disk_free_limit`.
    pub fn spawn_disk_monitor(self: &Arc<Self>) {
        let Some(p) = self.persistence() else {
            return;
        };
        let broker = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(b) = broker.upgrade() else { return };
                if let Some(free) = p.free_bytes() {
                    b.set_alarm(free < b.config.disk_free_limit);
                }
            }
        });
    }
}
