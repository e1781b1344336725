//! How PostgreSQL runs the archive's own statements (docs/archive.md, "JIT" and "Replay").
//!
//! The archive's PostgreSQL sessions run without JIT: the summary's
//! statement triggers are priced above `jit_above_cost`, and LLVM compiled them for 1.5 s a
//! statement on every replay step, skip and delete. Shown on a server told to compile
//! everything (`jit_above_cost = 0`), with `auto_explain` logging every statement, nested ones
//! included: a plain session's summary trigger is compiled (the check can see JIT), the archive's
//! skip — its UPDATE and the trigger's statements under it — is not.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/record.rs"]
mod support;

use charon_archive::ops::{self, Selection};
use charon_archive::{Archive, NewRecord, jobs};
use serde_json::json;

/// Record `i`: one of four original queues, an error message that groups by cause.
fn rec(i: usize) -> NewRecord {
    let text = Some(format!("Order {i} failed: cause {}", i % 3));
    NewRecord {
        stable_key: format!("s:3:{i}"),
        original_queue: Some(format!("orders-{}", i % 4)),
        content_type: Some("text/plain".into()),
        error_fingerprint: charon_archive::extract::fingerprint(text.as_deref(), None),
        error_message: text,
        ..support::record(i)
    }
}

/// The server log from byte `from` on.
fn log_since(pg: &pg_cluster::PgCluster, from: usize) -> String {
    let log = std::fs::read(pg.dir().join("log")).unwrap_or_default();
    String::from_utf8_lossy(log.get(from..).unwrap_or_default()).into_owned()
}

fn log_len(pg: &pg_cluster::PgCluster) -> usize {
    std::fs::metadata(pg.dir().join("log")).map_or(0, |m| m.len() as usize)
}

/// Waits (generously) until the log holds `needle` after `from`: the server writes it a
/// moment after the statement returns.
fn wait_log(pg: &pg_cluster::PgCluster, from: usize, needle: &str) -> String {
    for _ in 0..600 {
        let s = log_since(pg, from);
        if s.contains(needle) {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    log_since(pg, from)
}

#[test]
fn postgres_archive_sessions_never_jit_compile_the_summary_triggers() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..40).map(rec).collect();
        assert_eq!(ops::insert_batch(c, &recs).expect("insert"), 40);
    });
    drop(a);

    // Every later session: JIT on, for every statement, each one logged with its plan.
    let mut admin = postgres::Client::connect(&pg.url, postgres::NoTls).expect("plain session");
    admin
        .batch_execute(
            "ALTER DATABASE postgres SET jit = on;
             ALTER DATABASE postgres SET jit_above_cost = 0;
             ALTER DATABASE postgres SET session_preload_libraries = 'auto_explain';
             ALTER DATABASE postgres SET auto_explain.log_min_duration = 0;
             ALTER DATABASE postgres SET auto_explain.log_analyze = on;
             ALTER DATABASE postgres SET auto_explain.log_nested_statements = on;",
        )
        .expect("settings");
    drop(admin);

    // A plain session (a user's psql): the trigger's statements are compiled.
    let mut user = postgres::Client::connect(&pg.url, postgres::NoTls).expect("user session");
    let jit: bool = user
        .query_one("SELECT pg_jit_available()", &[])
        .expect("pg_jit_available")
        .get(0);
    if !jit {
        eprintln!("\n*** SKIPPING the JIT check: this PostgreSQL has no JIT provider ***\n");
        return;
    }
    let from = log_len(&pg);
    user.batch_execute("UPDATE dead_letters SET status = 'SKIPPED' WHERE id <= 5")
        .expect("user's update");
    let user_log = wait_log(&pg, from, "UPDATE dead_letter_groups");
    assert!(
        user_log.contains("UPDATE dead_letter_groups") && user_log.contains("JIT:"),
        "the check must see the trigger's statement compiled in a plain session:\n{user_log}"
    );
    drop(user);

    // The archive's sessions: the same kind of change through the archive, nothing compiled.
    let a = Archive::open(&pg.url).expect("reopen postgres");
    let from = log_len(&pg);
    let n = a.with(|c| ops::skip(c, &Selection::Ids((10..30).collect()), "carol", "no JIT"));
    assert_eq!(n.expect("skip"), 20);
    let shown = a
        .read(|c| c.query("SHOW jit", &[]))
        .expect("SHOW jit on the readers' connection");
    let archive_log = wait_log(&pg, from, "UPDATE dead_letter_groups");
    assert!(
        archive_log.contains("UPDATE dead_letter_groups"),
        "auto_explain logged the archive's trigger statements:\n{archive_log}"
    );
    assert!(
        !archive_log.contains("JIT:"),
        "the archive's statements were JIT-compiled:\n{archive_log}"
    );
    assert_eq!(shown[0][0].text(), "off");
}

/// A replay job's steps update its items by `job_id = ? AND record_id IN (…)`. Right after the
/// job filled `replay_items` (no statistics yet), PostgreSQL scanned the primary key on `job_id`
/// alone and filtered every item of the job in each step (quadratic over a job); with the
/// statistics the job's creation gathers, the step reads only its own items.
#[test]
fn postgres_replay_step_reads_only_its_own_items() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    a.with(|c| {
        let recs: Vec<NewRecord> = (0..20_000).map(rec).collect();
        assert_eq!(ops::insert_batch(c, &recs).expect("insert"), 20_000);
    });
    // The error-text copy holds the records the search indexer has indexed: wait for all, on the
    // readers' connection (a query on the writers' one counts as activity, and the indexer backs
    // off while the writer is busy: `indexer_wait` would starve it).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !a
        .read(|c| {
            c.query(
                "SELECT 1 FROM dead_letter_search_state WHERE watermark >= (SELECT MAX(id) FROM dead_letters)",
                &[],
            )
        })
        .is_ok_and(|r| !r.is_empty())
    {
        assert!(std::time::Instant::now() < deadline, "the indexer caught up");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (ids, job) = a.with(|c| {
        let ids: Vec<i64> = c
            .query("SELECT id FROM dead_letters ORDER BY id", &[])
            .expect("ids")
            .iter()
            .map(|r| r[0].int())
            .collect();
        let (job, total) = jobs::create(
            c,
            &Selection::Ids(ids.clone()),
            &json!({"exchange": "", "routing_key": "elsewhere"}),
            "carol",
        )
        .expect("job");
        assert_eq!(total, 20_000);
        (ids, job)
    });
    // The job's statistics are gathered on the readers' connection while the writers' one is
    // held (as by an archiver's batch): the analyze must not wait for it, nor hold it.
    std::thread::scope(|s| {
        let writer = a.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let a = &a;
        s.spawn(move || {
            let r = a.read(|c| {
                jobs::gather_statistics(c, job);
                Ok(())
            });
            let _ = tx.send(r);
        });
        let done = rx.recv_timeout(std::time::Duration::from_secs(120));
        drop(writer);
        assert!(
            matches!(done, Ok(Ok(()))),
            "the statistics were not gathered beside a held writers' connection: {done:?}"
        );
    });
    a.with(|c| {
        let step: Vec<String> = ids[10_000..10_100].iter().map(i64::to_string).collect();
        c.batch("BEGIN").expect("begin");
        let plan = c
            .query(
                &format!(
                    "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) UPDATE replay_items SET state = 'INFLIGHT' \
                     WHERE job_id = {job} AND record_id IN ({})",
                    step.join(", ")
                ),
                &[],
            )
            .expect("explain");
        c.batch("ROLLBACK").expect("rollback");
        let plan: Vec<String> = plan.iter().map(|r| r[0].text()).collect();
        let text = plan.join("\n");
        assert!(
            plan.iter()
                .any(|l| l.contains("Index Cond") && l.contains("record_id")),
            "the step must look its items up by (job_id, record_id):\n{text}"
        );
        assert!(
            !text.contains("Rows Removed by Filter"),
            "the step read other items of the job:\n{text}"
        );

        // The step's status change: the summary trigger finds a group's new bound from its
        // first/last second (migration 21) by an ordered walk of `dead_letters_created`
        // stopped at its first row, not by reading the group's whole range.
        let from = log_len(&pg);
        c.batch(
            "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; \
             SET auto_explain.log_nested_statements = on",
        )
        .expect("auto_explain");
        c.batch("BEGIN").expect("begin");
        c.batch(&format!(
            "UPDATE dead_letters SET status = 'PROCESSING' WHERE id IN ({})",
            step.join(", ")
        ))
        .expect("status change");
        c.batch("ROLLBACK").expect("rollback");
        c.batch("SET auto_explain.log_min_duration = -1").expect("auto_explain off");
        let log = wait_log(&pg, from, "UPDATE dead_letter_groups");
        let log = if log.contains("UPDATE dead_letter_error_text AS e") {
            log
        } else {
            wait_log(&pg, from, "UPDATE dead_letter_error_text AS e")
        };
        let trigger = log
            .split("LOG:  duration:")
            .find(|plan| plan.contains("Query Text: UPDATE dead_letter_groups"))
            .unwrap_or_default();
        let copy = log
            .split("LOG:  duration:")
            .find(|plan| plan.contains("Query Text: UPDATE dead_letter_error_text AS e"))
            .unwrap_or_default();
        assert!(
            copy.contains("Index Scan using dead_letter_error_text_pkey")
                && !copy.contains("Seq Scan on dead_letter_error_text"),
            "the copy's trigger must look the changed rows up by id:\n{copy}"
        );
        assert!(
            trigger.contains("Index Scan using dead_letters_created")
                && trigger.contains("Index Scan Backward using dead_letters_created")
                && trigger.contains("Limit")
                && !trigger.contains("Bitmap Heap Scan on dead_letters"),
            "the trigger must seek a group's bound:\n{trigger}"
        );
    });
}
