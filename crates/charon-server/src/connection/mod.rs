//! One AMQP connection: the task that reads frames, owns every channel's state and answers
//! methods, plus its writer task ([`writer`]).
//!
//! Frames are decoded from a read buffer, handled in order, and replies are encoded into an
//! output buffer that goes to the writer once per read batch, so many replies share a syscall.

mod channel;
mod channel_map;
mod commits;
mod confirms;
mod consumer_timeout;
mod handshake;
mod methods;
mod publish_batch;
mod read_pace;
mod read_size;
mod route_cache;
mod shapes;
mod transport;
mod writer;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use charon_core::ConnectionId;
use charon_protocol::methods::connection;
use charon_protocol::{
    AMQPClass, FRAME_BODY, FRAME_HEADER, Frame, HotMethod, decode_frame, encode_heartbeat,
    encode_method,
};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::access::VHostAccess;
use crate::broker::Broker;
use crate::error::{AmqpError, ServerError};
use crate::handles::{ConnEvent, ConnHandle};
use crate::locks::RwLockExt;
use crate::vhost::VHostState;
use handshake::HandshakeEnd;
use methods::HotRest;
use writer::Outgoing;

/// Room a busy connection encodes its output into (see [`Connection::flush`]).
const OUT_CHUNK: usize = 64 * 1024;
/// Most output room a connection keeps after a direct write (a batch of a thousand deliveries
/// of small messages is ~100-250 KiB).
const KEEP_OUT: usize = 16 * OUT_CHUNK;

pub(crate) use transport::Transport;

/// Serves one accepted TCP connection until it closes.
pub(crate) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    serve_on(stream, peer, broker, shutdown, None).await;
}

/// Serves one connection on any transport until it closes. `external` is the login the
/// `EXTERNAL` mechanism offers (a TLS client certificate's CN), if any.
pub(crate) async fn serve_on<S: Transport>(
    stream: S,
    peer: SocketAddr,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
    external: Option<String>,
) {
    let local = stream.local_addr_or(peer);
    let ssl = stream.is_tls();
    let mut stream = stream;
    let mut buf = BytesMut::with_capacity(read_size::MIN);
    let opened = tokio::time::timeout(
        Duration::from_secs(10),
        handshake::open(&mut stream, &mut buf, &broker, peer.ip(), external),
    )
    .await;
    let opened = match opened {
        Ok(Ok(o)) => o,
        Ok(Err(HandshakeEnd::Refuse(err))) => {
            refuse(stream, buf, err).await;
            return;
        }
        Ok(Err(HandshakeEnd::Drop)) | Err(_) => return,
    };
    let (mut reader, write_half) = stream.split_io();
    let (handle, events) = ConnHandle::new();
    let (wtx, wrx) = mpsc::unbounded_channel();
    let (writer, direct) = writer::start::<S>(write_half, wrx, handle.flow_arc());
    let impersonator = broker.access().has_tag(&opened.user, "impersonator");
    let id = broker.next_id();
    let admin = broker
        .admin()
        .connections
        .register(crate::admin::connections::ConnFacts {
            id,
            peer,
            local,
            user: opened.user.clone(),
            vhost: opened.vhost_name.clone(),
            frame_max: opened.frame_max,
            channel_max: opened.channel_max,
            heartbeat: opened.heartbeat,
            client_properties: crate::admin::json::table_to_json(&opened.client_properties),
            ssl,
            auth_mechanism: opened.mechanism.clone(),
            conn: handle.clone(),
        });
    let mut conn = Connection {
        id,
        admin,
        impersonator,
        broker,
        vhost: opened.vhost,
        vhost_name: opened.vhost_name,
        user: opened.user,
        access: opened.access,
        frame_max: opened.frame_max,
        channel_max: opened.channel_max,
        heartbeat: opened.heartbeat,
        channels: channel_map::ChannelMap::default(),
        out: BytesMut::new(),
        out_deliveries: 0,
        wtx,
        direct,
        commits: commits::CommitWaiter::new(handle.clone()),
        handle,
        closing: false,
        blocked_capable: opened.blocked_capable,
        has_published: false,
        blocked: false,
        page_waits: Vec::new(),
        in_flow: false,
        slot: opened.slot,
        owes_close_ok: false,
        confirms_due: Vec::new(),
        confirm_replies: Vec::new(),
        spare_targets: Vec::new(),
        route_cache: route_cache::RouteCache::default(),
        publish_batches: publish_batch::PublishBatches::default(),
        settles: Vec::new(),
        frames_in: 0,
        enqueue_clock: None,
        alarms: crate::broker::Alarms::default(),
        shutdown_sent: false,
        close_deadline: None,
    };
    let fd = S::read_fd(&reader);
    conn.run(&mut reader, fd, buf, events, shutdown).await;
    conn.cleanup().await;
    conn.broker.admin().connections.deregister(conn.id);
    let linger = conn.owes_close_ok;
    if linger {
        // RabbitMQ answers connection.close only once channels and exclusive queues are gone.
        encode_method(
            &mut conn.out,
            0,
            &AMQPClass::Connection(connection::AMQPMethod::CloseOk(connection::CloseOk {})),
        );
        conn.flush();
    }
    let heartbeat = conn.heartbeat;
    drop(conn);
    let write_half = writer.finish().await;
    if linger && write_half.is_some() {
        discard_until_closed(&mut reader, heartbeat).await;
    }
    if let Some(w) = write_half {
        w.shutdown().await;
    }
}

/// The connection loop's wait for the next group commit ([`commits::next_commit`]).
type CommitChange =
    std::pin::Pin<Box<dyn std::future::Future<Output = (crate::queue::CommitWatch, bool)> + Send>>;

/// How long a connection told to close (shutdown, management) waits for close-ok.
const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// Completes when the future in `f` does (never when there is none).
async fn poll_some<F: std::future::Future + Unpin>(f: &mut Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// After close-ok, reads and discards until the client closes the socket (a client may still be
/// flushing frames it queued before its connection.close), for at most the heartbeat timeout,
/// capped at 30 s, like RabbitMQ's `?CLOSING_TIMEOUT`.
async fn discard_until_closed<R: AsyncRead + Unpin>(reader: &mut R, heartbeat: u16) {
    let secs = if heartbeat > 0 && heartbeat < 30 {
        u64::from(heartbeat)
    } else {
        30
    };
    let mut sink = vec![0u8; 16 * 1024];
    let _ = tokio::time::timeout(Duration::from_secs(secs), async {
        loop {
            match reader.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
}

/// Sends connection.close for a failed handshake, waits briefly for close-ok, closes.
async fn refuse<S: Transport>(mut stream: S, mut buf: BytesMut, err: AmqpError) {
    use tokio::io::AsyncWriteExt;
    let mut out = BytesMut::new();
    encode_method(&mut out, 0, &close_method(&err));
    if stream.write_all(&out).await.is_ok() {
        let _ = tokio::time::timeout(Duration::from_secs(3), async {
            loop {
                match decode_frame(&mut buf, 0) {
                    Ok(Some(Frame::Method { method, .. }))
                        if matches!(
                            *method,
                            AMQPClass::Connection(connection::AMQPMethod::CloseOk(_))
                        ) =>
                    {
                        return;
                    }
                    Ok(Some(_)) => continue,
                    Ok(None) => {}
                    Err(_) => return,
                }
                match stream.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
    }
}

fn close_method(err: &AmqpError) -> AMQPClass {
    AMQPClass::Connection(connection::AMQPMethod::Close(connection::Close {
        reply_code: err.code.code(),
        reply_text: err.text.as_str().into(),
        class_id: err.class_id,
        method_id: err.method_id,
    }))
}

/// State of one open connection, owned by its task.
pub(crate) struct Connection {
    pub(crate) id: ConnectionId,
    /// This connection in the management registry (counters, close requests).
    pub(crate) admin: Arc<crate::admin::ConnEntry>,
    pub(crate) broker: Arc<Broker>,
    pub(crate) vhost: Arc<VHostState>,
    pub(crate) vhost_name: String,
    pub(crate) user: String,
    /// The user's permissions on this vhost, resolved at connection.open.
    pub(crate) access: Arc<VHostAccess>,
    /// The user may publish with any user_id (tag `impersonator`).
    pub(crate) impersonator: bool,
    pub(crate) frame_max: u32,
    pub(crate) channel_max: u16,
    pub(crate) heartbeat: u16,
    /// By channel id (a fast hash: looked up several times per publish).
    pub(crate) channels: channel_map::ChannelMap,
    /// Encoded frames not yet handed to the writer.
    pub(crate) out: BytesMut,
    pub(crate) out_deliveries: usize,
    wtx: mpsc::UnboundedSender<Outgoing>,
    /// Plain TCP: writes without the writer task while it has nothing queued.
    direct: Option<writer::Direct>,
    pub(crate) handle: ConnHandle,
    /// Waits for the store commits of confirmed persistent publishes.
    pub(crate) commits: commits::CommitWaiter,
    /// connection.close sent; waiting for close-ok.
    pub(crate) closing: bool,
    /// The client announced `connection.blocked`.
    blocked_capable: bool,
    /// The connection has published (resource alarms pause only publishers).
    pub(crate) has_published: bool,
    /// Reading is paused by a resource alarm.
    blocked: bool,
    /// Queues this connection published to whose page-out lags (`handles::page_flow`), by
    /// queue id: reading waits until each lowers its flag.
    page_waits: Vec<(u64, tokio::sync::watch::Receiver<bool>)>,
    /// Reading is paused by page-out backpressure (state `flow`).
    in_flow: bool,
    /// Counted against connection limits until the connection is dropped.
    pub(crate) slot: crate::limits::ConnectionSlot,
    /// The client sent connection.close: close-ok goes out after cleanup.
    pub(crate) owes_close_ok: bool,
    /// basic.ack/nack/reject of this read batch not yet sent to their queues
    /// (`methods/settles.rs`).
    pub(crate) settles: methods::Gathered,
    /// Channels with confirms settled since the last flush: their acks go out together, as
    /// `multiple=true` runs, when the batch is flushed.
    pub(crate) confirms_due: Vec<u16>,
    /// Room for the confirms one channel sends at a flush, kept between flushes.
    pub(crate) confirm_replies: Vec<confirms::ConfirmReply>,
    /// An emptied target list of an earlier publish, kept for the next one's routing (no
    /// allocation per publish routed to one queue).
    pub(crate) spare_targets: Vec<crate::handles::QueueHandle>,
    /// The queues the last cacheable publish was routed to, while the topology is unchanged
    /// (`route_cache.rs`).
    pub(crate) route_cache: route_cache::RouteCache,
    /// Single-target publishes of the read batch not yet handed to their queues
    /// (`publish_batch.rs`).
    pub(crate) publish_batches: publish_batch::PublishBatches,
    /// Frames decoded so far (read pacing counts the frames each read took).
    frames_in: u64,
    /// The wall clock (ms) read for the first stored publish since the connection last read its
    /// socket or waited for anything: the enqueue time of the stored publishes handled after it
    /// without waiting (one clock read a read batch, not one a message; `enqueue_ms`).
    pub(crate) enqueue_clock: Option<u64>,
    /// The resource alarms as last read (at the start, then on `Control::AlarmChanged`).
    alarms: crate::broker::Alarms,
    /// Told to close for the broker's shutdown.
    shutdown_sent: bool,
    /// When a close the broker or management asked for gives up waiting for close-ok.
    close_deadline: Option<Instant>,
}

/// How the connection loop goes on after a frame.
pub(crate) enum Next {
    Continue,
    Stop,
}

impl Connection {
    /// Resource alarm: a connection that publishes is paused (its socket is not read) while the
    /// alarm is on, and told with connection.blocked / connection.unblocked when it announced that
    /// capability, as RabbitMQ does. Consumers on other connections keep working.
    fn on_alarm(&mut self, alarms: crate::broker::Alarms) {
        let pause = alarms.any() && self.has_published;
        if pause == self.blocked {
            return;
        }
        self.blocked = pause;
        self.admin
            .blocked
            .store(pause, std::sync::atomic::Ordering::Relaxed);
        if !self.blocked_capable {
            return;
        }
        let m = if pause {
            connection::AMQPMethod::Blocked(connection::Blocked {
                reason: alarms.reason().into(),
            })
        } else {
            connection::AMQPMethod::Unblocked(connection::Unblocked {})
        };
        encode_method(&mut self.out, 0, &AMQPClass::Connection(m));
    }

    /// The broker's shutdown: connection.close with 320, once.
    pub(crate) fn on_shutdown(&mut self) {
        if self.shutdown_sent {
            return;
        }
        self.shutdown_sent = true;
        self.close_connection(AmqpError::from(ServerError::Shutdown));
        self.close_deadline = Some(Instant::now() + CLOSE_WAIT);
    }

    /// Management asked to close the connection: connection.close with 320 and `reason`,
    /// unless it is closing already.
    pub(crate) fn on_close_request(&mut self, reason: String) {
        if self.closing {
            return;
        }
        let err = AmqpError::new(charon_protocol::ReplyCode::ConnectionForced, reason);
        self.close_connection(err);
        self.close_deadline = Some(Instant::now() + CLOSE_WAIT);
    }

    /// The resource alarms changed: read them (acted on at the top of the next turn).
    pub(crate) fn on_alarm_changed(&mut self) {
        self.alarms = self.broker.alarm_state();
    }

    /// Queue `q`, just published to, has its page-out backpressure flag raised: the socket is
    /// not read again until it is lowered (`handles::page_flow`).
    pub(crate) fn wait_for_page_out(&mut self, q: &crate::handles::QueueHandle) {
        if !self.page_waits.iter().any(|(id, _)| *id == q.id()) {
            self.page_waits.push((q.id(), q.page_flow().subscribe()));
        }
    }

    /// Drops the waits whose queue caught up; sets the `flow` state while one remains.
    /// Returns a receiver to wait on, if reading must wait.
    fn page_flow_wait(&mut self) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.page_waits
            .retain(|(_, rx)| crate::handles::still_raised(rx));
        let flow = !self.page_waits.is_empty();
        if flow != self.in_flow {
            self.in_flow = flow;
            self.admin
                .flow
                .store(flow, std::sync::atomic::Ordering::Relaxed);
        }
        self.page_waits.first().map(|(_, rx)| rx.clone())
    }

    async fn run<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
        fd: Option<std::os::fd::RawFd>,
        mut buf: BytesMut,
        mut events: mpsc::UnboundedReceiver<ConnEvent>,
        shutdown: CancellationToken,
    ) {
        let interval = if self.heartbeat == 0 {
            Duration::from_secs(3600)
        } else {
            Duration::from_secs(u64::from(self.heartbeat))
        };
        // One timer for the heartbeat (every `interval / 2`) and the consumer-timeout check:
        // a second timer cost a second `Sleep` poll on every wake-up that found nothing ready
        // (docs/performance.md, "Persistent/transient path, part 10").
        let beat_every = interval / 2;
        let check_every = consumer_timeout::check_interval(self.broker.config().consumer_timeout);
        let period = beat_every.min(check_every);
        let mut ticker = tokio::time::interval(period);
        // A job is done at the first tick at most half a period before it is due: its gaps stay
        // within half a period of its own interval (heartbeats at most 3/4 of the heartbeat
        // timeout apart, as a period may not divide the other interval).
        let early = period / 2;
        let (mut beat_due, mut check_due) = (Instant::now(), Instant::now());
        let mut last_read = Instant::now();
        let mut sizer = read_size::ReadSizer::default();
        let mut pace =
            read_pace::ReadPace::new(self.broker.config().read_pace_min_reads, Instant::now());
        // Set while reading pauses (`read_pace`): the socket is read again once it fires.
        let mut pausing = false;
        // The socket signals readable only once a read's worth is there while reading pauses.
        let mut quiet = crate::quiet_socket::Quiet::new(fd);
        let pause = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(pause);
        // Shutdown, management closes and alarm changes come as `ConnEvent::Control` events
        // (`admin::connections::ConnRegistry::signal_all`), not as futures polled on every
        // wake-up (docs/performance.md, "Persistent/transient path, part 10"). This
        // connection registered before these reads, so a change made after them is sent.
        if shutdown.is_cancelled() {
            self.on_shutdown();
        }
        self.on_alarm_changed();
        // The wait for the next group commit while publishes wait for one (armed when they do).
        let mut commit_change: Option<CommitChange> = None;
        // Frames that arrived with the handshake's last read.
        if let Next::Stop = self.process(&mut buf).await {
            self.flush();
            return;
        }
        self.flush();
        loop {
            self.on_alarm(self.alarms);
            self.apply_commits();
            self.flush();
            if commit_change.is_none()
                && self.commits.waiting()
                && let Some(w) = self.commits.loop_watch()
            {
                commit_change = Some(Box::pin(commits::next_commit(w)));
            }
            let mut page_wait = self.page_flow_wait();
            let paused = self.blocked || page_wait.is_some();
            sizer.prepare(&mut buf);
            let room = buf.capacity() - buf.len();
            // A read's outcome.
            let mut got: Option<std::io::Result<usize>> = None;
            tokio::select! {
                biased;
                ev = events.recv() => {
                    let Some(ev) = ev else { return };
                    self.on_event(ev);
                    for _ in 0..256 {
                        match events.try_recv() {
                            Ok(ev) => self.on_event(ev),
                            Err(_) => break,
                        }
                    }
                }
                (w, alive) = poll_some(&mut commit_change), if commit_change.is_some() => {
                    commit_change = None;
                    if !alive {
                        self.commits.store_gone();
                    } else if self.commits.waiting() {
                        commit_change = Some(Box::pin(commits::next_commit(w)));
                    }
                }
                () = async {
                    if let Some(rx) = page_wait.as_mut() {
                        crate::handles::lowered(rx).await;
                    }
                }, if page_wait.is_some() => {}
                () = &mut pause, if pausing => {
                    pausing = false;
                    quiet.resume();
                }
                r = reader.read_buf(&mut buf), if !paused && !pausing => got = Some(r),
                _ = ticker.tick() => {
                    let now = Instant::now();
                    if now + early >= check_due {
                        check_due = now + check_every;
                        self.check_consumer_timeouts().await;
                    }
                    if now + early >= beat_due {
                        beat_due = now + beat_every;
                        if paused {
                            // Not reading while blocked: the client's heartbeats wait in the
                            // socket.
                            last_read = now;
                        }
                        if self.heartbeat > 0 && now.duration_since(last_read) > interval * 2 {
                            tracing::info!(conn = self.id, "missed heartbeats from client, closing");
                            return;
                        }
                        if self.heartbeat > 0 {
                            encode_heartbeat(&mut self.out);
                        }
                    }
                    if self.close_deadline.is_some_and(|d| Instant::now() > d) {
                        self.flush();
                        return;
                    }
                }
            }
            if let Some(r) = got {
                let n = match r {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                sizer.observe(n);
                crate::admin::ChannelStats::bump(&self.admin.recv_oct, n as u64);
                crate::admin::ChannelStats::bump(&self.admin.recv_cnt, 1);
                last_read = Instant::now();
                let frames = self.frames_in;
                if let Next::Stop = self.process(&mut buf).await {
                    self.flush();
                    return;
                }
                if pace.after_read(self.frames_in - frames, n >= room, last_read) {
                    pausing = true;
                    quiet.pause(room);
                    pause
                        .as_mut()
                        .reset(tokio::time::Instant::now() + read_pace::PAUSE);
                }
            }
            self.flush();
        }
    }

    /// Decodes and handles every complete frame in `buf`; the publishes gathered on the way
    /// reach their queues before it returns.
    async fn process(&mut self, buf: &mut BytesMut) -> Next {
        self.enqueue_clock = None;
        let next = self.process_frames(buf).await;
        if !self.publish_batches.is_empty() {
            self.flush_publishes().await;
        }
        next
    }

    /// [`Connection::process`] but the last flush.
    async fn process_frames(&mut self, buf: &mut BytesMut) -> Next {
        // The frame at the front is the framer's (a hot method it must refuse).
        let mut to_framer = false;
        loop {
            // basic.publish/ack/nack/reject read in place (`methods/fast.rs`, `hot_method`).
            let hot = if std::mem::take(&mut to_framer) {
                None
            } else {
                charon_protocol::peek_hot(buf, self.frame_max)
            };
            let frame = match hot {
                Some(hot) => {
                    let len = hot.len;
                    if matches!(hot.method, HotMethod::Publish { .. }) && !self.settles.is_empty() {
                        self.send_settles().await;
                        self.enqueue_clock = None;
                    }
                    let rest = self.hot_method(hot.channel, hot.method);
                    if let HotRest::Framer = rest {
                        to_framer = true;
                        continue;
                    }
                    self.frames_in += 1;
                    bytes::Buf::advance(buf, len);
                    match rest {
                        HotRest::Frame(frame) => frame,
                        HotRest::Done | HotRest::Framer => continue,
                    }
                }
                None => {
                    // Content frames read in place (`methods/fast.rs`, `content_in_place`);
                    // settles gathered so far go first, as below.
                    if matches!(buf.first(), Some(&(FRAME_HEADER | FRAME_BODY)))
                        && !self.settles.is_empty()
                    {
                        self.send_settles().await;
                        self.enqueue_clock = None;
                    }
                    if let Some(rest) = self.content_in_place(buf) {
                        self.frames_in += 1;
                        match rest {
                            None => continue,
                            Some(rest) => match self.content_rest(rest).await {
                                Next::Stop => return Next::Stop,
                                Next::Continue => {
                                    self.enqueue_clock = None;
                                    continue;
                                }
                            },
                        }
                    }
                    match decode_frame(buf, self.frame_max) {
                        Ok(Some(f)) => {
                            self.frames_in += 1;
                            f
                        }
                        Ok(None) => {
                            if !self.settles.is_empty() {
                                self.send_settles().await;
                            }
                            return Next::Continue;
                        }
                        Err(e) => {
                            if !self.settles.is_empty() {
                                self.send_settles().await;
                            }
                            self.close_connection(e.into());
                            return Next::Stop;
                        }
                    }
                }
            };
            let Some(frame) = self.settle_fast(frame) else {
                continue;
            };
            if !self.settles.is_empty() {
                // Settles gathered so far go before anything else reaches a queue.
                self.send_settles().await;
                self.enqueue_clock = None;
            }
            let Some(frame) = self.start_publish_fast(frame) else {
                continue;
            };
            let next = if self.is_content(&frame) {
                match self.content_now(frame) {
                    None => Next::Continue,
                    Some(rest) => self.content_rest(rest).await,
                }
            } else {
                // Gathered publishes go before anything else reaches a queue.
                if !self.publish_batches.is_empty() {
                    self.flush_publishes().await;
                }
                self.on_frame(frame).await
            };
            if let Next::Stop = next {
                return Next::Stop;
            }
            // Whatever waited above (settles sent, a publish's rest, another method) may have
            // taken a while: the next stored publish reads the clock again
            // (`enqueue_clock`, as after each wait in this loop).
            self.enqueue_clock = None;
        }
    }

    /// Applies the confirms of persistent publishes whose commits are on disk (one answer per
    /// channel per group commit; `commits.rs`).
    fn apply_commits(&mut self) {
        for (channel, answers) in self.commits.take_answers() {
            self.on_event(ConnEvent::Confirms { channel, answers });
        }
    }

    /// Hands encoded output to the writer.
    pub(crate) fn flush(&mut self) {
        if !self.confirms_due.is_empty() {
            // The list's room is kept for the next batch (no allocation per flush).
            let mut due = std::mem::take(&mut self.confirms_due);
            for &channel in &due {
                self.flush_confirms(channel);
            }
            due.clear();
            self.confirms_due = due;
        }
        self.write_out();
    }

    /// Hands the encoded output (`out`) to the socket or the writer, in order; the confirms
    /// still due stay due.
    pub(crate) fn write_out(&mut self) {
        if self.out.is_empty() {
            return;
        }
        if let Some(direct) = &self.direct {
            let n = direct.try_write(&self.out);
            if n == self.out.len() {
                crate::admin::ChannelStats::bump(&self.admin.send_oct, n as u64);
                self.handle
                    .flow()
                    .release(std::mem::take(&mut self.out_deliveries));
                if self.out.capacity() > KEEP_OUT {
                    // An unusually large batch went out: do not keep its room.
                    self.out = BytesMut::new();
                } else {
                    // The room is reused: the next batch encodes without growing it again
                    // (growing copies what is already encoded).
                    self.out.clear();
                }
                return;
            }
            crate::admin::ChannelStats::bump(&self.admin.send_oct, n as u64);
            bytes::Buf::advance(&mut self.out, n);
            direct.queue();
        }
        let bytes = self.out.split().freeze();
        if bytes.len() >= OUT_CHUNK / 8 && self.out.capacity() < OUT_CHUNK / 8 {
            // A busy connection: encode the next frames into one larger allocation. An idle
            // one keeps no spare room (10,000 idle connections are a goal).
            self.out.reserve(OUT_CHUNK);
        }
        crate::admin::ChannelStats::bump(&self.admin.send_oct, bytes.len() as u64);
        let deliveries = std::mem::take(&mut self.out_deliveries);
        if self.wtx.send(Outgoing { bytes, deliveries }).is_err() {
            self.handle.flow().release(deliveries);
        }
    }

    /// Sends connection.close and ignores everything but close/close-ok from now on.
    pub(crate) fn close_connection(&mut self, err: AmqpError) {
        if self.closing {
            return;
        }
        tracing::info!(conn = self.id, code = err.code.code(), text = %err.text, "closing connection with an error");
        self.closing = true;
        encode_method(&mut self.out, 0, &close_method(&err));
    }

    /// Releases everything the connection holds: consumers, unacked messages, exclusive queues.
    async fn cleanup(&mut self) {
        let ids: Vec<u16> = self.channels.keys().collect();
        for id in ids {
            if let Some(ch) = self.channels.remove(&id) {
                methods::release_channel(ch).await;
            }
        }
        let owned: Vec<_> = {
            let mut topo = self.vhost.topology.write_recover();
            let names = topo.queues_owned_by(self.id);
            names.iter().filter_map(|n| topo.remove_queue(n)).collect()
        };
        for entry in owned {
            let (tx, rx) = tokio::sync::oneshot::channel();
            if entry
                .handle
                .send(crate::handles::QueueCmd::Delete { reply: tx })
                .await
            {
                let _ = rx.await;
            }
        }
    }
}
