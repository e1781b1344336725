//! The archive's errors.

/// What can go wrong in the archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The database answered with an error (or could not be reached).
    #[error("archive database: {0}")]
    Db(String),
    /// The request is invalid (bad filter, sort, id list...).
    #[error("{0}")]
    Invalid(String),
    /// The database was written by a newer Charon.
    #[error("the archive database has schema version {found}, newer than this Charon's {known}")]
    TooNew {
        /// Version in the database.
        found: i64,
        /// Newest version this build knows.
        known: i64,
    },
    /// The URL names no supported backend.
    #[error("unsupported archive_url '{0}' (sqlite:// or postgresql://)")]
    BadUrl(String),
}

impl From<rusqlite::Error> for ArchiveError {
    fn from(e: rusqlite::Error) -> Self {
        ArchiveError::Db(e.to_string())
    }
}

impl From<postgres::Error> for ArchiveError {
    fn from(e: postgres::Error) -> Self {
        // `Display` of a server error is only "db error"; the server's own message says what failed.
        match e.as_db_error() {
            Some(d) => ArchiveError::Db(format!("{}: {}", d.code().code(), d.message())),
            None => ArchiveError::Db(e.to_string()),
        }
    }
}
