//! PostgreSQL's parts of the archiver's batch (docs/archive.md "Nineteenth round (branch
//! `pg9t`)"): what keeps the writer's one backend busy with the rows instead of waiting on round
//! trips between statements.
//!
//! - [`upsert_groups`]: the batch's summary rows (one per group it touches) in multi-row
//!   upserts, one statement (one round trip) per [`GROUPS_PER_STATEMENT`] groups instead of one
//!   per group;
//! - [`upsert_seconds`]: since migration 20, the batch's records per (second, group) into the
//!   group summary per second (`dead_letter_group_seconds`, migration 19) in multi-row upserts,
//!   instead of the insert trigger aggregating the COPY's transition table;
//! - [`copy_work_mem`]: the `work_mem` of the batch's transaction, so that the whole batch goes in
//!   by one `COPY` (one statement, two round trips) without the summary trigger's transition
//!   table spilling to a temporary file.

use crate::error::ArchiveError;
use crate::sql::{Conn, Param};
use crate::summary::{Keys, key_expr_of};

/// Groups per upsert statement: 12 parameters each (PostgreSQL takes at most 65,535).
pub(crate) const GROUPS_PER_STATEMENT: usize = 1000;

/// The values a group's row takes after its key columns ([`Keys::columns`]), with their types.
const DELTA_COLS: [(&str, &str); 5] = [
    ("records", "BIGINT"),
    ("oldest", "BIGINT"),
    ("newest", "BIGINT"),
    ("payload_bytes", "BIGINT"),
    ("error_message", "TEXT"),
];

/// The multi-row upsert of `groups` summary rows: each row is the group's key columns
/// ([`Keys::columns`], texts) and then records, oldest, newest, payload bytes, error message —
/// the parameters of the single-row statement, in its order. The group key expression is the
/// summary's own, computed by the database. Two rows of one statement must not share a group
/// (`ON CONFLICT DO UPDATE` refuses to update a row twice): the caller's rows are per group.
pub(crate) fn upsert_sql(keys: Keys, groups: usize) -> String {
    let cols = keys.columns();
    let types: Vec<&str> = cols
        .iter()
        .map(|_| "TEXT")
        .chain(DELTA_COLS.iter().map(|(_, t)| *t))
        .collect();
    let row = format!(
        "({})",
        types
            .iter()
            .map(|t| format!("CAST(? AS {t})"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let names: Vec<&str> = cols
        .iter()
        .copied()
        .chain(DELTA_COLS.iter().map(|(c, _)| *c))
        .collect();
    format!(
        "INSERT INTO dead_letter_groups AS g ({ins}) \
         SELECT {k}, {vals}, v.records, v.oldest, v.newest, v.payload_bytes, v.error_message \
         FROM (VALUES {rows}) AS v ({names}) \
         ON CONFLICT (group_key) DO UPDATE SET records = g.records + excluded.records, oldest = LEAST(g.oldest, excluded.oldest), \
         newest = GREATEST(g.newest, excluded.newest), payload_bytes = g.payload_bytes + excluded.payload_bytes, \
         error_message = COALESCE(g.error_message, excluded.error_message)",
        ins = keys.insert_cols(),
        vals = keys.list("v."),
        k = key_expr_of(keys, "v."),
        rows = vec![row; groups].join(", "),
        names = names.join(", "),
    )
}

/// Counts a batch's groups into the summary: `rows` holds one group's parameters each (see
/// [`upsert_sql`]), at most one row per group.
pub(crate) fn upsert_groups(
    c: &mut dyn Conn,
    keys: Keys,
    rows: &[Vec<Param>],
) -> Result<(), ArchiveError> {
    for chunk in rows.chunks(GROUPS_PER_STATEMENT) {
        let p: Vec<Param> = chunk.iter().flatten().cloned().collect();
        c.exec(&upsert_sql(keys, chunk.len()), &p)?;
    }
    Ok(())
}

/// Rows per upsert of [`upsert_seconds`]: 10 parameters each.
pub(crate) const SECONDS_PER_STATEMENT: usize = 1000;

/// The multi-row upsert of `rows` rows of the group summary per second: each row is the group's
/// key columns ([`Keys::V10`]'s eight, texts), the second (`floor(created_at / 1000)`) and the
/// number of records. The group key expression is the summary's own, computed by the database,
/// as migration 19's insert trigger computes it. Two rows of one statement must not share a
/// (second, group): the caller's rows are per group and second.
pub(crate) fn upsert_seconds_sql(rows: usize) -> String {
    let cols = Keys::V10.columns();
    let row = format!(
        "({}, CAST(? AS BIGINT), CAST(? AS BIGINT))",
        vec!["CAST(? AS TEXT)"; cols.len()].join(", ")
    );
    format!(
        "INSERT INTO dead_letter_group_seconds AS s (second, group_key, records) \
         SELECT v.second, {k}, v.records FROM (VALUES {rows}) AS v ({names}, second, records) \
         ON CONFLICT (second, group_key) DO UPDATE SET records = s.records + excluded.records",
        k = key_expr_of(Keys::V10, "v."),
        rows = vec![row; rows].join(", "),
        names = cols.join(", "),
    )
}

/// Counts a batch's records into the group summary per second: `rows` holds one (group,
/// second)'s parameters each (see [`upsert_seconds_sql`]), at most one row per pair.
pub(crate) fn upsert_seconds(c: &mut dyn Conn, rows: &[Vec<Param>]) -> Result<(), ArchiveError> {
    for chunk in rows.chunks(SECONDS_PER_STATEMENT) {
        let p: Vec<Param> = chunk.iter().flatten().cloned().collect();
        c.exec(&upsert_seconds_sql(chunk.len()), &p)?;
    }
    Ok(())
}

/// The smallest `work_mem` set for a batch's COPY (PostgreSQL's default).
const MIN_WORK_MEM_KB: u64 = 4 * 1024;
/// The largest (a bigger batch spills its transition table to a temporary file, as before).
const MAX_WORK_MEM_KB: u64 = 256 * 1024;

/// The `SET LOCAL work_mem` for a COPY of `bytes` bytes of row data in `rows` rows, or `None`
/// when the default serves. The summary's insert trigger has a transition table (migration 3):
/// PostgreSQL keeps every row a statement inserts in a tuplestore of at most `work_mem` (4 MB by
/// default) and writes the rest to a temporary file, even though the trigger returns at once for
/// the archiver's batches. The rows are kept as the COPY gives them (before TOAST compression):
/// the row data, a header per row and per column, and slack; `LOCAL` ends with the transaction.
pub(crate) fn copy_work_mem(bytes: u64, rows: u64) -> Option<String> {
    let kb = (bytes + bytes / 4 + rows * 256) / 1024 + 1024;
    (kb > MIN_WORK_MEM_KB).then(|| format!("SET LOCAL work_mem = '{}kB'", kb.min(MAX_WORK_MEM_KB)))
}

/// The bytes of row data in `p` (texts and byte strings by length, integers 8).
pub(crate) fn param_bytes(p: &[Param]) -> u64 {
    p.iter()
        .map(|x| match x {
            Param::Text(s) => s.as_ref().map_or(0, String::len) as u64,
            Param::Int(_) => 8,
            Param::Bytes(b) => b.len() as u64,
            Param::Shared(b) => b.len() as u64,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upsert_has_one_row_of_parameters_per_group() {
        let sql = upsert_sql(Keys::V10, 3);
        // 8 key columns + 5 values per group.
        assert_eq!(sql.matches('?').count(), 3 * 13);
        assert_eq!(sql.matches("), (").count(), 2);
    }

    #[test]
    fn seconds_upsert_has_one_row_of_parameters_per_group_and_second() {
        let sql = upsert_seconds_sql(4);
        // 8 key columns + second + records per row.
        assert_eq!(sql.matches('?').count(), 4 * 10);
        assert_eq!(sql.matches("), (").count(), 3);
    }

    #[test]
    fn work_mem_grows_with_the_batch_and_is_bounded() {
        assert_eq!(copy_work_mem(100_000, 10), None);
        let s = copy_work_mem(12_000_000, 4000).unwrap_or_default();
        assert_eq!(s, "SET LOCAL work_mem = '16672kB'");
        assert_eq!(
            copy_work_mem(1 << 40, 1).unwrap_or_default(),
            "SET LOCAL work_mem = '262144kB'"
        );
    }
}
