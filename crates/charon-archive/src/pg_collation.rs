//! Migration 15 (`pg_collation`, twentieth round, docs/archive.md "Twentieth round (pg9u)"): on
//! PostgreSQL the archive's identifier columns — the ones its B-tree indexes, group keys, filters
//! and sorts compare — take `COLLATE "C"` (byte order). Before it they had the database's
//! collation (the machine's locale at `initdb`, e.g. `en_US.UTF-8`), under which every compare of
//! an index insert went through `strcoll` and PostgreSQL kept no abbreviated keys; SQLite's
//! `BINARY` collation already compares bytes, so after it both backends sort these columns alike.
//!
//! `ALTER COLUMN … TYPE TEXT COLLATE "C"` keeps the rows (text to text needs no rewrite) and
//! rebuilds every index over a changed column, expression indexes included (the group key's
//! expression then has collation "C" too: all its columns change together). Free text (bodies,
//! headers, error texts, notes) and `stable_key` (ing9u's, migration 14) keep their collation.
//! SQLite: nothing to do (the migration is recorded only).

use crate::sql::Dialect;

/// The columns migration 15 gives `COLLATE "C"`, per table.
pub const COLUMNS: &[(&str, &[&str])] = &[
    (
        "dead_letters",
        &[
            "vhost",
            "queue",
            "original_queue",
            "original_exchange",
            "reason",
            "error_fingerprint",
            "status",
            "message_id",
            "message_key",
            "correlation_id",
            "content_type",
        ],
    ),
    (
        "dead_letter_groups",
        &[
            "group_key",
            "vhost",
            "queue",
            "original_queue",
            "original_exchange",
            "reason",
            "error_fingerprint",
            "status",
            "content_type",
        ],
    ),
    (
        "dead_letter_error_text",
        &[
            "vhost",
            "queue",
            "original_queue",
            "reason",
            "error_fingerprint",
            "status",
        ],
    ),
    ("dead_letter_search_header", &["name", "value"]),
];

/// Migration 15's SQL for dialect `d` (one `ALTER TABLE` per table on PostgreSQL; a comment on
/// SQLite).
pub fn v15(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => {
            "-- migration 15: SQLite's BINARY collation already orders by bytes\n".into()
        }
        Dialect::Postgres => COLUMNS
            .iter()
            .map(|(table, cols)| {
                let alters: Vec<String> = cols
                    .iter()
                    .map(|c| format!("ALTER COLUMN {c} TYPE TEXT COLLATE \"C\""))
                    .collect();
                format!("ALTER TABLE {table} {};\n", alters.join(", "))
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_sql_names_every_column_once_and_not_the_stable_key() {
        let sql = v15(Dialect::Postgres);
        assert_eq!(sql.matches("ALTER TABLE").count(), COLUMNS.len());
        let n: usize = COLUMNS.iter().map(|(_, c)| c.len()).sum();
        assert_eq!(sql.matches("COLLATE \"C\"").count(), n);
        assert!(!sql.contains("stable_key"));
        assert!(!v15(Dialect::Sqlite).contains("ALTER"));
    }
}
