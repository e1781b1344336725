//! Queue actors: one tokio task per queue owns a `charon_core::QueueState`.
//!
//! Connections and the management API talk to a queue only through its [`QueueHandle`]
//! (a bounded command channel of [`QueueCmd`]s).

mod actor;
pub mod admin;
mod dead_letters;
mod handle;
mod stored;

pub use actor::{QueueContext, now_ms, spawn};
pub use handle::{ConfirmTo, ConsumerTarget, Placed, QueueCmd, QueueHandle, QueueStats, Stored};
pub(crate) use handle::{allocate, placed};
pub use stored::{PagedShapes, Persisted, StoreSide};
