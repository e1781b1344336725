//! A `MemStorage` whose file creations and spare renames can be held at a gate: tests hold the
//! writer with a new segment pending (`unwritten_segment.rs`, `carried_read.rs`). The
//! compaction thread's zeroed spare (`spare.wal.zero`, renamed to `spare.wal.free`) passes:
//! holding that thread at the gate too would stop the compaction these tests wait for.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use charon_store::{MemStorage, Storage, StorageFile};

/// (closed, a creation is waiting)
pub type Gate = (Mutex<(bool, bool)>, Condvar);

/// A `MemStorage` whose file creations (and spare renames) wait while the gate is closed, so
/// the writer can be held with a new segment pending.
#[derive(Debug)]
pub struct Gated {
    pub mem: MemStorage,
    pub gate: Arc<Gate>,
}

/// The file the compaction thread zeroes ahead (charon-store's `spare::ZEROING`).
const ZEROING: &str = "spare.wal.zero";

impl Gated {
    fn pass(&self) {
        let (m, cv) = &*self.gate;
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        while g.0 {
            g.1 = true;
            cv.notify_all();
            g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Storage for Gated {
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.mem.list()
    }
    fn create(&self, name: &str) -> std::io::Result<Arc<dyn StorageFile>> {
        if name != ZEROING {
            self.pass();
        }
        self.mem.create(name)
    }
    fn open(&self, name: &str) -> std::io::Result<Arc<dyn StorageFile>> {
        self.mem.open(name)
    }
    fn remove(&self, name: &str) -> std::io::Result<()> {
        self.mem.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        if from != ZEROING {
            self.pass();
        }
        self.mem.rename(from, to)
    }
    fn sync_dir(&self) -> std::io::Result<()> {
        self.mem.sync_dir()
    }
    fn free_bytes(&self) -> std::io::Result<u64> {
        self.mem.free_bytes()
    }
}

/// Closes or opens the gate.
pub fn set_gate(gate: &Gate, closed: bool) {
    let mut g = gate.0.lock().unwrap_or_else(|e| e.into_inner());
    g.0 = closed;
    gate.1.notify_all();
}

/// Waits (bounded generously) until the writer is held at the gate.
pub fn wait_held(gate: &Gate) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut g = gate.0.lock().unwrap_or_else(|e| e.into_inner());
    while !g.1 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        g = gate
            .1
            .wait_timeout(g, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    true
}
