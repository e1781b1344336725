//! The `total` of a time range (`since`/`until`) combined with exact filters on the group key,
//! counted from the group index without reading a record (SQLite; docs/archive.md "Seventeenth
//! round").
//!
//! `dead_letters_group` (migration 6) is a B-tree on `(vhost, queue, original_queue, reason,
//! error_fingerprint, status, created_at)`: for one value of its six key columns, the records
//! of a time range are one range of it. The summary `dead_letter_groups` holds a row for every
//! group that has a record (it is exact: the list's `total` of such filters is read from it), so
//! the records matching `status = 'SKIPPED' AND created_at >= ?` are exactly the union, over the
//! summary's distinct six-column keys with that status, of those index ranges: counted entry by
//! entry in the index, never reading a record (plain `COUNT(*)` read every SKIPPED record for its
//! time, or every record of the range for its status: 100,000 rows, 1–6 s over 1,000,000).
//!
//! Taken only when every other filter term is one of the six columns (content type and exchange
//! are in the summary's key but not in the index), at least one such term is given (a range alone
//! is counted from `dead_letters_created`, already without reading records), the index exists
//! with exactly these columns (another branch may change the index set: then the plain count),
//! and the summary has at most [`MAX_GROUPS`] keys matching (one index seek each).
//!
//! A page of such a filter in id order ([`ids_query`]) takes its ids from the same index ranges
//! (each entry holds the record's id) and keeps the first `offset + page_size` of them in id
//! order: it reads index entries, never records (the plain page read every match's record for its
//! time or status before sorting them by `id + 0`).
//!
//! PostgreSQL (migration 16, [`v16`], docs/archive.md "Twentieth round"): its group index is an
//! expression index (no index-only scan), so a range with a `status` term read every record of
//! the range for its status (1.3 s over 1,000,000). Migration 16 rebuilds `dead_letters_status`
//! as `(status, id) INCLUDE (created_at)`: the same key and order, one index as before, each entry
//! 8 bytes wider; the planner counts such a filter by an index-only scan of the status's entries
//! with the time checked in the entry, and ([`status_walk`]) a page in id order walks that index
//! backwards from the newest entry of the status, reading no record.

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::{Conn, Dialect, Param};
use crate::time::parse_time;

/// The index's key columns, in its order (then `created_at`).
const KEY: [&str; 6] = [
    "vhost",
    "queue",
    "original_queue",
    "reason",
    "error_fingerprint",
    "status",
];

/// The index as migration 6 creates it; any other definition turns the path off.
const INDEX_SQL: &str = "CREATE INDEX dead_letters_group ON dead_letters (vhost, queue, original_queue, reason, error_fingerprint, status, created_at)";

/// At most this many keys are counted one seek each; more, and the plain count runs.
pub const MAX_GROUPS: i64 = 4096;

/// Migration 16: PostgreSQL's `dead_letters_status` with `created_at` in its entries (see the
/// module docs); nothing on SQLite, whose group index already answers these filters.
pub fn v16(d: Dialect) -> String {
    match d {
        Dialect::Sqlite => "SELECT 1".into(),
        Dialect::Postgres => "DROP INDEX dead_letters_status;
CREATE INDEX dead_letters_status ON dead_letters (status, id) INCLUDE (created_at);"
            .into(),
    }
}

/// Whether a page of `f` in id order may be left to PostgreSQL's own order by `id` rather than
/// `id + 0`: a time range whose only other term is `status` (and no vhost limit), answered by
/// migration 16's index walked backwards with the time read from its entries (a range far in
/// the past visits the status's newer entries, never a record: at most every entry of the
/// status). The `+ 0` stays for every other ranged filter (the primary key walked backwards
/// reads each newer record).
pub fn status_walk(d: Dialect, f: &Filter) -> bool {
    d == Dialect::Postgres
        && f.vhosts.is_none()
        && f.terms.contains_key("status")
        && f.terms
            .keys()
            .all(|k| matches!(k.as_str(), "status" | "since" | "until"))
}

/// The matched keys and range of `f` (see the module docs): the join of the summary's distinct
/// keys with `dead_letters` read through the group index, its parameters, or `None`.
fn plan(c: &mut dyn Conn, f: &Filter) -> Result<Option<(String, Vec<Param>)>, ArchiveError> {
    if c.dialect() != Dialect::Sqlite {
        return Ok(None);
    }
    let mut range = Vec::new();
    let mut params = Vec::new();
    let mut keys = Filter {
        terms: Default::default(),
        vhosts: f.vhosts.clone(),
    };
    for (k, v) in &f.terms {
        match k.as_str() {
            "since" | "until" => {
                let Some(t) = parse_time(v) else {
                    return Ok(None); // the plain path reports the error
                };
                range.push(if k == "since" {
                    "d.created_at >= ?"
                } else {
                    "d.created_at < ?"
                });
                params.push(Param::from(t));
            }
            key if KEY.contains(&key) => {
                keys.terms.insert(k.clone(), v.clone());
            }
            _ => return Ok(None),
        }
    }
    if range.is_empty() || keys.terms.is_empty() {
        return Ok(None);
    }
    let index = c.query(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'dead_letters_group'",
        &[],
    )?;
    if index.first().and_then(|r| r.first()).map(|v| v.text()) != Some(INDEX_SQL.to_string()) {
        return Ok(None);
    }
    let (cond, mut key_params) = keys.to_sql(Dialect::Sqlite)?;
    let groups = format!(
        "SELECT DISTINCT {} FROM dead_letter_groups WHERE {cond}",
        KEY.join(", ")
    );
    let n = c
        .query(&format!("SELECT COUNT(*) FROM ({groups})"), &key_params)?
        .first()
        .and_then(|r| r.first())
        .map_or(0, |v| v.int());
    if n > MAX_GROUPS {
        return Ok(None);
    }
    // `IS`: the optional columns may be NULL (SQLite seeks an index on `IS` as on `=`).
    let same: Vec<String> = KEY.iter().map(|k| format!("d.{k} IS g.{k}")).collect();
    let sql = format!(
        "FROM ({groups}) AS g, dead_letters AS d INDEXED BY dead_letters_group WHERE {} AND {}",
        same.join(" AND "),
        range.join(" AND ")
    );
    key_params.append(&mut params);
    Ok(Some((sql, key_params)))
}

/// The count statement of `f` and its parameters, when the group index answers it (see the
/// module docs), else `None`.
pub fn query(c: &mut dyn Conn, f: &Filter) -> Result<Option<(String, Vec<Param>)>, ArchiveError> {
    Ok(plan(c, f)?.map(|(from, p)| (format!("SELECT COUNT(*) {from}"), p)))
}

/// The first `reach` ids of `f` in id order (`desc`: newest first) as a query of one `id`
/// column, when the group index answers `f`, else `None`.
pub fn ids_query(
    c: &mut dyn Conn,
    f: &Filter,
    desc: bool,
    reach: u64,
) -> Result<Option<(String, Vec<Param>)>, ArchiveError> {
    let dir = if desc { "DESC" } else { "ASC" };
    Ok(plan(c, f)?.map(|(from, p)| {
        (
            format!("SELECT d.id AS id {from} ORDER BY d.id {dir} LIMIT {reach}"),
            p,
        )
    }))
}
