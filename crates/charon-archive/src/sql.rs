//! The little the archive needs from a SQL connection, so that every operation is written once
//! for both backends: parameters, result cells, and the dialect's differences.

use crate::error::ArchiveError;
use crate::wal_sync::WalSync;

/// A bound parameter (write `?` in the SQL; PostgreSQL's adapter renumbers them `$n`).
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// Text, or NULL.
    Text(Option<String>),
    /// 64-bit integer, or NULL.
    Int(Option<i64>),
    /// Bytes.
    Bytes(Vec<u8>),
    /// Bytes shared with the caller (a message body: bound without a copy).
    Shared(bytes::Bytes),
}

impl Param {
    /// The bytes of a `Bytes` or `Shared` parameter.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Param::Bytes(b) => Some(b),
            Param::Shared(b) => Some(b),
            _ => None,
        }
    }
}

impl From<&str> for Param {
    fn from(s: &str) -> Self {
        Param::Text(Some(s.to_string()))
    }
}
impl From<String> for Param {
    fn from(s: String) -> Self {
        Param::Text(Some(s))
    }
}
impl From<Option<String>> for Param {
    fn from(s: Option<String>) -> Self {
        Param::Text(s)
    }
}
impl From<i64> for Param {
    fn from(i: i64) -> Self {
        Param::Int(Some(i))
    }
}
impl From<Option<i64>> for Param {
    fn from(i: Option<i64>) -> Self {
        Param::Int(i)
    }
}

/// A column's type, for a bulk copy ([`Conn::copy_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    /// `TEXT`.
    Text,
    /// `BIGINT`.
    Int,
    /// `BLOB` / `BYTEA`.
    Bytes,
}

/// A result cell.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// NULL.
    Null,
    /// Integer.
    Int(i64),
    /// Text.
    Text(String),
    /// Bytes.
    Bytes(Vec<u8>),
}

impl Cell {
    /// As an integer (0 when NULL or not one).
    pub fn int(&self) -> i64 {
        self.opt_int().unwrap_or(0)
    }
    /// As an integer when it is one.
    pub fn opt_int(&self) -> Option<i64> {
        match self {
            Cell::Int(i) => Some(*i),
            Cell::Text(t) => t.parse().ok(),
            _ => None,
        }
    }
    /// As text when it is text.
    pub fn opt_text(&self) -> Option<String> {
        match self {
            Cell::Text(t) => Some(t.clone()),
            Cell::Int(i) => Some(i.to_string()),
            Cell::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Cell::Null => None,
        }
    }
    /// As text ("" when NULL).
    pub fn text(&self) -> String {
        self.opt_text().unwrap_or_default()
    }
    /// As bytes.
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            Cell::Bytes(b) => b.clone(),
            Cell::Text(t) => t.clone().into_bytes(),
            _ => Vec::new(),
        }
    }
}

/// Which SQL the connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite 3.
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

impl Dialect {
    /// `text` contains `needle` (a `?` parameter), case-sensitively.
    pub fn contains(self, col: &str) -> String {
        match self {
            Dialect::Sqlite => format!("instr({col}, ?) > 0"),
            Dialect::Postgres => format!("strpos({col}, ?) > 0"),
        }
    }
    /// Bytes column `col` contains the bytes parameter.
    pub fn bytes_contain(self, col: &str) -> String {
        match self {
            Dialect::Sqlite => format!("instr({col}, ?) > 0"),
            Dialect::Postgres => format!("position(? in {col}) > 0"),
        }
    }
    /// The JSON text of key `?` of JSON object column `col` (strings unquoted, booleans `true` /
    /// `false` as PostgreSQL's `->>` gives them; SQLite's `json_extract` made them 1 and 0). On
    /// SQLite through `json_each`, so that a key with `"` or `.` in it is found too.
    pub fn json_field(self, col: &str) -> String {
        match self {
            Dialect::Sqlite => format!(
                "(SELECT CASE j.type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE CAST(j.value AS TEXT) END \
                 FROM json_each({col}) AS j WHERE j.key = ?)"
            ),
            Dialect::Postgres => format!("(({col})::jsonb ->> ?)"),
        }
    }
}

/// A connection: statements with parameters, and rows of cells.
pub trait Conn: Send {
    /// Its dialect.
    fn dialect(&self) -> Dialect;
    /// Runs a statement; the number of rows it changed.
    fn exec(&mut self, sql: &str, params: &[Param]) -> Result<u64, ArchiveError>;
    /// Runs one statement once per parameter set (the archiver's chunks of rows); the rows
    /// each run changed. SQLite binds the values in place, without copies (`sqlite_static`).
    fn exec_each(&mut self, sql: &str, sets: &[&[Param]]) -> Result<Vec<u64>, ArchiveError> {
        sets.iter().map(|p| self.exec(sql, p)).collect()
    }
    /// Copies `rows` (each one value per column of `cols`, of `types`) into `table` in bulk
    /// (PostgreSQL: one binary `COPY … FROM STDIN`, no statement to parse and no per-row
    /// conflict check: a row that breaks a constraint fails the whole copy). `None`: the
    /// backend has no bulk path (SQLite); nothing was done.
    fn copy_in(
        &mut self,
        table: &str,
        cols: &str,
        types: &[ColType],
        rows: &mut dyn Iterator<Item = &[Param]>,
    ) -> Result<Option<u64>, ArchiveError> {
        let _ = (table, cols, types, rows);
        Ok(None)
    }
    /// `true`: this connection's next commits may return before they are on disk, and what
    /// makes them durable is returned (SQLite: `synchronous=NORMAL` and a [`WalSync`]); `false`:
    /// commits are durable when they return again. `None`: they always are (PostgreSQL).
    fn commit_unsynced(&mut self, on: bool) -> Result<Option<WalSync>, ArchiveError> {
        let _ = on;
        Ok(None)
    }
    /// Runs a query; its rows.
    fn query(&mut self, sql: &str, params: &[Param]) -> Result<Vec<Vec<Cell>>, ArchiveError>;
    /// Runs several statements without parameters (DDL).
    fn batch(&mut self, sql: &str) -> Result<(), ArchiveError>;
    /// Inserts and returns the new row's id (`RETURNING id` / `last_insert_rowid`).
    fn insert_id(&mut self, sql: &str, params: &[Param]) -> Result<i64, ArchiveError>;
    /// Whether the connection is lost for good (reconnect).
    fn is_broken(&self) -> bool {
        false
    }
}

/// ` OFFSET n` for a statement's tail, or nothing for 0.
pub fn offset(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" OFFSET {n}")
    }
}

/// Runs `f` in a transaction: committed when it returns `Ok`, rolled back otherwise.
pub fn transaction<C: Conn + ?Sized, T>(
    c: &mut C,
    f: impl FnOnce(&mut C) -> Result<T, ArchiveError>,
) -> Result<T, ArchiveError> {
    transaction_from("BEGIN", c, f)
}

/// Runs the reads of `f` in one snapshot: SQLite's deferred `BEGIN` (its first read fixes the
/// WAL snapshot), PostgreSQL's `REPEATABLE READ READ ONLY` (one snapshot for every statement).
pub fn read_snapshot<C: Conn + ?Sized, T>(
    c: &mut C,
    f: impl FnOnce(&mut C) -> Result<T, ArchiveError>,
) -> Result<T, ArchiveError> {
    let begin = match c.dialect() {
        Dialect::Sqlite => "BEGIN",
        Dialect::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    };
    transaction_from(begin, c, f)
}

/// [`transaction`] opened by the statement `begin`.
fn transaction_from<C: Conn + ?Sized, T>(
    begin: &str,
    c: &mut C,
    f: impl FnOnce(&mut C) -> Result<T, ArchiveError>,
) -> Result<T, ArchiveError> {
    c.batch(begin)?;
    match f(c) {
        Ok(v) => {
            c.batch("COMMIT")?;
            Ok(v)
        }
        Err(e) => {
            let _ = c.batch("ROLLBACK");
            Err(e)
        }
    }
}
