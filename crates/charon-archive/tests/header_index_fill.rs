//! PostgreSQL's indexer fills the exact header index (migration 9) without `ON CONFLICT`
//! (docs/archive.md "Twelfth round"): every header row of every indexed record is there, once,
//! with the value the `header.NAME` filter compares; and a batch whose records already have a
//! row (inserted by hand here: a user's SQL) falls back to skipping it instead of failing, so the
//! indexer still catches up and the filter still finds every record.

#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod record;

use indexer_wait::wait_caught_up;

use charon_archive::filter::Filter;
use charon_archive::sql::Conn;
use charon_archive::{Archive, NewRecord, ops};

fn rec(i: usize) -> NewRecord {
    let mut headers = serde_json::json!({
        "x-a": format!("v{i}"),
        "x-n": i as i64,
        "x-b": i.is_multiple_of(2),
        "x-t": {"k": [1, "two"]},
        "x-null": null,
        "x-long": "l".repeat(300),
    });
    if i.is_multiple_of(5) {
        headers["x-five"] = serde_json::json!("yes");
    }
    NewRecord {
        stable_key: format!("hf:{i}"),
        headers: headers.to_string(),
        ..record::record(i)
    }
}

/// Header rows each record `i` should have: `x-a`, `x-n`, `x-b`, `x-t`, and `x-five` for every
/// fifth (JSON null and the 300-byte value have none).
fn rows_of(i: usize) -> i64 {
    4 + i64::from(i.is_multiple_of(5))
}

fn count(c: &mut dyn Conn, sql: &str) -> i64 {
    c.query(sql, &[]).expect("count")[0][0].int()
}

/// Every record's rows, each with the value `->>` gives, and the filter finds each record.
fn check(a: &Archive, n: usize, when: &str) {
    a.with(|c| {
        for (id, want) in c
            .query(
                "SELECT d.id, d.stable_key, (SELECT COUNT(*) FROM dead_letter_search_header h WHERE h.id = d.id) FROM dead_letters d ORDER BY d.id",
                &[],
            )
            .expect("rows")
            .iter()
            .map(|r| {
                let i: usize = r[1].text().trim_start_matches("hf:").parse().expect("key");
                ((r[0].int(), r[2].int()), rows_of(i))
            })
        {
            assert_eq!(id.1, want, "header rows of record {} ({when})", id.0);
        }
        let wrong = count(
            c,
            "SELECT COUNT(*) FROM dead_letter_search_header h JOIN dead_letters d ON d.id = h.id \
             WHERE (d.headers::jsonb ->> h.name) IS DISTINCT FROM h.value",
        );
        assert_eq!(wrong, 0, "values as the filter compares them ({when})");
        for i in [0, 1, 7, n - 1] {
            let f = Filter::from_pairs([("header.x-a", format!("v{i}").as_str())]).expect("filter");
            let (page, total) = ops::list(c, &f, None, 1, 10).expect("list");
            assert_eq!(total, 1, "header.x-a=v{i} ({when})");
            assert_eq!(page[0].message_id, Some(format!("m{i}")), "{when}");
        }
        let f = Filter::from_pairs([("header.x-five", "yes")]).expect("filter");
        assert_eq!(
            ops::list(c, &f, None, 1, 10).expect("list").1,
            n.div_ceil(5) as i64,
            "header.x-five=yes ({when})"
        );
    });
}

#[test]
fn postgres_indexer_fills_header_rows_once_and_survives_an_existing_row() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open");
    let n = 120;
    // Records above the watermark, and a row one of them will get, inserted before the indexer
    // can reach them (it indexes only while it holds the writer, which `with` holds here).
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..n).map(rec).collect();
        ops::insert_batch(c, &recs).expect("insert");
        let id = c
            .query("SELECT id FROM dead_letters WHERE stable_key = 'hf:7'", &[])
            .expect("id")[0][0]
            .int();
        let wm = count(c, "SELECT watermark FROM dead_letter_search_state");
        assert!(id > wm, "record 7 not indexed yet");
        c.exec(
            "INSERT INTO dead_letter_search_header (name, value, id) VALUES ('x-a', 'v7', ?)",
            &[id.into()],
        )
        .expect("row by hand");
    });
    wait_caught_up(&a);
    check(&a, n, "caught up over a row inserted by hand");
    // More records, indexed on the fast path (no existing rows).
    a.with(|c| {
        let recs: Vec<NewRecord> = (n..2 * n).map(rec).collect();
        ops::insert_batch(c, &recs).expect("insert");
    });
    wait_caught_up(&a);
    check(&a, 2 * n, "caught up");
}
