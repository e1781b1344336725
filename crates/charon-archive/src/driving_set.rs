//! A text term (`error`, `body`) with another term that matches few records, or whose records
//! the needle mostly matches: the other term's records walked, each checked for the needle
//! (branch `f9a`, docs/archive.md "Twenty-eighth round").
//!
//! The text plans start from the needle: the search index's candidates (`cause 5`: 200,298
//! trigram candidates over 1M records) are checked one by one against the other terms, or the
//! newest rows are walked (`crate::text_walk`) when the needle is common among all records. A
//! request such as `error=cause 5&since=<the last 2,000 records>` (200 matches) or
//! `body=xxxx&original_queue=orders-7` (every record of the queue matches) read the whole
//! candidate list for a few matches, or a 1,000,000-id candidate array for a page.
//!
//! Here the **driving set** is the records of one other term, read in id order from its index
//! alone — a header term's exact index range (`crate::header_index`), a time range's
//! `dead_letters_created`, or a key column's `(X, id)` index (PostgreSQL: `queue`,
//! `original_queue`, `error_fingerprint`, `status`, `reason`, with a status term other than
//! `PENDING` the partial `(X, status, id)` range; SQLite: `queue`, `reason`, `status`, and since
//! stop 46 `original_queue` and `error_fingerprint`, their `(X, status, id)` ranges merged in id
//! order, [`STATUS_BEFORE_ID`]; of several key terms, the one with the fewest records by the
//! summary) — its first
//! [`budget`] + 1 ids. Those ids are checked in growing chunks against the whole filter but the
//! driving term (an `error` needle on the narrow copy of the error texts, `crate::error_text`,
//! for the records at or below the search watermark; every other record on `dead_letters`),
//! until `need` matches are found:
//! - **the set walked whole** (it has at most [`budget`] records): its matches are every match,
//!   in id order — an exact count and any page;
//! - **`need` matches found** within the set's first ids: the first `need` matches in id order (a
//!   prefix of the driving set's order holds the first matches of all), so a page and a count of
//!   at least `need`;
//! - (stop 46) a page **sorted by time** from the first matches in id order, proven against the
//!   time index as `crate::time_walk` proves a walk's, and on SQLite the **capped count** of a
//!   list in another order ([`capped_total`]);
//! - else no proof (`None`): the caller's plans answer. The walk stops early when, after a
//!   chunk, the share of matches found projects more rows than it holds (a needle rare among the
//!   set's records: `error=cause 5&original_queue=orders-7`, 0 of 50,100): a wrong estimate costs
//!   time, never a wrong answer.

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::record::Record;
use crate::sql::{Cell, Conn, Dialect, Param};
use crate::total_cap::Total;

/// Most ids of the driving set read and checked: (PostgreSQL, SQLite). A check is a primary-key
/// read of the copy's or the record's row, ~1–3 µs on PostgreSQL over 1M records (the record's
/// heap page often from the OS cache), ~0.5 µs on the SQLite copy and ~4 µs on a SQLite record.
pub const BUDGET: (u64, u64) = (12_000, 12_000);

/// The first chunk's ids; each later chunk is twice the last.
pub const FIRST_CHUNK: usize = 1_000;

/// The budget on dialect `d`.
pub fn budget(d: Dialect) -> u64 {
    match d {
        Dialect::Postgres => BUDGET.0,
        Dialect::Sqlite => BUDGET.1,
    }
}

/// The term whose index gives the driving set.
#[derive(Debug, Clone, PartialEq)]
enum Driver {
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
const STATUS_BEFORE_ID: &[&str] = &["original_queue", "error_fingerprint"];

/// The driving term of `f`, when `f` has a text term and another term an index walks in id
/// order: a header term first (its range is exact and read index-only), then a time range, then
/// a key column.
fn driver(d: Dialect, f: &Filter) -> Option<Driver> {
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
fn chosen(c: &mut dyn Conn, f: &Filter, cols: &[&str]) -> Result<Option<Driver>, ArchiveError> {
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

/// The first `need` matches of `f` in id order (`desc`: newest first) when a walk of its driving
/// set proves them (module docs): `Some(ids)` with `need` ids (at least `need` match), or fewer
/// (every match: the set was walked whole); `None` when `f` has no driving set or the walk
/// proves nothing.
pub fn first_matches(
    c: &mut dyn Conn,
    f: &Filter,
    desc: bool,
    need: u64,
) -> Result<Option<Vec<i64>>, ArchiveError> {
    Ok(first_rows(c, f, desc, need, &[])?.map(|rows| {
        rows.iter()
            .filter_map(|r| r.first().and_then(Cell::opt_int))
            .collect()
    }))
}

/// [`first_matches`] as rows of `id` and the columns `cols` (of the record; `created_at` and the
/// group-key columns the copy holds are read there when the needle is checked on the copy).
pub fn first_rows(
    c: &mut dyn Conn,
    f: &Filter,
    desc: bool,
    need: u64,
    cols: &[&str],
) -> Result<Option<Vec<Vec<Cell>>>, ArchiveError> {
    let budget = budget(c.dialect());
    first_rows_within(c, f, desc, need, cols, budget)
}

/// [`first_matches`] with another budget (tests of the driving set's bound).
#[doc(hidden)]
pub fn first_matches_within(
    c: &mut dyn Conn,
    f: &Filter,
    desc: bool,
    need: u64,
    budget: u64,
) -> Result<Option<Vec<i64>>, ArchiveError> {
    Ok(
        first_rows_within(c, f, desc, need, &[], budget)?.map(|rows| {
            rows.iter()
                .filter_map(|r| r.first().and_then(Cell::opt_int))
                .collect()
        }),
    )
}

fn first_rows_within(
    c: &mut dyn Conn,
    f: &Filter,
    desc: bool,
    need: u64,
    cols: &[&str],
    budget: u64,
) -> Result<Option<Vec<Vec<Cell>>>, ArchiveError> {
    let Some(driver) = chosen(c, f, cols)? else {
        return Ok(None);
    };
    let Some(set) = driving_ids(c, f, &driver, desc, budget)? else {
        return Ok(None);
    };
    let whole = (set.len() as u64) <= budget;
    let check = Check::new(c, f, &driver, cols)?;
    let need_n = usize::try_from(need).unwrap_or(usize::MAX);
    let mut found: Vec<Vec<Cell>> = Vec::new();
    let mut at = 0usize;
    let mut chunk = FIRST_CHUNK;
    while at < set.len() && found.len() < need_n {
        let end = (at + chunk).min(set.len());
        let mut got = check.matching(c, &set[at..end])?;
        got.sort_unstable_by_key(|r| r.first().and_then(Cell::opt_int).unwrap_or(0));
        if desc {
            got.reverse();
        }
        found.extend(got);
        at = end;
        chunk = chunk.saturating_mul(2);
        if found.len() >= need_n || found.is_empty() && whole {
            continue;
        }
        // The rows the walk needs at the share found so far: against those it holds, half again
        // (not the whole set: give up; a share of 900 in the first 1,000 — orders-7's newest 100
        // are another queue's — projected 12,518 rows for a time page's 11,266 matches among
        // 12,001, and gave up a walk that needed 11,366), and as the next chunk's size (a tenth
        // more, so that a common needle is not checked on thousands of rows past its last match).
        let projected = (need as f64) * (at as f64) / (found.len().max(1) as f64);
        if !whole && (found.is_empty() || projected > set.len() as f64 * 1.5) {
            return Ok(None);
        }
        if !found.is_empty() {
            let rest = (projected - at as f64).max(0.0) * 1.1 + 16.0;
            chunk = chunk.min(rest as usize).max(16);
        }
    }
    if found.len() >= need_n {
        found.truncate(need_n);
        return Ok(Some(found));
    }
    Ok(whole.then_some(found))
}

/// A list's page and capped `total` (`ops::list_capped` with `cap`) from the driving set's walk,
/// for a page in id order (or by a group key, from a set walked whole: [`key_sorted_page`]);
/// `None` (the list's other plans) without a cap, in another order, or when the walk proves
/// nothing. Its first `max(cap + 1, reach)` matches give both: the page (a
/// prefix of the matches in id order) and the count (over `cap`: a lower bound).
pub fn list_page(
    c: &mut dyn Conn,
    f: &Filter,
    sort: Option<&str>,
    page: u64,
    page_size: u64,
    cap: Option<u64>,
) -> Result<Option<(Vec<Record>, Total)>, ArchiveError> {
    let Some(cap) = cap else {
        return Ok(None);
    };
    if driver(c.dialect(), f).is_none() {
        return Ok(None);
    }
    // Sorted by a group key every match holds at one value: the id order (`key_sort`).
    let order = crate::key_sort::constant_key_order(c, f, &crate::filter::order_by(sort)?)?;
    let offset = page.saturating_sub(1).saturating_mul(page_size);
    if order.starts_with("created_at ") {
        return time_page(c, f, &order, offset, page_size, cap);
    }
    if !order.starts_with("id ") {
        return key_sorted_page(c, f, &order, offset, page_size, cap);
    }
    let reach = offset.saturating_add(page_size);
    let need = cap.saturating_add(1).max(reach);
    let Some(mut ids) = first_matches(c, f, order.starts_with("id DESC"), need)? else {
        return Ok(None);
    };
    let total = Total::from_capped(i64::try_from(ids.len()).unwrap_or(i64::MAX), cap);
    ids.truncate(usize::try_from(reach).unwrap_or(usize::MAX));
    Ok(Some((
        crate::ops::walked_page(c, ids, offset, &order)?,
        total,
    )))
}

/// [`list_page`] sorted by time (stop 46): the driving set's first matches in id order with their
/// `created_at`, as many as the capped count and the page need, the page proven against the
/// time index as `crate::time_walk` proves a walk's (`original_queue=orders-7&error=could&
/// sort=-created_at&page=50` on SQLite: the copy's count of orders-7's `could` candidates and a
/// sort of its matches, 182 ms, against ~15; on PostgreSQL `…&sort=created_at&page=100`, past
/// the copy walk's budget, 1.16 s against 31 ms). On PostgreSQL only since its driving sets check
/// an `error` needle on the copy: through the records' id ranges it cost more than its plans
/// (`error=could&status=SKIPPED&sort=-created_at&page=100` 15 → 42 ms; now 23).
fn time_page(
    c: &mut dyn Conn,
    f: &Filter,
    order: &str,
    offset: u64,
    page_size: u64,
    cap: u64,
) -> Result<Option<(Vec<Record>, Total)>, ArchiveError> {
    let desc = order.starts_with("created_at DESC");
    let reach = offset.saturating_add(page_size);
    let need = crate::time_walk::walked(reach).max(cap.saturating_add(1));
    let Some(rows) = first_rows(c, f, desc, need, &["created_at"])? else {
        return Ok(None);
    };
    let total = Total::from_capped(i64::try_from(rows.len()).unwrap_or(i64::MAX), cap);
    let complete = (rows.len() as u64) < need;
    let rows: Vec<(i64, i64)> = rows
        .iter()
        .filter_map(|r| Some((r.first()?.opt_int()?, r.get(1)?.opt_int()?)))
        .collect();
    let checks = f.to_sql_checks_only(c.dialect())?;
    let Some(page) = crate::time_walk::proven(c, rows, complete, &checks, desc, reach)? else {
        return Ok(None);
    };
    let ids = page.into_iter().map(|(id, _)| id).collect();
    Ok(Some((
        crate::ops::walked_page(c, ids, offset, order)?,
        total,
    )))
}

/// The capped `total` of `f` (`cap`) from its driving set's first `cap + 1` matches, for a list
/// whose page other plans find (a sort by status: `key_first_value` pages a value's list, whose
/// driving set answers; the count of the whole filter went to the copy's candidates,
/// `original_queue=orders-7&error=could&sort=status&page=20` 145 of 180 ms); `None` when the
/// walk proves nothing.
pub fn capped_total(c: &mut dyn Conn, f: &Filter, cap: u64) -> Result<Option<Total>, ArchiveError> {
    // SQLite only: PostgreSQL's plans count these faster than its driving set's range checks
    // (`error=could&status=SKIPPED&sort=error_fingerprint` 20 → 48 ms, measured).
    if c.dialect() != Dialect::Sqlite || driver(c.dialect(), f).is_none() {
        return Ok(None);
    }
    Ok(first_matches(c, f, true, cap.saturating_add(1))?
        .map(|ids| Total::from_capped(i64::try_from(ids.len()).unwrap_or(i64::MAX), cap)))
}

/// [`list_page`] sorted by a group key (stop 45): only a driving set walked whole gives every
/// match, whose `(id, key)` rows are then sorted as the backend orders the key
/// (`error=cause 5&since=<the last 2,000 records>&sort=original_queue`, 200 matches: the copy's
/// sort of every `cause 5` match before, SQLite 58 ms, PostgreSQL 91–109).
fn key_sorted_page(
    c: &mut dyn Conn,
    f: &Filter,
    order: &str,
    offset: u64,
    page_size: u64,
    cap: u64,
) -> Result<Option<(Vec<Record>, Total)>, ArchiveError> {
    let Some((col, dir)) = crate::key_sort::key_order(order) else {
        return Ok(None);
    };
    let Some(rows) = first_rows(c, f, false, u64::MAX, &[col])? else {
        return Ok(None);
    };
    let mut keyed: Vec<(Option<String>, i64)> = rows
        .iter()
        .filter_map(|r| Some((r.get(1)?.opt_text(), r.first()?.opt_int()?)))
        .collect();
    let desc = dir == "DESC";
    let nulls_first = crate::rare_time_page::nulls_first(c.dialect(), desc);
    crate::rare_time_page::sort_keyed(&mut keyed, desc, nulls_first);
    let total = Total::from_capped(i64::try_from(keyed.len()).unwrap_or(i64::MAX), cap);
    let reach = usize::try_from(offset.saturating_add(page_size)).unwrap_or(usize::MAX);
    let ids: Vec<i64> = keyed.into_iter().take(reach).map(|(_, id)| id).collect();
    Ok(Some((
        crate::ops::walked_page(c, ids, offset, order)?,
        total,
    )))
}

/// The first `budget + 1` ids of the driving set in id order (`desc`: newest first); `None` for a
/// time range of more than `budget` records (its newest ids would be sorted from the whole
/// range on SQLite; a walk of part of it is left to `crate::text_walk`).
fn driving_ids(
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
            let mut g = Filter::default();
            for k in ["since", "until"] {
                if let Some(v) = f.terms.get(k) {
                    g.terms.insert(k.to_string(), v.clone());
                }
            }
            let (cond, p) = g.to_sql_checks_only(d)?;
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
            let merged = d == Dialect::Sqlite && STATUS_BEFORE_ID.contains(col);
            let mut g = Filter::default();
            if let Some(v) = f.terms.get(*col) {
                g.terms.insert((*col).to_string(), v.clone());
            }
            let (cond, p) = g.to_sql_checks_only(d)?;
            if let (true, Some(s)) = (merged, f.terms.get("status")) {
                // One status: its range of the `(X, status, id)` index, in id order.
                let mut p = p;
                p.push(Param::from(s.as_str()));
                (
                    format!(
                        "SELECT id FROM dead_letters WHERE {cond} AND status = ? \
                         ORDER BY id {dir} LIMIT {limit}"
                    ),
                    p,
                )
            } else if merged {
                status_merge(c, &cond, &p, dir, limit)?
            } else {
                let (cond, p) = key_set_filter(d, f, col).to_sql_checks_only(d)?;
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

/// How a chunk of the driving set's ids is checked against the filter but its driving term.
struct Check {
    /// `id` and the columns read of each match.
    select: String,
    /// A key or time driver (on SQLite, unless the needle is checked on the copy): a chunk is
    /// the range of ids between its first and last, read through the driver's own index
    /// (`X = ? AND id BETWEEN …`, a range scan of its `(X, id)` index and the records), not a
    /// list of ids (PostgreSQL: one index descent each, ~2 µs an id against ~1; SQLite
    /// `body=…&status=SKIPPED` 25–27 ms by lists, ~14 by the range).
    bounded: bool,
    /// `error` on the copy (alias `e`) for the ids at or below the watermark: its condition,
    /// parameters and the watermark.
    copy: Option<(String, Vec<Param>, i64)>,
    /// The condition on `dead_letters` (every id, or those above the watermark).
    rest: String,
    rest_params: Vec<Param>,
}

impl Check {
    fn new(
        c: &mut dyn Conn,
        f: &Filter,
        driver: &Driver,
        cols: &[&str],
    ) -> Result<Check, ArchiveError> {
        let d = c.dialect();
        let select = std::iter::once("id")
            .chain(cols.iter().copied())
            .collect::<Vec<_>>()
            .join(", ");
        let keyed = !matches!(driver, Driver::Header(..));
        // An `error` needle is checked on the copy through an id list (SQLite ~0.5 µs a row
        // against ~1.4 on the record; PostgreSQL, stop 46: 10,001 ids of a fingerprint 9 ms on
        // the copy against 49 by the key's id range on the records, whose texts are detoasted);
        // every other walk of a key or a range is bounded.
        let copy_checked = f.terms.contains_key("error")
            && !f.terms.contains_key("body")
            && crate::key_copy::answers(f);
        // SQLite's `(X, status, id)` keys hold no id range per value: a chunk is an id list.
        let ranged = match driver {
            Driver::Key(col) => d != Dialect::Sqlite || !STATUS_BEFORE_ID.contains(col),
            _ => true,
        };
        if keyed && ranged && !copy_checked {
            let (rest, rest_params) = f.to_sql_checks_only(d)?;
            return Ok(Check {
                select,
                bounded: true,
                copy: None,
                rest,
                rest_params,
            });
        }
        // The driving term is implied by the set (a header's exact range); a range or key term
        // is cheap on the row and kept.
        let mut g = f.clone();
        if let Driver::Header(name, _) = driver {
            g.terms.remove(&format!("header.{name}"));
        }
        let (rest, rest_params) = g.to_sql_checks_only(d)?;
        let on_copy = !g.terms.contains_key("body")
            && crate::key_copy::answers(f)
            && cols
                .iter()
                .all(|c| crate::key_copy::KEY_COLUMNS.contains(c));
        let copy = match (g.terms.get("error"), on_copy) {
            (Some(needle), true) => match crate::error_text::check_on_copy(d, needle) {
                Some((check, mut p)) => {
                    let mut o = g.clone();
                    o.terms.remove("error");
                    let (others, op) = o.to_sql_on(c)?;
                    p.extend(op);
                    let wm = crate::header_index::watermark(c)?;
                    Some((format!("{check} AND {others}"), p, wm))
                }
                None => None,
            },
            _ => None,
        };
        Ok(Check {
            select,
            bounded: false,
            copy,
            rest,
            rest_params,
        })
    }

    /// The rows (`id` first) of the ids of `ids` that match, in any order.
    fn matching(&self, c: &mut dyn Conn, ids: &[i64]) -> Result<Vec<Vec<Cell>>, ArchiveError> {
        let d = c.dialect();
        if self.bounded {
            let (Some(lo), Some(hi)) = (ids.iter().min(), ids.iter().max()) else {
                return Ok(Vec::new());
            };
            // The bounds as literals (integers from the database): a generic plan, not knowing
            // them, estimated the id range as 0.5% of the table and walked the primary key over
            // it, reading twenty records for each of a key's (`original_queue`: 14–22 ms a chunk
            // of 2,000–4,000 ids, against 3 through `(original_queue, id)`).
            return c.query(
                &format!(
                    "SELECT {} FROM dead_letters WHERE id >= {lo} AND id <= {hi} AND {}",
                    self.select, self.rest
                ),
                &self.rest_params,
            );
        }
        let (low, high): (Vec<i64>, Vec<i64>) = match &self.copy {
            Some((_, _, wm)) => ids.iter().partition(|&&id| id <= *wm),
            None => (Vec::new(), ids.to_vec()),
        };
        let mut out = Vec::new();
        if let (Some((cond, p, _)), false) = (&self.copy, low.is_empty()) {
            let sql = format!(
                "SELECT {} FROM dead_letter_error_text AS e WHERE {} AND {cond}",
                self.select,
                id_list(d, "e.id", &low)
            );
            out.extend(c.query(&sql, p)?);
        }
        if !high.is_empty() {
            let sql = format!(
                "SELECT {} FROM dead_letters WHERE {} AND {}",
                self.select,
                id_list(d, "id", &high),
                self.rest
            );
            out.extend(c.query(&sql, &self.rest_params)?);
        }
        Ok(out)
    }
}

/// `col` among `ids` as integer literals (they come from the database): one array over the
/// primary key on PostgreSQL.
fn id_list(d: Dialect, col: &str, ids: &[i64]) -> String {
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    match d {
        Dialect::Postgres => format!("{col} = ANY('{{{}}}'::bigint[])", list.join(",")),
        Dialect::Sqlite => format!("{col} IN ({})", list.join(",")),
    }
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
