//! An `error` list sorted by a group key whose page lies in the key's first value (branch `k9b`,
//! docs/archive.md "Twenty-ninth round (branch `k9b`)").
//!
//! A page of an `error` filter sorted by a group-key column `X` the error-text copy holds is
//! `ORDER BY X dir, id dir`; the copy's plan (`key_copy::Split::page_ids_sorted`, s9a) reads
//! every match's copy row to sort them: a needle in one record of ten over 1,000,000 records
//! reads ~100,000 rows (`error=cause 5&sort=status&page=50`: 67–71 CPU ms on SQLite, 98–101 on
//! PostgreSQL).
//!
//! **The rule**: `v`, the first value of `X` in the sort's order among the records of the
//! filter's key terms and vhost limit (the summary's values), comes first in the order. If the
//! filter with the term `X = v` has at least `offset + page_size` matches, the page lies wholly
//! within `v`, and it is that filter's page in id order (`dir`) — which the list's id-order plans
//! answer (the copy's walk, the driving set, …) without reading the other matches.
//!
//! Whether to try: only with a capped `total` (`total_cap`, the API's default: the value's list
//! counts at most `cap + 1` of its matches, not all of them), and when the needle's walk, probing
//! the copy for the filter with `X = v` (three probes of `text_walk::PROBE` rows, the median),
//! estimates at least twice the cap there. A value with few or no matches (`sort=original_queue`,
//! whose first value `orders-0` holds none of `cause 5`) is not tried, as proving it short reads
//! its matches anyway; nor a needle whose matches number about the cap (`error=55 could`: its
//! ~10,000 matches sorted cost what the value's capped count and page cost, 46–53 → 58–61 CPU ms
//! when tried). A wrong estimate costs one id-order list; the page is then the copy's sort.
//!
//! **Pages spanning values** (stop 47): a value tried holding some matches but fewer than the
//! page's reach does not end the try. Its list's count is then exact (it is capped at the reach),
//! so its matches are skipped, or the first of the page taken from its tail, and the page goes on
//! in the value that follows, up to [`SPANNED`] values after the tries: each value's slice of
//! the page is its list in id order from the matches still to skip (`value_slice`). Before, such
//! a page sorted every match (`error=could&original_queue=orders-7&sort=-error_fingerprint&
//! page=30`: the bench's fingerprint, first in the order, holds orders-7's newest 100 records).

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::record::Record;
use crate::sql::Conn;
use crate::total_cap::Total;

/// The list plans of `ops` for a filter in an id order (`"id"` or `"-id"`): page `page` of
/// `page_size` records (the next arguments) and the filter's `total` capped at the last.
pub type IdList<'a> = &'a mut dyn FnMut(
    &mut dyn Conn,
    &Filter,
    &str,
    u64,
    u64,
    u64,
) -> Result<(Vec<Record>, Total), ArchiveError>;

/// An estimate of how many records match a filter (`None`: no estimate).
pub type Estimate<'a> =
    &'a mut dyn FnMut(&mut dyn Conn, &Filter) -> Result<Option<u64>, ArchiveError>;

/// The first `reach` ids of a filter in id order (`desc`: newest first) from one read without
/// a count, where a plan gives them so (SQLite's FTS5 candidates in rowid order,
/// `crate::key_copy::Split::page_ids`); `None`: no such plan (the list answers).
pub type FirstIds<'a> =
    &'a mut dyn FnMut(&mut dyn Conn, &Filter, bool, u64) -> Result<Option<Vec<i64>>, ArchiveError>;

/// The values of a column among some matches of a filter (`crate::key_first_match::SAMPLE` of
/// them at most; none: no sample).
pub type Sample<'a> =
    &'a mut dyn FnMut(&mut dyn Conn, &Filter, &str) -> Result<Vec<Option<String>>, ArchiveError>;

/// The page (`offset`, `page_size`) of `f` in `order`, when `order` sorts by a group key of the
/// copy, `f` has an `error` term and none on that key, and the page lies within the key's first
/// value (see the module docs), the `total` capped at `cap`; `None` otherwise (another plan
/// answers).
#[allow(clippy::too_many_arguments)]
pub fn page(
    c: &mut dyn Conn,
    f: &Filter,
    order: &str,
    offset: u64,
    page_size: u64,
    cap: Option<u64>,
    estimate: Estimate<'_>,
    sample: Sample<'_>,
    first_ids: FirstIds<'_>,
    list: IdList<'_>,
) -> Result<Option<Vec<Record>>, ArchiveError> {
    let Some((col, dir)) = crate::key_sort::key_order(order) else {
        return Ok(None);
    };
    let reach = offset.saturating_add(page_size);
    let Some(cap) = cap else {
        return Ok(None);
    };
    // An `error` term (the copy's plans), or a `body` term (stop 45: its first value only; a
    // `body` needle in every record sorted by `original_queue` sorted all of them, 1.55 s on
    // PostgreSQL over 1M).
    let text = f.terms.contains_key("error") || f.terms.contains_key("body");
    if !text || f.terms.contains_key(col) || reach > cap || page_size == 0 {
        return Ok(None);
    }
    let mut keys = f.clone();
    keys.terms
        .retain(|k, _| crate::summary::KEY_COLUMNS.contains(&k.as_str()));
    let (cond, params) = keys.to_sql(c.dialect())?;
    let cond = cond.replace("+vhost", "vhost");
    let values = crate::key_sort::values(c, col, dir, &cond, &params)?;
    let Some(tries) = first_holding(c, f, col, dir, &values, cap, estimate, sample)? else {
        return Ok(None);
    };
    let by_id = if dir == "DESC" { "-id" } else { "id" };
    let last = tries.len().saturating_sub(1);
    // After the tries, the values that follow the last in the key's order (stop 47): a page
    // past a value holding fewer matches than its reach continues in the next.
    let after = values
        .iter()
        .position(|(v, _)| v.as_deref() == tries.last().map(String::as_str))
        .map_or(0, |at| at + 1);
    let following = values
        .iter()
        .skip(after)
        .take(SPANNED)
        .map(|(v, _)| v.clone());
    let sequence = tries.into_iter().map(Some).chain(following);
    // The matches of the values before still to skip, and the page's records still wanted.
    let mut skip = offset;
    let mut items: Vec<Record> = Vec::new();
    for (i, value) in sequence.enumerate() {
        // A value without records' key (`NULL`) has no term to list it by.
        let Some(value) = value else {
            return Ok(None);
        };
        // A value before the last try (which a sample shows holds matches) shown empty in one
        // statement, without its list.
        if i < last && crate::key_first_match::none_at(c, f, col, &value)? == Some(true) {
            continue;
        }
        let want = page_size.saturating_sub(items.len() as u64);
        let mut within = f.clone();
        within.terms.insert(col.to_string(), value);
        let (got, n) = value_slice(c, &within, order, by_id, skip, want, first_ids, list)?;
        items.extend(got);
        if items.len() as u64 >= page_size {
            return Ok(Some(items));
        }
        // A value holding the rest of the page gave fewer records than it counts: no answer.
        if n >= skip.saturating_add(want) {
            return Ok(None);
        }
        // The value's every match (`n`, exact: fewer than it was asked for) is before the page
        // or in it.
        skip = skip.saturating_sub(n);
    }
    Ok(None)
}

/// Values listed after the tries' last, in the key's order, when a page is not filled by the
/// values before (stop 47: `error=could&original_queue=orders-7&sort=-error_fingerprint&page=30`,
/// whose first value, the bench's fingerprint, holds 100 matches; SQLite 205 ms and PostgreSQL
/// 127 by sorting every match).
pub const SPANNED: usize = 2;

/// The records `skip..skip + want` of `within` (one value's term added) in id order (`by_id`),
/// and how many match it: exactly, when fewer than `skip + want`; else at least that many. From
/// the value's first ids in one read (`first_ids`) where a plan gives them, else from its lists
/// in id order with pages of `want` (the one holding `skip`, and the next when the slice runs
/// into it), their `total` capped at `skip + want`.
#[allow(clippy::too_many_arguments)]
fn value_slice(
    c: &mut dyn Conn,
    within: &Filter,
    order: &str,
    by_id: &str,
    skip: u64,
    want: u64,
    first_ids: FirstIds<'_>,
    list: IdList<'_>,
) -> Result<(Vec<Record>, u64), ArchiveError> {
    let reach = skip.saturating_add(want);
    // The value's first `reach` ids from one read: as many prove the page within the value
    // (no count: `orders-15`'s page 50, a reach of 5,000, saved its 7.6 ms walk).
    if let Some(ids) = first_ids(c, within, by_id == "-id", reach)? {
        let n = ids.len() as u64;
        return Ok((crate::ops::walked_page(c, ids, skip, order)?, n));
    }
    // The proof needs `reach` matches, not the cap's: the value's `total` capped at `reach`
    // (below it, exact).
    let page = skip / want.max(1) + 1;
    let (first, total) = list(c, within, by_id, page, want, reach)?;
    let n = u64::try_from(total.count).unwrap_or(0);
    let at = usize::try_from(skip - (page - 1) * want).unwrap_or(usize::MAX);
    let mut got: Vec<Record> = first.into_iter().skip(at).collect();
    if (got.len() as u64) < want && n > page * want {
        let (next, _) = list(c, within, by_id, page + 1, want, reach)?;
        got.extend(next);
    }
    got.truncate(usize::try_from(want).unwrap_or(usize::MAX));
    Ok((got, n))
}

/// Values before the first a sample of the matches holds that are listed one by one (each
/// shown empty by its list, or holding the page) instead of one range proof
/// (`crate::key_first_match::none_before`).
pub const LISTED_BEFORE: usize = 2;

/// The values of `values` (the key's in the sort's order) whose lists in id order, tried in
/// turn, give the page: each but the one holding it has no match of `f` (the caller's lists
/// show it). The first value alone when its estimate is at least twice the cap; else, from a
/// sample of the matches naming the first value `m` they hold, the values up to `m` when at
/// most [`LISTED_BEFORE`] precede it (a status holding a few matches before the common one:
/// `-status` lists SKIPPED, none, then REPLAYED's 200), or `m` alone once no match lies before
/// it (`crate::key_first_match`); `None` otherwise.
#[allow(clippy::too_many_arguments)]
fn first_holding(
    c: &mut dyn Conn,
    f: &Filter,
    col: &str,
    dir: &str,
    values: &[(Option<String>, u64)],
    cap: u64,
    estimate: Estimate<'_>,
    sample: Sample<'_>,
) -> Result<Option<Vec<String>>, ArchiveError> {
    let enough = cap.saturating_mul(2);
    let mut many = |c: &mut dyn Conn, v: Option<&str>| -> Result<bool, ArchiveError> {
        let mut within = f.clone();
        if let Some(v) = v {
            within.terms.insert(col.to_string(), v.to_string());
        }
        Ok(estimate(c, &within)?.is_some_and(|n| n >= enough))
    };
    let Some((Some(first), _)) = values.first() else {
        return Ok(None);
    };
    if many(c, Some(first))? {
        return Ok(Some(vec![first.clone()]));
    }
    // A sample of the matches, only of a needle with many: a rare one's walk would read its
    // whole budget for it.
    // The sample and the proofs read the error-text copy: an `error` term without a `body` one,
    // sorted by a column the copy holds.
    if !f.terms.contains_key("error")
        || f.terms.contains_key("body")
        || !crate::key_copy::holds(&[col.to_string()])
        || !many(c, None)?
    {
        return Ok(None);
    }
    let sampled = sample(c, f, col)?;
    let Some((at, Some(m))) = crate::key_first_match::first_sampled(values, &sampled) else {
        return Ok(None);
    };
    if at <= LISTED_BEFORE {
        return Ok(values[..=at]
            .iter()
            .map(|(v, _)| v.clone())
            .collect::<Option<Vec<String>>>());
    }
    if !many(c, Some(&m))? {
        return Ok(None);
    }
    let before_null = values[..at].iter().any(|(v, _)| v.is_none());
    Ok(
        (crate::key_first_match::none_before(c, f, col, dir, &m, before_null)? == Some(true))
            .then(|| vec![m]),
    )
}
