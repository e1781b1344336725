//! Migration 18 (docs/archive.md "Migration 18", branch `pg9w`): PostgreSQL's three `(X, status,
//! id)` indexes hold only the records that are no longer `PENDING`.
//!
//! Every archived record is inserted `PENDING`, so the archiver's COPY no longer adds an entry to
//! `dead_letters_queue`, `dead_letters_orig_queue` or `dead_letters_fingerprint` (each a B-tree
//! insert of two texts and an id, ~17,000 of the COPY's ~262,000 instructions a row). A record
//! enters them when its status leaves `PENDING` (replay, skip), an update that already rewrites
//! `dead_letters_status`.
//!
//! - Each X has an `(X, id) INCLUDE (status)` index (~12,000 instructions a row; `queue`'s is
//!   migration 5's `(queue, id)` rebuilt with the status in its entries) for the filter alone and
//!   with `status=PENDING`: a page of X's PENDING records walks X's entries in id order and checks
//!   the status in the entry (an index-only scan), not in the record.
//! - The partial `(X, status, id)` keeps serving a small status within a big X in id order.
//!
//! The planner uses a partial index only when the query implies its predicate, and the archive's
//! statements are prepared (a generic plan does not know `status = $2`), so a `status` filter
//! other than `PENDING` carries the predicate as a literal ([`NOT_PENDING`], added by
//! `filter.rs`). SQLite: nothing (`SELECT 1`; its indexes cost 1,600–4,100 instructions a record
//! there, ix9r).

use crate::sql::Dialect;

/// The partial indexes' predicate, as a filter's SQL carries it (PostgreSQL only).
pub const NOT_PENDING: &str = "status <> 'PENDING'";

/// Whether a `status` filter of value `v` carries [`NOT_PENDING`] on dialect `d`.
pub fn carries_not_pending(d: Dialect, v: &str) -> bool {
    d == Dialect::Postgres && v != "PENDING"
}

/// Migration 18, rendered for `d`.
pub fn v18(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => "SELECT 1".into(),
        Dialect::Postgres => format!(
            "DROP INDEX dead_letters_queue;
CREATE INDEX dead_letters_queue ON dead_letters (queue, status, id) WHERE {NOT_PENDING};
DROP INDEX dead_letters_queue_id;
CREATE INDEX dead_letters_queue_id ON dead_letters (queue, id) INCLUDE (status);
DROP INDEX dead_letters_orig_queue;
CREATE INDEX dead_letters_orig_queue ON dead_letters (original_queue, status, id) WHERE {NOT_PENDING};
CREATE INDEX dead_letters_orig_queue_id ON dead_letters (original_queue, id) INCLUDE (status);
DROP INDEX dead_letters_fingerprint;
CREATE INDEX dead_letters_fingerprint ON dead_letters (error_fingerprint, status, id) WHERE {NOT_PENDING};
CREATE INDEX dead_letters_fingerprint_id ON dead_letters (error_fingerprint, id) INCLUDE (status);"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_postgres_and_only_other_statuses_carry_the_predicate() {
        assert!(carries_not_pending(Dialect::Postgres, "SKIPPED"));
        assert!(!carries_not_pending(Dialect::Postgres, "PENDING"));
        assert!(!carries_not_pending(Dialect::Sqlite, "SKIPPED"));
        assert_eq!(v18(Dialect::Sqlite), "SELECT 1");
        assert_eq!(v18(Dialect::Postgres).matches(NOT_PENDING).count(), 3);
    }
}
