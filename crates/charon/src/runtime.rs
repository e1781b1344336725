//! Builds the broker's tokio runtime from the configuration's runtime settings
//! (`charon_server::runtime_settings`): multi-threaded work stealing (default) or every task on
//! one thread, with tokio's scheduler intervals when set. Every worker collects its mimalloc
//! heap when it parks (`purge::on_park`).

use charon_server::runtime_settings::{RuntimeFlavor, RuntimeSettings};

/// The scheduler and thread count `settings` give on this machine.
pub(crate) fn resolve(settings: &RuntimeSettings) -> (RuntimeFlavor, usize) {
    settings.resolve(std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The runtime for `settings` (checked by `Config::validate` before).
pub(crate) fn build(settings: &RuntimeSettings) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = match resolve(settings) {
        (RuntimeFlavor::MultiThread, workers) => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(workers);
            b
        }
        (RuntimeFlavor::CurrentThread, _) => tokio::runtime::Builder::new_current_thread(),
    };
    if let Some(n) = settings.event_interval {
        builder.event_interval(n.max(1));
    }
    if let Some(n) = settings.global_queue_interval {
        builder.global_queue_interval(n.max(1));
    }
    builder
        .enable_all()
        .on_thread_park(crate::purge::on_park)
        .build()
}
