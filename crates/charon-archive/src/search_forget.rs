//! Migration 23 (PostgreSQL; SQLite: `SELECT 1`), docs/archive.md "Migration 23": the search
//! index (migration 7) forgets a DELETE statement's records once per statement instead of once
//! per deleted record.
//!
//! Until 23 the row trigger `dead_letter_search_forget` ran, for every deleted record at or
//! below the watermark, an `UPDATE` of the one row of `dead_letter_search_state` (its
//! `indexed_bytes`). PostgreSQL writes a new version of the row for every one of those
//! updates, and none of them can be pruned while the deleting transaction runs: a retention
//! run deleting 139,903 indexed records left the table at 736 pages (docs/archive.md
//! "Twenty-fourth round"), and every later read of the watermark — the indexer's batch, the
//! filters' `id <= (SELECT watermark …)`, the per-row delete triggers — scanned them. The
//! statement trigger here subtracts the statement's indexed bytes in one `UPDATE`, and deletes
//! the statement's rows of `dead_letter_search` and `dead_letter_search_scan` with one join
//! each. Edits (`UPDATE OF headers, payload, …`) keep the row trigger: PostgreSQL allows no
//! transition table on an `UPDATE OF` column list, and edits come one record at a time.
//!
//! Exact as the row trigger: the same records (at or below the watermark read when the
//! statement's triggers run, which is when AFTER ROW triggers ran too), the same bytes (the
//! records waiting in `dead_letter_search_scan` count for nothing, as before), the same rows
//! removed. The indexer's batch holds the state row `FOR UPDATE`; the statement's `UPDATE`
//! waits for it as each row's did.

use crate::search_index::size_sql;
use crate::sql::Dialect;

/// The migration's version.
pub const VERSION: i64 = 23;

/// The statement trigger's body; `{SIZE}` is a gone record's indexed bytes.
const V23_POSTGRES: &str = "
CREATE FUNCTION dead_letter_search_forget_deleted() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
    wm BIGINT := (SELECT watermark FROM dead_letter_search_state WHERE one = 1);
BEGIN
    IF NOT EXISTS (SELECT 1 FROM dead_letter_search_gone g WHERE g.id <= wm) THEN
        RETURN NULL;
    END IF;
    UPDATE dead_letter_search_state SET indexed_bytes = indexed_bytes - d.bytes
        FROM (SELECT SUM({SIZE}) AS bytes FROM dead_letter_search_gone g
              WHERE g.id <= wm AND NOT EXISTS (SELECT 1 FROM dead_letter_search_scan s WHERE s.id = g.id)) d
        WHERE one = 1 AND d.bytes IS NOT NULL;
    DELETE FROM dead_letter_search s USING dead_letter_search_gone g WHERE s.id = g.id AND g.id <= wm;
    DELETE FROM dead_letter_search_scan s USING dead_letter_search_gone g WHERE s.id = g.id AND g.id <= wm;
    RETURN NULL;
END $f$;
DROP TRIGGER dead_letter_search_delete ON dead_letters;
CREATE TRIGGER dead_letter_search_delete AFTER DELETE ON dead_letters
    REFERENCING OLD TABLE AS dead_letter_search_gone
    FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_search_forget_deleted();
";

/// Migration 23 for dialect `d` (see the module docs).
pub fn v23(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => "SELECT 1".into(),
        Dialect::Postgres => V23_POSTGRES.replace("{SIZE}", &size_sql(d, "g.")),
    }
}

#[cfg(test)]
mod tests {
    use super::v23;
    use crate::sql::Dialect;

    #[test]
    fn the_delete_trigger_is_per_statement_and_sizes_the_gone_rows() {
        let sql = v23(Dialect::Postgres);
        assert!(sql.contains("FOR EACH STATEMENT"));
        assert!(sql.contains("SUM(g.payload_bytes + octet_length(g.headers)"));
        assert!(!sql.contains("{SIZE}"));
        assert_eq!(v23(Dialect::Sqlite), "SELECT 1");
    }
}
