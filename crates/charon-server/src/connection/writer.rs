//! The writer task, and the direct write that spares it.
//!
//! The connection task encodes frames and hands them over as [`Outgoing`] chunks; the writer
//! coalesces whatever is queued into one write and, once written, releases the delivery credit
//! those chunks held (see [`crate::handles::ConnFlow`]).
//!
//! On plain TCP the connection task first writes itself ([`Direct::try_write`], non-blocking)
//! when nothing is queued for the writer: the usual small batch (a read's replies, a queue
//! actor's deliveries) then costs one `sendto` and no wake-up of the writer task (on a 2-core
//! machine a wake-up often meant a sleeping worker thread woken through a futex). Only what the
//! socket does not take at once goes to the writer, which waits for the socket; while anything
//! is queued there, the connection task does not write, so bytes stay in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
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
        let (bytes, delivered) = gather(&mut batch, &mut buf);
        let ok = socket.write_all(bytes).await.is_ok();
        batch.clear();
        flow.release(delivered);
        if !ok {
            return None;
        }
    }
    Some(socket)
}

/// The TCP write half as the connection task sees it: writes directly while the writer task
/// has nothing queued.
#[derive(Debug)]
pub(crate) struct Direct {
    socket: Arc<OwnedWriteHalf>,
    /// Chunks handed to the writer task and not yet written. Only the connection task adds
    /// (before handing a chunk over); the writer subtracts once they are written.
    queued: Arc<AtomicUsize>,
}

impl Direct {
    /// Writes what the socket takes of `buf` now, if the writer has nothing queued (else
    /// nothing, to keep the order). Returns how many bytes were written; the caller hands the
    /// rest to the writer, which also reports a failed socket.
    pub(crate) fn try_write(&self, buf: &[u8]) -> usize {
        if self.queued.load(Ordering::Acquire) != 0 {
            return 0;
        }
        let mut done = 0;
        while done < buf.len() {
            match self.socket.try_write(buf.get(done..).unwrap_or_default()) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        done
    }

    /// A chunk goes to the writer task.
    pub(crate) fn queue(&self) {
        self.queued.fetch_add(1, Ordering::AcqRel);
    }
}

/// A TCP write half shared by the connection task ([`Direct`]) and the writer task
/// ([`run_shared`]).
pub(crate) fn share(socket: OwnedWriteHalf) -> (Direct, Arc<OwnedWriteHalf>, Arc<AtomicUsize>) {
    let socket = Arc::new(socket);
    let queued = Arc::new(AtomicUsize::new(0));
    let direct = Direct {
        socket: socket.clone(),
        queued: queued.clone(),
    };
    (direct, socket, queued)
}

/// [`run`] for a shared TCP write half: writes what the connection task could not write
/// directly, then tells it (`queued`) that it may write again. Returns the socket when every
/// write succeeded, `None` after a failed write.
pub(crate) async fn run_shared(
    socket: Arc<OwnedWriteHalf>,
    queued: Arc<AtomicUsize>,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    flow: Arc<ConnFlow>,
) -> Option<Arc<OwnedWriteHalf>> {
    let mut batch = Vec::with_capacity(64);
    let mut buf = BytesMut::new();
    while rx.recv_many(&mut batch, 64).await > 0 {
        let chunks = batch.len();
        let (bytes, delivered) = gather(&mut batch, &mut buf);
        let ok = write_all_shared(&socket, bytes).await;
        batch.clear();
        flow.release(delivered);
        if !ok {
            return None;
        }
        queued.fetch_sub(chunks, Ordering::AcqRel);
    }
    Some(socket)
}

/// What a batch of chunks writes, and the deliveries they carry: the usual single chunk (one
/// read batch's replies) as it is, without a copy; several gathered into `buf`.
fn gather<'a>(batch: &'a mut Vec<Outgoing>, buf: &'a mut BytesMut) -> (&'a [u8], usize) {
    if batch.len() != 1 {
        buf.clear();
        let mut delivered = 0;
        for o in batch.drain(..) {
            delivered += o.deliveries;
            buf.extend_from_slice(&o.bytes);
        }
        return (&buf[..], delivered);
    }
    batch
        .first()
        .map_or((&[][..], 0), |one| (&one.bytes[..], one.deliveries))
}

/// Writes all of `buf`, waiting while the socket is full.
async fn write_all_shared(socket: &OwnedWriteHalf, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        match socket.try_write(buf) {
            Ok(0) => return false,
            Ok(n) => buf = buf.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if socket.writable().await.is_err() {
                    return false;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

/// The running writer task, whichever kind.
pub(crate) enum Task<W> {
    Owned(tokio::task::JoinHandle<Option<W>>),
    Shared(tokio::task::JoinHandle<Option<Arc<OwnedWriteHalf>>>),
}

/// The write half back from a writer whose writes all succeeded.
pub(crate) enum End<W> {
    Owned(W),
    Shared(Arc<OwnedWriteHalf>),
}

/// Starts the writer for `write`: on plain TCP also the [`Direct`] path for the connection task.
pub(crate) fn start<S: super::Transport>(
    write: S::Write,
    rx: mpsc::UnboundedReceiver<Outgoing>,
    flow: Arc<ConnFlow>,
) -> (Task<S::Write>, Option<Direct>) {
    match S::plain_tcp(write) {
        Ok(tcp) => {
            let (direct, socket, queued) = share(tcp);
            let task = tokio::spawn(run_shared(socket, queued, rx, flow));
            (Task::Shared(task), Some(direct))
        }
        Err(write) => (Task::Owned(tokio::spawn(run(write, rx, flow))), None),
    }
}

impl<W> Task<W> {
    /// Waits until the writer has written everything handed to it (every sender dropped).
    pub(crate) async fn finish(self) -> Option<End<W>> {
        match self {
            Task::Owned(t) => t.await.ok().flatten().map(End::Owned),
            Task::Shared(t) => t.await.ok().flatten().map(End::Shared),
        }
    }
}

impl<W: AsyncWrite + Unpin> End<W> {
    /// Shuts the socket's write side down (the connection task's [`Direct`] is gone by then).
    pub(crate) async fn shutdown(self) {
        match self {
            End::Owned(mut w) => {
                let _ = w.shutdown().await;
            }
            End::Shared(shared) => {
                if let Ok(mut w) = Arc::try_unwrap(shared) {
                    let _ = w.shutdown().await;
                }
            }
        }
    }
}
