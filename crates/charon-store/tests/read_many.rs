//! `Store::read_bodies`: many bodies read back at once (runs of neighbouring records in one
//! read each) are exactly what `read_body` gives one by one, in the order asked, across
//! segments, with settled (gone) messages as `None`, before and after a restart.

mod common;

use charon_store::{Command, MemStorage};
use common::{config, msg, open};

#[test]
fn bodies_read_together_are_the_bodies_read_alone() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    let mut ids = Vec::new();
    for i in 0..200u64 {
        // Sizes vary so that bodies straddle segments (4 KiB) and runs break on gaps.
        let body = vec![(i % 251) as u8; 20 + (i as usize * 37) % 900];
        let a = store
            .append_nowait(Command::Publish {
                message: msg(&body),
                members: vec![(1, i)],
            })
            .expect("append");
        ids.push((a.index, body));
    }
    // Some are settled: the store no longer has them.
    store
        .append_nowait(Command::Settle {
            queue: 1,
            ids: (0..200).filter(|i| i % 7 == 3).collect(),
        })
        .expect("settle");
    store.sync().expect("sync").wait().expect("durable");

    let check = |store: &charon_store::Store| {
        // Asked out of order, with an id that never existed.
        let mut order: Vec<usize> = (0..200).rev().step_by(3).collect();
        order.extend((0..200).step_by(3));
        let mut asked: Vec<u64> = order.iter().map(|&k| ids[k].0).collect();
        asked.push(999_999);
        let got = store.read_bodies(&asked);
        assert_eq!(got.len(), asked.len());
        for (n, &k) in order.iter().enumerate() {
            let want = (k % 7 != 3).then(|| ids[k].1.clone());
            assert_eq!(got[n].as_deref().map(<[u8]>::to_vec), want, "message {k}");
            if let Some(at) = store.current_body(ids[k].0) {
                let alone = store.read_body(&at).expect("alone");
                assert_eq!(got[n].as_deref(), Some(alone.as_ref()));
            }
        }
        assert_eq!(got.last(), Some(&None));
    };
    check(&store);
    drop(store);
    let (store, _) = open(&mem.crash(), config());
    check(&store);
}

/// Runs read one after another through the thread's kept buffer (shorter after longer, and a
/// body larger than a run, read into a buffer of its own) give each message its own bytes.
#[test]
fn runs_of_any_size_read_after_one_another_are_exact() {
    let mem = MemStorage::new();
    let cfg = charon_store::StoreConfig {
        segment_size: 8 << 20,
        ..config()
    };
    let (store, _) = open(&mem, cfg.clone());
    let sizes = [900_000usize, 10, 1_500_000, 300, 5, 700_000, 2_100_000, 64];
    let ids: Vec<(u64, Vec<u8>)> = sizes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let body: Vec<u8> = (0..*n).map(|j| (j * 7 + i * 13) as u8).collect();
            let a = store
                .append_nowait(Command::Publish {
                    message: msg(&body),
                    members: vec![(1, i as u64)],
                })
                .expect("append");
            (a.index, body)
        })
        .collect();
    store.sync().expect("sync").wait().expect("durable");
    // All at once, then one by one (longest first), twice: every buffer state is met.
    for _ in 0..2 {
        let all: Vec<u64> = ids.iter().map(|(id, _)| *id).collect();
        let got = store.read_bodies(&all);
        for ((_, want), got) in ids.iter().zip(&got) {
            assert_eq!(got.as_deref(), Some(want.as_slice()));
        }
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|k| std::cmp::Reverse(ids[*k].1.len()));
        for k in order {
            let got = store.read_bodies(&[ids[k].0]);
            assert_eq!(got[0].as_deref(), Some(ids[k].1.as_slice()), "message {k}");
        }
    }
}

/// `read_member_bodies`: members (queue, queue-local id) give their message's id and body in
/// the order asked; a message in two queues is found through either; settled members,
/// unknown queues and unknown ids give `None`; the same after a restart.
#[test]
fn members_read_together_give_their_message_and_body() {
    let mem = MemStorage::new();
    let (store, _) = open(&mem, config());
    let mut msgs = Vec::new();
    for i in 0..120u64 {
        let body = vec![(i % 249) as u8; 30 + (i as usize * 53) % 700];
        // Every third message is in queue 2 as well (queue-local id i + 1000).
        let mut members = vec![(1, i)];
        if i % 3 == 0 {
            members.push((2, i + 1000));
        }
        let a = store
            .append_nowait(Command::Publish {
                message: msg(&body),
                members,
            })
            .expect("append");
        msgs.push((a.index, body));
    }
    store
        .append_nowait(Command::Settle {
            queue: 1,
            ids: (0..120).filter(|i| i % 5 == 1).collect(),
        })
        .expect("settle");
    store.sync().expect("sync").wait().expect("durable");

    let check = |store: &charon_store::Store| {
        let mut asked: Vec<(u64, u64)> = (0..120u64).rev().map(|i| (1, i)).collect();
        asked.extend((0..120u64).step_by(3).map(|i| (2, i + 1000)));
        asked.extend([(1, 5000), (9, 0), (2, 1)]);
        let got = store.read_member_bodies(&asked);
        assert_eq!(got.len(), asked.len());
        for (&(q, qid), got) in asked.iter().zip(&got) {
            let i = if q == 2 { qid.wrapping_sub(1000) } else { qid };
            let want = match q {
                1 if i < 120 && i % 5 != 1 => Some(&msgs[i as usize]),
                2 if i < 120 && i % 3 == 0 => Some(&msgs[i as usize]),
                _ => None,
            };
            let got = got.as_ref().map(|(m, b)| (*m, b.to_vec()));
            assert_eq!(
                got,
                want.map(|(m, b)| (*m, b.clone())),
                "member ({q}, {qid})"
            );
        }
    };
    check(&store);
    drop(store);
    let (store, _) = open(&mem.crash(), config());
    check(&store);
}
