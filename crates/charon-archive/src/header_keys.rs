//! PostgreSQL: a list of one `header.NAME=value` term and one group-key term `X=v` (`queue`,
//! `original_queue`, `reason`, `status`, `error_fingerprint`) whose key matches almost every
//! record (docs/archive.md "Twenty-fourth round"). The plain plan probes each of the header's
//! records in `(X, id)` — 50,000 probes for `queue=fill&header.x-first-death-queue=orders-7`
//! over 1M records, 250–850 ms. Here the header's ids come from migration 9's index
//! ([`crate::header_index::exact_ids_at`]) minus the ids of the records whose `X` is not `v`,
//! read from `X`'s index as the ranges `X < v`, `X > v` and `X IS NULL`: a hash anti-join, no
//! probe per header match.
//!
//! Exact whatever the summary says: for a non-NULL `X` exactly one of `X < v`, `X = v`, `X > v`
//! holds (the column's collation is deterministic), so the header's records not in the three
//! ranges are exactly those with `X = v`. The summary (`dead_letter_groups`) only chooses the
//! plan: it is taken when the records of other keys number at most [`MAX_OTHERS`].
//!
//! Since migration 22 the list takes this plan only for `reason` and `error_fingerprint`: a
//! header term with `status`, `queue` or `original_queue` terms is answered from the header
//! index's own columns ([`crate::header_columns`]), whatever the key's other values number.

use crate::error::ArchiveError;
use crate::filter::Filter;
use crate::header_index;
use crate::sql::{Conn, Dialect, Param};

/// The most records of other keys (by the summary) the plan reads from `X`'s index.
pub const MAX_OTHERS: i64 = 20_000;

/// The group-key columns with an index leading with them on PostgreSQL.
const KEYS: &[&str] = &[
    "queue",
    "original_queue",
    "reason",
    "status",
    "error_fingerprint",
];

/// A chosen plan: the header's exact ids minus the records of other keys.
pub struct Plan {
    ids: String,
    params: Vec<Param>,
    /// The header term, the watermark, the key column and value (for [`Plan::page_ids`]).
    name: String,
    value: String,
    wm: i64,
    col: &'static str,
    v: String,
}

impl Plan {
    /// The matching ids (no order, no duplicates) as a subquery and its parameters.
    pub fn ids(&self) -> (String, Vec<Param>) {
        (self.ids.clone(), self.params.clone())
    }

    /// The ids of one page in id order (`desc`: newest first) reaching `reach` matches: each
    /// part of the header's ids (index range, records above the watermark, edited records) walked
    /// in order for its first `reach` + |other keys' records| ids (the other keys' records
    /// counted in the same statement), then the other keys' records taken out. At most that many
    /// of a part's ids are taken out, so each part keeps its first `reach` matches: exact, and
    /// the walk stops there instead of reading the whole header range and sorting it.
    pub fn page_ids(&self, desc: bool, reach: u64) -> (String, Vec<Param>) {
        let field = Dialect::Postgres.json_field("headers");
        let dir = if desc { "DESC" } else { "ASC" };
        let others = others_sql(self.col);
        let lim = format!("(SELECT {reach} + COUNT(*) FROM ({others}) AS c)");
        let part = |sql: &str| format!("SELECT id FROM ({sql} ORDER BY id {dir} LIMIT {lim}) AS p");
        let sql = format!(
            "SELECT q.id FROM ({} UNION ALL {} UNION ALL {}) AS q \
             WHERE NOT EXISTS (SELECT 1 FROM ({others}) AS o WHERE o.id = q.id)",
            part(
                "SELECT id FROM dead_letter_search_header WHERE name = ? AND value = ? AND id <= ?"
            ),
            part(&format!(
                "SELECT id FROM dead_letters WHERE id > ? AND {field} = ?"
            )),
            part(&format!(
                "SELECT id FROM dead_letters WHERE id IN (SELECT id FROM dead_letter_search_scan WHERE id <= ?) AND {field} = ?"
            )),
        );
        let (name, value, v) = (self.name.as_str(), self.value.as_str(), self.v.as_str());
        let mut p = vec![Param::from(name), Param::from(value), Param::from(self.wm)];
        p.extend([Param::from(v), Param::from(v)]);
        p.extend([Param::from(self.wm), Param::from(name), Param::from(value)]);
        p.extend([Param::from(v), Param::from(v)]);
        p.extend([Param::from(self.wm), Param::from(name), Param::from(value)]);
        p.extend([Param::from(v), Param::from(v)]);
        p.extend([Param::from(v), Param::from(v)]);
        (sql, p)
    }

    /// `COUNT(*)` of the matches, one row.
    pub fn count(&self) -> (String, Vec<Param>) {
        (
            format!("SELECT COUNT(*) FROM ({}) AS m", self.ids),
            self.params.clone(),
        )
    }
}

/// A header term `(name, value)` and a key term `(column, value)`.
pub type Terms<'f> = ((&'f str, &'f str), (&'static str, &'f str));

/// The filter's header term and key term when it is exactly those two (no vhost limit).
pub fn terms(f: &Filter) -> Option<Terms<'_>> {
    if f.vhosts.is_some() || f.terms.len() != 2 {
        return None;
    }
    let mut header = None;
    let mut key = None;
    for (k, v) in &f.terms {
        if let Some(name) = k.strip_prefix("header.") {
            header = Some((name, v.as_str()));
        } else if let Some(col) = KEYS.iter().find(|c| **c == k) {
            key = Some((*col, v.as_str()));
        }
    }
    Some((header?, key?))
}

/// The plan for `f` on PostgreSQL when `f` is one header term and one key term and the summary
/// shows at most [`MAX_OTHERS`] records of other keys; `None` otherwise.
pub fn plan(c: &mut dyn Conn, f: &Filter) -> Result<Option<Plan>, ArchiveError> {
    if c.dialect() != Dialect::Postgres {
        return Ok(None);
    }
    let Some(((name, value), (col, v))) = terms(f) else {
        return Ok(None);
    };
    if name.len() + value.len() > header_index::MAX_BYTES {
        return Ok(None);
    }
    let others = c
        .query(
            &format!(
                "SELECT CAST(COALESCE(SUM(records), 0) AS BIGINT) FROM dead_letter_groups \
                 WHERE {col} IS DISTINCT FROM ?"
            ),
            &[Param::from(v)],
        )?
        .first()
        .and_then(|r| r.first())
        .map_or(i64::MAX, |n| n.int());
    if others > MAX_OTHERS {
        return Ok(None);
    }
    let wm = header_index::watermark(c)?;
    let Some((h, mut params)) =
        header_index::exact_ids_at(Dialect::Postgres, name, value, Some(wm))
    else {
        return Ok(None);
    };
    let ids = format!(
        "SELECT h.id FROM ({h}) AS h WHERE NOT EXISTS (SELECT 1 FROM ({}) AS o WHERE o.id = h.id)",
        others_sql(col)
    );
    params.push(Param::from(v));
    params.push(Param::from(v));
    Ok(Some(Plan {
        ids,
        params,
        name: name.to_string(),
        value: value.to_string(),
        wm,
        col,
        v: v.to_string(),
    }))
}

/// The ids of the records whose `col` is not the parameter (two parameters, the value twice):
/// `col`'s index read as the ranges below, above and NULL.
fn others_sql(col: &str) -> String {
    format!(
        "SELECT id FROM dead_letters WHERE {col} < ? \
         UNION ALL SELECT id FROM dead_letters WHERE {col} > ? \
         UNION ALL SELECT id FROM dead_letters WHERE {col} IS NULL"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_header_and_one_key_term() {
        let f = |pairs: &[(&str, &str)]| Filter::from_pairs(pairs.iter().copied()).expect("f");
        assert!(terms(&f(&[("queue", "q"), ("header.a", "b")])).is_some());
        assert!(terms(&f(&[("status", "PENDING"), ("header.a", "b")])).is_some());
        assert!(terms(&f(&[("header.a", "b")])).is_none());
        assert!(terms(&f(&[("queue", "q"), ("status", "PENDING")])).is_none());
        assert!(terms(&f(&[("vhost", "/"), ("header.a", "b")])).is_none());
        assert!(terms(&f(&[("queue", "q"), ("header.a", "b"), ("status", "x")])).is_none());
    }
}
