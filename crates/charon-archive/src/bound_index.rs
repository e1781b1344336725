//! Migration 12 (docs/archive.md "Migration 12 (branch ix9r)"): the second index diet, on
//! SQLite: a narrower B-tree to update for every archived record, no API answer changed.
//!
//! The summary triggers' **bound lookup** (a removed record was its group's oldest or newest:
//! `MIN`/`MAX(created_at)` of the group's records) reads `dead_letters_group_bound`: the group's
//! original queue, fingerprint and status, then `created_at`, instead of migration 6's
//! seven-column `dead_letters_group`. The lookup walks that range in `created_at` order and
//! stops at the first record whose other key columns (vhost, queue, reason, content type,
//! exchange) are its group's, as it did for migration 10's two columns. The triggers' SQL is
//! unchanged: their column conditions (`IS` for the NULL-able ones) pick the new index.
//!
//! PostgreSQL: nothing changes (a statement that changes nothing). The same narrowing there (an
//! index on `COALESCE(original_queue, '')`, `COALESCE(error_fingerprint, '')`, `status`,
//! `created_at` instead of the expression index on the six-part group key) cost the same per
//! inserted record (282,300 against 281,400 backend instructions under callgrind), so the
//! expression index `dead_letters_group_key` stays.
//!
//! `dead_letters_queue (queue, status, id)` stays on both although `(queue, id)` and
//! `(status, id)` both serve `queue` with `status`: without it a status that is rare in a big
//! queue (none of 1,000,000 records) walked every record of the queue for an empty page (1.8 s
//! on SQLite, 2.2 s on PostgreSQL; docs/archive.md "Seventeenth round").

use crate::sql::Dialect;
use crate::summary::{Keys, sqlite_same_group_by_columns};

/// SQLite: the index of the summary triggers' bound lookup.
pub const BOUND_INDEX: &str = "dead_letters_group_bound";

/// Migration 12, rendered for `d`.
pub fn v12(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => format!(
            "DROP INDEX dead_letters_group;
CREATE INDEX {BOUND_INDEX} ON dead_letters (original_queue, error_fingerprint, status, created_at);"
        ),
        Dialect::Postgres => "SELECT 1;".into(),
    }
}

/// SQLite: the bound lookup of the group of row `r` (e.g. `old`), as the triggers run it, for
/// tests and EXPLAIN.
pub fn sqlite_bound_lookup(r: &str) -> String {
    format!(
        "SELECT MIN(created_at) FROM dead_letters WHERE {}",
        sqlite_same_group_by_columns(Keys::V10, r)
    )
}
