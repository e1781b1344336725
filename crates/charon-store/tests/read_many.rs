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
