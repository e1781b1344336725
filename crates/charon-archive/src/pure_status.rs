//! A group-key value that is a set of statuses (branch `k9b`, docs/archive.md "Twenty-ninth
//! round (branch `k9b`)").
//!
//! `key_sort` reads one value of the sorted column in id order: `<filter> AND X = v ORDER BY id`.
//! When the filter's index is not `X`'s (`original_queue=orders-7&sort=error_fingerprint`), both
//! backends read every record of the filter for its `X` and sort the matches (SQLite: the
//! 50,100 records of `orders-7`; PostgreSQL: a BitmapAnd of the two columns, misestimated as
//! 4,710 rows for 50,000): 140–390 ms over 1,000,000 records for one page.
//!
//! The summary (`dead_letter_groups`, kept exact by triggers in every writing transaction) counts
//! the filter's records per `(X, status)`. **The rule**: if, for every status `s` in which some
//! match holds `v`, every match of status `s` holds `v` (the summary's count of `X = v AND
//! status = s` equals its count of `status = s`, under the same key terms and vhost limit), then
//! the matches holding `v` are exactly the matches whose status is one of those: `X = v` can be
//! written `status IN (…)`. Every `(K, status, id)` / `(K, id) INCLUDE (status)` index (`queue`,
//! `original_queue`, `error_fingerprint`, and `(status, id)` itself) answers that in id order
//! without reading a record. Archives often look so: a fingerprint's records wait (`PENDING`)
//! while an older fingerprint's were replayed.
//!
//! **The same rule the other way** (`error_fingerprint=…&sort=original_queue`: the fingerprint's
//! 100,000 records read for two values of 50,000): if, for every status `s` in which some match
//! holds `v`, every record of `X = v` and status `s` within the vhost limit matches the filter's
//! key terms, then the value's matches are `X = v AND status IN (…)` under the vhost limit alone,
//! read in id order from `X`'s own `(X, status, id)` index — so only for `X` among `queue`,
//! `original_queue` and `error_fingerprint`, which have one on both backends.
//!
//! Only for filters the summary answers (key terms and a vhost limit, `summary::answers`), and
//! never for `X = status` itself. The summary and the page are read by two statements: a
//! record archived, replayed or skipped between them can be listed at `v`'s place although it
//! holds another value (it matches the filter; only its place is off), as any of `key_sort`'s
//! offsets can be off by the records that changed between its statements.

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::{Conn, Param};

/// The columns whose `(X, status, id)` index reads `X = v AND status IN (…)` in id order.
const STATUS_INDEXED: &[&str] = &["queue", "original_queue", "error_fingerprint"];

/// The condition (with its parameters) selecting, among the records matching `f` (`cond`, with
/// `params`: its condition, of key terms and a vhost limit only), exactly those whose `col` is
/// `value` (`None`: NULL) without testing `col` against `value` on each record — `<cond> AND
/// status IN (…)` — or, the other way, without testing the filter's terms —
/// `col = value AND <vhost limit> AND status IN (…)` — by the rules in the module docs; `None`
/// when neither holds, or `col` is `status`.
pub fn condition(
    c: &mut dyn Conn,
    f: &Filter,
    col: &str,
    value: Option<&str>,
    cond: &str,
    params: &[Param],
) -> Result<Option<(String, Vec<Param>)>, ArchiveError> {
    if col == "status" || !crate::summary::KEY_COLUMNS.contains(&col) {
        return Ok(None);
    }
    let (is_value, value_params) = match value {
        Some(v) => (format!("{col} = ?"), vec![Param::from(v)]),
        None => (format!("{col} IS NULL"), Vec::new()),
    };
    let mut all = value_params.clone();
    all.extend_from_slice(params);
    let within = format!("SUM(CASE WHEN {is_value} THEN records ELSE 0 END)");
    if let Some((statuses, sp)) = statuses(c, &within, cond, &all)? {
        let mut p = params.to_vec();
        p.extend(sp);
        return Ok(Some((format!("({cond}) AND {statuses}"), p)));
    }
    if f.terms.is_empty() || !STATUS_INDEXED.contains(&col) {
        return Ok(None);
    }
    let (limit, limit_params) = Filter::default()
        .within(f.vhosts.clone())
        .to_sql(c.dialect())?;
    let limit = limit.replace("+vhost", "vhost");
    let mut all = params.to_vec();
    all.extend(value_params.iter().cloned());
    all.extend(limit_params.iter().cloned());
    let within = format!("SUM(CASE WHEN {cond} THEN records ELSE 0 END)");
    let Some((statuses, sp)) = statuses(c, &within, &format!("{is_value} AND {limit}"), &all)?
    else {
        return Ok(None);
    };
    let mut p = value_params;
    p.extend(limit_params);
    p.extend(sp);
    Ok(Some((
        format!("{is_value} AND ({limit}) AND {statuses}"),
        p,
    )))
}

/// `status IN (…)` of the statuses in which the summary's records under `cond` hold some of
/// `within` (a sum of records, its parameters first in `params`), when in each of them they are
/// all within; `None` otherwise.
fn statuses(
    c: &mut dyn Conn,
    within: &str,
    cond: &str,
    params: &[Param],
) -> Result<Option<(String, Vec<Param>)>, ArchiveError> {
    let rows = c.query(
        &format!(
            "SELECT status, CAST({within} AS BIGINT), CAST(SUM(records) AS BIGINT) \
             FROM dead_letter_groups WHERE {cond} GROUP BY status"
        ),
        params,
    )?;
    let mut statuses = Vec::new();
    for r in &rows {
        let (Some(status), Some(held), Some(all)) = (r.first(), r.get(1), r.get(2)) else {
            return Ok(None);
        };
        let (held, all) = (held.int(), all.int());
        if held <= 0 {
            continue;
        }
        if held != all {
            return Ok(None);
        }
        statuses.push(Param::from(status.text()));
    }
    if statuses.is_empty() {
        return Ok(None);
    }
    let marks = vec!["?"; statuses.len()].join(", ");
    Ok(Some((format!("status IN ({marks})"), statuses)))
}
