//! The `/groups` answer's order and its groups' sample `error_message` (docs/archive.md "API",
//! "Groups: order and sample"; branches `q9o`, `q9p`).
//!
//! - **Order**, every plan: by `count`, largest first, then by the `by` columns' values (NULL
//!   first) — a sort of the groups in memory, after the plan counted them.
//! - **Sample**: one record's message from the group; which record depends on the plan
//!   ([`Sample`]). The plans that read messages while counting (the error-text copy, the
//!   summaries) keep theirs; the others look one up for the first [`SAMPLED`] groups only. The
//!   header `/groups` plan (migration 24, [`crate::header_groups`]) takes each group's greatest
//!   id index-only with its counts, and the messages of those ids are read in one statement by
//!   primary key ([`messages_of`]).
//!
//! (Branch `q9o` had one rule for every plan, the group's newest record, read through each
//! group's newest millisecond: an archiver batch shares one `created_at`, so a sample could read
//! 8,192 records and the default `/groups` went from about 1 ms to 5–8 ms; `q9p` went back.)

use std::collections::HashMap;

use crate::error::ArchiveError;
use crate::sql::{Conn, Param};

/// How many groups (the first, in the answer's order) carry a looked-up sample.
pub const SAMPLED: usize = 100;

/// A group's sample as its plan knows it after counting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sample {
    /// Read with the counts (error-text copy, summary table, summary per second): the message,
    /// `None` when no record read for the group has one.
    Given(Option<String>),
    /// To be looked up by the plan (a range or plain lookup), for the first [`SAMPLED`] groups.
    Lookup,
    /// The message of the record with this id (the group's greatest id; header plan), read for
    /// the first [`SAMPLED`] groups.
    Of(i64),
}

/// One group: the `by` columns' values, count, oldest, newest and its [`Sample`].
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
    /// Its sample, as far as known.
    pub sample: Sample,
}

/// `groups` in the answer's order (count, largest first, then the values, NULL first).
pub fn order(groups: &mut [Group]) {
    groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.values.cmp(&b.values)));
}

/// The `error_message` of each record of `ids`, in one statement by primary key: id → message
/// (`None`: the record has none). Ids of no record are absent.
pub fn messages_of(
    c: &mut dyn Conn,
    ids: &[i64],
) -> Result<HashMap<i64, Option<String>>, ArchiveError> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let marks = vec!["?"; ids.len()].join(", ");
    let params: Vec<Param> = ids.iter().copied().map(Param::from).collect();
    Ok(c.query(
        &format!("SELECT id, error_message FROM dead_letters WHERE id IN ({marks})"),
        &params,
    )?
    .iter()
    .map(|r| (r[0].int(), r[1].opt_text()))
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
            sample: Sample::Lookup,
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
