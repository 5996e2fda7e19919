//! Delegation policy for opencode-bridge.
//!
//! Pure and synchronous: no async runtime, no network, no processes. Everything the policy reads
//! (environment variables, marker files, agent definition files) comes through an
//! [`Environment`], so embedding tools and tests supply their own world ([`FakeEnv`]).
//!
//! ```
//! use bridge_policy::{evaluate, DelegationRequest, FakeEnv, Mode, Roster};
//! use std::path::Path;
//!
//! let env = FakeEnv::new().with_home("/home/u").with_dir("/home/u/proj/.git");
//! let cwd = Path::new("/home/u/proj");
//! let roster = Roster::load(&env, cwd);
//! let request = DelegationRequest::new("easy", "Add a unit test for parse_date in src/date.rs", cwd);
//! let delegation = evaluate(&request, &env, &roster).unwrap();
//! assert_eq!(delegation.mode.mode, Mode::Blueprint);
//! assert_eq!(delegation.agent.name, "worker");
//! assert!(delegation.prompt.contains("Never commit or push"));
//! ```

mod env;
mod error;
mod evaluate;
mod instructions;
mod mode;
pub mod naming;
pub mod permission;
mod roster;
pub mod secrets;
mod tier;
mod view;
mod yaml;

pub use env::{Environment, FakeEnv, SystemEnv};
pub use error::PolicyError;
pub use evaluate::{
    AllowedAgent, Delegation, DelegationRequest, ENV_DEFAULT_AGENT, Refusal, RefusalKind,
    allowed_agents, default_agent, evaluate,
};
pub use instructions::{VERIFICATION_RULES, run_instructions};
pub use mode::{
    ACCEPTED_MODES, Consulted, ENV_BRIDGE_MODE, ENV_CLAUDE_CONFIG_DIR, ENV_OPENCODE_MODE,
    MarkerKind, Mode, ModeDecision, ModeSource, Reading, detect_mode, project_root,
};
pub use roster::{
    Access, AgentInfo, AgentMode, AgentSource, Roster, RosterOrigin, Shell, WORKER, config_overlay,
    merge_config, read_only_permissions, worker_agent_config,
};
pub use tier::{ACCEPTED_TIERS, DELEGATE, KEEP, TIER_RULES, TIERS_FILE, Tier, TierLists};
pub use view::{AgentView, AllowlistView, ModeSummary, PolicyView};
