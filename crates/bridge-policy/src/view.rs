//! Everything the render crate needs for the `opencode_policy` text and the MCP instructions.

use std::path::Path;

use serde::Serialize;

use crate::env::Environment;
use crate::error::PolicyError;
use crate::evaluate::{AllowedAgent, allowed_agents, default_agent};
use crate::instructions::VERIFICATION_RULES;
use crate::mode::{Mode, ModeDecision, detect_mode};
use crate::roster::{Access, AgentMode, Roster, RosterOrigin};
use crate::secrets::Allowlist;
use crate::tier::{TIER_RULES, TierLists};

/// One roster agent as shown to the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AgentView {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: Option<String>,
    /// Read-only or editing.
    pub access: Access,
    /// Its opencode mode.
    pub opencode_mode: AgentMode,
    /// Where it is defined (a path, "opencode built-in", "bridge built-in", ...).
    pub source: String,
    /// Hidden in opencode: listed, never offered.
    pub hidden: bool,
    /// Why the access is what it is (one line).
    pub access_note: String,
}

/// A mode and what it allows, for the list of all modes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModeSummary {
    /// The mode.
    pub mode: Mode,
    /// What it allows.
    pub summary: &'static str,
}

/// The policy in force for one working directory, as data.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct PolicyView {
    /// The mode decision: mode, deciding source, every consulted source, project root.
    pub decision: ModeDecision,
    /// One line: mode and the source that decided it.
    pub reason: String,
    /// What the active mode allows.
    pub mode_summary: &'static str,
    /// Every mode with its summary.
    pub modes: Vec<ModeSummary>,
    /// The agent used when none is named.
    pub default_agent: String,
    /// The agents the active mode allows.
    pub allowed_agents: Vec<AllowedAgent>,
    /// Agents the active mode refuses by name (sensitive: designer, general).
    pub refused_agents: Vec<&'static str>,
    /// How tiers decide delegation.
    pub tier_rules: &'static [&'static str],
    /// Work to delegate (easy/medium) and to keep (hard): the defaults, or the project's
    /// (see [`TierLists`]).
    pub tiers: TierLists,
    /// How to check a delegated result.
    pub verification_rules: &'static [&'static str],
    /// Every agent opencode knows here.
    pub roster: Vec<AgentView>,
    /// Problems met while reading agent files.
    pub roster_warnings: Vec<String>,
    /// Where the roster was learnt (one line): opencode itself, or the agent files and why.
    pub roster_origin: String,
    /// opencode's message when it refuses to load its configuration here.
    pub roster_load_error: Option<String>,
    /// The plugins opencode's configuration loads (when opencode was asked).
    pub plugins: Vec<String>,
    /// The secret-guard allowlist in force, if any.
    pub secret_allowlist: Option<AllowlistView>,
}

/// The secret-guard allowlist file in force: where it is and how many entries it has (never
/// the values).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllowlistView {
    /// The file.
    pub path: String,
    /// Usable entries (exact values and patterns).
    pub entries: usize,
    /// Lines skipped (e.g. a pattern that does not compile).
    pub problems: Vec<String>,
}

impl PolicyView {
    /// Detects the mode, loads the roster and assembles the view.
    ///
    /// # Errors
    /// [`PolicyError::InvalidMode`] when a mode source holds an unrecognised value.
    ///
    /// ```
    /// use bridge_policy::{view::PolicyView, FakeEnv, Mode};
    /// use std::path::Path;
    /// let env = FakeEnv::new().with_var("OPENCODE_BRIDGE_MODE", "insensitive");
    /// let view = PolicyView::build(&env, Path::new("/w"), None).unwrap();
    /// assert_eq!(view.decision.mode, Mode::Insensitive);
    /// assert_eq!(view.default_agent, "worker");
    /// ```
    pub fn build(
        env: &dyn Environment,
        cwd: &Path,
        mode_arg: Option<Mode>,
    ) -> Result<PolicyView, PolicyError> {
        let decision = detect_mode(env, cwd, mode_arg)?;
        let roster = Roster::load(env, cwd);
        Ok(PolicyView::from_parts(env, decision, &roster))
    }

    /// Assembles the view from a decision and a roster already at hand.
    pub fn from_parts(
        env: &dyn Environment,
        decision: ModeDecision,
        roster: &Roster,
    ) -> PolicyView {
        let mode = decision.mode;
        // The nearest directory with `.claude` (or `.git`) is the project root.
        let tiers = decision
            .project_root
            .as_deref()
            .map(|r| TierLists::load(env, r))
            .unwrap_or_default();
        PolicyView {
            reason: decision.reason(),
            mode_summary: mode.summary(),
            modes: Mode::ALL
                .iter()
                .map(|m| ModeSummary {
                    mode: *m,
                    summary: m.summary(),
                })
                .collect(),
            default_agent: default_agent(env, mode),
            allowed_agents: allowed_agents(mode, roster),
            refused_agents: if mode == Mode::Sensitive {
                vec!["designer", "general"]
            } else {
                Vec::new()
            },
            tier_rules: TIER_RULES,
            tiers,
            verification_rules: VERIFICATION_RULES,
            roster: roster
                .agents()
                .map(|a| AgentView {
                    name: a.name.clone(),
                    description: a.description.clone(),
                    access: a.access,
                    opencode_mode: a.opencode_mode,
                    source: a.source.to_string(),
                    hidden: a.hidden,
                    access_note: a.access_note.clone(),
                })
                .collect(),
            roster_warnings: roster.warnings().to_vec(),
            roster_origin: match roster.origin() {
                RosterOrigin::Opencode { via } => format!("from {via}"),
                RosterOrigin::Files { why: Some(why) } => {
                    format!("read from the agent files by the bridge ({why})")
                }
                RosterOrigin::Files { why: None } => {
                    "read from the agent files by the bridge".to_owned()
                }
            },
            roster_load_error: roster.load_error().map(str::to_owned),
            plugins: roster.plugins().to_vec(),
            // The project's allowlist file (found from the project root, where it lives).
            secret_allowlist: decision.project_root.as_deref().and_then(|root| {
                let allow = Allowlist::load(env, root);
                allow.path().map(|p| AllowlistView {
                    path: p.display().to_string(),
                    entries: allow.len(),
                    problems: allow.problems().to_vec(),
                })
            }),
            decision,
        }
    }
}
