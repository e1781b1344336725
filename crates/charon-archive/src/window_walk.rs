//! A list of an `error` needle in a time window (`since`/`until`) of more records than the
//! driving set takes (`crate::driving_set`, at most 12,000), in id or time order: the copy of the
//! error texts walked in id order between the window's ends (stop 47, docs/archive.md
//! "Thirty-second round").
//!
//! The plans before read the needle's whole candidate list (`error=cause 5&until=<600,000
//! records>&sort=-created_at&page=10`: SQLite 391 ms, PostgreSQL 426), or the newest records
//! down to the window (`crate::text_walk`), because no index gives a window's records in id
//! order: SQLite's `dead_letters_created` is `(created_at)` and its rowid, PostgreSQL's
//! `(created_at) INCLUDE (id)`, so the window's newest ids are a sort of all of them. But a
//! record's time is its archiving time, so the window's ids lie between the ids of its oldest
//! and its newest record by time, which two seeks of the time index give. So:
//! - **the ends**: `lo` and `hi`, the ids of the window's first and last record by time, each
//!   widened by [`MARGIN`] ids (at least; a 32nd of their distance), so that the records
//!   archived a little out of order around them (batches of several connections) are walked;
//! - **the walk**: the copy (`dead_letter_error_text`, ~100 B a row; the records above the search
//!   watermark on `dead_letters`) in id order from `hi` down (a page newest first) or from `lo`
//!   up, each row checked against the whole filter, the window among it, in chunks of growing
//!   span, until the `need` matches of the page and the capped count (`cap + 1`) are found or
//!   the walk reaches the other end (`complete`). It gives up (`None`: the other plans answer)
//!   when the matches found so far project more than [`budget`] rows;
//! - **the proof**: the window's records outside `[lo, hi]` (records archived out of order, a
//!   time a user's SQL moved) were not walked. A page in id order, and an exact count (a walk
//!   that found fewer than `cap + 1`), read them all from the time index (`(id < lo OR
//!   id > hi)` among the window's entries, index only; at most `time_walk::STRAYS`, else
//!   `None`), check them and take in those that match. A page sorted by time that found its
//!   matches is proven as `crate::time_walk` proves a walk's, its strays read among the
//!   window's records on both sides of the walk (`time_walk::proven_within`).
//!
//! The cost is the rows walked (the page's reach and the cap over the needle's share in the
//! window: `cause 5`, one record in ten, 100,000 rows for a capped count) and, for a page in id
//! order or an exact count, one read of the window's time-index entries (SQLite ~1.5 ms, and
//! PostgreSQL ~5 ms, per 100,000).

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::record::Record;
use crate::sql::{Cell, Conn, Dialect, Param};
use crate::time_walk::id_times;
use crate::total_cap::Total;

/// Most rows a walk reads: (PostgreSQL, SQLite). ~0.17 and ~0.09 µs a copy row warm over 1M
/// (a window of 100,000 records with `cause 5`: 17 and 9 ms).
pub const BUDGET: (u64, u64) = (150_000, 200_000);

/// The first chunk's span of ids; each later chunk's is at most twice the last.
pub const FIRST_SPAN: i64 = 4_000;

/// The budget on dialect `d`.
pub fn budget(d: Dialect) -> u64 {
    match d {
        Dialect::Postgres => BUDGET.0,
        Dialect::Sqlite => BUDGET.1,
    }
}

/// Whether `f` is a list this walk answers: a time window, an `error` needle, no `body` term,
/// and every term one the copy holds (`crate::key_copy::answers`).
pub fn applies(f: &Filter) -> bool {
    (f.terms.contains_key("since") || f.terms.contains_key("until"))
        && f.terms.contains_key("error")
        && !f.terms.contains_key("body")
        && !f.terms.keys().any(|k| k.starts_with("header."))
        && crate::key_copy::answers(f)
}

/// A list's page and capped `total` (`ops::list_capped` with `cap`) by the walk (module docs),
/// in `order` (`filter::order_by`'s, after `key_sort::constant_key_order`) by id or by time;
/// `None` (the list's other plans) otherwise, or when the walk gives up or proves nothing.
pub fn list_page(
    c: &mut dyn Conn,
    f: &Filter,
    order: &str,
    page: u64,
    page_size: u64,
    cap: Option<u64>,
) -> Result<Option<(Vec<Record>, Total)>, ArchiveError> {
    let limits = Limits {
        budget: budget(c.dialect()),
        first_span: FIRST_SPAN,
        margin: MARGIN,
    };
    list_page_within(c, f, order, page, page_size, cap, limits)
}

/// The least number of ids the walk's range takes beyond each end (and at least a 32nd of the
/// ends' distance): the records of the window archived a little out of order around its ends
/// (batches of several connections) are walked, not left to the strays' read.
pub const MARGIN: i64 = 1_000;

/// How far a walk goes: its row [`budget`], its first chunk's span ([`FIRST_SPAN`]) and the
/// ids it takes beyond the window's ends ([`MARGIN`]; 0: none).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub budget: u64,
    pub first_span: i64,
    pub margin: i64,
}

/// [`list_page`] with other [`Limits`] (tests of the chunks and of giving up).
#[doc(hidden)]
pub fn list_page_within(
    c: &mut dyn Conn,
    f: &Filter,
    order: &str,
    page: u64,
    page_size: u64,
    cap: Option<u64>,
    limits: Limits,
) -> Result<Option<(Vec<Record>, Total)>, ArchiveError> {
    let Some(cap) = cap else {
        return Ok(None);
    };
    if !applies(f) {
        return Ok(None);
    }
    let time = order.starts_with("created_at ");
    if !time && !order.starts_with("id ") {
        return Ok(None);
    }
    let desc = order.contains(" DESC");
    let offset = page.saturating_sub(1).saturating_mul(page_size);
    let reach = offset.saturating_add(page_size);
    let walked = if time {
        crate::time_walk::walked(reach)
    } else {
        reach
    };
    let need = cap.saturating_add(1).max(walked);
    let Some(w) = Walk::new(c, f, limits)? else {
        return Ok(None);
    };
    let Some((lo, hi)) = w.ends(c)? else {
        return Ok(None);
    };
    let margin = match limits.margin {
        0 => 0,
        m => m.max((hi - lo) / 32),
    };
    let (lo, hi) = (lo.saturating_sub(margin), hi.saturating_add(margin));
    let Some((mut rows, complete)) = w.walk(c, (lo, hi), margin, desc, need)? else {
        return Ok(None);
    };
    // A page in id order, or an exact count: every match of the window's records outside the
    // walk's ids, read from the time index.
    if complete || !time {
        let Some(strays) = w.matching_strays(c, lo, hi)? else {
            return Ok(None);
        };
        rows.extend(strays);
        rows.sort_unstable_by_key(|&(id, _)| id);
        if desc {
            rows.reverse();
        }
    }
    let total = Total::from_capped(i64::try_from(rows.len()).unwrap_or(i64::MAX), cap);
    let ids: Vec<i64> = if time {
        let start = if desc { hi } else { lo };
        let within = crate::time_walk::Within {
            window: &w.window,
            start,
        };
        let Some(page) = crate::time_walk::proven_within(
            c,
            rows,
            complete,
            &w.checks,
            desc,
            reach,
            Some(&within),
        )?
        else {
            return Ok(None);
        };
        page.into_iter().map(|(id, _)| id).collect()
    } else {
        rows.iter()
            .take(usize::try_from(reach).unwrap_or(usize::MAX))
            .map(|&(id, _)| id)
            .collect()
    };
    Ok(Some((
        crate::ops::walked_page(c, ids, offset, order)?,
        total,
    )))
}

/// The statements of one walk.
struct Walk {
    /// The window's terms alone, on `dead_letters`.
    window: (String, Vec<Param>),
    /// The whole filter on the copy (alias `e`).
    copy: (String, Vec<Param>),
    /// The whole filter on the record itself (the records above the watermark, the strays).
    checks: (String, Vec<Param>),
    /// The search watermark: the copy holds the records at or below it.
    wm: i64,
    limits: Limits,
}

impl Walk {
    fn new(c: &mut dyn Conn, f: &Filter, limits: Limits) -> Result<Option<Walk>, ArchiveError> {
        let d = c.dialect();
        let Some(needle) = f.terms.get("error") else {
            return Ok(None);
        };
        let Some((check, mut p)) = crate::error_text::check_on_copy(d, needle) else {
            return Ok(None);
        };
        let mut others = f.clone();
        others.terms.remove("error");
        let (rest, rp) = others.to_sql_on(c)?;
        p.extend(rp);
        Ok(Some(Walk {
            window: f.window().to_sql_checks_only(d)?,
            copy: (format!("{check} AND {rest}"), p),
            checks: f.to_sql_checks_only(d)?,
            wm: crate::header_index::watermark(c)?,
            limits,
        }))
    }

    /// The ids of the window's first and last record by time, lower first; `None` for an empty
    /// window (the other plans answer it from the time index at once).
    fn ends(&self, c: &mut dyn Conn) -> Result<Option<(i64, i64)>, ArchiveError> {
        let from = crate::time_walk::by_time(c.dialect());
        let (cond, p) = &self.window;
        let one = |dir: &str| {
            format!("(SELECT id FROM {from} WHERE {cond} ORDER BY created_at {dir} LIMIT 1)")
        };
        let mut params = p.clone();
        params.extend_from_slice(p);
        let rows = c.query(&format!("SELECT {}, {}", one("ASC"), one("DESC")), &params)?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        let (Some(a), Some(b)) = (
            r.first().and_then(Cell::opt_int),
            r.get(1).and_then(Cell::opt_int),
        ) else {
            return Ok(None);
        };
        Ok(Some((a.min(b), a.max(b))))
    }

    /// The first `need` matches among the ids `lo..=hi` in id order (`desc`: from `hi` down) as
    /// `(id, created_at)`, and whether the walk reached the other end (fewer than `need`: every
    /// match there); `None` when it gives up. Its first `lead` ids are the margin beyond the
    /// window's end it starts from.
    fn walk(
        &self,
        c: &mut dyn Conn,
        (lo, hi): (i64, i64),
        lead: i64,
        desc: bool,
        need: u64,
    ) -> Result<Option<Walked>, ArchiveError> {
        let need_n = usize::try_from(need).unwrap_or(usize::MAX);
        // The records above the watermark come first newest first, last oldest first.
        let mut rows = Vec::new();
        if desc {
            rows = self.above(c, lo, hi, true, need)?;
            if rows.len() >= need_n {
                return Ok(Some((rows, false)));
            }
        }
        let copy_hi = hi.min(self.wm);
        if lo <= copy_hi {
            let Some(found) = self.copy_walk(
                c,
                (lo, copy_hi),
                lead,
                desc,
                need.saturating_sub(rows.len() as u64),
            )?
            else {
                return Ok(None);
            };
            rows.extend(found);
        }
        if rows.len() >= need_n {
            return Ok(Some((rows, false)));
        }
        if !desc {
            let rest = need.saturating_sub(rows.len() as u64);
            rows.extend(self.above(c, lo, hi, false, rest)?);
        }
        let complete = rows.len() < need_n;
        Ok(Some((rows, complete)))
    }

    /// The first `limit` matching records above the watermark among `lo..=hi` in id order.
    fn above(
        &self,
        c: &mut dyn Conn,
        lo: i64,
        hi: i64,
        desc: bool,
        limit: u64,
    ) -> Result<Vec<(i64, i64)>, ArchiveError> {
        let from = self.wm.max(lo.saturating_sub(1));
        if hi <= from || limit == 0 {
            return Ok(Vec::new());
        }
        let dir = if desc { "DESC" } else { "ASC" };
        let (cond, p) = &self.checks;
        let rows = c.query(
            &format!(
                "SELECT id, created_at FROM dead_letters WHERE id > {from} AND id <= {hi} AND {cond} \
                 ORDER BY id {dir} LIMIT {limit}"
            ),
            p,
        )?;
        Ok(id_times(&rows))
    }

    /// The copy's first `need` matches among `lo..=hi` in id order, in chunks (module docs);
    /// `None` when the matches found project more than the budget's rows (the `lead` ids of the
    /// margin walked first, in the first chunk, not counted in the share).
    fn copy_walk(
        &self,
        c: &mut dyn Conn,
        (lo, hi): (i64, i64),
        lead: i64,
        desc: bool,
        need: u64,
    ) -> Result<Option<Vec<(i64, i64)>>, ArchiveError> {
        let budget = self.limits.budget as f64;
        let range = (hi - lo + 1) as f64;
        let need_n = usize::try_from(need).unwrap_or(usize::MAX);
        let dir = if desc { "DESC" } else { "ASC" };
        let (cond, p) = &self.copy;
        let mut found: Vec<(i64, i64)> = Vec::new();
        let mut walked = 0i64;
        // The first chunk takes the margin too: its ids lie beyond the window's ends.
        let mut span = self.limits.first_span.max(1).saturating_add(lead);
        while found.len() < need_n && walked < hi - lo + 1 {
            let (a, b) = if desc {
                ((hi - walked - span + 1).max(lo), hi - walked)
            } else {
                (lo + walked, (lo + walked + span - 1).min(hi))
            };
            let limit = need_n - found.len();
            // The bounds as literals (integers): a generic plan, not knowing them, may read
            // the copy another way than its primary key's range.
            let rows = c.query(
                &format!(
                    "SELECT id, created_at FROM dead_letter_error_text AS e \
                     WHERE id >= {a} AND id <= {b} AND {cond} ORDER BY id {dir} LIMIT {limit}"
                ),
                p,
            )?;
            found.extend(id_times(&rows));
            walked += b - a + 1;
            if found.len() >= need_n {
                break;
            }
            // The rows the walk needs at the share found so far past the margin (`lead`), at
            // most the range's.
            let core = (walked - lead).max(0) as f64;
            let projected = if found.is_empty() {
                range
            } else {
                (lead as f64 + (need as f64) * core / (found.len() as f64)).min(range)
            };
            if projected > budget {
                return Ok(None);
            }
            let rest = (projected - walked as f64).max(0.0) * 1.1 + 16.0;
            span = span.saturating_mul(2).min(rest as i64).max(16);
        }
        Ok(Some(found))
    }

    /// The window's records outside `lo..=hi` that match, as `(id, created_at)`; `None` when
    /// more than `time_walk::STRAYS` records of the window lie there.
    fn matching_strays(
        &self,
        c: &mut dyn Conn,
        lo: i64,
        hi: i64,
    ) -> Result<Option<Vec<(i64, i64)>>, ArchiveError> {
        let from = crate::time_walk::by_time(c.dialect());
        let (cond, p) = &self.window;
        let rows = c.query(
            &format!(
                "SELECT id, created_at FROM {from} WHERE {cond} AND (id < {lo} OR id > {hi}) LIMIT {}",
                crate::time_walk::STRAYS + 1
            ),
            p,
        )?;
        let strays = id_times(&rows);
        if strays.len() as u64 > crate::time_walk::STRAYS {
            return Ok(None);
        }
        Ok(Some(crate::time_walk::matching(c, &strays, &self.checks)?))
    }
}

/// A walk's matches as `(id, created_at)` in its order, and whether it reached its range's other
/// end (every match of the range).
type Walked = (Vec<(i64, i64)>, bool);
