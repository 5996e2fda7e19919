//! Reads what every opencode session on the machine is and did.
//!
//! Three backends sit behind one interface, [`SessionSource`]:
//! - `store`: opencode's SQLite store, opened read-only (the default; needs no running service);
//! - `server`: an `opencode serve` HTTP API, optionally behind Basic auth;
//! - `api`: the v2 service through `opencode api <METHOD> /api/…`.
//!
//! All of them produce the same values ([`Session`], [`Message`], [`Part`]), and the state of a
//! session ([`SessionState`]) is derived by the same rules whichever backend read it.
//!
//! Architecture invariant: nothing here writes to opencode's store, and nothing reads the
//! account or credential tables.

pub mod agents;
pub mod api;
pub mod backend;
pub mod config_files;
pub mod contract;
pub mod decode;
pub mod error;
pub mod filter;
pub mod http;
pub mod model;
pub mod paths;
pub mod proctable;
mod remote;
pub mod serve_process;
pub mod server;
pub mod source;
pub mod sse;
pub mod state;
pub mod store;
pub mod usage;

pub use contract::Contract;
pub use error::ClientError;
pub use model::*;
pub use source::{Liveness, ScanContext, SessionSource};
pub use store::StoreSource;
