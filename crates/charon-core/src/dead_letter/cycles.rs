//! Cycle detection (`rabbit_dead_letter:detect_cycles/is_cycle`): a dead-lettered message that
//! would reach a queue it was already dead-lettered from is dropped there, unless a rejection
//! happened somewhere in that cycle (retry loops depend on this). Dead-lettering for reason
//! `rejected` never counts as a cycle.

use charon_protocol::raw_table as rt;
use charon_protocol::{AMQPValue, BasicProperties, RawProperties, ShortString};

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

/// [`is_cycle`] on encoded properties (no decode; decodes only when they are malformed).
pub fn is_cycle_raw(reason: Reason, raw: &RawProperties, target_queue: &str) -> bool {
    if reason == Reason::Rejected {
        return false;
    }
    let walked = (|| {
        let Some(body) = raw.split_headers()?.headers else {
            return Some(false);
        };
        let fields = rt::fields(body)?;
        let Some(f) = rt::last(&fields, "x-death").filter(|f| f.value.tag == b'A') else {
            return Some(false);
        };
        let mut tables = Vec::new();
        for e in rt::elements(f.value.body)? {
            tables.push(if e.tag == b'F' {
                Some(rt::fields(e.body)?)
            } else {
                None
            });
        }
        fn text<'a>(t: &Option<Vec<rt::RawField<'a>>>, k: &str) -> Option<&'a [u8]> {
            let f = rt::last(t.as_ref()?, k)?;
            (f.value.tag == b'S').then_some(f.value.body)
        }
        let Some(pos) = tables
            .iter()
            .position(|t| text(t, "queue") == Some(target_queue.as_bytes()))
        else {
            return Some(false);
        };
        Some(
            tables[..=pos]
                .iter()
                .all(|t| matches!(text(t, "reason"), Some(r) if r != b"rejected")),
        )
    })();
    walked.unwrap_or_else(|| is_cycle(reason, &raw.decode().unwrap_or_default(), target_queue))
}
