//! Lean AMQP 0-9-1 client used by the load tool.
//!
//! * [`frame_io`]: buffered frame reader over a TCP read half (large buffer,
//!   zero-copy frame slices).
//! * [`connection`]: handshake and synchronous "rare" methods (declare, purge,
//!   qos, consume …) encoded with `amq-protocol`.
//! * [`wire`]: hand-written encoders/decoders for the hot path.

pub mod connection;
pub mod frame_io;
pub mod wire;

pub use connection::Connection;
