#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod env;
mod error;
mod evaluate;
pub mod instructions;
pub mod mode;
pub mod naming;
pub mod permission;
pub mod roster;
pub mod secrets;
pub mod tier;
pub mod view;
mod yaml;

pub use env::{Environment, FakeEnv, SystemEnv};
pub use error::PolicyError;
pub use evaluate::{Delegation, DelegationRequest, Refusal, RefusalKind, evaluate};
pub use mode::Mode;
pub use roster::{AgentInfo, Roster};
pub use tier::Tier;

/// Which agents each mode allows, and the agent used when a request names none.
pub mod agents {
    pub use crate::evaluate::{AllowedAgent, ENV_DEFAULT_AGENT, allowed_agents, default_agent};
}
