//! An `error` list sorted by a group key whose page lies in the key's first value (branch `k9b`,
//! docs/archive.md "Twenty-ninth round (branch `k9b`)", `src/key_first_value.rs`). On both
//! backends, 600 records over two vhosts, four original queues and three statuses, indexed, then
//! 60 more above the search watermark. For `error` filters (alone, with a key term, under a vhost
//! limit) sorted by `status`, `original_queue` and `queue` both ways, pages 1–4 of 5 with a cap of
//! 20: `key_first_value::page`, told every value is worth a try, answers exactly when the first
//! value, with the `SPANNED` values after it (stop 47), holds the page (plain SQL's counts of the
//! filter with each value's term) and then with plain SQL's page; and `ops::list_capped` (its own estimate) gives plain SQL's pages.

#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[allow(dead_code)]
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::{Filter, order_by};
use charon_archive::sql::Conn;
use charon_archive::{Archive, NewRecord, key_first_value, ops};

const CAP: u64 = 20;
const SIZE: u64 = 5;

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("fv:{i}"),
        vhost: if i % 5 == 1 { "v2".into() } else { "/".into() },
        queue: format!("dlq-{}", i % 3),
        original_queue: Some(format!("q{}", i % 4)),
        error_message: Some(format!("order {i} failed: cause {}", i % 3)),
        ..support::record(i)
    }
}

fn filters() -> Vec<Filter> {
    let f = |pairs: &[(&str, &str)]| Filter::from_pairs(pairs.iter().copied()).expect("filter");
    vec![
        f(&[("error", "cause 1")]),
        f(&[("error", "cause 2"), ("original_queue", "q1")]),
        f(&[("error", "order 1")]),
        f(&[("error", "cause 0")]).within(Some(vec!["/".into()])),
    ]
}

fn sorts() -> Vec<&'static str> {
    vec![
        "status",
        "-status",
        "original_queue",
        "-original_queue",
        "queue",
        "-queue",
    ]
}

fn check(c: &mut dyn Conn, when: &str) {
    for f in filters() {
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        for sort in sorts() {
            let order = order_by(Some(sort)).expect("order");
            let all = plain_pages::ids(
                c,
                &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
                &p,
            );
            // The first value in the order among the records of the key terms (here: with any
            // match or not, as the summary lists them).
            let col = sort.trim_start_matches('-');
            let mut keys = f.clone();
            keys.terms.retain(|k, _| k != "error");
            let (kc, kp) = keys.to_sql(c.dialect()).expect("keys");
            let dir = if sort.starts_with('-') { "DESC" } else { "ASC" };
            let values: Vec<String> = c
                .query(
                    &format!(
                        "SELECT DISTINCT {col} FROM dead_letters WHERE {kc} ORDER BY {col} {dir}"
                    ),
                    &kp,
                )
                .expect("values")
                .iter()
                .map(|r| r[0].text())
                .collect();
            let first = values[0].clone();
            // The matches of the first value and of the `SPANNED` values after it (stop 47: a
            // page past the first value goes on in those).
            let mut held = Vec::new();
            for v in values.iter().take(1 + key_first_value::SPANNED) {
                let mut within = f.clone();
                within.terms.insert(col.to_string(), v.clone());
                let (wc, wp) = within.to_sql(c.dialect()).expect("within");
                held.push(
                    plain_pages::ids(c, &format!("SELECT id FROM dead_letters WHERE {wc}"), &wp)
                        .len() as u64,
                );
            }
            let in_first = held[0];
            let in_spanned: u64 = held.iter().sum();
            for page in 1..=4_u64 {
                let offset = (page - 1) * SIZE;
                let want: Vec<i64> = all
                    .iter()
                    .copied()
                    .skip(offset as usize)
                    .take(SIZE as usize)
                    .collect();
                let what = format!("{f:?} {sort} page {page} ({when})");
                let got = key_first_value::page(
                    c,
                    &f,
                    &order,
                    offset,
                    SIZE,
                    Some(CAP),
                    &mut |_, _| Ok(Some(u64::MAX)),
                    &mut |_, _, _| Ok(Vec::new()),
                    &mut |_, _, _, _| Ok(None),
                    &mut |c, g, by, page, size, upto| {
                        ops::list_capped(c, g, Some(by), page, size, Some(upto))
                    },
                )
                .expect("page");
                // A filter with a term on the sorted column is sorted by id (one value): not tried.
                let holds = !f.terms.contains_key(col) && in_spanned >= offset + SIZE;
                assert_eq!(
                    got.is_some(),
                    holds,
                    "{what}: the first value {first} holds {in_first}, with the next {in_spanned}"
                );
                if let Some(items) = got {
                    let have: Vec<i64> = items.iter().map(|r| r.id).collect();
                    assert_eq!(have, want, "{what}");
                }
                let (items, _) =
                    ops::list_capped(c, &f, Some(sort), page, SIZE, Some(CAP)).expect("list");
                let have: Vec<i64> = items.iter().map(|r| r.id).collect();
                assert_eq!(have, want, "list {what}");
            }
        }
    }
}

fn scenario(a: &Archive) {
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..600).map(rec).collect();
        ops::insert_batch(c, &recs).expect("insert");
        for sql in [
            "UPDATE dead_letters SET status = 'SKIPPED' WHERE id % 7 = 2",
            "UPDATE dead_letters SET status = 'REPLAYED' WHERE id % 10 = 3",
        ] {
            c.exec(sql, &[]).expect("status");
        }
    });
    indexer_wait::wait_caught_up(a);
    a.with(|c| {
        check(c, "indexed");
        let recs: Vec<NewRecord> = (600..660).map(rec).collect();
        ops::insert_batch(c, &recs).expect("burst");
        check(c, "60 above the watermark");
    });
}

#[test]
fn sqlite_a_page_in_the_first_value_is_that_values_id_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a =
        Archive::open(&format!("sqlite://{}", dir.path().join("a.db").display())).expect("open");
    scenario(&a);
}

#[test]
fn postgres_a_page_in_the_first_value_is_that_values_id_order() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    scenario(&a);
}
