//! Benchmark report: human (PerfTest-like) and JSON renderings.

use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latency percentiles in microseconds (publish → delivery).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LatencyUs {
    /// Number of samples (0 when the body is too small for a timestamp).
    pub samples: u64,
    /// Median.
    pub p50: u64,
    /// 75th percentile.
    pub p75: u64,
    /// 95th percentile.
    pub p95: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Maximum.
    pub max: u64,
}

impl LatencyUs {
    pub(crate) fn from_histogram(h: &Histogram<u64>) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        Self {
            samples: h.len(),
            p50: h.value_at_quantile(0.50),
            p75: h.value_at_quantile(0.75),
            p95: h.value_at_quantile(0.95),
            p99: h.value_at_quantile(0.99),
            max: h.max(),
        }
    }
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

/// Result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// Human description of the run parameters.
    pub params: String,
    /// Messages published during the measurement window.
    pub published: u64,
    /// Messages confirmed by the broker (confirm mode only).
    pub confirmed: u64,
    /// Messages nacked by the broker (confirm mode only).
    pub nacked: u64,
    /// Messages consumed during the measurement window (dead-letter scenarios: from the DLQs).
    pub consumed: u64,
    /// Messages rejected into the DLX by main-queue consumers (dead-letter scenario).
    pub rejected: u64,
    /// "expiry": seconds from the last message's TTL deadline (`publish_s` + `--ttl-ms`) until
    /// all reached the DLQs; `None` if they did not all arrive within the run.
    pub expiry_drain_s: Option<f64>,
    /// "expiry": DLQ receive rate from the first to the last dead letter (msg/s).
    pub dlq_drain_rate: Option<f64>,
    /// With `--pmessages`: seconds from the start until the broker had taken every message (a
    /// `basic.qos` round trip after each producer's last one; all confirmed in confirm mode).
    pub publish_s: Option<f64>,
    /// Length of the measurement window.
    #[serde(rename = "duration_s", serialize_with = "ser_duration")]
    pub duration: Duration,
    /// published / duration (msg/s).
    pub publish_rate: f64,
    /// consumed / duration (msg/s).
    pub consume_rate: f64,
    /// rejected / duration (msg/s): the main-queue nack rate of the dead-letter scenario.
    pub reject_rate: f64,
    /// Publish → consume latency.
    pub latency_us: LatencyUs,
    /// Broker CPU time (user+sys) per message: CPU µs / max(published, consumed).
    pub broker_cpu_us_per_msg: Option<f64>,
    /// Broker CPU utilisation during the window (1.0 = one core).
    pub broker_cpu_cores: Option<f64>,
    /// Broker peak RSS during the run (VmHWM; reset at start when permitted).
    pub broker_peak_rss_kib: Option<u64>,
    /// Broker RSS at start / end.
    pub broker_rss_before_kib: Option<u64>,
    /// Broker RSS at the end of the window.
    pub broker_rss_after_kib: Option<u64>,
    /// CPU time of this tool per message (its own overhead).
    pub tool_cpu_us_per_msg: Option<f64>,
    /// CPU utilisation of this tool during the window (1.0 = one core).
    pub tool_cpu_cores: Option<f64>,
}

impl Report {
    /// The generic report of a retry/delayed run (their own report is printed separately).
    pub fn for_retry_scenario(r: &crate::retry_scenarios::RetryReport) -> Self {
        Report {
            scenario: r.scenario.clone(),
            params: r.params.clone(),
            published: r.messages,
            confirmed: 0,
            nacked: 0,
            consumed: r.messages,
            rejected: r.retry_cycles,
            expiry_drain_s: None,
            dlq_drain_rate: None,
            publish_s: None,
            duration: Duration::from_secs_f64(r.elapsed_s.max(0.0)),
            publish_rate: 0.0,
            consume_rate: 0.0,
            reject_rate: r.retry_cycles_per_s.unwrap_or(0.0),
            latency_us: LatencyUs::default(),
            broker_cpu_us_per_msg: None,
            broker_cpu_cores: None,
            broker_peak_rss_kib: None,
            broker_rss_before_kib: None,
            broker_rss_after_kib: None,
            tool_cpu_us_per_msg: None,
            tool_cpu_cores: None,
        }
    }

    /// One-line JSON rendering.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }

    /// Messages per second through the broker: the consume rate when there
    /// are consumers, the publish rate otherwise.
    pub fn throughput(&self) -> f64 {
        if self.consumed > 0 {
            self.consume_rate
        } else {
            self.publish_rate
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "scenario: {} ({})", self.scenario, self.params)?;
        writeln!(
            f,
            "duration: {:.2} s, sent: {} msg ({:.0} msg/s), received: {} msg ({:.0} msg/s)",
            self.duration.as_secs_f64(),
            self.published,
            self.publish_rate,
            self.consumed,
            self.consume_rate
        )?;
        if self.confirmed > 0 || self.nacked > 0 {
            writeln!(
                f,
                "confirmed: {} msg, nacked: {} msg",
                self.confirmed, self.nacked
            )?;
        }
        if self.rejected > 0 {
            writeln!(
                f,
                "rejected into the DLX: {} msg ({:.0} msg/s)",
                self.rejected, self.reject_rate
            )?;
        }
        if let Some(p) = self.publish_s {
            writeln!(f, "published all messages in {p:.2} s")?;
        }
        if self.scenario == "expiry" {
            match self.expiry_drain_s {
                Some(d) => writeln!(
                    f,
                    "mass expiry: all messages in the DLQ {d:.2} s after the last TTL deadline"
                )?,
                None => writeln!(
                    f,
                    "mass expiry: incomplete, {} of {} messages reached the DLQ",
                    self.consumed, self.published
                )?,
            }
        }
        if let Some(r) = self.dlq_drain_rate {
            writeln!(
                f,
                "DLQ drain rate (first to last dead letter): {r:.0} msg/s"
            )?;
        }
        let l = &self.latency_us;
        if l.samples > 0 {
            writeln!(
                f,
                "latency min/median/75th/95th/99th/max: p50 {} µs, p75 {} µs, p95 {} µs, p99 {} µs, max {} µs",
                l.p50, l.p75, l.p95, l.p99, l.max
            )?;
        }
        if let Some(cpu) = self.broker_cpu_us_per_msg {
            write!(f, "broker CPU: {cpu:.2} µs/msg")?;
            if let Some(c) = self.broker_cpu_cores {
                write!(f, " ({c:.2} cores)")?;
            }
            if let Some(rss) = self.broker_peak_rss_kib {
                write!(f, ", peak RSS {:.1} MiB", rss as f64 / 1024.0)?;
            }
            writeln!(f)?;
        }
        if let Some(cpu) = self.tool_cpu_us_per_msg {
            write!(f, "bench tool CPU: {cpu:.2} µs/msg")?;
            if let Some(c) = self.tool_cpu_cores {
                write!(f, " ({c:.2} cores)")?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
