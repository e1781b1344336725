//! Issue 9's `/groups` of an `error` or `body` filter over its newest `cap + 1` matches (branch
//! `g9b`, `crate::newest_groups`, docs/archive.md "API"): against plain SQL on both backends. At
//! or under the cap every match is grouped (`count_relation` `eq`); over it the groups are plain
//! SQL's groups of the newest `cap` matches (by id), each `gte`, with the oldest and newest time
//! among them and the message of the group's greatest id; without a cap (`exact_total=true`) the
//! groups are plain SQL's groups of every match, `eq`. Checked through the copy scenario (right
//! after the records are written, once indexed, after a burst above the watermark, after skips,
//! deletes and a user's SQL, indexed again) at caps 7, one under the count, the count and 10,000,
//! by the copy's columns and by one it lacks; and once at the API's cap over 10,050 records.

#[allow(dead_code)]
#[path = "support/copy_scenario.rs"]
mod copy_scenario;
#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[allow(dead_code)]
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use std::collections::HashMap;
use std::ops::Range;

use bytes::Bytes;
use charon_archive::filter::{Filter, group_by};
use charon_archive::ops;
use charon_archive::sql::Conn;
use charon_archive::time::format_ms;
use charon_archive::{Archive, NewRecord};
use serde_json::{Value, json};

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("ng:{i}"),
        original_queue: Some(format!("q{}", i % 4)),
        content_type: Some(format!("t{}", i % 3)),
        headers: json!({"x-h": format!("v{}", i % 2)}).to_string(),
        payload: Bytes::from(format!("body-{} of {i}", i % 5)),
        // Some records without a message: a group's newest match may have none.
        error_message: (!i.is_multiple_of(11))
            .then(|| format!("order {i} failed: cause {}", i % 3)),
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

const FILTERS: &[&[(&str, &str)]] = &[
    &[("error", "cause 1")],
    &[("error", "order 12")],
    &[("error", "no such text")],
    &[("error", "cause 2"), ("status", "PENDING")],
    &[("error", "cause 0"), ("original_queue", "q1")],
    &[("error", "cause 1"), ("header.x-h", "v0")],
    &[("body", "body")],
    &[("body", "body-3"), ("status", "SKIPPED")],
    &[("error", "cause"), ("body", "body-1")],
    // A header term without a text term (lead, stop 42): exact up to ten times the cap, else
    // the newest `cap` matches from the header's index rows.
    &[("header.x-h", "v0")],
    &[("header.x-h", "v1"), ("status", "PENDING")],
    // No text or header term: never capped.
    &[("status", "PENDING")],
];

/// `by` values: the default, copy columns, and one the copy lacks (`content_type`).
const BYS: &[Option<&str>] = &[
    None,
    Some("status"),
    Some("original_queue,status"),
    Some("content_type,status"),
];

/// Plain SQL's matches of `f`, newest first: id, the `cols`' values, time, message.
type Row = (i64, Vec<Value>, i64, Value);

fn plain_rows(c: &mut dyn Conn, f: &Filter, cols: &[String]) -> Vec<Row> {
    let (cond, p) = f.to_sql(c.dialect()).expect("cond");
    let n = cols.len();
    c.query(
        &format!(
            "SELECT id, {}, created_at, error_message FROM dead_letters WHERE {cond} ORDER BY id DESC",
            cols.join(", ")
        ),
        &p,
    )
    .expect("plain")
    .iter()
    .map(|r| {
        (
            r[0].int(),
            (1..=n)
                .map(|i| r[i].opt_text().map_or(Value::Null, Value::from))
                .collect(),
            r[n + 1].int(),
            r[n + 2].opt_text().map_or(Value::Null, Value::from),
        )
    })
    .collect()
}

/// The `/groups` objects of `rows` (newest first) as the API orders them: largest count first,
/// then the values (NULL first); each group's sample is its greatest id's message.
fn plain_groups(cols: &[String], rows: &[Row], relation: &str) -> Vec<Value> {
    let mut at: HashMap<Vec<Value>, usize> = HashMap::new();
    let mut gs: Vec<(Vec<Value>, i64, i64, i64, Value)> = Vec::new();
    for (_, v, t, m) in rows {
        match at.get(v) {
            Some(&i) => {
                let g = &mut gs[i];
                g.1 += 1;
                g.2 = g.2.min(*t);
                g.3 = g.3.max(*t);
            }
            None => {
                at.insert(v.clone(), gs.len());
                gs.push((v.clone(), 1, *t, *t, m.clone()));
            }
        }
    }
    let key = |v: &[Value]| -> Vec<Option<String>> {
        v.iter().map(|x| x.as_str().map(str::to_string)).collect()
    };
    gs.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| key(&a.0).cmp(&key(&b.0))));
    gs.into_iter()
        .map(|(v, n, old, new, m)| {
            let mut o = serde_json::Map::new();
            for (c, x) in cols.iter().zip(v) {
                o.insert(c.clone(), x);
            }
            o.insert("count".into(), json!(n));
            o.insert("oldest".into(), json!(format_ms(old)));
            o.insert("newest".into(), json!(format_ms(new)));
            o.insert("error_message".into(), m);
            o.insert("count_relation".into(), json!(relation));
            Value::Object(o)
        })
        .collect()
}

/// Without the sample (plan-dependent for the exact plans).
fn unsampled(gs: &[Value]) -> Vec<Value> {
    gs.iter()
        .map(|g| {
            let mut g = g.clone();
            if let Some(o) = g.as_object_mut() {
                o.remove("error_message");
            }
            g
        })
        .collect()
}

/// `f`'s groups by `by` with `cap` (and without) equal plain SQL's as the rule says.
fn assert_groups(
    c: &mut dyn Conn,
    pairs: &[(&str, &str)],
    by: Option<&str>,
    caps: &[u64],
    when: &str,
) {
    let f = Filter::from_pairs(pairs.iter().copied()).expect("filter");
    let cols = group_by(by).expect("by");
    let rows = plain_rows(c, &f, &cols);
    let n = rows.len() as u64;
    let capped = pairs.iter().any(|(k, _)| *k == "error" || *k == "body");
    let header = !capped && pairs.iter().any(|(k, _)| k.starts_with("header."));
    let what = format!("{pairs:?} by {by:?} ({when}, {n} matches)");
    // Without a cap: every match, exactly.
    let have = ops::groups_capped(c, by, &f, None).expect("groups");
    assert_eq!(
        unsampled(&have),
        unsampled(&plain_groups(&cols, &rows, "eq")),
        "exact groups {what}"
    );
    let mut caps = caps.to_vec();
    caps.extend([n, n.saturating_sub(1)]);
    // A header filter's edge: ten times these is at and just under its count.
    caps.extend([n / 10, (n / 10).saturating_sub(1)]);
    for cap in caps {
        let have = ops::groups_capped(c, by, &f, Some(cap)).expect("groups");
        if header {
            let want = if n > cap * charon_archive::total_cap::HEADER_FACTOR {
                plain_groups(&cols, &rows[..cap.min(n) as usize], "gte")
            } else {
                plain_groups(&cols, &rows, "eq")
            };
            assert_eq!(have, want, "header groups at cap {cap} {what}");
            continue;
        }
        if !capped {
            assert_eq!(
                unsampled(&have),
                unsampled(&plain_groups(&cols, &rows, "eq")),
                "uncapped filter at cap {cap} {what}"
            );
            continue;
        }
        let want = if n > cap {
            plain_groups(&cols, &rows[..cap as usize], "gte")
        } else {
            plain_groups(&cols, &rows, "eq")
        };
        assert_eq!(have, want, "groups at cap {cap} {what}");
    }
}

fn check(c: &mut dyn Conn, when: &str) {
    for pairs in FILTERS {
        for by in BYS {
            assert_groups(c, pairs, *by, &[7, 10_000], when);
        }
    }
}

fn change(c: &mut dyn Conn) {
    copy_scenario::changes(
        c,
        4,
        "ng",
        "error_message = 'rewritten: cause 1', original_queue = 'q9'",
    );
}

/// A fresh archive of this build with 400 records, none indexed yet.
fn fresh(url: &str, old: Box<dyn Conn>) -> Archive {
    drop(old);
    let a = Archive::open(url).expect("open");
    a.with(|c| insert(c, 0..400));
    a
}

const STEPS: copy_scenario::Steps<'static> = copy_scenario::Steps {
    check: &check,
    burst: &|c| insert(c, 400..700),
    change: &change,
};

#[test]
fn sqlite_text_filter_groups_of_the_newest_matches() {
    copy_scenario::on_sqlite(fresh, &STEPS);
}

#[test]
fn postgres_text_filter_groups_of_the_newest_matches() {
    copy_scenario::on_postgres(fresh, &STEPS);
}

/// The API's cap over 10,050 records (at least 2,000 indexed, the others above the watermark): `error=failed`
/// (every record) and `body=body` are the newest 10,000's groups, `gte`; `cause 1` (3,350) and a
/// needle of 10,000 matches exactly are every match's, `eq`.
fn at_the_api_cap(a: &Archive) {
    use charon_archive::total_cap::CAP;
    let recs = |r: Range<usize>| -> Vec<NewRecord> {
        r.map(|i| NewRecord {
            stable_key: format!("cap:{i}"),
            original_queue: Some(format!("q{}", i % 7)),
            payload: Bytes::from(format!("body {i}")),
            error_message: Some(format!(
                "failed: cause {}{}",
                i % 3,
                if i < 10_000 { " ten" } else { "" }
            )),
            ..support::record(i)
        })
        .collect()
    };
    a.with(|c| ops::insert_batch(c, &recs(0..10_000)).expect("insert"));
    // Part of them indexed (the copy's side and the records above the watermark both hold
    // matches; the whole 10,000 take the indexer minutes on a busy machine).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while indexer_wait::watermark(a).0 < 2_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "indexer reached 2,000"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    a.with(|c| {
        ops::insert_batch(c, &recs(10_000..10_050)).expect("insert");
        for pairs in [
            &[("error", "failed")][..],
            &[("body", "body")],
            &[("error", "cause 1")],
            &[("error", " ten")],
            &[("error", "failed"), ("status", "PENDING")],
        ] {
            for by in [None, Some("original_queue"), Some("content_type")] {
                assert_groups(c, pairs, by, &[CAP], "at the API's cap");
            }
        }
    });
}

#[test]
fn sqlite_groups_at_the_api_cap() {
    let dir = tempfile::tempdir().expect("tmp");
    let a =
        Archive::open(&format!("sqlite://{}", dir.path().join("a.db").display())).expect("open");
    at_the_api_cap(&a);
}

#[test]
fn postgres_groups_at_the_api_cap() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    at_the_api_cap(&a);
}
