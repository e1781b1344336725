//! Real kill -9: a child process (this test binary, re-run in child mode)
//! publishes and settles through waiting appends on the real file system
//! and prints every confirmation; the parent SIGKILLs it mid-stream,
//! recovers the directory and checks that every confirmed publish is there
//! and every confirmed settle is gone. Several rounds on the same
//! directory, with 256 KiB segments so rollover, deletion and compaction
//! happen while the child is being killed.
//!
//! A SIGKILL keeps the page cache, so this checks the store's own logic
//! (partial batches, reclamation mid-flight, recovery of a live process's
//! files), not the disk; power cuts are `MemStorage`'s job (`model.rs`).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command as Process, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use charon_store::{Command, NewMessage, Store, StoreConfig};

const CHILD_DIR: &str = "CHARON_STORE_KILL9_DIR";
const CHILD_ROUND: &str = "CHARON_STORE_KILL9_ROUND";
const QUEUES: u64 = 4;

fn config() -> StoreConfig {
    StoreConfig {
        segment_size: 256 << 10,
        idle_tick: Duration::from_millis(2),
        ..StoreConfig::default()
    }
}

fn message(n: u64) -> NewMessage {
    NewMessage {
        exchange: Bytes::from_static(b"x"),
        routing_key: Bytes::from_static(b"k"),
        properties: Bytes::from_static(&[0x10, 0x00, 2]),
        body: Bytes::from(vec![(n % 251) as u8; 300 + (n % 700) as usize]),
        enqueue_ms: n,
        expiry_ms: None,
    }
}

/// Child mode: does nothing unless started by the parent below.
#[test]
fn kill9_child() {
    let (Some(dir), Some(round)) = (std::env::var_os(CHILD_DIR), std::env::var_os(CHILD_ROUND))
    else {
        return;
    };
    let round: u64 = round.to_string_lossy().parse().expect("round");
    let (store, rec) = Store::open_dir(&dir, config()).expect("open");
    let store = Arc::new(store);
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let say = |out: &Mutex<std::io::Stdout>, line: String| {
        let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    };
    // Settle every second recovered message, one waiting append per queue.
    for (q, entries) in &rec.queues {
        let ids: Vec<u64> = entries.iter().map(|e| e.id).step_by(2).collect();
        if ids.is_empty() {
            continue;
        }
        let (_, c) = store
            .append(Command::Settle {
                queue: *q,
                ids: ids.clone(),
            })
            .expect("settle");
        c.wait().expect("durable");
        for id in ids {
            say(&out, format!("S {q} {id}"));
        }
    }
    say(&out, "READY".into());
    let threads: Vec<_> = (0..QUEUES)
        .map(|q| {
            let (store, out) = (store.clone(), out.clone());
            std::thread::spawn(move || {
                let mut pending = std::collections::VecDeque::new();
                for n in 0.. {
                    let id = round * 1_000_000_000 + n;
                    let (_, c) = store
                        .append(Command::Publish {
                            message: message(id),
                            members: vec![(q, id)],
                        })
                        .expect("append");
                    pending.push_back((id, c));
                    if pending.len() >= 16
                        && let Some((id, c)) = pending.pop_front()
                    {
                        c.wait().expect("durable");
                        say(&out, format!("C {q} {id}"));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

#[test]
fn confirmed_writes_survive_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("exe");
    let mut confirmed: BTreeSet<(u64, u64)> = BTreeSet::new();
    let mut settled: BTreeSet<(u64, u64)> = BTreeSet::new();
    for round in 1..=5u64 {
        let mut child = Process::new(&exe)
            .args(["kill9_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir.path())
            .env(CHILD_ROUND, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let start = Instant::now();
        let mut confirms = 0;
        // Kill after a round-dependent number of confirmations.
        let target = 500 * round;
        while confirms < target && start.elapsed() < Duration::from_secs(20) {
            let Some(Ok(line)) = lines.next() else { break };
            confirms += record(&line, &mut confirmed, &mut settled);
        }
        child.kill().expect("kill -9");
        let _ = child.wait();
        // What the child printed before it died was confirmed before it died.
        for line in lines.map_while(Result::ok) {
            record(&line, &mut confirmed, &mut settled);
        }
        assert!(confirms > 0, "round {round}: child confirmed nothing");

        let (store, rec) = Store::open_dir(dir.path(), config()).expect("recover");
        let present: BTreeSet<(u64, u64)> = rec
            .queues
            .iter()
            .flat_map(|(q, v)| v.iter().map(move |e| (*q, e.id)))
            .collect();
        let lost: Vec<_> = confirmed
            .difference(&settled)
            .filter(|m| !present.contains(m))
            .collect();
        assert!(
            lost.is_empty(),
            "round {round}: confirmed but lost: {:?}",
            lost.first()
        );
        let back: Vec<_> = settled.intersection(&present).collect();
        assert!(
            back.is_empty(),
            "round {round}: settled but back: {:?}",
            back.first()
        );
        // Bodies read back intact (CRC-checked at recovery, compared here).
        let mut reader = store.meta_reader();
        for (q, v) in &rec.queues {
            for e in v.iter().take(50) {
                let m = reader.read(e.msg).expect("metadata");
                let body = store.read_body(&m.body).expect("body");
                assert_eq!(body, message(e.id).body, "queue {q} id {}", e.id);
            }
        }
    }
    // The rounds rolled over and reclaimed segments while being killed.
    let (files, max_id) = segments(dir.path());
    assert!(
        max_id > 10 && (files as u64) < max_id,
        "{files} files, max id {max_id}"
    );
}

/// Segment files on disk and the largest segment id.
fn segments(dir: &std::path::Path) -> (usize, u64) {
    let ids: Vec<u64> = std::fs::read_dir(dir)
        .expect("read dir")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            u64::from_str_radix(name.strip_suffix(".wal")?, 16).ok()
        })
        .collect();
    (ids.len(), ids.iter().copied().max().unwrap_or(0))
}

/// Parse one child line; returns 1 for a publish confirmation.
fn record(
    line: &str,
    confirmed: &mut BTreeSet<(u64, u64)>,
    settled: &mut BTreeSet<(u64, u64)>,
) -> u64 {
    // The harness may print "test kill9_child ... " on the same line, so
    // take the last three words.
    let mut it = line.split_whitespace().rev();
    let (Some(id), Some(q), Some(tag)) = (it.next(), it.next(), it.next()) else {
        return 0;
    };
    let (Ok(q), Ok(id)) = (q.parse(), id.parse()) else {
        return 0;
    };
    match tag {
        "C" => {
            confirmed.insert((q, id));
            1
        }
        "S" => {
            settled.insert((q, id));
            0
        }
        _ => 0,
    }
}
