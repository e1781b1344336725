//! All file I/O of the store goes through [`Fs`], so that tests can inject crashes: [`RealFs`] is
//! the operating system, [`MemFs`] keeps files in memory and remembers how much of each was
//! synced, so that [`MemFs::crash`] can drop (or tear) everything written after the last sync.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// An append-only file handle.
pub trait LogFile: Send {
    /// Appends `buf` at the end.
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable (fdatasync).
    fn sync(&mut self) -> io::Result<()>;
}

/// The file system operations the store needs.
pub trait Fs: Send + Sync + 'static {
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Files directly in `dir`.
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    /// A whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// `len` bytes at `offset`.
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// Opens (creating if needed) a file for appending.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>>;
    /// Cuts a file to `len` bytes (durably).
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Renames a file.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes directory entries durable (after create/rename/remove).
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Free bytes on the file system holding `path`.
    fn free_bytes(&self, path: &Path) -> io::Result<u64>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

struct RealFile(std::fs::File);

impl LogFile for RealFile {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.write_all(buf)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
}

impl Fs for RealFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            out.push(e?.path());
        }
        Ok(out)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::open(path)?;
        let mut buf = vec![0; len];
        f.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Box::new(RealFile(f)))
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        f.set_len(len)?;
        f.sync_all()
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::File::open(dir)?.sync_all()
    }
    fn free_bytes(&self, path: &Path) -> io::Result<u64> {
        let s = rustix::fs::statvfs(path).map_err(io::Error::from)?;
        Ok(s.f_bavail.saturating_mul(s.f_frsize))
    }
}

#[derive(Debug, Default, Clone)]
struct MemFile {
    data: Vec<u8>,
    synced: usize,
}

/// An in-memory file system that can simulate a crash.
#[derive(Debug, Default, Clone)]
pub struct MemFs {
    files: Arc<Mutex<BTreeMap<PathBuf, MemFile>>>,
}

struct MemHandle {
    fs: MemFs,
    path: PathBuf,
}

impl MemFs {
    /// An empty file system.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<PathBuf, MemFile>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Simulates a power loss: every file loses what was written after its last sync, except
    /// that up to `torn` unsynced bytes survive (a torn write).
    pub fn crash(&self, torn: usize) {
        for f in self.lock().values_mut() {
            let keep = (f.synced + torn).min(f.data.len());
            f.data.truncate(keep);
            f.synced = keep;
        }
    }

    /// Flips one byte of a file (corruption).
    pub fn flip(&self, path: &Path, offset: usize) {
        if let Some(b) = self
            .lock()
            .get_mut(path)
            .and_then(|f| f.data.get_mut(offset))
        {
            *b ^= 0xFF;
        }
    }

    /// An independent copy (same files, separate state).
    pub fn clone_deep(&self) -> MemFs {
        MemFs {
            files: Arc::new(Mutex::new(self.lock().clone())),
        }
    }

    /// Current length of a file.
    pub fn len_of(&self, path: &Path) -> Option<usize> {
        self.lock().get(path).map(|f| f.data.len())
    }

    /// All file paths.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.lock().keys().cloned().collect()
    }
}

impl LogFile for MemHandle {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.fs
            .lock()
            .entry(self.path.clone())
            .or_default()
            .data
            .extend_from_slice(buf);
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        if let Some(f) = self.fs.lock().get_mut(&self.path) {
            f.synced = f.data.len();
        }
        Ok(())
    }
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, path.display().to_string())
}

impl Fs for MemFs {
    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        Ok(self
            .lock()
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect())
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.lock()
            .get(path)
            .map(|f| f.data.clone())
            .ok_or_else(|| not_found(path))
    }
    fn read_at(&self, path: &Path, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let files = self.lock();
        let f = files.get(path).ok_or_else(|| not_found(path))?;
        let start = usize::try_from(offset).map_err(|_| not_found(path))?;
        f.data
            .get(start..start + len)
            .map(<[u8]>::to_vec)
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "short read"))
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        self.lock().entry(path.to_path_buf()).or_default();
        Ok(Box::new(MemHandle {
            fs: self.clone(),
            path: path.to_path_buf(),
        }))
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut files = self.lock();
        let f = files.get_mut(path).ok_or_else(|| not_found(path))?;
        let len = usize::try_from(len).unwrap_or(usize::MAX).min(f.data.len());
        f.data.truncate(len);
        f.synced = len;
        Ok(())
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.lock()
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut files = self.lock();
        let mut f = files.remove(from).ok_or_else(|| not_found(from))?;
        f.synced = f.data.len();
        files.insert(to.to_path_buf(), f);
        Ok(())
    }
    fn sync_dir(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    fn free_bytes(&self, _path: &Path) -> io::Result<u64> {
        Ok(u64::MAX)
    }
}
