//! Queue actors: one tokio task per queue owns a `charon_core::QueueState`.
//!
//! Connections and the management API talk to a queue only through its [`QueueHandle`]
//! (a bounded command channel). The actor is not written yet; see docs/ARCHITECTURE.md
//! ("Server: planned design") for the command set and delivery loop it will implement.

mod handle;

pub use handle::{QueueCmd, QueueHandle};
