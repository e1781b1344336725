//! End-to-end tests with the lapin client against the real `charon` binary.
//!
//! Each test starts its own broker on free ports. Set `CHARON_TEST_URL`
//! (e.g. `amqp://guest:guest@127.0.0.1:5672/%2f`) to run them against an
//! external broker such as RabbitMQ 3.10.8 instead.
#![allow(clippy::unwrap_used, unreachable_pub)]

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
    options::*,
    types::{FieldTable, ShortString},
};

struct Broker {
    url: String,
    child: Option<Child>,
    _dir: Option<std::path::PathBuf>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(dir) = self._dir.as_ref() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_broker() -> Broker {
    if let Ok(url) = std::env::var("CHARON_TEST_URL") {
        return Broker {
            url,
            child: None,
            _dir: None,
        };
    }
    // A port picked free may be taken by a parallel test before the broker binds it: try again
    // with other ports when the broker exits early.
    for _ in 0..10 {
        if let Some(b) = try_start_broker() {
            return b;
        }
    }
    panic!("charon exited early 10 times (ports taken?)");
}

fn try_start_broker() -> Option<Broker> {
    let amqp = free_port();
    let http = free_port();
    let dir = std::env::temp_dir().join(format!("charon-lapin-{}-{}", std::process::id(), amqp));
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_charon"))
        .args([
            "server",
            "--amqp-listen",
            &format!("127.0.0.1:{amqp}"),
            "--http-listen",
            &format!("127.0.0.1:{http}"),
            "--data-dir",
            dir.to_str().unwrap(),
            "--log-level",
            "warn",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn charon");
    let mut broker = Broker {
        url: format!("amqp://guest:guest@127.0.0.1:{amqp}/%2f"),
        child: Some(child),
        _dir: Some(dir),
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if TcpStream::connect(("127.0.0.1", amqp)).is_ok() {
            break;
        }
        if let Some(status) = broker.child.as_mut().unwrap().try_wait().unwrap() {
            eprintln!("charon exited early: {status}; retrying with other ports");
            return None;
        }
        assert!(Instant::now() < deadline, "charon did not listen on {amqp}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(broker)
}

async fn connect(b: &Broker) -> Connection {
    Connection::connect(&b.url, ConnectionProperties::default())
        .await
        .expect("connect")
}

fn s(v: &str) -> ShortString {
    v.into()
}

async fn server_named_queue(ch: &Channel) -> String {
    ch.queue_declare(
        s(""),
        QueueDeclareOptions {
            exclusive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap()
    .name()
    .to_string()
}

async fn publish(ch: &Channel, exchange: &str, rk: &str, body: &[u8]) -> Confirmation {
    ch.basic_publish(
        s(exchange),
        s(rk),
        BasicPublishOptions::default(),
        body,
        BasicProperties::default(),
    )
    .await
    .unwrap()
    .await
    .unwrap()
}

async fn get_body(ch: &Channel, q: &str) -> Option<Vec<u8>> {
    ch.basic_get(s(q), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .map(|m| m.delivery.data)
}

fn error_code(e: &lapin::Error) -> (u16, String) {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => (amqp.get_id(), amqp.get_message().to_string()),
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[tokio::test]
async fn connect_and_negotiate_tune_defaults() {
    let b = start_broker();
    let conn = connect(&b).await;
    assert!(conn.status().connected());
    let cfg = conn.configuration();
    assert_eq!(cfg.frame_max(), 131072);
    assert_eq!(cfg.channel_max(), 2047);
    assert_eq!(cfg.heartbeat(), 60);
    conn.close(200, s("bye")).await.unwrap();
}

#[tokio::test]
async fn declare_bind_publish_consume_with_ack() {
    let b = start_broker();
    let conn = connect(&b).await;
    let ch = conn.create_channel().await.unwrap();
    ch.exchange_declare(
        s("lapin-direct"),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    let q = server_named_queue(&ch).await;
    assert!(q.starts_with("amq.gen-"), "{q}");
    ch.queue_bind(
        s(&q),
        s("lapin-direct"),
        s("key"),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    let mut consumer = ch
        .basic_consume(
            s(&q),
            s("lapin-ctag"),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    for i in 0..5u8 {
        publish(&ch, "lapin-direct", "key", &[i]).await;
    }
    for i in 0..5u8 {
        let d = tokio::time::timeout(Duration::from_secs(60), consumer.next())
            .await
            .expect("delivery timeout")
            .unwrap()
            .unwrap();
        assert_eq!(d.data, vec![i]);
        assert_eq!(d.exchange.as_str(), "lapin-direct");
        assert_eq!(d.routing_key.as_str(), "key");
        assert!(!d.redelivered);
        d.ack(BasicAckOptions::default()).await.unwrap();
    }
    let ok = ch
        .queue_declare(
            s(&q),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(ok.message_count(), 0);
    assert_eq!(ok.consumer_count(), 1);
    conn.close(200, s("bye")).await.unwrap();
}

#[tokio::test]
async fn publisher_confirms_ack() {
    let b = start_broker();
    let conn = connect(&b).await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let q = server_named_queue(&ch).await;
    let mut pending = Vec::new();
    for i in 0..50u32 {
        pending.push(
            ch.basic_publish(
                s(""),
                s(&q),
                BasicPublishOptions::default(),
                &i.to_be_bytes(),
                BasicProperties::default(),
            )
            .await
            .unwrap(),
        );
    }
    for p in pending {
        assert!(matches!(p.await.unwrap(), Confirmation::Ack(None)));
    }
    let ok = ch
        .queue_declare(
            s(&q),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap();
    assert_eq!(ok.message_count(), 50);
    // mandatory + unroutable: returned, then acked
    let c = ch
        .basic_publish(
            s("amq.direct"),
            s("nobody-home"),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"ret",
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    match c {
        Confirmation::Ack(Some(ret)) => {
            assert_eq!(ret.reply_code, 312);
            assert_eq!(ret.reply_text.as_str(), "NO_ROUTE");
            assert_eq!(ret.delivery.data, b"ret");
        }
        other => panic!("expected returned+acked, got {other:?}"),
    }
}

#[tokio::test]
async fn topic_routing() {
    let b = start_broker();
    let conn = connect(&b).await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let x = "lapin-topic";
    ch.exchange_declare(
        s(x),
        ExchangeKind::Topic,
        ExchangeDeclareOptions {
            auto_delete: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap();
    let star = server_named_queue(&ch).await;
    let hash = server_named_queue(&ch).await;
    for (q, pat) in [(&star, "a.*.c"), (&hash, "a.#")] {
        ch.queue_bind(
            s(q),
            s(x),
            s(pat),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    for rk in ["a.b.c", "a.c", "a.b.b.c", "b.a"] {
        publish(&ch, x, rk, rk.as_bytes()).await;
    }
    let mut got_star = Vec::new();
    while let Some(bdy) = get_body(&ch, &star).await {
        got_star.push(String::from_utf8(bdy).unwrap());
    }
    let mut got_hash = Vec::new();
    while let Some(bdy) = get_body(&ch, &hash).await {
        got_hash.push(String::from_utf8(bdy).unwrap());
    }
    assert_eq!(got_star, vec!["a.b.c"]);
    assert_eq!(got_hash, vec!["a.b.c", "a.c", "a.b.b.c"]);
}

#[tokio::test]
async fn basic_get_and_get_empty() {
    let b = start_broker();
    let conn = connect(&b).await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let q = server_named_queue(&ch).await;
    publish(&ch, "", &q, b"one").await;
    publish(&ch, "", &q, b"two").await;
    let m = ch
        .basic_get(s(&q), BasicGetOptions { no_ack: false })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.delivery.data, b"one");
    assert_eq!(m.message_count, 1);
    assert_eq!(m.delivery.delivery_tag, 1);
    m.delivery.ack(BasicAckOptions::default()).await.unwrap();
    assert_eq!(get_body(&ch, &q).await.as_deref(), Some(&b"two"[..]));
    assert!(get_body(&ch, &q).await.is_none());
}

#[tokio::test]
async fn nack_requeue_preserves_order() {
    let b = start_broker();
    let conn = connect(&b).await;
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let q = server_named_queue(&ch).await;
    for i in 0..4u8 {
        publish(&ch, "", &q, &[i]).await;
    }
    let mut msgs = Vec::new();
    for _ in 0..4 {
        msgs.push(
            ch.basic_get(s(&q), BasicGetOptions { no_ack: false })
                .await
                .unwrap()
                .unwrap(),
        );
    }
    for m in msgs.iter().rev() {
        m.delivery
            .nack(BasicNackOptions {
                requeue: true,
                multiple: false,
            })
            .await
            .unwrap();
    }
    for i in 0..4u8 {
        let m = ch
            .basic_get(s(&q), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(m.delivery.data, vec![i]);
        assert!(m.delivery.redelivered);
    }
}

#[tokio::test]
async fn channel_error_404_closes_only_that_channel() {
    let b = start_broker();
    let conn = connect(&b).await;
    let bad = conn.create_channel().await.unwrap();
    let good = conn.create_channel().await.unwrap();
    let err = bad
        .queue_declare(
            s("lapin-no-such-queue"),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    let (code, text) = error_code(&err);
    assert_eq!(code, 404);
    assert_eq!(
        text,
        "NOT_FOUND - no queue 'lapin-no-such-queue' in vhost '/'"
    );
    assert!(!bad.status().connected());
    assert!(good.status().connected());
    let q = server_named_queue(&good).await;
    assert!(q.starts_with("amq.gen-"));
}

#[tokio::test]
async fn connection_error_on_bad_password() {
    let b = start_broker();
    let url = b.url.replacen("guest:guest", "guest:wrong", 1);
    let err = Connection::connect(&url, ConnectionProperties::default())
        .await
        .expect_err("bad password must fail");
    let msg = format!("{err:?}");
    assert!(
        msg.contains("ACCESS_REFUSED") || msg.contains("403"),
        "unexpected error: {msg}"
    );
}

#[tokio::test]
async fn channel_error_406_unknown_exchange_type_keeps_the_connection() {
    let b = start_broker();
    let conn = connect(&b).await;
    let ch = conn.create_channel().await.unwrap();
    let err = ch
        .exchange_declare(
            s("lapin-bad-type"),
            ExchangeKind::Custom("no-such-type".into()),
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_err();
    let (code, text) = error_code(&err);
    // RabbitMQ 4.x: a precondition failure on the channel (3.10.8 closed the connection, 503).
    assert_eq!(code, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - unknown exchange type 'no-such-type'"
    );
    assert!(conn.status().connected());
    let ch2 = conn.create_channel().await.unwrap();
    assert!(ch2.status().connected());
}
