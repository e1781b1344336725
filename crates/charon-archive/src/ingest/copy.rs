//! PostgreSQL's bulk path for the archiver's batches (docs/archive.md "Fourteenth round, ingest"):
//! the whole batch by binary `COPY` in a savepoint, falling back to the parent's `INSERT … ON
//! CONFLICT DO NOTHING` when a record was archived before (a redelivery after a crash). Since
//! the eighteenth round a batch of [`SPLIT_MIN`] records or more is copied by two backends at
//! once ([`copy_split`]).

use std::collections::HashSet;

use super::{Batch, INSERT_WIDTH, RECORD_COLS};
use crate::error::ArchiveError;
use crate::sql::{ColType, Conn, Dialect, Param};

/// The types of [`RECORD_COLS`], for PostgreSQL's binary COPY ([`copy_batch`]).
const RECORD_TYPES: [ColType; INSERT_WIDTH] = {
    use ColType::{Bytes as B, Int as I, Text as T};
    [
        T, T, T, T, T, T, T, I, T, T, T, T, T, T, B, B, I, T, T, T, T, I, I,
    ]
};
/// Records per COPY statement (a batch is up to 4,000: several COPYs in one savepoint). The
/// summary's statement trigger keeps every row a statement inserts (its transition table,
/// migration 3) and spills it to a temporary file past `work_mem` (4 MB by default): the whole
/// batch in one COPY (~12 MB of the bench's records) wrote it to disk, 1,000 records (~3 MB) do
/// not (docs/archive.md "Fourteenth round").
const COPY_ROWS: usize = 1000;
/// The savepoint a batch's COPY runs in: on a failure (a record archived before, after a
/// redelivery) the batch is inserted again row by row with `ON CONFLICT DO NOTHING`.
const COPY_SAVEPOINT: &str = "archive_copy";

/// Undoes a failed COPY and ends its savepoint (the INSERTs then run in the batch's transaction).
fn rollback_copy() -> String {
    format!("ROLLBACK TO SAVEPOINT {COPY_SAVEPOINT}; RELEASE SAVEPOINT {COPY_SAVEPOINT}")
}

/// A batch [`copy_batch`] copied: every record was new and is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Copied {
    /// Records copied (the whole batch).
    pub rows: u64,
    /// The batch's first `counted` records went in by the second connection's transaction,
    /// committed already, where the summary's insert trigger counted them: the batch's own
    /// summary upserts must count only the records after them.
    pub counted: usize,
}

/// Batches of at least this many records are split over two connections ([`copy_split`]).
const SPLIT_MIN: usize = 1000;

/// PostgreSQL: the whole batch by binary COPY ([`COPY_ROWS`] records each), in a savepoint (a
/// batch of [`SPLIT_MIN`] records or more: its first half on a second connection at the same
/// time, [`copy_split`]); `Some`: every record was new and is in. A COPY has no `ON CONFLICT`: a record whose stable key is archived
/// already (a redelivery after a crash) fails the whole COPY with a unique violation, so the
/// savepoint is rolled back and `None` returned: the caller inserts the batch with `ON
/// CONFLICT DO NOTHING` as before. Each record's parameters were built already, in
/// [`RECORD_COLS`] order ([`Batch::push`]). `None` at once on SQLite (no bulk path).
pub(super) fn copy_batch(c: &mut dyn Conn, batch: &Batch) -> Result<Option<Copied>, ArchiveError> {
    if c.dialect() != Dialect::Postgres || batch.is_empty() {
        return Ok(None);
    }
    if batch.len() >= SPLIT_MIN
        && split_enabled()
        && keys_unique(batch)
        && let Some(beside) = c.take_beside()
    {
        match batch_ids(c, batch.len())? {
            Some(ids) => return copy_split(c, batch, beside, &ids),
            None => c.put_beside(beside),
        }
    }
    c.batch(&format!("SAVEPOINT {COPY_SAVEPOINT}"))?;
    let mut rows = batch.chunks.iter().flat_map(|p| p.chunks(INSERT_WIDTH));
    let mut copied = Ok(Some(0));
    for _ in 0..batch.len().div_ceil(COPY_ROWS) {
        let mut part = rows.by_ref().take(COPY_ROWS);
        let n = match c.copy_in("dead_letters", RECORD_COLS, &RECORD_TYPES, &mut part) {
            Ok(Some(n)) => n,
            other => {
                copied = other;
                break;
            }
        };
        copied = copied.map(|total| total.map(|t| t + n));
    }
    match copied {
        Ok(Some(n)) if n == batch.len() as u64 => {
            c.batch(&format!("RELEASE SAVEPOINT {COPY_SAVEPOINT}"))?;
            Ok(Some(Copied {
                rows: n,
                counted: 0,
            }))
        }
        Ok(_) => {
            c.batch(&rollback_copy())?;
            Ok(None)
        }
        Err(e) => {
            // A lost connection fails the rollback too: its error is the batch's.
            if c.is_broken() {
                return Err(e);
            }
            tracing::debug!(error = %e, "archive batch: COPY failed, inserting row by row");
            c.batch(&rollback_copy()).map_err(|_| e)?;
            Ok(None)
        }
    }
}

/// `CHARON_ARCHIVE_COPY_SPLIT=off`: every batch on the one connection, as before the eighteenth
/// round (a server with no connection to spare; the A/B of docs/archive.md "Eighteenth round").
fn split_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("CHARON_ARCHIVE_COPY_SPLIT").map_or(true, |v| v != "off"))
}

/// Whether no stable key is twice in the batch. Two halves holding the same key would wait on
/// each other for good (the second insert waits for the first transaction, which commits only
/// after both copies returned); the single COPY fails on it at once and falls back.
fn keys_unique(batch: &Batch) -> bool {
    let mut seen = HashSet::with_capacity(batch.records.len());
    batch
        .records
        .iter()
        .all(|r| seen.insert(r.stable_key.as_str()))
}

/// `rows` by COPYs of [`COPY_ROWS`] records with their `ids`; the records copied.
fn copy_rows(c: &mut dyn Conn, rows: &[&[Param]], ids: &[i64]) -> Result<u64, ArchiveError> {
    let mut n = 0;
    for (part, ids) in rows.chunks(COPY_ROWS).zip(ids.chunks(COPY_ROWS)) {
        let mut it = part.iter().copied();
        n += c
            .copy_in_ids("dead_letters", RECORD_COLS, &RECORD_TYPES, ids, &mut it)?
            .ok_or_else(|| ArchiveError::Db("no bulk copy on this connection".into()))?;
    }
    Ok(n)
}

/// The second connection's half: its own transaction, left open (committed or rolled back by
/// [`copy_split`] once both halves are known).
fn copy_beside(c: &mut dyn Conn, rows: &[&[Param]], ids: &[i64]) -> Result<u64, ArchiveError> {
    c.batch("BEGIN")?;
    copy_rows(c, rows, ids)
}

/// `n` new ids of `dead_letters`, ascending, from its sequence; `None` when the table has no
/// sequence of its own (then the batch is copied on one connection with the column's default).
fn batch_ids(c: &mut dyn Conn, n: usize) -> Result<Option<Vec<i64>>, ArchiveError> {
    let mut ids: Vec<i64> = c
        .query(
            "SELECT nextval(pg_get_serial_sequence('dead_letters', 'id')) FROM generate_series(1, CAST(? AS BIGINT))",
            &[(n as i64).into()],
        )?
        .iter()
        .filter_map(|r| r.first().and_then(|x| x.opt_int()))
        .collect();
    ids.sort_unstable();
    Ok((ids.len() == n).then_some(ids))
}

/// Two backends at once (docs/archive.md "Eighteenth round"): the batch's records get their ids
/// first, in order, from the table's sequence (so ids follow the records as with one COPY); the
/// first half is copied on the second connection (`beside`) in a transaction of its own, the
/// second half here in the savepoint, at the same time (a thread for `beside`). Only when both
/// copied every row does `beside` commit — its half counted into the summary by the insert
/// trigger, since its transaction has no `summary_by_archiver` row — and `Some` says how many
/// records it counted; the caller counts the rest before its own COMMIT. A failure of either
/// half rolls both back and returns `None` (the caller inserts the whole batch with `ON CONFLICT
/// DO NOTHING`, as after a failed single COPY). A failed COMMIT of `beside` may have committed:
/// the batch fails (retried by the archiver; the stable keys and the then committed records'
/// ids keep it exact). No other write runs in between: both are under the archive's writer
/// mutex, so the search indexer's watermark stays sound.
fn copy_split(
    c: &mut dyn Conn,
    batch: &Batch,
    mut beside: Box<dyn Conn>,
    ids: &[i64],
) -> Result<Option<Copied>, ArchiveError> {
    let n = batch.len();
    let rows: Vec<&[Param]> = batch
        .chunks
        .iter()
        .flat_map(|p| p.chunks(INSERT_WIDTH))
        .collect();
    let half = n / 2;
    let (first, second) = rows.split_at(half);
    let (first_ids, second_ids) = ids.split_at(half);
    c.batch(&format!("SAVEPOINT {COPY_SAVEPOINT}"))?;
    let (here, there) = std::thread::scope(|s| {
        let b = &mut beside;
        let there = std::thread::Builder::new()
            .name("archive-copy".into())
            .spawn_scoped(s, move || copy_beside(b.as_mut(), first, first_ids));
        let here = copy_rows(c, second, second_ids);
        let there = match there {
            Ok(t) => t
                .join()
                .unwrap_or_else(|_| Err(ArchiveError::Db("archive copy thread panicked".into()))),
            Err(e) => Err(ArchiveError::Db(format!("archive copy thread: {e}"))),
        };
        (here, there)
    });
    match (here, there) {
        (Ok(a), Ok(b)) if a == second.len() as u64 && b == first.len() as u64 => {
            if let Err(e) = beside.batch("COMMIT") {
                let _ = c.batch(&rollback_copy());
                if !beside.is_broken() {
                    c.put_beside(beside);
                }
                return Err(e);
            }
            c.put_beside(beside);
            c.batch(&format!("RELEASE SAVEPOINT {COPY_SAVEPOINT}"))?;
            Ok(Some(Copied {
                rows: n as u64,
                counted: half,
            }))
        }
        (here, there) => {
            let _ = beside.batch("ROLLBACK");
            if !beside.is_broken() {
                c.put_beside(beside);
            }
            let e = match (here, there) {
                (Err(e), _) | (_, Err(e)) => e,
                _ => ArchiveError::Db("COPY: rows missing".into()),
            };
            if c.is_broken() {
                return Err(e);
            }
            tracing::debug!(error = %e, "archive batch: split COPY failed, inserting row by row");
            c.batch(&rollback_copy()).map_err(|_| e)?;
            Ok(None)
        }
    }
}
