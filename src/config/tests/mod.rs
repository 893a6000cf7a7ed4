//! Unit tests for the config module.
