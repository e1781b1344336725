//! Node facts for `/api/nodes`, health checks, `ctl status` and metrics: memory, file
//! descriptors, disk, uptime and the resource alarms in force.
//!
//! Alarms are listed by [`Broker::alarms`], the one place every consumer (API, health checks,
//! ctl, Prometheus) reads them from: a new alarm kind is one more arm there.

use crate::broker::Broker;

/// A resource alarm kind (RabbitMQ's `resource_alarm` sources).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmKind {
    /// Free disk space under `disk_free_limit`.
    Disk,
    /// Memory over its high watermark.
    Memory,
}

impl AlarmKind {
    /// RabbitMQ's resource name (`disk`, `memory`).
    pub fn resource(self) -> &'static str {
        match self {
            AlarmKind::Disk => "disk",
            AlarmKind::Memory => "memory",
        }
    }

    /// Every kind, for gauges that show 0 as well as 1.
    pub const ALL: [AlarmKind; 2] = [AlarmKind::Disk, AlarmKind::Memory];
}

/// Node facts.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    /// Memory use the alarm compares with the mark (bytes; RabbitMQ's `mem_used`: the resident
    /// set or the allocator's figure, per `vm_memory_calculation_strategy`).
    pub mem_used: u64,
    /// `vm_memory_calculation_strategy`.
    pub mem_strategy: crate::memory::Strategy,
    /// Both measurements behind `mem_used`: resident set and the allocator's statistics.
    pub memory: crate::memory::MemorySample,
    /// Message body bytes the store-backed queues hold in memory (tracked against
    /// `message_memory_budget`; 0 without a store).
    pub mem_message_bodies: u64,
    /// Memory limit (bytes; 0 = none known).
    pub mem_limit: u64,
    /// Open file descriptors.
    pub fd_used: u64,
    /// File descriptor limit.
    pub fd_total: u64,
    /// Free disk bytes where the store lives (None without a store).
    pub disk_free: Option<u64>,
    /// `disk_free_limit`.
    pub disk_free_limit: u64,
    /// Milliseconds since start.
    pub uptime_ms: u64,
    /// CPU cores.
    pub processors: u64,
    /// Process id.
    pub os_pid: u32,
}

fn fd_used() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

fn fd_total() -> u64 {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        })
        .unwrap_or(0)
}

impl Broker {
    /// The resource alarms in force now.
    pub fn alarms(&self) -> Vec<AlarmKind> {
        let on = self.alarm_state();
        let mut v = Vec::new();
        if on.disk {
            v.push(AlarmKind::Disk);
        }
        if on.memory {
            v.push(AlarmKind::Memory);
        }
        v
    }

    /// Node facts now.
    pub fn node_facts(&self) -> NodeFacts {
        let memory = crate::memory::MemorySample::now();
        let mem_strategy = self.config().vm_memory_calculation_strategy;
        NodeFacts {
            mem_used: memory.used(mem_strategy),
            mem_strategy,
            memory,
            mem_message_bodies: self.persistence().map_or(0, |p| p.held_bytes()),
            mem_limit: self.memory_limit(),
            fd_used: fd_used(),
            fd_total: fd_total(),
            disk_free: self.persistence().and_then(|p| p.free_bytes()),
            disk_free_limit: self.config().disk_free_limit,
            uptime_ms: u64::try_from(self.admin().started.elapsed().as_millis()).unwrap_or(0),
            processors: std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
            os_pid: std::process::id(),
        }
    }
}
