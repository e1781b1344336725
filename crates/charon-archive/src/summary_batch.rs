//! A set-based status change of records counted into the summary once per group, not once per
//! row (docs/archive.md "Sixteenth round, writer"): replay's `UPDATE dead_letters SET status = …
//! WHERE id IN (…)` statements.
//!
//! On SQLite the summary's update trigger (`dead_letter_groups_update`, a row trigger) takes
//! each changed row out of its old group and into its new one, and a removed bound (the oldest
//! or newest `created_at`) is looked up again per row: since migration 10 through the
//! six-column index with the content type and exchange tested on each record of the range. A
//! replay moves each record twice (PENDING → PROCESSING → REPLAYED). Here the statement runs
//! with that trigger taken out of the transaction (dropped after reading its SQL from
//! `sqlite_schema`, created again before returning; no other connection ever sees the table
//! without it: the drop and the re-creation commit together or not at all), and the records'
//! groups are counted before and after it: one subtraction (with one bound lookup) per old group
//! and one upsert per new group, the same statements the trigger runs per row. PostgreSQL's
//! update trigger is a statement trigger already (one aggregated change per statement): there,
//! and on a database below version 10, the statement just runs.

use std::collections::HashMap;

use crate::error::ArchiveError;
use crate::sql::{Cell, Conn, Dialect, Param};
use crate::summary::{Keys, key_expr_of};

/// The summary's update trigger on `dead_letters` (migrations 3, 6 and 10).
const UPDATE_TRIGGER: &str = "dead_letter_groups_update";

/// One group's share of the changed records: count, bytes, oldest, newest, a sample message.
#[derive(Debug, Clone, PartialEq)]
struct Share {
    /// The key columns' values, in [`Keys::columns`] order.
    cols: Vec<Cell>,
    n: i64,
    bytes: i64,
    oldest: i64,
    newest: i64,
    sample: Option<String>,
}

/// Runs `sql` (an UPDATE of `dead_letters` whose rows are all among `ids`) inside the caller's
/// transaction and keeps the summary exact: on SQLite (schema version ≥ 10) with the update
/// trigger aside and the groups counted per group; otherwise as is. Returns the rows changed.
pub fn update_counted(
    c: &mut dyn Conn,
    sql: &str,
    p: &[Param],
    ids: &[i64],
) -> Result<u64, ArchiveError> {
    if c.dialect() != Dialect::Sqlite || ids.is_empty() {
        return c.exec(sql, p);
    }
    let trigger = c
        .query(
            "SELECT sql, (SELECT MAX(version) FROM archive_migrations) FROM sqlite_schema WHERE type = 'trigger' AND name = ?",
            &[UPDATE_TRIGGER.into()],
        )?
        .into_iter()
        .next();
    let Some(row) = trigger else {
        return c.exec(sql, p);
    };
    let (Some(trigger_sql), Some(10..)) = (
        row.first().and_then(Cell::opt_text),
        row.get(1).and_then(Cell::opt_int),
    ) else {
        return c.exec(sql, p);
    };
    let keys = Keys::V10;
    let before = shares(c, keys, ids)?;
    c.batch(&format!("DROP TRIGGER {UPDATE_TRIGGER}"))?;
    let changed = c.exec(sql, p);
    // The trigger comes back even when the statement failed (the caller rolls back anyway).
    let restored = c.batch(&trigger_sql);
    let changed = changed?;
    restored?;
    let after = shares(c, keys, ids)?;
    for (k, s) in &before {
        if after.get(k) != Some(s) {
            subtract(c, keys, k, s)?;
        }
    }
    for (k, s) in &after {
        if before.get(k) != Some(s) {
            add(c, keys, k, s)?;
        }
    }
    Ok(changed)
}

/// The records `ids` by group: key → share.
fn shares(
    c: &mut dyn Conn,
    keys: Keys,
    ids: &[i64],
) -> Result<HashMap<String, Share>, ArchiveError> {
    let cols = keys.list("");
    let width = keys.columns().len();
    let marks = vec!["?"; ids.len()].join(", ");
    let p: Vec<Param> = ids.iter().map(|i| Param::from(*i)).collect();
    let rows = c.query(
        &format!(
            "SELECT {k}, {cols}, COUNT(*), SUM(payload_bytes), MIN(created_at), MAX(created_at), MIN(error_message) \
             FROM dead_letters WHERE id IN ({marks}) GROUP BY {cols}",
            k = key_expr_of(keys, "")
        ),
        &p,
    )?;
    let mut m = HashMap::with_capacity(rows.len());
    for r in rows {
        let Some(Cell::Text(k)) = r.first().cloned() else {
            return Err(ArchiveError::Db("summary: a group without a key".into()));
        };
        let at = |i: usize| r.get(1 + width + i).map_or(0, Cell::int);
        m.insert(
            k,
            Share {
                cols: r[1..1 + width].to_vec(),
                n: at(0),
                bytes: at(1),
                oldest: at(2),
                newest: at(3),
                sample: r.get(1 + width + 4).and_then(Cell::opt_text),
            },
        );
    }
    Ok(m)
}

/// A key column's value as a parameter.
fn param(c: &Cell) -> Param {
    match c {
        Cell::Int(i) => Param::from(*i),
        Cell::Text(s) => Param::from(s.clone()),
        Cell::Null | Cell::Bytes(_) => Param::Text(None),
    }
}

/// Takes `s` out of group `k`; a removed bound is looked up again among the group's records
/// (migration 6's column condition, as the trigger's), unless the group empties (its row goes).
fn subtract(c: &mut dyn Conn, keys: Keys, k: &str, s: &Share) -> Result<(), ArchiveError> {
    let same: Vec<String> = keys
        .columns()
        .iter()
        .map(|col| format!("{col} IS ?"))
        .collect();
    let same = same.join(" AND ");
    let mut p: Vec<Param> = vec![s.n.into(), s.bytes.into(), s.oldest.into(), s.n.into()];
    p.extend(s.cols.iter().map(param));
    // Parameters in the order of their `?`s.
    p.extend([s.newest.into(), s.n.into()]);
    p.extend(s.cols.iter().map(param));
    p.push(k.into());
    c.exec(
        &format!(
            "UPDATE dead_letter_groups SET records = records - ?, payload_bytes = payload_bytes - ?, \
             oldest = CASE WHEN ? <= oldest AND records > ? THEN COALESCE((SELECT MIN(created_at) FROM dead_letters WHERE {same}), oldest) ELSE oldest END, \
             newest = CASE WHEN ? >= newest AND records > ? THEN COALESCE((SELECT MAX(created_at) FROM dead_letters WHERE {same}), newest) ELSE newest END \
             WHERE group_key = ?"
        ),
        &p,
    )?;
    c.exec(
        "DELETE FROM dead_letter_groups WHERE group_key = ? AND records <= 0",
        &[k.into()],
    )?;
    Ok(())
}

/// Counts `s` into group `k` (created when new).
fn add(c: &mut dyn Conn, keys: Keys, k: &str, s: &Share) -> Result<(), ArchiveError> {
    let width = s.cols.len();
    let marks = vec!["?"; width + 6].join(", ");
    let mut p: Vec<Param> = vec![k.into()];
    p.extend(s.cols.iter().map(param));
    p.extend([
        s.n.into(),
        s.oldest.into(),
        s.newest.into(),
        s.bytes.into(),
        s.sample.clone().into(),
    ]);
    c.exec(
        &format!(
            "INSERT INTO dead_letter_groups ({cols}) VALUES ({marks}) \
             ON CONFLICT (group_key) DO UPDATE SET records = records + excluded.records, oldest = min(oldest, excluded.oldest), \
             newest = max(newest, excluded.newest), payload_bytes = payload_bytes + excluded.payload_bytes, \
             error_message = COALESCE(error_message, excluded.error_message)",
            cols = keys.insert_cols(),
        ),
        &p,
    )?;
    Ok(())
}
