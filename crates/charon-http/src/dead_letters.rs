//! The dead-letter archive's API (`/api/dead-letters…`, docs/archive.md): list, get, groups,
//! edit, replay jobs, skip, delete, audit, stats. A client of the broker's
//! [`ArchiveService`](charon_server::archive::ArchiveService); every change records the acting
//! user in the audit table.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use charon_archive::filter::Filter;
use charon_archive::ops::{self, Edit, Selection};
use charon_archive::{ArchiveError, jobs, scope};
use charon_server::archive::ArchiveService;
use charon_server::broker::Broker;
use serde_json::{Value, json};

use crate::auth::AuthUser;
use crate::error::ApiError;

/// The archive API's routes.
pub fn routes() -> Router<Arc<Broker>> {
    Router::new()
        .route("/api/dead-letters", get(list))
        .route("/api/dead-letters/groups", get(groups))
        .route("/api/dead-letters/audit", get(audit))
        .route("/api/dead-letters/stats", get(stats))
        .route("/api/dead-letters/jobs", get(list_jobs))
        .route(
            "/api/dead-letters/jobs/{id}",
            get(get_job).delete(cancel_job),
        )
        .route("/api/dead-letters/replay", post(replay))
        .route("/api/dead-letters/skip", post(skip))
        .route("/api/dead-letters/delete", post(delete_many))
        .route("/api/dead-letters/retention", post(retention))
        .route(
            "/api/dead-letters/{id}",
            get(get_one).put(edit).delete(delete_one),
        )
}

/// An error of this API.
#[derive(Debug)]
pub enum DlError {
    /// Auth, not found, bad request.
    Api(ApiError),
    /// The archive database failed.
    Unavailable(String),
}

impl From<ApiError> for DlError {
    fn from(e: ApiError) -> Self {
        DlError::Api(e)
    }
}

impl From<ArchiveError> for DlError {
    fn from(e: ArchiveError) -> Self {
        match e {
            ArchiveError::Invalid(m) => DlError::Api(ApiError::BadRequest(m)),
            other => DlError::Unavailable(other.to_string()),
        }
    }
}

impl IntoResponse for DlError {
    fn into_response(self) -> Response {
        match self {
            DlError::Api(e) => e.into_response(),
            DlError::Unavailable(reason) => (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({"error": "archive_unavailable", "reason": reason})),
            )
                .into_response(),
        }
    }
}

type Res = Result<Response, DlError>;

fn service(b: &Broker) -> Result<Arc<ArchiveService>, DlError> {
    b.archive()
        .ok_or_else(|| DlError::Unavailable("the dead-letter archive is not running".into()))
}

fn may_change(u: &AuthUser) -> Result<(), DlError> {
    Ok(u.may_set_policies()?)
}

/// The vhosts whose records `u` sees, as RabbitMQ's management API shows queues: every vhost for
/// monitoring and administrator users (`None`), else those the user has permissions on.
fn read_scope(b: &Broker, u: &AuthUser) -> Option<Vec<String>> {
    (!u.is_monitor()).then(|| permitted(b, u))
}

/// The vhosts whose records `u` may change: every vhost for administrators, else those the
/// user has permissions on (a monitoring policymaker sees all but changes only its own).
fn write_scope(b: &Broker, u: &AuthUser) -> Option<Vec<String>> {
    (!u.is_admin()).then(|| permitted(b, u))
}

fn permitted(b: &Broker, u: &AuthUser) -> Vec<String> {
    b.vhosts()
        .iter()
        .filter(|v| b.may_access(&u.name, &v.name))
        .map(|v| v.name.to_string())
        .collect()
}

/// Limits a selection to `scope`: a filter gains the vhost condition, ids of records outside it
/// are left out (as if they did not exist).
async fn scoped(
    svc: &Arc<ArchiveService>,
    sel: Selection,
    scope: Option<Vec<String>>,
) -> Result<Selection, DlError> {
    Ok(match sel {
        Selection::Filter(f) => Selection::Filter(f.within(scope)),
        Selection::Ids(ids) if scope.is_some() => Selection::Ids(
            svc.run(move |c| scope::visible_ids(c, &ids, scope.as_deref()))
                .await?,
        ),
        ids @ Selection::Ids(_) => ids,
    })
}

/// Record `id` may be changed by `u`: 404 when `u` does not see it, 401 when `u` sees but may
/// not change it.
async fn check_writable(
    b: &Broker,
    svc: &Arc<ArchiveService>,
    u: &AuthUser,
    id: i64,
) -> Result<(), DlError> {
    let (read, write) = (read_scope(b, u), write_scope(b, u));
    if write.is_none() {
        return Ok(());
    }
    let (r, w) = svc
        .run(move |c| {
            Ok((
                !scope::visible_ids(c, &[id], read.as_deref())?.is_empty(),
                !scope::visible_ids(c, &[id], write.as_deref())?.is_empty(),
            ))
        })
        .await?;
    match (r, w) {
        (_, true) => Ok(()),
        (true, false) => Err(ApiError::not_authorised("Access refused.").into()),
        (false, false) => Err(ApiError::NotFound.into()),
    }
}

fn paging(q: &[(String, String)]) -> Result<(u64, u64), DlError> {
    let get = |k: &str, d: u64| -> Result<u64, DlError> {
        match q.iter().find(|(key, _)| key == k) {
            Some((_, v)) => v
                .parse::<u64>()
                .map_err(|_| ApiError::BadRequest(format!("{k}: not a number: '{v}'")).into()),
            None => Ok(d),
        }
    };
    let page = get("page", 1)?.max(1);
    let size = get("page_size", 100)?.clamp(1, 1000);
    Ok((page, size))
}

fn param<'a>(q: &'a [(String, String)], k: &str) -> Option<&'a str> {
    q.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str())
}

/// `exact_total` (list and groups): absent or `false`, `error=`/`body=` requests are capped
/// (`total_cap::CAP`; docs/archive.md "API": `total_relation`, `count_relation`); `true`, exact.
fn cap_of(q: &[(String, String)]) -> Result<Option<u64>, DlError> {
    match param(q, "exact_total") {
        None | Some("false") => Ok(Some(charon_archive::total_cap::CAP)),
        Some("true") => Ok(None),
        Some(v) => {
            Err(ApiError::BadRequest(format!("exact_total: not true or false: '{v}'")).into())
        }
    }
}

async fn list(
    State(b): State<Arc<Broker>>,
    u: AuthUser,
    Query(q): Query<Vec<(String, String)>>,
) -> Res {
    let svc = service(&b)?;
    let filter = Filter::from_pairs(q.iter().map(|(k, v)| (k.as_str(), v.as_str())))?
        .within(read_scope(&b, &u));
    let (page, size) = paging(&q)?;
    let sort = param(&q, "sort").map(str::to_string);
    // `error=`/`body=` totals are counted up to a cap unless `exact_total=true`, `header.…` ones
    // up to ten times it (docs/archive.md "API": `total_relation` says which).
    let cap = cap_of(&q)?;
    let (items, total) = svc
        .read(move |c| ops::list_capped(c, &filter, sort.as_deref(), page, size, cap))
        .await?;
    let items: Vec<Value> = items
        .into_iter()
        .map(charon_archive::Record::into_json)
        .collect();
    Ok(Json(json!({
        "items": items,
        "total": total.count,
        "total_relation": total.relation.as_str(),
        "page": page,
        "page_size": size
    }))
    .into_response())
}

fn parse_id(id: &str) -> Result<i64, DlError> {
    id.parse().map_err(|_| DlError::Api(ApiError::NotFound))
}

async fn get_one(State(b): State<Arc<Broker>>, u: AuthUser, Path(id): Path<String>) -> Res {
    let svc = service(&b)?;
    let id = parse_id(&id)?;
    let sees = read_scope(&b, &u);
    let (rec, hist) = svc
        .read(move |c| {
            if scope::visible_ids(c, &[id], sees.as_deref())?.is_empty() {
                return Ok((None, Vec::new()));
            }
            Ok((ops::get(c, id)?, ops::history(c, id)?))
        })
        .await?;
    let rec = rec.ok_or(ApiError::NotFound)?;
    let mut j = rec.to_json();
    j["history"] = Value::Array(hist);
    Ok(Json(j).into_response())
}

async fn groups(
    State(b): State<Arc<Broker>>,
    u: AuthUser,
    Query(q): Query<Vec<(String, String)>>,
) -> Res {
    let svc = service(&b)?;
    let filter = Filter::from_pairs(q.iter().map(|(k, v)| (k.as_str(), v.as_str())))?
        .within(read_scope(&b, &u));
    let by = param(&q, "by").map(str::to_string);
    // An `error`/`body` request groups its newest 10,001 matches unless `exact_total=true`
    // (docs/archive.md "API": `count_relation` says which).
    let cap = cap_of(&q)?;
    let g = svc
        .read(move |c| ops::groups_capped(c, by.as_deref(), &filter, cap))
        .await?;
    Ok(Json(Value::Array(g)).into_response())
}

async fn edit(
    State(b): State<Arc<Broker>>,
    u: AuthUser,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Res {
    may_change(&u)?;
    let svc = service(&b)?;
    let id = parse_id(&id)?;
    check_writable(&b, &svc, &u, id).await?;
    let payload = match body.get("payload") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            Some(match body.get("payload_encoding").and_then(Value::as_str) {
                Some("base64") => base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map_err(|_| ApiError::BadRequest("payload: invalid base64".into()))?,
                None | Some("string") => s.as_bytes().to_vec(),
                Some(other) => {
                    return Err(ApiError::BadRequest(format!(
                        "payload_encoding must be string or base64, not '{other}'"
                    ))
                    .into());
                }
            })
        }
        Some(_) => return Err(ApiError::BadRequest("payload must be a string".into()).into()),
    };
    let headers = body.get("headers").filter(|h| !h.is_null()).cloned();
    if payload.is_none() && headers.is_none() {
        return Err(
            ApiError::BadRequest("nothing to edit: give payload and/or headers".into()).into(),
        );
    }
    let e = Edit {
        payload,
        headers,
        note: body.get("note").and_then(Value::as_str).map(str::to_string),
    };
    let actor = u.name.clone();
    let rec = svc
        .run(move |c| ops::edit(c, id, &actor, &e))
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(rec.to_json()).into_response())
}

/// `{"ids": [...]}` or `{"filter": {...}}` (an empty filter only with `"all": true`).
fn selection(body: &Value) -> Result<Selection, DlError> {
    if let Some(ids) = body.get("ids") {
        let ids = ids
            .as_array()
            .ok_or_else(|| ApiError::BadRequest("ids must be an array of numbers".into()))?
            .iter()
            .map(|v| {
                v.as_i64()
                    .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                    .ok_or_else(|| ApiError::BadRequest("ids must be an array of numbers".into()))
            })
            .collect::<Result<Vec<i64>, ApiError>>()?;
        return Ok(Selection::Ids(ids));
    }
    let Some(f) = body.get("filter") else {
        return Err(ApiError::BadRequest("give ids or filter".into()).into());
    };
    let filter = Filter::from_json(f)?;
    let all = f.get("all").and_then(Value::as_bool).unwrap_or(false)
        || body.get("all").and_then(Value::as_bool).unwrap_or(false);
    if filter.is_empty() && !all {
        return Err(ApiError::BadRequest(
            "an empty filter selects every record: add \"all\": true to mean it".into(),
        )
        .into());
    }
    Ok(Selection::Filter(filter))
}

async fn replay(State(b): State<Arc<Broker>>, u: AuthUser, Json(body): Json<Value>) -> Res {
    may_change(&u)?;
    let svc = service(&b)?;
    let sel = scoped(&svc, selection(&body)?, write_scope(&b, &u)).await?;
    if let Some(r) = body.get("rate")
        && !r.is_null()
        && r.as_f64().is_none_or(|r| r <= 0.0)
    {
        return Err(ApiError::BadRequest("rate must be a positive number".into()).into());
    }
    let mut request = serde_json::Map::new();
    for k in [
        "exchange",
        "routing_key",
        "rate",
        "strip_death_headers",
        "note",
    ] {
        if let Some(v) = body.get(k).filter(|v| !v.is_null()) {
            request.insert(k.into(), v.clone());
        }
    }
    let (job, total) = svc
        .start_replay(sel, Value::Object(request), u.name.clone())
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"job": job, "total": total})),
    )
        .into_response())
}

async fn list_jobs(State(b): State<Arc<Broker>>, u: AuthUser) -> Res {
    let svc = service(&b)?;
    let sees = read_scope(&b, &u);
    let user = u.name.clone();
    let all = svc
        .read(move |c| {
            let mut out = Vec::new();
            for j in jobs::list(c)? {
                let id = j.get("id").and_then(Value::as_i64).unwrap_or(-1);
                if scope::job_visible(c, id, &user, sees.as_deref())? {
                    out.push(j);
                }
            }
            Ok(out)
        })
        .await?;
    Ok(Json(Value::Array(all)).into_response())
}

async fn get_job(State(b): State<Arc<Broker>>, u: AuthUser, Path(id): Path<String>) -> Res {
    let svc = service(&b)?;
    let id = parse_id(&id)?;
    let sees = read_scope(&b, &u);
    let user = u.name.clone();
    let j = svc
        .read(move |c| {
            if !scope::job_visible(c, id, &user, sees.as_deref())? {
                return Ok(None);
            }
            jobs::info(c, id)
        })
        .await?
        .ok_or(ApiError::NotFound)?;
    Ok(Json(j).into_response())
}

async fn cancel_job(State(b): State<Arc<Broker>>, u: AuthUser, Path(id): Path<String>) -> Res {
    may_change(&u)?;
    let svc = service(&b)?;
    let id = parse_id(&id)?;
    let (sees, changes, user) = (read_scope(&b, &u), write_scope(&b, &u), u.name.clone());
    let (r, w) = svc
        .run(move |c| {
            Ok((
                scope::job_visible(c, id, &user, sees.as_deref())?,
                scope::job_visible(c, id, &user, changes.as_deref())?,
            ))
        })
        .await?;
    if !r {
        return Err(ApiError::NotFound.into());
    }
    if !w {
        return Err(ApiError::not_authorised("Access refused.").into());
    }
    let actor = u.name.clone();
    let was = svc.run(move |c| jobs::cancel(c, id, &actor)).await?;
    Ok(Json(json!({"job": id, "cancelled": was})).into_response())
}

async fn skip(State(b): State<Arc<Broker>>, u: AuthUser, Json(body): Json<Value>) -> Res {
    may_change(&u)?;
    let svc = service(&b)?;
    let sel = scoped(&svc, selection(&body)?, write_scope(&b, &u)).await?;
    let reason = body
        .get("reason")
        .and_then(Value::as_str)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| ApiError::BadRequest("reason is required".into()))?
        .to_string();
    let actor = u.name.clone();
    let n = svc
        .run(move |c| ops::skip(c, &sel, &actor, &reason))
        .await?;
    Ok(Json(json!({"skipped": n})).into_response())
}

async fn delete_many(State(b): State<Arc<Broker>>, u: AuthUser, Json(body): Json<Value>) -> Res {
    may_change(&u)?;
    let svc = service(&b)?;
    let sel = scoped(&svc, selection(&body)?, write_scope(&b, &u)).await?;
    let note = body.get("note").and_then(Value::as_str).map(str::to_string);
    let actor = u.name.clone();
    let n = svc
        .run(move |c| ops::delete(c, &sel, &actor, note.as_deref()))
        .await?;
    Ok(Json(json!({"deleted": n})).into_response())
}

async fn delete_one(State(b): State<Arc<Broker>>, u: AuthUser, Path(id): Path<String>) -> Res {
    may_change(&u)?;
    let svc = service(&b)?;
    let id = parse_id(&id)?;
    check_writable(&b, &svc, &u, id).await?;
    let actor = u.name.clone();
    let n = svc
        .run(move |c| ops::delete(c, &Selection::Ids(vec![id]), &actor, None))
        .await?;
    if n == 0 {
        return Err(ApiError::NotFound.into());
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn audit(
    State(b): State<Arc<Broker>>,
    u: AuthUser,
    Query(q): Query<Vec<(String, String)>>,
) -> Res {
    let svc = service(&b)?;
    let (page, size) = paging(&q)?;
    let terms: BTreeMap<String, String> = q.into_iter().collect();
    let sees = read_scope(&b, &u);
    let user = u.name.clone();
    let (items, total) = svc
        .read(move |c| {
            let visible = sees.as_deref().map(|v| (user.as_str(), v));
            ops::list_audit(c, &terms, page, size, visible)
        })
        .await?;
    Ok(
        Json(json!({"items": items, "total": total, "total_relation": "eq", "page": page, "page_size": size}))
            .into_response(),
    )
}

/// Archive-wide figures (every vhost): monitoring and administrator users, as RabbitMQ's node
/// figures.
async fn stats(State(b): State<Arc<Broker>>, u: AuthUser) -> Res {
    u.require_monitor()?;
    let svc = service(&b)?;
    Ok(Json(svc.read(ops::stats).await?).into_response())
}

/// Runs retention over the whole archive (every vhost): administrators.
async fn retention(State(b): State<Arc<Broker>>, u: AuthUser) -> Res {
    u.require_admin()?;
    let svc = service(&b)?;
    let (aged, capped) = svc.retention_now().await?;
    Ok(Json(json!({"retention_deleted": aged, "size_cap_deleted": capped})).into_response())
}
