//! How the binary's tokio runtime is set up: its flavour and the scheduler's two tunable
//! intervals (`runtime_flavor`, `runtime_event_interval`, `runtime_global_queue_interval` in the
//! configuration). This module owns the settings and their checks; the binary builds the runtime
//! from them (`charon/src/runtime.rs`). Measurements behind the defaults: docs/performance.md,
//! "Runtime topology".

use serde::Deserialize;

/// Which tokio scheduler runs connections and queues.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeFlavor {
    /// Work-stealing workers (`worker_threads` of them, default [`default_worker_threads`]).
    #[default]
    MultiThread,
    /// Every connection and queue on one thread, as LavinMQ 1.0 runs: a hand-off between tasks
    /// never wakes another thread. The store's writer, compaction, the archive's SQL and the
    /// memory purge keep their own threads.
    CurrentThread,
}

impl RuntimeFlavor {
    /// The configuration's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeFlavor::MultiThread => "multi_thread",
            RuntimeFlavor::CurrentThread => "current_thread",
        }
    }
}

impl std::str::FromStr for RuntimeFlavor {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "multi_thread" => Ok(RuntimeFlavor::MultiThread),
            "current_thread" => Ok(RuntimeFlavor::CurrentThread),
            other => Err(format!(
                "unknown runtime_flavor '{other}' (multi_thread or current_thread)"
            )),
        }
    }
}

/// Worker threads when `worker_threads` is unset, on a machine with `cores` cores: one on two
/// cores or fewer, else one per core. On two cores the second core is needed by the clients on
/// the same machine, the store's writer and the kernel's loopback work; a second worker there
/// only adds a cross-thread wake-up (futex or epoll) to every hop between a connection and a
/// queue. Measured on two cores (docs/performance.md, "Runtime topology"): broker CPU per message
/// c (fanout to four consumers) 7.0 → 4.2 µs, d (nack → DLX → DLQ) 9.5 → 6.3 µs, two client
/// processes on a 1.6 → 1.4 µs at a higher rate; a single client on a 2.2 → 2.5 µs.
pub fn default_worker_threads(cores: usize) -> usize {
    if cores <= 2 { 1 } else { cores }
}

/// The runtime settings of a configuration, checked together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeSettings {
    /// The scheduler.
    pub flavor: RuntimeFlavor,
    /// Worker threads (multi_thread only); unset: [`default_worker_threads`].
    pub worker_threads: Option<usize>,
    /// Scheduler ticks between two polls of the I/O and timer drivers (tokio's
    /// `event_interval`, default 61); unset: tokio's default.
    pub event_interval: Option<u32>,
    /// Scheduler ticks between two looks at the shared queue (tokio's `global_queue_interval`);
    /// unset: tokio's default.
    pub global_queue_interval: Option<u32>,
}

impl RuntimeSettings {
    /// Refuses what tokio would panic on or silently ignore.
    pub fn validate(&self) -> Result<(), String> {
        if self.worker_threads == Some(0) {
            return Err("worker_threads must be at least 1".into());
        }
        if self.flavor == RuntimeFlavor::CurrentThread && self.worker_threads.is_some_and(|n| n > 1)
        {
            return Err(
                "worker_threads above 1 needs runtime_flavor multi_thread (current_thread runs on one thread)"
                    .into(),
            );
        }
        if self.event_interval == Some(0) {
            return Err("runtime_event_interval must be at least 1".into());
        }
        if self.global_queue_interval == Some(0) {
            return Err("runtime_global_queue_interval must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RuntimeSettings {
        RuntimeSettings {
            flavor: RuntimeFlavor::MultiThread,
            worker_threads: None,
            event_interval: None,
            global_queue_interval: None,
        }
    }

    #[test]
    fn flavor_parses_both_spellings_and_refuses_others() {
        assert_eq!("multi_thread".parse(), Ok(RuntimeFlavor::MultiThread));
        assert_eq!("current_thread".parse(), Ok(RuntimeFlavor::CurrentThread));
        let bad = "single".parse::<RuntimeFlavor>();
        assert_eq!(
            bad,
            Err("unknown runtime_flavor 'single' (multi_thread or current_thread)".into())
        );
        assert_eq!(RuntimeFlavor::default(), RuntimeFlavor::MultiThread);
        assert_eq!(RuntimeFlavor::CurrentThread.as_str(), "current_thread");
    }

    #[test]
    fn zero_intervals_and_threads_are_refused() {
        assert_eq!(settings().validate(), Ok(()));
        let s = RuntimeSettings {
            event_interval: Some(0),
            ..settings()
        };
        assert_eq!(
            s.validate(),
            Err("runtime_event_interval must be at least 1".into())
        );
        let s = RuntimeSettings {
            global_queue_interval: Some(0),
            ..settings()
        };
        assert_eq!(
            s.validate(),
            Err("runtime_global_queue_interval must be at least 1".into())
        );
        let s = RuntimeSettings {
            worker_threads: Some(0),
            ..settings()
        };
        assert_eq!(
            s.validate(),
            Err("worker_threads must be at least 1".into())
        );
    }

    #[test]
    fn one_worker_by_default_on_two_cores_or_fewer() {
        assert_eq!(default_worker_threads(1), 1);
        assert_eq!(default_worker_threads(2), 1);
        assert_eq!(default_worker_threads(3), 3);
        assert_eq!(default_worker_threads(16), 16);
    }

    #[test]
    fn current_thread_takes_one_worker_at_most() {
        let one = RuntimeSettings {
            flavor: RuntimeFlavor::CurrentThread,
            worker_threads: Some(1),
            event_interval: Some(7),
            global_queue_interval: Some(3),
        };
        assert_eq!(one.validate(), Ok(()));
        let two = RuntimeSettings {
            worker_threads: Some(2),
            ..one
        };
        assert!(
            two.validate()
                .is_err_and(|e| e.contains("runtime_flavor multi_thread"))
        );
    }
}
