//! Migration 7 (the trigram search index, SQLite): the `error`, `body` and `header.NAME` filters
//! return exactly the records a scan finds — on an archive upgraded from version 6, while the
//! background indexer is behind (records above its watermark) and once it caught up, after edits
//! (body and headers), deletes by ids and by filter, and retention; for needles of one, two and
//! more characters, non-ASCII ones, one spanning stack-trace lines, header values of each type
//! and non-UTF-8 bodies. The indexer's own batches are also driven by hand (idempotent resume).

#[path = "support/indexer_wait.rs"]
mod indexer_wait;
#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod record;

use std::time::Duration;

use indexer_wait::{wait_caught_up, watermark};

use bytes::Bytes;
use charon_archive::filter::Filter;
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::sql::{Conn, Dialect, Param};
use charon_archive::{Archive, NewRecord, indexer, schema, search_index};

const TRACE: &str = "java.lang.IllegalStateException: boom\n\tat com.example.Orders.handle(Orders.java:42)\n\tat org.springframework.Listener.invoke(Listener.java:1651)";

fn rec(i: usize) -> NewRecord {
    let error_message = match i % 5 {
        0 => Some(format!("Order {i} could not be processed (100% _done_)")),
        1 => Some("Zahlung fehlgeschlagen: Kundenkonto gesperrt (Ü)".to_string()),
        2 => None,
        3 => Some("注文が見つかりません".to_string()),
        _ => Some("ab".to_string()),
    };
    let error_stacktrace = i.is_multiple_of(3).then(|| TRACE.to_string());
    let payload = match i % 4 {
        0 => Bytes::from(format!("{{\"order\": {i}, \"note\": \"grüße\"}}")),
        1 => Bytes::from(vec![0xff, 0xfe, b'a', b'b', b'c', 0x00, b'x', b'y', b'z']),
        2 => Bytes::from_static(b"plain body abc"),
        _ => Bytes::from_static(b""),
    };
    let mut headers = serde_json::json!({
        "x-n": (i % 7) as i64,
        "x-b": i.is_multiple_of(2),
        "x-s": if i.is_multiple_of(3) { "héllo wörld".to_string() } else { format!("v{i}") },
        "x-f": 1.5,
    });
    if i.is_multiple_of(11) {
        // A value spanning lines, one of them another header's `NAME=value` line (PostgreSQL's
        // exact line index, migration 8, finds it as a candidate the filter must drop), and an
        // empty value.
        headers["x-m"] = serde_json::json!("a\nx-s=v1");
        headers["x-e"] = serde_json::json!("");
    }
    if i.is_multiple_of(13) {
        // Too long for the exact header index (migration 9: candidates and re-check instead),
        // a JSON null (no value to compare), and a nested table (compared as JSON text).
        headers["x-long"] = serde_json::json!(long_value(i));
        headers["x-null"] = serde_json::Value::Null;
        headers["x-t"] = serde_json::json!({"k": [1, "two"]});
    }
    let headers = headers.to_string();
    NewRecord {
        stable_key: format!("s:1:{i}"),
        queue: if i.is_multiple_of(2) {
            "dlq-a"
        } else {
            "dlq-b"
        }
        .into(),
        error_message,
        error_stacktrace,
        payload,
        headers,
        ..record::record(i)
    }
}

/// Inserts the records `rec(i)` for `ids` in one batch.
fn insert_records(c: &mut dyn Conn, ids: std::ops::Range<usize>) {
    let recs: Vec<NewRecord> = ids.map(rec).collect();
    ops::insert_batch(c, &recs).expect("insert");
}

/// A header value longer than the exact header index holds.
fn long_value(i: usize) -> String {
    format!(
        "{}-{}",
        "L".repeat(charon_archive::header_index::MAX_BYTES),
        i % 2
    )
}

/// (filter key, needle, the scan's SQL condition, its parameters).
fn cases(d: Dialect) -> Vec<(String, String, String, Vec<Param>)> {
    let mut out = Vec::new();
    let pg = d == Dialect::Postgres;
    for n in [
        "a",
        "ab",
        "é",
        "Ü",
        "見つ",
        "見つか",
        "Order 1",
        "order 1",
        "timeout",
        "\n\tat org.spring",
        "Orders.java:42)",
        "nothing like this",
        // LIKE's wildcards and escape, literal in the needle (PostgreSQL counts an error-only
        // filter from the side table's LIKE without re-check: a wildcard left unescaped would
        // count "d not" for "d_not").
        "100% _done_",
        "d_not",
        "1%could",
        "0\\%",
    ] {
        out.push((
            "error".into(),
            n.to_string(),
            format!(
                "({} OR {})",
                d.contains("error_message"),
                d.contains("error_stacktrace")
            ),
            vec![n.into(), n.into()],
        ));
    }
    for n in [
        "a",
        "ab",
        "abc",
        "xyz",
        "grüße",
        "\"order\": 1",
        "plain",
        "body abc",
        "zzzz",
    ] {
        out.push((
            "body".into(),
            n.to_string(),
            d.bytes_contain("payload"),
            vec![Param::Bytes(n.as_bytes().to_vec())],
        ));
    }
    for (k, v) in [
        ("x-n", "3"),
        ("x-n", "10"),
        ("x-b", "true"),
        ("x-b", "false"),
        ("x-s", "héllo wörld"),
        ("x-s", "v1"),
        ("x-s", "v11"),
        ("x-f", "1.5"),
        ("x-missing", "1"),
        ("x-m", "a\nx-s=v1"),
        ("x-m", "a"),
        ("x-e", ""),
        ("x-s", "edited wert"),
        ("x-n", "99"),
        ("x-null", "null"),
        ("x-null", ""),
        ("x-t", "{\"k\":[1,\"two\"]}"),
        ("x-t", "{\"k\": [1, \"two\"]}"),
    ] {
        header_case(&mut out, pg, k, v);
    }
    let long = long_value(1);
    header_case(&mut out, pg, "x-long", &long);
    out
}

fn header_case(out: &mut Vec<(String, String, String, Vec<Param>)>, pg: bool, k: &str, v: &str) {
    {
        out.push((
            format!("header.{k}"),
            v.to_string(),
            if pg {
                "(headers::jsonb ->> ?) = ?".to_string()
            } else {
                "(SELECT CASE j.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE CAST(j.value AS TEXT) END FROM json_each(headers) AS j WHERE j.key = ?) = ?".into()
            },
            vec![k.into(), v.into()],
        ));
    }
}

fn ids(c: &mut dyn Conn, sql: &str, p: &[Param]) -> Vec<i64> {
    let mut v: Vec<i64> = c
        .query(sql, p)
        .expect("scan")
        .iter()
        .map(|r| r[0].int())
        .collect();
    v.sort_unstable();
    v
}

fn check(a: &Archive, when: &str) {
    a.with(|c| {
        let mut matched = 0;
        let d = c.dialect();
        for (key, needle, cond, p) in cases(d) {
            // PostgreSQL text holds no NUL: its filter on such a needle is not comparable here.
            if d == Dialect::Postgres && key != "body" && needle.contains('\0') {
                continue;
            }
            for queue in [None, Some("dlq-b")] {
                let mut sql = format!("SELECT id FROM dead_letters WHERE {cond}");
                let mut p = p.clone();
                let mut pairs = vec![(key.as_str(), needle.as_str())];
                if let Some(q) = queue {
                    sql.push_str(" AND queue = ?");
                    p.push(q.into());
                    pairs.push(("queue", q));
                }
                let want = ids(c, &sql, &p);
                matched += want.len();
                let f = Filter::from_pairs(pairs).expect("filter");
                let (page, total) = ops::list(c, &f, None, 1, 1000).expect("list");
                let mut have: Vec<i64> = page.iter().map(|r| r.id).collect();
                have.sort_unstable();
                assert_eq!(have, want, "{key}={needle:?} queue={queue:?} ({when})");
                assert_eq!(total, want.len() as i64, "total {key}={needle:?} ({when})");
                let (page, _) = ops::list(c, &f, None, 1, 3).expect("list");
                let newest: Vec<i64> = want.iter().rev().take(3).copied().collect();
                assert_eq!(
                    page.iter().map(|r| r.id).collect::<Vec<_>>(),
                    newest,
                    "{when}"
                );
                // Deeper pages, newest and oldest first (the header index's merged parts).
                let (page, _) = ops::list(c, &f, None, 2, 3).expect("list");
                let second: Vec<i64> = want.iter().rev().skip(3).take(3).copied().collect();
                let ids: Vec<i64> = page.iter().map(|r| r.id).collect();
                assert_eq!(ids, second, "page 2 {key}={needle:?} ({when})");
                let (page, _) = ops::list(c, &f, Some("id"), 2, 3).expect("list");
                let second: Vec<i64> = want.iter().skip(3).take(3).copied().collect();
                let ids: Vec<i64> = page.iter().map(|r| r.id).collect();
                assert_eq!(ids, second, "oldest page 2 {key}={needle:?} ({when})");
                let groups = ops::groups(c, Some("queue"), &f).expect("groups");
                let counted: i64 = groups
                    .iter()
                    .map(|g| g["count"].as_i64().unwrap_or(0))
                    .sum();
                assert_eq!(
                    counted,
                    want.len() as i64,
                    "groups {key}={needle:?} ({when})"
                );
            }
        }
        assert!(matched > 100, "the cases match something ({when})");
        header_rows_sound(c, when);
    });
}

/// Migration 9's rows: only for live records at or below the watermark and not waiting to be
/// indexed again, each one the value the filter compares for that header.
fn header_rows_sound(c: &mut dyn Conn, when: &str) {
    let field = c.dialect().json_field("d.headers").replace('?', "h.name");
    let bad = c
        .query(
            &format!(
                "SELECT COUNT(*) FROM dead_letter_search_header h LEFT JOIN dead_letters d ON d.id = h.id \
                 WHERE d.id IS NULL OR h.id > (SELECT watermark FROM dead_letter_search_state) \
                 OR h.id IN (SELECT id FROM dead_letter_search_scan) OR NOT ({field} = h.value)"
            ),
            &[],
        )
        .expect("header rows")[0][0]
        .int();
    assert_eq!(bad, 0, "stale or wrong header index rows ({when})");
}

/// Runs `test` on a fresh SQLite archive file: its URL and a connection at the oldest version.
fn on_sqlite(test: fn(&str, Box<dyn Conn>)) {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("archive.db");
    let old = charon_archive::sqlite::Sqlite::open(&path).expect("open");
    test(&format!("sqlite://{}", path.display()), Box::new(old));
}

/// Runs `test` on a private PostgreSQL cluster (skipped where none can start).
fn on_postgres(test: fn(&str, Box<dyn Conn>)) {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    test(&pg.url, Box::new(old));
}

#[test]
fn sqlite_text_filters_exact_through_the_search_index() {
    on_sqlite(scenario);
}

#[test]
fn postgres_text_filters_exact_through_the_search_index() {
    on_postgres(scenario);
}

/// Migration 8 over an archive at version 7 whose search index is filled: the header lines'
/// index is built over the existing side table, and the filters (`header.NAME` through it) return
/// exactly the scan's rows, then and after new records were indexed.
#[test]
fn postgres_upgrade_from_version_7_header_lines() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let mut old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    schema::migrate_to(&mut old, 7).expect("v7");
    insert_records(&mut old, 0..300);
    // The side table as version 7's indexer fills it (same texts), the watermark at the top.
    // (`rec`'s one non-UTF-8 body as the indexer decodes it: lossily, NUL as U+FFFD.)
    old.batch(
        r#"INSERT INTO dead_letter_search (id, error, body, headers)
         SELECT id, concat_ws(E'\n', error_message, error_stacktrace),
           CASE WHEN payload = '\xfffe6162630078797a'::bytea THEN E'\uFFFD\uFFFDabc\uFFFDxyz'
                ELSE convert_from(payload, 'UTF8') END,
           COALESCE((SELECT string_agg(j.key || '=' || (j.value #>> '{}'), E'\n') FROM jsonb_each(headers::jsonb) AS j), '')
         FROM dead_letters;
         UPDATE dead_letter_search_state SET watermark = (SELECT MAX(id) FROM dead_letters)"#,
    )
    .expect("fill v7 index");
    drop(old);
    let a = Archive::open(&pg.url).expect("open v8");
    a.with(|c| {
        let v = c
            .query("SELECT MAX(version) FROM archive_migrations", &[])
            .expect("version")[0][0]
            .int();
        assert_eq!(v, schema::latest());
        let n = c
            .query(
                "SELECT COUNT(*) FROM pg_indexes WHERE indexname = 'dead_letter_search_header_lines'",
                &[],
            )
            .expect("indexes")[0][0]
            .int();
        assert_eq!(n, 1, "migration 8's index");
    });
    check(&a, "upgraded from 7");
    a.with(|c| {
        insert_records(c, 300..400);
    });
    wait_caught_up(&a);
    check(&a, "v8 caught up");
}

/// pg_trgm's indexes could not be made (here: a relation already holds one index's name): the
/// migration warns and goes on, and the filters still return exactly the scan's rows.
#[test]
fn postgres_without_trigram_indexes_still_exact() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let mut old = charon_archive::postgres::Postgres::connect(&pg.url).expect("postgres");
    old.batch("CREATE TABLE dead_letter_search_body (x INT)")
        .expect("squat");
    scenario(&pg.url, Box::new(old));
    let a = Archive::open(&pg.url).expect("open");
    a.with(|c| {
        let n = c
            .query(
                "SELECT COUNT(*) FROM pg_indexes WHERE tablename = 'dead_letter_search' AND indexdef LIKE '%gin_trgm_ops%'",
                &[],
            )
            .expect("indexes")[0][0]
            .int();
        assert_eq!(n, 0, "no trigram index");
    });
}

fn scenario(url: &str, mut old: Box<dyn Conn>) {
    // An archive as version 6 left it, with records.
    {
        schema::migrate_to(old.as_mut(), 6).expect("v6");
        insert_records(old.as_mut(), 0..300);
        drop(old);
    }
    let a = Archive::open(url).expect("open v7");
    // Right after the upgrade the indexer is (mostly) behind: the scan above the watermark.
    check(&a, "after upgrade");
    wait_caught_up(&a);
    check(&a, "caught up");
    // A burst: records above the watermark, queried at once.
    a.with(|c| {
        insert_records(c, 300..600);
    });
    check(&a, "after a burst");
    wait_caught_up(&a);
    // Edits of indexed records: body and headers.
    a.with(|c| {
        for id in [1i64, 2, 3, 50] {
            let e = Edit {
                payload: Some(format!("edited body {id} needle-xyz").into_bytes()),
                headers: Some(serde_json::json!({"x-s": "edited wert", "x-n": 99})),
                note: None,
            };
            ops::edit(c, id, "tester", &e).expect("edit");
        }
        let f = Filter::from_pairs([("body", "needle-xyz")]).expect("filter");
        assert_eq!(ops::list(c, &f, None, 1, 10).expect("list").1, 4);
        let f = Filter::from_pairs([("header.x-s", "v1")]).expect("filter");
        let (page, _) = ops::list(c, &f, None, 1, 10).expect("list");
        assert!(
            page.iter().all(|r| r.id != 1),
            "edited headers not found by old value"
        );
    });
    check(&a, "after edits");
    wait_caught_up(&a);
    check(&a, "edits indexed");
    // Deletes by ids, by filter, retention.
    a.with(|c| {
        ops::delete(c, &Selection::Ids(vec![4, 5, 6, 400]), "tester", None).expect("delete");
        let f = Filter::from_pairs([("error", "Order 1")]).expect("filter");
        ops::delete(c, &Selection::Filter(f), "tester", None).expect("delete");
        ops::retention(c, Some(1_700_000_000_000 + 20), None).expect("retention");
    });
    check(&a, "after deletes");
    // New records after the deletes, indexed; no stale index rows for deleted ids.
    a.with(|c| {
        insert_records(c, 600..700);
    });
    wait_caught_up(&a);
    check(&a, "after deletes, caught up");
    a.with(|c| {
        let stale = c
            .query(
                "SELECT COUNT(*) FROM dead_letter_search_scan s WHERE NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.id = s.id)",
                &[],
            )
            .expect("stale")[0][0]
            .int();
        assert_eq!(stale, 0);
        // The bytes counted against the size cap: exactly the indexed live records' texts.
        let r = c
            .query(
                &format!(
                    "SELECT (SELECT indexed_bytes FROM dead_letter_search_state), \
                     (SELECT CAST(COALESCE(SUM({}), 0) AS BIGINT) FROM dead_letters)",
                    search_index::size_sql(c.dialect(), "")
                ),
                &[],
            )
            .expect("bytes");
        assert_eq!(r[0][0].int(), r[0][1].int(), "indexed bytes follow edits and deletes");
        if c.dialect() == Dialect::Postgres {
            let n = c
                .query("SELECT COUNT(*) FROM dead_letter_search WHERE error LIKE '%Zahl%'", &[])
                .expect("side")[0][0]
                .int();
            assert!(n > 10, "the side table holds the texts");
            // Of the headers only the lines too long for the exact header index.
            let r = c
                .query(
                    "SELECT COUNT(*) FILTER (WHERE headers LIKE '%x-long=LLL%'), \
                     COUNT(*) FILTER (WHERE headers LIKE '%x-b=%' OR headers LIKE '%x-s=%') FROM dead_letter_search",
                    &[],
                )
                .expect("side headers");
            assert!(r[0][0].int() > 10, "long header lines in the side table");
            assert_eq!(r[0][1].int(), 0, "short header lines left to the exact index");
            let avail = c
                .query("SELECT COUNT(*) FROM pg_available_extensions WHERE name = 'pg_trgm'", &[])
                .expect("ext")[0][0]
                .int();
            let squatted = c
                .query("SELECT COUNT(*) FROM pg_tables WHERE tablename = 'dead_letter_search_body'", &[])
                .expect("t")[0][0]
                .int();
            let gin = c
                .query(
                    "SELECT COUNT(*) FROM pg_indexes WHERE tablename = 'dead_letter_search' AND indexdef LIKE '%gin_trgm_ops%'",
                    &[],
                )
                .expect("indexes")[0][0]
                .int();
            if squatted == 0 {
                // Body and headers; the error one moved to `dead_letter_error_text` (migration 12).
                assert_eq!(gin, 2 * avail, "trigram indexes when pg_trgm is available");
                assert_eq!(avail, 1, "pg_trgm is available on the test cluster");
            }
            return;
        }
        // The index holds the texts (the filters above were answered through it); of the
        // headers only the lines too long for the exact header index (thirteenth round).
        for (t, q) in [
            ("dead_letter_search_error", "\"Zah\" \"ahl\""),
            ("dead_letter_search_body", "\"grü\""),
            ("dead_letter_search_headers", "\"x-l\" \"ong\" \"g=L\" \"LLL\""),
        ] {
            let n = c
                .query(&format!("SELECT COUNT(*) FROM {t} WHERE {t} MATCH ?"), &[q.into()])
                .expect("match")[0][0]
                .int();
            assert!(n > 10, "{t} holds {q}");
        }
        let short = c
            .query(
                "SELECT COUNT(*) FROM dead_letter_search_headers WHERE dead_letter_search_headers MATCH ?",
                &["\"x-b\" \"-b=\" \"b=t\"".into()],
            )
            .expect("match")[0][0]
            .int();
        assert_eq!(short, 0, "short header lines are left to the exact header index");
    });
}

/// The indexer's batch, run by hand on its own connection: resumes from the watermark, twice
/// over the same records indexes nothing again, and the filters stay exact at every step.
#[test]
fn sqlite_indexer_batches_resume_from_the_watermark() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("archive.db");
    let a = Archive::open(&format!("sqlite://{}", path.display())).expect("open");
    a.with(|c| {
        insert_records(c, 0..250);
    });
    let own = rusqlite::Connection::open(&path).expect("open");
    own.busy_timeout(Duration::from_secs(30)).expect("busy");
    loop {
        // Against the background indexer: whichever runs, the watermark only moves forward.
        let before = watermark(&a).0;
        let n = {
            let _g = a.lock();
            indexer::batch(&own, 37, Duration::from_secs(60)).expect("batch")
        };
        let after = watermark(&a).0;
        assert!(after >= before);
        check(&a, "between batches");
        if n == 0 {
            break;
        }
    }
    let (wm, top) = watermark(&a);
    assert_eq!(wm, top);
    let indexed: i64 = own
        .query_row(
            "SELECT indexed_records FROM dead_letter_search_state",
            [],
            |r| r.get(0),
        )
        .expect("n");
    assert_eq!(indexed, 250, "every record indexed once");
}

/// `archive_max_bytes` counts the index: payloads alone under the cap, payloads and index over
/// it, so the size cap deletes the oldest records until both fit.
#[test]
fn sqlite_size_cap_counts_the_search_index() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("archive.db");
    let a = Archive::open(&format!("sqlite://{}", path.display())).expect("open");
    a.with(|c| {
        insert_records(c, 0..200);
    });
    wait_caught_up(&a);
    let payload = |c: &mut dyn Conn| {
        c.query(
            "SELECT COALESCE(SUM(payload_bytes), 0) FROM dead_letters",
            &[],
        )
        .expect("sum")[0][0]
            .int()
    };
    a.with(|c| {
        let p = payload(c);
        let index = search_index::counted_bytes(c).expect("bytes");
        assert!(index > 0);
        let cap = p + index / 2;
        let (_, by_size) = ops::retention(c, None, Some(cap)).expect("retention");
        assert!(
            by_size > 0,
            "the index's bytes pushed the archive over the cap"
        );
        let after = payload(c) + search_index::counted_bytes(c).expect("bytes");
        assert!(after <= cap, "{after} <= {cap}");
    });
}

/// Migration 9 over an archive at version 8 whose search index is filled up to a watermark below
/// the newest record, with one indexed record edited since (in the scan table): the upgrade
/// fills the exact header index for exactly the indexed, unedited records, and every filter
/// equals the scan right after it and once the indexer caught up.
fn upgrade_from_version_8(url: &str, mut old: Box<dyn Conn>) {
    schema::migrate_to(old.as_mut(), 8).expect("v8");
    insert_records(old.as_mut(), 0..300);
    // The search index as version 8's indexer fills it (same texts), records 1..=250 indexed.
    let fill = match old.dialect() {
        Dialect::Postgres => r#"INSERT INTO dead_letter_search (id, error, body, headers)
         SELECT id, concat_ws(E'\n', error_message, error_stacktrace),
           CASE WHEN payload = '\xfffe6162630078797a'::bytea THEN E'\uFFFD\uFFFDabc\uFFFDxyz'
                ELSE convert_from(payload, 'UTF8') END,
           COALESCE((SELECT string_agg(j.key || '=' || (j.value #>> '{}'), E'\n') FROM jsonb_each(headers::jsonb) AS j), '')
         FROM dead_letters WHERE id <= 250;
         UPDATE dead_letter_search_state SET watermark = 250"#
            .to_string(),
        Dialect::Sqlite => format!(
            "INSERT INTO dead_letter_search_error (rowid, text) SELECT id, \
               COALESCE(error_message, '') || CASE WHEN error_message IS NOT NULL AND error_stacktrace IS NOT NULL THEN char(10) ELSE '' END || COALESCE(error_stacktrace, '') \
               FROM dead_letters WHERE id <= 250;
             INSERT INTO dead_letter_search_body (rowid, text) SELECT id, \
               CASE WHEN payload = x'fffe6162630078797a' THEN char(65533, 65533) || 'abc' || char(65533) || 'xyz' ELSE CAST(payload AS TEXT) END \
               FROM dead_letters WHERE id <= 250;
             INSERT INTO dead_letter_search_headers (rowid, text) SELECT id, {} FROM dead_letters WHERE id <= 250;
             UPDATE dead_letter_search_state SET watermark = 250",
            search_index::HEADER_LINES
        ),
    };
    old.batch(&fill).expect("fill v8 index");
    // An indexed record edited by version 8 (its index rows gone, in the scan table).
    old.exec(
        "UPDATE dead_letters SET headers = ? WHERE id = 7",
        &[serde_json::json!({"x-s": "v1", "x-n": 3})
            .to_string()
            .into()],
    )
    .expect("edit");
    drop(old);
    let a = Archive::open(url).expect("open v9");
    a.with(|c| {
        let v = c
            .query("SELECT MAX(version) FROM archive_migrations", &[])
            .expect("version")[0][0]
            .int();
        assert_eq!(v, schema::latest());
    });
    check(&a, "upgraded from 8");
    a.with(|c| {
        insert_records(c, 300..400);
    });
    wait_caught_up(&a);
    check(&a, "v9 caught up");
    a.with(|c| {
        // Every indexed record has its rows: its short non-null headers (record 1 has seven of
        // its nine, the edited 7 its two).
        for (id, n) in [(1i64, 7i64), (2, 4), (7, 2), (350, 4)] {
            let have = c
                .query(
                    "SELECT COUNT(*) FROM dead_letter_search_header WHERE id = ?",
                    &[id.into()],
                )
                .expect("rows")[0][0]
                .int();
            assert_eq!(have, n, "header rows of record {id}");
        }
    });
}

#[test]
fn sqlite_upgrade_from_version_8_header_index() {
    on_sqlite(upgrade_from_version_8);
}

#[test]
fn postgres_upgrade_from_version_8_header_index() {
    on_postgres(upgrade_from_version_8);
}
