//! How the binary's tokio runtime is set up: its flavour and the scheduler's two tunable
//! intervals (`runtime_flavor`, `runtime_event_interval`, `runtime_global_queue_interval` in the
//! configuration). This module owns the settings and their checks; the binary builds the runtime
//! from them (`charon/src/runtime.rs`). Measurements behind the defaults: docs/performance.md,
//! "Runtime topology".

use serde::Deserialize;

/// Which tokio scheduler runs connections and queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeFlavor {
    /// Work-stealing workers (`worker_threads` of them, default one per core).
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

/// The runtime chosen when neither `runtime_flavor` nor `worker_threads` is set, on a machine
/// with `cores` cores: everything on one thread (`current_thread`) on two cores or fewer, else one
/// work-stealing worker per core. On two cores the second core is needed by the clients on the
/// same machine, the store's writer and the kernel's loopback work; a second worker there adds a
/// cross-thread wake-up (futex or epoll) to hops between connections and queues. Measured on two
/// cores (docs/performance.md, "Runtime topology"), broker CPU per message with two workers →
/// one thread: on a busy machine c 7.0 → 4.0 µs, d 9.5 → 6.1, b 4.2 → 2.3; with the broker on a
/// core of its own (`chrt`) d 8.7 → 7.3, c 4.7 → 4.7, a 4.1 → 3.2 (runs vary by regime).
pub fn default_runtime(cores: usize) -> (RuntimeFlavor, usize) {
    if cores <= 2 {
        (RuntimeFlavor::CurrentThread, 1)
    } else {
        (RuntimeFlavor::MultiThread, cores)
    }
}

/// The runtime settings of a configuration, checked together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeSettings {
    /// The scheduler; unset: [`default_runtime`], or `multi_thread` when `worker_threads` is set.
    pub flavor: Option<RuntimeFlavor>,
    /// Worker threads (multi_thread only); unset: one per core.
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
        if self.flavor == Some(RuntimeFlavor::CurrentThread)
            && self.worker_threads.is_some_and(|n| n > 1)
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

    /// The scheduler and its thread count on a machine with `cores` cores.
    pub fn resolve(&self, cores: usize) -> (RuntimeFlavor, usize) {
        match (self.flavor, self.worker_threads) {
            (Some(RuntimeFlavor::CurrentThread), _) => (RuntimeFlavor::CurrentThread, 1),
            (Some(RuntimeFlavor::MultiThread), n) => {
                (RuntimeFlavor::MultiThread, n.unwrap_or(cores).max(1))
            }
            (None, Some(n)) => (RuntimeFlavor::MultiThread, n.max(1)),
            (None, None) => default_runtime(cores),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> RuntimeSettings {
        RuntimeSettings {
            flavor: None,
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
    fn one_thread_by_default_on_two_cores_or_fewer() {
        use RuntimeFlavor::*;
        assert_eq!(settings().resolve(1), (CurrentThread, 1));
        assert_eq!(settings().resolve(2), (CurrentThread, 1));
        assert_eq!(settings().resolve(3), (MultiThread, 3));
        assert_eq!(settings().resolve(16), (MultiThread, 16));
        // worker_threads alone keeps work stealing, as before the flavour existed.
        let two = RuntimeSettings {
            worker_threads: Some(2),
            ..settings()
        };
        assert_eq!(two.resolve(2), (MultiThread, 2));
        let one = RuntimeSettings {
            worker_threads: Some(1),
            ..settings()
        };
        assert_eq!(one.resolve(16), (MultiThread, 1));
        let multi = RuntimeSettings {
            flavor: Some(MultiThread),
            ..settings()
        };
        assert_eq!(multi.resolve(2), (MultiThread, 2));
        let current = RuntimeSettings {
            flavor: Some(CurrentThread),
            ..settings()
        };
        assert_eq!(current.resolve(16), (CurrentThread, 1));
    }

    #[test]
    fn current_thread_takes_one_worker_at_most() {
        let one = RuntimeSettings {
            flavor: Some(RuntimeFlavor::CurrentThread),
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
