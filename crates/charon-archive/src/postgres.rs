//! The server backend: PostgreSQL through `postgres` (the blocking face of `tokio-postgres`),
//! used only from the archive's own blocking threads.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use postgres::types::{IsNull, ToSql, Type};

use crate::error::ArchiveError;
use crate::sql::{Cell, ColType, Conn, Dialect, Param};

/// A PostgreSQL connection.
pub struct Postgres {
    /// Always `Some` but while dropping.
    client: Option<postgres::Client>,
    /// Prepared statements by SQL text (one parse per distinct statement and connection).
    statements: HashMap<String, postgres::Statement>,
    /// The URL it was opened with (for [`Conn::take_beside`]).
    url: String,
    /// The second connection of [`Conn::take_beside`], between batches.
    beside: Option<Box<dyn Conn>>,
    /// When opening the second connection last failed: not tried again for [`BESIDE_RETRY`].
    beside_failed: Option<Instant>,
}

/// How long a connection that could not open its second connection ([`Conn::take_beside`])
/// works alone before it tries again (each try is a connection attempt per batch otherwise).
const BESIDE_RETRY: Duration = Duration::from_secs(60);

/// The second connection's `application_name` (seen in `pg_stat_activity`).
const BESIDE_NAME: &str = "charon archive copy";

/// At most this many prepared statements are kept (filters make SQL texts vary).
const STATEMENTS: usize = 256;

impl Drop for Postgres {
    fn drop(&mut self) {
        // `postgres::Client` blocks on its own runtime when dropped, which panics inside a
        // tokio runtime: let a thread of its own close it.
        if let Some(c) = self.client.take() {
            let _ = std::thread::Builder::new()
                .name("archive-pg-close".into())
                .spawn(move || drop(c));
        }
    }
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Postgres")
    }
}

impl Postgres {
    /// Connects to `url` (`postgresql://user:pass@host:port/db`).
    pub fn connect(url: &str) -> Result<Self, ArchiveError> {
        let client = postgres::Client::connect(url, postgres::NoTls)?;
        Ok(Postgres::with_client(client, url))
    }

    fn with_client(client: postgres::Client, url: &str) -> Self {
        Postgres {
            client: Some(client),
            statements: HashMap::new(),
            url: url.to_string(),
            beside: None,
            beside_failed: None,
        }
    }

    /// A second connection to the same database, named [`BESIDE_NAME`] unless the URL names it.
    fn connect_beside(url: &str) -> Result<Self, ArchiveError> {
        let mut cfg: postgres::Config = url.parse()?;
        if cfg.get_application_name().is_none() {
            cfg.application_name(BESIDE_NAME);
        }
        Ok(Postgres::with_client(cfg.connect(postgres::NoTls)?, url))
    }

    fn client(&mut self) -> Result<&mut postgres::Client, ArchiveError> {
        self.client
            .as_mut()
            .ok_or_else(|| ArchiveError::Db("connection closed".into()))
    }
}

/// `?` → `$1, $2, …` (the archive's SQL has no `?` inside literals).
fn renumber(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0;
    for ch in sql.chars() {
        if ch == '?' {
            n += 1;
            out.push('$');
            out.push_str(&n.to_string());
        } else {
            out.push(ch);
        }
    }
    out
}

/// Parameters are bound by reference, checked against the statement's types as their Rust
/// types would be (`Option<String>`, `Option<i64>`, bytes).
impl ToSql for Param {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Param::Text(s) => s.as_deref().to_sql(ty, out),
            Param::Int(i) => i.to_sql(ty, out),
            Param::Bytes(b) => b.as_slice().to_sql(ty, out),
            Param::Shared(b) => (&b[..]).to_sql(ty, out),
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn to_sql_checked(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Param::Text(s) => s.as_deref().to_sql_checked(ty, out),
            Param::Int(i) => i.to_sql_checked(ty, out),
            Param::Bytes(b) => b.as_slice().to_sql_checked(ty, out),
            Param::Shared(b) => (&b[..]).to_sql_checked(ty, out),
        }
    }
}

impl Postgres {
    /// The prepared statement of `sql` (`?` placeholders), prepared once per connection.
    fn statement(&mut self, sql: &str) -> Result<postgres::Statement, ArchiveError> {
        if let Some(st) = self.statements.get(sql) {
            return Ok(st.clone());
        }
        let st = self.client()?.prepare(&renumber(sql))?;
        if self.statements.len() >= STATEMENTS {
            self.statements.clear();
        }
        self.statements.insert(sql.to_string(), st.clone());
        Ok(st)
    }
}

impl Postgres {
    /// One binary `COPY table (cols) FROM STDIN` of `rows` (with `ids`: an `id` column first,
    /// row `i` getting `ids[i]`); the rows copied.
    fn copy_rows(
        &mut self,
        table: &str,
        cols: &str,
        types: &[ColType],
        ids: Option<&[i64]>,
        rows: &mut dyn Iterator<Item = &[Param]>,
    ) -> Result<u64, ArchiveError> {
        let types: Vec<Type> = ids
            .map(|_| Type::INT8)
            .into_iter()
            .chain(types.iter().map(|t| match t {
                ColType::Text => Type::TEXT,
                ColType::Int => Type::INT8,
                ColType::Bytes => Type::BYTEA,
            }))
            .collect();
        let sql = match ids {
            Some(_) => format!("COPY {table} (id, {cols}) FROM STDIN (FORMAT binary)"),
            None => format!("COPY {table} ({cols}) FROM STDIN (FORMAT binary)"),
        };
        let writer = self.client()?.copy_in(sql.as_str())?;
        let mut w = postgres::binary_copy::BinaryCopyInWriter::new(writer, &types);
        let mut ids = ids.map(|i| i.iter());
        let mut values: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(types.len());
        for row in rows {
            values.clear();
            if let Some(ids) = ids.as_mut() {
                // Dropped unfinished on an error: the copy is aborted (the transaction fails).
                let id = ids
                    .next()
                    .ok_or_else(|| ArchiveError::Db("COPY: fewer ids than rows".into()))?;
                values.push(id);
            }
            values.extend(row.iter().map(|p| p as &(dyn ToSql + Sync)));
            w.write(&values)?;
        }
        Ok(w.finish()?)
    }
}

fn refs(p: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    p.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

fn cell(row: &postgres::Row, i: usize) -> Result<Cell, ArchiveError> {
    let t = row.columns()[i].type_().clone();
    let c = if t == Type::INT8 {
        row.try_get::<_, Option<i64>>(i)?.map(Cell::Int)
    } else if t == Type::INT4 {
        row.try_get::<_, Option<i32>>(i)?
            .map(|v| Cell::Int(i64::from(v)))
    } else if t == Type::INT2 {
        row.try_get::<_, Option<i16>>(i)?
            .map(|v| Cell::Int(i64::from(v)))
    } else if t == Type::NUMERIC {
        // SUM(bigint) is numeric: read as text.
        row.try_get::<_, Option<String>>(i)
            .ok()
            .flatten()
            .map(|s| Cell::Int(s.split('.').next().unwrap_or("0").parse().unwrap_or(0)))
    } else if t == Type::BYTEA {
        row.try_get::<_, Option<Vec<u8>>>(i)?.map(Cell::Bytes)
    } else if t == Type::BOOL {
        row.try_get::<_, Option<bool>>(i)?
            .map(|b| Cell::Int(i64::from(b)))
    } else {
        row.try_get::<_, Option<String>>(i)?.map(Cell::Text)
    };
    Ok(c.unwrap_or(Cell::Null))
}

impl Conn for Postgres {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn exec(&mut self, sql: &str, p: &[Param]) -> Result<u64, ArchiveError> {
        let st = self.statement(sql)?;
        Ok(self.client()?.execute(&st, &refs(p))?)
    }

    fn copy_in(
        &mut self,
        table: &str,
        cols: &str,
        types: &[ColType],
        rows: &mut dyn Iterator<Item = &[Param]>,
    ) -> Result<Option<u64>, ArchiveError> {
        self.copy_rows(table, cols, types, None, rows).map(Some)
    }

    fn copy_in_ids(
        &mut self,
        table: &str,
        cols: &str,
        types: &[ColType],
        ids: &[i64],
        rows: &mut dyn Iterator<Item = &[Param]>,
    ) -> Result<Option<u64>, ArchiveError> {
        self.copy_rows(table, cols, types, Some(ids), rows)
            .map(Some)
    }

    fn take_beside(&mut self) -> Option<Box<dyn Conn>> {
        if let Some(b) = self.beside.take().filter(|b| !b.is_broken()) {
            return Some(b);
        }
        if self
            .beside_failed
            .is_some_and(|t| t.elapsed() < BESIDE_RETRY)
        {
            return None;
        }
        match Postgres::connect_beside(&self.url) {
            Ok(p) => {
                self.beside_failed = None;
                Some(Box::new(p))
            }
            Err(e) => {
                tracing::warn!(error = %e, "archive: no second PostgreSQL connection; batches are copied on one");
                self.beside_failed = Some(Instant::now());
                None
            }
        }
    }

    fn put_beside(&mut self, beside: Box<dyn Conn>) {
        self.beside = Some(beside);
    }

    fn query(&mut self, sql: &str, p: &[Param]) -> Result<Vec<Vec<Cell>>, ArchiveError> {
        let st = self.statement(sql)?;
        let rows = self.client()?.query(&st, &refs(p))?;
        rows.iter()
            .map(|r| (0..r.len()).map(|i| cell(r, i)).collect())
            .collect()
    }

    fn batch(&mut self, sql: &str) -> Result<(), ArchiveError> {
        self.client()?.batch_execute(sql)?;
        Ok(())
    }

    fn is_broken(&self) -> bool {
        self.client.as_ref().is_none_or(postgres::Client::is_closed)
    }

    fn insert_id(&mut self, sql: &str, p: &[Param]) -> Result<i64, ArchiveError> {
        let rows = self.query(&format!("{sql} RETURNING id"), p)?;
        Ok(rows.first().and_then(|r| r.first()).map_or(0, Cell::int))
    }
}
