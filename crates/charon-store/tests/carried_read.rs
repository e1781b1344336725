//! Compaction runs on its own thread, and a read of a message whose compaction copy is not
//! written yet is served from where the message was, at once: the queue delivering it never
//! waits for the writer (it used to sleep in 1 ms steps until the copy was written, blocking the
//! queue's worker thread for as long as the writer took: here, as long as the writer is held).

mod common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use charon_store::{Command, MemStorage, Store};
use common::gated::{Gated, set_gate, wait_held};
use common::{config, contents, msg, open};

#[test]
fn a_carried_body_not_written_yet_is_read_from_its_old_place_without_waiting() {
    let gate = Arc::new((Mutex::new((false, false)), Condvar::new()));
    let mem = MemStorage::new();
    let storage = Gated {
        mem: mem.clone(),
        gate: gate.clone(),
    };
    let (store, _) = Store::open(Arc::new(storage), config()).expect("open");
    // The long-lived message, then fillers of another queue in the same segment.
    let kept = vec![42u8; 300];
    let m = store
        .append_nowait(Command::Publish {
            message: msg(&kept),
            members: vec![(1, 0)],
        })
        .expect("append");
    let m_at = m.body.expect("body");
    let mut id = 0;
    loop {
        id += 1;
        let a = store
            .append_nowait(Command::Publish {
                message: msg(&[1u8; 300]),
                members: vec![(2, id)],
            })
            .expect("append");
        if a.body.expect("body").segment != m_at.segment {
            break;
        }
    }
    store.sync().expect("sync").wait().expect("durable");
    // Nothing to compact yet (every record of the first segment is live).
    assert_eq!(store.stats().records_carried, 0);

    // Hold the writer at the creation of the next segment.
    set_gate(&gate, true);
    let held_seg = loop {
        id += 1;
        let a = store
            .append_nowait(Command::Publish {
                message: msg(&[2u8; 300]),
                members: vec![(2, id)],
            })
            .expect("append");
        let seg = a.body.expect("body").segment;
        if seg > m_at.segment + 1 {
            break seg;
        }
    };
    assert!(wait_held(&gate), "the writer never reached the new segment");
    // Now the first segment becomes sparse: the compaction thread carries the message forward
    // while the writer is held (compaction no longer runs on the writer).
    store
        .append_nowait(Command::Settle {
            queue: 2,
            ids: (1..=id).collect(),
        })
        .expect("settle");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while store.stats().records_carried == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let carried = store.stats().records_carried;
    let current = store.current_body(m_at.msg);
    if carried == 0 || current.is_none_or(|c| c.segment < held_seg) {
        set_gate(&gate, false);
    }
    assert!(
        carried > 0,
        "compaction did not run while the writer was held"
    );
    let current = current.expect("the message is live");
    assert!(
        current.segment >= held_seg,
        "copied into the held segment: {current:?}"
    );

    // The writer is still held, so the copy is not written: a read that waited for it would fail
    // (after its retries); it is served from the old place.
    let read = store.read_body(&current);
    let still_held = gate.0.lock().unwrap_or_else(|e| e.into_inner()).0;
    // Let the writer go before asserting (a failing test must not hang in the store's drop).
    set_gate(&gate, false);
    assert!(still_held);
    assert_eq!(read.expect("body read back").as_ref(), &kept[..]);

    store.sync().expect("sync").wait().expect("durable");
    let now = store.current_body(m_at.msg).expect("live");
    assert_eq!(store.read_body(&now).expect("body").as_ref(), &kept[..]);
    drop(store);
    let (store, rec) = open(&mem.crash(), config());
    assert_eq!(contents(&store, &rec), vec![(1, vec![(0, kept)])]);
}
