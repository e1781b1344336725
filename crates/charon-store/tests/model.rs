//! Model test: random sequences of publishes, settles, dead-letter moves,
//! delivery counts, purges, definitions, syncs, clean restarts and crashes
//! (with torn, garbage-filled tails) against an in-memory model, on tiny
//! segments so reclamation and compaction run all the time.
//!
//! After a crash the recovered state must equal the model after some prefix
//! of the appended commands that includes everything synced: nothing synced
//! is lost, and since each command is one record, a dead-letter move is
//! never half done. After a clean restart it must equal the model exactly.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use charon_store::{Command, MemStorage, Store, StoreConfig};
use common::{Snapshot, msg, open, snapshot};
use proptest::prelude::*;
use proptest::sample::Index;

#[derive(Debug, Clone)]
enum Op {
    Publish { queues: Vec<u64>, size: usize },
    Settle { pick: Vec<Index> },
    DeadLetter { pick: Index, targets: Vec<u64> },
    Count { pick: Index, count: u32 },
    Purge { queue: u64 },
    PutDef { key: u8, value: u8 },
    DelDef { key: u8 },
    Sync,
    Restart,
    Crash { keep: Index, garbage: bool },
}

fn op() -> impl Strategy<Value = Op> {
    let queue = 0u64..4;
    prop_oneof![
        8 => (prop::collection::vec(queue.clone(), 0..3), 0usize..600)
            .prop_map(|(queues, size)| Op::Publish { queues, size }),
        4 => prop::collection::vec(any::<Index>(), 1..4).prop_map(|pick| Op::Settle { pick }),
        3 => (any::<Index>(), prop::collection::vec(queue.clone(), 0..3))
            .prop_map(|(pick, targets)| Op::DeadLetter { pick, targets }),
        2 => (any::<Index>(), 1u32..5).prop_map(|(pick, count)| Op::Count { pick, count }),
        1 => queue.prop_map(|queue| Op::Purge { queue }),
        2 => (0u8..4, any::<u8>()).prop_map(|(key, value)| Op::PutDef { key, value }),
        1 => (0u8..4).prop_map(|key| Op::DelDef { key }),
        3 => Just(Op::Sync),
        1 => Just(Op::Restart),
        2 => (any::<Index>(), any::<bool>()).prop_map(|(keep, garbage)| Op::Crash { keep, garbage }),
    ]
}

/// queue → id → (body, delivery count); definitions.
#[derive(Debug, Clone, Default, PartialEq)]
struct Model {
    queues: BTreeMap<u64, BTreeMap<u64, (Vec<u8>, u32)>>,
    defs: BTreeMap<u8, Vec<u8>>,
}

impl Model {
    fn snapshot(&self) -> Snapshot {
        let queues = self
            .queues
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(q, m)| {
                (
                    *q,
                    m.iter()
                        .map(|(id, (b, c))| (*id, common::digest(b), *c))
                        .collect(),
                )
            })
            .collect();
        let defs = self
            .defs
            .iter()
            .map(|(k, v)| (1u8, vec![*k], v.clone()))
            .collect();
        (queues, defs)
    }

    fn members(&self) -> Vec<(u64, u64)> {
        self.queues
            .iter()
            .flat_map(|(q, m)| m.keys().map(move |id| (*q, *id)))
            .collect()
    }
}

fn config() -> StoreConfig {
    StoreConfig {
        segment_size: 1024,
        compact_ratio: 0.6,
        idle_tick: Duration::from_millis(1),
    }
}

struct Run {
    mem: MemStorage,
    store: Option<Store>,
    /// Model after each appended command since the last sync; [0] is synced.
    states: Vec<Model>,
    next_id: u64,
    /// Largest log index handed out, and the largest known durable: the log
    /// index must never go back below a durable one, even after every
    /// segment holding records was reclaimed.
    max_index: u64,
    durable_index: u64,
}

impl Run {
    fn store(&self) -> &Store {
        self.store.as_ref().expect("store open")
    }

    fn current(&self) -> &Model {
        self.states.last().expect("never empty")
    }

    fn append(&mut self, cmd: Command, next: Model) {
        let appended = self.store().append_nowait(cmd).expect("append");
        assert!(appended.index > self.durable_index, "log index went back");
        self.max_index = self.max_index.max(appended.index);
        self.states.push(next);
    }

    fn body(&mut self, size: usize) -> Vec<u8> {
        // Unique bodies: a tag, then filler.
        let mut b = self.next_id.to_le_bytes().to_vec();
        b.resize(8 + size, 0xab);
        b
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let mut m = self.current().clone();
        match op {
            Op::Publish { queues, size } => {
                let body = self.body(*size);
                if queues.is_empty() {
                    let refused = self.store().append_nowait(Command::Publish {
                        message: msg(&body),
                        members: vec![],
                    });
                    prop_assert!(refused.is_err(), "publish without members accepted");
                    return Ok(());
                }
                let mut members = Vec::new();
                for q in queues {
                    self.next_id += 1;
                    members.push((*q, self.next_id));
                    m.queues
                        .entry(*q)
                        .or_default()
                        .insert(self.next_id, (body.clone(), 0));
                }
                self.append(
                    Command::Publish {
                        message: msg(&body),
                        members,
                    },
                    m,
                );
            }
            Op::Settle { pick } => {
                let all = self.current().members();
                if all.is_empty() {
                    return Ok(());
                }
                let queue = pick[0].get(&all).0;
                let ids: Vec<u64> = pick
                    .iter()
                    .map(|p| *p.get(&all))
                    .filter(|(q, _)| *q == queue)
                    .map(|(_, id)| id)
                    .collect();
                for id in &ids {
                    if let Some(q) = m.queues.get_mut(&queue) {
                        q.remove(id);
                    }
                }
                self.append(Command::Settle { queue, ids }, m);
            }
            Op::DeadLetter { pick, targets } => {
                let all = self.current().members();
                if all.is_empty() {
                    return Ok(());
                }
                let source = *pick.get(&all);
                if let Some(q) = m.queues.get_mut(&source.0) {
                    q.remove(&source.1);
                }
                let body = self.body(20);
                let mut members: Vec<(u64, u64)> = Vec::new();
                for q in targets {
                    if members.iter().any(|(x, _)| x == q) {
                        continue;
                    }
                    self.next_id += 1;
                    members.push((*q, self.next_id));
                    m.queues
                        .entry(*q)
                        .or_default()
                        .insert(self.next_id, (body.clone(), 0));
                }
                self.append(
                    Command::DeadLetter {
                        source,
                        message: msg(&body),
                        targets: members,
                    },
                    m,
                );
            }
            Op::Count { pick, count } => {
                let all = self.current().members();
                if all.is_empty() {
                    return Ok(());
                }
                let member = *pick.get(&all);
                if let Some(e) = m
                    .queues
                    .get_mut(&member.0)
                    .and_then(|q| q.get_mut(&member.1))
                {
                    e.1 = *count;
                }
                self.append(
                    Command::DeliveryCount {
                        member,
                        count: *count,
                    },
                    m,
                );
            }
            Op::Purge { queue } => {
                m.queues.remove(queue);
                self.append(Command::Purge { queue: *queue }, m);
            }
            Op::PutDef { key, value } => {
                m.defs.insert(*key, vec![*value]);
                let cmd = Command::PutDefinition {
                    kind: 1,
                    key: Bytes::from(vec![*key]),
                    value: Bytes::from(vec![*value]),
                };
                self.append(cmd, m);
            }
            Op::DelDef { key } => {
                m.defs.remove(key);
                self.append(
                    Command::DeleteDefinition {
                        kind: 1,
                        key: Bytes::from(vec![*key]),
                    },
                    m,
                );
            }
            Op::Sync => {
                self.store().sync().expect("sync").wait().expect("durable");
                self.durable_index = self.max_index;
                let now = self.current().clone();
                self.states = vec![now];
            }
            Op::Restart => {
                // Drop first: the old store flushes what is pending.
                self.store = None;
                let (store, rec) = open(&self.mem, config());
                self.durable_index = self.max_index;
                prop_assert!(rec.last_index >= self.durable_index);
                let got = snapshot(&store, &rec);
                self.store = Some(store);
                prop_assert_eq!(&got, &self.current().snapshot(), "after clean restart");
                let now = self.current().clone();
                self.states = vec![now];
            }
            Op::Crash { keep, garbage } => {
                let mut tear = |_: &str, unsynced: &[u8]| {
                    let n = keep.index(unsynced.len() + 1);
                    let mut v = unsynced.get(..n).unwrap_or(&[]).to_vec();
                    if *garbage && !unsynced.is_empty() {
                        v.extend_from_slice(&[0x5a; 13]);
                    }
                    v
                };
                let crashed = self.mem.crash_with(&mut tear);
                // The old process is gone: its writer must not go on.
                self.store = None;
                let (store, rec) = open(&crashed, config());
                prop_assert!(rec.last_index >= self.durable_index, "durable index lost");
                // Indexes above the recovered ones were never durable.
                self.max_index = rec.last_index;
                let got = snapshot(&store, &rec);
                let matched = self.states.iter().position(|s| s.snapshot() == got);
                prop_assert!(
                    matched.is_some(),
                    "recovered state is no prefix of the appended commands\n got: {:?}\n synced: {:?}\n all: {:?}",
                    got,
                    self.states.first().map(Model::snapshot),
                    self.current().snapshot()
                );
                let matched = self.states.swap_remove(matched.unwrap_or(0));
                self.store = Some(store);
                self.mem = crashed;
                self.states = vec![matched];
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model(ops in prop::collection::vec(op(), 1..80)) {
        let mem = MemStorage::new();
        let (store, _) = open(&mem, config());
        let mut run = Run { mem, store: Some(store), states: vec![Model::default()], next_id: 0, max_index: 0, durable_index: 0 };
        for op in &ops {
            run.step(op)?;
        }
        if std::env::var_os("MODEL_STATS").is_some() {
            eprintln!("{:?}", run.store().stats());
        }
        // Finally: a clean restart sees exactly the model.
        run.step(&Op::Restart)?;
    }
}
