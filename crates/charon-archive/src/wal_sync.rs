//! SQLite: an archiver batch committed without waiting for the disk inside its COMMIT, made
//! durable afterwards by a sync of the WAL file on another thread, before the batch's messages
//! are acked (docs/archive.md "Ninth round").
//!
//! With `synchronous=FULL` the writer's COMMIT waits for the fsync of the WAL (a 4000-record
//! batch is ~14 MB): the archive's one serial thread idles while the disk writes. The archiver's
//! batch instead commits with `synchronous=NORMAL` ([`crate::ingest::insert_prepared_sync_later`]),
//! the writer goes on with the next batch, and [`WalSync::sync`] — run by the archiver on a
//! blocking thread — syncs the WAL file's data before the messages are acked. Why that is as
//! durable as FULL for the hand-over:
//! - the COMMIT wrote the batch's frames (with its commit frame) into the WAL file before it
//!   returned; a sync of that file (any descriptor of it: Linux syncs the file, not the
//!   descriptor) started after that puts them on disk;
//! - SQLite stays consistent with NORMAL in WAL mode (a power cut may only lose the newest
//!   commits): checkpoints sync the WAL before copying it and the database after, and the WAL
//!   header is synced when the file is reused — so a batch whose sync has not returned may be
//!   lost by a power cut, but its messages are not acked yet: they are archived again after the
//!   restart (the stable key keeps one record each);
//! - a kill -9 loses nothing either way (the written frames are in the kernel's page cache).
//!
//! If the WAL file is gone (every connection closed, which checkpoints it into the database and
//! syncs that), the database file is synced instead.

use std::path::{Path, PathBuf};

use crate::error::ArchiveError;

/// Makes the commits before it durable: syncs the WAL file of one database.
#[derive(Debug, Clone)]
pub struct WalSync {
    wal: PathBuf,
    db: PathBuf,
}

impl WalSync {
    /// For the database file `db` (its WAL is `<db>-wal`).
    pub fn of(db: &Path) -> WalSync {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        WalSync {
            wal: PathBuf::from(wal),
            db: db.to_path_buf(),
        }
    }

    /// Syncs the WAL's data (blocking: call it off the async runtime); once it returns `Ok`,
    /// every commit that returned before the call is on disk.
    pub fn sync(&self) -> Result<(), ArchiveError> {
        let err =
            |e: std::io::Error, p: &Path| ArchiveError::Db(format!("sync {}: {e}", p.display()));
        match std::fs::File::open(&self.wal) {
            Ok(f) => f.sync_data().map_err(|e| err(e, &self.wal)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match std::fs::File::open(&self.db) {
                    Ok(f) => f.sync_data().map_err(|e| err(e, &self.db)),
                    // Neither file: nothing of this database is on disk to sync.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    Err(e) => Err(err(e, &self.db)),
                }
            }
            Err(e) => Err(err(e, &self.wal)),
        }
    }
}
