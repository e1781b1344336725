//! A live message whose record lies in a segment the writer has not created yet (a copy
//! compaction just made, or any record that opened a new segment, while the writer is still
//! busy with the previous batch) is read back once it is written, never reported missing.
//!
//! Regression: `Store::read_body` looked the segment's file up before checking the record was
//! written, and a segment without a file yet read as "message not found": in scenario f of
//! amqp-load a block of ~2,900 confirmed messages carried forward by compaction into a new
//! segment was delivered without bodies.

mod common;

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use charon_store::{Command, MemStorage, Store};
use common::gated::{Gated, set_gate, wait_held};
use common::{config, msg};

#[test]
fn a_body_in_a_segment_not_created_yet_is_read_once_written() {
    let gate = Arc::new((Mutex::new((false, false)), Condvar::new()));
    let storage = Gated {
        mem: MemStorage::new(),
        gate: gate.clone(),
    };
    let (store, _) = Store::open(Arc::new(storage), config()).expect("open");
    let body0 = vec![7u8; 300];
    let first = store
        .append_nowait(Command::Publish {
            message: msg(&body0),
            members: vec![(1, 0)],
        })
        .expect("append");
    store.sync().expect("sync").wait().expect("durable");
    let first_seg = first.body.expect("body").segment;

    // Hold the writer at the next segment's creation, then append until a record opens it.
    set_gate(&gate, true);
    let mut qid = 1;
    let next = loop {
        let body = vec![(qid % 251) as u8; 300];
        let a = store
            .append_nowait(Command::Publish {
                message: msg(&body),
                members: vec![(1, qid)],
            })
            .expect("append");
        let at = a.body.expect("body");
        qid += 1;
        if at.segment != first_seg {
            break (at, body);
        }
    };
    assert!(wait_held(&gate), "the writer never reached the new segment");

    // Open the gate later, from another thread: the read must wait for the write, not fail.
    let opener = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(1000));
            set_gate(&gate, false);
        })
    };
    let (at, body) = next;
    let current = store.current_body(at.msg).expect("the message is live");
    assert_eq!(current.segment, at.segment);
    let read = store.read_body(&current);
    opener.join().expect("opener");
    assert_eq!(read.expect("body read back").as_ref(), &body[..]);
    // And the first message, in the older segment, as ever.
    let b0 = store
        .read_body(&first.body.expect("body"))
        .expect("first body");
    assert_eq!(b0.as_ref(), &body0[..]);
}
