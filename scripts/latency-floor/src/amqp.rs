//! `latency-floor amqp PORT`: the floor under amqp-load itself — an AMQP 0-9-1 "broker" that does
//! nothing but framing, so that amqp-load (amqprs, its pacing, its tasks) can run unchanged
//! against it.
//!
//! It answers the handshake and every synchronous method amqp-load sends (declare, bind, qos,
//! consume, cancel, delete, confirm.select, close) with its `-Ok`, keeps no queue and no state
//! beyond the consumers, and turns each `basic.publish` (method, header, body frames) into a
//! `basic.deliver` on the most recent consumer, on any connection. The publishing connection's
//! task hands the delivery's bytes to the consuming connection's task through an unbounded
//! channel, which writes everything waiting with one write (as a broker's connection → queue →
//! connection). Confirm mode answers each publish with `basic.ack` at once. Acks, nacks and
//! heartbeats from clients are read and dropped. One `current_thread` runtime, `TCP_NODELAY`.
//!
//! What it measures: the latency amqp-load reports when the broker costs only its framing and
//! one hand-over; a broker cannot do better on this machine with this client.
use std::cell::RefCell;
use std::rc::Rc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Where deliveries go: the last `basic.consume` seen (its connection, channel and tag).
#[derive(Clone)]
struct Consumer {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    channel: u16,
    tag: Vec<u8>,
}

/// What the connections share: the consumer, publishes that came before it, the delivery tags.
#[derive(Default)]
struct Hub {
    consumer: Option<Consumer>,
    backlog: Vec<Pending>,
    delivery_tag: u64,
}

type Shared = Rc<RefCell<Hub>>;

/// Appends `pd` as a `basic.deliver` (method, header, bodies) for `c` to `out`.
fn deliver(out: &mut Vec<u8>, c: &Consumer, tag: u64, pd: &Pending) {
    let mut args = Vec::new();
    shortstr(&mut args, &c.tag);
    args.extend_from_slice(&tag.to_be_bytes());
    args.push(0);
    shortstr(&mut args, &pd.exchange);
    shortstr(&mut args, &pd.routing_key);
    method(out, c.channel, 60, 60, &args);
    if let Some(h) = &pd.header {
        frame(out, 2, c.channel, h);
    }
    for b in &pd.bodies {
        frame(out, 3, c.channel, b);
    }
}

pub async fn serve(port: u16) {
    let l = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    let shared: Shared = Rc::new(RefCell::new(Hub::default()));
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async move {
            loop {
                let Ok((s, _)) = l.accept().await else {
                    continue;
                };
                let _ = s.set_nodelay(true);
                tokio::task::spawn_local(connection(s, shared.clone()));
            }
        })
        .await;
}

fn frame(out: &mut Vec<u8>, kind: u8, channel: u16, payload: &[u8]) {
    out.push(kind);
    out.extend_from_slice(&channel.to_be_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(payload);
    out.push(0xCE);
}

fn method(out: &mut Vec<u8>, channel: u16, class: u16, id: u16, args: &[u8]) {
    let mut p = Vec::with_capacity(4 + args.len());
    p.extend_from_slice(&class.to_be_bytes());
    p.extend_from_slice(&id.to_be_bytes());
    p.extend_from_slice(args);
    frame(out, 1, channel, &p);
}

fn shortstr(out: &mut Vec<u8>, s: &[u8]) {
    out.push(s.len() as u8);
    out.extend_from_slice(s);
}

fn longstr(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

/// A short string at `at`, and the offset after it.
fn read_shortstr(b: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let n = *b.get(at)? as usize;
    Some((b.get(at + 1..at + 1 + n)?, at + 1 + n))
}

fn start_args() -> Vec<u8> {
    let mut caps = Vec::new();
    for k in [
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
    ] {
        shortstr(&mut caps, k.as_bytes());
        caps.extend_from_slice(b"t\x01");
    }
    let mut props = Vec::new();
    shortstr(&mut props, b"capabilities");
    props.push(b'F');
    props.extend_from_slice(&(caps.len() as u32).to_be_bytes());
    props.extend_from_slice(&caps);
    let mut a = vec![0, 9];
    a.extend_from_slice(&(props.len() as u32).to_be_bytes());
    a.extend_from_slice(&props);
    longstr(&mut a, b"PLAIN");
    longstr(&mut a, b"en_US");
    a
}

/// A publish being assembled on one channel: the deliver method's routing fields, the header.
struct Pending {
    exchange: Vec<u8>,
    routing_key: Vec<u8>,
    header: Option<Vec<u8>>,
    body_left: u64,
    bodies: Vec<Vec<u8>>,
}

async fn connection(s: TcpStream, shared: Shared) {
    let (tx, rx) = mpsc::unbounded_channel::<Vec<u8>>();
    serve_connection(s, shared.clone(), tx.clone(), rx).await;
    // A consumer whose connection is gone takes no more deliveries: later ones wait in the backlog.
    let mut hub = shared.borrow_mut();
    if hub
        .consumer
        .as_ref()
        .is_some_and(|c| c.tx.same_channel(&tx))
    {
        hub.consumer = None;
    }
}

async fn serve_connection(
    s: TcpStream,
    shared: Shared,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    let (mut r, mut w) = s.into_split();
    // The writer: everything waiting goes out with one write.
    tokio::task::spawn_local(async move {
        let mut buf = Vec::new();
        while let Some(b) = rx.recv().await {
            buf.clear();
            buf.extend_from_slice(&b);
            while let Ok(more) = rx.try_recv() {
                buf.extend_from_slice(&more);
            }
            if w.write_all(&buf).await.is_err() {
                return;
            }
        }
    });
    let mut buf = vec![0u8; 8];
    if r.read_exact(&mut buf).await.is_err() {
        return;
    }
    let mut out = Vec::new();
    method(&mut out, 0, 10, 10, &start_args());
    let _ = tx.send(std::mem::take(&mut out));
    let mut pending: Option<(u16, Pending)> = None;
    let mut confirms: Vec<(u16, u64)> = Vec::new();
    let mut data: Vec<u8> = Vec::with_capacity(1 << 16);
    let mut chunk = vec![0u8; 1 << 16];
    loop {
        let n = match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        data.extend_from_slice(&chunk[..n]);
        let mut at = 0;
        // Deliveries for the consumer gathered over this read, sent with one hand-over.
        let mut deliveries: Vec<u8> = Vec::new();
        let mut target: Option<Consumer> = None;
        while data.len() >= at + 7 {
            let kind = data[at];
            let ch = u16::from_be_bytes([data[at + 1], data[at + 2]]);
            let size = u32::from_be_bytes([data[at + 3], data[at + 4], data[at + 5], data[at + 6]])
                as usize;
            if data.len() < at + 7 + size + 1 {
                break;
            }
            let p = data[at + 7..at + 7 + size].to_vec();
            at += 8 + size;
            match kind {
                1 if p.len() >= 4 => {
                    let class = u16::from_be_bytes([p[0], p[1]]);
                    let id = u16::from_be_bytes([p[2], p[3]]);
                    let a = &p[4..];
                    match (class, id) {
                        (10, 11) => method(&mut out, 0, 10, 30, &[0x07, 0xFF, 0, 2, 0, 0, 0, 0]),
                        (10, 40) => method(&mut out, 0, 10, 41, &[0]),
                        (10, 50) => {
                            if let (Some(c), false) = (&target, deliveries.is_empty()) {
                                let _ = c.tx.send(std::mem::take(&mut deliveries));
                            }
                            method(&mut out, 0, 10, 51, &[]);
                            let _ = tx.send(std::mem::take(&mut out));
                            return;
                        }
                        (20, 10) => method(&mut out, ch, 20, 11, &[0, 0, 0, 0]),
                        (20, 40) => method(&mut out, ch, 20, 41, &[]),
                        (40, 10) => method(&mut out, ch, 40, 11, &[]),
                        (40, 20) => method(&mut out, ch, 40, 21, &[]),
                        (50, 10) => {
                            let q = read_shortstr(a, 2)
                                .map(|(q, _)| q.to_vec())
                                .unwrap_or_default();
                            let mut args = Vec::new();
                            shortstr(&mut args, &q);
                            args.extend_from_slice(&[0; 8]);
                            method(&mut out, ch, 50, 11, &args);
                        }
                        (50, 20) => method(&mut out, ch, 50, 21, &[]),
                        (50, 30) => method(&mut out, ch, 50, 31, &[0; 4]),
                        (50, 40) => method(&mut out, ch, 50, 41, &[0; 4]),
                        (60, 10) => method(&mut out, ch, 60, 11, &[]),
                        (60, 20) => {
                            let tag = read_shortstr(a, 2)
                                .and_then(|(_, next)| read_shortstr(a, next))
                                .map(|(t, _)| t.to_vec())
                                .unwrap_or_default();
                            let mut args = Vec::new();
                            shortstr(&mut args, &tag);
                            method(&mut out, ch, 60, 21, &args);
                            let c = Consumer {
                                tx: tx.clone(),
                                channel: ch,
                                tag,
                            };
                            let mut hub = shared.borrow_mut();
                            for pd in std::mem::take(&mut hub.backlog) {
                                hub.delivery_tag += 1;
                                deliver(&mut out, &c, hub.delivery_tag, &pd);
                            }
                            hub.consumer = Some(c);
                        }
                        (60, 30) => {
                            let tag = read_shortstr(a, 0)
                                .map(|(t, _)| t.to_vec())
                                .unwrap_or_default();
                            let mut args = Vec::new();
                            shortstr(&mut args, &tag);
                            method(&mut out, ch, 60, 31, &args);
                            let mut hub = shared.borrow_mut();
                            if hub.consumer.as_ref().is_some_and(|c| c.tag == tag) {
                                hub.consumer = None;
                            }
                        }
                        (60, 40) => {
                            let (exchange, next) = read_shortstr(a, 2).unwrap_or((&[], 2));
                            let routing_key = read_shortstr(a, next).map(|(k, _)| k).unwrap_or(&[]);
                            pending = Some((
                                ch,
                                Pending {
                                    exchange: exchange.to_vec(),
                                    routing_key: routing_key.to_vec(),
                                    header: None,
                                    body_left: 0,
                                    bodies: Vec::new(),
                                },
                            ));
                        }
                        (85, 10) => {
                            confirms.push((ch, 0));
                            method(&mut out, ch, 85, 11, &[]);
                        }
                        _ => {}
                    }
                }
                2 => {
                    if let Some((_, pd)) = pending.as_mut() {
                        pd.body_left = p
                            .get(4..12)
                            .map(|b| u64::from_be_bytes(b.try_into().unwrap_or([0; 8])))
                            .unwrap_or(0);
                        pd.header = Some(p);
                    }
                }
                3 => {
                    if let Some((_, pd)) = pending.as_mut() {
                        pd.body_left = pd.body_left.saturating_sub(p.len() as u64);
                        pd.bodies.push(p);
                    }
                }
                _ => {}
            }
            // A complete publish becomes a delivery.
            let done =
                matches!(&pending, Some((_, pd)) if pd.header.is_some() && pd.body_left == 0);
            if done {
                let Some((pch, pd)) = pending.take() else {
                    continue;
                };
                if let Some(c) = confirms.iter_mut().find(|(c, _)| *c == pch) {
                    c.1 += 1;
                    let mut args = c.1.to_be_bytes().to_vec();
                    args.push(0);
                    method(&mut out, pch, 60, 80, &args);
                }
                let mut hub = shared.borrow_mut();
                if target.is_none() {
                    target = hub.consumer.clone();
                }
                match &target {
                    Some(c) => {
                        hub.delivery_tag += 1;
                        deliver(&mut deliveries, c, hub.delivery_tag, &pd);
                    }
                    None => hub.backlog.push(pd),
                }
            }
        }
        data.drain(..at);
        if let Some(c) = target {
            if !deliveries.is_empty() {
                let _ = c.tx.send(deliveries);
            }
        }
        if !out.is_empty() {
            let _ = tx.send(std::mem::take(&mut out));
        }
    }
}
