//! A text term (`error`, `body`) with another term that matches few records, or whose records
//! the needle mostly matches: the other term's records walked, each checked for the needle
//! (branch `f9a`, docs/archive.md "Twenty-eighth round").
//!
//! The text plans start from the needle: the search index's candidates (`cause 5`: 200,298
//! trigram candidates over 1M records) are checked one by one against the other terms, or the
//! newest rows are walked (`crate::text_walk`) when the needle is common among all records. A
//! request such as `error=cause 5&since=<the last 2,000 records>` (200 matches) or
//! `body=xxxx&original_queue=orders-7` (every record of the queue matches) read the whole
//! candidate list for a few matches, or a 1,000,000-id candidate array for a page.
//!
//! Here the **driving set** is the records of one other term, read in id order from its index
//! alone — a header term's exact index range (`crate::header_index`), a time range's
//! `dead_letters_created`, or a key column's `(X, id)` index (PostgreSQL: `queue`,
//! `original_queue`, `error_fingerprint`, `status`, `reason`, with a status term other than
//! `PENDING` the partial `(X, status, id)` range; SQLite: `queue`, `reason`, `status`, and since
//! stop 46 `original_queue` and `error_fingerprint`, their `(X, status, id)` ranges merged in id
//! order, `choice::STATUS_BEFORE_ID`; of several key terms, the one with the fewest records by the
//! summary) — its first
//! [`budget`] + 1 ids. Those ids are checked in growing chunks against the whole filter but the
//! driving term (an `error` needle on the narrow copy of the error texts, `crate::error_text`,
//! for the records at or below the search watermark; every other record on `dead_letters`),
//! until `need` matches are found:
//! - **the set walked whole** (it has at most [`budget`] records): its matches are every match,
//!   in id order — an exact count and any page;
//! - **`need` matches found** within the set's first ids: the first `need` matches in id order (a
//!   prefix of the driving set's order holds the first matches of all), so a page and a count of
//!   at least `need`;
//! - (stop 46) a page **sorted by time** from the first matches in id order, proven against the
//!   time index as `crate::time_walk` proves a walk's, and on SQLite the **capped count** of a
//!   list in another order (`capped_total`);
//! - else no proof (`None`): the caller's plans answer. The walk stops early when, after a
//!   chunk, the share of matches found projects more rows than it holds (a needle rare among the
//!   set's records: `error=cause 5&original_queue=orders-7`, 0 of 50,100): a wrong estimate costs
//!   time, never a wrong answer.

mod choice;
mod pages;

pub use pages::{capped_total, list_page};

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::{Cell, Conn, Dialect, Param};
use choice::{Driver, STATUS_BEFORE_ID, chosen, driving_ids};

/// Most ids of the driving set read and checked: (PostgreSQL, SQLite). A check is a primary-key
/// read of the copy's or the record's row, ~1–3 µs on PostgreSQL over 1M records (the record's
/// heap page often from the OS cache), ~0.5 µs on the SQLite copy and ~4 µs on a SQLite record.
pub const BUDGET: (u64, u64) = (12_000, 12_000);

/// The first chunk's ids; each later chunk is twice the last.
pub const FIRST_CHUNK: usize = 1_000;

/// The budget on dialect `d`.
pub fn budget(d: Dialect) -> u64 {
    match d {
        Dialect::Postgres => BUDGET.0,
        Dialect::Sqlite => BUDGET.1,
    }
}

/// The first `need` matches of `f` in id order (`desc`: newest first) when a walk of its driving
/// set proves them (module docs): `Some(ids)` with `need` ids (at least `need` match), or fewer
/// (every match: the set was walked whole); `None` when `f` has no driving set or the walk
/// proves nothing.
pub fn first_matches(
    c: &mut dyn Conn,
    f: &Filter,
    desc: bool,
    need: u64,
) -> Result<Option<Vec<i64>>, ArchiveError> {
    Ok(first_rows(c, f, desc, need, &[])?.map(|rows| {
        rows.iter()
            .filter_map(|r| r.first().and_then(Cell::opt_int))
            .collect()
    }))
}

/// [`first_matches`] as rows of `id` and the columns `cols` (of the record; `created_at` and the
/// group-key columns the copy holds are read there when the needle is checked on the copy).
pub fn first_rows(
    c: &mut dyn Conn,
    f: &Filter,
    desc: bool,
    need: u64,
    cols: &[&str],
) -> Result<Option<Vec<Vec<Cell>>>, ArchiveError> {
    let budget = budget(c.dialect());
    first_rows_within(c, f, desc, need, cols, budget)
}

/// [`first_matches`] with another budget (tests of the driving set's bound).
#[doc(hidden)]
pub fn first_matches_within(
    c: &mut dyn Conn,
    f: &Filter,
    desc: bool,
    need: u64,
    budget: u64,
) -> Result<Option<Vec<i64>>, ArchiveError> {
    Ok(
        first_rows_within(c, f, desc, need, &[], budget)?.map(|rows| {
            rows.iter()
                .filter_map(|r| r.first().and_then(Cell::opt_int))
                .collect()
        }),
    )
}

fn first_rows_within(
    c: &mut dyn Conn,
    f: &Filter,
    desc: bool,
    need: u64,
    cols: &[&str],
    budget: u64,
) -> Result<Option<Vec<Vec<Cell>>>, ArchiveError> {
    let Some(driver) = chosen(c, f, cols)? else {
        return Ok(None);
    };
    let Some(set) = driving_ids(c, f, &driver, desc, budget)? else {
        return Ok(None);
    };
    let whole = (set.len() as u64) <= budget;
    let check = Check::new(c, f, &driver, cols)?;
    let need_n = usize::try_from(need).unwrap_or(usize::MAX);
    let mut found: Vec<Vec<Cell>> = Vec::new();
    let mut at = 0usize;
    let mut chunk = FIRST_CHUNK;
    while at < set.len() && found.len() < need_n {
        let end = (at + chunk).min(set.len());
        let mut got = check.matching(c, &set[at..end])?;
        got.sort_unstable_by_key(|r| r.first().and_then(Cell::opt_int).unwrap_or(0));
        if desc {
            got.reverse();
        }
        found.extend(got);
        at = end;
        chunk = chunk.saturating_mul(2);
        if found.len() >= need_n || found.is_empty() && whole {
            continue;
        }
        // The rows the walk needs at the share found so far: against those it holds, half again
        // (not the whole set: give up; a share of 900 in the first 1,000 — orders-7's newest 100
        // are another queue's — projected 12,518 rows for a time page's 11,266 matches among
        // 12,001, and gave up a walk that needed 11,366), and as the next chunk's size (a tenth
        // more, so that a common needle is not checked on thousands of rows past its last match).
        let projected = (need as f64) * (at as f64) / (found.len().max(1) as f64);
        if !whole && (found.is_empty() || projected > set.len() as f64 * 1.5) {
            return Ok(None);
        }
        if !found.is_empty() {
            let rest = (projected - at as f64).max(0.0) * 1.1 + 16.0;
            chunk = chunk.min(rest as usize).max(16);
        }
    }
    if found.len() >= need_n {
        found.truncate(need_n);
        return Ok(Some(found));
    }
    Ok(whole.then_some(found))
}

/// How a chunk of the driving set's ids is checked against the filter but its driving term.
struct Check {
    /// `id` and the columns read of each match.
    select: String,
    /// A key or time driver (on SQLite, unless the needle is checked on the copy): a chunk is
    /// the range of ids between its first and last, read through the driver's own index
    /// (`X = ? AND id BETWEEN …`, a range scan of its `(X, id)` index and the records), not a
    /// list of ids (PostgreSQL: one index descent each, ~2 µs an id against ~1; SQLite
    /// `body=…&status=SKIPPED` 25–27 ms by lists, ~14 by the range).
    bounded: bool,
    /// `error` on the copy (alias `e`) for the ids at or below the watermark: its condition,
    /// parameters and the watermark.
    copy: Option<(String, Vec<Param>, i64)>,
    /// The condition on `dead_letters` (every id, or those above the watermark).
    rest: String,
    rest_params: Vec<Param>,
}

impl Check {
    fn new(
        c: &mut dyn Conn,
        f: &Filter,
        driver: &Driver,
        cols: &[&str],
    ) -> Result<Check, ArchiveError> {
        let d = c.dialect();
        let select = std::iter::once("id")
            .chain(cols.iter().copied())
            .collect::<Vec<_>>()
            .join(", ");
        let keyed = !matches!(driver, Driver::Header(..));
        // An `error` needle is checked on the copy through an id list (SQLite ~0.5 µs a row
        // against ~1.4 on the record; PostgreSQL, stop 46: 10,001 ids of a fingerprint 9 ms on
        // the copy against 49 by the key's id range on the records, whose texts are detoasted);
        // every other walk of a key or a range is bounded.
        let copy_checked = f.terms.contains_key("error")
            && !f.terms.contains_key("body")
            && crate::key_copy::answers(f);
        // SQLite's `(X, status, id)` keys hold no id range per value: a chunk is an id list.
        let ranged = match driver {
            Driver::Key(col) => d != Dialect::Sqlite || !STATUS_BEFORE_ID.contains(col),
            _ => true,
        };
        if keyed && ranged && !copy_checked {
            let (rest, rest_params) = f.to_sql_checks_only(d)?;
            return Ok(Check {
                select,
                bounded: true,
                copy: None,
                rest,
                rest_params,
            });
        }
        // The driving term is implied by the set (a header's exact range); a range or key term
        // is cheap on the row and kept.
        let mut g = f.clone();
        if let Driver::Header(name, _) = driver {
            g.terms.remove(&format!("header.{name}"));
        }
        let (rest, rest_params) = g.to_sql_checks_only(d)?;
        let on_copy = !g.terms.contains_key("body")
            && crate::key_copy::answers(f)
            && cols
                .iter()
                .all(|c| crate::key_copy::KEY_COLUMNS.contains(c));
        let copy = match (g.terms.get("error"), on_copy) {
            (Some(needle), true) => match crate::error_text::check_on_copy(d, needle) {
                Some((check, mut p)) => {
                    let mut o = g.clone();
                    o.terms.remove("error");
                    let (others, op) = o.to_sql_on(c)?;
                    p.extend(op);
                    let wm = crate::header_index::watermark(c)?;
                    Some((format!("{check} AND {others}"), p, wm))
                }
                None => None,
            },
            _ => None,
        };
        Ok(Check {
            select,
            bounded: false,
            copy,
            rest,
            rest_params,
        })
    }

    /// The rows (`id` first) of the ids of `ids` that match, in any order.
    fn matching(&self, c: &mut dyn Conn, ids: &[i64]) -> Result<Vec<Vec<Cell>>, ArchiveError> {
        let d = c.dialect();
        if self.bounded {
            let (Some(lo), Some(hi)) = (ids.iter().min(), ids.iter().max()) else {
                return Ok(Vec::new());
            };
            // The bounds as literals (integers from the database): a generic plan, not knowing
            // them, estimated the id range as 0.5% of the table and walked the primary key over
            // it, reading twenty records for each of a key's (`original_queue`: 14–22 ms a chunk
            // of 2,000–4,000 ids, against 3 through `(original_queue, id)`).
            return c.query(
                &format!(
                    "SELECT {} FROM dead_letters WHERE id >= {lo} AND id <= {hi} AND {}",
                    self.select, self.rest
                ),
                &self.rest_params,
            );
        }
        let (low, high): (Vec<i64>, Vec<i64>) = match &self.copy {
            Some((_, _, wm)) => ids.iter().partition(|&&id| id <= *wm),
            None => (Vec::new(), ids.to_vec()),
        };
        let mut out = Vec::new();
        if let (Some((cond, p, _)), false) = (&self.copy, low.is_empty()) {
            let sql = format!(
                "SELECT {} FROM dead_letter_error_text AS e WHERE {} AND {cond}",
                self.select,
                id_list(d, "e.id", &low)
            );
            out.extend(c.query(&sql, p)?);
        }
        if !high.is_empty() {
            let sql = format!(
                "SELECT {} FROM dead_letters WHERE {} AND {}",
                self.select,
                id_list(d, "id", &high),
                self.rest
            );
            out.extend(c.query(&sql, &self.rest_params)?);
        }
        Ok(out)
    }
}

/// `col` among `ids` as integer literals (they come from the database): one array over the
/// primary key on PostgreSQL.
fn id_list(d: Dialect, col: &str, ids: &[i64]) -> String {
    let list: Vec<String> = ids.iter().map(i64::to_string).collect();
    match d {
        Dialect::Postgres => format!("{col} = ANY('{{{}}}'::bigint[])", list.join(",")),
        Dialect::Sqlite => format!("{col} IN ({})", list.join(",")),
    }
}
