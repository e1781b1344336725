//! PostgreSQL: statistics for the tables a replay job's steps touch, gathered when a big job
//! starts instead of waiting for autovacuum (docs/archive.md, "Replay"), on the readers' connection.
//!
//! Every step of a job updates its items by `job_id = ? AND record_id IN (…)` and its records'
//! status, which fires the summary trigger (each touched group's new oldest/newest record) and
//! the error-text copy's trigger (a join of the changed rows with `dead_letter_error_text`).
//! Planned without statistics — a table just filled, before autovacuum's analyze came — each of
//! them read a whole table or range per statement: the primary key of `replay_items` scanned on
//! `job_id` alone (all the job's items), a group's bound by a bitmap scan of the group's whole
//! range instead of one index seek, the copy by a sequential scan. A replay of 20,000 records
//! ran at 1.5k records/s with ~700 µs of database CPU a record, growing with the archive.

use crate::sql::{Conn, Dialect};

/// Jobs of at least this many records gather statistics ([`before_job`]).
pub(crate) const BIG_JOB: i64 = 500;

/// The tables analyzed when their statistics lag: none, or more than a fifth of the rows changed
/// since the last analyze (autovacuum's own rule is a tenth, checked once a minute).
const WATCHED: [&str; 2] = ["dead_letters", "dead_letter_error_text"];

/// Before job `job` replays its first records: when it has at least [`BIG_JOB`] records,
/// analyzes `replay_items` (it is small) and the watched tables whose statistics lag. SQLite and
/// small jobs: nothing. A failure only costs speed, so it is logged, not returned.
///
/// Run it on the readers' connection ([`crate::Archive::read`]), not the writers': an analyze of
/// a 1M-record `dead_letters` takes about a second, and on the writers' connection every
/// archiver and the API's changes would wait for it (the replay request itself answered only
/// after it: 4–10 s at load 10, branch `q9v`'s measurement). Analyzed from another session, the
/// statistics reach the writers' next statements all the same.
pub(crate) fn before_job(c: &mut dyn Conn, job: i64) {
    if c.dialect() != Dialect::Postgres {
        return;
    }
    let total = match c.query("SELECT total FROM replay_jobs WHERE id = ?", &[job.into()]) {
        Ok(rows) => rows.first().map_or(0, |r| r[0].int()),
        Err(e) => {
            tracing::warn!(error = %e, job, "could not read the replay job's size");
            return;
        }
    };
    if total < BIG_JOB {
        return;
    }
    if let Err(e) = analyze(c) {
        tracing::warn!(error = %e, "could not analyze the replay's tables");
    }
}

fn analyze(c: &mut dyn Conn) -> Result<(), crate::error::ArchiveError> {
    c.batch("ANALYZE replay_items")?;
    let names = WATCHED.map(|t| format!("'{t}'")).join(", ");
    let stale = c.query(
        &format!(
            "SELECT s.relname FROM pg_stat_user_tables s \
             WHERE s.schemaname = current_schema() AND s.relname IN ({names}) \
             AND (NOT EXISTS (SELECT 1 FROM pg_stats p WHERE p.schemaname = s.schemaname AND p.tablename = s.relname) \
             OR s.n_mod_since_analyze > s.n_live_tup / 5)"
        ),
        &[],
    )?;
    for row in stale {
        let name = row.first().map(|c| c.text()).unwrap_or_default();
        // Only names of the fixed list come back.
        if let Some(t) = WATCHED.iter().find(|t| **t == name) {
            c.batch(&format!("ANALYZE {t}"))?;
        }
    }
    Ok(())
}
