//! The background indexer of the search index ([`crate::search_index`], SQLite): fills it from the
//! records above its watermark, in small batches on its own connection and thread, behind the
//! archiver (never inside its transaction).
//!
//! Low priority: a batch runs only while it holds the archive's writer mutex, taken with
//! `try_lock` (when the writer is busy the indexer waits), and is bounded ([`BATCH`] records and
//! a time budget), so the writer waits for at most one short batch. While the writer is active
//! (its connection was used since the last batch) the budget is [`BUSY_BUDGET`] and the indexer
//! pauses [`BUSY_PAUSE`] between batches: it takes a small share of a core while archiving or a
//! replay job runs and catches up when they stop. The writer counts as active until it was left
//! alone for [`QUIET`], and a busy batch reads only as many records as fit its budget
//! ([`busy_rows`]): every user of the writer (archiver, replay steps, API edits) goes through
//! `Archive::lock`, which bumps the activity counter, so this one rule covers them all. Each batch is one transaction that moves the
//! watermark with the rows it indexed: a kill at any moment leaves the index and its watermark
//! consistent, and a restart resumes from it (nothing missed, nothing twice). Records edited after
//! they were indexed (`dead_letter_search_scan`) are indexed again.
//!
//! `CHARON_ARCHIVE_INDEXER=off` keeps it from starting (benchmarks comparing ingest with and
//! without it, and tests that query while the index is behind).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::error::ArchiveError;
use crate::header_index::fill_sql;
use crate::search_index::long_header_lines;
use crate::sql::{Conn, Dialect};

/// Records per batch (one transaction).
pub const BATCH: i64 = 500;

/// A batch's time budget while the writer is active.
pub const BUSY_BUDGET: Duration = Duration::from_millis(3);

/// The pause between batches while the writer is active: about 3 % of a core. (25 ms, 11 %, made
/// a replay of 50,000 records 35 % slower on 2 shared cores: the indexing's CPU is taken from the
/// replay's; branch `arc9k`.)
pub const BUSY_PAUSE: Duration = Duration::from_millis(100);

/// A batch's time budget while the writer is idle.
const IDLE_BUDGET: Duration = Duration::from_millis(50);

/// How long after its last use the writer still counts as active. A replay job uses it a few
/// times per step and waits for confirms in between; judged per batch ("used since the last
/// batch?"), a gap of one pause let a 50 ms idle batch of 500 records in, which the job's next
/// step then waited for (branch `arc9k`).
pub const QUIET: Duration = Duration::from_millis(500);

/// The batch size: [`BATCH`], or `CHARON_ARCHIVE_INDEXER_BATCH` (tests make the indexer slow
/// with small batches, to query or kill it while it is behind).
fn batch_size() -> i64 {
    std::env::var("CHARON_ARCHIVE_INDEXER_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(BATCH)
}

/// Whether the environment turned the indexer off.
pub fn disabled() -> bool {
    std::env::var("CHARON_ARCHIVE_INDEXER").is_ok_and(|v| v == "off")
}

/// What the indexer's loop fills: a connection it opens and the batches it runs on it.
pub(crate) trait Backend: Send + 'static {
    /// Its connection.
    type C;
    /// Opens a connection.
    fn open(&self) -> Result<Self::C, ArchiveError>;
    /// One batch ([`batch`] on SQLite); how many records it indexed.
    fn batch(&self, c: &mut Self::C, max: i64, budget: Duration) -> Result<usize, ArchiveError>;
}

/// The SQLite archive at a path.
struct SqliteFile(PathBuf);

impl Backend for SqliteFile {
    type C = Connection;
    fn open(&self) -> Result<Connection, ArchiveError> {
        Ok(open(&self.0)?)
    }
    fn batch(&self, c: &mut Connection, max: i64, budget: Duration) -> Result<usize, ArchiveError> {
        Ok(batch(c, max, budget)?)
    }
}

/// Starts the indexer of the SQLite archive at `path`; it stops when `writer` is dropped.
pub fn start(path: &Path, writer: Weak<Mutex<Box<dyn Conn>>>, activity: Arc<AtomicU64>) {
    spawn(SqliteFile(path.to_path_buf()), writer, activity);
}

/// Starts the loop over `backend`.
pub(crate) fn spawn<B: Backend>(
    backend: B,
    writer: Weak<Mutex<Box<dyn Conn>>>,
    activity: Arc<AtomicU64>,
) {
    if disabled() {
        tracing::info!("archive search indexer off (CHARON_ARCHIVE_INDEXER=off)");
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("charon-archive-indexer".into())
        .spawn(move || run(backend, writer, activity));
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "archive search indexer: no thread; text filters scan");
    }
}

fn open(path: &PathBuf) -> rusqlite::Result<Connection> {
    let c = Connection::open(path)?;
    c.busy_timeout(Duration::from_secs(5))?;
    // The index can always be rebuilt from the records, and WAL keeps a NORMAL commit atomic: no
    // fsync per batch.
    c.pragma_update(None, "synchronous", "NORMAL")?;
    c.pragma_update(None, "cache_size", -16384)?;
    // Not SQLite's automatic checkpoint at 1000 pages: it ran inside this indexer's COMMIT,
    // i.e. while holding the archive writer's mutex, and copied the archiver's latest batches
    // into the database file whenever the WAL had 1000 pages (always, during a burst). The
    // checkpoint thread does that (`checkpoint`); this one only bounds the WAL while the
    // indexer alone writes (catching up on a big archive).
    c.pragma_update(
        None,
        "wal_autocheckpoint",
        crate::checkpoint::WRITER_AUTOCHECKPOINT_PAGES,
    )?;
    Ok(c)
}

/// The records a batch reads while the writer is active: as many as the last busy batch
/// indexed within [`BUSY_BUDGET`]. A batch reads its records (headers rendered, sizes) before it
/// checks its budget, so 500 of them held the writer's mutex for far longer than 3 ms.
fn busy_rows(prev: i64, n: usize, took: Duration, size: i64) -> i64 {
    if n == 0 {
        return prev;
    }
    let per = took.as_secs_f64() / n as f64;
    let fit = (BUSY_BUDGET.as_secs_f64() / per.max(1e-7)) as i64;
    fit.clamp(1, size)
}

/// The indexer's view of the writer: active when its connection was used since the last look,
/// or when it holds its mutex at a look (a `try_lock` failed), or within [`QUIET`] of either.
/// A writer's transaction takes the mutex once (one bump of the activity counter) and may hold
/// it longer than [`QUIET`]: PostgreSQL's archiver batches took 250–750 ms on a loaded host.
/// Judged by the counter alone, the writer then counted as idle by the time it let go, and the
/// indexer's next batch was an idle one (500 records, a 50 ms budget that single statements
/// overran: 200–250 ms), which the archiver's next batch waited for (docs/archive.md
/// "Twenty-fourth round (branch `pg9z`)").
struct WriterActivity {
    seen: u64,
    at: std::time::Instant,
}

impl WriterActivity {
    /// Looks at the writer at `now`: `count` is the activity counter, `held` whether the last
    /// `try_lock` found the mutex taken. Returns whether the writer counts as active.
    fn look(&mut self, count: u64, held: bool, now: std::time::Instant) -> bool {
        if count != self.seen || held {
            self.at = now;
        }
        self.seen = count;
        now.saturating_duration_since(self.at) < QUIET
    }
}

fn run<B: Backend>(backend: B, writer: Weak<Mutex<Box<dyn Conn>>>, activity: Arc<AtomicU64>) {
    let mut conn = None;
    let mut writer_activity = WriterActivity {
        seen: activity.load(Ordering::Relaxed),
        at: std::time::Instant::now(),
    };
    // Whether the last `try_lock` found the writer holding its mutex.
    let mut held = false;
    let size = batch_size();
    let mut rows = size.min(16);
    // Small test batches also pause longer in between.
    let between = Duration::from_millis(if size < BATCH { 20 } else { 2 });
    loop {
        let Some(w) = writer.upgrade() else {
            return;
        };
        let mut c = match conn.take() {
            Some(c) => c,
            None => match backend.open() {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "archive search indexer: cannot open the database");
                    drop(w);
                    std::thread::sleep(Duration::from_secs(5));
                    continue;
                }
            },
        };
        // Only while the writer is idle; it waits for at most this one batch.
        let busy = writer_activity.look(
            activity.load(Ordering::Relaxed),
            held,
            std::time::Instant::now(),
        );
        let (budget, max) = if busy {
            (BUSY_BUDGET, rows)
        } else {
            (IDLE_BUDGET, size)
        };
        let done = match w.try_lock() {
            Ok(guard) => {
                held = false;
                let t0 = std::time::Instant::now();
                let r = backend.batch(&mut c, max, budget);
                let took = t0.elapsed();
                drop(guard);
                if let (true, Ok(n)) = (busy, &r) {
                    rows = busy_rows(rows, *n, took, size);
                }
                Some(r)
            }
            Err(_) => {
                held = true;
                None
            }
        };
        drop(w);
        let pause = match done {
            None => Duration::from_millis(5),
            Some(Ok(0)) => Duration::from_millis(200),
            Some(Ok(_)) if busy => BUSY_PAUSE.max(between),
            Some(Ok(_)) => between,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "archive search indexer: batch failed; retrying");
                std::thread::sleep(Duration::from_secs(1));
                // A fresh connection (PostgreSQL may have gone away).
                continue;
            }
        };
        conn = Some(c);
        std::thread::sleep(pause);
    }
}

/// One batch in one transaction: records edited since they were indexed, then up to `max`
/// records above the watermark, stopping once `budget` is spent (after at least one record).
/// Returns how many records it indexed.
pub fn batch(c: &Connection, max: i64, budget: Duration) -> rusqlite::Result<usize> {
    let t0 = std::time::Instant::now();
    c.execute_batch("BEGIN IMMEDIATE")?;
    match batch_in(c, max, t0 + budget) {
        Ok(n) => {
            c.execute_batch("COMMIT")?;
            Ok(n)
        }
        Err(e) => {
            let _ = c.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

fn batch_in(c: &Connection, max: i64, until: std::time::Instant) -> rusqlite::Result<usize> {
    let wm: i64 = c.query_row(
        "SELECT watermark FROM dead_letter_search_state WHERE one = 1",
        [],
        |r| r.get(0),
    )?;
    let mut n = 0usize;
    let mut bytes = 0i64;
    let size = crate::search_index::size_sql(Dialect::Sqlite, "");
    let edited: Vec<i64> = {
        let mut st = c.prepare_cached(
            "SELECT id FROM dead_letter_search_scan WHERE kind = 'edited' ORDER BY id LIMIT ?",
        )?;
        st.query_map([max], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?
    };
    for id in edited {
        c.execute("DELETE FROM dead_letter_search_scan WHERE id = ?", [id])?;
        let sql = format!(
            "SELECT id, error_message, error_stacktrace, payload, {}, {size} FROM dead_letters WHERE id = ?",
            long_header_lines()
        );
        let row = c
            .prepare_cached(&sql)?
            .query_row([id], read_row)
            .optional()?;
        if let Some(row) = row {
            bytes += index_row(c, &row)?;
            c.prepare_cached(&fill_sql(Dialect::Sqlite, "d.id = ?1"))?
                .execute([id])?;
            n += 1;
        }
    }
    let sql = format!(
        "SELECT id, error_message, error_stacktrace, payload, {}, {size} FROM dead_letters WHERE id > ? ORDER BY id LIMIT ?",
        long_header_lines()
    );
    let rows: Vec<Row> = {
        let mut st = c.prepare_cached(&sql)?;
        st.query_map(params![wm, max], read_row)?
            .collect::<rusqlite::Result<_>>()?
    };
    let mut top = wm;
    for row in &rows {
        if n > 0 && std::time::Instant::now() >= until {
            break;
        }
        bytes += index_row(c, row)?;
        top = row.id;
        n += 1;
    }
    if top > wm {
        // The exact header index (migration 9) of the same records, in one statement.
        c.prepare_cached(&fill_sql(Dialect::Sqlite, "d.id > ?1 AND d.id <= ?2"))?
            .execute(params![wm, top])?;
    }
    if n > 0 {
        c.prepare_cached(
            "UPDATE dead_letter_search_state SET watermark = ?, indexed_records = indexed_records + ?, \
             indexed_bytes = indexed_bytes + ? WHERE one = 1",
        )?
        .execute(params![top, n as i64, bytes])?;
    }
    Ok(n)
}

/// A record's texts as read for the index.
struct Row {
    id: i64,
    message: Option<String>,
    stacktrace: Option<String>,
    payload: Vec<u8>,
    headers: Option<String>,
    /// What its index rows count against `archive_max_bytes` (`search_index::SIZE`).
    size: i64,
}

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        id: r.get(0)?,
        message: r.get(1)?,
        stacktrace: r.get(2)?,
        payload: r.get(3)?,
        headers: r.get(4)?,
        size: r.get(5)?,
    })
}

/// Indexes one record (its index rows are absent); what they count against the size cap.
///
/// A text is indexed with NUL as U+FFFD (FTS5 stops at a NUL), a body that is not UTF-8 decoded
/// lossily (each invalid sequence as U+FFFD). Both keep every UTF-8 needle without NUL that the
/// original contains (a valid sequence is never swallowed by an invalid one before it), so the
/// index's matches stay a superset of the exact filter's, which then runs on them.
fn index_row(c: &Connection, row: &Row) -> rusqlite::Result<i64> {
    let mut error = String::new();
    for part in [&row.message, &row.stacktrace].into_iter().flatten() {
        if !error.is_empty() {
            error.push('\n');
        }
        error.push_str(part);
    }
    let headers = row.headers.as_deref().unwrap_or("");
    let body = String::from_utf8_lossy(&row.payload);
    for (table, text) in [
        ("dead_letter_search_error", error.as_str()),
        ("dead_letter_search_headers", headers),
        ("dead_letter_search_body", &body),
    ] {
        insert(c, table, row.id, text)?;
    }
    Ok(row.size)
}

fn insert(c: &Connection, table: &str, id: i64, text: &str) -> rusqlite::Result<()> {
    // Under three characters a text has no trigram: nothing to store.
    if text.chars().nth(2).is_none() {
        return Ok(());
    }
    let stmt = format!("INSERT INTO {table} (rowid, text) VALUES (?, ?)");
    let mut st = c.prepare_cached(&stmt)?;
    if !text.contains('\0') {
        st.execute(params![id, text])?;
        return Ok(());
    }
    st.execute(params![id, text.replace('\0', "\u{FFFD}")])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_batches_read_what_fits_the_budget() {
        // 100 records in 10 ms: 100 µs each, 30 fit 3 ms (29 after float rounding).
        let n = busy_rows(16, 100, Duration::from_millis(10), 500);
        assert!((29..=30).contains(&n), "{n}");
        // 100 records in 1 ms: 10 µs each, 300 fit.
        let n = busy_rows(16, 100, Duration::from_millis(1), 500);
        assert!((299..=300).contains(&n), "{n}");
        // Slow records: at least one.
        assert_eq!(busy_rows(16, 2, Duration::from_millis(40), 500), 1);
        // Fast ones: never more than a batch.
        assert_eq!(busy_rows(16, 500, Duration::from_micros(50), 500), 500);
        // Nothing indexed: unchanged.
        assert_eq!(busy_rows(16, 0, Duration::from_millis(1), 500), 16);
    }

    #[test]
    fn a_writer_holding_its_mutex_past_quiet_still_counts_as_active() {
        let t0 = std::time::Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut w = WriterActivity { seen: 0, at: t0 };
        // The writer takes the mutex once (one bump) and holds it for 750 ms; the indexer's
        // `try_lock` fails every 5 ms meanwhile.
        assert!(w.look(1, false, ms(1)));
        let mut t = 1;
        while t < 750 {
            t += 5;
            assert!(
                w.look(1, true, ms(t)),
                "active while it holds the mutex ({t} ms)"
            );
        }
        // It let go: the batch the indexer now takes is a busy one.
        assert!(w.look(1, true, ms(755)), "active right after it let go");
        // Left alone for QUIET (no bump, the mutex free at every look): idle.
        assert!(w.look(1, false, ms(1000)));
        assert!(!w.look(1, false, ms(1300)), "idle after QUIET alone");
        // Used again.
        assert!(w.look(2, false, ms(1310)));
    }
}
