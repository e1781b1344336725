//! Migration 9 (docs/archive.md "Migration 9"): the exact index of header values behind the
//! `header.NAME=value` filter, on both backends. One row `(name, value, id)` per top-level header
//! of an indexed record, the value rendered exactly as the filter compares it
//! ([`Dialect::json_field`]), in a B-tree on `(name, value, id)`: the records whose header `NAME`
//! is `value` are one index range, in id order, counted without reading a record.
//!
//! It follows the search index's rules (migration 7): filled behind the writer by the indexers
//! ([`crate::indexer`], [`crate::pg_indexer`]) in the batch that moves the watermark, emptied for
//! a record by triggers when it is deleted or edited (the edit puts it in
//! `dead_letter_search_scan`). So for every record at or below the watermark and not in the scan
//! table its rows are present, and no other record has rows: the filter's set is the index range
//! plus the records above the watermark and in the scan table that satisfy the filter's own
//! condition, exact without re-reading the indexed records.
//!
//! Long headers are left out (name and value over [`MAX_BYTES`] together: stack traces, long
//! messages); a filter on such a value uses migration 7/8's candidates and re-check instead.

use crate::sql::{Dialect, Param};

/// Longest `name` + `value` (bytes) a row holds.
pub const MAX_BYTES: usize = 256;

/// The table, its id index, the triggers that empty it (SQLite), and the existing records'
/// rows. `{FILL}` is [`fill_sql`] for the records already indexed.
const V9_SQLITE: &str = "
CREATE TABLE dead_letter_search_header (
    name  TEXT NOT NULL,
    value TEXT NOT NULL,
    id    INTEGER NOT NULL,
    PRIMARY KEY (name, value, id)
) WITHOUT ROWID;
CREATE INDEX dead_letter_search_header_id ON dead_letter_search_header (id);
CREATE TRIGGER dead_letter_search_header_delete AFTER DELETE ON dead_letters
WHEN old.id <= (SELECT watermark FROM dead_letter_search_state) BEGIN
    DELETE FROM dead_letter_search_header WHERE id = old.id;
END;
CREATE TRIGGER dead_letter_search_header_edit AFTER UPDATE OF headers, payload, error_message, error_stacktrace ON dead_letters
WHEN old.id <= (SELECT watermark FROM dead_letter_search_state) BEGIN
    DELETE FROM dead_letter_search_header WHERE id = old.id;
END;
{FILL};
";

/// PostgreSQL: the same table (a heap, its primary key the `(name, value, id)` B-tree), an id
/// index, one row trigger for deletes and edits, and the existing records' rows.
const V9_POSTGRES: &str = "
CREATE TABLE dead_letter_search_header (
    name  TEXT NOT NULL,
    value TEXT NOT NULL,
    id    BIGINT NOT NULL,
    PRIMARY KEY (name, value, id)
);
CREATE INDEX dead_letter_search_header_id ON dead_letter_search_header (id);
CREATE FUNCTION dead_letter_search_header_forget() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    IF OLD.id <= (SELECT watermark FROM dead_letter_search_state) THEN
        DELETE FROM dead_letter_search_header WHERE id = OLD.id;
    END IF;
    RETURN NULL;
END $f$;
CREATE TRIGGER dead_letter_search_header_delete AFTER DELETE ON dead_letters
    FOR EACH ROW EXECUTE FUNCTION dead_letter_search_header_forget();
CREATE TRIGGER dead_letter_search_header_edit AFTER UPDATE OF headers, payload, error_message, error_stacktrace ON dead_letters
    FOR EACH ROW EXECUTE FUNCTION dead_letter_search_header_forget();
{FILL};
ANALYZE dead_letter_search_header;
";

/// The records the upgrade fills: indexed by version 8 (at or below the watermark, not edited since).
const INDEXED: &str = "d.id <= (SELECT watermark FROM dead_letter_search_state) \
    AND d.id NOT IN (SELECT id FROM dead_letter_search_scan)";

/// Migration 9 for dialect `d`.
pub fn v9(d: Dialect) -> String {
    let sql = match d {
        Dialect::Sqlite => V9_SQLITE,
        Dialect::Postgres => V9_POSTGRES,
    };
    sql.replace("{FILL}", &fill_sql_v9(d, INDEXED))
}

/// The statement that adds the rows of the records `d.id` satisfying `which` (SQL over the alias
/// `d` of `dead_letters`; `?` parameters are the caller's). A header whose value the filter
/// compares as NULL (JSON null) has no row; on SQLite the first of duplicate keys counts, as in
/// the filter's `json_each … WHERE j.key = ?` (PostgreSQL's jsonb keeps one of each key).
/// Rows that exist already are skipped (`INSERT OR IGNORE`, `ON CONFLICT DO NOTHING`). Each row
/// holds the record's columns of migration 22 ([`crate::header_columns`]).
pub fn fill_sql(d: Dialect, which: &str) -> String {
    fill_sql_of(d, which, true)
}

/// [`fill_sql`] for migration 9's table (versions 9 to 21: no columns of migration 22), as
/// migration 9 and the tests that build an older archive fill it.
pub fn fill_sql_v9(d: Dialect, which: &str) -> String {
    fill_sql_of(d, which, false)
}

/// [`fill_sql`]; `columns`: with migration 22's columns (false: migration 9's table).
fn fill_sql_of(d: Dialect, which: &str, columns: bool) -> String {
    let (ins, sel) = if columns {
        crate::header_columns::fill_columns()
    } else {
        (String::new(), String::new())
    };
    match d {
        Dialect::Sqlite => format!(
            "INSERT OR IGNORE INTO dead_letter_search_header (name, value, id{ins}) \
             SELECT name, value, id{ins} FROM (SELECT j.key AS name, \
             CASE j.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE CAST(j.value AS TEXT) END AS value, \
             d.id AS id{sel}, MIN(j.id) FROM dead_letters AS d, json_each(d.headers) AS j \
             WHERE {which} AND typeof(j.key) = 'text' GROUP BY d.id, j.key) \
             WHERE value IS NOT NULL AND length(CAST(name AS BLOB)) + length(CAST(value AS BLOB)) <= {MAX_BYTES}"
        ),
        Dialect::Postgres => format!("{} ON CONFLICT DO NOTHING", pg_fill_of(which, columns)),
    }
}

/// PostgreSQL: [`fill_sql`] for records that have no rows yet (above the watermark, or taken out
/// of `dead_letter_search_scan`), without `ON CONFLICT`: a row that exists already fails the
/// statement (unique violation) instead of being skipped. The caller runs it in a savepoint and
/// falls back to [`fill_sql`] ([`crate::pg_indexer`]). Each headers text is parsed once
/// (`jsonb_each_text` gives each value exactly as `->>` does); until the twelfth round it was
/// parsed once per header and twice more per record, and the `ON CONFLICT` check probed the
/// primary key once more per row: 470 → 108 µs of PostgreSQL CPU per record of the bench
/// (eight rows each), docs/archive.md "Twelfth round". The records are read `FOR SHARE`: a
/// user's concurrent UPDATE of their columns waits for the fill's commit, or the fill for its
/// ([`crate::header_columns`]).
pub fn pg_fill_new_sql(which: &str) -> String {
    pg_fill_of(which, true)
}

fn pg_fill_of(which: &str, columns: bool) -> String {
    let (ins, sel, lock) = if columns {
        let (i, s) = crate::header_columns::fill_columns();
        (i, s, " FOR SHARE OF d")
    } else {
        (String::new(), String::new(), "")
    };
    format!(
        "INSERT INTO dead_letter_search_header (name, value, id{ins}) \
         SELECT j.key, j.value, d.id{sel} FROM dead_letters AS d \
         CROSS JOIN LATERAL (SELECT d.headers::jsonb AS h OFFSET 0) AS p \
         CROSS JOIN LATERAL jsonb_each_text(CASE WHEN jsonb_typeof(p.h) = 'object' THEN p.h ELSE '{{}}'::jsonb END) AS j \
         WHERE {which} AND j.value IS NOT NULL AND octet_length(j.key) + octet_length(j.value) <= {MAX_BYTES}{lock}"
    )
}

/// The ids of the records whose header `name` is `value`, exactly, as a subquery (one `id`
/// column, no duplicates) and its parameters: the index range, plus the records above the
/// watermark and those edited since they were indexed, checked by the filter's own condition.
/// `None` when the header is too long for the index ([`MAX_BYTES`]).
pub fn exact_ids(d: Dialect, name: &str, value: &str) -> Option<(String, Vec<Param>)> {
    exact_ids_at(d, name, value, None)
}

/// [`exact_ids`] split at watermark `wm` when given (read before, by the caller: any value the
/// watermark had is exact, since the index range is cut at it; PostgreSQL then plans with the
/// value, where `id > (SELECT watermark …)` was estimated as a third of the table and read in
/// parallel workers, 20–30 ms to start them), else at the watermark read in the statement.
pub fn exact_ids_at(
    d: Dialect,
    name: &str,
    value: &str,
    wm: Option<i64>,
) -> Option<(String, Vec<Param>)> {
    if name.len() + value.len() > MAX_BYTES {
        return None;
    }
    let field = d.json_field("headers");
    let (w, cut) = match wm {
        Some(_) => ("?", " AND id <= ?"),
        None => ("(SELECT watermark FROM dead_letter_search_state)", ""),
    };
    let sql = format!(
        "SELECT id FROM dead_letter_search_header WHERE name = ? AND value = ?{cut} \
         UNION ALL SELECT id FROM dead_letters WHERE id > {w} AND {field} = ? \
         UNION ALL SELECT id FROM dead_letters WHERE id IN (SELECT id FROM dead_letter_search_scan WHERE 1 = 1{cut}) AND {field} = ?"
    );
    let mut p = Vec::with_capacity(9);
    p.push(Param::from(name));
    p.push(Param::from(value));
    p.extend(wm.map(Param::from));
    p.extend(wm.map(Param::from));
    p.push(Param::from(name));
    p.push(Param::from(value));
    p.extend(wm.map(Param::from));
    p.push(Param::from(name));
    p.push(Param::from(value));
    Some((sql, p))
}

/// The ids of one page of [`exact_ids_at`] (at watermark `wm`) in id order (`desc`: newest
/// first), the first `reach` of each part taken in order from its index before they are merged:
/// the index range is walked for the page alone, not sorted whole.
pub fn page_ids_at(
    d: Dialect,
    name: &str,
    value: &str,
    wm: i64,
    desc: bool,
    reach: u64,
) -> Option<(String, Vec<Param>)> {
    if name.len() + value.len() > MAX_BYTES {
        return None;
    }
    let field = d.json_field("headers");
    let dir = if desc { "DESC" } else { "ASC" };
    let part = |sql: String| format!("SELECT id FROM ({sql} ORDER BY id {dir} LIMIT {reach}) AS p");
    let sql = [
        part("SELECT id FROM dead_letter_search_header WHERE name = ? AND value = ? AND id <= ?".into()),
        part(format!("SELECT id FROM dead_letters WHERE id > ? AND {field} = ?")),
        part(format!(
            "SELECT id FROM dead_letters WHERE id IN (SELECT id FROM dead_letter_search_scan WHERE id <= ?) AND {field} = ?"
        )),
    ]
    .join(" UNION ALL ");
    let p = vec![
        Param::from(name),
        Param::from(value),
        Param::from(wm),
        Param::from(wm),
        Param::from(name),
        Param::from(value),
        Param::from(wm),
        Param::from(name),
        Param::from(value),
    ];
    Some((sql, p))
}

/// The watermark of the search index.
pub fn watermark(c: &mut dyn crate::sql::Conn) -> Result<i64, crate::error::ArchiveError> {
    Ok(
        c.query("SELECT watermark FROM dead_letter_search_state", &[])?
            .first()
            .and_then(|r| r.first())
            .map_or(0, |v| v.int()),
    )
}

/// The filter condition for `header.name=value` through [`exact_ids`] (no re-check needed).
pub fn condition(d: Dialect, name: &str, value: &str) -> Option<(String, Vec<Param>)> {
    let (ids, p) = exact_ids(d, name, value)?;
    let cond = match d {
        Dialect::Sqlite => format!("id IN ({ids})"),
        // An array computed once (see `search_index::candidates`).
        Dialect::Postgres => format!("id = ANY(ARRAY({ids}))"),
    };
    Some((cond, p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_headers_are_not_in_the_index() {
        assert!(exact_ids(Dialect::Sqlite, "x-a", "b").is_some());
        assert!(exact_ids(Dialect::Sqlite, "x-a", "").is_some());
        let long = "v".repeat(MAX_BYTES);
        assert!(exact_ids(Dialect::Postgres, "x-a", &long).is_none());
        assert!(exact_ids(Dialect::Postgres, "", &long).is_some());
    }
}
