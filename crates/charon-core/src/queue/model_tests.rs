//! QueueState tests: unit rules plus a proptest model check (no message
//! lost or duplicated, order preserved, prefetch never exceeded).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use charon_protocol::RawProperties;
use proptest::prelude::*;

use super::*;
use crate::arguments::QueueArgs;

fn msg(n: u64) -> Arc<Message> {
    Arc::new(Message::new(
        "",
        "q",
        RawProperties::default(),
        Bytes::from(n.to_string()),
    ))
}

fn q() -> QueueState {
    QueueState::new(Arc::from("q"), QueueArgs::default())
}

fn spec(prefetch: u16) -> ConsumerSpec {
    ConsumerSpec {
        no_ack: false,
        prefetch,
        exclusive: false,
    }
}

fn deliver(q: &mut QueueState) -> Vec<Delivery> {
    let mut out = Vec::new();
    q.next_deliveries(0, &mut |_| true, &mut out);
    out
}

#[test]
fn round_robin_across_consumers() {
    let mut s = q();
    assert!(s.add_consumer(1, spec(0)).is_ok());
    assert!(s.add_consumer(2, spec(0)).is_ok());
    for i in 0..4 {
        s.publish(msg(i), 0);
    }
    let who: Vec<_> = deliver(&mut s).iter().map(|d| d.consumer).collect();
    assert_eq!(who, vec![1, 2, 1, 2]);
}

#[test]
fn prefetch_limits_unacked_per_consumer() {
    let mut s = q();
    assert!(s.add_consumer(1, spec(2)).is_ok());
    for i in 0..5 {
        s.publish(msg(i), 0);
    }
    let d = deliver(&mut s);
    assert_eq!(d.len(), 2);
    assert!(deliver(&mut s).is_empty());
    s.ack(&[d[0].id]);
    assert_eq!(deliver(&mut s).len(), 1);
    assert_eq!(s.message_count(), 2);
    assert_eq!(s.unacked_count(), 2);
}

#[test]
fn veto_from_server_stops_delivery() {
    let mut s = q();
    assert!(s.add_consumer(1, spec(0)).is_ok());
    s.publish(msg(0), 0);
    let mut out = Vec::new();
    s.next_deliveries(0, &mut |_| false, &mut out);
    assert!(out.is_empty());
    assert_eq!(s.message_count(), 1);
}

#[test]
fn requeue_restores_original_order_with_redelivered() {
    let mut s = q();
    for i in 0..3 {
        s.publish(msg(i), 0);
    }
    let a = s.get(false, 0).map(|g| g.id);
    let b = s.get(false, 0).map(|g| g.id);
    s.requeue(&[b.unwrap_or_default(), a.unwrap_or_default()]);
    let g = s.get(true, 0);
    assert_eq!(
        g.as_ref().map(|g| (g.id, g.redelivered, g.remaining)),
        Some((0, true, 2))
    );
    let g = s.get(true, 0);
    assert_eq!(g.map(|g| (g.id, g.redelivered)), Some((1, true)));
    let g = s.get(true, 0);
    assert_eq!(
        g.map(|g| (g.id, g.redelivered, g.remaining)),
        Some((2, false, 0))
    );
}

#[test]
fn no_ack_deliveries_are_settled_immediately() {
    let mut s = q();
    assert!(
        s.add_consumer(
            1,
            ConsumerSpec {
                no_ack: true,
                prefetch: 1,
                exclusive: false
            }
        )
        .is_ok()
    );
    for i in 0..3 {
        s.publish(msg(i), 0);
    }
    assert_eq!(deliver(&mut s).len(), 3);
    assert_eq!(s.unacked_count(), 0);
}

#[test]
fn exclusive_consumer_rules() {
    let mut s = q();
    assert!(s.add_consumer(1, spec(0)).is_ok());
    let e = s
        .add_consumer(
            2,
            ConsumerSpec {
                exclusive: true,
                ..spec(0)
            },
        )
        .err();
    assert_eq!(
        e.map(|e| e.reply_text()).as_deref(),
        Some("ACCESS_REFUSED - queue 'q' in vhost '/' in exclusive use")
    );
    s.remove_consumer(1);
    assert!(
        s.add_consumer(
            2,
            ConsumerSpec {
                exclusive: true,
                ..spec(0)
            }
        )
        .is_ok()
    );
    assert!(s.add_consumer(3, spec(0)).is_err());
}

#[test]
fn reject_removes_and_returns_messages_purge_counts_ready() {
    let mut s = q();
    for i in 0..3 {
        s.publish(msg(i), 0);
    }
    let g = s.get(false, 0).map(|g| g.id).unwrap_or_default();
    assert_eq!(s.reject(&[g, 99]), 1);
    assert_eq!(s.purge(), 2);
    assert_eq!(s.ready_bytes(), 0);
}

#[test]
fn message_ttl_expires_at_head() {
    let mut s = QueueState::new(
        Arc::from("q"),
        QueueArgs {
            message_ttl: Some(100),
            ..Default::default()
        },
    );
    s.publish(msg(0), 0);
    s.publish(msg(1), 50);
    assert_eq!(s.next_expiry(), Some(100));
    assert_eq!(s.get(true, 120).map(|g| g.id), Some(1));
    assert_eq!(s.take_dead_letters().len(), 1);
}

#[test]
fn max_length_drops_head() {
    let mut s = QueueState::new(
        Arc::from("q"),
        QueueArgs {
            max_length: Some(2),
            ..Default::default()
        },
    );
    for i in 0..3 {
        s.publish(msg(i), 0);
    }
    assert_eq!(s.message_count(), 2);
    assert_eq!(s.get(true, 0).map(|g| g.id), Some(1));
}

#[test]
fn single_active_consumer_gets_everything() {
    let mut s = QueueState::new(
        Arc::from("q"),
        QueueArgs {
            single_active_consumer: true,
            ..Default::default()
        },
    );
    assert!(s.add_consumer(1, spec(0)).is_ok());
    assert!(s.add_consumer(2, spec(0)).is_ok());
    for i in 0..3 {
        s.publish(msg(i), 0);
    }
    assert!(deliver(&mut s).iter().all(|d| d.consumer == 1));
}

#[derive(Debug, Clone)]
enum Op {
    Publish,
    AddConsumer(u16),
    RemoveConsumer(usize),
    Deliver,
    Get(bool),
    Ack(usize),
    Requeue(usize),
    Reject(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Publish),
        1 => (0u16..3).prop_map(Op::AddConsumer),
        1 => (0usize..4).prop_map(Op::RemoveConsumer),
        3 => Just(Op::Deliver),
        1 => any::<bool>().prop_map(Op::Get),
        2 => (0usize..8).prop_map(Op::Ack),
        2 => (0usize..8).prop_map(Op::Requeue),
        1 => (0usize..8).prop_map(Op::Reject),
    ]
}

proptest! {
    #[test]
    fn queue_state_matches_reference_model(ops in proptest::collection::vec(op(), 1..80)) {
        let mut s = q();
        // model: ready ids (ordered), unacked id -> consumer, redelivered set
        let mut ready: BTreeSet<MsgId> = BTreeSet::new();
        let mut unacked: BTreeMap<MsgId, Option<ConsumerId>> = BTreeMap::new();
        let mut delivered_once: BTreeSet<MsgId> = BTreeSet::new();
        let mut gone: BTreeSet<MsgId> = BTreeSet::new();
        let mut consumers: Vec<(ConsumerId, u16)> = Vec::new();
        let mut next_consumer = 1;
        for o in ops {
            match o {
                Op::Publish => {
                    let id = s.publish(msg(0), 0).id().unwrap_or_default();
                    prop_assert!(ready.iter().chain(unacked.keys()).chain(gone.iter()).all(|x| *x < id));
                    ready.insert(id);
                }
                Op::AddConsumer(p) => {
                    prop_assert!(s.add_consumer(next_consumer, spec(p)).is_ok());
                    consumers.push((next_consumer, p));
                    next_consumer += 1;
                }
                Op::RemoveConsumer(i) if !consumers.is_empty() => {
                    let (c, _) = consumers.remove(i % consumers.len());
                    s.remove_consumer(c);
                    for v in unacked.values_mut() {
                        if *v == Some(c) {
                            *v = None;
                        }
                    }
                }
                Op::Deliver => {
                    let mut out = Vec::new();
                    s.next_deliveries(0, &mut |_| true, &mut out);
                    let mut last = None;
                    for d in &out {
                        // in order, from the head of ready
                        prop_assert_eq!(ready.first().copied(), Some(d.id));
                        prop_assert!(last.is_none_or(|l| l < d.id));
                        last = Some(d.id);
                        prop_assert_eq!(d.redelivered, delivered_once.contains(&d.id));
                        ready.remove(&d.id);
                        delivered_once.insert(d.id);
                        unacked.insert(d.id, Some(d.consumer));
                    }
                    // prefetch never exceeded; stops only when nobody can take more
                    let mut per: HashMap<ConsumerId, usize> = HashMap::new();
                    for c in unacked.values().flatten() {
                        *per.entry(*c).or_default() += 1;
                    }
                    for (c, p) in &consumers {
                        let n = per.get(c).copied().unwrap_or(0);
                        if *p > 0 {
                            prop_assert!(n <= usize::from(*p));
                        }
                        if !ready.is_empty() {
                            prop_assert!(*p > 0 && n >= usize::from(*p));
                        }
                    }
                }
                Op::Get(no_ack) => {
                    let g = s.get(no_ack, 0);
                    prop_assert_eq!(g.as_ref().map(|g| g.id), ready.first().copied());
                    if let Some(g) = g {
                        prop_assert_eq!(g.redelivered, delivered_once.contains(&g.id));
                        ready.remove(&g.id);
                        delivered_once.insert(g.id);
                        if no_ack { gone.insert(g.id); } else { unacked.insert(g.id, None); }
                        prop_assert_eq!(g.remaining as usize, ready.len());
                    }
                }
                Op::Ack(i) | Op::Requeue(i) | Op::Reject(i) if !unacked.is_empty() => {
                    let id = *unacked.keys().nth(i % unacked.len()).unwrap_or(&0);
                    unacked.remove(&id);
                    match o {
                        Op::Ack(_) => { s.ack(&[id]); gone.insert(id); }
                        Op::Requeue(_) => { s.requeue(&[id]); ready.insert(id); }
                        _ => { prop_assert_eq!(s.reject(&[id]), 1); gone.insert(id); }
                    }
                }
                _ => {}
            }
            prop_assert_eq!(s.message_count() as usize, ready.len());
            prop_assert_eq!(s.unacked_count() as usize, unacked.len());
            prop_assert_eq!(s.consumer_count() as usize, consumers.len());
        }
        // drain: every ready message comes out exactly once, in id order
        let mut drained = Vec::new();
        while let Some(g) = s.get(true, 0) { drained.push(g.id); }
        prop_assert_eq!(drained, ready.into_iter().collect::<Vec<_>>());
    }
}
