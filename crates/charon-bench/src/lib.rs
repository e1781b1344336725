//! charon-bench
