//! charon-core
