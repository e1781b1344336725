//! Store tests: round trips, atomic dead-letter moves, torn and corrupt tails, reclamation,
//! group commit, and a model check across simulated crashes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;

use crate::{MemFs, Record, Recovered, Store, StoreConfig, StoredMessage};

fn msg(id: u64, queues: &[(&str, u64)]) -> StoredMessage {
    StoredMessage {
        message_id: id,
        enqueued_at_ms: 1_000 + id,
        expires_at_ms: id.is_multiple_of(2).then_some(99_999),
        exchange: Arc::from("x"),
        routing_key: Arc::from("rk"),
        properties: Bytes::from_static(b"\x80\x00\x0aprops"),
        body: Bytes::from(format!("body-{id}")),
        queues: queues.iter().map(|(q, i)| (Arc::from(*q), *i)).collect(),
    }
}

fn cfg() -> StoreConfig {
    StoreConfig::new(PathBuf::from("/data"))
}

fn open(fs: &MemFs, config: &StoreConfig) -> (Store, Recovered) {
    match Store::open(Arc::new(fs.clone()), config) {
        Ok(v) => v,
        Err(e) => panic!("open failed: {e}"),
    }
}

fn ids(rec: &Recovered, q: &str) -> Vec<u64> {
    rec.queues
        .get(q)
        .map(|m| m.keys().copied().collect())
        .unwrap_or_default()
}

fn append(s: &Store, r: Record) {
    if let Err(e) = s.append_sync(r) {
        panic!("append failed: {e}");
    }
}

#[test]
fn a_message_routed_to_two_queues_is_stored_once_and_recovered_in_both() {
    let fs = MemFs::new();
    let (s, _) = open(&fs, &cfg());
    append(&s, Record::Publish(msg(1, &[("a", 0), ("b", 5)])));
    append(&s, Record::Publish(msg(2, &[("a", 1)])));
    s.close();
    let (_, rec) = open(&fs, &cfg());
    assert_eq!(ids(&rec, "a"), vec![0, 1]);
    assert_eq!(ids(&rec, "b"), vec![5]);
    let a0 = &rec.queues["a"][&0].message;
    let b5 = &rec.queues["b"][&5].message;
    assert!(
        Arc::ptr_eq(a0, b5),
        "one stored message shared by both queues"
    );
    assert_eq!(**a0, msg(1, &[("a", 0), ("b", 5)]));
    assert_eq!(rec.max_message_id, 2);
}

#[test]
fn settled_messages_are_not_recovered_and_delivered_marks_survive() {
    let fs = MemFs::new();
    let (s, _) = open(&fs, &cfg());
    for i in 0..4 {
        append(&s, Record::Publish(msg(i, &[("q", i)])));
    }
    append(
        &s,
        Record::Settle {
            queue: Arc::from("q"),
            ids: vec![0, 2],
        },
    );
    append(
        &s,
        Record::Delivered {
            queue: Arc::from("q"),
            ids: vec![3],
        },
    );
    s.close();
    let (_, rec) = open(&fs, &cfg());
    assert_eq!(ids(&rec, "q"), vec![1, 3]);
    assert!(!rec.queues["q"][&1].delivered);
    assert!(rec.queues["q"][&3].delivered);
}

#[test]
fn dead_letter_move_is_one_record_source_or_targets_never_both() {
    let fs = MemFs::new();
    let (s, _) = open(&fs, &cfg());
    append(&s, Record::Publish(msg(1, &[("src", 0)])));
    let mv = Record::DeadLetterMove {
        from_queue: Arc::from("src"),
        from_id: 0,
        message: msg(2, &[("dlq", 0), ("dlq2", 7)]),
    };
    append(&s, mv);
    s.close();
    let (_, rec) = open(&fs, &cfg());
    assert_eq!(ids(&rec, "src"), Vec::<u64>::new());
    assert_eq!((ids(&rec, "dlq"), ids(&rec, "dlq2")), (vec![0], vec![7]));
}

#[test]
fn definitions_are_recovered_and_the_log_is_rewritten_as_a_snapshot() {
    let fs = MemFs::new();
    let (s, _) = open(&fs, &cfg());
    for i in 0..50 {
        append(
            &s,
            Record::PutDefinition {
                kind: Arc::from("queue"),
                key: Arc::from("/:q"),
                value: Bytes::from(format!("v{i}")),
            },
        );
    }
    append(
        &s,
        Record::PutDefinition {
            kind: Arc::from("policy"),
            key: Arc::from("/:DLX"),
            value: Bytes::from_static(b"p"),
        },
    );
    append(
        &s,
        Record::DeleteDefinition {
            kind: Arc::from("policy"),
            key: Arc::from("/:DLX"),
        },
    );
    s.close();
    let before = fs
        .len_of(&PathBuf::from("/data/definitions.log"))
        .unwrap_or(0);
    let (s, rec) = open(&fs, &cfg());
    s.close();
    let after = fs
        .len_of(&PathBuf::from("/data/definitions.log"))
        .unwrap_or(0);
    assert_eq!(rec.definitions.len(), 1);
    assert_eq!(
        rec.definitions[&(Arc::from("queue"), Arc::from("/:q"))],
        Bytes::from("v49")
    );
    assert!(after < before / 10, "snapshot {after} vs log {before}");
    let (_, rec2) = open(&fs, &cfg());
    assert_eq!(rec2.definitions, rec.definitions);
}

fn segment_of(fs: &MemFs) -> PathBuf {
    fs.paths()
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap_or_default()
}

#[test]
fn torn_tail_at_every_byte_of_the_last_record_is_truncated_and_never_served() {
    let base = MemFs::new();
    let (s, _) = open(&base, &cfg());
    append(&s, Record::Publish(msg(1, &[("q", 0)])));
    s.close();
    let good = base.len_of(&segment_of(&base)).unwrap_or(0);
    let (s, _) = open(&base, &cfg());
    append(&s, Record::Publish(msg(2, &[("q", 1)])));
    s.close();
    let full = base.len_of(&segment_of(&base)).unwrap_or(0);
    assert!(full > good);
    for cut in good..full {
        let fs = base.clone_deep();
        let seg = segment_of(&fs);
        if let Err(e) = crate::fs::Fs::truncate(&fs, &seg, cut as u64) {
            panic!("{e}");
        }
        let (s, rec) = open(&fs, &cfg());
        assert_eq!(ids(&rec, "q"), vec![0], "cut at {cut}");
        assert_eq!(rec.truncated_bytes, (cut - good) as u64);
        // the log goes on after the truncation point
        append(&s, Record::Publish(msg(3, &[("q", 2)])));
        s.close();
        let (_, rec) = open(&fs, &cfg());
        assert_eq!(ids(&rec, "q"), vec![0, 2], "cut at {cut}");
    }
}

#[test]
fn a_flipped_byte_stops_replay_at_that_record() {
    for victim in 0..3usize {
        let fs = MemFs::new();
        let (s, _) = open(&fs, &cfg());
        let mut offsets = Vec::new();
        for i in 0..3 {
            offsets.push(fs.len_of(&segment_of(&fs)).unwrap_or(0));
            append(&s, Record::Publish(msg(i, &[("q", i)])));
        }
        s.close();
        fs.flip(&segment_of(&fs), offsets[victim] + 20);
        let (_, rec) = open(&fs, &cfg());
        assert_eq!(ids(&rec, "q"), (0..victim as u64).collect::<Vec<_>>());
        assert!(rec.truncated_bytes > 0);
    }
}

#[test]
fn head_segments_whose_messages_are_all_gone_are_deleted() {
    let fs = MemFs::new();
    let config = StoreConfig {
        segment_size: 512,
        ..cfg()
    };
    let (s, _) = open(&fs, &config);
    for i in 0..200 {
        append(&s, Record::Publish(msg(i, &[("q", i)])));
        append(
            &s,
            Record::Settle {
                queue: Arc::from("q"),
                ids: vec![i],
            },
        );
    }
    append(&s, Record::Publish(msg(1000, &[("q", 1000)])));
    assert!(
        s.segment_count() <= 3,
        "segments left: {}",
        s.segment_count()
    );
    s.close();
    let (_, rec) = open(&fs, &config);
    assert_eq!(ids(&rec, "q"), vec![1000]);
}

#[test]
fn a_live_message_pins_its_segment_until_settled() {
    let fs = MemFs::new();
    let config = StoreConfig {
        segment_size: 256,
        ..cfg()
    };
    let (s, _) = open(&fs, &config);
    append(&s, Record::Publish(msg(0, &[("q", 0)])));
    for i in 1..100 {
        append(&s, Record::Publish(msg(i, &[("q", i)])));
        append(
            &s,
            Record::Settle {
                queue: Arc::from("q"),
                ids: vec![i],
            },
        );
    }
    let pinned = s.segment_count();
    assert!(pinned > 3);
    append(
        &s,
        Record::Settle {
            queue: Arc::from("q"),
            ids: vec![0],
        },
    );
    append(&s, Record::Publish(msg(500, &[("q", 500)])));
    assert!(s.segment_count() < pinned);
    s.close();
    let (_, rec) = open(&fs, &config);
    assert_eq!(ids(&rec, "q"), vec![500]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_share_group_commits() {
    let fs = MemFs::new();
    let (s, _) = open(&fs, &cfg());
    let s = Arc::new(s);
    let mut tickets = Vec::new();
    for i in 0..5000u64 {
        tickets.push(s.append(Record::Publish(msg(i, &[("q", i)]))));
    }
    let mut indexes = BTreeSet::new();
    for t in tickets {
        match t.await {
            Ok(Ok(i)) => {
                indexes.insert(i);
            }
            other => panic!("append failed: {other:?}"),
        }
    }
    assert_eq!(indexes.len(), 5000);
    assert!(
        s.stats().syncs() < 5000 / 10,
        "syncs: {}",
        s.stats().syncs()
    );
}

#[derive(Debug, Clone)]
enum Op {
    Publish(Vec<u8>),
    Settle(usize),
    Move(usize, u8),
    Crash(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => proptest::collection::vec(0u8..3, 1..3).prop_map(Op::Publish),
        2 => any::<usize>().prop_map(Op::Settle),
        1 => (any::<usize>(), 0u8..3).prop_map(|(i, q)| Op::Move(i, q)),
        1 => (0usize..64).prop_map(Op::Crash),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn store_matches_a_model_across_crashes(ops in proptest::collection::vec(op(), 1..60)) {
        let queues = ["q0", "q1", "q2"];
        let fs = MemFs::new();
        let config = StoreConfig { segment_size: 700, ..cfg() };
        let (mut s, _) = open(&fs, &config);
        let mut model: BTreeMap<&str, BTreeSet<u64>> = BTreeMap::new();
        let mut next_id = 0u64;
        for o in ops {
            match o {
                Op::Publish(qs) => {
                    next_id += 1;
                    let mut targets: Vec<(&str, u64)> = qs.iter().map(|q| (queues[*q as usize], next_id)).collect();
                    targets.sort();
                    targets.dedup();
                    append(&s, Record::Publish(msg(next_id, &targets)));
                    for (q, id) in targets { model.entry(q).or_default().insert(id); }
                }
                Op::Settle(i) => {
                    let all: Vec<(&str, u64)> = model.iter().flat_map(|(q, ids)| ids.iter().map(move |id| (*q, *id))).collect();
                    if all.is_empty() { continue; }
                    let (q, id) = all[i % all.len()];
                    append(&s, Record::Settle { queue: Arc::from(q), ids: vec![id] });
                    model.entry(q).or_default().remove(&id);
                }
                Op::Move(i, t) => {
                    let all: Vec<(&str, u64)> = model.iter().flat_map(|(q, ids)| ids.iter().map(move |id| (*q, *id))).collect();
                    if all.is_empty() { continue; }
                    let (q, id) = all[i % all.len()];
                    next_id += 1;
                    let target = queues[t as usize];
                    append(&s, Record::DeadLetterMove { from_queue: Arc::from(q), from_id: id, message: msg(next_id, &[(target, next_id)]) });
                    model.entry(q).or_default().remove(&id);
                    model.entry(target).or_default().insert(next_id);
                }
                Op::Crash(torn) => {
                    drop(s);
                    fs.crash(torn);
                    let (s2, rec) = open(&fs, &config);
                    s = s2;
                    for q in queues {
                        let want: Vec<u64> = model.get(q).map(|m| m.iter().copied().collect()).unwrap_or_default();
                        prop_assert_eq!(ids(&rec, q), want, "queue {}", q);
                    }
                }
            }
        }
        drop(s);
        fs.crash(0);
        let (_, rec) = open(&fs, &config);
        for q in queues {
            let want: Vec<u64> = model.get(q).map(|m| m.iter().copied().collect()).unwrap_or_default();
            prop_assert_eq!(ids(&rec, q), want, "queue {}", q);
        }
    }
}
