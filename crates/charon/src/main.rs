//! The `charon` binary: `charon server` (the broker), `charon ctl` (the rabbitmqctl-style CLI, a
//! client of the management API) and `charon bench` (the load tool).

mod alloc_count;
mod alloc_stats;
mod ctl;
mod dlq;
mod purge;
mod rcvlowat;
mod runtime;
mod thp;
mod thread_cpu;

/// mimalloc: the broker allocates and frees many small objects per message (properties, queue
/// entries, dead-lettered copies); glibc malloc spent over a quarter of the CPU of the mass-expiry
/// benchmark in `malloc`/`free`/`unlink_chunk`. Wrapped to count live heap bytes for the memory
/// alarm (`alloc_count`).
#[global_allocator]
static GLOBAL: alloc_count::CountingMiMalloc = alloc_count::CountingMiMalloc;

use std::sync::Arc;

use anyhow::Context;
use charon_server::Config;
use charon_server::config::LogFormat;
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(
    name = "charon",
    version,
    about = "Charon, an AMQP 0-9-1 message broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the broker.
    Server(ServerArgs),
    /// Administer a running broker through its management API (rabbitmqctl-style).
    Ctl(ctl::CtlArgs),
    /// Measure an AMQP 0-9-1 broker (Charon, RabbitMQ, LavinMQ) in the spirit of PerfTest.
    Bench(charon_bench::BenchArgs),
}

/// Flags override the config file; each flag also reads a `CHARON_*` variable.
#[derive(clap::Args, Debug)]
struct ServerArgs {
    /// TOML configuration file.
    #[arg(long, env = "CHARON_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// AMQP listen address [default: 127.0.0.1:5672].
    #[arg(long, env = "CHARON_AMQP_LISTEN")]
    amqp_listen: Option<String>,
    /// HTTP listen address [default: 127.0.0.1:15672].
    #[arg(long, env = "CHARON_HTTP_LISTEN")]
    http_listen: Option<String>,
    /// Prometheus listen address, "" to disable [default: 127.0.0.1:15692].
    #[arg(long, env = "CHARON_PROMETHEUS_LISTEN")]
    prometheus_listen: Option<String>,
    /// Data directory [default: ./charon-data].
    #[arg(long, env = "CHARON_DATA_DIR")]
    data_dir: Option<String>,
    /// Log filter, e.g. info or warn,charon_server=debug [default: RUST_LOG, else the
    /// config file's log_level, else info].
    #[arg(long, env = "CHARON_LOG_LEVEL")]
    log_level: Option<String>,
    /// Log format: text or json [default: the config file's log_format, else text].
    #[arg(long, env = "CHARON_LOG_FORMAT")]
    log_format: Option<String>,
    /// Worker threads for connections and queues (multi_thread) [default: one per core; on two
    /// cores or fewer everything runs on one thread (current_thread) unless this is set].
    #[arg(long, env = "CHARON_WORKER_THREADS")]
    worker_threads: Option<usize>,
    /// Runtime scheduler: multi_thread or current_thread (every connection and queue on one
    /// thread) [default: current_thread on two cores or fewer unless --worker-threads is set,
    /// else multi_thread].
    #[arg(long, env = "CHARON_RUNTIME_FLAVOR")]
    runtime_flavor: Option<charon_server::runtime_settings::RuntimeFlavor>,
    /// Scheduler ticks between polls of the I/O and timer drivers [default: tokio's].
    #[arg(long, env = "CHARON_RUNTIME_EVENT_INTERVAL")]
    runtime_event_interval: Option<u32>,
    /// Scheduler ticks between looks at the shared run queue [default: tokio's].
    #[arg(long, env = "CHARON_RUNTIME_GLOBAL_QUEUE_INTERVAL")]
    runtime_global_queue_interval: Option<u32>,
}

fn load_config(args: ServerArgs) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Config::from_toml(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => Config::default(),
    };
    if let Some(v) = args.amqp_listen {
        config.amqp_listen = v;
    }
    if let Some(v) = args.http_listen {
        config.http_listen = v;
    }
    if let Some(v) = args.prometheus_listen {
        config.prometheus_listen = v;
    }
    if let Some(v) = args.data_dir {
        config.data_dir = v;
    }
    match (args.log_level, std::env::var("RUST_LOG")) {
        (Some(v), _) => config.log_level = v,
        (None, Ok(v)) if !v.is_empty() => config.log_level = v,
        _ => {}
    }
    if let Some(v) = args.worker_threads {
        config.worker_threads = Some(v);
    }
    if let Some(v) = args.runtime_flavor {
        config.runtime_flavor = Some(v);
    }
    if let Some(v) = args.runtime_event_interval {
        config.runtime_event_interval = Some(v);
    }
    if let Some(v) = args.runtime_global_queue_interval {
        config.runtime_global_queue_interval = Some(v);
    }
    if let Some(v) = args.log_format {
        config.log_format = match v.as_str() {
            "text" => LogFormat::Text,
            "json" => LogFormat::Json,
            other => anyhow::bail!("unknown log format '{other}' (text or json)"),
        };
    }
    Ok(config)
}

/// Logs to stderr with `config.log_level` as an env-filter: plain text (ANSI colours only when
/// stderr is a terminal, never in a file) or one JSON object per line.
fn init_logging(config: &Config) -> anyhow::Result<()> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_level)
        .with_context(|| format!("invalid log filter '{}'", config.log_level))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let done = match config.log_format {
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
        LogFormat::Json => builder.json().with_ansi(false).try_init(),
    };
    done.map_err(|e| anyhow::anyhow!("logging: {e}"))
}

async fn serve(config: Config) -> anyhow::Result<()> {
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let broker = Arc::new(
        charon_server::broker::Broker::new(config.clone()).context("invalid configuration")?,
    );
    // Signal handlers before anything listens: a SIGINT/SIGTERM that comes as soon as the
    // ports answer is a shutdown, not the default action (killed by the signal).
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating data dir {}", config.data_dir))?;
    // Held until the process ends: a second broker on this directory exits here.
    let _lock =
        charon_server::data_lock::DataDirLock::acquire(std::path::Path::new(&config.data_dir))?;
    broker
        .open_store()
        .with_context(|| format!("opening the store in {}", config.data_dir))?;
    charon_server::archive::ArchiveService::start(&broker)
        .prepare(std::time::Duration::from_secs(15))
        .await;
    let amqp = tokio::net::TcpListener::bind(&config.amqp_listen)
        .await
        .with_context(|| format!("binding AMQP on {}", config.amqp_listen))?;
    let http = tokio::net::TcpListener::bind(&config.http_listen)
        .await
        .with_context(|| format!("binding HTTP on {}", config.http_listen))?;
    let (flavor, workers) = runtime::resolve(&config.runtime());
    tracing::info!(amqp = %config.amqp_listen, http = %config.http_listen, data_dir = %config.data_dir, runtime = flavor.as_str(), workers, "charon started");
    let shutdown = CancellationToken::new();
    broker.spawn_disk_monitor();
    broker.spawn_memory_monitor();
    let http_task = tokio::spawn(charon_http::run(http, broker.clone(), shutdown.clone()));
    // The Prometheus listener: a port already taken is logged, not fatal (metrics stay on
    // `http_listen`/metrics).
    if !config.prometheus_listen.is_empty() {
        match tokio::net::TcpListener::bind(&config.prometheus_listen).await {
            Ok(l) => {
                tokio::spawn(charon_http::metrics::run(
                    l,
                    broker.clone(),
                    shutdown.clone(),
                ));
            }
            Err(e) => {
                tracing::warn!(addr = %config.prometheus_listen, error = %e, "cannot listen for Prometheus; /metrics stays on the HTTP listener")
            }
        }
    }
    let tls_tasks = spawn_tls(&config, &broker, &shutdown).await?;
    let amqp_task = tokio::spawn(charon_server::server::run(
        amqp,
        broker.clone(),
        shutdown.clone(),
    ));
    tokio::select! {
        _ = int.recv() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    shutdown.cancel();
    let _ = amqp_task.await;
    let _ = http_task.await;
    for t in tls_tasks {
        let _ = t.await;
    }
    // Queues finish what the closed connections sent them; the store makes it durable.
    broker.quiesce(std::time::Duration::from_secs(5)).await;
    Ok(())
}

/// Binds `amqps_listen` and `https_listen` (when set) and serves them over TLS.
async fn spawn_tls(
    config: &Config,
    broker: &Arc<charon_server::broker::Broker>,
    shutdown: &CancellationToken,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut tasks = Vec::new();
    let Some(tls) = &config.tls else {
        return Ok(tasks);
    };
    if let Some(addr) = &config.amqps_listen {
        let acceptor = charon_server::tls::TlsAcceptor::from(
            charon_server::tls::server_config(tls, &[]).context("[tls]")?,
        );
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding AMQPS on {addr}"))?;
        tracing::info!(amqps = %addr, "AMQP over TLS listening");
        tasks.push(tokio::spawn(charon_server::server::run_tls(
            listener,
            acceptor,
            broker.clone(),
            shutdown.clone(),
        )));
    }
    if let Some(addr) = &config.https_listen {
        let acceptor = charon_server::tls::TlsAcceptor::from(
            charon_server::tls::server_config(tls, &[b"http/1.1"]).context("[tls]")?,
        );
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding HTTPS on {addr}"))?;
        tracing::info!(https = %addr, "management API over TLS listening");
        let (b, s) = (broker.clone(), shutdown.clone());
        tasks.push(tokio::spawn(async move {
            if let Err(e) = charon_http::run_tls(listener, acceptor, b, s).await {
                tracing::error!(error = %e, "HTTPS listener failed");
            }
        }));
    }
    Ok(tasks)
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    purge::init();
    thread_cpu::init();
    alloc_stats::register();
    match cli.command {
        Command::Server(args) => {
            let config = load_config(args)?;
            init_logging(&config)?;
            // Checked before the runtime is built from it (tokio panics on a zero interval).
            config
                .validate()
                .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
            thp::init();
            purge::spawn_thread();
            rcvlowat::register();
            runtime::build(&config.runtime())?.block_on(serve(config))?;
        }
        Command::Ctl(args) => ctl::run(args),
        Command::Bench(args) => {
            // The load tool: one worker per core whatever the broker's default.
            let mut settings = Config::default().runtime();
            settings.flavor = Some(charon_server::runtime_settings::RuntimeFlavor::MultiThread);
            let runtime = runtime::build(&settings)?;
            use std::io::IsTerminal;
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .init();
            if args.scenario == charon_bench::Scenario::Archive {
                runtime.block_on(charon_bench::run_archive(args))?;
            } else {
                runtime.block_on(charon_bench::run_and_print(args))?;
            }
        }
    }
    Ok(())
}
