//! A list's page and capped `total` from the driving set's walk (`super`): in id order, by time
//! (the page proven against the time index, `crate::time_walk::proven`), by a group key (a set
//! walked whole) — and, on SQLite, the capped count of a list in any other order.

use super::choice::driver;
use super::{first_matches, first_rows};
use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::record::Record;
use crate::sql::{Conn, Dialect};
use crate::total_cap::Total;

/// A list's page and capped `total` (`ops::list_capped` with `cap`) from the driving set's walk,
/// for a page in `order` (`filter::order_by`'s, a group key every match holds at one value
/// already the id order: `key_sort::constant_key_order`) by id (or by a group key, from a set
/// walked whole: [`key_sorted_page`]);
/// `None` (the list's other plans) without a cap, in another order, or when the walk proves
/// nothing. Its first `max(cap + 1, reach)` matches give both: the page (a
/// prefix of the matches in id order) and the count (over `cap`: a lower bound).
pub fn list_page(
    c: &mut dyn Conn,
    f: &Filter,
    order: &str,
    page: u64,
    page_size: u64,
    cap: Option<u64>,
) -> Result<Option<(Vec<Record>, Total)>, ArchiveError> {
    let Some(cap) = cap else {
        return Ok(None);
    };
    if driver(c.dialect(), f).is_none() {
        return Ok(None);
    }
    let offset = page.saturating_sub(1).saturating_mul(page_size);
    if order.starts_with("created_at ") {
        return time_page(c, f, order, offset, page_size, cap);
    }
    if !order.starts_with("id ") {
        return key_sorted_page(c, f, order, offset, page_size, cap);
    }
    let reach = offset.saturating_add(page_size);
    let need = cap.saturating_add(1).max(reach);
    let Some(mut ids) = first_matches(c, f, order.starts_with("id DESC"), need)? else {
        return Ok(None);
    };
    let total = Total::from_capped(i64::try_from(ids.len()).unwrap_or(i64::MAX), cap);
    ids.truncate(usize::try_from(reach).unwrap_or(usize::MAX));
    Ok(Some((
        crate::ops::walked_page(c, ids, offset, order)?,
        total,
    )))
}

/// [`list_page`] sorted by time (stop 46): the driving set's first matches in id order with their
/// `created_at`, as many as the capped count and the page need, the page proven against the
/// time index as `crate::time_walk` proves a walk's (`original_queue=orders-7&error=could&
/// sort=-created_at&page=50` on SQLite: the copy's count of orders-7's `could` candidates and a
/// sort of its matches, 182 ms, against ~15; on PostgreSQL `…&sort=created_at&page=100`, past
/// the copy walk's budget, 1.16 s against 31 ms). On PostgreSQL only since its driving sets check
/// an `error` needle on the copy: through the records' id ranges it cost more than its plans
/// (`error=could&status=SKIPPED&sort=-created_at&page=100` 15 → 42 ms; now 23).
fn time_page(
    c: &mut dyn Conn,
    f: &Filter,
    order: &str,
    offset: u64,
    page_size: u64,
    cap: u64,
) -> Result<Option<(Vec<Record>, Total)>, ArchiveError> {
    let desc = order.starts_with("created_at DESC");
    let reach = offset.saturating_add(page_size);
    let need = crate::time_walk::walked(reach).max(cap.saturating_add(1));
    let Some(rows) = first_rows(c, f, desc, need, &["created_at"])? else {
        return Ok(None);
    };
    let total = Total::from_capped(i64::try_from(rows.len()).unwrap_or(i64::MAX), cap);
    let complete = (rows.len() as u64) < need;
    let rows = crate::time_walk::id_times(&rows);
    let checks = f.to_sql_checks_only(c.dialect())?;
    let Some(page) = crate::time_walk::proven(c, rows, complete, &checks, desc, reach)? else {
        return Ok(None);
    };
    let ids = page.into_iter().map(|(id, _)| id).collect();
    Ok(Some((
        crate::ops::walked_page(c, ids, offset, order)?,
        total,
    )))
}

/// The capped `total` of `f` (`cap`) from its driving set's first `cap + 1` matches, for a list
/// whose page other plans find (a sort by status: `key_first_value` pages a value's list, whose
/// driving set answers; the count of the whole filter went to the copy's candidates,
/// `original_queue=orders-7&error=could&sort=status&page=20` 145 of 180 ms); `None` when the
/// walk proves nothing.
pub fn capped_total(c: &mut dyn Conn, f: &Filter, cap: u64) -> Result<Option<Total>, ArchiveError> {
    // SQLite only: PostgreSQL's plans counted these faster than its driving set did while that
    // checked needles through the records' id ranges (`error=could&status=SKIPPED&sort=
    // error_fingerprint` 20 → 48 ms, measured). Measured again with the copy checks (stop 46,
    // the 42 PostgreSQL list requests in another order): four 7–12 ms faster, seven 5–9 ms
    // slower, none over 50 either way — not taken.
    if c.dialect() != Dialect::Sqlite || driver(c.dialect(), f).is_none() {
        return Ok(None);
    }
    Ok(first_matches(c, f, true, cap.saturating_add(1))?
        .map(|ids| Total::from_capped(i64::try_from(ids.len()).unwrap_or(i64::MAX), cap)))
}

/// [`list_page`] sorted by a group key (stop 45): only a driving set walked whole gives every
/// match, whose `(id, key)` rows are then sorted as the backend orders the key
/// (`error=cause 5&since=<the last 2,000 records>&sort=original_queue`, 200 matches: the copy's
/// sort of every `cause 5` match before, SQLite 58 ms, PostgreSQL 91–109).
fn key_sorted_page(
    c: &mut dyn Conn,
    f: &Filter,
    order: &str,
    offset: u64,
    page_size: u64,
    cap: u64,
) -> Result<Option<(Vec<Record>, Total)>, ArchiveError> {
    let Some((col, dir)) = crate::key_sort::key_order(order) else {
        return Ok(None);
    };
    let Some(rows) = first_rows(c, f, false, u64::MAX, &[col])? else {
        return Ok(None);
    };
    let mut keyed: Vec<(Option<String>, i64)> = rows
        .iter()
        .filter_map(|r| Some((r.get(1)?.opt_text(), r.first()?.opt_int()?)))
        .collect();
    let desc = dir == "DESC";
    let nulls_first = crate::rare_time_page::nulls_first(c.dialect(), desc);
    crate::rare_time_page::sort_keyed(&mut keyed, desc, nulls_first);
    let total = Total::from_capped(i64::try_from(keyed.len()).unwrap_or(i64::MAX), cap);
    let reach = usize::try_from(offset.saturating_add(page_size)).unwrap_or(usize::MAX);
    let ids: Vec<i64> = keyed.into_iter().take(reach).map(|(_, id)| id).collect();
    Ok(Some((
        crate::ops::walked_page(c, ids, offset, order)?,
        total,
    )))
}
