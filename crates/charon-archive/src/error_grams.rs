//! Migration 29 (lead, stop 45; docs/archive.md "Migration 29"): PostgreSQL's `error` needle
//! finds its candidates through trigrams that cross word boundaries, as SQLite's FTS5 trigram
//! tokenizer's do.
//!
//! `pg_trgm` splits a text into words (runs of letters and digits) and takes each word's
//! trigrams, padded with blanks: the separators between words are in no trigram. The needle
//! `cause 5` is then `cau`, `aus`, `use`, `se ` and `  5` — a word starting with 5 anywhere, which
//! one record in nine holds (`Order 5…`, `Order 51…`), so its candidates were the 100,200 matches
//! and ~110,000 records that hold `cause` and a `5…` word apart. Every one of those was read from
//! the heap to be rechecked (`Rows Removed by Index Recheck`), and the candidates of a key range
//! (`original_queue < 'orders-15'`, `crate::key_first_match`) were 38,930 such rows and no match.
//!
//! Here the copy carries `error_grams`, its message and stack trace with every character that is
//! not a letter or digit replaced by `q` (a stored generated column: a trigram recheck on an
//! expression evaluates it per candidate, 330 ms for 100,000). The text is then one word, and
//! `cause 5` is `causeq5`, whose trigram `eq5` only the matches hold. One GIN index over it,
//! with the key columns (`crate::copy_key_gin`), replaces migration 26's two; the needle's
//! pattern is [`pattern`]. The candidates stay a superset of the matches (a character maps to
//! one character; the pattern's `_` matches any), and the exact `strpos` check on the copy's two
//! columns decides, as before.
//!
//! `q`: a letter that, in text, is almost always followed by `u`, so the trigrams holding a
//! separator (`eq5`) are rarely those of a word. The column costs the copy ~47 B a record over
//! 1M (146 → 193 MB) and the copy's insert one `regexp_replace` (~1 µs).

use crate::error::ArchiveError;
use crate::sql::{Conn, Dialect};

/// The copy's newest rows [`rarest_pattern`] counts its trigrams in.
pub const SAMPLED: u64 = 1_000;

/// The generated column's expression.
pub const EXPRESSION: &str = "regexp_replace(COALESCE(error_message, '') || ' ' || \
     COALESCE(error_stacktrace, ''), '[^[:alnum:]]', 'q', 'g')";

/// Migration 29 for dialect `d` (a no-op on SQLite). Without `btree_gin` the index holds the
/// text alone; without `pg_trgm` there is none (a warning each time), and the pattern's `LIKE`
/// reads the whole copy, exact as before.
pub fn v29(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => "SELECT 1".into(),
        Dialect::Postgres => {
            let keys = crate::copy_key_gin::KEYS.join(", ");
            format!(
                "ALTER TABLE dead_letter_error_text ADD COLUMN IF NOT EXISTS error_grams TEXT GENERATED ALWAYS AS ({EXPRESSION}) STORED;
DO $$ BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS btree_gin;
        CREATE INDEX IF NOT EXISTS dead_letter_error_text_grams ON dead_letter_error_text
            USING gin (error_grams gin_trgm_ops, {keys});
    EXCEPTION WHEN OTHERS THEN
        RAISE WARNING 'charon archive: no key columns in the error-text trigram index (%)', SQLERRM;
        CREATE INDEX IF NOT EXISTS dead_letter_error_text_grams ON dead_letter_error_text
            USING gin (error_grams gin_trgm_ops);
    END;
    DROP INDEX IF EXISTS dead_letter_error_text_message_keys;
    DROP INDEX IF EXISTS dead_letter_error_text_stacktrace_keys;
    DROP INDEX IF EXISTS dead_letter_error_text_message;
    DROP INDEX IF EXISTS dead_letter_error_text_stacktrace;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'charon archive: no trigram index on the error-text copy (%); the error filter reads the whole copy', SQLERRM;
END $$;
ANALYZE dead_letter_error_text;"
            )
        }
    }
}

/// The `LIKE` pattern on `error_grams` whose matches include every copy row holding `needle`
/// in its message or stack trace, as a string literal: `'%…%'` with ASCII letters and digits
/// kept, every other ASCII character `q` (as [`EXPRESSION`] makes it in every locale) and every
/// other character `_` (whatever the database's locale made of it). It holds no quote,
/// backslash, `%`, `_` of the needle's or `?` (the driver's placeholder). A literal, not a
/// parameter: a cached statement's generic plan chose without the pattern (it walked the whole
/// copy backwards by id for a needle matching nothing: 460 ms instead of 0.4).
pub fn pattern(needle: &str) -> String {
    let mut s = String::from("'%");
    for ch in needle.chars() {
        s.push(match ch {
            c if c.is_ascii_alphanumeric() => c,
            c if c.is_ascii() => 'q',
            _ => '_',
        });
    }
    s.push_str("%'");
    s
}

/// The trigrams (windows of three characters, none a `_`) of [`pattern`]'s text, each once, at
/// most 32.
fn trigrams(needle: &str) -> Vec<String> {
    let full = pattern(needle);
    let text: Vec<char> = full
        .trim_matches(|c| c == '\'' || c == '%')
        .chars()
        .collect();
    let mut out: Vec<String> = Vec::new();
    for w in text.windows(3).filter(|w| !w.contains(&'_')) {
        let w: String = w.iter().collect();
        if !out.contains(&w) && out.len() < 32 {
            out.push(w);
        }
    }
    out
}

/// A `LIKE` pattern on `error_grams` of the needle's one trigram that the fewest of the copy's
/// newest [`SAMPLED`] rows hold (its superset, as [`pattern`] is): a scan of the trigram index
/// with it reads one posting list instead of intersecting all of them (`causeq5`'s `cau`,
/// `aus`, `use` and `seq` are in every record of the bench; `eq5` in one in ten): 27 → 14 ms
/// for `crate::key_first_match`'s range over 1M. [`pattern`] itself when the needle has no or
/// one trigram.
pub fn rarest_pattern(c: &mut dyn Conn, needle: &str) -> Result<String, ArchiveError> {
    let windows = trigrams(needle);
    if windows.len() <= 1 {
        return Ok(pattern(needle));
    }
    // The windows hold letters and digits only: literals.
    let sums: Vec<String> = windows
        .iter()
        .map(|w| format!("CAST(SUM(CASE WHEN strpos(g, '{w}') > 0 THEN 1 ELSE 0 END) AS BIGINT)"))
        .collect();
    let rows = c.query(
        &format!(
            "SELECT {} FROM (SELECT error_grams AS g FROM dead_letter_error_text \
             ORDER BY id DESC LIMIT {SAMPLED}) AS s",
            sums.join(", ")
        ),
        &[],
    )?;
    let Some(row) = rows.first() else {
        return Ok(pattern(needle));
    };
    let rarest = windows
        .iter()
        .enumerate()
        .min_by_key(|(i, _)| row.get(*i).and_then(|c| c.opt_int()).unwrap_or(0))
        .map(|(_, w)| w.clone());
    Ok(rarest.map_or_else(|| pattern(needle), |w| format!("'%{w}%'")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separators_become_q_and_other_characters_any() {
        assert_eq!(pattern("cause 5"), "'%causeq5%'");
        assert_eq!(pattern("it's 100%_\\?"), "'%itqsq100qqqq%'");
        assert_eq!(pattern("見つか: x"), "'%___qqx%'");
    }

    #[test]
    fn trigrams_skip_the_wildcards_and_repeats() {
        assert_eq!(trigrams("cause 5"), ["cau", "aus", "use", "seq", "eq5"]);
        assert_eq!(trigrams("見つか: x"), ["qqx"]);
        assert_eq!(trigrams("aaaa"), ["aaa"]);
        assert!(trigrams("ab").is_empty());
    }

    #[test]
    fn the_index_replaces_both_of_migration_26s() {
        let p = v29(Dialect::Postgres);
        assert!(p.contains(&format!(
            "gin (error_grams gin_trgm_ops, {})",
            crate::copy_key_gin::KEYS.join(", ")
        )));
        assert!(p.contains("DROP INDEX IF EXISTS dead_letter_error_text_message_keys"));
        assert!(p.contains("DROP INDEX IF EXISTS dead_letter_error_text_stacktrace_keys"));
        assert_eq!(v29(Dialect::Sqlite), "SELECT 1");
    }
}
