//! VHost behaviour tests; expected texts were checked against RabbitMQ 3.10.8.

use charon_protocol::{AMQPValue, FieldTable, LongString, ShortString};

use super::*;
use crate::error::CoreError;

fn vh() -> VHost<&'static str> {
    VHost::new("/")
}

fn xd(name: &str, kind: &str) -> ExchangeDeclare {
    ExchangeDeclare {
        name: name.into(),
        kind: kind.into(),
        ..Default::default()
    }
}

fn qd(name: &str) -> QueueDeclare {
    QueueDeclare {
        name: name.into(),
        ..Default::default()
    }
}

fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(ShortString::from(*k), v.clone());
    }
    t
}

fn s(v: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(v))
}

fn text<T: std::fmt::Debug>(r: Result<T, CoreError>) -> String {
    match r {
        Err(e) => e.reply_text(),
        Ok(v) => panic!("expected error, got {v:?}"),
    }
}

fn add_queue(v: &mut VHost<&'static str>, name: &'static str) {
    let r = v.declare_queue(&qd(name), 1, |_| name);
    assert!(r.is_ok());
}

fn routed(
    v: &VHost<&'static str>,
    x: &str,
    keys: &[&str],
    h: Option<&FieldTable>,
) -> Vec<&'static str> {
    let mut out = Vec::new();
    assert!(v.route(x, keys, h, &mut out).is_ok());
    out.sort_unstable();
    out
}

#[test]
fn default_exchange_routes_by_queue_name() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    assert_eq!(routed(&v, "", &["q1"], None), vec!["q1"]);
    assert_eq!(routed(&v, "", &["q1", "q1", "nope"], None), vec!["q1"]);
}

#[test]
fn default_exchange_operations_are_refused() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    let msg = "ACCESS_REFUSED - operation not permitted on the default exchange";
    assert_eq!(text(v.declare_exchange(&xd("", "direct"))), msg);
    assert_eq!(text(v.delete_exchange("", false)), msg);
    assert_eq!(
        text(v.bind_queue("q1", "", "k", &FieldTable::default())),
        msg
    );
    assert_eq!(
        text(v.unbind_queue("q1", "", "k", &FieldTable::default())),
        msg
    );
    let mut passive = xd("", "direct");
    passive.passive = true;
    assert_eq!(text(v.declare_exchange(&passive)), msg);
}

#[test]
fn amq_prefix_is_reserved_for_new_names_only() {
    let mut v = vh();
    assert_eq!(
        text(v.declare_exchange(&xd("amq.foo", "direct"))),
        "ACCESS_REFUSED - exchange name 'amq.foo' contains reserved prefix 'amq.*'"
    );
    let mut d = xd("amq.direct", "direct");
    d.durable = true;
    assert!(v.declare_exchange(&d).is_ok());
    assert_eq!(
        text(v.declare_queue(&qd("amq.x"), 1, |_| "x")),
        "ACCESS_REFUSED - queue name 'amq.x' contains reserved prefix 'amq.*'"
    );
    assert_eq!(
        text(v.delete_exchange("amq.direct", false)),
        "ACCESS_REFUSED - deletion of system exchange 'amq.direct' in vhost '/' not allowed"
    );
}

#[test]
fn exchange_redeclare_must_be_equivalent() {
    let mut v = vh();
    assert!(v.declare_exchange(&xd("ex1", "direct")).is_ok());
    let mut d = xd("ex1", "direct");
    d.durable = true;
    assert_eq!(
        text(v.declare_exchange(&d)),
        "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'ex1' in vhost '/': received 'true' but current is 'false'"
    );
    assert_eq!(
        text(v.declare_exchange(&xd("ex1", "fanout"))),
        "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'ex1' in vhost '/': received 'fanout' but current is 'direct'"
    );
    let mut ae = xd("ae2", "direct");
    ae.arguments = table(&[("alternate-exchange", s("a"))]);
    assert!(v.declare_exchange(&ae).is_ok());
    assert_eq!(
        text(v.declare_exchange(&xd("ae2", "direct"))),
        "PRECONDITION_FAILED - inequivalent arg 'alternate-exchange' for exchange 'ae2' in vhost '/': received none but current is the value 'a' of type 'longstr'"
    );
    // other arguments are not compared
    let mut other = xd("ae3", "direct");
    other.arguments = table(&[("foo", s("a"))]);
    assert!(v.declare_exchange(&other).is_ok());
    assert!(v.declare_exchange(&xd("ae3", "direct")).is_ok());
}

#[test]
fn passive_declares_of_missing_resources_are_not_found() {
    let mut v = vh();
    let mut d = xd("nope", "direct");
    d.passive = true;
    assert_eq!(
        text(v.declare_exchange(&d)),
        "NOT_FOUND - no exchange 'nope' in vhost '/'"
    );
    let mut q = qd("nopeq");
    q.passive = true;
    assert_eq!(
        text(v.declare_queue(&q, 1, |_| "x")),
        "NOT_FOUND - no queue 'nopeq' in vhost '/'"
    );
}

#[test]
fn queue_redeclare_must_be_equivalent() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    let mut d = qd("q1");
    d.arguments = table(&[("x-message-ttl", AMQPValue::LongInt(2000))]);
    assert_eq!(
        text(v.declare_queue(&d, 1, |_| "x")),
        "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q1' in vhost '/': received the value '2000' of type 'signedint' but current is none"
    );
    let mut d = qd("q1");
    d.durable = true;
    assert_eq!(
        text(v.declare_queue(&d, 1, |_| "x")),
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q1' in vhost '/': received 'true' but current is 'false'"
    );
    let r = v.declare_queue(&qd("q1"), 2, |_| "other");
    assert!(matches!(r, Ok((_, e, false)) if e.handle == "q1"));
}

#[test]
fn queue_redeclare_compares_retry_arguments() {
    let mut v = vh();
    let mut d = qd("rq");
    d.arguments = table(&[("x-retry-limit", AMQPValue::LongInt(3))]);
    assert!(v.declare_queue(&d, 1, |_| "x").is_ok());
    assert!(v.declare_queue(&d, 1, |_| "x").is_ok());
    let mut other = qd("rq");
    other.arguments = table(&[("x-retry-limit", AMQPValue::LongInt(5))]);
    assert_eq!(
        text(v.declare_queue(&other, 1, |_| "x")),
        "PRECONDITION_FAILED - inequivalent arg 'x-retry-limit' for queue 'rq' in vhost '/': received '5' but current is '3'"
    );
    assert_eq!(
        text(v.declare_queue(&qd("rq"), 1, |_| "x")),
        "PRECONDITION_FAILED - inequivalent arg 'x-retry-limit' for queue 'rq' in vhost '/': received none but current is the value '3' of type 'signedint'"
    );
}

#[test]
fn integer_args_of_the_same_class_are_equivalent() {
    let mut v = vh();
    let mut d = qd("q3");
    d.arguments = table(&[("x-max-length", AMQPValue::LongInt(5))]);
    assert!(v.declare_queue(&d, 1, |_| "q3").is_ok());
    d.arguments = table(&[("x-max-length", AMQPValue::LongLongInt(5))]);
    assert!(v.declare_queue(&d, 1, |_| "q3").is_ok());
}

#[test]
fn exclusive_queues_are_locked_to_their_connection() {
    let mut v = vh();
    let mut d = qd("qe");
    d.exclusive = true;
    d.durable = true;
    let r = v.declare_queue(&d, 7, |_| "qe");
    assert!(matches!(r, Ok((_, e, true)) if !e.meta.durable));
    let locked = "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'qe' in vhost '/'. It could be originally declared on another connection or the exclusive property value does not match that of the original declaration.";
    assert_eq!(text(v.declare_queue(&qd("qe"), 7, |_| "x")), locked);
    assert_eq!(text(v.check_queue_access("qe", 8)), locked);
    assert!(v.check_queue_access("qe", 7).is_ok());
    assert!(v.declare_queue(&d, 7, |_| "x").is_ok());
    assert_eq!(v.queues_owned_by(7).len(), 1);
    assert!(v.queues_owned_by(8).is_empty());
}

#[test]
fn server_named_queues_get_amq_gen_names() {
    let mut v = vh();
    let r = v.declare_queue(&qd(""), 1, |m| {
        if m.name.starts_with("amq.gen-") {
            "gen"
        } else {
            "bad"
        }
    });
    let name = r.map(|(n, e, created)| (n.to_string(), e.handle, created));
    let Ok((name, handle, created)) = name else {
        panic!("declare failed")
    };
    assert!(created && handle == "gen");
    assert_eq!(name.len(), "amq.gen-".len() + 22);
}

#[test]
fn quorum_queue_property_and_argument_restrictions() {
    let mut v = vh();
    let quorum = |name: &str| {
        let mut d = qd(name);
        d.durable = true;
        d.arguments = table(&[("x-queue-type", s("quorum"))]);
        d
    };
    let mut d = quorum("q5");
    d.auto_delete = true;
    assert_eq!(
        text(v.declare_queue(&d, 1, |_| "x")),
        "PRECONDITION_FAILED - invalid property 'auto-delete' for queue 'q5' in vhost '/'"
    );
    let mut d = quorum("q7");
    d.durable = false;
    assert_eq!(
        text(v.declare_queue(&d, 1, |_| "x")),
        "PRECONDITION_FAILED - invalid property 'non-durable' for queue 'q7' in vhost '/'"
    );
    let mut d = quorum("q8");
    d.arguments
        .insert("x-max-priority".into(), AMQPValue::LongInt(-1));
    assert_eq!(
        text(v.declare_queue(&d, 1, |_| "x")),
        "PRECONDITION_FAILED - invalid arg 'x-max-priority' for queue 'q8' in vhost '/' of queue type rabbit_quorum_queue"
    );
    let mut d = qd("qd");
    d.arguments = table(&[("x-delivery-limit", AMQPValue::LongInt(1))]);
    assert_eq!(
        text(v.declare_queue(&d, 1, |_| "x")),
        "PRECONDITION_FAILED - invalid arg 'x-delivery-limit' for queue 'qd' in vhost '/' of queue type rabbit_classic_queue"
    );
    let mut d = qd("q4");
    d.arguments = table(&[("x-queue-type", s("bogus"))]);
    assert_eq!(
        text(v.declare_queue(&d, 1, |_| "x")),
        "PRECONDITION_FAILED - invalid arg 'x-queue-type' for queue 'q4' in vhost '/': \"unsupported queue type 'bogus'\""
    );
    assert!(v.declare_queue(&quorum("ok"), 1, |_| "ok").is_ok());
}

#[test]
fn wrong_typed_dlx_and_alternate_exchange_are_refused() {
    let mut v = vh();
    let mut d = qd("q9");
    d.arguments = table(&[("x-dead-letter-exchange", AMQPValue::LongInt(5))]);
    assert_eq!(
        text(v.declare_queue(&d, 1, |_| "x")),
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q9' in vhost '/'"
    );
    let mut x = xd("ae1", "direct");
    x.arguments = table(&[("alternate-exchange", AMQPValue::LongInt(5))]);
    assert_eq!(
        text(v.declare_exchange(&x)),
        "PRECONDITION_FAILED - invalid type 'signedint' for arg 'alternate-exchange' in exchange 'ae1' in vhost '/'"
    );
}

#[test]
fn binding_to_missing_resources_is_not_found_exchange_first() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    let none = FieldTable::default();
    assert_eq!(
        text(v.bind_queue("q1", "nope", "", &none)),
        "NOT_FOUND - no exchange 'nope' in vhost '/'"
    );
    assert_eq!(
        text(v.bind_queue("nopeq", "amq.direct", "", &none)),
        "NOT_FOUND - no queue 'nopeq' in vhost '/'"
    );
    assert_eq!(
        text(v.bind_queue("nopeq", "nope", "", &none)),
        "NOT_FOUND - no exchange 'nope' in vhost '/'"
    );
    assert_eq!(
        text(v.bind_exchange("nope", "amq.direct", "", &none)),
        "NOT_FOUND - no exchange 'nope' in vhost '/'"
    );
}

#[test]
fn unbinding_what_does_not_exist_is_ok() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    let none = FieldTable::default();
    assert!(v.unbind_queue("q1", "amq.direct", "zzz", &none).is_ok());
    assert!(v.unbind_queue("q1", "nope", "zzz", &none).is_ok());
    assert!(v.unbind_queue("nopeq", "amq.direct", "zzz", &none).is_ok());
    assert!(
        v.unbind_exchange("nope", "amq.direct", "zzz", &none)
            .is_ok()
    );
}

#[test]
fn invalid_x_match_is_refused_at_bind_time() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    assert_eq!(
        text(v.bind_queue("q1", "amq.headers", "", &table(&[("x-match", s("foo"))]))),
        "PRECONDITION_FAILED - Invalid x-match field value <<\"foo\">>; expected all, any, all-with-x, or any-with-x"
    );
}

#[test]
fn delete_exchange_if_unused_and_missing() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    assert!(v.delete_exchange("nope", false).is_ok());
    assert!(v.declare_exchange(&xd("ex1", "direct")).is_ok());
    assert!(
        v.bind_queue("q1", "ex1", "k", &FieldTable::default())
            .is_ok()
    );
    assert_eq!(
        text(v.delete_exchange("ex1", true)),
        "PRECONDITION_FAILED - exchange 'ex1' in vhost '/' in use"
    );
    assert!(v.delete_exchange("ex1", false).is_ok());
    assert!(v.exchange("ex1").is_none());
    assert_eq!(v.bindings().count(), 0);
}

#[test]
fn deleting_an_exchange_removes_bindings_as_destination() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    assert!(v.declare_exchange(&xd("d", "fanout")).is_ok());
    assert!(
        v.bind_exchange("d", "amq.fanout", "", &FieldTable::default())
            .is_ok()
    );
    assert!(v.bind_queue("q1", "d", "", &FieldTable::default()).is_ok());
    assert_eq!(routed(&v, "amq.fanout", &[""], None), vec!["q1"]);
    assert!(v.delete_exchange("d", false).is_ok());
    assert_eq!(v.bindings().count(), 0);
}

#[test]
fn auto_delete_exchange_goes_with_its_last_binding() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    add_queue(&mut v, "q2");
    let mut d = xd("ad", "direct");
    d.auto_delete = true;
    assert!(v.declare_exchange(&d).is_ok());
    let none = FieldTable::default();
    assert!(v.bind_queue("q1", "ad", "a", &none).is_ok());
    assert!(v.bind_queue("q2", "ad", "a", &none).is_ok());
    assert!(v.unbind_queue("q1", "ad", "a", &none).is_ok());
    assert!(v.exchange("ad").is_some());
    assert!(v.remove_queue("q2").is_some());
    assert!(v.exchange("ad").is_none());
}

#[test]
fn publishing_to_missing_or_internal_exchange_fails() {
    let mut v = vh();
    let mut out = Vec::new();
    assert_eq!(
        text(v.route("nope", &["k"], None, &mut out)),
        "NOT_FOUND - no exchange 'nope' in vhost '/'"
    );
    let mut d = xd("ix", "direct");
    d.internal = true;
    assert!(v.declare_exchange(&d).is_ok());
    assert_eq!(
        text(v.route("ix", &["k"], None, &mut out)),
        "ACCESS_REFUSED - cannot publish to internal exchange 'ix' in vhost '/'"
    );
}

#[test]
fn routing_dedups_queues_across_keys_and_paths() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    let none = FieldTable::default();
    assert!(v.bind_queue("q1", "amq.direct", "a", &none).is_ok());
    assert!(v.bind_queue("q1", "amq.direct", "b", &none).is_ok());
    assert!(
        v.bind_exchange("amq.fanout", "amq.direct", "a", &none)
            .is_ok()
    );
    assert!(v.bind_queue("q1", "amq.fanout", "", &none).is_ok());
    assert_eq!(routed(&v, "amq.direct", &["a", "b"], None), vec!["q1"]);
}

#[test]
fn exchange_to_exchange_cycles_terminate() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    let none = FieldTable::default();
    assert!(v.declare_exchange(&xd("e1", "fanout")).is_ok());
    assert!(v.declare_exchange(&xd("e2", "fanout")).is_ok());
    assert!(v.bind_exchange("e2", "e1", "", &none).is_ok());
    assert!(v.bind_exchange("e1", "e2", "", &none).is_ok());
    assert!(v.bind_queue("q1", "e2", "", &none).is_ok());
    assert_eq!(routed(&v, "e1", &["x"], None), vec!["q1"]);
}

#[test]
fn alternate_exchange_is_used_when_nothing_matches() {
    let mut v = vh();
    add_queue(&mut v, "main");
    add_queue(&mut v, "unrouted");
    let none = FieldTable::default();
    let mut d = xd("ex", "direct");
    d.arguments = table(&[("alternate-exchange", s("ae"))]);
    assert!(v.declare_exchange(&d).is_ok());
    assert!(v.declare_exchange(&xd("ae", "fanout")).is_ok());
    assert!(v.bind_queue("main", "ex", "k", &none).is_ok());
    assert!(v.bind_queue("unrouted", "ae", "", &none).is_ok());
    assert_eq!(routed(&v, "ex", &["k"], None), vec!["main"]);
    assert_eq!(routed(&v, "ex", &["other"], None), vec!["unrouted"]);
}

#[test]
fn topic_and_headers_exchanges_route_through_vhost() {
    let mut v = vh();
    add_queue(&mut v, "t");
    add_queue(&mut v, "h");
    assert!(
        v.bind_queue("t", "amq.topic", "a.#", &FieldTable::default())
            .is_ok()
    );
    assert!(
        v.bind_queue(
            "h",
            "amq.match",
            "",
            &table(&[("x-match", s("any")), ("k", s("v"))])
        )
        .is_ok()
    );
    assert_eq!(routed(&v, "amq.topic", &["a.b.c"], None), vec!["t"]);
    assert!(routed(&v, "amq.topic", &["b"], None).is_empty());
    assert_eq!(
        routed(&v, "amq.match", &[""], Some(&table(&[("k", s("v"))]))),
        vec!["h"]
    );
}

#[test]
fn routing_counts_publish_in_per_message_and_publish_out_per_queue_reached() {
    let mut v = vh();
    add_queue(&mut v, "q1");
    add_queue(&mut v, "q2");
    assert!(v.declare_exchange(&xd("fan", "fanout")).is_ok());
    let none = FieldTable::default();
    assert!(v.bind_queue("q1", "fan", "", &none).is_ok());
    assert!(v.bind_queue("q2", "fan", "", &none).is_ok());
    assert!(v.declare_exchange(&xd("empty", "direct")).is_ok());
    for _ in 0..3 {
        assert_eq!(routed(&v, "fan", &["k"], None), vec!["q1", "q2"]);
    }
    assert!(routed(&v, "empty", &["k"], None).is_empty());
    let stats = |x: &str| v.exchange(x).map(|x| x.stats.get());
    assert_eq!(stats("fan"), Some((3, 6)));
    assert_eq!(stats("empty"), Some((1, 0)));
}

#[test]
fn queue_only_bindings_route_each_queue_once() {
    // The path without work lists (`route_direct_to_queues`): bindings that match only queues.
    let mut v = vh();
    add_queue(&mut v, "q1");
    add_queue(&mut v, "q2");
    let none = FieldTable::default();
    assert!(v.bind_queue("q1", "amq.direct", "a", &none).is_ok());
    assert!(v.bind_queue("q1", "amq.direct", "b", &none).is_ok());
    assert!(v.bind_queue("q2", "amq.direct", "b", &none).is_ok());
    assert_eq!(
        routed(&v, "amq.direct", &["a", "b"], None),
        vec!["q1", "q2"]
    );
    assert_eq!(routed(&v, "amq.direct", &["a"], None), vec!["q1"]);
    assert!(routed(&v, "amq.direct", &["zzz"], None).is_empty());
    assert!(v.bind_queue("q2", "amq.fanout", "", &none).is_ok());
    assert_eq!(routed(&v, "amq.fanout", &["x", "y"], None), vec!["q2"]);
}

#[test]
fn routing_reads_headers_only_when_a_headers_exchange_is_reachable() {
    let mut v = vh();
    add_queue(&mut v, "q");
    let none = FieldTable::default();
    assert!(v.declare_exchange(&xd("fan", "fanout")).is_ok());
    assert!(v.bind_queue("q", "fan", "", &none).is_ok());
    assert!(!v.routing_reads_headers("fan"));
    assert!(!v.routing_reads_headers(""));
    assert!(!v.routing_reads_headers("amq.direct"));
    assert!(!v.routing_reads_headers("missing"));
    assert!(v.routing_reads_headers("amq.match"));
    // Through an exchange-to-exchange binding (with a cycle back).
    assert!(v.declare_exchange(&xd("mid", "direct")).is_ok());
    assert!(v.bind_exchange("mid", "fan", "", &none).is_ok());
    assert!(v.bind_exchange("fan", "mid", "k", &none).is_ok());
    assert!(!v.routing_reads_headers("fan"));
    assert!(v.bind_exchange("amq.headers", "mid", "k", &none).is_ok());
    assert!(v.routing_reads_headers("fan"));
    assert!(v.routing_reads_headers("mid"));
    // Through an alternate exchange.
    let mut ae = xd("with-ae", "direct");
    ae.arguments = table(&[("alternate-exchange", s("amq.match"))]);
    assert!(v.declare_exchange(&ae).is_ok());
    assert!(v.routing_reads_headers("with-ae"));
}
