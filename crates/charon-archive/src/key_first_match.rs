//! An `error` list sorted by a group key whose first values hold no match (lead, stop 45;
//! docs/archive.md "Thirtieth round").
//!
//! `crate::key_first_value` answers a page lying in the sort's first value of the key from that
//! value's list in id order. `error=cause 5&sort=original_queue` over 1M records has no match in
//! the first seven values (`orders-0`, `orders-1`, `orders-10` … `orders-14` in text order): all
//! 100,200 matches were read and sorted instead (SQLite 53 ms, PostgreSQL 104 ms of the page).
//!
//! **The rule**: the values of a sample of the matches (the walk's newest, `ops`) name one value
//! `m` that holds a match; the first value holding one is `m` or before it. If no match lies
//! before `m` in the sort's order, `m` is the first, and a page within `m`'s matches is `m`'s
//! list in id order. [`none_before`] shows that in one statement, as a range of the key, never
//! reading the matches elsewhere:
//! - **SQLite**: the key's index range (`dead_letters_orig_queue` and its kind, `(X, …, id)`) is
//!   the loop, each id looked up among the needle's FTS5 rowids, and only the ids both hold reach
//!   the copy to be checked (`error_text::parts_within`, as `crate::keyed_candidates`): the
//!   350,701 entries of seven values against 100,200 rowids, 19 ms.
//! - **PostgreSQL**: one scan of migration 29's trigram index, whose key columns take the range
//!   as an index condition (`crate::error_grams`): 18 ms. (As `= ANY` of the seven values, GIN
//!   repeats the whole scan once per value: 100 ms; by migration 26's word trigrams the range's
//!   38,930 false candidates were each rechecked on the heap: 43 ms.)
//! - the records above the search watermark are checked on `dead_letters`, as every list does.
//!
//! A match before `m` (the sample missed a rarer value) leaves the page to the plans after.

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::{Conn, Dialect, Param};

/// Matches whose values name `m` (the walk's newest, [`crate::text_walk::Source::rows_sql`]).
pub const SAMPLE: u64 = 256;

/// The first of `values` (the key's values in the sort's order, `crate::key_sort::values`) that
/// `sampled` (values of some matches) holds, with its position.
pub fn first_sampled(
    values: &[(Option<String>, u64)],
    sampled: &[Option<String>],
) -> Option<(usize, Option<String>)> {
    values
        .iter()
        .position(|(v, _)| sampled.contains(v))
        .map(|i| (i, values[i].0.clone()))
}

/// The key condition of the values before `m` in `ORDER BY col dir` (`dir`: `ASC` or `DESC`),
/// `before_null` when NULL is among them, and its parameters.
fn before(col: &str, dir: &str, m: &str, before_null: bool) -> (String, Vec<Param>) {
    let op = if dir == "DESC" { ">" } else { "<" };
    let null = if before_null {
        format!(" OR {col} IS NULL")
    } else {
        String::new()
    };
    (format!("({col} {op} ?{null})"), vec![Param::from(m)])
}

/// Whether no record matching `f` (an `error` term and key terms the copy holds) has a value of
/// `col` before `m` in `ORDER BY col dir`; `before_null`: NULL sorts before `m` and some
/// record holds it. `None` when `f` has no `error` term or the index cannot narrow its needle
/// (every copy row would be read: another plan is cheaper).
pub fn none_before(
    c: &mut dyn Conn,
    f: &Filter,
    col: &str,
    dir: &str,
    m: &str,
    before_null: bool,
) -> Result<Option<bool>, ArchiveError> {
    none_where(c, f, before(col, dir, m, before_null))
}

/// [`none_before`] for the records whose `col` is `v` (`crate::key_first_value`'s values listed
/// one by one: an empty value shown so by the same statement, not by its list's count — on
/// PostgreSQL SKIPPED's 200,000 records 21 → 8 ms with the rarest trigram).
pub fn none_at(
    c: &mut dyn Conn,
    f: &Filter,
    col: &str,
    v: &str,
) -> Result<Option<bool>, ArchiveError> {
    none_where(c, f, (format!("{col} = ?"), vec![Param::from(v)]))
}

/// Whether no record matching `f` meets the key condition `key` (with its parameters).
fn none_where(
    c: &mut dyn Conn,
    f: &Filter,
    key: (String, Vec<Param>),
) -> Result<Option<bool>, ArchiveError> {
    let Some(needle) = f.terms.get("error") else {
        return Ok(None);
    };
    let d = c.dialect();
    let fts = match d {
        Dialect::Sqlite => crate::error_text::fts_query(c, needle)?,
        Dialect::Postgres => None,
    };
    if d == Dialect::Sqlite && fts.is_none() && crate::search_index::trigram_query(needle).is_none()
    {
        return Ok(None);
    }
    let (others, op) = crate::ops::others_sql(c, f)?;
    let (range, mut params) = key;
    // SQLite: the key condition alone drives the index range; the other terms are checked on
    // the few copy rows the intersection leaves (beside the range they drew SQLite to another
    // term's index: `reason=rejected`, every record, 88 → 278 ms).
    let within = (d == Dialect::Sqlite).then(|| (range.clone(), params.clone()));
    params.extend(op.iter().cloned());
    let cond = format!("{range} AND {others}");
    let Some(parts) = crate::error_text::parts_within(d, needle, fts, within) else {
        return Ok(None);
    };
    let (indexed, mut p) = match d {
        Dialect::Sqlite => {
            let mut p = parts.indexed_params;
            p.extend(op);
            (format!("{} AND {others}", parts.indexed), p)
        }
        // The range is a condition of the trigram index's scan (its key columns), with the
        // needle's rarest trigram.
        Dialect::Postgres => {
            let Some((check, mut p)) = crate::error_text::check_on_copy(d, needle) else {
                return Ok(None);
            };
            let like = crate::error_grams::rarest_pattern(c, needle)?;
            p.extend(params.iter().cloned());
            (
                format!(
                    "SELECT e.id FROM dead_letter_error_text AS e \
                     WHERE e.error_grams LIKE {like} AND {check} AND {cond}"
                ),
                p,
            )
        }
    };
    // COUNT, not EXISTS or LIMIT 1: PostgreSQL plans those as a scan of the copy expecting an
    // early match (118 ms).
    let sql = format!(
        "SELECT (SELECT COUNT(*) FROM ({indexed}) AS m) + \
         (SELECT COUNT(*) FROM dead_letters WHERE {} AND {cond})",
        parts.rest
    );
    p.extend(parts.rest_params);
    p.extend(params);
    Ok(Some(crate::ops::count(c, &sql, &p)? == 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(v: &[Option<&str>]) -> Vec<(Option<String>, u64)> {
        v.iter().map(|v| (v.map(str::to_string), 1)).collect()
    }

    #[test]
    fn the_first_value_the_sample_holds_in_the_sorts_order() {
        let values = vals(&[Some("orders-0"), Some("orders-1"), Some("orders-15"), None]);
        let sampled = vec![Some("orders-5".to_string()), Some("orders-15".to_string())];
        assert_eq!(
            first_sampled(&values, &sampled),
            Some((2, Some("orders-15".to_string())))
        );
        assert_eq!(first_sampled(&values, &[Some("x".into())]), None);
        assert_eq!(first_sampled(&values, &[None]), Some((3, None)));
    }

    #[test]
    fn the_values_before_are_a_range_of_the_key() {
        assert_eq!(
            before("original_queue", "ASC", "m", false).0,
            "(original_queue < ?)"
        );
        assert_eq!(
            before("status", "DESC", "m", true).0,
            "(status > ? OR status IS NULL)"
        );
    }
}
