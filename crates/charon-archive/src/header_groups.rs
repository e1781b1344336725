//! Migration 24 (branch `q9o`, docs/archive.md "Migration 24" and "Twenty-sixth round"): the
//! record's `created_at` beside its rows in the exact header index, next to migration 22's
//! `status`, `queue` and `original_queue` ([`crate::header_columns`]), and the `/groups` they
//! answer: `by` a subset of those columns, a filter of one `header.NAME=value` term and
//! terms of those columns (since migration 25 every group-key column and any vhost limit,
//! [`crate::header_key_columns`]) — each group's count, oldest and newest from the
//! header's index range alone, plus the records above the watermark and the edited ones checked
//! by the filter's condition, as migration 22's lists. (Before: the error-text copy read for
//! every header match, 140–330 ms on PostgreSQL over 1M records, 64–237 ms on SQLite.) The
//! group's sample is the message of its record with the greatest id, that id taken from the same
//! rows, the messages of the first 100 groups read in one statement ([`crate::group_sample`]).
//!
//! **Kept exact** as migration 22's columns: both indexers write `created_at` with the row
//! ([`crate::header_columns::fill_columns`]) and migration 22's trigger, extended here, rewrites
//! the rows when a record's `created_at` changes (only a user's SQL changes it). On PostgreSQL
//! the column is an `INCLUDE` column of the primary key, not a key column: the plan reads the
//! whole `(name, value)` range anyway (no time range narrows it), and a key column before `id`
//! would break the id order migration 9's and 22's pages walk.

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::header_columns::{self, COLUMNS, Plan};
use crate::header_index;
use crate::sql::{Conn, Dialect, Param};

/// The migration's version.
pub const VERSION: i64 = 24;

/// SQLite: the column added (in the `WITHOUT ROWID` row), filled from the records, and
/// migration 22's trigger replaced by one that also follows `created_at`.
const V24_SQLITE: &str = "
ALTER TABLE dead_letter_search_header ADD COLUMN created_at BIGINT;
UPDATE dead_letter_search_header AS h SET created_at = d.created_at
    FROM dead_letters AS d WHERE d.id = h.id;
DROP TRIGGER dead_letter_search_header_keys;
CREATE TRIGGER dead_letter_search_header_keys AFTER UPDATE OF status, queue, original_queue, created_at ON dead_letters
WHEN old.status IS NOT new.status OR old.queue IS NOT new.queue OR old.original_queue IS NOT new.original_queue
    OR old.created_at IS NOT new.created_at BEGIN
    UPDATE dead_letter_search_header SET status = new.status, queue = new.queue, original_queue = new.original_queue,
        created_at = new.created_at
    WHERE id = new.id;
END;
";

/// PostgreSQL: the table copied with the column, as migration 22 did (users' writes to
/// `dead_letters` wait), its primary key `INCLUDE`ing it, and migration 22's statement trigger's
/// function replaced by one that also rewrites it.
const V24_POSTGRES: &str = "
LOCK TABLE dead_letters IN SHARE MODE;
CREATE TABLE dead_letter_search_header_v24 (
    name  TEXT COLLATE \"C\" NOT NULL,
    value TEXT COLLATE \"C\" NOT NULL,
    id    BIGINT NOT NULL,
    status TEXT COLLATE \"C\",
    queue TEXT COLLATE \"C\",
    original_queue TEXT COLLATE \"C\",
    created_at BIGINT
);
INSERT INTO dead_letter_search_header_v24 (name, value, id, status, queue, original_queue, created_at)
    SELECT h.name, h.value, h.id, d.status, d.queue, d.original_queue, d.created_at
    FROM dead_letter_search_header AS h JOIN dead_letters AS d ON d.id = h.id;
DROP TABLE dead_letter_search_header;
ALTER TABLE dead_letter_search_header_v24 RENAME TO dead_letter_search_header;
ALTER TABLE dead_letter_search_header ADD CONSTRAINT dead_letter_search_header_pkey
    PRIMARY KEY (name, value, id) INCLUDE (status, queue, original_queue, created_at);
CREATE INDEX dead_letter_search_header_id ON dead_letter_search_header (id);
CREATE OR REPLACE FUNCTION dead_letter_search_header_keys() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    UPDATE dead_letter_search_header AS h
        SET status = n.status, queue = n.queue, original_queue = n.original_queue, created_at = n.created_at
        FROM dead_letter_search_header_new AS n
        WHERE h.id = n.id AND (h.status IS DISTINCT FROM n.status OR h.queue IS DISTINCT FROM n.queue
            OR h.original_queue IS DISTINCT FROM n.original_queue OR h.created_at IS DISTINCT FROM n.created_at);
    RETURN NULL;
END $f$;
ANALYZE dead_letter_search_header;
";

/// Migration 24 for dialect `d`.
pub fn v24(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => V24_SQLITE.to_string(),
        Dialect::Postgres => V24_POSTGRES.to_string(),
    }
}

/// `/groups` by columns of the header rows over the header index's range.
pub struct Groups<'f> {
    plan: Plan<'f>,
    list: String,
}

/// Whether `/groups` of `f` by `cols` is answered from the header rows: `cols` among
/// [`COLUMNS`] (every group-key column since migration 25), `f` one header term the index holds,
/// terms of [`COLUMNS`] only and any vhost limit.
pub fn answers(f: &Filter, cols: &[String]) -> bool {
    cols.iter().all(|c| COLUMNS.contains(&c.as_str())) && header_columns::terms_with(f, 0).is_some()
}

/// The plan of `/groups` of `f` by `cols` when [`answers`], at the header index's watermark.
pub fn plan<'f>(
    c: &mut dyn Conn,
    f: &'f Filter,
    cols: &[String],
) -> Result<Option<Groups<'f>>, ArchiveError> {
    let Some(t) = header_columns::terms_with(f, 0).filter(|_| answers(f, cols)) else {
        return Ok(None);
    };
    let wm = header_index::watermark(c)?;
    Ok(Some(Groups {
        plan: Plan::new(c.dialect(), t, wm),
        list: cols.join(", "),
    }))
}

impl Groups<'_> {
    /// The plan's matches counted up to `cap` + 1 per part (`total_cap`; the header list's count).
    pub fn count_capped(&self, cap: u64) -> (String, Vec<Param>) {
        self.plan.count_capped(cap)
    }

    /// Each part's newest `reach` matches as `id`, `created_at` and the `by` columns (for
    /// [`crate::newest_groups::of_rows`]): a backward walk of each index range, no record read.
    pub fn newest_rows(&self, reach: u64) -> (String, Vec<Param>) {
        let (sql, p) = self
            .plan
            .parts_of(&format!("id, created_at, {}", self.list));
        let sql = sql
            .iter()
            .map(|s| format!("SELECT * FROM ({s} ORDER BY id DESC LIMIT {reach}) AS p"))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        (sql, p.concat())
    }

    /// Per group: the `by` columns, `COUNT(*)`, `MIN(created_at)`, `MAX(created_at)` and
    /// `MAX(id)` (the record whose message is the group's sample, [`crate::group_sample`]).
    pub fn groups(&self) -> (String, Vec<Param>) {
        let list = &self.list;
        let (sql, p) = self.plan.parts_of(&format!("{list}, created_at, id"));
        (
            format!(
                "SELECT {list}, COUNT(*), MIN(created_at), MAX(created_at), MAX(id) FROM ({}) AS m GROUP BY {list}",
                sql.join(" UNION ALL ")
            ),
            p.concat(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_the_rows_columns_with_one_header_term_and_their_terms() {
        let f = |pairs: &[(&str, &str)]| Filter::from_pairs(pairs.iter().copied()).expect("f");
        let by = |s: &str| s.split(',').map(str::to_string).collect::<Vec<_>>();
        assert!(answers(&f(&[("header.a", "b")]), &by("status")));
        assert!(answers(
            &f(&[("header.a", "b"), ("queue", "q")]),
            &by("status,original_queue")
        ));
        // Since migration 25 every group-key column, and a vhost limit.
        assert!(answers(&f(&[("header.a", "b")]), &by("reason")));
        assert!(answers(
            &f(&[("header.a", "b"), ("reason", "r")]),
            &by("status,error_fingerprint")
        ));
        assert!(answers(
            &f(&[("vhost", "/"), ("header.a", "b")]),
            &by("original_exchange,content_type,vhost")
        ));
        assert!(answers(
            &f(&[("header.a", "b")]).within(Some(vec!["/".into()])),
            &by("status")
        ));
        assert!(!answers(&f(&[("status", "S")]), &by("status")));
        assert!(!answers(&f(&[("header.a", "b")]), &by("message_id")));
        assert!(!answers(
            &f(&[("header.a", "b"), ("error", "e")]),
            &by("status")
        ));
    }
}
