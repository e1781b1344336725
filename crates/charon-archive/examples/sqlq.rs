//! Times one SQL query on a SQLite archive with the bundled SQLite (the FTS5 tables need it):
//! `cargo run --release -p charon-archive --example sqlq -- /path/archive.db "SELECT …" [runs]`.
//! Prints `EXPLAIN QUERY PLAN`, the first row, the VM steps and full-scan steps of one run, and
//! the median and each run's wall-clock time (docs/archive.md "Twelfth round").

use std::time::Instant;

use rusqlite::{Connection, OpenFlags, StatementStatus};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(sql)) = (args.get(1), args.get(2)) else {
        return Err("usage: sqlq DB SQL [runs]".into());
    };
    let runs: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(5);
    let c = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let mmap: i64 = std::env::var("MMAP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(268_435_456);
    c.execute_batch(&format!(
        "PRAGMA cache_size = -65536; PRAGMA mmap_size = {mmap};"
    ))?;
    let got: i64 = c.query_row("PRAGMA mmap_size", [], |r| r.get(0))?;
    println!("mmap_size {got}");
    let mut plan = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
    let mut rows = plan.query([])?;
    while let Some(r) = rows.next()? {
        let detail: String = r.get(3)?;
        println!("plan: {detail}");
    }
    let mut times = Vec::new();
    for i in 0..runs {
        let mut st = c.prepare(sql)?;
        let t = Instant::now();
        let mut rows = st.query([])?;
        let mut n = 0u64;
        let mut first = String::new();
        while let Some(r) = rows.next()? {
            if n == 0 {
                first = format!("{:?}", r.get_ref(0)?);
            }
            n += 1;
        }
        drop(rows);
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if i == 0 {
            println!(
                "rows {n}, first {first}, vm steps {}, fullscan steps {}, sorts {}",
                st.get_status(StatementStatus::VmStep),
                st.get_status(StatementStatus::FullscanStep),
                st.get_status(StatementStatus::Sort)
            );
        }
        times.push(ms);
    }
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let each: Vec<String> = times.iter().map(|t| format!("{t:.1}")).collect();
    println!(
        "median {:.1} ms ({})",
        sorted[sorted.len() / 2],
        each.join(", ")
    );
    Ok(())
}
