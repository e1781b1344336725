//! The store's errors.

/// What can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The writer thread is gone (the store was closed or a write failed before).
    #[error("the store is closed")]
    Closed,
    /// A record could not be decoded although its checksum matched (a bug or a newer format).
    #[error("undecodable record at index {index}: {reason}")]
    Undecodable {
        /// Its index.
        index: u64,
        /// Why.
        reason: &'static str,
    },
}

impl StoreError {
    pub(crate) fn io(op: &'static str, path: &std::path::Path, source: std::io::Error) -> Self {
        StoreError::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }
}
