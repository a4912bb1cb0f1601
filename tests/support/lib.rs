//! Shared helpers for the real-peer tests.
