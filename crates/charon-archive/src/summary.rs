//! The maintained summary of the archive (migration 3, docs/archive.md): `dead_letter_groups`
//! holds one row per group of records with the number of records, the oldest and newest
//! `created_at`, the payload bytes and a sample error message. A group is keyed by (vhost, queue,
//! original_queue, reason, error_fingerprint, status) ([`Keys::V3`]); since migration 10 also by
//! content_type and original_exchange ([`Keys::V10`], `crate::summary_keys`). Triggers on
//! `dead_letters` keep it exact in the same transaction as every insert, update and delete (also
//! those a user runs with SQL): per row on SQLite, per statement with transition tables on
//! PostgreSQL. Groups and list totals over 1,000,000 records read it instead of counting records.

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::{Cell, Conn, Dialect, Param};

/// The columns a group is keyed by (the filters and `by` values the summary answers), since
/// migration 10.
pub const KEY_COLUMNS: &[&str] = &[
    "vhost",
    "queue",
    "original_queue",
    "reason",
    "error_fingerprint",
    "content_type",
    "original_exchange",
    "status",
];

/// Which key the summary's groups have: migration 3's six columns, or migration 10's eight.
/// Older migrations render their SQL with the key they had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keys {
    /// vhost, queue, original_queue, reason, error_fingerprint, status (migrations 3 to 9).
    V3,
    /// [`KEY_COLUMNS`]: also content_type and original_exchange (migration 10).
    V10,
}

impl Keys {
    /// The key columns that may be NULL, between `vhost, queue` and `status`.
    fn optional(self) -> &'static [&'static str] {
        match self {
            Keys::V3 => &["original_queue", "reason", "error_fingerprint"],
            Keys::V10 => &[
                "original_queue",
                "reason",
                "error_fingerprint",
                "content_type",
                "original_exchange",
            ],
        }
    }

    /// Every key column, in the summary's order.
    pub fn columns(self) -> Vec<&'static str> {
        let mut v = vec!["vhost", "queue"];
        v.extend(self.optional());
        v.push("status");
        v
    }

    /// The key columns of `r` (e.g. `new.`), comma-separated, as [`Keys::columns`].
    pub fn list(self, r: &str) -> String {
        self.columns()
            .iter()
            .map(|c| format!("{r}{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The summary's columns an INSERT names.
    pub fn insert_cols(self) -> String {
        format!(
            "group_key, {}, records, oldest, newest, payload_bytes, error_message",
            self.list("")
        )
    }
}

/// Migration 3; `{GROUPS_TRIGGERS}` and `{KEY}` are rendered per dialect by [`render`].
pub const V3_GROUPS: &str = "
CREATE TABLE dead_letter_groups (
    group_key TEXT PRIMARY KEY,
    vhost TEXT NOT NULL,
    queue TEXT NOT NULL,
    original_queue TEXT,
    reason TEXT,
    error_fingerprint TEXT,
    status TEXT NOT NULL,
    records BIGINT NOT NULL,
    oldest BIGINT NOT NULL,
    newest BIGINT NOT NULL,
    payload_bytes BIGINT NOT NULL,
    error_message TEXT
);
DROP INDEX dead_letters_groups;
CREATE INDEX dead_letters_group_key ON dead_letters (({KEY}), created_at);
{ID_INDEX}
INSERT INTO dead_letter_groups (group_key, vhost, queue, original_queue, reason, error_fingerprint, status, records, oldest, newest, payload_bytes, error_message)
    SELECT {KEY}, vhost, queue, original_queue, reason, error_fingerprint, status, COUNT(*), MIN(created_at), MAX(created_at), SUM(payload_bytes), MIN(error_message)
    FROM dead_letters GROUP BY vhost, queue, original_queue, reason, error_fingerprint, status;
{GROUPS_TRIGGERS}
";

/// The group key of a `dead_letters` row (columns prefixed by `p`, e.g. `new.`) as migration 3
/// has it ([`Keys::V3`]): each part length-prefixed, NULL as `-`, so that different groups never
/// share a key. The same expression (with no prefix) is indexed on PostgreSQL
/// (`dead_letters_group_key`), so the oldest/newest of a group is one index seek.
pub fn key_expr(p: &str) -> String {
    key_expr_of(Keys::V3, p)
}

/// The group key of `keys` (see [`key_expr`]).
pub fn key_expr_of(keys: Keys, p: &str) -> String {
    let part = |c: &str| format!("CAST(length({p}{c}) AS TEXT) || ':' || {p}{c}");
    let mut parts = vec![part("vhost"), part("queue")];
    parts.extend(
        keys.optional()
            .iter()
            .map(|c| format!("COALESCE({}, '-')", part(c))),
    );
    parts.push(format!("{p}status"));
    parts.join(" || ")
}

/// SQLite: one row `r` (`new`) counted into its group.
pub(crate) fn sqlite_add(keys: Keys, r: &str) -> String {
    format!(
        "INSERT INTO dead_letter_groups ({cols}) VALUES ({k}, {vals}, 1, {r}.created_at, {r}.created_at, {r}.payload_bytes, {r}.error_message) \
         ON CONFLICT (group_key) DO UPDATE SET records = records + 1, oldest = min(oldest, excluded.oldest), newest = max(newest, excluded.newest), \
         payload_bytes = payload_bytes + excluded.payload_bytes, error_message = COALESCE(error_message, excluded.error_message);",
        cols = keys.insert_cols(),
        vals = keys.list(&format!("{r}.")),
        k = key_expr_of(keys, &format!("{r}."))
    )
}

/// SQLite (migration 3): the records of row `r`'s group, through the group key's expression
/// index `dead_letters_group_key`.
fn sqlite_same_group_by_key(keys: Keys, r: &str) -> String {
    format!(
        "{} = {}",
        key_expr_of(keys, ""),
        key_expr_of(keys, &format!("{r}."))
    )
}

/// SQLite (migration 6): the records of row `r`'s group, through the column index
/// `dead_letters_group` (`IS` matches NULLs and is an index equality in SQLite). Migration 10's
/// two more columns are not in that index: they filter the records of the index range, which
/// SQLite walks in `created_at` order for the MIN/MAX, stopping at the first that matches.
pub(crate) fn sqlite_same_group_by_columns(keys: Keys, r: &str) -> String {
    let mut c = format!("vhost = {r}.vhost AND queue = {r}.queue");
    for col in keys.optional() {
        c.push_str(&format!(" AND {col} IS {r}.{col}"));
    }
    c.push_str(&format!(" AND status = {r}.status"));
    c
}

/// SQLite: the statements that take row `r` (`old`) out of its group; a removed bound is looked
/// up again among the records `same_group` selects, unless the group empties (its row goes:
/// since migration 10 such a lookup could walk a whole six-column index range for nothing).
fn sqlite_sub(keys: Keys, r: &str, same_group: fn(Keys, &str) -> String) -> String {
    let k = key_expr_of(keys, &format!("{r}."));
    let g = same_group(keys, r);
    format!(
        "UPDATE dead_letter_groups SET records = records - 1, payload_bytes = payload_bytes - {r}.payload_bytes, \
         oldest = CASE WHEN {r}.created_at <= oldest AND records > 1 THEN COALESCE((SELECT MIN(created_at) FROM dead_letters WHERE {g}), oldest) ELSE oldest END, \
         newest = CASE WHEN {r}.created_at >= newest AND records > 1 THEN COALESCE((SELECT MAX(created_at) FROM dead_letters WHERE {g}), newest) ELSE newest END \
         WHERE group_key = {k};
         DELETE FROM dead_letter_groups WHERE group_key = {k} AND records <= 0;"
    )
}

/// SQLite: the delete and update triggers (bounds looked up through `same_group`).
pub(crate) fn sqlite_remove_triggers(keys: Keys, same_group: fn(Keys, &str) -> String) -> String {
    let sub = |r: &str| sqlite_sub(keys, r, same_group);
    format!(
        "CREATE TRIGGER dead_letter_groups_delete AFTER DELETE ON dead_letters BEGIN {del} END;
CREATE TRIGGER dead_letter_groups_update AFTER UPDATE OF {cols}, payload_bytes, created_at ON dead_letters
    WHEN {ko} <> {kn} OR old.payload_bytes <> new.payload_bytes OR old.created_at <> new.created_at
    BEGIN {del_old} {ins_new} END;",
        cols = keys.list(""),
        del = sub("old"),
        ko = key_expr_of(keys, "old."),
        kn = key_expr_of(keys, "new."),
        del_old = sub("old"),
        ins_new = sqlite_add(keys, "new"),
    )
}

/// SQLite: row triggers (migration 3).
fn sqlite_triggers() -> String {
    format!(
        "CREATE TRIGGER dead_letter_groups_insert AFTER INSERT ON dead_letters BEGIN {ins} END;
{remove}",
        ins = sqlite_add(Keys::V3, "new"),
        remove = sqlite_remove_triggers(Keys::V3, sqlite_same_group_by_key),
    )
}

/// PostgreSQL: the rows of `from` (aliased `r`) counted into their groups.
pub(crate) fn postgres_add(keys: Keys, from: &str) -> String {
    format!(
        "INSERT INTO dead_letter_groups AS g ({cols}) \
         SELECT {k}, {vals}, COUNT(*), MIN(r.created_at), MAX(r.created_at), SUM(r.payload_bytes), MIN(r.error_message) \
         FROM {from} GROUP BY {vals} \
         ON CONFLICT (group_key) DO UPDATE SET records = g.records + excluded.records, oldest = LEAST(g.oldest, excluded.oldest), \
         newest = GREATEST(g.newest, excluded.newest), payload_bytes = g.payload_bytes + excluded.payload_bytes, \
         error_message = COALESCE(g.error_message, excluded.error_message);",
        cols = keys.insert_cols(),
        vals = keys.list("r."),
        k = key_expr_of(keys, "r.")
    )
}

/// PostgreSQL: the records of summary row `g`'s group, through the expression index
/// `dead_letters_group_key` (migration 3's key; migration 10's two more columns filter the
/// index range, walked in `created_at` order for the MIN/MAX).
fn postgres_same_group(keys: Keys) -> String {
    let bare = key_expr("");
    match keys {
        Keys::V3 => format!("{bare} = g.group_key"),
        Keys::V10 => format!(
            "{bare} = {} AND content_type IS NOT DISTINCT FROM g.content_type \
             AND original_exchange IS NOT DISTINCT FROM g.original_exchange",
            key_expr("g.")
        ),
    }
}

/// How PostgreSQL's remove triggers look a group's removed bound up again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bounds {
    /// Through the group key's expression index `dead_letters_group_key` (migrations 3 to 20).
    KeyIndex,
    /// Through the group summary per second and `dead_letters_created` (migration 21,
    /// `crate::group_bounds`): the expression index is gone.
    Seconds,
    /// The same, the walk from the group's bound before the statement too (migration 30,
    /// `crate::group_bounds::bound_from`).
    SecondsFrom,
}

/// PostgreSQL: the new oldest (`newest`: false) or newest bound of summary row `g`'s group.
fn postgres_bound(keys: Keys, bounds: Bounds, newest: bool) -> String {
    match bounds {
        Bounds::KeyIndex => {
            let same = postgres_same_group(keys);
            let agg = if newest { "MAX" } else { "MIN" };
            format!("(SELECT {agg}(created_at) FROM dead_letters WHERE {same})")
        }
        Bounds::Seconds => crate::group_bounds::bound(newest),
        Bounds::SecondsFrom => crate::group_bounds::bound_from(newest),
    }
}

/// PostgreSQL: the rows of `from` (aliased `r`) taken out of their groups; a removed bound is
/// looked up again unless the group empties.
fn postgres_sub(keys: Keys, bounds: Bounds, from: &str) -> String {
    format!(
        "UPDATE dead_letter_groups AS g SET records = g.records - d.n, payload_bytes = g.payload_bytes - d.b, \
         oldest = CASE WHEN d.mn <= g.oldest AND g.records > d.n THEN COALESCE({lo}, g.oldest) ELSE g.oldest END, \
         newest = CASE WHEN d.mx >= g.newest AND g.records > d.n THEN COALESCE({hi}, g.newest) ELSE g.newest END \
         FROM (SELECT {k} AS k, COUNT(*) AS n, SUM(r.payload_bytes) AS b, MIN(r.created_at) AS mn, MAX(r.created_at) AS mx FROM {from} GROUP BY 1) AS d \
         WHERE g.group_key = d.k;
         DELETE FROM dead_letter_groups WHERE records <= 0;",
        k = key_expr_of(keys, "r."),
        lo = postgres_bound(keys, bounds, false),
        hi = postgres_bound(keys, bounds, true),
    )
}

/// PostgreSQL: the bodies (`BEGIN … END`) of the delete and update trigger functions.
pub(crate) fn postgres_remove_bodies(keys: Keys, bounds: Bounds) -> (String, String) {
    // Rows of an UPDATE whose group, size or time changed.
    let changed = |side: &str| {
        format!(
            "(SELECT {side}.* FROM old_rows o JOIN new_rows n ON n.id = o.id \
             WHERE {ko} <> {kn} OR o.payload_bytes <> n.payload_bytes OR o.created_at <> n.created_at) AS r",
            ko = key_expr_of(keys, "o."),
            kn = key_expr_of(keys, "n.")
        )
    };
    (
        format!(
            "BEGIN {} RETURN NULL; END",
            postgres_sub(keys, bounds, "old_rows AS r")
        ),
        format!(
            "BEGIN {} {} RETURN NULL; END",
            postgres_sub(keys, bounds, &changed("o")),
            postgres_add(keys, &changed("n"))
        ),
    )
}

/// PostgreSQL: statement triggers with transition tables (one aggregated change per statement).
fn postgres_triggers() -> String {
    let (del, upd) = postgres_remove_bodies(Keys::V3, Bounds::KeyIndex);
    format!(
        "CREATE FUNCTION dead_letter_groups_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {ins} RETURN NULL; END $$;
CREATE FUNCTION dead_letter_groups_delete() RETURNS trigger LANGUAGE plpgsql AS $$ {del} $$;
CREATE FUNCTION dead_letter_groups_update() RETURNS trigger LANGUAGE plpgsql AS $$ {upd} $$;
CREATE TRIGGER dead_letter_groups_insert AFTER INSERT ON dead_letters REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_groups_insert();
CREATE TRIGGER dead_letter_groups_delete AFTER DELETE ON dead_letters REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_groups_delete();
CREATE TRIGGER dead_letter_groups_update AFTER UPDATE ON dead_letters REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_groups_update();",
        ins = postgres_add(Keys::V3, "new_rows AS r"),
    )
}

/// Renders the migration's dialect parts.
pub fn render(sql: &str, d: Dialect) -> String {
    if !sql.contains("{GROUPS_TRIGGERS}") {
        return sql.to_string();
    }
    let triggers = match d {
        Dialect::Sqlite => sqlite_triggers(),
        Dialect::Postgres => postgres_triggers(),
    };
    // SQLite: ids in an index of their own, so that paging deep by id skips 8-byte index
    // entries instead of whole rows (PostgreSQL's primary key index does that already).
    let id_index = match d {
        Dialect::Sqlite => "CREATE INDEX dead_letters_id ON dead_letters (id);",
        Dialect::Postgres => "",
    };
    sql.replace("{KEY}", &key_expr(""))
        .replace("{ID_INDEX}", id_index)
        .replace("{GROUPS_TRIGGERS}", &triggers)
}

/// Whether the summary answers `f` (its conditions name only key columns, which the summary
/// has under the same names): then its SQL condition applies to `dead_letter_groups` as is.
pub fn answers(f: &Filter) -> bool {
    f.terms.keys().all(|k| KEY_COLUMNS.contains(&k.as_str()))
}

/// How many records the summary counts under `cond` (a condition on its columns, `TRUE` for
/// all), with `params`: no record read.
pub fn records(c: &mut dyn Conn, cond: &str, params: &[Param]) -> Result<i64, ArchiveError> {
    Ok(c.query(
        &format!(
            "SELECT CAST(COALESCE(SUM(records), 0) AS BIGINT) FROM dead_letter_groups WHERE {cond}"
        ),
        params,
    )?
    .first()
    .and_then(|r| r.first())
    .map_or(0, Cell::int))
}

/// Whether the summary can group by `cols`.
pub fn groups_by(cols: &[String]) -> bool {
    cols.iter().all(|c| KEY_COLUMNS.contains(&c.as_str()))
}
