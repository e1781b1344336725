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
//! finalized or that parameter is bound again. The statement here never leaves [`exec_each`]: it
//! is prepared there, finalized by a guard when the function returns (also on an error or a
//! panic), and every pointer bound to it points into `sets`, which the caller lends for the whole
//! call and nobody can change meanwhile. Texts are Rust strings (UTF-8, as `SQLITE_UTF8` needs);
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

/// Runs `sql` (one statement) once per parameter set, binding texts and blobs without copies;
/// returns the rows each run changed. Every set must bind every parameter of the statement.
#[allow(unsafe_code)]
pub(crate) fn exec_each(
    conn: &rusqlite::Connection,
    sql: &str,
    sets: &[&[Param]],
) -> Result<Vec<u64>, ArchiveError> {
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
    // SAFETY: a prepared statement.
    let count = unsafe { ffi::sqlite3_bind_parameter_count(stmt.0) };
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
                        stmt.0,
                        i,
                        s.as_ptr().cast(),
                        c_len(s.len())?,
                        ffi::SQLITE_STATIC(),
                    ),
                    Param::Text(Some(_)) => {
                        ffi::sqlite3_bind_text(stmt.0, i, c"".as_ptr(), 0, ffi::SQLITE_STATIC())
                    }
                    Param::Int(Some(v)) => ffi::sqlite3_bind_int64(stmt.0, i, *v),
                    Param::Text(None) | Param::Int(None) => ffi::sqlite3_bind_null(stmt.0, i),
                    Param::Bytes(b) => bind_blob(stmt.0, i, b)?,
                    Param::Shared(b) => bind_blob(stmt.0, i, b)?,
                }
            };
            if rc != ffi::SQLITE_OK {
                return Err(error(db, rc, "bind"));
            }
        }
        // SAFETY: a prepared statement with every parameter bound.
        let rc = unsafe { ffi::sqlite3_step(stmt.0) };
        if rc != ffi::SQLITE_DONE {
            let e = error(db, rc, "step");
            // SAFETY: as above; the statement is reset so that it releases what it holds.
            unsafe { ffi::sqlite3_reset(stmt.0) };
            return Err(e);
        }
        changed.push(conn.changes());
        // SAFETY: as above.
        unsafe { ffi::sqlite3_reset(stmt.0) };
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
