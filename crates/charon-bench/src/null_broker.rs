//! A "null" AMQP 0-9-1 broker used to measure the load tool's own ceiling.
//!
//! It completes the handshake, answers declare/purge/delete/qos/consume/
//! confirm.select, discards every publish (acking it at once in confirm
//! mode) and, once a consumer subscribes, streams an endless flow of
//! pre-encoded deliveries (body = `NULL_BROKER_SIZE` bytes of 0xFF, so the
//! tool skips latency). Queue arguments are accepted but mean nothing (no
//! dead-lettering, no TTL). [`serve_observed`] records the admin methods and
//! settlements it receives (see [`Observed`]). Not a broker: a test fixture.
//!
//! Run it with `cargo run --release -p charon-bench --example null_broker -- 127.0.0.1:5699`;
//! the integration tests use it in-process.

use std::sync::Arc;

mod observed;

pub use observed::{Event, Observed};

use crate::BenchError;
use crate::client::connection::{decode, encode};
use crate::client::frame_io::{FRAME_METHOD, FrameReader};
use amq_protocol::frame::AMQPFrame;
use amq_protocol::protocol::{AMQPClass, basic, channel, confirm, connection, queue};
use amq_protocol::types::{FieldTable, LongString};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

type Writer = Arc<Mutex<OwnedWriteHalf>>;

async fn send(w: &Writer, ch: u16, class: AMQPClass) -> Result<(), BenchError> {
    let bytes = encode(&AMQPFrame::Method(ch, class))?;
    w.lock().await.write_all(&bytes).await?;
    Ok(())
}

fn deliveries(size: usize) -> Vec<u8> {
    // basic.deliver(ctag "c", tag 0 patched later? the tool only needs increasing
    // tags for multiple acks, which a null broker ignores), header, body.
    let mut one = Vec::new();
    let mut m = vec![0, 60, 0, 60, 1, b'c'];
    m.extend_from_slice(&1u64.to_be_bytes());
    m.extend_from_slice(&[0, 0, 1, b'q']);
    for (kind, payload) in [
        (1u8, m),
        (2u8, {
            let mut h = vec![0, 60, 0, 0];
            h.extend_from_slice(&(size as u64).to_be_bytes());
            h.extend_from_slice(&[0, 0]);
            h
        }),
        (3u8, vec![0xFF; size]),
    ] {
        one.push(kind);
        one.extend_from_slice(&1u16.to_be_bytes());
        one.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        one.extend_from_slice(&payload);
        one.push(0xCE);
    }
    let n = (128 * 1024 / one.len()).max(1);
    one.repeat(n)
}

async fn blast(w: Writer, size: usize) {
    let batch = deliveries(size);
    loop {
        let mut g = w.lock().await;
        if g.write_all(&batch).await.is_err() {
            return;
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    size: usize,
    obs: Arc<Observed>,
) -> Result<(), BenchError> {
    stream.set_nodelay(true)?;
    let (mut rd, wr) = stream.into_split();
    let mut header = [0u8; 8];
    rd.read_exact(&mut header).await?;
    let w: Writer = Arc::new(Mutex::new(wr));
    let mut reader = FrameReader::new(rd);
    let start = connection::Start {
        version_major: 0,
        version_minor: 9,
        server_properties: FieldTable::default(),
        mechanisms: LongString::from("PLAIN"),
        locales: LongString::from("en_US"),
    };
    send(
        &w,
        0,
        AMQPClass::Connection(connection::AMQPMethod::Start(start)),
    )
    .await?;
    let mut confirm_mode = false;
    let mut published = 0u64;
    let mut blaster = None;
    loop {
        reader.fill().await?;
        let mut replies: Vec<(u16, AMQPClass)> = Vec::new();
        let mut got_publish = false;
        let mut closing = false;
        while let Some(f) = reader.next_frame()? {
            if f.kind != FRAME_METHOD {
                continue;
            }
            if f.payload.get(..4) == Some(&[0, 60, 0, 40]) {
                published += 1;
                got_publish = true;
                continue;
            }
            if obs.settlement(f.payload) {
                continue; // consumer ack / nack / reject
            }
            let AMQPFrame::Method(ch, class) = decode(f.full)? else {
                continue;
            };
            use AMQPClass as C;
            let reply = match class {
                C::Connection(connection::AMQPMethod::StartOk(_)) => {
                    C::Connection(connection::AMQPMethod::Tune(connection::Tune {
                        channel_max: 2047,
                        frame_max: 131072,
                        heartbeat: 0,
                    }))
                }
                C::Connection(connection::AMQPMethod::TuneOk(_)) => continue,
                C::Connection(connection::AMQPMethod::Open(_)) => {
                    C::Connection(connection::AMQPMethod::OpenOk(connection::OpenOk {}))
                }
                C::Connection(connection::AMQPMethod::Close(_)) => {
                    closing = true;
                    C::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {}))
                }
                C::Channel(channel::AMQPMethod::Open(_)) => {
                    C::Channel(channel::AMQPMethod::OpenOk(channel::OpenOk {}))
                }
                C::Queue(queue::AMQPMethod::Declare(d)) => {
                    obs.push(Event::Declare {
                        queue: d.queue.to_string(),
                        arguments: d.arguments.clone(),
                    });
                    C::Queue(queue::AMQPMethod::DeclareOk(queue::DeclareOk {
                        queue: d.queue,
                        message_count: 0,
                        consumer_count: 0,
                    }))
                }
                C::Queue(queue::AMQPMethod::Purge(p)) => {
                    obs.push(Event::Purge(p.queue.to_string()));
                    C::Queue(queue::AMQPMethod::PurgeOk(queue::PurgeOk {
                        message_count: 0,
                    }))
                }
                C::Queue(queue::AMQPMethod::Delete(d)) => {
                    obs.push(Event::Delete(d.queue.to_string()));
                    C::Queue(queue::AMQPMethod::DeleteOk(queue::DeleteOk {
                        message_count: 0,
                    }))
                }
                C::Basic(basic::AMQPMethod::Qos(_)) => {
                    C::Basic(basic::AMQPMethod::QosOk(basic::QosOk {}))
                }
                C::Basic(basic::AMQPMethod::Consume(c)) => {
                    obs.push(Event::Consume(c.queue.to_string()));
                    if blaster.is_none() {
                        blaster = Some(());
                        let w2 = w.clone();
                        // Start after consume-ok has been written.
                        tokio::spawn(async move {
                            tokio::task::yield_now().await;
                            blast(w2, size).await;
                        });
                    }
                    C::Basic(basic::AMQPMethod::ConsumeOk(basic::ConsumeOk {
                        consumer_tag: "c".into(),
                    }))
                }
                C::Confirm(confirm::AMQPMethod::Select(_)) => {
                    confirm_mode = true;
                    C::Confirm(confirm::AMQPMethod::SelectOk(confirm::SelectOk {}))
                }
                _ => continue,
            };
            replies.push((ch, reply));
        }
        let mut out = Vec::new();
        for (ch, r) in replies {
            out.extend_from_slice(&encode(&AMQPFrame::Method(ch, r))?);
        }
        if confirm_mode && got_publish {
            let mut p = vec![0, 60, 0, 80];
            p.extend_from_slice(&published.to_be_bytes());
            p.push(1);
            out.extend_from_slice(&[1, 0, 1]);
            out.extend_from_slice(&(p.len() as u32).to_be_bytes());
            out.extend_from_slice(&p);
            out.push(0xCE);
        }
        if !out.is_empty() {
            w.lock().await.write_all(&out).await?;
        }
        if closing {
            return Ok(());
        }
    }
}

/// Accepts connections forever, serving each as a null broker whose
/// deliveries carry `size`-byte bodies.
pub async fn serve(listener: TcpListener, size: usize) -> Result<(), BenchError> {
    serve_observed(listener, size, Arc::new(Observed::default())).await
}

/// [`serve`], recording what the clients send into `obs`.
pub async fn serve_observed(
    listener: TcpListener,
    size: usize,
    obs: Arc<Observed>,
) -> Result<(), BenchError> {
    loop {
        let (s, _) = listener.accept().await?;
        let obs = obs.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_connection(s, size, obs).await {
                tracing::debug!("null broker connection: {e}");
            }
        });
    }
}
