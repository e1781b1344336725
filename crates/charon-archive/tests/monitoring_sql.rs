//! docs/archive.md's monitoring SQL (seed 002's queries), run as written on SQLite and on a real
//! PostgreSQL (a private cluster) over records of known statuses, ages and causes: every statement
//! runs on its dialect and answers what it says.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use bytes::Bytes;
use charon_archive::ops::{self, Selection};
use charon_archive::sql::{Cell, Dialect};
use charon_archive::{Archive, NewRecord};
use serde_json::{Value, json};

/// The statements of the doc's monitoring block, each with the dialect it is written for
/// (`None`: both), from the `-- SQLite:` / `-- PostgreSQL:` markers.
fn doc_statements() -> Vec<(Option<Dialect>, String)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/archive.md");
    let doc = std::fs::read_to_string(path).expect("docs/archive.md");
    let section = doc
        .split("## Seed 002's monitoring queries")
        .nth(1)
        .expect("the monitoring section");
    let block = section
        .split("```sql")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("its sql block");
    let mut out = Vec::new();
    let (mut only, mut cur) = (None, String::new());
    for line in block.lines() {
        let t = line.trim();
        if t == "-- SQLite:" {
            only = Some(Dialect::Sqlite);
        } else if t == "-- PostgreSQL:" {
            only = Some(Dialect::Postgres);
        } else if !t.starts_with("--") && !t.is_empty() {
            cur.push_str(line);
            cur.push('\n');
            if t.ends_with(';') {
                out.push((only.take(), std::mem::take(&mut cur)));
            }
        }
    }
    out
}

fn rec(key: &str, oq: &str, err: &str, age_days: i64) -> NewRecord {
    // A minute into the UTC day `age_days` ago: the per-day groups do not depend on the hour.
    const DAY: i64 = 86_400_000;
    let today = charon_archive::time::now_ms() / DAY * DAY;
    let at = today - age_days * DAY + 60_000;
    NewRecord {
        stable_key: key.into(),
        vhost: "/".into(),
        queue: "dlq".into(),
        original_queue: Some(oq.into()),
        original_exchange: Some("x".into()),
        original_routing_keys: vec![oq.into()],
        reason: Some("rejected".into()),
        death_count: 1,
        message_id: Some(key.into()),
        correlation_id: None,
        key: Some(key.into()),
        content_type: None,
        properties: json!({}).to_string(),
        headers: json!({}).to_string(),
        amqp_properties: Bytes::new(),
        payload: Bytes::from_static(b"x"),
        error_message: Some(err.into()),
        error_stacktrace: None,
        error_fingerprint: charon_archive::extract::fingerprint(Some(err), None),
        created_at: at,
    }
}

fn text(c: &Cell) -> Value {
    match c {
        Cell::Null => Value::Null,
        Cell::Int(i) => json!(i),
        other => json!(other.text()),
    }
}

/// Runs the doc's statements for `a`'s dialect; their rows as JSON arrays, in doc order.
fn run(a: &Archive) -> Vec<Vec<Vec<Value>>> {
    // orders: 3 today (2 PENDING, 1 SKIPPED), 1 two days ago (PENDING, the oldest), 1 ten days
    // ago (outside the 7 days); billing: 1 today (PENDING).
    let recs = vec![
        rec("o1", "orders", "Order 1 not found", 0),
        rec("o2", "orders", "Order 2 not found", 0),
        rec("o3", "orders", "Timeout after 30s", 0),
        rec("o4", "orders", "Order 4 not found", 2),
        rec("o5", "orders", "Order 5 not found", 10),
        rec("b1", "billing", "Card declined", 0),
    ];
    a.with(|c| {
        ops::insert_batch(c, &recs).expect("insert");
        let (items, _) = ops::list(
            c,
            &charon_archive::Filter::from_pairs([("key", "o3")]).expect("filter"),
            None,
            1,
            10,
        )
        .expect("list");
        ops::skip(c, &Selection::Ids(vec![items[0].id]), "op", "known").expect("skip");
        let d = c.dialect();
        doc_statements()
            .into_iter()
            .filter(|(only, _)| only.is_none_or(|o| o == d))
            .map(|(_, sql)| {
                let sql = sql.trim().trim_end_matches(';').to_string();
                let rows = match d {
                    Dialect::Sqlite => c.query(&sql, &[]),
                    // As written; wrapped only so that every column (dates too) comes back as text.
                    Dialect::Postgres => c.query(
                        &format!(
                            "SELECT CAST((SELECT json_agg(e.value ORDER BY e.ord) FROM json_each(row_to_json(t)) WITH ORDINALITY AS e(key, value, ord)) AS TEXT) FROM ({sql}) t"
                        ),
                        &[],
                    ),
                }
                .unwrap_or_else(|e| panic!("{d:?} could not run\n{sql}\n: {e}"));
                rows.iter()
                    .map(|r| match d {
                        Dialect::Sqlite => r.iter().map(text).collect(),
                        Dialect::Postgres => {
                            // The row's columns, in order.
                            let v: Value = serde_json::from_str(&r[0].text()).expect("json");
                            v.as_array().cloned().unwrap_or_default()
                        }
                    })
                    .collect()
            })
            .collect()
    })
}

fn check(results: &[Vec<Vec<Value>>]) {
    assert_eq!(results.len(), 4, "four queries for the dialect");
    // Counts by status.
    let mut by_status: Vec<(String, i64)> = results[0]
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap_or("").into(),
                r[1].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    by_status.sort();
    assert_eq!(
        by_status,
        vec![("PENDING".into(), 5), ("SKIPPED".into(), 1)]
    );
    // Failure rate per original queue per day over 7 days: orders today (3, 2 unresolved),
    // orders two days ago (1, 1), billing today (1, 1); the 10-day-old one is out.
    let per_day: Vec<(String, i64, i64)> = results[1]
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap_or("").into(),
                r[2].as_i64().unwrap_or(-1),
                r[3].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(
        per_day,
        vec![
            ("orders".into(), 1, 1),
            ("billing".into(), 1, 1),
            ("orders".into(), 3, 2)
        ],
        "{:?}",
        results[1]
    );
    // Oldest pending first.
    let oldest: Vec<&str> = results[2]
        .iter()
        .map(|r| r[3].as_str().unwrap_or(""))
        .collect();
    assert_eq!(oldest[0], "Order 5 not found");
    assert_eq!(oldest[1], "Order 4 not found");
    assert_eq!(oldest.len(), 5);
    // Top causes of pending records: "Order # not found" (4), "Card declined" (1).
    assert_eq!(results[3][0][2].as_i64(), Some(4));
    assert_eq!(results[3].len(), 2);
}

#[test]
fn monitoring_sql_runs_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = Archive::open(&dir.path().join("archive.db").to_string_lossy()).expect("open");
    check(&run(&a));
}

#[test]
fn monitoring_sql_runs_on_postgres() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    check(&run(&a));
}
