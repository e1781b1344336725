//! A sliding window over a segment file for recovery: records are parsed from a few MiB read at
//! a time instead of the whole segment (64 MiB by default) held in memory at once.

use crate::storage::StorageFile;

/// Bytes read at a time (a window grows past this only for a larger record).
const CHUNK: usize = 4 << 20;

/// `buf` holds the file's bytes from `start`.
pub(crate) struct Window {
    buf: Vec<u8>,
    start: usize,
    /// The file's length.
    len: usize,
}

impl Window {
    /// A window over a file of `len` bytes, holding nothing yet.
    pub(crate) fn new(len: usize) -> Self {
        Window {
            buf: Vec::new(),
            start: 0,
            len,
        }
    }

    /// Reads from `at` on: at least a chunk, at least `at_least` bytes (up to the file's end).
    pub(crate) fn load(
        &mut self,
        file: &dyn StorageFile,
        at: usize,
        at_least: usize,
    ) -> std::io::Result<()> {
        let n = at_least.max(CHUNK).min(self.len.saturating_sub(at));
        self.buf.clear();
        self.buf.resize(n, 0);
        self.start = at;
        file.read_exact_at(&mut self.buf, at as u64)
    }

    /// The file's bytes from `pos` to the end of the window.
    pub(crate) fn rest(&self, pos: usize) -> &[u8] {
        pos.checked_sub(self.start)
            .and_then(|i| self.buf.get(i..))
            .unwrap_or(&[])
    }

    /// Whether the window reaches the end of the file (a record that does not parse is then
    /// really torn or corrupt, not cut by the window).
    pub(crate) fn at_end(&self) -> bool {
        self.start + self.buf.len() >= self.len
    }

    /// How many bytes the window holds from `pos`.
    pub(crate) fn held_from(&self, pos: usize) -> usize {
        self.rest(pos).len()
    }
}
