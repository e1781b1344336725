//! PostgreSQL: an archiver batch committed without waiting for the WAL flush inside its COMMIT,
//! made durable afterwards by a synchronous commit on a second connection, before the batch's
//! messages are acked (docs/archive.md "Nineteenth round (branch `pg9t`)"; SQLite's counterpart
//! is [`crate::wal_sync`]).
//!
//! With the server's default `synchronous_commit` the writer's COMMIT waits for the WAL to be
//! flushed (and, with synchronous replication, for the standbys): the archive's one serial
//! backend idles meanwhile. The archiver's batch instead runs with `SET LOCAL
//! synchronous_commit = off` ([`crate::ingest::insert_prepared_sync_later`]), the writer goes on
//! with the next batch, and [`PgSync::sync`] — run by the archiver on a blocking thread after
//! the COMMIT returned — commits a transaction that has a transaction id on its own connection,
//! with the session's default `synchronous_commit`. Why that is as durable as the COMMIT was:
//! - the batch's commit record was inserted into the WAL before its COMMIT returned, so before
//!   the sync's commit record; PostgreSQL's WAL is one sequence and a synchronous commit waits
//!   until the WAL is flushed (and replicated, as configured) up to its own commit record, which
//!   includes every record before it;
//! - an asynchronous commit loses nothing on a kill -9 of the broker (it is in the server's WAL
//!   buffers, flushed by the WAL writer); a crash of the server may lose the newest
//!   asynchronous commits, never a part of one, and their messages are not acked yet: they are
//!   archived again after the restart (the stable key keeps one record each).
//!
//! The second connection is opened on the first sync and kept; a failed sync (the server gone)
//! drops it, and the archiver retries the sync (the batch stays unacked meanwhile).

use std::sync::{Arc, Mutex};

use crate::error::ArchiveError;
use crate::postgres::Postgres;
use crate::sql::Conn;

/// The statement that makes every commit before it durable: a transaction with an id (so its
/// COMMIT writes a commit record and waits for its flush), committed synchronously.
pub const SYNC_SQL: &str = "BEGIN; SELECT txid_current(); COMMIT";

/// Makes the commits before it durable on one PostgreSQL database (clones share the
/// connection).
#[derive(Clone)]
pub struct PgSync {
    url: Arc<str>,
    conn: Arc<Mutex<Option<Postgres>>>,
}

impl std::fmt::Debug for PgSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgSync")
    }
}

impl PgSync {
    /// For the database at `url` (connected on the first [`PgSync::sync`]).
    pub fn new(url: &str) -> PgSync {
        PgSync {
            url: Arc::from(url),
            conn: Arc::new(Mutex::new(None)),
        }
    }

    /// Waits until every commit that returned before the call is durable (blocking: call it off
    /// the async runtime).
    pub fn sync(&self) -> Result<(), ArchiveError> {
        let mut g = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if g.as_ref().is_none_or(|c| c.is_broken()) {
            *g = Some(Postgres::connect(&self.url)?);
        }
        let Some(c) = g.as_mut() else {
            return Err(ArchiveError::Db("archive sync: no connection".into()));
        };
        let r = c.batch(SYNC_SQL);
        if r.is_err() {
            // A fresh connection next time (an aborted transaction, a lost server).
            *g = None;
        }
        r
    }
}
