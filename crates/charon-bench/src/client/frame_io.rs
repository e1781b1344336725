//! Buffered AMQP frame reader: one large read buffer, frames are returned as
//! slices into it so the hot path never allocates.

use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;

use crate::BenchError;

/// Frame type: method.
pub const FRAME_METHOD: u8 = 1;
/// Frame type: content header.
pub const FRAME_HEADER: u8 = 2;
/// Frame type: content body.
pub const FRAME_BODY: u8 = 3;
/// Frame type: heartbeat.
pub const FRAME_HEARTBEAT: u8 = 8;
/// Frame end octet.
pub const FRAME_END: u8 = 0xCE;

const READ_BUF: usize = 512 * 1024;

/// A frame borrowed from the reader's buffer.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// Frame type octet.
    pub kind: u8,
    /// Channel number.
    pub channel: u16,
    /// Payload (without the 7-byte header and the frame-end octet).
    pub payload: &'a [u8],
    /// The whole frame, header and frame-end included (for `amq_protocol::frame::parse_frame`).
    pub full: &'a [u8],
}

/// Reads frames from a socket with a large buffer.
#[derive(Debug)]
pub struct FrameReader {
    rd: OwnedReadHalf,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl FrameReader {
    /// Wraps a read half.
    pub fn new(rd: OwnedReadHalf) -> Self {
        Self {
            rd,
            buf: vec![0; READ_BUF],
            start: 0,
            end: 0,
        }
    }

    /// Reads more bytes from the socket (at least one) into the buffer.
    pub async fn fill(&mut self) -> Result<(), BenchError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let needed = self.needed_len();
        if self.buf.len() - self.start < needed {
            self.buf.resize(needed.max(READ_BUF), 0);
        }
        if self.end == self.buf.len() || self.buf.len() - self.start < needed {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let n = self.rd.read(&mut self.buf[self.end..]).await?;
        if n == 0 {
            return Err(BenchError::Protocol("connection closed by peer".into()));
        }
        self.end += n;
        Ok(())
    }

    /// Length of the frame at the head of the buffer, if its header is complete.
    fn needed_len(&self) -> usize {
        let avail = &self.buf[self.start..self.end];
        if avail.len() < 7 {
            return 7;
        }
        let size = u32::from_be_bytes([avail[3], avail[4], avail[5], avail[6]]) as usize;
        size + 8
    }

    /// Returns the next complete frame in the buffer without reading the socket.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, BenchError> {
        let avail = &self.buf[self.start..self.end];
        if avail.len() < 7 {
            return Ok(None);
        }
        let size = u32::from_be_bytes([avail[3], avail[4], avail[5], avail[6]]) as usize;
        let total = size + 8;
        if avail.len() < total {
            return Ok(None);
        }
        if avail[total - 1] != FRAME_END {
            return Err(BenchError::Protocol(format!(
                "bad frame end 0x{:02x} (frame type {})",
                avail[total - 1],
                avail[0]
            )));
        }
        let start = self.start;
        self.start += total;
        let full = &self.buf[start..start + total];
        Ok(Some(Frame {
            kind: full[0],
            channel: u16::from_be_bytes([full[1], full[2]]),
            payload: &full[7..total - 1],
            full,
        }))
    }

    /// Reads until a complete frame is available, then returns it.
    pub async fn read_frame(&mut self) -> Result<Frame<'_>, BenchError> {
        loop {
            if self.has_frame() {
                break;
            }
            self.fill().await?;
        }
        self.next_frame()?
            .ok_or_else(|| BenchError::Protocol("frame vanished".into()))
    }

    fn has_frame(&self) -> bool {
        let len = self.end - self.start;
        len >= 7 && len >= self.needed_len()
    }
}
