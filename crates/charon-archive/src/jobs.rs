//! Replay jobs in the database: their records, progress, and the resolution of records a
//! restart interrupted (docs/archive.md, "Replay").

use serde_json::{Value, json};

use crate::error::ArchiveError;
use crate::ops::{Selection, audit};
use crate::record::{RECORD_COLUMNS, Record, status};
use crate::sql::{Conn, Param, transaction};
use crate::summary_batch::update_counted;
use crate::time::{format_ms, now_ms};

/// Job states.
pub mod state {
    /// Still replaying.
    pub const RUNNING: &str = "RUNNING";
    /// Every record was replayed or failed.
    pub const DONE: &str = "DONE";
    /// Cancelled by an operator.
    pub const CANCELLED: &str = "CANCELLED";
}

/// A job to run: its id and request (exchange, routing_key, rate, strip_death_headers, note).
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    /// Job id.
    pub id: i64,
    /// Who started it.
    pub created_by: String,
    /// The request.
    pub request: Value,
}

/// Creates a job for the selected records (in id order); audited. Returns (job id, records).
pub fn create(
    c: &mut dyn Conn,
    sel: &Selection,
    request: &Value,
    actor: &str,
) -> Result<(i64, i64), ArchiveError> {
    let (cond, p) = sel.to_sql(c)?;
    let note = request
        .get("note")
        .and_then(Value::as_str)
        .map(str::to_string);
    let (id, total) = transaction(c, |c| {
        let now = now_ms();
        let id = c.insert_id(
            "INSERT INTO replay_jobs (created_at, updated_at, created_by, state, request, total) VALUES (?, ?, ?, ?, ?, 0)",
            &[now.into(), now.into(), actor.into(), state::RUNNING.into(), request.to_string().into()],
        )?;
        let mut params = vec![Param::from(id), status::PENDING.into()];
        params.extend(p.iter().cloned());
        let total = c.exec(
            &format!(
                "INSERT INTO replay_items (job_id, record_id, seq, state) SELECT CAST(? AS BIGINT), id, id, CAST(? AS TEXT) FROM dead_letters WHERE {cond}"
            ),
            &params,
        )? as i64;
        c.exec(
            "UPDATE replay_jobs SET total = ? WHERE id = ?",
            &[total.into(), id.into()],
        )?;
        if total == 0 {
            c.exec(
                "UPDATE replay_jobs SET state = ? WHERE id = ?",
                &[state::DONE.into(), id.into()],
            )?;
        }
        audit(
            c,
            actor,
            "replay",
            sel,
            note.as_deref(),
            &json!({"job": id, "records": total}),
            Some(id),
        )?;
        Ok((id, total))
    })?;
    Ok((id, total))
}

/// Gathers the statistics a big job's steps are planned with (PostgreSQL; `plan_stats`): call it
/// on the readers' connection ([`crate::Archive::read`]) before the job's first step, so the
/// writers' connection (archivers, the API's changes) never waits for the analyze. Any job, also
/// one resumed after a restart; nothing for SQLite or a job under 500 records.
pub fn gather_statistics(c: &mut dyn Conn, job: i64) {
    crate::plan_stats::before_job(c, job);
}

/// Adds `n` to the job's counter `col` (`replayed`, `failed`, `cancelled`; migration 4).
fn count(c: &mut dyn Conn, job: i64, col: &str, n: u64) -> Result<(), ArchiveError> {
    if n > 0 {
        c.exec(
            &format!("UPDATE replay_jobs SET {col} = {col} + ? WHERE id = ?"),
            &[(n as i64).into(), job.into()],
        )?;
    }
    Ok(())
}

/// The job's audit row gets its outcome: replayed and failed counts, final state.
fn audit_outcome(c: &mut dyn Conn, job: i64) -> Result<(), ArchiveError> {
    let (state, total, replayed, failed, cancelled) = c
        .query(
            "SELECT state, total, replayed, failed, cancelled FROM replay_jobs WHERE id = ?",
            &[job.into()],
        )?
        .first()
        .map(|r| (r[0].text(), r[1].int(), r[2].int(), r[3].int(), r[4].int()))
        .unwrap_or_default();
    let result = json!({
        "job": job,
        "records": total,
        "state": state,
        "replayed": replayed,
        "failed": failed,
        "not_replayed": cancelled,
    });
    c.exec(
        "UPDATE dead_letter_audit SET result = ? WHERE job_id = ? AND action = 'replay'",
        &[result.to_string().into(), job.into()],
    )?;
    Ok(())
}

/// Running jobs (to resume at start).
pub fn running(c: &mut dyn Conn) -> Result<Vec<JobSpec>, ArchiveError> {
    let rows = c.query(
        "SELECT id, created_by, request FROM replay_jobs WHERE state = ? ORDER BY id",
        &[state::RUNNING.into()],
    )?;
    Ok(rows
        .iter()
        .map(|r| JobSpec {
            id: r[0].int(),
            created_by: r[1].text(),
            request: serde_json::from_str(&r[2].text()).unwrap_or(Value::Null),
        })
        .collect())
}

/// The job's next records to replay (PENDING items, in order), at most `n`. Their `properties`
/// and `headers` JSON views are left empty (`{}`): a replay sends the raw property bytes, and
/// reading and parsing the JSON was a good part of a replay's cost.
pub fn next(c: &mut dyn Conn, job: i64, n: u64) -> Result<Vec<Record>, ArchiveError> {
    let cols = RECORD_COLUMNS
        .split(", ")
        .map(|col| match col.trim() {
            "properties" | "headers" => "'{}'".to_string(),
            col => format!("d.{col}"),
        })
        .collect::<Vec<_>>()
        .join(", ");
    let rows = c.query(
        &format!(
            "SELECT {cols} FROM replay_items i JOIN dead_letters d ON d.id = i.record_id \
             WHERE i.job_id = ? AND i.state = ? ORDER BY i.seq LIMIT {n}"
        ),
        &[job.into(), status::PENDING.into()],
    )?;
    Ok(rows.iter().filter_map(|r| Record::from_row(r)).collect())
}

fn id_list(ids: &[i64]) -> (String, Vec<Param>) {
    (
        vec!["?"; ids.len()].join(", "),
        ids.iter().map(|i| Param::from(*i)).collect(),
    )
}

/// Before publishing `ids`: INFLIGHT with the store's last index `watermark`; the records
/// become PROCESSING. Committed before the publish.
pub fn inflight(
    c: &mut dyn Conn,
    job: i64,
    ids: &[i64],
    watermark: i64,
) -> Result<(), ArchiveError> {
    if ids.is_empty() {
        return Ok(());
    }
    let (marks, ps) = id_list(ids);
    transaction(c, |c| {
        let mut p = vec![Param::from("INFLIGHT"), watermark.into(), job.into()];
        p.extend(ps.iter().cloned());
        c.exec(
            &format!("UPDATE replay_items SET state = ?, watermark = ? WHERE job_id = ? AND record_id IN ({marks})"),
            &p,
        )?;
        let mut p = vec![Param::from(status::PROCESSING), now_ms().into()];
        p.extend(ps.iter().cloned());
        update_counted(
            c,
            &format!("UPDATE dead_letters SET status = ?, updated_at = ? WHERE id IN ({marks})"),
            &p,
            ids,
        )?;
        Ok(())
    })
}

/// Ids per set-based statement.
const SET_CHUNK: usize = 500;

/// After the publish was appended: each record's store index (-1: not stored). One statement
/// per chunk of records.
pub fn stored_at(c: &mut dyn Conn, job: i64, at: &[(i64, i64)]) -> Result<(), ArchiveError> {
    if at.is_empty() {
        return Ok(());
    }
    transaction(c, |c| {
        for chunk in at.chunks(SET_CHUNK) {
            let mut p: Vec<Param> = Vec::with_capacity(chunk.len() * 3 + 1);
            let mut cases = String::new();
            for (id, idx) in chunk {
                cases.push_str(" WHEN ? THEN CAST(? AS BIGINT)");
                p.push((*id).into());
                p.push((*idx).into());
            }
            p.push(job.into());
            let ids: Vec<i64> = chunk.iter().map(|(id, _)| *id).collect();
            let (marks, mut ps) = id_list(&ids);
            p.append(&mut ps);
            c.exec(
                &format!(
                    "UPDATE replay_items SET store_index = CASE record_id{cases} END WHERE job_id = ? AND record_id IN ({marks})"
                ),
                &p,
            )?;
        }
        Ok(())
    })
}

/// Marks `ids` of `job` with the same outcome: item state, record status, error (None: replayed).
fn settle(
    c: &mut dyn Conn,
    job: &JobSpec,
    ids: &[i64],
    err: Option<&str>,
    note: Option<&str>,
    now: i64,
) -> Result<(), ArchiveError> {
    let state = if err.is_some() {
        status::FAILED
    } else {
        status::REPLAYED
    };
    let replayed = i64::from(err.is_none());
    let note = err.or(note).map(str::to_string);
    let mut settled = 0u64;
    for chunk in ids.chunks(SET_CHUNK) {
        let (marks, ps) = id_list(chunk);
        let mut p = vec![
            Param::from(state),
            err.map(str::to_string).into(),
            job.id.into(),
        ];
        p.extend(ps.iter().cloned());
        settled += c.exec(
            &format!(
                "UPDATE replay_items SET state = ?, error = ? WHERE job_id = ? AND record_id IN ({marks})"
            ),
            &p,
        )?;
        let mut p = vec![
            Param::from(state),
            replayed.into(),
            replayed.into(),
            now.into(),
            job.created_by.clone().into(),
            note.clone().into(),
            now.into(),
        ];
        p.extend(ps);
        update_counted(
            c,
            &format!(
                "UPDATE dead_letters SET status = ?, replay_count = replay_count + ?, \
                 last_replayed_at = CASE WHEN CAST(? AS BIGINT) = 1 THEN CAST(? AS BIGINT) ELSE last_replayed_at END, \
                 resolved_by = ?, resolution_note = ?, updated_at = ? WHERE id IN ({marks})"
            ),
            &p,
            chunk,
        )?;
    }
    count(
        c,
        job.id,
        if err.is_some() { "failed" } else { "replayed" },
        settled,
    )?;
    Ok(())
}

/// After the confirms: each record REPLAYED (`Ok`) or FAILED with the reason; the job is DONE
/// when nothing is left. Set-based: one statement per outcome (and chunk of records).
pub fn finish(
    c: &mut dyn Conn,
    job: &JobSpec,
    results: &[(i64, Result<(), String>)],
) -> Result<(), ArchiveError> {
    let note = job
        .request
        .get("note")
        .and_then(Value::as_str)
        .map(str::to_string);
    let ok: Vec<i64> = results
        .iter()
        .filter(|(_, r)| r.is_ok())
        .map(|(id, _)| *id)
        .collect();
    // Failed ones by error text, in first-seen order.
    let mut failed: Vec<(&str, Vec<i64>)> = Vec::new();
    for (id, r) in results {
        if let Err(e) = r {
            match failed.iter_mut().find(|(t, _)| *t == e.as_str()) {
                Some((_, ids)) => ids.push(*id),
                None => failed.push((e.as_str(), vec![*id])),
            }
        }
    }
    let last_error = results.iter().rev().find_map(|(_, r)| r.as_ref().err());
    let ids: Vec<i64> = results.iter().map(|(id, _)| *id).collect();
    // The records' entries under the status they had before the replay died when they became
    // PROCESSING (`inflight`); the PROCESSING ones die with this transaction.
    let before: Vec<&str> = status::ALL
        .into_iter()
        .filter(|s| *s != status::PROCESSING)
        .collect();
    prune_status_entries(c, &ids, &before)?;
    transaction(c, |c| {
        let now = now_ms();
        if !ok.is_empty() {
            settle(c, job, &ok, None, note.as_deref(), now)?;
        }
        for (e, ids) in &failed {
            settle(c, job, ids, Some(e), note.as_deref(), now)?;
        }
        if let Some(e) = last_error {
            c.exec(
                "UPDATE replay_jobs SET last_error = ? WHERE id = ?",
                &[e.clone().into(), job.id.into()],
            )?;
        }
        // Whether any item is left: one index probe (counting them all after every batch made
        // a replay quadratic: 100,000 records, 5,000,000 index entries and heap visits).
        let left = c.query(
            "SELECT 1 FROM replay_items WHERE job_id = ? AND state IN ('PENDING', 'INFLIGHT') LIMIT 1",
            &[job.id.into()],
        )?;
        let done = left.is_empty();
        c.exec(
            "UPDATE replay_jobs SET updated_at = ?, state = CASE WHEN CAST(? AS BIGINT) = 1 AND state = 'RUNNING' THEN 'DONE' ELSE state END WHERE id = ?",
            &[now.into(), i64::from(done).into(), job.id.into()],
        )?;
        if done {
            audit_outcome(c, job.id)?;
        }
        Ok(())
    })?;
    prune_status_entries(c, &ids, &[status::PROCESSING])
}

/// PostgreSQL: scans `(status, id)` under each of `statuses` over the id ranges of `ids`, where
/// the records' old versions' index entries are dead since their status changed. The scan visits
/// each dead version once and marks its entry dead in the index, so the next page by status
/// skips it instead of visiting its heap row. Without this, the first list page by status after
/// a replay of 20,000 records visited all of them: 60 ms over 1,000,000 records, 3 ms for the
/// pages after it (autovacuum, which removes them, comes within a minute). Ranges, not the ids
/// (with `id IN (…)` the planner reads the primary key and never touches `(status, id)`); the
/// sorted ids are cut into runs no wider than 4 × their count + 64, so a scattered selection
/// does not scan the live records between (too many runs: left to autovacuum). SQLite keeps no dead versions (nothing to do).
fn prune_status_entries(
    c: &mut dyn Conn,
    ids: &[i64],
    statuses: &[&str],
) -> Result<(), ArchiveError> {
    if c.dialect() != crate::sql::Dialect::Postgres || ids.is_empty() {
        return Ok(());
    }
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    let mut runs: Vec<(i64, i64)> = Vec::new();
    let (mut lo, mut hi, mut n) = (sorted[0], sorted[0], 1i64);
    for &id in &sorted[1..] {
        if id - lo <= 4 * (n + 1) + 64 {
            hi = id;
            n += 1;
        } else {
            runs.push((lo, hi));
            (lo, hi, n) = (id, id, 1);
        }
    }
    runs.push((lo, hi));
    if runs.len() > 4 + sorted.len() / 64 {
        // Scattered records: a statement per few records costs more than it saves; autovacuum.
        return Ok(());
    }
    for (lo, hi) in runs {
        for s in statuses {
            c.query(
                "SELECT COUNT(*) FROM dead_letters WHERE status = ? AND id >= ? AND id <= ?",
                &[Param::from(*s), lo.into(), hi.into()],
            )?;
        }
    }
    Ok(())
}

/// INFLIGHT items whose fate the store's recovered last index `recovered` cannot decide: no
/// store index recorded and writes after their watermark survived. For each: (job, its request,
/// the record). The caller looks for the replayed message in its target queues.
pub fn undecided(
    c: &mut dyn Conn,
    recovered: Option<i64>,
) -> Result<Vec<(i64, Value, Record)>, ArchiveError> {
    let Some(l) = recovered else {
        return Ok(Vec::new());
    };
    let cols = RECORD_COLUMNS
        .split(", ")
        .map(|col| format!("d.{}", col.trim()))
        .collect::<Vec<_>>()
        .join(", ");
    let rows = c.query(
        &format!(
            "SELECT i.job_id, j.request, {cols} FROM replay_items i \
             JOIN dead_letters d ON d.id = i.record_id JOIN replay_jobs j ON j.id = i.job_id \
             WHERE i.state = 'INFLIGHT' AND i.store_index IS NULL AND i.watermark < ?"
        ),
        &[l.into()],
    )?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let request = serde_json::from_str(&r[1].text()).unwrap_or(Value::Null);
            Record::from_row(&r[2..]).map(|rec| (r[0].int(), request, rec))
        })
        .collect())
}

/// At start, before any publish: decides INFLIGHT items of every job against the store's
/// recovered last index `recovered` (None: the broker has no store): a recorded store index at
/// or below it is durable (REPLAYED), above it was lost (PENDING again); without an index,
/// `found` (the replayed message was seen in a target queue, see [`undecided`]) decides.
/// Returns (replayed, to publish again).
pub fn resolve_inflight(
    c: &mut dyn Conn,
    recovered: Option<i64>,
    found: &std::collections::HashSet<(i64, i64)>,
) -> Result<(u64, u64), ArchiveError> {
    let rows = c.query(
        "SELECT job_id, record_id, store_index FROM replay_items WHERE state = 'INFLIGHT'",
        &[],
    )?;
    let mut done: Vec<(i64, i64)> = Vec::new();
    let mut again: Vec<(i64, i64)> = Vec::new();
    let l = recovered.unwrap_or(-1);
    for r in rows {
        let (job, rec, idx) = (r[0].int(), r[1].int(), r[2].opt_int());
        let durable = match idx {
            Some(i) => i >= 0 && i <= l,
            None => found.contains(&(job, rec)),
        };
        if durable {
            done.push((job, rec));
        } else {
            again.push((job, rec));
        }
    }
    let by_job = |items: &[(i64, i64)]| {
        let mut m: std::collections::BTreeMap<i64, Vec<i64>> = std::collections::BTreeMap::new();
        for (job, rec) in items {
            m.entry(*job).or_default().push(*rec);
        }
        m
    };
    let (done_by_job, again_by_job) = (by_job(&done), by_job(&again));
    transaction(c, |c| {
        let now = now_ms();
        for (job, recs) in &done_by_job {
            for chunk in recs.chunks(SET_CHUNK) {
                let (marks, ps) = id_list(chunk);
                let mut p = vec![Param::from(*job)];
                p.extend(ps.iter().cloned());
                let n = c.exec(
                    &format!("UPDATE replay_items SET state = 'REPLAYED' WHERE job_id = ? AND state = 'INFLIGHT' AND record_id IN ({marks})"),
                    &p,
                )?;
                count(c, *job, "replayed", n)?;
                let mut p = vec![Param::from(now), now.into()];
                p.extend(ps);
                update_counted(
                    c,
                    &format!(
                        "UPDATE dead_letters SET status = 'REPLAYED', replay_count = replay_count + 1, last_replayed_at = ?, updated_at = ? WHERE id IN ({marks})"
                    ),
                    &p,
                    chunk,
                )?;
            }
        }
        for (job, recs) in &again_by_job {
            for chunk in recs.chunks(SET_CHUNK) {
                let (marks, ps) = id_list(chunk);
                let mut p = vec![Param::from(*job)];
                p.extend(ps);
                c.exec(
                    &format!("UPDATE replay_items SET state = 'PENDING', watermark = NULL, store_index = NULL WHERE job_id = ? AND record_id IN ({marks})"),
                    &p,
                )?;
            }
        }
        Ok(())
    })?;
    Ok((done.len() as u64, again.len() as u64))
}

/// Cancels a running job: its PENDING items are dropped (their records keep their status).
/// Returns whether it was running.
pub fn cancel(c: &mut dyn Conn, job: i64, actor: &str) -> Result<bool, ArchiveError> {
    transaction(c, |c| {
        let n = c.exec(
            "UPDATE replay_jobs SET state = ?, updated_at = ? WHERE id = ? AND state = ?",
            &[
                state::CANCELLED.into(),
                now_ms().into(),
                job.into(),
                state::RUNNING.into(),
            ],
        )?;
        if n == 0 {
            return Ok(false);
        }
        let dropped = c.exec(
            "UPDATE replay_items SET state = 'CANCELLED' WHERE job_id = ? AND state = 'PENDING'",
            &[job.into()],
        )?;
        count(c, job, "cancelled", dropped)?;
        audit(
            c,
            actor,
            "cancel",
            &Selection::Ids(Vec::new()),
            None,
            &json!({"job": job, "not_replayed": dropped}),
            Some(job),
        )?;
        audit_outcome(c, job)?;
        Ok(true)
    })
}

/// Whether the job is still running.
pub fn is_running(c: &mut dyn Conn, job: i64) -> Result<bool, ArchiveError> {
    let rows = c.query("SELECT state FROM replay_jobs WHERE id = ?", &[job.into()])?;
    Ok(rows.first().is_some_and(|r| r[0].text() == state::RUNNING))
}

/// A job's progress as JSON (None: no such job).
pub fn info(c: &mut dyn Conn, job: i64) -> Result<Option<Value>, ArchiveError> {
    let rows = c.query(
        "SELECT id, created_at, updated_at, created_by, state, request, total, last_error, replayed, failed, cancelled FROM replay_jobs WHERE id = ?",
        &[job.into()],
    )?;
    let Some(r) = rows.first() else {
        return Ok(None);
    };
    // Finished items are counted on the job (migration 4); the in-flight ones (at most a batch)
    // through `replay_items_state`; the rest is pending.
    let (total, replayed, failed, cancelled) = (r[6].int(), r[8].int(), r[9].int(), r[10].int());
    let inflight = c
        .query(
            "SELECT COUNT(*) FROM replay_items WHERE job_id = ? AND state = 'INFLIGHT'",
            &[job.into()],
        )?
        .first()
        .map_or(0, |r| r[0].int());
    let mut counts = serde_json::Map::new();
    counts.insert(
        "pending".into(),
        json!((total - replayed - failed - cancelled - inflight).max(0)),
    );
    counts.insert("inflight".into(), json!(inflight));
    counts.insert("replayed".into(), json!(replayed));
    counts.insert("failed".into(), json!(failed));
    counts.insert("cancelled".into(), json!(cancelled));
    let errors: Vec<Value> = c
        .query(
            "SELECT record_id, error FROM replay_items WHERE job_id = ? AND error IS NOT NULL ORDER BY seq LIMIT 100",
            &[job.into()],
        )?
        .iter()
        .map(|e| json!({"id": e[0].int(), "error": e[1].text()}))
        .collect();
    let request: Value = serde_json::from_str(&r[5].text()).unwrap_or(Value::Null);
    let (created, updated) = (r[1].int(), r[2].int());
    let finished = counts.get("replayed").and_then(Value::as_i64).unwrap_or(0)
        + counts.get("failed").and_then(Value::as_i64).unwrap_or(0);
    let secs = ((updated - created).max(1)) as f64 / 1000.0;
    let mut out = json!({
        "id": r[0].int(),
        "created_at": format_ms(created),
        "updated_at": format_ms(updated),
        "created_by": r[3].text(),
        "state": r[4].text(),
        "request": request,
        "rate": request.get("rate").cloned().unwrap_or(Value::Null),
        "measured_rate": (finished as f64 / secs * 10.0).round() / 10.0,
        "total": r[6].int(),
        "last_error": r[7].opt_text(),
        "errors": errors,
    });
    for (k, v) in counts {
        out[k] = v;
    }
    Ok(Some(out))
}

/// All jobs, newest first.
pub fn list(c: &mut dyn Conn) -> Result<Vec<Value>, ArchiveError> {
    let ids: Vec<i64> = c
        .query("SELECT id FROM replay_jobs ORDER BY id DESC LIMIT 100", &[])?
        .iter()
        .map(|r| r[0].int())
        .collect();
    let mut out = Vec::new();
    for id in ids {
        if let Some(j) = info(c, id)? {
            out.push(j);
        }
    }
    Ok(out)
}
