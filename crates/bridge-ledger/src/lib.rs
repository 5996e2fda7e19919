//! The ledger: what delegated tasks use and what they may still spend.
//!
//! - [`usage`]: tokens and money per attempt ([`Usage`], from [`TokenUsage`]), the prices that
//!   turn tokens into money and their bundled snapshot (`data/prices.json`), the usage ledger
//!   ([`usage::ledger`]), day/month budgets ([`usage::budget`]) and the reservations the bridges
//!   on one state directory share ([`usage::reserve`]).
//! - [`quota`]: quota windows, the reset times a provider or Claude Code names, held to a
//!   horizon, and whether a provider's message speaks of quota or of a rate.
//! - [`utc`]: instants as epoch milliseconds and as RFC 3339 text, and back.
//!
//! Architecture invariant: this crate knows nothing of runners, tasks or the supervisor; it
//! depends only on `bridge-env` (setting names) and `bridge-proc` (a reservation's owner). The
//! supervisor writes the ledger and asks it before a start; nothing here calls back up.

#![deny(unsafe_code)]

pub mod quota;
pub mod usage;
pub mod utc;

pub use usage::{TokenUsage, Usage};
