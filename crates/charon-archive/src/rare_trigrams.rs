//! Which trigrams of a text filter's needle the SQLite search index looks up (docs/archive.md
//! "Twelfth round"): the rarest ones only, not all of them.
//!
//! FTS5 answers `"t1" "t2" …` by walking every listed trigram's doclist. A needle such as
//! `cause 5` has common trigrams (`cau`, `use`: in every record of a 1,000,000-record archive)
//! beside a rarer one (`e 5`: one record in ten), and the common doclists cost most of the
//! lookup (641–685 ms against 68 ms for `e 5` alone, branch `arc9l`). Each trigram's frequency
//! is estimated from two short reads of its doclist — the first and the last [`PROBE`] rowids: the
//! id span they cover — and the query keeps the rarest trigram and those at most [`SPREAD`]
//! times as frequent (at most [`KEEP`]). Probing stops at the first trigram found in fewer than
//! [`PROBE`] records: its candidates are already few.
//!
//! Exact whatever the estimate says: a subset of the needle's trigrams matches a superset of
//! the records the full set matches, and the filter's own condition (`instr` on the record)
//! still decides every candidate. The estimate only decides how fast.

use crate::error::ArchiveError;
use crate::search_index::{Field, push_token};
use crate::sql::{Cell, Conn, Dialect, Param};

/// Rowids read from each end of a trigram's doclist to estimate its frequency.
pub const PROBE: i64 = 64;

/// Trigrams kept: the rarest, and those whose estimated count is at most this many times its
/// (a doclist walk costs far less per entry than the re-check of a candidate reads).
pub const SPREAD: f64 = 8.0;

/// At most this many trigrams are looked up.
pub const KEEP: usize = 6;

/// At most this many distinct trigrams of a needle are probed (the first ones; a longer needle
/// is matched on a subset, still exact).
pub const PROBED: usize = 32;

/// The FTS5 query of `needle`'s rarest trigrams in `field`'s table (SQLite); `None` on
/// PostgreSQL, for a needle the index cannot narrow (under 3 characters, or with a NUL), or one
/// with a single trigram (nothing to choose).
pub fn query(c: &mut dyn Conn, field: Field, needle: &str) -> Result<Option<String>, ArchiveError> {
    if c.dialect() != Dialect::Sqlite {
        return Ok(None);
    }
    let chars: Vec<char> = needle.chars().collect();
    if chars.len() < 4 || chars.contains(&'\0') {
        return Ok(None);
    }
    let mut grams: Vec<&[char]> = Vec::new();
    for w in chars.windows(3) {
        if !grams.contains(&w) && grams.len() < PROBED {
            grams.push(w);
        }
    }
    let mut est = Vec::with_capacity(grams.len());
    for w in grams {
        let mut q = String::new();
        push_token(&mut q, w);
        let n = estimate(c, field, &q)?;
        est.push((n, q));
        if n < PROBE as f64 {
            // Exact and rare: fewer than PROBE candidates to re-check, so probing the rest
            // (two doclist reads each) would cost more than it could save (arc9n measured
            // ~5 ms lost on a selective needle).
            break;
        }
    }
    Ok(Some(choose(est)))
}

/// The query of the rarest trigrams among `(estimated count, quoted trigram)`.
fn choose(mut est: Vec<(f64, String)>) -> String {
    est.sort_by(|a, b| a.0.total_cmp(&b.0));
    let bound = est.first().map_or(0.0, |e| e.0 * SPREAD);
    let mut q = String::new();
    for (i, (n, t)) in est.iter().enumerate() {
        if i > 0 && (*n > bound || i >= KEEP) {
            break;
        }
        if !q.is_empty() {
            q.push(' ');
        }
        q.push_str(t);
    }
    q
}

/// The estimated number of records whose text has trigram `q` (a quoted FTS5 token): exact
/// when it has fewer than [`PROBE`] of them, else [`PROBE`] × 2 over the id gaps its first and
/// last [`PROBE`] rowids span, times the id span of its whole doclist.
fn estimate(c: &mut dyn Conn, field: Field, q: &str) -> Result<f64, ArchiveError> {
    let t = field.table();
    let ends = |c: &mut dyn Conn, dir: &str| -> Result<(i64, i64, i64), ArchiveError> {
        let rows = c.query(
            &format!(
                "SELECT COUNT(*), MIN(rowid), MAX(rowid) FROM \
                 (SELECT rowid FROM {t} WHERE {t} MATCH ? ORDER BY rowid {dir} LIMIT {PROBE})"
            ),
            &[Param::from(q)],
        )?;
        let r = rows.first();
        let cell = |i: usize| r.and_then(|r| r.get(i)).map_or(0, Cell::int);
        Ok((cell(0), cell(1), cell(2)))
    };
    let (n, lo, lo_end) = ends(c, "ASC")?;
    if n < PROBE {
        return Ok(n as f64);
    }
    let (_, hi_start, hi) = ends(c, "DESC")?;
    let gaps = (lo_end - lo + 1) + (hi - hi_start + 1);
    let span = (hi - lo + 1).max(1);
    Ok(((2 * PROBE) as f64 * span as f64 / gaps.max(1) as f64).max(n as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rarest_and_those_close_to_it() {
        let q = |v: &[(f64, &str)]| choose(v.iter().map(|(n, t)| (*n, t.to_string())).collect());
        // `cause 5` over 1M: the common trigrams are left out.
        assert_eq!(
            q(&[(1e6, "cau"), (1e6, "use"), (1e5, "e 5"), (1e6, "se ")]),
            "e 5"
        );
        // Within the spread (8× the rarest): kept, rarest first; beyond it: left out.
        assert_eq!(q(&[(700.0, "a"), (100.0, "b"), (500.0, "c")]), "b c a");
        assert_eq!(q(&[(900.0, "a"), (100.0, "b"), (700.0, "c")]), "b c");
        // No match at all: the one with none.
        assert_eq!(q(&[(10.0, "a"), (0.0, "b")]), "b");
        // At most KEEP.
        let many: Vec<(f64, &str)> = (0..10).map(|_| (5.0, "x")).collect();
        assert_eq!(q(&many).split(' ').count(), KEEP);
    }
}
