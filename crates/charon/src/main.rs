//! The `charon` binary.
//!
//! Subcommands today: `bench` (the load tool, usable against any AMQP 0-9-1 broker).
//! `server` and `ctl` land with the server crate (see docs/ARCHITECTURE.md).

use clap::{Parser, Subcommand};

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
    /// Measure an AMQP 0-9-1 broker (Charon, RabbitMQ, LavinMQ) in the spirit of PerfTest.
    Bench(charon_bench::BenchArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match cli.command {
        Command::Bench(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            runtime.block_on(charon_bench::run_and_print(args))?;
        }
    }
    Ok(())
}
