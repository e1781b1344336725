//! The `/groups` answer's order and each group's sample `error_message`, one rule for every plan
//! (branch `q9o`, docs/archive.md "API" and "Twenty-sixth round"): so that an answer never
//! depends on which plan computed it.
//!
//! - **Order**: by `count`, largest first, then by the `by` columns' values (NULL first).
//! - **Sample**: the `error_message` of the group's newest record — the greatest `created_at`
//!   (the group's `newest`), among those the greatest id — NULL when that record has none; for the
//!   first [`SAMPLED`] groups in that order, NULL for the rest.
//!
//! Every plan knows each group's `newest` exactly, so the samples are one statement
//! ([`candidates_sql`]): the records of the groups' newest milliseconds (`dead_letters_created`),
//! checked against the filter's per-record condition ([`Filter::to_sql_per_row`], no index
//! lookup of every match), each group's taken by its values here. Before
//! this, the plans took the smallest message of the matches (`key_copy`, the summaries), the
//! first message in an index range (`range_count`) or any (the plain plan): answers differed by plan.

use std::collections::HashMap;

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::{Conn, Dialect, Param};

/// How many groups (the first, in the answer's order) carry a sample.
pub const SAMPLED: usize = 100;

/// One group before its sample: the `by` columns' values, count, oldest, newest.
#[derive(Debug, Clone)]
pub struct Group {
    /// The `by` columns' values (`None`: NULL).
    pub values: Vec<Option<String>>,
    /// Matching records in the group.
    pub count: i64,
    /// The oldest `created_at`, ms.
    pub oldest: i64,
    /// The newest `created_at`, ms.
    pub newest: i64,
}

/// `groups` in the answer's order (count, largest first, then the values).
pub fn order(groups: &mut [Group]) {
    groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.values.cmp(&b.values)));
}

/// The statement and parameters that read the candidates of `groups`' samples among the
/// records matching `f`, by `cols`: every matching record of the groups' newest milliseconds,
/// as rows `id, created_at, error_message, cols…` (no order). One statement for all groups
/// (PostgreSQL took 3.5 ms to plan each group's own lookup), each millisecond read once (in an
/// archive many groups' newest record comes from the same archiver batch, one `created_at` for
/// up to thousands of records: read once a group, the 40 default groups of the 1M bench fill
/// read 38,360 rows, 20–28 ms). The records are read through `dead_letters_created` only
/// (SQLite: `INDEXED BY`; PostgreSQL: a subquery with `OFFSET 0`, which the planner keeps
/// apart), so that no index of the filter's columns is walked instead (one walked every
/// `reason = 'rejected'` record: 300 ms).
pub fn candidates_sql(
    d: Dialect,
    f: &Filter,
    cols: &[String],
    groups: &[Group],
) -> Result<(String, Vec<Param>), ArchiveError> {
    let (cond, cond_params) = f.to_sql_per_row(d)?;
    let mut times: Vec<i64> = groups.iter().map(|g| g.newest).collect();
    times.sort_unstable();
    times.dedup();
    let marks = vec!["?"; times.len()].join(", ");
    let mut params: Vec<Param> = times.into_iter().map(Param::from).collect();
    params.extend(cond_params);
    let list: String = cols.iter().map(|c| format!(", d.{c}")).collect();
    let from = match d {
        Dialect::Sqlite => {
            format!(
                "dead_letters AS d INDEXED BY dead_letters_created WHERE d.created_at IN ({marks})"
            )
        }
        Dialect::Postgres => format!(
            "(SELECT * FROM dead_letters WHERE created_at IN ({marks}) OFFSET 0) AS d WHERE true"
        ),
    };
    Ok((
        format!("SELECT d.id, d.created_at, d.error_message{list} FROM {from} AND {cond}"),
        params,
    ))
}

/// A candidate's `(created_at, by values)`; mapped to the greatest id and its message.
type Key = (i64, Vec<Option<String>>);

/// `groups` ordered, each with its sample: `(group, sample)`.
pub fn finish(
    c: &mut dyn Conn,
    f: &Filter,
    cols: &[String],
    mut groups: Vec<Group>,
) -> Result<Vec<(Group, Option<String>)>, ArchiveError> {
    order(&mut groups);
    let n = groups.len().min(SAMPLED);
    let mut newest: HashMap<Key, (i64, Option<String>)> = HashMap::new();
    if n > 0 {
        let (sql, p) = candidates_sql(c.dialect(), f, cols, &groups[..n])?;
        for r in c.query(&sql, &p)? {
            let values = (0..cols.len()).map(|i| r[3 + i].opt_text()).collect();
            let (id, msg) = (r[0].int(), r[2].opt_text());
            let e = newest
                .entry((r[1].int(), values))
                .or_insert((id, msg.clone()));
            if id > e.0 {
                *e = (id, msg);
            }
        }
    }
    Ok(groups
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            let s = if i < n {
                newest
                    .remove(&(g.newest, g.values.clone()))
                    .and_then(|(_, m)| m)
            } else {
                None
            };
            (g, s)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(count: i64, v: &[Option<&str>]) -> Group {
        Group {
            values: v.iter().map(|s| s.map(str::to_string)).collect(),
            count,
            oldest: 0,
            newest: 0,
        }
    }

    #[test]
    fn ordered_by_count_then_values_null_first() {
        let mut gs = vec![
            g(2, &[Some("b")]),
            g(5, &[Some("z")]),
            g(2, &[None]),
            g(2, &[Some("a")]),
        ];
        order(&mut gs);
        let v: Vec<_> = gs.iter().map(|g| (g.count, g.values[0].clone())).collect();
        assert_eq!(
            v,
            vec![
                (5, Some("z".into())),
                (2, None),
                (2, Some("a".into())),
                (2, Some("b".into()))
            ]
        );
    }
}
