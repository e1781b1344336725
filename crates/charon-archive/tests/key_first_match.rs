//! An `error` list sorted by a group key whose first values hold no match (lead, stop 45,
//! docs/archive.md "Thirtieth round", `src/key_first_match.rs`). On both backends, 720 records
//! over two vhosts and six original queues, the needle `hot` only in `q3`…`q5` (and `cold` in
//! every queue, whose trigrams `hot` shares none of), indexed, then 72 more above the search
//! watermark, some of them `hot` in `q1`.
//! - `key_first_match::none_before`, for every value as `m`, both directions and filters with
//!   key terms and a vhost limit, says "none" exactly when plain SQL counts no match before `m`,
//!   and `none_at` exactly when it counts none at `m`;
//! - `key_first_value::page`, given exact estimates and a sample of the matches, answers the
//!   pages that lie in the first value holding a match (a sample that misses that value: when at
//!   most `key_first_value::LISTED_BEFORE` values precede the first it holds, which are listed),
//!   and since stop 47 may answer pages spanning it and the values after it; whatever it
//!   answers is plain SQL's page;
//! - `ops::list_capped` (its own walk, sample and estimates) gives plain SQL's pages.

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
use charon_archive::sql::{Conn, Param};
use charon_archive::{Archive, NewRecord, key_first_match, key_first_value, ops};

const CAP: u64 = 20;
const SIZE: u64 = 5;

fn rec(i: usize) -> NewRecord {
    let q = i % 6;
    // Above the watermark (i >= 720) a few `hot` records in q1, before every indexed match.
    let hot = q >= 3 || (i >= 720 && q == 1 && i % 4 == 1);
    NewRecord {
        stable_key: format!("fm:{i}"),
        vhost: if i % 5 == 1 { "v2".into() } else { "/".into() },
        queue: format!("dlq-{}", i % 2),
        original_queue: Some(format!("q{q}")),
        error_message: Some(format!(
            "order {i} failed: {} path",
            if hot { "hot" } else { "cold" }
        )),
        ..support::record(i)
    }
}

fn filters() -> Vec<Filter> {
    let f = |pairs: &[(&str, &str)]| Filter::from_pairs(pairs.iter().copied()).expect("filter");
    vec![
        f(&[("error", "hot path")]),
        f(&[("error", "hot"), ("queue", "dlq-1")]),
        // `q3`, before `q4` in the range, holds `hot` of dlq-1 only: the queue term decides.
        f(&[("error", "hot"), ("queue", "dlq-0")]),
        f(&[("error", "hot path")]).within(Some(vec!["/".into()])),
        f(&[("error", "cold")]),
    ]
}

fn count(c: &mut dyn Conn, sql: &str, p: &[Param]) -> u64 {
    c.query(sql, p).expect("count")[0][0].int() as u64
}

/// The values of `col` among the records of `f`'s key terms, in `ORDER BY col dir`.
fn values(c: &mut dyn Conn, f: &Filter, col: &str, dir: &str) -> Vec<String> {
    let mut keys = f.clone();
    keys.terms.retain(|k, _| k != "error");
    let (kc, kp) = keys.to_sql(c.dialect()).expect("keys");
    c.query(
        &format!("SELECT DISTINCT {col} FROM dead_letters WHERE {kc} ORDER BY {col} {dir}"),
        &kp,
    )
    .expect("values")
    .iter()
    .map(|r| r[0].text())
    .collect()
}

fn check_proofs(c: &mut dyn Conn, when: &str) {
    for f in filters() {
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        for dir in ["ASC", "DESC"] {
            let op = if dir == "ASC" { "<" } else { ">" };
            for m in values(c, &f, "original_queue", dir) {
                let mut q = p.clone();
                q.push(Param::from(m.as_str()));
                let before = count(
                    c,
                    &format!(
                        "SELECT COUNT(*) FROM dead_letters WHERE {cond} AND original_queue {op} ?"
                    ),
                    &q,
                );
                let got = key_first_match::none_before(c, &f, "original_queue", dir, &m, false)
                    .expect("proof");
                assert_eq!(
                    got,
                    Some(before == 0),
                    "{f:?} {dir} before {m} ({when}): plain SQL counts {before}"
                );
                let mut q = p.clone();
                q.push(Param::from(m.as_str()));
                let at = count(
                    c,
                    &format!(
                        "SELECT COUNT(*) FROM dead_letters WHERE {cond} AND original_queue = ?"
                    ),
                    &q,
                );
                let got = key_first_match::none_at(c, &f, "original_queue", &m).expect("at");
                assert_eq!(
                    got,
                    Some(at == 0),
                    "{f:?} at {m} ({when}): plain SQL counts {at}"
                );
            }
        }
    }
}

/// `f` with `col = v` added.
fn with(f: &Filter, col: &str, v: &str) -> Filter {
    let mut g = f.clone();
    g.terms.insert(col.to_string(), v.to_string());
    g
}

fn check_pages(c: &mut dyn Conn, when: &str) {
    for f in filters() {
        let (cond, p) = f.to_sql(c.dialect()).expect("cond");
        for sort in ["original_queue", "-original_queue"] {
            let order = order_by(Some(sort)).expect("order");
            let dir = if sort.starts_with('-') { "DESC" } else { "ASC" };
            let all = plain_pages::ids(
                c,
                &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
                &p,
            );
            // The first value holding a match, and how many it holds.
            let mut first = None;
            let listed = values(c, &f, "original_queue", dir);
            for v in listed.clone() {
                let (wc, wp) = with(&f, "original_queue", &v)
                    .to_sql(c.dialect())
                    .expect("within");
                let n = count(
                    c,
                    &format!("SELECT COUNT(*) FROM dead_letters WHERE {wc}"),
                    &wp,
                );
                if n > 0 {
                    first = Some((v, n));
                    break;
                }
            }
            let Some((first, held)) = first else { continue };
            // Samples: every match's value, and one that misses the first value.
            let every: Vec<Option<String>> =
                plain_pages::ids(c, &format!("SELECT id FROM dead_letters WHERE {cond}"), &p)
                    .iter()
                    .map(|id| {
                        c.query(
                            "SELECT original_queue FROM dead_letters WHERE id = ?",
                            &[Param::from(*id)],
                        )
                        .expect("value")[0][0]
                            .opt_text()
                    })
                    .collect();
            let missing: Vec<Option<String>> = every
                .iter()
                .filter(|v| v.as_deref() != Some(first.as_str()))
                .cloned()
                .collect();
            for (sample, name) in [(every, "every value"), (missing, "a sample without it")] {
                // The rule (`key_first_value::first_holding`): the summary's first value is tried
                // without a sample; else the first value the sample holds, `m`, at `at`: the values
                // up to it listed when at most `LISTED_BEFORE` precede it (the first holding a
                // match answers), else `m` once no match lies before it.
                let at = listed
                    .iter()
                    .position(|v| sample.contains(&Some(v.clone())));
                let found = listed[0] == first
                    || at.is_some_and(|at| {
                        at <= key_first_value::LISTED_BEFORE || listed[at] == first
                    });
                for page in 1..=4_u64 {
                    let offset = (page - 1) * SIZE;
                    let want: Vec<i64> = all
                        .iter()
                        .copied()
                        .skip(offset as usize)
                        .take(SIZE as usize)
                        .collect();
                    let what = format!("{f:?} {sort} page {page}, {name} ({when})");
                    let got = key_first_value::page(
                        c,
                        &f,
                        &order,
                        offset,
                        SIZE,
                        Some(CAP),
                        // Exact estimates: a value with no match is never "many".
                        &mut |c, g| {
                            let (gc, gp) = g.to_sql(c.dialect())?;
                            let n = c.query(
                                &format!("SELECT COUNT(*) FROM dead_letters WHERE {gc}"),
                                &gp,
                            )?[0][0]
                                .int();
                            Ok(Some(n as u64 * 10))
                        },
                        &mut |_, _, _| Ok(sample.clone()),
                        // The lists answer (`ops::list_capped` below takes the one-read ids).
                        &mut |_, _, _, _| Ok(None),
                        &mut |c, g, by, page, size, upto| {
                            ops::list_capped(c, g, Some(by), page, size, Some(upto))
                        },
                    )
                    .expect("page");
                    // The page within the value found answers; one spanning it and the values
                    // after it may too (stop 47), and then with plain SQL's page.
                    let answers = found && held >= offset + SIZE;
                    assert!(got.is_some() || !answers, "{what}: {first} holds {held}");
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
}

fn scenario(a: &Archive) {
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..720).map(rec).collect();
        ops::insert_batch(c, &recs).expect("insert");
    });
    indexer_wait::wait_caught_up(a);
    a.with(|c| {
        check_proofs(c, "indexed");
        check_pages(c, "indexed");
        let recs: Vec<NewRecord> = (720..792).map(rec).collect();
        ops::insert_batch(c, &recs).expect("burst");
        check_proofs(c, "72 above the watermark");
        check_pages(c, "72 above the watermark");
    });
}

#[test]
fn sqlite_no_match_before_the_first_sampled_value_makes_its_page() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a =
        Archive::open(&format!("sqlite://{}", dir.path().join("a.db").display())).expect("open");
    scenario(&a);
}

#[test]
fn postgres_no_match_before_the_first_sampled_value_makes_its_page() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    scenario(&a);
}

/// Record `i` of the large scenario: two original queues of 13,000 records each, `hot path` in
/// two of three records of `q1` and in none of `q0`.
fn big_rec(i: usize) -> NewRecord {
    let q = i % 2;
    NewRecord {
        stable_key: format!("fmb:{i}"),
        original_queue: Some(format!("q{q}")),
        error_message: Some(format!(
            "order {i} failed: {} path",
            if q == 1 && !i.is_multiple_of(3) {
                "hot"
            } else {
                "cold"
            }
        )),
        ..support::record(i)
    }
}

/// Pages 1–10 of 10 of `hot path` sorted by `original_queue` both ways, the `total` capped at
/// 100, equal plain SQL's.
fn check_big(c: &mut dyn Conn, when: &str) {
    let f = Filter::from_pairs([("error", "hot path")]).expect("filter");
    let (cond, p) = f.to_sql(c.dialect()).expect("cond");
    for sort in ["original_queue", "-original_queue"] {
        let order = order_by(Some(sort)).expect("order");
        let all = plain_pages::ids(
            c,
            &format!("SELECT id FROM dead_letters WHERE {cond} ORDER BY {order}"),
            &p,
        );
        for page in 1..=10_u64 {
            let want: Vec<i64> = all
                .iter()
                .copied()
                .skip(((page - 1) * 10) as usize)
                .take(10)
                .collect();
            let (items, _) =
                ops::list_capped(c, &f, Some(sort), page, 10, Some(100)).expect("list");
            let have: Vec<i64> = items.iter().map(|r| r.id).collect();
            assert_eq!(have, want, "{sort} page {page} ({when})");
        }
    }
}

/// A value of more than the driving set's 12,000 records (`q1`) holding the page: on SQLite its
/// first ids come from the needle's FTS5 candidates in rowid order and the edited records'
/// (`ops`'s `first_ids`, `key_copy::Split::page_ids`); `q0` before it is shown empty
/// (`none_at`). With records edited by a user's SQL at both ends (their FTS5 rows gone, listed
/// for a scan) and records above the search watermark. SQLite only: the read is SQLite's (and
/// PostgreSQL's indexer takes minutes over 26,000 records in a debug build).
fn big_scenario(a: &Archive) {
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..26_000).map(big_rec).collect();
        ops::insert_batch(c, &recs).expect("insert");
    });
    indexer_wait::wait_caught_up(a);
    a.with(|c| {
        check_big(c, "indexed");
        c.exec(
            "UPDATE dead_letters SET error_message = error_message || ' (edited)' \
             WHERE original_queue = 'q1' AND (id < 60 OR id > 25950)",
            &[],
        )
        .expect("edit");
        check_big(c, "edited at both ends");
        let recs: Vec<NewRecord> = (26_000..26_100).map(big_rec).collect();
        ops::insert_batch(c, &recs).expect("burst");
        check_big(c, "100 above the watermark");
    });
}

#[test]
fn sqlite_a_large_values_first_ids_come_from_the_candidates_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a =
        Archive::open(&format!("sqlite://{}", dir.path().join("a.db").display())).expect("open");
    big_scenario(&a);
}
