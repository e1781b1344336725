//! The node's memory as the management API shows it: the fields `/api/nodes` adds to RabbitMQ's
//! `mem_used`/`mem_limit`/`mem_alarm` (both measurements behind `mem_used`), and the breakdown
//! of `GET /api/nodes/{name}/memory` (also `?memory=true` on `/api/nodes/{name}`), shaped as
//! RabbitMQ's (`{"memory": {..., "total": {"rss", "allocated"}, "strategy"}}`) with Charon's
//! own categories. `allocated` is the live heap (bytes allocated and not freed).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use charon_server::admin::node::NodeFacts;
use charon_server::broker::Broker;
use serde_json::{Value, json};

use crate::auth::AuthUser;
use crate::error::ApiError;

/// Fields for a node object: the resident set and the live heap the allocator counts
/// (`mem_used` is one of them, per `mem_calculation_strategy`).
pub fn node_fields(f: &NodeFacts) -> Value {
    let m = &f.memory;
    json!({
        "mem_calculation_strategy": f.mem_strategy.as_str(),
        "mem_rss": m.rss,
        "mem_allocated": m.allocated(),
        "mem_allocator": m.allocator.map(|a| a.name),
    })
}

/// The breakdown (bytes): message bodies queues hold, the rest of the live heap, resident memory
/// that is not live heap (RabbitMQ's `reserved_unallocated`: freed pages the allocator still
/// holds, thread stacks, code, SQLite's heap), the resident set by kind, mimalloc's own
/// figures, and the totals of both measurements.
pub fn breakdown(f: &NodeFacts) -> Value {
    let m = &f.memory;
    let allocated = m.allocated();
    json!({
        "message_bodies": f.mem_message_bodies,
        "heap_other": allocated.saturating_sub(f.mem_message_bodies),
        "reserved_unallocated": m.unallocated(),
        "rss_anon": m.rss_anon,
        "rss_file": m.rss_file,
        "rss_shmem": m.rss_shmem,
        "allocator": m.allocator.map(|a| a.name),
        "allocator_committed": m.allocator.map_or(0, |a| a.committed),
        "allocator_committed_peak": m.allocator.map_or(0, |a| a.committed_peak),
        "allocator_reserved": m.allocator.map_or(0, |a| a.reserved),
        "total": {"rss": m.rss, "allocated": allocated},
        "strategy": f.mem_strategy.as_str(),
    })
}

/// `GET /api/nodes/{name}/memory`.
pub async fn node_memory(
    user: AuthUser,
    State(broker): State<Arc<Broker>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    user.require_monitor()?;
    if name != charon_server::admin::node_name() {
        return Err(ApiError::NotFound);
    }
    Ok(Json(json!({"memory": breakdown(&broker.node_facts())})))
}
