//! Migration 28 (lead, stop 44; docs/archive.md "Migration 28"): PostgreSQL's time index holds
//! each record's id, `(created_at) INCLUDE (id)`, as SQLite's `dead_letters_created` does by its
//! rowid.
//!
//! `crate::time_walk` proves a page sorted by time by showing that no record beyond the walk's
//! last id has a time before the page's last. PostgreSQL's time index held no id, so the proof
//! was two index-only counts read from two indexes (the records newer than `t`, and those of
//! them within the walk), and where they differed — a record whose time a user's SQL moved — the
//! strays were listed by reading every record newer than the page (`error=cause 5&sort=
//! -created_at&page=100`: 38 → 88 ms with two strays over 1M). With the id in the index entry,
//! both backends list the strays from the time index alone in one statement.

use crate::sql::Dialect;

/// Migration 28 for dialect `d` (a no-op on SQLite).
pub fn v28(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => "SELECT 1".into(),
        Dialect::Postgres => {
            "CREATE INDEX dead_letters_created_id ON dead_letters (created_at) INCLUDE (id);
DROP INDEX dead_letters_created;
ALTER INDEX dead_letters_created_id RENAME TO dead_letters_created;"
                .into()
        }
    }
}
