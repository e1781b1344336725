//! The floor under amqp-load's fixed-rate latency (`--scenario a --rate R`) on this machine: what a
//! tokio process that only relays bytes achieves, measured with a client paced exactly like
//! amqp-load's publisher.
//!
//! `latency-floor relay PORT HOPS` accepts a publisher connection, then a consumer connection,
//! and copies the publisher's bytes to the consumer: read on one task, then HOPS tasks joined by
//! unbounded channels (0: the reading task writes itself; 2: as a broker's connection → queue →
//! connection), the last writing to the consumer's socket. One thread (`current_thread`), as
//! Charon on two cores; TCP_NODELAY on both sockets.
//!
//! `latency-floor client PORT RATE SECONDS` runs on one thread (`current_thread`, as amqp-load):
//! a publisher task that sleeps only when the next message is due more than 1 ms ahead (as
//! amqp-load) and hands each 16-byte message (sequence, send time) to a writer task that writes it
//! on its own (as amqprs); a reader task that records each message's latency. Prints p50, p90,
//! p99, p99.9 and max in ms.
//!
//! `latency-floor amqp PORT` is an AMQP 0-9-1 server that only frames (see `amqp.rs`): amqp-load
//! runs against it unchanged, so its figures are the floor under amqp-load's own client.
mod amqp;

use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    match arg(1) {
        "relay" => rt.block_on(relay(
            arg(2).parse().expect("port"),
            arg(3).parse().unwrap_or(0),
        )),
        "client" => rt.block_on(client(
            arg(2).parse().expect("port"),
            arg(3).parse().expect("rate"),
            arg(4).parse().expect("seconds"),
        )),
        "amqp" => rt.block_on(amqp::serve(arg(2).parse().expect("port"))),
        _ => {
            eprintln!("usage: latency-floor relay PORT HOPS | client PORT RATE SECONDS | amqp PORT")
        }
    }
}

async fn relay(port: u16, hops: usize) {
    let l = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    loop {
        let (mut p, _) = l.accept().await.expect("accept");
        let (c, _) = l.accept().await.expect("accept");
        p.set_nodelay(true).expect("nodelay");
        c.set_nodelay(true).expect("nodelay");
        let (_cr, mut cw) = c.into_split();
        // The chain of tasks between the reader and the writer.
        let (tx0, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        for _ in 0..hops {
            let (tx, rx2) = mpsc::unbounded_channel::<Vec<u8>>();
            let mut prev = rx;
            tokio::spawn(async move {
                while let Some(b) = prev.recv().await {
                    if tx.send(b).is_err() {
                        return;
                    }
                }
            });
            rx = rx2;
        }
        let direct = hops == 0;
        if !direct {
            tokio::spawn(async move {
                while let Some(b) = rx.recv().await {
                    if cw.write_all(&b).await.is_err() {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = p.read(&mut buf).await {
                    if n == 0 || tx0.send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            });
        } else {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = p.read(&mut buf).await {
                    if n == 0 || cw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    }
}

async fn client(port: u16, rate: f64, secs: f64) {
    let base = Instant::now();
    let ns = move || base.elapsed().as_nanos() as u64;
    let p = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let c = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    p.set_nodelay(true).expect("nodelay");
    c.set_nodelay(true).expect("nodelay");
    let (_pr, mut pw) = p.into_split();
    let (mut cr, _cw) = c.into_split();
    let (tx, mut rx) = mpsc::unbounded_channel::<[u8; 16]>();
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            if pw.write_all(&m).await.is_err() {
                return;
            }
        }
    });
    let reader = tokio::spawn(async move {
        let mut h =
            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3).expect("hist");
        let mut buf = vec![0u8; 65536];
        let mut have = 0usize;
        let mut n_msgs = 0u64;
        loop {
            let n = match cr.read(&mut buf[have..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            have += n;
            let now = ns();
            let whole = have / 16 * 16;
            for m in buf[..whole].chunks_exact(16) {
                let seq = u64::from_le_bytes(m[0..8].try_into().expect("8"));
                let ts = u64::from_le_bytes(m[8..16].try_into().expect("8"));
                if seq == u64::MAX {
                    return (h, n_msgs);
                }
                n_msgs += 1;
                h.record(((now - ts) / 1000).max(1)).expect("record");
            }
            buf.copy_within(whole..have, 0);
            have -= whole;
        }
        (h, n_msgs)
    });
    let t0 = ns();
    let end = t0 + (secs * 1e9) as u64;
    let mut seq = 0u64;
    loop {
        if seq.is_multiple_of(64) && ns() >= end {
            break;
        }
        let due = t0 + (seq as f64 * 1e9 / rate) as u64;
        let now = ns();
        if due > now + 1_000_000 {
            tokio::time::sleep(Duration::from_nanos(due - now)).await;
        }
        let mut m = [0u8; 16];
        m[0..8].copy_from_slice(&seq.to_le_bytes());
        m[8..16].copy_from_slice(&ns().to_le_bytes());
        if tx.send(m).is_err() {
            break;
        }
        seq += 1;
    }
    let mut m = [0u8; 16];
    m[0..8].copy_from_slice(&u64::MAX.to_le_bytes());
    let _ = tx.send(m);
    drop(tx);
    let _ = writer.await;
    let (h, n) = reader.await.expect("reader");
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "messages {n} p50 {:.3} p90 {:.3} p99 {:.3} p99.9 {:.3} max {:.3} ms",
        ms(0.5),
        ms(0.9),
        ms(0.99),
        ms(0.999),
        h.max() as f64 / 1000.0
    );
}
