//! Migration 26 (lead, stop 44; docs/archive.md "Migration 26" and "Twenty-ninth round"):
//! PostgreSQL's trigram indexes of the error-text copy also hold the copy's group-key columns,
//! so an `error` term with a key term is intersected inside one index scan.
//!
//! Migration 13's trigram indexes (`gin_trgm_ops` on `error_message` and `error_stacktrace`)
//! found an `error` needle's candidates; a key term (`original_queue=orders-7`, `status=SKIPPED`)
//! was then checked on each candidate's heap row. A needle in one record of ten over 1M
//! (`cause 5`: 200,298 trigram candidates on 18,600 heap pages) cost ~25 ms of index and ~90 ms
//! of heap for every such filter, even one with no match at all. B-trees on the copy's key
//! columns let the planner AND two bitmaps, but only when it expects the key to cut the heap
//! pages: it did for `original_queue` (1 in 20), not for `status` (1 in 5), and an ordered
//! b-tree drew `ORDER BY original_queue LIMIT 100` into walking it (110 → 712 ms).
//!
//! Here the key columns are more columns of the same GIN indexes (`btree_gin`'s operator classes
//! for `text`): a condition on any of them is an index condition of the same scan, which
//! intersects the needle's trigram entries with the key's entry before any heap page is read.
//! GIN has no order, so no sort is drawn to it. `vhost` is left out: one vhost holds every record
//! in most archives, and its entry would only lengthen the intersection.
//!
//! `btree_gin` is a trusted extension (PostgreSQL 13+), as `pg_trgm` is. Where it cannot be
//! created, the block rolls back and migration 13's indexes stay (a warning says so); SQLite's
//! copy is checked through FTS5 and needs nothing here.

use crate::sql::Dialect;

/// The copy's key columns in the trigram indexes, after the text column.
pub const KEYS: &[&str] = &[
    "original_queue",
    "status",
    "queue",
    "reason",
    "error_fingerprint",
];

/// Migration 26 for dialect `d`.
pub fn v26(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => "SELECT 1".into(),
        Dialect::Postgres => {
            let keys = KEYS.join(", ");
            format!(
                "DO $$ BEGIN
    CREATE EXTENSION IF NOT EXISTS btree_gin;
    CREATE INDEX dead_letter_error_text_message_keys ON dead_letter_error_text
        USING gin (error_message gin_trgm_ops, {keys});
    CREATE INDEX dead_letter_error_text_stacktrace_keys ON dead_letter_error_text
        USING gin (error_stacktrace gin_trgm_ops, {keys});
    DROP INDEX IF EXISTS dead_letter_error_text_message;
    DROP INDEX IF EXISTS dead_letter_error_text_stacktrace;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'charon archive: no key columns in the error-text trigram indexes (%); an error term with a key term reads each candidate', SQLERRM;
END $$;
ANALYZE dead_letter_error_text;"
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_text_columns_carry_every_key_but_vhost() {
        let p = v26(Dialect::Postgres);
        for text in ["error_message", "error_stacktrace"] {
            assert!(p.contains(&format!("gin ({text} gin_trgm_ops, {})", KEYS.join(", "))));
        }
        assert!(!KEYS.contains(&"vhost"));
        for k in KEYS {
            assert!(
                crate::key_copy::KEY_COLUMNS.contains(k),
                "{k} is a copy column"
            );
        }
    }
}
