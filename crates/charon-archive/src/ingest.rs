//! The archiver's insert path (migration 5, docs/archive.md "Migration 5"): a batch of records as
//! multi-row INSERTs in one transaction (PostgreSQL: one binary COPY in a savepoint, the INSERTs
//! only when it fails, docs/archive.md "Fourteenth round"), and the summary (`dead_letter_groups`) counted once per
//! group per batch here instead of once per row by the insert trigger; since migration 20
//! (PostgreSQL) also the group summary per second (`dead_letter_group_seconds`, migration 19),
//! once per group and second per batch.
//!
//! The insert triggers stay for every other writer (a user's own SQL, the bench's fill): they
//! skip only while the transaction holds the row `summary_by_archiver` in `archive_counters`,
//! which [`insert_batch`] inserts first and deletes before its COMMIT, so no other connection
//! ever sees it.

use std::collections::{HashMap, HashSet};

use crate::error::ArchiveError;
use crate::extract::NewRecord;
use crate::record::status;
use crate::sql::{Conn, Dialect, Param, transaction};
use crate::summary::{Keys, key_expr_of, postgres_add, sqlite_add};
use crate::wal_sync::WalSync;

mod copy;
use copy::copy_batch;

/// The `archive_counters` row that tells the insert trigger the archiver counts its own batch.
pub const SUMMARY_FLAG: &str = "summary_by_archiver";

/// The summary's insert trigger on `dead_letters` (migration 3, again in migration 5).
const INSERT_TRIGGER: &str = "dead_letter_groups_insert";

/// Rows per multi-row INSERT (PostgreSQL: one round trip each; SQLite: one VDBE run per 100
/// rows instead of per row: 27 → 23 µs of CPU per record with the bench's dead letters,
/// `examples/ingest.rs`). SQLite prepares the statement again in every batch (the batch drops
/// and re-creates the insert trigger, see [`insert_trigger_aside`]): 100 rows cost less to
/// prepare than 250 (callgrind: 59,300 against 60,400 instructions per record on the writer).
const INSERT_CHUNK: usize = 100;
/// Columns per inserted row.
const INSERT_WIDTH: usize = 23;
const RECORD_COLS: &str = "stable_key, vhost, queue, original_queue, original_exchange, \
    original_routing_keys, reason, death_count, message_id, correlation_id, message_key, \
    content_type, properties, headers, amqp_properties, payload, payload_bytes, error_message, \
    error_stacktrace, error_fingerprint, status, created_at, updated_at";
/// Migration 5: an index for the `queue` filter in id order, the insert trigger that steps
/// aside for the archiver's batches, and (PostgreSQL) the large columns compressed with lz4
/// instead of pglz (where the server lacks lz4, PostgreSQL < 14 or built without it: records
/// kept uncompressed in their heap page up to 8 KB).
pub fn v5(d: Dialect) -> String {
    let flag = format!("SELECT 1 FROM archive_counters WHERE name = '{SUMMARY_FLAG}'");
    match d {
        Dialect::Sqlite => format!(
            "CREATE INDEX dead_letters_queue_id ON dead_letters (queue, id);
DROP TRIGGER dead_letter_groups_insert;
CREATE TRIGGER dead_letter_groups_insert AFTER INSERT ON dead_letters WHEN NOT EXISTS ({flag}) BEGIN {ins} END;",
            ins = sqlite_add(Keys::V3, "new")
        ),
        Dialect::Postgres => format!(
            "CREATE INDEX dead_letters_queue_id ON dead_letters (queue, id);
DO $do$ BEGIN
    EXECUTE 'ALTER TABLE dead_letters ALTER COLUMN payload SET COMPRESSION lz4, ALTER COLUMN headers SET COMPRESSION lz4, \
        ALTER COLUMN amqp_properties SET COMPRESSION lz4, ALTER COLUMN error_stacktrace SET COMPRESSION lz4, \
        ALTER COLUMN properties SET COMPRESSION lz4';
EXCEPTION WHEN OTHERS THEN
    ALTER TABLE dead_letters SET (toast_tuple_target = 8160);
END $do$;
CREATE OR REPLACE FUNCTION dead_letter_groups_insert() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF EXISTS ({flag}) THEN RETURN NULL; END IF; {ins} RETURN NULL; END $$;",
            ins = postgres_add(Keys::V3, "new_rows AS r")
        ),
    }
}

/// The INSERT of `rows` records; a record whose `stable_key` is archived already is skipped.
///
/// SQLite: `INSERT OR IGNORE`, which needs no statement journal (an `ON CONFLICT DO NOTHING`
/// keeps the NOT NULL columns' ABORT, so SQLite copied every page the statement touched first:
/// 4,300 instructions per record). It would also skip a row with a NULL in a NOT NULL column
/// (a [`NewRecord`] cannot have one): [`insert_prepared`] checks that every record of a
/// short chunk is in the table before it commits.
fn insert_sql(d: Dialect, rows: usize) -> String {
    let row = format!("({})", vec!["?"; INSERT_WIDTH].join(", "));
    let values = vec![row; rows].join(", ");
    match d {
        Dialect::Sqlite => {
            format!("INSERT OR IGNORE INTO dead_letters ({RECORD_COLS}) VALUES {values}")
        }
        Dialect::Postgres => format!(
            "INSERT INTO dead_letters ({RECORD_COLS}) VALUES {values} ON CONFLICT (stable_key) DO NOTHING"
        ),
    }
}

/// A record's parameters, in [`RECORD_COLS`] order (the body is shared, not copied). The texts
/// that only the INSERT needs are moved out of `r` (its headers JSON, stack trace, ids,
/// properties are left empty); what the batch reads afterwards stays: the stable key
/// ([`all_archived`], [`inserted_keys`]) and the summary's columns ([`Deltas::add`], since
/// migration 10 also the content type and exchange).
fn insert_params(r: &mut NewRecord, p: &mut Vec<Param>) {
    let take = |s: &mut Option<String>| Param::Text(s.take());
    p.extend([
        Param::from(r.stable_key.clone()),
        r.vhost.clone().into(),
        r.queue.clone().into(),
        r.original_queue.clone().into(),
        r.original_exchange.clone().into(),
        serde_json::to_string(&r.original_routing_keys)
            .unwrap_or_else(|_| "[]".into())
            .into(),
        r.reason.clone().into(),
        r.death_count.into(),
        take(&mut r.message_id),
        take(&mut r.correlation_id),
        take(&mut r.key),
        r.content_type.clone().into(),
        std::mem::take(&mut r.properties).into(),
        std::mem::take(&mut r.headers).into(),
        Param::Shared(r.amqp_properties.clone()),
        Param::Shared(r.payload.clone()),
        (r.payload.len() as i64).into(),
        r.error_message.clone().into(),
        take(&mut r.error_stacktrace),
        r.error_fingerprint.clone().into(),
        status::PENDING.into(),
        r.created_at.into(),
        r.created_at.into(),
    ]);
}

/// A group's key columns, as the summary has them since migration 10 (status: a new record is
/// PENDING): vhost, queue, original_queue, reason, error_fingerprint, content_type,
/// original_exchange.
type GroupKey<'a> = (
    &'a str,
    &'a str,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
);

/// What a batch adds to one group.
struct Delta<'a> {
    records: i64,
    oldest: i64,
    newest: i64,
    payload_bytes: i64,
    /// The first error message of the batch's records in the group (the trigger's sample).
    error_message: Option<&'a str>,
    /// Records per second (`floor(created_at / 1000)`) for the group summary per second
    /// (migration 20): a run of records in one second adds to the last entry, another second
    /// pushes one; [`Delta::second_counts`] merges the entries of a second.
    seconds: Vec<(i64, i64)>,
}

impl Delta<'_> {
    fn count_second(&mut self, created_at: i64) {
        let s = created_at.div_euclid(1000);
        match self.seconds.last_mut() {
            Some((last, n)) if *last == s => *n += 1,
            _ => self.seconds.push((s, 1)),
        }
    }

    /// The group's records per second, one entry per second.
    fn second_counts(&self) -> Vec<(i64, i64)> {
        let mut v = self.seconds.clone();
        v.sort_unstable_by_key(|(s, _)| *s);
        let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
        for (s, n) in v {
            match out.last_mut() {
                Some((last, m)) if *last == s => *m += n,
                _ => out.push((s, n)),
            }
        }
        out
    }
}

/// The new records of a batch counted per group, in the order groups first appear. Hashed with
/// foldhash (seeded per process, so header values cannot be chosen to collide): SipHash over the
/// seven key columns was ~1,500 instructions per record on the writer's thread.
#[derive(Default)]
struct Deltas<'a> {
    order: Vec<GroupKey<'a>>,
    by_group: HashMap<GroupKey<'a>, Delta<'a>, foldhash::fast::RandomState>,
}

impl<'a> Deltas<'a> {
    fn add(&mut self, r: &'a NewRecord) {
        let key = (
            r.vhost.as_str(),
            r.queue.as_str(),
            r.original_queue.as_deref(),
            r.reason.as_deref(),
            r.error_fingerprint.as_deref(),
            r.content_type.as_deref(),
            r.original_exchange.as_deref(),
        );
        let bytes = r.payload.len() as i64;
        match self.by_group.get_mut(&key) {
            Some(d) => {
                d.records += 1;
                d.oldest = d.oldest.min(r.created_at);
                d.newest = d.newest.max(r.created_at);
                d.payload_bytes += bytes;
                d.error_message = d.error_message.or(r.error_message.as_deref());
                d.count_second(r.created_at);
            }
            None => {
                self.order.push(key);
                let mut d = Delta {
                    records: 1,
                    oldest: r.created_at,
                    newest: r.created_at,
                    payload_bytes: bytes,
                    error_message: r.error_message.as_deref(),
                    seconds: Vec::new(),
                };
                d.count_second(r.created_at);
                self.by_group.insert(key, d);
            }
        }
    }

    /// One upsert per group (PostgreSQL: all groups in one statement, [`crate::pg_batch`]); the
    /// key expression is the summary's own, computed by the database.
    /// `keys`: the summary's key in this database (a database below migration 10 is written by
    /// tests only: the broker migrates at open). `seconds`: the database has migration 20 (its
    /// insert trigger leaves the archiver's batches to it), so the records per group and second
    /// are upserted too ([`crate::pg_batch::upsert_seconds`]).
    fn write(&self, c: &mut dyn Conn, keys: Keys, seconds: bool) -> Result<(), ArchiveError> {
        let (least, greatest) = match c.dialect() {
            Dialect::Sqlite => ("min", "max"),
            Dialect::Postgres => ("LEAST", "GREATEST"),
        };
        let v = keys
            .columns()
            .iter()
            .map(|c| format!("CAST(? AS TEXT) AS {c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO dead_letter_groups AS g ({cols}) \
             SELECT {k}, {vals}, v.records, v.oldest, v.newest, v.payload_bytes, v.error_message \
             FROM (SELECT {v}, CAST(? AS BIGINT) AS records, CAST(? AS BIGINT) AS oldest, \
             CAST(? AS BIGINT) AS newest, CAST(? AS BIGINT) AS payload_bytes, CAST(? AS TEXT) AS error_message) AS v WHERE true \
             ON CONFLICT (group_key) DO UPDATE SET records = g.records + excluded.records, oldest = {least}(g.oldest, excluded.oldest), \
             newest = {greatest}(g.newest, excluded.newest), payload_bytes = g.payload_bytes + excluded.payload_bytes, \
             error_message = COALESCE(g.error_message, excluded.error_message)",
            cols = keys.insert_cols(),
            vals = keys.list("v."),
            k = key_expr_of(keys, "v.")
        );
        let text = |s: Option<&str>| Param::Text(s.map(str::to_string));
        // PostgreSQL: every group's row in one statement (one round trip, not one per group).
        let mut rows: Vec<Vec<Param>> = Vec::new();
        let mut second_rows: Vec<Vec<Param>> = Vec::new();
        for key in &self.order {
            let Some(d) = self.by_group.get(key) else {
                continue;
            };
            let (vhost, queue, oq, reason, fp, ct, ox) = *key;
            let mut p: Vec<Param> =
                vec![vhost.into(), queue.into(), text(oq), text(reason), text(fp)];
            if keys == Keys::V10 {
                p.extend([text(ct), text(ox)]);
            }
            if seconds && keys == Keys::V10 {
                // Migration 20 comes after 10: the key is [`Keys::V10`]'s, status PENDING.
                for (s, n) in d.second_counts() {
                    let mut row = p.clone();
                    row.extend([status::PENDING.into(), s.into(), n.into()]);
                    second_rows.push(row);
                }
            }
            p.extend([
                status::PENDING.into(),
                d.records.into(),
                d.oldest.into(),
                d.newest.into(),
                d.payload_bytes.into(),
                text(d.error_message),
            ]);
            // Only with migration 10's key are the batch's groups (keyed by all seven
            // columns) the summary's rows: below it two of them may share one row, which one
            // multi-row upsert cannot update twice.
            if c.dialect() == Dialect::Postgres && keys == Keys::V10 {
                rows.push(p);
            } else {
                c.exec(&sql, &p)?;
            }
        }
        crate::pg_batch::upsert_groups(c, keys, &rows)?;
        crate::pg_batch::upsert_seconds(c, &second_rows)
    }
}

/// Records ready to insert: each record's parameters are built when it is pushed (string copies,
/// JSON of the properties and routing keys), so that the archiver builds them while the previous
/// batch is being written, not on the writer's thread.
#[derive(Debug, Default)]
pub struct Batch {
    /// The records, with only the stable key and the summary's columns left (see [`insert_params`]).
    records: Vec<NewRecord>,
    /// Parameters of [`INSERT_CHUNK`] records each (the last one fewer), in [`RECORD_COLS`] order.
    chunks: Vec<Vec<Param>>,
    /// Emptied chunks kept by [`Batch::clear`] for the next records.
    spare: Vec<Vec<Param>>,
}

impl Batch {
    /// Adds a record.
    pub fn push(&mut self, mut r: NewRecord) {
        if self.records.len().is_multiple_of(INSERT_CHUNK) {
            let chunk = self
                .spare
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(INSERT_CHUNK * INSERT_WIDTH));
            self.chunks.push(chunk);
        }
        if let Some(p) = self.chunks.last_mut() {
            insert_params(&mut r, p);
        }
        self.records.push(r);
    }

    /// An empty batch with room for `records` records.
    pub fn with_capacity(records: usize) -> Batch {
        Batch {
            records: Vec::with_capacity(records),
            ..Batch::default()
        }
    }

    /// Empties the batch and keeps its allocations for the next records: the archiver fills the
    /// batch it has written again, instead of fresh memory for every batch (megabytes, which the
    /// allocator returns to the OS in between: page faults and zeroing on every batch).
    pub fn clear(&mut self) {
        self.records.clear();
        for mut c in self.chunks.drain(..) {
            c.clear();
            self.spare.push(c);
        }
    }

    /// Records per INSERT chunk: [`Batch::move_front`] moves whole chunks.
    pub const CHUNK: usize = INSERT_CHUNK;

    /// Moves the batch's first `n` records, with their parameters, into `into` (emptied first;
    /// the spare memory of both stays where it is), in order; the records after them stay. `n`
    /// is rounded down to whole chunks of [`Batch::CHUNK`] records unless it is every record.
    /// Returns how many were moved. The archiver writes the front of its batch this way while
    /// the rest waits for the store (`charon-server`'s `archive/consumer.rs`).
    pub fn move_front(&mut self, n: usize, into: &mut Batch) -> usize {
        into.clear();
        let len = self.records.len();
        let n = if n >= len {
            len
        } else {
            n / INSERT_CHUNK * INSERT_CHUNK
        };
        if n == 0 {
            return 0;
        }
        into.records.extend(self.records.drain(..n));
        into.chunks
            .extend(self.chunks.drain(..n.div_ceil(INSERT_CHUNK)));
        n
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }
}

/// Inserts records in one transaction; a record whose `stable_key` exists is left alone (and not
/// counted again). Returns how many were new.
pub fn insert_batch(c: &mut dyn Conn, recs: &[NewRecord]) -> Result<u64, ArchiveError> {
    let mut b = Batch::default();
    recs.iter().cloned().for_each(|r| b.push(r));
    insert_prepared(c, &b)
}

/// [`insert_prepared`] with its COMMIT not waiting for the disk where the backend allows it
/// (SQLite, `wal_sync`): the batch is durable only once the returned [`WalSync`] has synced, so
/// its messages must not be acked before. `None`: durable when this returns (PostgreSQL).
pub fn insert_prepared_sync_later(
    c: &mut dyn Conn,
    batch: &Batch,
) -> Result<(u64, Option<WalSync>), ArchiveError> {
    let later = c.commit_unsynced(true)?;
    let r = insert_prepared(c, batch);
    let restored = c.commit_unsynced(false);
    let n = r?;
    restored?;
    Ok((n, later))
}

/// [`insert_batch`] of a [`Batch`] whose parameters are built already.
pub fn insert_prepared(c: &mut dyn Conn, batch: &Batch) -> Result<u64, ArchiveError> {
    let full = insert_sql(c.dialect(), INSERT_CHUNK);
    transaction(c, |c| {
        let trigger = insert_trigger_aside(c)?;
        c.exec(
            "INSERT INTO archive_counters (name, value) VALUES (?, 1) ON CONFLICT (name) DO NOTHING",
            &[SUMMARY_FLAG.into()],
        )?;
        // Ids are given in insertion order by the archive's single writer connection: a record
        // of this batch has an id above every record committed before it.
        // With the schema's version (the summary's key, see [`Deltas::write`]) and whether
        // migration 20 is in (the archiver counts its seconds) in the same query.
        let row = c.query(
            &format!(
                "SELECT COALESCE(MAX(id), 0), (SELECT MAX(version) FROM archive_migrations), \
                 (SELECT COUNT(*) FROM archive_migrations WHERE version = {}) FROM dead_letters",
                crate::summary_seconds::ARCHIVER_COUNTS
            ),
            &[],
        )?;
        let before = row.first().and_then(|r| r.first()).map_or(0, |x| x.int());
        let keys = match row.first().and_then(|r| r.get(1)).and_then(|x| x.opt_int()) {
            Some(v) if v < 10 => Keys::V3,
            _ => Keys::V10,
        };
        let seconds = c.dialect() == Dialect::Postgres
            && row.first().and_then(|r| r.get(2)).map_or(0, |x| x.int()) > 0;
        let mut deltas = Deltas::default();
        if let Some(n) = copy_batch(c, batch)? {
            batch.records.iter().for_each(|r| deltas.add(r));
            deltas.write(c, keys, seconds)?;
            return finish_batch(c, trigger, n);
        }
        let mut n = 0;
        let chunks: Vec<(&[NewRecord], &[Param])> = batch
            .records
            .chunks(INSERT_CHUNK)
            .zip(batch.chunks.iter().map(Vec::as_slice))
            .collect();
        // The full chunks through one statement (SQLite: bound without copies), then the rest.
        let full_sets: Vec<&[Param]> = chunks
            .iter()
            .filter(|(rows, _)| rows.len() == INSERT_CHUNK)
            .map(|(_, p)| *p)
            .collect();
        let mut counts = c.exec_each(&full, &full_sets)?.into_iter();
        for (rows, p) in &chunks {
            let added = if rows.len() == INSERT_CHUNK {
                counts.next().unwrap_or(0)
            } else {
                c.exec(&insert_sql(c.dialect(), rows.len()), p)?
            };
            n += added;
            if added < rows.len() as u64 {
                all_archived(c, rows)?;
            }
            if added == rows.len() as u64 {
                rows.iter().for_each(|r| deltas.add(r));
            } else if added > 0 {
                // Some were archived before (a redelivery after a crash): count only the new.
                let new = inserted_keys(c, before, rows)?;
                rows.iter()
                    .filter(|r| new.contains(&r.stable_key))
                    .for_each(|r| deltas.add(r));
            }
        }
        deltas.write(c, keys, seconds)?;
        finish_batch(c, trigger, n)
    })
}

/// The end of a batch's transaction: the flag row goes, the insert trigger comes back.
fn finish_batch(c: &mut dyn Conn, trigger: Option<String>, n: u64) -> Result<u64, ArchiveError> {
    c.exec(
        "DELETE FROM archive_counters WHERE name = ?",
        &[SUMMARY_FLAG.into()],
    )?;
    if let Some(sql) = trigger {
        c.batch(&sql)?;
    }
    Ok(n)
}

/// SQLite: takes the summary's insert trigger out of the schema for the rest of the batch's
/// transaction and returns its SQL (read from `sqlite_schema`, so exactly what is there), which
/// [`insert_prepared`] runs again before its COMMIT. While a table has a row trigger, SQLite
/// copies every row of a multi-row INSERT into a temporary table first (page splits of 3 KB
/// rows: ~17,000 instructions per record, docs/archive.md "Sixth round"); the archiver counts
/// its batch itself anyway. No other connection ever sees the table without the trigger (the
/// drop and the re-creation commit together, or neither does). PostgreSQL: `None` (its
/// statement trigger returns at once while the batch's flag row exists).
fn insert_trigger_aside(c: &mut dyn Conn) -> Result<Option<String>, ArchiveError> {
    if c.dialect() != Dialect::Sqlite {
        return Ok(None);
    }
    let sql = c
        .query(
            "SELECT sql FROM sqlite_schema WHERE type = 'trigger' AND name = ?",
            &[INSERT_TRIGGER.into()],
        )?
        .into_iter()
        .next()
        .and_then(|r| r.into_iter().next())
        .and_then(|x| x.opt_text());
    if sql.is_some() {
        c.batch(&format!("DROP TRIGGER {INSERT_TRIGGER}"))?;
    }
    Ok(sql)
}

/// Fails unless every record of `rows` is in the table (inserted now or archived before): a
/// row the INSERT skipped for another reason than its stable key must not be acked.
fn all_archived(c: &mut dyn Conn, rows: &[NewRecord]) -> Result<(), ArchiveError> {
    let keys: HashSet<&str> = rows.iter().map(|r| r.stable_key.as_str()).collect();
    let marks = vec!["?"; keys.len()].join(", ");
    let p: Vec<Param> = keys.iter().map(|k| Param::from(*k)).collect();
    let found = c
        .query(
            &format!("SELECT COUNT(*) FROM dead_letters WHERE stable_key IN ({marks})"),
            &p,
        )?
        .first()
        .and_then(|r| r.first())
        .map_or(0, |x| x.int());
    if found == keys.len() as i64 {
        Ok(())
    } else {
        Err(ArchiveError::Db(format!(
            "{} of {} records were neither inserted nor archived before",
            keys.len() as i64 - found,
            keys.len()
        )))
    }
}

/// Which of `rows`' stable keys this transaction inserted (ids above `before`).
fn inserted_keys(
    c: &mut dyn Conn,
    before: i64,
    rows: &[NewRecord],
) -> Result<HashSet<String>, ArchiveError> {
    let marks = vec!["?"; rows.len()].join(", ");
    let mut p: Vec<Param> = vec![before.into()];
    p.extend(rows.iter().map(|r| Param::from(r.stable_key.as_str())));
    Ok(c.query(
        &format!("SELECT stable_key FROM dead_letters WHERE id > ? AND stable_key IN ({marks})"),
        &p,
    )?
    .into_iter()
    .filter_map(|r| r.into_iter().next().and_then(|x| x.opt_text()))
    .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_groups_records_per_second_are_merged_and_floored() {
        let mut d = Delta {
            records: 0,
            oldest: 0,
            newest: 0,
            payload_bytes: 0,
            error_message: None,
            seconds: Vec::new(),
        };
        // Runs in one second, a second seen again after another, times before 1970.
        for t in [5_000, 5_999, 7_000, 5_500, -1, -1_000, -1_001, 7_001] {
            d.count_second(t);
        }
        assert_eq!(d.second_counts(), vec![(-2, 1), (-1, 2), (5, 3), (7, 2)]);
    }
}
