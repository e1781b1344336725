//! Issue 9's capped `total` (branch `t9o`, docs/archive.md "API" and "Twenty-sixth round"): how
//! a list whose filter has an `error` or `body` term — or, since stop 42, a header term
//! ([`cap_for`]) — counts its matches.
//!
//! Such a filter's exact count reads every match (a needle matching 100,000 records reads
//! 100,000 rows of the error-text copy; `body=` matching every record reads every record), while
//! its page reads only the page's matches. Where the `total` cannot be had exactly without that,
//! the list counts at most [`CAP`] + 1 matches per part of its count and answers
//! `"total": CAP, "total_relation": "gte"` when more were found — a true lower bound, as
//! Elasticsearch's `track_total_hits` default — and the exact count with
//! `"total_relation": "eq"` otherwise. `?exact_total=true` counts every match.
//!
//! This module owns the rule and the SQL wrapper; `ops::list_capped` applies it to the count
//! paths of `error` and `body` filters (`error_text::count_capped`, `key_copy::Split::
//! count_capped`, the plain count on `dead_letters`). The page never depends on the count's
//! exactness: a plan that reads the total to choose an index only chooses, every plan returns
//! the same rows.

use crate::filter::Filter;

/// The most matches a capped count reads per part before it answers a lower bound
/// (Elasticsearch's `track_total_hits` default).
pub const CAP: u64 = 10_000;

/// How a list's `total` relates to the number of matching records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// `total` is the number of matches.
    Eq,
    /// `total` is a lower bound: at least that many match.
    Gte,
}

impl Relation {
    /// The API's `total_relation` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Relation::Eq => "eq",
            Relation::Gte => "gte",
        }
    }
}

/// A list's `total` and how it relates to the number of matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Total {
    /// The count (exact, or a lower bound).
    pub count: i64,
    /// Which of the two.
    pub relation: Relation,
}

impl Total {
    /// An exact count.
    pub fn exact(count: i64) -> Total {
        Total {
            count,
            relation: Relation::Eq,
        }
    }

    /// From the sum `n` of a capped count's parts, each counted up to `cap + 1` rows: over `cap`
    /// is at least `cap` matches (a lower bound); otherwise no part reached its limit, so `n` is
    /// exact.
    pub fn from_capped(n: i64, cap: u64) -> Total {
        let cap = i64::try_from(cap).unwrap_or(i64::MAX);
        if n > cap {
            Total {
                count: cap,
                relation: Relation::Gte,
            }
        } else {
            Total::exact(n)
        }
    }
}

/// Whether a list of `f` counts with a cap: it has an `error` or a `body` term (the text
/// filters whose exact count reads every match).
pub fn applies(f: &Filter) -> bool {
    f.terms.contains_key("error") || f.terms.contains_key("body")
}

/// How many times the text filters' cap a header term's count reads (lead, stop 42): a header
/// match is one entry of the header index's range (~0.25 µs on PostgreSQL), a text match a row
/// checked for its needle (several µs), so the same ~25 ms budget reads ten times as many.
pub const HEADER_FACTOR: u64 = 10;

/// The cap a list of `f` counts with when the API asks for `cap` (`None`: exact): `cap` with an
/// `error` or `body` term ([`applies`]); `cap` × [`HEADER_FACTOR`] (100,000 by the API's
/// [`CAP`]) with a `header.` term and no text term, whose exact count reads every entry of the
/// header's index range (a header every record carries: 1,000,000 entries, ~250 ms); none else.
pub fn cap_for(f: &Filter, cap: Option<u64>) -> Option<u64> {
    let cap = cap?;
    if applies(f) {
        Some(cap)
    } else if f.terms.keys().any(|k| k.starts_with("header.")) {
        Some(cap.saturating_mul(HEADER_FACTOR))
    } else {
        None
    }
}

/// `SELECT COUNT(*)` of at most `cap + 1` rows of `rows` (a `SELECT`), as a scalar subquery's
/// text (parenthesised).
pub fn limited(rows: &str, cap: u64) -> String {
    format!(
        "(SELECT COUNT(*) FROM ({rows} LIMIT {}) AS capped)",
        cap.saturating_add(1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_the_cap_is_a_lower_bound_at_or_under_it_exact() {
        assert_eq!(Total::from_capped(0, 10), Total::exact(0));
        assert_eq!(Total::from_capped(10, 10), Total::exact(10));
        let t = Total::from_capped(11, 10);
        assert_eq!((t.count, t.relation.as_str()), (10, "gte"));
        // Two parts each at their limit (cap + 1).
        assert_eq!(Total::from_capped(22, 10).count, 10);
        assert_eq!(Total::exact(5).relation.as_str(), "eq");
    }

    #[test]
    fn header_terms_count_ten_times_the_cap_text_terms_the_cap() {
        let f = |pairs: &[(&str, &str)]| Filter::from_pairs(pairs.iter().copied()).expect("f");
        assert_eq!(cap_for(&f(&[("error", "e")]), Some(10)), Some(10));
        assert_eq!(
            cap_for(&f(&[("error", "e"), ("header.a", "b")]), Some(10)),
            Some(10)
        );
        assert_eq!(
            cap_for(&f(&[("header.a", "b"), ("status", "S")]), Some(10)),
            Some(100)
        );
        assert_eq!(cap_for(&f(&[("status", "S")]), Some(10)), None);
        assert_eq!(cap_for(&f(&[("header.a", "b")]), None), None);
    }

    #[test]
    fn the_limit_is_one_past_the_cap() {
        assert_eq!(
            limited("SELECT 1 FROM t", 10),
            "(SELECT COUNT(*) FROM (SELECT 1 FROM t LIMIT 11) AS capped)"
        );
    }
}
