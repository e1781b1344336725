//! Command-line arguments (`clap::Args`) shared by `charon bench` and the example.

use crate::BenchError;
use crate::scenario::Scenario;

/// Longest queue name AMQP allows (a shortstr).
const MAX_QUEUE_NAME: usize = 255;

/// Options of a benchmark run, modelled on RabbitMQ PerfTest.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Broker URI: amqp://user:pass@host:port/vhost (%2f = "/").
    #[arg(
        long,
        env = "CHARON_BENCH_URI",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f"
    )]
    pub uri: String,
    /// Number of producers (one connection each).
    #[arg(short = 'x', long, default_value_t = 1)]
    pub producers: usize,
    /// Number of consumers (one connection each).
    #[arg(short = 'y', long, default_value_t = 1)]
    pub consumers: usize,
    /// Number of queues; producer i and consumer i use queue i % queues.
    #[arg(long, default_value_t = 1)]
    pub queues: usize,
    /// Queue name prefix (queues are named `<prefix>-<i>`).
    #[arg(long, default_value = "charon-bench")]
    pub queue_prefix: String,
    /// Message body size in bytes (>= 8 to measure latency).
    #[arg(short = 's', long, default_value_t = 16)]
    pub size: usize,
    /// Publishing rate per producer in msg/s (0 = unlimited).
    #[arg(short = 'r', long, default_value_t = 0)]
    pub rate: u64,
    /// Persistent messages (delivery_mode 2) and durable queues.
    #[arg(long)]
    pub persistent: bool,
    /// Publisher-confirm window: at most N unconfirmed messages per producer (0 = no confirms).
    #[arg(short = 'c', long, default_value_t = 0)]
    pub confirm: u32,
    /// Consumer prefetch (basic.qos).
    #[arg(short = 'q', long, default_value_t = 1000)]
    pub prefetch: u16,
    /// Ack every N deliveries with multiple=true (0 = auto-ack / no-ack).
    #[arg(long, default_value_t = 100)]
    pub multi_ack: u32,
    /// Measurement duration in seconds (0 = until --pmessages are all consumed). In "expiry":
    /// how long to wait for the DLQs after the last message's TTL deadline (0 = no limit).
    #[arg(short = 'z', long, default_value_t = 10)]
    pub duration: u64,
    /// Per-producer message count limit (0 = unlimited).
    #[arg(long, default_value_t = 0)]
    pub pmessages: u64,
    /// Scenario: "throughput"; "dead-letter" (main-queue consumers reject every delivery with
    /// requeue=false into a DLQ per queue that as many consumers drain; the receive rate is the
    /// DLQs'); "expiry" (publish --pmessages into queues with x-message-ttl = --ttl-ms and no
    /// consumer; consumers drain the DLQs; reports the time from the last message's TTL deadline
    /// until every message reached a DLQ). Both dead-letter scenarios delete and redeclare their
    /// queues (`<queue>` and `<queue>-dlq`) at start.
    #[arg(long, value_enum, default_value_t = Scenario::Throughput)]
    pub scenario: Scenario,
    /// Keep the queues as they are: no purge at start, no delete at the end (publish a backlog
    /// in one run, consume it in another). The dead-letter scenarios still start from freshly
    /// declared queues.
    #[arg(long)]
    pub keep_queues: bool,
    /// Message TTL (x-message-ttl) of the main queues in the "expiry" scenario (ms).
    #[arg(long, default_value_t = 10_000)]
    pub ttl_ms: u64,
    /// "retry": failures per message before it is acked.
    #[arg(long, default_value_t = 3)]
    pub retry_limit: u32,
    /// "retry": native (Charon's x-retry-*) or manual (seed 003: retry queue TTL + DLX).
    #[arg(long, value_enum, default_value_t = crate::retry_scenarios::RetryMode::Native)]
    pub retry_mode: crate::retry_scenarios::RetryMode,
    /// "retry": delay before each retry (ms).
    #[arg(long, default_value_t = 0)]
    pub retry_delay_ms: u64,
    /// "retry" (native, with --broker-pid): first measure the broker's RSS per parked message.
    #[arg(long)]
    pub retry_memory: bool,
    /// "retry": give every message its own `message_id` (distinct properties, as real
    /// messages have: the broker cannot share one dead-lettered copy between messages).
    #[arg(long)]
    pub message_ids: bool,
    /// "delayed": the smallest x-delay (ms).
    #[arg(long, default_value_t = 10_000)]
    pub delay_base_ms: u64,
    /// "delayed": delays are spread evenly over this many ms after --delay-base-ms.
    #[arg(long, default_value_t = 10_000)]
    pub delay_spread_ms: u64,
    /// "retry"/"delayed": Charon's management API (`http://host:port`); the report adds the
    /// broker-side release lateness (`release_lateness_ms`) of the queue / delayed exchange.
    #[arg(long)]
    pub api: Option<String>,
    /// PID of the broker: report its CPU time per message and peak RSS (Linux /proc).
    #[arg(long)]
    pub broker_pid: Option<u32>,
    /// Print the report as one JSON line on stdout.
    #[arg(long)]
    pub json: bool,
    /// Do not print per-second progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Management API of the broker ("archive" scenario).
    #[arg(long, default_value = "http://127.0.0.1:15672")]
    pub http_url: String,
    /// Management API user:password ("archive" scenario).
    #[arg(long, default_value = "guest:guest")]
    pub http_auth: String,
    /// "archive": first archive this many dead letters (transient, same headers and body size)
    /// through a second archive queue, so that the queries run over a big archive (1,000,000).
    #[arg(long, default_value_t = 0)]
    pub archive_preload: u64,
    /// "archive": PID of the database server (PostgreSQL's postmaster): its CPU time (and that
    /// of its live backends and reaped children) per record is reported.
    #[arg(long)]
    pub db_pid: Option<u32>,
}

impl Default for BenchArgs {
    fn default() -> Self {
        Self {
            uri: "amqp://guest:guest@127.0.0.1:5672/%2f".into(),
            producers: 1,
            consumers: 1,
            queues: 1,
            queue_prefix: "charon-bench".into(),
            size: 16,
            rate: 0,
            persistent: false,
            confirm: 0,
            prefetch: 1000,
            multi_ack: 100,
            duration: 10,
            pmessages: 0,
            scenario: Scenario::Throughput,
            ttl_ms: 10_000,
            keep_queues: false,
            retry_limit: 3,
            retry_mode: crate::retry_scenarios::RetryMode::Native,
            retry_delay_ms: 0,
            retry_memory: false,
            message_ids: false,
            delay_base_ms: 10_000,
            delay_spread_ms: 10_000,
            broker_pid: None,
            archive_preload: 0,
            db_pid: None,
            api: None,
            json: false,
            quiet: false,
            http_url: "http://127.0.0.1:15672".into(),
            http_auth: "guest:guest".into(),
        }
    }
}

impl BenchArgs {
    /// Name of the dead-letter queue of queue `i`.
    pub(crate) fn dlq_name(&self, i: usize) -> String {
        format!("{}-dlq", self.queue_name(i))
    }

    /// Name of queue `i`.
    pub(crate) fn queue_name(&self, i: usize) -> String {
        format!("{}-{}", self.queue_prefix, i % self.queues.max(1))
    }

    /// Rejects inconsistent options.
    pub(crate) fn validate(&self) -> Result<(), BenchError> {
        let arg = |m: &str| Err(BenchError::Args(m.into()));
        if self.queues == 0 {
            return arg("--queues must be >= 1");
        }
        if self.producers == 0 && self.consumers == 0 {
            return arg("need at least one producer or consumer");
        }
        if self.duration == 0 && self.pmessages == 0 {
            return arg("--duration 0 requires --pmessages");
        }
        let last = self.queues - 1;
        let longest = if self.scenario.dead_letters() {
            self.dlq_name(last)
        } else {
            self.queue_name(last)
        };
        if longest.len() > MAX_QUEUE_NAME {
            return arg("--queue-prefix is too long (queue names are at most 255 bytes)");
        }
        match self.scenario {
            Scenario::Throughput | Scenario::Retry | Scenario::Delayed => {}
            Scenario::DeadLetter => {
                if self.multi_ack == 0 {
                    return arg("--scenario dead-letter needs acknowledgements (--multi-ack >= 1)");
                }
                if self.consumers == 0 {
                    return arg("--scenario dead-letter needs consumers (-y >= 1)");
                }
            }
            Scenario::Archive => {}
            Scenario::Expiry => {
                if self.pmessages == 0 || self.producers == 0 || self.consumers == 0 {
                    return arg("--scenario expiry needs --pmessages, producers and consumers");
                }
            }
        }
        Ok(())
    }

    /// Human description of the run parameters (the report's `params`).
    pub(crate) fn describe(&self) -> String {
        let opt = |on: bool, s: String| if on { s } else { String::new() };
        format!(
            "{} producers, {} consumers, {} queues, {} B, {}{}{}, prefetch {}, multi-ack {}{}",
            self.producers,
            self.consumers,
            self.queues,
            self.size,
            if self.persistent {
                "persistent"
            } else {
                "transient"
            },
            opt(
                self.confirm > 0,
                format!(", confirm window {}", self.confirm)
            ),
            opt(
                self.rate > 0,
                format!(", rate {} msg/s/producer", self.rate)
            ),
            self.prefetch,
            self.multi_ack,
            opt(
                self.scenario == Scenario::Expiry,
                format!(", TTL {} ms", self.ttl_ms)
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_scenario_needs() {
        let ok = BenchArgs::default();
        assert!(ok.validate().is_ok());
        let bad = [
            BenchArgs {
                scenario: Scenario::Expiry,
                ..BenchArgs::default()
            },
            BenchArgs {
                scenario: Scenario::DeadLetter,
                multi_ack: 0,
                ..BenchArgs::default()
            },
            BenchArgs {
                scenario: Scenario::DeadLetter,
                consumers: 0,
                ..BenchArgs::default()
            },
            BenchArgs {
                queue_prefix: "q".repeat(252),
                scenario: Scenario::DeadLetter,
                ..BenchArgs::default()
            },
        ];
        for a in bad {
            assert!(matches!(a.validate(), Err(BenchError::Args(_))), "{a:?}");
        }
        let long_but_fine = BenchArgs {
            queue_prefix: "q".repeat(253),
            ..BenchArgs::default()
        };
        assert!(long_but_fine.validate().is_ok());
    }
}
