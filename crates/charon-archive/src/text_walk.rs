//! A bounded walk over the newest records for `error`/`body` lists whose needle matches many
//! records (branch `t9o`, docs/archive.md "Twenty-sixth round").
//!
//! The search index answers a text filter with its whole candidate list: PostgreSQL's trigram
//! bitmap of `cause 5` holds 200,000 entries before the first row is checked (30 ms), and
//! `body=xxxx` over 1,000,000 records builds a 1,000,000-id array (0.5 s) for the count and
//! again for the page. When the needle matches a large share of the records, checking the newest
//! records one by one (the filter's own exact check, no candidates) reaches the capped count's
//! `cap + 1` matches (`crate::total_cap`) or a page's `offset + page_size` after a few thousand
//! rows. So:
//! - a **probe** counts the matches among [`PROBE`] rows at three places (the median); from
//!   their share, the rows a walk needs for `need` matches are estimated, and the walk is taken
//!   only when that is at most three quarters of its budget (a rare needle's probe finds few
//!   matches: no walk, the index answers);
//! - the **walk** reads at most the budget's rows (`id > MAX(id) - budget`, newest first: ids are
//!   gaps at most, so never more rows) and stops at `need` matches. Reaching them is exact (a
//!   count of at least `cap + 1` real matches; the page's first `need` matches in id order, since
//!   the walk is in that order from the end). Not reaching them, the caller falls back to the
//!   index's plan: a wrong estimate costs time, never a wrong answer.
//!
//! - a page **sorted by time** walks `dead_letters_created` in its order the same way
//!   ([`Source::page_ids_in`]): the first `need` matches of a prefix of the order are the page's.
//!
//! The walk runs on the narrow copy of the error texts (`dead_letter_error_text`, ~100 B a row)
//! for a filter the copy answers (`crate::key_copy::answers`) with an `error` term and no `body`
//! term, else on `dead_letters` (the filter checked on the record itself).

use crate::error::ArchiveError;
use crate::sql::{Cell, Conn, Dialect, Param};

/// Rows a probe reads.
pub const PROBE: u64 = 1_000;

/// Most rows a walk over the copy reads: (PostgreSQL, SQLite). ~0.15 and ~0.5 µs a row warm
/// over 1M (docs/archive.md "Twenty-sixth round").
pub const COPY_BUDGET: (u64, u64) = (300_000, 200_000);

/// Most rows a walk over `dead_letters` reads: (PostgreSQL, SQLite). ~0.8 and ~4 µs a row warm
/// (a record's row is ~1.2 KB).
pub const RECORD_BUDGET: (u64, u64) = (40_000, 15_000);

fn budget(d: Dialect, (pg, sqlite): (u64, u64)) -> u64 {
    match d {
        Dialect::Postgres => pg,
        Dialect::Sqlite => sqlite,
    }
}

/// Where a walk runs and what it checks on each row.
#[derive(Debug, Clone)]
pub struct Source {
    /// `dead_letters` or `dead_letter_error_text AS e`.
    from: &'static str,
    /// The table alone (for its `MAX(id)`).
    table: &'static str,
    cond: String,
    params: Vec<Param>,
    budget: u64,
    probed: Option<u64>,
    above: Option<(String, Vec<Param>)>,
    /// Whether [`Source::count_over`] keeps the rows it walks for [`Source::first_times`].
    keep_times: bool,
    /// The rows the count walked, newest first, as `(id, created_at)`, and how many it asked
    /// for (fewer rows: the budget's span holds no more).
    newest: Option<(Vec<(i64, i64)>, u64)>,
}

impl Source {
    /// The newest rows of `dead_letters`, checked by `cond`.
    pub fn records(d: Dialect, cond: String, params: Vec<Param>) -> Source {
        Source {
            from: "dead_letters",
            table: "dead_letters",
            cond,
            params,
            budget: budget(d, RECORD_BUDGET),
            probed: None,
            above: None,
            keep_times: false,
            newest: None,
        }
    }

    /// The newest rows of the copy of the error texts (alias `e`), checked by `cond`. The copy
    /// holds the records at or below the search watermark only: a walk there counts a lower
    /// bound and never pages.
    pub fn copy(d: Dialect, cond: String, params: Vec<Param>) -> Source {
        Source {
            from: "dead_letter_error_text AS e",
            table: "dead_letter_error_text",
            cond,
            params,
            budget: budget(d, COPY_BUDGET),
            probed: None,
            above: None,
            keep_times: false,
            newest: None,
        }
    }

    /// The matching ids among rows newer than the newest id minus `span`, newest first, at most
    /// `limit` of them (`asc`: among the oldest `span` ids, oldest first).
    fn ids_sql(&self, span: u64, limit: u64, asc: bool) -> String {
        self.span_rows_sql("id", span, limit, asc)
    }

    /// [`Source::ids_sql`] reading `cols` of each matching row.
    fn span_rows_sql(&self, cols: &str, span: u64, limit: u64, asc: bool) -> String {
        let (from, t, cond) = (self.from, self.table, &self.cond);
        if asc {
            format!(
                "SELECT {cols} FROM {from} WHERE id < (SELECT COALESCE(MIN(id), 0) FROM {t}) + {span} \
                 AND {cond} ORDER BY id ASC LIMIT {limit}"
            )
        } else {
            format!(
                "SELECT {cols} FROM {from} WHERE id > (SELECT COALESCE(MAX(id), 0) FROM {t}) - {span} \
                 AND {cond} ORDER BY id DESC LIMIT {limit}"
            )
        }
    }

    /// The first `limit` matching rows of the walk in id order (`desc`: newest first) as
    /// `(id, created_at)`, fewer when the budget holds fewer (`crate::time_walk`).
    pub fn first_times(
        &self,
        c: &mut dyn Conn,
        desc: bool,
        limit: u64,
    ) -> Result<Vec<(i64, i64)>, ArchiveError> {
        if let (true, Some((rows, asked))) = (desc, &self.newest)
            && (limit <= *asked || (rows.len() as u64) < *asked)
        {
            let n = usize::try_from(limit).unwrap_or(usize::MAX).min(rows.len());
            return Ok(rows[..n].to_vec());
        }
        let rows = c.query(
            &self.span_rows_sql("id, created_at", self.budget, limit, !desc),
            &self.params,
        )?;
        Ok(crate::time_walk::id_times(&rows))
    }

    /// The probe: how many of [`PROBE`] rows match, at three places — the newest, and a quarter
    /// and half the budget further back (or half the ids, when fewer) — their median (read once,
    /// then remembered). Several places, so that neither a needle only the newest records hold
    /// (the last burst's) looks common, nor one the newest records lack (a burst of another
    /// status) looks rare.
    pub fn probe(&mut self, c: &mut dyn Conn) -> Result<u64, ArchiveError> {
        if let Some(m) = self.probed {
            return Ok(m);
        }
        let (from, t, cond) = (self.from, self.table, &self.cond);
        let ends = c.query(
            // Two subqueries: SQLite answers `MAX` or `MIN` from the index's end only when it is
            // the statement's one aggregate (both in one SELECT read the whole table).
            &format!(
                "SELECT (SELECT COALESCE(MAX(id), 0) FROM {t}), (SELECT COALESCE(MIN(id), 0) FROM {t})"
            ),
            &[],
        )?;
        let (max, min) = ends.first().map_or((0, 0), |r| (r[0].int(), r[1].int()));
        let half = u64::try_from(max.saturating_sub(min) / 2).unwrap_or(0);
        let mut found = Vec::with_capacity(3);
        for back in [0, self.budget / 4, self.budget / 2] {
            let back = back.min(half);
            let hi = max.saturating_sub(i64::try_from(back).unwrap_or(i64::MAX));
            let lo = hi.saturating_sub(i64::try_from(PROBE).unwrap_or(i64::MAX));
            // The bounds as parameters: one statement text, prepared once per connection.
            let sql = format!("SELECT COUNT(*) FROM {from} WHERE id <= ? AND id > ? AND {cond}");
            let mut p = vec![Param::from(hi), Param::from(lo)];
            p.extend_from_slice(&self.params);
            let n = c
                .query(&sql, &p)?
                .first()
                .and_then(|r| r.first())
                .map_or(0, Cell::int);
            found.push(u64::try_from(n).unwrap_or(0));
            // Two places without a match: the median is 0 whatever the third finds.
            if found.iter().filter(|&&n| n == 0).count() == 2 {
                break;
            }
        }
        found.sort_unstable();
        let m = found.get(1).copied().unwrap_or(0);
        self.probed = Some(m);
        Ok(m)
    }

    /// Whether a walk is likely to find `need` matches within its budget: the probe's share of
    /// matches, extrapolated, needs at most three quarters of the budget.
    pub fn promising(&mut self, c: &mut dyn Conn, need: u64) -> Result<bool, ArchiveError> {
        let m = self.probe(c)?;
        Ok(m > 0 && need.saturating_mul(PROBE) / m <= self.budget / 4 * 3)
    }

    /// A count of matches among the newest budget's rows, up to `cap + 1`: over `cap` means at
    /// least `cap + 1` match (a lower bound); otherwise `None` (the walk proves nothing).
    pub fn count_over(&mut self, c: &mut dyn Conn, cap: u64) -> Result<bool, ArchiveError> {
        let need = cap.saturating_add(1);
        if self.keep_times {
            let rows = self.first_times(c, true, need)?;
            let over = rows.len() as u64 >= need;
            self.newest = Some((rows, need));
            return Ok(over);
        }
        let sql = format!(
            "SELECT COUNT(*) FROM ({}) AS w",
            self.ids_sql(self.budget, need, false)
        );
        let n = c
            .query(&sql, &self.params)?
            .first()
            .and_then(|r| r.first())
            .map_or(0, Cell::int);
        Ok(u64::try_from(n).unwrap_or(0) >= need)
    }

    /// The same walk, whose count ([`Source::count_over`]) reads and keeps each matching row's
    /// `(id, created_at)`, so that a page sorted by time walks no row twice
    /// ([`Source::first_times`] newest first from them; `crate::time_walk`): the count's walk
    /// of 10,001 matches and then the page's of 7,891 read the same rows (PostgreSQL 15 + 13 ms
    /// for `error=cause 5&sort=-updated_at&page=50` over 1M).
    pub fn keeping_times(mut self) -> Source {
        self.keep_times = true;
        self
    }

    /// The same walk with another row budget (tests of the budget's edge).
    #[doc(hidden)]
    pub fn with_budget(mut self, budget: u64) -> Source {
        self.budget = budget;
        self
    }

    /// The records above the search watermark that match, as a condition on `dead_letters`
    /// with its parameters: a walk over the copy pages only with them (the copy does not hold
    /// those records).
    pub fn with_above(mut self, cond: String, params: Vec<Param>) -> Source {
        self.above = Some((cond, params));
        self
    }

    /// The first `reach` matching ids in id order (`desc`: newest first) when the walk finds
    /// that many within its budget. Over the copy (given [`Source::with_above`]), its first
    /// `reach` merged with the first `reach` matching records above the watermark: the first
    /// `reach` of both are the first `reach` of all.
    pub fn page_ids(
        &self,
        c: &mut dyn Conn,
        desc: bool,
        reach: u64,
    ) -> Result<Option<Vec<i64>>, ArchiveError> {
        let above = match (&self.above, self.table) {
            (_, "dead_letters") => None,
            (Some(a), _) => Some(a),
            (None, _) => return Ok(None),
        };
        let rows = c.query(&self.ids_sql(self.budget, reach, !desc), &self.params)?;
        let mut ids: Vec<i64> = rows
            .iter()
            .filter_map(|r| r.first().map(Cell::int))
            .collect();
        if (ids.len() as u64) < reach {
            return Ok(None);
        }
        if let Some((cond, p)) = above {
            let dir = if desc { "DESC" } else { "ASC" };
            let rows = c.query(
                &format!(
                    "SELECT id FROM dead_letters WHERE {cond} ORDER BY id {dir} LIMIT {reach}"
                ),
                p,
            )?;
            ids.extend(rows.iter().filter_map(|r| r.first().map(Cell::int)));
            ids.sort_unstable();
            if desc {
                ids.reverse();
            }
            ids.truncate(usize::try_from(reach).unwrap_or(usize::MAX));
        }
        Ok(Some(ids))
    }
}

impl Source {
    /// Whether the walk runs on the copy of the error texts (which holds only the records at or
    /// below the search watermark, and only `crate::key_copy::KEY_COLUMNS`, `created_at` among
    /// them, beside the texts).
    pub fn on_copy(&self) -> bool {
        self.table != "dead_letters"
    }

    /// The walk's statement selecting `select` (columns of its table, `id` first) of at most
    /// `limit` matching rows newest first, among the newest budget's rows, and its parameters
    /// (`/groups` of the newest matches, `crate::newest_groups`). Fewer than `limit` rows proves
    /// nothing about the rows beyond the budget.
    pub fn rows_sql(&self, select: &str, limit: u64) -> (String, Vec<Param>) {
        let ids = self.ids_sql(self.budget, limit, false);
        let sql = match ids.strip_prefix("SELECT id ") {
            Some(rest) => format!("SELECT {select} {rest}"),
            None => ids,
        };
        (sql, self.params.clone())
    }
}

impl Source {
    /// The first `reach` matching ids in `order` (`created_at ASC|DESC, id …`, as
    /// `filter::order_by` writes it) when they lie within the first budget's records in that
    /// order (only over `dead_letters`): the walk reads `dead_letters_created` in order, at most
    /// the budget's rows, and checks each record. The first `reach` matches of a prefix of the
    /// order are the first `reach` of all.
    pub fn page_ids_in(
        &self,
        c: &mut dyn Conn,
        order: &str,
        reach: u64,
    ) -> Result<Option<Vec<i64>>, ArchiveError> {
        if self.table != "dead_letters" {
            return Ok(None);
        }
        let sql = format!(
            "SELECT id FROM (SELECT * FROM dead_letters ORDER BY {order} LIMIT {}) AS w \
             WHERE {} ORDER BY {order} LIMIT {reach}",
            self.budget, self.cond
        );
        let rows = c.query(&sql, &self.params)?;
        let ids: Vec<i64> = rows
            .iter()
            .filter_map(|r| r.first().map(Cell::int))
            .collect();
        Ok((ids.len() as u64 >= reach).then_some(ids))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_is_bounded_by_its_span_and_stops_at_its_limit() {
        let s = Source::records(Dialect::Sqlite, "x = ?".into(), vec![Param::from(1_i64)]);
        assert_eq!(
            s.ids_sql(50, 7, false),
            "SELECT id FROM dead_letters WHERE id > (SELECT COALESCE(MAX(id), 0) FROM dead_letters) - 50 \
             AND x = ? ORDER BY id DESC LIMIT 7"
        );
        let s = Source::copy(Dialect::Sqlite, "e.x = ?".into(), vec![]);
        assert!(
            s.ids_sql(50, 7, true)
                .starts_with("SELECT id FROM dead_letter_error_text AS e WHERE id < (SELECT COALESCE(MIN(id), 0) FROM dead_letter_error_text) + 50")
        );
    }
}
