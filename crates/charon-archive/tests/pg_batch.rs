//! PostgreSQL's archiver batch in few statements (docs/archive.md "Nineteenth round (branch
//! `pg9t`)"): the whole batch by one COPY whose transition rows stay in memory, and the
//! summary's rows of every group the batch touches in one upsert — with the summary exact,
//! also for a redelivered batch that goes in by the INSERTs.

#[path = "support/pg_cluster.rs"]
mod pg_cluster;
#[path = "support/summary_check.rs"]
mod summary_check;

use bytes::Bytes;
use charon_archive::error::ArchiveError;
use charon_archive::sql::{Cell, ColType, Conn, Dialect, Param};
use charon_archive::wal_sync::WalSync;
use charon_archive::{Archive, NewRecord, ops};
use serde_json::json;

/// Record `i`: one of `groups` original queues, a body of `body` bytes.
fn rec(i: usize, groups: usize, body: usize, at: i64) -> NewRecord {
    let key = format!("s:9:{i}");
    let text = Some(format!("Order {i} failed: cause {}", i % 7));
    NewRecord {
        stable_key: key.clone(),
        vhost: "/".into(),
        queue: "dlq".into(),
        original_queue: Some(format!("orders-{}", i % groups)),
        original_exchange: Some("orders".into()),
        original_routing_keys: vec![format!("orders-{}", i % groups)],
        reason: Some("rejected".into()),
        death_count: 1,
        message_id: Some(key.clone()),
        correlation_id: None,
        key: Some(key),
        content_type: Some("application/json".into()),
        properties: json!({"delivery_mode": 2}).to_string(),
        headers: json!({"n": i}).to_string(),
        amqp_properties: Bytes::from(vec![1, 2, 3]),
        // Not compressible much: the stored rows are as big as the bodies.
        payload: Bytes::from(
            (0..body)
                .map(|b| ((b * 7919 + i * 104_729) % 251) as u8)
                .collect::<Vec<u8>>(),
        ),
        error_message: text.clone(),
        error_stacktrace: None,
        error_fingerprint: charon_archive::extract::fingerprint(text.as_deref(), None),
        created_at: at + i as i64,
    }
}

/// A connection that counts the statements the archiver's batch sends.
struct Counting<'a> {
    inner: &'a mut dyn Conn,
    copies: usize,
    summary_statements: usize,
}

impl Counting<'_> {
    fn count(&mut self, sql: &str) {
        if sql.starts_with("INSERT INTO dead_letter_groups") {
            self.summary_statements += 1;
        }
    }
}

impl Conn for Counting<'_> {
    fn dialect(&self) -> Dialect {
        self.inner.dialect()
    }
    fn exec(&mut self, sql: &str, params: &[Param]) -> Result<u64, ArchiveError> {
        self.count(sql);
        self.inner.exec(sql, params)
    }
    fn exec_each(&mut self, sql: &str, sets: &[&[Param]]) -> Result<Vec<u64>, ArchiveError> {
        for _ in sets {
            self.count(sql);
        }
        self.inner.exec_each(sql, sets)
    }
    fn copy_in(
        &mut self,
        table: &str,
        cols: &str,
        types: &[ColType],
        rows: &mut dyn Iterator<Item = &[Param]>,
    ) -> Result<Option<u64>, ArchiveError> {
        self.copies += 1;
        self.inner.copy_in(table, cols, types, rows)
    }
    fn commit_unsynced(&mut self, on: bool) -> Result<Option<WalSync>, ArchiveError> {
        self.inner.commit_unsynced(on)
    }
    fn query(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Vec<Cell>>, ArchiveError> {
        self.count(sql);
        self.inner.query(sql, params)
    }
    fn batch(&mut self, sql: &str) -> Result<(), ArchiveError> {
        self.count(sql);
        self.inner.batch(sql)
    }
    fn insert_id(&mut self, sql: &str, params: &[Param]) -> Result<i64, ArchiveError> {
        self.count(sql);
        self.inner.insert_id(sql, params)
    }
    fn is_broken(&self) -> bool {
        self.inner.is_broken()
    }
}

/// The bytes this database's backends wrote to temporary files so far (the writer's own
/// statistics flushed first).
fn temp_bytes(c: &mut dyn Conn) -> i64 {
    c.exec("SELECT pg_stat_force_next_flush()", &[])
        .expect("flush stats");
    c.query(
        "SELECT temp_bytes FROM pg_stat_database WHERE datname = current_database()",
        &[],
    )
    .expect("temp bytes")[0][0]
        .int()
}

/// A batch of 2,500 records in 30 groups is one COPY and one summary statement; a redelivered
/// batch (one record archived before) falls back to the INSERTs, still with one summary
/// statement and only its new records counted. The summary equals a recount after each.
#[test]
fn postgres_batch_is_one_copy_and_one_summary_statement() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    let now = charon_archive::time::now_ms();
    a.with(|c| {
        let first: Vec<NewRecord> = (0..2500).map(|i| rec(i, 30, 100, now)).collect();
        let mut counting = Counting {
            inner: c,
            copies: 0,
            summary_statements: 0,
        };
        assert_eq!(
            ops::insert_batch(&mut counting, &first).expect("insert"),
            2500
        );
        assert_eq!(counting.copies, 1, "one COPY for the whole batch");
        assert_eq!(
            counting.summary_statements, 1,
            "one upsert for the batch's 30 groups"
        );
        summary_check::check_summary(c, "after the copied batch");

        // 2500..3099 new in 45 groups (15 of them new), then record 17 again: the COPY fails,
        // the INSERTs count only the 600 new records.
        let second: Vec<NewRecord> = (2500..3100)
            .map(|i| rec(i, 45, 100, now))
            .chain([rec(17, 30, 100, now)])
            .collect();
        let mut counting = Counting {
            inner: c,
            copies: 0,
            summary_statements: 0,
        };
        assert_eq!(
            ops::insert_batch(&mut counting, &second).expect("insert"),
            600
        );
        assert_eq!(counting.copies, 1);
        assert_eq!(counting.summary_statements, 1, "one upsert for 45 groups");
        summary_check::check_summary(c, "after the redelivered batch");
        let n = c
            .query(
                "SELECT CAST(SUM(records) AS BIGINT), COUNT(*) FROM dead_letter_groups",
                &[],
            )
            .expect("summary");
        assert_eq!((n[0][0].int(), n[0][1].int()), (3100, 45));
    });
}

/// A batch whose rows are bigger than PostgreSQL's default `work_mem` (4 MB; here ~12 MB) goes
/// in without a temporary file: the summary trigger's transition table of the COPY stays in
/// memory. Every body is stored exactly.
#[test]
fn postgres_big_batch_copied_without_temporary_file() {
    let Some(pg) = pg_cluster::PgCluster::start() else {
        return;
    };
    let a = Archive::open(&pg.url).expect("open postgres");
    let now = charon_archive::time::now_ms();
    a.with(|c| {
        let before = temp_bytes(c);
        let recs: Vec<NewRecord> = (0..2000).map(|i| rec(i, 20, 6000, now)).collect();
        assert_eq!(ops::insert_batch(c, &recs).expect("insert"), 2000);
        assert_eq!(temp_bytes(c) - before, 0, "no temporary file");
        let show = c.query("SHOW work_mem", &[]).expect("work_mem");
        assert_eq!(
            show[0][0].text(),
            "4MB",
            "the batch's work_mem ended with it"
        );
        for (i, r) in recs.iter().enumerate().step_by(97) {
            let got = c
                .query(
                    "SELECT payload FROM dead_letters WHERE stable_key = ?",
                    &[Param::from(r.stable_key.as_str())],
                )
                .expect("payload");
            assert_eq!(got[0][0].bytes(), r.payload.to_vec(), "record {i}");
        }
        summary_check::check_summary(c, "after the big batch");
    });
}
