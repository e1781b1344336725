//! charon-server
