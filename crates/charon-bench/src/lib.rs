//! `charon-bench`: a PerfTest-like load generator for any AMQP 0-9-1 broker.
//!
//! The tool ships its own lean client (see [`client`]): the handshake and the
//! rare methods are encoded with `amq-protocol`, while the hot path
//! (`basic.publish` + content header + body, `basic.deliver`, `basic.ack`) is
//! hand-encoded/parsed and batched so that many messages go out per syscall.
//! This keeps the tool well below the broker in CPU usage, so the same binary
//! can fairly measure RabbitMQ, LavinMQ and Charon.
//!
//! Entry point: [`run`] with [`BenchArgs`] (a `clap::Args` struct, embedded
//! by `charon bench`), returning a [`Report`]; [`run_and_print`] also prints
//! it. Examples: `bench` (stand-alone driver) and `null_broker` (a sink used
//! to measure the tool's own ceiling).

mod api_lateness;
mod archive;
mod args;
pub mod client;
mod consumer;
mod error;
mod histogram;
pub mod null_broker;
mod proc_stats;
mod producer;
mod report;
pub mod retry_scenarios;
mod runner;
mod scenario;
mod stats;
mod uri;

pub use archive::run_archive;
pub use args::BenchArgs;
pub use error::BenchError;
pub use report::{LatencyUs, Report};
pub use runner::{run, run_and_print};
pub use scenario::Scenario;
