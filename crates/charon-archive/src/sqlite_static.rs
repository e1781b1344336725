//! SQLite: one statement run once per parameter set with its texts and blobs bound in place
//! (`SQLITE_STATIC`) instead of copied (docs/archive.md "Ninth round").
//!
//! rusqlite binds every text and blob with `SQLITE_TRANSIENT`: SQLite first copies the value into
//! memory of its own (a malloc, a copy, a free at the next bind), and then copies it again into
//! the row it builds. For the archiver's INSERT that is the 1 KiB body, the properties as
//! received, the headers JSON and the stack trace of every record: ~10,000 of the writer's
//! ~58,000 instructions per record. rusqlite has no way to bind otherwise, so this module does
//! it through `rusqlite::ffi`.
//!
//! Why it is sound: SQLite may read a value bound with `SQLITE_STATIC` until the statement is
//! finalized, that parameter is bound again, or the bindings are cleared. Every pointer bound
//! points into `sets`, which the caller lends for the whole call and nobody can change
//! meanwhile; before [`exec_each`] returns (on success and on every error) the statement is
//! reset and its bindings cleared (`sqlite3_clear_bindings`: every parameter NULL again), so no
//! pointer into `sets` is held once the call is over. The statement itself is kept in a
//! [`StmtCache`] for the next call with the same SQL (the archiver's chunk INSERT, whose
//! prepare — the statement and every trigger on `dead_letters` compiled — cost ~1.8 M
//! instructions a batch, docs/archive.md "Twenty-fifth round"); it is finalized when the SQL
//! differs, after an error, or when the cache is dropped, which its owner does before the
//! connection. Texts are Rust strings (UTF-8, as `SQLITE_UTF8` needs);
//! lengths are checked to fit a C `int`; empty values are bound without a pointer (an empty
//! Rust string or `Bytes` may hold a dangling one). The connection is borrowed, so it outlives
//! the statement and is not used by anything else meanwhile.

use std::ffi::{CStr, c_int};

use rusqlite::ffi;

use crate::error::ArchiveError;
use crate::sql::Param;

/// A prepared statement that is finalized when dropped.
struct Stmt(*mut ffi::sqlite3_stmt);

impl Drop for Stmt {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: `self.0` came from `sqlite3_prepare_v2` (or is null, which finalize accepts)
        // and is finalized only here, once.
        unsafe {
            ffi::sqlite3_finalize(self.0);
        }
    }
}

/// The connection's last error as an [`ArchiveError`].
#[allow(unsafe_code)]
fn error(db: *mut ffi::sqlite3, rc: c_int, what: &str) -> ArchiveError {
    // SAFETY: `db` is an open connection; `sqlite3_errmsg` returns a NUL-terminated string that
    // stays valid until the next call on the connection, and it is copied out at once.
    let msg = unsafe { CStr::from_ptr(ffi::sqlite3_errmsg(db)) }
        .to_string_lossy()
        .into_owned();
    ArchiveError::Db(format!("{what}: {msg} (code {rc})"))
}

/// A length as SQLite's `int`.
fn c_len(n: usize) -> Result<c_int, ArchiveError> {
    c_int::try_from(n).map_err(|_| ArchiveError::Db(format!("a value of {n} bytes is too big")))
}

/// The last statement [`exec_each`] ran on a connection, kept for the next call with the same
/// SQL. Its owner drops it before the connection (a statement must be finalized first).
#[derive(Default)]
pub(crate) struct StmtCache(Option<(String, Stmt)>);

// SAFETY: the statement belongs to the connection whose owner holds this cache, and is used
// only through that owner (`&mut`), i.e. on one thread at a time with its connection, which
// SQLite (built thread-safe) allows from any thread; no binding outlives a call.
#[allow(unsafe_code)]
unsafe impl Send for StmtCache {}

/// Runs `sql` (one statement) once per parameter set, binding texts and blobs without copies;
/// returns the rows each run changed. Every set must bind every parameter of the statement.
/// The statement is prepared only when `cache` holds another one (or none).
#[allow(unsafe_code)]
pub(crate) fn exec_each(
    conn: &rusqlite::Connection,
    cache: &mut StmtCache,
    sql: &str,
    sets: &[&[Param]],
) -> Result<Vec<u64>, ArchiveError> {
    if cache.0.as_ref().is_none_or(|(s, _)| s != sql) {
        cache.0 = None;
        cache.0 = Some((sql.to_owned(), prepare(conn, sql)?));
    }
    let Some((_, stmt)) = cache.0.as_ref() else {
        return Err(ArchiveError::Db("no statement".into()));
    };
    let raw = stmt.0;
    let r = run(conn, raw, sets);
    // SAFETY: a prepared statement of `conn`; after this no binding points into `sets`
    // (module docs).
    unsafe {
        ffi::sqlite3_reset(raw);
        ffi::sqlite3_clear_bindings(raw);
    }
    if r.is_err() {
        cache.0 = None;
    }
    r
}

/// Prepares `sql` (one statement) on `conn`.
#[allow(unsafe_code)]
fn prepare(conn: &rusqlite::Connection, sql: &str) -> Result<Stmt, ArchiveError> {
    // SAFETY: the handle of an open connection, used only on this thread while `conn` is
    // borrowed; nothing here closes it.
    let db = unsafe { conn.handle() };
    let mut raw = std::ptr::null_mut();
    // SAFETY: `sql` is valid for `sql.len()` bytes (no NUL needed with an explicit length);
    // `raw` receives the statement, which the guard below finalizes.
    let rc = unsafe {
        ffi::sqlite3_prepare_v2(
            db,
            sql.as_ptr().cast(),
            c_len(sql.len())?,
            &mut raw,
            std::ptr::null_mut(),
        )
    };
    let stmt = Stmt(raw);
    if rc != ffi::SQLITE_OK || stmt.0.is_null() {
        return Err(error(db, rc, "prepare"));
    }
    Ok(stmt)
}

/// Binds and steps `raw` once per set; the caller resets it and clears its bindings after.
#[allow(unsafe_code)]
fn run(
    conn: &rusqlite::Connection,
    raw: *mut ffi::sqlite3_stmt,
    sets: &[&[Param]],
) -> Result<Vec<u64>, ArchiveError> {
    // SAFETY: the handle of the open connection `raw` belongs to.
    let db = unsafe { conn.handle() };
    // SAFETY: a prepared statement.
    let count = unsafe { ffi::sqlite3_bind_parameter_count(raw) };
    let mut changed = Vec::with_capacity(sets.len());
    for set in sets {
        if c_len(set.len())? != count {
            return Err(ArchiveError::Db(format!(
                "{} parameters for a statement of {count}",
                set.len()
            )));
        }
        for (i, p) in set.iter().enumerate() {
            let i = c_len(i + 1)?;
            // SAFETY: `i` is a parameter index of the statement (1..=count). The pointers are
            // into `set`, borrowed until after the statement is finalized (module docs);
            // `SQLITE_STATIC` (None) tells SQLite not to copy nor free them.
            let rc = unsafe {
                match p {
                    Param::Text(Some(s)) if !s.is_empty() => ffi::sqlite3_bind_text(
                        raw,
                        i,
                        s.as_ptr().cast(),
                        c_len(s.len())?,
                        ffi::SQLITE_STATIC(),
                    ),
                    Param::Text(Some(_)) => {
                        ffi::sqlite3_bind_text(raw, i, c"".as_ptr(), 0, ffi::SQLITE_STATIC())
                    }
                    Param::Int(Some(v)) => ffi::sqlite3_bind_int64(raw, i, *v),
                    Param::Text(None) | Param::Int(None) => ffi::sqlite3_bind_null(raw, i),
                    Param::Bytes(b) => bind_blob(raw, i, b)?,
                    Param::Shared(b) => bind_blob(raw, i, b)?,
                }
            };
            if rc != ffi::SQLITE_OK {
                return Err(error(db, rc, "bind"));
            }
        }
        // SAFETY: a prepared statement with every parameter bound.
        let rc = unsafe { ffi::sqlite3_step(raw) };
        if rc != ffi::SQLITE_DONE {
            let e = error(db, rc, "step");
            // SAFETY: as above; the statement is reset so that it releases what it holds.
            unsafe { ffi::sqlite3_reset(raw) };
            return Err(e);
        }
        changed.push(conn.changes());
        // SAFETY: as above.
        unsafe { ffi::sqlite3_reset(raw) };
    }
    Ok(changed)
}

/// Binds `b` as a blob in place (an empty one as a zero-length blob, without its pointer).
///
/// # Safety
/// `stmt` is a prepared statement with parameter `i`, and `b` stays valid and unchanged until
/// the statement is finalized or `i` is bound again.
#[allow(unsafe_code)]
unsafe fn bind_blob(
    stmt: *mut ffi::sqlite3_stmt,
    i: c_int,
    b: &[u8],
) -> Result<c_int, ArchiveError> {
    let n = c_len(b.len())?;
    // SAFETY: the caller's contract.
    Ok(unsafe {
        if n == 0 {
            ffi::sqlite3_bind_zeroblob(stmt, i, 0)
        } else {
            ffi::sqlite3_bind_blob(stmt, i, b.as_ptr().cast(), n, ffi::SQLITE_STATIC())
        }
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::CStr;

    use rusqlite::ffi;

    use super::{StmtCache, exec_each};
    use crate::sql::Param;

    /// The kept statement's SQL with its current bindings written in.
    #[allow(unsafe_code)]
    fn expanded(cache: &StmtCache) -> String {
        let Some((_, stmt)) = cache.0.as_ref() else {
            return "no statement".into();
        };
        // SAFETY: a prepared statement; the returned string is copied, then freed.
        unsafe {
            let p = ffi::sqlite3_expanded_sql(stmt.0);
            let s = CStr::from_ptr(p).to_string_lossy().into_owned();
            ffi::sqlite3_free(p.cast());
            s
        }
    }

    /// How many times the kept statement ran (`SQLITE_STMTSTATUS_RUN`).
    #[allow(unsafe_code)]
    fn runs(cache: &StmtCache) -> i32 {
        cache.0.as_ref().map_or(0, |(_, stmt)| {
            // SAFETY: a prepared statement.
            unsafe { ffi::sqlite3_stmt_status(stmt.0, ffi::SQLITE_STMTSTATUS_RUN, 0) }
        })
    }

    fn rows(conn: &rusqlite::Connection) -> Vec<(Option<String>, Vec<u8>, i64)> {
        let mut st = conn
            .prepare("SELECT a, b, n FROM t ORDER BY rowid")
            .expect("select");
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("rows")
    }

    #[test]
    fn a_kept_statement_runs_again_with_new_values_and_holds_no_binding() {
        let conn = rusqlite::Connection::open_in_memory().expect("db");
        conn.execute_batch(
            "CREATE TABLE t (a TEXT, b BLOB, n INTEGER); CREATE TABLE u (n INTEGER)",
        )
        .expect("schema");
        let mut cache = StmtCache::default();
        let sql = "INSERT INTO t VALUES (?, ?, ?)";
        let first = [
            Param::Text(Some("one".into())),
            Param::Shared(bytes::Bytes::from_static(b"\x01\x02")),
            Param::Int(Some(1)),
        ];
        assert_eq!(
            exec_each(&conn, &mut cache, sql, &[&first]).expect("first"),
            [1]
        );
        // Nothing of the caller's values is bound once the call is over.
        assert_eq!(expanded(&cache), "INSERT INTO t VALUES (NULL, NULL, NULL)");
        let a = [
            Param::Text(Some("two".into())),
            Param::Bytes(vec![3]),
            Param::Int(Some(2)),
        ];
        let b = [
            Param::Text(None),
            Param::Bytes(Vec::new()),
            Param::Int(Some(3)),
        ];
        assert_eq!(
            exec_each(&conn, &mut cache, sql, &[&a, &b]).expect("again"),
            [1, 1]
        );
        assert_eq!(runs(&cache), 3, "the same statement ran the three sets");
        assert_eq!(
            rows(&conn),
            [
                (Some("one".into()), vec![1, 2], 1),
                (Some("two".into()), vec![3], 2),
                (None, vec![], 3)
            ]
        );
        // Other SQL: another statement; a failed call leaves none kept.
        let n = [Param::Int(Some(7))];
        assert_eq!(
            exec_each(&conn, &mut cache, "INSERT INTO u VALUES (?)", &[&n]).expect("u"),
            [1]
        );
        assert_eq!(expanded(&cache), "INSERT INTO u VALUES (NULL)");
        assert!(
            exec_each(&conn, &mut cache, sql, &[&n]).is_err(),
            "one parameter of three"
        );
        assert!(cache.0.is_none(), "dropped after an error");
        // A schema change in between: SQLite prepares the kept statement again by itself.
        exec_each(&conn, &mut cache, "INSERT INTO u VALUES (?)", &[&n]).expect("u again");
        conn.execute_batch("ALTER TABLE u ADD COLUMN m INTEGER DEFAULT 5")
            .expect("alter");
        exec_each(&conn, &mut cache, "INSERT INTO u VALUES (?)", &[&n])
            .expect_err("two columns now");
        exec_each(&conn, &mut cache, "INSERT INTO u (n) VALUES (?)", &[&n]).expect("u (n)");
        let count: i64 = conn
            .query_row("SELECT COUNT(*) FROM u WHERE m = 5", [], |r| r.get(0))
            .expect("count");
        assert_eq!(count, 3);
        drop(cache);
        conn.close().expect("no statement left open");
    }
}
