//! List pages sorted by a column that almost every record holds at its insert value
//! (docs/archive.md "Migration 11 (branch arc9q)", "Sixteenth round").
//!
//! `replay_count` is 0, `last_replayed_at` NULL, `death_count` 1 and `updated_at` equal to
//! `created_at` for every record until a replay, an edit or a skip changes it (or, for
//! `death_count`, the message died more than once). Migration 11 indexes only the records whose
//! value differs (*partial* indexes, so an archived record at its insert value costs no index
//! entry). A page sorted by such a column is then the merge of two ordered reads:
//!
//! - the **rare** records (`replay_count <> 0`, …) in the sort's order, from the partial index;
//! - the **common** records (`replay_count = 0`, …), whose sort value is one and the same (so
//!   their order is the `id` tie-break), or for `updated_at` equals `created_at` (so their order
//!   is `(created_at, id)`), read in that order from an index the table already has.
//!
//! The page's first `offset + page_size` records in the plain `ORDER BY col, id` are among the
//! first `offset + page_size` of each part, so each part reads at most that many, and the outer
//! `ORDER BY` (the same text as the plain query, on the same values, NULLs placed by the backend
//! exactly as in the plain query) picks the page from at most twice that. The conditions of the
//! two parts are exact complements (`<>`/`=` on NOT NULL columns, `IS NOT NULL`/`IS NULL`), so
//! every record is in exactly one part.

use crate::error::ArchiveError;
use crate::sql::{Conn, Dialect, Param};

/// Migration 11: the partial indexes (the same SQL on both backends).
pub const V11: &str = "
CREATE INDEX dead_letters_replayed ON dead_letters (replay_count, id) WHERE replay_count <> 0;
CREATE INDEX dead_letters_last_replayed ON dead_letters (last_replayed_at, id) WHERE last_replayed_at IS NOT NULL;
CREATE INDEX dead_letters_deaths ON dead_letters (death_count, id) WHERE death_count <> 1;
CREATE INDEX dead_letters_updated ON dead_letters (updated_at, id) WHERE updated_at <> created_at;
";

/// A sort column with a partial index over the records not at their insert value.
struct Sparse {
    column: &'static str,
    /// The partial index (migration 11).
    index: &'static str,
    /// The records in the partial index (its `WHERE`, the same text).
    rare: &'static str,
    /// The other records: the exact complement of `rare`.
    common: &'static str,
    /// The column whose order (with the `id` tie-break) is the common records' sort order.
    common_order: &'static str,
    /// The common records' sort value, as an expression over `id` and `common_order` (a
    /// driver's rows hold no other column).
    common_value: &'static str,
}

const SPARSE: &[Sparse] = &[
    Sparse {
        column: "replay_count",
        index: "dead_letters_replayed",
        rare: "replay_count <> 0",
        common: "replay_count = 0",
        common_order: "id",
        common_value: "CAST(0 AS BIGINT)",
    },
    Sparse {
        column: "last_replayed_at",
        index: "dead_letters_last_replayed",
        rare: "last_replayed_at IS NOT NULL",
        common: "last_replayed_at IS NULL",
        common_order: "id",
        common_value: "CAST(NULL AS BIGINT)",
    },
    Sparse {
        column: "death_count",
        index: "dead_letters_deaths",
        rare: "death_count <> 1",
        common: "death_count = 1",
        common_order: "id",
        common_value: "CAST(1 AS BIGINT)",
    },
    Sparse {
        column: "updated_at",
        index: "dead_letters_updated",
        rare: "updated_at <> created_at",
        common: "updated_at = created_at",
        common_order: "created_at",
        common_value: "created_at",
    },
];

/// Whether `order` (as `filter::order_by` writes it) sorts by one of the sparse columns.
pub fn is_sparse(order: &str) -> bool {
    let col = order.split_whitespace().next().unwrap_or("");
    SPARSE.iter().any(|s| s.column == col)
}

/// The page's id query for `order` (as `filter::order_by` writes it) when it sorts by one of the
/// sparse columns, with its parameters (`params` twice: the condition is in both parts); `None`
/// for any other order. `cond`/`params` are the filter's; `total` how many records match,
/// `ranged` whether the filter has a time range (`since`/`until`), `offset`/`page_size` the page.
#[allow(clippy::too_many_arguments)]
pub fn ids_query(
    c: &mut dyn Conn,
    cond: &str,
    params: &[Param],
    order: &str,
    total: i64,
    ranged: bool,
    offset: u64,
    page_size: u64,
) -> Result<Option<(String, Vec<Param>)>, ArchiveError> {
    let mut words = order.split_whitespace();
    let (Some(column), Some(dir)) = (words.next(), words.next()) else {
        return Ok(None);
    };
    let dir = dir.trim_end_matches(',');
    let Some(s) = SPARSE.iter().find(|s| s.column == column) else {
        return Ok(None);
    };
    let reach = offset.saturating_add(page_size);
    // SQLite has no statistics: without `INDEXED BY` it reads the filter's index (`reason = …`)
    // and tests each record, i.e. every match, to sort them.
    let rare_from = match c.dialect() {
        Dialect::Sqlite => format!("dead_letters INDEXED BY {}", s.index),
        Dialect::Postgres => "dead_letters".to_string(),
    };
    let rare = format!(
        "SELECT id, {col} FROM {rare_from} WHERE {r} AND ({cond}) ORDER BY {col} {dir}, id {dir} LIMIT {reach}",
        col = s.column,
        r = s.rare,
    );
    // The common part in its own order, planned as any page in that order (`page_plan`: the
    // order's index walked on SQLite when it would sort; a time range by `id + 0`).
    let common_cond = format!("{} AND ({cond})", s.common);
    let common = if s.common_order == "id" && ranged {
        format!(
            "SELECT id, {col} FROM dead_letters WHERE {common_cond} ORDER BY (id + 0) {dir} LIMIT {reach}",
            col = s.column
        )
    } else {
        let common_order = format!("{o} {dir}, id {dir}", o = s.common_order);
        let common_order = if s.common_order == "id" {
            format!("id {dir}")
        } else {
            common_order
        };
        let inner = format!(
            "SELECT id, {col} FROM {{from}} WHERE {{cond}} ORDER BY {common_order} LIMIT {reach}",
            col = s.column
        );
        let plan = if ranged {
            crate::page_plan::ranged_ids_query
        } else {
            crate::page_plan::ids_query
        };
        plan(c, &inner, &common_cond, params, &common_order, total, reach)?
    };
    let sql = merged(&rare, &common, s.column, dir, offset, page_size);
    let mut both = params.to_vec();
    both.extend_from_slice(params);
    Ok(Some((sql, both)))
}

/// The page of the rare part's and the common part's ids merged in the sort's order (`col dir,
/// id dir`), after `offset`.
fn merged(rare: &str, common: &str, col: &str, dir: &str, offset: u64, page_size: u64) -> String {
    format!(
        "SELECT id FROM (SELECT id, {col} FROM ({rare}) AS r UNION ALL SELECT id, {col} FROM ({common}) AS c) AS u \
         ORDER BY {col} {dir}, id {dir} LIMIT {page_size}{}",
        crate::sql::offset(offset)
    )
}

/// A statement selecting a filter's first matches in an order, for [`driven_ids_query`]:
/// `(connection, order column, descending, how many)` → the SQL and its parameters, or `None`
/// (a driver may read to find them, e.g. `crate::time_walk`'s walk of the copy). Its rows are
/// `id` and, when the order column is not `id`, that column.
pub type Driver<'a> = &'a mut dyn FnMut(
    &mut dyn Conn,
    &str,
    bool,
    u64,
) -> Result<Option<(String, Vec<Param>)>, ArchiveError>;

/// Most rare matches [`driven_ids_query`] takes (beyond, the plan of [`ids_query`] answers).
pub const DRIVEN_RARE: u64 = 10_000;

/// [`ids_query`] for a filter whose matches another plan lists in the common records' order
/// (branch `s9a`): `driver(common_order, desc, n)` gives a statement selecting (at least) the
/// filter's first `n` matches in `common_order` (`id` or `created_at`, with the `id`
/// tie-break) as a column `id`, e.g. a header term's index range walked in id order, or its
/// rows sorted by their `created_at` — where [`ids_query`]'s common part read every match's
/// record to test it (a header of 50,000 matches sorted by `updated_at`: ~300 ms over 1M).
///
/// The rare records are counted first (at most [`DRIVEN_RARE`], else `None`): with `r` of them,
/// at most `r` of the filter's first `reach + r` matches are rare, so the first `reach` common
/// matches are among those. The common part reads no record: a driven match is common when the
/// partial index does not hold it (the two conditions are complements), and its sort value is
/// the common one (`0`, `NULL`, `1`, or for `updated_at` its `created_at`, which the driver
/// gives) — reading 7,000 records to check `updated_at = created_at` cost PostgreSQL 30–50 ms.
/// (The rare ids' `LIMIT`, which never cuts, is what makes PostgreSQL hash them: it estimates
/// the partial index's condition true for most records, and without it tested each driven
/// match against the list: 1.2 s for 7,000.) The rare part walks the
/// partial index testing each record with `cond` (the filter's per-record check,
/// `Filter::to_sql_checks_only`: a header term's ids gathered whole for a few rare records cost
/// PostgreSQL 300 ms).
#[allow(clippy::too_many_arguments)]
pub fn driven_ids_query(
    c: &mut dyn Conn,
    (cond, params): (&str, &[Param]),
    order: &str,
    offset: u64,
    page_size: u64,
    driver: Driver<'_>,
) -> Result<Option<(String, Vec<Param>)>, ArchiveError> {
    let mut words = order.split_whitespace();
    let (Some(column), Some(dir)) = (words.next(), words.next()) else {
        return Ok(None);
    };
    let dir = dir.trim_end_matches(',');
    let Some(s) = SPARSE.iter().find(|s| s.column == column) else {
        return Ok(None);
    };
    let rare_from = match c.dialect() {
        Dialect::Sqlite => format!("dead_letters INDEXED BY {}", s.index),
        Dialect::Postgres => "dead_letters".to_string(),
    };
    // Every rare record, matching or not (an index-only count of the partial index): a bound
    // on the rare matches that reads no record.
    let rare_n = c
        .query(
            &format!(
                "SELECT COUNT(*) FROM (SELECT id FROM {rare_from} WHERE {r} LIMIT {lim}) AS n",
                r = s.rare,
                lim = DRIVEN_RARE + 1
            ),
            &[],
        )?
        .first()
        .and_then(|r| r.first())
        .map_or(0, crate::sql::Cell::int);
    let rare_n = u64::try_from(rare_n).unwrap_or(u64::MAX);
    if rare_n > DRIVEN_RARE {
        return Ok(None);
    }
    let reach = offset.saturating_add(page_size);
    let Some((driven, driven_params)) = driver(c, s.common_order, dir == "DESC", reach + rare_n)?
    else {
        return Ok(None);
    };
    // The rare records listed from the partial index first (a LIMIT of that index's size):
    // given the filter's check and a deep page's LIMIT, PostgreSQL, which estimates `updated_at
    // <> created_at` true for most records, scanned the whole table instead (~360 ms over 1M).
    let rare = format!(
        "SELECT id, {col} FROM dead_letters WHERE id IN (SELECT id FROM {rare_from} WHERE {r} \
         ORDER BY {col} {dir}, id {dir} LIMIT {lim}) AND {r} AND ({cond}) ORDER BY {col} {dir}, id {dir} LIMIT {reach}",
        col = s.column,
        r = s.rare,
        lim = DRIVEN_RARE + 1,
    );
    let common_order = if s.common_order == "id" {
        format!("id {dir}")
    } else {
        format!("{o} {dir}, id {dir}", o = s.common_order)
    };
    let common = format!(
        "SELECT id, {v} AS {col} FROM ({driven}) AS m WHERE id NOT IN \
         (SELECT id FROM {rare_from} WHERE {r} LIMIT {lim}) ORDER BY {common_order} LIMIT {reach}",
        v = s.common_value,
        col = s.column,
        r = s.rare,
        lim = DRIVEN_RARE + 1,
    );
    let sql = merged(&rare, &common, s.column, dir, offset, page_size);
    let mut all = params.to_vec();
    all.extend(driven_params);
    Ok(Some((sql, all)))
}
