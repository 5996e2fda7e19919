//! Test support for opencode-bridge.
