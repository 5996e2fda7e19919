//! The integration tests of this crate, one test binary (each module was a binary of its own;
//! one binary links the crate once instead of once per file).

mod backend_choice;
mod backend_rename;
mod fuzz_corpus;
mod service_faults;
mod service_fixtures;
mod service_live;
mod service_probe;
mod service_support;
mod store_fixture;
