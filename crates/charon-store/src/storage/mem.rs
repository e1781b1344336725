//! [`MemStorage`]: an in-memory directory that remembers what was synced,
//! so tests can crash it at any instant.
//!
//! Model (`docs/storage-format.md` §6): a file's bytes as of its last
//! `sync` survive a crash; bytes written after it (from the lowest offset
//! written since, which may lie inside the synced region: preallocated and
//! recycled segments are written in place) survive only as the torn prefix
//! the crash function chooses, laid over the synced bytes. A file exists
//! after a crash only if the directory was synced after it was created, a
//! removed file comes back unless the directory was synced after the
//! removal, and a rename counts only once the directory is synced. A
//! truncation below the synced length counts as durable at once (the store
//! syncs right after truncating anyway).

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Storage, StorageFile};

/// Crash-injecting in-memory storage. Clones share the same directory.
#[derive(Debug, Clone, Default)]
pub struct MemStorage {
    dir: Arc<Mutex<Dir>>,
}

#[derive(Debug, Default)]
struct Dir {
    /// The directory as the running process sees it.
    files: HashMap<String, Arc<MemFile>>,
    /// The directory as of the last `sync_dir`.
    durable: HashMap<String, Arc<MemFile>>,
    /// `Some(n)`: the next `n` syncs succeed, then every sync fails.
    syncs_left: Option<u64>,
    /// Free bytes to report.
    free: u64,
}

#[derive(Debug, Default)]
struct MemFile {
    state: Mutex<FileState>,
    dir: std::sync::Weak<Mutex<Dir>>,
}

#[derive(Debug, Default, Clone)]
struct FileState {
    /// The bytes as the running process sees them.
    data: Vec<u8>,
    /// The bytes as of the last sync.
    durable: Vec<u8>,
    /// Lowest offset written since the last sync (`data.len()` when none).
    dirty_from: usize,
}

impl FileState {
    fn synced(data: Vec<u8>) -> Self {
        FileState {
            dirty_from: data.len(),
            durable: data.clone(),
            data,
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a test lock must not hide the original failure.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn not_found(name: &str) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, name.to_string())
}

impl MemStorage {
    /// An empty directory.
    pub fn new() -> Self {
        let s = MemStorage::default();
        lock(&s.dir).free = u64::MAX;
        s
    }

    /// Make every sync after the next `n` fail (a dying disk).
    pub fn fail_syncs_after(&self, n: u64) {
        lock(&self.dir).syncs_left = Some(n);
    }

    /// Set the free bytes reported by [`Storage::free_bytes`].
    pub fn set_free_bytes(&self, free: u64) {
        lock(&self.dir).free = free;
    }

    /// The directory after a power cut that kept nothing unsynced.
    pub fn crash(&self) -> MemStorage {
        self.crash_with(|_, _| Vec::new())
    }

    /// The directory after a power cut. For every surviving file, `torn`
    /// gets its name and unsynced bytes and returns what of them survives
    /// (a prefix, possibly with garbage) after the synced bytes.
    pub fn crash_with(&self, mut torn: impl FnMut(&str, &[u8]) -> Vec<u8>) -> MemStorage {
        let out = MemStorage::new();
        let src = lock(&self.dir);
        let mut names: Vec<&String> = src.durable.keys().collect();
        names.sort();
        let mut dst = lock(&out.dir);
        for name in names {
            let Some(file) = src.durable.get(name) else {
                continue;
            };
            let st = lock(&file.state);
            let unsynced = st.data.get(st.dirty_from..).unwrap_or(&[]);
            let mut data = st.durable.clone();
            let survived = torn(name, unsynced);
            let end = st.dirty_from + survived.len();
            if data.len() < end {
                data.resize(end, 0);
            }
            if let Some(dst) = data.get_mut(st.dirty_from..end) {
                dst.copy_from_slice(&survived);
            }
            let file = Arc::new(MemFile {
                state: Mutex::new(FileState::synced(data)),
                dir: Arc::downgrade(&out.dir),
            });
            dst.files.insert(name.clone(), file.clone());
            dst.durable.insert(name.clone(), file);
        }
        dst.free = src.free;
        drop(dst);
        out
    }

    /// A copy of a file's current bytes (for tests that damage files).
    pub fn read_file(&self, name: &str) -> Option<Vec<u8>> {
        let dir = lock(&self.dir);
        dir.files.get(name).map(|f| lock(&f.state).data.clone())
    }

    /// Replace a file's bytes, durably (for tests that damage files).
    pub fn write_file(&self, name: &str, data: Vec<u8>) {
        let mut dir = lock(&self.dir);
        let file = Arc::new(MemFile {
            state: Mutex::new(FileState::synced(data)),
            dir: Arc::downgrade(&self.dir),
        });
        dir.files.insert(name.to_string(), file.clone());
        dir.durable.insert(name.to_string(), file);
    }
}

impl Storage for MemStorage {
    fn list(&self) -> io::Result<Vec<String>> {
        Ok(lock(&self.dir).files.keys().cloned().collect())
    }

    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let mut dir = lock(&self.dir);
        if dir.files.contains_key(name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                name.to_string(),
            ));
        }
        let file = Arc::new(MemFile {
            state: Mutex::default(),
            dir: Arc::downgrade(&self.dir),
        });
        dir.files.insert(name.to_string(), file.clone());
        Ok(file)
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        let dir = lock(&self.dir);
        let file = dir.files.get(name).ok_or_else(|| not_found(name))?;
        Ok(file.clone())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        let mut dir = lock(&self.dir);
        dir.files
            .remove(name)
            .map(|_| ())
            .ok_or_else(|| not_found(name))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut dir = lock(&self.dir);
        let file = dir.files.remove(from).ok_or_else(|| not_found(from))?;
        dir.files.insert(to.to_string(), file);
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        let mut dir = lock(&self.dir);
        take_sync(&mut dir)?;
        dir.durable = dir.files.clone();
        Ok(())
    }

    fn free_bytes(&self) -> io::Result<u64> {
        Ok(lock(&self.dir).free)
    }
}

fn take_sync(dir: &mut Dir) -> io::Result<()> {
    match dir.syncs_left {
        Some(0) => Err(io::Error::other("injected sync failure")),
        Some(ref mut n) => {
            *n -= 1;
            Ok(())
        }
        None => Ok(()),
    }
}

impl StorageFile for MemFile {
    fn size(&self) -> io::Result<u64> {
        Ok(lock(&self.state).data.len() as u64)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let st = lock(&self.state);
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| st.data.get(start..end))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_all_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start + data.len();
        if st.data.len() < end {
            st.data.resize(end, 0);
        }
        st.dirty_from = st.dirty_from.min(start);
        if let Some(dst) = st.data.get_mut(start..end) {
            dst.copy_from_slice(data);
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        if let Some(dir) = self.dir.upgrade() {
            take_sync(&mut lock(&dir))?;
        }
        let mut st = lock(&self.state);
        let from = st.dirty_from.min(st.data.len()).min(st.durable.len());
        let st = &mut *st;
        st.durable.truncate(from);
        st.durable
            .extend_from_slice(st.data.get(from..).unwrap_or(&[]));
        st.dirty_from = st.data.len();
        Ok(())
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        let len = usize::try_from(len).map_err(io::Error::other)?;
        let old = st.data.len();
        st.data.resize(len, 0);
        if st.durable.len() > len {
            st.durable.truncate(len);
        }
        st.dirty_from = st.dirty_from.min(len.min(old));
        Ok(())
    }

    fn preallocate(&self, len: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        let len = usize::try_from(len).map_err(io::Error::other)?;
        if st.data.len() < len {
            st.dirty_from = st.dirty_from.min(st.data.len());
            st.data.resize(len, 0);
        }
        Ok(())
    }
}
