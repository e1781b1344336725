//! Taking one ready message out of a queue to move it elsewhere (the management API's replay of
//! dead letters, `queue_replay.rs`): the route decides with the message in hand, inside the
//! queue actor, so no consumer can take the message in between; a taken stored message is not
//! settled here — the caller moves its stored copy to the targets with one `Route` record.

use charon_core::{MsgId, QueueState};

use super::stored::StoreSide;
use crate::handles::{TakeRoute, Taken};

/// Takes ready message `id` if `route` accepts it.
pub(super) fn take(
    state: &mut QueueState,
    store: Option<&mut StoreSide>,
    id: MsgId,
    route: TakeRoute,
) -> Taken {
    let Some(message) = state.ready_message(id).cloned() else {
        return Taken::Missing;
    };
    let (loaded, store_msg) = match store.as_deref() {
        Some(s) => s.load_stored(id, &message),
        None => (message, None),
    };
    if loaded.is_paged() {
        return Taken::Refused("its body could not be read back".into());
    }
    let (message, targets) = match (route.0)(&loaded) {
        Ok(r) => r,
        Err(why) => return Taken::Refused(why),
    };
    let source = store.as_deref().and_then(|s| s.source_of(Some(id)));
    state.remove(id);
    if source.is_some()
        && let Some(s) = store
    {
        // Leaves through the caller's `Route` record, not a settle.
        s.moved(id);
    }
    Taken::Out {
        message,
        targets,
        source,
        store_msg,
    }
}
