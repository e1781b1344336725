//! A page of a time range with a `status` term in id order on PostgreSQL, walked between id
//! bounds proven to hold every match (docs/archive.md "Twenty-third round (branch `q9x`)").
//!
//! Migration 16's `(status, id) INCLUDE (created_at)` answers such a page by a walk in id order
//! that tests each entry's time (`range_count::status_walk`); it starts at the order's end, so a
//! range far from that end visits every entry of the status beyond it first
//! (`until=…&status=PENDING` near the archive's start, newest first: 530,000 entries of 600,000
//! for a page of 100, 110–165 ms over 1,000,000 records).
//!
//! A record's time is its archiving time, so the range's records usually lie between two ids:
//! below `hi`, the id of a record at the first time at or after `until`, and above `lo`, the id
//! of a record at the last time before `since` (one seek of `dead_letters_created` each). That
//! is not guaranteed — a user's UPDATE of `created_at`, a clock set back, two archivers — so the
//! bounds are used only when proven, in the page's own statement (one snapshot): the matches
//! between the bounds, counted in the status index (index-only), equal the range's `total` from
//! the summary per second (migration 19, `summary_seconds::total_query`, exact in every
//! snapshot). The matches between the bounds are a subset of all matches, so equal counts mean
//! equal sets, and the page walked between the bounds is the plain page. Otherwise the same
//! statement falls back to the plain walk. The proof costs one index-only entry per match, so it
//! is taken only when the plain walk's far side (at most the status's records outside the range,
//! from the summary) is larger than the matches.

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::{Cell, Conn, Param};

/// The ids statement of a page of `f` (`cond`/`params`: its condition) in id order (`desc`:
/// newest first), `page_size` ids after `offset`, when bounds apply (see the module docs), and
/// its parameters; `plain` is the plain ids statement (parameters `params`), the fallback within
/// the statement. `None`: not a status range on PostgreSQL at version 19, no bound found, or the
/// plain walk visits fewer entries than the proof.
#[allow(clippy::too_many_arguments)]
pub fn query(
    c: &mut dyn Conn,
    f: &Filter,
    cond: &str,
    params: &[Param],
    desc: bool,
    offset: u64,
    page_size: u64,
    total: i64,
    plain: &str,
) -> Result<Option<(String, Vec<Param>)>, ArchiveError> {
    if !crate::range_count::status_walk(c.dialect(), f) {
        return Ok(None);
    }
    let reach = i64::try_from(offset.saturating_add(page_size)).unwrap_or(i64::MAX);
    let far = crate::range_count::far_side(c, f, desc, total)?;
    if far.saturating_add(reach) <= total {
        return Ok(None);
    }
    let Some((total_sql, total_params)) = crate::summary_seconds::total_query(c, f)? else {
        return Ok(None);
    };
    let (lo, hi) = candidates(c, f)?;
    let mut between = Vec::new();
    let mut bp = Vec::new();
    if let Some(lo) = lo {
        between.push("id > ?");
        bp.push(Param::from(lo));
    }
    if let Some(hi) = hi {
        between.push("id < ?");
        bp.push(Param::from(hi));
    }
    if between.is_empty() {
        return Ok(None);
    }
    let between = between.join(" AND ");
    let dir = if desc { "DESC" } else { "ASC" };
    let skip = crate::sql::offset(offset);
    let mut all = total_params;
    for _ in 0..2 {
        all.extend(params.iter().cloned());
        all.extend(bp.iter().cloned());
    }
    all.extend(params.iter().cloned());
    Ok(Some((
        format!(
            "WITH t (n) AS MATERIALIZED ({total_sql}), \
             b (n) AS MATERIALIZED (SELECT COUNT(*) FROM dead_letters WHERE {cond} AND {between}) \
             SELECT id FROM (SELECT id FROM dead_letters WHERE {cond} AND {between} \
             ORDER BY id {dir} LIMIT {page_size}{skip}) AS p WHERE (SELECT n FROM b) = (SELECT n FROM t) \
             UNION ALL SELECT id FROM ({plain}) AS q WHERE (SELECT n FROM b) <> (SELECT n FROM t)"
        ),
        all,
    )))
}

/// The candidate bounds of `f`'s range (see the module docs): the id of a record at the last
/// time before `since`, and of one at the first time at or after `until` (`None`: no bound
/// given, or no such record).
pub fn candidates(
    c: &mut dyn Conn,
    f: &Filter,
) -> Result<(Option<i64>, Option<i64>), ArchiveError> {
    let time = |k: &str| f.terms.get(k).and_then(|v| crate::time::parse_time(v));
    let (since, until) = (time("since"), time("until"));
    let mut seeks = Vec::new();
    let mut p = Vec::new();
    if let Some(s) = since {
        seeks.push(
            "(SELECT id FROM dead_letters WHERE created_at < ? ORDER BY created_at DESC LIMIT 1)",
        );
        p.push(Param::from(s));
    }
    if let Some(u) = until {
        seeks.push(
            "(SELECT id FROM dead_letters WHERE created_at >= ? ORDER BY created_at LIMIT 1)",
        );
        p.push(Param::from(u));
    }
    if seeks.is_empty() {
        return Ok((None, None));
    }
    let rows = c.query(&format!("SELECT {}", seeks.join(", ")), &p)?;
    let Some(row) = rows.first() else {
        return Ok((None, None));
    };
    let mut cells = row.iter().map(Cell::opt_int);
    let lo = since.and_then(|_| cells.next().flatten());
    let hi = until.and_then(|_| cells.next().flatten());
    Ok((lo, hi))
}
