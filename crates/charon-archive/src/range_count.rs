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
//! The per-key counts (`Plan::per_key`, twenty-first round): a one-sided range is counted on
//! the smaller side of each key's index range — the range itself, or the key's summary
//! `records` minus the entries outside it — picked from the summary's oldest and newest time
//! (only the speed depends on the pick; both sides are exact in the same snapshot, the summary
//! being kept by triggers in each writing transaction). `/groups` of a time range with only key
//! terms (none, too) by key columns ([`groups_query`]) sums those per-key counts per group, with
//! each key's oldest and newest time in the range (one seek each) and a sample message from the
//! group's index ranges ([`Groups::sample`]): no record read except the sample's.
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

/// The key columns whose `(X, id)` index (migrations 5, 16 and 18, and `(reason, id)`) PostgreSQL
/// walks in id order for a page of a filter naming X.
const WALKED: [&str; 5] = [
    "queue",
    "original_queue",
    "error_fingerprint",
    "reason",
    "status",
];

/// Whether a page of `f` in id order (`desc`: newest first) reaching `reach` ids into `total`
/// matches may be left to PostgreSQL's own `ORDER BY id` (it walks an `(X, id)` index of one of
/// `f`'s key terms, testing the time on each entry, and stops after `reach` matches) rather than
/// `id + 0` (every match read and sorted: `since…&original_queue=orders-7&page=10`, 36,501
/// matches of 1,002,000, 0.6–0.8 s). Only the speed depends on this choice, the statement's
/// answer is the same. PostgreSQL: a time range whose other terms are summary key columns, one
/// of them in [`WALKED`]. The walk starts at the order's end: it visits the key's records on the
/// far side of the range first (`desc`: those at or after `until`; ascending: those before
/// `since`), at most the key terms' records outside the range ([`far_side`], from the summary),
/// then about `reach` matches (a record's time is its archiving time, so the range's
/// records are together in id order). It is taken when that is no more than the `total` matches
/// the `+ 0` plan reads, and the page lies within the matches (else the walk runs on through the
/// other side of the range to the key's end).
pub fn key_walk(
    c: &mut dyn Conn,
    f: &Filter,
    desc: bool,
    reach: u64,
    total: i64,
) -> Result<bool, ArchiveError> {
    if c.dialect() != Dialect::Postgres
        || !f.terms.keys().any(|k| WALKED.contains(&k.as_str()))
        || range_terms(f, crate::summary::KEY_COLUMNS, true).is_none()
    {
        return Ok(false);
    }
    let reach = i64::try_from(reach).unwrap_or(i64::MAX);
    if reach > total {
        return Ok(false);
    }
    Ok(far_side(c, f, desc, total)?.saturating_add(reach) <= total)
}

/// At least how many records of `f`'s key terms lie beyond its range on the side a walk in id
/// order starts from (`desc`: at or after `until`; ascending: before `since`): 0 without that
/// bound, else every record of the key terms outside the range — the summary's records of the
/// key terms (`dead_letter_groups`, a few rows) less the range's `total`. That is exact for a
/// one-sided range and an upper bound for a two-sided one (only the speed depends on it). The
/// exact far side from the summary per second would sum one row per group and second of the
/// complementary range: a month's worth for a short range early in a long-lived archive.
pub(crate) fn far_side(
    c: &mut dyn Conn,
    f: &Filter,
    desc: bool,
    total: i64,
) -> Result<i64, ArchiveError> {
    let bound = if desc { "until" } else { "since" };
    if !f.terms.contains_key(bound) {
        return Ok(0);
    }
    let mut keys = f.clone();
    keys.terms.remove("since");
    keys.terms.remove("until");
    let (cond, p) = keys.to_sql(c.dialect())?;
    let all = crate::summary::records(c, &cond, &p)?;
    Ok(all.saturating_sub(total).max(0))
}

/// The matched keys and range of a filter the group index answers (see the module docs).
struct Plan {
    /// The key terms' condition on the summary's (and the records') columns, and its parameters.
    cond: String,
    key_params: Vec<Param>,
    /// The range's bounds: `created_at >= since`, `created_at < until`.
    since: Option<i64>,
    until: Option<i64>,
}

/// A time range whose other terms are all among `columns`: its bounds and those terms (with
/// `f`'s vhost limit). `None` when a term names another column, a time does not parse (the
/// plain path reports it), there is no bound, or `keyed` and there is no other term. Shared by
/// this module (SQLite) and `summary_seconds` (PostgreSQL).
pub(crate) fn range_terms(
    f: &Filter,
    columns: &[&str],
    keyed: bool,
) -> Option<(Option<i64>, Option<i64>, Filter)> {
    let (mut since, mut until) = (None, None);
    let mut keys = Filter {
        terms: Default::default(),
        vhosts: f.vhosts.clone(),
    };
    for (k, v) in &f.terms {
        match k.as_str() {
            "since" => since = Some(parse_time(v)?),
            "until" => until = Some(parse_time(v)?),
            key if columns.contains(&key) => {
                keys.terms.insert(k.clone(), v.clone());
            }
            _ => return None,
        }
    }
    if (since.is_none() && until.is_none()) || (keyed && keys.terms.is_empty()) {
        return None;
    }
    Some((since, until, keys))
}

/// `f`'s plan when the group index answers it (`keyed`: at least one key term required), else
/// `None`.
fn plan(c: &mut dyn Conn, f: &Filter, keyed: bool) -> Result<Option<Plan>, ArchiveError> {
    if c.dialect() != Dialect::Sqlite {
        return Ok(None);
    }
    let Some((since, until, keys)) = range_terms(f, &KEY, keyed) else {
        return Ok(None);
    };
    let index = c.query(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'dead_letters_group'",
        &[],
    )?;
    if index.first().and_then(|r| r.first()).map(|v| v.text()) != Some(INDEX_SQL.to_string()) {
        return Ok(None);
    }
    let (cond, key_params) = keys.to_sql(Dialect::Sqlite)?;
    let n = c
        .query(
            &format!(
                "SELECT COUNT(*) FROM (SELECT DISTINCT {} FROM dead_letter_groups WHERE {cond})",
                KEY.join(", ")
            ),
            &key_params,
        )?
        .first()
        .and_then(|r| r.first())
        .map_or(0, |v| v.int());
    if n > MAX_GROUPS {
        return Ok(None);
    }
    Ok(Some(Plan {
        cond,
        key_params,
        since,
        until,
    }))
}

impl Plan {
    /// The join of the summary's distinct keys with `dead_letters` read through the group index
    /// (`FROM …`, one row per matching record), and its parameters.
    fn from(&self) -> (String, Vec<Param>) {
        // `IS`: the optional columns may be NULL (SQLite seeks an index on `IS` as on `=`).
        let same: Vec<String> = KEY.iter().map(|k| format!("d.{k} IS g.{k}")).collect();
        let mut range = Vec::new();
        let mut p = self.key_params.clone();
        if let Some(t) = self.since {
            range.push("d.created_at >= ?");
            p.push(Param::from(t));
        }
        if let Some(t) = self.until {
            range.push("d.created_at < ?");
            p.push(Param::from(t));
        }
        let sql = format!(
            "FROM (SELECT DISTINCT {} FROM dead_letter_groups WHERE {}) AS g, \
             dead_letters AS d INDEXED BY dead_letters_group WHERE {} AND {}",
            KEY.join(", "),
            self.cond,
            same.join(" AND "),
            range.join(" AND ")
        );
        (sql, p)
    }

    /// One row per matched six-column key (`r`, a materialized CTE: its counts run once): the
    /// key, `n` (its records in the range) and, with `bounds`, `lo`/`hi` (their oldest and
    /// newest time; one index seek each). A one-sided range counts the smaller side of the
    /// key's index range — the range itself, or the key's summary `records` minus the rest —
    /// guessed from the summary's oldest and newest time (a guess only picks the side, both
    /// are exact): counting is per index entry, a seek is not.
    fn per_key(&self, bounds: bool) -> (String, Vec<Param>) {
        let same: Vec<String> = KEY.iter().map(|k| format!("d.{k} IS k.{k}")).collect();
        let count = |range: &str| {
            format!(
                "(SELECT COUNT(*) FROM dead_letters AS d INDEXED BY dead_letters_group WHERE {} AND {range})",
                same.join(" AND ")
            )
        };
        let mut p = Vec::new();
        let n = match (self.since, self.until) {
            (Some(s), Some(u)) => {
                p.extend([Param::from(s), Param::from(u)]);
                count("d.created_at >= ? AND d.created_at < ?")
            }
            (Some(s), None) => {
                p.extend([Param::from(s), Param::from(s), Param::from(s)]);
                format!(
                    "CASE WHEN ? * 2 > k.oldest + k.newest THEN {} ELSE k.records - {} END",
                    count("d.created_at >= ?"),
                    count("d.created_at < ?")
                )
            }
            (None, Some(u)) => {
                p.extend([Param::from(u), Param::from(u), Param::from(u)]);
                format!(
                    "CASE WHEN ? * 2 < k.oldest + k.newest THEN {} ELSE k.records - {} END",
                    count("d.created_at < ?"),
                    count("d.created_at >= ?")
                )
            }
            (None, None) => "k.records".into(),
        };
        let mut cols = format!("{n} AS n");
        if bounds {
            let mut range = Vec::new();
            for (b, op) in [(self.since, ">="), (self.until, "<")] {
                if let Some(t) = b {
                    range.push(format!("d.created_at {op} ?"));
                    p.push(Param::from(t));
                }
            }
            let range = range.join(" AND ");
            for (agg, name) in [("MIN", "lo"), ("MAX", "hi")] {
                cols.push_str(&format!(
                    ", (SELECT {agg}(d.created_at) FROM dead_letters AS d INDEXED BY dead_letters_group WHERE {} AND {range}) AS {name}",
                    same.join(" AND ")
                ));
            }
            // The same bounds again for `hi`.
            let again: Vec<Param> = [self.since, self.until]
                .into_iter()
                .flatten()
                .map(Param::from)
                .collect();
            p.extend(again);
        }
        p.extend(self.key_params.iter().cloned());
        let key = KEY.join(", ");
        let k_cols: Vec<String> = KEY.iter().map(|k| format!("k.{k}")).collect();
        (
            format!(
                "WITH r AS MATERIALIZED (SELECT {}, {cols} FROM (SELECT {key}, SUM(records) AS records, \
                 MIN(oldest) AS oldest, MAX(newest) AS newest FROM dead_letter_groups WHERE {} \
                 GROUP BY {key}) AS k)",
                k_cols.join(", "),
                self.cond
            ),
            p,
        )
    }
}

/// The count statement of `f` and its parameters, when the group index answers it (see the
/// module docs), else `None`: the per-key counts of `Plan::per_key` summed.
pub fn query(c: &mut dyn Conn, f: &Filter) -> Result<Option<(String, Vec<Param>)>, ArchiveError> {
    Ok(plan(c, f, true)?.map(|pl| {
        let (with, p) = pl.per_key(false);
        (
            format!("{with} SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM r"),
            p,
        )
    }))
}

/// `/groups` of a time range with only group-key terms (none, too) by group-key columns, on the
/// group index (SQLite; [`groups_query`]).
pub struct Groups {
    plan: Plan,
    /// The statement giving per group `cols…, count, oldest, newest`, largest first.
    pub sql: String,
    /// Its parameters.
    pub params: Vec<Param>,
}

/// [`Groups`] for `f` by `cols` when the group index answers it and `cols` are among its key
/// columns, else `None`. Plain SQL read every record of the range (665,000 of 1,000,000: 1.7 s);
/// this counts index entries of the smaller side of each key's range (docs/archive.md
/// "Twenty-first round").
pub fn groups_query(
    c: &mut dyn Conn,
    f: &Filter,
    cols: &[String],
) -> Result<Option<Groups>, ArchiveError> {
    if !cols.iter().all(|col| KEY.contains(&col.as_str())) {
        return Ok(None);
    }
    Ok(plan(c, f, false)?.map(|plan| {
        let (with, params) = plan.per_key(true);
        let list = cols.join(", ");
        Groups {
            sql: format!(
                "{with} SELECT {list}, CAST(SUM(n) AS BIGINT), MIN(lo), MAX(hi) FROM r WHERE n > 0 \
                 GROUP BY {list} ORDER BY SUM(n) DESC"
            ),
            params,
            plan,
        }
    }))
}

impl Groups {
    /// A sample error message of the group whose `cols` have `values` (`None`: NULL): the first
    /// record with a message in the group index's ranges of the group's keys, and its
    /// parameters. (The plain lookup walked `(status, id)` or `(queue, id)` reading every
    /// record before the range: 50–450 ms a group.)
    pub fn sample(&self, cols: &[String], values: &[Option<String>]) -> (String, Vec<Param>) {
        let mut pl = Plan {
            cond: format!("({})", self.plan.cond),
            key_params: self.plan.key_params.clone(),
            since: self.plan.since,
            until: self.plan.until,
        };
        for (col, v) in cols.iter().zip(values) {
            match v {
                Some(v) => {
                    pl.cond.push_str(&format!(" AND {col} = ?"));
                    pl.key_params.push(Param::from(v.as_str()));
                }
                None => pl.cond.push_str(&format!(" AND {col} IS NULL")),
            }
        }
        let (from, p) = pl.from();
        (
            format!("SELECT d.error_message {from} AND d.error_message IS NOT NULL LIMIT 1"),
            p,
        )
    }
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
    Ok(plan(c, f, true)?.map(|pl| {
        let (from, p) = pl.from();
        (
            format!("SELECT d.id AS id {from} ORDER BY d.id {dir} LIMIT {reach}"),
            p,
        )
    }))
}
