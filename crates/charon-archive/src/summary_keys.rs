//! Migration 10 (docs/archive.md "Migration 10"): the group summary `dead_letter_groups` keyed
//! also by `content_type` and `original_exchange`, so that a list's `total` with those filters
//! and `/groups?by=content_type|original_exchange` read the summary instead of counting every
//! record (3.5 s on SQLite, 1.2 s on PostgreSQL over 1,000,000 records).
//!
//! Both columns are added to the table, the summary is counted again from the records with the
//! eight-column key ([`Keys::V10`]), and the triggers are created again with it (SQLite: the
//! insert trigger with migration 5's `WHEN NOT EXISTS` flag, the delete and update triggers with
//! migration 6's column lookups; PostgreSQL: the three trigger functions replaced, the statement
//! triggers unchanged). No index on `dead_letters` is added or changed: a removed bound is looked
//! up through the six-column index as before, the two new columns filtering its range.

use crate::ingest::SUMMARY_FLAG;
use crate::sql::Dialect;
use crate::summary::{
    Bounds, Keys, key_expr_of, postgres_add, postgres_remove_bodies, sqlite_add,
    sqlite_remove_triggers, sqlite_same_group_by_columns,
};

/// Migration 10, rendered for `d`.
pub fn v10(d: Dialect) -> String {
    let keys = Keys::V10;
    let flag = format!("SELECT 1 FROM archive_counters WHERE name = '{SUMMARY_FLAG}'");
    let cols = keys.list("");
    let refill = format!(
        "DELETE FROM dead_letter_groups;
INSERT INTO dead_letter_groups ({ins}) SELECT {k}, {cols}, COUNT(*), MIN(created_at), MAX(created_at), SUM(payload_bytes), MIN(error_message)
    FROM dead_letters GROUP BY {cols};",
        ins = keys.insert_cols(),
        k = key_expr_of(keys, ""),
    );
    match d {
        Dialect::Sqlite => format!(
            "ALTER TABLE dead_letter_groups ADD COLUMN content_type TEXT;
ALTER TABLE dead_letter_groups ADD COLUMN original_exchange TEXT;
{refill}
DROP TRIGGER dead_letter_groups_insert;
DROP TRIGGER dead_letter_groups_delete;
DROP TRIGGER dead_letter_groups_update;
CREATE TRIGGER dead_letter_groups_insert AFTER INSERT ON dead_letters WHEN NOT EXISTS ({flag}) BEGIN {ins} END;
{remove}",
            ins = sqlite_add(keys, "new"),
            remove = sqlite_remove_triggers(keys, sqlite_same_group_by_columns),
        ),
        Dialect::Postgres => {
            let (del, upd) = postgres_remove_bodies(keys, Bounds::KeyIndex);
            format!(
                "ALTER TABLE dead_letter_groups ADD COLUMN content_type TEXT, ADD COLUMN original_exchange TEXT;
{refill}
CREATE OR REPLACE FUNCTION dead_letter_groups_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF EXISTS ({flag}) THEN RETURN NULL; END IF; {ins} RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION dead_letter_groups_delete() RETURNS trigger LANGUAGE plpgsql AS $$ {del} $$;
CREATE OR REPLACE FUNCTION dead_letter_groups_update() RETURNS trigger LANGUAGE plpgsql AS $$ {upd} $$;
ANALYZE dead_letter_groups;",
                ins = postgres_add(keys, "new_rows AS r"),
            )
        }
    }
}
