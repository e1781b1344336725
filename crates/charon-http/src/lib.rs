//! charon-http
