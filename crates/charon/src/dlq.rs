//! `charon ctl dlq …`: the dead-letter archive from the command line (docs/archive.md), an HTTP
//! client of `/api/dead-letters`. Lists print tab-separated rows; single objects print JSON.

use anyhow::{Context, bail};
use base64::Engine;
use clap::{Args, Subcommand};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Map, Value, json};

/// Filters shared by list, groups and the bulk actions (`--filter KEY=VALUE` for any other).
#[derive(Args, Debug, Default)]
pub(crate) struct FilterArgs {
    /// Status (PENDING, PROCESSING, REPLAYED, FAILED, SKIPPED).
    #[arg(long)]
    status: Option<String>,
    /// The archive queue.
    #[arg(long)]
    queue: Option<String>,
    /// The queue the message died in.
    #[arg(long = "original-queue")]
    original_queue: Option<String>,
    /// Dead-lettering reason (rejected, expired, maxlen, delivery_limit).
    #[arg(long = "death-reason", id = "death_reason")]
    reason: Option<String>,
    /// Text the error message or stack trace contains.
    #[arg(long)]
    error: Option<String>,
    /// The message key.
    #[arg(long)]
    key: Option<String>,
    /// Bytes the body contains.
    #[arg(long)]
    body: Option<String>,
    /// `NAME=VALUE`: a header's value (repeatable).
    #[arg(long = "header")]
    header: Vec<String>,
    /// `KEY=VALUE`: any other filter key (since, until, error_fingerprint, ...; repeatable).
    #[arg(long = "filter")]
    filter: Vec<String>,
}

impl FilterArgs {
    fn to_map(&self) -> anyhow::Result<Map<String, Value>> {
        let mut m = Map::new();
        let fixed = [
            ("status", &self.status),
            ("queue", &self.queue),
            ("original_queue", &self.original_queue),
            ("reason", &self.reason),
            ("error", &self.error),
            ("key", &self.key),
            ("body", &self.body),
        ];
        for (k, v) in fixed {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        }
        for h in &self.header {
            let (k, v) = h.split_once('=').context("--header takes NAME=VALUE")?;
            m.insert(format!("header.{k}"), json!(v));
        }
        for f in &self.filter {
            let (k, v) = f.split_once('=').context("--filter takes KEY=VALUE")?;
            m.insert(k.into(), json!(v));
        }
        Ok(m)
    }
}

/// `charon ctl dlq` subcommands.
#[derive(Subcommand, Debug)]
pub(crate) enum DlqCommand {
    /// Lists archived dead letters.
    List {
        #[command(flatten)]
        f: FilterArgs,
        /// Sort column (`-` prefix: descending).
        #[arg(long)]
        sort: Option<String>,
        /// Page (1-based).
        #[arg(long, default_value_t = 1)]
        page: u64,
        /// Page size.
        #[arg(long = "page-size", default_value_t = 100)]
        page_size: u64,
        /// Count every match of an `--error`/`--body` or `--header` filter (slow over many
        /// matches; without it such a total stops at 10,000 — a header filter's at 100,000 —
        /// shown as "10000+").
        #[arg(long = "exact-total")]
        exact_total: bool,
    },
    /// Shows one record (with its edit history) as JSON.
    Get {
        /// Record id.
        id: i64,
    },
    /// Counts by group.
    Groups {
        #[command(flatten)]
        f: FilterArgs,
        /// Group columns.
        #[arg(long, default_value = "original_queue,reason,error_fingerprint,status")]
        by: String,
        /// Group every match of an `--error`/`--body` filter (slow over many matches; without it
        /// over 10,000 matches only the newest 10,000 are grouped, counts shown as "N+").
        #[arg(long = "exact-total")]
        exact_total: bool,
    },
    /// Edits a record's body and/or headers before a replay (the original is kept).
    Edit {
        /// Record id.
        id: i64,
        /// New body (text).
        #[arg(long)]
        payload: Option<String>,
        /// New headers: a JSON object (replaces them all).
        #[arg(long)]
        headers: Option<String>,
        /// Why.
        #[arg(long)]
        note: Option<String>,
    },
    /// Replays records by ids or filter (a job; prints its id).
    Replay {
        /// Record ids, comma-separated.
        #[arg(long, value_delimiter = ',')]
        ids: Vec<i64>,
        #[command(flatten)]
        f: FilterArgs,
        /// Select every record (an empty filter).
        #[arg(long)]
        all: bool,
        /// Exchange to publish to (default: the original).
        #[arg(long)]
        exchange: Option<String>,
        /// Routing key (default: the original).
        #[arg(long = "routing-key")]
        routing_key: Option<String>,
        /// Messages per second.
        #[arg(long)]
        rate: Option<f64>,
        /// Remove x-death and x-first/last-death headers.
        #[arg(long = "strip-death-headers")]
        strip_death_headers: bool,
        /// Note for the audit trail and the records.
        #[arg(long)]
        note: Option<String>,
        /// Wait for the job to finish and print its outcome.
        #[arg(long)]
        wait: bool,
    },
    /// Shows a replay job's progress.
    Job {
        /// Job id.
        id: i64,
    },
    /// Lists replay jobs.
    Jobs,
    /// Cancels a running replay job.
    Cancel {
        /// Job id.
        id: i64,
    },
    /// Marks records SKIPPED with a reason.
    Skip {
        /// Record ids, comma-separated.
        #[arg(long, value_delimiter = ',')]
        ids: Vec<i64>,
        #[command(flatten)]
        f: FilterArgs,
        /// Select every record.
        #[arg(long)]
        all: bool,
        /// Why (required).
        #[arg(long)]
        reason: String,
    },
    /// Deletes records.
    Delete {
        /// Record ids, comma-separated.
        #[arg(long, value_delimiter = ',')]
        ids: Vec<i64>,
        #[command(flatten)]
        f: FilterArgs,
        /// Select every record.
        #[arg(long)]
        all: bool,
        /// Why.
        #[arg(long)]
        note: Option<String>,
    },
    /// Shows the audit trail.
    Audit {
        /// Only rows naming this record.
        #[arg(long = "record-id")]
        record_id: Option<i64>,
        /// Only this action.
        #[arg(long)]
        action: Option<String>,
    },
    /// Totals, counts by status, what retention removed.
    Stats,
    /// Runs retention (`archive_retention`) and the size cap (`archive_max_bytes`) now.
    Retention,
}

struct Http {
    agent: ureq::Agent,
    base: String,
    auth: String,
}

fn enc(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

impl Http {
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Value> {
        let url = format!("{}{}", self.base, path);
        let result = match (method, body) {
            ("PUT", Some(b)) => self
                .agent
                .put(&url)
                .header("Authorization", &self.auth)
                .send_json(b),
            ("POST", Some(b)) => self
                .agent
                .post(&url)
                .header("Authorization", &self.auth)
                .send_json(b),
            ("DELETE", _) => self
                .agent
                .delete(&url)
                .header("Authorization", &self.auth)
                .call(),
            _ => self
                .agent
                .get(&url)
                .header("Authorization", &self.auth)
                .call(),
        };
        let mut resp =
            result.with_context(|| format!("cannot reach the management API at {url}"))?;
        let status = resp.status();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if !status.is_success() {
            let reason = value
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            bail!("Error: {reason} (HTTP {})", status.as_u16());
        }
        Ok(value)
    }
}

fn query(m: &Map<String, Value>, extra: &[(&str, String)]) -> String {
    let mut parts: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v.as_str().unwrap_or(&v.to_string()))))
        .collect();
    parts.extend(extra.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))));
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

/// Prints `cols` as a tab-separated header, then one line per object of the array `rows`.
fn print_table(rows: &Value, cols: &[&str]) {
    println!("{}", cols.join("\t"));
    for r in rows.as_array().map(Vec::as_slice).unwrap_or_default() {
        let cells: Vec<String> = cols.iter().map(|k| cell(r.get(*k))).collect();
        println!("{}", cells.join("\t"));
    }
}

fn cell(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.replace(['\t', '\n'], " "),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    }
}

/// A list answer's `total` as shown: "10000+" (or "100000+") when it is a lower bound
/// (`total_relation` "gte").
fn total_text(body: &Value) -> String {
    let n = cell(body.get("total"));
    match body.get("total_relation").and_then(Value::as_str) {
        Some("gte") => format!("{n}+"),
        _ => n,
    }
}

/// A `/groups` answer's counts as shown: "N+" for a lower bound (`count_relation` "gte");
/// whether any was one.
fn group_counts_shown(groups: &mut Value) -> bool {
    let mut lower = false;
    for g in groups
        .as_array_mut()
        .map(Vec::as_mut_slice)
        .unwrap_or_default()
    {
        if g.get("count_relation").and_then(Value::as_str) == Some("gte") {
            lower = true;
            g["count"] = Value::String(format!("{}+", cell(g.get("count"))));
        }
    }
    lower
}

/// `{"ids": …}` or `{"filter": …}` from the flags.
fn selection(ids: Vec<i64>, f: &FilterArgs, all: bool) -> anyhow::Result<Value> {
    if !ids.is_empty() {
        return Ok(json!({"ids": ids}));
    }
    let m = f.to_map()?;
    if m.is_empty() && !all {
        bail!("give --ids, filters, or --all");
    }
    Ok(json!({"filter": m, "all": all}))
}

fn print_json(v: &Value) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(v)?);
    Ok(())
}

/// Runs one `dlq` command against the API at `url`.
pub(crate) fn run(url: &str, user: &str, password: &str, cmd: DlqCommand) -> anyhow::Result<()> {
    let http = Http {
        agent: ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into(),
        base: url.trim_end_matches('/').to_string(),
        auth: format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        ),
    };
    match cmd {
        DlqCommand::List {
            f,
            sort,
            page,
            page_size,
            exact_total,
        } => {
            let mut extra = vec![
                ("page", page.to_string()),
                ("page_size", page_size.to_string()),
            ];
            if let Some(s) = sort {
                extra.push(("sort", s));
            }
            if exact_total {
                extra.push(("exact_total", "true".to_string()));
            }
            let body = http.call(
                "GET",
                &format!("/api/dead-letters{}", query(&f.to_map()?, &extra)),
                None,
            )?;
            print_table(
                &body["items"],
                &[
                    "id",
                    "status",
                    "original_queue",
                    "reason",
                    "key",
                    "error_message",
                    "created_at",
                ],
            );
            println!(
                "({} of {}, page {})",
                body["items"].as_array().map_or(0, Vec::len),
                total_text(&body),
                page
            );
        }
        DlqCommand::Get { id } => {
            print_json(&http.call("GET", &format!("/api/dead-letters/{id}"), None)?)?
        }
        DlqCommand::Groups { f, by, exact_total } => {
            let mut extra = vec![("by", by.clone())];
            if exact_total {
                extra.push(("exact_total", "true".to_string()));
            }
            let mut body = http.call(
                "GET",
                &format!("/api/dead-letters/groups{}", query(&f.to_map()?, &extra)),
                None,
            )?;
            let lower = group_counts_shown(&mut body);
            let mut cols: Vec<&str> = by.split(',').map(str::trim).collect();
            cols.extend(["count", "oldest", "newest", "error_message"]);
            print_table(&body, &cols);
            if lower {
                println!(
                    "(groups of the newest 10,000 matches; counts are lower bounds, --exact-total counts every match)"
                );
            }
        }
        DlqCommand::Edit {
            id,
            payload,
            headers,
            note,
        } => {
            let mut b = Map::new();
            if let Some(p) = payload {
                b.insert("payload".into(), json!(p));
            }
            if let Some(h) = headers {
                let h: Value =
                    serde_json::from_str(&h).context("--headers must be a JSON object")?;
                b.insert("headers".into(), h);
            }
            if let Some(n) = note {
                b.insert("note".into(), json!(n));
            }
            print_json(&http.call(
                "PUT",
                &format!("/api/dead-letters/{id}"),
                Some(&Value::Object(b)),
            )?)?;
        }
        DlqCommand::Replay {
            ids,
            f,
            all,
            exchange,
            routing_key,
            rate,
            strip_death_headers,
            note,
            wait,
        } => {
            let mut b = selection(ids, &f, all)?;
            if let Some(x) = exchange {
                b["exchange"] = json!(x);
            }
            if let Some(k) = routing_key {
                b["routing_key"] = json!(k);
            }
            if let Some(r) = rate {
                b["rate"] = json!(r);
            }
            if strip_death_headers {
                b["strip_death_headers"] = json!(true);
            }
            if let Some(n) = note {
                b["note"] = json!(n);
            }
            let res = http.call("POST", "/api/dead-letters/replay", Some(&b))?;
            println!(
                "Replay job {} started for {} records",
                cell(res.get("job")),
                cell(res.get("total"))
            );
            if wait {
                let job = cell(res.get("job"));
                loop {
                    let info = http.call("GET", &format!("/api/dead-letters/jobs/{job}"), None)?;
                    if info["state"] != "RUNNING" {
                        print_json(&info)?;
                        break;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            }
        }
        DlqCommand::Job { id } => {
            print_json(&http.call("GET", &format!("/api/dead-letters/jobs/{id}"), None)?)?
        }
        DlqCommand::Jobs => {
            let body = http.call("GET", "/api/dead-letters/jobs", None)?;
            print_table(
                &body,
                &[
                    "id",
                    "state",
                    "total",
                    "replayed",
                    "failed",
                    "pending",
                    "created_by",
                    "created_at",
                ],
            );
        }
        DlqCommand::Cancel { id } => {
            let res = http.call("DELETE", &format!("/api/dead-letters/jobs/{id}"), None)?;
            println!("Job {id} cancelled: {}", cell(res.get("cancelled")));
        }
        DlqCommand::Skip {
            ids,
            f,
            all,
            reason,
        } => {
            let mut b = selection(ids, &f, all)?;
            b["reason"] = json!(reason);
            let res = http.call("POST", "/api/dead-letters/skip", Some(&b))?;
            println!("Skipped {} records", cell(res.get("skipped")));
        }
        DlqCommand::Delete { ids, f, all, note } => {
            let mut b = selection(ids, &f, all)?;
            if let Some(n) = note {
                b["note"] = json!(n);
            }
            let res = http.call("POST", "/api/dead-letters/delete", Some(&b))?;
            println!("Deleted {} records", cell(res.get("deleted")));
        }
        DlqCommand::Audit { record_id, action } => {
            let mut extra = Vec::new();
            if let Some(r) = record_id {
                extra.push(("record_id", r.to_string()));
            }
            if let Some(a) = action {
                extra.push(("action", a));
            }
            let body = http.call(
                "GET",
                &format!("/api/dead-letters/audit{}", query(&Map::new(), &extra)),
                None,
            )?;
            print_table(
                &body["items"],
                &["at", "actor", "action", "ids", "filter", "note", "result"],
            );
        }
        DlqCommand::Stats => print_json(&http.call("GET", "/api/dead-letters/stats", None)?)?,
        DlqCommand::Retention => {
            print_json(&http.call("POST", "/api/dead-letters/retention", Some(&json!({})))?)?
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: super::DlqCommand,
    }

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn a_lower_bound_total_shows_a_plus() {
        let t = |v: serde_json::Value| super::total_text(&v);
        assert_eq!(
            t(serde_json::json!({"total": 10000, "total_relation": "gte"})),
            "10000+"
        );
        assert_eq!(
            t(serde_json::json!({"total": 42, "total_relation": "eq"})),
            "42"
        );
        assert_eq!(t(serde_json::json!({"total": 7})), "7");
    }

    #[test]
    fn a_lower_bound_group_count_shows_a_plus() {
        let mut gs = serde_json::json!([
            {"status": "PENDING", "count": 6000, "count_relation": "gte"},
            {"status": "SKIPPED", "count": 12, "count_relation": "eq"}
        ]);
        assert!(super::group_counts_shown(&mut gs));
        assert_eq!(gs[0]["count"], "6000+");
        assert_eq!(gs[1]["count"], 12);
        let mut exact = serde_json::json!([{"count": 3, "count_relation": "eq"}]);
        assert!(!super::group_counts_shown(&mut exact));
    }
}
