//! Migration 12 (branch `q9s`): a narrow copy of every indexed record's error message and stack
//! trace, `dead_letter_error_text`, and the `error` filter's condition, count and page read from
//! it (docs/archive.md "Migration 12" and "Eighteenth round").
//!
//! The `error` filter's exact check used to run on `dead_letters`: every candidate the trigram
//! index gave was read from the table (a ~1.5 KB row, its 16 KiB leaf page on SQLite, its heap
//! page on PostgreSQL) for `instr`/`strpos` on its two columns. For a needle matching one record
//! in ten (`cause 5` over 1,000,000) that touched every page of the table: 2.5 s on SQLite, 1.8 s
//! on PostgreSQL. The copy holds the same two columns, byte for byte, of every record with an id
//! at or below the search index's watermark (~60 B a row for the bench's texts), and the check
//! runs on it with the very same expression; the records above the watermark (not yet indexed)
//! are checked on `dead_letters` as before.
//!
//! **Kept exact by triggers, not by the writer or the indexer** (nothing on the insert path, no
//! change to either indexer):
//! - the indexer's `UPDATE dead_letter_search_state SET watermark = …` copies the records between
//!   the old and the new watermark (`INSERT … SELECT`, replacing a row that exists), in the
//!   indexer's own transaction;
//! - a DELETE of a record deletes its row; an UPDATE of `error_message` or `error_stacktrace`
//!   (the API never edits them; a user's SQL may) updates it.
//!
//! So the copy has, at every commit, exactly one row per live record at or below the watermark,
//! with that record's two columns. The condition is
//! `id IN (SELECT id FROM copy WHERE <candidates> AND <check on the copy> UNION ALL SELECT id FROM
//! dead_letters WHERE id > watermark AND <check on the record>)`: it names no column of the outer
//! `dead_letters`, so a count or page combined with another term (`status = ?`) reads that term's
//! covering index per match instead of the record. The candidates are SQLite's FTS5 matches (the
//! needle's rarest trigrams, [`crate::rare_trigrams`]) plus the edited records
//! (`dead_letter_search_scan`, whose FTS5 rows are gone while their copy is current), or on
//! PostgreSQL a `LIKE` on the copy's `error_grams` that migration 29's trigram index answers
//! (`crate::error_grams`; migration 12's indexes on the two columns before it); a needle the index
//! cannot narrow (under 3 characters, or with a NUL on SQLite) checks every row of the copy.

use crate::error::ArchiveError;
use crate::search_index::{Field, trigram_query};
use crate::sql::{Conn, Dialect, Param};

/// Migration 12 on SQLite: the copy, filled from the records already indexed, and its triggers.
pub const V12_SQLITE: &str = "
CREATE TABLE dead_letter_error_text (
    id INTEGER PRIMARY KEY,
    error_message TEXT,
    error_stacktrace TEXT
);
INSERT INTO dead_letter_error_text (id, error_message, error_stacktrace)
    SELECT id, error_message, error_stacktrace FROM dead_letters
    WHERE id <= (SELECT watermark FROM dead_letter_search_state);
CREATE TRIGGER dead_letter_error_text_fill AFTER UPDATE OF watermark ON dead_letter_search_state
WHEN new.watermark > old.watermark BEGIN
    INSERT OR REPLACE INTO dead_letter_error_text (id, error_message, error_stacktrace)
        SELECT id, error_message, error_stacktrace FROM dead_letters
        WHERE id > old.watermark AND id <= new.watermark;
END;
CREATE TRIGGER dead_letter_error_text_delete AFTER DELETE ON dead_letters BEGIN
    DELETE FROM dead_letter_error_text WHERE id = old.id;
END;
CREATE TRIGGER dead_letter_error_text_edit AFTER UPDATE OF error_message, error_stacktrace ON dead_letters BEGIN
    UPDATE dead_letter_error_text SET error_message = new.error_message,
        error_stacktrace = new.error_stacktrace WHERE id = new.id;
END;
";

/// Migration 12 on PostgreSQL: the same copy and triggers (the delete one per statement, with
/// its transition table), trigram indexes on the copy's two columns when `pg_trgm` is there (else
/// a warning: the filter still answers exactly, reading the whole copy), and the side table's
/// `error` trigram index dropped (nothing reads it any more: one GIN insert less per indexed
/// record).
pub const V12_POSTGRES: &str = "
CREATE TABLE dead_letter_error_text (
    id BIGINT PRIMARY KEY,
    error_message TEXT,
    error_stacktrace TEXT
);
INSERT INTO dead_letter_error_text (id, error_message, error_stacktrace)
    SELECT id, error_message, error_stacktrace FROM dead_letters
    WHERE id <= (SELECT watermark FROM dead_letter_search_state);
CREATE FUNCTION dead_letter_error_text_fill() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO dead_letter_error_text (id, error_message, error_stacktrace)
        SELECT id, error_message, error_stacktrace FROM dead_letters
        WHERE id > OLD.watermark AND id <= NEW.watermark
    ON CONFLICT (id) DO UPDATE SET error_message = EXCLUDED.error_message,
        error_stacktrace = EXCLUDED.error_stacktrace;
    RETURN NULL;
END $f$;
CREATE TRIGGER dead_letter_error_text_fill AFTER UPDATE OF watermark ON dead_letter_search_state
    FOR EACH ROW WHEN (NEW.watermark > OLD.watermark) EXECUTE FUNCTION dead_letter_error_text_fill();
CREATE FUNCTION dead_letter_error_text_delete() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    DELETE FROM dead_letter_error_text e USING dead_letter_error_text_old o WHERE e.id = o.id;
    RETURN NULL;
END $f$;
CREATE TRIGGER dead_letter_error_text_delete AFTER DELETE ON dead_letters
    REFERENCING OLD TABLE AS dead_letter_error_text_old
    FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_error_text_delete();
CREATE FUNCTION dead_letter_error_text_edit() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    UPDATE dead_letter_error_text SET error_message = NEW.error_message,
        error_stacktrace = NEW.error_stacktrace WHERE id = NEW.id;
    RETURN NULL;
END $f$;
CREATE TRIGGER dead_letter_error_text_edit AFTER UPDATE OF error_message, error_stacktrace ON dead_letters
    FOR EACH ROW EXECUTE FUNCTION dead_letter_error_text_edit();
DO $$ BEGIN
    CREATE INDEX dead_letter_error_text_message ON dead_letter_error_text USING gin (error_message gin_trgm_ops);
    CREATE INDEX dead_letter_error_text_stacktrace ON dead_letter_error_text USING gin (error_stacktrace gin_trgm_ops);
    DROP INDEX IF EXISTS dead_letter_search_error;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'charon archive: no trigram index on dead_letter_error_text (%); the error filter reads the whole copy', SQLERRM;
END $$;
ANALYZE dead_letter_error_text;
";

/// Migration 12 for dialect `d`.
pub fn v12(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => V12_SQLITE.to_string(),
        Dialect::Postgres => V12_POSTGRES.to_string(),
    }
}

/// An `error` filter on the copy: the ids it finds among the records at or below the watermark
/// (`SELECT e.id FROM dead_letter_error_text AS e WHERE …`, never another table's row), and the
/// condition on `dead_letters` of the others (above the watermark) that match, each with its
/// parameters.
pub struct Parts {
    /// `SELECT e.id FROM dead_letter_error_text AS e WHERE …`.
    pub indexed: String,
    /// Its `WHERE` condition alone (over the alias `e` of the copy; the same parameters).
    pub indexed_where: String,
    /// Its parameters.
    pub indexed_params: Vec<Param>,
    /// The condition on `dead_letters` of the matching records above the watermark.
    pub rest: String,
    /// Its parameters.
    pub rest_params: Vec<Param>,
}

/// The parts of an `error` filter on `needle`; `fts` (SQLite) is the FTS5 query of its rarest
/// trigrams ([`crate::rare_trigrams::query`]; `None`: every trigram). `None` on PostgreSQL for a
/// needle with a NUL (its text cannot hold one: the filter then runs as before migration 12).
pub fn parts(d: Dialect, needle: &str, fts: Option<String>) -> Option<Parts> {
    parts_within(d, needle, fts, None)
}

/// [`parts`] whose SQLite candidates are only the search index's rowids among the records of
/// `within` (a condition on `dead_letters` with its parameters, read from an index of its
/// columns: `crate::keyed_candidates`).
pub fn parts_within(
    d: Dialect,
    needle: &str,
    fts: Option<String>,
    within: Option<(String, Vec<Param>)>,
) -> Option<Parts> {
    if d == Dialect::Postgres && needle.contains('\0') {
        return None;
    }
    let check = |p: &str| {
        format!(
            "({} OR {})",
            d.contains(&format!("{p}error_message")),
            d.contains(&format!("{p}error_stacktrace"))
        )
    };
    let mut indexed_params = Vec::new();
    let cand = match d {
        Dialect::Sqlite => match fts.or_else(|| trigram_query(needle)) {
            Some(q) => {
                let t = Field::Error.table();
                let rowids = format!(
                    "SELECT rowid FROM {t} WHERE {t} MATCH ? UNION ALL SELECT id FROM dead_letter_search_scan"
                );
                match within {
                    // `+id`: the key's index range is the loop, each id looked up among the
                    // rowids (as `id IN` SQLite looked each rowid up as a record instead).
                    Some((w, wp)) => {
                        indexed_params.extend(wp);
                        indexed_params.push(Param::from(q));
                        format!(
                            "e.id IN (SELECT id FROM dead_letters WHERE {w} AND +id IN ({rowids})) AND "
                        )
                    }
                    None => {
                        indexed_params.push(Param::from(q));
                        format!("e.id IN ({rowids}) AND ")
                    }
                }
            }
            None => String::new(),
        },
        // Migration 29's trigram index (`crate::error_grams`).
        Dialect::Postgres => format!(
            "e.error_grams LIKE {} AND ",
            crate::error_grams::pattern(needle)
        ),
    };
    indexed_params.push(Param::from(needle));
    indexed_params.push(Param::from(needle));
    let indexed_where = format!("{cand}{}", check("e."));
    Some(Parts {
        indexed: format!("SELECT e.id FROM dead_letter_error_text AS e WHERE {indexed_where}"),
        indexed_where,
        indexed_params,
        rest: match d {
            Dialect::Sqlite => format!(
                "id > (SELECT watermark FROM dead_letter_search_state) AND {}",
                check("")
            ),
            // The ids as an array first: `id > (SELECT watermark …)` alone is planned for
            // ~185,000 rows over 1M (the watermark is unknown at planning) as a parallel index
            // scan whose workers' start cost 50–60 ms of a count that finds nothing.
            Dialect::Postgres => format!(
                "id = ANY(ARRAY(SELECT id FROM dead_letters WHERE id > (SELECT watermark FROM dead_letter_search_state))) AND {}",
                check("")
            ),
        },
        rest_params: vec![Param::from(needle), Param::from(needle)],
    })
}

/// The needle's check alone on the copy's row (alias `e`), without the index's candidates, and
/// its parameters (for a bounded walk over the copy's newest rows, `crate::text_walk`). `None`
/// where [`parts`] is.
pub fn check_on_copy(d: Dialect, needle: &str) -> Option<(String, Vec<Param>)> {
    if d == Dialect::Postgres && needle.contains('\0') {
        return None;
    }
    Some((
        format!(
            "({} OR {})",
            d.contains("e.error_message"),
            d.contains("e.error_stacktrace")
        ),
        vec![Param::from(needle), Param::from(needle)],
    ))
}

/// The filter's condition on `dead_letters` (`id IN (…)`, no other column of the record) and its
/// parameters.
pub fn condition(d: Dialect, needle: &str, fts: Option<String>) -> Option<(String, Vec<Param>)> {
    let p = parts(d, needle, fts)?;
    let sub = format!(
        "{} UNION ALL SELECT id FROM dead_letters WHERE {}",
        p.indexed, p.rest
    );
    let cond = match d {
        Dialect::Sqlite => format!("id IN ({sub})"),
        // An array computed once: with `IN` the planner may walk the primary key backwards
        // testing every record (see `search_index::candidates_with`).
        Dialect::Postgres => format!("id = ANY(ARRAY({sub}))"),
    };
    let mut params = p.indexed_params;
    params.extend(p.rest_params);
    Some((cond, params))
}

/// The `total` of a filter of one `error` term: the copy's matches plus the matching records
/// above the watermark, without touching another record.
pub fn count(d: Dialect, needle: &str, fts: Option<String>) -> Option<(String, Vec<Param>)> {
    let p = parts(d, needle, fts)?;
    let sql = format!(
        "SELECT (SELECT COUNT(*) FROM ({}) AS m) + (SELECT COUNT(*) FROM dead_letters WHERE {})",
        p.indexed, p.rest
    );
    let mut params = p.indexed_params;
    params.extend(p.rest_params);
    Some((sql, params))
}

/// [`count`] with a cap (`crate::total_cap`): each part counts at most `cap + 1` matches, so
/// a needle matching 100,000 records reads ~10,000 rows of the copy instead of all of them.
pub fn count_capped(
    d: Dialect,
    needle: &str,
    fts: Option<String>,
    cap: u64,
) -> Option<(String, Vec<Param>)> {
    use crate::total_cap::limited;
    let p = parts(d, needle, fts)?;
    let sql = format!(
        "SELECT {} + {}",
        limited(&p.indexed, cap),
        limited(
            &format!("SELECT id FROM dead_letters WHERE {}", p.rest),
            cap
        )
    );
    let mut params = p.indexed_params;
    params.extend(p.rest_params);
    Some((sql, params))
}

/// The ids of one page of a filter of one `error` term in id order (`desc`: newest first): the
/// first `reach` of the copy's matches and the first `reach` of the matching records above the
/// watermark, merged by the caller (`ops::list`'s index-page path).
pub fn page_ids(
    d: Dialect,
    needle: &str,
    fts: Option<String>,
    desc: bool,
    reach: u64,
) -> Option<(String, Vec<Param>)> {
    let p = parts(d, needle, fts)?;
    let dir = if desc { "DESC" } else { "ASC" };
    let sql = format!(
        "SELECT id FROM ({} ORDER BY e.id {dir} LIMIT {reach}) AS p \
         UNION ALL SELECT id FROM (SELECT id FROM dead_letters WHERE {} ORDER BY id {dir} LIMIT {reach}) AS q",
        p.indexed, p.rest
    );
    let mut params = p.indexed_params;
    params.extend(p.rest_params);
    Some((sql, params))
}

/// [`page_ids`] in time order (`desc`: `created_at DESC, id DESC`): the first `reach` of the
/// copy's matches by the copy's `created_at` (migration 13) and of the matching records above
/// the watermark, as `(id, created_at)` rows for the caller to order and page. The records above
/// the watermark sorted as `created_at + 0`: by `dead_letters_created`, SQLite walked the whole
/// index for the few records past the watermark (a rare needle's page 3.4 → 45 ms).
pub fn page_ids_by_time(
    d: Dialect,
    needle: &str,
    fts: Option<String>,
    desc: bool,
    reach: u64,
) -> Option<(String, Vec<Param>)> {
    let p = parts(d, needle, fts)?;
    let dir = if desc { "DESC" } else { "ASC" };
    let indexed = p
        .indexed
        .replacen("SELECT e.id FROM", "SELECT e.id, e.created_at FROM", 1);
    let sql = format!(
        "SELECT id, created_at FROM ({indexed} ORDER BY e.created_at {dir}, e.id {dir} LIMIT {reach}) AS p \
         UNION ALL SELECT id, created_at FROM (SELECT id, created_at FROM dead_letters WHERE {} \
         ORDER BY created_at + 0 {dir}, id {dir} LIMIT {reach}) AS q",
        p.rest
    );
    let mut params = p.indexed_params;
    params.extend(p.rest_params);
    Some((sql, params))
}

/// The FTS5 query of an `error` needle's rarest trigrams on connection `c` (SQLite), for
/// [`count`] and [`page_ids`].
pub fn fts_query(c: &mut dyn Conn, needle: &str) -> Result<Option<String>, ArchiveError> {
    crate::rare_trigrams::query(c, Field::Error, needle)
}
