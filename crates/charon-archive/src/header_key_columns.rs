//! Migration 25 (lead, stop 42; docs/archive.md "Migration 25" and "Twenty-seventh round"): the
//! record's other group-key columns — `vhost`, `original_exchange`, `reason`,
//! `error_fingerprint`, `content_type` — beside its rows in the exact header index, next to
//! migration 22's `status`, `queue`, `original_queue` and migration 24's `created_at`. With them
//! every group-key column is in the rows ([`crate::header_columns::COLUMNS`]): a list or
//! `/groups` of one `header.NAME=value` term, terms of any group-key columns and an API user's
//! vhost limit is counted, paged and grouped from the header's index range alone — the default
//! `/groups?by=original_queue,reason,error_fingerprint,status&header.…` too, which read the
//! error-text copy for every header match before (117–181 ms on PostgreSQL over 1M records,
//! stop 41).
//!
//! **Kept exact** as migration 22's columns: both indexers write them with the row
//! ([`crate::header_columns::fill_columns`]) and the trigger, replaced here, rewrites the rows
//! when any of the record's columns in them changes (the archive itself changes only `status`;
//! the others only a user's SQL). On PostgreSQL they are `INCLUDE` columns of the primary key, as
//! migration 24's `created_at` is, so the plans' scans stay index-only.

use crate::sql::Dialect;

/// The migration's version.
pub const VERSION: i64 = 25;

/// The columns this migration adds.
pub const ADDED: &[&str] = &[
    "vhost",
    "original_exchange",
    "reason",
    "error_fingerprint",
    "content_type",
];

/// Every column of the record a header row holds after this migration, in the rows' order.
const ALL: &[&str] = &[
    "status",
    "queue",
    "original_queue",
    "created_at",
    "vhost",
    "original_exchange",
    "reason",
    "error_fingerprint",
    "content_type",
];

/// Each column of [`ALL`] rendered by `f`, joined by `sep`.
fn each(sep: &str, f: impl Fn(&str) -> String) -> String {
    ALL.iter().map(|c| f(c)).collect::<Vec<_>>().join(sep)
}

/// SQLite: the columns added (in the `WITHOUT ROWID` row), filled from the records, and the
/// trigger replaced by one that follows every column of the rows.
fn sqlite() -> String {
    let add: String = ADDED
        .iter()
        .map(|c| format!("ALTER TABLE dead_letter_search_header ADD COLUMN {c} TEXT;\n"))
        .collect();
    let fill = ADDED
        .iter()
        .map(|c| format!("{c} = d.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "{add}UPDATE dead_letter_search_header AS h SET {fill} FROM dead_letters AS d WHERE d.id = h.id;
DROP TRIGGER dead_letter_search_header_keys;
CREATE TRIGGER dead_letter_search_header_keys AFTER UPDATE OF {list} ON dead_letters
WHEN {changed} BEGIN
    UPDATE dead_letter_search_header SET {set} WHERE id = new.id;
END;
",
        list = ALL.join(", "),
        changed = each(" OR ", |c| format!("old.{c} IS NOT new.{c}")),
        set = each(", ", |c| format!("{c} = new.{c}")),
    )
}

/// PostgreSQL: the table copied with the columns, as migrations 22 and 24 did (users' writes to
/// `dead_letters` wait), its primary key `INCLUDE`ing every column, and the statement trigger's
/// function replaced by one that also rewrites the new columns. The opener vacuums the copy
/// ([`crate::schema`]).
fn postgres() -> String {
    let cols = each(",\n    ", |c| {
        if c == "created_at" {
            "created_at BIGINT".to_string()
        } else {
            format!("{c} TEXT COLLATE \"C\"")
        }
    });
    format!(
        "LOCK TABLE dead_letters IN SHARE MODE;
CREATE TABLE dead_letter_search_header_v25 (
    name  TEXT COLLATE \"C\" NOT NULL,
    value TEXT COLLATE \"C\" NOT NULL,
    id    BIGINT NOT NULL,
    {cols}
);
INSERT INTO dead_letter_search_header_v25 (name, value, id, {list})
    SELECT h.name, h.value, h.id, {d_list}
    FROM dead_letter_search_header AS h JOIN dead_letters AS d ON d.id = h.id;
DROP TABLE dead_letter_search_header;
ALTER TABLE dead_letter_search_header_v25 RENAME TO dead_letter_search_header;
ALTER TABLE dead_letter_search_header ADD CONSTRAINT dead_letter_search_header_pkey
    PRIMARY KEY (name, value, id) INCLUDE ({list});
CREATE INDEX dead_letter_search_header_id ON dead_letter_search_header (id);
CREATE OR REPLACE FUNCTION dead_letter_search_header_keys() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    UPDATE dead_letter_search_header AS h
        SET {set}
        FROM dead_letter_search_header_new AS n
        WHERE h.id = n.id AND ({changed});
    RETURN NULL;
END $f$;
ANALYZE dead_letter_search_header;
",
        list = ALL.join(", "),
        d_list = each(", ", |c| format!("d.{c}")),
        set = each(", ", |c| format!("{c} = n.{c}")),
        changed = each(" OR ", |c| format!("h.{c} IS DISTINCT FROM n.{c}")),
    )
}

/// Migration 25 for dialect `d`.
pub fn v25(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => sqlite(),
        Dialect::Postgres => postgres(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_column_is_followed_and_included() {
        let cols = crate::header_columns::COLUMNS;
        for c in cols {
            assert!(ALL.contains(c), "{c} in the rows");
        }
        assert_eq!(ALL.len(), cols.len() + 1, "the columns and created_at");
        let s = v25(Dialect::Sqlite);
        let p = v25(Dialect::Postgres);
        for c in ALL {
            assert!(s.contains(&format!("old.{c} IS NOT new.{c}")), "{c}");
            assert!(p.contains(&format!("h.{c} IS DISTINCT FROM n.{c}")), "{c}");
        }
        assert!(p.contains(&format!("INCLUDE ({})", ALL.join(", "))));
    }
}
