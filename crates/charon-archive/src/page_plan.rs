//! How a list page finds its ids on SQLite (docs/archive.md "List pages over a big archive").
//!
//! SQLite's planner has no statistics on `dead_letters` (no `ANALYZE`), so for a filter served
//! by an index that is not in the page's order (`status = 'PENDING'` sorted by `created_at`,
//! `original_queue = …` alone newest first through `(original_queue, status, id)`) it takes every
//! matching entry and sorts them: 600,000 rows read for one page of 100 (1.1 s over 1,000,000
//! records). Walking the sort column's own index and testing the filter on each row instead
//! visits about `(offset + page_size) × all / matching` rows: fewer whenever the filter matches
//! many records. Both counts are known before the page is read (the list's `total`, and every
//! record's count from the summary), so the page walks the order's index, with `INDEXED BY`,
//! exactly when SQLite would otherwise sort and the walk visits fewer rows than the sort reads.
//! PostgreSQL keeps statistics and makes this choice itself.
//!
//! When the walk would visit more rows than match, a page sorted by `created_at` can still walk
//! `dead_letters_created` without reading a record: that index holds `(created_at, id)`, so the
//! walk only tests each id against the filter's ids (`id IN (SELECT id … WHERE filter)`, which
//! SQLite builds once, from the filter's own index, with a Bloom filter), instead of reading every
//! match's record for its `created_at` to sort them (`original_queue = …` sorted by `-created_at`,
//! page 100, over 1,000,000 records: 50,000 records read and sorted; docs/archive.md "Thirteenth
//! round").
//!
//! A time range (`since`/`until`) sorted by `created_at` walks `dead_letters_created` over the
//! range only, testing the other conditions on each row ([`ranged_ids_query`], fifteenth round):
//! the range is that index's own range, so the walk visits at most the rows the estimate above
//! counts (the matches are at least as dense inside the range as over all records).

use crate::error::ArchiveError;
use crate::sql::{Conn, Dialect, Param};

/// The index whose order is `order` (as `filter::order_by` writes it), if there is one.
fn order_index(order: &str) -> Option<&'static str> {
    match order.split_whitespace().next() {
        Some("id") => Some("dead_letters_id"),
        Some("created_at") => Some("dead_letters_created"),
        _ => None,
    }
}

/// A walk of `dead_letters_created` that tests membership in the filter's ids (see the module
/// docs) is taken only when at least one record in this many matches: it visits at most every
/// entry of the index, each ~0.2 µs, against ~11 µs for each matching record a sort reads
/// (measured over 1,000,000 records, load 6.9), so even a walk to the index's end costs less.
pub const PROBE_SHARE: i64 = 32;

/// The page's id query: `inner` with `{from}` (the table, maybe read through an index) and
/// `{cond}` (the filter's condition `cond`, maybe as a membership test) filled in. On SQLite it
/// walks the order's index when that is cheaper than the sort SQLite would do (see the module
/// docs). `total` is how many records match, `reach` (offset + limit) how far into them the page
/// reaches.
pub fn ids_query(
    c: &mut dyn Conn,
    inner: &str,
    cond: &str,
    params: &[Param],
    order: &str,
    total: i64,
    reach: u64,
) -> Result<String, ArchiveError> {
    plan_ids(c, inner, cond, params, order, total, reach, true)
}

/// [`ids_query`] for a filter with a time range sorted by `created_at`: the walk, never the
/// membership probe (whose walk would not be limited to the range).
pub fn ranged_ids_query(
    c: &mut dyn Conn,
    inner: &str,
    cond: &str,
    params: &[Param],
    order: &str,
    total: i64,
    reach: u64,
) -> Result<String, ArchiveError> {
    plan_ids(c, inner, cond, params, order, total, reach, false)
}

#[allow(clippy::too_many_arguments)]
fn plan_ids(
    c: &mut dyn Conn,
    inner: &str,
    cond: &str,
    params: &[Param],
    order: &str,
    total: i64,
    reach: u64,
    may_probe: bool,
) -> Result<String, ArchiveError> {
    const TABLE: &str = "dead_letters";
    let fill = |from: &str, cond: &str| inner.replace("{from}", from).replace("{cond}", cond);
    let plain = fill(TABLE, cond);
    if c.dialect() != Dialect::Sqlite || total <= 0 {
        return Ok(plain);
    }
    let Some(index) = order_index(order) else {
        return Ok(plain);
    };
    let all = crate::summary::records(c, "TRUE", &[])?;
    // Rows the walk visits (the matches spread evenly) against rows the sort reads.
    let visits = (reach as f64) * (all.max(total) as f64) / (total as f64);
    let walk = visits <= total as f64;
    let probe =
        may_probe && index == "dead_letters_created" && total.saturating_mul(PROBE_SHARE) >= all;
    if !walk && !probe {
        return Ok(plain);
    }
    let plan = c.query(&format!("EXPLAIN QUERY PLAN {plain}"), params)?;
    let sorts = plan.iter().any(|r| {
        r.last()
            .is_some_and(|d| d.text().contains("TEMP B-TREE FOR ORDER BY"))
    });
    let from = format!("{TABLE} INDEXED BY {index}");
    Ok(if !sorts {
        plain
    } else if walk {
        fill(&from, cond)
    } else {
        // The index holds (created_at, id): the walk reads no record, only tests each id.
        fill(
            &from,
            &format!("id IN (SELECT id FROM {TABLE} WHERE {cond})"),
        )
    })
}
