//! Migration 8 (docs/archive.md "Migration 8"): the `header.NAME=value` filter through an exact
//! index on PostgreSQL. The search index's side table holds a record's headers as `NAME=value`
//! lines (migration 7); a GIN index over those lines as an array finds the records with the line
//! `NAME=value` itself, where the trigram index matched every record that has the header at all
//! and re-checked each one's text (1.3 s for 50,100 matches over 1,000,000 records). On SQLite a
//! no-op (its FTS5 trigram index has no exact line form; see docs/archive.md "Migration 8").

use crate::sql::{Dialect, Param};

/// Migration 8 on PostgreSQL: the lines of `dead_letter_search.headers` as a `text[]`, GIN
/// (`array_ops`, built in: no extension).
pub const V8_POSTGRES: &str = "CREATE INDEX dead_letter_search_header_lines ON dead_letter_search \
    USING gin (string_to_array(headers, E'\\n'));";

/// Migration 8 on SQLite: nothing (a statement that changes nothing).
pub const V8_SQLITE: &str = "SELECT 1;";

/// Migration 8 for dialect `d`.
pub fn v8(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => V8_SQLITE.to_string(),
        Dialect::Postgres => V8_POSTGRES.to_string(),
    }
}

/// PostgreSQL: the records of the side table with the header line `line` (`NAME=value`), as a
/// subquery through [`V8_POSTGRES`]'s index, and its parameter; `None` when the line holds a
/// newline (it spans lines) or a NUL (indexed as U+FFFD): those go through the trigrams or scan.
/// Exact per line, so a superset of the records whose header `NAME` is `value` (another
/// header's value may hold the same line after a newline: the filter's own condition drops it).
pub fn pg_matches(line: &str) -> Option<(String, Param)> {
    if line.contains('\n') || line.contains('\0') {
        return None;
    }
    Some((
        "SELECT id FROM dead_letter_search WHERE string_to_array(headers, E'\\n') @> ARRAY[CAST(? AS TEXT)]".into(),
        Param::from(line),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_that_span_or_hold_nul_are_not_exact() {
        assert!(pg_matches("x-a=b").is_some());
        assert!(pg_matches("x-a=").is_some());
        assert!(pg_matches("x-a=b\nc").is_none());
        assert!(pg_matches("x-a=b\0").is_none());
    }
}
