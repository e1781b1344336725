//! Open connections and channels as the management API lists them, their message counters,
//! and closing a connection on request. The registry also carries the broker's rare signals to
//! every open connection ([`ConnRegistry::signal_all`]: shutdown, alarm changes) as events.
//!
//! Each counter has one writer (the connection task that owns the channel) and is a relaxed
//! atomic: the hot path pays one uncontended add. Readers sum them when asked. A channel's
//! [`ChannelStats`] is shared by the channel and the registry; once the channel is gone (only
//! the registry holds it) its counts are folded into the registry's totals of closed channels,
//! so broker-wide totals never go backwards.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::handles::{ConnEvent, ConnHandle, Control};

/// Message counts (cumulative).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// basic.publish received.
    pub publish: u64,
    /// Messages delivered to consumers (ack and no-ack).
    pub deliver: u64,
    /// Delivered to no-ack consumers.
    pub deliver_no_ack: u64,
    /// basic.get answered with a message.
    pub get: u64,
    /// Acknowledged.
    pub ack: u64,
    /// Delivered again (redelivered flag set).
    pub redeliver: u64,
    /// Publisher confirms sent.
    pub confirm: u64,
    /// Returned unroutable (mandatory).
    pub return_unroutable: u64,
}

impl Counters {
    /// Field-wise sum.
    pub fn add(&mut self, o: &Counters) {
        self.publish += o.publish;
        self.deliver += o.deliver;
        self.deliver_no_ack += o.deliver_no_ack;
        self.get += o.get;
        self.ack += o.ack;
        self.redeliver += o.redeliver;
        self.confirm += o.confirm;
        self.return_unroutable += o.return_unroutable;
    }
}

/// A consumer as listed (`/api/consumers`).
#[derive(Debug, Clone)]
pub struct ConsumerView {
    /// Consumer tag.
    pub tag: String,
    /// Queue consumed from.
    pub queue: String,
    /// Manual acknowledgement.
    pub ack_required: bool,
    /// Exclusive consumer.
    pub exclusive: bool,
    /// Per-consumer prefetch.
    pub prefetch: u16,
}

/// One channel's counters and facts, written by its connection task.
#[derive(Debug, Default)]
pub struct ChannelStats {
    /// basic.publish received.
    pub publish: AtomicU64,
    /// Messages delivered to consumers.
    pub deliver: AtomicU64,
    /// Delivered to no-ack consumers.
    pub deliver_no_ack: AtomicU64,
    /// basic.get with a message.
    pub get: AtomicU64,
    /// Acknowledged.
    pub ack: AtomicU64,
    /// Redelivered.
    pub redeliver: AtomicU64,
    /// Confirms sent.
    pub confirm: AtomicU64,
    /// Unroutable returns.
    pub return_unroutable: AtomicU64,
    /// Unacked deliveries now.
    pub unacked: AtomicU32,
    /// Prefetch for new consumers (basic.qos global=false).
    pub prefetch: AtomicU32,
    /// Confirm mode.
    pub confirm_mode: AtomicBool,
    /// Transactional.
    pub transactional: AtomicBool,
    /// Consumers on this channel.
    pub consumers: Mutex<Vec<ConsumerView>>,
}

impl ChannelStats {
    /// Adds one to a counter (relaxed; the channel's connection task is the only writer).
    pub fn bump(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn counters(&self) -> Counters {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Counters {
            publish: l(&self.publish),
            deliver: l(&self.deliver),
            deliver_no_ack: l(&self.deliver_no_ack),
            get: l(&self.get),
            ack: l(&self.ack),
            redeliver: l(&self.redeliver),
            confirm: l(&self.confirm),
            return_unroutable: l(&self.return_unroutable),
        }
    }

    /// Sets the unacked gauge.
    pub fn set_unacked(&self, n: usize) {
        self.unacked
            .store(u32::try_from(n).unwrap_or(u32::MAX), Ordering::Relaxed);
    }

    /// A consumer was added.
    pub fn consumer_added(&self, c: ConsumerView) {
        self.consumers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(c);
    }

    /// A consumer was removed.
    pub fn consumer_removed(&self, tag: &str) {
        self.consumers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|c| c.tag != tag);
    }

    /// The consumers now.
    pub fn consumer_list(&self) -> Vec<ConsumerView> {
        self.consumers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// One open connection as the registry knows it.
#[derive(Debug)]
pub struct ConnEntry {
    /// Broker-unique id.
    pub id: u64,
    /// RabbitMQ's connection name: `"peer -> local"`.
    pub name: String,
    /// Client address.
    pub peer: SocketAddr,
    /// Server address.
    pub local: SocketAddr,
    /// Logged-in user.
    pub user: String,
    /// Vhost.
    pub vhost: String,
    /// Wall-clock ms when it opened.
    pub connected_at: u64,
    /// Negotiated frame_max.
    pub frame_max: u32,
    /// Negotiated channel_max.
    pub channel_max: u16,
    /// Negotiated heartbeat (s).
    pub heartbeat: u16,
    /// The client's properties, as JSON.
    pub client_properties: serde_json::Value,
    /// Bytes received.
    pub recv_oct: AtomicU64,
    /// Bytes sent.
    pub send_oct: AtomicU64,
    /// Reads.
    pub recv_cnt: AtomicU64,
    /// Writes.
    pub send_cnt: AtomicU64,
    /// Paused by a resource alarm.
    pub blocked: AtomicBool,
    /// Paused by page-out backpressure from a queue it publishes to (RabbitMQ's `flow`).
    pub flow: AtomicBool,
    /// Over TLS.
    pub ssl: bool,
    /// The SASL mechanism used to log in.
    pub auth_mechanism: String,
    channels: Mutex<BTreeMap<u16, Arc<ChannelStats>>>,
    /// The connection's event channel (close requests, broker signals).
    conn: ConnHandle,
}

/// What a connection registers with.
#[derive(Debug)]
pub struct ConnFacts {
    /// Broker-unique id.
    pub id: u64,
    /// Client address.
    pub peer: SocketAddr,
    /// Server address.
    pub local: SocketAddr,
    /// User.
    pub user: String,
    /// Vhost.
    pub vhost: String,
    /// Negotiated frame_max.
    pub frame_max: u32,
    /// Negotiated channel_max.
    pub channel_max: u16,
    /// Negotiated heartbeat.
    pub heartbeat: u16,
    /// Client properties as JSON.
    pub client_properties: serde_json::Value,
    /// Over TLS.
    pub ssl: bool,
    /// The SASL mechanism used to log in.
    pub auth_mechanism: String,
    /// The connection's event channel.
    pub conn: ConnHandle,
}

impl ConnEntry {
    /// A channel opened; its counters are shared with the registry.
    pub fn channel_opened(&self, number: u16, stats: &Arc<ChannelStats>) {
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(number, stats.clone());
    }

    /// Open channels with their counters (closed ones are dropped from the list; their counts
    /// go to `retired`).
    pub fn channels(&self, retired: &Mutex<Counters>) -> Vec<(u16, Arc<ChannelStats>)> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        let gone: Vec<u16> = map
            .iter()
            .filter(|(_, s)| Arc::strong_count(s) == 1)
            .map(|(n, _)| *n)
            .collect();
        if !gone.is_empty() {
            let mut r = retired.lock().unwrap_or_else(|p| p.into_inner());
            for n in gone {
                if let Some(s) = map.remove(&n) {
                    r.add(&s.counters());
                }
            }
        }
        map.iter().map(|(n, s)| (*n, s.clone())).collect()
    }

    /// Asks the connection to close with 320 CONNECTION_FORCED and `reason`.
    pub fn request_close(&self, reason: String) {
        self.conn.send(ConnEvent::Control(Control::Close(reason)));
    }
}

/// All open connections.
#[derive(Debug, Default)]
pub struct ConnRegistry {
    conns: Mutex<HashMap<u64, Arc<ConnEntry>>>,
    /// Counts of channels that closed.
    pub retired: Mutex<Counters>,
    /// Connections opened since start.
    pub opened_total: AtomicU64,
    /// Connections closed since start.
    pub closed_total: AtomicU64,
}

impl ConnRegistry {
    /// Registers a connection after connection.open.
    pub fn register(&self, f: ConnFacts) -> Arc<ConnEntry> {
        let e = Arc::new(ConnEntry {
            id: f.id,
            name: format!("{} -> {}", f.peer, f.local),
            peer: f.peer,
            local: f.local,
            user: f.user,
            vhost: f.vhost,
            connected_at: crate::queue::now_ms(),
            frame_max: f.frame_max,
            channel_max: f.channel_max,
            heartbeat: f.heartbeat,
            client_properties: f.client_properties,
            recv_oct: AtomicU64::new(0),
            send_oct: AtomicU64::new(0),
            recv_cnt: AtomicU64::new(0),
            send_cnt: AtomicU64::new(0),
            blocked: AtomicBool::new(false),
            flow: AtomicBool::new(false),
            ssl: f.ssl,
            auth_mechanism: f.auth_mechanism,
            channels: Mutex::new(BTreeMap::new()),
            conn: f.conn,
        });
        self.conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(f.id, e.clone());
        self.opened_total.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            conn = e.id,
            "connection ({}): user '{}' authenticated and granted access to vhost '{}'",
            e.name,
            e.user,
            e.vhost
        );
        e
    }

    /// The connection is gone: its channels' counts go to the totals.
    pub fn deregister(&self, id: u64) {
        let e = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        if let Some(e) = e {
            let chans = std::mem::take(&mut *e.channels.lock().unwrap_or_else(|p| p.into_inner()));
            let mut r = self.retired.lock().unwrap_or_else(|p| p.into_inner());
            for s in chans.values() {
                r.add(&s.counters());
            }
            self.closed_total.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                conn = e.id,
                "closing AMQP connection ({}, vhost: '{}', user: '{}')",
                e.name,
                e.vhost,
                e.user
            );
        }
    }

    /// Sends `signal()` to every registered connection. A connection registers before it
    /// reads the broker's state it is signalled about (shutdown, alarms), so one that registers
    /// after this walk has passed sees the new state itself.
    pub fn signal_all(&self, signal: impl Fn() -> Control) {
        let conns = self.conns.lock().unwrap_or_else(|p| p.into_inner());
        for e in conns.values() {
            e.conn.send(ConnEvent::Control(signal()));
        }
    }

    /// Open connections, by id.
    pub fn list(&self) -> Vec<Arc<ConnEntry>> {
        let mut v: Vec<_> = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        v.sort_by_key(|e| e.id);
        v
    }

    /// The connection named `name`.
    pub fn by_name(&self, name: &str) -> Option<Arc<ConnEntry>> {
        self.list().into_iter().find(|e| e.name == name)
    }

    /// Broker-wide totals: closed channels plus open ones.
    pub fn totals(&self) -> Counters {
        let mut t = Counters::default();
        for e in self.list() {
            for (_, s) in e.channels(&self.retired) {
                t.add(&s.counters());
            }
        }
        t.add(&self.retired.lock().unwrap_or_else(|p| p.into_inner()));
        t
    }
}
