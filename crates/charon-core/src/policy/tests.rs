//! Policy rules, each test named after the rule it checks.

use super::*;
use crate::arguments::{Overflow, QueueArgs};

fn def(entries: &[(&str, DefValue)]) -> PolicyDefinition {
    match PolicyDefinition::parse(
        entries
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect(),
    ) {
        Ok(d) => d,
        Err(e) => panic!("definition refused: {e}"),
    }
}

fn policy(
    name: &str,
    pattern: &str,
    apply_to: ApplyTo,
    priority: i64,
    d: PolicyDefinition,
) -> Policy {
    match Policy::new(name, pattern, apply_to, priority, d) {
        Ok(p) => p,
        Err(e) => panic!("policy refused: {e}"),
    }
}

fn dlx(x: &str) -> PolicyDefinition {
    def(&[("dead-letter-exchange", DefValue::Str(x.into()))])
}

#[test]
fn highest_priority_matching_policy_applies() {
    let mut ps = Policies::default();
    ps.set(policy("low", ".*", ApplyTo::Queues, 1, dlx("low-x")));
    ps.set(policy("high", "^orders", ApplyTo::Queues, 7, dlx("high-x")));
    ps.set(policy(
        "higher-nomatch",
        "^other",
        ApplyTo::Queues,
        9,
        dlx("n"),
    ));
    assert_eq!(
        ps.for_queue("orders.q").map(|p| p.name.as_str()),
        Some("high")
    );
    assert_eq!(ps.for_queue("misc").map(|p| p.name.as_str()), Some("low"));
}

#[test]
fn pattern_matches_anywhere_in_the_name() {
    let p = policy("p", "dlq", ApplyTo::All, 0, dlx("x"));
    assert!(p.matches_queue("orders.dlq.v1"));
    assert!(!p.matches_queue("orders"));
}

#[test]
fn apply_to_exchanges_does_not_apply_to_queues() {
    let mut ps = Policies::default();
    ps.set(policy("x", ".*", ApplyTo::Exchanges, 5, dlx("x")));
    assert!(ps.for_queue("q").is_none());
    assert!(ps.for_exchange("e").is_some());
}

#[test]
fn set_replaces_and_clear_removes_a_policy() {
    let mut ps = Policies::default();
    assert!(ps.set(policy("p", ".*", ApplyTo::All, 0, dlx("a"))));
    assert!(!ps.set(policy("p", ".*", ApplyTo::All, 0, dlx("b"))));
    assert_eq!(
        ps.for_queue("q")
            .and_then(|p| p.definition.dead_letter_exchange.clone()),
        Some("b".into())
    );
    assert!(ps.clear("p"));
    assert!(!ps.clear("p"));
    assert!(ps.for_queue("q").is_none());
}

#[test]
fn queue_argument_overrides_policy_dead_letter_exchange_and_routing_key() {
    let declared = QueueArgs {
        dead_letter_exchange: Some("arg-x".into()),
        ..QueueArgs::default()
    };
    let p = def(&[
        ("dead-letter-exchange", DefValue::Str("pol-x".into())),
        ("dead-letter-routing-key", DefValue::Str("pol-k".into())),
    ]);
    let e = effective_args(&declared, false, Some(&p));
    assert_eq!(e.dead_letter_exchange.as_deref(), Some("arg-x"));
    assert_eq!(e.dead_letter_routing_key.as_deref(), Some("pol-k"));
}

#[test]
fn smaller_of_policy_and_argument_wins_for_ttl_and_lengths() {
    let declared = QueueArgs {
        message_ttl: Some(5000),
        max_length: Some(3),
        max_length_bytes: Some(100),
        ..QueueArgs::default()
    };
    let p = def(&[
        ("message-ttl", DefValue::Int(1000)),
        ("max-length", DefValue::Int(10)),
        ("expires", DefValue::Int(60000)),
    ]);
    let e = effective_args(&declared, false, Some(&p));
    assert_eq!(e.message_ttl, Some(1000));
    assert_eq!(e.max_length, Some(3));
    assert_eq!(e.max_length_bytes, Some(100));
    assert_eq!(e.expires, Some(60000));
}

#[test]
fn queue_argument_overflow_overrides_policy_overflow() {
    let p = def(&[("overflow", DefValue::Str("reject-publish".into()))]);
    let declared = QueueArgs::default();
    assert_eq!(
        effective_args(&declared, false, Some(&p)).overflow,
        Overflow::RejectPublish
    );
    assert_eq!(
        effective_args(&declared, true, Some(&p)).overflow,
        Overflow::DropHead
    );
}

#[test]
fn definition_values_are_validated() {
    let bad = |k: &str, v: DefValue| PolicyDefinition::parse(vec![(k.to_string(), v)]).is_err();
    assert!(bad("message-ttl", DefValue::Int(-1)));
    assert!(bad("message-ttl", DefValue::Str("10".into())));
    assert!(bad("max-length", DefValue::Str("x".into())));
    assert!(bad("overflow", DefValue::Str("drop-tail".into())));
    assert!(bad("dead-letter-exchange", DefValue::Int(1)));
    assert!(bad("expires", DefValue::Int(0)));
    assert!(bad("no-such-key", DefValue::Int(1)));
    assert!(PolicyDefinition::parse(Vec::new()).is_err());
    assert!(Policy::new("p", "(", ApplyTo::All, 0, dlx("x")).is_err());
    assert!(ApplyTo::parse("bindings").is_err());
}

#[test]
fn a_policy_with_a_key_the_queue_type_does_not_support_does_not_match_it() {
    use crate::arguments::QueueType;
    let p = policy(
        "p",
        ".*",
        ApplyTo::Queues,
        0,
        def(&[
            ("max-length", DefValue::Int(1)),
            ("queue-mode", DefValue::Str("lazy".into())),
        ]),
    );
    assert!(p.matches_queue_of("q", QueueType::Classic));
    assert!(!p.matches_queue_of("q", QueueType::Quorum));
    let p = policy(
        "p",
        ".*",
        ApplyTo::Queues,
        0,
        def(&[("delivery-limit", DefValue::Int(3))]),
    );
    // delivery-limit: a Charon extension for classic queues, unsupported by streams.
    assert!(p.matches_queue_of("q", QueueType::Classic));
    assert!(p.matches_queue_of("q", QueueType::Quorum));
    assert!(!p.matches_queue_of("q", QueueType::Stream));
}

#[test]
fn apply_to_queue_types() {
    use crate::arguments::QueueType;
    for (s, classic, quorum, stream) in [
        ("classic_queues", true, false, false),
        ("quorum_queues", false, true, false),
        ("streams", false, false, true),
        ("queues", true, true, true),
        ("all", true, true, true),
        ("exchanges", false, false, false),
    ] {
        let a = ApplyTo::parse(s).unwrap_or(ApplyTo::Exchanges);
        assert_eq!(a.as_str(), s);
        let p = policy(
            "p",
            ".*",
            a,
            0,
            def(&[("max-length-bytes", DefValue::Int(9))]),
        );
        assert_eq!(p.matches_queue_of("q", QueueType::Classic), classic, "{s}");
        assert_eq!(p.matches_queue_of("q", QueueType::Quorum), quorum, "{s}");
        assert_eq!(p.matches_queue_of("q", QueueType::Stream), stream, "{s}");
    }
    assert!(ApplyTo::parse("nope").is_err());
}

#[test]
fn delivery_limit_smaller_unless_one_is_negative_and_quorum_overflow_policy_wins() {
    use crate::arguments::QueueType;
    let q = |limit: Option<i64>, overflow: Overflow| QueueArgs {
        queue_type: QueueType::Quorum,
        delivery_limit: limit,
        overflow,
        ..QueueArgs::default()
    };
    let pol = |limit: i64| def(&[("delivery-limit", DefValue::Int(limit))]);
    let eff = |a: &QueueArgs, p: &PolicyDefinition| effective_args(a, false, Some(p));
    assert_eq!(
        eff(&q(Some(5), Overflow::DropHead), &pol(3)).delivery_limit,
        Some(3)
    );
    assert_eq!(
        eff(&q(Some(5), Overflow::DropHead), &pol(-1)).delivery_limit,
        Some(5)
    );
    assert_eq!(
        eff(&q(Some(-1), Overflow::DropHead), &pol(7)).delivery_limit,
        Some(7)
    );
    assert_eq!(
        eff(&q(None, Overflow::DropHead), &pol(-2)).delivery_limit,
        Some(-2)
    );
    let drop = def(&[("overflow", DefValue::Str("drop-head".into()))]);
    let declared = q(None, Overflow::RejectPublish);
    assert_eq!(
        effective_args(&declared, true, Some(&drop)).overflow,
        Overflow::DropHead
    );
    let dlx_overflow = q(None, Overflow::RejectPublishDlx);
    assert_eq!(
        effective_args(&dlx_overflow, true, None).overflow,
        Overflow::DropHead
    );
    let classic = QueueArgs {
        overflow: Overflow::RejectPublish,
        ..QueueArgs::default()
    };
    assert_eq!(
        effective_args(&classic, true, Some(&drop)).overflow,
        Overflow::RejectPublish
    );
}

#[test]
fn consumer_timeout_smaller_of_argument_and_policy_as_rabbitmq() {
    let declared = QueueArgs {
        consumer_timeout: Some(5000),
        ..QueueArgs::default()
    };
    let p = def(&[("consumer-timeout", DefValue::Int(1500))]);
    assert_eq!(
        effective_args(&declared, false, Some(&p)).consumer_timeout,
        Some(1500)
    );
    let p = def(&[("consumer-timeout", DefValue::Int(90000))]);
    assert_eq!(
        effective_args(&declared, false, Some(&p)).consumer_timeout,
        Some(5000)
    );
    let none = QueueArgs::default();
    assert_eq!(
        effective_args(&none, false, Some(&p)).consumer_timeout,
        Some(90000)
    );
    assert_eq!(
        effective_args(&declared, false, None).consumer_timeout,
        Some(5000)
    );
    let bad = PolicyDefinition::parse(vec![("consumer-timeout".into(), DefValue::Int(-1))]);
    assert!(
        matches!(bad, Err(PolicyError::Invalid(m)) if m.contains("is not a valid consumer timeout"))
    );
}

fn op_def(entries: &[(&str, DefValue)]) -> PolicyDefinition {
    match PolicyDefinition::parse_operator(
        entries
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect(),
    ) {
        Ok(d) => d,
        Err(e) => panic!("operator definition refused: {e}"),
    }
}

#[test]
fn operator_policies_take_only_operator_keys() {
    let refused = PolicyDefinition::parse_operator(vec![
        ("max-length".into(), DefValue::Int(2)),
        ("dead-letter-exchange".into(), DefValue::Str("x".into())),
    ]);
    assert_eq!(
        refused.map(|_| ()),
        Err(PolicyError::Invalid(
            "[<<\"dead-letter-exchange\">>] are not recognised policy settings".into()
        ))
    );
    let bad_value =
        PolicyDefinition::parse_operator(vec![("max-length".into(), DefValue::Int(-1))]);
    assert!(bad_value.is_err());
    let d = op_def(&[
        ("max-length", DefValue::Int(2)),
        ("overflow", DefValue::Str("reject-publish".into())),
        ("delivery-limit", DefValue::Int(-1)),
        ("queue-version", DefValue::Int(2)),
    ]);
    assert_eq!(d.max_length, Some(2));
    assert_eq!(d.overflow, Some(Overflow::RejectPublish));
}

#[test]
fn operator_policy_numeric_keys_the_smaller_wins() {
    let user = def(&[
        ("max-length", DefValue::Int(10)),
        ("message-ttl", DefValue::Int(1000)),
        ("dead-letter-exchange", DefValue::Str("dlx".into())),
    ]);
    let op = op_def(&[
        ("max-length", DefValue::Int(2)),
        ("message-ttl", DefValue::Int(60_000)),
        ("expires", DefValue::Int(5000)),
    ]);
    let merged = merge_operator(Some(&user), Some(&op)).unwrap_or_default();
    assert_eq!(merged.max_length, Some(2));
    assert_eq!(merged.message_ttl, Some(1000));
    assert_eq!(merged.expires, Some(5000));
    assert_eq!(merged.dead_letter_exchange.as_deref(), Some("dlx"));
    // Listed like RabbitMQ's effective_policy_definition: keys in order, merged values.
    let keys: Vec<&str> = merged.raw.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        keys,
        [
            "dead-letter-exchange",
            "expires",
            "max-length",
            "message-ttl"
        ]
    );
    assert!(
        merged
            .raw
            .contains(&("max-length".into(), DefValue::Int(2)))
    );
    // Against a queue argument the merged value is capped again: the smallest of the three.
    let declared = QueueArgs {
        max_length: Some(5),
        message_ttl: Some(500),
        ..QueueArgs::default()
    };
    let e = effective_args(&declared, false, Some(&merged));
    assert_eq!((e.max_length, e.message_ttl), (Some(2), Some(500)));
}

#[test]
fn operator_policy_alone_caps_queue_arguments() {
    let op = op_def(&[("max-length", DefValue::Int(2))]);
    let merged = merge_operator(None, Some(&op));
    let declared = QueueArgs {
        max_length: Some(100),
        ..QueueArgs::default()
    };
    assert_eq!(
        effective_args(&declared, false, merged.as_ref()).max_length,
        Some(2)
    );
    assert_eq!(merge_operator(None, None), None);
    let user = def(&[("max-length", DefValue::Int(7))]);
    assert_eq!(merge_operator(Some(&user), None), Some(user));
}

#[test]
fn operator_delivery_limit_negative_means_unlimited_and_the_larger_wins() {
    let user = def(&[("delivery-limit", DefValue::Int(-1))]);
    let op = op_def(&[("delivery-limit", DefValue::Int(5))]);
    let m = merge_operator(Some(&user), Some(&op)).unwrap_or_default();
    assert_eq!(m.delivery_limit, Some(5));
    let user = def(&[("delivery-limit", DefValue::Int(3))]);
    let m = merge_operator(Some(&user), Some(&op)).unwrap_or_default();
    assert_eq!(m.delivery_limit, Some(3));
}

#[test]
fn operator_overflow_wins_over_the_user_policy() {
    let user = def(&[("overflow", DefValue::Str("drop-head".into()))]);
    let op = op_def(&[("overflow", DefValue::Str("reject-publish".into()))]);
    let m = merge_operator(Some(&user), Some(&op)).unwrap_or_default();
    assert_eq!(m.overflow, Some(Overflow::RejectPublish));
}
