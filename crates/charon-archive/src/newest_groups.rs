//! Issue 9's `/groups` of an `error` or `body` filter over its newest matches (branch `g9b`,
//! docs/archive.md "API", "`count_relation`", and "Twenty-seventh round").
//!
//! Such a filter's exact groups read every match (`error=cause 5` over 1M records: 100,200 rows
//! of the error-text copy, 81–139 ms). The lead's rule, the lists' capped `total` applied to
//! groups (Elasticsearch's sampler aggregation): the request takes the **newest `cap + 1`
//! matches** by id. At most `cap` of them are all the matches: grouped exactly, every group
//! [`Relation::Eq`]. More: the newest `cap` only are grouped, every group [`Relation::Gte`] —
//! its `count` its matches among them (a true lower bound), `oldest`/`newest` the oldest and
//! newest among them; a group with no match among them is not listed. `?exact_total=true` takes
//! the exact plans (`ops::count_groups`).
//!
//! The matches come newest first, each with its `by` columns and time, from:
//! - a **bounded walk** over the newest rows (`crate::text_walk`) when its probe finds the needle
//!   common: on the copy of the error texts (`crate::key_copy`) for a filter and `by` the copy
//!   holds, merged with the matching records above the search watermark (`key_copy::Split::
//!   newest_rows`; the newest `cap + 1` of both sides are the newest of all), else on
//!   `dead_letters` itself (`body`, or a `by` column the copy lacks);
//! - else the copy's (and the records above the watermark's) newest matches through the search
//!   index, or the records' (`ORDER BY id DESC LIMIT cap + 1`).
//!
//! A walk that finds fewer than `cap + 1` rows within its budget proves nothing about older rows,
//! so the second path answers: a wrong probe costs time, never a wrong group.
//!
//! The newest matches are grouped in the database (`ROW_NUMBER()` over the rows, newest first;
//! only the groups cross to the broker). A group's sample `error_message` is that of its match
//! with the greatest id, read by primary key for the first `group_sample::SAMPLED` groups as the
//! header plan's (`null` when that record has none; docs/archive.md "Groups: order and sample").

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::group_sample::{Group, Sample};
use crate::sql::{Conn, Param};
use crate::total_cap::Relation;

/// The groups of the newest matches and how their counts relate to all matches.
#[derive(Debug)]
pub struct Newest {
    /// The groups, unordered (`group_sample::order` orders them).
    pub groups: Vec<Group>,
    /// [`Relation::Eq`]: every match grouped; [`Relation::Gte`]: the newest `cap` only.
    pub relation: Relation,
}

/// The groups by `cols` of `f`'s newest `cap + 1` matches (see the module docs).
pub fn groups(
    c: &mut dyn Conn,
    f: &Filter,
    cols: &[String],
    cap: u64,
) -> Result<Newest, ArchiveError> {
    let reach = cap.saturating_add(1);
    let d = c.dialect();
    let list = cols.join(", ");
    let select = format!("id, {list}, created_at");
    let on_copy = crate::key_copy::answers(f) && crate::key_copy::holds(cols);
    let split = if on_copy {
        Some(crate::ops::copy_split(c, f)?)
    } else {
        None
    };
    let mut walk = crate::ops::walk_source(c, f)?;
    if let Some(w) = walk.as_mut().filter(|w| w.on_copy() && split.is_none()) {
        // The copy lacks a `by` column: the records themselves walked.
        let (cond, p) = f.to_sql_checks_only(d)?;
        *w = crate::text_walk::Source::records(d, cond, p);
    }
    if let Some(mut w) = walk
        && w.promising(c, reach)?
    {
        let rows = match (&split, w.on_copy()) {
            (Some(s), true) => s.newest_rows(cols, reach, Some(w.rows_sql(&select, reach))),
            _ => w.rows_sql(&select, reach),
        };
        let (groups, found) = grouped(c, cols, rows, cap)?;
        // Fewer than `reach` within the walk's budget prove nothing about older rows.
        if found >= reach {
            return Ok(Newest {
                groups,
                relation: Relation::Gte,
            });
        }
    }
    let rows = match &split {
        Some(s) => s.newest_rows(cols, reach, None),
        None => {
            // `id + 0`: the matches from the search index's candidates, then sorted (not the
            // primary key walked backwards testing each record against them).
            let (cond, p) = f.to_sql_reading_records(c)?;
            (
                format!(
                    "SELECT {select} FROM dead_letters WHERE {cond} ORDER BY id + 0 DESC LIMIT {reach}"
                ),
                p,
            )
        }
    };
    let (groups, found) = grouped(c, cols, rows, cap)?;
    Ok(Newest {
        groups,
        relation: relation(found, cap),
    })
}

/// Over `cap` rows found: the newest `cap` grouped, a lower bound; else all, exact.
fn relation(found: u64, cap: u64) -> Relation {
    if found > cap {
        Relation::Gte
    } else {
        Relation::Eq
    }
}

/// The groups of the newest `cap` of `rows` (a statement selecting `id`, the `cols` and
/// `created_at` of matches, with its parameters; several sides' rows may come in any order, ids
/// distinct: one statement, one snapshot) and how many rows it found: per group its count, oldest
/// and newest time and its greatest id (its sample's record), grouped in the database (only the
/// groups cross to the broker).
fn grouped(
    c: &mut dyn Conn,
    cols: &[String],
    (rows, p): (String, Vec<Param>),
    cap: u64,
) -> Result<(Vec<Group>, u64), ArchiveError> {
    let list = cols.join(", ");
    let sql = format!(
        "SELECT {list}, COUNT(*), MIN(created_at), MAX(created_at), MAX(id), MAX(found) FROM (\
         SELECT id, {list}, created_at, ROW_NUMBER() OVER (ORDER BY id DESC) AS nth, \
         COUNT(*) OVER () AS found FROM ({rows}) AS m) AS w WHERE nth <= {cap} GROUP BY {list}"
    );
    let n = cols.len();
    let mut found = 0;
    let groups = c
        .query(&sql, &p)?
        .iter()
        .map(|r| {
            found = u64::try_from(r[n + 4].int()).unwrap_or(0);
            Group {
                values: (0..n).map(|i| r[i].opt_text()).collect(),
                count: r[n].int(),
                oldest: r[n + 1].int(),
                newest: r[n + 2].int(),
                sample: Sample::Of(r[n + 3].int()),
            }
        })
        .collect();
    Ok((groups, found))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_the_cap_is_a_lower_bound() {
        assert_eq!(relation(11, 10), Relation::Gte);
        assert_eq!(relation(10, 10), Relation::Eq);
        assert_eq!(relation(0, 10), Relation::Eq);
    }
}
