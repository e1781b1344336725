//! The data-directory lock: one broker per data directory.
//!
//! A broker holds an exclusive advisory lock (`flock`) on `<data_dir>/charon.lock` for as long
//! as it runs; the kernel releases it when the process ends, however it ends (kill -9
//! included), so a stale file never blocks a restart. The file holds the owner's pid, for the
//! message a second broker prints before it exits.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside the data directory.
pub const LOCK_FILE: &str = "charon.lock";

/// Why the data directory could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error(
        "the data directory {dir} is in use by another broker (pid {pid}); lock file {file} is held. Stop that broker or choose another --data-dir"
    )]
    Held {
        /// The data directory.
        dir: String,
        /// The lock file.
        file: String,
        /// The owner's pid as it wrote it (or "unknown").
        pid: String,
    },
    /// The lock file could not be opened or locked.
    #[error("cannot lock {file}: {source}")]
    Io {
        /// The lock file.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// The held lock; released when dropped (or when the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Takes the lock on `dir` (which must exist) without waiting.
    pub fn acquire(dir: &Path) -> Result<Self, LockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            file: path.display().to_string(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = pid.trim();
                return Err(LockError::Held {
                    dir: dir.display().to_string(),
                    file: path.display().to_string(),
                    pid: if pid.is_empty() { "unknown" } else { pid }.to_string(),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        file.flush().map_err(io)?;
        Ok(Self { _file: file, path })
    }

    /// Path of the lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_on_the_same_directory_is_refused_until_the_first_is_dropped() {
        let dir = std::env::temp_dir().join(format!("charon-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let first = DataDirLock::acquire(&dir).expect("first lock");
        let err = DataDirLock::acquire(&dir).expect_err("second lock must fail");
        let text = err.to_string();
        assert!(text.contains("in use by another broker"), "{text}");
        assert!(
            text.contains(&std::process::id().to_string()),
            "names the owner: {text}"
        );
        drop(first);
        let again = DataDirLock::acquire(&dir).expect("lock after release");
        assert!(again.path().ends_with(LOCK_FILE));
        drop(again);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
