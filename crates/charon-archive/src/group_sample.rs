//! The `/groups` answer's order and each group's sample `error_message`, one rule for every plan
//! (branch `q9o`, docs/archive.md "API" and "Twenty-sixth round"): so that an answer never
//! depends on which plan computed it.
//!
//! - **Order**: by `count`, largest first, then by the `by` columns' values (NULL first).
//! - **Sample**: the `error_message` of the group's newest record — the greatest `created_at`
//!   (the group's `newest`), among those the greatest id — NULL when that record has none; for the
//!   first [`SAMPLED`] groups in that order, NULL for the rest.
//!
//! Every plan knows each group's `newest` exactly, so the sample is one lookup a group, all in
//! one statement ([`samples_sql`]): the records of that millisecond (`dead_letters_created`),
//! checked against the filter's per-record condition ([`Filter::to_sql_per_row`], no index
//! lookup of every match) and the group's values. Before
//! this, the plans took the smallest message of the matches (`key_copy`, the summaries), the
//! first message in an index range (`range_count`) or any (the plain plan): answers differed by plan.

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

/// The statement and parameters of the samples of `groups` among the records matching `f`, by
/// `cols`: one row per group, `(index in groups, sample)`. One statement for all (planned once:
/// PostgreSQL took 3.5 ms to plan each group's own lookup over `dead_letters`' indexes). Each
/// group's records of its newest millisecond are read through `dead_letters_created` only
/// (SQLite: `INDEXED BY`; PostgreSQL: a subquery with `OFFSET 0`, which the planner keeps
/// apart), so that no index of the group's or the filter's columns is walked instead (one
/// walked every `reason = 'rejected'` record: 300 ms); the group's values are compared with
/// `IS NOT DISTINCT FROM` (NULL too).
pub fn samples_sql(
    d: Dialect,
    f: &Filter,
    cols: &[String],
    groups: &[Group],
) -> Result<(String, Vec<Param>), ArchiveError> {
    let (cond, cond_params) = f.to_sql_per_row(d)?;
    let names: String = (0..cols.len()).map(|i| format!(", g_v{i}")).collect();
    let mut params = Vec::new();
    let rows = groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            params.push(Param::from(i as i64));
            params.push(Param::from(g.newest));
            for v in &g.values {
                params.push(Param::Text(v.clone()));
            }
            let texts: String = g.values.iter().map(|_| ", CAST(? AS TEXT)").collect();
            format!("(CAST(? AS BIGINT), CAST(? AS BIGINT){texts})")
        })
        .collect::<Vec<_>>()
        .join(", ");
    params.extend(cond_params);
    let same: String = cols
        .iter()
        .enumerate()
        .map(|(i, c)| format!(" AND d.{c} IS NOT DISTINCT FROM g.g_v{i}"))
        .collect();
    let from = match d {
        Dialect::Sqlite => {
            "dead_letters AS d INDEXED BY dead_letters_created WHERE d.created_at = g.g_newest"
        }
        Dialect::Postgres => {
            "(SELECT * FROM dead_letters WHERE created_at = g.g_newest OFFSET 0) AS d WHERE true"
        }
    };
    Ok((
        format!(
            "WITH g (g_i, g_newest{names}) AS (VALUES {rows}) \
             SELECT g.g_i, (SELECT d.error_message FROM {from} AND {cond}{same} \
             ORDER BY d.id DESC LIMIT 1) FROM g"
        ),
        params,
    ))
}

/// `groups` ordered, each with its sample: `(group, sample)`.
pub fn finish(
    c: &mut dyn Conn,
    f: &Filter,
    cols: &[String],
    mut groups: Vec<Group>,
) -> Result<Vec<(Group, Option<String>)>, ArchiveError> {
    order(&mut groups);
    let n = groups.len().min(SAMPLED);
    let mut samples = vec![None; groups.len()];
    if n > 0 {
        let (sql, p) = samples_sql(c.dialect(), f, cols, &groups[..n])?;
        for r in c.query(&sql, &p)? {
            if let Some(s) = usize::try_from(r[0].int())
                .ok()
                .and_then(|i| samples.get_mut(i))
            {
                *s = r[1].opt_text();
            }
        }
    }
    Ok(groups.into_iter().zip(samples).collect())
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
