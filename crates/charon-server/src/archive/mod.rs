//! The dead-letter archive's broker side (docs/archive.md): finds archive queues (argument
//! `x-dead-letter-archive` or policy key `dead-letter-archive`), runs one internal consumer per
//! queue that hands its messages to SQL ([`consumer`]), runs replay jobs through the broker's
//! publish path ([`replay`], [`publish`]), and applies retention. The SQL itself lives in
//! `charon-archive`; the management API reaches it through [`ArchiveService::run`].

mod consumer;
mod publish;
mod replay;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use charon_archive::sql::Conn;
use charon_archive::{Archive, ArchiveError, ExtractConfig, Selection, jobs};
use charon_core::policy::DefValue;
use charon_protocol::AMQPValue;
use serde_json::Value;

use crate::broker::Broker;
use crate::handles::QueueHandle;
use crate::vhost::VHostState;

pub use publish::{PublishError, publish_message};

/// How often archive queues are looked for (new queues, policy changes).
const SCAN_EVERY: Duration = Duration::from_millis(300);
/// How often retention and the size cap run.
const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// The archive as the broker runs it.
pub struct ArchiveService {
    broker: Weak<Broker>,
    url: String,
    archive: Mutex<Option<Archive>>,
    /// One opener at a time: a second caller (the start-up `prepare` that timed out, an archiver, the
    /// API) waits for the first instead of migrating and resolving replays concurrently. An async gate,
    /// held across the open's awaits by design; it guards no data.
    opening: tokio::sync::Mutex<()>,
    pub(crate) extract: ExtractConfig,
    /// This run's id (keys of records of messages the store does not hold).
    pub(crate) boot: u64,
    /// The store's last index recovered at start (replays interrupted by a restart).
    recovered: Option<i64>,
    /// Archive queues with a running consumer, by queue instance id.
    consumers: Mutex<HashSet<u64>>,
    /// Whether this run resolved the replays the last restart interrupted.
    resolved: std::sync::atomic::AtomicBool,
    /// Replay jobs running in this process.
    running_jobs: Mutex<HashSet<i64>>,
    retention_ms: Option<i64>,
    max_bytes: Option<i64>,
}

impl std::fmt::Debug for ArchiveService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveService")
            .field("url", &charon_archive::redact(&self.url))
            .finish()
    }
}

/// `30d`, `12h`, `15m`, `90s`, or milliseconds; `0` or empty: never.
pub fn parse_duration_ms(s: &str) -> Option<i64> {
    let s = s.trim();
    if s.is_empty() || s == "0" {
        return None;
    }
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = num.parse().ok()?;
    let mult = match unit.trim() {
        "" | "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some(n.saturating_mul(mult)).filter(|v| *v > 0)
}

fn is_true(v: &AMQPValue) -> bool {
    match v {
        AMQPValue::Boolean(b) => *b,
        AMQPValue::LongString(s) => s.as_bytes() == b"true",
        AMQPValue::ShortString(s) => s.as_str() == "true",
        _ => false,
    }
}

/// The archive queues of `vhost` now.
fn archive_queues(vhost: &VHostState) -> Vec<QueueHandle> {
    let candidates: Vec<(Arc<str>, QueueHandle, bool)> = {
        let topo = vhost.topology.read().unwrap_or_else(|p| p.into_inner());
        topo.queues()
            .map(|e| {
                let by_arg = charon_core::value::lookup(&e.meta.arguments, "x-dead-letter-archive")
                    .is_some_and(is_true);
                (e.meta.name.clone(), e.handle.clone(), by_arg)
            })
            .collect()
    };
    // Lock order: `topology` released before `policies`.
    let policies = vhost.policies.read().unwrap_or_else(|p| p.into_inner());
    candidates
        .into_iter()
        .filter(|(name, _, by_arg)| {
            *by_arg
                || policies.for_queue(name).is_some_and(|p| {
                    p.definition
                        .raw
                        .iter()
                        .any(|(k, v)| k == "dead-letter-archive" && *v == DefValue::Bool(true))
                })
        })
        .map(|(_, h, _)| h)
        .collect()
}

impl Broker {
    /// The dead-letter archive, once [`ArchiveService::start`] ran.
    pub fn archive(&self) -> Option<Arc<ArchiveService>> {
        self.archive.get().cloned()
    }
}

impl ArchiveService {
    /// Starts the archive for `broker` (after `open_store`, before the listeners): notes the
    /// store's recovered index, then watches for archive queues in the background.
    pub fn start(broker: &Arc<Broker>) -> Arc<ArchiveService> {
        let cfg = broker.config();
        let url = std::env::var("CHARON_ARCHIVE_URL")
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(|| cfg.archive_url.clone())
            .unwrap_or_else(|| {
                let p = std::path::Path::new(&cfg.data_dir).join("archive.db");
                format!("sqlite://{}", p.display())
            });
        // The index recovery found (kept from the first start after an interrupted replay until
        // it is decided), not the durable index now: opening the store already wrote (the
        // topology's rewrite), possibly at the very index a replay's lost publish had.
        // The broker's store (every vhost shares it; not reached through vhost "/", which a user
        // may have deleted).
        let recovered = broker
            .persistence()
            .and_then(|p| i64::try_from(p.recovered_index()).ok());
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        crate::queue::dl_errors::configure(
            &cfg.archive_error_message_headers,
            &cfg.archive_error_stacktrace_headers,
        );
        let svc = Arc::new(ArchiveService {
            broker: Arc::downgrade(broker),
            url,
            archive: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
            extract: ExtractConfig {
                key_header: cfg.archive_key_header.clone(),
                error_message_headers: cfg.archive_error_message_headers.clone(),
                error_stacktrace_headers: cfg.archive_error_stacktrace_headers.clone(),
            },
            boot,
            recovered,
            consumers: Mutex::new(HashSet::new()),
            running_jobs: Mutex::new(HashSet::new()),
            resolved: std::sync::atomic::AtomicBool::new(false),
            retention_ms: parse_duration_ms(&cfg.archive_retention),
            max_bytes: i64::try_from(cfg.archive_max_bytes).ok().filter(|m| *m > 0),
        });
        let _ = broker.archive.set(svc.clone());
        tokio::spawn(supervise(svc.clone()));
        svc
    }

    /// Opens an existing archive before clients connect (at most `limit`), so that replays a
    /// restart interrupted are resolved while their messages still sit in the queues.
    pub async fn prepare(self: &Arc<Self>, limit: Duration) {
        if !self.wanted(false) {
            return;
        }
        match tokio::time::timeout(limit, self.open()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "dead-letter archive unavailable at start"),
            Err(_) => tracing::warn!("dead-letter archive slow to open at start; going on"),
        }
    }

    pub(crate) fn broker(&self) -> Option<Arc<Broker>> {
        self.broker.upgrade()
    }

    /// The database, opened (and migrated) on first use and again after the connection was
    /// lost; the first time, replays a restart interrupted are resolved and resumed.
    async fn open(self: &Arc<Self>) -> Result<Archive, ArchiveError> {
        if let Some(a) = self.opened() {
            return Ok(a);
        }
        let _gate = self.opening.lock().await;
        if let Some(a) = self.opened() {
            return Ok(a);
        }
        let url = self.url.clone();
        let a = tokio::task::spawn_blocking(move || Archive::open(&url))
            .await
            .map_err(|e| ArchiveError::Db(e.to_string()))??;
        if !self.resolved.load(std::sync::atomic::Ordering::SeqCst) {
            self.resolve(&a).await?;
            self.resolved
                .store(true, std::sync::atomic::Ordering::SeqCst);
            // Decided: before any new replay is INFLIGHT, the floor goes.
            if let Some(p) = self.broker().and_then(|b| b.persistence()) {
                p.clear_recovered_floor();
            }
        }
        {
            let mut g = self.archive.lock().unwrap_or_else(|p| p.into_inner());
            if g.is_none() {
                *g = Some(a.clone());
                tracing::info!(url = %a.url(), "dead-letter archive opened");
            }
        }
        let a3 = a.clone();
        let running = tokio::task::spawn_blocking(move || a3.with(jobs::running))
            .await
            .map_err(|e| ArchiveError::Db(e.to_string()))??;
        for spec in running {
            self.spawn_job(spec);
        }
        Ok(a)
    }

    fn opened(&self) -> Option<Archive> {
        self.archive
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Decides the replays the last restart interrupted (once per run, before any replay).
    async fn resolve(self: &Arc<Self>, a: &Archive) -> Result<(), ArchiveError> {
        let recovered = self.recovered;
        let a2 = a.clone();
        let undecided =
            tokio::task::spawn_blocking(move || a2.with(|c| jobs::undecided(c, recovered)))
                .await
                .map_err(|e| ArchiveError::Db(e.to_string()))??;
        let mut found = HashSet::new();
        for (job, request, record) in undecided {
            if replay::in_target_queues(self, &record, &request).await {
                found.insert((job, record.id));
            }
        }
        let a2 = a.clone();
        let (done, again) = tokio::task::spawn_blocking(move || {
            a2.with(|c| jobs::resolve_inflight(c, recovered, &found))
        })
        .await
        .map_err(|e| ArchiveError::Db(e.to_string()))??;
        if done + again > 0 {
            tracing::warn!(done, again, "replays interrupted by a restart resolved");
        }
        Ok(())
    }

    /// Runs `f`, which only reads, on the archive's readers' connection in a blocking thread
    /// (the API's pages, groups and job progress do not wait for an archiver's or a replay's
    /// transaction).
    pub async fn read<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, ArchiveError> + Send + 'static,
    ) -> Result<T, ArchiveError> {
        let a = self.open().await?;
        tokio::task::spawn_blocking(move || a.read(f))
            .await
            .map_err(|e| ArchiveError::Db(e.to_string()))?
    }

    /// Runs `f` on the database in a blocking thread.
    pub async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, ArchiveError> + Send + 'static,
    ) -> Result<T, ArchiveError> {
        let a = self.open().await?;
        self.run_on(a, f).await
    }

    /// [`ArchiveService::run`] started at once when the archive is open already: `f` is handed
    /// to a blocking thread before this returns, so it does not wait for a turn of the async
    /// runtime (on two cores one thread, busy with the connections) the way a spawned task
    /// calling `run` would; the future only gives the result. `None` when the archive is not
    /// open (then `run` opens it).
    pub fn start_now<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, ArchiveError> + Send + 'static,
    ) -> Option<impl Future<Output = Result<T, ArchiveError>> + Send + 'static> {
        let a = self.opened()?;
        Some(self.run_on(a, f))
    }

    /// Starts `f` on `a` in a blocking thread now; the future gives its result (and forgets the
    /// connection when it was lost).
    fn run_on<T: Send + 'static>(
        self: &Arc<Self>,
        a: Archive,
        f: impl FnOnce(&mut dyn Conn) -> Result<T, ArchiveError> + Send + 'static,
    ) -> impl Future<Output = Result<T, ArchiveError>> + Send + 'static {
        let a2 = a.clone();
        let task = tokio::task::spawn_blocking(move || a2.with(f));
        let svc = self.clone();
        async move {
            let r = task.await.map_err(|e| ArchiveError::Db(e.to_string()))?;
            if r.is_err() && a.is_broken() {
                // The server went away: the next call connects again.
                let mut g = svc.archive.lock().unwrap_or_else(|p| p.into_inner());
                if g.as_ref().is_some_and(|cur| cur.same(&a)) {
                    *g = None;
                }
            }
            r
        }
    }

    /// Starts a replay job for the selected records; returns (job id, records).
    pub async fn start_replay(
        self: &Arc<Self>,
        sel: Selection,
        request: Value,
        actor: String,
    ) -> Result<(i64, i64), ArchiveError> {
        let req = request.clone();
        let who = actor.clone();
        let (id, total) = self.run(move |c| jobs::create(c, &sel, &req, &who)).await?;
        if total > 0 {
            self.spawn_job(jobs::JobSpec {
                id,
                created_by: actor,
                request,
            });
        }
        Ok((id, total))
    }

    fn spawn_job(self: &Arc<Self>, spec: jobs::JobSpec) {
        let fresh = self
            .running_jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(spec.id);
        if fresh {
            let svc = self.clone();
            tokio::spawn(async move {
                let id = spec.id;
                replay::run_job(&svc, spec).await;
                svc.running_jobs
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&id);
            });
        }
    }

    /// Whether the database exists already or archive queues want it.
    fn wanted(&self, queues: bool) -> bool {
        if queues {
            return true;
        }
        match self.url.strip_prefix("sqlite://") {
            Some(path) => std::path::Path::new(path).exists(),
            None => true,
        }
    }
}

/// Watches for archive queues, starts their consumers, runs retention.
async fn supervise(svc: Arc<ArchiveService>) {
    let mut last_retention: Option<tokio::time::Instant> = None;
    let mut open_failed_logged = false;
    loop {
        let Some(broker) = svc.broker() else { return };
        let mut found: HashMap<u64, (String, QueueHandle)> = HashMap::new();
        for v in broker.vhosts() {
            for q in archive_queues(&v) {
                found.insert(q.id(), (v.name.to_string(), q));
            }
        }
        drop(broker);
        if svc.wanted(!found.is_empty()) {
            match svc.open().await {
                Ok(_) => open_failed_logged = false,
                Err(e) => {
                    if !open_failed_logged {
                        tracing::error!(error = %e, "dead-letter archive unavailable; archive queues keep their messages");
                        open_failed_logged = true;
                    }
                }
            }
        }
        {
            let mut running = svc.consumers.lock().unwrap_or_else(|p| p.into_inner());
            running.retain(|id| found.contains_key(id));
            for (id, (vhost, q)) in found {
                if running.insert(id) {
                    tokio::spawn(consumer::run(svc.clone(), vhost, q));
                }
            }
        }
        let opened = svc
            .archive
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if opened && last_retention.is_none_or(|t| t.elapsed() >= RETENTION_EVERY) {
            last_retention = Some(tokio::time::Instant::now());
            let older = svc.retention_ms.map(|r| charon_archive::time::now_ms() - r);
            let cap = svc.max_bytes;
            match svc
                .run(move |c| charon_archive::ops::retention(c, older, cap))
                .await
            {
                Ok((0, 0)) => {}
                Ok((aged, capped)) => {
                    tracing::info!(aged, capped, "archive retention removed records")
                }
                Err(e) => tracing::warn!(error = %e, "archive retention failed"),
            }
        }
        tokio::time::sleep(SCAN_EVERY).await;
    }
}

impl ArchiveService {
    /// Runs retention and the size cap now (the API's `POST /api/dead-letters/retention`).
    pub async fn retention_now(self: &Arc<Self>) -> Result<(u64, u64), ArchiveError> {
        let older = self
            .retention_ms
            .map(|r| charon_archive::time::now_ms() - r);
        let cap = self.max_bytes;
        self.run(move |c| charon_archive::ops::retention(c, older, cap))
            .await
    }
}
