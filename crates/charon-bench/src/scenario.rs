//! Scenarios: which queues a run declares (and with which arguments) and what
//! each consumer connection consumes.

use amq_protocol::types::{AMQPValue, FieldTable, LongString};

use crate::client::Connection;
use crate::{BenchArgs, BenchError};

/// What a run measures (`--scenario`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scenario {
    /// Producers publish to the queues, consumers ack what they receive.
    #[default]
    Throughput,
    /// Main-queue consumers reject every delivery (requeue=false) into a dead-letter queue
    /// per main queue, which as many consumers drain; the receive rate is the DLQs'.
    DeadLetter,
    /// `--pmessages` into queues with `x-message-ttl = --ttl-ms` and no consumer; consumers
    /// drain the DLQs; reports how long after the last TTL deadline the DLQs were complete.
    Expiry,
    /// Retries with backoff: messages fail `--retry-limit` times before being acked
    /// (`--retry-mode native` or seed 003's `manual` topology); reports retry cycles/s.
    Retry,
    /// Delayed message exchange: `--pmessages` with distinct `x-delay`s; reports lateness.
    Delayed,
    /// The dead-letter archive (Charon only): `--pmessages` persistent messages into an archive
    /// queue; reports archived/s, replay/s and the management API's list/group latency over
    /// every record in the archive (see `crate::archive`).
    Archive,
}

impl Scenario {
    /// The `--scenario` spelling (also the report's `scenario` field).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Throughput => "throughput",
            Self::DeadLetter => "dead-letter",
            Self::Expiry => "expiry",
            Self::Retry => "retry",
            Self::Delayed => "delayed",
            Self::Archive => "archive",
        }
    }

    /// Whether main queues dead-letter into a DLQ each.
    pub fn dead_letters(self) -> bool {
        matches!(self, Self::DeadLetter | Self::Expiry)
    }
}

/// One consumer connection: the queue it consumes and whether it rejects everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConsumerSpec {
    pub(crate) queue: String,
    pub(crate) reject: bool,
}

/// The queues of a run.
#[derive(Debug, Clone)]
pub(crate) struct Topology {
    /// Main queues (producers publish here).
    pub(crate) queues: Vec<String>,
    /// Dead-letter queue of each main queue (empty in "throughput").
    pub(crate) dlqs: Vec<String>,
}

impl Topology {
    pub(crate) fn new(args: &BenchArgs) -> Self {
        let n = args.queues;
        Self {
            queues: (0..n).map(|i| args.queue_name(i)).collect(),
            dlqs: if args.scenario.dead_letters() {
                (0..n).map(|i| args.dlq_name(i)).collect()
            } else {
                Vec::new()
            },
        }
    }

    /// Every queue of the run (main queues, then DLQs).
    pub(crate) fn all(&self) -> impl Iterator<Item = &String> {
        self.queues.iter().chain(&self.dlqs)
    }

    /// Consumer connections: in "dead-letter", consumer i rejects from main queue i and a
    /// twin drains DLQ i; in "expiry", consumer i only drains DLQ i.
    pub(crate) fn consumers(&self, args: &BenchArgs) -> Vec<ConsumerSpec> {
        let pick = |v: &[String], i: usize| v[i % v.len()].clone();
        let mut specs = Vec::new();
        for i in 0..args.consumers {
            match args.scenario {
                // Their own runner (retry_scenarios.rs) makes their connections.
                Scenario::Retry | Scenario::Delayed => {}
                Scenario::Throughput => specs.push(ConsumerSpec {
                    queue: pick(&self.queues, i),
                    reject: false,
                }),
                Scenario::DeadLetter => {
                    specs.push(ConsumerSpec {
                        queue: pick(&self.queues, i),
                        reject: true,
                    });
                    specs.push(ConsumerSpec {
                        queue: pick(&self.dlqs, i),
                        reject: false,
                    });
                }
                Scenario::Expiry => specs.push(ConsumerSpec {
                    queue: pick(&self.dlqs, i),
                    reject: false,
                }),
                Scenario::Archive => {}
            }
        }
        specs
    }

    /// Declares the queues. "throughput" purges them (unless `--keep-queues`); the
    /// dead-letter scenarios delete them first, since redeclaring a queue with other
    /// arguments fails (406 PRECONDITION_FAILED on RabbitMQ).
    pub(crate) async fn declare(
        &self,
        admin: &mut Connection,
        args: &BenchArgs,
    ) -> Result<(), BenchError> {
        if !args.scenario.dead_letters() {
            for q in &self.queues {
                admin.declare_queue(q, args.persistent).await?;
                if !args.keep_queues {
                    admin.purge_queue(q).await?;
                }
            }
            return Ok(());
        }
        for (q, dlq) in self.queues.iter().zip(&self.dlqs) {
            admin.delete_queue(q).await?;
            admin.delete_queue(dlq).await?;
            admin.declare_queue(dlq, args.persistent).await?;
            admin
                .declare_queue_with(q, args.persistent, main_queue_arguments(args, dlq))
                .await?;
        }
        Ok(())
    }

    /// Deletes every queue of the run.
    pub(crate) async fn delete(&self, admin: &mut Connection) -> Result<(), BenchError> {
        for q in self.all() {
            admin.delete_queue(q).await?;
        }
        Ok(())
    }
}

/// Arguments of a main queue in the dead-letter scenarios: dead-letter through the default
/// exchange to `dlq`; in "expiry", also `x-message-ttl`.
pub(crate) fn main_queue_arguments(args: &BenchArgs, dlq: &str) -> FieldTable {
    let mut t = FieldTable::default();
    t.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("")),
    );
    t.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString(LongString::from(dlq)),
    );
    if args.scenario == Scenario::Expiry {
        t.insert(
            "x-message-ttl".into(),
            AMQPValue::LongLongInt(i64::try_from(args.ttl_ms).unwrap_or(i64::MAX)),
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(scenario: Scenario, consumers: usize, queues: usize) -> BenchArgs {
        BenchArgs {
            scenario,
            consumers,
            queues,
            ..BenchArgs::default()
        }
    }

    #[test]
    fn dead_letter_pairs_a_rejecting_and_a_dlq_consumer() {
        let a = args(Scenario::DeadLetter, 2, 2);
        let t = Topology::new(&a);
        assert_eq!(t.dlqs, ["charon-bench-0-dlq", "charon-bench-1-dlq"]);
        let got: Vec<(String, bool)> = t
            .consumers(&a)
            .into_iter()
            .map(|s| (s.queue, s.reject))
            .collect();
        let want = [
            ("charon-bench-0", true),
            ("charon-bench-0-dlq", false),
            ("charon-bench-1", true),
            ("charon-bench-1-dlq", false),
        ];
        assert_eq!(got.len(), want.len());
        for ((q, r), (wq, wr)) in got.iter().zip(want) {
            assert_eq!((q.as_str(), *r), (wq, wr));
        }
    }

    #[test]
    fn expiry_consumes_only_dlqs_and_sets_ttl() {
        let a = BenchArgs {
            ttl_ms: 5000,
            ..args(Scenario::Expiry, 1, 1)
        };
        let t = Topology::new(&a);
        let specs = t.consumers(&a);
        assert_eq!(
            specs,
            [ConsumerSpec {
                queue: "charon-bench-0-dlq".into(),
                reject: false
            }]
        );
        let table = main_queue_arguments(&a, "charon-bench-0-dlq");
        let m = table.inner();
        assert_eq!(
            m.get("x-message-ttl").and_then(|v| v.as_long_long_int()),
            Some(5000)
        );
        assert_eq!(
            m.get("x-dead-letter-routing-key")
                .and_then(|v| v.as_long_string())
                .map(|s| s.to_string()),
            Some("charon-bench-0-dlq".to_string())
        );
    }

    #[test]
    fn throughput_has_no_dlq_and_no_ttl() {
        let a = args(Scenario::Throughput, 1, 1);
        assert!(Topology::new(&a).dlqs.is_empty());
        let dl = main_queue_arguments(&args(Scenario::DeadLetter, 1, 1), "q-dlq");
        assert!(!dl.inner().contains_key("x-message-ttl"));
    }
}
