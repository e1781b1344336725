//! Retry tests: settings (validation, argument-vs-policy precedence), delays and jitter bounds,
//! the retry cycle on a real [`QueueState`] (park, release to the tail with `x-retry-count`,
//! dead-lettering after the last attempt), ordered keys, and a proptest model: nothing lost or
//! duplicated, no message of a retrying key overtakes it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use charon_protocol::{
    AMQPValue, BasicProperties, FieldArray, FieldTable, LongString, RawProperties, ShortString,
};
use proptest::prelude::*;

use super::*;
use crate::arguments::QueueArgs;
use crate::dead_letter::Reason as DeadReason;
use crate::policy::{DefValue, PolicyDefinition, effective_args};
use crate::queue::{ConsumerSpec, Delivery, QueueState};

fn table(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(ShortString::from(*k), v.clone());
    }
    t
}

fn args(entries: &[(&str, AMQPValue)]) -> Result<QueueArgs, String> {
    QueueArgs::parse(&table(entries), "q", "/").map_err(|e| e.reply_text())
}

fn policy(entries: &[(&str, DefValue)]) -> Result<PolicyDefinition, String> {
    PolicyDefinition::parse(
        entries
            .iter()
            .map(|(k, v)| ((*k).to_string(), v.clone()))
            .collect(),
    )
    .map_err(|e| e.to_string())
}

fn keyed(n: u64, key: Option<&str>) -> Arc<Message> {
    let mut p = BasicProperties::default();
    if let Some(k) = key {
        p = p.with_headers(table(&[(
            "biz-key",
            AMQPValue::LongString(LongString::from(k)),
        )]));
    }
    Arc::new(Message::new(
        "",
        "q",
        RawProperties::encode(&p),
        Bytes::from(n.to_string()),
    ))
}

fn body(m: &Message) -> u64 {
    std::str::from_utf8(m.body.wire_bytes())
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(u64::MAX)
}

fn deliver(q: &mut QueueState, now: u64) -> Vec<Delivery> {
    let mut out = Vec::new();
    q.next_deliveries(now, &mut |_| true, &mut out);
    out
}

fn queue(settings: &[(&str, AMQPValue)]) -> QueueState {
    let a = args(settings).unwrap_or_default();
    let mut q = QueueState::new(Arc::from("q"), a);
    let _ = q.add_consumer(
        1,
        ConsumerSpec {
            no_ack: false,
            prefetch: 0,
            exclusive: false,
        },
    );
    q
}

fn int(i: i64) -> AMQPValue {
    AMQPValue::LongLongInt(i)
}

#[test]
fn argument_errors_are_rabbitmq_style() {
    assert_eq!(
        args(&[("x-retry-limit", int(-1))]).err().as_deref(),
        Some(
            "PRECONDITION_FAILED - invalid arg 'x-retry-limit' for queue 'q' in vhost '/': {value_negative,-1}"
        )
    );
    assert!(
        args(&[("x-retry-backoff-jitter", AMQPValue::Double(1.5))])
            .err()
            .is_some_and(|e| e.ends_with("{value_out_of_range,1.5}"))
    );
    assert!(
        args(&[(
            "x-retry-delays",
            AMQPValue::LongString(LongString::from("5000"))
        )])
        .err()
        .is_some_and(|e| e.ends_with("{unacceptable_type,longstr}"))
    );
    assert!(
        args(&[(
            "x-retry-delays",
            AMQPValue::FieldArray(FieldArray::from(vec![int(5), int(-2)]))
        )])
        .err()
        .is_some_and(|e| e.ends_with("{value_negative,-2}"))
    );
    assert!(
        args(&[("x-retry-backoff-multiplier", AMQPValue::Double(0.5))])
            .err()
            .is_some_and(|e| e.contains("'x-retry-backoff-multiplier'"))
    );
}

#[test]
fn policy_errors_name_the_key_and_value() {
    assert_eq!(
        policy(&[("retry-limit", DefValue::Int(-1))])
            .err()
            .as_deref(),
        Some("retry-limit should be a non-negative integer, actually was -1")
    );
    assert!(
        policy(&[("retry-delays", DefValue::Other("[1,x]".into()))])
            .err()
            .is_some_and(|e| e.starts_with("retry-delays should be a non-empty list"))
    );
    assert!(policy(&[("retry-backoff-jitter", DefValue::Other("2.0".into()))]).is_err());
    assert!(policy(&[("retry-on-requeue", DefValue::Str("yes".into()))]).is_err());
    assert!(policy(&[("retry-nonsense", DefValue::Int(1))]).is_err());
    let p = policy(&[
        (
            "retry-delays",
            DefValue::Other("[5000, 30000,120000]".into()),
        ),
        ("retry-backoff-multiplier", DefValue::Other("2.5".into())),
    ]);
    assert_eq!(
        p.ok().and_then(|p| p.retry.delays),
        Some(vec![5000, 30000, 120000])
    );
}

#[test]
fn arguments_win_except_the_limit_which_takes_the_smaller() {
    let declared = args(&[
        ("x-retry-limit", int(5)),
        ("x-retry-backoff-initial", int(100)),
        ("x-retry-order-key", AMQPValue::LongString("k".into())),
    ])
    .unwrap_or_default();
    let p = policy(&[
        ("retry-limit", DefValue::Int(2)),
        ("retry-delays", DefValue::Other("[1,2,3]".into())),
        ("retry-backoff-multiplier", DefValue::Int(3)),
        ("retry-on-requeue", DefValue::Bool(true)),
    ])
    .unwrap_or_default();
    let e = effective_args(&declared, false, Some(&p)).retry;
    assert_eq!(
        e,
        Some(RetrySettings {
            limit: 2,
            schedule: Schedule::Backoff {
                initial: 100,
                multiplier: 3.0,
                max: None,
                jitter: 0.0
            },
            on_requeue: true,
            order_key: Some(OrderKey::Header("k".into())),
        })
    );
    // Without a schedule in the arguments the policy's list applies, and its length is the
    // default limit.
    let e = effective_args(
        &QueueArgs::default(),
        false,
        Some(
            &policy(&[(
                "retry-delays",
                DefValue::Other("[5000,30000,120000]".into()),
            )])
            .unwrap_or_default(),
        ),
    )
    .retry;
    assert_eq!(e.as_ref().map(|s| s.limit), Some(3));
    assert_eq!(
        e.map(|s| s.schedule),
        Some(Schedule::Delays(vec![5000, 30000, 120000]))
    );
    assert_eq!(QueueArgs::default().retry, None);
}

#[test]
fn delays_follow_the_list_then_stay_at_its_last_entry() {
    let s = RetrySettings {
        limit: 5,
        schedule: Schedule::Delays(vec![5000, 30000, 120000]),
        on_requeue: false,
        order_key: None,
    };
    let d: Vec<u64> = (1..=5).map(|a| s.delay(a, 7)).collect();
    assert_eq!(d, vec![5000, 30000, 120000, 120000, 120000]);
}

#[test]
fn exponential_backoff_is_capped() {
    // Spring Kafka's @RetryableTopic(attempts = 5, backoff = 5 s × 2): 5, 10, 20, 40 s.
    let s = RetrySettings {
        limit: 4,
        schedule: Schedule::Backoff {
            initial: 5000,
            multiplier: 2.0,
            max: Some(30000),
            jitter: 0.0,
        },
        on_requeue: false,
        order_key: None,
    };
    let d: Vec<u64> = (1..=4).map(|a| s.delay(a, u64::MAX)).collect();
    assert_eq!(d, vec![5000, 10000, 20000, 30000]);
}

proptest! {
    #[test]
    fn jitter_stays_in_bounds(initial in 0u64..100_000, mult in 1.0f64..4.0, jitter in 0.0f64..=1.0,
                              attempt in 1u32..12, entropy in any::<u64>(), max in proptest::option::of(0u64..1_000_000)) {
        let s = RetrySettings {
            limit: 20,
            schedule: Schedule::Backoff { initial, multiplier: mult, max, jitter },
            on_requeue: false,
            order_key: None,
        };
        let cap = max.unwrap_or(u64::MAX) as f64;
        let base = (initial as f64 * mult.powi(attempt as i32 - 1)).min(cap);
        let d = s.delay(attempt, entropy) as f64;
        prop_assert!(d >= (base * (1.0 - jitter)).floor() - 1.0, "{d} below {base}·(1-{jitter})");
        prop_assert!(d <= (base * (1.0 + jitter)).ceil() + 1.0 && d <= cap, "{d} above bounds");
    }
}

fn limit3() -> QueueState {
    queue(&[
        ("x-retry-limit", int(3)),
        (
            "x-retry-delays",
            AMQPValue::FieldArray(FieldArray::from(vec![int(100), int(200), int(400)])),
        ),
    ])
}

#[test]
fn a_failing_message_comes_back_at_the_tail_three_times_then_is_dead_lettered() {
    let mut q = limit3();
    let mut r = Retrier::default();
    let mut next = 100;
    let mut alloc = || {
        next += 1;
        next
    };
    q.publish(keyed(0, None), 0);
    let mut now = 0;
    let mut seen_counts = Vec::new();
    let mut fail_id = deliver(&mut q, now)[0].id;
    for attempt in 1..=3u32 {
        let s = q.args().retry.clone();
        let parked = r.failed(&mut q, s.as_ref(), &[fail_id], false, now, &mut || 0);
        let delay = [100, 200, 400][attempt as usize - 1];
        assert_eq!(
            parked
                .iter()
                .map(|p| (p.due, p.attempt))
                .collect::<Vec<_>>(),
            vec![(now + delay, attempt)]
        );
        assert!(q.take_dead_letters().is_empty());
        // Another message flows meanwhile and sits ahead of the retried one.
        q.publish(keyed(10 + u64::from(attempt), None), now);
        let d = deliver(&mut q, now);
        assert_eq!(
            d.iter().map(|d| body(&d.message)).collect::<Vec<_>>(),
            vec![10 + u64::from(attempt)]
        );
        q.ack(&[d[0].id]);
        assert_eq!(r.next_due(), Some(now + delay));
        assert!(
            r.release_due(&mut q, now + delay - 1, &mut alloc)
                .is_empty()
        );
        now += delay;
        let moved = r.release_due(&mut q, now, &mut alloc);
        assert_eq!(moved.len(), 1);
        let d = deliver(&mut q, now);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].id, moved[0].1);
        seen_counts.push(retry_count(&d[0].message));
        fail_id = d[0].id;
    }
    assert_eq!(seen_counts, vec![1, 2, 3]);
    let s = q.args().retry.clone();
    assert!(
        r.failed(&mut q, s.as_ref(), &[fail_id], false, now, &mut || 0)
            .is_empty()
    );
    let dead = q.take_dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason, DeadReason::Rejected);
    assert_eq!(retry_count(&dead[0].message), 3);
    assert_eq!(r.stats(), RetryStats::default());
}

#[test]
fn requeue_is_retried_only_with_retry_on_requeue() {
    let mut q = limit3();
    let mut r = Retrier::default();
    q.publish(keyed(0, None), 0);
    let id = deliver(&mut q, 0)[0].id;
    let s = q.args().retry.clone();
    assert!(
        r.failed(&mut q, s.as_ref(), &[id], true, 0, &mut || 0)
            .is_empty()
    );
    assert_eq!(q.message_count(), 1);
    let mut q = queue(&[
        ("x-retry-limit", int(1)),
        ("x-retry-on-requeue", AMQPValue::Boolean(true)),
    ]);
    q.publish(keyed(0, None), 0);
    let id = deliver(&mut q, 0)[0].id;
    let s = q.args().retry.clone();
    assert_eq!(
        r.failed(&mut q, s.as_ref(), &[id], true, 0, &mut || 0)
            .len(),
        1
    );
    assert_eq!(q.message_count(), 0);
    assert_eq!(r.stats().parked, 1);
}

fn ordered() -> QueueState {
    queue(&[
        ("x-retry-limit", int(1)),
        ("x-retry-backoff-initial", int(1000)),
        ("x-retry-order-key", AMQPValue::LongString("biz-key".into())),
    ])
}

#[test]
fn ordered_retries_hold_exactly_the_same_key() {
    let mut q = ordered();
    q.track_gone();
    let mut r = Retrier::default();
    let s = q.args().retry.clone();
    let mut next = 1000;
    let mut alloc = || {
        next += 1;
        next
    };
    q.publish(keyed(1, Some("A")), 0);
    let a1 = deliver(&mut q, 0)[0].id;
    // A later A (already queued) and a B, then a new A after the failure.
    q.publish(keyed(2, Some("A")), 0);
    q.publish(keyed(3, Some("B")), 0);
    r.failed(&mut q, s.as_ref(), &[a1], false, 0, &mut || 0);
    let id4 = 50;
    let m4 = keyed(4, Some("A"));
    assert!(r.holds(s.as_ref(), id4, &m4));
    assert!(!r.holds(s.as_ref(), 51, &keyed(5, None)));
    let d = deliver(&mut q, 0);
    assert_eq!(
        d.iter().map(|d| body(&d.message)).collect::<Vec<_>>(),
        vec![3]
    );
    assert_eq!(r.stats().held, 2);
    q.ack(&[d[0].id]);
    let g = q.take_gone();
    r.on_gone(&mut q, &g, 0);
    // The retried A comes back; the held ones still wait until it is settled.
    assert_eq!(r.release_due(&mut q, 1000, &mut alloc).len(), 1);
    let d = deliver(&mut q, 1000);
    assert_eq!(
        d.iter().map(|d| body(&d.message)).collect::<Vec<_>>(),
        vec![1]
    );
    q.ack(&[d[0].id]);
    let g = q.take_gone();
    r.on_gone(&mut q, &g, 1000);
    assert_eq!(r.stats().held, 0);
    let d = deliver(&mut q, 1000);
    assert_eq!(
        d.iter().map(|d| body(&d.message)).collect::<Vec<_>>(),
        vec![2, 4]
    );
}

#[test]
fn a_dead_lettered_retry_releases_its_key_too() {
    let mut q = ordered();
    q.track_gone();
    let mut r = Retrier::default();
    let s = q.args().retry.clone();
    let mut next = 1000;
    let mut alloc = || {
        next += 1;
        next
    };
    q.publish(keyed(1, Some("A")), 0);
    let a1 = deliver(&mut q, 0)[0].id;
    q.publish(keyed(2, Some("A")), 0);
    r.failed(&mut q, s.as_ref(), &[a1], false, 0, &mut || 0);
    r.release_due(&mut q, 1000, &mut alloc);
    let d = deliver(&mut q, 1000);
    assert_eq!(d.len(), 1);
    r.failed(&mut q, s.as_ref(), &[d[0].id], false, 1000, &mut || 0);
    assert_eq!(q.take_dead_letters().len(), 1);
    let g = q.take_gone();
    r.on_gone(&mut q, &g, 1000);
    let d = deliver(&mut q, 1000);
    assert_eq!(
        d.iter().map(|d| body(&d.message)).collect::<Vec<_>>(),
        vec![2]
    );
}

#[derive(Debug, Clone)]
enum Op {
    Publish(u8),
    /// Deliver everything ready, then fail (reject) or ack each delivery by the mask.
    Round(u16),
    Advance(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4).prop_map(Op::Publish),
        any::<u16>().prop_map(Op::Round),
        (0u16..3000).prop_map(Op::Advance),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// Model: every message is acked or dead-lettered exactly once in the end (nothing lost,
    /// nothing twice); while a message of key K is retrying, no K message published after it is
    /// delivered; every retry comes back with the next `x-retry-count` and not before its delay.
    #[test]
    fn retry_model(ops in proptest::collection::vec(op(), 1..80)) {
        let mut q = queue(&[
            ("x-retry-limit", int(2)),
            ("x-retry-backoff-initial", int(500)),
            ("x-retry-backoff-multiplier", AMQPValue::Double(2.0)),
            ("x-retry-backoff-jitter", AMQPValue::Double(0.5)),
            ("x-retry-order-key", AMQPValue::LongString("biz-key".into())),
        ]);
        q.track_gone();
        let s = q.args().retry.clone();
        let mut r = Retrier::default();
        let mut now = 0u64;
        let mut next_new = 1_000_000u64;
        let mut n = 0u64;
        let mut key_of: HashMap<u64, Option<String>> = HashMap::new();
        let mut done: HashSet<u64> = HashSet::new();
        let mut retrying: HashMap<u64, (u32, u64)> = HashMap::new(); // body -> (count, earliest)
        let mut seed = 1u64;
        let mut pass = |q: &mut QueueState, r: &mut Retrier, now: u64, mask: u16,
                        key_of: &HashMap<u64, Option<String>>, done: &mut HashSet<u64>, retrying: &mut HashMap<u64, (u32, u64)>| -> Result<(), TestCaseError> {
            let d = deliver(q, now);
            // No earlier-published message of the same key may be retrying at delivery time
            // (messages already in flight when a key starts retrying are out of reach).
            for dl in &d {
                let b = body(&dl.message);
                let k = key_of.get(&b).cloned().flatten();
                for (rb, _) in retrying.iter() {
                    if *rb < b && k.is_some() && key_of.get(rb).cloned().flatten() == k {
                        prop_assert!(false, "{b} overtook retrying {rb} of key {k:?}");
                    }
                }
            }
            for (i, dl) in d.iter().enumerate() {
                let b = body(&dl.message);
                let c = retry_count(&dl.message);
                if let Some((expect, earliest)) = retrying.get(&b) {
                    prop_assert_eq!(c, *expect);
                    prop_assert!(now >= *earliest);
                }
                if mask & (1 << (i % 16)) != 0 {
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let e = seed;
                    let parked = r.failed(q, s.as_ref(), &[dl.id], false, now, &mut || e);
                    match parked.first() {
                        Some(p) => {
                            prop_assert_eq!(p.attempt, c + 1);
                            retrying.insert(b, (p.attempt, p.due));
                        }
                        None => {
                            let dead = q.take_dead_letters();
                            prop_assert_eq!(dead.len(), 1);
                            prop_assert!(done.insert(b), "{} settled twice", b);
                            retrying.remove(&b);
                        }
                    }
                } else {
                    q.ack(&[dl.id]);
                    prop_assert!(done.insert(b), "{} settled twice", b);
                    retrying.remove(&b);
                }
            }
            let gone = q.take_gone();
            r.on_gone(q, &gone, now);
            Ok(())
        };
        for o in ops {
            match o {
                Op::Publish(k) => {
                    let key = (k > 0).then(|| format!("k{k}"));
                    let m = keyed(n, key.as_deref());
                    key_of.insert(n, key);
                    let id = 10_000 + n;
                    if !r.holds(s.as_ref(), id, &m) {
                        q.enqueue_at(id, m, now);
                    }
                    n += 1;
                }
                Op::Round(mask) => pass(&mut q, &mut r, now, mask, &key_of, &mut done, &mut retrying)?,
                Op::Advance(ms) => {
                    now += u64::from(ms);
                    r.release_due(&mut q, now, &mut || { next_new += 1; next_new });
                }
            }
        }
        // Drain: ack everything from now on.
        for _ in 0..20 {
            now += 10_000;
            r.release_due(&mut q, now, &mut || { next_new += 1; next_new });
            pass(&mut q, &mut r, now, 0, &key_of, &mut done, &mut retrying)?;
        }
        prop_assert_eq!(done.len() as u64, n, "lost messages; stats {:?}", r.stats());
        prop_assert_eq!(r.stats(), RetryStats::default());
        let _: BTreeMap<u8, u8> = BTreeMap::new();
    }
}

#[test]
fn due_times_are_microseconds_distinct_within_a_millisecond_and_bounded_per_release() {
    let mut q = limit3();
    let mut r = Retrier::default();
    let mut next = 1000;
    let mut alloc = || {
        next += 1;
        next
    };
    for i in 0..3 {
        q.publish(keyed(i, None), 0);
    }
    let ids: Vec<crate::queue::MsgId> = deliver(&mut q, 0).iter().map(|d| d.id).collect();
    assert_eq!(ids.len(), 3);
    let s = q.args().retry.clone();
    // Failed 300 µs apart within one millisecond: 100 ms delay each.
    let t0 = 5_000_100;
    let mut stored = Vec::new();
    for (k, id) in ids.iter().rev().enumerate() {
        let at = t0 + 300 * k as u64;
        stored.extend(r.failed_us(&mut q, s.as_ref(), &[*id], false, at, &mut || 0));
    }
    // The store keeps ms, rounded up (never earlier than the µs due time).
    assert_eq!(
        stored.iter().map(|p| p.due).collect::<Vec<_>>(),
        vec![5101, 5101, 5101]
    );
    assert_eq!(r.next_due_us(), Some(t0 + 100_000));
    assert_eq!(r.next_due(), Some(5101));
    let mut moved = Vec::new();
    let mut dues = Vec::new();
    // Nothing before its µs due time; then one by one, in the order they failed.
    let due = t0 + 100_000;
    assert_eq!(
        r.release_due_us(
            &mut q,
            due - 1,
            10,
            &mut alloc,
            &mut |d| dues.push(d),
            &mut moved
        ),
        0
    );
    assert_eq!(
        r.release_due_us(
            &mut q,
            due + 300,
            10,
            &mut alloc,
            &mut |d| dues.push(d),
            &mut moved
        ),
        2
    );
    assert_eq!(dues, vec![due, due + 300]);
    // At most `max` per call: the rest stays due.
    assert_eq!(
        r.release_due_us(
            &mut q,
            due + 10_000,
            0,
            &mut alloc,
            &mut |d| dues.push(d),
            &mut moved
        ),
        0
    );
    assert_eq!(
        r.release_due_us(
            &mut q,
            due + 10_000,
            1,
            &mut alloc,
            &mut |d| dues.push(d),
            &mut moved
        ),
        1
    );
    assert_eq!(dues, vec![due, due + 300, due + 600]);
    let back: Vec<crate::queue::MsgId> = moved.iter().map(|(old, _)| *old).collect();
    assert_eq!(back, ids.iter().rev().copied().collect::<Vec<_>>());
    assert_eq!(r.stats(), RetryStats::default());
}
