//! A paced socket kept quiet while its reads pause (`read_pace`). The runtime's I/O driver
//! watches every socket edge-triggered: each segment a streaming client sends while the
//! connection is not reading still wakes a parked worker (one `epoll_wait` return and a park
//! again, for nothing to do), and a publisher that writes each message on its own sends one
//! segment a message. While reading pauses the socket's `SO_RCVLOWAT` is raised to the bytes
//! the next read has room for, so the kernel signals it readable only once that much has
//! arrived (or the peer closed); when the pause ends it is set back to 1, and Linux signals a
//! socket that already holds data at once (`tcp_set_rcvlowat`). What the pause gathers is read
//! as before. The mark is at most [`MAX_MARK`]: Linux grows the receive buffer, and clamps the
//! window to the mark, for a mark whose room is above the buffer it has. The `setsockopt`
//! itself is FFI: the binary registers it ([`set_hook`]); without a hook (tests of this crate,
//! TLS) nothing changes.

use std::os::fd::RawFd;
use std::sync::OnceLock;

/// Sets a socket's `SO_RCVLOWAT`; false if the call failed.
pub type SetRcvLowat = fn(RawFd, i32) -> bool;

static HOOK: OnceLock<SetRcvLowat> = OnceLock::new();

/// Highest mark set: about a millisecond of a fast publisher's frames (16 B messages), and well
/// under the default receive buffer's room (so the kernel changes neither buffer nor window).
pub const MAX_MARK: usize = 16 * 1024;

/// Registers the `setsockopt` call (once, at start).
pub fn set_hook(hook: SetRcvLowat) {
    let _ = HOOK.set(hook);
}

/// One connection's socket: raised while its reads pause, lowered when they resume and when
/// the connection ends (dropped).
#[derive(Debug)]
pub(crate) struct Quiet {
    fd: Option<RawFd>,
    raised: bool,
}

impl Quiet {
    /// For the socket `fd` (None: not a plain TCP socket, nothing to do).
    pub(crate) fn new(fd: Option<RawFd>) -> Self {
        Self {
            fd: fd.filter(|_| HOOK.get().is_some()),
            raised: false,
        }
    }

    /// Reads pause: signal readable only once `room` bytes are there.
    pub(crate) fn pause(&mut self, room: usize) {
        if let (Some(fd), Some(hook)) = (self.fd, HOOK.get()) {
            let bytes = i32::try_from(room.min(MAX_MARK)).unwrap_or(1).max(1);
            self.raised = hook(fd, bytes);
        }
    }

    /// Reads resume: readable again from one byte (signalled now if data is there).
    pub(crate) fn resume(&mut self) {
        if self.raised
            && let (Some(fd), Some(hook)) = (self.fd, HOOK.get())
        {
            hook(fd, 1);
            self.raised = false;
        }
    }
}

impl Drop for Quiet {
    fn drop(&mut self) {
        self.resume();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Calls the recording hook saw, for fds the tests below make up (negative: never a real
    /// socket of another test in this binary).
    static CALLS: Mutex<Vec<(RawFd, i32)>> = Mutex::new(Vec::new());

    fn record(fd: RawFd, bytes: i32) -> bool {
        if fd < 0 {
            CALLS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push((fd, bytes));
        }
        true
    }

    fn calls(fd: RawFd) -> Vec<i32> {
        CALLS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(f, _)| *f == fd)
            .map(|(_, b)| *b)
            .collect()
    }

    #[test]
    fn raised_for_a_pause_capped_and_lowered_on_resume_and_drop() {
        set_hook(record); // nothing else in this test binary registers one
        let mut q = Quiet::new(Some(-11));
        q.resume(); // not raised: no call
        q.pause(4096);
        q.resume();
        q.pause(1 << 20);
        q.pause(0);
        drop(q); // raised: lowered on drop
        assert_eq!(calls(-11), vec![4096, 1, MAX_MARK as i32, 1, 1]);
        let mut none = Quiet::new(None);
        none.pause(100);
        drop(none);
    }
}
