//! Deep pages sorted by time (`sort=created_at` / `-created_at`) of an `error` needle matching
//! many records: the copy of the error texts walked in id order, the page proven against the
//! time index (branch `w9c`, docs/archive.md "Twenty-seventh round (branch `w9c`)").
//!
//! The copy (`dead_letter_error_text`, ~100 B a row) holds each record's `created_at` but has no
//! index in time order, and `dead_letters_created` holds no id on PostgreSQL: walking the time
//! index read each record (~1.2 KB) to check it, so `crate::text_walk`'s record budget (40,000
//! rows) reached page 5 of a needle in one record of ten, and a deeper page sorted every match
//! (PostgreSQL ~450 ms for `error=cause 5&sort=-created_at&page=50` over 1M records). A record's
//! time is its archiving time, so time order and id order nearly agree. So:
//! - the copy is walked in id order (newest first for `-created_at`), like a page in id order,
//!   for its first `n = reach + reach / 8 + 16` matches, with the matching records above the
//!   search watermark (the copy does not hold them); `L` is the last id the walk reached;
//! - those `n` are sorted by `(created_at, id)` in the page's order and the first `reach` kept;
//!   `t` is the time of the last kept one;
//! - **the proof**: no record beyond `L` (an id below it, for `-created_at`) has a time before
//!   `t` in the page's order (a greater time). Then every match the walk did not reach comes
//!   after the kept ones (a time after `t`, or `t` with an id beyond `L`, which the order's
//!   `id` tie-break puts after), and the kept ones are the first `reach` matches of all, exactly.
//!   Checked in one statement over `dead_letters_created`, which holds `(created_at, id)` on
//!   both backends (PostgreSQL since migration 28; before, two counts of the same records read
//!   from two indexes), read over the times before `t` without a record read: the few records
//!   beyond `L` found there (at most [`STRAYS`]) are checked and join the page's candidates.
//!
//! The margin `n - reach` lets records archived slightly out of id order (batches of several
//! connections) still prove the page; records far out of order only cost the fallback (the
//! plans before), never a wrong page. Both the walk and the proof read about the rows the page's
//! reach spans in id order: `reach × all / matches`.

use crate::error::ArchiveError;
use crate::sql::{Cell, Conn, Dialect, Param};
use crate::text_walk::Source;

/// Matches walked beyond the page's reach, so that records archived a little out of id order
/// still prove the page.
fn margin(reach: u64) -> u64 {
    reach / 8 + 16
}

/// The condition on `dead_letters` of the records above the search watermark that match
/// `checks` (the filter's check on the record itself, `Filter::to_sql_checks_only`): the
/// records the copy does not hold yet.
pub fn above(d: Dialect, checks: &str) -> String {
    match d {
        Dialect::Sqlite => {
            format!("id > (SELECT watermark FROM dead_letter_search_state) AND {checks}")
        }
        // The ids as an array first, as `error_text::parts` (a parallel scan's start otherwise).
        Dialect::Postgres => format!(
            "id = ANY(ARRAY(SELECT id FROM dead_letters WHERE id > (SELECT watermark FROM dead_letter_search_state))) AND {checks}"
        ),
    }
}

/// The first `reach` matching ids in time order (`desc`: `created_at DESC, id DESC`, else
/// ascending) when the walk over the copy `w` (with `checks`, the filter's check on the record
/// itself and its parameters, for the records above the watermark and the strays) finds and
/// proves them (module docs); `None` otherwise (the
/// caller's other plans answer). The walk reaches at least `at_least` matches (an answer also
/// proves that many match: a capped count's `cap + 1`, `crate::total_cap`).
pub fn page_ids(
    c: &mut dyn Conn,
    w: &mut Source,
    checks: &(String, Vec<Param>),
    desc: bool,
    reach: u64,
    at_least: u64,
) -> Result<Option<Vec<i64>>, ArchiveError> {
    Ok(page_rows(c, w, checks, desc, reach, at_least)?
        .map(|rows| rows.into_iter().map(|(id, _)| id).collect()))
}

/// [`page_ids`] as `(id, created_at)` pairs.
pub fn page_rows(
    c: &mut dyn Conn,
    w: &mut Source,
    checks: &(String, Vec<Param>),
    desc: bool,
    reach: u64,
    at_least: u64,
) -> Result<Option<Vec<(i64, i64)>>, ArchiveError> {
    let n = reach.saturating_add(margin(reach)).max(at_least);
    if reach == 0 || !w.on_copy() || !w.promising(c, n)? {
        return Ok(None);
    }
    let mut rows = w.first_times(c, desc, n)?;
    if (rows.len() as u64) < n {
        return Ok(None);
    }
    let dir = if desc { "DESC" } else { "ASC" };
    let (cond, p) = checks;
    let up = c.query(
        &format!(
            "SELECT id, created_at FROM dead_letters WHERE {} ORDER BY id {dir} LIMIT {n}",
            above(c.dialect(), cond)
        ),
        p,
    )?;
    rows.extend(id_times(&up));
    // The first `n` of both in id order are the first `n` of all; `last` the walk's end.
    rows.sort_unstable_by_key(|&(id, _)| id);
    if desc {
        rows.reverse();
    }
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    rows.truncate(n);
    proven(c, rows, false, checks, desc, reach)
}

/// The walk's match count for a page of `reach` in time order: `reach` and its margin.
pub fn walked(reach: u64) -> u64 {
    reach.saturating_add(margin(reach))
}

/// The first `reach` matches in time order from `rows`, the first matches in id order
/// (`desc`: newest first; at least [`walked`]`(reach)` of them, or every match when
/// `complete`) as `(id, created_at)`, proven against the time index (module docs); `None`
/// without a proof. `checks` is the filter's check on the record itself, for the strays.
pub fn proven(
    c: &mut dyn Conn,
    rows: Vec<(i64, i64)>,
    complete: bool,
    checks: &(String, Vec<Param>),
    desc: bool,
    reach: u64,
) -> Result<Option<Vec<(i64, i64)>>, ArchiveError> {
    proven_within(c, rows, complete, checks, desc, reach, None)
}

/// Where a walk that did not start at the end of the ids ran (`crate::window_walk`): the
/// records of a time window (`window`, a condition on `dead_letters` and its parameters) walked
/// from id `start` on (down from it for a newest-first walk). The window's records beyond
/// `start` were not walked either: a stray there is a record before the page's last in the order
/// at `t` itself too (its id is on the other side of the page's ids).
pub struct Within<'a> {
    pub window: &'a (String, Vec<Param>),
    pub start: i64,
}

/// [`proven`] for a walk [`Within`] a window: the strays are read among the window's records
/// only, on both sides of the walk.
pub fn proven_within(
    c: &mut dyn Conn,
    mut rows: Vec<(i64, i64)>,
    complete: bool,
    checks: &(String, Vec<Param>),
    desc: bool,
    reach: u64,
    within: Option<&Within<'_>>,
) -> Result<Option<Vec<(i64, i64)>>, ArchiveError> {
    if !complete && (rows.len() as u64) < reach {
        return Ok(None);
    }
    let Some(&(last, _)) = rows.last() else {
        return Ok(complete.then(Vec::new));
    };
    // In the page's order: `(created_at, id)`, both the same direction.
    rows.sort_unstable_by_key(|&(id, t)| (t, id));
    if desc {
        rows.reverse();
    }
    rows.truncate(usize::try_from(reach).unwrap_or(usize::MAX));
    // Every match: the order's first `reach` of them, nothing beyond to prove against.
    if complete {
        return Ok(Some(rows));
    }
    let Some(&(_, t)) = rows.last() else {
        return Ok(None);
    };
    let Some(strays) = strays(c, desc, last, t, within)? else {
        return Ok(None);
    };
    if !strays.is_empty() {
        // The few records beyond `last` with a time before `t`: those that match join the
        // page's candidates. The new `reach`-th is at or before the old one in the order, so
        // every record beyond `last` before it is among them.
        rows.extend(matching(c, &strays, checks)?);
        rows.sort_unstable_by_key(|&(id, t)| (t, id));
        if desc {
            rows.reverse();
        }
        rows.truncate(usize::try_from(reach).unwrap_or(usize::MAX));
    }
    Ok(Some(rows))
}

/// Most records beyond the walk's last id with a time before the page's last a walk takes in
/// (a record whose time a user's SQL moved, the SQLite bench's first record): more, no proof.
pub const STRAYS: u64 = 64;

/// The records beyond id `last` (below it for `desc`, else above) with a time before `t` in the
/// order (greater for `desc`, else smaller) as `(id, created_at)`, when at most [`STRAYS`]; `None`
/// when more. Read from `dead_letters_created` alone, which holds `(created_at, id)` on both
/// backends (SQLite's rowid; PostgreSQL's `INCLUDE (id)`, migration 28). [`Within`] a window:
/// among its records, and those beyond its walk's `start` at `t` too.
fn strays(
    c: &mut dyn Conn,
    desc: bool,
    last: i64,
    t: i64,
    within: Option<&Within<'_>>,
) -> Result<Option<Vec<(i64, i64)>>, ArchiveError> {
    let (before, beyond, ahead) = if desc {
        (">", "<", ">")
    } else {
        ("<", ">", "<")
    };
    let from = by_time(c.dialect());
    // The bounds as literals: a cached statement's generic plan could walk the primary key
    // over every id beyond `last` instead.
    let (cond, p) = match within {
        None => (
            format!("created_at {before} {t} AND id {beyond} {last}"),
            &[][..],
        ),
        Some(w) => (
            format!(
                "{} AND created_at {before}= {t} AND (id {ahead} {} OR id {beyond} {last} AND created_at {before} {t})",
                w.window.0, w.start
            ),
            &w.window.1[..],
        ),
    };
    let rows = c.query(
        &format!(
            "SELECT id, created_at FROM {from} WHERE {cond} LIMIT {}",
            STRAYS + 1
        ),
        p,
    )?;
    let rows = id_times(&rows);
    Ok((rows.len() as u64 <= STRAYS).then_some(rows))
}

/// `dead_letters` read through its time index `dead_letters_created` (SQLite needs telling).
pub(crate) fn by_time(d: Dialect) -> &'static str {
    match d {
        Dialect::Sqlite => "dead_letters INDEXED BY dead_letters_created",
        Dialect::Postgres => "dead_letters",
    }
}

/// Rows of `id, created_at` as pairs.
pub(crate) fn id_times(rows: &[Vec<Cell>]) -> Vec<(i64, i64)> {
    rows.iter()
        .filter_map(|r| Some((r.first()?.opt_int()?, r.get(1)?.opt_int()?)))
        .collect()
}

/// The records of `strays` (`(id, created_at)`, a few) that match `checks` (the filter's check
/// on the record itself and its parameters), as `(id, created_at)`.
pub(crate) fn matching(
    c: &mut dyn Conn,
    strays: &[(i64, i64)],
    checks: &(String, Vec<Param>),
) -> Result<Vec<(i64, i64)>, ArchiveError> {
    if strays.is_empty() {
        return Ok(Vec::new());
    }
    let list = strays
        .iter()
        .map(|(id, _)| id.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let (cond, p) = checks;
    let rows = c.query(
        &format!("SELECT id, created_at FROM dead_letters WHERE id IN ({list}) AND {cond}"),
        p,
    )?;
    Ok(id_times(&rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_margin_grows_with_the_reach() {
        assert_eq!(margin(0), 16);
        assert_eq!(margin(5_000), 641);
    }
}
