//! Where a dead-lettered message was first published: the exchange and routing keys to replay
//! it to (the management API's replay, the UI's DLQ browser). The first death is
//! `x-first-death-queue`/`x-first-death-exchange` (else the oldest `x-death` entry, the last
//! one); its routing keys are those of the `x-death` entry for that queue and exchange (all the
//! keys it was published with, CC included).

use charon_protocol::{AMQPValue, FieldTable, ShortString};

fn text(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

fn get<'a>(t: &'a FieldTable, k: &str) -> Option<&'a AMQPValue> {
    t.inner().get(&ShortString::from(k))
}

fn entry_text(e: &FieldTable, k: &str) -> Option<String> {
    get(e, k).and_then(text)
}

/// The original `(exchange, routing keys)` of a message with `headers`; `None` when it was never
/// dead-lettered (no `x-death`).
pub fn original_target(headers: Option<&FieldTable>) -> Option<(String, Vec<String>)> {
    let h = headers?;
    let Some(AMQPValue::FieldArray(deaths)) = get(h, "x-death") else {
        return None;
    };
    let entries: Vec<&FieldTable> = deaths
        .as_slice()
        .iter()
        .filter_map(|d| match d {
            AMQPValue::FieldTable(t) => Some(t),
            _ => None,
        })
        .collect();
    let oldest = entries.last()?;
    let queue = get(h, "x-first-death-queue")
        .and_then(text)
        .or_else(|| entry_text(oldest, "queue"));
    let exchange = get(h, "x-first-death-exchange")
        .and_then(text)
        .or_else(|| entry_text(oldest, "exchange"))?;
    let entry = entries
        .iter()
        .find(|e| {
            entry_text(e, "queue") == queue && entry_text(e, "exchange").as_ref() == Some(&exchange)
        })
        .unwrap_or(oldest);
    let keys = match get(entry, "routing-keys") {
        Some(AMQPValue::FieldArray(a)) => a.as_slice().iter().filter_map(text).collect(),
        _ => Vec::new(),
    };
    Some((exchange, keys))
}

#[cfg(test)]
mod tests {
    use charon_protocol::{FieldArray, LongString};

    use super::*;

    fn s(v: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(v))
    }

    fn death(queue: &str, exchange: &str, keys: &[&str]) -> AMQPValue {
        let mut t = FieldTable::default();
        t.insert(ShortString::from("queue"), s(queue));
        t.insert(ShortString::from("exchange"), s(exchange));
        let keys: Vec<AMQPValue> = keys.iter().map(|k| s(k)).collect();
        t.insert(
            ShortString::from("routing-keys"),
            AMQPValue::FieldArray(FieldArray::from(keys)),
        );
        AMQPValue::FieldTable(t)
    }

    fn headers(deaths: Vec<AMQPValue>, first: Option<(&str, &str)>) -> FieldTable {
        let mut h = FieldTable::default();
        h.insert(
            ShortString::from("x-death"),
            AMQPValue::FieldArray(FieldArray::from(deaths)),
        );
        if let Some((q, x)) = first {
            h.insert(ShortString::from("x-first-death-queue"), s(q));
            h.insert(ShortString::from("x-first-death-exchange"), s(x));
        }
        h
    }

    #[test]
    fn the_first_death_gives_exchange_and_all_its_keys() {
        // Most recent first: died in `retry` (via the DLX) after dying first in `work`.
        let h = headers(
            vec![
                death("retry", "dlx", &["work"]),
                death("work", "orders", &["o.created", "audit"]),
            ],
            Some(("work", "orders")),
        );
        assert_eq!(
            original_target(Some(&h)),
            Some(("orders".into(), vec!["o.created".into(), "audit".into()]))
        );
        // Without the x-first-death-* headers, the oldest entry.
        let h = headers(
            vec![
                death("retry", "dlx", &["work"]),
                death("work", "", &["work"]),
            ],
            None,
        );
        assert_eq!(
            original_target(Some(&h)),
            Some((String::new(), vec!["work".into()]))
        );
    }

    #[test]
    fn never_dead_lettered_has_no_origin() {
        assert_eq!(original_target(None), None);
        assert_eq!(original_target(Some(&FieldTable::default())), None);
    }
}
