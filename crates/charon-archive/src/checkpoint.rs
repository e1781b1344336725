//! SQLite's WAL checkpoints on a thread of their own, deferred while the writer is busy
//! (docs/archive.md "Configuration" and "Eighteenth round").
//!
//! By default SQLite copies the WAL into the database file inside the COMMIT that passes 1000
//! pages: the archiver's writer thread, which the hand-over waits for, spent ~30 % of its time
//! there (a 4000-record batch is ~14 MB, so nearly every batch checkpointed). Instead, after each
//! commit the writer wakes this thread with the WAL's size in pages, and the thread runs a
//! PASSIVE checkpoint on its own connection (it never blocks a writer or a reader) once either
//! - the writer has gone quiet: no commit for [`Policy::quiet`] (1 s), or
//! - the WAL holds [`Policy::busy_pages`] (16,384) pages or more; from then on every commit is
//!   checkpointed (as before this policy) until the writer goes quiet.
//!
//! While batches follow each other the WAL does not start over anyway (SQLite restarts it only
//! when a write transaction begins with every frame checkpointed, which a checkpoint running
//! beside the writer never reaches), so a checkpoint after every commit only copied each batch
//! into the database file while the next ones were written: a second write of every record (the
//! WAL's pages read back with `pread`, written with `pwrite`, the database synced) competing with
//! the archiver's own WAL sync for the cores and the disk. Deferred, a burst of up to 16,384 pages
//! (256 MiB with 16 KiB pages) is written once while it arrives and copied when it is over, and a
//! page that several batches changed (index leaves, the summary) is copied once.
//!
//! The writer's connection bounds the WAL should this thread fall behind or not run: its WAL hook
//! ([`wal_hook`]) checkpoints on the writer itself past [`WRITER_AUTOCHECKPOINT_PAGES`], as
//! SQLite's automatic checkpoint does. Durability is unchanged: a commit is durable once its WAL
//! frames are synced (`synchronous=FULL`, or the archiver's `wal_sync`); a checkpoint only moves
//! committed pages into the database file (SQLite syncs the WAL before and the database after).

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::Duration;

/// Pages past which the writer checkpoints itself (see the module docs): above the thread's
/// [`Policy::busy_pages`], so that the thread does the copying and the writer's own checkpoint
/// only finishes it (it runs between the writer's transactions, so the WAL can start over).
pub const WRITER_AUTOCHECKPOINT_PAGES: i64 = 20480;

/// When the checkpoint thread checkpoints.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    /// No commit for this long: the writer is quiet, checkpoint.
    pub quiet: Duration,
    /// A commit that leaves at least this many pages in the WAL: checkpoint at once.
    pub busy_pages: i64,
}

impl Default for Policy {
    /// 1 s quiet, 16,384 pages; `CHARON_ARCHIVE_CHECKPOINT_QUIET_MS` sets the quiet time
    /// (tests: a long one, to see that nothing else makes the thread checkpoint).
    fn default() -> Policy {
        let quiet = std::env::var("CHARON_ARCHIVE_CHECKPOINT_QUIET_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_millis(1000), Duration::from_millis);
        Policy {
            quiet,
            busy_pages: 16384,
        }
    }
}

/// Wakes the checkpoint thread of one database file; the thread ends when this is dropped.
#[derive(Debug)]
pub struct Checkpointer {
    /// `None`: the thread could not start.
    tx: Option<SyncSender<()>>,
    /// Pages in the WAL after the last commit (or -1: unknown).
    pages: Arc<AtomicI64>,
}

impl Checkpointer {
    /// Starts the thread for the database at `path` with the default [`Policy`].
    pub fn start(path: &Path) -> Checkpointer {
        Checkpointer::start_with(path, Policy::default())
    }

    /// Starts the thread for the database at `path` (see [`Checkpointer::running`]).
    pub fn start_with(path: &Path, policy: Policy) -> Checkpointer {
        let (tx, rx) = sync_channel(1);
        let path = path.to_path_buf();
        let pages = Arc::new(AtomicI64::new(-1));
        let seen = pages.clone();
        let started = std::thread::Builder::new()
            .name("charon-archive-ckpt".into())
            .spawn(move || run(&path, &rx, &seen, policy))
            .map_err(|e| tracing::warn!(error = %e, "archive checkpoint thread"))
            .is_ok();
        Checkpointer {
            tx: started.then_some(tx),
            pages,
        }
    }

    /// Whether the thread started (if not, the writer must checkpoint itself).
    pub fn running(&self) -> bool {
        self.tx.is_some()
    }

    /// A commit happened that left `wal_pages` pages in the WAL (`None`: not known): checkpoint
    /// when the [`Policy`] says so (wakes of one pass coalesce).
    pub fn kick(&self, wal_pages: Option<i64>) {
        self.pages.store(wal_pages.unwrap_or(-1), Ordering::Relaxed);
        if let Some(tx) = &self.tx {
            match tx.try_send(()) {
                Ok(()) | Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => {}
            }
        }
    }
}

thread_local! {
    /// Pages in the WAL after the last commit on this thread (set by [`wal_hook`]).
    static WAL_PAGES: Cell<Option<i64>> = const { Cell::new(None) };
}

/// The writer connection's WAL hook (SQLite calls it after each commit, on the committing
/// thread): notes the WAL's size for [`take_wal_pages`] and, past
/// [`WRITER_AUTOCHECKPOINT_PAGES`], checkpoints as SQLite's automatic checkpoint would (whose
/// hook this replaces; its failure, like SQLite's, is left to the next commit).
pub fn wal_hook(wal: &rusqlite::hooks::Wal, pages: std::ffi::c_int) -> rusqlite::Result<()> {
    WAL_PAGES.set(Some(i64::from(pages)));
    if i64::from(pages) >= WRITER_AUTOCHECKPOINT_PAGES {
        let _ = wal.checkpoint();
    }
    Ok(())
}

/// The WAL's size [`wal_hook`] noted on this thread since the last call (`None`: no commit).
pub fn take_wal_pages() -> Option<i64> {
    WAL_PAGES.take()
}

fn run(path: &PathBuf, rx: &Receiver<()>, pages: &AtomicI64, policy: Policy) {
    let conn = match rusqlite::Connection::open(path) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "archive checkpoint connection; the writer checkpoints");
            return;
        }
    };
    // Commits seen since the last checkpoint.
    let mut pending = false;
    // A burst passed the bound: every commit is checkpointed (the copying spread over the
    // burst, as before this policy) until the writer goes quiet. Deferring again after the WAL
    // started over made a long burst copy 256 MiB at once every 256 MiB, whose database sync
    // held up the archiver's WAL syncs (200,000 records: −20 % archived/s).
    let mut streaming = false;
    loop {
        let woke = if pending {
            rx.recv_timeout(policy.quiet)
        } else {
            rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
        };
        let due = match woke {
            // A commit: checkpoint now only if the WAL is big (or its size unknown).
            Ok(()) => {
                pending = true;
                let p = pages.load(Ordering::Relaxed);
                streaming |= p < 0 || p >= policy.busy_pages;
                streaming
            }
            // Quiet: the writer stopped.
            Err(RecvTimeoutError::Timeout) => {
                streaming = false;
                true
            }
            // The connection closed (SQLite checkpoints when its last connection closes).
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if due {
            pending = false;
            // PASSIVE: copies what no reader still needs, waits for nobody. A failure is left
            // to the next pass (or the writer's automatic checkpoint).
            if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                tracing::debug!(error = %e, "archive checkpoint");
            }
        }
    }
}
