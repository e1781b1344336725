//! Migration 10 (the summary keyed also by content type and original exchange) upgrades an
//! archive an older Charon (schema version 9) left, on SQLite and on a real PostgreSQL: every
//! record intact, the summary exact with the new key after the upgrade and after every kind of
//! change (archiver batches with a redelivery, a user's INSERT, UPDATE and DELETE, the API's
//! skip and delete of each group's oldest and newest record), and the list's `total`, its pages
//! and `/groups` filtered or grouped by `content_type` / `original_exchange` — now read from the
//! summary — equal to counting the records with plain SQL.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod record;
#[path = "support/summary_check.rs"]
mod summary_check;

use charon_archive::filter::Filter;
use charon_archive::ops::{self, Selection};
use charon_archive::sql::{Cell, Conn, Param};
use charon_archive::time::format_ms;
use charon_archive::{Archive, NewRecord, schema};
use summary_check::{check_summary, rows};

/// Record `i`: content type absent, JSON or text; exchange absent, `orders` or `billing`; two
/// queues, groups by original queue and reason, times out of id order.
fn rec(i: usize, at: i64) -> NewRecord {
    NewRecord {
        stable_key: format!("s:10:{i}"),
        queue: if i.is_multiple_of(2) {
            "dlq-a"
        } else {
            "dlq-b"
        }
        .into(),
        original_queue: (!i.is_multiple_of(5)).then(|| format!("orders-{}", i % 3)),
        original_exchange: match i % 3 {
            0 => None,
            1 => Some("orders".into()),
            _ => Some("billing".into()),
        },
        content_type: match i % 4 {
            0 => None,
            1 | 3 => Some("application/json".into()),
            _ => Some("text/plain".into()),
        },
        reason: (!i.is_multiple_of(6)).then(|| "rejected".to_string()),
        error_message: Some(format!("failed {}", i % 4)),
        created_at: at + ((i * 7919) % 300) as i64,
        ..record::record(i)
    }
}

fn snapshot(c: &mut dyn Conn) -> Vec<Vec<Cell>> {
    rows(
        c,
        "SELECT id, stable_key, queue, original_queue, original_exchange, content_type, payload, \
         payload_bytes, status, created_at FROM dead_letters",
    )
}

fn ids(c: &mut dyn Conn, sql: &str, p: &[Param]) -> Vec<i64> {
    c.query(sql, p)
        .expect("query")
        .iter()
        .map(|r| r[0].int())
        .collect()
}

/// A filter as the API's pairs, and the plain SQL condition with its parameters.
type Case = (Vec<(&'static str, &'static str)>, String, Vec<Param>);

/// The filters the summary answers since migration 10.
fn filters() -> Vec<Case> {
    vec![
        (
            vec![("content_type", "application/json")],
            "content_type = ?".into(),
            vec!["application/json".into()],
        ),
        (
            vec![("content_type", "text/plain")],
            "content_type = ?".into(),
            vec!["text/plain".into()],
        ),
        (
            vec![("content_type", "text/csv")],
            "content_type = ?".into(),
            vec!["text/csv".into()],
        ),
        (
            vec![("original_exchange", "orders")],
            "original_exchange = ?".into(),
            vec!["orders".into()],
        ),
        (
            vec![("original_exchange", "billing"), ("status", "PENDING")],
            "original_exchange = ? AND status = ?".into(),
            vec!["billing".into(), "PENDING".into()],
        ),
        (
            vec![
                ("content_type", "application/json"),
                ("original_exchange", "orders"),
                ("queue", "dlq-b"),
            ],
            "content_type = ? AND original_exchange = ? AND queue = ?".into(),
            vec!["application/json".into(), "orders".into(), "dlq-b".into()],
        ),
        (
            vec![("original_exchange", "nothing")],
            "original_exchange = ?".into(),
            vec!["nothing".into()],
        ),
    ]
}

/// Every filter's `total` and pages 1 and 2 (both id orders), and `/groups` by the new columns
/// (alone, together, with status; unfiltered and filtered) against plain SQL.
fn check_queries(c: &mut dyn Conn, when: &str) {
    for (pairs, cond, p) in filters() {
        let f = Filter::from_pairs(pairs.iter().copied()).expect("filter");
        let want_total = c
            .query(
                &format!("SELECT COUNT(*) FROM dead_letters WHERE {cond}"),
                &p,
            )
            .expect("count")[0][0]
            .int();
        for (sort, dir) in [(None, "DESC"), (Some("id"), "ASC"), (Some("-id"), "DESC")] {
            for page in [1u64, 2] {
                let (recs, total) = ops::list(c, &f, sort, page, 7).expect("list");
                assert_eq!(total, want_total, "total {pairs:?} ({when})");
                let want = ids(
                    c,
                    &format!(
                        "SELECT id FROM dead_letters WHERE {cond} ORDER BY id {dir} LIMIT 7 OFFSET {}",
                        (page - 1) * 7
                    ),
                    &p,
                );
                let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
                assert_eq!(have, want, "{pairs:?} sort={sort:?} page={page} ({when})");
            }
        }
    }
    let group_filters: Vec<Case> = vec![
        (vec![], "TRUE".into(), vec![]),
        (
            vec![("original_exchange", "orders")],
            "original_exchange = ?".into(),
            vec!["orders".into()],
        ),
        (
            vec![("content_type", "text/plain"), ("status", "PENDING")],
            "content_type = ? AND status = ?".into(),
            vec!["text/plain".into(), "PENDING".into()],
        ),
    ];
    for by in [
        "content_type",
        "original_exchange",
        "content_type,original_exchange",
        "original_exchange,status",
        "queue,content_type",
    ] {
        for (pairs, cond, p) in &group_filters {
            let f = Filter::from_pairs(pairs.iter().copied()).expect("filter");
            let mut have: Vec<String> = ops::groups(c, Some(by), &f)
                .expect("groups")
                .iter()
                .map(|g| {
                    let keys: Vec<String> = by.split(',').map(|k| g[k].to_string()).collect();
                    format!(
                        "{} {} {} {}",
                        keys.join("|"),
                        g["count"],
                        g["oldest"].as_str().unwrap_or("-"),
                        g["newest"].as_str().unwrap_or("-")
                    )
                })
                .collect();
            have.sort();
            let mut want: Vec<String> = c
                .query(
                    &format!(
                        "SELECT {by}, COUNT(*), MIN(created_at), MAX(created_at) FROM dead_letters \
                         WHERE {} GROUP BY {by}",
                        cond.replace("TRUE", "1 = 1")
                    ),
                    p,
                )
                .expect("group by")
                .iter()
                .map(|r| {
                    let n = by.split(',').count();
                    let keys: Vec<String> = (0..n)
                        .map(|i| {
                            r[i].opt_text()
                                .map_or("null".to_string(), |s| format!("\"{s}\""))
                        })
                        .collect();
                    format!(
                        "{} {} {} {}",
                        keys.join("|"),
                        r[n].int(),
                        format_ms(r[n + 1].int()),
                        format_ms(r[n + 2].int())
                    )
                })
                .collect();
            want.sort();
            assert!(!want.is_empty() || !pairs.is_empty());
            assert_eq!(have, want, "groups by={by} {pairs:?} ({when})");
        }
    }
}

/// A user's own INSERT (the trigger counts it): copies of some records with new stable keys and
/// another content type.
fn user_insert(c: &mut dyn Conn, tag: &str, ct: &str) {
    c.exec(
        &format!(
            "INSERT INTO dead_letters (stable_key, vhost, queue, original_queue, original_exchange, original_routing_keys, \
             reason, death_count, message_id, correlation_id, message_key, content_type, properties, headers, amqp_properties, \
             payload, payload_bytes, error_message, error_stacktrace, error_fingerprint, status, created_at, updated_at) \
             SELECT stable_key || '{tag}', vhost, queue, original_queue, original_exchange, original_routing_keys, reason, death_count, \
             message_id, correlation_id, message_key, ?, properties, headers, amqp_properties, payload, payload_bytes, \
             error_message, error_stacktrace, error_fingerprint, status, created_at + 5, updated_at \
             FROM dead_letters WHERE id % 9 = 4"
        ),
        &[ct.into()],
    )
    .expect("user insert");
}

fn upgrade(url: &str, mut old: Box<dyn Conn>) {
    let now = charon_archive::time::now_ms() - 100_000;
    schema::migrate_to(old.as_mut(), 9).expect("schema 9");
    let first: Vec<NewRecord> = (0..200).map(|i| rec(i, now)).collect();
    ops::insert_batch(old.as_mut(), &first).expect("batch on schema 9");
    user_insert(old.as_mut(), ":u9", "text/plain");
    let version =
        |c: &mut dyn Conn| rows(c, "SELECT MAX(version) FROM archive_migrations")[0][0].int();
    assert_eq!(version(old.as_mut()), 9);
    check_summary(old.as_mut(), "schema 9 inserts");
    let before = snapshot(old.as_mut());
    assert!(before.len() > 200);
    drop(old);

    let a = Archive::open(url).expect("open upgrades");
    a.with(|c| {
        assert_eq!(version(c), schema::latest());
        assert!(schema::latest() >= 10);
        assert_eq!(snapshot(c), before, "records intact after migration 10");
        check_summary(c, "migration 10");
        check_queries(c, "migration 10");
        // New records on the upgraded database (150..199 again: a redelivery).
        let more: Vec<NewRecord> = (150..400).map(|i| rec(i, now)).collect();
        assert_eq!(ops::insert_batch(c, &more).expect("batch"), 200);
        check_summary(c, "a batch after migration 10");
        check_queries(c, "a batch after migration 10");
        user_insert(c, ":u10", "text/csv");
        check_summary(c, "a user's insert");
        check_queries(c, "a user's insert");
        // Remove each group's oldest and newest records (their bounds looked up again), by the
        // API's delete and skip and by a user's own SQL.
        let bounds = |c: &mut dyn Conn, agg: &str| -> Vec<i64> {
            rows(
                c,
                &format!(
                    "SELECT MIN(d.id) FROM dead_letters d JOIN (SELECT queue, content_type, original_exchange, {agg}(created_at) AS t \
                     FROM dead_letters GROUP BY queue, content_type, original_exchange) b ON d.queue = b.queue \
                     AND d.created_at = b.t AND (d.content_type = b.content_type OR (d.content_type IS NULL AND b.content_type IS NULL)) \
                     AND (d.original_exchange = b.original_exchange OR (d.original_exchange IS NULL AND b.original_exchange IS NULL)) \
                     GROUP BY d.queue, d.content_type, d.original_exchange"
                ),
            )
            .iter()
            .map(|r| r[0].int())
            .collect()
        };
        let oldest = bounds(c, "MIN");
        assert!(oldest.len() > 10);
        ops::delete(c, &Selection::Ids(oldest), "dave", None).expect("delete");
        check_summary(c, "deleting every group's oldest");
        let newest = bounds(c, "MAX");
        ops::skip(c, &Selection::Ids(newest), "bob", "known").expect("skip");
        check_summary(c, "skipping every group's newest");
        check_queries(c, "delete and skip");
        c.exec("DELETE FROM dead_letters WHERE id % 4 = 1", &[])
            .expect("user delete");
        check_summary(c, "a user's delete");
        c.exec(
            "UPDATE dead_letters SET content_type = 'text/csv', created_at = created_at + 1000 WHERE id % 5 = 2",
            &[],
        )
        .expect("user update");
        check_summary(c, "a user's update of content_type");
        c.exec(
            "UPDATE dead_letters SET original_exchange = NULL WHERE id % 7 = 3",
            &[],
        )
        .expect("user update");
        check_summary(c, "a user's update of original_exchange");
        check_queries(c, "user updates");
        // Delete by filter through the API (a content type's records).
        let f = Filter::from_pairs([("content_type", "text/plain")]).expect("filter");
        ops::delete(c, &Selection::Filter(f), "dave", None).expect("delete by filter");
        check_summary(c, "delete by content_type");
        check_queries(c, "delete by content_type");
    });
}

#[test]
fn sqlite_migration_10_keys_the_summary_by_content_type_and_exchange() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let old = charon_archive::sqlite::Sqlite::open(&path).expect("sqlite");
    upgrade(&path.to_string_lossy(), Box::new(old));
}

#[test]
fn postgres_migration_10_keys_the_summary_by_content_type_and_exchange() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    upgrade(&pg.url, Box::new(old));
}
