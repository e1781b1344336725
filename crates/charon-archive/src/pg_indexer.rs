//! The search index's indexer on PostgreSQL (docs/archive.md "Migration 7"): the loop of
//! [`crate::indexer`] with batches that fill the side table `dead_letter_search` (its
//! `gin_trgm_ops` indexes, when `pg_trgm` could be created, do the rest).
//!
//! The watermark is sound here for the reason it is on SQLite: every write to `dead_letters` goes
//! through the archive's one writer connection, whose mutex the indexer holds while it reads, so no
//! record with a lower id can commit after the indexer passed it (records inserted by other
//! writers — user SQL, a second broker — would need per-record tracking; documented).

use std::time::{Duration, Instant};

use crate::error::ArchiveError;
use crate::header_index::{fill_sql, pg_fill_new_sql};
use crate::indexer::Backend;
use crate::postgres::Postgres;
use crate::search_index::size_sql;
use crate::sql::{Cell, Conn, Dialect, Param};

/// The headers as `NAME=value` lines, rendered as the `header.NAME` filter's `->>` gives them:
/// since the thirteenth round only those whose name and value are over
/// [`crate::header_index::MAX_BYTES`] bytes together (`search_index::long_header_lines`, the
/// same rule on SQLite). The side table's `headers` (its trigram GIN and migration 8's line
/// index) serves only such pairs; the exact header index (migration 9) answers the others.
fn pg_header_lines() -> String {
    format!(
        "(SELECT string_agg(j.key || '=' || (j.value #>> '{{}}'), E'\\n') FROM jsonb_each(headers::jsonb) AS j \
         WHERE octet_length(j.key) + octet_length(j.value #>> '{{}}') > {})",
        crate::header_index::MAX_BYTES
    )
}

/// A PostgreSQL archive's URL.
pub(crate) struct PgDatabase(pub String);

impl Backend for PgDatabase {
    type C = Postgres;
    fn open(&self) -> Result<Postgres, ArchiveError> {
        Postgres::connect(&self.0)
    }
    fn batch(&self, c: &mut Postgres, max: i64, budget: Duration) -> Result<usize, ArchiveError> {
        let until = Instant::now() + budget;
        crate::sql::transaction(c, |c| batch_in(c, max, until))
    }
}

fn text(s: &str) -> String {
    // PostgreSQL text holds no NUL: indexed as U+FFFD, as on SQLite.
    s.replace('\0', "\u{FFFD}")
}

/// Rows per INSERT statement (4 parameters each).
const INSERT_ROWS: usize = 100;

fn index_rows(
    c: &mut dyn Conn,
    rows: &[Vec<Cell>],
    until: Instant,
    n: &mut usize,
) -> Result<(i64, i64), ArchiveError> {
    let mut bytes = 0;
    let mut top = 0;
    let mut values: Vec<Param> = Vec::new();
    for r in rows {
        if *n > 0 && Instant::now() >= until {
            break;
        }
        let id = r[0].int();
        let mut error = String::new();
        for part in [r[1].opt_text(), r[2].opt_text()].into_iter().flatten() {
            if !error.is_empty() {
                error.push('\n');
            }
            error.push_str(&part);
        }
        let body = String::from_utf8_lossy(&r[3].bytes()).into_owned();
        let headers = r[4].opt_text().unwrap_or_default();
        values.extend([
            id.into(),
            Param::from(text(&error)),
            Param::from(text(&body)),
            Param::from(text(&headers)),
        ]);
        bytes += r[5].int();
        top = id;
        *n += 1;
    }
    // Multi-row INSERTs: one statement (and round trip) per 100 records, not per record. The
    // ids of one call are distinct (edited ones are indexed one call each).
    for chunk in values.chunks(INSERT_ROWS * 4) {
        let marks = vec!["(?, ?, ?, ?)"; chunk.len() / 4].join(", ");
        c.exec(
            &format!(
                "INSERT INTO dead_letter_search (id, error, body, headers) VALUES {marks} \
                 ON CONFLICT (id) DO UPDATE SET error = excluded.error, body = excluded.body, headers = excluded.headers"
            ),
            chunk,
        )?;
    }
    Ok((bytes, top))
}

/// Adds the header index rows (migration 9) of the records `which` selects, which have none by
/// the index's rules: without `ON CONFLICT` (its extra probe of the primary key per row cost
/// PostgreSQL ~70 µs per record of eight headers), in a savepoint. Should a row exist after all
/// (a user's SQL, a broken rule), the savepoint is rolled back and the statement runs again
/// skipping existing rows, so the batch never fails on it.
fn fill_header_rows(c: &mut Postgres, which: &str, p: &[Param]) -> Result<(), ArchiveError> {
    c.batch("SAVEPOINT header_rows")?;
    match c.exec(&pg_fill_new_sql(which), p) {
        Ok(_) => c.batch("RELEASE SAVEPOINT header_rows"),
        Err(e) if c.is_broken() => Err(e),
        Err(e) => {
            tracing::debug!(error = %e, "header index rows existed; filled again skipping them");
            c.batch("ROLLBACK TO SAVEPOINT header_rows; RELEASE SAVEPOINT header_rows")?;
            c.exec(&fill_sql(Dialect::Postgres, which), p).map(|_| ())
        }
    }
}

fn batch_in(c: &mut Postgres, max: i64, until: Instant) -> Result<usize, ArchiveError> {
    let wm = c
        .query(
            "SELECT watermark FROM dead_letter_search_state WHERE one = 1 FOR UPDATE",
            &[],
        )?
        .first()
        .map_or(0, |r| r[0].int());
    let size = size_sql(Dialect::Postgres, "");
    let cols = format!(
        "id, error_message, error_stacktrace, payload, {}, {size}",
        pg_header_lines()
    );
    let mut n = 0;
    let edited: Vec<i64> = c
        .query(
            "SELECT id FROM dead_letter_search_scan ORDER BY id LIMIT ?",
            &[max.into()],
        )?
        .iter()
        .map(|r| r[0].int())
        .collect();
    let mut bytes = 0;
    for id in edited {
        c.exec(
            "DELETE FROM dead_letter_search_scan WHERE id = ?",
            &[id.into()],
        )?;
        let rows = c.query(
            &format!("SELECT {cols} FROM dead_letters WHERE id = ?"),
            &[id.into()],
        )?;
        let mut k = 0;
        bytes += index_rows(c, &rows, Instant::now() + Duration::from_secs(3600), &mut k)?.0;
        fill_header_rows(c, "d.id = ?", &[id.into()])?;
        n += k;
    }
    let rows = c.query(
        &format!("SELECT {cols} FROM dead_letters WHERE id > ? ORDER BY id LIMIT ?"),
        &[wm.into(), max.into()],
    )?;
    let mut k = 0;
    let (b, top) = index_rows(c, &rows, until, &mut k)?;
    bytes += b;
    n += k;
    if k > 0 {
        // The exact header index (migration 9) of the same records, in one statement.
        fill_header_rows(c, "d.id > ? AND d.id <= ?", &[wm.into(), top.into()])?;
    }
    if n > 0 {
        c.exec(
            "UPDATE dead_letter_search_state SET watermark = GREATEST(watermark, ?), \
             indexed_records = indexed_records + ?, indexed_bytes = indexed_bytes + ? WHERE one = 1",
            &[top.into(), (n as i64).into(), bytes.into()],
        )?;
    }
    Ok(n)
}
