//! `/groups` computed from plain SQL over the records (the header tests' reference): groups,
//! counts, oldest, newest in the API's order, and what each plan's sample may be.

use std::collections::{BTreeMap, BTreeSet};

use charon_archive::filter::Filter;
use charon_archive::sql::Conn;
use charon_archive::time::format_ms;
use serde_json::{Value, json};

/// A group of the reference: count, oldest, newest, (greatest id, its message), the messages
/// of its records.
type Acc = (i64, i64, i64, (i64, Option<String>), BTreeSet<String>);

/// `/groups` of `f` by `by` from plain SQL over the records, ordered by count then values:
/// each group as `ops::groups` gives it with the greatest-id record's message as its sample,
/// and the messages of the group's records.
pub(crate) fn reference(c: &mut dyn Conn, by: &str, f: &Filter) -> Vec<(Value, BTreeSet<String>)> {
    let cols: Vec<&str> = by.split(',').collect();
    let (cond, p) = f.to_sql(c.dialect()).expect("cond");
    let rows = c
        .query(
            &format!(
                "SELECT {}, created_at, id, error_message FROM dead_letters WHERE {cond}",
                cols.join(", ")
            ),
            &p,
        )
        .expect("plain rows");
    let n = cols.len();
    let mut g: BTreeMap<Vec<Option<String>>, Acc> = BTreeMap::new();
    for r in &rows {
        let values = (0..n).map(|i| r[i].opt_text()).collect();
        let (t, id, msg) = (r[n].int(), r[n + 1].int(), r[n + 2].opt_text());
        let e = g
            .entry(values)
            .or_insert((0, t, t, (id, msg.clone()), BTreeSet::new()));
        e.0 += 1;
        e.1 = e.1.min(t);
        e.2 = e.2.max(t);
        if id > e.3.0 {
            e.3 = (id, msg.clone());
        }
        e.4.extend(msg);
    }
    let mut v: Vec<_> = g.into_iter().collect();
    v.sort_by(|a, b| b.1.0.cmp(&a.1.0).then_with(|| a.0.cmp(&b.0)));
    v.into_iter()
        .map(|(values, (count, oldest, newest, (_, msg), all))| {
            let mut m = serde_json::Map::new();
            for (col, val) in cols.iter().zip(values) {
                m.insert(col.to_string(), val.map_or(Value::Null, Value::from));
            }
            m.insert("count".into(), json!(count));
            m.insert("oldest".into(), json!(format_ms(oldest)));
            m.insert("newest".into(), json!(format_ms(newest)));
            m.insert("error_message".into(), msg.map_or(Value::Null, Value::from));
            (Value::Object(m), all)
        })
        .collect()
}

/// What a plan's samples must be.
#[allow(dead_code)] // each test names the plans it checks
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Samples {
    /// The group's greatest-id record's message (the header plan).
    GreatestId,
    /// One message of the group's records, NULL only when none of them has one.
    OfTheGroup,
    /// The summary's (`dead_letter_groups.error_message`, kept since migration 3): the first
    /// message that entered the group, kept after its record left the group (a status or key
    /// column changed, a delete) — so only: not NULL when the group has a message.
    Summary,
}

/// `have` (`ops::groups`) against the reference `want`: the same groups, counts, oldest, newest
/// in the same order; each sample as `samples` says.
pub(crate) fn same_groups(
    have: &[Value],
    want: &[(Value, BTreeSet<String>)],
    samples: Samples,
    what: &str,
) {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("error_message");
        }
        v
    };
    // Every exact plan's group says so (`count_relation`, branch `g9b`).
    let h: Vec<Value> = have
        .iter()
        .map(|g| {
            assert_eq!(g["count_relation"], "eq", "count_relation of {g} {what}");
            let mut g = strip(g);
            if let Some(m) = g.as_object_mut() {
                m.remove("count_relation");
            }
            g
        })
        .collect();
    let w: Vec<Value> = want.iter().map(|(v, _)| strip(v)).collect();
    assert_eq!(h, w, "groups {what}");
    for (g, (r, all)) in have.iter().zip(want) {
        let sample = g["error_message"].as_str();
        match (samples, sample) {
            (Samples::GreatestId, _) => {
                assert_eq!(sample, r["error_message"].as_str(), "sample of {g} {what}")
            }
            (Samples::OfTheGroup, Some(s)) => {
                assert!(all.contains(s), "sample of {g} not its group's {what}")
            }
            (Samples::Summary, Some(_)) => {}
            (_, None) => assert!(all.is_empty(), "no sample for {g} {what}"),
        }
    }
}
