//! Delegation policy for opencode-bridge.
