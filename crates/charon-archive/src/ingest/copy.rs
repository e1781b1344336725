//! PostgreSQL's bulk path for the archiver's batches (docs/archive.md "Fourteenth round, ingest"):
//! the whole batch by binary `COPY` in a savepoint, falling back to the parent's `INSERT … ON
//! CONFLICT DO NOTHING` when a record was archived before (a redelivery after a crash).

use super::{Batch, INSERT_WIDTH, RECORD_COLS};
use crate::error::ArchiveError;
use crate::pg_batch::{copy_work_mem, param_bytes};
use crate::sql::{ColType, Conn, Dialect};

/// The types of [`RECORD_COLS`], for PostgreSQL's binary COPY ([`copy_batch`]).
const RECORD_TYPES: [ColType; INSERT_WIDTH] = {
    use ColType::{Bytes as B, Int as I, Text as T};
    [
        T, T, T, T, T, T, T, I, T, T, T, T, T, T, B, B, I, T, T, T, T, I, I,
    ]
};
/// The whole batch goes in by one COPY statement (two round trips). Until the nineteenth round
/// (docs/archive.md, branch `pg9t`) it was 1,000 records per COPY: the summary's statement
/// trigger keeps every row a statement inserts (its transition table, migration 3) and spilled
/// the whole batch (~12 MB of the bench's records) to a temporary file past the default
/// `work_mem` (4 MB). Now the batch's transaction sets `work_mem` to what its rows need
/// ([`copy_work_mem`]), so one COPY keeps them in memory, and the backend no longer idles
/// between four COPY statements (a prepare and a start each).
/// The savepoint a batch's COPY runs in: on a failure (a record archived before, after a
/// redelivery) the batch is inserted again row by row with `ON CONFLICT DO NOTHING`.
const COPY_SAVEPOINT: &str = "archive_copy";

/// Undoes a failed COPY and ends its savepoint (the INSERTs then run in the batch's transaction).
fn rollback_copy() -> String {
    format!("ROLLBACK TO SAVEPOINT {COPY_SAVEPOINT}; RELEASE SAVEPOINT {COPY_SAVEPOINT}")
}

/// PostgreSQL: the whole batch by one binary COPY, in a savepoint; `Some(n)`: every record
/// was new and is in. A COPY has no `ON CONFLICT`: a record whose stable key is archived
/// already (a redelivery after a crash) fails the whole COPY with a unique violation, so the
/// savepoint is rolled back and `None` returned: the caller inserts the batch with `ON
/// CONFLICT DO NOTHING` as before. Each record's parameters were built already, in
/// [`RECORD_COLS`] order ([`Batch::push`]). `None` at once on SQLite (no bulk path).
pub(super) fn copy_batch(c: &mut dyn Conn, batch: &Batch) -> Result<Option<u64>, ArchiveError> {
    if c.dialect() != Dialect::Postgres || batch.is_empty() {
        return Ok(None);
    }
    let bytes: u64 = batch.chunks.iter().map(|p| param_bytes(p)).sum();
    if let Some(set) = copy_work_mem(bytes, batch.len() as u64) {
        c.batch(&set)?;
    }
    c.batch(&format!("SAVEPOINT {COPY_SAVEPOINT}"))?;
    let mut rows = batch.chunks.iter().flat_map(|p| p.chunks(INSERT_WIDTH));
    let copied = c.copy_in("dead_letters", RECORD_COLS, &RECORD_TYPES, &mut rows);
    match copied {
        Ok(Some(n)) if n == batch.len() as u64 => {
            c.batch(&format!("RELEASE SAVEPOINT {COPY_SAVEPOINT}"))?;
            Ok(Some(n))
        }
        Ok(_) => {
            c.batch(&rollback_copy())?;
            Ok(None)
        }
        Err(e) => {
            // A lost connection fails the rollback too: its error is the batch's.
            if c.is_broken() {
                return Err(e);
            }
            tracing::debug!(error = %e, "archive batch: COPY failed, inserting row by row");
            c.batch(&rollback_copy()).map_err(|_| e)?;
            Ok(None)
        }
    }
}
