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

use crate::error::ArchiveError;
use crate::sql::{Cell, Conn, Dialect, Param};

/// The index whose order is `order` (as `filter::order_by` writes it), if there is one.
fn order_index(order: &str) -> Option<&'static str> {
    match order.split_whitespace().next() {
        Some("id") => Some("dead_letters_id"),
        Some("created_at") => Some("dead_letters_created"),
        _ => None,
    }
}

/// The table reference the page's id query reads: `dead_letters`, or on SQLite the table read
/// through its order's index when that is cheaper (see the module docs). `inner` is the id query
/// with `{from}` where the table goes; `total` how many records match, `offset + limit` how far
/// into them the page reaches.
pub fn ids_from(
    c: &mut dyn Conn,
    inner: &str,
    params: &[Param],
    order: &str,
    total: i64,
    reach: u64,
) -> Result<String, ArchiveError> {
    const TABLE: &str = "dead_letters";
    if c.dialect() != Dialect::Sqlite || total <= 0 {
        return Ok(TABLE.into());
    }
    let Some(index) = order_index(order) else {
        return Ok(TABLE.into());
    };
    let all = c
        .query(
            "SELECT CAST(COALESCE(SUM(records), 0) AS BIGINT) FROM dead_letter_groups",
            &[],
        )?
        .first()
        .and_then(|r| r.first())
        .map_or(0, Cell::int);
    // Rows the walk visits (the matches spread evenly) against rows the sort reads.
    let visits = (reach as f64) * (all.max(total) as f64) / (total as f64);
    if visits > total as f64 {
        return Ok(TABLE.into());
    }
    let plan = c.query(
        &format!("EXPLAIN QUERY PLAN {}", inner.replace("{from}", TABLE)),
        params,
    )?;
    let sorts = plan.iter().any(|r| {
        r.last()
            .is_some_and(|d| d.text().contains("TEMP B-TREE FOR ORDER BY"))
    });
    Ok(if sorts {
        format!("{TABLE} INDEXED BY {index}")
    } else {
        TABLE.into()
    })
}
