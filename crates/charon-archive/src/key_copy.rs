//! Migration 13 (branch `q9t`): the group-key columns and the time of every record in the narrow
//! copy of migration 12 (`dead_letter_error_text`), and the filters it answers without reading a
//! record (docs/archive.md "Migration 13" and "Nineteenth round").
//!
//! Migration 12's copy let an `error` term find its matches without reading records, but a filter
//! combining it with another term (`status=PENDING&error=…`), or a header filter with `queue=`,
//! and every `/groups` with such a filter still read each match's record (its status, its group
//! columns, its time): one 16 KiB leaf (SQLite) or heap page (PostgreSQL) of the 1.6 GB table per
//! match. The copy now holds, beside the error texts, `vhost`, `queue`, `original_queue`,
//! `reason`, `error_fingerprint`, `status` and `created_at`, byte for byte as the record: a filter
//! whose terms read only those columns and ids (the `error` and `header.NAME` terms' conditions
//! are `id IN (…)` over their indexes) is evaluated on the copy for the records at or below the
//! search watermark and on `dead_letters` for the others, in one statement.
//!
//! **Kept exact by the same triggers as migration 12, with more columns**: the watermark's UPDATE
//! copies the records it passes (all ten columns), a DELETE removes the row, and an UPDATE of any
//! copied column (`status` by skips and replays; the others only by a user's SQL) updates it —
//! on PostgreSQL once per statement from its transition table, so a replay or skip of 100,000
//! records is one join, not 100,000 trigger calls. Nothing runs on the archiver's INSERT. As
//! before, every write to `dead_letters` and the indexer's batch hold the writer's lock, so a
//! row's copy and the record never diverge at a commit.

use crate::filter::Filter;
use crate::sql::{Dialect, Param};

/// The record's columns the copy holds beside the error texts (all the groupable columns but
/// `original_exchange` and `content_type`, and the time).
pub const KEY_COLUMNS: &[&str] = &[
    "vhost",
    "queue",
    "original_queue",
    "reason",
    "error_fingerprint",
    "status",
    "created_at",
];

/// Migration 13 on SQLite: migration 12's copy and triggers replaced by the wider ones, filled
/// from the records at or below the watermark.
const V13_SQLITE: &str = "
DROP TRIGGER dead_letter_error_text_fill;
DROP TRIGGER dead_letter_error_text_delete;
DROP TRIGGER dead_letter_error_text_edit;
DROP TABLE dead_letter_error_text;
CREATE TABLE dead_letter_error_text (
    id INTEGER PRIMARY KEY,
    error_message TEXT,
    error_stacktrace TEXT,
    vhost TEXT,
    queue TEXT,
    original_queue TEXT,
    reason TEXT,
    error_fingerprint TEXT,
    status TEXT,
    created_at BIGINT
);
INSERT INTO dead_letter_error_text (id, {COLS})
    SELECT id, {COLS} FROM dead_letters
    WHERE id <= (SELECT watermark FROM dead_letter_search_state);
CREATE TRIGGER dead_letter_error_text_fill AFTER UPDATE OF watermark ON dead_letter_search_state
WHEN new.watermark > old.watermark BEGIN
    INSERT OR REPLACE INTO dead_letter_error_text (id, {COLS})
        SELECT id, {COLS} FROM dead_letters
        WHERE id > old.watermark AND id <= new.watermark;
END;
CREATE TRIGGER dead_letter_error_text_delete AFTER DELETE ON dead_letters BEGIN
    DELETE FROM dead_letter_error_text WHERE id = old.id;
END;
CREATE TRIGGER dead_letter_error_text_edit AFTER UPDATE OF {COLS} ON dead_letters BEGIN
    UPDATE dead_letter_error_text SET {SET_NEW} WHERE id = new.id;
END;
";

/// Migration 13 on PostgreSQL: the same, the edit trigger per statement (transition tables), the
/// trigram indexes of migration 12 rebuilt on the new table when `pg_trgm` is there.
const V13_POSTGRES: &str = "
DROP TRIGGER dead_letter_error_text_fill ON dead_letter_search_state;
DROP TRIGGER dead_letter_error_text_delete ON dead_letters;
DROP TRIGGER dead_letter_error_text_edit ON dead_letters;
DROP FUNCTION dead_letter_error_text_fill();
DROP FUNCTION dead_letter_error_text_edit();
DROP TABLE dead_letter_error_text;
CREATE TABLE dead_letter_error_text (
    id BIGINT PRIMARY KEY,
    error_message TEXT,
    error_stacktrace TEXT,
    vhost TEXT,
    queue TEXT,
    original_queue TEXT,
    reason TEXT,
    error_fingerprint TEXT,
    status TEXT,
    created_at BIGINT
);
INSERT INTO dead_letter_error_text (id, {COLS})
    SELECT id, {COLS} FROM dead_letters
    WHERE id <= (SELECT watermark FROM dead_letter_search_state);
CREATE FUNCTION dead_letter_error_text_fill() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO dead_letter_error_text (id, {COLS})
        SELECT id, {COLS} FROM dead_letters
        WHERE id > OLD.watermark AND id <= NEW.watermark
    ON CONFLICT (id) DO UPDATE SET {SET_EXCLUDED};
    RETURN NULL;
END $f$;
CREATE TRIGGER dead_letter_error_text_fill AFTER UPDATE OF watermark ON dead_letter_search_state
    FOR EACH ROW WHEN (NEW.watermark > OLD.watermark) EXECUTE FUNCTION dead_letter_error_text_fill();
CREATE TRIGGER dead_letter_error_text_delete AFTER DELETE ON dead_letters
    REFERENCING OLD TABLE AS dead_letter_error_text_old
    FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_error_text_delete();
CREATE FUNCTION dead_letter_error_text_edit() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    UPDATE dead_letter_error_text AS e SET {SET_N}
        FROM dead_letter_error_text_new AS n
        WHERE e.id = n.id AND ({CHANGED});
    RETURN NULL;
END $f$;
CREATE TRIGGER dead_letter_error_text_edit AFTER UPDATE ON dead_letters
    REFERENCING NEW TABLE AS dead_letter_error_text_new
    FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_error_text_edit();
DO $$ BEGIN
    CREATE INDEX dead_letter_error_text_message ON dead_letter_error_text USING gin (error_message gin_trgm_ops);
    CREATE INDEX dead_letter_error_text_stacktrace ON dead_letter_error_text USING gin (error_stacktrace gin_trgm_ops);
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'charon archive: no trigram index on dead_letter_error_text (%); the error filter reads the whole copy', SQLERRM;
END $$;
ANALYZE dead_letter_error_text;
";

/// Every column the copy holds (but `id`).
fn all_columns() -> Vec<&'static str> {
    let mut cols = vec!["error_message", "error_stacktrace"];
    cols.extend_from_slice(KEY_COLUMNS);
    cols
}

/// Migration 13 for dialect `d`.
pub fn v13(d: Dialect) -> String {
    let cols = all_columns();
    let set = |src: &str| {
        cols.iter()
            .map(|c| format!("{c} = {src}.{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sql = match d {
        Dialect::Sqlite => V13_SQLITE,
        Dialect::Postgres => V13_POSTGRES,
    };
    sql.replace("{COLS}", &cols.join(", "))
        .replace("{SET_NEW}", &set("new"))
        .replace("{SET_EXCLUDED}", &set("EXCLUDED"))
        .replace("{SET_N}", &set("n"))
        .replace(
            "{CHANGED}",
            &cols
                .iter()
                .map(|c| format!("e.{c} IS DISTINCT FROM n.{c}"))
                .collect::<Vec<_>>()
                .join(" OR "),
        )
}

/// Whether `f` is answered from the copy: it has an `error` term or a `header.NAME` term the
/// exact header index holds (their conditions read ids only), and every other term reads a column
/// the copy holds (a vhost limit reads `vhost`).
pub fn answers(f: &Filter) -> bool {
    let indexed = f.terms.iter().any(|(k, v)| {
        k == "error"
            || k.strip_prefix("header.")
                .is_some_and(|n| n.len() + v.len() <= crate::header_index::MAX_BYTES)
    });
    indexed
        && f.terms.iter().all(|(k, v)| {
            k == "error"
                || k == "since"
                || k == "until"
                || KEY_COLUMNS.contains(&k.as_str()) && k != "created_at"
                || k.strip_prefix("header.")
                    .is_some_and(|n| n.len() + v.len() <= crate::header_index::MAX_BYTES)
        })
}

/// Whether `f` has a vhost limit and every term of it reads a column the copy holds (no text,
/// header or time term): a page of it in id order can walk the copy's rows instead of the
/// records.
pub fn holds_terms(f: &Filter) -> bool {
    f.vhosts.is_some()
        && f.terms
            .keys()
            .all(|k| KEY_COLUMNS.contains(&k.as_str()) && k != "created_at")
}

/// Whether every column of `cols` is in the copy.
pub fn holds(cols: &[String]) -> bool {
    cols.iter().all(|c| KEY_COLUMNS.contains(&c.as_str()))
}

/// The records above the watermark (those the copy does not hold yet), as a condition on
/// `dead_letters`.
fn above(d: Dialect) -> &'static str {
    match d {
        Dialect::Sqlite => "id > (SELECT watermark FROM dead_letter_search_state)",
        // The ids as an array first (see `error_text::parts`: a parallel scan's start otherwise).
        Dialect::Postgres => {
            "id = ANY(ARRAY(SELECT id FROM dead_letters WHERE id > (SELECT watermark FROM dead_letter_search_state)))"
        }
    }
}

/// A filter [`answers`] accepts, split: its condition on the copy (alias `e`) and on the records
/// above the watermark, each with its parameters.
pub struct Split {
    /// `WITH r AS MATERIALIZED (…)`: the copy's columns of the records above the watermark. The
    /// filter's condition runs on `r`, never on `dead_letters` itself: there SQLite took an
    /// `id IN (…)` term (the header index's ids) as its loop and built and probed the whole
    /// list again for the few records above the watermark (185 ms for 50,000 ids; 1 ms on `r`).
    above: String,
    copy: String,
    copy_params: Vec<Param>,
    rest: String,
    rest_params: Vec<Param>,
    /// SQLite, with the needle's FTS5 query and no key range (`within`): the query, and the
    /// copy row's check (needle and other terms) with its parameters, for [`Split::newest_rows`].
    stream: Option<(Param, String, Vec<Param>)>,
}

impl Split {
    /// `f`'s condition `cond` (with `params`, on `dead_letters`), applied to both sides. With an
    /// `error` term, pass its needle and FTS5 query in `error` and the condition of the other
    /// terms in `others`: the copy's side then checks the needle on the very row it reads for the
    /// other columns (one lookup per candidate), not in a subquery of its own (two).
    ///
    /// `within` (SQLite): the needle's candidates restricted to the records of this condition on
    /// `dead_letters` (`crate::keyed_candidates`).
    pub fn new(
        d: Dialect,
        cond: &str,
        params: &[Param],
        error: Option<(&str, Option<String>)>,
        others: Option<(String, Vec<Param>)>,
        within: Option<(String, Vec<Param>)>,
    ) -> Split {
        let stream = match (d, &error, &others, &within) {
            (Dialect::Sqlite, Some((needle, fts)), Some((oc, op)), None) => fts
                .clone()
                .or_else(|| crate::search_index::trigram_query(needle))
                .zip(crate::error_text::check_on_copy(d, needle))
                .map(|(q, (check, mut cp))| {
                    cp.extend(op.iter().cloned());
                    (Param::from(q), format!("{check} AND {oc}"), cp)
                }),
            _ => None,
        };
        let inline = match (error, others) {
            (Some((needle, fts)), Some((oc, op))) => {
                crate::error_text::parts_within(d, needle, fts, within).map(|p| {
                    let mut cp = p.indexed_params;
                    cp.extend(op);
                    (format!("{} AND {oc}", p.indexed_where), cp)
                })
            }
            _ => None,
        };
        let (copy, copy_params) = inline.unwrap_or_else(|| (cond.to_string(), params.to_vec()));
        Split {
            above: format!(
                "WITH r AS MATERIALIZED (SELECT id, {} FROM dead_letters WHERE {}) ",
                all_columns().join(", "),
                above(d)
            ),
            copy,
            copy_params,
            rest: cond.to_string(),
            rest_params: params.to_vec(),
            stream,
        }
    }

    fn params(&self) -> Vec<Param> {
        let mut p = self.copy_params.clone();
        p.extend_from_slice(&self.rest_params);
        p
    }

    /// The `total`.
    pub fn count(&self) -> (String, Vec<Param>) {
        (
            format!(
                "{}SELECT (SELECT COUNT(*) FROM dead_letter_error_text AS e WHERE {}) + \
                 (SELECT COUNT(*) FROM r WHERE {})",
                self.above, self.copy, self.rest
            ),
            self.params(),
        )
    }

    /// [`Split::count`] with a cap (`crate::total_cap`): each side counts at most `cap + 1`
    /// matches.
    pub fn count_capped(&self, cap: u64) -> (String, Vec<Param>) {
        use crate::total_cap::limited;
        (
            format!(
                "{}SELECT {} + {}",
                self.above,
                limited(
                    &format!(
                        "SELECT e.id FROM dead_letter_error_text AS e WHERE {}",
                        self.copy
                    ),
                    cap
                ),
                limited(&format!("SELECT id FROM r WHERE {}", self.rest), cap)
            ),
            self.params(),
        )
    }

    /// The ids of one page in id order (`desc`: newest first): the first `reach` matches of the
    /// copy and the first `reach` of the records above the watermark, merged by the caller.
    pub fn page_ids(&self, desc: bool, reach: u64) -> (String, Vec<Param>) {
        let dir = if desc { "DESC" } else { "ASC" };
        if let Some((copy, mut p)) = self.stream_sql("e.id", desc, reach) {
            p.extend_from_slice(&self.rest_params);
            return (
                format!(
                    "{}SELECT id FROM ({copy}) AS p \
                     UNION ALL SELECT id FROM (SELECT id FROM r WHERE {} ORDER BY id {dir} LIMIT {reach}) AS q",
                    self.above, self.rest
                ),
                p,
            );
        }
        (
            format!(
                "{}SELECT id FROM (SELECT e.id FROM dead_letter_error_text AS e WHERE {} ORDER BY e.id {dir} LIMIT {reach}) AS p \
                 UNION ALL SELECT id FROM (SELECT id FROM r WHERE {} ORDER BY id {dir} LIMIT {reach}) AS q",
                self.above, self.copy, self.rest
            ),
            self.params(),
        )
    }

    /// Every match as `(id, created_at)` rows, the copy's and the records above the watermark,
    /// at most `limit` of them (`crate::rare_time_page`).
    pub fn times(&self, limit: u64) -> (String, Vec<Param>) {
        self.column_rows("created_at", limit)
    }

    /// [`Split::times`] with another column the copy holds: `(id, col)` rows.
    pub fn column_rows(&self, col: &str, limit: u64) -> (String, Vec<Param>) {
        (
            format!(
                "{}SELECT id, {col} FROM (SELECT e.id, e.{col} FROM dead_letter_error_text AS e WHERE {} \
                 UNION ALL SELECT id, {col} FROM r WHERE {}) AS u LIMIT {limit}",
                self.above, self.copy, self.rest
            ),
            self.params(),
        )
    }

    /// The ids of one page sorted by `col` (a column the copy holds; `desc`: `col DESC, id
    /// DESC`) as `(id, col)` rows: the first `reach` matches of the copy by the copy's `col` and
    /// the first `reach` of the records above the watermark, for the caller to order and page
    /// (branch `s9a`: each match's narrow copy row read for its column, not its record).
    pub fn page_ids_sorted(
        &self,
        d: Dialect,
        col: &str,
        desc: bool,
        reach: u64,
    ) -> (String, Vec<Param>) {
        let dir = if desc { "DESC" } else { "ASC" };
        // The records above the watermark sorted without the column's index: by an index on
        // it, SQLite would walk every record of its values for the few past the watermark.
        let rest_col = match d {
            Dialect::Sqlite => format!("+{col}"),
            Dialect::Postgres => col.to_string(),
        };
        (
            format!(
                "{}SELECT id, {col} FROM (SELECT e.id, e.{col} FROM dead_letter_error_text AS e WHERE {} \
                 ORDER BY e.{col} {dir}, e.id {dir} LIMIT {reach}) AS p \
                 UNION ALL SELECT id, {col} FROM (SELECT id, {col} FROM r WHERE {} \
                 ORDER BY {rest_col} {dir}, id {dir} LIMIT {reach}) AS q",
                self.above, self.copy, self.rest
            ),
            self.params(),
        )
    }

    /// `/groups` of the newest matches (`crate::newest_groups`): `id`, `created_at` and the
    /// `cols` (all in the copy; none: ids and times only) of the newest `reach` matches on each
    /// side — the
    /// copy's, or the rows of `walk` (a bounded walk's statement over the copy selecting the same
    /// columns, with its parameters), and the records above the watermark — newest first on each
    /// side, for the caller to merge by id. The copy's side orders by `e.id + 0`: its matches
    /// found through the search index's candidates and sorted, not the whole copy walked
    /// backwards by id testing each row against the candidates (a needle under the cap).
    pub fn newest_rows(
        &self,
        cols: &[String],
        reach: u64,
        walk: Option<(String, Vec<Param>)>,
    ) -> (String, Vec<Param>) {
        let list: String = cols.iter().map(|c| format!(", {c}")).collect();
        let e_list: String = cols.iter().map(|c| format!(", e.{c}")).collect();
        let (copy, mut p) = walk
            .or_else(|| self.stream_sql(&format!("e.id, e.created_at{e_list}"), true, reach))
            .unwrap_or_else(|| {
                (
                    format!(
                        "SELECT e.id, e.created_at{e_list} FROM dead_letter_error_text AS e \
                         WHERE {} ORDER BY e.id + 0 DESC LIMIT {reach}",
                        self.copy
                    ),
                    self.copy_params.clone(),
                )
            });
        p.extend_from_slice(&self.rest_params);
        (
            format!(
                "{}SELECT * FROM ({copy}) AS p UNION ALL SELECT * FROM (SELECT id, created_at{list} \
                 FROM r WHERE {} ORDER BY id DESC LIMIT {reach}) AS q",
                self.above, self.rest
            ),
            p,
        )
    }

    /// SQLite: how many of the first [`crate::keyed_candidates::SAMPLE`] FTS5 candidates in
    /// id order (`desc`: newest first) match — the share a [`Split::page_ids`] read meets first;
    /// `None` without such a read.
    pub fn stream_hits(
        &self,
        c: &mut dyn crate::sql::Conn,
        desc: bool,
    ) -> Result<Option<i64>, crate::error::ArchiveError> {
        let Some((q, checks, cp)) = self.stream.as_ref() else {
            return Ok(None);
        };
        let dir = if desc { "DESC" } else { "ASC" };
        let t = crate::search_index::Field::Error.table();
        let n = crate::keyed_candidates::SAMPLE;
        let mut p = vec![q.clone()];
        p.extend(cp.iter().cloned());
        let sql = format!(
            "SELECT COUNT(*) FROM (SELECT rowid AS id FROM {t} WHERE {t} MATCH ? \
             ORDER BY rowid {dir} LIMIT {n}) AS s CROSS JOIN dead_letter_error_text AS e \
             ON e.id = s.id WHERE {checks}"
        );
        Ok(Some(crate::ops::count(c, &sql, &p)?))
    }

    /// Whether the copy's side reads the FTS5 candidates in rowid order ([`Split::page_ids`],
    /// [`Split::newest_rows`]).
    pub fn streams(&self) -> bool {
        self.stream.is_some()
    }

    /// SQLite: the copy's first `reach` matches in id order (`desc`: newest first), selecting
    /// `select` (columns of the alias `e`), read in the search index's rowid order, each
    /// candidate's copy row checked, stopping at `reach` — beside the edited records'
    /// (`dead_letter_search_scan`, no FTS5 row), in the same order.
    /// As `e.id IN (<rowids>) … ORDER BY e.id + 0 DESC`, every candidate was read and the
    /// matches sorted: `/groups?by=status&error=cause 5&original_queue=orders-5` over 1M read
    /// 100,200 candidates for 10,001 of 50,100 matches (70 ms); in order it reads ~20,000 (7 ms).
    /// `None` without an FTS5 query, or when the key's range chose the candidates.
    fn stream_sql(&self, select: &str, desc: bool, reach: u64) -> Option<(String, Vec<Param>)> {
        let dir = if desc { "DESC" } else { "ASC" };
        let (q, checks, cp) = self.stream.as_ref()?;
        let t = crate::search_index::Field::Error.table();
        let mut p = vec![q.clone()];
        p.extend(cp.iter().cloned());
        p.extend(cp.iter().cloned());
        Some((
            format!(
                "SELECT * FROM (SELECT {select} FROM {t} \
                 CROSS JOIN dead_letter_error_text AS e ON e.id = {t}.rowid \
                 WHERE {t} MATCH ? AND {checks} ORDER BY {t}.rowid {dir} LIMIT {reach}) AS s \
                 UNION ALL SELECT * FROM (SELECT {select} FROM dead_letter_error_text AS e \
                 WHERE e.id IN (SELECT id FROM dead_letter_search_scan) AND {checks} \
                 ORDER BY e.id {dir} LIMIT {reach}) AS x"
            ),
            p,
        ))
    }

    /// `/groups` by `cols` (all in the copy): per group its count, oldest and newest time, and
    /// the smallest error message as its sample, ordered by count (largest first).
    pub fn groups(&self, cols: &[String]) -> (String, Vec<Param>) {
        let list = cols.join(", ");
        let e_list = cols
            .iter()
            .map(|c| format!("e.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        (
            format!(
                "{}SELECT {list}, COUNT(*), MIN(created_at), MAX(created_at), MIN(error_message) FROM (\
                 SELECT {e_list}, e.created_at, e.error_message FROM dead_letter_error_text AS e WHERE {} \
                 UNION ALL SELECT {list}, created_at, error_message FROM r WHERE {}) AS u \
                 GROUP BY {list} ORDER BY COUNT(*) DESC",
                self.above, self.copy, self.rest
            ),
            self.params(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(pairs: &[(&str, &str)]) -> Filter {
        Filter::from_pairs(pairs.iter().copied()).expect("filter")
    }

    #[test]
    fn answers_only_filters_of_the_copys_columns_with_an_indexed_term() {
        assert!(answers(&filter(&[("error", "x"), ("status", "PENDING")])));
        assert!(answers(&filter(&[("header.a", "b"), ("queue", "q")])));
        assert!(answers(&filter(&[("error", "x"), ("since", "0")])));
        assert!(!answers(&filter(&[("status", "PENDING")])));
        assert!(!answers(&filter(&[("error", "x"), ("body", "y")])));
        assert!(!answers(&filter(&[("error", "x"), ("content_type", "t")])));
        assert!(!answers(&filter(&[("error", "x"), ("message_id", "m")])));
        let long = "v".repeat(crate::header_index::MAX_BYTES);
        assert!(!answers(&filter(&[("header.a", &long), ("queue", "q")])));
        assert!(!answers(&filter(&[("error", "x"), ("header.a", &long)])));
    }

    #[test]
    fn the_migration_names_every_column_once_per_list() {
        for d in [Dialect::Sqlite, Dialect::Postgres] {
            let sql = v13(d);
            assert!(!sql.contains('{'), "{sql}");
            assert!(sql.contains("status = new.status") || sql.contains("status = n.status"));
        }
    }
}
