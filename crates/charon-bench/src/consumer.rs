//! Consumer: parses `basic.deliver` + header + body frames straight out of
//! the read buffer, records latency from the body timestamp and acks with
//! `multiple=true` every `--multi-ack` deliveries (one write per read); in
//! reject mode it dead-letters them instead (nack/reject with requeue=false).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hdrhistogram::Histogram;
use tokio::io::AsyncWriteExt;

use crate::BenchError;
use crate::client::Connection;
use crate::client::connection::{CHANNEL, check_async_method, close_frame};
use crate::client::frame_io::{FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD};
use crate::client::wire;
use crate::histogram::new_latency_histogram;
use crate::stats::Shared;

/// Consumer settings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConsumerCfg {
    /// Ack every N deliveries (0 = no-ack mode).
    pub(crate) multi_ack: u32,
    /// Whether bodies carry a timestamp.
    pub(crate) timestamps: bool,
    /// Reject every delivery with requeue=false instead of acking (`basic.nack` multiple every
    /// `multi_ack` deliveries, `basic.reject` each when `multi_ack` is 1), counting into
    /// `Shared::rejected`: the dead-letter scenario's main-queue consumers.
    pub(crate) reject: bool,
}

/// Where we are inside a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Header,
    Body { remaining: u64, first: bool },
}

/// Runs a consumer (already consuming) until `shared.stop`; returns its latency histogram.
pub(crate) async fn run_consumer(
    conn: Connection,
    cfg: ConsumerCfg,
    shared: Arc<Shared>,
) -> Histogram<u64> {
    let mut hist = new_latency_histogram();
    let r = consume_loop(conn, cfg, &shared, &mut hist).await;
    if let Err(e) = r
        && !shared.stop.is_cancelled()
    {
        shared.fail(e);
    }
    hist
}

async fn consume_loop(
    conn: Connection,
    cfg: ConsumerCfg,
    shared: &Shared,
    hist: &mut Histogram<u64>,
) -> Result<(), BenchError> {
    let Connection {
        mut reader,
        mut writer,
        ..
    } = conn;
    let mut state = State::Idle;
    let mut last_tag = 0u64;
    let mut unacked = 0u32;
    let mut acks = Vec::with_capacity(4096);
    loop {
        tokio::select! {
            r = reader.fill() => r?,
            _ = shared.stop.cancelled() => break,
        }
        let now = shared.now_nanos();
        let mut count = 0u64;
        while let Some(f) = reader.next_frame()? {
            match f.kind {
                FRAME_METHOD => match wire::method_ids(f.payload) {
                    Some((wire::CLASS_BASIC, wire::BASIC_DELIVER)) => {
                        last_tag = wire::deliver_tag(f.payload)
                            .ok_or_else(|| BenchError::Protocol("short basic.deliver".into()))?;
                        state = State::Header;
                    }
                    _ => {
                        let m = check_async_method(f.full)?;
                        if let amq_protocol::protocol::AMQPClass::Basic(
                            amq_protocol::protocol::basic::AMQPMethod::Cancel(_),
                        ) = m
                        {
                            return Err(BenchError::Protocol(
                                "consumer cancelled by broker".into(),
                            ));
                        }
                    }
                },
                FRAME_HEADER if state == State::Header => {
                    let size = wire::header_body_size(f.payload)
                        .ok_or_else(|| BenchError::Protocol("short content header".into()))?;
                    if size == 0 {
                        state = State::Idle;
                        count += 1;
                        unacked += 1;
                    } else {
                        state = State::Body {
                            remaining: size,
                            first: true,
                        };
                    }
                }
                FRAME_BODY => {
                    let State::Body { remaining, first } = state else {
                        return Err(BenchError::Protocol("unexpected body frame".into()));
                    };
                    if first && cfg.timestamps && !cfg.reject && f.payload.len() >= 8 {
                        let mut ts = [0u8; 8];
                        ts.copy_from_slice(&f.payload[..8]);
                        let sent = u64::from_le_bytes(ts);
                        if sent <= now {
                            hist.saturating_record(((now - sent) / 1000).max(1));
                        }
                    }
                    let remaining = remaining.saturating_sub(f.payload.len() as u64);
                    if remaining == 0 {
                        state = State::Idle;
                        count += 1;
                        unacked += 1;
                    } else {
                        state = State::Body {
                            remaining,
                            first: false,
                        };
                    }
                }
                FRAME_HEARTBEAT => {}
                k => {
                    return Err(BenchError::Protocol(format!(
                        "unexpected frame type {k} on channel {}",
                        f.channel
                    )));
                }
            }
            if cfg.multi_ack > 0 && unacked >= cfg.multi_ack {
                if cfg.reject && cfg.multi_ack == 1 {
                    wire::encode_reject_drop(&mut acks, CHANNEL, last_tag);
                } else if cfg.reject {
                    wire::encode_nack_drop(&mut acks, CHANNEL, last_tag, true);
                } else {
                    wire::encode_ack(&mut acks, CHANNEL, last_tag, true);
                }
                unacked = 0;
            }
        }
        if count > 0 {
            if cfg.reject {
                shared.rejected.fetch_add(count, Ordering::Relaxed);
            } else {
                shared.add_consumed(count, now);
            }
        }
        if !acks.is_empty() {
            writer.write_all(&acks).await?;
            acks.clear();
        }
    }
    // Best-effort clean close (unacked deliveries are requeued by the broker).
    let _ = writer.write_all(&close_frame()?).await;
    Ok(())
}
