//! The writer task: the only code that writes to a connection's socket.
//!
//! The connection task encodes frames and hands them over as [`Outgoing`] chunks; the writer
//! coalesces whatever is queued into one write and, once written, releases the delivery credit
//! those chunks held (see [`crate::handles::ConnFlow`]).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::handles::ConnFlow;

/// Encoded frames plus the number of deliveries among them.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) bytes: Bytes,
    pub(crate) deliveries: usize,
}

/// Writes until the sender side is dropped or the socket fails. Returns the socket when every
/// write succeeded (the caller decides when to close it), `None` after a failed write.
pub(crate) async fn run<W: AsyncWrite + Unpin>(
    mut socket: W,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    flow: Arc<ConnFlow>,
) -> Option<W> {
    let mut batch = Vec::with_capacity(64);
    let mut buf = BytesMut::new();
    while rx.recv_many(&mut batch, 64).await > 0 {
        let mut delivered = 0;
        let ok = if let [one] = batch.as_slice() {
            // The usual case: one chunk (one read batch's replies), written without a copy.
            delivered = one.deliveries;
            let ok = socket.write_all(&one.bytes).await.is_ok();
            batch.clear();
            ok
        } else {
            buf.clear();
            for o in batch.drain(..) {
                delivered += o.deliveries;
                buf.extend_from_slice(&o.bytes);
            }
            socket.write_all(&buf).await.is_ok()
        };
        flow.release(delivered);
        if !ok {
            return None;
        }
    }
    Some(socket)
}
