//! Real kill -9 with deferred publishes (issue 13 b): a child process (this test binary in child
//! mode) publishes with `Store::publish_nowait`, as the broker does, and settles every second
//! message at once — mostly before the writer takes its batch, so the publish is cancelled and
//! never written — and every third one later, after its publish is durable. After each barrier
//! (`Store::sync`) it prints what is confirmed (the durable watch reached its index: durable or
//! cancelled) and what is acked. The parent SIGKILLs it mid-stream, recovers the directory and
//! checks: every confirmed message not acked is there with its body; no acked one is back,
//! whether its publish was written and settled or cancelled. Several rounds on one directory,
//! 256 KiB segments (rollover, deletion, compaction while being killed).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command as Process, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use charon_store::{Command, MessageRef, Store, StoreConfig};

const CHILD_DIR: &str = "CHARON_STORE_KILL9D_DIR";
const CHILD_ROUND: &str = "CHARON_STORE_KILL9D_ROUND";
const QUEUES: u64 = 2;

fn config() -> StoreConfig {
    StoreConfig {
        segment_size: 256 << 10,
        idle_tick: Duration::from_millis(2),
        ..StoreConfig::default()
    }
}

fn body(n: u64) -> Vec<u8> {
    vec![(n % 251) as u8; 16 + (n % 300) as usize]
}

/// Child mode: does nothing unless started by the parent below.
#[test]
fn kill9_deferred_child() {
    let (Some(dir), Some(round)) = (std::env::var_os(CHILD_DIR), std::env::var_os(CHILD_ROUND))
    else {
        return;
    };
    let round: u64 = round.to_string_lossy().parse().expect("round");
    let (store, _) = Store::open_dir(&dir, config()).expect("open");
    let store = Arc::new(store);
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let say = |out: &Mutex<std::io::Stdout>, line: String| {
        let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    };
    say(&out, "READY".into());
    let threads: Vec<_> = (0..QUEUES)
        .map(|q| {
            let (store, out) = (store.clone(), out.clone());
            std::thread::spawn(move || {
                let watch = store.durable_watch();
                // (id, index, acked) since the last barrier; ids to settle after it.
                let mut since: Vec<(u64, u64, bool)> = Vec::new();
                let mut later: Vec<u64> = Vec::new();
                for n in 0.. {
                    let id = round * 1_000_000_000 + n;
                    let b = body(id);
                    let m = MessageRef {
                        exchange: b"x",
                        routing_key: b"k",
                        properties: &[0x10, 0x00, 2],
                        body: &b,
                        enqueue_ms: id,
                        expiry_ms: None,
                    };
                    let index = store.publish_nowait(m, &[(q, id)]).expect("publish");
                    let acked = n % 2 == 0;
                    if acked {
                        // Acked at once: before its batch is taken, most of the time.
                        store
                            .append_nowait(Command::Settle {
                                queue: q,
                                ids: vec![id],
                            })
                            .expect("settle");
                    } else if n % 3 == 0 {
                        later.push(id);
                    }
                    since.push((id, index.index, acked));
                    if since.len() >= 32 {
                        store.sync().expect("sync").wait().expect("durable");
                        for (id, index, acked) in since.drain(..) {
                            assert!(watch.is_durable(index), "{index} not confirmed");
                            say(&out, format!("{} {q} {id}", if acked { "A" } else { "C" }));
                        }
                        // Acked after their confirm: their publishes are written, the settle
                        // goes with the next barrier.
                        if !later.is_empty() {
                            let ids = std::mem::take(&mut later);
                            // Announced first: killed before the settle is reported, it may
                            // or may not be durable.
                            for id in &ids {
                                say(&out, format!("S {q} {id}"));
                            }
                            store
                                .append(Command::Settle {
                                    queue: q,
                                    ids: ids.clone(),
                                })
                                .expect("settle")
                                .1
                                .wait()
                                .expect("durable");
                            for id in ids {
                                say(&out, format!("A {q} {id}"));
                            }
                        }
                        say(&out, format!("X {}", store.stats().cancelled));
                    }
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

/// What the child reported.
#[derive(Default)]
struct Seen {
    /// Confirmed (`C`).
    confirmed: BTreeSet<(u64, u64)>,
    /// Acked, the ack durable (`A`).
    acked: BTreeSet<(u64, u64)>,
    /// A settle about to be appended (`S`): may be durable or not.
    settling: BTreeSet<(u64, u64)>,
    /// Publishes cancelled so far (`X`).
    cancelled: u64,
}

/// One line of the child's; 1 for a confirmation.
fn record(line: &str, seen: &mut Seen) -> usize {
    let parts: Vec<&str> = line.split_whitespace().collect();
    let num = |i: usize| parts.get(i).and_then(|s| s.parse::<u64>().ok());
    match (parts.first().copied(), num(1), num(2)) {
        (Some("C"), Some(q), Some(id)) => {
            seen.confirmed.insert((q, id));
            1
        }
        (Some("A"), Some(q), Some(id)) => {
            seen.acked.insert((q, id));
            0
        }
        (Some("S"), Some(q), Some(id)) => {
            seen.settling.insert((q, id));
            0
        }
        (Some("X"), Some(n), _) => {
            seen.cancelled = seen.cancelled.max(n);
            0
        }
        _ => 0,
    }
}

#[test]
fn deferred_publishes_survive_kill_9_and_cancelled_ones_never_come_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("exe");
    let mut seen = Seen::default();
    let mut cancelled_total = 0;
    for round in 1..=5u64 {
        let mut child = Process::new(&exe)
            .args([
                "kill9_deferred_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
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
        seen.cancelled = 0;
        let target = 400 * round as usize;
        while confirms < target && start.elapsed() < Duration::from_secs(30) {
            let Some(Ok(line)) = lines.next() else { break };
            confirms += record(&line, &mut seen);
        }
        child.kill().expect("kill -9");
        let _ = child.wait();
        for line in lines.map_while(Result::ok) {
            record(&line, &mut seen);
        }
        assert!(confirms > 0, "round {round}: child confirmed nothing");
        cancelled_total += seen.cancelled;

        let (store, rec) = Store::open_dir(dir.path(), config()).expect("recover");
        let present: BTreeSet<(u64, u64)> = rec
            .queues
            .iter()
            .flat_map(|(q, v)| v.iter().map(move |e| (*q, e.id)))
            .collect();
        let lost: Vec<_> = seen
            .confirmed
            .difference(&seen.acked)
            .filter(|m| !seen.settling.contains(m) && !present.contains(m))
            .collect();
        assert!(
            lost.is_empty(),
            "round {round}: confirmed but lost: {:?}",
            lost.first()
        );
        let back: Vec<_> = seen.acked.intersection(&present).collect();
        assert!(
            back.is_empty(),
            "round {round}: acked but back: {:?}",
            back.first()
        );
        let mut reader = store.meta_reader();
        for (q, v) in &rec.queues {
            for e in v.iter().take(100) {
                let m = reader.read(e.msg).expect("metadata");
                let b = store.read_body(&m.body).expect("body");
                assert_eq!(b.as_ref(), &body(e.id)[..], "queue {q} id {}", e.id);
            }
        }
    }
    // The cancellation path ran while being killed (most acks at once cancel their publish).
    assert!(cancelled_total > 0, "no publish was cancelled");
}
