//! Prints the id query of a page sorted by a sparse column (`sparse_sort`, migration 11) and the
//! plain `ORDER BY` query, each with its plan and time, on an archive (docs/archive.md "Sixteenth
//! round"): `cargo run --release -p charon-archive --example sparse_plan -- URL SORT PAGE [k=v …]`.
//! URL is a SQLite path or a `postgresql://` URL; the plan is SQLite's `EXPLAIN QUERY PLAN` or
//! PostgreSQL's `EXPLAIN (ANALYZE, BUFFERS)`.

use std::time::Instant;

use charon_archive::filter::{Filter, order_by};
use charon_archive::sql::{Cell, Conn, Dialect, Param};
use charon_archive::{Archive, sparse_sort};

fn show(
    c: &mut dyn Conn,
    label: &str,
    sql: &str,
    p: &[Param],
) -> Result<(), Box<dyn std::error::Error>> {
    println!("== {label}\n{sql}");
    let explain = match c.dialect() {
        Dialect::Sqlite => "EXPLAIN QUERY PLAN",
        Dialect::Postgres => "EXPLAIN (ANALYZE, BUFFERS)",
    };
    for r in c.query(&format!("{explain} {sql}"), p)? {
        println!("  {}", r.last().map(Cell::text).unwrap_or_default());
    }
    let t = Instant::now();
    let rows = c.query(sql, p)?;
    let first: Vec<i64> = rows.iter().take(5).map(|r| r[0].int()).collect();
    println!(
        "  {} rows in {:.1} ms, first ids {first:?}",
        rows.len(),
        t.elapsed().as_secs_f64() * 1000.0
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(url), Some(sort), Some(page)) = (args.get(1), args.get(2), args.get(3)) else {
        return Err("usage: sparse_plan URL SORT PAGE [k=v …]".into());
    };
    let page: u64 = page.parse()?;
    let pairs: Vec<(&str, &str)> = args[4..].iter().filter_map(|a| a.split_once('=')).collect();
    let f = Filter::from_pairs(pairs)?;
    let a = Archive::open(url)?;
    a.with(|c| -> Result<(), Box<dyn std::error::Error>> {
        let (cond, p) = f.to_sql_on(c)?;
        let order = order_by(Some(sort))?;
        let total = c.query(
            &format!("SELECT COUNT(*) FROM dead_letters WHERE {cond}"),
            &p,
        )?[0][0]
            .int();
        let offset = (page - 1) * 100;
        let Some((sql, sp)) = sparse_sort::ids_query(
            c,
            &cond,
            &p,
            &order,
            total,
            f.terms.contains_key("since"),
            offset,
            100,
        )?
        else {
            return Err(format!("{sort} is not a sparse sort").into());
        };
        show(c, "sparse", &sql, &sp)?;
        let plain = format!(
            "SELECT id FROM dead_letters WHERE {cond} ORDER BY {order} LIMIT 100 OFFSET {offset}"
        );
        show(c, "plain", &plain, &p)?;
        Ok(())
    })
}
