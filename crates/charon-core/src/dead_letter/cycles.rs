//! Cycle detection (`rabbit_dead_letter:detect_cycles/is_cycle`): a dead-lettered message that
//! would reach a queue it was already dead-lettered from is dropped there, unless a rejection
//! happened somewhere in that cycle (retry loops depend on this). Dead-lettering for reason
//! `rejected` never counts as a cycle.

use charon_protocol::{AMQPValue, BasicProperties, ShortString};

use super::Reason;

fn field<'a>(t: &'a AMQPValue, k: &str) -> Option<&'a [u8]> {
    let AMQPValue::FieldTable(t) = t else {
        return None;
    };
    match t.inner().get(&ShortString::from(k))? {
        AMQPValue::LongString(s) => Some(s.as_bytes()),
        AMQPValue::ShortString(s) => Some(s.as_str().as_bytes()),
        _ => None,
    }
}

/// Whether routing a dead-lettered copy with properties `props` (dead-lettered for `reason`,
/// its `x-death` updated) to `target_queue` closes a cycle with no rejection in it, so that the
/// target must be skipped.
pub fn is_cycle(reason: Reason, props: &BasicProperties, target_queue: &str) -> bool {
    if reason == Reason::Rejected {
        return false;
    }
    let Some(h) = props.headers().as_ref() else {
        return false;
    };
    let Some(AMQPValue::FieldArray(deaths)) = h.inner().get(&ShortString::from("x-death")) else {
        return false;
    };
    let deaths = deaths.as_slice();
    let Some(pos) = deaths
        .iter()
        .position(|d| field(d, "queue") == Some(target_queue.as_bytes()))
    else {
        return false;
    };
    deaths[..=pos]
        .iter()
        .all(|d| matches!(field(d, "reason"), Some(r) if r != b"rejected"))
}
