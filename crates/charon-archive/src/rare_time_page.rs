//! A page sorted by time (`sort=created_at` / `-created_at`) of an `error` filter whose needle
//! matches few records: its count and its page from one read of the matches (stop 43, docs/archive.md
//! "Twenty-eighth round (lead)").
//!
//! A needle in one record of a hundred (~10,000 matches over 1,000,000 records) is too rare for
//! a walk (`crate::text_walk`, `crate::time_walk`: page 50 needs ~560,000 rows) and was answered
//! by two statements over the same candidates: the capped count (`crate::total_cap`: up to
//! 10,001 of the copy's rows read) and the page (every candidate's row read again and sorted by
//! the copy's `created_at`). Each candidate costs a lookup in the copy of the error texts
//! (`crate::key_copy`), so the request paid them twice. Here the matches' `(id, created_at)` are
//! read once, at most [`MOST`] of them: their number is the count (exact, or over the cap) and
//! their first `reach` in time order the page. More than [`MOST`], and the plans before answer.
//!
//! The same for a page sorted by a group key the copy holds ([`key_page`], stop 45): `error=55
//! could&sort=original_queue` counted ~10,000 matches (23 ms) and then read and sorted them again
//! (27 ms, SQLite over 1M); the key's values compare as the backends order them (bytes: SQLite's
//! `BINARY`, PostgreSQL's `COLLATE "C"`, migration 15), NULL first where the backend puts it.

use crate::error::ArchiveError;
use crate::key_copy::Split;
use crate::sql::{Cell, Conn};

/// Most matches read in one pass; beyond, the caller's other plans answer.
pub const MOST: u64 = 50_000;

/// The first `reach` matching ids of `split` in time order (`desc`: `created_at DESC, id DESC`,
/// else ascending) and how many match, when at most [`MOST`] do; `None` otherwise.
pub fn page(
    c: &mut dyn Conn,
    split: &Split,
    desc: bool,
    reach: u64,
) -> Result<Option<(Vec<i64>, u64)>, ArchiveError> {
    let (sql, p) = split.times(MOST + 1);
    let rows = c.query(&sql, &p)?;
    if rows.len() as u64 > MOST {
        return Ok(None);
    }
    let mut times = Vec::with_capacity(rows.len());
    for r in &rows {
        match (
            r.first().and_then(Cell::opt_int),
            r.get(1).and_then(Cell::opt_int),
        ) {
            (Some(id), Some(t)) => times.push((t, id)),
            // `created_at` is NOT NULL; a row without one is not sorted here.
            _ => return Ok(None),
        }
    }
    let n = times.len() as u64;
    times.sort_unstable();
    if desc {
        times.reverse();
    }
    times.truncate(usize::try_from(reach).unwrap_or(usize::MAX));
    Ok(Some((times.into_iter().map(|(_, id)| id).collect(), n)))
}

/// [`page`] sorted by `col` (a group key the copy holds; `desc`: `col DESC, id DESC`), NULL
/// before every value when `nulls_first` (as the backend orders it in that direction).
pub fn key_page(
    c: &mut dyn Conn,
    split: &Split,
    col: &str,
    desc: bool,
    nulls_first: bool,
    reach: u64,
) -> Result<Option<(Vec<i64>, u64)>, ArchiveError> {
    let (sql, p) = split.column_rows(col, MOST + 1);
    let rows = c.query(&sql, &p)?;
    if rows.len() as u64 > MOST {
        return Ok(None);
    }
    let mut keyed = Vec::with_capacity(rows.len());
    for r in &rows {
        let Some(id) = r.first().and_then(Cell::opt_int) else {
            return Ok(None);
        };
        keyed.push((r.get(1).and_then(Cell::opt_text), id));
    }
    let n = keyed.len() as u64;
    sort_keyed(&mut keyed, desc, nulls_first);
    keyed.truncate(usize::try_from(reach).unwrap_or(usize::MAX));
    Ok(Some((keyed.into_iter().map(|(_, id)| id).collect(), n)))
}

/// Whether dialect `d` sorts NULL before every value in that direction (`desc`): SQLite first
/// ascending, PostgreSQL first descending.
pub(crate) fn nulls_first(d: crate::sql::Dialect, desc: bool) -> bool {
    (d == crate::sql::Dialect::Sqlite) != desc
}

/// `(value, id)` rows in `ORDER BY value dir, id dir` as the backends order a group key (bytes;
/// NULL first when `nulls_first`).
pub(crate) fn sort_keyed(keyed: &mut [(Option<String>, i64)], desc: bool, nulls_first: bool) {
    keyed.sort_unstable_by(|a, b| {
        let (av, bv) = (&a.0, &b.0);
        let values = match (av, bv) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) if nulls_first => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (Some(_), None) if nulls_first => std::cmp::Ordering::Greater,
            (Some(_), None) => std::cmp::Ordering::Less,
            (Some(x), Some(y)) if desc => y.as_bytes().cmp(x.as_bytes()),
            (Some(x), Some(y)) => x.as_bytes().cmp(y.as_bytes()),
        };
        let ids = if desc { b.1.cmp(&a.1) } else { a.1.cmp(&b.1) };
        values.then(ids)
    });
}
