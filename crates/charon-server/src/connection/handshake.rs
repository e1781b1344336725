//! Connection opening: protocol header, start/start-ok (PLAIN, AMQPLAIN), tune/tune-ok, open.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::BytesMut;
use charon_protocol::methods::connection;
use charon_protocol::{
    AMQPClass, AMQPValue, FRAME_MIN_SIZE, FieldTable, Frame, LongString, PROTOCOL_HEADER,
    ProtocolHeaderCheck, ShortString, check_protocol_header, decode_frame, encode_method,
    peek_frame,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::access::VHostAccess;
use crate::broker::Broker;
use crate::error::{AmqpError, ServerError};
use crate::vhost::VHostState;

/// What an opened connection negotiated.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) user: String,
    pub(crate) access: Arc<VHostAccess>,
    pub(crate) vhost: Arc<VHostState>,
    pub(crate) vhost_name: String,
    pub(crate) frame_max: u32,
    pub(crate) channel_max: u16,
    pub(crate) heartbeat: u16,
    /// The client announced the `connection.blocked` capability.
    pub(crate) blocked_capable: bool,
    /// Counted against the node's, vhost's and user's connection limits while it lives.
    pub(crate) slot: crate::limits::ConnectionSlot,
    /// The client's properties (listed by the management API).
    pub(crate) client_properties: charon_protocol::FieldTable,
    /// The SASL mechanism the client logged in with (`PLAIN`, `AMQPLAIN`, `EXTERNAL`).
    pub(crate) mechanism: String,
}

/// Whether the client's properties announce `capabilities.<name> = true`.
fn has_capability(props: &charon_protocol::FieldTable, name: &str) -> bool {
    match props
        .inner()
        .get(&charon_protocol::ShortString::from("capabilities"))
    {
        Some(AMQPValue::FieldTable(caps)) => matches!(
            caps.inner().get(&charon_protocol::ShortString::from(name)),
            Some(AMQPValue::Boolean(true))
        ),
        _ => false,
    }
}

/// Why the handshake ended without an open connection.
#[derive(Debug)]
pub(crate) enum HandshakeEnd {
    /// Close the socket silently (wrong header, I/O error, bad tune-ok).
    Drop,
    /// Send connection.close with this error, then close.
    Refuse(AmqpError),
}

async fn read_frame<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<Frame, HandshakeEnd> {
    loop {
        match decode_frame(buf, FRAME_MIN_SIZE) {
            Ok(Some(f)) => return Ok(f),
            Ok(None) => {}
            Err(e) => return Err(HandshakeEnd::Refuse(e.into())),
        }
        if stream.read_buf(buf).await.map_err(|_| HandshakeEnd::Drop)? == 0 {
            return Err(HandshakeEnd::Drop);
        }
    }
}

async fn read_method<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<AMQPClass, HandshakeEnd> {
    match read_frame(stream, buf).await? {
        Frame::Method { channel: 0, method } => Ok(*method),
        Frame::Heartbeat { .. } => Box::pin(read_method(stream, buf)).await,
        _ => Err(HandshakeEnd::Refuse(
            ServerError::ExpectedMethodOnChannelZero.into(),
        )),
    }
}

/// Reads the method after tune-ok. A frame on a channel other than 0 before
/// connection.open is refused like RabbitMQ's reader does in state `opening`:
/// 505 quoting the frame's octets.
async fn read_opening_method<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
) -> Result<AMQPClass, HandshakeEnd> {
    loop {
        if let Some((frame_type, channel, payload)) = peek_frame(buf)
            && channel != 0
        {
            return Err(HandshakeEnd::Refuse(
                ServerError::frame_refused(frame_type, payload).into(),
            ));
        }
        match decode_frame(buf, FRAME_MIN_SIZE) {
            Ok(Some(Frame::Method { method, .. })) => return Ok(*method),
            Ok(Some(Frame::Heartbeat { .. })) => continue,
            Ok(Some(_)) => return Err(HandshakeEnd::Drop),
            Ok(None) => {}
            Err(e) => return Err(HandshakeEnd::Refuse(e.into())),
        }
        if stream.read_buf(buf).await.map_err(|_| HandshakeEnd::Drop)? == 0 {
            return Err(HandshakeEnd::Drop);
        }
    }
}

async fn send<S: AsyncWrite + Unpin>(
    stream: &mut S,
    method: AMQPClass,
) -> Result<(), HandshakeEnd> {
    let mut out = BytesMut::new();
    encode_method(&mut out, 0, &method);
    stream.write_all(&out).await.map_err(|_| HandshakeEnd::Drop)
}

fn server_properties() -> FieldTable {
    let mut caps = FieldTable::default();
    for c in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
        "direct_reply_to",
    ] {
        caps.insert(ShortString::from(c), AMQPValue::Boolean(true));
    }
    let mut props = FieldTable::default();
    props.insert("capabilities".into(), AMQPValue::FieldTable(caps));
    for (k, v) in [
        ("product", "Charon"),
        ("version", env!("CARGO_PKG_VERSION")),
        ("platform", "Rust"),
        ("cluster_name", "charon"),
        ("copyright", "The Charon authors"),
        ("information", "Licensed under Apache-2.0"),
    ] {
        props.insert(k.into(), AMQPValue::LongString(LongString::from(v)));
    }
    props
}

/// PLAIN: "\0user\0password"; AMQPLAIN: a field table without its length prefix.
fn credentials(mechanism: &str, response: &[u8]) -> Option<(String, String)> {
    match mechanism {
        "PLAIN" => {
            let mut parts = response.split(|b| *b == 0);
            let _authzid = parts.next()?;
            let user = String::from_utf8(parts.next()?.to_vec()).ok()?;
            let pass = String::from_utf8(parts.next()?.to_vec()).ok()?;
            Some((user, pass))
        }
        "AMQPLAIN" => {
            let table = charon_protocol::decode_amqplain(response)?;
            let get = |k: &str| match table.inner().get(&ShortString::from(k)) {
                Some(AMQPValue::LongString(s)) => {
                    Some(String::from_utf8_lossy(s.as_bytes()).into_owned())
                }
                Some(AMQPValue::ShortString(s)) => Some(s.as_str().to_string()),
                _ => None,
            };
            Some((get("LOGIN")?, get("PASSWORD")?))
        }
        _ => None,
    }
}

/// Runs the opening handshake up to connection.open-ok.
pub(crate) async fn open<S: AsyncRead + AsyncWrite + Unpin + Send>(
    stream: &mut S,
    buf: &mut BytesMut,
    broker: &Broker,
    peer: IpAddr,
    external: Option<String>,
) -> Result<Opened, HandshakeEnd> {
    while buf.len() < 8 {
        if let ProtocolHeaderCheck::Invalid = check_protocol_header(buf) {
            break;
        }
        if stream.read_buf(buf).await.map_err(|_| HandshakeEnd::Drop)? == 0 {
            return Err(HandshakeEnd::Drop);
        }
    }
    if !matches!(check_protocol_header(buf), ProtocolHeaderCheck::Valid) {
        let _ = stream.write_all(&PROTOCOL_HEADER).await;
        return Err(HandshakeEnd::Drop);
    }
    let _ = buf.split_to(8);
    // RabbitMQ's `auth_mechanisms`, in order; EXTERNAL only where a verified client certificate
    // names the user.
    let offered: Vec<&str> = broker
        .config()
        .auth_mechanisms
        .iter()
        .map(String::as_str)
        .filter(|m| *m != "EXTERNAL" || external.is_some())
        .collect();
    send(
        stream,
        AMQPClass::Connection(connection::AMQPMethod::Start(connection::Start {
            version_major: 0,
            version_minor: 9,
            server_properties: server_properties(),
            mechanisms: LongString::from(offered.join(" ")),
            locales: LongString::from("en_US"),
        })),
    )
    .await?;
    let AMQPClass::Connection(connection::AMQPMethod::StartOk(start_ok)) =
        read_method(stream, buf).await?
    else {
        return Err(HandshakeEnd::Drop);
    };
    let blocked_capable = has_capability(&start_ok.client_properties, "connection.blocked");
    let mechanism = start_ok.mechanism.as_str().to_string();
    if !offered.contains(&mechanism.as_str()) {
        return Err(HandshakeEnd::Drop);
    }
    let external_ok = mechanism == "EXTERNAL";
    let login = if external_ok {
        // RabbitMQ's EXTERNAL: the response is ignored, the certificate names the user.
        external.map(|user| (user, String::new()))
    } else {
        credentials(&mechanism, start_ok.response.as_bytes())
    };
    let ok = match &login {
        Some((user, _)) if external_ok => broker.access().authenticate_external(user, peer),
        Some((user, pass)) => broker.authenticate(user, pass, peer),
        None => false,
    };
    let user = match login {
        Some((user, _)) if ok => user,
        other => {
            let who = other.map(|(u, _)| u).unwrap_or_default();
            tracing::info!(%peer, user = %who, "{mechanism} login refused: user '{who}' - invalid credentials");
            return Err(HandshakeEnd::Refuse(
                ServerError::LoginRefused {
                    mechanism: mechanism.to_string(),
                }
                .into(),
            ));
        }
    };
    let cfg = broker.config();
    send(
        stream,
        AMQPClass::Connection(connection::AMQPMethod::Tune(connection::Tune {
            channel_max: cfg.channel_max,
            frame_max: cfg.frame_max,
            heartbeat: cfg.heartbeat,
        })),
    )
    .await?;
    let AMQPClass::Connection(connection::AMQPMethod::TuneOk(tune)) =
        read_method(stream, buf).await?
    else {
        return Err(HandshakeEnd::Drop);
    };
    if tune.frame_max < FRAME_MIN_SIZE
        || tune.frame_max > cfg.frame_max
        || tune.channel_max == 0
        || tune.channel_max > cfg.channel_max
    {
        return Err(HandshakeEnd::Drop);
    }
    let AMQPClass::Connection(connection::AMQPMethod::Open(open)) =
        read_opening_method(stream, buf).await?
    else {
        return Err(HandshakeEnd::Drop);
    };
    let vhost_name = open.virtual_host.as_str().to_string();
    let Some(vhost) = broker.vhost(&vhost_name) else {
        return Err(HandshakeEnd::Refuse(
            ServerError::VHostNotFound {
                vhost: vhost_name.to_string(),
            }
            .into(),
        ));
    };
    // RabbitMQ's order: node, vhost and user connection limits, then vhost access.
    let slot = broker
        .limits()
        .open_connection(&vhost_name, &user)
        .map_err(HandshakeEnd::Refuse)?;
    let Some(access) = broker.access().permissions(&user, &vhost_name) else {
        tracing::info!(peer = %peer, user = %user, vhost = %vhost_name, "vhost access refused");
        return Err(HandshakeEnd::Refuse(
            ServerError::VHostAccessRefused {
                vhost: vhost_name.to_string(),
                user: user.to_string(),
            }
            .into(),
        ));
    };
    send(
        stream,
        AMQPClass::Connection(connection::AMQPMethod::OpenOk(connection::OpenOk {})),
    )
    .await?;
    Ok(Opened {
        user,
        access,
        vhost,
        vhost_name,
        frame_max: tune.frame_max,
        channel_max: tune.channel_max,
        heartbeat: tune.heartbeat,
        blocked_capable,
        slot,
        client_properties: start_ok.client_properties,
        mechanism,
    })
}
