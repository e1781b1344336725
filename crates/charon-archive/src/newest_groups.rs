//! Issue 9's `/groups` of an `error` or `body` filter over its newest matches (branch `g9b`,
//! docs/archive.md "API", "`count_relation`", and "Twenty-seventh round").
//!
//! Such a filter's exact groups read every match (`error=cause 5` over 1M records: 100,200 rows
//! of the error-text copy, 81–139 ms). The lead's rule, the lists' capped `total` applied to
//! groups (Elasticsearch's sampler aggregation): the request takes the **newest `cap + 1`
//! matches** by id. At most `cap` of them are all the matches: grouped exactly, every group
//! [`Relation::Eq`]. More: the newest `cap` only are grouped, every group [`Relation::Gte`] —
//! its `count` its matches among them (a true lower bound), `oldest`/`newest` the oldest and
//! newest among them; a group with no match among them is not listed. `?exact_total=true` takes
//! the exact plans (`ops::count_groups`).
//!
//! The matches come newest first, each with its `by` columns and time, from:
//! - a **bounded walk** over the newest rows (`crate::text_walk`) when its probe finds the needle
//!   common: on the copy of the error texts (`crate::key_copy`) for a filter and `by` the copy
//!   holds, merged with the matching records above the search watermark (`key_copy::Split::
//!   newest_rows`; the newest `cap + 1` of both sides are the newest of all), else on
//!   `dead_letters` itself (`body`, or a `by` column the copy lacks);
//! - else the copy's (and the records above the watermark's) newest matches through the search
//!   index, or the records' (`ORDER BY id DESC LIMIT cap + 1`).
//!
//! A walk that finds fewer than `cap + 1` rows within its budget proves nothing about older rows,
//! so the second path answers: a wrong probe costs time, never a wrong group.
//!
//! The groups are made in memory from the rows (ids, `by` columns and times only). A group's
//! sample `error_message` is that of its match with the greatest id, read by primary key for the
//! first `group_sample::SAMPLED` groups as the header plan's (`null` when that record has none;
//! docs/archive.md "Groups: order and sample").

use std::collections::HashMap;

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::group_sample::{Group, Sample};
use crate::sql::{Cell, Conn, Dialect};
use crate::total_cap::Relation;

/// The groups of the newest matches and how their counts relate to all matches.
#[derive(Debug)]
pub struct Newest {
    /// The groups, unordered (`group_sample::order` orders them).
    pub groups: Vec<Group>,
    /// [`Relation::Eq`]: every match grouped; [`Relation::Gte`]: the newest `cap` only.
    pub relation: Relation,
}

/// The groups by `cols` of `f`'s newest `cap + 1` matches (see the module docs).
pub fn groups(
    c: &mut dyn Conn,
    f: &Filter,
    cols: &[String],
    cap: u64,
) -> Result<Newest, ArchiveError> {
    let reach = cap.saturating_add(1);
    let rows = newest_rows(c, f, cols, reach)?;
    Ok(group_rows(rows, cols.len(), cap))
}

/// One match: id, the `by` columns' values, `created_at`.
type Row = (i64, Vec<Option<String>>, i64);

/// A row selected as `id, created_at, <the n by columns>`.
fn row_of(r: &[Cell], n: usize) -> Row {
    (
        r[0].int(),
        (2..n + 2).map(|i| r[i].opt_text()).collect(),
        r[1].int(),
    )
}

/// `rows` newest first, without repeats (a record both sides saw when the watermark moved
/// between them), at most `reach` of them.
fn newest_first(mut rows: Vec<Row>, reach: u64) -> Vec<Row> {
    rows.sort_unstable_by_key(|r| std::cmp::Reverse(r.0));
    rows.dedup_by_key(|r| r.0);
    rows.truncate(usize::try_from(reach).unwrap_or(usize::MAX));
    rows
}

/// The newest `reach` matches of `f` (fewer: every match), newest first.
fn newest_rows(
    c: &mut dyn Conn,
    f: &Filter,
    cols: &[String],
    reach: u64,
) -> Result<Vec<Row>, ArchiveError> {
    let d = c.dialect();
    let list: String = cols.iter().map(|c| format!(", {c}")).collect();
    let select = format!("id, created_at{list}");
    // A filter the copy answers: its newest matches from the copy (and the records above the
    // watermark); with a `by` column the copy lacks, their ids and times only, the columns then
    // read from those records by primary key.
    let split = if crate::key_copy::answers(f) {
        Some(crate::ops::copy_split(c, f, Some(reach.saturating_sub(1)))?)
    } else {
        None
    };
    // A text term with another term whose records are few, or mostly match: that term's records
    // walked newest first, each checked (`crate::driving_set`); the rows read by primary key.
    let mut walked: Vec<&str> = vec!["created_at"];
    walked.extend(cols.iter().map(String::as_str));
    if let Some(rows) = crate::driving_set::first_rows(c, f, true, reach, &walked)? {
        let rows = rows.iter().map(|r| row_of(r, cols.len())).collect();
        return Ok(newest_first(rows, reach));
    }
    let held = crate::key_copy::holds(cols);
    // `by` columns the copy lacks but the summary keys (`content_type`, `original_exchange`):
    // the copy's rows carry their summary group's other keys, from which the summary gives the
    // columns wherever one value goes with them (`by_summary`).
    let keyed = !held && crate::summary::groups_by(cols);
    let group_keys: Vec<String> = copy_keys().iter().map(|k| k.to_string()).collect();
    let copy_cols: &[String] = match (held, keyed) {
        (true, _) => cols,
        (false, true) => &group_keys,
        (false, false) => &[],
    };
    let copy_select = format!(
        "id, created_at{}",
        copy_cols
            .iter()
            .map(|c| format!(", {c}"))
            .collect::<String>()
    );
    let from_copy = |c: &mut dyn Conn, rows: Vec<Row>| -> Result<Vec<Row>, ArchiveError> {
        match (held, keyed) {
            (true, _) => Ok(rows),
            (false, true) => by_summary(c, cols, &select, rows),
            (false, false) => by_ids(c, cols, &select, rows),
        }
    };
    let mut walk = crate::ops::walk_source(c, f)?;
    if let Some(w) = walk.as_mut().filter(|w| w.on_copy() && split.is_none()) {
        // (Not reached: a copy walk implies a filter the copy answers.) The records walked.
        let (cond, p) = f.to_sql_checks_only(d)?;
        *w = crate::text_walk::Source::records(d, cond, p);
    }
    if let Some(mut w) = walk
        && w.promising(c, reach)?
    {
        let (sql, p, n) = match (&split, w.on_copy()) {
            (Some(s), true) => {
                let (sql, p) =
                    s.newest_rows(copy_cols, reach, Some(w.rows_sql(&copy_select, reach)));
                (sql, p, copy_cols.len())
            }
            _ => {
                let (sql, p) = w.rows_sql(&select, reach);
                (sql, p, cols.len())
            }
        };
        let rows: Vec<Row> = c.query(&sql, &p)?.iter().map(|r| row_of(r, n)).collect();
        let rows = newest_first(rows, reach);
        if rows.len() as u64 >= reach {
            return if w.on_copy() {
                from_copy(c, rows)
            } else {
                Ok(rows)
            };
        }
    }
    if let Some(s) = &split {
        let (sql, p) = s.newest_rows(copy_cols, reach, None);
        let n = copy_cols.len();
        let rows: Vec<Row> = c.query(&sql, &p)?.iter().map(|r| row_of(r, n)).collect();
        return from_copy(c, newest_first(rows, reach));
    }
    // `id + 0`: the matches from the search index's candidates, then sorted (not the primary
    // key walked backwards testing each record against them).
    let (cond, p) = f.to_sql_reading_records(c)?;
    let sql = format!(
        "SELECT {select} FROM dead_letters WHERE {cond} ORDER BY id + 0 DESC LIMIT {reach}"
    );
    let n = cols.len();
    let rows: Vec<Row> = c.query(&sql, &p)?.iter().map(|r| row_of(r, n)).collect();
    Ok(newest_first(rows, reach))
}

/// The copy's columns that, with `content_type` and `original_exchange`, make a record's group
/// in the summary (`summary::KEY_COLUMNS`): the copy's key columns but its time.
fn copy_keys() -> Vec<&'static str> {
    crate::key_copy::KEY_COLUMNS
        .iter()
        .copied()
        .filter(|k| *k != "created_at")
        .collect()
}

/// `rows` (newest first, their values the [`copy_keys`]) with the values of `cols` (summary key
/// columns, some not in the copy) instead: where the summary's groups of a row's copy keys
/// (with records) hold one combination of `cols`, every record of those keys has it (the
/// summary is exact at every commit); the other rows' records are read ([`by_ids`]). The 1M
/// fill's `/groups?by=content_type&error=cause 5` read 10,001 records for one `content_type`
/// (SQLite 46 ms).
fn by_summary(
    c: &mut dyn Conn,
    cols: &[String],
    select: &str,
    rows: Vec<Row>,
) -> Result<Vec<Row>, ArchiveError> {
    let copy_keys = copy_keys();
    let keys = copy_keys.join(", ");
    let mut values: HashMap<Vec<Option<String>>, Option<Vec<Option<String>>>> = HashMap::new();
    for r in c.query(
        &format!(
            "SELECT DISTINCT {keys}, {} FROM dead_letter_groups WHERE records > 0",
            cols.join(", ")
        ),
        &[],
    )? {
        let key: Vec<Option<String>> = (0..copy_keys.len()).map(|i| r[i].opt_text()).collect();
        let by: Vec<Option<String>> = (copy_keys.len()..r.len())
            .map(|i| r[i].opt_text())
            .collect();
        values
            .entry(key)
            .and_modify(|v| *v = None)
            .or_insert(Some(by));
    }
    let mut known = Vec::with_capacity(rows.len());
    let mut unknown = Vec::new();
    for (id, key, t) in rows {
        match values.get(&key) {
            Some(Some(by)) => known.push((id, by.clone(), t)),
            _ => unknown.push((id, key, t)),
        }
    }
    known.extend(by_ids(c, cols, select, unknown)?);
    Ok(newest_first(known, u64::MAX))
}

/// The `select` (`id, created_at` and the `cols`) of the records of `rows` (ids and times, newest
/// first), newest first; the ids as integer literals (they come from the database).
fn by_ids(
    c: &mut dyn Conn,
    cols: &[String],
    select: &str,
    rows: Vec<Row>,
) -> Result<Vec<Row>, ArchiveError> {
    if rows.is_empty() {
        return Ok(rows);
    }
    let ids: Vec<String> = rows.iter().map(|r| r.0.to_string()).collect();
    let cond = match c.dialect() {
        // One array literal: planned as one `= ANY` over the primary key.
        Dialect::Postgres => format!("id = ANY('{{{}}}'::bigint[])", ids.join(",")),
        Dialect::Sqlite => format!("id IN ({})", ids.join(",")),
    };
    let n = cols.len();
    let got: Vec<Row> = c
        .query(
            &format!("SELECT {select} FROM dead_letters WHERE {cond}"),
            &[],
        )?
        .iter()
        .map(|r| row_of(r, n))
        .collect();
    // (A record deleted in between is left out: it no longer matches.)
    Ok(newest_first(got, u64::MAX))
}

/// The groups of `rows` (newest first): all of them when at most `cap`, else the first `cap`.
/// The groups of the newest `cap` rows of `sql` (selecting `id`, `created_at` and the `n` `by`
/// columns, rows in any order, at least the newest `cap + 1` of the matches when more match):
/// for a header term over its count's cap, the rows of its index range
/// (`header_groups::Groups::newest_rows`).
pub fn of_rows(
    c: &mut dyn Conn,
    sql: &str,
    params: &[crate::sql::Param],
    n: usize,
    cap: u64,
) -> Result<Newest, ArchiveError> {
    let rows: Vec<Row> = c.query(sql, params)?.iter().map(|r| row_of(r, n)).collect();
    Ok(group_rows(
        newest_first(rows, cap.saturating_add(1)),
        n,
        cap,
    ))
}

fn group_rows(mut rows: Vec<Row>, n: usize, cap: u64) -> Newest {
    let relation = if rows.len() as u64 > cap {
        rows.truncate(usize::try_from(cap).unwrap_or(usize::MAX));
        Relation::Gte
    } else {
        Relation::Eq
    };
    let mut at: HashMap<Vec<Option<String>>, usize> = HashMap::new();
    let mut groups: Vec<Group> = Vec::new();
    for (id, values, time) in rows {
        debug_assert_eq!(values.len(), n);
        match at.get(&values) {
            Some(&i) => {
                let g = &mut groups[i];
                g.count += 1;
                g.oldest = g.oldest.min(time);
                g.newest = g.newest.max(time);
            }
            None => {
                at.insert(values.clone(), groups.len());
                // The first row of a group is its greatest id: its message is the sample (read
                // by primary key for the first `group_sample::SAMPLED` groups).
                groups.push(Group {
                    values,
                    count: 1,
                    oldest: time,
                    newest: time,
                    sample: Sample::Of(id),
                });
            }
        }
    }
    Newest { groups, relation }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, v: &str, t: i64) -> Row {
        (id, vec![Some(v.to_string())], t)
    }

    #[test]
    fn over_the_cap_the_newest_cap_rows_are_grouped_as_a_lower_bound() {
        let rows = newest_first(
            vec![
                row(1, "a", 10),
                row(4, "a", 40),
                row(3, "b", 30),
                row(2, "a", 20),
                row(3, "b", 30),
            ],
            4,
        );
        assert_eq!(
            rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            vec![4, 3, 2, 1]
        );
        let g = group_rows(rows.clone(), 1, 3);
        assert_eq!(g.relation, Relation::Gte);
        let a = g
            .groups
            .iter()
            .find(|g| g.values[0].as_deref() == Some("a"));
        let a = a.expect("group a");
        assert_eq!((a.count, a.oldest, a.newest), (2, 20, 40));
        assert_eq!(a.sample, Sample::Of(4));
        let g = group_rows(rows, 1, 4);
        assert_eq!(g.relation, Relation::Eq);
        assert_eq!(g.groups.iter().map(|g| g.count).sum::<i64>(), 4);
    }
}
