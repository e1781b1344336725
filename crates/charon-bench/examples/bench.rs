//! Stand-alone driver for `charon-bench` until `charon bench` exists:
//! `cargo run --release -p charon-bench --example bench -- --uri amqp://... -x 4 -y 4`.

use charon_bench::BenchArgs;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "bench", about = "AMQP 0-9-1 throughput/latency benchmark")]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(charon_bench::run_and_print(cli.args)) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
