//! The archive's operations on SQLite and on a real PostgreSQL (a private cluster).

#[path = "support/pg_cluster.rs"]
mod pg_cluster;

use bytes::Bytes;
use charon_archive::filter::Filter;
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::{Archive, NewRecord, jobs};
use serde_json::json;

fn rec(key: &str, oq: &str, err: &str, body: &[u8], at: i64) -> NewRecord {
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
        content_type: Some("text/plain".into()),
        properties: json!({"message_id": key}).to_string(),
        headers: json!({"tenant": oq, "n": 7, "x-exception-message": err}).to_string(),
        amqp_properties: Bytes::new(),
        payload: Bytes::copy_from_slice(body),
        error_message: Some(err.into()),
        error_stacktrace: None,
        error_fingerprint: charon_archive::extract::fingerprint(Some(err), None),
        created_at: at,
    }
}

fn filter(pairs: &[(&str, &str)]) -> Filter {
    Filter::from_pairs(pairs.iter().copied()).expect("filter")
}

fn exercise(a: &Archive) {
    let now = charon_archive::time::now_ms();
    let recs = vec![
        rec(
            "k1",
            "orders",
            "Order 1 not found",
            b"body one",
            now - 10_000,
        ),
        rec(
            "k2",
            "orders",
            "Order 2 not found",
            b"body two",
            now - 5_000,
        ),
        rec("k3", "payments", "Card declined", b"\xff\x00binary", now),
    ];
    a.with(|c| {
        assert_eq!(ops::insert_batch(c, &recs).expect("insert"), 3);
        // The same stored messages again (a redelivery after a crash): no new record.
        assert_eq!(ops::insert_batch(c, &recs).expect("insert"), 0);
        let (all, total) = ops::list(c, &Filter::default(), None, 1, 100).expect("list");
        assert_eq!(total, 3);
        assert_eq!(all[0].message_id.as_deref(), Some("k3"), "newest first");
        assert_eq!(all[0].payload, b"\xff\x00binary");
        assert_eq!(all[0].to_json()["payload_encoding"], "base64");
        let (o, n) = ops::list(
            c,
            &filter(&[("original_queue", "orders")]),
            Some("id"),
            1,
            100,
        )
        .expect("list");
        assert_eq!(n, 2);
        assert_eq!(o[0].key.as_deref(), Some("k1"));
        let (_, n) = ops::list(c, &filter(&[("error", "not found")]), None, 1, 100).expect("list");
        assert_eq!(n, 2);
        let (_, n) = ops::list(c, &filter(&[("body", "two")]), None, 1, 100).expect("list");
        assert_eq!(n, 1);
        let (_, n) =
            ops::list(c, &filter(&[("header.tenant", "payments")]), None, 1, 100).expect("list");
        assert_eq!(n, 1);
        let (_, n) = ops::list(c, &filter(&[("header.n", "7")]), None, 1, 100).expect("list");
        assert_eq!(n, 3);
        let since = (now - 6_000).to_string();
        let (_, n) = ops::list(c, &filter(&[("since", &since)]), None, 1, 100).expect("list");
        assert_eq!(n, 2);
        let (p2, n) = ops::list(c, &Filter::default(), Some("id"), 2, 2).expect("page");
        assert_eq!((p2.len(), n), (1, 3));
        assert!(ops::list(c, &Filter::default(), Some("nope"), 1, 1).is_err());
        assert!(Filter::from_pairs([("nope", "x")]).is_err());
        let g = ops::groups(
            c,
            Some("original_queue,error_fingerprint"),
            &Filter::default(),
        )
        .expect("groups");
        assert_eq!(g.len(), 2, "orders' two errors share a fingerprint: {g:?}");
        assert_eq!(g[0]["original_queue"], "orders");
        assert_eq!(g[0]["count"], 2);
        assert!(g[0]["oldest"].as_str() < g[0]["newest"].as_str());

        let id1 = o[0].id;
        let edited = ops::edit(
            c,
            id1,
            "alice",
            &Edit {
                payload: Some(b"fixed".to_vec()),
                headers: Some(json!({"tenant": "orders", "fixed": true})),
                note: Some("typo".into()),
            },
        )
        .expect("edit")
        .expect("exists");
        assert_eq!(edited.payload, b"fixed");
        assert_eq!(edited.headers["fixed"], true);
        let h = ops::history(c, id1).expect("history");
        assert_eq!(h.len(), 1);
        assert_eq!(h[0]["payload"], "body one");
        assert_eq!(h[0]["changed_by"], "alice");

        let n = ops::skip(
            c,
            &Selection::Filter(filter(&[("original_queue", "payments")])),
            "bob",
            "known issue",
        )
        .expect("skip");
        assert_eq!(n, 1);
        let (s, _) = ops::list(c, &filter(&[("status", "SKIPPED")]), None, 1, 10).expect("list");
        assert_eq!(s[0].resolved_by.as_deref(), Some("bob"));
        assert_eq!(s[0].resolution_note.as_deref(), Some("known issue"));

        // A replay job: items, inflight, store index, finish; resolution after a "restart".
        let (job, total) = jobs::create(
            c,
            &Selection::Filter(filter(&[("original_queue", "orders")])),
            &json!({"note": "go"}),
            "carol",
        )
        .expect("job");
        assert_eq!(total, 2);
        let next = jobs::next(c, job, 10).expect("next");
        assert_eq!(next.len(), 2);
        let (a_id, b_id) = (next[0].id, next[1].id);
        jobs::inflight(c, job, &[a_id, b_id], 100).expect("inflight");
        assert_eq!(
            ops::get(c, a_id).expect("get").expect("rec").status,
            "PROCESSING"
        );
        jobs::stored_at(c, job, &[(a_id, 101), (b_id, 102)]).expect("stored");
        // Crash: the store recovered up to 101: a is durable, b (at 102) was lost with the torn
        // tail and is published again.
        assert!(jobs::undecided(c, Some(101)).expect("undecided").is_empty());
        let none = std::collections::HashSet::new();
        let (done, again) = jobs::resolve_inflight(c, Some(101), &none).expect("resolve");
        assert_eq!((done, again), (1, 1));
        let ra = ops::get(c, a_id).expect("get").expect("rec");
        assert_eq!((ra.status.as_str(), ra.replay_count), ("REPLAYED", 1));
        let spec = jobs::running(c)
            .expect("running")
            .pop()
            .expect("job running");
        let next = jobs::next(c, job, 10).expect("next");
        assert_eq!(next.iter().map(|r| r.id).collect::<Vec<_>>(), vec![b_id]);
        // Appended but its index not yet recorded, and later writes survived: undecided by the
        // index; the caller looks in the target queues and found it (REPLAYED) or not (again).
        jobs::inflight(c, job, &[b_id], 200).expect("inflight");
        let und = jobs::undecided(c, Some(250)).expect("undecided");
        assert_eq!(und.len(), 1);
        assert_eq!((und[0].0, und[0].2.id), (job, b_id));
        assert_eq!(
            jobs::resolve_inflight(c, Some(250), &none).expect("resolve"),
            (0, 1)
        );
        // Nothing after the watermark survived: not undecided, goes again.
        jobs::inflight(c, job, &[b_id], 300).expect("inflight");
        assert!(jobs::undecided(c, Some(300)).expect("undecided").is_empty());
        assert_eq!(
            jobs::resolve_inflight(c, Some(300), &none).expect("resolve"),
            (0, 1)
        );
        // Found in a target queue: replayed.
        jobs::inflight(c, job, &[b_id], 300).expect("inflight");
        let found: std::collections::HashSet<(i64, i64)> = [(job, b_id)].into();
        assert_eq!(
            jobs::resolve_inflight(c, Some(400), &found).expect("resolve"),
            (1, 0)
        );
        c.exec(
            "UPDATE replay_items SET state = 'PENDING' WHERE record_id = ?",
            &[b_id.into()],
        )
        .expect("reset");
        // (The job counts its finished items itself: a reset by hand takes its count back too.)
        c.exec(
            "UPDATE replay_jobs SET replayed = replayed - 1 WHERE id = ?",
            &[job.into()],
        )
        .expect("reset count");
        jobs::inflight(c, job, &[b_id], 300).expect("inflight");
        jobs::finish(c, &spec, &[(b_id, Err("NO_ROUTE".into()))]).expect("finish");
        let info = jobs::info(c, job).expect("info").expect("job");
        assert_eq!(info["state"], "DONE");
        assert_eq!(info["replayed"], 1);
        assert_eq!(info["failed"], 1);
        assert_eq!(info["errors"][0]["error"], "NO_ROUTE");
        let rb = ops::get(c, b_id).expect("get").expect("rec");
        assert_eq!(rb.status, "FAILED");

        let n =
            ops::delete(c, &Selection::Ids(vec![b_id]), "dave", Some("obsolete")).expect("delete");
        assert_eq!(n, 1);
        let (audit, _) = ops::list_audit(c, &Default::default(), 1, 100, None).expect("audit");
        let actions: Vec<&str> = audit.iter().filter_map(|r| r["action"].as_str()).collect();
        assert_eq!(actions, vec!["delete", "replay", "skip", "edit"]);
        assert_eq!(audit[0]["actor"], "dave");
        assert_eq!(audit[0]["result"]["deleted"], 1);
        let by_rec: std::collections::BTreeMap<String, String> =
            [("record_id".to_string(), id1.to_string())].into();
        let (ra, _) = ops::list_audit(c, &by_rec, 1, 100, None).expect("audit");
        assert_eq!(ra.len(), 1, "{ra:?}");

        // Retention: older than 7 s goes (k1); then a cap of 6 bytes removes the oldest left.
        let (aged, _) = ops::retention(c, Some(now - 7_000), None).expect("retention");
        assert_eq!(aged, 1);
        // The search index's counted bytes weigh too; the background indexer may or may not have
        // reached the record left, and cannot move while this closure holds the connection.
        let indexed = charon_archive::search_index::counted_bytes(c).expect("indexed bytes");
        let (_, capped) = ops::retention(c, None, Some(8 + indexed)).expect("cap");
        assert_eq!(
            capped, 0,
            "left: the 8-byte binary one and its index bytes ({indexed})"
        );
        let st = ops::stats(c).expect("stats");
        assert_eq!(st["records"], 1);
        assert_eq!(st["retention_deleted"], 1);
        let (_, capped) = ops::retention(c, None, Some(1)).expect("cap");
        assert_eq!(capped, 1);
        assert_eq!(ops::stats(c).expect("stats")["size_cap_deleted"], 1);
    });
}

/// Opens `url` from four threads at once, as a restarted broker's opener and a late start-up
/// opener can: every open succeeds and each migration is applied once.
fn open_concurrently(url: &str) {
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let url = url.to_string();
            std::thread::spawn(move || Archive::open(&url).map(drop))
        })
        .collect();
    for h in handles {
        h.join().expect("thread").expect("concurrent open");
    }
    let a = Archive::open(url).expect("open after");
    let rows = a
        .with(|c| {
            c.query(
                "SELECT COUNT(*), COUNT(DISTINCT version) FROM archive_migrations",
                &[],
            )
        })
        .expect("versions");
    let counts: Vec<i64> = rows[0].iter().map(|c| c.int()).collect();
    assert_eq!(
        counts[0], counts[1],
        "a migration was recorded twice: {counts:?}"
    );
}

#[test]
fn sqlite_concurrent_opens_migrate_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    open_concurrently(&dir.path().join("archive.db").to_string_lossy());
}

#[test]
fn sqlite_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("archive.db");
    let a = Archive::open(&format!("sqlite://{}", path.display())).expect("open");
    exercise(&a);
    drop(a);
    // Reopening applies no migration twice.
    Archive::open(&path.to_string_lossy()).expect("reopen");
}

#[test]
fn postgres_backend() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    open_concurrently(&pg.url);
    let a = Archive::open(&pg.url).expect("open postgres");
    exercise(&a);
    drop(a);
    Archive::open(&pg.url).expect("reopen postgres");
}
