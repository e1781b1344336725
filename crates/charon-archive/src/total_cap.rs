//! Issue 9's capped `total` (branch `t9o`, docs/archive.md "API" and "Twenty-sixth round"): how
//! a list whose filter has an `error` or `body` term counts its matches.
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
    fn the_limit_is_one_past_the_cap() {
        assert_eq!(
            limited("SELECT 1 FROM t", 10),
            "(SELECT COUNT(*) FROM (SELECT 1 FROM t LIMIT 11) AS capped)"
        );
    }
}
