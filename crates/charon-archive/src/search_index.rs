//! Migration 7: the trigram search index behind the `error`, `body` and `header.NAME` filters
//! (SQLite: FTS5; PostgreSQL: a side table with pg_trgm indexes; docs/archive.md "Migration 7").
//! What it holds, and the filter conditions that read it.
//!
//! The index is filled behind the writer by [`crate::indexer`], never inside the archiver's
//! transaction. A filter on it is exact: its candidates are the index's matches among the records
//! up to the watermark, plus every record above the watermark and every record the index does not
//! cover (`dead_letter_search_scan`); the filter's own predicate then runs on those candidates.

use serde_json::{Value, json};

use crate::error::ArchiveError;
use crate::sql::{Conn, Dialect, Param};

/// Migration 7 on SQLite: three contentless trigram FTS5 tables (one per text, `detail=none`:
/// rowids only), the watermark, the records the index does not cover, and the triggers that keep
/// it right when a record is edited or deleted (none on INSERT: ingest is untouched).
pub const V7_SQLITE: &str = "
CREATE VIRTUAL TABLE dead_letter_search_error USING fts5(text, content='', contentless_delete=1, tokenize='trigram case_sensitive 1', detail=none);
CREATE VIRTUAL TABLE dead_letter_search_body USING fts5(text, content='', contentless_delete=1, tokenize='trigram case_sensitive 1', detail=none);
CREATE VIRTUAL TABLE dead_letter_search_headers USING fts5(text, content='', contentless_delete=1, tokenize='trigram case_sensitive 1', detail=none);
CREATE TABLE dead_letter_search_state (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    watermark BIGINT NOT NULL,
    indexed_records BIGINT NOT NULL DEFAULT 0,
    indexed_bytes BIGINT NOT NULL DEFAULT 0
);
INSERT INTO dead_letter_search_state (one, watermark) VALUES (1, 0);
CREATE TABLE dead_letter_search_scan (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL
);
CREATE TRIGGER dead_letter_search_delete AFTER DELETE ON dead_letters
WHEN old.id <= (SELECT watermark FROM dead_letter_search_state) BEGIN
    UPDATE dead_letter_search_state SET indexed_bytes = indexed_bytes - ({OLD_SIZE})
        WHERE NOT EXISTS (SELECT 1 FROM dead_letter_search_scan WHERE id = old.id);
    DELETE FROM dead_letter_search_error WHERE rowid = old.id;
    DELETE FROM dead_letter_search_body WHERE rowid = old.id;
    DELETE FROM dead_letter_search_headers WHERE rowid = old.id;
    DELETE FROM dead_letter_search_scan WHERE id = old.id;
END;
CREATE TRIGGER dead_letter_search_edit AFTER UPDATE OF headers, payload, error_message, error_stacktrace ON dead_letters
WHEN old.id <= (SELECT watermark FROM dead_letter_search_state) BEGIN
    UPDATE dead_letter_search_state SET indexed_bytes = indexed_bytes - ({OLD_SIZE})
        WHERE NOT EXISTS (SELECT 1 FROM dead_letter_search_scan WHERE id = old.id);
    DELETE FROM dead_letter_search_error WHERE rowid = old.id;
    DELETE FROM dead_letter_search_body WHERE rowid = old.id;
    DELETE FROM dead_letter_search_headers WHERE rowid = old.id;
    INSERT OR REPLACE INTO dead_letter_search_scan (id, kind) VALUES (old.id, 'edited');
END;
";

/// Migration 7 on PostgreSQL: a side table with the three texts per indexed record, GIN
/// `gin_trgm_ops` indexes on them when `pg_trgm` can be created (else a warning, and the filters
/// still answer exactly, through the side table without an index), the same state and scan
/// tables, and one row trigger for deletes and edits.
pub const V7_POSTGRES: &str = "
CREATE TABLE dead_letter_search_state (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    watermark BIGINT NOT NULL,
    indexed_records BIGINT NOT NULL DEFAULT 0,
    indexed_bytes BIGINT NOT NULL DEFAULT 0
);
INSERT INTO dead_letter_search_state (one, watermark) VALUES (1, 0);
CREATE TABLE dead_letter_search_scan (id BIGINT PRIMARY KEY, kind TEXT NOT NULL);
CREATE TABLE dead_letter_search (id BIGINT PRIMARY KEY, error TEXT NOT NULL, body TEXT NOT NULL, headers TEXT NOT NULL);
DO $$ BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
    CREATE INDEX dead_letter_search_error ON dead_letter_search USING gin (error gin_trgm_ops);
    CREATE INDEX dead_letter_search_body ON dead_letter_search USING gin (body gin_trgm_ops);
    CREATE INDEX dead_letter_search_headers ON dead_letter_search USING gin (headers gin_trgm_ops);
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'charon archive: pg_trgm unavailable (%); the text filters scan', SQLERRM;
END $$;
CREATE FUNCTION dead_letter_search_forget() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    IF OLD.id <= (SELECT watermark FROM dead_letter_search_state) THEN
        UPDATE dead_letter_search_state SET indexed_bytes = indexed_bytes - ({OLD_SIZE})
            WHERE NOT EXISTS (SELECT 1 FROM dead_letter_search_scan WHERE id = OLD.id);
        DELETE FROM dead_letter_search WHERE id = OLD.id;
        IF TG_OP = 'DELETE' THEN
            DELETE FROM dead_letter_search_scan WHERE id = OLD.id;
        ELSE
            INSERT INTO dead_letter_search_scan (id, kind) VALUES (OLD.id, 'edited') ON CONFLICT (id) DO NOTHING;
        END IF;
    END IF;
    RETURN NULL;
END $f$;
CREATE TRIGGER dead_letter_search_delete AFTER DELETE ON dead_letters
    FOR EACH ROW EXECUTE FUNCTION dead_letter_search_forget();
CREATE TRIGGER dead_letter_search_edit AFTER UPDATE OF headers, payload, error_message, error_stacktrace ON dead_letters
    FOR EACH ROW EXECUTE FUNCTION dead_letter_search_forget();
";

/// Migration 7 for dialect `d`.
pub fn v7(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => V7_SQLITE.replace("{OLD_SIZE}", &size_sql(d, "old.")),
        Dialect::Postgres => V7_POSTGRES.replace("{OLD_SIZE}", &size_sql(d, "OLD.")),
    }
}

/// What a record's index rows are counted as against `archive_max_bytes` (`{R}`: the row
/// prefix): the bytes of the texts it indexes (body, headers as JSON, error message and stack
/// trace). The trigram index of a text measured about its own size (1M records: 0.99 for the
/// errors, 0.86 for the headers; less for bodies that repeat), so this is an upper estimate.
pub const SIZE: &str = "{R}payload_bytes + length(CAST({R}headers AS BLOB)) + COALESCE(length(CAST({R}error_message AS BLOB)), 0) + COALESCE(length(CAST({R}error_stacktrace AS BLOB)), 0)";

/// [`SIZE`] in dialect `d` for row prefix `r` (`old.`, or `""`).
pub fn size_sql(d: Dialect, r: &str) -> String {
    match d {
        Dialect::Sqlite => SIZE.replace("{R}", r),
        Dialect::Postgres => format!(
            "{r}payload_bytes + octet_length({r}headers) + COALESCE(octet_length({r}error_message), 0) + COALESCE(octet_length({r}error_stacktrace), 0)"
        ),
    }
}

/// A record's weight against `archive_max_bytes`: its payload, plus its index rows' bytes
/// ([`SIZE`]) when it is indexed.
pub fn cap_weight(d: Dialect) -> String {
    format!(
        "payload_bytes + CASE WHEN id <= (SELECT watermark FROM dead_letter_search_state) \
         AND id NOT IN (SELECT id FROM dead_letter_search_scan) THEN {} ELSE 0 END",
        size_sql(d, "")
    )
}

/// The bytes the index is counted as (the sum of [`SIZE`] over indexed records).
pub fn counted_bytes(c: &mut dyn Conn) -> Result<i64, ArchiveError> {
    Ok(
        c.query("SELECT indexed_bytes FROM dead_letter_search_state", &[])?
            .first()
            .and_then(|r| r.first())
            .map_or(0, |v| v.int()),
    )
}

/// The headers of a record as migration 7 indexed them (up to the thirteenth round): one
/// `NAME=value` line per header, the value rendered as the `header.NAME` filter compares it
/// ([`Dialect::json_field`]).
pub const HEADER_LINES: &str = "(SELECT group_concat(j.key || '=' || CASE j.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE CAST(j.value AS TEXT) END, char(10)) FROM json_each(headers) AS j)";

/// The headers of a record as the indexer indexes them since the thirteenth round (SQLite): the
/// [`HEADER_LINES`] whose name and value together are over [`crate::header_index::MAX_BYTES`]
/// bytes, the ones the exact header index (migration 9) leaves out. A `header.NAME=value`
/// filter reads the trigram index only for such a pair (`header_index::exact_ids` answers every
/// shorter one), and a record matching it has that very line, so the shorter lines were never
/// read: leaving them out changes no result and halves the bench's header text (docs/archive.md
/// "Thirteenth round, ingest"). Records indexed before keep all their lines (a superset: exact).
pub fn long_header_lines() -> String {
    const V: &str = "CASE j.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE CAST(j.value AS TEXT) END";
    format!(
        "(SELECT group_concat(j.key || '=' || {V}, char(10)) FROM json_each(headers) AS j \
         WHERE length(CAST(j.key AS BLOB)) + length(CAST({V} AS BLOB)) > {})",
        crate::header_index::MAX_BYTES
    )
}

/// Which text of a record a filter searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Error message and stack trace.
    Error,
    /// The body (decoded lossily when it is not UTF-8).
    Body,
    /// The `NAME=value` lines.
    Headers,
}

impl Field {
    /// Its FTS5 table (SQLite).
    pub(crate) fn table(self) -> &'static str {
        match self {
            Field::Error => "dead_letter_search_error",
            Field::Body => "dead_letter_search_body",
            Field::Headers => "dead_letter_search_headers",
        }
    }
}

/// The FTS5 query for `needle`: each of its trigrams (overlapping windows of three characters) as
/// a quoted token, all required; `None` when it has fewer than three characters (a scan then).
pub fn trigram_query(needle: &str) -> Option<String> {
    let chars: Vec<char> = needle.chars().collect();
    // NUL is indexed as U+FFFD (see `indexer`): a needle with it scans.
    if chars.len() < 3 || chars.contains(&'\0') {
        return None;
    }
    let mut q = String::new();
    for w in chars.windows(3) {
        push_token(&mut q, w);
    }
    Some(q)
}

/// Appends trigram `w` to FTS5 query `q` as a quoted token (`"` doubled), after a space.
pub(crate) fn push_token(q: &mut String, w: &[char]) {
    if !q.is_empty() {
        q.push(' ');
    }
    q.push('"');
    for ch in w {
        if *ch == '"' {
            q.push('"');
        }
        q.push(*ch);
    }
    q.push('"');
}

/// The candidate condition (`id IN (…)`) for a filter on `field` containing `needle`, and its
/// parameter; `None` when the index cannot narrow it (a needle under 3 characters, or with a NUL).
pub fn candidates(d: Dialect, field: Field, needle: &str) -> Option<(String, Param)> {
    candidates_with(d, field, needle, None)
}

/// [`candidates`], on SQLite with the FTS5 query `fts` instead of every trigram of the needle
/// when given (a subset of its trigrams: [`crate::rare_trigrams::query`]).
pub fn candidates_with(
    d: Dialect,
    field: Field,
    needle: &str,
    fts: Option<String>,
) -> Option<(String, Param)> {
    if d == Dialect::Postgres && field == Field::Headers {
        // Migration 8: the exact line through its array index.
        if let Some((sub, p)) = crate::header_lines::pg_matches(needle) {
            return Some((pg_candidates(&sub), p));
        }
    }
    let q = trigram_query(needle)?;
    if d == Dialect::Postgres {
        let col = match field {
            Field::Error => "error",
            Field::Body => "body",
            Field::Headers => "headers",
        };
        let pattern = like_pattern(needle);
        // As an array (computed once) rather than `IN (…)`: with `IN` the planner walked the
        // primary key backwards for a page (600 ms for one match in 1M records; 32 ms so).
        return Some((
            pg_candidates(&format!(
                "SELECT id FROM dead_letter_search WHERE {col} LIKE ?"
            )),
            Param::from(pattern),
        ));
    }
    let t = field.table();
    Some((
        format!(
            "id IN (SELECT rowid FROM {t} WHERE {t} MATCH ? \
             UNION ALL SELECT id FROM dead_letters WHERE id > (SELECT watermark FROM dead_letter_search_state) \
             UNION ALL SELECT id FROM dead_letter_search_scan)"
        ),
        Param::from(fts.unwrap_or(q)),
    ))
}

/// `%needle%` for LIKE, its `%`, `_` and `\\` escaped.
fn like_pattern(needle: &str) -> String {
    let mut pattern = String::from("%");
    for ch in needle.chars() {
        if matches!(ch, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(ch);
    }
    pattern.push('%');
    pattern
}

/// PostgreSQL: the candidate condition of the side table's matches `sub` (one parameter).
fn pg_candidates(sub: &str) -> String {
    format!(
        "id = ANY(ARRAY({sub} \
         UNION ALL SELECT id FROM dead_letters WHERE id > (SELECT watermark FROM dead_letter_search_state) \
         UNION ALL SELECT id FROM dead_letter_search_scan))"
    )
}

/// The index's state for `/api/dead-letters/stats`: its watermark, the records indexed
/// so far (re-indexed edits counted again), the text bytes indexed, and the edited records
/// waiting to be indexed again.
pub fn stats(c: &mut dyn Conn) -> Result<Option<Value>, ArchiveError> {
    let rows = c.query(
        "SELECT watermark, indexed_records, indexed_bytes, (SELECT COUNT(*) FROM dead_letter_search_scan), \
         (SELECT COALESCE(MAX(id), 0) FROM dead_letters) FROM dead_letter_search_state",
        &[],
    )?;
    Ok(rows.first().map(|r| {
        json!({"watermark": r[0].int(), "indexed_records": r[1].int(), "indexed_bytes": r[2].int(),
               "edited_pending": r[3].int(), "caught_up": r[0].int() >= r[4].int() && r[3].int() == 0})
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigrams_of_a_needle() {
        assert_eq!(trigram_query("ab"), None);
        assert_eq!(trigram_query("é€"), None);
        assert_eq!(trigram_query("abcd").as_deref(), Some("\"abc\" \"bcd\""));
        assert_eq!(trigram_query("a\"b").as_deref(), Some("\"a\"\"b\""));
        assert_eq!(trigram_query("é€x").as_deref(), Some("\"é€x\""));
    }
}
