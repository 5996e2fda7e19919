//! Supervises delegated opencode runs.
