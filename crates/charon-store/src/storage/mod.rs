//! The I/O seam: every byte the store reads or writes goes through
//! [`Storage`] and [`StorageFile`], so tests can crash the "disk"
//! ([`MemStorage`]) and a simulator can replace it without touching the
//! store.
//!
//! Contract (what [`MemStorage`] models, `docs/storage-format.md` §6):
//! file contents are durable only up to the last [`StorageFile::sync`];
//! creations, renames and removals only after [`Storage::sync_dir`]. Rewriting bytes below the
//! synced length is not durable either until the next sync (preallocated and recycled segment
//! files are written in place).

use std::io;
use std::sync::Arc;

mod disk;
mod mem;

pub use disk::DiskStorage;
pub use mem::MemStorage;

/// A flat directory of files.
pub trait Storage: Send + Sync + std::fmt::Debug {
    /// Names of the files in the directory.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Create a new, empty file (error if it exists).
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>>;
    /// Open an existing file for reading and writing.
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>>;
    /// Remove a file.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Rename a file (replacing `to` if it exists); durable after [`Storage::sync_dir`].
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Make creations and removals durable.
    fn sync_dir(&self) -> io::Result<()>;
    /// Free bytes on the file system (for the disk alarm).
    fn free_bytes(&self) -> io::Result<u64>;
}

/// One open file. Reads and writes are positioned; the store never relies
/// on a file cursor.
pub trait StorageFile: Send + Sync + std::fmt::Debug {
    /// Current length.
    fn size(&self) -> io::Result<u64>;
    /// Fill `buf` from `offset` (error if the file is shorter).
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// `len` bytes from `offset` in a new buffer of exactly that length (error if the file
    /// is shorter). The default zero-fills the buffer first; the disk file reads straight into
    /// the new buffer's room (no zeroing pass).
    fn read_vec_at(&self, len: usize, offset: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }
    /// Write all of `data` at `offset`.
    fn write_all_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Make the contents durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    /// Cut the file to `len` bytes.
    fn truncate(&self, len: u64) -> io::Result<()>;
    /// Reserve space so the file is at least `len` bytes long (zeros past the old end; on
    /// the real disk `fallocate`). The new length is durable after the next [`Self::sync`].
    fn preallocate(&self, len: u64) -> io::Result<()>;
}
