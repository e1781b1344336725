//! Queue actors: one tokio task per queue owns a `charon_core::QueueState`.
//!
//! Connections and the management API talk to a queue only through its
//! [`QueueHandle`](crate::handles::QueueHandle) (a bounded command channel of
//! [`QueueCmd`](crate::handles::QueueCmd)s). Imports point one way: connections use this
//! module; it uses the vhost, the handles and the store ([`crate::persist`]).

mod actor;
pub(crate) mod admin;
mod dead_letters;
pub(crate) mod direct;
pub(crate) mod dl_errors;
mod held_runs;
mod idmap;
mod idset;
pub(crate) mod marks;
mod page_flow;
mod pending_bodies;
mod place;
mod retry;
mod spawn;
mod stored;
mod take;

pub(crate) use crate::persist::{CommitWatch, Durable};
pub(crate) use actor::now_ms;
pub(crate) use place::{Places, allocate, place, place_one, placed};
pub(crate) use spawn::{read_recovered, spawn_queue, spawn_queue_with};
pub(crate) use stored::PagedShapes;
