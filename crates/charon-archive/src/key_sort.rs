//! List pages sorted by a group-key column, value by value (branch `s9a`, docs/archive.md
//! "Twenty-eighth round (branch `s9a`)").
//!
//! A page sorted by a group key (`vhost`, `queue`, `original_queue`, `original_exchange`,
//! `reason`, `status`, `error_fingerprint`, `content_type`) is `ORDER BY X dir, id dir`: the
//! matches of X's first value in id order, then those of the next value, and so on. Without an
//! `(X, id)` index (`vhost`, `original_exchange`, `content_type` on PostgreSQL; most of them on
//! SQLite) or with a filter whose index is not in that order (`status=PENDING&sort=content_type`),
//! the backends read every match to sort them: 300–600 ms over 1,000,000 records.
//!
//! A group key has few distinct values, and the summary (`dead_letter_groups`, kept exact by
//! triggers) lists every value with its number of records, under any filter of key terms and a
//! vhost limit. So the page walks the values in the sort's order (the summary's `ORDER BY X dir`,
//! the same collation and NULL placement as the records' own `ORDER BY`): a value whose records
//! all lie before the page's offset is skipped by its count; from the value the page starts in,
//! `X = v AND <filter>` is read in id order (the filter's own plan for an `id` sort, which every
//! backend answers from an index) with the offset left within that value, until the page is
//! full. The result is the plain query's page, ties in X broken by id, as the counts are exact.
//!
//! Only filters the summary answers exactly (`summary::answers`: key terms only) take this plan;
//! a text, header or time term leaves the counts unknown (the list plans before answer them).

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::{Conn, Dialect, Param};

/// The sort column and direction of `order` (as `filter::order_by` writes it) when the column is
/// one the summary groups by, else `None`.
pub fn key_order(order: &str) -> Option<(&str, &str)> {
    let mut words = order.split_whitespace();
    let col = words.next()?;
    let dir = words.next()?.trim_end_matches(',');
    crate::summary::KEY_COLUMNS
        .contains(&col)
        .then_some((col, dir))
}

/// Every value of `col` among the records matching `cond` (a condition of key terms and a vhost
/// limit, valid on the summary), in `ORDER BY col dir` order, with its number of records.
pub(crate) fn values(
    c: &mut dyn Conn,
    col: &str,
    dir: &str,
    cond: &str,
    params: &[Param],
) -> Result<Vec<(Option<String>, u64)>, ArchiveError> {
    let rows = c.query(
        &format!(
            "SELECT {col}, CAST(SUM(records) AS BIGINT) FROM dead_letter_groups WHERE {cond} \
             GROUP BY {col} HAVING SUM(records) > 0 ORDER BY {col} {dir}"
        ),
        params,
    )?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let n = u64::try_from(r.get(1)?.int()).unwrap_or(0);
            Some((r.first()?.opt_text(), n))
        })
        .collect())
}

/// `order` itself, or `id dir` when it sorts by a group key that every record matching `f`'s
/// key terms and vhost limit holds at one and the same value (the summary lists one value, or
/// none): the order is then the `id` tie-break alone, and any filter (a text, header or time
/// term too) takes its plans for an `id` sort (`body=…&sort=vhost` over one vhost: the id
/// walk instead of a sort of every match, 1.5 s over 1M records).
pub fn constant_key_order(
    c: &mut dyn Conn,
    f: &Filter,
    order: &str,
) -> Result<String, ArchiveError> {
    let Some((col, dir)) = key_order(order) else {
        return Ok(order.to_string());
    };
    let mut keys = f.clone();
    keys.terms
        .retain(|k, _| crate::summary::KEY_COLUMNS.contains(&k.as_str()));
    let (cond, params) = keys.to_sql(c.dialect())?;
    let rows = c.query(
        &format!(
            "SELECT {col} FROM dead_letter_groups WHERE {cond} GROUP BY {col} \
             HAVING SUM(records) > 0 LIMIT 2"
        ),
        &params,
    )?;
    Ok(if rows.len() <= 1 {
        format!("id {dir}")
    } else {
        order.to_string()
    })
}

/// The ids of the page (`offset`, `page_size`) of the records matching `f` (`cond`, `params`:
/// its condition) in `order`, in that order, when `order` sorts by a group key and the summary
/// counts `f` exactly; `None` otherwise (another plan answers).
pub fn page_ids(
    c: &mut dyn Conn,
    f: &Filter,
    cond: &str,
    params: &[Param],
    order: &str,
    offset: u64,
    page_size: u64,
) -> Result<Option<Vec<i64>>, ArchiveError> {
    let Some((col, dir)) = key_order(order) else {
        return Ok(None);
    };
    if !crate::summary::answers(f) {
        return Ok(None);
    }
    let mut ids = Vec::new();
    let mut pos: u64 = 0;
    let values = values(c, col, dir, cond, params)?;
    let matches: u64 = values.iter().map(|(_, n)| n).sum();
    for (value, n) in values {
        let want = page_size.saturating_sub(ids.len() as u64);
        if want == 0 {
            break;
        }
        if pos.saturating_add(n) <= offset {
            pos = pos.saturating_add(n);
            continue;
        }
        let skip = offset.saturating_sub(pos);
        let take = want.min(n.saturating_sub(skip));
        // The value's matches are those of some statuses of the filter's term or of the value
        // (the summary's per-status counts, `pure_status`): read in id order from that term's
        // `(K, status, id)` index, without a record read for the other term.
        let (value_cond, all) =
            match crate::pure_status::condition(c, f, col, value.as_deref(), cond, params)? {
                Some(found) => found,
                None => value_condition(c, f, col, value.as_deref(), cond, params, matches)?,
            };
        let skip_sql = crate::sql::offset(skip);
        let inner = format!(
            "SELECT id FROM {{from}} WHERE {{cond}} ORDER BY id {dir} LIMIT {take}{skip_sql}"
        );
        let id_order = format!("id {dir}");
        let sql = crate::page_plan::ids_query(
            c,
            &inner,
            &value_cond,
            &all,
            &id_order,
            i64::try_from(n).unwrap_or(i64::MAX),
            skip.saturating_add(take),
        )?;
        let rows = c.query(&sql, &all)?;
        ids.extend(rows.iter().filter_map(|r| r.first()?.opt_int()));
        pos = pos.saturating_add(n);
    }
    Ok(Some(ids))
}

/// `<cond> AND col = value` (with its parameters), the value's condition of [`page_ids`].
fn value_condition(
    c: &mut dyn Conn,
    f: &Filter,
    col: &str,
    value: Option<&str>,
    cond: &str,
    params: &[Param],
    matches: u64,
) -> Result<(String, Vec<Param>), ArchiveError> {
    // SQLite, without statistics, reads a value through its column's index even when the
    // filter's own index holds fewer records (`original_queue=orders-7&sort=error_fingerprint`:
    // the fingerprint's 100,000 records, 137 → 228 ms): the column is then written `+col`.
    let unindexed = c.dialect() == Dialect::Sqlite
        && !f.terms.is_empty()
        && value_records(c, col, value)? > matches;
    let plus = if unindexed { "+" } else { "" };
    let (is_value, mut p) = match value {
        Some(v) => (format!("{plus}{col} = ?"), vec![Param::from(v)]),
        None => (format!("{plus}{col} IS NULL"), Vec::new()),
    };
    let mut all = params.to_vec();
    all.append(&mut p);
    Ok((format!("({cond}) AND {is_value}"), all))
}

/// How many records of every vhost hold `value` (`None`: NULL) in `col`, from the summary.
fn value_records(c: &mut dyn Conn, col: &str, value: Option<&str>) -> Result<u64, ArchiveError> {
    let (cond, p) = match value {
        Some(v) => (format!("{col} = ?"), vec![Param::from(v)]),
        None => (format!("{col} IS NULL"), Vec::new()),
    };
    Ok(u64::try_from(crate::summary::records(c, &cond, &p)?).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_group_keys_are_walked_by_value() {
        assert_eq!(
            key_order("original_queue DESC, id DESC"),
            Some(("original_queue", "DESC"))
        );
        assert_eq!(
            key_order("content_type ASC, id ASC"),
            Some(("content_type", "ASC"))
        );
        assert_eq!(key_order("id DESC"), None);
        assert_eq!(key_order("updated_at ASC, id ASC"), None);
        assert_eq!(key_order("created_at DESC, id DESC"), None);
    }
}
