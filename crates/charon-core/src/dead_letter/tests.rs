//! The spec's dead-lettering rules for the dead-lettered message, one test per rule, asserting
//! exact AMQP value types.

use std::sync::Arc;

use bytes::Bytes;
use charon_protocol::{
    AMQPValue, BasicProperties, FieldArray, FieldTable, LongString, RawProperties, ShortString,
};
use proptest::prelude::*;

use super::*;
use crate::routing::{publish_routing_keys, strip_bcc};

fn ls(v: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(v))
}

fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(ShortString::from(*k), v.clone());
    }
    t
}

fn arr(vals: &[&str]) -> AMQPValue {
    AMQPValue::FieldArray(FieldArray::from(
        vals.iter().map(|v| ls(v)).collect::<Vec<_>>(),
    ))
}

fn message(rk: &str, props: BasicProperties) -> Message {
    Message::new(
        "orders",
        rk,
        RawProperties::encode(&props),
        Bytes::from_static(b"body"),
    )
}

fn target(x: &str, rk: Option<&str>) -> DlxSettings {
    DlxSettings {
        exchange: Arc::from(x),
        routing_key: rk.map(Arc::from),
    }
}

fn headers(m: &Message) -> FieldTable {
    m.properties
        .decode()
        .ok()
        .and_then(|p| p.headers().clone())
        .unwrap_or_default()
}

fn get<'a>(t: &'a FieldTable, k: &str) -> Option<&'a AMQPValue> {
    t.inner().get(&ShortString::from(k))
}

fn deaths(m: &Message) -> Vec<FieldTable> {
    match get(&headers(m), "x-death") {
        Some(AMQPValue::FieldArray(a)) => a
            .as_slice()
            .iter()
            .filter_map(|v| match v {
                AMQPValue::FieldTable(t) => Some(t.clone()),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn keys(d: &DeadLetterCopy) -> Vec<&str> {
    d.routing_keys.iter().map(|k| k.as_ref()).collect()
}

fn with_cc_bcc() -> BasicProperties {
    BasicProperties::default().with_headers(table(&[
        ("CC", arr(&["cc1", "cc2"])),
        ("BCC", arr(&["bcc1"])),
        ("app", ls("kept")),
    ]))
}

#[test]
fn dead_letter_routing_key_replaces_routing_keys_and_removes_cc() {
    let d = make_copy(
        &message("rk", with_cc_bcc()),
        "q",
        Reason::Rejected,
        &target("dlx", Some("dlk")),
        0,
    );
    assert_eq!(keys(&d), vec!["dlk"]);
    assert_eq!(&*d.message.routing_key, "dlk");
    assert!(get(&headers(&d.message), "CC").is_none());
}

#[test]
fn without_dead_letter_routing_key_all_original_keys_including_cc_and_bcc_route() {
    let d = make_copy(
        &message("rk", with_cc_bcc()),
        "q",
        Reason::Rejected,
        &target("dlx", None),
        0,
    );
    assert_eq!(keys(&d), vec!["rk", "cc1", "cc2", "bcc1"]);
    assert_eq!(&*d.message.routing_key, "rk");
    assert_eq!(get(&headers(&d.message), "CC"), Some(&arr(&["cc1", "cc2"])));
}

#[test]
fn bcc_keys_removed_at_publish_still_route_the_dead_letter() {
    let m = message("rk", BasicProperties::default()).with_bcc(vec![Arc::from("hidden")]);
    let d = make_copy(&m, "q", Reason::Expired, &target("dlx", None), 0);
    assert_eq!(keys(&d), vec!["rk", "hidden"]);
}

#[test]
fn bcc_is_always_removed() {
    for rk in [None, Some("k")] {
        let d = make_copy(
            &message("rk", with_cc_bcc()),
            "q",
            Reason::Rejected,
            &target("dlx", rk),
            0,
        );
        assert!(get(&headers(&d.message), "BCC").is_none());
    }
    let props = with_cc_bcc();
    let stripped = strip_bcc(&props).and_then(|r| r.decode().ok());
    let h = stripped
        .and_then(|p| p.headers().clone())
        .unwrap_or_default();
    assert!(get(&h, "BCC").is_none());
    assert!(get(&h, "CC").is_some());
    assert!(strip_bcc(&BasicProperties::default()).is_none());
}

#[test]
fn new_exchange_is_the_dead_letter_exchange() {
    let d = make_copy(
        &message("rk", BasicProperties::default()),
        "q",
        Reason::Expired,
        &target("my-dlx", None),
        0,
    );
    assert_eq!(&*d.message.exchange, "my-dlx");
    assert_eq!(d.message.body, Bytes::from_static(b"body"));
}

#[test]
fn x_death_entry_has_queue_reason_count_time_exchange_routing_keys_with_exact_types() {
    let d = make_copy(
        &message("rk", with_cc_bcc()),
        "src",
        Reason::Rejected,
        &target("dlx", None),
        1_700_000_000_123,
    );
    let x = deaths(&d.message);
    assert_eq!(x.len(), 1);
    let e = &x[0];
    assert_eq!(get(e, "queue"), Some(&ls("src")));
    assert_eq!(get(e, "reason"), Some(&ls("rejected")));
    assert_eq!(get(e, "count"), Some(&AMQPValue::LongLongInt(1)));
    assert_eq!(get(e, "time"), Some(&AMQPValue::Timestamp(1_700_000_000)));
    assert_eq!(get(e, "exchange"), Some(&ls("orders")));
    assert_eq!(get(e, "routing-keys"), Some(&arr(&["rk", "cc1", "cc2"])));
    assert!(get(e, "original-expiration").is_none());
}

#[test]
fn reason_texts_are_the_specs() {
    let texts: Vec<&str> = [
        Reason::Rejected,
        Reason::Expired,
        Reason::Maxlen,
        Reason::DeliveryLimit,
    ]
    .iter()
    .map(|r| r.as_str())
    .collect();
    assert_eq!(
        texts,
        vec!["rejected", "expired", "maxlen", "delivery_limit"]
    );
}

#[test]
fn x_death_is_most_recent_first_one_per_queue_and_reason() {
    let m = message("rk", BasicProperties::default());
    let d1 = make_copy(&m, "a", Reason::Expired, &target("dlx", None), 0).message;
    let d2 = make_copy(&d1, "b", Reason::Rejected, &target("dlx", None), 0).message;
    let d3 = make_copy(&d2, "a", Reason::Rejected, &target("dlx", None), 0).message;
    let x = deaths(&d3);
    let qr: Vec<(Option<&AMQPValue>, Option<&AMQPValue>)> = x
        .iter()
        .map(|e| (get(e, "queue"), get(e, "reason")))
        .collect();
    assert_eq!(
        qr,
        vec![
            (Some(&ls("a")), Some(&ls("rejected"))),
            (Some(&ls("b")), Some(&ls("rejected"))),
            (Some(&ls("a")), Some(&ls("expired"))),
        ]
    );
}

#[test]
fn x_death_repeated_queue_and_reason_increments_count_and_moves_to_front() {
    let m = message("rk", BasicProperties::default());
    let d1 = make_copy(&m, "a", Reason::Expired, &target("dlx", None), 1000).message;
    let d2 = make_copy(&d1, "b", Reason::Expired, &target("dlx2", None), 2000).message;
    let d3 = make_copy(&d2, "a", Reason::Expired, &target("dlx", None), 3000).message;
    let x = deaths(&d3);
    assert_eq!(x.len(), 2);
    assert_eq!(get(&x[0], "queue"), Some(&ls("a")));
    assert_eq!(get(&x[0], "count"), Some(&AMQPValue::LongLongInt(2)));
    // time and exchange stay those of the first death for {a, expired} (RabbitMQ 4.0)
    assert_eq!(get(&x[0], "time"), Some(&AMQPValue::Timestamp(1)));
    assert_eq!(get(&x[0], "exchange"), Some(&ls("orders")));
    assert_eq!(get(&x[1], "queue"), Some(&ls("b")));
    assert_eq!(get(&x[1], "count"), Some(&AMQPValue::LongLongInt(1)));
}

#[test]
fn x_first_death_headers_are_set_once_and_never_changed() {
    let m = message("rk", BasicProperties::default());
    let d1 = make_copy(&m, "a", Reason::Expired, &target("dlx", None), 0).message;
    let d2 = make_copy(&d1, "b", Reason::Rejected, &target("dlx", None), 0).message;
    let h = headers(&d2);
    assert_eq!(get(&h, "x-first-death-queue"), Some(&ls("a")));
    assert_eq!(get(&h, "x-first-death-reason"), Some(&ls("expired")));
    assert_eq!(get(&h, "x-first-death-exchange"), Some(&ls("orders")));
}

#[test]
fn x_last_death_headers_follow_every_dead_lettering() {
    let m = message("rk", BasicProperties::default());
    let d1 = make_copy(&m, "a", Reason::Expired, &target("dlx", None), 0).message;
    let h1 = headers(&d1);
    assert_eq!(get(&h1, "x-last-death-queue"), Some(&ls("a")));
    let d2 = make_copy(&d1, "b", Reason::Maxlen, &target("dlx2", None), 0).message;
    let h = headers(&d2);
    assert_eq!(get(&h, "x-last-death-queue"), Some(&ls("b")));
    assert_eq!(get(&h, "x-last-death-reason"), Some(&ls("maxlen")));
    assert_eq!(get(&h, "x-last-death-exchange"), Some(&ls("dlx")));
}

#[test]
fn original_expiration_is_recorded_and_expiration_removed() {
    let props = BasicProperties::default().with_expiration("60000".into());
    let d = make_copy(
        &message("rk", props),
        "q",
        Reason::Expired,
        &target("dlx", None),
        0,
    );
    assert_eq!(
        get(&deaths(&d.message)[0], "original-expiration"),
        Some(&ls("60000"))
    );
    let p = d.message.properties.decode().unwrap_or_default();
    assert!(p.expiration().is_none());
    assert!(d.message.properties.expiration().is_none());
}

#[test]
fn original_expiration_is_the_ttl_as_parsed() {
    let props = BasicProperties::default().with_expiration("0100".into());
    let d = make_copy(
        &message("rk", props),
        "q",
        Reason::Expired,
        &target("dlx", None),
        0,
    );
    assert_eq!(
        get(&deaths(&d.message)[0], "original-expiration"),
        Some(&ls("100"))
    );
}

#[test]
fn other_properties_and_headers_are_preserved() {
    let props = with_cc_bcc()
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_priority(3)
        .with_correlation_id("c".into())
        .with_reply_to("r".into())
        .with_message_id("m".into())
        .with_timestamp(42)
        .with_type("t".into())
        .with_user_id("guest".into())
        .with_app_id("app".into());
    let d = make_copy(
        &message("rk", props),
        "q",
        Reason::Rejected,
        &target("dlx", Some("k")),
        0,
    );
    let p = d.message.properties.decode().unwrap_or_default();
    assert_eq!(
        p.content_type().as_ref().map(|v| v.as_str()),
        Some("application/json")
    );
    assert_eq!(p.delivery_mode(), &Some(2));
    assert_eq!(p.priority(), &Some(3));
    assert_eq!(p.correlation_id().as_ref().map(|v| v.as_str()), Some("c"));
    assert_eq!(p.reply_to().as_ref().map(|v| v.as_str()), Some("r"));
    assert_eq!(p.message_id().as_ref().map(|v| v.as_str()), Some("m"));
    assert_eq!(p.timestamp(), &Some(42));
    assert_eq!(p.kind().as_ref().map(|v| v.as_str()), Some("t"));
    assert_eq!(p.user_id().as_ref().map(|v| v.as_str()), Some("guest"));
    assert_eq!(p.app_id().as_ref().map(|v| v.as_str()), Some("app"));
    assert_eq!(get(&headers(&d.message), "app"), Some(&ls("kept")));
}

fn dead(m: &Message, q: &str, r: Reason) -> Message {
    make_copy(m, q, r, &target("dlx", None), 0).message
}

#[test]
fn rejected_never_forms_a_cycle() {
    let m = dead(
        &message("rk", BasicProperties::default()),
        "a",
        Reason::Rejected,
    );
    assert!(!is_cycle(Reason::Rejected, &decoded(&m), "a"));
}

#[test]
fn cycle_without_rejection_is_dropped() {
    // a --expired--> b --expired--> back to a
    let m1 = dead(
        &message("rk", BasicProperties::default()),
        "a",
        Reason::Expired,
    );
    assert!(
        is_cycle(Reason::Expired, &decoded(&m1), "a"),
        "a queue dead-lettering to itself by TTL"
    );
    assert!(!is_cycle(Reason::Expired, &decoded(&m1), "b"));
    let m2 = dead(&m1, "b", Reason::Expired);
    assert!(is_cycle(Reason::Expired, &decoded(&m2), "a"));
}

#[test]
fn cycle_with_rejection_continues() {
    // a --rejected--> retry --expired--> back to a: a retry loop goes on
    let m1 = dead(
        &message("rk", BasicProperties::default()),
        "a",
        Reason::Rejected,
    );
    let m2 = dead(&m1, "retry", Reason::Expired);
    assert!(!is_cycle(Reason::Expired, &decoded(&m2), "a"));
    assert!(is_cycle(Reason::Expired, &decoded(&m2), "retry"));
}

#[test]
fn publish_routing_keys_are_routing_key_then_cc_then_bcc() {
    let p = with_cc_bcc();
    let k: Vec<String> = publish_routing_keys("rk", Some(&p))
        .iter()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(k, vec!["rk", "cc1", "cc2", "bcc1"]);
}

fn reason() -> impl Strategy<Value = Reason> {
    prop_oneof![
        Just(Reason::Rejected),
        Just(Reason::Expired),
        Just(Reason::Maxlen),
        Just(Reason::DeliveryLimit)
    ]
}

proptest! {
    #[test]
    fn x_death_stays_unique_per_queue_and_reason_and_counts_every_death(
        hops in proptest::collection::vec((0usize..3, reason()), 1..20)
    ) {
        let queues = ["q0", "q1", "q2"];
        let mut m = message("rk", BasicProperties::default());
        for (q, r) in &hops {
            m = dead(&m, queues[*q], *r);
        }
        let x = deaths(&m);
        let mut seen = std::collections::BTreeSet::new();
        let mut total = 0;
        for e in &x {
            let k = (format!("{:?}", get(e, "queue")), format!("{:?}", get(e, "reason")));
            let fresh = seen.insert(k);
            prop_assert!(fresh);
            match get(e, "count") { Some(AMQPValue::LongLongInt(c)) => total += c, other => prop_assert!(false, "count {:?}", other) }
        }
        prop_assert_eq!(total, hops.len() as i64);
        let h = headers(&m);
        let (fq, fr) = hops[0];
        prop_assert_eq!(get(&h, "x-first-death-queue"), Some(&ls(queues[fq])));
        prop_assert_eq!(get(&h, "x-first-death-reason"), Some(&ls(fr.as_str())));
        let (lq, lr) = hops[hops.len() - 1];
        prop_assert_eq!(get(&x[0], "queue"), Some(&ls(queues[lq])));
        prop_assert_eq!(get(&x[0], "reason"), Some(&ls(lr.as_str())));
    }
}

fn decoded(m: &Message) -> BasicProperties {
    m.properties.decode().unwrap_or_default()
}
