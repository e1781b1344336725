//! Migration 19 (`summary_seconds`, twenty-second round): PostgreSQL's group summary per second.
//! A database left at version 16 with records (NULL key columns, several seconds, times before
//! 1970 too) is upgraded: the table is filled equal to the records counted per second and group,
//! a ranged `/groups` and list total are answered from it equal to plain SQL, and a batch and a
//! delete after the upgrade keep it exact. On SQLite the migration is recorded and adds nothing.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod support;

use charon_archive::filter::{Filter, group_by};
use charon_archive::ops::{self, Selection};
use charon_archive::sql::{Cell, Conn};
use charon_archive::summary::{Keys, key_expr_of};
use charon_archive::{Archive, NewRecord, schema, summary_seconds};

fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("m19:{i}"),
        queue: format!("dlq-{}", i % 2),
        original_queue: (!i.is_multiple_of(3)).then(|| format!("q{}", i % 4)),
        reason: (!i.is_multiple_of(5)).then(|| "rejected".to_string()),
        // Seconds apart, a few before 1970 (the second is floored, not truncated).
        created_at: if i.is_multiple_of(11) {
            -1500 - i as i64 * 7
        } else {
            1_700_000_000_000 + i as i64 * 137
        },
        ..support::record(i)
    }
}

fn rows(c: &mut dyn Conn, sql: &str) -> Vec<Vec<Cell>> {
    c.query(sql, &[]).expect(sql)
}

fn check_table(c: &mut dyn Conn, when: &str) {
    let have = rows(
        c,
        "SELECT second, group_key, records FROM dead_letter_group_seconds ORDER BY 1, 2",
    );
    let want = rows(
        c,
        &format!(
            "SELECT FLOOR(created_at / 1000.0)::BIGINT, {}, COUNT(*) FROM dead_letters AS d \
             GROUP BY 1, 2 ORDER BY 1, 2",
            key_expr_of(Keys::V10, "d.")
        ),
    );
    assert!(want.len() > 10, "records in several seconds ({when})");
    assert_eq!(have, want, "summary per second ({when})");
}

fn check_answers(c: &mut dyn Conn, when: &str) {
    for (since, until) in [
        ("1700000001234", "1700000009000"),
        ("-3000", "1700000004500"),
    ] {
        let f = Filter::from_pairs([("since", since), ("until", until), ("queue", "dlq-1")])
            .expect("f");
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        let want = c
            .query(
                &format!("SELECT COUNT(*) FROM dead_letters WHERE {cond}"),
                &p,
            )
            .expect("count")[0][0]
            .int();
        assert!(want > 0, "matches ({when})");
        assert_eq!(
            summary_seconds::total(c, &f).expect("total"),
            Some(want),
            "total {since}..{until} ({when})"
        );
        let cols = group_by(Some("original_queue")).expect("by");
        let groups = summary_seconds::groups(c, &f, &cols)
            .expect("groups")
            .expect("answered from the table");
        let plain = c
            .query(
                &format!(
                    "SELECT original_queue, COUNT(*), MIN(created_at), MAX(created_at) FROM dead_letters \
                     WHERE {cond} GROUP BY original_queue ORDER BY 1"
                ),
                &p,
            )
            .expect("plain");
        let mut have: Vec<(Option<String>, i64, i64, i64)> = groups
            .iter()
            .map(|g| (g.values[0].clone(), g.count, g.oldest, g.newest))
            .collect();
        have.sort();
        let mut want: Vec<(Option<String>, i64, i64, i64)> = plain
            .iter()
            .map(|r| (r[0].opt_text(), r[1].int(), r[2].int(), r[3].int()))
            .collect();
        want.sort();
        assert_eq!(have, want, "groups {since}..{until} ({when})");
    }
}

#[test]
fn postgres_migration_19_fills_the_summary_per_second() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let mut old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    schema::migrate_to(&mut old, 16).expect("schema 16");
    let recs: Vec<NewRecord> = (0..300).map(rec).collect();
    ops::insert_batch(&mut old, &recs).expect("batch on schema 16");
    drop(old);

    let a = Archive::open(&pg.url).expect("open upgrades");
    a.with(|c| {
        let version = rows(c, "SELECT MAX(version) FROM archive_migrations")[0][0].int();
        assert_eq!(version, schema::latest());
        check_table(c, "upgraded");
        check_answers(c, "upgraded");
        let more: Vec<NewRecord> = (200..400).map(rec).collect();
        assert_eq!(ops::insert_batch(c, &more).expect("batch"), 100);
        let del: Vec<i64> = rows(c, "SELECT id FROM dead_letters WHERE id % 7 = 1")
            .iter()
            .map(|r| r[0].int())
            .collect();
        ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
        check_table(c, "a batch and a delete after the upgrade");
        check_answers(c, "a batch and a delete after the upgrade");
    });
}

#[test]
fn sqlite_migration_19_is_recorded_and_adds_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("a.db");
    let mut old = charon_archive::sqlite::Sqlite::open(&path).expect("sqlite");
    schema::migrate_to(&mut old, 16).expect("schema 16");
    let recs: Vec<NewRecord> = (0..50).map(rec).collect();
    ops::insert_batch(&mut old, &recs).expect("batch on schema 16");
    drop(old);
    let a = Archive::open(&path.to_string_lossy()).expect("open upgrades");
    a.with(|c| {
        let v = rows(c, "SELECT MAX(version) FROM archive_migrations")[0][0].int();
        assert_eq!(v, schema::latest());
        let t = rows(
            c,
            "SELECT COUNT(*) FROM sqlite_master WHERE name = 'dead_letter_group_seconds'",
        );
        assert_eq!(t[0][0].int(), 0);
        let f = Filter::from_pairs([("since", "1"), ("queue", "dlq-1")]).expect("f");
        assert!(summary_seconds::total(c, &f).expect("total").is_none());
    });
}
