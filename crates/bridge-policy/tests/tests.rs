//! The integration tests of this crate, one test binary (each module was a binary of its own;
//! one binary links the crate once instead of once per file).

mod evaluate;
mod fuzz_corpus;
mod mode;
mod naming;
mod roster;
mod secret_allowlist;
mod secret_guard;
