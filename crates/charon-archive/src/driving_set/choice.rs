//! Which term's records drive a walk (`super`), and its ids in id order: a header term's exact
//! index range, a time range's `dead_letters_created`, or a key column's index — of several key
//! terms the one with the fewest records (stop 46), with a status term where the key's index
//! holds it before the id (SQLite's merged `(X, status, id)` ranges, PostgreSQL's partial ones).

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::{Cell, Conn, Dialect, Param};

/// The term whose index gives the driving set.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Driver {
    /// `header.NAME=value`: the exact header index's range (and the records it does not cover).
    Header(String, String),
    /// `since`/`until`: `dead_letters_created`.
    Range,
    /// A key column with an `(X, id)` index.
    Key(&'static str),
}

/// The key columns whose records an index gives in id order per value: PostgreSQL's `(X, id)`
/// indexes (migrations 5, 16, 18 and `dead_letters_reason`), SQLite's `(queue, id)`,
/// `(reason, id)` and `(status, id)`, then SQLite's `original_queue` and `error_fingerprint`,
/// whose indexes hold the status before the id: their ids are merged in id order from one range
/// per status ([`STATUS_BEFORE_ID`]).
fn keyed(d: Dialect) -> &'static [&'static str] {
    match d {
        Dialect::Postgres => &[
            "original_queue",
            "queue",
            "error_fingerprint",
            "reason",
            "status",
        ],
        Dialect::Sqlite => &[
            "queue",
            "reason",
            "status",
            "original_queue",
            "error_fingerprint",
        ],
    }
}

/// SQLite's key columns whose index is `(X, status, id)` with no `(X, id)` beside it (stop 46):
/// a value's ids in id order are the merge of its ranges `X = v AND status = s`, each in id order
/// — one `UNION ALL` whose `ORDER BY id` SQLite answers by merging its arms (`MERGE (UNION ALL)`)
/// and stopping at the `LIMIT`, no sort. A status with no record of the value is an empty range
/// (one index descent). `orders-7` (50,100 records over 1M), its newest 12,001 ids: 0.8 ms; by
/// the value's whole range sorted, ~10 ms and every entry read.
pub(super) const STATUS_BEFORE_ID: &[&str] = &["original_queue", "error_fingerprint"];

/// The driving term of `f`, when `f` has a text term and another term an index walks in id
/// order: a header term first (its range is exact and read index-only), then a time range, then
/// a key column.
pub(super) fn driver(d: Dialect, f: &Filter) -> Option<Driver> {
    if !crate::total_cap::applies(f) {
        return None;
    }
    if let Some((k, v)) = f.terms.iter().find(|(k, v)| {
        k.strip_prefix("header.")
            .is_some_and(|n| n.len() + v.len() <= crate::header_index::MAX_BYTES)
    }) {
        let name = k.strip_prefix("header.").unwrap_or_default();
        return Some(Driver::Header(name.to_string(), v.clone()));
    }
    if f.terms.contains_key("since") || f.terms.contains_key("until") {
        return Some(Driver::Range);
    }
    keyed(d)
        .iter()
        .find(|k| f.terms.contains_key(**k))
        .map(|k| Driver::Key(k))
}

/// [`driver`], a key term chosen among several by the fewest records (stop 46): the summary's
/// exact count of each key term's value (on SQLite, `original_queue` and `error_fingerprint`
/// with the filter's `status` term: their merged ranges are then that one status's range). The
/// first key in [`keyed`]'s order can be the largest set: `status=PENDING` (600,000 records)
/// before `original_queue=orders-7` (its 50,000 PENDING ones), or `status=REPLAYED` (202,001)
/// before orders-7's 100 REPLAYED records.
pub(super) fn chosen(
    c: &mut dyn Conn,
    f: &Filter,
    cols: &[&str],
) -> Result<Option<Driver>, ArchiveError> {
    let d = c.dialect();
    let first = driver(d, f);
    if !matches!(first, Some(Driver::Key(_))) {
        return Ok(first);
    }
    // SQLite's merged keys drive only a check on the copy (~0.5 µs a row): a check reading
    // each record (~4 µs) costs more than the text plans (`body=%00%00%00%00&original_queue=
    // orders-7`, every record a match: 23 → 55 ms; `/groups?by=content_type`, 24 → 62 ms).
    let on_copy = f.terms.contains_key("error")
        && !f.terms.contains_key("body")
        && crate::key_copy::answers(f)
        && cols
            .iter()
            .all(|c| crate::key_copy::KEY_COLUMNS.contains(c));
    let drives = |k: &&str| {
        f.terms.contains_key(*k)
            && (on_copy || d != Dialect::Sqlite || !STATUS_BEFORE_ID.contains(k))
    };
    let mut best: Option<(i64, &'static str)> = None;
    for col in keyed(d).iter().copied().filter(drives) {
        let (cond, p) = key_set_filter(d, f, col).to_sql_checks_only(d)?;
        let n = crate::summary::records(c, &cond, &p)?;
        if best.is_none_or(|(m, _)| n < m) {
            best = Some((n, col));
        }
    }
    Ok(best.map(|(_, col)| Driver::Key(col)))
}

/// PostgreSQL's keys with a partial `(X, status, id)` index of the statuses but `PENDING`
/// (migration 18).
const PG_STATUS_PARTIAL: &[&str] = &["queue", "original_queue", "error_fingerprint"];

/// The terms of `f` whose records are the driving set of key `col`: `col`'s, with the `status`
/// term for SQLite's merged keys ([`STATUS_BEFORE_ID`]) and for PostgreSQL's keys whose partial
/// `(X, status, id)` index holds that status in id order (not `PENDING`: its `(X, id)` index
/// would read each record's status; stop 46, `error=could&status=REPLAYED&sort=original_queue`
/// paged `orders-0`'s 101 REPLAYED records through the copy's trigram index, 141 ms).
fn key_set_filter(d: Dialect, f: &Filter, col: &str) -> Filter {
    let mut g = Filter::default();
    let with_status = match d {
        Dialect::Sqlite => STATUS_BEFORE_ID.contains(&col),
        Dialect::Postgres => {
            PG_STATUS_PARTIAL.contains(&col)
                && f.terms
                    .get("status")
                    .is_some_and(|s| crate::pg_partial::carries_not_pending(d, s))
        }
    };
    for (k, v) in &f.terms {
        if k == col || (with_status && k == "status") {
            g.terms.insert(k.clone(), v.clone());
        }
    }
    g
}

/// The first `budget + 1` ids of the driving set in id order (`desc`: newest first); `None` for a
/// time range of more than `budget` records (its newest ids would be sorted from the whole
/// range on SQLite; a walk of part of it is left to `crate::text_walk`).
pub(super) fn driving_ids(
    c: &mut dyn Conn,
    f: &Filter,
    driver: &Driver,
    desc: bool,
    budget: u64,
) -> Result<Option<Vec<i64>>, ArchiveError> {
    let d = c.dialect();
    let dir = if desc { "DESC" } else { "ASC" };
    let limit = budget.saturating_add(1);
    let (sql, p) = match driver {
        Driver::Header(name, value) => {
            let wm = crate::header_index::watermark(c)?;
            match crate::header_index::page_ids_at(d, name, value, wm, desc, limit) {
                Some(q) => q,
                None => return Ok(None),
            }
        }
        Driver::Range => {
            let (cond, p) = f.window().to_sql_checks_only(d)?;
            let n = c
                .query(
                    &format!(
                        "SELECT {}",
                        crate::total_cap::limited(
                            &format!("SELECT id FROM dead_letters WHERE {cond}"),
                            budget
                        )
                    ),
                    &p,
                )?
                .first()
                .and_then(|r| r.first())
                .map_or(0, Cell::int);
            if u64::try_from(n).unwrap_or(u64::MAX) > budget {
                return Ok(None);
            }
            (format!("SELECT id FROM dead_letters WHERE {cond}"), p)
        }
        Driver::Key(col) => {
            // The key's set (with the status term where its index holds it, `key_set_filter`):
            // one index range in id order, or SQLite's ranges of every status merged.
            let g = key_set_filter(d, f, col);
            let (cond, p) = g.to_sql_checks_only(d)?;
            let merged = d == Dialect::Sqlite && STATUS_BEFORE_ID.contains(col);
            if merged && !g.terms.contains_key("status") {
                status_merge(c, &cond, &p, dir, limit)?
            } else {
                (
                    format!(
                        "SELECT id FROM dead_letters WHERE {cond} ORDER BY id {dir} LIMIT {limit}"
                    ),
                    p,
                )
            }
        }
    };
    let mut ids: Vec<i64> = c
        .query(&sql, &p)?
        .iter()
        .filter_map(|r| r.first().and_then(Cell::opt_int))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    if desc {
        ids.reverse();
    }
    ids.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok(Some(ids))
}

/// The ids of `cond` (one key term of [`STATUS_BEFORE_ID`], with its parameters `p`) in id
/// order `dir`, the first `limit`: one arm per status merged (see there). The statuses are the
/// five the archive writes, and any other the summary counts for the value (a status written by
/// hand in SQL): a status the summary has not counted yet (a record replayed or skipped since)
/// is among the five, so no record is left out whatever changed between the two statements.
fn status_merge(
    c: &mut dyn Conn,
    cond: &str,
    p: &[Param],
    dir: &str,
    limit: u64,
) -> Result<(String, Vec<Param>), ArchiveError> {
    let mut statuses: Vec<String> = crate::record::status::ALL
        .iter()
        .map(|s| (*s).to_string())
        .collect();
    let known = vec!["?"; statuses.len()].join(", ");
    let mut sp = p.to_vec();
    sp.extend(statuses.iter().map(|s| Param::from(s.as_str())));
    let rows = c.query(
        &format!(
            "SELECT DISTINCT status FROM dead_letter_groups WHERE {cond} AND status NOT IN ({known})"
        ),
        &sp,
    )?;
    statuses.extend(rows.iter().filter_map(|r| r.first()?.opt_text()));
    let arm = format!("SELECT id FROM dead_letters WHERE {cond} AND status = ?");
    let sql = format!(
        "{} ORDER BY id {dir} LIMIT {limit}",
        vec![arm.as_str(); statuses.len()].join(" UNION ALL ")
    );
    let mut params = Vec::with_capacity(statuses.len() * (p.len() + 1));
    for s in &statuses {
        params.extend_from_slice(p);
        params.push(Param::from(s.as_str()));
    }
    Ok((sql, params))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(pairs: &[(&str, &str)]) -> Filter {
        Filter::from_pairs(pairs.iter().copied()).expect("filter")
    }

    #[test]
    fn the_driver_is_a_header_then_a_range_then_an_indexed_key() {
        let pg = Dialect::Postgres;
        assert_eq!(driver(pg, &filter(&[("original_queue", "q")])), None);
        assert_eq!(
            driver(
                pg,
                &filter(&[("error", "x"), ("status", "S"), ("header.a", "b")])
            ),
            Some(Driver::Header("a".into(), "b".into()))
        );
        assert_eq!(
            driver(
                pg,
                &filter(&[("body", "x"), ("status", "S"), ("since", "0")])
            ),
            Some(Driver::Range)
        );
        assert_eq!(
            driver(pg, &filter(&[("error", "x"), ("original_queue", "q")])),
            Some(Driver::Key("original_queue"))
        );
        assert_eq!(
            driver(
                Dialect::Sqlite,
                &filter(&[("error", "x"), ("original_queue", "q")])
            ),
            Some(Driver::Key("original_queue"))
        );
        assert_eq!(
            driver(
                Dialect::Sqlite,
                &filter(&[("error", "x"), ("original_queue", "q"), ("reason", "r")])
            ),
            Some(Driver::Key("reason"))
        );
        assert_eq!(driver(pg, &filter(&[("error", "x")])), None);
    }
}
