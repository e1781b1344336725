//! Migration 13 (`key_copy`, nineteenth round): filters with an `error` or `header.NAME` term and
//! terms of the copy's columns (`vhost`, `queue`, `original_queue`, `reason`,
//! `error_fingerprint`, `status`, a time range, a vhost limit) counted, paged and grouped on the
//! copy. On SQLite and a real PostgreSQL each such filter answers exactly what the plain SQL on
//! `dead_letters` answers (`total`, pages 1 and 2 in three orders, `/groups` by four key sets with
//! each group's count, oldest, newest and order, its sample one message of the group's records), and the copy holds exactly one row per
//! live record at or below the watermark with that record's ten columns: right after the upgrade
//! from version 12, with records above the watermark, after skips, a replay job, body edits,
//! users' UPDATEs of the copied columns, deletes (by ids and by filter), retention and a user's
//! INSERT, and caught up again.

#[path = "support/copy_scenario.rs"]
mod copy_scenario;
#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/replay_step.rs"]
mod replay_step;
#[path = "support/record.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};

use charon_archive::filter::{Filter, order_by};
use charon_archive::ops::{self, Selection};
use charon_archive::sql::{Conn, Dialect, Param};
use charon_archive::time::format_ms;
use charon_archive::{Archive, NewRecord, header_groups, header_index, key_copy, schema};

const T0: i64 = 1_700_000_000_000;

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("kc:{i}"),
        vhost: if i.is_multiple_of(4) { "v2" } else { "/" }.into(),
        queue: format!("dlq-{}", i % 3),
        original_queue: (!i.is_multiple_of(7)).then(|| format!("o-{}", i % 4)),
        reason: (!i.is_multiple_of(6)).then(|| "rejected".to_string()),
        error_fingerprint: (!i.is_multiple_of(5)).then(|| format!("f{}", i % 5)),
        headers: format!(r#"{{"x-kind":"k{}","x-n":{}}}"#, i % 4, i % 9),
        error_message: (!i.is_multiple_of(11))
            .then(|| format!("Order {i} could not be processed: cause {}", i % 10)),
        error_stacktrace: i
            .is_multiple_of(3)
            .then(|| format!("java.lang.IllegalStateException: cause {}", (i + 5) % 10)),
        // Times out of id order: a group's oldest and newest are not its first and last ids.
        created_at: T0 + ((i * 7919) % 1000) as i64 * 10,
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, ids: std::ops::Range<usize>) {
    let recs: Vec<NewRecord> = ids.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

fn ids(c: &mut dyn Conn, sql: &str, p: &[Param]) -> Vec<i64> {
    c.query(sql, p)
        .expect("ids")
        .iter()
        .map(|r| r[0].int())
        .collect()
}

/// The copy: one row per live record at or below the watermark, with its ten columns.
fn copy_sound(c: &mut dyn Conn, when: &str) {
    let differs: Vec<String> = [
        "error_message",
        "error_stacktrace",
        "vhost",
        "queue",
        "original_queue",
        "reason",
        "error_fingerprint",
        "status",
        "created_at",
    ]
    .iter()
    .map(|col| format!("e.{col} IS DISTINCT FROM d.{col}"))
    .collect();
    let r = c
        .query(
            &format!(
                "SELECT \
                 (SELECT COUNT(*) FROM dead_letter_error_text e LEFT JOIN dead_letters d ON d.id = e.id \
                  WHERE d.id IS NULL OR e.id > (SELECT watermark FROM dead_letter_search_state) OR {}), \
                 (SELECT COUNT(*) FROM dead_letters d WHERE d.id <= (SELECT watermark FROM dead_letter_search_state) \
                  AND NOT EXISTS (SELECT 1 FROM dead_letter_error_text e WHERE e.id = d.id))",
                differs.join(" OR ")
            ),
            &[],
        )
        .expect("copy");
    assert_eq!(
        (r[0][0].int(), r[0][1].int()),
        (0, 0),
        "stale/wrong and missing copy rows ({when})"
    );
}

/// The filters: an indexed term (`error` with many, few and no matches, a short needle; a
/// header) with the copy's other columns.
/// A filter's terms and its vhost limit.
type Case = (Vec<(&'static str, String)>, Option<Vec<String>>);

fn filters() -> Vec<Case> {
    let mut out = Vec::new();
    let indexed: Vec<(&str, &str)> = vec![
        ("error", "cause 5"),
        ("error", "Order 12"),
        ("error", "nothing like this"),
        ("error", "a"),
        ("header.x-kind", "k1"),
        ("header.x-n", "4"),
    ];
    let extras: Vec<Vec<(&str, String)>> = vec![
        vec![("status", "PENDING".into())],
        vec![("queue", "dlq-1".into())],
        vec![("vhost", "v2".into())],
        vec![("original_queue", "o-2".into())],
        vec![("reason", "rejected".into())],
        vec![("error_fingerprint", "f3".into())],
        vec![("since", (T0 + 3000).to_string())],
        vec![
            ("since", (T0 + 2000).to_string()),
            ("until", (T0 + 7000).to_string()),
        ],
        vec![("status", "SKIPPED".into()), ("queue", "dlq-2".into())],
        vec![("error", "cause 1".into())],
    ];
    for (k, v) in &indexed {
        for extra in &extras {
            if extra.iter().any(|(ek, _)| ek == k) {
                continue;
            }
            let mut pairs = vec![(*k, v.to_string())];
            pairs.extend(extra.clone());
            out.push((pairs, None));
        }
        // A user limited to one vhost.
        out.push((vec![(*k, v.to_string())], Some(vec!["/".to_string()])));
    }
    out
}

/// The plain SQL condition of `pairs` on `dead_letters` (no index, no copy) and its parameters.
fn plain(
    d: Dialect,
    pairs: &[(&str, String)],
    vhosts: &Option<Vec<String>>,
) -> (String, Vec<Param>) {
    let mut conds = vec!["1 = 1".to_string()];
    let mut p: Vec<Param> = Vec::new();
    let mut rest = Vec::new();
    for (k, v) in pairs {
        if *k == "error" {
            conds.push(format!(
                "({} OR {})",
                d.contains("error_message"),
                d.contains("error_stacktrace")
            ));
            p.push(v.as_str().into());
            p.push(v.as_str().into());
        } else if let Some(name) = k.strip_prefix("header.") {
            conds.push(format!("{} = ?", d.json_field("headers")));
            p.push(name.into());
            p.push(v.as_str().into());
        } else {
            rest.push((*k, v.as_str()));
        }
    }
    let (rc, mut rp) = Filter::from_pairs(rest)
        .expect("rest")
        .to_sql(d)
        .expect("rest");
    conds.push(rc);
    p.append(&mut rp);
    if let Some(vs) = vhosts {
        conds.push(format!("vhost IN ({})", vec!["?"; vs.len()].join(", ")));
        p.extend(vs.iter().map(|v| Param::from(v.as_str())));
    }
    (conds.join(" AND "), p)
}

/// A group: its values, count, oldest, newest.
type Group = (Vec<Option<String>>, i64, String, String);

/// A group being summed: count, oldest, newest, the messages of its records.
type Acc = (i64, i64, i64, BTreeSet<String>);

fn check(c: &mut dyn Conn, when: &str) {
    copy_sound(c, when);
    let d = c.dialect();
    let mut matched = 0;
    for (pairs, vhosts) in filters() {
        let f = Filter::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())))
            .expect("f")
            .within(vhosts.clone());
        assert!(key_copy::answers(&f), "answered from the copy: {pairs:?}");
        let (cond, p) = plain(d, &pairs, &vhosts);
        let want_total = c
            .query(
                &format!("SELECT COUNT(*) FROM dead_letters WHERE {cond}"),
                &p,
            )
            .expect("count")[0][0]
            .int();
        matched += want_total;
        for sort in [None, Some("id"), Some("-created_at")] {
            let order = order_by(sort).expect("order");
            let all = ids(
                c,
                &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
                &p,
            );
            for page in [1u64, 2] {
                let (recs, total) = ops::list(c, &f, sort, page, 15).expect("list");
                assert_eq!(total, want_total, "total {pairs:?} {vhosts:?} ({when})");
                let want: Vec<i64> = all
                    .iter()
                    .copied()
                    .skip((page as usize - 1) * 15)
                    .take(15)
                    .collect();
                let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
                assert_eq!(
                    have, want,
                    "page {page} {pairs:?} {vhosts:?} {sort:?} ({when})"
                );
            }
        }
        for by in [
            "status",
            "vhost,queue",
            "original_queue,reason,error_fingerprint,status",
            "error_fingerprint",
        ] {
            let cols: Vec<&str> = by.split(',').collect();
            let n = cols.len();
            // Per group: count, oldest, newest and the messages of its records.
            let mut acc: BTreeMap<Vec<Option<String>>, Acc> = BTreeMap::new();
            for r in c
                .query(
                    &format!(
                        "SELECT {by}, created_at, error_message FROM dead_letters WHERE {cond}"
                    ),
                    &p,
                )
                .expect("groups")
            {
                let values: Vec<Option<String>> = (0..n).map(|i| r[i].opt_text()).collect();
                let (t, m) = (r[n].int(), r[n + 1].opt_text());
                let e = acc.entry(values).or_insert((0, t, t, BTreeSet::new()));
                e.0 += 1;
                e.1 = e.1.min(t);
                e.2 = e.2.max(t);
                e.3.extend(m);
            }
            // In the answer's order: count, largest first, then the values (NULL first).
            let mut want: Vec<(Group, BTreeSet<String>)> = acc
                .into_iter()
                .map(|(v, (count, lo, hi, all))| {
                    let (lo, hi) = (format_ms(lo), format_ms(hi));
                    ((v, count, lo, hi), all)
                })
                .collect();
            want.sort_by(|a, b| b.0.1.cmp(&a.0.1).then_with(|| a.0.0.cmp(&b.0.0)));
            let groups = ops::groups(c, Some(by), &f).expect("groups");
            let what = format!("by {by} {pairs:?} {vhosts:?} ({when})");
            let have: Vec<Group> = groups
                .iter()
                .map(|g| {
                    (
                        cols.iter()
                            .map(|c| g[*c].as_str().map(str::to_string))
                            .collect(),
                        g["count"].as_i64().unwrap_or(-1),
                        g["oldest"].as_str().unwrap_or("").to_string(),
                        g["newest"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect();
            let w: Vec<Group> = want.iter().map(|(g, _)| g.clone()).collect();
            assert_eq!(have, w, "groups {what}");
            // Each sample one message of the group's records, NULL only when none has one —
            // or, for a header term, which migration 25's header rows answer by any key column,
            // when the group's greatest-id record has none (tests/header_key_columns.rs checks
            // that rule exactly).
            let by_cols: Vec<String> = cols.iter().map(|c| c.to_string()).collect();
            let header_plan = header_groups::plan(c, &f, &by_cols)
                .expect("plan")
                .is_some();
            for (g, (_, all)) in groups.iter().zip(&want) {
                match g["error_message"].as_str() {
                    Some(s) => assert!(all.contains(s), "sample of {g} not its group's {what}"),
                    None => assert!(header_plan || all.is_empty(), "no sample for {g} {what}"),
                }
            }
        }
    }
    assert!(matched > 1000, "the filters match ({when})");
}

/// Skips, a replay job, body edits, users' UPDATEs of copied columns, deletes, retention, a
/// user's INSERT.
fn change(c: &mut dyn Conn) {
    let skip = ids(c, "SELECT id FROM dead_letters WHERE id % 9 = 1", &[]);
    ops::skip(c, &Selection::Ids(skip), "carol", "q9t").expect("skip");
    let by_filter = Filter::from_pairs([("error", "cause 3"), ("queue", "dlq-0")]).expect("f");
    ops::skip(c, &Selection::Filter(by_filter), "carol", "q9t").expect("skip by filter");
    let f = Filter::from_pairs([("queue", "dlq-2")]).expect("f");
    replay_step::replay_step(c, f, 60, 4);
    for id in ids(c, "SELECT id FROM dead_letters WHERE id % 31 = 2", &[]) {
        let e = ops::Edit {
            payload: Some(b"edited".to_vec()),
            headers: Some(serde_json::json!({"x-kind": "k1"})),
            ..ops::Edit::default()
        };
        ops::edit(c, id, "carol", &e).expect("edit");
    }
    // Copied columns changed by a user's SQL (the API changes only `status`).
    c.exec(
        "UPDATE dead_letters SET queue = 'dlq-1', original_queue = NULL, reason = 'expired', \
         error_fingerprint = 'f3', vhost = 'v2', created_at = created_at + 5, \
         error_message = 'edited by hand: cause 5' WHERE id % 13 = 2",
        &[],
    )
    .expect("user update");
    let del = ids(c, "SELECT id FROM dead_letters WHERE id % 17 = 4", &[]);
    ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
    let by_filter = Filter::from_pairs([("header.x-kind", "k2"), ("queue", "dlq-0")]).expect("f");
    ops::delete(c, &Selection::Filter(by_filter), "carol", None).expect("delete by filter");
    ops::retention(c, Some(T0 + 500), None).expect("retention");
    copy_scenario::user_insert(c, r#"{"x-kind":"k1"}"#);
}

/// An archive at version 12 with 400 records, the first 250 indexed (the search index and the
/// header index as the indexer fills them, written here with SQL; the watermark's UPDATE fills
/// migration 12's copy), then opened by this build.
fn upgraded(url: &str, mut old: Box<dyn Conn>) -> Archive {
    schema::migrate_to(old.as_mut(), 12).expect("v12");
    insert(old.as_mut(), 0..400);
    let d = old.dialect();
    let fill = copy_scenario::search_fill_sql(d, 250);
    old.batch(&fill).expect("fill the v12 index");
    old.batch(&header_index::fill_sql_v9(d, "d.id <= 250"))
        .expect("fill the header index");
    old.batch("UPDATE dead_letter_search_state SET watermark = 250")
        .expect("watermark");
    let v12 = old
        .query("SELECT COUNT(*) FROM dead_letter_error_text", &[])
        .expect("v12 copy")[0][0]
        .int();
    assert_eq!(v12, 250, "migration 12's copy");
    drop(old);
    let a = Archive::open(url).expect("open v13");
    a.with(|c| {
        let v = c
            .query("SELECT MAX(version) FROM archive_migrations", &[])
            .expect("version")[0][0]
            .int();
        assert!(v >= 13);
        let n = c
            .query(
                "SELECT COUNT(*) FROM dead_letter_error_text e JOIN dead_letters d ON d.id = e.id \
                 WHERE e.id <= 250 AND e.status = d.status AND e.queue = d.queue AND e.created_at = d.created_at",
                &[],
            )
            .expect("copied")[0][0]
            .int();
        assert_eq!(n, 250, "the upgrade copied the key columns");
    });
    a
}

/// The shared scenario (`support/copy_scenario.rs`) with this file's check, burst and changes.
const STEPS: copy_scenario::Steps<'static> = copy_scenario::Steps {
    check: &check,
    burst: &|c| insert(c, 400..700),
    change: &change,
};

#[test]
fn sqlite_filters_on_the_key_copy_equal_the_plain_sql() {
    copy_scenario::on_sqlite(upgraded, &STEPS);
}

#[test]
fn postgres_filters_on_the_key_copy_equal_the_plain_sql() {
    let Some(pg) = copy_scenario::on_postgres(upgraded, &STEPS) else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    a.with(|c| {
        let r = c
            .query(
                "SELECT COUNT(*) FROM pg_indexes WHERE tablename = 'dead_letter_error_text' AND indexdef LIKE '%gin_trgm_ops%'",
                &[],
            )
            .expect("indexes");
        // One since migration 29 (`error_grams`, both texts).
        assert_eq!(r[0][0].int(), 1, "the copy's trigram index rebuilt");
    });
}
