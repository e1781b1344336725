//! Reading and changing records: every operation once, over any [`Conn`].

use charon_protocol::{BasicProperties, RawProperties};
use serde_json::{Value, json};

use crate::error::ArchiveError;
use crate::extract::NewRecord;
use crate::filter::{Filter, group_by, order_by};
use crate::group_sample::{Group, SAMPLED, Sample};
use crate::header_index;
use crate::json::{json_to_table, table_to_json};
use crate::record::{RECORD_COLUMNS, Record, payload_json, status};
use crate::scope;
use crate::sql::{Cell, Conn, Dialect, Param, transaction};
use crate::summary;
use crate::time::{format_ms, now_ms};
use crate::total_cap::Total;

/// Which records an operation applies to.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// These ids.
    Ids(Vec<i64>),
    /// Those matching.
    Filter(Filter),
}

impl Selection {
    /// The SQL condition and parameters.
    pub fn to_sql(&self, c: &dyn Conn) -> Result<(String, Vec<Param>), ArchiveError> {
        match self {
            Selection::Ids(ids) if ids.is_empty() => Ok(("1 = 0".into(), Vec::new())),
            Selection::Ids(ids) => {
                let marks = vec!["?"; ids.len()].join(", ");
                Ok((
                    format!("id IN ({marks})"),
                    ids.iter().map(|i| Param::from(*i)).collect(),
                ))
            }
            Selection::Filter(f) => f.to_sql(c.dialect()),
        }
    }

    /// For the audit row: (record ids JSON, filter JSON).
    fn audit_parts(&self) -> (Option<String>, Option<String>) {
        match self {
            Selection::Ids(ids) => (Some(json!(ids).to_string()), None),
            Selection::Filter(f) => (None, Some(json!(f.terms).to_string())),
        }
    }
}

/// Inserts records in one transaction; a record whose `stable_key` exists is left alone.
/// Returns how many were new (see [`crate::ingest`]).
pub fn insert_batch(c: &mut dyn Conn, recs: &[NewRecord]) -> Result<u64, ArchiveError> {
    crate::ingest::insert_batch(c, recs)
}

pub(crate) fn count(c: &mut dyn Conn, sql: &str, p: &[Param]) -> Result<i64, ArchiveError> {
    Ok(c.query(sql, p)?
        .first()
        .and_then(|r| r.first())
        .map_or(0, Cell::int))
}

/// A page of records matching `f`, and how many match (exactly).
pub fn list(
    c: &mut dyn Conn,
    f: &Filter,
    sort: Option<&str>,
    page: u64,
    page_size: u64,
) -> Result<(Vec<Record>, i64), ArchiveError> {
    let (items, total) = list_capped(c, f, sort, page, page_size, None)?;
    Ok((items, total.count))
}

/// [`list`] whose `total` of an `error` or `body` filter is counted up to `cap` matches when
/// `cap` is given (`crate::total_cap`: over it, the cap and
/// [`crate::total_cap::Relation::Gte`]); the page is the
/// same either way.
pub fn list_capped(
    c: &mut dyn Conn,
    f: &Filter,
    sort: Option<&str>,
    page: u64,
    page_size: u64,
    cap: Option<u64>,
) -> Result<(Vec<Record>, Total), ArchiveError> {
    // One read snapshot: the plans read the copy and the records above the search watermark in
    // separate statements (`time_walk`'s walk, kept from the count's, and then the records above
    // the watermark), and a watermark the indexer moved between them left the records it passed
    // out of both (a flaky `test_text_filter_totals_over_the_cap_are_lower_bounds` page, k9b).
    // A vhost limit the summary shows leaves out no match: the unlimited filter's plans
    // (`vhost_limit`), the summary's counts in the same snapshot.
    crate::sql::read_snapshot(c, |c| {
        crate::vhost_limit::read(c, f, |c, f| list_plans(c, f, sort, page, page_size, cap))
    })
}

/// [`list_capped`] once the vhost limit is settled.
fn list_plans(
    c: &mut dyn Conn,
    f: &Filter,
    sort: Option<&str>,
    page: u64,
    page_size: u64,
    cap: Option<u64>,
) -> Result<(Vec<Record>, Total), ArchiveError> {
    let requested_cap = cap;
    let cap = crate::total_cap::cap_for(f, cap);
    // Sorted by a group key all matches share (the summary's one value): the id order (s9a).
    let order = crate::key_sort::constant_key_order(c, f, &order_by(sort)?)?;
    // A text term with another term whose records are few, or mostly match: that term's
    // records walked in id order, each checked (`driving_set`): the page and the capped count.
    if let Some(page) = crate::driving_set::list_page(c, f, &order, page, page_size, cap)? {
        return Ok(page);
    }
    // An `error` needle in a time window of more records than that: the copy walked in id
    // order between the window's ends (`window_walk`).
    if let Some(page) = crate::window_walk::list_page(c, f, &order, page, page_size, cap)? {
        return Ok(page);
    }
    // An `error` term alone is counted and paged from the narrow copy of the error texts
    // (migration 12); with terms of the copy's other columns, from the copy too (migration 13).
    // Header terms without an `error` one stay on `dead_letters`: a covering index such as
    // `(queue, id)` answers each header match there without a record read, cheaper than the
    // copy's row (measured: `queue=…&header.…` 300 → 616 ms on SQLite, 309 → 469 on PostgreSQL,
    // docs/archive.md "Nineteenth round"); `/groups` reads records there, so it uses the copy.
    let on_copy = crate::key_copy::answers(f) && f.terms.contains_key("error");
    let (error_fts, cond, params) = error_condition(c, f, on_copy)?;
    let split = if on_copy {
        Some(split(c, f, &cond, &params, &error_fts, cap)?)
    } else {
        None
    };
    let error_fts = error_fts.filter(|_| f.error_only().is_some());
    // One `header.NAME=value` term: counted and paged from the exact header index (migration 9).
    let d = c.dialect();
    let header = match f.header_only() {
        Some((name, value)) => Some((name, value, header_index::watermark(c)?)),
        None => None,
    };
    // One header term with terms of the group-key columns its index rows hold (migrations 22
    // and 25) and any vhost limit: counted and paged from the header's index range alone.
    let header_columns = crate::header_columns::plan(c, f)?;
    // A needle matching a large share of the records: its newest ones walked, no candidate
    // list built (`text_walk`).
    let mut walk = walk_source(c, f)?;
    // Sorted by time (or by `updated_at`, whose common records are in time order): the count's
    // walk keeps the rows' times for the page's walk.
    if order.starts_with("created_at ") || order.starts_with("updated_at ") {
        walk = walk.map(crate::text_walk::Source::keeping_times);
    }
    // A deep page sorted by time whose walk over the copy reaches the cap anyway: one walk
    // proves the page and the capped count (`time_walk`), instead of a count's walk and then
    // the page's over the same rows.
    let early_reach = page.max(1).saturating_mul(page_size);
    if let (Some(cap), Some(w), true) = (cap, walk.as_mut(), order.starts_with("created_at "))
        && w.on_copy()
        && early_reach.saturating_mul(2) >= cap
    {
        let checks = f.to_sql_checks_only(d)?;
        let desc = order.starts_with("created_at DESC");
        let need = cap.saturating_add(1);
        if let Some(ids) = crate::time_walk::page_ids(c, w, &checks, desc, early_reach, need)? {
            let offset = page.saturating_sub(1).saturating_mul(page_size);
            let total = Total::from_capped(i64::try_from(need).unwrap_or(i64::MAX), cap);
            return Ok((walked_page(c, ids, offset, &order)?, total));
        }
    }
    // A page sorted by time of an `error` needle too rare for a walk to count it: the count
    // and the page from one read of its matches on the copy (`rare_time_page`), instead of the
    // count's read of the same matches and then a walk or a sort for the page.
    // The same for a page sorted by a group key the copy holds (`rare_time_page::key_page`).
    let key_col = crate::key_sort::key_order(&order)
        .filter(|(col, _)| crate::key_copy::holds(&[col.to_string()]));
    let rare = match (
        order.starts_with("created_at ") || key_col.is_some(),
        walk.as_mut(),
    ) {
        (true, Some(w)) if w.on_copy() => {
            estimate(c, w)? <= crate::rare_time_page::MOST
                && !match cap {
                    Some(cap) => w.promising(c, cap.saturating_add(1))?,
                    None => false,
                }
        }
        _ => false,
    };
    let rare_page = match (rare, &split, key_col) {
        (true, Some(s), Some((col, dir))) => {
            let desc = dir == "DESC";
            let nulls_first = crate::rare_time_page::nulls_first(d, desc);
            crate::rare_time_page::key_page(c, s, col, desc, nulls_first, early_reach)?
        }
        (true, Some(s), None) => {
            crate::rare_time_page::page(c, s, order.starts_with("created_at DESC"), early_reach)?
        }
        _ => None,
    };
    if let Some((ids, n)) = rare_page {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let total = match cap {
            Some(cap) => Total::from_capped(n, cap),
            None => Total::exact(n),
        };
        let offset = page.saturating_sub(1).saturating_mul(page_size);
        return Ok((walked_page(c, ids, offset, &order)?, total));
    }
    // In another order than the id's or the time's (which `driving_set::list_page` answers
    // whole, or not at all): the capped count from the driving set's walk when it proves one.
    let driven = match cap {
        Some(cap) if !order.starts_with("id ") && !order.starts_with("created_at ") => {
            crate::driving_set::capped_total(c, f, cap)?
        }
        _ => None,
    };
    let walked_over = match (cap, &mut walk, driven) {
        (Some(cap), Some(w), None) => {
            w.promising(c, cap.saturating_add(1))? && w.count_over(c, cap)?
        }
        _ => false,
    };
    let total = if let Some(t) = driven {
        t
    } else if let (Some(cap), true) = (cap, walked_over) {
        Total::from_capped(
            i64::try_from(cap).unwrap_or(i64::MAX).saturating_add(1),
            cap,
        )
    } else if let Some(cap) = cap {
        // An `error` or `body` term, or a header term without one, counted up to the cap
        // (`total_cap`): a header term's from its index range's plan.
        let header_capped = if crate::total_cap::applies(f) {
            None
        } else if let Some((ids, p)) = header
            .and_then(|(name, value, wm)| header_index::exact_ids_at(d, name, value, Some(wm)))
        {
            Some((
                format!(
                    "SELECT {}",
                    crate::total_cap::limited(&format!("SELECT id FROM ({ids}) AS m"), cap)
                ),
                p,
            ))
        } else {
            header_columns.as_ref().map(|hc| hc.count_capped(cap))
        };
        let (sql, p) = if let Some(q) = header_capped {
            q
        } else if let Some(q) = error_fts
            .clone()
            .and_then(|(needle, fts)| crate::error_text::count_capped(d, needle, fts, cap))
        {
            q
        } else if let Some(s) = &split {
            s.count_capped(cap)
        } else {
            (
                format!(
                    "SELECT {}",
                    crate::total_cap::limited(
                        &format!("SELECT id FROM dead_letters WHERE {cond}"),
                        cap
                    )
                ),
                params.clone(),
            )
        };
        Total::from_capped(count(c, &sql, &p)?, cap)
    } else {
        Total::exact(exact_total(
            c,
            f,
            &cond,
            &params,
            header,
            header_columns.as_ref(),
            error_fts.clone(),
            split.as_ref(),
        )?)
    };
    let counted = total;
    // No match at all (an exact count of 0): no page to look for.
    if counted == Total::exact(0) {
        return Ok((Vec::new(), counted));
    }
    // The plans below read `total` to choose an index (never the rows). A lower bound is not
    // the number of matches: the walk's probe share of all records estimates it (a needle in
    // one record of ten over 1M: ~100,000, as the exact count was), so that the cap does not
    // turn e.g. SQLite's walk of `dead_letters_created` into a sort of every match.
    let total = match (counted.relation, walk.as_mut()) {
        (crate::total_cap::Relation::Gte, Some(w)) => counted
            .count
            .max(i64::try_from(estimate(c, w)?).unwrap_or(i64::MAX)),
        _ => counted.count,
    };

    let offset = page.saturating_sub(1).saturating_mul(page_size);
    // The page's ids first, then their records: the ids come from an index alone where one
    // covers the filter (`dead_letters_id` on SQLite, the primary key or e.g. `(status, id)` on
    // PostgreSQL, whose planner otherwise walks the primary key backwards filtering rows —
    // 20,000 of them when the newest records are of another status), a deep page skips its
    // offset over 8-byte index entries, and a sort moves ids instead of whole records.
    let skip = crate::sql::offset(offset);
    let by_id = order.starts_with("id ");
    let desc = order.starts_with("id DESC");
    let reach = offset.saturating_add(page_size);
    // A `body` term, or one `error` term, in id order whose needle matches a large share of the
    // records: the newest (or oldest) rows walked, when the walk finds the page within its
    // budget (`text_walk`; an `error` term's on the copy, with the records above the watermark).
    // Sorted by a group key, key terms only: the values walked in order from the summary, each
    // value's records in id order (`key_sort`), instead of sorting every match.
    if let Some(ids) = crate::key_sort::page_ids(c, f, &cond, &params, &order, offset, page_size)? {
        return Ok((walked_page(c, ids, 0, &order)?, counted));
    }
    // An `error` (or `body`) term sorted by a group key, the page within the key's first value
    // (its estimate at least twice the cap) or, for an `error` term on the copy, the first a
    // sample of the matches holds when no match lies before it (`key_first_match`): that
    // value's list in id order (`key_first_value`), instead of sorting every match.
    if split.is_some() || f.terms.contains_key("body") {
        let mut probe = |c: &mut dyn Conn, g: &Filter| -> Result<Option<u64>, ArchiveError> {
            match walk_source(c, g)? {
                Some(mut w) => Ok(Some(estimate(c, &mut w)?)),
                None => Ok(None),
            }
        };
        // The values of the walk's newest matches (`key_first_match`), on the copy only.
        let mut sample = |c: &mut dyn Conn, g: &Filter, col: &str| {
            let Some(w) = walk_source(c, g)?.filter(|w| w.on_copy()) else {
                return Ok(Vec::new());
            };
            let (sql, p) = w.rows_sql(col, crate::key_first_match::SAMPLE);
            let rows = c.query(&sql, &p)?;
            Ok(rows
                .iter()
                .filter_map(|r| Some(r.first()?.opt_text()))
                .collect())
        };
        // SQLite: a value's first ids from the FTS5 candidates in rowid order, in one read, not
        // its list's count and page. A value with few records, or rare among the first
        // candidates in the page's order, is left to its list (the driving set walks the
        // former; REPLAYED's 200 newest matches: 31 ms listed, 49 by its key range's first ids).
        // No `keyed_candidates` choice here: its count of the candidates is what this read
        // avoids (`error=processed&sort=status&page=10`: 1M candidates counted, 123 ms).
        let mut first_ids = |c: &mut dyn Conn, g: &Filter, desc: bool, reach: u64| {
            if c.dialect() != Dialect::Sqlite || !crate::key_copy::answers(g) {
                return Ok(None);
            }
            let mut keys = g.clone();
            keys.terms.retain(|k, _| k != "error");
            let (kc, kp) = keys.to_sql(Dialect::Sqlite)?;
            let keyed = summary::records(c, &kc.replace("+vhost", "vhost"), &kp)?;
            if u64::try_from(keyed).unwrap_or(0) <= crate::driving_set::BUDGET.1 {
                return Ok(None);
            }
            let s = copy_split_streaming(c, g)?;
            // At the share of the first candidates in the page's order, the read meets `reach`
            // matches within `STREAM_MOST` candidates; else the list (a value rare among them).
            let hits = s.stream_hits(c, desc)?.unwrap_or(0);
            let read = reach.saturating_mul(crate::keyed_candidates::SAMPLE.unsigned_abs());
            if hits <= 0 || read / hits.unsigned_abs() > STREAM_MOST {
                return Ok(None);
            }
            let (sql, p) = s.page_ids(desc, reach);
            let mut ids: Vec<i64> = c
                .query(&sql, &p)?
                .iter()
                .filter_map(|r| r.first()?.opt_int())
                .collect();
            ids.sort_unstable();
            ids.dedup();
            if desc {
                ids.reverse();
            }
            ids.truncate(usize::try_from(reach).unwrap_or(usize::MAX));
            Ok(Some(ids))
        };
        let mut list = |c: &mut dyn Conn, g: &Filter, by: &str, page, page_size, upto: u64| {
            list_plans(c, g, Some(by), page, page_size, Some(upto))
        };
        if let Some(items) = crate::key_first_value::page(
            c,
            f,
            &order,
            offset,
            page_size,
            requested_cap,
            &mut probe,
            &mut sample,
            &mut first_ids,
            &mut list,
        )? {
            return Ok((items, counted));
        }
    }
    // An `error` term with key terms too: the walk over the copy (`walk_source`).
    let text_page = f.terms.contains_key("body")
        || f.error_only().is_some()
        || walk.as_ref().is_some_and(|w| w.on_copy());
    // SQLite, an `error` term with key terms: the copy's first matches in id order read from
    // the FTS5 candidates in their rowid order (`key_copy::Split::page_ids`), not a walk of the
    // copy's rows (orders-15's page 50 of `cause 5`: ~10,000 candidates instead of 100,000 rows).
    let streamed =
        f.error_only().is_none() && split.as_ref().is_some_and(crate::key_copy::Split::streams);
    if let (true, Some(w)) = (by_id && text_page && !streamed, &mut walk)
        && w.promising(c, reach)?
        && let Some(ids) = w.page_ids(c, desc, reach)?
    {
        return Ok((walked_page(c, ids, offset, &order)?, counted));
    }
    // An `error` or `body` list sorted by time whose needle matches a large share of the
    // records — or a header term over its cap (at least 100,000 matches) — : `dead_letters_created`
    // walked in order, each record checked (`text_walk`), when the walk finds the page within its
    // budget. (A header every record carries, sorted by time: 1.6 s by sorting its matches,
    // 270 ms from its index rows, a few ms walked.)
    let many = walk.is_some() || counted.relation == crate::total_cap::Relation::Gte;
    if order.starts_with("created_at ") && many {
        let (cond, p) = f.to_sql_checks_only(d)?;
        // An `error` filter the copy answers: the copy walked in id order, the page proven
        // against the time index (`time_walk`), so deep pages too.
        if let Some(w) = walk.as_mut().filter(|w| w.on_copy()) {
            let checks = (cond.clone(), p.clone());
            let desc = order.starts_with("created_at DESC");
            if let Some(ids) = crate::time_walk::page_ids(c, w, &checks, desc, reach, 0)? {
                return Ok((walked_page(c, ids, offset, &order)?, counted));
            }
        }
        let mut w = crate::text_walk::Source::records(d, cond, p);
        if w.promising(c, reach)?
            && let Some(ids) = w.page_ids_in(c, &order, reach)?
        {
            return Ok((walked_page(c, ids, offset, &order)?, counted));
        }
    }
    let page_ids = match header.filter(|_| by_id) {
        Some((name, value, wm)) => header_index::page_ids_at(d, name, value, wm, desc, reach),
        // One `error` term: from the copy in id order (migration 12).
        None if by_id => error_fts
            .clone()
            .and_then(|(needle, fts)| crate::error_text::page_ids(d, needle, fts, desc, reach)),
        // Sorted by time: the copy's matches sorted by its `created_at` (migration 13), no
        // record read for its time.
        None if order.starts_with("created_at ") => error_fts.clone().and_then(|(needle, fts)| {
            let desc = order.starts_with("created_at DESC");
            crate::error_text::page_ids_by_time(d, needle, fts, desc, reach)
        }),
        None => None,
    };
    let page_ids = match page_ids {
        None if by_id => header_columns.as_ref().map(|hc| hc.page_ids(desc, reach)),
        other => other,
    };
    // A header term (with terms of the rows' columns) sorted by `created_at` or a group-key
    // column: the rows hold it (migrations 24, 25), so the page's ids are sorted from the
    // header's index range alone (a top-N over the range; before, PostgreSQL sorted the records
    // of every match: `header.x-first-death-queue=orders-7&sort=-created_at` 168 ms over 1M).
    let page_ids = match (page_ids, crate::header_columns::row_sort(&order)) {
        (None, Some(col)) => match &header_columns {
            Some(hc) => Some(hc.sorted_ids(col)),
            // A header term alone: migration 9's plan counted it; the rows' plan sorts it.
            None => crate::header_columns::sort_plan(c, f)?.map(|p| p.sorted_ids(col)),
        },
        (other, _) => other,
    };
    // An `error` or header term with terms of the copy's columns in id order: from the copy.
    let page_ids = match page_ids {
        None if by_id => split.as_ref().map(|s| s.page_ids(desc, reach)),
        other => other,
    };
    // A deep page in id order of a vhost-limited user with only terms of the copy's columns:
    // the copy's narrow rows walked by id, not the records (PostgreSQL read every record up to
    // the page for its vhost: `mon`'s page 1,000, 110–170 ms over 1M; the copy 13–18 ms).
    let page_ids = match page_ids {
        None if by_id && reach > DEEP && crate::key_copy::holds_terms(f) => Some(
            crate::key_copy::Split::new(d, &cond, &params, None, None, None).page_ids(desc, reach),
        ),
        other => other,
    };
    // An `error` term (with terms of the copy's columns) sorted by a group key the copy holds:
    // the copy's matches sorted by it, each match's narrow row read instead of its record (s9a).
    let page_ids = match (page_ids, crate::key_sort::key_order(&order)) {
        (None, Some((col, dir))) if crate::key_copy::holds(&[col.to_string()]) => split
            .as_ref()
            .map(|s| s.page_ids_sorted(d, col, dir == "DESC", reach)),
        (other, _) => other,
    };
    // A time range with exact group-key terms in id order: ids from the group index's ranges.
    let page_ids = match page_ids {
        None if by_id => crate::range_count::ids_query(c, f, desc, reach)?,
        other => other,
    };
    if let Some((ids, p)) = page_ids {
        // The page's ids in id order straight from the index range (and the few unindexed).
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM dead_letters WHERE id IN \
             (SELECT id FROM ({ids}) AS m ORDER BY {order} LIMIT {page_size}{skip}) ORDER BY {order}"
        );
        let rows = c.query(&sql, &p)?;
        return Ok((
            rows.iter().filter_map(|r| Record::from_row(r)).collect(),
            counted,
        ));
    }
    // A time range (`since`/`until`) matches records clustered in id order (a record's time is
    // its archiving time), not spread over it as both a walk of the id order (`page_plan`'s on
    // SQLite, the planner's own on PostgreSQL) assume: walking from the newest record visited
    // every newer one (a minute's 60,000 records of 1M: 640,000 rows, SQLite 739 ms; PostgreSQL
    // 1.2 s warm, 33 s cold). Such a page orders its ids by `id + 0` (the same order, no
    // index's) so the range is read from `dead_letters_created` and its ids sorted.
    let ranged = f.terms.contains_key("since") || f.terms.contains_key("until");
    // Sorted by a column almost every record holds at its insert value (`replay_count`,
    // `last_replayed_at`, `death_count`, `updated_at`): migration 11's partial index merged with
    // the other records in id (or created_at) order, instead of sorting every match.
    // A header term (with terms of its rows' columns) sorted so: the common records from the
    // header's plan in their order, only the first `reach` plus the rare matches tested (s9a).
    let header_rows = match (&header_columns, crate::sparse_sort::is_sparse(&order)) {
        (None, true) => crate::header_columns::sort_plan(c, f)?,
        _ => None,
    };
    if let Some(hc) = header_columns.as_ref().or(header_rows.as_ref()) {
        let mut driver = |_: &mut dyn Conn, col: &str, desc: bool, n: u64| -> Driven {
            let dir = if desc { "DESC" } else { "ASC" };
            Ok(match col {
                "id" => match header {
                    Some((name, value, wm)) => {
                        header_index::page_ids_at(d, name, value, wm, desc, n)
                    }
                    None => Some(hc.page_ids(desc, n)),
                },
                "created_at" => {
                    let (s, p) = hc.sorted_ids("created_at");
                    Some((
                        // `created_at + 0`: sorted after the union, not merged from each part
                        // read in time order (SQLite walked every record's time for the part
                        // above the header index's watermark: 28 → 7 ms over 1M).
                        format!(
                            "SELECT id, created_at FROM ({s}) AS m ORDER BY created_at + 0 {dir}, id {dir} LIMIT {n}"
                        ),
                        p,
                    ))
                }
                _ => None,
            })
        };
        if let Some(items) = driven_page(c, f, &order, offset, page_size, &mut driver)? {
            return Ok((items, counted));
        }
    }
    // An `error` filter the copy answers sorted so: the copy's matches in id order drive the
    // common part the same way (s9a). By `updated_at` (whose common records are in
    // `created_at` order), the first matches in time order from the walk of the copy that
    // proves them against the time index (`time_walk`), when the needle is common enough for a
    // walk; else no driver (sorting the copy's matches by its `created_at` read every match,
    // no better than the plan below).
    if let (Some(s), true) = (&split, crate::sparse_sort::is_sparse(&order)) {
        let checks = f.to_sql_checks_only(d)?;
        let mut driver = |c: &mut dyn Conn, col: &str, desc: bool, n: u64| -> Driven {
            // The driving set's first matches first (stop 46: `error=could&original_queue=
            // orders-7&sort=-replay_count` read orders-7's `could` candidates through the FTS5
            // rowids' list for the common part, SQLite 144 ms).
            if col == "id"
                && let Some(ids) = crate::driving_set::first_matches(c, f, desc, n)?
            {
                return Ok(Some(listed_ids(d, &ids)));
            }
            match (col, walk.as_mut().filter(|w| w.on_copy())) {
                ("id", _) => Ok(Some(s.page_ids(desc, n))),
                ("created_at", Some(w)) => {
                    Ok(crate::time_walk::page_rows(c, w, &checks, desc, n, 0)?
                        .map(|rows| timed_ids(d, &rows)))
                }
                _ => Ok(None),
            }
        };
        if let Some(items) = driven_page(c, f, &order, offset, page_size, &mut driver)? {
            return Ok((items, counted));
        }
    }
    if let Some((ids, p)) =
        crate::sparse_sort::ids_query(c, &cond, &params, &order, total, ranged, offset, page_size)?
    {
        return Ok((records_in_order(c, &ids, &p, &order)?, counted));
    }
    // PostgreSQL with a `status` term: migration 16's `(status, id) INCLUDE (created_at)` walked
    // in id order answers the page without a record read (`range_count::status_walk`).
    let walk_status = crate::range_count::status_walk(c.dialect(), f);
    // PostgreSQL, other key terms: an `(X, id)` index walked when the summary per second shows
    // few of the key's records beyond the range on the walk's side (`range_count::key_walk`).
    let walk =
        walk_status || (ranged && by_id && crate::range_count::key_walk(c, f, desc, reach, total)?);
    let inner_order = match order.strip_prefix("id ") {
        Some(dir) if ranged && !walk => format!("(id + 0) {dir}"),
        _ => order.clone(),
    };
    let inner = format!(
        "SELECT id FROM {{from}} WHERE {{cond}} ORDER BY {inner_order} LIMIT {page_size}{skip}"
    );
    let ids = if ranged && !order.starts_with("created_at ") {
        let plain = inner
            .replace("{from}", "dead_letters")
            .replace("{cond}", &cond);
        // PostgreSQL, a range with `status` in id order: between id bounds proven in the
        // statement itself (`id_bounds`) when the walk's far side outweighs the matches.
        let bounded = if walk_status && by_id {
            crate::id_bounds::query(c, f, &cond, &params, desc, offset, page_size, total, &plain)?
        } else {
            None
        };
        if let Some((ids, p)) = bounded {
            return Ok((records_in_order(c, &ids, &p, &order)?, counted));
        }
        plain
    } else {
        // Sorted by time, a range walks `dead_letters_created` in order (SQLite), never probes.
        let plan = if ranged {
            crate::page_plan::ranged_ids_query
        } else {
            crate::page_plan::ids_query
        };
        plan(
            c,
            &inner,
            &cond,
            &params,
            &order,
            total,
            offset.saturating_add(page_size),
        )?
    };
    Ok((records_in_order(c, &ids, &params, &order)?, counted))
}

/// The exact count of `f`'s matches (`cond`, `params` its condition), by the cheapest path
/// [`list_capped`] found for it.
#[allow(clippy::too_many_arguments)]
fn exact_total(
    c: &mut dyn Conn,
    f: &Filter,
    cond: &str,
    params: &[Param],
    header: Option<(&str, &str, i64)>,
    header_columns: Option<&crate::header_columns::Plan<'_>>,
    error_fts: Option<(&str, Option<String>)>,
    split: Option<&crate::key_copy::Split>,
) -> Result<i64, ArchiveError> {
    let d = c.dialect();
    Ok(
        if let Some((ids, p)) = header
            .and_then(|(name, value, wm)| header_index::exact_ids_at(d, name, value, Some(wm)))
        {
            count(c, &format!("SELECT COUNT(*) FROM ({ids}) AS m"), &p)?
        } else if let Some(hc) = header_columns {
            let (sql, p) = hc.count();
            count(c, &sql, &p)?
        } else if let Some((sql, p)) = error_fts
            .clone()
            .and_then(|(needle, fts)| crate::error_text::count(d, needle, fts))
        {
            // One `error` term: the copy's matches (migration 12), no record read.
            count(c, &sql, &p)?
        } else if let Some(s) = split {
            // An `error` or header term with terms of the copy's columns: counted on the copy
            // (migration 13) and the records above the watermark, no record read.
            let (sql, p) = s.count();
            count(c, &sql, &p)?
        } else if let Some(n) = crate::summary_seconds::total(c, f)? {
            // PostgreSQL: a time range with exact group-key terms, from the summary per second
            // (migration 19) and the records of the range's partial seconds.
            n
        } else if let Some((sql, p)) = crate::range_count::query(c, f)? {
            // A time range with exact group-key terms: index ranges of `dead_letters_group`.
            count(c, &sql, &p)?
        } else if summary::answers(f) {
            summary::records(c, cond, params)?
        } else {
            count(
                c,
                &format!("SELECT COUNT(*) FROM dead_letters WHERE {cond}"),
                params,
            )?
        },
    )
}

/// Where a bounded walk over the newest rows checks an `error`/`body` filter (`text_walk`): the
/// copy of the error texts for an `error` filter the copy answers (no `body` term), else the
/// records themselves; `None` for other filters.
pub(crate) fn walk_source(
    c: &mut dyn Conn,
    f: &Filter,
) -> Result<Option<crate::text_walk::Source>, ArchiveError> {
    use crate::text_walk::Source;
    if !crate::total_cap::applies(f) {
        return Ok(None);
    }
    let d = c.dialect();
    let on_copy = !f.terms.contains_key("body") && crate::key_copy::answers(f);
    if let (true, Some(needle)) = (on_copy, f.terms.get("error"))
        && let Some((check, mut p)) = crate::error_text::check_on_copy(d, needle)
    {
        let (others, op) = others_sql(c, f)?;
        p.extend(op.iter().cloned());
        let source = Source::copy(d, format!("{check} AND {others}"), p);
        // Its records above the watermark page beside the copy's walk, the other terms checked
        // there too.
        return Ok(Some(match crate::error_text::parts(d, needle, None) {
            Some(parts) => {
                let mut rp = parts.rest_params;
                rp.extend(op);
                source.with_above(format!("{} AND {others}", parts.rest), rp)
            }
            None => source,
        }));
    }
    let (cond, p) = f.to_sql_checks_only(d)?;
    Ok(Some(Source::records(d, cond, p)))
}

/// A page whose reach (offset + page size) is over this many records is deep: a vhost-limited
/// one in id order walks the copy of the error texts (`key_copy::holds_terms`).
const DEEP: u64 = 1_000;

/// How many records a walk's filter matches, estimated from its probe's share of all records.
pub(crate) fn estimate(
    c: &mut dyn Conn,
    w: &mut crate::text_walk::Source,
) -> Result<u64, ArchiveError> {
    let share = w.probe(c)?;
    let all = summary::records(c, "TRUE", &[])?;
    Ok(u64::try_from(all).unwrap_or(0).saturating_mul(share) / crate::text_walk::PROBE)
}

/// A page sorted by a sparse column whose common part `driver` lists in order
/// (`sparse_sort::driven_ids_query`), or `None` when that plan does not answer.
fn driven_page(
    c: &mut dyn Conn,
    f: &Filter,
    order: &str,
    offset: u64,
    page_size: u64,
    driver: crate::sparse_sort::Driver<'_>,
) -> Result<Option<Vec<Record>>, ArchiveError> {
    let (checks, p) = f.to_sql_checks_only(c.dialect())?;
    match crate::sparse_sort::driven_ids_query(c, (&checks, &p), order, offset, page_size, driver)?
    {
        Some((ids, p)) => Ok(Some(records_in_order(c, &ids, &p, order)?)),
        None => Ok(None),
    }
}

/// What a [`crate::sparse_sort::Driver`] answers.
type Driven = Result<Option<(String, Vec<Param>)>, ArchiveError>;

/// A statement selecting exactly the ids `ids` as a column `id` (from the database: literals),
/// as [`timed_ids`] does.
fn listed_ids(d: Dialect, ids: &[i64]) -> (String, Vec<Param>) {
    let list = ids.iter().map(i64::to_string).collect::<Vec<_>>();
    let sql = match d {
        Dialect::Postgres => format!("SELECT unnest(ARRAY[{}]::BIGINT[]) AS id", list.join(", ")),
        Dialect::Sqlite if ids.is_empty() => "SELECT 0 AS id WHERE 0".to_string(),
        Dialect::Sqlite => format!("SELECT column1 AS id FROM (VALUES ({}))", list.join("), (")),
    };
    (sql, Vec::new())
}

/// A statement selecting exactly the rows `rows` as columns `id` and `created_at`: on
/// PostgreSQL two arrays unnested (as `dead_letters WHERE id IN (…)` the planner filtered a whole
/// index by the list: 7,000 ids, 340 ms over 1M), on SQLite a `VALUES` list.
fn timed_ids(d: Dialect, rows: &[(i64, i64)]) -> (String, Vec<Param>) {
    let list = |f: fn(&(i64, i64)) -> String, sep: &str| -> String {
        rows.iter().map(f).collect::<Vec<_>>().join(sep)
    };
    let sql = match d {
        Dialect::Postgres => format!(
            "SELECT id, created_at FROM unnest(ARRAY[{}]::BIGINT[], ARRAY[{}]::BIGINT[]) AS u(id, created_at)",
            list(|r| r.0.to_string(), ", "),
            list(|r| r.1.to_string(), ", ")
        ),
        Dialect::Sqlite if rows.is_empty() => "SELECT 0 AS id, 0 AS created_at WHERE 0".to_string(),
        Dialect::Sqlite => format!(
            "SELECT column1 AS id, column2 AS created_at FROM (VALUES {})",
            list(|r| format!("({}, {})", r.0, r.1), ", ")
        ),
    };
    (sql, Vec::new())
}

/// The records of a page a walk found: its first `reach` ids in `order`, of which the page is
/// those after `offset`.
pub(crate) fn walked_page(
    c: &mut dyn Conn,
    ids: Vec<i64>,
    offset: u64,
    order: &str,
) -> Result<Vec<Record>, ArchiveError> {
    let page: Vec<String> = ids
        .into_iter()
        .skip(usize::try_from(offset).unwrap_or(usize::MAX))
        .map(|id| id.to_string())
        .collect();
    if page.is_empty() {
        return Ok(Vec::new());
    }
    records_in_order(c, &page.join(", "), &[], order)
}

/// The records of a page whose ids a statement chose (`ids`: an id list or a subquery, with
/// `params`), read in the page's `order`.
fn records_in_order(
    c: &mut dyn Conn,
    ids: &str,
    params: &[Param],
    order: &str,
) -> Result<Vec<Record>, ArchiveError> {
    let sql =
        format!("SELECT {RECORD_COLUMNS} FROM dead_letters WHERE id IN ({ids}) ORDER BY {order}");
    let rows = c.query(&sql, params)?;
    Ok(rows.iter().filter_map(|r| Record::from_row(r)).collect())
}

/// An `error` term's needle and FTS5 query (looked up once) when `f` is an `error`-only filter
/// or `on_copy`, and `f`'s condition and parameters.
type ErrorCondition<'f> = (Option<(&'f str, Option<String>)>, String, Vec<Param>);

fn error_condition<'f>(
    c: &mut dyn Conn,
    f: &'f Filter,
    on_copy: bool,
) -> Result<ErrorCondition<'f>, ArchiveError> {
    let needle = f
        .terms
        .get("error")
        .map(String::as_str)
        .filter(|_| on_copy || f.error_only().is_some());
    let error_fts = match needle {
        Some(n) => Some((n, crate::error_text::fts_query(c, n)?)),
        None => None,
    };
    let (cond, params) = f.to_sql_on_known(c, error_fts.as_ref().map(|(n, q)| (*n, q)))?;
    Ok((error_fts, cond, params))
}

/// `f` (a filter `key_copy::answers` accepts) split between the copy and the records above the
/// watermark as `/groups` counts it (the `error` needle checked inline on the copy's row).
pub(crate) fn copy_split(
    c: &mut dyn Conn,
    f: &Filter,
    cap: Option<u64>,
) -> Result<crate::key_copy::Split, ArchiveError> {
    let (error_fts, cond, params) = error_condition(c, f, true)?;
    split(c, f, &cond, &params, &error_fts, cap)
}

/// The condition (with its parameters) of `f`'s terms but its `error` term, valid on the copy
/// and on `dead_letters` (the copy's other columns, the walk's and the proofs' other terms).
pub(crate) fn others_sql(
    c: &mut dyn Conn,
    f: &Filter,
) -> Result<(String, Vec<Param>), ArchiveError> {
    let mut g = f.clone();
    g.terms.remove("error");
    g.to_sql_on(c)
}

/// Most FTS5 candidates a value's first ids are read from (`key_first_value`'s `first_ids`): ~15 ms
/// of copy rows on SQLite.
const STREAM_MOST: u64 = 40_000;

/// [`copy_split`] whose SQLite candidates are never a key's range: the FTS5 candidates read in
/// rowid order (`key_copy::Split::page_ids`).
fn copy_split_streaming(
    c: &mut dyn Conn,
    f: &Filter,
) -> Result<crate::key_copy::Split, ArchiveError> {
    let (error_fts, cond, params) = error_condition(c, f, true)?;
    let others = match &error_fts {
        Some(_) => Some(others_sql(c, f)?),
        None => None,
    };
    Ok(crate::key_copy::Split::new(
        c.dialect(),
        &cond,
        &params,
        error_fts,
        others,
        None,
    ))
}

/// A filter `key_copy::answers` accepts, split between the copy and the records above the
/// watermark; with an `error` term, the needle checked inline on the copy's row.
fn split(
    c: &mut dyn Conn,
    f: &Filter,
    cond: &str,
    params: &[Param],
    error_fts: &Option<(&str, Option<String>)>,
    cap: Option<u64>,
) -> Result<crate::key_copy::Split, ArchiveError> {
    let others = match error_fts {
        Some(_) => Some(others_sql(c, f)?),
        None => None,
    };
    // SQLite: the needle's candidates from a key's index range when the key is small enough.
    let within = match (error_fts, &others) {
        (Some((needle, fts)), Some(o)) => {
            crate::keyed_candidates::within(c, f, needle, fts.as_deref(), o, cap)?
        }
        _ => None,
    };
    Ok(crate::key_copy::Split::new(
        c.dialect(),
        cond,
        params,
        error_fts.clone(),
        others,
        within,
    ))
}

/// One record.
pub fn get(c: &mut dyn Conn, id: i64) -> Result<Option<Record>, ArchiveError> {
    let rows = c.query(
        &format!("SELECT {RECORD_COLUMNS} FROM dead_letters WHERE id = ?"),
        &[id.into()],
    )?;
    Ok(rows.first().and_then(|r| Record::from_row(r)))
}

/// The originals of a record's edits, oldest first.
pub fn history(c: &mut dyn Conn, id: i64) -> Result<Vec<Value>, ArchiveError> {
    let rows = c.query(
        "SELECT changed_at, changed_by, headers, payload FROM dead_letter_history WHERE record_id = ? ORDER BY id",
        &[id.into()],
    )?;
    Ok(rows
        .iter()
        .map(|r| {
            let (payload, enc) = payload_json(&r[3].bytes());
            json!({
                "changed_at": format_ms(r[0].int()),
                "changed_by": r[1].text(),
                "headers": serde_json::from_str::<Value>(&r[2].text()).unwrap_or(Value::Null),
                "payload": payload,
                "payload_encoding": enc,
            })
        })
        .collect())
}

/// Counts per group of `by` columns among records matching `f`, with the oldest and newest
/// record time and a sample error message: one record's message from the group, which record
/// depending on the plan ([`crate::group_sample`]). Groups are ordered by count, then values.
/// Every match is counted (`"count_relation": "eq"`); see [`groups_capped`].
pub fn groups(c: &mut dyn Conn, by: Option<&str>, f: &Filter) -> Result<Vec<Value>, ArchiveError> {
    groups_capped(c, by, f, None)
}

/// [`groups`] whose groups of an `error` or `body` filter are those of its newest `cap + 1`
/// matches when `cap` is given (`crate::newest_groups`: over `cap` matches, the newest `cap`
/// grouped, each group's `count_relation` `gte`) — and those of a header term whose matches
/// exceed the header cap (`total_cap::cap_for`) too; every other request counts exactly (`eq`).
pub fn groups_capped(
    c: &mut dyn Conn,
    by: Option<&str>,
    f: &Filter,
    cap: Option<u64>,
) -> Result<Vec<Value>, ArchiveError> {
    let cols = group_by(by)?;
    // A header term without a text term, by columns its index rows hold (lead, stop 42): exact
    // when its count reaches at most the header cap (`total_cap::cap_for`, 100,000), else the
    // groups of its newest `cap` (10,000) matches, `gte`, from its index range — a header every
    // record carries read all 1,000,000 entries (243–270 ms over 1M on PostgreSQL).
    let header_over = match (cap, crate::total_cap::cap_for(f, cap)) {
        (Some(cap), Some(hcap)) if !crate::total_cap::applies(f) => {
            match crate::header_groups::plan(c, f, &cols)? {
                Some(plan) => {
                    let (sql, p) = plan.count_capped(hcap);
                    let n = count(c, &sql, &p)?;
                    (u64::try_from(n).unwrap_or(0) > hcap).then(|| {
                        let (sql, p) = plan.newest_rows(cap.saturating_add(1));
                        (sql, p, cap)
                    })
                }
                None => None,
            }
        }
        _ => None,
    };
    let cap = cap.filter(|_| crate::total_cap::applies(f));
    let (mut groups, lookup, relation) = match (cap, header_over) {
        (_, Some((sql, p, cap))) => {
            let n = crate::newest_groups::of_rows(c, &sql, &p, cols.len(), cap)?;
            (n.groups, Lookup::None, n.relation)
        }
        (Some(cap), None) => {
            let n = crate::newest_groups::groups(c, f, &cols, cap)?;
            (n.groups, Lookup::None, n.relation)
        }
        (None, None) => {
            let (groups, lookup) = count_groups(c, &cols, f)?;
            (groups, lookup, crate::total_cap::Relation::Eq)
        }
    };
    crate::group_sample::order(&mut groups);
    let ids: Vec<i64> = groups
        .iter()
        .take(SAMPLED)
        .filter_map(|g| match g.sample {
            Sample::Of(id) => Some(id),
            _ => None,
        })
        .collect();
    let mut messages = crate::group_sample::messages_of(c, &ids)?;
    let mut out = Vec::with_capacity(groups.len());
    for (i, g) in groups.iter().enumerate() {
        let sample = match (&g.sample, i < SAMPLED) {
            (Sample::Given(m), _) => m.clone(),
            (Sample::Of(id), true) => messages.remove(id).flatten(),
            (Sample::Lookup, true) => lookup.sample(c, &cols, &g.values)?,
            (_, false) => None,
        };
        let mut o = group_object(&cols, g, sample);
        o["count_relation"] = Value::from(relation.as_str());
        out.push(o);
    }
    Ok(out)
}

/// How a plan looks a group's sample up ([`Sample::Lookup`]).
enum Lookup {
    /// None needed (every group's sample is given or an id).
    None,
    /// The first record with a message in the group index's ranges of the group's keys.
    Ranged(crate::range_count::Groups),
    /// Any record of the group with a message among the records matching `cond`.
    Plain(String, Vec<Param>),
}

impl Lookup {
    /// The sample of the group whose `cols` have `values`.
    fn sample(
        &self,
        c: &mut dyn Conn,
        cols: &[String],
        values: &[Option<String>],
    ) -> Result<Option<String>, ArchiveError> {
        match self {
            Lookup::None => Ok(None),
            Lookup::Ranged(g) => {
                let (sql, p) = g.sample(cols, values);
                Ok(c.query(&sql, &p)?.first().and_then(|row| row[0].opt_text()))
            }
            Lookup::Plain(cond, params) => plain_sample(c, cols, cond, params, values),
        }
    }
}

/// The groups of `f` by `cols` (values, count, oldest, newest, sample as known), from the first
/// plan that answers, and how that plan looks the other samples up.
fn count_groups(
    c: &mut dyn Conn,
    cols: &[String],
    f: &Filter,
) -> Result<(Vec<Group>, Lookup), ArchiveError> {
    // A header term with terms of the header rows' columns, by those columns: the header index
    // range alone (migration 24), no record read but the samples' (each group's greatest id).
    if let Some(plan) = crate::header_groups::plan(c, f, cols)? {
        let (sql, p) = plan.groups();
        let n = cols.len();
        let groups = groups_of_rows(c, cols, &sql, &p, |r| Sample::Of(r[n + 3].int()))?;
        return Ok((groups, Lookup::None));
    }
    if crate::key_copy::answers(f) && crate::key_copy::holds(cols) {
        // An `error` or header term, by and with the copy's columns: grouped on the copy
        // (migration 13) and the records above the watermark, no record read.
        let (error_fts, cond, params) = error_condition(c, f, true)?;
        let (sql, p) = split(c, f, &cond, &params, &error_fts, None)?.groups(cols);
        let n = cols.len();
        let groups = groups_of_rows(c, cols, &sql, &p, |r| Sample::Given(r[n + 3].opt_text()))?;
        return Ok((groups, Lookup::None));
    }
    let (cond, params) = f.to_sql_reading_records(c)?;
    let list = cols.join(", ");
    let n = cols.len();
    if summary::answers(f) && summary::groups_by(cols) {
        // (Its columns are named as the records' ones, so the filter's condition applies as is.)
        let sql = format!(
            "SELECT {list}, CAST(SUM(records) AS BIGINT), MIN(oldest), MAX(newest), MIN(error_message) \
             FROM dead_letter_groups WHERE {cond} GROUP BY {list}"
        );
        let groups = groups_of_rows(c, cols, &sql, &params, |r| {
            Sample::Given(r[n + 3].opt_text())
        })?;
        return Ok((groups, Lookup::None));
    }
    // PostgreSQL: a time range with group-key terms only, by group-key columns, from the
    // summary per second (migration 19): the smallest message among the records read there,
    // else the plain lookup's.
    if let Some(groups) = crate::summary_seconds::groups(c, f, cols)? {
        let groups = groups
            .into_iter()
            .map(|g| Group {
                values: g.values,
                count: g.count,
                oldest: g.oldest,
                newest: g.newest,
                sample: g.sample.map_or(Sample::Lookup, |s| Sample::Given(Some(s))),
            })
            .collect();
        return Ok((groups, Lookup::Plain(cond, params)));
    }
    // A time range with group-key terms only, by group-key columns (SQLite): counted from the
    // group index's ranges, no record read (`range_count::groups_query`) but the samples'.
    if let Some(g) = crate::range_count::groups_query(c, f, cols)? {
        let groups = groups_of_rows(c, cols, &g.sql, &g.params, |_| Sample::Lookup)?;
        return Ok((groups, Lookup::Ranged(g)));
    }
    let sql = format!(
        "SELECT {list}, COUNT(*), MIN(created_at), MAX(created_at) \
         FROM dead_letters WHERE {cond} GROUP BY {list}"
    );
    let groups = groups_of_rows(c, cols, &sql, &params, |_| Sample::Lookup)?;
    Ok((groups, Lookup::Plain(cond, params)))
}

/// The groups of `sql`: rows of the `cols`, then count, oldest and newest, and what `sample`
/// makes of the row.
fn groups_of_rows(
    c: &mut dyn Conn,
    cols: &[String],
    sql: &str,
    params: &[Param],
    sample: impl Fn(&[Cell]) -> Sample,
) -> Result<Vec<Group>, ArchiveError> {
    let n = cols.len();
    Ok(c.query(sql, params)?
        .iter()
        .map(|r| Group {
            values: (0..n).map(|i| r[i].opt_text()).collect(),
            count: r[n].int(),
            oldest: r[n + 1].int(),
            newest: r[n + 2].int(),
            sample: sample(r),
        })
        .collect())
}

/// A sample error message of the group whose `cols` have `values` among the records matching
/// `cond` (any record of it with a message).
fn plain_sample(
    c: &mut dyn Conn,
    cols: &[String],
    cond: &str,
    params: &[Param],
    values: &[Option<String>],
) -> Result<Option<String>, ArchiveError> {
    let mut conds = vec![cond.to_string()];
    let mut p = params.to_vec();
    for (col, v) in cols.iter().zip(values) {
        match v {
            Some(v) => {
                conds.push(format!("{col} = ?"));
                p.push(Param::from(v.as_str()));
            }
            None => conds.push(format!("{col} IS NULL")),
        }
    }
    Ok(c.query(
        &format!(
            "SELECT error_message FROM dead_letters WHERE {} AND error_message IS NOT NULL LIMIT 1",
            conds.join(" AND ")
        ),
        &p,
    )?
    .first()
    .and_then(|row| row[0].opt_text()))
}

/// One `/groups` object: the `by` columns' values, `count`, `oldest`, `newest` (times in ms)
/// and the sample `error_message`.
fn group_object(cols: &[String], g: &Group, sample: Option<String>) -> Value {
    let mut m = serde_json::Map::new();
    for (col, v) in cols.iter().zip(&g.values) {
        m.insert(col.clone(), v.clone().map_or(Value::Null, Value::from));
    }
    m.insert("count".into(), json!(g.count));
    m.insert("oldest".into(), json!(format_ms(g.oldest)));
    m.insert("newest".into(), json!(format_ms(g.newest)));
    m.insert(
        "error_message".into(),
        sample.map_or(Value::Null, Value::from),
    );
    Value::Object(m)
}

/// An edit of a record before a replay.
#[derive(Debug, Clone, Default)]
pub struct Edit {
    /// New body.
    pub payload: Option<Vec<u8>>,
    /// New headers (the whole object).
    pub headers: Option<Value>,
    /// Why.
    pub note: Option<String>,
}

/// Applies `edit` to record `id`, keeping what it held in its history; audited.
pub fn edit(
    c: &mut dyn Conn,
    id: i64,
    actor: &str,
    edit: &Edit,
) -> Result<Option<Record>, ArchiveError> {
    let Some(old) = get(c, id)? else {
        return Ok(None);
    };
    let props = RawProperties(old.amqp_properties.clone().into())
        .decode()
        .unwrap_or_default();
    let (headers_json, raw) = match &edit.headers {
        Some(h) => {
            if !h.is_object() {
                return Err(ArchiveError::Invalid("headers must be an object".into()));
            }
            let table = json_to_table(h, props.headers().as_ref());
            let new: BasicProperties = props.clone().with_headers(table.clone());
            (
                table_to_json(&table),
                RawProperties::encode(&new).0.to_vec(),
            )
        }
        None => (old.headers.clone(), old.amqp_properties.clone()),
    };
    let payload = edit.payload.clone().unwrap_or_else(|| old.payload.clone());
    let now = now_ms();
    transaction(c, |c| {
        c.exec(
            "INSERT INTO dead_letter_history (record_id, changed_at, changed_by, headers, amqp_properties, payload) VALUES (?, ?, ?, ?, ?, ?)",
            &[
                id.into(),
                now.into(),
                actor.into(),
                old.headers.to_string().into(),
                Param::Bytes(old.amqp_properties.clone()),
                Param::Bytes(old.payload.clone()),
            ],
        )?;
        c.exec(
            "UPDATE dead_letters SET headers = ?, amqp_properties = ?, payload = ?, payload_bytes = ?, updated_at = ? WHERE id = ?",
            &[
                headers_json.to_string().into(),
                Param::Bytes(raw.clone()),
                Param::Bytes(payload.clone()),
                (payload.len() as i64).into(),
                now.into(),
                id.into(),
            ],
        )?;
        audit(
            c,
            actor,
            "edit",
            &Selection::Ids(vec![id]),
            edit.note.as_deref(),
            &json!({"edited": 1, "payload": edit.payload.is_some(), "headers": edit.headers.is_some()}),
            None,
        )
    })?;
    get(c, id)
}

/// Writes an audit row, with the vhosts it touched (those of the selected records, or of the
/// job's records).
pub fn audit(
    c: &mut dyn Conn,
    actor: &str,
    action: &str,
    sel: &Selection,
    note: Option<&str>,
    result: &Value,
    job: Option<i64>,
) -> Result<(), ArchiveError> {
    audit_row(c, actor, action, sel, note, result, job, None)
}

/// [`audit`] with the touched vhosts given (read before the records went away).
#[allow(clippy::too_many_arguments)]
fn audit_row(
    c: &mut dyn Conn,
    actor: &str,
    action: &str,
    sel: &Selection,
    note: Option<&str>,
    result: &Value,
    job: Option<i64>,
    vhosts: Option<&[String]>,
) -> Result<(), ArchiveError> {
    let (ids, filter) = sel.audit_parts();
    let id = c.insert_id(
        "INSERT INTO dead_letter_audit (at, actor, action, record_ids, filter, note, result, job_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        &[
            now_ms().into(),
            actor.into(),
            action.into(),
            ids.into(),
            filter.into(),
            note.map(str::to_string).into(),
            result.to_string().into(),
            job.into(),
        ],
    )?;
    match vhosts {
        Some(vs) => {
            for v in vs {
                c.exec(
                    "INSERT INTO dead_letter_audit_vhosts (audit_id, vhost) VALUES (?, ?)",
                    &[id.into(), v.as_str().into()],
                )?;
            }
        }
        None => {
            let (cond, p) = sel.to_sql(c)?;
            scope::record_audit_vhosts(c, id, &cond, &p, job)?;
        }
    }
    Ok(())
}

/// Marks the selected records SKIPPED with `reason`; audited. Returns how many.
pub fn skip(
    c: &mut dyn Conn,
    sel: &Selection,
    actor: &str,
    reason: &str,
) -> Result<u64, ArchiveError> {
    let (cond, mut p) = sel.to_sql(c)?;
    transaction(c, |c| {
        let mut params: Vec<Param> = vec![
            status::SKIPPED.into(),
            actor.into(),
            reason.into(),
            now_ms().into(),
        ];
        params.append(&mut p);
        let n = c.exec(
            &format!(
                "UPDATE dead_letters SET status = ?, resolved_by = ?, resolution_note = ?, updated_at = ? WHERE {cond}"
            ),
            &params,
        )?;
        audit(
            c,
            actor,
            "skip",
            sel,
            Some(reason),
            &json!({"skipped": n}),
            None,
        )?;
        Ok(n)
    })
}

/// Deletes the selected records (and their history); audited. Returns how many.
pub fn delete(
    c: &mut dyn Conn,
    sel: &Selection,
    actor: &str,
    note: Option<&str>,
) -> Result<u64, ArchiveError> {
    let (cond, p) = sel.to_sql(c)?;
    transaction(c, |c| {
        let vhosts: Vec<String> = c
            .query(
                &format!("SELECT DISTINCT vhost FROM dead_letters WHERE {cond}"),
                &p,
            )?
            .iter()
            .map(|r| r[0].text())
            .collect();
        c.exec(
            &format!(
                "DELETE FROM dead_letter_history WHERE record_id IN (SELECT id FROM dead_letters WHERE {cond})"
            ),
            &p,
        )?;
        let n = c.exec(&format!("DELETE FROM dead_letters WHERE {cond}"), &p)?;
        audit_row(
            c,
            actor,
            "delete",
            sel,
            note,
            &json!({"deleted": n}),
            None,
            Some(&vhosts),
        )?;
        Ok(n)
    })
}

/// Audit rows, newest first, filtered by `record_id`, `action`, `actor`, `since`, `until`.
///
/// `visible_to`: a user limited to some vhosts sees their own actions and those that touched
/// only records of those vhosts (`scope::audit_visible`); `None`: every row.
pub fn list_audit(
    c: &mut dyn Conn,
    terms: &std::collections::BTreeMap<String, String>,
    page: u64,
    page_size: u64,
    visible_to: Option<(&str, &[String])>,
) -> Result<(Vec<Value>, i64), ArchiveError> {
    let mut conds = vec!["1 = 1".to_string()];
    let mut p: Vec<Param> = Vec::new();
    if let Some((user, vhosts)) = visible_to {
        let (cond, mut vp) = scope::audit_visible(user, vhosts);
        conds.push(cond);
        p.append(&mut vp);
    }
    for (k, v) in terms {
        match k.as_str() {
            "action" | "actor" => {
                conds.push(format!("{k} = ?"));
                p.push(v.as_str().into());
            }
            "job_id" => {
                conds.push("job_id = ?".into());
                p.push(v.parse::<i64>().unwrap_or(-1).into());
            }
            "record_id" => {
                // Audit rows naming it among their ids (by id), JSON text match.
                conds.push(format!(
                    "({} OR {} OR {} OR record_ids = ?)",
                    c.dialect().contains("record_ids"),
                    c.dialect().contains("record_ids"),
                    c.dialect().contains("record_ids")
                ));
                p.push(format!("[{v},").into());
                p.push(format!(",{v},").into());
                p.push(format!(",{v}]").into());
                p.push(format!("[{v}]").into());
            }
            "since" | "until" => {
                let t = crate::time::parse_time(v)
                    .ok_or_else(|| ArchiveError::Invalid(format!("{k}: not a time")))?;
                conds.push(format!("at {} ?", if k == "since" { ">=" } else { "<" }));
                p.push(t.into());
            }
            "page" | "page_size" => {}
            other => return Err(ArchiveError::Invalid(format!("unknown filter '{other}'"))),
        }
    }
    let cond = conds.join(" AND ");
    let total = count(
        c,
        &format!("SELECT COUNT(*) FROM dead_letter_audit WHERE {cond}"),
        &p,
    )?;
    let offset = page.saturating_sub(1).saturating_mul(page_size);
    let rows = c.query(
        &format!(
            "SELECT id, at, actor, action, record_ids, filter, note, result, job_id FROM dead_letter_audit WHERE {cond} ORDER BY id DESC LIMIT {page_size} OFFSET {offset}"
        ),
        &p,
    )?;
    let parse = |c: &Cell| {
        c.opt_text()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .unwrap_or(Value::Null)
    };
    Ok((
        rows.iter()
            .map(|r| {
                json!({
                    "id": r[0].int(),
                    "at": format_ms(r[1].int()),
                    "actor": r[2].text(),
                    "action": r[3].text(),
                    "ids": parse(&r[4]),
                    "filter": parse(&r[5]),
                    "note": r[6].opt_text(),
                    "result": parse(&r[7]),
                    "job": r[8].opt_int(),
                })
            })
            .collect(),
        total,
    ))
}

fn bump_counter(c: &mut dyn Conn, name: &str, by: u64) -> Result<(), ArchiveError> {
    if by == 0 {
        return Ok(());
    }
    c.exec(
        "INSERT INTO archive_counters (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = archive_counters.value + excluded.value",
        &[name.into(), (by as i64).into()],
    )?;
    Ok(())
}

/// Deletes records created before `older_than` (ms), then the oldest while the payloads exceed
/// `max_bytes`; counted and audited (actor `charon`). Returns (by age, by size).
pub fn retention(
    c: &mut dyn Conn,
    older_than: Option<i64>,
    max_bytes: Option<i64>,
) -> Result<(u64, u64), ArchiveError> {
    let by_age = match older_than {
        Some(t) => transaction(c, |c| {
            c.exec(
                "DELETE FROM dead_letter_history WHERE record_id IN (SELECT id FROM dead_letters WHERE created_at < ?)",
                &[t.into()],
            )?;
            let n = c.exec("DELETE FROM dead_letters WHERE created_at < ?", &[t.into()])?;
            bump_counter(c, "retention_deleted", n)?;
            if n > 0 {
                let f = Filter {
                    terms: [("until".to_string(), t.to_string())].into(),
                    vhosts: None,
                };
                audit(
                    c,
                    "charon",
                    "retention",
                    &Selection::Filter(f),
                    None,
                    &json!({"deleted": n}),
                    None,
                )?;
            }
            Ok(n)
        })?,
        None => 0,
    };
    let mut by_size = 0;
    if let Some(max) = max_bytes.filter(|m| *m > 0) {
        // The search index's bytes count too (SQLite; `search_index::cap_weight`).
        let total = count(
            c,
            "SELECT CAST(COALESCE(SUM(payload_bytes), 0) AS BIGINT) FROM dead_letter_groups",
            &[],
        )? + crate::search_index::counted_bytes(c)?;
        if total > max {
            // The oldest records whose payloads add up to the excess.
            let excess = total - max;
            let rows = c.query(
                &format!(
                    "SELECT id, {} FROM dead_letters ORDER BY id LIMIT 100000",
                    crate::search_index::cap_weight(c.dialect())
                ),
                &[],
            )?;
            let mut freed = 0;
            let mut last = None;
            for r in rows {
                if freed >= excess {
                    break;
                }
                freed += r[1].int();
                last = Some(r[0].int());
            }
            if let Some(upto) = last {
                by_size = transaction(c, |c| {
                    c.exec(
                        "DELETE FROM dead_letter_history WHERE record_id <= ?",
                        &[upto.into()],
                    )?;
                    let n = c.exec("DELETE FROM dead_letters WHERE id <= ?", &[upto.into()])?;
                    bump_counter(c, "size_cap_deleted", n)?;
                    audit_row(
                        c,
                        "charon",
                        "size-cap",
                        &Selection::Filter(Filter::default()),
                        None,
                        &json!({"deleted": n, "up_to_id": upto}),
                        None,
                        Some(&[]),
                    )?;
                    Ok(n)
                })?;
            }
        }
    }
    Ok((by_age, by_size))
}

/// Totals: records, payload bytes, counts by status, counters.
pub fn stats(c: &mut dyn Conn) -> Result<Value, ArchiveError> {
    let rows = c.query(
        "SELECT CAST(COALESCE(SUM(records), 0) AS BIGINT), CAST(COALESCE(SUM(payload_bytes), 0) AS BIGINT) FROM dead_letter_groups",
        &[],
    )?;
    let (records, bytes) = rows.first().map_or((0, 0), |r| (r[0].int(), r[1].int()));
    let mut by_status = serde_json::Map::new();
    for r in c.query(
        "SELECT status, CAST(SUM(records) AS BIGINT) FROM dead_letter_groups GROUP BY status",
        &[],
    )? {
        by_status.insert(r[0].text(), json!(r[1].int()));
    }
    let mut out = json!({"records": records, "payload_bytes": bytes, "by_status": by_status,
        "retention_deleted": 0, "size_cap_deleted": 0});
    for r in c.query("SELECT name, value FROM archive_counters", &[])? {
        out[r[0].text()] = json!(r[1].int());
    }
    if let Some(s) = crate::search_index::stats(c)? {
        out["search_index"] = s;
    }
    Ok(out)
}
