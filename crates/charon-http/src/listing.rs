//! RabbitMQ's list query parameters, applied to any list of JSON objects: `columns=a,b.c`
//! (keep only these, dotted paths into nested objects), `sort=field` / `sort_reverse=true`,
//! `page`, `page_size`, `name` and `use_regex` (then the answer is RabbitMQ's page object:
//! `filtered_count`, `item_count`, `items`, `page`, `page_count`, `page_size`, `total_count`).
//! Also the JSON body and flag helpers the handlers share.

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use serde_json::{Map, Value};

use crate::error::ApiError;

/// Query parameters of a list request.
pub type Query = axum::extract::Query<HashMap<String, String>>;

fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

fn project(v: &Value, columns: &[&str]) -> Value {
    let mut out = Map::new();
    for c in columns {
        if let Some(x) = lookup(v, c) {
            // Nested columns keep their nesting, as RabbitMQ does.
            let mut parts = c.split('.').peekable();
            let mut cur = &mut out;
            while let Some(p) = parts.next() {
                if parts.peek().is_none() {
                    cur.insert(p.to_string(), x.clone());
                } else {
                    let e = cur
                        .entry(p.to_string())
                        .or_insert_with(|| Value::Object(Map::new()));
                    if !e.is_object() {
                        *e = Value::Object(Map::new());
                    }
                    let Some(next) = e.as_object_mut() else { break };
                    cur = next;
                }
            }
        }
    }
    Value::Object(out)
}

fn cmp(a: Option<&Value>, b: Option<&Value>) -> std::cmp::Ordering {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => x
            .as_f64()
            .partial_cmp(&y.as_f64())
            .unwrap_or(std::cmp::Ordering::Equal),
        (Some(Value::String(x)), Some(Value::String(y))) => x.cmp(y),
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x.cmp(y),
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        _ => std::cmp::Ordering::Equal,
    }
}

fn parse_num(q: &HashMap<String, String>, k: &str, default: usize) -> Result<usize, ApiError> {
    match q.get(k) {
        None => Ok(default),
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or_else(|| ApiError::BadRequest(format!("{k} must be a positive integer"))),
    }
}

/// Applies sorting, filtering, pagination and columns to `items`.
pub fn respond(items: Vec<Value>, q: &HashMap<String, String>) -> Result<Json<Value>, ApiError> {
    let mut items = items;
    if let Some(field) = q.get("sort").filter(|s| !s.is_empty()) {
        items.sort_by(|a, b| cmp(lookup(a, field), lookup(b, field)));
    }
    if q.get("sort_reverse").is_some_and(|v| v == "true") {
        items.reverse();
    }
    let columns: Option<Vec<&str>> = q
        .get("columns")
        .map(|c| c.split(',').filter(|s| !s.is_empty()).collect());
    let project_all = |items: Vec<Value>| -> Vec<Value> {
        match &columns {
            Some(c) => items.iter().map(|v| project(v, c)).collect(),
            None => items,
        }
    };
    if !q.contains_key("page") {
        return Ok(Json(Value::Array(project_all(items))));
    }
    let page = parse_num(q, "page", 1)?;
    let page_size = parse_num(q, "page_size", 100)?;
    if page_size > 500 {
        return Err(ApiError::BadRequest(
            "page_size must be less than or equal to 500".into(),
        ));
    }
    let total = items.len();
    if let Some(name) = q.get("name").filter(|s| !s.is_empty()) {
        let regex = q.get("use_regex").is_some_and(|v| v == "true");
        let re = if regex {
            Some(
                regex::Regex::new(name)
                    .map_err(|e| ApiError::BadRequest(format!("invalid regex: {e}")))?,
            )
        } else {
            None
        };
        items.retain(|v| {
            let n = v.get("name").and_then(Value::as_str).unwrap_or("");
            match &re {
                Some(r) => r.is_match(n),
                None => n.contains(name.as_str()),
            }
        });
    }
    let filtered = items.len();
    let page_count = filtered.div_ceil(page_size).max(1);
    if page > page_count {
        return Err(ApiError::BadRequest(format!(
            "page {page} is beyond the last page {page_count}"
        )));
    }
    let page_items: Vec<Value> = items
        .into_iter()
        .skip((page - 1) * page_size)
        .take(page_size)
        .collect();
    let page_items = project_all(page_items);
    Ok(Json(serde_json::json!({
        "filtered_count": filtered,
        "item_count": page_items.len(),
        "items": page_items,
        "page": page,
        "page_count": page_count,
        "page_size": page_size,
        "total_count": total,
    })))
}

/// One object, with `columns` applied.
pub fn respond_one(v: Value, q: &HashMap<String, String>) -> Json<Value> {
    match q.get("columns") {
        Some(c) => {
            let cols: Vec<&str> = c.split(',').filter(|s| !s.is_empty()).collect();
            Json(project(&v, &cols))
        }
        None => Json(v),
    }
}

/// A JSON object body (empty body: empty object); RabbitMQ answers `not_json` otherwise.
pub fn body_object(body: &Bytes) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(ApiError::BadRequest("not_json".into())),
    }
}

/// A flag that may come as a JSON bool or as "true"/"false" (rabbitmqadmin sends strings).
pub fn flag(o: &Map<String, Value>, k: &str, default: bool) -> Result<bool, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) if s == "true" => Ok(true),
        Some(Value::String(s)) if s == "false" => Ok(false),
        Some(other) => Err(ApiError::BadRequest(format!(
            "{k} must be true or false, got {other}"
        ))),
    }
}

/// A string field.
pub fn string<'a>(o: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    o.get(k).and_then(Value::as_str)
}

/// `{"rate": r}`.
pub fn details(rate: f64) -> Value {
    serde_json::json!({ "rate": (rate * 10.0).round() / 10.0 })
}
