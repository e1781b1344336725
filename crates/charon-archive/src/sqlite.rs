//! The embedded backend: SQLite (bundled), WAL, `synchronous=FULL` (a commit is on disk before
//! the archiver acks its messages), 16 KiB pages in a new database.

use rusqlite::ToSql;
use rusqlite::types::{ToSqlOutput, ValueRef};

use crate::error::ArchiveError;
use crate::sql::{Cell, Conn, Dialect, Param};
use crate::wal_sync::WalSync;

/// A SQLite database file.
pub struct Sqlite {
    conn: rusqlite::Connection,
    path: std::path::PathBuf,
    /// The checkpoint thread, started at the first commit (`checkpoint`).
    checkpointer: Option<crate::checkpoint::Checkpointer>,
}

impl std::fmt::Debug for Sqlite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sqlite")
    }
}

impl Sqlite {
    /// Opens (creating) the database at `path`.
    pub fn open(path: &std::path::Path) -> Result<Self, ArchiveError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| ArchiveError::Db(e.to_string()))?;
        }
        let conn = rusqlite::Connection::open(path)?;
        // A new database gets 16 KiB pages: four records of the usual ~3.5 KB (body, headers as
        // JSON and as received) share a page instead of one per 4 KiB page, so less is written
        // (twice: WAL, then checkpoint): 21 → 17.5 µs of CPU per inserted record
        // (`examples/ingest.rs`). An existing database keeps its page size (no-op).
        conn.pragma_update(None, "page_size", 16384)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // The archiver acks a batch's messages (and the queue's store forgets them) once its
        // transaction committed: FULL syncs the WAL at every commit, so a power cut cannot lose
        // a committed batch whose messages the store already settled (one fsync per batch of up
        // to 4000 records).
        conn.pragma_update(None, "synchronous", "FULL")?;
        // A page cache of 64 MiB and reads through a memory map (the default 2 MiB cache made the
        // group and list queries read pages with pread over and over).
        conn.pragma_update(None, "cache_size", -65536)?;
        conn.pragma_update(None, "mmap_size", 256i64 << 20)?;
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.set_prepared_statement_cache_capacity(128);
        // Checkpoints run on their own thread, woken after each commit with the WAL's size
        // (`checkpoint`); this hook (instead of SQLite's automatic checkpoint at 1000 pages)
        // notes that size and checkpoints on the writer only should that thread fall behind.
        conn.wal_hook(Some(crate::checkpoint::wal_hook));
        Ok(Sqlite {
            conn,
            path: path.to_path_buf(),
            checkpointer: None,
        })
    }
}

impl Sqlite {
    /// After a statement: if it committed (the WAL hook noted the WAL's size on this thread),
    /// wakes the checkpoint thread (started at the first commit).
    fn committed(&mut self) -> Result<(), ArchiveError> {
        let Some(pages) = crate::checkpoint::take_wal_pages() else {
            return Ok(());
        };
        if self.checkpointer.is_none() {
            let c = crate::checkpoint::Checkpointer::start(&self.path);
            if !c.running() {
                // No thread: the writer checkpoints itself, as SQLite does by default.
                self.conn.wal_hook(None);
                self.conn.pragma_update(None, "wal_autocheckpoint", 1000)?;
            }
            self.checkpointer = Some(c);
        }
        if let Some(c) = &self.checkpointer {
            c.kick(Some(pages));
        }
        Ok(())
    }
}

/// Parameters are bound by reference (no copy of text or bodies).
impl ToSql for Param {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Param::Text(Some(s)) => ValueRef::Text(s.as_bytes()),
            Param::Int(Some(i)) => ValueRef::Integer(*i),
            Param::Bytes(b) => ValueRef::Blob(b),
            Param::Shared(b) => ValueRef::Blob(b),
            Param::Text(None) | Param::Int(None) => ValueRef::Null,
        }))
    }
}

impl Conn for Sqlite {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn exec(&mut self, sql: &str, params: &[Param]) -> Result<u64, ArchiveError> {
        let mut st = self.conn.prepare_cached(sql)?;
        let n = st.execute(rusqlite::params_from_iter(params.iter()));
        drop(st);
        // A statement outside a transaction commits by itself.
        self.committed()?;
        Ok(n? as u64)
    }

    fn exec_each(&mut self, sql: &str, sets: &[&[Param]]) -> Result<Vec<u64>, ArchiveError> {
        let r = crate::sqlite_static::exec_each(&self.conn, sql, sets);
        self.committed()?;
        r
    }

    fn commit_unsynced(&mut self, on: bool) -> Result<Option<WalSync>, ArchiveError> {
        let mode = if on { "NORMAL" } else { "FULL" };
        self.conn.pragma_update(None, "synchronous", mode)?;
        Ok(on.then(|| WalSync::of(&self.path)))
    }

    fn query(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Vec<Cell>>, ArchiveError> {
        let started = std::time::Instant::now();
        let mut st = self.conn.prepare_cached(sql)?;
        let cols = st.column_count();
        let mut rows = st.query(rusqlite::params_from_iter(params.iter()))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let mut row = Vec::with_capacity(cols);
            for i in 0..cols {
                row.push(match r.get_ref(i)? {
                    ValueRef::Null => Cell::Null,
                    ValueRef::Integer(i) => Cell::Int(i),
                    ValueRef::Real(f) => Cell::Int(f as i64),
                    ValueRef::Text(t) => Cell::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Cell::Bytes(b.to_vec()),
                });
            }
            out.push(row);
        }
        drop(rows);
        drop(st);
        self.committed()?;
        // Each read's statement and time at `debug` for this target (PostgreSQL's own
        // `log_min_duration_statement` does this there): `--log-level warn,charon_archive::sql=debug`.
        tracing::debug!(target: "charon_archive::sql", us = started.elapsed().as_micros() as u64, rows = out.len(), sql);
        Ok(out)
    }

    fn batch(&mut self, sql: &str) -> Result<(), ArchiveError> {
        let r = self.conn.execute_batch(sql);
        self.committed()?;
        Ok(r?)
    }

    fn insert_id(&mut self, sql: &str, params: &[Param]) -> Result<i64, ArchiveError> {
        self.exec(sql, params)?;
        Ok(self.conn.last_insert_rowid())
    }
}
