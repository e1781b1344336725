//! The `/groups` answer's order and each group's sample `error_message`, one rule for every plan
//! (branch `q9o`, docs/archive.md "API" and "Twenty-sixth round"): so that an answer never
//! depends on which plan computed it.
//!
//! - **Order**: by `count`, largest first, then by the `by` columns' values (NULL first).
//! - **Sample**: the `error_message` of the group's newest record — the greatest `created_at`
//!   (the group's `newest`), among those the greatest id — NULL when that record has none; for the
//!   first [`SAMPLED`] groups in that order, NULL for the rest.
//!
//! Every plan knows each group's `newest` exactly, so the sample is one lookup a group: the
//! records of that millisecond (`dead_letters_created`, materialized first so that no planner
//! walks another index instead), checked against the filter's per-record condition
//! ([`Filter::to_sql_per_row`], no index lookup of every match) and the group's values. Before
//! this, the plans took the smallest message of the matches (`key_copy`, the summaries), the
//! first message in an index range (`range_count`) or any (the plain plan): answers differed by plan.

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::sql::{Conn, Param};

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

/// The statement and parameters of group `g`'s sample among the records matching `f`, by `cols`.
pub fn sample_sql(
    c: &dyn Conn,
    f: &Filter,
    cols: &[String],
    g: &Group,
) -> Result<(String, Vec<Param>), ArchiveError> {
    let (cond, p) = f.to_sql_per_row(c.dialect())?;
    let mut params = vec![Param::from(g.newest)];
    params.extend(p);
    let mut conds = vec![cond];
    for (col, v) in cols.iter().zip(&g.values) {
        match v {
            Some(v) => {
                conds.push(format!("{col} = ?"));
                params.push(Param::from(v.as_str()));
            }
            None => conds.push(format!("{col} IS NULL")),
        }
    }
    Ok((
        format!(
            "WITH t AS MATERIALIZED (SELECT id FROM dead_letters WHERE created_at = ?) \
             SELECT error_message FROM dead_letters WHERE id IN (SELECT id FROM t) AND {} \
             ORDER BY id DESC LIMIT 1",
            conds.join(" AND ")
        ),
        params,
    ))
}

/// Group `g`'s sample (see the module docs).
pub fn sample(
    c: &mut dyn Conn,
    f: &Filter,
    cols: &[String],
    g: &Group,
) -> Result<Option<String>, ArchiveError> {
    let (sql, p) = sample_sql(c, f, cols, g)?;
    Ok(c.query(&sql, &p)?.first().and_then(|r| r[0].opt_text()))
}

/// `groups` ordered, each with its sample: `(group, sample)`.
pub fn finish(
    c: &mut dyn Conn,
    f: &Filter,
    cols: &[String],
    mut groups: Vec<Group>,
) -> Result<Vec<(Group, Option<String>)>, ArchiveError> {
    order(&mut groups);
    let mut out = Vec::with_capacity(groups.len());
    for (i, g) in groups.into_iter().enumerate() {
        let s = if i < SAMPLED {
            sample(c, f, cols, &g)?
        } else {
            None
        };
        out.push((g, s));
    }
    Ok(out)
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
