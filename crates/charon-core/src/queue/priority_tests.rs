//! Priority queues (`x-max-priority`), as RabbitMQ's `rabbit_priority_queue` orders them:
//! highest priority first, FIFO within a priority, no priority = 0, above the maximum = the
//! maximum, requeued messages back at their place within their priority.

use std::sync::Arc;

use bytes::Bytes;
use charon_protocol::{BasicProperties, RawProperties};

use super::*;
use crate::arguments::{Overflow, QueueArgs, QueueType};

fn msg(body: &str, priority: Option<u8>) -> Arc<Message> {
    let props = match priority {
        Some(p) => RawProperties::encode(&BasicProperties::default().with_priority(p)),
        None => RawProperties::default(),
    };
    Arc::new(Message::new("x", "k", props, Bytes::from(body.to_string())))
}

fn prio_queue(max: u8) -> QueueState {
    QueueState::new(
        Arc::from("q"),
        QueueArgs {
            max_priority: Some(max),
            ..QueueArgs::default()
        },
    )
}

fn drain(s: &mut QueueState) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(g) = s.get(true, 0) {
        out.push(String::from_utf8_lossy(g.message.body.wire_bytes()).into_owned());
    }
    out
}

#[test]
fn higher_priority_first_fifo_within_a_priority_none_is_zero_above_max_is_max() {
    let mut s = prio_queue(5);
    for (b, p) in [
        ("n1", None),
        ("p1a", Some(1)),
        ("p5a", Some(5)),
        ("p9", Some(9)),
        ("p1b", Some(1)),
        ("p0", Some(0)),
        ("n2", None),
        ("p5b", Some(5)),
    ] {
        s.publish(msg(b, p), 0);
    }
    assert_eq!(
        drain(&mut s),
        ["p5a", "p9", "p5b", "p1a", "p1b", "n1", "p0", "n2"]
    );
}

#[test]
fn a_requeued_message_goes_back_to_its_place_within_its_priority() {
    let mut s = prio_queue(10);
    s.publish(msg("low", Some(1)), 0);
    s.publish(msg("hi-1", Some(7)), 0);
    s.publish(msg("hi-2", Some(7)), 0);
    let first = s.get(false, 0).map(|g| g.id);
    s.publish(msg("hi-3", Some(7)), 0);
    s.requeue(&[first.unwrap_or(99)]);
    assert_eq!(drain(&mut s), ["hi-1", "hi-2", "hi-3", "low"]);
}

#[test]
fn consumers_get_the_highest_priority_first() {
    let mut s = prio_queue(3);
    s.publish(msg("a", Some(0)), 0);
    s.publish(msg("b", Some(3)), 0);
    s.publish(msg("c", Some(2)), 0);
    s.add_consumer(
        1,
        ConsumerSpec {
            no_ack: true,
            prefetch: 0,
            exclusive: false,
        },
    )
    .ok();
    let mut out = Vec::new();
    s.next_deliveries(0, &mut |_| true, &mut out);
    let bodies: Vec<_> = out
        .iter()
        .map(|d| d.message.body.wire_bytes().to_vec())
        .collect();
    assert_eq!(bodies, [b"b", b"c", b"a"]);
}

#[test]
fn drop_head_drops_the_next_message_to_deliver_and_browse_follows_the_order() {
    let mut s = QueueState::new(
        Arc::from("q"),
        QueueArgs {
            max_priority: Some(2),
            max_length: Some(2),
            overflow: Overflow::DropHead,
            ..QueueArgs::default()
        },
    );
    s.publish(msg("lo", Some(0)), 0);
    s.publish(msg("hi", Some(2)), 0);
    s.publish(msg("mid", Some(1)), 0);
    let dead: Vec<_> = s
        .take_dead_letters()
        .into_iter()
        .map(|d| d.message.body.wire_bytes().to_vec())
        .collect();
    assert_eq!(dead, [b"hi"]);
    let browsed: Vec<_> = s
        .browse(0, 10)
        .into_iter()
        .map(|(_, m)| m.body.wire_bytes().to_vec())
        .collect();
    assert_eq!(browsed, [b"mid".to_vec(), b"lo".to_vec()]);
}

#[test]
fn ttl_expires_messages_of_any_priority() {
    let mut s = QueueState::new(
        Arc::from("q"),
        QueueArgs {
            max_priority: Some(4),
            message_ttl: Some(10),
            ..QueueArgs::default()
        },
    );
    s.publish(msg("a", Some(4)), 0);
    s.publish(msg("b", Some(0)), 5);
    s.expire(12);
    assert_eq!(drain(&mut s), ["b"]);
    assert_eq!(s.take_dead_letters().len(), 1);
}

#[test]
fn restored_messages_take_their_priority_order() {
    let mut s = prio_queue(9);
    s.restore(0, msg("r0", Some(1)), None, false);
    s.restore(1, msg("r1", Some(8)), None, true);
    s.restore(2, msg("r2", None), None, false);
    assert_eq!(drain(&mut s), ["r1", "r0", "r2"]);
}

#[test]
fn quorum_queues_and_queues_without_max_priority_stay_fifo() {
    for args in [
        QueueArgs::default(),
        QueueArgs {
            max_priority: Some(5),
            queue_type: QueueType::Quorum,
            ..QueueArgs::default()
        },
    ] {
        let mut s = QueueState::new(Arc::from("q"), args);
        s.publish(msg("a", Some(0)), 0);
        s.publish(msg("b", Some(5)), 0);
        assert_eq!(drain(&mut s), ["a", "b"]);
    }
}
