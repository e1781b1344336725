//! Migration 22 (branch `q9n`, docs/archive.md "Migration 22" and "Twenty-fifth round"): the
//! record's `status`, `queue` and `original_queue` beside its rows in the exact header index
//! (`dead_letter_search_header`, migration 9), and the lists they answer: one `header.NAME=value`
//! term with terms of those columns (`status=PENDING&header.x-first-death-queue=orders-7`) are
//! counted and paged from the header's index range alone, no probe of `dead_letters` per header
//! match (387–391 ms on PostgreSQL over 1M records before, stop 39's q9z round).
//!
//! The columns are read from the same index range as the header: on PostgreSQL they are the
//! primary key's `INCLUDE` columns (an index-only scan), on SQLite part of the `WITHOUT ROWID`
//! row. **Kept exact** by one more rule beside migration 9's: the indexer writes a record's rows
//! with the record's columns, and a trigger after an UPDATE of `dead_letters` (SQLite: per row,
//! `OF status, queue, original_queue`; PostgreSQL: per statement) rewrites them (a replay's or skip's status change; the others only by a
//! user's SQL). PostgreSQL's race — the indexer's `INSERT … SELECT` reading a status that a
//! user's `UPDATE` changes after the statement's snapshot and before the indexer's commit, whose
//! trigger then finds no rows to rewrite — is closed by the fill's `FOR SHARE OF d`: such an
//! `UPDATE` waits for the indexer's commit (its trigger then sees the rows), and one in progress
//! makes the fill wait and read its committed version. The archive's own writers never race:
//! they and the indexer hold the writer's mutex ([`crate::pg_indexer`]).

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::header_index::{self, MAX_BYTES};
use crate::sql::{Dialect, Param};

/// The migration's version.
pub const VERSION: i64 = 22;

/// The record's columns held in its header rows: this migration's three and, since migration
/// 25, every other group-key column ([`crate::header_key_columns`]). (`created_at`, since
/// migration 24, is written beside them: [`fill_columns`].)
pub const COLUMNS: &[&str] = &[
    "status",
    "queue",
    "original_queue",
    "vhost",
    "original_exchange",
    "reason",
    "error_fingerprint",
    "content_type",
];

/// SQLite: the columns added, filled from the records, and the trigger.
const V22_SQLITE: &str = "
ALTER TABLE dead_letter_search_header ADD COLUMN status TEXT;
ALTER TABLE dead_letter_search_header ADD COLUMN queue TEXT;
ALTER TABLE dead_letter_search_header ADD COLUMN original_queue TEXT;
UPDATE dead_letter_search_header AS h SET status = d.status, queue = d.queue, original_queue = d.original_queue
    FROM dead_letters AS d WHERE d.id = h.id;
CREATE TRIGGER dead_letter_search_header_keys AFTER UPDATE OF status, queue, original_queue ON dead_letters
WHEN old.status IS NOT new.status OR old.queue IS NOT new.queue OR old.original_queue IS NOT new.original_queue BEGIN
    UPDATE dead_letter_search_header SET status = new.status, queue = new.queue, original_queue = new.original_queue
    WHERE id = new.id;
END;
";

/// PostgreSQL: the table copied with the columns (users' writes to `dead_letters` wait: the
/// copy reads their columns), every text column `COLLATE "C"` as migration 15 left `name` and
/// `value` and as the record's columns are, its primary key with the columns `INCLUDE`d, and the
/// trigger — once per statement, from its transition table, as migration 13's copy is kept (a
/// row trigger cost the backend ~60 µs more CPU a record on a 20,000-record status UPDATE, the
/// statement trigger none measurable: docs/archive.md "Twenty-fifth round"). It fires on any
/// UPDATE (PostgreSQL allows no column list with transition tables) and rewrites only the rows
/// whose columns differ from the record's.
const V22_POSTGRES: &str = "
LOCK TABLE dead_letters IN SHARE MODE;
CREATE TABLE dead_letter_search_header_v22 (
    name  TEXT COLLATE \"C\" NOT NULL,
    value TEXT COLLATE \"C\" NOT NULL,
    id    BIGINT NOT NULL,
    status TEXT COLLATE \"C\",
    queue TEXT COLLATE \"C\",
    original_queue TEXT COLLATE \"C\"
);
INSERT INTO dead_letter_search_header_v22 (name, value, id, status, queue, original_queue)
    SELECT h.name, h.value, h.id, d.status, d.queue, d.original_queue
    FROM dead_letter_search_header AS h JOIN dead_letters AS d ON d.id = h.id;
DROP TABLE dead_letter_search_header;
ALTER TABLE dead_letter_search_header_v22 RENAME TO dead_letter_search_header;
ALTER TABLE dead_letter_search_header ADD CONSTRAINT dead_letter_search_header_pkey
    PRIMARY KEY (name, value, id) INCLUDE (status, queue, original_queue);
CREATE INDEX dead_letter_search_header_id ON dead_letter_search_header (id);
CREATE FUNCTION dead_letter_search_header_keys() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    UPDATE dead_letter_search_header AS h
        SET status = n.status, queue = n.queue, original_queue = n.original_queue
        FROM dead_letter_search_header_new AS n
        WHERE h.id = n.id AND (h.status IS DISTINCT FROM n.status OR h.queue IS DISTINCT FROM n.queue
            OR h.original_queue IS DISTINCT FROM n.original_queue);
    RETURN NULL;
END $f$;
CREATE TRIGGER dead_letter_search_header_keys AFTER UPDATE ON dead_letters
    REFERENCING NEW TABLE AS dead_letter_search_header_new
    FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_search_header_keys();
ANALYZE dead_letter_search_header;
";

/// Migration 22 for dialect `d`.
pub fn v22(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => V22_SQLITE.to_string(),
        Dialect::Postgres => V22_POSTGRES.to_string(),
    }
}

/// The columns the header index's fill writes after the header (`d`: the record), as
/// `(insert list, select list)`: [`COLUMNS`] and, since migration 24, `created_at`
/// ([`crate::header_groups`]).
pub fn fill_columns() -> (String, String) {
    (
        COLUMNS
            .iter()
            .chain(&["created_at"])
            .map(|c| format!(", {c}"))
            .collect::<String>(),
        COLUMNS
            .iter()
            .chain(&["created_at"])
            .map(|c| format!(", d.{c}"))
            .collect::<String>(),
    )
}

/// A header term `(name, value)`, the terms of [`COLUMNS`] `(column, value)` and the API user's
/// vhost limit (since migration 25 the rows hold `vhost`).
pub struct Terms<'f> {
    name: &'f str,
    value: &'f str,
    keys: Vec<(&'static str, &'f str)>,
    vhosts: Option<&'f [String]>,
}

/// `f`'s terms when they are one `header.NAME=value` term the index holds and at least one term
/// of [`COLUMNS`] or a vhost limit, nothing else.
pub fn terms(f: &Filter) -> Option<Terms<'_>> {
    // A header term alone is migration 9's plan; with a vhost limit it is this one's.
    terms_with(f, usize::from(f.vhosts.is_none()))
}

/// [`terms`] with at least `min_keys` terms of [`COLUMNS`].
pub(crate) fn terms_with(f: &Filter, min_keys: usize) -> Option<Terms<'_>> {
    if f.terms.len() < 1 + min_keys {
        return None;
    }
    let mut header = None;
    let mut keys = Vec::new();
    for (k, v) in &f.terms {
        if let Some(name) = k.strip_prefix("header.") {
            if header.is_some() {
                return None;
            }
            header = Some((name, v.as_str()));
        } else {
            keys.push((*COLUMNS.iter().find(|c| **c == k)?, v.as_str()));
        }
    }
    let (name, value) = header?;
    (name.len() + value.len() <= MAX_BYTES).then_some(Terms {
        name,
        value,
        keys,
        vhosts: f.vhosts.as_deref(),
    })
}

/// A list's plan over the header index's range at watermark `wm`.
pub struct Plan<'f> {
    t: Terms<'f>,
    wm: i64,
    field: String,
    d: Dialect,
}

impl<'f> Plan<'f> {
    /// The plan for `t` at watermark `wm` (read by the caller before: any value is exact).
    pub fn new(d: Dialect, t: Terms<'f>, wm: i64) -> Plan<'f> {
        Plan {
            t,
            wm,
            field: d.json_field("headers"),
            d,
        }
    }

    /// The key terms' condition; `records`: on `dead_letters`, where on SQLite each column is
    /// written `+col` so that no index of it is used. The records above the watermark are few
    /// and one range of the primary key; SQLite, without statistics, otherwise read them
    /// through `(original_queue, status, id)` — every record of the queue, 50,000 of 1M
    /// (`original_queue=orders-7&header.…` 49 ms, the same with `status=` 8 ms).
    fn keys(&self, records: bool) -> String {
        let plus = if records && self.d == Dialect::Sqlite {
            "+"
        } else {
            ""
        };
        let mut sql: String = self
            .t
            .keys
            .iter()
            .map(|(c, _)| format!(" AND {plus}{c} = ?"))
            .collect();
        if let Some(vs) = self.t.vhosts {
            sql.push_str(&format!(" AND {}", vhost_in(plus, vs).0));
        }
        sql
    }

    /// The key terms' parameters, in [`Plan::keys`]'s order.
    fn key_params(&self) -> Vec<Param> {
        let mut p: Vec<Param> = self.t.keys.iter().map(|(_, v)| Param::from(*v)).collect();
        if let Some(vs) = self.t.vhosts {
            p.extend(vhost_in("", vs).1);
        }
        p
    }

    /// The three parts' SQL (header range, records above the watermark, edited records) and
    /// each part's parameters, in order.
    fn parts(&self) -> ([String; 3], [Vec<Param>; 3]) {
        self.parts_of("id")
    }

    /// [`Plan::parts`] selecting `select` (columns both tables have: `id`, [`COLUMNS`],
    /// `created_at`).
    pub(crate) fn parts_of(&self, select: &str) -> ([String; 3], [Vec<Param>; 3]) {
        let (k, r, f) = (self.keys(false), self.keys(true), &self.field);
        let sql = [
            format!(
                "SELECT {select} FROM dead_letter_search_header WHERE name = ? AND value = ? AND id <= ?{k}"
            ),
            format!("SELECT {select} FROM dead_letters WHERE id > ? AND {f} = ?{r}"),
            format!(
                "SELECT {select} FROM dead_letters WHERE id IN (SELECT id FROM dead_letter_search_scan WHERE id <= ?) AND {f} = ?{r}"
            ),
        ];
        let (name, value) = (Param::from(self.t.name), Param::from(self.t.value));
        let key_params = self.key_params();
        let mut a = vec![name.clone(), value.clone(), Param::from(self.wm)];
        let mut b = vec![Param::from(self.wm), name.clone(), value.clone()];
        let mut c = vec![Param::from(self.wm), name, value];
        for p in key_params {
            a.push(p.clone());
            b.push(p.clone());
            c.push(p);
        }
        (sql, [a, b, c])
    }

    /// `COUNT(*)` of the matches, one row.
    pub fn count(&self) -> (String, Vec<Param>) {
        let (sql, p) = self.parts();
        (
            format!("SELECT COUNT(*) FROM ({}) AS m", sql.join(" UNION ALL ")),
            p.concat(),
        )
    }

    /// [`Plan::count`] reading at most `cap + 1` matches of each part (`total_cap`): the sum is
    /// over `cap` exactly when at least that many match, else it is exact.
    pub fn count_capped(&self, cap: u64) -> (String, Vec<Param>) {
        let (sql, p) = self.parts();
        let sums = sql
            .iter()
            .map(|s| crate::total_cap::limited(s, cap))
            .collect::<Vec<_>>()
            .join(" + ");
        (format!("SELECT {sums}"), p.concat())
    }

    /// The matches' ids with `col` (`created_at` or one of [`COLUMNS`]) from the three parts, for
    /// a page sorted by `col` then id: a top-N over the index range, no record read.
    pub fn sorted_ids(&self, col: &str) -> (String, Vec<Param>) {
        let (sql, p) = self.parts_of(&format!("id, {col}"));
        (sql.join(" UNION ALL "), p.concat())
    }

    /// The ids of one page in id order (`desc`: newest first): each part's first `reach`
    /// matches in order, merged by the caller.
    pub fn page_ids(&self, desc: bool, reach: u64) -> (String, Vec<Param>) {
        let dir = if desc { "DESC" } else { "ASC" };
        let (sql, p) = self.parts();
        let sql = sql
            .iter()
            .map(|s| format!("SELECT id FROM ({s} ORDER BY id {dir} LIMIT {reach}) AS p"))
            .collect::<Vec<_>>()
            .join(" UNION ALL ");
        (sql, p.concat())
    }
}

/// The vhost limit's condition on `{plus}vhost` and its parameters.
fn vhost_in(plus: &str, vhosts: &[String]) -> (String, Vec<Param>) {
    crate::scope::vhost_in(&format!("{plus}vhost"), vhosts)
}

/// The column a page in `order` (as `filter::order_by` writes it) is sorted by when the header
/// rows hold it (`created_at`, [`COLUMNS`]); `None` for id order and the others.
pub fn row_sort(order: &str) -> Option<&'static str> {
    let col = order.split_whitespace().next()?;
    ["created_at"]
        .iter()
        .chain(COLUMNS)
        .find(|c| **c == col)
        .copied()
}

/// The plan of a page of `f` sorted by a column the rows hold ([`row_sort`], [`Plan::sorted_ids`]):
/// one header term with any terms of [`COLUMNS`] (none too) and any vhost limit.
pub fn sort_plan<'f>(
    c: &mut dyn crate::sql::Conn,
    f: &'f Filter,
) -> Result<Option<Plan<'f>>, ArchiveError> {
    let Some(t) = terms_with(f, 0) else {
        return Ok(None);
    };
    let wm = header_index::watermark(c)?;
    Ok(Some(Plan::new(c.dialect(), t, wm)))
}

/// The plan for `f` when [`terms`] accepts it, at the search index's watermark.
pub fn plan<'f>(
    c: &mut dyn crate::sql::Conn,
    f: &'f Filter,
) -> Result<Option<Plan<'f>>, ArchiveError> {
    let Some(t) = terms(f) else {
        return Ok(None);
    };
    let wm = header_index::watermark(c)?;
    Ok(Some(Plan::new(c.dialect(), t, wm)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_header_term_and_terms_of_the_columns_only() {
        let f = |pairs: &[(&str, &str)]| Filter::from_pairs(pairs.iter().copied()).expect("f");
        assert!(terms(&f(&[("status", "PENDING"), ("header.a", "b")])).is_some());
        assert!(terms(&f(&[("queue", "q"), ("status", "S"), ("header.a", "b")])).is_some());
        assert!(terms(&f(&[("original_queue", "q"), ("header.a", "b")])).is_some());
        assert!(terms(&f(&[("header.a", "b")])).is_none());
        assert!(terms(&f(&[("reason", "r"), ("header.a", "b")])).is_some());
        assert!(terms(&f(&[("content_type", "a/b"), ("header.a", "b")])).is_some());
        assert!(terms(&f(&[("key", "k"), ("header.a", "b")])).is_none());
        assert!(terms(&f(&[("error", "e"), ("header.a", "b")])).is_none());
        assert!(terms(&f(&[("status", "S"), ("header.a", "b"), ("header.c", "d")])).is_none());
        assert!(terms(&f(&[("queue", "q"), ("status", "S")])).is_none());
        assert!(terms(&f(&[("vhost", "/"), ("header.a", "b")])).is_some());
        let limited = f(&[("status", "S"), ("header.a", "b")]).within(Some(vec!["/".into()]));
        assert!(terms(&limited).is_some());
        let long = "v".repeat(MAX_BYTES);
        assert!(terms(&f(&[("status", "S"), ("header.a", long.as_str())])).is_none());
    }
}
