//! Migration 25 (lead, stop 42; docs/archive.md "Migration 25"): the header index's rows hold
//! every group-key column of their record (`vhost`, `original_exchange`, `reason`,
//! `error_fingerprint`, `content_type` beside migration 22's and 24's), so lists and `/groups`
//! of one header term with terms of any of those columns, by any of them, and under an API
//! user's vhost limit are answered from the index range alone. On both backends: an archive at
//! version 24 (its header index filled as version 24's indexer did) is upgraded, and then, right
//! after the upgrade, once the indexer caught up, after a burst above the watermark, after skips,
//! header edits, deletes and users' UPDATEs of every column, and caught up again: every header
//! row's columns equal its record's, the plans are offered for every such request, and the
//! answers — a list's total and pages in id order and sorted by columns the rows hold (the
//! page's ids from the rows alone), the groups with counts, oldest, newest,
//! order and greatest-id samples — equal those computed from plain SQL over the records.

#[path = "support/copy_scenario.rs"]
mod copy_scenario;
#[path = "support/groups_reference.rs"]
mod groups_reference;
#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/plain_pages.rs"]
mod plain_pages;
#[path = "support/record.rs"]
mod support;

use std::ops::Range;

use charon_archive::filter::Filter;
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::sql::Conn;
use charon_archive::{Archive, NewRecord, header_columns, header_groups, header_index, schema};
use groups_reference::{Samples, reference, same_groups};
use serde_json::json;

/// The columns migration 25 added.
const ADDED: &[&str] = &[
    "vhost",
    "original_exchange",
    "reason",
    "error_fingerprint",
    "content_type",
];

/// Records over two vhosts, with every added column varying (NULL for some).
fn rec(i: usize) -> NewRecord {
    NewRecord {
        stable_key: format!("hk25:{i}"),
        vhost: if i.is_multiple_of(4) { "other" } else { "/" }.into(),
        queue: if i.is_multiple_of(10) { "alpha" } else { "dlq" }.into(),
        original_queue: Some(format!("q{}", i % 3)),
        original_exchange: (!i.is_multiple_of(6)).then(|| format!("x{}", i % 2)),
        reason: Some(
            if i.is_multiple_of(5) {
                "expired"
            } else {
                "rejected"
            }
            .into(),
        ),
        error_fingerprint: (!i.is_multiple_of(9)).then(|| format!("f{}", i % 4)),
        content_type: i.is_multiple_of(3).then(|| "application/json".to_string()),
        headers: json!({"x-h": format!("v{}", i % 3), "x-n": i % 2}).to_string(),
        error_message: (!i.is_multiple_of(9)).then(|| format!("e{i}")),
        created_at: 1_700_000_000_000 + (i / 3) as i64 * 1000,
        ..support::record(i)
    }
}

fn insert(c: &mut dyn Conn, r: Range<usize>) {
    let recs: Vec<NewRecord> = r.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

/// Every header row's columns (all nine) equal its record's.
fn rows_match(c: &mut dyn Conn, when: &str) {
    let same = header_columns::COLUMNS
        .iter()
        .chain(&["created_at"])
        .map(|col| format!("h.{col} IS NOT DISTINCT FROM d.{col}"))
        .collect::<Vec<_>>()
        .join(" AND ");
    let r = c
        .query(
            &format!(
                "SELECT COUNT(*), COALESCE(SUM(CASE WHEN {same} THEN 0 ELSE 1 END), 0) \
                 FROM dead_letter_search_header AS h JOIN dead_letters AS d ON d.id = h.id"
            ),
            &[],
        )
        .expect("rows");
    assert!(r[0][0].int() > 0, "header rows ({when})");
    assert_eq!(
        r[0][1].int(),
        0,
        "header rows whose columns differ ({when})"
    );
}

/// A filter's terms and the vhost limit it runs under.
type Request = (Vec<(&'static str, &'static str)>, Option<Vec<String>>);

/// Filters of one header term and terms of the added columns, with the vhost limits they run
/// under (`None`: an administrator's request).
fn filters() -> Vec<Request> {
    let limits = [None, Some(vec!["/".to_string()]), Some(Vec::new())];
    let mut out = Vec::new();
    for h in [("header.x-h", "v0"), ("header.x-n", "1")] {
        for k in [
            vec![],
            vec![("reason", "rejected")],
            vec![("error_fingerprint", "f1")],
            vec![("vhost", "other")],
            vec![("original_exchange", "x1")],
            vec![("content_type", "application/json")],
            vec![("reason", "expired"), ("status", "PENDING")],
        ] {
            for l in &limits {
                let mut f = vec![h];
                f.extend(k.iter().copied());
                out.push((f, l.clone()));
            }
        }
    }
    out
}

/// `by` lists of the groups requests (each with every filter above).
const BYS: &[&str] = &[
    "original_queue,reason,error_fingerprint,status",
    "reason",
    "error_fingerprint",
    "vhost,content_type",
    "original_exchange",
];

fn check(c: &mut dyn Conn, when: &str) {
    rows_match(c, when);
    for (pairs, limit) in filters() {
        let f = Filter::from_pairs(pairs.iter().copied())
            .expect("filter")
            .within(limit.clone());
        let what = format!("{pairs:?} within {limit:?} ({when})");
        // A header term alone without a limit is migration 9's plan, not this one.
        let keyed = pairs.len() > 1 || limit.is_some();
        assert_eq!(
            header_columns::plan(c, &f).expect("plan").is_some(),
            keyed,
            "list plan offered {what}"
        );
        // Id order, and the sorts by a column the rows hold (the page from the rows alone).
        for sort in [
            None,
            Some("id"),
            Some("created_at"),
            Some("-created_at"),
            Some("original_queue"),
            Some("-reason"),
            Some("error_fingerprint"),
            Some("-vhost"),
        ] {
            plain_pages::assert_pages(c, &f, sort, &[1, 3], 25, &what);
        }
        for by in BYS {
            let cols: Vec<String> = by.split(',').map(str::to_string).collect();
            assert!(
                header_groups::plan(c, &f, &cols).expect("plan").is_some(),
                "groups plan offered by {by} {what}"
            );
            let want = reference(c, by, &f);
            let groups = ops::groups(c, Some(by), &f).expect("groups");
            same_groups(
                &groups,
                &want,
                Samples::GreatestId,
                &format!("by {by} {what}"),
            );
        }
    }
}

/// Skips, header edits, deletes, users' UPDATEs of every added column (NULLs made and filled),
/// a user's INSERT.
fn change(c: &mut dyn Conn) {
    let skip = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 4 = 1", &[]);
    ops::skip(c, &Selection::Ids(skip), "carol", "hk25").expect("skip");
    for id in plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 31 = 2", &[]) {
        let e = Edit {
            headers: Some(json!({"x-h": "v0", "x-n": 1})),
            ..Edit::default()
        };
        ops::edit(c, id, "carol", &e).expect("edit");
    }
    let del = plain_pages::ids(c, "SELECT id FROM dead_letters WHERE id % 17 = 3", &[]);
    ops::delete(c, &Selection::Ids(del), "carol", None).expect("delete");
    for sql in [
        "UPDATE dead_letters SET reason = 'expired', error_fingerprint = NULL WHERE id % 23 = 4",
        "UPDATE dead_letters SET vhost = 'other', content_type = 'text/plain' WHERE id % 13 = 5",
        "UPDATE dead_letters SET original_exchange = 'x1', error_fingerprint = 'f1' WHERE id % 11 = 1",
        "UPDATE dead_letters SET reason = NULL, vhost = '/' WHERE id % 19 = 6",
    ] {
        c.exec(sql, &[]).expect("user update");
    }
    copy_scenario::user_insert(c, r#"{"x-h":"v0","x-n":1}"#);
}

/// An archive at version 24 with 300 records, the first 200 indexed as version 24's indexer
/// does (written here with SQL), a user's UPDATE of the added columns before the upgrade,
/// opened by this build.
fn upgraded(url: &str, mut old: Box<dyn Conn>) -> Archive {
    schema::migrate_to(old.as_mut(), 24).expect("v24");
    insert(old.as_mut(), 0..300);
    let d = old.dialect();
    old.batch(&copy_scenario::search_fill_sql(d, 200))
        .expect("fill the search index");
    old.batch(&header_index::fill_sql_v9(d, "d.id <= 200"))
        .expect("fill the header index");
    let set = ["status", "queue", "original_queue", "created_at"]
        .iter()
        .map(|col| {
            format!(
                "{col} = (SELECT {col} FROM dead_letters AS d WHERE d.id = dead_letter_search_header.id)"
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    old.batch(&format!(
        "UPDATE dead_letter_search_header SET {set}; \
         UPDATE dead_letter_search_state SET watermark = 200; \
         UPDATE dead_letters SET reason = 'late', content_type = NULL WHERE id % 7 = 0"
    ))
    .expect("v24 index");
    drop(old);
    let a = Archive::open(url).expect("open v25");
    a.with(|c| {
        copy_scenario::assert_applied(c, 25);
        let all = c
            .query(
                "SELECT COUNT(*) FROM dead_letter_search_header WHERE id <= 200",
                &[],
            )
            .expect("rows")[0][0]
            .int();
        assert!(all > 0, "header rows");
        let copied = ADDED
            .iter()
            .map(|col| format!("h.{col} IS NOT DISTINCT FROM d.{col}"))
            .collect::<Vec<_>>()
            .join(" AND ");
        let n = c
            .query(
                &format!(
                    "SELECT COUNT(*) FROM dead_letter_search_header AS h \
                     JOIN dead_letters AS d ON d.id = h.id WHERE h.id <= 200 AND {copied}"
                ),
                &[],
            )
            .expect("copied")[0][0]
            .int();
        assert_eq!(n, all, "the upgrade copied the added columns");
        copy_scenario::assert_header_vacuumed(c);
    });
    a
}

const STEPS: copy_scenario::Steps<'static> = copy_scenario::Steps {
    check: &check,
    burst: &|c| insert(c, 300..450),
    change: &change,
};

#[test]
fn sqlite_header_key_columns_answer_lists_and_groups_of_every_key() {
    copy_scenario::on_sqlite(upgraded, &STEPS);
}

#[test]
fn postgres_header_key_columns_answer_lists_and_groups_of_every_key() {
    let Some(pg) = copy_scenario::on_postgres(upgraded, &STEPS) else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    a.with(|c| {
        let def = copy_scenario::header_pkey_def(c);
        assert!(
            def.contains(
                "INCLUDE (status, queue, original_queue, created_at, vhost, original_exchange, \
                 reason, error_fingerprint, content_type)"
            ),
            "{def}"
        );
    });
}
