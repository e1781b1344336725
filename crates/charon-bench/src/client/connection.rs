//! Connection establishment (protocol header, SASL PLAIN, tune, open) and
//! synchronous request/response methods, encoded with `amq-protocol`.

use amq_protocol::frame::{AMQPFrame, ProtocolVersion, WriteContext, gen_frame, parse_frame};
use amq_protocol::protocol::{AMQPClass, basic, channel, confirm, connection, queue};
use amq_protocol::types::{AMQPValue, FieldTable, LongString};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedWriteHalf;

use super::frame_io::{FRAME_HEARTBEAT, FRAME_METHOD, FrameReader};
use crate::BenchError;
use crate::uri::AmqpUri;

/// An open AMQP connection with channel 1 opened.
#[derive(Debug)]
pub struct Connection {
    /// Frame reader over the socket's read half.
    pub reader: FrameReader,
    /// Socket write half.
    pub writer: OwnedWriteHalf,
    /// Negotiated frame_max (0 = unlimited).
    pub frame_max: u32,
}

/// The channel used for all work.
pub const CHANNEL: u16 = 1;

/// Encodes one frame with `amq-protocol`.
pub fn encode(frame: &AMQPFrame) -> Result<Vec<u8>, BenchError> {
    let ctx = gen_frame(frame)(WriteContext::from(Vec::with_capacity(128)))
        .map_err(|e| BenchError::Protocol(format!("encode: {e:?}")))?;
    Ok(ctx.into_inner().0)
}

/// Encoded `connection.close(200, "bye")`.
pub fn close_frame() -> Result<Vec<u8>, BenchError> {
    encode(&AMQPFrame::Method(
        0,
        AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        })),
    ))
}

/// Decodes a complete frame with `amq-protocol`.
pub fn decode(full: &[u8]) -> Result<AMQPFrame, BenchError> {
    parse_frame(full)
        .map(|(_, f)| f)
        .map_err(|e| BenchError::Protocol(format!("decode: {e:?}")))
}

fn closed_error(class: &AMQPClass) -> Option<BenchError> {
    match class {
        AMQPClass::Connection(connection::AMQPMethod::Close(c)) => Some(BenchError::Closed {
            scope: "connection",
            code: c.reply_code,
            text: c.reply_text.as_str().to_string(),
        }),
        AMQPClass::Channel(channel::AMQPMethod::Close(c)) => Some(BenchError::Closed {
            scope: "channel",
            code: c.reply_code,
            text: c.reply_text.as_str().to_string(),
        }),
        _ => None,
    }
}

/// Interprets a method frame received outside the hot path: `Err` if it is a close.
pub fn check_async_method(full: &[u8]) -> Result<AMQPClass, BenchError> {
    match decode(full)? {
        AMQPFrame::Method(_, class) => match closed_error(&class) {
            Some(e) => Err(e),
            None => Ok(class),
        },
        other => Err(BenchError::Protocol(format!(
            "expected a method, got {other:?}"
        ))),
    }
}

impl Connection {
    /// Connects, authenticates, opens the vhost and channel 1.
    pub async fn open(uri: &AmqpUri) -> Result<Self, BenchError> {
        let stream = TcpStream::connect((uri.host.as_str(), uri.port)).await?;
        stream.set_nodelay(true)?;
        let (rd, mut writer) = stream.into_split();
        let mut reader = FrameReader::new(rd);
        writer
            .write_all(&encode(&AMQPFrame::ProtocolHeader(
                ProtocolVersion::amqp_0_9_1(),
            ))?)
            .await?;
        let start = Self::read_method(&mut reader).await?;
        let AMQPClass::Connection(connection::AMQPMethod::Start(start)) = start else {
            return Err(BenchError::Protocol(format!(
                "expected connection.start, got {start:?}"
            )));
        };
        let mechs = String::from_utf8_lossy(start.mechanisms.as_bytes()).to_string();
        if !mechs.split_whitespace().any(|m| m == "PLAIN") {
            return Err(BenchError::Protocol(format!(
                "server lacks PLAIN auth: {mechs}"
            )));
        }
        let mut caps = FieldTable::default();
        caps.insert("publisher_confirms".into(), AMQPValue::Boolean(true));
        caps.insert("basic.nack".into(), AMQPValue::Boolean(true));
        let mut props = FieldTable::default();
        props.insert(
            "product".into(),
            AMQPValue::LongString(LongString::from("charon-bench")),
        );
        props.insert("capabilities".into(), AMQPValue::FieldTable(caps));
        let response = format!("\0{}\0{}", uri.user, uri.password);
        let start_ok = connection::StartOk {
            client_properties: props,
            mechanism: "PLAIN".into(),
            response: LongString::from(response.into_bytes()),
            locale: "en_US".into(),
        };
        Self::send(
            &mut writer,
            0,
            AMQPClass::Connection(connection::AMQPMethod::StartOk(start_ok)),
        )
        .await?;
        let tune = Self::read_method(&mut reader).await?;
        let AMQPClass::Connection(connection::AMQPMethod::Tune(tune)) = tune else {
            return Err(BenchError::Protocol(format!(
                "expected connection.tune, got {tune:?}"
            )));
        };
        let frame_max = tune.frame_max;
        let tune_ok = connection::TuneOk {
            channel_max: if tune.channel_max == 0 {
                2047
            } else {
                tune.channel_max
            },
            frame_max,
            heartbeat: 0,
        };
        Self::send(
            &mut writer,
            0,
            AMQPClass::Connection(connection::AMQPMethod::TuneOk(tune_ok)),
        )
        .await?;
        let open = connection::Open {
            virtual_host: uri.vhost.as_str().into(),
        };
        Self::send(
            &mut writer,
            0,
            AMQPClass::Connection(connection::AMQPMethod::Open(open)),
        )
        .await?;
        let reply = Self::read_method(&mut reader).await?;
        if !matches!(
            reply,
            AMQPClass::Connection(connection::AMQPMethod::OpenOk(_))
        ) {
            return Err(BenchError::Protocol(format!(
                "expected connection.open-ok, got {reply:?}"
            )));
        }
        let mut conn = Self {
            reader,
            writer,
            frame_max,
        };
        let reply = conn
            .rpc(AMQPClass::Channel(channel::AMQPMethod::Open(
                channel::Open {},
            )))
            .await?;
        if !matches!(reply, AMQPClass::Channel(channel::AMQPMethod::OpenOk(_))) {
            return Err(BenchError::Protocol(format!(
                "expected channel.open-ok, got {reply:?}"
            )));
        }
        Ok(conn)
    }

    async fn send(w: &mut OwnedWriteHalf, ch: u16, class: AMQPClass) -> Result<(), BenchError> {
        w.write_all(&encode(&AMQPFrame::Method(ch, class))?).await?;
        Ok(())
    }

    /// Reads frames until a method frame arrives (heartbeats skipped); closes become errors.
    async fn read_method(reader: &mut FrameReader) -> Result<AMQPClass, BenchError> {
        loop {
            let f = reader.read_frame().await?;
            match f.kind {
                FRAME_METHOD => return check_async_method(f.full),
                FRAME_HEARTBEAT => continue,
                k => {
                    return Err(BenchError::Protocol(format!(
                        "unexpected frame type {k} during a synchronous request"
                    )));
                }
            }
        }
    }

    /// Sends a method on channel 1 and waits for the next method (its reply).
    pub async fn rpc(&mut self, class: AMQPClass) -> Result<AMQPClass, BenchError> {
        Self::send(&mut self.writer, CHANNEL, class).await?;
        Self::read_method(&mut self.reader).await
    }

    /// `queue.declare` (non-exclusive, not auto-delete).
    pub async fn declare_queue(&mut self, name: &str, durable: bool) -> Result<(), BenchError> {
        self.declare_queue_with(name, durable, FieldTable::default())
            .await
    }

    /// `queue.declare` with arguments (dead-letter scenarios).
    pub async fn declare_queue_with(
        &mut self,
        name: &str,
        durable: bool,
        arguments: FieldTable,
    ) -> Result<(), BenchError> {
        let m = queue::Declare {
            queue: name.into(),
            passive: false,
            durable,
            exclusive: false,
            auto_delete: false,
            nowait: false,
            arguments,
        };
        match self
            .rpc(AMQPClass::Queue(queue::AMQPMethod::Declare(m)))
            .await?
        {
            AMQPClass::Queue(queue::AMQPMethod::DeclareOk(_)) => Ok(()),
            other => Err(BenchError::Protocol(format!(
                "expected declare-ok, got {other:?}"
            ))),
        }
    }

    /// `queue.purge`, returning the number of purged messages.
    pub async fn purge_queue(&mut self, name: &str) -> Result<u32, BenchError> {
        let m = queue::Purge {
            queue: name.into(),
            nowait: false,
        };
        match self
            .rpc(AMQPClass::Queue(queue::AMQPMethod::Purge(m)))
            .await?
        {
            AMQPClass::Queue(queue::AMQPMethod::PurgeOk(ok)) => Ok(ok.message_count),
            other => Err(BenchError::Protocol(format!(
                "expected purge-ok, got {other:?}"
            ))),
        }
    }

    /// `queue.delete`.
    pub async fn delete_queue(&mut self, name: &str) -> Result<(), BenchError> {
        let m = queue::Delete {
            queue: name.into(),
            if_unused: false,
            if_empty: false,
            nowait: false,
        };
        match self
            .rpc(AMQPClass::Queue(queue::AMQPMethod::Delete(m)))
            .await?
        {
            AMQPClass::Queue(queue::AMQPMethod::DeleteOk(_)) => Ok(()),
            other => Err(BenchError::Protocol(format!(
                "expected delete-ok, got {other:?}"
            ))),
        }
    }

    /// `confirm.select`.
    pub async fn confirm_select(&mut self) -> Result<(), BenchError> {
        let m = confirm::Select { nowait: false };
        match self
            .rpc(AMQPClass::Confirm(confirm::AMQPMethod::Select(m)))
            .await?
        {
            AMQPClass::Confirm(confirm::AMQPMethod::SelectOk(_)) => Ok(()),
            other => Err(BenchError::Protocol(format!(
                "expected select-ok, got {other:?}"
            ))),
        }
    }

    /// `basic.qos(prefetch_count)`.
    pub async fn qos(&mut self, prefetch: u16) -> Result<(), BenchError> {
        let m = basic::Qos {
            prefetch_count: prefetch,
            global: false,
        };
        match self
            .rpc(AMQPClass::Basic(basic::AMQPMethod::Qos(m)))
            .await?
        {
            AMQPClass::Basic(basic::AMQPMethod::QosOk(_)) => Ok(()),
            other => Err(BenchError::Protocol(format!(
                "expected qos-ok, got {other:?}"
            ))),
        }
    }

    /// `basic.consume`; deliveries may follow immediately after consume-ok.
    pub async fn consume(&mut self, queue: &str, no_ack: bool) -> Result<(), BenchError> {
        let m = basic::Consume {
            queue: queue.into(),
            consumer_tag: "".into(),
            no_local: false,
            no_ack,
            exclusive: false,
            nowait: false,
            arguments: FieldTable::default(),
        };
        match self
            .rpc(AMQPClass::Basic(basic::AMQPMethod::Consume(m)))
            .await?
        {
            AMQPClass::Basic(basic::AMQPMethod::ConsumeOk(_)) => Ok(()),
            other => Err(BenchError::Protocol(format!(
                "expected consume-ok, got {other:?}"
            ))),
        }
    }

    /// Sends `connection.close` and waits briefly for close-ok (best effort).
    pub async fn close(mut self) {
        let Ok(frame) = close_frame() else { return };
        if self.writer.write_all(&frame).await.is_err() {
            return;
        }
        let wait = async {
            loop {
                match self.reader.read_frame().await {
                    Ok(f) if f.kind == FRAME_METHOD && f.channel == 0 => {
                        if let Ok(AMQPFrame::Method(
                            _,
                            AMQPClass::Connection(connection::AMQPMethod::CloseOk(_)),
                        )) = decode(f.full)
                        {
                            return;
                        }
                    }
                    Ok(_) => continue,
                    Err(_) => return,
                }
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), wait).await;
    }
}
