//! SQLite: an `error` term with key terms — the needle's search-index candidates taken from the
//! key's index range, when that is cheaper than reading the whole candidate list row by row
//! (lead, stop 44; docs/archive.md "Twenty-ninth round").
//!
//! The copy's plan for `error=…&original_queue=…` (migration 13) reads the FTS5 candidates of
//! the needle's rarest trigrams and looks each up in the copy to check the needle and the key:
//! `cause 5` has 100,200 candidates over 1M records, so a key none of them is in
//! (`original_queue=orders-7`, `status=SKIPPED`) read all 100,200 copy rows to count 0 (46–48 ms).
//! Here the candidates are `SELECT id FROM dead_letters WHERE <key terms> AND +id IN (<the FTS5
//! rowids>)`: the key's `(X, …, id)` index range is the loop and each id is looked up in the
//! rowids' list (built once, in rowid order), so only the ids both hold reach the copy — 10 ms
//! for orders-7's 50,100, 15 ms for SKIPPED's 200,000.
//!
//! Which read is cheaper depends on how the key falls among the candidates, which no index
//! tells: with many candidates of the key (`original_queue=orders-5`: every `cause 5` record of
//! it), the candidates' read stops at the capped count's 10,001 matches after ~20,000 rows
//! (17 ms), while the range reads the key's every entry and its matches' rows (24–30 ms). So
//! both are costed ([`cheaper`]) from the key's records (the group summary's exact count, no
//! record read), the candidates (counted, bounded) and the share of the key among the newest
//! and the oldest [`SAMPLE`] candidates (their copy rows checked; the smaller), at ~0.3 µs a
//! copy row, ~0.05 µs a range entry and ~0.03 µs a listed rowid (measured over 1M records).

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::search_index::Field;
use crate::sql::{Conn, Dialect, Param};

/// The key columns SQLite reads from an index whose range the ids come from
/// (`dead_letters_orig_queue`, `_queue`, `_status`, `_reason`, `_fingerprint`).
pub const INDEXED: &[&str] = &[
    "original_queue",
    "queue",
    "status",
    "reason",
    "error_fingerprint",
];

/// Candidates at each end whose copy rows are checked for the key's share.
pub const SAMPLE: i64 = 256;

/// Cost units (hundredths of a microsecond, as measured): a candidate's copy row, a key's index
/// entry, a rowid listed for the range's lookups. (In tenths, as first written, an entry and a
/// listed rowid rounded up to twice their cost: `error=cause 5&status=REPLAYED` then weighed the
/// range of REPLAYED's 202,001 records as dear as reading the 100,200 candidates, 52 ms, not 15.)
const ROW: i64 = 30;
const ENTRY: i64 = 5;
const LISTED: i64 = 3;

/// Whether the key's range is the cheaper read: `keyed` records of the key, `candidates`, and
/// `hits` of the key among `sampled` of them; a count capped at `cap` matches (`None`: all).
pub fn cheaper(keyed: i64, candidates: i64, hits: i64, sampled: i64, cap: Option<u64>) -> bool {
    let sampled = sampled.max(1);
    let matches = candidates.saturating_mul(hits) / sampled;
    let need = cap.map_or(i64::MAX, |c| {
        i64::try_from(c).unwrap_or(i64::MAX).saturating_add(1)
    });
    // The candidates read until `need` matches, at the sampled share (all of them without one).
    let read = match (cap, hits) {
        (Some(_), h) if h > 0 => candidates.min(need.saturating_mul(sampled) / h),
        _ => candidates,
    };
    let alone = read.saturating_mul(ROW);
    let ranged = keyed
        .saturating_mul(ENTRY)
        .saturating_add(candidates.saturating_mul(LISTED))
        .saturating_add(matches.min(need).saturating_mul(ROW));
    ranged < alone
}

/// Whether reading the candidates is cheaper than the key's range whatever their number: with
/// `hits` of the key among at most [`SAMPLE`] candidates at each end and a cap, the read stops
/// after at most `(cap + 1) · SAMPLE / hits` candidates, and the range reads at least the key's
/// `keyed` entries.
fn alone_bound_wins(keyed: i64, hits: i64, cap: Option<u64>) -> bool {
    let Some(cap) = cap else {
        return false;
    };
    if hits <= 0 {
        return false;
    }
    let need = i64::try_from(cap).unwrap_or(i64::MAX).saturating_add(1);
    let read = need.saturating_mul(SAMPLE) / hits;
    keyed.saturating_mul(ENTRY) >= read.saturating_mul(ROW)
}

/// The candidates are counted up to this many times the key's records (at least 100,000).
pub const RATIO: i64 = 8;

/// A count of the candidates past which [`cheaper`]'s answer no longer changes, whatever their
/// number (stop 46): with no hit of the key at one end of the candidates, the range wins once
/// their rows cost more than its entries and their listing, `C·ROW > keyed·ENTRY + C·LISTED`;
/// with hits and a cap, the read alone costs at most `(cap + 1) · SAMPLE / hits` rows, which the
/// range's listing of more candidates than that exceeds. `error=could&status=SKIPPED` over 1M:
/// 1,000,000 candidates counted (90 ms) for an answer the first 37,038 give (~5 ms).
fn decisive(keyed: i64, hits: i64, cap: Option<u64>) -> Option<i64> {
    if hits <= 0 {
        return Some(keyed.saturating_mul(ENTRY) / (ROW - LISTED) + 1);
    }
    let need = i64::try_from(cap?).unwrap_or(i64::MAX).saturating_add(1);
    let alone = need.saturating_mul(SAMPLE) / hits * ROW;
    Some(alone.saturating_sub(keyed.saturating_mul(ENTRY)).max(0) / LISTED + 1)
}

/// The condition on `dead_letters` (with its parameters) whose records an `error` term's
/// candidates are restricted to, for `f` (an `error` term and key terms, and a time window)
/// whose other terms' condition is `others`, counted up to `cap` matches (`None`: all); `None`
/// when the candidates read alone are cheaper (module docs), or `f` has another kind of term, or
/// on PostgreSQL. A time window (stop 47) is not part of the range: the candidates are the key's
/// over all time, each checked for the window on its copy row with the other terms (the window
/// alone has no index range in id order; `error=cause 5&original_queue=orders-7&since=…`, none of
/// the needle's candidates in the key, read every candidate: 52 ms on SQLite over 1M).
pub fn within(
    c: &mut dyn Conn,
    f: &Filter,
    needle: &str,
    fts: Option<&str>,
    others: &(String, Vec<Param>),
    cap: Option<u64>,
) -> Result<Option<(String, Vec<Param>)>, ArchiveError> {
    let windowed = f.terms.contains_key("since") || f.terms.contains_key("until");
    if c.dialect() != Dialect::Sqlite
        || !f
            .terms
            .keys()
            .all(|k| k == "error" || k == "since" || k == "until" || INDEXED.contains(&k.as_str()))
        || !f.terms.keys().any(|k| INDEXED.contains(&k.as_str()))
    {
        return Ok(None);
    }
    // The key terms (and the vhost limit) alone, without the window.
    let keys_only;
    let others = if windowed {
        let mut g = f.clone();
        g.terms.retain(|k, _| INDEXED.contains(&k.as_str()));
        keys_only = g.to_sql_on(c)?;
        &keys_only
    } else {
        others
    };
    let Some(query) = fts
        .map(str::to_string)
        .or_else(|| crate::search_index::trigram_query(needle))
    else {
        return Ok(None);
    };
    // The other terms name key columns (and the vhost limit `vhost`) only, as the summary's.
    let (cond, params) = others;
    let keyed = crate::summary::records(c, cond, params)?;
    // The candidates, counted up to a bound past which the range's read is small beside theirs,
    // or past which the choice is the same whatever their number (`decisive`).
    let mut bound = keyed.saturating_mul(RATIO).max(100_000).saturating_add(1);
    let t = Field::Error.table();
    let q = Param::from(query);
    let mut p = vec![q.clone()];
    p.extend_from_slice(params);
    // The key's share at both ends of the candidates, the smaller: a key only the newest records
    // hold (the 2,000 REPLAYED records of a bench run, 200 of them matches) is not taken for
    // one the candidates share throughout. The range's read is bounded by the key's records; a
    // wrong guess of the candidates' share reads every candidate.
    let mut hits = i64::MAX;
    for dir in ["DESC", "ASC"] {
        let n = crate::ops::count(
            c,
            &format!(
                "SELECT COUNT(*) FROM dead_letter_error_text AS e WHERE e.id IN \
                 (SELECT rowid FROM {t} WHERE {t} MATCH ? ORDER BY rowid {dir} LIMIT {SAMPLE}) AND {cond}"
            ),
            &p,
        )?;
        hits = hits.min(n);
    }
    // A key common among the candidates whose range alone costs more than reading them up to
    // the cap: no count of the candidates needed (3.6 ms for `cause 5`'s 100,200 on SQLite).
    if alone_bound_wins(keyed, hits, cap) {
        return Ok(None);
    }
    if let Some(d) = decisive(keyed, hits, cap) {
        bound = bound.min(d.max(SAMPLE));
    }
    // A needle the walk's probe finds in at least twice the bound's records has at least the
    // bound's candidates (they hold every match): not counted (`could`, in every record: 400,801
    // candidates counted, 29 ms, for orders-7's choice). A wrong estimate only costs time.
    let mut g = Filter::default();
    g.terms.insert("error".into(), needle.into());
    if let Some(mut w) = crate::ops::walk_source(c, &g)?
        && crate::ops::estimate(c, &mut w)? >= u64::try_from(bound).unwrap_or(0).saturating_mul(2)
    {
        return Ok(cheaper(keyed, bound, hits, SAMPLE, cap).then(|| (cond.clone(), params.clone())));
    }
    let candidates = crate::ops::count(
        c,
        &format!(
            "SELECT COUNT(*) FROM (SELECT rowid FROM {t} WHERE {t} MATCH ? LIMIT {bound}) AS n"
        ),
        std::slice::from_ref(&q),
    )?;
    let sampled = candidates.min(SAMPLE);
    Ok(cheaper(keyed, candidates, hits, sampled, cap).then(|| (cond.clone(), params.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_when_the_key_is_rare_among_the_candidates() {
        let cap = Some(10_000);
        // orders-7 (none of `cause 5`'s 100,200 candidates), SKIPPED (200,000, none).
        assert!(cheaper(50_100, 100_200, 0, 256, cap));
        assert!(cheaper(200_000, 100_200, 0, 256, cap));
        // orders-5 (half the candidates); PENDING (600,000, most of them).
        assert!(!cheaper(50_100, 100_200, 128, 256, cap));
        assert!(!cheaper(600_000, 100_200, 150, 256, cap));
        // A few candidates: read them.
        assert!(!cheaper(50_000, 300, 0, 256, cap));
        // REPLAYED (202,001 records; none at the candidates' oldest end).
        assert!(cheaper(202_001, 100_200, 0, 256, cap));
        // Known without the candidates' count: a fingerprint's 100,000 records, every sampled
        // candidate of it; not orders-15's 50,100 with half of them, nor without a cap.
        assert!(alone_bound_wins(100_000, 256, cap));
        assert!(!cheaper(100_000, 100_200, 256, 256, cap));
        assert!(!alone_bound_wins(50_100, 128, cap));
        assert!(!alone_bound_wins(100_000, 256, None));
        assert!(!alone_bound_wins(100_000, 0, cap));
        // Past the decisive count, the answer is the count's whatever the candidates' number
        // (the count stops there).
        for keyed in [100, 5_000, 50_100, 200_000, 600_000] {
            for hits in [0, 1, 7, 64, 128, 256] {
                for cap in [Some(100), Some(10_000), None] {
                    let Some(d) = decisive(keyed, hits, cap) else {
                        assert!(hits > 0 && cap.is_none());
                        continue;
                    };
                    let d = d.max(SAMPLE);
                    let at = cheaper(keyed, d, hits, SAMPLE, cap);
                    for more in [1, 2, 10, 1_000, 100_000, 10_000_000] {
                        assert_eq!(
                            cheaper(keyed, d + more, hits, SAMPLE, cap),
                            at,
                            "keyed {keyed} hits {hits} cap {cap:?} bound {d} + {more}"
                        );
                    }
                }
            }
        }
        assert!(decisive(200_000, 0, Some(10_000)) == Some(37_038));
        // Every match counted: the candidates are read whole, the range's matches only.
        assert!(cheaper(50_100, 100_200, 32, 256, None));
        assert!(!cheaper(600_000, 100_200, 150, 256, None));
    }
}
