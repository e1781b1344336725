//! The queue-side dead-lettering triggers of the spec, each test named after its rule: what
//! leaves a queue, when, and with which reason.

use std::sync::Arc;

use bytes::Bytes;
use charon_protocol::{BasicProperties, RawProperties};

use super::*;
use crate::arguments::{Overflow, QueueArgs, QueueType};

fn msg(body: &str, expiration: Option<&str>) -> Arc<Message> {
    let props = match expiration {
        Some(e) => RawProperties::encode(&BasicProperties::default().with_expiration(e.into())),
        None => RawProperties::default(),
    };
    Arc::new(Message::new("x", "k", props, Bytes::from(body.to_string())))
}

fn queue(args: QueueArgs) -> QueueState {
    QueueState::new(Arc::from("q"), args)
}

fn spec() -> ConsumerSpec {
    ConsumerSpec {
        no_ack: false,
        prefetch: 0,
        exclusive: false,
    }
}

fn reasons(s: &mut QueueState) -> Vec<(String, Reason)> {
    s.take_dead_letters()
        .into_iter()
        .map(|d| {
            (
                String::from_utf8_lossy(d.message.body.wire_bytes()).into_owned(),
                d.reason,
            )
        })
        .collect()
}

fn deliver_at(s: &mut QueueState, now: u64) -> Vec<Delivery> {
    let mut out = Vec::new();
    s.next_deliveries(now, &mut |_| true, &mut out);
    out
}

#[test]
fn rejected_message_is_dead_lettered_with_reason_rejected() {
    let mut s = queue(QueueArgs::default());
    s.publish(msg("a", None), 0);
    let g = s.get(false, 0).map(|g| g.id);
    assert_eq!(s.reject(&[g.unwrap_or(99)]), 1);
    assert_eq!(reasons(&mut s), vec![("a".into(), Reason::Rejected)]);
}

#[test]
fn per_message_ttl_expires_the_message() {
    let mut s = queue(QueueArgs::default());
    s.publish(msg("a", Some("100")), 1000);
    assert_eq!(s.next_expiry(), Some(1100));
    s.expire(1099);
    assert!(reasons(&mut s).is_empty());
    s.expire(1100);
    assert_eq!(reasons(&mut s), vec![("a".into(), Reason::Expired)]);
}

#[test]
fn a_mass_expiry_can_be_taken_in_bounded_batches_in_expiry_order() {
    let mut s = queue(QueueArgs::default());
    for (i, ttl) in ["30", "10", "20", "10", "99"].iter().enumerate() {
        s.publish(msg(&i.to_string(), Some(ttl)), 0);
    }
    assert!(s.expire_at_most(30, 2));
    assert_eq!(
        reasons(&mut s),
        vec![("1".into(), Reason::Expired), ("3".into(), Reason::Expired)]
    );
    assert!(!s.expire_at_most(30, 2));
    assert_eq!(
        reasons(&mut s),
        vec![("2".into(), Reason::Expired), ("0".into(), Reason::Expired)]
    );
    assert!(!s.expire_at_most(30, 2));
    assert!(reasons(&mut s).is_empty());
    assert_eq!(s.message_count(), 1);
    assert_eq!(s.next_expiry(), Some(99));
}

#[test]
fn smaller_of_queue_ttl_and_message_ttl_wins() {
    let mut s = queue(QueueArgs {
        message_ttl: Some(50),
        ..QueueArgs::default()
    });
    s.publish(msg("a", Some("500")), 0);
    s.publish(msg("b", None), 0);
    assert_eq!(s.next_expiry(), Some(50));
    let mut t = queue(QueueArgs {
        message_ttl: Some(500),
        ..QueueArgs::default()
    });
    t.publish(msg("a", Some("20")), 0);
    assert_eq!(t.next_expiry(), Some(20));
}

#[test]
fn message_expires_even_when_not_at_the_head() {
    let mut s = queue(QueueArgs::default());
    s.publish(msg("head", Some("10000")), 0);
    s.publish(msg("second", Some("10")), 0);
    s.expire(10);
    assert_eq!(reasons(&mut s), vec![("second".into(), Reason::Expired)]);
    assert_eq!(s.message_count(), 1);
}

#[test]
fn ttl_zero_is_delivered_when_a_consumer_can_take_it_at_once() {
    let mut s = queue(QueueArgs::default());
    assert!(s.add_consumer(1, spec()).is_ok());
    s.publish(msg("a", Some("0")), 7);
    assert_eq!(deliver_at(&mut s, 7).len(), 1);
    s.expire(7);
    assert!(reasons(&mut s).is_empty());
}

#[test]
fn ttl_zero_expires_when_no_consumer_can_take_it() {
    let mut s = queue(QueueArgs::default());
    s.publish(msg("a", Some("0")), 7);
    s.expire(7);
    assert_eq!(reasons(&mut s), vec![("a".into(), Reason::Expired)]);
}

#[test]
fn expired_messages_are_never_delivered_nor_got() {
    let mut s = queue(QueueArgs::default());
    assert!(s.add_consumer(1, spec()).is_ok());
    s.publish(msg("a", Some("5")), 0);
    assert!(deliver_at(&mut s, 6).is_empty());
    s.publish(msg("b", Some("5")), 0);
    assert!(s.get(true, 5).is_none());
    assert_eq!(reasons(&mut s).len(), 2);
}

#[test]
fn requeued_message_keeps_its_original_expiry() {
    let mut s = queue(QueueArgs {
        message_ttl: Some(100),
        ..QueueArgs::default()
    });
    s.publish(msg("a", None), 0);
    let id = s.get(false, 50).map(|g| g.id).unwrap_or(99);
    s.requeue(&[id]);
    assert_eq!(s.next_expiry(), Some(100));
}

#[test]
fn max_length_drop_head_dead_letters_the_head_with_reason_maxlen() {
    let mut s = queue(QueueArgs {
        max_length: Some(2),
        ..QueueArgs::default()
    });
    for b in ["a", "b", "c"] {
        assert!(s.publish(msg(b, None), 0).id().is_some());
    }
    assert_eq!(reasons(&mut s), vec![("a".into(), Reason::Maxlen)]);
    assert_eq!(s.message_count(), 2);
}

#[test]
fn max_length_bytes_drop_head_dead_letters_heads_until_it_fits() {
    let mut s = queue(QueueArgs {
        max_length_bytes: Some(5),
        ..QueueArgs::default()
    });
    s.publish(msg("aa", None), 0);
    s.publish(msg("bb", None), 0);
    s.publish(msg("cccc", None), 0);
    assert_eq!(
        reasons(&mut s),
        vec![("aa".into(), Reason::Maxlen), ("bb".into(), Reason::Maxlen)]
    );
}

#[test]
fn reject_publish_refuses_the_new_message_without_dead_lettering() {
    let mut s = queue(QueueArgs {
        max_length: Some(1),
        overflow: Overflow::RejectPublish,
        ..QueueArgs::default()
    });
    assert!(s.publish(msg("a", None), 0).id().is_some());
    assert_eq!(
        s.publish(msg("b", None), 0),
        PublishOutcome::Rejected {
            dead_lettered: false
        }
    );
    assert!(reasons(&mut s).is_empty());
    assert_eq!(s.message_count(), 1);
}

#[test]
fn reject_publish_dlx_refuses_and_dead_letters_the_new_message() {
    let mut s = queue(QueueArgs {
        max_length: Some(1),
        overflow: Overflow::RejectPublishDlx,
        ..QueueArgs::default()
    });
    s.publish(msg("a", None), 0);
    assert_eq!(
        s.publish(msg("b", None), 0),
        PublishOutcome::Rejected {
            dead_lettered: true
        }
    );
    assert_eq!(reasons(&mut s), vec![("b".into(), Reason::Maxlen)]);
}

#[test]
fn delivery_limit_dead_letters_after_more_returns_than_the_limit() {
    let mut s = queue(QueueArgs {
        delivery_limit: Some(1),
        queue_type: QueueType::Quorum,
        ..QueueArgs::default()
    });
    s.publish(msg("a", None), 0);
    let id = s.get(false, 0).map(|g| g.id).unwrap_or(99);
    s.requeue(&[id]);
    assert!(reasons(&mut s).is_empty());
    let g = s.get(false, 0);
    assert_eq!(
        g.as_ref().map(|g| (g.id, g.returns, g.redelivered)),
        Some((id, 1, true))
    );
    s.requeue(&[id]);
    assert_eq!(reasons(&mut s), vec![("a".into(), Reason::DeliveryLimit)]);
    assert_eq!(s.message_count(), 0);
}

#[test]
fn returns_by_a_closed_channel_do_not_count_towards_the_delivery_limit() {
    let mut s = queue(QueueArgs {
        delivery_limit: Some(0),
        queue_type: QueueType::Quorum,
        ..QueueArgs::default()
    });
    s.publish(msg("a", None), 0);
    for _ in 0..3 {
        let id = s.get(false, 0).map(|g| g.id).unwrap_or(99);
        s.release(&[id]);
    }
    assert!(reasons(&mut s).is_empty());
    let g = s.get(false, 0);
    assert_eq!(
        g.as_ref().map(|g| (g.returns, g.redelivered)),
        Some((0, true))
    );
    s.requeue(&[g.map(|g| g.id).unwrap_or(99)]);
    assert_eq!(reasons(&mut s), vec![("a".into(), Reason::DeliveryLimit)]);
}

#[test]
fn quorum_delivery_limit_defaults_to_20_and_negative_is_unlimited() {
    let mut s = queue(QueueArgs {
        queue_type: QueueType::Quorum,
        ..QueueArgs::default()
    });
    s.publish(msg("a", None), 0);
    for _ in 0..20 {
        let id = s.get(false, 0).map(|g| g.id).unwrap_or(99);
        s.requeue(&[id]);
    }
    assert!(reasons(&mut s).is_empty());
    let id = s.get(false, 0).map(|g| g.id).unwrap_or(99);
    s.requeue(&[id]);
    assert_eq!(reasons(&mut s), vec![("a".into(), Reason::DeliveryLimit)]);
    let mut s = queue(QueueArgs {
        queue_type: QueueType::Quorum,
        delivery_limit: Some(-1),
        ..QueueArgs::default()
    });
    s.publish(msg("b", None), 0);
    for _ in 0..50 {
        let id = s.get(false, 0).map(|g| g.id).unwrap_or(99);
        s.requeue(&[id]);
    }
    assert!(reasons(&mut s).is_empty());
    assert_eq!(s.message_count(), 1);
}

#[test]
fn delivery_limit_from_a_policy_applies_to_classic_queues_too() {
    // A Charon extension (issue 10): RabbitMQ ignores `delivery-limit` on classic queues; the
    // argument is refused for them, so in a classic queue's settings it comes from a policy.
    let mut s = queue(QueueArgs {
        delivery_limit: Some(0),
        ..QueueArgs::default()
    });
    s.publish(msg("a", None), 0);
    let id = s.get(false, 0).map(|g| g.id).unwrap_or(99);
    s.requeue(&[id]);
    assert_eq!(reasons(&mut s), vec![("a".into(), Reason::DeliveryLimit)]);
    assert_eq!(s.message_count(), 0);
}

#[test]
fn lowered_max_length_applies_at_once_to_an_existing_queue() {
    let mut s = queue(QueueArgs::default());
    for b in ["a", "b", "c"] {
        s.publish(msg(b, None), 0);
    }
    s.set_args(QueueArgs {
        max_length: Some(1),
        ..QueueArgs::default()
    });
    assert_eq!(s.message_count(), 1);
    assert_eq!(reasons(&mut s).len(), 2);
}

#[test]
fn purge_does_not_dead_letter() {
    let mut s = queue(QueueArgs {
        message_ttl: Some(10),
        ..QueueArgs::default()
    });
    s.publish(msg("a", None), 0);
    assert_eq!(s.purge(), 1);
    s.expire(100);
    assert!(reasons(&mut s).is_empty());
    assert_eq!(s.next_expiry(), None);
}

#[test]
fn browse_reads_without_removing_and_remove_takes_by_id() {
    let mut s = queue(QueueArgs::default());
    for b in ["a", "b", "c"] {
        s.publish(msg(b, None), 0);
    }
    let seen: Vec<MsgId> = s.browse(1, 5).into_iter().map(|(id, _)| id).collect();
    assert_eq!(seen, vec![1, 2]);
    assert_eq!(s.message_count(), 3);
    assert!(s.remove(1).is_some());
    assert!(s.remove(1).is_none());
    assert_eq!(s.get(true, 0).map(|g| g.id), Some(0));
    assert_eq!(s.get(true, 0).map(|g| g.id), Some(2));
}
