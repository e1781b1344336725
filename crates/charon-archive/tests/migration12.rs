//! Migration 12 (the second index diet: on SQLite the summary's bound lookup through the
//! narrower `dead_letters_group_bound`; nothing on PostgreSQL) upgrades an archive an older
//! Charon (schema version 11) left, on SQLite and on a real PostgreSQL: every record intact; the
//! summary exact after every kind of change that removes a group's oldest or newest record (the
//! API's delete and skip, a replay job, a user's DELETE and UPDATE), with groups that share the
//! index's range (same original queue, fingerprint and status, another vhost, queue, reason,
//! content type or exchange) and NULL and empty keys; list pages (`queue` with `status`, alone
//! and with other filters and orders, pages 1, 2 and a deep one, records above the search
//! indexer's watermark) equal to the plain SQL answer. The bound lookup's plan reads the new
//! index on SQLite.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod record;
#[path = "support/summary_check.rs"]
mod summary_check;

use charon_archive::bound_index::{BOUND_INDEX, sqlite_bound_lookup};
use charon_archive::filter::{Filter, order_by};
use charon_archive::jobs;
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::sql::{Cell, Conn, Dialect};
use charon_archive::{Archive, NewRecord, schema};
use serde_json::json;
use summary_check::{check_summary, rows};

const BASE: i64 = 1_700_000_000_000;

/// Record `i`: two vhosts, three queues, original queue absent, empty or one of two; the
/// fingerprint absent, empty or one of two; groups that differ only outside the bound index's
/// columns (vhost, queue, reason, content type, exchange); times out of id order with ties.
fn rec(i: usize, tag: &str) -> NewRecord {
    NewRecord {
        stable_key: format!("s12:{tag}:{i}"),
        vhost: if i % 7 == 3 { "other" } else { "/" }.into(),
        queue: format!("dlq-{}", i % 3),
        original_queue: match i % 5 {
            0 => None,
            1 => Some(String::new()),
            2 => Some("orders".into()),
            _ => Some("billing".into()),
        },
        error_fingerprint: match i % 4 {
            0 => None,
            1 => Some(String::new()),
            _ => Some(format!("fp{}", i % 2)),
        },
        reason: Some(if i % 6 == 1 { "expired" } else { "rejected" }.into()),
        content_type: (i % 8 == 2).then(|| "text/plain".to_string()),
        original_exchange: (i % 9 != 4).then(|| "x".to_string()),
        error_message: Some(format!("failed {}", i % 5)),
        created_at: BASE + ((i * 7919) % 600 / 2) as i64 * 10,
        ..record::record(i)
    }
}

/// Filters over key columns, `queue` with `status` among them (a first version of migration 12
/// dropped `dead_letters_queue (queue, status, id)`), and neighbours.
fn filters() -> Vec<Vec<(&'static str, String)>> {
    let since = charon_archive::time::format_ms(BASE + 800);
    vec![
        vec![("queue", "dlq-1".into())],
        vec![("queue", "dlq-1".into()), ("status", "PENDING".into())],
        vec![("queue", "dlq-2".into()), ("status", "SKIPPED".into())],
        vec![("queue", "dlq-0".into()), ("status", "REPLAYED".into())],
        vec![("queue", "dlq-0".into()), ("status", "FAILED".into())],
        vec![
            ("queue", "dlq-2".into()),
            ("status", "PENDING".into()),
            ("since", since.clone()),
        ],
        vec![
            ("queue", "dlq-1".into()),
            ("status", "PENDING".into()),
            ("original_queue", "orders".into()),
        ],
        vec![
            ("queue", "dlq-0".into()),
            ("status", "PENDING".into()),
            ("error", "failed 3".into()),
        ],
        vec![("status", "PENDING".into())],
        vec![
            ("original_queue", "billing".into()),
            ("status", "SKIPPED".into()),
        ],
        vec![("queue", "nothing".into()), ("status", "PENDING".into())],
    ]
}

const SORTS: &[Option<&str>] = &[
    None,
    Some("id"),
    Some("created_at"),
    Some("-created_at"),
    Some("-replay_count"),
];

/// Every filter × sort: total and pages 1, 2 and 6 of 15 against the plain sorted query.
fn check_pages(c: &mut dyn Conn, when: &str) {
    for pairs in filters() {
        let f = Filter::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).expect("filter");
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        for sort in SORTS {
            let order = order_by(*sort).expect("order");
            let all: Vec<i64> = c
                .query(
                    &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
                    &p,
                )
                .expect("plain")
                .iter()
                .map(|r| r[0].int())
                .collect();
            for page in [1u64, 2, 6] {
                let (recs, total) = ops::list(c, &f, *sort, page, 15).expect("list");
                assert_eq!(total, all.len() as i64, "total {pairs:?} {sort:?} ({when})");
                let want: Vec<i64> = all
                    .iter()
                    .copied()
                    .skip((page as usize - 1) * 15)
                    .take(15)
                    .collect();
                let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
                assert_eq!(have, want, "page {page} {pairs:?} sort={sort:?} ({when})");
            }
        }
    }
}

fn count(c: &mut dyn Conn, sql: &str) -> i64 {
    c.query(sql, &[]).expect("count")[0][0].int()
}

/// The id of every summary group's oldest (`MIN`) or newest (`MAX`) record (the smallest id on
/// a tie), through plain SQL.
fn bounds(c: &mut dyn Conn, agg: &str) -> Vec<i64> {
    let key = "vhost, queue, original_queue, reason, error_fingerprint, content_type, original_exchange, status";
    let same = key
        .split(", ")
        .map(|k| format!("(d.{k} = b.{k} OR (d.{k} IS NULL AND b.{k} IS NULL))"))
        .collect::<Vec<_>>()
        .join(" AND ");
    rows(
        c,
        &format!(
            "SELECT MIN(d.id) FROM dead_letters d JOIN (SELECT {key}, {agg}(created_at) AS t \
             FROM dead_letters GROUP BY {key}) b ON d.created_at = b.t AND {same} \
             GROUP BY b.vhost, b.queue, b.original_queue, b.reason, b.error_fingerprint, b.content_type, \
             b.original_exchange, b.status"
        ),
    )
    .iter()
    .map(|r| r[0].int())
    .collect()
}

/// A replay job over one queue's records: some replayed, some failed.
fn replay(c: &mut dyn Conn, queue: &str) {
    let f = Filter::from_pairs([("queue", queue)]).expect("filter");
    let (job, total) =
        jobs::create(c, &Selection::Filter(f), &json!({"note": "again"}), "carol").expect("job");
    assert!(total > 0);
    let spec = jobs::running(c)
        .expect("running")
        .into_iter()
        .find(|j| j.id == job)
        .expect("job running");
    let next = jobs::next(c, job, 60).expect("next");
    assert!(!next.is_empty());
    let results: Vec<(i64, Result<(), String>)> = next
        .iter()
        .enumerate()
        .map(|(k, r)| {
            let res = if k % 4 == 3 {
                Err("no route".to_string())
            } else {
                Ok(())
            };
            (r.id, res)
        })
        .collect();
    jobs::finish(c, &spec, &results).expect("finish");
    jobs::cancel(c, job, "carol").expect("cancel");
}

/// SQLite: the plan of the summary's bound lookup for every group reads
/// `dead_letters_group_bound`.
fn check_bound_plan(c: &mut dyn Conn) {
    let plan: Vec<String> = c
        .query(
            &format!(
                "EXPLAIN QUERY PLAN SELECT ({}) FROM dead_letter_groups AS r",
                sqlite_bound_lookup("r")
            ),
            &[],
        )
        .expect("explain")
        .iter()
        .filter_map(|r| r.last().map(Cell::text))
        .collect();
    assert!(
        plan.iter().any(|l| l.contains(BOUND_INDEX)),
        "bound lookup plan: {plan:?}"
    );
}

fn upgrade(url: &str, mut old: Box<dyn Conn>) {
    schema::migrate_to(old.as_mut(), 11).expect("schema 11");
    let first: Vec<NewRecord> = (0..400).map(|i| rec(i, "a")).collect();
    ops::insert_batch(old.as_mut(), &first).expect("batch on schema 11");
    old.exec(
        "UPDATE dead_letters SET status = 'SKIPPED', updated_at = created_at + 5 WHERE id % 10 = 3",
        &[],
    )
    .expect("old update");
    check_summary(old.as_mut(), "schema 11");
    let snapshot = |c: &mut dyn Conn| -> Vec<Vec<Cell>> {
        c.query(
            "SELECT id, stable_key, vhost, queue, original_queue, reason, error_fingerprint, content_type, \
             original_exchange, status, created_at, updated_at FROM dead_letters ORDER BY id",
            &[],
        )
        .expect("snapshot")
    };
    let before = snapshot(old.as_mut());
    let groups_before = rows(old.as_mut(), "SELECT * FROM dead_letter_groups");
    drop(old);

    let a = Archive::open(url).expect("open upgrades");
    a.with(|c| {
        assert_eq!(
            count(c, "SELECT MAX(version) FROM archive_migrations"),
            schema::latest()
        );
        assert!(schema::latest() >= 12);
        assert_eq!(snapshot(c), before, "records intact after migration 12");
        assert_eq!(
            rows(c, "SELECT * FROM dead_letter_groups"),
            groups_before,
            "summary unchanged by migration 12"
        );
        let index_names = match c.dialect() {
            Dialect::Sqlite => "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'dead_letters'",
            Dialect::Postgres => "SELECT indexname FROM pg_indexes WHERE tablename = 'dead_letters'",
        };
        let names: Vec<String> = rows(c, index_names).iter().map(|r| r[0].text()).collect();
        let (gone, kept) = match c.dialect() {
            Dialect::Sqlite => ("dead_letters_group", BOUND_INDEX),
            Dialect::Postgres => (BOUND_INDEX, "dead_letters_group_key"),
        };
        assert!(!names.iter().any(|n| n == gone), "{gone} in {names:?}");
        for kept in [kept, "dead_letters_queue", "dead_letters_queue_id"] {
            assert!(names.iter().any(|n| n == kept), "{kept} not in {names:?}");
        }
        if c.dialect() == Dialect::Sqlite {
            check_bound_plan(c);
        }
        check_pages(c, "migration 12");
        // More records (above the search indexer's watermark: it has not run), a redelivery.
        let more: Vec<NewRecord> = (350..700).map(|i| rec(i, "a")).collect();
        assert_eq!(ops::insert_batch(c, &more).expect("batch"), 300);
        check_summary(c, "a batch after migration 12");
        // Each group's oldest by the API's delete, newest by its skip.
        let oldest = bounds(c, "MIN");
        assert!(oldest.len() > 40, "groups: {}", oldest.len());
        ops::delete(c, &Selection::Ids(oldest), "dave", None).expect("delete");
        check_summary(c, "deleting every group's oldest");
        let newest = bounds(c, "MAX");
        ops::skip(c, &Selection::Ids(newest), "bob", "known").expect("skip");
        check_summary(c, "skipping every group's newest");
        check_pages(c, "delete and skip");
        for q in ["dlq-0", "dlq-2"] {
            replay(c, q);
            check_summary(c, &format!("a replay of {q}"));
        }
        // Edits (headers and body; no key column) and users' own SQL.
        for id in [5i64, 17, 29] {
            let e = Edit {
                payload: Some(b"fixed".to_vec()),
                headers: None,
                note: Some("fix".into()),
            };
            ops::edit(c, id, "alice", &e).expect("edit");
        }
        c.exec("DELETE FROM dead_letters WHERE id % 11 = 4", &[])
            .expect("user delete");
        check_summary(c, "a user's delete");
        c.exec(
            "UPDATE dead_letters SET original_queue = NULL, created_at = created_at + 1000 WHERE id % 6 = 2",
            &[],
        )
        .expect("user update");
        check_summary(c, "a user's update of original_queue and time");
        c.exec(
            "UPDATE dead_letters SET error_fingerprint = '' WHERE error_fingerprint IS NULL AND id % 3 = 0",
            &[],
        )
        .expect("user update");
        check_summary(c, "a user's update of the fingerprint NULL to empty");
        c.exec(
            "UPDATE dead_letters SET vhost = 'third', status = 'PENDING' WHERE id % 13 = 1",
            &[],
        )
        .expect("user update");
        check_summary(c, "a user's update of vhost and status");
        check_pages(c, "replays, edits and users' SQL");
        assert!(count(c, "SELECT COUNT(*) FROM dead_letters WHERE status = 'REPLAYED'") > 0);
        assert!(count(c, "SELECT COUNT(*) FROM dead_letters WHERE status = 'FAILED'") > 0);
        assert!(count(c, "SELECT COUNT(*) FROM dead_letters WHERE status = 'SKIPPED'") > 0);
        // Every group emptied record by record, oldest first (each delete a bound lookup).
        let order: Vec<i64> = c
            .query("SELECT id FROM dead_letters ORDER BY created_at, id", &[])
            .expect("ids")
            .iter()
            .map(|r| r[0].int())
            .collect();
        for chunk in order.chunks(97) {
            ops::delete(c, &Selection::Ids(chunk.to_vec()), "dave", None).expect("delete");
            check_summary(c, "deleting oldest first");
        }
        assert_eq!(count(c, "SELECT COUNT(*) FROM dead_letter_groups"), 0);
    });
}

#[test]
fn sqlite_migration_12_keeps_the_summary_and_pages_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let old = charon_archive::sqlite::Sqlite::open(&path).expect("sqlite");
    upgrade(&path.to_string_lossy(), Box::new(old));
}

#[test]
fn postgres_migration_12_keeps_the_summary_and_pages_exact() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    upgrade(&pg.url, Box::new(old));
}
