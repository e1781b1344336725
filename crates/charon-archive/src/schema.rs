//! The archive's tables (docs/archive.md) as versioned migrations, applied at open.

use crate::error::ArchiveError;
use crate::sql::{Conn, Dialect};
use crate::time::now_ms;

/// Migration 1; `{ID}` and `{BLOB}` are the dialect's id column and bytes type.
const V1: &str = "
CREATE TABLE dead_letters (
    id {ID},
    stable_key TEXT NOT NULL UNIQUE,
    vhost TEXT NOT NULL,
    queue TEXT NOT NULL,
    original_queue TEXT,
    original_exchange TEXT,
    original_routing_keys TEXT NOT NULL,
    reason TEXT,
    death_count BIGINT NOT NULL,
    message_id TEXT,
    correlation_id TEXT,
    message_key TEXT,
    content_type TEXT,
    properties TEXT NOT NULL,
    headers TEXT NOT NULL,
    amqp_properties {BLOB} NOT NULL,
    payload {BLOB} NOT NULL,
    payload_bytes BIGINT NOT NULL,
    error_message TEXT,
    error_stacktrace TEXT,
    error_fingerprint TEXT,
    status TEXT NOT NULL,
    replay_count BIGINT NOT NULL DEFAULT 0,
    last_replayed_at BIGINT,
    resolved_by TEXT,
    resolution_note TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX dead_letters_status ON dead_letters (status, id);
CREATE INDEX dead_letters_created ON dead_letters (created_at);
CREATE INDEX dead_letters_orig_queue ON dead_letters (original_queue, status, id);
CREATE INDEX dead_letters_queue ON dead_letters (queue, status, id);
CREATE INDEX dead_letters_reason ON dead_letters (reason, id);
CREATE INDEX dead_letters_fingerprint ON dead_letters (error_fingerprint, status, id);
CREATE INDEX dead_letters_key ON dead_letters (message_key);
CREATE INDEX dead_letters_message_id ON dead_letters (message_id);
CREATE INDEX dead_letters_groups ON dead_letters (original_queue, reason, error_fingerprint, status, created_at);
CREATE TABLE dead_letter_history (
    id {ID},
    record_id BIGINT NOT NULL,
    changed_at BIGINT NOT NULL,
    changed_by TEXT NOT NULL,
    headers TEXT NOT NULL,
    amqp_properties {BLOB} NOT NULL,
    payload {BLOB} NOT NULL
);
CREATE INDEX dead_letter_history_record ON dead_letter_history (record_id);
CREATE TABLE dead_letter_audit (
    id {ID},
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    record_ids TEXT,
    filter TEXT,
    note TEXT,
    result TEXT NOT NULL,
    job_id BIGINT
);
CREATE INDEX dead_letter_audit_at ON dead_letter_audit (at);
CREATE TABLE replay_jobs (
    id {ID},
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    created_by TEXT NOT NULL,
    state TEXT NOT NULL,
    request TEXT NOT NULL,
    total BIGINT NOT NULL,
    last_error TEXT
);
CREATE TABLE replay_items (
    job_id BIGINT NOT NULL,
    record_id BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    state TEXT NOT NULL,
    watermark BIGINT,
    store_index BIGINT,
    error TEXT,
    PRIMARY KEY (job_id, record_id)
);
CREATE INDEX replay_items_state ON replay_items (job_id, state, seq);
CREATE TABLE archive_counters (
    name TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
";

/// Migration 2: the vhosts each audit row touched (what a user limited to some vhosts sees).
const V2_AUDIT_VHOSTS: &str = "
CREATE TABLE dead_letter_audit_vhosts (
    audit_id BIGINT NOT NULL,
    vhost TEXT NOT NULL,
    PRIMARY KEY (audit_id, vhost)
);
";

/// Migration 4: each job's finished items counted on the job (its progress without counting its
/// items: a progress poll of a 100,000-record job counted 100,000 items each time).
pub const V4_JOB_COUNTS: &str = "
ALTER TABLE replay_jobs ADD COLUMN replayed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE replay_jobs ADD COLUMN failed BIGINT NOT NULL DEFAULT 0;
ALTER TABLE replay_jobs ADD COLUMN cancelled BIGINT NOT NULL DEFAULT 0;
UPDATE replay_jobs SET
    replayed = (SELECT COUNT(*) FROM replay_items i WHERE i.job_id = replay_jobs.id AND i.state = 'REPLAYED'),
    failed = (SELECT COUNT(*) FROM replay_items i WHERE i.job_id = replay_jobs.id AND i.state = 'FAILED'),
    cancelled = (SELECT COUNT(*) FROM replay_items i WHERE i.job_id = replay_jobs.id AND i.state = 'CANCELLED');
{PG_AUTOVACUUM}
";

/// PostgreSQL: vacuum and analyze `dead_letters` after 2 % of its rows changed instead of 20 %
/// (a replay of 40,000 records out of 1,000,000 left its old index entries in place, and the
/// first list page by status after it made 40,000 heap visits: 480 ms).
const PG_AUTOVACUUM: &str = "ALTER TABLE dead_letters SET (autovacuum_vacuum_scale_factor = 0.02, \
    autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_insert_scale_factor = 0.02);";

/// Every migration with its version, in order. Versions are fixed numbers, not positions: a
/// build may lack one (branches merged apart take their numbers in advance), and the runner
/// applies each known migration whose version the database lacks, lower first.
const MIGRATIONS: &[(i64, &str)] = &[
    (1, V1),
    (2, V2_AUDIT_VHOSTS),
    (3, crate::summary::V3_GROUPS),
    (4, V4_JOB_COUNTS),
    (5, V5_INGEST),
    (6, V6_INDEX_DIET),
    (7, V7_SEARCH),
    (8, V8_HEADER_LINES),
    (9, V9_HEADER_INDEX),
    (10, V10_SUMMARY_KEYS),
    (11, crate::sparse_sort::V11),
    (12, V12_ERROR_TEXT),
    (13, V13_KEY_COPY),
    (15, V15_PG_COLLATION),
    (16, V16_STATUS_TIME),
    (18, V18_PG_PARTIAL),
    (19, V19_GROUP_SECONDS),
    (20, V20_ARCHIVER_SECONDS),
    (21, V21_GROUP_BOUNDS),
    (22, V22_HEADER_COLUMNS),
    (23, V23_SEARCH_FORGET),
    (24, V24_HEADER_TIMES),
    (25, V25_HEADER_KEYS),
    (26, V26_COPY_KEY_GIN),
    (28, V28_CREATED_ID),
    (29, V29_ERROR_GRAMS),
    (30, V30_GROUP_BOUNDS_FROM),
];

/// Migration 29 (rendered per dialect by [`crate::error_grams::v29`]).
const V29_ERROR_GRAMS: &str = "{V29_ERROR_GRAMS}";

/// Migration 28 (rendered per dialect by [`crate::pg_created_id::v28`]).
const V28_CREATED_ID: &str = "{V28_CREATED_ID}";

/// Migration 26 (rendered per dialect by [`crate::copy_key_gin::v26`]).
const V26_COPY_KEY_GIN: &str = "{V26_COPY_KEY_GIN}";

/// Migration 25 (rendered per dialect by [`crate::header_key_columns::v25`]).
const V25_HEADER_KEYS: &str = "{V25_HEADER_KEYS}";

/// Migration 22 (rendered per dialect by [`crate::header_columns::v22`]).
const V22_HEADER_COLUMNS: &str = "{V22_HEADER_COLUMNS}";

/// Migration 24 (rendered per dialect by [`crate::header_groups::v24`]).
const V24_HEADER_TIMES: &str = "{V24_HEADER_TIMES}";

/// Migration 23 (rendered per dialect by [`crate::search_forget::v23`]).
const V23_SEARCH_FORGET: &str = "{V23_SEARCH_FORGET}";

/// Migration 30 (rendered per dialect by [`crate::group_bounds::v30`]).
const V30_GROUP_BOUNDS_FROM: &str = "{V30_GROUP_BOUNDS_FROM}";

/// Migration 21 (rendered per dialect by [`crate::group_bounds::v21`]).
const V21_GROUP_BOUNDS: &str = "{V21_GROUP_BOUNDS}";

/// Migration 20 (rendered per dialect by [`crate::summary_seconds::v20`]).
const V20_ARCHIVER_SECONDS: &str = "{V20_ARCHIVER_SECONDS}";

/// Migration 19 (rendered per dialect by [`crate::summary_seconds::v19`]).
const V19_GROUP_SECONDS: &str = "{V19_GROUP_SECONDS}";

/// Migration 18 (rendered per dialect by [`crate::pg_partial::v18`]).
const V18_PG_PARTIAL: &str = "{V18_PG_PARTIAL}";

/// Migration 16 (rendered per dialect by [`crate::range_count::v16`]).
const V16_STATUS_TIME: &str = "{V16_STATUS_TIME}";

/// Migration 15 (rendered per dialect by [`crate::pg_collation::v15`]).
const V15_PG_COLLATION: &str = "{V15_PG_COLLATION}";

/// Migration 13 (rendered per dialect by [`crate::key_copy::v13`]).
const V13_KEY_COPY: &str = "{V13_KEY_COPY}";

/// Migration 12 (rendered per dialect by [`crate::error_text::v12`]).
const V12_ERROR_TEXT: &str = "{V12_ERROR_TEXT}";

/// Migration 10 (rendered per dialect by [`crate::summary_keys::v10`]).
const V10_SUMMARY_KEYS: &str = "{V10_SUMMARY_KEYS}";

/// Migration 9 (rendered per dialect by [`crate::header_index::v9`]).
const V9_HEADER_INDEX: &str = "{V9_HEADER_INDEX}";

/// Migration 8 (rendered per dialect by [`crate::header_lines::v8`]).
const V8_HEADER_LINES: &str = "{V8_HEADER_LINES}";

/// Migration 7 (rendered per dialect by [`crate::search_index::v7`]).
const V7_SEARCH: &str = "{V7_SEARCH}";

/// Migration 5 (rendered per dialect by [`crate::ingest::v5`]).
const V5_INGEST: &str = "{V5_INGEST}";

/// Migration 6 (rendered per dialect by [`crate::index_diet::v6`]).
const V6_INDEX_DIET: &str = "{V6_INDEX_DIET}";

fn render(sql: &str, d: Dialect) -> String {
    let (id, blob) = match d {
        Dialect::Sqlite => ("INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB"),
        Dialect::Postgres => ("BIGSERIAL PRIMARY KEY", "BYTEA"),
    };
    let pg = match d {
        Dialect::Sqlite => "",
        Dialect::Postgres => PG_AUTOVACUUM,
    };
    if sql == V5_INGEST {
        return crate::ingest::v5(d);
    }
    if sql == V6_INDEX_DIET {
        return crate::index_diet::v6(d);
    }
    if sql == V7_SEARCH {
        return crate::search_index::v7(d);
    }
    if sql == V9_HEADER_INDEX {
        return crate::header_index::v9(d);
    }
    if sql == V10_SUMMARY_KEYS {
        return crate::summary_keys::v10(d);
    }
    if sql == V12_ERROR_TEXT {
        return crate::error_text::v12(d);
    }
    if sql == V18_PG_PARTIAL {
        return crate::pg_partial::v18(d);
    }
    if sql == V19_GROUP_SECONDS {
        return crate::summary_seconds::v19(d);
    }
    if sql == V20_ARCHIVER_SECONDS {
        return crate::summary_seconds::v20(d);
    }
    if sql == V22_HEADER_COLUMNS {
        return crate::header_columns::v22(d);
    }
    if sql == V21_GROUP_BOUNDS {
        return crate::group_bounds::v21(d);
    }
    if sql == V30_GROUP_BOUNDS_FROM {
        return crate::group_bounds::v30(d);
    }
    if sql == V24_HEADER_TIMES {
        return crate::header_groups::v24(d);
    }
    if sql == V25_HEADER_KEYS {
        return crate::header_key_columns::v25(d);
    }
    if sql == V26_COPY_KEY_GIN {
        return crate::copy_key_gin::v26(d);
    }
    if sql == V29_ERROR_GRAMS {
        return crate::error_grams::v29(d);
    }
    if sql == V28_CREATED_ID {
        return crate::pg_created_id::v28(d);
    }
    if sql == V23_SEARCH_FORGET {
        return crate::search_forget::v23(d);
    }
    if sql == V16_STATUS_TIME {
        return crate::range_count::v16(d);
    }
    if sql == V13_KEY_COPY {
        return crate::key_copy::v13(d);
    }
    if sql == V15_PG_COLLATION {
        return crate::pg_collation::v15(d);
    }
    if sql == V8_HEADER_LINES {
        return crate::header_lines::v8(d);
    }
    crate::summary::render(
        &sql.replace("{ID}", id)
            .replace("{BLOB}", blob)
            .replace("{PG_AUTOVACUUM}", pg),
        d,
    )
}

/// The advisory lock key of the archive's migrations on PostgreSQL ("charon" in ASCII).
const PG_MIGRATION_LOCK: i64 = 0x6368_6172_6f6e;

/// Applies the migrations the database lacks; refuses a database from a newer Charon.
///
/// Each migration and its version row commit together, under a write lock taken before the version
/// is read again (SQLite `BEGIN IMMEDIATE`, PostgreSQL `LOCK TABLE`): a kill at any moment leaves the
/// database at a whole version, and two processes opening the same database at once apply each
/// migration once (the second sees the first's version and skips it).
pub fn migrate(c: &mut dyn Conn) -> Result<(), ArchiveError> {
    migrate_to(c, latest())
}

/// The number of the newest migration this build knows.
pub fn latest() -> i64 {
    MIGRATIONS.iter().map(|(v, _)| *v).max().unwrap_or(0)
}

/// [`migrate`], stopping at version `target` (tests build a database as an older Charon left it).
pub fn migrate_to(c: &mut dyn Conn, target: i64) -> Result<(), ArchiveError> {
    migrate_list(c, MIGRATIONS, target)
}

/// [`migrate_to`] over the migrations `list` (versions ascending).
fn migrate_list(c: &mut dyn Conn, list: &[(i64, &str)], target: i64) -> Result<(), ArchiveError> {
    const CREATE: &str = "CREATE TABLE IF NOT EXISTS archive_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)";
    match c.dialect() {
        Dialect::Sqlite => c.batch(CREATE)?,
        // PostgreSQL's `IF NOT EXISTS` races with itself (a unique violation in its catalogue); a
        // transaction-scoped advisory lock lets one opener create the table at a time.
        Dialect::Postgres => c.batch(&format!(
            "BEGIN; SELECT pg_advisory_xact_lock({PG_MIGRATION_LOCK}); {CREATE}; COMMIT"
        ))?,
    }
    let mut applied = Vec::new();
    loop {
        let begin = match c.dialect() {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN; LOCK TABLE archive_migrations IN EXCLUSIVE MODE",
        };
        c.batch(begin)?;
        match step(c, list, target) {
            Ok(Some(version)) => {
                c.batch("COMMIT")?;
                tracing::info!(version, "archive schema migrated");
                applied.push(version);
            }
            Ok(None) => {
                c.batch("COMMIT")?;
                vacuum_copied(c, &applied);
                return Ok(());
            }
            Err(e) => {
                let _ = c.batch("ROLLBACK");
                return Err(e);
            }
        }
    }
}

/// PostgreSQL tables a migration rebuilds by copying (22, 24 and 25: the header index rows with
/// their new columns; 29: the error-text copy with its stored `error_grams`). A copied table has an empty visibility map, so its index-only scans (the
/// header plans') fetch every row from the heap — 158–377 ms instead of 10–29 on 1M records —
/// until autovacuum comes by; the opener vacuums it once instead (~2 s on 1M). (The migrations
/// `ANALYZE` it themselves: the vacuum only sets the visibility map.)
const PG_COPIED: &[(i64, &str)] = &[
    (22, "dead_letter_search_header"),
    (24, "dead_letter_search_header"),
    (25, "dead_letter_search_header"),
    (29, "dead_letter_error_text"),
];

/// After migrations `applied`, `VACUUM` the tables they copied (PostgreSQL; outside
/// any transaction, one statement a call). A failure only costs speed until autovacuum: logged.
fn vacuum_copied(c: &mut dyn Conn, applied: &[i64]) {
    if c.dialect() != Dialect::Postgres {
        return;
    }
    let mut tables: Vec<&str> = PG_COPIED
        .iter()
        .filter(|(v, _)| applied.contains(v))
        .map(|(_, t)| *t)
        .collect();
    tables.dedup();
    for t in tables {
        if let Err(e) = c.batch(&format!("VACUUM {t}")) {
            tracing::warn!(table = t, error = %e, "could not vacuum a table a migration copied");
        }
    }
}

/// Inside the locked transaction: applies the lowest known migration up to `target` that the
/// database lacks (its version), or `None` when it has them all. A database holding a version
/// this build does not know (a newer Charon's, or a branch's this build lacks) is refused.
fn step(c: &mut dyn Conn, list: &[(i64, &str)], target: i64) -> Result<Option<i64>, ArchiveError> {
    let have: Vec<i64> = c
        .query(
            "SELECT version FROM archive_migrations ORDER BY version",
            &[],
        )?
        .iter()
        .filter_map(|r| r.first().and_then(|c| c.opt_int()))
        .collect();
    let known = list.iter().map(|(v, _)| *v).max().unwrap_or(0);
    if let Some(&found) = have.iter().find(|v| !list.iter().any(|(k, _)| k == *v)) {
        return Err(ArchiveError::TooNew { found, known });
    }
    let Some((version, m)) = list.iter().find(|(v, _)| *v <= target && !have.contains(v)) else {
        return Ok(None);
    };
    c.batch(&render(m, c.dialect()))?;
    c.exec(
        "INSERT INTO archive_migrations (version, applied_at) VALUES (?, ?)",
        &[(*version).into(), now_ms().into()],
    )?;
    Ok(Some(*version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn versions(c: &mut dyn Conn) -> Vec<i64> {
        c.query(
            "SELECT version FROM archive_migrations ORDER BY version",
            &[],
        )
        .expect("versions")
        .iter()
        .map(|r| r[0].int())
        .collect()
    }

    /// Branches take their migration numbers in advance and may be merged apart: a build that
    /// lacks version 2 still applies 3, a later build applies 2 after 3, and a database holding
    /// a version the build does not know is refused.
    #[test]
    fn a_later_version_applies_when_an_earlier_one_is_absent() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut c = crate::sqlite::Sqlite::open(&dir.path().join("m.db")).expect("open");
        let one = "CREATE TABLE t1 (x INTEGER)";
        let two = "CREATE TABLE t2 (x INTEGER)";
        let three = "CREATE TABLE t3 (x INTEGER)";
        migrate_list(&mut c, &[(1, one), (3, three)], 3).expect("1, 3");
        assert_eq!(versions(&mut c), vec![1, 3]);
        migrate_list(&mut c, &[(1, one), (2, two), (3, three)], 3).expect("2 after 3");
        assert_eq!(versions(&mut c), vec![1, 2, 3]);
        for t in ["t1", "t2", "t3"] {
            c.query(&format!("SELECT COUNT(*) FROM {t}"), &[])
                .expect("table");
        }
        let e = migrate_list(&mut c, &[(1, one), (3, three)], 3).expect_err("2 unknown");
        assert!(matches!(e, ArchiveError::TooNew { found: 2, .. }), "{e}");
    }
}
