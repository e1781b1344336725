//! charon-protocol
