//! Migration 12 (`error_text`, eighteenth round): the `error` filter checked on the narrow copy
//! of the error texts. On SQLite and a real PostgreSQL, every `error` filter — alone and with
//! `status`, `queue` and a time range — answers exactly what the plain SQL answers (`total`,
//! pages 1 and 2 in four orders, `/groups` by status and by queue), and the copy holds exactly one
//! row per live record at or below the search watermark with that record's texts: right after the
//! upgrade from version 11 (records indexed and not), with the indexer behind and caught up, after
//! skips, a replay job, users' UPDATEs of the error texts (indexed records and not), deletes by
//! ids and by an `error` filter, retention, and records a user's SQL inserted.

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

use charon_archive::filter::{Filter, order_by};
use charon_archive::ops::{self, Selection};
use charon_archive::schema;
use charon_archive::sql::{Conn, Dialect, Param};
use charon_archive::{Archive, NewRecord};

const T0: i64 = 1_700_000_000_000;

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("e:{i}"),
        queue: format!("dlq-{}", i % 3),
        error_message: (!i.is_multiple_of(11)).then(|| {
            if i.is_multiple_of(7) {
                format!("Commande {i} refusée — cause {}", i % 10)
            } else {
                format!("Order {i} could not be processed: cause {}", i % 10)
            }
        }),
        error_stacktrace: i.is_multiple_of(3).then(|| {
            format!(
                "java.lang.IllegalStateException: cause {}\n\tat com.example.Orders.handle(Orders.java:{})",
                (i + 5) % 10,
                i % 50
            )
        }),
        created_at: T0 + i as i64 * 10,
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, ids: std::ops::Range<usize>) {
    let recs: Vec<NewRecord> = ids.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

/// The needles: many matches (`cause 5`, also in stack traces), a decoy-prone one, a selective
/// one, one only in stack traces, none, short ones (no trigram: every row of the copy checked),
/// a line break (the two columns are checked apart, never across them), a user's edit, and
/// characters beyond ASCII (on PostgreSQL any one character in migration 29's pattern).
const NEEDLES: &[&str] = &[
    "refusée — cause 3",
    "é",
    "e — c",
    "cause 5",
    "ause 5",
    "Order 123 could",
    "Orders.java:7)",
    "nothing like this",
    "a",
    "e 5",
    "processed: cause 5\njava",
    "edited by hand",
];

fn exact(d: Dialect) -> String {
    format!(
        "({} OR {})",
        d.contains("error_message"),
        d.contains("error_stacktrace")
    )
}

fn ids(c: &mut dyn Conn, sql: &str, p: &[Param]) -> Vec<i64> {
    c.query(sql, p)
        .expect("ids")
        .iter()
        .map(|r| r[0].int())
        .collect()
}

/// The copy: one row per live record at or below the watermark, with its two texts.
fn copy_sound(c: &mut dyn Conn, when: &str) {
    let r = c
        .query(
            "SELECT \
             (SELECT COUNT(*) FROM dead_letter_error_text e LEFT JOIN dead_letters d ON d.id = e.id \
              WHERE d.id IS NULL OR e.id > (SELECT watermark FROM dead_letter_search_state) \
              OR e.error_message IS DISTINCT FROM d.error_message \
              OR e.error_stacktrace IS DISTINCT FROM d.error_stacktrace), \
             (SELECT COUNT(*) FROM dead_letters d WHERE d.id <= (SELECT watermark FROM dead_letter_search_state) \
              AND NOT EXISTS (SELECT 1 FROM dead_letter_error_text e WHERE e.id = d.id))",
            &[],
        )
        .expect("copy");
    assert_eq!(
        (r[0][0].int(), r[0][1].int()),
        (0, 0),
        "stale/wrong and missing copy rows ({when})"
    );
}

fn check(c: &mut dyn Conn, when: &str) {
    copy_sound(c, when);
    let d = c.dialect();
    let mut matched = 0;
    for needle in NEEDLES {
        for extra in [
            vec![],
            vec![("status", "PENDING".to_string())],
            vec![("queue", "dlq-1".to_string())],
            vec![("since", (T0 + 3000).to_string())],
        ] {
            let mut pairs = vec![("error", needle.to_string())];
            pairs.extend(extra.clone());
            let f = Filter::from_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str()))).expect("f");
            let (cond, _) = f.to_sql(d).expect("cond");
            assert!(
                cond.contains("dead_letter_error_text"),
                "the filter reads the copy: {cond}"
            );
            // The plain SQL: the exact condition on the records, the other terms as always.
            let rest = Filter::from_pairs(extra.iter().map(|(k, v)| (*k, v.as_str()))).expect("f");
            let (rest_cond, mut p) = rest.to_sql(d).expect("rest");
            let plain = format!("{} AND {rest_cond}", exact(d));
            let mut pp: Vec<Param> = vec![(*needle).into(), (*needle).into()];
            pp.append(&mut p);
            let want_total = c
                .query(
                    &format!("SELECT COUNT(*) FROM dead_letters WHERE {plain}"),
                    &pp,
                )
                .expect("count")[0][0]
                .int();
            matched += want_total;
            for sort in [None, Some("id"), Some("created_at"), Some("-created_at")] {
                let order = order_by(sort).expect("order");
                let all = ids(
                    c,
                    &format!("SELECT id FROM dead_letters WHERE {plain} ORDER BY {order}"),
                    &pp,
                );
                for page in [1u64, 2] {
                    let (recs, total) = ops::list(c, &f, sort, page, 20).expect("list");
                    assert_eq!(total, want_total, "total {pairs:?} ({when})");
                    let want: Vec<i64> = all
                        .iter()
                        .copied()
                        .skip((page as usize - 1) * 20)
                        .take(20)
                        .collect();
                    let have: Vec<i64> = recs.iter().map(|r| r.id).collect();
                    assert_eq!(have, want, "page {page} {pairs:?} {sort:?} ({when})");
                }
            }
            for by in ["status", "queue"] {
                let mut want: Vec<(String, i64)> = c
                    .query(
                        &format!(
                            "SELECT {by}, COUNT(*) FROM dead_letters WHERE {plain} GROUP BY {by}"
                        ),
                        &pp,
                    )
                    .expect("groups")
                    .iter()
                    .map(|r| (r[0].text(), r[1].int()))
                    .collect();
                want.sort();
                let mut have: Vec<(String, i64)> = ops::groups(c, Some(by), &f)
                    .expect("groups")
                    .iter()
                    .map(|g| {
                        (
                            g[by].as_str().unwrap_or("").to_string(),
                            g["count"].as_i64().unwrap_or(-1),
                        )
                    })
                    .collect();
                have.sort();
                assert_eq!(have, want, "groups by {by} {pairs:?} ({when})");
            }
        }
    }
    assert!(matched > 500, "the needles match ({when})");
}

/// Skips, a replay job, users' UPDATEs of the error texts, deletes, retention, a user's INSERT.
fn change(c: &mut dyn Conn) {
    let skip = ids(c, "SELECT id FROM dead_letters WHERE id % 9 = 1", &[]);
    ops::skip(c, &Selection::Ids(skip), "carol", "q9s").expect("skip");
    let f = Filter::from_pairs([("queue", "dlq-2")]).expect("f");
    replay_step::replay_step(c, f, 60, 4);
    // API edits (body): the records' FTS5 rows go, they wait in `dead_letter_search_scan`.
    for id in ids(c, "SELECT id FROM dead_letters WHERE id % 31 = 2", &[]) {
        let e = ops::Edit {
            payload: Some(b"edited".to_vec()),
            ..ops::Edit::default()
        };
        ops::edit(c, id, "carol", &e).expect("edit");
    }
    // Error texts changed by a user's SQL (the API does not edit them): indexed records and not.
    c.exec(
        "UPDATE dead_letters SET error_message = 'edited by hand: cause 5' WHERE id % 13 = 2",
        &[],
    )
    .expect("edit message");
    c.exec(
        "UPDATE dead_letters SET error_stacktrace = NULL, error_message = NULL WHERE id % 19 = 3",
        &[],
    )
    .expect("clear");
    let del = ids(c, "SELECT id FROM dead_letters WHERE id % 17 = 4", &[]);
    ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
    let by_filter = Filter::from_pairs([("error", "cause 7"), ("queue", "dlq-0")]).expect("f");
    ops::delete(c, &Selection::Filter(by_filter), "carol", None).expect("delete by filter");
    ops::retention(c, Some(T0 + 500), None).expect("retention");
    copy_scenario::user_insert(c, r#"{}"#);
}

/// An archive at version 11 with 400 records, the first 250 indexed (the search index as the
/// indexer fills it, written here with SQL), then opened by this build.
fn upgraded(url: &str, mut old: Box<dyn Conn>) -> Archive {
    schema::migrate_to(old.as_mut(), 11).expect("v11");
    insert(old.as_mut(), 0..400);
    let fill = format!(
        "{}; UPDATE dead_letter_search_state SET watermark = 250",
        copy_scenario::search_fill_sql(old.dialect(), 250)
    );
    old.batch(&fill).expect("fill the v11 index");
    drop(old);
    let a = Archive::open(url).expect("open v12");
    a.with(|c| {
        let v = c
            .query("SELECT MAX(version) FROM archive_migrations", &[])
            .expect("version")[0][0]
            .int();
        assert_eq!(v, schema::latest());
        assert!(v >= 12);
        // The upgrade copied the indexed records' texts (the indexer may have moved on since).
        let n = c
            .query(
                "SELECT COUNT(*) FROM dead_letter_error_text WHERE id <= 250",
                &[],
            )
            .expect("copied")[0][0]
            .int();
        assert_eq!(n, 250);
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
fn sqlite_error_filter_on_the_copy_equals_the_plain_sql() {
    copy_scenario::on_sqlite(upgraded, &STEPS);
}

#[test]
fn postgres_error_filter_on_the_copy_equals_the_plain_sql() {
    let Some(pg) = copy_scenario::on_postgres(upgraded, &STEPS) else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    a.with(|c| {
        // A trigram index on the copy; the side table's `error` one dropped.
        let r = c
            .query(
                "SELECT (SELECT COUNT(*) FROM pg_indexes WHERE tablename = 'dead_letter_error_text' AND indexdef LIKE '%gin_trgm_ops%'), \
                 (SELECT COUNT(*) FROM pg_indexes WHERE indexname = 'dead_letter_search_error')",
                &[],
            )
            .expect("indexes");
        // One since migration 29 (`error_grams`, both texts).
        assert_eq!((r[0][0].int(), r[0][1].int()), (1, 0));
    });
}
