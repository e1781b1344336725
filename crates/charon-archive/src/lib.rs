//! charon-archive: the dead-letter archive's records and SQL (docs/archive.md). It knows nothing
//! of the broker: the server hands it records and runs replays through its own publish path.
//!
//! - [`extract`]: an AMQP message as a record (original queue, reason, failure, fingerprint).
//! - [`json`]: AMQP values and properties as JSON and back.
//! - `onepass`: [`extract`] in one walk over the encoded properties (no decoded field table).
//! - [`schema`]: the tables as versioned migrations.
//! - [`sql`]: the connection interface both backends implement ([`sqlite`], [`postgres`]).
//! - [`ingest`]: the archiver's batch insert (summary counted per batch).
//! - [`ops`]: list, get, groups, edit, skip, delete, audit, retention, stats.
//! - [`page_plan`]: which index a SQLite list page walks.
//! - [`checkpoint`]: SQLite's WAL checkpoints off the writer's thread.
//! - [`wal_sync`]: an archiver batch's COMMIT without the fsync, synced before its acks.
//! - `sqlite_static`: the archiver's INSERT bound without copies (the crate's only `unsafe`).
//! - [`search_index`], [`indexer`] (+ `pg_indexer`): the trigram index of the text filters, filled
//!   behind the writer.
//! - [`error_text`]: migration 12, the narrow copy of the error texts the `error` filter checks.
//! - [`header_lines`]: migration 8, PostgreSQL's exact index of the header lines.
//! - [`header_index`] (migration 9), [`header_columns`] (22), [`header_groups`] (24),
//!   [`header_key_columns`] (25): the exact header index, the record's group-key columns and time
//!   in its rows, and the lists and `/groups` of a header term they answer alone.
//! - [`pg_partial`]: migration 18, PostgreSQL's `(X, status, id)` indexes without `PENDING` records.
//! - [`jobs`]: replay jobs and what a restart interrupted.
//! - [`summary`]: the maintained per-group counts (groups and totals without counting rows);
//!   [`summary_keys`]: migration 10, its key with content type and original exchange;
//!   [`summary_batch`]: replay's status changes counted per group on SQLite.
//! - [`scope`]: what an API user limited to some vhosts sees.
//! - [`filter`], [`record`], [`time`]: the API's filters, record JSON and times.
//! - [`total_cap`]: a list's `total` counted up to a cap for `error` and `body` filters;
//!   [`text_walk`]: such a list's count and page from a bounded walk over the newest rows.
//!   [`time_walk`]: such a list's deep pages sorted by time, from a walk of the copy in id order.
//! - [`newest_groups`]: `/groups` of such a filter over its newest 10,001 matches (`count_relation`).
//!
//! [`Archive`] is the handle: one connection behind a mutex for writes, a second one for the
//! API's reads (so that a page is not queued behind a 4000-record insert or a replay step);
//! both used from blocking threads.

pub mod checkpoint;
pub mod copy_key_gin;
pub mod driving_set;
pub mod error;
pub mod error_grams;
pub mod error_text;
pub mod extract;
pub mod filter;
pub mod group_bounds;
pub mod group_sample;
pub mod header_columns;
pub mod header_groups;
pub mod header_index;
pub mod header_key_columns;
pub mod header_lines;
pub mod id_bounds;
pub mod index_diet;
pub mod indexer;
pub mod ingest;
pub mod jobs;
pub mod json;
pub mod key_copy;
pub mod key_first_match;
pub mod key_first_value;
pub mod key_sort;
pub mod keyed_candidates;
pub mod newest_groups;
mod onepass;
pub mod ops;
pub mod page_plan;
mod pg_batch;
pub mod pg_collation;
pub mod pg_created_id;
mod pg_indexer;
pub mod pg_partial;
mod plan_stats;
pub mod postgres;
pub mod pure_status;
pub mod range_count;
pub mod rare_time_page;
pub mod rare_trigrams;
pub mod record;
pub mod schema;
pub mod scope;
pub mod search_forget;
pub mod search_index;
pub mod sparse_sort;
pub mod sql;
pub mod sqlite;
mod sqlite_static;
pub mod summary;
pub mod summary_batch;
pub mod summary_keys;
pub mod summary_seconds;
pub mod text_walk;
pub mod time;
pub mod time_walk;
pub mod total_cap;
pub mod vhost_limit;
pub mod wal_sync;
pub mod window_walk;

use std::sync::{Arc, Mutex, MutexGuard};

pub use error::ArchiveError;
pub use extract::{ExtractConfig, NewRecord, extract};
pub use filter::Filter;
pub use ops::{Edit, Selection};
pub use record::Record;
use sql::Conn;

/// The archive: a database connection, migrated, shared by the broker's archivers, replayers and
/// the API. Every call blocks: call it from `spawn_blocking` or a dedicated thread.
#[derive(Clone)]
pub struct Archive {
    conn: Arc<Mutex<Box<dyn Conn>>>,
    /// The readers' connection, opened on first use (and again after it broke).
    reader: Arc<Mutex<Option<Box<dyn Conn>>>>,
    url: Arc<str>,
    /// The URL as given (to open the reader).
    full_url: Arc<str>,
    /// Bumped at every use of the writer's connection: the search indexer backs off while it moves.
    activity: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Archive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archive").field("url", &self.url).finish()
    }
}

/// The URL without its password (for logs).
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

/// A connection to the database `url` names (`sqlite:///path`, `sqlite:path`, a bare path, or
/// `postgres(ql)://…`), not migrated.
fn connect(url: &str) -> Result<Box<dyn Conn>, ArchiveError> {
    Ok(
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Box::new(postgres::Postgres::connect(url)?)
        } else if let Some(path) = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            Box::new(sqlite::Sqlite::open(std::path::Path::new(path))?)
        } else if !url.contains("://") {
            Box::new(sqlite::Sqlite::open(std::path::Path::new(url))?)
        } else {
            return Err(ArchiveError::BadUrl(redact(url)));
        },
    )
}

/// The file of a SQLite URL (as [`connect`] reads it); `None` for PostgreSQL.
fn sqlite_path(url: &str) -> Option<&std::path::Path> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return None;
    }
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .or_else(|| (!url.contains("://")).then_some(url))?;
    Some(std::path::Path::new(path))
}

impl Archive {
    /// Opens the database `url` names (`sqlite:///path`, `sqlite:path`, a bare path, or
    /// `postgres(ql)://…`) and applies migrations.
    pub fn open(url: &str) -> Result<Archive, ArchiveError> {
        let conn = connect(url)?;
        let a = Archive {
            conn: Arc::new(Mutex::new(conn)),
            reader: Arc::new(Mutex::new(None)),
            url: Arc::from(redact(url)),
            full_url: Arc::from(url),
            activity: Arc::default(),
        };
        schema::migrate(a.lock().as_mut())?;
        if let Some(path) = sqlite_path(url) {
            indexer::start(path, Arc::downgrade(&a.conn), a.activity.clone());
        } else {
            indexer::spawn(
                pg_indexer::PgDatabase(url.to_string()),
                Arc::downgrade(&a.conn),
                a.activity.clone(),
            );
        }
        Ok(a)
    }

    /// Runs `f`, which only reads, on the readers' connection (opened on first use; when it
    /// cannot be opened, on the writers' one). SQLite's WAL and PostgreSQL let it read what was
    /// committed while a write transaction runs on the other connection.
    pub fn read<T>(
        &self,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, ArchiveError>,
    ) -> Result<T, ArchiveError> {
        let mut g = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        if g.is_none() {
            match connect(&self.full_url) {
                Ok(c) => *g = Some(c),
                Err(e) => {
                    tracing::debug!(error = %e, "archive reader connection; reading on the writer's");
                    drop(g);
                    return self.with(f);
                }
            }
        }
        let Some(c) = g.as_mut() else {
            return self.with(f);
        };
        let r = f(c.as_mut());
        if r.is_err() && c.is_broken() {
            *g = None;
        }
        r
    }

    /// The connection, for the functions of [`ops`] and [`jobs`].
    pub fn lock(&self) -> MutexGuard<'_, Box<dyn Conn>> {
        self.activity
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` with the connection.
    pub fn with<T>(&self, f: impl FnOnce(&mut dyn Conn) -> T) -> T {
        let mut g = self.lock();
        f(g.as_mut())
    }

    /// Whether both handles share one connection.
    pub fn same(&self, other: &Archive) -> bool {
        Arc::ptr_eq(&self.conn, &other.conn)
    }

    /// Whether the connection is lost (the server went away): open a new one.
    pub fn is_broken(&self) -> bool {
        self.lock().is_broken()
    }

    /// The URL, password redacted.
    pub fn url(&self) -> &str {
        &self.url
    }
}
