//! A vhost's topology lock with a generation: the `RwLock` around its exchanges, bindings and
//! queue handles, and a counter that every exclusive (write) access advances. A reader that
//! notes the generation while holding the shared lock knows that what it read is still the
//! topology as long as the generation has not moved: a connection's route cache
//! (`connection/route_cache.rs`) routes repeated publishes without the lock that way.
//!
//! The generation moves when the write lock is *taken*, before the writer changes anything, so
//! every change made under it comes with a generation no earlier reader has seen; a reader
//! reads it under the shared lock, when no writer holds the lock. Every change of the topology
//! takes the write lock (it is the only way to get `&mut`), so none can be missed; a write
//! that changes nothing costs the caches one slow route each.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LockResult, RwLock, RwLockReadGuard, RwLockWriteGuard};

use charon_core::VHost;

use crate::handles::QueueHandle;
use crate::locks::RwLockExt;

/// The topology's lock and its generation (see the module docs).
#[derive(Debug)]
pub struct Topology {
    lock: RwLock<VHost<QueueHandle>>,
    generation: AtomicU64,
}

impl Topology {
    /// A lock around `v`, at generation 0.
    pub fn new(v: VHost<QueueHandle>) -> Self {
        Self {
            lock: RwLock::new(v),
            generation: AtomicU64::new(0),
        }
    }

    /// Shared access (as `RwLock::read`).
    pub fn read(&self) -> LockResult<RwLockReadGuard<'_, VHost<QueueHandle>>> {
        self.lock.read()
    }

    /// Exclusive access (as `RwLock::write`); advances the generation once the lock is held.
    pub fn write(&self) -> LockResult<RwLockWriteGuard<'_, VHost<QueueHandle>>> {
        let guard = self.lock.write();
        self.generation.fetch_add(1, Ordering::AcqRel);
        guard
    }

    /// The current generation. Read under the shared lock, it is the generation of what that
    /// lock shows; read without it, it says whether a cached reading may still hold.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// `read_recover`/`write_recover` as on the other locks; `write_recover` advances the
/// generation (through [`Topology::write`]).
impl RwLockExt<VHost<QueueHandle>> for Topology {
    fn read_recover(&self) -> RwLockReadGuard<'_, VHost<QueueHandle>> {
        self.read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_recover(&self) -> RwLockWriteGuard<'_, VHost<QueueHandle>> {
        self.write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
