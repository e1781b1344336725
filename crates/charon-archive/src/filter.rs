//! Filters, sorting and grouping of records, as SQL (the API's query parameters, docs/archive.md).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::ArchiveError;
use crate::search_index::{Field, candidates_with};
use crate::sql::{Conn, Dialect, Param};
use crate::time::parse_time;

/// Gives the FTS5 query of a text filter's needle (`None`: every trigram of it).
type Narrow<'a> = dyn FnMut(Field, &str) -> Result<Option<String>, ArchiveError> + 'a;

/// Exact-match filter keys and their columns.
const EXACT: &[(&str, &str)] = &[
    ("vhost", "vhost"),
    ("queue", "queue"),
    ("original_queue", "original_queue"),
    ("original_exchange", "original_exchange"),
    ("reason", "reason"),
    ("status", "status"),
    ("error_fingerprint", "error_fingerprint"),
    ("message_id", "message_id"),
    ("correlation_id", "correlation_id"),
    ("content_type", "content_type"),
];

/// Columns one may sort and group by.
pub const SORTABLE: &[&str] = &[
    "id",
    "vhost",
    "queue",
    "original_queue",
    "original_exchange",
    "reason",
    "status",
    "error_fingerprint",
    "content_type",
    "death_count",
    "replay_count",
    "created_at",
    "updated_at",
    "last_replayed_at",
];

/// Columns one may group by.
pub const GROUPABLE: &[&str] = &[
    "vhost",
    "queue",
    "original_queue",
    "original_exchange",
    "reason",
    "status",
    "error_fingerprint",
    "content_type",
];

/// A filter over records: key → value, as given (query parameters or a JSON object).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// The conditions.
    pub terms: BTreeMap<String, String>,
    /// Only records of these vhosts (the vhosts an API user may see); `None`: every vhost.
    pub vhosts: Option<Vec<String>>,
}

impl Filter {
    /// From query parameters; keys that are not filters (`sort`, `page`, ...) are left out.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Filter, ArchiveError> {
        let mut terms = BTreeMap::new();
        for (k, v) in pairs {
            if matches!(
                k,
                "sort" | "page" | "page_size" | "by" | "all" | "exact_total"
            ) {
                continue;
            }
            check_key(k)?;
            terms.insert(k.to_string(), v.to_string());
        }
        Ok(Filter {
            terms,
            vhosts: None,
        })
    }

    /// From a JSON object (`"filter": {...}` of replay/skip/delete).
    pub fn from_json(v: &Value) -> Result<Filter, ArchiveError> {
        let Value::Object(m) = v else {
            return Err(ArchiveError::Invalid("filter must be an object".into()));
        };
        let mut terms = BTreeMap::new();
        for (k, v) in m {
            if k == "all" {
                continue;
            }
            check_key(k)?;
            let s = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            terms.insert(k.clone(), s);
        }
        Ok(Filter {
            terms,
            vhosts: None,
        })
    }

    /// Whether it selects everything (the user may see).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// The filter's time window alone: its `since` and `until` terms, no vhost limit (empty
    /// without them).
    pub fn window(&self) -> Filter {
        let mut g = Filter::default();
        for k in ["since", "until"] {
            if let Some(v) = self.terms.get(k) {
                g.terms.insert(k.to_string(), v.clone());
            }
        }
        g
    }

    /// The same filter limited to `vhosts` (`None`: no limit).
    pub fn within(mut self, vhosts: Option<Vec<String>>) -> Filter {
        self.vhosts = vhosts;
        self
    }

    /// When the filter is one `header.NAME=value` term (no vhost limit) that the exact header
    /// index answers ([`crate::header_index`]): its name and value, so the list counts and pages
    /// it from the index instead of reading the records.
    pub fn header_only(&self) -> Option<(&str, &str)> {
        if self.vhosts.is_some() || self.terms.len() != 1 {
            return None;
        }
        let (k, v) = self.terms.iter().next()?;
        let name = k.strip_prefix("header.")?;
        (name.len() + v.len() <= crate::header_index::MAX_BYTES).then_some((name, v.as_str()))
    }

    /// When the filter is one `error` term (no vhost limit): its needle.
    pub fn error_only(&self) -> Option<&str> {
        if self.vhosts.is_some() || self.terms.len() != 1 {
            return None;
        }
        self.terms.get("error").map(String::as_str)
    }

    /// The SQL condition (`TRUE` when empty) and its parameters.
    pub fn to_sql(&self, d: Dialect) -> Result<(String, Vec<Param>), ArchiveError> {
        self.to_sql_with(d, true, &mut |_, _| Ok(None))
    }

    /// [`Filter::to_sql`] for connection `c`: on SQLite a text filter looks up only its needle's
    /// rarest trigrams ([`crate::rare_trigrams`]; the same rows, found faster).
    pub fn to_sql_on(&self, c: &mut dyn Conn) -> Result<(String, Vec<Param>), ArchiveError> {
        self.to_sql_on_known(c, None)
    }

    /// [`Filter::to_sql_on`] with the FTS5 query of an `error` needle looked up already
    /// (`known`: the needle and its query), so that it is not looked up a second time.
    pub fn to_sql_on_known(
        &self,
        c: &mut dyn Conn,
        known: Option<(&str, &Option<String>)>,
    ) -> Result<(String, Vec<Param>), ArchiveError> {
        let d = c.dialect();
        self.to_sql_with(d, true, &mut |field, needle| match known {
            Some((k, q)) if field == Field::Error && k == needle => Ok(q.clone()),
            _ => crate::rare_trigrams::query(c, field, needle),
        })
    }

    /// [`Filter::to_sql_on`] for a query that reads every matching record anyway (`/groups`): on
    /// SQLite the `error` term is checked on the record itself, not first looked up in the narrow
    /// copy of migration 12 (that lookup made `/groups` with `error=` over 1M 37 % slower, branch
    /// q9s); PostgreSQL keeps the copy (2× faster there). The same rows either way.
    pub fn to_sql_reading_records(
        &self,
        c: &mut dyn Conn,
    ) -> Result<(String, Vec<Param>), ArchiveError> {
        let d = c.dialect();
        self.to_sql_with(d, d == Dialect::Postgres, &mut |field, needle| {
            crate::rare_trigrams::query(c, field, needle)
        })
    }

    /// The condition checking each record itself: no search-index candidates, the `error` term
    /// on the record's own columns (for a walk over the newest records, `crate::text_walk`: a
    /// candidate list would be built whole, the check alone stops with the walk).
    pub fn to_sql_checks_only(&self, d: Dialect) -> Result<(String, Vec<Param>), ArchiveError> {
        self.to_sql_opts(d, false, false, &mut |_, _| Ok(None))
    }

    /// [`Filter::to_sql`] with `narrow` giving the FTS5 query of a text filter's needle (`None`:
    /// every trigram).
    fn to_sql_with(
        &self,
        d: Dialect,
        error_copy: bool,
        narrow: &mut Narrow<'_>,
    ) -> Result<(String, Vec<Param>), ArchiveError> {
        self.to_sql_opts(d, error_copy, true, narrow)
    }

    /// [`Filter::to_sql_with`]; `candidates`: text terms narrowed by the search index.
    fn to_sql_opts(
        &self,
        d: Dialect,
        error_copy: bool,
        candidates: bool,
        narrow: &mut Narrow<'_>,
    ) -> Result<(String, Vec<Param>), ArchiveError> {
        let mut conds = Vec::new();
        let mut params = Vec::new();
        for (k, v) in &self.terms {
            if k == "key" {
                conds.push(crate::index_diet::key_condition(d).to_string());
                params.push(Param::from(v.as_str()));
                params.push(Param::from(v.as_str()));
            } else if let Some((_, col)) = EXACT.iter().find(|(key, _)| key == k) {
                conds.push(format!("{col} = ?"));
                params.push(Param::from(v.as_str()));
                // Migration 18 (pg9w): PostgreSQL's partial indexes need their predicate as a
                // literal in the prepared statement.
                if k == "status" && crate::pg_partial::carries_not_pending(d, v) {
                    conds.push(crate::pg_partial::NOT_PENDING.into());
                }
            } else if k == "since" || k == "until" {
                let t = parse_time(v)
                    .ok_or_else(|| ArchiveError::Invalid(format!("{k}: not a time: '{v}'")))?;
                conds.push(format!(
                    "created_at {} ?",
                    if k == "since" { ">=" } else { "<" }
                ));
                params.push(Param::from(t));
            } else if k == "error" {
                // Migration 12: checked on the narrow copy of the error texts.
                let fts = if d == Dialect::Sqlite && error_copy {
                    narrow(Field::Error, v)?
                } else {
                    None
                };
                if let Some((cond, mut p)) = error_copy
                    .then(|| crate::error_text::condition(d, v, fts))
                    .flatten()
                {
                    conds.push(cond);
                    params.append(&mut p);
                    continue;
                }
                if candidates {
                    push_candidates(&mut conds, &mut params, d, Field::Error, v, narrow)?;
                }
                conds.push(format!(
                    "({} OR {})",
                    d.contains("error_message"),
                    d.contains("error_stacktrace")
                ));
                params.push(Param::from(v.as_str()));
                params.push(Param::from(v.as_str()));
            } else if k == "body" {
                if candidates {
                    push_candidates(&mut conds, &mut params, d, Field::Body, v, narrow)?;
                }
                conds.push(d.bytes_contain("payload"));
                params.push(Param::Bytes(v.as_bytes().to_vec()));
            } else if let Some(name) = k.strip_prefix("header.") {
                // Migration 9: the exact (name, value, id) index, no re-check — except in a
                // walk's per-record check (`candidates` false), where the index's ids would be
                // gathered whole before the first row (a header every record carries: 1,000,000).
                if let Some((cond, mut p)) = candidates
                    .then(|| crate::header_index::condition(d, name, v))
                    .flatten()
                {
                    conds.push(cond);
                    params.append(&mut p);
                    continue;
                }
                if candidates {
                    push_candidates(
                        &mut conds,
                        &mut params,
                        d,
                        Field::Headers,
                        &format!("{name}={v}"),
                        narrow,
                    )?;
                }
                conds.push(format!("{} = ?", d.json_field("headers")));
                params.push(Param::from(name));
                params.push(Param::from(v.as_str()));
            } else if k == "id" {
                let id: i64 = v
                    .parse()
                    .map_err(|_| ArchiveError::Invalid(format!("id: not a number: '{v}'")))?;
                conds.push("id = ?".into());
                params.push(Param::from(id));
            }
        }
        if let Some(vs) = &self.vhosts {
            // SQLite, without statistics, reads a vhost limit through `dead_letters_group`
            // (`vhost`, …) — every record of the user's vhosts — instead of the walk's id range
            // or the page's order: `+vhost` keeps it a per-row check (a vhost-limited user's
            // `body=` over 1M records: 264 → ~10 ms, as an administrator's; stop 42). A limit
            // rarely narrows much: a user sees most records of the vhosts it works in.
            let col = if d == Dialect::Sqlite {
                "+vhost"
            } else {
                "vhost"
            };
            let (cond, mut p) = crate::scope::vhost_in(col, vs);
            conds.push(cond);
            params.append(&mut p);
        }
        if conds.is_empty() {
            return Ok(("1 = 1".into(), params));
        }
        Ok((conds.join(" AND "), params))
    }
}

/// The search index's candidates for a text filter (`search_index`), when it can narrow it; the
/// filter's own exact condition follows.
fn push_candidates(
    conds: &mut Vec<String>,
    params: &mut Vec<Param>,
    d: Dialect,
    field: Field,
    needle: &str,
    narrow: &mut Narrow<'_>,
) -> Result<(), ArchiveError> {
    let fts = if d == Dialect::Sqlite {
        narrow(field, needle)?
    } else {
        None
    };
    if let Some((cond, p)) = candidates_with(d, field, needle, fts) {
        conds.push(cond);
        params.push(p);
    }
    Ok(())
}

fn check_key(k: &str) -> Result<(), ArchiveError> {
    let ok = EXACT.iter().any(|(key, _)| *key == k)
        || matches!(k, "key" | "since" | "until" | "error" | "body" | "id")
        || k.strip_prefix("header.").is_some_and(|n| !n.is_empty());
    if ok {
        Ok(())
    } else {
        Err(ArchiveError::Invalid(format!("unknown filter '{k}'")))
    }
}

/// `sort` (a column, `-` prefix for descending; default newest first) as `ORDER BY` text.
pub fn order_by(sort: Option<&str>) -> Result<String, ArchiveError> {
    let Some(s) = sort.filter(|s| !s.is_empty()) else {
        return Ok("id DESC".into());
    };
    let (col, dir) = match s.strip_prefix('-') {
        Some(c) => (c, "DESC"),
        None => (s, "ASC"),
    };
    if !SORTABLE.contains(&col) {
        return Err(ArchiveError::Invalid(format!("cannot sort by '{col}'")));
    }
    Ok(format!("{col} {dir}, id {dir}"))
}

/// `by` as validated group columns (default `original_queue,reason,error_fingerprint,status`).
pub fn group_by(by: Option<&str>) -> Result<Vec<String>, ArchiveError> {
    let by = by
        .filter(|s| !s.is_empty())
        .unwrap_or("original_queue,reason,error_fingerprint,status");
    by.split(',')
        .map(str::trim)
        .map(|c| {
            if GROUPABLE.contains(&c) {
                Ok(c.to_string())
            } else {
                Err(ArchiveError::Invalid(format!("cannot group by '{c}'")))
            }
        })
        .collect()
}
