//! The maintained summary of the archive (migration 3, docs/archive.md): `dead_letter_groups`
//! holds one row per (vhost, queue, original_queue, reason, error_fingerprint, status) with the
//! number of records, the oldest and newest `created_at`, the payload bytes and a sample error
//! message. Triggers on `dead_letters` keep it exact in the same transaction as every insert,
//! update and delete (also those a user runs with SQL): per row on SQLite, per statement with
//! transition tables on PostgreSQL. Groups and list totals over 1,000,000 records read it
//! instead of counting records.

use crate::filter::Filter;
use crate::sql::Dialect;

/// The columns a group is keyed by (the filters and `by` values the summary answers).
pub const KEY_COLUMNS: &[&str] = &[
    "vhost",
    "queue",
    "original_queue",
    "reason",
    "error_fingerprint",
    "status",
];

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

/// The group key of a `dead_letters` row (columns prefixed by `p`, e.g. `new.`): each part
/// length-prefixed, NULL as `-`, so that different groups never share a key. The same
/// expression (with no prefix) is indexed, so the oldest/newest of a group is one index seek.
pub fn key_expr(p: &str) -> String {
    let part = |c: &str| format!("CAST(length({p}{c}) AS TEXT) || ':' || {p}{c}");
    let opt = |c: &str| format!("COALESCE({}, '-')", part(c));
    format!(
        "{} || {} || {} || {} || {} || {p}status",
        part("vhost"),
        part("queue"),
        opt("original_queue"),
        opt("reason"),
        opt("error_fingerprint"),
    )
}

pub(crate) const INSERT_COLS: &str = "group_key, vhost, queue, original_queue, reason, error_fingerprint, status, records, oldest, newest, payload_bytes, error_message";

/// SQLite: one row `r` (`new`) counted into its group.
pub(crate) fn sqlite_add(r: &str) -> String {
    format!(
        "INSERT INTO dead_letter_groups ({INSERT_COLS}) VALUES ({k}, {r}.vhost, {r}.queue, {r}.original_queue, {r}.reason, {r}.error_fingerprint, {r}.status, 1, {r}.created_at, {r}.created_at, {r}.payload_bytes, {r}.error_message) \
         ON CONFLICT (group_key) DO UPDATE SET records = records + 1, oldest = min(oldest, excluded.oldest), newest = max(newest, excluded.newest), \
         payload_bytes = payload_bytes + excluded.payload_bytes, error_message = COALESCE(error_message, excluded.error_message);",
        k = key_expr(&format!("{r}."))
    )
}

/// SQLite (migration 3): the records of row `r`'s group, through the group key's expression
/// index `dead_letters_group_key`.
fn sqlite_same_group_by_key(r: &str) -> String {
    format!("{} = {}", key_expr(""), key_expr(&format!("{r}.")))
}

/// SQLite (migration 6): the records of row `r`'s group, through the column index
/// `dead_letters_group` (`IS` matches NULLs and is an index equality in SQLite).
pub(crate) fn sqlite_same_group_by_columns(r: &str) -> String {
    format!(
        "vhost = {r}.vhost AND queue = {r}.queue AND original_queue IS {r}.original_queue AND reason IS {r}.reason \
         AND error_fingerprint IS {r}.error_fingerprint AND status = {r}.status"
    )
}

/// SQLite: the statements that take row `r` (`old`) out of its group; a removed bound is looked
/// up again among the records `same_group` selects.
fn sqlite_sub(r: &str, same_group: fn(&str) -> String) -> String {
    let k = key_expr(&format!("{r}."));
    let g = same_group(r);
    format!(
        "UPDATE dead_letter_groups SET records = records - 1, payload_bytes = payload_bytes - {r}.payload_bytes, \
         oldest = CASE WHEN {r}.created_at <= oldest THEN COALESCE((SELECT MIN(created_at) FROM dead_letters WHERE {g}), oldest) ELSE oldest END, \
         newest = CASE WHEN {r}.created_at >= newest THEN COALESCE((SELECT MAX(created_at) FROM dead_letters WHERE {g}), newest) ELSE newest END \
         WHERE group_key = {k};
         DELETE FROM dead_letter_groups WHERE group_key = {k} AND records <= 0;"
    )
}

/// SQLite: the delete and update triggers (bounds looked up through `same_group`).
pub(crate) fn sqlite_remove_triggers(same_group: fn(&str) -> String) -> String {
    let sub = |r: &str| sqlite_sub(r, same_group);
    format!(
        "CREATE TRIGGER dead_letter_groups_delete AFTER DELETE ON dead_letters BEGIN {del} END;
CREATE TRIGGER dead_letter_groups_update AFTER UPDATE OF vhost, queue, original_queue, reason, error_fingerprint, status, payload_bytes, created_at ON dead_letters
    WHEN {ko} <> {kn} OR old.payload_bytes <> new.payload_bytes OR old.created_at <> new.created_at
    BEGIN {del_old} {ins_new} END;",
        del = sub("old"),
        ko = key_expr("old."),
        kn = key_expr("new."),
        del_old = sub("old"),
        ins_new = sqlite_add("new"),
    )
}

/// SQLite: row triggers (migration 3).
fn sqlite_triggers() -> String {
    format!(
        "CREATE TRIGGER dead_letter_groups_insert AFTER INSERT ON dead_letters BEGIN {ins} END;
{remove}",
        ins = sqlite_add("new"),
        remove = sqlite_remove_triggers(sqlite_same_group_by_key),
    )
}

/// PostgreSQL: the rows of `from` (aliased `r`) counted into their groups.
pub(crate) fn postgres_add(from: &str) -> String {
    format!(
        "INSERT INTO dead_letter_groups AS g ({INSERT_COLS}) \
         SELECT {k}, r.vhost, r.queue, r.original_queue, r.reason, r.error_fingerprint, r.status, COUNT(*), MIN(r.created_at), MAX(r.created_at), SUM(r.payload_bytes), MIN(r.error_message) \
         FROM {from} GROUP BY r.vhost, r.queue, r.original_queue, r.reason, r.error_fingerprint, r.status \
         ON CONFLICT (group_key) DO UPDATE SET records = g.records + excluded.records, oldest = LEAST(g.oldest, excluded.oldest), \
         newest = GREATEST(g.newest, excluded.newest), payload_bytes = g.payload_bytes + excluded.payload_bytes, \
         error_message = COALESCE(g.error_message, excluded.error_message);",
        k = key_expr("r.")
    )
}

/// PostgreSQL: statement triggers with transition tables (one aggregated change per statement).
fn postgres_triggers() -> String {
    let bare = key_expr("");
    let add = postgres_add;
    let sub = |from: &str| {
        format!(
            "UPDATE dead_letter_groups AS g SET records = g.records - d.n, payload_bytes = g.payload_bytes - d.b, \
             oldest = CASE WHEN d.mn <= g.oldest THEN COALESCE((SELECT MIN(created_at) FROM dead_letters WHERE {bare} = g.group_key), g.oldest) ELSE g.oldest END, \
             newest = CASE WHEN d.mx >= g.newest THEN COALESCE((SELECT MAX(created_at) FROM dead_letters WHERE {bare} = g.group_key), g.newest) ELSE g.newest END \
             FROM (SELECT {k} AS k, COUNT(*) AS n, SUM(r.payload_bytes) AS b, MIN(r.created_at) AS mn, MAX(r.created_at) AS mx FROM {from} GROUP BY 1) AS d \
             WHERE g.group_key = d.k;
             DELETE FROM dead_letter_groups WHERE records <= 0;",
            k = key_expr("r.")
        )
    };
    // Rows of an UPDATE whose group, size or time changed.
    let changed = |side: &str| {
        format!(
            "(SELECT {side}.* FROM old_rows o JOIN new_rows n ON n.id = o.id \
             WHERE {ko} <> {kn} OR o.payload_bytes <> n.payload_bytes OR o.created_at <> n.created_at) AS r",
            ko = key_expr("o."),
            kn = key_expr("n.")
        )
    };
    format!(
        "CREATE FUNCTION dead_letter_groups_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {ins} RETURN NULL; END $$;
CREATE FUNCTION dead_letter_groups_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {del} RETURN NULL; END $$;
CREATE FUNCTION dead_letter_groups_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {del_old} {ins_new} RETURN NULL; END $$;
CREATE TRIGGER dead_letter_groups_insert AFTER INSERT ON dead_letters REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_groups_insert();
CREATE TRIGGER dead_letter_groups_delete AFTER DELETE ON dead_letters REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_groups_delete();
CREATE TRIGGER dead_letter_groups_update AFTER UPDATE ON dead_letters REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_groups_update();",
        ins = add("new_rows AS r"),
        del = sub("old_rows AS r"),
        del_old = sub(&changed("o")),
        ins_new = add(&changed("n")),
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

/// Whether the summary can group by `cols`.
pub fn groups_by(cols: &[String]) -> bool {
    cols.iter().all(|c| KEY_COLUMNS.contains(&c.as_str()))
}
