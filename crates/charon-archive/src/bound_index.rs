//! Migration 12 (docs/archive.md "Migration 12 (branch ix9r)"): the second index diet: a
//! narrower B-tree to update for every archived record, no API answer changed.
//!
//! The summary triggers' **bound lookup** (a removed record was its group's oldest or newest:
//! `MIN`/`MAX(created_at)` of the group's records) gets a narrower index, on both backends
//! `dead_letters_group_bound`: the group's original queue, fingerprint and status, then
//! `created_at`. The lookup walks that range in `created_at` order and stops at the first
//! record whose other key columns (vhost, queue, reason, content type, exchange) match its
//! group, as it did for migration 10's two columns. It replaces SQLite's seven-column
//! `dead_letters_group` (migration 6) and PostgreSQL's expression index on the six-part group
//! key `dead_letters_group_key` (migration 3), which evaluated that key for every inserted
//! record. PostgreSQL's btree cannot search `IS NOT DISTINCT FROM`, so its index is on
//! `COALESCE(col, '')` of the two NULL-able columns and the lookup names the same expressions,
//! followed by the exact `IS NOT DISTINCT FROM` of every key column (a NULL and an empty
//! string share an index range, never a group). SQLite's triggers are unchanged (their
//! column conditions pick the new index); PostgreSQL's delete and update trigger functions
//! are replaced with the new lookup ([`crate::summary::postgres_remove_bodies_with`]).
//!
//! `dead_letters_queue (queue, status, id)` stays although `(queue, id)` and `(status, id)` both
//! serve `queue` with `status`: without it a status that is rare in a big queue (none of 1,000,000
//! records) walked every record of the queue for an empty page (1.8 s on SQLite, 2.2 s on
//! PostgreSQL; docs/archive.md "Seventeenth round").

use crate::sql::Dialect;
use crate::summary::{Keys, postgres_remove_bodies_with};

/// The index of the summary triggers' bound lookup (both backends).
pub const BOUND_INDEX: &str = "dead_letters_group_bound";

/// Migration 12, rendered for `d`.
pub fn v12(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => format!(
            "DROP INDEX dead_letters_group;
CREATE INDEX {BOUND_INDEX} ON dead_letters (original_queue, error_fingerprint, status, created_at);"
        ),
        Dialect::Postgres => {
            let (del, upd) = postgres_remove_bodies_with(Keys::V10, postgres_same_group);
            format!(
                "DROP INDEX dead_letters_group_key;
CREATE INDEX {BOUND_INDEX} ON dead_letters ((COALESCE(original_queue, '')), (COALESCE(error_fingerprint, '')), status, created_at);
CREATE OR REPLACE FUNCTION dead_letter_groups_delete() RETURNS trigger LANGUAGE plpgsql AS $$ {del} $$;
CREATE OR REPLACE FUNCTION dead_letter_groups_update() RETURNS trigger LANGUAGE plpgsql AS $$ {upd} $$;
ANALYZE dead_letters;"
            )
        }
    }
}

/// PostgreSQL (migration 12): the records of summary row `g`'s group, through
/// [`BOUND_INDEX`]'s range (its three leading expressions), every key column then compared
/// exactly.
pub fn postgres_same_group(keys: Keys) -> String {
    let mut c = "COALESCE(original_queue, '') = COALESCE(g.original_queue, '') \
         AND COALESCE(error_fingerprint, '') = COALESCE(g.error_fingerprint, '') AND status = g.status"
        .to_string();
    for col in keys.columns() {
        if col != "status" {
            c.push_str(&format!(" AND {col} IS NOT DISTINCT FROM g.{col}"));
        }
    }
    c
}

/// SQLite (migration 12): the bound lookup of a group, as the triggers run it (their column
/// conditions, [`crate::summary::sqlite_same_group_by_columns`]), for tests and EXPLAIN.
pub fn sqlite_bound_lookup(keys: Keys, r: &str) -> String {
    format!(
        "SELECT MIN(created_at) FROM dead_letters WHERE {}",
        crate::summary::sqlite_same_group_by_columns(keys, r)
    )
}
