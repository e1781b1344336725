//! Migration 6 (docs/archive.md "Migration 6"): fewer and cheaper index B-trees for every
//! archived record.
//!
//! - `dead_letters_key` holds only the records whose key differs from their `message_id` (a
//!   `key_header` is set): without one the key *is* the message id, already indexed by
//!   `dead_letters_message_id`. The `key` filter looks in both ([`key_condition`]).
//! - SQLite: the group key's expression index `dead_letters_group_key` (the summary triggers'
//!   lookup of a removed group bound) becomes the plain column index `dead_letters_group`, and
//!   the delete/update triggers look bounds up through it: SQLite evaluated the key expression
//!   (five length-prefixed concatenations) for every inserted record. PostgreSQL keeps the
//!   expression index (its btree cannot search `IS NOT DISTINCT FROM`).

use crate::sql::Dialect;
use crate::summary::{Keys, sqlite_remove_triggers, sqlite_same_group_by_columns};

/// Migration 6, rendered for `d`.
pub fn v6(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => format!(
            "DROP INDEX dead_letters_key;
CREATE INDEX dead_letters_key ON dead_letters (message_key) WHERE message_key IS NOT message_id;
DROP TRIGGER dead_letter_groups_delete;
DROP TRIGGER dead_letter_groups_update;
DROP INDEX dead_letters_group_key;
CREATE INDEX dead_letters_group ON dead_letters (vhost, queue, original_queue, reason, error_fingerprint, status, created_at);
{triggers}",
            triggers = sqlite_remove_triggers(Keys::V3, sqlite_same_group_by_columns)
        ),
        Dialect::Postgres => "DROP INDEX dead_letters_key;
CREATE INDEX dead_letters_key ON dead_letters (message_key) WHERE message_key IS DISTINCT FROM message_id;"
            .into(),
    }
}

/// The `key` filter's condition (two parameters, both the key): a record whose key is its
/// message id is found through `dead_letters_message_id`, any other through the partial
/// `dead_letters_key`. As an id list, so that the planner looks the few matching ids up first
/// whatever else the filter names (as an `OR`, SQLite preferred walking another filter's index).
pub fn key_condition(d: Dialect) -> &'static str {
    match d {
        Dialect::Sqlite => {
            "id IN (SELECT id FROM dead_letters WHERE message_key = ? AND message_key IS NOT message_id \
             UNION ALL SELECT id FROM dead_letters WHERE message_id = ? AND message_key IS message_id)"
        }
        Dialect::Postgres => {
            "id IN (SELECT id FROM dead_letters WHERE message_key = ? AND message_key IS DISTINCT FROM message_id \
             UNION ALL SELECT id FROM dead_letters WHERE message_id = ? AND message_key IS NOT DISTINCT FROM message_id)"
        }
    }
}
