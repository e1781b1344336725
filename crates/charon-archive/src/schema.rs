//! The archive's tables (docs/archive.md) as versioned migrations, applied at open.

use crate::error::ArchiveError;
use crate::sql::{Conn, Dialect, transaction};
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

/// Every migration, in order (index + 1 = version).
const MIGRATIONS: &[&str] = &[V1];

fn render(sql: &str, d: Dialect) -> String {
    let (id, blob) = match d {
        Dialect::Sqlite => ("INTEGER PRIMARY KEY AUTOINCREMENT", "BLOB"),
        Dialect::Postgres => ("BIGSERIAL PRIMARY KEY", "BYTEA"),
    };
    sql.replace("{ID}", id).replace("{BLOB}", blob)
}

/// Applies the migrations the database lacks; refuses a database from a newer Charon.
pub fn migrate(c: &mut dyn Conn) -> Result<(), ArchiveError> {
    c.batch(
        "CREATE TABLE IF NOT EXISTS archive_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
    )?;
    let rows = c.query("SELECT MAX(version) FROM archive_migrations", &[])?;
    let have = rows
        .first()
        .and_then(|r| r.first())
        .and_then(|c| c.opt_int())
        .unwrap_or(0);
    let known = MIGRATIONS.len() as i64;
    if have > known {
        return Err(ArchiveError::TooNew { found: have, known });
    }
    for (i, m) in MIGRATIONS.iter().enumerate().skip(have as usize) {
        let sql = render(m, c.dialect());
        let version = i as i64 + 1;
        transaction(c, |c| {
            c.batch(&sql)?;
            c.exec(
                "INSERT INTO archive_migrations (version, applied_at) VALUES (?, ?)",
                &[version.into(), now_ms().into()],
            )?;
            Ok(())
        })?;
        tracing::info!(version, "archive schema migrated");
    }
    Ok(())
}
