//! `SO_RCVLOWAT` for `charon_server::quiet_socket` (a paced connection's socket signals
//! readable only once a read's worth has arrived while its reads pause): the `setsockopt` call,
//! registered at start.

/// Registers [`set`] with the server.
pub(crate) fn register() {
    charon_server::quiet_socket::set_hook(set);
}

/// Sets `fd`'s `SO_RCVLOWAT` to `bytes`; false if the kernel refused.
#[allow(unsafe_code)]
fn set(fd: std::os::fd::RawFd, bytes: i32) -> bool {
    let value: libc::c_int = bytes;
    // SAFETY: `value` is a valid c_int for the call's duration and its size is passed; `fd` is
    // a socket the calling connection owns (an invalid one only makes the call fail).
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}
