//! The group summary per second (migration 19, PostgreSQL; docs/archive.md "Twenty-second round
//! (branch `q9w`)"): `dead_letter_group_seconds` holds, for every group of `dead_letter_groups`
//! and every second (`floor(created_at / 1000)`) that has records of it, how many. Statement
//! triggers on `dead_letters` (transition tables, one aggregated change per statement, as the
//! summary's) keep it exact in the same transaction as every INSERT, DELETE and UPDATE, the
//! archiver's COPY and a user's SQL alike. Since migration 20 ([`v20`]) the insert trigger steps
//! aside for the archiver's batches, which count their records per group and second themselves
//! in the same transaction (`crate::pg_batch::upsert_seconds`), as they count the summary.
//!
//! It answers `/groups` and the list `total` of a time range (`since`/`until`) whose other terms
//! are all summary key columns (none, too, for `/groups`) by key columns, without reading every
//! record of the range (PostgreSQL's group index is an expression index: no index-only scan;
//! plain SQL read each record of the range, 716,000 of 1,000,000: 1.1 s): the whole seconds
//! inside the range are summed from this table (one row per group and second), the records of
//! the range's partial seconds at either end are read (at most two seconds of records), and each
//! group's oldest and newest time in the range are read from the records of its first and last
//! whole second in the range. Exact whatever the bounds: a bound inside a second leaves that
//! second to the record read.
//!
//! SQLite: no table (migration 19 is `SELECT 1`); its column group index answers these filters
//! already (`crate::range_count`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::{Conn, Dialect, Param};
use crate::summary::{KEY_COLUMNS, Keys, key_expr_of};

/// The migration's version.
pub const VERSION: i64 = 19;

/// Migration 20's version (docs/archive.md "Migration 20"): from it on the archiver counts its
/// own batches into the table ([`crate::pg_batch::upsert_seconds`]) and the insert trigger
/// steps aside for them.
pub const ARCHIVER_COUNTS: i64 = 20;

/// At most this many matched groups take this path (each adds its first and last second to the
/// records read); more, and the plain statement runs.
pub const MAX_GROUPS: usize = 1000;

/// `floor(x / 1000)` for a BIGINT expression `x` (PostgreSQL's `/` truncates toward zero).
fn second_of(x: &str) -> String {
    format!("(({x}) - ((({x}) % 1000) + 1000) % 1000) / 1000")
}

/// The rows of `from` (aliased `r`) per group key and second: `sec, k, n`.
fn group_second_counts(from: &str) -> String {
    let cols = Keys::V10.list("r.");
    format!(
        "SELECT r.sec, {k} AS k, r.n FROM (SELECT {cols}, {sec} AS sec, COUNT(*) AS n FROM {from} \
         GROUP BY {cols}, sec) AS r",
        k = key_expr_of(Keys::V10, "r."),
        sec = second_of("r.created_at"),
    )
}

/// Adds the rows of `from` (aliased `r`).
fn add(from: &str) -> String {
    format!(
        "INSERT INTO dead_letter_group_seconds AS s (second, group_key, records) {} \
         ON CONFLICT (second, group_key) DO UPDATE SET records = s.records + excluded.records;",
        group_second_counts(from)
    )
}

/// Takes the rows of `from` (aliased `r`) out; rows reaching 0 go.
fn sub(from: &str) -> String {
    let d = group_second_counts(from);
    format!(
        "UPDATE dead_letter_group_seconds AS s SET records = s.records - d.n FROM ({d}) AS d \
         WHERE s.second = d.sec AND s.group_key = d.k;
         DELETE FROM dead_letter_group_seconds AS s USING ({d}) AS d \
         WHERE s.second = d.sec AND s.group_key = d.k AND s.records <= 0;"
    )
}

/// Migration 19 (see the module docs).
pub fn v19(d: Dialect) -> String {
    if d == Dialect::Sqlite {
        return "SELECT 1".into();
    }
    // Rows of an UPDATE whose group or second changed.
    let changed = |side: &str| {
        format!(
            "(SELECT {side}.* FROM old_rows o JOIN new_rows n ON n.id = o.id \
             WHERE ({ko}) IS DISTINCT FROM ({kn}) OR {so} <> {sn}) AS r",
            ko = Keys::V10.list("o."),
            kn = Keys::V10.list("n."),
            so = second_of("o.created_at"),
            sn = second_of("n.created_at"),
        )
    };
    format!(
        "CREATE TABLE dead_letter_group_seconds (
    second BIGINT NOT NULL,
    group_key TEXT COLLATE \"C\" NOT NULL,
    records BIGINT NOT NULL,
    PRIMARY KEY (second, group_key)
);
INSERT INTO dead_letter_group_seconds (second, group_key, records) {fill};
CREATE FUNCTION dead_letter_group_seconds_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {ins} RETURN NULL; END $$;
CREATE FUNCTION dead_letter_group_seconds_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {del} RETURN NULL; END $$;
CREATE FUNCTION dead_letter_group_seconds_update() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {upd_old} {upd_new} RETURN NULL; END $$;
CREATE TRIGGER dead_letter_group_seconds_insert AFTER INSERT ON dead_letters REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_group_seconds_insert();
CREATE TRIGGER dead_letter_group_seconds_delete AFTER DELETE ON dead_letters REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_group_seconds_delete();
CREATE TRIGGER dead_letter_group_seconds_update AFTER UPDATE ON dead_letters REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dead_letter_group_seconds_update();
ANALYZE dead_letter_group_seconds;",
        fill = group_second_counts("dead_letters AS r"),
        ins = add("new_rows AS r"),
        del = sub("old_rows AS r"),
        upd_old = sub(&changed("o")),
        upd_new = add(&changed("n")),
    )
}

/// Migration 20 (PostgreSQL; SQLite: `SELECT 1`): the insert trigger's function replaced by one
/// that returns at once while the transaction holds the archiver's flag row
/// ([`crate::ingest::SUMMARY_FLAG`], the marker the group summary's insert trigger has skipped
/// on since migration 5). The archiver's batch then upserts its (second, group) counts itself,
/// in the same transaction ([`crate::pg_batch::upsert_seconds`]); every other INSERT (a user's
/// SQL, the bench's fill) is counted by the trigger as before. The delete and update triggers
/// are unchanged.
pub fn v20(d: Dialect) -> String {
    if d == Dialect::Sqlite {
        return "SELECT 1".into();
    }
    format!(
        "CREATE OR REPLACE FUNCTION dead_letter_group_seconds_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         IF EXISTS (SELECT 1 FROM archive_counters WHERE name = '{flag}') THEN RETURN NULL; END IF; {ins} RETURN NULL; END $$;",
        flag = crate::ingest::SUMMARY_FLAG,
        ins = add("new_rows AS r"),
    )
}

/// A time range with key terms the table answers: the key terms' condition (on the summary's
/// or the records' columns, unqualified) and the bounds.
pub struct Plan {
    cond: String,
    params: Vec<Param>,
    since: Option<i64>,
    until: Option<i64>,
}

/// `f`'s plan when the table answers it (`keyed`: at least one key term required), else `None`:
/// PostgreSQL at version 19, a range, every other term a summary key column.
pub fn plan(c: &mut dyn Conn, f: &Filter, keyed: bool) -> Result<Option<Plan>, ArchiveError> {
    if c.dialect() != Dialect::Postgres {
        return Ok(None);
    }
    let Some((since, until, keys)) = crate::range_count::range_terms(f, KEY_COLUMNS, keyed) else {
        return Ok(None);
    };
    let have = c.query(
        "SELECT 1 FROM archive_migrations WHERE version = ?",
        &[VERSION.into()],
    )?;
    if have.is_empty() {
        return Ok(None);
    }
    let (cond, params) = keys.to_sql(Dialect::Postgres)?;
    Ok(Some(Plan {
        cond,
        params,
        since,
        until,
    }))
}

/// One window of record times read: `[from, to)`, and whether its records are counted (a
/// partial second of the range) or only give bounds and a sample (a whole second, counted in
/// the table already).
struct Window {
    from: i64,
    to: i64,
    counted: bool,
}

impl Plan {
    /// The whole seconds inside the range, `[first, end)` (`None`: unbounded on that side).
    fn seconds(&self) -> (Option<i64>, Option<i64>) {
        (
            self.since
                .map(|s| s.div_euclid(1000) + i64::from(s.rem_euclid(1000) != 0)),
            self.until.map(|u| u.div_euclid(1000)),
        )
    }

    /// Whether the range has no whole second (then its records are all read).
    fn no_whole_second(&self) -> bool {
        matches!(self.seconds(), (Some(a), Some(b)) if a >= b)
    }

    /// The partial seconds at the range's ends, counted from the records.
    fn edges(&self) -> Vec<Window> {
        let (first, end) = self.seconds();
        if self.no_whole_second() {
            let (Some(s), Some(u)) = (self.since, self.until) else {
                return Vec::new();
            };
            return if s < u {
                vec![Window {
                    from: s,
                    to: u,
                    counted: true,
                }]
            } else {
                Vec::new()
            };
        }
        let mut out = Vec::new();
        if let (Some(s), Some(a)) = (self.since, first)
            && s < a * 1000
        {
            out.push(Window {
                from: s,
                to: a * 1000,
                counted: true,
            });
        }
        if let (Some(u), Some(b)) = (self.until, end)
            && b * 1000 < u
        {
            out.push(Window {
                from: b * 1000,
                to: u,
                counted: true,
            });
        }
        out
    }

    /// Per matched group key in the whole seconds: `group_key, records, first second, last
    /// second`, and its parameters.
    fn whole(&self) -> (String, Vec<Param>) {
        let mut p = self.params.clone();
        let mut range = Vec::new();
        let (first, end) = self.seconds();
        if self.no_whole_second() {
            range.push("FALSE".to_string());
        }
        if let Some(a) = first {
            range.push("s.second >= ?".into());
            p.push(a.into());
        }
        if let Some(b) = end {
            range.push("s.second < ?".into());
            p.push(b.into());
        }
        let range = if range.is_empty() {
            "TRUE".to_string()
        } else {
            range.join(" AND ")
        };
        (
            format!(
                "SELECT s.group_key, CAST(SUM(s.records) AS BIGINT), MIN(s.second), MAX(s.second) \
                 FROM dead_letter_group_seconds AS s \
                 JOIN (SELECT group_key FROM dead_letter_groups WHERE {}) AS g ON g.group_key = s.group_key \
                 WHERE {range} GROUP BY s.group_key",
                self.cond
            ),
            p,
        )
    }

    /// The records of `windows` matching the key terms, per group: the eight key columns, the
    /// group key, the counted windows' records, the oldest and newest time, the smallest error
    /// message.
    fn read(&self, windows: &[Window]) -> (String, Vec<Param>) {
        let mut p = Vec::new();
        let values: Vec<String> = windows
            .iter()
            .map(|w| {
                p.push(w.from.into());
                p.push(w.to.into());
                format!(
                    "(CAST(? AS BIGINT), CAST(? AS BIGINT), {})",
                    if w.counted { "TRUE" } else { "FALSE" }
                )
            })
            .collect();
        p.extend(self.params.iter().cloned());
        let cols = Keys::V10.list("d.");
        // LATERAL … OFFSET 0: one range scan of `dead_letters_created` per window. As a plain
        // join the planner, which cannot see the windows' widths, read all 1,000,000 records
        // (a parallel sequential scan: 1.5 s).
        (
            format!(
                "SELECT {cols}, {k}, COUNT(*) FILTER (WHERE d.counted), MIN(d.created_at), MAX(d.created_at), \
                 MIN(d.error_message) FROM (VALUES {}) AS w (a, z, counted), \
                 LATERAL (SELECT {cols}, d.created_at, d.error_message, w.counted FROM dead_letters AS d \
                 WHERE d.created_at >= w.a AND d.created_at < w.z AND {} OFFSET 0) AS d \
                 GROUP BY {cols}",
                values.join(", "),
                self.cond,
                k = key_expr_of(Keys::V10, "d."),
            ),
            p,
        )
    }
}

/// The list `total` of `f` when the table answers it (a range with at least one key term),
/// else `None`.
pub fn total(c: &mut dyn Conn, f: &Filter) -> Result<Option<i64>, ArchiveError> {
    let Some(plan) = plan(c, f, true)? else {
        return Ok(None);
    };
    let (sql, p) = plan.whole();
    let mut n: i64 = c.query(&sql, &p)?.iter().map(|r| r[1].int()).sum();
    let edges = plan.edges();
    if !edges.is_empty() {
        let (sql, p) = plan.read(&edges);
        n += c.query(&sql, &p)?.iter().map(|r| r[9].int()).sum::<i64>();
    }
    Ok(Some(n))
}

/// [`total`] as one statement (one row, one BIGINT column), for a caller that compares it with
/// another count in the same snapshot (`crate::id_bounds`); `None` as for [`total`].
pub fn total_query(
    c: &mut dyn Conn,
    f: &Filter,
) -> Result<Option<(String, Vec<Param>)>, ArchiveError> {
    let Some(plan) = plan(c, f, true)? else {
        return Ok(None);
    };
    let (whole, mut p) = plan.whole();
    let mut sql = format!("COALESCE((SELECT SUM(w.n) FROM ({whole}) AS w (k, n)), 0)");
    let edges = plan.edges();
    if !edges.is_empty() {
        let (read, q) = plan.read(&edges);
        p.extend(q);
        // `read`'s columns: the key columns, the group key, the counted records, ….
        let mut names: Vec<String> = Keys::V10
            .columns()
            .iter()
            .map(|c| format!("c_{c}"))
            .collect();
        names.extend(["k".to_string(), "n".to_string()]);
        sql.push_str(&format!(
            " + COALESCE((SELECT SUM(r.n) FROM ({read}) AS r ({})), 0)",
            names.join(", ")
        ));
    }
    Ok(Some((format!("SELECT CAST({sql} AS BIGINT)"), p)))
}

/// One group of the answer: count, oldest, newest, a sample message.
#[derive(Debug, Clone)]
pub struct Group {
    /// The `by` columns' values.
    pub values: Vec<Option<String>>,
    /// Records in the range.
    pub count: i64,
    /// Oldest and newest `created_at` in the range.
    pub oldest: i64,
    /// See `oldest`.
    pub newest: i64,
    /// The smallest error message among the records read for the group (`None`: none there).
    pub sample: Option<String>,
}

/// `/groups` of `f` by `cols` when the table answers it (a range with key terms only, by key
/// columns), largest first, else `None`.
pub fn groups(
    c: &mut dyn Conn,
    f: &Filter,
    cols: &[String],
) -> Result<Option<Vec<Group>>, ArchiveError> {
    if !cols.iter().all(|col| KEY_COLUMNS.contains(&col.as_str())) {
        return Ok(None);
    }
    let Some(plan) = plan(c, f, false)? else {
        return Ok(None);
    };
    let (sql, p) = plan.whole();
    let whole = c.query(&sql, &p)?;
    if whole.len() > MAX_GROUPS {
        return Ok(None);
    }
    // Per group key: records in whole seconds; the seconds whose records give the bounds.
    let mut counts: HashMap<String, i64> = HashMap::new();
    let mut seconds = BTreeSet::new();
    for r in &whole {
        counts.insert(r[0].text(), r[1].int());
        seconds.insert(r[2].int());
        seconds.insert(r[3].int());
    }
    let mut windows = plan.edges();
    windows.extend(seconds.into_iter().map(|s| Window {
        from: s * 1000,
        to: s * 1000 + 1000,
        counted: false,
    }));
    let index: Vec<usize> = cols
        .iter()
        .map(|col| KEY_COLUMNS.iter().position(|k| k == col).unwrap_or(0))
        .collect();
    let mut out: BTreeMap<Vec<Option<String>>, Group> = BTreeMap::new();
    if !windows.is_empty() {
        let (sql, p) = plan.read(&windows);
        for r in c.query(&sql, &p)? {
            let values: Vec<Option<String>> = index.iter().map(|&i| r[i].opt_text()).collect();
            let n = r[9].int() + counts.get(&r[8].text()).copied().unwrap_or(0);
            let (lo, hi, sample) = (r[10].int(), r[11].int(), r[12].opt_text());
            let g = out.entry(values.clone()).or_insert(Group {
                values,
                count: 0,
                oldest: lo,
                newest: hi,
                sample: None,
            });
            g.count += n;
            g.oldest = g.oldest.min(lo);
            g.newest = g.newest.max(hi);
            g.sample = match (g.sample.take(), sample) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    let mut v: Vec<Group> = out.into_values().filter(|g| g.count > 0).collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.values.cmp(&b.values)));
    Ok(Some(v))
}
