//! A sorted group-key value read as a set of statuses (branch `k9b`, docs/archive.md
//! "Twenty-ninth round (branch `k9b`)", `src/pure_status.rs`). On both backends, 600 records
//! over two vhosts and three original queues: in `qa` each fingerprint has statuses of its own
//! (`f1` PENDING and SKIPPED, `f2` REPLAYED), in `qc` the NULL fingerprint is SKIPPED and `f4`
//! PENDING, in `qb` both fingerprints share PENDING and SKIPPED (so `f1` spans `qa` and `qb`,
//! and `qa`'s statuses hold only `f1` and `f2`). For every key-term filter, every group key and
//! every value: when `pure_status::condition` answers, its condition (the filter's or the
//! value's term with `status IN (…)`) selects exactly the filter's records holding the value
//! (plain SQL's ids), and it answers for the values built so, both ways; and pages sorted by a group key (deep ones, both ways) and the `total`
//! equal plain SQL's.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::Filter;
use charon_archive::sql::{Conn, Param};
use charon_archive::{Archive, NewRecord, ops};

const KEYS: &[&str] = &[
    "vhost",
    "queue",
    "original_queue",
    "reason",
    "error_fingerprint",
    "status",
];

fn rec(i: usize) -> NewRecord {
    let oq = ["qa", "qb", "qc"][i % 3];
    NewRecord {
        stable_key: format!("ps:{i}"),
        vhost: if i % 7 == 1 { "v2".into() } else { "/".into() },
        queue: format!("dlq-{}", i % 2),
        original_queue: (!i.is_multiple_of(29)).then(|| oq.to_string()),
        reason: Some(["rejected", "expired"][i % 2].to_string()),
        error_fingerprint: match oq {
            "qa" => Some(
                if (i / 3).is_multiple_of(2) {
                    "f1"
                } else {
                    "f2"
                }
                .to_string(),
            ),
            "qb" => Some(if i < 300 { "f1" } else { "f3" }.to_string()),
            _ => (!i.is_multiple_of(4)).then(|| "f4".to_string()),
        },
        ..support::record(i)
    }
}

fn filters() -> Vec<Filter> {
    let f = |pairs: &[(&str, &str)]| Filter::from_pairs(pairs.iter().copied()).expect("filter");
    vec![
        f(&[]),
        f(&[("original_queue", "qa")]),
        f(&[("original_queue", "qb")]),
        f(&[("original_queue", "qc")]),
        f(&[("original_queue", "qa"), ("reason", "expired")]),
        f(&[("status", "PENDING")]),
        f(&[("original_queue", "qa")]).within(Some(vec!["/".into()])),
        f(&[("original_queue", "qc")]).within(Some(vec!["v2".into()])),
        f(&[("error_fingerprint", "f1")]),
        f(&[("error_fingerprint", "f1")]).within(Some(vec!["/".into()])),
    ]
}

/// Every (column, value) whose condition is built to hold: (filter index, column, value).
fn must_answer() -> Vec<(usize, &'static str, Option<&'static str>)> {
    vec![
        (1, "error_fingerprint", Some("f1")),
        (1, "error_fingerprint", Some("f2")),
        (3, "error_fingerprint", None),
        (3, "error_fingerprint", Some("f4")),
        (4, "error_fingerprint", Some("f2")),
        (6, "error_fingerprint", Some("f1")),
        // The other way: `qa`'s PENDING and SKIPPED records all hold `f1`.
        (8, "original_queue", Some("qa")),
        (9, "original_queue", Some("qa")),
    ]
}

fn ids(c: &mut dyn Conn, cond: &str, p: &[Param]) -> Vec<i64> {
    plain_pages::ids(
        c,
        &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY id"),
        p,
    )
}

/// `pure_status::condition` is exact wherever it answers, and answers for `must` (as
/// [`must_answer`]).
fn assert_conditions(c: &mut dyn Conn, must: &[(usize, &str, Option<&str>)]) {
    for (n, f) in filters().iter().enumerate() {
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        for col in KEYS {
            let values: Vec<Option<String>> = c
                .query(
                    &format!("SELECT DISTINCT {col} FROM dead_letters WHERE {cond}"),
                    &p,
                )
                .expect("values")
                .iter()
                .map(|r| r[0].opt_text())
                .collect();
            for v in values {
                let got =
                    charon_archive::pure_status::condition(c, f, col, v.as_deref(), &cond, &p)
                        .expect("condition");
                let wanted = must
                    .iter()
                    .any(|(i, k, w)| *i == n && k == col && *w == v.as_deref());
                assert!(
                    got.is_some() || !wanted,
                    "{f:?} {col} = {v:?}: the statuses hold only this value"
                );
                let Some((sc, sp)) = got else { continue };
                let (is_value, mut vp) = match &v {
                    Some(v) => (format!("{col} = ?"), vec![Param::from(v.as_str())]),
                    None => (format!("{col} IS NULL"), Vec::new()),
                };
                let mut p1 = p.clone();
                p1.append(&mut vp);
                let want = ids(c, &format!("({cond}) AND {is_value}"), &p1);
                let have = ids(c, &sc, &sp);
                assert_eq!(have, want, "{f:?} {col} = {v:?} as {sc}");
            }
        }
    }
}

fn assert_sorted_pages(c: &mut dyn Conn) {
    for f in filters() {
        for col in ["error_fingerprint", "original_queue", "queue", "reason"] {
            for sort in [col.to_string(), format!("-{col}")] {
                plain_pages::assert_pages(
                    c,
                    &f,
                    Some(&sort),
                    &[1, 2, 3, 5, 8, 13, 21, 34, 60, 200],
                    3,
                    &format!("{f:?}"),
                );
            }
        }
    }
}

fn scenario(a: &Archive) {
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..600).map(rec).collect();
        ops::insert_batch(c, &recs).expect("insert");
        // Statuses by SQL, as the API's replays and skips change them (the summary's triggers
        // count each status).
        for sql in [
            "UPDATE dead_letters SET status = 'REPLAYED' WHERE original_queue = 'qa' AND error_fingerprint = 'f2'",
            "UPDATE dead_letters SET status = 'SKIPPED' WHERE original_queue = 'qa' AND error_fingerprint = 'f1' AND id % 4 = 0",
            "UPDATE dead_letters SET status = 'SKIPPED' WHERE original_queue = 'qb' AND id % 5 = 0",
            "UPDATE dead_letters SET status = 'SKIPPED' WHERE original_queue = 'qc' AND error_fingerprint IS NULL",
        ] {
            c.exec(sql, &[]).expect("status");
        }
        assert_conditions(c, &must_answer());
        assert_sorted_pages(c);
        // One `qa` record of `f1` replayed: `f1` and `f2` then share REPLAYED in `qa`, and `f1`
        // spans `qb` too, so `f1` is neither way a set of statuses; `f2` still is the other way
        // (every `f2` record is a REPLAYED one of `qa`).
        c.exec(
            "UPDATE dead_letters SET status = 'REPLAYED' WHERE id = \
             (SELECT MIN(id) FROM dead_letters WHERE original_queue = 'qa' AND error_fingerprint = 'f1')",
            &[],
        )
        .expect("replay one");
        let f = Filter::from_pairs([("original_queue", "qa")]).expect("filter");
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        let at = |c: &mut dyn Conn, v: &str| {
            charon_archive::pure_status::condition(c, &f, "error_fingerprint", Some(v), &cond, &p)
                .expect("condition")
        };
        let f1 = at(c, "f1");
        assert!(f1.is_none(), "f1 shares REPLAYED: {f1:?}");
        let f2 = at(c, "f2");
        assert!(
            f2.as_ref().is_some_and(|(sc, _)| sc.starts_with("error_fingerprint = ?")),
            "f2 the other way: {f2:?}"
        );
        let qc: Vec<_> = must_answer().into_iter().filter(|m| m.0 == 3).collect();
        assert_conditions(c, &qc);
        assert_sorted_pages(c);
    });
}

#[test]
fn sqlite_a_value_of_its_own_statuses_is_read_by_status() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a =
        Archive::open(&format!("sqlite://{}", dir.path().join("a.db").display())).expect("open");
    scenario(&a);
}

#[test]
fn postgres_a_value_of_its_own_statuses_is_read_by_status() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    scenario(&a);
}
