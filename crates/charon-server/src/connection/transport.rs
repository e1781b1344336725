//! What a connection runs over: plain TCP or TLS. Each transport splits into a read half (the
//! connection task) and a write half (the writer task); TCP without a lock (`into_split`),
//! TLS through `tokio::io::split` (one session, shared by both halves).

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// A byte stream a connection can be served on.
pub(crate) trait Transport: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The half the connection task reads.
    type Read: AsyncRead + Unpin + Send + 'static;
    /// The half the writer task writes.
    type Write: AsyncWrite + Unpin + Send + 'static;
    /// Splits into the two halves.
    fn split_io(self) -> (Self::Read, Self::Write);
    /// The local address of the connection (`fallback` when unknown).
    fn local_addr_or(&self, fallback: std::net::SocketAddr) -> std::net::SocketAddr;
    /// Whether the connection is TLS (the management API's `ssl`).
    fn is_tls(&self) -> bool {
        false
    }
    /// The write half as a TCP socket the connection task may also write to directly
    /// (`writer::Direct`), or back when it is not one.
    fn plain_tcp(write: Self::Write) -> Result<tokio::net::tcp::OwnedWriteHalf, Self::Write> {
        Err(write)
    }
    /// The read half's socket when it is plain TCP (`quiet_socket`), else None.
    fn read_fd(_read: &Self::Read) -> Option<std::os::fd::RawFd> {
        None
    }
}

impl Transport for TcpStream {
    type Read = tokio::net::tcp::OwnedReadHalf;
    type Write = tokio::net::tcp::OwnedWriteHalf;
    fn split_io(self) -> (Self::Read, Self::Write) {
        self.into_split()
    }
    fn local_addr_or(&self, fallback: std::net::SocketAddr) -> std::net::SocketAddr {
        self.local_addr().unwrap_or(fallback)
    }
    fn plain_tcp(write: Self::Write) -> Result<tokio::net::tcp::OwnedWriteHalf, Self::Write> {
        Ok(write)
    }
    fn read_fd(read: &Self::Read) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        Some(AsRef::<TcpStream>::as_ref(read).as_raw_fd())
    }
}

impl Transport for TlsStream<TcpStream> {
    type Read = tokio::io::ReadHalf<Self>;
    type Write = tokio::io::WriteHalf<Self>;
    fn split_io(self) -> (Self::Read, Self::Write) {
        tokio::io::split(self)
    }
    fn local_addr_or(&self, fallback: std::net::SocketAddr) -> std::net::SocketAddr {
        self.get_ref().0.local_addr().unwrap_or(fallback)
    }
    fn is_tls(&self) -> bool {
        true
    }
}
