//! SQLite's WAL checkpoints on a thread of their own (docs/archive.md "Configuration").
//!
//! By default SQLite copies the WAL into the database file inside the COMMIT that passes 1000
//! pages: the archiver's writer thread, which the hand-over waits for, spent ~30 % of its time
//! there (a 4000-record batch is ~14 MB, so nearly every batch checkpointed). Instead, after each
//! commit the writer wakes this thread, which runs a PASSIVE checkpoint on its own connection
//! (it never blocks a writer or a reader) while the writer goes on with the next batch.
//! The writer keeps a far larger automatic checkpoint as a bound should this thread fall behind.
//! Durability is unchanged: a commit is durable once its WAL frames are synced
//! (`synchronous=FULL`); the checkpoint only moves committed pages into the database file.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

/// Pages the writer's own automatic checkpoint waits for (the bound, see the module docs).
pub const WRITER_AUTOCHECKPOINT_PAGES: i64 = 16384;

/// Wakes the checkpoint thread of one database file; the thread ends when this is dropped.
#[derive(Debug)]
pub struct Checkpointer {
    /// `None`: the thread could not start.
    tx: Option<SyncSender<()>>,
}

impl Checkpointer {
    /// Starts the thread for the database at `path` (see [`Checkpointer::running`]).
    pub fn start(path: &Path) -> Checkpointer {
        let (tx, rx) = sync_channel(1);
        let path = path.to_path_buf();
        let started = std::thread::Builder::new()
            .name("charon-archive-ckpt".into())
            .spawn(move || run(&path, &rx))
            .map_err(|e| tracing::warn!(error = %e, "archive checkpoint thread"))
            .is_ok();
        Checkpointer {
            tx: started.then_some(tx),
        }
    }

    /// Whether the thread started (if not, the writer must checkpoint itself).
    pub fn running(&self) -> bool {
        self.tx.is_some()
    }

    /// A commit happened: checkpoint soon (wakes of one pass coalesce).
    pub fn kick(&self) {
        if let Some(tx) = &self.tx {
            match tx.try_send(()) {
                Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
            }
        }
    }
}

fn run(path: &PathBuf, rx: &Receiver<()>) {
    let conn = match rusqlite::Connection::open(path) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "archive checkpoint connection; the writer checkpoints");
            return;
        }
    };
    while rx.recv().is_ok() {
        // PASSIVE: copies what no reader still needs, waits for nobody. A failure is left to
        // the next pass (or the writer's automatic checkpoint).
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::debug!(error = %e, "archive checkpoint");
        }
    }
}
