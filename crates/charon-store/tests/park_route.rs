//! Format v2 commands: `Park` (a member's due time and retry attempt, no body copy) and `Route`
//! (a member's message moved to other members atomically) — recovery, settlement, compaction.

mod common;

use charon_store::{Command, MemStorage};
use common::{config, contents, msg, open};

fn parked(rec: &charon_store::Recovered, q: u64) -> Vec<(u64, Option<(u64, u32)>)> {
    rec.queues
        .get(&q)
        .map(|v| v.iter().map(|e| (e.id, e.parked)).collect())
        .unwrap_or_default()
}

#[test]
fn park_survives_recovery_replaces_the_previous_one_and_goes_with_the_member() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    for (body, id) in [(&b"a"[..], 1u64), (b"b", 2), (b"c", 3)] {
        store
            .append_nowait(Command::Publish {
                message: msg(body),
                members: vec![(7, id)],
            })
            .expect("publish");
    }
    let park = |id, due, attempt| Command::Park {
        member: (7, id),
        due_ms: due,
        attempt,
    };
    store.append_nowait(park(1, 1000, 1)).expect("park");
    store.append_nowait(park(1, 5000, 2)).expect("park again");
    store.append_nowait(park(2, 2000, 1)).expect("park");
    store
        .append_nowait(Command::Settle {
            queue: 7,
            ids: vec![2],
        })
        .expect("settle");
    // A Park of a member that does not exist is a no-op.
    store.append_nowait(park(99, 1, 1)).expect("park nothing");
    let (_, c) = store.append(park(3, 0, 0)).expect("append");
    c.wait().expect("commit");
    drop(store);
    let (store, rec) = open(&mem, config());
    assert_eq!(
        parked(&rec, 7),
        vec![(1, Some((5000, 2))), (3, Some((0, 0)))]
    );
    assert_eq!(
        contents(&store, &rec),
        vec![(7, vec![(1, b"a".to_vec()), (3, b"c".to_vec())])]
    );
}

#[test]
fn route_moves_a_member_atomically_without_copying_the_body() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    let (a, _) = store
        .append(Command::Publish {
            message: msg(b"delayed"),
            members: vec![(100, 1)],
        })
        .expect("publish");
    let (r, c) = store
        .append(Command::Route {
            source: (100, 1),
            targets: vec![(1, 10), (2, 20)],
        })
        .expect("route");
    c.wait().expect("commit");
    assert!(r.body.is_none());
    // Routing a member that is gone does nothing (never twice).
    store
        .append_nowait(Command::Route {
            source: (100, 1),
            targets: vec![(3, 30)],
        })
        .expect("route again");
    let (_, c) = store.sync().map(|c| ((), c)).expect("sync");
    c.wait().expect("commit");
    drop(store);
    let (store, rec) = open(&mem, config());
    assert_eq!(
        contents(&store, &rec),
        vec![
            (1, vec![(10, b"delayed".to_vec())]),
            (2, vec![(20, b"delayed".to_vec())])
        ]
    );
    let e = rec.queues.get(&1).and_then(|v| v.first()).expect("member");
    assert_eq!(Some(e.msg), a.body.map(|b| b.msg));
}

#[test]
fn compaction_keeps_park_states_and_routed_members() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    store
        .append_nowait(Command::Publish {
            message: msg(&[b'p'; 100]),
            members: vec![(1, 1)],
        })
        .expect("publish");
    store
        .append_nowait(Command::Publish {
            message: msg(&[b'r'; 100]),
            members: vec![(100, 1)],
        })
        .expect("publish");
    store
        .append_nowait(Command::Park {
            member: (1, 1),
            due_ms: 42,
            attempt: 3,
        })
        .expect("park");
    store
        .append_nowait(Command::Route {
            source: (100, 1),
            targets: vec![(2, 1)],
        })
        .expect("route");
    // Lots of short-lived traffic so the first segments become sparse and get compacted.
    for i in 0..2000u64 {
        common::publish_settled(&store, 9, i, &[b'x'; 200]);
    }
    let (_, c) = store.sync().map(|c| ((), c)).expect("sync");
    c.wait().expect("commit");
    // Give the writer's maintenance a moment to compact and delete (it runs on idle ticks).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while store.stats().segments_deleted < 50 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(store.stats().records_carried > 0, "nothing was compacted");
    drop(store);
    let (store, rec) = open(&mem, config());
    assert_eq!(parked(&rec, 1), vec![(1, Some((42, 3)))]);
    assert_eq!(
        contents(&store, &rec),
        vec![
            (1, vec![(1, vec![b'p'; 100])]),
            (2, vec![(1, vec![b'r'; 100])])
        ]
    );
}
