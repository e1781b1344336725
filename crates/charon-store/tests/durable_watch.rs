//! Waiting by log index (`Store::durable_watch`): an `append_nowait` whose index the watch
//! reports reached is on disk (it survives a power cut that keeps only synced bytes), and a
//! store that fails its sync reports the failure instead of ever reaching the index.

mod common;

use charon_store::{Command, CommitError};
use common::{config, contents, msg, open};

#[tokio::test(flavor = "current_thread")]
async fn a_reached_index_survives_a_power_cut() {
    let mem = charon_store::MemStorage::new();
    let (store, _) = open(&mem, config());
    let mut watch = store.durable_watch();
    let mut last = 0;
    for i in 0..50u64 {
        let a = store
            .append_nowait(Command::Publish {
                message: msg(&[i as u8; 100]),
                members: vec![(1, i)],
            })
            .expect("append");
        last = a.index;
    }
    watch.reached(last).await.expect("durable");
    assert!(watch.is_durable(last));
    // Nothing unsynced survives the cut: all 50 are there because they were synced.
    let crashed = mem.crash();
    drop(store);
    let (store, rec) = open(&crashed, config());
    let got = contents(&store, &rec);
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].1.iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        (0..50).collect::<Vec<_>>()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_sync_is_reported_not_reached() {
    let mem = charon_store::MemStorage::new();
    let (store, _) = open(&mem, config());
    mem.fail_syncs_after(0);
    let mut watch = store.durable_watch();
    let a = store
        .append_nowait(Command::Publish {
            message: msg(b"x"),
            members: vec![(1, 1)],
        })
        .expect("append");
    assert!(matches!(
        watch.reached(a.index).await,
        Err(CommitError::Poisoned(_))
    ));
    assert!(!watch.is_durable(a.index));
}
