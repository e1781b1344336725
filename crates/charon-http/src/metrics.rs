//! Prometheus metrics (text exposition format 0.0.4) on `/metrics` and on the separate
//! `prometheus_listen` listener (default 127.0.0.1:15692, as rabbitmq_prometheus), with
//! rabbitmq_prometheus's metric names where one exists (per-object, labelled `vhost`/`queue`)
//! and Charon's dead-letter metrics RabbitMQ lacks:
//! `charon_queue_dead_lettered_total{vhost,queue,reason}`,
//! `charon_queue_discarded_total{vhost,queue,reason}` (left without a DLX),
//! `charon_queue_dead_letters_dropped_total{vhost,queue,cause}` (`dlx_missing`, `no_route`),
//! `charon_dlq_oldest_message_age_seconds{vhost,queue}` (queues whose head message was
//! dead-lettered), and the alarms as gauges (`rabbitmq_alarms_*`, `charon_alarm{resource}`).
//!
//! Every value is a snapshot taken at scrape time from the broker's interface (queue actors
//! answer with their counters); the snapshot is a `prometheus-client` custom [`Collector`]
//! registered in a per-scrape `Registry` and encoded by the crate (OpenMetrics text, which the
//! Prometheus text parser reads: counters end in `_total`, `# EOF` is a comment to it).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use charon_server::admin::REASONS;
use charon_server::admin::node::AlarmKind;
use charon_server::broker::Broker;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The Prometheus listener address, if enabled (empty `prometheus_listen` disables it).
pub fn prometheus_listen(broker: &Broker) -> Option<String> {
    let a = &broker.config().prometheus_listen;
    (!a.is_empty()).then(|| a.clone())
}

/// One metric family of a scrape: rabbitmq_prometheus's name (counters with their `_total`),
/// type, help and samples.
#[derive(Debug)]
struct Family {
    name: String,
    kind: &'static str,
    help: String,
    samples: Vec<(Vec<(String, String)>, f64)>,
}

/// A scrape's snapshot, taken from the broker's interface when scraped and encoded by
/// `prometheus-client` as a custom [`Collector`].
#[derive(Debug, Default)]
struct Out(Vec<Family>);

impl Out {
    fn family(&mut self, name: &str, kind: &'static str, help: &str) {
        self.0.push(Family {
            name: name.to_string(),
            kind,
            help: help.to_string(),
            samples: Vec::new(),
        });
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        match self.0.last_mut() {
            Some(f) if f.name == name => f.samples.push((labels, value)),
            _ => {
                self.family(name, "gauge", name);
                if let Some(f) = self.0.last_mut() {
                    f.samples.push((labels, value));
                }
            }
        }
    }

    fn one(&mut self, name: &str, kind: &'static str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

impl Collector for Out {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for f in &self.0 {
            if f.kind == "counter" {
                // prometheus-client appends `_total` to a counter's samples.
                let name = f.name.strip_suffix("_total").unwrap_or(&f.name);
                let mut m = encoder.encode_descriptor(name, &f.help, None, MetricType::Counter)?;
                for (labels, v) in &f.samples {
                    ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
                }
            } else {
                let mut m = encoder.encode_descriptor(&f.name, &f.help, None, MetricType::Gauge)?;
                for (labels, v) in &f.samples {
                    ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
                }
            }
        }
        Ok(())
    }
}

/// The whole scrape.
pub async fn render(broker: &Broker) -> String {
    let mut o = Out::default();
    let node = charon_server::admin::node_name();
    o.family(
        "rabbitmq_build_info",
        "gauge",
        "RabbitMQ-compatible build info",
    );
    o.sample(
        "rabbitmq_build_info",
        &[
            ("rabbitmq_version", "3.10.8"),
            ("product_name", "Charon"),
            ("product_version", env!("CARGO_PKG_VERSION")),
        ],
        1.0,
    );
    o.family("rabbitmq_identity_info", "gauge", "Node and cluster names");
    o.sample(
        "rabbitmq_identity_info",
        &[("rabbitmq_node", &node), ("rabbitmq_cluster", &node)],
        1.0,
    );
    let reg = &broker.admin().connections;
    let conns = reg.list();
    let channels: usize = conns.iter().map(|c| c.channels(&reg.retired).len()).sum();
    o.one(
        "rabbitmq_connections",
        "gauge",
        "Connections currently open",
        conns.len() as f64,
    );
    o.one(
        "rabbitmq_channels",
        "gauge",
        "Channels currently open",
        channels as f64,
    );
    o.one(
        "rabbitmq_connections_opened_total",
        "counter",
        "Total number of connections opened",
        reg.opened_total.load(Ordering::Relaxed) as f64,
    );
    o.one(
        "rabbitmq_connections_closed_total",
        "counter",
        "Total number of connections closed or terminated",
        reg.closed_total.load(Ordering::Relaxed) as f64,
    );
    let t = reg.totals();
    for (name, help, v) in [
        (
            "rabbitmq_channel_messages_published_total",
            "Total number of messages published into an exchange on a channel",
            t.publish,
        ),
        (
            "rabbitmq_channel_messages_delivered_ack_total",
            "Total number of messages delivered to consumers in manual acknowledgement mode",
            t.deliver,
        ),
        (
            "rabbitmq_channel_messages_delivered_total",
            "Total number of messages delivered to consumers in automatic acknowledgement mode",
            t.deliver_no_ack,
        ),
        (
            "rabbitmq_channel_get_ack_total",
            "Total number of messages fetched with basic.get in manual acknowledgement mode",
            t.get,
        ),
        (
            "rabbitmq_channel_messages_acked_total",
            "Total number of messages acknowledged by consumers",
            t.ack,
        ),
        (
            "rabbitmq_channel_messages_redelivered_total",
            "Total number of messages redelivered to consumers",
            t.redeliver,
        ),
        (
            "rabbitmq_channel_messages_confirmed_total",
            "Total number of messages published into an exchange and confirmed on the channel",
            t.confirm,
        ),
        (
            "rabbitmq_channel_messages_unroutable_returned_total",
            "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
            t.return_unroutable,
        ),
    ] {
        o.one(name, "counter", help, v as f64);
    }
    let queues = broker.list_queues(None).await;
    o.one(
        "rabbitmq_queues",
        "gauge",
        "Queues available",
        queues.len() as f64,
    );
    let consumers: u64 = queues.iter().map(|q| u64::from(q.stats.consumers)).sum();
    o.one(
        "rabbitmq_consumers",
        "gauge",
        "Consumers currently connected",
        consumers as f64,
    );
    type Get = fn(&charon_server::queues_info::QueueInfo) -> f64;
    let per_queue: [(&str, &str, &str, Get); 7] = [
        (
            "rabbitmq_queue_messages",
            "gauge",
            "Sum of ready and unacknowledged messages - total queue depth",
            |q| f64::from(q.stats.messages) + f64::from(q.stats.unacked),
        ),
        (
            "rabbitmq_queue_messages_ready",
            "gauge",
            "Messages ready to be delivered to consumers",
            |q| f64::from(q.stats.messages),
        ),
        (
            "rabbitmq_queue_messages_unacked",
            "gauge",
            "Messages delivered to consumers but not yet acknowledged",
            |q| f64::from(q.stats.unacked),
        ),
        (
            "rabbitmq_queue_consumers",
            "gauge",
            "Consumers on a queue",
            |q| f64::from(q.stats.consumers),
        ),
        (
            "rabbitmq_queue_messages_ready_bytes",
            "gauge",
            "Size in bytes of ready messages",
            |q| q.details.ready_bytes as f64,
        ),
        (
            "rabbitmq_queue_messages_published_total",
            "counter",
            "Total number of messages published to queues",
            |q| q.details.counters.published as f64,
        ),
        (
            "rabbitmq_queue_messages_acked_total",
            "counter",
            "Total number of messages acknowledged on queues",
            |q| q.details.counters.acked as f64,
        ),
    ];
    for (name, kind, help, get) in per_queue {
        o.family(name, kind, help);
        for q in &queues {
            o.sample(name, &[("vhost", &q.vhost), ("queue", &q.name)], get(q));
        }
    }
    let name = "charon_queue_dead_lettered_total";
    o.family(
        name,
        "counter",
        "Messages dead-lettered from a queue (a DLX was set), by reason",
    );
    for q in &queues {
        for (i, r) in REASONS.iter().enumerate() {
            let v = q.details.counters.dead_lettered[i] as f64;
            o.sample(
                name,
                &[
                    ("vhost", &q.vhost),
                    ("queue", &q.name),
                    ("reason", r.as_str()),
                ],
                v,
            );
        }
    }
    let name = "charon_queue_dead_lettered_errors_total";
    o.family(
        name,
        "counter",
        "Messages dead-lettered from a queue carrying an error header, by reason and error \
         fingerprint (at most 100 fingerprints per queue, the rest as \"other\")",
    );
    for q in &queues {
        for e in &q.details.errors {
            for (i, r) in REASONS.iter().enumerate() {
                if e.by_reason[i] > 0 {
                    o.sample(
                        name,
                        &[
                            ("vhost", &q.vhost),
                            ("queue", &q.name),
                            ("reason", r.as_str()),
                            ("fingerprint", &e.fingerprint),
                        ],
                        e.by_reason[i] as f64,
                    );
                }
            }
        }
    }
    let name = "charon_queue_discarded_total";
    o.family(
        name,
        "counter",
        "Messages that left a queue without a DLX (rejected, expired, maxlen, delivery_limit)",
    );
    for q in &queues {
        for (i, r) in REASONS.iter().enumerate() {
            let v = q.details.counters.discarded[i] as f64;
            o.sample(
                name,
                &[
                    ("vhost", &q.vhost),
                    ("queue", &q.name),
                    ("reason", r.as_str()),
                ],
                v,
            );
        }
    }
    let name = "charon_queue_dead_letters_dropped_total";
    o.family(name, "counter", "Dead letters dropped: the DLX does not exist (dlx_missing) or routed them nowhere (no_route)");
    for q in &queues {
        let dlx = q.stats.dead_letters_dropped_no_dlx as f64;
        let nr = q.details.dropped_no_route as f64;
        o.sample(
            name,
            &[
                ("vhost", &q.vhost),
                ("queue", &q.name),
                ("cause", "dlx_missing"),
            ],
            dlx,
        );
        o.sample(
            name,
            &[
                ("vhost", &q.vhost),
                ("queue", &q.name),
                ("cause", "no_route"),
            ],
            nr,
        );
    }
    let name = "charon_dlq_oldest_message_age_seconds";
    o.family(
        name,
        "gauge",
        "Age of the head message of a queue holding dead letters, since it was last dead-lettered",
    );
    let now_s = charon_server::admin::now_ms() / 1000;
    for q in &queues {
        if let Some(t) = q.details.head_death_time {
            let age = now_s.saturating_sub(t) as f64;
            o.sample(name, &[("vhost", &q.vhost), ("queue", &q.name)], age);
        }
    }
    let f = broker.node_facts();
    o.one(
        "rabbitmq_process_resident_memory_bytes",
        "gauge",
        "Memory used in bytes",
        f.memory.rss as f64,
    );
    o.one(
        "charon_memory_used_bytes",
        "gauge",
        "Memory use the memory alarm compares with its mark (vm_memory_calculation_strategy: resident set or allocator)",
        f.mem_used as f64,
    );
    o.one(
        "charon_allocated_bytes",
        "gauge",
        "Bytes allocated and not freed (live heap), as the global allocator counts them",
        f.memory.allocated() as f64,
    );
    o.one(
        "charon_allocator_committed_bytes",
        "gauge",
        "mimalloc's committed bytes (on Linux, pages it returned to the OS stay counted)",
        f.memory.allocator.map_or(0, |a| a.committed) as f64,
    );
    o.one(
        "charon_allocator_reserved_bytes",
        "gauge",
        "Address space the allocator (mimalloc) has reserved",
        f.memory.allocator.map_or(0, |a| a.reserved) as f64,
    );
    o.one(
        "charon_message_bodies_memory_bytes",
        "gauge",
        "Message body bytes queues hold in memory (counted against message_memory_budget)",
        f.mem_message_bodies as f64,
    );
    o.one(
        "rabbitmq_resident_memory_limit_bytes",
        "gauge",
        "Memory high watermark in bytes",
        f.mem_limit as f64,
    );
    o.one(
        "rabbitmq_process_open_fds",
        "gauge",
        "Open file descriptors",
        f.fd_used as f64,
    );
    o.one(
        "rabbitmq_process_max_fds",
        "gauge",
        "Open file descriptors limit",
        f.fd_total as f64,
    );
    o.one(
        "rabbitmq_disk_space_available_bytes",
        "gauge",
        "Disk space available in bytes",
        f.disk_free.unwrap_or(0) as f64,
    );
    o.one(
        "rabbitmq_disk_space_available_limit_bytes",
        "gauge",
        "Free disk space low watermark in bytes",
        f.disk_free_limit as f64,
    );
    o.one(
        "rabbitmq_erlang_uptime_seconds",
        "gauge",
        "Node uptime",
        f.uptime_ms as f64 / 1000.0,
    );
    let alarms = broker.alarms();
    let on = |k: AlarmKind| if alarms.contains(&k) { 1.0 } else { 0.0 };
    o.one(
        "rabbitmq_alarms_free_disk_space_watermark",
        "gauge",
        "is 1 if free disk space watermark alarm is in effect",
        on(AlarmKind::Disk),
    );
    o.one(
        "rabbitmq_alarms_memory_used_watermark",
        "gauge",
        "is 1 if VM memory watermark alarm is in effect",
        on(AlarmKind::Memory),
    );
    o.one(
        "rabbitmq_alarms_file_descriptor_limit",
        "gauge",
        "is 1 if file descriptor limit alarm is in effect",
        0.0,
    );
    o.family(
        "charon_alarm",
        "gauge",
        "1 while the resource alarm is in effect",
    );
    for k in AlarmKind::ALL {
        o.sample("charon_alarm", &[("resource", k.resource())], on(k));
    }
    let mut registry = Registry::default();
    registry.register_collector(Box::new(o));
    let mut text = String::with_capacity(16 * 1024);
    if let Err(e) = encode(&mut text, &registry) {
        tracing::error!(error = %e, "the metrics could not be encoded");
    }
    text
}

/// `GET /metrics`.
pub async fn metrics(State(broker): State<Arc<Broker>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(&broker).await,
    )
}

/// Serves `/metrics` on the Prometheus listener until `shutdown`.
pub async fn run(
    listener: TcpListener,
    broker: Arc<Broker>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(metrics))
        .with_state(broker);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
