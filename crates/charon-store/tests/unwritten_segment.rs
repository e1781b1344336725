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

use charon_store::{Command, MemStorage, Storage, StorageFile, Store};
use common::{config, msg};

/// A `MemStorage` whose file creations (and spare renames) wait while the gate is closed, so
/// the writer can be held with a new segment pending.
#[derive(Debug)]
struct Gated {
    mem: MemStorage,
    /// (closed, a creation is waiting)
    gate: Arc<(Mutex<(bool, bool)>, Condvar)>,
}

impl Gated {
    fn pass(&self) {
        let (m, cv) = &*self.gate;
        let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
        while g.0 {
            g.1 = true;
            cv.notify_all();
            g = cv.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl Storage for Gated {
    fn list(&self) -> std::io::Result<Vec<String>> {
        self.mem.list()
    }
    fn create(&self, name: &str) -> std::io::Result<Arc<dyn StorageFile>> {
        self.pass();
        self.mem.create(name)
    }
    fn open(&self, name: &str) -> std::io::Result<Arc<dyn StorageFile>> {
        self.mem.open(name)
    }
    fn remove(&self, name: &str) -> std::io::Result<()> {
        self.mem.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        self.pass();
        self.mem.rename(from, to)
    }
    fn sync_dir(&self) -> std::io::Result<()> {
        self.mem.sync_dir()
    }
    fn free_bytes(&self) -> std::io::Result<u64> {
        self.mem.free_bytes()
    }
}

fn set_gate(gate: &(Mutex<(bool, bool)>, Condvar), closed: bool) {
    let mut g = gate.0.lock().unwrap_or_else(|e| e.into_inner());
    g.0 = closed;
    gate.1.notify_all();
}

/// Waits (bounded generously) until the writer is held at the gate.
fn wait_held(gate: &(Mutex<(bool, bool)>, Condvar)) -> bool {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut g = gate.0.lock().unwrap_or_else(|e| e.into_inner());
    while !g.1 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        g = gate
            .1
            .wait_timeout(g, left)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
    true
}

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
