//! The server backend: PostgreSQL through `postgres` (the blocking face of `tokio-postgres`),
//! used only from the archive's own blocking threads.

use std::collections::HashMap;

use postgres::types::{IsNull, ToSql, Type};

use crate::error::ArchiveError;
use crate::sql::{Cell, ColType, Conn, Dialect, Param};

/// A PostgreSQL connection.
pub struct Postgres {
    /// Always `Some` but while dropping.
    client: Option<postgres::Client>,
    /// Prepared statements by SQL text (one parse per distinct statement and connection).
    statements: HashMap<String, postgres::Statement>,
}

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
        let mut client = postgres::Client::connect(url, postgres::NoTls)?;
        // No JIT in the archive's sessions. The summary's statement triggers join the changed
        // rows' transition tables with `dead_letter_groups`, and the planner, which knows neither
        // table's size there, prices that join above `jit_above_cost` and `jit_optimize_above_cost`:
        // every replay step, skip or delete then compiled ~57 functions with LLVM, 1.5–1.7 s of
        // CPU a statement for a join that runs in under 10 ms (docs/archive.md, "JIT"). A `SET`
        // (not planned, so not compiled itself); a server older than 11 has no `jit` to set.
        match client.batch_execute("SET jit = off") {
            Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_OBJECT) => {}
            r => r?,
        }
        Ok(Postgres {
            client: Some(client),
            statements: HashMap::new(),
        })
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
        let types: Vec<Type> = types
            .iter()
            .map(|t| match t {
                ColType::Text => Type::TEXT,
                ColType::Int => Type::INT8,
                ColType::Bytes => Type::BYTEA,
            })
            .collect();
        let sql = format!("COPY {table} ({cols}) FROM STDIN (FORMAT binary)");
        let writer = self.client()?.copy_in(sql.as_str())?;
        let mut w = postgres::binary_copy::BinaryCopyInWriter::new(writer, &types);
        for row in rows {
            // Dropped unfinished on an error: the copy is aborted (the transaction fails).
            w.write(&refs(row))?;
        }
        Ok(Some(w.finish()?))
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
