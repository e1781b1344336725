//! Taking the broker's `std::sync` locks. A lock whose holder panicked is poisoned; the broker
//! takes it over as it is (every critical section leaves the data consistent at each step, and
//! one failed connection must not take the broker down with it). One place says so.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// `read`/`write` that take a poisoned `RwLock` over.
pub(crate) trait RwLockExt<T> {
    /// Shared access, poisoned or not.
    fn read_recover(&self) -> RwLockReadGuard<'_, T>;
    /// Exclusive access, poisoned or not.
    fn write_recover(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T> RwLockExt<T> for RwLock<T> {
    fn read_recover(&self) -> RwLockReadGuard<'_, T> {
        self.read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write_recover(&self) -> RwLockWriteGuard<'_, T> {
        self.write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `lock` that takes a poisoned `Mutex` over.
pub(crate) trait MutexExt<T> {
    /// Exclusive access, poisoned or not.
    fn lock_recover(&self) -> MutexGuard<'_, T>;
}

impl<T> MutexExt<T> for Mutex<T> {
    fn lock_recover(&self) -> MutexGuard<'_, T> {
        self.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
