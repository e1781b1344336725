//! Model test: random sequences of publishes, settles, dead-letter moves,
//! delivery counts, parks (retry due time + attempt), routes (a member's
//! message moved to other members), purges, definitions, syncs, clean restarts and crashes
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
    Publish {
        queues: Vec<u64>,
        size: usize,
    },
    Settle {
        pick: Vec<Index>,
    },
    DeadLetter {
        pick: Index,
        targets: Vec<u64>,
    },
    Count {
        pick: Index,
        count: u32,
    },
    /// `DeliveryCounts` for up to three members of the first picked member's queue.
    Counts {
        pick: Vec<Index>,
        count: u32,
    },
    Park {
        pick: Index,
        due: u64,
        attempt: u32,
    },
    Route {
        pick: Index,
        targets: Vec<u64>,
    },
    Purge {
        queue: u64,
    },
    PutDef {
        key: u8,
        value: u8,
    },
    DelDef {
        key: u8,
    },
    Sync,
    Restart,
    Crash {
        keep: Index,
        garbage: bool,
    },
}

fn op(parks: bool) -> impl Strategy<Value = Op> {
    all_ops().prop_filter("Park/Route only when asked", move |o| {
        parks || !matches!(o, Op::Park { .. } | Op::Route { .. })
    })
}

fn all_ops() -> impl Strategy<Value = Op> {
    let queue = 0u64..4;
    prop_oneof![
        8 => (prop::collection::vec(queue.clone(), 0..3), 0usize..600)
            .prop_map(|(queues, size)| Op::Publish { queues, size }),
        4 => prop::collection::vec(any::<Index>(), 1..4).prop_map(|pick| Op::Settle { pick }),
        3 => (any::<Index>(), prop::collection::vec(queue.clone(), 0..3))
            .prop_map(|(pick, targets)| Op::DeadLetter { pick, targets }),
        2 => (any::<Index>(), 1u32..5).prop_map(|(pick, count)| Op::Count { pick, count }),
        2 => (prop::collection::vec(any::<Index>(), 1..4), 1u32..5)
            .prop_map(|(pick, count)| Op::Counts { pick, count }),
        3 => (any::<Index>(), 0u64..1_000_000, 1u32..6)
            .prop_map(|(pick, due, attempt)| Op::Park { pick, due, attempt }),
        3 => (any::<Index>(), prop::collection::vec(queue.clone(), 0..3))
            .prop_map(|(pick, targets)| Op::Route { pick, targets }),
        1 => queue.prop_map(|queue| Op::Purge { queue }),
        2 => (0u8..4, any::<u8>()).prop_map(|(key, value)| Op::PutDef { key, value }),
        1 => (0u8..4).prop_map(|key| Op::DelDef { key }),
        3 => Just(Op::Sync),
        1 => Just(Op::Restart),
        2 => (any::<Index>(), any::<bool>()).prop_map(|(keep, garbage)| Op::Crash { keep, garbage }),
    ]
}

/// queue → id → (body, delivery count); definitions; member → park state (due, attempt).
#[derive(Debug, Clone, Default, PartialEq)]
struct Model {
    queues: BTreeMap<u64, BTreeMap<u64, (Vec<u8>, u32)>>,
    defs: BTreeMap<u8, Vec<u8>>,
    parks: BTreeMap<(u64, u64), (u64, u32)>,
}

/// What the store recovered: queues and definitions, and the park states.
type Full = (Snapshot, BTreeMap<(u64, u64), (u64, u32)>);

fn full(store: &Store, rec: &charon_store::Recovered) -> Full {
    let parks = rec
        .queues
        .iter()
        .flat_map(|(q, v)| {
            v.iter()
                .filter_map(move |e| e.parked.map(|p| ((*q, e.id), p)))
        })
        .collect();
    (snapshot(store, rec), parks)
}

impl Model {
    fn remove(&mut self, member: (u64, u64)) -> Option<(Vec<u8>, u32)> {
        self.parks.remove(&member);
        self.queues.get_mut(&member.0)?.remove(&member.1)
    }

    fn full(&self) -> Full {
        (self.snapshot(), self.parks.clone())
    }

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
    with_compaction(0.6)
}

fn with_compaction(compact_ratio: f64) -> StoreConfig {
    StoreConfig {
        segment_size: 1024,
        compact_ratio,
        // Exercise compaction from the first sealed segment on (the default waits for more).
        compact_min_segments: 0,
        idle_tick: Duration::from_millis(1),
        // Crashes then hit preallocated and recycled segment files too.
        preallocate: true,
        ..StoreConfig::default()
    }
}

struct Run {
    config: StoreConfig,
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
                    m.remove((queue, *id));
                }
                self.append(Command::Settle { queue, ids }, m);
            }
            Op::DeadLetter { pick, targets } => {
                let all = self.current().members();
                if all.is_empty() {
                    return Ok(());
                }
                let source = *pick.get(&all);
                m.remove(source);
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
            Op::Counts { pick, count } => {
                let all = self.current().members();
                if all.is_empty() {
                    return Ok(());
                }
                let Some(first) = pick.first().map(|p| *p.get(&all)) else {
                    return Ok(());
                };
                let queue = first.0;
                let in_queue: Vec<(u64, u64)> =
                    all.iter().copied().filter(|m| m.0 == queue).collect();
                // Each picked member gets a different count (`count`, `count + 1`, ...); a
                // member picked twice keeps its last.
                let counts: Vec<(u64, u32)> = pick
                    .iter()
                    .enumerate()
                    .map(|(i, p)| (p.get(&in_queue).1, *count + i as u32))
                    .collect();
                for (id, c) in &counts {
                    if let Some(e) = m.queues.get_mut(&queue).and_then(|q| q.get_mut(id)) {
                        e.1 = *c;
                    }
                }
                self.append(Command::DeliveryCounts { queue, counts }, m);
            }
            Op::Park { pick, due, attempt } => {
                let all = self.current().members();
                if all.is_empty() {
                    return Ok(());
                }
                let member = *pick.get(&all);
                m.parks.insert(member, (*due, *attempt));
                self.append(
                    Command::Park {
                        member,
                        due_ms: *due,
                        attempt: *attempt,
                    },
                    m,
                );
            }
            Op::Route { pick, targets } => {
                let all = self.current().members();
                if all.is_empty() {
                    return Ok(());
                }
                let source = *pick.get(&all);
                let Some((body, _)) = m.remove(source) else {
                    return Ok(());
                };
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
                    Command::Route {
                        source,
                        targets: members,
                    },
                    m,
                );
            }
            Op::Purge { queue } => {
                m.queues.remove(queue);
                m.parks.retain(|(q, _), _| q != queue);
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
                let (store, rec) = open(&self.mem, self.config.clone());
                self.durable_index = self.max_index;
                prop_assert!(rec.last_index >= self.durable_index);
                let got = full(&store, &rec);
                self.store = Some(store);
                prop_assert_eq!(&got, &self.current().full(), "after clean restart");
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
                let (store, rec) = open(&crashed, self.config.clone());
                prop_assert!(rec.last_index >= self.durable_index, "durable index lost");
                // Indexes above the recovered ones were never durable.
                self.max_index = rec.last_index;
                let got = full(&store, &rec);
                let matched = self.states.iter().position(|s| s.full() == got);
                prop_assert!(
                    matched.is_some(),
                    "recovered state is no prefix of the appended commands\n got: {:?}\n synced: {:?}\n all: {:?}",
                    got,
                    self.states.first().map(Model::full),
                    self.current().full()
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

fn run_model(ops: &[Op], config: StoreConfig) -> Result<(), TestCaseError> {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config.clone());
    let mut run = Run {
        config,
        mem,
        store: Some(store),
        states: vec![Model::default()],
        next_id: 0,
        max_index: 0,
        durable_index: 0,
    };
    for op in ops {
        run.step(op)?;
    }
    if std::env::var_os("MODEL_STATS").is_some() {
        eprintln!("{:?}", run.store().stats());
    }
    // Finally: a clean restart sees exactly the model.
    run.step(&Op::Restart)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model(ops in prop::collection::vec(op(false), 1..80)) {
        run_model(&ops, config())?;
    }

    /// Park and Route records too (crash/recovery invariants, park states after restart),
    /// with reclamation but no compaction.
    #[test]
    fn store_with_parks_and_routes_matches_model(ops in prop::collection::vec(op(true), 1..80)) {
        run_model(&ops, with_compaction(0.0))?;
    }

    /// The same under constant compaction: a Carry written after a member's Park record must
    /// not lose its park state on replay (found by this model; compaction re-writes it).
    #[test]
    fn store_with_parks_and_routes_matches_model_under_compaction(
        ops in prop::collection::vec(op(true), 1..80)
    ) {
        run_model(&ops, config())?;
    }
}
