//! Broker-wide state: virtual hosts ([`crate::vhost`]), users and permissions
//! ([`crate::access`]), the store ([`crate::persist`]), the resource alarm, id counters.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::access::{AccessControl, ConfigError};
use crate::config::Config;
use crate::locks::RwLockExt;
use crate::persist::{self, Persistence, StoreSlot};
use crate::queue;
pub use crate::vhost::VHostState;

/// The running broker's shared state.
#[derive(Debug)]
pub struct Broker {
    config: Config,
    /// Vhosts by name; added and deleted at run time through [`crate::admin`].
    pub(crate) vhosts: RwLock<HashMap<String, Arc<VHostState>>>,
    access: AccessControl,
    /// Connection registry, message counters, start time (management and metrics).
    admin: crate::admin::AdminState,
    /// The store, once opened ([`Broker::open_store`]); every vhost shares this slot.
    pub(crate) store: StoreSlot,
    next_id: AtomicU64,
    /// Resource alarms (free disk under `disk_free_limit`, memory over
    /// `vm_memory_high_watermark`): publishers are blocked while any is on.
    alarm: tokio::sync::watch::Sender<Alarms>,
    /// Connection, channel and queue limits and their counts.
    limits: Arc<crate::limits::Limits>,
    /// The dead-letter archive, once started ([`crate::archive`]).
    pub(crate) archive: std::sync::OnceLock<Arc<crate::archive::ArchiveService>>,
}

/// The resource alarms in force (RabbitMQ's `{resource, disk}` / `{resource, memory}`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Alarms {
    /// Free disk space is under `disk_free_limit`.
    pub disk: bool,
    /// The broker's memory is over `vm_memory_high_watermark`.
    pub memory: bool,
}

impl Alarms {
    /// Whether any alarm is on.
    pub fn any(self) -> bool {
        self.disk || self.memory
    }

    /// RabbitMQ's connection.blocked reason: "low on memory", "low on disk", "low on memory & disk".
    pub fn reason(self) -> String {
        let parts: Vec<&str> = [(self.memory, "memory"), (self.disk, "disk")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| *n)
            .collect();
        format!("low on {}", parts.join(" & "))
    }
}

impl Broker {
    /// Builds vhosts, users and permissions from the configuration (see
    /// [`AccessControl::from_config`] for the default `guest`).
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let store = StoreSlot::default();
        let mut vhosts = HashMap::new();
        vhosts.insert(
            "/".to_string(),
            Arc::new(VHostState::with_store("/", seed, store.clone())),
        );
        for v in &config.vhosts {
            vhosts.entry(v.name.clone()).or_insert_with(|| {
                Arc::new(VHostState::with_store(
                    &v.name,
                    seed ^ 0x9e37,
                    store.clone(),
                ))
            });
        }
        let access = AccessControl::from_config(&config)?;
        let limits = crate::limits::Limits::new(
            config.connection_max,
            config.vhost_limits.clone(),
            config.user_limits.clone(),
        );
        Ok(Self {
            config,
            vhosts: RwLock::new(vhosts),
            access,
            admin: crate::admin::AdminState::new(seed),
            store,
            next_id: AtomicU64::new(1),
            alarm: tokio::sync::watch::channel(Alarms::default()).0,
            limits,
            archive: std::sync::OnceLock::new(),
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
        self.vhosts.read_recover().get(name).cloned()
    }

    /// Connection registry, counters and start time, for management and metrics.
    pub fn admin(&self) -> &crate::admin::AdminState {
        &self.admin
    }

    /// The resource alarms, for connections to watch.
    pub fn alarm(&self) -> tokio::sync::watch::Receiver<Alarms> {
        self.alarm.subscribe()
    }

    /// The resource alarms in force now (management API, metrics: see also `alarms()`).
    pub fn alarm_state(&self) -> Alarms {
        *self.alarm.borrow()
    }

    /// The memory high watermark in bytes (`vm_memory_high_watermark` against RAM or the
    /// cgroup limit).
    pub fn memory_limit(&self) -> u64 {
        let available = crate::memory::available_bytes().unwrap_or(u64::MAX);
        self.config.vm_memory_high_watermark.limit(available)
    }

    /// Connection, channel and queue limits.
    pub fn limits(&self) -> &Arc<crate::limits::Limits> {
        &self.limits
    }

    /// Tells every open connection that the alarms changed (it reads their state itself; see
    /// [`crate::admin::connections::ConnRegistry::signal_all`]).
    fn alarm_changed(&self) {
        self.admin
            .connections
            .signal_all(|| crate::handles::Control::AlarmChanged);
    }

    /// Sets or clears the disk alarm (logged on change).
    pub fn set_alarm(&self, on: bool) {
        let changed = self.alarm.send_if_modified(|v| {
            if v.disk == on {
                return false;
            }
            v.disk = on;
            if on {
                tracing::warn!(limit = self.config.disk_free_limit, "disk alarm set: free disk space is under disk_free_limit; publishers are blocked");
            } else {
                tracing::info!("disk alarm cleared: publishers may go on");
            }
            true
        });
        if changed {
            self.alarm_changed();
        }
    }

    /// Sets or clears the memory alarm (logged on change).
    pub fn set_memory_alarm(&self, on: bool, sample: &crate::memory::MemorySample, limit: u64) {
        let strategy = self.config.vm_memory_calculation_strategy;
        let used = sample.used(strategy);
        let (rss, allocated) = (sample.rss, sample.allocated());
        let strategy = strategy.as_str();
        let changed = self.alarm.send_if_modified(|v| {
            if v.memory == on {
                return false;
            }
            v.memory = on;
            if on {
                tracing::warn!(used, limit, strategy, rss, allocated, "memory alarm set: memory use is over vm_memory_high_watermark; publishers are blocked");
            } else {
                tracing::info!(used, limit, strategy, rss, allocated, "memory alarm cleared: publishers may go on");
            }
            true
        });
        if changed {
            self.alarm_changed();
        }
    }

    /// All vhosts.
    pub fn vhosts(&self) -> Vec<Arc<VHostState>> {
        let mut v: Vec<_> = self.vhosts.read_recover().values().cloned().collect();
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

impl Broker {
    /// Opens the store under the data directory, restores durable definitions, policies and
    /// persistent messages, and keeps the store for what follows. Call once, inside the runtime.
    pub fn open_store(&self) -> Result<(), charon_store::OpenError> {
        let (p, mut rec) = Persistence::open(
            std::path::Path::new(&self.config.data_dir),
            persist::Paging {
                budget: self.config.message_memory_budget,
                flow_bytes: self.config.page_out_flow_bytes,
                test_delay_ms: self.config.page_out_test_delay_ms,
            },
        )?;
        let _ = self.store.set(p.clone());
        let mut restored = 0usize;
        let mut known = std::collections::HashSet::new();
        let mut marks = persist::marks_of(&rec);
        // Users, vhosts and permissions changed at run time (before the vhosts are visited).
        self.restore_access(&rec);
        for v in self.vhosts() {
            if let Some(data) = persist::policies_of(&rec, &v.name) {
                self.restore_policies(&v, crate::policies::PolicyKind::User, data);
            }
            if let Some(data) = persist::operator_policies_of(&rec, &v.name) {
                self.restore_policies(&v, crate::policies::PolicyKind::Operator, data);
            }
            if let Some(data) = persist::topology_of(&rec, &v.name) {
                let name = v.name.clone();
                let mut topo = v.topology.write_recover();
                let restored_ok = persist::restore_topology(&mut topo, data, |meta, sid| {
                    p.note_queue_id(sid);
                    known.insert(sid);
                    // Taken out, so each queue's recovered metadata goes as the queue fills.
                    let msgs = rec.queues.remove(&sid).unwrap_or_default();
                    restored += msgs.len();
                    let mark = marks
                        .remove(&sid)
                        .and_then(|m| queue::marks::Mark::decode(&m));
                    queue::spawn_queue_with(meta, &v, &name, Some(sid), msgs, mark)
                });
                if restored_ok.is_none() {
                    tracing::warn!(vhost = %name, "the saved topology is damaged; restored what could be read");
                }
                drop(topo);
                drop(v.save_topology());
                restored += crate::exchange_delay::recover(&v, &rec, &mut known);
            }
            // The restored policies on the built-in and restored exchanges.
            v.apply_exchange_policies();
        }
        // Messages of queues that no longer exist (deleted while a publish was on its way).
        for sid in rec.queues.keys().filter(|q| !known.contains(*q)) {
            p.purge(*sid);
        }
        // Delivered marks of queues that no longer exist.
        for sid in marks.keys().filter(|q| !known.contains(*q)) {
            p.forget_mark(*sid);
        }
        tracing::info!(messages = restored, "store opened and recovered");
        Ok(())
    }

    /// At a clean shutdown, once the connections are closed: lets every queue finish what
    /// reached it (two turns each: what a turn writes to the store goes at its end — delivered
    /// marks, `queue::marks`) and waits until everything written is durable, so redelivered
    /// flags are exact after a clean restart (docs/storage-format.md, "delivered mark").
    /// At most `bound`.
    pub async fn quiesce(&self, bound: std::time::Duration) {
        let handles: Vec<crate::handles::QueueHandle> = self
            .vhosts()
            .iter()
            .flat_map(|v| {
                let topo = v.topology.read_recover();
                topo.queues().map(|e| e.handle.clone()).collect::<Vec<_>>()
            })
            .collect();
        let _ = tokio::time::timeout(bound, async {
            for _ in 0..2 {
                let mut waits = Vec::with_capacity(handles.len());
                for h in &handles {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    if h.send(crate::handles::QueueCmd::Stats { reply: tx }).await {
                        waits.push(rx);
                    }
                }
                for rx in waits {
                    let _ = rx.await;
                }
            }
            self.wait_durable().await;
        })
        .await;
    }

    /// The store, once opened (every vhost shares it).
    pub(crate) fn persistence(&self) -> Option<Arc<Persistence>> {
        self.store.get().cloned()
    }

    /// Completes once everything written to the store so far is durable (no-op without one).
    pub async fn wait_durable(&self) {
        let Some(p) = self.persistence() else {
            return;
        };
        p.barrier().wait().await;
    }

    /// Measures the broker's memory (resident set and the allocator's live heap,
    /// `crate::memory::MemorySample`) every 500 ms and compares the figure
    /// `vm_memory_calculation_strategy` names with `vm_memory_high_watermark`, setting or
    /// clearing the memory alarm (a resident set over the mark with the live heap under it must
    /// stay over after a purge); asks the allocator to return freed memory every 5 s and
    /// whenever memory use dropped (queues drained or deleted), and for a forced collection on
    /// every runtime thread on every check above 70 % of the mark. Runs on a thread of its own
    /// (`charon-memory`), not on the runtime.
    pub fn spawn_memory_monitor(self: &Arc<Self>) {
        let available = crate::memory::available_bytes().unwrap_or(u64::MAX);
        let limit = self.memory_limit();
        let strategy = self.config.vm_memory_calculation_strategy;
        let allocator = crate::memory::allocator_stats().map_or("none", |a| a.name);
        tracing::info!(
            limit,
            available,
            strategy = strategy.as_str(),
            allocator,
            "memory high watermark set (vm_memory_high_watermark)"
        );
        let broker = Arc::downgrade(self);
        spawn_monitor("charon-memory", MEMORY_CHECK_EVERY, move || {
            let mut ticks = 0u64;
            let mut last = 0u64;
            let mut over_checks = 0u32;
            loop {
                // The first check at once, as before.
                if ticks > 0 {
                    std::thread::sleep(MEMORY_CHECK_EVERY);
                }
                ticks += 1;
                let Some(b) = broker.upgrade() else { return };
                let sample = crate::memory::MemorySample::now();
                let used = sample.used(strategy);
                if used == 0 {
                    continue;
                }
                // Near the mark, freed memory must go back before it counts against us.
                let near = used > limit / 10 * 7;
                if near {
                    crate::memory::request_forced_purge();
                } else if ticks.is_multiple_of(10) || used.saturating_add(used / 8) < last {
                    // Off the runtime's workers: a forced collection there stalls the tasks
                    // queued behind it (parked retries' release lateness, docs/retries.md).
                    crate::memory::request_purge();
                }
                last = used;
                // A resident set over the mark while the live heap is under it may be freed
                // pages the allocator has not returned yet: the purge asked for above runs
                // first, and the alarm is raised only if the next check is over the mark too.
                let over = used > limit;
                over_checks = if over { over_checks + 1 } else { 0 };
                let heap_under = strategy == crate::memory::Strategy::Rss
                    && sample.allocator.is_some()
                    && sample.allocated() <= limit;
                let on = b.alarm_state().memory;
                if !over || on || !heap_under || over_checks >= 2 {
                    b.set_memory_alarm(over, &sample, limit);
                }
            }
        });
    }

    /// Watches free disk space every second and sets the alarm under `disk_free_limit`, on a
    /// thread of its own (`charon-disk`).
    pub fn spawn_disk_monitor(self: &Arc<Self>) {
        let Some(p) = self.persistence() else {
            return;
        };
        let broker = Arc::downgrade(self);
        spawn_monitor("charon-disk", DISK_CHECK_EVERY, move || {
            loop {
                let Some(b) = broker.upgrade() else { return };
                if let Some(free) = p.free_bytes() {
                    b.set_alarm(free < b.config.disk_free_limit);
                }
                drop(b);
                std::thread::sleep(DISK_CHECK_EVERY);
            }
        });
    }
}

/// How often the memory monitor measures.
const MEMORY_CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(500);
/// How often the disk monitor measures free space (one `statvfs`): 100 ms, so a publisher
/// writing tens of MB a second cannot use up `disk_free_limit`'s headroom between two checks
/// (at 1 s, a 4 KiB persistent stream on this machine filled 16 MB of headroom and hit ENOSPC
/// before the alarm went off: test_durability.py's really-filling-disk test).
const DISK_CHECK_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// Runs a monitor's loop on a thread of its own, off the runtime: reading `/proc/self/status`,
/// the allocator's statistics (a JSON print and parse every 5 s) or `statfs` on a runtime
/// worker held up every task queued behind it for 0.1–1 ms (docs/performance.md, "Latency at
/// 5,000 msg/s, part 1"). A thread that cannot be started leaves the broker without that
/// alarm, logged; the loop ends once the broker is gone.
fn spawn_monitor(name: &str, every: std::time::Duration, body: impl FnOnce() + Send + 'static) {
    if let Err(e) = std::thread::Builder::new().name(name.into()).spawn(body) {
        tracing::error!(monitor = name, every_ms = every.as_millis() as u64, error = %e, "cannot start a monitor thread");
    }
}
