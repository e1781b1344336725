//! The `total` of a time range with exact group-key filters (`range_count`, seventeenth round):
//! on SQLite counted from `dead_letters_group`'s index ranges, one per summary key; on both
//! backends equal to the plain `COUNT(*)`, with the page's ids equal to the plain sorted query —
//! for NULL key columns, `created_at` out of id order, after skips, a replay job (replayed and
//! failed records), edits, deletes, users' UPDATEs of status and time, and records inserted by a
//! user's own SQL.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/replay_step.rs"]
mod replay_step;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::{Filter, group_by};
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::sql::{Conn, Dialect};
use charon_archive::{Archive, NewRecord};

const N: usize = 1200;
const T0: i64 = 1_700_000_000_000;

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("r:{i}"),
        queue: format!("dlq-{}", i % 3),
        // NULL key columns in some groups (the index seek compares with `IS`).
        original_queue: (!i.is_multiple_of(5)).then(|| format!("q{}", i % 4)),
        reason: (!i.is_multiple_of(7)).then(|| "rejected".to_string()),
        error_fingerprint: i.is_multiple_of(2).then(|| format!("{:016x}", i % 6)),
        content_type: Some(if i.is_multiple_of(4) { "a/b" } else { "c/d" }.into()),
        // One message a record (a group's sample must be of its group and range), some none.
        error_message: (!i.is_multiple_of(3)).then(|| format!("m{i}")),
        // Out of id order, with ties.
        created_at: T0 + ((i * 7919) % N / 2) as i64 * 10,
        ..support::record(i)
    }
}

/// The filters compared: ranges alone and with key terms (the fast path), and with terms it
/// leaves to the plain count.
fn filters() -> Vec<Vec<(&'static str, String)>> {
    let t = |ms: i64| (T0 + ms).to_string();
    let mut out = Vec::new();
    for range in [
        vec![("since", t(2000))],
        vec![("until", t(3000))],
        vec![("since", t(1000)), ("until", t(4000))],
        vec![("since", t(99_000))],
        // Bounds inside a second (PostgreSQL's summary per second reads those seconds' records),
        // with ties at 1230 and 3450, and a range within one second.
        vec![("since", t(1230))],
        vec![("until", t(3450))],
        vec![("since", t(1230)), ("until", t(3450))],
        vec![("since", t(2100)), ("until", t(2870))],
    ] {
        for keys in [
            vec![],
            vec![("status", "SKIPPED".to_string())],
            vec![("status", "PENDING".to_string())],
            vec![("status", "REPLAYED".to_string())],
            vec![("queue", "dlq-1".to_string())],
            vec![("original_queue", "q2".to_string())],
            vec![
                ("queue", "dlq-2".to_string()),
                ("status", "PENDING".to_string()),
            ],
            vec![("error_fingerprint", format!("{:016x}", 4))],
            vec![("reason", "rejected".to_string())],
            vec![("vhost", "/".to_string())],
            vec![("vhost", "none".to_string())],
            // Not in the index: the plain count.
            vec![("content_type", "a/b".to_string())],
            vec![("error", "x".to_string())],
        ] {
            let mut f = range.clone();
            f.extend(keys);
            out.push(f);
        }
    }
    out
}

fn check(c: &mut dyn Conn, when: &str) {
    let sqlite = c.dialect() == Dialect::Sqlite;
    let mut walks = [0u32; 2];
    for pairs in filters() {
        let f = Filter::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).expect("f");
        let fast = charon_archive::range_count::query(c, &f).expect("range count");
        let keyed = pairs.len() > 1
            && pairs
                .iter()
                .all(|(k, _)| !matches!(*k, "content_type" | "error"));
        let keyed = keyed && pairs.iter().any(|(k, _)| !matches!(*k, "since" | "until"));
        assert_eq!(fast.is_some(), sqlite && keyed, "path {pairs:?} ({when})");
        let seconds = charon_archive::summary_seconds::total(c, &f).expect("seconds");
        // The summary's key has the content type too (migration 10).
        let pg_keyed = pairs.iter().all(|(k, _)| *k != "error")
            && pairs.iter().any(|(k, _)| !matches!(*k, "since" | "until"));
        assert_eq!(
            seconds.is_some(),
            !sqlite && pg_keyed,
            "pg path {pairs:?} ({when})"
        );
        if let Some(n) = seconds {
            let (cond, p) = f.to_sql(c.dialect()).expect("cond");
            let want = c
                .query(
                    &format!("SELECT COUNT(*) FROM dead_letters WHERE {cond}"),
                    &p,
                )
                .expect("count")[0][0]
                .int();
            assert_eq!(n, want, "total {pairs:?} ({when})");
        }
        for sort in [None, Some("id"), Some("created_at"), Some("-created_at")] {
            plain_pages::assert_pages(c, &f, sort, &[1, 2], 20, &format!("{pairs:?} ({when})"));
        }
        check_key_walk(c, &pairs, &mut walks, when);
    }
    if !sqlite {
        // Both choices occur (a choice fixed either way fails here).
        assert!(
            walks[0] > 0 && walks[1] > 0,
            "walk choices {walks:?} ({when})"
        );
    }
}

/// PostgreSQL: `range_count::key_walk` (a page of a range with key terms in id order walks an
/// `(X, id)` index) is taken exactly when a key term has such an index, the page lies within the
/// `total` matches, and the key's records outside the range when the walk's side is bounded
/// (counted here with plain SQL) and the page's reach are no more than the matches. `walks` counts the choices
/// made (not taken, taken).
fn check_key_walk(c: &mut dyn Conn, pairs: &[(&str, String)], walks: &mut [u32; 2], when: &str) {
    let f = Filter::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).expect("f");
    let count = |c: &mut dyn Conn, f: &Filter| {
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        c.query(
            &format!("SELECT COUNT(*) FROM dead_letters WHERE {cond}"),
            &p,
        )
        .expect("count")[0][0]
            .int()
    };
    let total = count(c, &f);
    let walked = pairs.iter().any(|(k, _)| {
        matches!(
            *k,
            "queue" | "original_queue" | "error_fingerprint" | "reason" | "status"
        )
    }) && pairs.iter().all(|(k, _)| !matches!(*k, "error"));
    for desc in [true, false] {
        // The far side: without the walk's bound (`until` newest first, `since` ascending) none,
        // else the key terms' records outside the range.
        let bound = if desc { "until" } else { "since" };
        let far = if pairs.iter().any(|(k, _)| *k == bound) {
            let keys: Vec<(&str, &str)> = pairs
                .iter()
                .filter(|(k, _)| !matches!(*k, "since" | "until"))
                .map(|(k, v)| (*k, v.as_str()))
                .collect();
            count(c, &Filter::from_pairs(keys).expect("keys")) - total
        } else {
            0
        };
        for reach in [20u64, 40, 400] {
            let r = reach as i64;
            let want = c.dialect() == Dialect::Postgres && walked && r <= total && far + r <= total;
            let have =
                charon_archive::range_count::key_walk(c, &f, desc, reach, total).expect("key walk");
            assert_eq!(
                have, want,
                "key walk {pairs:?} desc {desc} reach {reach} total {total} far {far} ({when})"
            );
            if c.dialect() == Dialect::Postgres && walked {
                walks[usize::from(have)] += 1;
            }
        }
    }
}

/// `/groups` of every filter by several key sets equals the plain `GROUP BY` (count, oldest,
/// newest per group, largest first), each sample message one of its group's records' in the
/// range; on SQLite a range with only group-key terms (none, too) by group-key columns is
/// answered from the group index (`range_count::groups_query`).
fn check_groups(c: &mut dyn Conn, when: &str) {
    let sqlite = c.dialect() == Dialect::Sqlite;
    for pairs in filters() {
        let f = Filter::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).expect("f");
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        for by in [
            "status",
            "queue",
            "original_queue,reason,error_fingerprint,status",
            "vhost,queue,original_queue,reason,error_fingerprint,status",
            "content_type",
        ] {
            let cols = group_by(Some(by)).expect("by");
            let fast = charon_archive::range_count::groups_query(c, &f, &cols).expect("groups");
            let keyed = pairs
                .iter()
                .all(|(k, _)| !matches!(*k, "content_type" | "error"))
                && by != "content_type";
            assert_eq!(
                fast.is_some(),
                sqlite && keyed,
                "path {pairs:?} by {by} ({when})"
            );
            let seconds =
                charon_archive::summary_seconds::groups(c, &f, &cols).expect("seconds groups");
            assert_eq!(
                seconds.is_some(),
                !sqlite && pairs.iter().all(|(k, _)| *k != "error"),
                "pg path {pairs:?} by {by} ({when})"
            );
            let list = cols.join(", ");
            let plain = c
                .query(
                    &format!(
                        "SELECT {list}, COUNT(*), MIN(created_at), MAX(created_at) FROM dead_letters \
                         WHERE {cond} GROUP BY {list}"
                    ),
                    &p,
                )
                .expect("plain");
            let key = |vals: Vec<Option<String>>| {
                vals.into_iter()
                    .map(|v| v.unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("|")
            };
            let mut want: Vec<(String, i64, String, String)> = plain
                .iter()
                .map(|r| {
                    (
                        key((0..cols.len()).map(|i| r[i].opt_text()).collect()),
                        r[cols.len()].int(),
                        charon_archive::time::format_ms(r[cols.len() + 1].int()),
                        charon_archive::time::format_ms(r[cols.len() + 2].int()),
                    )
                })
                .collect();
            want.sort();
            let groups = ops::groups(c, Some(by), &f).expect("groups");
            let counts: Vec<i64> = groups
                .iter()
                .map(|g| g["count"].as_i64().expect("count"))
                .collect();
            assert!(
                counts.windows(2).all(|w| w[0] >= w[1]),
                "largest first {pairs:?} by {by} ({when})"
            );
            let mut have: Vec<(String, i64, String, String)> = groups
                .iter()
                .map(|g| {
                    (
                        key(cols
                            .iter()
                            .map(|col| g[col.as_str()].as_str().map(str::to_string))
                            .collect()),
                        g["count"].as_i64().expect("count"),
                        g["oldest"].as_str().expect("oldest").to_string(),
                        g["newest"].as_str().expect("newest").to_string(),
                    )
                })
                .collect();
            have.sort();
            assert_eq!(have, want, "groups {pairs:?} by {by} ({when})");
            for g in &groups {
                let Some(m) = g["error_message"].as_str() else {
                    continue;
                };
                let mut conds = vec![cond.clone(), "error_message = ?".to_string()];
                let mut q = p.clone();
                q.push(m.into());
                for col in &cols {
                    match g[col.as_str()].as_str() {
                        Some(v) => {
                            conds.push(format!("{col} = ?"));
                            q.push(v.into());
                        }
                        None => conds.push(format!("{col} IS NULL")),
                    }
                }
                let n = c
                    .query(
                        &format!(
                            "SELECT COUNT(*) FROM dead_letters WHERE {}",
                            conds.join(" AND ")
                        ),
                        &q,
                    )
                    .expect("sample")[0][0]
                    .int();
                assert!(n > 0, "sample {m:?} of {g} {pairs:?} ({when})");
            }
        }
    }
}

/// Skips, a replay job, edits, deletes, users' UPDATEs and INSERTs.
fn change(c: &mut dyn Conn) {
    let skip = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 9 = 1", &[]);
    ops::skip(c, &Selection::Ids(skip), "carol", "range").expect("skip");
    let f = Filter::from_pairs([("queue", "dlq-2")]).expect("f");
    replay_step::replay_step(c, f, 60, 4);
    for id in plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 31 = 2", &[]) {
        let e = Edit {
            payload: Some(b"edited".to_vec()),
            ..Edit::default()
        };
        ops::edit(c, id, "carol", &e).expect("edit");
    }
    let del = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 17 = 3", &[]);
    ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
    let by_filter = Filter::from_pairs([
        ("since", (T0 + 5000).to_string().as_str()),
        ("status", "SKIPPED"),
    ])
    .expect("f");
    ops::delete(c, &Selection::Filter(by_filter), "carol", None).expect("delete by filter");
    // A user's own SQL: status and time changed, a new group's record inserted.
    c.exec(
        "UPDATE dead_letters SET status = 'FAILED', created_at = created_at + 2500 WHERE id % 23 = 4",
        &[],
    )
    .expect("update");
    c.exec(
        &format!(
            "INSERT INTO dead_letters (stable_key, vhost, queue, original_queue, original_exchange, \
             original_routing_keys, reason, death_count, message_id, message_key, properties, headers, \
             amqp_properties, payload, payload_bytes, status, created_at, updated_at) \
             SELECT 'u:' || id, '/', 'dlq-1', NULL, NULL, '[]', NULL, 1, NULL, NULL, '{{}}', '{{}}', {empty}, {empty}, 0, \
             'PENDING', created_at + 1, created_at + 1 FROM dead_letters WHERE id % 29 = 5",
            empty = if c.dialect() == Dialect::Sqlite { "x''" } else { "''::bytea" }
        ),
        &[],
    )
    .expect("insert");
}

/// PostgreSQL: the summary per second (migration 19; since migration 20 the archiver's batches
/// count themselves into it) equals the records counted per second and group.
pub fn check_seconds(c: &mut dyn Conn, when: &str) {
    if c.dialect() != Dialect::Postgres {
        return;
    }
    let have = c
        .query(
            "SELECT second, group_key, records FROM dead_letter_group_seconds ORDER BY 1, 2",
            &[],
        )
        .expect("seconds");
    let want = c
        .query(
            &format!(
                "SELECT FLOOR(created_at / 1000.0)::BIGINT, g.group_key, COUNT(*) FROM dead_letters AS d \
                 JOIN dead_letter_groups AS g ON g.group_key = {} GROUP BY 1, 2 ORDER BY 1, 2",
                charon_archive::summary::key_expr_of(charon_archive::summary::Keys::V10, "d.")
            ),
            &[],
        )
        .expect("plain seconds");
    assert!(!want.is_empty(), "records ({when})");
    assert_eq!(have, want, "summary per second ({when})");
}

fn scenario(a: &Archive) {
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..N).map(rec).collect();
        ops::insert_batch(c, &recs).expect("insert");
        check_seconds(c, "inserted");
        // A redelivery half archived before: the batch's COPY fails, its INSERTs add only the
        // new records, and only those are counted (since migration 20 by the archiver itself).
        let again: Vec<NewRecord> = (N - 100..N + 50).map(rec).collect();
        assert_eq!(ops::insert_batch(c, &again).expect("redelivery"), 50);
        check_seconds(c, "a redelivery");
        check(c, "inserted");
        check_groups(c, "inserted");
        change(c);
        check_seconds(c, "after changes");
        check(c, "after changes");
        check_groups(c, "after changes");
    });
}

#[test]
fn sqlite_ranged_counts_from_the_group_index_equal_the_plain_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Archive::open(&dir.path().join("archive.db").to_string_lossy()).expect("open");
    scenario(&a);
    // Without the index as migration 6 made it: the plain count, the same totals.
    a.with(|c| {
        c.exec("DROP INDEX dead_letters_group", &[]).expect("drop");
        c.exec(
            "CREATE INDEX dead_letters_group ON dead_letters (vhost, queue, status, created_at)",
            &[],
        )
        .expect("create");
        let f = Filter::from_pairs([("since", "1"), ("status", "PENDING")]).expect("f");
        assert!(
            charon_archive::range_count::query(c, &f)
                .expect("query")
                .is_none()
        );
        let (_, total) = ops::list(c, &f, None, 1, 5).expect("list");
        let want = c
            .query(
                "SELECT COUNT(*) FROM dead_letters WHERE created_at >= 1 AND status = 'PENDING'",
                &[],
            )
            .expect("count")[0][0]
            .int();
        assert_eq!(total, want);
    });
}

#[test]
fn postgres_ranged_counts_equal_the_plain_count() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    scenario(&a);
}
